//! TSQ's limits in segments, kept between ACKs: a cache that answers exactly what
//! computing them would.
//!
//! The limits (`Sender::compute_tsq_limits`) follow the pacing rate, which moves with
//! every RTT sample, but change only at a few rates. Each step from the rate to a limit is
//! monotone in the rate while the other inputs (minimum RTT, the control's smallest skb,
//! pacing on or off) stay the same: the skb's segments (`tso_segs`) grow with it, and for a
//! given skb size so do the byte limit and `⌊(limit − 1) / truesize⌋` (IEEE addition,
//! subtraction, multiplication and division by a positive number round monotonically,
//! `min`, `max` and truncation are monotone). So two rates that gave the same skb size and
//! the same limits give them at every rate between them too. [`TsqCache`] keeps the lowest
//! and highest rate seen with the current limits, and answers without computing while the
//! rate stays between them.

/// The inputs of the limits other than the pacing rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TsqInputs {
    pub min_rtt: u64,
    pub min_tso_segs: u32,
    pub paced: bool,
}

/// Rates `[lo, hi]` known to give `segs` per skb and the limits `limits`, for `inputs`.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TsqCache {
    inputs: Option<TsqInputs>,
    lo: f64,
    hi: f64,
    segs: u32,
    limits: [usize; 2],
}

impl TsqCache {
    /// The limits at `rate`, if known without computing them.
    #[inline]
    pub(super) fn get(&self, inputs: TsqInputs, rate: f64) -> Option<[usize; 2]> {
        (self.inputs == Some(inputs) && self.lo <= rate && rate <= self.hi).then_some(self.limits)
    }

    /// The limits computed at `rate`: skbs of `segs` segments, limits `limits`.
    pub(super) fn put(&mut self, inputs: TsqInputs, rate: f64, segs: u32, limits: [usize; 2]) {
        if self.inputs == Some(inputs) && self.segs == segs && self.limits == limits {
            self.lo = self.lo.min(rate);
            self.hi = self.hi.max(rate);
        } else {
            *self = Self {
                inputs: Some(inputs),
                lo: rate,
                hi: rate,
                segs,
                limits,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IN: TsqInputs = TsqInputs {
        min_rtt: 20_000_000,
        min_tso_segs: 2,
        paced: false,
    };

    #[test]
    fn answers_between_rates_with_the_same_limits_only() {
        let mut c = TsqCache::default();
        assert_eq!(c.get(IN, 1e8), None);
        c.put(IN, 1e8, 45, [90, 180]);
        c.put(IN, 2e8, 45, [90, 180]);
        assert_eq!(c.get(IN, 1.5e8), Some([90, 180]));
        assert_eq!(c.get(IN, 3e8), None);
        assert_eq!(c.get(TsqInputs { paced: true, ..IN }, 1.5e8), None);
        // Other limits start a new bracket.
        c.put(IN, 3e8, 45, [135, 270]);
        assert_eq!(c.get(IN, 1.5e8), None);
        assert_eq!(c.get(IN, 3e8), Some([135, 270]));
    }
}
