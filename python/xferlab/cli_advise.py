"""``xferlab advise``: which variant, how many streams and what pacing a bulk transfer
should use on a path, and how long it will take (the advisor, docs/advisor.md)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import runfolder
from .advisor import folder
from .advisor.advice import advise as run_advice
from .advisor.present import show
from .advisor.question import AdviceError, ask
from .advisor.runs import MAX_REPETITIONS, workers_default
from .backends import BackendError
from .cli_common import console, err
from .cli_common import fail as _fail
from .runfolder import RunFolderError
from .scenario import ScenarioError
from .units import parse_duration

#: The commands of this module (:mod:`xferlab.cli` finds them here by name).
app = typer.Typer()


@app.command()
def advise(
    rtt: str = typer.Option(..., "--rtt", help="round-trip time of the path, e.g. 100ms"),
    bottleneck: str = typer.Option(..., "--bottleneck", help="the path's bottleneck rate, e.g. 10Gbps"),
    volume: str = typer.Option(..., "--volume", help="bytes to move, e.g. 2TB"),
    access: Optional[str] = typer.Option(None, "--access", help="the hosts' access rate (default: the bottleneck's)"),
    buffer: str = typer.Option("1bdp", "--buffer", help="bottleneck buffer: a multiple of the BDP (1bdp) or packets"),
    deadline: Optional[str] = typer.Option(None, "--deadline", help="the job must be done within this, e.g. 3h"),
    competing: int = typer.Option(0, "--competing", help="long-lived flows sharing the bottleneck"),
    competing_variant: str = typer.Option("cubic", "--competing-variant", help="their congestion control"),
    congestion_level: Optional[float] = typer.Option(
        None, "--congestion-level", help="seed 004's Cg: pairs × access rate / bottleneck rate, the job's included"
    ),
    reverse: float = typer.Option(0.0, "--reverse", help="seed 004's R: reverse sources × access rate / bottleneck rate"),
    background: float = typer.Option(0.0, "--background", help="seed 004's Bg: unresponsive ON/OFF load, share of C"),
    budget: str = typer.Option("60s", "--budget", help="time the advisor may spend simulating"),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="simulator processes (default: one per core)"),
    repetitions: int = typer.Option(MAX_REPETITIONS, "--repetitions", min=1, help="seeds per configuration at most"),
    json_out: bool = typer.Option(False, "--json", help="print the whole advice as JSON (nothing else on stdout)"),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="keep the advice as a folder: its page, its runs and advice.json (a new or empty folder)"
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
):
    """Advise a transfer: variant, streams and pacing for a path, with its predicted completion time.

    A bounded campaign on the simulator over variant × parallel streams × pacing, with
    repetitions, within --budget; prints the recommendation (p50, p99 and, with --deadline,
    the probability of meeting it), every configuration tried beside the default, and the
    xfer command and host settings that apply it. With --out, the advice is also kept as a
    folder (index.html, advice.json, runs.parquet) that `xferlab campaign report` reopens.
    """
    try:
        if out is not None:
            runfolder.check_destination(out, False)  # before the campaign, not after it
        q = ask(
            rtt, bottleneck, volume, access, buffer, deadline, competing, competing_variant, congestion_level, reverse, background
        )
        budget_s = _budget(budget)
        n = workers or workers_default()
        with _progress(quiet or json_out) as progress:
            a = run_advice(q, budget_s, n, repetitions=repetitions, progress=progress)
        page = folder.write(a, out) if out is not None else None
    except (AdviceError, ScenarioError, BackendError, RunFolderError) as e:  # a path the scenario's own limits refuse, …
        _fail(str(e))
    if json_out:
        print(json.dumps(a.as_dict(), indent=1, allow_nan=False))
    else:
        show(a, console)
    if page is not None:
        (err if json_out else console).print(f"advice: [bold]{escape(str(page))}[/]", highlight=False)


def _budget(text: str) -> float:
    try:
        s = parse_duration(text, require_unit=True)
    except ValueError as e:
        raise AdviceError(f"--budget {text}: {e}") from None
    if not s > 0:
        raise AdviceError(f"--budget {text}: must be above 0")
    return s


@contextlib.contextmanager
def _progress(quiet: bool):
    """A progress bar of the runs on a terminal (stderr), nothing otherwise."""
    if quiet or not err.is_terminal:
        yield None
        return
    columns = (TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("runs", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
