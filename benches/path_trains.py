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
* at the right router (``R:…``), how long each advancing ACK came after the first segment
  it acknowledges passed the capture, as quantiles: with Linux's rules a receiver whose
  unread data holds its window back ACKs when its application reads, so this is the
  application's wake-up and read, plus the receiver's stack both ways (the simulator's
  ``noise.app_wakeup_quantiles_ns`` takes such a distribution);
* with ``--rounds N``, round trip by round trip from the first data segment: the data, the
  advancing ACKs and their ratio (slow start: Linux's quick ACKs give 1, an ACK per two
  segments 0.5, ACKs left to a lagging application's reads less);
* a virtual drop-tail queue (``--buffer`` packets, drained at the case's bottleneck rate)
  fed with the captured data arrivals: how many of them a smooth bottleneck would drop.

``--sim``: the same trains from the emulated simulator's run of the case (fidelity.py's
model, ``--seed``), at the bottleneck's entry and exit, for a side-by-side look; no root.

Needs root and tcpdump (not with ``--no-run`` or ``--sim``). The capture is kept (``--pcap``). What it measured on a 2-CPU machine
(2026-11-27): docs/journal/validation-history.md, "A single flow at 10 ms with 0.2 BDP, observed".
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import shutil
import sys
from pathlib import Path

import ack_trains
import numpy as np
from xferlab import constants, scenario
from xferlab.backends import sim as sim_backend
from xferlab.fidelity import emulation, simulator
from xferlab.fidelity.matrix import BOTTLENECK, Case
from xferlab.fidelity.settings import OPTIONS
from xferlab.netns import topology

ROOT = Path(__file__).resolve().parent.parent

MSS = constants.LINUX_MSS
DEFAULT_PCAP = "/tmp/xferlab-path-trains.pcap"
GAPS_US = (20, 50, 100)


def flows(pcap: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times of the busiest connection's data (s, from its first) and their
    sequence numbers, and the times of its ACKs with their acknowledgement numbers."""
    pk = list(ack_trains.packets(pcap))
    volume: dict[tuple, int] = collections.Counter()
    for _, sp, dp, _, _, pay in pk:
        volume[(sp, dp)] += pay
    sp, dp = max(volume, key=volume.get)
    data = [(t, seq) for t, a, b, seq, _, pay in pk if (a, b) == (sp, dp) and pay > 0]
    # (a reset at the close carries acknowledgement number 0)
    acks = [(t, n) for t, a, b, _, n, _ in pk if (a, b) == (dp, sp) and n != 0]
    t0 = data[0][0]
    return (
        np.array([t for t, _ in data]) - t0,
        np.array([s for _, s in data], dtype=np.int64),
        np.array([t for t, _ in acks]) - t0,
        np.array([n for _, n in acks], dtype=np.int64),
    )


def ack_delays(data: np.ndarray, seqs: np.ndarray, ack_t: np.ndarray, ack_n: np.ndarray) -> np.ndarray:
    """Per advancing ACK, seconds since the first segment it acknowledges passed the
    capture: where the receiver's ACKs wait for its application's read (Linux's rules when
    unread data holds the window back), how long the application took to be woken and
    read, plus the receiver's stack both ways."""
    first_seen: dict[int, float] = {}
    for t, s in zip(data, seqs, strict=True):
        first_seen.setdefault(int(s), float(t))
    out = []
    for k in range(1, len(ack_n)):
        step = (int(ack_n[k]) - int(ack_n[k - 1]) + 2**31) % 2**32 - 2**31
        start = first_seen.get(int(ack_n[k - 1]))
        if step > 0 and start is not None and ack_t[k] >= start:
            out.append(ack_t[k] - start)
    return np.array(out)


def delay_quantiles(delays: np.ndarray, steps: int = 20) -> list[str]:
    q = np.percentile(delays * 1e6, np.linspace(0, 100, steps + 1))
    return [
        f"ACK delay after the first segment it acknowledges (µs), {len(delays)} ACKs: "
        + ", ".join(f"p{p} {np.percentile(delays * 1e6, p):.0f}" for p in (10, 25, 50, 75, 90, 99)),
        f"  its {steps + 1} quantiles, 0 to 1 (µs): [{', '.join(f'{x:.0f}' for x in q)}]",
    ]


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
    ap.add_argument("--seconds", type=float, default=10.0, help="the duration run's length")
    ap.add_argument(
        "--kind",
        choices=tuple(emulation.NETNS_APPS),
        default="duration",
        help="the case's duration run (iperf3) or its volume run (xfer); with --no-run, which the captures were",
    )
    ap.add_argument("--at", default="L:h0", help="NS:DEV, NS the namespace's suffix (L, R, a0, b0)")
    ap.add_argument("--buffer", type=int, default=None, help="virtual queue's packets (default: the case's)")
    ap.add_argument("--pcap", action="append", help=f"the capture (default {DEFAULT_PCAP}); with --no-run repeatable")
    ap.add_argument(
        "--reads-out",
        metavar="FILE",
        help="at R:…, write the ACK delays' per-mille quantiles (every capture's pooled) as JSON: "
        "the emulated simulator's application wake-ups (benches/fidelity.py)",
    )
    ap.add_argument("--rounds", type=int, default=0, metavar="N", help="ACKs per data segment in the first N round trips")
    ap.add_argument("--no-run", action="store_true", help="read the capture --pcap already holds")
    ap.add_argument(
        "--sim",
        action="store_true",
        help="the emulated simulator's run of the case instead (fidelity.py's, --seed): its busiest flow's "
        "data as it reaches the bottleneck (the left router's side of the sender, L:h0) and as it leaves it",
    )
    ap.add_argument("--seed", type=int, default=1, help="with --sim, the simulator's seed")
    args = ap.parse_args()
    if args.sim:
        return simulated(args)
    if not args.no_run and (os.geteuid() != 0 or not shutil.which("tcpdump")):
        print("error: needs root and tcpdump", file=sys.stderr)
        return 2
    case, at = parse_case(args.case), args.at.split(":")
    if case is None or len(at) != 2:
        print("error: CASE is variant:rtt_ms:buffer:flows and --at NS:DEV", file=sys.stderr)
        return 2
    ns, dev = at
    pcaps = [Path(p) for p in args.pcap or [DEFAULT_PCAP]]
    if not args.no_run:
        if len(pcaps) > 1:
            print("error: a run writes one capture (several --pcap only with --no-run)", file=sys.stderr)
            return 2
        res = ack_trains.captured_run(case, args.seconds, pcaps[0], "-" + ns, dev, args.kind)
        print(f"{case.key} at {args.at}: {res['goodput_mbps']:.1f} Mbit/s, {res.get('retransmissions')} retransmissions, "
              f"delay line {res.get('late_mean_ms') or 0:.3f} ms late on average")  # fmt: skip
    missing = [p for p in pcaps if not p.exists()]
    if missing:
        print(f"error: no capture at {missing[0]}", file=sys.stderr)
        return 2
    delays = []
    for pcap in pcaps:
        print(f"== {pcap}")
        data, seqs, ack_t, ack_n = flows(pcap)
        print("\n".join(trains(data) + ack_coverage(ack_t, ack_n)))
        if ns == "R":
            delays.append(ack_delays(data, seqs, ack_t, ack_n))
            print("\n".join(delay_quantiles(delays[-1])))
        if args.rounds:
            print("\n".join(rounds(data, ack_t, ack_n, case.rtt_ms / 1e3, args.rounds)))
        virtual_drops(case, args.seconds, args.buffer, data)
    if args.reads_out:
        if not delays:
            print("error: --reads-out needs captures at the right router (--at R:h0)", file=sys.stderr)
            return 2
        write_reads(Path(args.reads_out), emulation.NETNS_APPS[args.kind], np.concatenate(delays), pcaps)
    return 0


def parse_case(key: str) -> Case | None:
    """A fidelity case from its key (``reno:10:0.2bdp:1``), or None."""
    try:
        v, rtt, buf, n = key.split(":")
        return Case(v, int(rtt), buf, int(n))
    except ValueError:
        return None


def simulated(args: argparse.Namespace) -> int:
    """The emulated simulator's side of ``path_trains``: trains at the bottleneck."""
    case = parse_case(args.case)
    if case is None:
        print("error: CASE is variant:rtt_ms:buffer:flows", file=sys.stderr)
        return 2
    cfg, _ = simulator.sim_setup(case, args.kind, args.seconds, seed=args.seed)
    c = {k: np.asarray(v) for k, v in sim_backend.bottleneck_capture(cfg).items()}
    busiest = np.bincount(c["flow"]).argmax()
    mine = c["flow"] == busiest
    arrivals, departs = c["t_ns"][mine] / 1e9, c["departs_ns"][mine]
    print(f"{case.key}, the emulated simulator ({args.kind}, seed {args.seed}, READS {OPTIONS.reads}), "
          f"flow {busiest}: {int((departs < 0).sum())} of {len(departs)} segments dropped at the bottleneck")  # fmt: skip
    print("== arriving at the bottleneck (L:h0)")
    print("\n".join(trains(arrivals - arrivals[0])))
    left = np.sort(departs[departs >= 0]) / 1e9
    print("== leaving it (L:core)")
    print("\n".join(trains(left - left[0])))
    return 0


def virtual_drops(case: Case, seconds: float, buffer: int | None, data: np.ndarray) -> None:
    spec = case.scenario("duration", seconds)
    r = scenario.resolve(scenario.from_dict(spec, spec["name"]))
    rate, frame = r["bottleneck_rate_bps"], r["mss"] + r["header_bytes"] + 14
    buffer = buffer or r["buffer_packets"]
    print(f"a smooth {BOTTLENECK} bottleneck with {buffer} packets of buffer would drop "
          f"{virtual_queue(data, rate, buffer, frame)} of these arrivals")  # fmt: skip


def write_reads(path: Path, app: str, delays: np.ndarray, pcaps: list[Path]) -> None:
    """The pooled ACK delays' quantiles at every 0.1 % (µs), with where they came from, as
    ``app``'s entry of the file (the other applications' entries are kept). The last point
    is not the largest delay but the one that gives the top 0.1 %, drawn linearly from its
    lower edge, the mean they had: one delay of 40 ms would otherwise make that slice's
    draws average 20 ms."""
    us = delays * 1e6
    q = np.percentile(us, np.linspace(0, 100, 1001))
    q[-1] = max(q[-2], 2 * us[us >= q[-2]].mean() - q[-2])
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc["what"] = "per receiving application, the ACK delay after the first segment it acknowledges, at the right router"
    doc.setdefault("apps", {})[app] = {
        "measured": datetime.date.today().isoformat(),
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, Linux {platform.release()}",
        "captures": [p.name for p in pcaps],
        "acks": int(len(delays)),
        "quantiles_us": [round(float(x), 1) for x in q],
    }
    text = json.dumps(doc, indent=1)
    for entry in doc["apps"].values():  # a table of 1 001 numbers on one line each
        table = entry["quantiles_us"]
        text = text.replace(json.dumps(table, indent=1).replace("\n", "\n   "), json.dumps(table), 1)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)
    print(f"wrote {app}'s reads to {path}: {len(delays)} ACKs, median {q[500]:.0f} µs, p99 {q[990]:.0f} µs")


if __name__ == "__main__":
    sys.exit(main())
