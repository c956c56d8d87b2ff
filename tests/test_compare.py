"""``xferlab compare``: two runs side by side in one HTML page."""

import errno
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from xferlab import compare
from xferlab.runinfo import differences

DATA = Path(__file__).parent / "data"


def run_cli(*args, check=False):
    """The CLI in this process (faster than a subprocess; same exit status and output)."""
    from types import SimpleNamespace

    from typer.testing import CliRunner
    from xferlab.cli import app

    r = CliRunner().invoke(app, [str(a) for a in args])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    if check:
        assert r.exit_code == 0, r.output
    return SimpleNamespace(returncode=r.exit_code, stdout=r.stdout, stderr=r.stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two simulator runs of one scenario (seeds 7 and 8) and an imported iperf3 run. 8 s: each
    flow has a congestion event after its slow start's (responsiveness counts those)."""
    from conftest import xferlab

    root = tmp_path_factory.mktemp("runs")
    scenario = root / "small.yaml"
    scenario.write_text(
        '{"name": "small", "topology": {"pairs": 2, "access_rate": "1Gbps", "bottleneck_rate": "1Gbps", "rtt": "10ms",'
        ' "buffer": "1.0bdp"}, "workload": {"streams": 1, "duration": "8s"}, "protocol": {"variant": "reno"}, "seed": 7}'
    )
    xferlab("run", scenario, "--out", root / "a", "-q", check=True)
    xferlab("run", scenario, "--set", "seed=8", "--out", root / "b", "-q", check=True)
    xferlab("import", "iperf3", DATA / "iperf3_p2_server.json", "--capacity", "1Gbps", "--out", root / "imp", check=True)
    return root


def test_two_seeds_compare_without_warning(cli, runs):
    p = cli("compare", runs / "a", runs / "b", check=True)
    out = runs / "a" / "compare-b.html"
    assert out.is_file() and "warning" not in p.stderr
    page = out.read_text()
    assert "aggregate goodput G (Mbit/s)" in page and "(B − A)/A" in page and "responsiveness R (RTT)" in page
    assert page.count("<img ") == 5  # aggregate, per flow, cwnd, scatter, distributions
    assert not list((runs / "a").glob(".compare-*tmp*"))


def test_simulator_against_an_import_warns_with_the_differing_fields(cli, runs, tmp_path):
    out = tmp_path / "cmp.html"
    p = run_cli("compare", runs / "a", runs / "imp", "--out", out)
    assert p.returncode == 0, p.stderr
    assert "warning: the scenarios differ" in p.stderr and "pairs" in p.stderr and "streams" in p.stderr
    page = out.read_text()
    assert "The scenarios differ" in page and "imported from iperf3 logs" in page


def test_metric_rows_give_the_relative_difference():
    a = {"aggregate_goodput_mbps": 800.0, "retransmissions": 10, "bottleneck_drops": None, "completion": None}
    b = {"aggregate_goodput_mbps": 900.0, "retransmissions": 5, "bottleneck_drops": 3, "completion": None}
    rows = {r["key"]: r for r in compare.metric_rows(a, b)}
    assert rows["aggregate_goodput_mbps"]["rel"] == pytest.approx(0.125)
    assert rows["retransmissions"]["rel"] == pytest.approx(-0.5)
    assert rows["bottleneck_drops"]["rel"] is None  # unknown on one side: no difference
    assert "completion.mean_s" not in rows  # neither run is volume-bound


def _info(*overrides):
    from xferlab import scenario as sc
    from xferlab.runinfo import RunInfo

    base = ["workload.duration=null", "workload.volume=1GB"]
    s, _ = sc.load(Path(__file__).parent.parent / "scenarios" / "quick.yaml", [*base, *overrides])
    return RunInfo.model_validate(sc.resolve(s))


def test_differences_ignore_seeds_but_not_per_pair_settings():
    # Two seeds of one scenario: start jitter and ideal completion times differ, nothing else.
    assert differences(_info("seed=1"), _info("seed=2")) == []
    # Runs that differ only in a per-pair rate limit are not "the same scenario" (they were).
    d = differences(_info("workload.per_pair=[{rate_limit: 100Mbps}]"), _info("workload.per_pair=[{rate_limit: 200Mbps}]"))
    fields = {k for k, _, _ in d}
    assert "transfers[0].rate_limit_bps" in fields and "flows[0].limiter.rate_bps" in fields
    # What one run does not know (None, as in imports) is not a difference.
    a, b = _info(), _info()
    assert differences(a, b.model_copy(update={"buffer_packets": None})) == []


@pytest.mark.parametrize("which", ["missing", "not a run", "empty"])
def test_a_folder_that_is_not_a_run_is_one_clear_error(cli, runs, tmp_path, which):
    bad = tmp_path / "bad"
    if which != "missing":
        bad.mkdir()
    if which == "not a run":
        (bad / "run.json").write_text("{}")
    p = run_cli("compare", runs / "a", bad, "--out", tmp_path / "x.html")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert str(bad) in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.html").exists()


@pytest.mark.browser
def test_compare_page_loads_its_images_in_a_browser(runs, tmp_path):
    from test_report_browser import ARGS, CHROMIUM

    if CHROMIUM is None:
        pytest.skip("chromium is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    out = tmp_path / "cmp.html"
    compare.compare(runs / "a", runs / "imp", out)
    shutil.copy(out, tmp_path / "copy.html")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        problems = []
        page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(out.as_uri())
        page.wait_for_load_state("load")
        images = page.evaluate("Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight])")
        browser.close()
    assert len(images) == 5, images
    for alt, complete, w, h in images:
        assert complete and w > 300 and h > 200, (alt, w, h)
    assert problems == []


def test_imported_trace_has_exactly_the_simulators_schemas(runs):
    import pyarrow.parquet as pq

    for name in ("flows", "goodput", "link", "tcp"):
        sim = pq.read_schema(runs / "a" / "trace" / f"{name}.parquet")
        imp = pq.read_schema(runs / "imp" / "trace" / f"{name}.parquet")
        assert imp.equals(sim, check_metadata=False), name


@pytest.mark.parametrize(
    "out,status,words",
    [
        ("/proc/compare.html", 1, "cannot write: /proc takes no new files"),
        ("/proc/self/status", 1, "cannot write: /proc/self takes no new files"),
        ("/dev/null", 2, "exists and is not a regular file; choose another --out"),
        ("", 2, "is a folder; --out wants an HTML file name"),
        ("MINE", 2, "exists and is not a comparison page of xferlab; it is left as it is"),
    ],
)
def test_compare_refuses_an_out_it_cannot_or_must_not_write(runs, tmp_path, out, status, words):
    # /proc or a read-only folder gave an internal error; a user's file was overwritten.
    if out == "MINE":
        out = tmp_path / "thesis.tex"
        out.write_text("mine")
    p = run_cli("compare", runs / "a", runs / "b", "--out", out)
    assert p.returncode == status and p.stderr.startswith(f"error: {Path(out)}"), p.stderr
    assert words in p.stderr and len(p.stderr.strip().splitlines()) == 1
    if out == tmp_path / "thesis.tex":
        assert out.read_text() == "mine"


@pytest.mark.parametrize("err", [errno.EROFS, errno.ENOSPC])
def test_compare_to_a_read_only_or_full_disk_is_an_environment_error(runs, tmp_path, monkeypatch, err):
    def refuse(*args, **kwargs):
        raise OSError(err, os.strerror(err), str(tmp_path / ".c.html.tmp-x"))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    p = run_cli("compare", runs / "a", runs / "b", "--out", tmp_path / "c.html")
    assert p.returncode == 1 and p.stderr == f"error: {tmp_path / 'c.html'}: cannot write: {os.strerror(err)}\n"
    monkeypatch.undo()  # an earlier page is replaced: it is one of ours
    assert run_cli("compare", runs / "a", runs / "b", "--out", runs / "a" / "compare-b.html").returncode == 0
