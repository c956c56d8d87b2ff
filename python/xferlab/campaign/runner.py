"""Running a campaign: a local process pool by default, a Dask cluster when given.

Workers compute a run and write its run folder (atomically, through the engine); the
parent alone writes the catalog, one transaction per finished run, as results arrive.

A run that fails — whatever raised (a Rust panic included) or even a worker process that
dies under it — is recorded as failed with its reason, and the campaign goes on.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing as mp
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import backends, engine, limits
from .. import scenario as sc
from ..backends import BackendError
from ..runfolder import RunFolderError
from .catalog import CampaignFolder
from .spec import Campaign, CampaignError, RunSpec

#: Backends that emulate on this host, or change shared hosts, and so run one at a time.
EXCLUSIVE_BACKENDS = {"netns", "ssh"}
#: Errors that are the user's to fix: their message alone says it all.
_USER_ERRORS = (sc.ScenarioError, BackendError, RunFolderError)


#: How long to wait for a Dask scheduler to answer before saying it cannot be reached.
DASK_CONNECT_TIMEOUT_S = 10.0
#: Dask's default scheduler port, for an address given without one.
DASK_PORT = 8786


class Terminated(KeyboardInterrupt):
    """A SIGTERM during a campaign: it stops as after a Ctrl-C (its workers killed, what they
    were writing removed, the finished runs kept for a resume)."""


class _Stops:
    """SIGINT and SIGTERM while a campaign runs. They stop it where it waits (for its workers,
    or for a run in this process): there :class:`KeyboardInterrupt` or :class:`Terminated` is
    raised at once. Elsewhere — the catalog being written, whose DuckDB query an exception
    raised inside would turn into "Query interrupted" — the signal is kept until the next wait."""

    def __init__(self) -> None:
        self.pending: int | None = None
        self.armed = False

    def handle(self, signum: int, frame) -> None:
        if self.armed:
            raise _stop(signum)
        self.pending = self.pending or signum

    def check(self) -> None:
        if self.pending is not None:
            signum, self.pending = self.pending, None
            raise _stop(signum)


def _stop(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


_STOPS = _Stops()


@contextmanager
def _signals_stop() -> Iterator[None]:
    """Installs :data:`_STOPS` for SIGINT and SIGTERM (from the main thread; elsewhere the
    default handling stays), and raises a signal kept to the end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _STOPS.pending, _STOPS.armed = None, False
    previous = {sig: signal.signal(sig, _STOPS.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
        _STOPS.check()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _waiting() -> Iterator[None]:
    """A wait that a SIGINT or SIGTERM interrupts at once (one that came before it, too)."""
    _STOPS.check()
    _STOPS.armed = True
    try:
        yield
    finally:
        _STOPS.armed = False


@dataclass
class Outcome:
    key: str
    status: str  # ok | failed
    metrics: dict | None = None
    error: str | None = None
    wall: float | None = None


@dataclass
class Summary:
    planned: int
    skipped: int  # already in the catalog
    adopted: int  # complete folders recorded on resume
    ok: int
    failed: int
    wall_seconds: float
    workers: int


def failure_reason(e: BaseException) -> str:
    """One run's failure, as text (picklable, for the catalog's error column)."""
    if isinstance(e, _USER_ERRORS):
        return f"{type(e).__name__}: {e}"
    if type(e).__name__ == "PanicException":  # pyo3: a panic in the simulator
        return f"the simulator crashed (a bug of xferlab, please report it): panic: {e}"
    if isinstance(e, MemoryError):
        return "out of memory"
    tail = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-3:])
    return f"{type(e).__name__}: {e}\n{tail}".strip()


def execute(task: dict) -> dict:
    """Runs one campaign run in a worker; never raises (a failure is a result)."""
    t0 = time.perf_counter()
    try:
        s = sc.from_dict(task["given"], task["key"])
        m = engine.run(s, task["given"], Path(task["out"]), backend=task["backend"], force=True, options=task.get("options"))
        return {"key": task["key"], "status": "ok", "metrics": m, "wall": time.perf_counter() - t0}
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 - a Rust panic is a BaseException; any failure is a result
        return {"key": task["key"], "status": "failed", "error": failure_reason(e), "wall": time.perf_counter() - t0}


