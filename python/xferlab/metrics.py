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

from . import registry
from .registry import MetricsError
from .runinfo import RunInfo
from .trace import Trace

_EPS = 1e-9


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


# ----------------------------------------------------------------------------- seed 004's table


def responsiveness_rtt(cwnd: np.ndarray, ssthresh: np.ndarray) -> float:
    """R = ln ½ / ln β̄ (seed 004 after RFC 5166 §2.3.1): the round trips of sustained
    congestion, one reduction each, after which the rate has halved. β̄ is the mean
    multiplicative decrease measured at the flow's congestion events: ssthresh set / the
    window sampled before, or, where ssthresh is unknown, the window's drop. NaN without
    events."""
    cwnd, ssthresh = np.asarray(cwnd, dtype=float), np.asarray(ssthresh, dtype=float)
    betas = []
    known = ~np.isnan(ssthresh)  # null before the first event (infinite) or when not reported
    for k in range(1, len(cwnd)):
        before = cwnd[k - 1]
        if before <= 0:
            continue
        # An event in congestion avoidance (ssthresh known before it): at the slow-start exit
        # the window sampled before is up to a sampling interval of doubling behind the loss.
        if known[k] and known[k - 1] and ssthresh[k] != ssthresh[k - 1] and ssthresh[k] < before:
            betas.append(ssthresh[k] / before)
        elif not known[k] and cwnd[k] < 0.95 * before:
            betas.append(cwnd[k] / before)
    if not betas:
        return math.nan
    b = float(np.clip(np.mean(betas), 1e-6, 1 - 1e-9))
    return math.log(0.5) / math.log(b) if b > 0.5 else 1.0


def aggressiveness(t: np.ndarray, rate_mbps: np.ndarray, rtt_s: float) -> float:
    """A = max (x(t + RTT) − x(t)) (seed 004): the largest growth of a flow's rate in one
    round trip; over samples Δt > RTT apart, the mean growth per round trip. NaN below two
    samples."""
    t, rate_mbps = np.asarray(t, dtype=float), np.asarray(rate_mbps, dtype=float)
    if len(t) < 2 or not rtt_s:
        return math.nan
    dt = np.diff(t)
    rounds = np.maximum(1.0, dt / rtt_s)
    return float(np.max(np.diff(rate_mbps) / rounds))


def smoothness(samples: np.ndarray) -> float:
    """S = max (g(t) − g(t + δt)) (seed 004): the largest drop between consecutive goodput
    samples. NaN below two samples."""
    samples = np.asarray(samples, dtype=float)
    return float(np.max(samples[:-1] - samples[1:])) if len(samples) > 1 else math.nan


def convergence_rtt(t: np.ndarray, cwnd: np.ndarray, start_s: float, target: float, rtt_s: float) -> float:
    """s_cwnd = min u such that cwnd(start + u·RTT) ≥ target (seed 004, with ≥: the window
    reaching its share of the BDP). NaN when it never does."""
    t, cwnd = np.asarray(t, dtype=float), np.asarray(cwnd, dtype=float)
    hit = np.nonzero(cwnd >= target)[0]
    if not len(hit) or not rtt_s:
        return math.nan
    return max(0.0, (t[hit[0]] - start_s) / rtt_s)


def average_responsiveness(t: np.ndarray, x: np.ndarray, start_s: float) -> float:
    """R̄_X = max t such that |X(t) − X̄| / X̄ > 0.1 (seed 004; the deviation taken both ways):
    from the window's start, when the aggregate throughput has settled within 10 % of its
    mean. 0 when it always was; NaN without samples."""
    t, x = np.asarray(t, dtype=float), np.asarray(x, dtype=float)
    if not len(x):
        return math.nan
    xbar = float(np.mean(x))
    if xbar <= 0:
        return math.nan
    off = np.nonzero(np.abs(x - xbar) / xbar > registry.SETTLED)[0]
    return float(t[off[-1]] - start_s) if len(off) else 0.0


