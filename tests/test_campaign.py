"""Campaigns: expansion of sweeps, the catalog, resume, failures, foreign folders, the report."""

import json
import os
import shutil

import duckdb
import pytest
from xferlab.campaign import CampaignError, derive_seed, from_dict, runner, spec
from xferlab.campaign import catalog as cat
from xferlab.campaign import report as creport

TINY = {
    "name": "tiny",
    "topology": {"pairs": 2, "access_rate": "100Mbps", "bottleneck_rate": "100Mbps", "rtt": "5ms", "buffer": "1.0bdp"},
    "workload": {"streams": 1, "volume": "2MB"},
    "protocol": {"variant": "reno"},
    "measure": {"goodput_interval": "50ms"},
    "seed": 3,
}


def make(**kw):
    data = {"name": "t", "scenario": TINY, "sweep": {"topology.rtt": ["5ms", "20ms"]}, "repetitions": 2}
    data.update(kw)
    return data


def write(tmp_path, data, name="c.yaml"):
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def rows(out, cols="run_key, status, seed, repetition, rtt_ms, aggregate_goodput_mbps, completion_mean_s, error"):
    with duckdb.connect(str(out / "catalog.duckdb"), read_only=True) as db:
        names = [c.strip() for c in cols.split(",")]
        return [dict(zip(names, r, strict=True)) for r in db.execute(f"SELECT {cols} FROM runs ORDER BY run_key").fetchall()]


# --------------------------------------------------------------------------- expansion


def test_sweep_is_cartesian_zip_is_paired_and_repetitions_get_distinct_seeds():
    c = from_dict(
        make(
            sweep={"protocol.variant": ["reno", "cubic"], "topology.rtt": ["5ms", "20ms", "50ms"]},
            zip={"workload.congestion_level": [0.5, 1.0], "workload.reverse": [0.0, 1.0]},
            scenario={**TINY, "topology": {k: v for k, v in TINY["topology"].items() if k != "pairs"}},
            repetitions=3,
        )
    )
    assert len(c.runs) == 2 * 3 * 2 * 3
    points = {json.dumps(r.params, sort_keys=True) for r in c.runs}
    assert len(points) == 12
    assert all(r.params["workload.reverse"] == (0.0 if r.params["workload.congestion_level"] == 0.5 else 1.0) for r in c.runs)
    assert len({r.key for r in c.runs}) == len(c.runs)
    for p in range(12):
        seeds = [r.seed for r in c.runs if r.point == p]
        assert seeds == [derive_seed(3, k) for k in range(3)]  # same k → same seed at every point
        assert len(set(seeds)) == 3
    assert all(r.given["seed"] == r.seed for r in c.runs)


def test_keys_are_stable_and_order_randomisation_is_a_permutation():
    a, b = from_dict(make()), from_dict(make(order="random", shuffle_seed=5))
    assert [r.key for r in a.runs] == [r.key for r in b.runs]
    assert a.fingerprint() == b.fingerprint()
    assert sorted(r.key for r in b.ordered()) == sorted(r.key for r in a.ordered())
    assert from_dict(make(repetitions=3)).fingerprint() != a.fingerprint()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sweep": {"topology.rtt": "5ms"}}, "non-empty list"),
        ({"sweep": {"rtt": ["5ms"]}}, "section.field"),
        ({"zip": {"topology.rtt": ["5ms"], "workload.streams": [1, 2]}}, "same length"),
        ({"repetitions": 0}, "repetitions"),
        ({"colour": "red"}, "unknown field"),
        ({"sweep": {"topology.rtt": ["5ms", "fast"]}}, "topology.rtt"),
        ({"scenario": "no-such-file.yaml"}, "no such file"),
    ],
)
def test_bad_campaigns_say_what_is_wrong(change, message):
    with pytest.raises(CampaignError, match=message):
        from_dict(make(**change))


def test_shipped_campaign_files_expand():
    root = os.path.join(os.path.dirname(__file__), "..", "scenarios", "campaigns")
    for name in os.listdir(root):
        c = spec.load(os.path.join(root, name))
        assert len(c.runs) >= 4, name


# --------------------------------------------------------------------------- running


