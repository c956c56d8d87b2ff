//! xferlab-delay: the delay line of the netns emulation. The kernel holds the packets of
//! one or more NFQUEUE queues; this daemon only decides when each may go on, and accepts
//! it (in batches) when its queue's delay has passed. See docs/delayline.md.

mod cli;
mod delay;
mod hist;
mod nfq;
mod sock;
mod stats;

use anyhow::{bail, Context, Result};
use clap::Parser;
use delay::DelayLine;
use nfq::Message;
use sock::{monotonic_ns, realtime_ns, NfqSocket};
use stats::QueueStats;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Receive buffer of the netlink socket: messages wait there only while the daemon is
/// busy (each is ~150 bytes, ~1 KB of skb truesize), so 64 MiB absorbs tens of ms of
/// backlog at any rate this machine can forward.
const RCVBUF: usize = 64 << 20;
/// Bytes of each packet copied up: enough for NFQA_CAP_LEN (the packet length) to be
/// sent, since the kernel includes it only when the copy is truncated (see docs).
const COPY_RANGE: u32 = 20;
/// Messages read per wake-up before looking again at what is due.
const READ_BURST: usize = 256;
/// An `NFQA_TIMESTAMP` older than this at the read, or later than the read by more than
/// [`MAX_STAMP_LEAD_NS`], is taken as wrong (a step of the realtime clock) and the read
/// time is used instead.
const MAX_STAMP_AGE_NS: u64 = 1_000_000_000;
const MAX_STAMP_LEAD_NS: u64 = 1_000_000;

struct Queue {
    num: u16,
    line: DelayLine,
    stats: QueueStats,
}

struct Daemon {
    queues: Vec<Queue>,
    /// queue number → index in `queues` (u16::MAX = not ours).
    index: Vec<u16>,
    sock: NfqSocket,
    enobufs: u64,
    verdict_errors: u64,
    /// Scratch: due times of the packets of one batch.
    due_scratch: Vec<u64>,
}

impl Daemon {
    /// Records a packet read at `read_ns` (CLOCK_MONOTONIC). `rt_offset_ns` = realtime −
    /// monotonic, to map a kernel timestamp onto the monotonic clock.
    fn on_packet(&mut self, p: nfq::Packet, read_ns: u64, rt_offset_ns: u64) {
        let Some(&i) = self.index.get(p.queue as usize) else {
            return;
        };
        let Some(q) = self.queues.get_mut(i as usize) else {
            return;
        };
        let mut arrival = read_ns;
        if let Some(ts) = p.timestamp_ns {
            let ts_mono = ts.wrapping_sub(rt_offset_ns);
            let plausible = if ts_mono <= read_ns {
                read_ns - ts_mono < MAX_STAMP_AGE_NS
            } else {
                ts_mono - read_ns < MAX_STAMP_LEAD_NS
            };
            if plausible {
                arrival = ts_mono.min(read_ns);
                q.stats.kernel_stamped += 1;
            }
        }
        q.line.push(p.id, arrival);
        q.stats.packets += 1;
        q.stats.bytes += p.len as u64;
    }

    /// Reads up to READ_BURST messages. Returns how many were read.
    fn read_burst(&mut self) -> Result<usize> {
        let rt_offset = realtime_ns().wrapping_sub(monotonic_ns());
        let mut n = 0;
        let mut pkts = [None; 1];
        while n < READ_BURST {
            let mut errors = 0;
            match self.sock.recv_one(|m| match m {
                Message::Packet(p) => pkts[0] = Some(p),
                Message::Error { errno, .. } if errno != 0 => errors += 1,
                _ => {}
            }) {
                Ok(true) => {
                    n += 1;
                    self.verdict_errors += errors;
                    if let Some(p) = pkts[0].take() {
                        self.on_packet(p, monotonic_ns(), rt_offset);
                    }
                }
                Ok(false) => break,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => self.enobufs += 1,
                Err(e) => {
                    return Err(anyhow::Error::new(e).context("reading from the NFQUEUE socket"))
                }
            }
        }
        Ok(n)
    }

    /// Accepts, per queue with one batch verdict, every packet due at `now`.
    fn release_due(&mut self, now: u64) -> Result<()> {
        for qi in 0..self.queues.len() {
            let q = &mut self.queues[qi];
            self.due_scratch.clear();
            let scratch = &mut self.due_scratch;
            let Some(last) = q.line.pop_due(now, |h| scratch.push(h.due_ns)) else {
                continue;
            };
            let num = q.num;
            self.sock
                .accept_up_to(num, last)
                .with_context(|| format!("sending the verdict for NFQUEUE {num}"))?;
            let done = monotonic_ns();
            let q = &mut self.queues[qi];
            for &due in &self.due_scratch {
                q.stats.lateness.record(done.saturating_sub(due));
            }
        }
        Ok(())
    }

    fn next_due(&self) -> Option<u64> {
        self.queues.iter().filter_map(|q| q.line.next_due()).min()
    }

