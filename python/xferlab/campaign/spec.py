"""Campaign files: a scenario, sweep axes and repetitions, expanded into runs.

::

    name: table2-grid
    scenario: ../seed002-table2.yaml        # a path (relative to this file) or an inline mapping
    set: {workload.stagger: 2s}             # overrides of the scenario, as --set
    sweep:                                  # cartesian product of the axes
      protocol.variant: [reno, bic, cubic]
      topology.rtt: [11.5ms, 100ms]
    zip:                                    # axes varied together (equal lengths), crossed with sweep
      workload.congestion_level: [0.5, 1.0]
      workload.reverse: [0.0, 1.0]
    repetitions: 3                          # each point K times, with seeds derived from the scenario's
    order: random                           # or sequential (default); shuffle_seed fixes the order
    backend: sim
    inventory: hosts.yaml                   # the ssh backend's hosts (relative to this file)

Each run is identified by a stable key: a hash of the fully validated scenario (seed
included), the repetition and the backend. Repetition k of a point runs with the seed
:func:`derive_seed`\\ (scenario seed, k): the same k gives the same seed at every point
(common random numbers), and seeds never repeat within a point.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import datafile, limits
from .. import scenario as sc
from ..scenario import ScenarioError

#: Fields of a campaign file.
FIELDS = (
    "name",
    "description",
    "scenario",
    "set",
    "sweep",
    "zip",
    "repetitions",
    "order",
    "shuffle_seed",
    "backend",
    "inventory",
)


class CampaignError(Exception):
    """A campaign file or folder that cannot be used; the message says why and what to do."""


def derive_seed(base: int, repetition: int) -> int:
    """Seed of repetition ``repetition`` of a scenario whose seed is ``base``."""
    h = hashlib.sha256(f"xferlab-repetition:{base}:{repetition}".encode()).digest()
    return int.from_bytes(h[:8], "big") >> 1  # < 2**63


def family_of(manifest: dict) -> str:
    """What a campaign is, repetitions left out, from its manifest. Two campaigns of one family
    share the runs of the repetitions they both have: a run's key and seed depend on its
    repetition's index, never on how many there are, so a folder can grow in place."""
    return _digest(
        {
            "name": manifest.get("name"),
            "base": manifest.get("scenario"),
            "axes": manifest.get("sweep"),
            "zip": manifest.get("zip"),
            "backend": manifest.get("backend"),
            **({"labels": manifest["labels"]} if manifest.get("labels") else {}),
        }
    )


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def _digest(data: Any, n: int = 16) -> str:
    return hashlib.sha256(_canonical(data).encode()).hexdigest()[:n]


@dataclass(frozen=True)
class RunSpec:
    """One run of a campaign: a sweep point, a repetition, its scenario and key."""

    key: str
    point: int
    repetition: int
    seed: int
    params: dict  # the swept fields of this point: {"protocol.variant": "cubic", ...}
    given: dict  # the scenario as given to the engine (overrides applied, seed set)

    def label(self) -> str:
        axes = " ".join(f"{k.split('.')[-1]}={v}" for k, v in self.params.items())
        return f"{axes} rep={self.repetition}".strip()


@dataclass
class Campaign:
    name: str
    description: str
    base: dict  # the scenario with `set` applied
    axes: dict[str, list]  # cartesian axes
    zipped: dict[str, list]  # axes varied together
    repetitions: int
    order: str
    shuffle_seed: int
    backend: str
    source: str
    labels: dict[str, dict[str, str]] = field(default_factory=dict)  # field → canonical value → label
    runs: list[RunSpec] = field(default_factory=list)
    #: The ssh backend's inventory (a path), given to every run as a backend option.
    inventory: str | None = None
    #: Estimated simulator time of all runs on one core (scenario.cost), shown before a start.
    sim_wall_s: float = 0.0
    #: Experiment time of all runs (what an emulation takes in real time).
    span_s: float = 0.0

    @property
    def swept(self) -> list[str]:
        return [*self.axes, *self.zipped]

    def fingerprint(self) -> str:
        """Identity of the campaign: what runs it holds (not their order)."""
        return _digest(
            {
                "name": self.name,
                "base": self.base,
                "axes": self.axes,
                "zip": self.zipped,
                "repetitions": self.repetitions,
                "backend": self.backend,
                **({"labels": self.labels} if self.labels else {}),
            }
        )

    def family(self) -> str:
        """Identity of the campaign but for its repetitions (see :func:`family_of`)."""
        return family_of(self.manifest())

    def manifest(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "fingerprint": self.fingerprint(),
            "backend": self.backend,
            "scenario": self.base,
            "sweep": self.axes,
            "zip": self.zipped,
            "labels": self.labels,
            "repetitions": self.repetitions,
            "runs": len(self.runs),
            "source": self.source,
            **({"inventory": self.inventory} if self.inventory else {}),
        }

    def options(self) -> dict:
        """The backend options every run is given."""
        return {"inventory": self.inventory} if self.inventory else {}

    def ordered(self) -> list[RunSpec]:
        """Runs in execution order: by point then repetition, or shuffled (reproducibly)."""
        runs = list(self.runs)
        if self.order == "random":
            random.Random(self.shuffle_seed).shuffle(runs)
        return runs


