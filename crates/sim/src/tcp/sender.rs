//! The TCP sender, after Linux 6.x.
//!
//! Send path (`tcp_write_xmit`): lost segments first, then new data, each within the
//! congestion window, the receive window, the pacing schedule (Linux internal pacing, used
//! by BBR) and TCP Small Queues: two skbs of the size TCP builds (`tcp_tso_autosize`, ~1 ms
//! of the pacing rate), or 1 ms of the pacing rate if more, may wait in the sender's own
//! host (`tcp_small_queue_check`). The caller puts
//! segments on the wire and polls again when one leaves the host (TSQ completion,
//! `tcp_tsq_handler`). With `TcpConfig::tso_defer`, new data waits for a whole skb's worth
//! of window, for at most 1 ms after the last transmission, outside loss recovery, and only
//! when an ACK is due within 1 ms (TSO deferral, `tcp_tso_should_defer`): a bulk sender
//! goes in bursts of an skb as a train of ACKs comes in, not a few segments per ACK,
//! whatever the interface's offloads; its write queue holds skbs of 64 KiB, each sent as
//! an autosized piece and the rest at the next ACK it fits. After each
//! attempt the window's use is latched for the current
//! window (`tcp_cwnd_validate`): a window counts as used if it was full, or, in slow start,
//! if at least half of it was in flight (`tcp_is_cwnd_limited`).
//!
//! ACK path (`tcp_ack`): SACK blocks, then the cumulative ACK, update the scoreboard, RACK
//! and the delivery-rate sample; the RTT comes from the send time of the oldest newly
//! acknowledged segment that was never retransmitted (Karn), else from the echoed
//! timestamp; RACK marks losses (`tcp_rack_mark_lost`), which start fast recovery with
//! Proportional Rate Reduction (RFC 6937, `tcp_cwnd_reduction`); the congestion control
//! grows the window only on ACKs that advance `snd_una` (`tcp_may_raise_cwnd`).
//!
//! Not modelled: F-RTO and the undo of spurious reductions (paths here never reorder, and
//! timeouts marking only old segments lost leave little to undo), ECN, the RFC 2861
//! decay of an unused window (a bulk sender blocked on a full socket buffer is exempt in
//! Linux too). The receive window is the receiver's (`rwnd.rs`).

use super::board::{Board, Seg, EVER_RETRANS};
use super::rate::{RateSample, RateState};
use super::timers::{rto_of, Jiffies, TimerKind, RTO_MAX};
use super::tsq::{TsqCache, TsqInputs};
use super::{rack::Rack, ts_delta_ms, AckSegment, CaState, Segment, MAX_SACK_BLOCKS};
use crate::cc::{Ack, CongestionControl, Window, GSO_MAX_SIZE};
use crate::config::{Kernel, TcpConfig};
use crate::time::{Time, NS_PER_MS};

/// Socket memory an MSS-sized segment occupies beyond its payload (its skb head,
/// `struct sk_buff` and `skb_shared_info` on x86-64): TSQ counts `skb->truesize`.
pub const SKB_OVERHEAD: u32 = 1280;
/// TSQ's limit without pacing (Linux 6.x `tcp_limit_output_bytes`, 4 MiB).
pub const LIMIT_OUTPUT_BYTES: f64 = 4_194_304.0;
/// TSQ keeps `pacing rate >> sk_pacing_shift` bytes in the host: 2^-10 s.
const PACING_SHIFT: f64 = 1024.0;
/// `net.ipv4.tcp_tso_rtt_log`: skbs grow by `GSO_MAX_SIZE >> (min_rtt_us >> 9)`.
const TSO_RTT_LOG: u32 = 9;
/// `net.ipv4.tcp_tso_win_divisor`: a deferred skb goes once a third of the window is free.
const TSO_WIN_DIVISOR: u64 = 3;
/// TSO deferral waits no longer than this after the last transmission (`tcp_wstamp_ns`).
const TSO_DEFER_MAX: Time = NS_PER_MS;
/// TSO deferral waits only for an ACK due within this (or half the smoothed RTT if less).
const TSO_DEFER_ACK_DUE: Time = NS_PER_MS;
/// Without TSQ (kernels before 3.6) the interface queue bounds what a sender keeps in its
/// host (`txqueuelen`, 1000 packets).
const TXQUEUELEN: usize = 1000;

/// Counters a user sees in the trace.
#[derive(Clone, Copy, Debug, Default)]
pub struct SenderStats {
    pub segments_sent: u64,
    pub retransmissions: u64,
    pub fast_recoveries: u64,
    pub timeouts: u64,
    /// Tail loss probes sent (new data or a retransmission).
    pub loss_probes: u64,
    /// Segments marked lost (Linux `tp->lost`): originals and lost retransmissions.
    pub lost: u64,
    /// Duplicate segments the receiver reported (D-SACK): spurious retransmissions.
    pub dsacks: u64,
    /// Segments received from the peer: its ACKs (Linux `tcpi_segs_in`, less the
    /// handshake's).
    pub acks_in: u64,
}

/// What the sender does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Put this segment on the wire now.
    Send(Segment),
    /// The congestion or receive window is full: wait for an ACK.
    CwndFull,
    /// Enough of this flow waits in its host (TSQ): poll again when a segment leaves it.
    HostQueue,
    /// The pacing schedule allows the next segment at this time.
    Pacing(Time),
    /// New data waits for more window to fill an skb (TSO deferral): poll again at an ACK.
    Deferred,
    /// Nothing to send.
    Idle,
}

/// What one ACK did, gathered while it is processed (Linux's `flag` and `sack_state`).
#[derive(Default)]
struct AckState {
    prior_in_flight: u32,
    prior_una: u64,
    prior_delivered: u64,
    prior_lost: u64,
    una_advanced: bool,
    data_sacked: bool,
    retrans_acked: bool,
    set_xmit_timer: bool,
    lost_retrans: bool,
    acked_segments: u32,
    first_ackt: Option<Time>,
    last_ackt: Option<Time>,
    first_sackt: Option<Time>,
    last_sackt: Option<Time>,
    rs: RateSample,
}

