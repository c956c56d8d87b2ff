//! The resolved run description the simulator consumes.
//!
//! Units are already resolved (bits per second, nanoseconds, bytes, packets): the Python
//! scenario model does the parsing and validation, and hands this over as JSON. Every field
//! has a default that matches Linux behaviour where one exists, so the JSON can stay short.

use serde::{Deserialize, Serialize};

use crate::time::{Time, NS_PER_MS, NS_PER_S};

/// One simulated run: a dumbbell of `pairs` sender→receiver hosts sharing one bottleneck.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Seed of every random choice in the run (start jitter, random loss).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Maximum segment size in bytes (MTU − IP/TCP headers − TCP options).
    #[serde(default = "default_mss")]
    pub mss: u32,
    /// IP + TCP header bytes carried by every segment, options included (40 + 12 timestamps).
    #[serde(default = "default_header_bytes")]
    pub header_bytes: u32,
    /// Bytes a frame occupies on the wire beyond the IP packet: Ethernet header 14, FCS 4,
    /// preamble 8, inter-frame gap 12 (seed 001 §3.3).
    #[serde(default = "default_frame_overhead")]
    pub frame_overhead: u32,
    /// The shared link, in the data direction (left router → right router).
    pub bottleneck: LinkConfig,
    /// The same link in the ACK direction. `None`: ACKs only see propagation delay.
    #[serde(default)]
    pub reverse_bottleneck: Option<LinkConfig>,
    /// The sender→receiver host pairs (index = pair number).
    pub pairs: Vec<PairConfig>,
    /// The TCP connections; several per pair for parallel streams.
    pub flows: Vec<FlowConfig>,
    /// Unresponsive ON/OFF sources crossing the bottleneck in the data direction
    /// (background traffic, seed 004's Bg).
    #[serde(default)]
    pub background: Vec<OnOffConfig>,
    #[serde(default)]
    pub tcp: TcpConfig,
    /// The noise of real end hosts (on by default; `NoiseConfig::off()` for exact runs).
    #[serde(default)]
    pub noise: NoiseConfig,
    #[serde(default)]
    pub measure: MeasureConfig,
    /// Hard end of the run (ns). `None`: the end of the last duration-bound flow, or the
    /// completion of every volume-bound flow.
    #[serde(default)]
    pub end_ns: Option<Time>,
}

/// A drop-tail FIFO link.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Capacity in bits per second of wire time (frames + preamble + IFG).
    pub rate_bps: f64,
    /// Packets that may wait in the queue (a Linux `pfifo limit B`); the packet being
    /// serialised is not counted.
    pub buffer_pkts: u32,
    /// Probability that a packet offered to the link is lost at random (Bernoulli).
    #[serde(default)]
    pub loss_rate: f64,
    /// A rate limiter in front of the serialiser: the link then runs at `rate_bps` (the
    /// line rate) in bursts, at the limiter's rate on average — e.g. HTB shaping a port.
    #[serde(default)]
    pub shaper: Option<LimiterConfig>,
}

/// One sender host and its receiver.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairConfig {
    /// Sender access link capacity (bits/s of wire time); serialisation happens at this rate.
    pub access_rate_bps: f64,
    /// Base round-trip propagation delay of this pair (ns), without queueing or serialisation.
    pub rtt_ns: Time,
}

/// One TCP connection.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowConfig {
    pub pair: u32,
    /// Index of this stream among the pair's parallel streams.
    #[serde(default)]
    pub stream: u32,
    /// Congestion control, named as Linux names it (`reno`, ...).
    #[serde(default = "default_variant")]
    pub variant: String,
    /// When the connection starts sending (ns).
    #[serde(default)]
    pub start_ns: Time,
    /// Send for this long, then stop (duration-bound flow).
    #[serde(default)]
    pub duration_ns: Option<Time>,
    /// Send this many bytes, then stop (volume-bound flow). Exactly one of the two is set.
    #[serde(default)]
    pub volume_bytes: Option<u64>,
    /// Window cap in segments (receive window / socket buffer). `None`: not limiting.
    #[serde(default)]
    pub max_window_pkts: Option<u32>,
    /// What the flow is for: a measured transfer, or reverse traffic (from the pair's
    /// receiver host to its sender host, through the reverse bottleneck; seed 004's R).
    #[serde(default)]
    pub role: FlowRole,
    /// A rate limiter between the TCP sender and its host interface.
    #[serde(default)]
    pub limiter: Option<LimiterConfig>,
    /// Rate changes of the limiter, in time order (needs a limiter).
    #[serde(default)]
    pub profile: Vec<RateStep>,
    /// Start when another pair's transfers are done instead of at `start_ns`.
    #[serde(default)]
    pub start_after: Option<StartAfter>,
    /// How long before its first data arrives the receiver's side of the connection was
    /// established (ns): 0 when the data follows the handshake, about an RTT when the
    /// application exchanges messages of its own first (iperf3). Times the receive
    /// buffer's first measure (`rcvq_space.time`).
    #[serde(default)]
    pub connected_before_ns: Time,
}

