"""What ``run.json`` holds besides the tables: the resolved scenario a run ran
(:class:`RunInfo`, with its per-pair and per-flow settings and the schedule's plan), the
run's :class:`Provenance`, and :class:`RunMeta`, the keys a reader of a run folder relies
on. Plain pydantic: a scenario is checked and resolved without the Trace's Arrow tables
(``xferlab check`` answers at once); :mod:`xferlab.trace` stores these beside its tables."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# Quantities of the resolved scenario, tagged with what a time dilation does to them.
Rate = Annotated[float, "rate"]  # bit/s
RateMbps = Annotated[float, "rate"]  # Mbit/s
Time = Annotated[float, "time"]  # s
#: Fields drawn from the seed (start jitter) or naming the run: two runs of one scenario
#: with different seeds differ there and nowhere else (:func:`differences` skips them).
Seeded = "seeded"


class _Info(BaseModel):
    # A number that is not finite is no quantity of a run (run.json cannot even hold one).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ProfileStep(_Info):
    """From ``t_s`` on (run time), the limiter's rate is ``rate_bps`` (0: paused; None: unlimited)."""

    t_s: Time
    rate_bps: Rate | None


class LimiterInfo(_Info):
    """How a flow's rate is limited (qdisc frame bytes, IP + 14): packet pacing, a token bucket
    refilled every ``tick_s``, a congestion-window clamp (rate × RTT) or a userland sleep timer
    handing data to TCP every ``tick_s``; ``profile``: the rate's later changes (multi-rate)."""

    kind: Literal["pacer", "token_bucket", "cwnd_clamp", "sleep_timer"]
    rate_bps: Rate | None
    burst_bytes: int | None = None
    tick_s: Time | None = None
    profile: list[ProfileStep] = Field(default_factory=list)


class StartAfter(_Info):
    """Start when every flow of ``pair`` has completed, ``delay_s`` later (a signal's cost)."""

    pair: int
    delay_s: Time


class ShaperInfo(LimiterInfo):
    line_rate_bps: Rate


class PathInfo(_Info):
    access_rate_bps: Rate
    rtt_s: Time


class FlowInfo(_Info):
    flow_id: int
    pair: int
    stream: int
    variant: str
    role: Literal["transfer", "reverse"] = "transfer"
    start_s: Annotated[Time, Seeded]
    duration_s: Time | None = None
    volume_bytes: int | None = None
    limiter: LimiterInfo | None = None
    start_after: StartAfter | None = None


class TransferInfo(_Info):
    """A pair's streams together, with the per-pair settings a user gave (per_pair)."""

    pair: int
    streams: int
    start_s: Annotated[Time, Seeded]
    volume_bytes: int | None = None
    variant: str
    rtt_s: Time | None = None
    access_rate_bps: Rate | None = None
    rate_limit_bps: Rate | None = None
    limiter: str | None = None
    ideal_completion_s: Annotated[Time | None, Seeded] = None


class BackgroundInfo(_Info):
    rate_bps: Rate
    mean_on_s: Time
    mean_off_s: Time


class IdealRatesInfo(_Info):
    r_eth: RateMbps
    r_ip: RateMbps
    r_tp: RateMbps


class Segment(_Info):
    """A stretch of a planned allocation: goodput ``rate_bps`` from ``start_s`` to ``end_s``
    (None: unlimited)."""

    start_s: Time
    end_s: Time
    rate_bps: Rate | None = None


class RequestPlan(_Info):
    """A transfer request (seed 001) and what the planner made of it."""

    request: int
    name: str = ""
    pair: int
    volume_bytes: int
    release_s: Time
    deadline_s: Time | None = None
    admitted: bool
    reason: str = ""
    start_s: Time | None = None
    segments: list[Segment] = Field(default_factory=list)
    completion_s: Time | None = None
    after: int | None = None  # starts when this request completes


