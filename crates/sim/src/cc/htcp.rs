//! H-TCP (D. Leith, R. Shorten, "H-TCP: TCP for high-speed and long-distance networks",
//! PFLDnet 2004; D. Leith, "H-TCP: TCP Congestion Control for High Bandwidth-Delay Product
//! Paths", IETF Internet-Draft draft-leith-tcp-htcp).
//!
//! The increase depends on the time Δ elapsed since the last congestion event:
//!
//! ```text
//! α(Δ) = 1                                   Δ ≤ Δ_L = 1 s
//! α(Δ) = 1 + 10(Δ − Δ_L) + ((Δ − Δ_L)/2)²    Δ > Δ_L
//! ```
//!
//! and, so that flows with different backoff factors share fairly, the increase applied is
//! `2(1 − β)·α(Δ)` segments per round-trip time (counted per acknowledged segment:
//! `2(1 − β)α/cwnd` each). On a congestion event the window becomes `β·cwnd`, with the
//! adaptive backoff `β = RTT_min/RTT_max` clamped to [0.5, 0.8], so that the queue the flow
//! built drains without leaving the link idle.
//!
//! Choices, against Linux `tcp_htcp` and the draft:
//! * RTT_min and RTT_max are the smallest and largest RTT samples seen on the connection
//!   (from `on_packets_acked`); Linux smooths and rate-limits the RTT_max update.
//! * The draft's throughput-based reset of β is on by default (`Htcp::default()`, as Linux's
//!   `use_bandwidth_switch=1`): B(k), the highest throughput measured over one-RTT_min
//!   intervals outside recovery during the k-th congestion epoch, is compared at each
//!   congestion event with B(k−1); if it changed by more than 20 % (or there is no B(k−1),
//!   as at the first congestion event) β = 0.5, so that flows converge quickly when the
//!   available bandwidth changes. In this mode β is also 0.5 when RTT_min ≤ 10 ms, as in
//!   Linux. `Htcp::new(false)` uses the adaptive backoff alone.
//! * Linux's optional RTT scaling of α is not implemented.
//! * Δ starts at the first ACK of the connection and restarts at every loss or timeout.
//! * Slow start is Reno's.

use super::{Ack, CongestionControl, Window};
use crate::time::{Time, NS_PER_S};

/// Δ_L: the "low-speed" period after a congestion event during which H-TCP increases like
/// standard TCP (draft-leith-tcp-htcp, 1 second).
pub const DELTA_L: f64 = 1.0;
/// Lower clamp of the adaptive backoff factor β.
pub const BETA_MIN: f64 = 0.5;
/// Upper clamp of the adaptive backoff factor β.
pub const BETA_MAX: f64 = 0.8;
/// Relative change of the throughput between congestion epochs beyond which the
/// throughput-based reset sets β = 0.5 (draft-leith-tcp-htcp, 20 %).
pub const BANDWIDTH_SWITCH: f64 = 0.2;
/// With the throughput-based reset (Linux mode), paths with RTT_min at or below this use
/// β = 0.5 (Linux `htcp_beta_update`).
pub const ADAPTIVE_MIN_RTT: Time = 10 * crate::time::NS_PER_MS;

/// α(Δ) before the fairness scaling, for Δ in seconds since the last congestion event.
pub fn alpha_raw(delta: f64) -> f64 {
    if delta <= DELTA_L {
        1.0
    } else {
        let d = delta - DELTA_L;
        1.0 + 10.0 * d + (d / 2.0) * (d / 2.0)
    }
}

/// The adaptive backoff factor `RTT_min/RTT_max` clamped to [0.5, 0.8] (0.5 until both
/// are known).
pub fn beta_from_rtts(rtt_min: Time, rtt_max: Time) -> f64 {
    if rtt_min == 0 || rtt_max == 0 {
        return BETA_MIN;
    }
    (rtt_min as f64 / rtt_max as f64).clamp(BETA_MIN, BETA_MAX)
}

/// H-TCP's per-flow state.
#[derive(Debug, Clone)]
pub struct Htcp {
    /// Time of the last congestion event (loss or timeout), the origin of Δ; `None` until
    /// the first ACK of the connection.
    last_congestion: Option<Time>,
    /// Smallest RTT sample seen (RTT_min of the adaptive backoff), ns; 0 until a sample.
    rtt_min: Time,
    /// Largest RTT sample seen (RTT_max of the adaptive backoff), ns; 0 until a sample.
    rtt_max: Time,
    /// Backoff factor β used by the last congestion event and by the fairness scaling
    /// `2(1 − β)` of α; 0.5 (standard TCP) until the first congestion event.
    beta: f64,
    /// Fraction of a segment accumulated towards the next window increase (in [0, 1)).
    frac: f64,
    /// Throughput-based reset of β enabled (constructor flag).
    bandwidth_switch: bool,
    /// Start of the current throughput measurement interval; `None` until the next ACK
    /// outside recovery after a congestion event.
    tp_start: Option<Time>,
    /// Segments delivered since `tp_start`.
    tp_segments: u64,
    /// B(k): highest throughput (segments/s) measured in the current congestion epoch.
    b_max: f64,
    /// B(k−1): the same for the previous epoch; 0 when unknown (before the first event).
    b_prev: f64,
}

