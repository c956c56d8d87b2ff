//! Simulated time: an explicit integer count of nanoseconds since the start of the run.
//!
//! Nothing in the simulator reads a wall clock; every function that depends on time is
//! given `now` (sans-IO, as in smoltcp).

/// Nanoseconds since the start of the run.
pub type Time = u64;

pub const NS_PER_US: Time = 1_000;
pub const NS_PER_MS: Time = 1_000_000;
pub const NS_PER_S: Time = 1_000_000_000;

/// Seconds (f64) of a time or duration, for output.
#[inline]
pub fn secs(t: Time) -> f64 {
    t as f64 / NS_PER_S as f64
}
