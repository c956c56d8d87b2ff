"""Real remote hosts over SSH: the scenario on a testbed, as seed 004's NXE ran it on Grid'5000.

NXE's seven steps (reserve, deploy, configure, run, collect, analyse, archive), for hosts an
inventory names (:mod:`xferlab.remote.inventory`; reserving them is the testbed's business):

1. **connect** to every host the scenario needs, or to none (host keys checked);
2. **pre-flight**: tools, congestion controls, TCP buffers against the BDP, offloads, an
   unfinished run's journal, each host's clock offset against the controller;
3. **configure** (journal first, :mod:`xferlab.remote.journal`): sysctls, congestion
   control, route options, the bottleneck on the router; deploy ``xfer`` where missing;
4. **calibrate**: a short transfer per path checks its rate and RTT against the scenario;
5. **run**: servers, then every flow launched at its time on its host's clock corrected by
   the offset (iperf3 for duration-bound flows, xfer for volume-bound ones, as on netns),
   the router's queue sampled;
6. **collect** the logs into the run folder (``logs/``) and **restore** every host — on
   every exit path, SIGINT and SIGTERM included;
7. **convert** through the importers into the same Trace as every backend (the engine then
   analyses and archives it).
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import platform
import re
import shutil
import signal
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from .. import constants, variants
from ..importers import iperf3 as ip3
from ..models import ideal_rates
from ..netns import topology
from ..remote import clock, facts, hosts, launch, plan
from ..remote.inventory import Inventory, InventoryError
from ..remote.inventory import load as load_inventory
from ..remote.shell import Host, RemoteError, cmd
from ..runinfo import Provenance, RunInfo
from ..trace import Trace
from . import choreography, linktable, xfer_plan
from .base import BackendError, Progress
from .choreography import FlowPlan

NAME = "ssh"
#: Time given to launch every flow's command before the first start (controller clock).
LEAD_S = 1.5
#: How often the hosts are asked which flows have ended.
POLL_S = 0.25
#: The poll interval while flows wait for another pair's end (signalled starts).
SIGNAL_POLL_S = 0.05
#: The calibration transfer's report interval (sender and receiver), and the span of
#: consecutive intervals its goodput is judged over (the best such span).
CALIBRATION_INTERVAL_S = 0.25
CALIBRATION_WINDOW_S = 1.0
#: Pings of the idle path that give its RTT at calibration (the smallest).
PINGS = 5
#: Background sources and sinks are started to last this much past the scenario's end; the
#: run stops them (SIGTERM: they print their totals) once the transfers are done.
BACKGROUND_SLACK_S = 60


@dataclass
class _Flow(FlowPlan):
    """A flow between two hosts of the inventory (src, dst: their names)."""

    inventory_pair: int = 0  # the senders[k] → receivers[k] it runs on (reversed for reverse traffic)


@dataclass
class _Background:
    """One ON/OFF source (``workload.background``) on a pair of its own: the inventory's pairs
    after the scenario's. Its sink on the receiver takes the datagrams (no ICMP back)."""

    index: int
    source: dict
    src: str
    dst: str
    dst_addr: str
    port: int

    @property
    def name(self) -> str:
        return f"bg{self.index}"


@dataclass
class _Measured:
    t0_ns: int = 0
    done: dict = field(default_factory=dict)  # flow name → (status, end host ns)
    started: dict = field(default_factory=dict)  # flow name → start host ns
    outputs: dict = field(default_factory=dict)  # flow name → its JSON
    link: list = field(default_factory=list)  # (controller s from t0, {dev: counters})
    warnings: list[str] = field(default_factory=list)
    waiting: list = field(default_factory=list)  # flows waiting for another pair's end (start_after)
    background: dict = field(default_factory=dict)  # source name → {"sent": its JSON, "received": its sink's}
    interval: float = 0.0  # the tools' report interval
    end_s: float = 0.0  # the scenario's end, for duration-bound clients


def run(scenario, resolved: dict, progress: Progress | None = None, inventory: str | Path | None = None) -> Trace:
    """Runs ``resolved`` on the hosts of ``inventory`` (a YAML file)."""
    if inventory is None:
        raise BackendError("the ssh backend needs an inventory of hosts: --inventory hosts.yaml (see docs/ssh.md)")
    try:
        inv = load_inventory(inventory)
    except InventoryError as e:
        raise BackendError(str(e)) from None
    _refuse_unsupported(resolved, inv)
    return _Run(inv, str(inventory), resolved, progress).execute()


def _refuse_unsupported(r: dict, inv: Inventory) -> None:
    """What this backend does not run (yet), said before any host is touched."""
    if r["pairs"] > inv.pairs:
        raise BackendError(f"the scenario has {r['pairs']} pair(s), the inventory {inv.pairs} (senders → receivers)")
    n_bg = len(r.get("background") or [])
    if r["pairs"] + n_bg > inv.pairs:
        raise BackendError(
            f"the scenario's {n_bg} background source(s) each run on a pair of their own, after its {r['pairs']} "
            f"pair(s): the inventory needs {r['pairs'] + n_bg} pairs (senders → receivers), it has {inv.pairs}"
        )
    if r.get("loss_rate"):
        raise BackendError("random loss (topology.loss_rate) is not emulated by the ssh backend: real paths lose what they lose")
    for f in r["flows"]:
        if why := xfer_plan.not_drivable(f):
            raise BackendError(f"the ssh backend does not run {why}")
    if r.get("shaper") is not None and r["shaper"]["kind"] == "pacer":
        raise BackendError("a pacing shaper on the bottleneck (topology.shaper.limiter: pacing) has no ssh equivalent")
    if r.get("shaper") is not None and inv.router is None:
        raise BackendError("a shaped bottleneck (topology.shaper) needs a router in the inventory")
    reverse = any(f.get("role") == "reverse" for f in r["flows"])
    if reverse and inv.router is not None and inv.router.reverse is None:
        raise BackendError("the scenario has reverse traffic: give the router's reverse device (router.reverse)")


def _say(progress: Progress | None):
    """Step lines on stderr (none with --quiet, when there is no progress callback)."""

    def say(text: str) -> None:
        if progress is not None:
            print(f"xferlab: ssh: {text}", file=sys.stderr, flush=True)

    return say


