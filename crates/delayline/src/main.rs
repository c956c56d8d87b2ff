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
/// Packets accepted per verdict call. The kernel forwards them, and usually runs the
/// softirqs that follow (the receiver's or the sender's TCP), inside the call; capping it
/// lets the other queues and new arrivals be served in between.
const MAX_BATCH: usize = 128;
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
    /// Scratch: the packets of one datagram.
    pkt_scratch: Vec<nfq::Packet>,
    /// Duration of each batch-verdict call: the kernel forwards the whole batch (and
    /// often runs the softirqs it raises) inside it, so this is where CPU time goes.
    verdict_call: hist::Histogram,
    batch_max: usize,
    /// Measurement window: 0 from the start, +1 at each SIGUSR1.
    window: u32,
    window_started: u64,
    /// Host-wide input-backlog drops at the start of the window.
    softnet_dropped_at_start: u64,
    cpu: Option<usize>,
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
                q.stats.read_lag.record(read_ns - arrival);
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
        // The kernel sends one packet per datagram, but a datagram may hold several.
        let mut pkts = std::mem::take(&mut self.pkt_scratch);
        while n < READ_BURST {
            let mut errors = 0;
            pkts.clear();
            match self.sock.recv_one(|m| match m {
                Message::Packet(p) => pkts.push(p),
                Message::Error { errno, .. } if errno != 0 => errors += 1,
                _ => {}
            }) {
                Ok(true) => {
                    n += 1;
                    self.verdict_errors += errors;
                    let read_ns = monotonic_ns();
                    for &p in &pkts {
                        self.on_packet(p, read_ns, rt_offset);
                    }
                }
                Ok(false) => break,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    n += 1;
                    self.enobufs += 1
                }
                Err(e) => {
                    return Err(anyhow::Error::new(e).context("reading from the NFQUEUE socket"))
                }
            }
        }
        self.pkt_scratch = pkts;
        Ok(n)
    }

    /// Accepts, per queue with one batch verdict, the packets due at `now` (at most
    /// MAX_BATCH per queue; the main loop comes straight back for the rest).
    fn release_due(&mut self, now: u64) -> Result<()> {
        for qi in 0..self.queues.len() {
            let q = &mut self.queues[qi];
            self.due_scratch.clear();
            let scratch = &mut self.due_scratch;
            let Some(last) = q.line.pop_due(now, MAX_BATCH, |h| scratch.push(h.due_ns)) else {
                continue;
            };
            let num = q.num;
            let before = monotonic_ns();
            self.sock
                .accept_up_to(num, last)
                .with_context(|| format!("sending the verdict for NFQUEUE {num}"))?;
            let done = monotonic_ns();
            self.verdict_call.record(done - before);
            self.batch_max = self.batch_max.max(self.due_scratch.len());
            let q = &mut self.queues[qi];
            q.stats.batches.record(self.due_scratch.len());
            for &due in &self.due_scratch {
                q.stats.lateness.record(done.saturating_sub(due));
            }
        }
        Ok(())
    }

    fn next_due(&self) -> Option<u64> {
        self.queues.iter().filter_map(|q| q.line.next_due()).min()
    }

    /// Starts a new measurement window (SIGUSR1): per-packet statistics restart from zero,
    /// e.g. to leave out a transfer's slow start. Drop counters stay cumulative.
    fn new_window(&mut self, now: u64) {
        for q in &mut self.queues {
            q.stats = QueueStats::new(q.stats.delay_ns);
            q.line.max_held = q.line.held();
        }
        self.verdict_call = hist::Histogram::default();
        self.batch_max = 0;
        self.window += 1;
        self.window_started = now;
        self.softnet_dropped_at_start = stats::read_softnet_dropped();
    }

    fn report(&self, rt_priority: Option<i32>, maxlen: u32) -> stats::Report {
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
            backlog_dropped: stats::read_softnet_dropped()
                .saturating_sub(self.softnet_dropped_at_start),
            verdict_errors: self.verdict_errors,
            verdict_calls: self.verdict_call.count,
            verdict_call_mean_ms: self.verdict_call.mean_ns() / 1e6,
            verdict_call_p99_ms: self.verdict_call.quantile_ns(0.99) as f64 / 1e6,
            verdict_call_max_ms: self.verdict_call.max_ns as f64 / 1e6,
            batch_max: self.batch_max as u64,
            window: self.window,
            elapsed_s: (monotonic_ns() - self.window_started) as f64 * 1e-9,
            cpu_user_s,
            cpu_sys_s,
            rt_priority,
            cpu: self.cpu,
            maxlen,
        }
    }
}

