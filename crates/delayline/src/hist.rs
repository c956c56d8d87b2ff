//! Lateness histogram: fixed buckets, no allocation per sample.
//!
//! 1 µs buckets up to 10 ms (the range the goal is stated in), 100 µs buckets up to 1 s,
//! one overflow bucket; count, sum and max are exact. A percentile is reported as the upper
//! edge of the bucket it falls in (never below the truth by more than 0 and never above it
//! by more than one bucket width), capped at the exact maximum.

const FINE_NS: u64 = 1_000;
const FINE_N: usize = 10_000; // 0 .. 10 ms
const COARSE_NS: u64 = 100_000;
const COARSE_N: usize = 9_900; // 10 ms .. 1 s
const FINE_END: u64 = FINE_NS * FINE_N as u64;
const COARSE_END: u64 = FINE_END + COARSE_NS * COARSE_N as u64;

#[derive(Clone, Debug)]
pub struct Histogram {
    buckets: Vec<u64>,
    pub count: u64,
    pub sum_ns: u128,
    pub max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: vec![0; FINE_N + COARSE_N + 1],
            count: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < FINE_END {
        (v / FINE_NS) as usize
    } else if v < COARSE_END {
        FINE_N + ((v - FINE_END) / COARSE_NS) as usize
    } else {
        FINE_N + COARSE_N
    }
}

/// Upper edge of bucket `i` (exclusive), ns; `u64::MAX` for the overflow bucket.
fn upper(i: usize) -> u64 {
    if i < FINE_N {
        (i as u64 + 1) * FINE_NS
    } else if i < FINE_N + COARSE_N {
        FINE_END + (i - FINE_N + 1) as u64 * COARSE_NS
    } else {
        u64::MAX
    }
}

impl Histogram {
    pub fn record(&mut self, v_ns: u64) {
        self.buckets[index(v_ns)] += 1;
        self.count += 1;
        self.sum_ns += v_ns as u128;
        self.max_ns = self.max_ns.max(v_ns);
    }

    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64
        }
    }

    /// Smallest bucket edge below which at least `q` (0..=1) of the samples lie.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return upper(i).min(self.max_ns);
            }
        }
        self.max_ns
    }
}

/// Batches of one queue counted by their size (packets per verdict): how clumped its
/// packets leave the delay line, which is how they reach the receivers' stacks.
#[derive(Clone, Debug, Default)]
pub struct Batches {
    /// `by_size[n]`: batches of `n` packets.
    by_size: Vec<u64>,
}

impl Batches {
    pub fn record(&mut self, size: usize) {
        if self.by_size.len() <= size {
            self.by_size.resize(size + 1, 0);
        }
        self.by_size[size] += 1;
    }

    pub fn count(&self) -> u64 {
        self.by_size.iter().sum()
    }

    fn packets(&self) -> u64 {
        self.by_size
            .iter()
            .enumerate()
            .map(|(n, &c)| n as u64 * c)
            .sum()
    }

    /// Packets per batch.
    pub fn mean(&self) -> f64 {
        match self.count() {
            0 => 0.0,
            c => self.packets() as f64 / c as f64,
        }
    }

    /// The size of the batch a packet left in, averaged over packets (Σn²/Σn): what a
    /// receiver sees, since a large batch carries many packets.
    pub fn packet_mean(&self) -> f64 {
        let squares: u64 = self
            .by_size
            .iter()
            .enumerate()
            .map(|(n, &c)| (n * n) as u64 * c)
            .sum();
        match self.packets() {
            0 => 0.0,
            p => squares as f64 / p as f64,
        }
    }

    /// The smallest size such that at least `q` (0..=1) of the packets left in batches of
    /// at most that size.
    pub fn packet_quantile(&self, q: f64) -> u64 {
        let total = self.packets();
        let rank = (q * total as f64).ceil() as u64;
        let mut seen = 0;
        for (n, &c) in self.by_size.iter().enumerate() {
            seen += n as u64 * c;
            if seen >= rank.max(1) {
                return n as u64;
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_zero() {
        let h = Histogram::default();
        assert_eq!(h.quantile_ns(0.99), 0);
        assert_eq!(h.mean_ns(), 0.0);
    }

    #[test]
    fn percentiles_of_a_uniform_spread() {
        let mut h = Histogram::default();
        // 1000 samples at 0.5, 1.5, ..., 999.5 µs
        for i in 0..1000u64 {
            h.record(i * 1000 + 500);
        }
        assert_eq!(h.count, 1000);
        assert!((h.mean_ns() - 500_000.0).abs() < 1e-6);
        assert_eq!(
            h.quantile_ns(0.5),
            500_000,
            "500th sample lies in [499, 500) µs"
        );
        assert_eq!(h.quantile_ns(0.99), 990_000);
        assert_eq!(h.quantile_ns(1.0), 999_500, "capped at the exact max");
        assert_eq!(h.max_ns, 999_500);
    }

    #[test]
    fn a_few_late_outliers_set_p99_but_not_p50() {
        let mut h = Histogram::default();
        for _ in 0..980 {
            h.record(20_000); // 20 µs
        }
        for _ in 0..20 {
            h.record(3_000_000); // 3 ms
        }
        assert_eq!(h.quantile_ns(0.5), 21_000);
        assert_eq!(h.quantile_ns(0.99), 3_000_000);
    }

    #[test]
    fn coarse_and_overflow_ranges() {
        let mut h = Histogram::default();
        h.record(15_050_000); // 15.05 ms -> 100 µs bucket [15.0, 15.1)
        assert_eq!(h.quantile_ns(0.5), 15_050_000);
        h.record(15_050_000);
        h.record(5_000_000_000); // 5 s: overflow
        assert_eq!(h.quantile_ns(0.5), 15_100_000);
        assert_eq!(h.quantile_ns(1.0), 5_000_000_000);
    }

    #[test]
    fn batches_are_weighed_by_the_packets_they_carry() {
        // 9 lone packets and one batch of 9: half the batches hold one packet, but half
        // the packets left in a batch of 9.
        let mut b = Batches::default();
        for _ in 0..9 {
            b.record(1);
        }
        b.record(9);
        assert_eq!(b.count(), 10);
        assert!((b.mean() - 1.8).abs() < 1e-12);
        assert!((b.packet_mean() - 5.0).abs() < 1e-12);
        assert_eq!(b.packet_quantile(0.5), 1);
        assert_eq!(b.packet_quantile(0.51), 9);
        assert_eq!(Batches::default().packet_quantile(0.5), 0);
        assert_eq!(Batches::default().packet_mean(), 0.0);
    }
}
