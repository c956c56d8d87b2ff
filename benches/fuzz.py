"""The standing fuzzers of tests/test_fuzz.py with many random examples (issue 10).

    .venv/bin/python benches/fuzz.py                 # 10 000 scenarios, 2 000 campaigns, 1 000 logs of each kind
    .venv/bin/python benches/fuzz.py --scenarios 500 --seed 7

Prints, per property, how many inputs were accepted, refused with a reason, and reached the
simulator, and the wall time; any other outcome (a traceback, a panic) is printed with its
input and makes the exit status 1. Figures go to BENCHMARKS.md by hand, with the command.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import test_fuzz as tf  # noqa: E402
from xferlab import engine  # noqa: E402
from xferlab import scenario as sc  # noqa: E402
from xferlab.campaign import spec  # noqa: E402
from xferlab.importers import ImportLogError, iperf3, ss  # noqa: E402
from xferlab.registry import MetricsError  # noqa: E402
from xferlab.runfolder import RunFolderError  # noqa: E402


def _settings(n: int, seed: int):
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=False)


def scenarios(n: int, seed: int, bad: list) -> Counter:
    c = Counter()

    @_settings(n, seed)
    @given(tf.scenario_dicts())
    def prop(data):
        try:
            r = sc.resolve(sc.from_dict(data, "fuzz.yaml"))
        except sc.ScenarioError:
            c["refused"] += 1
            return
        except BaseException as e:  # noqa: BLE001
            c["other"] += 1
            bad.append((data, traceback.format_exception(e)[-1]))
            return
        c["accepted"] += 1
        if len(r["flows"]) <= 200 and r["background_sources"] <= 50:
            try:
                tf._short_run(r)
                c["simulated"] += 1
            except BaseException as e:  # noqa: BLE001 - a panic is what this looks for
                c["other"] += 1
                bad.append((data, traceback.format_exception(e)[-1]))

    random.seed(seed)
    prop()
    return c


def campaigns(n: int, seed: int, bad: list) -> Counter:
    c = Counter()

    @_settings(n, seed)
    @given(tf.campaign_dicts())
    def prop(data):
        try:
            spec.from_dict(data, "fuzz-campaign.yaml")
            c["accepted"] += 1
        except spec.CampaignError:
            c["refused"] += 1
        except BaseException as e:  # noqa: BLE001
            c["other"] += 1
            bad.append((data, traceback.format_exception(e)[-1]))

    prop()
    return c


def logs(kind: str, n: int, seed: int, bad: list) -> Counter:
    c = Counter()
    rng = random.Random(f"{kind}:{seed}")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            log = Path(tmp) / f"in{i}"
            log.write_text(tf._mutated_iperf3(rng) if kind == "iperf3" else tf._mutated_ss(rng))
            try:
                trace = iperf3.import_trace([log]) if kind == "iperf3" else ss.import_trace(log)
                engine.save(engine.stamp(trace, scenario={"name": "fuzz"}, seed=None), Path(tmp) / f"run{i}", force=True)
                c["accepted"] += 1
            except (ImportLogError, RunFolderError, MetricsError):
                c["refused"] += 1
            except BaseException as e:  # noqa: BLE001
                c["other"] += 1
                bad.append((log.read_text()[:200], traceback.format_exception(e)[-1]))
    return c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=10_000)
    ap.add_argument("--campaigns", type=int, default=2_000)
    ap.add_argument("--logs", type=int, default=1_000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    bad: list = []
    print(f"seed {a.seed}")
    for name, job in (
        ("scenarios", lambda: scenarios(a.scenarios, a.seed, bad)),
        ("campaigns", lambda: campaigns(a.campaigns, a.seed, bad)),
        ("iperf3 logs", lambda: logs("iperf3", a.logs, a.seed, bad)),
        ("ss logs", lambda: logs("ss", a.logs, a.seed, bad)),
    ):
        t0 = time.perf_counter()
        c = job()
        print(f"{name:12s} {sum(c.values()):6d} cases in {time.perf_counter() - t0:6.1f} s: {json.dumps(dict(c))}")
    for data, err in bad[:20]:
        print("FAILED:", err.strip(), "\n  input:", json.dumps(data, default=str)[:400])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
