//! `xfer send`: the sending side.

use crate::chunkset;
use crate::fsinfo;
use crate::inputfile;
use crate::limiter::{Controller, Gate, Limiter, RateChange, RateControl, RatePlan, Targets};
use crate::limits::{RATE_MAX_BPS, RATE_MIN_BPS};
use crate::profile::Profile;
use crate::proto::*;
use crate::signal;
use crate::sock;
use crate::srcfile::{self, FileId, Watched};
use crate::start::{unix_now, Schedule};
use crate::trace;
use crate::util::{hex, human_bytes, random_bytes, usage};
use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::fs::FileExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

pub struct SendOpts {
    pub src: SrcSpec,
    pub host: String,
    pub port: u16,
    pub sink: Sink,
    pub streams: u32,
    pub mode: Option<Mode>,
    pub chunk: u32,
    pub rate_bps: Option<u64>,
    pub deadline: Option<Duration>,
    pub size: Option<u64>,
    pub cc: Option<String>,
    pub sndbuf: Option<usize>,
    pub rcvbuf: Option<usize>,
    pub hash: bool,
    pub resume: Option<bool>,
    pub retries: u32,
    pub auth: Auth,
    pub json: Option<std::path::PathBuf>,
    pub interval: Duration,
    pub progress: bool,
    pub quiet: bool,
    /// The source must be exactly this many bytes, or nothing is committed.
    pub expect_size: Option<u64>,
    /// DEST ended in '/': the directory must exist on the server.
    pub parent_must_exist: bool,
    /// Test hook: the receiver fails the first attempt once it has written
    /// this many bytes (see `Session::wrote` in server.rs).
    pub fault_reset_after: Option<u64>,
    /// Test hook: the senders (the server's, for a pull) stop once this many
    /// bytes went out, and wait for their connections to close.
    pub fault_stall_after: Option<u64>,
    /// Test hook: a command run (sh -c) before each retry.
    pub fault_before_retry: Option<String>,
    pub args: Vec<String>,
    /// `--rate-profile` (else `--rate`/`--deadline` make a one-step plan).
    pub profile: Option<Profile>,
    pub limiter: Limiter,
    pub timer_hz: u32,
    /// When the data starts: `--start-at`, `--start-after-signal`.
    pub start_at: Option<f64>,
    pub connect_ahead: Duration,
    pub start_after_signal: Option<String>,
    /// `--signal-done`: tell this listener once the transfer is committed.
    pub signal_done: Option<SocketAddr>,
    pub signal_token: String,
}

pub enum SrcSpec {
    Path(std::path::PathBuf),
    Stdin,
    Mem(u64),
    Cmd(String),
    /// Pull the file named by `sink` from the server (see pull.rs).
    Pull(PullDest),
}

pub enum PullDest {
    File(std::path::PathBuf),
    Stdout,
}

/// What one attempt needs from the source.
enum Source {
    /// A regular file whose size can be trusted: read by offset, resumable;
    /// held to what it was when the transfer started (srcfile.rs).
    File(Watched),
    Mem {
        size: u64,
    },
    Pipe {
        reader: Box<dyn Read + Send>,
        child: Option<Child>,
    },
}

pub(crate) struct Outcome {
    pub done: Done,
    pub resumed: u64,
    pub elapsed: f64,
    pub rate_bps: Option<u64>,
    pub mode: Mode,
    pub tcp: Vec<trace::TcpRow>,
    pub e2e: Option<String>,
    /// The rate plan followed (None: unlimited), and its steps as applied.
    pub plan: Option<RatePlan>,
    pub changes: Vec<RateChange>,
    /// Unix time the receiver's verdict arrived.
    pub end_unix: f64,
}

#[derive(Debug)]
pub(crate) struct AttemptError {
    pub err: anyhow::Error,
    /// True once data moved: a retry can then resume from the journal.
    pub retriable: bool,
}

impl<E: Into<anyhow::Error>> From<E> for AttemptError {
    fn from(e: E) -> Self {
        AttemptError {
            err: e.into(),
            retriable: false,
        }
    }
}

