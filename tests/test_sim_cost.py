"""The simulator's cost budget, in counts rather than times: simulated events and heap
allocations per delivered data packet on three fixed scenarios (few flows, seed 004's NS-2
case, many flows). A count is the same on every machine and every run, so this cannot flake;
it fails when a change raises a count per packet by more than the margin of
``tests/data/sim_cost_budget.json``, and when one falls by more than its ``fall_percent``
(the budget is then out of date: a looser budget would let a later rise through unseen).

* **events**: the simulator's own count (``provenance.stats["events"]``).
* **allocations**, **reallocations**: calls to the extension's allocator during the run
  (``_sim.allocations()`` before and after; Rust code only, the simulator and the binding,
  from the configuration's parsing to the Arrow tables; Python's own allocations are not
  counted).
* **delivered data packets**: bytes delivered in order to the receivers (the flows table's
  ``bytes``) divided by the MSS. The simulator's ``stats["packets"]`` counts segments put
  on the wire, retransmissions included; delivered packets are what a run is for.

Each scenario runs twice in the process and its counts must be identical (the first run
pays no one-time cost: the extension's initialisation happens at import).

After a change that moves a count on purpose, rewrite the budget with the counts measured
now and say why in BENCHMARKS.md ("Cost budget (deterministic counts)")::

    XFERLAB_UPDATE_COST_BUDGET=1 .venv/bin/python -m pytest tests/test_sim_cost.py
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from pathlib import Path

import pytest
from xferlab import scenario
from xferlab.backends import extension, sim

ROOT = Path(__file__).resolve().parent.parent
BUDGET = Path(__file__).resolve().parent / "data" / "sim_cost_budget.json"
UPDATE = os.environ.get("XFERLAB_UPDATE_COST_BUDGET") == "1"
UPDATE_COMMAND = "XFERLAB_UPDATE_COST_BUDGET=1 .venv/bin/python -m pytest tests/test_sim_cost.py"

#: One scenario per regime, short (a few seconds simulated, about a second of CPU each).
SCENARIOS = {
    "few-flows": ("scenarios/quick.yaml", ["workload.duration=4s"]),
    "seed004-ns2": ("scenarios/seed004-ns2.yaml", ["workload.duration=3s", "topology.buffer=170"]),
    "many-flows": (
        "scenarios/seed004-ns2.yaml",
        [
            "topology.pairs=100",
            "protocol.variant=cubic",
            "topology.buffer=1.0bdp",
            "workload.duration=3s",
            "workload.start_jitter=20ms",
        ],
    ),
}
#: The counts budgeted per delivered data packet.
METRICS = ("events", "allocations", "reallocations")


def measure(path: str, overrides: list[str]) -> dict[str, int]:
    """One run's counts: events, allocator calls and delivered data packets."""
    s, _ = scenario.load(ROOT / path, overrides)
    resolved = scenario.resolve(s)
    ext = extension.module()
    before = ext.allocations()
    trace = sim.run(s, resolved)
    after = ext.allocations()
    delivered = sum(trace.table("flows").column("bytes").to_pylist())
    return {
        "events": trace.provenance.stats["events"],
        "allocations": after["allocations"] - before["allocations"],
        "reallocations": after["reallocations"] - before["reallocations"],
        "delivered_packets": delivered // resolved["mss"],
    }


def per_packet(counts: dict[str, int]) -> dict[str, float]:
    return {m: counts[m] / counts["delivered_packets"] for m in METRICS}


def update_budget(name: str, counts: dict[str, int]) -> None:
    """Writes one scenario's counts into the budget file (under a lock: the scenarios may run
    in parallel workers)."""
    with open(BUDGET, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        budget = json.load(f)
        budget["scenarios"][name] = {
            "scenario": list(SCENARIOS[name]),
            "counts": counts,
            "per_packet": {m: round(v, 6) for m, v in per_packet(counts).items()},
        }
        budget["scenarios"] = dict(sorted(budget["scenarios"].items()))
        f.seek(0)
        f.truncate()
        f.write(json.dumps(budget, indent=2) + "\n")


def judge(name: str, budget: dict, measured: dict[str, int]) -> list[str]:
    """What is wrong with the measured counts against the budget (an empty list if nothing).

    Events per packet may rise by ``margin_percent`` and fall by ``fall_percent`` (beyond the
    margin, a fall is a warning that the budget could be tightened). Allocations are next
    to none per packet (setup, queues growing, the trace's rows: about one per thousand
    packets), so a percentage of them says little: they may rise by
    ``allocation_slack_per_packet`` (one per thousand packets), which an allocation per
    packet or per ACK (about 0.5 to 1) exceeds hundreds of times over."""
    entry = budget["scenarios"][name]
    margin, fall, slack = budget["margin_percent"], budget["fall_percent"], budget["allocation_slack_per_packet"]
    was, now = per_packet(entry["counts"]), per_packet(measured)
    update = f"update {BUDGET.relative_to(ROOT)} ({UPDATE_COMMAND}) and say why in BENCHMARKS.md"
    problems = []
    for m in METRICS:
        change = 100.0 * (now[m] / was[m] - 1.0) if was[m] else (0.0 if now[m] == 0 else float("inf"))
        said = f"{name}: {m} per delivered packet went from {was[m]:.6g} to {now[m]:.6g} ({change:+.1f} %)"
        if m != "events":
            if now[m] - was[m] > slack:
                problems.append(f"{said}, more than the {slack:g} per packet allowed; if on purpose, {update}")
        elif change > margin:
            problems.append(f"{said}, budget +{margin:g} %; if on purpose, {update}")
        elif change < -fall:
            problems.append(f"{said}, more than the -{fall:g} % a budget may lag behind; {update}")
        elif change < -margin:
            warnings.warn(f"{said}: the budget could be tightened; {update}", stacklevel=2)
    return problems


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_cost_per_delivered_packet_stays_within_budget(name):
    path, overrides = SCENARIOS[name]
    first = measure(path, overrides)
    second = measure(path, overrides)
    assert first == second, f"{name}: the counts differ between two identical runs: {first} then {second}"
    assert first["delivered_packets"] > 0
    if UPDATE:
        update_budget(name, first)
        return
    budget = json.loads(BUDGET.read_text())
    entry = budget["scenarios"].get(name)
    assert entry is not None, f"{name} has no budget yet: {UPDATE_COMMAND}"
    assert entry["scenario"] == [path, overrides], (
        f"{name}: the scenario differs from the one budgeted ({entry['scenario']}); measure it again: {UPDATE_COMMAND}"
    )
    problems = judge(name, budget, first)
    assert not problems, "\n".join(problems)
