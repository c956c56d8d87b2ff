"""The report opened in a real headless browser: figures load, nothing logs an error."""

import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs it)")
        pytest.skip("chromium is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def test_report_loads_its_figures_without_errors(browser, cli, small_scenario, tmp_path):
    out = tmp_path / "run"
    cli("run", small_scenario(workload={"volume": "30MB", "duration": None, "streams": 2}), "--out", out, check=True)
    page = browser.new_page()
    problems = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.goto(out.joinpath("report.html").as_uri())
    page.wait_for_load_state("load")
    images = page.evaluate("Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight])")
    assert len(images) >= 5, images  # goodput, distribution, cwnd, queue, completion
    for alt, complete, w, h in images:
        assert complete and w > 300 and h > 100, (alt, w, h)
    assert page.title().startswith("xferlab")
    assert "Summary" in page.inner_text("body")
    assert problems == []
    page.close()
