"""``xferlab schedule plan``: what the planner makes of a scenario's transfer requests."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from . import scenario as sc
from .cli_common import console
from .cli_common import fail as _fail
from .report import plan_figure
from .scenario import ScenarioError
from .trace import RunInfo
from .units import format_duration, format_rate, format_size

schedule_app = typer.Typer(no_args_is_help=True, help="Flow scheduling of transfer requests (seed 001).")


@schedule_app.command("plan")
def schedule_plan(
    scenario: Path = typer.Argument(..., help="scenario YAML file with requests (and a schedule)"),
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="override a field: section.field=value"),
    figure: Optional[Path] = typer.Option(None, "--figure", "-f", help="write the plan as a PNG (seed 001 fig. 6)"),
):
    """Plan the requests: start, rates over time, predicted completion, admission (no run)."""
    try:
        s, _ = sc.load(scenario, set_)
        info = RunInfo.model_validate(sc.resolve(s))
    except ScenarioError as e:
        _fail(str(e))
    if info.plan is None:
        _fail(f"{scenario}: no requests to plan (add requests: [{{volume: …}}, …] and a schedule)")
    p = info.plan
    t = Table(show_header=True, header_style="bold", title=f"{p.strategy} plan, enforced by {p.mechanism} ({p.sync} starts)")
    for col in ("request", "pair", "volume", "release", "deadline", "start", "rates (goodput)", "completion", "admitted"):
        t.add_column(col, justify="right")
    for r in p.requests:
        rates = ", ".join(
            f"{format_duration(g.start_s)}–{format_duration(g.end_s)}: {format_rate(g.rate_bps) if g.rate_bps else 'unlimited'}"
            for g in r.segments
        )
        follows = f" (after {r.after})" if r.after is not None else ""
        t.add_row(
            r.name or str(r.request),
            str(r.pair),
            format_size(r.volume_bytes),
            format_duration(r.release_s),
            format_duration(r.deadline_s) if r.deadline_s is not None else "—",
            (format_duration(r.start_s) + follows) if r.start_s is not None else "—",
            rates,
            format_duration(r.completion_s) if r.completion_s is not None else "—",
            "yes" if r.admitted else f"[red]no[/]: {escape(r.reason)}",
        )
    console.print(t)
    makespan = f"{p.makespan_s:.3f} s" if p.makespan_s is not None else "—"
    console.print(
        f"r_TP {p.capacity_bps / 1e6:.2f} Mbit/s; planned makespan {makespan}, ideal {p.ideal_makespan_s:.3f} s"
        + (f"; largest load {p.congestion_factor:.3f} of r_TP" if p.congestion_factor is not None else ""),
        highlight=False,
    )
    if figure is not None:
        try:
            figure.write_bytes(plan_figure(info))
        except OSError as e:
            _fail(f"{figure}: cannot write: {e.strerror or e}")
        console.print(f"figure: [bold]{escape(str(figure))}[/]")
