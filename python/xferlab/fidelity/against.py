"""The simulator against several kernel runs of each case (``--kernel-runs``: archives or
results directories): against their median, with its seeds' median, held out among them
(judge.held_out), and the tests' power (``controls``: simulators known to differ, judged
the same way); and the kernel against itself (``repeatability``, ``--repeat-of``)."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from . import emulation, simulator
from .judge import (
    held_out,
    held_out_verdicts,
    median_run,
    median_verdict,
    outside_range,
    passed,
    spreads,
    tally,
    verdict,
    within_range,
)
from .matrix import Case, matrix
from .runs import run_case, sim_side
from .settings import OPTIONS
from .store import kernel_run, starts_from_kernel

#: The power of the tests: simulators known to differ from the table's, judged as it is
#: (`--controls`). Each is a change to simulator.run_sim's arguments, or "swap": each case run with
#: another variant's law (Reno for the others, CUBIC for Reno and BBR).
CONTROLS = {
    "the emulation not modelled (plain hosts)": {"plain": True},
    "without TSO deferral": {"tso_defer": False},
    "without host noise": {"noise": False},
    "another variant's law": "swap",
}


def repeatability(other: Path, cases: list[Case]) -> str:
    """The tolerances applied to two kernel runs of each case: this matrix's and an earlier
    one's (stored in ``other``). What a single run of the kernel reproduces of itself bounds
    what a simulator judged against a single run can be seen to match. Then the simulator
    judged against both runs (within_range)."""
    oks, misses, ranged = [], [], []
    for case in cases:
        a, b = kernel_run(OPTIONS.results, case), kernel_run(other, case)
        if a is None or b is None:
            continue
        ok = verdict(a, b) | {"retx": None}  # the simulator's own check: not a comparison
        oks.append(ok)
        if bad := [k for k, good in ok.items() if good is False]:
            misses.append(f"{case.key} ({', '.join(bad)})")
        res = run_case(case, backends_=())
        if res is not None and "failed" not in res:
            sim = {**res["sim_duration"], "makespan_s": res["sim_volume"]["makespan_s"]}
            ranged.append(within_range(sim, [a, b]))
    text = tally(oks).replace("cases hold", "cases' two kernel runs hold")
    text += ".\n\nThe cases whose two kernel runs differ beyond a tolerance: " + "; ".join(misses) + "."
    both = tally(ranged).replace("cases hold every tolerance", "cases hold every tolerance against the two kernel runs")
    return text + f"\n\nThe simulator, each metric within its tolerance of one of the two runs or between them: {both}."


def seeded_side(job: tuple[Case, int, dict | None, str, bool]) -> dict:
    """The simulator's figures for a case run with ``seed`` (not stored), its flows started
    at ``starts`` (per kind, as a kernel run's; None: the scenario's), its receivers' reads
    ``reads`` (settings.READS_MODELS), its senders' TSO deferral ``tso_defer``. One picklable
    argument: a pool's job."""
    case, seed, starts, reads, tso_defer = job
    out = {
        kind: simulator.run_sim(case, kind, seed=seed, starts_s=(starts or {}).get(kind), reads=reads, tso_defer=tso_defer)
        for kind in ("duration", "volume")
    }
    return {**out["duration"], "makespan_s": out["volume"]["makespan_s"]}


def mapped(fn, work: list, jobs: int = 1) -> list:
    """``fn`` over ``work`` in ``jobs`` processes (1: in this one), in order."""
    if jobs <= 1:
        return [fn(job) for job in work]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(fn, work))


def seeded_sides(cases: list[Case], seeds: list[int], starts_from: Path, jobs: int = 1) -> dict[str, list[dict]]:
    """Each case's simulator figures with each of ``seeds`` (seeded_side), its flows
    started as in the kernel run ``starts_from``; ``jobs`` processes (1: in this one)."""
    work = []
    for case in cases:
        starts = starts_from_kernel(starts_from, case)
        work += [(case, seed, starts, OPTIONS.reads, OPTIONS.tso_defer) for seed in seeds]
    figures = mapped(seeded_side, work, jobs)
    out: dict[str, list[dict]] = {}
    for (case, *_), got in zip(work, figures, strict=True):
        out.setdefault(case.key, []).append(got)
    return out


def control_side(job: tuple[Case, str, dict | None]) -> dict:
    """A case's simulator figures (seed 1, flows started at ``starts``) under the control
    named (CONTROLS). One picklable argument: a pool's job."""
    case, name, starts = job
    change = CONTROLS[name]
    if change == "swap":
        other = {"reno": "cubic", "bbr": "cubic"}.get(case.variant, "reno")
        case, change = Case(other, case.rtt_ms, case.buffer, case.flows), {}
    out = {k: simulator.run_sim(case, k, seed=1, starts_s=(starts or {}).get(k), **change) for k in ("duration", "volume")}
    return {**out["duration"], "makespan_s": out["volume"]["makespan_s"]}


