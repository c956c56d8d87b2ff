//! One frame onto a data connection, and the stall test hook.

use crate::conn::Conn;
use crate::limiter::Gate;
use crate::proto::FrameHdr;
use anyhow::{bail, Result};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes a frame; with a gate, its payload in the pieces the gate admits
/// (the header goes with the first).
pub(crate) fn write_frame(
    c: &Conn,
    hdr: FrameHdr,
    data: &[u8],
    gate: Option<&mut Gate>,
) -> Result<()> {
    let mut w = c;
    let Some(g) = gate.filter(|_| !data.is_empty()) else {
        w.write_all(&hdr.encode())?;
        w.write_all(data)?;
        return Ok(());
    };
    let mut rest = data;
    let mut first = true;
    while !rest.is_empty() {
        let n = g.piece().min(rest.len());
        if !g.admit(n) {
            bail!("transfer aborted");
        }
        if first {
            w.write_all(&hdr.encode())?;
            first = false;
        }
        w.write_all(&rest[..n])?;
        rest = &rest[n..];
    }
    Ok(())
}

/// Test hook (`--fault-stall-after`): once `after` bytes went out on all
/// streams together, stop sending and wait for the connection to close (the
/// peer never writes on a data connection, so only its end or ours ends the
/// wait). A transfer stalled this way cannot finish, so a test can kill
/// either end "mid-transfer" without racing the end of the transfer.
pub(crate) fn stall_if_due(c: &Conn, after: Option<u64>, sent: &AtomicU64) -> Result<()> {
    if after.is_some_and(|n| sent.load(Ordering::SeqCst) >= n) {
        let _ = (&*c).read(&mut [0u8; 1]);
        bail!("sending data: connection closed while stalled (test hook)");
    }
    Ok(())
}
