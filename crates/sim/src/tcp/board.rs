//! The sender's scoreboard: what it knows of every segment in `[snd_una, snd_nxt)`.
//!
//! Linux keeps the same facts in each skb's control block (`TCP_SKB_CB(skb)->sacked`, its
//! last transmission time, and the delivery-rate snapshot of `tcp_rate_skb_sent`), and the
//! counters `sacked_out`, `lost_out`, `retrans_out` beside them. RACK needs the segments in
//! the order they were last sent (Linux `tsorted_sent_queue`): a retransmission moves a
//! segment to the tail. Here that list holds `(send time, seq)` pairs appended at every
//! transmission, and an entry is dropped lazily once it no longer describes its segment
//! (acknowledged, SACKed, marked lost, or sent again since).

use std::collections::VecDeque;

use crate::time::Time;

/// SACKed by the receiver (Linux `TCPCB_SACKED_ACKED`).
pub const SACKED: u8 = 1;
/// Deemed lost (`TCPCB_LOST`).
pub const LOST: u8 = 2;
/// A retransmission of it is in flight (`TCPCB_SACKED_RETRANS`).
pub const RETRANS: u8 = 4;
/// Sent more than once (`TCPCB_EVER_RETRANS`): its ACK gives no RTT sample (Karn).
pub const EVER_RETRANS: u8 = 8;

/// "No time": a snapshot already used (`tx.delivered_mstamp = 0` in Linux).
pub const NO_TIME: Time = Time::MAX;

/// One segment of the scoreboard.
#[derive(Clone, Copy, Debug)]
pub struct Seg {
    pub flags: u8,
    /// The sender was application-limited when this was sent (`tx.is_app_limited`).
    pub app_limited: bool,
    /// Time of the last transmission (`skb->skb_mstamp_ns`).
    pub xmit: Time,
    /// `tp->first_tx_mstamp` when sent (`tx.first_tx_mstamp`).
    pub tx_first: Time,
    /// `tp->delivered_mstamp` when sent (`tx.delivered_mstamp`); `NO_TIME` once SACKed.
    pub tx_delivered_at: Time,
    /// `tp->delivered` when sent (`tx.delivered`).
    pub tx_delivered: u64,
}

impl Seg {
    pub fn new(now: Time) -> Self {
        Self {
            flags: 0,
            app_limited: false,
            xmit: now,
            tx_first: now,
            tx_delivered_at: now,
            tx_delivered: 0,
        }
    }
}

#[derive(Debug, Default)]
pub struct Board {
    /// `snd_una`: the oldest unacknowledged segment.
    pub una: u64,
    segs: VecDeque<Seg>,
    pub sacked_out: u32,
    pub lost_out: u32,
    pub retrans_out: u32,
    /// Segments marked lost and not retransmitted since (what `tcp_xmit_retransmit_queue`
    /// still has to send).
    pub to_retransmit: u32,
    /// One past the highest SACKed segment (`tcp_highest_sack_seq`).
    pub high_sacked: u64,
    /// No segment below this needs retransmission (`retransmit_skb_hint`).
    pub retx_hint: u64,
    /// Transmissions in time order, `(send time, seq)`, with stale entries (see module doc).
    pub tsorted: VecDeque<(Time, u64)>,
}

impl Board {
    /// `snd_nxt`.
    #[inline]
    pub fn nxt(&self) -> u64 {
        self.una + self.segs.len() as u64
    }

    /// `packets_out`: segments sent and not cumulatively acknowledged.
    #[inline]
    pub fn packets_out(&self) -> u32 {
        self.segs.len() as u32
    }

    #[inline]
    pub fn seg(&self, seq: u64) -> &Seg {
        &self.segs[(seq - self.una) as usize]
    }

    #[inline]
    pub fn seg_mut(&mut self, seq: u64) -> &mut Seg {
        &mut self.segs[(seq - self.una) as usize]
    }

    /// The most recently sent new segment (the tail of the retransmission queue).
    pub fn last(&self) -> Option<u64> {
        (!self.segs.is_empty()).then(|| self.nxt() - 1)
    }

    /// A new segment is sent.
    pub fn push(&mut self, seg: Seg) {
        let seq = self.nxt();
        self.tsorted.push_back((seg.xmit, seq));
        self.segs.push_back(seg);
    }

    /// The oldest segment is cumulatively acknowledged; returns its state before.
    pub fn pop_front(&mut self) -> Seg {
        let s = self
            .segs
            .pop_front()
            .expect("scoreboard covers snd_una..snd_nxt");
        if s.flags & SACKED != 0 {
            self.sacked_out -= 1;
        }
        if s.flags & LOST != 0 {
            self.lost_out -= 1;
            if s.flags & RETRANS == 0 {
                self.to_retransmit -= 1;
            }
        }
        if s.flags & RETRANS != 0 {
            self.retrans_out -= 1;
        }
        self.una += 1;
        self.high_sacked = self.high_sacked.max(self.una);
        self.retx_hint = self.retx_hint.max(self.una);
        s
    }

    /// Drops transmissions of acknowledged segments from the head of the time-ordered list.
    pub fn trim_tsorted(&mut self) {
        while self.tsorted.front().is_some_and(|&(_, s)| s < self.una) {
            self.tsorted.pop_front();
        }
    }

    /// Whether a time-ordered entry still describes a segment RACK must watch: sent then,
    /// neither SACKed nor acknowledged, and not lost and waiting for retransmission.
    pub fn watched(&self, t: Time, seq: u64) -> bool {
        if seq < self.una {
            return false;
        }
        let s = self.seg(seq);
        s.xmit == t && s.flags & SACKED == 0 && s.flags & (LOST | RETRANS) != LOST
    }

