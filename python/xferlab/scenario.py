"""The scenario: one dumbbell experiment, described in YAML and validated here.

The shape is the project's contract (issue 2)::

    name: quick
    topology: {pairs: 4, access_rate: 1Gbps, bottleneck_rate: 2Gbps, rtt: 10ms,
               buffer: 1.0bdp, mtu: 1500}
    workload: {streams: 1, duration: 20s, stagger: 0s}   # or volume: 1GB per transfer
    protocol: {variant: reno}
    measure: {goodput_interval: 0.5s, link_interval: 20ms}
    seed: 1

Quantities are strings with units (see :mod:`xferlab.units`). :func:`load` reads a file,
applies ``--set section.field=value`` overrides and validates; :func:`resolve` turns a
scenario into plain numbers (bit/s, seconds, packets) and the list of flows, which is what
backends consume and what ``run.json`` records as ``resolved``.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from . import constants, datafile, limits, models, variants
from .constants import FRAME_OVERHEAD, IP_TCP_HEADERS, TCP_TIMESTAMPS, qdisc_frame
from .runinfo import RunInfo
from .units import format_duration, format_rate, format_size, parse_duration, parse_rate, parse_size


class ScenarioError(Exception):
    """A scenario that cannot be run; the message names the file and the field."""


# --------------------------------------------------------------------------- quantities
# Each quantity is parsed from text with units and checked against its bounds, which live
# in :mod:`xferlab.limits` with the reason a user is told.


def _quantity(parse, show, *, low: float = 0.0, inclusive: bool = False, floor=None, ceiling=None):
    """A validator: ``parse(v)``, then ``low < x`` (or ``<=``), ``floor <= x <= ceiling``."""

    def check(v: Any) -> float:
        x = parse(v)
        if inclusive and not x >= low:
            raise ValueError(f"must not be negative, got {v!r}")
        if not inclusive and not x > low:
            raise ValueError(f"must be positive, got {v!r}")
        if floor is not None and x < floor.value:
            raise ValueError(f"{show(x)} is under the limit of {show(floor.value)} ({floor.reason})")
        if ceiling is not None and x > ceiling.value:
            raise ValueError(f"{show(x)} is over the limit of {show(ceiling.value)} ({ceiling.reason})")
        return x

    return check


def _duration(v: Any) -> float:
    return parse_duration(v, require_unit=True)


def _size(v: Any) -> int:
    if isinstance(v, float) and not v.is_integer():
        raise ValueError(f"a size is a whole number of bytes, got {v!r}")
    return parse_size(v)


def _schema(kind: str, example: str) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}], "description": kind, "examples": [example]})


def _rate_type():
    check = _quantity(parse_rate, format_rate, floor=limits.RATE_MIN_BPS, ceiling=limits.RATE_MAX_BPS)
    return Annotated[float, BeforeValidator(check), _schema("rate in bits/s, e.g. 10Gbps", "10Gbps")]


def _time_type(example: str, *, inclusive: bool = False, floor=None, ceiling=limits.TIME_MAX_S):
    check = _quantity(_duration, format_duration, inclusive=inclusive, floor=floor, ceiling=ceiling)
    return Annotated[float, BeforeValidator(check), _schema(f"duration with a unit, e.g. {example}", example)]


def _size_type(ceiling):
    check = _quantity(_size, format_size, ceiling=ceiling)
    return Annotated[int, BeforeValidator(lambda v: int(check(v))), _schema("size in bytes, e.g. 15GB", "1GB")]


Rate = _rate_type()
Duration = _time_type("20s", floor=limits.TIME_MIN_S)
Offset = _time_type("0s", inclusive=True)
TimeControlOffset = _time_type("1ms", inclusive=True, ceiling=limits.TIME_CONTROL_MAX_S)
_OFFSET_CHECK = _quantity(_duration, format_duration, inclusive=True, ceiling=limits.TIME_MAX_S)
Rtt = _time_type("11.5ms", floor=limits.TIME_MIN_S, ceiling=limits.RTT_MAX_S)
RtoMin = _time_type("200ms", floor=limits.TIME_MIN_S, ceiling=limits.RTO_MIN_MAX_S)
Interval = _time_type("0.5s", floor=limits.INTERVAL_MIN_S)
Volume = _size_type(limits.VOLUME_MAX_BYTES)
Size = _size_type(limits.SIZE_MAX_BYTES)


def _at_most(limit: limits.Limit):
    """An after-validator for counts: ``x <= limit`` with the limit's reason."""

    def check(x: int) -> int:
        if x > limit.value:
            raise ValueError(limits.too_big("", x, limit).strip())
        return x

    return AfterValidator(check)


class _Model(BaseModel):
    # strict: `true` is not 1 and "4" is not 4 (YAML already gives numbers as numbers).
    model_config = ConfigDict(extra="forbid", validate_default=True, strict=True)


class Shaper(_Model):
    """The bottleneck rate enforced by a limiter on a faster line (e.g. HTB on a 10 GbE port)."""

    limiter: Literal["token_bucket", "pacing"] = "token_bucket"
    line_rate: Rate | None = Field(None, description="rate of the line under the shaper (default: 10 × bottleneck_rate)")
    hz: int = Field(250, ge=10, le=10_000, description="timer frequency of the token bucket")
    burst: Size | None = Field(None, description="token bucket depth (default: one tick of tokens + one frame)")


