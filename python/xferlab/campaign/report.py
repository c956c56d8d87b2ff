"""The report of a campaign: tables and figures across the sweep, as one HTML file.

Each sweep point is summarised by the mean over its repetitions with a 95 % confidence
interval (Student's t, n − 1 degrees of freedom). Figures follow the seeds: a metric against
RTT per variant (seed 002 fig. 10), total goodput against streams beside Altman's model
(seed 002 fig. 4), completion-time CDFs and their 75th/99th percentiles against RTT
(seed 001 figs. 9 and 12), and goodput distributions.
"""

from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from .. import models, registry
from ..report import CSS, img, plt, png
from .catalog import CampaignFolder
from .spec import CampaignError

#: Sweep fields → the catalog column that holds their resolved value (numbers, not strings).
AXIS_COLUMNS = {
    "protocol.variant": "variant",
    "topology.rtt": "rtt_ms",
    "workload.streams": "streams",
    "topology.pairs": "pairs",
    "workload.congestion_level": "congestion_level",
    "workload.reverse": "reverse_level",
    "workload.background.level": "background_level",
    "topology.buffer": "buffer_packets",
    "topology.bottleneck_rate": "bottleneck_mbps",
    "topology.access_rate": "access_mbps",
}
AXIS_LABELS = {
    "variant": "variant",
    "rtt_ms": "RTT (ms)",
    "streams": "streams",
    "pairs": "pairs",
    "congestion_level": "Cg",
    "reverse_level": "R",
    "background_level": "Bg",
    "buffer_packets": "buffer (packets)",
    "bottleneck_mbps": "C (Mbit/s)",
    "access_mbps": "Ca (Mbit/s)",
}
#: Metrics summarised per point (registry keys; their catalog columns hold the values).
SUMMARY = [
    "aggregate_goodput_mbps",
    "mean_flow_goodput_mbps",
    "jain_index",
    "mean_flow_cov",
    "efficiency",
    "completion.mean_s",
    "completion.p99_s",
]
#: catalog column → registry key
_KEY = {m.catalog_column: m.key for m in registry.RUN_METRICS}


def t975(n: int) -> float:
    """Two-sided 95 % Student quantile for a mean of n samples (n − 1 degrees of freedom)."""
    from scipy import stats  # 1 s to import: only when a campaign's intervals are drawn

    return float(stats.t.ppf(0.975, n - 1)) if n >= 2 else math.nan


def mean_ci(values) -> tuple[float, float, int]:
    """Mean, half-width of its 95 % confidence interval (NaN below 2 samples), count."""
    a = np.asarray([v for v in values if v is not None and not pd.isna(v)], dtype=float)
    if a.size == 0:
        return math.nan, math.nan, 0
    if a.size == 1:
        return float(a[0]), math.nan, 1
    return float(a.mean()), t975(a.size) * float(a.std(ddof=1)) / math.sqrt(a.size), int(a.size)


def _col(key: str) -> str:
    return registry.METRICS[key].catalog_column


def _heading(col: str) -> str:
    return registry.METRICS[_KEY[col]].heading() if col in _KEY else col


def load(folder: Path) -> tuple[dict, pd.DataFrame]:
    """The manifest and the runs table of a campaign folder."""
    try:
        with CampaignFolder(Path(folder), None) as f:
            df = f.db.sql("SELECT * FROM runs ORDER BY point, repetition").to_arrow_table().to_pandas()
            manifest = f.manifest
    except duckdb.IOException as e:
        raise CampaignError(f"{folder}: cannot read the catalog ({e}); is a campaign still running there?") from None
    return manifest, df


def axes_of(manifest: dict, df: pd.DataFrame) -> list[str]:
    """Columns of df that hold the swept axes (a column per axis, numbers where possible)."""
    cols = []
    for field in [*manifest.get("sweep", {}), *manifest.get("zip", {})]:
        col = AXIS_COLUMNS.get(field)
        if col is None:
            col = "axis:" + field
            df[col] = df["params"].map(lambda p, k=field: str(json.loads(p).get(k)))
        cols.append(col)
    return cols


