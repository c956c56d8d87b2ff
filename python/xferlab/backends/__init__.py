"""Backends run a resolved scenario and return its :class:`~xferlab.trace.Trace`.

One module per backend; each exposes ``run(scenario, resolved, progress, **options) -> Trace``
(options: the netns backend's ``scale``). Which congestion controls a backend runs is its
own to say.
"""

from __future__ import annotations

from . import netns, sim
from .base import BackendError, Progress

__all__ = ["BackendError", "Progress", "get", "NAMES"]

_BACKENDS = {"sim": sim, "netns": netns}
NAMES = tuple(_BACKENDS)


def get(name: str):
    try:
        return _BACKENDS[name]
    except KeyError:
        raise BackendError(f"unknown backend {name!r} (available: {', '.join(NAMES)})") from None
