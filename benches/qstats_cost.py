"""What reading the bottleneck's qdisc counters costs, by hand-written rtnetlink and through
pyroute2, and how long building the emulated dumbbell takes (issue 12, item 5).

    sudo .venv/bin/python benches/qstats_cost.py [--pairs 4] [--ticks 1500] [--builds 5] [--no-write]
    sudo .venv/bin/python benches/qstats_cost.py --build-only     # any checkout: times Dumbbell.build

Sampling: one dumbbell of --pairs pairs (no delay line, no traffic: what a sample costs does
not depend on the counters' values) and three readers of the left router's ``core`` pfifo,
each with its socket open for the whole run, as the link sampler keeps them:

* ``QdiscReader``: the sampler's (the request packed and the answer walked with ``struct``);
* ``LibraryQdiscReader``: pyroute2's ``IPRoute.get_qdiscs`` (its ordinary API, asyncio inside);
* ``IPRSocket``: pyroute2's lowest-level socket, ``put``/``get``, its message parser only.

Every 20 ms (the finest link interval), each reader takes one sample, in rotating order, so
all three see the same load; the cost of a sample is its wall time (``perf_counter``).
Opening each reader is timed too.  Build: --builds dumbbells of --pairs pairs, built with
their delay-line rules and torn down, one after the other.

Prints tables and, unless --no-write, rewrites the "netns: qdisc sampling and dumbbell build"
section of BENCHMARKS.md.  Needs root; holds /run/xferlab/netns.lock while its xl-qsc*
namespaces exist.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import time
from pathlib import Path

from benchlib import machine
from xferlab.netns import host
from xferlab.netns import topology as topo

ROOT = Path(__file__).resolve().parent.parent

SECTION = "## netns: qdisc sampling and dumbbell build"
TICK_S = 0.020


def spec(run_id: str, pairs: int) -> topo.DumbbellSpec:
    return topo.DumbbellSpec(
        run_id=run_id, paths=[topo.PathSpec(100e6, 0.02)] * pairs, bottleneck_rate_bps=200e6, buffer_pkts=170, mtu=1500
    )


def stats_us(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {
        "n": len(xs),
        "min": xs[0] * 1e6,
        "median": statistics.median(xs) * 1e6,
        "p99": xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1e6,
        "max": xs[-1] * 1e6,
    }


def builds(pairs: int, count: int) -> list[float]:
    out = []
    for i in range(count):
        d = topo.Dumbbell(spec(f"qsc{i}", pairs))
        try:
            t0 = time.perf_counter()
            d.build()
            out.append(time.perf_counter() - t0)
        finally:
            d.teardown()
    return out


class IPRSocketReader:
    """The same dump through pyroute2's ``IPRSocket`` (no asyncio: put, then get until DONE)."""

    def __init__(self, ns: str, dev: str, kind: str = "pfifo"):
        from pyroute2 import IPRSocket

        self.kind = kind
        with host.in_namespace(ns):
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)
            self.ifindex = socket.if_nametoindex(dev)
        self.s = IPRSocket(use_socket=sock)

    def close(self) -> None:
        self.s.close()

    def read(self):
        from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE
        from pyroute2.netlink.rtnl import RTM_GETQDISC
        from pyroute2.netlink.rtnl.tcmsg import tcmsg

        stamp = time.monotonic()
        self.s.put(tcmsg(), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP)
        found = None
        while True:
            for msg in self.s.get():
                if msg["header"]["type"] == NLMSG_DONE:
                    return stamp, found
                if msg["index"] == self.ifindex and msg.get_attr("TCA_KIND") == self.kind:
                    st = msg.get_attr("TCA_STATS2")
                    basic, queue = st.get_attr("TCA_STATS_BASIC"), st.get_attr("TCA_STATS_QUEUE")
                    found = {"bytes": basic["bytes"], "packets": basic["packets"], "drops": queue["drops"]}
                    found |= {"qlen": queue["qlen"], "backlog": queue["backlog"]}


