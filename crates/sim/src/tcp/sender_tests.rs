//! Unit tests of the sender: each feeds a synthetic ACK sequence and checks what Linux
//! would do.

use super::*;
use crate::cc;
use crate::config::Kernel;
use crate::time::{NS_PER_MS, NS_PER_S, NS_PER_US};

fn sender_of(variant: &str, total: Option<u64>, rtt: Option<Time>) -> Sender {
    let mut s = Sender::new(
        cc::by_name(variant).unwrap(),
        &TcpConfig::default(),
        1448,
        total,
        None,
    );
    s.start(0, None, rtt);
    s
}

fn sender(total: Option<u64>) -> Sender {
    sender_of("reno", total, None)
}

/// Everything the sender may send at `now` with an empty host queue.
fn drain(s: &mut Sender, now: Time) -> Vec<Segment> {
    let mut out = vec![];
    while let Poll::Send(seg) = s.poll_transmit(now, 0) {
        out.push(seg);
    }
    let new = out.iter().filter(|g| !g.retransmission).count() as u32;
    s.end_transmit(now, new);
    out
}

fn ack(cum: u64, sack: &[(u64, u64)], ts: Time) -> AckSegment {
    let mut a = AckSegment {
        cum,
        ts_echo: ts,
        ts_val: 0,
        wnd: u64::MAX,
        sack: [(0, 0); 3],
        n_sack: sack.len() as u8,
        dsack: None,
    };
    a.sack[..sack.len()].copy_from_slice(sack);
    a
}

#[test]
fn sends_initial_window_then_grows_in_slow_start() {
    let mut s = sender(None);
    assert_eq!(drain(&mut s, 0).len(), 10);
    s.on_ack(NS_PER_MS, &ack(2, &[], 0));
    assert_eq!(s.win.cwnd, 12);
    // Two acknowledged, two more window: four new segments.
    assert_eq!(drain(&mut s, NS_PER_MS).len(), 4);
    assert_eq!(s.srtt(), Some(NS_PER_MS));
}

#[test]
fn rack_marks_the_hole_once_three_segments_above_it_are_sacked() {
    let mut s = sender(None);
    s.win.cwnd = 20;
    assert_eq!(drain(&mut s, 0).len(), 20);
    // Segment 5 is lost; 0..5 are acknowledged at 10 µs, 6, 7, 8 SACKed after.
    let us = 1000;
    s.on_ack(10 * us, &ack(5, &[], 0));
    // Only ACKs that advance snd_una grow the window (Linux `tcp_may_raise_cwnd`).
    assert_eq!(s.win.cwnd, 25);
    s.on_ack(11 * us, &ack(5, &[(6, 7)], 0));
    s.on_ack(12 * us, &ack(5, &[(6, 8)], 0));
    // Below three SACKed segments RACK waits a reordering window (min_rtt/4)...
    assert_eq!(s.state, CaState::Open);
    assert_eq!(s.timer_kind(), Some(TimerKind::ReorderTimeout));
    assert_eq!(s.win.cwnd, 25);
    // ...from the third on it has none: 5 is lost, recovery starts.
    s.on_ack(13 * us, &ack(5, &[(6, 9)], 0));
    assert_eq!(s.state, CaState::Recovery);
    assert_eq!(s.win.ssthresh, 12);
    let out = drain(&mut s, 13 * us);
    assert_eq!(
        out.first().map(|g| (g.seq, g.retransmission)),
        Some((5, true))
    );
    assert_eq!(s.stats.retransmissions, 1);
    assert_eq!(s.stats.lost, 1);
    // The retransmission arrives: everything sent is acknowledged, recovery ends with
    // cwnd = ssthresh (the same ACK may then add to it in congestion avoidance).
    let last = s.board.nxt();
    s.on_ack(30 * us, &ack(last, &[], 13 * us));
    assert_eq!(s.state, CaState::Open);
    assert!((12..=13).contains(&s.win.cwnd), "cwnd {}", s.win.cwnd);
}