    fn report(&self, started: u64, rt_priority: Option<i32>, maxlen: u32) -> stats::Report {
        let kernel = stats::read_proc();
        let queues = self
            .queues
            .iter()
            .map(|q| {
                let k = kernel.get(&q.num).copied().unwrap_or_default();
                (
                    q.num.to_string(),
                    stats::queue_report(&q.stats, q.line.max_held, q.line.held(), k),
                )
            })
            .collect();
        let (cpu_user_s, cpu_sys_s) = stats::cpu_seconds();
        stats::Report {
            queues,
            enobufs: self.enobufs,
            verdict_errors: self.verdict_errors,
            elapsed_s: (monotonic_ns() - started) as f64 * 1e-9,
            cpu_user_s,
            cpu_sys_s,
            rt_priority,
            maxlen,
        }
    }
}

/// Blocks SIGTERM/SIGINT and returns a signalfd that becomes readable when one arrives.
fn termination_signals() -> Result<OwnedFd> {
    // SAFETY: signal-set manipulation on a local sigset_t; signalfd returns a new fd.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) < 0 {
            bail!("sigprocmask: {}", std::io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            bail!("signalfd: {}", std::io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// SCHED_FIFO at `prio` and all memory locked, so neither other processes nor page faults
/// delay a verdict.
fn go_realtime(prio: i32) -> Result<()> {
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: valid sched_param; pid 0 = this process.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } < 0 {
        bail!(
            "--rt-priority {prio}: sched_setscheduler(SCHED_FIFO) failed: {} (needs root / CAP_SYS_NICE)",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: plain syscall.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } < 0 {
        eprintln!(
            "xferlab-delay: warning: mlockall failed: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

fn run(cli: cli::Cli) -> Result<()> {
    cli.validate().map_err(anyhow::Error::msg)?;
    let signals = termination_signals()?;
    // Timers of this process fire on time, not up to 50 µs late (the default slack).
    // SAFETY: plain prctl.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
    if let Some(p) = cli.rt_priority {
        go_realtime(p)?;
    }

    let capacity = (cli.maxlen as usize).min(1 << 18);
    let mut index = vec![u16::MAX; 1 << 16];
    let queues: Vec<Queue> = cli
        .queues
        .iter()
        .enumerate()
        .map(|(i, s)| {
            index[s.queue as usize] = i as u16;
            Queue {
                num: s.queue,
                line: DelayLine::new(s.delay_ns, capacity),
                stats: QueueStats::new(s.delay_ns),
            }
        })
        .collect();
    let mut d = Daemon {
        queues,
        index,
        sock: NfqSocket::open(RCVBUF)?,
        enobufs: 0,
        verdict_errors: 0,
        due_scratch: Vec::with_capacity(capacity),
    };

    let _timestamps = sock::enable_kernel_timestamps()
        .map_err(|e| {
            eprintln!("xferlab-delay: warning: no kernel timestamps ({e}); arrival = read time")
        })
        .ok();
    let started = monotonic_ns();
    let mut early = Vec::new();
    for s in &cli.queues {
        let cfg = nfq::QueueConfig {
            queue: s.queue,
            copy_mode: nfq::CopyMode::Packet,
            copy_range: COPY_RANGE,
            maxlen: cli.maxlen,
        };
        d.sock
            .bind_queue(&cfg, |p| early.push((p, monotonic_ns())))?;
    }
    let rt_offset = realtime_ns().wrapping_sub(monotonic_ns());
    for (p, t) in early {
        d.on_packet(p, t, rt_offset);
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready")?;
        out.flush()?;
    }

    let interval_ns = cli.stats_interval.map(|s| (s * 1e9) as u64);
    let mut next_stats = interval_ns.map(|i| started + i);
    let mut fds = [
        libc::pollfd {
            fd: d.sock.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: signals.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        let now = monotonic_ns();
        d.release_due(now)?;
        if let (Some(t), Some(path), Some(i)) = (next_stats, &cli.stats, interval_ns) {
            if now >= t {
                let r = d.report(started, cli.rt_priority, cli.maxlen);
                stats::write_atomic(path, &r)
                    .with_context(|| format!("writing {}", path.display()))?;
                next_stats = Some(t + i);
            }
        }
        let wake = [d.next_due(), next_stats].into_iter().flatten().min();
        let now = monotonic_ns();
        let ts = wake.map(|w| {
            let dt = w.saturating_sub(now);
            libc::timespec {
                tv_sec: (dt / 1_000_000_000) as i64,
                tv_nsec: (dt % 1_000_000_000) as i64,
            }
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: two valid pollfds; tsp is null or points to a live timespec.
        let r = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                tsp,
                std::ptr::null(),
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            bail!("ppoll: {e}");
        }
        if fds[1].revents != 0 {
            break;
        }
        if fds[0].revents & libc::POLLERR != 0 {
            // An asynchronous socket error (ENOBUFS without NO_ENOBUFS) is returned by recv.
            fds[0].revents = 0;
        }
        if r > 0 {
            d.read_burst()?;
        }
    }

    // Kernel counters are read while the queues are still bound (they vanish with them).
    let report = d.report(started, cli.rt_priority, cli.maxlen);
    if let Some(path) = &cli.stats {
        stats::write_atomic(path, &report)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    // Packets still held are dropped by the kernel when their queue is unbound.
    for q in &mut d.queues {
        q.line.clear();
    }
    for s in &cli.queues {
        d.sock.unbind_queue(s.queue)?;
    }
    Ok(())
}

fn main() {
    let cli = cli::Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("xferlab-delay: error: {e:#}");
        std::process::exit(1);
    }
}
