"""What every backend shares: its error and the progress callback it is given."""

from __future__ import annotations

from collections.abc import Callable


class BackendError(Exception):
    """The backend cannot run this scenario (a user-facing reason)."""


#: progress(simulated_or_elapsed_seconds, total_seconds_or_None)
Progress = Callable[[float, float | None], None]
