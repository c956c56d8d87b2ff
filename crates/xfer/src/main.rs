//! xfer: parallel-stream transfer of files and pipes, paced to a rate or a
//! deadline. See docs/xfer.md.

mod autorun;
mod autotune;
mod chunkset;
mod client;
mod conn;
mod crypt;
mod eta;
mod fsinfo;
mod inputfile;
mod journal;
mod limiter;
mod limits;
mod monitor;
mod onoff;
mod profile;
mod proto;
mod pull;
mod qstats;
mod safepath;
mod send;
mod server;
mod session;
mod signal;
mod sock;
mod srcfile;
mod start;
mod trace;
mod util;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use proto::{Auth, Mode, Sink};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "xfer",
    version,
    about = "Parallel-stream transfer of files and pipes, paced to a rate or a deadline"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Stripe,
    Stream,
}

// Parsed once per process; boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Run the receiver daemon.
    Serve(ServeArgs),
    /// Send a file, stdin, or a command's output to a server, or pull a file from it.
    #[command(
        after_help = "SRC: a file, '-' (stdin) or mem:SIZE (zeros, for benchmarks); omit with --from-cmd.\n\
DEST: HOST:PORT:/path (relative to the server's --root), or HOST:PORT with --to-cmd or --discard.\n\
Pull: SRC = HOST:PORT:/path, DEST = a local file or '-' (stdout)."
    )]
    Send(SendArgs),
    /// An unresponsive ON/OFF UDP source (background traffic), or with --sink the
    /// receiver that discards its datagrams; prints its totals as JSON.
    Onoff(OnoffArgs),
    /// Sample a router's qdisc counters on an absolute grid of this host's clock
    /// (the ssh backend's link sampler): one line per qdisc of each device per sample.
    Qstats(QstatsArgs),
}

/// `xfer qstats`'s options (times in ns of CLOCK_REALTIME, as the backends give them).
#[derive(clap::Args)]
struct QstatsArgs {
    /// A device whose qdiscs are sampled (repeatable).
    #[arg(long = "dev", required = true)]
    devices: Vec<String>,
    /// Sampling interval, ns (at least 1 ms).
    #[arg(long)]
    interval_ns: u64,
    /// The first sample's time, ns since the epoch on this host's clock.
    #[arg(long)]
    start_ns: u64,
    /// Stop this many ns after the start (or when killed).
    #[arg(long)]
    duration_ns: u64,
}

/// `xfer onoff`'s options (numbers in seconds and bit/s, as the backends give them).
#[derive(clap::Args)]
struct OnoffArgs {
    /// Where to send (ADDR:PORT).
    #[arg(long, required_unless_present = "sink")]
    dst: Option<std::net::SocketAddr>,
    /// Take datagrams on ADDR:PORT and count them instead of sending.
    #[arg(long, conflicts_with = "dst")]
    sink: Option<std::net::SocketAddr>,
    /// Local address to send from.
    #[arg(long)]
    bind: Option<std::net::SocketAddr>,
    /// Rate while ON, bit/s of IP packets.
    #[arg(long, required_unless_present = "sink")]
    rate: Option<f64>,
    /// Mean ON period, s (exponential).
    #[arg(long, default_value_t = 1.0)]
    mean_on: f64,
    /// Mean OFF period, s (exponential).
    #[arg(long, default_value_t = 1.0)]
    mean_off: f64,
    /// UDP payload bytes per datagram.
    #[arg(long, default_value_t = 1472)]
    size: usize,
    /// Seed of the periods' draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this many seconds (or at SIGTERM/SIGINT).
    #[arg(long)]
    duration: f64,
}

