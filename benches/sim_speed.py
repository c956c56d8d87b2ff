"""Simulator speed: simulated packets per wall second on seed 002's Table I scenario
(11 pairs × 10 streams, 1 Gbit/s into 10 Gbit/s, 11.5 ms, 60 s simulated) and on the
quick scenario. Prints a table and rewrites the "Simulator speed" section of BENCHMARKS.md.

    .venv/bin/python benches/sim_speed.py [--runs 3] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

from xferlab import scenario  # noqa: E402
from xferlab.backends import sim  # noqa: E402

CASES = [
    ("seed004 NS-2 scenario, B = 170, 250 s", ROOT / "scenarios/seed004-ns2.yaml", ["topology.buffer=170"]),
    ("seed004 NS-2 scenario, B = 17000, 250 s", ROOT / "scenarios/seed004-ns2.yaml", ["topology.buffer=17000"]),
    ("seed002-table1, 10 streams/pair, 60 s", ROOT / "scenarios/seed002-table1.yaml", ["workload.streams=10"]),
    ("seed002-table1, 1 stream/pair, 60 s", ROOT / "scenarios/seed002-table1.yaml", ["workload.streams=1"]),
    ("quick (4 × 1 Gbit/s → 2 Gbit/s, 20 s)", ROOT / "scenarios/quick.yaml", []),
] + [
    # Cost against the number of flows at a constant packet rate (a full 10 Gbit/s link).
    (
        f"{n} flows into 10 Gbit/s, 20 ms, 20 s",
        ROOT / "scenarios/seed004-ns2.yaml",
        [f"topology.pairs={n}", "workload.duration=20s", "topology.buffer=1.0bdp", "workload.start_jitter=20ms"],
    )
    for n in (10, 100, 1000)
]


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return f"{cpu}, {os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}"


def measure(path: Path, overrides: list[str], runs: int) -> dict:
    s, _ = scenario.load(path, overrides)
    r = scenario.resolve(s)
    walls, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = sim.run(s, r)
        walls.append(time.perf_counter() - t0)
    st = out.provenance.stats
    wall = statistics.median(walls)
    return {
        "wall_s": wall,
        "wall_min_s": min(walls),
        "wall_max_s": max(walls),
        "simulated_s": out.end_s,
        "packets": st["packets"],
        "events": st["events"],
        "packets_per_s": st["packets"] / wall,
        "events_per_s": st["events"] / wall,
        "flows": len(r["flows"]),
    }


def one(index: int, runs: int) -> None:
    """Measures one case in this (fresh) process and prints it as JSON with the peak RSS."""
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    name, path, ov = CASES[index] if index >= 0 else (None, None, None)
    m = measure(path, ov, runs) if index >= 0 else {}
    m["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    m["base_rss_mb"] = base_rss
    print(json.dumps(m))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        one(args.one, args.runs)
        return 0
    rows = []
    for index, (name, _, _) in enumerate(CASES):
        # Each case in a fresh process, so that its peak memory is its own.
        p = subprocess.run(
            [sys.executable, __file__, "--one", str(index), "--runs", str(args.runs)], capture_output=True, text=True, check=True
        )
        m = json.loads(p.stdout.strip().splitlines()[-1])
        rows.append((name, m))
        print(
            f"{name}: {m['wall_s']:.2f} s wall (min {m['wall_min_s']:.2f}, max {m['wall_max_s']:.2f}) for "
            f"{m['simulated_s']:.0f} s simulated, {m['packets'] / 1e6:.1f} M packets, "
            f"{m['packets_per_s'] / 1e6:.2f} M packets/s, {m['events_per_s'] / 1e6:.2f} M events/s",
            flush=True,
        )
    base = json.loads(
        subprocess.run([sys.executable, __file__, "--one", "-1"], capture_output=True, text=True, check=True)
        .stdout.strip()
        .splitlines()[-1]
    )["rss_mb"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    lines = [
        "## Simulator speed",
        "",
        f"Command: `.venv/bin/python benches/sim_speed.py --runs {args.runs}` (median of {args.runs} runs, one core, "
        f"release build), each case in a fresh process. Machine: {machine()}. Commit {commit or '?'}. "
        f"Peak RSS includes the Python interpreter and the package ({base:.0f} MB on their own).",
        "",
        "| scenario | flows | simulated | wall (median) | data packets | packets / wall s | events / wall s "
        "| ns / packet | peak RSS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in rows:
        lines.append(
            f"| {name} | {m['flows']} | {m['simulated_s']:.0f} s | {m['wall_s']:.2f} s | {m['packets'] / 1e6:.1f} M | "
            f"{m['packets_per_s'] / 1e6:.2f} M | {m['events_per_s'] / 1e6:.2f} M | {1e9 / m['packets_per_s']:.0f} "
            f"| {m['rss_mb']:.0f} MB |"
        )
    section = "\n".join(lines) + "\n"
    print(section)
    if not args.no_write:
        path = ROOT / "BENCHMARKS.md"
        text = (
            path.read_text()
            if path.exists()
            else "# Benchmarks\n\nFigures measured on the project's machines, each with the command that reproduces it.\n\n"
        )
        pattern = re.compile(r"## Simulator speed\n.*?(?=\n## |\Z)", re.S)
        text = pattern.sub(section.rstrip("\n") + "\n", text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
        path.write_text(text)
        print(json.dumps({"written": str(path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
