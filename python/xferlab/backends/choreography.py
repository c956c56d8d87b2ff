"""The story both real-host backends tell, written once: the netns backend (namespaces on this
host) and the ssh backend (a testbed's hosts) run the same flows the same way.

What is here, as plain data and pure steps: the tool that moves each flow (xfer for a
volume-bound transfer, iperf3 for the rest) and its server and client commands as argv lists;
when each client starts (its start time, or ``delay_s`` after another pair's transfers have
ended: a signalled start); how long a run may last; which ports must listen before the first
start; and how the tools' output (iperf3 JSON, xfer traces) becomes the Trace's flow, goodput
and TCP tables. Where a process runs (a namespace, a host over SSH), how it is launched, and
on which clock, is each backend's own.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from .. import constants
from ..importers import iperf3 as ip3
from ..importers import xfer as xf
from ..runinfo import RunInfo
from . import xfer_plan
from .base import BackendError

#: iperf3's smallest reporting interval.
IPERF3_MIN_INTERVAL = 0.1
#: Setup round trips of an iperf3 test before its first data byte (control connection,
#: cookie, parameter exchange, data connection, TEST_START): its start is estimated as
#: launch + SETUP_RTTS × RTT (within about one RTT).
SETUP_RTTS = 5
#: Where `make xfer-static` puts the statically linked xfer (musl): it runs on any Linux host.
STATIC_XFER = Path("target") / "x86_64-unknown-linux-musl" / "release" / "xfer"
#: How long a server may take to listen.
LISTEN_TIMEOUT_S = 10.0


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def workspace_binary(env: str, name: str, package: str) -> str:
    """A workspace tool: $ENV, NAME on PATH, or the workspace's release build."""
    if os.environ.get(env):
        return os.environ[env]
    found = shutil.which(name)
    if found:
        return found
    built = _repo_root() / "target" / "release" / name
    if built.exists():
        return str(built)
    raise BackendError(f"{name} is not built; run `make build` (cargo build --release -p {package})")


def xfer_binary() -> str:
    """The transfer tool that moves volume-bound flows: $XFERLAB_XFER, ``xfer``, or the workspace build."""
    return workspace_binary("XFERLAB_XFER", "xfer", "xfer")


def deployable_xfer(static: Path = STATIC_XFER) -> tuple[str, bool]:
    """The xfer to copy to remote hosts and whether it is static: $XFERLAB_XFER_STATIC, the
    workspace's static build (``static``), else the build this machine runs (linked to its glibc)."""
    if os.environ.get("XFERLAB_XFER_STATIC"):
        return os.environ["XFERLAB_XFER_STATIC"], True
    built = _repo_root() / static
    if built.exists():
        return str(built), True
    return xfer_binary(), False


@dataclass
class FlowPlan:
    """One flow of the resolved scenario placed on the hosts: its client runs at ``src``
    (a namespace or a host), its server at ``dst``, listening on ``dst_addr:port``."""

    spec: dict  # the resolved flow (runinfo.FlowInfo's fields)
    src: str
    dst: str
    dst_addr: str
    port: int
    rtt_s: float
    src_addr: str | None = None  # the client binds it when given (a host with several addresses)

    @property
    def name(self) -> str:
        return f"flow{self.spec['flow_id']}"

    @property
    def tool(self) -> str:
        """Volume-bound transfers run on xfer (exact completion times), the rest on iperf3."""
        return "xfer" if self.spec.get("volume_bytes") is not None else "iperf3"

    @property
    def transfer(self) -> bool:
        return self.spec.get("role", "transfer") == "transfer"


@dataclass(frozen=True)
class XferFiles:
    """Where xfer and its files are on the host that runs it."""

    binary: str
    root: str  # the server's root (the transfers are discarded: --discard)
    key: str  # the shared key file
    #: Transfers in clear (``--plaintext`` on both ends): for a host's own private namespaces,
    #: where nobody else sees them and encryption would only take CPU from the emulation.
    #: Off (xfer's default: encrypted off loopback) on real hosts.
    plaintext: bool = False

    def mode(self) -> list[str]:
        return ["--plaintext"] if self.plaintext else []


def report_interval(info: RunInfo) -> float:
    """The tools' report interval: the finer of the goodput and TCP intervals, not below iperf3's."""
    return max(IPERF3_MIN_INTERVAL, min(info.goodput_interval_s, info.tcp_interval_s))


