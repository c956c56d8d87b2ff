"""``xferlab campaign run|report`` and ``xferlab bench hstts``."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import limits
from .advisor import folder as advice_folder
from .advisor.question import AdviceError
from .backends import BackendError
from .campaign import hstts, report, runner, spec
from .campaign.spec import CampaignError
from .cli_common import console
from .cli_common import fail as _fail
from .runfolder import RunFolderError
from .scenario import ScenarioError
from .units import format_elapsed

campaign_app = typer.Typer(no_args_is_help=True, help="Sweeps and repetitions of a scenario, archived in a DuckDB catalog.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmark suites (seed 004's user-oriented benchmark).")


class _Reporter:
    """A rich progress bar (done/total, ETA) on a terminal, plain lines otherwise."""

    def __init__(self, title: str, quiet: bool = False):
        self.title = title
        self.quiet = quiet
        self.bar = None
        self.failed = 0
        self.done = 0
        self.total = 0
        self.t0 = time.perf_counter()

    def __enter__(self):
        if not self.quiet and console.is_terminal:
            self.bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("runs"),
                TextColumn("{task.fields[failed]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
            )
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def log(self, text: str) -> None:
        (self.bar.console if self.bar else console).print(text, highlight=False, markup=False)

    def start(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        if self.bar is not None:
            self.task = self.bar.add_task(self.title, total=total, completed=done, failed="")
        elif not self.quiet:
            console.print(f"{self.title}: {total} runs, {done} already done", highlight=False, markup=False)

    def result(self, run, outcome) -> None:
        self.done += 1
        if outcome.status != "ok":
            self.failed += 1
            first = (outcome.error or "").splitlines()[0] if outcome.error else ""
            self.log(f"run {run.key} ({run.label()}) failed: {first}")
        if self.bar is not None:
            self.bar.update(self.task, advance=1, failed=f"[red]{self.failed} failed[/]" if self.failed else "")
        elif not self.quiet:
            wall = f"{outcome.wall:.1f} s" if outcome.wall is not None else ""
            console.print(
                f"[{self.done}/{self.total}] {outcome.status} {run.key} {run.label()} {wall}", highlight=False, markup=False
            )


def run_campaign(campaign, out: Path, workers, dask, force, retry_failed, quiet, title=None):
    with _Reporter(title or campaign.name, quiet) as rep:
        if not quiet:
            _announce(campaign, workers, dask, rep.log)
        summary = runner.run(
            campaign,
            out,
            workers=workers,
            dask=dask,
            force=force,
            retry_failed=retry_failed,
            on_start=rep.start,
            on_result=rep.result,
            log=rep.log,
        )
    return summary


def _announce(campaign, workers, dask, log) -> None:
    """An estimate of the whole campaign's cost, before it starts, when it is not small."""
    n = workers or (os.cpu_count() or 1)
    if campaign.backend == "sim" and campaign.sim_wall_s > limits.ANNOUNCE_AFTER_S:
        per = "" if dask else f", about {format_elapsed(campaign.sim_wall_s / n)} on {n} worker(s)"
        log(f"{len(campaign.runs)} runs: an estimated {format_elapsed(campaign.sim_wall_s)} of simulation{per}")
    elif campaign.backend != "sim" and campaign.span_s > limits.ANNOUNCE_AFTER_S:
        log(f"{len(campaign.runs)} runs: at least {format_elapsed(campaign.span_s)} of experiment time, one run at a time")


def _stopped(e: KeyboardInterrupt) -> str:
    return "stopped by SIGTERM" if isinstance(e, runner.Terminated) else "interrupted"


def _status(e: KeyboardInterrupt) -> int:
    """128 + the signal, as a shell reports a command a signal stopped."""
    return 128 + (signal.SIGTERM if isinstance(e, runner.Terminated) else signal.SIGINT)


def _print_summary(s, out: Path) -> None:
    parts = [f"{s.ok} run(s) done", f"{s.failed} failed"]
    if s.skipped:
        parts.append(f"{s.skipped} already in the catalog")
    if s.adopted:
        parts.append(f"{s.adopted} adopted from complete folders")
    console.print(
        f"{', '.join(parts)} ({s.planned} planned) in {s.wall_seconds:.1f} s on {s.workers} worker(s); "
        f"catalog: {out / 'catalog.duckdb'}",
        highlight=False,
        markup=False,
    )


