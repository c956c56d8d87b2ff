//! Pull (`xfer send HOST:PORT:/path LOCAL|-`): the same session, frames and
//! sender code with the roles swapped. The server runs the stripe or stream
//! senders on its data sockets; this side verifies every chunk and the
//! end-to-end hash, and only then renames the temporary file into place.

use crate::chunkset::ChunkSet;
use crate::client::{connect, pacing_per_socket, target_rate, AttemptError, Outcome, PullDest};
use crate::client::{progress_bar, sample_tcp, SendOpts};
use crate::fsinfo;
use crate::proto::*;
use crate::util::{hex, random_bytes};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
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
    let req = Request {
        session: session.clone(),
        streams: o.streams,
        mode,
        chunk: o.chunk,
        size: None,
        sink: Sink::Path(remote.clone()),
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
    let size = match recv_msg::<_, Reply>(&mut ctrl)? {
        Reply::Accept { size: Some(s), .. } => s,
        Reply::Reject(m) => return Err(anyhow!("server refused: {m}").into()),
        _ => return Err(anyhow!("protocol error (server too old for pulls?)").into()),
    };
    let mut conns = Vec::new();
    for i in 0..o.streams {
        let mut c = connect(o, addr, true)?;
        send_msg(
            &mut c,
            &Open::Data {
                session: session.clone(),
                stream: i,
            },
        )?;
        match recv_msg::<_, Reply>(&mut c)? {
            Reply::Joined => {}
            Reply::Reject(m) => return Err(anyhow!("server refused data stream: {m}").into()),
            _ => return Err(anyhow!("protocol error").into()),
        }
        conns.push(Arc::new(c));
    }
    let data_start = Instant::now();
    let rate_bps = target_rate(o, Some(size), t0)?;
    let pacing = rate_bps.map(|r| pacing_per_socket(o, r));
    send_msg(&mut ctrl, &Start { pacing })?;

    let nchunks = size.div_ceil(o.chunk as u64);
    if mode == Mode::Stripe {
        // One bit per chunk here too: a huge file needs bigger chunks.
        check_chunk_count(size, o.chunk)?;
    }
    if let (Some(p), Mode::Stripe) = (&part, mode) {
        p.file.set_len(size).map_err(|e| p.io_err(e, "sizing"))?;
    }
    let ctx = Arc::new(Ctx {
        mode,
        chunk: o.chunk as u64,
        size,
        nchunks,
        hash: o.hash,
        part: part.clone(),
        state: Mutex::new(State {
            have: ChunkSet::new(if mode == Mode::Stripe { nchunks } else { 0 }),
            ..State::default()
        }),
        cv: Condvar::new(),
        abort: AtomicBool::new(false),
        received: Arc::new(AtomicU64::new(0)),
    });
    let weak: Vec<_> = conns.iter().map(Arc::downgrade).collect();
    let sampler_stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (weak, stop, iv) = (weak.clone(), sampler_stop.clone(), o.interval);
        std::thread::spawn(move || sample_tcp(weak, stop, iv, data_start))
    };
    let bar = progress_bar(o, Some(size), 0, ctx.received.clone(), sampler_stop.clone());
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
            // A lost connection is usually the consequence of another failure.
            if first_err.as_ref().is_none_or(|f| lost(f) && !lost(&e)) {
                first_err = Some(e);
            }
        }
    }
    // The server's verdict carries its end-to-end hash of what it sent.
    ctrl.set_read_timeout(Some(Duration::from_secs(if first_err.is_some() {
        5
    } else {
        60
    })))?;
    let done: Result<Done> = recv_msg(&mut ctrl);
    let elapsed = data_start.elapsed().as_secs_f64();
    sampler_stop.store(true, Ordering::SeqCst);
    let tcp = sampler.join().unwrap_or_default();
    if let Some(b) = bar {
        let _ = b.join();
    }
    // Our own finding (e.g. a failed integrity check) explains more than the
    // server's broken pipe; a lost connection is better explained by the server.
    let local_first = first_err.as_ref().is_some_and(|e| !lost(e));
    let done = match (done, first_err) {
        (_, Some(e)) if local_first => return Err(e.into()),
        (Ok(d), _) if d.error.is_some() => {
            return Err(anyhow!("server: {}", d.error.unwrap()).into())
        }
        (_, Some(e)) => return Err(e.into()),
        (Err(e), None) => return Err(e.context("server closed the control connection").into()),
        (Ok(d), None) => d,
    };
    let st = ctx.state.lock().unwrap();
    let complete = match mode {
        Mode::Stripe => st.have.count() == nchunks,
        Mode::Stream => st.total == Some(st.next) && st.reorder.is_empty(),
    };
    if !complete {
        return Err(anyhow!("server finished but data is missing; nothing was committed").into());
    }
    let e2e = if o.hash {
        let mine = st.e2e.hex();
        match &done.e2e {
            Some(theirs) if *theirs == mine => Some(mine),
            Some(theirs) => {
                return Err(anyhow!(
                    "END-TO-END HASH MISMATCH (server sent {theirs}, received {mine}); nothing was committed"
                )
                .into())
            }
            None => return Err(anyhow!("server did not report an end-to-end hash").into()),
        }
    } else {
        None
    };
    drop(st);
    match part {
        Some(p) => {
            p.file.sync_data().map_err(|e| p.io_err(e, "syncing"))?;
            std::fs::rename(&p.tmp, &p.dest)
                .with_context(|| format!("renaming into {}", p.dest.display()))?;
            p.committed.store(true, Ordering::SeqCst);
        }
        None => std::io::stdout().flush().context("writing stdout")?,
    }
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
        end_unix: crate::start::unix_now(),
    })
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
    let name = dest
        .file_name()
        .ok_or_else(|| anyhow!("{} names no file", dest.display()))?;
    let tmp = dest.with_file_name(format!(".{}.xfer-part", name.to_string_lossy()));
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    Ok(Part {
        tmp,
        dest: dest.to_path_buf(),
        file,
        committed: AtomicBool::new(false),
    })
}

/// Reads one data stream until its END frame, verifying every chunk.
fn receive(c: &TcpStream, x: &Ctx) -> Result<()> {
    let mut r = c;
    let mut hdr = [0u8; FRAME_HDR_LEN];
    let mut buf = vec![0u8; x.chunk as usize];
    loop {
        r.read_exact(&mut hdr).context("connection lost")?;
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
        r.read_exact(b).context("connection lost mid-chunk")?;
        if x.hash && chunk_hash(b) != h.hash {
            bail!("chunk {} failed its integrity check", h.index);
        }
        x.received.fetch_add(h.len as u64, Ordering::Relaxed);
        match x.mode {
            Mode::Stripe => {
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
            }
            Mode::Stream => {
                let cap = (WINDOW / x.chunk).max(1);
                let mut st = x.state.lock().unwrap();
                // Backpressure: the chunk needed next always fits the window.
                while h.index >= st.next + cap && !x.abort.load(Ordering::Relaxed) {
                    st = x.cv.wait_timeout(st, Duration::from_millis(100)).unwrap().0;
                }
                if x.abort.load(Ordering::Relaxed) {
                    return Ok(());
                }
                if h.index < st.next || st.reorder.contains_key(&h.index) {
                    bail!("duplicate chunk {}", h.index);
                }
                st.reorder.insert(h.index, (b.to_vec(), h.hash));
                // Write out everything now in order (under the lock: simple,
                // and the output is sequential anyway).
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
                x.cv.notify_all();
            }
        }
    }
}
