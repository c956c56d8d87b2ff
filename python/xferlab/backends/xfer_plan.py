"""A plan moved as real data (``xferlab schedule run``): one ``xfer send`` per admitted request,
from this host to an ``xfer serve``, on the plan's timing.

Each request's transfer sets up its session ahead and starts its data at the planned time on
this host's clock (``--start-at``), or — when the plan's starts are signalled and the request
follows another — when that one's sender, having seen its receiver commit, signals it
(``--signal-done`` → ``--start-after-signal`` over loopback; all senders run here). Its rate
follows the plan's segments (``--rate-profile``: goodput, offsets from its data start, a pause
where it is preempted) through the schedule's mechanism (``--limiter``). What each transfer
did is read back from its JSON trace: the start, the completion, each segment's goodput.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import schedule
from ..runinfo import PlanInfo, RequestPlan, RunInfo
from .base import BackendError

#: The schedule's mechanisms → xfer's --limiter (a token bucket is a qdisc: not xfer's).
LIMITER = {"pacing": "pacing", "cwnd_clamp": "cwnd", "sleep_timer": "sleep"}
#: The same for a flow's limiter (runinfo.LimiterInfo.kind).
LIMITER_OF_KIND = {"pacer": "pacing", "cwnd_clamp": "cwnd", "sleep_timer": "sleep"}
#: An unlimited stretch of a plan in a profile of rates: far above any path.
UNLIMITED_BPS = 1e12
#: Extra time a run may take past its planned makespan before it is stopped, at least (and
#: at least the makespan again: a transfer twice as slow as its plan is not following it).
GRACE_S = 10.0
#: How long the pre-flight connection to the server may take.
CONNECT_TIMEOUT_S = 5.0
#: A DNS name (RFC 1123 labels).
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


@dataclass
class Launch:
    """One request's transfer: its plan row, the command, where its trace goes."""

    row: RequestPlan
    args: list[str]
    trace: Path
    proc: subprocess.Popen | None = None
    stderr: str = ""
    extra: dict = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)  # xfer's stderr, as it comes
    reader: threading.Thread | None = None
    stopped: bool = False  # still running at the end of the wait, and stopped

    @property
    def warnings(self) -> list[str]:
        return [ln for ln in self.lines if "warning" in ln]


def destination(dest: str) -> tuple[str, int]:
    """An ``xfer serve`` address, HOST:PORT or [IPv6]:PORT, as (host, port); ValueError says
    what is wrong with it."""
    m = re.fullmatch(r"\[([^\]]*)\]:(\d{1,5})|([^:\[\]]+):(\d{1,5})", dest)
    if m is None:
        raise ValueError(f"destination {dest!r}: give HOST:PORT or [IPv6]:PORT of an `xfer serve`")
    host, port = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"destination {dest!r}: the port {port} is not in 1–65535")
    if m.group(1) is not None:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"destination {dest!r}: {host!r} is not an IPv6 address") from None
    elif not _HOSTNAME.match(host) or re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"destination {dest!r}: {host!r} is neither a host name nor an IPv4 address") from None
    return host, int(port)