def test_run_resume_adopt_and_report(tmp_path):
    c = from_dict(make())
    out = tmp_path / "camp"
    s = runner.run(c, out, workers=1)
    assert (s.ok, s.failed, s.skipped) == (4, 0, 0)
    rs = rows(out)
    assert len(rs) == 4 and all(r["status"] == "ok" and r["aggregate_goodput_mbps"] and r["completion_mean_s"] for r in rs)
    assert sorted(r["seed"] for r in rs) == sorted(derive_seed(3, k) for k in (0, 1) for _ in (0, 1))
    # Killed between the folder and its row: the folder is adopted, not run again.
    victim = rs[0]["run_key"]
    mtime = (out / "runs" / victim / "metrics.json").stat().st_mtime_ns
    with duckdb.connect(str(out / "catalog.duckdb")) as db:
        db.execute("DELETE FROM runs WHERE run_key = ?", [victim])
    (out / "runs" / f".{victim}.tmp-999").mkdir()  # and a stale staging folder of another run
    s = runner.run(c, out, workers=1)
    assert (s.ok, s.adopted, s.skipped) == (0, 1, 3)
    assert (out / "runs" / victim / "metrics.json").stat().st_mtime_ns == mtime
    assert [r["run_key"] for r in rows(out)] == [r["run_key"] for r in rs]
    # A half-written run (folder without metrics) is redone.
    os.remove(out / "runs" / victim / "metrics.json")
    with duckdb.connect(str(out / "catalog.duckdb")) as db:
        db.execute("DELETE FROM runs WHERE run_key = ?", [victim])
    s = runner.run(c, out, workers=1)
    assert (s.ok, s.adopted, s.skipped) == (1, 0, 3)
    assert len(rows(out)) == 4
    path = creport.render(out)
    text = path.read_text()
    assert "Sweep points" in text and "±" in text and text.count("<img") >= 3
    assert (out / "report" / "runs.parquet").is_file()


def test_a_failing_run_is_recorded_and_does_not_stop_the_campaign(tmp_path, cli):
    # A metrics window after the end of the run: that run fails once simulated.
    path = write(tmp_path, make(sweep={"measure.window": ["all", ["100s", "200s"]]}, repetitions=1))
    out = tmp_path / "camp"
    p = cli("campaign", "run", path, "--out", out, "--workers", "1")
    assert p.returncode == 0, p.stderr
    assert "1 failed" in p.stdout
    rs = rows(out, "status, error, aggregate_goodput_mbps")
    assert sorted(r["status"] for r in rs) == ["failed", "ok"]
    bad = next(r for r in rs if r["status"] == "failed")
    assert "does not overlap the run" in bad["error"] and bad["aggregate_goodput_mbps"] is None
    p = cli("campaign", "run", path, "--out", out)  # resume: the failed run is not retried by default
    assert "2 already in the catalog" in p.stdout.replace("\n", " ")
    p = cli("campaign", "run", path, "--out", out, "--retry-failed", "--workers", "1")  # retried: replaced, not added
    assert "1 already in the catalog" in p.stdout.replace("\n", " ") and "1 failed" in p.stdout
    assert sorted(r["status"] for r in rows(out, "status")) == ["failed", "ok"]
    assert cli("campaign", "report", out).returncode == 0
    assert "Failed runs" in (out / "report" / "index.html").read_text()


def test_foreign_corrupt_and_other_campaign_folders_are_never_overwritten(tmp_path, cli):
    path = write(tmp_path, make(repetitions=1, sweep={"topology.rtt": ["5ms"]}))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    p = cli("campaign", "run", path, "--out", foreign, "--force")
    assert p.returncode == 2 and "not a campaign folder" in p.stderr and "Traceback" not in p.stderr
    assert os.listdir(foreign) == ["thesis.tex"]

    out = tmp_path / "camp"
    assert cli("campaign", "run", path, "--out", out).returncode == 0
    other = write(tmp_path, make(repetitions=1, sweep={"topology.rtt": ["7ms"]}), "other.yaml")
    p = cli("campaign", "run", other, "--out", out)
    assert p.returncode == 2 and "another campaign" in p.stderr and "--force" in p.stderr
    p = cli("campaign", "run", other, "--out", out, "--force")
    assert p.returncode == 0, p.stderr
    assert [r["rtt_ms"] for r in rows(out)] == [7.0]

    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    (broken / "catalog.duckdb").write_bytes(b"not a database" * 100)
    p = cli("campaign", "run", other, "--out", broken)
    assert p.returncode == 2 and "corrupt" in p.stderr and "Traceback" not in p.stderr

    (out / "campaign.json").write_text("{not json")
    p = cli("campaign", "run", other, "--out", out)
    assert p.returncode == 2 and "corrupt" in p.stderr and "Traceback" not in p.stderr
    p = cli("campaign", "report", out)
    assert p.returncode == 2 and "corrupt" in p.stderr
    p = cli("campaign", "report", tmp_path / "nowhere")
    assert p.returncode == 2 and "no such folder" in p.stderr


