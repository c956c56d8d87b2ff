//! The event loop: one dumbbell, its flows, and the trace recorders.
//!
//! Route of a data segment: sender host interface (serialisation at the access rate,
//! never drops — the host holds its own packets) → bottleneck (drop-tail, rate C) →
//! one-way propagation → receiver. ACKs go back through the reverse bottleneck when one is
//! configured, else through pure propagation delay. Each hop is a per-flow FIFO pipe
//! whose head is the only thing in the event list, so the event list holds a few entries
//! per flow whatever the bandwidth-delay product.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, VecDeque};

use rand_core::SeedableRng;
use rand_pcg::Pcg64Mcg;

use crate::cc;
use crate::config::{ConfigError, FlowConfig, FlowRole, LimiterConfig, LinkConfig, SimConfig};
use crate::gate::Gate;
use crate::host::{uniform, Batches, Host, Noise};
use crate::link::{Link, Offer};
use crate::pipe::{AckPipe, Pipe};
use crate::tcp::{AckSegment, Poll, Receiver, Segment, Sender};
use crate::time::{secs, Time};
use crate::trace::{TcpTable, Trace};

const START: u64 = 0;
const STOP: u64 = 1;
const AT_BOTTLENECK: u64 = 2;
const AT_RECEIVER: u64 = 3;
const AT_SENDER: u64 = 4;
const RTO: u64 = 5;
const DELACK: u64 = 6;
const END_SOFT: u64 = 7;
const END_HARD: u64 = 8;
const COMPLETE: u64 = 9;
const AT_NIC: u64 = 10;
const BG_ARRIVAL: u64 = 11;
const PACE: u64 = 12;
const TX_IRQ: u64 = 13;
/// The next step of a flow's rate profile.
const PROFILE: u64 = 14;
/// A sleep-timer limiter's tick: the application writes its next share.
const APP_TICK: u64 = 15;
/// A receiving application is woken and reads.
const APP_READ: u64 = 16;

/// An entry of the event list: ordered by time, then by insertion (FIFO among equals).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    time: Time,
    seq: u64,
    /// kind in the low 8 bits, flow index above.
    what: u64,
}

/// What a pipe-head event carries to its handler.
enum Packet {
    Data(Segment),
    Ack(AckSegment),
    None,
}

/// An unresponsive ON/OFF background source (see `OnOffConfig`).
struct OnOff {
    /// Picoseconds between packets while ON (serialisation at the access rate).
    gap_ps: u64,
    packet_bytes: u32,
    mean_on: f64,
    mean_off: f64,
    /// End of the current ON period.
    on_until: Time,
    /// Arrival of the next packet at the bottleneck, in picoseconds.
    next_ps: u64,
    sent: u64,
    dropped: u64,
}

struct Flow {
    cfg: FlowConfig,
    /// Payload bytes of the last segment of a volume-bound flow.
    last_seg_len: u32,
    total_segs: Option<u64>,
    sender: Sender,
    receiver: Receiver,
    /// Rate limiter in front of the host interface, and the packets it holds.
    gate: Option<Gate>,
    /// The limiter's current rate, bit/s of frames (infinite: unlimited).
    rate_bps: f64,
    /// Index of the next step of `cfg.profile`.
    next_step: usize,
    /// Bytes a sleep-timer limiter's application has written so far.
    written_bytes: f64,
    to_nic: Pipe<Segment>,
    to_bottleneck: Pipe<Segment>,
    to_receiver: Pipe<Segment>,
    to_sender: AckPipe,
    nic: usize,
    /// The host that sends this flow's data, and the one that receives it.
    src_host: usize,
    dst_host: usize,
    /// Segments that left the host but whose transmit completion has not come yet: TSQ
    /// still counts them (host noise with transmit-completion coalescing).
    uncompleted: usize,
    /// The bottleneck the data crosses, and the one the ACKs cross (if any).
    data_link: usize,
    ack_link: Option<usize>,
    /// The sender stopped because its host queue was full (TCP Small Queues); it is
    /// polled again when a segment leaves the host (TSQ completion).
    host_limited: bool,
    one_way_rtt: Time,
    one_way_fwd: Time,
    one_way_rev: Time,
    start: Time,
    end: Option<Time>,
    completed_at: Option<Time>,
    timer_event_at: Option<Time>,
    delack_event_at: Option<Time>,
    pace_event_at: Option<Time>,
    goodput_bins: Vec<u64>,
    delivered_bytes: u64,
    /// (arrival time, bytes) of recent in-order deliveries, oldest first (eager receivers).
    recent_deliveries: VecDeque<(Time, u64)>,
    next_tcp_sample: Time,
}

pub struct Simulation {
    cfg: SimConfig,
    now: Time,
    heap: BinaryHeap<Reverse<Event>>,
    seq: u64,
    /// Sequence number of the event being handled (ties in time are broken by it).
    cur_seq: u64,
    events: u64,
    acks: u64,
    received_segments: u64,
    /// 0: bottleneck; 1: reverse bottleneck if any; then one interface per sender host.
    links: Vec<Link>,
    rev_link: Option<usize>,
    /// With a pure-delay ACK path, a receiver's behaviour depends only on its own
    /// segments, which reach it in order: each segment is then processed as soon as it
    /// leaves the bottleneck, at its arrival time, saving one event per packet.
    eager_receivers: bool,
    flows: Vec<Flow>,
    background: Vec<OnOff>,
    /// Sender hosts (one per pair), then receiver hosts.
    hosts: Vec<Host>,
    noise: Noise,
    rng: Pcg64Mcg,
    volume_left: usize,
    duration_end: Time,
    end: Option<Time>,
    tcp_rows: TcpTable,
    /// Every data segment offered to the bottleneck, when capturing (`capture_bottleneck`).
    capture: Option<Capture>,
}

/// The data segments offered to the bottleneck, as a capture at its router would see them:
/// arrival time, flow, segment number, and when it left the bottleneck (`None`: dropped);
/// and every ACK as its receiver sends it: time, flow, cumulative ACK, window offered.
/// For diagnostics (benches/path_trains.py --sim); not part of the Trace.
#[derive(Debug, Default)]
pub struct Capture {
    pub t_ns: Vec<Time>,
    pub flow: Vec<u32>,
    pub seq: Vec<u64>,
    pub departs_ns: Vec<Option<Time>>,
    pub acks: AckCapture,
}

