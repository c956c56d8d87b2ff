"""The fidelity matrix event by event: congestion events, the window at each, the backoff.

    .venv/bin/python benches/fidelity_events.py [KEY-PATTERN ...]

For each case of benches/fidelity.py whose kernel samples are stored
(``results/fidelity/<case>-netns-samples.parquet``: TCP_INFO every 2 ms until each flow's
first loss, every 0.1 s after, since 2026-11-28; every 2 ms throughout before), runs the
simulator's side of the duration run again with the same sampling and prints, simulator /
kernel: how many congestion events the flows entered (Recovery or Loss), the median cwnd
just before one (all of them, then without each flow's first, its exit from slow start),
and the median backoff (the ssthresh set over that cwnd). The simulator's flows start as the
kernel's did where the matrix measured it (xferlab.fidelity.figures.kernel_starts). Nothing runs on the
kernel; nothing is written.

    sudo .venv/bin/python benches/fidelity_events.py --kernel-runs N KEY-PATTERN ...

makes N new kernel duration runs of each case instead, sampled every 2 ms throughout (the
matrix samples every 0.1 s after a flow's first loss: too coarse for each event at 10 ms),
and prints each run's events beside the simulator's seeds 1 to N (fresh_runs).

    .venv/bin/python benches/fidelity_events.py --kept [--reads MODEL] KEY-PATTERN ...

reads the runs --kernel-runs kept in --out again (no root) beside the simulator's seeds:
the segments each congestion event after slow start retransmitted and the ACK stalls before
it (both sides count their ACKs: the kernel's ``tcpi_segs_in``, the Trace's
``tcp.acks_in``), then how often each flow went without an ACK for 2, 4, 10 and 20 ms.

Both sides number the congestion states as Linux does (the Trace contract: 3 Recovery, 4 Loss).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from xferlab import metrics
from xferlab.backends.base import BackendError
from xferlab.fidelity import judge, runs, simulator
from xferlab.fidelity.figures import broken_window
from xferlab.fidelity.kernel import run_netns_once
from xferlab.fidelity.matrix import Case, matrix, select
from xferlab.fidelity.settings import OPTIONS, READS_MODELS
from xferlab.netns.bpfcc import SSTHRESH_INFINITE
from xferlab.trace import Trace

ROOT = Path(__file__).resolve().parent.parent

#: When the first of the flows given inferred starts starts (the matrix's flows start within
#: the scenario's 1 ms jitter).
FIRST_START_NS = 100_000

#: The first congestion state that is an event: Linux's TCP_CA_Recovery (Loss is 4).
RECOVERY = 3

#: How far before a congestion event event_drops looks for a stall of the ACK stream (s):
#: three round trips at 10 ms.
STALL_LOOKBACK_S = 0.03
#: An ACK stall that lets a sender's window pile up past a 0.2 BDP buffer (s): at 300 Mbit/s
#: 2 ms is 50 segments, the buffer of the 10 ms cases.
STALL_S = 0.002
#: A gap of the sampler counted as the host holding a user process up (s).
SAMPLER_GAP_S = 0.005
#: The ACK-free stretches ack_gaps counts (s): one sample interval and more, up to two
#: fifths of a 50 ms round trip.
ACK_GAP_LEVELS_S = (0.002, 0.004, 0.01, 0.02)
#: ack_gaps leaves out each flow's first seconds (slow start and the losses that end it).
ACK_GAPS_FROM_S = 2.0


def entries(g: pd.DataFrame) -> np.ndarray:
    """The rows of one flow's samples (sorted by time) where it entered Recovery or Loss, but
    for the last row (the ssthresh set is read from the next)."""
    state = g.ca_state.to_numpy()
    i = np.nonzero((state[1:] >= RECOVERY) & (state[:-1] < RECOVERY))[0] + 1
    return i[i < len(g) - 1]


def events(samples: pd.DataFrame) -> tuple[int, float, float, float]:
    """(events, median cwnd before one, the same without each flow's first event — its exit
    from slow start —, median ssthresh / that cwnd) over every flow."""
    count, windows, later, betas = 0, [], [], []
    for _, g in samples.groupby("flow"):
        cwnd, ssthresh = g.cwnd.to_numpy(float), g.ssthresh.to_numpy(float)
        i = entries(g)
        count += len(i)
        windows.extend(cwnd[i - 1])
        later.extend(cwnd[i[1:] - 1])
        b = ssthresh[i + 1] / np.maximum(cwnd[i - 1], 1)  # ssthresh is set as the event starts
        betas.extend(b[(b > 0) & (b < 1.01)])
    med = lambda x: float(np.median(x)) if len(x) else float("nan")  # noqa: E731
    return count, med(windows), med(later), med(betas)


def event_gap(samples: pd.DataFrame) -> float:
    """The median time between a flow's consecutive congestion events after its slow start's
    (s; nan with fewer than three events)."""
    gaps = [np.diff(g.t.to_numpy()[entries(g)][1:]) for _, g in samples.groupby("flow")]
    gaps = np.concatenate(gaps) if gaps else np.array([])
    return float(np.median(gaps)) if len(gaps) else float("nan")


def event_drops(samples: pd.DataFrame) -> pd.DataFrame:
    """One row per congestion event after each flow's first (its slow start's exit): its
    time ``t``, the ``cwnd`` before it, the segments retransmitted until the flow left
    Recovery or Loss (``retx``), and ``stall_ms``: the longest stretch without an ACK in the
    STALL_LOOKBACK_S before it, where the sender's ACK count is sampled (the kernel's
    tcpi_segs_in; nan otherwise, or where the sampler itself left a gap there)."""
    rows = []
    for _, g in samples.sort_values("t").groupby("flow"):
        t, state, retx = g.t.to_numpy(), g.ca_state.to_numpy(), g.retransmissions.to_numpy()
        cwnd = g.cwnd.to_numpy()
        acks = g.segs_in.to_numpy() if "segs_in" in g else None
        for i in entries(g)[1:]:
            end = i + int(np.argmax(state[i:] < RECOVERY)) if (state[i:] < RECOVERY).any() else len(g) - 1
            stall = float("nan") if acks is None else ack_stall(t, acks, i)
            rows.append({"t": t[i], "cwnd": cwnd[i - 1], "retx": retx[end] - retx[i - 1], "stall_ms": stall})
    return pd.DataFrame(rows, columns=["t", "cwnd", "retx", "stall_ms"])


def ack_stall(t: np.ndarray, acks: np.ndarray, i: int) -> float:
    """The longest run of sample intervals in which no ACK arrived, within STALL_LOOKBACK_S
    before sample ``i`` (ms; nan if fewer than three samples fall there)."""
    w = np.nonzero((t >= t[i] - STALL_LOOKBACK_S) & (t < t[i]))[0]
    if len(w) < 3:
        return float("nan")
    longest = run = 0.0
    for quiet, dt in zip(np.diff(acks[w]) == 0, np.diff(t[w]), strict=True):
        run = run + dt if quiet else 0.0
        longest = max(longest, run)
    return longest * 1e3


def ack_gaps(samples: pd.DataFrame) -> list[float]:
    """How often a flow went without an ACK for each of ACK_GAP_LEVELS_S or longer, per flow
    and second after its first ACK_GAPS_FROM_S: runs of sample intervals in which the
    sender's count of segments received (``segs_in``) did not grow. A run holding a gap of
    the sampler itself (SAMPLER_GAP_S or more: the kernel's sampler is a process) is not
    counted. Flows that share a bottleneck in trains, each window passing through it whole,
    go without ACKs for the others' trains: a round trip's worth of long gaps."""
    counts, span = np.zeros(len(ACK_GAP_LEVELS_S)), 0.0
    levels = np.asarray(ACK_GAP_LEVELS_S) * (1 - 1e-3)  # sample times are not exact
    for _, g in samples.sort_values("t").groupby("flow"):
        g = g[g.t >= g.t.iloc[0] + ACK_GAPS_FROM_S]
        if len(g) < 2:
            continue
        t, acks = g.t.to_numpy(), g.segs_in.to_numpy()
        span += t[-1] - t[0]
        run, held = 0.0, False
        for quiet, dt in zip(np.diff(acks) == 0, np.diff(t), strict=True):
            if quiet:
                run, held = run + dt, held or dt >= SAMPLER_GAP_S
                continue
            if run > 0 and not held:
                counts += run >= levels
            run, held = 0.0, False
    return list(counts / span) if span else [float("nan")] * len(ACK_GAP_LEVELS_S)


def sampler_gaps(samples: pd.DataFrame) -> tuple[float, float]:
    """How often the sampler, a process woken every SAMPLE_S, was held up for SAMPLER_GAP_S
    or more (per second of run), and its longest gap (ms): the emulation host's scheduling
    of its user processes, the receiving applications among them."""
    t = np.sort(samples.t.unique())
    gaps = np.diff(t)
    span = t[-1] - t[0] if len(t) > 1 else float("nan")
    return float((gaps >= SAMPLER_GAP_S).sum() / span), float(gaps.max() * 1e3) if len(gaps) else float("nan")


def sim_run(case: Case, starts_s: list[float] | None = None, first_ns: int = 0, seed: int | None = None) -> Trace:
    """The simulator's duration run of ``case`` as simulator.run_sim makes it (``starts_s``:
    the flows' starts instead, shifted by ``first_ns``; one flow keeps the scenario's)."""
    starts = None if starts_s is None or len(starts_s) < 2 else [round(s * 1e9) + first_ns for s in starts_s]
    return simulator.sim_trace(case, "duration", starts_ns=starts, seed=seed)


def measured_starts(res: dict, kind: str) -> list[float] | None:
    """The kernel's flow starts of a stored case's run, as the matrix gives them to the
    simulator (None with one flow, or where they were not recorded)."""
    starts = res[f"netns_{kind}"].get("starts_s")
    return starts if starts and len(starts) > 1 else None


def samples(trace: Trace) -> pd.DataFrame:
    """Every flow's TCP samples, named as the kernel's stored ones."""
    return trace.tcp.to_pandas().rename(columns={"flow_id": "flow", "acks_in": "segs_in"}).fillna({"ca_state": 0, "ssthresh": -1})


def first_exits(samples: pd.DataFrame) -> list[tuple[float, float]]:
    """Each flow's first ssthresh and its time since the flow's first sample."""
    out = []
    for _, g in samples.sort_values("t").groupby("flow"):
        e = g[(g.ssthresh > 0) & (g.ssthresh < SSTHRESH_INFINITE)]
        out.append((float(e.ssthresh.iloc[0]), float(e.t.iloc[0])))
    return out


def starts_table(cases: list[Case]) -> None:
    print(
        "| case | kernel's starts, inferred (ms) | exit, kernel | simulator | simulator, those starts "
        "| Jain, kernel | simulator | those starts |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for case in cases:
        stored = OPTIONS.results / f"{case.stem}-netns-samples.parquet"
        if not stored.exists():
            continue
        kernel = first_exits(pd.read_parquet(stored))
        last = max(t for _, t in kernel)
        starts = [last - t for _, t in kernel]
        mean = lambda exits: np.mean([s for s, _ in exits])  # noqa: E731
        plain, moved = sim_run(case), sim_run(case, starts, FIRST_START_NS)
        exits = [mean(e) for e in (kernel, first_exits(samples(plain)), first_exits(samples(moved)))]
        stored_jain = json.loads((OPTIONS.results / f"{case.stem}-netns.json").read_text())["duration"]["jain"]
        jain = [stored_jain] + [metrics.compute(t)["jain_index"] for t in (plain, moved)]
        cells = [", ".join(f"{1000 * s:.0f}" for s in starts)] + [f"{e:.1f}" for e in exits] + [f"{j:.3f}" for j in jain]
        print(f"| {case.key} | " + " | ".join(cells) + " |", flush=True)


def seeds_table(cases: list[Case], seeds: int) -> None:
    passing, per_case = [0] * seeds, []
    for case in cases:
        res = runs.run_case(case, backends_=())
        if res is None or "failed" in res or res["netns_duration"].get("broken") is not None:
            continue  # no stored kernel run, or a void one
        net = {**res["netns_duration"], "makespan_s": res["netns_volume"]["makespan_s"]}
        marks = []
        for k in range(seeds):
            sd, sv = (
                simulator.run_sim(case, kind, seed=k + 1, starts_s=measured_starts(res, kind)) for kind in ("duration", "volume")
            )
            ok = judge.verdict({**sd, "makespan_s": sv["makespan_s"]}, net)
            good = all(g is not False for g in ok.values())
            passing[k] += good
            marks.append(good)
        per_case.append(marks)
        print(f"{case.key:24s} " + "".join("✓" if m else "·" for m in marks), flush=True)
    print(f"\ncases holding every tolerance, seeds 1–{seeds}: {passing} of {len(per_case)}")
    every, some = sum(all(m) for m in per_case), sum(any(m) for m in per_case)
    print(f"with every seed: {every}; with some seed: {some}; it depends on the seed: {some - every}")


def starts_effect(cases: list[Case]) -> None:
    """The tally of the multi-flow cases with the simulator's flows started as the scenario
    says (1 ms jitter) and as the kernel's started (what the matrix does), against the same
    stored kernel runs."""
    scenario_starts, kernel_starts = [], []
    for case in cases:
        res = runs.run_case(case, backends_=())
        if case.flows == 1 or res is None or "failed" in res or res["netns_duration"].get("broken") is not None:
            continue
        net = {**res["netns_duration"], "makespan_s": res["netns_volume"]["makespan_s"]}
        sd, sv = (simulator.run_sim(case, kind) for kind in ("duration", "volume"))
        scenario_starts.append(judge.verdict({**sd, "makespan_s": sv["makespan_s"]}, net))
        kernel_starts.append(judge.verdicts(res))
    print("the scenario's starts:", judge.tally(scenario_starts))
    print("the kernel's starts:  ", judge.tally(kernel_starts))


#: Decimals of run_row's numbers as printed.
ROW_DECIMALS = (1, 0, 0, 2, 0, 2)


def row_cells(values) -> list[str]:
    """run_row's numbers as printed (ROW_DECIMALS)."""
    return [f"{x:.{d}f}" for x, d in zip(values, ROW_DECIMALS, strict=True)]


