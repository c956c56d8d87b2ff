//! A link: a drop-tail FIFO queue in front of a serialiser of fixed capacity.
//!
//! The queue needs no events of its own. Packets leave a FIFO server of known rate in
//! order, so a packet's departure time is known the moment it is accepted; the backlog at
//! any later instant is the number of accepted packets whose service has not started yet.
//! The link keeps only those start times (a sorted ring) and answers "how full am I now?"
//! by popping the ones that have started. This keeps the per-packet path short (htsim's
//! habit) and the event list small.

use std::collections::VecDeque;

use crate::gate::Gate;
use crate::time::Time;

/// Outcome of offering a packet to a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Accepted; the last bit leaves the link at this time.
    Departs(Time),
    /// Dropped because `limit` packets were already waiting (drop-tail).
    QueueFull,
    /// Lost at random (Bernoulli loss on the link).
    Lost,
}

/// Per-interval counters of a measured link (the GtrcNET-like `link` table).
#[derive(Clone, Debug, Default)]
pub struct LinkSamples {
    pub interval: Time,
    /// IP bytes whose transmission ends in each interval.
    pub bytes: Vec<u64>,
    pub packets: Vec<u64>,
    /// Packets dropped by the full queue, by interval of the drop.
    pub drops: Vec<u64>,
    /// Packets lost at random, by interval.
    pub losses: Vec<u64>,
    /// Packets waiting at the start of each interval.
    pub queue_at_start: Vec<u32>,
    /// Largest number of packets waiting during each interval.
    pub queue_max: Vec<u32>,
    next_boundary: Time,
}

impl LinkSamples {
    fn new(interval: Time) -> Self {
        Self {
            interval,
            ..Default::default()
        }
    }

    #[inline]
    fn slot<T: Default + Clone>(v: &mut Vec<T>, i: usize) -> &mut T {
        if v.len() <= i {
            v.resize(i + 1, T::default());
        }
        &mut v[i]
    }
}

#[derive(Clone, Debug)]
pub struct Link {
    /// Femtoseconds of wire time per byte (8e15 / rate in bit/s), so that serialisation
    /// times are integer arithmetic with sub-picosecond rounding.
    fs_per_byte: u64,
    /// Extra wire bytes per packet beyond the IP packet (Ethernet framing).
    frame_overhead: u32,
    /// Packets allowed to wait (`None`: unbounded, e.g. a host's own interface).
    limit: Option<u32>,
    loss_rate: f64,
    /// When the serialiser becomes free, in picoseconds (kept finer than ns so rounding
    /// never accumulates into a rate error).
    busy_until_ps: u64,
    /// Service start times (ps) of the packets still waiting, oldest first.
    waiting: VecDeque<u64>,
    /// Optional limiter in front of the serialiser (a shaped link).
    shaper: Option<Gate>,
    pub samples: Option<LinkSamples>,
    pub total_drops: u64,
    pub total_losses: u64,
    pub total_bytes: u64,
    pub max_backlog: u32,
}

impl Link {
    pub fn new(rate_bps: f64, frame_overhead: u32, limit: Option<u32>, loss_rate: f64) -> Self {
        Self {
            fs_per_byte: (8e15 / rate_bps).round() as u64,
            frame_overhead,
            limit,
            loss_rate,
            busy_until_ps: 0,
            waiting: VecDeque::new(),
            shaper: None,
            samples: None,
            total_drops: 0,
            total_losses: 0,
            total_bytes: 0,
            max_backlog: 0,
        }
    }

    /// Puts a limiter in front of the serialiser.
    pub fn shaped(mut self, gate: Gate) -> Self {
        self.shaper = Some(gate);
        self
    }

    /// Record per-interval counters for this link.
    pub fn measure(mut self, interval: Time) -> Self {
        self.samples = Some(LinkSamples::new(interval));
        self
    }

    pub fn loss_rate(&self) -> f64 {
        self.loss_rate
    }

    /// How long a packet offered at `now` would wait before its serialisation starts.
    pub fn queue_delay(&self, now: Time) -> Time {
        (self.busy_until_ps / 1000).saturating_sub(now)
    }

    /// Packets waiting at `now` (not counting the one being serialised).
    pub fn backlog(&mut self, now: Time) -> u32 {
        self.advance(now);
        self.waiting.len() as u32
    }

