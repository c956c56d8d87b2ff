//! The server's state: its options, the sessions it runs and what each
//! holds, and the checks a request passes before it becomes one.

use crate::chunkset::ChunkSet;
use crate::conn::Conn;
use crate::fsinfo;
use crate::journal::Journal;
use crate::proto::*;
use crate::safepath;
use anyhow::{anyhow, bail, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::ChildStdin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub struct ServeOpts {
    pub listen: std::net::SocketAddr,
    pub root: PathBuf,
    pub auth: Auth,
    /// `--encrypt`, `--plaintext` or the default.
    pub crypto: crate::crypt::Crypto,
    pub allow_cmd: bool,
    pub max_chunk: u32,
    pub max_sessions: usize,
    /// Open connections (authenticated or not); past it, newcomers are told
    /// the server is busy.
    pub max_conns: u64,
    pub rcvbuf: Option<usize>,
}

pub(super) struct Server {
    pub(super) opts: ServeOpts,
    pub(super) root: OwnedFd,
    pub(super) sessions: Mutex<HashMap<String, Arc<Session>>>,
    pub(super) busy: Mutex<HashSet<String>>,
    pub(super) busy_cv: Condvar,
    /// Pull sessions: stream count and where their data connections go.
    pub(super) pulls: Mutex<HashMap<String, (u32, DataTx)>>,
}

/// Hands a pull's data connections (stream index, socket) to its control thread.
pub(super) type DataTx = mpsc::Sender<(u32, Conn)>;

pub(super) enum Output {
    Discard,
    File,
    Cmd(ChildStdin),
}

/// A file destination: the part file and journal beside it.
pub(super) struct FileSink {
    pub(super) dir: OwnedFd,
    pub(super) name: String,
    pub(super) part: String,
    pub(super) jname: String,
    pub(super) file: File,
    pub(super) journal: Mutex<Journal>,
    /// The destination as the client named it, and the mount point of its
    /// file system, for error messages.
    pub(super) rel: String,
    pub(super) mount: PathBuf,
}

impl FileSink {
    /// "no space left on /data (...)" for a full file system; otherwise the
    /// error with what was being done.
    pub(super) fn io_err(&self, e: std::io::Error, what: &str) -> anyhow::Error {
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
    pub(super) fn write_chunk(
        &self,
        data: &[u8],
        offset: u64,
        index: u64,
        hash: u64,
    ) -> Result<()> {
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
    pub(super) fn remove(&self) {
        safepath::unlink(&self.dir, &self.part);
        safepath::unlink(&self.dir, &self.jname);
    }
}

#[derive(Default)]
pub(super) struct State {
    pub(super) failed: Option<String>,
    pub(super) finished: bool,
    pub(super) ended: u32,
    /// Stripe mode: which chunks are verified (one bit each).
    pub(super) have: ChunkSet,
    /// End-to-end digest of every chunk verified so far, resumed ones included.
    pub(super) e2e: E2e,
    // Stream mode: reorder buffer.
    pub(super) next: u64,
    /// Stream mode: bytes written out in order, resumed prefix included;
    /// the next chunk goes at this offset.
    pub(super) stream_bytes: u64,
    pub(super) total: Option<u64>,
    pub(super) reorder: BTreeMap<u64, (Vec<u8>, u64)>,
    /// A data thread is writing chunks out in order (the "write token").
    pub(super) writing: bool,
    /// The sender's end-to-end digest (inner None: hashing off), once sent.
    pub(super) finish: Option<Option<String>>,
    /// The sender's data start in session time (see `Finish::data_start_ago`).
    pub(super) data_start: Option<f64>,
    /// Threads blocked on the reorder window; waking nobody is cheaper.
    pub(super) window_waiters: u32,
    pub(super) writer_done: bool,
    pub(super) conns: Vec<Conn>,
    pub(super) joined: Vec<bool>,
    /// The data streams the client opened, if fewer than it announced.
    pub(super) streams_used: Option<u32>,
}

pub(super) struct Slot {
    pub(super) bytes: AtomicU64,
    pub(super) first: Mutex<Option<f64>>,
    pub(super) end: Mutex<Option<f64>>,
    /// The stream's socket, for window clamps.
    pub(super) sock: Mutex<Option<Conn>>,
    /// The window clamp the client asked for (bytes; 0: none).
    pub(super) clamp: AtomicU32,
}

pub(super) struct Session {
    pub(super) req: Request,
    pub(super) start: Instant,
    pub(super) nchunks: u64,
    pub(super) fsink: Option<FileSink>,
    pub(super) cap: u64,
    pub(super) state: Mutex<State>,
    pub(super) cv: Condvar,
    pub(super) slots: Vec<Slot>,
    pub(super) stop_sampler: AtomicBool,
    /// Recycled chunk buffers (stream mode): fresh 1 MiB allocations cost
    /// page faults and zeroing on every chunk.
    pub(super) pool: Mutex<Vec<Vec<u8>>>,
    /// Stream mode output; only the thread holding the write token uses it.
    pub(super) output: Mutex<Option<Output>>,
    /// Payload bytes written out (or accepted by a consumer or the discard
    /// sink) in this session, for the fault hook.
    pub(super) written: AtomicU64,
    /// The window clamps' keeper runs (see `keep_clamps`).
    pub(super) clamp_keeper: AtomicBool,
}

impl Session {
    pub(super) fn fail(&self, msg: String) {
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

    pub(super) fn failed(&self) -> bool {
        self.state.lock().unwrap().failed.is_some()
    }

    pub(super) fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub(super) fn chunk_len(&self, index: u64) -> u64 {
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
    pub(super) fn wrote(&self, n: u64) -> Result<()> {
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

pub(super) struct BusyGuard<'a>(pub(super) &'a Server, pub(super) String);
impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0.busy.lock().unwrap().remove(&self.1);
        self.0.busy_cv.notify_all();
    }
}

pub(super) struct SessionGuard<'a>(pub(super) &'a Server, pub(super) String);
impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        self.0.sessions.lock().unwrap().remove(&self.1);
    }
}

/// Checks every number a client states before anything is sized by it.
pub(super) fn validate(srv: &Server, req: &Request) -> Result<()> {
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
pub(super) fn reject_on_err<T>(conn: &mut Conn, r: Result<T>) -> Result<T> {
    if let Err(e) = &r {
        send_msg(conn, &Reply::Reject(format!("{e:#}")))?;
    }
    r
}

/// A valid request, and room for one more session.
pub(super) fn admit(srv: &Arc<Server>, conn: &mut Conn, req: &Request) -> Result<()> {
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
