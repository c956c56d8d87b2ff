"""Whether parallel flows' slow-start rounds reach the bottleneck in separate trains, on the
kernel and on the simulator (VALIDATION.md §6, "Four flows at 200 ms"; traced in
docs/journal/validation-history.md, "Four flows at 200 ms lose in different overflows on the kernel").

    .venv/bin/python benches/seg_index.py highspeed:200:0.2bdp:4 [--kernel-run DIR] [--seeds 1 2 3]
    .venv/bin/python benches/seg_index.py cubic:200:0.2bdp:4 --without tx_batch_ns --without app_wakeup_ns

For a multi-flow case of the fidelity matrix: the segregation index of the round before the
first loss, from each flow's cwnd growth (its ACKs coming back) in 5 ms bins: the largest
flow's share of the growth, summed over the bins. 1 when each flow's ACKs come alone, 1/n
when the n flows are fully interleaved. Then each flow's slow-start exit (s). The kernel's
from the samples stored in DIR (default results/fidelity), the simulator's with the
kernel's flow starts and the emulated hosts (simulator.sim_trace), for each seed;
``--without FIELD`` sets a host-noise field (NoiseConfig) to 0 on the simulator's side.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from xferlab.backends.base import BackendError
from xferlab.fidelity import figures, simulator
from xferlab.fidelity.matrix import matrix
from xferlab.fidelity.settings import OPTIONS

BIN_S = 0.005


def segregation(samples: pd.DataFrame, rtt_s: float) -> float:
    """The index over the RTT (and 50 ms) before the first flow's slow-start exit."""
    first = min(e[1] for e in figures.flow_exits(samples) if e is not None)
    bins = np.arange(first - rtt_s - 0.05, first - 0.02, BIN_S)
    growth = np.array(
        [
            np.clip(np.diff(np.interp(bins, g["t"].to_numpy(), g["cwnd"].to_numpy(float))), 0, None)
            for _, g in samples.sort_values("t").groupby("flow")
        ]
    )
    total = growth.sum()
    return float(growth.max(axis=0).sum() / total) if total else float("nan")


def show(label: str, samples: pd.DataFrame, rtt_s: float) -> None:
    exits = figures.flow_exits(samples.sort_values("t"))
    shown = " ".join("–" if e is None else f"{e[1]:.2f}" for e in exits)
    print(f"{label:24s} index {segregation(samples, rtt_s):.2f}  exits (s) {shown}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", help="a multi-flow case key, e.g. highspeed:200:0.2bdp:4")
    ap.add_argument("--kernel-run", type=Path, default=OPTIONS.results, metavar="DIR")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--without", action="append", default=[], metavar="FIELD", help="a NoiseConfig field set to 0")
    a = ap.parse_args()
    matches = [c for c in matrix() if c.key == a.case and c.flows > 1]
    if not matches:
        ap.error(f"{a.case!r} is not a multi-flow case of the matrix (e.g. highspeed:200:0.2bdp:4)")
    case, stem = matches[0], a.case.replace(":", "_")
    try:
        kernel = json.loads((a.kernel_run / f"{stem}-netns.json").read_text())
        samples = pd.read_parquet(a.kernel_run / f"{stem}-netns-samples.parquet")
        starts = kernel["duration"]["starts_s"]
    except (OSError, KeyError) as e:
        ap.error(f"no kernel run of {a.case} with its flows' starts in {a.kernel_run}: {e}")
    rtt_s = case.rtt_ms / 1000
    show("kernel", samples, rtt_s)
    label = "simulator" + "".join(f", no {f}" for f in a.without)
    for seed in a.seeds:
        try:
            trace = simulator.sim_trace(
                case,
                "duration",
                seed=seed,
                starts_ns=[round(x * 1e9) for x in starts],
                noise_fields={field: 0 for field in a.without},
            )
        except BackendError as e:  # a --without that is not a host-noise field
            ap.error(str(e))
        show(f"{label}, seed {seed}", figures.sim_samples(trace), rtt_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
