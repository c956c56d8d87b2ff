"""The emulated flows' ACK clocks, traced with ftrace's ``tcp/tcp_probe`` while a netns run
lasts: every segment a socket receives, in the kernel — the senders' ACKs with their
``snd_una`` and ``snd_nxt``, the receivers' data with its length (and no sequence number) —
cheap enough that the run keeps its goodput. The event fires where TCP processes a segment
(``tcp_rcv_established``): after the socket's backlog when its application held the socket,
so a time is when the segment was processed, not when it arrived.

Shared by benches/ack_delays.py (a case's delays and trains, printed) and the fidelity bench
(whose kernel runs of the matrix keep theirs, ``fidelity.kernel.run_netns_once``): ``traced`` records,
``ack_delays`` times each in-order ACK from the data it acknowledges, ``kernel_trains``
measures how the flows interleave at the receivers, and ``record`` keeps a run's as an
archive does (histograms of sched_waits' log-spaced bins). Needs root and tracefs.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import itertools
import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import numpy as np

from .. import constants
from . import ftrace, sched_waits

#: The ftrace instances the tracer owns while a run lasts (one per process, -<pid>).
INSTANCE = ftrace.TRACEFS / "instances" / "xferlab-probes"
EVENTS = ("tcp/tcp_probe",)
#: Per CPU (kB): an event takes ~144 bytes in the ring; a 30 s run of four flows at
#: 280 Mbit/s makes about a million, mostly on one CPU (128 MB a CPU lost 75 000 to 166 000
#: of them in such runs).
BUFFER_KB = 262144
#: tcp_probe's line: time, the socket's own address and its peer's, the segment's payload,
#: the socket's snd_nxt and snd_una before the segment is processed.
LINE = re.compile(
    r"^\s*.+?\s(\d+\.\d+): tcp_probe: .*?src=([\d.]+:\d+) dest=([\d.]+:\d+) .*?data_len=(\d+)"
    r" snd_nxt=0x([0-9a-f]+) snd_una=0x([0-9a-f]+)"
)
#: A flow is a data connection if its receiver got at least this many segments (iperf3's
#: control connection gets a handful).
MIN_SEGMENTS = 1000
SEQ_MOD = 1 << 32
#: What a run's record leaves out at its start: slow start, whose trains are the window's.
SKIP_S = 2.0

#: t (s), the socket's address, its peer's, data_len, snd_una, snd_nxt
Probe = tuple[float, str, str, int, int, int]


class Delays(NamedTuple):
    """A flow's in-order ACKs: each one's delay (s) from the first and from the last data
    segment it acknowledges reaching the receiver, and the segments it acknowledges; of its
    ACKs that acknowledged data, how many, and how many were left out because the receiver
    held data past a hole (``acked``); the bytes it got twice (``counted_ahead``, at the end);
    the bytes all its ACKs acknowledged, in order or not."""

    first: np.ndarray
    last: np.ndarray
    segments: np.ndarray
    advancing: int = 0
    out_of_order: int = 0
    twice: int = 0
    acknowledged: int = 0


@contextlib.contextmanager
def traced() -> Iterator[dict]:
    """tcp_probe on while the block runs; the dict yielded holds, after it, ``trace`` (the
    probes, parsed as they are read) and ``lost`` (events overwritten: the run's first ones),
    or ``error`` if tracing could not be set up."""
    with ftrace.recording(INSTANCE, EVENTS, BUFFER_KB, read=parse) as got:
        yield got


def parse(lines: Iterable[str] | str) -> list[Probe]:
    if isinstance(lines, str):
        lines = lines.splitlines()
    return [(float(g[1]), g[2], g[3], int(g[4]), int(g[6], 16), int(g[5], 16)) for line in lines if (g := LINE.match(line))]


def split(probes: list[Probe]) -> tuple[dict, dict]:
    """Per flow (sender, receiver): the receiver's data as (time, bytes received so far),
    and the sender's ACKs as (time, snd_una before it, snd_nxt before it), both in time order."""
    data, acks, total = collections.defaultdict(list), collections.defaultdict(list), collections.Counter()
    for t, own, peer, length, una, nxt in sorted(probes):
        if length > 0:  # data, at its receiver: the socket's own address is the receiver's
            total[(peer, own)] += length
            data[(peer, own)].append((t, total[(peer, own)]))
        else:
            acks[(own, peer)].append((t, una, nxt))
    flows = [f for f, d in data.items() if len(d) >= MIN_SEGMENTS and f in acks]
    return {f: data[f] for f in flows}, {f: acks[f] for f in flows}


def acked(acks: list[tuple[float, int, int]], t0: float, skip_s: float) -> Iterator[tuple[float, int, int, bool]]:
    """Each of a sender's ACKs from ``t0 + skip_s`` on as (time, from, to, in order): the
    bytes it acknowledges, counted from the first ACK's ``snd_una`` (an ACK's own number is
    the next ACK's ``snd_una``: tcp_probe reads the socket before the ACK; the last has
    none), and whether the receiver held no data past a hole when it sent it.

    A receiver's data events carry no sequence number, only a length: bytes counted there
    are its sequence only while it holds nothing out of order. A duplicate ACK says it may
    (data past a hole, or a segment it had already); until an ACK's ``snd_una`` reaches the
    sender's ``snd_nxt`` at the latest duplicate, every byte sent before it has arrived in
    order. An ACK is in order when its ``from`` has reached that mark."""
    base, mark = acks[0][1], -1
    for (t, una, nxt), (_, next_una, _) in itertools.pairwise(acks):
        lo, hi = (una - base) % SEQ_MOD, (next_una - base) % SEQ_MOD
        if hi <= lo:
            mark = max(mark, (nxt - base) % SEQ_MOD)
        if t - t0 >= skip_s:
            yield t, lo, hi, lo >= mark


def ack_delays(probes: list[Probe], skip_s: float) -> dict[tuple[str, str], Delays]:
    """Per flow, after the first ``skip_s`` of the trace: each in-order ACK (``acked``: the
    receiver held no data past a hole) timed from the data it acknowledges. From the first
    segment, the delay holds the wait for the segment that triggers the ACK (Linux
    acknowledges every second one; a lone one waits for the next, up to a round trip, or for
    the delayed-ACK timer); from the last, it is the ACK's own path — the receiver's
    processing, the return link, the sender's processing."""
    return delays_of(*split(probes), min(p[0] for p in probes), skip_s)


def delays_of(data: dict, acks: dict, t0: float, skip_s: float) -> dict[tuple[str, str], Delays]:
    """ack_delays of flows already split (``split``), the trace starting at ``t0``."""
    out = {}
    for flow, a in acks.items():
        times, received = zip(*data[flow], strict=True)
        ackd = list(acked(a, t0, skip_s))
        first_, last_, segs, advancing, out_of_order, acknowledged = [], [], [], 0, 0, 0
        aheads = counted_ahead(ackd, times, received)
        for (t, lo, hi, in_order), ahead in zip(ackd, aheads, strict=True):
            if hi <= lo:  # a duplicate ACK
                continue
            advancing += 1
            out_of_order += not in_order
            acknowledged += hi - lo
            lo, hi = lo + int(ahead), hi + int(ahead)
            first, last = bisect.bisect_right(received, lo), bisect.bisect_left(received, hi)
            on_data = 0 < first and last < len(received) and received[first - 1] == lo and received[last] == hi
            if in_order and on_data and t > times[last]:
                first_.append(t - times[first])
                last_.append(t - times[last])
                segs.append((hi - lo) / constants.LINUX_MSS)
        twice = int(aheads.max()) if len(aheads) else 0
        out[flow] = Delays(np.array(first_), np.array(last_), np.array(segs), advancing, out_of_order, twice, acknowledged)
    return out


def counted_ahead(ackd: list[tuple[float, int, int, bool]], times: tuple, received: tuple) -> np.ndarray:
    """Per ACK of ``ackd`` (``acked``'s), the bytes its receiver had counted beyond its
    sequence by then, for those in order (0 for the others). Data it got twice (a spurious
    retransmission) stays in the count for good, so that excess only grows over a run: at an
    in-order ACK it is the least, over it and every later one, of the bytes counted by each
    one's arrival beyond what it acknowledges (most ACKs reach the sender before the
    receiver processes more data)."""
    beyond = np.full(len(ackd), np.iinfo(np.int64).max)
    for i, (t, lo, hi, in_order) in enumerate(ackd):
        if hi > lo and in_order:
            k = bisect.bisect_right(times, t) - 1
            beyond[i] = (received[k] if k >= 0 else 0) - hi
    ahead = np.minimum.accumulate(beyond[::-1])[::-1].clip(min=0)
    return np.where(beyond < np.iinfo(np.int64).max, ahead, 0)


def train_length(order: list, weights: list[float]) -> float:
    """Runs of consecutive equal items of ``order``, each weighing the sum of its
    ``weights``: their mean weighted by weight (the run a unit of weight lies in)."""
    runs, run, last = [], 0.0, None
    for item, w in zip(order, weights, strict=True):
        if item != last and last is not None:
            runs.append(run)
            run = 0.0
        run, last = run + w, item
    runs.append(run)
    r = np.asarray(runs)
    return float((r**2).sum() / r.sum()) if r.sum() else float("nan")


def kernel_trains(probes: list[Probe], skip_s: float) -> float:
    """train_length of the flows' data in the order their receivers processed it, each
    segment weighing its length in segments (the order the bottleneck served them, as the
    simulator's capture gives its own), until the first flow's last segment (a volume run's
    flows end one by one: the last alone is one train). Not from the senders' ACKs: in loss
    recovery one ACK acknowledges a round trip's data at once."""
    return trains_of(split(probes)[0], min(p[0] for p in probes), skip_s)


def trains_of(data: dict, t0: float, skip_s: float) -> float:
    """kernel_trains of the receivers' data already split (``split``), the trace starting at ``t0``."""
    end = min(d[-1][0] for d in data.values())
    events = sorted(
        (t, flow, (now - before) / constants.LINUX_MSS)
        for flow, d in data.items()
        for (_, before), (t, now) in itertools.pairwise([(t0, 0), *d])
        if t0 + skip_s <= t <= end
    )
    return train_length([e[1] for e in events], [e[2] for e in events])


def record(probes: list[Probe], lost: int = 0, skip_s: float = SKIP_S) -> dict | None:
    """A run's ACK clocks as an archive keeps them, after its first ``skip_s``: the flows
    seen, their in-order ACKs and the segments each acknowledged (mean), the share of the
    ACKs that acknowledged data sent while the receiver held data past a hole
    (``in_recovery``: left out, ``acked``), the segments the receivers got twice (``twice``,
    at most: their counts corrected, ``counted_ahead``), the segments all the ACKs
    acknowledged (``acknowledged``, those left out too), the trains at the receivers
    (kernel_trains), and the ACK delays from the first and from the last segment
    acknowledged as histograms (sched_waits.histogram); ``lost``: events the tracer
    overwrote (the run's first, on one CPU more than the other: then only ``lost`` is kept,
    the data no longer lining up with the ACKs). None when no flow was traced."""
    if not probes:
        return None
    data, acks = split(probes)  # once: a run's million events sort in seconds
    t0 = min(p[0] for p in probes)
    delays = delays_of(data, acks, t0, skip_s)
    if not delays:
        return None
    if lost:
        return {"flows": len(delays), "lost": lost}
    first, last, segments = (np.concatenate([getattr(d, f) for d in delays.values()]) for f in ("first", "last", "segments"))
    advancing = sum(d.advancing for d in delays.values())
    return {
        "flows": len(delays),
        "acks": int(len(first)),
        "segments_per_ack": round(float(segments.mean()), 3) if len(segments) else None,
        "in_recovery": round(sum(d.out_of_order for d in delays.values()) / advancing, 4) if advancing else None,
        "twice": round(sum(d.twice for d in delays.values()) / constants.LINUX_MSS, 1),
        "acknowledged": round(sum(d.acknowledged for d in delays.values()) / constants.LINUX_MSS, 1),
        "trains": round(trains_of(data, t0, skip_s), 1),
        "from_first": sched_waits.histogram(first),
        "from_last": sched_waits.histogram(last),
        "lost": lost,
    }