pub fn send(o: SendOpts) -> Result<()> {
    let t0 = Instant::now();
    let start_unix = unix_now();
    let addr = (o.host.as_str(), o.port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {}:{}", o.host, o.port))?
        .next()
        .ok_or_else(|| anyhow!("no address for {}", o.host))?;
    if matches!(o.auth, Auth::Insecure) && !addr.ip().is_loopback() {
        bail!("no key: refusing to connect to non-loopback {addr} (pass --key-file)");
    }
    // A trace that cannot be written must stop us before anything is sent,
    // not after the data is committed.
    let mut trace_file = o.json.as_deref().map(TraceFile::create).transpose()?;
    let mut sched = schedule(&o)?;
    sched.before_connect();
    let mut attempt = Attempt { n: 0, first: None };
    let out = loop {
        let r = match &o.src {
            SrcSpec::Pull(dest) => crate::pull::pull_once(&o, dest, addr, t0),
            _ => attempt_once(&o, addr, t0, &mut attempt, &mut sched),
        };
        match r {
            Ok(out) => break out,
            Err(e) if e.retriable && attempt.n < o.retries => {
                attempt.n += 1;
                eprintln!(
                    "xfer: attempt {} failed: {:#}; retrying (resume)",
                    attempt.n, e.err
                );
                std::thread::sleep(Duration::from_millis(300));
                before_retry(&o)?;
            }
            Err(e) => return Err(e.err),
        }
    };
    // Committed: the next transfer may start (first, before any reporting).
    let signalled = o
        .signal_done
        .map(|a| signal::send_signal(a, &o.signal_token, &o.auth, out.end_unix));
    let d = &out.done;
    if !o.quiet {
        eprintln!(
            "xfer: {} in {:.3} s, {:.3} Gbit/s goodput, {} streams ({}){}{}",
            human_bytes(d.bytes),
            out.elapsed,
            d.bytes as f64 * 8.0 / out.elapsed.max(1e-9) / 1e9,
            o.streams,
            out.mode.name(),
            if out.resumed > 0 {
                format!(", resumed after {}", human_bytes(out.resumed))
            } else {
                String::new()
            },
            match &out.e2e {
                Some(h) => format!(", end-to-end digest {h} verified"),
                None => ", hashing off".into(),
            }
        );
    }
    if let Some(tf) = trace_file.as_mut() {
        let t = trace::build(&o, &out, start_unix, sched.record(), signalled.as_ref());
        tf.commit(&t)?;
    }
    match signalled.and_then(|s| s.error.map(|e| (s.addr, e))) {
        Some((addr, e)) => {
            bail!("the transfer was committed, but the start signal to {addr} failed: {e}")
        }
        None => Ok(()),
    }
}

/// Which attempt this is, and the source file as the first one found it.
struct Attempt {
    n: u32,
    first: Option<FileId>,
}

/// Test hook (`--fault-before-retry`): a command run before a retry, e.g.
/// one that changes the source between two attempts.
fn before_retry(o: &SendOpts) -> Result<()> {
    if let Some(c) = &o.fault_before_retry {
        let st = Command::new("sh").arg("-c").arg(c).status()?;
        if !st.success() {
            bail!("--fault-before-retry {c:?} failed: {st}");
        }
    }
    Ok(())
}

/// The start of the data as asked: the signal listener is bound here, before
/// anything else, so a signal sent while we connect waits for us.
fn schedule(o: &SendOpts) -> Result<Schedule> {
    let listener = match &o.start_after_signal {
        Some(a) => {
            let l = signal::SignalListener::bind(a, &o.signal_token, &o.auth)?;
            // Readiness, as `serve` prints its address: a scheduler starts
            // the previous transfer's signal sender after this line.
            println!("xfer: waiting for a start signal on {}", l.local_addr());
            std::io::stdout().flush()?;
            Some(l)
        }
        None => None,
    };
    Ok(Schedule::new(
        o.start_at,
        o.connect_ahead,
        listener,
        o.quiet,
    ))
}

/// The `--json` trace, written beside its destination and renamed into
/// place when complete. Created before the transfer, so a destination that
/// cannot be written fails first.
struct TraceFile {
    tmp: std::path::PathBuf,
    dest: std::path::PathBuf,
    file: Option<File>,
}

impl TraceFile {
    fn create(dest: &std::path::Path) -> Result<TraceFile> {
        let name = dest
            .file_name()
            .ok_or_else(|| anyhow!("--json {} names no file", dest.display()))?;
        if dest.is_dir() {
            bail!("--json {} is a directory", dest.display());
        }
        let tmp = dest.with_file_name(format!(
            ".{}.xfer-tmp{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        // A new file of our own: never through a symlink planted at its name.
        let file = std::os::unix::fs::OpenOptionsExt::custom_flags(
            File::options().write(true).create_new(true),
            libc::O_NOFOLLOW,
        )
        .open(&tmp)
        .with_context(|| format!("cannot write the trace {}", dest.display()))?;
        Ok(TraceFile {
            tmp,
            dest: dest.to_path_buf(),
            file: Some(file),
        })
    }

    fn commit(&mut self, t: &trace::Trace) -> Result<()> {
        let f = self.file.take().unwrap();
        let mut w = std::io::BufWriter::new(f);
        serde_json::to_writer_pretty(&mut w, t)?;
        w.flush()
            .with_context(|| format!("writing the trace {}", self.dest.display()))?;
        std::fs::rename(&self.tmp, &self.dest)
            .with_context(|| format!("writing the trace {}", self.dest.display()))
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn open_source(o: &SendOpts, attempt: &mut Attempt) -> Result<Source> {
    Ok(match &o.src {
        SrcSpec::Path(p) => open_path(o, p, attempt)?,
        SrcSpec::Stdin => Source::Pipe {
            reader: Box::new(std::io::stdin()),
            child: None,
        },
        SrcSpec::Mem(n) => Source::Mem { size: *n },
        SrcSpec::Pull(_) => bail!("internal error: a pull has no local source"),
        SrcSpec::Cmd(c) => {
            let mut ch = Command::new("sh")
                .arg("-c")
                .arg(c)
                .stdout(Stdio::piped())
                .stdin(Stdio::null())
                .spawn()
                .with_context(|| format!("starting producer {c:?}"))?;
            Source::Pipe {
                reader: Box::new(ch.stdout.take().unwrap()),
                child: Some(ch),
            }
        }
    })
}

/// SRC as a path: a regular file of trusted size (held to what the first
/// attempt found, see srcfile.rs), or anything else read to its end like a
/// pipe: a file that states no size (procfs, sysfs, an empty file), a FIFO,
/// a device. A directory or a socket is refused.
fn open_path(o: &SendOpts, p: &std::path::Path, attempt: &mut Attempt) -> Result<Source> {
    let md = std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => usage(format!("SRC {}: no such file", p.display())),
        _ => anyhow!("SRC {}: {e}", p.display()),
    })?;
    let t = md.file_type();
    if t.is_dir() {
        return Err(usage(format!(
            "SRC {} is a directory (send it as a pipe: --from-cmd \"tar cf - DIR\")",
            p.display()
        )));
    }
    if std::os::unix::fs::FileTypeExt::is_socket(&t) {
        return Err(usage(format!(
            "SRC {} is a socket, not a file",
            p.display()
        )));
    }
    if !md.is_file() && !o.quiet {
        eprintln!(
            "xfer: SRC {} is {}: sending what it gives until its end, in stream mode",
            p.display(),
            inputfile::kind(&md)
        );
    }
    let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
    let md = f.metadata()?;
    let pseudo = fsinfo::is_pseudo(&f);
    if !md.is_file() || pseudo {
        return Ok(pipe(f));
    }
    // Procfs and sysfs state 0 or a page: those are read to their end,
    // never cut at their stated size; so is an empty file, held to stay so.
    if md.len() == 0 {
        return Ok(pipe(srcfile::Unsized::new(f, p)));
    }
    let id = FileId::of(&md);
    match &attempt.first {
        Some(first) => first.unchanged(p, &md)?,
        None => attempt.first = Some(id.clone()),
    }
    Ok(Source::File(Watched {
        file: Arc::new(f),
        path: p.to_path_buf(),
        id,
    }))
}

fn pipe(r: impl Read + Send + 'static) -> Source {
    Source::Pipe {
        reader: Box::new(r),
        child: None,
    }
}

fn src_id(o: &SendOpts, src: &Source) -> String {
    match (&o.src, src) {
        (SrcSpec::Path(p), Source::File(w)) => {
            let (file, size) = (&w.file, w.id.size);
            let mt = file.metadata().ok().and_then(|m| m.modified().ok());
            let mt = mt
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            format!("file:{}:{size}:{mt}", p.display())
        }
        (SrcSpec::Path(p), _) => format!("stream:{}", p.display()),
        (SrcSpec::Cmd(c), _) => format!("cmd:{c}"),
        (SrcSpec::Mem(n), _) => format!("mem:{n}"),
        (SrcSpec::Pull(_), _) => "pull".into(),
        _ => "stdin".into(),
    }
}

pub(crate) fn connect(o: &SendOpts, addr: SocketAddr, data: bool) -> Result<TcpStream> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    if data {
        // Buffers must be set before connect to take part in window scaling.
        if let Some(b) = o.sndbuf {
            sock::set_buffer(&s, sock::Buffer::Send, "--sndbuf", b)?;
        }
        if let Some(b) = o.rcvbuf {
            sock::set_buffer(&s, sock::Buffer::Receive, "--rcvbuf", b)?;
        }
        if let Some(cc) = &o.cc {
            sock::set_cc(&s, cc)?;
        }
    }
    s.connect_timeout(&addr.into(), Duration::from_secs(10))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_nodelay(true)?;
    s.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(Duration::from_secs(30))
            .with_interval(Duration::from_secs(10))
            .with_retries(6),
    )?;
    let mut t: TcpStream = s.into();
    t.set_read_timeout(Some(Duration::from_secs(30)))?;
    client_handshake(&mut t, &o.auth)?;
    t.set_read_timeout(None)?;
    Ok(t)
}

/// What one attempt has set up before its data starts.
struct Ready {
    src: Source,
    mode: Mode,
    known_size: Option<u64>,
    /// A failure from here on can be retried (a file that resumes).
    retriable: bool,
    ctrl: TcpStream,
    conns: Vec<Arc<TcpStream>>,
    /// Chunk ranges the receiver already holds.
    have: Vec<(u64, u64)>,
    resumed: u64,
    /// What the server understands (`FEATURE_*`).
    features: Vec<String>,
}

/// The error of an attempt that may be retried (resumed) if `retriable`.
fn failing(retriable: bool) -> impl Fn(anyhow::Error) -> AttemptError + Copy {
    move |err| AttemptError { err, retriable }
}

fn attempt_once(
    o: &SendOpts,
    addr: SocketAddr,
    t0: Instant,
    attempt: &mut Attempt,
    sched: &mut Schedule,
) -> std::result::Result<Outcome, AttemptError> {
    let (src, req, known_size, is_file) = plan_request(o, attempt)?;
    let ready = open_session(o, addr, src, req, known_size, is_file)?;
    let fail = failing(ready.retriable);
    // The first attempt waits for its start (a time, a signal) with the
    // session set up; a retry resumes at once, on the first one's time base.
    let origin = sched.wait_start().map_err(fail)?;
    let data_start = Instant::now();
    let remaining = known_size.map(|s| s.saturating_sub(ready.resumed));
    let since = if sched.is_scheduled() { origin } else { t0 };
    let plan = rate_plan(o, remaining, since)?;
    if plan.as_ref().is_some_and(|p| p.limiter == Limiter::Cwnd)
        && !ready.features.iter().any(|f| f == FEATURE_WINDOW_CLAMP)
    {
        return Err(anyhow!("the server's xfer is too old for --limiter cwnd: update it").into());
    }
    let (resumed, mode) = (ready.resumed, ready.mode);
    let run = DataRun::start(o, ready, plan.clone(), origin, data_start).map_err(fail)?;
    let (done, e2e, changes) = run.finish(o)?;
    let elapsed = data_start.elapsed().as_secs_f64();
    Ok(Outcome {
        done,
        resumed,
        elapsed,
        rate_bps: plan.as_ref().map(|p| p.profile.steps()[0].rate_bps),
        mode,
        tcp: changes.tcp,
        e2e,
        plan,
        changes: changes.rate,
        end_unix: unix_now(),
    })
}

/// Opens the source and builds the request for the receiver; also returns
/// the size if known and whether the source is a resumable file.
fn plan_request(
    o: &SendOpts,
    attempt: &mut Attempt,
) -> std::result::Result<(Source, Request, Option<u64>, bool), AttemptError> {
    let src = open_source(o, attempt)?;
    let (known_size, is_file) = match &src {
        Source::File(w) => (Some(w.id.size), true),
        Source::Mem { size } => (Some(*size), false),
        Source::Pipe { .. } => (o.expect_size.or(o.size), false),
    };
    if let (Some(want), Some(size), false) = (o.expect_size, known_size, is_pipe(&src)) {
        if size != want {
            return Err(anyhow!("the source is {size} bytes, not {want} (--expect-size)").into());
        }
    }
    let mode = match (o.mode, &src) {
        (Some(Mode::Stripe), Source::Pipe { .. }) => {
            return Err(usage(
                "stripe mode needs a regular file of known size (pipes, and files that do not \
                 state their size, such as those of /proc and /sys, are streamed)",
            )
            .into())
        }
        (Some(m), _) => m,
        (None, Source::Pipe { .. }) => Mode::Stream,
        (None, _) => Mode::Stripe,
    };
    if let (Some(rate), 0) = (o.rate_bps, attempt.n) {
        crate::eta::announce(known_size, rate, o.chunk, o.quiet)?;
    }
    // Files resume by default; a pipe only when asked (its producer must be
    // deterministic, which only the user knows).
    let resume = o.resume.unwrap_or(is_file) && matches!(o.sink, Sink::Path(_));
    if mode == Mode::Stripe {
        // The receiver keeps one bit per chunk: say so before connecting.
        check_chunk_count(known_size.unwrap_or(0), o.chunk)?;
    }
    let req = Request {
        session: hex(&random_bytes::<16>()?),
        streams: o.streams,
        mode,
        chunk: o.chunk,
        // A pipe's --size is only a hint for --deadline; --expect-size is a
        // promise the receiver checks too.
        size: match &src {
            Source::Pipe { .. } => o.expect_size,
            _ => known_size,
        },
        sink: o.sink.clone(),
        src_id: src_id(o, &src),
        hash: o.hash,
        resume,
        interval_ms: o.interval.as_millis() as u64,
        pull: false,
        cc: None,
        parent_must_exist: o.parent_must_exist,
        fault_reset_after: o.fault_reset_after.filter(|_| attempt.n == 0),
        fault_stall_after: None,
    };
    Ok((src, req, known_size, is_file))
}

fn is_pipe(src: &Source) -> bool {
    matches!(src, Source::Pipe { .. })
}

/// Sends the request, reads the receiver's answer, and joins the data
/// connections to the session.
fn open_session(
    o: &SendOpts,
    addr: SocketAddr,
    src: Source,
    req: Request,
    known_size: Option<u64>,
    is_file: bool,
) -> std::result::Result<Ready, AttemptError> {
    let (session, mode, resume) = (req.session.clone(), req.mode, req.resume);
    let mut ctrl = connect(o, addr, false)?;
    send_msg(&mut ctrl, &Open::Control(req))?;
    let (have, resumed, features) = match recv_msg::<_, Reply>(&mut ctrl)? {
        Reply::Accept {
            have,
            resumed_bytes,
            features,
            ..
        } => (have, resumed_bytes, features),
        Reply::Reject(m) => return Err(anyhow!("server refused: {m}").into()),
        Reply::Joined => return Err(anyhow!("protocol error").into()),
    };
    let retriable = resume && is_file;
    let fail = failing(retriable);
    let mut conns = Vec::new();
    for i in 0..o.streams {
        let mut c = connect(o, addr, true).map_err(fail)?;
        let join = Open::Data {
            session: session.clone(),
            stream: i,
        };
        send_msg(&mut c, &join).map_err(fail)?;
        match recv_msg::<_, Reply>(&mut c).map_err(fail)? {
            Reply::Joined => {}
            Reply::Reject(m) => return Err(fail(anyhow!("server refused data stream: {m}"))),
            _ => return Err(fail(anyhow!("protocol error"))),
        }
        conns.push(Arc::new(c));
    }
    Ok(Ready {
        src,
        mode,
        known_size,
        retriable,
        ctrl,
        conns,
        have,
        resumed,
        features,
    })
}

/// The plan this attempt follows: `--rate-profile`, or the one step of
/// `--rate` or `--deadline` (from the bytes left and the time left since
/// `since`). None: unlimited.
fn rate_plan(
    o: &SendOpts,
    remaining: Option<u64>,
    since: Instant,
) -> std::result::Result<Option<RatePlan>, AttemptError> {
    let profile = match &o.profile {
        Some(p) => Some(p.clone()),
        None => target_rate(o, remaining, since)?.map(Profile::constant),
    };
    Ok(profile.map(|profile| RatePlan {
        profile,
        limiter: o.limiter,
        timer_hz: o.timer_hz,
    }))
}

/// What the data phase measured besides the verdict.
struct Measured {
    tcp: Vec<trace::TcpRow>,
    rate: Vec<RateChange>,
}

/// The data phase of an attempt: senders, the rate controller, the TCP
/// sampler and the progress bar, all running.
struct DataRun {
    ctrl: TcpStream,
    retriable: bool,
    data_start: Instant,
    abort: Arc<AtomicBool>,
    /// The data connections, held open until the verdict: a sender thread is
    /// done when its last frame is in the socket buffer, but the kernel may
    /// still be resending its tail, and TCP_INFO must count that too.
    conns: Vec<Arc<TcpStream>>,
    sampler_stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<Vec<trace::TcpRow>>,
    bar: Option<std::thread::JoinHandle<()>>,
    controller: Option<Controller>,
    /// Each worker returns its share of the end-to-end digest; `readers`
    /// (hashing what the receiver already has) are joined first.
    readers: Vec<std::thread::JoinHandle<Result<E2e>>>,
    senders: Vec<std::thread::JoinHandle<Result<E2e>>>,
    /// A file's identity when opened, to catch one that changes while sent.
    watched: Option<Watched>,
}

impl DataRun {
    fn start(
        o: &SendOpts,
        r: Ready,
        plan: Option<RatePlan>,
        origin: Instant,
        data_start: Instant,
    ) -> Result<DataRun> {
        let abort = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let conns = r.conns.clone();
        let weak: Vec<Weak<TcpStream>> = conns.iter().map(Arc::downgrade).collect();
        let sampler_stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (weak, stop, iv) = (weak.clone(), sampler_stop.clone(), o.interval);
            std::thread::spawn(move || sample_tcp(weak, stop, iv, data_start))
        };
        let bar = progress_bar(
            o,
            r.known_size,
            r.resumed,
            sent.clone(),
            sampler_stop.clone(),
        );
        let ctl = plan.map(|p| RateControl::new(p, o.streams, o.chunk, origin, abort.clone()));
        let controller = match &ctl {
            Some(c) => Some(c.start(Targets {
                socks: weak.clone(),
                ctrl: match c.limiter() {
                    Limiter::Cwnd => Some(r.ctrl.try_clone()?),
                    _ => None,
                },
            })),
            None => None,
        };
        let gates = ctl.filter(|c| c.needs_gates());
        let watched = match &r.src {
            Source::File(w) => Some(w.clone()),
            _ => None,
        };
        let w = Workers {
            o,
            sent: &sent,
            abort: &abort,
            gates: gates.as_ref(),
        };
        let (readers, senders) = match r.mode {
            Mode::Stripe => w.spawn_stripe(r.src, r.known_size.unwrap(), &r.have, r.conns),
            Mode::Stream => w.spawn_stream(r.src, &r.have, r.conns),
        };
        Ok(DataRun {
            ctrl: r.ctrl,
            retriable: r.retriable,
            data_start,
            abort,
            conns,
            sampler_stop,
            sampler,
            bar,
            controller,
            readers,
            senders,
            watched,
        })
    }

    /// Waits for the senders, sends the end-to-end digest, and reads the
    /// receiver's verdict; checks the digests.
    fn finish(
        mut self,
        o: &SendOpts,
    ) -> std::result::Result<(Done, Option<String>, Measured), AttemptError> {
        let (mut first_err, e2e_sum) = self.join_workers();
        let rate = self
            .controller
            .take()
            .map(Controller::stop)
            .unwrap_or_default();
        // A source that changed explains any other failure (a truncated file
        // ends a read early), and is final: a retry would send another file.
        let changed = self.watched.as_ref().and_then(|w| w.check().err());
        let fail = failing(self.retriable && changed.is_none());
        if changed.is_some() {
            first_err = changed;
        }
        // The receiver commits (renames into place, lets a consumer finish)
        // only once our digest arrives and matches its own.
        if first_err.is_none() {
            let fin = Finish {
                e2e: o.hash.then(|| e2e_sum.hex()),
                data_start_ago: Some(self.data_start.elapsed().as_secs_f64()),
            };
            if let Err(e) = send_msg(&mut self.ctrl, &fin) {
                first_err = Some(e.context("sending end-to-end hash"));
            }
        }
        // The server's verdict explains most failures better than our EPIPE.
        // Without an error the verdict can take a while (fsync of a big
        // file); keepalive, not a timeout, catches a receiver host that
        // vanished. After an error it normally comes at once; the bound is
        // generous for a loaded machine and only matters for a stuck server.
        let timeout = first_err.as_ref().map(|_| Duration::from_secs(30));
        if first_err.is_some() {
            // No digest will come: the receiver stops waiting for one and
            // answers at once.
            let _ = self.ctrl.shutdown(Shutdown::Write);
        }
        self.ctrl
            .set_read_timeout(timeout)
            .map_err(|e| fail(e.into()))?;
        let done: Result<Done> = recv_msg(&mut self.ctrl);
        self.sampler_stop.store(true, Ordering::SeqCst);
        let mut tcp = self.sampler.join().unwrap_or_default();
        // The receiver has everything: what each connection resent is final.
        let t = self.data_start.elapsed().as_secs_f64();
        tcp.extend(tcp_rows(self.conns.iter().map(|c| Some(c.clone())), t));
        if let Some(b) = self.bar.take() {
            let _ = b.join();
        }
        let done = verdict(done, first_err, fail)?;
        let e2e = check_digest(o, &done, &e2e_sum)?;
        Ok((done, e2e, Measured { tcp, rate }))
    }

    /// Joins every worker; returns the most telling error (aborting the
    /// others at the first one) and the sum of their digests.
    fn join_workers(&mut self) -> (Option<anyhow::Error>, E2e) {
        let mut first_err: Option<anyhow::Error> = None;
        let mut e2e_sum = E2e::default();
        // Readers first: a failing producer must abort the senders.
        let workers: Vec<_> = self
            .readers
            .drain(..)
            .chain(self.senders.drain(..))
            .collect();
        for h in workers {
            match h.join().unwrap_or_else(|_| Err(anyhow!("worker panicked"))) {
                Ok(part) => e2e_sum.merge(part),
                Err(e) => {
                    // Keep the most telling error: one of our own beats a
                    // broken send, usually just the consequence of an abort.
                    let is_send = |e: &anyhow::Error| format!("{e:#}").contains("sending data");
                    if first_err
                        .as_ref()
                        .is_none_or(|f| is_send(f) && !is_send(&e))
                    {
                        first_err = Some(e);
                    }
                    self.abort.store(true, Ordering::SeqCst);
                    for c in &self.conns {
                        let _ = c.shutdown(Shutdown::Both);
                    }
                }
            }
        }
        (first_err, e2e_sum)
    }
}

