//! End hosts: where the noise of real machines comes from (`NoiseConfig`).
//!
//! A real host does not hand packets between TCP and its interface at exact instants:
//!
//! * its stack takes a variable time per packet (here uniform in [0, 2 × mean));
//! * its interface raises a receive interrupt only some time after the first packet of a
//!   batch (`rx-usecs`), and the stack then processes the batch one packet after another;
//!   this bunches a receiver's ACKs, and a sender's ACKs, which then releases data in
//!   bursts (ACK compression);
//! * transmitted packets are freed by a coalesced completion interrupt (`tx-usecs`), so a
//!   sender held back by TCP Small Queues resumes in steps;
//! * its timers fire on the ticks of a timer wheel whose phase is its own;
//! * its interface's clock runs a few ppm off the nominal rate, so that two interfaces of
//!   the same nominal rate drift in phase instead of locking.
//!
//! Each is a function of arrival times and a few numbers per host, so packets keep their
//! order and the event list gains one entry per transmit-completion interrupt only.

use rand_core::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::config::NoiseConfig;
use crate::time::Time;

/// A uniform draw in [0, 1) with 53 random bits.
pub fn uniform(rng: &mut Pcg64Mcg) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The noise sources of every host, with their own random stream (so that turning noise
/// on or off leaves the other draws of a run, such as random loss, unchanged).
pub struct Noise {
    pub enabled: bool,
    /// Upper bound of the uniform per-packet processing time (2 × mean).
    processing_span: Time,
    pub rx_coalesce: Time,
    pub tx_coalesce: Time,
    pub tx_batch: Time,
    clock_ppm: f64,
    rng: Pcg64Mcg,
    /// Receiving applications' wakeups, from a stream of their own (so that modelling them
    /// leaves every other draw of a run as it was).
    app_wakeup_span: Time,
    /// A measured distribution of the wakeups instead (quantiles at equal steps).
    app_wakeup_quantiles: Vec<Time>,
    app_rng: Pcg64Mcg,
    /// The receiving applications' stalls (`NoiseConfig::app_stall_rate_hz`; 0: none), one
    /// process per flow's application, drawn when it first reads.
    stall_rate_hz: f64,
    stall_lengths: Vec<Time>,
    stall_seed: u64,
    stalls: Vec<Option<Stalls>>,
}

/// A draw from a distribution given by its quantiles at equal steps of probability (at
/// least two), linear between neighbours.
fn from_quantiles(rng: &mut Pcg64Mcg, q: &[Time]) -> Time {
    let x = uniform(rng) * (q.len() - 1) as f64;
    let k = (x as usize).min(q.len() - 2);
    let (a, b) = (q[k] as f64, q[k + 1] as f64);
    (a + (b - a) * (x - k as f64)).round() as Time
}

/// One receiving application's stalls (`NoiseConfig::app_stall_rate_hz`): intervals
/// `[start, end)` one after another, each starting an exponential time (mean 1 / rate)
/// after the last one ended, lasting a length drawn from the measured quantiles. Drawn
/// lazily from a stream of their own, as far ahead as asked.
struct Stalls {
    mean_gap_ns: f64,
    lengths: Vec<Time>,
    rng: Pcg64Mcg,
    /// Stalls drawn and not yet over, oldest first.
    ahead: std::collections::VecDeque<(Time, Time)>,
    /// Where the last stall drawn ended.
    last_end: Time,
}

impl Stalls {
    fn new(rate_hz: f64, lengths: &[Time], seed: u64) -> Self {
        Self {
            mean_gap_ns: 1e9 / rate_hz,
            lengths: lengths.to_vec(),
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0x057a_11ed_u64),
            ahead: std::collections::VecDeque::new(),
            last_end: 0,
        }
    }

    /// When an application due to run at `t` runs, asked at `now` ≤ `t` (calls come with
    /// `now` non-decreasing): at the end of the stall `t` falls in, else at `t`.
    fn release(&mut self, now: Time, t: Time) -> Time {
        while self.ahead.front().is_some_and(|&(_, end)| end <= now) {
            self.ahead.pop_front();
        }
        while self.last_end <= t {
            let gap = -self.mean_gap_ns * (1.0 - uniform(&mut self.rng)).ln();
            let start = self.last_end + gap.round() as Time;
            let end = start + from_quantiles(&mut self.rng, &self.lengths).max(1);
            self.ahead.push_back((start, end));
            self.last_end = end;
        }
        match self
            .ahead
            .iter()
            .find(|&&(start, end)| start <= t && t < end)
        {
            Some(&(_, end)) => end,
            None => t,
        }
    }
}

