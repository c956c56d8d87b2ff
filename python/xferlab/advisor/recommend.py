"""From the runs to the advice: a row per configuration tried (its predicted completion
time and its harm to the competing flows) and the one recommended.

**The choice.** With competing flows, a configuration is eligible when its harm is at most
the larger of the default's and the fair share's (1/(n + 1) of the competitors' goodput
for n competitors, what a job taking exactly its share would cost them) plus
HARM_SLACK: the advisor does not buy speed by starving others. Among the eligible ones:
with a deadline, those meeting it with probability ≥ DEADLINE_CONFIDENCE and harming the
competitors at most HARM_SLACK more than the least harmful of them, the simplest; when
none does, the most likely to meet it; without a deadline, the shortest p99.
Configurations within NEAR of the best p99 count as equal and the simplest wins (fewer
streams, then no pacing, then the default variant).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .candidates import DEFAULT, Config, Plan
from .predict import Prediction, harm, predict, whole
from .question import Question
from .runs import Results

#: Harm above the default's or the fair share's that is still acceptable (percentage points / 100).
HARM_SLACK = 0.05
#: The probability of meeting the deadline the advisor wants.
DEADLINE_CONFIDENCE = 0.99
#: p99 completion times within this share of the best are equal.
NEAR = 0.02


@dataclass(frozen=True)
class Row:
    config: Config
    repetitions: int
    prediction: Prediction
    harm: float | None

    def as_dict(self) -> dict:
        return {
            **self.config.as_dict(),
            "label": self.config.label,
            "repetitions": self.repetitions,
            **self.prediction.as_dict(),
            "harm": self.harm,
        }


def rows(results: Results, configs: list[Config], q: Question, p: Plan, seed: int = 0) -> list[Row]:
    """A row per configuration with at least one run, in the order tried."""
    rng = np.random.default_rng(seed)
    baseline = {r["rep"]: r for r in results.of(None)}
    out = []
    for c in configs:
        runs = results.of(c)
        if not runs:
            continue
        if p.whole:
            done = [r["completion_s"] for r in runs if r["completion_s"] is not None]
            pred = whole(done, q) if done else predict([r["job_bps"] for r in runs], q, p, rng)
        else:
            pred = predict([r["job_bps"] for r in runs], q, p, rng)
        out.append(Row(c, len(runs), pred, harm(runs, baseline, q, p)))
    return out


def _simplicity(c: Config) -> tuple:
    return (c.streams, c.pacing is not None, c.variant != DEFAULT.variant)


def eligible(table: list[Row], q: Question) -> list[Row]:
    """The rows the harm rule allows (all of them without competition)."""
    if not q.competing:
        return table
    default = default_row(table) or table[0]
    limit = max(default.harm or 0.0, 1 / (q.competing + 1)) + HARM_SLACK
    return [r for r in table if r.harm is None or r.harm <= limit] or [default]


def choose(table: list[Row], q: Question) -> Row:
    """The recommended row (see the module's rule)."""
    eligible_rows = eligible(table, q)
    if q.deadline_s is not None:
        sure = [r for r in eligible_rows if (r.prediction.p_deadline or 0.0) >= DEADLINE_CONFIDENCE]
        if sure:
            least = min(r.harm or 0.0 for r in sure)
            gentle = [r for r in sure if (r.harm or 0.0) <= least + HARM_SLACK]
            return min(gentle, key=lambda r: (_simplicity(r.config), r.prediction.p99_s))
        best = max(r.prediction.p_deadline or 0.0 for r in eligible_rows)
        eligible_rows = [r for r in eligible_rows if (r.prediction.p_deadline or 0.0) >= best - 0.01]
    fastest = min(r.prediction.p99_s for r in eligible_rows)
    near = [r for r in eligible_rows if r.prediction.p99_s <= fastest * (1 + NEAR)]
    return min(near, key=lambda r: (_simplicity(r.config), r.prediction.p99_s))


#: How many of the fastest eligible configurations are run again at a smaller scale.
CONTENDERS = 3


def contenders(table: list[Row], q: Question) -> list[Config]:
    """The configurations worth a closer look: the default, the choice, and the
    CONTENDERS fastest of those the harm rule allows."""
    picked = [choose(table, q), *sorted(eligible(table, q), key=lambda r: r.prediction.p99_s)[:CONTENDERS]]
    out = [DEFAULT]
    for r in picked:
        if r.config not in out:
            out.append(r.config)
    return out


def default_row(table: list[Row]) -> Row | None:
    return next((r for r in table if r.config == DEFAULT), None)
