"""``make demo``: the quick scenario and seed 002's Table I on the simulator, beside the
seed's published figures."""

from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from . import engine, scenario

console = Console()


def seed_results() -> dict:
    return yaml.safe_load(resources.files("xferlab").joinpath("data/seed_results.yaml").read_text())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0]) if argv else Path("scenarios")
    out = Path(argv[1]) if len(argv) > 1 else Path("results/demo")
    reports = []

    t0 = time.perf_counter()
    s, given = scenario.load(root / "quick.yaml")
    m = engine.run(s, given, out / "quick", force=True)
    reports.append(out / "quick" / "report.html")
    console.print(
        f"quick: aggregate goodput {m['aggregate_goodput_mbps']:.0f} of {m['ideal_goodput_mbps']:.0f} Mbit/s ideal, "
        f"Jain {m['jain_index']:.3f} ({time.perf_counter() - t0:.1f} s)"
    )

    paper = seed_results()["parallel_streams_grid5000"]
    table = Table(title="Seed 002 Table I: 11 pairs, 10 Gbit/s, 11.5 ms — paper (BIC, Grid5000) vs simulator")
    for col in ("streams", "G paper", "G sim", "ḡ paper", "ḡ sim", "J paper", "J sim", "wall s"):
        table.add_column(col, justify="right")
    variant = None
    for i, n in enumerate(paper["streams_per_node"]):
        t1 = time.perf_counter()
        s, given = scenario.load(root / "seed002-table1.yaml", [f"workload.streams={n}"])
        variant = s.protocol.variant
        folder = out / f"seed002-table1-streams-{n:02d}"
        m = engine.run(s, given, folder, force=True)
        reports.append(folder / "report.html")
        table.add_row(
            str(n),
            f"{paper['mean_total_goodput_mbps'][i]:.0f}",
            f"{m['aggregate_goodput_mbps']:.0f}",
            f"{paper['flow_mean_goodput_mbps'][i]:.1f}",
            f"{m['mean_flow_goodput_mbps']:.1f}",
            f"{paper['jain_index_per_stream'][i]:.4f}",
            f"{m['jain_index']:.4f}",
            f"{time.perf_counter() - t1:.1f}",
        )
    console.print(table)
    console.print(
        f"G: total goodput, ḡ: flow mean (Mbit/s), J: Jain index per stream; metrics over 10–60 s. "
        f"Simulator variant: {variant}, buffer 1 BDP; the paper ran BIC on a real testbed."
    )
    console.print("reports:")
    for r in reports:
        console.print(f"  {r.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
