"""What the receive-window model (``host.rcvbuf_autotuning``), Linux's ACK rules on top of
it (``--option linux_acks``, ``host.linux_acks``), or those rules with the emulation's
measured application reads (``--option reads``: fidelity.py's READS "measured" against
"uniform"), changes in the fidelity matrix.

    .venv/bin/python benches/rwnd_effect.py --kernel-runs benches/fidelity-runs/*.json.gz [--seeds 1 2 3] [--only reno:200]
    .venv/bin/python benches/rwnd_effect.py --kernel-runs DIR1 DIR2 DIR3 --held reno:200:0.2bdp:1
    .venv/bin/python benches/rwnd_effect.py --option linux_acks --kernel-runs benches/fidelity-runs/2026-11-27e.json.gz --seeds 1

The simulator's side of each case (the emulated hosts, the flows started as in the last
kernel run given), with the model off and on, for each seed; nothing is stored. Printed:
- per seed and mode, the tally against the median of the kernel runs (archives of
  benches/fidelity.py --archive, or results directories: benches/fidelity.py --kernel-runs)
  and against their range (within_range);
- the run-to-run spread ((max − min) / median over the seeds, and over the kernel runs) of
  the slow-start exit, the completion time and goodput, in the cases with three kernel runs.
``--held``: for the given cases, the seconds each flow was held by the receive window in
its first 3 s: the kernel's from ``tcpi_rwnd_limited`` in each run's samples (results
directories only: an archive keeps no samples), the
simulator's where its data in flight reached the window offered (2 ms samples).
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
from xferlab.backends import sim as sim_backend
from xferlab.fidelity import figures, judge, simulator, store
from xferlab.fidelity.matrix import matrix, select

SPREAD_FIELDS = ("ss_ssthresh", "makespan_s", "goodput_mbps")
HELD_S = 3.0


#: The simulator's options this compares, off and on (the receiver's TCP configuration).
OPTIONS = ("rcvbuf_autotuning", "linux_acks", "reads")
BASE_CONFIG = sim_backend.sim_config


def _config(on: bool, option: str = OPTIONS[0]):
    def cfg(r: dict) -> dict:
        c = BASE_CONFIG(r)
        if option == "reads":  # emulation.emulated() applies it
            return c
        c["tcp"][option] = on
        if option == "linux_acks":
            c["tcp"]["rcvbuf_autotuning"] = True
        return c

    return cfg


def sim_run(args: tuple[str, bool, int, Path, str]) -> tuple[str, bool, int, dict]:
    """The simulator's duration and volume runs of one case, ``option`` on or off, its
    flows started as in the kernel run ``starts_from`` (an archive or a results directory)."""
    key, on, seed, starts_from, option = args
    case = next(c for c in matrix() if c.key == key)
    sim_backend.sim_config = _config(on, option)
    # The ACK options are judged on the simulator's default hosts; "reads" compares those
    # (off) with the emulation's measured reads under Linux's ACK rules (on).
    reads = "measured" if option == "reads" and on else "uniform"
    starts = store.starts_from_kernel(starts_from, case) or {}
    out = {
        kind: simulator.run_sim(case, kind, seed=seed, starts_s=starts.get(kind), reads=reads) for kind in ("duration", "volume")
    }
    return key, on, seed, {**out["duration"], "makespan_s": out["volume"]["makespan_s"]}


def report(cases: list, dirs: list[Path], seeds: list[int], res: dict) -> None:
    kernel = {c.key: [r for d in dirs if (r := store.kernel_run(d, c)) is not None] for c in cases}
    # With several runs, a case needs two valid ones; a single run is judged as it stands.
    needed = min(2, len(dirs))
    for seed in seeds:
        for mode in ("off", "on"):
            judged = [(res[(c.key, mode, seed)], kernel[c.key]) for c in cases if len(kernel[c.key]) >= needed]
            med = judge.tally([judge.verdict(sim, judge.median_run(runs)) for sim, runs in judged])
            rng = judge.tally([judge.within_range(sim, runs) for sim, runs in judged])
            print(f"seed {seed}, model {mode}: against the median {med}; against the range {rng}")
    three = [c for c in cases if len(kernel[c.key]) >= 3]
    for field in SPREAD_FIELDS:
        rows = {"kernel": [judge.spread([r.get(field) for r in kernel[c.key]]) for c in three]}
        for mode in ("off", "on"):
            rows[mode] = [judge.spread([res[(c.key, mode, s)].get(field) for s in seeds]) for c in three]
        for name, v in rows.items():
            v = [x for x in v if x is not None]
            over = sum(x > judge.SPREAD_BIG for x in v)
            print(f"{field} spread, {name}: {len(v)} cases, mean {np.mean(v):.3f}, over 10 % in {over}")


def sim_held(case, on: bool) -> float:
    """Seconds per flow the simulator's sender was held by the receive window in its first
    HELD_S seconds."""
    sim_backend.sim_config = _config(on)
    s = figures.sim_samples(simulator.sim_trace(case, "duration", duration_s=max(HELD_S, 5), reads="uniform"))
    s = s[s["t"] <= HELD_S].sort_values(["flow", "t"])
    held = 0.0
    for _, g in s.groupby("flow"):
        at_window = g["rwnd"].notna() & (g["in_flight"] >= g["rwnd"] - 1)
        held += float((g["t"].diff().shift(-1).fillna(0) * at_window).sum())
    return held / max(1, s["flow"].nunique())


def kernel_held(path: Path) -> float | None:
    if not path.exists():
        return None
    d = pd.read_parquet(path)
    d = d[d["t"] <= HELD_S]
    if d.empty or "rwnd_limited_us" not in d:
        return None
    return float(d.groupby("flow")["rwnd_limited_us"].max().mean() / 1e6)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel-runs", nargs="+", type=Path, required=True, metavar="RUN", help="archives or results directories")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--held", action="append", default=[], metavar="CASE")
    ap.add_argument("--option", choices=OPTIONS, default=OPTIONS[0], help="what to turn off and on")
    a = ap.parse_args()
    if a.held:
        for c in select(matrix(), a.held):
            k = [kernel_held(d / f"{c.stem}-netns-samples.parquet") for d in a.kernel_runs]
            shown = ", ".join("–" if x is None else f"{x:.2f}" for x in k)
            print(
                f"{c.key}: held by the window in the first {HELD_S:g} s: kernel {shown} s; "
                f"simulator, model on {sim_held(c, True):.2f} s, off {sim_held(c, False):.2f} s"
            )
        return 0
    cases = select(matrix(), a.only)
    jobs = [(c.key, on, s, a.kernel_runs[-1], a.option) for c in cases for on in (False, True) for s in a.seeds]
    res = {}
    with ProcessPoolExecutor(a.jobs) as ex:
        for key, on, seed, r in ex.map(sim_run, jobs):
            res[(key, "on" if on else "off", seed)] = r
    report(cases, a.kernel_runs, a.seeds, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