def scenario_end_s(info: RunInfo, flows: list[FlowPlan]) -> float:
    """The scenario's end; without one, the end of its last transfer (iperf3 runs whole seconds)."""
    if info.end_s is not None:
        return info.end_s
    return max(f.spec["start_s"] + math.ceil(f.spec["duration_s"] - 1e-9) for f in flows if f.transfer)


def deadline_s(end_s: float, flows: list[FlowPlan]) -> float:
    """When transfers still running are stopped: a little past the end, more on long paths."""
    return end_s + max(5.0, 20 * max(f.rtt_s for f in flows))


def payload_ratio(info: RunInfo) -> float:
    """Payload per qdisc frame: the simulator's pacer counts IP + 14 bytes per packet, TCP
    pacing counts payload."""
    return info.mss / constants.qdisc_frame(info.mtu)


def listening_wanted(flows: list[FlowPlan]) -> dict[str, set[int]]:
    """The ports that must listen, by the place of their server, before the first client starts."""
    want: dict[str, set[int]] = {}
    for f in flows:
        want.setdefault(f.dst, set()).add(f.port)
    return want


def host_port(addr: str, port: int) -> str:
    """``addr:port`` (an IPv6 address in brackets)."""
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def server_args(f: FlowPlan, interval: float, xfer: XferFiles | None) -> list[str]:
    """The command of ``f``'s server."""
    if f.tool == "xfer":
        listen = ["--listen", host_port(f.dst_addr, f.port)]
        return [xfer.binary, "serve", *listen, "--root", xfer.root, "--key-file", xfer.key, *xfer.mode()]
    # -J and -i on the server: --get-server-output then carries the receiver's intervals.
    return ["iperf3", "-s", "-1", "-J", "-i", f"{interval:g}", "-p", str(f.port), "-B", f.dst_addr]


def client_args(
    f: FlowPlan, cc: str, interval: float, end_s: float, ratio: float, xfer: XferFiles | None, trace: str
) -> tuple[list[str], list[str]]:
    """The command of ``f``'s client with congestion control ``cc`` (the sender's name of it),
    and what it changes of the scenario, said. xfer writes its trace to ``trace``; iperf3
    prints its JSON (the backend keeps its stdout)."""
    s, warnings = f.spec, []
    lim = s.get("limiter")
    pace = int(lim["rate_bps"] * ratio) if lim and lim["kind"] == "pacer" and lim["rate_bps"] else None
    if f.tool == "xfer":
        args = [xfer.binary, "send", "-P", "1", "--cc", cc, "--no-hash", "--retries", "0", "--no-progress", "-q"]
        args += ["--json", trace, "--interval", f"{interval:g}s", "--key-file", xfer.key, *xfer.mode()]
        args += xfer_plan.limiter_args(lim, s["start_s"], ratio)
        return args + [f"mem:{int(s['volume_bytes'])}", host_port(f.dst_addr, f.port), "--discard"], warnings
    duration = s["duration_s"] if s.get("duration_s") is not None else end_s - s["start_s"]
    whole = max(1, math.ceil(duration - 1e-9))
    if abs(whole - duration) > 1e-6:
        warnings.append(f"flow {s['flow_id']}: iperf3 runs whole seconds, {duration:g} s rounded up to {whole} s")
    args = ["iperf3", "-c", f.dst_addr, "-p", str(f.port)] + (["-B", f.src_addr] if f.src_addr else [])
    args += ["-C", cc, "-J", "--get-server-output", "-i", f"{interval:g}", "--connect-timeout", "10000", "-t", str(whole)]
    return args + (["--fq-rate", str(pace)] if pace else []), warnings


def onoff_args(xfer: str, dst: str, source: dict, mtu: int, seed: int, seconds: float) -> list[str]:
    """The command of a background source (``workload.background``) sending MTU-sized IP
    packets to ``dst`` (ADDR:PORT) for ``seconds`` at most; it prints its totals at its end or
    at SIGTERM."""
    args = [xfer, "onoff", "--dst", dst, "--rate", repr(source["rate_bps"])]
    args += ["--mean-on", repr(source["mean_on_s"]), "--mean-off", repr(source["mean_off_s"])]
    return args + ["--size", str(mtu - 28), "--seed", str(seed), "--duration", repr(seconds)]


