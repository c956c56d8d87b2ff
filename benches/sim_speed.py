"""Simulator speed: simulated packets per wall second on seed 002's Table I scenario
(11 pairs × 10 streams, 1 Gbit/s into 10 Gbit/s, 11.5 ms, 60 s simulated) and on the
quick scenario. Prints a table and rewrites the "Simulator speed" section of BENCHMARKS.md.

    .venv/bin/python benches/sim_speed.py [--runs 3] [--no-write]
    .venv/bin/python benches/sim_speed.py --baseline OLD/_sim.abi3.so [--runs 3]

With --baseline, each case runs on an older build of the extension (e.g. main's, built
with `maturin build --release` in a checkout of it) and on this one, alternately in the same
process, and the ratios are printed (BENCHMARKS.md tracks today against the fixed reference:
benches/reference.py, `make bench`). One case
on two builds made the same way (two commits' wheels, `maturin build --release`):

    .venv/bin/python benches/sim_speed.py --compare K --baseline OLD/_sim.abi3.so --build NEW/_sim.abi3.so
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchlib import machine
from builds import load_build, run_on_build
from xferlab import scenario
from xferlab.backends import extension, sim

ROOT = Path(__file__).resolve().parent.parent

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


def compare(index: int, runs: int, baseline: str, build: str | None = None) -> None:
    """One case on the baseline build, on this one (or ``build``, another build made the
    same way as the baseline), and on that without host noise, alternately (so that the
    machine's load falls on all three alike); prints medians and each run's walls."""
    old = load_build(baseline)
    new = load_build(build, "build._sim") if build else extension.module()
    _, path, ov = CASES[index]
    s, _ = scenario.load(path, ov)
    cfg = sim.sim_config(scenario.resolve(s))
    quiet = json.loads(json.dumps(cfg))
    quiet["noise"]["enabled"] = False
    legacy = json.loads(json.dumps(cfg))
    walls = {"old": [], "new": [], "quiet": []}
    for _ in range(runs):
        walls["old"].append(run_on_build(old, legacy)[0])
        for key, c in (("new", cfg), ("quiet", quiet)):
            walls[key].append(run_on_build(new, json.loads(json.dumps(c)))[0])
    print(json.dumps({**{k: statistics.median(v) for k, v in walls.items()}, "walls": walls}))


def compare_all(runs: int, baseline: str) -> None:
    """Every case on ``baseline`` and on this build; prints the table (BENCHMARKS.md tracks
    today's cost against the fixed reference instead: benches/reference.py)."""
    lines = [
        f"Command: `.venv/bin/python benches/sim_speed.py --baseline BASE/_sim.abi3.so --runs {runs}`: each case on "
        "the baseline build and on this one (host noise on, and off), alternately in one process, median of "
        f"{runs}. Machine: {machine()}; the load of other work falls on both alike.",
        "",
        "| scenario | baseline wall | this build | ratio | this build, noise off | ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    for index, (name, _, _) in enumerate(CASES):
        cmd = [sys.executable, __file__, "--compare", str(index), "--runs", str(runs), "--baseline", baseline]
        m = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
        print(
            f"| {name} | {m['old']:.2f} s | {m['new']:.2f} s | {m['new'] / m['old']:.2f} | {m['quiet']:.2f} s "
            f"| {m['quiet'] / m['old']:.2f} |",
            flush=True,
        )


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
    ap.add_argument("--compare", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--baseline", help="an older build of the extension module to compare against")
    ap.add_argument(
        "--build", help="with --compare: another build to measure instead of this checkout's (built as the baseline was)"
    )
    args = ap.parse_args()
    if args.compare is not None:
        compare(args.compare, args.runs, args.baseline, args.build)
        return 0
    if args.baseline:
        compare_all(args.runs, args.baseline)
        return 0
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
