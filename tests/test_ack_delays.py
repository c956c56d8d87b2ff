"""benches/tcp_probes.py and ack_delays.py: the receivers' ACK delays and the flows' trains, from tcp_probe."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))

import ack_delays  # noqa: E402
import ftrace  # noqa: E402
import sched_waits  # noqa: E402
import tcp_probes  # noqa: E402

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
        (72556.316361, "127.0.0.1:41191", "127.0.0.1:35632", 3000, 0x3E8E1806),
        (72556.316370, "127.0.0.1:35632", "127.0.0.1:41191", 0, 0x7B66D599),
    ]


def _flow(sender: str, receiver: str, segments: int, gap_s: float, per_ack: int, delay_s: float, t0: float = 0.0):
    """Probes of one flow: a segment reaching the receiver every ``gap_s``, an ACK of every
    ``per_ack`` reaching the sender ``delay_s`` after the last of them (ISN 1 000)."""
    probes, isn = [], 1000
    for k in range(segments):
        probes.append((t0 + k * gap_s, receiver, sender, MSS, 0))
    for a in range(segments // per_ack):
        last = (a + 1) * per_ack - 1
        probes.append((t0 + last * gap_s + delay_s, sender, receiver, 0, isn + a * per_ack * MSS))
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


def test_a_run_keeps_its_ack_clocks_as_histograms():
    # Two flows in alternating trains of three segments; ACKs 100 µs after their last.
    a = _flow("10.1.0.1:1", "10.2.0.1:5201", 9_000, 2e-4, 3, 1e-4)
    b = _flow("10.1.1.1:1", "10.2.1.1:5202", 9_000, 2e-4, 3, 1e-4, t0=3e-4)
    got = tcp_probes.record(a + b, lost=0, skip_s=0.5)
    assert got["flows"] == 2 and got["segments_per_ack"] == 3.0 and got["trains"] == pytest.approx(3.0)
    # ACKs from 0.5 s on (the first flow's from its 833rd, the second's, 0.3 ms later,
    # from its 832nd) but each flow's last: 2 166 + 2 167.
    assert got["acks"] == 4_333
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
    # Two flows whose ACKs (three segments each) alternate: trains of three segments.
    a = _flow("10.1.0.1:1", "10.2.0.1:5201", 9_000, 2e-4, 3, 1e-4)
    b = _flow("10.1.1.1:1", "10.2.1.1:5202", 9_000, 2e-4, 3, 1e-4, t0=3e-4)
    assert tcp_probes.kernel_trains(a + b, skip_s=0.5) == pytest.approx(3.0)
    # One after the other (a whole flow, then the next): one train each.
    b_later = _flow("10.1.1.1:1", "10.2.1.1:5202", 9_000, 2e-4, 3, 1e-4, t0=2.0)
    assert tcp_probes.kernel_trains(a + b_later, skip_s=0.5) > 1_000


def test_the_simulator_s_trains_come_from_its_bottleneck_s_departures():
    # A lone flow is one train: every segment of its last 2 s (30 000 to 50 000 at 170 to
    # 280 Mbit/s, slow start's recovery in them). Four flows make many, each shorter.
    alone = ack_delays.fidelity.Case("cubic", 50, "0.2bdp", 1)
    four = ack_delays.fidelity.Case("cubic", 50, "0.2bdp", 4)
    whole = ack_delays.sim_trains(alone, 3.0, 1.0, seed=1, reads="uniform")
    assert 30_000 < whole < 50_000
    assert 1 < ack_delays.sim_trains(four, 3.0, 1.0, seed=1, reads="uniform") < whole / 10
