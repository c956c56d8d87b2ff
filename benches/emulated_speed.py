"""Simulator speed on the fidelity matrix's emulated hosts (0.4 ms transmit batching, HTB
token buckets), against an older build of the extension: where the softirq-run model of
`crates/sim/src/host.rs` acts (with `tx_batch_ns` at 0, the default, it does nothing).

    .venv/bin/python benches/emulated_speed.py --baseline OLD/_sim.abi3.so [--runs 3] [--only CASE ...]

Each case's 30 s duration run (kernel flow starts as stored in results/fidelity, seed 1),
on the baseline build and on this one alternately in one process; the median wall of each
and their ratio are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from builds import load_build
from xferlab import scenario
from xferlab.backends import extension
from xferlab.backends import sim as sim_backend
from xferlab.fidelity import emulation
from xferlab.fidelity.matrix import Case, matrix
from xferlab.fidelity.settings import OPTIONS

CASES = ["reno:50:1.0bdp:1", "cubic:200:0.2bdp:1", "highspeed:200:0.2bdp:4", "bbr:50:0.2bdp:4"]

#: Its figures (BENCHMARKS.md) were measured on the emulated hosts with prompt reads.
READS = "uniform"


def config(case: Case) -> dict:
    data = case.scenario("duration")
    r = scenario.resolve(scenario.from_dict(data, data["name"]))
    cfg = emulation.emulated(sim_backend.sim_config(r), reads=READS)
    stored = OPTIONS.results / f"{case.stem}-netns.json"
    starts = json.loads(stored.read_text())["duration"].get("starts_s") if stored.exists() else None
    if case.flows > 1 and starts:
        for flow, start in zip(cfg["flows"], starts, strict=True):
            flow["start_ns"] = round(start * 1e9)
    return cfg


def wall(mod, cfg: dict) -> float:
    t0 = time.perf_counter()
    mod.run(json.dumps(cfg), None, 1.0)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="an older build of the extension module")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", nargs="+", default=CASES, metavar="CASE")
    a = ap.parse_args()
    old, new = load_build(a.baseline), extension.module()
    print("| case | baseline wall | this build | ratio |\n|---|---:|---:|---:|")
    for key in a.only:
        cfg = config(next(c for c in matrix() if c.key == key))
        walls = {"old": [], "new": []}
        for _ in range(a.runs):
            walls["old"].append(wall(old, cfg))
            walls["new"].append(wall(new, cfg))
        o, n = statistics.median(walls["old"]), statistics.median(walls["new"])
        print(f"| {key} | {o:.2f} s | {n:.2f} s | {n / o:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