def test_a_campaign_grows_its_repetitions_in_place_and_never_shrinks(tmp_path, cli):
    """1 repetition, then 3 of the same campaign in the same folder: the first run is kept
    (not run again), two are added with the seeds a 3-repetition campaign has from the start."""
    out = tmp_path / "camp"
    one = write(tmp_path, make(repetitions=1, sweep={"topology.rtt": ["5ms"]}), "one.yaml")
    assert cli("campaign", "run", one, "--out", out, "-q").returncode == 0
    first = rows(out)[0]
    mtime = (out / "runs" / first["run_key"] / "metrics.json").stat().st_mtime_ns
    three = write(tmp_path, make(repetitions=3, sweep={"topology.rtt": ["5ms"]}), "three.yaml")
    p = cli("campaign", "run", three, "--out", out, "--workers", "1")
    assert p.returncode == 0, p.stderr
    said = " ".join(p.stdout.split())
    assert "grows from 1 to 3 repetitions (2 runs to do)" in said and "1 already in the catalog" in said
    rs = rows(out)
    assert sorted((r["repetition"], r["seed"]) for r in rs) == [(k, derive_seed(3, k)) for k in range(3)]
    assert (out / "runs" / first["run_key"] / "metrics.json").stat().st_mtime_ns == mtime
    m = json.loads((out / "campaign.json").read_text())
    assert m["repetitions"] == 3 and m["runs"] == 3 and [(g["from"], g["to"]) for g in m["grown"]] == [(1, 3)]
    # Resumed as 3: nothing to do. Asked for 2: refused, nothing removed.
    p = cli("campaign", "run", three, "--out", out)
    assert p.returncode == 0 and "3 already in the catalog" in " ".join(p.stdout.split())
    two = write(tmp_path, make(repetitions=2, sweep={"topology.rtt": ["5ms"]}), "two.yaml")
    p = cli("campaign", "run", two, "--out", out)
    assert p.returncode == 2 and "grows but never shrinks: ask for 3 or more" in " ".join(p.stderr.split())
    assert len(rows(out)) == 3
    # The same repetitions at another point is another campaign, as before.
    other = write(tmp_path, make(repetitions=4, sweep={"topology.rtt": ["7ms"]}), "other.yaml")
    p = cli("campaign", "run", other, "--out", out)
    assert p.returncode == 2 and "another campaign" in p.stderr