/// The ACKs of a capture, as each receiver sends them.
#[derive(Debug, Default)]
pub struct AckCapture {
    pub t_ns: Vec<Time>,
    pub flow: Vec<u32>,
    pub cum: Vec<u64>,
    /// The window offered, bytes past `cum` (`u64::MAX`: not modelled).
    pub wnd: Vec<u64>,
}

/// The links of a dumbbell: the bottleneck (0), the reverse bottleneck if any (1), then
/// one interface per host — every pair's sender side, then its receiver side (used by
/// reverse traffic), each at its own clock's rate when hosts are noisy. Returns the links,
/// the reverse bottleneck's index and the first sender and receiver interfaces.
fn build_links(cfg: &SimConfig, noise: &mut Noise) -> (Vec<Link>, Option<usize>, usize, usize) {
    let fo = cfg.frame_overhead;
    let bottleneck = |l: &LinkConfig| {
        let link = Link::new(l.rate_bps, fo, Some(l.buffer_pkts), l.loss_rate)
            .measure(cfg.measure.link_interval_ns);
        match l.shaper.as_ref().and_then(Gate::from_config) {
            Some(g) => link.shaped(g),
            None => link,
        }
    };
    let mut links = vec![bottleneck(&cfg.bottleneck)];
    let rev_link = cfg.reverse_bottleneck.as_ref().map(|r| {
        links.push(bottleneck(r));
        links.len() - 1
    });
    let nic0 = links.len();
    for _side in 0..2 {
        for p in &cfg.pairs {
            links.push(Link::new(
                noise.interface_rate(p.access_rate_bps),
                fo,
                None,
                0.0,
            ));
        }
    }
    (links, rev_link, nic0, nic0 + cfg.pairs.len())
}

/// A limiter's rate (bit/s of qdisc frames) as payload bytes per second, the unit of
/// `SO_MAX_PACING_RATE` and of what an application writes.
fn payload_bytes_per_s(cfg: &SimConfig, frame_rate_bps: f64) -> f64 {
    let frame = (cfg.mss + cfg.header_bytes + crate::gate::QDISC_L2_HEADER) as f64;
    frame_rate_bps / 8.0 * cfg.mss as f64 / frame
}

/// The background ON/OFF sources, at rest.
fn build_background(cfg: &SimConfig) -> Vec<OnOff> {
    cfg.background
        .iter()
        .map(|b| OnOff {
            gap_ps: ((b.packet_bytes + cfg.frame_overhead) as f64 * 8e12 / b.access_rate_bps)
                .round() as u64,
            packet_bytes: b.packet_bytes,
            mean_on: b.mean_on_ns as f64,
            mean_off: b.mean_off_ns as f64,
            on_until: 0,
            next_ps: 0,
            sent: 0,
            dropped: 0,
        })
        .collect()
}

/// Where a flow's packets go: its interface, hosts and bottlenecks.
struct Route {
    nic: usize,
    src_host: usize,
    dst_host: usize,
    data_link: usize,
    ack_link: Option<usize>,
}

impl Route {
    fn of(cfg: &SimConfig, fc: &FlowConfig, nics: (usize, usize), rev_link: Option<usize>) -> Self {
        let (p, n) = (fc.pair as usize, cfg.pairs.len());
        if fc.role == FlowRole::Reverse {
            Route {
                nic: nics.1 + p,
                src_host: p + n,
                dst_host: p,
                data_link: rev_link.expect("validated"),
                ack_link: Some(0),
            }
        } else {
            Route {
                nic: nics.0 + p,
                src_host: p,
                dst_host: p + n,
                data_link: 0,
                ack_link: rev_link,
            }
        }
    }
}

/// Flow `i` as configured, not started.
fn build_flow(cfg: &SimConfig, i: usize, route: Route) -> Flow {
    let fc = &cfg.flows[i];
    let pair = &cfg.pairs[fc.pair as usize];
    let mss = cfg.mss as u64;
    let total_segs = fc.volume_bytes.map(|v| v.div_ceil(mss));
    let last_seg_len = fc
        .volume_bytes
        .map_or(cfg.mss, |v| (v - (v.div_ceil(mss) - 1) * mss) as u32);
    let cc_seed = cfg.seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let cc = cc::build(&fc.variant, cc_seed, cfg.tcp.hz).expect("validated");
    let sender = Sender::new(cc, &cfg.tcp, cfg.mss, total_segs, fc.max_window_pkts);
    let tcp_iv = cfg.measure.tcp_interval_ns;
    // A flow waiting for another pair's transfers has no start time yet.
    let start = if fc.start_after.is_some() {
        Time::MAX
    } else {
        fc.start_ns
    };
    let mut receiver = Receiver::new(&cfg.tcp, pair.rtt_ns, cfg.mss);
    receiver.connected(fc.connected_before_ns);
    Flow {
        cfg: fc.clone(),
        last_seg_len,
        total_segs,
        sender,
        receiver,
        gate: fc.limiter.as_ref().and_then(Gate::from_config),
        rate_bps: fc
            .limiter
            .as_ref()
            .map_or(f64::INFINITY, LimiterConfig::rate_bps),
        next_step: 0,
        written_bytes: 0.0,
        to_nic: Pipe::new(),
        to_bottleneck: Pipe::new(),
        to_receiver: Pipe::new(),
        to_sender: AckPipe::new(),
        nic: route.nic,
        src_host: route.src_host,
        dst_host: route.dst_host,
        uncompleted: 0,
        data_link: route.data_link,
        ack_link: route.ack_link,
        host_limited: false,
        one_way_rtt: pair.rtt_ns,
        one_way_fwd: pair.rtt_ns / 2,
        one_way_rev: pair.rtt_ns - pair.rtt_ns / 2,
        start,
        end: None,
        completed_at: None,
        timer_event_at: None,
        delack_event_at: None,
        pace_event_at: None,
        goodput_bins: Vec::new(),
        delivered_bytes: 0,
        recent_deliveries: VecDeque::new(),
        next_tcp_sample: start.div_ceil(tcp_iv).saturating_mul(tcp_iv),
    }
}

