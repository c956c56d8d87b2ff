"""The ssh backend's pieces that need no host: the inventory's errors, clock arithmetic, the
journal's undo script, facts and link-log parsing, the plan's refusals."""

import asyncio
import json
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from xferlab import scenario as sc
from xferlab.backends import netns, ssh
from xferlab.remote import clock, facts, journal, launch, plan, statedir
from xferlab.remote.inventory import InventoryError, load
from xferlab.remote.shell import RemoteError


def write(tmp_path, data, name="hosts.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def good(tmp_path):
    (tmp_path / "id").write_text("key")
    (tmp_path / "known").write_text("")
    return {
        "defaults": {"key": "id", "known_hosts": "known"},
        "hosts": {"s0": {"ssh": "h1", "data": "10.0.0.1"}, "r0": {"ssh": "h2", "data": "10.0.0.2"}},
        "senders": ["s0"],
        "receivers": ["r0"],
    }


def test_a_good_inventory_takes_defaults_and_paths_relative_to_it(tmp_path):
    inv = load(write(tmp_path, good(tmp_path)))
    assert inv.hosts["s0"].key == tmp_path / "id" and inv.hosts["r0"].user == "root" and inv.hosts["r0"].port == 22
    assert inv.used(1) == ["s0", "r0"] and inv.options.calibration == 2.0


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda d: d["hosts"]["s0"].update(data="not-an-ip"), "hosts.s0.data: not an IP address"),
        (lambda d: d.update(senders=["s9"]), "senders.0: 's9' is not in hosts"),
        (lambda d: d["defaults"].update(key="missing"), "hosts.s0.key: no such file"),
        (lambda d: d["hosts"]["s0"].update(fingerprint="MD5:xx"), "hosts.s0.fingerprint: not a valid value"),
        (lambda d: d.update(router={"host": "s0", "bottleneck": "eth1"}), "router.host: 's0' is also a sender"),
        (lambda d: d.update(options={"calibration": "soon"}), "options.calibration: expected a time"),
        (lambda d: d.update(colour="blue"), "colour: unknown field"),
        (lambda d: d.update(receivers=["r0", "s0"]), "1 sender(s) for 2 receiver(s)"),
    ],
)
def test_a_bad_inventory_is_refused_naming_the_field(tmp_path, change, said):
    data = good(tmp_path)
    change(data)
    with pytest.raises(InventoryError, match=said.replace("(", r"\(").replace(")", r"\)")):
        load(write(tmp_path, data))


