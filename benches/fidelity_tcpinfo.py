"""Samples the senders' TCP_INFO in the netns backend's namespaces every few milliseconds.

    python benches/fidelity_tcpinfo.py --out samples.csv [--interval 0.002] [--pattern 'xl-*-a*']

Runs as root beside an emulation (benches/fidelity.py starts it): it opens a sock_diag
netlink socket in every namespace named like the pattern as soon as it appears
(/run/netns), then reads the established TCP sockets of each with their ``tcp_info`` and,
for BBR, ``tcp_bbr_info``, and writes one CSV row per socket and sample. iperf3 reports
TCP_INFO at most every 0.1 s, too coarse for a slow start of a few 10 ms round trips. It
runs until SIGTERM. Other emulations' namespaces may match too (the reader keeps the run
whose namespaces were seen last before its own run ended).

Each sample is a dump, which finds a socket the moment it opens but walks the host's whole
connection table: about 170 µs of CPU per namespace and sample here, a third of a core at
2 ms with 4 namespaces, taken from the emulation it measures (the matrix of VALIDATION.md
§6b ran so). ``--discover S`` dumps every S seconds and reads the sockets found by lookup
in between (7 µs each; xferlab.netns.tcpdiag), at the price of up to S seconds unseen after
a socket opens. ``--until-started K`` stops once K namespaces have a transfer under way,
for a run that only wants to know when its flows started.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import signal
import sys
import time

from xferlab.netns.tcpdiag import FIELDS, TcpDiag

#: A socket that has sent this many data segments is a transfer's, not a control connection's.
STARTED_SEGS = 100


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.002)
    ap.add_argument("--pattern", default="xl-*-a*")
    ap.add_argument("--max-seconds", type=float, default=3600.0)
    ap.add_argument("--discover", type=float, default=0.0, help="seconds between dumps (0: every sample)")
    ap.add_argument(
        "--until-started",
        type=int,
        default=0,
        metavar="K",
        help="stop once K namespaces each hold a socket that has sent STARTED_SEGS segments (only the flows' starts are wanted)",
    )
    args = ap.parse_args()
    segs_at = FIELDS.index("data_segs_out")
    started: set[str] = set()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    socks: dict[str, TcpDiag] = {}
    t_end = time.monotonic() + args.max_seconds
    with open(args.out, "w") as out:
        out.write(",".join(("t_ns", "ns") + FIELDS) + "\n")
        every, tick = max(1, round(args.discover / args.interval)), 0
        while not stop and time.monotonic() < t_end:
            tick += 1
            present = set(fnmatch.filter(os.listdir("/run/netns") if os.path.isdir("/run/netns") else [], args.pattern))
            for ns in sorted(present - socks.keys()):
                try:
                    socks[ns] = TcpDiag(ns)
                except OSError:
                    pass
            for ns, s in socks.items():
                if ns not in present:
                    continue
                t = time.monotonic_ns()
                try:
                    rows = s.poll(discover=tick % every == 0)
                except OSError:
                    continue
                for row in rows:
                    out.write(f"{t},{ns}," + ",".join(str(v) for v in row) + "\n")
                    if row[segs_at] >= STARTED_SEGS:
                        started.add(ns)
            if args.until_started and len(started) >= args.until_started:
                break
            time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
