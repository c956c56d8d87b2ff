"""Running a campaign: a local process pool by default, a Dask cluster when given.

Workers compute a run and write its run folder (atomically, through the engine); the
parent alone writes the catalog, one transaction per finished run, as results arrive.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from .catalog import CampaignFolder
from .spec import Campaign, CampaignError, RunSpec

#: Backends that emulate on this host and so run one at a time.
EXCLUSIVE_BACKENDS = {"netns"}


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


def execute(task: dict) -> dict:
    """Runs one campaign run in a worker; never raises (a failure is a result)."""
    from .. import engine
    from .. import scenario as sc

    t0 = time.perf_counter()
    try:
        s = sc.from_dict(task["given"], task["key"])
        m = engine.run(s, task["given"], Path(task["out"]), backend=task["backend"], force=True)
        return {"key": task["key"], "status": "ok", "metrics": m, "wall": time.perf_counter() - t0}
    except Exception as e:  # noqa: BLE001 - any failure of one run is recorded, not fatal
        msg = f"{type(e).__name__}: {e}"
        if not isinstance(e, (sc.ScenarioError,)):
            msg += "\n" + "".join(traceback.format_exception(e)[-3:])
        return {"key": task["key"], "status": "failed", "error": msg.strip(), "wall": time.perf_counter() - t0}


def _die_with_parent(parent: int) -> None:
    """Worker initialiser: a SIGKILLed campaign takes its workers with it (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except OSError:
            pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    # Ctrl-C reaches the whole process group: the parent alone decides what to do.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _tasks(folder: CampaignFolder, runs: list[RunSpec]) -> list[dict]:
    return [{"key": r.key, "given": r.given, "out": str(folder.folder_of(r)), "backend": folder.campaign.backend} for r in runs]


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
    from .. import backends

    backends.get(campaign.backend)  # BackendError for an unknown name, before anything is written
    workers = workers or os.cpu_count() or 1
    if workers < 1:
        raise CampaignError("--workers must be at least 1")
    if campaign.backend in EXCLUSIVE_BACKENDS:
        if (workers > 1 or dask) and log:
            log(f"backend {campaign.backend} emulates on this host: one run at a time (--workers 1, no Dask)")
        workers, dask = 1, None
    t0 = time.perf_counter()
    with CampaignFolder(out, campaign, force=force) as folder:
        done = folder.recorded()
        by_key = {r.key: r for r in campaign.runs}
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
            folder.clear_partial(r)
            todo.append(r)
        if on_start:
            on_start(len(campaign.runs), skipped + adopted)
        counts = {"ok": 0, "failed": 0}

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
        if not tasks:
            pass
        elif dask:
            workers = _run_dask(dask, tasks, finish, log)
        elif workers == 1:
            for t in tasks:
                finish(execute(t))
        else:
            _run_pool(workers, tasks, finish)
        return Summary(
            planned=len(campaign.runs),
            skipped=skipped,
            adopted=adopted,
            ok=counts["ok"],
            failed=counts["failed"],
            wall_seconds=time.perf_counter() - t0,
            workers=workers,
        )


def _run_pool(workers: int, tasks: list[dict], finish) -> None:
    import multiprocessing as mp

    # spawn: the parent holds a DuckDB connection and threads that must not be forked.
    ctx = mp.get_context("spawn")
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(tasks)), mp_context=ctx, initializer=_die_with_parent, initargs=(os.getpid(),)
    )
    try:
        pending = set()
        queue = list(reversed(tasks))
        # Keep at most 2 × workers submitted so that a kill loses little queued work.
        while queue or pending:
            while queue and len(pending) < 2 * workers:
                pending.add(pool.submit(execute, queue.pop()))
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                try:
                    res = f.result()
                except BrokenProcessPool:
                    raise CampaignError(
                        "a worker process died (out of memory? killed?); the finished runs are recorded: "
                        "run the same command again to resume"
                    ) from None
                finish(res)
    except BaseException:
        # Interrupted: stop the workers now, before the folder's lock is released, so that
        # no run of this campaign is still being written when the command returns.
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _run_dask(address: str, tasks: list[dict], finish, log) -> int:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise CampaignError("--dask needs the distributed package: pip install 'dask[distributed]'") from None
    cluster = None
    if address == "local" or address.startswith("local:"):
        n = int(address.split(":", 1)[1]) if ":" in address else (os.cpu_count() or 1)
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    else:
        try:
            client = Client(address, timeout="20s")
        except (OSError, TimeoutError, ValueError) as e:
            raise CampaignError(f"--dask {address}: cannot reach the scheduler ({e})") from None
    try:
        n_workers = len(client.scheduler_info().get("workers", {})) or 1
        if log:
            log(f"Dask: {client.scheduler.address}, {n_workers} worker(s)")
        futures = {client.submit(execute, t, pure=False): t["key"] for t in tasks}
        for fut in as_completed(futures):
            try:
                res = fut.result()
            except Exception as e:  # noqa: BLE001 - a lost worker fails this run, not the campaign
                res = {"key": futures[fut], "status": "failed", "error": f"Dask: {type(e).__name__}: {e}"}
            finish(res)
        return n_workers
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
