//! `xfer send`: the sending side.

use crate::proto::*;
use crate::sock;
use crate::trace;
use crate::util::{hex, human_bytes, random_bytes};
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
    pub fault_reset_after: Option<u64>,
    pub args: Vec<String>,
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
    File {
        file: Arc<File>,
        size: u64,
    },
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
    let start_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let addr = (o.host.as_str(), o.port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {}:{}", o.host, o.port))?
        .next()
        .ok_or_else(|| anyhow!("no address for {}", o.host))?;
    if matches!(o.auth, Auth::Insecure) && !addr.ip().is_loopback() {
        bail!("no key: refusing to connect to non-loopback {addr} (pass --key-file)");
    }
    let mut attempt = 0;
    let out = loop {
        let r = match &o.src {
            SrcSpec::Pull(dest) => crate::pull::pull_once(&o, dest, addr, t0),
            _ => attempt_once(&o, addr, t0),
        };
        match r {
            Ok(out) => break out,
            Err(e) if e.retriable && attempt < o.retries => {
                attempt += 1;
                eprintln!(
                    "xfer: attempt {attempt} failed: {:#}; retrying (resume)",
                    e.err
                );
                std::thread::sleep(Duration::from_millis(300));
            }
            Err(e) => return Err(e.err),
        }
    };
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
                Some(h) => format!(", end-to-end xxh3-128 {h} verified"),
                None => ", hashing off".into(),
            }
        );
    }
    if let Some(path) = &o.json {
        let t = trace::build(
            &o,
            &out.done,
            out.mode,
            out.rate_bps,
            out.resumed,
            out.elapsed,
            start_unix,
            out.e2e.clone(),
            out.tcp,
        );
        let f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(f), &t)?;
    }
    Ok(())
}

