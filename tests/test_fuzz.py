"""Standing fuzzers (issue 10): generated scenarios, campaigns and importer inputs.

Properties: a bad input is refused with the module's own error (which the CLI turns into
``error: …`` and exit status 2), never another exception; every scenario the model
accepts runs on the simulator without a panic (a short, truncated run).

The examples are derandomized, so CI sees the same cases every time; ``benches/fuzz.py``
runs the same properties with many more, random, examples (XFERLAB_FUZZ_EXAMPLES,
XFERLAB_FUZZ_SEED).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xferlab import engine
from xferlab import scenario as sc
from xferlab.backends import sim as simbackend
from xferlab.campaign import spec
from xferlab.importers import ImportLogError, iperf3, ss
from xferlab.registry import MetricsError
from xferlab.runfolder import RunFolderError

DATA = Path(__file__).parent / "data"
EXAMPLES = int(os.environ.get("XFERLAB_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize="XFERLAB_FUZZ_SEED" not in os.environ,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)

# ----------------------------------------------------------------------------- values

GARBAGE = st.sampled_from(
    [None, True, False, [], {}, [1, 2], {"a": 1}, "", "abc", -1, 0, 10**30, -(10**30), 1e308, "1e400", "nan", "inf", "2024-01-01"]
)
RATES = st.one_of(
    st.sampled_from(["1kbps", "999bps", "1Mbps", "100Mbps", "1Gbps", "2.5Gbps", "10Gbps", "10Tbps", "11Tbps"]),
    st.sampled_from(["0Gbps", "-1Gbps", "1e400Gbps", "10", "10GB/s", "1 Gb/s"]),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: f"{x}Mbps"),
    GARBAGE,
)
TIMES = st.one_of(
    st.sampled_from(["0s", "1us", "1ms", "10ms", "100ms", "0.5s", "2s", "1e6s", "1e7s", "1e9s", "1ns", "-1s", "10", "0"]),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: f"{x}ms"),
    GARBAGE,
)
SIZES = st.one_of(
    st.sampled_from(["1KB", "100KB", "1MB", "20MB", "1GB", "1PB", "2PB", "1e30GB", "1e400GB", "1.5B", "-1MB", "10Mb"]),
    st.integers(min_value=-10, max_value=10**16),
    GARBAGE,
)
COUNTS = st.one_of(st.integers(min_value=-2, max_value=6), st.sampled_from([100, 10_000, 100_001, 10**9]), GARBAGE)
SHARES = st.one_of(st.floats(min_value=-1, max_value=2), st.sampled_from([0.0, 0.5, 1.0, 1.1, 10.0, 100.0, 1000.0]), GARBAGE)

FIELDS: dict[str, st.SearchStrategy] = {
    "topology.pairs": COUNTS,
    "topology.access_rate": RATES,
    "topology.bottleneck_rate": RATES,
    "topology.rtt": TIMES,
    "topology.buffer": st.one_of(COUNTS, st.sampled_from(["0.2bdp", "1bdp", "1e9bdp", "256KB", "1e12", "xbdp"]), SIZES),
    "topology.mtu": st.one_of(st.sampled_from([128, 576, 1500, 9000, 65535, 100, 70000]), GARBAGE),
    "topology.timestamps": st.one_of(st.booleans(), GARBAGE),
    "topology.loss_rate": st.one_of(st.sampled_from([0.0, 1e-4, 0.01, 0.5, 1.0]), SHARES),
    "topology.shaper": st.one_of(
        st.fixed_dictionaries({}, optional={"limiter": st.sampled_from(["token_bucket", "pacing", "x"]), "hz": COUNTS}),
        GARBAGE,
    ),
    "workload.streams": COUNTS,
    "workload.duration": TIMES,
    "workload.volume": SIZES,
    "workload.stagger": TIMES,
    "workload.align_end": st.one_of(st.booleans(), GARBAGE),
    "workload.start_jitter": TIMES,
    "workload.max_duration": TIMES,
    "workload.congestion_level": SHARES,
    "workload.reverse": SHARES,
    "workload.background": st.one_of(
        st.fixed_dictionaries({"level": SHARES}, optional={"mean_on": TIMES, "mean_off": TIMES, "rate": RATES}),
        GARBAGE,
    ),
    "workload.per_pair": st.one_of(
        st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "variant": st.sampled_from(["reno", "cubic", "bic", "x"]),
                    "volume": SIZES,
                    "duration": TIMES,
                    "start": TIMES,
                    "rtt": TIMES,
                    "access_rate": RATES,
                    "rate_limit": RATES,
                    "limiter": st.sampled_from(["pacing", "token_bucket", "x"]),
                },
            ),
            max_size=3,
        ),
        GARBAGE,
    ),
    "protocol.variant": st.one_of(
        st.sampled_from(["reno", "bic", "cubic", "highspeed", "htcp", "scalable", "H-TCP", "vegas"]), GARBAGE
    ),
    "protocol.initial_cwnd": COUNTS,
    "protocol.delayed_ack": st.one_of(st.booleans(), GARBAGE),
    "protocol.rto_min": TIMES,
    "protocol.window_cap": SIZES,
    "protocol.rate_limit": RATES,
    "protocol.limiter": st.sampled_from(["pacing", "token_bucket", "x", 1]),
    "protocol.hz": COUNTS,
    "protocol.burst": SIZES,
    "measure.goodput_interval": TIMES,
    "measure.link_interval": TIMES,
    "measure.tcp_interval": TIMES,
    "measure.window": st.one_of(st.sampled_from(["all", "all-active", ["0s", "1s"], ["1s", "0s"], [1, 2], ["1s"]]), GARBAGE),
    "seed": st.one_of(st.integers(min_value=-5, max_value=2**64), GARBAGE),
    "name": st.one_of(st.sampled_from(["ok", "a/b", "", "x" * 200]), GARBAGE),
    "topology.colour": st.just("red"),
}
#: Values the model accepts (mostly): half of the generated scenarios draw only from these,
#: so that many reach the simulator.
VALID: dict[str, st.SearchStrategy] = {
    "topology.pairs": st.integers(min_value=1, max_value=6),
    "topology.access_rate": st.sampled_from(["10Mbps", "100Mbps", "1Gbps", "10Gbps"]),
    "topology.bottleneck_rate": st.sampled_from(["10Mbps", "100Mbps", "1Gbps", "10Gbps"]),
    "topology.rtt": st.sampled_from(["1us", "100us", "1ms", "10ms", "100ms", "1s"]),
    "topology.buffer": st.one_of(st.integers(min_value=1, max_value=5000), st.sampled_from(["0.01bdp", "3bdp", "64KB"])),
    "topology.mtu": st.sampled_from([128, 576, 1500, 9000]),
    "topology.timestamps": st.booleans(),
    "topology.loss_rate": st.sampled_from([0.0, 1e-4, 0.01, 0.3, 0.99]),
    "topology.shaper": st.fixed_dictionaries(
        {}, optional={"limiter": st.sampled_from(["token_bucket", "pacing"]), "hz": st.sampled_from([10, 100, 1000])}
    ),
    "workload.streams": st.integers(min_value=1, max_value=4),
    "workload.duration": st.sampled_from(["10ms", "100ms", "1s", "30s"]),
    "workload.stagger": st.sampled_from(["0s", "1ms", "50ms", "1s"]),
    "workload.align_end": st.booleans(),
    "workload.start_jitter": st.sampled_from(["0s", "1ms", "100ms"]),
    "workload.reverse": st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    "workload.background": st.fixed_dictionaries(
        {"level": st.sampled_from([0.0, 0.3, 1.1, 3.0])},
        optional={"mean_on": st.sampled_from(["1ms", "100ms"]), "rate": st.sampled_from(["1Mbps", "100Mbps"])},
    ),
    "workload.per_pair": st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "variant": st.sampled_from(["reno", "cubic", "bic", "highspeed", "htcp", "scalable"]),
                "start": st.sampled_from(["0s", "10ms"]),
                "rtt": st.sampled_from(["1ms", "50ms"]),
                "access_rate": st.sampled_from(["10Mbps", "1Gbps"]),
                "rate_limit": st.sampled_from(["5Mbps", "500Mbps"]),
                "limiter": st.sampled_from(["pacing", "token_bucket"]),
            },
        ),
        max_size=3,
    ),
    "protocol.variant": st.sampled_from(["reno", "bic", "cubic", "highspeed", "htcp", "scalable"]),
    "protocol.initial_cwnd": st.integers(min_value=1, max_value=1000),
    "protocol.delayed_ack": st.booleans(),
    "protocol.rto_min": st.sampled_from(["1ms", "200ms", "1s"]),
    "protocol.window_cap": st.sampled_from(["1B", "1KB", "64KB", "100MB"]),
    "protocol.rate_limit": st.sampled_from(["1Mbps", "50Mbps", "5Gbps"]),
    "protocol.limiter": st.sampled_from(["pacing", "token_bucket"]),
    "protocol.hz": st.sampled_from([10, 250, 1000, 10000]),
    "measure.goodput_interval": st.sampled_from(["1ms", "0.1s", "1s"]),
    "measure.link_interval": st.sampled_from(["100us", "20ms"]),
    "measure.tcp_interval": st.sampled_from(["1ms", "100ms"]),
    "measure.window": st.sampled_from(["all", "all-active", ["0s", "0.1s"]]),
    "seed": st.integers(min_value=0, max_value=2**63 - 1),
}
BASE = {
    "name": "fuzz",
    "topology": {"pairs": 2, "access_rate": "100Mbps", "bottleneck_rate": "100Mbps", "rtt": "10ms", "buffer": "1bdp"},
    "workload": {"streams": 1, "duration": "300ms"},
    "seed": 3,
}


@st.composite
def scenario_dicts(draw) -> dict:
    data = json.loads(json.dumps(BASE))
    pool = VALID if draw(st.booleans()) else FIELDS
    for path in draw(st.lists(st.sampled_from(sorted(pool)), max_size=6, unique=True)):
        value = draw(pool[path])
        if path == "workload.volume" and draw(st.booleans()):
            data["workload"].pop("duration", None)
        sc.set_path(data, path, value, "fuzz")
    return data


def _short_run(resolved: dict) -> None:
    """The simulator on the accepted scenario, cut off after about 20 000 packets' time."""
    cfg = simbackend.sim_config(resolved)
    rate = min(resolved["bottleneck_rate_bps"], sum(p["access_rate_bps"] for p in resolved["pair_paths"]))
    budget_s = min(0.5, 2e4 * 8 * (resolved["mtu"] + 38) / rate)
    cfg["end_ns"] = max(1, min(cfg["end_ns"] or 2**62, int(budget_s * 1e9)))
    simbackend.run_config(cfg, resolved)


