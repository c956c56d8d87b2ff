"""Flow scheduling of transfer requests (seed 001): the planner.

A request asks to move ``volume`` bytes between its ``release`` time and its ``deadline``.
Given the bottleneck's ideal transport rate r_TP (seed 001 §3.3) the planner returns, for
each request, when it starts and a piecewise-constant rate over time (an allocation
profile), the completion time this predicts, and whether it was admitted. It is pure: no
backend, no clock — the scenario turns a plan into flows, and any backend runs them.

Strategies (seed 001 §3; Chen & Primet, CCGrid 2007, cited there):

* ``ifs`` — instantaneous fair sharing: every request starts at its release, unlimited; TCP
  shares the link (predicted here as max-min fair sharing of r_TP).
* ``vifi`` — virtual finish time first: one request at a time, at the full rate, in the order
  in which they would finish under fair sharing; the next starts when the previous completes.
* ``spaghetti`` (``minrate``) — one rate per request over its whole window, volume / (deadline
  − release): optimal (minimal congestion factor) when all requests share one window.
  Without deadlines, the window ends at the earliest common makespan.
* ``multirate`` — the step-function allocation that minimises the largest load on the link
  over the intervals between releases and deadlines (O(r) intervals): optimal for different
  windows. Solved as a linear program.
* ``edf`` — earliest deadline first: the released request with the earliest deadline has the
  whole link (preempting), one at a time.

Admission control refuses, first come first served, a request that cannot meet its deadline
on top of those already admitted, and says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linprog

from . import models

STRATEGIES = ("ifs", "vifi", "spaghetti", "multirate", "edf")
#: Relative slack of the load constraints (floating-point, not physics).
_EPS = 1e-9


class PlanError(ValueError):
    """Requests that no plan can serve as asked (a volume that cannot fit its window)."""


@dataclass(frozen=True)
class Request:
    volume_bytes: int
    release_s: float = 0.0
    deadline_s: float | None = None
    priority: int = 0
    name: str = ""


@dataclass
class Allocation:
    """One request's share of the plan: ``segments`` are (start, end, rate in bit/s of
    goodput); ``rate_bps`` None means unlimited (fair sharing or a lone transfer)."""

    request: int
    admitted: bool = True
    reason: str = ""
    start_s: float | None = None
    segments: list[tuple[float, float, float | None]] = field(default_factory=list)
    completion_s: float | None = None  # predicted, from the run's start
    after: int | None = None  # starts when this request completes (vifi, edf)

    @property
    def single_rate_bps(self) -> float | None:
        rates = {r for _, _, r in self.segments if r}
        return rates.pop() if len(rates) == 1 else None


@dataclass
class Plan:
    strategy: str
    capacity_bps: float  # r_TP, goodput
    requests: list[Request]
    allocations: list[Allocation]
    congestion_factor: float | None = None  # multirate: the largest load / capacity

    @property
    def makespan_s(self) -> float | None:
        done = [a.completion_s for a in self.allocations if a.admitted and a.completion_s is not None]
        return max(done) - min(r.release_s for r in self.requests) if done else None

    @property
    def ideal_makespan_s(self) -> float:
        """(Σ v) / r_TP from the first release, as seed 001's Tables 2–3 measure deficiency."""
        first = min(r.release_s for r in self.requests)
        ends = models.ideal_completion_times(
            [r.volume_bytes for r in self.requests], [r.release_s - first for r in self.requests], math.inf, self.capacity_bps
        )
        return max(e + r.release_s - first for e, r in zip(ends, self.requests, strict=True))


def plan(requests: list[Request], capacity_bps: float, strategy: str) -> Plan:
    """The plan of ``strategy`` for ``requests`` on a link of ideal goodput ``capacity_bps``."""
    if strategy == "minrate":
        strategy = "spaghetti"
    if strategy not in STRATEGIES:
        raise PlanError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)}, minrate)")
    if not requests:
        raise PlanError("no request to plan")
    _check_windows(requests, capacity_bps)
    builder = {"ifs": _ifs, "vifi": _vifi, "spaghetti": _spaghetti, "multirate": _multirate, "edf": _edf}[strategy]
    return builder(requests, capacity_bps)