    /// Brings the queue (and its samples) forward to `now`.
    fn advance(&mut self, now: Time) {
        let now_ps = now.saturating_mul(1000);
        if let Some(s) = self.samples.as_mut() {
            // Open every interval that began by `now`: afterwards the current interval is
            // the last element of the per-interval vectors (no division on the hot path).
            while s.next_boundary <= now {
                let b_ps = s.next_boundary.saturating_mul(1000);
                let started = self.waiting.partition_point(|&st| st <= b_ps);
                let q = (self.waiting.len() - started) as u32;
                s.queue_at_start.push(q);
                s.queue_max.push(q);
                s.drops.push(0);
                s.losses.push(0);
                s.next_boundary += s.interval;
            }
        }
        while let Some(&st) = self.waiting.front() {
            if st <= now_ps {
                self.waiting.pop_front();
            } else {
                break;
            }
        }
    }

    /// `offer`, with a host's own interface (nothing to count, nothing to drop) handled
    /// inline in the caller: no call for most packets of a run.
    #[inline]
    pub fn send(&mut self, now: Time, ip_bytes: u32, uniform: f64) -> Offer {
        if self.is_plain() {
            return self.pass(now, ip_bytes);
        }
        self.offer(now, ip_bytes, uniform)
    }

    /// A host's own interface: no queue limit, no samples, no loss.
    #[inline]
    fn is_plain(&self) -> bool {
        self.limit.is_none() && self.samples.is_none() && self.loss_rate == 0.0
    }

    /// A packet on a plain link: serialised after the previous one.
    #[inline]
    fn pass(&mut self, now: Time, ip_bytes: u32) -> Offer {
        let now_ps = now.saturating_mul(1000);
        let start = self.busy_until_ps.max(now_ps);
        let wire = (ip_bytes + self.frame_overhead) as u64;
        self.busy_until_ps = start + (wire * self.fs_per_byte + 500) / 1000;
        self.total_bytes += ip_bytes as u64;
        Offer::Departs(self.busy_until_ps.div_ceil(1000))
    }

    /// Offers an IP packet of `ip_bytes` at `now`; `uniform` is a draw in [0, 1) used for
    /// random loss (pass anything when the link has none). Out of line (see `send`).
    #[inline(never)]
    pub fn offer(&mut self, now: Time, ip_bytes: u32, uniform: f64) -> Offer {
        if self.is_plain() {
            return self.pass(now, ip_bytes);
        }
        self.advance(now);
        if self.loss_rate > 0.0 && uniform < self.loss_rate {
            self.total_losses += 1;
            if let Some(s) = self.samples.as_mut() {
                *s.losses.last_mut().expect("advanced") += 1;
            }
            return Offer::Lost;
        }
        let now_ps = now.saturating_mul(1000);
        let mut start = self.busy_until_ps.max(now_ps);
        // The shaper's state before this packet: a packet the queue drops never reaches the
        // shaper's dequeue, so it must not spend its tokens (HTB over pfifo: a full pfifo
        // drops at enqueue, HTB charges at dequeue).
        let before = self.shaper.clone();
        if let Some(g) = self.shaper.as_mut() {
            // Packets leave in order: the shaper sees them when the line could serve them.
            let release = g.release(start.div_ceil(1000), ip_bytes);
            start = start.max(release.saturating_mul(1000));
        }
        if start > now_ps {
            if let Some(limit) = self.limit {
                if self.waiting.len() as u32 >= limit {
                    self.shaper = before;
                    self.total_drops += 1;
                    if let Some(s) = self.samples.as_mut() {
                        *s.drops.last_mut().expect("advanced") += 1;
                    }
                    return Offer::QueueFull;
                }
            }
            self.waiting.push_back(start);
        }
        let wire = (ip_bytes + self.frame_overhead) as u64;
        self.busy_until_ps = start + (wire * self.fs_per_byte + 500) / 1000;
        let depart = self.busy_until_ps.div_ceil(1000);
        self.total_bytes += ip_bytes as u64;
        let backlog = self.waiting.len() as u32;
        self.max_backlog = self.max_backlog.max(backlog);
        if let Some(s) = self.samples.as_mut() {
            let m = s.queue_max.last_mut().expect("advanced");
            *m = (*m).max(backlog);
            let d = if depart < s.next_boundary {
                s.queue_max.len() - 1
            } else {
                (depart / s.interval) as usize
            };
            *LinkSamples::slot(&mut s.bytes, d) += ip_bytes as u64;
            *LinkSamples::slot(&mut s.packets, d) += 1;
        }
        Offer::Departs(depart)
    }

