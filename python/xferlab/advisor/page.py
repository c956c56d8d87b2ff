"""The advice as one HTML page, like a run's report: the question, the recommendation
beside the default, the commands that apply it, a figure of every configuration tried, the
tables, and how the figures were made.

The figure answers the trade-off the advice weighs. With competing flows: p99 completion
time against the harm done to them (seed 004's question: speed bought at whose cost?), one
point per configuration, the default and the recommendation marked, the harm the rule
allows as a line. Alone on the path: p99 against parallel streams, a line per variant
(paced ones dashed).
"""

from __future__ import annotations

import html
import shlex
from pathlib import Path

import numpy as np

from ..report import CSS, img, plt, png
from ..runfolder import write_text
from . import apply
from .advice import Advice
from .candidates import DEFAULT, Config
from .present import goodput_text, headline, label, linux_text, method_line, path_line, pct_text, time_text
from .recommend import HARM_SLACK, Row

PAGE_FILE = "index.html"
#: p99 is drawn in these units: the largest that keeps the values above 1.
_UNITS = ((3600.0, "h"), (60.0, "min"), (1.0, "s"))


def _unit(rows: list[Row]) -> tuple[float, str]:
    finite = [r.prediction.p99_s for r in rows if np.isfinite(r.prediction.p99_s)]
    low = min(finite, default=1.0)
    return next(((s, u) for s, u in _UNITS if low >= s), _UNITS[-1])


def figure(a: Advice, rows: list[Row]) -> bytes | None:
    """p99 against harm (with competition) or against streams (without); None when no
    configuration has a finite p99."""
    shown = [r for r in rows if np.isfinite(r.prediction.p99_s)]
    if not shown:
        return None
    scale, unit = _unit(shown)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    if a.question.competing:
        _by_harm(ax, a, shown, scale)
    else:
        _by_streams(ax, shown, scale)
    _mark(ax, a, shown, scale)
    deadline = a.question.deadline_s
    if deadline is not None and deadline <= 1.2 * max(r.prediction.p99_s for r in shown):
        ax.axhline(deadline / scale, color="crimson", lw=1, ls=":", label="deadline")
    elif deadline is not None:
        ax.set_title(f"every configuration shown is far within the deadline ({time_text(deadline)})", fontsize=8)
    ax.set_ylabel(f"predicted p99 completion time ({unit})")
    ax.legend(loc="best", ncol=2)
    fig.tight_layout()
    return png(fig)


def _mark(ax, a: Advice, shown: list[Row], scale: float) -> None:
    """Rings the default and the recommended configuration, when shown."""
    marked = {DEFAULT: ("s", "default"), a.recommended.config: ("*", "recommended")}
    if DEFAULT == a.recommended.config:
        marked = {DEFAULT: ("*", "recommended, default")}
    for c, (mark, text) in marked.items():
        r = next((r for r in shown if r.config == c), None)
        if r is None:
            continue
        x = 100 * (r.harm or 0.0) if a.question.competing else r.config.streams
        ax.scatter([x], [r.prediction.p99_s / scale], s=160, marker=mark, facecolors="none", edgecolors="k", zorder=5)
        ax.annotate(text, (x, r.prediction.p99_s / scale), textcoords="offset points", xytext=(8, 6), fontsize=8)


def _by_harm(ax, a: Advice, rows: list[Row], scale: float) -> None:
    for variant in sorted({r.config.variant for r in rows}):
        mine = [r for r in rows if r.config.variant == variant]
        ax.scatter(
            [100 * (r.harm or 0.0) for r in mine],
            [r.prediction.p99_s / scale for r in mine],
            s=[18 + 8 * r.config.streams for r in mine],
            alpha=0.7,
            label=variant,
        )
    fair = 100 / (a.question.competing + 1)
    default_harm = 100 * (a.default.harm or 0.0) if a.default else 0.0
    ax.axvline(max(fair, default_harm) + 100 * HARM_SLACK, color="grey", lw=1, ls="--", label="harm allowed")
    ax.set_xlabel("harm to the competing flows (% of their goodput alone); marker size: streams")


