//! BIC-TCP, Binary Increase Congestion control (L. Xu, K. Harfoush, I. Rhee, "Binary
//! Increase Congestion Control (BIC) for Fast Long-Distance Networks", IEEE INFOCOM 2004),
//! with the parameters of Linux `tcp_bic`.
//!
//! After a congestion event the window that saw the loss, `W_max`, is the upper end of a
//! binary search and the reduced window its lower end. Once per round-trip time the window
//! moves by an increment chosen from its distance to `W_max`:
//!
//! * below `W_max` (binary search increase): half the distance, i.e. to the midpoint, but
//!   at most `S_max` (additive increase when far away) and at least `S_min`;
//! * at or above `W_max` (max probing): the distance already travelled beyond `W_max`,
//!   clamped to [`S_min`, `S_max`]: a slow start that doubles the overshoot each round,
//!   then additive increase of `S_max`;
//! * at or below `low_window` = 14 segments: Reno, one segment per round-trip time.
//!
//! On a congestion event the window becomes β·cwnd with β = 819/1024 ≈ 0.8 (Reno's
//! halving at or below `low_window`). With fast convergence, a loss below the previous
//! `W_max` (the flow is losing bandwidth to others) sets `W_max = cwnd·(1 + β)/2` instead of
//! `cwnd`, releasing bandwidth sooner.
//!
//! Choices: the paper's midpoint search (Linux divides the distance by 4) with
//! `S_max` = Linux's `max_increment` = 16 and the paper's `S_min` = 0.01 segment. The
//! increment is chosen at the start of each round (a round being the acknowledgement of the
//! window in force when it started) and spread evenly over that round's acknowledged
//! segments; the window is real-valued: its integer part is `Window::cwnd`, its fraction is
//! kept here. A timeout forgets `W_max` (as Linux resets BIC on entering Loss), so the next
//! congestion avoidance probes from scratch. Slow start is Reno's.

use super::{Ack, CongestionControl, Window};
use crate::time::Time;

/// At or below this window (segments) BIC behaves like Reno (Linux `low_window`).
pub const LOW_WINDOW: u32 = 14;
/// S_max: the largest increment per round-trip time, in segments (Linux `max_increment`).
pub const MAX_INCREMENT: f64 = 16.0;
/// S_min: the smallest increment per round-trip time, in segments (the paper's value).
pub const MIN_INCREMENT: f64 = 0.01;
/// β numerator: the window is multiplied by `BETA / BETA_SCALE` on loss (Linux `beta`).
pub const BETA: u32 = 819;
/// β denominator (Linux `BICTCP_BETA_SCALE`).
pub const BETA_SCALE: u32 = 1024;

/// BIC's per-flow state.
#[derive(Debug, Default, Clone)]
pub struct Bic {
    /// W_max: the window (segments) at the last congestion event, as lowered by fast
    /// convergence; the target of the binary search. 0 before any loss and after a timeout.
    w_max: f64,
    /// Fractional part of the real-valued window (the integer part is `Window::cwnd`).
    frac: f64,
    /// Segments still to be acknowledged in the current round; 0: the next acknowledged
    /// segment starts a new round.
    round_left: u32,
    /// Window (segments) at the start of the current round: its segments share the round's
    /// increment.
    round_cwnd: u32,
    /// Increment (segments) chosen for the current round from the distance to `w_max`.
    round_inc: f64,
}

impl Bic {
    /// The window as a real number of segments.
    pub fn window(&self, w: &Window) -> f64 {
        w.cwnd as f64 + self.frac
    }

    /// The target of the binary search (0 if none).
    pub fn w_max(&self) -> f64 {
        self.w_max
    }

    /// The increment per round-trip time for a window of `cwnd` segments.
    pub fn increment(&self, cwnd: f64) -> f64 {
        if cwnd <= LOW_WINDOW as f64 {
            return 1.0;
        }
        let inc = if cwnd < self.w_max {
            (self.w_max - cwnd) / 2.0
        } else {
            cwnd - self.w_max
        };
        inc.clamp(MIN_INCREMENT, MAX_INCREMENT)
    }

