//! `xfer serve`: the receiver daemon.

use crate::client;
use crate::journal::{self, Journal};
use crate::proto::*;
use crate::safepath;
use anyhow::{anyhow, bail, Context, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub struct ServeOpts {
    pub listen: String,
    pub root: PathBuf,
    pub auth: Auth,
    pub allow_cmd: bool,
    pub max_chunk: u32,
    pub max_sessions: usize,
    pub rcvbuf: Option<usize>,
}

struct Server {
    opts: ServeOpts,
    root: OwnedFd,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    busy: Mutex<HashSet<String>>,
    busy_cv: Condvar,
    /// Pull sessions: stream count and where their data connections go.
    pulls: Mutex<HashMap<String, (u32, DataTx)>>,
}

/// Hands a pull's data connections (stream index, socket) to its control thread.
type DataTx = mpsc::Sender<(u32, TcpStream)>;

pub fn serve(opts: ServeOpts) -> Result<()> {
    let root = std::fs::canonicalize(&opts.root)
        .with_context(|| format!("root directory {}", opts.root.display()))?;
    if !root.is_dir() {
        bail!("root {} is not a directory", root.display());
    }
    let addr: std::net::SocketAddr = opts.listen.parse().with_context(|| {
        format!(
            "invalid listen address {:?} (example: 0.0.0.0:7447)",
            opts.listen
        )
    })?;
    if matches!(opts.auth, Auth::Insecure) && !addr.ip().is_loopback() {
        bail!(
            "--insecure is only allowed on a loopback address; use --key-file to listen on {}",
            addr.ip()
        );
    }
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    sock.set_reuse_address(true)?;
    if let Some(b) = opts.rcvbuf {
        // Set on the listener so accepted sockets inherit it before the
        // handshake fixes the window scale.
        sock.set_recv_buffer_size(b)?;
    }
    sock.bind(&addr.into())
        .with_context(|| format!("binding {addr}"))?;
    sock.listen(128)?;
    let listener: TcpListener = sock.into();
    let bound = listener.local_addr()?;
    // Tests and scripts read this line to learn the port (readiness signal).
    println!("xfer: listening on {bound}");
    std::io::stdout().flush()?;
    eprintln!("xfer: root {}", root.display());
    let srv = Arc::new(Server {
        root: safepath::open_root(&root)?,
        opts: ServeOpts { root, ..opts },
        sessions: Mutex::new(HashMap::new()),
        busy: Mutex::new(HashSet::new()),
        busy_cv: Condvar::new(),
        pulls: Mutex::new(HashMap::new()),
    });
    // Bounds threads (and memory) under a flood of connections, including
    // unauthenticated ones.
    static CONNS: AtomicU64 = AtomicU64::new(0);
    const MAX_CONNS: u64 = 1024;
    struct ConnSlot;
    impl Drop for ConnSlot {
        fn drop(&mut self) {
            CONNS.fetch_sub(1, Ordering::SeqCst);
        }
    }
    for conn in listener.incoming() {
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                eprintln!("xfer: accept: {e}");
                continue;
            }
        };
        if CONNS.fetch_add(1, Ordering::SeqCst) >= MAX_CONNS {
            CONNS.fetch_sub(1, Ordering::SeqCst);
            eprintln!("xfer: too many connections; dropping one");
            continue;
        }
        let slot = ConnSlot;
        let srv = srv.clone();
        std::thread::spawn(move || {
            let _slot = slot;
            let peer = conn.peer_addr().map(|a| a.to_string()).unwrap_or_default();
            if let Err(e) = handle_conn(&srv, conn) {
                eprintln!("xfer: {peer}: {e:#}");
            }
        });
    }
    Ok(())
}

fn handle_conn(srv: &Arc<Server>, mut conn: TcpStream) -> Result<()> {
    // Unauthenticated peers get a short leash.
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.set_nodelay(true)?;
    server_handshake(&mut conn, &srv.opts.auth)?;
    let open: Open = recv_msg(&mut conn)?;
    conn.set_read_timeout(None)?;
    // A client host that vanishes without a FIN/RST must not pin a session.
    let _ = socket2::SockRef::from(&conn).set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(Duration::from_secs(30))
            .with_interval(Duration::from_secs(10))
            .with_retries(6),
    );
    match open {
        Open::Control(req) => handle_control(srv, conn, req),
        Open::Data { session, stream } => {
            let pull = srv.pulls.lock().unwrap().get(&session).cloned();
            if let Some((streams, tx)) = pull {
                if stream >= streams {
                    send_msg(&mut conn, &Reply::Reject("bad data stream".into()))?;
                    bail!("bad data stream {stream}");
                }
                send_msg(&mut conn, &Reply::Joined)?;
                let _ = tx.send((stream, conn));
                return Ok(());
            }
            let s = srv.sessions.lock().unwrap().get(&session).cloned();
            let Some(s) = s else {
                send_msg(&mut conn, &Reply::Reject("unknown session".into()))?;
                bail!("data connection for unknown session");
            };
            handle_data(&s, conn, stream)
        }
    }
}

