//! Seed 001's end-host mechanisms and time control in the simulator: each limiter holds a
//! rate and follows a plan's steps (pauses and lifted limits included), and a transfer can
//! start when another pair's transfers are done.

use xferlab_sim::config::{
    FlowConfig, LimiterConfig, LinkConfig, MeasureConfig, NoiseConfig, PairConfig, RateStep,
    SimConfig, StartAfter, TcpConfig,
};
use xferlab_sim::time::{NS_PER_MS, NS_PER_S};
use xferlab_sim::{Simulation, Trace};

/// Payload share of a qdisc frame (1448 bytes of 1514): a limiter's rate counts frames.
const PAYLOAD: f64 = 1448.0 / 1514.0;

fn flow(pair: u32) -> FlowConfig {
    FlowConfig {
        variant: "cubic".into(),
        ..FlowConfig::transfer(pair)
    }
}

/// `pairs` pairs on a 1 Gbit/s bottleneck with a BDP of buffer, 10 Gbit/s hosts.
fn path(pairs: u32, rtt_ms: u64, flows: Vec<FlowConfig>) -> SimConfig {
    let bdp = (1e9 * rtt_ms as f64 / 1e3 / 8.0 / 1500.0) as u32;
    SimConfig {
        seed: 3,
        mss: 1448,
        header_bytes: 52,
        frame_overhead: 38,
        bottleneck: LinkConfig {
            rate_bps: 1e9,
            buffer_pkts: bdp.max(100),
            loss_rate: 0.0,
            shaper: None,
        },
        reverse_bottleneck: None,
        pairs: (0..pairs)
            .map(|_| PairConfig {
                access_rate_bps: 10e9,
                rtt_ns: rtt_ms * NS_PER_MS,
            })
            .collect(),
        flows,
        background: vec![],
        tcp: TcpConfig::default(),
        noise: NoiseConfig::default(),
        measure: MeasureConfig::default(),
        end_ns: None,
    }
}

/// Mean goodput (Mbit/s) of flow 0 over the goodput intervals within [from_s, to_s).
fn goodput(tr: &Trace, from_s: f64, to_s: f64) -> f64 {
    let g = &tr.goodput;
    let v: Vec<f64> = (0..g.t_s.len())
        .filter(|&i| g.flow_id[i] == 0 && g.t_s[i] >= from_s && g.t_s[i] + 0.5 <= to_s)
        .map(|i| g.goodput_mbps[i])
        .collect();
    assert!(!v.is_empty(), "no goodput rows in [{from_s}, {to_s})");
    v.iter().sum::<f64>() / v.len() as f64
}

fn limiter(kind: &str, rate_bps: f64) -> LimiterConfig {
    let tick_ns = 4 * NS_PER_MS;
    match kind {
        "pacer" => LimiterConfig::Pacer { rate_bps },
        "token_bucket" => LimiterConfig::TokenBucket {
            rate_bps,
            // the peak of the plans below, 4 ms of it, and a frame
            burst_bytes: (700e6 / 8.0 * 0.004) as u64 + 1514,
            tick_ns,
        },
        "cwnd_clamp" => LimiterConfig::CwndClamp { rate_bps },
        "sleep_timer" => LimiterConfig::SleepTimer { rate_bps, tick_ns },
        _ => unreachable!(),
    }
}

const KINDS: [&str; 4] = ["pacer", "token_bucket", "cwnd_clamp", "sleep_timer"];

#[test]
fn every_mechanism_holds_a_rate_below_the_bottleneck() {
    for kind in KINDS {
        let mut f = flow(0);
        f.duration_ns = Some(12 * NS_PER_S);
        f.limiter = Some(limiter(kind, 400e6));
        let tr = Simulation::new(path(1, 20, vec![f])).unwrap().run();
        let (got, want) = (goodput(&tr, 2.0, 12.0), 400.0 * PAYLOAD);
        // The window clamp counts the path's RTT without the serialisation of its own
        // window, and a sender deferring for an skb's worth of window (Linux's TSO
        // deferral) waits part of each round: under its rate (-5 % here; the kernel on
        // netns ran a clamped 300 MB request in 13.56-13.58 s where the simulator takes
        // 13.57, 12.90 without deferral: docs/scheduling.md); the others are exact to a
        // few packets.
        let (low, high) = if kind == "cwnd_clamp" {
            (0.92, 1.0)
        } else {
            (0.99, 1.01)
        };
        assert!(
            (low..high).contains(&(got / want)),
            "{kind}: {got:.1} Mbit/s against {want:.1}"
        );
    }
}

