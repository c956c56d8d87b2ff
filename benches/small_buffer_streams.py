"""Parallel streams through a small buffer (seed 002 §IV-A, VALIDATION §1.2) on this host's
kernel and on the simulator, with Linux's receiver ACK rules (``host.linux_acks``) off and on.

    sudo .venv/bin/python benches/small_buffer_streams.py [--streams 1 2 4 10] [--reps 2] [--seconds 30]
    .venv/bin/python benches/small_buffer_streams.py --sim-only
    sudo .venv/bin/python benches/small_buffer_streams.py --acks --streams 1 10 --seconds 10

One pair, N Reno streams, hosts at 1 Gbit/s into a 300 Mbit/s bottleneck (the fidelity
matrix's rates: what this host emulates), RTT 11.5 ms, a 10-packet buffer. The question it
answers: with the ACK rules on, the simulator's N streams through 10 packets fall to a third
of what they get with one ACK per two segments (VALIDATION §1.2 at 1 Gbit/s); does the kernel's?
The simulator runs the emulated path (benches/fidelity.py's ``emulated``: HTB-shaped veths,
the hosts' transmit batching) and, for reference, the plain path. Printed: aggregate goodput
(Mbit/s) per N, each kernel repetition and each simulator seed; nothing is written.

``--acks``: one kernel run per N with tcpdump at the right router (``R:h0``, needs tcpdump),
its goodput and ACKs per data segment (the data connections' ACKs against their bytes /
MSS), beside the emulated simulator's (every ACK against every data packet), off and on.
"""

from __future__ import annotations

import argparse
import collections
import signal
import statistics
import sys
import tempfile
import threading
from pathlib import Path

import ack_trains
from xferlab import backends, constants, metrics, scenario
from xferlab.backends import sim as sim_backend
from xferlab.fidelity import emulation
from xferlab.fidelity.matrix import ACCESS, BOTTLENECK

RTT = "11.5ms"
BUFFER_PACKETS = 10

#: Its table judges the ACK rules on the simulator's default hosts (their reads 20 µs late
#: on average), never with the emulation's measured reads, whatever Options.reads is.
READS = "uniform"


def data(streams: int, seconds: float, seed: int) -> dict:
    return {
        "name": f"small-buffer-{streams}",
        "topology": {
            "pairs": 1,
            "access_rate": ACCESS,
            "bottleneck_rate": BOTTLENECK,
            "rtt": RTT,
            "buffer": BUFFER_PACKETS,
        },
        "workload": {"streams": streams, "duration": f"{seconds:g}s", "start_jitter": "1ms"},
        "protocol": {"variant": "reno"},
        "seed": seed,
    }


def kernel(streams: int, seconds: float) -> float:
    s = scenario.from_dict(data(streams, seconds, 1), "small-buffer")
    r = scenario.resolve(s)
    return metrics.compute(backends.get("netns").run(s, r))["aggregate_goodput_mbps"]


def simulated_trace(streams: int, seconds: float, seed: int, linux_acks: bool, emulate: bool):
    s = scenario.from_dict(data(streams, seconds, seed), "small-buffer")
    r = scenario.resolve(s)
    cfg = sim_backend.sim_config(r)
    if emulate:
        cfg = emulation.emulated(cfg, reads=READS)
    cfg["tcp"]["linux_acks"] = linux_acks
    return sim_backend.run_config(cfg, r)


def simulated(streams: int, seconds: float, seed: int, linux_acks: bool, emulate: bool) -> float:
    return metrics.compute(simulated_trace(streams, seconds, seed, linux_acks, emulate))["aggregate_goodput_mbps"]


def kernel_acks(streams: int, seconds: float) -> tuple[float, float]:
    """A kernel run with tcpdump at the right router: goodput, ACKs per data segment."""
    pcap, started = Path(tempfile.mkdtemp()) / "r.pcap", []
    watcher = threading.Thread(target=ack_trains.capture_when_up, args=(pcap, "R", started, 60.0, "h0"), daemon=True)
    watcher.start()
    try:
        goodput = kernel(streams, seconds)
    finally:
        watcher.join(timeout=1)
        for p in started:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=10)
    pk = list(ack_trains.packets(pcap))
    volume = collections.Counter()
    for _, sp, dp, _, _, pay in pk:
        volume[(sp, dp)] += pay
    conns = {k for k, v in volume.items() if v > 1e6}  # iperf3's control connections are small
    acks = sum(1 for _, sp, dp, _, ack, pay in pk if (dp, sp) in conns and pay == 0 and ack != 0)
    return goodput, acks / (sum(volume[c] for c in conns) / constants.LINUX_MSS)


def acks_table(streams: list[int], seconds: float) -> None:
    print("| N | kernel: Mbit/s, ACKs per segment | simulator, off | simulator, `linux_acks` |")
    print("|---:|---:|---:|---:|")
    for n in streams:
        row = ["{:.0f}, {:.3f}".format(*kernel_acks(n, seconds))]
        for on in (False, True):
            tr = simulated_trace(n, seconds, 1, on, True)
            st = tr.provenance.stats
            row.append(f"{metrics.compute(tr)['aggregate_goodput_mbps']:.0f}, {st['acks'] / st['packets']:.3f}")
        print(f"| {n} | {' | '.join(row)} |", flush=True)


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):6.1f} ({' '.join(f'{x:.0f}' for x in xs)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 10])
    ap.add_argument("--reps", type=int, default=2, help="kernel repetitions per N")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--sim-only", action="store_true", help="no kernel runs (no root needed)")
    ap.add_argument("--acks", action="store_true", help="ACKs per segment: a captured kernel run per N (tcpdump)")
    args = ap.parse_args()
    if args.acks:
        acks_table(args.streams, args.seconds)
        return 0
    cols = ["kernel"] * (not args.sim_only) + ["emulated, off", "emulated, on", "plain, off", "plain, on"]
    print(f"| N | {' | '.join(cols)} |")
    print("|---:|" + "---:|" * len(cols))
    for n in args.streams:
        row = [] if args.sim_only else [fmt([kernel(n, args.seconds) for _ in range(args.reps)])]
        for emulate in (True, False):
            for on in (False, True):
                row.append(fmt([simulated(n, args.seconds, seed, on, emulate) for seed in args.seeds]))
        print(f"| {n} | {' | '.join(row)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
