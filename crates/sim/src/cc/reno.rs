//! TCP Reno / NewReno congestion avoidance (RFC 5681 §3.1, RFC 6582), with RFC 3465
//! appropriate byte counting as Linux implements it (`tcp_reno_cong_avoid`).
//!
//! Loss recovery itself (fast retransmit, SACK-based recovery, PRR) lives in the sender;
//! Reno contributes only the window laws: slow start, +1 segment per window of
//! acknowledged segments, and halving on loss.

use super::{Ack, CongestionControl, Window};
use crate::time::Time;

/// Reno keeps no state beyond the sender's window.
#[derive(Debug, Default, Clone)]
pub struct Reno;

impl CongestionControl for Reno {
    fn name(&self) -> &'static str {
        "reno"
    }

    fn on_ack(&mut self, w: &mut Window, ack: &Ack) {
        let Some(acked) = w.slow_start_then_avoid(ack) else {
            return;
        };
        let cwnd = w.cwnd;
        w.cong_avoid_ai(cwnd, acked);
    }

    /// RFC 5681 eq. (4) with FlightSize ≈ cwnd, as Linux `tcp_reno_ssthresh`: half the window,
    /// at least two segments.
    fn ssthresh_on_loss(&mut self, w: &Window, _now: Time) -> u32 {
        (w.cwnd / 2).max(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::testing::ack;

    #[test]
    fn slow_start_doubles_per_window() {
        let mut r = Reno;
        let mut w = Window::new(10);
        // One window of 10 segments acknowledged by 5 delayed ACKs doubles the window.
        for _ in 0..5 {
            r.on_ack(&mut w, &ack(2));
        }
        assert_eq!(w.cwnd, 20);
    }

    #[test]
    fn congestion_avoidance_adds_one_segment_per_window() {
        let mut r = Reno;
        let mut w = Window {
            cwnd: 1000,
            ssthresh: 500,
            cwnd_cnt: 0,
        };
        // Ten windows' worth of segments, delivered two per ACK.
        let mut acked_total = 0;
        while w.cwnd < 1010 {
            r.on_ack(&mut w, &ack(2));
            acked_total += 2;
        }
        // Σ_{k=0..9} (1000 + k) segments for ten increments (ACKs carry two, so the
        // last one may overshoot by one segment).
        let expected: u32 = (0..10).map(|k| 1000 + k).sum();
        assert!(
            (expected..expected + 2).contains(&acked_total),
            "{acked_total} vs {expected}"
        );
    }

    #[test]
    fn halves_on_loss_and_ignores_unused_window() {
        let mut r = Reno;
        let w = Window {
            cwnd: 801,
            ssthresh: 10,
            cwnd_cnt: 0,
        };
        assert_eq!(r.ssthresh_on_loss(&w, 0), 400);
        assert_eq!(r.ssthresh_on_loss(&Window { cwnd: 3, ..w }, 0), 2);
        let mut w2 = w;
        r.on_ack(
            &mut w2,
            &Ack {
                cwnd_limited: false,
                ..ack(100)
            },
        );
        assert_eq!(w2, w);
    }
}
