"""Samples the senders' TCP_INFO in the netns backend's namespaces every few milliseconds.

    python benches/fidelity_tcpinfo.py --out samples.csv [--interval 0.002] [--pattern 'xl-*-a*']
        [--flows K (--until-started | --sparse 0.1)] [--discover inf]

Runs as root beside an emulation (benches/fidelity.py starts it): it opens a sock_diag
netlink socket in every namespace named like the pattern as soon as it appears
(/run/netns), then reads the established TCP sockets of each with their ``tcp_info`` and,
for BBR, ``tcp_bbr_info``, and writes one CSV row per socket and sample. iperf3 reports
TCP_INFO at most every 0.1 s, too coarse for a slow start of a few 10 ms round trips. It
runs until SIGTERM. Other emulations' namespaces may match too (the reader keeps the run
whose namespaces were seen last before its own run ended).

Each sample is a dump, which finds a socket the moment it opens but walks the host's whole
connection table: about 170 µs of CPU per namespace and sample here. ``--discover S``
reads a namespace's sockets by lookup once its transfer is under way (7 µs each;
xferlab.netns.tcpdiag) and dumps it every S seconds. ``--flows K`` names how many
namespaces will carry a transfer: ``--until-started`` stops once all K have one under way
(a run that only wants to know when its flows started), ``--sparse S`` samples every S
seconds once each has retransmitted (its start, slow start and first loss seen at the
full rate, the rest coarsely). The sampler is not free on a 2-core host: dumps every 2 ms
throughout cost a lone Reno flow at 10 ms with 0.2 BDP a third of its goodput, dumps every
0.1 s still 10–25 %, lookups every 0.1 s nothing measurable (VALIDATION.md §6, "Observers slow the
kernel"; docs/journal/validation-history.md, "The sampler's own cost"); benches/fidelity.py
samples with ``--discover inf --sparse 0.1``.

It writes the CSV header when it is ready (a second or three after its launch here):
xferlab.fidelity.kernel.start_sampler waits for it before the emulation starts.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
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
    ap.add_argument(
        "--discover",
        type=float,
        default=0.0,
        help="seconds between dumps once a namespace's transfer is under way, its sockets read by lookup "
        "in between (0: a dump every sample; inf: none)",
    )
    ap.add_argument("--flows", type=int, default=0, metavar="K", help="namespaces that will each carry a transfer")
    ap.add_argument(
        "--until-started",
        action="store_true",
        help="stop once the K namespaces each hold a transfer (STARTED_SEGS sent): only the flows' starts are wanted",
    )
    ap.add_argument(
        "--sparse",
        type=float,
        default=0.0,
        metavar="S",
        help="once the K transfers have each retransmitted, sample every S seconds",
    )
    args = ap.parse_args()
    if (args.until_started or args.sparse) and args.flows < 1:
        ap.error("--until-started and --sparse need --flows K")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with open(args.out, "w") as out:
        out.write(",".join(("t_ns", "ns") + FIELDS) + "\n")
        out.flush()  # the header says the sampler is ready (fidelity.kernel.start_sampler waits for it)
        sample(args, out, stop)
    return 0


def sample(args: argparse.Namespace, out, stop: list) -> None:
    """The sampling loop, one tick every ``args.interval`` on the monotonic clock (a late
    tick is not made up), or every ``args.sparse`` once every transfer has retransmitted.
    A namespace is dumped every tick until it holds a transfer, so its first segments are
    seen; from then on, with ``--discover S``, its sockets are read by lookup and dumped
    every S seconds."""
    segs_at, retrans_at = FIELDS.index("data_segs_out"), FIELDS.index("total_retrans")
    started: set[str] = set()
    lost: set[str] = set()
    socks: dict[str, TcpDiag] = {}
    every = max(1, round(args.discover / args.interval)) if math.isfinite(args.discover) else 0
    tick = 0
    t_next = time.monotonic_ns()
    t_end = t_next + round(args.max_seconds * 1e9)
    while not stop and t_next < t_end:
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
                rows = s.poll(discover=ns not in started or (every > 0 and tick % every == 0))
            except OSError:
                continue
            for row in rows:
                out.write(f"{t},{ns}," + ",".join(str(v) for v in row) + "\n")
                if row[segs_at] >= STARTED_SEGS:
                    started.add(ns)
                    if row[retrans_at] > 0:
                        lost.add(ns)
        # (counting the namespaces present: a void run's retry builds new ones)
        if args.until_started and len(started & present) >= args.flows:
            return
        sparse = args.sparse and len(lost & present) >= args.flows
        t_next = max(t_next + round((args.sparse if sparse else args.interval) * 1e9), time.monotonic_ns())
        time.sleep(max(0, t_next - time.monotonic_ns()) / 1e9)


if __name__ == "__main__":
    sys.exit(main())