def test_user_mistakes_exit_2_without_a_traceback(tmp_path, cli):
    path = write(tmp_path, make())
    for args in (
        ("campaign", "run", tmp_path / "missing.yaml", "--out", tmp_path / "o"),
        ("campaign", "run", path, "--out", tmp_path / "o", "--backend", "warp"),
        ("campaign", "run", path, "--out", tmp_path / "o", "--workers", "0"),
        ("campaign", "run", write(tmp_path, make(sweep={"topology.rtt": ["fast"]}), "bad.yaml"), "--out", tmp_path / "o"),
    ):
        p = cli(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr and "error:" in p.stderr
    assert not (tmp_path / "o" / "catalog.duckdb").exists()


@pytest.mark.slow
def test_dask_local_cluster_runs_the_campaign(tmp_path, cli):
    pytest.importorskip("distributed")
    path = write(tmp_path, make(repetitions=1))
    out = tmp_path / "camp"
    p = cli("campaign", "run", path, "--out", out, "--dask", "local:2")
    assert p.returncode == 0, p.stderr
    assert [r["status"] for r in rows(out)] == ["ok", "ok"]


def test_netns_runs_one_at_a_time(monkeypatch, tmp_path):
    # The netns backend is written elsewhere: check only that campaigns run it on one worker.
    calls = []
    monkeypatch.setattr(runner, "EXCLUSIVE_BACKENDS", {"sim"})
    c = from_dict(make(repetitions=1))
    s = runner.run(c, tmp_path / "camp", workers=2, log=calls.append)
    assert s.workers == 1 and s.ok == 2 and "one run at a time" in calls[0]
    with cat.CampaignFolder(tmp_path / "camp", None) as f:
        assert f.manifest["runs"] == 2


# --------------------------------------------------------------------------- damaged manifests (issue 48)


def _folder(tmp_path):
    """A campaign folder as `campaign run` creates it (manifest, catalog), without its runs."""
    path = write(tmp_path, make(repetitions=1))
    out = tmp_path / "camp"
    with cat.CampaignFolder(out, spec.load(path)):
        pass
    return path, out


def _manifest_edits():
    deep = b"[" * 100_000 + b"]" * 100_000
    wrong = {"format": cat.FORMAT, "name": {"a": 1}, "fingerprint": "x", "backend": "sim", "scenario": {}}
    return [
        (bytes(range(256)) * 4, ["not UTF-8"]),
        ('{"format": "xferlab-campaign/1"}'.encode("utf-16"), ["not UTF-8"]),
        (deep, ["nested too deeply"]),
        (b'{"format": NaN}', ["NaN"]),
        (json.dumps({**wrong, "sweep": {}, "zip": {}, "repetitions": 1, "runs": 2}).encode(), ["name is a dict"]),
        (json.dumps({**wrong, "name": "t", "sweep": {}, "zip": {}, "runs": 2}).encode(), ["repetitions is missing"]),
    ]


@pytest.mark.parametrize(("content", "words"), _manifest_edits())
def test_a_corrupt_manifest_is_refused_naming_the_file_and_its_fault(tmp_path, cli, content, words):
    path, out = _folder(tmp_path)
    (out / "campaign.json").write_bytes(content)
    for args in (("campaign", "run", path, "--out", out, "-q"), ("campaign", "report", out)):
        p = cli(*args)
        assert p.returncode == 2, (args, p.stderr)
        line = " ".join(p.stderr.split())
        assert line.startswith("error:") and str(out / "campaign.json") in line and "internal error" not in line, line
        assert all(w in line for w in words), line
    assert (out / "campaign.json").read_bytes() == content  # never rewritten


def test_a_manifest_that_is_a_fifo_is_refused_without_waiting(tmp_path, cli):
    path, out = _folder(tmp_path)
    (out / "campaign.json").unlink()
    os.mkfifo(out / "campaign.json")
    p = cli("campaign", "run", path, "--out", out, "-q")
    assert p.returncode == 2 and "not a regular file" in p.stderr, p.stderr


# --------------------------------------------------------------------------- Dask addresses (issue 48)


def test_a_dask_address_that_answers_but_is_no_scheduler_is_said_so(tmp_path, cli):
    """Something listens there (here a server that sends bytes Dask reads as a 3 EiB message):
    not "out of memory", but that no Dask scheduler answers at that address."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer():
        for _ in range(3):
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n" * 4)
            conn.close()

    threading.Thread(target=answer, daemon=True).start()
    try:
        p = cli("campaign", "run", write(tmp_path, make()), "--out", tmp_path / "out", "--dask", f"tcp://127.0.0.1:{port}")
    finally:
        server.close()
    assert p.returncode == 2, p.stderr
    line = " ".join(p.stderr.split())
    assert "cannot reach a Dask scheduler at that address" in line and "out of memory" not in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("address", "words"),
    [("tcp://127.0.0.1:9", ["cannot reach the scheduler", "refused"]), ("tcp://127.0.0.1:70000", ["port 70000"])],
)
def test_an_unreachable_dask_address_is_refused_at_once(tmp_path, cli, address, words):
    p = cli("campaign", "run", write(tmp_path, make()), "--out", tmp_path / "out", "--dask", address)
    assert p.returncode == 2 and all(w in p.stderr for w in words), p.stderr
    assert not (tmp_path / "out").exists()


def test_resume_removes_its_own_staging_folders_and_nothing_else(tmp_path):
    """A stopped campaign's workers may leave ".<run_key>.tmp-…" (or ".old-…") in runs/, also
    of runs finished meanwhile: the next run of the campaign removes those, by name, and only
    those of its own runs."""
    c = from_dict(make(repetitions=1))
    out = tmp_path / "camp"
    runner.run(c, out, workers=1)
    runs = out / "runs"
    own = [runs / f".{c.runs[0].key}.tmp-k3x_9q", runs / f".{c.runs[1].key}.old-4242"]
    others = [runs / ".notes", runs / f".{'f' * 16}.tmp-x1", runs / f".{c.runs[0].key}.backup"]
    for d in own + others:
        d.mkdir()
        (d / "run.json").write_text("{}")
    s = runner.run(c, out, workers=1)
    assert s.skipped == 2 and s.ok == 0
    assert [d.name for d in own if d.exists()] == []
    assert [d.name for d in others if d.exists()] == [d.name for d in others]
