"""How long each emulated receiver takes to acknowledge, and how the flows interleave.

    sudo .venv/bin/python benches/ack_delays.py CASE [--seconds 10]
    .venv/bin/python benches/ack_delays.py CASE --sim [--seeds 2]
    .venv/bin/python benches/ack_delays.py [PREFIX] --runs RUN... [--seeds 2]

Runs one duration run of a benches/fidelity.py case on the netns backend with ftrace's
``tcp/tcp_probe`` event on (tcp_probes.py: every segment a socket receives, in the kernel: the senders'
ACKs with ``snd_una`` and ``snd_nxt``, the receivers' data with its length; cheap enough that
the run keeps its goodput), then prints, per flow after its first ``--skip`` seconds:

* the ACK delay: from the first and from the last data segment an ACK acknowledges
  reaching the receiver to the ACK reaching the sender (the emulation's ACK path has no
  fixed delay: its delay line holds the data), for in-order ACKs — sent while the receiver
  held no data past a hole (tcp_probes.acked: a lossy flow's ACKs in recovery are left out,
  and their share is printed) — as quantiles; and the segments an ACK acknowledges. From
  the first, the delay holds the wait for the segment that triggers the ACK (Linux
  acknowledges every second; a lone one waits for the next, up to a round trip, or for the
  delayed-ACK timer): its top percent is that wait, not the receiver's reads. From the
  last, it is the ACK's own path (tcp_probes.ack_delays);
* how the flows interleave: runs of consecutive segments of one flow in the order the
  receivers processed them (the order the bottleneck served them), weighted by segment
  (the length of the train a segment travels in). Flows that share the bottleneck in
  trains, a window each, give hundreds.

``--sim``: the interleaving of the simulator's runs of the case (fidelity.py's model of the
emulation, each ``--reads`` model), from the segments' departures from its bottleneck. No
root. ``--runs``: the trains and ACK delays benches/fidelity.py's kernel runs kept (their
``acks``, tcp_probes.record), beside the simulator's trains, per case. What it measured:
docs/journal/validation-history.md, "The flows' ACK clocks" (in short: VALIDATION.md §6,
"Trains").
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from xferlab.backends import sim as sim_backend
from xferlab.fidelity import simulator, store
from xferlab.fidelity.kernel import run_scenario
from xferlab.fidelity.matrix import DURATION_S, Case, matrix, select
from xferlab.fidelity.settings import OPTIONS, READS_MODELS
from xferlab.netns import sched_waits, tcp_probes

ROOT = Path(__file__).resolve().parent.parent

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)


def sim_trains(case: Case, seconds: float, skip_s: float, seed: int, reads: str) -> float:
    """train_length of the segments leaving the simulator's bottleneck (its capture)."""
    cfg, _ = simulator.sim_setup(case, "duration", duration_s=seconds, seed=seed, reads=reads)
    c = {k: np.asarray(v) for k, v in sim_backend.bottleneck_capture(cfg).items()}
    keep = c["departs_ns"] >= skip_s * 1e9  # drops are -1
    order = c["flow"][keep][np.argsort(c["departs_ns"][keep])]
    return tcp_probes.train_length(order.tolist(), [1.0] * len(order))


def kernel_report(case: Case, seconds: float, skip_s: float) -> None:
    with tcp_probes.traced() as got:
        m, _, _ = run_scenario(case.scenario("duration", seconds), "netns")
    if "error" in got:
        sys.exit(f"tcp_probe could not be traced: {got['error']}")
    probes = got["trace"]
    lost = f" ({got['lost']} lost: the ring buffer was full)" if got["lost"] else ""
    print(f"{case.key}: {m['aggregate_goodput_mbps']:.1f} Mbit/s, {len(probes)} segments traced{lost}\n")
    cells = " | ".join(f"{q:.0%}" for q in QUANTILES)
    print(
        f"| flow | ACKs | in recovery | segments an ACK (median) | from | ACK delay (ms): {cells} |\n"
        "|---|---:|---:|---:|---|" + "---:|" * len(QUANTILES)
    )
    for (sender, receiver), d in tcp_probes.ack_delays(probes, skip_s).items():
        if not len(d.first):
            print(f"| {sender} → {receiver} | 0 | | | | " + " | ".join([""] * len(QUANTILES)) + " |")
            continue
        recovery = d.out_of_order / d.advancing
        head = f"{sender} → {receiver} | {len(d.first)} | {recovery:.0%} | {np.median(d.segments):.0f}"
        for name, x in (("first", d.first), ("last", d.last)):
            q = " | ".join(f"{v * 1e3:.3f}" for v in np.quantile(x, QUANTILES))
            print(f"| {head if name == 'first' else ' | | |'} | {name} | {q} |")
    print(f"\nTrains at the receivers (segments, weighted): {tcp_probes.kernel_trains(probes, skip_s):.1f}")


