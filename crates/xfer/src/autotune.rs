//! `--streams auto`: the search over the number of streams, as a pure state
//! machine (samples in, a target stream count out), in the spirit of Falcon
//! (Arifuzzaman et al., IEEE TPDS 2023): a hill climb over concurrency whose
//! utility penalises loss, so that a transfer does not grab a shared
//! bottleneck by piling up streams. The driver that measures and opens or
//! parks connections is autorun.rs; this file knows nothing of sockets or
//! clocks, so the same samples always give the same decisions.

use crate::limits;
use anyhow::Result;
use serde::Serialize;

/// `--streams auto`: where the search starts and its ceiling (the number of
/// streams announced to the receiver, which refuses any stream beyond it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoOpts {
    pub start: u32,
    pub max: u32,
}

/// Utility weight of the loss rate: 1 % of segments retransmitted costs 10 %
/// of the utility, so a stream count that drives the bottleneck into loss
/// (and takes from competing transfers) scores below one that does not, even
/// at a few percent more goodput.
pub const LOSS_WEIGHT: f64 = 10.0;
/// Utility cost of each stream, as a fraction of goodput: 0.5 % a stream.
/// Small, so it only breaks near-ties toward fewer streams (16 streams cost
/// 8 %), never outweighs a real gain.
pub const STREAM_COST: f64 = 0.005;
/// A probe is kept only if its utility beats the current one by 5 %: more
/// than the tick-to-tick noise of goodput on a steady path.
pub const GAIN: f64 = 0.05;
/// Held ticks at the converged count before the search looks again (the
/// path or the competition may have changed).
pub const REPROBE_TICKS: u32 = 20;

/// A measured tick lasts 3 smoothed RTTs (the largest of the streams'), and
/// at least this long, so that it holds enough acknowledged data for a
/// steady goodput.
pub const TICK_MIN_S: f64 = 0.5;
/// The ignored tick after a change lasts 3 smoothed RTTs too, and at least
/// this long: it only has to let new connections through their first round
/// trips, and parked ones finish the chunk they were sending.
pub const SETTLE_MIN_S: f64 = 0.1;

/// What the transfer did during one tick, over all its connections.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Bytes acknowledged by the receiver.
    pub bytes: u64,
    pub secs: f64,
    /// Segments retransmitted, and segments sent (retransmissions included).
    pub retrans: u64,
    pub segs: u64,
}

/// One tick's measurement, as the trace records it.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct Measure {
    pub n: u32,
    pub goodput_bps: f64,
    pub loss: f64,
    pub utility: f64,
}

/// One measured tick, as the trace records it: the count measured and the
/// count run next (they differ where the search changed it).
#[derive(Serialize, Clone, Debug)]
pub struct AutoStep {
    /// Seconds since the data start, at the end of the tick.
    pub t: f64,
    #[serde(flatten)]
    pub m: Measure,
    pub next: u32,
}

/// The utility of `n` streams: goodput × (1 − K × loss − c × n).
pub fn measure(s: &Sample, n: u32) -> Measure {
    let goodput_bps = s.bytes as f64 * 8.0 / s.secs.max(1e-9);
    let loss = if s.segs == 0 {
        0.0
    } else {
        s.retrans as f64 / s.segs as f64
    };
    let utility = goodput_bps * (1.0 - LOSS_WEIGHT * loss - STREAM_COST * n as f64);
    Measure {
        n,
        goodput_bps,
        loss,
        utility,
    }
}

fn better(new: f64, old: f64) -> bool {
    new > old + GAIN * old.abs()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Up,
    Down,
}

/// The search. Each tick's sample goes to `observe`, which returns the
/// stream count to run next. After every change one tick is ignored (new
/// connections ramp up), then the next is measured.
#[derive(Debug)]
pub struct Search {
    max: u32,
    /// The count running now.
    n: u32,
    /// The count accepted so far, and its utility (None: not measured yet).
    base: u32,
    base_u: Option<f64>,
    step: u32,
    dir: Dir,
    /// An upward probe was accepted in this round (then no downward one).
    moved: bool,
    settle: bool,
    /// Converged: ticks held since.
    held: Option<u32>,
}

impl Search {
    pub fn new(o: AutoOpts) -> Search {
        let n = o.start.clamp(1, o.max.max(1));
        Search {
            max: o.max.max(1),
            n,
            base: n,
            base_u: None,
            step: 1,
            dir: Dir::Up,
            moved: false,
            settle: true,
            held: None,
        }
    }

