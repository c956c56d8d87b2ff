"""How long each emulated receiver takes to acknowledge, and how the flows interleave.

    sudo .venv/bin/python benches/ack_delays.py CASE [--seconds 10]
    .venv/bin/python benches/ack_delays.py CASE --sim [--seeds 2]

Runs one duration run of a benches/fidelity.py case on the netns backend with ftrace's
``tcp/tcp_probe`` event on (every segment a socket receives, in the kernel: the senders'
ACKs with ``snd_una``, the receivers' data with its length; cheap enough that the run keeps
its goodput), then prints, per flow after its first ``--skip`` seconds:

* the ACK delay: from the data that starts what an ACK acknowledges reaching the receiver
  to the ACK reaching the sender (the emulation's ACK path has no fixed delay: its delay
  line holds the data), for ACKs whose both ends fall on data boundaries (the receiver
  holding no out-of-order data), as quantiles; and the segments an ACK acknowledges. The
  top percent holds ACKs of the delayed-ACK timer (up to a round trip after a last lone
  segment), which are not reads;
* how the flows interleave: runs of consecutive ACKs of one flow at the senders, in
  segments acknowledged, weighted by segment (the length of the train a segment travels
  in). Flows that share the bottleneck in trains, a window each, give hundreds.

``--sim``: the interleaving of the simulator's runs of the case (fidelity.py's model of the
emulation, each ``--reads`` model), from the segments' departures from its bottleneck. No
root. What it measured: VALIDATION.md §6b, "The flows' ACK clocks".
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import itertools
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "benches"))

import fidelity  # noqa: E402
import sched_waits  # noqa: E402
from xferlab import constants  # noqa: E402
from xferlab.backends import sim as sim_backend  # noqa: E402

#: The ftrace instances this bench owns while a run lasts (one per process, -<pid>).
INSTANCE = sched_waits.TRACEFS / "instances" / "xferlab-probes"
EVENT = "events/tcp/tcp_probe"
#: Per CPU: a 10 s run of four flows at 300 Mbit/s makes about 250 000 events.
BUFFER_KB = 65536
#: tcp_probe's line: time, the socket's own address and its peer's, the segment's payload,
#: the socket's snd_una before the segment is processed.
LINE = re.compile(
    r"^\s*.+?\s(\d+\.\d+): tcp_probe: .*?src=([\d.]+:\d+) dest=([\d.]+:\d+) .*?data_len=(\d+)"
    r" snd_nxt=0x[0-9a-f]+ snd_una=0x([0-9a-f]+)"
)
#: A flow is a data connection if its receiver got at least this many segments (iperf3's
#: control connection gets a handful).
MIN_SEGMENTS = 1000
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
SEQ_MOD = 1 << 32

Probe = tuple[float, str, str, int, int]  # t (s), the socket's address, its peer's, data_len, snd_una


@contextlib.contextmanager
def traced() -> Iterator[dict]:
    """tcp_probe on while the block runs; the dict yielded holds ``probes`` after it."""
    instance = sched_waits.new_instance(INSTANCE)
    got: dict = {}
    try:
        sched_waits.write(instance, "buffer_size_kb", str(BUFFER_KB))
        sched_waits.write(instance, "trace_clock", "mono")
        sched_waits.write(instance, f"{EVENT}/enable", "1")
        yield got
        sched_waits.write(instance, f"{EVENT}/enable", "0")
        got["probes"] = parse((instance / "trace").read_text())
    finally:
        with contextlib.suppress(OSError):
            sched_waits.write(instance, f"{EVENT}/enable", "0")
        instance.rmdir()


def parse(text: str) -> list[Probe]:
    return [(float(g[1]), g[2], g[3], int(g[4]), int(g[5], 16)) for line in text.splitlines() if (g := LINE.match(line))]


def split(probes: list[Probe]) -> tuple[dict, dict]:
    """Per flow (sender, receiver): the receiver's data as (time, bytes received so far),
    and the sender's ACKs as (time, snd_una before it), both in time order."""
    data, acks, total = collections.defaultdict(list), collections.defaultdict(list), collections.Counter()
    for t, own, peer, length, una in sorted(probes):
        if length > 0:  # data, at its receiver: the socket's own address is the receiver's
            total[(peer, own)] += length
            data[(peer, own)].append((t, total[(peer, own)]))
        else:
            acks[(own, peer)].append((t, una))
    flows = [f for f, d in data.items() if len(d) >= MIN_SEGMENTS and f in acks]
    return {f: data[f] for f in flows}, {f: acks[f] for f in flows}


def acked(acks: list[tuple[float, int]], t0: float, skip_s: float) -> Iterator[tuple[float, int, int]]:
    """Each of a sender's ACKs from ``t0 + skip_s`` on as (time, from, to): the bytes it
    acknowledges, counted from the first ACK's ``snd_una``. An ACK's own number is the next
    ACK's ``snd_una`` (tcp_probe reads the socket before the ACK); the last has none."""
    base = acks[0][1]
    for (t, una), (_, next_una) in itertools.pairwise(acks):
        lo, hi = (una - base) % SEQ_MOD, (next_una - base) % SEQ_MOD
        if t - t0 >= skip_s:
            yield t, lo, hi


