//! Scalable TCP (T. Kelly, "Scalable TCP: Improving Performance in Highspeed Wide Area
//! Networks", ACM SIGCOMM CCR 33(2), 2003), with the window laws of Linux `tcp_scalable`.
//!
//! Kelly's multiplicative-increase, multiplicative-decrease rule, per acknowledged
//! segment and per congestion event:
//!
//! * congestion avoidance: `cwnd += a` for every segment acknowledged, a = 0.01, so the
//!   window grows by 1 % per round-trip time whatever its size;
//! * congestion event: `cwnd -= b·cwnd`, b = 0.125 (the window is multiplied by 0.875).
//!
//! As in Linux, the per-segment increase of 0.01 is realised by counting acknowledged
//! segments (RFC 3465 style): one segment is added per `min(cwnd, 100)` segments
//! acknowledged. At and above 100 segments this is exactly Kelly's a = 0.01; below 100
//! segments it is Reno's one segment per window (the "legacy" region where Scalable TCP
//! must not be less aggressive than standard TCP; Kelly uses a legacy window for the
//! same purpose). Older Linux kernels counted to 50 (a = 0.02); 100 is Kelly's value.
//!
//! Slow start is Reno's (RFC 5681 with byte counting).

use super::{Ack, CongestionControl, Window};
use crate::time::Time;

/// Segments that must be acknowledged for the window to grow by one segment, once the
/// window is at least this large: 1/a with Kelly's a = 0.01 (Linux `TCP_SCALABLE_AI_CNT`).
pub const AI_CNT: u32 = 100;

/// The decrease is `cwnd >> MD_SHIFT`, i.e. b = 1/8 = 0.125 (Linux `TCP_SCALABLE_MD_SCALE`).
pub const MD_SHIFT: u32 = 3;

/// Scalable TCP keeps no state beyond the sender's window: its laws depend on the
/// current window only.
#[derive(Debug, Default, Clone)]
pub struct Scalable;

impl CongestionControl for Scalable {
    fn name(&self) -> &'static str {
        "scalable"
    }

    fn on_ack(&mut self, w: &mut Window, ack: &Ack) {
        let Some(acked) = w.slow_start_then_avoid(ack) else {
            return;
        };
        let cwnd = w.cwnd;
        w.cong_avoid_ai(cwnd.min(AI_CNT), acked);
    }

    /// Kelly's multiplicative decrease, b = 0.125: `cwnd − ⌊cwnd/8⌋`, at least two segments.
    fn ssthresh_on_loss(&mut self, w: &Window, _now: Time) -> u32 {
        (w.cwnd - (w.cwnd >> MD_SHIFT)).max(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::testing::ack;

    /// One round trip: the whole window acknowledged by ACKs of two segments.
    fn round(s: &mut Scalable, w: &mut Window) {
        let mut left = w.cwnd;
        while left > 0 {
            let a = left.min(2);
            left -= a;
            s.on_ack(w, &ack(a));
        }
    }

    #[test]
    fn grows_one_hundredth_of_a_segment_per_acked_segment() {
        let mut s = Scalable;
        let mut w = Window {
            cwnd: 1000,
            ssthresh: 500,
            cwnd_cnt: 0,
        };
        // 1000 segments acknowledged (500 delayed ACKs) → +1000·0.01 = +10 segments.
        for _ in 0..500 {
            s.on_ack(&mut w, &ack(2));
        }
        assert_eq!(w.cwnd, 1010);
        // 99 more segments are not yet one more segment; the 100th is.
        for _ in 0..99 {
            s.on_ack(&mut w, &ack(1));
        }
        assert_eq!(w.cwnd, 1010);
        s.on_ack(&mut w, &ack(1));
        assert_eq!(w.cwnd, 1011);
    }

    #[test]
    fn grows_about_one_percent_per_rtt() {
        let mut s = Scalable;
        let mut w = Window {
            cwnd: 2000,
            ssthresh: 100,
            cwnd_cnt: 0,
        };
        // Round k acknowledges cwnd_k segments: cwnd_{k+1} = cwnd_k + ⌊cwnd_k/100⌋ (plus
        // the carried remainder), so after 10 rounds cwnd ≈ 2000·1.01^10 = 2209.2.
        for _ in 0..10 {
            round(&mut s, &mut w);
        }
        assert!((2207..=2210).contains(&w.cwnd), "cwnd {}", w.cwnd);
        // A single round from 2000 adds exactly 20.
        let mut w1 = Window {
            cwnd: 2000,
            ssthresh: 100,
            cwnd_cnt: 0,
        };
        round(&mut s, &mut w1);
        assert_eq!(w1.cwnd, 2020);
    }

    #[test]
    fn below_one_hundred_segments_grows_like_reno() {
        let mut s = Scalable;
        let mut w = Window {
            cwnd: 40,
            ssthresh: 20,
            cwnd_cnt: 0,
        };
        round(&mut s, &mut w);
        assert_eq!(w.cwnd, 41);
    }

    #[test]
    fn decreases_to_seven_eighths_on_loss() {
        let mut s = Scalable;
        let w = Window {
            cwnd: 1000,
            ssthresh: 10,
            cwnd_cnt: 0,
        };
        assert_eq!(s.ssthresh_on_loss(&w, 0), 875);
        // 801 − ⌊801/8⌋ = 801 − 100 = 701 (0.875·801 = 700.9).
        assert_eq!(s.ssthresh_on_loss(&Window { cwnd: 801, ..w }, 0), 701);
        assert_eq!(s.ssthresh_on_loss(&Window { cwnd: 2, ..w }, 0), 2);
        assert_eq!(s.ssthresh_on_loss(&Window { cwnd: 1, ..w }, 0), 2);
    }

    #[test]
    fn slow_start_then_unused_window_does_not_grow() {
        let mut s = Scalable;
        let mut w = Window::new(10);
        for _ in 0..5 {
            s.on_ack(&mut w, &ack(2));
        }
        assert_eq!(w.cwnd, 20);
        let before = w;
        s.on_ack(
            &mut w,
            &Ack {
                cwnd_limited: false,
                ..ack(100)
            },
        );
        assert_eq!(w, before);
    }

    #[test]
    fn registered_under_its_linux_name() {
        let cc = crate::cc::by_name("scalable").expect("registered");
        assert_eq!(cc.name(), "scalable");
        assert!(crate::cc::NAMES.contains(&"scalable"));
    }

    #[test]
    fn names_in_seed_order() {
        assert_eq!(
            crate::cc::NAMES,
            &[
                "reno",
                "bic",
                "cubic",
                "highspeed",
                "htcp",
                "scalable",
                "bbr"
            ]
        );
        for n in crate::cc::NAMES {
            assert_eq!(crate::cc::by_name(n).expect("registered").name(), *n);
        }
    }
}