    /// The next tick is ignored (the first after a change).
    pub fn settling(&self) -> bool {
        self.settle
    }

    #[cfg(test)]
    fn target(&self) -> u32 {
        self.n
    }

    /// One tick's sample; returns the measurement if the tick counted, and
    /// the count to run from now on.
    pub fn observe(&mut self, s: &Sample) -> (Option<Measure>, u32) {
        if self.settle {
            self.settle = false;
            return (None, self.n);
        }
        let m = measure(s, self.n);
        match (self.base_u, self.held) {
            (None, _) => {
                self.base_u = Some(m.utility);
                self.probe();
            }
            (Some(_), Some(h)) => {
                // Holding: keep the utility fresh, look again now and then.
                self.base_u = Some(m.utility);
                self.held = Some(h + 1);
                if h + 1 >= REPROBE_TICKS {
                    self.restart();
                }
            }
            (Some(bu), None) => {
                if better(m.utility, bu) {
                    (self.base, self.base_u) = (self.n, Some(m.utility));
                    self.moved |= self.dir == Dir::Up;
                    self.step = self.step.saturating_mul(2);
                } else if self.step > 1 {
                    self.step /= 2;
                } else {
                    self.turn();
                }
                if self.held.is_none() {
                    self.probe();
                }
            }
        }
        (Some(m), self.n)
    }

    fn restart(&mut self) {
        (self.held, self.step, self.dir, self.moved) = (None, 1, Dir::Up, false);
        self.probe();
    }

    /// The current direction gave up: try downward once (if upward gained
    /// nothing this round), else hold the accepted count.
    fn turn(&mut self) {
        if self.dir == Dir::Up && !self.moved && self.base > 1 {
            (self.dir, self.step) = (Dir::Down, 1);
        } else {
            self.hold();
        }
    }

    fn hold(&mut self) {
        self.held = Some(0);
        self.go(self.base);
    }

    /// Runs the next probe from the accepted count, or holds.
    fn probe(&mut self) {
        loop {
            let t = match self.dir {
                Dir::Up => self.base.saturating_add(self.step).min(self.max),
                Dir::Down => self.base.saturating_sub(self.step).max(1),
            };
            if t != self.base {
                self.go(t);
                return;
            }
            // Against a bound: a smaller step cannot pass it either.
            self.step = 1;
            self.turn();
            if self.held.is_some() {
                return;
            }
        }
    }

    fn go(&mut self, n: u32) {
        if n != self.n {
            self.settle = true;
        }
        self.n = n;
    }
}

/// `-P`/`--streams`: a count, or `auto` with `--start-streams` (default 1)
/// and `--max-streams` (default 16). Returns the count announced to the
/// receiver (the ceiling, for auto) and the search's bounds.
pub fn parse_streams(
    p: &str,
    start: Option<u32>,
    max: Option<u32>,
) -> Result<(u32, Option<AutoOpts>)> {
    if p != "auto" {
        let n: u64 = p.parse().map_err(|_| {
            crate::util::usage(format!("-P {p:?} must be a number of streams or \"auto\""))
        })?;
        if start.is_some() || max.is_some() {
            return Err(crate::util::usage(
                "--start-streams and --max-streams go with --streams auto",
            ));
        }
        return Ok((limits::count("-P", n, 1, limits::STREAMS_MAX)? as u32, None));
    }
    let max = limits::count(
        "--max-streams",
        max.unwrap_or(16).into(),
        1,
        limits::STREAMS_MAX,
    )? as u32;
    let ceiling = limits::Limit {
        value: max.into(),
        reason: "--max-streams",
    };
    let start = limits::count("--start-streams", start.unwrap_or(1).into(), 1, ceiling)? as u32;
    Ok((max, Some(AutoOpts { start, max })))
}