class PlanInfo(_Info):
    strategy: str
    mechanism: str
    sync: str
    capacity_bps: Rate  # r_TP, the planner's link
    congestion_factor: float | None = None
    margin_s: Time = 0.0  # each request planned to end this long before its deadline
    margin: str = ""  # how the margin was found
    makespan_s: Time | None = None  # planned, from the first admitted release
    ideal_makespan_s: Time  # the admitted volume at r_TP, from the first admitted release
    requests: list[RequestPlan]


class CostInfo(_Info):
    span_s: Time
    packets: float
    rows: float | None = None  # trace rows sampled (None: a run from before it was counted)
    sim_wall_s: float


class HostInfo(_Info):
    """How the simulator modelled the end hosts (None for real hosts)."""

    noise: bool
    kernel: Literal["linux6", "linux2006"]
    #: Runs before version 3 did not model the receive window.
    rcvbuf_autotuning: bool = False
    #: Runs before Linux's ACK rules were an option acknowledged every second segment.
    linux_acks: bool = False
    #: Runs before TSO deferral was an option sent new data at every ACK.
    tso_defer: bool = False


class RunInfo(_Info):
    """The resolved scenario: plain numbers (bit/s, s, bytes, packets) and the list of flows,
    what backends consume and what ``run.json`` records as ``resolved``. A field a producer
    cannot know (an import's buffer, say) is None."""

    name: Annotated[str, Seeded]
    seed: Annotated[int | None, Seeded] = None
    pairs: int
    streams: int
    variant: str
    access_rate_bps: Rate | None = None
    bottleneck_rate_bps: Rate | None = None
    rtt_s: Time | None = None
    mtu: int
    mss: int
    header_bytes: int
    frame_overhead: int
    bdp_packets: float | None = None
    buffer_packets: int | None = None
    loss_rate: float | None = None
    shaper: ShaperInfo | None = None
    ideal_rates_mbps: IdealRatesInfo | None = None
    ideal_goodput_mbps: RateMbps | None = None
    window_cap_packets: int | None = None
    initial_cwnd: int | None = None
    delayed_ack: bool | None = None
    rto_min_s: Time | None = None
    duration_s: Time | None = None
    volume_bytes: int | None = None
    end_s: Annotated[Time | None, Seeded] = None
    goodput_interval_s: Annotated[Time, Field(gt=0)]
    link_interval_s: Annotated[Time, Field(gt=0)] | None = None
    tcp_interval_s: Annotated[Time, Field(gt=0)] | None = None
    window: Literal["all", "all-active"] | list[Time] = "all"
    host: HostInfo | None = None
    reverse_sources: int = 0
    background_sources: int = 0
    background: list[BackgroundInfo] = Field(default_factory=list)
    pair_paths: list[PathInfo] = Field(default_factory=list)
    flows: list[FlowInfo] = Field(default_factory=list)
    transfers: list[TransferInfo] = Field(default_factory=list)
    cost: Annotated[CostInfo | None, Seeded] = None
    plan: PlanInfo | None = None

    @field_validator("window")
    @classmethod
    def _window_is_a_span(cls, v):
        if isinstance(v, list) and not (len(v) == 2 and 0 <= v[0] < v[1]):
            raise ValueError(f"window: 'all', 'all-active' or [start, end] with 0 <= start < end, got {v}")
        return v

    def dump(self) -> dict:
        return self.model_dump(mode="json")


def scaled(info: RunInfo, k: float) -> RunInfo:
    """``info`` dilated by ``k``: every time × k, every rate ÷ k (by the fields' types, not by
    a list of names); packets, bytes and counts unchanged."""
    return _scale_model(info, k)


def _tags(field) -> set[str]:
    """The markers of a field ("time", "rate", "seeded"), also inside ``X | None``."""
    tags = {x for x in field.metadata if isinstance(x, str)}

    def walk(t) -> None:
        if get_origin(t) is Annotated:
            args = get_args(t)
            tags.update(x for x in args[1:] if isinstance(x, str))
            walk(args[0])
        else:
            for a in get_args(t):
                walk(a)

    walk(field.annotation)
    return tags


