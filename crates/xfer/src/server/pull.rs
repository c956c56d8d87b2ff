//! A pull: the server sends, with the send engine (send/) a push's client
//! runs, on the data connections the client opens.

use super::state::{reject_on_err, Server};
use crate::conn::Conn;
use crate::proto::*;
use crate::safepath;
use crate::send::source::{SharedFile, StreamSrc};
use crate::send::workers::{Worker, Workers};
use anyhow::{anyhow, bail, Result};
use std::io::Read;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

pub(super) struct PullGuard<'a>(&'a Server, String);
impl Drop for PullGuard<'_> {
    fn drop(&mut self) {
        self.0.pulls.lock().unwrap().remove(&self.1);
    }
}

/// True once the peer closed (or broke) the connection; never blocks.
pub(super) fn peer_closed(c: &Conn) -> bool {
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
pub(super) fn handle_pull(srv: &Arc<Server>, mut conn: Conn, req: Request) -> Result<()> {
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
    log_pull(&req, &error, bytes, elapsed, conn.encrypted());
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
pub(super) fn watch_pull_client(
    conn: &Conn,
    conns: &[Arc<Conn>],
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
pub(super) fn start_pull_senders(
    req: &Request,
    conns: Vec<Arc<Conn>>,
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

pub(super) fn log_pull(
    req: &Request,
    error: &Option<String>,
    bytes: u64,
    elapsed: f64,
    encrypted: bool,
) {
    let id = &req.session[..8];
    let p = match &req.sink {
        Sink::Path(p) => p.as_str(),
        _ => "",
    };
    match error {
        None => eprintln!(
            "xfer: session {id}: {} <- {p} in {elapsed:.3} s ({} streams, {}, pull, {})",
            crate::util::human_bytes(bytes),
            req.streams,
            req.mode.name(),
            crate::util::sealed(encrypted)
        ),
        Some(e) => eprintln!("xfer: pull {id} of {p} failed: {e}"),
    }
}

/// Waits for a pull's data connections (30 s at most), and gives up as soon
/// as the client closes its control connection, so a client that goes away
/// does not hold a session slot.
pub(super) fn pull_connections(
    ctrl: &Conn,
    rx: &mpsc::Receiver<(u32, Conn)>,
    req: &Request,
) -> Result<Vec<Arc<Conn>>> {
    let id = &req.session[..8];
    let mut slots: Vec<Option<Conn>> = (0..req.streams).map(|_| None).collect();
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
