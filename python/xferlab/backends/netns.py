"""Real Linux TCP in network namespaces on this host: a software GtrcNET.

One run: take the host lock, remove a crashed run's leftovers, build the dumbbell
(:mod:`xferlab.netns.topology`), register the BPF congestion controls the scenario needs,
start the delay line, one ``iperf3`` server per flow, then each flow's client at its start
time; sample the bottleneck counters at the link interval; collect the iperf3 JSON; tear
everything down on every exit path; convert it all into the Trace.  A scenario too fast
for this host is dilated in time by K (:mod:`xferlab.netns.scaling`).
"""

from __future__ import annotations

import contextlib
import json
import math
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from .. import constants, variants
from ..netns import bpfcc, host, scaling
from ..netns import topology as topo
from ..netns import watch as sockwatch
from ..netns.qstats import QdiscReader
from ..runinfo import Provenance, RunInfo
from ..trace import Trace
from . import choreography, xfer_plan
from .base import BackendError, Progress
from .choreography import STATIC_XFER, FlowPlan, background_row, onoff_args, xfer_binary
from .linktable import link_table

NAME = "netns"
BASE_PORT = 5201
#: Delay-line punctuality a run must meet to be trusted (issue 5's benchmark goals).
LATE_MEAN_MS = 0.2
LATE_P99_MS = 1.0
#: How many times a void run (an impossible window from a BPF congestion control, seen by
#: netns.watch.SocketWatch) is run again before the run fails. The fidelity matrix had 12 void
#: runs in 48 with these programs (docs/journal/validation-history.md, "12 kernel runs were void"):
#: three in a row ≈ 1.6 % of runs, at that rate.
VOID_RETRIES = 2


def delay_binary() -> str:
    """The delay line: $XFERLAB_DELAY, ``xferlab-delay`` on PATH, or the workspace build."""
    return choreography.workspace_binary("XFERLAB_DELAY", "xferlab-delay", "xferlab-delayline")


#: Where background sources send (the discard port; the receiving host drops it without ICMP).
DISCARD_PORT = 9


def deployable_xfer() -> tuple[str, bool]:
    """The xfer to copy to remote hosts (:func:`choreography.deployable_xfer`, this module's STATIC_XFER)."""
    return choreography.deployable_xfer(STATIC_XFER)


def kernel_variant(variant: str) -> str:
    """The kernel's name of a variant: built in, or the project's BPF program (xferlab.variants)."""
    return variants.kernel_name(variant)


@dataclass
class _Flow(FlowPlan):
    """A flow between two namespaces (src, dst) and its processes on this host."""

    server: subprocess.Popen | None = None
    client: subprocess.Popen | None = None
    launched: float | None = None  # monotonic seconds from the run's t0
    exited: float | None = None


class _Sampler(threading.Thread):
    """Reads the bottleneck queues' counters every ``interval`` seconds (rtnetlink, no process)."""

    def __init__(self, dumbbell, t0: float, interval: float, reverse: bool, random_loss: bool = False):
        super().__init__(daemon=True, name="xferlab-link-sampler")
        self.random_loss = random_loss  # then the losses are not counted (an iptables rule): null
        self.t0, self.interval = t0, interval
        links = [("bottleneck", dumbbell.left)] + ([("reverse", dumbbell.right)] if reverse else [])
        self.readers = [(name, QdiscReader(ns, "core")) for name, ns in links]
        self.reverse = reverse
        self.samples: list[tuple[float, dict]] = []
        self.stop = threading.Event()
        self.cost_s = 0.0

    def run(self):
        k = 0
        try:
            while not self.stop.is_set():
                c0 = time.perf_counter()
                stats, stamp = {}, None
                for name, reader in self.readers:
                    at, q = reader.read()
                    stamp = at if stamp is None else stamp
                    if q is not None:
                        stats[name] = q
                self.cost_s += time.perf_counter() - c0
                self.samples.append((stamp - self.t0, stats))
                k += 1
                now = time.monotonic()
                if self.t0 + k * self.interval <= now:  # fell behind: skip the missed ticks
                    k = int((now - self.t0) / self.interval) + 1
                self.stop.wait(self.t0 + k * self.interval - now)
        finally:
            for _, reader in self.readers:
                reader.close()

    def table(self, interval: float) -> pa.Table:
        links = ("bottleneck", "reverse") if self.reverse else ("bottleneck",)
        return link_table(self.samples, links, interval, self.random_loss)


