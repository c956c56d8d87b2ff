"""Standing fuzzers of flow scheduling (issue 48): generated requests, schedules and planner sizes.

Properties: the planner either refuses with :class:`PlanError` (a window no plan can serve, a
limit) or returns a plan that :func:`xferlab.schedule.verify` finds sound — every admitted
request moves its volume within its window and by its deadline less the margin, the rates
never sum above r_TP, one-at-a-time strategies never overlap, a request follows only one
that ends as it starts, and the makespan is never below the ideal of the admitted volume;
every refusal has its reason. A scenario's requests are refused with the scenario's own
error or planned; a plan that is accepted runs on the simulator without a panic.

Derandomized like tests/test_fuzz.py (XFERLAB_FUZZ_EXAMPLES, XFERLAB_FUZZ_SEED).
"""

from __future__ import annotations

import json
import math
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xferlab import limits
from xferlab import scenario as sc
from xferlab.backends import sim as simbackend
from xferlab.schedule import STRATEGIES, PlanError, Request, plan, verify

EXAMPLES = int(os.environ.get("XFERLAB_FUZZ_EXAMPLES", "150"))


def _settings(examples: int):
    return settings(
        max_examples=examples,
        derandomize="XFERLAB_FUZZ_SEED" not in os.environ,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )


FUZZ = _settings(EXAMPLES)

# ----------------------------------------------------------------------------- the planner

VOLUMES = st.one_of(st.integers(min_value=1, max_value=10**12), st.sampled_from([1, 1500, 10**6, 10**9, 10**15]))
TIMES = st.one_of(st.floats(min_value=0, max_value=1e5, allow_nan=False), st.sampled_from([0.0, 1e-9, 1e-3, 0.5, 1.0, 1e5]))


@st.composite
def request_lists(draw) -> tuple[list[Request], float]:
    """A few requests drawn one by one on a link of a drawn capacity: windows from
    impossible to loose (in times alone on that link), shared releases."""
    capacity = draw(st.sampled_from([1e3, 1e9, 941.48e6, 1e13]))
    out = []
    for _ in range(draw(st.integers(min_value=1, max_value=12))):
        volume = draw(VOLUMES)
        release = draw(st.one_of(st.just(0.0), TIMES))
        deadline = None
        if draw(st.booleans()):
            stretch = draw(st.sampled_from([0.5, 1.0, 1.0 + 1e-9, 1.01, 1.5, 3.0, 100.0]))
            deadline = release + volume * 8 / capacity * stretch + draw(st.sampled_from([0.0, 1e-6, 0.1]))
        out.append(Request(volume, release, deadline, draw(st.integers(min_value=-3, max_value=3))))
    return out, capacity


def _check(p, requests: list[Request], margin: float) -> None:
    assert verify(p) == [], verify(p)
    for a, r in zip(p.allocations, requests, strict=True):
        if not a.admitted:
            assert a.reason and a.segments == [], a
            continue
        if r.deadline_s is not None:
            assert a.completion_s <= r.deadline_s - margin + 1e-9 * max(1.0, r.deadline_s), (a, r)
    if any(a.admitted for a in p.allocations):
        admitted = sum(r.volume_bytes for a, r in zip(p.allocations, requests, strict=True) if a.admitted)
        first = min(r.release_s for a, r in zip(p.allocations, requests, strict=True) if a.admitted)
        clock = 4 * math.ulp(max(abs(a.completion_s) for a in p.allocations if a.admitted))  # float times' step
        assert p.ideal_makespan_s >= admitted * 8 / p.capacity_bps * (1 - 1e-9) - clock
        assert p.makespan_s >= p.ideal_makespan_s * (1 - 1e-9) - clock
        assert p.origin_s == first


@FUZZ
@given(request_lists(), st.sampled_from([*STRATEGIES, "minrate"]), st.sampled_from([0.0, 1e-3, 0.1, 10.0]))
def test_generated_requests_are_planned_soundly_or_refused(drawn, strategy, margin):
    requests, capacity = drawn
    try:
        p = plan(requests, capacity, strategy, margin)
    except PlanError as e:
        assert "requests[" in str(e) or "over the limit" in str(e), str(e)
        return
    _check(p, requests, margin)


