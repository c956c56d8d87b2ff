"""The advice kept as a folder (`xferlab advise --out DIR`, docs/advisor.md): its page, its
runs and advice.json, opened again by `xferlab campaign report DIR` to the same advice, and
hostile folders refused in one line. The campaigns run on a fake clock without a pool
(tests/test_advisor.py's fakes) but for one end-to-end run of the command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_advisor import SMALL, FakeClock, Inline
from typer.testing import CliRunner
from xferlab import cli
from xferlab.advisor import folder, page
from xferlab.advisor.advice import advise
from xferlab.advisor.candidates import candidates
from xferlab.advisor.question import AdviceError, ask


def _run_with(clock: FakeClock):
    """A fake simulator run: the job's goodput grows with its streams, and takes as much
    from one competitor (harm), differently for each configuration and seed."""

    def run(task: dict) -> dict:
        clock.now += 1.0
        c, rep, n = task["config"], task["rep"], 100
        job = 0.0 if c is None else min(9e8, 3e8 * c["streams"] ** 0.5) * (1 - 0.01 * rep)
        rng = np.random.default_rng(task["id"])
        return {
            "task": task["id"],
            "t": list(np.arange(n) * 0.1),
            "job_bps": list(job * (1 + 0.02 * rng.standard_normal(n)).clip(0)),
            "competing_bps": [9e8 - job / 2] * n,
            "completion_s": None,
            "wall_s": 1.0,
        }

    return run


def _advice(competing: int = 1, deadline: str | None = None, budget: float = 40.0):
    clock = FakeClock()
    q = ask("20ms", "1Gbps", "20GB", competing=competing, deadline=deadline)
    configs = candidates(competing)[:12]
    return advise(q, budget, 1, configs=configs, repetitions=3, clock=clock, executor=Inline(), run=_run_with(clock))


@pytest.mark.parametrize("competing", [0, 1])
def test_a_folder_reopens_to_the_same_advice(tmp_path, competing):
    a = _advice(competing, deadline="10min")
    html = folder.write(a, tmp_path / "advice").read_text()
    assert a.recommended.config.label in html and "data:image/png;base64," in html
    assert "xfer send" in html and ("<th>harm</th>" in html) == bool(competing)
    stored = json.loads((tmp_path / "advice" / folder.ADVICE_FILE).read_text())
    assert stored["recommended"] == a.as_dict()["recommended"]
    assert pq.read_table(tmp_path / "advice" / folder.RUNS_FILE).num_rows == a.ran
    again = folder.load(tmp_path / "advice")
    assert again.as_dict() == a.as_dict()  # every row, the choice and the default, re-derived from the runs
    (tmp_path / "advice" / page.PAGE_FILE).unlink()
    r = CliRunner().invoke(cli.app, ["campaign", "report", str(tmp_path / "advice")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "advice" / page.PAGE_FILE).read_text() == html


def test_the_figure_draws_p99_against_harm_with_competition_and_against_streams_without():
    for competing in (0, 1):
        a = _advice(competing)
        png = page.figure(a, a.table)
        assert png is not None and png[:4] == b"\x89PNG" and len(png) > 10_000


def test_advise_out_end_to_end_and_a_second_time_into_the_same_folder_is_refused(tmp_path):
    out = tmp_path / "adv"
    r = CliRunner().invoke(cli.app, ["advise", *SMALL, "--budget", "3s", "--competing", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert f"advice: {out / page.PAGE_FILE}" in r.output.replace("\n", "")
    d = json.loads((out / folder.ADVICE_FILE).read_text())
    a = folder.load(out)
    assert a.as_dict()["recommended"] == d["recommended"] and a.ran == d["campaign"]["ran"] > 0
    r = CliRunner().invoke(cli.app, ["advise", *SMALL, "--budget", "3s", "--out", str(out)])
    assert r.exit_code == 2 and "already exists" in r.output and "Traceback" not in r.output


def _tamper(tmp_path: Path, change) -> Path:
    out = tmp_path / "advice"
    folder.write(_advice(), out)
    change(out)
    return out


def _edit_json(edit):
    def change(out: Path) -> None:
        p = out / folder.ADVICE_FILE
        d = json.loads(p.read_text())
        edit(d)
        p.write_text(json.dumps(d))

    return change


def _symlink_runs(out: Path) -> None:
    (out / folder.RUNS_FILE).unlink()
    os.symlink("/etc/passwd", out / folder.RUNS_FILE)


def _junk_runs(out: Path) -> None:
    (out / folder.RUNS_FILE).write_bytes(b"PAR1 not a table")


def _nan_series(out: Path) -> None:
    t = pq.read_table(out / folder.RUNS_FILE).to_pylist()
    t[0]["job_bps"] = [float("nan")] * len(t[0]["job_bps"])
    pq.write_table(folder.pa.Table.from_pylist(t, schema=folder.RUNS_SCHEMA), out / folder.RUNS_FILE)


HOSTILE = {
    "not tagged": (_edit_json(lambda d: d.pop("format")), "not an advice of xferlab"),
    "a newer version": (_edit_json(lambda d: d.update(version=99)), "version 99"),
    "a negative RTT": (_edit_json(lambda d: d["question"].update(rtt_s=-0.02)), "--rtt"),
    "a variant as a command": (
        _edit_json(lambda d: d["configurations"][0].update(variant="cubic; touch /tmp/xferlab-pwned")),
        "unknown variant",
    ),
    "pacing above the path": (_edit_json(lambda d: d["configurations"][1].update(pacing=5.0)), "pacing"),
    "a zero interval": (_edit_json(lambda d: d["method"].update(interval_s=0.0)), "goodput interval"),
    "a million configurations": (_edit_json(lambda d: d.update(configurations=d["configurations"] * 100)), "more than"),
    "runs as a link": (_symlink_runs, "not a regular file"),
    "runs not parquet": (_junk_runs, "cannot read the runs"),
    "a NaN series": (_nan_series, "non-finite"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_damaged_or_hostile_advice_folder_is_one_line_and_exit_2(tmp_path, case):
    change, said = HOSTILE[case]
    out = _tamper(tmp_path, change)
    with pytest.raises(AdviceError, match=said.replace("(", r"\(")):
        folder.load(out)
    r = CliRunner().invoke(cli.app, ["campaign", "report", str(out)])
    assert r.exit_code == 2 and r.output.startswith("error:") and "Traceback" not in r.output, r.output
    assert not Path("/tmp/xferlab-pwned").exists()
