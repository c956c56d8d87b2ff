"""How long the emulation's receiving applications wait for a CPU: their scheduling, traced.

    sudo .venv/bin/python benches/receiver_waits.py [KEY-PATTERN ... | --all] [--runs N]
        [--kinds duration volume] [--dense] [--out benches/emulation-stalls.json | --no-write]

Runs the cases of benches/fidelity.py (default: STALL_CASES; ``--all``: the whole matrix)
on the netns backend as the matrix does (its TCP_INFO sampler beside them; ``--dense``:
sampled every 2 ms throughout, as ``fidelity_events.py --kernel-runs`` does) with an
ftrace instance recording the scheduler's ``sched_wakeup`` and ``sched_switch`` events of
the receiving applications (iperf3 for duration runs, xfer for volume runs, found by their
command lines in the run's namespaces; ``set_event_pid`` with ``event-fork``, so their
threads too). A wait is the time from an application being woken, or preempted while
running, to its running again: while it waits, the data its socket holds is not read, and
Linux leaves the ACK to the read (VALIDATION.md §6b, "The receivers' batches and backlog
merges"). The events are filtered in the kernel and kept in its ring buffer until the run
ends: about a microsecond per event, a few thousand events a second.

Prints, per run, the waits per second and their quantiles; writes, per application, for
each case measured and pooled over the cases of each number of flows, every wait as the
simulator's stall model (``--out``, replaced whole): ``rate_hz`` (waits per second per
receiver) and ``quantiles_us`` (1 001 quantiles of their lengths), which
``benches/fidelity.py --reads stalls`` gives its emulated hosts (``noise.app_stall_rate_hz``,
``noise.app_stall_quantiles_ns``: every read due during a wait is held to its end; a case
not measured takes the pool of its number of flows).

Needs root and tracefs (mounted at /sys/kernel/tracing if it is not). What it measured:
VALIDATION.md §6b, "The receiving applications' waits, traced".
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "benches"))

import fidelity  # noqa: E402
from xferlab import engine  # noqa: E402

TRACEFS = Path("/sys/kernel/tracing")
#: The ftrace instance the tracer owns while a run lasts (removed after).
INSTANCE = TRACEFS / "instances" / "xferlab-receivers"
#: Per-CPU ring buffer (kB): a 30 s run's events of one receiver take ~16 MB.
BUFFER_KB = 65536
EVENTS = ("sched/sched_wakeup", "sched/sched_switch")
#: The cases measured by default: a lone flow at 10 ms with a small buffer (the busiest
#: receiver), four flows at 50 ms with a BDP, a lone flow at 200 ms.
STALL_CASES = ("reno:10:0.2bdp:1", "cubic:50:1.0bdp:4", "bbr:200:0.2bdp:1")
#: How many quantiles the written distribution has (per mille, as emulation-reads.json).
QUANTILES = 1001
DEFAULT_OUT = ROOT / "benches" / "emulation-stalls.json"

_LINE = re.compile(r"^\s*.+?-(\d+)\s+\[\d+\]\s+\S+\s+(\d+\.\d+): (sched_wakeup|sched_switch): (.*)$")
_FIELD = re.compile(r"(\w+)=(\S+)")


def receiver_pids(app: str) -> list[int]:
    """The processes of ``app`` (iperf3 servers, xfer receivers) running in a network
    namespace other than ours: the emulation's receiving applications."""
    ours = os.readlink("/proc/self/ns/net")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = (Path("/proc") / entry / "cmdline").read_bytes().split(b"\0")
            if is_receiver(app, argv) and os.readlink(f"/proc/{entry}/ns/net") != ours:
                found.append(int(entry))
        except OSError:  # it exited meanwhile
            continue
    return found


def is_receiver(app: str, argv: list[bytes]) -> bool:
    """Whether a command line is ``app``'s receiving side as the netns backend starts it."""
    name = Path(argv[0].decode(errors="replace")).name if argv and argv[0] else ""
    if app == "iperf3":
        return name == "iperf3" and argv[1:3] == [b"-s", b"-1"]
    return name == "xfer" and argv[1:2] == [b"serve"]


@contextlib.contextmanager
def traced(app: str, wait_s: float = 60.0) -> Iterator[dict]:
    """Traces the scheduling of ``app``'s receivers in the run made inside the block: a
    thread waits for them to appear, then enables the events for their PIDs and threads.
    Yields a dict that holds, once the block ends, ``trace`` (the instance's text) and
    ``pids`` (the receivers' threads)."""
    if not (TRACEFS / "events").exists():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True)
    if INSTANCE.exists():
        INSTANCE.rmdir()  # left by a killed run
    INSTANCE.mkdir()
    got: dict = {"pids": set()}
    done = threading.Event()

    def arm() -> None:
        """Adds every receiver to the traced PIDs as it appears (the first enables the
        events), and collects their threads as long as they run."""
        until, known = time.monotonic() + wait_s, set()
        while not done.is_set() and (known or time.monotonic() < until):
            for pid in set(receiver_pids(app)) - known:
                # Without O_TRUNC a write adds to the list (tracefs cannot seek: no "a" mode).
                fd = os.open(INSTANCE / "set_event_pid", os.O_WRONLY)
                try:
                    os.write(fd, f"{pid}\n".encode())
                finally:
                    os.close(fd)
                if not known:
                    for e in EVENTS:
                        write(f"events/{e}/enable", "1")
                known.add(pid)
            for pid in known:
                with contextlib.suppress(OSError):
                    got["pids"].update(int(t) for t in os.listdir(f"/proc/{pid}/task"))
            time.sleep(0.005 if not known else 0.05)

    def guarded() -> None:
        try:
            arm()
        except OSError as e:  # raised in the caller once the run is over
            got["error"] = e

    try:
        write("buffer_size_kb", str(BUFFER_KB))
        write("trace_clock", "mono")
        write("options/event-fork", "1")
        thread = threading.Thread(target=guarded, daemon=True)
        thread.start()
        yield got
        done.set()
        thread.join()
        for e in EVENTS:
            write(f"events/{e}/enable", "0")
        got["trace"] = (INSTANCE / "trace").read_text()
        if "error" in got:
            raise RuntimeError(f"tracing {app}'s receivers failed: {got['error']}") from got["error"]
    finally:
        done.set()
        with contextlib.suppress(OSError):
            for e in EVENTS:
                write(f"events/{e}/enable", "0")
        INSTANCE.rmdir()