impl FlowConfig {
    /// A transfer on `pair` starting at 0 with the defaults (Reno, unlimited); set its
    /// volume or duration.
    pub fn transfer(pair: u32) -> Self {
        FlowConfig {
            pair,
            stream: 0,
            variant: default_variant(),
            start_ns: 0,
            duration_ns: None,
            volume_bytes: None,
            max_window_pkts: None,
            role: FlowRole::Transfer,
            limiter: None,
            profile: vec![],
            start_after: None,
            connected_before_ns: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowRole {
    /// Measured, and decides when the run ends.
    #[default]
    Transfer,
    /// Traffic in the opposite direction; runs until the end unless given a duration or
    /// a volume, and does not decide when the run ends.
    Reverse,
}

/// Rate limiters of seed 001 §2.1.3, counting frames as a qdisc does (IP packet + 14 B).
/// A rate limiter on a flow (seed 001 §2.1.3). Rates count frame bytes as a qdisc sees
/// them (IP packet + 14-byte Ethernet header); `null` in JSON means unlimited.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LimiterConfig {
    /// Packet-level pacing (PSPacer, SO_MAX_PACING_RATE).
    Pacer {
        #[serde(deserialize_with = "rate_or_unlimited")]
        rate_bps: f64,
    },
    /// A token bucket refilled by a timer every `tick_ns` (HTB/TBF with HZ ticks).
    TokenBucket {
        #[serde(deserialize_with = "rate_or_unlimited")]
        rate_bps: f64,
        burst_bytes: u64,
        tick_ns: Time,
    },
    /// The receiver's window clamped to rate × the path's RTT (TCP_WINDOW_CLAMP): the
    /// sender never has more than that in flight.
    CwndClamp {
        #[serde(deserialize_with = "rate_or_unlimited")]
        rate_bps: f64,
    },
    /// A userland sleep timer (Trickle-like): every `tick_ns` the application writes
    /// rate × tick into the socket; TCP sends what it has.
    SleepTimer {
        #[serde(deserialize_with = "rate_or_unlimited")]
        rate_bps: f64,
        tick_ns: Time,
    },
}

impl LimiterConfig {
    /// The limiter's rate at the start, bit/s of frames (infinite: unlimited).
    pub fn rate_bps(&self) -> f64 {
        match *self {
            LimiterConfig::Pacer { rate_bps }
            | LimiterConfig::TokenBucket { rate_bps, .. }
            | LimiterConfig::CwndClamp { rate_bps }
            | LimiterConfig::SleepTimer { rate_bps, .. } => rate_bps,
        }
    }
}

/// `null` is an unlimited rate (serde_json writes infinity as `null`, so this round-trips).
fn rate_or_unlimited<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// From `at_ns` on, the flow's limiter runs at `rate_bps` (0 pauses new data, `null` lifts
/// the limit): the steps of a multi-rate or preemptive plan.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateStep {
    pub at_ns: Time,
    #[serde(deserialize_with = "rate_or_unlimited")]
    pub rate_bps: f64,
}

/// The flow starts `delay_ns` after every transfer of `pair` has completed (one after
/// another, the start signalled by the previous transfer's end).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartAfter {
    pub pair: u32,
    #[serde(default)]
    pub delay_ns: Time,
}

