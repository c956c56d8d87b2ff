//! Watching the data connections while data moves, whichever side sends:
//! TCP_INFO samples for the trace, and the progress bar.

use crate::conn::Conn;
use crate::sock;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

#[derive(Serialize, Clone)]
pub struct TcpRow {
    pub t: f64,
    pub flow_id: u32,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_ms: f64,
    pub retransmissions: u32,
}

/// TCP_INFO of each connection every `iv` until `stop` (times from `t0`).
pub(crate) fn sample_tcp(
    conns: Vec<Weak<Conn>>,
    stop: Arc<AtomicBool>,
    iv: Duration,
    t0: Instant,
) -> Vec<TcpRow> {
    let mut out = Vec::new();
    let mut next = Instant::now() + iv;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if next > now {
            std::thread::sleep((next - now).min(Duration::from_millis(20)));
            continue;
        }
        next += iv;
        let t = t0.elapsed().as_secs_f64();
        // Upgrade only briefly so a dropped socket really closes.
        out.extend(tcp_rows(conns.iter().map(Weak::upgrade), t));
    }
    out
}

/// One TCP_INFO row per connection still open (flow id: its position).
pub(crate) fn tcp_rows(conns: impl Iterator<Item = Option<Arc<Conn>>>, t: f64) -> Vec<TcpRow> {
    conns
        .enumerate()
        .filter_map(|(i, c)| {
            let s = sock::tcp_info(c?.as_ref())?;
            Some(TcpRow {
                t,
                flow_id: i as u32,
                cwnd: s.cwnd,
                ssthresh: s.ssthresh,
                srtt_ms: s.srtt_ms,
                retransmissions: s.retrans,
            })
        })
        .collect()
}

/// The progress bar on a terminal (when `show`: `--progress`, not `--quiet`).
pub(crate) fn progress_bar(
    show: bool,
    size: Option<u64>,
    resumed: u64,
    sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    use std::io::IsTerminal;
    if !show || !std::io::stderr().is_terminal() {
        return None;
    }
    Some(std::thread::spawn(move || {
        let pb = match size {
            Some(s) => indicatif::ProgressBar::new(s),
            None => indicatif::ProgressBar::no_length(),
        };
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta} ({elapsed})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        while !stop.load(Ordering::SeqCst) {
            pb.set_position(resumed + sent.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(100));
        }
        pb.set_position(resumed + sent.load(Ordering::Relaxed));
        pb.finish();
    }))
}
