"""What reading a namespace's TCP sockets over sock_diag costs: a dump against a lookup.

    sudo .venv/bin/python benches/tcpdiag_cost.py [--sockets 2] [--reads 2000] [--busy]

One namespace (lo only) with --sockets connected pairs over loopback (--busy: each pair
moves data all along, as a transfer's sender does). One ``TcpDiag`` reads them --reads
times each way, interleaved (dump, then one lookup per socket): ``find`` (a dump, which
walks the host's whole established hash table) and ``lookup`` (one probe per socket). Per
read, the CPU time of the reading thread (``thread_time``) and the wall time, min / median /
p99 in µs. The window watch of the netns backend dumps every 0.1 s and looks up every 2 ms
(xferlab.netns.bpfcc). Needs root; holds /run/xferlab/netns.lock while its namespace exists.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchlib import machine
from xferlab.netns import host, tcpdiag

ROOT = Path(__file__).resolve().parent.parent

NS = f"{host.PREFIX}diagcost"
PORT = 5990


def pairs(n: int, busy: bool, stop: threading.Event) -> list[socket.socket]:
    """n connected pairs in NS; with ``busy``, a thread per pair sends until ``stop``."""
    socks = []
    with host.in_namespace(NS):
        srv = socket.create_server(("127.0.0.1", PORT), backlog=n)
        for _ in range(n):
            c = socket.create_connection(("127.0.0.1", PORT))
            a, _ = srv.accept()
            socks += [c, a]
    srv.close()
    if busy:
        for c, a in zip(socks[::2], socks[1::2], strict=True):
            threading.Thread(target=_pump, args=(c, a, stop), daemon=True).start()
    return socks


def _pump(c: socket.socket, a: socket.socket, stop: threading.Event) -> None:
    threading.Thread(target=lambda: [None for _ in iter(lambda: a.recv(1 << 16), b"")], daemon=True).start()
    data = bytes(1 << 14)
    while not stop.is_set():
        c.send(data)
        time.sleep(0.0005)


def timed(f) -> tuple[float, float]:
    c0, w0 = time.thread_time(), time.perf_counter()
    f()
    return 1e6 * (time.thread_time() - c0), 1e6 * (time.perf_counter() - w0)


def stats(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"{xs[0]:.0f} / {statistics.median(xs):.0f} / {xs[int(0.99 * (len(xs) - 1))]:.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sockets", type=int, default=2, help="connected pairs (each pair is two sockets)")
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--busy", action="store_true")
    args = ap.parse_args()
    stop = threading.Event()
    with host.host_lock():
        if NS in host.namespaces():
            host.delete_namespace(NS)
        host.create_namespace(NS)
        try:
            subprocess.run(["ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up"], check=True)
            socks = pairs(args.sockets, args.busy, stop)
            dump, look = [], []
            with tcpdiag.TcpDiag(NS) as d:
                ids = list(d.find())
                for _ in range(args.reads):
                    dump.append(timed(d.find))
                    look.append(timed(lambda: [d.lookup(i) for i in ids]))
            stop.set()
            for s in socks:
                s.close()
        finally:
            host.delete_namespace(NS)
    per = len(ids)
    print(f"{machine()}; load {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print(f"{per} sockets, {'busy' if args.busy else 'idle'}, {args.reads} reads each; µs min / median / p99")
    print("| read | CPU | wall |\n|---|---:|---:|")
    print(f"| dump (all {per} sockets) | {stats([c for c, _ in dump])} | {stats([w for _, w in dump])} |")
    print(f"| lookup (per socket) | {stats([c / per for c, _ in look])} | {stats([w / per for _, w in look])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