def run_row(label: str, figures: dict, s: pd.DataFrame) -> tuple[str, list[float]]:
    """A printed row of fresh_runs and its numbers (goodput, retransmissions, events, gap,
    cwnd at an event after slow start, backoff)."""
    n, _, later, beta = events(s)
    values = [figures["goodput_mbps"], figures["retransmissions"], n, event_gap(s), later, beta]
    late = figures.get("late_mean_ms")
    cells = row_cells(values)
    cells.append("" if late is None else f"{late:.2f}" + (" (unclean)" if figures.get("unclean") else ""))
    return f"| {label} | " + " | ".join(cells) + " |", values


def fresh_runs(cases: list[Case], n: int, out: Path) -> None:
    """``n`` new kernel duration runs of each case, sampled every 2 ms throughout (every
    congestion event seen; the samples kept in ``out``), beside the simulator's seeds 1 to
    ``n`` (seed k's flows started as kernel run k's), and both sides' medians (unclean kernel
    runs left out). Root, a quiet machine: about 40 s per kernel run."""
    header = (
        "| run | goodput (Mbit/s) | retransmissions | events | between events (s) | cwnd at an event | backoff "
        "| delay line late (ms) |"
    )
    for case in cases:
        print(f"\n{case.key}\n\n{header}\n" + "|---" * 8 + "|", flush=True)
        sides = {"kernel": [], "simulator": []}
        for k in range(1, n + 1):
            path = out / f"{case.stem}-netns-samples.parquet"
            try:
                got = run_netns_once(case, "duration", samples_dir=out, dense=True)
            except BackendError as e:  # every attempt void (a BPF congestion control's defect)
                path.unlink(missing_ok=True)
                print(f"| kernel {k} | no run: {e} |", flush=True)
                continue
            if not path.exists():  # the sampler saw no transfer (a failed run)
                print(f"| kernel {k} | no samples: {got.get('failed', 'the sampler saw no flow')} |", flush=True)
                continue
            kept = path.rename(path.with_name(f"{path.stem}-{k}.parquet"))
            text, values = run_row(f"kernel {k}", got, pd.read_parquet(kept))
            print(text, flush=True)
            if not got["unclean"]:
                sides["kernel"].append(values)
            trace = sim_run(case, got["starts_s"], FIRST_START_NS, seed=k)
            m = metrics.compute(trace)
            figures = {"goodput_mbps": m["aggregate_goodput_mbps"], "retransmissions": m["retransmissions"]}
            text, values = run_row(f"simulator, seed {k}", figures, samples(trace))
            print(text, flush=True)
            sides["simulator"].append(values)
        for side, rows in sides.items():
            if rows:
                med = np.median(np.asarray(rows, float), axis=0)
                print(f"| median, {side} ({len(rows)} runs) | " + " | ".join(row_cells(med)) + " | |")