#[test]
fn a_lost_retransmission_is_found_without_a_timeout() {
    let ms = NS_PER_MS;
    let mut s = sender_of("reno", None, Some(10 * ms));
    s.win.cwnd = 20;
    drain(&mut s, 0);
    // 0 is lost; 1, 2, 3 SACKed at 10 ms: 0 is marked lost and resent.
    s.on_ack(10 * ms, &ack(0, &[(1, 4)], 0));
    let out = drain(&mut s, 10 * ms);
    assert_eq!(
        out[0],
        Segment {
            seq: 0,
            ts: 10 * ms,
            ts_echo: 0,
            retransmission: true,
            push: false
        }
    );
    // New data was sent after the retransmission (PRR); 4..19 arrive, the
    // retransmission does not, and a segment sent after it is SACKed at 21 ms.
    let after = out
        .iter()
        .find(|g| !g.retransmission)
        .map(|g| g.seq)
        .unwrap();
    s.on_ack(20 * ms, &ack(0, &[(1, 20)], 0));
    s.on_ack(21 * ms, &ack(0, &[(1, after + 1)], 10 * ms));
    let again = drain(&mut s, 21 * ms);
    assert_eq!(
        again.first().map(|g| (g.seq, g.retransmission)),
        Some((0, true))
    );
    assert_eq!(s.stats.timeouts, 0);
    assert_eq!(s.stats.lost, 2, "the original and its retransmission");
}

#[test]
fn a_tail_loss_is_repaired_by_a_probe_not_a_timeout() {
    let ms = NS_PER_MS;
    let mut s = sender_of("reno", Some(3), Some(10 * ms));
    assert_eq!(drain(&mut s, 0).len(), 3);
    // Every segment is lost. The probe is due after 2·SRTT + 2 jiffies = 28 ms.
    assert_eq!(s.timer_kind(), Some(TimerKind::LossProbe));
    assert_eq!(s.timer_deadline(), Some(28 * ms));
    s.on_timer(28 * ms);
    // No new data: the last segment is sent again.
    let probe = drain(&mut s, 28 * ms);
    assert_eq!(
        probe,
        vec![Segment {
            seq: 2,
            ts: 28 * ms,
            ts_echo: 0,
            retransmission: true,
            push: false
        }]
    );
    assert_eq!(s.timer_kind(), Some(TimerKind::Rto));
    // Its SACK shows 0 and 1 lost: recovery, not a timeout. PRR sends one now (nothing
    // is in flight), one more when 0's retransmission is acknowledged.
    s.on_ack(38 * ms, &ack(0, &[(2, 3)], 28 * ms));
    assert_eq!(s.state, CaState::Recovery);
    let out: Vec<u64> = drain(&mut s, 38 * ms).iter().map(|g| g.seq).collect();
    assert_eq!(out, vec![0]);
    s.on_ack(48 * ms, &ack(1, &[(2, 3)], 38 * ms));
    let out: Vec<u64> = drain(&mut s, 48 * ms).iter().map(|g| g.seq).collect();
    assert_eq!(out, vec![1]);
    s.on_ack(58 * ms, &ack(3, &[], 48 * ms));
    assert!(s.is_complete());
    assert_eq!(
        (
            s.stats.retransmissions,
            s.stats.timeouts,
            s.stats.loss_probes
        ),
        (3, 0, 1)
    );
    assert_eq!(s.timer_deadline(), None);
}

#[test]
fn a_silent_path_gets_a_probe_then_a_timeout_of_old_segments_only() {
    let mut s = sender(Some(100));
    drain(&mut s, 0);
    // No RTT known: the probe waits TCP_TIMEOUT_INIT (1 s) and sends new data.
    assert_eq!(s.timer_deadline(), Some(NS_PER_S));
    s.on_timer(NS_PER_S);
    let probe = drain(&mut s, NS_PER_S);
    assert_eq!(probe.iter().map(|g| g.seq).collect::<Vec<_>>(), vec![10]);
    // The RTO counts from the probe: 1 s later.
    assert_eq!(s.timer_deadline(), Some(2 * NS_PER_S));
    s.on_timer(2 * NS_PER_S);
    assert_eq!(s.state, CaState::Loss);
    assert_eq!(s.win.ssthresh, 5);
    // Everything is old enough to be presumed lost; one segment may go.
    assert_eq!(s.win.cwnd, 1);
    let out = drain(&mut s, 2 * NS_PER_S);
    assert_eq!(
        out,
        vec![Segment {
            seq: 0,
            ts: 2 * NS_PER_S,
            ts_echo: 0,
            retransmission: true,
            push: false
        }]
    );
    assert_eq!(s.timer_deadline(), Some(4 * NS_PER_S));
}