/// An unresponsive source alternating exponential ON and OFF periods; during ON it sends
/// back-to-back packets at its access rate (UDP-like background traffic).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnOffConfig {
    pub access_rate_bps: f64,
    pub mean_on_ns: Time,
    pub mean_off_ns: Time,
    /// IP bytes per packet.
    #[serde(default = "default_bg_packet")]
    pub packet_bytes: u32,
    #[serde(default)]
    pub start_ns: Time,
}

fn default_bg_packet() -> u32 {
    1500
}

/// TCP behaviour shared by every flow. Defaults follow Linux.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpConfig {
    /// Initial congestion window in segments (RFC 6928, Linux default 10).
    #[serde(default = "default_initial_cwnd")]
    pub initial_cwnd: u32,
    /// Minimum retransmission timeout (Linux `TCP_RTO_MIN`, 200 ms).
    #[serde(default = "default_rto_min")]
    pub rto_min_ns: Time,
    /// RTO before the first RTT sample (RFC 6298 §2.1: 1 s).
    #[serde(default = "default_rto_initial")]
    pub rto_initial_ns: Time,
    /// Delayed ACKs at the receiver (RFC 1122/5681: ACK at least every second full segment).
    #[serde(default = "default_true")]
    pub delayed_ack: bool,
    /// Delayed-ACK timer (Linux `TCP_DELACK_MIN`, 40 ms).
    #[serde(default = "default_delack")]
    pub delayed_ack_timeout_ns: Time,
    /// Segments SACKed above a hole before it is deemed lost (RFC 6675 DupThresh).
    #[serde(default = "default_dupthresh")]
    pub dupthresh: u32,
    /// Kernel timer frequency (`CONFIG_HZ`): TCP's retransmission, loss-probe and
    /// delayed-ACK timers count in jiffies of 1/HZ s (250 on the project's machines and in
    /// Debian's kernels).
    #[serde(default = "default_hz")]
    pub hz: u32,
    /// Linux SACK compression at the receiver (`tcp_comp_sack_nr`, 44; 0 turns it off):
    /// beyond three duplicate ACKs, out-of-order data is acknowledged once per
    /// `comp_sack_delay_ns` (at most RTT/20) or per this many segments.
    #[serde(default = "default_comp_sack_nr")]
    pub comp_sack_nr: u32,
    /// `tcp_comp_sack_delay_ns` (1 ms).
    #[serde(default = "default_comp_sack_delay")]
    pub comp_sack_delay_ns: Time,
    /// Which Linux the end hosts run.
    #[serde(default)]
    pub kernel: Kernel,
    /// The receiver advertises Linux's receive window: 64 KiB at first, then grown by
    /// receive-buffer autotuning (`tcp_moderate_rcvbuf`, `tcp_rcv_space_adjust`). Off: the
    /// window never binds below `max_window_pkts`.
    #[serde(default)]
    pub rcvbuf_autotuning: bool,
    /// With the receive window modelled and an application that reads only when woken,
    /// the receiver acknowledges as Linux 6.x does: quick ACKs (16 at the first data, one
    /// for each segment that grows the window offered), and an ACK left to the read when
    /// unread data would shrink the window (`__tcp_ack_snd_check`, `tcp_cleanup_rbuf`).
    /// Off: an ACK per two segments. Off by default until the validation tables are rerun
    /// with it (VALIDATION.md §6, "The receivers' ACKs").
    #[serde(default)]
    pub linux_acks: bool,
    /// TSO deferral (`tcp_tso_should_defer`): outside loss recovery, new data waits for
    /// an skb's worth of window (~1 ms of the pacing rate) for at most 1 ms after the last
    /// transmission, and only while an ACK is due within 1 ms, so a bulk sender goes in
    /// bursts of an skb, not a few segments per ACK. On by default since 2026-12-06
    /// (VALIDATION.md §6, "TSO deferral"); false: a few segments per ACK.
    #[serde(default = "default_tso_defer")]
    pub tso_defer: bool,
    /// How far autotuning may grow a receive buffer (`tcp_rmem[2]`, bytes; Linux's default
    /// 6 MiB).
    #[serde(default = "default_rmem_max")]
    pub rmem_max_bytes: u64,
}

