//! `xfer qstats`: a router's qdisc counters, sampled on an absolute grid of
//! its own clock by one long-lived process (the ssh backend's link sampler).
//!
//! A sampler that starts `tc -s qdisc show` at every tick stamps each sample
//! some milliseconds away from when the kernel read the counters (a process
//! start, on a loaded router tens of ms), and misses ticks: bytes over such
//! intervals make throughput spikes far above the link's rate. Here one
//! NETLINK_ROUTE socket is opened once and each sample is one `RTM_GETQDISC`
//! dump, stamped (CLOCK_REALTIME, ns) at the middle of its request and reply;
//! ticks are slept to with `clock_nanosleep(TIMER_ABSTIME)`, and a late tick
//! is skipped, not bunched. The netns backend's Python reader
//! (python/xferlab/netns/qstats.py) reads the same counters.
//!
//! Output, one line per qdisc of each device asked for, per sample:
//! `S <stamp ns> <spread ns> <device> <handle hex> <kind> <bytes> <packets>
//! <drops> <qlen> <backlog bytes>`. The message layouts (`nlmsghdr`,
//! `tcmsg`, `rtattr`, `struct tc_stats` in TCA_STATS) are Linux's
//! (include/uapi/linux/{netlink,rtnetlink,pkt_sched}.h).

use crate::util::usage;
use anyhow::{bail, Context, Result};
use std::io::Write;

const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const TCA_KIND: u16 = 1;
const TCA_STATS: u16 = 3;
/// nlmsghdr (16) + tcmsg (20).
const HEADERS: usize = 36;

/// One qdisc's counters at a sample.
#[derive(Debug, PartialEq)]
pub struct Counters {
    pub ifindex: i32,
    pub handle: u32,
    pub kind: String,
    pub bytes: u64,
    pub packets: u32,
    pub drops: u32,
    pub qlen: u32,
    pub backlog: u32,
}

