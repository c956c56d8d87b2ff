"""Time dilation of the netns backend (no root needed): what K scales and what it leaves alone."""

import math

import pyarrow as pa
import pytest
from xferlab import scenario as sc
from xferlab.netns import scaling


def resolved(**topology):
    data = {
        "name": "s",
        "topology": {"pairs": 2, "access_rate": "1Gbps", "bottleneck_rate": "1Gbps", "rtt": "20ms", "buffer": "1.0bdp"},
        "workload": {"streams": 2, "duration": "10s", "stagger": "1s"},
        "protocol": {"variant": "reno", "rate_limit": "400Mbps", "limiter": "token_bucket"},
        "seed": 1,
    }
    data["topology"].update(topology)
    s = sc.from_dict(data)
    return sc.resolve(s)


@pytest.mark.parametrize(
    "x,want", [(0.3, 1), (1, 1), (1.1, 1.25), (2.4, 2.5), (2.6, 3), (7, 8), (9, 10), (25, 25), (26, 30), (101, 125)]
)
def test_nice_ceiling(x, want):
    assert scaling.nice_ceiling(x) == pytest.approx(want)


def test_auto_factor_fits_the_host():
    assert scaling.auto_factor(resolved(bottleneck_rate="300Mbps", access_rate="100Mbps")) == 1
    # 1 Gbit/s needs 2 to fit 500 Mbit/s; the senders' sum can be the limit instead.
    assert scaling.auto_factor(resolved()) == 2
    assert scaling.auto_factor(resolved(bottleneck_rate="600Mbps", access_rate="1Gbps")) == 1.25
    assert scaling.auto_factor(resolved(bottleneck_rate="10Gbps", access_rate="100Mbps")) == 1
    assert scaling.auto_factor(resolved(bottleneck_rate="10Gbps", access_rate="10Gbps")) == 20
    assert scaling.auto_factor(resolved(bottleneck_rate="10Gbps", access_rate="1Gbps")) == 4  # 2 × 1 Gbit/s


def test_scaling_preserves_packets_and_bytes_and_dilates_time():
    r = resolved()
    k = 4.0
    e = scaling.scale_resolved(r, k)
    assert e["bottleneck_rate_bps"] == r["bottleneck_rate_bps"] / k
    assert e["rtt_s"] == r["rtt_s"] * k
    # BDP in packets, buffer, MTU, flows: unchanged.
    assert e["bottleneck_rate_bps"] * e["rtt_s"] == pytest.approx(r["bottleneck_rate_bps"] * r["rtt_s"])
    assert e["buffer_packets"] == r["buffer_packets"] and e["mtu"] == r["mtu"]
    assert len(e["flows"]) == len(r["flows"])
    for a, b in zip(r["flows"], e["flows"], strict=True):
        assert b["start_s"] == pytest.approx(a["start_s"] * k) and b["duration_s"] == pytest.approx(a["duration_s"] * k)
        assert b["limiter"]["rate_bps"] == pytest.approx(a["limiter"]["rate_bps"] / k)
        # the token bucket's bytes per tick stay the same: same burst, k× longer tick at 1/k the rate
        assert b["limiter"]["burst_bytes"] == a["limiter"]["burst_bytes"]
        assert b["limiter"]["tick_s"] == pytest.approx(a["limiter"]["tick_s"] * k)
    assert e["pair_paths"][0]["rtt_s"] == pytest.approx(r["rtt_s"] * k)
    assert e["rto_min_s"] == pytest.approx(r["rto_min_s"] * k)
    assert e["goodput_interval_s"] == pytest.approx(r["goodput_interval_s"] * k)
    # the original is untouched
    assert r["rtt_s"] == pytest.approx(0.02)


def test_unscale_tables_returns_to_scenario_units():
    k = 2.5
    gp = pa.table(
        {
            "t": [0.0, 1.25],
            "flow_id": pa.array([0, 0], pa.uint32()),
            "bytes": pa.array([10, 20], pa.uint64()),
            "goodput_mbps": [4.0, 8.0],
        }
    )
    tcp = pa.table(
        {
            "t": [2.5],
            "flow_id": pa.array([0], pa.uint32()),
            "cwnd": pa.array([10], pa.uint32()),
            "srtt_ms": [50.0],
            "rto_ms": [250.0],
        }
    )
    out = scaling.unscale_tables({"goodput": gp, "tcp": tcp}, k)
    assert out["goodput"].column("t").to_pylist() == [0.0, 0.5]
    assert out["goodput"].column("goodput_mbps").to_pylist() == [10.0, 20.0]
    assert out["goodput"].column("bytes").to_pylist() == [10, 20]  # bytes are bytes
    assert out["tcp"].column("srtt_ms").to_pylist() == [20.0] and out["tcp"].column("cwnd").to_pylist() == [10]
    assert out["goodput"].schema == gp.schema
    assert math.isclose(out["tcp"].column("t")[0].as_py(), 1.0)
