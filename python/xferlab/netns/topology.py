"""The emulated dumbbell: namespaces, veths, qdiscs, routes and the delay line's rules.

::

    a0 ─┐                                              ┌─ b0
    a1 ─┤ h* ── L ══ core (bottleneck C, pfifo B) ══ R ── h* ├─ b1
    …   ┘          ⇐ core (reverse bottleneck) ⇐          └─ …
                                  R: FORWARD -i core → loss → NFQUEUE (delay line)

Host ``a{k}`` (left) and ``b{k}`` (right) form pair ``k``: forward transfers go a→b,
reverse traffic b→a.  Each host's egress is an HTB access link at its rate with a
``pfifo`` of 1000 packets; each router's ``core`` egress is the bottleneck: an HTB class
at C (a small explicit burst) over a ``pfifo limit B``, drop-tail in packets, in both
directions.  Every packet leaving the bottleneck towards the right side is delayed by its
pair's full RTT in the right router (NFQUEUE, the project's delay line), so the delay adds
no loss and leaves B alone, and every connection, forward or reverse, sees its pair's RTT
once per round trip.  Bernoulli loss, when asked, is an iptables ``statistic`` rule just
before the delay line.

All names carry the run's prefix (``xl-<id>-``) so a crashed run's leftovers can be found.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

from . import host

#: Packets of queue on each access link (the seeds' hosts: txqueuelen 1000).
ACCESS_QUEUE = 1000
#: HTB burst of the bottleneck in full-size frames (EMULATION.md: ~20 packets).
BOTTLENECK_BURST_PKTS = 20
MAX_PAIRS = 250


@dataclass
class PathSpec:
    access_rate_bps: float
    rtt_s: float


@dataclass
class FlowClass:
    """A per-flow token bucket on a host's access link (matched on the flow's port)."""

    host: str
    port: int
    rate_bps: float
    burst_bytes: int


@dataclass
class DumbbellSpec:
    run_id: str
    paths: list[PathSpec]
    bottleneck_rate_bps: float
    buffer_pkts: int
    mtu: int
    loss_rate: float = 0.0
    #: A shaper (token bucket on a faster line) instead of a link: its burst, counting qdisc frames.
    bottleneck_burst_bytes: int | None = None
    initial_cwnd: int = 10
    rto_min_s: float = 0.2
    delayed_ack: bool = True
    kernel_cc: str = "cubic"
    sock_buf_bytes: int = 16 << 20
    token_buckets: list[FlowClass] = field(default_factory=list)


def _rate(bps: float) -> str:
    return f"{max(1, int(round(bps)))}bit"


#: What an Ethernet link spends per frame beyond what a qdisc counts (IP + 14-byte header):
#: preamble 8, FCS 4, inter-frame gap 12.  Links (access, bottleneck) count it, as the
#: simulator does; per-flow token buckets do not (seed 001's convention: qdisc frames).
WIRE_OVERHEAD = 24


def _link_class(rate_bps: float, burst: int, frame: int, overhead: int = WIRE_OVERHEAD) -> list[str]:
    """HTB class options of a link at ``rate_bps`` of wire time (``overhead`` bytes per frame)."""
    return ["rate", _rate(rate_bps), "burst", str(burst), "cburst", str(burst), "quantum", str(frame)] + [
        "overhead",
        str(overhead),
        "mtu",
        str(max(1600, frame + overhead + 64)),
    ]


class Dumbbell:
    """Builds (``build``) and removes (``teardown``) one emulated dumbbell."""

    def __init__(self, spec: DumbbellSpec):
        if not spec.paths:
            raise host.HostError("a dumbbell needs at least one pair")
        if len(spec.paths) > MAX_PAIRS:
            raise host.HostError(f"the netns backend builds at most {MAX_PAIRS} pairs (asked for {len(spec.paths)})")
        self.spec = spec
        self.prefix = f"{host.PREFIX}{spec.run_id}-"
        self.left = self.prefix + "L"
        self.right = self.prefix + "R"
        self.created: list[str] = []
        #: queue number → delay in seconds (one queue per distinct RTT)
        self.queues: dict[int, float] = {}

    # Names and addresses ------------------------------------------------------------------
    def ns(self, side: str, k: int) -> str:
        return f"{self.prefix}{side}{k}"

    @staticmethod
    def addr(side: str, k: int) -> str:
        return f"10.{1 if side == 'a' else 2}.{k}.1"

    def namespaces(self) -> list[str]:
        n = len(self.spec.paths)
        return [self.left, self.right] + [self.ns(s, k) for k in range(n) for s in ("a", "b")]

    # Build --------------------------------------------------------------------------------
    def build(self, delay: bool = True) -> None:
        """Creates everything; ``delay=False`` leaves out the delay line's rules (tests)."""
        s = self.spec
        for name in self.namespaces():
            host.sh(["ip", "netns", "add", name])
            self.created.append(name)
        for r in (self.left, self.right):
            host.sh(["ip", "-n", r, "link", "set", "lo", "up"])
            host.sh(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"], ns=r)
        # The core link between the routers.
        host.sh(["ip", "link", "add", "core", "netns", self.left, "type", "veth", "peer", "name", "core", "netns", self.right])
        self._iface(self.left, "core", "10.0.0.1/30")
        self._iface(self.right, "core", "10.0.0.2/30")
        host.sh(["ip", "-n", self.left, "route", "add", "10.2.0.0/16", "via", "10.0.0.2"])
        host.sh(["ip", "-n", self.right, "route", "add", "10.1.0.0/16", "via", "10.0.0.1"])
        for k, path in enumerate(s.paths):
            for side, router in (("a", self.left), ("b", self.right)):
                hns = self.ns(side, k)
                host.sh(["ip", "link", "add", f"h{k}", "netns", router, "type", "veth", "peer", "name", "eth0", "netns", hns])
                net = f"10.{1 if side == 'a' else 2}.{k}"
                self._iface(router, f"h{k}", f"{net}.254/24")
                self._iface(hns, "eth0", f"{net}.1/24")
                host.sh(["ip", "-n", hns, "link", "set", "lo", "up"])
                route = ["ip", "-n", hns, "route", "add", "default", "via", f"{net}.254", "dev", "eth0"]
                route += ["initcwnd", str(s.initial_cwnd), "rto_min", f"{max(1, round(s.rto_min_s * 1000))}ms"]
                if not s.delayed_ack:
                    route += ["quickack", "1"]
                host.sh(route)
                self._tcp_sysctls(hns)
                self._steer(hns)
                self._access_link(hns, path.access_rate_bps, side)
        self._bottleneck(self.left)
        self._bottleneck(self.right)
        if delay:
            self._delay_rules()

    def _iface(self, ns: str, dev: str, cidr: str) -> None:
        host.sh(["ip", "-n", ns, "addr", "add", cidr, "dev", dev])
        host.sh(["ip", "-n", ns, "link", "set", dev, "mtu", str(self.spec.mtu), "up"])
        # No super-packets: a queue of B packets must hold B wire packets (EMULATION.md).
        host.sh(["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off"], ns=ns, check=False)

    def _steer(self, ns: str) -> None:
        """Sends the host's receive processing (its TCP) to CPUs other than the delay line's
        (docs/delayline.md "Punctuality": otherwise the delay line's verdict calls run the
        end hosts' TCP and its lateness grows a hundredfold at 500 Mbit/s)."""
        mask = rps_mask()
        if mask:
            host.sh(["sh", "-c", f"echo {mask} > /sys/class/net/eth0/queues/rx-0/rps_cpus"], ns=ns, check=False)

    def _tcp_sysctls(self, ns: str) -> None:
        s = self.spec
        buf = str(int(s.sock_buf_bytes))
        for key, value in (
            ("net.ipv4.tcp_rmem", f"4096 131072 {buf}"),
            ("net.ipv4.tcp_wmem", f"4096 16384 {buf}"),
            ("net.ipv4.tcp_no_metrics_save", "1"),
        ):
            host.sh(["sysctl", "-q", "-w", f"{key}={value}"], ns=ns)

    def _frame(self) -> int:
        return self.spec.mtu + 14

    def _access_link(self, ns: str, rate_bps: float, side: str) -> None:
        frame = self._frame()
        burst = max(10 * frame, int(rate_bps / 8 * 1e-3))  # 10 frames or 1 ms at the rate
        tc = ["tc", "-n", ns]
        buckets = [b for b in self.spec.token_buckets if b.host == ns]
        # With per-flow token buckets under the link, the rest (ACKs, control) gets a leaf of its own, 1:2.
        host.sh(tc + ["qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "2" if buckets else "1"])
        host.sh(
            tc + ["class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb"] + _link_class(rate_bps, burst, frame)
        )
        if not buckets:
            host.sh(tc + ["qdisc", "add", "dev", "eth0", "parent", "1:1", "handle", "10:", "pfifo", "limit", str(ACCESS_QUEUE)])
            return
        leaves = [("1:2", 1e6, rate_bps, burst, None)]
        for i, b in enumerate(buckets):
            # A per-flow token bucket (seed 001's HTB limiter) under the access link.
            leaves.append((f"1:{100 + i}", b.rate_bps, b.rate_bps, b.burst_bytes, b.port))
        for cid, rate, ceil, bucket, port in leaves:
            host.sh(
                tc
                + [
                    "class",
                    "add",
                    "dev",
                    "eth0",
                    "parent",
                    "1:1",
                    "classid",
                    cid,
                    "htb",
                    "rate",
                    _rate(rate),
                    "ceil",
                    _rate(ceil),
                ]
                + ["burst", str(bucket), "cburst", str(bucket), "quantum", str(frame)]
            )
            host.sh(tc + ["qdisc", "add", "dev", "eth0", "parent", cid, "pfifo", "limit", str(ACCESS_QUEUE)])
            if port is not None:
                host.sh(
                    tc
                    + ["filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32"]
                    + ["match", "ip", "dport", str(port), "0xffff", "flowid", cid]
                )

    def _bottleneck(self, router: str) -> None:
        s = self.spec
        frame = self._frame()
        burst = s.bottleneck_burst_bytes or BOTTLENECK_BURST_PKTS * frame
        tc = ["tc", "-n", router]
        host.sh(tc + ["qdisc", "add", "dev", "core", "root", "handle", "1:", "htb", "default", "1"])
        host.sh(
            tc
            + ["class", "add", "dev", "core", "parent", "1:", "classid", "1:1", "htb"]
            + _link_class(s.bottleneck_rate_bps, burst, frame, 0 if s.bottleneck_burst_bytes else WIRE_OVERHEAD)
        )
        host.sh(tc + ["qdisc", "add", "dev", "core", "parent", "1:1", "handle", "10:", "pfifo", "limit", str(s.buffer_pkts)])

    def _delay_rules(self) -> None:
        s = self.spec
        by_rtt: dict[float, int] = {}
        ipt = ["iptables", "-w"]
        if s.loss_rate > 0:
            host.sh(
                ipt
                + ["-A", "FORWARD", "-i", "core", "-m", "statistic", "--mode", "random"]
                + ["--probability", f"{s.loss_rate:.10f}", "-j", "DROP"],
                ns=self.right,
            )
        for k, path in enumerate(s.paths):
            q = by_rtt.setdefault(round(path.rtt_s, 9), len(by_rtt))
            self.queues[q] = path.rtt_s
            # Everything that crossed the bottleneck towards pair k's right host: forward
            # data and the ACKs of reverse traffic.  No --queue-bypass: if the delay line
            # dies, packets are dropped (a visible failure), never silently undelayed.
            host.sh(
                ipt + ["-A", "FORWARD", "-i", "core", "-d", f"10.2.{k}.0/24", "-j", "NFQUEUE", "--queue-num", str(q)],
                ns=self.right,
            )

    # Observation --------------------------------------------------------------------------
    def bottleneck_stats(self, reverse: bool = True) -> dict[str, dict]:
        """Counters of the bottleneck queues (``tc -s``): bytes, packets, drops, backlog (qlen)."""
        out = {}
        links = (("bottleneck", self.left), ("reverse", self.right)) if reverse else (("bottleneck", self.left),)
        for name, router in links:
            text = host.sh(["tc", "-s", "-j", "-n", router, "qdisc", "show", "dev", "core"], check=False)
            try:
                qdiscs = json.loads(text or "[]")
            except ValueError:
                continue
            leaf = next((q for q in qdiscs if q.get("kind") == "pfifo"), None)
            if leaf is not None:
                out[name] = leaf
        return out

    # Teardown -----------------------------------------------------------------------------
    def teardown(self) -> None:
        for name in reversed(self.created):
            host.delete_namespace(name)
        self.created.clear()


#: The CPU the delay line is pinned to; the end hosts' receive work goes to the others.
DELAY_CPU = 0


def rps_mask() -> str | None:
    """Hex mask of every CPU but the delay line's, or None on a single-CPU host."""
    cpus = sorted(os.sched_getaffinity(0))
    others = [c for c in cpus if c != DELAY_CPU]
    if not others or DELAY_CPU not in cpus:
        return None
    return format(sum(1 << c for c in others), "x")


def sock_buf_bytes(rate_bps: float, rtt_s: float, buffer_pkts: int, mtu: int, cap_pkts: int | None, mss: int) -> int:
    """Socket buffer limit: room for the path's BDP plus the bottleneck buffer, twice over
    (Linux counts skb overhead against the buffer), or the scenario's window cap."""
    if cap_pkts is not None:
        return int(2 * cap_pkts * mss)
    bdp = rate_bps * rtt_s / 8
    return int(max(4 << 20, 4 * (math.ceil(bdp) + buffer_pkts * mtu)))
