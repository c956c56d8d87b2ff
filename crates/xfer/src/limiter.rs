//! How a rate plan is enforced on the data sockets (`--limiter`): the three
//! end-host mechanisms seed 001 §2.1 compares.
//!
//! * `pacing`: SO_MAX_PACING_RATE on each socket. The kernel spaces the
//!   packets (PSPacer-like): precise to the packet, no bursts.
//! * `sleep`: a userland timer (Trickle-like). Each stream writes a piece,
//!   then sleeps until its share of the rate allows the next, waking on a
//!   coarse timer grid (`--timer-hz`, the kernel's HZ by default); TCP sends
//!   each piece at once, so the traffic comes in bursts of a tick's worth.
//! * `cwnd`: the window clamped to rate × RTT (TCP self-clocking), the RTT
//!   being the sender's min RTT (TCP_INFO). TCP_WINDOW_CLAMP bounds the
//!   window a socket *advertises*, so the clamp is set on the receiver's
//!   sockets: the client sends it over the control connection.
//!
//! A controller thread applies each step of the profile at its time. The
//! senders ask their `Gate` before each piece of payload: it holds them
//! while the plan pauses (rate 0), and times them for `sleep`.

use crate::conn::Conn;
use crate::profile::Profile;
use crate::proto::{send_msg, ClientCtl, WindowClamp, FRAME_HDR_LEN};
use crate::sock;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Payload written per piece when only pauses need checking: a pause takes
/// hold within one piece per stream.
const PAUSE_PIECE: usize = 64 << 10;
/// Smallest and largest piece of the sleep limiter (a tick's worth).
const MIN_PIECE: usize = 4 << 10;
const MAX_PIECE: usize = 256 << 10;
/// Ticks of credit the sleep limiter keeps for a writer that woke late or
/// blocked in the kernel: enough to hold the mean rate on a loaded machine,
/// too little for a burst after a long stall.
const CREDIT_TICKS: u32 = 4;
/// Unsent bytes a paced socket may hold, in time at its rate (with
/// TCP_NOTSENT_LOWAT): what still leaves at the old rate once the plan pauses.
const UNSENT_TIME: f64 = 0.02;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Limiter {
    /// SO_MAX_PACING_RATE (kernel packet pacing).
    #[default]
    Pacing,
    /// A userland sleep timer at --timer-hz (Trickle-like).
    Sleep,
    /// The receiver's window clamped to rate × min RTT.
    Cwnd,
}

impl Limiter {
    pub fn name(self) -> &'static str {
        match self {
            Limiter::Pacing => "pacing",
            Limiter::Sleep => "sleep",
            Limiter::Cwnd => "cwnd",
        }
    }
}

/// The plan and how to enforce it, as given on the command line.
#[derive(Clone, Debug)]
pub struct RatePlan {
    pub profile: Profile,
    pub limiter: Limiter,
    pub timer_hz: u32,
}

/// A step as applied (the trace's `rate_changes` table).
#[derive(Serialize, Clone, Debug)]
pub struct RateChange {
    pub step: usize,
    /// Planned time, seconds after the data start.
    pub t_planned: f64,
    /// When it took effect (the sockets were set), seconds after the data start.
    pub t: f64,
    /// Goodput in force, bit/s, all streams together (0: paused).
    pub rate_bps: u64,
    /// What each stream was set to: pacing, SO_MAX_PACING_RATE in bytes/s;
    /// cwnd, the window clamp in bytes; sleep, its payload bytes/s.
    pub per_stream: Vec<u64>,
    /// cwnd: the min RTT each window was computed from, in ms.
    pub min_rtt_ms: Option<Vec<f64>>,
    pub note: Option<String>,
}

struct State {
    /// Goodput in force (bit/s, all streams); 0 = paused.
    rate_bps: u64,
    /// Bumped at every change, so a gate starts afresh at a new rate.
    generation: u64,
    stopped: bool,
}

/// Shared by the controller thread and the senders' gates.
pub struct RateControl {
    plan: RatePlan,
    streams: u32,
    /// Wire bytes per payload byte: (chunk + frame header) / chunk.
    overhead: f64,
    /// Profile offsets count from here (the first attempt's data start).
    origin: Instant,
    tick: Duration,
    abort: Arc<AtomicBool>,
    state: Mutex<State>,
    cv: Condvar,
}

/// The running controller; `stop` returns what it applied.
pub struct Controller {
    ctl: Arc<RateControl>,
    first: RateChange,
    handle: JoinHandle<Vec<RateChange>>,
}