#[test]
fn every_mechanism_follows_a_plans_steps_pauses_and_lifted_limit() {
    // 200 Mbit/s, then 600 from 5 s, a pause from 10 s, unlimited from 12 s. At 2 ms:
    // at 20 ms a CUBIC flow paced at 200 Mbit/s leaves slow start where its ACK train
    // spans the RTT (HyStart, as Linux does), and climbs to 600 in congestion avoidance
    // over seconds — the congestion control's pace, not the limiter's.
    let steps = [(5.0, Some(600e6)), (10.0, Some(0.0)), (12.0, None)];
    for kind in KINDS {
        let mut f = flow(0);
        f.duration_ns = Some(20 * NS_PER_S);
        f.limiter = Some(limiter(kind, 200e6));
        f.profile = steps
            .iter()
            .map(|&(t, r)| RateStep {
                at_ns: (t * 1e9) as u64,
                rate_bps: r.unwrap_or(f64::INFINITY),
            })
            .collect();
        let tr = Simulation::new(path(1, 2, vec![f])).unwrap().run();
        // The window clamp runs under its rate as above, the more so at 2 ms: the window
        // is ~35 segments at 200 Mbit/s, ~104 at 600, and Linux sends its rest when a third
        // of it is open (tcp_tso_win_divisor), so a third of a window is often held
        // back (-7 % and -22 %; on netns at 2 ms, the kernel's clamped requests ran 3-28 %
        // longer than the simulator's without deferral: docs/scheduling.md).
        let low = if kind == "cwnd_clamp" { 0.75 } else { 0.96 };
        let near = |got: f64, want: f64, what: &str| {
            assert!(
                (low..1.04).contains(&(got / want)),
                "{kind} {what}: {got:.1} Mbit/s against {want:.1}"
            );
        };
        near(goodput(&tr, 1.0, 5.0), 200.0 * PAYLOAD, "first step");
        near(goodput(&tr, 6.0, 10.0), 600.0 * PAYLOAD, "second step");
        let paused = goodput(&tr, 10.5, 12.0);
        assert!(paused < 1.0, "{kind}: {paused:.2} Mbit/s during the pause");
        // Unlimited: the whole bottleneck (frames of 1538 bytes on the wire).
        let free = goodput(&tr, 15.0, 20.0);
        assert!(
            free > 0.9 * 1e3 * 1448.0 / 1538.0,
            "{kind}: {free:.1} Mbit/s unlimited"
        );
    }
}

#[test]
fn a_transfer_started_after_another_pair_begins_its_signal_delay_after_that_completion() {
    let mut first = flow(0);
    first.volume_bytes = Some(60_000_000);
    let mut second = flow(1);
    second.volume_bytes = Some(30_000_000);
    second.start_ns = 123; // ignored: it waits for pair 0
    second.start_after = Some(StartAfter {
        pair: 0,
        delay_ns: 30 * NS_PER_MS,
    });
    let tr = Simulation::new(path(2, 20, vec![first, second]))
        .unwrap()
        .run();
    let fl = &tr.flows;
    let done0 = fl.start_s[0] + fl.completion_time_s[0].expect("first completes");
    assert!(
        (fl.start_s[1] - (done0 + 0.030)).abs() < 1e-9,
        "{} vs {done0}",
        fl.start_s[1]
    );
    assert!(fl.completion_time_s[1].is_some());
    assert_eq!(fl.bytes[1], 30_000_000);
    // One at a time: the first had the whole bottleneck, so it took ~0.5 s, not ~0.75.
    assert!(
        fl.completion_time_s[0].unwrap() < 0.7,
        "{:?}",
        fl.completion_time_s[0]
    );
    // The run ends with the second, not before.
    assert!(tr.stats.end_s >= fl.start_s[1] + fl.completion_time_s[1].unwrap() - 1e-9);
}

#[test]
fn impossible_plans_are_refused_with_the_field_named() {
    let volume = |p: u32| {
        let mut f = flow(p);
        f.volume_bytes = Some(1_000_000);
        f
    };
    let after = |pair| Some(StartAfter { pair, delay_ns: 0 });
    let mut cyc = vec![volume(0), volume(1)];
    cyc[0].start_after = after(1);
    cyc[1].start_after = after(0);
    let mut own = vec![volume(0)];
    own[0].start_after = after(0);
    let mut unsorted = vec![volume(0)];
    unsorted[0].limiter = Some(limiter("pacer", 1e8));
    unsorted[0].profile = vec![
        RateStep {
            at_ns: 2,
            rate_bps: 1e8,
        },
        RateStep {
            at_ns: 1,
            rate_bps: 1e8,
        },
    ];
    let mut bare = vec![volume(0)];
    bare[0].profile = vec![RateStep {
        at_ns: 1,
        rate_bps: 1e8,
    }];
    for (flows, pairs, words) in [
        (cyc, 2, "chains loop"),
        (own, 1, "start_after.pair 0 has no volume-bound transfers"),
        (unsorted, 1, "profile[1].at_ns is not after"),
        (bare, 1, "profile needs a limiter"),
    ] {
        let e = Simulation::new(path(pairs, 20, flows)).err().expect(words);
        assert!(e.0.contains(words), "{} (wanted: {words})", e.0);
    }
}