/// `xfer serve`'s options.
#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free port, printed on stdout).
    #[arg(long, default_value = "0.0.0.0:7447")]
    listen: String,
    /// Directory that received files are confined to.
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// File holding the shared key (at least 16 bytes).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Run without a key (only allowed on a loopback address).
    #[arg(long)]
    insecure: bool,
    #[command(flatten)]
    crypto: crypt::CryptoArgs,
    /// Allow clients to run --to-cmd consumers (as this user, in --root).
    #[arg(long)]
    allow_cmd: bool,
    /// Largest chunk a client may use.
    #[arg(long, default_value = "16M")]
    max_chunk: String,
    /// Maximum concurrent sessions (1 to 1024).
    #[arg(long, default_value_t = 16)]
    max_sessions: u64,
    /// Maximum open connections (authenticated or not); past it, clients
    /// are told the server is busy [default: 1024, or what the open-file
    /// limit leaves room for].
    #[arg(long)]
    max_conns: Option<u64>,
    /// Receive buffer per data socket (default: kernel autotuning).
    #[arg(long)]
    rcvbuf: Option<String>,
}

/// `xfer send`'s options.
#[derive(clap::Args)]
struct SendArgs {
    /// [SRC] DEST
    #[arg(required = true, num_args = 1..=2)]
    args: Vec<String>,
    /// Number of parallel data connections, or `auto` (a search during
    /// the transfer, stripe mode: see --start-streams, --max-streams).
    #[arg(
        short = 'P',
        long = "parallel",
        visible_alias = "streams",
        default_value = "4"
    )]
    parallel: String,
    /// --streams auto: the count the search starts from [default: 1].
    #[arg(long)]
    start_streams: Option<u32>,
    /// --streams auto: the most streams it may open [default: 16].
    #[arg(long)]
    max_streams: Option<u32>,
    /// stripe (file in N contiguous ranges) or stream (sequenced chunks);
    /// default: stripe for files, stream for pipes and --to-cmd.
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// Chunk size (unit of hashing, resume and reordering).
    #[arg(long, default_value = "1M")]
    chunk: String,
    /// Aggregate goodput target in bit/s, e.g. 400M (paced per socket).
    #[arg(long)]
    rate: Option<String>,
    /// Finish by this time, e.g. 120s: sets the rate from size and deadline.
    #[arg(long, conflicts_with = "rate")]
    deadline: Option<String>,
    /// Expected size of a pipe (needed with --deadline).
    #[arg(long)]
    size: Option<String>,
    /// The source must be exactly this many bytes: a pipe that ends
    /// early (e.g. its producer failed) or runs long fails the transfer
    /// and nothing is committed.
    #[arg(long)]
    expect_size: Option<String>,
    /// TCP congestion control (e.g. bbr, cubic, reno).
    #[arg(long)]
    cc: Option<String>,
    /// Send buffer per data socket (default: kernel autotuning).
    #[arg(long)]
    sndbuf: Option<String>,
    /// Receive buffer per data socket (default: kernel autotuning).
    #[arg(long)]
    rcvbuf: Option<String>,
    /// Turn off per-chunk and end-to-end hashing.
    #[arg(long)]
    no_hash: bool,
    /// Start from scratch even if the receiver holds verified chunks.
    #[arg(long)]
    no_resume: bool,
    /// Resume a pipe from the receiver's verified prefix (the producer
    /// must emit the same bytes again; the end-to-end hash checks it).
    #[arg(long, conflicts_with = "no_resume")]
    resume: bool,
    /// Reconnect and resume this many times after a broken connection.
    #[arg(long, default_value_t = 3)]
    retries: u32,
    /// Producer command whose stdout is sent (run with sh -c).
    #[arg(long)]
    from_cmd: Option<String>,
    /// Consumer command run by the server, fed the data on stdin.
    #[arg(long)]
    to_cmd: Option<String>,
    /// Let the server throw the data away (memory-to-memory tests).
    #[arg(long)]
    discard: bool,
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Send without a key (only to a loopback address).
    #[arg(long)]
    insecure: bool,
    #[command(flatten)]
    crypto: crypt::CryptoArgs,
    /// Write a trace (run, flows, goodput, tcp tables) as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Sampling interval for goodput and TCP_INFO.
    #[arg(long, default_value = "0.5s")]
    interval: String,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// No summary line.
    #[arg(short, long)]
    quiet: bool,
    /// Test hook: the receiver fails the first attempt, as if its data
    /// connections were reset, once it has written this many bytes.
    #[arg(long, hide = true)]
    fault_reset_after: Option<String>,
    /// Test hook: the senders stop after this many bytes and wait for
    /// their connections to close (the transfer cannot finish).
    #[arg(long, hide = true)]
    fault_stall_after: Option<String>,
    /// Test hook: a command run (sh -c) before each retry, e.g. one that
    /// changes the source between two attempts.
    #[arg(long, hide = true)]
    fault_before_retry: Option<String>,
    /// Test hook: pace each data socket to this rate (bit/s), so that more
    /// streams carry more even on loopback.
    #[arg(long, hide = true)]
    test_stream_rate: Option<String>,
    #[command(flatten)]
    plan: PlanArgs,
}

