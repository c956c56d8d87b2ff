"""Fidelity of the simulator against real Linux TCP: each scenario on the simulator and on the
netns backend (this host's kernel), compared metric by metric.

    .venv/bin/python benches/fidelity.py                       # the full matrix (root; ~2 h), then the table
    .venv/bin/python benches/fidelity.py --only reno:50:1.0bdp:1 --only cubic:10     # some cases
    .venv/bin/python benches/fidelity.py --render              # rewrite the table from stored results
    .venv/bin/python benches/fidelity.py --backend sim --force sim   # the simulator's side again
    .venv/bin/python benches/fidelity.py --dispersion          # run-to-run spread, 10 repetitions each
    .venv/bin/python benches/fidelity.py --repeat-of RUN       # the stored kernel runs judged against RUN's
    .venv/bin/python benches/fidelity.py --kernel-runs RUN...  # the simulator against the median of several matrices' kernel runs
    .venv/bin/python benches/fidelity.py --kernel-runs RUN... --seeds 1 2 3 4 5   # ...and its median over seeds, spreads
    .venv/bin/python benches/fidelity.py --kernel-runs RUN... --controls   # ...and how the tests judge worse simulators
    .venv/bin/python benches/fidelity.py --archive NAME        # keep the stored kernel run: benches/fidelity-runs/NAME.json.gz

The matrix: 7 variants × RTT 10, 50, 200 ms × buffer 0.2 and 1 BDP × 1 and 4 flows, hosts
at 1 Gbit/s into a 300 Mbit/s bottleneck (what this host emulates without dilation).
Each case is a 30 s duration run (slow start, losses, goodput, fairness) and a volume run
(300 MB split over the pairs: completion time), on both backends. The senders' cwnd on
netns comes from benches/fidelity_tcpinfo.py (TCP_INFO every 2 ms until each flow's first
retransmission, every 0.1 s after, so as not to slow the kernel's flows; iperf3 reports every
0.1 s at best), the simulator's from its tcp table at the same step. The kernel's flows do
not start within the scenario's 1 ms jitter (each is a process launched on a busy host, a
few round trips of setup before its data): the sampler measures when each flow's data
starts, and the simulator's runs of a multi-flow case start their flows so. Results are stored per
case and backend in results/fidelity/ (a rerun skips stored ones unless --force sim|netns,
but remakes a simulator's side stored by another build of the simulator;
--backend sim reruns only the simulator's side) and the table goes
into docs/validation/fidelity.md between `<!-- table:fidelity -->` markers (VALIDATION.md §3.2
links to it; the other tables of this script likewise, each in docs/validation/NAME.md).

A kernel run of the matrix is an hour of a quiet machine and cannot be made again the same:
`--archive NAME` keeps what every judgement reads of it (each case's figures and flow starts,
not its samples) in benches/fidelity-runs/, in the repository. A RUN given to --kernel-runs or
--repeat-of is such an archive or a results directory.

The machinery is the package's (python/xferlab/fidelity/, one module an idea); this is its
command line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from xferlab.fidelity import against, dispersion, runs, store, validation_md
from xferlab.fidelity.matrix import Case, matrix, select
from xferlab.fidelity.settings import ARCHIVE, OPTIONS, READS_MODELS, ROOT
from xferlab.fidelity.table import read_table, row, table


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="a case key or prefix (repeatable)")
    ap.add_argument("--force", action="append", choices=tuple(runs.RUNNERS), help="rerun a backend's stored cases")
    ap.add_argument("--backend", choices=(*runs.RUNNERS, "all"), default="all", help="which backend to run")
    ap.add_argument("--render", action="store_true", help="only rewrite the table from stored results")
    ap.add_argument("--no-write", action="store_true", help="print, do not write the table")
    ap.add_argument("--dispersion", action="append", default=[], help="a case key: repetitions of its volume run")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--max-load", type=float, default=3.0, help="wait for a load average below this")
    ap.add_argument(
        "--no-trace-waits", action="store_true", help="kernel runs without their receivers' waits traced (Options.trace_waits)"
    )
    ap.add_argument(
        "--no-trace-acks", action="store_true", help="kernel runs without their flows' segments traced (Options.trace_acks)"
    )
    ap.add_argument(
        "--reads",
        choices=READS_MODELS,
        default=OPTIONS.reads,
        help="the emulated simulator's receiving applications (Options.reads)",
    )
    ap.add_argument(
        "--no-tso-defer", action="store_true", help="the simulator's senders without TSO deferral (Options.tso_defer)"
    )
    ap.add_argument(
        "--repeat-of", type=Path, metavar="RUN", help="judge the stored kernel runs against RUN (an archive or a results dir)"
    )
    ap.add_argument(
        "--kernel-runs",
        type=Path,
        nargs="+",
        metavar="RUN",
        help="the simulator against the median of these matrices' kernel runs (archives or results directories)",
    )
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        metavar="N",
        help="with --kernel-runs: also the median of the simulator's runs with these seeds",
    )
    ap.add_argument(
        "--controls", action="store_true", help="with --kernel-runs: also judge simulators known to differ (against.CONTROLS)"
    )
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for --seeds' simulator runs")
    ap.add_argument("--from-table", metavar="REV", help="with --archive: the kernel run the fidelity table showed at git REV")
    ap.add_argument("--archive", metavar="NAME", help=f"keep the stored kernel run in {ARCHIVE.relative_to(ROOT)}/NAME.json.gz")
    return ap


def configure(args: argparse.Namespace) -> None:
    """The command line's choices, in force for every module of the package."""
    OPTIONS.max_load = args.max_load
    OPTIONS.reads = args.reads
    OPTIONS.tso_defer = not args.no_tso_defer
    OPTIONS.trace_waits = not args.no_trace_waits
    OPTIONS.trace_acks = not args.no_trace_acks
    OPTIONS.stall_runs = tuple(args.kernel_runs) if args.kernel_runs else None