/// The attempt's outcome from the receiver's verdict and our own first
/// error: a broken send is better explained by the receiver; anything else
/// (producer failure, read error, injected fault) by us.
fn verdict(
    done: Result<Done>,
    first_err: Option<anyhow::Error>,
    fail: impl Fn(anyhow::Error) -> AttemptError,
) -> std::result::Result<Done, AttemptError> {
    let local_first = first_err
        .as_ref()
        .is_some_and(|e| !format!("{e:#}").contains("sending data"));
    match (done, first_err) {
        (Ok(_), Some(e)) if local_first => Err(fail(e)),
        (Ok(d), _) if d.error.is_some() => Err(fail(anyhow!("receiver: {}", d.error.unwrap()))),
        (Ok(_), Some(e)) | (Err(_), Some(e)) => Err(fail(e)),
        (Err(e), None) => Err(fail(e.context("receiver closed the control connection"))),
        (Ok(d), None) => Ok(d),
    }
}

/// Our end-to-end digest against the receiver's (None: hashing off).
fn check_digest(
    o: &SendOpts,
    done: &Done,
    mine: &E2e,
) -> std::result::Result<Option<String>, AttemptError> {
    if !o.hash {
        return Ok(None);
    }
    let mine = mine.hex();
    match &done.e2e {
        Some(theirs) if *theirs == mine => Ok(Some(mine)),
        Some(theirs) => Err(anyhow!(
            "END-TO-END HASH MISMATCH (sent {mine}, received {theirs}); the destination is wrong \
             (if resuming, the earlier partial data differs: rerun with --no-resume)"
        )
        .into()),
        None => Err(anyhow!("receiver did not report an end-to-end hash").into()),
    }
}

