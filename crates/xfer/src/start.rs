//! When the data starts (seed 001 §2.2, time control): at an absolute time
//! on the host's clock (`--start-at`, the clock-synchronised start), or when
//! the previous transfer's sender says so (`--start-after-signal`, see
//! signal.rs). Either way the session is set up first, so the wait ends in
//! data, not in handshakes.

use crate::limits::{START_AHEAD_MAX_S, START_LATE_MAX_S};
use crate::signal::SignalListener;
use crate::util::{unix_now, usage};
use anyhow::Result;
use serde::Serialize;
use std::time::{Duration, Instant};

/// The last stretch of the wait is spun, not slept: a sleep's wake-up is late
/// by the timer slack and the scheduler's latency, a spin only by the latter.
const SPIN: Duration = Duration::from_micros(200);

/// How the start went, for the trace (`run.start`). Times are Unix seconds.
#[derive(Serialize, Clone, Debug, Default)]
pub struct StartRecord {
    /// `now`, `at` (`--start-at`) or `signal` (`--start-after-signal`).
    pub mode: &'static str,
    /// The planned start (`--start-at`).
    pub planned: Option<f64>,
    /// The session was set up (data connections joined) at this time.
    pub connected: f64,
    /// The data started at this time.
    pub actual: f64,
    /// actual − planned: how late the data started (`--start-at`).
    pub late: Option<f64>,
    /// The start signal, if the data waited for one.
    pub signal: Option<crate::signal::Received>,
}

/// When this transfer's data starts, across its attempts: the first attempt
/// waits for the start with its session set up; a retry (resume) goes at
/// once, and keeps the first attempt's data start as the plan's origin.
pub struct Schedule {
    at: Option<f64>,
    connect_ahead: Duration,
    signal: Option<SignalListener>,
    quiet: bool,
    started: Option<(Instant, StartRecord)>,
}

impl Schedule {
    pub fn new(
        at: Option<f64>,
        connect_ahead: Duration,
        signal: Option<SignalListener>,
        quiet: bool,
    ) -> Schedule {
        Schedule {
            at,
            connect_ahead,
            signal,
            quiet,
            started: None,
        }
    }

    /// True if the data waits for a time or a signal.
    pub fn is_scheduled(&self) -> bool {
        self.at.is_some() || self.signal.is_some()
    }

    /// `--start-at`: sleeps until `--connect-ahead` before the start, so the
    /// session is not held open for longer than setting it up takes.
    pub fn before_connect(&self) {
        if let Some(t) = self.at {
            let connect = t - self.connect_ahead.as_secs_f64();
            if unix_now() < connect {
                sleep_realtime_abs(connect);
            }
        }
    }

    /// The plan's origin: the first attempt's data start, waited for here.
    pub fn wait_start(&mut self) -> Result<Instant> {
        if let Some((origin, _)) = &self.started {
            return Ok(*origin);
        }
        let connected = unix_now();
        let mut rec = StartRecord {
            mode: "now",
            connected,
            ..Default::default()
        };
        if let Some(t) = self.at {
            rec.mode = "at";
            rec.planned = Some(t);
            wait_until_unix(t);
        } else if let Some(l) = &self.signal {
            rec.mode = "signal";
            rec.signal = Some(l.wait()?);
        }
        let origin = Instant::now();
        rec.actual = unix_now();
        rec.late = rec.planned.map(|p| rec.actual - p);
        self.say_if_late(&rec);
        self.started = Some((origin, rec));
        self.signal = None; // one signal starts one transfer
        Ok(origin)
    }

    fn say_if_late(&self, rec: &StartRecord) {
        let (Some(planned), Some(late)) = (rec.planned, rec.late) else {
            return;
        };
        if self.quiet || late < 0.001 {
            return;
        }
        if rec.connected > planned {
            eprintln!(
                "xfer: --start-at was {late:.3} s ago when the session was ready: started at once"
            );
        } else {
            eprintln!("xfer: started {:.3} ms after --start-at", late * 1e3);
        }
    }

    /// How the start went (None before it).
    pub fn record(&self) -> Option<&StartRecord> {
        self.started.as_ref().map(|(_, r)| r)
    }
}

