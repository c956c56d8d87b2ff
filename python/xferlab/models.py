"""Analytic models beside the measurements: ideal rates, Altman, Mathis, Padhye.

Each formula is written once, here, with its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class IdealRates:
    """Rates of an ideal transport over an Ethernet link (seed 001 §3.3), in Mbit/s."""

    r_ethb_mbps: float  # the Ethernet bit rate
    r_eth_mbps: float  # frames without FCS, preamble and IFG
    r_ip_mbps: float  # IP packets (Ethernet payload)
    r_tp_mbps: float  # transport payload: the ideal goodput


def ideal_rates(
    link_rate_bps: float,
    mtu: int = 1500,
    header_bytes: int = 40,
    l2_header: int = 14,
    fcs: int = 4,
    preamble: int = 8,
    ifg: int = 12,
) -> IdealRates:
    """seed 001 §3.3: r_Eth = F/(F+FCS+preamble+IFG)·r_EthB with F = MTU + 14;
    r_IP = MTU/F·r_Eth; r_TP = (MTU − headers)/MTU·r_IP.

    For 1 GbE, MTU 1500 and 40 bytes of IP+TCP headers: 984.40 / 975.29 / 949.28 Mbit/s
    (the seed prints 975.30 and 949.29, having rounded each step to two decimals). With
    TCP timestamps (``header_bytes=52``) r_TP is 941.48 Mbit/s, the "maximal goodput
    achievable (941 Mbps)" of seed 002.
    """
    frame = mtu + l2_header
    wire = frame + fcs + preamble + ifg
    r_ethb = link_rate_bps / 1e6
    r_eth = r_ethb * frame / wire
    r_ip = r_eth * mtu / frame
    r_tp = r_ip * (mtu - header_bytes) / mtu
    return IdealRates(r_ethb, r_eth, r_ip, r_tp)


def altman_goodput(n_streams: int | float, capacity: float, beta: float = 0.5) -> float:
    """Altman et al. (INFOCOM 2006), as used in seed 002 §IV-A: mean throughput of N
    parallel AIMD streams sharing a link of capacity C with multiplicative decrease β,
    x(N) = C·(1 − 1/(1 + N·(1+β)/(1−β))). Same unit as ``capacity``."""
    if n_streams <= 0:
        return 0.0
    return capacity * (1.0 - 1.0 / (1.0 + n_streams * (1.0 + beta) / (1.0 - beta)))


def mathis_throughput(mss_bytes: float, rtt_s: float, loss_rate: float, c: float = math.sqrt(1.5)) -> float:
    """Mathis, Semke, Mahdavi, Ott (CCR 1997): steady-state Reno throughput with random
    loss p, B = (MSS/RTT)·C/√p with C = √(3/2) (periodic losses, no delayed ACKs).
    Returns bit/s."""
    if loss_rate <= 0:
        return math.inf
    return 8.0 * mss_bytes / rtt_s * c / math.sqrt(loss_rate)


def padhye_throughput(
    mss_bytes: float, rtt_s: float, loss_rate: float, rto_s: float = 0.2, b: int = 2, wmax_pkts: float = math.inf
) -> float:
    """Padhye, Firoiu, Towsley, Kurose (SIGCOMM 1998), the "full model" approximation:
    B = min(Wmax/RTT, 1 / (RTT·√(2bp/3) + T0·min(1, 3·√(3bp/8))·p·(1 + 32p²))) packets/s,
    with b packets acknowledged per ACK. Returns bit/s."""
    if loss_rate <= 0:
        return 8.0 * mss_bytes * wmax_pkts / rtt_s
    p = loss_rate
    denom = rtt_s * math.sqrt(2 * b * p / 3) + rto_s * min(1.0, 3 * math.sqrt(3 * b * p / 8)) * p * (1 + 32 * p * p)
    return 8.0 * mss_bytes * min(wmax_pkts / rtt_s, 1.0 / denom)


def ideal_completion_times(volumes_bytes: list[float], releases_s: list[float], access_bps, bottleneck_bps: float) -> list[float]:
    """Completion times (from release) of transfers moved by the ideal transport of seed
    001 §3.3: perfect max-min fair sharing of the bottleneck, each transfer capped by its
    access link, no slow start, no loss. Rates are transport-level (r_TP) in bit/s;
    ``access_bps`` is one cap for all or one per transfer.

    A fluid model, stepped from event to event (a release or a completion).
    """
    n = len(volumes_bytes)
    caps = list(access_bps) if isinstance(access_bps, (list, tuple)) else [access_bps] * n
    left = [8.0 * v for v in volumes_bytes]
    done = [math.nan] * n
    t = min(releases_s) if n else 0.0
    while any(math.isnan(d) for d in done):
        active = [i for i in range(n) if math.isnan(done[i]) and releases_s[i] <= t + 1e-12]
        pending = [releases_s[i] for i in range(n) if math.isnan(done[i]) and releases_s[i] > t + 1e-12]
        if not active:
            t = min(pending)
            continue
        rate = _max_min_rates([caps[i] for i in active], bottleneck_bps)
        step = min(left[i] / r for i, r in zip(active, rate, strict=True))
        if pending:
            step = min(step, min(pending) - t)
        for i, r in zip(active, rate, strict=True):
            left[i] -= r * step
        t += step
        for i in active:
            if left[i] <= 1e-6 * 8.0 * max(volumes_bytes[i], 1):
                done[i] = t - releases_s[i]
    return done


def _max_min_rates(caps: list[float], capacity: float) -> list[float]:
    """Max-min fair shares of ``capacity`` among demands capped at ``caps`` (water-filling)."""
    rates = [0.0] * len(caps)
    order = sorted(range(len(caps)), key=lambda i: caps[i])
    left, n = capacity, len(caps)
    for k, i in enumerate(order):
        share = left / (n - k)
        rates[i] = min(caps[i], share)
        left -= rates[i]
    return rates
