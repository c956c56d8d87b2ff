//! A path with a round-trip time, for tests that need one (the window-clamp
//! limiter: a window is rate × RTT, and loopback's RTT is microseconds).
//! This kernel has no netem, so the delay is done in userland: two network
//! namespaces, each with a TUN device, and a thread per direction that
//! reads a packet from one device and writes it into the other once it has
//! waited the one-way delay. TCP runs end to end through it. Root only.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
/// Large packets keep the packet rate (and the forwarding cost) low.
const MTU: &str = "9000";

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Namespaces `a` (10.203.0.1) and `b` (10.203.0.2), joined by the delay
/// line; everything is removed on drop.
pub struct DelayedPath {
    pub a: String,
    pub b: String,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

pub const ADDR_A: &str = "10.203.0.1";
pub const ADDR_B: &str = "10.203.0.2";

fn tun(name: &str) -> std::io::Result<OwnedFd> {
    // SAFETY: a plain open of a path we own as a C string.
    let fd = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; 16],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: req is a live ifreq-sized struct for TUNSETIFF.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        ))
    }
}

impl DelayedPath {
    /// None (with a message) when the test cannot build it (not root, no
    /// TUN, no `ip`).
    pub fn create(one_way: Duration) -> Option<DelayedPath> {
        if !super::is_root() {
            eprintln!("skipping delayed-path test: not root");
            return None;
        }
        let n = super::COUNTER.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let path = DelayedPath {
            a: format!("xfert-{pid}-{n}-da"),
            b: format!("xfert-{pid}-{n}-db"),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        let (ta, tb) = (format!("xd{pid}x{n}a"), format!("xd{pid}x{n}b"));
        let (fa, fb) = match (tun(&ta), tun(&tb)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("skipping delayed-path test: no TUN device ({e})");
                return None;
            }
        };
        let steps: Vec<Vec<&str>> = vec![
            vec!["netns", "add", &path.a],
            vec!["netns", "add", &path.b],
            vec!["link", "set", &ta, "netns", &path.a],
            vec!["link", "set", &tb, "netns", &path.b],
            vec![
                "-n", &path.a, "addr", "add", ADDR_A, "peer", ADDR_B, "dev", &ta,
            ],
            vec![
                "-n", &path.b, "addr", "add", ADDR_B, "peer", ADDR_A, "dev", &tb,
            ],
            vec!["-n", &path.a, "link", "set", &ta, "mtu", MTU, "up"],
            vec!["-n", &path.b, "link", "set", &tb, "mtu", MTU, "up"],
            vec!["-n", &path.a, "link", "set", "lo", "up"],
            vec!["-n", &path.b, "link", "set", "lo", "up"],
        ];
        if let Some(e) = steps.iter().find_map(|s| ip(s).err()) {
            drop(path);
            panic!("{e}");
        }
        let mut path = path;
        let (fa, fb) = (Arc::new(fa), Arc::new(fb));
        path.forward(fa.clone(), fb.clone(), one_way);
        path.forward(fb, fa, one_way);
        Some(path)
    }

    /// Packets read from `from` are written to `to` `delay` later: a reader
    /// thread stamps them, a writer thread holds each until its time (FIFO,
    /// as the delay is the same for all). Both run SCHED_FIFO when allowed,
    /// so a loaded machine does not stretch the delay.
    fn forward(&mut self, from: Arc<OwnedFd>, to: Arc<OwnedFd>, delay: Duration) {
        let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
        let stop = self.stop.clone();
        self.threads.push(std::thread::spawn(move || {
            realtime_priority();
            let mut buf = vec![0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                let mut pfd = libc::pollfd {
                    fd: from.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one live pollfd.
                if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
                    continue;
                }
                // SAFETY: buf is ours and as long as stated.
                let n = unsafe { libc::read(from.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n > 0
                    && tx
                        .send((Instant::now() + delay, buf[..n as usize].to_vec()))
                        .is_err()
                {
                    return;
                }
            }
        }));
        self.threads.push(std::thread::spawn(move || {
            realtime_priority();
            for (due, p) in rx {
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                // SAFETY: p is a live buffer of the stated length.
                unsafe { libc::write(to.as_raw_fd(), p.as_ptr().cast(), p.len()) };
            }
        }));
    }
}

fn realtime_priority() {
    let p = libc::sched_param { sched_priority: 10 };
    // SAFETY: p is a valid sched_param; pid 0 is the calling thread.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &p);
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

impl Drop for DelayedPath {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // The devices went with their descriptors; now the namespaces.
        for n in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}
