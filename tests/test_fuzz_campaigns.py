"""Standing fuzzers (issue 48), family "campaign signals": a campaign stopped by SIGTERM or
SIGINT (Ctrl-C: the whole process group) at a deterministic point — once a given number of
its runs are committed, observed by polling its run folders, never by sleeping — on the local
pool, in-process (one worker) or on a Dask LocalCluster.

Properties: it exits with 128 + the signal and says how to resume; no worker process of it
survives; no staging folder is left in ``runs/``; the same command then completes the campaign
with every run once, all ok.

The examples are derandomized; ``XFERLAB_FUZZ_EXAMPLES`` gives more (each is a campaign).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from xferlab.campaign import catalog, spec

pytestmark = pytest.mark.slow

EXAMPLES = max(1, int(os.environ.get("XFERLAB_FUZZ_EXAMPLES", "150")) // 75)
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize="XFERLAB_FUZZ_SEED" not in os.environ,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)

#: Four runs of 2 MB: long enough that runs are in flight at each stop, short enough to resume.
CAMPAIGN = {
    "name": "signals",
    "scenario": {
        "name": "tiny",
        "topology": {"pairs": 2, "access_rate": "100Mbps", "bottleneck_rate": "100Mbps", "rtt": "5ms", "buffer": "1.0bdp"},
        "workload": {"streams": 1, "volume": "2MB"},
        "measure": {"goodput_interval": "50ms"},
        "protocol": {"variant": "reno"},
        "seed": 3,
    },
    "sweep": {"topology.rtt": ["5ms", "20ms"]},
    "repetitions": 2,
}
POOLS = {"pool": ["--workers", "2"], "in-process": ["--workers", "1"], "dask": ["--dask", "local:2"]}


def _start(path, out, pool: str) -> subprocess.Popen:
    env = {**os.environ, "XFERLAB_SIGNAL_TEST": str(out)}
    return subprocess.Popen(
        [sys.executable, "-m", "xferlab.cli", "campaign", "run", str(path), "--out", str(out), *POOLS[pool], "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, as a shell gives a command
    )


def _committed(out) -> int:
    """Runs whose folder is in place (the first of a run's two commits; hidden ones are staged)."""
    runs = out / "runs"
    return sum(1 for p in runs.iterdir() if not p.name.startswith(".")) if runs.is_dir() else 0


def _processes(out) -> dict[int, str]:
    """PID → command line of the processes this campaign started, still alive."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"XFERLAB_SIGNAL_TEST={out}".encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found[int(pid)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            pass
    return found


def _staging(out) -> list[str]:
    return sorted(p.name for p in (out / "runs").iterdir() if catalog.STAGING.fullmatch(p.name))


def _rows(out) -> list[tuple[str, str]]:
    import duckdb

    with duckdb.connect(str(out / catalog.CATALOG), read_only=True) as db:
        return db.execute("SELECT run_key, status FROM runs").fetchall()


@FUZZ
@given(
    sig=st.sampled_from([signal.SIGTERM, signal.SIGINT]),
    pool=st.sampled_from(sorted(POOLS)),
    after=st.integers(min_value=1, max_value=2),
)
@example(sig=signal.SIGTERM, pool="pool", after=1)
@example(sig=signal.SIGTERM, pool="dask", after=1)
def test_a_stopped_campaign_leaves_no_worker_no_staging_and_resumes(tmp_path_factory, sig, pool, after):
    if pool == "dask":
        pytest.importorskip("distributed")
    tmp = tmp_path_factory.mktemp("signals")
    path = tmp / "c.yaml"
    path.write_text(json.dumps(CAMPAIGN))
    expected = {r.key for r in spec.load(path).runs}
    out = tmp / "camp"
    p = _start(path, out, pool)
    deadline = time.monotonic() + 600
    while _committed(out) < after and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert p.poll() is None, f"the campaign ended before its stop: {p.communicate()}"
    # Ctrl-C reaches the whole process group; a SIGTERM (kill, systemd, a batch system) the campaign.
    os.killpg(p.pid, sig) if sig == signal.SIGINT else os.kill(p.pid, sig)
    _, stderr = p.communicate(timeout=300)
    assert p.returncode == 128 + sig, stderr
    assert "run the same command to resume" in " ".join(stderr.split()), stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    # No worker outlives the campaign (multiprocessing's resource tracker exits on its own
    # once its parent is gone: it is given a moment, the workers none).
    workers = {pid: cmd for pid, cmd in _processes(out).items() if "resource_tracker" not in cmd}
    assert workers == {}, workers
    deadline = time.monotonic() + 30
    while _processes(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes(out) == {}
    assert _staging(out) == []
    keys = [k for k, _ in _rows(out)]
    assert len(keys) == len(set(keys)) and set(keys) <= expected
    # The same command completes it: every run once, all ok, nothing staged left.
    p = _start(path, out, pool)
    _, stderr = p.communicate(timeout=600)
    assert p.returncode == 0, stderr
    rows = _rows(out)
    assert sorted(k for k, _ in rows) == sorted(expected) and {s for _, s in rows} == {"ok"}
    assert _staging(out) == [] and {x.name for x in (out / "runs").iterdir()} == expected
