"""Figures and the self-contained HTML report of one run.

Figures follow the seeds: aggregate and per-flow goodput over time (seed 002 figs. 3,
5–8), goodput distributions (fig. 11), congestion windows, the bottleneck queue, and
completion-time CDFs when transfers are volume-bound (seed 001 fig. 9).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from . import registry, runfolder, schedule  # noqa: E402
from .runinfo import PlanInfo, RunInfo
from .trace import Trace  # noqa: E402
from .units import format_duration, format_rate, format_size  # noqa: E402

#: Above this many lines a plot shows a sample of them plus the envelope.
MAX_LINES = 12

plt.rcParams.update(
    {
        "figure.dpi": 110,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "font.size": 9,
        "legend.fontsize": 7,
    }
)


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _series_by(df: pd.DataFrame, key: str, value: str) -> dict:
    return {k: g.sort_values("t") for k, g in df.groupby(key)}


def _goodput_units(gp: pd.DataFrame, flows: pd.DataFrame):
    """Per-transfer lines when pairs have several streams, else per flow."""
    if flows.groupby("pair").size().max() > 1:
        g = gp.merge(flows[["flow_id", "pair"]], on="flow_id").groupby(["pair", "t"], as_index=False)["goodput_mbps"].sum()
        return g.rename(columns={"pair": "unit"}), "pair"
    return gp.rename(columns={"flow_id": "unit"}), "flow"


def fig_goodput(trace: Trace, info: RunInfo, m: dict) -> bytes:
    gp, flows, link = trace.df("goodput"), trace.df("flows"), trace.df("link")
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5.6), sharex=True)
    agg = gp.groupby("t")["goodput_mbps"].sum()
    iv = info.goodput_interval_s
    ax1.plot(agg.index + iv / 2, agg.values, color="C0", lw=1.2, label="aggregate goodput G(t)")
    bott = link[link["link"] == "bottleneck"]
    if len(bott):
        # X(t) on G(t)'s grid (its samples averaged over each goodput interval): the two are
        # then comparable, where 20 ms samples would draw a band of line-rate bursts.
        cell = (bott["t"] // iv) * iv
        x = bott.groupby(cell)["throughput_mbps"].mean()
        ax1.plot(x.index + iv / 2, x.values, color="C1", lw=1.0, label=f"bottleneck throughput X(t), mean per {iv:g} s")
    if info.ideal_goodput_mbps is not None:  # unknown for an import without --capacity
        ax1.axhline(info.ideal_goodput_mbps, color="k", ls="--", lw=0.8, label="ideal goodput r_TP")
    w = m["window"]
    if w["kind"] != "all":
        for a in (ax1, ax2):
            a.axvspan(w["start_s"], w["end_s"], color="C2", alpha=0.08, lw=0)
    ax1.set_ylabel("Mbit/s")
    ax1.set_ylim(bottom=0)
    ax1.legend(loc="lower right")
    ax1.set_title(f"{info.name}: goodput over time")
    units, kind = _goodput_units(gp, flows)
    series = _series_by(units, "unit", "goodput_mbps")
    keys = list(series)
    shown = keys if len(keys) <= MAX_LINES else keys[:: max(1, len(keys) // MAX_LINES)][:MAX_LINES]
    if len(keys) > MAX_LINES:
        wide = units.pivot_table(index="t", columns="unit", values="goodput_mbps")
        ax2.fill_between(
            wide.index + iv / 2, wide.min(axis=1), wide.max(axis=1), color="0.8", lw=0, label=f"min–max of {len(keys)} {kind}s"
        )
    for k in shown:
        s = series[k]
        ax2.plot(s["t"] + iv / 2, s["goodput_mbps"], lw=0.8, label=f"{kind} {k}")
    ax2.set_ylabel(f"goodput per {kind}, Mbit/s")
    ax2.set_xlabel("time (s)")
    ax2.set_ylim(bottom=0)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(loc="lower right", ncol=4)
    return png(fig)


def fig_distribution(m: dict) -> bytes:
    dist = m["goodput_distribution"]
    flows = m["flows"]
    if dist.get("capacity_mbps") is None:  # no capacity known (import without --capacity): no 1 % bins
        return None
    fig, ax = plt.subplots(figsize=(8, 3.2))
    k = np.arange(101)
    idx = list(range(len(flows)))
    if len(idx) > MAX_LINES:
        idx = idx[:: max(1, len(idx) // MAX_LINES)][:MAX_LINES]
    for i in idx:
        ax.plot(k, np.asarray(dist["flows"][i]) * 100, lw=0.9, label=f"flow {flows[i]['flow_id']}")
    ax.set_xlabel(f"goodput, % of the access capacity c = {dist['capacity_mbps']:g} Mbit/s (1 % bins)")
    ax.set_ylabel("share of samples p_{i,k} (%)")
    ax.set_title("goodput distribution per flow (seed 002 fig. 11)")
    ax.set_xlim(0, 100)
    ax.legend(ncol=4, loc="upper right")
    return png(fig)


def fig_cwnd(trace: Trace, info: RunInfo) -> bytes:
    tcp = trace.df("tcp")
    if tcp.empty:  # an import without sender-side samples
        return None
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ids = sorted(tcp["flow_id"].unique())
    shown = ids if len(ids) <= MAX_LINES else ids[:: max(1, len(ids) // MAX_LINES)][:MAX_LINES]
    for fid in shown:
        s = tcp[tcp["flow_id"] == fid]
        ax.plot(s["t"], s["cwnd"], lw=0.8, label=f"flow {fid}")
    if info.bdp_packets:
        ax.axhline(info.bdp_packets / max(1, len(ids)), color="k", ls=":", lw=0.8, label="fair share of the BDP")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("cwnd (segments)")
    ax.set_title("congestion window per flow" + ("" if len(ids) <= MAX_LINES else f" ({len(shown)} of {len(ids)})"))
    ax.set_ylim(bottom=0)
    ax.legend(ncol=4, loc="upper right")
    return png(fig)


#: Bins of the drops drawn under the queue: beyond this many samples they are summed.
MAX_DROP_BINS = 500


def _drops_binned(b: pd.DataFrame, interval: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Drops per link interval, or summed over at most :data:`MAX_DROP_BINS` equal bins of a
    whole number of intervals: (counts, edges, the bin's length)."""
    t = b["t"].to_numpy(dtype=float)
    drops = b["drops"].fillna(0).to_numpy(dtype=float)
    start, end = float(t.min()), float(t.max()) + interval
    per = interval * max(1, math.ceil((end - start) / interval / MAX_DROP_BINS))
    edges = start + per * np.arange(math.ceil((end - start) / per - 1e-9) + 1)
    counts, _ = np.histogram(t, bins=edges, weights=drops)
    return counts, edges, per


