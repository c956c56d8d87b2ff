"""The emulation's receiving applications' waits for a CPU, traced with ftrace while a
netns run lasts, and kept as the simulator's stall model takes them.

Shared by benches/receiver_waits.py (which measures them for chosen cases) and the fidelity
bench (whose kernel runs of the matrix carry their own, ``fidelity.kernel.run_netns_once``):
``traced`` records the scheduler's ``sched_wakeup`` and ``sched_switch`` events of the
receivers (found by their command lines in the run's namespaces; ``set_event_pid`` with
``event-fork``, so their threads too), ``waits`` reads every wait — from a wakeup, or from
being preempted while running, to running again — out of the text, ``record`` keeps a
run's as a histogram of log-spaced bins (a few hundred bytes in an archive), and
``stall_model`` pools records into ``noise.app_stall_rate_hz`` and
``noise.app_stall_quantiles_ns``. Needs root and tracefs (mounted at /sys/kernel/tracing if
it is not).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from . import ftrace

#: The ftrace instances the tracer owns while a run lasts (one per process, -<pid>; removed after).
INSTANCE = ftrace.TRACEFS / "instances" / "xferlab-receivers"
#: Per-CPU ring buffer (kB): a 30 s run's events of one receiver take ~16 MB.
BUFFER_KB = 65536
EVENTS = ("sched/sched_wakeup", "sched/sched_switch")
#: How many quantiles a stall model's distribution has (per mille, as emulation-reads.json).
QUANTILES = 1001

_LINE = re.compile(r"^\s*.+?-(\d+)\s+\[\d+\]\s+\S+\s+(\d+\.\d+): (sched_wakeup|sched_switch): (.*)$")
_FIELD = re.compile(r"(\w+)=(\S+)")


class Receivers:
    """Finds ``app``'s receivers (iperf3 servers, xfer receivers) running in a network
    namespace other than ours — the emulation's receiving applications — among the
    processes started since it was made, cheaply enough to look every few milliseconds on
    a loaded 2-core host: each look lists /proc and reads the command lines of processes it
    has not seen, and of those younger than YOUNG_S (a process launched by ``ip netns
    exec`` takes its command line at its exec). Reading every process's, as a first version
    did, took 3 ms a look: 6 % of a core at a look per 50 ms."""

    YOUNG_S = 2.0

    def __init__(self, app: str) -> None:
        self.app = app
        self.ours = os.readlink("/proc/self/ns/net")
        self.seen = set(self.pids())
        self.young: dict[str, float] = {}

    @staticmethod
    def pids() -> list[str]:
        return [e for e in os.listdir("/proc") if e.isdigit()]

    def new(self) -> list[int]:
        """The receivers found since the last look."""
        now = time.monotonic()
        for entry in set(self.pids()) - self.seen:
            self.seen.add(entry)
            self.young[entry] = now
        found = []
        for entry, born in list(self.young.items()):
            try:
                argv = (Path("/proc") / entry / "cmdline").read_bytes().split(b"\0")
                if is_receiver(self.app, argv) and os.readlink(f"/proc/{entry}/ns/net") != self.ours:
                    found.append(int(entry))
                    del self.young[entry]
                elif now - born > self.YOUNG_S:
                    del self.young[entry]
            except OSError:  # it exited meanwhile
                del self.young[entry]
        return found


def is_receiver(app: str, argv: list[bytes]) -> bool:
    """Whether a command line is ``app``'s receiving side as the netns backend starts it."""
    name = Path(argv[0].decode(errors="replace")).name if argv and argv[0] else ""
    if app == "iperf3":
        return name == "iperf3" and argv[1:3] == [b"-s", b"-1"]
    return name == "xfer" and argv[1:2] == [b"serve"]


@contextlib.contextmanager
def traced(app: str, expected: int | None = None, wait_s: float = 60.0) -> Iterator[dict]:
    """Traces the scheduling of ``app``'s receivers in the run made inside the block: a
    thread waits for them to appear (``expected`` of them: it stops looking once they
    have), then enables the events for their PIDs and threads.
    Yields a dict that holds, once the block ends, ``trace`` (the instance's text),
    ``pids`` (the receivers' threads) and, if tracing could not be set up or the thread
    failed, ``error``: the run made in the block is the caller's to keep or not."""
    with ftrace.recording(INSTANCE, EVENTS, BUFFER_KB, enable=False, options=("event-fork",)) as got:
        got["pids"] = set()
        if "error" in got:
            yield got
            return
        done = threading.Event()

        def guarded() -> None:
            try:
                arm(got["instance"], app, got["pids"], done, wait_s, expected)
            except OSError as e:  # the caller's once the run is over
                got["error"] = e

        thread = threading.Thread(target=guarded, daemon=True)
        thread.start()
        try:
            yield got
        finally:
            done.set()
            thread.join()


