//! The goodput target and the pacing rate of each socket.

use crate::limits::{RATE_MAX_BPS, RATE_MIN_BPS};
use crate::proto::FRAME_HDR_LEN;
use crate::session::SendOpts;
use anyhow::{anyhow, bail, Result};
use std::time::Instant;

/// Goodput target in bit/s from --rate, or from --deadline and the bytes
/// still to send.
pub(crate) fn target_rate(
    o: &SendOpts,
    remaining: Option<u64>,
    t0: Instant,
) -> Result<Option<u64>> {
    Ok(match (o.rate_bps, o.deadline) {
        (Some(r), _) => Some(r),
        (None, Some(dl)) => {
            let rem = remaining
                .ok_or_else(|| anyhow!("--deadline with a pipe of unknown size needs --size"))?;
            Some(deadline_rate(
                rem,
                dl.as_secs_f64() - t0.elapsed().as_secs_f64(),
            )?)
        }
        _ => None,
    })
}

/// The goodput (bit/s) that moves `remaining` bytes in `left` seconds,
/// aiming slightly early: ramp-up and the final acknowledgement cost time.
fn deadline_rate(remaining: u64, left: f64) -> Result<u64> {
    let left = left - (left * 0.005).min(0.25);
    if left <= 0.0 {
        bail!("deadline already passed");
    }
    let rate = (remaining as f64 * 8.0 / left).ceil() as u64;
    // Past the highest rate, pacing would not hold the data back anyway.
    Ok(rate.clamp(RATE_MIN_BPS.value, RATE_MAX_BPS.value))
}

/// Pacing: aggregate goodput split evenly, scaled up by frame overhead so
/// the payload arrives at the requested rate (pacing counts every byte).
pub(crate) fn pacing_per_socket(o: &SendOpts, rate_bps: u64) -> u64 {
    let overhead = (o.chunk as f64 + FRAME_HDR_LEN as f64) / o.chunk as f64;
    (rate_bps as f64 / 8.0 / o.streams as f64 * overhead).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_rate_covers_what_is_left() {
        // 8 MiB in 2 s: 33.5 Mbit/s, plus 0.5 % of margin.
        let r = deadline_rate(8 << 20, 2.0).unwrap() as f64;
        let want = (8u64 << 20) as f64 * 8.0 / 2.0;
        assert!(r > want && r < want * 1.006, "{r} vs {want}");
        // The margin is at most 0.25 s.
        let r = deadline_rate(1 << 30, 100.0).unwrap() as f64;
        assert!((r - (1u64 << 30) as f64 * 8.0 / 99.75).abs() < 2.0);
        assert!(deadline_rate(1, -0.1).is_err());
        assert_eq!(deadline_rate(1 << 50, 1e-3).unwrap(), RATE_MAX_BPS.value);
    }
}
