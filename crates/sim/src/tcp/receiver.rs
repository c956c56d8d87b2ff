//! The receiving end: reassembly, delayed ACKs, SACK and D-SACK blocks, and Linux's SACK
//! compression.
//!
//! In-order data is acknowledged every second segment or after the delayed-ACK timeout
//! (RFC 1122/5681); a segment that fills a hole is acknowledged at once (RFC 5681 §4.2).
//! With `TcpConfig::linux_acks`, the receive window modelled and an application that reads
//! only once woken (host noise), Linux's further rules hold too: quick ACKs at the first
//! data and for each segment that grows the window (`icsk_ack.quick`), and the window
//! offered must not shrink (`__tcp_ack_snd_check`), so data left unread defers the ACK to
//! the read (`tcp_cleanup_rbuf`), one ACK for what it read.
//! Out-of-order segments are acknowledged as Linux 6.x does (`__tcp_ack_snd_check`): the
//! first three duplicate ACKs for a given `rcv_nxt` go at once, later ones are compressed
//! into one ACK per `min(1 ms, RTT/20)` or per 44 segments (`tcp_comp_sack_delay_ns`,
//! `tcp_comp_sack_nr`), and the pending ACK is sent before a third SACK block would be
//! changed, so that no received range goes unreported (`tcp_sack_compress_send_ack`,
//! `TCP_SACK_BLOCKS_EXPECTED`). The receiver remembers four blocks, most recent first, and
//! reports three (what fits beside timestamps). The echoed timestamp is `TS.Recent` (RFC
//! 7323 §4.3): the TSval of
//! the last in-order segment that started a new ACK, so a delayed ACK echoes the first of
//! its two segments and duplicate ACKs echo the last in-order one.
//!
//! A segment the sender marked `push` (PSH or short: a write's last, a window-limited
//! flight's last) is acknowledged by the read that leaves the receive memory empty, not
//! left to the delayed-ACK timer (`tcp_measure_rcv_mss` sets `ICSK_ACK_PUSHED`,
//! `tcp_cleanup_rbuf` acknowledges; full-sized PSH segments count since Linux 6.6).
//!
//! In-order data after a silence longer than the receiver's RTO (from its handshake:
//! `rtt + max(2·rtt, rto_min)`) earns quick ACKs, up to 16 (`tcp_event_data_recv`'s "too
//! long gap"): a sender's retransmission after a timeout is acknowledged at once, not left
//! to the delayed-ACK timer. Both kernels have this rule.
//!
//! Each ACK offers the receive window of `rwnd.rs` when the configuration models it
//! (`TcpConfig::rcvbuf_autotuning`).

use std::collections::VecDeque;

use super::rwnd::{RcvWindow, MAX_QUICKACKS};
use super::timers::{rto_of, Jiffies};
use super::{AckSegment, Segment, MAX_SACK_BLOCKS};
use crate::config::TcpConfig;
use crate::time::Time;

/// Immediate duplicate ACKs before SACK compression starts (`TCP_FASTRETRANS_THRESH`).
const DUPACKS_BEFORE_COMPRESSION: u32 = 3;
/// SACK blocks the receiver remembers (`TCP_NUM_SACKS`).
const NUM_SACKS: usize = 4;
/// Changing a block beyond the first two flushes a compressed ACK
/// (`TCP_SACK_BLOCKS_EXPECTED`).
const SACK_BLOCKS_EXPECTED: usize = 2;
/// What the receiving application asks for per read (`recv`), bytes: iperf3's default
/// block of 128 KiB. Linux measures the receive buffer after each of its buffers a read copies.
const APP_READ_BYTES: u64 = 131_072;
/// Segments one buffer of the receive queue holds at most when Linux coalesces arriving
/// segments into the queue's last (`tcp_try_coalesce`: up to `MAX_SKB_FRAGS` page
/// fragments). Measured, not a constant of Linux: on this host's veths each read's first
/// buffer held 16 (`tcp_rcvbuf_grow`'s copied and inq, VALIDATION.md §6, "iperf3's start").
const COALESCED_SEGS: u64 = 16;

