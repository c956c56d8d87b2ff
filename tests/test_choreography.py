"""The real-host backends' shared plan (xferlab.backends.choreography): pure, no root, no network."""

import json
import shlex
from pathlib import Path

import pytest
from xferlab import scenario as sc
from xferlab.backends import choreography as ch
from xferlab.runinfo import RunInfo

DATA = Path(__file__).parent / "data"
XFER = ch.XferFiles("/opt/xfer", "/w/xfer-root", "/w/xfer.key")


def _plan(small_scenario, **workload):
    """Two staggered pairs and one reverse source, placed on made-up hosts a{pair} → b{pair}."""
    path = small_scenario(topology={"access_rate": "100Mbps", "bottleneck_rate": "100Mbps"}, workload=workload)
    s, _ = sc.load(path, [])
    info = RunInfo.model_validate(sc.resolve(s))
    flows = []
    for f in info.dump()["flows"]:
        src, dst = (f"a{f['pair']}", f"b{f['pair']}") if f["role"] == "transfer" else (f"b{f['pair']}", f"a{f['pair']}")
        flows.append(ch.FlowPlan(f, src, dst, f"10.0.{f['pair']}.2", 5201 + f["flow_id"], 0.01, src_addr=f"10.0.{f['pair']}.1"))
    return info, flows


def test_two_staggered_flows_and_reverse_traffic_get_their_commands(small_scenario):
    info, flows = _plan(small_scenario, stagger="1s", reverse=1)
    first, second, reverse = flows
    assert [f.transfer for f in flows] == [True, True, False] and all(f.tool == "iperf3" for f in flows)
    # Each client is due at its start time: pair k at k × stagger (plus the seed's jitter, under a ms).
    assert first.spec["start_s"] == pytest.approx(0.0, abs=1e-3) and second.spec["start_s"] == pytest.approx(1.0, abs=1e-3)
    end = ch.scenario_end_s(info, flows)
    assert end == pytest.approx(second.spec["start_s"] + 3) and ch.deadline_s(end, flows) == pytest.approx(end + 5)
    interval = ch.report_interval(info)
    assert interval == pytest.approx(0.1)  # the finer of goodput (0.5 s) and TCP (0.1 s) intervals
    ratio = ch.payload_ratio(info)
    args, said = ch.client_args(second, "cubic", interval, end, ratio, None, "unused")
    assert args == [
        "iperf3", "-c", "10.0.1.2", "-p", "5202", "-B", "10.0.1.1", "-C", "cubic", "-J", "--get-server-output",
        "-i", "0.1", "--connect-timeout", "10000", "-t", "3",
    ]  # fmt: skip
    assert said == []
    # The reverse source runs from its start to the scenario's end, in whole seconds: said.
    args, said = ch.client_args(reverse, "cubic", interval, end, ratio, None, "unused")
    assert args[args.index("-t") + 1] == "4" and args[:3] == ["iperf3", "-c", "10.0.2.2"]
    assert said == [f"flow 2: iperf3 runs whole seconds, {end - reverse.spec['start_s']:g} s rounded up to 4 s"]
    assert ch.server_args(first, interval, None) == ["iperf3", "-s", "-1", "-J", "-i", "0.1", "-p", "5201", "-B", "10.0.0.2"]
    assert ch.listening_wanted(flows) == {"b0": {5201}, "b1": {5202}, "a2": {5203}}


def test_a_volume_bound_transfer_runs_on_xfer_and_ipv6_goes_in_brackets(small_scenario):
    info, flows = _plan(small_scenario, duration=None, volume="2MB")
    f = flows[0]
    f.dst_addr = "fd00::2"
    assert f.tool == "xfer"
    args, _ = ch.client_args(f, "reno", 0.1, 10.0, ch.payload_ratio(info), XFER, "/w/flow0.json")
    assert args[:2] == ["/opt/xfer", "send"] and args[-3:] == ["mem:2000000", "[fd00::2]:5201", "--discard"]
    assert args[args.index("--json") + 1] == "/w/flow0.json" and args[args.index("--key-file") + 1] == "/w/xfer.key"
    assert ch.server_args(f, 0.1, XFER) == [
        "/opt/xfer", "serve", "--listen", "[fd00::2]:5201", "--root", "/w/xfer-root", "--key-file", "/w/xfer.key",
    ]  # fmt: skip
    clear = ch.XferFiles("/opt/xfer", "/w/xfer-root", "/w/xfer.key", plaintext=True)  # netns: private namespaces
    assert ch.server_args(f, 0.1, clear)[-1] == "--plaintext"
    assert "--plaintext" in ch.client_args(f, "reno", 0.1, 10.0, ch.payload_ratio(info), clear, "/w/flow0.json")[0]
    assert "--plaintext" not in args  # real hosts: xfer's default, encrypted off loopback