class Topology(_Model):
    """The dumbbell: `pairs` senders, each with an access link, into one bottleneck."""

    pairs: Annotated[int, _at_most(limits.PAIRS_MAX)] = Field(1, ge=1, description="sender→receiver host pairs")
    access_rate: Rate = Field("1Gbps", description="sender access link capacity")
    bottleneck_rate: Rate = Field("1Gbps", description="shared link capacity")
    rtt: Rtt = Field("10ms", description="round-trip propagation delay")
    buffer: Annotated[int | str, BeforeValidator(lambda v: Topology.check_buffer(v))] = Field(
        "1.0bdp",
        description="bottleneck drop-tail queue: packets (int), '<x>bdp' (bottleneck rate × RTT in "
        "MTU-size packets) or a size in bytes ('256KB')",
    )
    mtu: int = Field(1500, ge=128, le=65535, description="IP MTU in bytes")
    timestamps: bool = Field(True, description="TCP timestamps option (12 bytes per segment)")
    loss_rate: float = Field(0.0, ge=0.0, lt=1.0, description="random (Bernoulli) loss on the bottleneck")
    shaper: Shaper | None = Field(None, description="enforce bottleneck_rate with a limiter on a faster line")

    @staticmethod
    def check_buffer(v: Any) -> int | str:
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise ValueError(f"buffer must be a number of packets, '<x>bdp' or a size, got {v!r}")
        if isinstance(v, int):
            if v < 1:
                raise ValueError(f"buffer must be at least 1 packet, got {v}")
            if v > limits.BUFFER_MAX_PACKETS.value:
                raise ValueError(limits.too_big("buffer", v, limits.BUFFER_MAX_PACKETS, " packets"))
            return v
        text = v.strip()
        if len(text) > 64:
            raise ValueError("buffer: expected packets (int), '<x>bdp' or a size such as '256KB'")
        if text.lower().endswith("bdp"):
            try:
                x = float(text[:-3])
            except ValueError:
                raise ValueError(f"buffer {v!r}: expected '<x>bdp', e.g. '1.0bdp'") from None
            if not (math.isfinite(x) and 0 < x <= 1e6):
                raise ValueError(f"buffer {v!r} must be a positive multiple of the BDP (at most 1e6)")
            return text
        try:
            if not 0 < parse_size(text) <= limits.SIZE_MAX_BYTES.value:
                raise ValueError
        except ValueError:
            raise ValueError(f"buffer {v!r}: expected packets (int), '<x>bdp' or a size such as '256KB'") from None
        return text


def _count(x: float) -> int:
    """A number of sources from a level: the nearest integer, halves rounded up."""
    return int(math.floor(x + 0.5 + 1e-9))


def canonical_variant(v) -> str:
    """A variant's Linux name (ValueError for an unknown one): :func:`xferlab.variants.canonical`."""
    return variants.canonical(v)


Limiter = Literal["pacing", "token_bucket"]


class PairOverride(_Model):
    """Settings of one pair that differ from the scenario-wide ones."""

    variant: str | None = None
    volume: Volume | None = None
    duration: Duration | None = None
    start: Offset | None = Field(None, description="start time of this pair (instead of k × stagger)")
    rtt: Rtt | None = None
    access_rate: Rate | None = None
    rate_limit: Rate | None = Field(None, description="rate limit of this transfer (split over its streams)")
    limiter: Limiter | None = None

    @field_validator("variant")
    @classmethod
    def _variant(cls, v):
        return None if v is None else canonical_variant(v)


class Background(_Model):
    """Unresponsive ON/OFF sources crossing the bottleneck (seed 004's Bg)."""

    level: float = Field(0.0, ge=0.0, le=10.0, description="mean background load, as a share of the bottleneck")
    mean_on: Duration = Field("1s", description="mean ON period (exponential)")
    mean_off: Duration = Field("1s", description="mean OFF period (exponential)")
    rate: Rate | None = Field(None, description="highest sending rate of a source while ON (default: the access rate)")


class Workload(_Model):
    """What each pair transfers: for a duration, or a volume (per transfer), with N streams."""

    streams: Annotated[int, _at_most(limits.STREAMS_MAX)] = Field(1, ge=1, description="parallel TCP streams per pair")
    duration: Duration | None = Field(None, description="each pair sends for this long")
    volume: Volume | None = Field(None, description="bytes each pair transfers (split over its streams)")
    stagger: Offset = Field("0s", description="pair k starts at k × stagger")
    align_end: bool = Field(False, description="staggered pairs all stop together (seed 002 Table II procedure)")
    start_jitter: Offset = Field(
        "1ms", description="each stream starts up to this much later, at random (start skew of real hosts)"
    )
    max_duration: Duration | None = Field(
        None, description="volume runs: give up after this long (default: 10 × the ideal makespan + 60 s)"
    )
    congestion_level: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="Cg = pairs × access rate / bottleneck rate (seed 004); sets topology.pairs",
    )
    reverse: float = Field(
        0.0, ge=0.0, le=100.0, description="reverse traffic level R = reverse sources × access rate / bottleneck rate"
    )
    background: Background = Background()
    per_pair: list[PairOverride] = Field(
        default_factory=list, description="per-pair settings; pair k uses entry k modulo the list length"
    )

    @model_validator(mode="after")
    def _one_of(self, info: ValidationInfo) -> Workload:
        if (info.context or {}).get("requests"):  # the requests carry the volumes
            if self.duration is not None or self.volume is not None:
                raise ValueError("with requests, the volumes are the requests': remove workload.duration and workload.volume")
            if any(o.volume is not None or o.duration is not None for o in self.per_pair):
                raise ValueError("with requests, per_pair cannot set a volume or a duration")
            return self
        if (self.duration is None) == (self.volume is None):
            raise ValueError("give exactly one of workload.duration and workload.volume (or requests)")
        for k, o in enumerate(self.per_pair):
            if o.volume is not None and self.volume is None:
                raise ValueError(f"per_pair[{k}].volume needs a volume-based workload (workload.volume)")
            if o.duration is not None and self.duration is None:
                raise ValueError(f"per_pair[{k}].duration needs a duration-based workload (workload.duration)")
        return self


class Protocol(_Model):
    variant: str = Field("reno", description="congestion control, as Linux names it: " + ", ".join(variants.NAMES))
    initial_cwnd: int = Field(10, ge=1, le=1000, description="initial window, segments (RFC 6928)")
    delayed_ack: bool = True
    rto_min: RtoMin = Field("200ms", description="minimum retransmission timeout (Linux TCP_RTO_MIN)")
    window_cap: Size | None = Field(
        None,
        description="the largest window a receiver offers per stream, bytes, rounded up to whole segments "
        "(the real backends size the receive buffer for it); none: not limiting",
    )
    rate_limit: Rate | None = Field(
        None, description="rate limit per transfer, split over its streams, in qdisc frame bytes (IP + 14)"
    )
    limiter: Limiter = Field(
        "pacing", description="how rate_limit is enforced: packet pacing, or a timer-driven token bucket (HTB-like)"
    )
    hz: int = Field(250, ge=10, le=10_000, description="kernel timer frequency of the token bucket (ticks per second)")
    burst: Size | None = Field(None, description="token bucket depth per stream (default: rate/HZ + one frame)")

    @field_validator("variant")
    @classmethod
    def _variant(cls, v: str) -> str:
        return canonical_variant(v)


