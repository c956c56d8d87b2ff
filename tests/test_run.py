"""End to end, as a user runs it: scenario → simulator → run folder → report."""

import errno
import json
import math
import os
import re
import shutil
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from xferlab import demo, engine, report, runfolder, scenario
from xferlab.cli import app
from xferlab.cli_common import run_app


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


# ----------------------------------------------------------------------------- output folders (issue 48, 21)


def run_cli(*args):
    """The CLI in this process (faster than a subprocess; same exit status and output)."""
    r = CliRunner().invoke(app, [str(a) for a in args])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return SimpleNamespace(returncode=r.exit_code, stdout=r.stdout, stderr=r.stderr)


TINY = {
    "name": "tiny",
    "topology": {"pairs": 1, "access_rate": "100Mbps", "bottleneck_rate": "100Mbps", "rtt": "10ms", "buffer": "1.0bdp"},
    "workload": {"streams": 1, "duration": "0.3s"},
    "protocol": {"variant": "reno"},
    "measure": {"goodput_interval": "0.1s"},
    "seed": 7,
}


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A scenario of a 0.3 s run, and a report stubbed (these tests are about where a run
    folder goes, not what its report draws)."""

    def stub(folder, trace, m):
        (folder / "report.html").write_text("<html>report</html>")

    monkeypatch.setattr(report, "render", stub)
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps(TINY))
    return path


def staging_left(root):
    """Hidden staging files or folders of a run folder anywhere under ``root``."""
    return [p for p in root.rglob(".*") if re.search(r"\.(tmp|old|probe)-", p.name)]


@pytest.mark.parametrize(
    "where,why",
    [
        (".", "is the current folder"),
        ("", "is the current folder"),
        ("..", "holds the current folder"),
        ("HOME", "is the home folder"),
        ("/", "is the root folder"),
    ],
)
@pytest.mark.parametrize("force", [False, True])
def test_out_never_takes_the_current_home_or_root_folder(tiny, tmp_path, monkeypatch, where, why, force):
    # `run S --out . --force` replaced the whole current folder: a file beside the run was gone.
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "precious").write_text("mine")
    (home / "precious").write_text("mine")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    out = str(home) if where == "HOME" else where
    p = run_cli("run", tiny, "--out", out, "-q", *(["--force"] if force else []))
    assert p.returncode == 2, p.stdout
    assert f"{out} {why}; a run folder is created whole by a rename" in p.stderr, p.stderr
    assert (work / "precious").read_text() == "mine" and sorted(os.listdir(work)) == ["precious"]
    assert (home / "precious").read_text() == "mine" and sorted(os.listdir(home)) == ["precious"]
    assert not staging_left(tmp_path)


def test_force_replaces_a_previous_run_folder_only(tiny, tmp_path):
    out = tmp_path / "r"
    assert run_cli("run", tiny, "--out", out, "-q").returncode == 0
    first = (out / "run.json").read_text()
    p = run_cli("run", tiny, "--out", out, "-q")
    assert p.returncode == 2 and "already exists; choose another --out or pass --force" in p.stderr
    assert run_cli("run", tiny, "--out", out, "-q", "--force", "--set", "seed=8").returncode == 0
    assert (out / "run.json").read_text() != first and json.loads((out / "run.json").read_text())["seed"] == 8
    # A file of the user's in the run folder: --force refuses, naming it; nothing is lost.
    (out / "notes.txt").write_text("mine")
    p = run_cli("run", tiny, "--out", out, "-q", "--force")
    assert p.returncode == 2
    assert f"{out} is not a run folder (it holds notes.txt); --force replaces only a previous run folder" in p.stderr
    assert (out / "notes.txt").read_text() == "mine" and json.loads((out / "run.json").read_text())["seed"] == 8
    # A folder that is no run at all.
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious").write_text("mine")
    p = run_cli("run", tiny, "--out", tmp_path / "data", "-q", "--force")
    assert p.returncode == 2 and "it holds precious" in p.stderr
    assert (tmp_path / "data" / "precious").read_text() == "mine"
    assert not staging_left(tmp_path)


def test_a_symlinked_out_is_followed_and_leaves_no_staging(tiny, tmp_path):
    # The link used to be moved aside as .link.old-PID and never removed.
    target = tmp_path / "store" / "run"
    assert run_cli("run", tiny, "--out", target, "-q").returncode == 0
    link = tmp_path / "link"
    link.symlink_to(target)
    assert run_cli("run", tiny, "--out", link, "-q", "--force", "--set", "seed=9").returncode == 0
    assert link.is_symlink() and json.loads((target / "run.json").read_text())["seed"] == 9
    assert not staging_left(tmp_path)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    p = run_cli("run", tiny, "--out", tmp_path / "dangling", "-q")
    assert p.returncode == 2 and "is a dangling symbolic link" in p.stderr


def _folder(tmp: Path, tag: str) -> None:
    (tmp / "run.json").write_text(json.dumps({"tag": tag}))
    (tmp / "trace").mkdir()


def test_a_second_run_into_one_out_is_refused_and_the_first_kept(tmp_path):
    # Two runs started together both found no folder; the one that finished last silently
    # replaced the other, and both exited 0.
    out = tmp_path / "out"
    with pytest.raises(runfolder.RunFolderError, match="was created by another run while this one ran"):
        with runfolder.staged(out) as first:
            _folder(first, "first")
            with runfolder.staged(out) as second:
                _folder(second, "second")
    assert json.loads((out / "run.json").read_text()) == {"tag": "second"}
    assert not staging_left(tmp_path)


def test_ctrl_c_while_the_folder_is_put_in_place_leaves_it_whole(tmp_path, monkeypatch):
    out = tmp_path / "out"
    with runfolder.staged(out) as tmp:
        _folder(tmp, "previous")
    commit = runfolder._commit

    def commit_interrupted(*args):
        signal.raise_signal(signal.SIGINT)  # held until the folder is in place
        commit(*args)

    monkeypatch.setattr(runfolder, "_commit", commit_interrupted)
    with pytest.raises(runfolder.Interrupted):
        with runfolder.staged(out, force=True) as tmp:
            _folder(tmp, "new")
    assert json.loads((out / "run.json").read_text()) == {"tag": "new"}
    with pytest.raises(KeyboardInterrupt):  # before: no folder, and no staging either
        with runfolder.staged(tmp_path / "never"):
            raise KeyboardInterrupt
    assert not (tmp_path / "never").exists() and not staging_left(tmp_path)


@pytest.mark.parametrize("err,status", [(errno.ENOSPC, 1), (errno.EROFS, 1), (errno.EACCES, 1)])
def test_a_full_or_read_only_disk_is_an_environment_error(tiny, tmp_path, monkeypatch, err, status):
    def refuse(*args, **kwargs):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(pq, "write_table", refuse)
    p = run_cli("run", tiny, "--out", tmp_path / "r", "-q")
    assert p.returncode == status
    assert p.stderr.startswith(f"error: {tmp_path / 'r'}: cannot write: {os.strerror(err)}"), p.stderr
    assert "internal error" not in p.stderr and not (tmp_path / "r").exists() and not staging_left(tmp_path)


# ----------------------------------------------------------------------------- damaged run folders (issue 48, 23)


@pytest.fixture(scope="module")
def a_run(tmp_path_factory):
    """A small run folder (with its real report), to copy and damage."""
    root = tmp_path_factory.mktemp("a_run")
    (root / "tiny.yaml").write_text(json.dumps(TINY))
    s, given = scenario.load(root / "tiny.yaml")
    engine.run(s, given, root / "run")
    return root / "run"


def _edit_run_json(key, value):
    def edit(d):
        run = json.loads((d / "run.json").read_text())
        node = run
        for k in key[:-1]:
            node = node[k]
        node[key[-1]] = value
        (d / "run.json").write_text(json.dumps(run))

    return edit


def _float_in_an_int_column(d):
    t = pq.read_table(d / "trace" / "flows.parquet")
    i = t.column_names.index("bytes")
    pq.write_table(t.set_column(i, "bytes", pa.array([1.5] * t.num_rows)), d / "trace" / "flows.parquet")


def _nan_goodput(d):
    t = pq.read_table(d / "trace" / "goodput.parquet")
    i = t.column_names.index("goodput_mbps")
    pq.write_table(t.set_column(i, "goodput_mbps", pa.array([math.nan] * t.num_rows)), d / "trace" / "goodput.parquet")


def _replace(name, kind):
    def damage(d):
        p = d / name
        shutil.rmtree(p) if p.is_dir() else p.unlink()
        if kind == "folder":
            p.mkdir()
            (p / "x").write_text("x")
        else:
            p.write_text("x")

    return damage


@pytest.mark.parametrize(
    "damage,file,words",
    [
        (lambda d: (d / "run.json").write_bytes((d / "run.json").read_text().encode("utf-16")), "run.json", "not UTF-8 text"),
        (lambda d: (d / "run.json").write_bytes(bytes(range(256))), "run.json", "not UTF-8 text"),
        (lambda d: (d / "run.json").write_text("[]"), "run.json", "not a run.json of xferlab (a list"),
        (lambda d: (d / "run.json").write_text('{"x": NaN}'), "run.json", "not valid JSON (NaN is not a number JSON allows)"),
        (_edit_run_json(["trace_version"], "4"), "run.json", "trace_version '4' is not a version"),
        (_edit_run_json(["trace_version"], [4]), "run.json", "trace_version [4] is not a version"),
        (_edit_run_json(["trace_version"], None), "run.json", "trace_version None is not a version"),
        (_edit_run_json(["provenance"], "sim"), "run.json", "provenance: Input should be a valid dictionary"),
        (_edit_run_json(["provenance", "warnings"], "x"), "run.json", "provenance.warnings: Input should be a valid list"),
        (_edit_run_json(["resolved", "pairs"], "two"), "run.json", "resolved.pairs: Input should be a valid integer"),
        (_edit_run_json(["resolved", "window"], [1]), "run.json", "resolved.window: Value error, window"),
        (_edit_run_json(["created"], 5), "run.json", "created: Input should be a valid string"),
        (_edit_run_json(["wall_seconds"], "1s"), "run.json", "wall_seconds: Input should be a valid number"),
        (_float_in_an_int_column, "trace/flows.parquet", "column bytes is not uint64: Float value 1.500000 was truncated"),
        (_nan_goodput, "trace/goodput.parquet", "column goodput_mbps holds a value that is not finite"),
        (
            lambda d: (d / "trace" / "goodput.parquet").write_bytes(b"PAR1 not parquet"),
            "trace/goodput.parquet",
            "not a readable Parquet",
        ),
        (_replace("trace/goodput.parquet", "folder"), "trace/goodput.parquet", "a folder; expected a Parquet table"),
        (lambda d: (d / "trace" / "tcp.parquet").unlink(), "trace/tcp.parquet", "missing trace table"),
        (_replace("metrics.json", "folder"), "metrics.json", "cannot write: it is a folder where xferlab writes a file"),
        (_replace("report.html", "folder"), "report.html", "cannot write: it is a folder where xferlab writes a file"),
        (_replace("figures", "file"), "figures", "cannot write: it exists and is not a folder"),
    ],
)
def test_a_damaged_run_folder_is_one_clear_error_naming_the_file(a_run, tmp_path, damage, file, words):
    folder = tmp_path / "damaged"
    shutil.copytree(a_run, folder)
    damage(folder)
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    p = run_cli("report", folder)
    assert p.returncode == 2, p.stdout
    assert p.stderr.startswith(f"error: {folder / file}: {words}"), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "internal error" not in p.stderr
    # compare reads the run (its metrics computed from the trace), and writes nothing of it.
    p = run_cli("compare", folder, a_run, "--out", tmp_path / "c.html")
    if file in ("metrics.json", "report.html", "figures"):
        assert p.returncode == 0, p.stderr
    else:
        assert p.returncode == 2 and p.stderr.startswith(f"error: {folder / file}: "), p.stderr
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before, "nothing of the folder was lost"
    assert not staging_left(tmp_path)


def test_report_on_a_full_disk_is_an_environment_error(a_run, tmp_path, monkeypatch):
    folder = tmp_path / "r"
    shutil.copytree(a_run, folder)

    def full(fd, mode):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fchmod", full)  # the first write of an atomic file
    p = run_cli("report", folder)
    assert p.returncode == 1 and p.stderr.startswith(f"error: {folder / 'metrics.json'}: cannot write: No space left"), p.stderr
    assert json.loads((folder / "metrics.json").read_text()) == json.loads((a_run / "metrics.json").read_text())
    assert not staging_left(tmp_path)


# ----------------------------------------------------------------------------- input and output (issue 48, 19 and 26)


def test_an_unreadable_scenario_says_permission_denied(tiny, monkeypatch):
    # Typer checked readability itself and said only "is not readable" (as a framed panel).
    real_open, real_access = os.open, os.access

    def no_read(path, flags, *args, **kwargs):
        if str(path) == str(tiny):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_read)
    monkeypatch.setattr(os, "access", lambda p, *a, **k: str(p) != str(tiny) and real_access(p, *a, **k))
    for command in ("run", "check"):
        p = run_cli(command, tiny)
        assert p.returncode == 2 and p.stderr == f"error: {tiny}: cannot read: Permission denied\n", p.stderr


def _long(tmp_path: Path) -> Path:
    return tmp_path / ("a-folder-with-a-rather-long-name-" * 4) / "and-another-one-below-it" / "run"


def test_paths_are_whole_lines_off_a_terminal(tiny, tmp_path):
    out = _long(tmp_path)
    p = run_cli("run", tiny, "--out", out, "-q")
    assert f"report: {out / 'report.html'}" in p.stdout.splitlines(), p.stdout
    p = run_cli("report", tmp_path / ("nowhere-" * 20))
    assert p.stderr == f"error: {tmp_path / ('nowhere-' * 20)}: no such folder\n"


def test_typer_s_own_errors_and_help_are_plain_lines_off_a_terminal(monkeypatch, capsys):
    # Typer drew them in a panel 80 columns wide: a long value was cut over lines.
    value = "/a/long/path/" * 12
    monkeypatch.setattr(sys, "argv", ["xferlab", "run", "s.yaml", value])
    with pytest.raises(SystemExit) as e:
        run_app(app)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "╭" not in err
    assert f"Error: Got unexpected extra argument(s) ({value})" in err.splitlines(), err
    monkeypatch.setattr(sys, "argv", ["xferlab", "run", "--help"])
    with pytest.raises(SystemExit):
        run_app(app)
    help_lines = capsys.readouterr().out.splitlines()
    assert any("--backend" in line and "remote hosts, --inventory)" in line for line in help_lines), help_lines


def test_the_demo_prints_whole_paths_off_a_terminal(tmp_path, monkeypatch, capsys):
    # `make demo > log` cut its report paths at 80 columns (…/report.htm⏎l): the demo made a
    # console of its own.
    metrics = {
        "aggregate_goodput_mbps": 900.0,
        "ideal_goodput_mbps": 949.0,
        "jain_index": 0.99,
        "mean_flow_goodput_mbps": 90.0,
        "mean_flow_cov": 0.1,
    }
    monkeypatch.setattr(demo, "_run", lambda path, overrides, out: metrics)
    out = _long(tmp_path)
    assert demo.main([str(Path(__file__).parent.parent / "scenarios"), str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"  {(out / 'quick' / 'report.html').resolve()}" in lines
    paper = demo.seed_results()
    runs = 1 + len(paper["parallel_streams_grid5000"]["streams_per_node"])
    runs += len(demo.TABLE2_VARIANTS) * len(paper["variants_vs_rtt_gtrcnet10"]["rtt_ms"])
    assert sum(line.startswith(f"  {out.resolve()}/") and line.endswith("/report.html") for line in lines) == runs
