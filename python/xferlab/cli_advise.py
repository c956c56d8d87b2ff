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
from .advisor import folder, hostcheck
from .advisor import probe as probe_mod
from .advisor.advice import advise as run_advice
from .advisor.candidates import DEFAULT
from .advisor.present import show
from .advisor.probe import ProbeError
from .advisor.question import AdviceError, ask, rate_for_goodput
from .advisor.runs import MAX_REPETITIONS, workers_default
from .backends import BackendError
from .cli_common import console, err
from .cli_common import fail as _fail
from .remote.inventory import InventoryError
from .remote.inventory import load as load_inventory
from .runfolder import RunFolderError
from .scenario import ScenarioError
from .units import parse_duration

#: The commands of this module (:mod:`xferlab.cli` finds them here by name).
app = typer.Typer()


@app.command()
def advise(
    rtt: Optional[str] = typer.Option(None, "--rtt", help="round-trip time of the path, e.g. 100ms (--probe: measured)"),
    bottleneck: Optional[str] = typer.Option(
        None, "--bottleneck", help="the path's bottleneck rate, e.g. 10Gbps (--probe: the best goodput measured)"
    ),
    volume: Optional[str] = typer.Option(None, "--volume", help="bytes to move, e.g. 2TB (--probe without it: the check alone)"),
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
    probe: bool = typer.Option(False, "--probe", help="check the hosts and measure the path of an inventory pair first"),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help="--probe: the ssh backend's inventory (docs/ssh.md)"),
    pair: int = typer.Option(0, "--pair", min=0, help="--probe: the inventory pair, senders[k] → receivers[k]"),
    probe_streams: int = typer.Option(4, "--probe-streams", min=2, max=64, help="--probe: the N of the N-stream transfers"),
    probe_time: str = typer.Option("20s", "--probe-time", help="--probe: how long the probe may take"),
):
    """Advise a transfer: variant, streams and pacing for a path, with its predicted completion time.

    A bounded campaign on the simulator over variant × parallel streams × pacing, with
    repetitions, within --budget; prints the recommendation (p50, p99 and, with --deadline,
    the probability of meeting it), every configuration tried beside the default, and the
    xfer command and host settings that apply it. With --out, the advice is also kept as a
    folder (index.html, advice.json, runs.parquet) that `xferlab campaign report` reopens.

    With --probe --inventory hosts.yaml, the hosts of an inventory pair are checked first
    (socket buffers against the BDP, congestion controls, pacing, MTU, offloads) and the
    path measured with xfer (RTT, goodput with 1 and N streams, loss): each problem with its
    fix, and the measured RTT and goodput stand for --rtt and --bottleneck when not given.
    Without --volume, the check alone.
    """
    a = page = probed = None
    try:
        if out is not None:
            runfolder.check_destination(out, False)  # before the campaign, not after it
        _check_options(rtt, bottleneck, volume, deadline, out, probe, inventory)
        if probe:
            probed = _probe(inventory, pair, probe_streams, probe_time, quiet or json_out)
            rtt, bottleneck = _measured_path(probed.measured, rtt, bottleneck, volume is not None)
        # Without a volume (--probe alone) the question is the path's: the volume is a placeholder.
        path = (rtt, bottleneck, volume or "1B", access, buffer, deadline, competing, competing_variant, congestion_level)
        q = ask(*path, reverse, background)
        budget_s = _budget(budget)
        if volume is not None:
            with _progress(quiet or json_out) as progress:
                a = run_advice(q, budget_s, workers or workers_default(), repetitions=repetitions, progress=progress)
            page = folder.write(a, out) if out is not None else None
    except (AdviceError, ScenarioError, BackendError, RunFolderError, ProbeError, InventoryError) as e:
        _fail(str(e))  # a path the scenario's own limits refuse, an unreachable host, …
    found = hostcheck.findings(probed, q, a.recommended.config if a else DEFAULT) if probed else []
    _output(a, probed, found, json_out)
    if page is not None:
        (err if json_out else console).print(f"advice: [bold]{escape(str(page))}[/]", highlight=False)


def _output(a, probed: probe_mod.Probed | None, found: list, json_out: bool) -> None:
    """The check's findings, then the advice: on the terminal, or as one JSON document."""
    if json_out:
        doc = a.as_dict() if a else {}
        print(json.dumps(doc | ({"probe": hostcheck.report(probed, found)} if probed else {}), indent=1, allow_nan=False))
        return
    if probed:
        for line in hostcheck.measured_lines(probed.measured) + hostcheck.finding_lines(found):
            console.print(escape(line), highlight=False)
        console.print()
    if a:
        show(a, console)


def _check_options(rtt, bottleneck, volume, deadline, out, probe: bool, inventory) -> None:
    """What the options need of each other: a path (given or probed) and a volume to advise."""
    if probe and inventory is None:
        raise AdviceError("--probe needs the hosts: --inventory hosts.yaml (the ssh backend's, docs/ssh.md)")
    if inventory is not None and not probe:
        raise AdviceError("--inventory is --probe's: add --probe to check the hosts and measure the path")
    if not probe:
        missing = [name for name, v in (("--rtt", rtt), ("--bottleneck", bottleneck), ("--volume", volume)) if v is None]
        if missing:
            raise AdviceError(f"missing {', '.join(missing)} (or --probe --inventory hosts.yaml to measure the path)")
    elif volume is None and (deadline is not None or out is not None):
        raise AdviceError("--deadline and --out are the advice's: give --volume too")


def _probe(inventory: Path, pair: int, streams: int, seconds: str, quiet: bool) -> probe_mod.Probed:
    try:
        budget_s = parse_duration(seconds, require_unit=True)
    except ValueError as e:
        raise AdviceError(f"--probe-time {seconds}: {e}") from None
    if not 5 <= budget_s <= 600:
        raise AdviceError(f"--probe-time {seconds}: must be from 5 s to 10 min")

    def say(text: str) -> None:
        if not quiet:
            err.print(f"xferlab: {escape(text)}", highlight=False)

    return probe_mod.probe(load_inventory(inventory), str(inventory), pair, streams, budget_s, say)


def _measured_path(m: probe_mod.Measured, rtt: str | None, bottleneck: str | None, advice: bool) -> tuple[str, str]:
    """The path's RTT and bottleneck rate: as given, else as measured (the best goodput is
    the bottleneck's r_TP)."""
    if rtt is None:
        if m.rtt_s is None:
            raise AdviceError(f"the probe measured no RTT (no ping, no transfer: {'; '.join(m.notes) or 'no note'}): give --rtt")
        rtt = f"{m.rtt_s * 1e3:.3f}ms"
    if bottleneck is None:
        if m.best_goodput_bps is None:
            raise AdviceError(f"the probe measured no goodput ({'; '.join(m.notes) or 'no note'}): give --bottleneck")
        bottleneck = f"{rate_for_goodput(m.best_goodput_bps):.0f}bps"
        if advice:
            m.notes.append(
                "the advice takes the best goodput measured as the bottleneck's r_TP: a host that holds it back (a "
                "problem below) makes it the host's limit, not the path's; fix it and probe again, or give --bottleneck"
            )
    return rtt, bottleneck


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
