//! A rate plan (`--rate-profile`): the goodput a transfer may use over time,
//! piecewise constant, as offsets from its data start. Seed 001's single-rate
//! ("spaghetti") allocation is one step, its multi-rate allocation a step
//! function, and a preempted transfer pauses (rate 0). `--rate R` is the plan
//! `0s:R`. This module parses and checks plans, and splits what the receiver
//! counted over the steps (the achieved goodput per step).

use crate::inputfile::read_small;
use crate::limits::TRANSFER_TIME_MAX_S;
use crate::limits::{rate_value, PROFILE_FILE_MAX_BYTES, RATE_MAX_BPS, RATE_MIN_BPS};
use crate::util::{parse_rate, usage};
use anyhow::Result;
use serde::Deserialize;

/// Most steps a plan may have (far more than any schedule needs; it bounds
/// the work of a mistyped file).
const MAX_STEPS: usize = 100_000;

/// From `at` seconds after the data start on, the goodput is `rate_bps`
/// (bit/s, all streams together; 0 = paused).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub at: f64,
    pub rate_bps: u64,
}

/// Steps at strictly increasing offsets, the first at 0, at least one rate
/// above 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    steps: Vec<Step>,
}

/// A step of `@file.json`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileStep {
    t: f64,
    rate_bps: f64,
}

impl Profile {
    /// The one-step plan of `--rate` (or of the rate `--deadline` gives).
    pub fn constant(rate_bps: u64) -> Profile {
        Profile {
            steps: vec![Step { at: 0.0, rate_bps }],
        }
    }

    /// `0s:300M,12.5s:600M,40s:0`, or `@FILE` holding a JSON list of
    /// `{"t": seconds, "rate_bps": bit/s}`. Errors are usage errors (one line).
    pub fn parse(spec: &str) -> Result<Profile> {
        let spec = spec.trim();
        let r = match spec.strip_prefix('@') {
            Some(path) => Self::from_file(path),
            None => Self::from_inline(spec),
        };
        r.map_err(|e| usage(format!("--rate-profile: {e}")))
    }

    fn from_inline(spec: &str) -> std::result::Result<Profile, String> {
        if spec.is_empty() {
            return Err("empty (example: 0s:300M,12.5s:600M,40s:0)".into());
        }
        let mut steps = Vec::new();
        for item in spec.split(',') {
            let item = item.trim();
            let Some((t, r)) = item.split_once(':') else {
                return Err(format!("{item:?} is not TIME:RATE (example: 12.5s:600M)"));
            };
            let at = parse_offset(t).map_err(|e| format!("in {item:?}: {e}"))?;
            let rate_bps = parse_step_rate(r).map_err(|e| format!("in {item:?}: {e}"))?;
            steps.push(Step { at, rate_bps });
            if steps.len() > MAX_STEPS {
                return Err(format!("more than {MAX_STEPS} steps"));
            }
        }
        Self::from_steps(steps)
    }

    fn from_file(path: &str) -> std::result::Result<Profile, String> {
        let text = read_small(
            "the plan",
            std::path::Path::new(path),
            PROFILE_FILE_MAX_BYTES,
        )
        .map_err(|e| format!("{e:#}"))?;
        let rows: Vec<FileStep> = serde_json::from_slice(&text).map_err(|e| {
            format!("{path:?} is not a JSON list of {{\"t\": s, \"rate_bps\": x}}: {e}")
        })?;
        if rows.len() > MAX_STEPS {
            return Err(format!("{path:?} has more than {MAX_STEPS} steps"));
        }
        let mut steps = Vec::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate() {
            let rate_ok = r.rate_bps == 0.0
                || (r.rate_bps >= RATE_MIN_BPS.value as f64
                    && r.rate_bps <= RATE_MAX_BPS.value as f64);
            if !rate_ok {
                return Err(format!(
                    "{path:?} step {i}: rate_bps {} must be 0 (pause) or between 1000 and {} \
                     ({})",
                    r.rate_bps, RATE_MAX_BPS.value, RATE_MAX_BPS.reason
                ));
            }
            steps.push(Step {
                at: r.t,
                rate_bps: r.rate_bps.round() as u64,
            });
        }
        Self::from_steps(steps).map_err(|e| format!("{path:?}: {e}"))
    }

