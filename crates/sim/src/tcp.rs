//! TCP endpoints, sans-IO: they are given `now` and packets, and return packets to send.
//!
//! Sequence numbers count segments (every segment carries `mss` bytes except the last of a
//! volume-bound flow), as Linux counts its window in packets.
//!
//! The sender follows Linux's structure: a SACK scoreboard, loss marking when `dupthresh`
//! segments above a hole are SACKed (RFC 6675 `IsLost`, in its forward-ACK form), fast
//! recovery with Proportional Rate Reduction (RFC 6937), a retransmission timer with the
//! RFC 6298 estimator, and a congestion control behind [`CongestionControl`].

use std::collections::VecDeque;

use crate::cc::{Ack, CongestionControl, Window};
use crate::config::TcpConfig;
use crate::time::{Time, NS_PER_S};

/// A data segment in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub seq: u64,
    /// Send time, echoed by the receiver (RFC 7323 timestamps).
    pub ts: Time,
    pub retransmission: bool,
}

/// Up to three SACK blocks, as fit in a segment with timestamps (RFC 2018).
pub const MAX_SACK_BLOCKS: usize = 3;

/// An acknowledgement in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckSegment {
    /// Next segment expected (cumulative ACK).
    pub cum: u64,
    /// Timestamp echoed from the segment that triggered this ACK.
    pub ts_echo: Time,
    /// SACK blocks `[start, end)`, most recent first; `n_sack` of them are valid.
    pub sack: [(u64, u64); MAX_SACK_BLOCKS],
    pub n_sack: u8,
}

/// Congestion state, as Linux's `icsk_ca_state` (Disorder/CWR are not modelled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaState {
    Open = 0,
    Recovery = 1,
    Loss = 2,
}

const SACKED: u8 = 1;
const LOST: u8 = 2;
const RETRANS: u8 = 4;

/// Counters a user sees in the trace.
#[derive(Clone, Copy, Debug, Default)]
pub struct SenderStats {
    pub segments_sent: u64,
    pub retransmissions: u64,
    pub fast_recoveries: u64,
    pub timeouts: u64,
}

pub struct Sender {
    cc: Box<dyn CongestionControl>,
    pub win: Window,
    /// Total segments to send; `None` while the application has unlimited data.
    total_segs: Option<u64>,
    /// The application stops handing over new data at this time (duration-bound flows).
    stop_at: Option<Time>,
    active: bool,
    /// Oldest unacknowledged segment.
    snd_una: u64,
    /// Next new segment to send.
    snd_nxt: u64,
    /// Scoreboard flags of the segments in `[snd_una, snd_nxt)`.
    board: VecDeque<u8>,
    sacked_out: u32,
    lost_out: u32,
    retrans_out: u32,
    /// One past the highest SACKed segment (the forward-most data known to be received).
    high_sacked: u64,
    /// Segments below this have been checked by the loss-marking rule.
    loss_scan: u64,
    /// Lost segments below this have been retransmitted.
    retx_scan: u64,
    pub state: CaState,
    /// `snd_nxt` when recovery (or loss) started: it ends once this is acknowledged.
    recovery_point: u64,
    /// PRR (RFC 6937): data delivered and sent since recovery started, and the flight then.
    prr_delivered: u32,
    prr_out: u32,
    recover_fs: u32,
    /// The last send attempt was stopped by the congestion window.
    cwnd_limited: bool,
    /// Window cap (receive window), segments.
    max_window: u32,
    srtt: Option<Time>,
    rttvar: Time,
    min_rtt: Time,
    rto: Time,
    backoff: u32,
    rto_deadline: Option<Time>,
    /// `snd_una` at the last timeout: a timeout after progress is a new congestion event.
    una_at_last_rto: u64,
    rto_min: Time,
    dupthresh: u64,
    /// Previously processed SACK blocks, so that a block re-reported by every ACK is not
    /// walked again (Linux keeps the same cache, `recv_sack_cache`).
    sack_cache: [(u64, u64); MAX_SACK_BLOCKS],
    pub stats: SenderStats,
}

