"""The simulator's error against Linux on whole transfers, as the advisor widens its band
with it (docs/advisor.md, "On Linux").

The fidelity matrix (VALIDATION.md §3.2) moves 300 MB once on this host's kernel and on the
simulator in each of its cases; the ratio kernel ÷ simulator of their completion times, over
all cases, is how far a simulated completion time may be from Linux's on a path like it. The
ratios are stored in ``data/model_error.json`` (``benches/advise_error.py`` makes it from
the table); the advisor's band on Linux is [p1 × q05, p99 × q95] of them: the simulator's
own spread, widened by the error 90 % of the matrix's cases stayed within.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources

import numpy as np

#: The stored ratios (in the package, so that an installed xferlab has them).
DATA = str(resources.files("xferlab").joinpath("data/model_error.json"))
#: The share of the matrix's cases the band's error covers (5th to 95th percentile).
COVER = 0.90
#: A completion cell of the fidelity table: "simulator / kernel" in seconds.
_CELL = re.compile(r"^([\d.]+) / ([\d.]+)$")


def ratios_of(table: str) -> list[float]:
    """Kernel ÷ simulator completion time of every case of the fidelity table that has both."""
    rows = [r for r in table.splitlines() if r.startswith("|") and not r.startswith("|---")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    col = head.index("completion (s)")
    out = []
    for r in rows[1:]:
        m = _CELL.match(r.strip("|").split("|")[col].strip())
        if m and float(m.group(1)) > 0:
            out.append(round(float(m.group(2)) / float(m.group(1)), 4))
    return sorted(out)


@cache
def bounds() -> tuple[float, float]:
    """(q05, q95) of the stored ratios: the factors the band's ends take."""
    ratios = json.loads(resources.files("xferlab").joinpath("data/model_error.json").read_text())["ratios"]
    lo, hi = np.quantile(ratios, [(1 - COVER) / 2, (1 + COVER) / 2])
    return float(lo), float(hi)


def band(p1_s: float, p99_s: float) -> tuple[float, float]:
    """The completion time on Linux the advice expects in 90 % of paths like the matrix's."""
    lo, hi = bounds()
    return p1_s * min(lo, 1.0), p99_s * max(hi, 1.0)