/// What `--streams auto` does not do (yet): follow a rate (the search is
/// for the fastest count), or pull.
pub fn refuse(auto: Option<AutoOpts>, paced: bool, pull: bool) -> Result<()> {
    let why = match (auto, paced, pull) {
        (None, _, _) => return Ok(()),
        (_, true, _) => "--streams auto searches for the fastest stream count; it does not go with --rate, --deadline or --rate-profile",
        (_, _, true) => "--streams auto is for sending (push); a pull takes a number of streams",
        _ => return Ok(()),
    };
    Err(crate::util::usage(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the search against a model path: goodput(n) and loss(n), one
    /// tick a second; returns the counts run at each tick.
    fn run(o: AutoOpts, ticks: usize, path: impl Fn(u32) -> (f64, f64)) -> Vec<u32> {
        let mut s = Search::new(o);
        let mut seen = Vec::new();
        for _ in 0..ticks {
            let n = s.target();
            seen.push(n);
            let (gbps, loss) = path(n);
            let segs = 100_000;
            let sample = Sample {
                bytes: (gbps * 1e9 / 8.0) as u64,
                secs: 1.0,
                retrans: (loss * segs as f64) as u64,
                segs,
            };
            s.observe(&sample);
        }
        seen
    }

    fn auto(start: u32, max: u32) -> AutoOpts {
        AutoOpts { start, max }
    }

    #[test]
    fn saturating_goodput_with_loss_past_six_converges_to_four() {
        let path = |n: u32| {
            let g = (n.min(4) as f64) * 1.0;
            let loss = if n > 6 { 0.02 } else { 0.0 };
            (g, loss)
        };
        let seen = run(auto(1, 16), 40, path);
        // Held at 4, apart from the re-probe (5, then 3) after REPROBE_TICKS.
        assert_eq!(*seen.last().unwrap(), 4, "{seen:?}");
        let at4 = seen[12..].iter().filter(|&&n| n == 4).count();
        assert!(at4 >= seen.len() - 12 - 4, "{seen:?}");
        assert!(seen[12..].iter().all(|&n| (3..=5).contains(&n)), "{seen:?}");
        assert!(seen.iter().all(|&n| n <= 16));
        // The climb doubles: 1, 2, 4, 8 before it backs off.
        let mut firsts: Vec<u32> = seen.clone();
        firsts.dedup();
        assert_eq!(&firsts[..4], &[1, 2, 4, 8], "{seen:?}");
    }

    #[test]
    fn flat_goodput_stays_at_the_start() {
        for start in [1, 4] {
            let seen = run(auto(start, 16), 12, |_| (1.0, 0.0));
            assert_eq!(*seen.last().unwrap(), start, "{seen:?}");
        }
    }

    #[test]
    fn loss_from_too_many_streams_brings_the_count_down() {
        // Starting at 8, where each stream past 4 adds 1 % of loss: it must
        // step down.
        let path = |n: u32| (n.min(3) as f64, 0.01 * n.saturating_sub(4) as f64);
        let seen = run(auto(8, 16), 30, path);
        assert!(*seen.last().unwrap() <= 4, "{seen:?}");
    }

    #[test]
    fn never_exceeds_the_ceiling_and_is_deterministic() {
        let path = |n: u32| (n as f64, 0.0);
        let a = run(auto(1, 6), 40, path);
        assert!(a.iter().all(|&n| (1..=6).contains(&n)), "{a:?}");
        assert_eq!(*a.last().unwrap(), 6);
        assert_eq!(a, run(auto(1, 6), 40, path));
    }

    #[test]
    fn held_count_is_probed_again() {
        let seen = run(auto(2, 16), 2 + 2 * REPROBE_TICKS as usize, |_| (1.0, 0.0));
        assert!(seen.iter().filter(|&&n| n == 3).count() >= 2, "{seen:?}");
    }

    #[test]
    fn utility_charges_loss_and_streams() {
        let s = Sample {
            bytes: 125_000_000,
            secs: 1.0,
            retrans: 1,
            segs: 100,
        };
        let m = measure(&s, 2);
        assert!((m.goodput_bps - 1e9).abs() < 1.0);
        assert!((m.utility - 1e9 * (1.0 - 0.1 - 0.01)).abs() < 1.0);
    }

    #[test]
    fn streams_argument() {
        assert_eq!(parse_streams("8", None, None).unwrap(), (8, None));
        assert_eq!(
            parse_streams("auto", None, None).unwrap(),
            (16, Some(auto(1, 16)))
        );
        assert_eq!(
            parse_streams("auto", Some(4), Some(8)).unwrap(),
            (8, Some(auto(4, 8)))
        );
        assert!(parse_streams("auto", Some(9), Some(8)).is_err());
        assert!(parse_streams("4", Some(2), None).is_err());
        assert!(parse_streams("x", None, None).is_err());
    }
}
