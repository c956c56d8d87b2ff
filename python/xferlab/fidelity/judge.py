"""The judgement: what "agrees" means per metric (TOLERANCE), the simulator's figures against
one kernel run (``verdict``), against several (``within_range``: within a tolerance of one of
them or between them; ``median_run``), each kernel run in turn held out against its fellows
(``held_out_verdicts``), run-to-run spreads, and the tallies the tables print. Figures in,
verdicts and sentences out: nothing here runs or reads a file."""

from __future__ import annotations

import numpy as np

#: What "agrees" means, per metric (issue 11).
TOLERANCE = {"goodput": 0.05, "jain": 0.05, "ss_exit": 0.20, "completion": 0.05, "retx_over_loss": 1.10}
#: What the table compares of each run, by tolerance.
COMPARED = {"goodput": "goodput_mbps", "jain": "jain", "ss_exit": "ss_ssthresh", "completion": "makespan_s"}
#: A run-to-run spread this large counts as a case that does not reproduce itself.
SPREAD_BIG = 0.10


def distance(a: dict, b: dict) -> float | None:
    """Mean |cwnd_sim − cwnd_netns| over the mean netns cwnd, flows and grid points together."""
    num, den = 0.0, 0.0
    a, b = {str(k): v for k, v in a.items()}, {str(k): v for k, v in b.items()}  # JSON keys are strings
    for k in set(a) & set(b):
        x, y = np.asarray(a[k], float), np.asarray(b[k], float)
        ok = ~np.isnan(x) & ~np.isnan(y)
        num += float(np.abs(x[ok] - y[ok]).sum())
        den += float(y[ok].sum())
    return num / den if den else None


def rel(a, b) -> float | None:
    """(a − b) / b, None where either is unknown or b is 0."""
    return None if a is None or b is None or not b else (a - b) / b


def verdict(sim: dict, net: dict) -> dict:
    """Each tolerance checked: True, False, or None where it does not apply."""
    tol = TOLERANCE
    ss = rel(sim.get("ss_ssthresh"), net.get("ss_ssthresh"))
    drops = sim["drops"]
    return {
        "goodput": abs(rel(sim["goodput_mbps"], net["goodput_mbps"])) <= tol["goodput"],
        "jain": abs(sim["jain"] - net["jain"]) <= tol["jain"],
        "ss_exit": None if ss is None else abs(ss) <= tol["ss_exit"],
        "completion": None
        if sim.get("makespan_s") is None or net.get("makespan_s") is None
        else abs(rel(sim["makespan_s"], net["makespan_s"])) <= tol["completion"],
        "retx": sim["retransmissions"] <= tol["retx_over_loss"] * drops if drops else sim["retransmissions"] == 0,
    }


def verdicts(res: dict, sim: str = "sim") -> dict:
    """A case's results (runs.run_case's) judged: the ``sim`` side ("sim" or "simplain")
    against the kernel's, duration and volume runs together."""
    sd, sv = res[f"{sim}_duration"], res[f"{sim}_volume"]
    nd, nv = res["netns_duration"], res["netns_volume"]
    return verdict({**sd, "makespan_s": sv["makespan_s"]}, {**nd, "makespan_s": nv["makespan_s"]})


def tally(oks: list[dict]) -> str:
    """Verdicts counted, as the tables say it: how many cases hold every tolerance, and
    each tolerance's count where it applied."""
    counts, passed = {k: [0, 0] for k in ("goodput", "jain", "ss_exit", "completion", "retx")}, 0
    for ok in oks:
        for k, good in ok.items():
            if good is not None:
                counts[k][0] += bool(good)
                counts[k][1] += 1
        passed += all(g is not False for g in ok.values())
    names = {"goodput": "goodput ±5 %", "jain": "Jain ±0.05", "ss_exit": "slow-start exit ±20 %"}
    names |= {"completion": "completion ±5 %", "retx": "sim retransmissions ≤ 1.1 × drops"}
    summary = "; ".join(f"{names[k]}: {a}/{b}" for k, (a, b) in counts.items() if b)
    return f"**{passed} of {len(oks)} cases hold every tolerance** ({summary})"


def passed(oks: list[dict]) -> int:
    """How many of ``oks`` (verdicts) hold every tolerance that applies."""
    return sum(all(g is not False for g in ok.values()) for ok in oks)


def within_range(sim: dict, runs: list[dict]) -> dict:
    """Each tolerance checked against several kernel runs of a case: the simulator holds it
    if it is within the tolerance of one of them or between them."""
    per_run = [verdict(sim, r) for r in runs]
    out = {}
    for k in per_run[0]:
        if all(v[k] is None for v in per_run):
            out[k] = None
            continue
        field = COMPARED.get(k)
        values = [r.get(field) for r in runs] if field else []
        between = field is not None and None not in values and sim.get(field) is not None
        between = between and min(values) <= sim[field] <= max(values)
        out[k] = any(v[k] for v in per_run) or between
    return out


def median_run(runs: list[dict]) -> dict:
    """The per-metric median of several kernel runs of a case (a metric missing from a run is
    left out of its median)."""
    out = {}
    for field in COMPARED.values():
        values = [r[field] for r in runs if r.get(field) is not None]
        out[field] = float(np.median(values)) if values else None
    return out


