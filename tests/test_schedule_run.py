"""``xferlab schedule run``: a plan moved as real data by xfer over loopback, on its timing."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from xferlab.backends import netns

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def server(tmp_path):
    """An ``xfer serve`` on loopback; yields its address."""
    try:
        xfer = netns.xfer_binary()
    except Exception as e:  # noqa: BLE001 - the reason is the skip message
        pytest.skip(str(e))
    root = tmp_path / "srv"
    root.mkdir()
    args = [xfer, "serve", "--insecure", "--listen", "127.0.0.1:0", "--root", str(root)]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    yield line.split()[-1]
    p.kill()
    p.wait()


def _scenario(tmp_path, schedule: dict) -> Path:
    path = tmp_path / "plan.yaml"
    data = {
        "name": "real",
        "topology": {"access_rate": "1Gbps", "bottleneck_rate": "300Mbps", "rtt": "1ms"},
        "requests": [{"volume": "15MB", "name": "v1"}, {"volume": "30MB", "name": "v2"}],
        "schedule": schedule,
    }
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_spaghetti_plan_moves_real_data_on_its_timing(tmp_path, cli, server):
    path = _scenario(tmp_path, {"strategy": "spaghetti", "mechanism": "pacing"})
    cli("schedule", "run", path, server, "--insecure", "--out", tmp_path / "out", "--lead", "1", check=True)
    doc = json.loads((tmp_path / "out" / "schedule-run.json").read_text())
    # r_TP of 300 Mbit/s with timestamps, 282 Mbit/s: 45 MB in 1.27 s; each request at its own
    # rate (1/3 and 2/3 of it) ends then, together.
    for r, volume in zip(doc["requests"], [15e6, 30e6], strict=True):
        assert r["error"] is None and r["bytes"] == volume
        assert r["planned_completion_s"] == pytest.approx(1.2746, abs=0.001)
        assert abs(r["start_s"]) < 0.1, r  # at the plan's time 0, the session set up ahead
        assert abs(r["late_s"]) < 0.3, r
    assert (tmp_path / "out" / "request1.json").is_file()


def test_vifi_by_signal_starts_the_next_when_the_first_commits(tmp_path, cli, server):
    path = _scenario(tmp_path, {"strategy": "vifi", "mechanism": "pacing", "time_control": {"sync": "signal"}})
    cli("schedule", "run", path, server, "--insecure", "--out", tmp_path / "out", "--lead", "1", check=True)
    first, second = json.loads((tmp_path / "out" / "schedule-run.json").read_text())["requests"]
    assert second["signal"] is not None and first["signal"] is None
    # Started by the first's signal, after its receiver committed: within loopback's latency.
    assert first["completion_s"] <= second["start_s"] < first["completion_s"] + 0.1


def test_a_token_bucket_plan_and_a_missing_key_are_refused(tmp_path, cli, server):
    path = _scenario(tmp_path, {"strategy": "spaghetti", "mechanism": "token_bucket"})
    r = cli("schedule", "run", path, server, "--insecure", "--out", tmp_path / "o1")
    assert r.returncode == 2 and "token bucket is a qdisc" in r.stderr
    r = cli("schedule", "run", path, server, "--out", tmp_path / "o2")
    assert r.returncode == 2 and "--key-file" in r.stderr
