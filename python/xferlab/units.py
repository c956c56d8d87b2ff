"""Quantities written as strings with units: ``10Gbps``, ``11.5ms``, ``15GB``.

Rates are in bits per second of wire time, decimal prefixes (``1Gbps`` = 1e9 bit/s).
Sizes accept decimal (``GB`` = 1e9 bytes) and binary (``GiB`` = 2**30 bytes) prefixes.
Each parser raises ``ValueError`` with a message that says what was expected.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"(?P<num>[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>[A-Za-z/]*)\s*$")

_RATE_UNITS = {
    "bps": 1.0,
    "b/s": 1.0,
    "bit/s": 1.0,
    "kbps": 1e3,
    "kb/s": 1e3,
    "kbit/s": 1e3,
    "mbps": 1e6,
    "mb/s": 1e6,
    "mbit/s": 1e6,
    "gbps": 1e9,
    "gb/s": 1e9,
    "gbit/s": 1e9,
    "tbps": 1e12,
    "tb/s": 1e12,
    "tbit/s": 1e12,
}
_TIME_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "min": 60.0,
    "h": 3600.0,
}
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def _short(text: object) -> str:
    r = repr(text)
    return r if len(r) <= 40 else r[:36] + "…" + r[-3:]


def _split(text: object, what: str, example: str) -> tuple[float, str]:
    if isinstance(text, str) and len(text) > 64:
        raise ValueError(f"expected a {what} such as {example!r}, got {_short(text)}")
    if isinstance(text, bool):
        raise ValueError(f"expected a {what} such as {example!r}, got {text!r}")
    if isinstance(text, (int, float)):
        try:
            value = float(text)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise ValueError(f"{what} {_short(text)} is not a finite number")
        return value, ""
    if not isinstance(text, str):
        raise ValueError(f"expected a {what} such as {example!r}, got {_short(text)}")
    m = _RE.match(text.replace("µ", "u"))
    if not m:
        raise ValueError(f"expected a {what} such as {example!r}, got {text!r}")
    value = float(m.group("num"))
    if not math.isfinite(value):
        raise ValueError(f"{what} {text!r} is not a finite number")
    return value, m.group("unit")


def parse_rate(text: object) -> float:
    """Bits per second from ``10Gbps``, ``400Mbit/s``, ``1.5 Gb/s``."""
    value, unit = _split(text, "rate", "10Gbps")
    if unit == "":
        raise ValueError(f"rate {text!r} needs a unit, e.g. '{text}Mbps' or '{text}Gbps'")
    if unit in ("Bps", "B/s") or unit[:2] in ("MB", "GB", "KB", "TB", "kB"):
        raise ValueError(f"rate {text!r}: rates are in bits per second (Mbps, Gbps), not bytes")
    scale = _RATE_UNITS.get(unit.lower())
    if scale is None:
        raise ValueError(f"unknown rate unit {unit!r} in {text!r} (use bps, kbps, Mbps, Gbps, Tbps)")
    return value * scale


def parse_duration(text: object, require_unit: bool = False) -> float:
    """Seconds from ``11.5ms``, ``20s``, ``2min``; a bare number is seconds, unless
    ``require_unit`` (scenario files: ``rtt: 10`` is refused, as a bare rate is; 0 is 0)."""
    value, unit = _split(text, "duration", "11.5ms")
    if unit == "":
        if require_unit and value != 0:
            raise ValueError(f"duration {text!r} needs a unit, e.g. '{text}ms' or '{text}s'")
        return value
    scale = _TIME_UNITS.get(unit) or _TIME_UNITS.get(unit.lower())
    if scale is None:
        raise ValueError(f"unknown time unit {unit!r} in {text!r} (use ns, us, ms, s, min, h)")
    return value * scale


def parse_size(text: object) -> int:
    """Bytes from ``15GB`` (10**9), ``1GiB`` (2**30), ``3000MB``; a bare number is bytes."""
    value, unit = _split(text, "size", "15GB")
    if unit == "":
        scale = 1
    else:
        if unit.endswith("bit") or unit in ("Gb", "Mb", "Kb", "kb", "Tb"):
            raise ValueError(f"size {text!r}: sizes are in bytes (B, MB, GB, GiB), not bits")
        scale = _SIZE_UNITS.get(unit.lower())
        if scale is None:
            raise ValueError(f"unknown size unit {unit!r} in {text!r} (use B, KB, MB, GB, TB, KiB, MiB, GiB)")
    size = value * scale
    if not math.isfinite(size):
        raise ValueError(f"size {text!r} is not a finite number")
    return int(round(size))


def format_rate(bps: float) -> str:
    for unit, scale in (("Tbps", 1e12), ("Gbps", 1e9), ("Mbps", 1e6), ("kbps", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g}{unit}"
    return f"{bps:g}bps"


def format_duration(s: float) -> str:
    if 1e5 <= s < 1e15:
        return f"{s:.0f}s"
    if s >= 1 or s == 0:
        return f"{s:g}s"
    if s >= 1e-3:
        return f"{s * 1e3:g}ms"
    return f"{s * 1e6:g}us"


def format_elapsed(s: float) -> str:
    """A wall time for people: ``45 s``, ``3 min 20 s``, ``2 h 05 min``, ``3 d 4 h``."""
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    if s < 86400:
        return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"
    return f"{int(s // 86400)} d {int(s % 86400 // 3600)} h"


def format_size(b: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if b >= scale:
            return f"{b / scale:g}{unit}"
    return f"{b:g}B"


def is_finite_positive(x: float) -> bool:
    return math.isfinite(x) and x > 0
