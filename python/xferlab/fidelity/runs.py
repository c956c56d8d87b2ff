"""Both sides of a case, stored: each backend's duration and volume runs kept apart in
Options.results, so that a change to the simulator reruns only the simulator (``run_case``;
``--force`` reruns a backend's). A simulator's side stored by another build of the simulator,
with another model of the receivers' reads, or with other flow starts than the kernel's is
made again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..backends import extension
from ..backends.base import BackendError
from . import emulation, kernel, simulator
from .matrix import Case
from .settings import OPTIONS, READS_MODELS
from .store import flow_starts, starts_from_kernel, stored

#: The kernel's side first: the simulators' runs take its flows' starts.
RUNNERS = {"netns": kernel.run_netns, "sim": simulator.run_sim, "simplain": simulator.run_sim_plain}


def _stored(case: Case, backend: str, run, force: bool, starts: dict | None = None) -> dict:
    """One backend's results for a case (duration and volume runs), stored apart so that a
    change to the simulator reruns only the simulator. ``starts``: the kernel's flow starts
    per kind, which a simulator's run takes; a stored run made with other starts (or before
    the kernel's were known) is made again, and so is a simulator's run made with another
    model of the receivers' reads than Options.reads (one stored without saying: READS_MODELS[0])."""
    path = OPTIONS.results / f"{case.stem}-{backend}.json"
    want = {kind: (starts or {}).get(kind) for kind in ("duration", "volume")}
    if path.exists() and not force:
        res = json.loads(path.read_text())
        same_starts = starts is None or all(res[kind].get("starts_s") == want[kind] for kind in want)
        if same_starts and (backend == "netns" or made_now(res, case, backend)):
            return res
    try:
        res = {kind: run(case, kind) if starts is None else run(case, kind, starts_s=want[kind]) for kind in want}
    except BackendError as e:  # the netns backend refuses a case whose every attempt was void
        res = {"failed": str(e)}
        (OPTIONS.results / f"{case.stem}-{backend}-samples.parquet").unlink(missing_ok=True)
    if backend != "netns":
        res["simulator"] = extension.build_digest()
    if backend == "sim":
        res["reads"] = reads_tag(case)
    OPTIONS.results.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res))
    return res


def made_now(res: dict, case: Case, backend: str) -> bool:
    """Whether a simulator's stored side of ``case`` (``backend`` "sim" or "simplain") is
    what this build would make now: made by this build of the simulator
    (extension.build_digest; a side that does not say is an older build's) and, for "sim",
    with Options.reads and what it reads now (made_with_reads)."""
    if res.get("simulator") != extension.build_digest():
        return False
    return backend != "sim" or made_with_reads(res, case)


def made_with_reads(res: dict, case: Case) -> bool:
    """Whether a simulator's stored side of ``case`` was made with Options.reads and the measurement
    it reads now (one that does not say: the first of READS_MODELS, the default when they
    began to be recorded)."""
    return res.get("reads", READS_MODELS[0]) == reads_tag(case)


def reads_tag(case: Case) -> str:
    """Options.reads as a stored side of ``case`` records it: with the digest of what a model
    reads ("measured": emulation.EMULATION_READS; "stalls": the case's stall models,
    emulation.case_stalls_ns), so that a new measurement makes the simulator's stored sides
    again; "+tso-defer" with Options.tso_defer."""
    reads = tag = OPTIONS.reads
    if reads == "measured":
        tag = f"{reads}:{hashlib.sha256(emulation.EMULATION_READS.read_bytes()).hexdigest()[:12]}"
    if reads == "stalls":
        models = json.dumps([emulation.case_stalls_ns(case, kind) for kind in ("duration", "volume")])
        tag = f"{reads}:{hashlib.sha256(models.encode()).hexdigest()[:12]}"
    return tag + "+tso-defer" if OPTIONS.tso_defer else tag


def sim_starts(res: dict, n_flows: int) -> dict | None:
    """The kernel's flow starts per kind in a case's results (run_case), for the simulators."""
    netns = {kind: res[f"netns_{kind}"] for kind in ("duration", "volume")} if "netns_duration" in res else None
    return flow_starts(netns, n_flows)


def run_case(case: Case, force: frozenset = frozenset(), backends_: tuple = tuple(RUNNERS)) -> dict | None:
    """The backends' results for a case; a backend not in `backends_` only from storage
    (the plain simulator's are optional)."""
    res, missing = {"case": case.key}, False
    for name, run in RUNNERS.items():
        path = OPTIONS.results / f"{case.stem}-{name}.json"
        if name not in backends_ and not path.exists():
            missing |= name != "simplain"
            continue
        if name in backends_:  # else shown as stored, even if made with other starts
            starts = None if name == "netns" else sim_starts(res, case.flows)
            _stored(case, name, run, name in force, starts)
        got = stored(OPTIONS.results, case, name)
        if "failed" in got:
            res["failed"] = got["failed"]
            continue
        res[f"{name}_duration"], res[f"{name}_volume"] = got["duration"], got["volume"]
    return None if missing else res


def sim_side(case: Case, starts_from: Path) -> dict:
    """The simulator's figures for a case: as stored for the table, or, if none are (or
    they were made by another build or with another model of the reads), from runs made
    now (and stored) with the flows' starts of the kernel run in ``starts_from``."""
    path = OPTIONS.results / f"{case.stem}-sim.json"
    got = json.loads(path.read_text()) if path.exists() else None
    if got is None or not made_now(got, case, "sim"):
        got = _stored(case, "sim", RUNNERS["sim"], False, starts_from_kernel(starts_from, case))
    return {**got["duration"], "makespan_s": got["volume"]["makespan_s"]}