def delta_fair_convergence(gp: pd.DataFrame, starts: pd.Series, interval: float, delta: float) -> float:
    """δ_f: from the last transfer's start, the time to the first goodput interval in which
    every transfer is within ±δ of the fair share Σ g / N (seed 004, after RFC 5166 §2.3.2).
    NaN with fewer than two transfers or when it never happens."""
    if len(starts) < 2:
        return math.nan
    last = float(starts.max())
    wide = gp[gp["t"] >= last - _EPS].pivot_table(index="t", columns="pair", values="goodput_mbps", aggfunc="sum")
    wide = wide.reindex(columns=starts.index).fillna(0.0)
    fair = wide.mean(axis=1)
    ok = (wide.sub(fair, axis=0).abs().le(delta * fair, axis=0)).all(axis=1) & (fair > 0)
    hits = wide.index[ok.to_numpy()]
    return float(hits[0] + interval - last) if len(hits) else math.nan


# ----------------------------------------------------------------------------- all of it


@dataclass
class _Data:
    """The trace as the metrics read it: transfers apart from reverse traffic."""

    flows: pd.DataFrame  # transfer flows
    all_flows: pd.DataFrame
    gp: pd.DataFrame  # goodput of the transfers, with their pair
    gp_all: pd.DataFrame
    link: pd.DataFrame  # the bottleneck's rows
    tcp: pd.DataFrame

    @classmethod
    def of(cls, trace: Trace) -> _Data:
        all_flows = trace.df("flows")
        flows = all_flows[all_flows["role"] == "transfer"].reset_index(drop=True)
        gp_all = trace.df("goodput")
        gp = gp_all[gp_all["flow_id"].isin(flows["flow_id"])].merge(flows[["flow_id", "pair"]], on="flow_id")
        link = trace.df("link")
        return cls(flows, all_flows, gp, gp_all, link[link["link"] == "bottleneck"], trace.df("tcp"))


def compute(trace: Trace, window=None) -> dict:
    """Every metric of ``metrics.json`` for one run, from its Trace alone. A metric the run
    cannot support is None, with the reason in ``null_reasons``."""
    info, prov = trace.info, trace.provenance
    d = _Data.of(trace)
    win = resolve_window(d.flows, window if window is not None else info.window, trace.end_s)
    reasons: dict[str, str] = {}
    flow_rows = _flow_rows(d, info, win)
    transfer_rows = _transfer_rows(d, info, win)
    out = {
        "window": win.as_dict(),
        "ideal_goodput_mbps": info.ideal_goodput_mbps,
        "ideal_rates_mbps": info.ideal_rates_mbps.model_dump() if info.ideal_rates_mbps else None,
        **_throughput(d, info, win, reasons),
        **_fairness(d, info, win, flow_rows, transfer_rows, reasons),
        **_losses(d, info, win, reasons),
        **_reactivity(d, info, win, flow_rows, reasons),
        "flows": flow_rows,
        "transfers": transfer_rows,
        "goodput_distribution": _distributions(d, info, win),
        "variants": _by_variant(flow_rows),
        "reverse_goodput_mbps": _reverse_goodput(d, info.goodput_interval_s, win),
        "completion": _completion(info, transfer_rows) if info.volume_bytes is not None or info.plan else None,
    }
    _unknown(out, prov.unknown, reasons)
    out["null_reasons"] = {k: v for k, v in sorted(reasons.items()) if _is_null(registry.get(out, k))}
    return clean(out)


def _is_null(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _samples(d: _Data, fid: int, interval: float, lo: float, hi: float) -> np.ndarray:
    return _full(d.gp[d.gp["flow_id"] == fid], interval, lo, hi)["goodput_mbps"].to_numpy()


def _flow_rows(d: _Data, info: RunInfo, win: Window) -> list[dict]:
    interval = info.goodput_interval_s
    rows = []
    for f in d.flows.itertuples(index=False):
        lo, hi = max(win.start, f.start), min(win.end, f.end)
        samples = _samples(d, f.flow_id, interval, lo, hi)
        if samples.size:
            m, s = mean(samples), std(samples)
        else:  # shorter than one interval: the rate over its life, no spread
            life = f.end - f.start
            m, s = (f.bytes * 8 / life / 1e6 if life > 0 else math.nan), math.nan
        rows.append(
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
                "smoothness_mbps": smoothness(samples),
                "retransmissions": _int_or_none(f.retransmissions),
                "timeouts": _int_or_none(f.timeouts),
                "completion_time_s": None if pd.isna(f.completion_time) else float(f.completion_time),
            }
        )
    return rows


