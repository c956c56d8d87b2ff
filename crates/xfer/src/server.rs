//! `xfer serve`: the receiver daemon.

use crate::chunkset::ChunkSet;
use crate::fsinfo;
use crate::journal::{self, Journal};
use crate::proto::*;
use crate::safepath;
use crate::send::source::{SharedFile, StreamSrc};
use crate::send::workers::{Worker, Workers};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub struct ServeOpts {
    pub listen: std::net::SocketAddr,
    pub root: PathBuf,
    pub auth: Auth,
    pub allow_cmd: bool,
    pub max_chunk: u32,
    pub max_sessions: usize,
    /// Open connections (authenticated or not); past it, newcomers are told
    /// the server is busy.
    pub max_conns: u64,
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
    // Chunk buffers (1–16 MiB) come and go with sessions. A fixed mmap
    // threshold keeps them out of the heap: they are returned to the system
    // when freed, and a fresh one costs memory only as it is filled. (glibc
    // otherwise raises the threshold to the largest buffer freed, and heap
    // memory stays resident.)
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes the allocator; called before any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
    let root = check_root(&opts.root)?;
    let listener = listen(&opts)?;
    // Tests and scripts read this line to learn the port (readiness signal).
    println!("xfer: listening on {}", listener.local_addr()?);
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
    accept_loop(&srv, listener);
    Ok(())
}

/// `--root`, canonical: a directory that exists (else a usage error).
fn check_root(given: &std::path::Path) -> Result<PathBuf> {
    let root = std::fs::canonicalize(given).map_err(|e| {
        let msg = format!("--root {}: {e}", given.display());
        match e.kind() {
            std::io::ErrorKind::NotFound => crate::util::usage(msg),
            _ => anyhow!(msg),
        }
    })?;
    let md = std::fs::metadata(&root)?;
    if !md.is_dir() {
        return Err(crate::util::usage(format!(
            "--root {} is {}, not a directory",
            given.display(),
            crate::inputfile::kind(&md)
        )));
    }
    Ok(root)
}

/// The listening socket (`--insecure` only on loopback; `--rcvbuf` set before any
/// handshake fixes the window scale).
fn listen(opts: &ServeOpts) -> Result<TcpListener> {
    let addr = opts.listen;
    if matches!(opts.auth, Auth::Insecure) && !addr.ip().is_loopback() {
        return Err(crate::util::usage(format!(
            "--insecure is only allowed on a loopback address; use --key-file to listen on {}",
            addr.ip()
        )));
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
        crate::sock::set_buffer(&sock, crate::sock::Buffer::Receive, "--rcvbuf", b)?;
    }
    sock.bind(&addr.into())
        .with_context(|| format!("binding {addr}"))?;
    sock.listen(128)?;
    Ok(sock.into())
}

