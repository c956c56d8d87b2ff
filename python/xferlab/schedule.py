"""Flow scheduling of transfer requests (seed 001): the planner.

A request asks to move ``volume`` bytes between its ``release`` time and its ``deadline``.
Given the bottleneck's ideal transport rate r_TP (seed 001 §3.3) the planner returns, for
each request, when it starts and a piecewise-constant rate over time (an allocation
profile), the completion time this predicts, and whether it was admitted. It is pure: no
backend, no clock — the scenario turns a plan into flows, and any backend runs them.

Strategies (seed 001 §3; Chen & Primet, CCGrid 2007, cited there):

* ``ifs`` — instantaneous fair sharing: every request starts at its release, unlimited; TCP
  shares the link (predicted here as max-min fair sharing of r_TP).
* ``vifi`` — virtual finish time first: one request at a time, at the full rate; whenever the
  link is free, the released request that fair sharing would finish first goes next (work-
  conserving: the link never waits for a request released later).
* ``spaghetti`` (``minrate``) — one rate per request over its whole window, volume / (deadline
  − margin − release): optimal (minimal congestion factor) when all requests share one window.
* ``multirate`` — the step-function allocation that minimises the largest load on the link
  over the intervals between releases and deadlines (O(r) intervals): optimal for different
  windows. Solved as a sparse linear program (scipy's HiGHS).
* ``edf`` — earliest deadline first: the released request with the earliest deadline has the
  whole link (preempting), one at a time.

Requests without a deadline, under spaghetti and multirate, take what the requests with
deadlines leave, in release order. Those waiting when the link is free of earlier ones start
together; where what is left stays the same until they are done they also end together,
each at a share in proportion to its volume (seed 001's spaghetti: rates of 1/3 and 2/3 of
r_TP for 15 and 30 GB), else they take it one after another.

Admission. Under spaghetti and multirate, first come first served: a request whose rates
would overload r_TP on top of the requests admitted before it is refused. Under ifs, vifi and
edf, a request the plan completes after its deadline is refused. Either way the plan is then
made again without the refused requests, so a refusal leaves no idle link and no admitted
request waits for a refused one; the reason of each refusal is kept.

The margin. A transfer ends later than its planned data time by what a start and an end cost
(slow start's first rounds, the last byte's way to the receiver, its commit), so a plan that
ends a request exactly at its deadline has it "missed" by tens of milliseconds. Every plan
ends each request ``margin_s`` before its deadline (the scenario's ``schedule.margin``).

Scale: ifs, vifi, edf and spaghetti plan n requests in O(n log n) (heaps and one sweep);
multirate's linear program has one variable per request and interval of its window, built
sparse and refused over :data:`xferlab.limits.MULTIRATE_VARIABLES_MAX`.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from . import limits

STRATEGIES = ("ifs", "vifi", "spaghetti", "multirate", "edf")
#: Relative slack of the load and volume checks (floating-point, not physics).
_EPS = 1e-9
#: Strategies that report a congestion factor (their rates are explicit).
_RATED = ("spaghetti", "multirate")


class PlanError(ValueError):
    """Requests that no plan can serve as asked (a volume that cannot fit its window), or a
    plan over the limits of :mod:`xferlab.limits`."""


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
    goodput); ``rate_bps`` None means unlimited (fair sharing or a lone transfer). A refused
    request has no segments, and its ``reason``."""

    request: int
    admitted: bool = True
    reason: str = ""
    start_s: float | None = None
    segments: list[tuple[float, float, float | None]] = field(default_factory=list)
    completion_s: float | None = None  # predicted, from the run's start
    after: int | None = None  # starts when this request completes (a signal can start it)

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
    congestion_factor: float | None = None  # spaghetti, multirate: the largest load / capacity
    margin_s: float = 0.0

    @property
    def origin_s(self) -> float | None:
        """The first admitted release: where the makespan and the ideal are measured from."""
        return min((self.requests[a.request].release_s for a in self.allocations if a.admitted), default=None)

    @property
    def makespan_s(self) -> float | None:
        done = [a.completion_s for a in self.allocations if a.admitted and a.completion_s is not None]
        return max(done) - self.origin_s if done else None

    @property
    def ideal_makespan_s(self) -> float | None:
        """(Σ v) / r_TP of the admitted requests from the first admitted release (seed 001's
        Tables 2–3), waiting where the link would be idle: the end of a work-conserving
        schedule, whatever its order."""
        kept = [self.requests[a.request] for a in self.allocations if a.admitted]
        return ideal_makespan(kept, self.capacity_bps) if kept else None


