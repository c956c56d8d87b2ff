//! The bounds of what xfer accepts on its command line, each with the reason
//! a user is told (the twin of python/xferlab/limits.py, same values where
//! the two speak of the same thing), and the checks that parse an option and
//! hold it to its bounds. Every refusal is a usage error (exit status 2)
//! that names the option, the value given and the bound.

use crate::util::{human_bytes, parse_duration, parse_rate, parse_size, usage};
use anyhow::Result;
use std::time::Duration;

/// A bound and why it is there.
#[derive(Clone, Copy, Debug)]
pub struct Limit<T> {
    pub value: T,
    pub reason: &'static str,
}

pub const RATE_MIN_BPS: Limit<u64> = Limit {
    value: 1_000,
    reason: "below 1 kbit/s one packet takes seconds",
};
pub const RATE_MAX_BPS: Limit<u64> = Limit {
    value: 10_000_000_000_000,
    reason: "ten times the fastest Ethernet",
};
/// Streams × chunk, the receive buffers a server gives one session.
pub const SESSION_BUFFERS_MAX: Limit<u64> = Limit {
    value: 256 << 20,
    reason: "the receive buffers a server gives one transfer",
};
/// A transfer's size (a file, `mem:`, `--size`, `--expect-size`).
pub const SIZE_MAX_BYTES: Limit<u64> = Limit {
    value: 1 << 50,
    reason: "2^26 chunks of the largest chunk, 16 MiB",
};
pub const SOCKET_BUFFER_MIN: Limit<u64> = Limit {
    value: 4 << 10,
    reason: "the kernel's smallest socket buffer",
};
pub const SOCKET_BUFFER_MAX: Limit<u64> = Limit {
    value: 1 << 30,
    reason: "the kernel keeps a socket buffer's size, doubled, in an int",
};
pub const SESSIONS_MAX: Limit<u64> = Limit {
    value: 1024,
    reason: "each session may hold 256 MiB of receive buffers",
};
pub const CONNS_MAX: Limit<u64> = Limit {
    value: 65_536,
    reason: "each connection is a thread of the server",
};
pub const STREAMS_MAX: Limit<u64> = Limit {
    value: 128,
    reason: "the most data connections a server takes per transfer",
};
pub const RETRIES_MAX: Limit<u64> = Limit {
    value: 100,
    reason: "each retry re-reads and re-hashes what the receiver already has",
};
/// A deadline, the time a transfer at its `--rate` would take, the offsets
/// of a rate profile.
pub const TRANSFER_TIME_MAX_S: Limit<f64> = Limit {
    value: 2e6,
    reason: "about 23 days, the longest run xferlab plans (limits.py SPAN_MAX_S)",
};
pub const CONNECT_AHEAD_MAX_S: Limit<f64> = Limit {
    value: 3600.0,
    reason: "the session is held open on the server while it waits",
};
/// How far past `--start-at` may be and still start (at once, with a warning).
pub const START_LATE_MAX_S: Limit<f64> = Limit {
    value: 60.0,
    reason: "a start later than this is a wrong date or time zone, not a late launch",
};
pub const START_AHEAD_MAX_S: Limit<f64> = Limit {
    value: 1e6,
    reason: "about 11.6 days; a start further ahead belongs in a job scheduler",
};
pub const INTERVAL_MIN_S: Limit<f64> = Limit {
    value: 0.01,
    reason: "finer samples cost more than they show",
};
pub const INTERVAL_MAX_S: Limit<f64> = Limit {
    value: 3600.0,
    reason: "the server's bound on a sampling interval",
};
/// `xfer onoff`: periods and durations, as a scenario's (limits.py TIME_*).
pub const TIME_MIN_S: Limit<f64> = Limit {
    value: 1e-6,
    reason: "shorter than any event a packet network resolves",
};
pub const TIME_MAX_S: Limit<f64> = Limit {
    value: 1e6,
    reason: "about 11.6 days of experiment time",
};
pub const KEY_FILE_MAX_BYTES: Limit<u64> = Limit {
    value: 4096,
    reason: "a shared key is tens of bytes",
};
pub const PROFILE_FILE_MAX_BYTES: Limit<u64> = Limit {
    value: 16 << 20,
    reason: "100 000 steps of a rate profile",
};

fn out_of_range(flag: &str, given: &str, bound: &str, reason: &str) -> anyhow::Error {
    usage(format!(
        "{flag} {given} is out of range: {bound} ({reason})"
    ))
}