# ----------------------------------------------------------------------------- planner sizes


def _many(n: int, seed: int, load: float, deadline_share: float, spread: float) -> list[Request]:
    """``n`` requests released one after another so that the link is ``load`` times full,
    ``deadline_share`` of them with a window ``1.5`` to ``spread`` times their time alone."""
    rng = random.Random(seed)
    out = []
    gap = 0.4 / load  # 50 MB on average: 0.4 s alone at 1 Gbit/s
    for i in range(n):
        v = rng.randint(10**6, 10**8)
        window = v * 8 / 1e9 * rng.uniform(1.5, spread)
        release = i * gap if rng.random() < 0.9 else rng.uniform(0, n * gap)  # some out of order
        out.append(Request(v, release, release + window if rng.random() < deadline_share else None))
    return out


@_settings(max(8, EXAMPLES // 10))
@given(
    st.sampled_from([200, 1000, 5000, int(limits.REQUESTS_MAX.value), int(limits.REQUESTS_MAX.value) + 1]),
    st.sampled_from(["ifs", "vifi", "spaghetti", "edf"]),
    st.integers(min_value=0, max_value=2**32),
    st.sampled_from([0.5, 0.95, 8.0]),
    st.sampled_from([0.0, 0.5, 1.0]),
)
def test_planner_sizes_up_to_the_limit(n, strategy, seed, load, deadline_share):
    """Issue 48 item 15: O(n log n) strategies plan up to REQUESTS_MAX requests; one more is
    refused with the limit's reason."""
    requests = _many(n, seed, load, deadline_share, 20.0)
    try:
        p = plan(requests, 1e9, strategy, 0.02)
    except PlanError as e:
        assert n > limits.REQUESTS_MAX.value and "requests: " in str(e) and limits.REQUESTS_MAX.reason in str(e)
        return
    assert n <= limits.REQUESTS_MAX.value
    _check(p, requests, 0.02)


@_settings(max(6, EXAMPLES // 20))
@given(
    st.sampled_from([50, 500, 2000]),
    st.integers(min_value=0, max_value=2**32),
    st.sampled_from([0.5, 8.0]),
    st.sampled_from([0.5, 1.0]),
    st.sampled_from([3.0, 20.0]),
)
def test_multirate_sizes_are_planned_or_refused_at_the_limit(n, seed, load, deadline_share, spread):
    """Issue 48 items 15 and 26: multirate's sparse program in bounded memory, refused over
    MULTIRATE_VARIABLES_MAX with the reason."""
    requests = _many(n, seed, load, deadline_share, spread)
    try:
        p = plan(requests, 1e9, "multirate", 0.02)
    except PlanError as e:
        assert "multirate: a linear program of" in str(e) and limits.MULTIRATE_VARIABLES_MAX.reason in str(e)
        return
    _check(p, requests, 0.02)


# ----------------------------------------------------------------------------- scenarios

REQUEST_FIELDS = {
    "volume": st.sampled_from(["1MB", "20MB", "1GB", "0B", "-1MB", "1e30GB", 1500, "x"]),
    "release": st.sampled_from(["0s", "10ms", "1s", "-1s", "1e9s", 5]),
    "deadline": st.sampled_from(["10ms", "100ms", "1s", "5s", "0s", "1e9s", "x"]),
    "pair": st.sampled_from([0, 1, 2, 5, -1, 100_001, "a"]),
    "priority": st.sampled_from([0, 1, -5, 2**70, "x"]),
    "name": st.sampled_from(["", "a", "x" * 200, "<b>$(id)</b>", 1]),
}
#: Values the model accepts (mostly): half of the generated scenarios draw only from these,
#: so that many are planned and run.
REQUEST_VALID = {
    "volume": st.sampled_from(["100KB", "1MB", "5MB", "20MB"]),
    "release": st.sampled_from(["0s", "10ms", "100ms", "0.5s"]),
    "deadline": st.sampled_from(["50ms", "200ms", "0.6s", "1s", "3s"]),
    "priority": st.integers(min_value=-2, max_value=2),
    "name": st.sampled_from(["", "a", "<b>$(id)</b>"]),
}
SCHEDULE_FIELDS = {
    "strategy": st.sampled_from([*STRATEGIES, "minrate", "fifo", 1]),
    "mechanism": st.sampled_from(["pacing", "token_bucket", "cwnd_clamp", "sleep_timer", "x"]),
    "hz": st.sampled_from([10, 250, 9, 10**6, "x"]),
    "margin": st.sampled_from(["auto", "0s", "10ms", "1s", "1e6s", "-1s", "x", 0]),
    "time_control": st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "sync": st.sampled_from(["clock", "signal", "broker", "x"]),
                "clock_error": st.sampled_from(["0s", "1ms", "10s", "11s", "1e6s", "-1s"]),
                "processing": st.sampled_from(["0s", "0.1ms", "10s", "1e6s"]),
            },
        ),
        st.sampled_from([None, 1, "x"]),
    ),
}
SCHEDULE_VALID = {
    "strategy": st.sampled_from([*STRATEGIES, "minrate"]),
    "mechanism": st.sampled_from(["pacing", "token_bucket", "cwnd_clamp", "sleep_timer"]),
    "margin": st.sampled_from(["auto", "0s", "10ms"]),
    "time_control": st.fixed_dictionaries(
        {},
        optional={"sync": st.sampled_from(["clock", "signal", "broker"]), "clock_error": st.sampled_from(["0s", "1ms"])},
    ),
}
SCENARIO = {
    "name": "fuzz",
    "topology": {"access_rate": "1Gbps", "bottleneck_rate": "100Mbps", "rtt": "1ms", "buffer": "1bdp"},
}


@st.composite
def plan_scenarios(draw) -> dict:
    data = json.loads(json.dumps(SCENARIO))
    valid = draw(st.booleans())
    fields, schedule = (REQUEST_VALID, SCHEDULE_VALID) if valid else (REQUEST_FIELDS, SCHEDULE_FIELDS)
    requests = []
    for _ in range(draw(st.integers(min_value=0 if not valid else 1, max_value=5))):
        keys = draw(st.lists(st.sampled_from(sorted(fields)), unique=True))
        requests.append({"volume": "1MB"} | {k: draw(fields[k]) for k in keys})
    data["requests"] = requests
    if draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(sorted(schedule)), unique=True))
        data["schedule"] = {k: draw(schedule[k]) for k in keys}
    return data