def _int_or_none(v):
    return None if pd.isna(v) else int(v)


def _transfer_rows(d: _Data, info: RunInfo, win: Window) -> list[dict]:
    """Transfers: a pair's streams summed (seed 004, "Jain index per transfer")."""
    interval = info.goodput_interval_s
    transfers_in = {t.pair: t for t in info.transfers}
    rows = []
    for pair, fl in d.flows.groupby("pair"):
        start, end = float(fl["start"].min()), float(fl["end"].max())
        lo, hi = max(win.start, start), min(win.end, end)
        series = _full(d.gp[d.gp["pair"] == pair], interval, lo, hi).groupby("t")["goodput_mbps"].sum().to_numpy()
        if series.size:
            m, s = mean(series), std(series)
        else:
            m, s = (fl["bytes"].sum() * 8 / (end - start) / 1e6 if end > start else math.nan), math.nan
        retrans = fl["retransmissions"]
        row = {
            "pair": int(pair),
            "streams": int(len(fl)),
            "start_s": start,
            "end_s": end,
            "bytes": int(fl["bytes"].sum()),
            "mean_goodput_mbps": m,
            "std_goodput_mbps": s,
            "cov": s / m if m and not math.isnan(s) else math.nan,
            "retransmissions": None if retrans.isna().any() else int(retrans.sum()),
        }
        if fl["volume_bytes"].notna().all():
            done = fl["completion_time"].notna().all()
            row["completion_time_s"] = float((fl["start"] + fl["completion_time"]).max() - start) if done else None
        row.update(_deadline(info, int(pair), start, row.get("completion_time_s")))
        if "planned_completion_s" not in row:
            t_ideal = transfers_in[int(pair)].ideal_completion_s if int(pair) in transfers_in else None
            if t_ideal is not None:
                row["ideal_completion_time_s"] = t_ideal
                ct = row.get("completion_time_s")
                row["completion_deficiency"] = deficiency(ct, t_ideal) if ct is not None else None
        rows.append(row)
    return rows


def _deadline(info: RunInfo, pair: int, start: float, completion: float | None) -> dict:
    """A request's plan (seed 001): its deadline, whether its transfer met it and by how much
    (lateness = completion − deadline, from the start of the run; negative: early), and its
    deficiency against its own plan: (T − T_plan) / T_plan with both times from the planned
    start — fair sharing from its own start is not what a ViFi or spaghetti plan promised."""
    plan = info.plan
    req = next((r for r in plan.requests if r.pair == pair and r.admitted), None) if plan else None
    if req is None:
        return {}
    out = {"release_s": req.release_s, "deadline_s": req.deadline_s, "planned_completion_s": req.completion_s}
    end = start + completion if completion is not None else None
    if req.deadline_s is not None:
        out["lateness_s"] = end - req.deadline_s if end is not None else None
        out["deadline_met"] = end is not None and end <= req.deadline_s + 1e-9
    planned = req.completion_s - req.start_s
    out["ideal_completion_time_s"] = planned
    out["completion_deficiency"] = deficiency(end - req.start_s, planned) if end is not None else None
    return out


def _aggregate(d: _Data, info: RunInfo, win: Window) -> pd.Series:
    return _full(d.gp, info.goodput_interval_s, win.start, win.end).groupby("t")["goodput_mbps"].sum()


