"""The advisor's campaign: the simulator runs of every candidate, repetition after
repetition, on a local process pool, within a time budget.

Repetition k of every candidate (and, with competition, of the competing flows alone: the
baseline of the harm) runs before repetition k + 1 of any, so that a budget cut short
leaves every candidate with as many seeds as the others, give or take one. A run is started
only while the time spent plus its expected cost (the cost model, then the mean of the runs
done) fits the budget; what is left out is counted. The clock and the executor can be
given (tests count runs on a fake clock, without a pool).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from dataclasses import dataclass, field

from . import simulate
from .candidates import Config, Plan
from .question import Question

#: Repetitions (seeds) of each candidate at most, however large the budget.
MAX_REPETITIONS = 5


@dataclass
class Results:
    runs: list[dict] = field(default_factory=list)  # each: config (None: baseline), rep, and the series
    planned: int = 0
    left_out: int = 0  # runs the budget did not allow
    wall_s: float = 0.0

    def of(self, config: Config | None) -> list[dict]:
        return [r for r in self.runs if r["config"] == config]


def tasks(q: Question, p: Plan, configs: list[Config], repetitions: int) -> list[dict]:
    """Every run, repetition-major; with competition each repetition starts with its baseline."""
    out = []
    for rep in range(repetitions):
        for c in ([None] if q.competing else []) + list(configs):
            out.append(
                {
                    "id": len(out),
                    "q": q.as_dict(),
                    "plan": p.as_dict(),
                    "config": c.as_dict() if c else None,
                    "rep": rep,
                    "volume": p.whole,
                }
            )
    return out


def workers_default() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def campaign(
    q: Question,
    p: Plan,
    configs: list[Config],
    budget_s: float,
    workers: int,
    repetitions: int = MAX_REPETITIONS,
    progress: Callable[[int, int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    executor: Executor | None = None,
    run: Callable[[dict], dict] = simulate.run,
) -> Results:
    """Runs the tasks within ``budget_s`` (seconds of ``clock``), ``workers`` at a time."""
    todo = tasks(q, p, configs, repetitions)
    res = Results(planned=len(todo))
    t0 = clock()
    pool = executor or ProcessPoolExecutor(workers)
    running: dict = {}
    walls: list[float] = []
    try:
        nxt = 0
        while nxt < len(todo) or running:
            cost = sum(walls) / len(walls) if walls else p.run_cost_s
            while nxt < len(todo) and len(running) < workers and clock() - t0 + cost <= budget_s:
                running[pool.submit(run, todo[nxt])] = todo[nxt]
                nxt += 1
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                task = running.pop(f)
                out = f.result()
                walls.append(out["wall_s"])
                config = Config(**task["config"]) if task["config"] else None
                res.runs.append({**out, "config": config, "rep": task["rep"]})
                if progress:
                    progress(len(res.runs), len(todo))
        res.left_out = len(todo) - nxt
    finally:
        if executor is None:
            pool.shutdown(wait=False, cancel_futures=True)
    res.wall_s = clock() - t0
    return res