pub struct Sender {
    pub(super) cc: Box<dyn CongestionControl>,
    pub(super) kernel: Kernel,
    /// TSO deferral (`TcpConfig::tso_defer`).
    tso_defer: bool,
    /// Segments below this were checked by the duplicate-threshold rule (2006 kernel).
    fack_scan: u64,
    /// In flight before the ACK being processed (the 2006 kernel's cwnd-use test).
    prior_in_flight: u32,
    /// The congestion control sets cwnd and pacing itself (Linux `.cong_control`, BBR).
    pub(super) cc_controls: bool,
    /// The congestion control has `on_packets_acked` (`has_packets_acked`).
    cc_pkts_acked: bool,
    pub win: Window,
    mss: u32,
    /// Total segments to send; `None` while the application has unlimited data.
    total_segs: Option<u64>,
    /// The application stops handing over new data at this time (duration-bound flows).
    stop_at: Option<Time>,
    /// Segments the application has written so far (`None`: all of it, at once); a
    /// sleep-timer limiter writes a little at each tick.
    written: Option<u64>,
    /// New data held back (a plan's pause); retransmissions still go.
    paused: bool,
    /// When data was last sent (`lsndtime`), and the window a connection starts with.
    lsndtime: Time,
    initial_cwnd: u32,
    active: bool,
    pub(super) board: Board,
    pub(super) rack: Rack,
    pub(super) rate: RateState,
    pub state: CaState,
    /// `snd_nxt` when the current recovery or loss episode began (`high_seq`).
    pub(super) high_seq: u64,
    /// cwnd when the episode began (`prior_cwnd`), PRR's RecoverFS.
    pub(super) prior_cwnd: u32,
    prr_delivered: u32,
    prr_out: u32,
    /// The current window was used up (`is_cwnd_limited`), the most segments out in it
    /// (`max_packets_out`), and where it ends (`cwnd_usage_seq`).
    is_cwnd_limited: bool,
    max_packets_out: u32,
    cwnd_usage_seq: u64,
    /// Receive window, segments: the smallest of `window_cap`, a window clamp
    /// (`TCP_WINDOW_CLAMP`) and the window the receiver offers (`snd_wnd`).
    max_window: u32,
    window_cap: u32,
    clamp: u32,
    snd_wnd: u32,
    /// The receiver's last timestamp (`ts_recent`), echoed by every segment sent.
    ts_recent: Time,
    pub(super) srtt: Option<Time>,
    rttvar: Time,
    /// Smallest RTT seen (`tcp_min_rtt`); `Time::MAX` until known.
    min_rtt: Time,
    /// RTO before backoff (`icsk_rto` as last computed from an RTT sample).
    rto_base: Time,
    pub(super) backoff: u32,
    /// Timeouts since `snd_una` last advanced (`icsk_retransmits`).
    pub(super) retransmits: u32,
    rto_min: Time,
    dupthresh: u32,
    pub(super) clock: Jiffies,
    pub(super) timer: Option<(Time, TimerKind)>,
    /// `snd_nxt` after the outstanding loss probe (`tlp_high_seq`), and whether the probe
    /// was a retransmission (`tlp_retrans`).
    pub(super) tlp_high_seq: Option<u64>,
    pub(super) tlp_retrans: bool,
    /// The loss-probe timer fired: the next poll sends the probe.
    pub(super) probe_due: bool,
    probe_sent_now: bool,
    /// Linux internal pacing is on (`sk_pacing_status`, requested by BBR).
    paced: bool,
    /// `sk_pacing_rate`, payload bytes per second (infinite until an RTT is known).
    pacing_rate: f64,
    /// `sk_max_pacing_rate` (`SO_MAX_PACING_RATE`).
    max_pacing_rate: f64,
    /// Earliest departure of the next segment (`tcp_wstamp_ns`): under pacing the
    /// schedule's, else the last transmission's time.
    wstamp: Time,
    /// Segments of the skb being sent that TSO deferral already let go.
    skb_left: u32,
    /// Where the write queue's head skb ends (segments): `sendmsg` builds skbs of its size
    /// goal (`tcp_xmit_size_goal`), larger than what one transmission takes (the autosize),
    /// so a transmission can leave the rest of an skb at the queue's head (deferral only).
    wq_end: u64,
    /// This transmit attempt deferred for want of congestion window (`is_cwnd_limited`).
    deferred_cwnd_limited: bool,
    /// TSQ's limits in segments (new data, retransmissions), kept with the pacing rate.
    tsq_segs: [usize; 2],
    tsq_cache: TsqCache,
    data_segs_out: u64,
    /// Previously processed SACK blocks (Linux `recv_sack_cache`).
    sack_cache: [(u64, u64); MAX_SACK_BLOCKS],
    pub stats: SenderStats,
}

impl Sender {
    pub fn new(
        cc: Box<dyn CongestionControl>,
        tcp: &TcpConfig,
        mss: u32,
        total_segs: Option<u64>,
        max_window: Option<u32>,
    ) -> Self {
        let mut s = Self {
            cc_controls: cc.has_cong_control(),
            cc_pkts_acked: cc.has_packets_acked(),
            cc,
            kernel: tcp.kernel,
            tso_defer: tcp.tso_defer,
            fack_scan: 0,
            prior_in_flight: 0,
            win: Window::new(tcp.initial_cwnd),
            mss,
            total_segs,
            stop_at: None,
            written: None,
            paused: false,
            lsndtime: 0,
            initial_cwnd: tcp.initial_cwnd,
            active: false,
            board: Board::default(),
            rack: Rack::default(),
            rate: RateState::default(),
            state: CaState::Open,
            high_seq: 0,
            prior_cwnd: 0,
            prr_delivered: 0,
            prr_out: 0,
            is_cwnd_limited: false,
            max_packets_out: 0,
            cwnd_usage_seq: 0,
            max_window: max_window.unwrap_or(u32::MAX),
            window_cap: max_window.unwrap_or(u32::MAX),
            clamp: u32::MAX,
            snd_wnd: u32::MAX,
            ts_recent: 0,
            srtt: None,
            rttvar: 0,
            min_rtt: Time::MAX,
            rto_base: tcp.rto_initial_ns,
            backoff: 1,
            retransmits: 0,
            rto_min: tcp.rto_min_ns,
            dupthresh: tcp.dupthresh,
            clock: Jiffies::new(tcp.hz),
            timer: None,
            tlp_high_seq: None,
            tlp_retrans: false,
            probe_due: false,
            probe_sent_now: false,
            paced: false,
            pacing_rate: f64::INFINITY,
            max_pacing_rate: f64::INFINITY,
            wstamp: 0,
            skb_left: 0,
            wq_end: 0,
            deferred_cwnd_limited: false,
            tsq_segs: [0, 0],
            tsq_cache: TsqCache::default(),
            data_segs_out: 0,
            sack_cache: [(0, 0); MAX_SACK_BLOCKS],
            stats: SenderStats::default(),
        };
        s.refresh_tsq();
        s
    }

