//! CUBIC (I. Rhee, L. Xu, S. Ha, A. Zimmermann, L. Eggert, R. Scheffenegger, RFC 9438,
//! "CUBIC for Fast and Long-Distance Networks", 2023), with HyStart slow-start exit as in
//! Linux `tcp_cubic` (S. Ha, I. Rhee, "Taming the elephants: New TCP slow start",
//! Computer Networks 55(9), 2011).
//!
//! Congestion avoidance follows a cubic function of the time `t` since the current
//! congestion-avoidance epoch began (RFC 9438 §4.2):
//!
//! ```text
//! W_cubic(t) = C·(t − K)³ + W_max,    K = ∛((W_max − cwnd_epoch)/C)
//! ```
//!
//! with C = 0.4 and `cwnd_epoch` the window when the epoch began (β_cubic·W_max after a
//! loss). The curve is concave below `W_max` (fast growth, then a plateau near the window
//! that saw the last loss) and convex above it (max probing). On each ACK the window moves
//! towards `target = W_cubic(t + RTT)`, clamped to [cwnd, 1.5·cwnd], by
//! `(target − cwnd)/cwnd` per acknowledged segment (§4.4, §4.5).
//!
//! Reno-friendly region (§4.3): `W_est` estimates the window of an AIMD flow with the same
//! loss response, growing by `α_cubic = 3(1 − β)/(1 + β)` segments per window of acknowledged
//! segments (1 once `W_est` reaches `cwnd_prior`); when `W_cubic(t) < W_est`, cwnd follows
//! `W_est`.
//!
//! Multiplicative decrease (§4.6): ssthresh = β_cubic·cwnd, β_cubic = 0.7. Fast convergence
//! (§4.7): a loss below the previous `W_max` sets `W_max = cwnd·(1 + β)/2`. Timeout (§4.8):
//! the next epoch uses K = 0 and `W_max` = cwnd at its start.
//!
//! Choices:
//! * RTT in `W_cubic(t + RTT)` is the connection's minimum RTT (as Linux's `delay_min`).
//! * The epoch starts at the first ACK of congestion avoidance (after recovery ends); if
//!   cwnd is then at or above `W_max` (or none is known), K = 0 and the curve's origin is
//!   the current window (convex growth), as in Linux.
//! * Idle or application-limited periods do not grow the window (`cwnd_limited`), but the
//!   epoch is not shifted over them: the trait has no transmit-start event (Linux's
//!   `CA_EVENT_TX_START`).
//! * HyStart is ON by default (`Cubic::default()`, used by `by_name("cubic")`), as Linux's
//!   `hystart=1` with both detectors: from a window of 16 segments on, slow start ends
//!   (ssthresh ← cwnd) when within one round ACKs spaced at most 2 ms apart span more than
//!   half the minimum RTT (ACK train), or when the smallest of the round's first 8 RTT
//!   samples exceeds the minimum RTT by `clamp(min_rtt/8, 4 ms, 16 ms)` (delay increase).
//!   A round ends once `snd_una` passes the `snd_nxt` of its start, as in Linux; delay
//!   samples within 1 s of a congestion-avoidance epoch's start are ignored, as in Linux's
//!   `bictcp_acked`. `Cubic::new(false)` disables it.

use super::{Ack, CongestionControl, Window, GSO_MAX_SIZE};
use crate::time::{Time, NS_PER_MS, NS_PER_S};

