//! Parsing of human-friendly sizes, rates and durations, plus small helpers.

use anyhow::{bail, Context, Result};
use std::io::Read;
use std::time::Duration;

/// Sizes are bytes; K/M/G/T/P suffixes are binary (KiB, MiB, ...), matching how
/// people think about file and chunk sizes.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let num_end = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (num, suf) = lower.split_at(num_end);
    let mult: u64 = match suf.trim_end_matches('b').trim_end_matches('i') {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        "p" => 1 << 50,
        _ => bail!("invalid size {s:?} (examples: 4096, 64K, 1M, 1G)"),
    };
    let v: f64 = num
        .parse()
        .with_context(|| format!("invalid size {s:?} (examples: 4096, 64K, 1M, 1G)"))?;
    if !(v.is_finite() && v >= 0.0) {
        bail!("invalid size {s:?}");
    }
    Ok((v * mult as f64).round() as u64)
}

/// Rates are bits per second with decimal suffixes (k, M, G), as network
/// people write them: `400M` = 400 Mbit/s.
pub fn parse_rate(s: &str) -> Result<u64> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let lower = lower
        .trim_end_matches("bit/s")
        .trim_end_matches("bps")
        .trim_end_matches("bit");
    let num_end = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (num, suf) = lower.split_at(num_end);
    let mult: f64 = match suf {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        _ => bail!("invalid rate {s:?} (bits per second, examples: 400M, 2.5G)"),
    };
    let v: f64 = num
        .parse()
        .with_context(|| format!("invalid rate {s:?} (bits per second, examples: 400M, 2.5G)"))?;
    let r = v * mult;
    // The bounds are the caller's (limits.rs); here only a number above 0.
    if !(r.is_finite() && r > 0.0) {
        bail!("invalid rate {s:?}: must be above 0 (bits per second)");
    }
    Ok(r.round() as u64)
}

/// Durations: `120s`, `2m`, `1h`, `500ms`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let lower = s.trim().to_ascii_lowercase();
    let num_end = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (num, suf) = lower.split_at(num_end);
    let mult = match suf {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => bail!("invalid duration {s:?} (examples: 120s, 2m, 1h, 500ms)"),
    };
    let v: f64 = num
        .parse()
        .with_context(|| format!("invalid duration {s:?} (examples: 120s, 2m, 1h)"))?;
    let secs = v * mult;
    if !(secs.is_finite() && secs > 0.0) {
        bail!("invalid duration {s:?}: must be positive");
    }
    Duration::try_from_secs_f64(secs)
        .map_err(|_| anyhow::anyhow!("invalid duration {s:?}: too long"))
}

/// Bad command-line input found after clap's parsing (a rate profile, a
/// start time): `main` exits with status 2 for it, as clap does for its own
/// usage errors, so a caller can tell "you asked wrongly" from "it failed".
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// How a log line names a transfer's connections.
pub fn sealed(encrypted: bool) -> &'static str {
    if encrypted {
        "encrypted"
    } else {
        "plaintext"
    }
}

/// A usage error as an `anyhow::Error` (exit status 2).
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

pub fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom")?;
    Ok(b)
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn human_bytes(n: u64) -> String {
    let f = n as f64;
    if f >= (1u64 << 50) as f64 {
        format!("{:.2} PiB", f / (1u64 << 50) as f64)
    } else if f >= (1u64 << 40) as f64 {
        format!("{:.2} TiB", f / (1u64 << 40) as f64)
    } else if f >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", f / (1u64 << 30) as f64)
    } else if f >= (1u64 << 20) as f64 {
        format!("{:.2} MiB", f / (1u64 << 20) as f64)
    } else if f >= (1u64 << 10) as f64 {
        format!("{:.2} KiB", f / (1u64 << 10) as f64)
    } else {
        format!("{n} B")
    }
}

/// A rate in bit/s as network people write it: `1 kbit/s`, `2.5 Gbit/s`.
pub fn human_rate(bps: u64) -> String {
    let f = bps as f64;
    let (v, unit) = match f {
        _ if f >= 1e12 => (f / 1e12, "Tbit/s"),
        _ if f >= 1e9 => (f / 1e9, "Gbit/s"),
        _ if f >= 1e6 => (f / 1e6, "Mbit/s"),
        _ if f >= 1e3 => (f / 1e3, "kbit/s"),
        _ => (f, "bit/s"),
    };
    format!("{} {unit}", (v * 1000.0).round() / 1000.0)
}

/// A power-of-two size as a command-line argument (`256K`, `4M`, `1G`).
pub fn human_size_arg(n: u64) -> String {
    for (shift, suf) in [(30, "G"), (20, "M"), (10, "K")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{suf}", n >> shift);
        }
    }
    n.to_string()
}

/// Unix time now (CLOCK_REALTIME), in seconds.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("12X").is_err());
        assert!(parse_size("").is_err());
        assert_eq!(human_size_arg(256 << 10), "256K");
        assert_eq!(human_size_arg(16 << 20), "16M");
        assert_eq!(human_bytes(16 << 40), "16.00 TiB");
        assert_eq!(human_bytes(1 << 50), "1.00 PiB");
        assert_eq!(human_rate(1000), "1 kbit/s");
        assert_eq!(human_rate(2_500_000_000), "2.5 Gbit/s");
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("400M").unwrap(), 400_000_000);
        assert_eq!(parse_rate("2.5G").unwrap(), 2_500_000_000);
        assert_eq!(parse_rate("100Mbit/s").unwrap(), 100_000_000);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("120s").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("1e30s").is_err());
    }
}