impl Noise {
    pub fn new(cfg: &NoiseConfig, seed: u64) -> Self {
        Self {
            enabled: cfg.enabled,
            processing_span: 2 * cfg.processing_ns,
            rx_coalesce: cfg.rx_coalesce_ns,
            tx_coalesce: cfg.tx_coalesce_ns,
            tx_batch: cfg.tx_batch_ns,
            clock_ppm: cfg.clock_ppm,
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0x005e_ed0f_4057_u64),
            app_wakeup_span: 2 * cfg.app_wakeup_ns,
            app_wakeup_quantiles: cfg.app_wakeup_quantiles_ns.clone(),
            app_rng: Pcg64Mcg::seed_from_u64(seed ^ 0x0a99_4ead_u64),
            stall_rate_hz: if cfg.enabled {
                cfg.app_stall_rate_hz
            } else {
                0.0
            },
            stall_lengths: cfg.app_stall_quantiles_ns.clone(),
            stall_seed: seed,
            stalls: Vec::new(),
        }
    }

    /// Receiving applications wait to be woken (else they read at once).
    pub fn deferred_reads(&self) -> bool {
        self.enabled && (self.app_wakeup_span > 0 || !self.app_wakeup_quantiles.is_empty())
    }

    /// How long after data arrives its application reads it: uniform in [0, 2 × mean), or
    /// drawn from the measured quantiles (linear between neighbours).
    pub fn app_wakeup(&mut self) -> Time {
        if !self.deferred_reads() {
            return 0;
        }
        let q = &self.app_wakeup_quantiles;
        if q.is_empty() {
            return self.app_rng.next_u64() % self.app_wakeup_span;
        }
        from_quantiles(&mut self.app_rng, q)
    }

    /// When flow `flow`'s receiving application, woken by data that arrived at `now`,
    /// reads it: `app_wakeup` later, or at the end of its stall that time falls in.
    pub fn app_read_time(&mut self, now: Time, flow: usize) -> Time {
        let t = now + self.app_wakeup();
        if self.stall_rate_hz <= 0.0 || !self.deferred_reads() {
            return t;
        }
        if self.stalls.len() <= flow {
            self.stalls.resize_with(flow + 1, || None);
        }
        let (rate, lengths) = (self.stall_rate_hz, &self.stall_lengths);
        let seed = self.stall_seed ^ (flow as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.stalls[flow]
            .get_or_insert_with(|| Stalls::new(rate, lengths, seed))
            .release(now, t)
    }

    /// One packet's processing time in a host's stack.
    #[inline]
    pub fn processing(&mut self) -> Time {
        if !self.enabled || self.processing_span == 0 {
            return 0;
        }
        self.rng.next_u64() % self.processing_span
    }

    /// The actual rate of an interface of nominal rate `bps`.
    pub fn interface_rate(&mut self, bps: f64) -> f64 {
        if !self.enabled {
            return bps;
        }
        let u = uniform(&mut self.rng);
        bps * (1.0 + (2.0 * u - 1.0) * self.clock_ppm * 1e-6)
    }

    /// A softirq phase in [0, tx_batch) (0 without transmit batching).
    pub fn tx_phase(&mut self) -> Time {
        if !self.enabled || self.tx_batch == 0 {
            return 0;
        }
        self.rng.next_u64() % self.tx_batch
    }

    /// A timer-wheel phase in [0, tick), or none without noise.
    pub fn timer_phase(&mut self, tick: Time) -> Option<Time> {
        self.enabled.then(|| self.rng.next_u64() % tick.max(1))
    }
}

