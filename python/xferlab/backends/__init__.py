"""Backends run a resolved scenario and return its :class:`~xferlab.trace.Trace`.

One module per backend; each exposes ``run(scenario, resolved, progress, **options) -> Trace``
(options: the netns backend's ``scale``, the ssh backend's ``inventory``). Which congestion controls a backend runs is its
own to say.
"""

from __future__ import annotations

import importlib

from .base import BackendError, Progress

__all__ = ["BackendError", "Progress", "get", "NAMES"]

#: Each backend's module, imported when it is first asked for: the real-host backends bring
#: asyncssh, the planner and their tools (2 s), which a simulator run never needs.
NAMES = ("sim", "netns", "ssh")


def get(name: str):
    if name not in NAMES:
        raise BackendError(f"unknown backend {name!r} (available: {', '.join(NAMES)})")
    return importlib.import_module(f".{name}", __name__)
