//! Congestion controls, one file each, behind one small trait.
//!
//! The trait mirrors the hooks of Linux's `tcp_congestion_ops`, so each algorithm reads
//! like its paper or RFC and like the kernel module the seeds measured:
//!
//! | hook                 | Linux                 | when                                            |
//! |----------------------|-----------------------|-------------------------------------------------|
//! | `init`               | `.init`               | the connection is established (after the SYN exchange) |
//! | `on_packets_acked`   | `.pkts_acked`         | every ACK that delivers data, with an RTT sample |
//! | `on_ack`             | `.cong_avoid`         | every ACK that advances `snd_una` outside recovery |
//! | `ssthresh_on_loss`   | `.ssthresh`           | a loss is detected (fast retransmit or RTO)     |
//! | `on_rto`             | `CA_EVENT_LOSS`       | the retransmission timer expired                |
//! | `on_recovery_exit`   | `.set_state(Open)`    | fast recovery ends                              |
//! | `on_state`           | `.set_state`          | the congestion state changes                    |
//! | `cong_control`       | `.cong_control`       | every ACK, in place of the sender's own window rules (BBR) |
//! | `pacing_rate`        | `sk_pacing_rate`      | the rate the control asks the sender to pace at |
//!
//! Windows are counted in segments, as Linux counts `snd_cwnd`.

use crate::tcp::{CaState, RateSample};
use crate::time::Time;

pub mod bbr;
pub mod bic;
pub mod cubic;
pub mod highspeed;
pub mod htcp;
pub mod htcp_linux;
pub mod reno;
pub mod scalable;

/// Congestion window state owned by the TCP sender and updated by the congestion control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Congestion window, in segments (`snd_cwnd`).
    pub cwnd: u32,
    /// Slow-start threshold, in segments (`snd_ssthresh`); `u32::MAX` until the first loss.
    pub ssthresh: u32,
    /// Segments acknowledged since the window last grew in congestion avoidance
    /// (`snd_cwnd_cnt`): RFC 3465 byte counting, in segments.
    pub cwnd_cnt: u32,
}

impl Window {
    pub fn new(initial_cwnd: u32) -> Self {
        Self {
            cwnd: initial_cwnd,
            ssthresh: u32::MAX,
            cwnd_cnt: 0,
        }
    }

    pub fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// Slow start (RFC 5681 §3.1 with RFC 3465 byte counting, as Linux `tcp_slow_start`):
    /// the window grows by the number of segments acknowledged, up to `ssthresh`.
    /// Returns the acknowledged segments left over once `ssthresh` is reached.
    pub fn slow_start(&mut self, acked: u32) -> u32 {
        let cwnd = self.cwnd.saturating_add(acked).min(self.ssthresh);
        let left = acked - (cwnd - self.cwnd).min(acked);
        self.cwnd = cwnd;
        left
    }

    /// The common start of a window-growth law (Linux `tcp_reno_cong_avoid` and the
    /// modules built on it): nothing grows unless the sender was window-limited; below
    /// `ssthresh` the window slow-starts. Returns the acknowledged segments left for
    /// congestion avoidance, or `None` when there are none.
    pub fn slow_start_then_avoid(&mut self, ack: &Ack) -> Option<u32> {
        if !ack.cwnd_limited {
            return None;
        }
        let mut acked = ack.acked;
        if self.in_slow_start() {
            acked = self.slow_start(acked);
        }
        (acked > 0).then_some(acked)
    }

    /// Adds `inc` segments to the real-valued window `cwnd + frac`, moving whole segments
    /// into `cwnd`: for laws that grow by fractions of a segment per ACK (BIC, CUBIC,
    /// HighSpeed, H-TCP). A window's worth of `x/w` terms adds up to `x` within `EPS`.
    pub fn grow_fraction(&mut self, frac: &mut f64, inc: f64) {
        const EPS: f64 = 1e-9;
        *frac += inc;
        if *frac >= 1.0 - EPS {
            let whole = (*frac + EPS).floor();
            self.cwnd = self.cwnd.saturating_add(whole as u32);
            *frac = (*frac - whole).max(0.0);
        }
    }