class Measure(_Model):
    goodput_interval: Interval = Field("0.5s", description="receiver-side goodput sampling (iperf-like)")
    link_interval: Interval = Field("20ms", description="bottleneck sampling (GtrcNET-like)")
    tcp_interval: Interval = Field("100ms", description="sender state sampling (Web100-like)")
    window: Annotated[str | list[float], BeforeValidator(lambda v: Measure.check_window(v))] = Field(
        "all",
        description="time window of the metrics: 'all', 'all-active' (while every flow is active, "
        "as seed 002 Table II) or [start, end]",
    )

    @staticmethod
    def check_window(v: Any) -> str | list[float]:
        if v in ("all", "all-active"):
            return v
        if not isinstance(v, list) or len(v) != 2:
            raise ValueError(f"window must be 'all', 'all-active' or [start, end], got {v!r}")
        start, end = (_OFFSET_CHECK(x) for x in v)
        if not start < end:
            raise ValueError("window must be 'all', 'all-active' or [start, end] with start < end")
        return [start, end]


class TransferRequest(_Model):
    """A bulk transfer request (seed 001): move ``volume`` between ``release`` and ``deadline``."""

    volume: Volume = Field(description="bytes to move")
    release: Offset = Field("0s", description="earliest start, from the start of the run")
    deadline: Duration | None = Field(None, description="latest completion, from the start of the run")
    pair: Annotated[int, _at_most(limits.PAIRS_MAX)] | None = Field(
        None, ge=0, description="host pair (default: the next free one)"
    )
    priority: int = Field(0, description="EDF: among equal deadlines, the higher first")
    name: str = Field("", max_length=100)


class TimeControl(_Model):
    """How each transfer is started (seed 001 §2.2)."""

    sync: Literal["clock", "signal", "broker"] = Field(
        "clock",
        description="clock: at its planned time on synchronised clocks (NTP); signal: a transfer that follows "
        "another starts when the previous sender tells it (1.5 RTT + processing); broker: through a bandwidth broker "
        "(two such hops)",
    )
    clock_error: TimeControlOffset = Field("1ms", description="clock: each start off by up to this (NTP on a LAN: 0.5–2 ms)")
    processing: TimeControlOffset = Field("0.1ms", description="signal, broker: processing time per signal")


class Schedule(_Model):
    """How the requests share the network, and how each allocation is enforced (seed 001)."""

    strategy: Literal["ifs", "vifi", "spaghetti", "minrate", "multirate", "edf"] = Field(
        "ifs", description="ifs, vifi, spaghetti (= minrate), multirate or edf (xferlab.schedule)"
    )
    mechanism: Literal["pacing", "token_bucket", "cwnd_clamp", "sleep_timer"] = Field(
        "pacing",
        description="enforcement of planned rates: packet pacing (PSPacer, SO_MAX_PACING_RATE), a token bucket at HZ "
        "ticks (HTB), a congestion-window clamp (rate × RTT), a userland sleep timer (Trickle-like)",
    )
    hz: int = Field(250, ge=10, le=10_000, description="timer frequency of the token bucket and the sleep timer")
    time_control: TimeControl = TimeControl()
    margin: Offset | Literal["auto"] = Field(
        "auto",
        description="each request is planned to end this long before its deadline, for what a transfer costs beyond "
        "its data time; auto: slow start's rounds to the path's window at r_TP plus one RTT, the start's clock error "
        "or signal, and a receiver's commit (docs/scheduling.md)",
    )


# --- end hosts on the simulator (issue 11; read by backends/sim.py, ignored by real backends) ---
class Host(_Model):
    """How the simulator models the end hosts; real backends run real hosts."""

    noise: bool = Field(
        True,
        description="host noise: interrupt coalescing, per-packet processing time, timer-wheel phase, "
        "interface clocks within ±100 ppm (false: exact, phase-locked runs)",
    )
    kernel: Literal["linux6", "linux2006"] = Field(
        "linux6",
        description="sender and receiver: Linux 6.x (TSQ, RACK-TLP, SACK compression) or a 2006 kernel "
        "(no TSQ, dupthresh loss detection, timeouts resend everything, no SACK compression)",
    )
    rcvbuf_autotuning: bool = Field(
        True,
        description="the receiver's window as Linux 6.18 offers it: 64 KiB at first, grown each receiver RTT "
        "by receive-buffer autotuning up to the hosts' socket buffer limit (false: the window never binds "
        "below protocol.window_cap)",
    )
    linux_acks: bool = Field(
        False,
        description="with rcvbuf_autotuning and noise, the receiver acknowledges as Linux 6.x does when its "
        "application lags: quick ACKs at the first data and while its window grows, and one ACK at the read "
        "where unread data would shrink the window (false: one ACK per two segments; off by default: with "
        "several streams through a small buffer its deferred ACKs cost goodput the kernel keeps, "
        "VALIDATION §6 on the receivers' ACKs)",
    )
    tso_defer: bool = Field(
        True,
        description="the sender defers new data as Linux 6.x does (tcp_tso_should_defer): outside loss recovery "
        "it waits, at most 1 ms after its last transmission and only while an ACK is due within 1 ms, until an "
        "skb's worth (~1 ms of its rate) or a third of its window fits in the window, so it sends in bursts of "
        "an skb (false: a few segments per ACK, the default until 2026-12-06; VALIDATION §6 'TSO deferral')",
    )


# --- end of the host block ---


