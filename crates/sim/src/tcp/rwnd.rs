//! The receive window a Linux 6.18 receiver advertises, and its autotuning.
//!
//! Linux sizes the receive buffer (`sk_rcvbuf`) from what the application read in the last
//! receiver RTT (dynamic right-sizing, `tcp_rcv_space_adjust` → `tcp_rcvbuf_grow`), and
//! opens the window towards it by two segments per segment received (`tcp_grow_window`,
//! `rcv_ssthresh`). Bytes of buffer become bytes of window through `scaling_ratio`, the
//! payload's share of the memory a received segment occupies (`skb->truesize`).
//!
//! * Start (`tcp_select_initial_window`, `tcp_init_buffer_space`): the buffer is
//!   `tcp_rmem[1]` (128 KiB) and the ratio ½ until data arrives, so the first window is
//!   64 KiB in whole segments, and the first measure's threshold is ten segments.
//! * First data (`tcp_measure_rcv_mss`): the ratio becomes `len·256/truesize` and the window
//!   clamp follows the buffer (82 944 bytes for the 162/256 of this host's veths).
//! * Each in-order segment of at least 128 bytes grows `rcv_ssthresh` by two segments, up to
//!   the clamp and the buffer's free space (`tcp_grow_window`).
//! * The receiver's RTT (`tcp_rcv_rtt_measure_ts`): from the timestamp each data segment
//!   echoes, in whole milliseconds (`TCP_TS_HZ`), a zero difference skipped; a lower sample
//!   is taken at once, a higher one weighs 1/8 (`tcp_rcv_rtt_update`, Linux 6.16 on).
//! * Each read (`tcp_rcv_space_adjust`): once an RTT has passed since the last measure,
//!   n = bytes read since then less those still queued; if n exceeds the last measure o,
//!   the window wanted is `2n + 2·2n·(n − o)/o` plus the out-of-order span, and the buffer
//!   grows to it (÷ ratio, at most `tcp_rmem[2]`), the clamp with it (`tcp_rcvbuf_grow`).
//!   Out-of-order data grows the buffer by its span at once (`tcp_data_queue_ofo`).
//! * The window offered (`__tcp_select_window`, `tcp_select_window`): the buffer's free
//!   space, at most `rcv_ssthresh`, rounded up to the window scale's unit; the right edge
//!   never moves back.
//!
//! The receiving application (`receiver.rs`) reads each segment as it becomes in order, or,
//! with host noise, once woken after data arrived: then what it has not read yet takes
//! buffer space from the window, a read measures the bytes read less those still queued,
//! and a read that frees much space announces the larger window at once
//! (`tcp_cleanup_rbuf`).

use super::{ts_delta_ms, ts_ms};
use crate::time::{Time, NS_PER_MS, NS_PER_US};

/// `tcp_rmem[1]`: the buffer a connection starts with (Linux default, also the netns
/// backend's).
pub const RMEM_DEFAULT: u64 = 131_072;
/// `TCP_DEFAULT_SCALING_RATIO`: payload per 256 bytes of buffer before data is seen.
const DEFAULT_SCALING_RATIO: u64 = 128;
/// Memory a received full-sized segment occupies beyond its payload. Measured, not a Linux
/// constant: `tcp_rcvbuf_grow` reports `scaling_ratio` 162 on this host's veths
/// (benches/rcvbuf_trace.py), 1 448 bytes of payload in 2 288 of truesize.
pub const RX_SKB_OVERHEAD: u64 = 840;
/// `tcp_grow_window` is called for segments of at least this many bytes.
const GROW_MIN_LEN: u64 = 128;
/// `TCP_INIT_CWND`: the first measure's threshold is this many segments.
const INIT_SPACE_SEGS: u64 = 10;
/// `TCP_MAX_QUICKACKS`.
pub const MAX_QUICKACKS: u64 = 16;
/// `TCP_MAX_WSCALE`.
const MAX_WSCALE: u32 = 14;

