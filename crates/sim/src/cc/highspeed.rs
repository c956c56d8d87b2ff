//! HighSpeed TCP (S. Floyd, RFC 3649, "HighSpeed TCP for Large Congestion Windows", 2003).
//!
//! Above `Low_Window` the AIMD parameters depend on the current window `w`: each round-trip
//! time the window grows by `a(w)` segments, and a congestion event reduces it to
//! `(1 − b(w))·w`. Both are derived (RFC 3649 §5) from the HighSpeed response function,
//! the straight line in log–log space through (`Low_P`, `Low_Window`) and
//! (`High_P`, `High_Window`):
//!
//! ```text
//! p(w) = exp( (log w − log Low_Window) / (log High_Window − log Low_Window)
//!             · (log High_P − log Low_P) + log Low_P )
//! b(w) = (High_Decrease − 0.5) · (log w − log Low_Window)
//!             / (log High_Window − log Low_Window) + 0.5
//! a(w) = w² · p(w) · 2·b(w) / (2 − b(w))
//! ```
//!
//! with Low_Window = 38, High_Window = 83000, High_P = 10⁻⁷, High_Decrease = 0.1 and
//! Low_P = 10⁻³ (the loss rate at which standard TCP, w = 1.2/√p, has a 38-segment window).
//! At or below Low_Window, a = 1 and b = 0.5: standard TCP.
//!
//! Linux `tcp_highspeed` uses RFC 3649 Appendix B's table (integer `a`, rounded up between
//! rows). Here `a(w)` and `b(w)` are evaluated from the formulas for the current window
//! (cached while the window does not change), and the growth of `a(w)/w` per acknowledged
//! segment is accumulated exactly, so a window of `w` acknowledged segments adds `a(w)`.
//! Slow start is Reno's (RFC 3649 leaves it unchanged; Limited Slow-Start, RFC 3742, is
//! not used, as in Linux).

use super::{Ack, CongestionControl, Window};
use crate::time::Time;

/// Window (segments) at and below which HighSpeed TCP is standard TCP (RFC 3649 §5).
pub const LOW_WINDOW: f64 = 38.0;
/// Window (segments) reached at the loss rate `HIGH_P` (RFC 3649 §5).
pub const HIGH_WINDOW: f64 = 83000.0;
/// Loss rate at which the response function gives `HIGH_WINDOW` (RFC 3649 §5).
pub const HIGH_P: f64 = 1e-7;
/// Loss rate at which standard TCP (and HighSpeed TCP) has `LOW_WINDOW` (RFC 3649 §5).
pub const LOW_P: f64 = 1e-3;
/// Decrease factor b(w) at `HIGH_WINDOW` (RFC 3649 §5).
pub const HIGH_DECREASE: f64 = 0.1;

/// Position of `w` between Low_Window and High_Window on a log scale (0 at Low_Window).
fn log_position(w: f64) -> f64 {
    (w.ln() - LOW_WINDOW.ln()) / (HIGH_WINDOW.ln() - LOW_WINDOW.ln())
}

/// Loss rate p(w) of the HighSpeed response function (RFC 3649 §5).
pub fn p(w: f64) -> f64 {
    (log_position(w) * (HIGH_P.ln() - LOW_P.ln()) + LOW_P.ln()).exp()
}

/// Decrease factor b(w) (RFC 3649 §5): 0.5 at or below Low_Window, falling linearly in
/// log w to High_Decrease at High_Window (and beyond, by the same line).
pub fn b(w: f64) -> f64 {
    if w <= LOW_WINDOW {
        return 0.5;
    }
    (HIGH_DECREASE - 0.5) * log_position(w) + 0.5
}

/// Increase a(w), in segments per round-trip time (RFC 3649 §5): 1 at or below
/// Low_Window, and never less than standard TCP's 1 above it.
pub fn a(w: f64) -> f64 {
    if w <= LOW_WINDOW {
        return 1.0;
    }
    let bw = b(w);
    (w * w * p(w) * 2.0 * bw / (2.0 - bw)).max(1.0)
}

/// HighSpeed TCP's per-flow state.
#[derive(Debug, Default, Clone)]
pub struct HighSpeed {
    /// Fraction of a segment accumulated towards the next window increase: the sum of
    /// `a(w)/w` over acknowledged segments since the window last grew (always in [0, 1)).
    frac: f64,
    /// The window for which `cached_a` was computed (0: nothing cached).
    cached_w: u32,
    /// a(`cached_w`), the current increase per round-trip time in segments.
    cached_a: f64,
}

impl HighSpeed {
    /// a(w) for the current window, recomputed only when the window changed.
    fn a_for(&mut self, cwnd: u32) -> f64 {
        if self.cached_w != cwnd {
            self.cached_w = cwnd;
            self.cached_a = a(cwnd as f64);
        }
        self.cached_a
    }
}

