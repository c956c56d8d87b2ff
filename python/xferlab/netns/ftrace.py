"""ftrace instances of xferlab's own, for tracing the emulated hosts' kernel while a run
lasts: each tracer (sched_waits' waits, tcp_probes' segments) records into an instance of
its own (``<base>-<pid>``), so that two can trace one run and a killed run's leftovers are
found and removed. Needs root and tracefs (mounted at TRACEFS if it is not).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

TRACEFS = Path("/sys/kernel/tracing")


def new_instance(base: Path) -> Path:
    """An ftrace instance of this process's own (``base``-<pid>), tracefs mounted if it was
    not; those of processes that are gone (killed runs) removed."""
    if not (TRACEFS / "events").exists():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True, capture_output=True)
    for old in base.parent.glob(f"{base.name}-*"):
        pid = old.name.rsplit("-", 1)[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                old.rmdir()
    instance = base.with_name(f"{base.name}-{os.getpid()}")
    if instance.exists():
        instance.rmdir()  # left by a run of this process that failed
    instance.mkdir()
    return instance


def write(instance: Path, name: str, value: str) -> None:
    (instance / name).write_text(value)


def switch(instance: Path, events: tuple[str, ...], on: bool) -> None:
    """Enables or disables ``events`` ("subsystem/event") in ``instance``."""
    for e in events:
        write(instance, f"events/{e}/enable", "1" if on else "0")


def overruns(instance: Path) -> int:
    """Events the instance's ring buffers overwrote (the oldest, once full), over its CPUs."""
    lost = 0
    for stats in (instance / "per_cpu").glob("cpu*/stats"):
        for line in stats.read_text().splitlines():
            if line.startswith("overrun:"):
                lost += int(line.split()[1])
    return lost


@contextlib.contextmanager
def recording(
    base: Path,
    events: tuple[str, ...],
    buffer_kb: int,
    read: Callable[[IO[str]], Any] = lambda f: f.read(),
    enable: bool = True,
    options: tuple[str, ...] = (),
) -> Iterator[dict]:
    """An instance of this process's own (new_instance) records ``events`` while the block
    runs: per-CPU buffers of ``buffer_kb``, the monotonic clock (as time.monotonic), the
    ``options`` ("event-fork") on, the events enabled unless ``enable`` is false (the caller
    enables them, ``got["instance"]``, when it is ready). Yields a dict that holds, once the
    block ends, ``trace`` (``read`` of the instance's text, streamed: a run's may be
    hundreds of MB) and ``lost`` (overruns); or ``error`` if the instance could not be set
    up (no tracefs, not root, no memory for the buffers): the run made in the block is the
    caller's to keep or not."""
    got: dict = {}
    try:
        instance = new_instance(base)
    except (OSError, subprocess.CalledProcessError) as e:
        got["error"] = e
        yield got
        return
    try:
        try:
            write(instance, "buffer_size_kb", str(buffer_kb))  # fails if the memory is not there
            write(instance, "trace_clock", "mono")
            for option in options:
                write(instance, f"options/{option}", "1")
            switch(instance, events, enable)
        except OSError as e:
            got["error"] = e
            yield got
            return
        got["instance"] = instance
        yield got
        switch(instance, events, False)
        with (instance / "trace").open() as f:
            got["trace"] = read(f)
        got["lost"] = overruns(instance)
    finally:
        with contextlib.suppress(OSError):
            switch(instance, events, False)
        instance.rmdir()
