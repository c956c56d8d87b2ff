"""What a host is, read in one command: kernel, tools, congestion controls, TCP sysctls, the
routes to its peers (with their devices' offloads and clsact/ingress qdiscs), the root qdiscs
and offloads of its devices, its ifb devices.

The host needs a POSIX shell and the usual Linux tools (``ip``, ``ss``, ``tc`` on a router,
``setsid``, GNU ``date``); ``ethtool`` and ``modprobe`` are optional. No Python.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from .grammar import host_route

#: Tools the backend uses on every host, on the router, and optionally.
TOOLS = ("sh", "date", "sleep", "setsid", "ss", "ip", "tar", "cat", "kill")
ROUTER_TOOLS = ("tc",)
OPTIONAL_TOOLS = ("iperf3", "xfer", "ethtool", "modprobe", "modinfo", "ping")
#: TCP sysctls read (and maybe set) on the end hosts.
SYSCTLS = (
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_no_metrics_save",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_available_congestion_control",
    "net.ipv4.tcp_allowed_congestion_control",
    "net.ipv4.tcp_mtu_probing",
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.core.default_qdisc",
)
#: ethtool's long feature names → the short ones ``ethtool -K`` takes.
OFFLOADS = {"tcp-segmentation-offload": "tso", "generic-segmentation-offload": "gso", "generic-receive-offload": "gro"}


@dataclass
class Facts:
    host: str
    kernel: str = ""
    arch: str = ""
    tools: dict[str, str] = field(default_factory=dict)  # name → path
    iperf3: str = ""  # its version line
    sysctls: dict[str, str] = field(default_factory=dict)
    loadable: set[str] = field(default_factory=set)  # congestion controls a module would add
    routes: dict[str, dict] = field(default_factory=dict)  # peer → {"get": parsed route get, "exact": line or None}
    qdiscs: dict[str, str] = field(default_factory=dict)  # device → its root qdisc line ("" if no device)
    offloads: dict[str, dict[str, bool]] = field(default_factory=dict)  # device → {tso: on?, …}
    hooks: dict[str, int] = field(default_factory=dict)  # a peer's device → its clsact/ingress qdiscs
    ifbs: set[str] = field(default_factory=set)  # the host's ifb devices
    mtus: dict[str, int] = field(default_factory=dict)  # peer → the MTU of the device its route leaves by
    route_qdiscs: dict[str, str] = field(default_factory=dict)  # peer → that device's root qdisc line

    @property
    def available_cc(self) -> list[str]:
        return self.sysctls.get("net.ipv4.tcp_available_congestion_control", "").split()

    def dump(self) -> dict:
        return {
            "kernel": self.kernel,
            "arch": self.arch,
            "iperf3": self.iperf3 or None,
            "xfer": "xfer" in self.tools,
            "congestion_controls": self.available_cc,
            "sysctls": {k: v for k, v in self.sysctls.items() if "available" not in k},
            "offloads": self.offloads,
        }


#: A shell function printing a device's offloads as ``offload.DEV.FEATURE=on|off`` lines.
_OFFLOADS_FN = 'offl() { ethtool -k "$1" 2>/dev/null | sed -n "s/^\\([a-z-]*offload\\): \\(on\\|off\\).*/offload.$1.\\1=\\2/p"; }'


def script(peers: list[str], devices: list[str], modules: list[str]) -> str:
    """The shell script that prints a host's facts, one ``key=value`` per line: for each peer
    (by its index: no value of the inventory is ever part of a key) the route to it and the
    offloads of its device, for each device its root qdisc and offloads."""
    lines = [_OFFLOADS_FN, 'echo "kernel=$(uname -r)"', 'echo "arch=$(uname -m)"']
    for t in TOOLS + ROUTER_TOOLS + OPTIONAL_TOOLS:
        lines.append(f'p=$(command -v {t} 2>/dev/null) && echo "tool.{t}=$p"')
    lines.append('command -v iperf3 >/dev/null 2>&1 && echo "iperf3=$(iperf3 --version 2>/dev/null | head -n 1)"')
    for k in SYSCTLS:
        lines.append(f"echo \"sysctl.{k}=$(cat /proc/sys/{k.replace('.', '/')} 2>/dev/null | tr '\\t' ' ')\"")
    for m in modules:
        lines.append(f'modinfo -n {shlex.quote("tcp_" + m)} >/dev/null 2>&1 && echo "loadable={shlex.quote(m)}"')
    for i, p in enumerate(peers):
        q = shlex.quote(p)
        lines.append(f'r=$(ip -o route get {q} 2>/dev/null | head -n 1); echo "route.{i}=$r"')
        lines.append(f'echo "exact.{i}=$(ip -o route show exact {shlex.quote(host_route(p))} 2>/dev/null | head -n 1)"')
        lines.append('d=$(echo "$r" | sed -n \'s/.* dev \\([^ ]*\\).*/\\1/p\'); [ -n "$d" ] && offl "$d"')
        hooks = "tc qdisc show dev \"$d\" 2>/dev/null | grep -cE '^qdisc (clsact|ingress) '"
        lines.append(f'[ -n "$d" ] && echo "hooks.$d=$({hooks})"')
        lines.append(
            f'[ -n "$d" ] && echo "mtu.{i}=$(ip -o link show dev "$d" 2>/dev/null | sed -n \'s/.* mtu \\([0-9]*\\).*/\\1/p\')"'
        )
        lines.append(f'[ -n "$d" ] && echo "rqdisc.{i}=$(tc qdisc show dev "$d" root 2>/dev/null | head -n 1)"')
    for j, d in enumerate(devices):
        q = shlex.quote(d)
        lines.append(f'echo "qdisc.{j}=$(tc qdisc show dev {q} root 2>/dev/null | head -n 1)"')
        lines.append(f"offl {q}")
    lines.append("ip -o link show type ifb 2>/dev/null | sed -n 's/^[0-9]*: \\([^:@]*\\).*/ifb=\\1/p'")
    return "\n".join(lines) + "\ntrue\n"


def parse(host: str, text: str, peers: list[str] = (), devices: list[str] = ()) -> Facts:
    """The facts :func:`script` printed (``peers`` and ``devices``: the lists it was given)."""
    f = Facts(host)
    for line in text.splitlines():
        key, _, value = line.partition("=")
        value = value.strip()
        if key == "kernel":
            f.kernel = value
        elif key == "arch":
            f.arch = value
        elif key.startswith("tool."):
            f.tools[key[5:]] = value
        elif key == "iperf3":
            f.iperf3 = value
        elif key.startswith("sysctl."):
            f.sysctls[key[7:]] = " ".join(value.split())
        elif key == "loadable":
            f.loadable.add(value)
        elif key.startswith("route.") and (peer := _nth(peers, key[6:])):
            f.routes.setdefault(peer, {})["get"] = route_get(value)
        elif key.startswith("exact.") and (peer := _nth(peers, key[6:])):
            f.routes.setdefault(peer, {})["exact"] = value or None
        elif key.startswith("qdisc.") and (dev := _nth(devices, key[6:])):
            f.qdiscs[dev] = value
        elif key.startswith("offload."):
            dev, _, feature = key[8:].rpartition(".")
            if feature in OFFLOADS:
                f.offloads.setdefault(dev, {})[OFFLOADS[feature]] = value == "on"
        elif key.startswith("hooks."):
            f.hooks[key[6:]] = int(value) if value.isdigit() else 0
        elif key == "ifb":
            f.ifbs.add(value)
        elif key.startswith("mtu.") and (peer := _nth(peers, key[4:])) and value.isdigit():
            f.mtus[peer] = int(value)
        elif key.startswith("rqdisc.") and (peer := _nth(peers, key[7:])):
            f.route_qdiscs[peer] = value
    return f


def _nth(names, index: str) -> str | None:
    return names[int(index)] if index.isdigit() and int(index) < len(names) else None


def route_get(line: str) -> dict:
    """``ip -o route get`` → {via, dev, src} (what the route to a peer goes through)."""
    words = line.split()
    out = {}
    for k in ("via", "dev", "src"):
        if k in words and words.index(k) + 1 < len(words):
            out[k] = words[words.index(k) + 1]
    return out


def default_qdisc(line: str) -> bool:
    """Whether a root qdisc line is the kernel's default (handle 0:, put there at device up):
    deleting what we install brings it back. Anything else was configured by someone."""
    m = re.match(r"qdisc (\S+) (\S+) root", line)
    return m is None or m.group(2) == "0:"