def _label(col: str) -> str:
    return AXIS_LABELS.get(col, col.removeprefix("axis:"))


def _series_name(keys: tuple, cols: list[str]) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in keys) if cols else "all"


def points_table(ok: pd.DataFrame, axes: list[str], counts: pd.DataFrame) -> pd.DataFrame:
    rows = []
    groups = ok.groupby(axes, sort=True, dropna=False) if axes else [((), ok)]
    for keys, g in groups:
        keys = keys if isinstance(keys, tuple) else (keys,)
        row = dict(zip(axes, keys, strict=True))
        row["runs"] = len(g)
        for col in map(_col, SUMMARY):
            m, h, _ = mean_ci(g[col])
            row[col], row[col + "_ci"] = m, h
        rows.append(row)
    return pd.DataFrame(rows)


def _yerr(g: pd.DataFrame, y: str) -> np.ndarray:
    """Asymmetric error bars: the 95 % CI clipped to the metric's valid range (a Jain index
    never above 1, a goodput never below 0)."""
    mid, half = g[y].to_numpy(dtype=float), g[y + "_ci"].fillna(0).to_numpy(dtype=float)
    key = _KEY.get(y)
    if key is None:
        return np.vstack([half, half])
    bounds = [registry.clip(key, m - h, m + h) for m, h in zip(mid, half, strict=True)]
    return np.vstack([mid - np.array([lo for lo, _ in bounds]), np.array([hi for _, hi in bounds]) - mid])


def _log_if_wide(ax, values: pd.Series) -> None:
    """A log x axis when the values span more than a decade (RTTs 0.1–100 ms), as everywhere."""
    if values.max() > 10 * max(values.min(), 1e-9):
        ax.set_xscale("log")


def _errorbar_lines(ax, table: pd.DataFrame, x: str, y: str, series: list[str]) -> None:
    groups = table.groupby(series, sort=True) if series else [((), table)]
    for keys, g in groups:
        keys = keys if isinstance(keys, tuple) else (keys,)
        g = g.sort_values(x)
        ax.errorbar(g[x], g[y], yerr=_yerr(g, y), marker="o", ms=3, capsize=3, lw=1, label=_series_name(keys, series))


def fig_vs_rtt(table: pd.DataFrame, axes: list[str]) -> bytes:
    series = [a for a in axes if a != "rtt_ms"]
    metrics = ["mean_flow_goodput_mbps", "jain_index", "mean_flow_cov"]
    fig, axs = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, key in zip(axs, metrics, strict=True):
        _errorbar_lines(ax, table, "rtt_ms", _col(key), series)
        ax.set_xlabel("RTT (ms)")
        ax.set_ylabel(registry.METRICS[key].heading())
        _log_if_wide(ax, table["rtt_ms"])
    axs[0].legend(title=", ".join(map(_label, series)) or None)
    fig.suptitle("Metrics against RTT (mean ± 95 % CI over repetitions; seed 002 fig. 10)")
    fig.tight_layout()
    return png(fig)


def fig_vs_streams(table: pd.DataFrame, ok: pd.DataFrame, axes: list[str]) -> bytes:
    series = [a for a in axes if a != "streams"]
    fig, ax = plt.subplots(figsize=(7, 4))
    _errorbar_lines(ax, table, "streams", "aggregate_goodput_mbps", series)
    # Altman's model with N = pairs × streams parallel AIMD streams and C = r_TP (β = 0.5, Reno).
    pairs = int(ok["pairs"].median())
    capacity = float(ok["ideal_goodput_mbps"].median())
    n = np.linspace(1, table["streams"].max(), 200)
    ax.plot(n, [models.altman_goodput(k * pairs, capacity, 0.5) for k in n], "k--", lw=1, label=f"Altman x(N·{pairs}), β = 0.5")
    ax.axhline(capacity, color="grey", lw=0.6, ls=":", label="r_TP")
    ax.set_xlabel("parallel streams per pair")
    ax.set_ylabel("total goodput (Mbit/s)")
    ax.set_title("Total goodput against streams (seed 002 fig. 4)")
    ax.legend(title=", ".join(map(_label, series)) or None)
    return png(fig)