/// An integer option within `min..=max`.
pub fn count(flag: &str, v: u64, min: u64, max: Limit<u64>) -> Result<u64> {
    if v < min {
        return Err(usage(format!("{flag} {v} is out of range: at least {min}")));
    }
    if v > max.value {
        let bound = format!("at most {}", max.value);
        return Err(out_of_range(flag, &v.to_string(), &bound, max.reason));
    }
    Ok(v)
}

/// `-P` streams of `--chunk` bytes each, within what a server takes.
pub fn streams_by_chunk(streams: u64, chunk: u64) -> Result<()> {
    let max = SESSION_BUFFERS_MAX;
    if streams * chunk > max.value {
        return Err(usage(format!(
            "-P {streams} with --chunk {} is {} of receive buffers, more than {} ({}): use a \
             smaller --chunk or fewer streams",
            human_bytes(chunk),
            human_bytes(streams * chunk),
            human_bytes(max.value),
            max.reason
        )));
    }
    Ok(())
}

/// A size in bytes (`64K`, `1M`) within `min..=max`.
pub fn size(flag: &str, text: &str, min: Limit<u64>, max: Limit<u64>) -> Result<u64> {
    let v = parse_size(text).map_err(|e| usage(format!("{flag}: {e:#}")))?;
    if v < min.value {
        let bound = format!("at least {}", human_bytes(min.value));
        return Err(out_of_range(flag, text, &bound, min.reason));
    }
    if v > max.value {
        let bound = format!("at most {}", human_bytes(max.value));
        return Err(out_of_range(flag, text, &bound, max.reason));
    }
    Ok(v)
}

/// A transfer size: 0 up to `SIZE_MAX_BYTES`.
pub fn volume(flag: &str, text: &str) -> Result<u64> {
    let zero = Limit {
        value: 0,
        reason: "",
    };
    size(flag, text, zero, SIZE_MAX_BYTES)
}

/// A socket buffer size (`--sndbuf`, `--rcvbuf`).
pub fn socket_buffer(flag: &str, text: &str) -> Result<usize> {
    Ok(size(flag, text, SOCKET_BUFFER_MIN, SOCKET_BUFFER_MAX)? as usize)
}

/// A goodput in bit/s (`400M`) within `RATE_MIN_BPS..=RATE_MAX_BPS`.
pub fn rate(flag: &str, text: &str) -> Result<u64> {
    let v = parse_rate(text).map_err(|e| usage(format!("{flag}: {e:#}")))?;
    rate_value(flag, text, v)
}

/// An optional rate option, as `rate`.
pub fn rate_opt(flag: &str, text: Option<&str>) -> Result<Option<u64>> {
    text.map(|t| rate(flag, t)).transpose()
}

/// A rate already parsed, held to the same bounds as `rate`.
pub fn rate_value(flag: &str, given: &str, bps: u64) -> Result<u64> {
    if bps < RATE_MIN_BPS.value {
        return Err(out_of_range(
            flag,
            given,
            "at least 1 kbit/s",
            RATE_MIN_BPS.reason,
        ));
    }
    if bps > RATE_MAX_BPS.value {
        return Err(out_of_range(
            flag,
            given,
            "at most 10 Tbit/s",
            RATE_MAX_BPS.reason,
        ));
    }
    Ok(bps)
}

/// A duration (`120s`, `500ms`) within `min..=max` seconds.
pub fn duration(flag: &str, text: &str, min: Limit<f64>, max: Limit<f64>) -> Result<Duration> {
    let d = parse_duration(text).map_err(|e| usage(format!("{flag}: {e:#}")))?;
    seconds_within(flag, text, d.as_secs_f64(), min, max)?;
    Ok(d)
}

/// Seconds (a plain number, as `xfer onoff` takes them) within `min..=max`.
pub fn seconds_within(
    flag: &str,
    given: &str,
    s: f64,
    min: Limit<f64>,
    max: Limit<f64>,
) -> Result<f64> {
    if !s.is_finite() {
        return Err(usage(format!("{flag} {given} is not a number of seconds")));
    }
    if s < min.value {
        let bound = format!("at least {} s", min.value);
        return Err(out_of_range(flag, given, &bound, min.reason));
    }
    if s > max.value {
        let bound = format!("at most {} s", max.value);
        return Err(out_of_range(flag, given, &bound, max.reason));
    }
    Ok(s)
}

