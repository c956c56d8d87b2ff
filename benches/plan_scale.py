"""The planner's time against the number of requests (issue 48 item 15): every strategy on
1 000 and 10 000 staggered requests, at 95 % of the link (all served) and at 8 times it
(most requests with a deadline refused), half of them with a deadline 1.5 to 20 times their
time alone. Prints a markdown table (docs/scheduling.md "Scale").

    .venv/bin/python benches/plan_scale.py [--sizes 1000,10000] [--strategies ifs,vifi,...]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

from xferlab import schedule

ROOT = Path(__file__).resolve().parent.parent

#: r_TP of the link planned on (bit/s).
CAPACITY = 1e9


def requests(n: int, load: float, seed: int = 1) -> list[schedule.Request]:
    """1 to 100 MB each (0.4 s alone on average), released so that the link is ``load``
    times full; half with a deadline 1.5 to 20 times their time alone."""
    rng = random.Random(seed)
    gap = 0.4 / load
    out = []
    for i in range(n):
        v = rng.randint(10**6, 10**8)
        window = v * 8 / CAPACITY * rng.uniform(1.5, 20)
        out.append(schedule.Request(v, i * gap, i * gap + window if rng.random() < 0.5 else None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--strategies", default=",".join(schedule.STRATEGIES))
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; margin 20 ms; r_TP 1 Gbit/s")
    print("| strategy | requests | load | plan (s) | admitted | segments | multirate variables |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for n in map(int, args.sizes.split(",")):
        for load in (0.95, 8.0):
            reqs = requests(n, load)
            for strategy in args.strategies.split(","):
                t = time.perf_counter()
                p = schedule.plan(reqs, CAPACITY, strategy, 0.02)
                wall = time.perf_counter() - t
                assert schedule.verify(p) == [], schedule.verify(p)[:3]
                admitted = sum(a.admitted for a in p.allocations)
                segments = sum(len(a.segments) for a in p.allocations)
                nv = schedule.multirate_variables([r for a, r in zip(p.allocations, reqs, strict=True) if a.admitted], 0.02)
                print(
                    f"| {strategy} | {n:,} | {load:g} | {wall:.2f} | {admitted:,} | {segments:,} | "
                    + (f"{nv:,} |" if strategy == "multirate" else "— |"),
                    flush=True,
                )


if __name__ == "__main__":
    main()
