"""The Trace's link table from a sampler's counters, and what says the samples can be trusted.

A sampler reads a bottleneck queue's cumulative counters (bytes and packets sent, drops, the
queue's length) at ticks of the link interval. Two ways to make rows of them:

* :func:`link_table` (the netns backend, whose sampler runs on this host): counters between
  consecutive samples, at the earlier one's tick.
* :func:`resampled` (the ssh backend, whose sampler runs on a remote router and is stamped
  there): the cumulative counters interpolated at the ticks of a regular grid, so every row
  spans exactly one interval, totals are kept, and a late or missed sample spreads its bytes
  over the time it covers instead of making a row whose short span reads as a rate above the
  link's.

:func:`sampling` says how regular the samples were; :func:`plausibility` what in a run's
figures cannot be right (a throughput above the link's, samples too irregular to resolve the
interval asked, retransmissions the bottleneck's drops do not explain).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import constants
from ..models import ideal_rates
from ..trace import table

#: A gap between samples longer than this many intervals is a missed tick.
MISSED = 1.5
#: Samples are irregular when more than this share of their gaps are missed ticks, or one gap
#: is longer than :data:`LONGEST` intervals.
IRREGULAR_SHARE = 0.05
LONGEST = 10
#: The bottleneck's throughput X may exceed its physical maximum (r_IP) by this much before
#: it is called implausible (the stamps' spread, HTB's burst at the start of a row).
X_SLACK = 0.02
#: Retransmissions beyond the bottleneck's drops, as a share of the drops (and at least
#: :data:`EXCESS_MIN` segments), that say loss elsewhere on the path.
EXCESS_SHARE = 0.2
EXCESS_MIN = 20
#: u32 counters of a qdisc (packets, drops) wrap at this.
WRAP = 2**32


def link_table(samples: list[tuple[float, dict]], links: tuple[str, ...], interval: float, random_loss: bool) -> pa.Table:
    """The Trace's link table from the sampler's ``samples`` ((time, {link: counters})):
    counters between consecutive samples, at t = the earlier sample's tick. A sample the
    starved sampler took late, off its ticks, starts no row of its own when it rounds to
    the next row's tick: that row then spans both intervals, so that no two rows share a
    time and none covers a sliver of one (whose few packets would read as a rate above
    the link's)."""
    rows = []
    for name in links:
        prev, last = None, None  # last: this link's last row (its tick, its first sample)
        for t, stats in samples:
            q = stats.get(name)
            if q is None:
                continue
            if prev is not None:
                tick = round(prev[0] / interval)
                start = prev
                if last is not None and last[0] == tick:
                    rows.pop()  # the last row is at this tick too: one row spans both
                    start = last[1]
                last = (tick, start)
                rows.append(_link_row(name, tick * interval, start, (t, q), random_loss))
            prev = (t, q)
    return table("link", rows)


def _link_row(name: str, tick: float, start: tuple[float, dict], end: tuple[float, dict], random_loss: bool) -> dict:
    """One row of the link table: the qdisc's counters from ``start`` to ``end`` ((time, counters))."""
    (t0, q0), (t1, q1) = start, end
    packets = max(0, q1["packets"] - q0["packets"])
    # qdiscs count frames (IP + 14 bytes of Ethernet header); the Trace counts IP bytes.
    ip_bytes = max(0, q1["bytes"] - q0["bytes"] - constants.ETH_HEADER * packets)
    return {
        "t": tick,
        "link": name,
        "bytes": ip_bytes,
        "packets": packets,
        "throughput_mbps": ip_bytes * 8 / max(t1 - t0, 1e-9) / 1e6,
        "drops": max(0, q1["drops"] - q0["drops"]),
        "losses": None if random_loss else 0,
        "queue_pkts": int(q0.get("qlen", 0)),
        "queue_max_pkts": None,
    }


def _series(samples: list[tuple[float, dict]], name: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One link's samples in time order (strictly increasing stamps), its cumulative counters
    unwrapped (u32 packets and drops), frames' bytes turned into IP bytes."""
    ts, rows, last = [], [], -math.inf
    for t, stats in sorted(((t, s) for t, s in samples if name in s), key=lambda x: x[0]):
        if t > last:
            ts.append(t)
            rows.append(stats[name])
            last = t
    out = {}
    for key in ("packets", "drops", "bytes"):
        v = np.array([float(r[key]) for r in rows])
        if key != "bytes" and len(v) > 1:
            v = v + WRAP * np.concatenate([[0], np.cumsum(np.diff(v) < 0)])
        out[key] = v
    out["bytes"] = out["bytes"] - constants.ETH_HEADER * out["packets"]
    out["qlen"] = np.array([float(r.get("qlen", 0)) for r in rows])
    return np.array(ts), out


def resampled(samples: list[tuple[float, dict]], links: tuple[str, ...], interval: float, losses=None) -> pa.Table:
    """The link table on a regular grid: the cumulative counters interpolated at each tick k ×
    ``interval`` between the first and the last sample, one row per interval (its queue: the
    last sample at or before its start). ``losses``: the rows' random losses (None: unknown)."""
    rows = []
    for name in links:
        ts, c = _series(samples, name)
        if len(ts) < 2:
            continue
        grid = np.arange(math.ceil(ts[0] / interval - 1e-9), math.floor(ts[-1] / interval + 1e-9) + 1) * interval
        if len(grid) < 2:
            continue
        at = {k: np.round(np.interp(grid, ts, c[k])) for k in ("bytes", "packets", "drops")}
        queue = c["qlen"][np.clip(np.searchsorted(ts, grid, side="right") - 1, 0, len(ts) - 1)]
        for i in range(len(grid) - 1):
            ip_bytes = max(0, int(at["bytes"][i + 1] - at["bytes"][i]))
            rows.append(
                {
                    "t": float(grid[i]),
                    "link": name,
                    "bytes": ip_bytes,
                    "packets": max(0, int(at["packets"][i + 1] - at["packets"][i])),
                    "throughput_mbps": ip_bytes * 8 / interval / 1e6,
                    "drops": max(0, int(at["drops"][i + 1] - at["drops"][i])),
                    "losses": losses,
                    "queue_pkts": int(queue[i]),
                    "queue_max_pkts": None,
                }
            )
    return table("link", rows)


def sampling(samples: list[tuple[float, dict]], name: str, interval: float) -> dict | None:
    """How regular one link's samples were: the interval asked, the gaps' mean, 99th
    percentile and largest (ms), the share of missed ticks; None with fewer than two samples."""
    ts, _ = _series(samples, name)
    if len(ts) < 2:
        return None
    gaps = np.diff(ts)
    return {
        "asked_ms": interval * 1e3,
        "samples": int(len(ts)),
        "mean_ms": float(gaps.mean() * 1e3),
        "p99_ms": float(np.percentile(gaps, 99) * 1e3),
        "max_ms": float(gaps.max() * 1e3),
        "missed_share": float((gaps > MISSED * interval).mean()),
    }


def plausibility(link: pa.Table, flows: pa.Table, resolved: dict, regularity: dict | None) -> list[str]:
    """What in a run's figures cannot be right, one sentence each (empty: nothing found)."""
    out = []
    if regularity and (regularity["missed_share"] > IRREGULAR_SHARE or regularity["max_ms"] > LONGEST * regularity["asked_ms"]):
        r = regularity
        out.append(
            f"the bottleneck's samples were irregular (asked every {r['asked_ms']:g} ms: mean {r['mean_ms']:.1f} ms, "
            f"largest gap {r['max_ms']:.0f} ms, {r['missed_share']:.0%} of ticks missed): the link table is resampled "
            "from them, but variations shorter than the gaps are lost"
        )
    rows = link.filter(pc.equal(link["link"], "bottleneck")) if link.num_rows else link
    if rows.num_rows and resolved.get("bottleneck_rate_bps"):
        rate = (resolved.get("shaper") or {}).get("rate_bps") or resolved["bottleneck_rate_bps"]
        r_ip = ideal_rates(rate, resolved["mtu"], resolved["header_bytes"]).r_ip_mbps
        seconds = rows.num_rows * (resolved.get("link_interval_s") or 1.0)
        x = sum(rows["bytes"].to_pylist()) * 8 / seconds / 1e6
        if x > r_ip * (1 + X_SLACK):
            out.append(
                f"the bottleneck carried {x:.1f} Mbit/s of IP packets on average, above its physical maximum of "
                f"{r_ip:.1f} (r_IP at {rate / 1e6:g} Mbit/s): its counters or its shaping are not what the scenario says"
            )
    out += _loss_elsewhere(rows, flows)
    return out


def _loss_elsewhere(rows: pa.Table, flows: pa.Table) -> list[str]:
    transfers = [r for r in flows.to_pylist() if r.get("role", "transfer") == "transfer"]
    retrans = [r.get("retransmissions") for r in transfers]
    if not rows.num_rows or not transfers or any(r is None for r in retrans):
        return []
    drops, sent = sum(rows["drops"].to_pylist()), sum(retrans)
    if sent - drops > max(EXCESS_MIN, EXCESS_SHARE * drops):
        return [
            f"the senders retransmitted {sent} segments, {sent - drops} more than the bottleneck's {drops} drops: "
            "packets were lost elsewhere on the path (not measured), or retransmitted without being lost"
        ]
    return []
