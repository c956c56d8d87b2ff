//! The delay line of one queue: a FIFO of (packet id, due time). Sans-IO: times are
//! nanoseconds of CLOCK_MONOTONIC passed in by the caller.
//!
//! One fixed delay per queue and arrivals in id order make the due times non-decreasing,
//! so the packets due at any moment are a prefix of the FIFO, and one
//! `NFQNL_MSG_VERDICT_BATCH` carrying the last due id releases all of them.

use std::collections::VecDeque;

/// One held packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub id: u32,
    /// Arrival + delay, ns.
    pub due_ns: u64,
}

/// Packets of one NFQUEUE waiting for their delay to pass.
#[derive(Debug)]
pub struct DelayLine {
    pub delay_ns: u64,
    fifo: VecDeque<Held>,
    /// Most packets held at once (the kernel holds them; this is our count).
    pub max_held: usize,
}

impl DelayLine {
    pub fn new(delay_ns: u64, capacity: usize) -> Self {
        Self {
            delay_ns,
            fifo: VecDeque::with_capacity(capacity),
            max_held: 0,
        }
    }

    /// Records a packet that arrived at `arrival_ns`; returns its due time. A due time is
    /// never earlier than the previous one, even if arrival estimates step back (they
    /// come from two sources, see `docs/delayline.md`), so the FIFO stays sorted and the
    /// kernel's id order is kept.
    pub fn push(&mut self, id: u32, arrival_ns: u64) -> u64 {
        let mut due_ns = arrival_ns + self.delay_ns;
        if let Some(last) = self.fifo.back() {
            due_ns = due_ns.max(last.due_ns);
        }
        self.fifo.push_back(Held { id, due_ns });
        self.max_held = self.max_held.max(self.fifo.len());
        due_ns
    }

    /// Due time of the oldest held packet.
    pub fn next_due(&self) -> Option<u64> {
        self.fifo.front().map(|h| h.due_ns)
    }

    pub fn held(&self) -> usize {
        self.fifo.len()
    }

    /// Removes up to `max` of the packets due at `now_ns` and returns them (oldest first)
    /// through `f`; returns the id of the last one, to put in the batch verdict.
    pub fn pop_due(&mut self, now_ns: u64, max: usize, mut f: impl FnMut(Held)) -> Option<u32> {
        let mut last = None;
        let mut n = 0;
        while let Some(h) = self.fifo.front() {
            if h.due_ns > now_ns || n == max {
                break;
            }
            n += 1;
            let h = self.fifo.pop_front().unwrap();
            last = Some(h.id);
            f(h);
        }
        last
    }

    /// Forgets every held packet (the kernel drops them when the queue is unbound).
    pub fn clear(&mut self) -> usize {
        let n = self.fifo.len();
        self.fifo.clear();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn releases_exactly_the_due_prefix() {
        let mut d = DelayLine::new(20 * MS, 4);
        assert_eq!(d.push(10, 0), 20 * MS);
        d.push(11, MS);
        d.push(12, 2 * MS);
        assert_eq!(d.next_due(), Some(20 * MS));
        assert_eq!(
            d.pop_due(20 * MS - 1, 10, |_| panic!("nothing is due yet")),
            None
        );
        let mut out = vec![];
        assert_eq!(d.pop_due(21 * MS, 10, |h| out.push(h.id)), Some(11));
        assert_eq!(out, vec![10, 11]);
        assert_eq!(d.next_due(), Some(22 * MS));
        assert_eq!(d.held(), 1);
        assert_eq!(d.max_held, 3);
    }

    #[test]
    fn a_batch_is_capped() {
        let mut d = DelayLine::new(0, 4);
        for id in 1..=5 {
            d.push(id, 0);
        }
        assert_eq!(d.pop_due(0, 2, |_| {}), Some(2));
        assert_eq!(d.pop_due(0, 2, |_| {}), Some(4));
        assert_eq!(d.pop_due(0, 2, |_| {}), Some(5));
        assert_eq!(d.pop_due(0, 2, |_| {}), None);
    }

    #[test]
    fn zero_delay_is_due_on_arrival() {
        let mut d = DelayLine::new(0, 1);
        d.push(1, 5);
        assert_eq!(d.pop_due(5, 10, |_| {}), Some(1));
        assert_eq!(d.next_due(), None);
    }

    #[test]
    fn due_times_never_go_backwards() {
        let mut d = DelayLine::new(10, 4);
        d.push(1, 100);
        // an arrival estimate earlier than the previous one (kernel stamp vs read time)
        assert_eq!(d.push(2, 95), 110);
        let mut ids = vec![];
        d.pop_due(110, 10, |h| ids.push(h.id));
        assert_eq!(ids, vec![1, 2]);
    }

    #[test]
    fn ids_wrap_around() {
        let mut d = DelayLine::new(1, 2);
        d.push(u32::MAX, 0);
        d.push(0, 0);
        assert_eq!(
            d.pop_due(1, 10, |_| {}),
            Some(0),
            "the last id is the verdict id, even after wrap"
        );
    }

    #[test]
    fn clear_counts_dropped() {
        let mut d = DelayLine::new(1, 2);
        d.push(1, 0);
        d.push(2, 0);
        assert_eq!(d.clear(), 2);
        assert_eq!(d.held(), 0);
    }
}