def ideal_makespan(requests: list[Request], capacity_bps: float) -> float:
    """The makespan of the ideal transport at ``capacity_bps`` from the first release: every
    work-conserving discipline (fair sharing among them) ends the last request then."""
    t = -math.inf
    for r in sorted(requests, key=lambda r: r.release_s):
        t = max(t, r.release_s) + r.volume_bytes * 8 / capacity_bps
    return t - min(r.release_s for r in requests)


def plan(requests: list[Request], capacity_bps: float, strategy: str, margin_s: float = 0.0) -> Plan:
    """The plan of ``strategy`` for ``requests`` on a link of ideal goodput ``capacity_bps``,
    each request ending ``margin_s`` before its deadline."""
    if strategy == "minrate":
        strategy = "spaghetti"
    if strategy not in STRATEGIES:
        raise PlanError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)}, minrate)")
    if not requests:
        raise PlanError("no request to plan")
    if len(requests) > limits.REQUESTS_MAX.value:
        raise PlanError(limits.too_big("requests:", len(requests), limits.REQUESTS_MAX, " requests"))
    if not (math.isfinite(capacity_bps) and capacity_bps > 0):
        raise PlanError(f"the link's ideal goodput {capacity_bps!r} bit/s is not a positive number")
    if not (math.isfinite(margin_s) and margin_s >= 0):
        raise PlanError(f"the margin {margin_s!r} s is not a non-negative number")
    _check_windows(requests, capacity_bps)
    refused = _too_tight(requests, capacity_bps, margin_s)
    build = {"ifs": _ifs, "vifi": _vifi, "spaghetti": _spaghetti, "multirate": _multirate, "edf": _edf}[strategy]
    allocs: dict[int, Allocation] = {}
    while True:  # a pass that planned a request it then refused is made again without it
        active = [i for i in range(len(requests)) if i not in refused]
        allocs, late = build(requests, active, capacity_bps, margin_s) if active else ({}, {})
        refused.update(late)
        if not late.keys() & allocs.keys():
            break
    out = [allocs[i] if i in allocs else Allocation(i, admitted=False, reason=refused[i]) for i in range(len(requests))]
    p = Plan(strategy, capacity_bps, requests, out, margin_s=margin_s)
    if strategy in _RATED:
        p.congestion_factor = peak_load(out) / capacity_bps
    return p


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


def _too_tight(requests: list[Request], c: float, margin: float) -> dict[int, str]:
    """Requests that fit their window alone, but not once the margin is kept before the deadline."""
    out = {}
    for i, r in enumerate(requests):
        if r.deadline_s is None or margin <= 0:
            continue
        alone = r.volume_bytes * 8 / c
        if r.release_s + alone > (r.deadline_s - margin) * (1 + _EPS):
            out[i] = (
                f"it needs {alone:.3f} s alone at r_TP = {c / 1e6:.2f} Mbit/s, and its window less the margin of "
                f"{margin * 1e3:.0f} ms before the deadline is {r.deadline_s - margin - r.release_s:.3f} s"
            )
    return out


def _due(r: Request, margin: float) -> float | None:
    """When the plan must have the request done: its deadline less the margin."""
    return None if r.deadline_s is None else r.deadline_s - margin


def _late(requests: list[Request], allocs: dict[int, Allocation], strategy: str, margin: float) -> dict[int, str]:
    """The requests a plan completes after their deadline (less the margin), with the reason."""
    out = {}
    for i, a in allocs.items():
        due = _due(requests[i], margin)
        if due is not None and a.completion_s > due + _EPS * max(1.0, abs(due)):
            less = f" less the margin of {margin * 1e3:.0f} ms" if margin > 0 else ""
            out[i] = (
                f"the {strategy} plan would complete it at {a.completion_s:.3f} s, after its deadline "
                f"{requests[i].deadline_s:g} s{less}"
            )
    return out