class _Refused(Exception):
    """The hosts or paths cannot run this scenario (said before the run)."""


async def _uninterrupted(coro, swallow: bool = False):
    """Awaits ``coro`` to its end even if this task is cancelled meanwhile (SIGINT, SIGTERM):
    changing the hosts, and restoring them, is never cut short. The cancellation then goes
    on (unless ``swallow``: a restore in a ``finally``, where an exception is on its way)."""
    task = asyncio.ensure_future(coro)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled and not swallow:
        raise asyncio.CancelledError
    return task.result()


class _Run:
    """One run on the hosts of an inventory: the steps of the module's docstring."""

    def __init__(self, inv: Inventory, inv_path: str, resolved: dict, progress: Progress | None):
        self.inv, self.inv_path, self.r, self.progress = inv, inv_path, resolved, progress
        self.info = RunInfo.model_validate(resolved)
        self.say = _say(progress)
        self.run_id = uuid.uuid4().hex[:8]
        self.warnings: list[str] = []
        self.flows = self._flows()
        self.background = self._background()
        used = max([self.info.pairs + len(self.background)] + [f.inventory_pair + 1 for f in self.flows])
        self.bed = hosts.Testbed(inv, inv.used(used), self.run_id, inv_path)
        self.step = "connect"
        self.facts: dict = {}
        self.offsets: dict[str, clock.Offset] = {}
        self.changes: dict[str, list[plan.Change]] = {}
        self.calibration: dict = {}
        self.xfer: dict[str, str] = {}  # host → path of xfer there
        self.xfer_static = False  # the deployed xfer is the static (musl) build
        self.logs: Path | None = None
        self.restored: hosts.Restored | None = None
        self.signalled: str | None = None
        self.step_s: dict[str, float] = {}  # how long each step took

    def _flows(self) -> list[_Flow]:
        out = []
        for f in self.r["flows"]:
            k = self._inventory_pair(f)
            a, b = self.inv.senders[k], self.inv.receivers[k]
            src, dst = (a, b) if f.get("role", "transfer") == "transfer" else (b, a)
            rtt = self._pair_rtt(f["pair"])
            port = self.inv.options.base_port + f["flow_id"]
            at = self.inv.hosts
            out.append(_Flow(f, src, dst, at[dst].data, port, rtt, src_addr=at[src].data, inventory_pair=k))
        shared = sum(1 for f in self.r["flows"] if f.get("role") == "reverse" and self._inventory_pair(f) < self.info.pairs)
        if shared:
            self.warnings.append(
                f"{shared} reverse source(s) run on the scenario's own pairs (receiver → sender), sharing their access "
                "links: the inventory has no pair left for each (on netns each has a host pair of its own)"
            )
        return out

    def _inventory_pair(self, f: dict) -> int:
        """The inventory pair a flow runs on: its own for a transfer; for the j-th reverse
        source, the j-th pair after the scenario's and the background's when the inventory has
        it, else the scenario's pair j mod pairs (receiver → sender)."""
        if f.get("role", "transfer") != "reverse":
            return f["pair"]
        pairs = self.info.pairs
        j = f["pair"] - pairs  # the resolved scenario's reverse sources follow its pairs
        own = pairs + len(self.info.background) + j
        return own if own < self.inv.pairs else j % pairs

    def _background(self) -> list[_Background]:
        """The background sources on pairs pairs, pairs + 1, …; their ports follow the
        calibration's."""
        out, k0 = [], self.info.pairs
        for j, b in enumerate(self.r.get("background") or []):
            a, z = self.inv.senders[k0 + j], self.inv.receivers[k0 + j]
            port = self.inv.options.base_port + len(self.flows) + k0 + j
            out.append(_Background(j, b, a, z, self.inv.hosts[z].data, port))
        return out

    def _background_hosts(self) -> set[str]:
        """The background sources' and sinks' hosts."""
        return {h for b in self.background for h in (b.src, b.dst)}

    def _own_xfer_hosts(self) -> set[str]:
        """The hosts that run this build's xfer (deployed even where one is installed): the
        background sources and sinks (``xfer onoff``) and the router's link sampler (``xfer qstats``)."""
        return self._background_hosts() | ({self.inv.router.host} if self.inv.router is not None else set())

    def _xfer_hosts(self) -> set[str]:
        """The hosts that run xfer: volume-bound flows' ends, background sources and sinks, the router."""
        return {h for f in self.flows if f.tool == "xfer" for h in (f.src, f.dst)} | self._own_xfer_hosts()

    # ------------------------------------------------------------------ the event loop

    def execute(self) -> Trace:
        """Runs the steps in an event loop of its own; SIGINT and SIGTERM cancel them, the
        hosts are restored, and the interruption goes on as KeyboardInterrupt."""
        loop = asyncio.new_event_loop()
        previous = {}
        try:
            task = loop.create_task(self.main())
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    previous[sig] = signal.getsignal(sig)
                    loop.add_signal_handler(sig, self._on_signal, sig, task)
            try:
                measured = loop.run_until_complete(task)
            except asyncio.CancelledError:
                raise KeyboardInterrupt from None
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, handler)
            loop.close()
        return self.trace(measured)

    def _on_signal(self, sig: int, task: asyncio.Task) -> None:
        if self.signalled is None:
            self.signalled = signal.Signals(sig).name
            print(f"xferlab: ssh: {self.signalled}: stopping and restoring the hosts", file=sys.stderr, flush=True)
            task.cancel()
        else:
            print("xferlab: ssh: restoring the hosts; please wait", file=sys.stderr, flush=True)

    async def main(self) -> _Measured:
        try:
            return await self.steps()
        except (RemoteError, plan.PlanError, _Refused, BackendError) as e:
            # A step that failed because its hosts were undone under it says so.
            lost = await self.bed.verify() if isinstance(e, RemoteError) and self.step in ("run", "collect") else None
            error = f"{self.step}: {lost or e}"
        finally:
            self.restored = await _uninterrupted(self.restore(), swallow=True)
        raise BackendError(f"{error}; {self.restored.summary(self.inv_path)}")

    async def steps(self) -> _Measured:
        await self._timed("connect", self.connect())
        await self._timed("take", self.take())
        await self._timed("pre-flight", self.preflight())
        await self._timed("configure", _uninterrupted(self.configure()))
        await self._timed("calibration", self.calibrate())
        m = await self._timed("run", self.run_flows())
        if lost := await self.bed.verify():
            raise hosts.LeaseLost(lost)
        await self._timed("collect", self.collect(m))
        return m

    async def _timed(self, step: str, coro):
        self.step, t = step, time.monotonic()
        try:
            return await coro
        finally:
            self.step_s[step] = time.monotonic() - t

    async def restore(self) -> hosts.Restored:
        if not self.bed.journals:
            await self.bed.close()
            return hosts.Restored()
        self.say("restore: undoing the changes on " + ", ".join(self.bed.journals))
        t = time.monotonic()
        restored = await self.bed.restore()
        await self.bed.close()
        self.step_s["restore"] = time.monotonic() - t
        self.say(f"restore: {restored.summary(self.inv_path)}")
        return restored

    # ------------------------------------------------------------------ connect, pre-flight

    async def connect(self) -> None:
        try:
            await self.bed.connect()
        except RemoteError as e:
            raise RemoteError(f"{e}; nothing was changed on any host") from None
        self.say(f"connected to {', '.join(self.bed.names)}")

    async def take(self) -> None:
        """The run's lease on every host, before anything is read or changed: one run per host."""
        await self.bed.take()
        self.say(f"took {', '.join(self.bed.names)} (their journals, in {self.inv.options.state_dir})")

    def _needs(self) -> dict[str, plan.Needs]:
        """What the scenario asks of each host (see :mod:`xferlab.remote.plan`)."""
        r = self.info
        rtt = max(f.rtt_s for f in self.flows)
        buf, rcv = constants.host_buffers(self.r, rtt)
        if r.window_cap_packets is None:
            rcv = None  # the host's own tcp_rmem[2] may stay if it is larger
        rto_ms = max(1, round(r.rto_min_s * 1000))
        frame = constants.qdisc_frame(r.mtu)
        needs = {
            n: plan.Needs(initial_cwnd=r.initial_cwnd, rto_min_ms=rto_ms, quickack=not r.delayed_ack) for n in self.bed.names
        }
        for f in self.flows:
            cc = variants.canonical(f.spec["variant"])
            src, dst = needs[f.src], needs[f.dst]
            src.sock_buf_bytes = dst.sock_buf_bytes = buf
            src.rcv_buf_bytes = dst.rcv_buf_bytes = rcv
            if cc not in src.congestion_controls:
                src.congestion_controls.append(cc)
            for n, peer in ((src, f.dst_addr), (dst, f.src_addr)):
                if peer not in n.peers:
                    n.peers.append(peer)
            lim = f.spec.get("limiter") or {}
            if lim.get("kind") == "token_bucket":
                b = plan.Bucket(f.dst_addr, f.port, lim["rate_bps"], lim["burst_bytes"], frame, topology.ACCESS_QUEUE)
                src.buckets.append(b)
        if self.inv.router is not None:
            needs[self.inv.router.host].shaping = self._shaping()
        return needs

    def _shaping(self) -> list[plan.Shaping]:
        r, router = self.info, self.inv.router
        frame = constants.qdisc_frame(r.mtu)
        if r.shaper is not None:  # a token bucket on a faster line: its burst, counting qdisc frames
            rate, burst, overhead = r.shaper.rate_bps, r.shaper.burst_bytes, 0
        else:
            rate, burst, overhead = r.bottleneck_rate_bps, topology.BOTTLENECK_BURST_PKTS * frame, topology.WIRE_OVERHEAD
        devices = [router.bottleneck] + ([router.reverse] if router.reverse else [])
        return [plan.Shaping(d, rate, burst, r.buffer_packets, frame, overhead) for d in devices]

    async def preflight(self) -> None:
        needs = self._needs()
        wants = {}
        for name, n in needs.items():
            devices = [s.dev for s in n.shaping]
            wants[name] = (n.peers, devices, n.congestion_controls)
        self.facts = await self.bed.read_facts(wants)
        self._check_tools()
        for name in self.bed.names:
            self.changes[name] = plan.changes(self.facts[name], needs[name], self.inv.options.modprobe)
        self.offsets = await self.bed.offsets(self.inv.options.clock_probes)
        kernels = sorted({f.kernel for f in self.facts.values()})
        self.say(f"pre-flight: kernel {', '.join(kernels)}; tools and congestion controls present")
        shown = ", ".join(f"{n} {o.offset_s * 1e3:+.2f} ± {o.uncertainty_s * 1e3:.2f} ms" for n, o in self.offsets.items())
        self.say(f"pre-flight: clock offsets against this controller: {shown}")

    def _check_tools(self) -> None:
        """Every host has what it runs; xfer is deployed (from this machine) where it lacks."""
        problems = []
        router = self.inv.router.host if self.inv.router else None
        runs: dict[str, set[str]] = {n: set() for n in self.bed.names}
        for f in self.flows:
            runs[f.src].add(f.tool)
            runs[f.dst].add(f.tool)
        for h in self._xfer_hosts():
            runs[h].add("xfer")
        ours = self._own_xfer_hosts()
        # One xfer for all: the hosts' own where every host that runs it has one, else this
        # build everywhere (two builds may speak different protocols: 3 since encryption).
        users = [n for n in self.bed.names if "xfer" in runs[n] and n not in ours]
        own_everywhere = all("xfer" in self.facts[n].tools for n in users)
        for name, f in self.facts.items():
            need = set(facts.TOOLS) | ({"tc"} if name == router else set()) | ({"iperf3"} if name != router else set())
            missing = sorted(t for t in need if t not in f.tools)
            if missing:
                problems.append(
                    f"{name}: {', '.join(missing)} not installed (Debian: apt-get install iproute2 iperf3 util-linux)"
                )
            if "xfer" in runs[name]:
                if "xfer" in f.tools and name not in ours and own_everywhere:  # a source or the sampler needs this build's
                    self.xfer[name] = f.tools["xfer"]
                elif f.arch != platform.machine():
                    problems.append(
                        f"{name}: this machine's xfer is needed there (the host has none, or another host has none and "
                        f"every host must run the same build) and it is {platform.machine()}, not {f.arch}"
                    )
                else:
                    self.xfer[name] = f"{self.bed.workdir(name)}/xfer"  # deployed at configure
        if problems:
            raise _Refused("; ".join(problems))

    # ------------------------------------------------------------------ configure, calibrate

    async def configure(self) -> None:
        xfer_hosts = self._xfer_hosts()

        async def one(name: str) -> None:
            await self.bed.configure(name, self.changes[name], ["xfer-root"] if name in xfer_hosts else [])
            if name in xfer_hosts:
                w = self.bed.workdir(name)
                static = await deploy_xfer(self.bed.hosts[name], w, key, self.xfer[name] == f"{w}/xfer")
                self.xfer_static = self.xfer_static or static

        key = uuid.uuid4().hex + uuid.uuid4().hex
        await hosts.together(*(one(n) for n in self.bed.names))
        for name in self.bed.names:
            done = [c.what for c in self.changes[name]]
            self.warnings += buffer_warnings(name, self.changes[name])
            kind = "static" if self.xfer_static else "linked to this machine's glibc"
            deployed = [f"xfer deployed ({kind})"] if self.xfer.get(name, "").startswith(self.bed.workdir(name)) else []
            self.say(f"configure: {name}: " + ("; ".join(done + deployed) or "nothing to change"))

    async def calibrate(self) -> None:
        """A short iperf3 transfer per path, alone: its best receiver interval against the
        ideal goodput of the path (r_TP of its access link or the bottleneck, the slower),
        its smallest RTT against the scenario's; a path that cannot carry the scenario is refused."""
        seconds = self.inv.options.calibration
        if seconds <= 0:
            self.warnings.append("no calibration transfer (options.calibration: 0): the paths' rates and RTTs were not checked")
            return
        problems = []
        for k in range(self.info.pairs):
            got = await self._calibrate_pair(k, max(1, math.ceil(seconds)))
            self.calibration[k] = got
            rtt = f"{got['rtt_ms']:.2f} ms" if got["rtt_ms"] is not None else "not measured (no ping)"
            self.say(
                f"calibration: pair {k}: {got['goodput_mbps']:.1f} Mbit/s (scenario: {got['expected_mbps']:.1f}), "
                f"RTT {rtt} (scenario: {got['expected_rtt_ms']:.2f} ms)"
            )
            problems += self._judge(k, got)
        if problems:
            raise _Refused("the paths cannot carry the scenario: " + "; ".join(problems))

    async def _calibrate_pair(self, k: int, seconds: int) -> dict:
        a, b = self.inv.senders[k], self.inv.receivers[k]
        sa, sb = self.inv.hosts[a].data, self.inv.hosts[b].data
        port = self.inv.options.base_port + len(self.flows) + k
        server = ["iperf3", "-s", "-1", "-J", "-i", f"{CALIBRATION_INTERVAL_S:g}", "-p", str(port), "-B", sb]
        await self.bed.hosts[b].run(launch.timed(self.bed.workdir(b), f"calibration{k}-server", None, server))
        await self._wait_listening({b: {port}})
        cc = variants.canonical(next(f.spec["variant"] for f in self.flows if f.spec["pair"] == k))
        client = ["iperf3", "-c", sb, "-p", port, "-B", sa, "-t", seconds, "-i", CALIBRATION_INTERVAL_S, "-J"]
        client += ["--get-server-output", "-C", cc]
        text = await self.bed.hosts[a].run(cmd(*client), check=False, timeout=seconds + 30)
        try:
            doc = json.loads(text)
        except ValueError:
            raise _Refused(f"pair {k}: the calibration transfer {a} → {b} gave no result: {text.strip()[:200]}") from None
        if doc.get("error"):
            raise _Refused(f"pair {k}: the calibration transfer {a} → {b} failed: {doc['error']}")
        sender, receiver = ip3.sides(doc)
        best = steady_goodput_bps((receiver or sender).get("intervals") or [], min(CALIBRATION_WINDOW_S, seconds / 2))
        r = self.info
        access = (r.pair_paths[k].access_rate_bps if r.pair_paths else None) or r.access_rate_bps
        bottleneck = (r.shaper.rate_bps if r.shaper else None) or r.bottleneck_rate_bps
        expected = ideal_rates(min(access, bottleneck), r.mtu, r.header_bytes).r_tp_mbps
        rtt = await self._ping(a, sa, sb)
        return {
            "goodput_mbps": best / 1e6,
            "expected_mbps": expected,
            "rtt_ms": rtt * 1e3 if rtt is not None else None,
            "expected_rtt_ms": self._pair_rtt(k) * 1e3,
            "seconds": seconds,
            "retransmissions": int(((sender or {}).get("end", {}).get("sum_sent") or {}).get("retransmits") or 0),
        }

    async def _ping(self, host: str, src: str, dst: str) -> float | None:
        return await ping_rtt(self.bed.hosts[host], "ping" in self.facts[host].tools, src, dst)

    def _pair_rtt(self, k: int) -> float:
        return self.info.pair_paths[k].rtt_s if self.info.pair_paths else self.info.rtt_s

    def _judge(self, k: int, got: dict) -> list[str]:
        o = self.inv.options
        problems = []
        if got["goodput_mbps"] < (1 - o.rate_tolerance) * got["expected_mbps"]:
            problems.append(
                f"pair {k} carried at most {got['goodput_mbps']:.1f} Mbit/s alone, the scenario needs "
                f"{got['expected_mbps']:.1f} (tolerance {o.rate_tolerance:.0%})"
            )
        elif got["goodput_mbps"] > (1 + o.rate_tolerance) * got["expected_mbps"] and self.inv.router is not None:
            problems.append(
                f"pair {k} carried {got['goodput_mbps']:.1f} Mbit/s alone, more than the {got['expected_mbps']:.1f} its "
                f"bottleneck allows (tolerance {o.rate_tolerance:.0%}): the router's shaping is not on this path "
                f"(check that the route from {self.inv.senders[k]} to {self.inv.receivers[k]} leaves {self.inv.router.host} "
                f"by {self.inv.router.bottleneck})"
            )
        elif got["goodput_mbps"] > (1 + o.rate_tolerance) * got["expected_mbps"]:
            self.warnings.append(
                f"pair {k} carried {got['goodput_mbps']:.1f} Mbit/s alone, more than the scenario's {got['expected_mbps']:.1f}: "
                "nothing on the path holds it to the scenario's rate (a router in the inventory would)"
            )
        slack = o.rtt_tolerance * got["expected_rtt_ms"] + 1.0
        if got["rtt_ms"] is None:
            self.warnings.append(f"pair {k}: no ping on the sender, the path's RTT was not checked")
        elif abs(got["rtt_ms"] - got["expected_rtt_ms"]) > slack:
            problems.append(
                f"pair {k}'s RTT is {got['rtt_ms']:.2f} ms, the scenario's {got['expected_rtt_ms']:.2f} ms "
                f"(tolerance ±{slack:.2f} ms; set topology.rtt to the path's, or options.rtt_tolerance)"
            )
        return problems

    # ------------------------------------------------------------------ run

    async def _wait_listening(self, want: dict[str, set[int]], timeout: float = 15.0) -> None:
        await wait_listening(self.bed.hosts, want, timeout)

    def _xfer_files(self, h: str) -> choreography.XferFiles:
        w = self.bed.workdir(h)
        return choreography.XferFiles(self.xfer.get(h, ""), f"{w}/xfer-root", f"{w}/xfer.key")

    def _server(self, f: _Flow, interval: float) -> list[str]:
        return choreography.server_args(f, interval, self._xfer_files(f.dst))

    def _client(self, f: _Flow, interval: float, end_s: float) -> list[str]:
        cc, ratio = variants.canonical(f.spec["variant"]), choreography.payload_ratio(self.info)
        trace = f"{self.bed.workdir(f.src)}/{f.name}.json"
        args, warnings = choreography.client_args(f, cc, interval, end_s, ratio, self._xfer_files(f.src), trace)
        self.warnings += warnings
        return args

    def _end_s(self) -> float:
        return choreography.scenario_end_s(self.info, self.flows)

    async def run_flows(self) -> _Measured:
        m = _Measured()
        interval = choreography.report_interval(self.info)
        by_dst: dict[str, list[_Flow]] = {}
        for f in self.flows:
            by_dst.setdefault(f.dst, []).append(f)
        t = time.monotonic()
        end_s = self._end_s()
        servers = {h: self._servers(h, fs, interval) for h, fs in by_dst.items()}
        for b in self.background:
            servers.setdefault(b.dst, []).append(self._sink_command(b, end_s))
        await hosts.together(*(self.bed.hosts[h].run("\n".join(cmds)) for h, cmds in servers.items()))
        await self._wait_listening(choreography.listening_wanted(self.flows))
        # Launching takes a command per host: the first start leaves room for a few of them
        # (a loaded controller or a slow link makes them slower).
        lead = max(LEAD_S, 3 * (time.monotonic() - t))
        m.t0_ns = time.time_ns() + int(lead * 1e9)
        by_src: dict[str, list[str]] = {}
        m.interval, m.end_s = interval, end_s
        m.waiting = [f for f in self.flows if f.spec.get("start_after")]
        for f in self.flows:
            if f not in m.waiting:
                by_src.setdefault(f.src, []).append(self._start_command(m, f))
        for b in self.background:
            by_src.setdefault(b.src, []).append(self._source_command(m, b))
        await hosts.together(
            self._start_sampler(m.t0_ns), *(self.bed.hosts[h].run("\n".join(cmds)) for h, cmds in by_src.items())
        )
        late = (time.time_ns() - m.t0_ns) / 1e9
        if late > 0:
            m.warnings.append(
                f"the flows' commands reached their hosts {late:.2f} s after the first start time: the first flows started late"
            )
        self.step_s["lead"] = lead
        bg = (
            f"; {len(self.background)} background source(s) on {', '.join(b.src for b in self.background)}"
            if self.background
            else ""
        )
        senders = ", ".join(dict.fromkeys(f.src for f in self.flows))
        self.say(f"run: {len(self.flows)} flow(s) launched on {senders}, the first in {lead:.1f} s{bg}")
        await self._wait(m, end_s)
        await self._stop(m)
        return m

    def _start_command(self, m: _Measured, f: _Flow) -> str:
        """The command that starts ``f``'s client at its start_s on its host's clock."""
        at = clock.host_time_ns(m.t0_ns, f.spec["start_s"], self.offsets[f.src])
        return launch.timed(self.bed.workdir(f.src), f.name, at, self._client(f, m.interval, m.end_s))

    def _source_command(self, m: _Measured, b: _Background) -> str:
        """A background source from t = 0 until stopped (the netns backend's command and seed)."""
        at = clock.host_time_ns(m.t0_ns, 0.0, self.offsets[b.src])
        dst, seconds = choreography.host_port(b.dst_addr, b.port), m.end_s + BACKGROUND_SLACK_S
        tool = choreography.onoff_args(self.xfer[b.src], dst, b.source, self.info.mtu, self.info.seed + b.index, seconds)
        return launch.timed(self.bed.workdir(b.src), b.name, at, tool)

    def _sink_command(self, b: _Background, end_s: float) -> str:
        tool = choreography.sink_args(self.xfer[b.dst], choreography.host_port(b.dst_addr, b.port), end_s + BACKGROUND_SLACK_S)
        return launch.timed(self.bed.workdir(b.dst), f"{b.name}-sink", None, tool)

    def _servers(self, h: str, flows: list[_Flow], interval: float) -> list[str]:
        return [launch.timed(self.bed.workdir(h), f"{f.name}-server", None, self._server(f, interval)) for f in flows]

    async def _start_sampler(self, t0_ns: int) -> None:
        """The router's queue counters every link interval, on its clock's grid from t0."""
        router = self.inv.router
        if router is None:
            return
        devices = [router.bottleneck] + ([router.reverse] if router.reverse else [])
        at = clock.host_time_ns(t0_ns, 0.0, self.offsets[router.host])
        interval_ns = int(round(self.info.link_interval_s * 1e9))
        duration_ns = int((self._end_s() + BACKGROUND_SLACK_S) * 1e9)
        sampler = launch.link_sampler(self.xfer[router.host], devices, at, interval_ns, duration_ns)
        await self.bed.hosts[router.host].run(launch.timed(self.bed.workdir(router.host), "link", None, sampler))

    async def _poll(self, m: _Measured, names_by_host: dict[str, list[str]]) -> None:
        lost = self.bed.lost()
        if lost:
            raise RemoteError(lost)
        texts = await hosts.together(
            *(self.bed.hosts[h].run(launch.status(self.bed.workdir(h), names)) for h, names in names_by_host.items())
        )
        for text in texts:
            m.done.update(launch.parse_status(text))

    async def _wait(self, m: _Measured, end_s: float) -> None:
        """Until every transfer has ended (or the deadline); a failed transfer or a lost host
        fails the run."""
        by_src: dict[str, list[str]] = {}
        for f in self.flows:
            by_src.setdefault(f.src, []).append(f.name)
        deadline = choreography.deadline_s(end_s, self.flows)
        transfers = [f for f in self.flows if f.transfer]
        while True:
            await self._poll(m, by_src)
            failed = [f for f in transfers if f.name in m.done and m.done[f.name][0] != 0]
            if failed:
                await asyncio.sleep(1.0)  # a host that died takes its flows with it: say the cause, not the symptom
                lost = self.bed.lost()
                raise RemoteError(lost or await self._failure(failed[0], m.done[failed[0].name][0]))
            now = (time.time_ns() - m.t0_ns) / 1e9
            if self.progress is not None:
                self.progress(min(max(now, 0.0), end_s), end_s)
            await self._launch_signalled(m)
            if all(f.name in m.done for f in transfers):
                return
            if now > deadline:
                m.warnings.append(f"transfers still running at {deadline:.1f} s were stopped")
                return
            await asyncio.sleep(SIGNAL_POLL_S if m.waiting else POLL_S)

    async def _launch_signalled(self, m: _Measured) -> None:
        """Flows that start after another pair's transfers (ViFi by signal): once every transfer
        of that pair has ended, each is due ``delay_s`` after the last of their ends, those ends
        read on their hosts' clocks and brought to the controller's by the measured offsets.
        The controller learns of an end by polling, so a delay shorter than a poll and an SSH
        round trip starts late: the start error says by how much."""
        transfers = [t for t in self.flows if t.transfer]
        ended = {t.name: self._run_s(m, m.done[t.name][1], t.src) for t in transfers if t.name in m.done}
        due, m.waiting = choreography.signalled(m.waiting, transfers, ended)
        if not due:
            return
        by_src: dict[str, list[str]] = {}
        for f in due:
            by_src.setdefault(f.src, []).append(self._start_command(m, f))
        await hosts.together(*(self.bed.hosts[h].run("\n".join(cmds)) for h, cmds in by_src.items()))

    async def _failure(self, f: _Flow, status: int) -> str:
        w = self.bed.workdir(f.src)
        errors = cmd("grep", "-h", '"error"', f"{w}/{f.name}.out")
        tail = cmd("tail", "-c", "400", f"{w}/{f.name}.err") + "; " + errors + " | tail -n 1"
        err = await self.bed.hosts[f.src].run(tail, check=False)
        tail = " ".join(err.split()) or "no message"
        return f"flow {f.spec['flow_id']} ({f.tool} {f.src} → {f.dst}) failed with exit status {status}: {tail}"

    async def _stop(self, m: _Measured) -> None:
        """Interrupts what still runs (reverse traffic: iperf3 prints its JSON on SIGTERM),
        then the servers and the sampler; waits for their groups to be gone."""
        groups: dict[str, list[str]] = {}
        for f in self.flows:
            if f.name not in m.done:
                groups.setdefault(f.src, []).append(f.name)
            groups.setdefault(f.dst, []).append(f"{f.name}-server")
        for b in self.background:
            groups.setdefault(b.src, []).append(b.name)
            groups.setdefault(b.dst, []).append(f"{b.name}-sink")
        if self.inv.router is not None:
            groups.setdefault(self.inv.router.host, []).append("link")

        async def stop(h: str, names: list[str]) -> None:
            w = self.bed.workdir(h)
            await self.bed.hosts[h].run("; ".join(launch.signal_group(w, n) for n in names))
            deadline = time.monotonic() + 5 + 4 * max(f.rtt_s for f in self.flows)
            while (await self.bed.hosts[h].run(launch.alive(w, names))).split():
                if time.monotonic() > deadline:
                    await self.bed.hosts[h].run("; ".join(launch.signal_group(w, n, "KILL") for n in names))
                    break
                await asyncio.sleep(0.1)

        await hosts.together(*(stop(h, names) for h, names in groups.items()))

    # ------------------------------------------------------------------ collect

    async def collect(self, m: _Measured) -> None:
        """Brings each host's folder back into ``logs/<host>/`` (the run folder keeps it)."""
        self.logs = Path(tempfile.mkdtemp(prefix="xferlab-ssh-logs-"))
        try:
            await self._collect(m)
        except BaseException:
            shutil.rmtree(self.logs, ignore_errors=True)
            self.logs = None
            raise

    async def _collect(self, m: _Measured) -> None:
        skip = ["--exclude=./xfer", "--exclude=./xfer.key", "--exclude=./xfer-root"]

        async def one(name: str) -> None:
            data = await self.bed.hosts[name].read_bytes(cmd("tar", "cf", "-", "-C", self.bed.workdir(name), *skip, "."))
            dest = self.logs / name
            dest.mkdir()
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                tar.extractall(dest, filter="data")

        await hosts.together(*(one(n) for n in self.bed.names))
        for f in self.flows:
            src = self.logs / f.src
            out = src / (f"{f.name}.json" if f.tool == "xfer" else f"{f.name}.out")
            m.outputs[f.name] = choreography.read_json(out)
            start = _read_text(src / f"{f.name}.start")
            if start.isdigit():
                m.started[f.name] = int(start)
        for b in self.background:
            sent, got = (
                choreography.read_json(self.logs / b.src / f"{b.name}.out"),
                choreography.read_json(self.logs / b.dst / f"{b.name}-sink.out"),
            )
            if not sent:
                m.warnings.append(f"background source {b.index} ({b.src} → {b.dst}) reported nothing (logs/{b.src}/{b.name}.err)")
            m.background[b.name] = {"sent": sent or {}, "received": got or {}}
        if self.inv.router is not None:
            self._link_samples(m)
        self.say(f"collect: logs of {len(self.bed.names)} host(s) kept in the run folder (logs/)")

    def _link_samples(self, m: _Measured) -> None:
        router = self.inv.router
        text = _read_text(self.logs / router.host / "link.out")
        off = self.offsets[router.host]
        for t_ns, q in launch.parse_link_log(text):
            t = (t_ns - round(off.offset_s * 1e9) - m.t0_ns) / 1e9
            m.link.append((t, {("bottleneck" if d == router.bottleneck else "reverse"): v for d, v in q.items()}))

    # ------------------------------------------------------------------ the Trace

    def trace(self, m: _Measured) -> Trace:
        """The run's Trace, converted by the importers, with what only this backend knows
        (hosts, clocks, start errors, calibration, changes and their restoration) as provenance."""
        try:
            tables, errors = self._tables(m), self._start_errors(m)
            regularity = linktable.sampling(m.link, "bottleneck", self.info.link_interval_s) if self.inv.router else None
            implausible = linktable.plausibility(tables["link"], tables["flows"], self.r, regularity)
            stats = {
                "run_id": self.run_id,
                "hosts": {n: {**self.facts[n].dump(), "clock": self.offsets[n].dump()} for n in self.bed.names},
                "start_error_ms": errors,
                "calibration": self.calibration,
                "configured": {n: [c.what for c in cs] for n, cs in self.changes.items()},
                "xfer_deployed": {
                    n: ("static" if self.xfer_static else "glibc")
                    for n, path in self.xfer.items()
                    if path.startswith(self.bed.workdir(n))
                },
                "restored": dict(self.restored.undone) if self.restored else {},
                "background_bytes": [int(v["sent"].get("bytes", 0)) for v in m.background.values()],
                "background_received_bytes": [int(v["received"].get("bytes", 0)) for v in m.background.values()],
                "steps_s": self.step_s,
                "link_sampling": regularity,
                "implausible": implausible,
            }
            provenance = Provenance(
                producer=NAME,
                setup=self._setup_rows(errors, stats),
                warnings=self.warnings + m.warnings + implausible,
                unknown=self._unknown(tables["tcp"]),
                stats=stats,
            )
            end_s = max([float(x) for x in tables["flows"].column("end").to_pylist()] + [0.0])
            iperf = sorted({f.iperf3 for f in self.facts.values() if f.iperf3})
            versions = {
                "iperf3": "; ".join(iperf) or "none",
                "kernel": "; ".join(sorted({f.kernel for f in self.facts.values()})),
            }
            t = Trace.build(tables, self.info, provenance, end_s=end_s, versions=versions)
        except BaseException:
            shutil.rmtree(self.logs, ignore_errors=True)
            raise
        t.files["logs"] = self.logs
        return t

    def _run_s(self, m: _Measured, t_ns: int, host: str) -> float:
        """A time read on ``host``'s clock (ns), in run seconds on the controller's."""
        return (t_ns - round(self.offsets[host].offset_s * 1e9) - m.t0_ns) / 1e9

    def _tables(self, m: _Measured) -> dict:
        """The Trace's tables of the tools' outputs (:func:`choreography.flow_tables`), their
        launches and ends read on the senders' clocks; half the RTT is each way's."""
        outcomes = []
        for f in self.flows:
            doc = m.outputs.get(f.name)
            if not doc:
                raise BackendError(f"flow {f.spec['flow_id']} produced no {f.tool} output (see logs/{f.src}/{f.name}.err)")
            ended = self._run_s(m, m.done[f.name][1], f.src) if f.name in m.done else 0.0
            launched = self._run_s(m, m.started[f.name], f.src) if f.name in m.started else 0.0
            outcomes.append(choreography.Outcome(f, doc, max(0.0, launched), ended, f.src, f.dst, f.rtt_s / 2))
        tables = choreography.flow_tables(outcomes, self.info.mss, self.info.goodput_interval_s)
        tables["link"] = self._link_table(m)
        return tables

    def _link_table(self, m: _Measured) -> pa.Table:
        """The router's counters on the link interval's grid (:func:`linktable.resampled`);
        random losses elsewhere on a real path are not observed (null)."""
        links = ("bottleneck", "reverse") if self.inv.router and self.inv.router.reverse else ("bottleneck",)
        return linktable.resampled(m.link, links, self.info.link_interval_s, losses=None)

    def _start_errors(self, m: _Measured) -> dict:
        per_flow = {}
        for f in self.flows:
            if f.name in m.started:
                err = clock.start_error_s(m.started[f.name], m.t0_ns, f.spec["start_s"], self.offsets[f.src])
                per_flow[str(f.spec["flow_id"])] = err * 1e3
        errs = list(per_flow.values()) or [0.0]
        return {
            "mean": sum(errs) / len(errs),
            "max_abs": max(abs(e) for e in errs),
            "clock_uncertainty_max": max(o.uncertainty_s for o in self.offsets.values()) * 1e3,
            "per_flow": per_flow,
        }

    def _setup_rows(self, errors: dict, stats: dict) -> list[tuple[str, str]]:
        inv, rows = self.inv, []
        pairs = ", ".join(f"{inv.senders[k]} → {inv.receivers[k]}" for k in range(self.info.pairs))
        rows.append(("hosts", f"{pairs}" + (f"; router {inv.router.host}" if inv.router else "")))
        rows.append(("kernels", ", ".join(sorted({f.kernel for f in self.facts.values()}))))
        if inv.router is not None:
            s = self._shaping()[0]
            rows.append(
                ("bottleneck", f"router {inv.router.host}, {s.dev}: HTB {s.rate_bps / 1e6:g} Mbit/s over pfifo {s.buffer_pkts}")
            )
        else:
            rows.append(("bottleneck", "the path's own (no router in the inventory: not shaped, not observed)"))
        worst = max(self.offsets.values(), key=lambda o: abs(o.offset_s))
        rows.append(
            (
                "clock offsets",
                f"largest {worst.offset_s * 1e3:+.2f} ms, known to ± {errors['clock_uncertainty_max']:.2f} ms "
                f"({inv.options.clock_probes} probes per host)",
            )
        )
        rows.append(("start error", f"mean {errors['mean']:+.2f} ms, largest {errors['max_abs']:.2f} ms (host clocks corrected)"))
        for k, c in sorted(self.calibration.items()):
            rtt = f"RTT {c['rtt_ms']:.2f} ms idle" if c["rtt_ms"] is not None else "RTT not measured"
            rows.append((f"calibration pair {k}", f"{c['goodput_mbps']:.1f} Mbit/s alone, {rtt}"))
        if stats.get("link_sampling"):
            ls = stats["link_sampling"]
            rows.append(
                (
                    "link samples",
                    f"{ls['samples']} on the router's clock, asked every {ls['asked_ms']:g} ms: mean {ls['mean_ms']:.2f} ms, "
                    f"largest gap {ls['max_ms']:.1f} ms (the link table is on the interval's grid)",
                )
            )
        n = sum(len(cs) for cs in self.changes.values())
        rows.append(("host changes", f"{n} change(s) on {len(self.changes)} host(s), restored after the run"))
        if self.background:
            where = ", ".join(f"{b.src} → {b.dst}" for b in self.background)
            name, text = choreography.background_row(stats["background_bytes"], stats["background_received_bytes"])
            rows.append((name, f"{text}; on {where}"))
        return rows

    def _unknown(self, tcp: pa.Table) -> dict[str, str]:
        unknown = {
            **choreography.tools_unknown(tcp),
            "flows.timeouts": "iperf3 and xfer do not report them",
            "timeouts": "iperf3 and xfer do not report them",
        }
        if self.inv.router is None:
            why = "no router in the inventory: the bottleneck is not observed"
            for key in ("link.throughput_mbps", "link.drops", "link.queue_pkts", "bottleneck_drops", "queueing_delay_max_ms"):
                unknown[key] = why
        else:
            why = "a real path's random losses are not observed (retransmissions_beyond_drops: what the drops do not explain)"
            unknown["link.losses"] = unknown["bottleneck_losses"] = why
            unknown["link.queue_max_pkts"] = (
                "the router's queue is sampled at the link interval, not its largest value in between"
            )
            unknown["bottleneck_max_queue_pkts"] = "the router's queue is sampled, not its largest value"
            unknown["queueing_delay_max_ms"] = "the router's queue is sampled, not its largest value"
        return unknown