def _completion_times(g: pd.DataFrame) -> list[float]:
    out = []
    for m in g["metrics"]:
        for t in json.loads(m).get("transfers", []):
            if t.get("completion_time_s") is not None:
                out.append(t["completion_time_s"])
    return out


def fig_completion(ok: pd.DataFrame, table: pd.DataFrame, axes: list[str]) -> bytes:
    has_rtt = "rtt_ms" in axes
    fig, axs = plt.subplots(1, 2 if has_rtt else 1, figsize=(11 if has_rtt else 6.5, 3.8), squeeze=False)
    ax = axs[0][0]
    groups = list(ok.groupby(axes, sort=True)) if axes else [((), ok)]
    for i, (keys, g) in enumerate(groups[:16]):
        keys = keys if isinstance(keys, tuple) else (keys,)
        t = np.sort(_completion_times(g))
        if t.size:
            ax.step(t, np.arange(1, t.size + 1) / t.size, where="post", lw=1, label=_series_name(keys, axes), color=f"C{i % 10}")
    ax.set_xlabel("completion time (s)")
    ax.set_ylabel("CDF")
    ax.set_title("Completion times, all repetitions (seed 001 fig. 9)")
    ax.legend(title=", ".join(map(_label, axes)) or None, fontsize=6)
    if has_rtt:
        ax = axs[0][1]
        series = [a for a in axes if a != "rtt_ms"]
        p = ok.groupby(axes, sort=True)
        rows = []
        for keys, g in p:
            keys = keys if isinstance(keys, tuple) else (keys,)
            row = dict(zip(axes, keys, strict=True))
            for q in ("completion_p75_s", "completion_p99_s"):
                row[q], row[q + "_ci"], _ = mean_ci(g[q])
            rows.append(row)
        qt = pd.DataFrame(rows)
        for q, style in (("completion_p75_s", "-"), ("completion_p99_s", "--")):
            groups = qt.groupby(series, sort=True) if series else [((), qt)]
            for i, (keys, g) in enumerate(groups):
                keys = keys if isinstance(keys, tuple) else (keys,)
                g = g.sort_values("rtt_ms")
                name = f"{_series_name(keys, series)} p{q[12:14]}"
                ax.errorbar(g["rtt_ms"], g[q], yerr=_yerr(g, q), ls=style, marker="o", ms=3, capsize=3, lw=1,
                            color=f"C{i % 10}", label=name)  # fmt: skip
        ax.set_xlabel("RTT (ms)")
        _log_if_wide(ax, qt["rtt_ms"])
        ax.set_ylabel("completion time (s)")
        ax.set_title("75th and 99th percentiles (seed 001 fig. 12)")
        ax.legend(fontsize=6)
    fig.tight_layout()
    return png(fig)