    /// Closes the samples at the end of the run.
    pub fn finish(&mut self, end: Time) {
        self.advance(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{NS_PER_MS, NS_PER_S};

    #[test]
    fn serialises_at_the_link_rate() {
        // 1 Gbit/s, 1500-byte packets + 38 bytes framing = 12.304 µs each.
        let mut l = Link::new(1e9, 38, None, 0.0);
        assert_eq!(l.offer(0, 1500, 0.5), Offer::Departs(12_304));
        assert_eq!(l.offer(0, 1500, 0.5), Offer::Departs(24_608));
        // Idle link: a later packet starts when it arrives.
        assert_eq!(l.offer(100_000, 1500, 0.5), Offer::Departs(112_304));
    }

    #[test]
    fn drop_tail_counts_waiting_packets_only() {
        let mut l = Link::new(1e9, 38, Some(2), 0.0);
        // One in service, two waiting, the fourth is dropped.
        assert!(matches!(l.offer(0, 1500, 0.5), Offer::Departs(_)));
        assert!(matches!(l.offer(0, 1500, 0.5), Offer::Departs(_)));
        assert!(matches!(l.offer(0, 1500, 0.5), Offer::Departs(_)));
        assert_eq!(l.offer(0, 1500, 0.5), Offer::QueueFull);
        assert_eq!(l.backlog(0), 2);
        // After the first packet leaves, one more fits.
        assert_eq!(l.backlog(12_304), 1);
        assert!(matches!(l.offer(12_304, 1500, 0.5), Offer::Departs(49_216)));
        assert_eq!(l.total_drops, 1);
    }

    #[test]
    fn samples_queue_and_bytes_per_interval() {
        let mut l = Link::new(1e9, 38, Some(100), 0.0).measure(20_000);
        for _ in 0..4 {
            l.offer(0, 1500, 0.5);
        }
        l.finish(100_000);
        let s = l.samples.unwrap();
        assert_eq!(s.queue_at_start[0], 0);
        assert_eq!(s.queue_max[0], 3);
        // Departures at 12.3, 24.6, 36.9 and 49.2 µs.
        assert_eq!(&s.packets[..3], &[1, 2, 1]);
        assert_eq!(s.queue_at_start[1], 2);
    }

    #[test]
    fn a_shaped_queue_that_drops_still_delivers_the_shapers_rate() {
        // A token bucket of 100 Mbit/s (1 ms ticks, 10-frame burst) on a 10 Gbit/s line over a
        // 20-packet queue, offered 200 Mbit/s for 1 s: half the packets are dropped, and
        // those must not spend tokens. 1500-byte packets + 14 bytes the shaper counts.
        let mut l = Link::new(10e9, 38, Some(20), 0.0).shaped(Gate::token_bucket(
            100e6,
            10.0 * 1514.0,
            NS_PER_MS,
        ));
        let gap = 1500 * 8 * 1_000_000_000 / 200_000_000; // ns between offers at 200 Mbit/s
        let (mut delivered, mut dropped, mut last) = (0u64, 0u64, 0);
        for k in 0..(NS_PER_S / gap) {
            match l.offer(k * gap, 1500, 0.5) {
                Offer::Departs(d) => {
                    delivered += 1;
                    last = d;
                }
                _ => dropped += 1,
            }
        }
        // 100 Mbit/s of 1514-byte frames is 8 256 packets per second.
        let rate = delivered as f64 / (last as f64 / 1e9);
        assert!(
            (rate / 8256.0 - 1.0).abs() < 0.01,
            "{delivered} delivered in {last} ns: {rate:.0}/s"
        );
        assert!(dropped > 8000, "{dropped} dropped");
    }

    #[test]
    fn random_loss_uses_the_draw() {
        let mut l = Link::new(1e9, 38, None, 0.01);
        assert_eq!(l.offer(0, 1500, 0.005), Offer::Lost);
        assert!(matches!(l.offer(0, 1500, 0.5), Offer::Departs(_)));
        assert_eq!(l.total_losses, 1);
    }
}
