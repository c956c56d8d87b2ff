//! RACK loss detection (Y. Cheng, N. Cardwell, N. Dukkipati, P. Jha, RFC 8985, "The
//! RACK-TLP Loss Detection Algorithm for TCP"), as Linux `tcp_recovery.c`, its default.
//!
//! A segment is lost once a segment sent after it has been delivered and more than the
//! latest RTT plus a reordering window has passed since it was sent. This works in the time
//! domain, so it finds lost retransmissions as well as lost originals, where the duplicate
//! threshold of RFC 6675 cannot (and waits for a timeout).
//!
//! The reordering window is `min_rtt/4`, except (Linux `tcp_rack_reo_wnd`, no reordering
//! seen) in recovery and once `dupthresh` segments are SACKed, where it is 0: with FIFO
//! paths the simulator never reorders, so RACK then marks every hole below the newest
//! delivered segment at once, as the kernel does on such paths.

use super::board::Board;
use crate::time::Time;

/// RACK's state (Linux `tp->rack`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Rack {
    /// Send time of the most recently sent segment that was (S)ACKed (`rack.mstamp`).
    pub mstamp: Time,
    /// Its end (`rack.end_seq`), to order segments sent at the same instant.
    pub end_seq: u64,
    /// RTT of the last (S)ACKed segment (`rack.rtt_us`).
    pub rtt: Time,
    /// A segment was (S)ACKed since the last detection (`rack.advanced`).
    pub advanced: bool,
}

/// Whether a segment sent at `t1` ending at `s1` was sent after one at `t2`, `s2`
/// (Linux `tcp_skb_sent_after`).
#[inline]
pub fn sent_after(t1: Time, s1: u64, t2: Time, s2: u64) -> bool {
    t1 > t2 || (t1 == t2 && s1 > s2)
}

impl Rack {
    /// Segment `seq`, last sent at `xmit`, is (S)ACKed at `now` (Linux `tcp_rack_advance`).
    /// A retransmitted segment ACKed sooner than `min_rtt` after its retransmission was
    /// probably delivered by an earlier transmission: it does not advance RACK.
    pub fn advance(&mut self, now: Time, xmit: Time, seq: u64, retransmitted: bool, min_rtt: Time) {
        let rtt = now.saturating_sub(xmit);
        if retransmitted && rtt < min_rtt {
            return;
        }
        self.advanced = true;
        self.rtt = rtt;
        if sent_after(xmit, seq + 1, self.mstamp, self.end_seq) {
            self.mstamp = xmit;
            self.end_seq = seq + 1;
        }
    }

    /// The reordering window (Linux `tcp_rack_reo_wnd` with no reordering seen).
    pub fn reo_wnd(
        &self,
        recovering: bool,
        sacked_out: u32,
        dupthresh: u32,
        min_rtt: Time,
        srtt: Time,
    ) -> Time {
        if recovering || sacked_out >= dupthresh {
            return 0;
        }
        (min_rtt / 4).min(srtt)
    }

    /// Marks lost every watched segment sent before the newest delivered one whose time
    /// is up (Linux `tcp_rack_detect_loss`). Returns the segments newly marked lost (in
    /// `tp->lost` terms) and the longest wait of those not yet due (0: none).
    pub fn detect_loss(&self, board: &mut Board, now: Time, reo_wnd: Time) -> (u32, Time) {
        let (mut lost, mut wait) = (0, 0);
        let mut i = 0;
        while let Some(&(t, seq)) = board.tsorted.get(i) {
            if !board.watched(t, seq) {
                if i == 0 {
                    board.tsorted.pop_front();
                } else {
                    i += 1;
                }
                continue;
            }
            if !sent_after(self.mstamp, self.end_seq, t, seq + 1) {
                break;
            }
            let remaining = (self.rtt + reo_wnd) as i64 - now.saturating_sub(t) as i64;
            if remaining > 0 {
                wait = wait.max(remaining as Time);
                i += 1;
                continue;
            }
            lost += board.mark_lost(seq) as u32;
            if i == 0 {
                board.tsorted.pop_front();
            } else {
                i += 1;
            }
        }
        (lost, wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::board::{Seg, LOST};

    /// Ten segments sent 1 µs apart from t = 0.
    fn board() -> Board {
        let mut b = Board::default();
        for t in 0..10 {
            b.push(Seg::new(t * 1000));
        }
        b
    }

    #[test]
    fn holes_before_the_newest_delivered_segment_are_lost_after_the_window() {
        let mut b = board();
        let mut r = Rack::default();
        // Segment 5 (sent at 5 µs) is SACKed at 100 µs: RTT 95 µs.
        b.sack(5);
        r.advance(100_000, 5000, 5, false, 90_000);
        assert_eq!((r.mstamp, r.end_seq, r.rtt), (5000, 6, 95_000));
        // With a 20 µs window, hole 4 (sent 1 µs before 5) is due at 4 + 95 + 20 = 119 µs.
        let (lost, wait) = r.detect_loss(&mut b, 100_000, 20_000);
        assert_eq!(lost, 0);
        // Hole 4, the most recently sent, waits the longest: 4 + 95 + 20 − 100 = 19 µs.
        assert_eq!(wait, 19_000);
        // Without a window every hole below 5 is lost at once; 6..9 are not.
        let (lost, wait) = r.detect_loss(&mut b, 100_000, 0);
        assert_eq!((lost, wait), (5, 0));
        assert!((0..5).all(|s| b.seg(s).flags & LOST != 0));
        assert!((6..10).all(|s| b.seg(s).flags & LOST == 0));
    }

    #[test]
    fn a_lost_retransmission_is_found_by_a_later_delivery() {
        let mut b = board();
        let mut r = Rack::default();
        b.sack(3);
        r.advance(100_000, 3000, 3, false, 90_000);
        r.detect_loss(&mut b, 100_000, 0);
        // 0, 1, 2 lost; 0 is retransmitted at 100 µs, then new data 10 at 101 µs.
        b.retransmitted(0, 100_000);
        b.push(Seg::new(101_000));
        // 10 is SACKed at 200 µs, the retransmission of 0 is not: it is lost again.
        b.sack(10);
        r.advance(200_000, 101_000, 10, false, 90_000);
        let (lost, _) = r.detect_loss(&mut b, 200_000, 0);
        // 0 (lost again), 4..9 (sent before 10, not delivered).
        assert_eq!(lost, 7);
        assert_eq!(b.next_lost(), Some(0));
    }

    #[test]
    fn reordering_window() {
        let r = Rack::default();
        let ms = 1_000_000;
        assert_eq!(r.reo_wnd(false, 1, 3, 40 * ms, 50 * ms), 10 * ms);
        assert_eq!(r.reo_wnd(false, 3, 3, 40 * ms, 50 * ms), 0);
        assert_eq!(r.reo_wnd(true, 0, 3, 40 * ms, 50 * ms), 0);
        assert_eq!(r.reo_wnd(false, 0, 3, 40 * ms, 5 * ms), 5 * ms);
    }
}