class Scenario(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", description="used in folder names")
    description: str = ""
    topology: Topology = Topology()
    workload: Workload = Field(default_factory=lambda: Workload.model_validate({}, context={"requests": True}))
    protocol: Protocol = Protocol()
    measure: Measure = Measure()
    host: Host = Host()
    seed: int = Field(1, ge=0, lt=2**63)
    requests: list[TransferRequest] = Field(
        default_factory=list, description="transfer requests (seed 001): planned by `schedule`, one pair each"
    )
    schedule: Schedule | None = Field(None, description="how the requests are planned and enforced (default: ifs)")

    @model_validator(mode="after")
    def _congestion_level(self) -> Scenario:
        cg = self.workload.congestion_level
        if cg is not None:
            if "pairs" in self.topology.model_fields_set:
                raise ValueError("give topology.pairs or workload.congestion_level, not both")
            pairs = _count(cg * self.topology.bottleneck_rate / self.topology.access_rate)
            if pairs < 1:
                raise ValueError(f"workload.congestion_level {cg} gives no pair at all (Cg × C / Ca < 0.5)")
            if pairs > limits.PAIRS_MAX.value:
                raise ValueError(f"workload.congestion_level {cg} gives {limits.too_big('', pairs, limits.PAIRS_MAX, ' pairs')}")
            self.topology.pairs = pairs
        return self

    @model_validator(mode="after")
    def _requests(self) -> Scenario:
        """Requests on pairs: one per pair, the unplaced ones on the next free pairs; the
        topology has as many pairs as they need (or refuses too few)."""
        if self.schedule is not None and not self.requests:
            raise ValueError("schedule: there are no requests to schedule (add requests: [{volume: …}, …])")
        if not self.requests:
            return self
        if len(self.requests) > limits.REQUESTS_MAX.value:
            raise ValueError(limits.too_big("requests:", len(self.requests), limits.REQUESTS_MAX, " requests"))
        if self.protocol.rate_limit is not None or any(o.rate_limit is not None for o in self.workload.per_pair):
            raise ValueError("with requests, the schedule sets the rates: remove protocol.rate_limit and per_pair rate_limit")
        taken: dict[int, int] = {}
        for k, r in enumerate(self.requests):
            if r.pair is not None:
                if r.pair in taken:
                    raise ValueError(
                        f"requests[{k}] and requests[{taken[r.pair]}] are both on pair {r.pair}: one request per pair"
                    )
                taken[r.pair] = k
            if r.deadline is not None and r.deadline <= r.release:
                raise ValueError(f"requests[{k}]: the deadline {r.deadline:g} s is not after the release {r.release:g} s")
        free = (p for p in range(10**9) if p not in taken)
        placed = [r.pair if r.pair is not None else next(free) for r in self.requests]
        need = max(placed) + 1
        if "pairs" in self.topology.model_fields_set and self.topology.pairs < need:
            raise ValueError(
                f"topology.pairs {self.topology.pairs} is too few for the requests (they use pairs up to {need - 1})"
            )
        if "pairs" not in self.topology.model_fields_set:
            self.topology.pairs = need
        for r, p in zip(self.requests, placed, strict=True):
            r.pair = p
        return self

    @model_validator(mode="after")
    def _sizes(self) -> Scenario:
        """Counts that are products of fields, refused before anything is built from them."""
        t, w = self.topology, self.workload
        flows = t.pairs * w.streams + reverse_sources(self)
        if flows > limits.FLOWS_MAX.value:
            raise ValueError(
                f"topology.pairs × workload.streams (+ reverse sources) = {limits.too_big('', flows, limits.FLOWS_MAX, ' flows')}"
            )
        n_bg, _ = _background_duty(self)
        if n_bg > limits.BACKGROUND_SOURCES_MAX.value:
            raise ValueError(
                f"workload.background: {limits.too_big('', n_bg, limits.BACKGROUND_SOURCES_MAX, ' sources')}; "
                "raise background.rate"
            )
        return self


def reverse_sources(s: Scenario) -> int:
    """R × C / Ca reverse sources (seed 004's R)."""
    return _count(s.workload.reverse * s.topology.bottleneck_rate / s.topology.access_rate)


def _background_duty(s: Scenario) -> tuple[int, float]:
    """(number of sources, duty cycle) of seed 004's Bg: as few sources as can carry the
    level without sending faster than ``rate`` (the access rate by default)."""
    t, bg = s.topology, s.workload.background
    if bg.level <= 0:
        return 0, 0.0
    cap = bg.rate if bg.rate is not None else t.access_rate
    duty = bg.mean_on / (bg.mean_on + bg.mean_off)
    return max(1, math.ceil(bg.level * t.bottleneck_rate / (cap * duty) - 1e-9)), duty


def background_sources(s: Scenario) -> list[dict]:
    """The ON/OFF sources, each at the rate that makes the mean load exactly the level:
    Bg·C = n · rate_n · on/(on+off) (seed 004, def. 2 of Cg applied to Bg)."""
    n, duty = _background_duty(s)
    bg = s.workload.background
    rate = bg.level * s.topology.bottleneck_rate / (n * duty) if n else 0.0
    return [{"rate_bps": rate, "mean_on_s": bg.mean_on, "mean_off_s": bg.mean_off} for _ in range(n)]


# --------------------------------------------------------------------------- loading


#: A refusal lists at most this many problems (a file of a million unknown keys says so
#: in a few lines, not a million).
MAX_ERRORS_SHOWN = 20

#: Top-level fields of a campaign file that a scenario never has.
_CAMPAIGN_FIELDS = {"scenario", "sweep", "zip", "repetitions", "set"}


def _format_errors(source: str, err: ValidationError) -> str:
    lines = []
    errors = err.errors()
    for e in errors[:MAX_ERRORS_SHOWN]:
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"].endswith("_type") and "input" in e:
            shown = repr(e["input"])
            msg += f", got {shown if len(shown) <= 40 else shown[:36] + '…'}"
        lines.append(f"{source}: {loc}: {msg}")
    if len(errors) > MAX_ERRORS_SHOWN:
        lines.append(f"{source}: … and {len(errors) - MAX_ERRORS_SHOWN} more problems")
    return "\n".join(lines)


def set_path(data: dict, dotted: str, value: Any, source: str) -> None:
    """Sets ``data[a][b][c] = value`` for ``dotted`` = ``a.b.c`` (``--set``, campaign axes); a
    number indexes a list that exists (``requests.1.volume``)."""
    keys = dotted.split(".")
    if not all(keys):
        raise ScenarioError(f"--set {dotted}: expected section.field=value")
    node = data
    for k in keys[:-1]:
        node = _child(node, k, dotted, source)
    if isinstance(node, list):
        node[_index(node, keys[-1], dotted, source)] = value
    else:
        node[keys[-1]] = value


def _child(node: dict | list, k: str, dotted: str, source: str) -> dict | list:
    """The section (or list item) ``k`` of ``node``, a new section when a dict lacks it."""
    if isinstance(node, list):
        child = node[_index(node, k, dotted, source)]
    else:
        child = node.get(k)
        if child is None:
            child = node[k] = {}
    if not isinstance(child, (dict, list)):
        raise ScenarioError(f"{source}: --set {dotted}: {k} is not a section")
    return child


def _index(items: list, k: str, dotted: str, source: str) -> int:
    if not k.isdigit() or int(k) >= len(items):
        raise ScenarioError(f"{source}: --set {dotted}: {k} is not an index of a list of {len(items)}")
    return int(k)


def parse_overrides(items: list[str] | None) -> list[tuple[str, Any]]:
    """``["topology.rtt=100ms", "workload.streams=4"]`` → ``[(path, value), ...]``."""
    out = []
    for item in items or []:
        if "=" not in item:
            raise ScenarioError(f"--set {item!r}: expected section.field=value, e.g. topology.rtt=100ms")
        key, text = item.split("=", 1)
        try:
            value = datafile.parse(text, f"--set {key.strip()}") if text.strip() else ""
        except datafile.DataFileError as e:
            if "not valid YAML" not in str(e):
                raise ScenarioError(str(e)) from None
            value = text  # plain text that YAML cannot read: the field says what it expects
        out.append((key.strip(), value))
    return out


def _plain(data: Any, source: str) -> Any:
    try:
        return datafile.plain(data, source)
    except datafile.DataFileError as e:
        raise ScenarioError(str(e)) from None


def from_dict(data: Any, source: str = "<scenario>", overrides: list[tuple[str, Any]] | None = None) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: expected a mapping of sections (name, topology, workload, ...)")
    campaign = sorted(_CAMPAIGN_FIELDS & set(data))
    if campaign and "workload" not in data:
        raise ScenarioError(
            f"{source}: this is a campaign file ({', '.join(campaign)}), not a scenario: "
            f"run it with `xferlab campaign run {source} --out DIR`"
        )
    data = _plain(data, source)  # a private deep copy of plain data
    for key, value in overrides or []:
        set_path(data, key, _plain(value, f"--set {key}"), source)
    try:
        requests = bool(data.get("requests")) or data.get("schedule") is not None
        return Scenario.model_validate(data, context={"requests": requests})
    except ValidationError as e:
        raise ScenarioError(_format_errors(source, e)) from None


def load_raw(path: str | Path) -> dict:
    try:
        data = datafile.load(path, "scenario")
    except datafile.DataFileError as e:
        raise ScenarioError(str(e)) from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping of sections (name, topology, workload, ...)")
    return data


def load(path: str | Path, overrides: list[str] | None = None) -> tuple[Scenario, dict]:
    """Reads, overrides and validates a scenario file; returns it with the data as given."""
    raw = load_raw(path)
    parsed = parse_overrides(overrides)
    scenario = from_dict(raw, str(path), parsed)
    given = _plain(raw, str(path))
    for key, value in parsed:
        set_path(given, key, value, str(path))
    return scenario, given


def json_schema() -> dict:
    return Scenario.model_json_schema()


# --------------------------------------------------------------------------- resolution


def header_bytes(t: Topology) -> int:
    """IP + TCP headers (40 bytes) plus the timestamps option (12 bytes) when on."""
    return IP_TCP_HEADERS + (TCP_TIMESTAMPS if t.timestamps else 0)


def bdp_packets(t: Topology) -> float:
    """Bandwidth-delay product of the bottleneck in MTU-size packets."""
    return constants.bdp_packets(t.bottleneck_rate, t.rtt, t.mtu)


def buffer_packets(t: Topology) -> int:
    if isinstance(t.buffer, int):
        return t.buffer
    text = t.buffer.strip()
    if text.lower().endswith("bdp"):
        n = max(1, round(float(text[:-3]) * bdp_packets(t)))
    else:
        n = max(1, math.ceil(parse_size(text) / t.mtu))
    if n > limits.BUFFER_MAX_PACKETS.value:
        raise ScenarioError(f"topology.buffer {text}: {limits.too_big('', n, limits.BUFFER_MAX_PACKETS, ' packets')}")
    return n


def _shaper(t: Topology) -> dict | None:
    if t.shaper is None:
        return None
    sh = t.shaper
    line = sh.line_rate if sh.line_rate is not None else 10 * t.bottleneck_rate
    if line < t.bottleneck_rate:
        raise ScenarioError(f"topology.shaper.line_rate must be at least topology.bottleneck_rate ({t.bottleneck_rate:g} bit/s)")
    if sh.limiter == "pacing":
        return {"line_rate_bps": line, "kind": "pacer", "rate_bps": t.bottleneck_rate}
    tick = 1.0 / sh.hz
    burst = sh.burst if sh.burst is not None else math.ceil(t.bottleneck_rate / 8 * tick) + qdisc_frame(t.mtu)
    return {
        "line_rate_bps": line,
        "kind": "token_bucket",
        "rate_bps": t.bottleneck_rate,
        "burst_bytes": int(burst),
        "tick_s": tick,
    }


def _limiter(s: Scenario, o: PairOverride, rate_limit: float | None) -> dict | None:
    """The per-stream limiter of a transfer limited to ``rate_limit`` (None: unlimited)."""
    if rate_limit is None:
        return None
    p = s.protocol
    per_stream = rate_limit / s.workload.streams
    if (o.limiter or p.limiter) == "pacing":
        return {"kind": "pacer", "rate_bps": per_stream}
    frame = qdisc_frame(s.topology.mtu)
    tick = 1.0 / p.hz
    burst = p.burst if p.burst is not None else math.ceil(per_stream / 8 * tick) + frame
    if burst < frame:
        raise ScenarioError(f"protocol.burst {burst} B is smaller than one frame ({frame} B)")
    return {"kind": "token_bucket", "rate_bps": per_stream, "burst_bytes": int(burst), "tick_s": tick}


def _pair(s: Scenario, pair: int, rng: random.Random, flows: list[dict]) -> tuple[dict, dict]:
    """Pair ``pair``'s path and transfer, its flows appended to ``flows`` (one per stream)."""
    t, w, p = s.topology, s.workload, s.protocol
    o = w.per_pair[pair % len(w.per_pair)] if w.per_pair else PairOverride()
    start = o.start if o.start is not None else pair * w.stagger
    path = {"access_rate_bps": o.access_rate or t.access_rate, "rtt_s": o.rtt or t.rtt}
    variant = o.variant or p.variant
    volume = o.volume if o.volume is not None else w.volume
    duration = None
    if w.duration is not None:
        aligned_end = (t.pairs - 1) * w.stagger + w.duration
        duration = o.duration or ((aligned_end - start) if w.align_end else w.duration)
        if duration < limits.TIME_MIN_S.value:
            raise ScenarioError(
                f"{s.name}: pair {pair} starts at {format_duration(start)}, after the aligned end of the run "
                f"({format_duration(aligned_end)}: workload.align_end); move its start or lengthen the duration"
            )
    rate_limit = o.rate_limit if o.rate_limit is not None else p.rate_limit
    limiter = _limiter(s, o, rate_limit)
    starts = []
    volumes = _stream_volumes(volume, w.streams, "workload.volume")
    for stream, stream_volume in enumerate(volumes):
        starts.append(start + (rng.random() * w.start_jitter if w.start_jitter > 0 else 0.0))
        _add_flow(flows, pair, stream, variant, starts[-1], duration=duration, volume=stream_volume, limiter=limiter)
    transfer = {
        "pair": pair,
        "streams": w.streams,
        "start_s": min(starts),
        "volume_bytes": volume,
        "variant": variant,
        **path,
        "rate_limit_bps": rate_limit,
        "limiter": (o.limiter or p.limiter) if rate_limit is not None else None,
    }
    return path, transfer


def _stream_volumes(volume: int | None, streams: int, what: str) -> list[int | None]:
    """A pair's volume split over its streams (the first ones carry the remainder)."""
    if volume is None:
        return [None] * streams
    if volume < streams:
        raise ScenarioError(f"{what} {volume} B is smaller than {streams} streams")
    return [volume // streams + (1 if k < volume % streams else 0) for k in range(streams)]


def _add_flow(flows: list[dict], pair: int, stream: int, variant: str, start: float, **extra) -> None:
    """Appends one flow (runinfo.FlowInfo) with the next id: a transfer unless ``role`` says."""
    flows.append(
        {
            "flow_id": len(flows),
            "pair": pair,
            "stream": stream,
            "variant": variant,
            "role": extra.get("role", "transfer"),
            "start_s": start,
            "duration_s": extra.get("duration"),
            "volume_bytes": extra.get("volume"),
            "limiter": extra.get("limiter"),
            "start_after": extra.get("start_after"),
        }
    )


def _reverse(s: Scenario, rng: random.Random, flows: list[dict], paths: list[dict]) -> int:
    """Reverse traffic: R × C / Ca sources sending from the receivers' side for the whole run."""
    n = reverse_sources(s)
    t, w = s.topology, s.workload
    for _ in range(n):
        paths.append({"access_rate_bps": t.access_rate, "rtt_s": t.rtt})
        start = rng.random() * w.start_jitter if w.start_jitter > 0 else 0.0
        _add_flow(flows, len(paths) - 1, 0, s.protocol.variant, start, role="reverse")
    return n


#: What a transfer's receiver costs at its end before the transfer counts as done: xfer's
#: commit, about 22 ms on loopback (issue 48); the margin keeps it before each deadline.
COMMIT_S = 0.025


def plan_margin(s: Scenario, r_tp: float) -> tuple[float, str]:
    """The margin each request keeps before its deadline, and how it was found: the
    schedule's, or (auto) what a start and an end cost on the slowest path — slow start's
    rounds from the initial window to the window of r_TP, plus one RTT for the last byte and
    its acknowledgement; the start's clock error, or its signal (1.5 RTT + processing per
    hop); and the receiver's commit."""
    sch = s.schedule or Schedule()
    if sch.margin != "auto":
        return sch.margin, "given"
    t, w = s.topology, s.workload
    rtt = max([t.rtt, *(o.rtt for o in w.per_pair if o.rtt is not None)])
    window = r_tp * rtt / 8 / (t.mtu - header_bytes(t))
    rounds = max(0, math.ceil(math.log2(max(1.0, window / s.protocol.initial_cwnd))))
    tc = sch.time_control
    hops = {"clock": 0, "signal": 1, "broker": 2}[tc.sync]
    start = max(tc.clock_error, hops * (1.5 * rtt + tc.processing))
    margin = (rounds + 1) * rtt + start + COMMIT_S
    how = (
        f"auto: slow start {rounds} + 1 RTT of {format_duration(rtt)}, the start {format_duration(start)}, "
        f"the commit {format_duration(COMMIT_S)}"
    )
    return margin, how


def plan_of(s: Scenario) -> dict:
    """The requests planned by the schedule's strategy (xferlab.schedule) on the bottleneck's
    ideal goodput r_TP, a :class:`xferlab.runinfo.PlanInfo`'s dict; refuses what no plan can
    serve, and a plan that admits nothing. Needs no run: ``xferlab schedule plan`` shows it."""
    t = s.topology
    sch = s.schedule or Schedule()
    r_tp = models.ideal_rates(t.bottleneck_rate, mtu=t.mtu, header_bytes=header_bytes(t)).r_tp_mbps * 1e6
    margin, how = plan_margin(s, r_tp)
    from . import schedule  # numpy: only for requests and volumes (`xferlab check` stays light)

    reqs = [schedule.Request(r.volume, r.release, r.deadline, r.priority, r.name) for r in s.requests]
    try:
        p = schedule.plan(reqs, r_tp, sch.strategy, margin)
    except schedule.PlanError as e:
        raise ScenarioError(f"{s.name}: {e}") from None
    if not any(a.admitted for a in p.allocations):
        why = "; ".join(f"requests[{a.request}]: {a.reason}" for a in p.allocations[:5])
        more = f"; and {len(p.allocations) - 5} more" if len(p.allocations) > 5 else ""
        raise ScenarioError(f"{s.name}: the {p.strategy} plan admits no request ({why}{more})")
    rows = []
    for a, r in zip(p.allocations, s.requests, strict=True):
        rows.append(
            {
                "request": a.request,
                "name": r.name,
                "pair": r.pair,
                "volume_bytes": r.volume,
                "release_s": r.release,
                "deadline_s": r.deadline,
                "admitted": a.admitted,
                "reason": a.reason,
                "start_s": a.start_s,
                "segments": [{"start_s": x, "end_s": y, "rate_bps": z} for x, y, z in a.segments],
                "completion_s": a.completion_s,
                "after": a.after,
            }
        )
    return {
        "strategy": p.strategy,
        "mechanism": sch.mechanism,
        "sync": sch.time_control.sync,
        "capacity_bps": r_tp,
        "congestion_factor": p.congestion_factor,
        "margin_s": margin,
        "margin": how,
        "makespan_s": p.makespan_s,
        "ideal_makespan_s": p.ideal_makespan_s,
        "requests": rows,
    }


#: The schedule's mechanism → the limiter that enforces it (runinfo.LimiterInfo.kind).
MECHANISM_LIMITER = {"pacing": "pacer", "token_bucket": "token_bucket", "cwnd_clamp": "cwnd_clamp", "sleep_timer": "sleep_timer"}


def _request_limiter(s: Scenario, segments: list[dict]) -> dict | None:
    """The per-stream limiter enforcing a planned profile with the schedule's mechanism, in
    qdisc frame bytes (as rate_limit): None when the request is unlimited throughout."""
    if all(g["rate_bps"] is None for g in segments) and all(
        abs(a["end_s"] - b["start_s"]) < 1e-9 for a, b in zip(segments, segments[1:], strict=False)
    ):
        return None
    sch, t, w = s.schedule or Schedule(), s.topology, s.workload
    to_frames = qdisc_frame(t.mtu) / (t.mtu - header_bytes(t)) / w.streams

    from . import schedule  # numpy: only for requests and volumes (`xferlab check` stays light)

    steps = [(t, None if g is None else g * to_frames) for t, g in schedule.rate_steps(segments)]
    kind = MECHANISM_LIMITER[sch.mechanism]
    first = steps[0][1]
    lim = {"kind": kind, "rate_bps": first, "profile": [{"t_s": x, "rate_bps": y} for x, y in steps[1:]]}
    if kind in ("token_bucket", "sleep_timer"):
        lim["tick_s"] = 1.0 / sch.hz
    if kind == "token_bucket":
        peak = max(y for _, y in steps if y is not None)
        lim["burst_bytes"] = int(math.ceil(peak / 8 / sch.hz)) + qdisc_frame(t.mtu)
    return lim


def _request_start(s: Scenario, plan: dict, row: dict, rtt: float, rng: random.Random) -> tuple[float, dict | None]:
    """When a planned request starts: at its planned time on clocks off by up to the clock
    error, or — following another request — when that one's sender signals (1.5 RTT + the
    processing per hop; two hops through a broker)."""
    tc = (s.schedule or Schedule()).time_control
    planned = row["start_s"]
    if row["after"] is not None and tc.sync in ("signal", "broker"):
        hops = 1 if tc.sync == "signal" else 2
        first = plan["requests"][row["after"]]
        return planned, {"pair": first["pair"], "delay_s": hops * (1.5 * rtt + tc.processing)}
    error = (2 * rng.random() - 1) * tc.clock_error if tc.clock_error > 0 else 0.0
    return max(0.0, planned + error), None


def _request_pairs(s: Scenario, plan: dict, rng: random.Random, flows: list[dict]) -> tuple[list[dict], list[dict]]:
    """Every pair's path, and the flows and transfers of the admitted requests."""
    t, w, p = s.topology, s.workload, s.protocol
    paths, transfers = [], []
    for pair in range(t.pairs):
        o = w.per_pair[pair % len(w.per_pair)] if w.per_pair else PairOverride()
        paths.append({"access_rate_bps": o.access_rate or t.access_rate, "rtt_s": o.rtt or t.rtt})
    for row in plan["requests"]:
        if not row["admitted"]:
            continue
        pair = row["pair"]
        o = w.per_pair[pair % len(w.per_pair)] if w.per_pair else PairOverride()
        start, after = _request_start(s, plan, row, paths[pair]["rtt_s"], rng)
        limiter = _request_limiter(s, row["segments"])
        variant = o.variant or p.variant
        volumes = _stream_volumes(row["volume_bytes"], w.streams, f"requests[{row['request']}]: volume")
        for stream, volume in enumerate(volumes):
            _add_flow(flows, pair, stream, variant, start, volume=volume, limiter=limiter, start_after=after)
        single = {g["rate_bps"] for g in row["segments"]}
        goodput = single.pop() if len(single) == 1 else None
        transfers.append(
            {
                "pair": pair,
                "streams": w.streams,
                "start_s": row["release_s"],
                "volume_bytes": row["volume_bytes"],
                "variant": variant,
                **paths[pair],
                "limiter": (s.schedule or Schedule()).mechanism if limiter else None,
                "rate_limit_bps": goodput * qdisc_frame(t.mtu) / (t.mtu - header_bytes(t)) if goodput else None,
            }  # fmt: skip
        )
    return paths, transfers


def _ideal(s: Scenario, paths: list[dict], transfers: list[dict], flows: list[dict]) -> dict:
    """The ideal transport (seed 001 §3.3): its rates, the goodput it reaches through whatever
    limits the aggregate (the bottleneck or the access links together), and for volume-bound
    transfers their ideal completion times and the run's hard end."""
    t, w = s.topology, s.workload

    def rates(bps: float) -> models.IdealRates:
        return models.ideal_rates(bps, mtu=t.mtu, header_bytes=header_bytes(t))

    ideal = rates(t.bottleneck_rate)
    limit_bps = min(t.bottleneck_rate, sum(x["access_rate_bps"] for x in paths[: t.pairs]))
    out = {
        "ideal_rates_mbps": {"r_eth": ideal.r_eth_mbps, "r_ip": ideal.r_ip_mbps, "r_tp": ideal.r_tp_mbps},
        "ideal_goodput_mbps": rates(limit_bps).r_tp_mbps,
        "end_s": None,
    }
    if w.volume is not None or s.requests:
        tp_access = [rates(paths[x["pair"]]["access_rate_bps"]).r_tp_mbps * 1e6 for x in transfers]
        times = _ideal_times(transfers, tp_access, ideal.r_tp_mbps * 1e6)
        for x, ct in zip(transfers, times, strict=True):
            x["ideal_completion_s"] = ct
        makespan = max(ct + x["start_s"] for x, ct in zip(transfers, times, strict=True))
        hard = w.max_duration if w.max_duration is not None else 10 * makespan + 60.0
        out["end_s"] = hard + max(f["start_s"] for f in flows)
    return out


def _ideal_times(transfers: list[dict], tp_access: list[float], r_tp: float) -> list[float]:
    """Each transfer's ideal completion time from its start (max-min fair sharing, each capped
    by its access link): where no access link is slower than the bottleneck, no cap binds and
    fair sharing is found in O(n log n) (10 000 requests in a fraction of a second, against
    minutes stepping every transfer at every event)."""
    volumes, starts = [x["volume_bytes"] for x in transfers], [x["start_s"] for x in transfers]
    if min(tp_access, default=math.inf) < r_tp:
        return models.ideal_completion_times(volumes, starts, tp_access, r_tp)
    from . import schedule  # numpy: only for requests and volumes (`xferlab check` stays light)

    reqs = [schedule.Request(v, t) for v, t in zip(volumes, starts, strict=True)]
    done = schedule.fair_sharing(reqs, list(range(len(reqs))), r_tp)
    return [done[k] - t for k, t in enumerate(starts)]


def resolve(s: Scenario) -> dict:
    """Plain numbers and the list of flows: what backends consume (a :class:`RunInfo`'s dict)."""
    t, w, p = s.topology, s.workload, s.protocol
    mss = t.mtu - header_bytes(t)
    if mss <= 0:
        raise ScenarioError(f"topology.mtu {t.mtu} leaves no room for {header_bytes(t)} bytes of headers")
    rng = random.Random(s.seed)
    flows, transfers, paths, plan = [], [], [], None
    if s.requests:
        plan = plan_of(s)
        paths, transfers = _request_pairs(s, plan, rng, flows)
    else:
        for pair in range(t.pairs):
            path, transfer = _pair(s, pair, rng, flows)
            paths.append(path)
            transfers.append(transfer)
    n_reverse = _reverse(s, rng, flows, paths)
    background = background_sources(s)
    resolved = {
        "name": s.name,
        "seed": s.seed,
        "pairs": t.pairs,
        "streams": w.streams,
        "variant": p.variant,
        "access_rate_bps": t.access_rate,
        "bottleneck_rate_bps": t.bottleneck_rate,
        "rtt_s": t.rtt,
        "mtu": t.mtu,
        "mss": mss,
        "header_bytes": header_bytes(t),
        "frame_overhead": FRAME_OVERHEAD,
        "bdp_packets": bdp_packets(t),
        "buffer_packets": buffer_packets(t),
        "loss_rate": t.loss_rate,
        "shaper": _shaper(t),
        **_ideal(s, paths, transfers, flows),
        "window_cap_packets": max(1, math.ceil(p.window_cap / mss)) if p.window_cap is not None else None,
        "initial_cwnd": p.initial_cwnd,
        "delayed_ack": p.delayed_ack,
        "rto_min_s": p.rto_min,
        "duration_s": w.duration,
        "volume_bytes": w.volume,
        "goodput_interval_s": s.measure.goodput_interval,
        "link_interval_s": s.measure.link_interval,
        "tcp_interval_s": s.measure.tcp_interval,
        "window": s.measure.window,
        "host": s.host.model_dump(),
        "reverse_sources": n_reverse,
        "background_sources": len(background),
        "background": background,
        "pair_paths": paths,
        "flows": flows,
        "transfers": transfers,
        "plan": plan,
    }
    resolved["cost"] = cost(s, resolved)
    return RunInfo.model_validate(resolved).dump()


def _span_s(r: dict) -> float:
    """How long the run is expected to last: to the end of the last duration-bound flow, or
    the ideal makespan of volume-bound transfers."""
    ends = [f["start_s"] + f["duration_s"] for f in r["flows"] if f["duration_s"] is not None]
    ends += [x["start_s"] + x["ideal_completion_s"] for x in r["transfers"] if x.get("ideal_completion_s") is not None]
    return max(ends, default=0.0)


def _trace_rows(s: Scenario, r: dict, span: float) -> float:
    """The rows the run's sampling intervals give its trace (goodput and tcp per flow, link per
    bottleneck), refused over :data:`limits.SAMPLES_MAX` — for one table or for all together,
    which a run holds in memory at once — naming the interval to lengthen and by how much."""
    limit = limits.SAMPLES_MAX
    series = {
        "goodput_interval": len(r["flows"]),
        "tcp_interval": len(r["flows"]),
        "link_interval": 2 if r["reverse_sources"] else 1,
    }
    rows = {field: per * span / r[f"{field}_s"] for field, per in series.items()}
    total = sum(rows.values())
    if total <= limit.value:
        return total
    field = max(rows, key=rows.get)
    room = limit.value - (total - rows[field])  # what the other tables leave to this one
    shortest = (
        f"use at least {format_duration(series[field] * span / room)}" if room > 0 else "lengthen it and the other intervals"
    )
    shown = ", ".join(f"{f.split('_')[0]} {n:.3g}" for f, n in rows.items())
    raise ScenarioError(
        f"{s.name}: measure.{field}: the trace would hold {total:.3g} rows ({shown}; {series[field]} series × "
        f"{format_duration(span)} at {format_duration(r[f'{field}_s'])}), over the limit of {limit.value:.3g} "
        f"({limit.reason}); {shortest}"
    )


def cost(s: Scenario, r: dict) -> dict:
    """What the run will cost — its length, trace rows and packets — refused over the limits
    of :mod:`xferlab.limits` with the fields to change; ``sim_wall_s`` is an estimate of the
    wall time of a run on the simulator (its packets, and the trace rows it samples, computes
    metrics of and draws), shown to the user before long runs."""
    span = _span_s(r)
    if span > limits.SPAN_MAX_S.value:
        raise ScenarioError(
            f"{s.name}: the run would last {format_duration(span)} (start times, stagger × pairs, duration or the "
            f"volume at the bottleneck's rate), over the limit of {format_duration(limits.SPAN_MAX_S.value)} "
            f"({limits.SPAN_MAX_S.reason})"
        )
    rows = _trace_rows(s, r, span)
    frame_bits = 8 * (r["mtu"] + FRAME_OVERHEAD)
    c = r["bottleneck_rate_bps"]
    if r["volume_bytes"] is not None:
        data = sum(x["volume_bytes"] for x in r["transfers"]) / r["mss"]
    else:
        data = min(c, sum(x["access_rate_bps"] for x in r["pair_paths"][: r["pairs"]])) * span / frame_bits
    reverse = min(c, r["reverse_sources"] * r["access_rate_bps"]) * span / frame_bits
    background = min(c, s.workload.background.level * c) * span / frame_bits
    packets = data + reverse + background
    if packets > limits.PACKETS_MAX.value:
        raise ScenarioError(
            f"{s.name}: the run would carry about {packets:.3g} packets ({format_duration(span)} at "
            f"{format_rate(c)}), over the limit of {limits.PACKETS_MAX.value:.3g} ({limits.PACKETS_MAX.reason}); "
            "shorten workload.duration (or volume) or lower the rates"
        )
    wall = packets / limits.SIM_PACKETS_PER_S + rows * limits.SECONDS_PER_TRACE_ROW
    return {"span_s": span, "packets": packets, "rows": rows, "sim_wall_s": wall}
