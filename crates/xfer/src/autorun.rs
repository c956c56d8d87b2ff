//! `--streams auto`, the driver: every tick it sums what the data
//! connections' TCP_INFO says (bytes acknowledged, segments sent and
//! retransmitted), feeds the search (autotune.rs), and applies its answer:
//! more streams are opened and joined to the session (up to the count the
//! request announced), fewer are parked (they stop taking chunks; see
//! `send::share`). Stripe mode only.

use crate::autotune::{AutoOpts, AutoStep, Sample, Search, SETTLE_MIN_S, TICK_MIN_S};
use crate::conn::Conn;
use crate::send::share::Shared;
use crate::send::workers::{Spawner, Worker};
use crate::session::{join_data, Dial};
use crate::sock;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the driver started: the senders and connections it added, and the
/// search's record.
#[derive(Default)]
pub(crate) struct Grown {
    pub workers: Vec<Worker>,
    pub conns: Vec<Arc<Conn>>,
    pub steps: Vec<AutoStep>,
}

/// What the driver needs: how to open and join a data connection, the
/// shared chunk queue, and how to start a sender.
pub(crate) struct Driver {
    pub dial: Dial,
    pub addr: SocketAddr,
    pub session: String,
    pub opts: AutoOpts,
    pub shared: Arc<Shared>,
    pub spawn: Spawner,
    /// The connections opened before the data started (streams 0..start).
    pub first: Vec<Arc<Conn>>,
    pub data_start: Instant,
    pub quiet: bool,
}

pub(crate) struct AutoRun {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Grown>,
}

impl AutoRun {
    pub(crate) fn start(d: Driver) -> AutoRun {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        AutoRun {
            stop,
            handle: std::thread::spawn(move || drive(d, &s)),
        }
    }

    /// Stops the search (it stops by itself once every chunk is taken).
    pub(crate) fn stop(self) -> Grown {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap_or_default()
    }
}

/// Per connection: bytes acknowledged, retransmissions, segments sent.
type Counts = (u64, u64, u64);

fn counts(c: &Conn) -> Counts {
    sock::tcp_info(c)
        .map(|i| (i.bytes_acked, i.retrans as u64, i.segs_out as u64))
        .unwrap_or_default()
}

/// The tick: 3 smoothed RTTs of the slowest stream, at least `min_s`.
fn tick_len(conns: &[Arc<Conn>], min_s: f64) -> Duration {
    let srtt_ms = conns
        .iter()
        .filter_map(|c| sock::tcp_info(c.as_ref()))
        .map(|i| i.srtt_ms)
        .fold(0.0, f64::max);
    Duration::from_secs_f64((3.0 * srtt_ms / 1e3).max(min_s))
}

fn drive(d: Driver, stop: &AtomicBool) -> Grown {
    let mut g = Grown::default();
    let mut search = Search::new(d.opts);
    let mut all = d.first.clone();
    let mut last: Vec<Counts> = all.iter().map(|c| counts(c)).collect();
    let mut since = Instant::now();
    // A late join that fails stops the growth, not the transfer.
    let mut ceiling = d.opts.max;
    loop {
        let min_s = match search.settling() {
            true => SETTLE_MIN_S,
            false => TICK_MIN_S,
        };
        let end = since + tick_len(&all, min_s);
        while Instant::now() < end {
            if stop.load(Ordering::SeqCst) || d.shared.exhausted() {
                return g;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let now: Vec<Counts> = all.iter().map(|c| counts(c)).collect();
        let mut s = Sample {
            secs: since.elapsed().as_secs_f64(),
            ..Sample::default()
        };
        for (i, c) in now.iter().enumerate() {
            let l = last.get(i).copied().unwrap_or_default();
            s.bytes += c.0.saturating_sub(l.0);
            s.retrans += c.1.saturating_sub(l.1);
            s.segs += c.2.saturating_sub(l.2);
        }
        since = Instant::now();
        let (m, next) = search.observe(&s);
        if let Some(m) = m {
            let t = d.data_start.elapsed().as_secs_f64();
            g.steps.push(AutoStep { t, m, next });
        }
        let next = next.min(ceiling);
        while (all.len() as u32) < next {
            let id = all.len() as u32;
            match join_data(&d.dial, d.addr, &d.session, id) {
                Ok(c) => {
                    let c = Arc::new(c);
                    all.push(c.clone());
                    g.conns.push(c.clone());
                    g.workers.push((d.spawn)(id, c));
                }
                Err(e) => {
                    if !d.quiet {
                        eprintln!("xfer: --streams auto: stream {id} could not join ({e:#}); staying at {id}");
                    }
                    ceiling = id;
                    break;
                }
            }
        }
        d.shared.set_active(next.min(all.len() as u32));
        last = all.iter().map(|c| counts(c)).collect();
    }
}
