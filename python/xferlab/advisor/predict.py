"""A whole job's completion time from short runs, and the harm a configuration does to the
competing flows.

**Method.** Each run (one seed) goes through slow start and several congestion epochs. In its
job goodput series (one value per interval), the steady state starts at the first interval
whose goodput reaches STEADY_SHARE of the median of the run's second half: before it is the
start-up, which costs t_ss seconds and moves B_ss bytes (both measured; at a scale s > 1,
slow start lasts log2(s) round trips longer on the real path, added to t_ss). Then

    T = t_ss + (V − B_ss) / g,

where g is the job's goodput over the rest of the transfer. Its distribution comes from a
block bootstrap: the steady intervals of every seed are cut into blocks of one congestion
epoch, and g is the mean of as many blocks, drawn with replacement from all seeds, as the
rest of the transfer lasts (with 30 blocks or more, the normal law of that mean, by the
central limit theorem). p50, p99 and P(T ≤ deadline) are read from BOOTSTRAP draws of T,
each with the start-up of a seed drawn at random. So a long job's spread shrinks as 1/√n
epochs: the host noise averages out; what the simulator does not model (path changes,
other traffic than the competitors declared) is not in it.

**On Linux.** [p1, p99] is the simulator's own spread; what it does not model of Linux is
not in it. The band on Linux widens it by the simulator's error against this host's kernel
on whole transfers over the fidelity matrix (``error.py``): [p1 × q05, p99 × q95] of the
kernel ÷ simulator completion-time ratios of its cases.

When the job is short enough to be simulated whole (``runs`` decides), its completion times
are used as they are (p50, p99 of the seeds, linear interpolation).

**Harm.** The competing flows' goodput loss: 1 − (their goodput beside the job) / (their
goodput alone on the path), each over the job run's steady state, seed by seed (common
random numbers: repetition k of the baseline and of each configuration share a seed), the
mean over seeds. 0 % is no harm; with n competitors, 1/(n + 1) is what a job taking exactly
its fair share would cost them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import error
from .candidates import Plan
from .question import Question

#: The steady state starts where the goodput first reaches this share of the second half's median.
STEADY_SHARE = 0.8
#: Bootstrap draws of the completion time.
BOOTSTRAP = 4000
#: From this many blocks on, the mean of the blocks is drawn from its normal law.
CLT_BLOCKS = 30


@dataclass(frozen=True)
class Startup:
    t_s: float  # the start-up's length, on the real path
    bytes: float  # bytes the job moved during it
    steady_bps: np.ndarray  # the goodput of every steady interval


@dataclass(frozen=True)
class Prediction:
    p1_s: float
    p50_s: float
    p99_s: float
    goodput_bps: float  # the mean steady goodput
    p_deadline: float | None  # P(T ≤ deadline), with a deadline
    method: str  # "steady state" or "whole job"
    linux_lo_s: float = math.inf  # the band on Linux: [p1, p99] widened by the simulator's error (error.py)
    linux_hi_s: float = math.inf

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def startup(job_bps: list[float], q: Question, p: Plan) -> Startup:
    """A run's start-up and steady state (see the module's method)."""
    g = np.asarray(job_bps, dtype=float)
    if len(g) == 0:
        return Startup(0.0, 0.0, np.zeros(1))
    threshold = STEADY_SHARE * float(np.median(g[len(g) // 2 :]))
    first = int(np.argmax(g >= threshold)) if threshold > 0 else 0
    steady = g[first:] if first < len(g) else g[-1:]
    extra = q.rtt_s * math.log2(p.scale) if p.scale > 1 else 0.0
    return Startup(first * p.interval_s + extra, float(g[:first].sum() * p.interval_s / 8), steady)


def blocks(steady: np.ndarray, per_block: int) -> np.ndarray:
    """Means of the consecutive whole blocks of ``per_block`` intervals (the whole series as
    one block when it is shorter)."""
    n = len(steady) // per_block
    if n == 0:
        return np.array([steady.mean()])
    return steady[: n * per_block].reshape(n, per_block).mean(axis=1)


def predict(job_series: list[list[float]], q: Question, p: Plan, rng: np.random.Generator) -> Prediction:
    """The completion time of the whole job from the job's goodput series of each seed."""
    starts = [startup(s, q, p) for s in job_series]
    per_block = max(1, round(p.epoch_s / p.interval_s))
    pool = np.concatenate([blocks(s.steady_bps, per_block) for s in starts])
    mean, sd = float(pool.mean()), float(pool.std())
    if mean <= 0:
        return Prediction(math.inf, math.inf, math.inf, 0.0, 0.0 if q.deadline_s else None, "steady state")
    pick = rng.integers(len(starts), size=BOOTSTRAP)
    t_ss = np.array([s.t_s for s in starts])[pick]
    rest = np.maximum(q.volume_bytes - np.array([s.bytes for s in starts])[pick], 0.0) * 8
    n = np.maximum(1, np.ceil(rest / (mean * per_block * p.interval_s))).astype(int)
    g = rng.normal(mean, sd / np.sqrt(n))
    small = n < CLT_BLOCKS
    if small.any():  # the mean of n blocks drawn with replacement: the first n of CLT_BLOCKS draws
        k = n[small]
        draws = pool[rng.integers(len(pool), size=(len(k), CLT_BLOCKS))]
        g[small] = (draws * (np.arange(CLT_BLOCKS) < k[:, None])).sum(axis=1) / k
    t = t_ss + rest / np.maximum(g, mean * 1e-3)
    return _summary(t, mean, q, "steady state")


def whole(completions: list[float], q: Question) -> Prediction:
    """The prediction of jobs simulated whole: their completion times as they are."""
    t = np.asarray(completions, dtype=float)
    return _summary(t, q.volume_bytes * 8 / float(np.median(t)), q, "whole job")


def _summary(t: np.ndarray, goodput: float, q: Question, method: str) -> Prediction:
    p1, p50, p99 = (float(x) for x in np.quantile(t, [0.01, 0.5, 0.99]))
    meet = float(np.mean(t <= q.deadline_s)) if q.deadline_s is not None else None
    return Prediction(p1, p50, p99, goodput, meet, method, *error.band(p1, p99))


def harm(job_runs: list[dict], baseline: dict[int, dict], q: Question, p: Plan) -> float | None:
    """The competitors' goodput loss (module docstring), over the seeds with a baseline run."""
    if q.competing == 0:
        return None
    losses = []
    for r in job_runs:
        base = baseline.get(r["rep"])
        if base is None:
            continue
        first = len(r["job_bps"]) - len(startup(r["job_bps"], q, p).steady_bps)
        alone = float(np.mean(base["competing_bps"][first:] or base["competing_bps"]))
        beside = float(np.mean(r["competing_bps"][first:] or r["competing_bps"]))
        losses.append(1 - beside / alone if alone > 0 else 0.0)
    return float(np.mean(losses)) if losses else None
