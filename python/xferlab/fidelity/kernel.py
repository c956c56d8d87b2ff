"""A case's side on the kernel: a netns run of its scenario with benches/fidelity_tcpinfo.py
sampling the senders' TCP_INFO beside it, and, traced in the kernel, the receivers' waits for
a CPU (netns.sched_waits) and the flows' ACK clocks (netns.tcp_probes). Root only.

The kernel's flows do not start within the scenario's 1 ms jitter (each is a process
launched on a busy host, a few round trips of setup before its data): the sampler measures
when each flow's data starts (figures.kernel_starts), and the simulator's runs of a
multi-flow case start their flows so."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .. import backends, metrics, scenario
from ..netns import sched_waits, tcp_probes
from ..trace import Trace
from .emulation import NETNS_APPS
from .figures import kernel_starts, netns_samples, summarize
from .matrix import DURATION_S, SAMPLE_S, Case
from .settings import OPTIONS, ROOT

#: The kernel's sampler's step once every flow has retransmitted, its sockets read by
#: lookup once found: dumps every 2 ms throughout cost a lone Reno flow at 10 ms with 0.2 BDP
#: a third of its goodput on this 2-core host (VALIDATION.md §6, "Observers slow the kernel";
#: docs/journal/validation-history.md, "The sampler's own cost").
SAMPLE_SPARSE_S = 0.1
#: The TCP_INFO sampler, a script of its own (root; started beside each kernel run).
SAMPLER = ROOT / "benches" / "fidelity_tcpinfo.py"


def run_scenario(data: dict, backend: str, tcp_interval: float | None = None) -> tuple[dict, Trace, dict]:
    """A scenario given as a dict (Case.scenario's) run on ``backend``: its metrics, its
    Trace, and the run's own figures (wall time, end, the producer's stats)."""
    d = json.loads(json.dumps(data))
    if tcp_interval is not None:
        d["measure"]["tcp_interval"] = f"{tcp_interval}s"
    s = scenario.from_dict(d, d["name"])
    r = scenario.resolve(s)
    t0 = time.perf_counter()
    trace = backends.get(backend).run(s, r)
    wall = time.perf_counter() - t0
    return metrics.compute(trace), trace, {"wall_s": wall, "end_s": trace.end_s, **trace.provenance.stats}


def wait_for_quiet() -> float:
    """Waits until the 1-minute load average is below Options.max_load, for at most
    Options.max_wait_s (the emulation needs the machine to itself); returns it."""
    t0 = time.monotonic()
    while (load := os.getloadavg()[0]) > OPTIONS.max_load and time.monotonic() - t0 < OPTIONS.max_wait_s:
        time.sleep(10)
    return load


#: How long the TCP_INFO sampler may take to start (a Python process on a busy host: 1–3 s).
SAMPLER_READY_S = 60.0


def start_sampler(csv: Path, *options: str) -> subprocess.Popen:
    """benches/fidelity_tcpinfo.py writing to ``csv`` every SAMPLE_S, once it is ready: it
    takes seconds to start, and an emulation started meanwhile had its first round trips
    unseen (before 2026-11-28 nothing waited; see figures.seen_from_start)."""
    csv.unlink(missing_ok=True)
    cmd = [sys.executable, str(SAMPLER), "--out", str(csv), "--interval", str(SAMPLE_S)]
    proc = subprocess.Popen([*cmd, *options])
    deadline = time.monotonic() + SAMPLER_READY_S
    while not (csv.exists() and csv.read_bytes().endswith(b"\n")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise SystemExit(f"error: the TCP_INFO sampler did not start (exit {proc.returncode}): {' '.join(cmd)}")
        time.sleep(0.05)
    return proc


#: Attempts at a kernel run whose emulation was clean (unclean): a run the netns backend
#: says cannot be trusted is made again, and the last attempt kept, flagged, if none was.
CLEAN_ATTEMPTS = 3


def run_netns(case: Case, kind: str, duration_s: float = DURATION_S, samples_dir: Path | None = None) -> dict:
    """A netns run (run_netns_once) made again while its emulation was not clean, up to
    CLEAN_ATTEMPTS times."""
    for attempt in range(1, CLEAN_ATTEMPTS + 1):
        out = run_netns_once(case, kind, duration_s, samples_dir)
        if not out["unclean"]:
            break
        print(f"{case.key} {kind}: emulation not clean (attempt {attempt} of {CLEAN_ATTEMPTS})", file=sys.stderr, flush=True)
    return out | {"attempts": attempt}


def run_netns_once(
    case: Case,
    kind: str,
    duration_s: float = DURATION_S,
    samples_dir: Path | None = None,
    dense: bool = False,
    trace_waits: bool | None = None,
    trace_acks: bool | None = None,
) -> dict:
    """One netns run with the TCP_INFO sampler beside it (its rows kept in ``samples_dir``:
    Options.results, read when called, or elsewhere for a diagnostic run that must not replace them).
    ``dense``: a duration run sampled every SAMPLE_S throughout, not only until each flow's
    first loss (a diagnostic of every congestion event; by lookup, as cheap as the matrix's).
    ``trace_waits`` (default Options.trace_waits): its receiving applications' waits for a CPU
    traced, kept as ``waits`` (sched_waits.record; None if the tracing failed).
    ``trace_acks`` (default Options.trace_acks): its flows' segments traced, kept as ``acks``
    (tcp_probes.record; None if the tracing failed)."""
    samples_dir = samples_dir or OPTIONS.results
    samples_dir.mkdir(parents=True, exist_ok=True)
    csv = samples_dir / f".samples-{os.getpid()}.csv"
    # a volume run wants only the starts, a duration run its slow start at SAMPLE_S
    sparse = [] if dense else ["--sparse", str(SAMPLE_SPARSE_S)]
    after = ["--until-started"] if kind == "volume" else ["--discover", "inf", *sparse]
    sampler = start_sampler(csv, "--flows", str(case.flows), *after)
    load = wait_for_quiet()
    tracing = OPTIONS.trace_waits if trace_waits is None else trace_waits
    tracer = sched_waits.traced(NETNS_APPS[kind], case.flows) if tracing else contextlib.nullcontext({})
    probing = OPTIONS.trace_acks if trace_acks is None else trace_acks
    prober = tcp_probes.traced() if probing else contextlib.nullcontext({})
    try:
        with tracer as got, prober as probed:
            m, _, stats = run_scenario(case.scenario(kind, duration_s), "netns")
    finally:
        t_end = time.monotonic_ns()
        sampler.send_signal(signal.SIGTERM)
        sampler.wait(timeout=10)
    samples = netns_samples(csv, case.flows, t_end)
    csv.unlink(missing_ok=True)
    if samples is not None and kind == "duration":
        samples.to_parquet(samples_dir / f"{case.stem}-netns-samples.parquet")
    out = summarize(m, stats, samples if kind == "duration" else None)
    out["starts_s"] = kernel_starts(samples, case.flows)
    out["load"] = [load, os.getloadavg()[0]]
    late = (stats.get("delay_line") or {}).get("queues", {})
    out["late_mean_ms"] = max((q.get("late_mean_ms") or 0.0 for q in late.values()), default=None)
    out["unclean"] = bool(stats.get("delay_line_late"))
    if tracing:
        out["waits"] = traced_waits(got, case, kind)
    if probing:
        out["acks"] = traced_acks(probed, case, kind)
    return out


def traced_waits(got: dict, case: Case, kind: str) -> dict | None:
    """A run's receivers' waits as sched_waits.traced left them, as the run keeps them
    (sched_waits.record), or None, said, if the tracing failed."""
    if "error" in got:
        print(f"{case.key} {kind}: the receivers' waits were not traced: {got['error']}", file=sys.stderr, flush=True)
        return None
    w, span = sched_waits.waits(got.get("trace", ""), got["pids"])
    return sched_waits.record(w, span, case.flows)


def traced_acks(got: dict, case: Case, kind: str) -> dict | None:
    """A run's ACK clocks as tcp_probes.traced left them, as the run keeps them
    (tcp_probes.record), or None, said, if the tracing failed."""
    if "error" in got:
        print(f"{case.key} {kind}: the flows' segments were not traced: {got['error']}", file=sys.stderr, flush=True)
        return None
    return tcp_probes.record(got.get("trace", []), got.get("lost", 0))