def kept_records(runs: list[Path], case: Case) -> list[dict]:
    """The ACK clocks (tcp_probes.record) the duration runs of ``case`` in ``runs`` (archives
    or results directories of benches/fidelity.py) kept, those clean, not void and traced
    whole (no events lost). Records without ``in_recovery`` are left out: made before
    2026-12-02, their trains were the senders' ACKs and their delays held ACKs sent in loss
    recovery (tcp_probes.acked), timed from data that had reached the receiver past a hole."""
    out = []
    for run in runs:
        got = store.kernel_side(run, case, samples=False)
        side = None if got is None or "failed" in got else got.get("duration")
        acks = side and side.get("acks")
        measured = acks and "in_recovery" in acks and not acks.get("lost")
        if measured and not store.unclean(side) and side.get("broken") is None:
            out.append(side["acks"])
    return out


def delay_cells(records: list[dict], field: str) -> str:
    """The median, 90th and 99th percentile (µs) of ``field``'s histograms pooled."""
    counts = np.sum([r[field] for r in records], axis=0)
    return " / ".join(f"{x * 1e6:.0f}" for x in sched_waits.hist_quantiles(counts, np.array([0.5, 0.9, 0.99])))


def sim_trains_job(job: tuple[Case, int]) -> float:
    case, seed = job
    return sim_trains(case, DURATION_S, tcp_probes.SKIP_S, seed, OPTIONS.reads)


def runs_report(kept: dict[str, list[dict]], cases: list[Case], seeds: int, jobs: int) -> str:
    """Per case with ACK clocks ``kept`` (kept_records, by case key): the kernel's trains
    (each run), the simulator's (seeds 1 to ``seeds``, the table's hosts), and the
    kernel's ACK delays."""
    chosen = [c for c in cases if c.key in kept]
    with ProcessPoolExecutor(max(1, jobs)) as pool:
        sims = list(pool.map(sim_trains_job, [(c, k) for c in chosen for k in range(1, seeds + 1)]))
    rows = [
        "| case | trains, kernel (runs) | trains, simulator (seeds) | segments an ACK | ACKs in recovery | "
        "ACK delay from the last segment (µs: median / 90 % / 99 %) | from the first |",
        "|---|---|---|---:|---:|---|---|",
    ]
    for k, case in enumerate(chosen):
        recs = kept[case.key]
        kernel = ", ".join(f"{r['trains']:.0f}" for r in recs)
        sim = ", ".join(f"{x:.0f}" for x in sims[k * seeds : (k + 1) * seeds])
        segs = np.mean([r["segments_per_ack"] for r in recs])
        recovery = np.mean([r["in_recovery"] for r in recs])
        delays = f"{delay_cells(recs, 'from_last')} | {delay_cells(recs, 'from_first')}"
        rows.append(f"| {case.key} | {kernel} | {sim} | {segs:.2f} | {recovery:.0%} | {delays} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", nargs="?", help="a fidelity case key, e.g. cubic:50:0.2bdp:4 (with --runs, a prefix: cubic:50)")
    ap.add_argument("--seconds", type=float, default=10.0, help="the duration run's length")
    ap.add_argument("--skip", type=float, default=2.0, help="seconds left out at the start (slow start)")
    ap.add_argument("--sim", action="store_true", help="the simulator's trains instead (no root)")
    ap.add_argument("--seeds", type=int, default=2, help="with --sim or --runs, seeds 1 to N")
    ap.add_argument(
        "--runs",
        type=Path,
        nargs="+",
        metavar="RUN",
        help="the ACK clocks kept by fidelity.py's kernel runs, beside the simulator's",
    )
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for --runs' simulator runs")
    args = ap.parse_args()
    if args.runs:
        missing = [str(r) for r in args.runs if not r.exists()]
        if missing:
            sys.exit(f"no such run: {', '.join(missing)} (an archive in benches/fidelity-runs/ or a results directory)")
        cases = select(matrix(), [args.case] if args.case else [])
        kept = {c.key: r for c in cases if (r := kept_records(args.runs, c))}
        if not kept:
            sys.exit(
                "no ACK clocks to show: none of these runs kept whole ones for these cases (records made before"
                " 2026-12-02 are left out: see kept_records; runs with --no-trace-acks keep none)"
            )
        print(runs_report(kept, cases, args.seeds, args.jobs))
        return
    case = next((c for c in matrix() if c.key == args.case), None)
    if case is None:
        sys.exit(f"no such case: {args.case} (a key of benches/fidelity.py's matrix, e.g. cubic:50:0.2bdp:4)")
    if not args.sim:
        kernel_report(case, args.seconds, args.skip)
        return
    for reads in READS_MODELS:
        got = [sim_trains(case, args.seconds, args.skip, seed, reads) for seed in range(1, args.seeds + 1)]
        print(f"{case.key}, reads {reads}: trains at the bottleneck (segments, weighted) " + ", ".join(f"{x:.1f}" for x in got))


if __name__ == "__main__":
    main()
