"""Today's simulator against the fixed reference build: CPU seconds per case on both builds,
alternately in one process (the machine's load falls on both alike), min/median/max of
several passes. Prints the table and rewrites the "Today against the reference" section at
the top of BENCHMARKS.md (`make bench`).

    .venv/bin/python benches/reference.py [--passes 3] [--no-write] [--only K ...]

The reference is :data:`REFERENCE`, built once from its commit (``maturin build --release``
in a temporary worktree) and kept under ``target/reference/``. It changes only on purpose,
with a line in BENCHMARKS.md: every later change is measured against the same build, so a
drift of many small steps cannot hide behind "within noise" against the commit before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchlib import machine, write_section
from builds import load_build, reference_build, run_on_build
from xferlab import scenario
from xferlab.backends import extension, sim

ROOT = Path(__file__).resolve().parent.parent

#: The fixed reference: main on 2026-12-07, the simulator of VALIDATION.md's fidelity tables
#: (Linux 6 sender, host noise, TSO deferral, receive window, ACK rules).
REFERENCE = "a97215f"

NS2 = ROOT / "scenarios/seed004-ns2.yaml"
#: name, scenario, overrides: short cases, one per regime (a full pass takes about a minute).
CASES = [
    ("quick (4 × 1 Gbit/s → 2 Gbit/s, 10 ms, 20 s)", ROOT / "scenarios/quick.yaml", []),
    ("seed 004 NS-2 scenario, B = 170, first 25 s", NS2, ["workload.duration=25s", "topology.buffer=170"]),
    ("seed 004 NS-2 scenario, B = 17000, first 25 s", NS2, ["workload.duration=25s", "topology.buffer=17000"]),
    ("10 flows into 10 Gbit/s, 20 ms, 10 s", NS2, ["topology.pairs=10", "workload.duration=10s", "topology.buffer=1.0bdp"]),
    ("1000 flows into 10 Gbit/s, 20 ms, 10 s", NS2, ["topology.pairs=1000", "workload.duration=10s", "topology.buffer=1.0bdp"]),
]


def config(path: Path, overrides: list[str]) -> dict:
    s, _ = scenario.load(path, overrides)
    return sim.sim_config(scenario.resolve(s))


def measure(passes: int, only: list[int] | None) -> list[dict]:
    ref, today = load_build(str(reference_build(REFERENCE)), "reference._sim"), extension.module()
    rows = []
    for k, (name, path, overrides) in enumerate(CASES):
        if only and k not in only:
            continue
        cfg = config(path, overrides)
        cpu = {"reference": [], "today": []}
        counts = {}
        for p in range(passes):
            order = [("reference", ref), ("today", today)]
            for label, mod in order if p % 2 == 0 else order[::-1]:
                _, c, stats = run_on_build(mod, json.loads(json.dumps(cfg)))
                cpu[label].append(c)
                counts[label] = stats
        row = {"name": name, "cpu": cpu, "packets": counts["today"]["packets"], "events": counts["today"]["events"]}
        row["same_run"] = counts["today"]["packets"] == counts["reference"]["packets"]
        rows.append(row)
        print(line(row), flush=True)
    return rows


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"


def line(r: dict) -> str:
    ref, now = statistics.median(r["cpu"]["reference"]), statistics.median(r["cpu"]["today"])
    same = "" if r["same_run"] else " ¹"
    return (
        f"| {r['name']}{same} | {r['packets'] / 1e6:.1f} M | {r['events'] / r['packets']:.2f} | {spread(r['cpu']['reference'])} "
        f"| {spread(r['cpu']['today'])} | {now / ref:.2f} | {1e9 * now / r['packets']:.0f} |"
    )


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "crates"], capture_output=True, text=True, cwd=ROOT).stdout
    return (head or "?") + (" with changes to crates/" if dirty.strip() else "")


def section(rows: list[dict], passes: int, load: tuple[float, float]) -> str:
    lines = [
        "## Today against the reference",
        "",
        f"Command: `make bench` (`.venv/bin/python benches/reference.py --passes {passes}`). CPU seconds of the "
        f"simulator alone, min / median / max of {passes} passes, both builds alternately in one process. "
        f"Reference: main at {REFERENCE}, built once and kept in `target/reference/` (benches/builds.py). "
        f"Today: {commit()}. Machine: {machine()}; load average {load[0]:.1f} before, {load[1]:.1f} after. "
        "The reference changes only on purpose, with a line under History.",
        "",
        "| case | data packets | events / packet | reference CPU s | today CPU s | today / reference | today ns / packet |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(line(r) for r in rows),
    ]
    if not all(r["same_run"] for r in rows):
        lines += [
            "",
            "¹ the two builds simulate different runs (their packet counts differ): a change of the model, not of speed alone.",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--only", type=int, nargs="*", help="case numbers (0-based)")
    a = ap.parse_args()
    if a.passes < 1:
        ap.error("--passes: at least 1")
    before = os.getloadavg()[0]
    rows = measure(a.passes, a.only)
    text = section(rows, a.passes, (before, os.getloadavg()[0]))
    print(text)
    if not a.no_write and not a.only:
        write_section(text, before=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