def controls(kernel: dict[str, list[dict]], sims: dict[str, dict], starts_from: Path, jobs: int = 1) -> str:
    """The table's simulator (``sims``) and each of CONTROLS judged three ways: against the
    median of the kernel's runs, held out (held_out_verdicts) and against the range of all
    of a case's runs; the held-out kernel runs beside them. A test that passes a control as
    often as the table's simulator cannot tell the two apart."""
    keys = [k for k, runs in kernel.items() if len(runs) >= 3 and k in sims]
    cases = {c.key: c for c in matrix()}
    work = [(cases[k], name, starts_from_kernel(starts_from, cases[k])) for name in CONTROLS for k in keys]
    figures = mapped(control_side, work, jobs)
    models = {"the table's simulator (seed 1)": {k: sims[k] for k in keys}}
    for (case, name, _), got in zip(work, figures, strict=True):
        models.setdefault(name, {})[case.key] = got
    kernel = {k: kernel[k] for k in keys}
    self_oks, *_ = held_out_verdicts(kernel, {})
    rows = [
        f"| simulator | against the median (of {len(keys)} cases) | held out (of {len(self_oks)}) "
        f"| against the range (of {len(keys)}) |",
        "|---|---:|---:|---:|",
    ]
    for name, figs in models.items():
        median = passed([verdict(figs[k], median_run(kernel[k])) for k in keys])
        _, sim_oks, all_oks = held_out_verdicts(kernel, figs)
        rows.append(f"| {name} | {median} | {passed(sim_oks)} | {passed(all_oks)} |")
    rows.append(f"| (the held-out kernel runs themselves) | | {passed(self_oks)} | |")
    return "\n".join(rows)


def against_runs(
    runs_: list[Path], cases: list[Case], seeds: list[int] | None = None, jobs: int = 1, with_controls: bool = False
) -> str:
    """The simulator (this matrix's stored side, run if missing) against the median of the
    kernel runs in ``runs_`` (archives or results directories), and, for reference, each
    kernel run against the median of the others: how often one run of the kernel holds the
    tolerances against its own median. With ``seeds``, also the median of the simulator's
    runs with those seeds (flows started as in the last kernel run) against the same
    medians, and each side's run-to-run spread (spreads). Then the held-out test
    (held_out), and ``with_controls`` the tests' power (controls)."""
    kernel = {c.key: [r for d in runs_ if (r := kernel_run(d, c)) is not None] for c in cases}
    judged = [c for c in cases if len(kernel[c.key]) >= 2]
    sim_oks, self_oks, sim_figures = [], [], {}
    for case in judged:
        runs = kernel[case.key]
        sim_figures[case.key] = sim_side(case, runs_[-1])
        sim_oks.append(verdict(sim_figures[case.key], median_run(runs)))
        for k, run in enumerate(runs):
            others = median_run(runs[:k] + runs[k + 1 :])
            self_oks.append(verdict(run | {"drops": 0, "retransmissions": 0}, others) | {"retx": None})
    n_runs = [len(kernel[c.key]) for c in judged]
    lo, hi = min(n_runs, default=0), max(n_runs, default=0)
    text = f"The simulator against the median of {lo if lo == hi else f'{lo}–{hi}'} kernel runs per case: {tally(sim_oks)}.\n\n"
    if OPTIONS.reads == "stalls":
        own = sum(all(emulation.traced_records(c, kind) for kind in ("duration", "volume")) for c in judged)
        others = emulation.EMULATION_STALLS.name
        text = f"(Receivers' waits: the case's own kernel runs' in {own} of {len(judged)} cases, else {others}'s.) " + text
    if seeds:
        sims = seeded_sides(judged, seeds, runs_[-1], jobs)
        seeded = tally([median_verdict(sims[c.key], median_run(kernel[c.key])) for c in judged])
        named = ", ".join(map(str, seeds))
        text += f"The median of the simulator's runs with seeds {named} against the same medians: {seeded}.\n\n"
    itself = tally(self_oks).replace("cases hold", "kernel runs hold")
    text += f"Each kernel run against the median of the case's other runs: {itself}."
    if seeds and len(seeds) >= 3:
        text += (
            "\n\nRun to run ((max − min) / median over a case's kernel runs, and over its seeds), in the cases with "
            f"at least three kernel runs: {spreads(kernel, sims)}."
        )
    text += f"\n\n{held_out(kernel, sim_figures)}."
    if seeds:
        # The seeds' own check (retransmissions against drops) is in their tally above.
        medians = {c.key: median_run(sims[c.key]) | {"retransmissions": 0, "drops": 0} for c in judged}
        _, _, all_oks = held_out_verdicts(kernel, medians)
        text += (
            f"\n\nThe median of the simulator's seeds against the range of all of a case's runs: {tally(all_oks)}; "
            f"outside it: {outside_range(kernel, medians)}."
        )
    if with_controls:
        text += "\n\nThe tests' power, cases each simulator holds every tolerance in:\n\n"
        text += controls(kernel, sim_figures, runs_[-1], jobs)
    return text