def _ignore_sigint() -> None:
    """In a worker: Ctrl-C reaches the whole process group, and the campaign alone decides
    what to do (it stops its workers itself)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _die_with_parent(parent: int) -> None:
    """Worker initialiser: a SIGKILLed campaign takes its workers with it (Linux)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except OSError:
            pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    _ignore_sigint()


def _tasks(folder: CampaignFolder, runs: list[RunSpec]) -> list[dict]:
    c = folder.campaign
    return [
        {"key": r.key, "given": r.given, "out": str(folder.folder_of(r)), "backend": c.backend, "options": c.options()}
        for r in runs
    ]


# ----------------------------------------------------------------------------- Dask


def parse_dask(address: str) -> tuple[str, int | None]:
    """``local`` / ``local:N`` → ("local", N or None); a scheduler address → (address, None).
    Checked before anything is created."""
    address = address.strip()
    if address == "local":
        return "local", None
    if address.startswith("local:"):
        n = address.split(":", 1)[1]
        if not n.isdigit() or not 1 <= int(n) <= limits.WORKERS_MAX.value:
            raise CampaignError(
                f"--dask {address}: expected local:N with N from 1 to {int(limits.WORKERS_MAX.value)} worker processes"
            )
        return "local", int(n)
    if not re.fullmatch(r"([a-z][a-z0-9+.-]*://)?[A-Za-z0-9_.\-\[\]:]+(:\d{1,5})?/?", address):
        raise CampaignError(f"--dask {address!r}: expected a scheduler address such as tcp://host:8786, or local[:N]")
    return address, None


def _check_reachable(address: str, target: str) -> None:
    """Refuses at once, within :data:`DASK_CONNECT_TIMEOUT_S`, a tcp:// or tls:// scheduler
    address that nothing answers at (Dask itself would retry until its own timeout)."""
    scheme, sep, rest = target.partition("://")
    if sep and scheme not in ("tcp", "tls"):
        return  # another transport (ucx://, ws://, …): Dask says
    hostport = rest if sep else target
    m = re.fullmatch(r"\[(?P<v6>[^\]]+)\](?::(?P<p6>\d+))?/?|(?P<host>[^:/]+)(?::(?P<port>\d+))?/?", hostport)
    if m is None:
        raise CampaignError(f"--dask {address!r}: expected a scheduler address such as tcp://host:8786")
    host, port = m["v6"] or m["host"], int(m["p6"] or m["port"] or DASK_PORT)
    if not 1 <= port <= 65535:
        raise CampaignError(f"--dask {address}: port {port} is not a TCP port (1 to 65535)")
    try:
        with socket.create_connection((host, port), timeout=DASK_CONNECT_TIMEOUT_S):
            pass
    except socket.gaierror as e:
        raise CampaignError(f"--dask {address}: cannot reach the scheduler: no host {host!r} ({e.strerror})") from None
    except OSError as e:
        why = e.strerror or f"no answer within {DASK_CONNECT_TIMEOUT_S:g} s"
        raise CampaignError(f"--dask {address}: cannot reach the scheduler at that address ({why})") from None


