"""One scenario on the three backends — the simulator, netns, and ssh on a testbed of real
hosts made of network namespaces with an sshd each (tests/sshbed.py) — side by side.

    sudo .venv/bin/python benches/ssh_three_backends.py [--seconds 10] [--write]

With ``--write`` the table goes between its ``<!-- table:ssh -->`` markers in
docs/validation/ssh.md, which VALIDATION.md §3.5 links to (``xferlab.fidelity.validation_md``);
the run folders stay in ``results/ssh-three/``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import sshbed  # noqa: E402 - the testbed lives with the tests
from xferlab.fidelity import validation_md  # noqa: E402

OUT = ROOT / "results" / "ssh-three"


def scenario(variant: str, seconds: float) -> dict:
    return {
        "name": f"three-{variant}",
        "description": "2 pairs, 100 Mbit/s access and bottleneck, 20 ms, 1 BDP of buffer",
        "topology": {"pairs": 2, "access_rate": "100Mbps", "bottleneck_rate": "100Mbps", "rtt": "20ms", "buffer": "1.0bdp"},
        "workload": {"streams": 1, "duration": f"{seconds:g}s"},
        "protocol": {"variant": variant},
        "measure": {"goodput_interval": "0.5s", "link_interval": "100ms"},
        "seed": 1,
    }


def run(path: Path, backend: str, out: Path, inventory: Path | None) -> tuple[dict, dict, float]:
    args = [sys.executable, "-m", "xferlab.cli", "run", str(path), "--backend", backend, "--out", str(out), "--force", "-q"]
    if inventory is not None:
        args += ["--inventory", str(inventory)]
    t = time.monotonic()
    subprocess.run(args, check=True)
    wall = time.monotonic() - t
    return json.loads((out / "metrics.json").read_text()), json.loads((out / "run.json").read_text()), wall


def row(variant: str, backend: str, m: dict, meta: dict, wall: float) -> str:
    stats = meta["provenance"].get("stats", {})
    extra = ""
    if backend == "ssh":
        e = stats["start_error_ms"]
        extra = f"start error ≤ {e['max_abs']:.1f} ms (clocks ± {e['clock_uncertainty_max']:.2f} ms)"
    return (
        f"| {variant} | {backend} | {m['aggregate_goodput_mbps']:.1f} | {m['jain_index']:.4f} | {m['mean_flow_cov']:.3f} "
        f"| {m['retransmissions']} | {m['bottleneck_drops']} | {wall:.0f} s | {extra} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--variants", default="reno,cubic")
    ap.add_argument("--write", action="store_true", help="write the table into docs/validation/ssh.md")
    a = ap.parse_args()
    why = sshbed.missing()
    if why:
        sys.exit(f"cannot build the testbed: {why}")
    OUT.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("XFERLAB_SSH_STATE", str(OUT / "controller"))
    lines = [
        "| variant | backend | aggregate goodput (Mbit/s) | Jain | mean flow CoV | retransmissions | drops | wall | |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    sshbed.remove_leftovers()
    with sshbed.Bed(pairs=2, access_bps=100e6, rtt_s=0.02) as bed:
        inv = bed.write_inventory(bed.dir / "hosts.yaml", bed.inventory(state_dir=str(bed.dir / "state")))
        for variant in a.variants.split(","):
            path = OUT / f"{variant}.yaml"
            path.write_text(yaml.safe_dump(scenario(variant, a.seconds), sort_keys=False))
            for backend in ("sim", "netns", "ssh"):
                out = OUT / f"{variant}-{backend}"
                m, meta, wall = run(path, backend, out, inv if backend == "ssh" else None)
                lines.append(row(variant, backend, m, meta, wall))
                print(lines[-1], flush=True)
    load = os.getloadavg()[0]
    table = "\n".join(lines)
    block = (
        f"{table}\n\nMachine: {platform.node()}, {os.cpu_count()} cores, Linux {platform.release()}, "
        f"load {load:.1f} at the end. Command: `sudo .venv/bin/python benches/ssh_three_backends.py "
        f"--seconds {a.seconds:g} --write`."
    )
    print(block)
    if a.write:
        validation_md.write("ssh", block)


if __name__ == "__main__":
    main()
