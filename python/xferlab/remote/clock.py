"""Clock offsets of the hosts against the controller, and start times on the hosts' clocks.

A probe is one round trip over the host's SSH connection to a shell that answers each line
with ``date +%s%N``: the controller notes its clock before (t1) and after (t2), the host's
reading r falls somewhere between, so r − (t1 + t2)/2 is the offset (host − controller) to
within ± (t2 − t1)/2. Of several probes the one with the shortest round trip is kept, as
NTP's clock filter does (Mills, RFC 5905 §10): it is the one least disturbed by queueing and
scheduling. The offset's uncertainty is that probe's half round trip.

A flow that starts at scenario time s is launched at controller time T0 + s, that is at host
time T0 + s + offset; its start error is its launch time read on the host's clock, minus the
offset, minus (T0 + s). The true error lies within the start error ± the offset's uncertainty.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

#: The host's side of a probe: one reading of its clock (ns) per line read, by ``date``, the
#: reader that also times the flows' starts (:mod:`xferlab.remote.launch`): the offset is the
#: one of the clock the starts are scheduled on. ``date`` is a process, started after the
#: request arrives, so the reading falls late in the round trip: a bias inside the uncertainty.
PROBE_SHELL = "while read x; do date +%s%N; done"


@dataclass(frozen=True)
class Offset:
    offset_s: float  # host clock − controller clock
    uncertainty_s: float  # half the round trip of the probe kept
    probes: int

    def dump(self) -> dict:
        return {"offset_ms": self.offset_s * 1e3, "uncertainty_ms": self.uncertainty_s * 1e3, "probes": self.probes}


def best(samples: list[tuple[int, int, int]]) -> Offset:
    """The offset from probes (t1, r, t2) in ns: the one with the shortest round trip."""
    if not samples:
        raise ValueError("no clock probe answered")
    t1, r, t2 = min(samples, key=lambda s: s[2] - s[0])
    return Offset(offset_s=(r - (t1 + t2) / 2) / 1e9, uncertainty_s=(t2 - t1) / 2e9, probes=len(samples))


async def measure(ask: Callable[[], Awaitable[str]], probes: int, now_ns: Callable[[], int] = time.time_ns) -> Offset:
    """The offset of a host whose clock ``ask()`` reads (one line: ns since the epoch)."""
    samples = []
    for _ in range(probes):
        t1 = now_ns()
        line = await ask()
        t2 = now_ns()
        try:
            samples.append((t1, int(line.strip()), t2))
        except ValueError:
            raise ValueError(f"the host's clock reads {line.strip()[:40]!r}, not nanoseconds (GNU date is needed)") from None
    return best(samples)


def host_time_ns(t0_ns: int, start_s: float, offset: Offset) -> int:
    """When, on the host's clock, a flow starting at scenario time ``start_s`` is launched."""
    return t0_ns + round(start_s * 1e9) + round(offset.offset_s * 1e9)


def start_error_s(launched_host_ns: int, t0_ns: int, start_s: float, offset: Offset) -> float:
    """How late (> 0) or early a flow was launched against its scenario time, on the controller's clock."""
    return (launched_host_ns - round(offset.offset_s * 1e9) - t0_ns) / 1e9 - start_s