def sink_args(xfer: str, listen: str, seconds: float) -> list[str]:
    """The command of a background source's sink on ``listen`` (ADDR:PORT): it takes the
    datagrams (no ICMP back) and prints what it received."""
    return [xfer, "onoff", "--sink", listen, "--duration", repr(seconds)]


def signalled(waiting: list[FlowPlan], transfers: list[FlowPlan], ended: dict[str, float]) -> tuple[list, list]:
    """Flows that start after another pair's transfers (ViFi by signal): once every transfer of
    that pair has ended (``ended``: flow name → end, run seconds), each is due ``delay_s`` (the
    signal's modelled cost) after the last of those ends; its spec's start_s says when.
    Returns (due, still waiting)."""
    due, still = [], []
    for f in waiting:
        after = f.spec["start_after"]
        awaited = [t for t in transfers if t.spec["pair"] == after["pair"]]
        if awaited and all(t.name in ended for t in awaited):
            f.spec = dict(f.spec, start_s=max(ended[t.name] for t in awaited) + after["delay_s"])
            due.append(f)
        else:
            still.append(f)
    return due, still


def read_json(path: Path) -> dict | None:
    """A tool's JSON output (None: none, or not JSON: a tool that died before writing it)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class Outcome:
    """What one flow's tool left, with when its client was launched and exited (run seconds)."""

    flow: FlowPlan
    doc: dict  # the tool's JSON (iperf3's, or xfer's trace)
    launched_s: float
    exited_s: float
    source: str  # the hosts' names the Trace gives
    sink: str
    forward_delay_s: float  # one-way delay from sender to receiver


def flow_tables(outcomes: list[Outcome], mss: int, goodput_interval_s: float) -> dict[str, pa.Table]:
    """The flows, goodput and TCP tables of the tools' outputs (importers/iperf3.py,
    importers/xfer.py). An iperf3 flow's data starts SETUP_RTTS round trips after its launch;
    an xfer transfer's data started its completion time before its sender exited (its last act
    is the verdict, which crosses the path back)."""
    perf, moved = [], []
    for o in outcomes:
        s = o.flow.spec
        meta = {
            "doc": o.doc,
            "flow_id": s["flow_id"],
            "pair": s["pair"],
            "stream": s["stream"],
            "variant": s["variant"],
            "role": s.get("role", "transfer"),
            "volume_bytes": s.get("volume_bytes"),
            "source": o.source,
            "sink": o.sink,
            "mss": mss,
        }
        if o.flow.tool == "xfer":
            done = float((o.doc.get("run") or {}).get("completion_time") or 0.0)
            moved.append(xf.XferFlow(data_start_s=o.exited_s - done, forward_delay_s=o.forward_delay_s, **meta))
        else:
            perf.append(ip3.Iperf3Flow(start_s=o.launched_s + SETUP_RTTS * o.flow.rtt_s, **meta))
    parts = []
    if perf:
        parts.append(ip3.tables_from_runs(perf, goodput_interval_s=goodput_interval_s, end_s=None))
    if moved:
        parts.append(xf.tables_from_xfer(moved, goodput_interval_s=goodput_interval_s))
    tables = {}
    for name, keys in (("flows", ["flow_id"]), ("goodput", ["flow_id", "t"]), ("tcp", ["flow_id", "t"])):
        tables[name] = pa.concat_tables([p[name] for p in parts]).sort_by([(k, "ascending") for k in keys])
    return tables


def tools_unknown(tcp: pa.Table) -> dict[str, str]:
    """What iperf3 and xfer do not report: null columns of the TCP table, fast recoveries."""
    return {**ip3.unknown_tcp(tcp), "flows.fast_recoveries": "iperf3 and xfer do not report them"}


def background_row(sent: list[int], received: list[int] | None = None) -> tuple[str, str]:
    """The setup row of the background sources: how many, and the bytes they sent (and
    their sinks received, where there are sinks)."""
    text = f"{len(sent)} ON/OFF UDP source(s) (xfer onoff): {sum(sent) / 1e6:.1f} MB sent"
    if received is not None:
        text += f", {sum(received) / 1e6:.1f} MB received"
    return ("background", text)
