"""``make demo``: the quick scenario, seed 002's Table I and a reduced Table II on the
simulator, beside the seed's published figures."""

from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path

import yaml
from rich.markup import escape
from rich.table import Table

from . import engine, runfolder, scenario
from .cli_common import console, err

#: Table II in the seed staggers pairs by 200 s (2 800 s per run); the demo by 2 s, with a
#: fixed switch-like buffer of 1 000 packets (as VALIDATION.md §2.3) so that losses happen.
TABLE2_REDUCED = ["workload.stagger=2s", "workload.duration=10s", "topology.buffer=1000"]
#: Seed 002's Table II names (seed-results.yaml keys) → Linux names.
TABLE2_VARIANTS = {"reno": "reno", "bic": "bic", "cubic": "cubic", "hstcp": "highspeed", "htcp": "htcp", "scalable": "scalable"}


def seed_results() -> dict:
    return yaml.safe_load(resources.files("xferlab").joinpath("data/seed_results.yaml").read_text())


def _run(path: Path, overrides: list[str], out: Path) -> dict:
    s, given = scenario.load(path, overrides)
    return engine.run(s, given, out, force=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0]) if argv else Path("scenarios")
    out = Path(argv[1]) if len(argv) > 1 else Path("results/demo")
    paper = seed_results()
    reports = []

    t0 = time.perf_counter()
    m = _run(root / "quick.yaml", [], out / "quick")
    reports.append(out / "quick" / "report.html")
    console.print(
        f"quick: aggregate goodput {m['aggregate_goodput_mbps']:.0f} of {m['ideal_goodput_mbps']:.0f} Mbit/s ideal, "
        f"Jain {m['jain_index']:.3f} ({time.perf_counter() - t0:.1f} s)"
    )

    t1 = paper["parallel_streams_grid5000"]
    table = Table(title="Seed 002 Table I: 11 pairs, 10 Gbit/s, 11.5 ms, BIC — paper (Grid5000) vs simulator")
    for col in ("streams", "G paper", "G sim", "ḡ paper", "ḡ sim", "J paper", "J sim", "wall s"):
        table.add_column(col, justify="right")
    for i, n in enumerate(t1["streams_per_node"]):
        t = time.perf_counter()
        folder = out / f"seed002-table1-streams-{n:02d}"
        m = _run(root / "seed002-table1.yaml", [f"workload.streams={n}"], folder)
        reports.append(folder / "report.html")
        table.add_row(
            str(n),
            f"{t1['mean_total_goodput_mbps'][i]:.0f}",
            f"{m['aggregate_goodput_mbps']:.0f}",
            f"{t1['flow_mean_goodput_mbps'][i]:.1f}",
            f"{m['mean_flow_goodput_mbps']:.1f}",
            f"{t1['jain_index_per_stream'][i]:.4f}",
            f"{m['jain_index']:.4f}",
            f"{time.perf_counter() - t:.1f}",
        )
    console.print(table)
    console.print("G: total goodput, ḡ: flow mean (Mbit/s), J: Jain index per stream; metrics over 10–60 s, buffer 1 BDP.")

    t2 = paper["variants_vs_rtt_gtrcnet10"]
    for j, rtt in enumerate(t2["rtt_ms"]):
        table = Table(title=f"Seed 002 Table II at {rtt:g} ms, reduced (pairs 2 s apart, not 200 s; B = 1000 packets)")
        table.add_column("variant")
        for col in ("ḡ paper", "ḡ sim", "J paper", "J sim", "CoV paper", "CoV sim"):
            table.add_column(col, justify="right")
        for key, variant in TABLE2_VARIANTS.items():
            folder = out / f"seed002-table2-{variant}-{rtt:g}ms"
            m = _run(
                root / "seed002-table2.yaml", [*TABLE2_REDUCED, f"protocol.variant={variant}", f"topology.rtt={rtt}ms"], folder
            )
            reports.append(folder / "report.html")
            table.add_row(
                variant,
                f"{t2['flow_mean_goodput_mbps'][key][j]:.0f}",
                f"{m['mean_flow_goodput_mbps']:.0f}",
                f"{t2['mean_fairness_jain'][key][j]:.3f}",
                f"{m['jain_index']:.3f}",
                f"{t2['normalised_std_deviation'][key][j]:.3f}",
                f"{m['mean_flow_cov']:.3f}",
            )
        console.print(table)
    console.print("Metrics while all 12 pairs are active. VALIDATION.md discusses where and why the simulator differs.")
    console.print("reports:")
    for r in reports:
        console.print(f"  {r.resolve()}")
    return 0


def run_demo() -> int:
    """``make demo``: a folder it may not replace, a bad scenario or a full disk is one line."""
    try:
        return main()
    except (runfolder.RunFolderError, scenario.ScenarioError) as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return getattr(e, "exit_status", 2)


if __name__ == "__main__":
    sys.exit(run_demo())