# ----------------------------------------------------------------------------- strategies


def fair_sharing(requests: list[Request], active: list[int], c: float) -> dict[int, float]:
    """Completion times (absolute) of ``active`` requests under max-min fair sharing of ``c``
    from their releases, uncapped (processor sharing): :func:`xferlab.models.ideal_completion_times`
    with unbounded access links, in O(n log n). Each active request is served at c / k; in
    "virtual time" (the bits each one has received since the first release) a request
    released at V₀ ends at V₀ + its volume, so completions come off a heap in that order."""
    order = sorted(active, key=lambda i: (requests[i].release_s, i))
    heap: list[tuple[float, int]] = []
    out: dict[int, float] = {}
    v_now, t, k = 0.0, -math.inf, 0
    while k < len(order) or heap:
        nxt = requests[order[k]].release_s if k < len(order) else math.inf
        if heap:
            t_done = t + (heap[0][0] - v_now) * len(heap) / c
            if t_done <= nxt:
                t, v_now = t_done, heap[0][0]
                while heap and heap[0][0] <= v_now * (1 + 1e-12):
                    out[heapq.heappop(heap)[1]] = t
                continue
            v_now += (nxt - t) * c / len(heap)
        t = nxt
        while k < len(order) and requests[order[k]].release_s <= t:
            heapq.heappush(heap, (v_now + requests[order[k]].volume_bytes * 8.0, order[k]))
            k += 1
    return out


def _ifs(requests: list[Request], active: list[int], c: float, margin: float):
    """Everyone at release, unlimited; completions as max-min fair sharing predicts."""
    done = fair_sharing(requests, active, c)
    allocs = {}
    for i in active:
        r = requests[i].release_s
        allocs[i] = Allocation(i, start_s=r, segments=[(r, done[i], None)], completion_s=done[i])
    return allocs, _late(requests, allocs, "ifs", margin)


def _vifi(requests: list[Request], active: list[int], c: float, margin: float):
    """Virtual finish time first, work-conserving: whenever the link is free, the released
    request that fair sharing would finish first runs alone at the full rate to its end."""
    finish = fair_sharing(requests, active, c)
    order = sorted(active, key=lambda i: (requests[i].release_s, i))
    ready: list[tuple[float, float, int]] = []
    allocs: dict[int, Allocation] = {}
    t, prev, k = -math.inf, None, 0
    while k < len(order) or ready:
        if not ready:
            t = max(t, requests[order[k]].release_s)
        while k < len(order) and requests[order[k]].release_s <= t:
            heapq.heappush(ready, (finish[order[k]], requests[order[k]].release_s, order[k]))
            k += 1
        i = heapq.heappop(ready)[2]
        end = t + requests[i].volume_bytes * 8 / c
        follows = prev if prev is not None and allocs[prev].completion_s == t else None
        allocs[i] = Allocation(i, start_s=t, segments=[(t, end, None)], completion_s=end, after=follows)
        t, prev = end, i
    return allocs, _late(requests, allocs, "vifi", margin)


def _edf(requests: list[Request], active: list[int], c: float, margin: float):
    """Earliest deadline first, preemptive, on the requests :func:`edf_admission` admits."""
    refused = edf_admission(requests, [i for i in active if requests[i].deadline_s is not None], c, margin)
    kept = [i for i in active if i not in refused]
    allocs = _edf_schedule(requests, kept, c)
    return allocs, {**refused, **_late(requests, allocs, "edf", margin)}


