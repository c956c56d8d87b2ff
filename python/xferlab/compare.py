"""Two runs of one scenario side by side, as seed 004 compares NS-2 and NXE ("Comparaison
NS-2 et NXE": the same dumbbell in the simulator and on the testbed, goodput over time
of each, next to each other): a simulator run against an imported testbed run, two seeds,
two versions.

One self-contained HTML file: the main metrics of both runs with their relative
difference, aggregate goodput of both on one axis, per-flow goodput and congestion windows
side by side, per-flow mean goodput of A against B, and the goodput distributions.
"""

from __future__ import annotations

import base64
import html
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from . import metrics, registry, runfolder
from .report import CSS, MAX_LINES, fmt, png

#: The metrics set side by side (every run metric of the registry, in its order).
from .runinfo import differences
from .trace import Trace

COMPARED = [m.key for m in registry.RUN_METRICS if m.key not in ("ideal_goodput_mbps",)]


@dataclass
class Run:
    folder: Path
    label: str
    trace: Trace
    metrics: dict

    @property
    def resolved(self) -> dict:
        return self.trace.run.get("resolved") or {}


def load(folder: Path, label: str) -> Run:
    """A run to compare: its trace, checked against the contract, and its metrics computed
    from it as its report's are (metrics.json, derived from the same trace, may be from an
    older xferlab, or damaged)."""
    trace = runfolder.load_trace(folder)
    try:
        m = metrics.compute(trace)
    except registry.MetricsError as e:
        raise runfolder.RunFolderError(f"{folder}: {e}") from None
    return Run(Path(folder), label, trace, m)


def _describe(run: Run) -> str:
    prov = run.trace.provenance
    kind = prov.producer + (f" {prov.source}" if prov.source else "")
    seed = run.trace.run.get("seed")
    return f"{run.resolved.get('name', run.folder.name)} ({kind}{'' if seed is None else f', seed {seed}'})"


# ----------------------------------------------------------------------------- scenarios


def scenario_differences(a: Run, b: Run) -> list[tuple[str, object, object]]:
    """Resolved fields that differ, per-pair and per-flow settings included (seed-drawn start
    times and what one run does not know — None, as in imports — are left out)."""
    return differences(a.trace.info, b.trace.info)


# ----------------------------------------------------------------------------- metrics


def relative_difference(a, b):
    """(B − A)/|A|; None when either is unknown or A is 0."""
    if a is None or b is None or not a:
        return None
    return (b - a) / abs(a)


def metric_rows(a: dict, b: dict) -> list[dict]:
    """Each metric known to at least one run: label, unit, both values and their difference."""
    rows = []
    for key in COMPARED:
        va, vb = registry.get(a, key), registry.get(b, key)
        if va is None and vb is None:
            continue
        rows.append({"key": key, "a": va, "b": vb, "rel": relative_difference(va, vb)})
    return rows


# ----------------------------------------------------------------------------- figures


def _t_mid(run: Run) -> float:
    return float(run.resolved.get("goodput_interval_s") or 0.0) / 2


def fig_aggregate(a: Run, b: Run) -> bytes:
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for run, color in ((a, "C0"), (b, "C3")):
        gp = run.trace.df("goodput")
        roles = run.trace.df("flows")[["flow_id", "role"]]
        gp = gp.merge(roles, on="flow_id")
        agg = gp[gp["role"] == "transfer"].groupby("t")["goodput_mbps"].sum()
        ax.plot(agg.index + _t_mid(run), agg.values, color=color, lw=1.2, label=f"{run.label}: {_describe(run)}")
    for run, color in ((a, "C0"), (b, "C3")):
        ideal = run.resolved.get("ideal_goodput_mbps")
        if ideal:
            ax.axhline(ideal, color=color, ls="--", lw=0.7, alpha=0.7, label=f"{run.label}: ideal r_TP")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("aggregate goodput G(t), Mbit/s")
    ax.set_ylim(bottom=0)
    ax.set_title("aggregate goodput over time")
    ax.legend(loc="lower right")
    return png(fig)


