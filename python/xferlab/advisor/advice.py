"""The advisor end to end: a question and a budget in, the advice out."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from . import apply, runs
from .candidates import Config, Plan, candidates, check_budget, minimum_budget_s, plan
from .question import Question
from .recommend import DEADLINE_CONFIDENCE, Row, choose, contenders, default_row, rows


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
    finalists: list[Row] = field(default_factory=list)  # the contenders run again at a smaller scale
    final_plan: Plan | None = None
    screen_runs: list[dict] = field(default_factory=list)  # every run of the screening (runs.Results.runs)
    final_runs: list[dict] = field(default_factory=list)  # every run of the contenders' round

    @property
    def scale(self) -> float:
        """The scale the recommendation's figures were simulated at."""
        return (self.final_plan or self.plan).scale

    def notes(self) -> list[str]:
        """What the user should know before trusting the figures."""
        out = []
        if self.scale > 1:
            out.append(
                f"the path was simulated at 1/{self.scale:g} of its rates to fit the budget: loss-based "
                "variants with few streams behave differently with a smaller window (up to 29 % off in "
                "docs/advisor.md's checks); a larger --budget lowers the scale"
            )
        if self.question.deadline_s is not None and (self.recommended.prediction.p_deadline or 0.0) < DEADLINE_CONFIDENCE:
            out.append("no configuration tried meets the deadline with 99 % confidence within the harm allowed")
        if self.left_out:
            out.append(f"{self.left_out} runs did not fit the budget: some configurations have fewer seeds or none")
        if cpu := apply.encryption_note(self.question, self.recommended.config):
            out.append(cpu)
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
                "finalists": [r.as_dict() for r in self.finalists],
                "finalists_method": self.final_plan.as_dict() if self.final_plan else None,
                "xfer": apply.xfer_argv(self.question, c),
                "xfer_auto": apply.xfer_auto_argv(self.question, c),
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


#: The share of the budget the screening of every candidate gets when the contenders are
#: then run again at a smaller scale (the rest).
SCREEN_SHARE = 0.5


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
    refine: bool = True,
) -> Advice:
    """Runs the advisor's campaign within ``budget_s`` and chooses (AdviceError: a budget
    too small for the first runs). When the path has to be scaled to fit every candidate,
    half the budget screens them all and the other half runs the contenders (the default,
    the best three eligible, the choice) again at the smallest scale that fits; the choice
    is made among those."""
    configs = configs or candidates(q.competing)
    first = 2 if q.competing else 1
    p = plan(q, len(configs), budget_s, workers)
    check_budget(p, budget_s, first, workers)
    screen_s = budget_s
    if refine and p.scale > 1 and not p.whole:
        p1 = plan(q, len(configs), budget_s * SCREEN_SHARE, workers)
        if minimum_budget_s(p1, first, workers) <= budget_s * SCREEN_SHARE:
            p, screen_s = p1, budget_s * SCREEN_SHARE
    t0 = clock()
    go = {"progress": progress, "clock": clock, "executor": executor, **({"run": run} if run else {})}
    res = runs.campaign(q, p, configs, screen_s, workers, repetitions, **go)
    table = rows(res, configs, q, p)
    finalists, p2, planned, ran, left_out = [], None, res.planned, len(res.runs), res.left_out
    final_runs: list[dict] = []
    if screen_s < budget_s:
        rest = budget_s - (clock() - t0)
        picks = contenders(table, q)
        p2 = plan(q, len(picks), rest, workers)
        if p2.scale < p.scale and minimum_budget_s(p2, first, workers) <= rest:
            if progress:  # the bar goes on from the screening's runs
                go["progress"] = lambda done, total: progress(ran + done, ran + total)
            res2 = runs.campaign(q, p2, picks, rest, workers, repetitions, **go)
            finalists, final_runs = rows(res2, picks, q, p2), res2.runs
            planned, ran, left_out = planned + res2.planned, ran + len(res2.runs), left_out + res2.left_out
    final = finalists or table
    return Advice(
        q,
        p,
        table,
        choose(final, q),
        default_row(final),
        planned,
        ran,
        left_out,
        budget_s,
        clock() - t0,
        workers,
        finalists,
        p2 if finalists else None,
        res.runs,
        final_runs if finalists else [],
    )