def _edf_schedule(requests: list[Request], active: list[int], c: float) -> dict[int, Allocation]:
    """Earliest deadline first, preemptive: at each moment the released request with the
    earliest deadline (then the highest priority, then the earliest release) has the link."""
    order = sorted(active, key=lambda i: (requests[i].release_s, i))
    left = {i: requests[i].volume_bytes * 8.0 for i in active}
    segs: dict[int, list] = {i: [] for i in active}
    ready: list[tuple] = []
    done: dict[int, float] = {}
    after: dict[int, int] = {}
    t, k, last = -math.inf, 0, None  # last: (request, time) of the latest completion
    while k < len(order) or ready:
        if not ready:
            t = max(t, requests[order[k]].release_s)
        while k < len(order) and requests[order[k]].release_s <= t:
            r = requests[order[k]]
            heapq.heappush(ready, (r.deadline_s if r.deadline_s is not None else math.inf, -r.priority, r.release_s, order[k]))
            k += 1
        i = ready[0][3]
        nxt = requests[order[k]].release_s if k < len(order) else math.inf
        run = min(left[i] / c, nxt - t)
        if not segs[i] and last is not None and last[1] == t:
            after[i] = last[0]
        if segs[i] and segs[i][-1][1] == t:
            segs[i][-1] = (segs[i][-1][0], t + run, None)
        else:
            segs[i].append((t, t + run, None))  # alone on the link: unlimited while it runs
        left[i] -= run * c
        t += run
        if left[i] <= _EPS * requests[i].volume_bytes * 8:
            heapq.heappop(ready)
            done[i], last = t, (i, t)
    return {i: Allocation(i, start_s=segs[i][0][0], segments=segs[i], completion_s=done[i], after=after.get(i)) for i in active}


def edf_admission(requests: list[Request], ids: list[int], c: float, margin: float) -> dict[int, str]:
    """Admission control, first come first served, for requests with a deadline: at each
    release, in order, the request is admitted if it and the admitted requests still pending
    can all meet their deadlines (less the margin) — for each deadline d, the work due by d
    fits in c·(d − now), which is when earliest deadline first meets them all (and no
    allocation of the link meets more). Between releases the pending work is served in
    deadline order, as EDF serves it. Returns the refused requests with the reason."""
    order = sorted(ids, key=lambda i: (requests[i].release_s, i))
    due, rem = np.zeros(0), np.zeros(0)  # pending admitted requests, by deadline: bits left
    refused, t = {}, -math.inf
    for i in order:
        r = requests[i]
        if rem.size and r.release_s > t:  # EDF serves the front of the queue meanwhile
            served = c * (r.release_s - t)
            cum = np.cumsum(rem)
            k = int(np.searchsorted(cum, served * (1 + 1e-12), side="right"))
            if k < rem.size:
                rem[k] = cum[k] - served
            due, rem = due[k:], rem[k:]
        t = max(t, r.release_s)
        d = _due(r, margin)
        pos = int(np.searchsorted(due, d, side="right"))
        due2, rem2 = np.insert(due, pos, d), np.insert(rem, pos, r.volume_bytes * 8.0)
        work = np.cumsum(rem2)
        over = work > c * (due2 - t) * (1 + 1e-9)
        if over.any():
            k = int(np.argmax(over))
            refused[i] = (
                f"admitted on top of the requests admitted before it, {work[k] / c:.3f} s of transfers at r_TP would be "
                f"due within {due2[k] - t:.3f} s (by {due2[k] + margin:g} s): no allocation of the link meets every deadline"
            )
            continue
        due, rem = due2, rem2
    return refused


def _spaghetti(requests: list[Request], active: list[int], c: float, margin: float):
    """One rate per request with a deadline over its whole window (seed 001 §3): volume /
    window, admitted first come first served while the link holds them; requests without a
    deadline take what is left (:func:`_fill`)."""
    dl = sorted((i for i in active if requests[i].deadline_s is not None), key=lambda i: (requests[i].release_s, i))
    points = sorted({requests[i].release_s for i in dl} | {_due(requests[i], margin) for i in dl})
    index = {p: k for k, p in enumerate(points)}
    load = np.zeros(max(len(points) - 1, 0))
    allocs: dict[int, Allocation] = {}
    refused: dict[int, str] = {}
    for i in dl:
        r, due = requests[i], _due(requests[i], margin)
        lo, hi = index[r.release_s], index[due]
        rate = r.volume_bytes * 8 / (due - r.release_s)
        peak = rate + float(load[lo:hi].max())
        if peak > c * (1 + 1e-6):
            refused[i] = _overload(peak, c)
            continue
        load[lo:hi] += rate
        allocs[i] = Allocation(i, start_s=r.release_s, segments=[(r.release_s, due, rate)], completion_s=due)
    nd = [i for i in active if requests[i].deadline_s is None]
    _fill(requests, nd, points, c - load, c, allocs)
    return allocs, refused