fn open_source(o: &SendOpts) -> Result<Source> {
    Ok(match &o.src {
        SrcSpec::Path(p) => {
            let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
            let md = f.metadata()?;
            if md.is_dir() {
                bail!(
                    "{} is a directory (use --from-cmd \"tar cf - DIR\")",
                    p.display()
                );
            }
            if md.is_file() {
                Source::File {
                    size: md.len(),
                    file: Arc::new(f),
                }
            } else {
                Source::Pipe {
                    reader: Box::new(f),
                    child: None,
                }
            }
        }
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

fn src_id(o: &SendOpts, src: &Source) -> String {
    match (&o.src, src) {
        (SrcSpec::Path(p), Source::File { file, size }) => {
            let mt = file.metadata().ok().and_then(|m| m.modified().ok());
            let mt = mt
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            format!("file:{}:{size}:{mt}", p.display())
        }
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
            s.set_send_buffer_size(b)?;
        }
        if let Some(b) = o.rcvbuf {
            s.set_recv_buffer_size(b)?;
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

fn attempt_once(
    o: &SendOpts,
    addr: SocketAddr,
    t0: Instant,
) -> std::result::Result<Outcome, AttemptError> {
    let src = open_source(o)?;
    let (known_size, is_file) = match &src {
        Source::File { size, .. } => (Some(*size), true),
        Source::Mem { size } => (Some(*size), false),
        Source::Pipe { .. } => (o.size, false),
    };
    let mode = match (o.mode, &src) {
        (Some(Mode::Stripe), Source::Pipe { .. }) => {
            return Err(
                anyhow!("stripe mode needs a regular file (a pipe can only be streamed)").into(),
            )
        }
        (Some(m), _) => m,
        (None, Source::Pipe { .. }) => Mode::Stream,
        (None, _) => Mode::Stripe,
    };
    if matches!(o.sink, Sink::Cmd(_)) && mode != Mode::Stream {
        return Err(anyhow!("--to-cmd needs --mode stream").into());
    }
    // Files resume by default; a pipe only when asked (its producer must be
    // deterministic, which only the user knows).
    let resume = o.resume.unwrap_or(is_file) && matches!(o.sink, Sink::Path(_));
    let session = hex(&random_bytes::<16>()?);
    let req = Request {
        session: session.clone(),
        streams: o.streams,
        mode,
        chunk: o.chunk,
        size: if mode == Mode::Stripe {
            known_size
        } else {
            known_size.filter(|_| !matches!(src, Source::Pipe { .. }))
        },
        sink: o.sink.clone(),
        src_id: src_id(o, &src),
        hash: o.hash,
        resume,
        interval_ms: o.interval.as_millis() as u64,
        pull: false,
        cc: None,
    };
    let mut ctrl = connect(o, addr, false)?;
    send_msg(&mut ctrl, &Open::Control(req))?;
    let (have, resumed) = match recv_msg::<_, Reply>(&mut ctrl)? {
        Reply::Accept {
            have,
            resumed_bytes,
            ..
        } => (have, resumed_bytes),
        Reply::Reject(m) => return Err(anyhow!("server refused: {m}").into()),
        Reply::Joined => return Err(anyhow!("protocol error").into()),
    };
    let retriable = resume && is_file;
    let fail = |e: anyhow::Error| AttemptError { err: e, retriable };

    let mut conns = Vec::new();
    for i in 0..o.streams {
        let mut c = connect(o, addr, true).map_err(fail)?;
        send_msg(
            &mut c,
            &Open::Data {
                session: session.clone(),
                stream: i,
            },
        )
        .map_err(fail)?;
        match recv_msg::<_, Reply>(&mut c).map_err(fail)? {
            Reply::Joined => {}
            Reply::Reject(m) => return Err(fail(anyhow!("server refused data stream: {m}"))),
            _ => return Err(fail(anyhow!("protocol error"))),
        }
        conns.push(Arc::new(c));
    }

    let data_start = Instant::now();
    let remaining = known_size.map(|s| s.saturating_sub(resumed));
    let rate_bps = target_rate(o, remaining, t0)?;
    if let Some(r) = rate_bps {
        let per = pacing_per_socket(o, r);
        for c in &conns {
            sock::set_pacing(c.as_ref(), per)?;
        }
    }

    let abort = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let weak: Vec<Weak<TcpStream>> = conns.iter().map(Arc::downgrade).collect();
    let sampler_stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let weak = weak.clone();
        let stop = sampler_stop.clone();
        let iv = o.interval;
        std::thread::spawn(move || sample_tcp(weak, stop, iv, data_start))
    };
    let bar = progress_bar(o, known_size, resumed, sent.clone(), sampler_stop.clone());

    let chunk = o.chunk as u64;
    let mut producer_child = None;
    // Chunk hashes in order, for the end-to-end digest.
    let hashes: Arc<Mutex<Vec<u64>>>;
    let mut handles = Vec::new();
    let mut extra = Vec::new();
    match (mode, src) {
        (Mode::Stripe, src) => {
            let size = known_size.unwrap();
            let n = size.div_ceil(chunk);
            let mut have_v = vec![false; n as usize];
            for (a, b) in &have {
                for i in *a..(*b).min(n) {
                    have_v[i as usize] = true;
                }
            }
            let missing: Vec<u64> = (0..n).filter(|i| !have_v[*i as usize]).collect();
            hashes = Arc::new(Mutex::new(vec![0; n as usize]));
            let (file, zero) = match src {
                Source::File { file, .. } => (Some(file), None),
                _ => (None, Some(Arc::new(vec![0u8; o.chunk as usize]))),
            };
            if o.hash {
                // Hash what the receiver already has, so the end-to-end
                // digest also vouches for the resumed part.
                let skipped: Vec<u64> = (0..n).filter(|i| have_v[*i as usize]).collect();
                let (f, z, h) = (file.clone(), zero.clone(), hashes.clone());
                extra.push(std::thread::spawn(move || -> Result<()> {
                    let mut buf = vec![0u8; chunk as usize];
                    for i in skipped {
                        let len = chunk.min(size - i * chunk) as usize;
                        let d: &[u8] = match &f {
                            Some(f) => {
                                f.read_exact_at(&mut buf[..len], i * chunk)?;
                                &buf[..len]
                            }
                            None => &z.as_ref().unwrap()[..len],
                        };
                        h.lock().unwrap()[i as usize] = chunk_hash(d);
                    }
                    Ok(())
                }));
            }
            let per = missing.len().div_ceil(o.streams as usize).max(1);
            let mut groups: Vec<Vec<u64>> = missing.chunks(per).map(|c| c.to_vec()).collect();
            groups.resize(o.streams as usize, Vec::new());
            for (i, (c, g)) in conns.into_iter().zip(groups).enumerate() {
                let ctx = StripeCtx {
                    file: file.clone(),
                    zero: zero.clone(),
                    chunk,
                    size,
                    hash: o.hash,
                    hashes: hashes.clone(),
                    sent: sent.clone(),
                    abort: abort.clone(),
                    fault: if i == 0 { o.fault_reset_after } else { None },
                };
                handles.push(std::thread::spawn(move || stripe_sender(c, g, ctx)));
            }
        }
        (Mode::Stream, src) => {
            let skip = have.first().filter(|r| r.0 == 0).map(|r| r.1).unwrap_or(0);
            hashes = Arc::new(Mutex::new(Vec::new()));
            let (reader, mem): (Box<dyn Read + Send>, Option<u64>) = match src {
                Source::File { file, .. } => (Box::new(SharedFile(file, 0)), None),
                Source::Mem { size } => (Box::new(std::io::empty()), Some(size)),
                Source::Pipe { reader, child } => {
                    producer_child = child;
                    (reader, None)
                }
            };
            let shared = Arc::new(StreamSrc {
                chunk: chunk as usize,
                skip,
                hash: o.hash,
                hashes: hashes.clone(),
                abort: abort.clone(),
                zero: mem.map(|_| vec![0u8; chunk as usize]),
                st: Mutex::new(SrcState {
                    reader,
                    mem_left: mem,
                    seq: 0,
                    total: None,
                    child: producer_child.take(),
                    error: None,
                }),
            });
            for (i, c) in conns.into_iter().enumerate() {
                let (shared, sent) = (shared.clone(), sent.clone());
                let fault = if i == 0 { o.fault_reset_after } else { None };
                handles.push(std::thread::spawn(move || {
                    stream_sender(c, shared, sent, fault)
                }));
            }
        }
    }

    let mut first_err: Option<anyhow::Error> = None;
    let mut note = |r: Result<()>, abort: &AtomicBool| {
        if let Err(e) = r {
            // Keep the most telling error: one of our own beats a broken
            // send, which is usually just the consequence of an abort.
            let is_send = |e: &anyhow::Error| format!("{e:#}").contains("sending data");
            if first_err
                .as_ref()
                .is_none_or(|f| is_send(f) && !is_send(&e))
            {
                first_err = Some(e);
            }
            abort.store(true, Ordering::SeqCst);
            for w in &weak {
                if let Some(c) = w.upgrade() {
                    let _ = c.shutdown(Shutdown::Both);
                }
            }
        }
    };
    // Readers first: a failing producer must abort the senders.
    for h in extra {
        note(
            h.join().unwrap_or_else(|_| Err(anyhow!("worker panicked"))),
            &abort,
        );
    }
    for h in handles {
        note(
            h.join().unwrap_or_else(|_| Err(anyhow!("worker panicked"))),
            &abort,
        );
    }
    // The receiver commits (renames into place, lets a consumer finish) only
    // once our digest arrives and matches its own.
    if first_err.is_none() {
        let e2e = o.hash.then(|| e2e_digest(&hashes.lock().unwrap()));
        if let Err(e) = send_msg(&mut ctrl, &Finish { e2e }) {
            first_err = Some(e.context("sending end-to-end hash"));
        }
    }
    // The server's verdict explains most failures better than our EPIPE.
    // Without an error the verdict can take a while (fsync of a big file);
    // keepalive, not a timeout, catches a receiver host that vanished.
    ctrl.set_read_timeout(first_err.as_ref().map(|_| Duration::from_secs(5)))?;
    let done: Result<Done> = recv_msg(&mut ctrl);
    let elapsed = data_start.elapsed().as_secs_f64();
    sampler_stop.store(true, Ordering::SeqCst);
    let tcp = sampler.join().unwrap_or_default();
    if let Some(b) = bar {
        let _ = b.join();
    }
    // A broken send is better explained by the receiver; anything else
    // (producer failure, read error, injected fault) by us.
    let local_first = first_err
        .as_ref()
        .is_some_and(|e| !format!("{e:#}").contains("sending data"));
    let done = match (done, first_err) {
        (Ok(_), Some(e)) if local_first => return Err(fail(e)),
        (Ok(d), _) if d.error.is_some() => {
            return Err(fail(anyhow!("receiver: {}", d.error.unwrap())))
        }
        (Ok(_), Some(e)) | (Err(_), Some(e)) => return Err(fail(e)),
        (Err(e), None) => return Err(fail(e.context("receiver closed the control connection"))),
        (Ok(d), None) => d,
    };
    let e2e = if o.hash {
        let mine = e2e_digest(&hashes.lock().unwrap());
        match &done.e2e {
            Some(theirs) if *theirs == mine => Some(mine),
            Some(theirs) => {
                return Err(anyhow!(
                    "END-TO-END HASH MISMATCH (sent {mine}, received {theirs}); the destination is wrong \
                     (if resuming, the earlier partial data differs: rerun with --no-resume)"
                )
                .into())
            }
            None => return Err(anyhow!("receiver did not report an end-to-end hash").into()),
        }
    } else {
        None
    };
    Ok(Outcome {
        done,
        resumed,
        elapsed,
        rate_bps,
        mode,
        tcp,
        e2e,
    })
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
            let left = dl.as_secs_f64() - t0.elapsed().as_secs_f64();
            // Aim slightly early: ramp-up and the final acknowledgement cost time.
            let left = left - (left * 0.005).min(0.25);
            if left <= 0.0 {
                bail!("deadline already passed");
            }
            Some(((rem as f64 * 8.0 / left).ceil() as u64).max(1000))
        }
        _ => None,
    })
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
    pub hashes: Arc<Mutex<Vec<u64>>>,
    pub sent: Arc<AtomicU64>,
    pub abort: Arc<AtomicBool>,
    pub fault: Option<u64>,
}

fn write_frame(c: &TcpStream, hdr: FrameHdr, data: &[u8]) -> Result<()> {
    let mut w = c;
    w.write_all(&hdr.encode())?;
    w.write_all(data)?;
    Ok(())
}

/// Test hook: reset the connection (RST, via SO_LINGER 0) once `after`
/// bytes went out, to exercise recovery from a broken data stream.
fn maybe_fault(c: &mut Option<Arc<TcpStream>>, fault: Option<u64>, mine: u64) -> Result<()> {
    // One-shot per process, so a retry can succeed.
    static FIRED: AtomicBool = AtomicBool::new(false);
    if let Some(after) = fault {
        if mine >= after && !FIRED.swap(true, Ordering::SeqCst) {
            if let Some(s) = c.take() {
                let _ = socket2::SockRef::from(s.as_ref()).set_linger(Some(Duration::ZERO));
                drop(s);
            }
            bail!("injected connection reset (test hook)");
        }
    }
    Ok(())
}

pub(crate) fn stripe_sender(c: Arc<TcpStream>, chunks: Vec<u64>, x: StripeCtx) -> Result<()> {
    let mut buf = vec![0u8; x.chunk as usize];
    let mut c = Some(c);
    let mut mine = 0u64;
    for i in chunks {
        if x.abort.load(Ordering::Relaxed) {
            return Ok(());
        }
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
            c.as_ref().unwrap(),
            FrameHdr {
                kind: KIND_DATA,
                index: i,
                len: len as u32,
                hash: h,
            },
            data,
        )
        .context("sending data")?;
        if x.hash {
            x.hashes.lock().unwrap()[i as usize] = h;
        }
        x.sent.fetch_add(len as u64, Ordering::Relaxed);
        mine += len as u64;
        maybe_fault(&mut c, x.fault, mine)?;
    }
    write_frame(
        c.as_ref().unwrap(),
        FrameHdr {
            kind: KIND_END,
            index: 0,
            len: 0,
            hash: 0,
        },
        &[],
    )
    .context("sending data")
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
    hashes: Arc<Mutex<Vec<u64>>>,
    abort: Arc<AtomicBool>,
    zero: Option<Vec<u8>>,
    st: Mutex<SrcState>,
}