def drops_cells(d: pd.DataFrame, gaps: tuple[float, float] | None) -> list[str]:
    """kept_runs' cells for the events ``d`` (event_drops) of one run or of a side pooled,
    and the sampler's gaps of that run (None: not a kernel run)."""
    if d.empty:
        return ["0"] + [""] * 7
    cells = [f"{len(d)}", f"{d.retx.median():.0f}", f"{d.retx.mean():.1f}", f"{d.retx.max():.0f}"]
    known = d[d.stall_ms.notna()]
    if known.empty:
        cells += ["", ""]
    else:
        stalled = known[known.stall_ms >= STALL_S * 1e3]
        share = stalled.retx.sum() / max(known.retx.sum(), 1)
        cells += [f"{len(stalled)} of {len(known)}", f"{share:.0%}"]
    cells += ["", ""] if gaps is None else [f"{gaps[0]:.1f}", f"{gaps[1]:.0f}"]
    return cells


def kept_starts(samples: pd.DataFrame) -> list[float] | None:
    """The flows' starts (s) a kept kernel run's samples record (None with one flow)."""
    if "start_s" not in samples or samples.flow.nunique() < 2:
        return None
    return [float(g.start_s.iloc[0]) for _, g in samples.groupby("flow")]


def kept_runs(cases: list[Case], out: Path) -> None:
    """Congestion events after slow start in the kernel runs --kernel-runs kept in ``out``,
    beside the simulator's seeds 1 to N: the segments each retransmitted, how many came
    after a stall of the ACK stream of STALL_S or more and their share of the
    retransmissions, and how often the kernel's sampler was itself held up (SAMPLER_GAP_S
    or more, per second; its longest gap). Then each run's ACK-free stretches (ack_gaps).
    No root; nothing runs on the kernel."""
    header = (
        "| run | events | retx per event: median | mean | largest | after an ACK stall | their share of retx "
        "| sampler gaps per s | longest gap (ms) |"
    )
    for case in cases:
        kept = sorted(out.glob(f"{case.stem}-netns-samples-*.parquet"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
        if not kept:
            continue
        print(f"\n{case.key}\n\n{header}\n" + "|---" * 9 + "|", flush=True)
        pooled, gaps = {"kernel": [], "simulator": []}, []
        for k, path in enumerate(kept, start=1):
            s = pd.read_parquet(path)
            d = event_drops(s)
            pooled["kernel"].append(d)
            print(f"| kernel {k} | " + " | ".join(drops_cells(d, sampler_gaps(s))) + " |", flush=True)
            x = samples(sim_run(case, kept_starts(s), FIRST_START_NS, seed=k))
            d = event_drops(x)
            pooled["simulator"].append(d)
            print(f"| simulator, seed {k} | " + " | ".join(drops_cells(d, None)) + " |", flush=True)
            gaps += [(f"kernel {k}", ack_gaps(s)), (f"simulator, seed {k}", ack_gaps(x))]
        for side, ds in pooled.items():
            print(f"| {side}, pooled | " + " | ".join(drops_cells(pd.concat(ds), None)) + " |")
        print_ack_gaps(gaps)


def print_ack_gaps(rows: list[tuple[str, list[float]]]) -> None:
    """kept_runs' second table: ack_gaps of each run."""
    levels = " | ".join(f"≥ {x * 1e3:g} ms" for x in ACK_GAP_LEVELS_S)
    print(f"\nACK-free stretches per flow and second, after {ACK_GAPS_FROM_S:g} s\n\n| run | {levels} |")
    print("|---" * (len(ACK_GAP_LEVELS_S) + 1) + "|")
    for label, values in rows:
        print(f"| {label} | " + " | ".join(f"{v:.1f}" for v in values) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("patterns", nargs="*", help="case keys or prefixes (default: every stored case)")
    ap.add_argument("--starts", action="store_true", help="the slow-start exits with the kernel's inferred starts")
    ap.add_argument("--seeds", type=int, metavar="N", help="the tally with the simulator's seeds 1 to N")
    ap.add_argument("--starts-effect", action="store_true", help="multi-flow tally with the scenario's and the kernel's starts")
    ap.add_argument(
        "--kernel-runs", type=int, metavar="N", help="N new kernel runs per case, sampled throughout, beside seeds 1 to N"
    )
    ap.add_argument(
        "--kept",
        action="store_true",
        help="retransmissions per event, ACK stalls and ACK-free stretches in the kernel runs kept in --out",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "results/fidelity-events", help="where --kernel-runs keeps its samples")
    ap.add_argument(
        "--reads", choices=READS_MODELS, default=OPTIONS.reads, help="the emulated simulator's receiving applications"
    )
    args = ap.parse_args()
    OPTIONS.reads = args.reads
    if args.kept:
        kept_runs(select(matrix(), args.patterns), args.out)
        return
    if args.kernel_runs:
        fresh_runs(select(matrix(), args.patterns), args.kernel_runs, args.out)
        return
    if args.starts_effect:
        starts_effect(select(matrix(), args.patterns))
        return
    if args.seeds:
        seeds_table(select(matrix(), args.patterns), args.seeds)
        return
    if args.starts:
        starts_table(select(matrix(), args.patterns))
        return
    print("| case | events, sim / kernel | cwnd at an event | the same, after slow start | backoff |")
    print("|---|---:|---:|---:|---:|")
    for case in select(matrix(), args.patterns):
        stored = OPTIONS.results / f"{case.stem}-netns-samples.parquet"
        if not stored.exists():
            continue
        kernel = pd.read_parquet(stored)
        res = runs.run_case(case, backends_=())
        starts = measured_starts(res, "duration") if res and "failed" not in res else None
        a, b = events(samples(sim_run(case, starts))), events(kernel)
        void = " (kernel run void)" if broken_window(kernel) is not None else ""
        cells = [f"{a[0]} / {b[0]}", f"{a[1]:.0f} / {b[1]:.0f}", f"{a[2]:.0f} / {b[2]:.0f}", f"{a[3]:.3f} / {b[3]:.3f}"]
        print(f"| {case.key}{void} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
