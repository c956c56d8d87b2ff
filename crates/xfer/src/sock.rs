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

#[derive(Debug, Clone, Copy, Default)]
pub struct TcpSample {
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_ms: f64,
    pub retrans: u32,
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
        assert!(tcp_info(&s).unwrap().cwnd > 0);
    }
}