/// Largest RTO (RFC 6298 §2.5 allows a cap; Linux uses 120 s).
const RTO_MAX: Time = 120 * NS_PER_S;

impl Sender {
    pub fn new(
        cc: Box<dyn CongestionControl>,
        tcp: &TcpConfig,
        total_segs: Option<u64>,
        max_window: Option<u32>,
    ) -> Self {
        Self {
            cc,
            win: Window::new(tcp.initial_cwnd),
            total_segs,
            stop_at: None,
            active: false,
            snd_una: 0,
            snd_nxt: 0,
            board: VecDeque::new(),
            sacked_out: 0,
            lost_out: 0,
            retrans_out: 0,
            high_sacked: 0,
            loss_scan: 0,
            retx_scan: 0,
            state: CaState::Open,
            recovery_point: 0,
            prr_delivered: 0,
            prr_out: 0,
            recover_fs: 0,
            cwnd_limited: false,
            max_window: max_window.unwrap_or(u32::MAX),
            srtt: None,
            rttvar: 0,
            min_rtt: Time::MAX,
            rto: tcp.rto_initial_ns,
            backoff: 1,
            rto_deadline: None,
            una_at_last_rto: 0,
            rto_min: tcp.rto_min_ns,
            dupthresh: tcp.dupthresh as u64,
            sack_cache: [(0, 0); MAX_SACK_BLOCKS],
            stats: SenderStats::default(),
        }
    }