def _overload(peak: float, c: float) -> str:
    return (
        f"its rate on top of the requests admitted before it needs {peak / 1e6:.2f} Mbit/s, more than r_TP = {c / 1e6:.2f} Mbit/s"
    )


def _multirate(requests: list[Request], active: list[int], c: float, margin: float):
    """The step-function allocation that minimises the largest load over the intervals between
    releases and deadlines (Chen & Primet's BDTS optimum) for the requests with a deadline;
    the others take what is left. The requests with a deadline are first admitted as under
    edf (:func:`edf_admission`): the requests kept can all meet their deadlines, so their
    optimum loads the link at most to r_TP."""
    dl = [i for i in active if requests[i].deadline_s is not None]
    refused = edf_admission(requests, dl, c, margin)
    kept = [i for i in dl if i not in refused]
    allocs: dict[int, Allocation] = {}
    if kept:
        segments = _min_congestion(requests, kept, c, margin)
        if segments is None:  # the solver gave up on a degenerate program: EDF's allocation also meets them
            segments = {i: [(x, y, c) for x, y, _ in a.segments] for i, a in _edf_schedule(requests, kept, c).items()}
        for i, segs in segments.items():
            allocs[i] = Allocation(i, start_s=segs[0][0], segments=segs, completion_s=segs[-1][1])
    points, load = _profile(allocs)
    _fill(requests, [i for i in active if requests[i].deadline_s is None], points, c - load, c, allocs)
    return allocs, refused


def _profile(allocs: dict[int, Allocation]) -> tuple[list[float], np.ndarray]:
    """The planned load as a step function: the segments' ends, and the sum of the rates
    between each two."""
    segs = [g for a in allocs.values() for g in a.segments]
    points = sorted({x for g in segs for x in g[:2]})
    index = {x: k for k, x in enumerate(points)}
    step = np.zeros(len(points) + 1)
    for a, b, rate in segs:
        step[index[a]] += rate
        step[index[b]] -= rate
    return points, np.cumsum(step)[: max(len(points) - 1, 0)]


def multirate_variables(requests: list[Request], margin: float = 0.0) -> int:
    """How many variables multirate's linear program has at most (before admission): one per
    request with a deadline and interval of its window."""
    dl = [r for r in requests if r.deadline_s is not None]
    points = sorted({r.release_s for r in dl} | {r.deadline_s - margin for r in dl})
    return sum(bisect.bisect_left(points, r.deadline_s - margin) - bisect.bisect_left(points, r.release_s) for r in dl)


#: HiGHS on multirate's program: about 21 s for 190 000 variables on this
#: project's 2-core machine (docs/scheduling.md "Scale"), growing as n^1.5; an estimate to
#: tell a user, not a bound.
MULTIRATE_S_AT_100K = 8.0


def multirate_seconds(variables: int) -> str:
    """An estimate of the linear program's time, as a user reads it."""
    s = MULTIRATE_S_AT_100K * (variables / 1e5) ** 1.5
    return "under a second" if s < 1 else f"about {s:.0f} s" if s < 120 else f"about {s / 60:.0f} min"


