"""Item 6: a campaign killed with SIGKILL at random points and resumed each time ends with
exactly its runs in the catalog, none twice, every metric present, every folder complete."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from xferlab.campaign import catalog, spec

CAMPAIGN = {
    "name": "kill-test",
    "scenario": {
        "name": "tiny",
        "topology": {"pairs": 2, "access_rate": "100Mbps", "bottleneck_rate": "100Mbps", "rtt": "5ms", "buffer": "1.0bdp"},
        "workload": {"streams": 1, "volume": "4MB"},
        "measure": {"goodput_interval": "50ms"},
        "protocol": {"variant": "reno"},
        "seed": 3,
    },
    "sweep": {"protocol.variant": ["reno", "cubic"], "topology.rtt": ["5ms", "20ms"]},
    "repetitions": 5,
    "order": "random",
}

pytestmark = pytest.mark.slow
KILLS = 11


def _finished(out) -> int:
    """Complete run folders (hidden ones are being staged)."""
    runs = out / "runs"
    return sum(1 for p in runs.iterdir() if not p.name.startswith(".")) if runs.is_dir() else 0


def _start(path, out):
    env = {**os.environ, "XFERLAB_KILL_TEST": str(out)}
    return subprocess.Popen(
        [sys.executable, "-m", "xferlab.cli", "campaign", "run", str(path), "--out", str(out), "--workers", "2", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _orphans(out) -> list[int]:
    """Worker processes of this test's campaigns still alive."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"XFERLAB_KILL_TEST={out}".encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _rows(out):
    import duckdb

    with duckdb.connect(str(out / catalog.CATALOG), read_only=True) as db:
        cols = ["run_key", "status", "error", "folder", "metrics", *catalog.CORE_METRICS, "completion_mean_s", "completion_p99_s"]
        return [dict(zip(cols, r, strict=True)) for r in db.execute(f"SELECT {', '.join(cols)} FROM runs").fetchall()]


def test_kill_and_resume_loses_and_duplicates_nothing(tmp_path):
    path = tmp_path / "kill.yaml"
    path.write_text(json.dumps(CAMPAIGN))
    expected = {r.key for r in spec.load(path).runs}
    assert len(expected) == 20
    out = tmp_path / "campaign"
    rng = random.Random(20261122)
    kills = 0
    for _ in range(KILLS):
        # Kill once 0, 1 or 2 more runs have finished (plus a random delay): during start-up,
        # while runs are in flight, between a run folder and its catalog row — on any machine speed.
        p = _start(path, out)
        target = _finished(out) + rng.randint(0, 2)
        deadline = time.monotonic() + 60
        while _finished(out) < target and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.4) if target else rng.uniform(0.1, 1.5))
        if p.poll() is not None:
            break  # finished before the kill
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        kills += 1
        # Between kills the catalog opens and holds no duplicate and no unknown run.
        if (out / catalog.CATALOG).exists():
            keys = [r["run_key"] for r in _rows(out)]
            assert len(keys) == len(set(keys)) and set(keys) <= expected
    assert kills == KILLS, f"only {kills} kills before the campaign finished"
    # The workers die with their campaign (a worker still starting up exits when it is ready).
    deadline = time.monotonic() + 20
    while _orphans(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _orphans(out) == []
    p = _start(path, out)
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr
    rows = _rows(out)
    keys = [r["run_key"] for r in rows]
    assert len(keys) == len(set(keys)) == 20 and set(keys) == expected
    for r in rows:
        assert r["status"] == "ok", r["error"]
        for col in (*catalog.CORE_METRICS, "completion_mean_s", "completion_p99_s"):
            assert r[col] is not None, (r["run_key"], col)
        folder = out / r["folder"]
        assert (folder / "run.json").is_file() and (folder / "report.html").is_file()
        assert {f.name for f in (folder / "trace").iterdir()} >= {"flows.parquet", "goodput.parquet", "link.parquet"}
        assert json.loads((folder / "metrics.json").read_text()) == json.loads(r["metrics"])
    # Nothing half-written is left behind, and each run has exactly one folder.
    leftovers = sorted(p.name for p in (out / "runs").iterdir() if p.name.startswith("."))
    assert leftovers == []
    assert {p.name for p in (out / "runs").iterdir()} == expected