@FUZZ
@given(scenario_dicts())
def test_generated_scenarios_are_refused_with_a_reason_or_run(data):
    try:
        s = sc.from_dict(data, "fuzz.yaml")
        resolved = sc.resolve(s)
    except sc.ScenarioError as e:
        assert str(e).startswith("fuzz"), str(e)
        return
    assert resolved["cost"]["packets"] >= 0
    if len(resolved["flows"]) <= 200 and resolved["background_sources"] <= 50:
        _short_run(resolved)  # a panic would raise pyo3's PanicException here


# ----------------------------------------------------------------------------- campaigns


@st.composite
def campaign_dicts(draw) -> dict:
    axes = draw(
        st.dictionaries(
            st.one_of(st.sampled_from(sorted(FIELDS)), st.sampled_from(["seed", "nodot", "a.b.c"]), GARBAGE.map(str)),
            st.one_of(st.lists(st.sampled_from(["10ms", "20ms", 1, 2, "reno", "cubic", None]), max_size=4), GARBAGE),
            max_size=3,
        )
    )
    data = {"name": draw(st.one_of(st.just("c"), GARBAGE)), "scenario": draw(st.one_of(st.just(BASE), GARBAGE)), "sweep": axes}
    optional = {
        "repetitions": st.one_of(st.integers(min_value=-1, max_value=20), st.sampled_from([10_000, 10_001, 10**6]), GARBAGE),
        "order": st.one_of(st.sampled_from(["random", "sequential", "x"]), GARBAGE),
        "zip": st.one_of(st.just({"workload.streams": [1, 2], "seed": [1, 2]}), st.just({"seed": [1]}), GARBAGE),
        "backend": st.one_of(st.sampled_from(["sim", "netns", "x"]), GARBAGE),
        "set": st.one_of(st.just({"topology.rtt": "20ms"}), st.just({"topology": 1}), GARBAGE),
        "shuffle_seed": st.one_of(st.integers(), GARBAGE),
    }
    for k, strat in optional.items():
        if draw(st.booleans()):
            data[k] = draw(strat)
    return data