def _shown(ids: list) -> list:
    return ids if len(ids) <= MAX_LINES else ids[:: max(1, len(ids) // MAX_LINES)][:MAX_LINES]


def fig_flows_side_by_side(a: Run, b: Run) -> bytes:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharey=True)
    for ax, run in zip(axes, (a, b), strict=True):
        gp = run.trace.df("goodput")
        ids = sorted(gp["flow_id"].unique())
        for fid in _shown(ids):
            s = gp[gp["flow_id"] == fid].sort_values("t")
            ax.plot(s["t"] + _t_mid(run), s["goodput_mbps"], lw=0.8, label=f"flow {fid}")
        ax.set_title(f"{run.label}: {_describe(run)}", fontsize=8)
        ax.set_xlabel("time (s)")
        ax.set_ylim(bottom=0)
        if 0 < len(ids) <= 8:
            ax.legend(ncol=2, loc="lower right")
    axes[0].set_ylabel("goodput per flow, Mbit/s")
    return png(fig)


def fig_cwnd_side_by_side(a: Run, b: Run) -> bytes | None:
    if a.trace.tcp.num_rows == 0 and b.trace.tcp.num_rows == 0:
        return None
    # Windows are in segments: one y axis only when both runs count the same segment size.
    same_mss = a.resolved.get("mss") == b.resolved.get("mss")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharey=same_mss)
    for ax, run in zip(axes, (a, b), strict=True):
        tcp = run.trace.df("tcp")
        if tcp.empty or "cwnd" not in tcp:
            ax.text(0.5, 0.5, "no sender samples", ha="center", va="center", transform=ax.transAxes)
        else:
            ids = sorted(tcp["flow_id"].unique())
            for fid in _shown(ids):
                s = tcp[tcp["flow_id"] == fid]
                ax.plot(s["t"], s["cwnd"], lw=0.8, label=f"flow {fid}")
            if 0 < len(ids) <= 8:
                ax.legend(ncol=2, loc="upper right")
        ax.set_title(f"{run.label}: congestion window (MSS {run.resolved.get('mss', '?')} B)", fontsize=8)
        ax.set_xlabel("time (s)")
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("cwnd (segments)")
    return png(fig)


def flow_pairs(a: dict, b: dict) -> pd.DataFrame:
    """Per-flow mean goodput of A and B, matched by (pair, stream)."""
    fa = pd.DataFrame(a["flows"])[["pair", "stream", "mean_goodput_mbps"]] if a["flows"] else pd.DataFrame()
    fb = pd.DataFrame(b["flows"])[["pair", "stream", "mean_goodput_mbps"]] if b["flows"] else pd.DataFrame()
    if fa.empty or fb.empty:
        return pd.DataFrame(columns=["pair", "stream", "a", "b"])
    return fa.merge(fb, on=["pair", "stream"], suffixes=("_a", "_b")).rename(
        columns={"mean_goodput_mbps_a": "a", "mean_goodput_mbps_b": "b"}
    )


def fig_scatter(a: Run, b: Run) -> bytes | None:
    d = flow_pairs(a.metrics, b.metrics).dropna()
    if d.empty:
        return None
    fig, ax = plt.subplots(figsize=(4.6, 4.4))
    ax.scatter(d["a"], d["b"], s=18, color="C0", zorder=3)
    hi = float(max(d["a"].max(), d["b"].max())) * 1.08 or 1.0
    ax.plot([0, hi], [0, hi], color="k", lw=0.7, ls="--", label="A = B")
    ax.set_xlim(0, hi)
    ax.set_ylim(0, hi)
    ax.set_aspect("equal")
    ax.set_xlabel(f"A: mean goodput per flow, Mbit/s ({len(d)} flows)")
    ax.set_ylabel("B: mean goodput per flow, Mbit/s")
    ax.set_title("per-flow mean goodput, matched by (pair, stream)", fontsize=8)
    ax.legend(loc="upper left")
    return png(fig)


def fig_distributions(a: Run, b: Run) -> bytes:
    """Goodput samples of every flow pooled, on shared 1 % bins of the larger capacity
    (or of the largest sample when no capacity is known): seed 002 fig. 11 for two runs."""
    samples = {}
    for run in (a, b):
        gp = run.trace.df("goodput").merge(run.trace.df("flows")[["flow_id", "role", "start", "end"]], on="flow_id")
        iv = float(run.resolved.get("goodput_interval_s") or 0.0)
        full = gp[(gp["role"] == "transfer") & (gp["t"] >= gp["start"] - 1e-9) & (gp["t"] + iv <= gp["end"] + 1e-9)]
        samples[run.label] = full["goodput_mbps"].to_numpy()
    caps = [r.resolved.get("access_rate_bps") for r in (a, b) if r.resolved.get("access_rate_bps")]
    top = max(caps) / 1e6 if caps else max([float(s.max()) for s in samples.values() if s.size] or [1.0]) * 1.02
    bins = np.linspace(0, top, 101)
    fig, ax = plt.subplots(figsize=(8, 3.0))
    for (label, s), color in zip(samples.items(), ("C0", "C3"), strict=True):
        if s.size:
            w = np.full(s.size, 100.0 / s.size)
            ax.hist(
                np.clip(s, 0, top),
                bins=bins,
                weights=w,
                histtype="step",
                lw=1.2,
                color=color,
                label=f"{label} ({s.size} samples)",
            )
    ax.set_xlabel(f"goodput per flow and interval, Mbit/s (100 bins up to {top:g} Mbit/s)")
    ax.set_ylabel("share of samples (%)")
    ax.set_title("goodput distributions (all flows pooled)")
    ax.legend()
    return png(fig)


# ----------------------------------------------------------------------------- HTML


def _img(data: bytes | None, alt: str) -> str:
    if data is None:
        return ""
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


#: Differing fields listed (a per-flow setting can differ on hundreds of flows).
MAX_DIFFS = 12


def _rel(v) -> str:
    return "—" if v is None else f"{round(100 * v, 1) + 0.0:+.1f} %"  # + 0.0: no "-0.0 %"