type Worker = std::thread::JoinHandle<Result<E2e>>;

/// What the sender threads share.
struct Workers<'a> {
    o: &'a SendOpts,
    sent: &'a Arc<AtomicU64>,
    abort: &'a Arc<AtomicBool>,
    /// Set when senders must ask before each piece (pauses, the sleep limiter).
    gates: Option<&'a Arc<RateControl>>,
}

impl Workers<'_> {
    fn gate(&self) -> Option<Gate> {
        self.gates.map(Gate::new)
    }

    /// Stripe mode: the missing chunks in one contiguous range per stream.
    fn spawn_stripe(
        &self,
        src: Source,
        size: u64,
        have: &[(u64, u64)],
        conns: Vec<Arc<TcpStream>>,
    ) -> (Vec<Worker>, Vec<Worker>) {
        let o = self.o;
        let chunk = o.chunk as u64;
        let n = size.div_ceil(chunk);
        let missing = chunkset::missing(have, n);
        let (file, zero) = match src {
            Source::File(w) => (Some(w.file), None),
            _ => (None, Some(Arc::new(vec![0u8; o.chunk as usize]))),
        };
        let mut readers = Vec::new();
        if o.hash {
            // Hash what the receiver already has, so the end-to-end digest
            // also vouches for the resumed part.
            let skipped = chunkset::missing(&missing, n);
            let (f, z) = (file.clone(), zero.clone());
            readers.push(std::thread::spawn(move || {
                hash_skipped(&skipped, f, z, chunk, size)
            }));
        }
        let groups = chunkset::split(&missing, o.streams as usize);
        let senders = conns
            .into_iter()
            .zip(groups)
            .map(|(c, g)| {
                let ctx = StripeCtx {
                    file: file.clone(),
                    zero: zero.clone(),
                    chunk,
                    size,
                    hash: o.hash,
                    sent: self.sent.clone(),
                    abort: self.abort.clone(),
                    stall_after: o.fault_stall_after,
                    gate: self.gate(),
                };
                std::thread::spawn(move || stripe_sender(c, g, ctx))
            })
            .collect();
        (readers, senders)
    }

    /// Stream mode: every stream takes the next chunk of the shared source.
    fn spawn_stream(
        &self,
        src: Source,
        have: &[(u64, u64)],
        conns: Vec<Arc<TcpStream>>,
    ) -> (Vec<Worker>, Vec<Worker>) {
        let o = self.o;
        let chunk = o.chunk as usize;
        let skip = have.first().filter(|r| r.0 == 0).map(|r| r.1).unwrap_or(0);
        let (reader, mem, child): (Box<dyn Read + Send>, Option<u64>, _) = match src {
            // Exactly the size the transfer started with: a file that grows
            // is caught at the end (srcfile.rs), not followed for ever.
            Source::File(w) => (Box::new(SharedFile(w.file, 0).take(w.id.size)), None, None),
            Source::Mem { size } => (Box::new(std::io::empty()), Some(size), None),
            Source::Pipe { reader, child } => (reader, None, child),
        };
        let shared = Arc::new(StreamSrc {
            chunk,
            skip,
            hash: o.hash,
            abort: self.abort.clone(),
            zero: mem.map(|_| vec![0u8; chunk]),
            expect: o.expect_size,
            st: Mutex::new(SrcState {
                reader,
                mem_left: mem,
                seq: 0,
                read: 0,
                total: None,
                child,
                error: None,
            }),
        });
        let senders = conns
            .into_iter()
            .map(|c| {
                let (shared, sent) = (shared.clone(), self.sent.clone());
                let (stall, gate) = (o.fault_stall_after, self.gate());
                std::thread::spawn(move || stream_sender(c, shared, sent, stall, gate))
            })
            .collect();
        (Vec::new(), senders)
    }
}