/// The cubic scaling constant C, segments/s³ (RFC 9438 §5.1).
pub const C: f64 = 0.4;
/// β_cubic, the multiplicative decrease factor (RFC 9438 §4.6).
pub const BETA: f64 = 0.7;
/// ssthresh = cwnd·BETA_NUM/BETA_DEN (β_cubic in integer arithmetic).
const BETA_NUM: u64 = 7;
const BETA_DEN: u64 = 10;
/// HyStart acts only from this window on (Linux `hystart_low_window`).
pub const HYSTART_LOW_WINDOW: u32 = 16;
/// Largest spacing of two ACKs of the same train (Linux `hystart_ack_delta_us`).
pub const HYSTART_ACK_DELTA: Time = 2 * NS_PER_MS;
/// The most HyStart's ACK train allows for ACKs spread by the sender's bursts
/// (`hystart_ack_delay`).
const HYSTART_ACK_DELAY_MAX: Time = NS_PER_MS;
/// RTT samples taken at the start of each round for the delay detector.
pub const HYSTART_MIN_SAMPLES: u32 = 8;
/// Bounds of the delay-increase threshold `min_rtt/8`.
pub const HYSTART_DELAY_MIN: Time = 4 * NS_PER_MS;
pub const HYSTART_DELAY_MAX: Time = 16 * NS_PER_MS;

/// `α_cubic = 3(1 − β)/(1 + β)` (RFC 9438 §4.3): the AIMD increase with the same average
/// window as Reno at β = 0.7.
pub fn alpha_cubic() -> f64 {
    3.0 * (1.0 - BETA) / (1.0 + BETA)
}

/// HyStart's per-round state (Linux `struct bictcp`'s HyStart fields).
#[derive(Debug, Default, Clone)]
struct HyStart {
    /// Slow-start exit detected (ssthresh was set to cwnd then).
    found: bool,
    /// The round ends once `snd_una` passes this (`snd_nxt` at its start); `None`: the next
    /// ACK starts a round.
    end_seq: Option<u64>,
    /// Time the current round started.
    round_start: Time,
    /// Time of the last ACK of the current ACK train.
    last_ack: Time,
    /// Smallest RTT among the first samples of the round, ns.
    curr_rtt: Time,
    /// RTT samples taken in the current round (up to `HYSTART_MIN_SAMPLES`).
    sample_cnt: u32,
}

/// CUBIC's per-flow state.
#[derive(Debug, Clone)]
pub struct Cubic {
    /// HyStart enabled (constructor flag).
    hystart_enabled: bool,
    /// HyStart state.
    hystart: HyStart,
    /// W_max: window (segments) before the last reduction, lowered by fast convergence
    /// (RFC 9438 §4.7); 0 when none is known (before any loss, after a timeout).
    w_max: f64,
    /// cwnd_prior: window (segments) when ssthresh was last set by a loss (RFC 9438 §4.6);
    /// `W_est` reaching it switches `α_cubic` to 1.
    cwnd_prior: f64,
    /// Start of the current congestion-avoidance epoch (t = 0 of W_cubic); `None` until the
    /// first ACK in congestion avoidance after a loss.
    epoch_start: Option<Time>,
    /// K: time (s) from the epoch start for W_cubic to reach `origin` (RFC 9438 eq. 2).
    k: f64,
    /// The plateau of the current curve: W_max of the epoch, or the window at the epoch
    /// start if it was already at or above W_max.
    origin: f64,
    /// W_est: the Reno-friendly window estimate (RFC 9438 §4.3), segments.
    w_est: f64,
    /// Fraction of a segment accumulated towards the next increase (in [0, 1)).
    frac: f64,
    /// Smallest RTT sample seen (ns): HyStart's `delay_min` and the RTT of `W_cubic(t+RTT)`.
    min_rtt: Time,
}

impl Default for Cubic {
    fn default() -> Self {
        Self::new(true)
    }
}

impl Cubic {
    /// CUBIC with HyStart on or off.
    pub fn new(hystart: bool) -> Self {
        Self {
            hystart_enabled: hystart,
            hystart: HyStart::default(),
            w_max: 0.0,
            cwnd_prior: 0.0,
            epoch_start: None,
            k: 0.0,
            origin: 0.0,
            w_est: 0.0,
            frac: 0.0,
            min_rtt: 0,
        }
    }