def sampling(pairs: int, ticks: int) -> tuple[dict, dict, int]:
    from xferlab.netns import qstats

    kinds = {
        "QdiscReader (struct, the sampler's)": qstats.QdiscReader,
        "LibraryQdiscReader (pyroute2 IPRoute.get_qdiscs)": qstats.LibraryQdiscReader,
        "pyroute2 IPRSocket put/get": IPRSocketReader,
    }
    d = topo.Dumbbell(spec("qsc", pairs))
    try:
        d.build(delay=False)
        opens = {name: [] for name in kinds}
        for _ in range(20):
            for name, cls in kinds.items():
                t0 = time.perf_counter()
                r = cls(d.left, "core")
                opens[name].append(time.perf_counter() - t0)
                r.close()
        readers = {name: cls(d.left, "core") for name, cls in kinds.items()}
        try:
            first = {name: r.read()[1] for name, r in readers.items()}
            assert len({repr(v) for v in first.values()}) == 1, first  # the three agree
            dumped = len(host.sh(["tc", "qdisc", "show"], ns=d.left).splitlines())
            costs = {name: [] for name in kinds}
            names = list(kinds)
            t0 = time.monotonic()
            for k in range(ticks):
                for j in range(len(names)):
                    name = names[(k + j) % len(names)]
                    c0 = time.perf_counter()
                    readers[name].read()
                    costs[name].append(time.perf_counter() - c0)
                delay = t0 + (k + 1) * TICK_S - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        finally:
            for r in readers.values():
                r.close()
    finally:
        d.teardown()
    return {n: stats_us(c) for n, c in costs.items()}, {n: stats_us(o) for n, o in opens.items()}, dumped


def fmt(s: dict) -> str:
    return f"{s['min']:.0f} | {s['median']:.0f} | {s['p99']:.0f} | {s['max']:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--ticks", type=int, default=1500, help="20 ms ticks; each reader samples once per tick")
    ap.add_argument("--builds", type=int, default=5)
    ap.add_argument("--build-only", action="store_true", help="only time Dumbbell.build (works on older checkouts)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    host.require_root()
    with host.host_lock():
        load0 = os.getloadavg()
        build_s = builds(a.pairs, a.builds)
        listed = ", ".join(f"{b:.3f}" for b in build_s)
        print(f"build of {a.pairs} pairs: {listed} s (median {statistics.median(build_s):.3f})")
        if a.build_only:
            return
        costs, opens, dumped = sampling(a.pairs, a.ticks)
        load1 = os.getloadavg()
    import pyroute2

    hand = costs["QdiscReader (struct, the sampler's)"]["median"]
    rows = []
    for name, s in costs.items():
        ratio = s["median"] / hand
        share = 2 * s["median"] * 1e-6 / TICK_S * 100  # both links, every 20 ms
        rows.append(f"| {name} | {fmt(s)} | {ratio:.1f}× | {share:.2f} % | {opens[name]['median'] / 1e3:.2f} ms |")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    text = "\n".join(
        [
            SECTION,
            "",
            f"Command: `sudo .venv/bin/python benches/qstats_cost.py --pairs {a.pairs} --ticks {a.ticks} --builds {a.builds}`. "
            f"Machine: {machine()}, pyroute2 {pyroute2.__version__}, commit {commit}. Load average (1 min) "
            f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end (the machine is shared).",
            "",
            f"**Sampling** the left router's bottleneck pfifo ({a.pairs} pairs: the dump returns {dumped} qdiscs), "
            f"{a.ticks} samples per reader, one per reader every 20 ms in rotating order; µs per sample "
            "(wall time). *Share* is one core's time for sampling both bottleneck links every 20 ms.",
            "",
            "| reader | min | median | p99 | max | × struct | share | open |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            f"**Build** of a {a.pairs}-pair dumbbell with its delay-line rules (`Dumbbell.build`), {a.builds} in a row: "
            + ", ".join(f"{b:.3f}" for b in build_s)
            + f" s (median {statistics.median(build_s):.3f} s).",
            "",
        ]
    )
    print(text)
    if not a.no_write:
        path = ROOT / "BENCHMARKS.md"
        doc = path.read_text()
        pattern = re.compile(re.escape(SECTION) + r"\n.*?(?=\n## |\Z)", re.S)
        doc = pattern.sub(lambda _: text.rstrip("\n"), doc) if pattern.search(doc) else doc.rstrip("\n") + "\n\n" + text
        path.write_text(doc if doc.endswith("\n") else doc + "\n")


if __name__ == "__main__":
    main()
