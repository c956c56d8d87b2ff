"""Where the simulator's time goes, in instructions (callgrind: deterministic, unlike a
timer on a shared machine): the whole run and the main handlers, inclusive, per delivered
data packet, on seed 004's NS-2 case (12 Reno flows into 10 Gbit/s, 20 ms, B = 170).
Prints the table and rewrites the "Where the simulator's time goes" section of
BENCHMARKS.md.

    .venv/bin/python benches/sim_profile.py [--duration 2s] [--no-write]

Needs valgrind; builds `crates/sim/examples/runjson` (the simulator without Python).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import write_section
from xferlab import scenario
from xferlab.backends import sim

ROOT = Path(__file__).resolve().parent.parent

HEADING = "## Where the simulator's time goes"
RUNJSON = ROOT / "target" / "release" / "examples" / "runjson"
#: Handlers shown (inclusive instructions): label → callgrind function name.
PARTS = {
    "a data packet reaches its receiver (`Simulation::receive`)": "xferlab_sim::sim::Simulation::receive",
    "… of which the receiver's TCP (`Receiver::on_segment`)": "xferlab_sim::tcp::receiver::Receiver::on_segment",
    "a sender sends what it may (`Simulation::transmit`)": "xferlab_sim::sim::Simulation::transmit",
    "… of which `Sender::poll_transmit`": "xferlab_sim::tcp::sender::Sender::poll_transmit",
    "an ACK reaches its sender (`Sender::on_ack`)": "xferlab_sim::tcp::sender::Sender::on_ack",
    "the bottleneck's queue (`Link::offer`)": "xferlab_sim::link::Link::offer",
}


def profile(duration: str) -> tuple[dict[str, int], float, int]:
    s, _ = scenario.load(ROOT / "scenarios/seed004-ns2.yaml", [f"workload.duration={duration}", "topology.buffer=170"])
    r = scenario.resolve(s)
    subprocess.run(["cargo", "build", "--release", "-q", "--example", "runjson", "-p", "xferlab-sim"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory(prefix="xferlab-profile-") as tmp:
        config, out = Path(tmp) / "config.json", Path(tmp) / "callgrind.out"
        config.write_text(json.dumps(sim.sim_config(r)))
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(RUNJSON), str(config)],
            capture_output=True,
            text=True,
            check=True,
        )
        text = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)], capture_output=True, text=True).stdout
    total = int(re.search(r"([\d,]+) \([ \d.]+%\)\s+PROGRAM TOTALS", text).group(1).replace(",", ""))
    found = {}
    for label, fn in PARTS.items():
        line = re.compile(r"^\s*([\d,]+) \([ \d.]+%\)\s+\S*:" + re.escape(fn) + r"(?: |$)", re.M)
        found[label] = max((int(m.group(1).replace(",", "")) for m in line.finditer(text)), default=0)
    delivered = sum(int(m.group(1)) for m in re.finditer(r"bytes (\d+)", run.stdout)) / r["mss"]
    return found, delivered, total


def section(parts: dict[str, int], delivered: float, total: int, duration: str) -> str:
    lines = [
        HEADING,
        "",
        f"Command: `.venv/bin/python benches/sim_profile.py --duration {duration}`: callgrind's instruction counts "
        f"(the same on every run and machine) for seed 004's NS-2 case, {duration}, B = 170, the simulator alone "
        f"(`crates/sim/examples/runjson`), per delivered data packet ({delivered / 1e6:.2f} M delivered). Inclusive: "
        "a handler counts what it calls.",
        "",
        "| where | instructions / delivered packet | share |",
        "|---|---:|---:|",
        f"| the whole run | {total / delivered:,.0f} | 100 % |".replace(",", " "),
    ]
    for label, n in parts.items():
        lines.append(f"| {label} | {n / delivered:,.0f} |".replace(",", " ") + f" {100 * n / total:.0f} % |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", default="2s")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    parts, delivered, total = profile(a.duration)
    text = section(parts, delivered, total, a.duration)
    print(text)
    if not a.no_write:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
