"""What a scenario asks of each host, and the changes that give it — each with its undo entry.

End hosts: the TCP socket buffer limits (``tcp_rmem``/``tcp_wmem`` maximum, raised only when
below what the path needs; under a window cap the receive buffer's set to the one whose window
is the cap), ``tcp_no_metrics_save`` = 1 (no ssthresh carried from one run to
the next), a module for a congestion control the kernel lacks (``modprobe``; the tools
choose it per socket, ``TCP_CONGESTION``: the host's default is left alone — in a container
or a network namespace only the "allowed" ones can be made the default), and a /32 route to
each peer carrying the scenario's TCP options (``initcwnd``, ``rto_min``, ``quickack`` when
delayed ACKs are off). The router: HTB at the bottleneck's rate
over a ``pfifo`` of B packets on its egress devices, offloads off there.

A sender with per-flow token buckets (``limiter: token_bucket``, seed 001's HTB limiter): an
``ifb`` device (:data:`IFB`) with one HTB class per flow (rate = ceil = the bucket's rate, its
burst, a ``pfifo``), and a ``clsact`` qdisc on the device the flow leaves by whose egress
filter redirects the flow's packets (its destination port) into the ifb. The packets come back
out of the ifb into that device's own root qdisc, which is left as it is (a NIC's ``mq``, a
router's shaping). Undone by deleting the clsact and the ifb.

Planning is pure: facts and needs in, changes out (:func:`changes`); the backend writes the
undo entries into the journal, then runs the commands.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from pydantic import ValidationError

from . import journal
from .facts import Facts, default_qdisc
from .grammar import host_route
from .shell import cmd


class PlanError(Exception):
    """A host that cannot be given what the scenario asks (said before anything changes)."""


@dataclass(frozen=True)
class Shaping:
    """A bottleneck on a router device: HTB class at ``rate_bps`` over ``pfifo limit buffer_pkts``."""

    dev: str
    rate_bps: float
    burst_bytes: int
    buffer_pkts: int
    frame_bytes: int  # a full-size frame as a qdisc counts it (MTU + 14)
    overhead: int  # bytes per frame a link spends beyond what a qdisc counts (24 on Ethernet)


#: The device a host's per-flow token buckets shape on (made by the run, deleted after).
IFB = journal.IFB
#: The first HTB class of the buckets on the ifb (``1:100``, ``1:101``…, tc's hex minors).
BUCKET_CLASS0 = 0x100


@dataclass(frozen=True)
class Bucket:
    """A flow's token bucket on its sender: the packets to ``peer``:``port`` held to ``rate_bps``
    with a bucket of ``burst_bytes`` (qdisc frames counted) over ``pfifo limit limit_pkts``."""

    peer: str  # the receiver's data address: its route names the device the flow leaves by
    port: int
    rate_bps: float
    burst_bytes: int
    frame_bytes: int
    limit_pkts: int


@dataclass
class Needs:
    """What the scenario asks of one host."""

    sock_buf_bytes: int | None = None
    #: The receive buffer's limit, exactly (a window cap: constants.rcv_buf_bytes).
    rcv_buf_bytes: int | None = None
    congestion_controls: list[str] = field(default_factory=list)  # the ones this host sends with
    peers: list[str] = field(default_factory=list)  # data addresses this host exchanges data or ACKs with
    initial_cwnd: int = 10
    rto_min_ms: int = 200
    quickack: bool = False
    shaping: list[Shaping] = field(default_factory=list)
    buckets: list[Bucket] = field(default_factory=list)


@dataclass(frozen=True)
class Change:
    what: str  # for the progress output and run.json
    command: str
    undo: dict  # the journal entry that undoes it


def changes(facts: Facts, needs: Needs, modprobe: bool) -> list[Change]:
    """The changes that give a host what it needs, or :class:`PlanError` naming what it lacks."""
    out = _modules(facts, needs, modprobe)
    out += _sysctls(facts, needs)
    out += _routes(facts, needs)
    for s in needs.shaping:
        out += _shaping(facts, s)
    out += _buckets(facts, needs.buckets)
    return out


def _modules(facts: Facts, needs: Needs, modprobe: bool) -> list[Change]:
    out = []
    for cc in needs.congestion_controls:
        if cc in facts.available_cc:
            continue
        if modprobe and cc in facts.loadable and "modprobe" in facts.tools:
            out.append(Change(f"load tcp_{cc}", cmd("modprobe", f"tcp_{cc}"), journal.module(f"tcp_{cc}")))
            continue
        how = "modprobe is not allowed (options.modprobe)" if not modprobe else f"no module tcp_{cc} to load"
        raise PlanError(
            f"{facts.host}: congestion control {cc} is not available (available: {' '.join(facts.available_cc) or 'none'}; {how})"
        )
    return out


def _set(facts: Facts, key: str, value: str) -> Change:
    proc = "/proc/sys/" + key.replace(".", "/")
    try:
        undo = journal.sysctl(key, facts.sysctls[key])
    except ValidationError:
        raise PlanError(f"{facts.host}: {key} reads {facts.sysctls[key]!r}, not a value xferlab can restore") from None
    return Change(f"{key} = {value}", cmd("printf", "%s\\n", value) + " > " + shlex.quote(proc), undo)


def _sysctls(facts: Facts, needs: Needs) -> list[Change]:
    out = []
    if needs.sock_buf_bytes:
        for key in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"):
            now = facts.sysctls.get(key, "").split()
            if len(now) != 3:
                raise PlanError(f"{facts.host}: cannot read {key} ({' '.join(now) or 'empty'})")
            rcv = needs.rcv_buf_bytes if key == "net.ipv4.tcp_rmem" else None
            if rcv is not None and int(now[2]) != rcv:
                # A window cap: this limit exactly, lower or higher than the host's.
                out.append(_set(facts, key, f"{min(int(now[0]), rcv)} {min(int(now[1]), rcv)} {rcv}"))
            elif rcv is None and int(now[2]) < needs.sock_buf_bytes:
                out.append(_set(facts, key, f"{now[0]} {now[1]} {needs.sock_buf_bytes}"))
    if needs.congestion_controls and facts.sysctls.get("net.ipv4.tcp_no_metrics_save") != "1":
        out.append(_set(facts, "net.ipv4.tcp_no_metrics_save", "1"))
    return out


def _routes(facts: Facts, needs: Needs) -> list[Change]:
    out = []
    for peer in needs.peers:
        r = facts.routes.get(peer) or {}
        via = r.get("get") or {}
        if "dev" not in via:
            raise PlanError(f"{facts.host}: no route to {peer} (its peer's data address)")
        args = [host_route(peer)] + [x for k in ("via", "dev", "src") if k in via for x in (k, via[k])]
        args += ["initcwnd", str(needs.initial_cwnd), "rto_min", f"{needs.rto_min_ms}ms"]
        if needs.quickack:
            args += ["quickack", "1"]
        opts = f"initcwnd {needs.initial_cwnd}, rto_min {needs.rto_min_ms} ms" + (", quickack" if needs.quickack else "")
        exact = r.get("exact")
        try:
            undo = journal.route(peer, exact.split() if exact else None)
        except ValidationError:
            raise PlanError(f"{facts.host}: its route to {peer} ({exact!r}) is not one xferlab can put back") from None
        out.append(Change(f"route to {peer}: {opts}", cmd("ip", "route", "replace", *args), undo))
    return out


def _shaping(facts: Facts, s: Shaping) -> list[Change]:
    line = facts.qdiscs.get(s.dev, "")
    if not line:
        raise PlanError(f"{facts.host}: no device {s.dev} (the inventory's router device)")
    if not default_qdisc(line):
        raise PlanError(
            f"{facts.host}: {s.dev} has a qdisc configured ({line}); xferlab installs the bottleneck only over the "
            "kernel's default, which it can restore: remove it first"
        )
    out = []
    on = [f for f, v in (facts.offloads.get(s.dev) or {}).items() if v]
    if on:
        # A queue of B packets must hold B wire packets, not 64 KB super-packets.
        off = cmd("ethtool", "-K", s.dev, *(w for f in on for w in (f, "off")))
        out.append(Change(f"{s.dev}: offloads {', '.join(on)} off", off, journal.offloads(s.dev, on)))
    rate = f"{int(round(s.rate_bps))}bit"
    cls = ["rate", rate, "ceil", rate, "burst", s.burst_bytes, "cburst", s.burst_bytes, "quantum", s.frame_bytes]
    cls += ["overhead", s.overhead, "mtu", max(1600, s.frame_bytes + s.overhead + 64)]
    install = " && ".join(
        [
            cmd("tc", "qdisc", "replace", "dev", s.dev, "root", "handle", "1:", "htb", "default", "1"),
            cmd("tc", "class", "add", "dev", s.dev, "parent", "1:", "classid", "1:1", "htb", *cls),
            cmd("tc", "qdisc", "add", "dev", s.dev, "parent", "1:1", "handle", "10:", "pfifo", "limit", s.buffer_pkts),
        ]
    )
    what = f"{s.dev}: bottleneck {s.rate_bps / 1e6:g} Mbit/s, pfifo {s.buffer_pkts} packets"
    out.append(Change(what, install, journal.qdisc(s.dev)))
    return out


def _buckets(facts: Facts, buckets: list[Bucket]) -> list[Change]:
    if not buckets:
        return []
    if "tc" not in facts.tools:
        raise PlanError(f"{facts.host}: per-flow token buckets (limiter: token_bucket) need tc, which the host lacks")
    if IFB in facts.ifbs:
        raise PlanError(f"{facts.host}: a device {IFB} exists already; remove it first (ip link del {IFB})")
    by_dev: dict[str, list[tuple[int, Bucket]]] = {}
    for i, b in enumerate(buckets):
        dev = ((facts.routes.get(b.peer) or {}).get("get") or {}).get("dev")
        if dev is None:
            raise PlanError(f"{facts.host}: no route to {b.peer} (its peer's data address)")
        by_dev.setdefault(dev, []).append((i, b))
    taken = [d for d in by_dev if facts.hooks.get(d)]
    if taken:
        raise PlanError(
            f"{facts.host}: {', '.join(taken)} has a clsact or ingress qdisc configured; xferlab adds its token buckets' "
            "redirection only where there is none, which it can remove: remove it first"
        )
    cmds = [cmd("ip", "link", "add", IFB, "type", "ifb"), cmd("ip", "link", "set", IFB, "up")]
    cmds.append(cmd("tc", "qdisc", "add", "dev", IFB, "root", "handle", "1:", "htb"))
    for i, b in enumerate(buckets):
        cid, rate = f"1:{BUCKET_CLASS0 + i:x}", f"{int(round(b.rate_bps))}bit"
        cls = ["rate", rate, "ceil", rate, "burst", b.burst_bytes, "cburst", b.burst_bytes, "quantum", b.frame_bytes]
        cmds += [
            cmd("tc", "class", "add", "dev", IFB, "parent", "1:", "classid", cid, "htb", *cls),
            cmd("tc", "qdisc", "add", "dev", IFB, "parent", cid, "pfifo", "limit", b.limit_pkts),
            cmd("tc", "filter", "add", "dev", IFB, "parent", "1:", *_port_match(b), "flowid", cid),
        ]
    shown = ", ".join(f"port {b.port} at {b.rate_bps / 1e6:g} Mbit/s" for b in buckets)
    out = [Change(f"{IFB}: token buckets, {shown}", " && ".join(cmds), journal.link(IFB))]
    for dev, bs in by_dev.items():
        redirect = ["action", "mirred", "egress", "redirect", "dev", IFB]
        steps = [cmd("tc", "qdisc", "add", "dev", dev, "clsact")]
        steps += [cmd("tc", "filter", "add", "dev", dev, "egress", *_port_match(b), *redirect) for _, b in bs]
        ports = ", ".join(str(b.port) for _, b in bs)
        try:
            undo = journal.clsact(dev)
        except ValidationError:
            raise PlanError(f"{facts.host}: its device {dev!r} has a name xferlab will not write into a journal") from None
        out.append(Change(f"{dev}: port(s) {ports} through {IFB}", " && ".join(steps), undo))
    return out


def _port_match(b: Bucket) -> list[str]:
    """A u32 filter's protocol and match on the bucket's destination port (IPv4 or IPv6)."""
    if ":" in b.peer:
        return ["protocol", "ipv6", "prio", "1", "u32", "match", "ip6", "dport", str(b.port), "0xffff"]
    return ["protocol", "ip", "prio", "1", "u32", "match", "ip", "dport", str(b.port), "0xffff"]
