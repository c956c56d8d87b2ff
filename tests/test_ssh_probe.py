"""The host and path check (``xferlab advise --probe``) on the namespace testbed
(tests/sshbed.py): one sender, one receiver, 100 Mbit/s access links, 20 ms of RTT. The
probe reaches the hosts through SSH only; the test looks at them from outside.

The receiver's ``tcp_rmem`` is made too small for the path in its namespace (net.ipv4.*
sysctls are per network namespace): the probe must find it, print the fix, and leave the
hosts as they were — no process, folder or journal of its own left."""

import json
import os
import subprocess
import sys

import pytest
import sshbed
from xferlab.advisor.question import rate_for_goodput

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sshbed.missing() is not None, reason=sshbed.missing() or "")]

SMALL_RMEM = "4096 16384 65536"


@pytest.fixture(scope="module")
def bed():
    sshbed.remove_leftovers()
    with sshbed.Bed(pairs=1, access_bps=100e6, rtt_s=0.02) as b:
        (b.dir / "work").mkdir()
        options = {"state_dir": str(b.dir / "state"), "workdir": str(b.dir / "work")}
        b.inv = b.write_inventory(b.dir / "hosts.yaml", b.inventory(**options))
        b.pristine = b.state()
        yield b


def advise(bed, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XFERLAB_SSH_STATE": str(bed.dir / "controller")}  # the controller's journal copies
    cmd = [sys.executable, "-m", "xferlab.cli", "advise", "--probe", "--inventory", str(bed.inv), "--probe-time", "12s", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def assert_left_as_found(bed):
    assert bed.state() == bed.pristine
    assert bed.tools() == []
    assert list((bed.dir / "work").iterdir()) == []  # the probe's folders, with xfer and its key
    assert not list((bed.dir / "state").glob("*.json"))  # the journals: the hosts are let go


def test_a_receive_buffer_too_small_for_the_bdp_is_found_and_its_fix_printed(bed):
    sshbed.sh("sysctl", "-qw", f"net.ipv4.tcp_rmem={SMALL_RMEM}", ns=bed.ns("r0"))
    try:
        r = advise(bed, "--json", "-q")
        text = advise(bed)
    finally:
        sshbed.sh("sysctl", "-qw", f"net.ipv4.tcp_rmem={bed.pristine['r0']['net.ipv4.tcp_rmem']}", ns=bed.ns("r0"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)["probe"]
    m = doc["measured"]
    assert (m["sender"], m["receiver"], m["rtt_source"]) == ("s0", "r0", "ping")
    assert 0.019 < m["rtt_s"] < 0.1  # the delay line's 20 ms, and the hosts' queues
    assert m["one"]["streams"] == 1 and m["many"]["streams"] == 4
    # A 64 KiB buffer offers a window of 32 KiB: 13 Mbit/s at 20 ms, whatever the path carries.
    assert m["one"]["goodput_bps"] < 0.7 * m["many"]["goodput_bps"]
    problems = [f for f in doc["findings"] if f["severity"] == "problem"]
    assert [(f["host"], f["fix"]) for f in problems] == [("r0", ["sysctl -w net.ipv4.tcp_rmem='4096 131072 6291456'"])]
    assert "net.ipv4.tcp_rmem's maximum is 64 KiB" in problems[0]["what"]
    assert any("window-limited" in f["what"] for f in doc["findings"])
    assert doc["hosts"]["r0"]["sysctls"]["net.ipv4.tcp_rmem"] == SMALL_RMEM
    assert text.returncode == 0, text.stderr
    assert "problem  r0: net.ipv4.tcp_rmem's maximum is 64 KiB" in text.stdout
    assert "fix (on r0, as root): sysctl -w net.ipv4.tcp_rmem='4096 131072 6291456'" in text.stdout
    assert_left_as_found(bed)


def test_the_measured_path_feeds_the_advice(bed):
    r = advise(bed, "--volume", "200MB", "--budget", "4s", "--repetitions", "1", "--json", "-q")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    m = doc["probe"]["measured"]
    assert not [f for f in doc["probe"]["findings"] if f["severity"] == "problem"]
    assert doc["question"]["rtt_s"] == pytest.approx(m["rtt_s"], abs=1e-6)
    assert doc["question"]["bottleneck_bps"] == pytest.approx(rate_for_goodput(m["best_goodput_bps"]), rel=1e-6)
    assert 60e6 < m["best_goodput_bps"] < 110e6  # a 100 Mbit/s access link
    assert doc["recommended"]["label"]
    assert_left_as_found(bed)