/// The end hosts' kernel: what their TCP does beyond the congestion control.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kernel {
    /// Linux 6.x: TCP Small Queues with completion, latched cwnd use, RACK-TLP, SACK
    /// compression at the receiver (the project's machines run 6.18).
    #[default]
    Linux6,
    /// A kernel of 2006 (2.6.17, the seeds' testbeds): no TSQ (a sender fills its
    /// interface queue of 1 000 packets, so it sends whole windows at line rate), losses
    /// found by the duplicate threshold only, a timeout resends everything outstanding, no
    /// tail loss probe, no SACK compression, a window counts as used only when full.
    Linux2006,
}

/// The noise real end hosts add, modelled at its sources. Every draw comes from the run's
/// seed, so runs stay reproducible; `enabled: false` gives exact, phase-locked runs.
///
/// Defaults are middle values of common hardware, not fitted to any measurement:
/// interrupt coalescing of 25 µs (`ethtool -c` defaults span 8 µs for mlx5 rx to 50 µs for
/// i40e and igb's ~20 000 interrupts/s), 1 µs of stack processing per packet on average
/// (~10⁶ packets per second per core), interface clocks within the ±100 ppm IEEE 802.3
/// allows, and 20 µs on average for a thread blocked in `recv` to be woken and run (5 to
/// 50 µs on an idle core, more out of deep C-states).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoiseConfig {
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Mean per-packet processing time of a host's stack (drawn uniformly in [0, 2×mean))
    /// between TCP and the interface, and between the interface and TCP.
    #[serde(default = "default_processing")]
    pub processing_ns: Time,
    /// Receive interrupt coalescing (`rx-usecs`): packets reaching a host's interface are
    /// handed to its stack together, this long after the first of a batch. Data batched
    /// at a receiver makes its ACKs come in bursts; ACKs batched at a sender make it send
    /// in bursts (ACK compression).
    #[serde(default = "default_coalesce")]
    pub rx_coalesce_ns: Time,
    /// Transmit-completion coalescing (`tx-usecs`): segments that left the interface are
    /// freed together, this long after the first; TCP Small Queues counts them until then.
    #[serde(default = "default_coalesce")]
    pub tx_coalesce_ns: Time,
    /// Each host interface's clock is off its nominal rate by a constant drawn uniformly
    /// within ± this many parts per million (the bottleneck is the reference): two
    /// interfaces of the same nominal rate never stay in phase.
    #[serde(default = "default_clock_ppm")]
    pub clock_ppm: f64,
    /// Transmit batching by the host's softirq runs: segments TCP sends reach the
    /// interface only at the host's next run, every this many ns at the host's own phase
    /// (0: at once). A quiet host runs its softirqs within microseconds; a host whose
    /// CPUs are saturated (an emulation on a few cores) defers them to ksoftirqd and
    /// its flows leave in trains.
    #[serde(default)]
    pub tx_batch_ns: Time,
    /// Mean time (uniform in [0, 2×mean)) from data reaching a receiver to its application
    /// reading it: until then the data takes buffer space from the receive window, and the
    /// read measures for autotuning what it read less what is still queued. 0: it reads
    /// each segment as it arrives.
    #[serde(default = "default_app_wakeup")]
    pub app_wakeup_ns: Time,
    /// A measured distribution of that time instead of the uniform one: its quantiles at
    /// equal steps of probability from 0 to 1 (at least two, non-decreasing; drawn by
    /// linear interpolation between them). Empty: the uniform of `app_wakeup_ns`. A host
    /// whose CPUs are busy wakes its readers late now and then by milliseconds, a tail a
    /// mean cannot give (`benches/path_trains.py` measures one; docs/fidelity.md).
    #[serde(default)]
    pub app_wakeup_quantiles_ns: Vec<Time>,
    /// Stalls of each receiving application (0: none): times when its host holds it up,
    /// the CPUs taken by other work, that start this many times per second of unstalled
    /// time (a Poisson process; one stall at a time, each flow's application on a process
    /// of its own). A read due during a stall happens at its end, so every read that falls
    /// in one waits for the same end: a delay correlated in time, where the wakeups above
    /// are drawn per read (`benches/receiver_waits.py` measures them on the emulation).
    #[serde(default)]
    pub app_stall_rate_hz: f64,
    /// The stalls' lengths, as quantiles at equal steps of probability (at least two,
    /// non-decreasing; needed when `app_stall_rate_hz` is not 0).
    #[serde(default)]
    pub app_stall_quantiles_ns: Vec<Time>,
}