    pub fn variant(&self) -> &'static str {
        self.cc.name()
    }

    /// The application starts writing; `stop_at` ends new data for duration-bound flows.
    pub fn start(&mut self, stop_at: Option<Time>) {
        self.active = true;
        self.stop_at = stop_at;
    }

    /// The application stops writing (duration elapsed); data in flight is still recovered.
    pub fn stop_new_data(&mut self, now: Time) {
        self.stop_at = Some(self.stop_at.map_or(now, |s| s.min(now)));
    }

    /// Every segment of a volume-bound flow is acknowledged.
    pub fn is_complete(&self) -> bool {
        self.total_segs.is_some_and(|t| self.snd_una >= t)
    }

    /// Segments in the network (Linux `tcp_packets_in_flight`).
    pub fn in_flight(&self) -> u32 {
        ((self.snd_nxt - self.snd_una) as u32 - self.sacked_out - self.lost_out) + self.retrans_out
    }

    pub fn srtt(&self) -> Option<Time> {
        self.srtt
    }

    pub fn rto(&self) -> Time {
        self.rto.saturating_mul(self.backoff as u64).min(RTO_MAX)
    }

    pub fn rto_deadline(&self) -> Option<Time> {
        self.rto_deadline
    }

    fn has_new_data(&self, now: Time) -> bool {
        self.total_segs.is_none_or(|t| self.snd_nxt < t) && self.stop_at.is_none_or(|s| now < s)
    }

    /// The next segment to put on the wire now, if the window and the data allow one.
    /// The host cannot take another segment now (TCP Small Queues): the sender is limited
    /// by its host, not by its window, unless the window is full anyway.
    pub fn on_host_limited(&mut self) {
        self.cwnd_limited = self.in_flight() >= self.win.cwnd;
    }

    pub fn poll_transmit(&mut self, now: Time) -> Option<Segment> {
        if !self.active || self.is_complete() {
            return None;
        }
        let in_flight = self.in_flight();
        if in_flight >= self.win.cwnd.min(self.max_window) {
            self.cwnd_limited = in_flight >= self.win.cwnd;
            return None;
        }
        // Retransmissions of segments deemed lost go first (RFC 6675 NextSeg rule 1).
        if self.lost_out > self.retrans_out {
            let from = self.retx_scan.max(self.snd_una);
            for seq in from..self.snd_nxt {
                let f = &mut self.board[(seq - self.snd_una) as usize];
                if *f & (LOST | RETRANS | SACKED) == LOST {
                    *f |= RETRANS;
                    self.retrans_out += 1;
                    self.retx_scan = seq + 1;
                    self.stats.retransmissions += 1;
                    self.on_transmit(now);
                    return Some(Segment {
                        seq,
                        ts: now,
                        retransmission: true,
                    });
                }
            }
            self.retx_scan = self.snd_nxt;
        }
        if self.has_new_data(now) {
            let seq = self.snd_nxt;
            self.snd_nxt += 1;
            self.board.push_back(0);
            self.stats.segments_sent += 1;
            self.on_transmit(now);
            return Some(Segment {
                seq,
                ts: now,
                retransmission: false,
            });
        }
        self.cwnd_limited = false;
        None
    }

    fn on_transmit(&mut self, now: Time) {
        if self.state == CaState::Recovery {
            self.prr_out += 1;
        }
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rto());
        }
    }

    /// RFC 6298 §2: SRTT/RTTVAR; RTO = SRTT + max(4·RTTVAR, RTO_min), the form Linux
    /// uses to apply its 200 ms minimum.
    fn update_rtt(&mut self, r: Time) {
        self.min_rtt = self.min_rtt.min(r);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let err = s.abs_diff(r);
                self.rttvar = (3 * self.rttvar + err) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
        self.rto = (self.srtt.unwrap() + (4 * self.rttvar).max(self.rto_min)).min(RTO_MAX);
    }

    fn mark(&mut self, seq: u64, set: u8) -> u8 {
        let f = &mut self.board[(seq - self.snd_una) as usize];
        let old = *f;
        *f |= set;
        old
    }

    /// Marks `[start, end)` as SACKed; returns the segments newly delivered.
    fn sack_range(&mut self, start: u64, end: u64) -> u32 {
        let mut delivered = 0;
        for seq in start..end {
            let f = &mut self.board[(seq - self.snd_una) as usize];
            if *f & SACKED != 0 {
                continue;
            }
            if *f & LOST != 0 {
                self.lost_out -= 1;
            }
            if *f & RETRANS != 0 {
                self.retrans_out -= 1;
            }
            *f = SACKED;
            self.sacked_out += 1;
            delivered += 1;
        }
        delivered
    }

    /// Processes an ACK at `now`.
    pub fn on_ack(&mut self, now: Time, ack: &AckSegment) {
        if !self.active {
            return;
        }
        let prior_in_flight = self.in_flight();
        let mut delivered = 0u32;
        let cum = ack.cum.min(self.snd_nxt);
        if cum > self.snd_una {
            for _ in self.snd_una..cum {
                let f = self
                    .board
                    .pop_front()
                    .expect("scoreboard covers snd_una..snd_nxt");
                if f & SACKED != 0 {
                    self.sacked_out -= 1;
                } else {
                    delivered += 1;
                    if f & LOST != 0 {
                        self.lost_out -= 1;
                    }
                    if f & RETRANS != 0 {
                        self.retrans_out -= 1;
                    }
                }
            }
            self.snd_una = cum;
            self.high_sacked = self.high_sacked.max(cum);
            self.loss_scan = self.loss_scan.max(cum);
            self.retx_scan = self.retx_scan.max(cum);
            self.backoff = 1;
            // RFC 6298 §5.3: restart the timer when new data is acknowledged.
            self.rto_deadline = if self.snd_una < self.snd_nxt {
                Some(now + self.rto())
            } else {
                None
            };
        }
        for b in 0..ack.n_sack as usize {
            let (s, e) = ack.sack[b];
            let (mut s, e) = (s.max(self.snd_una), e.min(self.snd_nxt));
            // Skip the part of the block processed with an earlier ACK.
            for &(cs, ce) in &self.sack_cache {
                if cs <= s && s < ce {
                    s = ce;
                }
            }
            if s < e {
                delivered += self.sack_range(s, e);
            }
            self.high_sacked = self.high_sacked.max(e);
        }
        self.sack_cache = ack.sack;
        for b in ack.n_sack as usize..MAX_SACK_BLOCKS {
            self.sack_cache[b] = (0, 0);
        }

        let rtt = if delivered > 0 {
            Some(now.saturating_sub(ack.ts_echo))
        } else {
            None
        };
        if let Some(r) = rtt {
            self.update_rtt(r);
        }

        // Loss marking: a hole with `dupthresh` segments SACKed above it is lost.
        let mut newly_lost = 0;
        let mark_below = self.high_sacked.saturating_sub(self.dupthresh);
        if mark_below > self.loss_scan {
            for seq in self.loss_scan..mark_below {
                if self.mark(seq, 0) & (SACKED | LOST) == 0 {
                    self.mark(seq, LOST);
                    self.lost_out += 1;
                    newly_lost += 1;
                }
            }
            self.loss_scan = mark_below;
        }

        match self.state {
            CaState::Open if newly_lost > 0 => self.enter_recovery(now, prior_in_flight),
            CaState::Recovery | CaState::Loss if self.snd_una >= self.recovery_point => {
                if self.state == CaState::Recovery {
                    // Linux `tcp_end_cwnd_reduction`.
                    self.win.cwnd = self.win.ssthresh.max(1);
                    self.state = CaState::Open;
                    self.cc.on_recovery_exit(&mut self.win, now);
                } else {
                    self.state = CaState::Open;
                }
                if newly_lost > 0 {
                    self.enter_recovery(now, prior_in_flight);
                }
            }
            _ => {}
        }

        let info = Ack {
            now,
            acked: delivered,
            rtt,
            min_rtt: self.min_rtt,
            in_flight: self.in_flight(),
            cwnd_limited: self.cwnd_limited,
        };
        if delivered > 0 {
            self.cc.on_packets_acked(&self.win, &info);
        }
        if self.state == CaState::Recovery {
            self.prr_update(delivered);
        } else if delivered > 0 {
            self.cc.on_ack(&mut self.win, &info);
        }
    }

    fn enter_recovery(&mut self, now: Time, prior_in_flight: u32) {
        self.win.ssthresh = self.cc.ssthresh_on_loss(&self.win, now);
        self.win.cwnd_cnt = 0;
        self.state = CaState::Recovery;
        self.recovery_point = self.snd_nxt;
        self.prr_delivered = 0;
        self.prr_out = 0;
        self.recover_fs = prior_in_flight.max(1);
        self.stats.fast_recoveries += 1;
    }

    /// RFC 6937 §3 (PRR with the slow-start reduction bound), as Linux `tcp_cwnd_reduction`.
    fn prr_update(&mut self, delivered: u32) {
        self.prr_delivered += delivered;
        let pipe = self.in_flight();
        let ssthresh = self.win.ssthresh;
        let sndcnt = if pipe > ssthresh {
            let target =
                (self.prr_delivered as u64 * ssthresh as u64).div_ceil(self.recover_fs as u64);
            (target as i64 - self.prr_out as i64).max(0) as u32
        } else {
            let limit = self
                .prr_delivered
                .saturating_sub(self.prr_out)
                .max(delivered)
                + 1;
            (ssthresh - pipe).min(limit)
        };
        self.win.cwnd = (pipe + sndcnt).max(1);
    }

    /// The retransmission timer fired at `now` (call only once `now >= rto_deadline`).
    pub fn on_rto(&mut self, now: Time) {
        if self.snd_una >= self.snd_nxt {
            self.rto_deadline = None;
            return;
        }
        self.stats.timeouts += 1;
        // A new congestion event (Linux `tcp_enter_loss`): from Open, or a timeout in Loss
        // after the previous timeout's retransmissions made progress. Not when the
        // retransmission of the same data times out again, nor in fast recovery, whose
        // reduction already happened.
        let progressed = self.state == CaState::Loss && self.snd_una > self.una_at_last_rto;
        if self.state == CaState::Open || progressed {
            self.win.ssthresh = self.cc.ssthresh_on_loss(&self.win, now);
        }
        self.una_at_last_rto = self.snd_una;
        self.win.cwnd = 1;
        self.win.cwnd_cnt = 0;
        self.cc.on_rto(&self.win, now);
        // Everything not SACKed is presumed lost and is sent again (Linux `tcp_enter_loss`).
        self.lost_out = 0;
        self.retrans_out = 0;
        for f in self.board.iter_mut() {
            if *f & SACKED == 0 {
                *f = LOST;
                self.lost_out += 1;
            }
        }
        self.retx_scan = self.snd_una;
        self.loss_scan = self
            .loss_scan
            .max(self.high_sacked.saturating_sub(self.dupthresh));
        self.state = CaState::Loss;
        self.recovery_point = self.snd_nxt;
        self.backoff = (self.backoff * 2).min(64);
        self.rto_deadline = Some(now + self.rto());
    }
}