impl CongestionControl for HighSpeed {
    fn name(&self) -> &'static str {
        "highspeed"
    }

    fn on_ack(&mut self, w: &mut Window, ack: &Ack) {
        let Some(acked) = w.slow_start_then_avoid(ack) else {
            return;
        };
        // w ← w + a(w)/w per acknowledged segment (RFC 3649 §5), a(w) re-evaluated as the
        // window grows.
        for _ in 0..acked {
            let cwnd = w.cwnd.max(1);
            let inc = self.a_for(cwnd) / cwnd as f64;
            w.grow_fraction(&mut self.frac, inc);
        }
    }

    /// `(1 − b(w))·w`, at least two segments (RFC 3649 §5, as Linux `hstcp_ssthresh`).
    fn ssthresh_on_loss(&mut self, w: &Window, _now: Time) -> u32 {
        self.frac = 0.0;
        let cwnd = w.cwnd as f64;
        ((cwnd * (1.0 - b(cwnd))).floor() as u32).max(2)
    }

    fn on_rto(&mut self, _w: &Window, _now: Time) {
        self.frac = 0.0;
    }

    fn on_recovery_exit(&mut self, _w: &mut Window, _now: Time) {
        self.frac = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::testing::{ack, round};

    #[test]
    fn a_and_b_match_rfc3649_table() {
        // RFC 3649 Appendix B: (w, a(w), b(w)) rows; a within rounding, b to two decimals.
        let rows = [
            (38.0, 1.0, 0.50),
            (118.0, 2.0, 0.44),
            (221.0, 3.0, 0.41),
            (347.0, 4.0, 0.38),
            (495.0, 5.0, 0.37),
            (1058.0, 8.0, 0.33),
            (1284.0, 9.0, 0.32),
        ];
        for (w, aw, bw) in rows {
            assert!((a(w) - aw).abs() < 0.5 + 1e-9, "a({w}) = {}", a(w));
            assert!((b(w) - bw).abs() <= 0.005 + 1e-9, "b({w}) = {}", b(w));
        }
        // End points of the response function are exact.
        assert!((p(LOW_WINDOW) - 1e-3).abs() < 1e-15);
        assert!((p(HIGH_WINDOW) - 1e-7).abs() < 1e-19);
        assert!((b(HIGH_WINDOW) - 0.1).abs() < 1e-12);
        // w = 83000 (the table's ≈72): 83000²·1e-7·(0.2/1.9) = 688.9·0.105263 = 72.516.
        assert!((a(HIGH_WINDOW) - 72.516).abs() < 1e-3);
        // Standard TCP at and below Low_Window.
        assert_eq!(a(10.0), 1.0);
        assert_eq!(b(10.0), 0.5);
    }

    #[test]
    fn grows_a_of_w_segments_per_rtt() {
        let mut h = HighSpeed::default();
        // a(1058) = 8.14 and a(1066) = 8.19: one round adds 8 segments.
        let mut w = Window {
            cwnd: 1058,
            ssthresh: 100,
            cwnd_cnt: 0,
        };
        round(&mut h, &mut w);
        assert_eq!(w.cwnd, 1066);
        // a(83000) = 72.5: one round adds 72 segments.
        let mut h = HighSpeed::default();
        let mut w = Window {
            cwnd: 83000,
            ssthresh: 100,
            cwnd_cnt: 0,
        };
        round(&mut h, &mut w);
        assert_eq!(w.cwnd, 83072);
        // Below Low_Window: one segment per round, like Reno.
        let mut h = HighSpeed::default();
        let mut w = Window {
            cwnd: 30,
            ssthresh: 10,
            cwnd_cnt: 0,
        };
        round(&mut h, &mut w);
        assert_eq!(w.cwnd, 31);
    }

    #[test]
    fn decreases_by_b_of_w_on_loss() {
        let mut h = HighSpeed::default();
        let w = |cwnd| Window {
            cwnd,
            ssthresh: 10,
            cwnd_cnt: 0,
        };
        // b(38) = 0.5: halve.
        assert_eq!(h.ssthresh_on_loss(&w(38), 0), 19);
        // b(1058) = 0.5 − 0.4·ln(1058/38)/ln(83000/38) = 0.32694: ⌊1058·0.67306⌋ = 712.
        assert_eq!(h.ssthresh_on_loss(&w(1058), 0), 712);
        // b(83000) = 0.1: 74700.
        assert_eq!(h.ssthresh_on_loss(&w(83000), 0), 74700);
        assert_eq!(h.ssthresh_on_loss(&w(3), 0), 2);
    }

    #[test]
    fn unused_window_does_not_grow() {
        let mut h = HighSpeed::default();
        let mut w = Window {
            cwnd: 5000,
            ssthresh: 100,
            cwnd_cnt: 0,
        };
        let before = w;
        h.on_ack(
            &mut w,
            &Ack {
                cwnd_limited: false,
                ..ack(5000)
            },
        );
        assert_eq!(w, before);
    }

    #[test]
    fn registered_under_its_linux_name() {
        let cc = crate::cc::by_name("highspeed").expect("registered");
        assert_eq!(cc.name(), "highspeed");
        assert!(crate::cc::NAMES.contains(&"highspeed"));
    }
}
