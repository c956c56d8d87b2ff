//! BBR fed synthetic rate samples: one ACK per round trip on a path of known bandwidth.

use super::*;
use crate::tcp::RateSample;

const RTT: Time = 100 * NS_PER_MS;

/// Rounds are one RTprop and a millisecond apart, so that each is a full-length phase.
const ROUND: Time = RTT + NS_PER_MS;

/// A round-trip's worth of ACK: `delivered` segments over one round, ending at `now`.
struct Path {
    now: Time,
    delivered: u64,
}

impl Path {
    fn new() -> Self {
        Self {
            now: 0,
            delivered: 0,
        }
    }

    /// One round: `n` segments delivered over the last RTT; `in_flight` after the ACK.
    fn round(&mut self, b: &mut Bbr, w: &mut Window, n: u64, rtt: Time, in_flight: u32) -> Control {
        let prior = self.delivered;
        self.delivered += n;
        self.now += ROUND;
        let ack = Ack {
            now: self.now,
            acked: n as u32,
            rtt: Some(rtt),
            min_rtt: RTT,
            in_flight,
            state: CaState::Open,
            delivered: self.delivered,
            delivered_mstamp: self.now,
            mss: 1448,
            srtt: Some(rtt),
            pacing_next: self.now,
            rate: RateSample {
                prior_delivered: prior,
                prior_mstamp: Some(self.now - ROUND),
                delivered: Some(n),
                interval: Some(ROUND),
                rtt: Some(rtt),
                acked_sacked: n as u32,
                prior_in_flight: in_flight,
                ..RateSample::default()
            },
            ..Ack::default()
        };
        b.cong_control(w, &ack)
    }
}

fn started() -> (Bbr, Window, Path) {
    let mut b = Bbr::new(1);
    let mut w = Window::new(10);
    let init = Ack {
        min_rtt: RTT,
        srtt: Some(RTT),
        mss: 1448,
        ..Ack::default()
    };
    b.init(&mut w, &init);
    (b, w, Path::new())
}

#[test]
fn startup_paces_at_high_gain_and_grows_by_what_is_acked() {
    let (mut b, mut w, mut p) = started();
    // bbr_init: the initial window over the SYN's RTT, at 2.885 (less 1 %).
    let expected = 10.0 / 0.1 * 1448.0 * HIGH_GAIN * 0.99;
    assert!((b.pacing_rate().unwrap() - expected).abs() < 1.0);
    assert_eq!(b.mode, Mode::Startup);
    // Deliveries doubling every round: cwnd grows by what was ACKed, the pacing rate
    // follows 2.885 × the measured bandwidth.
    let mut n = 10;
    for _ in 0..5 {
        p.round(&mut b, &mut w, n, RTT, n as u32);
        n *= 2;
    }
    assert_eq!(w.cwnd, 10 + 10 + 20 + 40 + 80 + 160);
    let bw = 160.0 / (ROUND as f64 / 1e9);
    assert!((b.bw() - bw).abs() < 1e-6);
    let rate = bw * 1448.0 * HIGH_GAIN * 0.99;
    assert!((b.pacing_rate().unwrap() - rate).abs() < 1.0);
    assert_eq!(w.ssthresh, u32::MAX);
}

#[test]
fn three_rounds_without_25_percent_growth_end_startup() {
    let (mut b, mut w, mut p) = started();
    for n in [100, 200, 400] {
        p.round(&mut b, &mut w, n, RTT, n as u32);
    }
    // 450 < 1.25 × 400: rounds 1 and 2 of no growth, still STARTUP.
    for _ in 0..2 {
        p.round(&mut b, &mut w, 450, RTT, 900);
        assert_eq!(b.mode, Mode::Startup);
    }
    // The third: DRAIN, ssthresh = one BDP (450) plus the quantization budget; with
    // 900 in flight it stays in DRAIN at gain 1/2.885.
    p.round(&mut b, &mut w, 450, RTT, 900);
    assert!(b.full_bw_reached());
    assert_eq!(b.mode, Mode::Drain);
    assert!((450..=500).contains(&w.ssthresh), "ssthresh {}", w.ssthresh);
    assert_eq!(b.pacing_gain, DRAIN_GAIN);
    // Once the queue drained to a BDP: PROBE_BW, cwnd capped at 2 BDP plus the
    // quantization budget and the ACK-aggregation allowance (these synthetic ACKs
    // acknowledge a round at once: up to 450 more).
    let before = w.cwnd;
    p.round(&mut b, &mut w, 450, RTT, 400);
    assert_eq!(b.mode, Mode::ProbeBw);
    assert!(
        w.cwnd < before && (900..=1400).contains(&w.cwnd),
        "cwnd {}",
        w.cwnd
    );
}