enum Output {
    Discard,
    File,
    Cmd(ChildStdin),
}

struct FileSink {
    dir: OwnedFd,
    name: String,
    part: String,
    jname: String,
    file: File,
    journal: Mutex<Journal>,
}

#[derive(Default)]
struct State {
    failed: Option<String>,
    finished: bool,
    ended: u32,
    // Stripe mode: which chunks are verified, and their hashes.
    have: Vec<bool>,
    have_count: u64,
    hashes: Vec<u64>,
    // Stream mode: reorder buffer.
    next: u64,
    total: Option<u64>,
    reorder: BTreeMap<u64, (Vec<u8>, u64)>,
    /// A data thread is writing chunks out in order (the "write token").
    writing: bool,
    /// The sender's end-to-end digest (inner None: hashing off), once sent.
    finish: Option<Option<String>>,
    /// Threads blocked on the reorder window; waking nobody is cheaper.
    window_waiters: u32,
    writer_done: bool,
    conns: Vec<TcpStream>,
    joined: Vec<bool>,
}

struct Slot {
    bytes: AtomicU64,
    first: Mutex<Option<f64>>,
    end: Mutex<Option<f64>>,
}

struct Session {
    req: Request,
    start: Instant,
    nchunks: u64,
    fsink: Option<FileSink>,
    cap: u64,
    state: Mutex<State>,
    cv: Condvar,
    slots: Vec<Slot>,
    stop_sampler: AtomicBool,
    /// Recycled chunk buffers (stream mode): fresh 1 MiB allocations cost
    /// page faults and zeroing on every chunk.
    pool: Mutex<Vec<Vec<u8>>>,
    /// Stream mode output; only the thread holding the write token uses it.
    output: Mutex<Option<Output>>,
}

impl Session {
    fn fail(&self, msg: String) {
        let mut st = self.state.lock().unwrap();
        if st.finished || st.failed.is_some() {
            return;
        }
        st.failed = Some(msg);
        // Unblock every data thread; they must not keep writing.
        for c in &st.conns {
            let _ = c.shutdown(Shutdown::Both);
        }
        self.cv.notify_all();
    }

    fn failed(&self) -> bool {
        self.state.lock().unwrap().failed.is_some()
    }

    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn chunk_len(&self, index: u64) -> u64 {
        let c = self.req.chunk as u64;
        match self.req.size {
            Some(sz) => c.min(sz.saturating_sub(index * c)),
            None => c,
        }
    }
}

struct BusyGuard<'a>(&'a Server, String);
impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0.busy.lock().unwrap().remove(&self.1);
        self.0.busy_cv.notify_all();
    }
}

struct SessionGuard<'a>(&'a Server, String);
impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        self.0.sessions.lock().unwrap().remove(&self.1);
    }
}

fn validate(srv: &Server, req: &Request) -> Result<()> {
    if req.streams == 0 || req.streams > 128 {
        bail!("stream count {} out of range 1..=128", req.streams);
    }
    if req.chunk == 0 || req.chunk > srv.opts.max_chunk {
        bail!(
            "chunk size {} out of range 1..={}",
            req.chunk,
            srv.opts.max_chunk
        );
    }
    if req.streams as u64 * req.chunk as u64 > 256 << 20 {
        bail!("streams x chunk size exceeds 256 MiB of receive buffers; use a smaller --chunk");
    }
    if req.session.len() != 32 {
        bail!("bad session id");
    }
    if req.mode == Mode::Stripe && req.size.is_none() && !req.pull {
        bail!("stripe mode needs a known size");
    }
    if let Some(sz) = req.size {
        if sz.div_ceil(req.chunk as u64) > (1 << 32) {
            bail!("too many chunks; use a larger --chunk");
        }
    }
    if req.interval_ms < 10 {
        bail!("sampling interval too small");
    }
    if let Sink::Cmd(_) = req.sink {
        if !srv.opts.allow_cmd {
            bail!("this server does not run commands (start it with --allow-cmd)");
        }
        if req.mode != Mode::Stream {
            bail!("--to-cmd needs stream mode");
        }
    }
    Ok(())
}