def test_the_cli_refuses_a_bad_inventory_in_one_line(cli, tmp_path, small_scenario):
    data = good(tmp_path)
    data["hosts"]["r0"]["data"] = "10.0.0.300"
    r = cli("run", small_scenario(), "--backend", "ssh", "--inventory", write(tmp_path, data), "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "error:" in r.stderr and "hosts.r0.data: not an IP address: '10.0.0.300'" in r.stderr
    r = cli("run", small_scenario(), "--backend", "ssh", "-q")
    assert r.returncode == 2 and "--backend ssh needs --inventory" in r.stderr
    r = cli("cleanup", "--inventory", tmp_path / "nothing.yaml")
    assert r.returncode == 2 and "no such file" in r.stderr


def test_clock_offset_is_the_fastest_probe_and_start_times_follow_it():
    now = iter([100, 300, 1000, 1100, 5000, 5600])  # round trips of 200, 100, 600 ns

    answers = iter(["3000000200", "3000001040", "3000005000"])  # the host's clock: 3 s ahead

    async def ask():
        return next(answers)

    off = asyncio.run(clock.measure(ask, 3, now_ns=lambda: next(now)))
    # the second probe (1000 → 1100 ns, read 3 000 001 040): offset = 3e9 + 1040 − 1050
    assert off.offset_s == pytest.approx((3_000_001_040 - 1050) / 1e9) and off.uncertainty_s == pytest.approx(50e-9)
    at = clock.host_time_ns(10**18, 2.5, off)
    assert at - 10**18 == 2_500_000_000 + 2_999_999_990
    assert clock.start_error_s(at + 1_000_000, 10**18, 2.5, off) == pytest.approx(1e-3)


def test_the_journal_undoes_newest_first_and_names_what_failed():
    j = journal.new("s0", "0123abcd")
    j["entries"] = [
        journal.workdir("/tmp/xferlab-ssh-0123abcd-s0"),
        journal.sysctl("net.ipv4.tcp_rmem", "4096 131072 6291456"),
        journal.route("10.0.0.2", None),
        journal.qdisc("eth1"),
    ]
    script = journal.undo_script(j).splitlines()
    assert script[0].startswith("{ [ ! -e /sys/class/net/eth1 ] || tc qdisc del dev eth1 root")
    assert "printf '%s\\n' '4096 131072 6291456' > /proc/sys/net/ipv4/tcp_rmem" in script[2]
    assert script[3].startswith("{ for f in /tmp/xferlab-ssh-0123abcd-s0/*.pid")
    assert "rm -rf -- /tmp/xferlab-ssh-0123abcd-s0" in script[3]
    out = f'{journal.FAILED} {{"kind": "qdisc"}}\nother\n'
    assert journal.failures(out) == ['{"kind": "qdisc"}']
    assert journal.loads(journal.dumps(j)) == j
    with pytest.raises(journal.JournalError, match="not JSON"):
        journal.loads("")


def test_a_journal_cut_short_on_its_way_is_never_put_in_place(tmp_path):
    """A run cancelled mid-heartbeat closes its channel: the host's ``cat`` then reads a short
    stdin and ends normally. That once put an empty journal in place, which every later run and
    `cleanup` refused ("not JSON"). A take or an update whose journal arrived short changes
    nothing and says why."""
    state = tmp_path / "state"

    def sh(script: str, stdin: str) -> statedir.Found:
        p = subprocess.run(["sh", "-c", script], input=stdin, capture_output=True, text=True, timeout=30)
        return statedir.parse(p.stdout)

    j = journal.new("h", "0123abcd")
    text = journal.dumps(j)
    for short in ("", text[: len(text) // 2]):
        found = sh(statedir.take_script(str(state), len(text)), short)
        assert (found.status, found.why) == ("refused", "the journal arrived cut short")
        assert list(state.iterdir()) == []  # no journal, no temporary file left
    assert sh(statedir.take_script(str(state), len(text)), text).status == "taken"
    (held,) = state.iterdir()
    j["entries"].append(journal.sysctl("net.ipv4.tcp_no_metrics_save", "0"))
    longer = journal.dumps(j)
    found = sh(statedir.update_script(str(state), "0123abcd", len(longer)), longer[:10])
    assert (found.status, found.why) == ("refused", "the journal arrived cut short")
    assert journal.loads(held.read_text())["entries"] == []
    assert sh(statedir.update_script(str(state), "0123abcd", len(longer)), longer).status == "updated"
    assert journal.loads(held.read_text())["entries"] == j["entries"] and list(state.iterdir()) == [held]


def test_a_refused_state_folder_is_said_after_the_journal_was_read(tmp_path):
    """A take refused by the folder rule once exited before reading the journal on its
    stdin: the controller's write then met a closed channel, and the run said "the
    connection was lost" instead of why the folder was refused (a CI failure). The script
    reads its stdin whole whatever it answers: a megabyte written to it never breaks the
    pipe."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    text = journal.dumps(journal.new("h", "0123abcd")) + " " * (1 << 20)
    for script in (
        statedir.take_script(str(tmp_path / "link"), len(text)),
        statedir.update_script(str(tmp_path / "link"), "0123abcd", len(text)),
    ):
        p = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        p.stdin.write(text)  # a BrokenPipeError here: the script left without reading
        p.stdin.close()
        found = statedir.parse(p.stdout.read())
        assert p.wait(timeout=30) == 0
        assert found.status == "refused" and "is a symbolic link" in found.why, found


def test_facts_and_the_plan_of_a_router_with_a_configured_qdisc():
    text = "\n".join(
        [
            "kernel=6.1.0",
            "tool.tc=/usr/sbin/tc",
            "sysctl.net.ipv4.tcp_rmem=4096 131072 6291456",
            "sysctl.net.ipv4.tcp_wmem=4096 16384 4194304",
            "sysctl.net.ipv4.tcp_no_metrics_save=0",
            "sysctl.net.ipv4.tcp_available_congestion_control=reno cubic",
            "route.0=10.0.0.2 via 10.0.1.254 dev eth0 src 10.0.1.1 uid 0",
            "exact.0=",
            "qdisc.0=qdisc fq_codel 0: root refcnt 2 limit 10240p",
            "qdisc.1=qdisc htb 1: root refcnt 2 r2q 10 default 0x1",
            "offload.eth1.generic-segmentation-offload=on",
        ]
    )
    f = facts.parse("h", text, ["10.0.0.2"], ["eth1", "eth2"])
    assert f.routes["10.0.0.2"] == {"get": {"via": "10.0.1.254", "dev": "eth0", "src": "10.0.1.1"}, "exact": None}
    needs = plan.Needs(sock_buf_bytes=8 << 20, congestion_controls=["cubic"], peers=["10.0.0.2"], quickack=True)
    whats = [c.what for c in plan.changes(f, needs, modprobe=False)]
    assert whats == [
        "net.ipv4.tcp_rmem = 4096 131072 8388608",
        "net.ipv4.tcp_wmem = 4096 16384 8388608",
        "net.ipv4.tcp_no_metrics_save = 1",
        "route to 10.0.0.2: initcwnd 10, rto_min 200 ms, quickack",
    ]
    # A window cap sets the receive buffer's limit exactly, even below the host's 6 MiB;
    # the send buffer's is only raised.
    capped = plan.Needs(sock_buf_bytes=1 << 20, rcv_buf_bytes=830_617)
    assert [c.what for c in plan.changes(f, capped, modprobe=False)] == ["net.ipv4.tcp_rmem = 4096 131072 830617"]
    shaping = plan.Shaping("eth1", 1e8, 30280, 100, 1514, 24)
    changes = plan.changes(f, plan.Needs(shaping=[shaping]), modprobe=False)
    assert [c.undo for c in changes] == [journal.offloads("eth1", ["gso"]), journal.qdisc("eth1")]
    with pytest.raises(plan.PlanError, match="eth2 has a qdisc configured"):
        plan.changes(f, plan.Needs(shaping=[plan.Shaping("eth2", 1e8, 30280, 100, 1514, 24)]), modprobe=False)
    with pytest.raises(plan.PlanError, match="congestion control bbr is not available"):
        plan.changes(f, plan.Needs(congestion_controls=["bbr"]), modprobe=True)


def test_link_log_and_status_parsing():
    log = "\n".join(
        [
            "S 1000 35000 right 10000 htb 999 9 0 0 0",
            "S 1000 35000 right 100000 pfifo 3028 2 1 1 1514",
            "S 1000 35000 left 100000 pfifo 100 1 0 0 0",
            "S 2000 41000 right 100000 pfifo 6056 4 1 0 0",
            "S 3000 41000 right 100000 pfifo 90",  # cut off by the sampler's stop
        ]
    )
    assert launch.parse_link_log(log) == [
        (
            1000,
            {
                "right": {"bytes": 3028, "packets": 2, "drops": 1, "qlen": 1},
                "left": {"bytes": 100, "packets": 1, "drops": 0, "qlen": 0},
            },
        ),
        (2000, {"right": {"bytes": 6056, "packets": 4, "drops": 1, "qlen": 0}}),
    ]
    assert launch.parse_status("flow0 0 123\nflow1 -15 456\nnoise") == {"flow0": (0, 123), "flow1": (-15, 456)}


def test_a_static_xfer_is_deployed_when_there_is_one(monkeypatch, tmp_path):
    static = tmp_path / "xfer-musl"
    static.write_bytes(b"\x7fELF")
    monkeypatch.setenv("XFERLAB_XFER_STATIC", str(static))
    assert netns.deployable_xfer() == (str(static), True)
    monkeypatch.delenv("XFERLAB_XFER_STATIC")
    monkeypatch.setattr(netns, "STATIC_XFER", tmp_path / "nowhere")
    monkeypatch.setenv("XFERLAB_XFER", "/opt/xfer-glibc")
    assert netns.deployable_xfer() == ("/opt/xfer-glibc", False)


# ---------------------------------------------------------------------------------------------
# Per-flow token buckets: the plan's commands run for real in two namespaces made here


def _sh(*args: str, ns: str | None = None, stdin: str | None = None) -> str:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"{cmd}: {p.stderr}"
    return p.stdout


def _goodput_mbps(a: str, b: str, port: int) -> float:
    """An iperf3 flow a → b:port for 3 s (the first omitted): the receiver's goodput."""
    server = subprocess.Popen(["ip", "netns", "exec", b, "iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):  # until it listens
            if f":{port} " in _sh("ss", "-ltnH", ns=b):
                break
            time.sleep(0.05)
        out = json.loads(_sh("iperf3", "-c", "10.203.0.2", "-p", str(port), "-t", "3", "-O", "1", "-J", "-C", "cubic", ns=a))
        return out["end"]["sum_received"]["bits_per_second"] / 1e6
    finally:
        server.wait(timeout=30)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("iperf3") is None, reason="needs root and iperf3")
def test_a_token_bucket_holds_its_flow_alone_and_is_undone():
    """Two namespaces joined by a veth with a 200 Mbit/s root HTB (a NIC's qdisc, which the
    buckets must leave alone): the planned changes (from the facts the script reads there) hold
    the flow to port 5301 to its 20 Mbit/s bucket and leave port 5302 free; the journal's undo
    script removes them, and the root HTB is still there."""
    pid = os.getpid()
    a, b, va, vb = f"xltb-{pid}-a", f"xltb-{pid}-b", f"xltba{pid}", f"xltbb{pid}"
    try:
        for ns in (a, b):
            _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", va, "netns", a, "type", "veth", "peer", "name", vb, "netns", b)
        for ns, dev, addr in ((a, va, "10.203.0.1/24"), (b, vb, "10.203.0.2/24")):
            _sh("ip", "addr", "add", addr, "dev", dev, ns=ns)
            _sh("ip", "link", "set", dev, "up", ns=ns)
            _sh("ip", "link", "set", "lo", "up", ns=ns)
        root = "tc qdisc add dev {0} root handle 1: htb default 1 && tc class add dev {0} parent 1: classid 1:1 htb rate 200mbit"
        _sh("sh", "-c", root.format(va), ns=a)
        f = facts.parse(a, _sh("sh", ns=a, stdin=facts.script(["10.203.0.2"], [], [])), ["10.203.0.2"])
        assert f.routes["10.203.0.2"]["get"]["dev"] == va and f.hooks == {va: 0} and not f.ifbs
        bucket = plan.Bucket("10.203.0.2", 5301, 20e6, 20_000_000 // 8 // 250 + 1514, 1514, 1000)
        changes = plan.changes(f, plan.Needs(buckets=[bucket]), modprobe=False)
        assert [c.undo for c in changes] == [journal.link(plan.IFB), journal.clsact(va)]
        j = journal.new("s0", "0000beef")
        j["entries"] = [c.undo for c in changes]
        _sh("sh", "-c", " && ".join(c.command for c in changes), ns=a)
        again = facts.parse(a, _sh("sh", ns=a, stdin=facts.script(["10.203.0.2"], [], [])), ["10.203.0.2"])
        with pytest.raises(plan.PlanError, match="a device xl-ifb exists already"):
            plan.changes(again, plan.Needs(buckets=[bucket]), modprobe=False)
        limited, free = _goodput_mbps(a, b, 5301), _goodput_mbps(a, b, 5302)
        print(f"\nthrough the 20 Mbit/s bucket: {limited:.2f} Mbit/s; the other port: {free:.1f} Mbit/s")
        # The bucket counts qdisc frames (1 514 bytes per 1 448 of payload): 19.1 Mbit/s of goodput.
        assert 15 < limited <= 20, (limited, free)
        assert free > 4 * limited, (limited, free)
        assert journal.failures(_sh("sh", ns=a, stdin=journal.undo_script(j))) == []
        after = facts.parse(a, _sh("sh", ns=a, stdin=facts.script(["10.203.0.2"], [va], [])), ["10.203.0.2"], [va])
        assert after.hooks == {va: 0} and not after.ifbs and after.qdiscs[va].startswith("qdisc htb 1: root")
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_a_token_bucket_is_refused_where_it_could_not_be_undone():
    text = "tool.tc=/usr/sbin/tc\nroute.0=10.0.0.2 dev eth0 src 10.0.0.1\nhooks.eth0=1\nifb=ifb0"
    b4 = plan.Bucket("10.0.0.2", 5201, 1e7, 6514, 1514, 1000)
    with pytest.raises(plan.PlanError, match="eth0 has a clsact or ingress qdisc configured"):
        plan.changes(facts.parse("s0", text, ["10.0.0.2"]), plan.Needs(buckets=[b4]), modprobe=False)
    without_tc = facts.parse("s0", text.replace("tool.tc=/usr/sbin/tc\n", ""), ["10.0.0.2"])
    with pytest.raises(plan.PlanError, match="need tc, which the host lacks"):
        plan.changes(without_tc, plan.Needs(buckets=[b4]), modprobe=False)
    v6 = "tool.tc=/usr/sbin/tc\nroute.0=fd00::2 dev eth1 src fd00::1"
    v6_bucket = plan.Bucket("fd00::2", 5202, 1e7, 6514, 1514, 1000)
    (ifb, redirect) = plan.changes(facts.parse("s0", v6, ["fd00::2"]), plan.Needs(buckets=[v6_bucket]), modprobe=False)
    assert "protocol ipv6 prio 1 u32 match ip6 dport 5202 0xffff flowid 1:100" in ifb.command
    assert redirect.command.startswith("tc qdisc add dev eth1 clsact && tc filter add dev eth1 egress protocol ipv6")


def test_the_backend_plans_a_bucket_on_the_sender_of_each_limited_flow(tmp_path, small_scenario):
    s, _ = sc.load(small_scenario(topology={"pairs": 1}, protocol={"rate_limit": "30Mbps", "limiter": "token_bucket"}), [])
    r = sc.resolve(s)
    run = ssh._Run(load(write(tmp_path, good(tmp_path))), "hosts.yaml", r, None)
    needs = run._needs()
    lim = r["flows"][0]["limiter"]
    assert needs["s0"].buckets == [plan.Bucket("10.0.0.2", 5201, lim["rate_bps"], lim["burst_bytes"], 1514, 1000)]
    assert needs["r0"].buckets == [] and lim["rate_bps"] == 30e6  # rate_limit counts qdisc frames


def _catches_term(pid_file: Path, tool: str) -> bool:
    """Whether a process of the group led by the pid in ``pid_file`` runs ``tool`` with a
    SIGTERM handler set (/proc/PID/status SigCgt)."""
    try:
        pgid = int(pid_file.read_text())
    except (OSError, ValueError):
        return False
    for d in Path("/proc").iterdir():
        try:
            if not d.name.isdigit() or int((d / "stat").read_text().rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            if tool not in (d / "cmdline").read_bytes().decode(errors="replace"):
                continue
            status = (d / "status").read_text().splitlines()
            caught = int(next(x for x in status if x.startswith("SigCgt:")).split()[1], 16)
        except (OSError, ValueError, IndexError, StopIteration):
            continue
        if caught & (1 << (signal.SIGTERM - 1)):
            return True
    return False


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_the_run_s_processes_are_found_signalled_and_killed_in_any_login_shell(tmp_path, shell):
    """The commands the backend sends run in the host user's login shell: dash (/bin/sh on
    Debian) refuses ``kill -TERM -- -PGID``, which once left every process running there. A
    source started as the backend starts it stops at SIGTERM with its totals written; a
    process that ignores TERM goes with the journal's KILL."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell}")
    w = str(tmp_path)

    def run(cmd: str) -> str:
        return subprocess.run([shell, "-c", cmd], capture_output=True, text=True, timeout=30).stdout

    xfer = netns.xfer_binary()
    src = {"rate_bps": 1e6, "mean_on_s": 1.0, "mean_off_s": 1.0}
    run(launch.timed(w, "bg0", None, netns.onoff_args(xfer, "127.0.0.1:9", src, 1500, 1, 60)))
    run(launch.timed(w, "deaf", None, ["sh", "-c", "trap '' TERM; sleep 60"]))
    deadline = time.monotonic() + 10
    # The source must be running, its TERM handler set, before the TERM: on a loaded
    # machine the group exists (its leader shell) well before the tool has started.
    while run(launch.alive(w, ["bg0", "deaf"])).split() != ["bg0", "deaf"] or not _catches_term(tmp_path / "bg0.pid", "xfer"):
        assert time.monotonic() < deadline, "the processes did not start"
        time.sleep(0.05)
    run(launch.signal_group(w, "bg0") + "; " + launch.signal_group(w, "deaf"))
    deadline = time.monotonic() + 10
    while "bg0" in run(launch.alive(w, ["bg0"])).split():
        assert time.monotonic() < deadline, f"{shell}: SIGTERM did not stop the source"
        time.sleep(0.05)
    assert json.loads((tmp_path / "bg0.out").read_text())["packets"] >= 0
    assert run(launch.alive(w, ["deaf"])).split() == ["deaf"]  # it ignores TERM
    run(journal.stop_processes(w, "KILL"))
    deadline = time.monotonic() + 10
    while run(launch.alive(w, ["bg0", "deaf"])).split():
        assert time.monotonic() < deadline, f"{shell}: the journal's KILL left a process"
        time.sleep(0.05)


def _inventory(tmp_path, pairs: int, router: bool = False) -> str:
    data = good(tmp_path)
    data["hosts"] = {f"{r}{k}": {"ssh": f"h{r}{k}", "data": f"10.0.{int(r == 'r')}.{k + 1}"} for r in "sr" for k in range(pairs)}
    data["senders"], data["receivers"] = [f"s{k}" for k in range(pairs)], [f"r{k}" for k in range(pairs)]
    if router:
        data["hosts"]["gw"] = {"ssh": "hgw", "data": "10.0.9.1"}
        data["router"] = {"host": "gw", "bottleneck": "eth1", "reverse": "eth0"}
    return write(tmp_path, data)


@pytest.mark.parametrize(
    "pairs, reverse, placed, shared",
    [
        (2, 5, [(2, 2), (1, 1), (0, 0), (1, 1), (0, 0)], True),  # a pair of its own, then the scenario's
        (1, 2, [(1, 1), (2, 2)], False),  # the inventory's pairs after the scenario's: one each
    ],
)
def test_reverse_sources_run_on_inventory_pairs_receiver_to_sender(tmp_path, small_scenario, pairs, reverse, placed, shared):
    """`--set workload.reverse=5` crashed (IndexError), and with one pair (KeyError 'r1')."""
    s, _ = sc.load(small_scenario(topology={"pairs": pairs, "access_rate": "1Gbps"}, workload={"reverse": reverse}), [])
    r = sc.resolve(s)
    run = ssh._Run(load(_inventory(tmp_path, 3)), "hosts.yaml", r, None)
    rev = [f for f in run.flows if not f.transfer]
    assert len(rev) == len(placed) and [(f.src, f.dst) for f in rev] == [(f"r{a}", f"s{b}") for a, b in placed]
    assert set(run.bed.names) >= {f.src for f in run.flows} | {f.dst for f in run.flows}
    assert any("reverse source(s) run on the scenario's own pairs" in w for w in run.warnings) == shared
    run._needs()  # every host the flows use has its needs


def test_a_path_faster_than_its_bottleneck_is_refused_when_a_router_should_shape_it(tmp_path, small_scenario):
    s, _ = sc.load(small_scenario(topology={"pairs": 1}), [])
    got = {"goodput_mbps": 339.7, "expected_mbps": 190.0, "rtt_ms": 10.0, "expected_rtt_ms": 10.0}
    routed = ssh._Run(load(_inventory(tmp_path, 1, router=True)), "hosts.yaml", sc.resolve(s), None)
    (problem,) = routed._judge(0, got)
    assert "more than the 190.0 its bottleneck allows" in problem and "leaves gw by eth1" in problem
    alone = ssh._Run(load(_inventory(tmp_path, 1)), "hosts.yaml", sc.resolve(s), None)
    assert alone._judge(0, got) == [] and "nothing on the path holds it" in alone.warnings[-1]


def test_a_raised_socket_buffer_is_said_in_the_warnings():
    text = "sysctl.net.ipv4.tcp_rmem=4096 4096 4096\nsysctl.net.ipv4.tcp_wmem=4096 16384 4194304"
    changes = plan.changes(facts.parse("s0", text), plan.Needs(sock_buf_bytes=8 << 20), modprobe=False)
    said = ssh.buffer_warnings("s0", changes)
    assert said[0] == (
        "s0: net.ipv4.tcp_rmem was '4096 4096 4096', set to '4096 4096 8388608' for the run "
        "(the scenario's BDP and buffer need it); restored after"
    )
    assert len(said) == 2 and "tcp_wmem was '4096 16384 4194304'" in said[1]


def test_a_failed_collect_leaves_no_logs_folder_on_the_controller(tmp_path, small_scenario, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    s, _ = sc.load(small_scenario(topology={"pairs": 1}), [])
    run = ssh._Run(load(_inventory(tmp_path, 1)), "hosts.yaml", sc.resolve(s), None)

    async def lost(*_):
        raise RemoteError("r0: the connection was lost")

    for h in run.bed.hosts.values():
        monkeypatch.setattr(h, "read_bytes", lost)
    with pytest.raises(RemoteError):
        asyncio.run(run.collect(ssh._Measured()))
    assert not list(tmp_path.glob("xferlab-ssh-logs-*")) and run.logs is None


def test_every_host_runs_the_same_xfer_its_own_only_where_all_have_one(tmp_path, small_scenario):
    """Two builds may speak different protocols (3 since encryption): where one host of a
    volume transfer lacks xfer, this build goes to both, not only to the one lacking it."""
    s, _ = sc.load(small_scenario(topology={"pairs": 1}, workload={"duration": None, "volume": "1MB"}), [])
    tools = {t: f"/usr/bin/{t}" for t in (*facts.TOOLS, "iperf3")}
    arch = platform.machine()
    for r0_has, want in ((True, "/usr/local/bin/xfer"), (False, None)):
        run = ssh._Run(load(_inventory(tmp_path, 1)), "hosts.yaml", sc.resolve(s), None)
        run.facts = {
            "s0": facts.Facts("s0", arch=arch, tools={**tools, "xfer": "/usr/local/bin/xfer"}),
            "r0": facts.Facts("r0", arch=arch, tools={**tools, **({"xfer": "/usr/local/bin/xfer"} if r0_has else {})}),
        }
        run._check_tools()
        for h in ("s0", "r0"):
            assert run.xfer[h] == (want or f"{run.bed.workdir(h)}/xfer"), (r0_has, h, run.xfer)