def render(a: Run, b: Run, diffs: list) -> str:
    rows = metric_rows(a.metrics, b.metrics)
    table = (
        "<table><thead><tr><th>metric</th><th>A</th><th>B</th><th>(B − A)/A</th></tr></thead><tbody>"
        + "".join(
            f"<tr><td>{html.escape(registry.METRICS[r['key']].heading())}</td><td>{registry.fmt(r['key'], r['a'])}</td>"
            f"<td>{registry.fmt(r['key'], r['b'])}</td><td>{_rel(r['rel'])}</td></tr>"
            for r in rows
        )
        + "</tbody></table>"
    )
    parts = [
        f"{PAGE_HEAD}{html.escape(a.folder.name)} / {html.escape(b.folder.name)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{html.escape(a.resolved.get('name', a.folder.name))}: A vs B</h1>",
        '<table class="kv">',
        f"<tr><td>A</td><td>{html.escape(_describe(a))} — <code>{html.escape(str(a.folder))}</code></td></tr>",
        f"<tr><td>B</td><td>{html.escape(_describe(b))} — <code>{html.escape(str(b.folder))}</code></td></tr>",
        "</table>",
    ]
    if diffs:
        shown = diffs[:MAX_DIFFS]
        items = "".join(f"<li><code>{html.escape(k)}</code>: A = {fmt(va, 6)}, B = {fmt(vb, 6)}</li>" for k, va, vb in shown)
        more = f"<li>… and {len(diffs) - len(shown)} more</li>" if len(diffs) > len(shown) else ""
        parts.append(f"<div class=warn><b>The scenarios differ</b> in {len(diffs)} field(s):<ul>{items}{more}</ul></div>")
    for run in (a, b):
        prov = run.trace.provenance
        if prov.files:
            files = ", ".join(f"<code>{html.escape(str(f))}</code>" for f in prov.files)
            parts.append(f"<p class=muted>{run.label} was imported from {html.escape(str(prov.source))} logs: {files}.</p>")
        for w in prov.warnings:
            parts.append(f"<p class=warn>{run.label}: {html.escape(w)}</p>")
    parts += [
        "<h2>Metrics</h2>",
        table,
        "<p class=muted>— : not known for that run (e.g. no bottleneck counters in an imported run).</p>",
        "<h2>Aggregate goodput</h2>",
        _img(fig_aggregate(a, b), "aggregate goodput of A and B"),
        "<h2>Goodput per flow</h2>",
        _img(fig_flows_side_by_side(a, b), "goodput per flow, A and B"),
        "<h2>Congestion windows</h2>",
        _img(fig_cwnd_side_by_side(a, b), "congestion windows, A and B"),
        "<h2>Per-flow mean goodput, A against B</h2>",
        _img(fig_scatter(a, b), "per-flow mean goodput A vs B") or "<p class=muted>No flows in common.</p>",
        "<h2>Goodput distributions</h2>",
        _img(fig_distributions(a, b), "goodput distributions of A and B"),
        "</body></html>",
    ]
    return "".join(parts)


def default_out(a: Path, b: Path) -> Path:
    return Path(a) / f"compare-{Path(b).resolve().name}.html"


#: How every comparison page begins: an existing --out is replaced only when it is one.
PAGE_HEAD = "<!doctype html><html lang=en><head><meta charset=utf-8><title>xferlab — compare "


def check_out(out: Path) -> None:
    """Refuses, before any work, an --out that is not a file name a page may take: a folder,
    a device or a FIFO, or a file of the user's (anything but an earlier comparison page)."""
    try:
        st = os.stat(out)
    except FileNotFoundError:
        return
    except OSError as e:
        raise runfolder.os_failure(out, e, "cannot use this --out") from None
    if stat.S_ISDIR(st.st_mode):
        raise runfolder.RunFolderError(f"{out} is a folder; --out wants an HTML file name")
    if not stat.S_ISREG(st.st_mode):
        raise runfolder.RunFolderError(f"{out} exists and is not a regular file; choose another --out")
    with runfolder.writing(out, "cannot read"), open(out, "rb") as f:
        head = f.read(len(PAGE_HEAD.encode()))
    if st.st_size and head != PAGE_HEAD.encode():
        raise runfolder.RunFolderError(
            f"{out} exists and is not a comparison page of xferlab; it is left as it is: choose another --out"
        )


def compare(run_a: Path, run_b: Path, out: Path | None = None) -> tuple[Path, list[str]]:
    """Writes the comparison page (atomically); returns its path and the warnings."""
    out = Path(out) if out is not None else default_out(run_a, run_b)
    check_out(out)
    a, b = load(run_a, "A"), load(run_b, "B")
    diffs = scenario_differences(a, b)
    warnings = []
    if diffs:
        names = ", ".join(k for k, _, _ in diffs[:MAX_DIFFS]) + (" …" if len(diffs) > MAX_DIFFS else "")
        warnings.append(f"the scenarios differ ({len(diffs)} fields): {names}")
    page = render(a, b, diffs)
    check_out(out)  # again: the runs took a while
    with runfolder.writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        runfolder.write_text(out, page)
    return out, warnings
