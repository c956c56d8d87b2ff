"""Backends run a resolved scenario and return the Trace tables.

One module per backend; each exposes ``run(scenario, resolved, progress, **options) -> BackendRun``
(options: the netns backend's ``scale``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa


class BackendError(Exception):
    """The backend cannot run this scenario (a user-facing reason)."""


@dataclass
class BackendRun:
    tables: dict[str, pa.RecordBatch | pa.Table]
    stats: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)


#: progress(simulated_or_elapsed_seconds, total_seconds_or_None)
Progress = Callable[[float, float | None], None]

NAMES = ("sim", "netns")


def get(name: str):
    if name == "sim":
        from . import sim

        return sim
    if name == "netns":
        from . import netns

        return netns
    raise BackendError(f"unknown backend {name!r} (available: {', '.join(NAMES)})")