def _by_streams(ax, rows: list[Row], scale: float) -> None:
    for variant in sorted({r.config.variant for r in rows}):
        for paced in (False, True):
            mine = sorted((r for r in rows if r.config.variant == variant and bool(r.config.pacing) == paced), key=_key)
            if not mine:
                continue
            ax.plot(
                [r.config.streams for r in mine],
                [r.prediction.p99_s / scale for r in mine],
                marker="o",
                ms=3,
                ls="--" if paced else "-",
                label=f"{variant}{', paced' if paced else ''}",
            )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("parallel streams")


def _key(r: Row) -> tuple:
    return (r.config.streams, r.config.pacing or 0.0)


def _table(a: Advice, rows: list[Row]) -> str:
    q = a.question
    head = ["configuration", "seeds", "goodput", "p50", "p99", "on Linux (90 %)"]
    head += [f"P(≤ {time_text(q.deadline_s)})"] if q.deadline_s is not None else []
    head += ["harm"] if q.competing else []
    body = []
    for r in sorted(rows, key=lambda r: r.prediction.p99_s):
        p = r.prediction
        cells = [label(r, a), str(r.repetitions), goodput_text(p.goodput_bps), time_text(p.p50_s), time_text(p.p99_s)]
        cells.append(linux_text(p))
        cells += [pct_text(p.p_deadline)] if q.deadline_s is not None else []
        cells += [pct_text(r.harm)] if q.competing else []
        style = ' style="font-weight:bold;background:#eef8ee"' if r.config == a.recommended.config else ""
        body.append(f"<tr{style}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _apply(a: Advice, c: Config) -> str:
    lines = [*apply.shell_lines(a.question, c), apply.xfer_line(a.question, c)]
    if auto := apply.xfer_auto_argv(a.question, c):
        lines += ["# or, the streams searched during the transfer (xfer --streams auto):", shlex.join(auto)]
    left = ' style="text-align:left"'
    why = "".join(
        f"<tr><td>{html.escape(n)}</td><td{left}>{html.escape(v)}</td><td{left}>{html.escape(w)}</td></tr>"
        for n, v, w in apply.sysctls(a.question, c)
    )
    return (
        "<p>On both hosts, as root, then on the sender:</p>"
        f"<pre>{html.escape(chr(10).join(lines))}</pre>"
        f"<table><thead><tr><th>setting</th><th{left}>value</th><th{left}>why</th></tr></thead><tbody>{why}</tbody></table>"
    )


def render(folder: Path, a: Advice) -> Path:
    """Writes ``folder/index.html`` (figures in ``folder/figures``); returns its path."""
    folder = Path(folder)
    final = a.finalists or a.table
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>xferlab advice — {html.escape(a.recommended.config.label)}</title><style>{CSS}</style></head><body>",
        "<h1>Advice</h1>",
        f"<p>{html.escape(path_line(a.question))}</p>",
        "<h2>Recommended</h2>",
        f"<p><b>{html.escape(headline(a.recommended, a))}</b></p>",
    ]
    if a.default is not None and a.default.config != a.recommended.config:
        parts.append(f"<p>The default ({html.escape(DEFAULT.label)}): {html.escape(headline(a.default, a))}</p>")
    parts += [f"<p class=warn>{html.escape(n)}</p>" for n in a.notes()]
    parts += ["<h2>Apply it</h2>", _apply(a, a.recommended.config)]
    title = f"the contenders, rates ÷ {a.final_plan.scale:g}" if a.finalists and a.final_plan else "every configuration tried"
    parts += [
        f"<h2>The trade-off ({html.escape(title)})</h2>",
        img(folder, "advice", figure(a, final), "p99 of each configuration"),
    ]
    if a.finalists:
        parts += ["<h2>The contenders again</h2>", _table(a, a.finalists)]
        parts += [f"<h2>Screening, rates ÷ {a.plan.scale:g}</h2>", img(folder, "screening", figure(a, a.table), "screening")]
    parts += [_table(a, a.table)] if a.table else []
    parts += ["<h2>How</h2>", f"<p class=muted>{html.escape(method_line(a))}</p>", "</body></html>"]
    path = folder / PAGE_FILE
    write_text(path, "\n".join(parts))
    return path
