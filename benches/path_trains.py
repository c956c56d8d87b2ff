"""How the emulated path bunches a flow's packets: trains of data and stretched ACKs.

    sudo .venv/bin/python benches/path_trains.py reno:10:0.2bdp:1 [--seconds 10] [--at L:h0]

Runs one duration case of benches/fidelity.py on the netns backend with ``tcpdump`` on one
interface of the dumbbell (``--at NS:DEV``: ``L:h0`` is the left router's side of the first
sender, where its data enters the bottleneck's router and its ACKs leave for it; ``R:h0``
the right router's side of the first receiver; ``a0:eth0`` the sender itself), then prints
for the connection that carried the most data:

* data trains: packets less than ``gap`` µs apart, for a few gaps, their mean, 90th, 99th
  percentile and largest size. A train of more packets than the bottleneck's buffer holds,
  arriving faster than the bottleneck drains, overflows it below the path's BDP;
* the segments each advancing ACK acknowledges (a receiver that ACKs every second segment
  gives 2), and the gaps between ACKs;
* with ``--rounds N``, round trip by round trip from the first data segment: the data, the
  advancing ACKs and their ratio (slow start: Linux's quick ACKs give 1, an ACK per two
  segments 0.5, ACKs left to a lagging application's reads less);
* a virtual drop-tail queue (``--buffer`` packets, drained at the case's bottleneck rate)
  fed with the captured data arrivals: how many of them a smooth bottleneck would drop.

Needs root and tcpdump. The capture is kept (``--pcap``). What it measured on a 2-CPU machine
(2026-11-27): VALIDATION.md §6b, "A single flow at 10 ms with 0.2 BDP".
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "benches"))

import ack_trains  # noqa: E402
import fidelity  # noqa: E402
from xferlab import constants, scenario  # noqa: E402
from xferlab.netns import topology  # noqa: E402

MSS = constants.LINUX_MSS
GAPS_US = (20, 50, 100)


def flows(pcap: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times of the busiest connection's data (s, from its first), and of its ACKs
    with their acknowledgement numbers."""
    pk = list(ack_trains.packets(pcap))
    volume: dict[tuple, int] = collections.Counter()
    for _, sp, dp, _, _, pay in pk:
        volume[(sp, dp)] += pay
    sp, dp = max(volume, key=volume.get)
    data = np.array([t for t, a, b, _, _, pay in pk if (a, b) == (sp, dp) and pay > 0])
    # (a reset at the close carries acknowledgement number 0)
    acks = [(t, n) for t, a, b, _, n, _ in pk if (a, b) == (dp, sp) and n != 0]
    t0 = data[0]
    return data - t0, np.array([t for t, _ in acks]) - t0, np.array([n for _, n in acks], dtype=np.int64)


def trains(data: np.ndarray) -> list[str]:
    gaps = np.diff(data) * 1e6
    out = [f"data: {len(data)} packets over {data[-1]:.2f} s; gaps (µs) p50 {np.percentile(gaps, 50):.1f}, "
           f"p90 {np.percentile(gaps, 90):.1f}, p99 {np.percentile(gaps, 99):.0f}"]  # fmt: skip
    for g in GAPS_US:
        ends = np.flatnonzero(gaps > g)
        sizes = np.diff(np.concatenate(([-1], ends, [len(data) - 1])))
        out.append(
            f"  trains (gap > {g} µs): {len(sizes)}, mean {sizes.mean():.1f} packets, "
            f"p90 {np.percentile(sizes, 90):.0f}, p99 {np.percentile(sizes, 99):.0f}, largest {sizes.max()}"
        )
    return out


def ack_coverage(times: np.ndarray, numbers: np.ndarray) -> list[str]:
    step = ((np.diff(numbers) + 2**31) % 2**32 - 2**31) / MSS  # signed: an older ACK is negative
    step = step[step > 0]
    weights = np.sort(step)
    half = weights[np.searchsorted(np.cumsum(weights), weights.sum() / 2)]
    gaps = np.diff(times) * 1e6
    return [
        f"ACKs: {len(times)}, {step.mean():.1f} segments per advancing ACK (half the data acknowledged "
        f"by ACKs of ≥ {half:.0f}); largest {step.max():.0f}",
        f"  gaps between ACKs (µs) p50 {np.percentile(gaps, 50):.0f}, p90 {np.percentile(gaps, 90):.0f}, "
        f"p99 {np.percentile(gaps, 99):.0f}",
    ]