#[derive(Clone)]
pub struct RcvWindow {
    mss: u64,
    truesize: u64,
    rmem_max: u64,
    ratio: u64,
    wscale: u32,
    rcvbuf: u64,
    window_clamp: u64,
    rcv_ssthresh: u64,
    /// The window offered by the last ACK (`rcv_wnd`), bytes from that ACK's `rcv_nxt`.
    rcv_wnd: u64,
    seen_data: bool,
    /// `rcvq_space`: the last measure (bytes), where it started (segment) and when.
    space: u64,
    space_seq: u64,
    /// When the last measure began; the first begins with the first data (the passive
    /// side is established by the ACK that comes with it) less `lead`.
    space_time: Option<Time>,
    /// How long before its first data the connection was established (`connected_before`):
    /// the first measure's clock ran that much longer; 0 after the first measure.
    lead: Time,
    /// The handshake's round-trip time, sampled at the first data.
    handshake_rtt: Time,
    /// `rcv_rtt_est.rtt_us << 3`, and the echoed timestamp of its last sample (ms).
    rtt_us8: u64,
    last_tsecr_ms: Option<u64>,
}

fn align_up(x: u64, unit: u64) -> u64 {
    x.div_ceil(unit) * unit
}

impl RcvWindow {
    /// A receiver whose buffer may grow to `rmem_max` bytes (`tcp_rmem[2]`), receiving
    /// segments of `mss` bytes.
    pub fn new(mss: u32, rmem_max: u64) -> Self {
        let mss = mss as u64;
        let rcvbuf = RMEM_DEFAULT.min(rmem_max.max(mss));
        let full = (rcvbuf * DEFAULT_SCALING_RATIO) >> 8;
        let wscale = (rmem_max.max(full).max(1).ilog2().saturating_sub(15)).min(MAX_WSCALE);
        let rcv_wnd = if full > mss { full / mss * mss } else { full };
        // `tcp_init_buffer_space`: the clamp keeps one segment in reserve.
        let mut clamp = full;
        if clamp > 2 * mss && clamp + mss > full {
            clamp = (2 * mss).max(full - mss);
        }
        let rcv_ssthresh = rcv_wnd.min(clamp);
        Self {
            mss,
            truesize: mss + RX_SKB_OVERHEAD,
            rmem_max,
            ratio: DEFAULT_SCALING_RATIO,
            wscale,
            rcvbuf,
            window_clamp: clamp,
            rcv_ssthresh,
            rcv_wnd,
            seen_data: false,
            space: rcv_ssthresh.min(rcv_wnd).min(INIT_SPACE_SEGS * mss),
            space_seq: 0,
            space_time: None,
            lead: 0,
            handshake_rtt: 0,
            rtt_us8: 0,
            last_tsecr_ms: None,
        }
    }

    /// The connection, its handshake taking `rtt`, was established `lead` before its first
    /// data arrives (0: as the data arrives). Linux starts the first measure at the
    /// establishment (`tcp_init_buffer_space`), and the first segment after the handshake
    /// echoes the SYN-ACK's timestamp, an RTT sample at once (`tcp_rcv_rtt_measure_ts`).
    /// An application that exchanges data of its own before the transfer (iperf3: an RTT,
    /// its control messages) has its first measure due at its first read.
    pub fn connected(&mut self, lead: Time, rtt: Time) {
        self.lead = lead;
        self.handshake_rtt = rtt;
    }

    /// The RTT sample of the segment that arrived at the establishment (`lead` before
    /// `now`), echoing the SYN-ACK; computed a whole number of milliseconds later, which
    /// keeps the timestamp clock's phase, since the SYN-ACK may precede time 0 (and an echo
    /// of 0 would read as none).
    fn handshake_sample(&mut self, now: Time) {
        if self.handshake_rtt == 0 {
            return;
        }
        let shift = ((self.lead + self.handshake_rtt) / NS_PER_MS + 1) * NS_PER_MS;
        let at = now + shift - self.lead;
        self.measure_rtt(at, at - self.handshake_rtt);
        self.last_tsecr_ms = None;
    }

    /// The window the SYN-ACK offers, bytes (not scaled).
    pub fn initial_window(&self) -> u64 {
        self.rcv_wnd
    }

    #[cfg(test)]
    fn rcvbuf(&self) -> u64 {
        self.rcvbuf
    }

    /// The last measure (`rcvq_space.space`), bytes.
    #[cfg(test)]
    pub(super) fn space(&self) -> u64 {
        self.space
    }

    #[cfg(test)]
    fn window_clamp(&self) -> u64 {
        self.window_clamp
    }

