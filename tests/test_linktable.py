"""The link table a remote router's samples make, and the checks that say a run's figures
cannot be right (issue 48: a 200 Mbit/s link read at up to 872 Mbit/s, X above the physical
maximum, 536 retransmissions against 262 drops reported as nothing)."""

import pyarrow as pa
import pytest
from xferlab.backends import linktable, ssh
from xferlab.models import ideal_rates
from xferlab.trace import table

FRAME = 1514
RATE = 200e6
R_IP = ideal_rates(RATE, 1500, 52).r_ip_mbps  # 195.1 Mbit/s


def counters(t: float, rate_bps: float = RATE, drops: int = 0, qlen: int = 0) -> dict:
    """Cumulative counters of a queue sending full frames at ``rate_bps`` of wire (frame + 24) since 0."""
    packets = int(t * rate_bps / 8 / (FRAME + 24))
    return {"bytes": packets * FRAME, "packets": packets, "drops": drops, "qlen": qlen}


def irregular_samples() -> list[tuple[float, dict]]:
    """20 ms asked, taken like the shell sampler under load: late, bunched, a 180 ms gap, a
    tick stamped twice."""
    times = [0.0, 0.021, 0.039, 0.041, 0.080, 0.260, 0.262, 0.300, 0.3, 0.320, 0.345, 0.400]
    return [(t, {"bottleneck": counters(t, drops=int(t * 100))}) for t in times]


def test_resampled_rows_are_regular_keep_the_bytes_and_never_exceed_the_link():
    samples = irregular_samples()
    link = linktable.resampled(samples, ("bottleneck",), 0.02).to_pandas()
    assert link["t"].tolist() == pytest.approx([0.02 * k for k in range(20)])
    # Every row within the physical maximum (IP bytes of frames at 200 Mbit/s of wire): one
    # frame more or less per row (the counters' whole packets) is all the error.
    one_frame = 1500 * 8 / 0.02 / 1e6
    assert link["throughput_mbps"].max() <= R_IP + one_frame and link["throughput_mbps"].min() >= R_IP - one_frame
    last = counters(0.400)
    assert link["bytes"].sum() == last["bytes"] - 14 * last["packets"]  # IP bytes, every one kept
    assert link["drops"].sum() == 40 and link["losses"].isna().all()
    # Counters between consecutive samples (the netns backend's rows) leave the gap's nine
    # ticks without a row: a mean over rows would weigh its 180 ms as one interval.
    naive = linktable.link_table(samples, ("bottleneck",), 0.02, False).to_pandas()
    assert len(naive) == 8


def test_irregular_samples_are_said_and_regular_ones_are_not():
    r = linktable.sampling(irregular_samples(), "bottleneck", 0.02)
    assert r["max_ms"] == pytest.approx(180) and r["missed_share"] > 0.05
    said = linktable.plausibility(table("link", []), table("flows", []), {}, r)
    assert len(said) == 1 and "irregular (asked every 20 ms" in said[0] and "largest gap 180 ms" in said[0]
    regular = [(k * 0.02 + 0.0003 * (k % 3), {"bottleneck": counters(k * 0.02)}) for k in range(100)]
    r = linktable.sampling(regular, "bottleneck", 0.02)
    assert r["missed_share"] == 0 and linktable.plausibility(table("link", []), table("flows", []), {}, r) == []


def _flows(retransmissions: list[int | None]) -> pa.Table:
    rows = []
    for i, r in enumerate(retransmissions):
        rows.append({"flow_id": i, "pair": i, "stream": 0, "source": "s", "sink": "r", "variant": "reno", "role": "transfer",
                     "start": 0.0, "end": 10.0, "bytes": 1, "retransmissions": r})  # fmt: skip
    return table("flows", rows)


RESOLVED = {"bottleneck_rate_bps": RATE, "mtu": 1500, "header_bytes": 52, "link_interval_s": 0.02}


def test_a_throughput_above_the_link_s_physical_maximum_is_said():
    fast = [(k * 0.02, {"bottleneck": counters(k * 0.02, rate_bps=1.03 * RATE)}) for k in range(51)]
    link = linktable.resampled(fast, ("bottleneck",), 0.02)
    said = linktable.plausibility(link, _flows([0]), RESOLVED, None)
    assert len(said) == 1 and "above its physical maximum of 195.1" in said[0]
    right = linktable.resampled([(k * 0.02, {"bottleneck": counters(k * 0.02)}) for k in range(51)], ("bottleneck",), 0.02)
    assert linktable.plausibility(right, _flows([0]), RESOLVED, None) == []


def test_retransmissions_the_drops_do_not_explain_are_loss_elsewhere():
    samples = [(k * 0.02, {"bottleneck": counters(k * 0.02, drops=k * 262 // 50)}) for k in range(51)]
    link = linktable.resampled(samples, ("bottleneck",), 0.02)
    said = linktable.plausibility(link, _flows([300, 236]), RESOLVED, None)
    assert said == [
        "the senders retransmitted 536 segments, 274 more than the bottleneck's 262 drops: packets were lost "
        "elsewhere on the path (not measured), or retransmitted without being lost"
    ]
    assert linktable.plausibility(link, _flows([150, 120]), RESOLVED, None) == []  # 8 beyond: noise
    assert linktable.plausibility(link, _flows([300, None]), RESOLVED, None) == []  # unknown: nothing said


def test_the_calibration_s_goodput_is_the_best_second_of_full_intervals():
    """The iperf3 server's intervals of a 2 s transfer through a 200 Mbit/s shaper: slow start,
    then 191 Mbit/s, then its 30 ms tail, whose bytes were sent before the end and arrive
    bunched (the 339.7 Mbit/s the old calibration took as the path's rate)."""
    ivs = [
        {"sum": {"seconds": 0.25, "bytes": int(b / 8 * 0.25)}}
        for b in (40e6, 150e6, 191e6, 191.2e6, 190.8e6, 191e6, 191e6, 190.9e6)
    ]
    ivs.append({"sum": {"seconds": 0.03, "bytes": int(339.7e6 / 8 * 0.03)}})
    assert ssh.steady_goodput_bps(ivs, 1.0) / 1e6 == pytest.approx(191.0, abs=0.1)
    assert ssh.steady_goodput_bps(ivs[:2], 1.0) / 1e6 == pytest.approx(95, abs=0.1)  # shorter than the window: its whole
    assert ssh.steady_goodput_bps([], 1.0) == 0.0
