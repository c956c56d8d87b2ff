"""One advisor run on the simulator: the job's configuration, sharing the bottleneck with
the competing flows, as one simulator configuration; what comes back is the goodput of the
job and of the competitors per interval, rates scaled back to the real path.

The job is pair 0 with its streams; each competing flow is a pair of one stream running
the whole run. The scenario model gives every pair the same number of streams, so the
competing pairs' extra streams are removed from the resolved scenario before it becomes
the simulator's configuration (``backends/sim.py`` ``sim_config``). The Trace, metrics and
run folders are skipped: the advisor reads two columns of the goodput table.
"""

from __future__ import annotations

import json
import time

import numpy as np

from .. import scenario as sc
from ..backends.extension import module
from ..backends.sim import sim_config
from ..campaign.spec import derive_seed
from ..constants import qdisc_frame
from .candidates import Config, Plan
from .question import Question

#: The seed repetitions derive theirs from (campaign/spec.py's derive_seed).
BASE_SEED = 1


def scenario_of(q: Question, config: Config | None, p: Plan, rep: int, volume: bool = False) -> dict:
    """The scenario of one run: the job (None: the competitors alone) at the plan's scale,
    for the plan's length or (``volume``) until it has moved the whole job at scale 1."""
    scale = p.scale
    pairs = ([config] if config else []) + [None] * q.competing
    per_pair = [
        {"variant": c.variant, "rate_limit": f"{_pace_bps(q, c) / scale}bps" if c.pacing else None}
        if c
        else {"variant": q.competing_variant}
        for c in pairs
    ]
    workload = {"streams": config.streams if config else 1, "per_pair": per_pair, "reverse": q.reverse}
    if q.background:
        workload["background"] = {"level": q.background}
    workload.update({"volume": q.volume_bytes} if volume else {"duration": f"{p.run_s}s"})
    return {
        "name": "advice",
        "topology": {
            "pairs": len(pairs),
            "access_rate": f"{q.access_bps / scale}bps",
            "bottleneck_rate": f"{q.bottleneck_bps / scale}bps",
            "rtt": f"{q.rtt_s}s",
            "buffer": q.buffer if q.buffer.endswith("bdp") else str(max(1, round(int(q.buffer) / scale))),
            "mtu": q.mtu,
        },
        "workload": workload,
        "protocol": {"variant": config.variant if config else q.competing_variant, "limiter": "pacing"},
        "measure": {"goodput_interval": f"{p.interval_s}s", "window": "all"},
        "seed": derive_seed(BASE_SEED, rep),
    }


def _pace_bps(q: Question, c: Config) -> float:
    """The pacing rate of a paced candidate as the scenario counts it (qdisc frames, IP +
    14 B): its share of r_TP in goodput, turned into frames."""
    mss = q.mtu - q.header_bytes
    return c.pacing * q.goodput_bps * qdisc_frame(q.mtu) / mss


def run(task: dict) -> dict:
    """Runs one task (``q``, ``config``, ``plan``, ``rep``, ``volume`` as plain data) and
    returns the job's and the competitors' goodput per interval (bit/s, at scale 1) and,
    for a whole-volume run, the job's completion time."""
    t0 = time.perf_counter()
    q, p = Question(**task["q"]), Plan(**task["plan"])
    config = Config(**task["config"]) if task["config"] else None
    resolved = sc.resolve(sc.from_dict(scenario_of(q, config, p, task["rep"], task.get("volume", False))))
    job_pairs = 1 if config else 0
    resolved["flows"] = [f for f in resolved["flows"] if f["pair"] < job_pairs or f["stream"] == 0]
    for f in resolved["flows"]:
        if f["role"] == "reverse":  # others' traffic the other way: the competitors' variant
            f["variant"] = q.competing_variant
    out = module().run(json.dumps(sim_config(resolved)), None, 1.0)
    tables = dict(out["tables"])
    job, others, t = _series(tables["goodput"], tables["flows"], job_pairs, p, dict(out["stats"])["end_s"])
    completion = None
    if task.get("volume"):
        flows = tables["flows"].to_pydict()
        mine = [
            i for i, (pair, role) in enumerate(zip(flows["pair"], flows["role"], strict=True)) if pair == 0 and role == "transfer"
        ]
        ends = [flows["end"][i] for i in mine]
        done = all(flows["completion_time"][i] is not None for i in mine)
        completion = max(ends) - min(flows["start"]) if done else None
    return {
        "task": task["id"],
        "t": t.tolist(),
        "job_bps": job.tolist(),
        "competing_bps": others.tolist(),
        "completion_s": completion,
        "wall_s": time.perf_counter() - t0,
    }


def _series(goodput, flows, job_pairs: int, p: Plan, end_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per interval: the job's and the competitors' goodput (bit/s × scale), and the
    interval's start; reverse traffic is neither. Intervals the run did not cover whole
    are dropped."""
    g = goodput.to_pydict()
    f = flows.to_pydict()
    pair_of = {i: p for i, p, role in zip(f["flow_id"], f["pair"], f["role"], strict=True) if role != "reverse"}
    t = np.asarray(g["t"])
    starts = np.unique(t)
    idx = np.searchsorted(starts, t)
    is_job = np.array([pair_of.get(i, -1) in range(job_pairs) for i in g["flow_id"]], dtype=bool)
    is_other = np.array([pair_of.get(i, -1) >= job_pairs for i in g["flow_id"]], dtype=bool)
    b = np.asarray(g["bytes"], dtype=float)
    job = np.bincount(idx, weights=b * is_job, minlength=len(starts))
    others = np.bincount(idx, weights=b * is_other, minlength=len(starts))
    keep = starts + p.interval_s <= end_s + 1e-9
    to_bps = 8 * p.scale / p.interval_s
    return job[keep] * to_bps, others[keep] * to_bps, starts[keep]
