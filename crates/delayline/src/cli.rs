//! Command line: `xferlab-delay --queue NUM:DELAY [--queue ...] [--stats FILE] ...`.

use clap::Parser;
use std::path::PathBuf;

/// One `--queue NUM:DELAY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSpec {
    pub queue: u16,
    pub delay_ns: u64,
}

#[derive(Parser, Debug)]
#[command(
    name = "xferlab-delay",
    version,
    about = "Delay line for the netns emulation: holds the packets of NFQUEUE queues and \
             accepts each one when its delay has passed (see docs/delayline.md)"
)]
pub struct Cli {
    /// Queue number and the one-way delay it adds, e.g. `0:25ms`, `1:12.5ms`, `2:500us`,
    /// `3:0`. Repeat for each queue (each direction / host pair on its own number).
    #[arg(long = "queue", value_name = "NUM:DELAY", required = true, value_parser = parse_queue_spec)]
    pub queues: Vec<QueueSpec>,
    /// Write statistics as JSON to FILE at exit (and every --stats-interval), atomically.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// Also write the stats file every SECONDS while running.
    #[arg(long, value_name = "SECONDS", requires = "stats", value_parser = parse_positive_seconds)]
    pub stats_interval: Option<f64>,
    /// Packets the kernel may hold per queue (NFQA_CFG_QUEUE_MAXLEN); beyond it the kernel
    /// drops and counts `queue_dropped`. 262144 holds 1 s at ~3 Gbit/s of 1500-byte packets.
    #[arg(long, value_name = "N", default_value_t = 262_144, value_parser = clap::value_parser!(u32).range(1..))]
    pub maxlen: u32,
    /// Pin the daemon to this CPU (sched_setaffinity). With the end hosts' receive
    /// processing steered to the other CPUs (rps_cpus), the verdict calls stay short;
    /// see docs/delayline.md.
    #[arg(long, value_name = "CPU")]
    pub cpu: Option<usize>,
    /// Run under SCHED_FIFO at this priority (1–99) with memory locked (mlockall).
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(i32).range(1..=99))]
    pub rt_priority: Option<i32>,
}

impl Cli {
    /// Checks what clap cannot: each queue number given once.
    pub fn validate(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for q in &self.queues {
            if !seen.insert(q.queue) {
                return Err(format!(
                    "queue {} given twice: one delay per queue number",
                    q.queue
                ));
            }
        }
        Ok(())
    }
}

fn parse_positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("`{s}`: expected a positive number of seconds")),
    }
}

/// `NUM:DELAY`.
pub fn parse_queue_spec(s: &str) -> Result<QueueSpec, String> {
    let (num, delay) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}`: expected NUM:DELAY, e.g. 0:25ms"))?;
    let queue = num
        .trim()
        .parse::<u16>()
        .map_err(|_| format!("`{num}`: queue number must be an integer 0–65535"))?;
    Ok(QueueSpec {
        queue,
        delay_ns: parse_delay(delay)?,
    })
}

/// A delay with a unit (`ns`, `us`/`µs`, `ms`, `s`), decimals allowed; a bare `0` is
/// accepted. Returned in ns, rounded to the nearest ns.
pub fn parse_delay(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{s}`: expected a delay such as 25ms, 12.5ms, 500us or 0"))?;
    let scale = match unit.trim() {
        "" if value == 0.0 => 1.0,
        "" => return Err(format!("`{s}`: give a unit (ns, us, ms, s)")),
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        u => return Err(format!("`{s}`: unknown unit `{u}` (ns, us, ms, s)")),
    };
    let ns = (value * scale).round();
    if !(0.0..=3600e9).contains(&ns) {
        return Err(format!("`{s}`: delay out of range (at most 1 h)"));
    }
    Ok(ns as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays() {
        assert_eq!(parse_delay("25ms"), Ok(25_000_000));
        assert_eq!(parse_delay("12.5ms"), Ok(12_500_000));
        assert_eq!(parse_delay("500us"), Ok(500_000));
        assert_eq!(parse_delay("500µs"), Ok(500_000));
        assert_eq!(parse_delay("0"), Ok(0));
        assert_eq!(parse_delay("0ms"), Ok(0));
        assert_eq!(parse_delay("1s"), Ok(1_000_000_000));
        assert_eq!(parse_delay("0.0001ms"), Ok(100));
        assert!(parse_delay("25").unwrap_err().contains("unit"));
        assert!(parse_delay("25 parsecs").is_err());
        assert!(parse_delay("-5ms").is_err());
        assert!(parse_delay("ms").is_err());
        assert!(parse_delay("").is_err());
    }

    #[test]
    fn queue_specs() {
        assert_eq!(
            parse_queue_spec("0:25ms"),
            Ok(QueueSpec {
                queue: 0,
                delay_ns: 25_000_000
            })
        );
        assert_eq!(
            parse_queue_spec("65535:0"),
            Ok(QueueSpec {
                queue: 65535,
                delay_ns: 0
            })
        );
        assert!(parse_queue_spec("65536:1ms").is_err());
        assert!(parse_queue_spec("25ms").is_err());
        assert!(parse_queue_spec("a:1ms").is_err());
    }

    #[test]
    fn command_line() {
        let cli = Cli::try_parse_from([
            "xferlab-delay",
            "--queue",
            "0:50ms",
            "--queue",
            "1:50ms",
            "--stats",
            "/tmp/s.json",
            "--stats-interval",
            "0.5",
            "--rt-priority",
            "50",
            "--cpu",
            "1",
        ])
        .unwrap();
        assert_eq!(cli.queues.len(), 2);
        assert_eq!(cli.maxlen, 262_144);
        assert_eq!(cli.rt_priority, Some(50));
        assert_eq!(cli.cpu, Some(1));
        assert_eq!(cli.stats_interval, Some(0.5));
        assert!(cli.validate().is_ok());

        let dup =
            Cli::try_parse_from(["xferlab-delay", "--queue", "0:1ms", "--queue", "0:2ms"]).unwrap();
        assert!(dup.validate().unwrap_err().contains("twice"));
        assert!(
            Cli::try_parse_from(["xferlab-delay"]).is_err(),
            "at least one queue"
        );
        assert!(
            Cli::try_parse_from(["xferlab-delay", "--queue", "0:1ms", "--rt-priority", "100"])
                .is_err()
        );
        assert!(
            Cli::try_parse_from(["xferlab-delay", "--queue", "0:1ms", "--maxlen", "0"]).is_err()
        );
        assert!(
            Cli::try_parse_from(["xferlab-delay", "--queue", "0:1ms", "--stats-interval", "1"])
                .is_err(),
            "an interval without a file"
        );
    }
}