impl Simulation {
    pub fn new(cfg: SimConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let rng = Pcg64Mcg::seed_from_u64(cfg.seed);
        let mut noise = Noise::new(&cfg.noise, cfg.seed);
        let (links, rev_link, nic0, nic_right0) = build_links(&cfg, &mut noise);
        let mut flows: Vec<Flow> = (0..cfg.flows.len())
            .map(|i| {
                build_flow(
                    &cfg,
                    i,
                    Route::of(&cfg, &cfg.flows[i], (nic0, nic_right0), rev_link),
                )
            })
            .collect();
        if noise.deferred_reads() {
            for f in &mut flows {
                f.receiver.defer_reads();
            }
        }
        // Only transfers decide when the run ends.
        let transfers = || flows.iter().filter(|f| f.cfg.role == FlowRole::Transfer);
        let volume_left = transfers().filter(|f| f.total_segs.is_some()).count();
        let duration_end = transfers()
            .filter_map(|f| f.cfg.duration_ns.map(|d| f.start + d))
            .max()
            .unwrap_or(0);
        let tick = crate::time::NS_PER_S / cfg.tcp.hz.max(1) as Time;
        let hosts: Vec<Host> = (0..2 * cfg.pairs.len())
            .map(|_| {
                let tx_phase = noise.tx_phase();
                Host::new(noise.timer_phase(tick), tx_phase)
            })
            .collect();
        let mut sim = Self {
            background: build_background(&cfg),
            cfg,
            now: 0,
            heap: BinaryHeap::new(),
            seq: 0,
            cur_seq: 0,
            events: 0,
            acks: 0,
            received_segments: 0,
            links,
            rev_link,
            eager_receivers: rev_link.is_none(),
            flows,
            hosts,
            noise,
            rng,
            volume_left,
            duration_end,
            end: None,
            tcp_rows: TcpTable::default(),
            capture: None,
        };
        sim.attach_to_hosts();
        sim.schedule_first_events();
        Ok(sim)
    }

    /// Each flow joins its sending host and takes its hosts' timer phases; limiters that
    /// act in the sender get their first rate.
    fn attach_to_hosts(&mut self) {
        for i in 0..self.flows.len() {
            let f = &mut self.flows[i];
            self.hosts[f.src_host].senders.push(i);
            f.sender.set_timer_phase(self.hosts[f.src_host].timer_phase);
            f.receiver
                .set_timer_phase(self.hosts[f.dst_host].timer_phase);
            let rate = f.rate_bps;
            self.apply_rate(i, rate);
        }
    }

    /// Starts, stops, profile steps, background sources and the end of the run.
    fn schedule_first_events(&mut self) {
        for i in 0..self.flows.len() {
            let f = &self.flows[i];
            let stop = f.cfg.duration_ns.map(|d| f.start + d);
            let step = f.cfg.profile.first().map(|s| s.at_ns);
            if f.cfg.start_after.is_none() {
                self.schedule(f.start, START, i);
            }
            if let Some(s) = stop {
                self.schedule(s, STOP, i);
            }
            if let Some(t) = step {
                self.schedule(t, PROFILE, i);
            }
        }
        let n_transfers = self
            .flows
            .iter()
            .filter(|f| f.cfg.role == FlowRole::Transfer)
            .count();
        if self.volume_left < n_transfers {
            self.schedule(self.duration_end, END_SOFT, 0);
        }
        for j in 0..self.background.len() {
            let start = self.cfg.background[j].start_ns;
            self.start_on_period(j, start);
        }
        if let Some(e) = self.cfg.end_ns {
            self.schedule(e, END_HARD, 0);
        }
    }

    /// The limiter of flow `i` runs at `rate_bps` (frames) from now on: 0 pauses new data,
    /// infinite lifts the limit. The pacer and the token bucket act in the gate (the pacer
    /// also as `SO_MAX_PACING_RATE`), the window clamp and the sleep timer in the sender.
    fn apply_rate(&mut self, i: usize, rate_bps: f64) {
        let Some(kind) = self.flows[i].cfg.limiter.clone() else {
            return;
        };
        let paused = rate_bps == 0.0;
        let payload = payload_bytes_per_s(&self.cfg, rate_bps);
        let mss = self.cfg.mss as f64;
        let f = &mut self.flows[i];
        f.sender.set_paused(paused);
        if paused {
            return;
        }
        f.rate_bps = rate_bps;
        if let Some(g) = f.gate.as_mut() {
            g.set_rate(rate_bps);
        }
        match kind {
            LimiterConfig::Pacer { .. } => f.sender.set_max_pacing_rate(payload),
            LimiterConfig::CwndClamp { .. } => {
                let rtt = f.one_way_rtt as f64 / 1e9;
                let segs = (payload * rtt / mss).ceil();
                f.sender.set_window_clamp(
                    payload
                        .is_finite()
                        .then_some(segs.min(u32::MAX as f64) as u32),
                );
            }
            LimiterConfig::SleepTimer { .. } if payload.is_infinite() => f.sender.set_written(None),
            _ => {}
        }
    }

    #[inline]
    fn schedule(&mut self, time: Time, kind: u64, flow: usize) {
        self.seq += 1;
        self.heap.push(Reverse(Event {
            time,
            seq: self.seq,
            what: kind | ((flow as u64) << 8),
        }));
    }

    /// Records every data segment offered to the bottleneck from now on ([`Capture`]).
    pub fn capture_bottleneck(&mut self) {
        self.capture.get_or_insert_with(Capture::default);
    }

    /// The capture so far, if capturing.
    pub fn take_capture(&mut self) -> Option<Capture> {
        self.capture.take()
    }

