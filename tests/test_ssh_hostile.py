"""The ssh backend against hostile input: inventories, journals, state folders and scenario
strings that try to run a command as root, and a second run or a cleanup that would undo a
live run (issue 48, items 1–4).

The fast part feeds a corpus of hostile values to the parsers (every one must be refused
before anything is sent to a host). The slow part runs the CLI on a testbed of namespace
hosts (tests/sshbed.py) with hostile inventories, journals planted where the backend keeps
them and state folders others own; every payload creates a file in a marker folder if it
ever runs, on any host or on the controller (the bed's hosts share this machine's files), and
the test fails if one appears.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sshbed
import yaml
from xferlab.remote import journal, statedir
from xferlab.remote.inventory import InventoryError, load

MARKERS = Path(os.environ.get("TMPDIR", "/tmp")) / f"xl-hostile-{os.getpid()}"


def payloads(tag: str) -> list[str]:
    """Shell that creates MARKERS/tag-N if it ever runs, in the forms an attacker would try."""
    m = f"{MARKERS}/{tag}"
    return [
        f"$(touch {m}-1)",
        f"`touch {m}-2`",
        f"x; touch {m}-3",
        f"x && touch {m}-4 #",
        f"x | touch {m}-5",
        f"x\ntouch {m}-6",
        f"'; touch {m}-7; '",
        f'"; touch {m}-8; "',
        f"x 2>/dev/null; id > {m}-9; true",
    ]


@pytest.fixture(autouse=True)
def markers():
    MARKERS.mkdir(exist_ok=True)
    yield MARKERS
    found = sorted(p.name for p in MARKERS.iterdir())
    for p in MARKERS.iterdir():
        p.unlink()
    MARKERS.rmdir()
    assert found == [], f"hostile input ran: {found}"


# ----------------------------------------------------------------------------- the parsers


def base_inventory(tmp_path) -> dict:
    (tmp_path / "id").write_text("key")
    (tmp_path / "known").write_text("")
    return {
        "defaults": {"key": "id", "known_hosts": "known"},
        "hosts": {
            "s0": {"ssh": "h1", "data": "10.0.0.1"},
            "r0": {"ssh": "h2", "data": "10.0.0.2"},
            "gw": {"ssh": "h3", "data": "10.0.0.254"},
        },
        "senders": ["s0"],
        "receivers": ["r0"],
        "router": {"host": "gw", "bottleneck": "eth1", "reverse": "eth0"},
    }


def _set(data: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    for p in parents:
        data = data.setdefault(p, {})
    data[last] = value


#: Where a hostile string could go in an inventory (each reaches a host's shell if accepted).
INVENTORY_FIELDS = [
    "hosts.s0.data",
    "hosts.s0.ssh",
    "hosts.s0.user",
    "defaults.user",
    "router.bottleneck",
    "router.reverse",
    "options.workdir",
    "options.state_dir",
]


def hostile_inventories(tmp_path):
    for field in INVENTORY_FIELDS:
        for value in payloads(field.replace(".", "_")) + [f"fe80::1%{p}" for p in payloads("scope")[:3]] + ["/tmp/../etc", "/"]:
            data = base_inventory(tmp_path)
            _set(data, field, value)
            yield field, value, data
    for value in payloads("name")[:4]:
        data = base_inventory(tmp_path)
        data["hosts"][value] = {"ssh": "h4", "data": "10.0.0.4"}
        yield "hosts.<name>", value, data


def test_every_hostile_inventory_value_is_refused_naming_its_field(tmp_path):
    refused = 0
    for field, value, data in hostile_inventories(tmp_path):
        (tmp_path / "inv.yaml").write_text(yaml.safe_dump(data))
        with pytest.raises(InventoryError) as e:
            load(tmp_path / "inv.yaml")
        where = field.replace("defaults.user", "hosts.s0.user").split(".<")[0]
        assert where in str(e.value), (field, value, str(e.value))
        refused += 1
    assert refused == len(INVENTORY_FIELDS) * 14 + 4
    # What is meant is still taken: an IPv6 link-local address with its zone, folders of plain names.
    data = base_inventory(tmp_path)
    data["hosts"]["s0"]["data"] = "fe80::1%eth0"
    data["options"] = {"workdir": "/srv/xferlab-runs", "state_dir": "/var/lib/xferlab/ssh"}
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(data))
    assert load(tmp_path / "inv.yaml").hosts["s0"].data == "fe80::1%eth0"


def journal_text(**changes) -> str:
    j = journal.new("s0", "0123abcd")
    j["entries"] = [journal.workdir("/tmp/xferlab-ssh-0123abcd-s0"), journal.route("10.0.0.2", None)]
    for k, v in changes.items():
        j[k] = v
    return json.dumps(j)


def hostile_journals() -> list[tuple[str, str]]:
    """(what, text): journals no run of xferlab writes, each carrying a payload where a naive
    undo would put it into a shell command."""
    out = []
    for i, p in enumerate(payloads("journal")):
        route = {"kind": "route", "dst": "10.9.9.9", "previous": p}  # the issue's: a string pasted after `ip route replace`
        words = {"kind": "route", "dst": "10.9.9.9", "previous": ["10.9.9.9", "via", p]}
        other_route = {"kind": "route", "dst": "10.9.9.9", "previous": ["0.0.0.0/0", "via", "10.9.9.1"]}
        out += [
            (f"route previous {i}", journal_text(entries=[route])),
            (f"route words {i}", journal_text(entries=[words])),
            (f"sysctl previous {i}", journal_text(entries=[{"kind": "sysctl", "key": "net.ipv4.tcp_rmem", "previous": p}])),
            (f"qdisc dev {i}", journal_text(entries=[{"kind": "qdisc", "dev": p}])),
            (f"module {i}", journal_text(entries=[{"kind": "module", "name": f"tcp_{p}"}])),
            (f"workdir {i}", journal_text(entries=[{"kind": "workdir", "path": f"/tmp/xferlab-ssh-0123abcd-{p}"}])),
            (f"run id {i}", journal_text(run=p)),
            (f"controller {i}", journal_text(controller=p)),
            (f"another host's route {i}", journal_text(entries=[other_route])),
        ]
    out += [
        (
            "a sysctl the backend never sets",
            journal_text(entries=[{"kind": "sysctl", "key": "kernel.core_pattern", "previous": "|/bin/sh"}]),
        ),
        ("the root folder", journal_text(entries=[{"kind": "workdir", "path": "/"}])),
        ("/etc", journal_text(entries=[{"kind": "workdir", "path": "/etc"}])),
        ("a folder up the tree", journal_text(entries=[{"kind": "workdir", "path": "/tmp/../xferlab-ssh-0123abcd-s0"}])),
        ("another device", journal_text(entries=[{"kind": "link", "name": "eth0"}])),
        ("an unknown kind", journal_text(entries=[{"kind": "shell", "command": "id"}])),
        ("an extra field", journal_text(entries=[{"kind": "qdisc", "dev": "eth0", "command": "id"}])),
        ("offloads of another kind", journal_text(entries=[{"kind": "offloads", "dev": "eth0", "features": ["tx; id"]}])),
        ("entries not a list", journal_text(entries="rm -rf /")),
        ("a pid as text", journal_text(pid="1")),
        ("a boolean pid", journal_text(pid=True)),
        ("binary", "\x00\xff\xfe{"),
        ("nested", "[" * 100_000 + "]" * 100_000),
        ("huge", journal_text(controller="x" * (2 << 20))),
        ("empty", ""),
        ("a list", "[]"),
    ]
    return out


def test_every_hostile_journal_is_refused_and_none_becomes_a_command():
    for what, text in hostile_journals():
        with pytest.raises(journal.JournalError, match="not a journal xferlab wrote|not JSON|bytes, not a journal"):
            journal.loads(text, what)
    # A journal xferlab wrote is taken back as it was, every undo of it quoted.
    good = journal.loads(journal_text())
    assert good["entries"][1] == {"kind": "route", "dst": "10.0.0.2", "previous": None}
    assert "ip route del 10.0.0.2/32" in journal.undo_script(good)


# ----------------------------------------------------------------------------- on the testbed

bed_needed = pytest.mark.skipif(sshbed.missing() is not None, reason=sshbed.missing() or "")


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    if sshbed.missing() is not None:
        pytest.skip(sshbed.missing())
    sshbed.remove_leftovers()
    with sshbed.Bed(pairs=1, access_bps=100e6, rtt_s=0.01) as b:
        b.journals = b.dir / "state"
        b.controller = b.dir / "controller"
        b.env = {**os.environ, "XFERLAB_SSH_STATE": str(b.controller)}
        b.inv = b.write_inventory(b.dir / "hosts.yaml", b.inventory(state_dir=str(b.journals), calibration="0"))
        b.pristine = b.state()
        yield b


def xferlab(bed, *args, env=None, **popen):
    command = [sys.executable, "-m", "xferlab.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env or bed.env, timeout=300, **popen)


def run_args(bed, tmp_path, label: str, inventory=None, duration="2s", **extra) -> list:
    data = {
        "name": extra.pop("name", label),
        "topology": {"pairs": 1, "access_rate": "100Mbps", "bottleneck_rate": "50Mbps", "rtt": "10ms", "buffer": "1bdp"},
        "workload": {"streams": 1, "duration": duration},
        "protocol": {"variant": "reno"},
        "measure": {"link_interval": "100ms"},
        **extra,
    }
    path = tmp_path / f"{label}.yaml"
    path.write_text(yaml.safe_dump(data))
    return ["run", path, "--backend", "ssh", "--inventory", inventory or bed.inv, "--out", tmp_path / f"out-{label}", "-q"]


def plant(bed, host: str, text: str, state: Path | None = None) -> None:
    """Writes ``text`` where host's journal goes (as the host's own script names it), as root."""
    script = statedir.take_script(str(state or bed.journals), len(text.encode()))
    p = subprocess.run(["ip", "netns", "exec", bed.ns(host), "sh", "-c", script], input=text, capture_output=True, text=True)
    assert "taken=" in p.stdout, p.stdout + p.stderr


def clear(bed) -> None:
    for folder in (bed.journals, bed.controller):
        if folder.exists():
            for p in folder.iterdir():
                p.unlink()


@bed_needed
def test_the_issue_s_two_inventory_injections_run_nothing(bed, tmp_path):
    """`data: "fe80::1%$(id>>…)"` ran as root at pre-flight, `options.workdir: $(…)` at collect."""
    for field, value in (("data", f"fe80::1%$(id>>{MARKERS}/scope)"), ("workdir", f"/tmp/$(touch {MARKERS}/workdir)")):
        data = bed.inventory(state_dir=str(bed.journals), calibration="0")
        if field == "data":
            data["hosts"]["r0"]["data"] = value
        else:
            data["options"]["workdir"] = value
        inv = bed.write_inventory(tmp_path / f"{field}.yaml", data)
        for args in (run_args(bed, tmp_path, field, inv), ["cleanup", "--inventory", inv]):
            r = xferlab(bed, *args)
            assert r.returncode == 2 and "error:" in r.stderr and "internal error" not in r.stderr, r.stderr
    assert bed.state() == bed.pristine


@bed_needed
def test_hostile_scenario_strings_reach_no_shell(bed, tmp_path):
    """A scenario's name has a grammar of its own (refused here); a request's name goes with
    the run (run.json, the report), nowhere near a host's shell: the run completes as any other."""
    hostile = payloads("scenario")
    r = xferlab(bed, *run_args(bed, tmp_path, "named", name=hostile[0]))
    assert r.returncode == 2 and "name: String should match pattern" in r.stderr, r.stderr
    args = run_args(bed, tmp_path, "strings", requests=[{"volume": "2MB", "name": hostile[2]}])
    data = yaml.safe_load(Path(args[1]).read_text())
    data.pop("workload")
    Path(args[1]).write_text(yaml.safe_dump(data))
    r = xferlab(bed, *args)
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "out-strings" / "run.json").read_text())
    assert meta["resolved"]["plan"]["requests"][0]["name"] == hostile[2]
    assert bed.state() == bed.pristine


