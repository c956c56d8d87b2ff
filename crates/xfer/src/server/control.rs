//! A push's control connection: the session from its request to the
//! verdict (window clamps, commit or clean-up, the report).

use super::prepare::prepare;
use super::pull::handle_pull;
use super::receive::sample_goodput;
use super::state::{admit, reject_on_err, BusyGuard, Server, Session, SessionGuard};
use crate::conn::Conn;
use crate::proto::*;
use crate::safepath;
use anyhow::{anyhow, bail, Result};
use std::io::Read;
use std::net::Shutdown;
use std::process::Child;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) fn handle_control(srv: &Arc<Server>, mut conn: Conn, req: Request) -> Result<()> {
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
            features: vec![
                FEATURE_WINDOW_CLAMP.into(),
                FEATURE_DATA_START.into(),
                FEATURE_LATE_JOIN.into(),
            ],
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
    let done = report(&session, result, resumed_bytes, goodput, conn.encrypted());
    let _ = send_msg(&mut conn, &done);
    let _ = conn.shutdown(Shutdown::Both);
    let _ = watcher.join();
    Ok(())
}

/// The session is over: its failure recorded (none is accepted from the watcher from now
/// on), its data connections closed, its sampler stopped.
pub(super) fn close_session(session: &Session, result: &Result<()>) {
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
pub(super) fn watch_control(s: &Arc<Session>, mut c: Conn) {
    loop {
        match recv_request::<_, ClientCtl>(&mut c) {
            Ok(ClientCtl::Clamp(w)) => clamp_windows(s, &w.window_clamp),
            Ok(ClientCtl::Finish(f)) => {
                let arrived = s.now();
                let mut st = s.state.lock().unwrap();
                st.finish = Some(f.e2e);
                st.streams_used = f.streams_used.filter(|&n| n <= s.req.streams);
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
pub(super) const CLAMP_CHECK: Duration = Duration::from_millis(5);

/// The cwnd limiter: each stream's socket advertises at most its window.
/// The first clamp also starts the keeper (below).
pub(super) fn clamp_windows(s: &Arc<Session>, windows: &[u32]) {
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
pub(super) fn keep_clamps(s: &Session) {
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
pub(super) fn claim_destination<'a>(
    srv: &'a Server,
    req: &Request,
) -> Result<Option<BusyGuard<'a>>> {
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
pub(super) fn wait_for_data(session: &Session) {
    let req = &session.req;
    let mut st = session.state.lock().unwrap();
    loop {
        if st.failed.is_some() {
            return;
        }
        // Every announced stream ended, or as many as the client says it
        // opened (`--streams auto`; known once its digest arrived).
        let streams = st.streams_used.unwrap_or(req.streams);
        let data_done = st.ended == streams && (req.mode == Mode::Stripe || st.writer_done);
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
pub(super) fn verdict(session: &Session) -> (Result<()>, bool) {
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
pub(super) fn finish_consumer(
    session: &Session,
    child: Option<Child>,
    result: Result<()>,
) -> Result<()> {
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
pub(super) fn commit_or_clean(session: &Session, result: Result<()>, mismatch: bool) -> Result<()> {
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
pub(super) fn report(
    session: &Session,
    result: Result<()>,
    resumed_bytes: u64,
    goodput: Vec<GoodputSample>,
    encrypted: bool,
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
            "xfer: session {id}: {} -> {} in {:.3} s ({:.3} Gbit/s, {} streams, {}, {})",
            crate::util::human_bytes(bytes),
            sink,
            elapsed,
            bytes as f64 * 8.0 / elapsed.max(1e-9) / 1e9,
            req.streams,
            req.mode.name(),
            crate::util::sealed(encrypted)
        ),
        Some(e) => eprintln!("xfer: session {id} to {sink} failed: {e}"),
    }
    done
}
