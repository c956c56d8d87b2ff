//! The fixed-delay FIFOs packets travel in: a link's propagation delay, or a path of pure
//! delay. Packets leave in the order they entered, so only each pipe's head needs an event.
//!
//! Most of the simulator's memory traffic is here: a pipe is written when a packet is sent
//! and read a one-way delay later, when its entries have left the caches. ACKs travel
//! packed ([`AckPipe`]): the SACK blocks and the D-SACK of the few ACKs that carry any
//! wait in a side queue, so that the common ACK moves 48 bytes, not 112.

use std::collections::VecDeque;

use crate::tcp::{AckSegment, MAX_SACK_BLOCKS};
use crate::time::Time;

/// A fixed-delay FIFO: packets arrive at the far end in the order they entered.
pub struct Pipe<T> {
    q: VecDeque<(Time, T)>,
}

impl<T: Copy> Pipe<T> {
    pub fn new() -> Self {
        Self { q: VecDeque::new() }
    }

    /// Enters `item`, arriving at `t` (no earlier than the one before); whether it is now
    /// the head (its arrival must then be scheduled).
    pub fn push(&mut self, t: Time, item: T) -> bool {
        debug_assert!(self.q.back().is_none_or(|b| b.0 <= t), "pipes are FIFO");
        self.q.push_back((t, item));
        self.q.len() == 1
    }

    /// The head leaves: it and the arrival time of the next head, if any.
    pub fn pop(&mut self) -> Option<(T, Option<Time>)> {
        let (_, item) = self.q.pop_front()?;
        Some((item, self.q.front().map(|h| h.0)))
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// The packets in flight, head first, with their arrival times.
    pub fn iter(&self) -> impl Iterator<Item = &(Time, T)> {
        self.q.iter()
    }
}

impl<T: Copy> Default for Pipe<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// An ACK in an [`AckPipe`]: its fields but the SACK blocks and the D-SACK.
#[derive(Clone, Copy)]
struct PackedAck {
    cum: u64,
    ts_echo: Time,
    ts_val: Time,
    wnd: u64,
    /// Its SACK blocks and D-SACK are next in the side queue.
    options: bool,
}

/// What the few ACKs with SACK blocks or a D-SACK carry besides.
#[derive(Clone, Copy)]
struct AckOptions {
    sack: [(u64, u64); MAX_SACK_BLOCKS],
    n_sack: u8,
    dsack: Option<u64>,
}

/// A pipe of ACKs, packed (see the module's documentation); FIFO like [`Pipe`].
pub struct AckPipe {
    q: Pipe<PackedAck>,
    options: VecDeque<AckOptions>,
}

impl AckPipe {
    pub fn new() -> Self {
        Self {
            q: Pipe::new(),
            options: VecDeque::new(),
        }
    }

    pub fn push(&mut self, t: Time, ack: AckSegment) -> bool {
        let options = ack.n_sack > 0 || ack.dsack.is_some();
        if options {
            self.options.push_back(AckOptions {
                sack: ack.sack,
                n_sack: ack.n_sack,
                dsack: ack.dsack,
            });
        }
        let packed = PackedAck {
            cum: ack.cum,
            ts_echo: ack.ts_echo,
            ts_val: ack.ts_val,
            wnd: ack.wnd,
            options,
        };
        self.q.push(t, packed)
    }

    pub fn pop(&mut self) -> Option<(AckSegment, Option<Time>)> {
        let (p, next) = self.q.pop()?;
        let mut ack = AckSegment {
            cum: p.cum,
            ts_echo: p.ts_echo,
            ts_val: p.ts_val,
            wnd: p.wnd,
            sack: [(0, 0); MAX_SACK_BLOCKS],
            n_sack: 0,
            dsack: None,
        };
        if p.options {
            let o = self
                .options
                .pop_front()
                .expect("an ACK's options follow it");
            (ack.sack, ack.n_sack, ack.dsack) = (o.sack, o.n_sack, o.dsack);
        }
        Some((ack, next))
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

impl Default for AckPipe {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(cum: u64, n_sack: u8, dsack: Option<u64>) -> AckSegment {
        let mut sack = [(0, 0); MAX_SACK_BLOCKS];
        for (k, b) in sack.iter_mut().enumerate().take(n_sack as usize) {
            *b = (cum + 10 * k as u64 + 2, cum + 10 * k as u64 + 5);
        }
        AckSegment {
            cum,
            ts_echo: cum * 3,
            ts_val: cum * 7,
            wnd: 1000 + cum,
            sack,
            n_sack,
            dsack,
        }
    }

    #[test]
    fn acks_come_out_as_they_went_in_options_and_all() {
        let mut p = AckPipe::new();
        let sent: Vec<AckSegment> = (0..50u64)
            .map(|i| ack(i, (i % 4) as u8, (i % 7 == 0).then_some(i + 100)))
            .collect();
        assert!(p.push(5, sent[0]));
        for (k, a) in sent.iter().enumerate().skip(1) {
            assert!(!p.push(5 + k as Time, *a));
        }
        for (k, a) in sent.iter().enumerate() {
            let (got, next) = p.pop().expect("an ACK");
            assert_eq!(got, *a);
            assert_eq!(next, (k + 1 < sent.len()).then_some(5 + k as Time + 1));
        }
        assert!(p.pop().is_none() && p.is_empty());
    }
}
