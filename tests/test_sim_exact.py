"""The simulator's runs, to the bit: a digest of every Trace table (and of the simulator's own
counts) for a set of short scenarios that covers every variant, the host noise on and off,
the receive window, volumes, reverse and background traffic, and each scheduling
mechanism. An optimisation meant to be exact must leave every digest as it is; a change of
the model changes some, and is then recorded on purpose:

    XFERLAB_UPDATE_SIM_DIGESTS=1 .venv/bin/python -m pytest -q tests/test_sim_exact.py

rewrites ``tests/data/sim_digests.json`` (commit it with the change that moved them, saying
why). Counts and bits, never times."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from xferlab import scenario
from xferlab.backends import sim
from xferlab.trace import NAMES

DIGESTS = Path(__file__).parent / "data" / "sim_digests.json"
UPDATE = os.environ.get("XFERLAB_UPDATE_SIM_DIGESTS") == "1"

BASE = {
    "topology": {"pairs": 3, "access_rate": "1Gbps", "bottleneck_rate": "2Gbps", "rtt": "10ms", "buffer": "0.5bdp"},
    "workload": {"streams": 1, "duration": "1.5s", "stagger": "50ms"},
    "protocol": {"variant": "reno"},
    "measure": {"goodput_interval": "0.1s", "link_interval": "10ms"},
    "seed": 3,
}


def case(**sections) -> dict:
    data = json.loads(json.dumps(BASE))
    for k, v in sections.items():
        data[k] = {**data.get(k, {}), **v} if isinstance(v, dict) else v
    return data


#: name → scenario: each variant; the noise off; many flows in a small buffer at a long RTT
#: (where start-up losses decide); volumes; reverse and background traffic; each mechanism.
CASES = {
    **{f"variant-{v}": case(protocol={"variant": v}) for v in ("reno", "bic", "cubic", "highspeed", "htcp", "scalable", "bbr")},
    "noise-off": case(protocol={"variant": "cubic"}, host={"noise": False}),
    "small-buffer-long-rtt": case(
        topology={"pairs": 12, "rtt": "80ms", "buffer": "0.05bdp", "bottleneck_rate": "1Gbps", "access_rate": "1Gbps"},
        workload={"streams": 2, "duration": "2s", "stagger": "0s"},
        protocol={"variant": "cubic"},
    ),
    "volumes": case(workload={"volume": "20MB", "duration": None, "stagger": "0s"}),
    "reverse-and-background": case(
        workload={"reverse": 1, "background": {"level": 0.3, "mean_on": "0.1s", "mean_off": "0.1s"}},
    ),
    **{
        f"schedule-{m}": {
            **{k: v for k, v in case().items() if k != "workload"},
            # Deadlines that need well under the access rate: the mechanism holds each transfer.
            "requests": [
                {"volume": "40MB", "deadline": "1.5s", "name": "a"},
                {"volume": "30MB", "release": "0.2s", "deadline": "1.2s", "name": "b"},
                {"volume": "20MB", "release": "0.4s", "deadline": "1.4s", "name": "c"},
            ],
            "schedule": {"strategy": "minrate", "mechanism": m},
        }
        for m in ("pacing", "token_bucket", "cwnd_clamp", "sleep_timer")
    },
}


def digest(name: str, data: dict) -> dict:
    if "workload" in data:  # a None in a case is a field left out (volumes replace the duration)
        data = {**data, "workload": {k: v for k, v in data["workload"].items() if v is not None}}
    s = scenario.from_dict({"name": name, **data}, name)
    trace = sim.run(s, scenario.resolve(s))
    out = {}
    for table in NAMES:
        t = trace.table(table)
        buf = io.BytesIO()
        with pa.ipc.new_stream(buf, t.schema) as w:
            w.write_table(t)
        out[table] = f"{t.num_rows}:{hashlib.sha256(buf.getvalue()).hexdigest()[:16]}"
    stats = trace.provenance.stats
    out["counts"] = {k: stats[k] for k in sorted(stats) if isinstance(stats[k], int) and not isinstance(stats[k], bool)}
    return out


def test_every_case_is_run_to_the_same_bits():
    got = {name: digest(name, data) for name, data in CASES.items()}
    if UPDATE:
        DIGESTS.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"rewrote {DIGESTS.name}")
    want = json.loads(DIGESTS.read_text())
    assert sorted(got) == sorted(want), "the set of cases changed: rerun with XFERLAB_UPDATE_SIM_DIGESTS=1"
    moved = {n: [k for k in got[n] if got[n][k] != want[n].get(k)] for n in got if got[n] != want[n]}
    assert not moved, (
        f"the simulator's runs changed in {moved}; an exact optimisation must not change them, a model change "
        "rewrites tests/data/sim_digests.json (XFERLAB_UPDATE_SIM_DIGESTS=1) on purpose"
    )


def test_a_digest_tells_runs_apart():
    """The digest sees a change of one setting (so that the test above can fail)."""
    a = digest("a", CASES["variant-reno"])
    b = digest("b", case(seed=4))
    assert a["tcp"] != b["tcp"] and a["counts"] != b["counts"]