def _check_windows(requests: list[Request], c: float) -> None:
    for i, r in enumerate(requests):
        if r.volume_bytes <= 0:
            raise PlanError(f"requests[{i}]: the volume must be positive")
        if r.deadline_s is not None:
            if r.deadline_s <= r.release_s:
                raise PlanError(f"requests[{i}]: the deadline {r.deadline_s:g} s is not after the release {r.release_s:g} s")
            alone = r.volume_bytes * 8 / c
            if r.release_s + alone > r.deadline_s * (1 + _EPS):
                raise PlanError(
                    f"requests[{i}]: {r.volume_bytes:,} bytes need {alone:.3f} s even alone at r_TP = {c / 1e6:.2f} Mbit/s, "
                    f"more than its window ({r.deadline_s - r.release_s:.3f} s)"
                )


# ----------------------------------------------------------------------------- strategies


def _ifs(requests: list[Request], c: float) -> Plan:
    """Everyone at release, unlimited; completions as max-min fair sharing predicts."""
    times = models.ideal_completion_times([r.volume_bytes for r in requests], [r.release_s for r in requests], math.inf, c)
    allocs = [
        Allocation(i, start_s=r.release_s, segments=[(r.release_s, r.release_s + t, None)], completion_s=r.release_s + t)
        for i, (r, t) in enumerate(zip(requests, times, strict=True))
    ]
    return _admit(Plan("ifs", c, requests, allocs))


def _serial(requests: list[Request], c: float, order: list[int], name: str) -> Plan:
    """One request at a time at the full rate, in ``order``; each starts when the previous
    completes (or at its release, if later)."""
    allocs: dict[int, Allocation] = {}
    t, prev = -math.inf, None
    for i in order:
        r = requests[i]
        start = max(t, r.release_s)
        end = start + r.volume_bytes * 8 / c
        allocs[i] = Allocation(
            i, start_s=start, segments=[(start, end, None)], completion_s=end, after=prev if start == t else None
        )
        t, prev = end, i
    return _admit(Plan(name, c, requests, [allocs[i] for i in range(len(requests))]))


def _vifi(requests: list[Request], c: float) -> Plan:
    """Virtual finish time first: the order in which fair sharing would finish them."""
    finish = [a.completion_s for a in _ifs(requests, c).allocations]
    order = sorted(range(len(requests)), key=lambda i: (finish[i], requests[i].release_s, i))
    return _serial(requests, c, order, "vifi")


def _edf(requests: list[Request], c: float) -> Plan:
    """Earliest deadline first, preemptive: at each moment the released request with the
    earliest deadline (then the highest priority, then the earliest release) has the link."""
    left = {i: r.volume_bytes * 8.0 for i, r in enumerate(requests)}
    segs: dict[int, list] = {i: [] for i in left}
    t = min(r.release_s for r in requests)
    while left:
        ready = [i for i in left if requests[i].release_s <= t + _EPS]
        if not ready:
            t = min(requests[i].release_s for i in left)
            continue
        i = min(ready, key=lambda k: (requests[k].deadline_s or math.inf, -requests[k].priority, requests[k].release_s, k))
        nxt = min([requests[k].release_s for k in left if requests[k].release_s > t + _EPS], default=math.inf)
        run = min(left[i] / c, nxt - t)
        segs[i].append((t, t + run, None))  # alone on the link: unlimited while it runs
        left[i] -= run * c
        t += run
        if left[i] <= _EPS * requests[i].volume_bytes * 8:
            del left[i]
    allocs = []
    for i in range(len(requests)):
        s = _merge(segs[i])
        allocs.append(Allocation(i, start_s=s[0][0], segments=s, completion_s=s[-1][1]))
    for a in allocs:  # a request that takes over when another completes follows it (a signal)
        a.after = next((b.request for b in allocs if b is not a and abs(b.completion_s - a.start_s) < 1e-9), None)
    return _admit(Plan("edf", c, requests, allocs))