#[test]
fn a_timeout_marks_only_segments_older_than_the_latest_rtt() {
    let ms = NS_PER_MS;
    let mut s = sender_of("reno", None, Some(10 * ms));
    s.win.cwnd = 10;
    drain(&mut s, 0);
    // 0..4 acknowledged at 10 ms (RTT 10 ms); cwnd 15: 10..19 go at 10 ms.
    s.on_ack(10 * ms, &ack(5, &[], 0));
    assert_eq!(drain(&mut s, 10 * ms).len(), 10);
    // A timeout at 15 ms: 5..9 (sent at 0) are older than 10 ms, 10..19 are not.
    s.timer = Some((15 * ms, TimerKind::Rto));
    s.on_timer(15 * ms);
    assert_eq!(s.state, CaState::Loss);
    assert_eq!(s.board.lost_out, 5);
    assert_eq!(s.in_flight(), 10);
    assert_eq!(s.win.cwnd, 11);
}

#[test]
fn a_repeated_timeout_reduces_ssthresh_only_after_progress() {
    let mut s = sender(Some(100));
    drain(&mut s, 0);
    s.timer = Some((NS_PER_S, TimerKind::Rto));
    s.on_timer(NS_PER_S);
    assert_eq!(s.win.ssthresh, 5);
    drain(&mut s, NS_PER_S);
    // The retransmission is lost too: same episode, ssthresh kept (cwnd is 1 now).
    s.on_timer(3 * NS_PER_S);
    assert_eq!(s.stats.timeouts, 2);
    assert_eq!(s.win.ssthresh, 5);
    drain(&mut s, 3 * NS_PER_S);
    // It arrives; the next timeout, after progress, is a new congestion event.
    s.on_ack(3 * NS_PER_S + 1000, &ack(1, &[], 3 * NS_PER_S));
    assert_eq!(s.state, CaState::Loss);
    let d = s.timer_deadline().unwrap();
    s.on_timer(d);
    assert_eq!(s.win.ssthresh, 2);
}

#[test]
fn volume_bound_sender_completes() {
    let mut s = sender(Some(3));
    assert_eq!(drain(&mut s, 0).len(), 3);
    s.on_ack(5, &ack(3, &[], 0));
    assert!(s.is_complete());
    assert_eq!(s.timer_deadline(), None);
    assert!(drain(&mut s, 5).is_empty());
}

#[test]
fn tsq_keeps_two_skbs_or_a_millisecond_of_the_pacing_rate_in_the_host() {
    let s = sender(None);
    // No RTT yet: skbs of 64 KiB (45 segments, truesize 66 440 bytes) up to
    // tcp_limit_output_bytes (4 MiB): 64 skbs.
    assert_eq!(s.tsq_limit(false), 64 * 45);
    // 10 segments per 100 ms paced at 200 %: 290 kB/s, skbs of the minimum 2 segments
    // (truesize 4 176 bytes); the limit is two of them, four for retransmissions.
    let s = sender_of("reno", None, Some(100 * NS_PER_MS));
    assert_eq!(s.tsq_limit(false), 2 * 2);
    assert_eq!(s.tsq_limit(true), 4 * 2);
    // 8 333 segments per 100 ms in congestion avoidance (120 %): 145 MB/s, 141 kB per ms,
    // more than two 64 KiB skbs: a third goes while 132 881 bytes ≤ 141 400.
    let mut s = sender_of("reno", None, Some(100 * NS_PER_MS));
    s.win = Window {
        cwnd: 8333,
        ssthresh: 100,
        cwnd_cnt: 0,
    };
    s.update_pacing_rate();
    assert_eq!(s.tsq_limit(false), 3 * 45);
}

#[test]
fn skbs_grow_toward_64_kib_at_small_rtts() {
    // Linux `tcp_tso_autosize`: pacing >> 10, + 64 KiB >> (min_rtt_us >> 9). 10 segments
    // per 1 ms at 200 % (r = 1): 28 281 + 32 768 bytes, 42 segments per skb; TSQ holds two.
    let s = sender_of("reno", None, Some(NS_PER_MS));
    assert_eq!(s.tsq_limit(false), 2 * 42);
    // At 100 µs (r = 0): skbs of the full 64 KiB, and 1 ms of pacing (282 812 bytes)
    // exceeds two of them: a fifth goes while 265 761 bytes ≤ the limit.
    let s = sender_of("reno", None, Some(NS_PER_MS / 10));
    assert_eq!(s.tsq_limit(false), 5 * 45);
}

