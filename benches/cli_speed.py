"""What the `xferlab` command costs beyond its work: CPU seconds of the light subcommands
(their imports, nothing else), and of `xferlab run scenarios/quick.yaml` beside the
simulation's own time. Min / median / max of several runs, each in a fresh process. Prints
the table and rewrites the "The command line's own cost" section of BENCHMARKS.md.

    .venv/bin/python benches/cli_speed.py [--runs 5] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import machine, write_section

ROOT = Path(__file__).resolve().parent.parent

HEADING = "## The command line's own cost"
XFERLAB = [sys.executable, "-m", "xferlab.cli"]
LIGHT = [["--help"], ["version"], ["check", "scenarios/quick.yaml"], ["schema"], ["limits"], ["ideal", "10Gbps"]]


def cpu_of(args: list[str]) -> tuple[float, float]:
    """CPU and wall seconds of one run of ``xferlab args`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([*XFERLAB, *args], cwd=ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"


def run_quick(runs: int) -> tuple[list[float], list[float]]:
    """`xferlab run scenarios/quick.yaml`: the whole command's wall seconds, and the
    simulation's own (run.json's ``wall_seconds``)."""
    whole, simulated = [], []
    with tempfile.TemporaryDirectory(prefix="xferlab-cli-") as tmp:
        for _ in range(runs):
            out = Path(tmp) / "quick"
            _, wall = cpu_of(["run", "scenarios/quick.yaml", "--out", str(out), "--force", "-q"])
            whole.append(wall)
            simulated.append(json.loads((out / "run.json").read_text())["wall_seconds"])
    return whole, simulated


def section(runs: int) -> str:
    lines = [
        HEADING,
        "",
        f"Command: `.venv/bin/python benches/cli_speed.py --runs {runs}`: min / median / max of {runs} runs, each in a "
        f"fresh process. Machine: {machine()}.",
        "",
        "| command | CPU s |",
        "|---|---:|",
    ]
    for args in LIGHT:
        lines.append(f"| `xferlab {' '.join(args)}` | {spread([cpu_of(args)[0] for _ in range(runs)])} |")
    whole, simulated = run_quick(runs)
    beyond = [w - s for w, s in zip(whole, simulated, strict=True)]
    lines += [
        "",
        f"`xferlab run scenarios/quick.yaml` (report included), wall seconds: the command {spread(whole)}, its "
        f"simulation {spread(simulated)}, the rest {spread(beyond)}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    if a.runs < 1:
        ap.error("--runs: at least 1")
    text = section(a.runs)
    print(text)
    if not a.no_write:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
