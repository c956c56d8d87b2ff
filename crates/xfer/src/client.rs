//! `xfer send`: the sending side of a push (a pull is pull.rs), and the
//! attempts of either: retries, the start schedule, the `--json` trace. The
//! data itself moves through the send engine (send/).

use crate::autorun::{AutoRun, Driver};
use crate::autotune::AutoStep;
use crate::conn::Conn;
use crate::limiter::{Controller, Limiter, RateChange, RateControl, RatePlan, Targets};
use crate::monitor::{progress_bar, sample_tcp, tcp_rows, TcpRow};
use crate::profile::Profile;
use crate::proto::*;
use crate::send::pacing::target_rate;
use crate::send::share::Shared;
use crate::send::source::{open_source, Source, StreamSrc};
use crate::send::workers::{Spawner, Worker, Workers};
use crate::session::{connect, failing, join_data, AttemptError, Outcome, SendOpts, SrcSpec};
use crate::signal;
use crate::srcfile::{FileId, Watched};
use crate::start::Schedule;
use crate::trace;
use crate::util::{hex, human_bytes, random_bytes, unix_now, usage};
use anyhow::{anyhow, bail, Context, Result};
use std::io::Write;
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

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
    let mut trace_file = o
        .json
        .as_deref()
        .map(trace::TraceFile::create)
        .transpose()?;
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
            "xfer: {} in {:.3} s, {:.3} Gbit/s goodput, {} streams{} ({}){}{}",
            human_bytes(d.bytes),
            out.elapsed,
            d.bytes as f64 * 8.0 / out.elapsed.max(1e-9) / 1e9,
            out.streams,
            match o.auto {
                Some(_) => " (auto)",
                None => "",
            },
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

/// What one attempt has set up before its data starts.
struct Ready {
    src: Source,
    mode: Mode,
    known_size: Option<u64>,
    /// A failure from here on can be retried (a file that resumes).
    retriable: bool,
    ctrl: Conn,
    conns: Vec<Arc<Conn>>,
    /// Chunk ranges the receiver already holds.
    have: Vec<(u64, u64)>,
    resumed: u64,
    /// What the server understands (`FEATURE_*`).
    features: Vec<String>,
    /// Where late data connections join (`--streams auto`).
    addr: SocketAddr,
    session: String,
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
    let encrypted = ready.ctrl.encrypted() && ready.conns.iter().all(|c| c.encrypted());
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
        encrypted,
        auto_steps: changes.steps,
        streams: changes.streams,
    })
}