def fig_queue(trace: Trace, info: RunInfo) -> bytes:
    link = trace.df("link")
    b = link[link["link"] == "bottleneck"]
    if b.empty:  # imported runs have no bottleneck counters
        return None
    fig, ax = plt.subplots(figsize=(8, 2.8))
    ax.plot(b["t"], b["queue_max_pkts"], lw=0.6, color="C0", label="queue (max per interval)")
    if info.buffer_packets is not None:  # unknown to a producer that does not set the queue
        ax.axhline(info.buffer_packets, color="k", ls="--", lw=0.8, label=f"buffer B = {info.buffer_packets}")
    ax.set_ylabel("packets")
    ax.set_xlabel("time (s)")
    ax2 = ax.twinx()
    counts, edges, per = _drops_binned(b, info.link_interval_s or info.goodput_interval_s)  # as metrics
    ax2.stairs(counts, edges, fill=True, color="C3", alpha=0.6, label="drops")  # one artist, not a bar per sample
    ax2.set_ylabel(f"drops per {format_duration(per)}")
    ax.set_title("bottleneck queue and drops")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper right")
    return png(fig)


def fig_completion(m: dict) -> bytes | None:
    times = sorted(t["completion_time_s"] for t in m["transfers"] if t.get("completion_time_s") is not None)
    if not times:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.0))
    y = np.arange(1, len(times) + 1) / len(times)
    ax.step(times, y, where="post", label="transfers")
    ideal = [t.get("ideal_completion_time_s") for t in m["transfers"] if t.get("ideal_completion_time_s")]
    if ideal:
        ax.axvline(max(ideal), color="k", ls="--", lw=0.8, label="ideal (max-min, r_TP)")
    ax.set_xlabel("completion time (s)")
    ax.set_ylabel("CDF")
    ax.set_ylim(0, 1.02)
    ax.set_title("completion time distribution (seed 001 fig. 9)")
    ax.legend()
    return png(fig)