def median_verdict(sims: list[dict], net: dict) -> dict:
    """The tolerances checked for the median of several simulator runs of a case (seeds)
    against ``net``; the simulator's own check (retransmissions against drops) must hold
    in every run."""
    ok = verdict(median_run(sims) | {"retransmissions": 0, "drops": 0}, net)
    return ok | {"retx": all(verdict(s, net)["retx"] for s in sims)}


def spread(xs: list) -> float | None:
    """How far apart runs of a case came out: (max − min) / median, None for fewer than two."""
    xs = [x for x in xs if x is not None]
    return (max(xs) - min(xs)) / float(np.median(xs)) if len(xs) >= 2 and np.median(xs) else None


def spreads(kernel: dict[str, list[dict]], sims: dict[str, list[dict]], at_least: int = 3) -> str:
    """The run-to-run spread of each compared metric on both sides, over the cases with
    ``at_least`` kernel runs (and as many seeds)."""
    keys = [k for k, runs in kernel.items() if len(runs) >= at_least and len(sims.get(k, [])) >= at_least]
    names = {"goodput_mbps": "goodput", "jain": "Jain", "ss_ssthresh": "slow-start exit", "makespan_s": "completion"}
    parts = []
    for field, name in names.items():
        k = [x for key in keys if (x := spread([r.get(field) for r in kernel[key]])) is not None]
        s = [x for key in keys if (x := spread([r.get(field) for r in sims[key]])) is not None]
        if k and s:
            big = lambda v: sum(x > SPREAD_BIG for x in v)  # noqa: E731
            parts.append(
                f"{name}: over {SPREAD_BIG * 100:.0f} % in {big(k)} of {len(k)} cases on the kernel and {big(s)} of "
                f"{len(s)} on the simulator (mean spread {np.mean(k):.3f} and {np.mean(s):.3f})"
            )
    return "; ".join(parts)


def held_out_verdicts(kernel: dict[str, list[dict]], sims: dict[str, dict], at_least: int = 3) -> tuple[list, list, list]:
    """The range test made fair: in each case with ``at_least`` kernel runs, each run in turn
    is held out, and both it and the simulator (``sims``: one figure set per case) are judged
    against the range of the others (within_range): each metric within its tolerance of one
    of them or between them. Both sides face the same references, so the two tallies say
    whether the simulator stands among the kernel's runs as often as one of them does.
    Returns the held-out kernel runs' verdicts, the simulator's against the same ranges, and
    the simulator's against the range of all of each case's runs (cases missing from
    ``sims``: the kernel's verdicts only)."""
    self_oks, sim_oks, all_oks = [], [], []
    for key, runs in kernel.items():
        if len(runs) < at_least:
            continue
        for k, run in enumerate(runs):
            others = runs[:k] + runs[k + 1 :]
            self_oks.append(within_range(run | {"drops": 0, "retransmissions": 0}, others) | {"retx": None})
            if key in sims:
                sim_oks.append(within_range(sims[key], others))
        if key in sims:
            all_oks.append(within_range(sims[key], runs))
    return self_oks, sim_oks, all_oks


def held_out(kernel: dict[str, list[dict]], sims: dict[str, dict], at_least: int = 3) -> str:
    """held_out_verdicts, told, with the cases where the simulator is outside the range of
    all of the case's runs."""
    self_oks, sim_oks, all_oks = held_out_verdicts(kernel, sims, at_least)
    n = sum(len(r) >= at_least for r in kernel.values())
    return (
        f"Held out, in the {n} cases with at least {at_least} kernel runs (each run in turn judged against "
        "the range of the case's other runs, each metric within its tolerance of one of them or between them): "
        f"{tally(self_oks).replace('cases hold', 'held-out kernel runs hold')}; the simulator against the same "
        f"ranges: {tally(sim_oks).replace(' cases hold', ' hold')}. The simulator against the range of all of a "
        f"case's runs: {tally(all_oks)}; outside it: {outside_range(kernel, sims, at_least)}"
    )


def outside_range(kernel: dict[str, list[dict]], sims: dict[str, dict], at_least: int = 3) -> str:
    """The cases where ``sims`` is outside the range of the case's kernel runs (within_range),
    each with the metrics missed: the simulator's figure and the kernel's range."""
    names = {"goodput": ("goodput", "{:.1f} Mbit/s"), "jain": ("Jain", "{:.3f}")}
    names |= {"ss_exit": ("exit", "{:.0f}"), "completion": ("completion", "{:.2f} s")}
    out = []
    for key, runs in kernel.items():
        if len(runs) < at_least or key not in sims:
            continue
        missed = []
        for k, good in within_range(sims[key], runs).items():
            if good is not False:
                continue
            if k not in COMPARED:
                missed.append("retransmissions")
                continue
            name, fmt = names[k]
            values = [r[COMPARED[k]] for r in runs if r.get(COMPARED[k]) is not None]
            lo, hi = fmt.format(min(values)).split()[0], fmt.format(max(values))
            missed.append(f"{name} {fmt.format(sims[key][COMPARED[k]])} against {lo}–{hi}")
        if missed:
            out.append(f"`{key}` ({'; '.join(missed)})")
    return ", ".join(out) or "none"