def _throughput(d: _Data, info: RunInfo, win: Window, reasons: dict) -> dict:
    agg = _aggregate(d, info, win).to_numpy()
    g = mean(agg) if len(agg) else math.nan
    link_iv = info.link_interval_s or info.goodput_interval_s
    x = _full(d.link, link_iv, win.start, win.end)["throughput_mbps"].to_numpy()
    xm = mean(x)
    c = info.bottleneck_rate_bps / 1e6 if info.bottleneck_rate_bps else None
    ideal = info.ideal_goodput_mbps
    if not len(agg):
        reasons["aggregate_goodput_mbps"] = "no complete goodput interval in the metrics window"
    if not len(x):
        reasons["aggregate_throughput_mbps"] = "no bottleneck samples in the metrics window"
    if c is None:
        reasons["efficiency"] = "the bottleneck's capacity is unknown"
    if not ideal:
        reasons["deficiency"] = "the ideal rate is unknown (no capacity)"
    return {
        "aggregate_goodput_mbps": g,
        "aggregate_goodput_std_mbps": std(agg),
        "aggregate_goodput_cov": cov(agg),
        "aggregate_throughput_mbps": xm,
        "efficiency": efficiency(g, c) if c else math.nan,
        "goodput_over_throughput": g / xm if xm else math.nan,
        "deficiency": 1.0 - g / ideal if ideal else math.nan,
    }


def _fairness(d: _Data, info: RunInfo, win: Window, flow_rows: list, transfer_rows: list, reasons: dict) -> dict:
    starts = d.flows.groupby("pair")["start"].min()
    iv = info.goodput_interval_s
    delta = delta_fair_convergence(_full(d.gp, iv, win.start, win.end), starts, iv, registry.DELTA_FAIR)
    if math.isnan(delta):
        never = f"the transfers were never all within ±{registry.DELTA_FAIR:g} of the fair share"
        reasons["delta_fair_convergence_s"] = "needs at least two transfers" if len(starts) < 2 else never
    smooth = [r["smoothness_mbps"] for r in flow_rows if not _is_null(r["smoothness_mbps"])]
    return {
        "jain_index": jain_index([r["mean_goodput_mbps"] for r in flow_rows]),
        "jain_index_per_transfer": jain_index([r["mean_goodput_mbps"] for r in transfer_rows]),
        "mean_flow_goodput_mbps": mean([r["mean_goodput_mbps"] for r in flow_rows]),
        "mean_flow_std_mbps": _nanmean([r["std_goodput_mbps"] for r in flow_rows]),
        "mean_flow_cov": _nanmean([r["cov"] for r in flow_rows]),
        "smoothness_mbps": max(smooth) if smooth else math.nan,
        "delta_fair_convergence_s": delta,
    }


def _losses(d: _Data, info: RunInfo, win: Window, reasons: dict) -> dict:
    """Loss and delay at the bottleneck (seed 004: p, q), and the senders' counters."""
    link_iv = info.link_interval_s or info.goodput_interval_s
    b = _full(d.link, link_iv, win.start, win.end)
    retrans, timeouts = d.flows["retransmissions"], d.flows["timeouts"]
    out = {
        "retransmissions": None if retrans.isna().any() else int(retrans.sum()),
        "timeouts": None if timeouts.isna().any() else int(timeouts.sum()),
        "bottleneck_drops": _sum_or_none(d.link["drops"]),
        "bottleneck_losses": _sum_or_none(d.link["losses"]),
        "bottleneck_max_queue_pkts": _max_or_none(d.link["queue_max_pkts"]),
        "retransmissions_beyond_drops": None,
        "packet_loss_rate": math.nan,
        "queueing_delay_ms": math.nan,
        "queueing_delay_max_ms": math.nan,
    }
    if out["retransmissions"] is not None and out["bottleneck_drops"] is not None:
        out["retransmissions_beyond_drops"] = max(0, out["retransmissions"] - out["bottleneck_drops"])
    else:
        reasons["retransmissions_beyond_drops"] = "the retransmissions or the bottleneck's drops are not known"
    if len(b) and b["drops"].notna().all():
        lost = b["drops"].sum() + (b["losses"].fillna(0).sum())
        offered = b["packets"].sum() + lost
        out["packet_loss_rate"] = float(lost / offered) if offered else math.nan
    else:
        reasons["packet_loss_rate"] = "no bottleneck drop counters in the metrics window"
    if len(b) and info.bottleneck_rate_bps and b["queue_pkts"].notna().all():
        per_packet_ms = (info.mtu + info.frame_overhead) * 8 / info.bottleneck_rate_bps * 1e3
        out["queueing_delay_ms"] = float(b["queue_pkts"].mean() * per_packet_ms)
        if b["queue_max_pkts"].notna().all():
            out["queueing_delay_max_ms"] = float(b["queue_max_pkts"].max() * per_packet_ms)
    else:
        reasons["queueing_delay_ms"] = "no bottleneck queue samples (or no capacity) in the metrics window"
    if len(d.link) == 0:
        for k in ("bottleneck_drops", "bottleneck_losses", "bottleneck_max_queue_pkts", "queueing_delay_max_ms"):
            reasons[k] = "the trace has no bottleneck samples"
    return out