def _spaghetti(requests: list[Request], c: float) -> Plan:
    """One rate per request over its whole window (seed 001 §3): volume / window. Requests
    without a deadline share the earliest makespan all of them could meet."""
    common = min(r.release_s for r in requests) + _ideal_makespan(requests, c)
    allocs = []
    for i, r in enumerate(requests):
        end = r.deadline_s if r.deadline_s is not None else common
        rate = r.volume_bytes * 8 / (end - r.release_s)
        allocs.append(Allocation(i, start_s=r.release_s, segments=[(r.release_s, end, rate)], completion_s=end))
    p = _admit(Plan("spaghetti", c, requests, allocs))
    p.congestion_factor = _peak_load(p) / c
    return p


def _multirate(requests: list[Request], c: float) -> Plan:
    """The step-function allocation that minimises the largest load over the intervals between
    releases and deadlines (Chen & Primet's BDTS optimum): min α s.t. each request's volume is
    spread over the intervals of its window and every interval carries ≤ α·C·length."""
    common = min(r.release_s for r in requests) + _ideal_makespan(requests, c)
    ends = [r.deadline_s if r.deadline_s is not None else common for r in requests]
    points = sorted({r.release_s for r in requests} | set(ends))
    intervals = list(zip(points[:-1], points[1:], strict=True))
    x, alpha = _min_congestion(requests, ends, intervals, c)
    allocs = []
    for i, r in enumerate(requests):
        segs = [(a, b, x[i][k] * 8 / (b - a)) for k, (a, b) in enumerate(intervals) if x[i][k] > _EPS * r.volume_bytes]
        segs = _merge(segs)
        allocs.append(Allocation(i, start_s=segs[0][0], segments=segs, completion_s=segs[-1][1]))
    p = _admit(Plan("multirate", c, requests, allocs))
    p.congestion_factor = alpha
    return p


def _min_congestion(requests, ends, intervals, c) -> tuple[list[list[float]], float]:
    """The linear program of :func:`_multirate`: variables x[i][k] (request i's bytes in
    interval k) and α; returns x and α. It is solved in seconds of link time (bytes·8/C), not
    bytes: with coefficients of 10⁹ the solver's tolerances gave a wrong optimum (1.067 where
    0.933 is feasible, found by tests/test_schedule.py)."""
    n, m = len(requests), len(intervals)
    nv = n * m + 1  # α is the last variable
    cost = np.zeros(nv)
    cost[-1] = 1.0
    a_eq, b_eq = np.zeros((n, nv)), np.array([r.volume_bytes * 8 / c for r in requests])
    a_ub, b_ub = np.zeros((m, nv)), np.zeros(m)
    bounds = []
    for i, r in enumerate(requests):
        for k, (lo, hi) in enumerate(intervals):
            inside = lo >= r.release_s - _EPS and hi <= ends[i] + _EPS
            bounds.append((0, None if inside else 0))
            a_eq[i, i * m + k] = 1.0
            a_ub[k, i * m + k] = 1.0
    for k, (lo, hi) in enumerate(intervals):
        a_ub[k, -1] = -(hi - lo)  # Σ_i x_ik ≤ α · length of interval k
    bounds.append((0, None))
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs")
    if res.status != 0:  # pragma: no cover - windows were checked, the program is feasible
        raise PlanError(f"multirate: no allocation ({res.message})")
    x = [[float(res.x[i * m + k]) * c / 8 for k in range(m)] for i in range(n)]
    return x, float(res.x[-1])


# ----------------------------------------------------------------------------- helpers


def _ideal_makespan(requests: list[Request], c: float) -> float:
    first = min(r.release_s for r in requests)
    times = models.ideal_completion_times(
        [r.volume_bytes for r in requests], [r.release_s - first for r in requests], math.inf, c
    )
    return max(t + r.release_s - first for t, r in zip(times, requests, strict=True))


