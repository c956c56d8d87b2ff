"""benches/ns3_compare.py's table of the kernel beside the two simulators (no ns-3 or kernel
run here: the rows are made up, the judgement is what is tested)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benches"))
import ns3_compare  # noqa: E402


def _row(name: str, sim: float, ns3: float, kernel: float | None, unclean: bool = False) -> ns3_compare.Row:
    """A case whose utilisations are ``sim``, ``ns3`` and ``kernel`` (ceilings of 100)."""
    case = ns3_compare.Case(name, "dumbbell", name, {"protocol": {"variant": "reno"}})
    m = lambda u: {"aggregate_goodput_mbps": 100 * u, "jain_index": 1.0, "bottleneck_drops": 10, "timeouts": 0}  # noqa: E731
    k = None if kernel is None else {"metrics": m(kernel), "unclean": unclean, "error": None, "attempts": 1}
    return ns3_compare.Row(case, m(sim), None, 0.0, m(ns3), {}, 100.0, 100.0, k)


def test_the_kernel_sides_with_the_simulator_nearer_it_where_the_two_disagree():
    rows = [
        _row("agree", 0.96, 0.95, 0.97),  # the simulators within 5 % of each other and of the kernel
        _row("ns3-low", 0.97, 0.65, 0.96),  # ns-3 33 % low, the kernel with xferlab
        _row("sim-high", 0.97, 0.89, 0.90),  # ns-3 8 % low, the kernel with ns-3
        _row("unclean", 0.97, 0.80, 0.97, unclean=True),  # left out of the tally
        _row("no-kernel", 0.97, 0.80, None),
    ]
    assert [ns3_compare.nearer(r) for r in rows[:3]] == ["xferlab", "xferlab", "ns-3"]
    tally = ns3_compare.kernel_tally(rows)
    assert "Of 3 cases with a clean kernel run (1 unclean left out)" in tally
    assert "xferlab is within 5 % of the kernel's utilisation in 2, ns-3 in 2" in tally
    assert "(2 cases) the kernel is nearer xferlab in 1, ns-3 in 1." in tally
    table = ns3_compare.render_kernel(rows)
    assert "| 97.0 % (unclean) |" in table
    assert "| **+7.8 %** |" in table  # xferlab against the kernel in sim-high: 0.97 / 0.90
    assert "no-kernel" not in table


def test_a_case_the_kernel_could_not_run_says_why():
    row = _row("void", 0.97, 0.96, None)
    row.kernel = {"metrics": None, "unclean": False, "error": "the kernel gave flow 0 an impossible window", "attempts": 3}
    assert "no run: void three times (a BPF congestion control's impossible window" in ns3_compare.render_kernel([row])
    assert "Of 0 cases with a clean kernel run" in ns3_compare.kernel_tally([row])