/// One thread per connection, at most `--max-conns` at once: past it, a newcomer is told
/// the server is busy (bounds threads and memory under a flood, unauthenticated ones too).
fn accept_loop(srv: &Arc<Server>, listener: TcpListener) {
    static CONNS: AtomicU64 = AtomicU64::new(0);
    let max_conns = srv.opts.max_conns;
    struct ConnSlot;
    impl Drop for ConnSlot {
        fn drop(&mut self) {
            CONNS.fetch_sub(1, Ordering::SeqCst);
        }
    }
    // Log the start of each run of refusals, not every refusal of a flood.
    let mut refusing = false;
    for conn in listener.incoming() {
        let mut conn = match conn {
            Ok(c) => c,
            Err(e) => {
                eprintln!("xfer: accept: {e}");
                // Out of descriptors (EMFILE, ENFILE) the error repeats until
                // a connection ends: wait rather than spin.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if CONNS.fetch_add(1, Ordering::SeqCst) >= max_conns {
            CONNS.fetch_sub(1, Ordering::SeqCst);
            if !refusing {
                eprintln!(
                    "xfer: {max_conns} connections open; telling newcomers the server is busy"
                );
                refusing = true;
            }
            // Never block the accept loop on a client.
            let _ = conn.set_nonblocking(true);
            send_busy(&mut conn, &format!("too many connections ({max_conns})"));
            continue;
        }
        refusing = false;
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
}

fn handle_conn(srv: &Arc<Server>, mut conn: TcpStream) -> Result<()> {
    // Unauthenticated peers get a short leash.
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.set_nodelay(true)?;
    server_handshake(&mut conn, &srv.opts.auth)?;
    let open: Open = match recv_request(&mut conn) {
        Ok(o) => o,
        Err(e) => {
            // A client of another version deserves to know why.
            let _ = send_msg(&mut conn, &Reply::Reject(format!("{e:#}")));
            return Err(e);
        }
    };
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

/// A file destination: the part file and journal beside it.
struct FileSink {
    dir: OwnedFd,
    name: String,
    part: String,
    jname: String,
    file: File,
    journal: Mutex<Journal>,
    /// The destination as the client named it, and the mount point of its
    /// file system, for error messages.
    rel: String,
    mount: PathBuf,
}

impl FileSink {
    /// "no space left on /data (...)" for a full file system; otherwise the
    /// error with what was being done.
    fn io_err(&self, e: std::io::Error, what: &str) -> anyhow::Error {
        if fsinfo::is_no_space(&e) {
            anyhow!(
                "no space left on {} (the server file system holding {:?})",
                self.mount.display(),
                self.rel
            )
        } else {
            anyhow::Error::new(e).context(format!("{what} {:?}", self.rel))
        }
    }

    /// Writes a verified chunk, then its journal record.
    fn write_chunk(&self, data: &[u8], offset: u64, index: u64, hash: u64) -> Result<()> {
        self.file
            .write_all_at(data, offset)
            .map_err(|e| self.io_err(e, "writing"))?;
        self.journal
            .lock()
            .unwrap()
            .append(index, hash)
            .map_err(|e| self.io_err(e, "writing the journal of"))
    }

    /// Removes the part file and the journal (a failed transfer that will
    /// not be resumed must not keep the space).
    fn remove(&self) {
        safepath::unlink(&self.dir, &self.part);
        safepath::unlink(&self.dir, &self.jname);
    }
}

#[derive(Default)]
struct State {
    failed: Option<String>,
    finished: bool,
    ended: u32,
    /// Stripe mode: which chunks are verified (one bit each).
    have: ChunkSet,
    /// End-to-end digest of every chunk verified so far, resumed ones included.
    e2e: E2e,
    // Stream mode: reorder buffer.
    next: u64,
    /// Stream mode: bytes written out in order, resumed prefix included;
    /// the next chunk goes at this offset.
    stream_bytes: u64,
    total: Option<u64>,
    reorder: BTreeMap<u64, (Vec<u8>, u64)>,
    /// A data thread is writing chunks out in order (the "write token").
    writing: bool,
    /// The sender's end-to-end digest (inner None: hashing off), once sent.
    finish: Option<Option<String>>,
    /// The sender's data start in session time (see `Finish::data_start_ago`).
    data_start: Option<f64>,
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
    /// The stream's socket, for window clamps.
    sock: Mutex<Option<TcpStream>>,
    /// The window clamp the client asked for (bytes; 0: none).
    clamp: AtomicU32,
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
    /// Payload bytes written out (or accepted by a consumer or the discard
    /// sink) in this session, for the fault hook.
    written: AtomicU64,
    /// The window clamps' keeper runs (see `keep_clamps`).
    clamp_keeper: AtomicBool,
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

    /// Counts `n` bytes written out. Test hook (`--fault-reset-after`): the
    /// session fails, as if its connections were reset, exactly when the
    /// count reaches the requested number, whatever the timing. The count
    /// only grows by written (verified, journaled) data, so everything before
    /// that point is resumable, and the transfer cannot end first.
    fn wrote(&self, n: u64) -> Result<()> {
        let before = self.written.fetch_add(n, Ordering::SeqCst);
        if let Some(after) = self.req.fault_reset_after {
            if before < after && before + n >= after {
                for c in &self.state.lock().unwrap().conns {
                    let _ = socket2::SockRef::from(c).set_linger(Some(Duration::ZERO));
                }
                bail!(
                    "injected connection reset after {} bytes (test hook)",
                    before + n
                );
            }
        }
        Ok(())
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

/// Checks every number a client states before anything is sized by it.
fn validate(srv: &Server, req: &Request) -> Result<()> {
    if req.streams == 0 || req.streams > 128 {
        bail!("stream count {} out of range 1..=128", req.streams);
    }
    if req.chunk < MIN_CHUNK || req.chunk > srv.opts.max_chunk {
        bail!(
            "chunk size {} out of range {MIN_CHUNK}..={}",
            req.chunk,
            srv.opts.max_chunk
        );
    }
    if req.streams as u64 * req.chunk as u64 > 256 << 20 {
        bail!("streams x chunk size exceeds 256 MiB of receive buffers; use a smaller --chunk");
    }
    if req.session.len() != 32 || !req.session.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("bad session id");
    }
    if req.mode == Mode::Stripe && !req.pull {
        let Some(size) = req.size else {
            bail!("stripe mode needs a known size");
        };
        // The only per-chunk state of a receiver is one bit per chunk.
        check_chunk_count(size, req.chunk)?;
    }
    if req.interval_ms < 10 || req.interval_ms > MAX_INTERVAL_MS {
        bail!("sampling interval out of range (10 ms to 1 h)");
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

/// Tells the client why, when `r` is an error; returns `r`.
fn reject_on_err<T>(conn: &mut TcpStream, r: Result<T>) -> Result<T> {
    if let Err(e) = &r {
        send_msg(conn, &Reply::Reject(format!("{e:#}")))?;
    }
    r
}

/// A valid request, and room for one more session.
fn admit(srv: &Arc<Server>, conn: &mut TcpStream, req: &Request) -> Result<()> {
    reject_on_err(conn, validate(srv, req))?;
    let active = srv.sessions.lock().unwrap().len() + srv.pulls.lock().unwrap().len();
    if active >= srv.opts.max_sessions {
        send_msg(
            conn,
            &Reply::Reject(format!(
                "server busy ({} transfers running, its --max-sessions); try again later",
                srv.opts.max_sessions
            )),
        )?;
        bail!("too many sessions");
    }
    Ok(())
}

fn handle_control(srv: &Arc<Server>, mut conn: TcpStream, req: Request) -> Result<()> {
    admit(srv, &mut conn, &req)?;
    if req.pull {
        return handle_pull(srv, conn, req);
    }
    let _busy = reject_on_err(&mut conn, claim_destination(srv, &req))?;
    let (session, have, resumed_bytes, child) = reject_on_err(&mut conn, prepare(srv, &req))?;
    let id = req.session.clone();
    srv.sessions
        .lock()
        .unwrap()
        .insert(id.clone(), session.clone());
    let _sg = SessionGuard(srv, id.clone());
    if let Err(e) = send_msg(
        &mut conn,
        &Reply::Accept {
            have,
            resumed_bytes,
            size: None,
            features: vec![FEATURE_WINDOW_CLAMP.into(), FEATURE_DATA_START.into()],
        },
    ) {
        session.fail(format!("{e:#}"));
    }

    // A client that disappears must not leave the session hanging.
    let watcher = {
        let s = session.clone();
        let c = conn.try_clone()?;
        std::thread::spawn(move || watch_control(&s, c))
    };
    let sampler = {
        let s = session.clone();
        std::thread::spawn(move || sample_goodput(&s))
    };
    wait_for_data(&session);
    let (mut result, mismatch) = verdict(&session);
    result = finish_consumer(&session, child, result);
    result = commit_or_clean(&session, result, mismatch);
    session.output.lock().unwrap().take();
    close_session(&session, &result);
    let goodput = sampler.join().unwrap_or_default();
    let done = report(&session, result, resumed_bytes, goodput);
    let _ = send_msg(&mut conn, &done);
    let _ = conn.shutdown(Shutdown::Both);
    let _ = watcher.join();
    Ok(())
}

/// The session is over: its failure recorded (none is accepted from the watcher from now
/// on), its data connections closed, its sampler stopped.
fn close_session(session: &Session, result: &Result<()>) {
    {
        let mut st = session.state.lock().unwrap();
        if let Err(e) = result {
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
}

/// Reads the client's control messages: window clamps while the data flows
/// (the cwnd limiter), then its end-to-end digest once all data is sent.
/// Nothing is committed before the digest arrives and matches. The session
/// fails if the client leaves.
fn watch_control(s: &Arc<Session>, mut c: TcpStream) {
    loop {
        match recv_request::<_, ClientCtl>(&mut c) {
            Ok(ClientCtl::Clamp(w)) => clamp_windows(s, &w.window_clamp),
            Ok(ClientCtl::Finish(f)) => {
                let arrived = s.now();
                let mut st = s.state.lock().unwrap();
                st.finish = Some(f.e2e);
                st.data_start = f
                    .data_start_ago
                    .filter(|a| a.is_finite() && *a >= 0.0)
                    .map(|a| arrived - a);
                s.cv.notify_all();
                drop(st);
                let mut b = [0u8; 1];
                let _ = c.read(&mut b);
                break;
            }
            Err(_) => break,
        }
    }
    s.fail("client closed the control connection".into());
}

/// How often the clamp keeper looks at the sockets' window clamps.
const CLAMP_CHECK: Duration = Duration::from_millis(5);

/// The cwnd limiter: each stream's socket advertises at most its window.
/// The first clamp also starts the keeper (below).
fn clamp_windows(s: &Arc<Session>, windows: &[u32]) {
    for (slot, &w) in s.slots.iter().zip(windows) {
        slot.clamp.store(w.max(1), Ordering::SeqCst);
        if let Some(sock) = slot.sock.lock().unwrap().as_ref() {
            if let Err(e) = crate::sock::clamp_window(sock, w.max(1)) {
                eprintln!("xfer: session {}: {e:#}", &s.req.session[..8]);
            }
        }
    }
    if !s.clamp_keeper.swap(true, Ordering::SeqCst) {
        let s = s.clone();
        std::thread::spawn(move || keep_clamps(&s));
    }
}

/// Linux (6.8 on) resets a socket's window clamp to what its receive buffer
/// allows whenever it re-measures the payload-to-memory ratio of arriving
/// packets, which it does on the first full-sized segments: a clamp set
/// when the data starts is lost within a round trip. So the clamps are
/// re-set whenever found changed, until the session ends.
fn keep_clamps(s: &Session) {
    while !s.stop_sampler.load(Ordering::SeqCst) {
        std::thread::sleep(CLAMP_CHECK);
        for slot in &s.slots {
            let want = slot.clamp.load(Ordering::SeqCst);
            if let (Some(sock), true) = (slot.sock.lock().unwrap().as_ref(), want > 0) {
                if crate::sock::window_clamp(sock).is_some_and(|c| c != want) {
                    let _ = crate::sock::clamp_window(sock, want);
                }
            }
        }
    }
}

/// One session per destination at a time. A previous session on this path
/// may still be tearing down (e.g. a retry right after a reset), so wait a
/// little for it.
fn claim_destination<'a>(srv: &'a Server, req: &Request) -> Result<Option<BusyGuard<'a>>> {
    let Sink::Path(p) = &req.sink else {
        return Ok(None);
    };
    let key = safepath::components(p)?.join("/");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut busy = srv.busy.lock().unwrap();
    while busy.contains(&key) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("destination {p:?} is busy (another transfer is writing it)");
        }
        busy = srv.busy_cv.wait_timeout(busy, left).unwrap().0;
    }
    busy.insert(key.clone());
    Ok(Some(BusyGuard(srv, key)))
}

/// Waits until all streams are done (and everything is written) or failure.
fn wait_for_data(session: &Session) {
    let req = &session.req;
    let mut st = session.state.lock().unwrap();
    loop {
        if st.failed.is_some() {
            return;
        }
        let data_done = st.ended == req.streams && (req.mode == Mode::Stripe || st.writer_done);
        if data_done && req.mode == Mode::Stripe && st.have.count() < session.nchunks {
            let missing = session.nchunks - st.have.count();
            drop(st);
            session.fail(format!("sender finished but {missing} chunks are missing"));
            return;
        }
        if data_done && req.mode == Mode::Stream {
            // A stream of announced length (a file, or --expect-size) must
            // have exactly that length.
            if let Some(sz) = req.size.filter(|sz| *sz != st.stream_bytes) {
                let got = st.stream_bytes;
                drop(st);
                session.fail(format!(
                    "the stream ended after {got} bytes but the sender announced {sz}"
                ));
                return;
            }
        }
        if data_done && st.finish.is_some() {
            return;
        }
        st = session.cv.wait(st).unwrap();
    }
}

/// The session's outcome before committing, and whether it failed on an
/// end-to-end hash mismatch.
fn verdict(session: &Session) -> (Result<()>, bool) {
    let st = session.state.lock().unwrap();
    match (&st.failed, &st.finish) {
        (Some(e), _) => (Err(anyhow!(e.clone())), false),
        (None, Some(Some(theirs))) if session.req.hash => {
            let mine = st.e2e.hex();
            if *theirs == mine {
                (Ok(()), false)
            } else {
                (
                    Err(anyhow!(
                        "END-TO-END HASH MISMATCH (sender {theirs}, receiver {mine}): the data \
                         differs from the source; nothing was committed"
                    )),
                    true,
                )
            }
        }
        (None, Some(None)) if session.req.hash => {
            (Err(anyhow!("sender sent no end-to-end hash")), false)
        }
        _ => (Ok(()), false),
    }
}

/// A consumer is killed on failure (it must not mistake a truncated stream
/// for a complete one); on success, closing its stdin ends its input. A
/// consumer that failed is named with its exit status, also when its exit is
/// what broke the stream ("consumer stopped reading").
fn finish_consumer(session: &Session, child: Option<Child>, result: Result<()>) -> Result<()> {
    let Some(mut c) = child else {
        return result;
    };
    let mut ended_early = None;
    if result.is_err() {
        ended_early = c.try_wait().ok().flatten();
        let _ = c.kill();
    }
    session.output.lock().unwrap().take();
    let cmd = match &session.req.sink {
        Sink::Cmd(c) => c.as_str(),
        _ => "",
    };
    let failed = |st: std::process::ExitStatus, when: &str| {
        anyhow!("the consumer command {cmd:?} failed{when} ({st})")
    };
    match (c.wait(), result) {
        (Ok(st), Ok(())) if !st.success() => Err(failed(st, "")),
        (Err(e), Ok(())) => Err(anyhow!("waiting for consumer: {e}")),
        (_, Err(e)) => match ended_early {
            Some(st) if !st.success() => Err(failed(st, " before it read all its input")),
            _ => Err(e),
        },
        (Ok(_), Ok(())) => Ok(()),
    }
}

/// On success: sync, rename into place, drop the journal. On failure: keep
/// the part file and journal only if they can serve a resume (the client
/// asked for one and some chunk is verified); otherwise free the space.
fn commit_or_clean(session: &Session, result: Result<()>, mismatch: bool) -> Result<()> {
    let Some(fs) = &session.fsink else {
        return result;
    };
    let result = result.and_then(|()| {
        fs.file.sync_data().map_err(|e| fs.io_err(e, "syncing"))?;
        safepath::rename(&fs.dir, &fs.part, &fs.name)?;
        safepath::unlink(&fs.dir, &fs.jname);
        Ok(())
    });
    if result.is_err() {
        let verified = {
            let st = session.state.lock().unwrap();
            st.have.count() > 0 || st.next > 0
        };
        // A mismatch means the journal vouched for data that does not match
        // the source (a producer that changed): the next attempt starts fresh.
        if mismatch || !session.req.resume || !verified {
            fs.remove();
        }
    }
    result
}

/// The verdict sent to the client, and the server's log line.
fn report(
    session: &Session,
    result: Result<()>,
    resumed_bytes: u64,
    goodput: Vec<GoodputSample>,
) -> Done {
    let req = &session.req;
    let elapsed = session.now();
    let (e2e, data_start) = {
        let st = session.state.lock().unwrap();
        (req.hash.then(|| st.e2e.hex()), st.data_start)
    };
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
    let done = Done {
        error: result.as_ref().err().map(|e| format!("{e:#}")),
        e2e,
        bytes,
        total_size,
        elapsed,
        flows,
        goodput,
        data_start,
    };
    let sink = match &req.sink {
        Sink::Path(p) => p.clone(),
        Sink::Cmd(c) => format!("cmd {c:?}"),
        Sink::Discard => "discard".into(),
    };
    let id = &req.session[..8];
    match &done.error {
        None => eprintln!(
            "xfer: session {id}: {} -> {} in {:.3} s ({:.3} Gbit/s, {} streams, {})",
            crate::util::human_bytes(bytes),
            sink,
            elapsed,
            bytes as f64 * 8.0 / elapsed.max(1e-9) / 1e9,
            req.streams,
            req.mode.name()
        ),
        Some(e) => eprintln!("xfer: session {id} to {sink} failed: {e}"),
    }
    done
}

/// Half-open ranges of chunk indices.
type Ranges = Vec<(u64, u64)>;
type Prepared = (Arc<Session>, Ranges, u64, Option<Child>);

fn prepare(srv: &Server, req: &Request) -> Result<Prepared> {
    let nchunks = req.size.map(|s| s.div_ceil(req.chunk as u64)).unwrap_or(0);
    let mut st = State::default();
    let mut have_ranges = Vec::new();
    let mut resumed = 0u64;
    let mut fsink = None;
    let mut child = None;
    match &req.sink {
        Sink::Path(p) => {
            let (fs, ranges, r) = prepare_file(srv, req, p, nchunks, &mut st)?;
            (fsink, have_ranges, resumed) = (Some(fs), ranges, r);
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
                st.have = ChunkSet::new(nchunks);
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
                sock: Mutex::new(None),
                clamp: AtomicU32::new(0),
            })
            .collect(),
        stop_sampler: AtomicBool::new(false),
        pool: Mutex::new(Vec::new()),
        output: Mutex::new(Some(output)),
        written: AtomicU64::new(0),
        clamp_keeper: AtomicBool::new(false),
    });
    Ok((session, have_ranges, resumed, child))
}

/// Removes the part file and journal a failed `prepare_file` created, so a
/// refused transfer leaves nothing behind.
struct CreatedFiles {
    dir: OwnedFd,
    names: Vec<String>,
    armed: bool,
}

impl Drop for CreatedFiles {
    fn drop(&mut self) {
        if self.armed {
            for n in &self.names {
                safepath::unlink(&self.dir, n);
            }
        }
    }
}

/// Opens the part file and journal of a file destination (after checking
/// there is room for it), and re-verifies what the journal claims: the
/// chunks already present go into `st`; returns the sink, the present chunk
/// ranges and the bytes they hold.
fn prepare_file(
    srv: &Server,
    req: &Request,
    rel: &str,
    nchunks: u64,
    st: &mut State,
) -> Result<(FileSink, Ranges, u64)> {
    let comps = safepath::components(rel)?;
    let name = comps.last().unwrap().clone();
    let part = format!(".{name}.xfer-part");
    let jname = format!(".{name}.xfer-journal");
    // Everything up to the space check happens in directories that already
    // exist, so a refused transfer creates nothing.
    let (anc, depth) = safepath::existing_ancestor(&srv.root, rel)?;
    let mount = fsinfo::mount_point(&srv.opts.root.join(comps[..depth].join("/")));
    let parent_exists = depth + 1 == comps.len();
    if parent_exists {
        safepath::check_target(&anc, &name)?;
        if !req.resume {
            // Starting over: what an earlier attempt left is of no use, and
            // freeing it first may be what lets this transfer fit.
            safepath::unlink(&anc, &part);
            safepath::unlink(&anc, &jname);
        }
    }
    check_room(&anc, &part, req, rel, &mount)?;
    let (dir, _) = safepath::open_parent(&srv.root, rel, !req.parent_must_exist)?;
    safepath::check_target(&dir, &name)?;
    let existed = fsinfo::allocated(&dir, &jname) > 0;
    let mut created = CreatedFiles {
        dir: dir.try_clone()?,
        names: vec![part.clone(), jname.clone()],
        armed: !existed,
    };
    let no_space = |e: anyhow::Error| no_space_or(e, &mount, rel);
    let rw = libc::O_RDWR | libc::O_CREAT;
    let file = safepath::open_file(&dir, &part, rw)?;
    let jfile = safepath::open_file(&dir, &jname, rw)?;
    let header = journal_header(req);
    let (mut journal, resumed) = match req.mode {
        Mode::Stripe => resume_stripe(&file, jfile, &header, req, nchunks, st),
        Mode::Stream => resume_stream(&file, jfile, &header, req, st),
    }
    .map_err(no_space)?;
    let ranges = match req.mode {
        Mode::Stripe => st.have.ranges(MAX_HAVE_RANGES).unwrap_or_default(),
        Mode::Stream if st.next > 0 => vec![(0, st.next)],
        Mode::Stream => Vec::new(),
    };
    if resumed == 0 {
        // Journal records that failed verification must not linger.
        let jfile = safepath::open_file(&dir, &jname, rw)?;
        journal = Journal::open(jfile, &header, false, |_, _| false).map_err(no_space)?;
        file.set_len(0)?;
    }
    if req.mode == Mode::Stripe {
        file.set_len(req.size.unwrap_or(0))?;
    } else {
        file.set_len(resumed)?;
    }
    created.armed = false;
    let fs = FileSink {
        dir,
        name,
        part,
        jname,
        file,
        journal: Mutex::new(journal),
        rel: rel.to_string(),
        mount,
    };
    Ok((fs, ranges, resumed))
}

/// Refuses up front a transfer of known size that cannot fit, rather than
/// fill the disk. The part file's blocks count as room: they are reused (on
/// resume) or freed (when starting over).
fn check_room(
    dir: &OwnedFd,
    part: &str,
    req: &Request,
    rel: &str,
    mount: &std::path::Path,
) -> Result<()> {
    let Some(size) = req.size else {
        return Ok(());
    };
    let journal = 16 * size.div_ceil(req.chunk as u64) + 4096;
    let need = size.saturating_add(journal);
    let Some(free) = fsinfo::available(dir) else {
        return Ok(());
    };
    let room = free.saturating_add(fsinfo::allocated(dir, part));
    if need > room {
        bail!(
            "no space left on {} for {rel:?}: it needs {}, the server file system has {} free",
            mount.display(),
            crate::util::human_bytes(need),
            crate::util::human_bytes(room)
        );
    }
    Ok(())
}

fn journal_header(req: &Request) -> journal::Header {
    journal::Header {
        src_id: req.src_id.clone(),
        mode: req.mode.name().into(),
        chunk: req.chunk,
        size: req.size,
        hash: req.hash,
    }
}

fn no_space_or(e: anyhow::Error, mount: &std::path::Path, rel: &str) -> anyhow::Error {
    let io = e.chain().find_map(|c| c.downcast_ref::<std::io::Error>());
    if io.is_some_and(fsinfo::is_no_space) {
        anyhow!(
            "no space left on {} (the server file system holding {rel:?})",
            mount.display()
        )
    } else {
        e
    }
}

/// Re-reads a chunk the journal vouches for and checks it against its hash,
/// so a crash between data and journal writes cannot smuggle in junk.
fn verify_chunk(
    file: &File,
    buf: &mut Vec<u8>,
    offset: u64,
    len: u64,
    hash: u64,
    check: bool,
) -> bool {
    buf.resize(len as usize, 0);
    file.read_exact_at(buf, offset).is_ok() && (!check || chunk_hash(buf) == hash)
}

/// Stripe resume: every journal record whose chunk still verifies counts.
/// Records are streamed; the state is one bit per chunk. A journal too
/// fragmented to report (more than MAX_HAVE_RANGES ranges) starts over.
fn resume_stripe(
    file: &File,
    jfile: File,
    header: &journal::Header,
    req: &Request,
    nchunks: u64,
    st: &mut State,
) -> Result<(Journal, u64)> {
    let c = req.chunk as u64;
    let size = req.size.unwrap_or(0);
    let flen = file.metadata()?.len();
    let mut have = ChunkSet::new(nchunks);
    let mut e2e = E2e::default();
    let mut resumed = 0u64;
    let mut buf = Vec::new();
    let journal = Journal::open(jfile, header, req.resume, |idx, h| {
        if idx < nchunks && !have.contains(idx) {
            let len = c.min(size - idx * c);
            if idx * c + len <= flen && verify_chunk(file, &mut buf, idx * c, len, h, req.hash) {
                have.insert(idx);
                e2e.add(idx, h);
                resumed += len;
            }
        }
        true
    })?;
    if have.ranges(MAX_HAVE_RANGES).is_none() {
        eprintln!(
            "xfer: journal of {:?} too fragmented to resume; starting over",
            header.src_id
        );
        (have, e2e, resumed) = (ChunkSet::new(nchunks), E2e::default(), 0);
    }
    (st.have, st.e2e) = (have, e2e);
    Ok((journal, resumed))
}

/// Stream resume: only a verified prefix is usable (the producer is re-run).
fn resume_stream(
    file: &File,
    jfile: File,
    header: &journal::Header,
    req: &Request,
    st: &mut State,
) -> Result<(Journal, u64)> {
    let c = req.chunk as u64;
    let flen = file.metadata()?.len();
    let (mut next, mut resumed, mut e2e) = (0u64, 0u64, E2e::default());
    let mut buf = Vec::new();
    let journal = Journal::open(jfile, header, req.resume, |idx, h| {
        let len = c.min(flen.saturating_sub(resumed));
        if idx != next || len == 0 || !verify_chunk(file, &mut buf, resumed, len, h, req.hash) {
            return false;
        }
        e2e.add(idx, h);
        resumed += len;
        next += 1;
        len == c // a short chunk ends the stream
    })?;
    (st.next, st.stream_bytes, st.e2e) = (next, resumed, e2e);
    Ok((journal, resumed))
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
        *s.slots[stream as usize].sock.lock().unwrap() = conn.try_clone().ok();
    }
    send_msg(&mut conn, &Reply::Joined)?;
    if let Err(e) = receive_stream(s, &mut conn, stream) {
        s.fail(format!("stream {stream}: {e:#}"));
    }
    Ok(())
}

fn receive_stream(s: &Session, conn: &mut TcpStream, stream: u32) -> Result<()> {
    let slot = &s.slots[stream as usize];
    let mut buf = Vec::new();
    let mut hdr = [0u8; FRAME_HDR_LEN];
    loop {
        conn.read_exact(&mut hdr).context("connection lost")?;
        let h = FrameHdr::decode(&hdr)?;
        if s.failed() {
            return Ok(());
        }
        match h.kind {
            KIND_END => return end_of_stream(s, slot, &h),
            KIND_DATA => {}
            k => bail!("unknown frame kind {k}"),
        }
        if h.len == 0 || h.len > s.req.chunk {
            bail!("bad frame length {}", h.len);
        }
        if slot.first.lock().unwrap().is_none() {
            *slot.first.lock().unwrap() = Some(s.now());
        }
        let stop = match s.req.mode {
            Mode::Stripe => stripe_chunk(s, slot, conn, &h, &mut buf).map(|_| false)?,
            Mode::Stream => stream_chunk(s, slot, conn, &h)?,
        };
        if stop {
            return Ok(());
        }
    }
}

/// A stream's END frame: in stream mode it carries the total chunk count.
fn end_of_stream(s: &Session, slot: &Slot, h: &FrameHdr) -> Result<()> {
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
    Ok(())
}

/// A striped chunk, verified, written at its offset and counted.
fn stripe_chunk(
    s: &Session,
    slot: &Slot,
    conn: &mut TcpStream,
    h: &FrameHdr,
    buf: &mut Vec<u8>,
) -> Result<()> {
    if h.index >= s.nchunks || h.len as u64 != s.chunk_len(h.index) {
        bail!("bad chunk index {} / length {}", h.index, h.len);
    }
    if s.state.lock().unwrap().have.contains(h.index) {
        bail!("duplicate chunk {}", h.index);
    }
    let got = read_payload(conn, buf, h.len as usize, &slot.bytes, s.req.hash)?;
    if s.req.hash && got != h.hash {
        bail!("chunk {} failed its integrity check", h.index);
    }
    if let Some(fs) = &s.fsink {
        fs.write_chunk(buf, h.index * s.req.chunk as u64, h.index, h.hash)?;
    }
    {
        let mut st = s.state.lock().unwrap();
        if !st.have.insert(h.index) {
            bail!("duplicate chunk {}", h.index);
        }
        st.e2e.add(h.index, h.hash);
        if st.have.count() == s.nchunks {
            s.cv.notify_all();
        }
    }
    s.wrote(h.len as u64)
}

/// A sequenced chunk, verified, held until it fits the reorder window, then written if
/// it is the next one (this thread becomes the writer) or kept for the writer. Returns
/// true when the session failed meanwhile.
fn stream_chunk(s: &Session, slot: &Slot, conn: &mut TcpStream, h: &FrameHdr) -> Result<bool> {
    let mut b = s.pool.lock().unwrap().pop().unwrap_or_default();
    let got = read_payload(conn, &mut b, h.len as usize, &slot.bytes, s.req.hash)?;
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
        return Ok(true);
    }
    if h.index < st.next || st.reorder.contains_key(&h.index) {
        bail!("duplicate chunk {}", h.index);
    }
    if h.index == st.next && !st.writing {
        st.writing = true;
        let off = take_next(&mut st, b.len() as u64, h.hash);
        drop(st);
        drain(s, b, h.index, h.hash, off)?;
        return Ok(false);
    }
    st.reorder.insert(h.index, (b, h.hash));
    Ok(false)
}

