"""The advice on a terminal: the recommendation, every configuration tried, the default
beside it, the commands that apply it, and how the prediction was made."""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..units import format_duration, format_elapsed, format_rate, format_size
from . import apply
from .advice import Advice
from .candidates import DEFAULT
from .question import Question
from .recommend import Row


def time_text(s: float) -> str:
    if s == float("inf"):
        return "never"
    return f"{s:.3g} s" if s < 60 else format_elapsed(s)


def goodput_text(bps: float) -> str:
    return f"{bps / 1e9:.2f} Gbit/s" if bps >= 1e9 else f"{bps / 1e6:.0f} Mbit/s"


def pct_text(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f} %"


def table(a: Advice, rows: list[Row], title: str) -> Table:
    q = a.question
    t = Table(title=title, title_justify="left")
    for name, justify in (
        ("configuration", "left"),
        ("seeds", "right"),
        ("goodput", "right"),
        ("p50", "right"),
        ("p99", "right"),
    ):
        t.add_column(name, justify=justify)
    if q.deadline_s is not None:
        t.add_column(f"P(≤ {time_text(q.deadline_s)})", justify="right")
    if q.competing:
        t.add_column("harm", justify="right")
    for r in sorted(rows, key=lambda r: r.prediction.p99_s):
        cells = [
            escape(label(r, a)),
            str(r.repetitions),
            goodput_text(r.prediction.goodput_bps),
            time_text(r.prediction.p50_s),
            time_text(r.prediction.p99_s),
        ]
        if q.deadline_s is not None:
            cells.append(pct_text(r.prediction.p_deadline))
        if q.competing:
            cells.append(pct_text(r.harm))
        t.add_row(*cells, style="bold green" if r.config == a.recommended.config else None)
    return t


def label(r: Row, a: Advice) -> str:
    """A row's configuration, marked when it is the recommended one or the default (plain text)."""
    marks = [m for m, yes in (("recommended", r.config == a.recommended.config), ("default", r.config == DEFAULT)) if yes]
    return r.config.label + (f"  ({', '.join(marks)})" if marks else "")


def linux_text(p) -> str:
    """The band on Linux (predict.py): where the simulator's error against Linux may put it."""
    return f"{time_text(p.linux_lo_s)} to {time_text(p.linux_hi_s)}"


def headline(r: Row, a: Advice) -> str:
    """A row's figures in one line of plain text."""
    p, q = r.prediction, a.question
    line = f"{r.config.label}: p50 {time_text(p.p50_s)}, p99 {time_text(p.p99_s)}"
    line += f" (on Linux, {linux_text(p)})"
    if q.deadline_s is not None:
        line += f", P(done within {time_text(q.deadline_s)}) {pct_text(p.p_deadline)}"
    if q.competing:
        line += f", harm to the competing flows {pct_text(r.harm)}"
    return line


def path_line(q: Question) -> str:
    """The question in one line of plain text."""
    return (
        f"path: RTT {format_duration(q.rtt_s)}, bottleneck {format_rate(q.bottleneck_bps)} (r_TP "
        f"{goodput_text(q.goodput_bps)}), access {format_rate(q.access_bps)}, buffer {q.buffer_packets()} packets; "
        f"job {format_size(q.volume_bytes)} (ideal {time_text(q.ideal_time_s)}); "
        f"competing: {q.competing} × {q.competing_variant}"
        + (f"; reverse traffic R = {q.reverse:g}" if q.reverse else "")
        + (f"; background Bg = {q.background:g}" if q.background else "")
    )


def show(a: Advice, out: Console) -> None:
    q = a.question
    out.print(escape(path_line(q)), highlight=False)
    if a.finalists:
        out.print(table(a, a.table, f"configurations tried (screening, rates ÷ {a.plan.scale:g})"))
        out.print(table(a, a.finalists, f"the contenders again, rates ÷ {a.final_plan.scale:g}"))
    else:
        out.print(table(a, a.table, "configurations tried"))
    out.print(f"[bold]recommended[/] {escape(headline(a.recommended, a))}", highlight=False)
    if a.default is not None and a.default.config != a.recommended.config:
        out.print(f"[bold]default[/]     {escape(headline(a.default, a))}", highlight=False)
    c = a.recommended.config
    out.print("\n[bold]apply it[/] (on both hosts, as root, then on the sender):", highlight=False)
    for line in apply.shell_lines(q, c):
        out.print(f"  {escape(line)}", highlight=False)
    out.print(f"  {escape(apply.xfer_line(q, c))}", highlight=False)
    if auto := apply.xfer_auto_argv(q, c):
        out.print(f"  [dim]or, the streams searched during the transfer:[/] {escape(shlex.join(auto))}", highlight=False)
    out.print(f"\n[dim]{escape(method_line(a))}[/]", highlight=False)
    for line in a.notes():
        out.print(f"[yellow]note:[/] {escape(line)}", highlight=False)


def method_line(a: Advice) -> str:
    p = a.plan
    if p.whole:
        how = f"each run moved the whole job ({time_text(p.run_s)} at most)"
    else:
        scaled = f", rates ÷ {p.scale:g}" if p.scale > 1 else ""
        how = (
            f"each run {time_text(p.run_s)} (slow start + 4 epochs of {time_text(p.epoch_s)}{scaled}),"
            " extrapolated: start-up + rest / steady goodput, block bootstrap over epochs"
        )
    if a.final_plan is not None:
        fp = a.final_plan
        how += f"; the {len(a.finalists)} contenders again at rates ÷ {fp.scale:g} ({time_text(fp.run_s)} runs)"
    left = f"; {a.left_out} runs left out by the budget" if a.left_out else ""
    return (
        f"{a.ran} simulator runs of {a.planned} planned in {a.wall_s:.0f} s "
        f"(budget {a.budget_s:g} s, {a.workers} workers){left}; {how}"
    )
