import math

import pytest
from xferlab import models


def test_ideal_rates_of_gigabit_ethernet_match_seed_001():
    # seed 001 §3.3: 984.40 / 975.30 / 949.29 Mbit/s. The seed rounds each step to two
    # decimals before the next, so the exact values differ by less than 0.01.
    r = models.ideal_rates(1e9, mtu=1500, header_bytes=40)
    assert r.r_eth_mbps == pytest.approx(984.40, abs=0.01)
    assert r.r_ip_mbps == pytest.approx(975.30, abs=0.01)
    assert r.r_tp_mbps == pytest.approx(949.29, abs=0.01)


def test_ideal_goodput_with_timestamps_is_the_941_of_seed_002():
    assert models.ideal_rates(1e9, header_bytes=52).r_tp_mbps == pytest.approx(941.48, abs=0.01)
    # Linear in the link rate; jumbo frames carry more payload per byte of overhead.
    assert models.ideal_rates(10e9, header_bytes=52).r_tp_mbps == pytest.approx(9414.8, abs=0.1)
    assert models.ideal_rates(1e9, mtu=9000, header_bytes=52).r_tp_mbps > 990


def test_altman_parallel_streams():
    # β = 0.5: x(1) = C(1 − 1/4); the deficiency 1/(1+3N) shrinks with N.
    assert models.altman_goodput(1, 10_000, 0.5) == pytest.approx(7500.0)
    assert models.altman_goodput(10, 10_000, 0.5) == pytest.approx(10_000 * (1 - 1 / 31))
    # BIC's β = 0.8: (1+β)/(1−β) = 9.
    assert models.altman_goodput(2, 1.0, 0.8) == pytest.approx(1 - 1 / 19)
    assert models.altman_goodput(0, 1.0) == 0.0


def test_mathis_formula():
    # MSS 1448 B, RTT 100 ms, p = 1e-4: (1448·8/0.1)·√1.5/0.01 = 14.19 Mbit/s.
    assert models.mathis_throughput(1448, 0.1, 1e-4) == pytest.approx(1448 * 8 / 0.1 * math.sqrt(1.5) / 0.01)
    assert models.mathis_throughput(1448, 0.1, 1e-4) / 1e6 == pytest.approx(14.19, abs=0.01)
    assert models.mathis_throughput(1448, 0.1, 0.0) == math.inf


def test_padhye_is_below_mathis_and_capped_by_the_window():
    m = models.mathis_throughput(1448, 0.1, 1e-2)
    p = models.padhye_throughput(1448, 0.1, 1e-2, b=1)
    assert p < m
    assert models.padhye_throughput(1448, 0.1, 1e-8, wmax_pkts=100) == pytest.approx(100 * 1448 * 8 / 0.1)


def test_ideal_completion_of_seed_001_makespan():
    # seed 001: 15 GB and 30 GB together over 1 GbE, r_TP = 949.29 Mbit/s → 388.33 s.
    # The seed's GB is 1024 MB of 10^6 bytes (46 080 MB in all gives exactly its figure).
    r_tp = 949.29e6
    v = [15 * 1024e6, 30 * 1024e6]
    t = models.ideal_completion_times(v, [0.0, 0.0], access_bps=r_tp, bottleneck_bps=r_tp)
    assert max(t) == pytest.approx(388.33, abs=0.01)
    # Max-min sharing: the small one finishes first, at twice its volume over the rate.
    assert t[0] == pytest.approx(2 * v[0] * 8 / r_tp)


def test_ideal_completion_with_access_caps_and_staggered_releases():
    # Two 1 Gbit/s senders into 10 Gbit/s: each runs at its access rate.
    t = models.ideal_completion_times([1e9, 1e9], [0.0, 5.0], access_bps=1e9, bottleneck_bps=10e9)
    assert t == pytest.approx([8.0, 8.0])
    # Three senders into 2 Gbit/s, the third released at 4 s: 1 Gbit/s each until then
    # (half of the first two done), then 2/3 Gbit/s each: all three need 6 s more.
    t = models.ideal_completion_times([1e9, 1e9, 0.5e9], [0.0, 0.0, 4.0], access_bps=1e9, bottleneck_bps=2e9)
    assert t == pytest.approx([10.0, 10.0, 6.0])