/// `--start-at`: Unix seconds (`1795366694.250`) or RFC 3339
/// (`2026-11-22T16:58:14.25Z`, `2026-11-22 17:58:14+01:00`), held against
/// the clock's `now`: a time up to `START_LATE_MAX_S` past starts at once
/// (saying how late, see `Schedule`); one further past, or further ahead
/// than `START_AHEAD_MAX_S`, is refused, saying by how much.
pub fn start_time(s: &str, now: f64) -> Result<f64> {
    let t = parse_start_at(s)?;
    let (late, ahead) = (now - t, t - now);
    if late > START_LATE_MAX_S.value {
        return Err(usage(format!(
            "--start-at {s} is in the past: {} ago (the clock reads {}); give a time to \
             come, or leave --start-at out to start now",
            human_duration(late),
            rfc3339(now)
        )));
    }
    if ahead > START_AHEAD_MAX_S.value {
        return Err(usage(format!(
            "--start-at {s} is {} ahead, more than {} ({})",
            human_duration(ahead),
            human_duration(START_AHEAD_MAX_S.value),
            START_AHEAD_MAX_S.reason
        )));
    }
    Ok(t)
}

/// A `--start-at` as written, before it is held against the clock.
pub fn parse_start_at(s: &str) -> Result<f64> {
    let t = s.trim();
    let unix = match t.parse::<f64>() {
        Ok(v) => Some(v),
        Err(_) => parse_rfc3339(t),
    };
    match unix {
        Some(v) if v.is_finite() && v.abs() < 1e11 => Ok(v),
        _ => Err(usage(format!(
            "--start-at {s:?} is neither Unix seconds (1795366694.250) nor RFC 3339 \
             (2026-11-22T16:58:14.250Z)"
        ))),
    }
}

/// Unix time `t` as RFC 3339 in UTC, to the second (H. Hinnant's
/// civil_from_days, the inverse of `days_from_civil`).
pub fn rfc3339(t: f64) -> String {
    let secs = t.floor() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    let (h, mi, sec) = (rem / 3600, rem / 60 % 60, rem % 60);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{sec:02}Z")
}

/// A span of time the way a person reads it: `2.5 s`, `12 min 5 s`,
/// `3 h 12 min`, `6 days 4 h`.
pub fn human_duration(s: f64) -> String {
    let whole = s.round() as u64;
    match s {
        _ if s < 60.0 => format!("{s:.1} s"),
        _ if s < 3600.0 => format!("{} min {} s", whole / 60, whole % 60),
        _ if s < 86_400.0 => format!("{} h {} min", whole / 3600, whole / 60 % 60),
        _ => format!("{} days {} h", whole / 86_400, whole / 3600 % 24),
    }
}