/// Following a schedule: when the data starts, and its rate over time.
#[derive(clap::Args)]
struct PlanArgs {
    /// Start the data at T: Unix seconds (1795366694.250) or RFC 3339
    /// (2026-11-22T16:58:14.250Z). The session is set up first; a T already
    /// past starts at once, saying how late.
    #[arg(long, value_name = "T")]
    start_at: Option<String>,
    /// With --start-at: connect and set up the session this long before T.
    #[arg(long, value_name = "DUR", default_value = "5s", requires = "start_at")]
    connect_ahead: String,
    /// Set up the session, then listen on ADDR (IP:PORT) and start the data
    /// when the previous transfer's --signal-done arrives.
    #[arg(long, value_name = "ADDR", conflicts_with = "start_at")]
    start_after_signal: Option<String>,
    /// Once this transfer is committed, send the start signal to ADDR
    /// (HOST:PORT, another xfer's --start-after-signal).
    #[arg(long, value_name = "ADDR")]
    signal_done: Option<String>,
    /// Names the link of a chain; both ends of a signal must give the same.
    #[arg(long, value_name = "TOKEN", default_value = "start")]
    signal_token: String,
    /// Goodput over time: 0s:300M,12.5s:600M,40s:0 (offsets from the data
    /// start, bit/s as --rate takes them, 0 = pause), or @FILE (a JSON list
    /// of {"t": s, "rate_bps": x}).
    #[arg(long, value_name = "SPEC", conflicts_with_all = ["rate", "deadline"])]
    rate_profile: Option<String>,
    /// How the rate is enforced: pacing (SO_MAX_PACING_RATE), sleep (a
    /// userland timer at --timer-hz), cwnd (the receiver's window clamped to
    /// rate x min RTT).
    #[arg(long, value_enum, default_value = "pacing")]
    limiter: limiter::Limiter,
    /// Timer frequency of --limiter sleep [default: 250].
    #[arg(long, value_name = "HZ")]
    timer_hz: Option<u32>,
}

/// `PlanArgs` checked and parsed (errors are usage errors: exit status 2).
struct Plan {
    profile: Option<profile::Profile>,
    limiter: limiter::Limiter,
    timer_hz: u32,
    start_at: Option<f64>,
    connect_ahead: std::time::Duration,
    start_after_signal: Option<String>,
    signal_done: Option<std::net::SocketAddr>,
    signal_token: String,
}

