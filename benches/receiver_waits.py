"""How long the emulation's receiving applications wait for a CPU: their scheduling, traced.

    sudo .venv/bin/python benches/receiver_waits.py [KEY-PATTERN ... | --all] [--runs N]
        [--kinds duration volume] [--dense] [--out benches/emulation-stalls.json | --no-write]
    .venv/bin/python benches/receiver_waits.py --from RUN [KEY-PATTERN ...]   # what a matrix run kept

Runs the cases of benches/fidelity.py (default: STALL_CASES; ``--all``: the whole matrix)
on the netns backend as the matrix does (its TCP_INFO sampler beside them; ``--dense``:
sampled every 2 ms throughout, as ``fidelity_events.py --kernel-runs`` does) with an
ftrace instance recording the scheduler's ``sched_wakeup`` and ``sched_switch`` events of
the receiving applications (iperf3 for duration runs, xfer for volume runs, found by their
command lines in the run's namespaces; ``set_event_pid`` with ``event-fork``, so their
threads too). A wait is the time from an application being woken, or preempted while
running, to its running again: while it waits, the data its socket holds is not read, and
Linux leaves the ACK to the read (VALIDATION.md §6, "The receivers' ACKs"; traced in
docs/journal/validation-history.md, "The receivers' batches and backlog merges, measured").
The events are filtered in the kernel and kept in its ring buffer until the run ends: about
a microsecond per event, a few thousand events a second.

Prints, per run, the waits per second and their quantiles; writes, per application, for
each case measured and pooled over the cases of each number of flows, every wait as the
simulator's stall model (``--out``, replaced whole): ``rate_hz`` (waits per second per
receiver) and ``quantiles_us`` (1 001 quantiles of their lengths), which
``benches/fidelity.py --reads stalls`` gives its emulated hosts (``noise.app_stall_rate_hz``,
``noise.app_stall_quantiles_ns``: every read due during a wait is held to its end; a case
not measured takes the pool of its number of flows) where the case's own kernel runs did
not trace theirs (the matrix's runs trace them since 2026-11-29b: sched_waits.py). The
tracing (sched_waits.py) is shared with those runs.

Needs root and tracefs (mounted at /sys/kernel/tracing if it is not). What it measured:
docs/journal/validation-history.md, "The receiving applications' waits, traced" (in short:
VALIDATION.md §6, "The receiving applications' waits").
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sys
from pathlib import Path

import numpy as np
from xferlab import engine
from xferlab.fidelity import emulation, kernel
from xferlab.fidelity.matrix import Case, matrix, select
from xferlab.netns import sched_waits

ROOT = Path(__file__).resolve().parent.parent

#: The cases measured by default: a lone flow at 10 ms with a small buffer (the busiest
#: receiver), four flows at 50 ms with a BDP, a lone flow at 200 ms.
STALL_CASES = ("reno:10:0.2bdp:1", "cubic:50:1.0bdp:4", "bbr:200:0.2bdp:1")
DEFAULT_OUT = ROOT / "benches" / "emulation-stalls.json"


def measure(cases: list[Case], kinds: list[str], runs: int, dense: bool) -> dict:
    """Runs each case and kind ``runs`` times with its receivers traced; returns per
    application, for each case and each number of flows (receivers at once: ``flows N``),
    the pooled waits (s), the traced seconds and the runs' figures."""
    apps: dict = {}
    for case in cases:
        for kind in kinds:
            app = emulation.NETNS_APPS[kind]
            for k in range(1, runs + 1):
                with sched_waits.traced(app, case.flows) as got:
                    res = kernel.run_netns_once(
                        case,
                        kind,
                        samples_dir=Path("/tmp/xferlab-receiver-waits"),
                        dense=dense,
                        trace_waits=False,
                        trace_acks=False,
                    )
                if "error" in got:
                    raise RuntimeError(f"tracing {app}'s receivers failed: {got['error']}") from got["error"]
                w, span = sched_waits.waits(got.get("trace", ""), got["pids"])
                run = {"case": case.key, "kind": kind, "goodput_mbps": res["goodput_mbps"], "unclean": res["unclean"]}
                for key in (f"flows {case.flows}", case.key):
                    a = apps.setdefault(app, {}).setdefault(key, {"flows": case.flows, "waits": [], "span_s": 0.0, "runs": []})
                    a["waits"].append(w)
                    a["span_s"] += span
                    a["runs"].append(run)
                flag = " (unclean)" if res["unclean"] else ""
                line = f"{case.key} {kind} {k}: {res['goodput_mbps']:.1f} Mbit/s{flag}"
                print(f"{line}; {app}: {sched_waits.summary(w, span)}", flush=True)
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
            q = np.quantile(w * 1e6, np.linspace(0, 1, sched_waits.QUANTILES))
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


def kept_table(run: Path, cases: list[Case]) -> str:
    """The waits a kernel run of the matrix traced (``--from RUN``), per case and kind: per
    second per receiver, their median, 99th percentile and longest (µs, read off the
    histogram: within 12 %), and how many of 1 ms or more a second."""
    rows = [
        "| case | run | waits a second | median (µs) | 99th | longest | 1 ms or more a second |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        for kind in ("duration", "volume"):
            rec = emulation.kept_waits(run, case, kind)
            if rec is None:
                continue
            rate, q = sched_waits.stall_model([rec])
            long_ = sched_waits.per_second_at_least([rec], 1e-3)
            rows.append(
                f"| {case.key} | {kind} ({emulation.NETNS_APPS[kind]}) | {rate:.0f} | {q[500] / 1e3:.0f} | "
                f"{q[990] / 1e3:.0f} | {q[-1] / 1e3:.0f} | {long_:.1f} |"
            )
    return "\n".join(rows) if len(rows) > 2 else f"{run}: no traced waits kept for these cases"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("patterns", nargs="*", help=f"case keys or prefixes (default: {' '.join(STALL_CASES)})")
    ap.add_argument("--all", action="store_true", help="every case of the matrix (84; about 2 min each with 2 runs)")
    ap.add_argument("--runs", type=int, default=2, help="runs per case and kind (default 2)")
    ap.add_argument("--kinds", nargs="+", choices=("duration", "volume"), default=["duration", "volume"])
    ap.add_argument("--dense", action="store_true", help="the TCP_INFO sampler every 2 ms throughout")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the stall model goes")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument(
        "--from", dest="from_", type=Path, metavar="RUN", help="print the waits a kernel run of the matrix kept (no root)"
    )
    args = ap.parse_args()
    if args.from_:
        if not args.from_.exists():
            sys.exit(f"error: {args.from_}: no such archive or results directory")
        print(kept_table(args.from_, select(matrix(), args.patterns)))
        return
    if os.geteuid() != 0:
        sys.exit("receiver_waits.py needs root (network namespaces, tracefs)")
    cases = select(matrix(), args.patterns or ([] if args.all else list(STALL_CASES)))
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