/// RFC 3339 date-time (section 5.6): full-date, `T` (or a space), partial-time
/// with optional fraction, and `Z` or a numeric offset.
fn parse_rfc3339(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| digits(s.get(r)?);
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let days_in_month = [
        31,
        28 + leap(y) as i64,
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month[(mo - 1) as usize] {
        return None;
    }
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac = 0.0;
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.bytes().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        frac = format!("0.{}", &r[..n]).parse().ok()?;
        rest = &r[n..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => {
            if o.get(3..4) != Some(":") {
                return None;
            }
            let (oh, om) = (digits(o.get(1..3)?)?, digits(o.get(4..6)?)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let v = oh * 3600 + om * 60;
            if o.starts_with('-') {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset;
    Some(secs as f64 + frac)
}

/// A run of ASCII digits as a number.
fn digits(d: &str) -> Option<i64> {
    if d.is_empty() || !d.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    d.parse().ok()
}

fn leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant,
/// "chrono-Compatible Low-Level Date Algorithms", days_from_civil).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Sleeps until Unix time `t` on CLOCK_REALTIME (an absolute sleep, so a
/// step of the clock moves the wake-up with it), with the timer slack at
/// 1 ns, then spins the last `SPIN`. Returns at once if `t` is past.
pub fn wait_until_unix(t: f64) {
    set_timer_slack_ns(1);
    let early = t - SPIN.as_secs_f64();
    if unix_now() < early {
        sleep_realtime_abs(early);
    }
    while unix_now() < t {
        std::hint::spin_loop();
    }
}

/// Sleeps on CLOCK_REALTIME until `t` (or a little past it); no spinning.
pub fn sleep_realtime_abs(t: f64) {
    let ts = libc::timespec {
        tv_sec: t.floor() as _,
        tv_nsec: ((t - t.floor()) * 1e9) as libc::c_long,
    };
    loop {
        // SAFETY: ts is a valid timespec; the remainder pointer may be null
        // for an absolute sleep.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_REALTIME,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            return;
        }
    }
}

/// The calling thread's timer slack (how late the kernel may fire its
/// timers to batch wake-ups; 50 µs by default).
pub(crate) fn set_timer_slack_ns(ns: libc::c_ulong) {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_and_rfc3339_times() {
        assert_eq!(parse_start_at("1795366694.250").unwrap(), 1795366694.25);
        assert_eq!(parse_start_at(" 1795366694 ").unwrap(), 1795366694.0);
        // date -u -d @1795366694.25 +%FT%T.%2NZ
        let t = parse_start_at("2026-11-22T16:58:14.25Z").unwrap();
        assert!((t - 1795366694.25).abs() < 1e-6, "{t}");
        let t = parse_start_at("2026-11-22 17:58:14.25+01:00").unwrap();
        assert!((t - 1795366694.25).abs() < 1e-6, "{t}");
        let t = parse_start_at("2026-11-22T11:28:14.25-05:30").unwrap();
        assert!((t - 1795366694.25).abs() < 1e-6, "{t}");
        assert_eq!(parse_start_at("1970-01-02T00:00:00Z").unwrap(), 86400.0);
        assert_eq!(
            parse_start_at("2000-03-01T00:00:00Z").unwrap(),
            951_868_800.0
        );
        for bad in [
            "",
            "soon",
            "-",
            "inf",
            "2026-02-30T00:00:00Z",
            "2026-11-22T25:00:00Z",
            "2026-11-22T15:38:14",
            "2026-11-22T15:38:14.Z",
            "2026-11-22T15:38:14+0100",
            "now+5",
        ] {
            let e = parse_start_at(bad).unwrap_err();
            assert!(
                e.downcast_ref::<crate::util::UsageError>().is_some(),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_time_long_past_or_far_ahead_is_refused_saying_by_how_much() {
        let now = 1795366694.25; // 2026-11-22T16:58:14.25Z
        assert_eq!(rfc3339(now), "2026-11-22T16:58:14Z");
        assert_eq!(rfc3339(951_868_800.0), "2000-03-01T00:00:00Z");
        assert_eq!(rfc3339(-1.0), "1969-12-31T23:59:59Z");
        let said = |s: &str| {
            let e = start_time(s, now).unwrap_err();
            assert!(e.downcast_ref::<crate::util::UsageError>().is_some(), "{s}");
            e.to_string()
        };
        let e = said("2026-11-22T13:46:14.25Z");
        assert_eq!(
            e,
            "--start-at 2026-11-22T13:46:14.25Z is in the past: 3 h 12 min ago (the clock \
             reads 2026-11-22T16:58:14Z); give a time to come, or leave --start-at out to \
             start now"
        );
        assert!(
            said("0").contains("in the past: 20779 days"),
            "{}",
            said("0")
        );
        assert!(said("-5").contains("in the past"));
        assert!(said("1969-07-20T20:17:40Z").contains("in the past"));
        assert!(said("2027-11-22T16:58:14Z").contains("365 days 0 h ahead, more than 11 days 13 h"));
        // Late by less than the bound: accepted (it starts at once, saying so).
        assert_eq!(start_time("1795366654.25", now).unwrap(), 1795366654.25);
        assert_eq!(start_time("1795366994.25", now).unwrap(), 1795366994.25);
        assert_eq!(human_duration(2.54), "2.5 s");
        assert_eq!(human_duration(725.0), "12 min 5 s");
    }

    #[test]
    fn a_past_time_returns_at_once_and_a_near_one_on_time() {
        let t = std::time::Instant::now();
        wait_until_unix(unix_now() - 10.0);
        assert!(t.elapsed() < Duration::from_millis(50));
        let at = unix_now() + 0.02;
        wait_until_unix(at);
        assert!(unix_now() >= at);
    }
}