fn handle_control(srv: &Arc<Server>, mut conn: TcpStream, req: Request) -> Result<()> {
    if let Err(e) = validate(srv, &req) {
        send_msg(&mut conn, &Reply::Reject(format!("{e:#}")))?;
        return Err(e);
    }
    let active = srv.sessions.lock().unwrap().len() + srv.pulls.lock().unwrap().len();
    if active >= srv.opts.max_sessions {
        send_msg(
            &mut conn,
            &Reply::Reject("server busy (too many sessions)".into()),
        )?;
        bail!("too many sessions");
    }
    if req.pull {
        return handle_pull(srv, conn, req);
    }
    let mut _busy = None;
    if let Sink::Path(p) = &req.sink {
        let key = safepath::components(p)
            .map(|c| c.join("/"))
            .unwrap_or_default();
        // A previous session on this path may still be tearing down
        // (e.g. a retry right after a reset), so wait a little.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut busy = srv.busy.lock().unwrap();
        while busy.contains(&key) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(busy);
                send_msg(
                    &mut conn,
                    &Reply::Reject(format!("destination {p:?} is busy")),
                )?;
                bail!("destination busy");
            }
            busy = srv.busy_cv.wait_timeout(busy, left).unwrap().0;
        }
        busy.insert(key.clone());
        _busy = Some(BusyGuard(srv, key));
    }
    let prepared = prepare(srv, &req);
    let (session, have, resumed_bytes, child) = match prepared {
        Ok(x) => x,
        Err(e) => {
            send_msg(&mut conn, &Reply::Reject(format!("{e:#}")))?;
            return Err(e);
        }
    };
    let id = req.session.clone();
    srv.sessions
        .lock()
        .unwrap()
        .insert(id.clone(), session.clone());
    let _sg = SessionGuard(srv, id.clone());
    send_msg(
        &mut conn,
        &Reply::Accept {
            have,
            resumed_bytes,
            size: None,
        },
    )?;

    // A client that disappears must not leave the session hanging.
    let watcher = {
        let s = session.clone();
        let mut c = conn.try_clone()?;
        std::thread::spawn(move || {
            // The client's only message: its end-to-end digest, once all data
            // is sent. Nothing is committed before it arrives and matches.
            if let Ok(f) = recv_msg::<_, Finish>(&mut c) {
                s.state.lock().unwrap().finish = Some(f.e2e);
                s.cv.notify_all();
                let mut b = [0u8; 1];
                let _ = c.read(&mut b);
            }
            s.fail("client closed the control connection".into());
        })
    };
    let sampler = {
        let s = session.clone();
        std::thread::spawn(move || sample_goodput(&s))
    };
    let mut child = child;

    // Wait until all streams are done (and everything is written) or failure.
    {
        let mut st = session.state.lock().unwrap();
        loop {
            if st.failed.is_some() {
                break;
            }
            let data_done = st.ended == req.streams && (req.mode == Mode::Stripe || st.writer_done);
            if data_done && req.mode == Mode::Stripe && st.have_count < session.nchunks {
                let missing = session.nchunks - st.have_count;
                drop(st);
                session.fail(format!("sender finished but {missing} chunks are missing"));
                break;
            }
            if data_done && st.finish.is_some() {
                break;
            }
            st = session.cv.wait(st).unwrap();
        }
    }
    let mut mismatch = false;
    let mut result: Result<()> = {
        let st = session.state.lock().unwrap();
        match (&st.failed, &st.finish) {
            (Some(e), _) => Err(anyhow!(e.clone())),
            (None, Some(Some(theirs))) if req.hash => {
                let mine = e2e_digest(&st.hashes);
                if *theirs == mine {
                    Ok(())
                } else {
                    mismatch = true;
                    Err(anyhow!(
                        "END-TO-END HASH MISMATCH (sender {theirs}, receiver {mine}): the data \
                         differs from the source; nothing was committed"
                    ))
                }
            }
            (None, Some(None)) if req.hash => Err(anyhow!("sender sent no end-to-end hash")),
            _ => Ok(()),
        }
    };
    if let Some(c) = child.as_mut() {
        if result.is_err() {
            // A consumer must not mistake a truncated stream for a complete one.
            let _ = c.kill();
        }
        // Closing the consumer's stdin tells it the stream is complete.
        session.output.lock().unwrap().take();
        match c.wait() {
            Ok(st) if !st.success() && result.is_ok() => {
                result = Err(anyhow!("consumer command failed: {st}"))
            }
            Err(e) if result.is_ok() => result = Err(anyhow!("waiting for consumer: {e}")),
            _ => {}
        }
    }
    if result.is_ok() {
        if let Some(fs) = &session.fsink {
            result = (|| {
                fs.file.sync_data().context("syncing received data")?;
                safepath::rename(&fs.dir, &fs.part, &fs.name)?;
                safepath::unlink(&fs.dir, &fs.jname);
                Ok(())
            })();
        }
    } else if mismatch {
        // The journal vouched for data that does not match the source (a
        // producer that changed): forget it so the next attempt starts fresh.
        if let Some(fs) = &session.fsink {
            safepath::unlink(&fs.dir, &fs.jname);
            safepath::unlink(&fs.dir, &fs.part);
        }
    }
    session.output.lock().unwrap().take();
    // Stop accepting a failure from the watcher from now on.
    {
        let mut st = session.state.lock().unwrap();
        if let Err(e) = &result {
            if st.failed.is_none() {
                st.failed = Some(format!("{e:#}"));
            }
        }
        st.finished = true;
        for c in &st.conns {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
    session.stop_sampler.store(true, Ordering::SeqCst);
    let goodput = sampler.join().unwrap_or_default();
    let elapsed = session.now();
    let st = session.state.lock().unwrap();
    let e2e = req.hash.then(|| e2e_digest(&st.hashes));
    let flows: Vec<FlowReport> = session
        .slots
        .iter()
        .enumerate()
        .map(|(i, sl)| FlowReport {
            stream: i as u32,
            start: sl.first.lock().unwrap().unwrap_or(0.0),
            end: sl.end.lock().unwrap().unwrap_or(elapsed),
            bytes: sl.bytes.load(Ordering::Relaxed),
        })
        .collect();
    let bytes: u64 = flows.iter().map(|f| f.bytes).sum();
    let total_size = req.size.unwrap_or(0).max(resumed_bytes + bytes);
    drop(st);
    let done = Done {
        error: result.as_ref().err().map(|e| format!("{e:#}")),
        e2e,
        bytes,
        total_size,
        elapsed,
        flows,
        goodput,
    };
    let sink = match &req.sink {
        Sink::Path(p) => p.clone(),
        Sink::Cmd(c) => format!("cmd {c:?}"),
        Sink::Discard => "discard".into(),
    };
    match &done.error {
        None => eprintln!(
            "xfer: session {}: {} -> {} in {:.3} s ({:.3} Gbit/s, {} streams, {})",
            &id[..8],
            crate::util::human_bytes(bytes),
            sink,
            elapsed,
            bytes as f64 * 8.0 / elapsed.max(1e-9) / 1e9,
            req.streams,
            req.mode.name()
        ),
        Some(e) => eprintln!("xfer: session {} to {sink} failed: {e}", &id[..8]),
    }
    let _ = send_msg(&mut conn, &done);
    let _ = conn.shutdown(Shutdown::Both);
    let _ = watcher.join();
    Ok(())
}

type Prepared = (Arc<Session>, Vec<(u64, u64)>, u64, Option<Child>);

fn prepare(srv: &Server, req: &Request) -> Result<Prepared> {
    let nchunks = req.size.map(|s| s.div_ceil(req.chunk as u64)).unwrap_or(0);
    let mut st = State::default();
    let mut have_ranges = Vec::new();
    let mut resumed = 0u64;
    let mut fsink = None;
    let mut child = None;
    match &req.sink {
        Sink::Path(p) => {
            let (dir, name) = safepath::open_parent(&srv.root, p)?;
            safepath::check_target(&dir, &name)?;
            let part = format!(".{name}.xfer-part");
            let jname = format!(".{name}.xfer-journal");
            let rw = libc::O_RDWR | libc::O_CREAT;
            let file = safepath::open_file(&dir, &part, rw)?;
            let jfile = safepath::open_file(&dir, &jname, rw)?;
            let header = journal::Header {
                src_id: req.src_id.clone(),
                mode: req.mode.name().into(),
                chunk: req.chunk,
                size: req.size,
                hash: req.hash,
            };
            let (journal, records) = Journal::open(jfile, &header, req.resume)?;
            let flen = file.metadata()?.len();
            let c = req.chunk as u64;
            let mut buf = vec![0u8; req.chunk as usize];
            // Re-check what the journal claims against the data on disk, so a
            // crash between data and journal writes cannot smuggle in junk.
            let mut verify = |idx: u64, len: u64, h: u64| -> bool {
                let b = &mut buf[..len as usize];
                idx * c + len <= flen
                    && file.read_exact_at(b, idx * c).is_ok()
                    && (!req.hash || chunk_hash(b) == h)
            };
            match req.mode {
                Mode::Stripe => {
                    st.have = vec![false; nchunks as usize];
                    st.hashes = vec![0; nchunks as usize];
                    for (idx, h) in records {
                        if idx < nchunks
                            && !st.have[idx as usize]
                            && verify(idx, c.min(req.size.unwrap() - idx * c), h)
                        {
                            st.have[idx as usize] = true;
                            st.hashes[idx as usize] = h;
                            st.have_count += 1;
                            resumed += c.min(req.size.unwrap() - idx * c);
                        }
                    }
                    let mut i = 0;
                    while i < nchunks {
                        if st.have[i as usize] {
                            let s = i;
                            while i < nchunks && st.have[i as usize] {
                                i += 1;
                            }
                            have_ranges.push((s, i));
                        } else {
                            i += 1;
                        }
                    }
                    if !req.resume || st.have_count == 0 {
                        file.set_len(0)?;
                    }
                    file.set_len(req.size.unwrap())?;
                }
                Mode::Stream => {
                    // Only a verified prefix is usable: the producer is re-run.
                    for (i, (idx, h)) in records.into_iter().enumerate() {
                        let len = c.min(flen.saturating_sub(idx * c));
                        if idx != i as u64
                            || len == 0
                            || (len < c && idx * c + len != flen)
                            || !verify(idx, len, h)
                        {
                            break;
                        }
                        st.hashes.push(h);
                        resumed += len;
                        st.next = idx + 1;
                        if len < c {
                            break;
                        }
                    }
                    if st.next > 0 {
                        have_ranges.push((0, st.next));
                    }
                    file.set_len(resumed)?;
                }
            }
            if resumed == 0 {
                // Journal records that failed verification must not linger.
                drop(journal);
                let jfile = safepath::open_file(&dir, &jname, rw)?;
                let (j, _) = Journal::open(jfile, &header, false)?;
                fsink = Some(FileSink {
                    dir,
                    name,
                    part,
                    jname,
                    file,
                    journal: Mutex::new(j),
                });
            } else {
                fsink = Some(FileSink {
                    dir,
                    name,
                    part,
                    jname,
                    file,
                    journal: Mutex::new(journal),
                });
            }
        }
        Sink::Cmd(cmd) => {
            let c = Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .current_dir(&srv.opts.root)
                .stdin(Stdio::piped())
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("starting consumer {cmd:?}"))?;
            child = Some(c);
        }
        Sink::Discard => {
            if req.mode == Mode::Stripe {
                st.have = vec![false; nchunks as usize];
                st.hashes = vec![0; nchunks as usize];
            }
        }
    }
    st.joined = vec![false; req.streams as usize];
    let output = match child.as_mut() {
        Some(c) => Output::Cmd(c.stdin.take().unwrap()),
        None if fsink.is_some() => Output::File,
        None => Output::Discard,
    };
    let session = Arc::new(Session {
        req: req.clone(),
        start: Instant::now(),
        nchunks,
        fsink,
        // Reorder window: enough to ride out a stream stalling for a few
        // scheduler slices at tens of Gbit/s, bounded to 256 MiB per session.
        cap: ((16u64 << 20) * req.streams as u64).clamp(64 << 20, 256 << 20) / req.chunk as u64,
        state: Mutex::new(st),
        cv: Condvar::new(),
        slots: (0..req.streams)
            .map(|_| Slot {
                bytes: AtomicU64::new(0),
                first: Mutex::new(None),
                end: Mutex::new(None),
            })
            .collect(),
        stop_sampler: AtomicBool::new(false),
        pool: Mutex::new(Vec::new()),
        output: Mutex::new(Some(output)),
    });
    Ok((session, have_ranges, resumed, child))
}

