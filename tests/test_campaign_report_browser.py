"""The campaign report opened in a real headless browser: every figure loads, no error."""

import pytest
from test_campaign import TINY, make
from test_report_browser import browser  # noqa: F401 - the fixture
from xferlab.campaign import from_dict, runner
from xferlab.campaign import report as creport

pytestmark = pytest.mark.browser


def test_campaign_report_loads_its_figures_without_errors(browser, tmp_path):  # noqa: F811
    scen = {**TINY, "workload": {**TINY["workload"], "volume": "3MB"}}
    c = from_dict(make(scenario=scen, sweep={"topology.rtt": ["5ms", "20ms"], "workload.streams": [1, 2]}, repetitions=2))
    out = tmp_path / "camp"
    assert runner.run(c, out, workers=2).ok == 8
    path = creport.render(out)
    page = browser.new_page()
    problems = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    images = page.evaluate("Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight])")
    alts = [i[0] for i in images]
    assert alts == [
        "metrics against RTT per variant",
        "total goodput against streams with Altman's model",
        "completion-time CDFs and percentiles",
        "goodput distributions",
    ]
    for alt, complete, w, h in images:
        assert complete and w > 300 and h > 100, (alt, w, h)
    text = page.inner_text("body")
    assert page.title().startswith("xferlab campaign")
    assert "8 run(s) ok, 0 failed" in text and "±" in text
    assert problems == []
    page.close()
