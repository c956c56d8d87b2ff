//! Which chunks of a stripe transfer are present: one bit per chunk, and
//! conversions to and from the half-open index ranges the protocol carries.
//!
//! One bit per chunk is the only per-chunk state a receiver keeps; with
//! `proto::MAX_CHUNKS` it is at most 8 MiB, whatever size a client states.

/// A set of chunk indices `0..len`.
#[derive(Default)]
pub struct ChunkSet {
    bits: Vec<u64>,
    len: u64,
    count: u64,
}

impl ChunkSet {
    /// An empty set for `len` chunks. The caller bounds `len` (MAX_CHUNKS).
    pub fn new(len: u64) -> ChunkSet {
        ChunkSet {
            bits: vec![0; len.div_ceil(64) as usize],
            len,
            count: 0,
        }
    }

    /// Number of chunks present.
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn contains(&self, i: u64) -> bool {
        i < self.len && self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Adds `i`; returns false if it was already present (or out of range).
    pub fn insert(&mut self, i: u64) -> bool {
        if i >= self.len || self.contains(i) {
            return false;
        }
        self.bits[(i / 64) as usize] |= 1 << (i % 64);
        self.count += 1;
        true
    }

    /// Present chunks as ascending half-open ranges, or None if there are
    /// more than `max` of them.
    pub fn ranges(&self, max: usize) -> Option<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.len {
            // Skip empty words quickly: a mostly empty set of millions of
            // chunks costs a word scan, not a bit scan.
            if i % 64 == 0 && self.bits[(i / 64) as usize] == 0 {
                i += 64;
                continue;
            }
            if !self.contains(i) {
                i += 1;
                continue;
            }
            let s = i;
            while i < self.len && self.contains(i) {
                i += 1;
            }
            if out.len() == max {
                return None;
            }
            out.push((s, i));
        }
        Some(out)
    }
}

/// The complement of `have` (ascending, possibly overlapping or out-of-range
/// ranges are tolerated) within `0..n`, as ascending ranges.
pub fn missing(have: &[(u64, u64)], n: u64) -> Vec<(u64, u64)> {
    let mut have: Vec<(u64, u64)> = have
        .iter()
        .map(|&(a, b)| (a.min(n), b.min(n)))
        .filter(|(a, b)| a < b)
        .collect();
    have.sort_unstable();
    let mut out = Vec::new();
    let mut next = 0;
    for (a, b) in have {
        if a > next {
            out.push((next, a));
        }
        next = next.max(b);
    }
    if next < n {
        out.push((next, n));
    }
    out
}

/// Splits ascending ranges into `parts` groups of contiguous ranges holding
/// (nearly) the same number of chunks, in order; some groups may be empty.
pub fn split(ranges: &[(u64, u64)], parts: usize) -> Vec<Vec<(u64, u64)>> {
    let total: u64 = ranges.iter().map(|(a, b)| b - a).sum();
    let per = total.div_ceil(parts.max(1) as u64).max(1);
    let mut out: Vec<Vec<(u64, u64)>> = vec![Vec::new(); parts.max(1)];
    let (mut g, mut room) = (0, per);
    for &(mut a, b) in ranges {
        while a < b {
            let take = room.min(b - a);
            out[g].push((a, a + take));
            a += take;
            room -= take;
            if room == 0 && g + 1 < out.len() {
                g += 1;
                room = per;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(ranges: &[(u64, u64)]) -> u64 {
        ranges.iter().map(|(a, b)| b - a).sum()
    }

    #[test]
    fn set_and_ranges() {
        let mut s = ChunkSet::new(200);
        assert!(s.ranges(10).unwrap().is_empty());
        for i in (5..9).chain(64..130).chain([199]) {
            assert!(s.insert(i));
        }
        assert!(!s.insert(5) && !s.insert(200));
        assert_eq!(s.count(), 4 + 66 + 1);
        assert_eq!(s.ranges(10).unwrap(), vec![(5, 9), (64, 130), (199, 200)]);
        assert!(s.ranges(2).is_none());
        assert!(s.contains(199) && !s.contains(9) && !s.contains(1000));
    }

    #[test]
    fn missing_and_split() {
        assert_eq!(missing(&[], 10), vec![(0, 10)]);
        assert_eq!(
            missing(&[(2, 4), (3, 6), (9, 99)], 10),
            vec![(0, 2), (6, 9)]
        );
        assert_eq!(missing(&[(0, 10)], 10), vec![]);
        let g = split(&[(0, 2), (6, 9), (20, 25)], 3);
        assert_eq!(
            g.iter().map(|r| total(r)).collect::<Vec<_>>(),
            vec![4, 4, 2]
        );
        assert_eq!(g[0], vec![(0, 2), (6, 8)]);
        assert_eq!(g[1], vec![(8, 9), (20, 23)]);
        let g = split(&[(0, 2)], 4);
        assert_eq!(g.len(), 4);
        assert_eq!(g.iter().map(|r| total(r)).sum::<u64>(), 2);
        assert_eq!(split(&[], 3), vec![vec![], vec![], vec![]]);
    }
}