    /// W_cubic(t) of the current epoch, t in seconds since its start.
    pub fn w_cubic(&self, t: f64) -> f64 {
        let d = t - self.k;
        C * d * d * d + self.origin
    }

    /// K of the current epoch, seconds.
    pub fn k(&self) -> f64 {
        self.k
    }

    /// W_max, segments.
    pub fn w_max(&self) -> f64 {
        self.w_max
    }

    fn start_epoch(&mut self, cwnd: f64, now: Time) {
        self.epoch_start = Some(now);
        if self.w_max > cwnd {
            self.k = ((self.w_max - cwnd) / C).cbrt();
            self.origin = self.w_max;
        } else {
            self.k = 0.0;
            self.origin = cwnd;
        }
        self.w_est = cwnd;
    }

    /// Linux `hystart_update`: per round (a window of data), an ACK train spanning half
    /// the minimum RTT, or an RTT rise over its first samples, ends slow start there.
    fn hystart_update(&mut self, w: &mut Window, ack: &Ack, rtt: Time) {
        let h = &mut self.hystart;
        if h.end_seq.is_none_or(|e| ack.snd_una > e) {
            h.end_seq = Some(ack.snd_nxt);
            h.round_start = ack.now;
            h.last_ack = ack.now;
            h.curr_rtt = Time::MAX;
            h.sample_cnt = 0;
        }
        if w.cwnd < HYSTART_LOW_WINDOW {
            return;
        }
        // ACK train: closely spaced ACKs spanning the minimum RTT plus the time four
        // GSO-sized bursts take at the pacing rate, halved for a sender that does not pace.
        if ack.now.saturating_sub(h.last_ack) <= HYSTART_ACK_DELTA {
            h.last_ack = ack.now;
            let mut threshold = self.min_rtt + hystart_ack_delay(ack.pacing_rate);
            if !ack.paced {
                threshold /= 2;
            }
            if ack.now - h.round_start > threshold {
                h.found = true;
            }
        }
        // Delay increase over the first samples of the round.
        h.curr_rtt = h.curr_rtt.min(rtt);
        if h.sample_cnt < HYSTART_MIN_SAMPLES {
            h.sample_cnt += 1;
        } else {
            let thresh = (self.min_rtt / 8).clamp(HYSTART_DELAY_MIN, HYSTART_DELAY_MAX);
            if h.curr_rtt > self.min_rtt + thresh {
                h.found = true;
            }
        }
        if h.found {
            w.ssthresh = w.cwnd;
        }
    }
}

/// Linux `hystart_ack_delay`: four GSO-sized bursts at the pacing rate, at most 1 ms (0
/// while the rate is unknown).
fn hystart_ack_delay(pacing_rate: f64) -> Time {
    if pacing_rate <= 0.0 {
        return 0;
    }
    ((4.0 * GSO_MAX_SIZE / pacing_rate * 1e9) as Time).min(HYSTART_ACK_DELAY_MAX)
}