/// Where the controller sets things: the sender's data sockets, and for
/// `cwnd` the control connection that carries clamps to the receiver.
pub struct Targets {
    pub socks: Vec<Weak<Conn>>,
    pub ctrl: Option<Conn>,
}

impl RateControl {
    pub fn new(
        plan: RatePlan,
        streams: u32,
        chunk: u32,
        origin: Instant,
        abort: Arc<AtomicBool>,
    ) -> Arc<RateControl> {
        let tick = Duration::from_secs_f64(1.0 / plan.timer_hz.max(1) as f64);
        Arc::new(RateControl {
            plan,
            streams,
            overhead: (chunk as f64 + FRAME_HDR_LEN as f64) / chunk as f64,
            origin,
            tick,
            abort,
            state: Mutex::new(State {
                rate_bps: 0,
                generation: 0,
                stopped: false,
            }),
            cv: Condvar::new(),
        })
    }

    pub fn limiter(&self) -> Limiter {
        self.plan.limiter
    }

    /// Senders must ask a gate before each piece: the sleep limiter times
    /// them, and a plan with a pause holds them. (A constant rate paced or
    /// clamped by the kernel needs nothing of them.)
    pub fn needs_gates(&self) -> bool {
        self.plan.limiter == Limiter::Sleep
            || self.plan.profile.steps().iter().any(|s| s.rate_bps == 0)
    }

    /// Applies the step in force now (step 0 on a first attempt) before any
    /// data goes, then runs the later steps on a thread.
    pub fn start(self: &Arc<Self>, t: Targets) -> Controller {
        if self.plan.limiter == Limiter::Pacing && self.plan.profile.steps().len() > 1 {
            let most = self.wire_per_stream(self.plan.profile.max_rate()) as f64;
            let lowat = (most * UNSENT_TIME).clamp(64.0 * 1024.0, 8.0 * 1024.0 * 1024.0);
            for s in t.socks.iter().filter_map(Weak::upgrade) {
                let _ = sock::set_notsent_lowat(s.as_ref(), lowat as u32);
            }
        }
        let now = self.origin.elapsed().as_secs_f64();
        let k = self.plan.profile.step_at(now);
        let first = self.apply(k, &t, None);
        let ctl = self.clone();
        let handle = std::thread::spawn(move || ctl.run(k, t));
        Controller {
            ctl: self.clone(),
            first,
            handle,
        }
    }

    /// The controller thread: each later step at its time, until stopped.
    fn run(self: Arc<Self>, first: usize, t: Targets) -> Vec<RateChange> {
        // The changes land on time (the default timer slack is 50 µs).
        crate::start::set_timer_slack_ns(1);
        let steps = self.plan.profile.steps();
        let mut log = Vec::new();
        let mut prev = vec![];
        for (k, step) in steps.iter().enumerate().skip(first + 1) {
            let at = self.origin + Duration::from_secs_f64(step.at);
            if !self.sleep_until(at) {
                break;
            }
            let ch = self.apply(k, &t, Some(&prev));
            prev = ch.per_stream.clone();
            log.push(ch);
        }
        log
    }

    /// Waits until `at`; false if stopped first.
    fn sleep_until(&self, at: Instant) -> bool {
        let mut st = self.state.lock().unwrap();
        loop {
            if st.stopped {
                return false;
            }
            let now = Instant::now();
            if now >= at {
                return true;
            }
            st = self.cv.wait_timeout(st, at - now).unwrap().0;
        }
    }

    /// Sets the sockets for step `k`, then lets the gates see its rate.
    /// `prev`: the per-stream settings in force (kept through a pause).
    fn apply(&self, k: usize, t: &Targets, prev: Option<&[u64]>) -> RateChange {
        let steps = self.plan.profile.steps();
        let mut rate = steps[k].rate_bps;
        let mut note = None;
        if rate == 0 && k + 1 == steps.len() && k > 0 {
            // The plan ends here but data is left (the senders are still
            // running): finish at the last rate rather than hang.
            rate = self.plan.profile.nonzero_near(k);
            note = Some(format!(
                "the plan ended at {} s with data left: continuing at {rate} bit/s",
                steps[k].at
            ));
            eprintln!("xfer: {}", note.as_ref().unwrap());
        }
        // While paused the sockets keep their settings (step 0: those of the
        // first rate to come, so nothing ever goes unlimited).
        let set_for = if rate > 0 {
            rate
        } else {
            self.plan.profile.nonzero_near(k)
        };
        let mut ch = RateChange {
            step: k,
            t_planned: steps[k].at,
            t: 0.0,
            rate_bps: rate,
            per_stream: vec![],
            min_rtt_ms: None,
            note,
        };
        match (self.plan.limiter, prev) {
            (_, Some(p)) if rate == 0 => ch.per_stream = p.to_vec(),
            (Limiter::Pacing, _) => self.set_pacing(set_for, t, &mut ch),
            (Limiter::Sleep, _) => {
                ch.per_stream = vec![rate / 8 / self.streams as u64; self.streams as usize]
            }
            (Limiter::Cwnd, _) => self.set_clamps(set_for, t, &mut ch),
        }
        let mut st = self.state.lock().unwrap();
        st.rate_bps = rate;
        st.generation += 1;
        self.cv.notify_all();
        drop(st);
        ch.t = self.origin.elapsed().as_secs_f64();
        ch
    }

