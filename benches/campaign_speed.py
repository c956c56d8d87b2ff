"""Campaign throughput: a 64-run simulator sweep (4 variants × 4 RTTs × 4 stream counts of
the quick scenario, 5 s simulated each) run by `xferlab campaign run` on 1 local worker, on
2 local workers and through a Dask LocalCluster of 2 workers. Each mode starts from an empty
folder, in a fresh process, as a user would. Prints a table and rewrites the "Campaigns"
section of BENCHMARKS.md.

    .venv/bin/python benches/campaign_speed.py [--repeat 1] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import machine

ROOT = Path(__file__).resolve().parent.parent

CAMPAIGN = {
    "name": "campaign-speed",
    "description": "64 runs of the quick scenario (4 × 1 Gbit/s into 2 Gbit/s), 5 s simulated each.",
    "scenario": str(ROOT / "scenarios/quick.yaml"),
    "set": {"workload.duration": "5s"},
    "sweep": {
        "protocol.variant": ["reno", "cubic", "htcp", "scalable"],
        "topology.rtt": ["5ms", "10ms", "20ms", "50ms"],
        "workload.streams": [1, 2, 4, 8],
    },
    "repetitions": 1,
}
MODES = [
    ("1 local worker", ["--workers", "1"]),
    ("2 local workers", ["--workers", "2"]),
    ("Dask LocalCluster, 2 workers", ["--dask", "local:2"]),
]


def load() -> float:
    return os.getloadavg()[0]


def once(path: Path, args: list[str], tmp: Path) -> dict:
    out = tmp / "out"
    shutil.rmtree(out, ignore_errors=True)
    before = load()
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "xferlab.cli", "campaign", "run", str(path), "--out", str(out), "--quiet", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "python")},
    )
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"campaign failed:\n{p.stdout}\n{p.stderr}")
    text = " ".join(p.stdout.split())
    m = re.search(r"(\d+) run\(s\) done, (\d+) failed .* in ([0-9.]+) s", text)
    if not m or m.group(1) != "64":
        raise SystemExit(f"unexpected output: {text}")
    import duckdb

    with duckdb.connect(str(out / "catalog.duckdb"), read_only=True) as db:
        n, run_wall = db.execute("SELECT count(*), sum(wall_seconds) FROM runs WHERE status = 'ok'").fetchone()
    return {
        "wall_s": wall,
        "campaign_s": float(m.group(3)),
        "runs": n,
        "run_wall_sum_s": run_wall,
        "load_before": before,
        "load_after": load(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="passes of each mode (the fastest is reported, all are listed)")
    ap.add_argument("--no-write", action="store_true", help="print only, do not rewrite BENCHMARKS.md")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="xferlab-campaign-speed-") as d:
        tmp = Path(d)
        path = tmp / "campaign.yaml"
        path.write_text(json.dumps(CAMPAIGN))
        passes: dict[str, list[dict]] = {name: [] for name, _ in MODES}
        for k in range(args.repeat):  # modes in turn, so that a change of load hits them alike
            for name, extra in MODES:
                r = once(path, extra, tmp)
                passes[name].append(r)
                print(f"pass {k + 1}, {name}: {r['wall_s']:.1f} s, load {r['load_before']:.1f}→{r['load_after']:.1f}", flush=True)
        for name, extra in MODES:
            best = min(passes[name], key=lambda r: r["wall_s"])  # the least disturbed pass
            best["all_walls"] = [r["wall_s"] for r in passes[name]]
            results.append((name, extra, best))
    base = results[0][2]["wall_s"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    lines = [
        "## Campaigns",
        "",
        f"Command: `.venv/bin/python benches/campaign_speed.py --repeat {args.repeat}` (best of {args.repeat} passes per mode, "
        "modes in turn): "
        "`xferlab campaign run` of a 64-run simulator sweep (quick scenario, 5 s simulated per run: 4 variants × 4 RTTs × "
        "4 stream counts), from an empty folder, the whole command timed (interpreter start, worker start, catalog "
        f"commits, per-run figures and report included). Machine: {machine()}. Commit {commit or '?'}.",
        "",
        "| mode | wall (best) | every pass | speed-up vs 1 worker | runs / min | sum of per-run wall | load before → after |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, extra, r in results:
        lines.append(
            f"| {name} (`{' '.join(extra)}`) | {r['wall_s']:.1f} s | {', '.join(f'{w:.1f}' for w in r['all_walls'])} s "
            f"| {base / r['wall_s']:.2f}× "
            f"| {60 * r['runs'] / r['wall_s']:.0f} | {r['run_wall_sum_s']:.1f} s "
            f"| {r['load_before']:.1f} → {r['load_after']:.1f} |"
        )
    loads = [x for runs in passes.values() for r in runs for x in (r["load_before"], r["load_after"])]
    lines += [
        "",
        f"The 1-minute load average ranged over {min(loads):.1f}–{max(loads):.1f} during these runs: the 2 cores are shared, "
        "so other jobs slow each pass by different amounts and the speed-ups are noisy (a speed-up above 2× means the "
        "1-worker pass was slowed more than the 2-worker one). The sum of per-run wall times (each run timed inside its "
        "worker) shows how much each pass was slowed: on an idle machine it is about the same for every mode. The runs "
        f"are short ({results[0][2]['run_wall_sum_s'] / 64:.1f} s each on 1 worker, metrics and per-run report "
        "included), so the fixed costs of a pass (starting the interpreter and the workers, or a Dask cluster, and the "
        "catalog commits) weigh more than they would in a real campaign.",
    ]
    section = "\n".join(lines) + "\n"
    print(section)
    if not args.no_write:
        path = ROOT / "BENCHMARKS.md"
        text = path.read_text()
        pattern = re.compile(r"## Campaigns\n.*?(?=\n## |\Z)", re.S)
        text = pattern.sub(section.rstrip("\n") + "\n", text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
        path.write_text(text)
        print(json.dumps({"written": str(path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