pub struct Receiver {
    /// Next segment expected in order.
    pub rcv_nxt: u64,
    /// Out-of-order segments held, as sorted disjoint ranges `[start, end)` above `rcv_nxt`.
    ooo: Vec<(u64, u64)>,
    /// Starts of the most recently changed ranges, newest first (RFC 2018 block order).
    recent: [u64; NUM_SACKS],
    n_recent: usize,
    /// `rcv_nxt` as advertised by the last ACK sent (Linux `rcv_wup`, RFC 7323 Last.ACK.sent).
    rcv_wup: u64,
    /// Timestamp to echo (RFC 7323 TS.Recent).
    ts_recent: Time,
    delayed_ack: bool,
    delack_timeout: Time,
    delack_at: Option<Time>,
    /// SACK compression: at most this many ACKs withheld (0: off), for at most this long.
    comp_sack_nr: u32,
    comp_sack_delay: Time,
    /// The receiver's RTT estimate (Linux `rcv_rtt_est`), which caps the delay at RTT/20.
    rtt: Time,
    comp_at: Option<Time>,
    compressed: u32,
    comp_rcv_nxt: u64,
    dup_acks: u32,
    /// A duplicate segment to report in the next ACK (D-SACK, RFC 2883).
    dsack: Option<u64>,
    clock: Jiffies,
    /// The receive window, when modelled.
    rwnd: Option<RcvWindow>,
    /// Segments held out of order.
    ooo_segs: u64,
    /// What the application has read (`copied_seq`), whether it reads only when woken
    /// (else each segment as it becomes in order), and when it is next woken.
    copied: u64,
    /// The buffers of the in-order queue, `[start, end)` in segments, oldest first, as
    /// arrivals coalesced them; kept when reads are deferred.
    skbs: VecDeque<(u64, u64)>,
    deferred_reads: bool,
    read_at: Option<Time>,
    /// The caller holds an event for `read_at` (see `read_needs_event`).
    read_event: bool,
    /// ACKs to send at once whatever else holds (Linux `icsk_ack.quick`): the first data
    /// earns a few, and each segment that grows the window.
    quick: u32,
    /// Linux's ACK rules (`TcpConfig::linux_acks`): quick ACKs, and the window condition.
    linux_acks: bool,
    /// A segment marked `push` arrived in order since the last ACK (Linux
    /// `ICSK_ACK_PUSHED`, set by `tcp_measure_rcv_mss`, cleared by the ACK).
    pushed: bool,
    /// When in-order data last arrived (`icsk_ack.lrcvtime`), and the receiver's own
    /// retransmission timeout (`icsk_rto`, from its handshake's RTT sample): data after a
    /// longer silence earns quick ACKs.
    last_data: Option<Time>,
    rto: Time,
}

/// What the receiver did with a segment.
pub struct Received {
    /// Segments that became in-order (delivered to the application), `[from, to)`.
    pub delivered: (u64, u64),
    /// A compressed ACK flushed before the segment changed the SACK blocks (sent first).
    pub flushed: Option<AckSegment>,
    /// An ACK to send now.
    pub ack: Option<AckSegment>,
}

impl Receiver {
    /// A receiver of `mss`-byte segments on a path of round-trip time `rtt` (its own
    /// estimate, for SACK compression).
    pub fn new(tcp: &TcpConfig, rtt: Time, mss: u32) -> Self {
        Self {
            rcv_nxt: 0,
            ooo: Vec::new(),
            recent: [0; NUM_SACKS],
            n_recent: 0,
            rcv_wup: 0,
            ts_recent: 0,
            delayed_ack: tcp.delayed_ack,
            delack_timeout: tcp.delayed_ack_timeout_ns,
            delack_at: None,
            // SACK compression came with Linux 4.18 (2018).
            comp_sack_nr: match tcp.kernel {
                crate::config::Kernel::Linux6 => tcp.comp_sack_nr,
                crate::config::Kernel::Linux2006 => 0,
            },
            comp_sack_delay: tcp.comp_sack_delay_ns,
            rtt,
            comp_at: None,
            compressed: 0,
            comp_rcv_nxt: 0,
            dup_acks: 0,
            dsack: None,
            clock: Jiffies::new(tcp.hz),
            rwnd: tcp
                .rcvbuf_autotuning
                .then(|| RcvWindow::new(mss, tcp.rmem_max_bytes)),
            ooo_segs: 0,
            copied: 0,
            skbs: VecDeque::new(),
            deferred_reads: false,
            read_at: None,
            read_event: false,
            quick: 0,
            linux_acks: tcp.linux_acks,
            pushed: false,
            last_data: None,
            // From the handshake's one RTT sample, as a first sample sets it.
            rto: rto_of(rtt, rtt / 2, tcp.rto_min_ns),
        }
    }

    /// The connection was established `lead` before its first data arrives, its handshake
    /// taking the path's round trip (RcvWindow::connected).
    pub fn connected(&mut self, lead: Time) {
        if let Some(w) = &mut self.rwnd {
            w.connected(lead, self.rtt);
        }
    }

    /// The application reads only when woken (`arm_read`, `app_read`), not at once. Only
    /// the receive window sees the difference: without it, reads are not modelled.
    pub fn defer_reads(&mut self) {
        self.deferred_reads = self.rwnd.is_some();
    }

