"""Sizes and numbers that the whole project shares, each named once with its source."""

from __future__ import annotations

import math
from collections.abc import Mapping

#: Ethernet header (destination, source, EtherType): what a qdisc counts beyond the IP packet.
ETH_HEADER = 14
#: Frame check sequence, preamble + start-of-frame delimiter, inter-frame gap (IEEE 802.3).
ETH_FCS, ETH_PREAMBLE, ETH_IFG = 4, 8, 12
#: Wire bytes per frame beyond the IP packet: 14 + 4 + 8 + 12 (seed 001 §3.3, figure 7).
FRAME_OVERHEAD = ETH_HEADER + ETH_FCS + ETH_PREAMBLE + ETH_IFG
#: IPv4 + TCP headers without options, and the TCP timestamps option (RFC 7323) Linux uses.
IP_TCP_HEADERS = 40
TCP_TIMESTAMPS = 12
#: Ethernet's usual MTU.
DEFAULT_MTU = 1500
#: Linux's MSS over a 1500-byte MTU with timestamps: when a log does not say.
LINUX_MSS = DEFAULT_MTU - IP_TCP_HEADERS - TCP_TIMESTAMPS


def qdisc_frame(mtu: int) -> int:
    """Bytes a qdisc (HTB, TBF) counts for a full-size packet: IP + the Ethernet header."""
    return mtu + ETH_HEADER


def bdp_packets(rate_bps: float, rtt_s: float, mtu: int) -> float:
    """Bandwidth-delay product in MTU-size packets: C × RTT / (8 × MTU)."""
    return rate_bps * rtt_s / (8 * mtu)


def sock_buf_bytes(rate_bps: float, rtt_s: float, buffer_pkts: int, mtu: int, cap_pkts: int | None, mss: int) -> int:
    """The end hosts' socket buffer limit (``tcp_wmem[2]``, and ``tcp_rmem[2]`` without a
    window cap: rcv_buf_bytes): room for the path's BDP plus the bottleneck buffer, twice
    over (Linux counts skb overhead against the buffer), at least 4 MiB, or twice the
    scenario's window cap."""
    if cap_pkts is not None:
        return int(2 * cap_pkts * mss)
    bdp = rate_bps * rtt_s / 8
    return int(max(4 << 20, 4 * (math.ceil(bdp) + buffer_pkts * mtu)))


#: What a received full-size segment costs a Linux receive buffer beyond its payload (its
#: skb's truesize less the MSS), bytes: 2 288-byte skbs for 1 448 bytes on the emulation's
#: veths (offloads off), the scaling ratio 162/256 that tcp_probe showed on this host
#: (2026-12-01: a 1 MiB buffer offered 459 segments). The simulator's receiver models the
#: same (crates/sim/src/tcp/rwnd.rs, RX_SKB_OVERHEAD).
RX_SKB_OVERHEAD = 840
#: Linux's initial receive buffer (``tcp_rmem[1]``), bytes.
RMEM_DEFAULT = 131072


def rcv_buf_bytes(rate_bps: float, rtt_s: float, buffer_pkts: int, mtu: int, cap_pkts: int | None, mss: int) -> int:
    """The end hosts' receive buffer limit (``tcp_rmem[2]``): sock_buf_bytes, or under a
    window cap the buffer whose window Linux 6 offers is the cap. Linux offers
    ``buffer × scaling_ratio / 256`` (``tcp_win_from_space``, the ratio measured from the
    skbs received: MSS × 256 / truesize) and rewrites the window clamp from the buffer
    (``tcp_rcv_space_adjust``, and as read in 6.x on a change of ratio): a route's ``window``
    clamp did not hold on this host (6.18, netns: 52.9 Mbit/s where 512 KiB allowed 42), so
    the buffer is the bound: cap segments' payload at that ratio (two segments' room at
    least, what the simulator's receiver needs)."""
    if cap_pkts is None:
        return sock_buf_bytes(rate_bps, rtt_s, buffer_pkts, mtu, cap_pkts, mss)
    ratio = (mss << 8) // (mss + RX_SKB_OVERHEAD)
    return max(2 * mss, math.ceil(cap_pkts * mss * 256 / ratio))


def host_buffers(path: Mapping, rtt_s: float) -> tuple[int, int]:
    """The end hosts' send and receive buffer limits (sock_buf_bytes, rcv_buf_bytes) for a
    resolved scenario's path (``bottleneck_rate_bps``, ``buffer_packets``, ``mtu``,
    ``window_cap_packets``, ``mss``) whose longest round trip is ``rtt_s``: what every
    backend gives its hosts."""
    args = (path["bottleneck_rate_bps"], rtt_s, path["buffer_packets"], path["mtu"], path["window_cap_packets"], path["mss"])
    return sock_buf_bytes(*args), rcv_buf_bytes(*args)