impl PlanArgs {
    fn given(&self) -> Option<&'static str> {
        [
            (self.start_at.is_some(), "--start-at"),
            (self.start_after_signal.is_some(), "--start-after-signal"),
            (self.signal_done.is_some(), "--signal-done"),
            (self.rate_profile.is_some(), "--rate-profile"),
            (self.limiter != limiter::Limiter::Pacing, "--limiter"),
            (self.timer_hz.is_some(), "--timer-hz"),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name))
    }

    /// `rate_given`: --rate or --deadline was given.
    fn parse(self, rate_given: bool, auth: &Auth) -> Result<Plan> {
        use util::usage;
        let profile = self
            .rate_profile
            .as_deref()
            .map(profile::Profile::parse)
            .transpose()?;
        let limited = rate_given || profile.is_some();
        if self.limiter != limiter::Limiter::Pacing && !limited {
            return Err(usage(
                "--limiter needs --rate, --deadline or --rate-profile",
            ));
        }
        if self.timer_hz.is_some() && self.limiter != limiter::Limiter::Sleep {
            return Err(usage("--timer-hz applies to --limiter sleep"));
        }
        let timer_hz = self.timer_hz.unwrap_or(250);
        if !(1..=10_000).contains(&timer_hz) {
            return Err(usage("--timer-hz must be between 1 and 10000"));
        }
        let connect_ahead = match self.connect_ahead.trim() {
            "0" | "0s" => std::time::Duration::ZERO,
            d => limits::duration(
                "--connect-ahead",
                d,
                limits::ZERO_S,
                limits::CONNECT_AHEAD_MAX_S,
            )?,
        };
        signal::check_token(&self.signal_token)?;
        Ok(Plan {
            profile,
            limiter: self.limiter,
            timer_hz,
            start_at: self
                .start_at
                .as_deref()
                .map(|t| start::start_time(t, util::unix_now()))
                .transpose()?,
            connect_ahead,
            start_after_signal: self.start_after_signal,
            signal_done: self
                .signal_done
                .as_deref()
                .map(|a| signal::resolve(a, auth))
                .transpose()?,
            signal_token: self.signal_token,
        })
    }
}

fn load_auth(key_file: &Option<PathBuf>, insecure: bool) -> Result<Auth> {
    use util::usage;
    match (key_file, insecure) {
        (Some(_), true) => Err(usage("--key-file and --insecure are mutually exclusive")),
        (Some(p), false) => {
            let k = inputfile::read_key(p, limits::KEY_FILE_MAX_BYTES)?;
            let k = k.trim_ascii().to_vec();
            if k.len() < 16 {
                return Err(usage(format!(
                    "--key-file {}: the key is too short (need at least 16 bytes)",
                    p.display()
                )));
            }
            Ok(Auth::Key(k))
        }
        (None, true) => Ok(Auth::Insecure),
        (None, false) => Err(usage(
            "no key: pass --key-file FILE (or --insecure, loopback only)",
        )),
    }
}

/// An optional socket buffer size, checked.
fn buffer_opt(flag: &str, s: &Option<String>) -> Result<Option<usize>> {
    s.as_deref()
        .map(|x| limits::socket_buffer(flag, x))
        .transpose()
}

/// An optional transfer size, checked.
fn volume_opt(flag: &str, s: &Option<String>) -> Result<Option<u64>> {
    s.as_deref().map(|x| limits::volume(flag, x)).transpose()
}

/// HOST:PORT[:PATH], with [v6] hosts.
fn parse_remote(s: &str) -> Option<(String, u16, Option<String>)> {
    let (host, rest) = if let Some(r) = s.strip_prefix('[') {
        let (h, rest) = r.split_once(']')?;
        (h.to_string(), rest.strip_prefix(':')?)
    } else {
        let (h, rest) = s.split_once(':')?;
        (h.to_string(), rest)
    };
    let (port, path) = match rest.split_once(':') {
        Some((p, path)) => (p, Some(path.to_string())),
        None => (rest, None),
    };
    let port: u16 = port.parse().ok()?;
    if host.is_empty() {
        return None;
    }
    Some((host, port, path))
}

fn run() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Serve(a) => serve(a),
        Cmd::Send(a) => send(a),
        Cmd::Onoff(a) => run_onoff(a),
        Cmd::Qstats(a) => {
            let s = qstats::Sampler {
                devices: a.devices,
                interval_ns: a.interval_ns,
                start_ns: a.start_ns,
                duration_ns: a.duration_ns,
            };
            s.run(&mut std::io::stdout().lock())
        }
    }
}

