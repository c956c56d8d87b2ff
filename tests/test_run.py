"""End to end, as a user runs it: scenario → simulator → run folder → report."""

import json

import pyarrow.parquet as pq
import pytest
from xferlab import engine, scenario


def test_run_folder_contents(cli, small_scenario, tmp_path):
    out = tmp_path / "run"
    p = cli("run", small_scenario(), "--out", out, check=True)
    assert "aggregate goodput" in p.stdout and str(out / "report.html") in p.stdout.replace("\n", "")
    run = json.loads((out / "run.json").read_text())
    for key in ("trace_version", "scenario", "resolved", "provenance", "backend", "seed", "versions", "wall_seconds"):
        assert key in run, key
    assert run["backend"] == "sim" and run["seed"] == 7 and run["provenance"]["stats"]["events"] > 0
    assert run["scenario"]["topology"]["rtt"] == "10ms"
    # The machine it ran on, which a run on real TCP measures too.
    assert run["host"]["cpu"] == engine.cpu_model() and run["host"]["cpus"] >= 1
    m = json.loads((out / "metrics.json").read_text())
    for key in (
        "aggregate_goodput_mbps",
        "flows",
        "transfers",
        "jain_index",
        "jain_index_per_transfer",
        "retransmissions",
        "bottleneck_drops",
        "ideal_goodput_mbps",
        "efficiency",
        "window",
    ):
        assert key in m, key
    for f in m["flows"]:
        assert {"flow_id", "pair", "mean_goodput_mbps", "std_goodput_mbps", "cov"} <= set(f)
    for t in ("flows", "goodput", "link", "tcp", "run"):
        assert (out / "trace" / f"{t}.parquet").exists()
    flows = pq.read_table(out / "trace" / "flows.parquet").to_pylist()
    assert len(flows) == 2 and all(f["bytes"] > 0 for f in flows)
    assert (out / "report.html").stat().st_size > 10_000
    # Two Reno flows share 1 Gbit/s: the aggregate is close to the ideal, shared fairly.
    ideal = m["ideal_goodput_mbps"]
    assert 0.9 * ideal < m["aggregate_goodput_mbps"] <= ideal * 1.01
    # Over the whole run nothing can beat the ideal (one interval may, by what the receivers
    # held back behind a loss in the interval before).
    seconds = max(f["end"] for f in flows) - min(f["start"] for f in flows)
    assert sum(f["bytes"] for f in flows) * 8 / 1e6 / seconds <= ideal * 1.0001
    assert not list(tmp_path.glob(".run.tmp*"))


def test_same_seed_gives_identical_trace_files(small_scenario, tmp_path):
    s, given = scenario.load(small_scenario(protocol={"variant": "reno"}, workload={"duration": "2s"}))
    engine.run(s, given, tmp_path / "a")
    engine.run(s, given, tmp_path / "b")
    for t in ("flows", "goodput", "link", "tcp"):
        a = (tmp_path / "a" / "trace" / f"{t}.parquet").read_bytes()
        b = (tmp_path / "b" / "trace" / f"{t}.parquet").read_bytes()
        assert a == b, t
    s2, given2 = scenario.load(small_scenario(), ["seed=8"])
    engine.run(s2, given2, tmp_path / "c")
    assert (tmp_path / "c" / "trace" / "flows.parquet").read_bytes() != (tmp_path / "a" / "trace" / "flows.parquet").read_bytes()


def test_volume_run_reports_completion_times(cli, small_scenario, tmp_path):
    path = small_scenario(name="vol", workload={"duration": None, "volume": "20MB", "streams": 2})
    out = tmp_path / "vol"
    cli("run", path, "--out", out, check=True)
    m = json.loads((out / "metrics.json").read_text())
    c = m["completion"]
    assert c["count"] == 2 and c["incomplete"] == 0
    # 20 MB each over a shared 1 Gbit/s: at least the ideal 2 × 20 MB / r_TP.
    assert c["makespan_s"] >= c["ideal_makespan_s"] > 0.3
    assert all(t["completion_time_s"] > 0 for t in m["transfers"])