#: Above this many requests the plan figure draws their summed load, not one band each.
PLAN_BANDS_MAX = 40


def draw_plan(ax, plan: PlanInfo, end_s: float = 0.0) -> None:
    """Each request's planned rate over time as stacked rectangles (seed 001 fig. 6), or their
    sum when there are many; deadlines dotted; refused requests marked at their release."""
    rows = [r.model_dump() for r in plan.requests]
    steps = schedule.fluid_rates(rows, plan.capacity_bps)
    handles, names = [], []
    admitted = [r for r in rows if r["admitted"]]
    if len(admitted) <= PLAN_BANDS_MAX:
        for lo, hi, rates in steps:
            base = 0.0
            for k in sorted(rates):
                ax.add_patch(plt.Rectangle((lo, base), hi - lo, rates[k] / 1e6, color=f"C{k % 10}", alpha=0.7, lw=0))
                base += rates[k] / 1e6
        for r in rows:
            if r["deadline_s"] is not None:
                ax.axvline(r["deadline_s"], color=f"C{r['request'] % 10}", ls=":", lw=1)
        handles = [plt.Rectangle((0, 0), 1, 1, color=f"C{r['request'] % 10}", alpha=0.7) for r in admitted]
        names = [r["name"] or f"request {r['request']} (pair {r['pair']})" for r in admitted]
    elif steps:
        x = [t for lo, hi, _ in steps for t in (lo, hi)]
        y = [min(sum(rates.values()), plan.capacity_bps) / 1e6 for _, _, rates in steps for _ in (0, 1)]
        ax.fill_between(x, y, color="C0", alpha=0.7, lw=0)
        handles, names = [plt.Rectangle((0, 0), 1, 1, color="C0", alpha=0.7)], [f"{len(admitted)} admitted requests, summed"]
    refused = [r for r in rows if not r["admitted"]]
    if refused:
        mark = ax.scatter(
            [r["release_s"] for r in refused], [plan.capacity_bps / 1e6 * 1.07] * len(refused), marker="x", color="red", zorder=5
        )
        for r in refused[:PLAN_BANDS_MAX]:
            ax.annotate(r["name"] or str(r["request"]), (r["release_s"], plan.capacity_bps / 1e6 * 1.07), fontsize=6,
                        color="red", xytext=(3, 3), textcoords="offset points")  # fmt: skip
        handles.append(mark)
        names.append(f"refused, at its release: {_names(refused)}")
    cap = ax.axhline(plan.capacity_bps / 1e6, color="k", ls="--", lw=0.8)
    ax.legend([*handles, cap], [*names, "r_TP"], loc="upper right", fontsize=7)
    ax.set_ylim(0, plan.capacity_bps / 1e6 * 1.15)
    right = max([hi for _, hi, _ in steps] + [r["release_s"] for r in refused] + [end_s, 1e-3])
    ax.set_xlim(-0.02 * right if refused else 0, right)
    ax.set_ylabel("planned goodput, Mbit/s")
    ax.set_title(f"plan: {plan.strategy}, enforced by {plan.mechanism} (seed 001 fig. 6); dotted: deadlines", fontsize=9)


