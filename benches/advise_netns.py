"""The advisor against real Linux TCP (issue 50's validation): six paths, RTT 10, 50 and
200 ms, alone or beside one long-lived CUBIC flow. For each, the advice is asked on the
simulator (``advisor.advise``, the budget given), then the recommended configuration and
the default (cubic, one stream, no pacing) move the job for real on the netns backend,
``--reps`` times each; the measured completion times are set against the predicted
[p1, p99], and the recommended against the default.

    sudo .venv/bin/python benches/advise_netns.py [--reps 10] [--budget 60s]
    .venv/bin/python benches/advise_netns.py --backend sim --reps 3   # the same jobs simulated whole
    sudo .venv/bin/python benches/advise_netns.py --quick             # one path, 2 runs each, nothing written

The path: 1 Gbit/s hosts into a 100 Mbit/s bottleneck with a fifth of a BDP of buffer (a
lone flow meets losses, so configurations differ), a 100 MB job. The job's streams are
xfer transfers of their share of the job, as the netns backend runs a volume; the
competing flow is an iperf3 flow lasting 1.5 × the predicted p99 (a job slower than that
finishes alone, and is counted apart). Rewrites the table ``advise_netns``
(docs/validation/advise_netns.md) unless --quick or --no-write.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from xferlab import backends, scenario
from xferlab.advisor import simulate
from xferlab.advisor.advice import Advice, advise
from xferlab.advisor.candidates import DEFAULT, Config, Plan
from xferlab.advisor.question import Question, ask
from xferlab.advisor.recommend import Row
from xferlab.advisor.runs import workers_default
from xferlab.fidelity import validation_md
from xferlab.units import parse_duration

RTTS = ("10ms", "50ms", "200ms")
PATH = {"bottleneck": "100Mbps", "access": "1Gbps", "buffer": "0.2bdp", "volume": "100MB"}
#: The competing flow lasts this many times the predicted p99 of the job.
COMPETITOR_SPAN = 1.5
TABLE = "advise_netns"
#: Every measurement of the last full run (kept in the repository: the table's data), for --render.
RESULTS = Path(__file__).resolve().parent / "advise-runs" / "results.json"


@dataclass
class Measured:
    times: list[float]  # the job's completion time of each run that finished within the competition
    alone: int = 0  # runs the competing flow left before the job was done
    failed: int = 0  # runs that did not complete (said, not counted)


def job_scenario(q: Question, c: Config, rep: int, competitor_s: float) -> tuple[scenario.Scenario, dict]:
    """The job (pair 0, its streams, the whole volume) beside the competing flows (one
    stream each, for ``competitor_s``), as the advisor simulates it whole."""
    p = Plan(1, competitor_s, 0.1, 1.0, 0.1, 1.0, True)
    s = scenario.from_dict(simulate.scenario_of(q, c, p, rep, volume=True), "advise-netns")
    r = scenario.resolve(s)
    r["flows"] = [f for f in r["flows"] if f["pair"] == 0 or f["stream"] == 0]
    for f in r["flows"]:
        if f["pair"] > 0:
            f.update(volume_bytes=None, duration_s=competitor_s)
    return s, r


def completion(trace) -> float | None:
    """The job's completion time: from its first stream's start to its last one's end."""
    f = trace.flows.to_pydict()
    mine = [i for i, pair in enumerate(f["pair"]) if pair == 0]
    if any(f["completion_time"][i] is None for i in mine):
        return None
    return max(f["end"][i] for i in mine) - min(f["start"][i] for i in mine)


def measure(q: Question, c: Config, reps: int, competitor_s: float, backend: str) -> Measured:
    m = Measured([])
    for rep in range(reps):
        s, r = job_scenario(q, c, rep, competitor_s)
        try:
            t = completion(backends.get(backend).run(s, r))
        except backends.BackendError as e:
            print(f"  {c.label} run {rep}: {e}", file=sys.stderr)
            t = None
        if t is None:
            m.failed += 1
        elif q.competing and t > competitor_s:
            m.alone += 1
        else:
            m.times.append(t)
        print(f"  {c.label} run {rep}: {t if t is None else round(t, 2)} s", file=sys.stderr, flush=True)
    return m


def row_of(a: Advice, c: Config) -> Row:
    return next(r for r in (a.finalists or a.table) if r.config == c)