/// Hashes the chunks the receiver already has (for the end-to-end digest).
fn hash_skipped(
    skipped: &[(u64, u64)],
    file: Option<Arc<File>>,
    zero: Option<Arc<Vec<u8>>>,
    chunk: u64,
    size: u64,
) -> Result<E2e> {
    let mut buf = vec![0u8; chunk as usize];
    let mut e2e = E2e::default();
    for i in skipped.iter().flat_map(|&(a, b)| a..b) {
        let len = chunk.min(size - i * chunk) as usize;
        let d: &[u8] = match &file {
            Some(f) => {
                f.read_exact_at(&mut buf[..len], i * chunk)
                    .context("reading source")?;
                &buf[..len]
            }
            None => &zero.as_ref().unwrap()[..len],
        };
        e2e.add(i, chunk_hash(d));
    }
    Ok(e2e)
}

/// Goodput target in bit/s from --rate, or from --deadline and the bytes
/// still to send.
pub(crate) fn target_rate(
    o: &SendOpts,
    remaining: Option<u64>,
    t0: Instant,
) -> Result<Option<u64>> {
    Ok(match (o.rate_bps, o.deadline) {
        (Some(r), _) => Some(r),
        (None, Some(dl)) => {
            let rem = remaining
                .ok_or_else(|| anyhow!("--deadline with a pipe of unknown size needs --size"))?;
            Some(deadline_rate(
                rem,
                dl.as_secs_f64() - t0.elapsed().as_secs_f64(),
            )?)
        }
        _ => None,
    })
}

