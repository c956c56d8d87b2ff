"""The host and path check (``xferlab advise --probe``) without hosts: its findings on
synthetic facts and figures, the traces' arithmetic, the options, and hostile inventories
refused before any connection. tests/test_ssh_probe.py runs it on the namespace testbed."""

import shlex

import pytest
import yaml
from typer.testing import CliRunner
from xferlab import cli
from xferlab.advisor import apply, hostcheck, probe
from xferlab.advisor.candidates import DEFAULT, Config
from xferlab.advisor.probe import End, Measured, Probed, Transfer
from xferlab.advisor.question import ask, rate_for_goodput
from xferlab.remote import facts

SENDER, RECEIVER = "10.0.0.1", "10.0.0.2"


def host_facts(name: str, peer: str, **over) -> facts.Facts:
    """A well-configured Linux 6.1 host whose route to ``peer`` leaves by eth0 (fq, MTU 1500, offloads on)."""
    f = facts.Facts(name, kernel="6.1.0-18-amd64", arch="x86_64")
    f.tools = {t: f"/usr/bin/{t}" for t in facts.TOOLS + ("ping", "modprobe")}
    f.sysctls = {
        "net.ipv4.tcp_rmem": "4096 131072 67108864",
        "net.ipv4.tcp_wmem": "4096 16384 67108864",
        "net.core.rmem_max": "67108864",
        "net.core.wmem_max": "67108864",
        "net.ipv4.tcp_available_congestion_control": "reno cubic",
        "net.ipv4.tcp_allowed_congestion_control": "reno cubic",
    }
    f.loadable = {"bbr", "htcp"}
    f.routes = {peer: {"get": {"dev": "eth0", "src": SENDER if name == "s0" else RECEIVER}, "exact": None}}
    f.mtus = {peer: 1500}
    f.route_qdiscs = {peer: "qdisc fq 8001: root refcnt 2 limit 10000p"}
    f.offloads = {"eth0": {"tso": True, "gso": True, "gro": True}}
    for k, v in over.items():
        setattr(f, k, v)
    return f


def sent(streams: int, mbps: float, retrans: int = 0) -> Transfer:
    return Transfer(streams, 500_000_000, 4.0, mbps * 1e6, retrans, 20.1, 25.0, True, "cubic")


def probed(sender=None, receiver=None, one=None, many=None, rtt_s=0.02) -> Probed:
    s = End("s0", SENDER, RECEIVER, sender or host_facts("s0", RECEIVER))
    r = End("r0", RECEIVER, SENDER, receiver or host_facts("r0", SENDER))
    m = Measured(0, "s0", "r0", rtt_s=rtt_s, rtt_source="ping", one=one or sent(1, 930), many=many or sent(4, 935))
    return Probed(s, r, m)


Q = ask("20ms", "1Gbps", "10GB")  # BDP 2.5 MB; a stream's buffer: 2 × (BDP + 1 BDP of queue) = 10 MiB


def test_a_well_configured_pair_has_no_problem_nor_warning():
    found = hostcheck.findings(probed(), Q, DEFAULT)
    assert {f.severity for f in found} == {"ok"}, found
    assert any("fq qdisc on eth0 paces" in f.what for f in found)


def test_a_receive_buffer_too_small_for_the_bdp_is_a_problem_with_apply_s_fix():
    small = host_facts("r0", SENDER)
    small.sysctls["net.ipv4.tcp_rmem"] = "4096 16384 65536"
    found = hostcheck.findings(probed(receiver=small), Q, DEFAULT)
    assert found[0].severity == "problem" and found[0].host == "r0"
    assert "net.ipv4.tcp_rmem's maximum is 64 KiB" in found[0].what
    assert "holds one stream to 13 Mbit/s" in found[0].what  # 32 KiB of window over 20 ms
    need = apply.socket_buffer_bytes(Q, DEFAULT)
    assert need == 10 << 20
    assert found[0].fix == [f"sysctl -w net.ipv4.tcp_rmem='4096 131072 {need}'"]
    assert found[0].fix == [line for line in apply.shell_lines(Q, DEFAULT) if "tcp_rmem" in line]
    # The sender's receive buffer is not this transfer's business.
    s = host_facts("s0", RECEIVER, sysctls=dict(small.sysctls))
    assert {f.severity for f in hostcheck.findings(probed(sender=s), Q, DEFAULT)} == {"ok"}


def test_send_buffers_and_the_application_caps():
    s = host_facts("s0", RECEIVER)
    s.sysctls.update({"net.ipv4.tcp_wmem": "4096 16384 4194304", "net.core.wmem_max": "212992"})
    r = host_facts("r0", SENDER)
    r.sysctls["net.core.rmem_max"] = "212992"
    found = hostcheck.findings(probed(sender=s, receiver=r), Q, DEFAULT)
    by = {(f.host, f.fix[0].split("=")[0]): f.severity for f in found if f.fix}
    assert by == {
        ("s0", "sysctl -w net.ipv4.tcp_wmem"): "problem",
        ("s0", "sysctl -w net.core.wmem_max"): "warning",
        ("r0", "sysctl -w net.core.rmem_max"): "warning",
    }
    # With 16 streams each needs a sixteenth (1 MiB): the 4 MiB of tcp_wmem suffice, not the 208 KiB caps.
    found = hostcheck.findings(probed(sender=s, receiver=r), Q, Config("cubic", 16, None))
    assert sorted(f.fix[0] for f in found if f.fix) == [
        "sysctl -w net.core.rmem_max=6291456",
        "sysctl -w net.core.wmem_max=4194304",
    ]


