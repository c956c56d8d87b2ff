"""xferlab.netns.tcp_probes and benches/ack_delays.py: the receivers' ACK delays and the flows' trains, from tcp_probe."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from xferlab.fidelity.matrix import Case
from xferlab.netns import ftrace, sched_waits, tcp_probes

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))

import ack_delays  # noqa: E402

MSS = 1448

# Two lines of this kernel's tcp_probe (6.18, loopback): 3 000 bytes reaching a receiver,
# then its peer's ACK reaching the sender (snd_una is the socket's before the segment).
LINES = """\
           <...>-9545    [001] ..s2. 72556.316361: tcp_probe: family=AF_INET src=127.0.0.1:41191 \
dest=127.0.0.1:35632 mark=0x0 data_len=3000 snd_nxt=0x3e8e1806 snd_una=0x3e8e1806 snd_cwnd=10 \
ssthresh=2147483647 snd_wnd=65536 srtt=27 rcv_wnd=65483 sock_cookie=2107 skbaddr=00000000dac4d902 skaddr=0000000075e1be20
           <...>-9545    [001] ..... 72556.316370: tcp_probe: family=AF_INET src=127.0.0.1:35632 \
dest=127.0.0.1:41191 mark=0x0 data_len=0 snd_nxt=0x7b66e151 snd_una=0x7b66d599 snd_cwnd=10 \
ssthresh=2147483647 snd_wnd=65483 srtt=44 rcv_wnd=65536 sock_cookie=2108 skbaddr=0000000066f3051e skaddr=000000002fb6b88e
# tracer: nop
"""


def test_tcp_probe_lines_are_read():
    assert tcp_probes.parse(LINES) == [
        (72556.316361, "127.0.0.1:41191", "127.0.0.1:35632", 3000, 0x3E8E1806, 0x3E8E1806),
        (72556.316370, "127.0.0.1:35632", "127.0.0.1:41191", 0, 0x7B66D599, 0x7B66E151),
    ]


def _flow(sender: str, receiver: str, segments: int, gap_s: float, per_ack: int, delay_s: float, t0: float = 0.0, burst: int = 0):
    """Probes of one flow: a segment reaching the receiver every ``gap_s`` (or, with
    ``burst``, bursts of that many, each followed by as long a pause), an ACK of every
    ``per_ack`` reaching the sender ``delay_s`` after the last of them (ISN 1 000; the
    sender 100 segments ahead)."""
    at = [t0 + gap_s * (k + (k // burst * burst if burst else 0)) for k in range(segments)]
    probes, isn = [(t, receiver, sender, MSS, 0, 0) for t in at], 1000
    for a in range(segments // per_ack):
        una = isn + a * per_ack * MSS
        probes.append((at[(a + 1) * per_ack - 1] + delay_s, sender, receiver, 0, una, una + 100 * MSS))
    return probes


def test_each_in_order_ack_is_timed_from_the_first_segment_it_acknowledges():
    # Segments 0.1 ms apart, an ACK per two 50 µs after the second: 150 µs after the first.
    # iperf3's control connection (a few segments) is not a flow.
    probes = _flow("10.1.0.1:40000", "10.2.0.1:5201", 30_000, 1e-4, 2, 5e-5)
    probes += _flow("10.1.0.1:39999", "10.2.0.1:5201", 4, 1e-3, 2, 1e-4)
    got = tcp_probes.ack_delays(probes, skip_s=2.0)
    assert list(got) == [("10.1.0.1:40000", "10.2.0.1:5201")]
    d = got[("10.1.0.1:40000", "10.2.0.1:5201")]
    # ACKs after 2 s but the last (whose own number no later ACK tells): 3 000 − 1.
    assert len(d.first) == 4_999 and (d.segments == 2).all()
    assert d.first == pytest.approx(1.5e-4, abs=1e-9)
    # From the segment that triggered it, the ACK's own path: 50 µs.
    assert d.last == pytest.approx(5e-5, abs=1e-9)


def _receiver_acks(order: list[int], gap_s: float, delay_s: float, sender: str, receiver: str) -> list:
    """Probes of a flow whose segments (numbered) reach the receiver in ``order``, one every
    ``gap_s``: the receiver acknowledges every second in-order segment, a segment past a
    hole at once (a duplicate ACK), and a filled hole at once; each ACK reaches the sender
    ``delay_s`` later (ISN 0; the sender 100 segments past the last arrival)."""
    probes, have, rcv_nxt, acked, una = [], set(), 0, 0, 0
    for j, k in enumerate(order):
        t = j * gap_s
        probes.append((t, receiver, sender, MSS, 0, 0))
        have.add(k)
        before = rcv_nxt
        while rcv_nxt in have:
            rcv_nxt += 1
        if rcv_nxt == before or rcv_nxt - before > 1 or rcv_nxt - acked >= 2:
            probes.append((t + delay_s, sender, receiver, 0, una * MSS, (j + 100) * MSS))
            una = acked = rcv_nxt
    return probes


def test_acks_while_the_receiver_holds_data_past_a_hole_are_left_out():
    # Segments 20 000 and 20 050 lost; the other 98 of that hundred arrive past the hole (a
    # duplicate ACK each), then the two retransmissions: a partial ACK up to 20 050 — the
    # receiver had counted 20 050 segments' bytes when segment 20 051 arrived, 5 ms before —
    # then one of all. tcp_probe's data carry no sequence number: that ACK must not be timed.
    order = [k for k in range(30_000) if k not in (20_000, 20_050)]
    i = order.index(20_099) + 1
    order[i:i] = [20_000, 20_050]
    # Later, segment 25 000 reaches it twice (a spurious retransmission): its count of bytes
    # stays a segment ahead of its sequence from then on.
    order.insert(order.index(25_010) + 1, 25_000)
    got = tcp_probes.ack_delays(_receiver_acks(order, 1e-4, 5e-5, "10.1.0.1:1", "10.2.0.1:5201"), skip_s=1.0)
    d = got[("10.1.0.1:1", "10.2.0.1:5201")]
    assert d.last == pytest.approx(5e-5, abs=1e-9)
    assert d.first[d.segments == 2] == pytest.approx(1.5e-4, abs=1e-9) and d.twice == MSS
    # Left out, and nothing else: the two ACKs of the retransmissions and those from 20 100
    # until the sender's snd_nxt at the last duplicate ACK (segment 20 197): 2 + 49.
    assert d.out_of_order == 51 and d.advancing == len(d.last) + 51 > 9_900
    # All ACKs together acknowledge every segment from the first ACK after 1 s to the last
    # (the last ACK's own number is not seen: tcp_probe reads the socket before an ACK).
    assert d.acknowledged == pytest.approx(d.segments.sum() * MSS, rel=0.02)


def test_a_run_keeps_its_ack_clocks_as_histograms():
    # Two flows whose segments alternate; ACKs of three, 100 µs after their last.
    a = _flow("10.1.0.1:1", "10.2.0.1:5201", 9_000, 2e-4, 3, 1e-4)
    b = _flow("10.1.1.1:1", "10.2.1.1:5202", 9_000, 2e-4, 3, 1e-4, t0=1e-4)
    got = tcp_probes.record(a + b, lost=0, skip_s=0.5)
    assert got["flows"] == 2 and got["segments_per_ack"] == 3.0 and got["trains"] == pytest.approx(1.0)
    assert got["in_recovery"] == 0.0 and got["twice"] == 0.0
    assert got["acknowledged"] == pytest.approx(got["acks"] * 3, abs=6)
    # ACKs from 0.5 s on (each flow's from its 834th) but each flow's last: 2 × 2 166.
    assert got["acks"] == 4_332
    median = lambda h: sched_waits.hist_quantiles(np.asarray(h), np.array([0.5]))[0]  # noqa: E731
    # Read back within a bin's 12 %: 100 µs from the last, 500 µs from the first.
    assert median(got["from_last"]) == pytest.approx(1e-4, rel=0.12)
    assert median(got["from_first"]) == pytest.approx(5e-4, rel=0.12)
    assert tcp_probes.record([], lost=0) is None
    # Events overwritten: what is left no longer lines up, so nothing but the loss is kept.
    assert tcp_probes.record(a + b, lost=10, skip_s=0.5) == {"flows": 2, "lost": 10}


def test_a_tracer_that_cannot_start_says_why_and_the_run_goes_on(tmp_path):
    ran = False
    with ftrace.recording(tmp_path / "absent" / "xferlab-test", ("tcp/tcp_probe",), 1024) as got:
        ran = True
    assert ran and isinstance(got["error"], OSError) and "trace" not in got


def test_trains_are_the_segment_weighted_run_lengths_of_one_flow():
    assert tcp_probes.train_length(list("aabaaa"), [1.0] * 6) == pytest.approx((4 + 1 + 9) / 6)
    # Two flows whose segments reach their receivers in alternating bursts of five (ACKs of
    # two): trains of five segments, whatever the ACKs.
    a = _flow("10.1.0.1:1", "10.2.0.1:5201", 9_000, 1e-4, 2, 1e-4, burst=5)
    b = _flow("10.1.1.1:1", "10.2.1.1:5202", 9_000, 1e-4, 2, 1e-4, t0=5e-4, burst=5)
    assert tcp_probes.kernel_trains(a + b, skip_s=0.5) == pytest.approx(5.0)
    # One after the other (a whole flow, then the next): one train each.
    b_later = _flow("10.1.1.1:1", "10.2.1.1:5202", 9_000, 2e-4, 3, 1e-4, t0=2.0)
    assert tcp_probes.kernel_trains(a + b_later, skip_s=0.5) > 1_000


def test_the_simulator_s_trains_come_from_its_bottleneck_s_departures():
    # A lone flow is one train: every segment of its last 2 s (20 000 to 50 000 at 120 to
    # 280 Mbit/s, slow start's recovery in them: 24 400 with TSO deferral, over 30 000
    # without). Four flows make many, each shorter.
    alone = Case("cubic", 50, "0.2bdp", 1)
    four = Case("cubic", 50, "0.2bdp", 4)
    whole = ack_delays.sim_trains(alone, 3.0, 1.0, seed=1, reads="uniform")
    assert 20_000 < whole < 50_000
    assert 1 < ack_delays.sim_trains(four, 3.0, 1.0, seed=1, reads="uniform") < whole / 10


def test_runs_without_whole_ack_clocks_are_said_so():
    # 2026-12-01b's records predate the in-order rule (no in_recovery): nothing to show.
    got = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benches" / "ack_delays.py"),
            "--runs",
            str(ROOT / "benches/fidelity-runs/2026-12-01b.json.gz"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 1 and "no ACK clocks to show" in got.stderr and "Traceback" not in got.stderr