def makespan_table(ok: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """Per sweep point, the makespans over its repetitions as seed 001 judges a schedule:
    the deficiency of the mean (Table 2) and of the 99th percentile (Table 3) against the
    ideal (Σ v)/r_TP, the standard deviation (fig. 11b), and the slot to reserve for 75 % and
    99 % completion (fig. 12: the 75th and 99th percentiles)."""
    rows = []
    groups = ok.groupby(axes, sort=True, dropna=False) if axes else [((), ok)]
    for keys, g in groups:
        keys = keys if isinstance(keys, tuple) else (keys,)
        m = g["makespan_s"].dropna().to_numpy(dtype=float)
        ideal = float(g["ideal_makespan_s"].median()) if g["ideal_makespan_s"].notna().any() else math.nan
        if not m.size:
            continue
        p75, p99 = np.percentile(m, [75, 99])
        rows.append(
            {
                **dict(zip(axes, keys, strict=True)),
                "runs": int(m.size),
                "ideal_makespan_s": ideal,
                "makespan_s": float(m.mean()),
                "mean_deficiency": float(m.mean()) / ideal - 1,
                "p99_deficiency": float(p99) / ideal - 1,
                "std_s": float(m.std(ddof=1)) if m.size > 1 else math.nan,
                "slot_p75_s": float(p75),
                "slot_p99_s": float(p99),
            }
        )
    return pd.DataFrame(rows)


#: Columns of the makespan table: (column, heading, format).
MAKESPAN_COLUMNS = [
    ("runs", "runs", "{:.0f}"),
    ("ideal_makespan_s", "ideal makespan (s)", "{:.2f}"),
    ("makespan_s", "mean makespan (s)", "{:.2f}"),
    ("mean_deficiency", "deficiency of the mean (Table 2)", "{:.1%}"),
    ("p99_deficiency", "deficiency of the p99 (Table 3)", "{:.1%}"),
    ("std_s", "σ (s, fig. 11b)", "{:.3f}"),
    ("slot_p75_s", "slot for 75 % (s)", "{:.2f}"),
    ("slot_p99_s", "slot for 99 % (s)", "{:.2f}"),
]


def _makespan_html(t: pd.DataFrame, axes: list[str]) -> str:
    head = "".join(f"<th>{html.escape(_label(a))}</th>" for a in axes)
    head += "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in MAKESPAN_COLUMNS)
    body = ""
    for _, r in t.iterrows():
        cells = [html.escape(f"{r[a]:g}" if isinstance(r[a], float) else str(r[a])) for a in axes]
        cells += ["—" if pd.isna(r[c]) else html.escape(f.format(r[c])) for c, _, f in MAKESPAN_COLUMNS]
        body += "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def fig_makespan_vs_rtt(t: pd.DataFrame, axes: list[str]) -> bytes:
    """Seed 001 figs. 11b and 12: the makespan's standard deviation, and the slots for 75 %
    and 99 % completion, against the RTT, one line per other sweep point."""
    series = [a for a in axes if a != "rtt_ms"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    groups = t.groupby(series, sort=True) if series else [((), t)]
    for i, (keys, g) in enumerate(groups):
        keys = keys if isinstance(keys, tuple) else (keys,)
        g = g.sort_values("rtt_ms")
        name = _series_name(keys, series)
        a1.plot(g["rtt_ms"], g["std_s"], marker="o", ms=3, lw=1, color=f"C{i % 10}", label=name)
        a2.plot(g["rtt_ms"], g["slot_p75_s"], marker="o", ms=3, lw=1, color=f"C{i % 10}", label=f"{name} p75")
        a2.plot(g["rtt_ms"], g["slot_p99_s"], marker="s", ms=3, lw=1, ls="--", color=f"C{i % 10}", label=f"{name} p99")
    for ax, what in ((a1, "σ of the makespan (s)"), (a2, "makespan percentile (s)")):
        ax.set_xlabel("RTT (ms)")
        ax.set_ylabel(what)
        _log_if_wide(ax, t["rtt_ms"])
    a1.set_title("standard deviation over repetitions (seed 001 fig. 11b)", fontsize=9)
    a2.set_title("slot to reserve for 75 % / 99 % completion (seed 001 fig. 12)", fontsize=9)
    a1.legend(fontsize=6)
    a2.legend(fontsize=6)
    fig.tight_layout()
    return png(fig)


def _xticks(ax, labels: list[str], first: int) -> None:
    slanted = len(labels) > 6
    ax.set_xticks(range(first, first + len(labels)), labels, rotation=60 if slanted else 0, ha="right" if slanted else "center")


def fig_goodput_distribution(ok: pd.DataFrame, axes: list[str]) -> bytes:
    groups = list(ok.groupby(axes, sort=True)) if axes else [((), ok)]
    data, labels = [], []
    for keys, g in groups:
        keys = keys if isinstance(keys, tuple) else (keys,)
        flows = [f["mean_goodput_mbps"] for m in g["metrics"] for f in json.loads(m).get("flows", [])]
        data.append([x for x in flows if x is not None])
        labels.append(_series_name(keys, axes))
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(data) + 2), 4))
    ax.boxplot(data, showmeans=True, widths=0.6)
    _xticks(ax, labels, 1)
    ax.set_ylabel("flow mean goodput (Mbit/s)")
    ax.set_title(f"Distribution of the flows' mean goodputs over all repetitions ({', '.join(map(_label, axes)) or 'all runs'})")
    return png(fig)