/// The sampler's settings.
pub struct Sampler {
    pub devices: Vec<String>,
    pub interval_ns: u64,
    pub start_ns: u64,
    pub duration_ns: u64,
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn sleep_until_ns(t: u64) {
    let ts = libc::timespec {
        tv_sec: (t / 1_000_000_000) as libc::time_t,
        tv_nsec: (t % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: a valid timespec; EINTR only wakes us early (the caller re-checks the time).
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_REALTIME,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

/// A NETLINK_ROUTE socket, opened once.
struct Netlink(i32);

impl Netlink {
    fn open() -> Result<Netlink> {
        // SAFETY: plain socket(2); the descriptor is owned by the returned value.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("a NETLINK_ROUTE socket");
        }
        Ok(Netlink(fd))
    }

    /// One RTM_GETQDISC dump: every qdisc of the host, with their counters.
    fn dump(&self, seq: u32) -> Result<Vec<Counters>> {
        let mut req = [0u8; HEADERS];
        req[0..4].copy_from_slice(&(HEADERS as u32).to_ne_bytes());
        req[4..6].copy_from_slice(&RTM_GETQDISC.to_ne_bytes());
        req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
        req[8..12].copy_from_slice(&seq.to_ne_bytes());
        // SAFETY: req is a valid buffer of its length; the socket is ours.
        if unsafe { libc::send(self.0, req.as_ptr().cast(), req.len(), 0) } < 0 {
            return Err(std::io::Error::last_os_error()).context("sending a qdisc dump request");
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            // SAFETY: buf is a valid, writable buffer of its length.
            let n = unsafe { libc::recv(self.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error()).context("reading a qdisc dump");
            }
            if parse_messages(&buf[..n as usize], seq, &mut out)? {
                return Ok(out);
            }
        }
    }
}

impl Drop for Netlink {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_ne_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Walks one datagram of netlink messages into `out`; true at the dump's end.
pub fn parse_messages(b: &[u8], seq: u32, out: &mut Vec<Counters>) -> Result<bool> {
    let mut i = 0;
    while i + 16 <= b.len() {
        let len = u32_at(b, i) as usize;
        if len < 16 || i + len > b.len() {
            bail!(
                "a malformed netlink message ({len} bytes at {i} of {})",
                b.len()
            );
        }
        let (kind, msg) = (u16_at(b, i + 4), &b[i..i + len]);
        if u32_at(b, i + 8) == seq {
            match kind {
                NLMSG_DONE => return Ok(true),
                NLMSG_ERROR => {
                    let errno = if len >= 20 {
                        -(u32_at(msg, 16) as i32)
                    } else {
                        0
                    };
                    bail!(
                        "the kernel refused the qdisc dump: {}",
                        std::io::Error::from_raw_os_error(errno)
                    );
                }
                RTM_NEWQDISC if len >= HEADERS => out.push(parse_qdisc(msg)),
                _ => {}
            }
        }
        i += (len + 3) & !3;
    }
    Ok(false)
}

/// One RTM_NEWQDISC: its device, handle, kind and `struct tc_stats`.
fn parse_qdisc(msg: &[u8]) -> Counters {
    let mut c = Counters {
        ifindex: u32_at(msg, 20) as i32,
        handle: u32_at(msg, 24),
        kind: String::new(),
        bytes: 0,
        packets: 0,
        drops: 0,
        qlen: 0,
        backlog: 0,
    };
    let mut i = HEADERS;
    while i + 4 <= msg.len() {
        let (alen, atype) = (u16_at(msg, i) as usize, u16_at(msg, i + 2) & 0x3fff);
        if alen < 4 || i + alen > msg.len() {
            break;
        }
        let v = &msg[i + 4..i + alen];
        match atype {
            TCA_KIND => {
                c.kind = String::from_utf8_lossy(v)
                    .trim_end_matches('\0')
                    .to_string()
            }
            TCA_STATS if v.len() >= 36 => {
                c.bytes = u64::from_ne_bytes(v[0..8].try_into().expect("8 bytes"));
                (c.packets, c.drops) = (u32_at(v, 8), u32_at(v, 12));
                (c.qlen, c.backlog) = (u32_at(v, 28), u32_at(v, 32));
            }
            _ => {}
        }
        i += (alen + 3) & !3;
    }
    c
}

fn ifindex(dev: &str) -> Result<i32> {
    let name = std::ffi::CString::new(dev).map_err(|_| usage(format!("device name {dev:?}")))?;
    // SAFETY: a valid NUL-terminated name.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if i == 0 {
        return Err(usage(format!("no device {dev} on this host")));
    }
    Ok(i as i32)
}

impl Sampler {
    /// Samples until `duration_ns` past the start (or until killed), one line per qdisc of
    /// the devices per sample, flushed at each sample.
    pub fn run(&self, out: &mut impl Write) -> Result<()> {
        if self.interval_ns < 1_000_000 {
            return Err(usage(
                "--interval must be at least 1 ms (a dump takes tens of µs, a tick's wake-up more)",
            ));
        }
        let wanted: Vec<(i32, &str)> = self
            .devices
            .iter()
            .map(|d| ifindex(d).map(|i| (i, d.as_str())))
            .collect::<Result<_>>()?;
        let nl = Netlink::open()?;
        let end = self.start_ns.saturating_add(self.duration_ns);
        let mut tick = 0u64;
        let mut seq = 1u32;
        loop {
            let due = self.start_ns + tick * self.interval_ns;
            if due > end {
                return Ok(());
            }
            sleep_until_ns(due);
            let now = now_ns();
            if now < due {
                continue; // woken early (a signal): sleep again
            }
            let (t1, qdiscs, t2) = (now, nl.dump(seq)?, now_ns());
            seq = seq.wrapping_add(1);
            let stamp = t1 + (t2 - t1) / 2;
            for c in qdiscs.iter() {
                if let Some((_, dev)) = wanted.iter().find(|(i, _)| *i == c.ifindex) {
                    writeln!(
                        out,
                        "S {stamp} {} {dev} {:x} {} {} {} {} {} {}",
                        t2 - t1,
                        c.handle,
                        c.kind,
                        c.bytes,
                        c.packets,
                        c.drops,
                        c.qlen,
                        c.backlog
                    )?;
                }
            }
            out.flush()?;
            // The next tick still ahead (a late one is skipped, not bunched).
            tick = (now_ns().saturating_sub(self.start_ns)) / self.interval_ns + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, v: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(v);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn message(kind: u16, seq: u32, ifindex: i32, handle: u32, attrs: &[u8]) -> Vec<u8> {
        let mut m = vec![0u8; HEADERS];
        m.extend_from_slice(attrs);
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m[4..6].copy_from_slice(&kind.to_ne_bytes());
        m[8..12].copy_from_slice(&seq.to_ne_bytes());
        m[20..24].copy_from_slice(&ifindex.to_ne_bytes());
        m[24..28].copy_from_slice(&handle.to_ne_bytes());
        m
    }

    #[test]
    fn a_dump_gives_each_qdisc_s_counters_and_ends_at_done() {
        let mut stats = Vec::new();
        stats.extend_from_slice(&123_456_789u64.to_ne_bytes());
        for v in [81_000u32, 7, 3, 0, 0, 12, 18_168] {
            stats.extend_from_slice(&v.to_ne_bytes()); // packets drops overlimits bps pps qlen backlog
        }
        let mut attrs = attr(TCA_KIND, b"pfifo\0");
        attrs.extend(attr(TCA_STATS, &stats));
        let mut datagram = message(RTM_NEWQDISC, 5, 4, 0x000a_0000, &attrs);
        datagram.extend(message(
            RTM_NEWQDISC,
            4,
            4,
            0x0001_0000,
            &attr(TCA_KIND, b"htb\0"),
        )); // another dump's
        let mut out = Vec::new();
        assert!(!parse_messages(&datagram, 5, &mut out).unwrap());
        let want = Counters {
            ifindex: 4,
            handle: 0x000a_0000,
            kind: "pfifo".into(),
            bytes: 123_456_789,
            packets: 81_000,
            drops: 7,
            qlen: 12,
            backlog: 18_168,
        };
        assert_eq!(out, vec![want]);
        assert!(parse_messages(&message(NLMSG_DONE, 5, 0, 0, &[]), 5, &mut out).unwrap());
        assert!(parse_messages(&[16, 0, 0], 5, &mut out).is_ok()); // a short tail is not a message
        let mut bad = message(RTM_NEWQDISC, 5, 4, 0, &[]);
        bad[0..4].copy_from_slice(&999u32.to_ne_bytes());
        assert!(parse_messages(&bad, 5, &mut out).is_err());
    }
}