def _min_congestion(requests: list[Request], dl: list[int], c: float, margin: float) -> dict[int, list] | None:
    """The linear program of :func:`_multirate`: min α subject to each request's volume spread
    over the intervals of its window (variables y_ik, the share of request i's volume in
    interval k, Σ_k y_ik = 1) and every interval carrying at most α × its length (t_i, the
    request's time alone at r_TP: Σ_i y_ik t_i ≤ α length_k). Shares keep the program scaled
    whatever the volumes (in bytes, coefficients of 10⁹ made the solver's tolerances give a
    wrong optimum; in seconds, a 1-byte request fell under them); an interval that could
    carry at most 10⁻⁹ of a request has no variable for it (HiGHS refuses coefficients of
    10¹⁵). Built sparse: one variable per request and interval of its window. Returns each
    request's segments, or None where the solver fails."""
    points = sorted({requests[i].release_s for i in dl} | {_due(requests[i], margin) for i in dl})
    m = len(points) - 1
    where = [(requests[i].release_s, _due(requests[i], margin)) for i in dl]
    spans = [(bisect.bisect_left(points, a), bisect.bisect_left(points, b)) for a, b in where]
    nv = sum(hi - lo for lo, hi in spans)
    if nv > limits.MULTIRATE_VARIABLES_MAX.value:
        raise PlanError(
            "multirate: "
            + limits.too_big("a linear program of", nv, limits.MULTIRATE_VARIABLES_MAX, " variables")
            + " (one per request and interval of its window); use edf or spaghetti, or fewer overlapping windows"
        )
    cols = np.concatenate([np.arange(lo, hi) for lo, hi in spans])  # each variable's interval
    owner = np.repeat(np.arange(len(dl)), [hi - lo for lo, hi in spans])  # each variable's request
    length = np.diff(np.asarray(points))
    alone = np.array([requests[i].volume_bytes * 8 / c for i in dl])  # seconds of the link
    coef = alone[owner] / length[cols]  # the load of interval k with all of request i in it
    live = coef <= 1e9
    cols, owner, coef = cols[live], owner[live], coef[live]
    nv = len(cols)
    from scipy import sparse  # scipy (0.5 s to import): only when a multirate plan is solved
    from scipy.optimize import linprog  # the same

    a_eq = sparse.csr_matrix((np.ones(nv), (owner, np.arange(nv))), shape=(len(dl), nv + 1))
    rows = np.concatenate([cols, np.arange(m)])
    vals = np.concatenate([coef, -np.ones(m)])  # Σ_i y_ik t_i / length_k − α ≤ 0
    a_ub = sparse.csr_matrix((vals, (rows, np.concatenate([np.arange(nv), np.full(m, nv)]))), shape=(m, nv + 1))
    # min α, and among the allocations within 10⁻⁶ of it, one that moves each request early in
    # its window: of its many optima the solver otherwise picks any, long pauses included (a
    # request paused past an RTO restarts slowly). The second term is worth at most 10⁻⁶.
    mid = np.asarray(points[:-1]) + length / 2
    start, end = np.array([w[0] for w in where]), np.array([w[1] for w in where])
    when = (mid[cols] - start[owner]) / (end[owner] - start[owner])
    cost = np.append(when * 1e-6 / len(dl), 1.0)

    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(m), A_eq=a_eq, b_eq=np.ones(len(dl)), bounds=(0, None), method="highs")
    if res.status != 0:
        return None
    y = np.where(res.x[:nv] > 1e-9, res.x[:nv], 0.0)
    y = y / np.bincount(owner, weights=y, minlength=len(dl))[owner]  # each volume exactly, whatever the tolerances
    rate = y * alone[owner] * c / length[cols]
    out: dict[int, list] = {i: [] for i in dl}
    for j, k, r in zip(owner[y > 0], cols[y > 0], rate[y > 0], strict=True):
        out[dl[j]].append((points[k], points[k + 1], float(r)))
    return {i: _merge(segs) for i, segs in out.items()}


