//! `xfer serve`: the receiver daemon (and a pull's sender).
//!
//! * `state`: options, sessions, admission checks;
//! * `control`, `prepare`, `receive`: a push, from its request through its
//!   data to the verdict;
//! * `pull`: a pull, sent by the send engine (send/).

mod control;
mod prepare;
mod pull;
mod receive;
mod state;

pub use state::ServeOpts;

use crate::conn::Conn;
use crate::proto::*;
use crate::safepath;
use anyhow::{anyhow, bail, Context, Result};
use control::handle_control;
use receive::handle_data;
use state::Server;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

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

fn handle_conn(srv: &Arc<Server>, conn: TcpStream) -> Result<()> {
    // Unauthenticated peers get a short leash.
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.set_nodelay(true)?;
    let mut conn = Conn::server(conn, &srv.opts.auth, srv.opts.crypto)?;
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
