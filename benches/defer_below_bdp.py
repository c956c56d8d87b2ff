"""Does the sender hold data back (TSO deferral) while its path is not full? Kernel and simulator.

    sudo .venv/bin/python benches/defer_below_bdp.py [--case db1-10ms-reno] [--duration 15s] [--no-kernel]

One case of benches/ns3_compare.py's dumbbell group, shortened, on the netns backend with the
TCP_INFO sampler every 2 ms beside it (benches/fidelity_tcpinfo.py, by lookup), and on the
simulator with TCP samples every 2 ms, with and without TSO deferral (`host.tso_defer`), and on
the emulated configuration (fidelity's emulation.emulated) with its default receivers and with Linux's
ACK rules (reads "linux"), and with ``--wakeups`` on the plain simulator with Linux's ACK rules
and its receiving applications reading later. After the first 3 s it prints, per run, the
utilisation and the bottleneck drops, and how far the flow's data in flight falls short of
its window (cwnd − in flight, segments) in the samples whose window is below the path's BDP
(the bottleneck idle part of each saw-tooth, where data held back is link time lost) and in
those above it (a queue holds, nothing is lost by waiting), and the segments per ACK (the
kernel's in each part too).
"""

from __future__ import annotations

import argparse
import copy
import signal
import time
from pathlib import Path

import ns3_compare
import numpy as np
import pandas as pd
from xferlab import backends, metrics, scenario
from xferlab.backends import sim
from xferlab.fidelity import emulation, figures
from xferlab.fidelity.kernel import start_sampler
from xferlab.fidelity.settings import OPTIONS

ROOT = Path(__file__).resolve().parent.parent

#: Samples before this are left out (slow start and the first loss).
SKIP_S = 3.0


def shortfall(df: pd.DataFrame, bdp: float) -> str:
    """cwnd − in flight below and above the BDP: median and 90th percentile, and the share of
    samples below it."""
    gap = df.cwnd - df.in_flight
    below = df.cwnd < bdp
    q = lambda g: f"{np.percentile(g, 50):.0f}/{np.percentile(g, 90):.0f}" if len(g) else "—"  # noqa: E731
    share = f"{100 * below.mean():.0f} % of samples below"
    return f"cwnd − in flight (median/90th) below the BDP {q(gap[below])}, above {q(gap[~below])} ({share})"


def run_line(label: str, m: dict, r: dict) -> str:
    """A run's label, utilisation and bottleneck drops."""
    return f"{label:32s} util {100 * m['aggregate_goodput_mbps'] / r['ideal_goodput_mbps']:5.1f} %, drops {m['bottleneck_drops']}"


def case_data(name: str, duration: str) -> dict:
    cases = {c.name: c for c in ns3_compare.GROUPS["dumbbell"](False)}
    if name not in cases:
        raise SystemExit(f"error: no case {name!r}; cases: {', '.join(cases)}")
    d = copy.deepcopy(cases[name].data)
    d["workload"]["duration"] = duration
    d["measure"]["tcp_interval"] = "2ms"
    return d


def kernel(d: dict, bdp: float) -> None:
    s = scenario.from_dict(d, d["name"])
    r = scenario.resolve(s)
    csv = ROOT / "results" / f".defer-{d['name']}.csv"
    csv.parent.mkdir(parents=True, exist_ok=True)
    sampler = start_sampler(csv, "--flows", "1", "--discover", "inf")
    try:
        tr = backends.get("netns").run(s, r)
    finally:
        sampler.send_signal(signal.SIGTERM)
        sampler.wait(timeout=10)
    m = metrics.compute(tr)
    f = figures.netns_samples(csv, 1, time.monotonic_ns())  # the data connection's, from its first data
    csv.unlink(missing_ok=True)
    if f is None:
        raise SystemExit("error: the TCP_INFO sampler saw no data connection of the kernel's run")
    f = f[f.t > SKIP_S]
    per_ack = (f.data_segs_out.iloc[-1] - f.data_segs_out.iloc[0]) / max(1, f.segs_in.iloc[-1] - f.segs_in.iloc[0])
    late = " (emulation late)" if tr.provenance.stats.get("delay_line_late") else ""
    print(f"{run_line('kernel' + late, m, r)}; {shortfall(f, bdp)}; {per_ack:.2f} segments per ACK")
    # Segments per ACK in each part: the data sent and the ACKs got between samples.
    sent, got, below = f.data_segs_out.diff(), f.segs_in.diff(), f.cwnd.shift() < bdp
    ratio = lambda m: sent[m].sum() / max(1, got[m].sum())  # noqa: E731
    split = f"below the BDP {ratio(below):.2f}, above {ratio(~below):.2f}"
    print(f"{'':32s} segments per ACK {split}")


def simulated(d: dict, bdp: float, wakeups_us: list[float]) -> None:
    runs = [
        ("sim", {}, None, None),
        ("sim, no deferral", {"tso_defer": False}, None, None),
        ("sim, emulated", {}, OPTIONS.reads, None),
        ("sim, emulated, Linux ACKs", {}, "linux", None),
    ]
    runs += [(f"sim, Linux ACKs, reads {w:g} µs", {}, None, w) for w in wakeups_us]
    for label, host, reads, wakeup_us in runs:
        dd = copy.deepcopy(d)
        dd["host"] = host
        s = scenario.from_dict(dd, dd["name"])
        r = scenario.resolve(s)
        cfg = sim.sim_config(r)
        if wakeup_us is not None:  # the receivers' reads later (noise.app_wakeup_ns, a uniform mean)
            cfg["tcp"]["linux_acks"] = True
            cfg["noise"]["app_wakeup_ns"] = int(wakeup_us * 1000)
        tr = sim.run_config(cfg if reads is None else emulation.emulated(cfg, reads=reads), r)
        m = metrics.compute(tr)
        t = tr.df("tcp")
        t = t[t.t > SKIP_S]
        per_ack = tr.df("flows").segments_sent.sum() / max(1, t.acks_in.max())
        print(f"{run_line(label, m, r)}; {shortfall(t, bdp)}; {per_ack:.2f} segments per ACK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="db1-10ms-reno", help="a case of ns3_compare.py's dumbbell group")
    ap.add_argument("--duration", default="15s")
    ap.add_argument("--no-kernel", action="store_true", help="the simulator only (no root needed)")
    ap.add_argument(
        "--wakeups",
        nargs="*",
        type=float,
        default=[],
        metavar="US",
        help="also the plain simulator with Linux's ACK rules and its receivers reading this many µs after the data",
    )
    args = ap.parse_args()
    d = case_data(args.case, args.duration)
    r = scenario.resolve(scenario.from_dict(d, d["name"]))
    bdp = r["bdp_packets"]
    print(f"{args.case}, {args.duration}; the path's BDP {bdp:.0f} packets")
    if not args.no_kernel:
        kernel(d, bdp)
    simulated(d, bdp, args.wakeups)


if __name__ == "__main__":
    main()
