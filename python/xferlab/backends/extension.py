"""The compiled simulator (``crates/py``, the ``_sim`` extension): loaded once, with its
version, its variants and the digest that tells one build from another. Light on purpose:
``xferlab version`` reads it without the Trace or the backends."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from types import ModuleType

from .base import BackendError

try:
    from .. import _sim
except ImportError as _e:  # pragma: no cover - a broken install: said when a run is asked for
    _sim = None
    _MISSING = str(_e)


def module() -> ModuleType:
    """The extension, or a :class:`BackendError` saying how to build it."""
    if _sim is None:  # pragma: no cover
        raise BackendError(f"the simulator extension is not built ({_MISSING}); run `make install`")
    return _sim


def version() -> str:
    return module().__version__


@functools.cache
def build_digest() -> str:
    """The compiled simulator's identity: a digest of its extension module's bytes. The
    version stays the same from build to build; results stored by one build can be told
    from another's by this."""
    return hashlib.sha256(Path(module().__file__).read_bytes()).hexdigest()[:12]


def variants() -> list[str]:
    return list(module().variants())