def _points(axes: dict[str, list], zipped: dict[str, list]) -> list[dict]:
    cart = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())] if axes else [{}]
    if not zipped:
        return cart
    n = len(next(iter(zipped.values())))
    rows = [{k: v[i] for k, v in zipped.items()} for i in range(n)]
    return [{**c, **z} for c in cart for z in rows]


#: Top-level scenario fields a sweep may vary whole (besides section.field paths).
_WHOLE_FIELDS = {"seed", "schedule", "requests"}


def _axis_map(value: Any, what: str, source: str, labels: dict[str, dict[str, str]]) -> dict[str, list]:
    """Axes as field → values. An axis given as a mapping ``{label: value}`` names its values
    (``schedule: {ifs: {strategy: ifs}, spaghetti-pacing: {…}}``): reports show the labels,
    recorded in ``labels[field][canonical value]``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CampaignError(f"{source}: {what}: expected a mapping of field → list of values")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or "." not in k and k not in _WHOLE_FIELDS:
            raise CampaignError(
                f"{source}: {what}: {k!r}: expected section.field (e.g. topology.rtt) or schedule, requests, seed"
            )
        if isinstance(v, dict) and v:
            labels[k] = {_canonical(x): str(name) for name, x in v.items()}
            v = list(v.values())
        if not isinstance(v, list) or not v:
            raise CampaignError(f"{source}: {what}.{k}: expected a non-empty list of values (or a mapping label → value)")
        if len({_canonical(x) for x in v}) != len(v):
            raise CampaignError(f"{source}: {what}.{k}: a value is listed twice")
        out[k] = v
    return out


def from_dict(data: Any, source: str = "<campaign>", base_dir: Path | None = None) -> Campaign:
    """Validates a campaign (as read from YAML) and expands it into its runs."""
    if not isinstance(data, dict):
        raise CampaignError(f"{source}: expected a mapping (name, scenario, sweep, repetitions, ...)")
    try:
        data = datafile.plain(data, source)
    except datafile.DataFileError as e:
        raise CampaignError(str(e)) from None
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise CampaignError(f"{source}: unknown field(s) {', '.join(unknown)} (known: {', '.join(FIELDS)})")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise CampaignError(f"{source}: name: required (a short name, used in reports)")
    scen = data.get("scenario")
    if isinstance(scen, str):
        path = Path(scen)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            base = sc.load_raw(path)
        except ScenarioError as e:
            raise CampaignError(f"{source}: scenario: {e}") from None
    elif isinstance(scen, dict):
        base = scen
    else:
        raise CampaignError(f"{source}: scenario: expected a scenario file path or an inline scenario mapping")
    overrides = data.get("set") or {}
    if not isinstance(overrides, dict):
        raise CampaignError(f"{source}: set: expected a mapping of section.field → value")
    for k, v in overrides.items():
        try:
            sc.set_path(base, str(k), v, source)
        except ScenarioError as e:
            raise CampaignError(str(e)) from None
    labels: dict[str, dict[str, str]] = {}
    axes = _axis_map(data.get("sweep"), "sweep", source, labels)
    zipped = _axis_map(data.get("zip"), "zip", source, labels)
    if zipped and len({len(v) for v in zipped.values()}) != 1:
        raise CampaignError(f"{source}: zip: all lists must have the same length")
    both = set(axes) & set(zipped)
    if both:
        raise CampaignError(f"{source}: {', '.join(sorted(both))} is both in sweep and zip")
    reps = data.get("repetitions", 1)
    max_reps = int(limits.REPETITIONS_MAX.value)
    if not isinstance(reps, int) or isinstance(reps, bool) or not 1 <= reps <= max_reps:
        raise CampaignError(f"{source}: repetitions: expected an integer from 1 to {max_reps}, got {reps!r}")
    n_points = math.prod(len(v) for v in axes.values()) * (len(next(iter(zipped.values()))) if zipped else 1)
    if n_points * reps > limits.CAMPAIGN_RUNS_MAX.value:
        raise CampaignError(
            f"{source}: {n_points} sweep point(s) × {reps} repetition(s) = "
            + limits.too_big("", n_points * reps, limits.CAMPAIGN_RUNS_MAX, " runs").strip()
        )
    order = data.get("order", "sequential")
    if order not in ("sequential", "random"):
        raise CampaignError(f"{source}: order: expected sequential or random")
    shuffle_seed = data.get("shuffle_seed", 0)
    if not isinstance(shuffle_seed, int) or isinstance(shuffle_seed, bool):
        raise CampaignError(f"{source}: shuffle_seed: expected an integer")
    backend = data.get("backend", "sim")
    if not isinstance(backend, str):
        raise CampaignError(f"{source}: backend: expected a backend name")
    inventory = _inventory(data, backend, source, base_dir)
    c = Campaign(
        inventory=inventory,
        name=name,
        description=str(data.get("description", "") or ""),
        base=base,
        axes=axes,
        zipped=zipped,
        repetitions=reps,
        order=order,
        shuffle_seed=shuffle_seed,
        backend=backend,
        source=source,
        labels=labels,
    )
    c.runs = expand(c)
    return c


def _inventory(data: dict, backend: str, source: str, base_dir: Path | None) -> str | None:
    """The ssh backend's inventory (a path, relative to the campaign file): needed by ssh, refused otherwise."""
    inv = data.get("inventory")
    if inv is None:
        if backend == "ssh":
            raise CampaignError(f"{source}: inventory: the ssh backend needs the hosts' inventory (a YAML file)")
        return None
    if backend != "ssh":
        raise CampaignError(f"{source}: inventory: only the ssh backend takes an inventory (backend: {backend})")
    if not isinstance(inv, str) or not inv:
        raise CampaignError(f"{source}: inventory: expected a file path")
    path = Path(inv)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return str(path)