/// One host's interrupt state.
#[derive(Debug, Default)]
pub struct Host {
    /// The receive interrupt of the current batch: packets arriving before it are handed
    /// to the stack then.
    rx_irq: Time,
    /// When the stack is done with the last packet it was handed.
    rx_busy: Time,
    /// The batches its arrivals were handed over in (with noise on).
    pub rx_batches: Batches,
    /// The pending transmit-completion interrupt, if any, its event sequence number, and
    /// whether it is in the event list (only while a sender waits for it).
    pub tx_irq: Option<Time>,
    pub tx_irq_seq: u64,
    pub tx_irq_queued: bool,
    /// Flows sending from this host (their TSQ completions come with its interrupt).
    pub senders: Vec<usize>,
    /// Its timer wheel's phase (`None`: exact timers).
    pub timer_phase: Option<Time>,
    /// Its latest softirq run (transmit batching): when it began, and until when it goes
    /// on taking the work it makes itself.
    pub tx_phase: Time,
    tx_run_end: Time,
}

impl Host {
    pub fn new(timer_phase: Option<Time>, tx_phase: Time) -> Self {
        Self {
            timer_phase,
            tx_phase,
            ..Self::default()
        }
    }

    /// When a segment TCP sends at `t` reaches the interface: at the host's next softirq
    /// run when transmissions are batched (runs spaced uniformly in [0, 2 × tx_batch)),
    /// else at once. A run goes on while the work it does makes more: a segment sent
    /// while it is on (after a completion of the run's own segments let TCP Small Queues
    /// release it) leaves at once, as Linux's softirq handles what is raised during it
    /// (`handle_softirqs` restarting, then `ksoftirqd` looping while work is pending),
    /// instead of waiting for the next run. Sends must be given in order.
    #[inline]
    pub fn tx_handoff(&mut self, noise: &mut Noise, t: Time) -> Time {
        let p = noise.tx_batch;
        if !noise.enabled || p == 0 {
            return t;
        }
        if self.tx_phase <= t && t <= self.tx_run_end {
            return t;
        }
        while self.tx_phase < t {
            self.tx_phase += 1 + noise.rng.next_u64() % (2 * p);
        }
        self.tx_phase
    }

    /// A segment the run handed over leaves the interface at `departs`: the run goes on
    /// until its completion can have released its sender's next segment.
    #[inline]
    pub fn tx_departs(&mut self, noise: &Noise, departs: Time) {
        if noise.enabled && noise.tx_batch > 0 {
            self.tx_run_end = self
                .tx_run_end
                .max(departs + noise.tx_coalesce + noise.processing_span);
        }
    }

    /// When a packet reaching this host's interface at `arrival` is handed to TCP.
    /// Arrivals must be given in order.
    #[inline]
    pub fn rx_deliver(&mut self, noise: &mut Noise, arrival: Time) -> Time {
        if !noise.enabled {
            return arrival;
        }
        if arrival >= self.rx_irq {
            self.rx_irq = arrival + noise.rx_coalesce;
            self.rx_batches.close();
        }
        self.rx_batches.open += 1;
        self.rx_busy = self.rx_irq.max(self.rx_busy) + noise.processing();
        self.rx_busy
    }
}

/// Batches of packets handed to a host's stack together, counted by size (as the netns
/// emulation's delay line counts the packets of each verdict).
#[derive(Clone, Copy, Debug, Default)]
pub struct Batches {
    /// Closed batches, their packets, and the sum of their sizes squared.
    pub count: u64,
    pub packets: u64,
    pub squares: u64,
    /// Packets of the batch still open.
    pub open: u64,
}

