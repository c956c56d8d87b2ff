"""How much the emulated dumbbell carries at 100 ms RTT, and how punctual the delay line stays.

    sudo .venv/bin/python benches/netns_capacity.py [--rates 300,400,500,600,700] [--duration 20]

For each bottleneck rate C: 2 pairs with access links at C, 100 ms RTT, one BDP of buffer,
CUBIC, one stream per pair, through the netns backend at --scale 1 (no dilation). Reports
the goodput, the delay line's drops (goal: 0) and lateness (goal: mean ≤ 0.2 ms, p99 ≤ 1 ms)
and rewrites the "netns backend: capacity" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchlib import machine
from xferlab import backends, metrics, scenario

ROOT = Path(__file__).resolve().parent.parent

SECTION = "## netns backend: capacity at 100 ms"


def one(rate_mbps: int, duration: int, variant: str) -> dict:
    data = {
        "name": f"capacity-{rate_mbps}",
        "topology": {
            "pairs": 2,
            "access_rate": f"{rate_mbps}Mbps",
            "bottleneck_rate": f"{rate_mbps}Mbps",
            "rtt": "100ms",
            "buffer": "1.0bdp",
        },
        "workload": {"streams": 1, "duration": f"{duration}s"},
        "protocol": {"variant": variant},
        "measure": {"goodput_interval": "1s", "link_interval": "100ms"},
        "seed": 1,
    }
    s = scenario.from_dict(data)
    r = scenario.resolve(s)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    out = backends.get("netns").run(s, r, scale=1)
    wall = time.perf_counter() - t0
    m = metrics.compute(out, [float(min(10, duration // 2)), float(duration)])
    dl = out.provenance.stats["delay_line"]
    qs = list(dl["queues"].values())
    packets = sum(q["packets"] for q in qs)
    return {
        "rate_mbps": rate_mbps,
        "goodput_mbps": m["aggregate_goodput_mbps"],
        "r_tp_mbps": r["ideal_goodput_mbps"],
        "retransmissions": m["retransmissions"],
        "bottleneck_drops": m["bottleneck_drops"],
        "delay_drops": sum(q.get("queue_dropped", 0) + q.get("user_dropped", 0) for q in qs) + dl.get("enobufs", 0),
        "backlog_drops": dl.get("backlog_dropped", 0),
        "flagged": bool(out.provenance.stats.get("delay_line_late")),
        "late_mean_ms": sum(q["late_mean_ms"] * q["packets"] for q in qs) / max(1, packets),
        "late_p99_ms": max(q["late_p99_ms"] for q in qs),
        "late_max_ms": max(q["late_max_ms"] for q in qs),
        "max_held": max(q["max_held"] for q in qs),
        "delay_cpu": (dl.get("cpu_user_s", 0) + dl.get("cpu_sys_s", 0)) / max(dl.get("elapsed_s", 1), 1e-9),
        "load_before": load,
        "wall_s": wall,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="300,500,600,700,800", help="bottleneck rates, Mbit/s")
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--variant", default="cubic")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    rows = []
    for rate in [int(x) for x in args.rates.split(",")]:
        m = one(rate, args.duration, args.variant)
        rows.append(m)
        print(json.dumps(m), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    lines = [
        SECTION,
        "",
        f"Command: `sudo .venv/bin/python benches/netns_capacity.py --rates {args.rates} --duration {args.duration}`. "
        f"Machine: {machine()}. Commit {commit or '?'}. Each row: 2 pairs with access links at C into a bottleneck "
        f"at C, 100 ms RTT, 1 BDP of buffer, {args.variant}, {args.duration} s at `--scale 1`; goodput over the last "
        f"{args.duration - min(10, args.duration // 2)} s. Goals (issue 5): ≥ 500 Mbit/s with no packet lost in the "
        "delay line; lateness mean ≤ 0.2 ms, p99 ≤ 1 ms. The delay line is pinned to CPU 0 and the end hosts' receive "
        "work steered to the other CPU (docs/delayline.md). `delay line CPU` is the daemon's share of one core; `backlog "
        "drops` are packets lost in a CPU's input backlog (host-wide); `load` the 1-minute load average before the run; "
        "`flagged` whether the run's report marks it as not clean.",
        "",
        "| C (Mbit/s) | goodput (Mbit/s) | r_TP | retrans. | bottleneck drops | delay-line drops | backlog drops | late mean "
        "| late p99 | late max | most held | delay line CPU | load | flagged |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for m in rows:
        lines.append(
            f"| {m['rate_mbps']} | {m['goodput_mbps']:.1f} | {m['r_tp_mbps']:.1f} | {m['retransmissions']} | "
            f"{m['bottleneck_drops']} | {m['delay_drops']} | {m['backlog_drops']} | {m['late_mean_ms']:.3f} ms | "
            f"{m['late_p99_ms']:.3f} ms | {m['late_max_ms']:.2f} ms | {m['max_held']} | {100 * m['delay_cpu']:.0f} % | "
            f"{m['load_before']:.1f} | {'yes' if m['flagged'] else 'no'} |"
        )
    section = "\n".join(lines) + "\n"
    print(section)
    if not args.no_write:
        path = ROOT / "BENCHMARKS.md"
        text = path.read_text()
        pattern = re.compile(re.escape(SECTION) + r"\n.*?(?=\n## |\Z)", re.S)
        if pattern.search(text):
            text = pattern.sub(lambda _: section.rstrip("\n") + "\n", text)
        else:
            text = text.rstrip("\n") + "\n\n" + section
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