/// `xfer onoff`: the source (or the sink) until its end, then its totals on stdout.
fn run_onoff(a: OnoffArgs) -> Result<()> {
    let line = match (a.sink, a.dst) {
        (Some(listen), _) => {
            let (packets, bytes) = onoff::sink(listen, a.duration)?;
            serde_json::json!({ "packets": packets, "bytes": bytes })
        }
        (None, Some(dst)) => {
            let s = onoff::Source {
                dst,
                bind: a.bind,
                rate_bps: a.rate.unwrap_or(0.0),
                mean_on: a.mean_on,
                mean_off: a.mean_off,
                size: a.size,
                seed: a.seed,
                duration: a.duration,
            };
            let sent = s.run()?;
            serde_json::json!({ "packets": sent.packets, "bytes": sent.bytes, "send_errors": sent.send_errors })
        }
        (None, None) => return Err(util::usage("--dst or --sink is needed")),
    };
    println!("{line}");
    Ok(())
}

/// `xfer serve`: the options checked, then the daemon.
fn serve(a: ServeArgs) -> Result<()> {
    let max_chunk = limits::size(
        "--max-chunk",
        &a.max_chunk,
        limits::CHUNK_MIN,
        limits::CHUNK_MAX,
    )?;
    let max_sessions = limits::count("--max-sessions", a.max_sessions, 1, limits::SESSIONS_MAX)?;
    let max_conns = limits::max_conns(a.max_conns, max_sessions)?;
    let rcvbuf = buffer_opt("--rcvbuf", &a.rcvbuf)?;
    let listen: std::net::SocketAddr = a.listen.parse().map_err(|_| {
        util::usage(format!(
            "--listen {:?} is not IP:PORT (examples: 0.0.0.0:7447, [::1]:0)",
            a.listen
        ))
    })?;
    server::serve(server::ServeOpts {
        listen,
        root: a.root,
        crypto: a.crypto.mode(a.insecure)?,
        auth: load_auth(&a.key_file, a.insecure)?,
        allow_cmd: a.allow_cmd,
        max_chunk: max_chunk as u32,
        max_sessions: max_sessions as usize,
        max_conns,
        rcvbuf,
    })
}

/// `xfer send`: what SRC and DEST are, where the data goes, the numbers checked, then the
/// transfer.
fn send(a: SendArgs) -> Result<()> {
    let (src, dest) = source_and_dest(&a)?;
    let Some((host, port, path)) = parse_remote(&dest).filter(|r| r.1 != 0) else {
        return Err(util::usage(format!(
            "DEST {dest:?} must be HOST:PORT:/path or HOST:PORT, with a port from 1 to 65535 \
             (local copies: use cp)"
        )));
    };
    let (sink, parent_must_exist) = sink_of(&a, &src, &dest, path)?;
    let (streams, auto) = autotune::parse_streams(&a.parallel, a.start_streams, a.max_streams)?;
    let chunk = limits::size("--chunk", &a.chunk, limits::CHUNK_MIN, limits::CHUNK_MAX)?;
    limits::streams_by_chunk(streams.into(), chunk)?;
    let interval = limits::duration(
        "--interval",
        &a.interval,
        limits::INTERVAL_MIN_S,
        limits::INTERVAL_MAX_S,
    )?;
    let retries = limits::count("--retries", a.retries.into(), 0, limits::RETRIES_MAX)? as u32;
    let rate_bps = limits::rate_opt("--rate", a.rate.as_deref())?;
    let deadline = a
        .deadline
        .as_deref()
        .map(|d| limits::duration("--deadline", d, limits::ZERO_S, limits::TRANSFER_TIME_MAX_S))
        .transpose()?;
    let mode = mode_of(&a)?;
    if let Some(j) = &a.json {
        inputfile::check_result_path("--json", j)?;
    }
    let auth = load_auth(&a.key_file, a.insecure)?;
    let paced = rate_bps.is_some() || deadline.is_some();
    let plan = a.plan.parse(paced, &auth)?;
    let pull = matches!(src, session::SrcSpec::Pull(_));
    autotune::refuse(auto, paced || plan.profile.is_some(), pull)?;
    client::send(session::SendOpts {
        src,
        host,
        port,
        sink,
        streams,
        auto,
        mode,
        chunk: chunk as u32,
        rate_bps,
        deadline,
        size: volume_opt("--size", &a.size)?,
        cc: a.cc,
        sndbuf: buffer_opt("--sndbuf", &a.sndbuf)?,
        rcvbuf: buffer_opt("--rcvbuf", &a.rcvbuf)?,
        hash: !a.no_hash,
        resume: match (a.no_resume, a.resume) {
            (true, _) => Some(false),
            (_, true) => Some(true),
            _ => None,
        },
        retries,
        crypto: a.crypto.mode(a.insecure)?,
        auth,
        json: a.json,
        interval,
        progress: !a.no_progress,
        quiet: a.quiet,
        expect_size: volume_opt("--expect-size", &a.expect_size)?,
        parent_must_exist,
        fault_reset_after: volume_opt("--fault-reset-after", &a.fault_reset_after)?,
        fault_stall_after: volume_opt("--fault-stall-after", &a.fault_stall_after)?,
        fault_before_retry: a.fault_before_retry,
        test_stream_rate: limits::rate_opt("--test-stream-rate", a.test_stream_rate.as_deref())?,
        args: std::env::args().collect(),
        profile: plan.profile,
        limiter: plan.limiter,
        timer_hz: plan.timer_hz,
        start_at: plan.start_at,
        connect_ahead: plan.connect_ahead,
        start_after_signal: plan.start_after_signal,
        signal_done: plan.signal_done,
        signal_token: plan.signal_token,
    })
}

