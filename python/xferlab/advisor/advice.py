"""The advisor end to end: a question and a budget in, the advice out."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from . import apply, runs
from .candidates import Config, Plan, candidates, check_budget, plan
from .question import Question
from .recommend import DEADLINE_CONFIDENCE, Row, choose, default_row, rows


@dataclass(frozen=True)
class Advice:
    question: Question
    plan: Plan
    table: list[Row]
    recommended: Row
    default: Row | None
    planned: int  # runs the campaign would have made without a budget
    ran: int
    left_out: int
    budget_s: float
    wall_s: float
    workers: int

    def notes(self) -> list[str]:
        """What the user should know before trusting the figures."""
        out = []
        if self.plan.scale > 1:
            out.append(
                f"the path was simulated at 1/{self.plan.scale:g} of its rates to fit the budget: loss-based "
                "variants with few streams behave differently with a smaller window (up to 29 % off in "
                "docs/advisor.md's checks); a larger --budget lowers the scale"
            )
        if self.question.deadline_s is not None and (self.recommended.prediction.p_deadline or 0.0) < DEADLINE_CONFIDENCE:
            out.append("no configuration tried meets the deadline with 99 % confidence within the harm allowed")
        if self.left_out:
            out.append(f"{self.left_out} runs did not fit the budget: some configurations have fewer seeds or none")
        return out

    def as_dict(self) -> dict:
        """The whole advice as plain data (an infinite time, a job never done, as null)."""
        c = self.recommended.config
        return finite(
            {
                "question": self.question.as_dict(),
                "method": self.plan.as_dict(),
                "recommended": self.recommended.as_dict(),
                "default": self.default.as_dict() if self.default else None,
                "configurations": [r.as_dict() for r in self.table],
                "xfer": apply.xfer_argv(self.question, c),
                "sysctls": [{"setting": n, "value": v, "why": w} for n, v, w in apply.sysctls(self.question, c)],
                "notes": self.notes(),
                "campaign": {
                    "planned": self.planned,
                    "ran": self.ran,
                    "left_out": self.left_out,
                    "budget_s": self.budget_s,
                    "wall_s": self.wall_s,
                    "workers": self.workers,
                },
            }
        )


def finite(x):
    """``x`` with every infinite or NaN float replaced by None (JSON has neither)."""
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def advise(
    q: Question,
    budget_s: float,
    workers: int,
    configs: list[Config] | None = None,
    repetitions: int = runs.MAX_REPETITIONS,
    progress: Callable[[int, int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    executor: Executor | None = None,
    run: Callable[[dict], dict] | None = None,
) -> Advice:
    """Runs the advisor's campaign within ``budget_s`` and chooses (AdviceError: a budget
    too small for the first runs)."""
    configs = configs or candidates(q.competing)
    p = plan(q, len(configs), budget_s, workers)
    check_budget(p, budget_s, 2 if q.competing else 1, workers)
    extra = {"run": run} if run else {}
    res = runs.campaign(q, p, configs, budget_s, workers, repetitions, progress, clock, executor, **extra)
    table = rows(res, configs, q, p)
    return Advice(
        q, p, table, choose(table, q), default_row(table), res.planned, len(res.runs), res.left_out, budget_s, res.wall_s, workers
    )