/// Opens the source and builds the request for the receiver; also returns
/// the size if known and whether the source is a resumable file.
fn plan_request(
    o: &SendOpts,
    attempt: &mut Attempt,
) -> std::result::Result<(Source, Request, Option<u64>, bool), AttemptError> {
    let src = open_source(o, &mut attempt.first)?;
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
    if o.auto.is_some() && mode == Mode::Stream {
        return Err(usage(
            "--streams auto needs stripe mode (a file or mem:); give a pipe or --to-cmd a number of streams",
        )
        .into());
    }
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
    let opened = match o.auto {
        Some(_) if !features.iter().any(|f| f == FEATURE_LATE_JOIN) => {
            return Err(
                anyhow!("the server's xfer is too old for --streams auto: update it").into(),
            )
        }
        Some(a) => a.start,
        None => o.streams,
    };
    let mut conns = Vec::new();
    let dial = o.dial();
    for i in 0..opened {
        let c = join_data(&dial, addr, &session, i).map_err(fail)?;
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
        addr,
        session,
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
    tcp: Vec<TcpRow>,
    rate: Vec<RateChange>,
    /// `--streams auto`: the search's ticks; the streams opened.
    steps: Vec<AutoStep>,
    streams: u32,
}

/// The data phase of an attempt: senders, the rate controller, the TCP
/// sampler and the progress bar, all running.
struct DataRun {
    ctrl: Conn,
    retriable: bool,
    data_start: Instant,
    abort: Arc<AtomicBool>,
    /// The data connections, held open until the verdict: a sender thread is
    /// done when its last frame is in the socket buffer, but the kernel may
    /// still be resending its tail, and TCP_INFO must count that too.
    conns: Vec<Arc<Conn>>,
    sampler_stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<Vec<TcpRow>>,
    bar: Option<std::thread::JoinHandle<()>>,
    controller: Option<Controller>,
    /// Each worker returns its share of the end-to-end digest; `readers`
    /// (hashing what the receiver already has) are joined first.
    readers: Vec<std::thread::JoinHandle<Result<E2e>>>,
    senders: Vec<std::thread::JoinHandle<Result<E2e>>>,
    /// A file's identity when opened, to catch one that changes while sent.
    watched: Option<Watched>,
    /// `--streams auto`: the search, adding and parking streams.
    auto: Option<AutoRun>,
}

impl DataRun {
    fn start(
        o: &SendOpts,
        mut r: Ready,
        plan: Option<RatePlan>,
        origin: Instant,
        data_start: Instant,
    ) -> Result<DataRun> {
        let abort = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let conns = r.conns.clone();
        let weak: Vec<Weak<Conn>> = conns.iter().map(Arc::downgrade).collect();
        let sampler_stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (weak, stop, iv) = (weak.clone(), sampler_stop.clone(), o.interval);
            std::thread::spawn(move || sample_tcp(weak, stop, iv, data_start))
        };
        let bar = progress_bar(
            o.progress && !o.quiet,
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
            chunk: o.chunk,
            streams: o.streams,
            hash: o.hash,
            stall_after: o.fault_stall_after,
            sent: &sent,
            abort: &abort,
            gates: gates.as_ref(),
        };
        let first = r.conns.clone();
        let (readers, senders, shared) = spawn_senders(o, &w, &mut r, abort.clone());
        let auto = shared.map(|(shared, spawn)| {
            AutoRun::start(Driver {
                dial: o.dial(),
                addr: r.addr,
                session: r.session.clone(),
                opts: o.auto.unwrap(),
                shared,
                spawn,
                first,
                data_start,
                quiet: o.quiet,
            })
        });
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
            auto,
        })
    }

    /// Waits for the senders, sends the end-to-end digest, and reads the
    /// receiver's verdict; checks the digests.
    fn finish(
        mut self,
        o: &SendOpts,
    ) -> std::result::Result<(Done, Option<String>, Measured), AttemptError> {
        let (mut first_err, mut e2e_sum) = self.join_workers();
        // The streams the search added: joined once it stopped adding.
        let (steps, streams_used) = match self.auto.take().map(AutoRun::stop) {
            Some(g) => {
                self.conns.extend(g.conns);
                self.senders = g.workers;
                let (err, part) = self.join_workers();
                e2e_sum.merge(part);
                first_err = first_err.or(err);
                (g.steps, Some(self.conns.len() as u32))
            }
            None => (Vec::new(), None),
        };
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
                streams_used,
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
        let streams = streams_used.unwrap_or(o.streams);
        Ok((
            done,
            e2e,
            Measured {
                tcp,
                rate,
                steps,
                streams,
            },
        ))
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

/// Readers, senders, and for `--streams auto` the shared queue and what
/// starts a later stream's sender.
type Senders = (Vec<Worker>, Vec<Worker>, Option<(Arc<Shared>, Spawner)>);

/// The senders: stripe (one range per stream, or with `--streams auto` a
/// shared queue, returned with what starts a later stream's sender) or
/// stream mode. Returns the readers, the senders, and that queue.
fn spawn_senders(o: &SendOpts, w: &Workers, r: &mut Ready, abort: Arc<AtomicBool>) -> Senders {
    let src = std::mem::replace(&mut r.src, Source::Mem { size: 0 });
    let conns = std::mem::take(&mut r.conns);
    let file = match (&src, r.mode) {
        (Source::File(w), Mode::Stripe) => Some(w.file.clone()),
        _ => None,
    };
    match (r.mode, o.auto) {
        (Mode::Stripe, Some(a)) => {
            let size = r.known_size.unwrap();
            let (readers, shared, spawn) = w.spawn_shared(file, size, &r.have, a.start);
            let senders = (0..).zip(conns).map(|(i, c)| spawn(i, c)).collect();
            (readers, senders, Some((shared, spawn)))
        }
        (Mode::Stripe, None) => {
            let (readers, senders) = w.spawn_stripe(file, r.known_size.unwrap(), &r.have, conns);
            (readers, senders, None)
        }
        (Mode::Stream, _) => {
            let skip = r.have.first().filter(|r| r.0 == 0).map(|r| r.1);
            let chunk = o.chunk as usize;
            let src = StreamSrc::new(src, skip.unwrap_or(0), chunk, o.hash, abort, o.expect_size);
            (Vec::new(), w.spawn_stream(Arc::new(src), conns), None)
        }
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