def expand(c: Campaign) -> list[RunSpec]:
    runs, keys = [], set()
    for p, point in enumerate(_points(c.axes, c.zipped)):
        params = {k: c.labels.get(k, {}).get(_canonical(v), v) for k, v in point.items()}
        overrides = list(point.items())
        label = ", ".join(f"{k}={v}" for k, v in params.items()) or "the scenario"
        try:
            s = sc.from_dict(c.base, f"{c.source} ({label})", overrides)
            cost = sc.resolve(s)["cost"]  # what `run` would refuse is refused now, before any run
        except ScenarioError as e:
            raise CampaignError(f"{c.source} ({label}): {e}" if label not in str(e) else str(e)) from None
        c.sim_wall_s += cost["sim_wall_s"] * c.repetitions
        c.span_s += cost["span_s"] * c.repetitions
        for k in range(c.repetitions):
            seed = derive_seed(s.seed, k)
            given = json.loads(json.dumps(c.base))
            for path, value in overrides:
                sc.set_path(given, path, value, c.source)
            given["seed"] = seed
            scenario = s.model_copy(update={"seed": seed})
            key = _digest({"scenario": scenario.model_dump(mode="json"), "repetition": k, "backend": c.backend})
            if key in keys:
                raise CampaignError(f"{c.source}: two sweep points give the same scenario ({label}); remove the duplicate")
            keys.add(key)
            runs.append(RunSpec(key=key, point=p, repetition=k, seed=seed, params=params, given=given))
    return runs


def load(path: str | Path, overrides: dict | None = None) -> Campaign:
    """Reads a campaign file; ``overrides`` replace its top-level fields (e.g. repetitions)."""
    p = Path(path)
    try:
        data = datafile.load(p, "campaign")
    except datafile.DataFileError as e:
        raise CampaignError(str(e)) from None
    if isinstance(data, dict) and "workload" in data and "scenario" not in data:
        raise CampaignError(f"{p}: this is a scenario, not a campaign: run it with `xferlab run {p}`")
    if isinstance(data, dict) and overrides:
        data.update(overrides)
    return from_dict(data, str(p), p.parent)