@bed_needed
def test_planted_journals_are_refused_by_run_and_cleanup_and_never_run(bed, tmp_path):
    corpus = [t for t in hostile_journals() if t[0].startswith(("route previous", "sysctl previous", "workdir", "a sysctl"))]
    corpus = corpus[:12]
    while corpus:  # a journal on each host at once: each one's refusal is said
        planted = dict(zip(bed.hosts, corpus, strict=False))
        corpus = corpus[len(planted) :]
        for host, (_, text) in planted.items():
            plant(bed, host, text)
        r = xferlab(bed, "cleanup", "--inventory", bed.inv)
        assert r.returncode == 1, (planted, r.stdout)
        for host, (what, _) in planted.items():
            assert f"could not restore {host}: " in r.stdout, (what, r.stdout)
        assert r.stdout.count("not a journal xferlab wrote") == len(planted), (planted, r.stdout)
        r = xferlab(bed, *run_args(bed, tmp_path, "planted"))
        refused = "not a journal xferlab wrote" in r.stderr and "remove it by hand" in r.stderr
        assert r.returncode == 2 and refused, (planted, r.stderr)
        clear(bed)
    assert bed.state() == bed.pristine


@bed_needed
def test_a_state_folder_others_own_or_can_write_is_refused(bed, tmp_path):
    """The issue's attack: `nobody` writes a journal whose route undo runs a command, and a
    link named like the journal's temporary file to a root-owned file."""
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    plant(bed, "s0", journal_text(entries=[{"kind": "route", "dst": "10.9.9.9", "previous": payloads("nobody")[-1]}]), theirs)
    for p in theirs.iterdir():
        os.symlink(victim, theirs / f"{p.name}.tmp")
        os.chown(p, 65534, 65534)
    os.chown(theirs, 65534, 65534)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(bed.journals)
    cases = [(theirs, "is owned by uid 65534"), (shared, "is writable by group or others"), (link, "is a symbolic link")]
    for folder, said in cases:
        inv = bed.write_inventory(tmp_path / "inv.yaml", bed.inventory(state_dir=str(folder), calibration="0"))
        r = xferlab(bed, "cleanup", "--inventory", inv)
        assert r.returncode == 1 and "its state folder cannot be used" in r.stdout and said in r.stdout, r.stdout
        r = xferlab(bed, *run_args(bed, tmp_path, "theirs", inv))
        assert r.returncode == 2 and said in r.stderr and "nothing was changed" not in r.stderr, r.stderr
    assert victim.read_text() == "root's file\n"
    assert bed.state() == bed.pristine