impl Default for NoiseConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            processing_ns: default_processing(),
            rx_coalesce_ns: default_coalesce(),
            tx_coalesce_ns: default_coalesce(),
            clock_ppm: default_clock_ppm(),
            tx_batch_ns: 0,
            app_wakeup_ns: default_app_wakeup(),
            app_wakeup_quantiles_ns: Vec::new(),
            app_stall_rate_hz: 0.0,
            app_stall_quantiles_ns: Vec::new(),
        }
    }
}

impl NoiseConfig {
    /// No host noise: exact, deterministic phase relations (as before noise was modelled).
    pub fn off() -> Self {
        Self {
            enabled: false,
            ..Self::default()
        }
    }
}

fn default_processing() -> Time {
    1_000
}
fn default_coalesce() -> Time {
    25_000
}
fn default_clock_ppm() -> f64 {
    100.0
}
fn default_app_wakeup() -> Time {
    20_000
}

/// Sampling intervals of the trace tables.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasureConfig {
    /// Receiver-side goodput interval (iperf-like).
    #[serde(default = "default_goodput_interval")]
    pub goodput_interval_ns: Time,
    /// Bottleneck sampling interval (GtrcNET-like).
    #[serde(default = "default_link_interval")]
    pub link_interval_ns: Time,
    /// Sender-state sampling interval (Web100 / TCP_INFO-like).
    #[serde(default = "default_tcp_interval")]
    pub tcp_interval_ns: Time,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            initial_cwnd: default_initial_cwnd(),
            rto_min_ns: default_rto_min(),
            rto_initial_ns: default_rto_initial(),
            delayed_ack: true,
            delayed_ack_timeout_ns: default_delack(),
            dupthresh: default_dupthresh(),
            hz: default_hz(),
            comp_sack_nr: default_comp_sack_nr(),
            comp_sack_delay_ns: default_comp_sack_delay(),
            kernel: Kernel::default(),
            rcvbuf_autotuning: false,
            linux_acks: false,
            tso_defer: default_tso_defer(),
            rmem_max_bytes: default_rmem_max(),
        }
    }
}

impl Default for MeasureConfig {
    fn default() -> Self {
        Self {
            goodput_interval_ns: default_goodput_interval(),
            link_interval_ns: default_link_interval(),
            tcp_interval_ns: default_tcp_interval(),
        }
    }
}

fn default_seed() -> u64 {
    1
}
fn default_mss() -> u32 {
    1448
}
fn default_header_bytes() -> u32 {
    52
}
fn default_frame_overhead() -> u32 {
    38
}
fn default_variant() -> String {
    "reno".into()
}
fn default_initial_cwnd() -> u32 {
    10
}
fn default_rto_min() -> Time {
    200 * NS_PER_MS
}
fn default_rto_initial() -> Time {
    NS_PER_S
}
fn default_true() -> bool {
    true
}
fn default_delack() -> Time {
    40 * NS_PER_MS
}
fn default_dupthresh() -> u32 {
    3
}
fn default_hz() -> u32 {
    250
}
fn default_comp_sack_nr() -> u32 {
    44
}
fn default_comp_sack_delay() -> Time {
    NS_PER_MS
}
fn default_rmem_max() -> u64 {
    6 << 20
}
fn default_tso_defer() -> bool {
    true
}
fn default_goodput_interval() -> Time {
    500 * NS_PER_MS
}
fn default_link_interval() -> Time {
    20 * NS_PER_MS
}
fn default_tcp_interval() -> Time {
    100 * NS_PER_MS
}

