"""Every metric against values computed by hand."""

import math

import pytest
from conftest import resolved_for, synthetic_trace
from xferlab import metrics


def test_mean_std_cov_population_form():
    g = [100, 200, 300, 400]
    assert metrics.mean(g) == 250
    assert metrics.std(g) == pytest.approx(math.sqrt(12500))  # (150² + 50² + 50² + 150²)/4
    assert metrics.cov(g) == pytest.approx(math.sqrt(12500) / 250)
    assert math.isnan(metrics.mean([]))


def test_jain_index():
    assert metrics.jain_index([5, 5, 5, 5]) == pytest.approx(1.0)
    assert metrics.jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert metrics.jain_index([250, 100]) == pytest.approx(350**2 / (2 * (250**2 + 100**2)))


def test_goodput_distribution_bins_of_one_percent_of_c():
    p = metrics.goodput_distribution([5, 105, 109.9, 941, 1000, 1200], capacity_mbps=1000)
    assert p.sum() == pytest.approx(1.0)
    assert p[0] == pytest.approx(1 / 6)  # 5 Mbit/s < 10 Mbit/s
    assert p[10] == pytest.approx(2 / 6)  # 105 and 109.9
    assert p[94] == pytest.approx(1 / 6)
    assert p[100] == pytest.approx(2 / 6)  # at or above c


def test_completion_stats():
    s = metrics.completion_stats([10, 20, 30, 40, None])
    assert s["count"] == 4
    assert s["mean_s"] == 25
    assert s["std_s"] == pytest.approx(math.sqrt(125))
    assert s["p50_s"] == 25
    assert s["p75_s"] == pytest.approx(32.5)
    assert s["p99_s"] == pytest.approx(39.7)
    assert s["jain_index"] == pytest.approx(100**2 / (4 * (100 + 400 + 900 + 1600)))
    assert metrics.deficiency(404.0, 400.0) == pytest.approx(0.01)


def test_compute_on_a_synthetic_trace():
    tr = synthetic_trace({0: [100, 200, 300, 400], 1: [100, 100, 100, 100]}, link_mbps=[220, 310, 420, 530])
    m = metrics.compute(tr, resolved_for())
    f0, f1 = m["flows"]
    assert f0["mean_goodput_mbps"] == 250 and f1["mean_goodput_mbps"] == 100
    assert f0["std_goodput_mbps"] == pytest.approx(math.sqrt(12500))
    assert f1["cov"] == 0
    assert m["aggregate_goodput_mbps"] == 350  # G(t) = 200, 300, 400, 500
    assert m["aggregate_goodput_std_mbps"] == pytest.approx(math.sqrt(12500))
    assert m["aggregate_throughput_mbps"] == pytest.approx(370)
    assert m["goodput_over_throughput"] == pytest.approx(350 / 370)
    assert m["efficiency"] == pytest.approx(0.35)  # G / C with C = 1000 Mbit/s
    assert m["deficiency"] == pytest.approx(1 - 350 / 941.48)
    assert m["jain_index"] == pytest.approx(350**2 / (2 * (250**2 + 100**2)))
    assert m["retransmissions"] == 6 and m["bottleneck_drops"] == 8
    dist = m["goodput_distribution"]["flows"]
    assert dist[0][10] == dist[0][20] == dist[0][30] == dist[0][40] == 0.25
    assert dist[1][10] == 1.0
    for key in (
        "aggregate_goodput_mbps",
        "flows",
        "transfers",
        "jain_index",
        "jain_index_per_transfer",
        "retransmissions",
        "bottleneck_drops",
        "ideal_goodput_mbps",
        "efficiency",
        "window",
    ):
        assert key in m


def test_window_restricts_every_metric():
    tr = synthetic_trace({0: [100, 200, 300, 400], 1: [100, 100, 100, 100]}, link_mbps=[220, 310, 420, 530])
    m = metrics.compute(tr, resolved_for(), window=[0.5, 1.5])
    assert m["window"] == {"start_s": 0.5, "end_s": 1.5, "kind": "custom"}
    assert m["flows"][0]["mean_goodput_mbps"] == 250  # samples 200, 300
    assert m["flows"][0]["std_goodput_mbps"] == 50
    assert m["aggregate_goodput_mbps"] == 350  # 300, 400
    assert m["aggregate_throughput_mbps"] == pytest.approx(365)  # 310, 420


def test_all_active_window_and_transfers_sum_their_streams():
    # Flow 2 (pair 1, like flow 1) starts at 1 s: all three are active in [1, 2].
    tr = synthetic_trace(
        {0: [100, 100, 200, 200], 1: [300, 300, 100, 100], 2: [0, 0, 50, 150]},
        starts=[0.0, 0.0, 1.0],
        pairs=[0, 1, 1],
        link_mbps=[0, 0, 0, 0],
    )
    m = metrics.compute(tr, resolved_for(), window="all-active")
    assert m["window"]["kind"] == "all-active" and m["window"]["start_s"] == 1.0
    t0, t1 = m["transfers"]
    assert t0["mean_goodput_mbps"] == 200
    assert t1["mean_goodput_mbps"] == 200  # (100+50, 100+150)
    assert t1["std_goodput_mbps"] == 50
    assert m["jain_index_per_transfer"] == pytest.approx(1.0)
    assert m["flows"][2]["mean_goodput_mbps"] == 100


def test_an_empty_window_is_an_error():
    tr = synthetic_trace({0: [1, 1], 1: [1, 1]}, starts=[0.0, 2.0], ends=[1.0, 3.0])
    with pytest.raises(metrics.MetricsError, match="never all active"):
        metrics.compute(tr, resolved_for(), window="all-active")


def test_completion_and_deficiency_against_the_ideal():
    tr = synthetic_trace(
        {0: [800, 800], 1: [400, 400, 400, 400]}, ends=[1.0, 2.0], completion=[1.0, 2.0], volumes=[100_000_000, 100_000_000]
    )
    r = resolved_for(
        volume_bytes=100_000_000,
        transfers=[
            {"pair": 0, "start_s": 0.0, "ideal_completion_s": 0.9},
            {"pair": 1, "start_s": 0.0, "ideal_completion_s": 1.6},
        ],
    )
    m = metrics.compute(tr, r)
    assert m["transfers"][0]["completion_deficiency"] == pytest.approx(1.0 / 0.9 - 1)
    c = m["completion"]
    assert c["mean_s"] == 1.5 and c["makespan_s"] == 2.0 and c["ideal_makespan_s"] == 1.6
    assert c["makespan_deficiency"] == pytest.approx(0.25)
    assert c["incomplete"] == 0