@FUZZ
@given(campaign_dicts())
def test_generated_campaigns_are_refused_with_a_reason_or_expanded(data):
    try:
        c = spec.from_dict(data, "fuzz-campaign.yaml")
    except spec.CampaignError as e:
        assert "fuzz-campaign.yaml" in str(e) or str(e).startswith("--set"), str(e)
        return
    assert len(c.runs) == len({r.key for r in c.runs}) >= 1


# ----------------------------------------------------------------------------- importers

BAD_VALUES = ["x", None, [], {}, True, -1, 2**64, 2**63, 1e308, -0.5, 0, 1e-300, "NaN", 3.5, "Infinity"]


def _docs(path: Path) -> list:
    text, dec, docs, i = path.read_text(), json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return docs
        d, i = dec.raw_decode(text, i)
        docs.append(d)


def _places(node, at=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _places(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _places(v, (*at, i))
    if at:
        yield at


def _mutated_iperf3(rng: random.Random) -> str:
    docs = _docs(rng.choice(sorted(DATA.glob("iperf3_*.json"))))
    for _ in range(rng.randint(1, 3)):
        doc = rng.choice(docs)
        place = rng.choice(list(_places(doc)))
        node = doc
        for k in place[:-1]:
            node = node[k]
        if rng.random() < 0.2 and isinstance(node, dict):
            del node[place[-1]]
        else:
            node[place[-1]] = rng.choice(BAD_VALUES)
    text = "\n".join(json.dumps(d) for d in docs)
    return text.replace('"NaN"', "NaN").replace('"Infinity"', "Infinity")


def _mutated_ss(rng: random.Random) -> str:
    import re

    lines = rng.choice(sorted(DATA.glob("ss_*.log"))).read_text().splitlines()
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(lines))
        op = rng.random()
        if op < 0.15:
            del lines[i]
        elif op < 0.3:
            lines.insert(i, lines[rng.randrange(len(lines))])
        else:
            toks = re.split(r"(\d+(?:\.\d+)?)", lines[i])
            numbers = list(range(1, len(toks), 2))
            if numbers:
                toks[rng.choice(numbers)] = rng.choice(["x", "-1", "1e999", "nan", str(2**64), "9" * 40, "1.5.5", ""])
            lines[i] = "".join(toks)
    return "\n".join(lines) + "\n"


IMPORT_EXAMPLES = max(20, EXAMPLES // 3)


@pytest.mark.parametrize("kind", ["iperf3", "ss"])
def test_mutated_logs_import_or_are_refused_with_a_reason(tmp_path, kind):
    seed = int(os.environ.get("XFERLAB_FUZZ_SEED", "0"))
    rng = random.Random(f"{kind}:{seed}")
    outcomes = {"ok": 0, "refused": 0}
    for n in range(IMPORT_EXAMPLES):
        log = tmp_path / f"in{n}.{'json' if kind == 'iperf3' else 'log'}"
        log.write_text(_mutated_iperf3(rng) if kind == "iperf3" else _mutated_ss(rng))
        try:
            if kind == "iperf3":
                trace = iperf3.import_trace([log])
            else:
                trace = ss.import_trace(log)
            engine.save(engine.stamp(trace, scenario={"name": "fuzz"}, seed=None), tmp_path / f"run{n}", force=True)
            outcomes["ok"] += 1
        except (ImportLogError, RunFolderError, MetricsError) as e:
            assert str(log) in str(e) or "--interval" in str(e) or "the log spans" in str(e), str(e)
            outcomes["refused"] += 1
    # Both kinds of outcome occur: the mutations are neither all harmless nor all fatal.
    assert outcomes["ok"] > 0 and outcomes["refused"] > 0, outcomes