@bed_needed
def test_a_controller_state_folder_that_cannot_be_used_is_said_in_one_line(bed, tmp_path):
    shared = tmp_path / "ctl"
    shared.mkdir()
    shared.chmod(0o777)
    for folder, said in ((shared, "is writable by group or others"), (Path("/proc/xferlab"), "cannot be used")):
        r = xferlab(bed, *run_args(bed, tmp_path, "ctl"), env={**bed.env, "XFERLAB_SSH_STATE": str(folder)})
        assert r.returncode == 2 and said in r.stderr and "XFERLAB_SSH_STATE" in r.stderr, r.stderr
        assert "internal error" not in r.stderr
    assert bed.state() == bed.pristine


def _journals(bed) -> list[Path]:
    return sorted(bed.journals.glob("*.json")) if bed.journals.exists() else []


def _wait_taken(bed, p: subprocess.Popen, timeout: float = 120) -> str:
    """Until process ``p``'s run has configured its hosts (its journals have entries); its run id."""
    deadline = time.monotonic() + timeout
    while True:
        mine = [j for j in (journal.loads(f.read_text()) for f in _journals(bed)) if j["pid"] == p.pid and j["entries"]]
        if mine:
            return mine[0]["run"]
        assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.poll() is not None else "no journal"
        time.sleep(0.1)


