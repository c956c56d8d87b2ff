"""One run, end to end: scenario → backend → Trace → metrics → run folder → report."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from pathlib import Path

import pyarrow as pa

from . import __version__, backends, metrics, report, runfolder
from .scenario import Scenario, resolve
from .trace import Trace


def versions(extra: dict | None = None) -> dict:
    import matplotlib
    import pandas
    import pydantic

    v = {
        "xferlab": __version__,
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "pandas": pandas.__version__,
        "pydantic": pydantic.__version__,
        "matplotlib": matplotlib.__version__,
    }
    v.update(extra or {})
    return v


def default_out(scenario: Scenario, root: Path = Path("results")) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = root / scenario.name / stamp
    n = 1
    while out.exists():
        n += 1
        out = root / scenario.name / f"{stamp}-{n}"
    return out


def run(
    scenario: Scenario,
    given: dict,
    out: Path,
    backend: str = "sim",
    progress=None,
    force: bool = False,
    options: dict | None = None,
) -> dict:
    """Runs ``scenario`` and writes its run folder at ``out``; returns the metrics."""
    resolved = resolve(scenario)
    runfolder.check_destination(out, force)
    be = backends.get(backend)
    t0 = time.perf_counter()
    result = be.run(scenario, resolved, progress, **(options or {}))
    wall = time.perf_counter() - t0
    stats = result.stats
    vers = versions(result.versions)
    trace_meta = {
        "backend": backend,
        "seed": scenario.seed,
        "end_s": stats.get("end_s"),
        "scenario": given,
        "resolved": resolved,
    }
    trace = Trace.from_batches(result.tables, trace_meta)
    m = metrics.compute(trace, resolved)
    run_meta = {
        "scenario": given,
        "resolved": resolved,
        "backend": backend,
        "seed": scenario.seed,
        "versions": vers,
        "wall_seconds": wall,
        "sim_events": stats.get("events"),
        "sim_packets": stats.get("packets"),
        "end_s": stats.get("end_s"),
        "stats": stats,
        "environment": result.environment,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {"node": platform.node(), "machine": platform.machine(), "cpus": os.cpu_count()},
    }
    with runfolder.staged(out, force) as tmp:
        trace.write(tmp / "trace")
        runfolder.write_json(tmp / runfolder.RUN_FILE, run_meta)
        runfolder.write_json(tmp / runfolder.METRICS_FILE, m)
        report.render(tmp, trace=trace, run_meta=run_meta, metrics=m)
    return m


def rerender(folder: Path) -> dict:
    """Recomputes the metrics and the report of an existing run folder from its trace."""
    folder = Path(folder)
    if not folder.is_dir():
        raise runfolder.RunFolderError(f"{folder}: no such folder")
    if not runfolder.is_run_folder(folder):
        raise runfolder.RunFolderError(f"{folder}: not a run folder (no run.json and trace/)")
    run_meta = runfolder.read_json(folder / runfolder.RUN_FILE)
    try:
        trace = Trace.read(folder / "trace")
    except (FileNotFoundError, OSError, pa.ArrowInvalid) as e:
        raise runfolder.RunFolderError(f"{folder}: unreadable trace: {e}") from None
    trace.run.setdefault("end_s", run_meta.get("end_s"))
    m = metrics.compute(trace, run_meta["resolved"])
    runfolder.write_json(folder / runfolder.METRICS_FILE, m)
    report.render(folder, trace=trace, run_meta=run_meta, metrics=m)
    return m