    /// Wire bytes/s per stream for a goodput of `rate_bps` (all streams):
    /// split evenly and scaled up by the frame header overhead, as `--rate`.
    fn wire_per_stream(&self, rate_bps: u64) -> u64 {
        (rate_bps as f64 / 8.0 / self.streams as f64 * self.overhead).ceil() as u64
    }

    fn set_pacing(&self, rate: u64, t: &Targets, ch: &mut RateChange) {
        let per = self.wire_per_stream(rate);
        for s in t.socks.iter().filter_map(Weak::upgrade) {
            if let Err(e) = sock::set_pacing(s.as_ref(), per) {
                ch.note = Some(format!("{e:#}"));
            }
        }
        ch.per_stream = vec![per; t.socks.len()];
    }

    /// cwnd: window = wire rate × min RTT per stream, sent to the receiver.
    fn set_clamps(&self, rate: u64, t: &Targets, ch: &mut RateChange) {
        let per = self.wire_per_stream(rate) as f64;
        let mut rtts = Vec::new();
        let mut short = false;
        for w in &t.socks {
            let info = w.upgrade().and_then(|s| sock::tcp_info(s.as_ref()));
            let (rtt_us, mss) = info.map(|i| (i.min_rtt_us, i.snd_mss)).unwrap_or((0, 0));
            let window = (per * rtt_us as f64 / 1e6).ceil() as u64;
            short |= window < 2 * mss as u64;
            ch.per_stream.push(window.clamp(1, u32::MAX as u64));
            rtts.push(rtt_us as f64 / 1000.0);
        }
        ch.min_rtt_ms = Some(rtts);
        if short {
            let note = "a window below two segments: the RTT is too short for a window clamp to \
                        hold this rate (use --limiter pacing)";
            eprintln!("xfer: warning: step {}: {note}", ch.step);
            ch.note = Some(note.into());
        }
        let msg = ClientCtl::Clamp(WindowClamp {
            window_clamp: ch.per_stream.iter().map(|&w| w as u32).collect(),
        });
        if let Some(mut c) = t.ctrl.as_ref() {
            if let Err(e) = send_msg(&mut c, &msg) {
                ch.note = Some(format!("sending the window clamp: {e:#}"));
            }
        }
    }

    /// The first timer tick at or after `due` (ticks every 1/hz from the origin).
    fn next_tick(&self, due: Instant) -> Instant {
        let since = due.saturating_duration_since(self.origin).as_secs_f64();
        let ticks = (since / self.tick.as_secs_f64()).ceil();
        self.origin + self.tick.mul_f64(ticks)
    }
}

impl Controller {
    /// Stops the controller (the senders are done) and returns every step
    /// it applied, the first included.
    pub fn stop(self) -> Vec<RateChange> {
        {
            let mut st = self.ctl.state.lock().unwrap();
            st.stopped = true;
            self.ctl.cv.notify_all();
        }
        let mut log = vec![self.first];
        log.extend(self.handle.join().unwrap_or_default());
        log
    }
}

/// A sender's permission to write: one per stream.
pub struct Gate {
    ctl: Arc<RateControl>,
    /// Sleep limiter: when this stream may write again at its share of the
    /// rate (a virtual clock, advanced by each piece's duration).
    due: Instant,
    generation: u64,
}

impl Gate {
    pub fn new(ctl: &Arc<RateControl>) -> Gate {
        Gate {
            ctl: ctl.clone(),
            due: Instant::now(),
            generation: u64::MAX,
        }
    }

    /// How much payload to write between two calls of `admit`.
    pub fn piece(&self) -> usize {
        let c = &*self.ctl;
        if c.plan.limiter != Limiter::Sleep {
            return PAUSE_PIECE;
        }
        let rate = c.state.lock().unwrap().rate_bps as f64;
        let per_tick = rate / 8.0 / c.streams as f64 * c.tick.as_secs_f64();
        (per_tick as usize).clamp(MIN_PIECE, MAX_PIECE)
    }