/// The goodput (bit/s) that moves `remaining` bytes in `left` seconds,
/// aiming slightly early: ramp-up and the final acknowledgement cost time.
fn deadline_rate(remaining: u64, left: f64) -> Result<u64> {
    let left = left - (left * 0.005).min(0.25);
    if left <= 0.0 {
        bail!("deadline already passed");
    }
    let rate = (remaining as f64 * 8.0 / left).ceil() as u64;
    // Past the highest rate, pacing would not hold the data back anyway.
    Ok(rate.clamp(RATE_MIN_BPS.value, RATE_MAX_BPS.value))
}

/// Pacing: aggregate goodput split evenly, scaled up by frame overhead so
/// the payload arrives at the requested rate (pacing counts every byte).
pub(crate) fn pacing_per_socket(o: &SendOpts, rate_bps: u64) -> u64 {
    let overhead = (o.chunk as f64 + FRAME_HDR_LEN as f64) / o.chunk as f64;
    (rate_bps as f64 / 8.0 / o.streams as f64 * overhead).ceil() as u64
}

/// One stripe sender's share of the work; the server uses it for pulls.
pub(crate) struct StripeCtx {
    pub file: Option<Arc<File>>,
    pub zero: Option<Arc<Vec<u8>>>,
    pub chunk: u64,
    pub size: u64,
    pub hash: bool,
    /// Bytes sent by all streams together.
    pub sent: Arc<AtomicU64>,
    pub abort: Arc<AtomicBool>,
    pub stall_after: Option<u64>,
    /// Asked before each piece of payload (a plan that pauses, the sleep
    /// limiter); None: write whole frames.
    pub gate: Option<Gate>,
}