/// The receiving end: reassembly, delayed ACKs, SACK blocks.
pub struct Receiver {
    /// Next segment expected in order.
    pub rcv_nxt: u64,
    /// Out-of-order segments held, as sorted disjoint ranges `[start, end)` above `rcv_nxt`.
    ooo: Vec<(u64, u64)>,
    /// Starts of the most recently changed ranges, newest first (RFC 2018 block order).
    recent: [u64; MAX_SACK_BLOCKS],
    n_recent: usize,
    /// In-order segments received and not yet acknowledged.
    pending: u32,
    /// Timestamp to echo in the next (delayed) ACK: the earliest unacknowledged segment's.
    ts_echo: Time,
    delayed_ack: bool,
    delack_timeout: Time,
    delack_deadline: Option<Time>,
}

/// What the receiver did with a segment.
pub struct Received {
    /// Segments that became in-order (delivered to the application), `[from, to)`.
    pub delivered: (u64, u64),
    /// An ACK to send now.
    pub ack: Option<AckSegment>,
}

impl Receiver {
    pub fn new(tcp: &TcpConfig) -> Self {
        Self {
            rcv_nxt: 0,
            ooo: Vec::new(),
            recent: [0; MAX_SACK_BLOCKS],
            n_recent: 0,
            pending: 0,
            ts_echo: 0,
            delayed_ack: tcp.delayed_ack,
            delack_timeout: tcp.delayed_ack_timeout_ns,
            delack_deadline: None,
        }
    }