impl CongestionControl for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    fn has_packets_acked(&self) -> bool {
        true
    }

    fn on_packets_acked(&mut self, w: &mut Window, ack: &Ack) {
        let Some(rtt) = ack.rtt.filter(|&r| r > 0) else {
            return;
        };
        // Discard delay samples right after a loss episode (Linux `bictcp_acked`).
        if self
            .epoch_start
            .is_some_and(|e| ack.now.saturating_sub(e) < NS_PER_S)
        {
            return;
        }
        if self.min_rtt == 0 || rtt < self.min_rtt {
            self.min_rtt = rtt;
        }
        if self.hystart_enabled && !self.hystart.found && w.in_slow_start() {
            self.hystart_update(w, ack, rtt);
        }
    }

    fn on_ack(&mut self, w: &mut Window, ack: &Ack) {
        if !ack.cwnd_limited {
            return;
        }
        let mut acked = ack.acked;
        if w.in_slow_start() {
            acked = w.slow_start(acked);
            if acked == 0 {
                return;
            }
        }
        let cwnd = w.cwnd.max(1) as f64;
        let epoch_start = match self.epoch_start {
            Some(t) => t,
            None => {
                self.start_epoch(cwnd + self.frac, ack.now);
                ack.now
            }
        };
        let t = (ack.now - epoch_start) as f64 / NS_PER_S as f64;
        let min_rtt = if self.min_rtt > 0 {
            self.min_rtt
        } else {
            ack.min_rtt
        };
        let rtt = min_rtt as f64 / NS_PER_S as f64;

        // Reno-friendly estimate (RFC 9438 §4.3).
        let alpha = if self.w_est >= self.cwnd_prior {
            1.0
        } else {
            alpha_cubic()
        };
        self.w_est += alpha * acked as f64 / cwnd;

        let window = cwnd + self.frac;
        if self.w_cubic(t) < self.w_est {
            // Reno-friendly region: cwnd follows W_est.
            if self.w_est > window {
                w.cwnd = self.w_est.floor() as u32;
                self.frac = self.w_est - self.w_est.floor();
            }
            return;
        }
        // Concave and convex regions (RFC 9438 §4.4, §4.5).
        let target = self.w_cubic(t + rtt).clamp(window, 1.5 * window);
        w.grow_fraction(&mut self.frac, acked as f64 * (target - window) / cwnd);
    }

    /// β_cubic·cwnd (at least two segments); records W_max with fast convergence and ends
    /// the epoch.
    fn ssthresh_on_loss(&mut self, w: &Window, _now: Time) -> u32 {
        let cwnd = w.cwnd as f64;
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + BETA) / 2.0
        } else {
            cwnd
        };
        self.cwnd_prior = cwnd;
        self.epoch_start = None;
        self.frac = 0.0;
        ((w.cwnd as u64 * BETA_NUM / BETA_DEN) as u32).max(2)
    }

    /// RFC 9438 §4.8: the next epoch starts from the current window with K = 0; HyStart
    /// watches the new slow start afresh (as Linux resets CUBIC on entering Loss).
    fn on_rto(&mut self, _w: &Window, _now: Time) {
        self.w_max = 0.0;
        self.epoch_start = None;
        self.frac = 0.0;
        self.hystart = HyStart::default();
    }

    fn on_recovery_exit(&mut self, _w: &mut Window, _now: Time) {
        self.epoch_start = None;
        self.frac = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTT: Time = 100 * NS_PER_MS;

    fn ack(now: Time, acked: u32, rtt: Time, in_flight: u32) -> Ack {
        Ack {
            now,
            acked,
            rtt: Some(rtt),
            min_rtt: rtt,
            in_flight,
            cwnd_limited: true,
            ..Ack::default()
        }
    }

    /// One round trip at `now` as HyStart sees it: ACKs of two segments advance
    /// `snd_una`, and the sender refills its window after each.
    fn hs_round(c: &mut Cubic, w: &mut Window, now: Time, rtt: Time, una: &mut u64) {
        let mut left = w.cwnd;
        while left > 0 {
            let n = left.min(2);
            left -= n;
            let nxt = *una + w.cwnd as u64;
            *una += n as u64;
            let a = Ack {
                snd_una: *una,
                snd_nxt: nxt,
                ..ack(now, n, rtt, w.cwnd)
            };
            c.on_packets_acked(w, &a);
            c.on_ack(w, &a);
        }
    }

    /// One round trip at `now`: the whole window acknowledged by ACKs of two segments.
    fn round(c: &mut Cubic, w: &mut Window, now: Time, rtt: Time) {
        let mut left = w.cwnd;
        while left > 0 {
            let n = left.min(2);
            left -= n;
            let a = ack(now, n, rtt, w.cwnd);
            c.on_packets_acked(w, &a);
            c.on_ack(w, &a);
        }
    }

    /// A loss, then recovery ending with cwnd = ssthresh, as the sender does.
    fn loss(c: &mut Cubic, w: &mut Window, now: Time) {
        w.ssthresh = c.ssthresh_on_loss(w, now);
        w.cwnd_cnt = 0;
        w.cwnd = w.ssthresh;
        c.on_recovery_exit(w, now);
    }

    /// A flow that lost at `cwnd` 1000 and exited recovery at 700, at time 0.
    fn after_loss_at_1000() -> (Cubic, Window) {
        let mut c = Cubic::new(false);
        let mut w = Window {
            cwnd: 1000,
            ssthresh: 500,
            cwnd_cnt: 0,
        };
        // One RTT sample so that the minimum RTT is known.
        c.on_packets_acked(&mut w, &ack(0, 2, RTT, 1000));
        loss(&mut c, &mut w, 0);
        (c, w)
    }

    #[test]
    fn beta_reduction_and_fast_convergence() {
        let mut c = Cubic::new(false);
        let w = |cwnd| Window {
            cwnd,
            ssthresh: 10,
            cwnd_cnt: 0,
        };
        assert_eq!(c.ssthresh_on_loss(&w(1000), 0), 700);
        assert_eq!(c.w_max(), 1000.0);
        // ⌊0.7·801⌋ = 560; fast convergence: 801 < 1000 → W_max = 801·1.7/2 = 680.85.
        assert_eq!(c.ssthresh_on_loss(&w(801), 0), 560);
        assert!((c.w_max() - 680.85).abs() < 1e-9);
        // Above the (lowered) W_max: W_max = cwnd.
        c.ssthresh_on_loss(&w(900), 0);
        assert_eq!(c.w_max(), 900.0);
        assert_eq!(c.ssthresh_on_loss(&w(2), 0), 2);
    }

    #[test]
    fn k_is_the_cube_root_of_the_reduction_over_c() {
        let (mut c, mut w) = after_loss_at_1000();
        round(&mut c, &mut w, 0, RTT);
        // K = ∛((1000 − 700)/0.4) = ∛750
        assert!((c.k() - 9.085_602_964_160_698).abs() < 1e-9, "K {}", c.k());
        // Fast convergence: a loss at 900 < W_max gives W_max = 765 and, from 630, K = ∛337.5.
        let mut w2 = Window { cwnd: 900, ..w };
        loss(&mut c, &mut w2, NS_PER_S);
        assert_eq!(w2.cwnd, 630);
        assert!((c.w_max() - 765.0).abs() < 1e-9);
        round(&mut c, &mut w2, NS_PER_S, RTT);
        assert!((c.k() - 6.962_383_250_419_167).abs() < 1e-9, "K {}", c.k());
    }

    #[test]
    fn window_follows_the_cubic_function() {
        let (mut c, mut w) = after_loss_at_1000();
        let k = 750f64.cbrt();
        let law = |t: f64| C * (t - k).powi(3) + 1000.0;
        let mut checked = 0;
        for r in 0..140u64 {
            round(&mut c, &mut w, r * RTT, RTT);
            // After the round run at t_r the window has reached ≈ W(t_r + RTT); it trails
            // the curve by less than one RTT of growth, plus the integer rounding of cwnd.
            let t = (r + 1) as f64 * 0.1;
            let slack = (law(t) - law(t - 0.1)).abs() + 2.0;
            let err = w.cwnd as f64 - law(t);
            assert!(err.abs() <= slack, "t {t}: cwnd {} law {}", w.cwnd, law(t));
            // Near the plateau (|t − K| ≤ 4 s, slope ≤ 2 segments per RTT): within 2 segments.
            if (t - k).abs() <= 4.0 {
                assert!(err.abs() <= 2.0, "t {t}: cwnd {} law {}", w.cwnd, law(t));
                checked += 1;
            }
        }
        assert_eq!(checked, 80);
        // Convex, above W_max at t = 14 s: W(14) = 1000 + 0.4·4.914³ = 1047.5, trailed by
        // less than one RTT of growth (2.9 segments) plus rounding.
        assert!((1044..=1048).contains(&w.cwnd), "cwnd {}", w.cwnd);
    }

    #[test]
    fn concave_then_convex() {
        let (mut c, mut w) = after_loss_at_1000();
        // Growth per 2-second block: 0–2, 2–4, 4–6, 6–8 s (concave: shrinking), then
        // 10–12, 12–14, 14–16 s (convex: growing).
        let mut at = vec![w.cwnd];
        for r in 0..160u64 {
            round(&mut c, &mut w, r * RTT, RTT);
            if (r + 1) % 20 == 0 {
                at.push(w.cwnd);
            }
        }
        let g: Vec<i64> = at.windows(2).map(|p| p[1] as i64 - p[0] as i64).collect();
        // Law: W(2)−W(0) = 0.4(9.086³ − 7.086³) = 157.7; then 84.4, 35.6, 8.9.
        assert!((g[0] - 158).abs() <= 6, "{g:?}");
        assert!(g[0] > g[1] && g[1] > g[2] && g[2] > g[3], "{g:?}");
        assert!(g[5] < g[6] && g[6] < g[7], "{g:?}");
        // Plateau: W(8) = 999.5, the window has not passed W_max.
        assert!(at[4] <= 1000, "{at:?}");
    }

    #[test]
    fn reno_friendly_region_on_short_rtt() {
        // W_max = 100 and RTT 1 ms: W_cubic barely moves in tens of ms, while W_est grows by
        // α_cubic = 3·0.3/1.7 = 0.529 per RTT: after 40 rounds 70 + 21.2 = 91.2.
        let rtt = NS_PER_MS;
        let mut c = Cubic::new(false);
        let mut w = Window {
            cwnd: 100,
            ssthresh: 50,
            cwnd_cnt: 0,
        };
        c.on_packets_acked(&mut w, &ack(0, 2, rtt, 100));
        loss(&mut c, &mut w, 0);
        assert_eq!(w.cwnd, 70);
        for r in 0..40u64 {
            round(&mut c, &mut w, r * rtt, rtt);
        }
        assert!((90..=91).contains(&w.cwnd), "cwnd {}", w.cwnd);
        assert!((alpha_cubic() - 0.529_411_764_705_882_4).abs() < 1e-12);
        // Once W_est reaches cwnd_prior (100), α = 1: one segment per RTT.
        let mut r = 40;
        while w.cwnd < 101 {
            round(&mut c, &mut w, r * rtt, rtt);
            r += 1;
        }
        assert!(r < 40 + 22, "took {r} rounds");
        let before = w.cwnd;
        for _ in 0..10 {
            round(&mut c, &mut w, r * rtt, rtt);
            r += 1;
        }
        assert!(
            (9..=10).contains(&(w.cwnd - before)),
            "{} → {}",
            before,
            w.cwnd
        );
    }

    #[test]
    fn unused_window_does_not_grow() {
        let (mut c, mut w) = after_loss_at_1000();
        let before = w;
        c.on_ack(
            &mut w,
            &Ack {
                cwnd_limited: false,
                ..ack(5 * NS_PER_S, 100, RTT, 0)
            },
        );
        assert_eq!(w, before);
    }

    #[test]
    fn hystart_delay_increase_ends_slow_start() {
        let mut c = Cubic::default();
        let mut w = Window::new(32);
        let mut una = 0;
        hs_round(&mut c, &mut w, 0, RTT, &mut una);
        assert_eq!(w.cwnd, 64);
        assert_eq!(w.ssthresh, u32::MAX);
        // Next round the RTT is 115 ms > 100 + clamp(100/8, 4, 16) = 112.5 ms: after the
        // first 8 samples (8 ACKs: cwnd 64 + 16 = 80) the 9th ACK ends slow start.
        hs_round(&mut c, &mut w, RTT, 115 * NS_PER_MS, &mut una);
        assert_eq!(w.ssthresh, 80);
        // Without HyStart the same rounds keep doubling.
        let mut c = Cubic::new(false);
        let mut w = Window::new(32);
        let mut una = 0;
        hs_round(&mut c, &mut w, 0, RTT, &mut una);
        hs_round(&mut c, &mut w, RTT, 115 * NS_PER_MS, &mut una);
        assert_eq!(w.cwnd, 128);
        assert_eq!(w.ssthresh, u32::MAX);
    }

    #[test]
    fn hystart_small_delay_increase_is_ignored() {
        let mut c = Cubic::default();
        let mut w = Window::new(32);
        let mut una = 0;
        hs_round(&mut c, &mut w, 0, RTT, &mut una);
        // 112 ms ≤ 112.5 ms: no exit.
        hs_round(&mut c, &mut w, RTT, 112 * NS_PER_MS, &mut una);
        assert_eq!(w.cwnd, 128);
        assert_eq!(w.ssthresh, u32::MAX);
    }

    /// 64 ACKs of two segments `spacing` apart, all in one round from cwnd 128, minimum
    /// RTT `rtt`: the ssthresh HyStart leaves.
    fn ack_train(spacing: Time, rtt: Time, pacing_rate: f64, paced: bool) -> u32 {
        let mut c = Cubic::default();
        let mut w = Window::new(128);
        for k in 0..64u64 {
            let a = Ack {
                snd_una: 2 * (k + 1),
                snd_nxt: 128 + 2 * k,
                pacing_rate,
                paced,
                ..ack(k * spacing, 2, rtt, 128)
            };
            c.on_packets_acked(&mut w, &a);
            c.on_ack(&mut w, &a);
        }
        w.ssthresh
    }

    #[test]
    fn hystart_ack_train_ends_slow_start() {
        // 1 ms apart, RTT 100 ms: the train passes half the minimum RTT (50 ms) at the ACK
        // 51 ms after the first, when cwnd = 128 + 2·51.
        assert_eq!(ack_train(NS_PER_MS, RTT, 0.0, false), 230);
        // Below 16 segments HyStart does not act.
        let mut c = Cubic::default();
        let mut w = Window::new(10);
        let a = ack(0, 2, RTT, 10);
        c.on_packets_acked(&mut w, &a);
        c.on_ack(&mut w, &a);
        let a = ack(60 * NS_PER_MS, 2, 200 * NS_PER_MS, 10);
        c.on_packets_acked(&mut w, &a);
        c.on_ack(&mut w, &a);
        assert_eq!(w.ssthresh, u32::MAX);
    }

    #[test]
    fn hystart_ack_train_allows_for_the_senders_bursts() {
        // ACKs 0.1 ms apart, RTT 10 ms.
        let train =
            |pacing_rate, paced| ack_train(NS_PER_MS / 10, 10 * NS_PER_MS, pacing_rate, paced);
        // Rate unknown: half the minimum RTT, passed at the ACK 5.1 ms after the first.
        assert_eq!(train(0.0, false), 128 + 2 * 51);
        // 37 MB/s: four 64 KiB bursts take 7 ms, capped at 1 ms: (10 + 1)/2 = 5.5 ms.
        assert_eq!(train(37e6, false), 128 + 2 * 56);
        // 2.6 GB/s: 0.1 ms more, (10 + 0.1)/2 = 5.05 ms.
        assert_eq!(train(2.6e9, false), 128 + 2 * 51);
        // A paced sender waits for a whole minimum RTT (+1 ms): no exit within 6.4 ms.
        assert_eq!(train(37e6, true), u32::MAX);
    }

    #[test]
    fn registered_under_its_linux_name() {
        let cc = crate::cc::by_name("cubic").expect("registered");
        assert_eq!(cc.name(), "cubic");
        assert!(crate::cc::NAMES.contains(&"cubic"));
    }
}