    pub fn variant(&self) -> &'static str {
        self.cc.name()
    }

    /// Timer-wheel phase of this host (host noise on); `None`: exact timers.
    pub fn set_timer_phase(&mut self, phase: Option<Time>) {
        self.clock.phase = phase;
    }

    /// `SO_MAX_PACING_RATE`, payload bytes per second (caps the rate TSQ sizes for).
    pub fn set_max_pacing_rate(&mut self, bytes_per_s: f64) {
        self.max_pacing_rate = bytes_per_s;
        self.set_pacing_rate(self.pacing_rate);
    }

    /// The receiver's window clamped to `segs` (`TCP_WINDOW_CLAMP`; `None` lifts it).
    pub fn set_window_clamp(&mut self, segs: Option<u32>) {
        self.clamp = segs.unwrap_or(u32::MAX).max(1);
        self.update_max_window();
    }

    /// The receiver offers `bytes` of window past `snd_una` (`tcp_ack_update_window`);
    /// `u64::MAX`: no window is modelled.
    pub fn set_peer_window(&mut self, bytes: u64) {
        self.snd_wnd = if bytes == u64::MAX {
            u32::MAX
        } else {
            // A zero window would need Linux's persist timer: one segment stands for its
            // probe (a receiver that reads at once never keeps it shut for long).
            (bytes / self.mss as u64).clamp(1, u32::MAX as u64 - 1) as u32
        };
        self.update_max_window();
    }

    fn update_max_window(&mut self) {
        self.max_window = self.window_cap.min(self.clamp).min(self.snd_wnd);
    }

    /// The window the receiver offers, segments (`None`: not modelled).
    pub fn peer_window(&self) -> Option<u32> {
        (self.snd_wnd != u32::MAX).then_some(self.snd_wnd)
    }

    /// The application has written `segs` segments so far (`None`: everything).
    pub fn set_written(&mut self, segs: Option<u64>) {
        self.written = segs;
    }

    /// Whether the application has handed over all its data (no sleep-timer limit).
    pub fn is_written_all(&self) -> bool {
        self.written.is_none()
    }

    /// The next new segment to send (`snd_nxt`, in segments).
    pub fn next_seq(&self) -> u64 {
        self.board.nxt()
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Holds new data back (`true`) or lets it go again.
    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// The connection is established at `now` and the application starts writing;
    /// `stop_at` ends new data for duration-bound flows; `handshake_rtt` is the RTT the
    /// SYN exchange measured, the first sample of the estimator as in Linux.
    pub fn start(&mut self, now: Time, stop_at: Option<Time>, handshake_rtt: Option<Time>) {
        self.active = true;
        self.stop_at = stop_at;
        if let Some(r) = handshake_rtt {
            self.rtt_estimator(r.max(1));
            self.min_rtt = r.max(1);
            // The SYN-ACK's timestamp: it left the receiver half the handshake ago (0, no
            // echo, if that was before the simulated time began).
            self.ts_recent = now.saturating_sub(r / 2);
        }
        self.wstamp = now;
        let info = self.ack_info(now, &RateSample::default(), 0);
        self.cc.init(&mut self.win, &info);
        self.paced = self.cc.pacing_rate().is_some();
        self.update_pacing_rate();
        self.refresh_tsq();
    }

    /// The application stops writing (duration elapsed); data in flight is still recovered.
    pub fn stop_new_data(&mut self, now: Time) {
        self.stop_at = Some(self.stop_at.map_or(now, |s| s.min(now)));
    }

    /// Every segment of a volume-bound flow is acknowledged.
    pub fn is_complete(&self) -> bool {
        self.total_segs.is_some_and(|t| self.board.una >= t)
    }

    /// Segments in the network (Linux `tcp_packets_in_flight`).
    pub fn in_flight(&self) -> u32 {
        let b = &self.board;
        b.packets_out() - b.sacked_out - b.lost_out + b.retrans_out
    }

    pub fn srtt(&self) -> Option<Time> {
        self.srtt
    }

    /// The retransmission timeout, with backoff.
    pub fn rto(&self) -> Time {
        self.rto_base
            .saturating_mul(self.backoff as u64)
            .min(RTO_MAX)
    }

    /// Pacing rate in payload bytes per second (`sk_pacing_rate`).
    pub fn pacing_rate(&self) -> f64 {
        self.pacing_rate
    }

    fn has_new_data(&self, now: Time) -> bool {
        !self.paused && self.board.nxt() < self.data_end() && self.stop_at.is_none_or(|s| now < s)
    }

    /// Where the data the application has handed over ends (segments; `u64::MAX`: no end).
    fn data_end(&self) -> u64 {
        self.total_segs
            .unwrap_or(u64::MAX)
            .min(self.written.unwrap_or(u64::MAX))
    }

    /// Segments this flow may keep in its host (Linux `tcp_small_queue_check`, whose
    /// limit doubles for retransmissions): two skbs of `tso_segs` segments, or ~1 ms of
    /// the pacing rate in socket memory if that is more.
    pub fn tsq_limit(&self, retransmission: bool) -> usize {
        self.tsq_segs[retransmission as usize]
    }

    /// Segments per skb (Linux `tcp_tso_segs` and `tcp_tso_autosize`): about 1 ms of the
    /// pacing rate, more at RTTs below a few ms, at least the control's minimum, at most
    /// `GSO_MAX_SIZE`. TCP builds such skbs whatever the interface's offloads (GSO is
    /// always on for TCP since Linux 4.14; the interface segments them).
    fn tso_segs(&self) -> u32 {
        let mut bytes = self.pacing_rate / PACING_SHIFT;
        if self.min_rtt != Time::MAX {
            let r = (self.min_rtt / 1_000) >> TSO_RTT_LOG;
            if r < 32 {
                bytes += GSO_MAX_SIZE / (1u64 << r) as f64;
            }
        }
        ((bytes.min(GSO_MAX_SIZE) / self.mss as f64) as u32).max(self.cc.min_tso_segs())
    }

    /// The TSQ limits for new data and for retransmissions (`tcp_small_queue_check`, whose
    /// limit doubles for retransmissions), in segments. TSQ counts skbs: at least two of the
    /// size TCP builds. Returns the skb's segments with them.
    fn compute_tsq_limits(&self) -> (u32, [usize; 2]) {
        let tso_segs = self.tso_segs();
        let segs = tso_segs as f64;
        let truesize = segs * self.mss as f64 + SKB_OVERHEAD as f64;
        let mut limit = (2.0 * truesize).max(self.pacing_rate / PACING_SHIFT);
        if !self.paced {
            limit = limit.min(LIMIT_OUTPUT_BYTES);
        }
        // Another skb may go while the memory in use (one unit over the skbs' truesize)
        // does not exceed the limit. The quotient is positive: truncation is its floor.
        let in_segs = |limit: f64| ((((limit - 1.0) / truesize) as u64 + 1) as f64 * segs) as usize;
        (tso_segs, [in_segs(limit), in_segs(2.0 * limit)])
    }

    fn tsq_blocks(&self, host_queued: usize, retransmission: bool) -> bool {
        self.board.packets_out() > 1 && host_queued >= self.tsq_limit(retransmission)
    }

    /// The next thing to do at `now`, with `host_queued` of this flow's segments still in
    /// its host (Linux `tcp_xmit_retransmit_queue`, then `tcp_write_xmit`).
    pub fn poll_transmit(&mut self, now: Time, host_queued: usize) -> Poll {
        if !self.active || self.is_complete() {
            return Poll::Idle;
        }
        if self.paced && self.wstamp > now {
            return Poll::Pacing(self.wstamp);
        }
        let in_flight = self.in_flight();
        if let Some(seq) = self.board.next_lost() {
            if in_flight >= self.win.cwnd {
                return Poll::CwndFull;
            }
            if self.tsq_blocks(host_queued, true) {
                return Poll::HostQueue;
            }
            return Poll::Send(self.retransmit(seq, now));
        }
        if !self.has_new_data(now) {
            if self.probe_due {
                return self.probe_last(now, host_queued);
            }
            self.check_app_limited(in_flight, host_queued);
            return Poll::Idle;
        }
        self.restart_after_idle(now);
        let window_full = in_flight >= self.win.cwnd && !self.probe_due;
        if window_full || self.board.packets_out() >= self.max_window {
            return Poll::CwndFull;
        }
        if self.skb_left == 0 {
            match self.tso_defer(now, in_flight) {
                Ok(segs) => self.skb_left = segs,
                Err(cwnd_limited) => {
                    self.deferred_cwnd_limited |= cwnd_limited;
                    return Poll::Deferred;
                }
            }
        }
        if self.tsq_blocks(host_queued, false) {
            return Poll::HostQueue;
        }
        self.skb_left -= 1;
        Poll::Send(self.send_new(now))
    }

    /// The skb `sendmsg` builds (`tcp_xmit_size_goal`), segments: `GSO_MAX_SIZE` bounded by
    /// half the receive window (`tcp_bound_to_half_wnd`).
    fn size_goal(&self) -> u32 {
        let gso = (GSO_MAX_SIZE / self.mss as f64) as u32;
        gso.min((self.max_window / 2).max(1))
    }

    /// The skb at the head of the write queue (it ends at `wq_end`, or where the written
    /// data does): its segments, and whether it carries the flow's last data (its FIN) or
    /// is the queue's tail (the application may add to it).
    fn head_skb(&self) -> (u32, bool, bool) {
        let nxt = self.board.nxt();
        let end = self.data_end();
        let segs = self.wq_end.min(end).saturating_sub(nxt) as u32;
        let fin = self.written.is_none() && self.total_segs.is_some_and(|t| nxt + segs as u64 >= t);
        (segs, fin, end <= self.wq_end)
    }

    /// Linux `tcp_tso_should_defer` for the skb at the head of the write queue, with room
    /// in both windows: `Ok(segments)` to send that many of it now (`tcp_mss_split_point`),
    /// `Err(cwnd_limited)` to wait for more window (the congestion window's, or not).
    /// Without deferral every segment may go (`Ok(u32::MAX)`).
    fn tso_defer(&mut self, now: Time, in_flight: u32) -> Result<u32, bool> {
        if !self.tso_defer || self.kernel == Kernel::Linux2006 {
            return Ok(u32::MAX);
        }
        // The head skb was sent whole: the next one in the write queue starts here.
        if self.board.nxt() >= self.wq_end {
            self.wq_end = self.board.nxt() + self.size_goal() as u64;
        }
        let goal = self.tso_segs();
        let (skb, fin, tail) = self.head_skb();
        let cong_win = self.win.cwnd.saturating_sub(in_flight);
        let send_win = self.max_window.saturating_sub(self.board.packets_out());
        let limit = cong_win.min(send_win);
        // What one transmission takes (`tcp_mss_split_point`, `tcp_cwnd_test`).
        let send = Ok(skb
            .min(limit)
            .min(goal)
            .min((self.win.cwnd / 2).max(1))
            .max(1));
        if skb <= 1 || self.probe_due || self.state >= CaState::Recovery {
            return send;
        }
        // Not if the last transmission was over 1 ms ago, nor if a full skb fits.
        if now.saturating_sub(self.wstamp) > TSO_DEFER_MAX || limit >= goal {
            return send;
        }
        if !tail && limit >= skb {
            return send;
        }
        // At least a third of the window is free: use it.
        let window = self.max_window.min(self.win.cwnd) as u64;
        if TSO_WIN_DIVISOR * limit as u64 >= window {
            return send;
        }
        // The next ACK may come too late: the oldest segment out is acknowledged in more
        // than min(1 ms, srtt/2) from now (Linux 6.18, "tcp: fix tcp_tso_should_defer() vs
        // large RTT"; before it, deferral needed only that segment to be half an RTT old).
        if self.board.packets_out() == 0 {
            return send;
        }
        let srtt = self.srtt.unwrap_or(0);
        let expected_ack = self.board.seg(self.board.una).xmit + srtt;
        if expected_ack.saturating_sub(now) > (srtt / 2).min(TSO_DEFER_ACK_DUE) {
            return send;
        }
        if cong_win < send_win {
            if cong_win <= skb {
                return Err(true);
            }
        } else if send_win <= skb {
            return Err(false);
        }
        if fin {
            return send;
        }
        Err(false)
    }

    fn send_new(&mut self, now: Time) -> Segment {
        let packets_out = self.board.packets_out();
        let mut seg = Seg::new(now);
        self.rate.on_sent(now, packets_out, &mut seg);
        self.board.push(seg);
        self.stats.segments_sent += 1;
        self.on_sent(now);
        // Linux `tcp_event_new_data_sent`.
        if packets_out == 0 || self.timer_kind().is_some_and(|k| k != TimerKind::Rto) {
            self.rearm_rto(now);
        }
        if self.probe_due {
            self.probe_sent(now);
        }
        let seq = self.board.nxt() - 1;
        Segment {
            seq,
            ts: now,
            ts_echo: self.ts_recent,
            retransmission: false,
            push: self.pushes(seq),
        }
    }

    /// Whether the new segment `seq` goes with PSH or short (`Segment::push`): it is the
    /// last the application has written (`tcp_push` at the end of `sendmsg` marks the
    /// write queue's tail; a volume's last segment) or the last the receive window takes.
    /// Windows are bytes, and Linux's offered window is a multiple of its scale, not of
    /// the MSS: a window-limited Linux sender ends each flight with the remainder as a
    /// sub-MSS segment (`tcp_mss_split_point`, allowed by Minshall's Nagle once the
    /// previous one is acknowledged), for which this segment stands. Not modelled: the
    /// PSH an unlimited writer's `sendmsg` leaves every 128 KiB or so inside a flight,
    /// where the next segment follows anyway.
    fn pushes(&self, seq: u64) -> bool {
        seq + 1 == self.data_end() || self.board.packets_out() >= self.max_window
    }

    fn retransmit(&mut self, seq: u64, now: Time) -> Segment {
        let packets_out = self.board.packets_out();
        self.board.retransmitted(seq, now);
        self.rate.on_sent(now, packets_out, self.board.seg_mut(seq));
        self.stats.retransmissions += 1;
        self.on_sent(now);
        // Resending the head restarts the RTO (`tcp_xmit_retransmit_queue`).
        if seq == self.board.una && self.timer_kind() != Some(TimerKind::ReorderTimeout) {
            self.reset_timer(TimerKind::Rto, now, self.rto());
        }
        Segment {
            seq,
            ts: now,
            ts_echo: self.ts_recent,
            retransmission: true,
            push: false,
        }
    }

    /// The loss probe when there is no new data: the last segment again (unless a copy of
    /// it still waits in the host, Linux `skb_still_in_host_queue`).
    fn probe_last(&mut self, now: Time, host_queued: usize) -> Poll {
        let Some(last) = self.board.last() else {
            self.probe_due = false;
            return Poll::Idle;
        };
        if host_queued > 0 {
            return Poll::HostQueue;
        }
        let seg = self.retransmit(last, now);
        self.tlp_retrans = true;
        self.probe_sent(now);
        Poll::Send(seg)
    }

    fn probe_sent(&mut self, now: Time) {
        self.probe_due = false;
        self.probe_sent_now = true;
        self.tlp_high_seq = Some(self.board.nxt());
        self.stats.loss_probes += 1;
        self.timer = None;
        self.rearm_rto(now);
    }

    /// Bookkeeping of every transmission: PRR's count, and the pacing schedule (Linux
    /// `tcp_update_skb_after_send`: the first ten segments are not paced; time left idle
    /// since the schedule earns up to half a segment's slot).
    /// Linux `tcp_slow_start_after_idle_check` (on by default): new data after more than
    /// an RTO with nothing out restarts from the window halved once per RTO of idleness
    /// past the first, down to the initial window, with ssthresh kept at 3/4 of the old
    /// window (`tcp_cwnd_restart`, RFC 2861). Not for a congestion control that sets the
    /// window itself (BBR); not at the connection's first segment.
    fn restart_after_idle(&mut self, now: Time) {
        if self.cc_controls || self.data_segs_out == 0 || self.board.packets_out() > 0 {
            return;
        }
        let rto = self.rto();
        let mut idle = now.saturating_sub(self.lsndtime);
        if idle <= rto {
            return;
        }
        let cwnd = self.win.cwnd;
        if self.state != CaState::Recovery {
            self.win.ssthresh = self.win.ssthresh.max((cwnd >> 1) + (cwnd >> 2));
        }
        let restart = self.initial_cwnd.min(cwnd);
        let mut w = cwnd;
        while idle > rto && w > restart {
            idle -= rto;
            w >>= 1;
        }
        self.win.cwnd = w.max(restart);
        self.lsndtime = now;
    }

    fn on_sent(&mut self, now: Time) {
        self.lsndtime = now;
        if self.state == CaState::Recovery {
            self.prr_out += 1;
        }
        self.data_segs_out += 1;
        let prior = self.wstamp;
        let mut w = self.wstamp.max(now);
        if self.paced
            && self.pacing_rate.is_finite()
            && self.pacing_rate > 0.0
            && self.data_segs_out >= 10
        {
            let len = (self.mss as f64 * 1e9 / self.pacing_rate) as Time;
            w += len - (len / 2).min(w - prior);
        }
        self.wstamp = w;
    }

    /// The caller stopped polling at `now` after sending `sent_new` new segments: latch
    /// the window's use and arm the loss probe (end of Linux `tcp_write_xmit`).
    pub fn end_transmit(&mut self, now: Time, sent_new: u32) {
        if self.probe_due {
            // The probe could not go out (TSQ or pacing): fall back to the RTO.
            self.probe_due = false;
            self.rearm_rto(now);
        }
        let is_cwnd_limited = self.in_flight() >= self.win.cwnd || self.deferred_cwnd_limited;
        self.deferred_cwnd_limited = false;
        if sent_new > 0 || is_cwnd_limited {
            self.cwnd_validate(is_cwnd_limited);
        }
        if sent_new > 0 && !self.probe_sent_now {
            self.schedule_loss_probe(now, false);
        }
        self.probe_sent_now = false;
    }

    /// Linux `tcp_cwnd_validate`: remember, for the current window, whether it was used up,
    /// else the most segments it had out.
    fn cwnd_validate(&mut self, is_cwnd_limited: bool) {
        let packets_out = self.board.packets_out();
        if self.board.una >= self.cwnd_usage_seq
            || is_cwnd_limited
            || (!self.is_cwnd_limited && packets_out > self.max_packets_out)
        {
            self.is_cwnd_limited = is_cwnd_limited;
            self.max_packets_out = packets_out;
            self.cwnd_usage_seq = self.board.nxt();
        }
    }

    /// Linux `tcp_is_cwnd_limited`: slow start may go on while at least half the window
    /// was in use, so that it grows to twice what was ACKed.
    pub fn cwnd_limited(&self) -> bool {
        if self.kernel == Kernel::Linux2006 {
            // 2.6.17 `tcp_is_cwnd_limited`: the window was full before this ACK.
            return self.prior_in_flight >= self.win.cwnd;
        }
        self.is_cwnd_limited
            || (self.win.in_slow_start() && self.win.cwnd < self.max_packets_out.saturating_mul(2))
    }

    /// Linux `tcp_rate_check_app_limited`: nothing to send, nothing queued, window open.
    fn check_app_limited(&mut self, in_flight: u32, host_queued: usize) {
        if host_queued == 0 && in_flight < self.win.cwnd && self.board.to_retransmit == 0 {
            self.rate.app_limited = (self.rate.delivered + in_flight as u64).max(1);
        }
    }

    /// RFC 6298 §2: SRTT/RTTVAR; RTO = SRTT + max(4·RTTVAR, RTO_min), the form in which
    /// Linux applies its 200 ms minimum. A valid sample also ends the backoff.
    fn rtt_estimator(&mut self, r: Time) {
        let srtt = match self.srtt {
            None => {
                self.rttvar = r / 2;
                r
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                (7 * s + r) / 8
            }
        };
        self.srtt = Some(srtt);
        self.rto_base = rto_of(srtt, self.rttvar, self.rto_min);
        self.backoff = 1;
    }

    /// Processes an ACK at `now` (Linux `tcp_ack`).
    pub fn on_ack(&mut self, now: Time, ack: &AckSegment) {
        self.stats.acks_in += 1;
        if !self.active || ack.cum > self.board.nxt() {
            return;
        }
        self.stats.dsacks += ack.dsack.is_some() as u64;
        self.ts_recent = self.ts_recent.max(ack.ts_val);
        self.set_peer_window(ack.wnd);
        let mut a = AckState {
            prior_in_flight: self.in_flight(),
            prior_una: self.board.una,
            prior_delivered: self.rate.delivered,
            prior_lost: self.rate.lost,
            ..Default::default()
        };
        a.rs.prior_in_flight = a.prior_in_flight;
        self.prior_in_flight = a.prior_in_flight;
        self.sacktag(now, ack, &mut a);
        self.clean_rtx_queue(now, ack, &mut a);
        self.ack_update_rtt(now, ack, &mut a);
        let delivered = (self.rate.delivered - a.prior_delivered) as u32;
        if self.cc_pkts_acked && (delivered > 0 || a.rs.rtt.is_some()) {
            let info = self.ack_info(now, &a.rs, delivered);
            self.cc.on_packets_acked(&mut self.win, &info);
        }
        if self.tlp_high_seq.is_some() {
            self.process_tlp_ack(now, ack, &a);
        }
        let dubious = !a.una_advanced || a.data_sacked || self.state != CaState::Open;
        if dubious {
            self.fastretrans_alert(now, &mut a);
        }
        if a.set_xmit_timer && !self.schedule_loss_probe(now, true) {
            self.rearm_rto(now);
        }
        let lost = (self.rate.lost - a.prior_lost) as u32;
        a.rs.is_ack_delayed = a.acked_segments == 1 && !a.data_sacked;
        self.rate.gen(now, delivered, lost, self.min_rtt, &mut a.rs);
        self.cong_control(now, &a, delivered, lost);
    }

    /// SACK blocks, lowest first (Linux `tcp_sacktag_write_queue`).
    fn sacktag(&mut self, now: Time, ack: &AckSegment, a: &mut AckState) {
        let (lo, hi) = (self.board.una.max(ack.cum), self.board.nxt());
        let mut blocks = [(0u64, 0u64); MAX_SACK_BLOCKS];
        let mut n = 0;
        for &(s, e) in &ack.sack[..ack.n_sack as usize] {
            let (mut s, e) = (s.max(lo), e.min(hi));
            // Skip the part of the block processed with an earlier ACK.
            for &(cs, ce) in &self.sack_cache {
                if cs <= s && s < ce {
                    s = ce;
                }
            }
            if s < e {
                blocks[n] = (s, e);
                n += 1;
            }
            self.board.high_sacked = self.board.high_sacked.max(e);
        }
        self.sack_cache = [(0, 0); MAX_SACK_BLOCKS];
        self.sack_cache[..ack.n_sack as usize].copy_from_slice(&ack.sack[..ack.n_sack as usize]);
        blocks[..n].sort_unstable();
        for &(s, e) in &blocks[..n] {
            for seq in s..e {
                let Some(prev) = self.board.sack(seq) else {
                    continue;
                };
                a.data_sacked = true;
                self.rate.delivered += 1;
                let retransmitted = prev.flags & EVER_RETRANS != 0;
                self.rack
                    .advance(now, prev.xmit, seq, retransmitted, self.min_rtt);
                if !retransmitted {
                    a.first_sackt.get_or_insert(prev.xmit);
                    a.last_sackt = Some(prev.xmit);
                }
                let seg = self.board.seg_mut(seq);
                self.rate.on_delivered(seg, seq, true, &mut a.rs);
            }
        }
    }

    /// The cumulative ACK (Linux `tcp_clean_rtx_queue`).
    fn clean_rtx_queue(&mut self, now: Time, ack: &AckSegment, a: &mut AckState) {
        while self.board.una < ack.cum {
            let seq = self.board.una;
            let mut s = self.board.pop_front();
            a.acked_segments += 1;
            let retransmitted = s.flags & EVER_RETRANS != 0;
            let sacked = s.flags & super::board::SACKED != 0;
            if retransmitted {
                a.retrans_acked = true;
            } else if !sacked {
                a.first_ackt.get_or_insert(s.xmit);
                a.last_ackt = Some(s.xmit);
            }
            if !sacked {
                self.rate.delivered += 1;
                // An echo older than the retransmission: the original arrived.
                let spurious = retransmitted && ack.ts_echo < s.xmit;
                if !spurious {
                    self.rack
                        .advance(now, s.xmit, seq, retransmitted, self.min_rtt);
                }
            }
            self.rate.on_delivered(&mut s, seq, false, &mut a.rs);
        }
        if self.board.una > a.prior_una {
            a.una_advanced = true;
            a.set_xmit_timer = true;
            self.retransmits = 0;
            self.board.trim_tsorted();
        }
    }

    /// Linux `tcp_ack_update_rtt`.
    fn ack_update_rtt(&mut self, now: Time, ack: &AckSegment, a: &mut AckState) {
        let since = |t: Time| now.saturating_sub(t).max(1);
        let (mut seq_rtt, mut ca_rtt) = match (a.first_ackt, a.last_ackt) {
            (Some(f), Some(l)) if !a.retrans_acked => (Some(since(f)), Some(since(l))),
            _ => (None, None),
        };
        if let (Some(f), Some(l)) = (a.first_sackt, a.last_sackt) {
            seq_rtt = seq_rtt.or(Some(since(f)));
            ca_rtt = Some(since(l));
        }
        // Karn's rule left no sample (only retransmitted data was ACKed): RFC 7323's RTTM
        // takes it from the echo, in whole milliseconds (`tcp_rtt_tsopt_us`, a delta of 0
        // read as 1 ms). An echo of 0 carries nothing. These samples are why a kernel's
        // RTT_min drops to whole milliseconds after its first recovery (H-TCP's β).
        if seq_rtt.is_none() && a.una_advanced && ack.ts_echo != 0 && ack.ts_echo <= now {
            seq_rtt = Some(ts_delta_ms(now, ack.ts_echo).max(1) * NS_PER_MS);
            ca_rtt = seq_rtt;
        }
        a.rs.rtt = ca_rtt;
        if let Some(r) = seq_rtt {
            self.min_rtt = self.min_rtt.min(ca_rtt.unwrap_or(r));
            self.rtt_estimator(r);
        }
    }

    /// Linux `tcp_process_tlp_ack`: a probe whose ACK shows that it repaired a loss
    /// reduces the window once (a CWR episode that ends at once).
    fn process_tlp_ack(&mut self, now: Time, ack: &AckSegment, a: &AckState) {
        let Some(high) = self.tlp_high_seq else {
            return;
        };
        if ack.cum < high {
            return;
        }
        let dsack_probe = ack.dsack.is_some_and(|d| d < high);
        if !self.tlp_retrans || dsack_probe {
            self.tlp_high_seq = None;
        } else if ack.cum > high {
            self.tlp_high_seq = None;
            self.prior_cwnd = self.win.cwnd;
            self.win.ssthresh = self.cc.ssthresh_on_loss(&self.win, now);
            self.win.cwnd_cnt = 0;
            if !self.cc_controls {
                self.win.cwnd = self.win.ssthresh;
            }
        } else if !(a.una_advanced || a.data_sacked) {
            self.tlp_high_seq = None;
        }
    }

    /// Linux `tcp_fastretrans_alert`, with RACK as its only loss detector.
    fn fastretrans_alert(&mut self, now: Time, a: &mut AckState) {
        if self.state == CaState::Recovery && self.board.una >= self.high_seq {
            self.set_state(CaState::Open, now);
            self.end_cwnd_reduction(now);
        }
        match self.state {
            CaState::Recovery => {
                self.identify_loss(now, a);
                return;
            }
            CaState::Loss => {
                if self.board.una >= self.high_seq {
                    self.set_state(CaState::Open, now);
                }
                self.identify_loss(now, a);
                // Change state if retransmissions are lost (`FLAG_LOST_RETRANS`).
                if self.state != CaState::Open && !a.lost_retrans {
                    return;
                }
            }
            CaState::Open => {}
        }
        self.identify_loss(now, a);
        if self.board.lost_out > 0 {
            self.enter_recovery(now);
        }
    }

    /// Linux `tcp_identify_packet_loss` → `tcp_rack_mark_lost`.
    fn identify_loss(&mut self, now: Time, a: &mut AckState) {
        if self.kernel == Kernel::Linux2006 {
            self.dupthresh_mark_lost();
            return;
        }
        if self.board.packets_out() == 0 || !self.rack.advanced {
            return;
        }
        self.rack.advanced = false;
        let prior_retrans = self.board.retrans_out;
        let reo = self.rack_reo_wnd();
        let (lost, wait) = self.rack.detect_loss(&mut self.board, now, reo);
        self.rate.lost += lost as u64;
        self.stats.lost += lost as u64;
        if wait > 0 {
            self.arm_reorder_timer(now, wait);
            a.set_xmit_timer = false;
        }
        if self.board.retrans_out < prior_retrans {
            a.lost_retrans = true;
        }
    }

    /// The 2006 kernel's rule (RFC 6675 `IsLost` in its forward-ACK form, Linux FACK): a
    /// hole is lost once `dupthresh` segments above it are SACKed. Lost retransmissions
    /// are not found (they wait for a timeout).
    fn dupthresh_mark_lost(&mut self) {
        let below = self.board.high_sacked.saturating_sub(self.dupthresh as u64);
        let from = self.fack_scan.max(self.board.una);
        let mut lost = 0;
        for seq in from..below.min(self.board.nxt()) {
            if self.board.seg(seq).flags & (super::board::SACKED | super::board::LOST) == 0 {
                lost += self.board.mark_lost(seq) as u64;
            }
        }
        self.fack_scan = self.fack_scan.max(below);
        self.rate.lost += lost;
        self.stats.lost += lost;
    }

    pub(super) fn rack_reo_wnd(&self) -> Time {
        let min_rtt = if self.min_rtt == Time::MAX {
            0
        } else {
            self.min_rtt
        };
        self.rack.reo_wnd(
            self.state != CaState::Open,
            self.board.sacked_out,
            self.dupthresh,
            min_rtt,
            self.srtt.unwrap_or(0),
        )
    }

    /// Linux `tcp_enter_recovery` with `tcp_init_cwnd_reduction`.
    pub(super) fn enter_recovery(&mut self, now: Time) {
        if self.state != CaState::Recovery {
            self.high_seq = self.board.nxt();
            self.tlp_high_seq = None;
            self.win.cwnd_cnt = 0;
            self.prior_cwnd = self.win.cwnd;
            self.prr_delivered = 0;
            self.prr_out = 0;
            self.win.ssthresh = self.cc.ssthresh_on_loss(&self.win, now);
        }
        self.set_state(CaState::Recovery, now);
        self.stats.fast_recoveries += 1;
    }

    pub(super) fn set_state(&mut self, state: CaState, now: Time) {
        if self.state != state {
            self.state = state;
            let info = self.ack_info(now, &RateSample::default(), 0);
            self.cc.on_state(state, &self.win, &info);
        }
    }

    /// Linux `tcp_end_cwnd_reduction`.
    fn end_cwnd_reduction(&mut self, now: Time) {
        if self.cc_controls {
            return;
        }
        if self.win.ssthresh != u32::MAX {
            self.win.cwnd = self.win.ssthresh;
        }
        self.cc.on_recovery_exit(&mut self.win, now);
    }

    /// RFC 6937 PRR, as Linux `tcp_cwnd_reduction` (RecoverFS = cwnd at entry).
    pub(super) fn cwnd_reduction(&mut self, newly_acked: u32, newly_lost: u32, una_advanced: bool) {
        if newly_acked == 0 || self.prior_cwnd == 0 {
            return;
        }
        self.prr_delivered += newly_acked;
        let in_flight = self.in_flight() as i64;
        let ssthresh = self.win.ssthresh as i64;
        let delta = ssthresh - in_flight;
        let mut sndcnt = if delta < 0 {
            let dividend = ssthresh as u64 * self.prr_delivered as u64 + self.prior_cwnd as u64 - 1;
            (dividend / self.prior_cwnd as u64) as i64 - self.prr_out as i64
        } else {
            let mut s = (self.prr_delivered as i64 - self.prr_out as i64).max(newly_acked as i64);
            if una_advanced && newly_lost == 0 {
                s += 1;
            }
            s.min(delta)
        };
        // Force a fast retransmit upon entering fast recovery.
        sndcnt = sndcnt.max(if self.prr_out > 0 { 0 } else { 1 });
        self.win.cwnd = (in_flight + sndcnt).max(1) as u32;
    }

    /// Linux `tcp_cong_control`.
    fn cong_control(&mut self, now: Time, a: &AckState, delivered: u32, lost: u32) {
        if self.cc_controls {
            let info = self.ack_info(now, &a.rs, delivered);
            let ctl = self.cc.cong_control(&mut self.win, &info);
            if ctl.app_limited {
                self.rate.app_limited = (self.rate.delivered + self.in_flight() as u64).max(1);
            }
            self.update_pacing_rate();
            return;
        }
        if self.state == CaState::Recovery {
            self.cwnd_reduction(delivered, lost, a.una_advanced);
        } else if a.una_advanced {
            let mut info = self.ack_info(now, &a.rs, delivered);
            if self.kernel == Kernel::Linux2006 {
                // `tcp_abc` = 0 (its default until it was removed in 3.9): the window
                // grows per ACK, not per acknowledged segment.
                info.acked = 1;
            }
            self.cc.on_ack(&mut self.win, &info);
        }
        self.update_pacing_rate();
    }

    /// Linux `tcp_update_pacing_rate` (200 % of cwnd/srtt in slow start, 120 % after), or
    /// the rate a pacing congestion control asks for. Without internal pacing it only
    /// sizes TSQ.
    fn update_pacing_rate(&mut self) {
        if let Some(r) = self.cc.pacing_rate() {
            self.set_pacing_rate(r);
            return;
        }
        let Some(srtt) = self.srtt else {
            return;
        };
        let ratio = if self.win.cwnd < self.win.ssthresh / 2 {
            2.0
        } else {
            1.2
        };
        let cwnd = self.win.cwnd.max(self.board.packets_out()) as f64;
        let rate = ratio * self.mss as f64 * cwnd / (srtt as f64 / 1e9);
        self.set_pacing_rate(rate);
    }

    /// `sk_pacing_rate` (capped by `sk_max_pacing_rate`) and the TSQ limits sized by it.
    fn set_pacing_rate(&mut self, rate: f64) {
        let rate = rate.min(self.max_pacing_rate);
        if rate != self.pacing_rate || self.tsq_segs[0] == 0 {
            self.pacing_rate = rate;
            self.refresh_tsq();
        }
    }

    /// The TSQ limits at the current pacing rate (see `tsq.rs` for the cache).
    fn refresh_tsq(&mut self) {
        if self.kernel == Kernel::Linux2006 {
            self.tsq_segs = [TXQUEUELEN; 2];
            return;
        }
        let inputs = TsqInputs {
            min_rtt: self.min_rtt,
            min_tso_segs: self.cc.min_tso_segs(),
            paced: self.paced,
        };
        if let Some(limits) = self.tsq_cache.get(inputs, self.pacing_rate) {
            self.tsq_segs = limits;
            return;
        }
        let (segs, limits) = self.compute_tsq_limits();
        self.tsq_cache.put(inputs, self.pacing_rate, segs, limits);
        self.tsq_segs = limits;
    }

    /// What the congestion control is told about an ACK.
    fn ack_info(&self, now: Time, rs: &RateSample, delivered: u32) -> Ack {
        Ack {
            now,
            acked: delivered,
            rtt: rs.rtt,
            min_rtt: self.min_rtt,
            in_flight: self.in_flight(),
            cwnd_limited: self.cwnd_limited(),
            snd_una: self.board.una,
            snd_nxt: self.board.nxt(),
            state: self.state,
            rate: *rs,
            delivered: self.rate.delivered,
            delivered_mstamp: self.rate.delivered_mstamp,
            lost: self.rate.lost,
            mss: self.mss,
            srtt: self.srtt,
            pacing_next: self.wstamp,
            packets_out: self.board.packets_out(),
            pacing_rate: self.pacing_rate,
            paced: self.paced || self.max_pacing_rate.is_finite(),
        }
    }
}

#[cfg(test)]
#[path = "sender_tests.rs"]
mod tests;