def test_what_a_user_wrote_stays_one_argument_never_a_shell_string(small_scenario):
    """An address or a congestion control name that a shell would read as several commands
    is passed as one argument, as written: nothing here builds a command line to be parsed."""
    info, flows = _plan(small_scenario)
    hostile = "10.0.0.2; touch /tmp/pwned"
    f = flows[0]
    f.dst_addr, f.src_addr = hostile, "$(reboot)"
    args, _ = ch.client_args(f, "cubic`id`", 0.1, 3.0, ch.payload_ratio(info), None, "unused")
    assert all(isinstance(a, str) for a in args) and "sh" not in args
    assert args[args.index("-c") + 1] == hostile and args[args.index("-B") + 1] == "$(reboot)"
    assert args[args.index("-C") + 1] == "cubic`id`"
    assert shlex.split(shlex.join(args)) == args  # quoted for a remote shell, it reads back the same
    bg = ch.onoff_args("/opt/xfer", "10.0.9.2:9", {"rate_bps": 1e6, "mean_on_s": 1.0, "mean_off_s": 2.0}, 1500, 3, 60.0)
    assert bg[bg.index("--dst") + 1] == "10.0.9.2:9" and bg[bg.index("--size") + 1] == "1472"


def test_a_signalled_start_is_due_after_the_last_end_of_the_pair_it_follows():
    spec = {"flow_id": 0, "pair": 0, "stream": 0, "variant": "reno", "start_s": 0.0, "volume_bytes": 10}
    a0, a1 = ch.FlowPlan(spec, "a", "b", "x", 1, 0.01), ch.FlowPlan(dict(spec, flow_id=1), "a", "b", "x", 2, 0.01)
    later = ch.FlowPlan(dict(spec, flow_id=2, pair=1, start_after={"pair": 0, "delay_s": 0.031}), "c", "d", "y", 3, 0.01)
    due, still = ch.signalled([later], [a0, a1], {"flow0": 1.5})
    assert due == [] and still == [later]  # flow 1 has not ended
    due, still = ch.signalled([later], [a0, a1], {"flow0": 1.5, "flow1": 2.0})
    assert due == [later] and still == [] and later.spec["start_s"] == pytest.approx(2.031)


def test_a_recorded_iperf3_output_becomes_the_flow_goodput_and_tcp_rows():
    doc = json.loads((DATA / "iperf3_volume.json").read_text())  # -n 20M at 100 Mbit/s, cubic
    spec = {"flow_id": 0, "pair": 0, "stream": 0, "variant": "cubic", "role": "transfer", "start_s": 0.0}
    f = ch.FlowPlan(spec, "a0", "b0", "10.0.0.2", 5201, 0.01)
    tables = ch.flow_tables([ch.Outcome(f, doc, 0.25, 2.0, "a0", "b0", 0.01)], mss=1448, goodput_interval_s=0.5)
    (row,) = tables["flows"].to_pylist()
    assert row["flow_id"] == 0 and row["source"] == "a0" and row["sink"] == "b0"
    assert row["start"] == pytest.approx(0.25 + ch.SETUP_RTTS * 0.01)  # launch + the test's set-up round trips
    sent = doc["end"]["sum_sent"]["bytes"]
    assert sum(tables["goodput"].column("bytes").to_pylist()) == pytest.approx(sent, rel=0.02)
    assert tables["tcp"].num_rows > 0 and set(tables["tcp"].column("flow_id").to_pylist()) == {0}
    assert ch.background_row([1_000_000, 2_000_000], [2_500_000]) == (
        "background",
        "2 ON/OFF UDP source(s) (xfer onoff): 3.0 MB sent, 2.5 MB received",
    )