    /// Marks `seq` SACKed (Linux `tcp_sacktag_one`); returns its state before, or `None`
    /// if it was SACKed already.
    pub fn sack(&mut self, seq: u64) -> Option<Seg> {
        let s = &mut self.segs[(seq - self.una) as usize];
        if s.flags & SACKED != 0 {
            return None;
        }
        let prev = *s;
        if s.flags & LOST != 0 {
            self.lost_out -= 1;
            if s.flags & RETRANS == 0 {
                self.to_retransmit -= 1;
            }
        }
        if s.flags & RETRANS != 0 {
            self.retrans_out -= 1;
        }
        s.flags = (s.flags & EVER_RETRANS) | SACKED;
        self.sacked_out += 1;
        Some(prev)
    }

    /// Marks `seq` lost (Linux `tcp_mark_skb_lost`); returns true if this is a new loss
    /// (a first marking, or a retransmission lost again), counted in `tp->lost`.
    pub fn mark_lost(&mut self, seq: u64) -> bool {
        let s = &mut self.segs[(seq - self.una) as usize];
        if s.flags & SACKED != 0 {
            return false;
        }
        if s.flags & LOST != 0 {
            if s.flags & RETRANS == 0 {
                return false;
            }
            // A retransmission lost again: it must be sent once more.
            s.flags &= !RETRANS;
            self.retrans_out -= 1;
        } else {
            s.flags |= LOST;
            self.lost_out += 1;
            if s.flags & RETRANS != 0 {
                // A loss probe's retransmission is in flight: it stands for the
                // retransmission of this loss (RACK may find it lost in turn).
                return true;
            }
        }
        self.to_retransmit += 1;
        self.retx_hint = self.retx_hint.min(seq);
        true
    }

    /// The lowest segment marked lost and not yet retransmitted, if any.
    pub fn next_lost(&mut self) -> Option<u64> {
        if self.to_retransmit == 0 {
            return None;
        }
        let from = self.retx_hint.max(self.una);
        for seq in from..self.nxt() {
            if self.seg(seq).flags & (LOST | RETRANS | SACKED) == LOST {
                self.retx_hint = seq;
                return Some(seq);
            }
        }
        unreachable!("to_retransmit counts a segment the scan did not find");
    }

    /// `seq` is sent again at `now`.
    pub fn retransmitted(&mut self, seq: u64, now: Time) {
        let s = &mut self.segs[(seq - self.una) as usize];
        if s.flags & LOST != 0 && s.flags & RETRANS == 0 {
            self.to_retransmit -= 1;
        }
        if s.flags & RETRANS == 0 {
            self.retrans_out += 1;
        }
        s.flags |= RETRANS | EVER_RETRANS;
        s.xmit = now;
        self.tsorted.push_back((now, seq));
    }

    /// Every segment not SACKed, from `from` on, in sequence order (for RTO marking).
    pub fn unsacked_from(&self, from: u64) -> impl Iterator<Item = (u64, &Seg)> + '_ {
        let start = (from.max(self.una) - self.una) as usize;
        self.segs
            .iter()
            .enumerate()
            .skip(start)
            .map(move |(i, s)| (self.una + i as u64, s))
            .filter(|(_, s)| s.flags & SACKED == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(n: u64) -> Board {
        let mut b = Board::default();
        for t in 0..n {
            b.push(Seg::new(t));
        }
        b
    }

    #[test]
    fn counters_follow_sack_loss_and_retransmission() {
        let mut b = board(6);
        assert!(b.sack(3).is_some());
        assert!(b.sack(3).is_none());
        assert!(b.mark_lost(1));
        assert!(!b.mark_lost(1), "already lost and not retransmitted");
        assert_eq!((b.sacked_out, b.lost_out, b.to_retransmit), (1, 1, 1));
        assert_eq!(b.next_lost(), Some(1));
        b.retransmitted(1, 10);
        assert_eq!((b.retrans_out, b.to_retransmit), (1, 0));
        assert!(b.next_lost().is_none());
        // The retransmission is lost again: one more loss, to be sent once more.
        assert!(b.mark_lost(1));
        assert_eq!((b.lost_out, b.retrans_out, b.to_retransmit), (1, 0, 1));
        // A lost segment SACKed after all leaves both counts.
        b.sack(1);
        assert_eq!((b.sacked_out, b.lost_out, b.to_retransmit), (2, 0, 0));
        for _ in 0..4 {
            b.pop_front();
        }
        assert_eq!((b.una, b.sacked_out), (4, 0));
        // A probe's retransmission of 5, then 5 deemed lost: no second retransmission due.
        b.retransmitted(5, 20);
        assert!(b.mark_lost(5));
        assert_eq!((b.lost_out, b.retrans_out, b.to_retransmit), (1, 1, 0));
    }

    #[test]
    fn time_ordered_entries_go_stale() {
        let mut b = board(3);
        assert!(b.watched(0, 0));
        b.mark_lost(0);
        assert!(!b.watched(0, 0), "lost, waiting for retransmission");
        b.retransmitted(0, 7);
        assert!(!b.watched(0, 0), "sent again since");
        assert!(b.watched(7, 0));
        assert_eq!(b.tsorted.back(), Some(&(7, 0)));
        b.sack(1);
        assert!(!b.watched(1, 1));
        b.pop_front();
        b.trim_tsorted();
        assert_eq!(b.tsorted.front(), Some(&(1, 1)));
    }
}
