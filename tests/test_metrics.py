"""Every metric against values computed by hand."""

import math

import pytest
from conftest import resolved_for, synthetic_trace
from xferlab import metrics, registry


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
    m = metrics.compute(tr)
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
    m = metrics.compute(tr, window=[0.5, 1.5])
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
    m = metrics.compute(tr, window="all-active")
    assert m["window"]["kind"] == "all-active" and m["window"]["start_s"] == 1.0
    t0, t1 = m["transfers"]
    assert t0["mean_goodput_mbps"] == 200
    assert t1["mean_goodput_mbps"] == 200  # (100+50, 100+150)
    assert t1["std_goodput_mbps"] == 50
    assert m["jain_index_per_transfer"] == pytest.approx(1.0)
    assert m["flows"][2]["mean_goodput_mbps"] == 100


def test_an_empty_window_is_an_error():
    tr = synthetic_trace({0: [1, 1], 1: [1, 1]}, starts=[0.0, 2.0], ends=[1.0, 3.0])
    with pytest.raises(registry.MetricsError, match="never all active"):
        metrics.compute(tr, window="all-active")


def test_completion_and_deficiency_against_the_ideal():
    r = resolved_for(
        volume_bytes=100_000_000,
        transfers=[
            {"pair": 0, "streams": 1, "variant": "reno", "start_s": 0.0, "ideal_completion_s": 0.9},
            {"pair": 1, "streams": 1, "variant": "reno", "start_s": 0.0, "ideal_completion_s": 1.6},
        ],
    )
    tr = synthetic_trace(
        {0: [800, 800], 1: [400, 400, 400, 400]},
        ends=[1.0, 2.0],
        completion=[1.0, 2.0],
        volumes=[100_000_000, 100_000_000],
        resolved=r,
    )
    m = metrics.compute(tr)
    assert m["transfers"][0]["completion_deficiency"] == pytest.approx(1.0 / 0.9 - 1)
    c = m["completion"]
    assert c["mean_s"] == 1.5 and c["makespan_s"] == 2.0 and c["ideal_makespan_s"] == 1.6
    assert c["makespan_deficiency"] == pytest.approx(0.25)
    assert c["incomplete"] == 0


# ----------------------------------------------------------------------------- seed 004's table


def test_responsiveness_from_the_multiplicative_decrease():
    nan = math.nan
    # Reno halves at its events: half the rate after one round trip of congestion. (The
    # slow-start exit, ssthresh unknown before it, is not counted: its window is stale.)
    assert metrics.responsiveness_rtt([1000, 500, 600, 300], [nan, 500, 500, 300]) == pytest.approx(1.0)
    # β = 0.8 (BIC): ln ½ / ln 0.8 = 3.106 round trips of sustained congestion.
    assert metrics.responsiveness_rtt([100, 80, 90, 120, 96], [nan, 80, 80, 80, 96]) == pytest.approx(
        math.log(0.5) / math.log(0.8)
    )
    # ssthresh unknown (iperf3): the window's drop, 0.7.
    assert metrics.responsiveness_rtt([100, 70, 75], [nan, nan, nan]) == pytest.approx(math.log(0.5) / math.log(0.7))
    assert math.isnan(metrics.responsiveness_rtt([10, 20, 40], [nan, nan, nan]))  # no event


def test_aggressiveness_smoothness_convergence():
    # Samples one RTT apart: the largest rise in one round trip.
    assert metrics.aggressiveness([0, 0.01, 0.02], [10, 30, 35], 0.01) == 20
    # Samples ten RTTs apart: the mean rise per round trip.
    assert metrics.aggressiveness([0, 0.1], [0, 100], 0.01) == pytest.approx(10)
    assert metrics.smoothness([100, 60, 80, 20]) == 60
    assert metrics.convergence_rtt([0, 0.1, 0.2, 0.3], [10, 100, 700, 900], 0.0, 666.6, 0.1) == pytest.approx(2.0)
    assert math.isnan(metrics.convergence_rtt([0, 0.1], [10, 20], 0.0, 666.6, 0.1))


def test_average_responsiveness_is_when_the_aggregate_settles():
    x = [100, 500] + [1000] * 18  # mean 955: within 10 % from t = 0.2 s on
    t = [0.1 * k for k in range(20)]
    assert metrics.average_responsiveness(t, x, 0.0) == pytest.approx(0.1)


def test_delta_fair_convergence_and_loss_and_delay_at_the_bottleneck():
    # Pair 1 starts at 0.5 s; at 1.0 s both are within ±20 % of the fair share (520, 480 around 500).
    tr = synthetic_trace({0: [900, 700, 520, 500], 1: [0, 200, 480, 500]}, starts=[0.0, 0.5], link_mbps=[900, 900, 1000, 1000])
    m = metrics.compute(tr)
    assert m["delta_fair_convergence_s"] == pytest.approx(1.0)
    # 2 drops for 100 packets forwarded per interval; a queue of 10 packets at 1 Gbit/s.
    assert m["packet_loss_rate"] == pytest.approx(2 / 102)
    assert m["queueing_delay_ms"] == pytest.approx(10 * 1538 * 8 / 1e9 * 1e3)
    assert m["smoothness_mbps"] == 200  # flow 0: 900 → 700
    assert m["responsiveness_rtt"] is None and "no sender samples" in m["null_reasons"]["responsiveness_rtt"]


def test_reactivity_from_sender_samples():
    rows = []
    for k, (cw, ss) in enumerate([(10, None), (80, None), (700, None), (900, None), (460, 450), (500, 450), (250, 250)]):
        rows.append({"t": 0.1 * k, "flow_id": 0, "cwnd": cw, "ssthresh": ss, "srtt_ms": 10.0})
    tr = synthetic_trace({0: [100] * 7}, resolved=resolved_for(pairs=1, bdp_packets=833.3), tcp=rows)
    m = metrics.compute(tr)
    f = m["flows"][0]
    assert f["convergence_rtt"] == pytest.approx(20.0)  # 700 ≥ 0.8 × 833 at 0.2 s, RTT 10 ms
    assert f["responsiveness_rtt"] == pytest.approx(1.0)  # ssthresh 250 after a window of 500
    # x = cwnd·MSS·8/RTT: 10 → 80 segments in 0.1 s = 10 RTTs: 7 segments per RTT.
    assert f["aggressiveness_mbps"] == pytest.approx((700 - 80) * 1448 * 8 / 0.01 / 1e6 / 10)


def test_what_a_producer_cannot_know_is_null_with_its_reason():
    from xferlab.runinfo import Provenance
    from xferlab.trace import Trace

    tr = synthetic_trace({0: [100, 100], 1: [100, 100]}, link_mbps=[200, 200])
    prov = Provenance(producer="import", source="iperf3", unknown={"timeouts": "iperf3 does not report timeouts"})
    tr = Trace.build({n: tr.table(n) for n in ("flows", "goodput", "link", "tcp")}, tr.info, prov, end_s=1.0)
    m = metrics.compute(tr)
    assert m["timeouts"] is None and m["null_reasons"]["timeouts"] == "iperf3 does not report timeouts"
    assert m["retransmissions"] == 6  # known: 3 per flow
