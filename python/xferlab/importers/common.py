"""What the importers share: reading logs (JSON documents, values checked), the run's name,
the bounds checked before any table is made (flows, span, goodput rows), goodput
re-binning, the checks of the finished Trace (its contract, its goodput against the
capacity given), and the resolved scenario (:class:`RunInfo`) of an imported run."""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import datafile, limits, metrics, models
from ..constants import FRAME_OVERHEAD, IP_TCP_HEADERS, TCP_TIMESTAMPS, bdp_packets
from ..runinfo import RunInfo
from ..trace import SCHEMAS, Trace, TraceError
from ..units import format_rate

#: The largest MSS TCP can announce (its option is 16 bits).
MSS_MAX = 65535
#: Mean goodput above r_TP that interval edges and clock steps explain (no warning).
GOODPUT_OVER_CAPACITY_NOISE = 0.01


class ImportLogError(Exception):
    """A log that cannot be imported; the message names the file and what is wrong."""


def read_log(path: str | Path) -> str:
    """A log file's text; :class:`ImportLogError` naming the file when it cannot be read."""
    try:
        return datafile.read_text(path, "log file", int(limits.LOG_MAX_BYTES.value))
    except datafile.DataFileError as e:
        raise ImportLogError(str(e)) from None


@contextlib.contextmanager
def malformed(where: str, what: str) -> Iterator[None]:
    """Turns what a malformed log makes the parsing code raise (a missing key, a wrong
    type, a value out of range) into one :class:`ImportLogError` naming the file."""
    try:
        yield
    except ImportLogError:
        raise
    except TraceError as e:  # a value no run holds (the Trace's contract says which)
        raise ImportLogError(f"{where}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, ZeroDivisionError) as e:
        detail = f"missing {e}" if isinstance(e, KeyError) else str(e)
        raise ImportLogError(f"{where}: malformed {what} ({type(e).__name__}: {detail[:200]})") from None
    except pa.ArrowException as e:
        raise ImportLogError(f"{where}: malformed {what}: a value out of range ({str(e)[:200]})") from None


#: What a run's name may hold: the scenario's grammar (it names a folder of results/).
NAME_CHARS = re.compile(r"[A-Za-z0-9._-]")


def check_name(name: str, option: str = "--name") -> str:
    """``name`` when it is one folder name of the scenario's grammar (letters, digits, '.',
    '_', '-'; starting with a letter or a digit; at most :data:`limits.NAME_MAX_CHARS`),
    else :class:`ImportLogError` saying which rule it breaks: a name is a folder inside
    ``results/``, never a path."""
    why = _name_fault(name)
    if why:
        raise ImportLogError(f"{option} {name[:60]!r}: the name {why}; use letters, digits, '.', '_' and '-'")
    return name


def _name_fault(name: str) -> str | None:
    bad = sorted({c for c in name if not NAME_CHARS.fullmatch(c)})
    shown = ", ".join(repr(c) if c.isprintable() else f"U+{ord(c):04X}" for c in bad[:5])
    if not name:
        return "is empty"
    if any(c in name for c in "/\\\0"):
        return f"holds {shown}: it names one folder inside results/, not a path"
    if name in (".", ".."):
        return f"is {name!r}: it names one folder inside results/"
    if bad:
        return f"holds {shown}"
    if not name[0].isalnum():
        return f"starts with {name[0]!r} (a hidden or option-like folder name)"
    if len(name) > limits.NAME_MAX_CHARS.value:
        limit = limits.NAME_MAX_CHARS
        return f"is {len(name)} characters long, over the limit of {limit.value:g} ({limit.reason})"
    return None


def name_of_file(path: str | Path) -> str:
    """A run name from a log's file name: its stem within the grammar of :func:`check_name`
    (other characters become '-'), or "import"."""
    stem = "".join(c if NAME_CHARS.fullmatch(c) else "-" for c in Path(path).stem)
    stem = stem.lstrip("._-")[: int(limits.NAME_MAX_CHARS.value)]
    return stem or "import"


def json_documents(path: str | Path, what: str) -> list:
    """The JSON documents of a log (one, or several one after the other as iperf3's
    ``--logfile`` writes them), refused with :class:`ImportLogError` naming the file when it
    is unreadable, not JSON (``what`` says what was expected), holds NaN or Infinity, or nests
    deeper than data files may (:data:`datafile.MAX_DEPTH`)."""
    p = Path(path)
    text = read_log(p)

    def constant(name: str):
        raise ImportLogError(f"{p}: {name} is not a number a log holds (a corrupt or edited file?)")

    decoder = json.JSONDecoder(parse_constant=constant)
    docs, i = [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        try:
            doc, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise ImportLogError(f"{p}: not {what}: {e}") from None
        except RecursionError:  # the decoder's own guard, some thousand levels down
            raise ImportLogError(str(datafile.too_deep(str(p)))) from None
        except ValueError as e:  # an integer of thousands of digits
            raise ImportLogError(f"{p}: not {what}: {str(e).split(';')[0]}") from None
        docs.append(doc)
    return docs


def check_values(
    node, where: str, what: str, numbers: set[str], shapes: dict[str, type], texts: dict[str, int] | None = None
) -> None:
    """Refuses, naming the place, what the importer would read wrongly: nesting deeper than
    :data:`datafile.MAX_DEPTH`, a value under one of ``numbers`` that is not a number or is
    out of range (negative, ≥ 2**63), a section of ``shapes`` of the wrong type, a value of
    ``texts`` that is not text or longer than its bound. A value of ``numbers`` may also be
    a section of ``shapes`` ("start" in iperf3)."""
    texts = texts or {}
    stack = [(node, "", 1)]
    while stack:
        v, at, depth = stack.pop()
        if depth > datafile.MAX_DEPTH:
            raise ImportLogError(str(datafile.too_deep(f"{where}: {at}")))
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            here = f"{at}.{k}" if at else str(k)
            shaped = k in shapes and isinstance(x, shapes[k])
            if k in numbers and x is not None and not shaped:
                if isinstance(x, bool) or not isinstance(x, (int, float)):
                    raise ImportLogError(f"{where}: {here}: expected a number, got {str(x)[:40]!r}")
                if not 0 <= x < 2**63:
                    raise ImportLogError(f"{where}: {here}: {x:.4g} is out of range for {what}")
            elif k in shapes and x is not None and not shaped:
                raise ImportLogError(f"{where}: {here}: expected a {shapes[k].__name__}, got {type(x).__name__}")
            elif k in texts and x is not None and not (isinstance(x, str) and len(x) <= texts[k]):
                got = f"{len(x)} characters" if isinstance(x, str) else type(x).__name__
                raise ImportLogError(f"{where}: {here}: expected a name of at most {texts[k]} characters, got {got}")
            if isinstance(x, (dict, list)):
                stack.append((x, here, depth + 1))


def check_mss(mss: float | None, where: str, field: str) -> None:
    """Refuses an MSS no TCP connection has (a corrupt or edited log): every window and
    rate of the run would be scaled by it."""
    if mss is not None and not 1 <= mss <= MSS_MAX:
        raise ImportLogError(f"{where}: {field} {mss:g} is not a TCP MSS (1 to {MSS_MAX} bytes: the MSS option is 16 bits)")


def check_rows(spans: list[tuple[float, float]], grid_s: float, where: str) -> int:
    """Refuses, before any is made, a goodput table that would not fit in memory or a run
    longer than any scenario may be: ``spans`` are the flows' (first, last) times in the run.
    Returns the number of rows the goodput table will have."""
    if not spans:
        return 0
    if len(spans) > limits.FLOWS_MAX.value:
        raise ImportLogError(f"{where}: {limits.too_big('a run of', len(spans), limits.FLOWS_MAX, ' flows')}; split the log")
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    span = hi - lo
    if not (math.isfinite(lo) and math.isfinite(span) and lo >= 0 and span <= limits.SPAN_MAX_S.value):
        raise ImportLogError(
            f"{where}: the log spans {span:.3g} s (from {lo:.6g} to {hi:.6g} s), over the limit of "
            f"{limits.SPAN_MAX_S.value:.3g} s ({limits.SPAN_MAX_S.reason}); check its timestamps (or --offset)"
        )
    rows = sum(_cells(a, b, grid_s) for a, b in spans)
    if rows > limits.SAMPLES_MAX.value:
        # The shortest grid that fits (a cell more per flow at the edges), rounded up to 2 digits.
        shortest = sum(max(0.0, b - a) for a, b in spans) / max(1.0, limits.SAMPLES_MAX.value - len(spans))
        step = 10.0 ** (math.floor(math.log10(shortest)) - 1)
        shortest = math.ceil(shortest / step * (1 - 1e-12)) * step
        raise ImportLogError(
            f"{where}: --interval {grid_s:g}s would give {rows:.3g} goodput samples ({len(spans)} flow(s) over "
            f"{span:.3g} s), over the limit of {limits.SAMPLES_MAX.value:.3g} ({limits.SAMPLES_MAX.reason}); "
            f"use --interval {shortest:.3g}s or more, or split the log"
        )
    return rows


def _cells(lo: float, hi: float, grid_s: float) -> int:
    """Cells of the grid that meet ``[lo, hi]`` (as :func:`rebin` makes them)."""
    if not hi > lo:
        return 0
    return max(0, math.ceil(hi / grid_s - 1e-9) - math.floor(lo / grid_s + 1e-9))


def checked(trace: Trace, where: str, sender_counts: bool = False) -> Trace:
    """The Trace of an import, refused naming the log (``where``) when it breaks the Trace's
    contract (a value no run holds: an RTO of years, say) or when its goodput is more than
    any path carries (a mean over :data:`limits.RATE_MAX_BPS`); then held against the
    capacity given (:func:`_against_capacity`)."""
    with malformed(where, "log"):
        trace.validate()
    info, gp = trace.info, trace.goodput
    if gp.num_rows:
        span = pc.max(gp.column("t")).as_py() + info.goodput_interval_s - pc.min(gp.column("t")).as_py()
        mean = pc.sum(pc.cast(gp.column("bytes"), pa.float64(), safe=False)).as_py() * 8 / span
        if mean > limits.RATE_MAX_BPS.value:
            raise ImportLogError(
                f"{where}: the mean goodput, {format_rate(mean)}, is over the limit of "
                f"{format_rate(limits.RATE_MAX_BPS.value)} ({limits.RATE_MAX_BPS.reason}); a corrupt log?"
            )
    if info.ideal_goodput_mbps and info.bottleneck_rate_bps:
        _against_capacity(trace, where, sender_counts)
    return trace


def _against_capacity(trace: Trace, where: str, sender_counts: bool) -> None:
    """The aggregate goodput G against the ideal goodput r_TP of the capacity given: far
    above (over :data:`limits.GOODPUT_OVER_CAPACITY_MAX` × r_TP) the log is refused (that
    capacity is not the path's bottleneck: a slip of units?); above, the run gets a warning.
    A goodput counted by senders runs up to a socket buffer ahead of what arrived: said."""
    info = trace.info
    g = metrics.compute(trace)["aggregate_goodput_mbps"]  # G as the run's metrics will say it
    r_tp, c = info.ideal_goodput_mbps, info.bottleneck_rate_bps / 1e6
    if g is None or g <= r_tp * (1 + GOODPUT_OVER_CAPACITY_NOISE):
        return
    said = (
        f"the aggregate goodput G, {g:.4g} Mbit/s, is {g / r_tp:.3g} times the ideal goodput r_TP "
        f"({r_tp:.4g} Mbit/s) of --capacity {c:g} Mbit/s"
    )
    senders = "; it is the senders' count, which runs up to a socket buffer ahead of what arrived" if sender_counts else ""
    limit = limits.GOODPUT_OVER_CAPACITY_MAX
    if g / r_tp > limit.value:
        raise ImportLogError(
            f"{where}: {said}, over the limit of {limit.value:g} ({limit.reason}){senders}; "
            "give the path's bottleneck rate as --capacity, or leave it out"
        )
    trace.run["provenance"]["warnings"].append(
        f"{said}: the capacity given is not the path's bottleneck{senders}; "
        f"the efficiency ({g / c:.3g}) and the figures against r_TP overstate"
    )


def flow_row(e, **measured) -> dict:
    """A ``flows`` row: who the flow is (``e``'s flow_id, pair, stream, source, sink, variant,
    role, volume_bytes) and what the log measured (start, end, bytes, completion_time,
    segments_sent, retransmissions). What a log does not tell (fast recoveries, timeouts,
    and anything the caller leaves out) is null."""
    ident = ("flow_id", "pair", "stream", "source", "sink", "variant", "role", "volume_bytes")
    return {**{k: getattr(e, k) for k in ident}, "fast_recoveries": None, "timeouts": None, **measured}


def rebin(intervals: list[tuple[float, float, float]], grid_s: float, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Spreads byte counts measured over ``(start, end, bytes)`` intervals (run time) onto
    the run's grid ``[k·grid_s, (k+1)·grid_s)``, in proportion to the overlap (bytes are
    assumed uniform within an interval), for every cell that meets ``[lo, hi]``; a sample
    of no duration (or outside ``[lo, hi]``) counts whole in its (nearest) cell. Returns
    each cell's start (t, as in the simulator's goodput table) and bytes. Cumulative
    rounding keeps the total exact. The caller bounds the cells first (:func:`check_rows`)."""
    k0, k1 = math.floor(lo / grid_s + 1e-9), math.ceil(hi / grid_s - 1e-9)
    n = _cells(lo, hi, grid_s)
    if n == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    cells = np.zeros(n)
    iv = np.asarray(intervals, dtype=float).reshape(-1, 3)
    a, b, count = np.maximum(iv[:, 0], lo), np.minimum(iv[:, 1], hi), iv[:, 2]
    whole = (count > 0) & (b <= a)
    k = np.clip(np.floor(a[whole] / grid_s), k0, k1 - 1).astype(np.int64) - k0
    np.add.at(cells, k, count[whole])
    spread = (count > 0) & (b > a)
    if spread.any():
        _spread(cells, a[spread], b[spread], count[spread], grid_s, k0)
    rounded = np.diff(np.concatenate([[0.0], np.round(np.cumsum(cells))]))
    return (k0 + np.arange(n)) * grid_s, np.maximum(rounded, 0).astype(np.int64)


def _spread(cells: np.ndarray, a: np.ndarray, b: np.ndarray, count: np.ndarray, grid_s: float, k0: int) -> None:
    """Adds to ``cells`` (cell k0 first) each interval's bytes in proportion to its overlap
    with each cell: a share to its first and its last cell, the rest evenly over the cells
    between (a difference array). Each interval keeps its total exactly, and the sums stay
    within a count's magnitude however short an interval is (no rates are formed)."""
    n = len(cells)
    ka = np.clip(np.floor(a / grid_s + 1e-9), k0, k0 + n - 1).astype(np.int64)
    kb = np.maximum(np.clip(np.ceil(b / grid_s - 1e-9) - 1, k0, k0 + n - 1).astype(np.int64), ka)
    first, last, multi = count.copy(), np.zeros(len(count)), kb > ka  # within one cell: all in it
    span = b[multi] - a[multi]  # over a cell boundary: not shorter than the boundary's guard
    first[multi] = np.clip(count[multi] * (((ka[multi] + 1) * grid_s - a[multi]) / span), 0, count[multi])
    last[multi] = np.clip(count[multi] * ((b[multi] - kb[multi] * grid_s) / span), 0, count[multi] - first[multi])
    inner = kb - ka - 1
    rest = np.maximum(count - first - last, 0.0)
    first = first + np.where(inner > 0, 0.0, rest)  # no cell between: the rounding stays in the first
    np.add.at(cells, ka - k0, first)
    np.add.at(cells, kb - k0, last)
    per = np.where(inner > 0, rest / np.maximum(inner, 1), 0.0)
    diff = np.zeros(n + 1)
    np.add.at(diff, ka + 1 - k0, per)
    np.add.at(diff, kb - k0, -per)
    cells += np.cumsum(diff)[:n]


def goodput_part(flow_id: int, cells: tuple[np.ndarray, np.ndarray], grid_s: float) -> pa.Table:
    """One flow's rows of the goodput table, from :func:`rebin`'s cells."""
    t, n = cells
    return pa.table(
        {
            "t": t,
            "flow_id": np.full(len(t), flow_id, dtype=np.uint32),
            "bytes": n.astype(np.uint64),
            "goodput_mbps": n.astype(float) * 8 / grid_s / 1e6,
        },
        schema=SCHEMAS["goodput"],
    )


def goodput_table(parts: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(parts) if parts else SCHEMAS["goodput"].empty_table()


def imported_info(
    *,
    name: str,
    flows: pa.Table,
    goodput_interval_s: float,
    capacity_bps: float | None,
    rtt_s: float | None,
    mss: int,
    end_s: float | None,
) -> RunInfo:
    """The resolved scenario of an imported run: what the logs and the user's options say,
    None where nothing does (the metrics that need it then come out as None). An import has
    no access rate of its own: the bottleneck capacity stands in. The same :class:`RunInfo`
    as a scenario's: its fields are checked by the same model."""
    f = flows.to_pandas()
    transfers_df = f[f["role"] == "transfer"]
    header = IP_TCP_HEADERS + TCP_TIMESTAMPS  # Linux default
    mtu = mss + header
    transfers = [
        {
            "pair": int(pair),
            "streams": int(len(g)),
            "start_s": float(g["start"].min()),
            "volume_bytes": int(g["volume_bytes"].sum()) if g["volume_bytes"].notna().all() else None,
            "variant": "+".join(sorted(set(g["variant"]))),
        }
        for pair, g in transfers_df.groupby("pair")
    ]
    volumes = [t["volume_bytes"] for t in transfers]
    volume = int(np.mean(volumes)) if volumes and all(v is not None for v in volumes) else None
    ideal = ideal_goodput = None
    if capacity_bps:
        r = models.ideal_rates(capacity_bps, mtu=mtu, header_bytes=header)
        ideal = {"r_eth": r.r_eth_mbps, "r_ip": r.r_ip_mbps, "r_tp": r.r_tp_mbps}
        ideal_goodput = r.r_tp_mbps
        if volume is not None:
            times = models.ideal_completion_times(
                volumes, [t["start_s"] for t in transfers], r.r_tp_mbps * 1e6, r.r_tp_mbps * 1e6
            )
            for t, ct in zip(transfers, times, strict=True):
                t["ideal_completion_s"] = ct
    variants = sorted(set(transfers_df["variant"]))
    streams = sorted({t["streams"] for t in transfers})
    durations = (transfers_df["end"] - transfers_df["start"]).to_numpy()
    return RunInfo(
        name=name,
        pairs=len(transfers),
        streams=streams[0] if len(streams) == 1 else max(streams, default=0),
        variant=variants[0] if len(variants) == 1 else "+".join(variants) or "unknown",
        access_rate_bps=capacity_bps,
        bottleneck_rate_bps=capacity_bps,
        rtt_s=rtt_s,
        mtu=mtu,
        mss=mss,
        header_bytes=header,
        frame_overhead=FRAME_OVERHEAD,
        bdp_packets=bdp_packets(capacity_bps, rtt_s, mtu) if capacity_bps and rtt_s else None,
        ideal_rates_mbps=ideal,
        ideal_goodput_mbps=ideal_goodput,
        duration_s=None if volume is not None else (float(np.median(durations)) if len(durations) else None),
        volume_bytes=volume,
        end_s=end_s,
        goodput_interval_s=goodput_interval_s,
        reverse_sources=int((f["role"] == "reverse").sum()),
        transfers=transfers,
    )


def unknown(*, retransmissions: bool, source: str) -> dict[str, str]:
    """What an import cannot know, and why: the metrics and trace columns that are null."""
    out = {
        "link": f"{source} logs have no bottleneck counters",
        "aggregate_throughput_mbps": f"{source} logs have no bottleneck counters",
        "goodput_over_throughput": f"{source} logs have no bottleneck counters",
        "bottleneck_drops": f"{source} logs have no bottleneck counters",
        "bottleneck_losses": f"{source} logs have no bottleneck counters",
        "bottleneck_max_queue_pkts": f"{source} logs have no bottleneck counters",
        "timeouts": f"{source} does not report timeouts",
        "flows.timeouts": f"{source} does not report timeouts",
        "flows.fast_recoveries": f"{source} does not report fast recoveries",
    }
    if not retransmissions:
        out["retransmissions"] = "the senders' logs were not collected"
        out["flows.retransmissions"] = out["retransmissions"]
    return out