fn handle_data(s: &Arc<Session>, mut conn: TcpStream, stream: u32) -> Result<()> {
    {
        let mut st = s.state.lock().unwrap();
        if stream >= s.req.streams
            || st.joined[stream as usize]
            || st.failed.is_some()
            || st.finished
        {
            drop(st);
            send_msg(&mut conn, &Reply::Reject("bad or duplicate stream".into()))?;
            bail!("bad or duplicate data stream {stream}");
        }
        st.joined[stream as usize] = true;
        st.conns.push(conn.try_clone()?);
    }
    send_msg(&mut conn, &Reply::Joined)?;
    if let Err(e) = receive_stream(s, &mut conn, stream) {
        s.fail(format!("stream {stream}: {e:#}"));
    }
    Ok(())
}

fn receive_stream(s: &Session, conn: &mut TcpStream, stream: u32) -> Result<()> {
    let slot = &s.slots[stream as usize];
    let mut buf = vec![0u8; s.req.chunk as usize];
    let mut hdr = [0u8; FRAME_HDR_LEN];
    loop {
        conn.read_exact(&mut hdr).context("connection lost")?;
        let h = FrameHdr::decode(&hdr)?;
        if s.failed() {
            return Ok(());
        }
        match h.kind {
            KIND_END => {
                let mut st = s.state.lock().unwrap();
                if s.req.mode == Mode::Stream {
                    if st.total.is_some_and(|t| t != h.index) || h.index < st.next {
                        bail!("inconsistent chunk count at end of stream");
                    }
                    st.total = Some(h.index);
                    if st.next == h.index && !st.writing {
                        st.writer_done = true;
                    }
                }
                st.ended += 1;
                *slot.end.lock().unwrap() = Some(s.now());
                s.cv.notify_all();
                return Ok(());
            }
            KIND_DATA => {}
            k => bail!("unknown frame kind {k}"),
        }
        if h.len == 0 || h.len > s.req.chunk {
            bail!("bad frame length {}", h.len);
        }
        if slot.first.lock().unwrap().is_none() {
            *slot.first.lock().unwrap() = Some(s.now());
        }
        match s.req.mode {
            Mode::Stripe => {
                if h.index >= s.nchunks || h.len as u64 != s.chunk_len(h.index) {
                    bail!("bad chunk index {} / length {}", h.index, h.len);
                }
                let b = &mut buf[..h.len as usize];
                let got = read_counted(conn, b, &slot.bytes, s.req.hash)?;
                if s.req.hash && got != h.hash {
                    bail!("chunk {} failed its integrity check", h.index);
                }
                if let Some(fs) = &s.fsink {
                    fs.file
                        .write_all_at(b, h.index * s.req.chunk as u64)
                        .context("writing data")?;
                    fs.journal.lock().unwrap().append(h.index, h.hash)?;
                }
                let mut st = s.state.lock().unwrap();
                if !st.have[h.index as usize] {
                    st.have[h.index as usize] = true;
                    st.have_count += 1;
                }
                st.hashes[h.index as usize] = h.hash;
                if st.have_count == s.nchunks {
                    s.cv.notify_all();
                }
            }
            Mode::Stream => {
                let mut b = s.pool.lock().unwrap().pop().unwrap_or_default();
                b.resize(h.len as usize, 0);
                let got = read_counted(conn, &mut b, &slot.bytes, s.req.hash)?;
                if s.req.hash && got != h.hash {
                    bail!("chunk {} failed its integrity check", h.index);
                }
                let mut st = s.state.lock().unwrap();
                // Backpressure: hold this chunk until it fits in the window.
                // The chunk the writer needs next always fits, so no deadlock.
                while h.index >= st.next + s.cap && st.failed.is_none() {
                    st.window_waiters += 1;
                    st = s.cv.wait(st).unwrap();
                    st.window_waiters -= 1;
                }
                if st.failed.is_some() {
                    return Ok(());
                }
                if h.index < st.next || st.reorder.contains_key(&h.index) {
                    bail!("duplicate chunk {}", h.index);
                }
                if h.index == st.next && !st.writing {
                    st.writing = true;
                    st.next += 1;
                    st.hashes.push(h.hash);
                    drop(st);
                    drain(s, b, h.index, h.hash)?;
                    continue;
                }
                st.reorder.insert(h.index, (b, h.hash));
            }
        }
    }
}

