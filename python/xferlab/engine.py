"""One run, end to end: scenario → backend → Trace → metrics → run folder → report.

Only this module writes run folders: backends and importers return a :class:`Trace`;
:func:`save` checks it against the contract, computes its metrics and writes the folder
atomically (trace, ``run.json``, ``metrics.json``, report).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import shutil
import threading
import time
from pathlib import Path

from . import __version__, backends, runfolder
from .registry import MetricsError
from .scenario import Scenario, resolve
from .trace import Trace, TraceError

#: The libraries a run's results depend on, whose versions ``run.json`` records.
LIBRARIES = ("pyarrow", "pandas", "pydantic", "matplotlib")


def versions(extra: dict | None = None) -> dict:
    v = {"xferlab": __version__, "python": platform.python_version()}
    v.update({name: importlib.metadata.version(name) for name in LIBRARIES})
    v.update(extra or {})
    return v


def analysis():
    """The metrics and the report. They import pandas and matplotlib, about a second of CPU
    that :func:`run` spends while the backend runs (:func:`warm_up`): the simulator leaves
    Python's lock while it computes."""
    from . import metrics, report  # imported ahead by warm_up, while the backend runs

    return metrics, report


def warm_up() -> threading.Thread:
    """Imports :func:`analysis` in a thread; a failure there is met again, and said, when
    :func:`save` imports it."""
    t = threading.Thread(target=analysis, name="xferlab-warm-up", daemon=True)
    t.start()
    return t


def cpu_model() -> str | None:
    """This machine's processor as its kernel names it (``model name`` in /proc/cpuinfo),
    or None where it does not say: a run on real hosts or an emulation measures its
    machine as well as TCP."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return None


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
    warm_up()  # after the backend's own imports: the two threads never wait on each other's
    t0 = time.perf_counter()
    trace = be.run(scenario, resolved, progress, **(options or {}))
    stamp(trace, scenario=given, seed=scenario.seed, wall_seconds=time.perf_counter() - t0)
    return save(trace, out, force)


def stamp(trace: Trace, *, scenario: dict, seed: int | None, wall_seconds: float | None = None) -> Trace:
    """Adds what the engine knows of a run to its metadata: the scenario as given, the seed,
    versions, the wall time, when and where it ran."""
    trace.run.update(
        scenario=scenario,
        seed=seed,
        versions=versions(trace.run.get("versions")),
        wall_seconds=wall_seconds,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        host={"node": platform.node(), "machine": platform.machine(), "cpu": cpu_model(), "cpus": os.cpu_count()},
    )
    return trace


def save(trace: Trace, out: Path, force: bool = False) -> dict:
    """Checks ``trace`` against the contract, computes its metrics and writes the whole run
    folder at ``out`` atomically; returns the metrics. The files the producer handed over
    (``trace.files``) are moved into the folder, or removed if it is not written."""
    try:
        try:
            trace.validate()
        except TraceError as e:  # a producer's bug, said plainly rather than written to disk
            raise TraceError(
                f"the {trace.run.get('backend', '?')} backend produced a trace that breaks the contract: {e}"
            ) from None
        metrics, report = analysis()
        m = metrics.compute(trace)
        with runfolder.staged(out, force) as tmp, runfolder.writing(out):
            trace.write(tmp / runfolder.TRACE_DIR)
            runfolder.write_json(tmp / runfolder.RUN_FILE, trace.run)
            runfolder.write_json(tmp / runfolder.METRICS_FILE, m)
            report.render(tmp, trace, m)
            _move_in(trace.files, tmp)
    finally:
        for src in map(Path, trace.files.values()):  # what was not moved in (an error): the engine's to remove
            if src.is_dir():
                shutil.rmtree(src, ignore_errors=True)
            else:
                src.unlink(missing_ok=True)
    return m


def _move_in(files: dict[str, Path], folder: Path) -> None:
    """Moves each handed-over file or folder to ``folder/name`` (a plain relative name)."""
    for name, src in files.items():
        dest = folder / name
        if Path(name).is_absolute() or ".." in Path(name).parts or dest.exists():
            raise ValueError(f"a producer handed over {name!r}: not a new name inside the run folder")
        shutil.move(str(src), dest)


def rerender(folder: Path) -> dict:
    """Recomputes the metrics and the report of an existing run folder from its trace (an
    older folder is read through the upgrade; its files stay as they were written). A
    damaged folder, or one the machine will not let us write, is a RunFolderError that
    names the file."""
    folder = Path(folder)
    trace = runfolder.load_trace(folder)
    metrics, report = analysis()
    try:
        m = metrics.compute(trace)
    except MetricsError as e:  # a window the stored trace does not cover, …
        raise runfolder.RunFolderError(f"{folder}: {e}") from None
    with runfolder.writing(folder):
        runfolder.write_json(folder / runfolder.METRICS_FILE, m)
        report.render(folder, trace, m)
    return m