pub const CHUNK_MIN: Limit<u64> = Limit {
    value: crate::proto::MIN_CHUNK as u64,
    reason: "the unit of hashing and resume; smaller chunks cost more than they save",
};
pub const CHUNK_MAX: Limit<u64> = Limit {
    value: crate::proto::MAX_CHUNK as u64,
    reason: "the largest frame of the protocol",
};
/// `--max-conns` when not given (lowered to what the open-file limit allows).
pub const CONNS_DEFAULT: u64 = 1024;
/// Descriptors a server keeps besides its connections: its listener and
/// standard streams, and per session a part file, a journal and a folder.
const FDS_SPARE: u64 = 32;
const FDS_PER_SESSION: u64 = 4;

/// `--max-conns`, given or the default, within what the process may open: a
/// connection past the open-file limit would fail at `accept`, not be told
/// the server is busy.
pub fn max_conns(given: Option<u64>, sessions: u64) -> Result<u64> {
    let files = raise_open_files();
    let room = files.saturating_sub(FDS_SPARE + FDS_PER_SESSION * sessions);
    let Some(v) = given else {
        if room < 2 {
            anyhow::bail!(
                "the open-file limit ({files}, ulimit -n) leaves no room for connections beside \
                 the files of --max-sessions {sessions}: raise the limit or lower --max-sessions"
            );
        }
        if room < CONNS_DEFAULT {
            eprintln!("xfer: --max-conns {room}: the open-file limit ({files}, ulimit -n) leaves room for no more");
        }
        return Ok(CONNS_DEFAULT.min(room));
    };
    count("--max-conns", v, 2, CONNS_MAX)?;
    if v > room {
        return Err(usage(format!(
            "--max-conns {v} is out of range: at most {room} (this process may open {files} \
             files, ulimit -n, and each connection takes one; raise the limit or lower --max-conns)"
        )));
    }
    Ok(v)
}

/// Raises the soft limit of open files to the hard one (as most servers do)
/// and returns it.
fn raise_open_files() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid rlimit for the calls to fill or read.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max.min(1 << 20),
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                r = want;
            }
        }
    }
    r.rlim_cur
}

/// No lower bound (a duration of 0, a period of 0).
pub const ZERO_S: Limit<f64> = Limit {
    value: 0.0,
    reason: "",
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::UsageError;

    fn said(r: Result<impl std::fmt::Debug>) -> String {
        let e = r.unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some(), "{e}");
        e.to_string()
    }

    #[test]
    fn every_refusal_names_the_option_the_value_and_the_bound() {
        let e = said(socket_buffer("--rcvbuf", "1T"));
        assert_eq!(
            e,
            "--rcvbuf 1T is out of range: at most 1.00 GiB (the kernel keeps a socket \
             buffer's size, doubled, in an int)"
        );
        assert!(said(socket_buffer("--sndbuf", "1")).contains("at least 4.00 KiB"));
        assert!(said(socket_buffer("--sndbuf", "lots")).starts_with("--sndbuf: invalid size"));
        assert_eq!(socket_buffer("--rcvbuf", "64M").unwrap(), 64 << 20);
        let e = said(count("--max-sessions", 0, 1, SESSIONS_MAX));
        assert_eq!(e, "--max-sessions 0 is out of range: at least 1");
        assert!(said(count("--max-conns", 1 << 20, 2, CONNS_MAX)).contains("at most 65536"));
        assert!(said(rate("--rate", "20T")).contains("at most 10 Tbit/s"));
        let e = said(streams_by_chunk(128, 16 << 20));
        assert!(
            e.starts_with("-P 128 with --chunk 16.00 MiB is 2.00 GiB"),
            "{e}"
        );
        streams_by_chunk(16, 16 << 20).unwrap();
        assert!(said(rate("--rate", "999")).contains("1 kbit/s"));
        assert_eq!(rate("--rate", "1kbps").unwrap(), 1000);
        assert!(said(volume("mem:", "2P")).contains("at most 1.00 PiB"));
        assert!(said(volume("--size", "99999999999999999999T")).contains("at most"));
        let e = said(duration("--deadline", "30d", ZERO_S, TRANSFER_TIME_MAX_S));
        assert!(e.starts_with("--deadline: invalid duration"), "{e}");
        let e = said(duration("--deadline", "1000h", ZERO_S, TRANSFER_TIME_MAX_S));
        assert!(e.contains("at most 2000000 s (about 23 days"), "{e}");
        assert!(said(seconds_within(
            "--duration",
            "NaN",
            f64::NAN,
            ZERO_S,
            TIME_MAX_S
        ))
        .contains("not a number"));
    }
}