def _names(rows: list[dict], shown: int = 4) -> str:
    """A few requests by name (or number), and how many more."""
    names = ", ".join(r["name"] or str(r["request"]) for r in rows[:shown])
    return names + (f" and {len(rows) - shown} more" if len(rows) > shown else "")


def plan_figure(plan: PlanInfo) -> bytes:
    """The plan alone (``xferlab schedule plan --figure``)."""
    fig, ax = plt.subplots(figsize=(8, 3))
    draw_plan(ax, plan)
    ax.set_xlabel("time (s)")
    return png(fig)


def fig_plan(trace: Trace) -> bytes | None:
    """The plan (seed 001 fig. 6), and below, the goodput each transfer got."""
    info = trace.info
    if info.plan is None:
        return None
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5.2), sharex=True)
    draw_plan(ax1, info.plan, trace.end_s)
    request_of = {r.pair: r.request for r in info.plan.requests}
    gp = trace.df("goodput").merge(trace.df("flows")[["flow_id", "pair"]], on="flow_id")
    by_pair = gp.groupby(["pair", "t"])["goodput_mbps"].sum().unstack(0).fillna(0.0)
    cols = [p for p in by_pair.columns if p in request_of]
    if len(cols) > PLAN_BANDS_MAX:
        ax2.fill_between(by_pair.index + info.goodput_interval_s / 2, by_pair[cols].sum(axis=1), color="C0", alpha=0.7)
    elif cols:
        colors = [f"C{request_of[p] % 10}" for p in cols]
        ax2.stackplot(by_pair.index + info.goodput_interval_s / 2, [by_pair[p] for p in cols], colors=colors, alpha=0.7)
    ax2.set_ylabel("goodput, Mbit/s")
    ax2.set_xlabel("time (s)")
    ax2.set_title("what each transfer got", fontsize=9)
    return png(fig)


