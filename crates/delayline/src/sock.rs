//! The `AF_NETLINK`/`NETLINK_NETFILTER` socket and the clocks: the only I/O of the daemon
//! besides the stats file.

use crate::nfq::{self, Message};
use anyhow::{bail, Context, Result};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const SOL_NETLINK: i32 = 270;
const NETLINK_NO_ENOBUFS: i32 = 5;

/// CLOCK_MONOTONIC in ns: the clock of due times and lateness.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in ns: the clock of `NFQA_TIMESTAMP`.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; these clocks always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub struct NfqSocket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
    out: Vec<u8>,
}

fn last_os_error(what: &str) -> anyhow::Error {
    anyhow::Error::new(io::Error::last_os_error()).context(what.to_string())
}

impl NfqSocket {
    /// Opens a non-blocking netfilter netlink socket with a receive buffer of `rcvbuf`
    /// bytes (SO_RCVBUFFORCE, above `rmem_max`) and `NETLINK_NO_ENOBUFS`.
    pub fn open(rcvbuf: usize) -> Result<Self> {
        // SAFETY: plain syscalls on a socket this function owns.
        unsafe {
            let fd = libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                nfq::NETLINK_NETFILTER,
            );
            if fd < 0 {
                return Err(last_os_error("socket(AF_NETLINK, NETLINK_NETFILTER)"));
            }
            let fd = OwnedFd::from_raw_fd(fd);
            let mut addr: libc::sockaddr_nl = std::mem::zeroed();
            addr.nl_family = libc::AF_NETLINK as u16;
            if libc::bind(
                fd.as_raw_fd(),
                &addr as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            ) < 0
            {
                return Err(last_os_error("bind(AF_NETLINK)"));
            }
            let size = rcvbuf.min(i32::MAX as usize) as i32;
            if setsockopt_i32(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size).is_err()
            {
                // Without CAP_NET_ADMIN; the queue bind below fails with a clear message.
                let _ = setsockopt_i32(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, size);
            }
            setsockopt_i32(fd.as_raw_fd(), SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
                .context("NETLINK_NO_ENOBUFS")?;
            Ok(Self {
                fd,
                seq: 0,
                buf: vec![0; 1 << 16],
                out: Vec::with_capacity(256),
            })
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn send_out(&mut self) -> io::Result<()> {
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16; // nl_pid 0: the kernel
        loop {
            // SAFETY: buffer and address are valid for the given lengths.
            let n = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    self.out.as_ptr() as *const libc::c_void,
                    self.out.len(),
                    0,
                    &addr as *const _ as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_nl>() as u32,
                )
            };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Sends a config request and waits for its ACK. Packets that arrive meanwhile (a rule
    /// already pointing at a queue bound a moment earlier) are handed to `on_packet`.
    fn request(
        &mut self,
        build: impl FnOnce(&mut Vec<u8>, u32) -> usize,
        mut on_packet: impl FnMut(nfq::Packet),
    ) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        self.out.clear();
        build(&mut self.out, seq);
        self.send_out()?;
        let deadline = monotonic_ns() + 5_000_000_000;
        loop {
            let mut answer = None;
            match self.recv_one(|m| match m {
                Message::Error { errno, seq: s } if s == seq => answer = Some(errno),
                Message::Packet(p) => on_packet(p),
                _ => {}
            }) {
                Ok(true) => {}
                Ok(false) => {
                    if monotonic_ns() > deadline {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "no answer from the kernel",
                        ));
                    }
                    wait_readable(self.raw_fd(), 100)?;
                }
                Err(e) => return Err(e),
            }
            match answer {
                Some(0) => return Ok(()),
                Some(errno) => return Err(io::Error::from_raw_os_error(errno)),
                None => {}
            }
        }
    }

    /// Binds `cfg.queue` to this socket and configures it (copy mode, maxlen, flags).
    pub fn bind_queue(
        &mut self,
        cfg: &nfq::QueueConfig,
        mut on_packet: impl FnMut(nfq::Packet),
    ) -> Result<()> {
        let q = cfg.queue;
        if let Err(e) = self.request(|b, s| nfq::bind(b, s, q), &mut on_packet) {
            match e.raw_os_error() {
                // The kernel answers EPERM both without CAP_NET_ADMIN and for a queue bound
                // by another socket; the queue's line in /proc tells them apart.
                Some(libc::EPERM | libc::EBUSY) if crate::stats::read_proc().contains_key(&q) => bail!(
                    "NFQUEUE {q} is already bound by another process (see /proc/net/netfilter/nfnetlink_queue in this namespace)"
                ),
                Some(libc::EPERM) => bail!(
                    "cannot bind NFQUEUE {q}: permission denied — xferlab-delay needs root (CAP_NET_ADMIN in its network namespace)"
                ),
                _ => return Err(anyhow::Error::new(e).context(format!("binding NFQUEUE {q}"))),
            }
        }
        self.request(|b, s| nfq::configure(b, s, cfg), &mut on_packet)
            .with_context(|| {
                format!(
                    "configuring NFQUEUE {q} (copy mode, maxlen {}, flags)",
                    cfg.maxlen
                )
            })
    }

    pub fn unbind_queue(&mut self, queue: u16) -> Result<()> {
        self.request(|b, s| nfq::unbind(b, s, queue), |_| {})
            .with_context(|| format!("unbinding NFQUEUE {queue}"))
    }

    /// Accepts every held packet of `queue` up to `last_id` with one message.
    pub fn accept_up_to(&mut self, queue: u16, last_id: u32) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        self.out.clear();
        nfq::verdict_batch(&mut self.out, self.seq, queue, last_id, nfq::NF_ACCEPT);
        self.send_out()
    }

    /// Reads one datagram if there is one and parses it. Ok(false) when none is waiting.
    /// `ENOBUFS` (only without NETLINK_NO_ENOBUFS) is returned as an error for the caller
    /// to count.
    pub fn recv_one(&mut self, f: impl FnMut(Message)) -> io::Result<bool> {
        loop {
            // SAFETY: buf is valid for its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    self.buf.len(),
                    0,
                )
            };
            if n >= 0 {
                nfq::parse(&self.buf[..n as usize], f)
                    .map_err(|m| io::Error::new(io::ErrorKind::InvalidData, m.0))?;
                return Ok(true);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(false),
                _ => return Err(e),
            }
        }
    }
}

fn setsockopt_i32(fd: RawFd, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: pointer to an i32 of the given size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn wait_readable(fd: RawFd, timeout_ms: i32) -> io::Result<()> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    if unsafe { libc::poll(&mut pfd, 1, timeout_ms) } < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// Turns on kernel receive timestamps for every packet of the host (the `netstamp_needed`
/// switch, held while the returned socket is open) so queued packets carry
/// `NFQA_TIMESTAMP`: the time they reached the router, before any wait in our socket.
pub fn enable_kernel_timestamps() -> io::Result<OwnedFd> {
    // SAFETY: plain syscalls on a socket this function owns.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = OwnedFd::from_raw_fd(fd);
        setsockopt_i32(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        Ok(fd)
    }
}