/// Reads a payload in pieces, counting bytes as they arrive so per-interval
/// goodput is not quantised to whole chunks, and hashing each piece while it
/// is still in cache. Returns the XXH3-64 of the payload (0 if not hashing).
fn read_counted(
    conn: &mut TcpStream,
    buf: &mut [u8],
    counter: &AtomicU64,
    hash: bool,
) -> Result<u64> {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut off = 0;
    while off < buf.len() {
        let end = (off + (256 << 10)).min(buf.len());
        match conn.read(&mut buf[off..end]) {
            Ok(0) => bail!("connection lost mid-chunk"),
            Ok(n) => {
                if hash {
                    h.update(&buf[off..off + n]);
                }
                off += n;
                counter.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(anyhow::Error::new(e).context("connection lost mid-chunk")),
        }
    }
    Ok(if hash { h.digest() } else { 0 })
}

/// Writes chunk `idx` and then every consecutive chunk already buffered,
/// then gives the write token back. Whoever receives the chunk the output
/// needs next does the writing, so no writer thread and no hand-off.
fn drain(s: &Session, mut data: Vec<u8>, mut idx: u64, mut hash: u64) -> Result<()> {
    let c = s.req.chunk as u64;
    loop {
        {
            let mut out = s.output.lock().unwrap();
            match out.as_mut() {
                None => return Ok(()), // session over
                Some(Output::Discard) => {}
                Some(Output::File) => {
                    let fs = s.fsink.as_ref().unwrap();
                    fs.file
                        .write_all_at(&data, idx * c)
                        .context("writing data")?;
                    fs.journal.lock().unwrap().append(idx, hash)?;
                }
                Some(Output::Cmd(stdin)) => {
                    stdin.write_all(&data).context("consumer stopped reading")?
                }
            }
        }
        {
            let mut pool = s.pool.lock().unwrap();
            if pool.len() < (s.cap + s.req.streams as u64) as usize {
                pool.push(data);
            }
        }
        let mut st = s.state.lock().unwrap();
        if st.window_waiters > 0 {
            s.cv.notify_all(); // the window moved
        }
        let n = st.next;
        if let Some((d, h)) = st.reorder.remove(&n) {
            st.next += 1;
            st.hashes.push(h);
            (data, idx, hash) = (d, n, h);
            continue;
        }
        st.writing = false;
        if st.total == Some(st.next) {
            st.writer_done = true;
            s.cv.notify_all();
        }
        return Ok(());
    }
}

fn sample_goodput(s: &Session) -> Vec<GoodputSample> {
    let iv = Duration::from_millis(s.req.interval_ms);
    let mut last: Vec<u64> = vec![0; s.slots.len()];
    let mut out = Vec::new();
    let mut next = Instant::now() + iv;
    loop {
        let stop = s.stop_sampler.load(Ordering::SeqCst);
        if !stop {
            let now = Instant::now();
            if next > now {
                std::thread::sleep((next - now).min(Duration::from_millis(20)));
                continue;
            }
            next += iv;
        }
        let t = s.now();
        for (i, sl) in s.slots.iter().enumerate() {
            let b = sl.bytes.load(Ordering::Relaxed);
            out.push(GoodputSample {
                t,
                stream: i as u32,
                bytes: b - last[i],
            });
            last[i] = b;
        }
        if stop {
            return out;
        }
    }
}

struct PullGuard<'a>(&'a Server, String);
impl Drop for PullGuard<'_> {
    fn drop(&mut self) {
        self.0.pulls.lock().unwrap().remove(&self.1);
    }
}