def arm(instance: Path, app: str, pids: set[int], done: threading.Event, wait_s: float, expected: int | None) -> None:
    """Adds every receiver of ``app`` to ``instance``'s traced PIDs as it appears (the first
    enables the events; Receivers finds them), and collects their threads into ``pids`` as
    long as they run, until ``done`` (or ``wait_s`` without any). Once ``expected``
    receivers are known it stops looking for more."""
    until, known, finder = time.monotonic() + wait_s, set(), Receivers(app)
    while not done.is_set() and (known or time.monotonic() < until):
        looking = expected is None or len(known) < expected
        for pid in finder.new() if looking else []:
            # Without O_TRUNC a write adds to the list (tracefs cannot seek: no "a" mode).
            fd = os.open(instance / "set_event_pid", os.O_WRONLY)
            try:
                os.write(fd, f"{pid}\n".encode())
            finally:
                os.close(fd)
            if not known:
                ftrace.switch(instance, EVENTS, True)
            known.add(pid)
        for pid in known:
            with contextlib.suppress(OSError):
                pids.update(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        done.wait(0.005 if looking else 0.1)


def waits(trace: str, pids: set[int]) -> tuple[np.ndarray, float]:
    """Every wait of the tasks ``pids`` (s) — from a wakeup, or from being switched out
    while runnable (preempted), to being switched in — and the span of the trace (s). The
    trace also holds the wakeups of other tasks by ours (ftrace records what a traced task
    does), which are left out."""
    ours = set(pids)
    since: dict[int, float] = {}
    out: list[float] = []
    first = last = None
    for line in trace.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        t, event, f = float(m.group(2)), m.group(3), dict(_FIELD.findall(m.group(4)))
        first = t if first is None else first
        last = t
        if event == "sched_wakeup":
            if int(f["pid"]) in ours:
                since.setdefault(int(f["pid"]), t)
            continue
        prev, nxt = int(f["prev_pid"]), int(f["next_pid"])
        if prev in ours:
            since.pop(prev, None)
            if f["prev_state"].startswith("R"):  # preempted: runnable, not running
                since[prev] = t
        if nxt in since:
            out.append(t - since.pop(nxt))
    return np.asarray(out), (last - first) if first is not None else 0.0


def summary(w: np.ndarray, span_s: float) -> str:
    """A run's waits in a line: per second, median, 99th and 99.9th percentile, longest (µs)."""
    if not len(w) or span_s <= 0:
        return "no waits traced"
    q = np.quantile(w * 1e6, [0.5, 0.99, 0.999, 1.0])
    long_ = (w >= 1e-3).sum() / span_s
    return (
        f"{len(w) / span_s:.0f} waits/s, median {q[0]:.0f} µs, p99 {q[1]:.0f}, p99.9 {q[2]:.0f}, "
        f"longest {q[3]:.0f}; ≥ 1 ms {long_:.1f}/s"
    )


#: A record's histogram: bins of 10^(1/HIST_PER_DECADE) from HIST_LOW_S up to HIST_HIGH_S
#: (a bin below for shorter waits, one above for longer): 12 % wide, which a quantile drawn
#: from it is within.
HIST_PER_DECADE = 20
HIST_LOW_S, HIST_HIGH_S = 1e-6, 10.0


def hist_edges() -> np.ndarray:
    """The inner edges of a record's bins (s): HIST_LOW_S ... HIST_HIGH_S."""
    decades = round(np.log10(HIST_HIGH_S / HIST_LOW_S))
    return HIST_LOW_S * 10 ** (np.arange(decades * HIST_PER_DECADE + 1) / HIST_PER_DECADE)


def record(w: np.ndarray, span_s: float, receivers: int) -> dict | None:
    """A run's waits as an archive keeps them: how many, over how long a trace, of how many
    receivers, and their histogram (hist_edges; counts below the first edge first). None
    when nothing was traced."""
    if not len(w) or span_s <= 0:
        return None
    return {"waits": int(len(w)), "traced_s": round(span_s, 3), "receivers": receivers, "hist": histogram(w)}


def histogram(x: np.ndarray) -> list[int]:
    """Counts of ``x`` (s) in a record's bins (hist_edges; those below the first edge first)."""
    return np.bincount(np.searchsorted(hist_edges(), x, side="right"), minlength=len(hist_edges()) + 1).tolist()


def hist_quantiles(counts: np.ndarray, probabilities: np.ndarray) -> np.ndarray:
    """Quantiles (s) read off a record's histogram: log-interpolated within a bin, 0 for
    those below HIST_LOW_S ("shorter than a microsecond")."""
    cdf = np.concatenate([[0.0], np.cumsum(counts) / counts.sum()])
    logs = np.log(np.concatenate([[HIST_LOW_S / 10], hist_edges(), [HIST_HIGH_S * 10]]))
    # The cdf at the bins' edges; of a flat stretch (empty bins) only its two ends, so that
    # a quantile falls within the bin that holds it.
    rises = np.diff(cdf) > 0
    keep = np.concatenate([rises, [False]]) | np.concatenate([[False], rises])
    q = np.exp(np.interp(probabilities, cdf[keep], logs[keep]))
    q[q < HIST_LOW_S] = 0.0
    return q


def stall_model(records: list[dict]) -> tuple[float, list[int]]:
    """The simulator's stall model (noise.app_stall_rate_hz, noise.app_stall_quantiles_ns)
    from runs' records pooled: waits per second per receiver, and QUANTILES quantiles of
    their lengths, read off the pooled histogram (log-interpolated within a bin; linear
    from 0 in the bin below HIST_LOW_S)."""
    counts = np.sum([r["hist"] for r in records], axis=0)
    seconds = sum(r["traced_s"] * r["receivers"] for r in records)
    q = hist_quantiles(counts, np.linspace(0, 1, QUANTILES))
    return round(float(counts.sum() / seconds), 2), [round(x * 1e9) for x in q]


def per_second_at_least(records: list[dict], seconds: float) -> float:
    """How many waits of at least ``seconds`` (a bin edge, within its 12 %) the records'
    receivers had per second each."""
    counts = np.sum([r["hist"] for r in records], axis=0)
    first = int(np.searchsorted(hist_edges(), seconds * (1 - 1e-9))) + 1  # the bin from that edge up
    return float(counts[first:].sum() / sum(r["traced_s"] * r["receivers"] for r in records))
