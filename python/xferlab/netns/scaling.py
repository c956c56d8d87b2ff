"""Time dilation: running a scenario K times slower on a host that cannot carry it at full speed.

This machine emulates about 0.5 Gbit/s in total (EMULATION.md), the seeds ran at 1 and
10 Gbit/s.  Scaling by K divides every rate by K and multiplies every time by K (RTTs,
start times, durations, sampling intervals, RTO minimum).  What that preserves:

* the bandwidth-delay product and the buffer, in packets, and so the number of packets
  in flight and in the queue at every moment of a window-clocked sawtooth;
* the number of flows, pairs and streams, their volumes in bytes, the MTU;
* the number of round trips in a run, and every law written per RTT or per ACK
  (Reno, HighSpeed, Scalable, BIC's binary search per RTT).

What it does not preserve: laws written in wall-clock time — CUBIC's cubic in seconds,
H-TCP's Δ since the last loss, HyStart's delay thresholds — the delayed-ACK timer and the
host's own per-packet costs, which all stay at their real speed.  The trace is converted
back (times ÷ K, rates × K) so a scaled run reads in the scenario's own units and its
metrics compare directly with a simulator run; the run folder records K.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc

#: Bottleneck rate this kind of host emulates with a punctual delay line even when shared
from ..runinfo import RunInfo, scaled
from ..trace import columns_of_kind

#: with other work (BENCHMARKS.md "netns backend: capacity at 100 ms": 733 Mbit/s at
#: C = 800 on a quiet 2-core host; docs/delayline.md: C ≤ 500 when the machine is shared).
DEFAULT_CAPACITY_BPS = 500e6

_NICE = (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8)


def nice_ceiling(x: float) -> float:
    """The smallest of 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^n that is ≥ x."""
    if x <= 1:
        return 1.0
    exp = math.floor(math.log10(x))
    for m in _NICE + (10,):
        v = m * 10**exp
        if v >= x * (1 - 1e-12):
            return float(v)
    return float(10 ** (exp + 1))  # pragma: no cover


def demand_bps(resolved: dict) -> float:
    """The most the emulated dumbbell must carry in one direction."""
    paths = resolved.get("pair_paths") or []
    senders = sum(p["access_rate_bps"] for p in paths[: resolved["pairs"]]) or resolved["bottleneck_rate_bps"]
    return min(resolved["bottleneck_rate_bps"], senders)


def auto_factor(resolved: dict, capacity_bps: float = DEFAULT_CAPACITY_BPS) -> float:
    """K = 1 when the scenario fits this host, else the next round factor that makes it fit."""
    return nice_ceiling(demand_bps(resolved) / capacity_bps)


def scale_resolved(resolved: dict, k: float) -> dict:
    """A copy of ``resolved`` with rates ÷ k and times × k (buffers, volumes, packets unchanged),
    by the resolved scenario's typed fields (:func:`xferlab.runinfo.scaled`)."""
    return scaled(RunInfo.model_validate(resolved), k).dump()


def unscale_tables(tables: dict, k: float) -> dict:
    """Converts the trace of a run dilated by ``k`` back to the scenario's own units: the
    columns the contract marks as times ÷ k, as rates × k."""
    if k == 1:
        return dict(tables)
    out = {}
    for name, table in tables.items():
        t = table if isinstance(table, pa.Table) else pa.Table.from_batches([table])
        factors = [(c, 1 / k) for c in columns_of_kind(name, "time")] + [(c, k) for c in columns_of_kind(name, "rate")]
        for col, factor in factors:
            if col in t.column_names:
                i = t.column_names.index(col)
                field = t.schema.field(i)
                t = t.set_column(i, field, pc.multiply(t.column(i), pa.scalar(factor, pa.float64())).cast(field.type))
        out[name] = t
    return out