/// A pull: the server is the sender. It opens the file under the same
/// confinement as writes, waits for the client's data connections and its
/// `Start`, then runs the client's stripe or stream senders on them.
fn handle_pull(srv: &Arc<Server>, mut conn: TcpStream, req: Request) -> Result<()> {
    let opened = (|| {
        let Sink::Path(p) = &req.sink else {
            bail!("a pull needs a file path");
        };
        let file = safepath::open_read(&srv.root, p)?;
        let size = file.metadata()?.len();
        if size.div_ceil(req.chunk as u64) > (1 << 32) {
            bail!("too many chunks; use a larger --chunk");
        }
        Ok((Arc::new(file), size))
    })();
    let (file, size) = match opened {
        Ok(x) => x,
        Err(e) => {
            send_msg(&mut conn, &Reply::Reject(format!("{e:#}")))?;
            return Err(e);
        }
    };
    let id = req.session.clone();
    let (tx, rx) = mpsc::channel();
    srv.pulls
        .lock()
        .unwrap()
        .insert(id.clone(), (req.streams, tx));
    let _pg = PullGuard(srv, id.clone());
    send_msg(
        &mut conn,
        &Reply::Accept {
            have: Vec::new(),
            resumed_bytes: 0,
            size: Some(size),
        },
    )?;
    let n = req.streams as usize;
    let mut slots: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while slots.iter().any(|c| c.is_none()) {
        let left = deadline.saturating_duration_since(Instant::now());
        let (i, c) = rx
            .recv_timeout(left)
            .map_err(|_| anyhow!("pull {}: data connections did not arrive", &id[..8]))?;
        if slots[i as usize].is_some() {
            bail!("pull {}: duplicate data stream {i}", &id[..8]);
        }
        slots[i as usize] = Some(c);
    }
    let conns: Vec<Arc<TcpStream>> = slots.into_iter().map(|c| Arc::new(c.unwrap())).collect();
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let start: Start = recv_msg(&mut conn)?;
    conn.set_read_timeout(None)?;
    for c in &conns {
        if let Some(cc) = &req.cc {
            crate::sock::set_cc(c.as_ref(), cc)?;
        }
        if let Some(p) = start.pacing {
            crate::sock::set_pacing(c.as_ref(), p)?;
        }
    }

    let t0 = Instant::now();
    let abort = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let chunk = req.chunk as u64;
    let hashes = Arc::new(Mutex::new(Vec::new()));
    // The client only closes the control connection when it gives up (or
    // after our verdict): stop sending then.
    let watcher = {
        let (mut c, abort) = (conn.try_clone()?, abort.clone());
        let weak: Vec<_> = conns.iter().map(Arc::downgrade).collect();
        std::thread::spawn(move || {
            let _ = c.read(&mut [0u8; 1]);
            abort.store(true, Ordering::SeqCst);
            for w in &weak {
                if let Some(c) = w.upgrade() {
                    let _ = c.shutdown(Shutdown::Both);
                }
            }
        })
    };
    let mut handles = Vec::new();
    match req.mode {
        Mode::Stripe => {
            let nchunks = size.div_ceil(chunk);
            *hashes.lock().unwrap() = vec![0; nchunks as usize];
            let all: Vec<u64> = (0..nchunks).collect();
            let per = all.len().div_ceil(n).max(1);
            let mut groups: Vec<Vec<u64>> = all.chunks(per).map(|c| c.to_vec()).collect();
            groups.resize(n, Vec::new());
            for (c, g) in conns.into_iter().zip(groups) {
                let ctx = client::StripeCtx {
                    file: Some(file.clone()),
                    zero: None,
                    chunk,
                    size,
                    hash: req.hash,
                    hashes: hashes.clone(),
                    sent: sent.clone(),
                    abort: abort.clone(),
                    fault: None,
                };
                handles.push(std::thread::spawn(move || client::stripe_sender(c, g, ctx)));
            }
        }
        Mode::Stream => {
            let src = Arc::new(client::StreamSrc::plain(
                Box::new(client::SharedFile(file.clone(), 0)),
                chunk as usize,
                req.hash,
                hashes.clone(),
                abort.clone(),
            ));
            for c in conns {
                let (src, sent) = (src.clone(), sent.clone());
                handles.push(std::thread::spawn(move || {
                    client::stream_sender(c, src, sent, None)
                }));
            }
        }
    }
    let mut error = None;
    for h in handles {
        if let Err(e) = h.join().unwrap_or_else(|_| Err(anyhow!("worker panicked"))) {
            error.get_or_insert(format!("{e:#}"));
        }
    }
    if error.is_none() && abort.load(Ordering::SeqCst) {
        error = Some("client went away".into());
    }
    let bytes = sent.load(Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    let p = match &req.sink {
        Sink::Path(p) => p.as_str(),
        _ => "",
    };
    match &error {
        None => eprintln!(
            "xfer: session {}: {} <- {p} in {elapsed:.3} s ({} streams, {}, pull)",
            &id[..8],
            crate::util::human_bytes(bytes),
            req.streams,
            req.mode.name()
        ),
        Some(e) => eprintln!("xfer: pull {} of {p} failed: {e}", &id[..8]),
    }
    let done = Done {
        error,
        e2e: req.hash.then(|| e2e_digest(&hashes.lock().unwrap())),
        bytes,
        total_size: size,
        elapsed,
        flows: Vec::new(),
        goodput: Vec::new(),
    };
    let _ = send_msg(&mut conn, &done);
    // Wait (briefly) for the client to read the verdict and close.
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = conn.shutdown(Shutdown::Write);
    let _ = watcher.join();
    Ok(())
}