/// The mode asked for. A `--to-cmd` consumer reads the data in order, so
/// it always goes in stream mode, whatever the source.
fn mode_of(a: &SendArgs) -> Result<Option<Mode>> {
    let mode = a.mode.map(|m| match m {
        ModeArg::Stripe => Mode::Stripe,
        ModeArg::Stream => Mode::Stream,
    });
    match (&a.to_cmd, mode) {
        (Some(_), Some(Mode::Stripe)) => Err(util::usage(
            "--to-cmd feeds a command its input in order, which is stream mode: leave out \
             --mode stripe",
        )),
        (Some(_), _) => Ok(Some(Mode::Stream)),
        (None, m) => Ok(m),
    }
}

/// SRC and DEST from the positional arguments: a send (file, stdin, mem:SIZE or
/// --from-cmd) or a pull (SRC = HOST:PORT:/path, where the send-only options are refused).
fn source_and_dest(a: &SendArgs) -> Result<(session::SrcSpec, String)> {
    let is_remote = |s: &str| {
        !std::path::Path::new(s).exists() && parse_remote(s).is_some_and(|(_, _, p)| p.is_some())
    };
    Ok(match (&a.from_cmd, a.args.as_slice()) {
        (Some(c), [d]) => (session::SrcSpec::Cmd(c.clone()), d.clone()),
        (Some(_), _) => return Err(util::usage("with --from-cmd give only DEST")),
        // Pull: SRC is on the server, DEST is local (or stdout).
        (None, [s, d]) if is_remote(s) => {
            if is_remote(d) {
                return Err(util::usage(
                    "SRC and DEST are both remote; one must be local",
                ));
            }
            refuse_for_pull(a)?;
            let local = if d == "-" {
                session::PullDest::Stdout
            } else {
                session::PullDest::File(PathBuf::from(d))
            };
            (session::SrcSpec::Pull(local), s.clone())
        }
        (None, [s, d]) => {
            let src = if s == "-" {
                session::SrcSpec::Stdin
            } else if let Some(n) = s.strip_prefix("mem:") {
                session::SrcSpec::Mem(limits::volume("mem:", n)?)
            } else {
                session::SrcSpec::Path(PathBuf::from(s))
            };
            if d == "-" {
                return Err(util::usage(
                    "DEST - (stdout) needs a remote SRC (HOST:PORT:/path)",
                ));
            }
            (src, d.clone())
        }
        (None, _) => {
            return Err(util::usage(
                "usage: xfer send SRC DEST (or --from-cmd CMD DEST)",
            ))
        }
    })
}