#[test]
fn slow_start_may_grow_while_half_the_window_is_used() {
    let mut s = sender(None);
    s.win.cwnd = 100;
    // The host takes 60 segments, then TSQ holds the sender back (its limit is 2 880).
    for _ in 0..60 {
        assert!(matches!(s.poll_transmit(0, 0), Poll::Send(_)));
    }
    assert_eq!(s.poll_transmit(0, 3000), Poll::HostQueue);
    s.end_transmit(0, 60);
    // Not cwnd-limited, but 60 ≥ 100/2 in slow start: it may still grow (Linux
    // `tcp_is_cwnd_limited`), and is latched for this window.
    assert!(s.cwnd_limited());
    s.on_ack(1000, &ack(2, &[], 0));
    assert_eq!(s.win.cwnd, 102);
    // In congestion avoidance an unused window does not grow.
    s.win.ssthresh = 50;
    assert!(!s.cwnd_limited());
}

#[test]
fn bbr_paces_after_the_first_ten_segments() {
    let ms = NS_PER_MS;
    let mut s = sender_of("bbr", None, Some(10 * ms));
    // 2.885 × 10 segments per 10 ms (less 1 %): 4.13 MB/s; the initial window is not paced.
    let rate = s.pacing_rate();
    assert!((rate / 1e6 - 4.135).abs() < 0.01, "{rate}");
    let mut sent = 0;
    while let Poll::Send(_) = s.poll_transmit(0, 0) {
        sent += 1;
    }
    assert_eq!(sent, 10);
    // The cwnd is full (10): after an ACK the next segment waits for its slot.
    s.end_transmit(0, 10);
    s.on_ack(10 * ms, &ack(2, &[], 0));
    assert!(matches!(s.poll_transmit(10 * ms, 0), Poll::Send(_)));
    match s.poll_transmit(10 * ms, 0) {
        Poll::Pacing(t) => assert!(t > 10 * ms && t < 10 * ms + ms, "{t}"),
        p => panic!("{p:?}"),
    }
}

#[test]
fn a_2006_kernel_counts_acks_fills_its_interface_and_resends_everything() {
    let tcp = TcpConfig {
        kernel: Kernel::Linux2006,
        ..TcpConfig::default()
    };
    let mut s = Sender::new(cc::by_name("reno").unwrap(), &tcp, 1448, None, None);
    s.start(0, None, Some(10 * NS_PER_MS));
    // No TSQ: up to the interface queue (txqueuelen) may wait in the host.
    assert_eq!(s.tsq_limit(false), 1000);
    drain(&mut s, 0);
    // tcp_abc = 0: an ACK of two segments grows slow start by one.
    s.on_ack(10 * NS_PER_MS, &ack(2, &[], 0));
    assert_eq!(s.win.cwnd, 11);
    drain(&mut s, 10 * NS_PER_MS);
    // Three segments SACKed above 2: it is lost (duplicate threshold), 3 is not yet.
    s.on_ack(11 * NS_PER_MS, &ack(2, &[(4, 7)], 0));
    assert_eq!((s.state, s.board.lost_out), (CaState::Recovery, 2));
    // No loss probe; a timeout resends everything not SACKed and restarts from one.
    assert_eq!(s.timer_kind(), Some(TimerKind::Rto));
    let d = s.timer_deadline().unwrap();
    s.on_timer(d);
    assert_eq!(s.win.cwnd, 1);
    assert_eq!(s.board.lost_out, 11 - 3);
}

#[test]
fn an_ack_of_retransmitted_data_takes_its_rtt_from_the_echo_in_whole_milliseconds() {
    let (ms, us) = (NS_PER_MS, NS_PER_US);
    let mut s = sender_of("reno", None, Some(10 * ms + 300 * us));
    s.win.cwnd = 20;
    let t0 = ms;
    drain(&mut s, t0);
    // 0 is lost; 1..3 SACKed after 10.3 ms, a precise sample: 0 goes again at 11.3 ms.
    let t1 = t0 + 10 * ms + 300 * us;
    s.on_ack(t1, &ack(0, &[(1, 4)], 0));
    assert_eq!(s.min_rtt, 10 * ms + 300 * us);
    let out = drain(&mut s, t1);
    assert_eq!(
        (out[0].seq, out[0].retransmission, out[0].ts),
        (0, true, t1)
    );
    // Everything up to 20 is ACKed 10.4 ms later, echoing the retransmission: Karn's rule
    // forbids the segments' own times, so the sample is the echo's 21 - 11 = 10 ms.
    let srtt = s.srtt().unwrap();
    s.on_ack(t1 + 10 * ms + 400 * us, &ack(20, &[], t1));
    assert_eq!(s.min_rtt, 10 * ms, "the kernel's whole-millisecond RTT_min");
    assert_eq!(s.srtt(), Some((7 * srtt + 10 * ms) / 8));
}