def reachable(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Connects to the server once before any transfer is launched: BackendError with the
    system's reason when nothing listens there, or the host cannot be reached in time."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except TimeoutError:
        raise BackendError(f"{host}:{port}: no answer within {timeout_s:g} s (is the host up, and the port open?)") from None
    except OSError as e:
        why = e.strerror or str(e)
        raise BackendError(f"{host}:{port}: {why} (is `xfer serve` running there?)") from None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profile_spec(steps: list[tuple[float, float | None]]) -> str | None:
    """``--rate-profile`` for goodput steps (offset from the data start, bit/s; None for an
    unlimited stretch), or None when the whole profile is unlimited."""
    if all(r is None for _, r in steps):
        return None
    return ",".join(f"{max(0.0, t):.6f}s:{round(UNLIMITED_BPS if r is None else r)}" for t, r in steps)


def profile(row: RequestPlan) -> str | None:
    """The request's rate over time, offsets from its start (None: unlimited throughout)."""
    steps = schedule.rate_steps([g.model_dump() for g in row.segments])
    return profile_spec([(t - steps[0][0], r) for t, r in steps])


def not_drivable(flow: dict) -> str | None:
    """Why a flow's limiter cannot be run by the tools (None: it can): volume-bound flows run
    on xfer, which follows every limiter but a token bucket whose rate changes; duration-bound
    flows on iperf3, which only paces at one rate."""
    lim = flow.get("limiter") or {}
    if lim.get("kind") == "token_bucket" and lim.get("profile"):
        return "a token bucket whose rate changes over time (use mechanism pacing, cwnd_clamp or sleep_timer)"
    if flow.get("volume_bytes") is None and (lim.get("kind") in ("cwnd_clamp", "sleep_timer") or lim.get("profile")):
        return f"the {lim['kind'].replace('_', ' ')} mechanism on a duration-bound flow (iperf3 only paces)"
    return None


def limiter_args(lim: dict | None, start_s: float, payload_ratio: float) -> list[str]:
    """xfer's options for a flow's limiter (runinfo.LimiterInfo, frame rates): a single pacing
    rate as ``--rate``; a window clamp, a sleep timer or a changing rate as a
    ``--rate-profile`` of goodput with its ``--limiter``. A token bucket is a qdisc: none."""
    if not lim or lim["kind"] == "token_bucket":
        return []
    goodput = [(0.0, lim["rate_bps"])] + [(st["t_s"] - start_s, st["rate_bps"]) for st in lim["profile"]]
    goodput = [(t, None if r is None else r * payload_ratio) for t, r in goodput]
    if lim["kind"] == "pacer" and len(goodput) == 1:
        return ["--rate", str(int(goodput[0][1]))] if goodput[0][1] else []
    spec = profile_spec(goodput)
    args = ["--rate-profile", spec, "--limiter", LIMITER_OF_KIND[lim["kind"]]] if spec else []
    if spec and lim["kind"] == "sleep_timer":
        args += ["--timer-hz", str(max(1, round(1 / lim["tick_s"])))]
    return args


def _signals(info: RunInfo) -> dict[int, tuple[int, int]]:
    """Follower request → (the request it follows, a loopback port), for signalled plans;
    a request followed by several signals the first only (the others start on the clock)."""
    if info.plan.sync == "clock":
        return {}
    links, taken = {}, set()
    for r in info.plan.requests:
        if r.admitted and r.after is not None and r.after not in taken:
            links[r.request] = (r.after, _free_port())
            taken.add(r.after)
    return links


def not_enforceable(plan: PlanInfo) -> str | None:
    """Why xfer cannot enforce the plan's mechanism (None: it can)."""
    if plan.mechanism in LIMITER:
        return None
    return (
        f"mechanism {plan.mechanism}: a token bucket is a qdisc on the sender's interface, which xfer does not "
        "set; use pacing, cwnd_clamp or sleep_timer (or run the plan on the netns backend)"
    )


def launches(info: RunInfo, dest: str, auth: list[str], out: Path, xfer: str, t0_unix: float, hz: int) -> list[Launch]:
    """The command of every admitted request; ``t0_unix`` is the plan's time 0 on this clock."""
    plan = info.plan
    if why := not_enforceable(plan):
        raise BackendError(why)
    links = _signals(info)
    followed = {after: (k, port) for k, (after, port) in links.items()}
    streams = {t.pair: t.streams for t in info.transfers}
    result = []
    for r in (r for r in plan.requests if r.admitted):
        trace = out / f"request{r.request}.json"
        args = [xfer, "send", "-P", str(streams.get(r.pair, 1)), "--no-progress", "-q", "--json", str(trace), *auth]
        if r.request in links:
            args += ["--start-after-signal", f"127.0.0.1:{links[r.request][1]}", "--signal-token", f"request{r.request}"]
        else:
            args += ["--start-at", f"{t0_unix + r.start_s:.6f}"]
        if r.request in followed:
            k, port = followed[r.request]
            args += ["--signal-done", f"127.0.0.1:{port}", "--signal-token", f"request{k}"]
        spec = profile(r)
        if spec is not None:
            args += ["--rate-profile", spec, "--limiter", LIMITER[plan.mechanism]]
            if plan.mechanism == "sleep_timer":
                args += ["--timer-hz", str(hz)]
        result.append(Launch(r, args + [f"mem:{r.volume_bytes}", dest, "--discard"], trace))
    return result


def wait_s(makespan_s: float, lead_s: float) -> float:
    """How long a run may take from its launch: the lead, the plan's makespan, and as much
    again (at least :data:`GRACE_S`) before what still runs is stopped."""
    return lead_s + makespan_s + max(GRACE_S, makespan_s)


def run(runs: list[Launch], deadline_s: float, on_tick=None, on_line=None) -> None:
    """Starts every transfer at once (each waits for its time or its signal), waits for all
    until ``deadline_s`` from now, and stops (by PID) what is still running then or on ^C.
    xfer's stderr is read as it comes: ``on_line(launch, line)`` sees each line (its
    warnings, as they happen). Stopped transfers are marked, not raised."""
    try:
        for ln in runs:
            ln.proc = subprocess.Popen(ln.args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            ln.reader = threading.Thread(target=_read_lines, args=(ln, on_line), daemon=True)
            ln.reader.start()
        end = time.monotonic() + deadline_s
        while any(ln.proc.poll() is None for ln in runs) and time.monotonic() < end:
            if on_tick is not None:
                on_tick(sum(ln.proc.poll() is not None for ln in runs), len(runs))
            time.sleep(0.05)
    finally:
        for ln in runs:
            if ln.proc is not None and ln.proc.poll() is None:
                ln.stopped = True
                ln.proc.kill()
            if ln.proc is not None:
                ln.proc.wait()
            if ln.reader is not None:
                ln.reader.join(timeout=5)
            ln.stderr = "\n".join(ln.lines)


def _read_lines(ln: Launch, on_line) -> None:
    for raw in ln.proc.stderr:
        line = raw.decode(errors="replace").rstrip()
        if line:
            ln.lines.append(line)
            if on_line is not None:
                on_line(ln, line)
    ln.proc.stderr.close()


def outcome(ln: Launch, t0_unix: float) -> dict:
    """What the request's transfer did, in plan time (s from the plan's time 0)."""
    r = ln.row
    row = {
        "request": r.request,
        "name": r.name,
        "volume_bytes": r.volume_bytes,
        "deadline_s": r.deadline_s,
        "planned_start_s": r.start_s,
        "planned_completion_s": r.completion_s,
    }
    row["warnings"] = ln.warnings
    if ln.stopped:
        return {**row, "error": "still running at the end of the wait: stopped", "stopped": True}
    try:
        doc = json.loads(ln.trace.read_text())
    except (OSError, ValueError):
        errors = [x for x in ln.lines if "error" in x] or ln.lines
        return {**row, "error": errors[-1] if errors else f"xfer exited {ln.proc.returncode} with no trace"}
    run_ = doc["run"]
    start, end = run_["start"]["actual"] - t0_unix, run_["end_time"] - t0_unix
    return {
        **row,
        "error": run_.get("error"),
        "start_s": start,
        "completion_s": end,
        "bytes": run_["bytes"],
        "goodput_bps": run_["bytes"] * 8 / run_["completion_time"] if run_.get("completion_time") else None,
        "late_s": end - r.completion_s if r.completion_s is not None else None,
        "deadline_met": None if r.deadline_s is None else end <= r.deadline_s,
        "signal": run_["start"].get("signal"),
        "segments": doc.get("segments", []),
    }
