"""How far one case's runs spread: the completion time of its volume run repeated on the
kernel (netns) and on the simulator, with and without its host noise (``--dispersion``;
its table comes from `benches/validate.py netns_dispersion`, docs/validation/netns_dispersion.md)."""

from __future__ import annotations

import numpy as np

from .kernel import run_netns
from .matrix import VOLUME_BYTES, Case
from .simulator import run_sim


def _volume_seeds(case: Case, reps: int, **kw) -> list:
    return [run_sim(case, "volume", seed=k, **kw)["makespan_s"] for k in range(1, reps + 1)]


def dispersion(case: Case, reps: int) -> str:
    """Completion time of the same volume run repeated: netns (as is) and the simulator
    with seeds 1..reps (host noise on: the scenario as written, and the emulation), and
    without noise (every seed gives the same run, but for the 1 ms start jitter)."""
    runs = {
        "netns (Linux 6.18)": [run_netns(case, "volume")["makespan_s"] for _ in range(reps)],
        "simulator, host noise on": _volume_seeds(case, reps, plain=True),
        "simulator, the emulation modelled": _volume_seeds(case, reps),
        "simulator, host noise off": _volume_seeds(case, reps, plain=True, noise=False),
    }
    rows = ["| backend | runs | mean (s) | std (s) | CoV | min – max (s) |", "|---|---:|---:|---:|---:|---:|"]
    for name, xs in runs.items():
        a = np.asarray([x for x in xs if x is not None], float)
        rows.append(
            f"| {name} | {a.size} | {a.mean():.3f} | {a.std(ddof=1):.3f} | {a.std(ddof=1) / a.mean():.4f} "
            f"| {a.min():.3f} – {a.max():.3f} |"
        )
    return f"Case {case.key}, {VOLUME_BYTES / 1e6:.0f} MB:\n\n" + "\n".join(rows)
