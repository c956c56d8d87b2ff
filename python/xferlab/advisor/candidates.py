"""What the advisor tries, and how long each simulated run lasts.

A candidate is a variant × a number of parallel streams × a pacing rate (none, or a share of
the bottleneck). A run does not move the whole job: it lasts long enough to leave slow start
and go through several congestion epochs at this RTT (``run_length``), and ``predict``
extrapolates to the job's volume. When even such runs would not fit the budget, the path
is simulated with its rates divided by a scale (RTT and buffer in BDPs kept) and the
goodput multiplied back (``plan``); the result says which scale it used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import constants
from .question import AdviceError, Question

#: Variants tried, the default first (the simulator's, as variants.py names them).
VARIANTS = ("cubic", "reno", "bic", "highspeed", "htcp", "scalable", "bbr")
#: Parallel streams tried.
STREAMS = (1, 2, 4, 8, 16)
#: Pacing tried: none, or the transfer paced to this share of the bottleneck's r_TP.
PACING = (None, 0.9)
#: Congestion epochs a run covers after slow start.
EPOCHS = 4
#: Simulated packets per second of one core, all counted (data and ACKs at ~2 data packets
#: per ACK); measured 1.3–2 M/s on this machine (1 Gbit/s, 10–20 ms): a cost model
#: for the budget, not a promise.
SIM_PACKETS_PER_S = 1.4e6
#: A run's fixed cost (process, configuration, tables), seconds.
RUN_OVERHEAD_S = 0.05
#: Scales tried, smallest first. The scaled path keeps at least MIN_SCALED_BPS and a BDP of
#: MIN_SCALED_BDP packets: below them, windows of a few packets would not behave as the
#: real path's (a smaller budget then leaves runs out rather than scaling further).
SCALES = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
MIN_SCALED_BPS = 10e6
MIN_SCALED_BDP = 100
#: Repetitions the plan aims to fit for every candidate when it picks a scale.
TARGET_REPETITIONS = 3


@dataclass(frozen=True)
class Config:
    variant: str
    streams: int
    pacing: float | None  # share of r_TP the transfer is paced to, or None

    @property
    def label(self) -> str:
        pace = f", paced {self.pacing:.0%}" if self.pacing else ""
        return f"{self.variant} ×{self.streams}{pace}"

    def as_dict(self) -> dict:
        return {"variant": self.variant, "streams": self.streams, "pacing": self.pacing}


#: What a transfer does when nobody tunes it.
DEFAULT = Config("cubic", 1, None)


def candidates(competing: int = 0, variants: tuple[str, ...] = VARIANTS, streams: tuple[int, ...] = STREAMS) -> list[Config]:
    """Every candidate, the default first, then by streams, variant, pacing. With ``n``
    competing flows, pacing to the fair share, 1/(n + 1) of r_TP, is tried too."""
    pacing = PACING + ((round(1 / (competing + 1), 3),) if competing else ())
    grid = [Config(v, n, p) for n in streams for v in variants for p in pacing]
    return [DEFAULT, *(c for c in grid if c != DEFAULT)]


@dataclass(frozen=True)
class Plan:
    """How each run is simulated: the rates divided by ``scale``, ``run_s`` long, goodput
    sampled every ``interval_s``; ``epoch_s`` is the congestion epoch it was sized for."""

    scale: float
    run_s: float
    interval_s: float
    epoch_s: float
    slow_start_s: float
    run_cost_s: float  # one run's estimated CPU seconds (the cost model above)
    whole: bool = False  # each run moves the whole job (at scale 1), no extrapolation

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def run_length(q: Question, scale: float) -> tuple[float, float, float]:
    """(run length, epoch, slow start) in seconds for the path at ``scale``. The window of
    one stream that fills the path and its buffer is W = BDP + buffer packets; slow start
    doubles from 10 segments to W, about log2(W/10) + 2 round trips; a CUBIC epoch
    lasts K = cbrt(W·(1−β)/C) s (RFC 9438 §4.2, β = 0.7, C = 0.4), at least 8 round trips
    (the epoch of the faster variants). The run: slow start + EPOCHS epochs, ≥ 40 RTTs."""
    w = (constants.bdp_packets(q.bottleneck_bps / scale, q.rtt_s, q.mtu) + q.buffer_packets() / scale) or 1.0
    slow_start = q.rtt_s * (math.log2(max(w / 10, 1.0)) + 2)
    epoch = max(8 * q.rtt_s, (w * 0.3 / 0.4) ** (1 / 3))
    return max(40 * q.rtt_s, slow_start + EPOCHS * epoch), epoch, slow_start


def run_cost_s(q: Question, scale: float, run_s: float) -> float:
    """CPU seconds of one run: data packets at the scaled bottleneck rate, with ACKs."""
    packets = q.bottleneck_bps / scale / (8 * q.mtu) * run_s * 1.5
    return RUN_OVERHEAD_S + packets / SIM_PACKETS_PER_S


def plan(q: Question, n_candidates: int, budget_s: float, workers: int) -> Plan:
    """The smallest scale at which TARGET_REPETITIONS of every candidate fit the budget
    (the largest allowed when none does). A job alone on its path whose whole transfer
    costs no more than such a run is simulated whole instead."""
    p = _steady_plan(q, n_candidates, budget_s, workers)
    whole_s = 1.3 * q.ideal_time_s + 10 * q.rtt_s
    if q.competing == 0 and run_cost_s(q, 1, whole_s) <= p.run_cost_s:
        return Plan(1, whole_s, max(q.rtt_s, whole_s / 200), p.epoch_s, p.slow_start_s, run_cost_s(q, 1, whole_s), True)
    return p


def _steady_plan(q: Question, n_candidates: int, budget_s: float, workers: int) -> Plan:
    allowed = [
        s
        for s in SCALES
        if q.bottleneck_bps / s >= MIN_SCALED_BPS
        and constants.bdp_packets(q.bottleneck_bps / s, q.rtt_s, q.mtu) >= MIN_SCALED_BDP
    ] or [1]
    for scale in allowed:
        run_s, epoch, ss = run_length(q, scale)
        cost = run_cost_s(q, scale, run_s)
        if cost * n_candidates * TARGET_REPETITIONS <= budget_s * workers or scale == allowed[-1]:
            interval = max(q.rtt_s, run_s / 200)
            return Plan(scale, run_s, interval, epoch, ss, cost)
    raise AssertionError("unreachable")


def minimum_budget_s(p: Plan, runs: int, workers: int) -> float:
    """The budget that ``runs`` runs need at the least (one per worker at a time)."""
    return math.ceil(p.run_cost_s * math.ceil(runs / workers) * 10) / 10


def check_budget(p: Plan, budget_s: float, first_runs: int, workers: int) -> None:
    need = minimum_budget_s(p, first_runs, workers)
    if budget_s < need:
        what = "the default configuration and the competing flows alone" if first_runs > 1 else "one run"
        raise AdviceError(f"--budget {budget_s:g}s is too small for even {what}: at least {need:g}s")
