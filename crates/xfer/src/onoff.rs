//! `xfer onoff`: an unresponsive ON/OFF UDP source (seed 004's background
//! traffic Bg), and the sink that takes its datagrams on a host that would
//! otherwise answer them with ICMP. The netns and ssh backends run it.
//!
//! ON and OFF periods are exponential with the given means (as the
//! simulator's sources), the first drawn from the stationary state. While ON
//! the source sends datagrams of `size` bytes of payload at `rate` bit/s of
//! IP packets (payload + 28 bytes of IP and UDP headers), credited every
//! millisecond from the time sending resumed. It ignores losses (no
//! congestion control; a datagram the host's queue refuses is counted and
//! lost). It stops after `duration` s, or on SIGTERM or SIGINT, and prints
//! what it sent as one JSON line: `{"packets", "bytes", "send_errors"}`
//! (bytes of IP packets). The sink prints `{"packets", "bytes"}` received
//! (bytes of payload).

use crate::limits::{seconds_within, RATE_MAX_BPS, TIME_MAX_S, TIME_MIN_S, ZERO_S};
use crate::util::usage;
use anyhow::{Context, Result};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// IP + UDP headers of an IPv4 datagram.
const HEADERS: usize = 28;
/// The pacing tick.
const TICK: Duration = Duration::from_millis(1);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGTERM and SIGINT end the run (its totals are still printed).
fn catch_stop_signals() {
    let handler = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
}

/// The source's settings.
pub struct Source {
    pub dst: SocketAddr,
    pub bind: Option<SocketAddr>,
    pub rate_bps: f64,
    pub mean_on: f64,
    pub mean_off: f64,
    pub size: usize,
    pub seed: u64,
    pub duration: f64,
}

/// A small random stream (splitmix64): the periods' draws, reproducible by seed.
struct Draws(u64);

impl Draws {
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponential period of mean `mean` seconds.
    fn period(&mut self, mean: f64) -> Duration {
        Duration::from_secs_f64(-mean * (1.0 - self.unit()).ln())
    }
}

/// What the source sent.
#[derive(Debug, Default, PartialEq)]
pub struct Sent {
    pub packets: u64,
    pub bytes: u64,
    pub send_errors: u64,
}

impl Source {
    fn check(&self) -> Result<()> {
        if !(self.rate_bps.is_finite() && self.rate_bps > 0.0) {
            return Err(usage("--rate must be a positive number of bit/s"));
        }
        if self.rate_bps > RATE_MAX_BPS.value as f64 {
            return Err(usage(format!(
                "--rate {} is out of range: at most {} bit/s ({})",
                num(self.rate_bps),
                RATE_MAX_BPS.value,
                RATE_MAX_BPS.reason
            )));
        }
        let on = self.mean_on;
        seconds_within("--mean-on", &num(on), on, TIME_MIN_S, TIME_MAX_S)?;
        let off = self.mean_off;
        seconds_within("--mean-off", &num(off), off, ZERO_S, TIME_MAX_S)?;
        if self.size == 0 || self.size > 65_507 {
            return Err(usage("--size must be 1 to 65507 bytes of UDP payload"));
        }
        check_duration(self.duration)
    }

    /// Sends until the duration is over or a stop signal; returns what it sent.
    pub fn run(&self) -> Result<Sent> {
        self.check()?;
        catch_stop_signals();
        let any: SocketAddr = if self.dst.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        }
        .parse()?;
        let sock =
            UdpSocket::bind(self.bind.unwrap_or(any)).context("binding the source's socket")?;
        sock.connect(self.dst)
            .with_context(|| format!("addressing {}", self.dst))?;
        let payload = vec![0u8; self.size];
        let wire = (self.size + HEADERS) as f64;
        let per_s = self.rate_bps / 8.0 / wire;
        let mut draws = Draws(self.seed);
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs_f64(self.duration);
        let mut on = draws.unit() < self.mean_on / (self.mean_on + self.mean_off);
        let mut switch = t0 + draws.period(if on { self.mean_on } else { self.mean_off });
        let (mut credit, mut last, mut sent) = (0.0f64, t0, Sent::default());
        while !STOP.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= end {
                break;
            }
            while now >= switch {
                on = !on;
                if on {
                    last = switch; // sending resumes from the switch, not from the last tick
                }
                switch += draws.period(if on { self.mean_on } else { self.mean_off });
            }
            if on {
                // A host that cannot keep up sends what it can: the credit
                // of a late wake-up is bounded, never a backlog that outlives
                // the duration.
                credit = (credit + (now - last).as_secs_f64() * per_s).min(per_s * 0.1 + 1.0);
                credit = send_credit(&sock, &payload, credit, &mut sent, end);
            } else {
                credit = 0.0;
            }
            last = now;
            std::thread::sleep(TICK.min(switch - now).min(end - now));
        }
        sent.bytes = sent.packets * (self.size + HEADERS) as u64;
        Ok(sent)
    }
}

