"""The host and path check's findings (``xferlab advise --probe``, docs/advisor.md): the
classic misconfigurations of a bulk transfer's two hosts, each with its concrete fix, from
the facts and figures :mod:`xferlab.advisor.probe` gathered. Pure functions of them.

The socket buffers are judged against what :mod:`xferlab.advisor.apply` says a stream of
the configuration needs (one place for that rule), on the end that uses them: the
receiver's ``tcp_rmem``, the sender's ``tcp_wmem`` (and the ``*mem_max`` caps that bound
the buffers an application sets itself). The congestion control, pacing and offloads are
the sender's business, the MTU both ends'.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field

from .. import variants
from . import apply
from .candidates import Config
from .present import goodput_text as format_rate
from .probe import End, Measured, Probed
from .question import Question

#: A single stream that reaches less than this share of N streams' goodput is limited.
ONE_STREAM_SHARE = 0.7
#: TCP paces itself (no fq qdisc needed) from this kernel on.
INTERNAL_PACING = (4, 13)
#: A retransmission rate from which loss, not the window, limits a stream (Mathis et al.).
LOSS_LIMITS = 1e-4
#: The MTU below which a path carries less than an Ethernet frame's payload.
ETHERNET_MTU = 1500
#: From this rate on, the offloads matter.
OFFLOADS_MATTER = 1e9
#: Severities, worst first.
SEVERITIES = ("problem", "warning", "ok")


@dataclass(frozen=True)
class Finding:
    severity: str  # one of SEVERITIES
    host: str  # the inventory name it is about, or "path"
    what: str  # one sentence
    fix: list[str] = field(default_factory=list)  # commands, as root on ``host``

    def as_dict(self) -> dict:
        return asdict(self)


def findings(p: Probed, q: Question, c: Config) -> list[Finding]:
    """Every finding for configuration ``c`` on the path ``q`` describes (its RTT and
    bottleneck: given, or measured), worst first."""
    out = buffers(p.receiver, p.sender, q, c, p.measured)
    out += congestion_control(p.sender, c.variant)
    out += pacing(p.sender, c)
    out += mtu(p.sender, p.receiver)
    out += offloads(p.sender, q) + offloads(p.receiver, q)
    out += streams(p.measured)
    return sorted(out, key=lambda f: SEVERITIES.index(f.severity))


def sysctl_max(e: End, key: str) -> int | None:
    """A buffer sysctl's largest value (the third of tcp_rmem's, or the one of rmem_max)."""
    words = e.facts.sysctls.get(key, "").split()
    return int(words[-1]) if words and words[-1].isdigit() else None


def buffers(receiver: End, sender: End, q: Question, c: Config, m: Measured) -> list[Finding]:
    """The receiver's tcp_rmem and the sender's tcp_wmem against the buffer a stream of
    ``c`` needs (:func:`apply.socket_buffer_bytes`); rmem_max and wmem_max as caps on the
    buffers an application sets itself (``xfer --rcvbuf``, ``iperf3 -w``)."""
    need = apply.socket_buffer_bytes(q, c)
    fixes = {name: (value, why) for name, value, why in apply.sysctls(q, c)}
    who = f"each of {streams_text(c.streams)}" if c.streams > 1 else "a stream"
    rule = (
        f"{who} needs {_bytes(need)} for its share of the window, 2 × (BDP + bottleneck buffer) / streams at "
        f"{format_rate(q.bottleneck_bps)} and {q.rtt_s * 1e3:.1f} ms"
    )
    out = []
    for e, key, severity in (
        (receiver, "net.ipv4.tcp_rmem", "problem"),
        (sender, "net.ipv4.tcp_wmem", "problem"),
        (receiver, "net.core.rmem_max", "warning"),
        (sender, "net.core.wmem_max", "warning"),
    ):
        have = sysctl_max(e, key)
        if have is None or have >= need:
            continue
        what = f"{key}'s maximum is {_bytes(have)}: {rule}"
        if key.endswith("_rmem") and m.rtt_s:
            what += f"; its window (about half) holds one stream to {format_rate(have / 2 * 8 / m.rtt_s)} at this RTT"
        elif key.startswith("net.core"):
            what = f"{key} is {_bytes(have)}, below the {_bytes(need)} a stream needs: it caps buffers an application sets itself"
        out.append(Finding(severity, e.name, what, [apply.sysctl_line(key, fixes[key][0])]))
    return out


def congestion_control(sender: End, variant: str) -> list[Finding]:
    """Whether the sender can use ``variant``: built in, a module to load, or missing; and
    whether a user other than root may choose it (tcp_allowed_congestion_control)."""
    cc, f = variants.canonical(variant), sender.facts
    if cc in f.available_cc:
        out = [Finding("ok", sender.name, f"congestion control {cc} is available")]
    elif cc in f.loadable:
        out = [Finding("warning", sender.name, f"congestion control {cc} is a module not loaded yet", [f"modprobe tcp_{cc}"])]
    elif not f.available_cc:
        return [Finding("warning", sender.name, f"the available congestion controls could not be read ({cc} is wanted)")]
    else:
        have = " ".join(f.available_cc)
        return [Finding("problem", sender.name, f"the kernel has no congestion control {cc} (it has: {have}); choose another")]
    allowed = f.sysctls.get("net.ipv4.tcp_allowed_congestion_control", "").split()
    if allowed and cc not in allowed:
        value = " ".join(allowed + [cc])
        out.append(
            Finding(
                "warning",
                sender.name,
                f"{cc} is not in tcp_allowed_congestion_control ({' '.join(allowed)}): only root may choose it (xfer --cc)",
                [apply.sysctl_line("net.ipv4.tcp_allowed_congestion_control", value)],
            )
        )
    return out


def kernel_version(text: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def pacing(sender: End, c: Config) -> list[Finding]:
    """How the sender can pace: the fq qdisc on the device its route leaves by, or TCP's
    internal pacing (Linux ≥ 4.13); a paced configuration or BBR without either is a problem."""
    dev, qdisc = sender.device, sender.facts.route_qdiscs.get(sender.peer, "")
    fq = f"tc qdisc replace dev {shlex.quote(dev)} root fq" if dev else "tc qdisc replace dev DEV root fq"
    if qdisc.startswith("qdisc fq "):
        return [Finding("ok", sender.name, f"pacing: the fq qdisc on {dev} paces every flow")]
    version = kernel_version(sender.facts.kernel)
    root = qdisc.split()[1] if len(qdisc.split()) > 1 else "unknown"
    if version is not None and version >= INTERNAL_PACING:
        return [
            Finding(
                "ok",
                sender.name,
                f"pacing: TCP paces itself (kernel {sender.facts.kernel} ≥ 4.13: internal pacing); {dev}'s root qdisc is "
                f"{root}, not fq, which would pace with less CPU at high rates ({fq})",
            )
        ]
    severity = "problem" if c.pacing or c.variant == "bbr" else "warning"
    return [
        Finding(
            severity, sender.name, f"pacing: kernel {sender.facts.kernel or '?'} is older than 4.13 and {dev} has no fq", [fq]
        )
    ]


def mtu(sender: End, receiver: End) -> list[Finding]:
    """Each end's route device MTU: below Ethernet's 1500, or different at the two ends."""
    out, mtus = [], {}
    for e in (sender, receiver):
        value = e.facts.mtus.get(e.peer)
        if value is None:
            continue
        mtus[e.name] = value
        if value < ETHERNET_MTU:
            fix = [f"ip link set dev {shlex.quote(e.device)} mtu {ETHERNET_MTU}"] if e.device else []
            out.append(
                Finding(
                    "warning",
                    e.name,
                    f"{e.device}'s MTU is {value}: smaller packets, more of them per byte (if the path carries 1500)",
                    fix,
                )
            )
    if len(set(mtus.values())) > 1:
        shown = ", ".join(f"{n} {v}" for n, v in mtus.items())
        out.append(
            Finding("warning", "path", f"the two ends' MTUs differ ({shown}): the larger end relies on path MTU discovery")
        )
    return out


def offloads(e: End, q: Question) -> list[Finding]:
    """TSO, GSO and GRO on the device the route leaves by: off, each packet costs the CPU,
    which a path of :data:`OFFLOADS_MATTER` or more feels."""
    off = [k for k, on in (e.facts.offloads.get(e.device or "") or {}).items() if not on]
    if not off:
        return []
    words = " ".join(f"{k} on" for k in off)
    what = f"offloads {', '.join(off)} are off on {e.device}: every packet costs the CPU"
    if q.bottleneck_bps < OFFLOADS_MATTER:
        return [Finding("ok", e.name, f"{what}, which {format_rate(q.bottleneck_bps)} does not feel (Gbit/s would)")]
    return [Finding("warning", e.name, f"{what} (it limits rates of Gbit/s)", [f"ethtool -K {shlex.quote(e.device)} {words}"])]


def streams(m: Measured) -> list[Finding]:
    """One stream against N: far below, a stream is limited by its window (no loss) or by
    loss; loss seen is said with its rate."""
    out = []
    one, many = m.one, m.many
    if one is not None and many is not None and one.goodput_bps < ONE_STREAM_SHARE * many.goodput_bps:
        shares = f"1 stream {format_rate(one.goodput_bps)}, {many.streams} streams {format_rate(many.goodput_bps)}"
        if one.loss >= LOSS_LIMITS:
            why = (
                f"loss limits a single stream ({one.loss:.2%} retransmitted): use {many.streams} streams, "
                "or a variant loss does not slow (bbr)"
            )
        else:
            why = f"a single stream is window-limited: raise the buffers (above) or use {many.streams} streams"
        out.append(Finding("warning", "path", f"{shares}: {why}"))
    for t in (one, many):
        if t is not None and t.retransmissions:
            out.append(
                Finding(
                    "ok",
                    "path",
                    f"{streams_text(t.streams)}: {t.retransmissions} segment(s) retransmitted ({t.loss:.3%}): "
                    "a loss-based TCP filling the bottleneck's queue loses some; more, at a rate below the path's, is the path's",
                )
            )
    return out


def streams_text(n: int) -> str:
    return f"{n} stream{'s' if n > 1 else ''}"


def _bytes(n: int) -> str:
    return f"{n / (1 << 20):.3g} MiB" if n >= 1 << 20 else f"{n / 1024:.4g} KiB"


def report(p: Probed, found: list[Finding]) -> dict:
    """The check as JSON: the hosts' facts, the measured path and the findings."""
    return {
        "hosts": {
            e.name: {**e.facts.dump(), "device": e.device, "mtu": e.facts.mtus.get(e.peer)} for e in (p.sender, p.receiver)
        },
        "measured": p.measured.as_dict(),
        "findings": [f.as_dict() for f in found],
    }