@FUZZ
@given(plan_scenarios())
def test_generated_requests_in_a_scenario_are_refused_with_a_reason_or_planned(data):
    try:
        s = sc.from_dict(data, "fuzz.yaml")
        p = sc.plan_of(s) if s.requests else None
    except sc.ScenarioError as e:
        assert str(e).startswith("fuzz"), str(e)
        return
    if p is None:
        return
    assert any(r["admitted"] for r in p["requests"])
    assert p["margin_s"] >= 0 and math.isfinite(p["makespan_s"]) and p["makespan_s"] >= p["ideal_makespan_s"] * (1 - 1e-9)


@_settings(max(6, EXAMPLES // 25))
@given(plan_scenarios())
def test_accepted_plans_run_on_the_simulator(data):
    """A plan the scenario accepts — refused requests, signalled followers, pauses — runs on
    the simulator without a panic (a short, truncated run)."""
    try:
        resolved = sc.resolve(sc.from_dict(data, "fuzz.yaml"))
    except sc.ScenarioError:
        return
    cfg = simbackend.sim_config(resolved)
    cfg["end_ns"] = max(1, min(cfg["end_ns"] or 2**62, int(0.3e9)))
    simbackend.run_config(cfg, resolved)


@pytest.mark.parametrize("strategy", ["ifs", "vifi", "spaghetti", "edf"])
def test_ten_thousand_staggered_requests_plan_soundly(strategy):
    """The size of issue 48's report (10 000 gave no answer after 90 s): planned and sound."""
    requests = _many(10_000, 7, 0.95, 0.5, 20.0)
    _check(plan(requests, 1e9, strategy, 0.02), requests, 0.02)