def write(name: str, value: str) -> None:
    (INSTANCE / name).write_text(value)


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


def measure(cases: list[fidelity.Case], kinds: list[str], runs: int, dense: bool) -> dict:
    """Runs each case and kind ``runs`` times with its receivers traced; returns per
    application, for each case and each number of flows (receivers at once: ``flows N``),
    the pooled waits (s), the traced seconds and the runs' figures."""
    apps: dict = {}
    for case in cases:
        for kind in kinds:
            app = fidelity.NETNS_APPS[kind]
            for k in range(1, runs + 1):
                with traced(app) as got:
                    res = fidelity.run_netns_once(case, kind, samples_dir=Path("/tmp/xferlab-receiver-waits"), dense=dense)
                w, span = waits(got.get("trace", ""), got["pids"])
                run = {"case": case.key, "kind": kind, "goodput_mbps": res["goodput_mbps"], "unclean": res["unclean"]}
                for key in (f"flows {case.flows}", case.key):
                    a = apps.setdefault(app, {}).setdefault(key, {"flows": case.flows, "waits": [], "span_s": 0.0, "runs": []})
                    a["waits"].append(w)
                    a["span_s"] += span
                    a["runs"].append(run)
                flag = " (unclean)" if res["unclean"] else ""
                print(f"{case.key} {kind} {k}: {res['goodput_mbps']:.1f} Mbit/s{flag}; {app}: {summary(w, span)}", flush=True)
    return apps


def model(apps: dict, dense: bool) -> dict:
    """The stall model per application, for each case measured and each number of flows
    (its cases pooled): every wait of a receiver as a stall of its own, at the traced rate
    per receiver."""
    out = {
        "what": "The emulated hosts' receiving applications' waits for a CPU (benches/receiver_waits.py), "
        "per application, for each case measured and each number of flows (its cases pooled): rate_hz "
        "waits per second per receiver, quantiles_us their lengths; the simulator's noise.app_stall_*.",
        "measured": datetime.date.today().isoformat(),
        "machine": f"{engine.cpu_model()}, {os.cpu_count()} CPUs, {platform.release()}",
        "sampler": "every 2 ms throughout" if dense else "the matrix's (2 ms until the first loss, then 0.1 s)",
        "apps": {},
    }
    for app, by in apps.items():
        for key, a in sorted(by.items()):
            w = np.concatenate(a["waits"]) if a["waits"] else np.array([])
            if not len(w) or a["span_s"] <= 0:
                continue
            q = np.quantile(w * 1e6, np.linspace(0, 1, QUANTILES))
            out["apps"].setdefault(app, {})[key] = {
                "rate_hz": round(len(w) / a["span_s"] / a["flows"], 2),
                "quantiles_us": [round(float(x), 1) for x in q],
                "waits": int(len(w)),
                "traced_s": round(a["span_s"], 1),
                "runs": a["runs"],
            }
    return out


def dumps(out: dict) -> str:
    """``out`` as indented JSON with each list of numbers on one line (a quantile list holds
    1 001 of them)."""
    inline = lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]"  # noqa: E731
    return re.sub(r"\[\s*([-0-9.e,\s]+?)\s*\]", inline, json.dumps(out, indent=1)) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("patterns", nargs="*", help=f"case keys or prefixes (default: {' '.join(STALL_CASES)})")
    ap.add_argument("--all", action="store_true", help="every case of the matrix (84; about 2 min each with 2 runs)")
    ap.add_argument("--runs", type=int, default=2, help="runs per case and kind (default 2)")
    ap.add_argument("--kinds", nargs="+", choices=("duration", "volume"), default=["duration", "volume"])
    ap.add_argument("--dense", action="store_true", help="the TCP_INFO sampler every 2 ms throughout")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the stall model goes")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("receiver_waits.py needs root (network namespaces, tracefs)")
    cases = fidelity.select(fidelity.matrix(), args.patterns or ([] if args.all else list(STALL_CASES)))
    if not cases:
        sys.exit(f"no case matches {' '.join(args.patterns)}")
    apps = measure(cases, args.kinds, args.runs, args.dense)
    out = model(apps, args.dense)
    if not out["apps"]:
        sys.exit("no wait was traced: nothing written")
    for app, by in out["apps"].items():
        for key, a in by.items():
            w = np.asarray(a["quantiles_us"])
            print(
                f"{app}, {key}: {a['rate_hz']} waits/s per receiver over {a['traced_s']} s; "
                f"median {np.median(w):.0f} µs, p99 {w[990]:.0f}, longest {w[-1]:.0f}"
            )
    if not args.no_write:
        args.out.write_text(dumps(out))
        print(f"written: {args.out}")


if __name__ == "__main__":
    main()