def test_report_rerenders_from_stored_data(cli, small_scenario, tmp_path):
    out = tmp_path / "r"
    cli("run", small_scenario(), "--out", out, check=True)
    before = json.loads((out / "metrics.json").read_text())
    (out / "report.html").unlink()
    (out / "metrics.json").unlink()
    p = cli("report", out, check=True)
    assert (out / "report.html").exists()
    assert json.loads((out / "metrics.json").read_text()) == before
    assert "aggregate goodput" in p.stdout


@pytest.mark.parametrize(
    "override,words",
    [
        ("topology.colour=red", "topology.colour: unknown field"),
        ("topology.access_rate=10Gbs", "topology.access_rate"),
        ("topology.bottleneck_rate=-2Gbps", "topology.bottleneck_rate"),
        ("topology.buffer=0", "topology.buffer"),
        ("protocol.variant=vegas", "protocol.variant"),
        ("workload.volume=1GB", "workload: "),
    ],
)
def test_bad_input_exits_2_with_one_clear_message(cli, small_scenario, tmp_path, override, words):
    path = small_scenario()
    out = tmp_path / "never"
    p = cli("run", path, "--out", out, "--set", override)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    assert str(path) in p.stderr and words in p.stderr, p.stderr
    assert not out.exists() and not list(tmp_path.glob(".never*"))


def test_unimplemented_variant_and_existing_folder_are_clear_errors(cli, small_scenario, tmp_path):
    out = tmp_path / "x"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    p = cli("run", small_scenario(), "--out", out)
    assert p.returncode == 2 and "already exists" in p.stderr
    assert (out / "keep.txt").read_text() == "mine"
    p = cli("report", tmp_path / "nowhere")
    assert p.returncode == 2 and "no such folder" in p.stderr
    p = cli("report", out)
    assert p.returncode == 2 and "not a run folder" in p.stderr


def test_schema_and_check_commands(cli, small_scenario):
    p = cli("schema", check=True)
    assert json.loads(p.stdout)["title"] == "Scenario"
    p = cli("check", small_scenario(), "--set", "topology.rtt=100ms", check=True)
    r = json.loads(p.stdout)
    assert r["rtt_s"] == pytest.approx(0.1) and r["flows"] == 2
    p = cli("ideal", "1Gbps", check=True)
    assert "984.40" in p.stdout and "949.28" in p.stdout


def test_failure_mid_run_leaves_no_folder(small_scenario, tmp_path, monkeypatch):
    from xferlab import report

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report, "render", boom)
    s, given = scenario.load(small_scenario())
    with pytest.raises(RuntimeError):
        engine.run(s, given, tmp_path / "half")
    assert not (tmp_path / "half").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".half")]


def test_workload_model_runs_end_to_end(cli, small_scenario, tmp_path):
    """Mixed variants, a paced pair, reverse and background traffic in one run."""
    path = small_scenario(
        name="mixed",
        topology={"pairs": 2, "bottleneck_rate": "1Gbps", "buffer": 200},
        workload={
            "duration": "3s",
            "reverse": 0.5,
            "background": {"level": 0.1, "mean_on": "0.2s", "mean_off": "0.2s"},
            "per_pair": [{"variant": "cubic"}, {"variant": "reno", "rate_limit": "200Mbps"}],
        },
    )
    out = tmp_path / "mixed"
    cli("run", path, "--out", out, check=True)
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["variants"]) == {"cubic", "reno"}
    assert len(m["flows"]) == 2  # the reverse flow is not a transfer
    assert m["reverse_goodput_mbps"] > 0
    # The paced pair never exceeds its 200 Mbit/s of frames (in payload terms), and gets
    # most of it despite the background bursts.
    paced = next(f for f in m["flows"] if f["variant"] == "reno")
    limit = 200 * 1448 / 1514
    assert 0.8 * limit < paced["mean_goodput_mbps"] <= 1.005 * limit
    run = json.loads((out / "run.json").read_text())
    assert run["provenance"]["stats"]["background_packets"] > 0