def _sum_or_none(col: pd.Series):
    return None if not len(col) or col.isna().any() else int(col.sum())


def _max_or_none(col: pd.Series):
    return None if not len(col) or col.isna().any() else int(col.max())


def _reactivity(d: _Data, info: RunInfo, win: Window, flow_rows: list[dict], reasons: dict) -> dict:
    """Responsiveness, aggressiveness and convergence speed (seed 004) from the senders'
    samples, and the average responsiveness from the bottleneck's throughput."""
    tcp = d.tcp[(d.tcp["t"] >= win.start - _EPS) & (d.tcp["t"] <= win.end + _EPS)]
    n = max(1, len(d.flows))
    share = registry.CONVERGENCE_SHARE * (info.bdp_packets or 0) / n
    for row in flow_rows:
        s = tcp[tcp["flow_id"] == row["flow_id"]].sort_values("t")
        rtt = _base_rtt(info, row["pair"])
        t, cwnd = s["t"].to_numpy(), s["cwnd"].to_numpy(dtype=float)
        row["responsiveness_rtt"] = responsiveness_rtt(cwnd, s["ssthresh"].to_numpy(dtype=float))
        rate = cwnd * info.mss * 8 / rtt / 1e6 if rtt else cwnd * math.nan
        row["aggressiveness_mbps"] = aggressiveness(t, rate, rtt)
        row["convergence_rtt"] = convergence_rtt(t, cwnd, row["start_s"], share, rtt) if share else math.nan
    out = {
        "responsiveness_rtt": _nanmean([r["responsiveness_rtt"] for r in flow_rows]),
        "aggressiveness_mbps": _nanmax([r["aggressiveness_mbps"] for r in flow_rows]),
        "convergence_rtt": _nanmean([r["convergence_rtt"] for r in flow_rows]),
    }
    if tcp.empty:
        for k in out:
            reasons[k] = "the trace has no sender samples (tcp table)"
    else:
        reasons["responsiveness_rtt"] = "no congestion event in the sender samples"
        reasons["convergence_rtt"] = (
            "the BDP is unknown" if not share else f"no window reached {registry.CONVERGENCE_SHARE:g} × its share of the BDP"
        )
        reasons["aggressiveness_mbps"] = "fewer than two sender samples per flow"
    link_iv = info.link_interval_s or info.goodput_interval_s
    b = _full(d.link, link_iv, win.start, win.end)
    out["average_responsiveness_s"] = average_responsiveness(b["t"].to_numpy(), b["throughput_mbps"].to_numpy(), win.start)
    reasons["average_responsiveness_s"] = "no bottleneck throughput samples in the metrics window"
    return out


def _base_rtt(info: RunInfo, pair: int) -> float | None:
    if pair < len(info.pair_paths):
        return info.pair_paths[pair].rtt_s
    t = next((x for x in info.transfers if x.pair == pair), None)
    return (t.rtt_s if t is not None and t.rtt_s else None) or info.rtt_s


def _distributions(d: _Data, info: RunInfo, win: Window) -> dict:
    """p_{i,k} per flow in 1 % bins of the access capacity (seed 002 §II-C)."""
    access = info.access_rate_bps / 1e6 if info.access_rate_bps else None
    dists = []
    for f in d.flows.itertuples(index=False):
        samples = _samples(d, f.flow_id, info.goodput_interval_s, max(win.start, f.start), min(win.end, f.end))
        dists.append(goodput_distribution(samples, access).round(6).tolist() if access else None)
    return {"capacity_mbps": access, "bin_width_pct": 1, "flows": dists}