    /// The receiver's RTT estimate (`rcv_rtt_est`), if it has one.
    #[cfg(test)]
    fn rtt(&self) -> Option<Time> {
        (self.rtt_us8 > 0).then(|| (self.rtt_us8 >> 3) * NS_PER_US)
    }

    fn win_from_space(&self, space: u64) -> u64 {
        (space * self.ratio) >> 8
    }

    fn space_from_win(&self, win: u64) -> u64 {
        (win << 8) / self.ratio
    }

    /// Free buffer space as window (`tcp_space`) with `held` segments queued.
    fn free(&self, held: u64) -> u64 {
        self.win_from_space(self.rcvbuf.saturating_sub(held * self.truesize))
    }

    /// A data segment echoing `tsecr` arrives at `now` (`tcp_rcv_rtt_measure_ts`); 0 echoes
    /// nothing (a connection set up before the simulated time began).
    pub fn measure_rtt(&mut self, now: Time, tsecr: Time) {
        if tsecr == 0 {
            return;
        }
        let tsecr_ms = ts_ms(tsecr);
        if self.last_tsecr_ms == Some(tsecr_ms) {
            return;
        }
        self.last_tsecr_ms = Some(tsecr_ms);
        let delta_ms = ts_delta_ms(now, tsecr);
        if delta_ms == 0 {
            return;
        }
        let m = (delta_ms * 1000) << 3;
        self.rtt_us8 = if self.rtt_us8 == 0 || m < self.rtt_us8 {
            m
        } else {
            self.rtt_us8 - (self.rtt_us8 >> 3) + delta_ms * 1000
        };
    }

    /// A data segment was queued at `now`, in order or not, with `held` segments (itself
    /// included) out of order (`tcp_measure_rcv_mss` and `tcp_grow_window`). Whether the
    /// window offered grew (Linux then acknowledges the segment at once: `icsk_ack.quick`).
    pub fn on_data(&mut self, now: Time, held: u64) -> bool {
        if !self.seen_data {
            self.seen_data = true;
            self.space_time = Some(now);
            self.handshake_sample(now);
            self.ratio = (self.mss << 8) / self.truesize;
            // `tcp_set_window_clamp` to the buffer's window.
            let old = self.window_clamp;
            self.window_clamp = self.win_from_space(self.rcvbuf);
            let bound = self.rcv_wnd.min(self.window_clamp);
            self.rcv_ssthresh = if self.window_clamp < old {
                self.rcv_ssthresh.min(bound)
            } else {
                self.rcv_ssthresh.max(bound)
            };
            self.space = self.space.min(self.window_clamp);
        }
        if self.mss < GROW_MIN_LEN {
            return false;
        }
        let room = self.window_clamp.min(self.free(held)) as i64 - self.rcv_ssthresh as i64;
        if room > 0 {
            // With the ratio measured on this very segment size, a segment's truesize as
            // window never exceeds its length: two segments' worth (`2 * advmss`).
            self.rcv_ssthresh += (room as u64).min(2 * self.mss);
        }
        room > 0
    }

    /// Immediate ACKs the first data, or data after a long silence, earns
    /// (`tcp_incr_quickack(sk, TCP_MAX_QUICKACKS)`): one per two segments of the window
    /// offered, at least 2, at most 16.
    pub fn quickacks(&self) -> u32 {
        let n = self.rcv_wnd / (2 * self.mss);
        (if n == 0 { 2 } else { n }).min(MAX_QUICKACKS) as u32
    }

    /// Out-of-order data now spans `span` segments past `rcv_nxt` (`tcp_data_queue_ofo`:
    /// the buffer makes room for it at once).
    pub fn on_ofo(&mut self, span: u64) {
        self.grow(self.space, span);
    }

    /// Whether a read at `now` would measure (an RTT has passed since the last measure).
    pub fn measure_due(&self, now: Time) -> bool {
        let time = (now.saturating_sub(self.space_time.unwrap_or(now)) + self.lead) / NS_PER_US;
        self.rtt_us8 != 0 && time >= self.rtt_us8 >> 3
    }

    /// The application has read up to `copied` (segments) at `now`; `inq` segments are
    /// still queued in order and `span` segments of out-of-order data lie past `rcv_nxt`
    /// (`tcp_rcv_space_adjust`).
    pub fn on_read(&mut self, now: Time, copied: u64, inq: u64, span: u64) {
        if !self.measure_due(now) {
            return;
        }
        // What was read less what is still queued (Linux 6.16 on).
        let n = (copied - self.space_seq).saturating_sub(inq) * self.mss;
        if n > self.space {
            self.grow(n, span);
        }
        self.space_seq = copied;
        self.space_time = Some(now);
        self.lead = 0;
    }