def ack_delays(probes: list[Probe], skip_s: float) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """Per flow: each in-order ACK's delay from the data that starts what it acknowledges
    (s), and the segments it acknowledges, after the first ``skip_s`` of the trace."""
    data, acks = split(probes)
    t0 = min(p[0] for p in probes)
    out = {}
    for flow, a in acks.items():
        times, received = zip(*data[flow], strict=True)
        delays, segs = [], []
        for t, lo, hi in acked(a, t0, skip_s):
            if hi <= lo:  # a duplicate ACK
                continue
            first, last = bisect.bisect_right(received, lo), bisect.bisect_left(received, hi)
            in_order = 0 < first and last < len(received) and received[first - 1] == lo and received[last] == hi
            if in_order and t > times[last]:
                delays.append(t - times[first])
                segs.append((hi - lo) / constants.LINUX_MSS)
        out[flow] = (np.array(delays), np.array(segs))
    return out


def train_length(order: list, weights: list[float]) -> float:
    """Runs of consecutive equal items of ``order``, each weighing the sum of its
    ``weights``: their mean weighted by weight (the run a unit of weight lies in)."""
    runs, run, last = [], 0.0, None
    for item, w in zip(order, weights, strict=True):
        if item != last and last is not None:
            runs.append(run)
            run = 0.0
        run, last = run + w, item
    runs.append(run)
    r = np.asarray(runs)
    return float((r**2).sum() / r.sum()) if r.sum() else float("nan")


def kernel_trains(probes: list[Probe], skip_s: float) -> float:
    """train_length of the senders' ACKs, each weighing the segments it acknowledges."""
    _, acks = split(probes)
    t0 = min(p[0] for p in probes)
    events = sorted((t, flow, (hi - lo) / constants.LINUX_MSS) for flow, a in acks.items() for t, lo, hi in acked(a, t0, skip_s))
    return train_length([e[1] for e in events], [e[2] for e in events])


def sim_trains(case: fidelity.Case, seconds: float, skip_s: float, seed: int, reads: str) -> float:
    """train_length of the segments leaving the simulator's bottleneck (its capture)."""
    cfg, _ = fidelity.sim_setup(case, "duration", duration_s=seconds, seed=seed, reads=reads)
    c = {k: np.asarray(v) for k, v in sim_backend.bottleneck_capture(cfg).items()}
    keep = c["departs_ns"] >= skip_s * 1e9  # drops are -1
    order = c["flow"][keep][np.argsort(c["departs_ns"][keep])]
    return train_length(order.tolist(), [1.0] * len(order))


def kernel_report(case: fidelity.Case, seconds: float, skip_s: float) -> None:
    with traced() as got:
        m, _, _ = fidelity.run_scenario(case.scenario("duration", seconds), "netns")
    probes = got["probes"]
    print(f"{case.key}: {m['aggregate_goodput_mbps']:.1f} Mbit/s, {len(probes)} segments traced\n")
    cells = " | ".join(f"{q:.0%}" for q in QUANTILES)
    print(f"| flow | ACKs | segments an ACK (median) | ACK delay (ms): {cells} |\n|---|---:|---:|" + "---:|" * len(QUANTILES))
    for (sender, receiver), (d, segs) in ack_delays(probes, skip_s).items():
        if not len(d):
            print(f"| {sender} → {receiver} | 0 | | " + " | ".join([""] * len(QUANTILES)) + " |")
            continue
        q = " | ".join(f"{x * 1e3:.3f}" for x in np.quantile(d, QUANTILES))
        print(f"| {sender} → {receiver} | {len(d)} | {np.median(segs):.0f} | {q} |")
    print(f"\nTrains at the senders (segments, weighted): {kernel_trains(probes, skip_s):.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", help="a fidelity case key, e.g. cubic:50:0.2bdp:4")
    ap.add_argument("--seconds", type=float, default=10.0, help="the duration run's length")
    ap.add_argument("--skip", type=float, default=2.0, help="seconds left out at the start (slow start)")
    ap.add_argument("--sim", action="store_true", help="the simulator's trains instead (no root)")
    ap.add_argument("--seeds", type=int, default=2, help="with --sim, seeds 1 to N")
    args = ap.parse_args()
    case = next((c for c in fidelity.matrix() if c.key == args.case), None)
    if case is None:
        sys.exit(f"no such case: {args.case} (a key of benches/fidelity.py's matrix, e.g. cubic:50:0.2bdp:4)")
    if not args.sim:
        kernel_report(case, args.seconds, args.skip)
        return
    for reads in fidelity.READS_MODELS:
        got = [sim_trains(case, args.seconds, args.skip, seed, reads) for seed in range(1, args.seeds + 1)]
        print(f"{case.key}, reads {reads}: trains at the bottleneck (segments, weighted) " + ", ".join(f"{x:.1f}" for x in got))


if __name__ == "__main__":
    main()
