"""The seeds' metrics, computed from a Trace. One function per metric, each with its source.

Notation of seed 002 §II-C: g_i(t) is flow i's goodput averaged over the sampling
interval, T the number of samples, N the number of flows, c the access capacity; x_i(t)
the throughput at the bottleneck. Every metric can be restricted to a time window; a
flow contributes only the samples that lie entirely within both the window and its own
lifetime (a partial first or last interval would understate its rate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .trace import Trace

_EPS = 1e-9


class MetricsError(Exception):
    """The metrics cannot be computed as asked (e.g. an empty window)."""


# ----------------------------------------------------------------------------- formulas


def mean(samples) -> float:
    """Mean goodput ḡ_i = (1/T) Σ_t g_i(t) (seed 002 §II-C)."""
    a = np.asarray(samples, dtype=float)
    return float(a.mean()) if a.size else math.nan


def std(samples) -> float:
    """Standard deviation σ = √((1/T) Σ_t (g_i(t) − ḡ_i)²) (seed 002 §II-C; population form)."""
    a = np.asarray(samples, dtype=float)
    return float(a.std()) if a.size else math.nan


def cov(samples) -> float:
    """Normalised standard deviation (coefficient of variation) σ/ḡ (seed 002 Table II,
    seed 004 "CoV")."""
    m = mean(samples)
    return std(samples) / m if m and not math.isnan(m) else math.nan


def jain_index(values) -> float:
    """Jain's fairness index J = (Σ x_i)² / (N Σ x_i²) (seed 002 §II-C, after Jain 1984).
    1 when all are equal, 1/N when one takes everything."""
    a = np.asarray(values, dtype=float)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return math.nan
    s2 = float((a * a).sum())
    return float(a.sum()) ** 2 / (a.size * s2) if s2 > 0 else math.nan


def goodput_distribution(samples, capacity_mbps: float) -> np.ndarray:
    """p_{i,k} = p(k/100·c ≤ g_i(t) < (k+1)/100·c), k ∈ [0, 100] (seed 002 §II-C): the
    share of samples in each 1 % bin of the access capacity c; samples at or above c fall
    in bin 100."""
    a = np.asarray(samples, dtype=float)
    p = np.zeros(101)
    if a.size == 0:
        return p
    k = np.clip(np.floor(a / (capacity_mbps / 100.0) + _EPS), 0, 100).astype(int)
    np.add.at(p, k, 1.0)
    return p / a.size


def efficiency(goodput_mbps: float, capacity_mbps: float) -> float:
    """E = G/C (seed 004, benchmark metrics)."""
    return goodput_mbps / capacity_mbps


def completion_stats(times) -> dict:
    """Completion-time statistics (seed 004 §benchmark; percentiles as seed 001 fig. 12):
    mean T̄ = (1/N) Σ T_i, σ_T (population form), percentiles, Jain over the times."""
    a = np.asarray([t for t in times if t is not None and not math.isnan(t)], dtype=float)
    if a.size == 0:
        return {"count": 0}
    q = np.percentile(a, [50, 75, 95, 99])
    return {
        "count": int(a.size),
        "mean_s": float(a.mean()),
        "std_s": float(a.std()),
        "min_s": float(a.min()),
        "max_s": float(a.max()),
        "p50_s": float(q[0]),
        "p75_s": float(q[1]),
        "p95_s": float(q[2]),
        "p99_s": float(q[3]),
        "jain_index": jain_index(a),
    }


def deficiency(real: float, ideal: float) -> float:
    """Relative deficiency of a real completion time against the ideal one,
    (T − T_ideal)/T_ideal (seed 001 §4.2, Tables 2 and 3)."""
    return (real - ideal) / ideal


# ----------------------------------------------------------------------------- windows


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    kind: str

    def as_dict(self) -> dict:
        return {"start_s": self.start, "end_s": self.end, "kind": self.kind}


def resolve_window(flows: pd.DataFrame, spec, run_end: float) -> Window:
    """``all`` (first start to last end), ``all-active`` (while every flow is active, as
    seed 002 Table II) or ``[start, end]`` in seconds."""
    first, last = float(flows["start"].min()), float(flows["end"].max())
    if spec in (None, "all"):
        return Window(first, last, "all")
    if spec == "all-active":
        lo, hi = float(flows["start"].max()), float(flows["end"].min())
        if hi <= lo:
            raise MetricsError("the flows are never all active at the same time: no 'all-active' window")
        return Window(lo, hi, "all-active")
    lo, hi = float(spec[0]), float(spec[1])
    lo, hi = max(lo, 0.0), min(hi, run_end)
    if hi <= lo:
        raise MetricsError(f"window [{spec[0]}, {spec[1]}] s does not overlap the run (0 to {run_end:g} s)")
    return Window(lo, hi, "custom")


def _full(df: pd.DataFrame, interval: float, lo: float, hi: float) -> pd.DataFrame:
    return df[(df["t"] >= lo - _EPS) & (df["t"] + interval <= hi + _EPS)]


# ----------------------------------------------------------------------------- all of it


def compute(trace: Trace, resolved: dict, window=None) -> dict:
    """Every metric of ``metrics.json`` for one run."""
    all_flows = trace.df("flows")
    gp_all = trace.df("goodput")
    link = trace.df("link")
    # Metrics are about the transfers; reverse traffic is reported on its own.
    if "role" in all_flows.columns:
        flows = all_flows[all_flows["role"] == "transfer"].reset_index(drop=True)
    else:
        flows = all_flows
    gp = gp_all[gp_all["flow_id"].isin(flows["flow_id"])]
    interval = float(resolved["goodput_interval_s"])
    run_end = float(trace.run.get("end_s", flows["end"].max()))
    win = resolve_window(flows, window if window is not None else resolved.get("window", "all"), run_end)
    # Imported runs may not know the capacities (None): the metrics that need them are None.
    access_mbps = resolved["access_rate_bps"] / 1e6 if resolved.get("access_rate_bps") else None
    capacity_mbps = resolved["bottleneck_rate_bps"] / 1e6 if resolved.get("bottleneck_rate_bps") else None
    ideal = resolved["ideal_goodput_mbps"]

    flow_rows, distributions = [], []
    for f in flows.itertuples(index=False):
        lo, hi = max(win.start, f.start), min(win.end, f.end)
        samples = _full(gp[gp["flow_id"] == f.flow_id], interval, lo, hi)["goodput_mbps"].to_numpy()
        if samples.size:
            m, s = mean(samples), std(samples)
        else:  # shorter than one interval: the rate over its life, no spread
            life = f.end - f.start
            m, s = (f.bytes * 8 / life / 1e6 if life > 0 else math.nan), math.nan
        distributions.append(goodput_distribution(samples, access_mbps).round(6).tolist() if access_mbps else None)
        flow_rows.append(
            {
                "flow_id": int(f.flow_id),
                "pair": int(f.pair),
                "stream": int(f.stream),
                "variant": f.variant,
                "start_s": float(f.start),
                "end_s": float(f.end),
                "bytes": int(f.bytes),
                "samples": int(samples.size),
                "mean_goodput_mbps": m,
                "std_goodput_mbps": s,
                "cov": s / m if m and not math.isnan(s) else math.nan,
                "retransmissions": int(f.retransmissions),
                "timeouts": int(f.timeouts),
                "completion_time_s": None if pd.isna(f.completion_time) else float(f.completion_time),
            }
        )

    # Transfers: a pair's streams summed (seed 004, "Jain index per transfer").
    gp = gp.merge(flows[["flow_id", "pair"]], on="flow_id")
    transfers_in = {t["pair"]: t for t in resolved["transfers"]}
    transfer_rows = []
    for pair, fl in flows.groupby("pair"):
        start, end = float(fl["start"].min()), float(fl["end"].max())
        lo, hi = max(win.start, start), min(win.end, end)
        series = _full(gp[gp["pair"] == pair], interval, lo, hi).groupby("t")["goodput_mbps"].sum().to_numpy()
        if series.size:
            m, s = mean(series), std(series)
        else:
            m, s = (fl["bytes"].sum() * 8 / (end - start) / 1e6 if end > start else math.nan), math.nan
        row = {
            "pair": int(pair),
            "streams": int(len(fl)),
            "start_s": start,
            "end_s": end,
            "bytes": int(fl["bytes"].sum()),
            "mean_goodput_mbps": m,
            "std_goodput_mbps": s,
            "cov": s / m if m and not math.isnan(s) else math.nan,
            "retransmissions": int(fl["retransmissions"].sum()),
        }
        if fl["completion_time"].notna().all() and fl["volume_bytes"].notna().all():
            row["completion_time_s"] = float((fl["start"] + fl["completion_time"]).max() - start)
        elif fl["volume_bytes"].notna().all():
            row["completion_time_s"] = None  # did not complete before the run ended
        t_ideal = transfers_in.get(int(pair), {}).get("ideal_completion_s")
        if t_ideal is not None:
            row["ideal_completion_time_s"] = t_ideal
            ct = row.get("completion_time_s")
            row["completion_deficiency"] = deficiency(ct, t_ideal) if ct is not None else None
        transfer_rows.append(row)

    agg = _full(gp, interval, win.start, win.end).groupby("t")["goodput_mbps"].sum()
    g_mean = mean(agg.to_numpy()) if len(agg) else math.nan
    bott = link[link["link"] == "bottleneck"]
    link_iv = float(resolved["link_interval_s"])
    x = _full(bott, link_iv, win.start, win.end)["throughput_mbps"].to_numpy()
    x_mean = mean(x)

    out = {
        "window": win.as_dict(),
        "ideal_goodput_mbps": ideal,
        "ideal_rates_mbps": resolved["ideal_rates_mbps"],
        "aggregate_goodput_mbps": g_mean,
        "aggregate_goodput_std_mbps": std(agg.to_numpy()),
        "aggregate_goodput_cov": cov(agg.to_numpy()),
        "aggregate_throughput_mbps": x_mean,
        "efficiency": efficiency(g_mean, capacity_mbps) if capacity_mbps else math.nan,
        "goodput_over_throughput": g_mean / x_mean if x_mean else math.nan,
        "deficiency": 1.0 - g_mean / ideal if ideal else math.nan,
        "jain_index": jain_index([r["mean_goodput_mbps"] for r in flow_rows]),
        "jain_index_per_transfer": jain_index([r["mean_goodput_mbps"] for r in transfer_rows]),
        "mean_flow_goodput_mbps": mean([r["mean_goodput_mbps"] for r in flow_rows]),
        "mean_flow_cov": _nanmean([r["cov"] for r in flow_rows]),
        "retransmissions": int(flows["retransmissions"].sum()),
        "timeouts": int(flows["timeouts"].sum()),
        "bottleneck_drops": int(bott["drops"].sum()),
        "bottleneck_losses": int(bott["losses"].sum()),
        "bottleneck_max_queue_pkts": int(bott["queue_max_pkts"].max()) if len(bott) else 0,
        "flows": flow_rows,
        "transfers": transfer_rows,
        "goodput_distribution": {"capacity_mbps": access_mbps, "bin_width_pct": 1, "flows": distributions},
        "variants": _by_variant(flow_rows),
        "reverse_goodput_mbps": _reverse_goodput(all_flows, gp_all, interval, win),
        "completion": None,
    }
    if resolved.get("volume_bytes") is not None:
        times = [r.get("completion_time_s") for r in transfer_rows]
        stats = completion_stats(times)
        stats["incomplete"] = sum(1 for t in times if t is None)
        ends = [r["start_s"] + r["completion_time_s"] for r in transfer_rows if r.get("completion_time_s") is not None]
        first = min(r["start_s"] for r in transfer_rows)
        ideal_ends = [t["start_s"] + t["ideal_completion_s"] for t in resolved["transfers"] if "ideal_completion_s" in t]
        stats["ideal_makespan_s"] = max(ideal_ends) - first if ideal_ends else None
        if ends and stats["incomplete"] == 0:
            stats["makespan_s"] = max(ends) - first
            if stats["ideal_makespan_s"] is not None:
                stats["makespan_deficiency"] = deficiency(stats["makespan_s"], stats["ideal_makespan_s"])
        out["completion"] = stats
    # Imported runs: what the logs cannot tell (no bottleneck counters, no timeouts) is None.
    for key in resolved.get("unknown_metrics", ()):
        out[key] = None
        for row in flow_rows + transfer_rows:
            if key in row:
                row[key] = None
    return clean(out)


def _nanmean(values) -> float:
    """Mean of the values that are defined (NaN when none is)."""
    a = np.asarray(values, dtype=float)
    a = a[~np.isnan(a)]
    return float(a.mean()) if a.size else math.nan


def _by_variant(flow_rows: list[dict]) -> dict:
    """Mean goodput and Jain index of the flows of each congestion control."""
    out = {}
    for v in sorted({r["variant"] for r in flow_rows}):
        means = [r["mean_goodput_mbps"] for r in flow_rows if r["variant"] == v]
        out[v] = {"flows": len(means), "mean_goodput_mbps": mean(means), "jain_index": jain_index(means)}
    return out


def _reverse_goodput(all_flows: pd.DataFrame, gp_all: pd.DataFrame, interval: float, win: Window):
    """Aggregate goodput of the reverse traffic over the window, or None without any."""
    if "role" not in all_flows.columns or not (all_flows["role"] == "reverse").any():
        return None
    ids = all_flows.loc[all_flows["role"] == "reverse", "flow_id"]
    g = _full(gp_all[gp_all["flow_id"].isin(ids)], interval, win.start, win.end).groupby("t")["goodput_mbps"].sum()
    return mean(g.to_numpy())


def clean(obj):
    """NaN/inf → None, numpy scalars → Python, so that the JSON is valid."""
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