    /// Blocks until `n` more payload bytes may go: while the plan pauses,
    /// and for `sleep` until this stream's share of the rate allows them
    /// (woken on the timer grid). False if the transfer was aborted.
    pub fn admit(&mut self, n: usize) -> bool {
        let c = &*self.ctl;
        let mut st = c.state.lock().unwrap();
        loop {
            if c.abort.load(Ordering::Relaxed) {
                return false;
            }
            if st.stopped {
                return true;
            }
            let now = Instant::now();
            if st.generation != self.generation {
                self.generation = st.generation;
                self.due = now;
            }
            if st.rate_bps == 0 {
                // Paused: a change wakes us; the timeout only rechecks abort.
                st = c.cv.wait_timeout(st, Duration::from_millis(100)).unwrap().0;
                continue;
            }
            if c.plan.limiter != Limiter::Sleep {
                return true;
            }
            if let Some(floor) = now.checked_sub(c.tick * CREDIT_TICKS) {
                self.due = self.due.max(floor);
            }
            if self.due <= now {
                let per_stream = st.rate_bps as f64 / 8.0 / c.streams as f64;
                self.due += Duration::from_secs_f64(n as f64 / per_stream);
                return true;
            }
            let wake = c.next_tick(self.due);
            st = c.cv.wait_timeout(st, wake - now).unwrap().0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctl(spec: &str, limiter: Limiter, hz: u32) -> Arc<RateControl> {
        let plan = RatePlan {
            profile: Profile::parse(spec).unwrap(),
            limiter,
            timer_hz: hz,
        };
        RateControl::new(
            plan,
            2,
            1 << 20,
            Instant::now(),
            Arc::new(AtomicBool::new(false)),
        )
    }

    fn no_targets() -> Targets {
        Targets {
            socks: vec![],
            ctrl: None,
        }
    }

    #[test]
    fn sleep_gate_holds_the_rate_on_the_tick_grid() {
        // 16 Mbit/s over 2 streams: 1 MB/s per stream, 4 KB per 4 ms tick.
        let c = ctl("0s:16M", Limiter::Sleep, 250);
        let run = c.start(no_targets());
        let mut g = Gate::new(&c);
        assert_eq!(g.piece(), MIN_PIECE);
        let t0 = Instant::now();
        let mut sent = 0;
        while sent < 200_000 {
            assert!(g.admit(4000));
            sent += 4000;
        }
        // 200 kB at 1 MB/s: 0.2 s, less the credit and the piece at t0.
        let dt = t0.elapsed().as_secs_f64();
        assert!(dt > 0.17 && dt < 1.0, "{dt}");
        let log = run.stop();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].per_stream, vec![1_000_000, 1_000_000]);
    }

    #[test]
    fn a_pause_holds_writers_until_the_next_step() {
        let c = ctl("0s:0,150ms:8M", Limiter::Pacing, 250);
        let run = c.start(no_targets());
        let mut g = Gate::new(&c);
        let t0 = Instant::now();
        assert!(g.admit(1000));
        assert!(t0.elapsed() >= Duration::from_millis(140));
        let log = run.stop();
        assert_eq!(
            log.iter().map(|r| r.rate_bps).collect::<Vec<_>>(),
            [0, 8_000_000]
        );
        assert!(log[1].t >= 0.15 && log[1].t_planned == 0.15);
    }

    #[test]
    fn a_plan_that_ends_with_data_left_continues_at_its_last_rate() {
        let c = ctl("0s:8M,50ms:0", Limiter::Pacing, 250);
        let run = c.start(no_targets());
        std::thread::sleep(Duration::from_millis(120));
        let mut g = Gate::new(&c);
        assert!(g.admit(1000), "not held after the plan's end");
        let log = run.stop();
        assert_eq!(log[1].rate_bps, 8_000_000);
        assert!(log[1].note.as_deref().unwrap().contains("plan ended"));
    }

    #[test]
    fn an_abort_releases_a_paused_writer() {
        let c = ctl("0s:0,60s:8M", Limiter::Pacing, 250);
        let run = c.start(no_targets());
        let mut g = Gate::new(&c);
        let abort = c.abort.clone();
        let h = std::thread::spawn(move || g.admit(1));
        std::thread::sleep(Duration::from_millis(50));
        abort.store(true, Ordering::SeqCst);
        assert!(!h.join().unwrap());
        run.stop();
    }
}
