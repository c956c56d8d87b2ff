//! Stripe mode: each connection sends its own ranges of chunks, read by
//! offset.

use super::frame::{stall_if_due, write_frame};
use crate::conn::Conn;
use crate::limiter::Gate;
use crate::proto::*;
use anyhow::{Context, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// One stripe sender's share of the work.
pub(crate) struct StripeCtx {
    pub file: Option<Arc<File>>,
    pub zero: Option<Arc<Vec<u8>>>,
    pub chunk: u64,
    pub size: u64,
    pub hash: bool,
    /// Bytes sent by all streams together.
    pub sent: Arc<AtomicU64>,
    pub abort: Arc<AtomicBool>,
    pub stall_after: Option<u64>,
    /// Asked before each piece of payload (a plan that pauses, the sleep
    /// limiter); None: write whole frames.
    pub gate: Option<Gate>,
}

/// Sends the chunks `chunks` yields, in order, then an END frame; returns
/// this stream's share of the end-to-end digest.
pub(crate) fn stripe_sender(
    c: Arc<Conn>,
    chunks: impl Iterator<Item = u64>,
    mut x: StripeCtx,
) -> Result<E2e> {
    let mut buf = vec![0u8; x.chunk as usize];
    let mut e2e = E2e::default();
    for i in chunks {
        if x.abort.load(Ordering::Relaxed) {
            return Ok(e2e);
        }
        stall_if_due(&c, x.stall_after, &x.sent)?;
        let len = x.chunk.min(x.size - i * x.chunk) as usize;
        let data: &[u8] = match &x.file {
            Some(f) => {
                f.read_exact_at(&mut buf[..len], i * x.chunk)
                    .context("reading source")?;
                &buf[..len]
            }
            None => &x.zero.as_ref().unwrap()[..len],
        };
        let h = if x.hash { chunk_hash(data) } else { 0 };
        write_frame(
            &c,
            FrameHdr {
                kind: KIND_DATA,
                index: i,
                len: len as u32,
                hash: h,
            },
            data,
            x.gate.as_mut(),
        )
        .context("sending data")?;
        e2e.add(i, h);
        x.sent.fetch_add(len as u64, Ordering::Relaxed);
    }
    write_frame(
        &c,
        FrameHdr {
            kind: KIND_END,
            index: 0,
            len: 0,
            hash: 0,
        },
        &[],
        None,
    )
    .context("sending data")?;
    Ok(e2e)
}

/// Hashes the chunks the receiver already has (for the end-to-end digest).
pub(crate) fn hash_skipped(
    skipped: &[(u64, u64)],
    file: Option<Arc<File>>,
    zero: Option<Arc<Vec<u8>>>,
    chunk: u64,
    size: u64,
) -> Result<E2e> {
    let mut buf = vec![0u8; chunk as usize];
    let mut e2e = E2e::default();
    for i in skipped.iter().flat_map(|&(a, b)| a..b) {
        let len = chunk.min(size - i * chunk) as usize;
        let d: &[u8] = match &file {
            Some(f) => {
                f.read_exact_at(&mut buf[..len], i * chunk)
                    .context("reading source")?;
                &buf[..len]
            }
            None => &zero.as_ref().unwrap()[..len],
        };
        e2e.add(i, chunk_hash(d));
    }
    Ok(e2e)
}
