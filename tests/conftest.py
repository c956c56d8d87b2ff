import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


def xferlab(*args, cwd=None, check=False):
    """Runs the CLI as a user would, in a subprocess."""
    p = subprocess.run([sys.executable, "-m", "xferlab.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd)
    if check and p.returncode != 0:
        raise AssertionError(f"xferlab {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


@pytest.fixture
def cli():
    return xferlab


@pytest.fixture
def small_scenario(tmp_path):
    """A short 2-pair run writing its YAML into tmp_path."""

    def make(**sections):
        data = {
            "name": "small",
            "topology": {"pairs": 2, "access_rate": "1Gbps", "bottleneck_rate": "1Gbps", "rtt": "10ms", "buffer": "1.0bdp"},
            "workload": {"streams": 1, "duration": "3s"},
            "protocol": {"variant": "reno"},
            "seed": 7,
        }
        for k, v in sections.items():
            if isinstance(v, dict) and isinstance(data.get(k), dict):
                data[k].update(v)
            else:
                data[k] = v
        path = tmp_path / f"{data['name']}.yaml"
        path.write_text(json.dumps(data))
        return path

    return make


def synthetic_trace(
    goodput: dict[int, list[float]],
    interval=0.5,
    starts=None,
    ends=None,
    pairs=None,
    link_mbps=None,
    completion=None,
    volumes=None,
    resolved=None,
    tcp=None,
):
    """A hand-made Trace: flow i has goodput samples goodput[i] (Mbit/s) from t = 0; ``tcp``
    (optional): rows of the tcp table."""
    from xferlab.runinfo import Provenance
    from xferlab.trace import Trace

    ids = sorted(goodput)
    n = len(ids)
    starts = starts or [0.0] * n
    ends = ends or [interval * len(goodput[i]) for i in ids]
    pairs = pairs or ids
    flows = pa.table(
        {
            "flow_id": pa.array(ids, pa.uint32()),
            "pair": pa.array(pairs, pa.uint32()),
            "stream": pa.array([0] * n, pa.uint32()),
            "source": [f"s{p}" for p in pairs],
            "sink": [f"r{p}" for p in pairs],
            "variant": ["reno"] * n,
            "role": ["transfer"] * n,
            "start": starts,
            "end": ends,
            "bytes": pa.array([int(sum(goodput[i]) * 1e6 / 8 * interval) for i in ids], pa.uint64()),
            "volume_bytes": pa.array(volumes or [None] * n, pa.uint64()),
            "completion_time": pa.array(completion or [None] * n, pa.float64()),
            "segments_sent": pa.array([0] * n, pa.uint64()),
            "retransmissions": pa.array([3] * n, pa.uint64()),
            "fast_recoveries": pa.array([0] * n, pa.uint64()),
            "timeouts": pa.array([0] * n, pa.uint64()),
        }
    )
    t, fid, b, g = [], [], [], []
    for i in ids:
        for k, v in enumerate(goodput[i]):
            t.append(k * interval)
            fid.append(i)
            g.append(float(v))
            b.append(int(v * 1e6 / 8 * interval))
    gp = pa.table({"t": t, "flow_id": pa.array(fid, pa.uint32()), "bytes": pa.array(b, pa.uint64()), "goodput_mbps": g})
    link_mbps = link_mbps or []
    k = len(link_mbps)
    link = pa.table(
        {
            "t": [j * 0.5 for j in range(k)],
            "link": ["bottleneck"] * k,
            "bytes": pa.array([0] * k, pa.uint64()),
            "packets": pa.array([100] * k, pa.uint64()),
            "throughput_mbps": pa.array(link_mbps, pa.float64()),
            "drops": pa.array([2] * k, pa.uint64()),
            "losses": pa.array([0] * k, pa.uint64()),
            "queue_pkts": pa.array([10] * k, pa.uint32()),
            "queue_max_pkts": pa.array([5] * k, pa.uint32()),
        }
    )
    info = resolved if resolved is not None else resolved_for()
    info = {**info, "pairs": max(info.get("pairs", 0), len(set(pairs))), "streams": info.get("streams", 1)}
    tables = {"flows": flows, "goodput": gp, "link": link}
    if tcp:
        from xferlab.trace import table

        tables["tcp"] = table("tcp", tcp)
    return Trace.build(tables, info, Provenance(producer="test"), end_s=max(ends))


def resolved_for(**kw):
    """A resolved scenario (RunInfo) for a synthetic trace: 1 Gbit/s links, 10 ms."""
    base = {
        "name": "synthetic",
        "pairs": 2,
        "streams": 1,
        "variant": "reno",
        "mtu": 1500,
        "mss": 1448,
        "header_bytes": 52,
        "frame_overhead": 38,
        "goodput_interval_s": 0.5,
        "link_interval_s": 0.5,
        "access_rate_bps": 1e9,
        "bottleneck_rate_bps": 1e9,
        "rtt_s": 0.01,
        "bdp_packets": 833.3,
        "ideal_goodput_mbps": 941.48,
        "ideal_rates_mbps": {"r_eth": 0, "r_ip": 0, "r_tp": 0},
        "transfers": [],
        "volume_bytes": None,
        "window": "all",
    }
    base.update(kw)
    return base


# ----------------------------------------------------------------------------- two workers

#: The modules whose tests use this machine's network: namespaces, the ssh testbed, BPF
#: congestion controls, iptables, listeners on fixed ports, real transfers timed against the
#: clock. With pytest-xdist (``make test`` runs ``-n 2``) they are one unit of work, run one
#: at a time on one worker, while the other modules' tests run beside them a module at a time
#: (a module's fixtures are made once).
HOST_MODULES = {
    "test_ack_delays",
    "test_bpfcc",
    "test_bpfcc_delay",
    "test_fidelity",
    "test_netns",
    "test_netns_scaling",
    "test_qstats",
    "test_receiver_waits",
    "test_schedule_run",
    "test_ssh",
    "test_ssh_hostile",
    "test_ssh_probe",
    "test_ssh_units",
    "test_validation",
}


def unit_of_work(nodeid: str) -> str:
    """The unit a worker takes whole: "host" for the tests of :data:`HOST_MODULES`, else the module."""
    module = nodeid.split("::", 1)[0]
    return "host" if Path(module).stem in HOST_MODULES else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling  # only under pytest-xdist

    class HostApart(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of_work(nodeid)

    return HostApart(config, log)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "bed" in getattr(item, "fixturenames", ()):  # the ssh testbed: sshd per host, real runs
            item.add_marker(pytest.mark.slow)


# ----------------------------------------------------------------------------- skips are loud

#: Set by CI (.ci/run): every test must run, so a skip fails the session.
REQUIRE_ALL = bool(os.environ.get("XFERLAB_REQUIRE_ALL"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Skipped tests are listed at the very end, with their reasons and how to run them."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons = collections.Counter()
    for rep in skipped:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    tw = terminalreporter
    tw.write_sep("!", f"{len(skipped)} TEST(S) SKIPPED", red=True, bold=True)
    for reason, n in reasons.most_common():
        tw.write_line(f"  {n} × {reason}", red=True)
    tw.write_line("  to run them: `sudo make test` installs what they need (Debian/Ubuntu) and runs them as root", red=True)
    if REQUIRE_ALL:
        tw.write_line("  XFERLAB_REQUIRE_ALL is set: a skipped test fails the run", red=True, bold=True)


def pytest_sessionfinish(session, exitstatus):
    if REQUIRE_ALL and exitstatus == 0:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and reporter.stats.get("skipped"):
            session.exitstatus = 1
