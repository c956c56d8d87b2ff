"""The simulator's cost against the number of flows at a constant packet rate: N flows into
10 Gbit/s (seed 004's dumbbell, 20 ms, 1 BDP, starts spread over 20 ms), 5 s simulated, each
N in a fresh process: CPU seconds of the simulation, ns per data packet, events per packet,
the process's peak memory.

    .venv/bin/python benches/flow_scaling.py [--flows 10 100 1000 10000] [--duration 5s]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchlib import machine
from xferlab import scenario
from xferlab.backends import sim

ROOT = Path(__file__).resolve().parent.parent


def one(n: int, duration: str) -> dict:
    overrides = [f"topology.pairs={n}", f"workload.duration={duration}", "topology.buffer=1.0bdp", "workload.start_jitter=20ms"]
    s, _ = scenario.load(ROOT / "scenarios/seed004-ns2.yaml", overrides)
    r = scenario.resolve(s)
    t = time.process_time()
    trace = sim.run(s, r)
    cpu = time.process_time() - t
    st = trace.provenance.stats
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"flows": n, "cpu_s": cpu, "packets": st["packets"], "events": st["events"], "rss_mb": rss}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, nargs="+", default=[10, 100, 1000, 10000])
    ap.add_argument("--duration", default="5s")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one is not None:
        print(json.dumps(one(a.one, a.duration)))
        return 0
    print(f"Command: `.venv/bin/python benches/flow_scaling.py --duration {a.duration}`. Machine: {machine()}.\n")
    print("| flows | CPU s | data packets | ns / packet | events / packet | peak RSS |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in a.flows:
        p = subprocess.run([sys.executable, __file__, "--one", str(n), "--duration", a.duration], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(p.stderr.strip().splitlines()[-1])
        m = json.loads(p.stdout.strip().splitlines()[-1])
        print(
            f"| {n} | {m['cpu_s']:.2f} | {m['packets'] / 1e6:.2f} M | {1e9 * m['cpu_s'] / m['packets']:.0f} "
            f"| {m['events'] / m['packets']:.2f} | {m['rss_mb']:.0f} MB |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
