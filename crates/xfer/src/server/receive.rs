//! A push's data connections: frames verified and written out (stripe: by
//! offset; stream: in order, through a reorder window), and goodput samples.

use super::state::{Output, Session, Slot, State};
use crate::conn::Conn;
use crate::proto::*;
use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) fn handle_data(s: &Arc<Session>, mut conn: Conn, stream: u32) -> Result<()> {
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

pub(super) fn receive_stream(s: &Session, conn: &mut Conn, stream: u32) -> Result<()> {
    let slot = &s.slots[stream as usize];
    let mut buf = Vec::new();
    let mut hdr = [0u8; FRAME_HDR_LEN];
    loop {
        conn.read_exact(&mut hdr)
            .map_err(|e| crate::conn::lost(e, "connection lost"))?;
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
pub(super) fn end_of_stream(s: &Session, slot: &Slot, h: &FrameHdr) -> Result<()> {
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
pub(super) fn stripe_chunk(
    s: &Session,
    slot: &Slot,
    conn: &mut Conn,
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
pub(super) fn stream_chunk(
    s: &Session,
    slot: &Slot,
    conn: &mut Conn,
    h: &FrameHdr,
) -> Result<bool> {
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
pub(super) fn read_payload(
    conn: &mut Conn,
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
            .map_err(|e| crate::conn::lost(e, "connection lost mid-chunk"))?;
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
pub(super) fn take_next(st: &mut State, len: u64, hash: u64) -> u64 {
    let off = st.stream_bytes;
    st.e2e.add(st.next, hash);
    st.next += 1;
    st.stream_bytes += len;
    off
}

/// Writes chunk `idx` and then every consecutive chunk already buffered,
/// then gives the write token back. Whoever receives the chunk the output
/// needs next does the writing, so no writer thread and no hand-off.
pub(super) fn drain(
    s: &Session,
    mut data: Vec<u8>,
    mut idx: u64,
    mut hash: u64,
    mut off: u64,
) -> Result<()> {
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
pub(super) fn sample_goodput(s: &Session) -> Vec<GoodputSample> {
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
pub(super) fn merge_ticks(ticks: Vec<(f64, Vec<u64>)>) -> Vec<(f64, Vec<u64>)> {
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