    /// `tcp_rcvbuf_grow(newval)`.
    fn grow(&mut self, newval: u64, span: u64) {
        let old = self.space.max(1);
        self.space = newval;
        let mut rcvwin = 2 * newval;
        rcvwin += 2 * (rcvwin * newval.saturating_sub(old) / old);
        rcvwin += span * self.mss;
        let rcvbuf = self.space_from_win(rcvwin).min(self.rmem_max);
        if rcvbuf > self.rcvbuf {
            self.rcvbuf = rcvbuf;
            self.window_clamp = self.win_from_space(rcvbuf);
        }
    }

    /// The window the buffer allows now with `held` segments queued (`__tcp_select_window`).
    fn offer(&self, held: u64) -> u64 {
        let unit = 1u64 << self.wscale;
        let free_space = self.free(held);
        let full = self.window_clamp.min(self.win_from_space(self.rcvbuf));
        if free_space < full / 2 {
            let rounded = free_space / unit * unit;
            let allowed = self.win_from_space(self.rcvbuf);
            if rounded < allowed >> 4 || rounded < self.mss {
                return 0;
            }
        }
        align_up(free_space.min(self.rcv_ssthresh), unit)
    }

    /// Whether the window offered now, with `held` segments queued, is at least the one the
    /// last ACK offered (`__tcp_select_window(sk) >= tp->rcv_wnd` in `__tcp_ack_snd_check`):
    /// unread data shrinks the offer, and Linux then leaves the ACK to the read.
    pub fn edge_advances(&self, held: u64) -> bool {
        self.offer(held) >= self.rcv_wnd
    }

    /// A read left `held` segments queued, `rcv_nxt` `advanced` past the last ACK: whether
    /// it freed enough to announce at once, the new window at least twice what is left of
    /// the last (`tcp_cleanup_rbuf`).
    pub fn update_due(&self, held: u64, advanced: u64) -> bool {
        let now = self.rcv_wnd.saturating_sub(advanced * self.mss);
        if 2 * now > self.window_clamp {
            return false;
        }
        let new = self.offer(held);
        new > 0 && new >= 2 * now
    }