    /// Additive increase of one segment per `w` segments acknowledged (Linux
    /// `tcp_cong_avoid_ai`): counting acknowledged segments rather than ACKs keeps the
    /// growth at one segment per window even with delayed ACKs.
    pub fn cong_avoid_ai(&mut self, w: u32, acked: u32) {
        let w = w.max(1);
        if self.cwnd_cnt >= w {
            self.cwnd_cnt = 0;
            self.cwnd += 1;
        }
        self.cwnd_cnt += acked;
        if self.cwnd_cnt >= w {
            let delta = self.cwnd_cnt / w;
            self.cwnd_cnt -= delta * w;
            self.cwnd += delta;
        }
    }
}

/// What an ACK tells the congestion control.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ack {
    pub now: Time,
    /// Segments newly delivered by this ACK (cumulatively acknowledged or SACKed, each once).
    pub acked: u32,
    /// RTT of the most recently sent segment this ACK delivered (Linux `rs->rtt_us`).
    pub rtt: Option<Time>,
    /// Smallest RTT seen on the connection so far (`Time::MAX` until known).
    pub min_rtt: Time,
    /// Segments in flight after this ACK was processed.
    pub in_flight: u32,
    /// The sender used its window (Linux `tcp_is_cwnd_limited`): a window that is not
    /// used must not grow.
    pub cwnd_limited: bool,
    /// `snd_una` and `snd_nxt` after this ACK (HyStart's rounds).
    pub snd_una: u64,
    pub snd_nxt: u64,
    /// Congestion state after this ACK's loss processing.
    pub state: CaState,
    /// The delivery-rate sample (Linux `struct rate_sample`).
    pub rate: RateSample,
    /// Segments delivered (`tp->delivered`) and marked lost (`tp->lost`) so far.
    pub delivered: u64,
    pub lost: u64,
    /// When `delivered` last changed (`tp->delivered_mstamp`).
    pub delivered_mstamp: Time,
    pub mss: u32,
    pub srtt: Option<Time>,
    /// Earliest departure of the next segment under pacing (`tcp_wstamp_ns`).
    pub pacing_next: Time,
    /// Segments sent and not cumulatively acknowledged (`packets_out`).
    pub packets_out: u32,
    /// `sk_pacing_rate`, payload bytes per second (0: unknown, infinite: no RTT yet).
    pub pacing_rate: f64,
    /// The sender paces (`sk_pacing_status` not `SK_PACING_NONE`: a pacing control, or
    /// `SO_MAX_PACING_RATE` set).
    pub paced: bool,
}

/// What a `cong_control` asks of the sender beyond cwnd and pacing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Control {
    /// Mark the sender application-limited (BBR's PROBE_RTT, which must not take its
    /// own low delivery rate as a bandwidth sample).
    pub app_limited: bool,
}

/// A congestion control algorithm: per-flow state plus the Linux-shaped hooks.
pub trait CongestionControl: Send {
    /// The name as Linux spells it (`net.ipv4.tcp_congestion_control`).
    fn name(&self) -> &'static str;

    /// The connection is established (Linux `.init`, after the SYN exchange).
    fn init(&mut self, _w: &mut Window, _ack: &Ack) {}

    /// Every ACK that delivers data, in any state, with its RTT sample (Linux `.pkts_acked`).
    fn on_packets_acked(&mut self, _w: &mut Window, _ack: &Ack) {}

    /// Whether `on_packets_acked` does anything (Linux tests `.pkts_acked` for `NULL`): the
    /// sender builds its `Ack` only for a control that has it.
    fn has_packets_acked(&self) -> bool {
        false
    }

    /// Window growth on an ACK that advances `snd_una` outside loss recovery (Linux
    /// `.cong_avoid`).
    fn on_ack(&mut self, w: &mut Window, ack: &Ack);

    /// A congestion event: return the new slow-start threshold (Linux `.ssthresh`).
    fn ssthresh_on_loss(&mut self, w: &Window, now: Time) -> u32;

    /// The retransmission timer expired; the sender restarts from one segment.
    fn on_rto(&mut self, _w: &Window, _now: Time) {}

    /// Fast recovery ended; the sender has set `cwnd` to `ssthresh`.
    fn on_recovery_exit(&mut self, _w: &mut Window, _now: Time) {}

    /// The congestion state changed (Linux `.set_state`); `ack` describes the sender then.
    fn on_state(&mut self, _state: CaState, _w: &Window, _ack: &Ack) {}