    pub fn delack_deadline(&self) -> Option<Time> {
        self.delack_deadline
    }

    fn touch(&mut self, start: u64) {
        let mut list = [start; MAX_SACK_BLOCKS];
        let mut n = 1;
        for &s in &self.recent[..self.n_recent] {
            if s != start && n < MAX_SACK_BLOCKS {
                list[n] = s;
                n += 1;
            }
        }
        self.recent = list;
        self.n_recent = n;
    }

    fn build_ack(&self, ts_echo: Time) -> AckSegment {
        let mut ack = AckSegment {
            cum: self.rcv_nxt,
            ts_echo,
            sack: [(0, 0); MAX_SACK_BLOCKS],
            n_sack: 0,
        };
        for &start in &self.recent[..self.n_recent] {
            // A recently reported range may have merged into another: report what holds it.
            let i = self.ooo.partition_point(|r| r.1 <= start);
            if let Some(&r) = self.ooo.get(i) {
                if r.0 <= start && !ack.sack[..ack.n_sack as usize].contains(&r) {
                    ack.sack[ack.n_sack as usize] = r;
                    ack.n_sack += 1;
                }
            }
        }
        ack
    }

    /// A data segment arrives at `now`.
    pub fn on_segment(&mut self, now: Time, seg: &Segment) -> Received {
        let before = self.rcv_nxt;
        if seg.seq == self.rcv_nxt {
            self.rcv_nxt += 1;
            let had_holes = !self.ooo.is_empty();
            if let Some(&(s, e)) = self.ooo.first() {
                if s == self.rcv_nxt {
                    self.rcv_nxt = e;
                    self.ooo.remove(0);
                }
            }
            if self.pending == 0 {
                self.ts_echo = seg.ts;
            }
            self.pending += 1;
            if had_holes || !self.delayed_ack || self.pending >= 2 {
                let ack = self.build_ack(self.ts_echo);
                self.pending = 0;
                self.delack_deadline = None;
                return Received {
                    delivered: (before, self.rcv_nxt),
                    ack: Some(ack),
                };
            }
            if self.delack_deadline.is_none() {
                self.delack_deadline = Some(now + self.delack_timeout);
            }
            return Received {
                delivered: (before, self.rcv_nxt),
                ack: None,
            };
        }
        if seg.seq > self.rcv_nxt {
            self.insert_ooo(seg.seq);
        }
        // Out of order or duplicate: acknowledge at once (RFC 5681 §4.2).
        self.pending = 0;
        self.delack_deadline = None;
        Received {
            delivered: (before, before),
            ack: Some(self.build_ack(seg.ts)),
        }
    }