    /// Checks what every plan must satisfy, whatever its notation.
    fn from_steps(steps: Vec<Step>) -> std::result::Result<Profile, String> {
        let Some(first) = steps.first() else {
            return Err("no steps".into());
        };
        for s in &steps {
            let max = TRANSFER_TIME_MAX_S;
            if !s.at.is_finite() || s.at < 0.0 || s.at > max.value {
                return Err(format!(
                    "time {} s is negative or out of range (at most {} s: {})",
                    s.at, max.value, max.reason
                ));
            }
        }
        if first.at != 0.0 {
            return Err(format!(
                "the first step must be at 0s (the data start), not {} s: start paused with \
                 0s:0, or later with --start-at",
                first.at
            ));
        }
        for w in steps.windows(2) {
            if w[1].at <= w[0].at {
                return Err(format!(
                    "times must increase: {} s comes after {} s",
                    w[1].at, w[0].at
                ));
            }
        }
        if steps.iter().all(|s| s.rate_bps == 0) {
            return Err("every rate is 0: nothing would ever be sent".into());
        }
        Ok(Profile { steps })
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Where step `k` ends (the next step's offset); None for the last.
    pub fn end_of(&self, k: usize) -> Option<f64> {
        self.steps.get(k + 1).map(|s| s.at)
    }

    /// The highest rate of the plan.
    pub fn max_rate(&self) -> u64 {
        self.steps.iter().map(|s| s.rate_bps).max().unwrap_or(0)
    }

    /// The first rate above 0 at step `k` or later, else the last one before
    /// it: what the socket is set up for while the plan pauses.
    pub fn nonzero_near(&self, k: usize) -> u64 {
        let later = self.steps[k..].iter().find(|s| s.rate_bps > 0);
        let earlier = self.steps[..k].iter().rev().find(|s| s.rate_bps > 0);
        later.or(earlier).map(|s| s.rate_bps).unwrap_or(0)
    }

    /// Bytes received during each step. `spans` are (from, to, bytes) in
    /// seconds of data time (the sender's data start = 0); a span's bytes are
    /// taken as spread evenly over it, and split between the steps it
    /// overlaps. Bytes before 0 (none are sent then) count for step 0.
    pub fn bytes_per_step(&self, spans: &[(f64, f64, u64)]) -> Vec<f64> {
        let mut out = vec![0.0; self.steps.len()];
        for &(a, b, bytes) in spans {
            if bytes == 0 {
                continue;
            }
            if b <= a {
                out[self.step_at(b)] += bytes as f64;
                continue;
            }
            for (k, v) in out.iter_mut().enumerate() {
                let lo = if k == 0 {
                    f64::NEG_INFINITY
                } else {
                    self.steps[k].at
                };
                let hi = self.end_of(k).unwrap_or(f64::INFINITY);
                let overlap = b.min(hi) - a.max(lo);
                if overlap > 0.0 {
                    *v += bytes as f64 * overlap / (b - a);
                }
            }
        }
        out
    }

    /// The step in force at data time `t`.
    pub fn step_at(&self, t: f64) -> usize {
        self.steps
            .iter()
            .rposition(|s| s.at <= t)
            .unwrap_or_default()
    }
}

/// A step's offset: `0`, `12.5s`, `500ms`, `2m`, `1h` (a bare number is seconds).
fn parse_offset(s: &str) -> std::result::Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(num_end);
    let mult = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("unknown time unit {unit:?} in {s:?} (s, ms, m, h)")),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad time {s:?} (examples: 0s, 12.5s, 500ms, 2m)"))?;
    Ok(v * mult)
}

