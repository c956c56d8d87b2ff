//! Rate limiters in a sender host, in front of its interface (seed 001 §2.1.3).
//!
//! * [`Gate::Pacer`] — packet-level pacing (PSPacer, or Linux pacing): packets leave
//!   exactly `size / rate` apart, so the flow never bursts.
//! * [`Gate::TokenBucket`] — a token bucket refilled by a kernel timer (HTB/TBF with
//!   `HZ` ticks): tokens arrive only at tick instants, and whatever they cover leaves at
//!   once, as a burst at the interface rate.
//!
//! Both count frame bytes as a Linux qdisc sees them (IP packet + 14-byte Ethernet
//! header), the convention of seed 001, which sets rates as fractions of r_Eth. Packets
//! leave in FIFO order, so a packet's release time is known when it enters the gate.

use crate::config::LimiterConfig;
use crate::time::Time;

/// Bytes of Ethernet header a qdisc counts on top of the IP packet.
pub const QDISC_L2_HEADER: u32 = 14;

#[derive(Clone, Debug)]
pub enum Gate {
    Pacer {
        /// Femtoseconds per byte at the configured rate.
        fs_per_byte: u64,
        /// Earliest release of the next packet, in picoseconds.
        next_ps: u64,
    },
    TokenBucket {
        /// Bytes added per tick (rate × tick).
        per_tick: f64,
        /// Bucket depth in bytes.
        burst: f64,
        /// Timer period (1/HZ).
        tick: Time,
        /// Tokens available after the last update.
        tokens: f64,
        /// Tick index of the last update.
        last_tick: u64,
        /// Release time of the previous packet (FIFO: no packet leaves before it).
        last_release: Time,
    },
}

impl Gate {
    /// The gate a limiter puts in front of the interface; none for the limiters that act
    /// in the sender (window clamp, sleep timer).
    pub fn from_config(cfg: &LimiterConfig) -> Option<Self> {
        match *cfg {
            LimiterConfig::Pacer { rate_bps } => Some(Gate::pacer(rate_bps)),
            LimiterConfig::TokenBucket {
                rate_bps,
                burst_bytes,
                tick_ns,
            } => Some(Gate::token_bucket(rate_bps, burst_bytes as f64, tick_ns)),
            LimiterConfig::CwndClamp { .. } | LimiterConfig::SleepTimer { .. } => None,
        }
    }

    /// A new rate from the next packet on (a profile's step); infinite lifts the limit.
    pub fn set_rate(&mut self, rate_bps: f64) {
        match self {
            Gate::Pacer { fs_per_byte, .. } => *fs_per_byte = fs_per_byte_at(rate_bps),
            Gate::TokenBucket { per_tick, tick, .. } => {
                *per_tick = rate_bps / 8.0 * *tick as f64 / 1e9;
            }
        }
    }

    pub fn pacer(rate_bps: f64) -> Self {
        Gate::Pacer {
            fs_per_byte: fs_per_byte_at(rate_bps),
            next_ps: 0,
        }
    }

    /// A bucket that starts full.
    pub fn token_bucket(rate_bps: f64, burst_bytes: f64, tick: Time) -> Self {
        Gate::TokenBucket {
            per_tick: rate_bps / 8.0 * tick as f64 / 1e9,
            burst: burst_bytes,
            tick,
            tokens: burst_bytes,
            last_tick: 0,
            last_release: 0,
        }
    }

    /// When a packet of `ip_bytes` offered at `now` leaves the gate.
    pub fn release(&mut self, now: Time, ip_bytes: u32) -> Time {
        let bytes = (ip_bytes + QDISC_L2_HEADER) as u64;
        match self {
            Gate::Pacer {
                fs_per_byte,
                next_ps,
            } => {
                let start = (*next_ps).max(now.saturating_mul(1000));
                *next_ps = start + (bytes * *fs_per_byte + 500) / 1000;
                start.div_ceil(1000)
            }
            Gate::TokenBucket {
                per_tick,
                burst,
                tick,
                tokens,
                last_tick,
                last_release,
            } => {
                let t = now.max(*last_release);
                if per_tick.is_infinite() {
                    *last_release = t;
                    return t;
                }
                let k = t / *tick;
                if k > *last_tick {
                    *tokens = (*tokens + (k - *last_tick) as f64 * *per_tick).min(*burst);
                    *last_tick = k;
                }
                let need = bytes as f64;
                let release = if *tokens >= need {
                    t
                } else {
                    // Wait for the ticks that bring enough tokens.
                    let ticks = ((need - *tokens) / *per_tick).ceil() as u64;
                    *tokens = (*tokens + ticks as f64 * *per_tick).min(*burst);
                    *last_tick += ticks;
                    *last_tick * *tick
                };
                *tokens -= need;
                *last_release = release;
                release
            }
        }
    }
}

/// Femtoseconds per byte at `rate_bps` (0 when unlimited).
fn fs_per_byte_at(rate_bps: f64) -> u64 {
    (8e15 / rate_bps).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_spaces_packets_by_size_over_rate() {
        // 1514-byte frames at 100 Mbit/s: 121.12 µs apart, whenever they are offered.
        let mut g = Gate::pacer(100e6);
        assert_eq!(g.release(0, 1500), 0);
        assert_eq!(g.release(0, 1500), 121_120);
        assert_eq!(g.release(10, 1500), 242_240);
        // Idle for a while: no credit is saved up.
        assert_eq!(g.release(1_000_000, 1500), 1_000_000);
        assert_eq!(g.release(1_000_000, 1500), 1_121_120);
    }

    #[test]
    fn token_bucket_releases_bursts_at_timer_ticks() {
        // 100 Mbit/s, HZ = 250 (4 ms ticks): 50 000 bytes per tick, bucket of 3 frames.
        let tick = 4_000_000;
        let mut g = Gate::token_bucket(100e6, 3.0 * 1514.0, tick);
        // A full bucket lets three frames go at once.
        for _ in 0..3 {
            assert_eq!(g.release(1_000, 1500), 1_000);
        }
        // The fourth waits for the next tick, which refills up to the burst only.
        assert_eq!(g.release(1_000, 1500), tick);
        assert_eq!(g.release(1_000, 1500), tick);
        assert_eq!(g.release(1_000, 1500), tick);
        assert_eq!(g.release(1_000, 1500), 2 * tick);
    }

    #[test]
    fn token_bucket_long_run_rate_is_the_configured_rate() {
        let tick = 4_000_000;
        let mut g = Gate::token_bucket(100e6, 40.0 * 1514.0, tick);
        let mut last = 0;
        for _ in 0..100_000 {
            last = g.release(0, 1500);
        }
        // 100 000 frames of 1514 bytes at 100 Mbit/s take 12.112 s, quantised to ticks.
        let ideal = 100_000.0 * 1514.0 * 8.0 / 100e6;
        assert!((last as f64 / 1e9 - ideal).abs() <= 0.005, "{last}");
    }
}
