"""Issue 10, first contact: every defect a hostile first user found, as a regression test.

A user mistake is refused with ``error: …`` naming the field and exit status 2 — never a
traceback, never a half-written folder, never minutes of silence."""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import ROOT, SCENARIOS
from typer.testing import CliRunner
from xferlab.cli import app

QUICK = SCENARIOS / "quick.yaml"
SHORT = ["--set", "workload.duration=300ms"]


def invoke(*args):
    """The CLI in-process (fast); stderr is kept apart from stdout."""
    return CliRunner().invoke(app, [str(a) for a in args])


def refused(result, *words, status=2):
    """Exit status 2 (the input refused; 1: the machine refused), one `error:` and the given
    words, and no traceback."""
    text = result.stderr
    assert result.exit_code == status, (result.exit_code, result.output, result.stderr, result.exception)
    assert text.startswith("error:") and "Traceback" not in text, text
    for w in words:
        assert w in text, (w, text)
    return text


# ----------------------------------------------------------------------------- check/run


@pytest.mark.parametrize(
    ("override", "field", "words"),
    [
        ("protocol.window_cap=1e400GB", "protocol.window_cap", "not a finite number"),
        ("topology.rtt=1e9s", "topology.rtt", "over the limit"),
        ("topology.buffer=1000000000000", "topology.buffer", "over the limit"),
        ("workload.duration=1e9s", "workload.duration", "over the limit"),
        ("workload.stagger=1e9s", "workload.stagger", "over the limit"),
        ("workload.start_jitter=1e9s", "workload.start_jitter", "over the limit"),
        ("measure.goodput_interval=1ns", "measure.goodput_interval", "under the limit"),
        ("measure.goodput_interval=1us", "measure.goodput_interval", "rows"),
        ("topology.pairs=true", "topology.pairs", "valid integer"),
        ("workload.streams=true", "workload.streams", "valid integer"),
        ("protocol.initial_cwnd=true", "protocol.initial_cwnd", "valid integer"),
        ("seed=true", "seed", "valid integer"),
        ("topology.buffer=true", "topology.buffer", "number of packets"),
        ("topology.rtt=10", "topology.rtt", "needs a unit"),
        ("seed=" + "9" * 5000, "seed", "digits"),
        ("measure.window=[5, 1]", "measure.window", "needs a unit"),
    ],
)
@pytest.mark.parametrize("command", ["check", "run"])
def test_check_and_run_refuse_the_same_inputs_naming_the_field(tmp_path, command, override, field, words):
    out = ["--out", tmp_path / "r"] if command == "run" else []
    short = [] if words == "rows" else SHORT  # 20 s × 4 flows / 1 µs: 8e7 rows
    refused(invoke(command, QUICK, *short, "--set", override, *out), field, words)
    assert not (tmp_path / "r").exists()


def test_a_pair_that_starts_after_the_aligned_end_is_refused():
    # Found by the fuzzer: its duration came out 0, which only the simulator refused.
    r = invoke(
        "check",
        QUICK,
        "--set",
        "workload.duration=10ms",
        "--set",
        "workload.align_end=true",
        "--set",
        "workload.per_pair=[{start: 10ms}]",
    )
    refused(r, "after the aligned end", "workload.align_end")


def test_a_volume_too_large_is_refused_by_check_naming_the_field():
    r = invoke("check", QUICK, "--set", "workload.duration=null", "--set", "workload.volume=1e30GB")
    refused(r, "workload.volume", "over the limit")


def test_too_many_flows_are_refused_at_once():
    t0 = time.perf_counter()
    r = invoke("check", QUICK, "--set", "topology.pairs=100000", "--set", "workload.streams=10000")
    refused(r, "flows", "over the limit of 100 000")
    assert time.perf_counter() - t0 < 30  # refused, not built (it took 3.7 GB and minutes)


def test_a_congestion_level_that_needs_too_many_pairs_is_refused(tmp_path):
    p = tmp_path / "cg.yaml"
    p.write_text(
        "name: cg\ntopology: {access_rate: 1Mbps, bottleneck_rate: 10Gbps}\nworkload: {duration: 1s, congestion_level: 1000}\n"
    )
    refused(invoke("check", p), "congestion_level", "pairs")