def _fill(requests: list[Request], nd: list[int], points: list[float], residual, c: float, allocs: dict) -> None:
    """Requests without a deadline take what is left of the link (``residual`` between
    ``points``, the whole of ``c`` outside them), in batches: those released by the time the
    link is free of the previous batch. Where what is left stays the same until the batch is
    done, its requests start together and end together, each at a share in proportion to its
    volume (seed 001's spaghetti: one rate each); where it changes, they take it one after
    another, in release order — so that each change of what is left is one step of one
    request, not of all of them (O(n + m) segments). A request that starts as another one
    ends follows it (a signal can start it)."""
    tb = [-math.inf, *points]
    rv = [c, *(float(x) if x > _EPS * c else 0.0 for x in residual), c]
    order = sorted(nd, key=lambda i: (requests[i].release_s, i))
    t, j, k, prev = -math.inf, 0, 0, None
    while k < len(order):
        start = max(t, requests[order[k]].release_s)
        batch = []
        while k < len(order) and requests[order[k]].release_s <= start:
            batch.append(order[k])
            k += 1
        bits = [requests[i].volume_bytes * 8.0 for i in batch]
        pieces, j = _drain(tb, rv, j, start, sum(bits))
        t = pieces[-1][1]
        if len(_merge(pieces)) == 1:
            (a, b, rate), total = _merge(pieces)[0], sum(bits)
            for i, v in zip(batch, bits, strict=True):
                follows = prev if prev is not None and allocs[prev].completion_s == a else None
                allocs[i] = Allocation(i, start_s=a, segments=[(a, b, rate * v / total)], completion_s=b, after=follows)
            prev = batch[0]
            continue
        for i, segs in zip(batch, _one_after_another(pieces, bits), strict=True):
            follows = prev if prev is not None and allocs[prev].completion_s == segs[0][0] else None
            allocs[i] = Allocation(i, start_s=segs[0][0], segments=segs, completion_s=segs[-1][1], after=follows)
            prev = i


def _one_after_another(pieces: list[tuple[float, float, float]], bits: list[float]) -> list[list]:
    """``pieces`` of link (from, to, rate) handed out in order: the first ``bits[0]`` to the
    first request, and so on; the last ends where the pieces end. Each boundary is placed
    from the bits handed out before it (not from the previous boundary), so that rounding
    never adds up: a small request after a large one keeps its own stretch."""
    before = [0.0]  # bits the pieces before each one carry
    for a, b, rate in pieces[:-1]:
        before.append(before[-1] + rate * (b - a))

    def at(bits_out: float, p: int) -> tuple[float, int]:
        """Where the pieces have carried ``bits_out``, looking from piece ``p`` on."""
        while p + 1 < len(pieces) and before[p + 1] <= bits_out:
            p += 1
        a, b, rate = pieces[p]
        return (min(b, a + (bits_out - before[p]) / rate) if p + 1 < len(pieces) else a + (bits_out - before[p]) / rate), p

    out, done, p = [], 0.0, 0
    s, p = at(0.0, 0)
    for n, need in enumerate(bits):
        end, q = at(done + need, p)
        if n == len(bits) - 1:
            end, q = pieces[-1][1], len(pieces) - 1
        segs = [(s if k == p else pieces[k][0], end if k == q else pieces[k][1], pieces[k][2]) for k in range(p, q + 1)]
        out.append(_merge([g for g in segs if g[1] > g[0]] or segs[-1:]))
        done, s, p = done + need, end, q
    return out


def _drain(tb: list[float], rv: list[float], j: int, start: float, bits: float) -> tuple[list, int]:
    """The stretches of the step function (``rv[j]`` from ``tb[j]``) that carry ``bits`` from
    ``start`` on: (from, to, rate); and where the walk ended."""
    pieces: list[tuple[float, float, float]] = []
    s = start
    while True:
        while j + 1 < len(tb) and tb[j + 1] <= s:
            j += 1
        end = tb[j + 1] if j + 1 < len(tb) else math.inf
        rate = rv[j]
        if rate > 0:
            if rate * (end - s) >= bits * (1 - 1e-12):
                pieces.append((s, s + bits / rate, rate))
                return pieces, j
            pieces.append((s, end, rate))
            bits -= rate * (end - s)
        s = end


# ----------------------------------------------------------------------------- helpers


def _merge(segs: list[tuple[float, float, float | None]]) -> list[tuple[float, float, float | None]]:
    """Adjacent segments of the same rate (or both unlimited) as one."""
    out: list[list] = []
    for a, b, rate in sorted(segs, key=lambda x: x[0]):
        same = out and (out[-1][2] == rate or (out[-1][2] is not None and rate is not None and math.isclose(out[-1][2], rate)))
        if same and out[-1][1] == a:
            out[-1][1] = b
        else:
            out.append([a, b, rate])
    return [tuple(s) for s in out]