def fig_points(table: pd.DataFrame, axes: list[str]) -> bytes:
    """Fallback when neither RTT nor streams is swept: total goodput per point."""
    labels = [_series_name(tuple(r[a] for a in axes), axes) for _, r in table.iterrows()]
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(labels) + 2), 3.6))
    ax.bar(range(len(labels)), table["aggregate_goodput_mbps"], yerr=_yerr(table, "aggregate_goodput_mbps"), capsize=3)
    _xticks(ax, labels, 0)
    ax.set_ylabel("total goodput (Mbit/s)")
    ax.set_title("Total goodput per sweep point (mean ± 95 % CI)")
    return png(fig)


def _cell(col: str, v, ci=None) -> str:
    """A mean with its 95 % CI, each with the metric's own significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    key = _KEY.get(col)
    if key is None:
        return html.escape(registry.format_value(v) if isinstance(v, (float, np.floating)) else str(v))
    d = registry.METRICS[key]
    if ci is None or (isinstance(ci, float) and math.isnan(ci)):
        return html.escape(d.format(float(v) if isinstance(v, (float, np.floating)) else v))
    return f"{html.escape(d.format(float(v)))} ± {html.escape(registry.format_value(float(ci), 2))}"


def render(folder: Path) -> Path:
    """Writes ``DIR/report/index.html`` (+ figures, and ``runs.parquet``: the catalog's table)."""
    folder = Path(folder)
    manifest, df = load(folder)
    out = folder / "report"
    out.mkdir(exist_ok=True)
    ok = df[df["status"] == "ok"].copy()
    failed = df[df["status"] != "ok"]
    axes = axes_of(manifest, ok)
    axes_of(manifest, failed := failed.copy())
    df.drop(columns=[c for c in df.columns if c.startswith("axis:")]).to_parquet(out / "runs.parquet", index=False)

    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>xferlab campaign — {html.escape(manifest['name'])}</title><style>{CSS}</style></head><body>",
        f"<h1>Campaign {html.escape(manifest['name'])}</h1>",
        f"<p class=muted>{html.escape(manifest.get('description', '') or '')}</p>",
    ]
    planned = manifest.get("runs", 0)
    parts.append(
        f"<p>{len(ok)} run(s) ok, {len(failed)} failed, {planned - len(df)} not run yet, of {planned} planned "
        f"({manifest.get('repetitions')} repetition(s) per point) on the <b>{html.escape(manifest.get('backend', ''))}</b> "
        "backend. Values are means over repetitions ± the half-width of their 95 % confidence interval (Student's t).</p>"
    )
    if planned - len(df) > 0:
        parts.append("<p class=warn>The campaign is incomplete: run the same <code>xferlab campaign run</code> to finish it.</p>")
    if len(ok):
        parts += _results_html(out, ok, axes, df)
    if len(failed):
        rows = "".join(
            f"<tr><td>{html.escape(r.run_key)}</td><td>{html.escape(str(json.loads(r.params)))}</td><td>{r.repetition}</td>"
            f"<td><pre>{html.escape(str(r.error))}</pre></td></tr>"
            for r in failed.itertuples()
        )
        parts += [
            "<h2>Failed runs</h2>",
            f"<table><thead><tr><th>run</th><th>point</th><th>repetition</th><th>error</th></tr></thead><tbody>{rows}</tbody></table>",
        ]
    parts += [
        "<h2>Data</h2>",
        "<p>Each run's folder (trace, metrics, report) is <code>runs/&lt;run_key&gt;/</code>. The catalog "
        "<code>catalog.duckdb</code> holds one row per run (parameters, status, flat metrics, the whole metrics JSON); "
        "<code>report/runs.parquet</code> is a copy of it. For example:</p>",
        '<pre>duckdb catalog.duckdb "SELECT variant, rtt_ms, count(*) AS n, avg(jain_index) FROM runs '
        "WHERE status = 'ok' GROUP BY ALL ORDER BY ALL\"</pre>",
        "<details><summary>Campaign manifest</summary><pre>",
        html.escape(json.dumps(manifest, indent=2, default=str)),
        "</pre></details></body></html>",
    ]
    path = out / "index.html"
    tmp = out / f".index.html.tmp-{os.getpid()}"
    tmp.write_text("".join(parts))
    os.replace(tmp, path)
    return path