def test_more_background_sources_than_flows_run(tmp_path):
    # Was a panic of the simulator (an index of a background source used on the flows).
    r = invoke("run", QUICK, "--set", "workload.duration=2s", "--set", "workload.background.level=1.1", "--out", tmp_path / "r")
    assert r.exit_code == 0, r.stderr
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    # 2.2 Gbit/s of unresponsive background into 2 Gbit/s: the transfers get little, and the
    # bottleneck drops much.
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["provenance"]["stats"]["background_packets"] > 300_000 and m["bottleneck_drops"] > 10_000
    assert 0 < m["aggregate_goodput_mbps"] < 200


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("name: x\nworkload: {duration: 2024-01-01}\n", ["workload.duration", "2024-01-01"]),
        ("name: x\nworkload: {duration: !!binary aGVsbG8=}\n", ["workload.duration", "binary"]),
        ("name: x\nworkload: {duration: 1s}\nseed: " + "9" * 5000 + "\n", ["digits"]),
        ("name: x\nworkload: " + "[" * 100_000 + "]" * 100_000 + "\n", ["nested too deeply"]),
        ("name: x\nworkload: {duration: .nan}\n", ["workload.duration", "finite"]),
        ("name: x\nworkload: {duration: 1s}\n1: a\n", ["key 1 is not text"]),
        ("name: [unclosed\n", ["not valid YAML", "line"]),
        ("- a list\n", ["expected a mapping"]),
    ],
)
def test_yaml_that_is_not_plain_data_is_refused(tmp_path, text, words):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    refused(invoke("check", p), *words)


def test_an_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines) + "\nname: x\nworkload: {duration: 1s}\n")
    t0 = time.perf_counter()
    refused(invoke("check", p), "more than 500000 values")
    assert time.perf_counter() - t0 < 30


def test_many_unknown_keys_are_refused_in_a_few_lines(tmp_path):
    p = tmp_path / "keys.yaml"
    p.write_text("name: x\nworkload: {duration: 1s}\n" + "".join(f"k{i}: 1\n" for i in range(50_000)))
    text = refused(invoke("check", p), "unknown field", "more problems")
    assert text.count("\n") <= 25


def test_a_huge_file_and_a_device_are_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("name: x\n" + "#" * (5 * 2**20) + "\n")
    refused(invoke("check", big), "at most 4 MiB")
    refused(invoke("check", "/dev/zero"), "not a regular file")


@pytest.mark.parametrize("where", ["under-a-file", "proc", "dangling"])
def test_an_unwritable_out_is_refused_before_the_run(tmp_path, where):
    if where == "under-a-file":
        (tmp_path / "f").write_text("")
        out = tmp_path / "f" / "run"
    elif where == "proc":
        out = "/proc/xferlab-run"
    else:
        (tmp_path / "link").symlink_to(tmp_path / "nowhere" / "x")
        out = tmp_path / "link"
    t0 = time.perf_counter()
    # /proc takes no new file: the machine's refusal (exit 1), as a read-only disk's
    refused(invoke("run", QUICK, "--out", out), str(out), status=1 if where == "proc" else 2)
    assert time.perf_counter() - t0 < 20  # before the 20 s scenario ran, not after


def test_a_campaign_file_given_to_run_points_to_campaign_run():
    refused(invoke("run", SCENARIOS / "campaigns" / "quick.yaml"), "xferlab campaign run")
    refused(invoke("campaign", "run", QUICK, "--out", "/tmp/never"), "xferlab run")


def test_output_off_a_terminal_keeps_paths_and_cells_whole(tmp_path, cli):
    out = tmp_path / ("a-rather-long-folder-name-" * 3) / "quick-run-number-one"
    p = cli("run", QUICK, *SHORT, "--out", out)
    assert p.returncode == 0, p.stderr
    assert f"report: {out / 'report.html'}" in p.stdout.splitlines()
    assert "…" not in p.stdout


def test_an_internal_error_is_one_line_not_a_traceback(tmp_path, cli):
    # A run folder whose run.json lacks what `report` needs beyond the usual checks.
    (tmp_path / "r" / "trace").mkdir(parents=True)
    (tmp_path / "r" / "run.json").write_text("[]")
    p = cli("report", tmp_path / "r")
    assert p.returncode in (1, 2) and "Traceback" not in p.stderr and p.stderr.startswith("error:"), p.stderr


# ----------------------------------------------------------------------------- importers


@pytest.mark.parametrize(
    ("option", "words"),
    [
        (["--interval", "1ns"], ["--interval"]),
        (["--offset", "inf"], ["--offset"]),
        (["--capacity", "1e400Gbps"], ["--capacity", "finite"]),
    ],
)
def test_import_options_out_of_range_are_refused(tmp_path, option, words):
    r = invoke("import", "iperf3", ROOT / "tests" / "data" / "iperf3_volume.json", "--out", tmp_path / "r", *option)
    refused(r, *words)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda t: t.replace('"bytes":', '"bytes": NaN, "x":', 1), ["NaN"]),
        (lambda t: t.replace('"bytes":', f'"bytes": {2**64}, "x":', 1), ["out of range"]),
        (lambda t: t.replace('"bytes":', '"bytes": -5, "x":', 1), ["out of range"]),
        (lambda t: t.replace('"bytes":', '"bytes": "many", "x":', 1), ["expected a number"]),
    ],
)
def test_iperf3_documents_with_bad_values_are_refused(tmp_path, edit, words):
    log = tmp_path / "bad.json"
    log.write_text(edit((ROOT / "tests" / "data" / "iperf3_volume.json").read_text()))
    refused(invoke("import", "iperf3", log, "--out", tmp_path / "r"), str(log), *words)


