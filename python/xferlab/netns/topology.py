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

Namespaces, veths, addresses, routes, qdiscs, classes and filters are made over rtnetlink with
pyroute2 (one socket per namespace, opened as the namespace is created), offloads with its
ethtool ioctls, sysctls by writing ``/proc/sys`` from inside the namespace.  Two things stay
commands: the iptables rules (the delay line's NFQUEUE and the loss rule's ``statistic`` match
are xtables extensions, this kernel has no nft ``queue``, and pyroute2 speaks no xtables) and
the RPS mask (a sysfs file, and sysfs shows the namespace it was mounted in, so it takes the
fresh mount that ``ip netns exec`` makes).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from pyroute2 import IPRoute
from pyroute2.ethtool.ioctl import EthtoolError, IoctlEthtool
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.protocols import ETH_P_IP

from .. import constants
from . import host, qstats

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
    #: The receive buffer's limit when it differs (a window cap: constants.rcv_buf_bytes).
    rcv_buf_bytes: int | None = None
    token_buckets: list[FlowClass] = field(default_factory=list)


def _rate(bps: float) -> int:
    """A rate in bytes per second, as ``tc`` stores ``rate Nbit`` (N / 8, rounded down)."""
    return max(1, int(round(bps)) // 8)


#: What an Ethernet link spends per frame beyond what a qdisc counts (IP + 14-byte header):
#: preamble 8, FCS 4, inter-frame gap 12.  Links (access, bottleneck) count it, as the
#: simulator does; per-flow token buckets do not (seed 001's convention: qdisc frames).
WIRE_OVERHEAD = 24

#: tc handles (``major:minor`` is ``major << 16 | minor``): the HTB root ``1:``, the link's
#: class ``1:1``, the rest-of-traffic class ``1:2`` beside per-flow buckets ``1:100``…, and
#: the link's pfifo ``10:``.
HTB_ROOT, LINK_CLASS, REST_CLASS, BUCKET_CLASS0, LINK_FIFO = 0x10000, 0x10001, 0x10002, 0x10100, 0x100000

#: The offloads turned off on every veth, as feature-name patterns: what ``ethtool -K DEV
#: tso off gso off gro off tx off`` turns off (ethtool's ``off_flag_def``).
OFFLOADS = ("tx-tcp*-segmentation", "tx-generic-segmentation", "rx-gro", "tx-checksum-*")


def _link_class(rate_bps: float, burst: int, frame: int, overhead: int = WIRE_OVERHEAD) -> dict:
    """HTB class options of a link at ``rate_bps`` of wire time (``overhead`` bytes per frame)."""
    return {
        "rate": _rate(rate_bps),
        "burst": burst,
        "cburst": burst,
        "quantum": frame,
        "overhead": overhead,
        "mtu": max(1600, frame + overhead + 64),
    }


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
        """Creates everything; ``delay=False`` leaves out the delay line's rules (tests).

        What was created is in ``created`` as it goes: call :meth:`teardown` whatever happens."""
        with contextlib.ExitStack() as sockets:  # one rtnetlink socket per namespace, for the build
            nl: dict[str, IPRoute] = {}
            for name in self.namespaces():
                with _step(f"namespace {name}"):
                    self.created.append(name)  # first: teardown removes it even if creating it fails midway
                    try:
                        host.create_namespace(name)
                    except FileExistsError:
                        self.created.pop()  # not this run's: leave it
                        raise host.HostError(f"namespace {name} exists already") from None
                    nl[name] = sockets.enter_context(host.rtnl(name))
            with _step("routers and core link"):
                self._core(nl)
            for k, path in enumerate(self.spec.paths):
                for side, router in (("a", self.left), ("b", self.right)):
                    with _step(f"host {side}{k}"):
                        self._host(nl, router, side, k, path)
            for router in (self.left, self.right):
                with _step(f"bottleneck in {router}"):
                    self._bottleneck(nl[router])
        if delay:
            self._delay_rules()

    def _core(self, nl: dict[str, IPRoute]) -> None:
        """The routers (forwarding) and the core link between them, with routes across it."""
        for r in (self.left, self.right):
            nl[r].link("set", ifname="lo", state="up")
            host.set_sysctls(r, {"net.ipv4.ip_forward": "1"})
        nl[self.left].link("add", ifname="core", kind="veth", peer={"ifname": "core", "net_ns_fd": self.right})
        self._iface(nl[self.left], self.left, "core", "10.0.0.1", 30)
        self._iface(nl[self.right], self.right, "core", "10.0.0.2", 30)
        nl[self.left].route("add", dst="10.2.0.0/16", gateway="10.0.0.2")
        nl[self.right].route("add", dst="10.1.0.0/16", gateway="10.0.0.1")

    def _host(self, nl: dict[str, IPRoute], router: str, side: str, k: int, path: PathSpec) -> None:
        """Host ``side``/``k``: its veth to ``router`` (``h{k}`` there, ``eth0`` here), route,
        TCP sysctls, receive steering and access link."""
        hns = self.ns(side, k)
        nl[router].link("add", ifname=f"h{k}", kind="veth", peer={"ifname": "eth0", "net_ns_fd": hns})
        net = f"10.{1 if side == 'a' else 2}.{k}"
        self._iface(nl[router], router, f"h{k}", f"{net}.254", 24)
        eth0 = self._iface(nl[hns], hns, "eth0", f"{net}.1", 24)
        nl[hns].link("set", ifname="lo", state="up")
        self._default_route(nl[hns], eth0, f"{net}.254")
        self._tcp_sysctls(hns)
        self._access_link(nl[hns], eth0, hns, path.access_rate_bps)

    def _iface(self, nl: IPRoute, ns: str, dev: str, addr: str, prefixlen: int) -> int:
        """Addresses ``dev``, sets its MTU, brings it up, turns its offloads off and steers what
        it receives (steer_receive); its ifindex.

        Every veth end of the dumbbell comes through here, so none is left unsteered: at the
        end hosts, steering keeps their TCP off the delay line's CPU (docs/delayline.md
        "Punctuality": otherwise its verdict calls run the hosts' TCP and its lateness grows
        a hundredfold at 500 Mbit/s); at the routers, it keeps the path from reordering."""
        (link,) = nl.link("get", ifname=dev)
        index = link["index"]
        nl.addr("add", index=index, address=addr, prefixlen=prefixlen)
        nl.link("set", index=index, mtu=self.spec.mtu, state="up")
        # No super-packets: a queue of B packets must hold B wire packets (EMULATION.md).
        offloads_off(ns, dev)
        steer_receive(ns, dev)
        return index

    def _default_route(self, nl: IPRoute, eth0: int, gateway: str) -> None:
        """The host's default route, carrying its TCP knobs as route metrics (``ip route …
        initcwnd N rto_min T quickack 1``).  ``rto_min`` acts only when locked, as ``ip`` does."""
        s = self.spec
        metrics = {"initcwnd": s.initial_cwnd, "rto_min": max(1, round(s.rto_min_s * 1000)), "lock": 1 << RTAX_RTO_MIN}
        if not s.delayed_ack:
            metrics["quickack"] = 1
        nl.route("add", dst="0.0.0.0/0", gateway=gateway, oif=eth0, metrics=metrics)

    def _tcp_sysctls(self, ns: str) -> None:
        buf = int(self.spec.sock_buf_bytes)
        rcv = int(self.spec.rcv_buf_bytes or buf)
        host.set_sysctls(
            ns,
            {
                "net.ipv4.tcp_rmem": f"{min(4096, rcv)} {min(constants.RMEM_DEFAULT, rcv)} {rcv}",
                "net.ipv4.tcp_wmem": f"4096 16384 {buf}",
                "net.ipv4.tcp_no_metrics_save": "1",
                # iperf3 (3.12) chooses the congestion control after connect(): the socket is
                # set up with the namespace's default first, and a BBR default (these kernels')
                # turns on TCP's internal pacing, which stays on after the switch: every iperf3
                # flow was paced at 200 %/120 % of cwnd/srtt. Reno's setup leaves pacing off.
                "net.ipv4.tcp_congestion_control": "reno",
            },
        )

    def _frame(self) -> int:
        return self.spec.mtu + 14

    def _access_link(self, nl: IPRoute, eth0: int, ns: str, rate_bps: float) -> None:
        frame = self._frame()
        burst = max(10 * frame, int(rate_bps / 8 * 1e-3))  # 10 frames or 1 ms at the rate
        buckets = [b for b in self.spec.token_buckets if b.host == ns]
        # With per-flow token buckets under the link, the rest (ACKs, control) gets a leaf of its own, 1:2.
        nl.tc("add", "htb", eth0, HTB_ROOT, default=(REST_CLASS if buckets else LINK_CLASS) & 0xFFFF)
        nl.tc("add-class", "htb", eth0, LINK_CLASS, parent=HTB_ROOT, **_link_class(rate_bps, burst, frame))
        if not buckets:
            nl.tc("add", "pfifo", eth0, LINK_FIFO, parent=LINK_CLASS, limit=ACCESS_QUEUE)
            return
        leaves = [(REST_CLASS, 1e6, rate_bps, burst, None)]
        for i, b in enumerate(buckets):
            # A per-flow token bucket (seed 001's HTB limiter) under the access link.
            leaves.append((BUCKET_CLASS0 + i, b.rate_bps, b.rate_bps, b.burst_bytes, b.port))
        for cid, rate, ceil, bucket, port in leaves:
            nl.tc(
                "add-class",
                "htb",
                eth0,
                cid,
                parent=LINK_CLASS,
                rate=_rate(rate),
                ceil=_rate(ceil),
                burst=bucket,
                cburst=bucket,
                quantum=frame,
            )
            nl.tc("add", "pfifo", eth0, 0, parent=cid, limit=ACCESS_QUEUE)
            if port is not None:
                # u32 on the IPv4 destination port (``match ip dport PORT 0xffff``: a 20-byte IP
                # header, then the port at bytes 2-3 of the transport header).
                nl.tc(
                    "add-filter",
                    "u32",
                    eth0,
                    parent=HTB_ROOT,
                    prio=1,
                    protocol=ETH_P_IP,
                    target=cid,
                    keys=[f"0x{port:08x}/0x0000ffff+20"],
                )

    def _bottleneck(self, nl: IPRoute) -> None:
        s = self.spec
        frame = self._frame()
        burst = s.bottleneck_burst_bytes or BOTTLENECK_BURST_PKTS * frame
        (link,) = nl.link("get", ifname="core")
        core = link["index"]
        nl.tc("add", "htb", core, HTB_ROOT, default=LINK_CLASS & 0xFFFF)
        overhead = 0 if s.bottleneck_burst_bytes else WIRE_OVERHEAD
        nl.tc("add-class", "htb", core, LINK_CLASS, parent=HTB_ROOT, **_link_class(s.bottleneck_rate_bps, burst, frame, overhead))
        nl.tc("add", "pfifo", core, LINK_FIFO, parent=LINK_CLASS, limit=s.buffer_pkts)

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
        """Counters of the bottleneck queues (their pfifo): bytes, packets, drops, qlen, backlog."""
        links = (("bottleneck", self.left), ("reverse", self.right)) if reverse else (("bottleneck", self.left),)
        out = {}
        for name, router in links:
            q = qstats.qdisc_stats(router, "core")
            if q is not None:
                out[name] = q
        return out

    # Teardown -----------------------------------------------------------------------------
    def teardown(self) -> None:
        for name in reversed(self.created):
            host.delete_namespace(name)
        self.created.clear()


@contextlib.contextmanager
def _step(what: str) -> Iterator[None]:
    """Turns a netlink or ethtool error in a build step into one line, as `ip`/`tc` would say it."""
    try:
        yield
    except (NetlinkError, EthtoolError, OSError) as e:
        raise host.HostError(f"building the dumbbell: {what}: {e}") from e


#: Route metric numbers (linux/rtnetlink.h): the lock bit of ``rto_min``.
RTAX_RTO_MIN = 13


def offloads_off(ns: str, dev: str) -> None:
    """Turns off :data:`OFFLOADS` on ``dev`` in ``ns`` (ETHTOOL_SFEATURES, as ``ethtool -K``).

    Only features the device can change are asked for; turning a feature off never fails to
    take effect, so the kernel answers without ETHTOOL_F_WISH."""
    with host.in_namespace(ns):
        ethtool = IoctlEthtool(dev)  # its socket stays in ns
    try:
        features = ethtool.get_features()
        for name in list(features.keys()):
            if features.is_available(name) and any(fnmatch.fnmatchcase(name, p) for p in OFFLOADS):
                features[name] = False
        ethtool.set_features(features)
    finally:
        ethtool.close()


#: The CPU the delay line is pinned to; the end hosts' receive work goes to the others.
DELAY_CPU = 0


def rps_mask() -> str | None:
    """Hex mask of every CPU but the delay line's, or None on a single-CPU host."""
    cpus = sorted(os.sched_getaffinity(0))
    others = [c for c in cpus if c != DELAY_CPU]
    if not others or DELAY_CPU not in cpus:
        return None
    return format(sum(1 << c for c in others), "x")


def steer_receive(ns: str, dev: str) -> None:
    """Sends what ``dev`` receives in namespace ``ns`` to the CPUs of :func:`rps_mask` (RPS).

    RPS picks one CPU per flow, so a flow's packets are received in the order they were sent.
    Without it a veth hands each packet to the backlog of the CPU that sent it, and a TCP
    sender runs on more than one (its application's, its ACKs' softirq): the two backlogs
    are drained independently and the path reorders.  Every veth end that receives in a
    dumbbell is steered.  Measured on a 2-CPU machine (2026-11-27): tests/test_bpfcc.py's
    path saw 2–23 reorderings per 6 s run without, none with; fidelity case
    reno:50:1.0bdp:1 saw 320 in 30 s and carried 210 Mbit/s without, none and 281 Mbit/s
    with (the simulator, whose path never reorders: 282).  Best effort: a kernel without RPS
    keeps the default."""
    mask = rps_mask()
    if mask:
        host.sh(["sh", "-c", f"echo {mask} > /sys/class/net/{dev}/queues/rx-0/rps_cpus"], ns=ns, check=False)