def _merge(segs: list[tuple[float, float, float | None]]) -> list[tuple[float, float, float | None]]:
    """Adjacent segments of the same rate (or both unlimited) as one."""
    out: list[list] = []
    for a, b, rate in sorted(segs, key=lambda x: x[0]):
        same = out and (out[-1][2] == rate or (out[-1][2] is not None and rate is not None and math.isclose(out[-1][2], rate)))
        if same and abs(out[-1][1] - a) < 1e-9:
            out[-1][1] = b
        else:
            out.append([a, b, rate])
    return [tuple(s) for s in out]


def _peak_load(p: Plan) -> float:
    """The largest sum of planned rates at any moment (bit/s)."""
    cuts = sorted({t for a in p.allocations if a.admitted for s in a.segments for t in s[:2]})
    peak = 0.0
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=False):
        mid = (lo + hi) / 2
        peak = max(peak, sum(r or 0 for a in p.allocations if a.admitted for s0, s1, r in a.segments if s0 <= mid < s1))
    return peak


def _admit(p: Plan) -> Plan:
    """Admission control, first come first served: a request whose predicted completion is
    after its deadline, or whose rates overload the link on top of the requests admitted
    before it, is refused with the reason; the others keep their allocation."""
    order = sorted(range(len(p.requests)), key=lambda i: (p.requests[i].release_s, i))
    admitted: list[Allocation] = []
    for i in order:
        a, r = p.allocations[i], p.requests[i]
        if r.deadline_s is not None and a.completion_s is not None and a.completion_s > r.deadline_s * (1 + 1e-9) + 1e-9:
            a.admitted = False
            a.reason = f"the {p.strategy} plan completes it at {a.completion_s:.3f} s, after its deadline {r.deadline_s:g} s"
            continue
        if a.segments and all(s[2] is not None for s in a.segments):
            peak = _peak_load(Plan(p.strategy, p.capacity_bps, p.requests, [*admitted, a]))
            if peak > p.capacity_bps * (1 + 1e-6):
                a.admitted = False
                a.reason = (
                    f"its rate on top of the requests admitted before it needs {peak / 1e6:.2f} Mbit/s, "
                    f"more than r_TP = {p.capacity_bps / 1e6:.2f} Mbit/s"
                )
                continue
        admitted.append(a)
    return p


def rate_steps(segments: list[dict]) -> list[tuple[float, float | None]]:
    """A request's planned segments (``start_s``, ``end_s``, ``rate_bps``) as the steps a
    limiter follows: (time, rate) from that time on, a pause (rate 0) wherever the plan leaves
    a gap between two segments (preemption), None for an unlimited stretch."""
    steps = [(segments[0]["start_s"], segments[0]["rate_bps"])]
    for prev, g in zip(segments, segments[1:], strict=False):
        if g["start_s"] > prev["end_s"] + _EPS:
            steps.append((prev["end_s"], 0.0))
        steps.append((g["start_s"], g["rate_bps"]))
    return steps


def fluid_rates(plan_requests: list[dict], capacity_bps: float) -> list[tuple[float, float, dict[int, float]]]:
    """The planned rates of every request over time, as a fluid: limited stretches at their
    rate, unlimited ones sharing what is left of r_TP equally (what fair sharing predicts);
    ``plan_requests`` are RunInfo.plan.requests rows. Returns (start, end, {request: bit/s})."""
    segs = [
        (r["request"], g["start_s"], g["end_s"], g["rate_bps"]) for r in plan_requests if r["admitted"] for g in r["segments"]
    ]
    cuts = sorted({t for _, a, b, _ in segs for t in (a, b)})
    out = []
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=False):
        mid = (lo + hi) / 2
        active = [(k, rate) for k, a, b, rate in segs if a <= mid < b]
        if not active:
            continue
        fixed = sum(rate for _, rate in active if rate is not None)
        free = [k for k, rate in active if rate is None]
        share = max(0.0, capacity_bps - fixed) / len(free) if free else 0.0
        out.append((lo, hi, {k: (rate if rate is not None else share) for k, rate in active}))
    return out
