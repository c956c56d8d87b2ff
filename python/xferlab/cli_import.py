"""``xferlab import iperf3|ss`` (testbed logs → run folder) and ``xferlab compare``."""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from . import compare, engine, limits, runfolder
from .cli_common import console, err, print_summary
from .cli_common import fail as _fail
from .importers import ImportLogError, iperf3, ss
from .importers.common import check_name, name_of_file
from .registry import MetricsError
from .runfolder import RunFolderError
from .units import format_duration, format_elapsed, format_rate, parse_duration, parse_rate

import_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Turn logs from a real testbed (iperf3 JSON, ss snapshots) into a run folder with trace, metrics and report.",
)


def _name(name: Optional[str], first: Path) -> str:
    """The run's name: --name when it is one folder name, else from the log's file name."""
    try:
        return check_name(name) if name is not None else name_of_file(first)
    except ImportLogError as e:
        _fail(str(e))


def _default_out(name: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path("results") / name / f"import-{stamp}"
    n = 1
    while out.exists():
        n += 1
        out = Path("results") / name / f"import-{stamp}-{n}"
    return out


def _rate(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    try:
        bps = parse_rate(text)
    except ValueError as e:
        _fail(f"--capacity {text}: {e}")
    if not limits.RATE_MIN_BPS.value <= bps <= limits.RATE_MAX_BPS.value:
        lo, hi = format_rate(limits.RATE_MIN_BPS.value), format_rate(limits.RATE_MAX_BPS.value)
        _fail(f"--capacity {text}: expected a rate from {lo} to {hi}")
    return bps


def _interval(text: str) -> float:
    try:
        s = parse_duration(text)
    except ValueError as e:
        _fail(f"--interval {text}: {e}")
    if not limits.INTERVAL_MIN_S.value <= s <= limits.TIME_MAX_S.value:
        lo = format_duration(limits.INTERVAL_MIN_S.value)
        _fail(f"--interval {text}: expected a duration from {lo} to {format_duration(limits.TIME_MAX_S.value)}")
    return s


def _offsets(values: Optional[list[float]]) -> Optional[list[float]]:
    for v in values or []:
        if not (math.isfinite(v) and 0 <= v <= limits.TIME_MAX_S.value):
            _fail(f"--offset {v}: expected seconds from 0 to {limits.TIME_MAX_S.value:g}")
    return values or None


def _save(trace, given: dict, target: Path, force: bool) -> None:
    """Writes the run folder (saying first how long its analysis will take, when long), then
    its summary and the import's warnings."""
    engine.stamp(trace, scenario=given, seed=None)
    rows = trace.goodput.num_rows + trace.tcp.num_rows
    if rows / limits.IMPORT_ROWS_PER_S > limits.ANNOUNCE_AFTER_S:
        estimate = format_elapsed(rows / limits.IMPORT_ROWS_PER_S)
        console.print(f"{rows:,} trace rows to analyse and report: an estimated {estimate}", highlight=False, markup=False)
    print_summary(engine.save(trace, target, force), target)
    for w in trace.provenance.warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True)


@import_app.command("iperf3")
def import_iperf3(
    files: list[Path] = typer.Argument(..., help="iperf3 -J output files (one test each, or several from --logfile)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="run folder to create (default: results/NAME/import-TIMESTAMP)"),
    capacity: Optional[str] = typer.Option(None, "--capacity", help="bottleneck rate, e.g. 1Gbps (for efficiency, r_TP, …)"),
    name: Optional[str] = typer.Option(None, "--name", help="run name, one folder name (default: the first file's name)"),
    interval: str = typer.Option("0.5s", "--interval", help="goodput grid of the run (use at least iperf3's -i)"),
    offset: Optional[list[float]] = typer.Option(
        None, "--offset", help="start of each test in s (repeat, in order); default: timestamps"
    ),
    force: bool = typer.Option(False, "--force", help="replace --out if it exists"),
):
    """Import iperf3 JSON: each test is a transfer, each of its -P streams a flow."""
    cap, iv, offsets, name = _rate(capacity), _interval(interval), _offsets(offset), _name(name, files[0])
    target = out if out is not None else _default_out(name)
    given = {
        "name": name,
        "import": {"format": "iperf3", "files": [str(p) for p in files], "capacity_bps": cap, "goodput_interval_s": iv},
    }
    try:
        runfolder.check_destination(target, force)
        trace = iperf3.import_trace(files, name=name, capacity_bps=cap, goodput_interval_s=iv, offsets=offsets)
        _save(trace, {**given, "import": {**given["import"], "offsets_s": offsets}}, target, force)
    except (ImportLogError, RunFolderError, MetricsError) as e:
        _fail(str(e))


@import_app.command("ss")
def import_ss(
    file: Path = typer.Argument(..., help="a log of repeated timestamped `ss -tin` snapshots (see docs/import.md)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="run folder to create (default: results/NAME/import-TIMESTAMP)"),
    capacity: Optional[str] = typer.Option(None, "--capacity", help="bottleneck rate, e.g. 1Gbps (for efficiency, r_TP, …)"),
    name: Optional[str] = typer.Option(None, "--name", help="run name, one folder name (default: the file's name)"),
    interval: str = typer.Option("0.5s", "--interval", help="goodput grid of the run"),
    force: bool = typer.Option(False, "--force", help="replace --out if it exists"),
):
    """Import `ss -tin` snapshots: each connection (4-tuple) is a flow."""
    cap, iv, name = _rate(capacity), _interval(interval), _name(name, file)
    target = out if out is not None else _default_out(name)
    given = {
        "name": name,
        "import": {"format": "ss", "files": [str(file)], "capacity_bps": cap, "goodput_interval_s": iv},
    }
    try:
        runfolder.check_destination(target, force)
        _save(ss.import_trace(file, name=name, capacity_bps=cap, goodput_interval_s=iv), given, target, force)
    except (ImportLogError, RunFolderError, MetricsError) as e:
        _fail(str(e))


#: ``xferlab compare`` (a top-level command; :mod:`xferlab.cli` finds it here).
compare_app = typer.Typer()


@compare_app.command("compare")
def compare_command(
    run_a: Path = typer.Argument(..., readable=False, help="a run folder"),
    run_b: Path = typer.Argument(..., readable=False, help="another run folder (of the same scenario)"),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", readable=False, help="HTML file to write (default: RUN_A/compare-<name of B>.html)"
    ),
):
    """Put two runs side by side: metrics with their relative difference, goodput and cwnd over time."""
    try:
        path, warnings = compare.compare(run_a, run_b, out)
    except RunFolderError as e:
        _fail(str(e), e.exit_status)
    except MetricsError as e:
        _fail(str(e))
    for w in warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True)
    console.print(f"comparison: [bold]{escape(str(path))}[/]")