/// Reads a `len`-byte payload into `buf`, in pieces, counting bytes as they
/// arrive so per-interval goodput is not quantised to whole chunks, and
/// hashing each piece while it is still in cache. Memory is touched only as
/// bytes arrive, so a stated length costs nothing until the data is sent.
/// Returns the XXH3-64 of the payload (0 if not hashing).
fn read_payload(
    conn: &mut TcpStream,
    buf: &mut Vec<u8>,
    len: usize,
    counter: &AtomicU64,
    hash: bool,
) -> Result<u64> {
    buf.clear();
    buf.reserve_exact(len);
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    while buf.len() < len {
        let start = buf.len();
        let piece = (len - start).min(256 << 10) as u64;
        let n = (&mut *conn)
            .take(piece)
            .read_to_end(buf)
            .context("connection lost mid-chunk")?;
        if n == 0 {
            bail!("connection lost mid-chunk");
        }
        if hash {
            h.update(&buf[start..]);
        }
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
    Ok(if hash { h.digest() } else { 0 })
}

/// Stream mode, under the state lock: the chunk the output needs next is
/// taken for writing. Returns its offset (chunks are written back to back).
fn take_next(st: &mut State, len: u64, hash: u64) -> u64 {
    let off = st.stream_bytes;
    st.e2e.add(st.next, hash);
    st.next += 1;
    st.stream_bytes += len;
    off
}

/// Writes chunk `idx` and then every consecutive chunk already buffered,
/// then gives the write token back. Whoever receives the chunk the output
/// needs next does the writing, so no writer thread and no hand-off.
fn drain(s: &Session, mut data: Vec<u8>, mut idx: u64, mut hash: u64, mut off: u64) -> Result<()> {
    loop {
        {
            let mut out = s.output.lock().unwrap();
            match out.as_mut() {
                None => return Ok(()), // session over
                Some(Output::Discard) => {}
                Some(Output::File) => {
                    let fs = s.fsink.as_ref().unwrap();
                    fs.write_chunk(&data, off, idx, hash)?;
                }
                Some(Output::Cmd(stdin)) => {
                    stdin.write_all(&data).context("consumer stopped reading")?
                }
            }
        }
        s.wrote(data.len() as u64)?;
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
            off = take_next(&mut st, d.len() as u64, h);
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

/// Per-stream goodput, one row per interval. At most MAX_SAMPLES rows are
/// kept: when full, adjacent intervals are merged and the interval doubles,
/// so a transfer of any duration costs bounded memory and a bounded verdict.
fn sample_goodput(s: &Session) -> Vec<GoodputSample> {
    let n = s.slots.len();
    let max_ticks = (MAX_SAMPLES / n).max(2);
    let mut iv = Duration::from_millis(s.req.interval_ms);
    let mut last: Vec<u64> = vec![0; n];
    let mut ticks: Vec<(f64, Vec<u64>)> = Vec::new();
    let mut next = Instant::now() + iv;
    loop {
        let stop = s.stop_sampler.load(Ordering::SeqCst);
        if !stop {
            let now = Instant::now();
            if next > now {
                std::thread::sleep((next - now).min(Duration::from_millis(20)));
                continue;
            }
        }
        if ticks.len() >= max_ticks {
            ticks = merge_ticks(ticks);
            iv = (iv * 2).min(Duration::from_secs(86_400));
        }
        next += iv;
        let row = s
            .slots
            .iter()
            .zip(last.iter_mut())
            .map(|(sl, l)| {
                let b = sl.bytes.load(Ordering::Relaxed);
                let d = b - *l;
                *l = b;
                d
            })
            .collect();
        ticks.push((s.now(), row));
        if stop {
            return ticks
                .into_iter()
                .flat_map(|(t, row)| {
                    row.into_iter()
                        .enumerate()
                        .map(move |(i, bytes)| GoodputSample {
                            t,
                            stream: i as u32,
                            bytes,
                        })
                })
                .collect();
        }
    }
}

/// Halves the number of sampling intervals: each pair becomes one interval
/// ending where the second ended, holding both intervals' bytes.
fn merge_ticks(ticks: Vec<(f64, Vec<u64>)>) -> Vec<(f64, Vec<u64>)> {
    ticks
        .chunks(2)
        .map(|p| {
            let t = p[p.len() - 1].0;
            let mut row = p[0].1.clone();
            for other in &p[1..] {
                for (a, b) in row.iter_mut().zip(&other.1) {
                    *a += b;
                }
            }
            (t, row)
        })
        .collect()
}

struct PullGuard<'a>(&'a Server, String);
impl Drop for PullGuard<'_> {
    fn drop(&mut self) {
        self.0.pulls.lock().unwrap().remove(&self.1);
    }
}

/// True once the peer closed (or broke) the connection; never blocks.
fn peer_closed(c: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut b = [0u8; 1];
    // SAFETY: one-byte buffer we own; MSG_PEEK leaves any data in place.
    let n = unsafe {
        libc::recv(
            c.as_raw_fd(),
            b.as_mut_ptr() as *mut libc::c_void,
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n == 0 || (n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock)
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
        Ok((Arc::new(file), size))
    })();
    let (file, size) = reject_on_err(&mut conn, opened)?;
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
            features: Vec::new(),
        },
    )?;
    let conns = pull_connections(&conn, &rx, &req)?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let start: Start = recv_request(&mut conn)?;
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
    let watcher = watch_pull_client(&conn, &conns, &abort)?;
    let handles = start_pull_senders(&req, conns, file, size, &sent, &abort);
    let mut error = None;
    let mut e2e = E2e::default();
    for h in handles {
        match h.join().unwrap_or_else(|_| Err(anyhow!("worker panicked"))) {
            Ok(part) => e2e.merge(part),
            Err(e) => {
                error.get_or_insert(format!("{e:#}"));
            }
        }
    }
    if error.is_none() && abort.load(Ordering::SeqCst) {
        error = Some("client went away".into());
    }
    let (bytes, elapsed) = (sent.load(Ordering::Relaxed), t0.elapsed().as_secs_f64());
    log_pull(&req, &error, bytes, elapsed);
    let done = Done {
        error,
        e2e: req.hash.then(|| e2e.hex()),
        bytes,
        total_size: size,
        elapsed,
        flows: Vec::new(),
        goodput: Vec::new(),
        data_start: None,
    };
    let _ = send_msg(&mut conn, &done);
    // Wait (briefly) for the client to read the verdict and close.
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = conn.shutdown(Shutdown::Write);
    let _ = watcher.join();
    Ok(())
}