class _Terminated(Exception):
    pass


def _on_sigterm(signum, frame):  # pragma: no cover - exercised by the cleanup test
    raise _Terminated()


def check_host() -> None:
    try:
        host.require_root()
        host.require_tools("ip", "iptables", "iperf3")  # the rest goes over rtnetlink and ioctls (pyroute2)
    except host.HostError as e:
        raise BackendError(str(e)) from None


def _needs_bpf(kernel: dict):
    """Registers the project's BPF congestion controls this run needs, for the run only."""
    extra = sorted(v for v in kernel if variants.needs_bpf(v))
    if not extra:
        return contextlib.nullcontext()
    return bpfcc.registered(extra)


def unsupported(resolved: dict) -> str | None:
    """What of a resolved scenario this backend cannot run yet, said plainly (None: all)."""
    return next((why for f in resolved["flows"] if (why := xfer_plan.not_drivable(f))), None)


def run(scenario, resolved: dict, progress: Progress | None = None, scale: float | None = None) -> Trace:
    """Runs ``resolved`` on this host; ``scale`` = K of the time dilation (None: automatic)."""
    check_host()
    missing_feature = unsupported(resolved)
    if missing_feature:
        raise BackendError(f"the netns backend does not implement {missing_feature} yet")
    info = RunInfo.model_validate(resolved)
    if info.shaper is not None and info.shaper.kind == "pacer":
        raise BackendError("a pacing shaper on the bottleneck (topology.shaper.limiter: pacing) has no netns equivalent")
    if scale is not None and (not math.isfinite(scale) or scale <= 0):
        raise BackendError(f"--scale must be a positive number (got {scale})")
    k = float(scale) if scale else scaling.auto_factor(resolved)
    emu = scaling.scale_resolved(resolved, k)
    if k != 1 and not scale:
        print(
            f"xferlab: this host emulates about {scaling.DEFAULT_CAPACITY_BPS / 1e6:.0f} Mbit/s; running the scenario "
            f"{k:g}× slower (rates ÷ {k:g}, times × {k:g}; --scale 1 runs it at full speed)",
            file=sys.stderr,
            flush=True,
        )
    binary = delay_binary()
    try:
        kernel = {v: kernel_variant(v) for v in sorted({f.variant for f in info.flows})}
    except (KeyError, ValueError) as e:
        raise BackendError(f"variant not available on the netns backend: {e}") from None

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main else None
    try:
        with host.host_lock(on_wait=_say_waiting):
            removed = host.cleanup_leftovers()
            with _needs_bpf(kernel):
                m = _run_valid(emu, kernel, binary, k, progress)
            m.stats["removed_leftovers"] = removed
            return _trace(resolved, emu, m, kernel, k)
    except host.HostError as e:
        raise BackendError(f"netns: {e}") from None
    except _Terminated:
        raise KeyboardInterrupt from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run_valid(emu: dict, kernel: dict, binary: str, k: float, progress) -> _Measured:
    """Runs the emulation, again when a run is void (up to VOID_RETRIES times); each void
    attempt is told on stderr and kept as a warning of the run that counts."""
    void: list[str] = []
    for attempt in range(1 + VOID_RETRIES):
        m = _run_locked(emu, kernel, binary, k, progress)
        if m.void is None:
            m.warnings[:0] = [f"attempt {i + 1} was void and was run again: {why}" for i, why in enumerate(void)]
            return m
        void.append(m.void)
        if attempt < VOID_RETRIES:
            print(f"xferlab: run void: {m.void}; running it again", file=sys.stderr, flush=True)
    raise BackendError(f"{len(void)} runs in a row were void, the last because {void[-1]}; nothing was kept")


