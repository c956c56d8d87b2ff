"""Seed 004's user-oriented benchmark: the grid, and one quick sheet end to end."""

import csv

import pytest
from xferlab.campaign import CampaignError, hstts


def test_the_grid_follows_the_seed_scaled_by_a_tenth():
    c = hstts.campaign(["cubic"], repetitions=2)
    assert c.axes["protocol.variant"] == ["reno", "cubic"]
    assert len(c.runs) == 2 * 2 * 3 * 2 * 2  # variants × RTT × Cg × R × repetitions
    assert {r.params["workload.congestion_level"] for r in c.runs} == {0.5, 1.0, 1.5}
    assert {r.params["workload.reverse"] for r in c.runs} == {0.0, 1.0}
    assert c.base["workload"]["volume"] == "300MB"  # 3000 MB ÷ 10, as the rates
    assert hstts.campaign(["reno"]).axes["protocol.variant"] == ["reno"]
    assert hstts.campaign(["cubic,htcp", "h-tcp"]).axes["protocol.variant"] == ["reno", "cubic", "htcp"]
    with pytest.raises(CampaignError, match="unknown variant"):
        hstts.campaign(["warp"])


@pytest.mark.slow
def test_quick_sheet_puts_the_candidate_beside_reno(tmp_path, cli):
    out = tmp_path / "h"
    p = cli("bench", "hstts", "--variant", "cubic", "--quick", "--repetitions", "1", "--workers", "2", "--out", out)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader((out / "hstts.csv").open()))
    assert [(r["variant"], r["reverse_level"]) for r in rows] == [("cubic", "0.0"), ("cubic", "1.0")]
    for r in rows:
        for col in ("completion_mean_s", "completion_mean_s_ref", "completion_jain_index", "efficiency_ref", "time_ratio"):
            assert float(r[col]) > 0, col
        assert float(r["time_ratio"]) == pytest.approx(float(r["completion_mean_s"]) / float(r["completion_mean_s_ref"]))
    html = (out / "hstts.html").read_text()
    assert "HSTTS result sheet" in html and "Reno" in html
    assert cli("bench", "hstts", "--variant", "warp", "--out", tmp_path / "x").returncode == 2