/// Why a configuration cannot be simulated.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl SimConfig {
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let cfg: SimConfig = serde_json::from_str(text)
            .map_err(|e| ConfigError(format!("simulator config: {e}")))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks what the simulator relies on; the scenario model gives friendlier messages
    /// first, this is the last line of defence for direct Rust users.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.mss == 0 {
            return fail("mss must be positive".into());
        }
        self.validate_links()?;
        if self.flows.is_empty() {
            return fail("at least one flow is needed".into());
        }
        for (i, f) in self.flows.iter().enumerate() {
            self.validate_flow(i, f)?;
        }
        self.validate_start_chains()?;
        for (i, b) in self.background.iter().enumerate() {
            if !(b.access_rate_bps > 0.0 && b.access_rate_bps.is_finite())
                || b.mean_on_ns == 0
                || b.packet_bytes == 0
            {
                return fail(format!(
                    "background[{i}]: rate, mean ON time and packet size must be positive"
                ));
            }
        }
        let n = &self.noise;
        if !(0.0..=10_000.0).contains(&n.clock_ppm) {
            return fail("noise.clock_ppm must be in [0, 10000]".into());
        }
        let q = &self.noise.app_wakeup_quantiles_ns;
        if q.len() == 1 || q.windows(2).any(|w| w[0] > w[1]) {
            return fail(
                "noise.app_wakeup_quantiles_ns must be empty or at least two non-decreasing times"
                    .into(),
            );
        }
        let q = &self.noise.app_stall_quantiles_ns;
        let stalls = self.noise.app_stall_rate_hz;
        if !(0.0..=1e5).contains(&stalls)
            || (stalls > 0.0 && q.len() < 2)
            || q.windows(2).any(|w| w[0] > w[1])
        {
            return fail(
                "noise.app_stall_rate_hz must be in [0, 1e5], with at least two non-decreasing \
                 app_stall_quantiles_ns when not 0"
                    .into(),
            );
        }
        let m = &self.measure;
        if m.goodput_interval_ns == 0 || m.link_interval_ns == 0 || m.tcp_interval_ns == 0 {
            return fail("measure intervals must be positive".into());
        }
        if self.tcp.initial_cwnd == 0 || self.tcp.dupthresh == 0 {
            return fail("tcp.initial_cwnd and tcp.dupthresh must be positive".into());
        }
        if !(10..=10_000).contains(&self.tcp.hz) {
            return fail("tcp.hz must be in [10, 10000]".into());
        }
        if self.tcp.rcvbuf_autotuning && self.tcp.rmem_max_bytes < 2 * self.mss as u64 {
            return fail("tcp.rmem_max_bytes must hold two segments at least".into());
        }
        Ok(())
    }

    /// The bottlenecks and the pairs' access links.
    fn validate_links(&self) -> Result<(), ConfigError> {
        for (name, l) in [
            ("bottleneck", Some(&self.bottleneck)),
            ("reverse_bottleneck", self.reverse_bottleneck.as_ref()),
        ] {
            if let Some(l) = l {
                if !(l.rate_bps > 0.0 && l.rate_bps.is_finite()) {
                    return fail(format!("{name}.rate_bps must be positive"));
                }
                if l.buffer_pkts == 0 {
                    return fail(format!("{name}.buffer_pkts must be at least 1"));
                }
                if !(0.0..1.0).contains(&l.loss_rate) {
                    return fail(format!("{name}.loss_rate must be in [0, 1)"));
                }
                match &l.shaper {
                    Some(
                        sh @ (LimiterConfig::Pacer { .. } | LimiterConfig::TokenBucket { .. }),
                    ) => {
                        self.validate_limiter(&format!("{name}.shaper"), sh)?;
                    }
                    Some(_) => {
                        return fail(format!("{name}.shaper must be a pacer or a token bucket"))
                    }
                    None => {}
                }
            }
        }
        if self.pairs.is_empty() {
            return fail("at least one pair is needed".into());
        }
        for (i, p) in self.pairs.iter().enumerate() {
            if !(p.access_rate_bps > 0.0 && p.access_rate_bps.is_finite()) {
                return fail(format!("pairs[{i}].access_rate_bps must be positive"));
            }
        }
        Ok(())
    }

    /// One flow: its pair, what bounds it, its variant, limiter, profile and start.
    fn validate_flow(&self, i: usize, f: &FlowConfig) -> Result<(), ConfigError> {
        if f.pair as usize >= self.pairs.len() {
            return fail(format!("flows[{i}].pair {} does not exist", f.pair));
        }
        match (f.duration_ns, f.volume_bytes, f.role) {
            (Some(0), _, _) => return fail(format!("flows[{i}].duration_ns must be positive")),
            (_, Some(0), _) => return fail(format!("flows[{i}].volume_bytes must be positive")),
            (Some(_), None, _) | (None, Some(_), _) | (None, None, FlowRole::Reverse) => {}
            _ => {
                return fail(format!(
                    "flows[{i}]: exactly one of duration_ns and volume_bytes"
                ))
            }
        }
        if f.role == FlowRole::Reverse && self.reverse_bottleneck.is_none() {
            return fail(format!(
                "flows[{i}]: reverse traffic needs a reverse_bottleneck"
            ));
        }
        if let Some(l) = &f.limiter {
            self.validate_limiter(&format!("flows[{i}].limiter"), l)?;
        }
        self.validate_profile(i, f)?;
        if crate::cc::by_name(&f.variant).is_none() {
            return fail(format!(
                "flows[{i}].variant '{}' is not known (known: {})",
                f.variant,
                crate::cc::NAMES.join(", ")
            ));
        }
        if f.max_window_pkts == Some(0) {
            return fail(format!("flows[{i}].max_window_pkts must be positive"));
        }
        Ok(())
    }

    fn validate_limiter(&self, name: &str, l: &LimiterConfig) -> Result<(), ConfigError> {
        let rate = l.rate_bps();
        if rate.is_nan() || rate <= 0.0 {
            return fail(format!(
                "{name}.rate_bps must be positive (null: unlimited)"
            ));
        }
        match *l {
            LimiterConfig::TokenBucket {
                burst_bytes,
                tick_ns,
                ..
            } => {
                if tick_ns == 0 {
                    return fail(format!("{name}.tick_ns must be positive"));
                }
                if burst_bytes < (self.mss + self.header_bytes + 14) as u64 {
                    return fail(format!("{name}.burst_bytes must hold at least one frame"));
                }
            }
            LimiterConfig::SleepTimer { tick_ns: 0, .. } => {
                return fail(format!("{name}.tick_ns must be positive"));
            }
            _ => {}
        }
        Ok(())
    }

    /// A profile needs a limiter to drive; its steps are in time order, rates ≥ 0.
    fn validate_profile(&self, i: usize, f: &FlowConfig) -> Result<(), ConfigError> {
        if !f.profile.is_empty() && f.limiter.is_none() {
            return fail(format!("flows[{i}].profile needs a limiter"));
        }
        for (k, st) in f.profile.iter().enumerate() {
            if st.rate_bps.is_nan() || st.rate_bps < 0.0 {
                return fail(format!(
                    "flows[{i}].profile[{k}].rate_bps must be ≥ 0 (0 pauses, null: unlimited)"
                ));
            }
            if k > 0 && st.at_ns <= f.profile[k - 1].at_ns {
                return fail(format!(
                    "flows[{i}].profile[{k}].at_ns is not after the step before"
                ));
            }
        }
        Ok(())
    }

    /// A flow that starts after a pair's transfers follows a pair that has volume-bound
    /// transfers of its own, and no chain of such starts loops back on itself.
    fn validate_start_chains(&self) -> Result<(), ConfigError> {
        let mut follows: Vec<Option<u32>> = vec![None; self.pairs.len()];
        for (i, f) in self.flows.iter().enumerate() {
            let Some(after) = &f.start_after else {
                continue;
            };
            if f.role != FlowRole::Transfer || f.volume_bytes.is_none() {
                return fail(format!(
                    "flows[{i}].start_after needs a volume-bound transfer"
                ));
            }
            let awaited = self.flows.iter().filter(|g| {
                g.pair == after.pair && g.role == FlowRole::Transfer && g.volume_bytes.is_some()
            });
            if after.pair == f.pair || awaited.count() == 0 {
                return fail(format!(
                    "flows[{i}].start_after.pair {} has no volume-bound transfers to wait for",
                    after.pair
                ));
            }
            follows[f.pair as usize] = Some(after.pair);
        }
        for start in 0..self.pairs.len() {
            let (mut p, mut steps) = (start, 0);
            while let Some(next) = follows[p] {
                p = next as usize;
                steps += 1;
                if steps > self.pairs.len() {
                    return fail(format!(
                        "flows on pair {start}: start_after chains loop (each waits for the other)"
                    ));
                }
            }
        }
        Ok(())
    }
}

fn fail(m: String) -> Result<(), ConfigError> {
    Err(ConfigError(m))
}