    /// Simulated time reached so far.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Events processed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn is_finished(&self) -> bool {
        self.end.is_some()
    }

    /// Processes every event up to `limit` (inclusive); returns true once the run is over.
    pub fn run_until(&mut self, limit: Time) -> bool {
        while self.end.is_none() {
            let Some(mut top) = self.heap.peek_mut() else {
                // Nothing left to happen (e.g. every flow stalled past a hard end).
                self.end = Some(self.now);
                break;
            };
            let ev = top.0;
            if ev.time > limit {
                self.now = self.now.max(limit);
                return false;
            }
            self.now = ev.time;
            self.cur_seq = ev.seq;
            self.events += 1;
            let (kind, i) = (ev.what & 0xff, (ev.what >> 8) as usize);
            // A pipe's head leaves it; the event moves in place to the next head, if any
            // (one sift of the heap instead of a pop and a push). Only pipe events index
            // `flows`: for the others `i` is a background source or unused.
            let (packet, next) = match kind {
                AT_BOTTLENECK | AT_RECEIVER | AT_NIC => {
                    let f = &mut self.flows[i];
                    let pipe = match kind {
                        AT_BOTTLENECK => &mut f.to_bottleneck,
                        AT_RECEIVER => &mut f.to_receiver,
                        _ => &mut f.to_nic,
                    };
                    let (seg, next) = pipe.pop().expect("scheduled head");
                    (Packet::Data(seg), next)
                }
                AT_SENDER => {
                    let f = &mut self.flows[i];
                    let (ack, next) = f.to_sender.pop().expect("scheduled head");
                    (Packet::Ack(ack), next)
                }
                _ => (Packet::None, None),
            };
            match next {
                Some(t) => {
                    self.seq += 1;
                    top.0 = Event {
                        time: t,
                        seq: self.seq,
                        what: ev.what,
                    };
                    drop(top);
                }
                None => {
                    PeekMut::pop(top);
                }
            }
            self.dispatch(kind, i, packet);
        }
        true
    }

    /// Runs to the end and returns the trace.
    pub fn run(mut self) -> Trace {
        self.run_until(Time::MAX);
        self.finish()
    }

    fn dispatch(&mut self, kind: u64, i: usize, packet: Packet) {
        let now = self.now;
        match (kind, packet) {
            (AT_NIC, Packet::Data(seg)) => self.at_nic(i, seg),
            (BG_ARRIVAL, _) => self.background_arrival(i),
            (AT_BOTTLENECK, Packet::Data(seg)) => self.at_bottleneck(i, seg),
            (AT_RECEIVER, Packet::Data(seg)) => self.receive(i, now, seg),
            (COMPLETE, _) => self.transfer_complete(i),
            (AT_SENDER, Packet::Ack(ack)) => {
                self.sample_tcp(i);
                self.flows[i].sender.on_ack(now, &ack);
                self.transmit(i);
            }
            (RTO, _) => self.retransmission_timer(i),
            (TX_IRQ, _) => self.tx_completion(i),
            (PACE, _) => {
                let f = &mut self.flows[i];
                if f.pace_event_at == Some(now) {
                    f.pace_event_at = None;
                }
                self.transmit(i);
            }
            (DELACK, _) => {
                let f = &mut self.flows[i];
                if f.delack_event_at == Some(now) {
                    f.delack_event_at = None;
                }
                self.app_read(i, now);
                self.receiver_timer(i, now);
                self.arm_delack(i);
            }
            (START, _) => self.start_flow(i),
            (STOP, _) => {
                self.sample_tcp(i);
                let f = &mut self.flows[i];
                f.sender.stop_new_data(now);
                f.end = Some(now);
            }
            (PROFILE, _) => self.profile_step(i),
            (APP_TICK, _) => self.app_tick(i),
            (APP_READ, _) => self.app_read(i, now),
            (END_SOFT, _) => {
                if self.volume_left == 0 {
                    self.end = Some(now);
                }
            }
            (END_HARD, _) => self.end = Some(now),
            _ => unreachable!("event kind {kind} with the wrong packet"),
        }
    }

    /// A segment of flow `i` released by its gate reaches the host interface.
    fn at_nic(&mut self, i: usize, seg: Segment) {
        let bytes = self.seg_len(i, seg.seq) + self.cfg.header_bytes;
        self.hand_to_interface(i, seg, bytes);
    }

    /// A segment of flow `i` (`bytes` on the wire) goes through its host's stack, waits for
    /// the host's softirq run when transmissions are batched, and is serialised on the
    /// host's interface towards the bottleneck.
    fn hand_to_interface(&mut self, i: usize, seg: Segment, bytes: u32) {
        let t = self.now + self.noise.processing();
        let (h, nic) = (self.flows[i].src_host, self.flows[i].nic);
        let t = self.hosts[h].tx_handoff(&mut self.noise, t);
        let Offer::Departs(d) = self.links[nic].send(t, bytes, 1.0) else {
            unreachable!("host interfaces never drop")
        };
        self.hosts[h].tx_departs(&self.noise, d);
        if self.flows[i].to_bottleneck.push(d, seg) {
            self.schedule(d, AT_BOTTLENECK, i);
        }
    }

    /// A segment of flow `i` reaches the bottleneck: queued (then on to its receiver),
    /// dropped or lost.
    fn at_bottleneck(&mut self, i: usize, seg: Segment) {
        let bytes = self.seg_len(i, seg.seq) + self.cfg.header_bytes;
        let link = self.flows[i].data_link;
        let draw = if self.links[link].loss_rate() > 0.0 {
            uniform(&mut self.rng)
        } else {
            1.0
        };
        let offer = self.links[link].offer(self.now, bytes, draw);
        if let Some(c) = self.capture.as_mut() {
            c.t_ns.push(self.now);
            c.flow.push(i as u32);
            c.seq.push(seg.seq);
            c.departs_ns.push(match offer {
                Offer::Departs(d) => Some(d),
                _ => None,
            });
        }
        if let Offer::Departs(d) = offer {
            let f = &mut self.flows[i];
            let arrival = d + f.one_way_fwd;
            let t = self.hosts[f.dst_host].rx_deliver(&mut self.noise, arrival);
            if self.eager_receivers {
                self.receive(i, t, seg);
            } else if f.to_receiver.push(t, seg) {
                self.schedule(t, AT_RECEIVER, i);
            }
        }
        self.left_host(i);
    }

    fn retransmission_timer(&mut self, i: usize) {
        let now = self.now;
        self.sample_tcp(i);
        let f = &mut self.flows[i];
        if f.timer_event_at == Some(now) {
            f.timer_event_at = None;
        }
        if f.sender.timer_deadline().is_some_and(|d| d <= now) {
            f.sender.on_timer(now);
            self.transmit(i);
        } else {
            self.arm_timer(i);
        }
    }

    /// Flow `i` connects and its application starts writing.
    fn start_flow(&mut self, i: usize) {
        let now = self.now;
        let rtt = self.handshake_rtt(i);
        let f = &mut self.flows[i];
        let stop = f.cfg.duration_ns.map(|d| f.start + d);
        if let Some(w) = f.receiver.initial_window() {
            f.sender.set_peer_window(w);
        }
        f.sender.start(now, stop, Some(rtt));
        if matches!(f.cfg.limiter, Some(LimiterConfig::SleepTimer { .. })) && f.rate_bps.is_finite()
        {
            f.sender.set_written(Some(0));
            self.schedule(now, APP_TICK, i);
        }
        self.sample_tcp(i);
        self.transmit(i);
    }

    /// A volume-bound transfer of flow `i` completed: the run may end, and flows waiting
    /// for its pair may start.
    fn transfer_complete(&mut self, i: usize) {
        let now = self.now;
        self.volume_left -= 1;
        if self.volume_left == 0 && now >= self.duration_end {
            self.end = Some(now);
        }
        let pair = self.flows[i].cfg.pair;
        let pair_done = self.flows.iter().all(|f| {
            f.cfg.pair != pair
                || f.cfg.role != FlowRole::Transfer
                || f.total_segs.is_none()
                || f.completed_at.is_some()
        });
        if !pair_done {
            return;
        }
        let iv = self.cfg.measure.tcp_interval_ns;
        for k in 0..self.flows.len() {
            let f = &mut self.flows[k];
            let Some(after) = f.cfg.start_after.as_ref().filter(|a| a.pair == pair) else {
                continue;
            };
            if f.start == Time::MAX {
                f.start = now + after.delay_ns;
                f.next_tcp_sample = f.start.div_ceil(iv) * iv;
                let start = f.start;
                self.schedule(start, START, k);
            }
        }
    }

    /// The next step of flow `i`'s rate profile.
    fn profile_step(&mut self, i: usize) {
        if self.flows[i].start <= self.now {
            self.sample_tcp(i);
        }
        let f = &mut self.flows[i];
        let step = f.next_step;
        f.next_step += 1;
        let rate = f.cfg.profile[step].rate_bps;
        if let Some(next) = f.cfg.profile.get(step + 1).map(|s| s.at_ns) {
            self.schedule(next, PROFILE, i);
        }
        self.apply_rate(i, rate);
        let f = &mut self.flows[i];
        let running = f.start <= self.now && f.end.is_none();
        if matches!(f.cfg.limiter, Some(LimiterConfig::SleepTimer { .. })) && running {
            if rate.is_infinite() {
                f.sender.set_written(None);
            } else if f.sender.is_written_all() {
                // From unlimited back to a rate: the application writes from here on.
                let sent = f.sender.next_seq();
                f.written_bytes = (sent * self.cfg.mss as u64) as f64;
                f.sender.set_written(Some(sent));
                self.schedule(self.now, APP_TICK, i);
            }
        }
        if running {
            self.transmit(i);
        }
    }

    /// A tick of flow `i`'s sleep timer: the application writes rate × tick (nothing while
    /// paused) and sleeps until the next tick; the ticks stop once the limit is lifted.
    fn app_tick(&mut self, i: usize) {
        let Some(LimiterConfig::SleepTimer { tick_ns, .. }) = self.flows[i].cfg.limiter else {
            return;
        };
        let payload = payload_bytes_per_s(&self.cfg, self.flows[i].rate_bps);
        if self.flows[i].end.is_some() || payload.is_infinite() {
            return;
        }
        self.sample_tcp(i);
        let f = &mut self.flows[i];
        if !f.sender.is_paused() {
            f.written_bytes += payload * tick_ns as f64 / 1e9;
        }
        let segs = (f.written_bytes / self.cfg.mss as f64).floor() as u64;
        f.sender.set_written(Some(segs));
        self.schedule(self.now + tick_ns, APP_TICK, i);
        self.transmit(i);
    }

    fn seg_len(&self, i: usize, seq: u64) -> u32 {
        let f = &self.flows[i];
        match f.total_segs {
            Some(t) if seq + 1 == t => f.last_seg_len,
            _ => self.cfg.mss,
        }
    }

    /// Background source `j` starts an ON period at `at`.
    fn start_on_period(&mut self, j: usize, at: Time) {
        let on = -self.background[j].mean_on * (1.0 - uniform(&mut self.rng)).ln();
        let b = &mut self.background[j];
        b.on_until = at + on.round() as Time;
        b.next_ps = at.saturating_mul(1000);
        self.schedule(at, BG_ARRIVAL, j);
    }

    /// A background packet reaches the bottleneck.
    fn background_arrival(&mut self, j: usize) {
        let now = self.now;
        let draw = if self.links[0].loss_rate() > 0.0 {
            uniform(&mut self.rng)
        } else {
            1.0
        };
        let bytes = self.background[j].packet_bytes;
        let accepted = matches!(self.links[0].offer(now, bytes, draw), Offer::Departs(_));
        let b = &mut self.background[j];
        b.sent += 1;
        b.dropped += (!accepted) as u64;
        b.next_ps += b.gap_ps;
        let next = b.next_ps.div_ceil(1000);
        if next < b.on_until {
            self.schedule(next, BG_ARRIVAL, j);
        } else {
            let off = -b.mean_off * (1.0 - uniform(&mut self.rng)).ln();
            self.start_on_period(j, next + off.round() as Time);
        }
    }

    /// Segment `seg` of flow `i` arrives at its receiver at `at` (`at` may lie ahead of
    /// `now` when receivers are processed eagerly, see `eager_receivers`).
    fn receive(&mut self, i: usize, at: Time, seg: Segment) {
        self.received_segments += 1;
        // A delayed or compressed ACK and a read due before this arrival happen first, in
        // their order (receivers may run ahead of `now`).
        let r = &self.flows[i].receiver;
        let due = r.timer_deadline().filter(|&d| d <= at);
        if let Some(d) = due.filter(|&d| r.read_at().is_none_or(|t| d < t)) {
            self.receiver_timer(i, d);
        }
        self.app_read(i, at);
        if let Some(d) = self.flows[i].receiver.timer_deadline().filter(|&d| d <= at) {
            self.receiver_timer(i, d);
        }
        let got = self.flows[i].receiver.on_segment(at, &seg);
        if let Some(ack) = got.flushed {
            self.send_ack(i, at, ack);
        }
        if got.delivered.1 > got.delivered.0 {
            self.deliver(i, at, got.delivered.0, got.delivered.1);
        }
        if let Some(ack) = got.ack {
            self.send_ack(i, at, ack);
        }
        self.arm_delack(i);
        if self.flows[i].receiver.wants_read() {
            let t = self.noise.app_read_time(at, i);
            self.flows[i].receiver.arm_read(t);
        }
        self.read_event(i);
    }

    /// Flow `i`'s receiver timer (delayed or compressed ACK) fires at `t`.
    fn receiver_timer(&mut self, i: usize, t: Time) {
        if let Some(ack) = self.flows[i].receiver.on_timer(t) {
            self.send_ack(i, t, ack);
            self.read_event(i);
        }
    }

    /// An event for flow `i`'s pending read, if it must happen at its own time.
    #[inline]
    fn read_event(&mut self, i: usize) {
        let r = &mut self.flows[i].receiver;
        if r.read_needs_event(self.cfg.mss) {
            let t = r.read_at().expect("a pending read");
            self.schedule(t, APP_READ, i);
        }
    }

    /// Flow `i`'s receiving application reads, if it was to be woken by `at`.
    fn app_read(&mut self, i: usize, at: Time) {
        let r = &mut self.flows[i].receiver;
        let Some(t) = r.read_at().filter(|&t| t <= at) else {
            return;
        };
        if let Some(ack) = r.app_read(t, self.cfg.mss) {
            self.send_ack(i, t, ack);
        }
    }

    /// Segments `[from, to)` became in-order at the receiver at `at`.
    fn deliver(&mut self, i: usize, at: Time, from: u64, to: u64) {
        let mss = self.cfg.mss as u64;
        let mut bytes = (to - from) * mss;
        let f = &mut self.flows[i];
        if let Some(t) = f.total_segs {
            if to >= t {
                bytes -= mss - f.last_seg_len as u64;
            }
        }
        f.delivered_bytes += bytes;
        if self.eager_receivers {
            // Remember deliveries that may still lie ahead of the clock, so that the run
            // can end between a segment's departure and its arrival (see `finish`).
            while f
                .recent_deliveries
                .front()
                .is_some_and(|&(t, _)| t <= self.now)
            {
                f.recent_deliveries.pop_front();
            }
            f.recent_deliveries.push_back((at, bytes));
        }
        let bin = (at / self.cfg.measure.goodput_interval_ns) as usize;
        if f.goodput_bins.len() <= bin {
            f.goodput_bins.resize(bin + 1, 0);
        }
        f.goodput_bins[bin] += bytes;
        if f.total_segs.is_some_and(|t| to >= t) && f.completed_at.is_none() {
            f.completed_at = Some(at);
            f.end = Some(at);
            self.schedule(at, COMPLETE, i);
        }
    }

    fn send_ack(&mut self, i: usize, now: Time, ack: AckSegment) {
        self.acks += 1;
        if let Some(c) = self.capture.as_mut() {
            c.acks.t_ns.push(now);
            c.acks.flow.push(i as u32);
            c.acks.cum.push(ack.cum);
            c.acks.wnd.push(ack.wnd);
        }
        let depart = match self.flows[i].ack_link {
            Some(l) => {
                let ack_bytes = self.cfg.header_bytes;
                let lossy = self.links[l].loss_rate() > 0.0;
                let draw = if lossy { uniform(&mut self.rng) } else { 1.0 };
                match self.links[l].send(now, ack_bytes, draw) {
                    Offer::Departs(d) => d,
                    _ => return,
                }
            }
            None => now,
        };
        let f = &mut self.flows[i];
        let t = self.hosts[f.src_host].rx_deliver(&mut self.noise, depart + f.one_way_rev);
        if f.to_sender.push(t, ack) {
            self.schedule(t, AT_SENDER, i);
        }
    }

    /// A segment of flow `i` left its host's interface: its completion frees its place in
    /// TCP Small Queues, at once or with the host's next transmit-completion interrupt.
    /// The interrupt is an event only while one of the host's senders waits for it; else
    /// its effect is applied when a sender next looks ([`Self::settle_tx`]), with the
    /// order it would have had as an event, so that results do not depend on it.
    fn left_host(&mut self, i: usize) {
        let coalesce = self.noise.tx_coalesce;
        if !self.noise.enabled || coalesce == 0 {
            if self.flows[i].host_limited {
                self.transmit(i);
            }
            return;
        }
        let h = self.flows[i].src_host;
        self.settle_tx(h);
        self.flows[i].uncompleted += 1;
        if self.hosts[h].tx_irq.is_none() {
            self.seq += 1;
            let host = &mut self.hosts[h];
            host.tx_irq = Some(self.now + coalesce);
            host.tx_irq_seq = self.seq;
            host.tx_irq_queued = false;
            if host.senders.iter().any(|&k| self.flows[k].host_limited) {
                self.queue_tx_irq(h);
            }
        }
    }

    /// Makes host `h`'s pending transmit-completion interrupt an event (a sender waits).
    #[inline]
    fn queue_tx_irq(&mut self, h: usize) {
        let host = &mut self.hosts[h];
        if let (Some(time), false) = (host.tx_irq, host.tx_irq_queued) {
            host.tx_irq_queued = true;
            self.heap.push(Reverse(Event {
                time,
                seq: host.tx_irq_seq,
                what: TX_IRQ | ((h as u64) << 8),
            }));
        }
    }

    /// Applies host `h`'s transmit-completion interrupt if it has happened by now.
    #[inline]
    fn settle_tx(&mut self, h: usize) {
        let host = &self.hosts[h];
        if let (Some(at), false) = (host.tx_irq, host.tx_irq_queued) {
            if (at, host.tx_irq_seq) < (self.now, self.cur_seq) {
                self.complete_tx(h);
            }
        }
    }

    fn complete_tx(&mut self, h: usize) {
        self.hosts[h].tx_irq = None;
        for k in 0..self.hosts[h].senders.len() {
            let i = self.hosts[h].senders[k];
            self.flows[i].uncompleted = 0;
        }
    }

    /// Host `h`'s transmit-completion interrupt: its senders held back by TSQ resume.
    fn tx_completion(&mut self, h: usize) {
        self.complete_tx(h);
        for k in 0..self.hosts[h].senders.len() {
            let i = self.hosts[h].senders[k];
            if self.flows[i].host_limited {
                self.transmit(i);
            }
        }
    }

    /// The RTT the flow's SYN exchange measures when it starts: propagation plus the
    /// queues it would wait in now.
    fn handshake_rtt(&mut self, i: usize) -> Time {
        let now = self.now;
        let f = &self.flows[i];
        let (data, ack) = (f.data_link, f.ack_link);
        let mut rtt = f.one_way_rtt + self.links[data].queue_delay(now);
        if let Some(l) = ack {
            rtt += self.links[l].queue_delay(now);
        }
        rtt
    }

    /// Puts on the wire every segment the sender may send now (Linux `tcp_write_xmit`).
    fn transmit(&mut self, i: usize) {
        let now = self.now;
        let header = self.cfg.header_bytes;
        self.flows[i].host_limited = false;
        self.settle_tx(self.flows[i].src_host);
        let mut sent_new = 0;
        loop {
            let f = &mut self.flows[i];
            // Segments in `to_nic` and `to_bottleneck` are exactly those still in the host
            // (queued or being serialised): the hop after the host link has no delay.
            let queued = f.to_nic.len() + f.to_bottleneck.len() + f.uncompleted;
            let seg = match f.sender.poll_transmit(now, queued) {
                Poll::Send(seg) => seg,
                Poll::HostQueue => {
                    f.host_limited = true;
                    let h = f.src_host;
                    self.queue_tx_irq(h);
                    break;
                }
                Poll::Pacing(t) => {
                    if f.pace_event_at.is_none_or(|e| t < e) {
                        f.pace_event_at = Some(t);
                        self.schedule(t, PACE, i);
                    }
                    break;
                }
                Poll::CwndFull | Poll::Deferred | Poll::Idle => break,
            };
            sent_new += !seg.retransmission as u32;
            let bytes = self.seg_len(i, seg.seq) + header;
            let f = &mut self.flows[i];
            if let Some(gate) = f.gate.as_mut() {
                let t = gate.release(now, bytes);
                if f.to_nic.push(t, seg) {
                    self.schedule(t, AT_NIC, i);
                }
                continue;
            }
            self.hand_to_interface(i, seg, bytes);
        }
        self.flows[i].sender.end_transmit(now, sent_new);
        self.arm_timer(i);
    }

    #[inline]
    fn arm_timer(&mut self, i: usize) {
        let f = &mut self.flows[i];
        if let Some(d) = f.sender.timer_deadline() {
            if f.timer_event_at.is_none_or(|e| d < e) {
                f.timer_event_at = Some(d);
                self.schedule(d, RTO, i);
            }
        }
    }

    #[inline]
    fn arm_delack(&mut self, i: usize) {
        let f = &mut self.flows[i];
        if let Some(d) = f.receiver.timer_deadline() {
            if f.delack_event_at.is_none_or(|e| d < e) {
                f.delack_event_at = Some(d);
                self.schedule(d, DELACK, i);
            }
        }
    }

    /// Records the sender state at every sampling instant up to `now` (the state held since
    /// the previous event of this flow).
    fn sample_tcp(&mut self, i: usize) {
        let iv = self.cfg.measure.tcp_interval_ns;
        let f = &mut self.flows[i];
        let until = f.end.unwrap_or(Time::MAX).min(self.now);
        while f.next_tcp_sample <= until {
            let s = &f.sender;
            let rows = &mut self.tcp_rows;
            rows.t_s.push(secs(f.next_tcp_sample));
            rows.flow_id.push(i as u32);
            rows.cwnd.push(s.win.cwnd);
            rows.ssthresh
                .push((s.win.ssthresh != u32::MAX).then_some(s.win.ssthresh));
            rows.srtt_ms.push(s.srtt().map(|r| r as f64 / 1e6));
            rows.rto_ms.push(s.rto() as f64 / 1e6);
            rows.in_flight.push(s.in_flight());
            rows.retransmissions.push(s.stats.retransmissions);
            rows.ca_state.push(s.state as u8);
            rows.rwnd.push(s.peer_window());
            rows.acks_in.push(s.stats.acks_in);
            f.next_tcp_sample += iv;
        }
    }

    /// Closes the recorders and returns the trace.
    pub fn finish(mut self) -> Trace {
        let end = self.end.unwrap_or(self.now);
        self.now = end;
        for i in 0..self.flows.len() {
            if self.flows[i].start <= end {
                self.sample_tcp(i);
            }
        }
        for l in self.links.iter_mut() {
            l.finish(end);
        }
        self.undo_deliveries_after(end);
        let mut tr = Trace::default();
        self.record_flows(&mut tr, end);
        self.record_links(&mut tr, end);
        tr.tcp = std::mem::take(&mut self.tcp_rows);
        self.record_stats(&mut tr, end);
        tr
    }

    /// Deliveries processed ahead of the clock but due after the end did not happen.
    fn undo_deliveries_after(&mut self, end: Time) {
        let giv = self.cfg.measure.goodput_interval_ns;
        for f in self.flows.iter_mut() {
            while let Some(&(t, bytes)) = f.recent_deliveries.back() {
                if t <= end {
                    break;
                }
                f.recent_deliveries.pop_back();
                f.delivered_bytes -= bytes;
                f.goodput_bins[(t / giv) as usize] -= bytes;
            }
            if f.completed_at.is_some_and(|c| c > end) {
                f.completed_at = None;
                f.end = None;
            }
        }
    }

    /// One row per flow, and its goodput over the intervals it lived in.
    fn record_flows(&self, tr: &mut Trace, end: Time) {
        let giv = self.cfg.measure.goodput_interval_ns;
        for (i, f) in self.flows.iter().enumerate() {
            let fl = &mut tr.flows;
            let stop = f.end.unwrap_or(end).min(end);
            fl.flow_id.push(i as u32);
            fl.pair.push(f.cfg.pair);
            fl.stream.push(f.cfg.stream);
            let (src, dst, role) = match f.cfg.role {
                FlowRole::Transfer => ("s", "r", "transfer"),
                FlowRole::Reverse => ("r", "s", "reverse"),
            };
            fl.source.push(format!("{src}{}", f.cfg.pair));
            fl.sink.push(format!("{dst}{}", f.cfg.pair));
            fl.variant.push(f.sender.variant().to_string());
            fl.role.push(role.into());
            fl.start_s.push(secs(f.start.min(end)));
            fl.end_s.push(secs(stop));
            fl.bytes.push(f.delivered_bytes);
            fl.volume_bytes.push(f.cfg.volume_bytes);
            fl.completion_time_s
                .push(f.completed_at.map(|c| secs(c - f.start)));
            fl.segments_sent.push(f.sender.stats.segments_sent);
            fl.retransmissions.push(f.sender.stats.retransmissions);
            fl.fast_recoveries.push(f.sender.stats.fast_recoveries);
            fl.timeouts.push(f.sender.stats.timeouts);
            if f.start >= end {
                continue;
            }
            let first = (f.start / giv) as usize;
            let last = stop.div_ceil(giv).max(first as u64 + 1) as usize;
            for b in first..last {
                let bytes = f.goodput_bins.get(b).copied().unwrap_or(0);
                tr.goodput.t_s.push(secs(b as u64 * giv));
                tr.goodput.flow_id.push(i as u32);
                tr.goodput.bytes.push(bytes);
                tr.goodput
                    .goodput_mbps
                    .push(bytes as f64 * 8.0 / secs(giv) / 1e6);
            }
        }
    }

    /// The measured bottlenecks, one row per link interval.
    fn record_links(&self, tr: &mut Trace, end: Time) {
        let liv = self.cfg.measure.link_interval_ns;
        let nbins = end.div_ceil(liv).max(1) as usize;
        let mut measured = vec![(0usize, "bottleneck")];
        if let Some(r) = self.rev_link {
            measured.push((r, "reverse"));
        }
        for (li, name) in measured {
            let s = self.links[li].samples.as_ref().expect("measured link");
            let at = |v: &Vec<u64>, b: usize| v.get(b).copied().unwrap_or(0);
            for b in 0..nbins {
                let l = &mut tr.link;
                l.t_s.push(secs(b as u64 * liv));
                l.link.push(name.to_string());
                l.bytes.push(at(&s.bytes, b));
                l.packets.push(at(&s.packets, b));
                l.throughput_mbps
                    .push(at(&s.bytes, b) as f64 * 8.0 / secs(liv) / 1e6);
                l.drops.push(at(&s.drops, b));
                l.losses.push(at(&s.losses, b));
                l.queue_pkts
                    .push(s.queue_at_start.get(b).copied().unwrap_or(0));
                l.queue_max_pkts
                    .push(s.queue_max.get(b).copied().unwrap_or(0));
            }
        }
    }

    /// The run's totals.
    fn record_stats(&self, tr: &mut Trace, end: Time) {
        tr.stats.events = self.events;
        tr.stats.packets = self
            .flows
            .iter()
            .map(|f| f.sender.stats.segments_sent + f.sender.stats.retransmissions)
            .sum();
        tr.stats.acks = self.acks;
        tr.stats.end_s = secs(end);
        tr.stats.bottleneck_drops = self.links[0].total_drops;
        tr.stats.bottleneck_losses = self.links[0].total_losses;
        tr.stats.bottleneck_max_queue = self.links[0].max_backlog;
        tr.stats.background_packets = self.background.iter().map(|b| b.sent).sum();
        tr.stats.background_drops = self.background.iter().map(|b| b.dropped).sum();
        let senders = || self.flows.iter().map(|f| &f.sender.stats);
        tr.stats.loss_probes = senders().map(|s| s.loss_probes).sum();
        tr.stats.segments_lost = senders().map(|s| s.lost).sum();
        tr.stats.duplicate_segments = senders().map(|s| s.dsacks).sum();
        let mut receivers: Vec<usize> = self.flows.iter().map(|f| f.dst_host).collect();
        receivers.sort_unstable();
        receivers.dedup();
        let mut batches = Batches::default();
        for h in receivers {
            self.hosts[h].rx_batches.add_to(&mut batches);
        }
        tr.stats.rx_batch_packet_mean = batches.packet_mean();
    }

    /// Segment accounting, for conservation checks: (put on the wire, arrived at the
    /// receivers, dropped or lost at the bottleneck, still in the network).
    pub fn packet_accounting(&self) -> (u64, u64, u64, u64) {
        let sent: u64 = self
            .flows
            .iter()
            .map(|f| f.sender.stats.segments_sent + f.sender.stats.retransmissions)
            .sum();
        let dropped = self.links[0].total_drops + self.links[0].total_losses;
        let in_flight: u64 = self
            .flows
            .iter()
            .map(|f| (f.to_nic.len() + f.to_bottleneck.len() + f.to_receiver.len()) as u64)
            .sum();
        (sent, self.received_segments, dropped, in_flight)
    }
}