    fn insert_ooo(&mut self, seq: u64) {
        let i = self.ooo.partition_point(|r| r.1 < seq);
        // Ranges are [s, e): `seq` extends range i if e == seq, or range i holds it.
        if let Some(r) = self.ooo.get_mut(i) {
            if r.0 <= seq && seq < r.1 {
                let s = r.0;
                self.touch(s);
                return;
            }
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

    /// The delayed-ACK timer fired.
    pub fn on_delack_timer(&mut self, now: Time) -> Option<AckSegment> {
        match self.delack_deadline {
            Some(d) if d <= now && self.pending > 0 => {
                self.pending = 0;
                self.delack_deadline = None;
                Some(self.build_ack(self.ts_echo))
            }
            Some(d) if d <= now => {
                self.delack_deadline = None;
                None
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc;

    fn sender(total: Option<u64>) -> Sender {
        let mut s = Sender::new(
            cc::by_name("reno").unwrap(),
            &TcpConfig::default(),
            total,
            None,
        );
        s.start(None);
        s
    }

    fn drain(s: &mut Sender, now: Time) -> Vec<Segment> {
        std::iter::from_fn(|| s.poll_transmit(now)).collect()
    }

    fn ack(cum: u64, sack: &[(u64, u64)], ts: Time) -> AckSegment {
        let mut a = AckSegment {
            cum,
            ts_echo: ts,
            sack: [(0, 0); 3],
            n_sack: sack.len() as u8,
        };
        a.sack[..sack.len()].copy_from_slice(sack);
        a
    }

    #[test]
    fn sends_initial_window_then_grows_in_slow_start() {
        let mut s = sender(None);
        assert_eq!(drain(&mut s, 0).len(), 10);
        s.on_ack(1_000_000, &ack(2, &[], 0));
        assert_eq!(s.win.cwnd, 12);
        // Two acknowledged, two more window: four new segments.
        assert_eq!(drain(&mut s, 1_000_000).len(), 4);
        assert_eq!(s.srtt(), Some(1_000_000));
    }

    #[test]
    fn three_sacked_segments_trigger_fast_retransmit_of_the_hole() {
        let mut s = sender(None);
        s.win.cwnd = 20;
        let sent = drain(&mut s, 0);
        assert_eq!(sent.len(), 20);
        // Segment 5 is lost; 6, 7, 8 arrive and are SACKed.
        s.on_ack(10, &ack(5, &[], 0));
        s.on_ack(11, &ack(5, &[(6, 7)], 0));
        s.on_ack(12, &ack(5, &[(6, 8)], 0));
        assert_eq!(s.state, CaState::Open);
        // Slow start went on meanwhile: 20 + 5 cumulatively acknowledged + 2 SACKed.
        assert_eq!(s.win.cwnd, 27);
        s.on_ack(13, &ack(5, &[(6, 9)], 0));
        assert_eq!(s.state, CaState::Recovery);
        assert_eq!(s.win.ssthresh, 13);
        let out = drain(&mut s, 13);
        assert_eq!(
            out.first().map(|g| (g.seq, g.retransmission)),
            Some((5, true))
        );
        assert_eq!(s.stats.retransmissions, 1);
        // The retransmission arrives: everything sent is acknowledged, recovery ends with
        // cwnd = ssthresh (the same ACK may then add one segment of congestion avoidance).
        let last = s.snd_nxt;
        s.on_ack(30, &ack(last, &[], 13));
        assert_eq!(s.state, CaState::Open);
        assert!((13..=14).contains(&s.win.cwnd), "cwnd {}", s.win.cwnd);
    }

    #[test]
    fn timeout_resends_from_the_oldest_unacknowledged() {
        let mut s = sender(Some(100));
        drain(&mut s, 0);
        let d = s.rto_deadline().unwrap();
        assert_eq!(d, NS_PER_S);
        s.on_rto(d);
        assert_eq!(s.state, CaState::Loss);
        assert_eq!(s.win.cwnd, 1);
        assert_eq!(s.win.ssthresh, 5);
        let out = drain(&mut s, d);
        assert_eq!(
            out,
            vec![Segment {
                seq: 0,
                ts: d,
                retransmission: true
            }]
        );
        assert_eq!(s.rto_deadline(), Some(d + 2 * NS_PER_S));
    }

    #[test]
    fn a_repeated_timeout_reduces_ssthresh_only_after_progress() {
        let mut s = sender(Some(100));
        drain(&mut s, 0);
        s.on_rto(NS_PER_S);
        assert_eq!(s.win.ssthresh, 5);
        drain(&mut s, NS_PER_S);
        // The retransmission is lost too: same episode, ssthresh kept (cwnd is 1 now).
        s.on_rto(3 * NS_PER_S);
        assert_eq!(s.win.ssthresh, 5);
        drain(&mut s, 3 * NS_PER_S);
        // It arrives; the next timeout, after progress, is a new congestion event.
        s.on_ack(3 * NS_PER_S + 1000, &ack(1, &[], 3 * NS_PER_S));
        assert_eq!(s.state, CaState::Loss);
        s.on_rto(5 * NS_PER_S);
        assert_eq!(s.win.ssthresh, 2);
    }

    #[test]
    fn volume_bound_sender_completes() {
        let mut s = sender(Some(3));
        assert_eq!(drain(&mut s, 0).len(), 3);
        s.on_ack(5, &ack(3, &[], 0));
        assert!(s.is_complete());
        assert_eq!(s.rto_deadline(), None);
        assert!(drain(&mut s, 5).is_empty());
    }

    #[test]
    fn receiver_delays_acks_and_reports_sack_blocks() {
        let mut r = Receiver::new(&TcpConfig::default());
        let seg = |seq| Segment {
            seq,
            ts: seq * 10,
            retransmission: false,
        };
        let a = r.on_segment(0, &seg(0));
        assert!(a.ack.is_none());
        assert_eq!(r.delack_deadline(), Some(40_000_000));
        let a = r.on_segment(1, &seg(1));
        assert_eq!(a.ack.unwrap().cum, 2);
        assert_eq!(a.ack.unwrap().ts_echo, 0);
        // 2 is lost; 3 and 4 arrive out of order.
        let a = r.on_segment(2, &seg(3)).ack.unwrap();
        assert_eq!((a.cum, a.n_sack, a.sack[0]), (2, 1, (3, 4)));
        r.on_segment(3, &seg(5 + 2)); // a second hole at 5..7
        let a = r.on_segment(4, &seg(4)).ack.unwrap();
        assert_eq!(a.n_sack, 2);
        assert_eq!(a.sack[0], (3, 5));
        assert_eq!(a.sack[1], (7, 8));
        // The retransmission of 2 fills the first hole: delivered 2..5, ACK at once.
        let got = r.on_segment(5, &seg(2));
        assert_eq!(got.delivered, (2, 5));
        let a = got.ack.unwrap();
        assert_eq!((a.cum, a.n_sack, a.sack[0]), (5, 1, (7, 8)));
    }

    #[test]
    fn delayed_ack_timer_acknowledges_a_lone_segment() {
        let mut r = Receiver::new(&TcpConfig::default());
        r.on_segment(
            0,
            &Segment {
                seq: 0,
                ts: 0,
                retransmission: false,
            },
        );
        assert!(r.on_delack_timer(39_999_999).is_none());
        assert_eq!(r.on_delack_timer(40_000_000).unwrap().cum, 1);
        assert_eq!(r.delack_deadline(), None);
    }
}
