"""Where a case's sides are kept, and read back: a results directory (Options.results: per
case and backend ``<stem>-<backend>.json``, and the kernel's duration samples
``<stem>-netns-samples.parquet``), and archived kernel runs of the matrix.

A kernel run of the matrix is an hour of a quiet machine and cannot be made again the same:
``archive`` keeps what every judgement reads of it (each case's figures and flow starts, not
its samples) as one gzipped JSON in benches/fidelity-runs/, in the repository. A RUN the
judgement reads (``kernel_side``, ``kernel_run``) is such an archive or a results directory."""

from __future__ import annotations

import datetime
import functools
import gzip
import json
import os
from pathlib import Path

import pandas as pd

from .. import engine
from ..backends import netns as netns_backend
from .figures import sample_fields
from .matrix import Case, matrix
from .settings import ARCHIVE, OPTIONS

#: What an archive keeps of each run: the figures every judgement reads (no trajectories).
ARCHIVED = (
    "goodput_mbps", "jain", "cov", "retransmissions", "drops", "makespan_s", "timeouts",
    "ss_ssthresh", "ss_time_s", "first_loss_s", "broken", "starts_s", "load", "late_mean_ms",
    "reord_seen", "acks_per_seg", "rx_batch", "backlog_merged", "unclean", "waits", "acks",
)  # fmt: skip


def stored(results: Path, case: Case, backend: str = "netns", samples: bool = True) -> dict | None:
    """A case's side on ``backend`` as stored in a results directory:
    ``{"duration": …, "volume": …}`` or ``{"failed": …}``; None if not run. Duration fields
    are read from its samples where they are kept (the table's reading of the samples may
    be newer than the run), unless ``samples`` is False (the figures as the run kept them)."""
    path = results / f"{case.stem}-{backend}.json"
    if not path.exists():
        return None
    got = json.loads(path.read_text())
    kept = results / f"{case.stem}-{backend}-samples.parquet"
    if samples and "failed" not in got and kept.exists():
        got["duration"] |= sample_fields(pd.read_parquet(kept))
    return got


def stored_cases(results: Path) -> dict:
    """The kernel side of each case of the matrix stored in ``results``, as an archive keeps
    it: the ARCHIVED fields of its duration and volume runs, or why it failed."""
    cases = {}
    for case in matrix():
        got = stored(results, case)
        if got is None:
            continue
        if "failed" in got:
            cases[case.key] = {"failed": got["failed"]}
            continue
        cases[case.key] = {kind: {f: got[kind][f] for f in ARCHIVED if f in got[kind]} for kind in ("duration", "volume")}
    return cases


def archive(name: str, results: Path | None = None, into: Path | None = None, cases: dict | None = None, note: str = "") -> Path:
    """Keep ``cases`` (table.read_table's), or the kernel side of the matrix stored in
    ``results`` (Options.results), as ``into/NAME.json.gz`` (into ARCHIVE)."""
    results, into = results or OPTIONS.results, into or ARCHIVE
    host = None
    if cases is None:  # a run stored on this machine: the machine it ran on, which it measures too
        cases = stored_cases(results)
        note = note or f"the kernel ({os.uname().release}) as run into {results}"
        host = {"kernel": os.uname().release, "cpu": engine.cpu_model(), "cpus": os.cpu_count()}
    if not cases:
        raise SystemExit(f"error: no kernel run of the matrix is stored in {results}")
    doc = {"name": name, "note": note, "archived": datetime.date.today().isoformat(), "cases": cases}
    if host is not None:
        doc["host"] = host
    into.mkdir(parents=True, exist_ok=True)
    path = into / f"{name}.json.gz"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(json.dumps(doc, indent=0, sort_keys=True).encode(), mtime=0))
    tmp.replace(path)
    return path


@functools.cache
def archived(path: Path) -> dict:
    """An archive's cases (``--archive``), read as figures.sample_fields reads samples today."""
    try:
        cases = json.loads(gzip.decompress(path.read_bytes()))["cases"]
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"error: {path} is not an archived kernel run of the matrix: {e}") from e
    for got in cases.values():
        if "duration" in got:
            got["duration"] = unseen_starts_dropped(got["duration"])
    return cases


def unseen_starts_dropped(d: dict) -> dict:
    """Archived duration figures without what their samples did not see (figures.seen_from_start):
    a first loss at time 0 was a retransmission before the first sample."""
    d = dict(d)
    if d.get("first_loss_s") == 0.0:
        d["ss_ssthresh"] = d["ss_time_s"] = d["first_loss_s"] = None
    return d


def kernel_side(run: Path, case: Case, samples: bool = True) -> dict | None:
    """A case's kernel side in ``run``, an archive or a results directory (``samples``: see
    stored)."""
    return archived(run).get(case.key) if run.is_file() else stored(run, case, samples=samples)


def unclean(side: dict) -> bool:
    """Whether a kernel run's emulation was not the scenario: the netns backend's verdict
    (its delay line late beyond tolerance, or packets lost outside the bottleneck: "the host
    was too loaded for this run to be trusted"), or, for runs stored before it was kept
    (2026-11-29), their delay line's mean lateness beyond the backend's tolerance."""
    if "unclean" in side:
        return bool(side["unclean"])
    return (side.get("late_mean_ms") or 0.0) > netns_backend.LATE_MEAN_MS


def kernel_run(run: Path, case: Case) -> dict | None:
    """A case's kernel figures in ``run`` (an archive or a results directory), or None if it
    is missing, failed, void, or unclean."""
    got = kernel_side(run, case)
    if got is None or "failed" in got or got["duration"].get("broken") is not None:
        return None
    if unclean(got["duration"]) or unclean(got["volume"]):
        return None
    return {**got["duration"], "makespan_s": got["volume"]["makespan_s"]}


def flow_starts(kernel: dict | None, n_flows: int) -> dict | None:
    """The flow starts per kind of a kernel side (kind → its figures), for the simulators'
    runs of the case (None: one flow, or no kernel run of it, or a failed one)."""
    if n_flows == 1 or kernel is None or "failed" in kernel:
        return None
    return {kind: kernel[kind].get("starts_s") for kind in ("duration", "volume")}


def starts_from_kernel(run: Path, case: Case) -> dict | None:
    """The kernel's flow starts per kind of ``case`` in ``run`` (an archive or a results
    directory), for the simulators' runs of the case."""
    return flow_starts(kernel_side(run, case), case.flows)
