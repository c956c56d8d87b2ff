//! Per-socket tuning: congestion control, pacing, buffers, TCP_INFO.

use anyhow::{bail, Result};
use std::os::fd::AsRawFd;

fn setsockopt_raw<T>(fd: i32, level: i32, name: i32, val: &T) -> std::io::Result<()> {
    // SAFETY: val points to a live T of the given size for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            val as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

pub fn available_cc() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

pub fn set_cc<S: AsRawFd>(s: &S, name: &str) -> Result<()> {
    let fd = s.as_raw_fd();
    // SAFETY: the pointer/length pair describes the bytes of `name`.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr() as *const libc::c_void,
            name.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOENT) {
            bail!(
                "congestion control {name:?} is not available in this kernel (available: {})",
                available_cc()
            );
        }
        bail!("setting congestion control {name:?}: {e}");
    }
    Ok(())
}

/// Caps the socket's send rate in bytes/s. Since Linux 4.13 TCP paces
/// internally, so this works without the fq qdisc.
pub fn set_pacing<S: AsRawFd>(s: &S, bytes_per_sec: u64) -> Result<()> {
    setsockopt_raw(
        s.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_MAX_PACING_RATE,
        &bytes_per_sec,
    )
    .map_err(|e| anyhow::anyhow!("setting SO_MAX_PACING_RATE: {e}"))
}

/// Bounds the unsent part of the send buffer (TCP_NOTSENT_LOWAT): writes
/// block once this many bytes wait to be sent, so a change of plan (a pause)
/// is not delayed by megabytes queued at the old rate.
pub fn set_notsent_lowat<S: AsRawFd>(s: &S, bytes: u32) -> Result<()> {
    setsockopt_raw(
        s.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        &(bytes as libc::c_int),
    )
    .map_err(|e| anyhow::anyhow!("setting TCP_NOTSENT_LOWAT: {e}"))
}

/// Bounds the window this (receiving) socket advertises, hence its peer's
/// send window, to `bytes` (TCP_WINDOW_CLAMP). The receive buffer is pinned
/// first (SO_RCVBUF, at least four times the window): receive-buffer
/// autotuning raises the clamp along with the buffer it grows.
pub fn clamp_window<S: AsRawFd>(s: &S, bytes: u32) -> Result<()> {
    let fd = s.as_raw_fd();
    let mut cur: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: cur and len describe a live c_int for the kernel to fill.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &mut cur as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        bail!("reading SO_RCVBUF: {}", std::io::Error::last_os_error());
    }
    // The kernel doubles what it is given; FORCE (root) passes rmem_max.
    let want = (cur as i64).max(bytes as i64 * 4).min(i32::MAX as i64) as libc::c_int / 2;
    if setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &want).is_err() {
        setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &want)
            .map_err(|e| anyhow::anyhow!("setting SO_RCVBUF: {e}"))?;
    }
    let clamp = bytes.min(i32::MAX as u32) as libc::c_int;
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, &clamp)
        .map_err(|e| anyhow::anyhow!("setting TCP_WINDOW_CLAMP: {e}"))
}

/// The window clamp in force (TCP_WINDOW_CLAMP), if it can be read.
pub fn window_clamp<S: AsRawFd>(s: &S) -> Option<u32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len describe a live c_int for the kernel to fill.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_WINDOW_CLAMP,
            &mut v as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    (rc == 0 && v >= 0).then_some(v as u32)
}

/// Which buffer `set_buffer` sets.
#[derive(Clone, Copy, PartialEq)]
pub enum Buffer {
    Send,
    Receive,
}

/// Sets a socket buffer (`--sndbuf`, `--rcvbuf`: `flag`) to `bytes` and
/// says once per process when the kernel gave less (it caps SO_SNDBUF and
/// SO_RCVBUF at net.core.wmem_max and rmem_max, without an error).
pub fn set_buffer(s: &socket2::Socket, which: Buffer, flag: &str, bytes: usize) -> Result<()> {
    static SAID: [std::sync::atomic::AtomicBool; 2] = [
        std::sync::atomic::AtomicBool::new(false),
        std::sync::atomic::AtomicBool::new(false),
    ];
    let (got, sysctl) = match which {
        Buffer::Send => {
            s.set_send_buffer_size(bytes)?;
            (s.send_buffer_size()?, "net.core.wmem_max")
        }
        Buffer::Receive => {
            s.set_recv_buffer_size(bytes)?;
            (s.recv_buffer_size()?, "net.core.rmem_max")
        }
    };
    // The kernel reports twice what it keeps for data (the rest is overhead).
    let said = &SAID[which as usize];
    if got / 2 < bytes && !said.swap(true, std::sync::atomic::Ordering::SeqCst) {
        eprintln!(
            "xfer: warning: {flag} {}: the kernel gave {} ({sysctl} caps it; raise it with sysctl)",
            crate::util::human_bytes(bytes as u64),
            crate::util::human_bytes(got as u64 / 2)
        );
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, Default)]
pub struct TcpSample {
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_ms: f64,
    pub retrans: u32,
    /// Smallest RTT seen (tcpi_min_rtt), in µs; 0 if unknown.
    pub min_rtt_us: u32,
    pub snd_mss: u32,
    /// Bytes the peer acknowledged, and segments sent (retransmissions
    /// included), since the connection opened.
    pub bytes_acked: u64,
    pub segs_out: u32,
}

pub fn tcp_info<S: AsRawFd>(s: &S) -> Option<TcpSample> {
    // SAFETY: tcp_info is plain old data; the kernel fills at most `len` bytes.
    unsafe {
        let mut ti: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut ti as *mut _ as *mut libc::c_void,
            &mut len,
        );
        if rc != 0 {
            return None;
        }
        Some(TcpSample {
            cwnd: ti.tcpi_snd_cwnd,
            ssthresh: ti.tcpi_snd_ssthresh,
            srtt_ms: ti.tcpi_rtt as f64 / 1000.0,
            retrans: ti.tcpi_total_retrans,
            bytes_acked: ti.tcpi_bytes_acked,
            segs_out: ti.tcpi_segs_out,
            min_rtt_us: if ti.tcpi_min_rtt != u32::MAX {
                ti.tcpi_min_rtt
            } else {
                ti.tcpi_rtt
            },
            snd_mss: ti.tcpi_snd_mss,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_cc_is_a_clear_error() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let e = set_cc(&s, "no-such-cc").unwrap_err().to_string();
        assert!(e.contains("not available"), "{e}");
        set_cc(&s, "reno").unwrap();
        set_pacing(&s, 1_000_000).unwrap();
        set_notsent_lowat(&s, 128 << 10).unwrap();
        let i = tcp_info(&s).unwrap();
        assert!(i.cwnd > 0 && i.snd_mss > 0);
        let (r, _) = l.accept().unwrap();
        clamp_window(&r, 50_000).unwrap();
        assert_eq!(window_clamp(&r), Some(50_000));
    }
}
