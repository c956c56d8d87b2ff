"""A case's side on the simulator: the scenario configured as the emulation (emulation.py), or
as written (``plain``), run, and summarised as a backend's run is (figures.summarize)."""

from __future__ import annotations

import time

from .. import metrics, scenario
from ..backends import sim as sim_backend
from ..trace import Trace
from . import emulation
from .figures import sim_samples, summarize
from .matrix import DURATION_S, SAMPLE_S, Case
from .settings import OPTIONS


def sim_trace(case: Case, kind: str, duration_s: float = DURATION_S, **options) -> Trace:
    """The simulator's trace of ``case``, configured by sim_setup (its ``options``)."""
    cfg, r = sim_setup(case, kind, duration_s, **options)
    return sim_backend.run_config(cfg, r)


def sim_setup(
    case: Case,
    kind: str,
    duration_s: float = DURATION_S,
    seed: int | None = None,
    plain: bool = False,
    noise: bool = True,
    starts_ns: list[int] | None = None,
    noise_fields: dict | None = None,
    reads: str | None = None,
    tso_defer: bool | None = None,
) -> tuple[dict, dict]:
    """The simulator's configuration of ``case`` and its resolved scenario: the emulated
    network and host (`plain`: the scenario as it reads, on quiet hosts with real
    interfaces); ``starts_ns``: each flow's start (ns) instead of the scenario's;
    ``noise_fields``: host-noise fields (NoiseConfig) set over the resulting
    configuration's; ``reads``: the emulated receivers' reads (settings.READS_MODELS, default
    Options.reads); ``tso_defer``: the senders' TSO deferral (default Options.tso_defer)."""
    data = case.scenario(kind, duration_s)
    data["measure"]["tcp_interval"] = f"{SAMPLE_S}s"
    if seed is not None:
        data["seed"] = seed
    s = scenario.from_dict(data, data["name"])
    r = scenario.resolve(s)
    cfg = sim_backend.sim_config(r)
    cfg["noise"]["enabled"] = noise
    cfg["tcp"]["tso_defer"] = OPTIONS.tso_defer if tso_defer is None else tso_defer
    if not plain:
        stalls = emulation.case_stalls_ns(case, kind) if (reads or OPTIONS.reads) == "stalls" else None
        cfg = emulation.emulated(cfg, kind, reads, stalls)
    cfg["noise"].update(noise_fields or {})
    if starts_ns is not None:
        for flow, start in zip(cfg["flows"], starts_ns, strict=True):
            flow["start_ns"] = start
    return cfg, r


def run_sim(
    case: Case,
    kind: str,
    duration_s: float = DURATION_S,
    seed: int | None = None,
    plain: bool = False,
    noise: bool = True,
    starts_s: list[float] | None = None,
    reads: str | None = None,
    tso_defer: bool | None = None,
) -> dict:
    """The simulator's side, summarised as a backend's run is (see sim_trace). ``starts_s``:
    each flow's start, as the kernel's flows started (figures.kernel_starts); with one flow the
    scenario's start is kept."""
    t0 = time.perf_counter()
    starts_ns = [round(x * 1e9) for x in starts_s] if starts_s and len(starts_s) > 1 else None
    trace = sim_trace(
        case, kind, duration_s, seed=seed, plain=plain, noise=noise, starts_ns=starts_ns, reads=reads, tso_defer=tso_defer
    )
    stats = {"wall_s": time.perf_counter() - t0, **trace.provenance.stats}
    m = metrics.compute(trace)
    out = summarize(m, stats, sim_samples(trace) if kind == "duration" else None)
    return out | {"starts_s": starts_s if starts_ns is not None else None}


def run_sim_plain(case: Case, kind: str, starts_s: list[float] | None = None) -> dict:
    """The simulator's side on the scenario as written (quiet hosts, real interfaces)."""
    return run_sim(case, kind, plain=True, starts_s=starts_s)
