//! How long a paced transfer takes, said before it starts. At a low `--rate`
//! a transfer runs for hours and its progress moves a whole chunk at a time,
//! so a silent start looks like a hang: a transfer expected to take a minute
//! or more says how long, and how long a chunk takes when that is long too.
//! One that would take longer than `TRANSFER_TIME_MAX_S` is refused.

use crate::limits::TRANSFER_TIME_MAX_S;
use crate::start::human_duration;
use crate::util::{human_bytes, human_rate, usage};
use anyhow::Result;

/// Transfers expected to take this long or more say so up front.
const SAY_FROM_S: f64 = 60.0;
/// A chunk that takes this long or more is mentioned (the progress bar
/// moves by whole chunks).
const SLOW_CHUNK_S: f64 = 10.0;

/// Checks `size` bytes (None: a pipe of unknown length) at `rate_bps` and
/// tells the user (unless `quiet`) how long it will take.
pub fn announce(size: Option<u64>, rate_bps: u64, chunk: u32, quiet: bool) -> Result<()> {
    let rate = human_rate(rate_bps);
    let secs = |bytes: u64| bytes as f64 * 8.0 / rate_bps as f64;
    let chunk_s = secs(chunk as u64);
    let chunk_note = (chunk_s >= SLOW_CHUNK_S).then(|| {
        format!(
            "; progress moves by whole {} chunks, about {} each at this rate (a smaller \
             --chunk shows it sooner)",
            human_bytes(chunk as u64),
            human_duration(chunk_s)
        )
    });
    let Some(size) = size else {
        if let (false, Some(note)) = (quiet, chunk_note) {
            eprintln!("xfer: sending at {rate}{note}");
        }
        return Ok(());
    };
    let total = secs(size);
    if total > TRANSFER_TIME_MAX_S.value {
        return Err(usage(format!(
            "--rate {rate}: {} would take {} at that rate, more than {} ({}): raise --rate",
            human_bytes(size),
            human_duration(total),
            human_duration(TRANSFER_TIME_MAX_S.value),
            TRANSFER_TIME_MAX_S.reason
        )));
    }
    if !quiet && total >= SAY_FROM_S {
        eprintln!(
            "xfer: {} at {rate} takes about {}{}",
            human_bytes(size),
            human_duration(total),
            chunk_note.unwrap_or_default()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_longer_than_the_limit_is_refused_with_its_time() {
        let e = announce(Some(1 << 30), 1000, 1 << 20, true).unwrap_err();
        assert!(e.downcast_ref::<crate::util::UsageError>().is_some());
        assert_eq!(
            e.to_string(),
            "--rate 1 kbit/s: 1.00 GiB would take 99 days 10 h at that rate, more than 23 \
             days 3 h (about 23 days, the longest run xferlab plans (limits.py \
             SPAN_MAX_S)): raise --rate"
        );
        announce(Some(1 << 20), 1000, 1 << 20, true).unwrap();
        announce(None, 1000, 1 << 20, true).unwrap();
    }
}