# ----------------------------------------------------------------------------- campaigns


def _campaign(tmp_path, **fields) -> str:
    data = {"name": "c", "scenario": str(QUICK), "set": {"workload.duration": "300ms"}, **fields}
    p = tmp_path / "c.yaml"
    p.write_text(json.dumps(data))
    return p


def test_a_sweep_of_a_million_runs_is_refused_at_once(tmp_path):
    axes = {"seed": list(range(1000)), "workload.streams": list(range(1, 1001))}
    t0 = time.perf_counter()
    refused(invoke("campaign", "run", _campaign(tmp_path, sweep=axes), "--out", tmp_path / "out"), "1 000 000 runs")
    assert time.perf_counter() - t0 < 30 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("address", ["local:abc", "local:0", "local:-1", "not an address!"])
def test_bad_dask_addresses_are_refused_and_leave_nothing(tmp_path, address):
    r = invoke("campaign", "run", _campaign(tmp_path), "--out", tmp_path / "out", "--dask", address)
    refused(r, "--dask")
    assert not (tmp_path / "out").exists()


def test_an_unreachable_scheduler_leaves_no_folder(tmp_path):
    r = invoke("campaign", "run", _campaign(tmp_path), "--out", tmp_path / "out", "--dask", "tcp://127.0.0.1:9")
    refused(r, "cannot reach")
    assert not (tmp_path / "out").exists()


def test_a_campaign_scenario_that_is_a_device_is_refused(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(json.dumps({"name": "c", "scenario": "/dev/zero"}))
    refused(invoke("campaign", "run", p, "--out", tmp_path / "out"), "not a regular file")


def test_a_long_campaign_says_its_estimated_cost_before_it_starts(tmp_path, monkeypatch):
    c = _campaign(tmp_path, set={"workload.duration": "120s"}, repetitions=40)
    from xferlab.campaign import runner

    def no_run(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run", no_run)
    r = invoke("campaign", "run", c, "--out", tmp_path / "out", "--workers", "2")
    assert "40 runs: an estimated" in r.stdout and "on 2 worker(s)" in r.stdout, r.stdout


def test_the_shipped_workload_campaign_expands(tmp_path):
    # It used to panic the simulator in its first run (more background sources than flows).
    from xferlab.campaign import spec

    c = spec.load(SCENARIOS / "campaigns" / "seed004-workload.yaml")
    assert len(c.runs) >= 8


def test_a_panic_in_a_run_is_recorded_with_its_reason(tmp_path, monkeypatch):
    from xferlab.campaign import runner, spec

    panic = type("PanicException", (BaseException,), {})

    def boom(*a, **k):
        raise panic("index out of bounds: the len is 4 but the index is 7")

    monkeypatch.setattr(runner.engine, "run", boom)
    c = spec.from_dict({"name": "c", "scenario": str(QUICK), "set": {"workload.duration": "300ms"}}, "c.yaml", ROOT)
    res = runner.execute({"key": c.runs[0].key, "given": c.runs[0].given, "out": str(tmp_path / "r"), "backend": "sim"})
    assert res["status"] == "failed" and "the simulator crashed" in res["error"] and "index out of bounds" in res["error"]


def _die_on_odd(task: dict) -> dict:
    if task["n"] % 2:
        os._exit(3)
    return {"key": task["key"], "status": "ok", "metrics": {}, "wall": 0.0}


def test_a_worker_that_dies_fails_only_its_own_runs(monkeypatch):
    from xferlab.campaign import runner

    monkeypatch.setattr(runner, "execute", _die_on_odd)
    results = {}
    tasks = [{"key": f"k{n}", "n": n} for n in range(6)]
    runner._run_pool(2, tasks, lambda res: results.__setitem__(res["key"], res))
    assert sorted(results) == [f"k{n}" for n in range(6)]
    assert {k for k, r in results.items() if r["status"] == "ok"} == {"k0", "k2", "k4"}
    assert all("worker process died" in results[f"k{n}"]["error"] for n in (1, 3, 5))


def test_an_ss_log_whose_clock_goes_back_is_refused(tmp_path):
    # Found by the fuzzer: a timestamp line earlier than the one before made flows start before t = 0.
    lines = (ROOT / "tests" / "data" / "ss_tinH.log").read_text().splitlines()
    stamps = [i for i, line in enumerate(lines) if line[:1].isdigit() and "." in line and " " not in line.strip()]
    lines[stamps[2]] = str(float(lines[stamps[0]]) - 5)
    log = tmp_path / "back.log"
    log.write_text("\n".join(lines) + "\n")
    refused(invoke("import", "ss", log, "--out", tmp_path / "r"), str(log), "goes back in time")