async def deploy_xfer(h: Host, workdir: str, key: str, binary: bool) -> bool:
    """Writes the run's transfer key to ``workdir/xfer.key`` on ``h`` and, with ``binary``,
    this build's xfer to ``workdir/xfer`` (:func:`choreography.deployable_xfer`); whether the
    xfer written is the static build."""
    static = False
    if binary:
        path, static = choreography.deployable_xfer()
        await h.write(f"{workdir}/xfer", Path(path).read_bytes(), mode="755")
    await h.write(f"{workdir}/xfer.key", key)
    return static


async def ping_rtt(h: Host, has_ping: bool, src: str, dst: str) -> float | None:
    """The path's RTT, idle: the smallest of a few pings from ``src`` to ``dst`` on ``h``
    (None: no ping on the host, or no answer)."""
    if not has_ping:
        return None
    ping = cmd("ping", "-n", "-q", "-c", PINGS, "-i", "0.2", "-W", "2", "-I", src, dst)
    text = await h.run(ping, check=False, timeout=30)
    m = re.search(r"= ([\d.]+)/", text)
    return float(m.group(1)) / 1e3 if m else None


async def wait_listening(on: dict[str, Host], want: dict[str, set[int]], timeout: float = 15.0) -> None:
    """Until something listens on each host's ports (``ss``; ``on``: the hosts by name), or a server gave up."""
    want = {h: set(p) for h, p in want.items()}
    deadline = time.monotonic() + timeout
    while want:
        for name in list(want):
            want[name] -= launch.parse_ports(await on[name].run(launch.LISTENING))
            if not want[name]:
                del want[name]
        if want and time.monotonic() > deadline:
            raise RemoteError(
                f"servers not listening after {timeout:.0f} s: " + ", ".join(f"{h} port(s) {sorted(p)}" for h, p in want.items())
            )
        if want:
            await asyncio.sleep(0.05)


