"""The fidelity matrix event by event: congestion events, the window at each, the backoff.

    .venv/bin/python benches/fidelity_events.py [KEY-PATTERN ...]

For each case of benches/fidelity.py whose kernel samples are stored
(``results/fidelity/<case>-netns-samples.parquet``, TCP_INFO every 2 ms), runs the
simulator's side of the duration run again with the same sampling and prints, simulator /
kernel: how many congestion events the flows entered (Recovery or Loss), the median cwnd
just before one (all of them, then without each flow's first, its exit from slow start),
and the median backoff (the ssthresh set over that cwnd). Nothing runs on
the kernel; nothing is written.

The simulator's trace writes Recovery as 1 and Loss as 2, where the Trace contract (and
Linux) say 3 and 4 (a defect noted in VALIDATION.md §6b); the events are counted from
each side's own numbering.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "benches"))

import fidelity  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from xferlab import scenario  # noqa: E402
from xferlab.backends import sim as sim_backend  # noqa: E402
from xferlab.trace import Provenance, Trace  # noqa: E402

#: The first congestion state that is an event: the simulator's Recovery, Linux's Recovery.
SIM_RECOVERY, LINUX_RECOVERY = 1, 3


def events(samples: pd.DataFrame, recovery: int) -> tuple[int, float, float, float]:
    """(events, median cwnd before one, the same without each flow's first event — its exit
    from slow start —, median ssthresh / that cwnd) over every flow."""
    count, windows, later, betas = 0, [], [], []
    for _, g in samples.groupby("flow"):
        state, cwnd = g.ca_state.to_numpy(), g.cwnd.to_numpy(float)
        ssthresh = g.ssthresh.to_numpy(float)
        i = np.nonzero((state[1:] >= recovery) & (state[:-1] < recovery))[0] + 1
        i = i[i < len(g) - 1]
        count += len(i)
        windows.extend(cwnd[i - 1])
        later.extend(cwnd[i[1:] - 1])
        b = ssthresh[i + 1] / np.maximum(cwnd[i - 1], 1)  # ssthresh is set as the event starts
        betas.extend(b[(b > 0) & (b < 1.01)])
    med = lambda x: float(np.median(x)) if len(x) else float("nan")  # noqa: E731
    return count, med(windows), med(later), med(betas)


def sim_samples(case: fidelity.Case) -> pd.DataFrame:
    """The simulator's duration run of ``case`` as fidelity.run_sim builds it, every flow's TCP samples."""
    data = case.scenario("duration", fidelity.DURATION_S)
    data["measure"]["tcp_interval"] = f"{fidelity.SAMPLE_S}s"
    s = scenario.from_dict(data, data["name"])
    r = scenario.resolve(s)
    cfg = fidelity.emulated(sim_backend.sim_config(r))
    out = sim_backend._module().run(json.dumps(cfg), None, 1.0)
    trace = Trace.build(dict(out["tables"]), r, Provenance(producer="sim", stats=dict(out["stats"])), end_s=out["stats"]["end_s"])
    return trace.tcp.to_pandas().rename(columns={"flow_id": "flow"}).fillna({"ca_state": 0, "ssthresh": -1})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("patterns", nargs="*", help="case keys or prefixes (default: every stored case)")
    args = ap.parse_args()
    print("| case | events, sim / kernel | cwnd at an event | the same, after slow start | backoff |")
    print("|---|---:|---:|---:|---:|")
    for case in fidelity.select(fidelity.matrix(), args.patterns):
        stored = fidelity.RESULTS / f"{case.key.replace(':', '_')}-netns-samples.parquet"
        if not stored.exists():
            continue
        kernel = pd.read_parquet(stored)
        a, b = events(sim_samples(case), SIM_RECOVERY), events(kernel, LINUX_RECOVERY)
        void = " (kernel run void)" if fidelity.broken_window(kernel) is not None else ""
        cells = [f"{a[0]} / {b[0]}", f"{a[1]:.0f} / {b[1]:.0f}", f"{a[2]:.0f} / {b[2]:.0f}", f"{a[3]:.3f} / {b[3]:.3f}"]
        print(f"| {case.key}{void} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