def rounds(data: np.ndarray, ack_times: np.ndarray, ack_numbers: np.ndarray, rtt_s: float, n: int) -> list[str]:
    """Per round trip from the first data segment (a quarter of an RTT early, so that a
    round's train falls in one bin): the data segments, the ACKs that advanced and their
    ratio (a receiver that ACKs every second segment gives 0.5, quick ACKs 1)."""
    step = (np.diff(ack_numbers) + 2**31) % 2**32 - 2**31
    advancing = ack_times[1:][step > 0]
    edges = (np.arange(n + 1) - 0.25) * rtt_s
    d, _ = np.histogram(data, edges)
    a, _ = np.histogram(advancing, edges)
    return [f"  round {k}: {d[k]} data, {a[k]} advancing ACKs ({a[k] / d[k]:.2f} per segment)" for k in range(n) if d[k]]


def virtual_queue(data: np.ndarray, rate_bps: float, buffer: int, frame: int) -> int:
    """Drops of a drop-tail FIFO of ``buffer`` packets served at ``rate_bps`` (wire bytes)."""
    service = (frame + topology.WIRE_OVERHEAD) * 8 / rate_bps
    leaving: collections.deque = collections.deque()
    drops = 0
    for t in data:
        while leaving and leaving[0] <= t:
            leaving.popleft()
        if len(leaving) >= buffer:
            drops += 1
            continue
        leaving.append(max(t, leaving[-1] if leaving else t) + service)
    return drops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", help="a fidelity case key, e.g. reno:10:0.2bdp:1")
    ap.add_argument("--seconds", type=float, default=10.0, help="the run's duration")
    ap.add_argument("--at", default="L:h0", help="NS:DEV, NS the namespace's suffix (L, R, a0, b0)")
    ap.add_argument("--buffer", type=int, default=None, help="virtual queue's packets (default: the case's)")
    ap.add_argument("--pcap", default="/tmp/xferlab-path-trains.pcap")
    ap.add_argument("--rounds", type=int, default=0, metavar="N", help="ACKs per data segment in the first N round trips")
    ap.add_argument("--no-run", action="store_true", help="read the capture --pcap already holds")
    args = ap.parse_args()
    if not args.no_run and (os.geteuid() != 0 or not shutil.which("tcpdump")):
        print("error: needs root and tcpdump", file=sys.stderr)
        return 2
    try:
        v, rtt, buf, n = args.case.split(":")
        case = fidelity.Case(v, int(rtt), buf, int(n))
        ns, dev = args.at.split(":")
    except ValueError:
        print("error: CASE is variant:rtt_ms:buffer:flows and --at NS:DEV", file=sys.stderr)
        return 2
    pcap = Path(args.pcap)
    if not args.no_run:
        res = ack_trains.captured_run(case, args.seconds, pcap, "-" + ns, dev)
        print(f"{case.key} at {args.at}: {res['goodput_mbps']:.1f} Mbit/s, {res.get('retransmissions')} retransmissions, "
              f"delay line {res.get('late_mean_ms') or 0:.3f} ms late on average")  # fmt: skip
    elif not pcap.exists():
        print(f"error: no capture at {pcap}", file=sys.stderr)
        return 2
    data, ack_t, ack_n = flows(pcap)
    print("\n".join(trains(data) + ack_coverage(ack_t, ack_n)))
    if args.rounds:
        print("\n".join(rounds(data, ack_t, ack_n, case.rtt_ms / 1e3, args.rounds)))
    spec = case.scenario("duration", args.seconds)
    r = scenario.resolve(scenario.from_dict(spec, spec["name"]))
    rate, frame = r["bottleneck_rate_bps"], r["mss"] + r["header_bytes"] + 14
    buffer = args.buffer or r["buffer_packets"]
    print(f"a smooth {fidelity.BOTTLENECK} bottleneck with {buffer} packets of buffer would drop "
          f"{virtual_queue(data, rate, buffer, frame)} of these arrivals")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