    /// Whether `cong_control` replaces the sender's window rules (Linux `.cong_control`).
    fn has_cong_control(&self) -> bool {
        false
    }

    /// Sets cwnd (and the pacing rate) on every ACK (Linux `.cong_control`).
    fn cong_control(&mut self, _w: &mut Window, _ack: &Ack) -> Control {
        Control::default()
    }

    /// The pacing rate this control asks for, payload bytes per second; `None`: the
    /// control does not pace (Linux `sk_pacing_status == SK_PACING_NONE`).
    fn pacing_rate(&self) -> Option<f64> {
        None
    }

    /// The fewest segments per skb TCP builds (Linux `.min_tso_segs`, else the sysctl
    /// `net.ipv4.tcp_min_tso_segs`).
    fn min_tso_segs(&self) -> u32 {
        MIN_TSO_SEGS
    }
}

/// `net.ipv4.tcp_min_tso_segs`.
pub const MIN_TSO_SEGS: u32 = 2;

/// The largest skb TCP builds (`sk_gso_max_size`, `GSO_LEGACY_MAX_SIZE`), bytes.
pub const GSO_MAX_SIZE: f64 = 65536.0;

/// Variant names as Linux spells them, in the order the seeds list them.
pub const NAMES: &[&str] = &[
    "reno",
    "bic",
    "cubic",
    "highspeed",
    "htcp",
    "scalable",
    "bbr",
];

/// Builds the congestion control called `name`, or `None` if it is not implemented.
pub fn by_name(name: &str) -> Option<Box<dyn CongestionControl>> {
    build(name, 0, 250)
}

/// Builds the congestion control called `name`; `seed` feeds its random choices (BBR's
/// starting phase of the gain cycle), `hz` is the host's timer frequency (`tcp.hz`), which
/// only Linux's own H-TCP counts in.
pub fn build(name: &str, seed: u64, hz: u32) -> Option<Box<dyn CongestionControl>> {
    match name {
        "bbr" => Some(Box::new(bbr::Bbr::new(seed))),
        "reno" => Some(Box::new(reno::Reno)),
        "bic" => Some(Box::new(bic::Bic::default())),
        "cubic" => Some(Box::new(cubic::Cubic::default())),
        "highspeed" => Some(Box::new(highspeed::HighSpeed::default())),
        "htcp" => Some(Box::new(htcp::Htcp::default())),
        // Linux's tcp_htcp.c at the host's HZ; not in `NAMES`: an experiment beside the
        // published law, which the netns port follows (benches/htcp_backoff.py --linux).
        "htcp_linux" => Some(Box::new(htcp_linux::HtcpLinux::new(hz))),
        "scalable" => Some(Box::new(scalable::Scalable)),
        _ => None,
    }
}

/// Synthetic ACK sequences for the congestion-control unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// An ACK of `acked` segments from a window-limited sender.
    pub fn ack(acked: u32) -> Ack {
        Ack {
            acked,
            rtt: Some(1),
            min_rtt: 1,
            cwnd_limited: true,
            mss: 1448,
            ..Ack::default()
        }
    }

    /// One round trip: the whole window acknowledged by ACKs of two segments.
    pub fn round(cc: &mut dyn CongestionControl, w: &mut Window) {
        let mut left = w.cwnd;
        while left > 0 {
            let n = left.min(2);
            left -= n;
            cc.on_ack(w, &ack(n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_stops_at_ssthresh_and_returns_the_rest() {
        let mut w = Window {
            cwnd: 10,
            ssthresh: 14,
            cwnd_cnt: 0,
        };
        assert_eq!(w.slow_start(3), 0);
        assert_eq!(w.cwnd, 13);
        assert_eq!(w.slow_start(5), 4);
        assert_eq!(w.cwnd, 14);
    }

    #[test]
    fn additive_increase_counts_segments_not_acks() {
        // 100 segments acknowledged by 50 delayed ACKs grow a 100-segment window by one.
        let mut w = Window {
            cwnd: 100,
            ssthresh: 50,
            cwnd_cnt: 0,
        };
        for _ in 0..50 {
            let cwnd = w.cwnd;
            w.cong_avoid_ai(cwnd, 2);
        }
        assert_eq!(w.cwnd, 101);
        assert_eq!(w.cwnd_cnt, 0);
    }
}