@campaign_app.command("run")
def campaign_run(
    file: Path = typer.Argument(..., help="campaign YAML file"),
    out: Path = typer.Option(..., "--out", "-o", help="campaign folder (created, or resumed when it holds this campaign)"),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", help="local worker processes (default: CPU count)"),
    dask: Optional[str] = typer.Option(None, "--dask", help="Dask scheduler address (tcp://host:8786), or local[:N]"),
    repetitions: Optional[int] = typer.Option(None, "--repetitions", "-r", help="override the file's repetitions"),
    backend: Optional[str] = typer.Option(None, "--backend", "-b", help="override the file's backend (sim, netns)"),
    force: bool = typer.Option(False, "--force", help="discard a folder that holds a different campaign"),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="run again the runs recorded as failed"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress output"),
):
    """Run (or resume) every run of a campaign; each finished run is committed to DIR/catalog.duckdb."""
    overrides = {}
    if repetitions is not None:
        overrides["repetitions"] = repetitions
    if backend is not None:
        overrides["backend"] = backend
    if workers is not None and workers < 1:
        _fail("--workers must be at least 1")
    if workers is not None and dask:
        _fail("give --workers or --dask, not both")
    try:
        c = spec.load(file, overrides)
        s = run_campaign(c, out, workers, dask, force, retry_failed, quiet)
    except (CampaignError, ScenarioError, BackendError, RunFolderError) as e:
        _fail(str(e))
    except KeyboardInterrupt as e:
        _fail(f"{_stopped(e)}; the finished runs are in {out / 'catalog.duckdb'}, run the same command to resume", _status(e))
    _print_summary(s, out)
    if s.failed:
        console.print(f"[yellow]{s.failed} run(s) failed[/]: see the error column of the runs table", highlight=False)


@campaign_app.command("report")
def campaign_report(folder: Path = typer.Argument(..., help="a campaign folder, or an advice folder (xferlab advise --out)")):
    """Tables and figures across the sweep (mean ± 95 % CI over repetitions) as one HTML report.

    An advice folder's page is written again from its runs, without simulating."""
    try:
        path = advice_folder.render(folder) if advice_folder.is_advice_folder(folder) else report.render(folder)
    except (CampaignError, AdviceError, RunFolderError) as e:
        _fail(str(e))
    console.print(f"report: [bold]{escape(str(path))}[/]")


@bench_app.command("hstts")
def bench_hstts(
    variant: list[str] = typer.Option(..., "--variant", "-v", help="candidate variant(s), compared with Reno (repeatable)"),
    backend: str = typer.Option("sim", "--backend", "-b", help="sim or netns"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="benchmark folder (default: results/hstts-BACKEND)"),
    repetitions: int = typer.Option(3, "--repetitions", "-r", help="repetitions of each scenario"),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", help="local worker processes"),
    dask: Optional[str] = typer.Option(None, "--dask", help="Dask scheduler address, or local[:N]"),
    quick: bool = typer.Option(False, "--quick", help="a 4-scenario subset (for tests and a first look)"),
    force: bool = typer.Option(False, "--force", help="discard a folder that holds a different benchmark"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress output"),
):
    """Seed 004's user-oriented benchmark (HSTTS): completion times of a candidate beside Reno."""
    if repetitions < 1:
        _fail("--repetitions must be at least 1")
    out = out or Path("results") / f"hstts-{backend}{'-quick' if quick else ''}"
    try:
        c = hstts.campaign(variant, backend=backend, repetitions=repetitions, quick=quick)
        s = run_campaign(c, out, workers, dask, force, False, quiet, title=f"HSTTS ({', '.join(c.axes['protocol.variant'])})")
        sheet = hstts.sheet(out)
    except (CampaignError, ScenarioError, BackendError, RunFolderError) as e:
        _fail(str(e))
    except KeyboardInterrupt as e:
        _fail(f"{_stopped(e)}; run the same command to resume ({out})", _status(e))
    _print_summary(s, out)
    hstts.print_sheet(sheet, console)
    console.print(f"sheet: [bold]{escape(str(out / 'hstts.html'))}[/] and {escape(str(out / 'hstts.csv'))}")