fn in_probe_bw() -> (Bbr, Window, Path) {
    let (mut b, mut w, mut p) = started();
    for n in [100, 200, 400, 450, 450, 450, 450] {
        p.round(&mut b, &mut w, n, RTT, 400);
    }
    assert_eq!(b.mode, Mode::ProbeBw);
    (b, w, p)
}

#[test]
fn probe_bw_cycles_through_the_eight_gains() {
    let (mut b, mut w, mut p) = in_probe_bw();
    // One phase per RTprop (here one ACK per round): the cycle comes back to its start
    // after 8, and 1.25 is always followed by 0.75.
    let mut gains = vec![];
    for _ in 0..16 {
        gains.push(b.pacing_gain);
        // A full pipe at the 1.25 phase, a drained one at the 0.75 phase.
        let inflight = if b.pacing_gain > 1.0 { 600 } else { 400 };
        p.round(&mut b, &mut w, 450, RTT, inflight);
    }
    assert_eq!(gains[..8], gains[8..]);
    let i = gains.iter().position(|&g| g == 1.25).unwrap();
    assert_eq!(gains[(i + 1) % 8], 0.75);
    assert_eq!(gains.iter().filter(|&&g| g == 1.0).count(), 12);
    let rate = b.bw() * 1448.0 * b.pacing_gain * 0.99;
    assert!((b.pacing_rate().unwrap() - rate).abs() < 1.0);
}

#[test]
fn a_stale_rtprop_sends_bbr_to_probe_rtt_for_200_ms() {
    let (mut b, mut w, mut p) = in_probe_bw();
    let before = w.cwnd;
    // RTTs 20 % above RTprop for 10 s: the filter expires, PROBE_RTT holds cwnd at 4.
    let mut ctl = Control::default();
    while b.mode != Mode::ProbeRtt {
        ctl = p.round(&mut b, &mut w, 450, 120 * NS_PER_MS, 400);
    }
    assert!(p.now > 10 * NS_PER_S);
    assert_eq!(w.cwnd, 4);
    assert!(
        ctl.app_limited,
        "PROBE_RTT's low rate must not count as a bandwidth sample"
    );
    // The queue drains (4 in flight): 200 ms and a round later BBR returns to PROBE_BW
    // with the window it had, and RTprop is the 120 ms now measured.
    p.round(&mut b, &mut w, 4, 120 * NS_PER_MS, 4);
    p.round(&mut b, &mut w, 4, 120 * NS_PER_MS, 4);
    assert_eq!(b.mode, Mode::ProbeRtt);
    p.round(&mut b, &mut w, 4, 120 * NS_PER_MS, 4);
    assert_eq!(b.mode, Mode::ProbeBw);
    assert!(w.cwnd >= before - 2, "{} vs {before}", w.cwnd);
    assert_eq!(b.min_rtt(), 120 * NS_PER_MS);
}

#[test]
fn recovery_conserves_packets_then_restores_the_window() {
    let (mut b, mut w, p) = in_probe_bw();
    let before = w.cwnd;
    b.ssthresh_on_loss(&w, p.now);
    let mut ack = Ack {
        now: p.now + RTT,
        state: CaState::Recovery,
        in_flight: 300,
        delivered: p.delivered + 2,
        delivered_mstamp: p.now + RTT,
        mss: 1448,
        rate: RateSample {
            acked_sacked: 2,
            losses: 5,
            ..RateSample::default()
        },
        ..Ack::default()
    };
    b.cong_control(&mut w, &ack);
    // Packet conservation: what is in flight plus what was delivered.
    assert_eq!(w.cwnd, 302);
    ack.state = CaState::Open;
    ack.rate.losses = 0;
    b.cong_control(&mut w, &ack);
    assert!(w.cwnd >= before - 2, "restored {} vs {before}", w.cwnd);
}

#[test]
fn windowed_max_filter_forgets_old_peaks() {
    let mut f = MaxFilter::default();
    f.reset(0, 10.0);
    f.update(10, 1, 5.0);
    f.update(10, 5, 7.0);
    assert_eq!(f.get(), 10.0);
    // Round 11: the peak of round 0 leaves the 10-round window; the best since remains.
    f.update(10, 11, 6.0);
    assert_eq!(f.get(), 7.0);
    f.update(10, 12, 20.0);
    assert_eq!(f.get(), 20.0);
}

#[test]
fn registered_under_its_linux_name() {
    let cc = crate::cc::by_name("bbr").expect("registered");
    assert_eq!(cc.name(), "bbr");
    assert!(cc.has_cong_control());
    assert!(crate::cc::NAMES.contains(&"bbr"));
}