#: A makespan this far below its ideal is not a measurement (the ideal is a bound no
#: transport beats): the trace misses part of the volume, or its times are wrong.
IMPLAUSIBLE_BELOW_IDEAL = 0.01


def _completion(info: RunInfo, transfer_rows: list[dict]) -> dict:
    """Completion times; the makespan and its ideal from the scenario's first planned start
    (the first admitted release of a plan), the same on every backend: from the first actual
    start, backends that start late got a shorter ideal (issue 48)."""
    times = [r.get("completion_time_s") for r in transfer_rows]
    stats = completion_stats(times)
    stats["incomplete"] = sum(1 for t in times if t is None)
    ends = [r["start_s"] + r["completion_time_s"] for r in transfer_rows if r.get("completion_time_s") is not None]
    planned = [t.start_s for t in info.transfers]
    first = min(planned) if planned else min(r["start_s"] for r in transfer_rows)
    ideal_ends = [t.start_s + t.ideal_completion_s for t in info.transfers if t.ideal_completion_s is not None]
    stats["ideal_makespan_s"] = max(ideal_ends) - first if ideal_ends else None
    if info.plan is not None:
        first = min(r.release_s for r in info.plan.requests if r.admitted)
        stats["ideal_makespan_s"] = info.plan.ideal_makespan_s
        stats["rejected"] = sum(1 for r in info.plan.requests if not r.admitted)
        stats["deadlines_missed"] = sum(1 for r in transfer_rows if r.get("deadline_met") is False)
    stats["implausible"] = None
    if ends and stats["incomplete"] == 0:
        stats["makespan_s"] = max(ends) - first
        ideal = stats["ideal_makespan_s"]
        if ideal is not None:
            stats["makespan_deficiency"] = deficiency(stats["makespan_s"], ideal)
            if stats["makespan_s"] < ideal * (1 - IMPLAUSIBLE_BELOW_IDEAL):
                stats["implausible"] = (
                    f"the makespan {stats['makespan_s']:.3f} s is below the ideal {ideal:.3f} s, a bound no transport "
                    "beats: the trace misses part of the volume, or its times are wrong"
                )
    return stats


def _unknown(out: dict, unknown: dict[str, str], reasons: dict) -> None:
    """What the producer cannot know is None in metrics.json, with its reason — whatever
    arithmetic made of the placeholders. ``flows.x`` applies to every flow row."""
    for key, why in unknown.items():
        if key.startswith(("flows.", "transfers.")):
            scope, field = key.split(".", 1)
            for row in out.get(scope) or []:
                if field in row:
                    row[field] = None
        elif "." not in key or key.startswith("completion."):
            node, *path = key.split(".")
            if path and isinstance(out.get(node), dict):
                out[node][path[0]] = None
            elif not path and key in out:
                out[key] = None
            reasons[key] = why


def _nanmean(values) -> float:
    """Mean of the values that are defined (NaN when none is)."""
    a = np.asarray([math.nan if v is None else v for v in values], dtype=float)
    a = a[~np.isnan(a)]
    return float(a.mean()) if a.size else math.nan


def _nanmax(values) -> float:
    a = np.asarray([math.nan if v is None else v for v in values], dtype=float)
    a = a[~np.isnan(a)]
    return float(a.max()) if a.size else math.nan


def _by_variant(flow_rows: list[dict]) -> dict:
    """Mean goodput and Jain index of the flows of each congestion control."""
    out = {}
    for v in sorted({r["variant"] for r in flow_rows}):
        means = [r["mean_goodput_mbps"] for r in flow_rows if r["variant"] == v]
        out[v] = {"flows": len(means), "mean_goodput_mbps": mean(means), "jain_index": jain_index(means)}
    return out


def _reverse_goodput(d: _Data, interval: float, win: Window):
    """Aggregate goodput of the reverse traffic over the window, or None without any."""
    if not (d.all_flows["role"] == "reverse").any():
        return None
    ids = d.all_flows.loc[d.all_flows["role"] == "reverse", "flow_id"]
    g = _full(d.gp_all[d.gp_all["flow_id"].isin(ids)], interval, win.start, win.end).groupby("t")["goodput_mbps"].sum()
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