def _start(bed, args) -> subprocess.Popen:
    command = [sys.executable, "-m", "xferlab.cli", *map(str, args)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=bed.env)


def _stop(p: subprocess.Popen) -> str:
    """SIGINT (the run restores its hosts), then its stderr."""
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    return p.communicate(timeout=240)[1]


@bed_needed
def test_a_second_run_and_a_cleanup_are_refused_while_a_run_holds_the_hosts(bed, tmp_path):
    first = _start(bed, run_args(bed, tmp_path, "first", duration="60s"))
    try:
        held = f"held by run {_wait_taken(bed, first)} of controller"
        r = xferlab(bed, *run_args(bed, tmp_path, "second"))
        assert r.returncode == 2 and held in r.stderr and f"(pid {first.pid})" in r.stderr, r.stderr
        # The same hosts under other names (another user's inventory): still held.
        data = bed.inventory(state_dir=str(bed.journals), calibration="0")
        data["hosts"] = {f"node-{h}": spec for h, spec in data["hosts"].items()}
        data.update(senders=["node-s0"], receivers=["node-r0"], router={**data["router"], "host": "node-rt"})
        renamed = bed.write_inventory(tmp_path / "renamed-hosts.yaml", data)
        r = xferlab(bed, *run_args(bed, tmp_path, "renamed", renamed))
        assert r.returncode == 2 and held in r.stderr, r.stderr
        r = xferlab(bed, "cleanup", "--inventory", bed.inv)
        assert r.returncode == 1 and held in r.stdout and "pass --force" in r.stdout, r.stdout
        assert first.poll() is None and bed.state() != bed.pristine  # the first run goes on, its bottleneck in place
    finally:
        err = _stop(first)
    assert first.returncode == 130, err
    assert _journals(bed) == [] and bed.state() == bed.pristine


@bed_needed
def test_cleanup_force_undoes_a_live_run_which_then_fails_instead_of_reporting(bed, tmp_path):
    live = _start(bed, run_args(bed, tmp_path, "live", duration="40s"))
    try:
        _wait_taken(bed, live)
        r = xferlab(bed, "cleanup", "--inventory", bed.inv, "--force")
        assert r.returncode == 0 and "restored rt" in r.stdout, r.stdout + r.stderr
        err = live.communicate(timeout=240)[1]
    finally:
        _stop(live)
    assert live.returncode == 2 and "this run's journal was taken away" in err, err
    assert not (tmp_path / "out-live").exists()
    assert _journals(bed) == [] and bed.state() == bed.pristine
