//! Stream mode: every connection takes the next chunk of one shared source.

use super::frame::{stall_if_due, write_frame};
use super::source::StreamSrc;
use crate::conn::Conn;
use crate::limiter::Gate;
use crate::proto::*;
use anyhow::{Context, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Takes chunks from the shared source and sends them until its end, then an
/// END frame with the chunk count; returns this stream's share of the
/// end-to-end digest (chunks the receiver already has are hashed, not sent).
pub(crate) fn stream_sender(
    c: Arc<Conn>,
    src: Arc<StreamSrc>,
    sent: Arc<AtomicU64>,
    stall_after: Option<u64>,
    mut gate: Option<Gate>,
) -> Result<E2e> {
    let mut buf = Vec::with_capacity(src.chunk);
    let mut e2e = E2e::default();
    while let Some((seq, n)) = src.next(&mut buf)? {
        if src.abort.load(Ordering::Relaxed) {
            return Ok(e2e);
        }
        // mem: sends one shared zero buffer, like stripe mode does.
        let buf = match &src.zero {
            Some(z) => &z[..n],
            None => &buf[..n],
        };
        let h = if src.hash { chunk_hash(buf) } else { 0 };
        e2e.add(seq, h);
        if seq < src.skip {
            continue; // the receiver has it; hashed for the e2e digest
        }
        stall_if_due(&c, stall_after, &sent)?;
        write_frame(
            &c,
            FrameHdr {
                kind: KIND_DATA,
                index: seq,
                len: buf.len() as u32,
                hash: h,
            },
            buf,
            gate.as_mut(),
        )
        .context("sending data")?;
        sent.fetch_add(buf.len() as u64, Ordering::Relaxed);
    }
    let total = src.st.lock().unwrap().total.unwrap_or(0);
    if src.abort.load(Ordering::SeqCst) {
        return Ok(e2e);
    }
    write_frame(
        &c,
        FrameHdr {
            kind: KIND_END,
            index: total,
            len: 0,
            hash: 0,
        },
        &[],
        None,
    )
    .context("sending data")?;
    Ok(e2e)
}
