"""An unresponsive ON/OFF UDP source (seed 004's background traffic Bg) for the netns backend.

Run inside a sender namespace by the backend::

    python -m xferlab.netns.onoff --dst 10.2.5.1 --rate 50e6 --mean-on 1 --mean-off 1 \
        --size 1472 --seed 7 --duration 30

ON and OFF periods are exponential with the given means (as the simulator's sources); while
ON it sends datagrams of ``--size`` bytes at ``--rate`` bit/s of IP packets, paced every
millisecond. It ignores losses (no congestion control) and stops after ``--duration`` s or
on SIGTERM, printing the bytes it sent as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import sys
import time

PORT = 9  # discard; the receiving namespace drops it without an ICMP reply
TICK = 1e-3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--rate", type=float, required=True, help="bit/s of IP packets while ON")
    ap.add_argument("--mean-on", type=float, required=True)
    ap.add_argument("--mean-off", type=float, required=True)
    ap.add_argument("--size", type=int, default=1472, help="UDP payload bytes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, required=True)
    args = ap.parse_args(argv)

    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    rng = random.Random(args.seed)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = bytes(args.size)
    wire = args.size + 28  # IP + UDP headers
    per_s = args.rate / 8 / wire
    t0 = time.monotonic()
    end = t0 + args.duration
    sent = errors = 0
    on = rng.random() < args.mean_on / (args.mean_on + args.mean_off)  # start in the stationary state
    switch = t0 + rng.expovariate(1 / (args.mean_on if on else args.mean_off))
    credit, last = 0.0, t0
    while not stop:
        now = time.monotonic()
        if now >= end:
            break
        while now >= switch:
            on = not on
            if on:
                last = switch  # sending resumes from the switch, not from the last tick
            switch += rng.expovariate(1 / (args.mean_on if on else args.mean_off))
        if on:
            credit += (now - last) * per_s
            while credit >= 1:
                try:
                    sock.sendto(payload, (args.dst, PORT))
                    sent += 1
                except OSError:  # the host's queue is full: an unresponsive source just loses it
                    errors += 1
                credit -= 1
        else:
            credit = 0.0
        last = now
        time.sleep(max(0.0, min(TICK, switch - now, end - now)))
    json.dump({"packets": sent, "bytes": sent * wire, "send_errors": errors}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
