//! Pull (`xfer send HOST:PORT:/path LOCAL|-`): the same session, frames and
//! sender code with the roles swapped. The server runs the stripe or stream
//! senders on its data sockets; this side verifies every chunk and the
//! end-to-end hash, and only then renames the temporary file into place.

use crate::chunkset::ChunkSet;
use crate::conn::Conn;
use crate::fsinfo;
use crate::monitor::{progress_bar, sample_tcp};
use crate::proto::*;
use crate::send::pacing::{pacing_per_socket, target_rate};
use crate::session::{connect, AttemptError, Outcome, PullDest, SendOpts};
use crate::util::{hex, random_bytes};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Reorder window for stream mode, in bytes.
const WINDOW: u64 = 64 << 20;

/// The temporary file; removed unless committed.
struct Part {
    tmp: PathBuf,
    dest: PathBuf,
    file: File,
    committed: AtomicBool,
}

impl Part {
    /// "no space left on /home" for a full file system.
    fn io_err(&self, e: std::io::Error, what: &str) -> anyhow::Error {
        if fsinfo::is_no_space(&e) {
            let dir = self.dest.parent().filter(|d| !d.as_os_str().is_empty());
            let dir =
                std::fs::canonicalize(dir.unwrap_or(std::path::Path::new("."))).unwrap_or_default();
            anyhow!(
                "no space left on {} (writing {})",
                fsinfo::mount_point(&dir).display(),
                self.dest.display()
            )
        } else {
            anyhow::Error::new(e).context(format!("{what} {}", self.tmp.display()))
        }
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        if !self.committed.load(Ordering::SeqCst) {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[derive(Default)]
struct State {
    // Stripe: received chunks (one bit each).
    have: ChunkSet,
    // Stream: next chunk to write, buffered chunks, count from END frames.
    next: u64,
    /// Stream: bytes written in order; the next chunk goes at this offset.
    written: u64,
    total: Option<u64>,
    reorder: BTreeMap<u64, (Vec<u8>, u64)>,
    e2e: E2e,
}

struct Ctx {
    mode: Mode,
    chunk: u64,
    size: u64,
    nchunks: u64,
    hash: bool,
    part: Option<Arc<Part>>,
    state: Mutex<State>,
    cv: Condvar,
    abort: AtomicBool,
    received: Arc<AtomicU64>,
}

pub(crate) fn pull_once(
    o: &SendOpts,
    dest: &PullDest,
    addr: SocketAddr,
    t0: Instant,
) -> std::result::Result<Outcome, AttemptError> {
    let Sink::Path(remote) = &o.sink else {
        return Err(anyhow!("a pull needs HOST:PORT:/path as SRC").into());
    };
    let stdout = matches!(dest, PullDest::Stdout);
    let mode = o
        .mode
        .unwrap_or(if stdout { Mode::Stream } else { Mode::Stripe });
    if stdout && mode == Mode::Stripe {
        return Err(anyhow!("pulling to stdout needs stream mode").into());
    }
    // Create the temporary file first: a bad local path fails before any traffic.
    let part = match dest {
        PullDest::File(p) => Some(Arc::new(open_part(p, remote)?)),
        PullDest::Stdout => None,
    };
    let session = hex(&random_bytes::<16>()?);
    let (mut ctrl, size) = open_session(o, addr, &session, mode, remote)?;
    let conns = join_streams(o, addr, &session)?;
    let encrypted = ctrl.encrypted() && conns.iter().all(|c| c.encrypted());
    let data_start = Instant::now();
    if let Some(r) = o.rate_bps {
        crate::eta::announce(Some(size), r, o.chunk, o.quiet)?;
    }
    let rate_bps = target_rate(o, Some(size), t0)?;
    let pacing = rate_bps.map(|r| pacing_per_socket(o, r));
    send_msg(&mut ctrl, &Start { pacing })?;
    let ctx = Arc::new(new_ctx(o, mode, size, part.clone())?);
    let weak: Vec<_> = conns.iter().map(Arc::downgrade).collect();
    let sampler_stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (weak, stop, iv) = (weak, sampler_stop.clone(), o.interval);
        std::thread::spawn(move || sample_tcp(weak, stop, iv, data_start))
    };
    let bar = progress_bar(
        o.progress && !o.quiet,
        Some(size),
        0,
        ctx.received.clone(),
        sampler_stop.clone(),
    );
    let first_err = receive_all(conns, &ctx);
    // The server's verdict carries its end-to-end hash of what it sent.
    let wait = if first_err.is_some() { 5 } else { 60 };
    ctrl.set_read_timeout(Some(Duration::from_secs(wait)))?;
    let done: Result<Done> = recv_msg(&mut ctrl);
    let elapsed = data_start.elapsed().as_secs_f64();
    sampler_stop.store(true, Ordering::SeqCst);
    let tcp = sampler.join().unwrap_or_default();
    if let Some(b) = bar {
        let _ = b.join();
    }
    let done = verdict(done, first_err)?;
    let e2e = check_complete(o, &ctx, &done)?;
    commit(part)?;
    let bytes = ctx.received.load(Ordering::Relaxed);
    Ok(Outcome {
        done: Done { bytes, ..done },
        resumed: 0,
        elapsed,
        rate_bps,
        mode,
        tcp,
        e2e,
        plan: None,
        changes: Vec::new(),
        end_unix: crate::util::unix_now(),
        encrypted,
        auto_steps: Vec::new(),
        streams: o.streams,
    })
}

/// The control connection: the pull requested, the server's answer with the file's size.
fn open_session(
    o: &SendOpts,
    addr: SocketAddr,
    session: &str,
    mode: Mode,
    remote: &str,
) -> Result<(Conn, u64)> {
    let req = Request {
        session: session.to_string(),
        streams: o.streams,
        mode,
        chunk: o.chunk,
        size: None,
        sink: Sink::Path(remote.to_string()),
        src_id: "pull".into(),
        hash: o.hash,
        resume: false,
        interval_ms: o.interval.as_millis() as u64,
        pull: true,
        cc: o.cc.clone(),
        parent_must_exist: false,
        fault_reset_after: None,
        fault_stall_after: o.fault_stall_after,
    };
    let mut ctrl = connect(o, addr, false)?;
    send_msg(&mut ctrl, &Open::Control(req))?;
    match recv_msg::<_, Reply>(&mut ctrl)? {
        Reply::Accept { size: Some(s), .. } => Ok((ctrl, s)),
        Reply::Reject(m) => bail!("server refused: {m}"),
        _ => bail!("protocol error (server too old for pulls?)"),
    }
}

/// The data connections, each joined to the session.
fn join_streams(o: &SendOpts, addr: SocketAddr, session: &str) -> Result<Vec<Arc<Conn>>> {
    let mut conns = Vec::new();
    for i in 0..o.streams {
        let mut c = connect(o, addr, true)?;
        let join = Open::Data {
            session: session.to_string(),
            stream: i,
        };
        send_msg(&mut c, &join)?;
        match recv_msg::<_, Reply>(&mut c)? {
            Reply::Joined => {}
            Reply::Reject(m) => bail!("server refused data stream: {m}"),
            _ => bail!("protocol error"),
        }
        conns.push(Arc::new(c));
    }
    Ok(conns)
}

/// What the receiving threads share; the file sized for striping.
fn new_ctx(o: &SendOpts, mode: Mode, size: u64, part: Option<Arc<Part>>) -> Result<Ctx> {
    let nchunks = size.div_ceil(o.chunk as u64);
    if mode == Mode::Stripe {
        // One bit per chunk here too: a huge file needs bigger chunks.
        check_chunk_count(size, o.chunk)?;
    }
    if let (Some(p), Mode::Stripe) = (&part, mode) {
        p.file.set_len(size).map_err(|e| p.io_err(e, "sizing"))?;
    }
    Ok(Ctx {
        mode,
        chunk: o.chunk as u64,
        size,
        nchunks,
        hash: o.hash,
        part,
        state: Mutex::new(State {
            have: ChunkSet::new(if mode == Mode::Stripe { nchunks } else { 0 }),
            ..State::default()
        }),
        cv: Condvar::new(),
        abort: AtomicBool::new(false),
        received: Arc::new(AtomicU64::new(0)),
    })
}

/// One thread per stream; a failing stream stops the others. Returns the error that
/// explains the most (a lost connection is usually the consequence of another failure).
fn receive_all(conns: Vec<Arc<Conn>>, ctx: &Arc<Ctx>) -> Option<anyhow::Error> {
    let weak: Vec<_> = conns.iter().map(Arc::downgrade).collect();
    let handles: Vec<_> = conns
        .into_iter()
        .map(|c| {
            let (ctx, weak) = (ctx.clone(), weak.clone());
            std::thread::spawn(move || {
                let r = receive(&c, &ctx);
                if r.is_err() {
                    // Stop every stream, including ones waiting on the window.
                    ctx.abort.store(true, Ordering::SeqCst);
                    ctx.cv.notify_all();
                    for w in &weak {
                        if let Some(c) = w.upgrade() {
                            let _ = c.shutdown(Shutdown::Both);
                        }
                    }
                }
                r
            })
        })
        .collect();
    let mut first_err: Option<anyhow::Error> = None;
    for h in handles {
        if let Err(e) = h.join().unwrap_or_else(|_| Err(anyhow!("worker panicked"))) {
            if first_err.as_ref().is_none_or(|f| lost(f) && !lost(&e)) {
                first_err = Some(e);
            }
        }
    }
    first_err
}

/// The server's verdict against our own finding: a failed integrity check here explains
/// more than the server's broken pipe; a lost connection is better explained by the server.
fn verdict(done: Result<Done>, first_err: Option<anyhow::Error>) -> Result<Done> {
    let local_first = first_err.as_ref().is_some_and(|e| !lost(e));
    match (done, first_err) {
        (_, Some(e)) if local_first => Err(e),
        (Ok(d), _) if d.error.is_some() => Err(anyhow!("server: {}", d.error.unwrap())),
        (_, Some(e)) => Err(e),
        (Err(e), None) => Err(e.context("server closed the control connection")),
        (Ok(d), None) => Ok(d),
    }
}

/// Every chunk arrived, and the end-to-end hash matches the server's (returned).
fn check_complete(o: &SendOpts, ctx: &Ctx, done: &Done) -> Result<Option<String>> {
    let st = ctx.state.lock().unwrap();
    let complete = match ctx.mode {
        Mode::Stripe => st.have.count() == ctx.nchunks,
        Mode::Stream => st.total == Some(st.next) && st.reorder.is_empty(),
    };
    if !complete {
        bail!("server finished but data is missing; nothing was committed");
    }
    if !o.hash {
        return Ok(None);
    }
    let mine = st.e2e.hex();
    match &done.e2e {
        Some(theirs) if *theirs == mine => Ok(Some(mine)),
        Some(theirs) => bail!(
            "END-TO-END HASH MISMATCH (server sent {theirs}, received {mine}); nothing was committed"
        ),
        None => bail!("server did not report an end-to-end hash"),
    }
}

/// The file renamed into place (or stdout flushed).
fn commit(part: Option<Arc<Part>>) -> Result<()> {
    match part {
        Some(p) => {
            p.file.sync_data().map_err(|e| p.io_err(e, "syncing"))?;
            std::fs::rename(&p.tmp, &p.dest)
                .with_context(|| format!("renaming into {}", p.dest.display()))?;
            p.committed.store(true, Ordering::SeqCst);
        }
        None => std::io::stdout().flush().context("writing stdout")?,
    }
    Ok(())
}

fn lost(e: &anyhow::Error) -> bool {
    format!("{e:#}").contains("connection lost")
}

/// `.NAME.xfer-part` next to the destination, created afresh. Like scp, a
/// destination that is a directory (or ends in '/') receives the file under
/// its remote name; a missing directory is an error.
fn open_part(dest: &std::path::Path, remote: &str) -> Result<Part> {
    let into_dir = dest.as_os_str().as_encoded_bytes().ends_with(b"/") || dest.is_dir();
    let dest = if into_dir {
        if !dest.is_dir() {
            bail!("{} is not an existing directory", dest.display());
        }
        let base = remote.rsplit('/').find(|c| !c.is_empty()).unwrap_or("");
        if base.is_empty() || base == "." || base == ".." {
            bail!("the remote path {remote:?} names no file");
        }
        dest.join(base)
    } else {
        dest.to_path_buf()
    };
    let dest = dest.as_path();
    if dest.is_dir() {
        bail!("{} is a directory", dest.display());
    }
    // The rename at the end would replace a device, a FIFO or a symlink.
    crate::inputfile::check_result_path("DEST", dest)?;
    let name = dest
        .file_name()
        .ok_or_else(|| anyhow!("{} names no file", dest.display()))?;
    let tmp = dest.with_file_name(format!(".{}.xfer-part", name.to_string_lossy()));
    let file = open_tmp(&tmp)?;
    Ok(Part {
        tmp,
        dest: dest.to_path_buf(),
        file,
        committed: AtomicBool::new(false),
    })
}

/// The temporary file, new or a stale one of ours (a killed pull's), emptied.
/// Its name is predictable, so in a folder others may write to it could be a
/// symlink or a hard link to someone's file: never followed, never emptied
/// unless it is a plain file of this user's with one link.
fn open_tmp(tmp: &std::path::Path) -> Result<File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(tmp)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => anyhow!(
                "{} is in the way: a symlink (remove it, or pull elsewhere)",
                tmp.display()
            ),
            _ => anyhow::Error::new(e).context(format!("creating {}", tmp.display())),
        })?;
    let md = file.metadata()?;
    // SAFETY: geteuid has no failure mode and touches no memory.
    let me = unsafe { libc::geteuid() };
    if !md.is_file() || md.uid() != me || md.nlink() != 1 {
        bail!(
            "{} is in the way: not a plain file of this user's (remove it, or pull elsewhere)",
            tmp.display()
        );
    }
    file.set_len(0)
        .with_context(|| format!("emptying {}", tmp.display()))?;
    Ok(file)
}