impl Default for Htcp {
    fn default() -> Self {
        Self::new(true)
    }
}

impl Htcp {
    /// H-TCP with or without the throughput-based reset of β.
    pub fn new(bandwidth_switch: bool) -> Self {
        Self {
            last_congestion: None,
            rtt_min: 0,
            rtt_max: 0,
            beta: BETA_MIN,
            frac: 0.0,
            bandwidth_switch,
            tp_start: None,
            tp_segments: 0,
            b_max: 0.0,
            b_prev: 0.0,
        }
    }

    /// The increase applied, in segments per round-trip time: `2(1 − β)·α(Δ)` at `now`.
    pub fn alpha(&self, now: Time) -> f64 {
        let since = self.last_congestion.map_or(0, |t| now.saturating_sub(t));
        2.0 * (1.0 - self.beta) * alpha_raw(since as f64 / NS_PER_S as f64)
    }

    /// The current backoff factor β.
    pub fn beta(&self) -> f64 {
        self.beta
    }
}

impl CongestionControl for Htcp {
    fn name(&self) -> &'static str {
        "htcp"
    }

    fn has_packets_acked(&self) -> bool {
        true
    }

    fn on_packets_acked(&mut self, _w: &mut Window, ack: &Ack) {
        self.last_congestion.get_or_insert(ack.now);
        if let Some(r) = ack.rtt.filter(|&r| r > 0) {
            if self.rtt_min == 0 || r < self.rtt_min {
                self.rtt_min = r;
            }
            self.rtt_max = self.rtt_max.max(r);
        }
    }

    fn on_ack(&mut self, w: &mut Window, ack: &Ack) {
        self.last_congestion.get_or_insert(ack.now);
        // Throughput over intervals of at least one RTT_min (ACKs outside recovery only).
        match self.tp_start {
            None => {
                self.tp_start = Some(ack.now);
                self.tp_segments = 0;
            }
            Some(start) => {
                self.tp_segments += ack.acked as u64;
                let dt = ack.now.saturating_sub(start);
                if self.rtt_min > 0 && dt >= self.rtt_min {
                    let rate = self.tp_segments as f64 / (dt as f64 / NS_PER_S as f64);
                    self.b_max = self.b_max.max(rate);
                    self.tp_start = Some(ack.now);
                    self.tp_segments = 0;
                }
            }
        }
        let Some(acked) = w.slow_start_then_avoid(ack) else {
            return;
        };
        let alpha = self.alpha(ack.now);
        w.grow_fraction(&mut self.frac, acked as f64 * alpha / w.cwnd.max(1) as f64);
    }

    /// A congestion event: β ← RTT_min/RTT_max clamped to [0.5, 0.8] (or 0.5 by the
    /// throughput-based reset), Δ restarts, and the window becomes `β·cwnd` (at least two
    /// segments).
    fn ssthresh_on_loss(&mut self, w: &Window, now: Time) -> u32 {
        let stable =
            self.b_prev > 0.0 && (self.b_max - self.b_prev).abs() <= BANDWIDTH_SWITCH * self.b_prev;
        self.beta = if self.bandwidth_switch && (!stable || self.rtt_min <= ADAPTIVE_MIN_RTT) {
            BETA_MIN
        } else {
            beta_from_rtts(self.rtt_min, self.rtt_max)
        };
        self.b_prev = self.b_max;
        self.b_max = 0.0;
        self.tp_start = None;
        self.last_congestion = Some(now);
        self.frac = 0.0;
        ((w.cwnd as f64 * self.beta).floor() as u32).max(2)
    }

    fn on_rto(&mut self, _w: &Window, now: Time) {
        self.last_congestion = Some(now);
        self.tp_start = None;
        self.frac = 0.0;
    }

    fn on_recovery_exit(&mut self, _w: &mut Window, _now: Time) {
        self.frac = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NS_PER_MS;

    fn ack(now: Time, acked: u32, rtt: Time) -> Ack {
        Ack {
            now,
            acked,
            rtt: Some(rtt),
            min_rtt: rtt,
            cwnd_limited: true,
            ..Ack::default()
        }
    }

    /// One round trip at `now`: the whole window acknowledged by ACKs of two segments.
    fn round(h: &mut Htcp, w: &mut Window, now: Time, rtt: Time) {
        let mut left = w.cwnd;
        while left > 0 {
            let n = left.min(2);
            left -= n;
            let a = ack(now, n, rtt);
            h.on_packets_acked(w, &a);
            h.on_ack(w, &a);
        }
    }

    #[test]
    fn alpha_follows_the_htcp_law() {
        assert_eq!(alpha_raw(0.5), 1.0);
        assert_eq!(alpha_raw(1.0), 1.0);
        // 1 + 10·1 + (1/2)² = 11.25
        assert_eq!(alpha_raw(2.0), 11.25);
        // 1 + 10·4 + (4/2)² = 45
        assert_eq!(alpha_raw(5.0), 45.0);
        // Scaled by 2(1 − β): with β = 0.8, 0.4·45 = 18.
        let h = Htcp {
            last_congestion: Some(0),
            beta: 0.8,
            ..Htcp::new(false)
        };
        assert!((h.alpha(5 * NS_PER_S) - 18.0).abs() < 1e-9);
        assert!((h.alpha(NS_PER_S / 2) - 0.4).abs() < 1e-9);
        // With β = 0.5 the scaling is 1.
        let h = Htcp {
            last_congestion: Some(0),
            ..Htcp::new(false)
        };
        assert_eq!(h.alpha(2 * NS_PER_S), 11.25);
    }

    #[test]
    fn beta_is_rtt_ratio_clamped() {
        let ms = NS_PER_MS;
        assert!((beta_from_rtts(70 * ms, 100 * ms) - 0.7).abs() < 1e-12);
        assert_eq!(beta_from_rtts(90 * ms, 100 * ms), 0.8);
        assert_eq!(beta_from_rtts(20 * ms, 100 * ms), 0.5);
        assert_eq!(beta_from_rtts(100 * ms, 100 * ms), 0.8);

        // Through the hooks: samples of 60 and 100 ms give β = 0.6 and ssthresh = 0.6·1000.
        let mut h = Htcp::new(false);
        let w = Window {
            cwnd: 1000,
            ssthresh: 500,
            cwnd_cnt: 0,
        };
        h.on_packets_acked(&mut w.clone(), &ack(0, 2, 60 * ms));
        h.on_packets_acked(&mut w.clone(), &ack(ms, 2, 100 * ms));
        h.on_packets_acked(&mut w.clone(), &ack(2 * ms, 2, 80 * ms));
        assert_eq!(h.ssthresh_on_loss(&w, 3 * ms), 600);
        assert!((h.beta() - 0.6).abs() < 1e-12);
        // A path whose RTT doubles under load backs off by half.
        let mut h = Htcp::new(false);
        h.on_packets_acked(&mut w.clone(), &ack(0, 2, 50 * ms));
        h.on_packets_acked(&mut w.clone(), &ack(ms, 2, 200 * ms));
        assert_eq!(h.ssthresh_on_loss(&w, 2 * ms), 500);
        // An unqueued path backs off by 0.8 only.
        let mut h = Htcp::new(false);
        h.on_packets_acked(&mut w.clone(), &ack(0, 2, 100 * ms));
        assert_eq!(h.ssthresh_on_loss(&w, ms), 800);
        assert_eq!(h.ssthresh_on_loss(&Window { cwnd: 2, ..w }, ms), 2);
    }

    #[test]
    fn grows_alpha_of_delta_segments_per_rtt() {
        let rtt = 100 * NS_PER_MS;
        let mut h = Htcp::new(false);
        let mut w = Window {
            cwnd: 1000,
            ssthresh: 1000,
            cwnd_cnt: 0,
        };
        // Congestion event at t = 0 with RTT_min = RTT_max: β = 0.8, scaling 2(1 − 0.8) = 0.4.
        h.on_packets_acked(&mut w.clone(), &ack(0, 2, rtt));
        w.ssthresh = h.ssthresh_on_loss(&w, 0);
        w.cwnd = w.ssthresh;
        h.on_recovery_exit(&mut w, 0);
        assert_eq!(w.cwnd, 800);
        // Round at Δ = 0.5 s: α = 0.4 per RTT (fraction carried).
        let mut cwnd_before = w.cwnd;
        round(&mut h, &mut w, NS_PER_S / 2, rtt);
        assert_eq!(w.cwnd, cwnd_before);
        // Round at Δ = 2 s: 0.4·11.25 = 4.5 (+0.4 carried) → +4.
        cwnd_before = w.cwnd;
        round(&mut h, &mut w, 2 * NS_PER_S, rtt);
        assert_eq!(w.cwnd - cwnd_before, 4);
        // Round at Δ = 5 s: 0.4·45 = 18 (+0.9 carried) → +18.
        cwnd_before = w.cwnd;
        round(&mut h, &mut w, 5 * NS_PER_S, rtt);
        assert_eq!(w.cwnd - cwnd_before, 18);
        // Ten rounds at Δ = 11 s: α = 0.4·(1 + 100 + 25) = 50.4 per RTT. A round delivers
        // the W₀ segments of its starting window, each adding α/W, so (dW/dn = α/W)
        // W₁ = √(W₀² + 2αW₀): slightly under α per round as the window grows within it.
        cwnd_before = w.cwnd;
        let mut x = cwnd_before as f64;
        for _ in 0..10 {
            round(&mut h, &mut w, 11 * NS_PER_S, rtt);
            x = (x * x + 2.0 * 50.4 * x).sqrt();
        }
        let grown = (w.cwnd - cwnd_before) as f64;
        let expected = x - cwnd_before as f64;
        assert!(expected > 480.0 && expected < 504.0, "law gives {expected}");
        assert!(
            (grown - expected).abs() <= 1.5,
            "grew {grown}, law {expected}"
        );
    }

    #[test]
    fn loss_restarts_delta() {
        let rtt = 100 * NS_PER_MS;
        let mut h = Htcp::new(false);
        let w = Window {
            cwnd: 1000,
            ssthresh: 1000,
            cwnd_cnt: 0,
        };
        h.on_packets_acked(&mut w.clone(), &ack(0, 2, rtt));
        h.ssthresh_on_loss(&w, 10 * NS_PER_S);
        // 0.5 s after the loss: back to the low-speed α (scaled by 2(1 − 0.8)).
        assert!((h.alpha(10 * NS_PER_S + NS_PER_S / 2) - 0.4).abs() < 1e-9);
        h.on_rto(&w, 20 * NS_PER_S);
        assert!((h.alpha(21 * NS_PER_S) - 0.4).abs() < 1e-9);
    }

    /// Delivers `per_rtt` segments per RTT for `rounds` RTTs from `*now`, ACKs of two.
    fn deliver(h: &mut Htcp, w: &mut Window, now: &mut Time, per_rtt: u32, rounds: u32, rtt: Time) {
        for _ in 0..rounds {
            for _ in 0..per_rtt / 2 {
                let a = ack(*now, 2, rtt);
                h.on_packets_acked(w, &a);
                h.on_ack(w, &a);
            }
            *now += rtt;
        }
    }

    #[test]
    fn throughput_change_resets_beta() {
        let rtt = 100 * NS_PER_MS;
        let mut h = Htcp::default();
        let w = Window {
            cwnd: 2000,
            ssthresh: 1000,
            cwnd_cnt: 0,
        };
        // The window the ACKs grow; losses are taken at a fixed 2000 segments.
        let mut grown = w;
        let mut now = 0;
        // RTT_min = RTT_max: the adaptive backoff alone would give 0.8.
        // Epoch 1 at 10000 segments/s; first congestion event: no B(k−1), β = 0.5.
        deliver(&mut h, &mut grown, &mut now, 1000, 10, rtt);
        assert_eq!(h.ssthresh_on_loss(&w, now), 1000);
        assert_eq!(h.beta(), 0.5);
        // Epoch 2 at the same throughput: β = RTT_min/RTT_max clamped = 0.8.
        deliver(&mut h, &mut grown, &mut now, 1000, 10, rtt);
        assert_eq!(h.ssthresh_on_loss(&w, now), 1600);
        assert_eq!(h.beta(), 0.8);
        // Epoch 3 at 13000 segments/s (+30 %): reset to 0.5.
        deliver(&mut h, &mut grown, &mut now, 1300, 10, rtt);
        assert_eq!(h.ssthresh_on_loss(&w, now), 1000);
        // Epoch 4 at 14300 segments/s (+10 %): adaptive again.
        deliver(&mut h, &mut grown, &mut now, 1430, 10, rtt);
        assert_eq!(h.ssthresh_on_loss(&w, now), 1600);
        // Without the reset the first event already uses the adaptive backoff.
        let mut h = Htcp::new(false);
        let mut now = 0;
        deliver(&mut h, &mut grown, &mut now, 1000, 10, rtt);
        assert_eq!(h.ssthresh_on_loss(&w, now), 1600);
    }

    #[test]
    fn short_rtt_paths_back_off_by_half_in_linux_mode() {
        let rtt = 5 * NS_PER_MS;
        let mut h = Htcp::default();
        let w = Window {
            cwnd: 2000,
            ssthresh: 1000,
            cwnd_cnt: 0,
        };
        let mut w2 = w;
        let mut now = 0;
        for _ in 0..2 {
            deliver(&mut h, &mut w2, &mut now, 100, 10, rtt);
            assert_eq!(h.ssthresh_on_loss(&w, now), 1000);
        }
    }

    #[test]
    fn registered_under_its_linux_name() {
        let cc = crate::cc::by_name("htcp").expect("registered");
        assert_eq!(cc.name(), "htcp");
        assert!(crate::cc::NAMES.contains(&"htcp"));
    }
}
