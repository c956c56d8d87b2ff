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
#: The release build (what users run) and the profiling one (Cargo.toml's `profiling`: thin
#: LTO, so that the handlers below stay functions of their own; fat LTO inlines them).
BUILDS = {
    "release": ROOT / "target" / "release" / "examples" / "runjson",
    "profiling": ROOT / "target" / "profiling" / "examples" / "runjson",
}
#: Handlers shown (inclusive instructions): label → callgrind function name.
PARTS = {
    "a data packet reaches its receiver (`Simulation::receive`)": "xferlab_sim::sim::Simulation::receive",
    "… of which the receiver's TCP (`Receiver::on_segment`)": "xferlab_sim::tcp::receiver::Receiver::on_segment",
    "a sender sends what it may (`Simulation::transmit`)": "xferlab_sim::sim::Simulation::transmit",
    "… of which `Sender::poll_transmit`": "xferlab_sim::tcp::sender::Sender::poll_transmit",
    "an ACK reaches its sender (`Sender::on_ack`)": "xferlab_sim::tcp::sender::Sender::on_ack",
    "the bottleneck's queue (`Link::offer`)": "xferlab_sim::link::Link::offer",
}


def callgrind(build: str, config: Path, out: Path) -> tuple[str, str]:
    """The inclusive annotation of one run of ``build``, and the run's stdout."""
    cargo = ["cargo", "build", "--profile", build, "-q", "--example", "runjson", "-p", "xferlab-sim"]
    subprocess.run(cargo, cwd=ROOT, check=True)
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(BUILDS[build]), str(config)],
        capture_output=True,
        text=True,
        check=True,
    )
    return subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)], capture_output=True, text=True).stdout, run.stdout


def _total(text: str) -> int:
    return int(re.search(r"([\d,]+) \([ \d.]+%\)\s+PROGRAM TOTALS", text).group(1).replace(",", ""))


def profile(duration: str) -> tuple[dict[str, int], float, int, int]:
    """The handlers' inclusive counts and the total on the profiling build, the delivered
    packets, and the release build's total."""
    s, _ = scenario.load(ROOT / "scenarios/seed004-ns2.yaml", [f"workload.duration={duration}", "topology.buffer=170"])
    r = scenario.resolve(s)
    with tempfile.TemporaryDirectory(prefix="xferlab-profile-") as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(sim.sim_config(r)))
        text, stdout = callgrind("profiling", config, Path(tmp) / "profiling.out")
        release, _ = callgrind("release", config, Path(tmp) / "release.out")
    found = {}
    for label, fn in PARTS.items():
        line = re.compile(r"^\s*([\d,]+) \([ \d.]+%\)\s+\S*:" + re.escape(fn) + r"(?: |$)", re.M)
        found[label] = max((int(m.group(1).replace(",", "")) for m in line.finditer(text)), default=0)
    delivered = sum(int(m.group(1)) for m in re.finditer(r"bytes (\d+)", stdout)) / r["mss"]
    return found, delivered, _total(text), _total(release)


def _n(x: float) -> str:
    """A count with spaces between thousands, as the tables have them."""
    return f"{x:,.0f}".replace(",", " ")


def section(parts: dict[str, int], delivered: float, total: int, release: int, duration: str) -> str:
    lines = [
        HEADING,
        "",
        f"Command: `.venv/bin/python benches/sim_profile.py --duration {duration}`: callgrind's instruction counts "
        f"(the same on every run and machine) for seed 004's NS-2 case, {duration}, B = 170, the simulator alone "
        f"(`crates/sim/examples/runjson`), per delivered data packet ({delivered / 1e6:.2f} M delivered). Inclusive: "
        "a handler counts what it calls. The release build (fat LTO) inlines the handlers into the event loop, so they "
        "are counted on the `profiling` build (Cargo.toml: thin LTO, 4 units), which runs "
        f"{_n(total / delivered)} instructions a packet where the release build runs **{_n(release / delivered)}**.",
        "",
        "| where | instructions / delivered packet | share |",
        "|---|---:|---:|",
        f"| the whole run (profiling build) | {total / delivered:,.0f} | 100 % |".replace(",", " "),
    ]
    for label, n in parts.items():
        lines.append(f"| {label} | {n / delivered:,.0f} |".replace(",", " ") + f" {100 * n / total:.0f} % |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", default="2s")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    parts, delivered, total, release = profile(a.duration)
    text = section(parts, delivered, total, release, a.duration)
    print(text)
    if not a.no_write:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