/// Writes a frame; with a gate, its payload in the pieces the gate admits
/// (the header goes with the first).
fn write_frame(c: &TcpStream, hdr: FrameHdr, data: &[u8], gate: Option<&mut Gate>) -> Result<()> {
    let mut w = c;
    let Some(g) = gate.filter(|_| !data.is_empty()) else {
        w.write_all(&hdr.encode())?;
        w.write_all(data)?;
        return Ok(());
    };
    let mut rest = data;
    let mut first = true;
    while !rest.is_empty() {
        let n = g.piece().min(rest.len());
        if !g.admit(n) {
            bail!("transfer aborted");
        }
        if first {
            w.write_all(&hdr.encode())?;
            first = false;
        }
        w.write_all(&rest[..n])?;
        rest = &rest[n..];
    }
    Ok(())
}

/// Test hook (`--fault-stall-after`): once `after` bytes went out on all
/// streams together, stop sending and wait for the connection to close (the
/// peer never writes on a data connection, so only its end or ours ends the
/// wait). A transfer stalled this way cannot finish, so a test can kill
/// either end "mid-transfer" without racing the end of the transfer.
fn stall_if_due(c: &TcpStream, after: Option<u64>, sent: &AtomicU64) -> Result<()> {
    if after.is_some_and(|n| sent.load(Ordering::SeqCst) >= n) {
        let _ = (&*c).read(&mut [0u8; 1]);
        bail!("sending data: connection closed while stalled (test hook)");
    }
    Ok(())
}

/// Sends the chunks of `ranges` in order, then an END frame; returns this
/// stream's share of the end-to-end digest.
pub(crate) fn stripe_sender(
    c: Arc<TcpStream>,
    ranges: Vec<(u64, u64)>,
    mut x: StripeCtx,
) -> Result<E2e> {
    let mut buf = vec![0u8; x.chunk as usize];
    let mut e2e = E2e::default();
    for i in ranges.into_iter().flat_map(|(a, b)| a..b) {
        if x.abort.load(Ordering::Relaxed) {
            return Ok(e2e);
        }
        stall_if_due(&c, x.stall_after, &x.sent)?;
        let len = x.chunk.min(x.size - i * x.chunk) as usize;
        let data: &[u8] = match &x.file {
            Some(f) => {
                f.read_exact_at(&mut buf[..len], i * x.chunk)
                    .context("reading source")?;
                &buf[..len]
            }
            None => &x.zero.as_ref().unwrap()[..len],
        };
        let h = if x.hash { chunk_hash(data) } else { 0 };
        write_frame(
            &c,
            FrameHdr {
                kind: KIND_DATA,
                index: i,
                len: len as u32,
                hash: h,
            },
            data,
            x.gate.as_mut(),
        )
        .context("sending data")?;
        e2e.add(i, h);
        x.sent.fetch_add(len as u64, Ordering::Relaxed);
    }
    write_frame(
        &c,
        FrameHdr {
            kind: KIND_END,
            index: 0,
            len: 0,
            hash: 0,
        },
        &[],
        None,
    )
    .context("sending data")?;
    Ok(e2e)
}

pub(crate) struct SharedFile(pub Arc<File>, pub u64);
impl Read for SharedFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read_at(buf, self.1)?;
        self.1 += n as u64;
        Ok(n)
    }
}

struct SrcState {
    reader: Box<dyn Read + Send>,
    /// Some(bytes left) for the mem: source, which needs no reading.
    mem_left: Option<u64>,
    seq: u64,
    /// Bytes taken from the source so far.
    read: u64,
    /// Set at end of input: the number of chunks.
    total: Option<u64>,
    child: Option<Child>,
    error: Option<String>,
}