def _scale_model(m: BaseModel, k: float) -> BaseModel:
    update = {}
    for name, field in type(m).model_fields.items():
        v = getattr(m, name)
        tags = _tags(field)
        if tags & {"time", "rate"} and isinstance(v, (int, float)):
            update[name] = v * k if "time" in tags else v / k
        elif isinstance(v, BaseModel):
            update[name] = _scale_model(v, k)
        elif isinstance(v, list) and v and isinstance(v[0], BaseModel):
            update[name] = [_scale_model(x, k) for x in v]
        elif name == "window" and isinstance(v, list):
            update[name] = [x * k for x in v]
    return m.model_copy(update=update)


def differences(a: BaseModel, b: BaseModel, path: str = "") -> list[tuple[str, Any, Any]]:
    """Fields of two resolved scenarios that differ — per-pair and per-flow settings included —
    skipping what the seed draws (start jitter) and what one side does not know (None)."""
    out = []
    for name, field in type(a).model_fields.items():
        if Seeded in _tags(field):
            continue
        va, vb, where = getattr(a, name), getattr(b, name, None), f"{path}{name}"
        if isinstance(va, list) and isinstance(vb, list) and va and isinstance(va[0], BaseModel):
            if len(va) != len(vb):
                out.append((f"{where} (count)", len(va), len(vb)))
            for i, (x, y) in enumerate(zip(va, vb, strict=False)):
                out += differences(x, y, f"{where}[{i}].")
        elif isinstance(va, BaseModel) and isinstance(vb, BaseModel):
            out += differences(va, vb, f"{where}.")
        elif va is not None and vb is not None and not _same(va, vb):
            out.append((where, va, vb))
    return out


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return a == b


class Provenance(_Info):
    """Where a run came from, in terms a report renders without knowing the producer."""

    producer: str  # "sim", "netns", "import"
    source: str | None = None  # the log format of an import: "iperf3", "ss"
    #: rows of the report's Setup table that only this producer can tell (label, text)
    setup: list[tuple[str, str]] = Field(default_factory=list)
    #: what a reader must know to trust the run (a scaled emulation, a late delay line, …)
    warnings: list[str] = Field(default_factory=list)
    #: metric keys and trace columns that are null because the producer cannot know them → why
    unknown: dict[str, str] = Field(default_factory=dict)
    files: list[str] = Field(default_factory=list)  # an import's logs
    stats: dict[str, Any] = Field(default_factory=dict)  # the producer's own figures (events, delay line, …)


class RunMeta(BaseModel):
    """``run.json``: the keys a reader of a run folder relies on, with their types (checked
    at save and at reading, so a damaged file is refused with the field at fault rather
    than met half way through a report). A producer may add keys of its own."""

    model_config = ConfigDict(extra="allow", strict=True)

    trace_version: int = Field(ge=1)
    backend: str = "?"
    resolved: RunInfo
    provenance: Provenance | None = None
    scenario: dict[str, Any] = Field(default_factory=dict)  # as given
    seed: int | None = None
    end_s: float | None = Field(None, ge=0, allow_inf_nan=False)
    wall_seconds: float | None = Field(None, ge=0, allow_inf_nan=False)
    created: str | None = None
    versions: dict[str, Any] = Field(default_factory=dict)
    host: dict[str, Any] | None = None


#: Problems of a ValidationError named (the rest counted).
_SHOWN_PROBLEMS = 3


def validation_message(e: ValidationError) -> str:
    """The first problems of a pydantic error on one line: ``field.path: what (got x)``."""
    parts = []
    for err in e.errors()[:_SHOWN_PROBLEMS]:
        where = ".".join(str(x) for x in err["loc"]) or "(top)"
        got = repr(err.get("input"))
        got = got if len(got) <= 40 else got[:36] + "…"
        parts.append(f"{where}: {err['msg']} (got {got})" if err["type"] != "missing" else f"{where}: missing")
    more = e.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
