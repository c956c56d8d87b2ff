//! Per-queue counters, the kernel's own counters, and the JSON stats file.

use crate::hist::{Batches, Histogram};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Counters the kernel keeps per queue (`/proc/net/netfilter/nfnetlink_queue` of the
/// daemon's network namespace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCounters {
    /// Packets held in the kernel now.
    pub queue_total: u64,
    /// Dropped because the queue held `maxlen` packets.
    pub queue_dropped: u64,
    /// Dropped because the message could not be delivered to the daemon (socket buffer
    /// full: the daemon fell behind).
    pub user_dropped: u64,
}

/// Parses `/proc/net/netfilter/nfnetlink_queue`: per line `queue_number peer_portid
/// queue_total copy_mode copy_range queue_dropped user_dropped id_sequence 1`.
pub fn parse_proc(text: &str) -> BTreeMap<u16, KernelCounters> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() >= 7 && f[0] <= u16::MAX as u64 {
            out.insert(
                f[0] as u16,
                KernelCounters {
                    queue_total: f[2],
                    queue_dropped: f[5],
                    user_dropped: f[6],
                },
            );
        }
    }
    out
}

pub fn read_proc() -> BTreeMap<u16, KernelCounters> {
    std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue")
        .map(|t| parse_proc(&t))
        .unwrap_or_default()
}

/// Packets dropped host-wide because a CPU's input backlog (`netdev_max_backlog`) was
/// full: column 2 (hex) of `/proc/net/softnet_stat`, summed over CPUs. Such a loss happens
/// outside the bottleneck (e.g. when RPS sends the end hosts' packets to a busy CPU).
pub fn parse_softnet_dropped(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|x| u64::from_str_radix(x, 16).ok())
        .sum()
}

pub fn read_softnet_dropped() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .map(|t| parse_softnet_dropped(&t))
        .unwrap_or(0)
}

/// What the daemon measured on one queue.
#[derive(Debug)]
pub struct QueueStats {
    pub delay_ns: u64,
    pub packets: u64,
    pub bytes: u64,
    /// Lateness = time the verdict call returned − due time, per packet.
    pub lateness: Histogram,
    /// Packets whose arrival time came from `NFQA_TIMESTAMP` rather than the read time.
    pub kernel_stamped: u64,
    /// For those: read time − kernel timestamp, i.e. how long the packet took from the
    /// router's interface to the daemon (softirq backlog, netlink socket, our loop).
    pub read_lag: Histogram,
    /// Packets per verdict: the clumps in which the packets went on.
    pub batches: Batches,
}

impl QueueStats {
    pub fn new(delay_ns: u64) -> Self {
        Self {
            delay_ns,
            packets: 0,
            bytes: 0,
            lateness: Histogram::default(),
            kernel_stamped: 0,
            read_lag: Histogram::default(),
            batches: Batches::default(),
        }
    }
}

#[derive(Serialize, Debug, PartialEq)]
pub struct QueueReport {
    pub delay_ms: f64,
    pub packets: u64,
    pub bytes: u64,
    pub late_mean_ms: f64,
    pub late_p50_ms: f64,
    pub late_p99_ms: f64,
    pub late_max_ms: f64,
    pub max_held: u64,
    pub held: u64,
    pub queue_dropped: u64,
    pub user_dropped: u64,
    pub kernel_stamped: u64,
    pub read_lag_mean_ms: f64,
    pub read_lag_p99_ms: f64,
    pub read_lag_max_ms: f64,
    /// Verdicts, packets per verdict, and the size of the verdict a packet went on in
    /// (mean, median, 90th percentile over packets).
    pub batches: u64,
    pub batch_mean: f64,
    pub batch_packet_mean: f64,
    pub batch_packet_p50: u64,
    pub batch_packet_p90: u64,
}

#[derive(Serialize, Debug)]
pub struct Report {
    pub queues: BTreeMap<String, QueueReport>,
    pub enobufs: u64,
    /// Host-wide input-backlog drops during this window (see [`parse_softnet_dropped`]).
    pub backlog_dropped: u64,
    pub verdict_errors: u64,
    pub verdict_calls: u64,
    pub verdict_call_mean_ms: f64,
    pub verdict_call_p99_ms: f64,
    pub verdict_call_max_ms: f64,
    pub batch_max: u64,
    pub window: u32,
    pub elapsed_s: f64,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    pub rt_priority: Option<i32>,
    pub cpu: Option<usize>,
    pub maxlen: u32,
}

const NS_PER_MS: f64 = 1e6;