impl Batches {
    fn close(&mut self) {
        if self.open > 0 {
            self.count += 1;
            self.packets += self.open;
            self.squares += self.open * self.open;
            self.open = 0;
        }
    }

    /// These counts with the open batch closed, added to `total`.
    pub fn add_to(mut self, total: &mut Batches) {
        self.close();
        total.count += self.count;
        total.packets += self.packets;
        total.squares += self.squares;
    }

    /// The size of the batch a packet was handed over in, averaged over packets (Σn²/Σn;
    /// 0 with none).
    pub fn packet_mean(&self) -> f64 {
        if self.packets == 0 {
            0.0
        } else {
            self.squares as f64 / self.packets as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_wakeups_follow_their_quantiles_tail_included() {
        // Quartiles 10, 20, 40, 100 µs and a maximum of 2 ms: a quarter of the draws lie
        // in the tail above 100 µs, none beyond 2 ms, the median near 40 µs.
        let cfg = NoiseConfig {
            app_wakeup_quantiles_ns: vec![10_000, 20_000, 40_000, 100_000, 2_000_000],
            ..NoiseConfig::default()
        };
        let mut n = Noise::new(&cfg, 7);
        assert!(n.deferred_reads());
        let mut d: Vec<Time> = (0..40_000).map(|_| n.app_wakeup()).collect();
        d.sort_unstable();
        assert!(d[0] >= 10_000 && d[d.len() - 1] <= 2_000_000);
        let frac = |x: Time| d.partition_point(|&v| v < x) as f64 / d.len() as f64;
        assert!((frac(40_000) - 0.5).abs() < 0.01, "{}", frac(40_000));
        assert!((frac(100_000) - 0.75).abs() < 0.01);
        // Linear within the top quarter: half of it below 1.05 ms.
        assert!((frac(1_050_000) - 0.875).abs() < 0.01);
    }

    #[test]
    fn a_stalled_application_holds_every_read_in_a_stall_to_its_end() {
        // Stalls of 1–5 ms (uniform), 4 a second: a share 4 × 3 ms / (1 + 4 × 3 ms) ≈ 1.2 %
        // of the time is stalled. Reads due every 10 µs for 100 s, woken at once (no wakeup
        // delay of their own): those in a stall read when it ends, all of them together.
        let cfg = NoiseConfig {
            app_wakeup_quantiles_ns: vec![0, 0],
            app_stall_rate_hz: 4.0,
            app_stall_quantiles_ns: vec![1_000_000, 5_000_000],
            ..NoiseConfig::default()
        };
        let mut n = Noise::new(&cfg, 3);
        let (mut held, mut ends, mut longest) = (0u64, std::collections::BTreeSet::new(), 0);
        let mut both = 0u64;
        for k in 0..10_000_000u64 {
            let now = k * 10_000;
            let t = n.app_read_time(now, 0);
            if t > now {
                held += 1;
                ends.insert(t);
                longest = longest.max(t - now);
            }
            // A second flow's application stalls on its own: rarely at the same time.
            if n.app_read_time(now, 1) > now && t > now {
                both += 1;
            }
        }
        assert!(both < held / 10, "{both} of {held} held together");
        let share = held as f64 / 1e7;
        assert!(
            (share - 0.012 / 1.012).abs() < 0.0015,
            "stalled share {share:.4}"
        );
        // About 400 stalls in 100 s, each ending once for all the reads it held.
        assert!((340..460).contains(&ends.len()), "{} stalls", ends.len());
        assert!(longest <= 5_000_000 && longest > 4_500_000, "{longest}");
        // Without a rate, nothing is held.
        let mut calm = Noise::new(
            &NoiseConfig {
                app_stall_rate_hz: 0.0,
                ..cfg
            },
            3,
        );
        assert!((0..100_000u64).all(|k| calm.app_read_time(k * 10_000, 0) == k * 10_000));
    }

    #[test]
    fn packets_of_a_batch_are_handed_over_together_after_the_coalescing_delay() {
        let cfg = NoiseConfig {
            processing_ns: 0,
            ..NoiseConfig::default()
        };
        let mut n = Noise::new(&cfg, 1);
        let mut h = Host::default();
        // Three packets 10 µs apart: the first opens a 25 µs batch that takes the next two.
        assert_eq!(h.rx_deliver(&mut n, 100_000), 125_000);
        assert_eq!(h.rx_deliver(&mut n, 110_000), 125_000);
        assert_eq!(h.rx_deliver(&mut n, 120_000), 125_000);
        // One after the interrupt opens the next batch.
        assert_eq!(h.rx_deliver(&mut n, 130_000), 155_000);
        // Batches of 3 and 1: three packets of four came in a batch of three.
        let mut total = Batches::default();
        h.rx_batches.add_to(&mut total);
        assert_eq!((total.count, total.packets), (2, 4));
        assert!((total.packet_mean() - 2.5).abs() < 1e-12);
        // Without noise, packets are handed over as they arrive.
        let mut n = Noise::new(&NoiseConfig::off(), 1);
        assert_eq!(h.rx_deliver(&mut n, 200_000), 200_000);
        assert_eq!(n.processing(), 0);
        assert_eq!(n.timer_phase(4_000_000), None);
    }

    #[test]
    fn batched_transmissions_wait_for_the_hosts_next_softirq_run() {
        let cfg = NoiseConfig {
            tx_batch_ns: 500_000,
            ..NoiseConfig::default()
        };
        let mut n = Noise::new(&cfg, 1);
        let mut h = Host::new(None, 100_000);
        assert_eq!(h.tx_handoff(&mut n, 50_000), 100_000);
        assert_eq!(h.tx_handoff(&mut n, 100_000), 100_000);
        let next = h.tx_handoff(&mut n, 100_001);
        assert!(next > 100_001 && next <= 1_100_001);
        assert_eq!(h.tx_handoff(&mut n, next), next);
        // Off by default: at once.
        let mut n = Noise::new(&NoiseConfig::default(), 1);
        assert_eq!(h.tx_handoff(&mut n, 5_000_000), 5_000_000);
    }

    #[test]
    fn a_softirq_run_takes_the_segments_its_own_completions_release() {
        // TCP Small Queues lets a flow keep 4 segments in its host at low rates: the run
        // that sends them completes them, and the segments that releases leave in the same
        // run (as Linux's softirq loops while work is pending), not 0.4 ms later.
        let cfg = NoiseConfig {
            tx_batch_ns: 400_000,
            processing_ns: 1_000,
            tx_coalesce_ns: 25_000,
            ..NoiseConfig::default()
        };
        let mut n = Noise::new(&cfg, 1);
        let mut h = Host::new(None, 100_000);
        assert_eq!(h.tx_handoff(&mut n, 10_000), 100_000);
        h.tx_departs(&n, 101_200);
        // Released by the completion (25 µs) plus processing: within the run.
        assert_eq!(h.tx_handoff(&mut n, 127_000), 127_000);
        h.tx_departs(&n, 128_200);
        assert_eq!(h.tx_handoff(&mut n, 154_000), 154_000);
        // Once the run has had nothing to do for longer, the next segment waits.
        let next = h.tx_handoff(&mut n, 300_000);
        assert!(next > 300_000, "{next}");
    }

    #[test]
    fn processing_is_uniform_with_the_configured_mean() {
        let mut n = Noise::new(&NoiseConfig::default(), 7);
        let k = 100_000;
        let mean = (0..k).map(|_| n.processing()).sum::<u64>() as f64 / k as f64;
        assert!((mean - 1000.0).abs() < 10.0, "{mean}");
        // Within a batch the stack works through packets one after another.
        let mut h = Host::default();
        let a = h.rx_deliver(&mut n, 0);
        let b = h.rx_deliver(&mut n, 1);
        assert!(a >= 25_000 && b >= a);
    }
}