/// Blocks SIGTERM/SIGINT (stop) and SIGUSR1 (new window) and returns a signalfd that
/// becomes readable when one arrives.
fn termination_signals() -> Result<OwnedFd> {
    // SAFETY: signal-set manipulation on a local sigset_t; signalfd returns a new fd.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGUSR1);
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

/// The number of the pending signal, if any.
fn read_signal(fd: &OwnedFd) -> Option<i32> {
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: reads at most `size` bytes into `info`.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            &mut info as *mut _ as *mut libc::c_void,
            size,
        )
    };
    (n as usize == size).then_some(info.ssi_signo as i32)
}

fn pin_to_cpu(cpu: usize) -> Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        bail!("--cpu {cpu}: no such CPU");
    }
    // SAFETY: a zeroed cpu_set_t with one bit set; pid 0 = this process.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r < 0 {
        bail!(
            "--cpu {cpu}: sched_setaffinity failed: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
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
    tune_process(&cli)?;
    let mut d = Daemon::new(&cli)?;
    bind_queues(&mut d, &cli)?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready")?;
        out.flush()?;
    }
    serve(&mut d, &cli, &signals)?;
    shut_down(&mut d, &cli)
}

/// Timer slack, CPU pinning and real-time priority, as asked.
fn tune_process(cli: &cli::Cli) -> Result<()> {
    // Timers of this process fire on time, not up to 50 µs late (the default slack).
    // SAFETY: plain prctl.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
    if let Some(cpu) = cli.cpu {
        pin_to_cpu(cpu)?;
    }
    if let Some(p) = cli.rt_priority {
        go_realtime(p)?;
    }
    Ok(())
}

impl Daemon {
    /// One delay line per queue of the command line, and the netlink socket.
    fn new(cli: &cli::Cli) -> Result<Self> {
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
        Ok(Daemon {
            queues,
            index,
            sock: NfqSocket::open(RCVBUF)?,
            enobufs: 0,
            verdict_errors: 0,
            due_scratch: Vec::with_capacity(capacity),
            pkt_scratch: Vec::with_capacity(16),
            verdict_call: hist::Histogram::default(),
            batch_max: 0,
            window: 0,
            window_started: 0,
            softnet_dropped_at_start: stats::read_softnet_dropped(),
            cpu: cli.cpu,
        })
    }
}

/// Binds every queue; packets that arrive while binding are delayed from their arrival.
fn bind_queues(d: &mut Daemon, cli: &cli::Cli) -> Result<()> {
    let _timestamps = sock::enable_kernel_timestamps()
        .map_err(|e| {
            eprintln!("xferlab-delay: warning: no kernel timestamps ({e}); arrival = read time")
        })
        .ok();
    d.window_started = monotonic_ns();
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
    Ok(())
}

/// Writes the statistics file, if one was asked for.
fn write_stats(d: &Daemon, cli: &cli::Cli) -> Result<()> {
    if let Some(path) = &cli.stats {
        let r = d.report(cli.rt_priority, cli.maxlen);
        stats::write_atomic(path, &r).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Waits until `wake` (forever when None) for a packet or a signal.
fn wait(fds: &mut [libc::pollfd; 2], wake: Option<u64>) -> Result<i32> {
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
        if e.kind() != std::io::ErrorKind::Interrupted {
            bail!("ppoll: {e}");
        }
    }
    Ok(r)
}

/// The loop: release what is due, read what arrived, write statistics on time or on
/// SIGUSR1 (which also starts a new window); returns on SIGINT/SIGTERM.
fn serve(d: &mut Daemon, cli: &cli::Cli, signals: &OwnedFd) -> Result<()> {
    let interval_ns = cli.stats_interval.map(|s| (s * 1e9) as u64);
    let mut next_stats = interval_ns.map(|i| d.window_started + i);
    let pollfd = |fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let mut fds = [pollfd(d.sock.raw_fd()), pollfd(signals.as_raw_fd())];
    loop {
        let now = monotonic_ns();
        d.release_due(now)?;
        if let (Some(t), Some(i)) = (next_stats, interval_ns) {
            if now >= t && cli.stats.is_some() {
                write_stats(d, cli)?;
                next_stats = Some(t + i);
            }
        }
        let r = wait(
            &mut fds,
            [d.next_due(), next_stats].into_iter().flatten().min(),
        )?;
        if r < 0 {
            continue; // interrupted
        }
        if fds[1].revents != 0 {
            match read_signal(signals) {
                Some(libc::SIGUSR1) => {
                    write_stats(d, cli)?;
                    d.new_window(monotonic_ns());
                }
                Some(_) => return Ok(()),
                None => {}
            }
        }
        if fds[0].revents & libc::POLLERR != 0 {
            // An asynchronous socket error (ENOBUFS without NO_ENOBUFS) is returned by recv.
            fds[0].revents = 0;
        }
        if r > 0 {
            d.read_burst()?;
        }
    }
}

/// Final statistics, then the queues unbound (the kernel drops what they still hold).
fn shut_down(d: &mut Daemon, cli: &cli::Cli) -> Result<()> {
    // Kernel counters are read while the queues are still bound (they vanish with them).
    write_stats(d, cli)?;
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
