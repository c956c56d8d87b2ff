"""H-TCP's adaptive backoff on the simulator: which RTT_max each congestion event uses.

    .venv/bin/python benches/htcp_backoff.py [--rtt 11.5ms] [--variants htcp cubic htcp_linux]
                                             [--kernel linux2006] [--hz 1000] [--no-tso-defer]

VALIDATION.md §2.3's dumbbell (12 × 1 Gbit/s into 10 Gbit/s, a 1 000-packet buffer),
shortened: pairs 2 s apart, 60 s with all 12 active, TCP samples every 10 ms. Per variant it
prints the all-active window's flow mean, bottleneck throughput, mean queue, drops and
retransmissions, and the backoff factors the samples show (ssthresh after an event over the
cwnd just before it). Per flow it prints when it first lost, and its largest smoothed RTT
before that and from 0.5 s after it on: H-TCP's β = RTT_min/RTT_max keeps the largest RTT
sample of the connection, so an RTT reached before the first loss sets every later backoff.

``htcp_linux`` is Linux's own ``tcp_htcp.c`` (crates/sim/src/cc/htcp_linux.rs: RTTs in
jiffies, RTT_max faded 5 % per event, α scaled by RTT_min, the bandwidth switch's
``modeswitch``), which is not a scenario variant: the simulator's config is altered to run it,
with the host's timer frequency ``--hz`` (the sim's ``tcp.hz``, 250 by default).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from xferlab import metrics, scenario
from xferlab.backends import sim

ROOT = Path(__file__).resolve().parent.parent

#: Bins of the backoff factor for the printed histogram.
BETA_BINS = (0.0, 0.45, 0.55, 0.65, 0.75, 0.85, 1.01)


#: The experiment variant outside the scenario's table, run by altering the config.
LINUX_HTCP = "htcp_linux"


def run(variant: str, rtt: str, kernel: str, hz: int | None, tso_defer: bool = True):
    data = {
        "name": f"htcp-backoff-{variant}",
        "topology": {"pairs": 12, "access_rate": "1Gbps", "bottleneck_rate": "10Gbps", "rtt": rtt, "buffer": 1000},
        "workload": {"duration": "60s", "stagger": "2s", "align_end": True, "start_jitter": "10ms"},
        "protocol": {"variant": "htcp" if variant == LINUX_HTCP else variant},
        "host": {"kernel": kernel, "tso_defer": tso_defer},
        "measure": {"window": "all-active", "tcp_interval": "10ms"},
        "seed": 1,
    }
    s = scenario.from_dict(data, data["name"])
    resolved = scenario.resolve(s)
    cfg = sim.sim_config(resolved)
    for f in cfg["flows"]:
        f["variant"] = variant
    if hz is not None:
        cfg["tcp"]["hz"] = hz
    t0 = time.perf_counter()
    trace = sim.run_config(cfg, resolved)
    return trace, metrics.compute(trace, None), time.perf_counter() - t0


def events(flow) -> list[tuple[float, float]]:
    """(time, ssthresh / the cwnd of the sample before) at each change of ssthresh."""
    t, cwnd, ss = flow.t.to_numpy(), flow.cwnd.to_numpy(float), flow.ssthresh.to_numpy(float)
    return [
        (t[i], ss[i] / cwnd[i - 1]) for i in range(1, len(t)) if not np.isnan(ss[i]) and ss[i] != ss[i - 1] and cwnd[i - 1] > 0
    ]


#: Backoffs less than this apart belong to one congestion episode (one overflow of the
#: bottleneck's queue: its flows enter recovery within a round trip or two of it).
EPISODE_GAP_S = 0.1


def episodes(times_flows: list[tuple[float, int]]) -> list[set[int]]:
    """The flows that backed off in each congestion episode: backoffs (time, flow) grouped
    while each follows the one before by less than EPISODE_GAP_S."""
    out: list[set[int]] = []
    last = -np.inf
    for t, fid in sorted(times_flows):
        if t - last >= EPISODE_GAP_S:
            out.append(set())
        out[-1].add(fid)
        last = t
    return out


def report(variant: str, rtt: str, kernel: str, hz: int | None, tso_defer: bool = True) -> None:
    trace, m, wall = run(variant, rtt, kernel, hz, tso_defer)
    flows, tcp, link = trace.flows.to_pandas(), trace.tcp.to_pandas(), trace.link.to_pandas()
    start = flows.start.max()
    window = link[(link.link == "bottleneck") & (link.t >= start)]
    ordered = {fid: g.sort_values("t") for fid, g in tcp.groupby("flow_id")}
    per_flow = {fid: (g, events(g)) for fid, g in ordered.items()}  # each flow's samples and backoffs
    betas = [b for _, ev in per_flow.values() for t, b in ev if t > start]
    hist = np.histogram(betas, bins=BETA_BINS)[0].tolist()
    print(
        f"{variant} at {rtt}, {kernel} host{'' if hz is None else f' at HZ {hz}'}{'' if tso_defer else ', no TSO deferral'} "
        f"({wall:.0f} s): "
        f"flow mean {m['mean_flow_goodput_mbps']:.1f} Mbit/s, Jain {m['jain_index']:.3f}, "
        f"bottleneck {window.throughput_mbps.mean():.0f} Mbit/s, queue {window.queue_pkts.mean():.0f} pkts; "
        f"drops {int(link.drops.sum())}, retransmissions {int(flows.retransmissions.sum())}"
    )
    if betas:
        print(f"  backoffs with all active: {len(betas)}, median β {np.median(betas):.3f}; per bin {BETA_BINS[1:-1]}: {hist}")
        eps = episodes([(t, fid) for fid, (_, ev) in per_flow.items() for t, _ in ev if t > start])
        sizes = np.array([len(e) for e in eps])
        print(
            f"  congestion episodes: {len(eps)} ({len(eps) / (window.t.max() - start):.2f} a second), flows backing off in "
            f"each: mean {sizes.mean():.1f}, median {np.median(sizes):.0f}, per count 1-{sizes.max()}: "
            f"{np.bincount(sizes)[1:].tolist()}; bottleneck queue empty in {100 * (window.queue_pkts == 0).mean():.0f} % "
            f"of its samples"
        )
    for fid, (g, ev) in per_flow.items():
        if not ev:
            continue
        first = ev[0][0]
        pre = g[g.t < first]
        before, after = pre.srtt_ms.max(), g[g.t >= first + 0.5].srtt_ms.max()
        print(
            f"  flow {fid:2d}: first loss {first:6.2f} s, largest srtt before {before:5.2f} ms, after {after:5.2f} ms; "
            f"before it cwnd up to {pre.cwnd.max():.0f}, in flight up to {pre.in_flight.max():.0f} segments"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rtt", default="11.5ms")
    ap.add_argument("--variants", nargs="+", default=["htcp", "cubic"])
    ap.add_argument("--kernel", default="linux6", help="the host's sender model (host.kernel): linux6 or linux2006")
    ap.add_argument("--hz", type=int, help="the host's timer frequency (the simulator's tcp.hz; default 250)")
    ap.add_argument("--no-tso-defer", action="store_true", help="the sender without TSO deferral (host.tso_defer: false)")
    args = ap.parse_args()
    for v in args.variants:
        report(v, args.rtt, args.kernel, args.hz, not args.no_tso_defer)


if __name__ == "__main__":
    main()
