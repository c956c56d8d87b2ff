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
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from .trace import Trace  # noqa: E402

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


def _png(fig) -> bytes:
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


def fig_goodput(trace: Trace, resolved: dict, m: dict) -> bytes:
    gp, flows, link = trace.df("goodput"), trace.df("flows"), trace.df("link")
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5.6), sharex=True)
    agg = gp.groupby("t")["goodput_mbps"].sum()
    iv = resolved["goodput_interval_s"]
    ax1.plot(agg.index + iv / 2, agg.values, color="C0", lw=1.2, label="aggregate goodput G(t)")
    bott = link[link["link"] == "bottleneck"]
    if len(bott):
        ax1.plot(
            bott["t"] + resolved["link_interval_s"] / 2,
            bott["throughput_mbps"],
            color="C1",
            lw=0.4,
            alpha=0.35,
            label="bottleneck throughput X(t)",
        )
    if resolved.get("ideal_goodput_mbps") is not None:  # unknown for an import without --capacity
        ax1.axhline(resolved["ideal_goodput_mbps"], color="k", ls="--", lw=0.8, label="ideal goodput r_TP")
    w = m["window"]
    if w["kind"] != "all":
        for a in (ax1, ax2):
            a.axvspan(w["start_s"], w["end_s"], color="C2", alpha=0.08, lw=0)
    ax1.set_ylabel("Mbit/s")
    ax1.set_ylim(bottom=0)
    ax1.legend(loc="lower right")
    ax1.set_title(f"{resolved['name']}: goodput over time")
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
    return _png(fig)


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
    ax.legend(ncol=4)
    return _png(fig)