    /// In-order data the application has not read yet, segments.
    fn unread(&self) -> u64 {
        self.rcv_nxt - self.copied
    }

    /// Segments taking buffer space: unread in order, and out of order.
    fn held(&self) -> u64 {
        self.unread() + self.ooo_segs
    }

    /// Data waits and no wakeup is pending: the caller wakes the application at a time of
    /// its choosing (`arm_read`).
    pub fn wants_read(&self) -> bool {
        self.deferred_reads && self.read_at.is_none() && self.unread() > 0
    }

    pub fn arm_read(&mut self, at: Time) {
        self.read_at = Some(at);
        self.read_event = false;
    }

    /// The pending read must happen at its own time, not only before the next segment is
    /// processed (`app_read` from `on_segment`'s caller): it would announce a larger window,
    /// and nothing else may come to carry it. Marks the event as held by the caller.
    /// Reads that change only the receiver's own state wait for the next segment or event,
    /// which saves an event per read.
    pub fn read_needs_event(&mut self, mss: u32) -> bool {
        let (Some(t), false, Some(w)) = (self.read_at, self.read_event, &self.rwnd) else {
            return false;
        };
        // Without a measure the read changes only what is held: no copy to read on.
        let measured = w.measure_due(t).then(|| {
            let mut w = w.clone();
            self.read_all(&mut w, t, mss);
            w
        });
        let due = self.read_acks()
            || measured
                .as_ref()
                .unwrap_or(w)
                .update_due(self.ooo_segs, self.rcv_nxt - self.rcv_wup);
        self.read_event = due;
        due
    }

    /// Reads of `APP_READ_BYTES` until nothing in order is left, each buffer of the queue
    /// copied measured by `w` (`tcp_recvmsg_locked` calls `tcp_rcv_space_adjust` after
    /// each); returns where the application's read position ends.
    fn read_all(&self, w: &mut RcvWindow, now: Time, mss: u32) -> u64 {
        Self::read_into(
            &self.skbs,
            self.copied,
            self.rcv_nxt,
            self.ooo_span(),
            (w, now, mss),
        )
    }

    /// `read_all` of the fields it reads, so that a window kept in `self` is borrowed in
    /// place (not moved out and back: it is large).
    fn read_into(
        skbs: &VecDeque<(u64, u64)>,
        mut copied: u64,
        rcv_nxt: u64,
        span: u64,
        (w, now, mss): (&mut RcvWindow, Time, u32),
    ) -> u64 {
        let per_read = (APP_READ_BYTES / mss as u64).max(1);
        let from = copied;
        let mut ends = skbs.iter().map(|b| b.1).filter(|&e| e > from).peekable();
        let mut left = per_read;
        while copied < rcv_nxt {
            let end = ends.peek().copied().unwrap_or(rcv_nxt);
            let to = end.min(copied + left).min(rcv_nxt);
            left -= to - copied;
            copied = to;
            w.on_read(now, copied, rcv_nxt - copied, span);
            if copied == end {
                ends.next();
            }
            if left == 0 {
                left = per_read;
            }
        }
        copied
    }

    /// Segments `[from, to)` joined the in-order queue: into its last buffer while it has
    /// room (`tcp_queue_rcv`'s coalescing), else into new ones.
    fn enqueue(&mut self, from: u64, to: u64) {
        if !self.deferred_reads {
            return;
        }
        let mut at = from;
        while at < to {
            match self.skbs.back_mut() {
                Some((start, end)) if *end == at && *end - *start < COALESCED_SEGS => {
                    *end = (*start + COALESCED_SEGS).min(to);
                    at = *end;
                }
                _ => {
                    let end = (at + COALESCED_SEGS).min(to);
                    self.skbs.push_back((at, end));
                    at = end;
                }
            }
        }
    }

    /// When the application is next woken, if it is.
    pub fn read_at(&self) -> Option<Time> {
        self.read_at
    }

    /// The application, woken at `now`, reads everything in order in reads of
    /// `APP_READ_BYTES`, measuring after each buffer copied (`read_all`). Then an ACK
    /// (`tcp_cleanup_rbuf`) if one was left to the read, or if the reads freed much space.
    pub fn app_read(&mut self, now: Time, mss: u32) -> Option<AckSegment> {
        self.read_at = None;
        self.read_event = false;
        let span = self.ooo_span();
        let w = self.rwnd.as_mut()?;
        self.copied = Self::read_into(&self.skbs, self.copied, self.rcv_nxt, span, (w, now, mss));
        while self.skbs.front().is_some_and(|b| b.1 <= self.copied) {
            self.skbs.pop_front();
        }
        let (held, advanced) = (self.held(), self.rcv_nxt - self.rcv_wup);
        let due = self.read_acks()
            || self
                .rwnd
                .as_ref()
                .is_some_and(|w| w.update_due(held, advanced));
        due.then(|| self.send_ack(now))
    }