pub fn queue_report(
    s: &QueueStats,
    max_held: usize,
    held: usize,
    k: KernelCounters,
) -> QueueReport {
    let h = &s.lateness;
    QueueReport {
        delay_ms: s.delay_ns as f64 / NS_PER_MS,
        packets: s.packets,
        bytes: s.bytes,
        late_mean_ms: h.mean_ns() / NS_PER_MS,
        late_p50_ms: h.quantile_ns(0.5) as f64 / NS_PER_MS,
        late_p99_ms: h.quantile_ns(0.99) as f64 / NS_PER_MS,
        late_max_ms: h.max_ns as f64 / NS_PER_MS,
        max_held: max_held as u64,
        held: held as u64,
        queue_dropped: k.queue_dropped,
        user_dropped: k.user_dropped,
        kernel_stamped: s.kernel_stamped,
        read_lag_mean_ms: s.read_lag.mean_ns() / NS_PER_MS,
        read_lag_p99_ms: s.read_lag.quantile_ns(0.99) as f64 / NS_PER_MS,
        read_lag_max_ms: s.read_lag.max_ns as f64 / NS_PER_MS,
        batches: s.batches.count(),
        batch_mean: s.batches.mean(),
        batch_packet_mean: s.batches.packet_mean(),
        batch_packet_p50: s.batches.packet_quantile(0.5),
        batch_packet_p90: s.batches.packet_quantile(0.9),
    }
}

/// (user, system) CPU seconds of this process.
pub fn cpu_seconds() -> (f64, f64) {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

/// Writes `report` to `path` atomically (a temporary file beside it, then rename).
pub fn write_atomic(path: &Path, report: &Report) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        serde_json::to_writer_pretty(&mut f, report)?;
        f.write_all(b"\n")?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_file() {
        let text = "    0  12345     3 2 20     7    11 100 1\n\
                    65535  99     0 1 0     0     0 5 1\n";
        let m = parse_proc(text);
        assert_eq!(
            m[&0],
            KernelCounters {
                queue_total: 3,
                queue_dropped: 7,
                user_dropped: 11
            }
        );
        assert_eq!(m[&65535].queue_dropped, 0);
        assert!(parse_proc("garbage\n").is_empty());
    }

    #[test]
    fn softnet_drops_are_summed_over_cpus() {
        let text = "06bb904e 00000000 00000004\n0706701d 00000e11 00000007 00000000\n";
        assert_eq!(parse_softnet_dropped(text), 0xe11);
    }

    #[test]
    fn report_fields_in_ms() {
        let mut s = QueueStats::new(25_000_000);
        s.packets = 2;
        s.bytes = 3000;
        s.lateness.record(10_000);
        s.lateness.record(30_000);
        s.batches.record(2);
        let r = queue_report(
            &s,
            5,
            1,
            KernelCounters {
                queue_total: 1,
                queue_dropped: 0,
                user_dropped: 2,
            },
        );
        assert_eq!(r.delay_ms, 25.0);
        assert!((r.late_mean_ms - 0.02).abs() < 1e-12);
        assert_eq!(r.late_max_ms, 0.03);
        assert_eq!(r.max_held, 5);
        assert_eq!(r.user_dropped, 2);
        assert_eq!((r.batches, r.batch_packet_p90), (1, 2));
        let json = serde_json::to_value(&r).unwrap();
        for key in [
            "delay_ms",
            "packets",
            "bytes",
            "late_mean_ms",
            "late_p50_ms",
            "late_p99_ms",
            "late_max_ms",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
        for key in ["max_held", "queue_dropped", "user_dropped"] {
            assert!(json.get(key).is_some(), "{key}");
        }
    }

    #[test]
    fn atomic_write_replaces_file() {
        let dir = std::env::temp_dir().join(format!("xl-delay-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stats.json");
        let mut queues = BTreeMap::new();
        queues.insert(
            "0".into(),
            queue_report(&QueueStats::new(0), 0, 0, KernelCounters::default()),
        );
        let r = Report {
            queues,
            enobufs: 0,
            backlog_dropped: 0,
            verdict_errors: 0,
            verdict_calls: 0,
            verdict_call_mean_ms: 0.0,
            verdict_call_p99_ms: 0.0,
            verdict_call_max_ms: 0.0,
            batch_max: 0,
            window: 0,
            elapsed_s: 1.5,
            cpu_user_s: 0.0,
            cpu_sys_s: 0.0,
            rt_priority: None,
            cpu: None,
            maxlen: 1,
        };
        write_atomic(&path, &r).unwrap();
        write_atomic(&path, &r).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["elapsed_s"], 1.5);
        assert_eq!(v["queues"]["0"]["packets"], 0);
        assert!(!dir.join("stats.json.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
