"""The simulator's cost against ns-3's, per delivered data packet, side by side in one run:
the same resolved dumbbell on both (benches/ns3/dumbbell.cc against the `ns3` wheel, built
by ``benches/ns3/build.sh``), each program's CPU seconds, the data packets it delivered (the
flows' delivered bytes / MSS) and the ratio. Prints the table and rewrites the "Against
ns-3, per delivered packet" section of BENCHMARKS.md.

    benches/ns3/build.sh && .venv/bin/python benches/ns3_speed.py [--duration 20s] [--no-write]

The case is issue 49's: 2 × 1 Gbit/s into 1 Gbit/s, 10 ms, B = 170 packets, Reno.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import machine, write_section
from xferlab import scenario
from xferlab.backends import sim

ROOT = Path(__file__).resolve().parent.parent

BUILD = ROOT / "benches" / "ns3" / "build.sh"
HEADING = "## Against ns-3, per delivered packet"


def case(duration: str, noise: bool) -> tuple[scenario.Scenario, dict]:
    data = {
        "name": "ns3-speed",
        "topology": {"pairs": 2, "access_rate": "1Gbps", "bottleneck_rate": "1Gbps", "rtt": "10ms", "buffer": 170},
        "workload": {"streams": 1, "duration": duration},
        "protocol": {"variant": "reno"},
        "host": {"noise": noise},
        "seed": 1,
    }
    s = scenario.from_dict(data, "ns3-speed")
    return s, scenario.resolve(s)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_ns3(resolved: dict) -> tuple[float, float]:
    """ns-3's CPU seconds and delivered data packets."""
    with tempfile.TemporaryDirectory(prefix="xferlab-ns3-") as tmp:
        config, out = Path(tmp) / "resolved.json", Path(tmp) / "ns3.json"
        config.write_text(json.dumps(resolved))
        before = children_cpu()
        subprocess.run([str(BUILD), "run", f"--config={config}", f"--out={out}"], check=True, capture_output=True)
        cpu = children_cpu() - before
        res = json.loads(out.read_text())
    return cpu, sum(f["bytes"] for f in res["flows"]) / resolved["mss"]


def run_sim(s: scenario.Scenario, resolved: dict) -> tuple[float, float]:
    """The simulator's CPU seconds (this process) and delivered data packets."""
    t = time.process_time()
    trace = sim.run(s, resolved)
    cpu = time.process_time() - t
    return cpu, sum(trace.flows.column("bytes").to_pylist()) / resolved["mss"]


def section(rows: list[tuple[str, float, float]], duration: str) -> str:
    ns3_cpu, ns3_pkts = next((c, p) for name, c, p in rows if name == "ns-3")
    per_ns3 = ns3_cpu / ns3_pkts
    lines = [
        HEADING,
        "",
        f"Command: `benches/ns3/build.sh && .venv/bin/python benches/ns3_speed.py --duration {duration}`. "
        f"2 × 1 Gbit/s into 1 Gbit/s, 10 ms, B = 170 packets, Reno, {duration}, one run each, one after the other. "
        f"Machine: {machine()}.",
        "",
        "| program | CPU s | delivered data packets | ns / delivered packet | ns-3's cost / this one's |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, cpu, pkts in rows:
        per = cpu / pkts
        ns, ratio = f"{1e9 * per:,.0f}".replace(",", " "), f"{per_ns3 / per:,.0f}".replace(",", " ")
        lines.append(f"| {name} | {cpu:.2f} | {pkts / 1e6:.2f} M | {ns} | {ratio}× |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", default="20s")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    if not BUILD.exists():
        ap.error(f"{BUILD} is missing")
    run_sim(*case("0.2s", noise=True))  # the first run in a process pays one-time costs: not measured
    rows = []
    s, r = case(a.duration, noise=True)
    rows.append(("ns-3", *run_ns3(r)))
    rows.append(("xferlab simulator (host noise on, the default)", *run_sim(s, r)))
    s, r = case(a.duration, noise=False)
    rows.append(("xferlab simulator, `host.noise: false`", *run_sim(s, r)))
    text = section(rows, a.duration)
    print(text)
    if not a.no_write:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