/// Reads one data stream until its END frame, verifying every chunk.
fn receive(c: &Conn, x: &Ctx) -> Result<()> {
    let mut r = c;
    let mut hdr = [0u8; FRAME_HDR_LEN];
    let mut buf = vec![0u8; x.chunk as usize];
    loop {
        r.read_exact(&mut hdr)
            .map_err(|e| crate::conn::lost(e, "connection lost"))?;
        let h = FrameHdr::decode(&hdr)?;
        if x.abort.load(Ordering::Relaxed) {
            return Ok(());
        }
        match h.kind {
            KIND_END => {
                if x.mode == Mode::Stream {
                    let mut st = x.state.lock().unwrap();
                    if st.total.is_some_and(|t| t != h.index) {
                        bail!("inconsistent chunk count at end of stream");
                    }
                    st.total = Some(h.index);
                }
                return Ok(());
            }
            KIND_DATA => {}
            k => bail!("unknown frame kind {k}"),
        }
        if h.len == 0 || h.len as u64 > x.chunk {
            bail!("bad frame length {}", h.len);
        }
        let b = &mut buf[..h.len as usize];
        r.read_exact(b)
            .map_err(|e| crate::conn::lost(e, "connection lost mid-chunk"))?;
        if x.hash && chunk_hash(b) != h.hash {
            bail!("chunk {} failed its integrity check", h.index);
        }
        x.received.fetch_add(h.len as u64, Ordering::Relaxed);
        let aborted = match x.mode {
            Mode::Stripe => stripe_chunk(x, &h, b).map(|_| false)?,
            Mode::Stream => stream_chunk(x, &h, b)?,
        };
        if aborted {
            return Ok(());
        }
    }
}

