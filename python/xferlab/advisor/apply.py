"""What applies a configuration on real hosts: the ``xfer send`` command line
(docs/xfer.md) and the host settings it needs (ESnet fasterdata's host tuning rules, with
the numbers of this path)."""

from __future__ import annotations

import math
import shlex

from .candidates import Config
from .question import Question

#: Linux's defaults for the largest socket buffers (tcp_rmem[2], tcp_wmem[2]), bytes.
LINUX_RMEM_MAX = 6 << 20
LINUX_WMEM_MAX = 4 << 20
#: The largest value tcp_rmem and tcp_wmem take (a C int): more streams share a bigger BDP.
SYSCTL_INT_MAX = 2**31 - 1
#: The most streams the advice lets ``xfer --streams auto`` open (xfer's own default).
AUTO_MAX_STREAMS = 16
#: Variants built into every distribution's kernel (the others are modules: tcp_<name>).
BUILT_IN = ("reno", "cubic")
#: Goodput one core of each end carries when xfer encrypts (its default off loopback): both
#: ends together get 4.3 Gbit/s per core of CPU time, each doing half the work, one core per
#: connection at most (BENCHMARKS.md, "xfer: the cost of encryption", an AMD EPYC core).
ENCRYPTED_BPS_PER_CORE = 8.6e9
#: From this many cores on each end, the advice says what encryption costs.
ENCRYPTION_NOTE_CORES = 0.25


def rate_text(bps: float) -> str:
    """A goodput rate as xfer's --rate takes it (decimal M or G, bit/s)."""
    return f"{bps / 1e9:.3g}G" if bps >= 1e9 else f"{bps / 1e6:.4g}M"


def xfer_argv(q: Question, c: Config, source: str = "FILE", dest: str = "RECEIVER:7447:/FILE") -> list[str]:
    """The ``xfer send`` command of a configuration: its streams, congestion control and,
    when paced, its rate (xfer's --rate is the goodput of all streams together)."""
    argv = ["xfer", "send", "-P", str(c.streams), "--cc", c.variant]
    if c.pacing:
        argv += ["--rate", rate_text(c.pacing * q.goodput_bps)]
    return argv + ["--key-file", "xfer.key", source, dest]


def xfer_line(q: Question, c: Config) -> str:
    return shlex.join(xfer_argv(q, c))


def xfer_auto_argv(q: Question, c: Config, source: str = "FILE", dest: str = "RECEIVER:7447:/FILE") -> list[str] | None:
    """The same transfer with xfer searching the stream count during it (``--streams auto``,
    docs/xfer.md), from the recommended count up to four times it; None for a paced
    configuration (the search is for the fastest count, a rate fixes it)."""
    if c.pacing:
        return None
    top = min(4 * c.streams, AUTO_MAX_STREAMS)
    argv = ["xfer", "send", "-P", "auto", "--start-streams", str(c.streams), "--max-streams", str(max(top, 2))]
    return argv + ["--cc", c.variant, "--key-file", "xfer.key", source, dest]


def socket_buffer_bytes(q: Question, c: Config) -> int:
    """The largest socket buffer each stream needs: its share of the window that fills the
    path and its bottleneck buffer, (BDP + buffer) / streams, twice over (Linux offers about
    half a receive buffer as window: the rest is skb overhead, constants.RX_SKB_OVERHEAD),
    rounded up to a MiB (at most what the sysctl takes)."""
    window = (q.bdp_bytes + q.buffer_packets() * q.mtu) / c.streams
    return min(math.ceil(2 * window / (1 << 20)) << 20, SYSCTL_INT_MAX)


def sysctls(q: Question, c: Config) -> list[tuple[str, str, str]]:
    """(setting, value, why) for both hosts; Linux's defaults kept where they suffice."""
    need = socket_buffer_bytes(q, c)
    rmem, wmem = max(need, LINUX_RMEM_MAX), max(need, LINUX_WMEM_MAX)
    why = f"each of {c.streams} stream(s) needs a {need >> 20} MiB buffer for its share of the BDP"
    out = [
        ("net.ipv4.tcp_rmem", f"4096 131072 {rmem}", why),
        ("net.ipv4.tcp_wmem", f"4096 16384 {wmem}", why),
        ("net.core.rmem_max", str(rmem), "the same limit for buffers an application sets itself"),
        ("net.core.wmem_max", str(wmem), "the same limit for buffers an application sets itself"),
    ]
    if c.variant not in BUILT_IN:
        out.append(("modprobe", f"tcp_{c.variant}", f"{c.variant} is a kernel module"))
    out.append(
        (
            "net.ipv4.tcp_allowed_congestion_control",
            f"reno cubic {c.variant}" if c.variant not in BUILT_IN else "reno cubic",
            "lets xfer --cc choose it without root",
        )
    )
    if c.pacing or c.variant == "bbr":
        out.append(("(kernel)", "Linux ≥ 4.13", "TCP paces itself (SO_MAX_PACING_RATE, BBR) without the fq qdisc"))
    return out


def shell_lines(q: Question, c: Config) -> list[str]:
    """The settings as commands to run as root on each host."""
    lines = []
    for name, value, _ in sysctls(q, c):
        if name == "modprobe":
            lines.append(f"modprobe {value}")
        elif not name.startswith("("):
            lines.append(sysctl_line(name, value))
    return lines


def sysctl_line(name: str, value: str) -> str:
    """The command that sets sysctl ``name`` to ``value``."""
    return f"sysctl -w {name}={shlex.quote(value)}" if " " in value else f"sysctl -w {name}={value}"


def encryption_note(q: Question, c: Config) -> str | None:
    """What xfer's encryption costs the hosts at this path's rate, when it matters."""
    cores = q.available_bps / ENCRYPTED_BPS_PER_CORE
    if cores < ENCRYPTION_NOTE_CORES:
        return None
    note = (
        f"xfer encrypts off loopback: at {q.available_bps / 1e9:.3g} Gbit/s that is about {cores:.1f} core(s) on "
        f"each end (about {ENCRYPTED_BPS_PER_CORE / 1e9:g} Gbit/s a core, BENCHMARKS.md)"
    )
    if q.available_bps / c.streams > 0.8 * ENCRYPTED_BPS_PER_CORE:
        note += (
            f"; each stream is one core on each end: {c.streams} stream(s) may be CPU-bound, "
            "use more or --plaintext on a trusted network"
        )
    return note