# ----------------------------------------------------------------------------- HTML

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1000px;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{padding:.25em .6em;border-bottom:1px solid #eee;text-align:right}
th{background:#f6f6f6} td:first-child,th:first-child{text-align:left}
.muted{color:#777} img{max-width:100%;display:block;margin:.8em 0}
pre{background:#f6f6f6;padding:.8em;overflow:auto;font-size:.8em}
.kv td:first-child{color:#555} .sheet td{white-space:nowrap}
.warn{background:#fff4e0;border-left:4px solid #f0a000;padding:.5em 1em}
"""


def fmt(v, digits=4) -> str:
    """A value for a table cell (registry formatting), HTML-escaped; "—" when unknown."""
    return html.escape(registry.format_value(v, digits))


def _table(rows: list[dict], cols: list[tuple[str, str]]) -> str:
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in cols)
    body = "".join("<tr>" + "".join(f"<td>{_cell(k, r.get(k))}</td>" for k, _ in cols) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(key: str, v) -> str:
    """A table cell, formatted as the registry says for a known metric key."""
    for scope in ("", "flows.", "transfers."):
        if scope + key in registry.METRICS:
            return html.escape(registry.METRICS[scope + key].format(v))
    return html.escape(str(v)) if isinstance(v, str) else fmt(v)


def _kv(pairs: list[tuple[str, object]]) -> str:
    def value(v) -> str:
        return v if isinstance(v, Markup) else html.escape(v) if isinstance(v, str) else fmt(v)

    return '<table class="kv">' + "".join(f"<tr><td>{html.escape(k)}</td><td>{value(v)}</td></tr>" for k, v in pairs) + "</table>"


class Markup(str):
    """Text already in HTML."""


def img(folder: Path, name: str, data: bytes | None, alt: str) -> str:
    """Writes ``figures/NAME.png`` and returns the ``<img>`` that embeds it (empty without data)."""
    if data is None:
        return ""
    runfolder.write_bytes(runfolder.own_folder(folder / runfolder.FIGURES_DIR) / f"{name}.png", data)
    b64 = base64.b64encode(data).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


#: The run report's summary, in seed 004's groups of metrics (keys of the registry).
SUMMARY = {
    "Throughput": [
        "aggregate_goodput_mbps",
        "ideal_goodput_mbps",
        "deficiency",
        "efficiency",
        "aggregate_throughput_mbps",
        "goodput_over_throughput",
    ],
    "Fairness": ["jain_index", "jain_index_per_transfer", "delta_fair_convergence_s"],
    "Stability": ["mean_flow_goodput_mbps", "mean_flow_std_mbps", "mean_flow_cov", "aggregate_goodput_cov", "smoothness_mbps"],
    "Reactivity and convergence": ["responsiveness_rtt", "average_responsiveness_s", "aggressiveness_mbps", "convergence_rtt"],
    "Loss and delay": [
        "retransmissions",
        "timeouts",
        "bottleneck_drops",
        "bottleneck_losses",
        "packet_loss_rate",
        "bottleneck_max_queue_pkts",
        "queueing_delay_ms",
        "queueing_delay_max_ms",
    ],
    "Completion times": [
        "completion.count",
        "completion.incomplete",
        "completion.rejected",
        "completion.deadlines_missed",
        "completion.mean_s",
        "completion.std_s",
        "completion.p50_s",
        "completion.p75_s",
        "completion.p99_s",
        "completion.jain_index",
        "completion.makespan_s",
        "completion.ideal_makespan_s",
        "completion.makespan_deficiency",
    ],
}


def _summary(m: dict) -> str:
    """Every metric of the summary with its unit; an unknown one shows "—" and why."""
    reasons = m.get("null_reasons") or {}
    rows = []
    for group, keys in SUMMARY.items():
        if group == "Completion times" and not m.get("completion"):
            continue
        rows.append(f"<tr><th colspan=3>{html.escape(group)}</th></tr>")
        for key in keys:
            d = registry.METRICS[key]
            v = registry.get(m, key)
            why = reasons.get(key, "")
            cell = html.escape(d.format(v)) if v is not None else f'<span title="{html.escape(why)}">—</span>'
            note = f"<span class=muted>{html.escape(why)}</span>" if v is None and why else ""
            title = f"{d.definition} ({d.source})"
            unit = html.escape(d.unit) if v is not None else ""
            rows.append(
                f'<tr><td title="{html.escape(title)}">{html.escape(d.label)}</td><td>{cell} {unit}</td><td>{note}</td></tr>'
            )
    w = m["window"]
    rows.append(
        f"<tr><td>metrics window</td><td>{html.escape(w['kind'])}: {w['start_s']:.3f}–{w['end_s']:.3f} s</td><td></td></tr>"
    )
    return '<table class="kv">' + "".join(rows) + "</table>"


def _setup(trace: Trace) -> list[tuple[str, object]]:
    """The setup, from the resolved scenario (what is unknown is left out) and the rows the
    producer adds (provenance): rendered the same way whoever produced the run."""
    r, prov = trace.info, trace.provenance
    rows: list[tuple[str, object]] = [("produced by", prov.producer + (f" ({prov.source})" if prov.source else ""))]
    rows.append(("pairs × streams", f"{r.pairs} × {r.streams}"))
    rows.append(("variant", r.variant))
    if r.access_rate_bps and r.bottleneck_rate_bps:
        rows.append(("access / bottleneck", f"{format_rate(r.access_rate_bps)} / {format_rate(r.bottleneck_rate_bps)}"))
    if r.rtt_s:
        rows.append(("RTT", format_duration(r.rtt_s)))
    if r.buffer_packets and r.bdp_packets:
        rows.append(
            (
                "buffer",
                f"{r.buffer_packets} packets ({r.buffer_packets / r.bdp_packets:.2f} BDP; BDP = {r.bdp_packets:.1f} packets)",
            )
        )
    rows.append(("MTU / MSS", f"{r.mtu} / {r.mss} bytes"))
    if r.duration_s:
        rows.append(("workload", f"{format_duration(r.duration_s)} per pair"))
    elif r.volume_bytes:
        volumes = {t.volume_bytes for t in r.transfers}
        rows.append(
            ("workload", f"{format_size(r.volume_bytes)} per transfer" if len(volumes) == 1 else "volumes per pair (below)")
        )
    if r.seed is not None:
        rows.append(("seed", str(r.seed)))
    if trace.run.get("wall_seconds") is not None:
        rows.append(("wall time", f"{trace.run['wall_seconds']:.2f} s"))
    rows += [(label, text) for label, text in prov.setup]
    return rows


def _per_pair(trace: Trace) -> str:
    """The per-pair settings, when pairs differ (per_pair: mixed variants, volumes, RTTs, limits)."""
    r = trace.info
    cols = ("variant", "volume_bytes", "rtt_s", "access_rate_bps", "rate_limit_bps", "limiter")
    if len({tuple(getattr(t, c) for c in cols) for t in r.transfers}) <= 1 and not any(t.rate_limit_bps for t in r.transfers):
        return ""
    head = "".join(
        f"<th>{h}</th>" for h in ("pair", "streams", "variant", "start", "volume", "RTT", "access", "rate limit", "limiter")
    )
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(x)}</td>"
            for x in (
                str(t.pair),
                str(t.streams),
                t.variant,
                format_duration(t.start_s) if t.start_s else "0",
                format_size(t.volume_bytes) if t.volume_bytes else "—",
                format_duration(t.rtt_s) if t.rtt_s else "—",
                format_rate(t.access_rate_bps) if t.access_rate_bps else "—",
                format_rate(t.rate_limit_bps) if t.rate_limit_bps else "—",
                t.limiter or "—",
            )
        )
        + "</tr>"
        for t in r.transfers
    )
    return f"<h3>Per pair</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


#: Refused requests listed in a report; the rest are counted (run.json's plan has them all).
REFUSALS_SHOWN = 100


def _refusals(trace: Trace) -> str:
    """The requests the plan refused, each with its reason (seed 001's admission control)."""
    plan = trace.info.plan
    refused = [r for r in plan.requests if not r.admitted] if plan is not None else []
    if not refused:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("request", "volume", "release", "deadline", "why it was refused"))
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(x)}</td>"
            for x in (
                r.name or str(r.request),
                format_size(r.volume_bytes),
                format_duration(r.release_s),
                format_duration(r.deadline_s) if r.deadline_s is not None else "—",
                r.reason,
            )
        )
        + "</tr>"
        for r in refused[:REFUSALS_SHOWN]
    )
    more = ""
    if len(refused) > REFUSALS_SHOWN:
        more = f"<p class=muted>and {len(refused) - REFUSALS_SHOWN} more (run.json, resolved.plan)</p>"
    return (
        f"<h3>Requests refused ({len(refused)} of {len(plan.requests)})</h3>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"
    )


def render(folder: Path, trace: Trace, metrics: dict) -> Path:
    """Writes ``figures/*.png`` and a self-contained ``report.html`` into ``folder``, from the
    Trace and its metrics alone."""
    folder = Path(folder)
    info, prov, m = trace.info, trace.provenance, metrics
    r = info.dump()
    figs = [
        ("goodput", fig_goodput(trace, info, m), "goodput over time"),
        ("distribution", fig_distribution(m), "goodput distribution"),
        ("cwnd", fig_cwnd(trace, info), "congestion window"),
        ("queue", fig_queue(trace, info), "bottleneck queue"),
        ("completion", fig_completion(m), "completion times"),
        ("plan", fig_plan(trace), "the plan and what each transfer got"),
    ]
    scenario = trace.run.get("scenario") or {}
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>xferlab — {html.escape(r['name'])}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(r['name'])}</h1>",
        f"<p class=muted>{html.escape(scenario.get('description', '') or '')} "
        f"Produced by <b>{html.escape(prov.producer)}</b>{' (' + html.escape(prov.source) + ')' if prov.source else ''}, "
        f"{html.escape(trace.run.get('created', '') or '')}.</p>",
    ]
    for warning in prov.warnings:
        parts.append(f"<p class=warn>{html.escape(warning)}</p>")
    if prov.files:
        files = ", ".join(f"<code>{html.escape(str(f))}</code>" for f in prov.files)
        source = f"{html.escape(prov.source)} logs" if prov.source else "logs"
        parts.append(f"<p class=warn>Imported from {source}: {files}. What they do not tell is shown as —, with the reason.</p>")
    incomplete = (m.get("completion") or {}).get("incomplete")
    if incomplete:
        parts.append(f"<p class=warn>{incomplete} transfer(s) did not complete before the run ended.</p>")
    implausible = (m.get("completion") or {}).get("implausible")
    if implausible:
        parts.append(f"<p class=warn>Implausible: {html.escape(implausible)}.</p>")
    parts += ["<h2>Summary</h2>", _summary(m), _refusals(trace), "<h2>Setup</h2>", _kv(_setup(trace)), _per_pair(trace)]
    parts.append("<h2>Figures</h2>")
    for name, data, alt in figs:
        parts.append(img(folder, name, data, alt))
    parts += _tables(m)
    given = yaml.safe_dump(scenario, sort_keys=False)
    meta = {k: v for k, v in trace.run.items() if k not in ("scenario", "resolved")}
    parts += [
        "<h2>Scenario (as given)</h2>",
        f"<pre>{html.escape(given)}</pre>",
        "<details><summary>Run metadata</summary><pre>",
        html.escape(json.dumps(meta, indent=2, default=str)),
        "</pre></details>",
        "<p class=muted>Data: <code>trace/*.parquet</code>, <code>metrics.json</code>, "
        "<code>run.json</code> beside this file. Hover a metric's name for its definition.</p>",
        "</body></html>",
    ]
    out = folder / runfolder.REPORT_FILE
    runfolder.write_text(out, "".join(parts))
    return out


def _tables(m: dict) -> list[str]:
    """The transfers' and flows' tables (columns labelled by the registry)."""

    def cols(scope: str, keys: list[str], extra: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return extra + [(k, registry.METRICS[f"{scope}.{k}"].heading()) for k in keys]

    deadlines = any("deadline_s" in t for t in m["transfers"])
    extra = (
        [("deadline_s", "deadline (s)"), ("lateness_s", registry.METRICS["transfers.lateness_s"].heading())] if deadlines else []
    )
    parts = [
        "<h2>Transfers</h2>",
        _table(
            m["transfers"],
            cols(
                "transfers",
                ["mean_goodput_mbps", "cov", "completion_time_s", "completion_deficiency"],
                [("pair", "pair"), ("streams", "streams"), ("bytes", "bytes"), ("retransmissions", "retransmissions")],
            )
            + extra,
        ),
    ]
    flow_keys = [
        "mean_goodput_mbps",
        "std_goodput_mbps",
        "cov",
        "smoothness_mbps",
        "responsiveness_rtt",
        "aggressiveness_mbps",
        "convergence_rtt",
        "retransmissions",
        "timeouts",
    ]
    flow_table = _table(
        m["flows"],
        cols(
            "flows",
            flow_keys,
            [("flow_id", "flow"), ("pair", "pair"), ("stream", "stream"), ("variant", "variant"), ("start_s", "start (s)")],
        ),
    )
    if len(m["flows"]) > 24:
        parts.append(f"<details><summary><b>Flows</b> ({len(m['flows'])})</summary>{flow_table}</details>")
    else:
        parts += ["<h2>Flows</h2>", flow_table]
    return parts