def archive(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """--archive NAME: the stored kernel run kept, or (--from-table REV) the one the fidelity
    table showed at git REV, read back from it (from docs/validation/fidelity.md, or from
    VALIDATION.md at a revision that held the table there)."""
    if not args.from_table:
        print(f"kept in {store.archive(args.archive).relative_to(ROOT)}")
        return 0
    for path in validation_md.documents("fidelity"):
        where = f"{args.from_table}:{path.relative_to(ROOT)}"
        shown = subprocess.run(["git", "-C", str(ROOT), "show", where], capture_output=True, text=True)
        if shown.returncode == 0 and "<!-- table:fidelity -->" in shown.stdout:
            break
    else:
        ap.error(f"--from-table {args.from_table}: no fidelity table there ({shown.stderr.strip() or where})")
    note = f"read back from the fidelity table of {where} (figures as printed)"
    print(f"kept in {store.archive(args.archive, cases=read_table(shown.stdout), note=note).relative_to(ROOT)}")
    return 0


def shown(args: argparse.Namespace, name: str, text: str) -> int:
    """``text`` printed, and written as table ``name`` (validation_md.write) unless --no-write or --only."""
    print(text)
    if not args.no_write and not args.only:
        validation_md.write(name, text)
    return 0


def spreads(args: argparse.Namespace) -> int:
    """--dispersion KEY...: each case's volume run repeated, printed."""
    for key in args.dispersion:
        print(dispersion.dispersion(Case.from_key(key), args.reps), flush=True)
        if not args.no_write:
            print("(the stored table comes from `benches/validate.py netns_dispersion`)")
    return 0


def the_matrix(args: argparse.Namespace) -> int:
    """The selected cases run (or, --render, read from storage), a line each, then the table."""
    cases = select(matrix(), args.only)
    force = frozenset(args.force or [])
    chosen = tuple(runs.RUNNERS) if args.backend == "all" else (args.backend,)
    results = []
    for k, case in enumerate(cases, 1):
        t0 = time.perf_counter()
        res = runs.run_case(case, force, () if args.render else chosen)
        if res is None:
            continue
        results.append(res)
        line = f"| {res['case']} | kernel: {res['failed']}" if "failed" in res else row(res)[0]
        print(f"[{k}/{len(cases)}] {time.perf_counter() - t0:.0f} s {line}", flush=True)
    return shown(args, "fidelity", table(results))


def main() -> int:
    ap = parser()
    args = ap.parse_args()
    configure(args)
    if args.archive:
        return archive(ap, args)
    if args.kernel_runs:
        cases = select(matrix(), args.only)
        return shown(args, "fidelity_runs", against.against_runs(args.kernel_runs, cases, args.seeds, args.jobs, args.controls))
    if args.repeat_of:
        return shown(args, "fidelity_repeat", against.repeatability(args.repeat_of, select(matrix(), args.only)))
    if args.dispersion:
        return spreads(args)
    return the_matrix(args)


if __name__ == "__main__":
    sys.exit(main())