def buffer_warnings(host: str, changes: list[plan.Change]) -> list[str]:
    """A socket buffer limit changed for the run, said: the value it had and the one it was
    given (a host left as it was would measure its own limit, not TCP's)."""
    out = []
    for c in changes:
        if c.undo["kind"] == "sysctl" and c.undo["key"] in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"):
            out.append(
                f"{host}: {c.undo['key']} was {c.undo['previous']!r}, set to {c.what.split(' = ', 1)[1]!r} for the run "
                "(the scenario's BDP and buffer need it); restored after"
            )
    return out


def steady_goodput_bps(intervals: list[dict], window_s: float) -> float:
    """The best goodput of a transfer over ``window_s`` of consecutive full report intervals
    (iperf3's JSON ``intervals``): a short last interval (iperf3's tail, tens of ms) and a
    single interval's burst are not the path's rate."""
    spans = [iv.get("sum") or {} for iv in intervals]
    full = max((float(x.get("seconds") or 0) for x in spans), default=0.0)
    rows = [(float(x["seconds"]), float(x.get("bytes") or 0)) for x in spans if float(x.get("seconds") or 0) >= 0.9 * full > 0]
    best = 0.0
    for i in range(len(rows)):
        seconds = bytes_ = 0.0
        for dt, b in rows[i:]:
            seconds, bytes_ = seconds + dt, bytes_ + b
            if seconds >= window_s - 1e-9:
                best = max(best, bytes_ * 8 / seconds)
                break
    if best == 0.0 and rows:  # a transfer shorter than the window: its whole
        best = sum(b for _, b in rows) * 8 / sum(dt for dt, _ in rows)
    return best


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""
