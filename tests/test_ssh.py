"""The ssh backend on a testbed of real hosts: network namespaces, each with its own sshd,
joined as a dumbbell whose router the backend shapes (tests/sshbed.py). The backend reaches
them through SSH only; the tests look at them from outside (``ip netns exec``).

Host s1's processes see a clock 3 s ahead (libfaketime): the backend must measure it and
start s1's flows on time anyway. Runs are a few seconds at 100 Mbit/s; the faults hit runs of
30 s once their flows are seen running, so no fault races the end of a run.
"""

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sshbed
import yaml
from xferlab.backends import netns
from xferlab.remote import hosts
from xferlab.remote.inventory import load as load_inventory
from xferlab.remote.shell import Refused

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sshbed.missing() is not None, reason=sshbed.missing() or "")]

SKEW_S = 3
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    sshbed.remove_leftovers()
    with sshbed.Bed(pairs=2, access_bps=100e6, rtt_s=0.02, clock_skew={"s1": f"+{SKEW_S}"}) as b:
        b.controller = b.dir / "controller"
        old = os.environ.get("XFERLAB_SSH_STATE")
        os.environ["XFERLAB_SSH_STATE"] = str(b.controller)  # the CLI's copies of the journals, for this bed only
        b.inv = b.write_inventory(b.dir / "hosts.yaml", b.inventory(state_dir=str(b.dir / "state")))
        # The faults' runs skip calibration (tested by the others): a few seconds fewer each.
        b.fast = b.write_inventory(b.dir / "fast.yaml", b.inventory(state_dir=str(b.dir / "state"), calibration="0"))
        b.pristine = b.state()
        yield b
        if old is None:
            os.environ.pop("XFERLAB_SSH_STATE")
        else:
            os.environ["XFERLAB_SSH_STATE"] = old


@pytest.fixture
def clean(bed):
    """After each test: every host as it was (a failed test restores through `cleanup`)."""
    yield bed
    for h in bed.hosts:
        if h not in bed.sshd:
            bed.start_sshd(h)
    if bed.state() != bed.pristine or journals(bed):
        subprocess.run([sys.executable, "-m", "xferlab.cli", "cleanup", "--inventory", str(bed.inv)], capture_output=True)


def journals(bed) -> list[str]:
    found = [p.name for p in (bed.dir / "state").glob("*.json")] if (bed.dir / "state").exists() else []
    return found + ([p.name for p in bed.controller.glob("*.json")] if bed.controller.exists() else [])


def scenario(tmp_path, name="ssh", **sections) -> str:
    data = {
        "name": name,
        "topology": {"pairs": 2, "access_rate": "100Mbps", "bottleneck_rate": "100Mbps", "rtt": "20ms", "buffer": "1.0bdp"},
        "workload": {"streams": 1, "duration": "4s"},
        "protocol": {"variant": "reno"},
        "measure": {"goodput_interval": "0.5s", "link_interval": "100ms"},
        "seed": 1,
    }
    for k, v in sections.items():
        data[k] = {kk: vv for kk, vv in {**data.get(k, {}), **v}.items() if vv is not None}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def assert_restored(bed, but=()):
    now = bed.state()
    for h in bed.hosts:
        if h not in but:
            assert now[h] == bed.pristine[h], h
    assert not [t for t in bed.tools() if t.split(":")[0] not in but]