/// A striped chunk goes to its offset in the file.
fn stripe_chunk(x: &Ctx, h: &FrameHdr, b: &[u8]) -> Result<()> {
    if h.index >= x.nchunks || h.len as u64 != x.chunk.min(x.size - h.index * x.chunk) {
        bail!("bad chunk index {} / length {}", h.index, h.len);
    }
    if let Some(p) = &x.part {
        p.file
            .write_all_at(b, h.index * x.chunk)
            .map_err(|e| p.io_err(e, "writing"))?;
    }
    let mut st = x.state.lock().unwrap();
    if !st.have.insert(h.index) {
        bail!("duplicate chunk {}", h.index);
    }
    st.e2e.add(h.index, h.hash);
    Ok(())
}

/// A sequenced chunk waits in the reorder window, and everything now in order is written
/// out (under the lock: simple, and the output is sequential anyway). Returns true when the
/// pull was aborted meanwhile.
fn stream_chunk(x: &Ctx, h: &FrameHdr, b: &[u8]) -> Result<bool> {
    let cap = (WINDOW / x.chunk).max(1);
    let mut st = x.state.lock().unwrap();
    // Backpressure: the chunk needed next always fits the window.
    while h.index >= st.next + cap && !x.abort.load(Ordering::Relaxed) {
        st = x.cv.wait_timeout(st, Duration::from_millis(100)).unwrap().0;
    }
    if x.abort.load(Ordering::Relaxed) {
        return Ok(true);
    }
    if h.index < st.next || st.reorder.contains_key(&h.index) {
        bail!("duplicate chunk {}", h.index);
    }
    st.reorder.insert(h.index, (b.to_vec(), h.hash));
    while let Some((d, hh)) = {
        let n = st.next;
        st.reorder.remove(&n)
    } {
        match &x.part {
            Some(p) => p
                .file
                .write_all_at(&d, st.written)
                .map_err(|e| p.io_err(e, "writing"))?,
            None => std::io::stdout()
                .lock()
                .write_all(&d)
                .context("writing stdout")?,
        }
        let n = st.next;
        st.e2e.add(n, hh);
        st.next += 1;
        st.written += d.len() as u64;
    }
    if x.part.is_none() {
        // Rust's stdout is line-buffered: without a flush, the bytes after the last
        // newline of the data would wait for the next chunk (a pipe's reader, or a
        // pull that stalls, would not see them).
        std::io::stdout().flush().context("writing stdout")?;
    }
    x.cv.notify_all();
    Ok(false)
}