/// A step's rate: `0` (pause) or a rate as `--rate` takes it (`600M`, `2.5G`).
fn parse_step_rate(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(num_end);
    if num.parse::<f64>().is_ok_and(|v| v == 0.0) {
        // Still refuse a unit --rate would not take ("0Q").
        return parse_rate(&format!("1000{unit}"))
            .map(|_| 0)
            .map_err(|_| format!("unknown rate unit in {t:?} (bit/s: k, M, G)"));
    }
    let v = parse_rate(t).map_err(|e| format!("{e}"))?;
    rate_value("rate", t, v).map_err(|e| format!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(spec: &str) -> String {
        let e = Profile::parse(spec).unwrap_err();
        assert!(e.downcast_ref::<crate::util::UsageError>().is_some());
        let m = e.to_string();
        assert!(!m.contains('\n'), "one line: {m}");
        m
    }

    #[test]
    fn inline_plans() {
        let p = Profile::parse("0s:300M, 12.5s:600M,40s:0").unwrap();
        let s = p.steps();
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].at, s[0].rate_bps), (0.0, 300_000_000));
        assert_eq!((s[1].at, s[1].rate_bps), (12.5, 600_000_000));
        assert_eq!((s[2].at, s[2].rate_bps), (40.0, 0));
        assert_eq!(p.end_of(1), Some(40.0));
        assert_eq!(p.end_of(2), None);
        assert_eq!(p.max_rate(), 600_000_000);
        let p = Profile::parse("0:0,500ms:2.5G,2m:10k").unwrap();
        assert_eq!(p.steps()[1].at, 0.5);
        assert_eq!(p.steps()[2].at, 120.0);
        assert_eq!(p.steps()[2].rate_bps, 10_000);
        assert_eq!(p.nonzero_near(0), 2_500_000_000);
        assert_eq!(p, Profile::parse(" 0s:0,0.5s:2500M,120s:10000 ").unwrap());
    }

    #[test]
    fn bad_plans_are_usage_errors() {
        assert!(err("").contains("empty"));
        assert!(err("0s:1M,5s:2M,5s:3M").contains("times must increase"));
        assert!(err("0s:1M,5s:2M,3s:3M").contains("times must increase"));
        assert!(err("0s:1M,-1s:2M").contains("negative"));
        assert!(err("-1s:1M").contains("negative"));
        assert!(err("0s:1M,3000000s:0").contains("out of range (at most 2000000 s"));
        assert!(err("0s:1Q").contains("invalid rate"));
        assert!(err("0s:0Q").contains("unknown rate unit"));
        assert!(err("0s:1M,3x:2M").contains("unknown time unit"));
        assert!(err("1s:1M").contains("first step must be at 0s"));
        assert!(err("0s:0,1s:0").contains("every rate is 0"));
        assert!(err("0s:1M,,2s:3M").contains("not TIME:RATE"));
        assert!(err("0s").contains("not TIME:RATE"));
        assert!(err("0s:12").contains("rate 12 is out of range: at least 1 kbit/s"));
        assert!(err("0s:1M,1s:20T").contains("rate 20T is out of range: at most 10 Tbit/s"));
        assert!(err("@/dev/zero").contains("/dev/zero is a character device"));
        assert!(err("@/nonexistent/plan.json").contains("cannot read"));
    }

    #[test]
    fn file_plans() {
        let dir = std::env::temp_dir().join(format!("xfer-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p.json");
        std::fs::write(
            &f,
            r#"[{"t": 0, "rate_bps": 4e7}, {"t": 1.5, "rate_bps": 0}]"#,
        )
        .unwrap();
        let p = Profile::parse(&format!("@{}", f.display())).unwrap();
        assert_eq!(p, Profile::parse("0s:40M,1.5s:0").unwrap());
        for bad in [
            r#"[]"#,
            r#"[{"t": 0, "rate": 1e6}]"#,
            r#"[{"t": 0, "rate_bps": 10}]"#,
            r#"[{"t": 0, "rate_bps": 1e14}]"#,
            r#"[{"t": 0, "rate_bps": 1e6}, {"t": 0, "rate_bps": 2e6}]"#,
            r#"{"t": 0}"#,
        ] {
            std::fs::write(&f, bad).unwrap();
            let e = err(&format!("@{}", f.display()));
            assert!(e.contains("p.json"), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bytes_are_split_over_steps_by_overlap() {
        let p = Profile::parse("0s:1M,1s:2M,2s:0").unwrap();
        // (0.5, 1.5] straddles the first change: half each way.
        let b = p.bytes_per_step(&[(0.5, 1.5, 100), (-0.2, 0.5, 70), (1.5, 3.0, 30)]);
        assert_eq!(b.len(), 3);
        assert!((b[0] - 120.0).abs() < 1e-9, "{b:?}");
        assert!((b[1] - 60.0).abs() < 1e-9, "{b:?}");
        assert!((b[2] - 20.0).abs() < 1e-9, "{b:?}");
        assert_eq!(b.iter().sum::<f64>(), 200.0);
        assert_eq!(p.step_at(1.99), 1);
        assert_eq!(p.step_at(-1.0), 0);
    }
}