@dataclass
class DaskPool:
    """A connected Dask client; for ``--dask local`` also its LocalCluster and the PIDs (with
    their start times, against reuse) of the cluster's worker processes, taken while idle."""

    client: Any
    cluster: Any = None
    workers: list[tuple[int, str]] = field(default_factory=list)

    def close(self) -> None:
        """Closes the client and the cluster (its nannies stop the workers); a worker process
        that outlives it is killed by its PID. Idempotent."""
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        for pid, started in self.workers:
            if _started(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.workers = []


def _started(pid: int) -> str | None:
    """A process's start time (``/proc/PID/stat``, field 22), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@contextmanager
def dask_client(address: str, log) -> Iterator[DaskPool]:
    """A connected Dask client (and its LocalCluster), or CampaignError before anything is
    written: an unreachable scheduler leaves no campaign folder behind."""
    target, n = parse_dask(address)
    if target != "local":
        _check_reachable(address, target)
    try:
        # Imported here, not at the top: only --dask needs it, and it costs 2.4 s of start-up
        # (measured on a loaded 2-core machine) that every other command would pay.
        from distributed import Client, LocalCluster
    except ImportError:
        raise CampaignError("--dask needs the distributed package: pip install 'dask[distributed]'") from None
    cluster = None
    try:
        if target == "local":
            n = n or os.cpu_count() or 1
            cluster = LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
            )
            client = Client(cluster)
        else:
            client = Client(target, timeout=f"{DASK_CONNECT_TIMEOUT_S:g}s")
    except Exception as e:  # noqa: BLE001 - whatever answered is not a scheduler we can use
        if cluster is not None:
            cluster.close()
        what = "cannot start a local Dask cluster" if target == "local" else "cannot reach a Dask scheduler at that address"
        raise CampaignError(f"--dask {address}: {what} ({_dask_failure(e)})") from None
    pool = DaskPool(client, cluster)
    try:
        if cluster is not None:
            client.run(_ignore_sigint)
            pids = [pid for pid in client.run(os.getpid).values() if pid != os.getpid()]
            pool.workers = [(pid, _started(pid)) for pid in pids]
        if log:
            n_workers = len(client.scheduler_info().get("workers", {}))
            log(f"Dask: {client.scheduler.address}, {n_workers} worker(s)")
        yield pool
    finally:
        pool.close()


def _dask_failure(e: Exception) -> str:
    if isinstance(e, MemoryError):  # Dask read what answered as the length of a message
        return "something answered, but not a Dask scheduler"
    return f"{type(e).__name__}: {str(e)[:200]}" if not isinstance(e, OSError) else str(e)[:200]


def _run_dask(pool: DaskPool, tasks: list[dict], finish) -> int:
    from distributed import as_completed  # --dask only (see dask_client)

    client = pool.client
    n_workers = len(client.scheduler_info().get("workers", {})) or 1
    futures = {client.submit(execute, t, pure=False): t["key"] for t in tasks}
    try:
        completed = as_completed(futures)
        while True:
            with _waiting():
                fut = next(completed, None)
            if fut is None:
                break
            try:
                res = fut.result()
            except Exception as e:  # noqa: BLE001 - a lost worker fails this run, not the campaign
                res = {"key": futures[fut], "status": "failed", "error": f"Dask: {type(e).__name__}: {e}"}
            finish(res)
    except BaseException:
        # Stopped: no queued run of this campaign starts anywhere; a local cluster is closed
        # (its workers stopped) before the caller removes what they were writing.
        client.cancel(list(futures), force=True)
        pool.close()
        raise
    return n_workers


# ----------------------------------------------------------------------------- local pool


def _pool(workers: int) -> ProcessPoolExecutor:
    # spawn: the parent holds a DuckDB connection and threads that must not be forked.
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=mp.get_context("spawn"), initializer=_die_with_parent, initargs=(os.getpid(),)
    )


def _kill(pool: ProcessPoolExecutor) -> None:
    """Kills the pool's worker processes (by their PIDs) and waits until they are gone."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.join(5)
    pool.shutdown(wait=False, cancel_futures=True)


def _isolated(task: dict) -> dict:
    """Runs one task alone in a fresh worker: its own failure, even a dead process, is
    then surely its own."""
    pool = _pool(1)
    try:
        with _waiting():
            return pool.submit(execute, task).result()
    except BrokenProcessPool:
        return {
            "key": task["key"],
            "status": "failed",
            "error": "the worker process died during this run (killed, out of memory, or a crash of the simulator)",
        }
    finally:
        _kill(pool)


def _run_pool(workers: int, tasks: list[dict], finish) -> None:
    pool = _pool(min(workers, len(tasks)))
    suspects: list[dict] = []  # in flight when a worker died: each rerun alone
    try:
        pending: dict = {}
        queue = list(reversed(tasks))
        # Keep at most 2 × workers submitted so that a kill loses little queued work.
        while queue or pending:
            while queue and len(pending) < 2 * workers:
                t = queue.pop()
                pending[pool.submit(execute, t)] = t
            with _waiting():
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            broken = False
            for f in finished:
                t = pending.pop(f)
                try:
                    finish(f.result())
                except BrokenProcessPool:
                    suspects.append(t)
                    broken = True
            if broken:
                suspects.extend(pending.values())
                pending.clear()
                _kill(pool)
                pool = _pool(min(workers, len(tasks)))
        for t in suspects:
            finish(_isolated(t))
    except BaseException:
        # Interrupted: stop the workers now, before the folder's lock is released, so that
        # no run of this campaign is still being written when the command returns.
        _kill(pool)
        raise
    pool.shutdown(wait=True)


# ----------------------------------------------------------------------------- a campaign


def run(
    campaign: Campaign,
    out: Path,
    workers: int | None = None,
    dask: str | None = None,
    force: bool = False,
    retry_failed: bool = False,
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[RunSpec, Outcome], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> Summary:
    """Runs (or resumes) ``campaign`` into the folder ``out``."""
    backends.get(campaign.backend)  # BackendError for an unknown name, before anything is written
    workers = workers or os.cpu_count() or 1
    if not 1 <= workers <= limits.WORKERS_MAX.value:
        raise CampaignError(f"--workers {workers}: expected 1 to {int(limits.WORKERS_MAX.value)} ({limits.WORKERS_MAX.reason})")
    if campaign.backend in EXCLUSIVE_BACKENDS:
        if (workers > 1 or dask) and log:
            log(f"backend {campaign.backend} runs on shared hosts: one run at a time (--workers 1, no Dask)")
        workers, dask = 1, None
    if dask:
        parse_dask(dask)
    t0 = time.perf_counter()
    with _signals_stop(), _maybe_dask(dask, log) as client, CampaignFolder(out, campaign, force=force) as folder:
        todo, skipped, adopted = _plan(folder, campaign, retry_failed)
        if folder.grown_from is not None and log:
            log(f"{out}: grows from {folder.grown_from} to {campaign.repetitions} repetitions ({len(todo)} runs to do)")
        if on_start:
            on_start(len(campaign.runs), skipped + adopted)
        counts = {"ok": 0, "failed": 0}
        by_key = {r.key: r for r in campaign.runs}

        def finish(res: dict) -> None:
            o = Outcome(res["key"], res["status"], res.get("metrics"), res.get("error"), res.get("wall"))
            r = by_key[o.key]
            if o.status == "ok" and not folder.complete_folder(r):
                o = Outcome(o.key, "failed", error="the run folder is incomplete after the run", wall=o.wall)
            folder.record(r, o.status, metrics=o.metrics, error=o.error, wall=o.wall)
            counts[o.status] += 1
            if on_result:
                on_result(r, o)

        tasks = _tasks(folder, todo)
        try:
            if tasks and client is not None:
                workers = _run_dask(client, tasks, finish)
            elif tasks and workers == 1:
                for t in tasks:
                    with _waiting():
                        res = execute(t)
                    finish(res)
            elif tasks:
                _run_pool(workers, tasks, finish)
        except BaseException:
            folder.clear_staging()  # the workers are stopped: what they were writing goes
            raise
        return Summary(len(campaign.runs), skipped, adopted, counts["ok"], counts["failed"], time.perf_counter() - t0, workers)


@contextmanager
def _maybe_dask(dask: str | None, log):
    if not dask:
        yield None
        return
    with dask_client(dask, log) as client:
        yield client


def _plan(folder: CampaignFolder, campaign: Campaign, retry_failed: bool) -> tuple[list[RunSpec], int, int]:
    """What is left to run: (runs to do, runs already recorded, complete folders adopted)."""
    done = folder.recorded()
    folder.clear_staging()  # what a stopped or killed campaign's workers were writing
    todo, adopted, skipped = [], 0, 0
    for r in campaign.ordered():
        status = done.get(r.key)
        if status == "ok" or (status == "failed" and not retry_failed):
            skipped += 1
            continue
        if status is None and folder.complete_folder(r):
            folder.adopt(r)
            adopted += 1
            continue
        todo.append(r)
    return todo, skipped, adopted