    /// The window an ACK sent now offers, bytes past `rcv_nxt`, with `held` segments
    /// queued (in order and not read, or out of order) and `rcv_nxt` moved by `advanced`
    /// segments since the last ACK (`tcp_select_window`).
    pub fn select(&mut self, held: u64, advanced: u64) -> u64 {
        let unit = 1u64 << self.wscale;
        let mut new_win = self.offer(held);
        // The right edge never moves back (`tcp_select_window`).
        let cur = self.rcv_wnd.saturating_sub(advanced * self.mss);
        if new_win < cur {
            new_win = align_up(cur, unit);
        }
        self.rcv_wnd = new_win;
        new_win
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NS_PER_MS;

    const MSS: u32 = 1448;

    #[test]
    fn starts_as_linux_6_18_with_its_default_buffer() {
        let mut w = RcvWindow::new(MSS, 32 << 20);
        // 128 KiB at ratio ½, rounded down to whole segments; the clamp one segment less.
        assert_eq!(w.initial_window(), 65_160);
        assert_eq!(w.window_clamp(), 65_536 - 1448);
        assert_eq!(w.space, 14_480);
        // The first segment measures the ratio: 1 448/2 288 → 162/256, the clamp 82 944,
        // as the kernel reports on this host.
        w.on_data(0, 0);
        assert_eq!(w.ratio, 162);
        assert_eq!(w.window_clamp(), 82_944);
        // rcv_ssthresh grows two segments per segment up to the clamp.
        assert_eq!(w.rcv_ssthresh, 65_160 + 2896);
        for _ in 0..10 {
            w.on_data(0, 0);
        }
        assert_eq!(w.rcv_ssthresh, 82_944);
        // Window scale 10 for a 32 MiB buffer: a multiple of 1 024.
        assert_eq!(w.select(0, 1), 82_944);
    }

    #[test]
    fn the_rtt_is_whole_milliseconds_latching_lower_samples() {
        let mut w = RcvWindow::new(MSS, 32 << 20);
        w.measure_rtt(203_400_000, 0);
        assert_eq!(w.rtt(), None, "no echo");
        w.measure_rtt(203_400_000, 100);
        assert_eq!(w.rtt(), Some(203 * NS_PER_MS));
        // The same echo (in whole ms) again: no sample.
        w.measure_rtt(300_000_000, 900_000);
        assert_eq!(w.rtt(), Some(203 * NS_PER_MS));
        w.measure_rtt(400_500_000, 200_100_000);
        assert_eq!(w.rtt(), Some(200 * NS_PER_MS));
        // A higher sample weighs an eighth: (8·200 − 200 + 208)/8 = 201 ms.
        w.measure_rtt(609_000_000, 401_000_000);
        assert_eq!(w.rtt(), Some(201 * NS_PER_US * 1000));
    }

    #[test]
    fn drs_follows_the_6_18_law() {
        let ms = NS_PER_MS;
        let mut w = RcvWindow::new(MSS, 32 << 20);
        w.on_data(0, 0);
        w.measure_rtt(100 * ms + 1, 1);
        // Round 1: 10 segments, not above the first measure (14 480): no growth.
        w.on_read(100 * ms, 10, 0, 0);
        assert_eq!((w.rcvbuf(), w.space), (131_072, 14_480));
        // Too early for a measure.
        w.on_read(150 * ms, 20, 0, 0);
        assert_eq!(w.space_seq, 10);
        // Round 2: 20 segments: 2n + 2·2n·(n − o)/o = 57 920 + 115 840 = 173 760.
        w.on_read(200 * ms, 30, 0, 0);
        assert_eq!(w.space, 28_960);
        assert_eq!(w.rcvbuf(), (173_760u64 << 8) / 162);
        assert_eq!(w.window_clamp(), (w.rcvbuf() * 162) >> 8);
        // Capped by tcp_rmem[2].
        let mut small = RcvWindow::new(MSS, 150_000);
        small.on_data(0, 0);
        small.measure_rtt(100 * ms + 1, 1);
        small.on_read(100 * ms, 30, 0, 0);
        assert_eq!(small.rcvbuf(), 150_000);
    }

    #[test]
    fn the_first_measure_runs_from_the_establishment() {
        let ms = NS_PER_MS;
        // Data right after the handshake (100.4 ms): the first data's echo of the SYN-ACK
        // gives the RTT at once; the first measure is due an RTT after it.
        let mut w = RcvWindow::new(MSS, 32 << 20);
        w.connected(0, 100 * ms + 400_000);
        w.on_data(50 * ms + 200_000, 0);
        assert_eq!(
            w.rtt(),
            Some(101 * ms),
            "50.2 ms reads as 50, 100.4 ms before as −51"
        );
        assert!(!w.measure_due(151 * ms));
        assert!(w.measure_due(151 * ms + 200_000));
        // iperf3: its control messages take an RTT and a little more before the data, so
        // the first measure is due at the first read, whatever part of the round it sees.
        let mut w = RcvWindow::new(MSS, 32 << 20);
        w.connected(101 * ms + 200_000, 100 * ms + 400_000);
        w.on_data(50 * ms, 0);
        assert!(w.measure_due(50 * ms + 300_000));
        w.on_read(50 * ms + 300_000, 4, 0, 0);
        // One measure only: the next is an RTT after it.
        assert_eq!((w.space_seq, w.lead), (4, 0));
        assert!(!w.measure_due(150 * ms));
        assert!(w.measure_due(150 * ms + 300_000));
    }

    #[test]
    fn out_of_order_data_shrinks_the_offer_but_never_the_right_edge() {
        let mut w = RcvWindow::new(MSS, 32 << 20);
        for _ in 0..20 {
            w.on_data(0, 0);
        }
        let first = w.select(0, 0);
        assert_eq!(first, 82_944);
        // 40 segments held out of order take 91 520 bytes of the 131 072: the free space
        // shrinks, the offer keeps the right edge.
        assert_eq!(w.select(40, 0), 82_944);
        // Two segments later (rcv_nxt moved by 2), the edge is where it was.
        assert_eq!(w.select(40, 2), align_up(82_944 - 2896, 1024));
    }
}