def measured_lines(m: Measured) -> list[str]:
    """What the probe measured, in a few lines."""
    head = f"host and path check: {m.sender} → {m.receiver} (inventory pair {m.pair}), {m.seconds:.1f} s"
    rtt = f"RTT {m.rtt_s * 1e3:.2f} ms ({'ping, idle' if m.rtt_source == 'ping' else 'TCP srtt'})" if m.rtt_s else "RTT unknown"
    lines = [head, rtt]
    runs = [t for t in (m.one, m.many) if t is not None]
    if runs:
        rates = ", ".join(f"{streams_text(t.streams)} {format_rate(t.goodput_bps)}" for t in runs)
        how = f"xfer memory to memory, {runs[0].variant}, {'encrypted' if runs[0].encrypted else 'plaintext'}"
        lines.append(f"goodput: {rates} ({how}; {m.transfers} transfer(s))")
        srtt = [t.srtt_ms_max for t in runs if t.srtt_ms_max]
        if srtt and m.rtt_s:
            lines.append(f"RTT under load up to {max(srtt):.1f} ms (the bottleneck's queue: {max(srtt) - m.rtt_s * 1e3:.1f} ms)")
    return lines + [f"note: {n}" for n in m.notes]


def finding_lines(found: list[Finding]) -> list[str]:
    """Each finding with its fix, as root on its host."""
    out = []
    for f in found:
        out.append(f"{f.severity:<8} {f.host}: {f.what}")
        out += [f"{'':<8}   fix (on {f.host}, as root): {line}" for line in f.fix]
    return out