def _say_waiting() -> None:
    print("xferlab: another emulation is running on this host; waiting for it to finish", file=sys.stderr, flush=True)


def _popen(args: list[str], ns: str, stdout=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", ns, *args], stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def _flows(d, emu: dict) -> tuple[list[_Flow], list]:
    flows, buckets = [], []
    for f in emu["flows"]:
        pair = f["pair"]
        src, dst = ("a", "b") if f.get("role", "transfer") == "transfer" else ("b", "a")
        port = BASE_PORT + f["flow_id"]
        flows.append(
            _Flow(
                spec=f,
                src=d.ns(src, pair),
                dst=d.ns(dst, pair),
                dst_addr=d.addr(dst, pair),
                port=port,
                rtt_s=emu["pair_paths"][pair]["rtt_s"],
            )
        )
        lim = f.get("limiter")
        if lim and lim["kind"] == "token_bucket":
            buckets.append(
                topo.FlowClass(host=d.ns(src, pair), port=port, rate_bps=lim["rate_bps"], burst_bytes=lim["burst_bytes"])
            )
    return flows, buckets


@dataclass
class _Measured:
    """What an emulation leaves to be turned into a Trace."""

    tables: dict
    stats: dict
    warnings: list[str]
    void: str | None = None  # why the run's results cannot be kept (netns.watch.SocketWatch)


def _dumbbell_spec(emu: dict) -> tuple[topo.DumbbellSpec, int]:
    """The emulated dumbbell: the pairs' paths, then one host pair per background source."""
    paths = [topo.PathSpec(p["access_rate_bps"], p["rtt_s"]) for p in emu["pair_paths"]]
    first_bg = len(paths)
    paths += [topo.PathSpec(b["rate_bps"], emu["rtt_s"]) for b in emu.get("background") or []]
    shaper = emu.get("shaper")
    sock_buf, rcv_buf = constants.host_buffers(emu, max(p.rtt_s for p in paths))
    spec = topo.DumbbellSpec(
        run_id=uuid.uuid4().hex[:6],
        paths=paths,
        bottleneck_rate_bps=shaper["rate_bps"] if shaper else emu["bottleneck_rate_bps"],
        bottleneck_burst_bytes=shaper["burst_bytes"] if shaper else None,
        buffer_pkts=emu["buffer_packets"],
        mtu=emu["mtu"],
        loss_rate=emu["loss_rate"],
        initial_cwnd=emu["initial_cwnd"],
        rto_min_s=emu["rto_min_s"],
        delayed_ack=emu["delayed_ack"],
        sock_buf_bytes=sock_buf,
        rcv_buf_bytes=rcv_buf,
    )
    return spec, first_bg


def _run_locked(emu: dict, kernel: dict, binary: str, k: float, progress) -> _Measured:
    """Builds the dumbbell, runs every flow, collects the tools' output; tears all down."""
    spec, first_bg = _dumbbell_spec(emu)
    d = topo.Dumbbell(spec)
    flows, spec.token_buckets = _flows(d, emu)
    background = emu.get("background") or []
    workdir = Path(tempfile.mkdtemp(prefix="xferlab-netns-"))
    procs = _Procs()
    try:
        t_build = time.monotonic()
        d.build()
        for j in range(len(background)):
            # The sink discards the datagrams without an ICMP reply.
            host.sh(
                ["iptables", "-w", "-A", "INPUT", "-p", "udp", "--dport", str(DISCARD_PORT), "-j", "DROP"],
                ns=d.ns("b", first_bg + j),
            )
        build_s = time.monotonic() - t_build
        return _emulate(d, flows, emu, kernel, binary, k, progress, workdir, procs, first_bg, build_s)
    finally:
        procs.stop(flows)
        d.teardown()
        shutil.rmtree(workdir, ignore_errors=True)


class _Procs:
    """The processes and the sampler of a run, stopped on every exit path."""

    def __init__(self):
        self.delay: subprocess.Popen | None = None
        self.background: list[subprocess.Popen] = []
        self.sampler: _Sampler | None = None
        self.watch: sockwatch.SocketWatch | None = None

    def stop(self, flows: list[_Flow]) -> None:
        for th in (self.sampler, self.watch):
            if th is not None:
                th.stop.set()
        for p in [q for fl in flows for q in (fl.client, fl.server)] + self.background + [self.delay]:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def _emulate(d, flows, emu, kernel, binary, k, progress, workdir, procs: _Procs, first_bg: int, build_s: float) -> _Measured:
    """Starts the delay line, the servers, the link sampler, the background sources and each
    flow at its time; waits for the transfers; collects what everything measured."""
    warnings: list[str] = []
    info = RunInfo.model_validate(emu)
    reverse = any(not f.transfer for f in flows)
    procs.delay = _start_delay(d, binary, workdir / "delay.json")
    interval = choreography.report_interval(info)
    tools = _Tools(workdir, xfer_binary() if any(fl.tool == "xfer" for fl in flows) else None)
    for fl in flows:
        fl.server = _popen(tools.server(fl, interval), fl.dst)
    _wait_listening(flows)
    t0 = time.monotonic()
    sampler = procs.sampler = _Sampler(d, t0, emu["link_interval_s"], reverse=reverse, random_loss=bool(emu["loss_rate"]))
    sampler.start()
    watch = procs.watch = _watch(flows, t0)
    for j, b in enumerate(emu.get("background") or []):
        procs.background.append(_start_background(d, first_bg + j, b, emu, seed=emu["seed"] + j))
    _drive(flows, info, kernel, interval, t0, k, progress, warnings, procs.delay, tools)
    bg_bytes = _stop_background(procs.background)
    for th in (sampler, watch):
        th.stop.set()
        th.join()
    delay_stats = _stop_delay(procs.delay, workdir / "delay.json")
    procs.delay = None
    receivers = _receiver_counters(flows)
    outputs = {fl.spec["flow_id"]: choreography.read_json(tools.output(fl)) for fl in flows}
    stats = {
        "scale": k,
        "build_s": build_s,
        "delay_line": delay_stats,
        "link_sampler_cpu_s": sampler.cost_s,
        "background_bytes": bg_bytes,
        "receivers": receivers,
    }
    stats["socket_watch"] = {
        "interval_s": watch.interval,
        "discover_s": watch.discover_s,
        "samples": watch.samples,
        "cpu_s": watch.cost_s,
    }
    tables = _with_timeouts(_tables(flows, outputs, info, sampler), flows, watch)
    return _Measured(tables, stats, warnings, _void(watch, flows, k))


def _with_timeouts(tables: dict, flows: list[_Flow], watch: sockwatch.SocketWatch) -> dict:
    """The flows table with each flow's retransmission timeouts, as its sender's socket last
    told the watch (null where it was not read or the kernel does not count them)."""
    by_id = {fl.spec["flow_id"]: watch.timeouts(fl.src, fl.port) for fl in flows}
    t = tables["flows"]
    counts = pa.array([by_id.get(i) for i in t.column("flow_id").to_pylist()], type=t.schema.field("timeouts").type)
    return {**tables, "flows": t.set_column(t.schema.get_field_index("timeouts"), "timeouts", counts)}


def _receiver_counters(flows: list[_Flow]) -> dict[str, int]:
    """The TCP counters (host.TCP_COUNTERS) of the namespaces that received the flows'
    data, summed: how their stacks took it and how often they acknowledged it."""
    total: dict[str, int] = {}
    for ns in sorted({fl.dst for fl in flows}):
        try:
            counters = host.tcp_counters(ns)
        except OSError:  # a figure of the report, not worth a run: left out
            return {}
        for key, value in counters.items():
            total[key] = total.get(key, 0) + value
    return total


def _watch(flows: list[_Flow], t0: float) -> sockwatch.SocketWatch:
    """A socket watch on every flow's sender, as often as a void run needs where a BPF
    program runs a flow, else as often as counting timeouts needs."""
    if any(variants.needs_bpf(fl.spec["variant"]) for fl in flows):
        every = (sockwatch.WATCH_INTERVAL_S, sockwatch.WATCH_DISCOVER_S)
    else:
        every = (sockwatch.RTO_WATCH_INTERVAL_S, sockwatch.RTO_DISCOVER_S)
    watch = sockwatch.SocketWatch([fl.src for fl in flows], t0, *every)
    watch.start()
    return watch


def _void(watch: sockwatch.SocketWatch, flows: list[_Flow], k: float) -> str | None:
    """Why the run is void, in the scenario's terms (None: it is not)."""
    seen = watch.sighting
    if seen is None:
        return None
    fl = next((fl for fl in flows if fl.src == seen.ns and seen.dport == fl.port), None)
    who = f"flow {fl.spec['flow_id']} ({fl.spec['variant']})" if fl is not None else f"a socket in {seen.ns}"
    return (
        f"the kernel gave {who} an impossible window at {seen.t / k:.2f} s "
        f"(ssthresh {seen.ssthresh:#x}, cwnd {seen.cwnd}), a known defect of BPF congestion controls "
        "on some kernels (docs/bpf-cc.md)"
    )


def _trace(resolved: dict, emu: dict, m: _Measured, kernel: dict, k: float) -> Trace:
    """The run's Trace, in the scenario's own units, with what the emulation adds to know
    about it (scale, kernel congestion controls, the delay line's punctuality) as provenance."""
    tables = scaling.unscale_tables(m.tables, k)
    warnings = list(m.warnings)
    late = _late(m.stats["delay_line"])
    if late:
        warnings.append(late)
    if k != 1:
        warnings.insert(
            0,
            f"scaled run: emulated {k:g}× slower (bottleneck {emu['bottleneck_rate_bps'] / 1e6:g} Mbit/s, "
            f"RTT {emu['rtt_s'] * 1e3:g} ms); the trace is converted back to the scenario's units",
        )
    stats = {
        **m.stats,
        "delay_line_late": bool(late),
        "emulated": {key: emu[key] for key in ("bottleneck_rate_bps", "access_rate_bps", "rtt_s")},
        "congestion_controls": kernel,
    }
    unknown = {
        **choreography.tools_unknown(tables["tcp"]),
        "link.queue_max_pkts": "the qdisc's backlog is sampled at the link interval, not its largest value in between",
        "bottleneck_max_queue_pkts": "the qdisc's backlog is sampled, not its largest value",
        "queueing_delay_max_ms": "the qdisc's backlog is sampled, not its largest value",
    }
    if tables["flows"].column("timeouts").null_count:
        why = "the kernel counts them from Linux 6.7 (tcpi_total_rto); or a flow's socket was never read"
        unknown |= {"flows.timeouts": why, "timeouts": why}
    if resolved.get("loss_rate"):
        unknown["link.losses"] = "random losses (an iptables rule) are not counted"
        unknown["bottleneck_losses"] = unknown["link.losses"]
    provenance = Provenance(
        producer=NAME,
        setup=_setup_rows(stats, k, emu),
        warnings=warnings,
        unknown=unknown,
        stats=stats,
    )
    end_s = max([float(x) for x in tables["flows"].column("end").to_pylist()] + [0.0])
    return Trace.build(
        tables, resolved, provenance, end_s=end_s, versions={"iperf3": _iperf3_version(), "kernel": platform.release()}
    )


def _setup_rows(stats: dict, k: float, emu: dict) -> list[tuple[str, str]]:
    """What a netns run adds to a report's setup: time dilation, the kernel's congestion
    controls, the delay line's punctuality."""
    rows = []
    if k != 1:
        rows.append(
            (
                "emulated as",
                f"scale K = {k:g}: {emu['bottleneck_rate_bps'] / 1e6:g} Mbit/s bottleneck, "
                f"{emu['rtt_s'] * 1e3:g} ms RTT, times × K",
            )
        )
    rows.append(("kernel congestion controls", ", ".join(f"{a} → {b}" for a, b in stats["congestion_controls"].items())))
    for q, d in sorted(((stats.get("delay_line") or {}).get("queues") or {}).items()):
        rows.append(
            (
                f"delay line queue {q}",
                f"{d.get('delay_ms', 0):g} ms, {d.get('packets', 0):,} packets, late mean {d.get('late_mean_ms', 0):.3f} / "
                f"p99 {d.get('late_p99_ms', 0):.3f} / max {d.get('late_max_ms', 0):.3f} ms"
                + (f", {d['batch_packet_mean']:.1f} packets per verdict (mean over packets)" if "batch_packet_mean" in d else ""),
            )
        )
    if row := receivers_row(stats.get("receivers") or {}):
        rows.append(row)
    if stats.get("background_bytes"):
        rows.append(background_row(stats["background_bytes"]))
    return rows


def receivers_row(counters: dict[str, int]) -> tuple[str, str] | None:
    """The setup row of the receivers' stacks (host.TCP_COUNTERS summed over them): segments
    in per segment out (their ACKs), and the share merged in a socket backlog while the
    application held the socket (Linux acknowledges such a merged run once)."""
    seg_in, seg_out = counters.get("Tcp:InSegs"), counters.get("Tcp:OutSegs")
    if not seg_in or not seg_out:
        return None
    text = f"{seg_in:,} segments in, {seg_out:,} out ({seg_in / seg_out:.1f} in per segment out)"
    if "TcpExt:TCPBacklogCoalesce" in counters:
        text += f", {counters['TcpExt:TCPBacklogCoalesce'] / seg_in:.0%} merged in the socket backlog"
    return ("receivers", text)


def _wait_listening(flows: list[_Flow], timeout: float = choreography.LISTEN_TIMEOUT_S) -> None:
    """Waits until every server listens (one `ss` per receiving namespace)."""
    want = choreography.listening_wanted(flows)
    deadline = time.monotonic() + timeout
    while want:
        for ns in list(want):
            out = host.sh(["ss", "-Hltn"], ns=ns, check=False)
            listening = {int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines() if line.split()[3:4]}
            want[ns] -= listening
            if not want[ns]:
                del want[ns]
        for fl in flows:
            if fl.server.poll() is not None:
                raise BackendError(f"{fl.tool} server on port {fl.port} exited: {fl.server.stderr.read().decode().strip()}")
        if want and time.monotonic() > deadline:
            raise BackendError(f"servers not listening after {timeout:.0f} s: {want}")
        if want:
            time.sleep(0.02)


class _Tools:
    """Where this run's tools keep their files: one output per flow in the run's folder, and
    xfer's server root and key (:mod:`choreography` writes their command lines)."""

    def __init__(self, workdir: Path, xfer: str | None):
        self.workdir, self.xfer = workdir, None
        if xfer is not None:
            (workdir / "xfer-root").mkdir()
            key = workdir / "xfer.key"
            key.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
            key.chmod(0o600)
            self.xfer = choreography.XferFiles(xfer, str(workdir / "xfer-root"), str(key), plaintext=True)

    def output(self, fl: _Flow) -> Path:
        return self.workdir / f"{fl.name}.json"

    def server(self, fl: _Flow, interval: float) -> list[str]:
        return choreography.server_args(fl, interval, self.xfer)

    def client(self, fl: _Flow, kernel: dict, interval: float, end_s: float, payload_ratio: float):
        cc = kernel[fl.spec["variant"]]
        return choreography.client_args(fl, cc, interval, end_s, payload_ratio, self.xfer, str(self.output(fl)))


def _drive(flows, info: RunInfo, kernel, interval, t0, k, progress, warnings, delay_proc, tools) -> None:
    """Starts each client at its time, waits for all, stops reverse traffic when transfers end."""
    transfers = [fl for fl in flows if fl.transfer]
    end_s = choreography.scenario_end_s(info, flows)
    max_rtt = max(fl.rtt_s for fl in flows)
    deadline = choreography.deadline_s(end_s, flows)
    payload_ratio = choreography.payload_ratio(info)
    waiting = [fl for fl in flows if fl.spec.get("start_after")]
    pending = sorted((fl for fl in flows if not fl.spec.get("start_after")), key=lambda x: x.spec["start_s"])
    total = end_s / k
    while True:
        now = time.monotonic() - t0
        pending, waiting = _signalled(pending, waiting, transfers)
        while pending and pending[0].spec["start_s"] <= now:
            fl = pending.pop(0)
            args, w = tools.client(fl, kernel, interval, end_s, payload_ratio)
            warnings.extend(w)
            with open(tools.output(fl), "wb") as fh:
                fl.client = _popen(args, fl.src, stdout=fh if fl.tool == "iperf3" else subprocess.DEVNULL)
            fl.launched = now
        for fl in flows:
            if fl.client is not None and fl.exited is None and fl.client.poll() is not None:
                fl.exited = time.monotonic() - t0
        if delay_proc.poll() is not None:
            err = delay_proc.stderr.read().decode().strip() if delay_proc.stderr else ""
            raise BackendError(f"the delay line died during the run ({err or 'exit ' + str(delay_proc.returncode)})")
        if progress is not None:
            progress(min(now, end_s) / k, total)
        if not pending and not waiting and all(fl.exited is not None for fl in transfers):
            break
        if now > deadline:
            warnings.append(f"transfers still running at {deadline / k:.1f} s were stopped")
            break
        time.sleep(0.05 if pending and pending[0].spec["start_s"] - now > 0.05 else 0.005)
    # Reverse traffic (and anything left) is interrupted: iperf3 prints its JSON on SIGINT.
    for fl in flows:
        if fl.client is not None and fl.client.poll() is None:
            fl.client.send_signal(signal.SIGINT)
    for fl in flows:
        if fl.client is not None:
            try:
                fl.client.wait(timeout=5 + 4 * max_rtt)
            except subprocess.TimeoutExpired:
                fl.client.kill()
                fl.client.wait()
            if fl.exited is None:
                fl.exited = time.monotonic() - t0


def _signalled(pending: list[_Flow], waiting: list[_Flow], transfers: list[_Flow]) -> tuple[list[_Flow], list[_Flow]]:
    """Signalled starts (:func:`choreography.signalled`), their transfers' ends on the
    controller's clock (xfer exits when its receiver has committed): (pending by start, waiting)."""
    ended = {t.name: t.exited for t in transfers if t.exited is not None}
    due, still = choreography.signalled(waiting, transfers, ended)
    return sorted(pending + due, key=lambda x: x.spec["start_s"]), still


def _start_background(d, pair: int, source: dict, emu: dict, seed: int) -> subprocess.Popen:
    """One unresponsive ON/OFF UDP source (``xfer onoff``) from host a{pair} to b{pair}'s
    discard port."""
    horizon = (emu["end_s"] or max((f["start_s"] + (f["duration_s"] or 0)) for f in emu["flows"])) + 60
    return _popen(
        onoff_args(xfer_binary(), f"{d.addr('b', pair)}:{DISCARD_PORT}", source, emu["mtu"], seed, horizon),
        d.ns("a", pair),
        stdout=subprocess.PIPE,
    )


def _stop_background(procs: list[subprocess.Popen]) -> list[int]:
    """Stops the background sources; the bytes each sent."""
    sent = []
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            out, _ = p.communicate(timeout=5)
            sent.append(int(json.loads(out or b"{}").get("bytes", 0)))
        except (subprocess.TimeoutExpired, ValueError):
            p.kill()
            p.wait()
            sent.append(0)
    return sent


def _start_delay(d, binary: str, stats_file: Path) -> subprocess.Popen:
    args = [binary, "--stats", str(stats_file), "--rt-priority", "50"]
    if topo.rps_mask():  # the end hosts' receive work runs on the other CPUs
        args += ["--cpu", str(topo.DELAY_CPU)]
    for q, delay in sorted(d.queues.items()):
        args += ["--queue", f"{q}:{delay * 1e6:.3f}us"]
    p = subprocess.Popen(
        ["ip", "netns", "exec", d.right, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    ready = threading.Event()

    def wait_ready():
        line = p.stdout.readline()
        if line.strip() == b"ready":
            ready.set()

    t = threading.Thread(target=wait_ready, daemon=True)
    t.start()
    t.join(10)
    if not ready.is_set():
        p.kill()
        p.wait()
        err = p.stderr.read().decode().strip()
        raise BackendError(f"the delay line did not start: {err or 'no ready line within 10 s'}")
    return p


def _stop_delay(p: subprocess.Popen, stats_file: Path) -> dict:
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    return choreography.read_json(stats_file) or {}


def _late(stats: dict) -> str | None:
    """A warning when the delay line missed the punctuality goals in this run."""
    bad = []
    for q, s in (stats.get("queues") or {}).items():
        if not s.get("packets"):
            continue
        if s.get("late_mean_ms", 0) > LATE_MEAN_MS or s.get("late_p99_ms", 0) > LATE_P99_MS:
            bad.append(f"queue {q}: mean {s['late_mean_ms']:.3f} ms, p99 {s['late_p99_ms']:.3f} ms")
        if s.get("queue_dropped") or s.get("user_dropped"):
            bad.append(f"queue {q}: {s.get('queue_dropped', 0) + s.get('user_dropped', 0)} packets dropped by the delay line")
    if stats.get("enobufs"):
        bad.append(f"{stats['enobufs']} netlink overruns")
    if stats.get("backlog_dropped"):
        bad.append(f"{stats['backlog_dropped']} packets lost in the host's input backlog (outside the bottleneck)")
    if not bad:
        return None
    return (
        f"emulation not clean (delay line tolerance: lateness mean ≤ {LATE_MEAN_MS} ms, p99 ≤ {LATE_P99_MS} ms, "
        "no packet lost outside the bottleneck): " + "; ".join(bad) + " — the host was too loaded for this run to be trusted"
    )


def _tables(flows: list[_Flow], outputs: dict, info: RunInfo, sampler: _Sampler) -> dict:
    """The Trace's tables of the tools' outputs (:func:`choreography.flow_tables`): all the
    delay is on the forward path (the delay line), the hosts are named by their namespaces."""
    outcomes = []
    for fl in flows:
        doc = outputs.get(fl.spec["flow_id"])
        if not doc:
            err = fl.client.stderr.read().decode().strip() if fl.client is not None and fl.client.stderr else ""
            raise BackendError(f"flow {fl.spec['flow_id']} produced no {fl.tool} output ({err or 'not started'})")
        ends = (fl.src.rsplit("-", 1)[1], fl.dst.rsplit("-", 1)[1])
        outcomes.append(choreography.Outcome(fl, doc, fl.launched or 0.0, fl.exited or 0.0, *ends, fl.rtt_s))
    tables = choreography.flow_tables(outcomes, info.mss, info.goodput_interval_s)
    tables["link"] = sampler.table(info.link_interval_s)
    return tables


def _iperf3_version() -> str:
    try:
        return subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.split("\n")[0].strip()
    except OSError:
        return "unknown"