def peak_load(allocations: list[Allocation]) -> float:
    """The largest sum of planned rates at any moment (bit/s), unlimited stretches left out: a
    sweep over the segments' ends (an end before a start at the same time)."""
    segs = [g for a in allocations if a.admitted for g in a.segments if g[2]]
    if not segs:
        return 0.0
    x = np.asarray(segs, dtype=float)
    times = np.concatenate([x[:, 0], x[:, 1]])
    deltas = np.concatenate([x[:, 2], -x[:, 2]])
    order = np.lexsort((deltas > 0, times))  # by time, the ends (negative) first
    return float(max(0.0, np.cumsum(deltas[order]).max()))


def verify(p: Plan) -> list[str]:
    """What is wrong with a plan (empty: nothing): each admitted request moves its volume
    within its window, the rates never sum above r_TP, unlimited stretches of one-at-a-time
    strategies never overlap, a request that follows another starts as it ends, and the
    makespan is not below the ideal. The planner's own check, run by the tests and fuzzers."""
    bad = []
    c = p.capacity_bps
    for a in (a for a in p.allocations if a.admitted):
        r = p.requests[a.request]
        if not a.segments or a.segments[0][0] < r.release_s - 1e-9 or a.completion_s != a.segments[-1][1]:
            bad.append(f"request {a.request}: segments {a.segments[:3]} do not start after its release")
        elif r.deadline_s is not None and a.completion_s > r.deadline_s + 1e-9 * max(1, r.deadline_s):
            bad.append(f"request {a.request}: completes at {a.completion_s} after its deadline {r.deadline_s}")
        if all(g[2] is not None for g in a.segments):
            moved = sum((y - x) * g for x, y, g in a.segments) / 8
            clock = sum(4 * math.ulp(abs(y)) * g for _, y, g in a.segments) / 8  # what float times resolve
            if not math.isclose(moved, r.volume_bytes, rel_tol=1e-6, abs_tol=clock):
                bad.append(f"request {a.request}: its segments move {moved:.0f} of {r.volume_bytes} bytes")
        if a.after is not None and (not p.allocations[a.after].admitted or p.allocations[a.after].completion_s != a.start_s):
            bad.append(f"request {a.request}: follows {a.after}, which does not end at its start")
    if peak_load(p.allocations) > c * (1 + 1e-6):
        bad.append(f"the rates sum to {peak_load(p.allocations):.0f} bit/s, above r_TP {c:.0f}")
    if p.strategy in ("vifi", "edf"):
        spans = sorted((x, y) for a in p.allocations if a.admitted for x, y, _ in a.segments)
        if any(b[0] < a[1] - 1e-9 * max(1, a[1]) for a, b in zip(spans, spans[1:], strict=False)):
            bad.append("two requests run at once in a one-at-a-time plan")
    if p.makespan_s is not None and p.makespan_s < p.ideal_makespan_s * (1 - 1e-9):
        bad.append(f"the makespan {p.makespan_s} s is below the ideal {p.ideal_makespan_s} s")
    return bad


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
    ``plan_requests`` are RunInfo.plan.requests rows. Returns (start, end, {request: bit/s}),
    by one sweep over the segments' ends."""
    events = []
    for r in plan_requests:
        if r["admitted"]:
            for g in r["segments"]:
                events.append((g["start_s"], 1, r["request"], g["rate_bps"]))
                events.append((g["end_s"], 0, r["request"], g["rate_bps"]))
    events.sort(key=lambda e: (e[0], e[1]))
    active: dict[int, float | None] = {}
    out = []
    for (t, kind, k, rate), nxt in zip(events, [*events[1:], None], strict=True):
        if kind:
            active[k] = rate
        else:
            active.pop(k, None)
        if nxt is None or nxt[0] <= t or not active:
            continue
        fixed = sum(x for x in active.values() if x is not None)
        free = sum(1 for x in active.values() if x is None)
        share = max(0.0, capacity_bps - fixed) / free if free else 0.0
        out.append((t, nxt[0], {k: (x if x is not None else share) for k, x in active.items()}))
    return out
