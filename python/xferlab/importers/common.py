"""What the importers share: reading logs, goodput re-binning, and the resolved scenario
(:class:`RunInfo`) and provenance of an imported run."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from .. import datafile, limits, models
from ..constants import FRAME_OVERHEAD, IP_TCP_HEADERS, TCP_TIMESTAMPS, bdp_packets
from ..trace import RunInfo


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
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, ZeroDivisionError) as e:
        detail = f"missing {e}" if isinstance(e, KeyError) else str(e)
        raise ImportLogError(f"{where}: malformed {what} ({type(e).__name__}: {detail[:200]})") from None
    except pa.ArrowException as e:
        raise ImportLogError(f"{where}: malformed {what}: a value out of range ({str(e)[:200]})") from None


def check_grid(lo: float, hi: float, grid_s: float, flows: int = 1) -> None:
    """Refuses a run span or goodput grid whose tables would not fit in memory."""
    span = hi - lo
    if not (math.isfinite(span) and span <= limits.SPAN_MAX_S.value):
        raise ImportLogError(
            f"the log spans {span:.3g} s, over the limit of {limits.SPAN_MAX_S.value:.3g} s ({limits.SPAN_MAX_S.reason}); "
            "check its timestamps (or --offset)"
        )
    rows = flows * span / grid_s
    if rows > limits.SAMPLES_MAX.value:
        shortest = flows * span / limits.SAMPLES_MAX.value
        raise ImportLogError(
            f"--interval {grid_s:g}s gives {rows:.3g} goodput samples ({flows} flow(s) × {span:.3g} s), over the limit of "
            f"{limits.SAMPLES_MAX.value:.3g} ({limits.SAMPLES_MAX.reason}); use at least {shortest:.3g}s"
        )


def flow_row(e, **measured) -> dict:
    """A ``flows`` row: who the flow is (``e``'s flow_id, pair, stream, source, sink, variant,
    role, volume_bytes) and what the log measured (start, end, bytes, completion_time,
    segments_sent, retransmissions). What a log does not tell (fast recoveries, timeouts,
    and anything the caller leaves out) is null."""
    ident = ("flow_id", "pair", "stream", "source", "sink", "variant", "role", "volume_bytes")
    return {**{k: getattr(e, k) for k in ident}, "fast_recoveries": None, "timeouts": None, **measured}


def rebin(intervals: list[tuple[float, float, float]], grid_s: float, lo: float, hi: float) -> list[tuple[float, int]]:
    """Spreads byte counts measured over ``(start, end, bytes)`` intervals (run time) onto
    the run's grid ``[k·grid_s, (k+1)·grid_s)``, in proportion to the overlap (bytes are
    assumed uniform within an interval), for every cell that meets ``[lo, hi]``. Returns
    ``(t, bytes)`` per cell, t the start of the cell as in the simulator's goodput table.
    Cumulative rounding keeps the total exact."""
    if hi <= lo:
        return []
    check_grid(lo, hi, grid_s)
    k0, k1 = int(math.floor(lo / grid_s + 1e-9)), int(math.ceil(hi / grid_s - 1e-9))
    cells = np.zeros(max(0, k1 - k0))
    for a, b, n in intervals:
        a, b = max(a, lo), min(b, hi)
        if n <= 0 or b <= a:
            if n > 0 and b <= a:  # an instantaneous sample: all of it in its cell
                k = min(max(int(math.floor(a / grid_s)), k0), k1 - 1) - k0
                if 0 <= k < len(cells):
                    cells[k] += n
            continue
        span = b - a
        for k in range(int(math.floor(a / grid_s + 1e-9)), int(math.ceil(b / grid_s - 1e-9))):
            c0, c1 = max(a, k * grid_s), min(b, (k + 1) * grid_s)
            if c1 > c0 and k0 <= k < k1:
                cells[k - k0] += n * (c1 - c0) / span
    whole = np.diff(np.concatenate([[0.0], np.round(np.cumsum(cells))])).astype(np.int64)
    return [((k0 + i) * grid_s, int(max(0, b))) for i, b in enumerate(whole)]


def goodput_rows(flow_id: int, cells: list[tuple[float, int]], grid_s: float) -> list[dict]:
    return [{"t": t, "flow_id": flow_id, "bytes": b, "goodput_mbps": b * 8 / grid_s / 1e6} for t, b in cells]


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
