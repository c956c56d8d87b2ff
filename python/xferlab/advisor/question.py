"""What a user asks the advisor: a path, a job and the competition it will meet.

Parsed from the command line's text (``100ms``, ``10Gbps``, ``2TB``, ``1bdp``) and checked
here, each problem one :class:`AdviceError` sentence.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .. import constants, limits, variants
from ..models import ideal_rates
from ..units import format_duration, format_rate, parse_duration, parse_rate, parse_size

#: IP + TCP headers with timestamps (Linux's default), as the scenario counts them.
HEADER_BYTES = constants.IP_TCP_HEADERS + constants.TCP_TIMESTAMPS


def rate_for_goodput(goodput_bps: float, mtu: int = constants.DEFAULT_MTU) -> float:
    """The link rate whose r_TP is ``goodput_bps``: :attr:`Question.goodput_bps` inverted (r_TP
    is the rate times the payload's share of a frame on the wire)."""
    return goodput_bps * 1e9 / (ideal_rates(1e9, mtu, HEADER_BYTES).r_tp_mbps * 1e6)


class AdviceError(ValueError):
    """A question the advisor cannot answer as asked: the message says why."""


@dataclass(frozen=True)
class Question:
    rtt_s: float
    bottleneck_bps: float
    access_bps: float
    buffer: str  # as the scenario's topology.buffer takes it: "1.0bdp" or a packet count
    volume_bytes: int
    deadline_s: float | None
    competing: int  # long-lived flows sharing the bottleneck
    competing_variant: str
    mtu: int = constants.DEFAULT_MTU
    reverse: float = 0.0  # seed 004's R: reverse sources × access rate / bottleneck rate
    background: float = 0.0  # seed 004's Bg: unresponsive ON/OFF load, a share of the bottleneck

    @property
    def header_bytes(self) -> int:
        """IP + TCP headers with timestamps (Linux's default), as the scenario counts them."""
        return HEADER_BYTES

    @property
    def goodput_bps(self) -> float:
        """r_TP of the bottleneck (seed 001 §3.3): the best any configuration can do alone."""
        rate = min(self.bottleneck_bps, self.access_bps)
        return ideal_rates(rate, self.mtu, self.header_bytes).r_tp_mbps * 1e6

    @property
    def available_bps(self) -> float:
        """r_TP less the background's mean load: the most the job can have on average."""
        return self.goodput_bps * (1 - self.background)

    @property
    def ideal_time_s(self) -> float:
        """The job at the available rate from the first byte, plus one round trip (handshake)."""
        return self.volume_bytes * 8 / self.available_bps + self.rtt_s

    @property
    def bdp_bytes(self) -> float:
        return self.bottleneck_bps * self.rtt_s / 8

    def buffer_packets(self) -> int:
        if self.buffer.endswith("bdp"):
            bdp = constants.bdp_packets(self.bottleneck_bps, self.rtt_s, self.mtu)
            return max(1, math.ceil(float(self.buffer[:-3]) * bdp))
        return int(self.buffer)

    def as_dict(self) -> dict:
        return asdict(self)


def _positive(parse, text: str, option: str) -> float:
    try:
        value = parse(text)
    except ValueError as e:
        raise AdviceError(f"{option} {text}: {e}") from None
    if not value > 0 or not math.isfinite(value):
        raise AdviceError(f"{option} {text}: must be above 0")
    return value


def _buffer(text: str) -> str:
    t = text.strip().lower()
    try:
        n = float(t[:-3]) if t.endswith("bdp") else int(t)
    except ValueError:
        raise AdviceError(f"--buffer {text}: expected a multiple of the BDP (1bdp, 0.5bdp) or packets (1000)") from None
    if not n > 0 or not math.isfinite(n):
        raise AdviceError(f"--buffer {text}: must be above 0")
    return f"{n}bdp" if t.endswith("bdp") else str(int(n))


def ask(
    rtt: str,
    bottleneck: str,
    volume: str,
    access: str | None = None,
    buffer: str = "1bdp",
    deadline: str | None = None,
    competing: int = 0,
    competing_variant: str = "cubic",
    congestion_level: float | None = None,
    reverse: float = 0.0,
    background: float = 0.0,
) -> Question:
    """The question from the command line's text, checked: one AdviceError per problem.
    Seed 004's Cg (``congestion_level``) gives the competing flows: Cg × C / Ca pairs
    share the bottleneck, the job and Cg × C / Ca − 1 competitors."""
    rtt_s = _positive(lambda t: parse_duration(t, require_unit=True), rtt, "--rtt")
    c = _positive(parse_rate, bottleneck, "--bottleneck")
    a = _positive(parse_rate, access, "--access") if access is not None else c
    v = int(_positive(parse_size, volume, "--volume"))
    competing = _competing(competing, congestion_level, c, a)
    if competing < 0:
        raise AdviceError(f"--competing {competing}: must be 0 or more")
    if competing > limits.ADVISE_COMPETING_MAX.value:
        raise AdviceError(limits.too_big("--competing", competing, limits.ADVISE_COMPETING_MAX, " flows"))
    try:
        cv = variants.canonical(competing_variant)
    except ValueError as e:
        raise AdviceError(f"--competing-variant: {e}") from None
    rb = _levels(reverse, background)
    q = Question(rtt_s, c, a, _buffer(buffer), v, None, competing, cv, constants.DEFAULT_MTU, *rb)
    if deadline is not None:
        d = _positive(lambda t: parse_duration(t, require_unit=True), deadline, "--deadline")
        if d < q.ideal_time_s:
            raise AdviceError(
                f"--deadline {deadline}: shorter than the ideal transfer time, {format_duration(q.ideal_time_s)} "
                f"(all the bottleneck leaves, {format_rate(q.available_bps)} of goodput, from the first byte): "
                "no configuration meets it"
            )
        q = Question(rtt_s, c, a, q.buffer, v, d, competing, cv, constants.DEFAULT_MTU, *rb)
    return q


#: The background load the advisor accepts: at 1 it fills the bottleneck on average and
#: the job's completion time is unbounded.
BACKGROUND_MAX = 0.95


def _competing(competing: int, congestion_level: float | None, c: float, a: float) -> int:
    if congestion_level is None:
        return competing
    if competing:
        raise AdviceError("give --competing or --congestion-level, not both")
    if not 0 < congestion_level <= 1000 or not math.isfinite(congestion_level):
        raise AdviceError(f"--congestion-level {congestion_level:g}: must be above 0 and at most 1000")
    return max(0, round(congestion_level * c / a) - 1)


def _levels(reverse: float, background: float) -> tuple[float, float]:
    if not 0 <= reverse <= 100 or not math.isfinite(reverse):
        raise AdviceError(f"--reverse {reverse:g}: must be from 0 to 100 (reverse sources × access rate / bottleneck rate)")
    if not 0 <= background <= BACKGROUND_MAX or not math.isfinite(background):
        raise AdviceError(
            f"--background {background:g}: must be from 0 to {BACKGROUND_MAX:g} (a share of the bottleneck; "
            "from 1 on the background alone fills it)"
        )
    return float(reverse), float(background)