def case(rtt: str, competing: int, args) -> dict:
    """One path: the advice, then its recommended configuration and the default measured."""
    q = ask(rtt, PATH["bottleneck"], PATH["volume"], access=PATH["access"], buffer=PATH["buffer"], competing=competing)
    t0 = time.monotonic()
    a = advise(q, args.budget, workers_default())
    spent = time.monotonic() - t0
    rec = a.recommended.config
    configs = [rec] + ([DEFAULT] if rec != DEFAULT else [])
    span = COMPETITOR_SPAN * max(row_of(a, c).prediction.p99_s for c in configs)
    out = []
    for c in configs:
        m = measure(q, c, args.reps, span, args.backend)
        p = row_of(a, c).prediction
        out.append({"label": c.label, "recommended": c == rec, "prediction": p.as_dict(), **m.__dict__})
    return {"rtt": rtt, "competing": competing, "budget_s": spent, "scale": a.scale, "configs": out}


def _within(times: list[float], lo: float, hi: float) -> int:
    return sum(lo <= t <= hi for t in times)


def _median(times: list[float]) -> float:
    return statistics.median(times) if times else float("nan")


def _line(rec: dict, c: dict) -> str:
    p, t = c["prediction"], c["times"]
    med = _median(t)
    lo, hi = (min(t), max(t)) if t else (float("nan"),) * 2
    extra = f" ({c['alone']} alone, {c['failed']} failed)" if c["alone"] or c["failed"] else ""
    tag = " (recommended)" if c["recommended"] else " (default)"
    return (
        f"| {rec['rtt']} | {rec['competing']} | {c['label']}{tag} | {p['p50_s']:.2f} [{p['p1_s']:.2f}, {p['p99_s']:.2f}] | "
        f"{p['linux_lo_s']:.2f}–{p['linux_hi_s']:.2f} | {med:.2f} ({lo:.2f}–{hi:.2f}) | {len(t)}{extra} | "
        f"{_within(t, p['p1_s'], p['p99_s'])} | {_within(t, p['linux_lo_s'], p['linux_hi_s'])} | "
        f"{100 * (med / p['p50_s'] - 1):+.1f} % |"
    )


def _summary(rec: dict) -> str:
    r = next(c for c in rec["configs"] if c["recommended"])
    p, med = r["prediction"], _median(r["times"])
    held = "yes" if p["p1_s"] <= med <= p["p99_s"] else "no"
    band = "yes" if p["linux_lo_s"] <= med <= p["linux_hi_s"] else "no"
    d = next((c for c in rec["configs"] if not c["recommended"]), None)
    beats = "the default is recommended" if d is None else "yes" if med < _median(d["times"]) else "no"
    return f"| {rec['rtt']} | {rec['competing']} | {rec['budget_s']:.0f} s | {rec['scale']:g} | {held} | {band} | {beats} |"


def render(records: list[dict], backend: str, reps: int) -> str:
    rows = [
        "| RTT | competing | configuration | predicted p50 [p1, p99] (s) | on Linux (90 %) (s) | measured median (min–max) (s) | "
        "runs | within [p1, p99] | within the band on Linux | median vs predicted p50 |",
        "|---|---:|---|---|---|---|---:|---:|---:|---:|",
    ]
    rows += [_line(rec, c) for rec in records for c in rec["configs"]]
    head = "| RTT | competing | advice's time | scale | recommended: median in [p1, p99] | in the Linux band | beats default |"
    rows += ["", head, "|---|---:|---:|---:|---|---|---|"] + [_summary(rec) for rec in records]
    held = sum(_summary(rec).split("|")[6].strip() == "yes" for rec in records)
    said = f"the recommended configuration's median in the band on Linux in {held} of {len(records)} cases"
    rows += ["", f"Backend {backend}, {reps} runs each: {said}."]
    return "\n".join(rows)


def run_all(args) -> list[dict]:
    records = []
    for competing in (0, 1):
        for rtt in RTTS[:1] if args.quick else RTTS:
            records.append(case(rtt, competing, args))
            print(render(records[-1:], args.backend, args.reps), flush=True)
    return records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10, help="runs of each configuration (default 10)")
    ap.add_argument("--budget", default="60s", help="the advice's budget (default 60s)")
    ap.add_argument("--backend", default="netns", choices=("netns", "sim"), help="where the jobs run (default netns)")
    ap.add_argument("--quick", action="store_true", help="one path, 2 runs each; nothing written")
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    ap.add_argument("--render", type=Path, help="the table again from a stored results file, nothing run")
    args = ap.parse_args()
    args.budget = parse_duration(args.budget, require_unit=True)
    if args.quick:
        args.reps = min(args.reps, 2)
    if args.render:
        stored = json.loads(args.render.read_text())
        records, args.backend, args.reps = stored["records"], stored["backend"], stored["reps"]
    else:
        records = run_all(args)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"backend": args.backend, "reps": args.reps, "records": records}, indent=1))
    text = render(records, args.backend, args.reps)
    print(text)
    if not (args.quick or args.no_write or args.backend != "netns"):
        validation_md.write(TABLE, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