/// Reno in congestion avoidance with 8 333 segments over 100 ms (skbs of 45 segments,
/// 64 KiB), its window all sent at 0; TSO deferral on or off.
fn full_window_sender(tso_defer: bool) -> Sender {
    let tcp = TcpConfig {
        tso_defer,
        ..TcpConfig::default()
    };
    let mut s = Sender::new(cc::by_name("reno").unwrap(), &tcp, 1448, None, None);
    s.start(0, None, Some(100 * NS_PER_MS));
    s.win = Window {
        cwnd: 8333,
        ssthresh: 100,
        cwnd_cnt: 0,
    };
    s.update_pacing_rate();
    assert_eq!(drain(&mut s, 0).len(), 8333);
    s
}

#[test]
fn tso_deferral_sends_new_data_an_skb_at_a_time_within_a_millisecond() {
    // Linux `tcp_tso_should_defer`.
    let ms = NS_PER_MS;
    let run = |defer: bool| {
        let mut s = full_window_sender(defer);
        let mut sent = vec![];
        // The window sent at 0 ended 8 segments into the write queue's skb of 45 (8 325 to
        // 8 370). 50 segments acknowledged a round trip after they left: that skb's other
        // 37 go, the next skb waits (13 < 45; the next segment's ACK is due now).
        s.on_ack(100 * ms, &ack(50, &[], 0));
        sent.push(drain(&mut s, 100 * ms).len());
        // 30 more half a millisecond later: 43 < 45, the last write was recent: wait.
        s.on_ack(100 * ms + ms / 2, &ack(80, &[], 0));
        sent.push(drain(&mut s, 100 * ms + ms / 2).len());
        // 2 more: a whole skb fits and goes.
        s.on_ack(101 * ms + ms / 5, &ack(82, &[], 0));
        sent.push(drain(&mut s, 101 * ms + ms / 5).len());
        sent
    };
    assert_eq!(run(true), [37, 0, 45]);
    assert_eq!(run(false), [50, 30, 2]);
}

#[test]
fn tso_deferral_waits_neither_in_recovery_nor_when_the_next_ack_is_over_a_millisecond_away() {
    let ms = NS_PER_MS;
    let mut s = full_window_sender(true);
    // Ten segments acknowledged half a round trip early: the next one's ACK is due
    // some 44 ms later (srtt 93.75 ms), so nothing waits for a full skb.
    s.on_ack(50 * ms, &ack(10, &[], 0));
    assert_eq!(s.srtt(), Some(93_750_000));
    assert_eq!(drain(&mut s, 50 * ms).len(), 10);
    // When the ACKs are due, 45 acknowledged at 94 ms send the rest of the write queue's
    // skb the ten came from (27: not the queue's tail, it fits), and the next skb (45)
    // waits; 20 more acknowledged 0.2 ms later (38 free) still wait.
    let t = 94 * ms + ms / 5;
    s.on_ack(94 * ms, &ack(55, &[], 0));
    assert_eq!(drain(&mut s, 94 * ms).len(), 27);
    s.on_ack(t, &ack(75, &[], 0));
    assert_eq!(drain(&mut s, t).len(), 0);
    // In loss recovery nothing waits for a full skb.
    s.state = CaState::Recovery;
    assert_eq!(drain(&mut s, t).len(), 38);
}

#[test]
fn the_last_written_segment_and_the_receive_windows_edge_are_pushed() {
    // A volume of 25 segments under a receive window of 6: each flight ends at the
    // window's edge (where Linux sends the byte window's sub-MSS remainder), the volume's
    // last segment ends the application's write (PSH); nothing else is marked.
    let ms = NS_PER_MS;
    let mut s = Sender::new(
        cc::by_name("reno").unwrap(),
        &TcpConfig::default(),
        1448,
        Some(25),
        Some(6),
    );
    s.start(0, None, Some(10 * ms));
    let pushed =
        |out: &[Segment]| -> Vec<u64> { out.iter().filter(|g| g.push).map(|g| g.seq).collect() };
    let out = drain(&mut s, 0);
    assert_eq!((out.len(), pushed(&out)), (6, vec![5]));
    let mut all = pushed(&out);
    let mut t = 10 * ms;
    while !s.is_complete() {
        let cum = s.next_seq();
        s.on_ack(t, &ack(cum, &[], t - 10 * ms));
        all.extend(pushed(&drain(&mut s, t)));
        t += 10 * ms;
    }
    assert_eq!(all, [5, 11, 17, 23, 24]);
}