    /// The window the SYN-ACK offered, bytes (`None`: the receive window is not modelled).
    pub fn initial_window(&self) -> Option<u64> {
        self.rwnd.as_ref().map(RcvWindow::initial_window)
    }

    /// Out-of-order data past `rcv_nxt`, segments (`ooo_last_skb->end_seq - rcv_nxt`).
    fn ooo_span(&self) -> u64 {
        self.ooo.last().map_or(0, |r| r.1 - self.rcv_nxt)
    }

    /// Timer-wheel phase of this host (host noise on); `None`: exact timers.
    pub fn set_timer_phase(&mut self, phase: Option<Time>) {
        self.clock.phase = phase;
    }

    /// When the receiver's next timer (delayed ACK or compressed SACK) fires.
    pub fn timer_deadline(&self) -> Option<Time> {
        match (self.delack_at, self.comp_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn touch(&mut self, start: u64) {
        let mut list = [start; NUM_SACKS];
        let mut n = 1;
        for &s in &self.recent[..self.n_recent] {
            if s != start && n < NUM_SACKS {
                list[n] = s;
                n += 1;
            }
        }
        self.recent = list;
        self.n_recent = n;
    }

    /// The ACK sent now: it carries the current state and ends every pending delay
    /// (Linux `tcp_event_ack_sent`).
    fn send_ack(&mut self, now: Time) -> AckSegment {
        let advanced = self.rcv_nxt - self.rcv_wup;
        let held = self.held();
        let mut ack = AckSegment {
            cum: self.rcv_nxt,
            ts_echo: self.ts_recent,
            ts_val: now,
            wnd: self
                .rwnd
                .as_mut()
                .map_or(u64::MAX, |w| w.select(held, advanced)),
            sack: [(0, 0); MAX_SACK_BLOCKS],
            n_sack: 0,
            dsack: self.dsack.take(),
        };
        for &start in &self.recent[..self.n_recent] {
            if ack.n_sack as usize == MAX_SACK_BLOCKS {
                break;
            }
            // A recently reported range may have merged into another: report what holds it.
            let i = self.ooo.partition_point(|r| r.1 <= start);
            if let Some(&r) = self.ooo.get(i) {
                if r.0 <= start && !ack.sack[..ack.n_sack as usize].contains(&r) {
                    ack.sack[ack.n_sack as usize] = r;
                    ack.n_sack += 1;
                }
            }
        }
        self.rcv_wup = self.rcv_nxt;
        self.pushed = false;
        self.quick = self.quick.saturating_sub(1); // `tcp_dec_quickack_mode`
        self.delack_at = None;
        self.comp_at = None;
        self.compressed = 0;
        ack
    }

    fn holds(&self, seq: u64) -> bool {
        if seq < self.rcv_nxt {
            return true;
        }
        let i = self.ooo.partition_point(|r| r.1 <= seq);
        self.ooo.get(i).is_some_and(|r| r.0 <= seq)
    }

    /// A data segment arrives at `now`.
    pub fn on_segment(&mut self, now: Time, seg: &Segment) -> Received {
        let before = self.rcv_nxt;
        if self.holds(seg.seq) {
            // A duplicate: report it at once (RFC 2883).
            self.dsack = Some(seg.seq);
            return Received {
                delivered: (before, before),
                flushed: None,
                ack: Some(self.send_ack(now)),
            };
        }
        // A segment in the window: the receiver's RTT from its echo (`tcp_rcv_rtt_measure_ts`).
        if let Some(w) = &mut self.rwnd {
            w.measure_rtt(now, seg.ts_echo);
        }
        if seg.seq == self.rcv_nxt {
            return self.in_order(now, seg);
        }
        let flushed = (self.compressed > 0 && self.sack_position(seg.seq) >= SACK_BLOCKS_EXPECTED)
            .then(|| self.send_ack(now));
        self.insert_ooo(seg.seq);
        self.ooo_segs += 1;
        let (held, span) = (self.held(), self.ooo_span());
        self.window_on_data(now, held);
        if let Some(w) = &mut self.rwnd {
            w.on_ofo(span);
        }
        Received {
            delivered: (before, before),
            flushed,
            ack: self.ooo_ack(now),
        }
    }

    /// Data arrived with `held` segments unread: the offered window's growth; with Linux's
    /// rules a segment that grows it earns a quick ACK (`tcp_grow_window`).
    fn window_on_data(&mut self, now: Time, held: u64) {
        let grew = self.rwnd.as_mut().is_some_and(|w| w.on_data(now, held));
        if grew && self.linux_acks {
            self.quick = self.quick.max(1);
        }
    }

    /// Where in the recent-block list the block `seq` extends is, or the list's length if
    /// `seq` starts a new block.
    fn sack_position(&self, seq: u64) -> usize {
        for (k, &start) in self.recent[..self.n_recent].iter().enumerate() {
            let i = self.ooo.partition_point(|r| r.1 <= start);
            if let Some(&(s, e)) = self.ooo.get(i) {
                if s <= start && (e == seq || s == seq + 1) {
                    return k;
                }
            }
        }
        self.n_recent
    }

    fn in_order(&mut self, now: Time, seg: &Segment) -> Received {
        let before = self.rcv_nxt;
        if seg.seq <= self.rcv_wup {
            self.ts_recent = seg.ts;
        }
        self.pushed |= seg.push;
        let had_holes = !self.ooo.is_empty();
        self.rcv_nxt += 1;
        if let Some(&(s, e)) = self.ooo.first() {
            if s == self.rcv_nxt {
                self.rcv_nxt = e;
                self.ooo_segs -= e - s;
                self.ooo.remove(0);
            }
        }
        let delivered = (before, self.rcv_nxt);
        self.enqueue(before, self.rcv_nxt);
        let held = self.held();
        if let Some(w) = &self.rwnd {
            if before == 0 && self.linux_acks {
                // The first data (`tcp_event_data_recv`).
                self.quick = self.quick.max(w.quickacks());
            }
        }
        self.quick_after_silence(now);
        self.window_on_data(now, held);
        if !self.deferred_reads {
            // The application reads what became in order at once.
            self.copied = self.rcv_nxt;
            let span = self.ooo_span();
            if let Some(w) = &mut self.rwnd {
                w.on_read(now, self.copied, 0, span);
            }
        }
        // A filled hole, no delayed ACKs, more than one segment unacknowledged and a window
        // that does not shrink, or a pushed segment read at once: now. Otherwise the read
        // or the timer sends it.
        let ack = if had_holes
            || !self.delayed_ack
            || self.quick > 0
            || (!self.deferred_reads && self.read_empties_pushed())
            || self.ack_due_now()
        {
            Some(self.send_ack(now))
        } else {
            if self.delack_at.is_none() {
                self.delack_at = Some(self.clock.expiry(now, self.delack_timeout));
            }
            None
        };
        Received {
            delivered,
            flushed: None,
            ack,
        }
    }

    /// In-order data after a silence longer than the receiver's RTO earns quick ACKs (Linux
    /// `tcp_event_data_recv`, "too long gap": the sender must have failed to restart its
    /// window, as after a retransmission timeout). Only the silence since earlier data
    /// counts, not the first data's wait.
    fn quick_after_silence(&mut self, now: Time) {
        if let Some(last) = self.last_data.replace(now) {
            if now.saturating_sub(last) > self.clock.round_up(self.rto) {
                let n = self
                    .rwnd
                    .as_ref()
                    .map_or(MAX_QUICKACKS as u32, RcvWindow::quickacks);
                self.quick = self.quick.max(n);
            }
        }
    }

    /// More than one full segment arrived since the last ACK, and either the application has
    /// read everything or the window offered now is no smaller than the last ACK's (Linux
    /// `__tcp_ack_snd_check`, `sk_rcvlowat` 1): data left unread takes buffer space, so a
    /// receiver whose application lags acknowledges when it reads (`tcp_cleanup_rbuf`), one
    /// ACK for all it read.
    fn ack_due_now(&self) -> bool {
        self.rcv_nxt - self.rcv_wup >= 2
            && (!self.linux_acks
                || self.unread() == 0
                || self
                    .rwnd
                    .as_ref()
                    .is_none_or(|w| w.edge_advances(self.held())))
    }

    /// A read would acknowledge (`tcp_cleanup_rbuf`), an ACK being pending: with Linux's
    /// rules, more than one segment arrived since the last ("once-per-two-segments ACK was
    /// not sent"); always, after a pushed segment (`read_empties_pushed`).
    fn read_acks(&self) -> bool {
        self.delack_at.is_some()
            && ((self.linux_acks && self.rcv_nxt - self.rcv_wup >= 2) || self.read_empties_pushed())
    }

    /// A pushed segment arrived since the last ACK and a read leaves the receive memory
    /// empty, nothing held out of order (`ICSK_ACK_PUSHED` with `sk_rmem_alloc` zero).
    fn read_empties_pushed(&self) -> bool {
        self.pushed && self.ooo_segs == 0
    }

    /// Out-of-order data (Linux `__tcp_ack_snd_check` with a non-empty out-of-order queue).
    fn ooo_ack(&mut self, now: Time) -> Option<AckSegment> {
        if self.quick > 0 || self.comp_sack_nr == 0 || self.compressed >= self.comp_sack_nr {
            return Some(self.send_ack(now));
        }
        if self.comp_rcv_nxt != self.rcv_nxt {
            self.comp_rcv_nxt = self.rcv_nxt;
            self.dup_acks = 0;
        }
        if self.dup_acks < DUPACKS_BEFORE_COMPRESSION {
            self.dup_acks += 1;
            return Some(self.send_ack(now));
        }
        self.compressed += 1;
        if self.comp_at.is_none() {
            // 5 % of the RTT, at most `tcp_comp_sack_delay_ns` (an hrtimer: no jiffies).
            self.comp_at = Some(now + self.comp_sack_delay.min(self.rtt / 20));
        }
        None
    }

    fn insert_ooo(&mut self, seq: u64) {
        let i = self.ooo.partition_point(|r| r.1 < seq);
        // Ranges are [s, e): `seq` extends range i if e == seq (holds are excluded above).
        if let Some(r) = self.ooo.get_mut(i) {
            if r.1 == seq {
                r.1 = seq + 1;
                let s = r.0;
                if let Some(&(ns, ne)) = self.ooo.get(i + 1) {
                    if ns == seq + 1 {
                        self.ooo[i].1 = ne;
                        self.ooo.remove(i + 1);
                    }
                }
                self.touch(s);
                return;
            }
            if r.0 == seq + 1 {
                r.0 = seq;
                self.touch(seq);
                return;
            }
        }
        self.ooo.insert(i, (seq, seq + 1));
        self.touch(seq);
    }

    /// The receiver's timer fired at `now`: the delayed or compressed ACK, if one is due.
    pub fn on_timer(&mut self, now: Time) -> Option<AckSegment> {
        let delack_due = self.delack_at.is_some_and(|d| d <= now);
        let comp_due = self.comp_at.is_some_and(|d| d <= now);
        if delack_due {
            self.delack_at = None;
        }
        if comp_due {
            self.comp_at = None;
        }
        let pending =
            (delack_due && self.rcv_nxt > self.rcv_wup) || (comp_due && self.compressed > 0);
        pending.then(|| self.send_ack(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{NS_PER_MS, NS_PER_S, NS_PER_US};

    fn seg(seq: u64) -> Segment {
        Segment {
            seq,
            ts: seq * 10,
            ts_echo: 0,
            retransmission: false,
            push: false,
        }
    }

    fn receiver() -> Receiver {
        Receiver::new(&TcpConfig::default(), 100 * NS_PER_MS, 1448)
    }

    #[test]
    fn delays_acks_and_reports_sack_blocks() {
        let mut r = receiver();
        assert!(r.on_segment(0, &seg(0)).ack.is_none());
        assert_eq!(r.timer_deadline(), Some(40 * NS_PER_MS));
        let a = r.on_segment(1, &seg(1)).ack.unwrap();
        // A delayed ACK echoes the first of its two segments.
        assert_eq!((a.cum, a.ts_echo), (2, 0));
        assert_eq!(r.timer_deadline(), None);
        // 2 is lost; 3 and 4 arrive out of order.
        let a = r.on_segment(2, &seg(3)).ack.unwrap();
        assert_eq!((a.cum, a.n_sack, a.sack[0], a.ts_echo), (2, 1, (3, 4), 0));
        r.on_segment(3, &seg(7)); // a second hole at 5..7
        let a = r.on_segment(4, &seg(4)).ack.unwrap();
        assert_eq!(a.n_sack, 2);
        assert_eq!(a.sack[0], (3, 5));
        assert_eq!(a.sack[1], (7, 8));
        // The retransmission of 2 fills the first hole: delivered 2..5, ACK at once,
        // echoing the retransmission's timestamp.
        let got = r.on_segment(5, &seg(2));
        assert_eq!(got.delivered, (2, 5));
        let a = got.ack.unwrap();
        assert_eq!((a.cum, a.n_sack, a.sack[0], a.ts_echo), (5, 1, (7, 8), 20));
    }

    #[test]
    fn delayed_ack_timer_acknowledges_a_lone_segment() {
        let mut r = receiver();
        r.on_segment(0, &seg(0));
        assert!(r.on_timer(39_999_999).is_none());
        assert_eq!(r.on_timer(40_000_000).unwrap().cum, 1);
        assert_eq!(r.timer_deadline(), None);
    }

    #[test]
    fn data_after_a_silence_longer_than_the_rto_is_acknowledged_at_once() {
        // A 100 ms path: the receiver's RTO from its handshake is 100 + 200 = 300 ms.
        let mut r = receiver();
        let ms = NS_PER_MS;
        r.on_segment(0, &seg(0));
        r.on_timer(40 * ms).unwrap();
        // 250 ms of silence: a lone segment still waits for the delayed-ACK timer.
        assert!(r.on_segment(250 * ms, &seg(1)).ack.is_none());
        assert_eq!(r.on_timer(290 * ms).unwrap().cum, 2);
        // 301 ms (a sender's RTO after its window stalled): quick ACKs, one per segment,
        // sixteen of them without a modelled window (`TCP_MAX_QUICKACKS`).
        let mut t = 551 * ms;
        for s in 2..18 {
            assert_eq!(
                r.on_segment(t, &seg(s)).ack.map(|a| a.cum),
                Some(s + 1),
                "segment {s}"
            );
            t += ms;
        }
        assert!(r.on_segment(t, &seg(18)).ack.is_none());
    }

    #[test]
    fn duplicate_acks_beyond_three_are_compressed() {
        let mut r = receiver();
        // Segment 0 lost; 1..=60 arrive 10 µs apart.
        let mut acks = 0;
        for s in 1..=60u64 {
            acks += r.on_segment(s * 10 * NS_PER_US, &seg(s)).ack.is_some() as u32;
        }
        // Three immediate duplicate ACKs, then one once 44 are withheld (segment 48);
        // 49..60 wait for the 1 ms timer armed at segment 49 (490 µs).
        assert_eq!(acks, 4);
        assert_eq!(r.timer_deadline(), Some(490 * NS_PER_US + NS_PER_MS));
        let a = r.on_timer(490 * NS_PER_US + NS_PER_MS).unwrap();
        assert_eq!((a.cum, a.sack[0]), (0, (1, 61)));
        // A duplicate is reported by a D-SACK at once.
        let a = r.on_segment(2 * NS_PER_MS, &seg(5)).ack.unwrap();
        assert_eq!(a.dsack, Some(5));
    }

    /// A receiver with Linux's receive window whose application reads only when woken.
    fn linux_receiver() -> Receiver {
        let tcp = TcpConfig {
            rcvbuf_autotuning: true,
            linux_acks: true,
            ..TcpConfig::default()
        };
        let mut r = Receiver::new(&tcp, 100 * NS_PER_MS, 1448);
        r.defer_reads();
        r
    }

    #[test]
    fn a_read_measures_after_each_coalesced_buffer() {
        // A train of 20 segments arrives before the application wakes: the queue holds
        // them in two buffers, 16 coalesced and 4. The read copies buffer by buffer and
        // Linux measures after each (`tcp_recvmsg_locked`): its first measure, due at once
        // (the connection was set up an RTT before the data, as iperf3's is), counts the
        // 16 copied less the 4 still queued, as the kernel's `tcp_rcvbuf_grow` reported.
        let mut r = linux_receiver();
        r.connected(101 * NS_PER_MS);
        for s in 0..20 {
            r.on_segment(s * NS_PER_US, &seg(s));
        }
        assert_eq!(r.skbs, VecDeque::from([(0, 16), (16, 20)]));
        r.arm_read(80 * NS_PER_US);
        r.app_read(80 * NS_PER_US, 1448);
        assert_eq!(r.rwnd.as_ref().map(RcvWindow::space), Some(12 * 1448));
        assert!(r.skbs.is_empty(), "all read");
    }

    #[test]
    fn quick_acks_then_unread_data_waits_for_the_read() {
        // Linux 6.x: the first data earns 16 quick ACKs (64 KiB / 2 MSS = 22, at most 16),
        // each segment acknowledged at once; after them, data the application has not read
        // shrinks the window the receiver would offer, so it does not acknowledge every
        // second segment but leaves it to the read, one ACK for all (`__tcp_ack_snd_check`,
        // `tcp_cleanup_rbuf`). A kernel receiver in slow start: 10 ACKs for its first 10
        // segments, then 3 for a round of 40 that arrived unread (docs/journal/
        // validation-history.md, "The receiver's ACKs, as Linux sends them").
        let mut r = linux_receiver();
        let acked: Vec<u64> = (0..24)
            .filter_map(|s| r.on_segment(s * NS_PER_US, &seg(s)).ack.map(|a| a.cum))
            .collect();
        assert_eq!(acked, (1..=16).collect::<Vec<u64>>());
        r.arm_read(30 * NS_PER_US);
        let a = r
            .app_read(30 * NS_PER_US, 1448)
            .expect("the read acknowledges");
        assert_eq!(a.cum, 24);
        // Read at once, every second segment is acknowledged again; the first after the
        // read also at once: the space the read freed lets the window grow, and a segment
        // that grows it earns a quick ACK (`tcp_grow_window`).
        let acks: Vec<bool> = (24..34)
            .map(|s| {
                let t = (100 + 10 * s) * NS_PER_US;
                let ack = r.on_segment(t, &seg(s)).ack.is_some();
                r.arm_read(t);
                assert!(r.app_read(t, 1448).is_none(), "nothing left to the read");
                ack
            })
            .collect();
        let every_second = [
            true, true, false, true, false, true, false, true, false, true,
        ];
        assert_eq!(acks, every_second);
    }

    #[test]
    fn a_compressed_ack_is_flushed_before_a_third_block_changes() {
        let mut r = receiver();
        // 0 lost; 1..=5 arrive: three immediate duplicate ACKs, 4 and 5 withheld.
        for s in 1..=5 {
            r.on_segment(s, &seg(s));
        }
        // 7 (6 lost) starts a second block: no flush, still compressed.
        let got = r.on_segment(7, &seg(7));
        assert!(got.flushed.is_none() && got.ack.is_none());
        // 9 (8 lost) would start a third: the pending ACK goes first, with the two blocks
        // it knew, so that no received range goes unreported.
        let got = r.on_segment(9, &seg(9));
        let f = got.flushed.expect("flushed");
        assert_eq!((f.n_sack, f.sack[0], f.sack[1]), (2, (7, 8), (1, 6)));
        assert!(got.ack.is_none());
        // Four blocks are remembered, three reported, newest first.
        r.on_segment(11, &seg(11));
        let a = r.on_timer(NS_PER_S).unwrap();
        assert_eq!(&a.sack[..], &[(11, 12), (9, 10), (7, 8)]);
    }

    #[test]
    fn a_pushed_segment_is_acknowledged_by_the_read_that_empties_the_queue() {
        // Linux's receiver (ACK per two segments here, `linux_acks` off) leaves a lone
        // segment to its delayed-ACK timer, unless it carried PSH or was short: then the
        // read that empties the receive queue acknowledges it (`tcp_cleanup_rbuf`,
        // ICSK_ACK_PUSHED). A window-limited flight ends so (`Segment::push`).
        let tcp = TcpConfig {
            rcvbuf_autotuning: true,
            ..TcpConfig::default()
        };
        let mut r = Receiver::new(&tcp, 100 * NS_PER_MS, 1448);
        r.defer_reads();
        let pushed = |s: u64| Segment {
            push: true,
            ..seg(s)
        };
        let mut acked = vec![];
        for s in 0..5 {
            let t = s * NS_PER_US;
            let got = r.on_segment(t, &if s == 4 { pushed(s) } else { seg(s) });
            acked.extend(got.ack.map(|a| a.cum));
        }
        assert_eq!(acked, [2, 4], "every second segment");
        assert!(r.wants_read());
        r.arm_read(10 * NS_PER_US);
        assert!(
            r.read_needs_event(1448),
            "the read acknowledges: its own event"
        );
        let a = r
            .app_read(10 * NS_PER_US, 1448)
            .expect("the read acknowledges");
        assert_eq!(a.cum, 5);
        assert_eq!(r.timer_deadline(), None);
        // The same lone segment without PSH waits for the timer (40 ms).
        let t = 20 * NS_PER_US;
        assert!(r.on_segment(t, &seg(5)).ack.is_none());
        r.arm_read(t);
        assert!(!r.read_needs_event(1448));
        assert!(r.app_read(t, 1448).is_none());
        assert_eq!(r.timer_deadline(), Some(t + 40 * NS_PER_MS));
        assert_eq!(r.on_timer(t + 40 * NS_PER_MS).map(|a| a.cum), Some(6));
    }

    #[test]
    fn a_pushed_segment_read_at_once_is_acknowledged_at_once() {
        // Without host noise the application reads each segment as it arrives: a pushed
        // one leaves the queue empty at once, and is acknowledged at once.
        let mut r = receiver();
        assert!(r.on_segment(0, &seg(0)).ack.is_none());
        let a = r.on_segment(1, &seg(1)).ack.expect("the second");
        assert_eq!(a.cum, 2);
        let p = Segment {
            push: true,
            ..seg(2)
        };
        assert_eq!(r.on_segment(2, &p).ack.map(|a| a.cum), Some(3));
    }
}