def fig_cwnd(trace: Trace, resolved: dict) -> bytes:
    tcp = trace.df("tcp")
    if tcp.empty:  # an import without sender-side samples
        return None
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ids = sorted(tcp["flow_id"].unique())
    shown = ids if len(ids) <= MAX_LINES else ids[:: max(1, len(ids) // MAX_LINES)][:MAX_LINES]
    for fid in shown:
        s = tcp[tcp["flow_id"] == fid]
        ax.plot(s["t"], s["cwnd"], lw=0.8, label=f"flow {fid}")
    if resolved.get("bdp_packets"):
        ax.axhline(resolved["bdp_packets"] / max(1, len(ids)), color="k", ls=":", lw=0.8, label="fair share of the BDP")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("cwnd (segments)")
    ax.set_title("congestion window per flow" + ("" if len(ids) <= MAX_LINES else f" ({len(shown)} of {len(ids)})"))
    ax.set_ylim(bottom=0)
    ax.legend(ncol=4)
    return _png(fig)


def fig_queue(trace: Trace, resolved: dict) -> bytes:
    link = trace.df("link")
    b = link[link["link"] == "bottleneck"]
    if b.empty:  # imported runs have no bottleneck counters
        return None
    fig, ax = plt.subplots(figsize=(8, 2.8))
    ax.plot(b["t"], b["queue_max_pkts"], lw=0.6, color="C0", label="queue (max per interval)")
    ax.axhline(resolved["buffer_packets"], color="k", ls="--", lw=0.8, label=f"buffer B = {resolved['buffer_packets']}")
    ax.set_ylabel("packets")
    ax.set_xlabel("time (s)")
    ax2 = ax.twinx()
    ax2.bar(b["t"], b["drops"], width=resolved["link_interval_s"], color="C3", alpha=0.6, label="drops")
    ax2.set_ylabel("drops per interval")
    ax.set_title("bottleneck queue and drops")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper right")
    return _png(fig)


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
    return _png(fig)


# ----------------------------------------------------------------------------- HTML

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1000px;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{padding:.25em .6em;border-bottom:1px solid #eee;text-align:right}
th{background:#f6f6f6} td:first-child,th:first-child{text-align:left}
.muted{color:#777} img{max-width:100%;display:block;margin:.8em 0}
pre{background:#f6f6f6;padding:.8em;overflow:auto;font-size:.8em}
.kv td:first-child{color:#555} .warn{background:#fff4e0;border-left:4px solid #f0a000;padding:.5em 1em}
"""


def _fmt(v, digits=3):
    if v is None:
        return "—"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.1f}"
        return f"{v:.{digits}g}" if abs(v) < 1 else f"{v:.{max(digits, 4)}g}"
    return html.escape(str(v))


def _table(rows: list[dict], cols: list[tuple[str, str]]) -> str:
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in cols)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(k))}</td>" for k, _ in cols) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _kv(pairs: list[tuple[str, object]]) -> str:
    return '<table class="kv">' + "".join(f"<tr><td>{html.escape(k)}</td><td>{_fmt(v)}</td></tr>" for k, v in pairs) + "</table>"


def _img(folder: Path, name: str, data: bytes | None, alt: str) -> str:
    if data is None:
        return ""
    (folder / "figures").mkdir(exist_ok=True)
    (folder / "figures" / f"{name}.png").write_bytes(data)
    b64 = base64.b64encode(data).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def _imported_setup(run_meta: dict) -> list[tuple[str, object]]:
    """The setup of an imported run: what the logs and the user's options told, "—" elsewhere."""
    r, imp = run_meta["resolved"], run_meta["imported"]
    cap = r.get("bottleneck_rate_bps")
    return [
        ("backend", f"import ({imp.get('format')})"),
        ("pairs × streams", f"{r['pairs']} × {r['streams']}"),
        ("variant", r["variant"]),
        ("bottleneck capacity", f"{cap / 1e6:g} Mbit/s (given)" if cap else None),
        ("RTT (smallest seen)", f"{r['rtt_s'] * 1e3:.3g} ms" if r.get("rtt_s") else None),
        ("MSS", r.get("mss")),
        ("goodput measured by", imp.get("goodput_side")),
        ("workload", f"{r['volume_bytes']:,} bytes per transfer (mean)" if r.get("volume_bytes") else "duration-bound"),
    ]


def _emulation_rows(run_meta: dict) -> list[tuple[str, object]]:
    """What a netns run adds to the setup table: time dilation and the delay line's punctuality."""
    env, stats = run_meta.get("environment") or {}, run_meta.get("stats") or {}
    rows = []
    if "scale" in env:
        e = env.get("emulated", {})
        rows.append(
            (
                "emulated as",
                f"scale K = {env['scale']:g}: {e.get('bottleneck_rate_bps', 0) / 1e6:g} Mbit/s bottleneck, "
                f"{e.get('rtt_s', 0) * 1e3:g} ms RTT, times × K",
            )
        )
    if env.get("congestion_controls"):
        rows.append(("kernel congestion controls", ", ".join(f"{k} → {v}" for k, v in env["congestion_controls"].items())))
    for q, d in sorted(((stats.get("delay_line") or {}).get("queues") or {}).items()):
        rows.append(
            (
                f"delay line queue {q}",
                f"{d.get('delay_ms', 0):g} ms, {d.get('packets', 0):,} packets, late mean {d.get('late_mean_ms', 0):.3f} / "
                f"p99 {d.get('late_p99_ms', 0):.3f} / max {d.get('late_max_ms', 0):.3f} ms",
            )
        )
    return rows


def render(folder: Path, trace: Trace, run_meta: dict, metrics: dict) -> Path:
    """Writes ``figures/*.png`` and a self-contained ``report.html`` into ``folder``."""
    folder = Path(folder)
    r = run_meta["resolved"]
    m = metrics
    figs = [
        ("goodput", fig_goodput(trace, r, m), "goodput over time"),
        ("distribution", fig_distribution(m), "goodput distribution"),
        ("cwnd", fig_cwnd(trace, r), "congestion window"),
        ("queue", fig_queue(trace, r), "bottleneck queue"),
        ("completion", fig_completion(m), "completion times"),
    ]
    w = m["window"]
    summary = [
        ("aggregate goodput G (Mbit/s)", m["aggregate_goodput_mbps"]),
        ("ideal goodput r_TP (Mbit/s)", m["ideal_goodput_mbps"]),
        ("deficiency 1 − G/r_TP", m["deficiency"]),
        ("efficiency G/C", m["efficiency"]),
        ("bottleneck throughput X (Mbit/s)", m["aggregate_throughput_mbps"]),
        ("aggregate goodput CoV", m["aggregate_goodput_cov"]),
        ("mean flow goodput (Mbit/s)", m["mean_flow_goodput_mbps"]),
        ("mean flow CoV", m["mean_flow_cov"]),
        ("Jain index (per stream)", m["jain_index"]),
        ("Jain index (per transfer)", m["jain_index_per_transfer"]),
        ("retransmitted segments", m["retransmissions"]),
        ("retransmission timeouts", m["timeouts"]),
        ("bottleneck drops", m["bottleneck_drops"]),
        ("bottleneck random losses", m["bottleneck_losses"]),
        ("largest bottleneck queue (packets)", m["bottleneck_max_queue_pkts"]),
        ("metrics window", f"{w['kind']}: {w['start_s']:.3f}–{w['end_s']:.3f} s"),
    ]
    setup = (
        _imported_setup(run_meta)
        if run_meta.get("imported")
        else [
            ("backend", run_meta["backend"]),
            ("pairs × streams", f"{r['pairs']} × {r['streams']}"),
            ("variant", r["variant"]),
            ("access / bottleneck", f"{r['access_rate_bps'] / 1e6:g} / {r['bottleneck_rate_bps'] / 1e6:g} Mbit/s"),
            ("RTT", f"{r['rtt_s'] * 1e3:g} ms"),
            (
                "buffer",
                f"{r['buffer_packets']} packets ({r['buffer_packets'] / r['bdp_packets']:.2f} BDP; "
                f"BDP = {r['bdp_packets']:.1f} packets)",
            ),
            ("MTU / MSS", f"{r['mtu']} / {r['mss']} bytes"),
            ("workload", f"{r['duration_s']:g} s per pair" if r["duration_s"] else f"{r['volume_bytes']:,} bytes per transfer"),
            ("seed", run_meta["seed"]),
            ("wall time", f"{run_meta.get('wall_seconds', 0):.2f} s"),
        ]
    )
    if run_meta.get("sim_events") is not None:
        setup.append(("simulated events", run_meta["sim_events"]))
    setup += _emulation_rows(run_meta)
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>xferlab — {html.escape(r['name'])}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(r['name'])}</h1>",
        f"<p class=muted>{html.escape(run_meta.get('scenario', {}).get('description', '') or '')} "
        f"Run on the <b>{html.escape(run_meta['backend'])}</b> backend, {html.escape(run_meta.get('created', ''))}.</p>",
    ]
    for warning in (run_meta.get("environment") or {}).get("warnings", []):
        parts.append(f"<p class=warn>{html.escape(warning)}</p>")
    if run_meta.get("imported"):
        imp = run_meta["imported"]
        files = ", ".join(f"<code>{html.escape(str(f))}</code>" for f in imp.get("files", []))
        note = html.escape(imp.get("note", ""))
        parts.append(f"<p class=warn>Imported from {html.escape(imp.get('format', ''))} logs: {files}. {note}</p>")
    incomplete = (m.get("completion") or {}).get("incomplete")
    if incomplete:
        parts.append(f"<p class=warn>{incomplete} transfer(s) did not complete before the run ended.</p>")
    parts += ["<h2>Summary</h2>", _kv(summary), "<h2>Setup</h2>", _kv(setup)]
    if m.get("completion"):
        c = m["completion"]
        parts += [
            "<h2>Completion times</h2>",
            _kv(
                [
                    ("transfers completed", c.get("count")),
                    ("mean (s)", c.get("mean_s")),
                    ("std (s)", c.get("std_s")),
                    ("p50 / p75 / p99 (s)", " / ".join(_fmt(c.get(k)) for k in ("p50_s", "p75_s", "p99_s"))),
                    ("Jain over completion times", c.get("jain_index")),
                    ("makespan (s)", c.get("makespan_s")),
                    ("ideal makespan (s)", c.get("ideal_makespan_s")),
                    ("makespan deficiency", c.get("makespan_deficiency")),
                ]
            ),
        ]
    parts.append("<h2>Figures</h2>")
    for name, data, alt in figs:
        parts.append(_img(folder, name, data, alt))
    parts += [
        "<h2>Transfers</h2>",
        _table(
            m["transfers"],
            [
                ("pair", "pair"),
                ("streams", "streams"),
                ("mean_goodput_mbps", "mean goodput (Mbit/s)"),
                ("std_goodput_mbps", "std"),
                ("cov", "CoV"),
                ("bytes", "bytes"),
                ("retransmissions", "retransmissions"),
                ("completion_time_s", "completion (s)"),
                ("completion_deficiency", "deficiency"),
            ],
        ),
    ]
    flow_table = _table(
        m["flows"],
        [
            ("flow_id", "flow"),
            ("pair", "pair"),
            ("stream", "stream"),
            ("variant", "variant"),
            ("start_s", "start (s)"),
            ("mean_goodput_mbps", "mean goodput (Mbit/s)"),
            ("std_goodput_mbps", "std"),
            ("cov", "CoV"),
            ("retransmissions", "retransmissions"),
            ("timeouts", "timeouts"),
        ],
    )
    if len(m["flows"]) > 24:
        parts.append(f"<details><summary><b>Flows</b> ({len(m['flows'])})</summary>{flow_table}</details>")
    else:
        parts += ["<h2>Flows</h2>", flow_table]
    given = yaml.safe_dump(run_meta.get("scenario", {}), sort_keys=False)
    parts += [
        "<h2>Scenario (as given)</h2>",
        f"<pre>{html.escape(given)}</pre>",
        "<details><summary>Run metadata</summary><pre>",
        html.escape(json.dumps({k: v for k, v in run_meta.items() if k not in ("scenario", "resolved")}, indent=2, default=str)),
        "</pre></details>",
        "<p class=muted>Data: <code>trace/*.parquet</code>, <code>metrics.json</code>, "
        "<code>run.json</code> beside this file.</p>",
        "</body></html>",
    ]
    out = folder / "report.html"
    tmp = folder / f".report.html.tmp-{os.getpid()}"
    tmp.write_text("".join(parts))
    os.replace(tmp, out)
    return out