/// Sends the datagrams `credit` allows (stopping at `end` or a stop
/// signal, checked every few thousand); returns the credit left.
fn send_credit(
    sock: &UdpSocket,
    payload: &[u8],
    mut credit: f64,
    sent: &mut Sent,
    end: Instant,
) -> f64 {
    let mut n = 0u32;
    while credit >= 1.0 {
        match sock.send(payload) {
            Ok(_) => sent.packets += 1,
            Err(_) => sent.send_errors += 1, // the host's queue is full: lost
        }
        credit -= 1.0;
        n = n.wrapping_add(1);
        if n % 4096 == 0 && (STOP.load(Ordering::SeqCst) || Instant::now() >= end) {
            return 0.0;
        }
    }
    credit
}

fn check_duration(d: f64) -> Result<()> {
    seconds_within("--duration", &num(d), d, ZERO_S, TIME_MAX_S).map(|_| ())
}

/// A number as given on the command line: `1e300`, not three hundred digits.
fn num(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e15).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// Takes datagrams on `listen` until `duration` s have passed or a stop
/// signal; returns (packets, payload bytes) received.
pub fn sink(listen: SocketAddr, duration: f64) -> Result<(u64, u64)> {
    check_duration(duration)?;
    catch_stop_signals();
    let sock = UdpSocket::bind(listen).with_context(|| format!("listening on {listen}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let end = Instant::now() + Duration::from_secs_f64(duration);
    let mut buf = vec![0u8; 65_536];
    let (mut packets, mut bytes) = (0u64, 0u64);
    while !STOP.load(Ordering::SeqCst) && Instant::now() < end {
        if let Ok(n) = sock.recv(&mut buf) {
            packets += 1;
            bytes += n as u64;
        }
    }
    Ok((packets, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_exponential_with_the_mean_asked() {
        let mut d = Draws(7);
        let n = 20_000;
        let mean = (0..n).map(|_| d.period(0.2).as_secs_f64()).sum::<f64>() / n as f64;
        assert!((mean - 0.2).abs() < 0.006, "{mean}");
        // The same seed gives the same periods.
        let (mut a, mut b) = (Draws(3), Draws(3));
        assert_eq!(a.period(1.0), b.period(1.0));
    }

    #[test]
    fn a_source_always_on_sends_at_its_rate_to_a_sink() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let dst = rx.local_addr().unwrap();
        let count = std::thread::spawn(move || {
            let (mut n, mut buf) = (0u64, [0u8; 2048]);
            while rx.recv(&mut buf).is_ok() {
                n += 1;
            }
            n
        });
        // 8 Mbit/s of 1 000-byte IP packets for 0.5 s: 500 packets (mean OFF of 0: always on).
        let s = Source {
            dst,
            bind: None,
            rate_bps: 8e6,
            mean_on: 1e6,
            mean_off: 0.0,
            size: 1000 - HEADERS,
            seed: 1,
            duration: 0.5,
        };
        let sent = s.run().unwrap();
        // Never above the rate; a loaded machine may end it a tick or a few short.
        assert!((250..=501).contains(&sent.packets), "{sent:?}");
        assert_eq!(sent.bytes, sent.packets * 1000);
        let got = count.join().unwrap();
        assert!(
            got <= sent.packets && got * 10 >= sent.packets * 9,
            "{got} of {sent:?}"
        );
    }

    #[test]
    fn bad_settings_are_refused() {
        let mut s = Source {
            dst: "127.0.0.1:9".parse().unwrap(),
            bind: None,
            rate_bps: -1.0,
            mean_on: 1.0,
            mean_off: 1.0,
            size: 1472,
            seed: 1,
            duration: 1.0,
        };
        assert!(s.run().unwrap_err().to_string().contains("--rate"));
        s.rate_bps = 1e6;
        s.size = 70_000;
        assert!(s.run().unwrap_err().to_string().contains("--size"));
        // Numbers that would hang the source or overflow its clock.
        s.size = 1472;
        for (rate, on, off, dur, want) in [
            (
                1e300,
                1.0,
                1.0,
                1.0,
                "--rate 1e300 is out of range: at most",
            ),
            (
                1e6,
                1e-300,
                1.0,
                1.0,
                "--mean-on 1e-300 is out of range: at least",
            ),
            (
                1e6,
                1.0,
                1e300,
                1.0,
                "--mean-off 1e300 is out of range: at most",
            ),
            (
                1e6,
                1.0,
                1.0,
                1e300,
                "--duration 1e300 is out of range: at most 1000000 s",
            ),
            (1e6, 1.0, 1.0, f64::NAN, "--duration NaN is not a number"),
        ] {
            (s.rate_bps, s.mean_on, s.mean_off, s.duration) = (rate, on, off, dur);
            let e = s.run().unwrap_err();
            assert!(e.downcast_ref::<crate::util::UsageError>().is_some());
            assert!(e.to_string().starts_with(want), "{e}");
        }
        let e = sink("127.0.0.1:0".parse().unwrap(), 1e300).unwrap_err();
        assert!(e.to_string().contains("--duration"), "{e}");
    }
}