impl Drop for SrcState {
    fn drop(&mut self) {
        // Only reached with a child still here if the transfer was aborted.
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The source of stream mode, shared by all sender threads: each takes the
/// next chunk itself, which avoids a reader thread and a hand-off per chunk.
pub(crate) struct StreamSrc {
    chunk: usize,
    skip: u64,
    hash: bool,
    abort: Arc<AtomicBool>,
    zero: Option<Vec<u8>>,
    /// --expect-size: the source must be exactly this long.
    expect: Option<u64>,
    st: Mutex<SrcState>,
}

impl StreamSrc {
    /// A plain reader (no producer, nothing to skip), as the server uses for pulls.
    pub(crate) fn plain(
        reader: Box<dyn Read + Send>,
        chunk: usize,
        hash: bool,
        abort: Arc<AtomicBool>,
    ) -> StreamSrc {
        StreamSrc {
            chunk,
            skip: 0,
            hash,
            abort,
            zero: None,
            expect: None,
            st: Mutex::new(SrcState {
                reader,
                mem_left: None,
                seq: 0,
                read: 0,
                total: None,
                child: None,
                error: None,
            }),
        }
    }

    /// Fills `buf` with the next chunk; None at end of input.
    fn next(&self, buf: &mut Vec<u8>) -> Result<Option<(u64, usize)>> {
        let mut st = self.st.lock().unwrap();
        if let Some(e) = &st.error {
            bail!("{e}");
        }
        if st.total.is_some() {
            return Ok(None);
        }
        let n = match st.mem_left {
            Some(left) => {
                let n = left.min(self.chunk as u64) as usize;
                st.mem_left = Some(left - n as u64);
                n
            }
            None => {
                // Fill whole chunks so chunk boundaries are the same on a
                // re-run (pipe resume depends on it). The buffer is touched
                // only as bytes arrive.
                buf.clear();
                let chunk = self.chunk as u64;
                match (&mut st.reader).take(chunk).read_to_end(buf) {
                    Ok(n) => n,
                    Err(e) => {
                        st.error = Some(format!("reading source: {e}"));
                        bail!("reading source: {e}");
                    }
                }
            }
        };
        let seq = st.seq;
        if n > 0 {
            st.seq += 1;
        }
        st.read += n as u64;
        if let Some(want) = self.expect.filter(|w| st.read > *w) {
            st.error = Some(format!(
                "the source is longer than --expect-size {want}; nothing was committed"
            ));
            bail!("{}", st.error.as_ref().unwrap());
        }
        if n < self.chunk {
            // End of input: a producer that failed must not look like a
            // complete stream to the receiver.
            if let Some(mut c) = st.child.take() {
                match c.wait() {
                    Ok(s) if s.success() => {}
                    Ok(s) => st.error = Some(format!("producer command failed: {s}")),
                    Err(e) => st.error = Some(format!("waiting for producer: {e}")),
                }
            }
            if let Some(want) = self.expect.filter(|w| st.read != *w) {
                st.error = Some(format!(
                    "the source ended after {} bytes, but --expect-size is {want}; nothing was \
                     committed",
                    st.read
                ));
            }
            if st.seq < self.skip {
                st.error = Some(
                    "source is shorter than what the receiver already has; rerun with --no-resume"
                        .into(),
                );
            }
            if let Some(e) = &st.error {
                bail!("{e}");
            }
            st.total = Some(st.seq);
        }
        Ok((n > 0).then_some((seq, n)))
    }
}

/// Takes chunks from the shared source and sends them until its end, then an
/// END frame with the chunk count; returns this stream's share of the
/// end-to-end digest (chunks the receiver already has are hashed, not sent).
pub(crate) fn stream_sender(
    c: Arc<TcpStream>,
    src: Arc<StreamSrc>,
    sent: Arc<AtomicU64>,
    stall_after: Option<u64>,
    mut gate: Option<Gate>,
) -> Result<E2e> {
    let mut buf = Vec::with_capacity(src.chunk);
    let mut e2e = E2e::default();
    while let Some((seq, n)) = src.next(&mut buf)? {
        if src.abort.load(Ordering::Relaxed) {
            return Ok(e2e);
        }
        // mem: sends one shared zero buffer, like stripe mode does.
        let buf = match &src.zero {
            Some(z) => &z[..n],
            None => &buf[..n],
        };
        let h = if src.hash { chunk_hash(buf) } else { 0 };
        e2e.add(seq, h);
        if seq < src.skip {
            continue; // the receiver has it; hashed for the e2e digest
        }
        stall_if_due(&c, stall_after, &sent)?;
        write_frame(
            &c,
            FrameHdr {
                kind: KIND_DATA,
                index: seq,
                len: buf.len() as u32,
                hash: h,
            },
            buf,
            gate.as_mut(),
        )
        .context("sending data")?;
        sent.fetch_add(buf.len() as u64, Ordering::Relaxed);
    }
    let total = src.st.lock().unwrap().total.unwrap_or(0);
    if src.abort.load(Ordering::SeqCst) {
        return Ok(e2e);
    }
    write_frame(
        &c,
        FrameHdr {
            kind: KIND_END,
            index: total,
            len: 0,
            hash: 0,
        },
        &[],
        None,
    )
    .context("sending data")?;
    Ok(e2e)
}

pub(crate) fn sample_tcp(
    conns: Vec<Weak<TcpStream>>,
    stop: Arc<AtomicBool>,
    iv: Duration,
    t0: Instant,
) -> Vec<trace::TcpRow> {
    let mut out = Vec::new();
    let mut next = Instant::now() + iv;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if next > now {
            std::thread::sleep((next - now).min(Duration::from_millis(20)));
            continue;
        }
        next += iv;
        let t = t0.elapsed().as_secs_f64();
        // Upgrade only briefly so a dropped socket really closes.
        out.extend(tcp_rows(conns.iter().map(Weak::upgrade), t));
    }
    out
}

/// One TCP_INFO row per connection still open (flow id: its position).
fn tcp_rows(conns: impl Iterator<Item = Option<Arc<TcpStream>>>, t: f64) -> Vec<trace::TcpRow> {
    conns
        .enumerate()
        .filter_map(|(i, c)| {
            let s = sock::tcp_info(c?.as_ref())?;
            Some(trace::TcpRow {
                t,
                flow_id: i as u32,
                cwnd: s.cwnd,
                ssthresh: s.ssthresh,
                srtt_ms: s.srtt_ms,
                retransmissions: s.retrans,
            })
        })
        .collect()
}

pub(crate) fn progress_bar(
    o: &SendOpts,
    size: Option<u64>,
    resumed: u64,
    sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    use std::io::IsTerminal;
    if !o.progress || o.quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    Some(std::thread::spawn(move || {
        let pb = match size {
            Some(s) => indicatif::ProgressBar::new(s),
            None => indicatif::ProgressBar::no_length(),
        };
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta} ({elapsed})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        while !stop.load(Ordering::SeqCst) {
            pb.set_position(resumed + sent.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(100));
        }
        pb.set_position(resumed + sent.load(Ordering::Relaxed));
        pb.finish();
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_rate_covers_what_is_left() {
        // 8 MiB in 2 s: 33.5 Mbit/s, plus 0.5 % of margin.
        let r = deadline_rate(8 << 20, 2.0).unwrap() as f64;
        let want = (8u64 << 20) as f64 * 8.0 / 2.0;
        assert!(r > want && r < want * 1.006, "{r} vs {want}");
        // The margin is at most 0.25 s.
        let r = deadline_rate(1 << 30, 100.0).unwrap() as f64;
        assert!((r - (1u64 << 30) as f64 * 8.0 / 99.75).abs() < 2.0);
        assert!(deadline_rate(1, -0.1).is_err());
        assert_eq!(deadline_rate(1 << 50, 1e-3).unwrap(), RATE_MAX_BPS.value);
    }
}
