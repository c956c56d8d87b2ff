"""``xferlab run``, ``report`` and ``cleanup``: the commands that run scenarios or re-render
their run folders (the engine, the backends, the report: loaded only for these)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from . import engine, limits, runfolder
from . import scenario as sc
from .backends import BackendError
from .cli_common import console, print_summary
from .cli_common import fail as _fail
from .registry import MetricsError
from .remote.inventory import InventoryError
from .runfolder import RunFolderError
from .scenario import ScenarioError
from .units import format_elapsed

#: The commands of this module (:mod:`xferlab.cli` finds them here by name).
app = typer.Typer()


@app.command()
def run(
    scenario: Path = typer.Argument(..., readable=False, help="scenario YAML file"),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", readable=False, help="run folder to create (default: results/NAME/TIMESTAMP)"
    ),
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="override a field: section.field=value (repeatable)"),
    backend: str = typer.Option(
        "sim", "--backend", "-b", help="sim (built-in simulator), netns (real Linux TCP, root) or ssh (remote hosts, --inventory)"
    ),
    scale: Optional[float] = typer.Option(
        None, "--scale", help="netns: run K× slower (rates ÷ K, times × K); default: what this host can carry"
    ),
    inventory: Optional[Path] = typer.Option(
        None, "--inventory", "-i", readable=False, help="ssh: the hosts (YAML; docs/ssh.md)"
    ),
    force: bool = typer.Option(False, "--force", help="replace --out if it exists"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
):
    """Run one scenario and write its run folder (trace, metrics, report)."""
    options = {"scale": scale} if scale is not None else {}
    if scale is not None and backend != "netns":
        _fail("--scale applies to the netns backend only")
    # --- ssh backend (issue 14)
    if (inventory is not None) != (backend == "ssh"):
        _fail("--inventory goes with --backend ssh" if inventory is not None else "--backend ssh needs --inventory hosts.yaml")
    if inventory is not None:
        options["inventory"] = str(inventory)
    # ---
    try:
        s, given = sc.load(scenario, set_)
        cost = sc.resolve(s)["cost"]
        target = out if out is not None else engine.default_out(s)
        with _progress(s.name, backend, cost, quiet) as progress:
            m = engine.run(s, given, target, backend=backend, progress=progress, force=force, options=options)
    except RunFolderError as e:
        _fail(str(e), e.exit_status)
    except (ScenarioError, BackendError, MetricsError) as e:
        _fail(str(e))
    except runfolder.Interrupted:
        _fail(f"interrupted; the run folder was written whole: {target}", 130)
    except KeyboardInterrupt:
        _fail("interrupted; no run folder was written", 130)
    print_summary(m, target)
    _fail_if_implausible(m, target)


def _fail_if_implausible(m: dict, folder: Path) -> None:
    """Figures no transport can give are not a result: exit status 1 with the reason (the
    run folder is written, its report says the same)."""
    if why := (m.get("completion") or {}).get("implausible"):
        _fail(f"{folder}: implausible figures: {why}", status=1)


@contextlib.contextmanager
def _progress(name: str, backend: str, cost: dict, quiet: bool):
    """A progress callback: a bar on a terminal, a line every half minute elsewhere (a log,
    CI), nothing with --quiet. A long run says its estimated cost before it starts."""
    unit = "simulated" if backend == "sim" else "of scenario time"
    if quiet:
        yield None
        return
    estimate = cost["sim_wall_s"] if backend == "sim" else cost["span_s"]
    if estimate > limits.ANNOUNCE_AFTER_S:
        sim = f"{cost['packets']:.3g} packets to simulate, {cost['rows']:.3g} trace rows to sample and draw"
        what = sim if backend == "sim" else "an emulation in real time"
        console.print(f"{name}: {what}, an estimated {format_elapsed(estimate)}", highlight=False, markup=False)
    if not console.is_terminal:
        last = [time.monotonic()]

        def plain(now_s: float, total_s: float | None):
            if time.monotonic() - last[0] >= limits.ANNOUNCE_AFTER_S:
                last[0] = time.monotonic()
                of = f" / {total_s:.1f}" if total_s else ""
                console.print(f"{name}: {now_s:.1f}{of} s {unit}", highlight=False, markup=False)

        yield plain
        return
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[label]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(escape(f"{name} ({backend})"), total=None, label="")

        def progress(now_s: float, total_s: float | None):
            label = f"{now_s:.1f} / {total_s:.1f} s {unit}" if total_s else f"{now_s:.1f} s {unit}"
            bar.update(task, completed=now_s, total=total_s, label=label)

        yield progress


@app.command()
def report(folder: Path = typer.Argument(..., readable=False, help="a run folder")):
    """Re-render the metrics and the report of a run folder from its stored trace."""
    try:
        m = engine.rerender(folder)
    except RunFolderError as e:
        _fail(str(e), e.exit_status)
    except MetricsError as e:
        _fail(str(e))
    print_summary(m, folder)
    _fail_if_implausible(m, folder)


@app.command()
def cleanup(
    inventory: Optional[Path] = typer.Option(
        None, "--inventory", "-i", help="ssh: restore these hosts from the journals of runs that did not finish"
    ),
    force: bool = typer.Option(False, "--force", help="ssh: undo a live run's changes too (it holds its hosts)"),
):
    """Undo what crashed runs left behind: here, or on remote hosts (--inventory).

    Here: the namespaces (xl-*) and BPF congestion controls (xl_*) of netns runs. With
    --inventory: the changes a killed ssh run made on those hosts, from their journals."""
    if force and inventory is None:
        _fail("--force goes with --inventory (a live ssh run's hosts)")
    if inventory is not None:  # --- ssh backend (issue 14)
        from .remote import hosts  # asyncssh (0.5 s): only for the ssh backend's hosts

        try:
            lines = hosts.cleanup_inventory(inventory, force)
        except InventoryError as e:
            _fail(str(e))
        for line in lines:
            console.print(line, markup=False, highlight=False)
        if any(line.startswith("could not") for line in lines):
            raise typer.Exit(1)
        return
    from .netns import host  # pyroute2 (0.4 s): only to clean this machine up

    try:
        host.require_root()
        with host.host_lock(wait=False):
            removed = host.cleanup_leftovers()
    except host.HostError as e:
        _fail(str(e))
    for thing in removed:
        console.print(f"removed {thing}", markup=False)
    console.print("nothing to clean up" if not removed else f"{len(removed)} leftover(s) removed")