    fn reset_round(&mut self) {
        self.frac = 0.0;
        self.round_left = 0;
    }
}

impl CongestionControl for Bic {
    fn name(&self) -> &'static str {
        "bic"
    }

    fn on_ack(&mut self, w: &mut Window, ack: &Ack) {
        let Some(acked) = w.slow_start_then_avoid(ack) else {
            return;
        };
        for _ in 0..acked {
            if self.round_left == 0 {
                self.round_cwnd = w.cwnd.max(1);
                self.round_left = self.round_cwnd;
                self.round_inc = self.increment(self.window(w));
            }
            self.round_left -= 1;
            w.grow_fraction(&mut self.frac, self.round_inc / self.round_cwnd as f64);
        }
    }

    /// Records `W_max` (with fast convergence) and returns β·cwnd (Reno's half at or below
    /// `low_window`), at least two segments.
    fn ssthresh_on_loss(&mut self, w: &Window, _now: Time) -> u32 {
        let cwnd = w.cwnd as f64;
        let beta = BETA as f64 / BETA_SCALE as f64;
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + beta) / 2.0
        } else {
            cwnd
        };
        self.reset_round();
        if w.cwnd <= LOW_WINDOW {
            (w.cwnd / 2).max(2)
        } else {
            ((w.cwnd as u64 * BETA as u64 / BETA_SCALE as u64) as u32).max(2)
        }
    }

    fn on_rto(&mut self, _w: &Window, _now: Time) {
        self.w_max = 0.0;
        self.reset_round();
    }

    fn on_recovery_exit(&mut self, _w: &mut Window, _now: Time) {
        self.reset_round();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::testing::{ack, round};

    /// A loss at `cwnd`, then recovery ending with cwnd = ssthresh, as the sender does.
    fn loss(b: &mut Bic, w: &mut Window) {
        w.ssthresh = b.ssthresh_on_loss(w, 0);
        w.cwnd_cnt = 0;
        w.cwnd = w.ssthresh;
        b.on_recovery_exit(w, 0);
    }

    #[test]
    fn multiplicative_decrease_is_beta_0_8() {
        let mut b = Bic::default();
        let w = |cwnd| Window {
            cwnd,
            ssthresh: 10,
            cwnd_cnt: 0,
        };
        // ⌊1000·819/1024⌋ = ⌊799.8⌋
        assert_eq!(b.ssthresh_on_loss(&w(1000), 0), 799);
        assert_eq!(b.ssthresh_on_loss(&w(100), 0), 79);
        // Reno below low_window.
        assert_eq!(b.ssthresh_on_loss(&w(14), 0), 7);
        assert_eq!(b.ssthresh_on_loss(&w(3), 0), 2);
    }

    #[test]
    fn increment_is_half_the_distance_clamped() {
        let b = Bic {
            w_max: 1000.0,
            ..Bic::default()
        };
        assert_eq!(b.increment(799.0), 16.0); // 201/2 capped at S_max
        assert_eq!(b.increment(980.0), 10.0);
        assert_eq!(b.increment(999.0), 0.5);
        assert_eq!(b.increment(999.99), 0.01); // 0.005 raised to S_min
        assert_eq!(b.increment(1000.0), 0.01); // max probing starts at S_min
        assert_eq!(b.increment(1004.0), 4.0);
        assert_eq!(b.increment(1100.0), 16.0);
        assert_eq!(b.increment(14.0), 1.0); // Reno at low_window
    }

    #[test]
    fn binary_search_towards_w_max() {
        let mut b = Bic::default();
        let mut w = Window {
            cwnd: 1000,
            ssthresh: 500,
            cwnd_cnt: 0,
        };
        loss(&mut b, &mut w);
        assert_eq!(b.w_max(), 1000.0);
        assert_eq!(w.cwnd, 799);
        // Additive phase: +16 per round while half the distance exceeds 16.
        for k in 1..=11 {
            round(&mut b, &mut w);
            let expect = 799.0 + 16.0 * k as f64;
            assert!((b.window(&w) - expect).abs() < 1e-6, "round {k}");
        }
        // 975 → 987.5 → 993.75 → 996.875 → 998.4375: the distance halves each round.
        for expect in [987.5, 993.75, 996.875, 998.4375] {
            round(&mut b, &mut w);
            assert!((b.window(&w) - expect).abs() < 1e-6, "{}", b.window(&w));
        }
        assert_eq!(w.cwnd, 998);
        // It approaches W_max without passing it while the half-distance exceeds S_min.
        for _ in 0..6 {
            round(&mut b, &mut w);
            assert!(b.window(&w) < 1000.0);
        }
        // 1000 − 1.5625/2⁶ = 999.9755859375; from there S_min steps of 0.01.
        assert!((b.window(&w) - 999.975_585_937_5).abs() < 1e-6);
        round(&mut b, &mut w);
        assert!((b.window(&w) - 999.987_792_968_75).abs() < 1e-6);
        round(&mut b, &mut w);
        assert!((b.window(&w) - 999.997_792_968_75).abs() < 1e-6);
    }

    #[test]
    fn max_probing_doubles_the_overshoot_then_adds_s_max() {
        let mut b = Bic {
            w_max: 1000.0,
            ..Bic::default()
        };
        let mut w = Window {
            cwnd: 1000,
            ssthresh: 500,
            cwnd_cnt: 0,
        };
        // Overshoot d: 0 → 0.01 (S_min) → 0.02 → 0.04 → … doubling.
        let mut d = 0.0_f64;
        for _ in 0..12 {
            round(&mut b, &mut w);
            d += d.clamp(MIN_INCREMENT, MAX_INCREMENT);
            assert!((b.window(&w) - 1000.0 - d).abs() < 1e-6);
        }
        // 0.01·2¹¹ after 12 rounds; then S_max per round.
        assert!((d - 20.48).abs() < 1e-9);
        let before = b.window(&w);
        round(&mut b, &mut w);
        assert!((b.window(&w) - before - 16.0).abs() < 1e-6);
    }

    #[test]
    fn fast_convergence_lowers_w_max() {
        let mut b = Bic::default();
        let w = |cwnd| Window {
            cwnd,
            ssthresh: 10,
            cwnd_cnt: 0,
        };
        b.ssthresh_on_loss(&w(1000), 0);
        assert_eq!(b.w_max(), 1000.0);
        // Loss below W_max: W_max = 900·(1 + 819/1024)/2 = 900·1843/2048.
        b.ssthresh_on_loss(&w(900), 0);
        assert_eq!(b.w_max(), 809.912_109_375);
        // Loss above W_max: W_max = cwnd.
        b.ssthresh_on_loss(&w(950), 0);
        assert_eq!(b.w_max(), 950.0);
        // A timeout forgets W_max.
        b.on_rto(&w(1), 0);
        assert_eq!(b.w_max(), 0.0);
    }

    #[test]
    fn reno_below_low_window_and_no_growth_when_not_cwnd_limited() {
        let mut b = Bic {
            w_max: 1000.0,
            ..Bic::default()
        };
        let mut w = Window {
            cwnd: 10,
            ssthresh: 5,
            cwnd_cnt: 0,
        };
        round(&mut b, &mut w);
        assert_eq!(w.cwnd, 11);
        let before = w;
        b.on_ack(
            &mut w,
            &Ack {
                cwnd_limited: false,
                ..ack(50)
            },
        );
        assert_eq!(w, before);
    }

    #[test]
    fn registered_under_its_linux_name() {
        let cc = crate::cc::by_name("bic").expect("registered");
        assert_eq!(cc.name(), "bic");
        assert!(crate::cc::NAMES.contains(&"bic"));
    }
}