/// The options that only make sense when sending.
fn refuse_for_pull(a: &SendArgs) -> Result<()> {
    let bad = [
        (a.to_cmd.is_some(), "--to-cmd"),
        (a.discard, "--discard"),
        (a.resume, "--resume"),
        (a.size.is_some(), "--size"),
        (a.json.is_some(), "--json"),
        (a.expect_size.is_some(), "--expect-size"),
        (a.fault_reset_after.is_some(), "--fault-reset-after"),
        (a.fault_before_retry.is_some(), "--fault-before-retry"),
        (a.plan.given().is_some(), a.plan.given().unwrap_or_default()),
    ];
    if let Some((_, name)) = bad.iter().find(|b| b.0) {
        return Err(util::usage(format!(
            "{name} does not apply to a pull (SRC = HOST:PORT:/path)"
        )));
    }
    Ok(())
}

/// Where the data goes on the server: a path under its root (scp-like for DIR/), a
/// consumer command, or nowhere; and whether the path's directory must exist already.
fn sink_of(
    a: &SendArgs,
    src: &session::SrcSpec,
    dest: &str,
    path: Option<String>,
) -> Result<(Sink, bool)> {
    let path = path.filter(|p| !p.is_empty());
    Ok(match (path, a.to_cmd.clone(), a.discard) {
        (Some(p), None, false) => {
            // The path is always inside the server's root; a leading '/' just means
            // "the root".
            let mut p = p.trim_start_matches('/').to_string();
            if !(p.is_empty() || p.ends_with('/')) {
                return Ok((Sink::Path(p), false));
            }
            if matches!(src, session::SrcSpec::Pull(_)) {
                return Err(util::usage(format!("remote path {dest:?} names no file")));
            }
            // scp-like: DIR/ is an existing directory, and the file goes inside it under
            // the source's name.
            p.push_str(&into_dir_name(src, dest)?);
            (Sink::Path(p), true)
        }
        (None, Some(c), false) => (Sink::Cmd(c), false),
        (None, None, true) => (Sink::Discard, false),
        (None, None, false) => {
            return Err(util::usage(format!(
                "DEST {dest:?} has no path: add :/path, --to-cmd or --discard"
            )))
        }
        _ => {
            return Err(util::usage(
                "give exactly one of a DEST path, --to-cmd or --discard",
            ))
        }
    })
}

/// The name a file gets in a DEST that ends in '/': the source's own name.
fn into_dir_name(src: &session::SrcSpec, dest: &str) -> Result<String> {
    let name = match src {
        session::SrcSpec::Path(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()),
        _ => None,
    };
    match name {
        Some(n) if n != "." && n != ".." => Ok(n),
        _ => Err(util::usage(format!(
            "DEST {dest:?} ends in '/' (a directory), but the source has no file name to \
             give the file there: name the file after the '/'"
        ))),
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("xfer: error: {e:#}");
        // 2, as clap's own usage errors: the command was wrong, not the run.
        let usage = e.downcast_ref::<util::UsageError>().is_some();
        std::process::exit(if usage { 2 } else { 1 });
    }
}

#[cfg(test)]
mod tests {
    use super::parse_remote;

    #[test]
    fn remotes() {
        assert_eq!(
            parse_remote("h:7447:/a/b"),
            Some(("h".into(), 7447, Some("/a/b".into())))
        );
        assert_eq!(
            parse_remote("127.0.0.1:9"),
            Some(("127.0.0.1".into(), 9, None))
        );
        assert_eq!(
            parse_remote("[::1]:9:x"),
            Some(("::1".into(), 9, Some("x".into())))
        );
        assert_eq!(parse_remote("file.txt"), None);
        assert_eq!(parse_remote("a:b:c"), None);
    }
}