def test_congestion_controls_built_in_loadable_missing_and_not_allowed():
    found = hostcheck.congestion_control(probed().sender, "bbr")
    assert [(f.severity, f.fix) for f in found] == [
        ("warning", ["modprobe tcp_bbr"]),
        ("warning", ["sysctl -w net.ipv4.tcp_allowed_congestion_control='reno cubic bbr'"]),
    ]
    found = hostcheck.congestion_control(probed().sender, "scalable")
    assert [f.severity for f in found] == ["problem"] and "no congestion control scalable" in found[0].what
    assert [f.severity for f in hostcheck.congestion_control(probed().sender, "cubic")] == ["ok"]


def test_pacing_fq_internal_or_neither():
    internal = host_facts("s0", RECEIVER, route_qdiscs={RECEIVER: "qdisc pfifo_fast 0: root refcnt 2"})
    (f,) = hostcheck.pacing(probed(sender=internal).sender, DEFAULT)
    assert f.severity == "ok" and "internal pacing" in f.what and "tc qdisc replace dev eth0 root fq" in f.what
    old = host_facts("s0", RECEIVER, kernel="4.9.0-8-amd64", route_qdiscs={RECEIVER: "qdisc pfifo_fast 0: root"})
    (f,) = hostcheck.pacing(probed(sender=old).sender, Config("bbr", 1, None))
    assert (f.severity, f.fix) == ("problem", ["tc qdisc replace dev eth0 root fq"])
    (f,) = hostcheck.pacing(probed(sender=old).sender, DEFAULT)
    assert f.severity == "warning"


def test_mtu_small_or_mismatched_and_offloads_off():
    s = host_facts("s0", RECEIVER, mtus={RECEIVER: 1400})
    found = hostcheck.mtu(*(lambda p: (p.sender, p.receiver))(probed(sender=s)))
    assert [(f.severity, f.host, f.fix) for f in found] == [
        ("warning", "s0", ["ip link set dev eth0 mtu 1500"]),
        ("warning", "path", []),
    ]
    r = host_facts("r0", SENDER, offloads={"eth0": {"tso": True, "gso": False, "gro": False}})
    (f,) = hostcheck.offloads(probed(receiver=r).receiver, Q)
    assert (f.severity, f.fix) == ("warning", ["ethtool -K eth0 gso on gro on"])
    (f,) = hostcheck.offloads(probed(receiver=r).receiver, ask("20ms", "100Mbps", "1GB"))
    assert f.severity == "ok" and not f.fix  # 100 Mbit/s does not feel it


def test_one_stream_against_n_window_or_loss_limited():
    (f,) = hostcheck.streams(probed(one=sent(1, 300), many=sent(4, 900)).measured)
    assert f.severity == "warning" and "window-limited" in f.what
    found = hostcheck.streams(probed(one=sent(1, 300, retrans=5000), many=sent(4, 900)).measured)
    assert "loss limits a single stream" in found[0].what
    assert [f.severity for f in found[1:]] == ["ok"] and "5000 segment(s) retransmitted" in found[1].what
    assert hostcheck.streams(probed(one=sent(1, 800), many=sent(4, 900)).measured) == []


def test_device_names_from_a_host_are_quoted_in_the_fixes():
    """A host's own output names the devices: a fix line never carries one unquoted."""
    dev = "eth0;touch /tmp/x"
    s = host_facts("s0", RECEIVER, mtus={RECEIVER: 1400}, route_qdiscs={RECEIVER: "qdisc htb 1: root"})
    s.routes[RECEIVER]["get"]["dev"] = dev
    s.offloads = {dev: {"tso": False, "gso": True, "gro": True}}
    s.kernel = "4.4.0"
    p = probed(sender=s)
    lines = [line for f in hostcheck.mtu(p.sender, p.receiver) + hostcheck.offloads(p.sender, Q) for line in f.fix]
    lines += hostcheck.pacing(p.sender, DEFAULT)[0].fix
    assert len(lines) == 3
    for line in lines:
        assert shlex.quote(dev) in line and dev in shlex.split(line)


def test_the_new_facts_are_read_by_index():
    text = "\n".join(
        [
            "sysctl.net.core.rmem_max=212992",
            "sysctl.net.ipv4.tcp_allowed_congestion_control=reno cubic",
            "route.0=10.0.0.2 via 10.0.0.254 dev eth1 src 10.0.0.1 uid 0",
            "mtu.0=9000",
            "rqdisc.0=qdisc fq 8001: root refcnt 2",
            "mtu.1=1500",
            "mtu.x=1",
        ]
    )
    f = facts.parse("s0", text, ["10.0.0.2"])
    assert f.mtus == {"10.0.0.2": 9000} and f.route_qdiscs == {"10.0.0.2": "qdisc fq 8001: root refcnt 2"}
    assert f.sysctls["net.core.rmem_max"] == "212992"
    script = facts.script(["10.0.0.2"], [], ["bbr"])
    assert "mtu.0=" in script and "rqdisc.0=" in script and "/proc/sys/net/core/rmem_max" in script