def start(bed, tmp_path, name, **sections) -> subprocess.Popen:
    args = ["run", scenario(tmp_path, name, **sections), "--backend", "ssh", "--inventory", str(bed.fast)]
    return subprocess.Popen(
        [sys.executable, "-m", "xferlab.cli", *args, "--out", str(tmp_path / name), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_running(bed, p: subprocess.Popen, senders: set[str], timeout: float = 240.0) -> None:
    """Until the run's flows (iperf3 clients of 30 s, not the calibration's) run on ``senders``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        running = {t.split(":")[0] for t in bed.tools(with_args=True) if " -c " in t and " -t 30" in t}
        if senders <= running:
            return
        time.sleep(0.2)
    raise AssertionError(f"the flows did not start (exit status {p.poll()}): {p.stderr.read() if p.poll() is not None else ''}")


# ----------------------------------------------------------------------------- runs


def test_one_scenario_on_sim_netns_and_ssh(cli, bed, clean, tmp_path):
    """The same scenario on the three backends: the same run folder, metrics that agree, and
    `xferlab compare` side by side; the hosts as they were afterwards."""
    path = scenario(tmp_path, "three")
    cli("run", path, "--backend", "ssh", "--inventory", bed.inv, "--out", tmp_path / "ssh", check=True)
    m = json.loads((tmp_path / "ssh" / "metrics.json").read_text())
    meta = json.loads((tmp_path / "ssh" / "run.json").read_text())
    assert meta["backend"] == "ssh"
    # 2 × 100 Mbit/s into 100 Mbit/s, RTT 20 ms, B = 1 BDP: the bottleneck is full and fair.
    assert 0.85 < m["efficiency"] <= 1.01 and m["jain_index"] > 0.9
    assert m["bottleneck_drops"] > 0 and m["retransmissions"] >= 0.5 * m["bottleneck_drops"]
    stats = meta["provenance"]["stats"]
    assert stats["hosts"]["s1"]["clock"]["offset_ms"] == pytest.approx(SKEW_S * 1e3, abs=50)
    assert abs(stats["hosts"]["s0"]["clock"]["offset_ms"]) <= stats["hosts"]["s0"]["clock"]["uncertainty_ms"] + 0.01
    # Both flows started at their times, s1's despite its clock: no error near 3 s.
    assert stats["start_error_ms"]["max_abs"] < 500
    assert set(stats["calibration"]) == {"0", "1"} and all(abs(c["rtt_ms"] - 20) < 2 for c in stats["calibration"].values())
    assert {"clock offsets", "start error", "bottleneck"} <= {row[0] for row in meta["provenance"]["setup"]}
    assert (tmp_path / "ssh" / "logs" / "s1" / "flow1.out").exists() and (tmp_path / "ssh" / "logs" / "rt" / "link.out").exists()
    link = pq.read_table(tmp_path / "ssh" / "trace" / "link.parquet").to_pandas()
    busy = link[(link["link"] == "bottleneck") & (link["t"] >= 1.0) & (link["t"] < 3.5)]
    assert 0.85 * 100 * 1500 / 1538 < busy["throughput_mbps"].mean() < 100
    assert_restored(bed)
    assert journals(bed) == []
    cli("run", path, "--backend", "netns", "--out", tmp_path / "netns", "-q", check=True)
    cli("run", path, "--out", tmp_path / "sim", "-q", check=True)
    # One Trace contract: the same tables, the same columns of the same types, on every backend.
    tables = sorted(p.name for p in (tmp_path / "ssh" / "trace").glob("*.parquet"))
    assert tables == sorted(p.name for p in (tmp_path / "netns" / "trace").glob("*.parquet")) and "flows.parquet" in tables
    for name in tables:
        layouts = {b: [(f.name, f.type) for f in pq.read_schema(tmp_path / b / "trace" / name)] for b in ("ssh", "netns", "sim")}
        assert layouts["ssh"] == layouts["netns"] == layouts["sim"], name
    for other in ("sim", "netns"):
        cli("compare", tmp_path / other, tmp_path / "ssh", check=True)
        html = (tmp_path / other / "compare-ssh.html").read_text()
        assert "aggregate goodput" in html and "three (ssh, seed 1)" in html


def test_volume_transfers_move_with_xfer_deployed_over_ssh(cli, bed, clean, tmp_path):
    out = tmp_path / "vol"
    path = scenario(tmp_path, "vol", workload={"volume": "6MB", "duration": None, "stagger": "0.5s"})
    cli("run", path, "--backend", "ssh", "--inventory", bed.fast, "--out", out, "-q", check=True)
    flows = pq.read_table(out / "trace" / "flows.parquet").to_pandas()
    assert (flows["bytes"] == 6_000_000).all() and flows["completion_time"].notna().all()
    # 6 MB at up to 94 Mbit/s of goodput takes at least 0.5 s, and far less than 10 s here.
    assert (flows["completion_time"] > 0.5).all() and (flows["completion_time"] < 10).all()
    configured = json.loads((out / "run.json").read_text())["provenance"]["stats"]["hosts"]
    assert configured["s0"]["xfer"] is False  # not installed: deployed for the run, removed after
    stats = json.loads((out / "run.json").read_text())["provenance"]["stats"]
    static = (ROOT / netns.STATIC_XFER).exists()
    assert stats["xfer_deployed"]["s0"] == ("static" if static else "glibc")
    assert (out / "logs" / "s0" / "flow0.json").exists()
    assert_restored(bed)


def test_per_flow_token_buckets_hold_each_flow_over_ssh(cli, bed, clean, tmp_path):
    """20 Mbit/s buckets (qdisc frames) on 100 Mbit/s access links: each flow's goodput is
    the bucket's, 19.1 Mbit/s of payload, where an unlimited one gets about 47."""
    out = tmp_path / "tb"
    path = scenario(tmp_path, "tb", protocol={"rate_limit": "20Mbps", "limiter": "token_bucket"})
    cli("run", path, "--backend", "ssh", "--inventory", bed.fast, "--out", out, "-q", check=True)
    g = pq.read_table(out / "trace" / "goodput.parquet").to_pandas()
    steady = g[g["t"] >= 1.0].groupby("flow_id")["goodput_mbps"].mean()  # after slow start
    assert len(steady) == 2 and ((steady > 15) & (steady <= 20)).all(), steady.tolist()
    configured = json.loads((out / "run.json").read_text())["provenance"]["stats"]["configured"]
    assert any(c.startswith("xl-ifb: token buckets, port 5201 at 20 Mbit/s") for c in configured["s0"]), configured["s0"]
    assert any(c == "eth0: port(s) 5202 through xl-ifb" for c in configured["s1"]), configured["s1"]
    assert_restored(bed)


def test_background_sources_run_on_the_pairs_after_the_scenarios(cli, bed, clean, tmp_path):
    """One pair and a background source at half the bottleneck on average: the source runs
    `xfer onoff` from s1 (deployed there) to a sink on r1, and the bottleneck carries both."""
    out = tmp_path / "bg"
    bg = {"level": 0.5, "mean_on": "0.2s", "mean_off": "0.2s"}
    path = scenario(tmp_path, "bg", topology={"pairs": 1}, workload={"duration": "5s", "background": bg})
    cli("run", path, "--backend", "ssh", "--inventory", bed.fast, "--out", out, "-q", check=True)
    stats = json.loads((out / "run.json").read_text())["provenance"]["stats"]
    (sent,), (received,) = stats["background_bytes"], stats["background_received_bytes"]
    print(f"\nbackground: sent {sent / 1e6:.1f} MB, received {received / 1e6:.1f} MB")
    # 100 Mbit/s while ON, half the time, for about 5 s: some 31 MB, less what the bottleneck dropped.
    assert 10e6 < sent < 60e6 and 0.5 * sent < received <= sent, (sent, received)
    # The source and its sink run this build's xfer, and so does the router's link sampler (xfer qstats).
    assert stats["xfer_deployed"] == {h: stats["xfer_deployed"]["s1"] for h in ("s1", "r1", "rt")}
    link = pq.read_table(out / "trace" / "link.parquet").to_pandas()
    flows = pq.read_table(out / "trace" / "flows.parquet").to_pandas()
    carried = link[link["link"] == "bottleneck"]["bytes"].sum()
    assert carried > flows["bytes"].sum() + 0.3 * sent  # the bottleneck carried the background too
    assert_restored(bed)
    r = cli("run", scenario(tmp_path, "bg2", workload={"background": bg}), "--backend", "ssh", "--inventory", bed.fast, "-q")
    assert r.returncode == 2 and "the inventory needs 3 pairs (senders → receivers), it has 2" in r.stderr, r.stderr


def test_reverse_traffic_runs_from_a_receiver_to_a_sender(cli, bed, clean, tmp_path):
    """One pair and one reverse source (R = 1): the source runs on the inventory's next pair,
    r1 → s1, through the router's reverse device; `workload.reverse` crashed the backend."""
    out = tmp_path / "rev"
    path = scenario(tmp_path, "rev", topology={"pairs": 1}, workload={"duration": "3s", "reverse": 1})
    cli("run", path, "--backend", "ssh", "--inventory", bed.fast, "--out", out, "-q", check=True)
    flows = pq.read_table(out / "trace" / "flows.parquet").to_pandas().set_index("flow_id")
    assert flows.loc[1, "role"] == "reverse" and (flows.loc[1, "source"], flows.loc[1, "sink"]) == ("r1", "s1")
    m = json.loads((out / "metrics.json").read_text())
    assert m["reverse_goodput_mbps"] > 20 and m["aggregate_goodput_mbps"] > 50  # both ways, 100 Mbit/s each
    assert_restored(bed)


def test_a_transfer_signalled_by_another_s_end_starts_after_it_on_another_host(cli, bed, clean, tmp_path):
    """ViFi by signal on two pairs: s1's transfer waits for s0's to end. s1's clock is 3 s
    ahead, so a start read off the wrong clock would come 3 s early or late."""
    data = yaml.safe_load(open(scenario(tmp_path, "vifi")))
    data.pop("workload")
    data["requests"] = [{"volume": "4MB", "name": "first"}, {"volume": "4MB", "name": "second"}]
    data["schedule"] = {"strategy": "vifi", "mechanism": "pacing", "time_control": {"sync": "signal", "processing": "0.1ms"}}
    path = tmp_path / "vifi.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "vifi"
    cli("run", path, "--backend", "ssh", "--inventory", bed.fast, "--out", out, "-q", check=True)
    flows = pq.read_table(out / "trace" / "flows.parquet").to_pandas().set_index("flow_id")
    assert (flows["bytes"] == 4_000_000).all()
    first_end, second_start = flows.loc[0, "end"], flows.loc[1, "start"]
    # The second's data follows the first's end: by the signal's delay (1.5 RTT + 0.1 ms), the
    # controller's poll (50 ms) and an SSH round trip, then xfer's session set-up (~10 RTT).
    assert first_end + 0.030 <= second_start < first_end + 3.0, (first_end, second_start)
    errors = json.loads((out / "run.json").read_text())["provenance"]["stats"]["start_error_ms"]["per_flow"]
    assert 0 <= errors["1"] < 2000 and abs(errors["0"]) < 500
    assert_restored(bed)


# ----------------------------------------------------------------------------- refusals


def test_an_unreachable_host_stops_the_run_before_anything_changes(cli, bed, clean, tmp_path):
    data = bed.inventory(state_dir=str(bed.dir / "state"))
    data["hosts"]["r1"]["port"] = 2222  # nothing listens there
    inv = bed.write_inventory(tmp_path / "hosts.yaml", data)
    r = cli("run", scenario(tmp_path), "--backend", "ssh", "--inventory", inv, "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"r1 (root@{bed.ctl('r1')}:2222): unreachable" in r.stderr and "nothing was changed on any host" in r.stderr
    assert_restored(bed)
    assert journals(bed) == []


def connect(inv_data: dict, tmp_path, host: str):
    inv = load_inventory(yaml_file(tmp_path, inv_data))

    async def go():
        tb = hosts.Testbed(inv, [host], "t")
        try:
            await tb.connect()
        finally:
            await tb.close()

    asyncio.run(go())


def test_the_skewed_host_runs_every_command_it_is_given(bed, tmp_path):
    """The bed itself: s1's clock runs 3 s ahead (libfaketime), and nothing else differs. A
    shell's command substitutions once unlinked libfaketime's shared semaphore under it and the
    next program died at start (a route to a peer vanished from a run's pre-flight, 5 times in
    300 here); 300 of them in a row must all answer, with the clock ahead."""
    loop = (
        "n=0; for i in $(seq 300); do r=$(ip -o route get 10.252.0.1 2>&1 | head -n 1);"
        ' case "$r" in *" dev "*) n=$((n+1));; *) echo "lost: $r";; esac; done; echo "ok=$n"; date +%s.%N'
    )

    async def go():
        tb = hosts.Testbed(load_inventory(str(bed.inv)), ["s1"], "t")
        await tb.connect()
        try:
            return await tb.hosts["s1"].run(loop, timeout=120)
        finally:
            await tb.close()

    out = asyncio.run(go()).splitlines()
    assert out[-2] == "ok=300", out[:5]
    assert float(out[-1]) - time.time() == pytest.approx(SKEW_S, abs=1.0)


def yaml_file(tmp_path, data) -> str:
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_a_wrong_key_or_a_host_key_that_does_not_match_is_refused(bed, clean, tmp_path):
    # A key the hosts do not authorise.
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    data = bed.inventory()
    data["hosts"]["s0"]["key"] = str(other)
    with pytest.raises(
        Refused,
        match=rf"s0 \(root@{re.escape(bed.ctl('s0'))}:22\): login refused for root with key .*other \(permission denied\)",
    ):
        connect(data, tmp_path, "s0")
    # known_hosts that lists r0's key for s0's address: a host-key mismatch.
    lines = (bed.dir / "known_hosts").read_text().splitlines()
    swapped = tmp_path / "known_hosts"
    swapped.write_text(f"{bed.ctl('s0')} {lines[2].split(' ', 1)[1]}\n")
    data = bed.inventory()
    data["hosts"]["s0"]["known_hosts"] = str(swapped)
    with pytest.raises(Refused, match=rf"its host key SHA256:\S+ is not one .* lists for {re.escape(bed.ctl('s0'))}"):
        connect(data, tmp_path, "s0")
    # A pinned fingerprint: the right one logs in, another is refused.
    data = bed.inventory(pin="s0")
    connect(data, tmp_path, "s0")
    data["hosts"]["s0"]["fingerprint"] = bed.fingerprint("r0")
    with pytest.raises(Refused, match="not the fingerprint the inventory pins"):
        connect(data, tmp_path, "s0")


# ----------------------------------------------------------------------------- faults


def test_a_host_that_dies_fails_the_run_and_the_others_are_restored(cli, bed, clean, tmp_path):
    p = start(bed, tmp_path, "dies", workload={"duration": "30s"})
    wait_running(bed, p, {"s0", "s1"})
    bed.kill_host("r1")  # its sshd, its sessions, its iperf3 server
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "Traceback" not in err, err
    assert f"error: run: r1 (root@{bed.ctl('r1')}:22): the connection was lost" in err
    assert "restored r0, rt, s0, s1" in err and "not restored: r1" in err and "xferlab cleanup --inventory" in err
    assert not (tmp_path / "dies").exists()
    assert_restored(bed, but=("r1",))
    assert bed.state()["r1"] != bed.pristine["r1"]  # r1 still carries the run's route
    bed.start_sshd("r1")  # back: cleanup restores it from its journal
    r = cli("cleanup", "--inventory", bed.inv, check=True)
    assert "restored r1: 2 change(s) undone" in r.stdout
    assert_restored(bed)
    assert journals(bed) == []


def test_sigint_restores_every_host(bed, clean, tmp_path):
    p = start(bed, tmp_path, "int", workload={"duration": "30s"})
    wait_running(bed, p, {"s0", "s1"})
    assert bed.state() != bed.pristine  # configured: routes, buffers, the router's bottleneck
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    assert "restore: restored r0, r1, rt, s0, s1" not in err  # -q: no step lines
    assert_restored(bed)
    assert journals(bed) == [] and not (tmp_path / "int").exists()


def test_kill_9_then_cleanup_restores_every_host(cli, bed, clean, tmp_path):
    # With per-flow token buckets: an ifb and a clsact on each sender for cleanup to remove.
    p = start(bed, tmp_path, "k9", workload={"duration": "30s"}, protocol={"rate_limit": "40Mbps", "limiter": "token_bucket"})
    wait_running(bed, p, {"s0", "s1"})
    p.kill()
    p.wait()
    left = bed.state()
    assert "htb" in left["rt"]["qdisc"] and bed.tools()  # left as they were
    assert all("xl-ifb" in left[s]["ifb"] and "clsact" in left[s]["qdisc"] for s in ("s0", "s1"))
    assert len(journals(bed)) == 10  # on each of the 5 hosts and the controller's copies
    r = cli("run", scenario(tmp_path, "next"), "--backend", "ssh", "--inventory", bed.inv, "-q")
    assert r.returncode == 2 and "the journal of an unfinished run is still there" in r.stderr
    r = cli("cleanup", "--inventory", bed.inv, check=True)
    assert sorted(line.split(":")[0] for line in r.stdout.splitlines()) == [f"restored {h}" for h in sorted(bed.hosts)]
    assert_restored(bed)
    assert journals(bed) == []
    r = cli("cleanup", "--inventory", bed.inv, check=True)
    assert "nothing to restore" in r.stdout


def test_in_a_campaign_a_failed_run_is_recorded_and_the_others_go_on(cli, bed, clean, tmp_path):
    """Run 0 (2 pairs, 30 s) loses r1; run 1 (1 pair, 2 s) does not need r1 and completes."""
    camp = {
        "name": "ssh-fault",
        "scenario": yaml.safe_load(open(scenario(tmp_path, "base"))),
        "set": {"measure.link_interval": "100ms"},
        "zip": {"topology.pairs": [2, 1], "workload.duration": ["30s", "2s"]},
        "backend": "ssh",
        "inventory": str(bed.fast),
    }
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(camp))
    p = subprocess.Popen(
        [sys.executable, "-m", "xferlab.cli", "campaign", "run", str(path), "--out", str(tmp_path / "c")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_running(bed, p, {"s0", "s1"})
    bed.kill_host("r1")
    out, err = p.communicate(timeout=240)
    assert "failed: BackendError: run: r1" in out + err, out + err
    assert "1 run(s) done" in out and "1 failed" in out, out + err
    runs = sorted((tmp_path / "c" / "runs").glob("*/metrics.json"))
    assert len(runs) == 1  # the run that completed is kept
    assert_restored(bed, but=("r1",))