impl StreamSrc {
    /// A plain reader (no producer, nothing to skip), as the server uses for pulls.
    pub(crate) fn plain(
        reader: Box<dyn Read + Send>,
        chunk: usize,
        hash: bool,
        hashes: Arc<Mutex<Vec<u64>>>,
        abort: Arc<AtomicBool>,
    ) -> StreamSrc {
        StreamSrc {
            chunk,
            skip: 0,
            hash,
            hashes,
            abort,
            zero: None,
            st: Mutex::new(SrcState {
                reader,
                mem_left: None,
                seq: 0,
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
                buf.resize(self.chunk, 0);
                // Fill whole chunks so chunk boundaries are the same on a
                // re-run (pipe resume depends on it).
                let mut n = 0;
                while n < self.chunk {
                    match st.reader.read(&mut buf[n..]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            st.error = Some(format!("reading source: {e}"));
                            bail!("reading source: {e}");
                        }
                    }
                }
                n
            }
        };
        let seq = st.seq;
        if n > 0 {
            st.seq += 1;
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

pub(crate) fn stream_sender(
    c: Arc<TcpStream>,
    src: Arc<StreamSrc>,
    sent: Arc<AtomicU64>,
    fault: Option<u64>,
) -> Result<()> {
    let mut c = Some(c);
    let mut mine = 0u64;
    let mut buf = Vec::with_capacity(src.chunk);
    while let Some((seq, n)) = src.next(&mut buf)? {
        if src.abort.load(Ordering::Relaxed) {
            return Ok(());
        }
        // mem: sends one shared zero buffer, like stripe mode does.
        let buf = match &src.zero {
            Some(z) => &z[..n],
            None => &buf[..n],
        };
        let h = if src.hash { chunk_hash(buf) } else { 0 };
        if src.hash {
            let mut v = src.hashes.lock().unwrap();
            if v.len() <= seq as usize {
                v.resize(seq as usize + 1, 0);
            }
            v[seq as usize] = h;
        }
        if seq < src.skip {
            continue; // the receiver has it; hashed above for the e2e digest
        }
        write_frame(
            c.as_ref().unwrap(),
            FrameHdr {
                kind: KIND_DATA,
                index: seq,
                len: buf.len() as u32,
                hash: h,
            },
            buf,
        )
        .context("sending data")?;
        sent.fetch_add(buf.len() as u64, Ordering::Relaxed);
        mine += buf.len() as u64;
        maybe_fault(&mut c, fault, mine)?;
    }
    let total = src.st.lock().unwrap().total.unwrap_or(0);
    if src.abort.load(Ordering::SeqCst) {
        return Ok(());
    }
    write_frame(
        c.as_ref().unwrap(),
        FrameHdr {
            kind: KIND_END,
            index: total,
            len: 0,
            hash: 0,
        },
        &[],
    )
    .context("sending data")
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
        for (i, w) in conns.iter().enumerate() {
            // Upgrade only briefly so a dropped socket really closes.
            if let Some(s) = w.upgrade().and_then(|c| sock::tcp_info(c.as_ref())) {
                out.push(trace::TcpRow {
                    t,
                    flow_id: i as u32,
                    cwnd: s.cwnd,
                    ssthresh: s.ssthresh,
                    srtt_ms: s.srtt_ms,
                    retransmissions: s.retrans,
                });
            }
        }
    }
    out
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