def _results_html(out: Path, ok: pd.DataFrame, axes: list[str], df: pd.DataFrame) -> list[str]:
    """The sweep-point table, the makespan table of scheduled runs, and the figures."""
    parts: list[str] = []
    table = points_table(ok, axes, df)
    volume = ok["completion_mean_s"].notna().any()
    cols = [*axes, "runs", *[_col(k) for k in SUMMARY if volume or not k.startswith("completion")]]
    head = "".join(f"<th>{html.escape(_label(c) if c in axes else _heading(c))}</th>" for c in cols)
    body = ""
    for _, r in table.iterrows():
        body += "<tr>" + "".join(f"<td>{_cell(c, r[c], r.get(c + '_ci'))}</td>" for c in cols) + "</tr>"
    parts += ["<h2>Sweep points</h2>", f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"]
    # Seed 001's makespan table judges a schedule: shown for runs planned from requests.
    scheduled = "requests_rejected" in ok and ok["requests_rejected"].notna().any() and ok["makespan_s"].notna().any()
    mk = makespan_table(ok, axes) if scheduled else pd.DataFrame()
    if len(mk):
        parts += [
            "<h2>Makespans (seed 001)</h2>",
            "<p class=muted>The makespan of each repetition (first start to last completion) against the ideal "
            "(Σ v)/r_TP; the slot a scheduler should reserve for 75 % and 99 % completion.</p>",
            _makespan_html(mk, axes),
        ]
    parts.append("<h2>Figures</h2>")
    figs = []
    if len(mk) and "rtt_ms" in axes and mk["rtt_ms"].nunique() > 1:
        figs.append(("makespan", fig_makespan_vs_rtt(mk, axes), "makespan spread and slots against RTT"))
    if "rtt_ms" in axes and table["rtt_ms"].nunique() > 1:
        figs.append(("vs_rtt", fig_vs_rtt(table, axes), "metrics against RTT per variant"))
    if "streams" in axes and table["streams"].nunique() > 1:
        figs.append(("vs_streams", fig_vs_streams(table, ok, axes), "total goodput against streams with Altman's model"))
    if volume:
        figs.append(("completion", fig_completion(ok, table, axes), "completion-time CDFs and percentiles"))
    if not figs:
        figs.append(("points", fig_points(table, axes), "total goodput per sweep point"))
    figs.append(("distribution", fig_goodput_distribution(ok, axes), "goodput distributions"))
    return parts + [img(out, name, data, alt) for name, data, alt in figs]