def trace(rows, completion=4.0, bytes_=50_000_000):
    return {"run": {"bytes": bytes_, "completion_time": completion, "encrypted": True}, "goodput": rows, "tcp": []}


def test_steady_goodput_leaves_out_the_intervals_before_and_of_slow_start():
    rows = [{"t": 0.25, "flow_id": 0, "bytes": 0}, {"t": 0.5, "flow_id": 0, "bytes": 100}]
    rows += [{"t": 0.5 + 0.25 * k, "flow_id": f, "bytes": 1_000_000} for k in range(1, 5) for f in (0, 1)]
    assert probe.steady_bps(trace(rows)) == pytest.approx(8 * 8e6 / 1.0)
    short = [{"t": 0.25, "flow_id": 0, "bytes": 1}, {"t": 0.5, "flow_id": 0, "bytes": 1}]
    assert probe.steady_bps(trace(short, completion=2.0, bytes_=1_000_000)) == pytest.approx(4e6)


def test_a_trace_s_retransmissions_per_stream_add_up():
    doc = trace([])
    doc["tcp"] = [
        {"t": 0.5, "flow_id": 0, "retransmissions": 3, "srtt_ms": 21.0},
        {"t": 1.0, "flow_id": 0, "retransmissions": 7, "srtt_ms": 30.0},
        {"t": 1.0, "flow_id": 1, "retransmissions": 2, "srtt_ms": 20.5},
    ]
    t = probe.transfer(doc, 2, "cubic")
    assert (t.retransmissions, t.srtt_ms_min, t.srtt_ms_max, t.encrypted) == (9, 20.5, 30.0, True)
    assert t.loss == pytest.approx(9 / -(-50_000_000 // 1448))


def test_a_ladder_grows_at_least_twofold_toward_its_target():
    assert probe.next_volume(sent(1, 80), 1 << 20, 4.0) == 40_000_000
    assert probe.next_volume(sent(1, 0.001), 1 << 20, 4.0) == 2 << 20


def test_the_measured_goodput_is_the_bottleneck_s_r_tp():
    for rate in ("100Mbps", "10Gbps"):
        q = ask("20ms", rate, "1GB")
        assert rate_for_goodput(q.goodput_bps) == pytest.approx(q.bottleneck_bps)


# ----------------------------------------------------------------------------- the command line


def inventory(tmp_path, data_r0="10.0.0.2", workdir="/tmp") -> str:
    (tmp_path / "id").write_text("key")
    (tmp_path / "known").write_text("")
    data = {
        "defaults": {"key": "id", "known_hosts": "known"},
        "hosts": {"s0": {"ssh": "127.0.0.1", "data": "10.0.0.1"}, "r0": {"ssh": "127.0.0.1", "data": data_r0}},
        "senders": ["s0"],
        "receivers": ["r0"],
        "options": {"workdir": workdir},
    }
    p = tmp_path / "hosts.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def advise(args: list[str]):
    return CliRunner().invoke(cli.app, args, catch_exceptions=False)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--rtt", "20ms", "--bottleneck", "1Gbps"], "missing --volume (or --probe --inventory hosts.yaml"),
        (["--probe"], "--probe needs the hosts: --inventory hosts.yaml"),
        (["--inventory", "INV", "--rtt", "20ms", "--bottleneck", "1Gbps", "--volume", "1GB"], "--inventory is --probe's"),
        (["--probe", "--inventory", "INV", "--deadline", "1h"], "--deadline and --out are the advice's"),
        (["--probe", "--inventory", "INV", "--pair", "3"], "--pair 3: the inventory has 1 pair(s)"),
        (["--probe", "--inventory", "INV", "--probe-time", "1s"], "--probe-time 1s: must be from 5 s"),
    ],
)
def test_options_refused_before_any_host(tmp_path, args, says):
    inv = inventory(tmp_path)
    r = advise(["advise", *[inv if a == "INV" else a for a in args]])
    assert r.exit_code == 2 and says in r.output, r.output


@pytest.mark.parametrize(
    "field, value",
    [("data", "10.0.0.2; touch {m}"), ("data", "$(touch {m})"), ("workdir", "/tmp/`touch {m}`"), ("data", "10.0.0.2\ntouch {m}")],
)
def test_hostile_inventory_values_never_reach_a_shell(tmp_path, field, value):
    marker = tmp_path / "marker"
    v = value.format(m=marker)
    inv = inventory(tmp_path, data_r0=v) if field == "data" else inventory(tmp_path, workdir=v)
    r = advise(["advise", "--probe", "--inventory", inv])
    assert r.exit_code == 2 and "error:" in r.output and not marker.exists(), r.output