/// The client only closes the control connection when it gives up (or after our
/// verdict): the pull's senders stop then.
fn watch_pull_client(
    conn: &TcpStream,
    conns: &[Arc<TcpStream>],
    abort: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    let (mut c, abort) = (conn.try_clone()?, abort.clone());
    let weak: Vec<_> = conns.iter().map(Arc::downgrade).collect();
    Ok(std::thread::spawn(move || {
        let _ = c.read(&mut [0u8; 1]);
        abort.store(true, Ordering::SeqCst);
        for w in &weak {
            if let Some(c) = w.upgrade() {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }))
}

/// The send engine's stripe or stream senders, one thread per data
/// connection, as a push's client runs them (without gates: a pull is paced
/// by the sockets).
fn start_pull_senders(
    req: &Request,
    conns: Vec<Arc<TcpStream>>,
    file: Arc<std::fs::File>,
    size: u64,
    sent: &Arc<AtomicU64>,
    abort: &Arc<AtomicBool>,
) -> Vec<Worker> {
    let w = Workers {
        chunk: req.chunk,
        streams: req.streams,
        hash: req.hash,
        stall_after: req.fault_stall_after,
        sent,
        abort,
        gates: None,
    };
    match req.mode {
        // Nothing to resume: no reader, only senders.
        Mode::Stripe => w.spawn_stripe(Some(file), size, &[], conns).1,
        Mode::Stream => {
            let src = Arc::new(StreamSrc::plain(
                Box::new(SharedFile(file, 0)),
                req.chunk as usize,
                req.hash,
                abort.clone(),
            ));
            w.spawn_stream(src, conns)
        }
    }
}

fn log_pull(req: &Request, error: &Option<String>, bytes: u64, elapsed: f64) {
    let id = &req.session[..8];
    let p = match &req.sink {
        Sink::Path(p) => p.as_str(),
        _ => "",
    };
    match error {
        None => eprintln!(
            "xfer: session {id}: {} <- {p} in {elapsed:.3} s ({} streams, {}, pull)",
            crate::util::human_bytes(bytes),
            req.streams,
            req.mode.name()
        ),
        Some(e) => eprintln!("xfer: pull {id} of {p} failed: {e}"),
    }
}

/// Waits for a pull's data connections (30 s at most), and gives up as soon
/// as the client closes its control connection, so a client that goes away
/// does not hold a session slot.
fn pull_connections(
    ctrl: &TcpStream,
    rx: &mpsc::Receiver<(u32, TcpStream)>,
    req: &Request,
) -> Result<Vec<Arc<TcpStream>>> {
    let id = &req.session[..8];
    let mut slots: Vec<Option<TcpStream>> = (0..req.streams).map(|_| None).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while slots.iter().any(|c| c.is_none()) {
        if Instant::now() >= deadline {
            bail!("pull {id}: data connections did not arrive");
        }
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok((i, c)) => {
                if slots[i as usize].is_some() {
                    bail!("pull {id}: duplicate data stream {i}");
                }
                slots[i as usize] = Some(c);
            }
            Err(mpsc::RecvTimeoutError::Timeout) if peer_closed(ctrl) => {
                bail!("pull {id}: the client went away before its data connections arrived")
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("pull {id}: internal error"),
        }
    }
    Ok(slots.into_iter().map(|c| Arc::new(c.unwrap())).collect())
}

#[cfg(test)]
mod tests {
    use super::merge_ticks;

    #[test]
    fn merged_samples_keep_every_byte_and_the_last_time() {
        let ticks: Vec<(f64, Vec<u64>)> = (1..=5).map(|i| (i as f64, vec![i, 10 * i])).collect();
        let m = merge_ticks(ticks);
        assert_eq!(
            m,
            vec![(2.0, vec![3, 30]), (4.0, vec![7, 70]), (5.0, vec![5, 50])]
        );
    }
}
