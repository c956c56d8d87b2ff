"""What the importers share: the Trace schemas, goodput re-binning, the synthetic
"resolved" scenario of an imported run, and writing the run folder."""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import platform
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from .. import datafile, limits, metrics, models, report, runfolder
from ..trace import Trace


class ImportLogError(Exception):
    """A log that cannot be imported; the message names the file and what is wrong."""


#: The Trace tables, exactly as the simulator writes them (types and nullability).
SCHEMAS = {
    "flows": pa.schema(
        [
            pa.field("flow_id", pa.uint32(), False),
            pa.field("pair", pa.uint32(), False),
            pa.field("stream", pa.uint32(), False),
            pa.field("source", pa.string(), False),
            pa.field("sink", pa.string(), False),
            pa.field("variant", pa.string(), False),
            pa.field("role", pa.string(), False),
            pa.field("start", pa.float64(), False),
            pa.field("end", pa.float64(), False),
            pa.field("bytes", pa.uint64(), False),
            pa.field("volume_bytes", pa.uint64(), True),
            pa.field("completion_time", pa.float64(), True),
            pa.field("segments_sent", pa.uint64(), False),
            pa.field("retransmissions", pa.uint64(), False),
            pa.field("fast_recoveries", pa.uint64(), False),
            pa.field("timeouts", pa.uint64(), False),
        ]
    ),
    "goodput": pa.schema(
        [
            pa.field("t", pa.float64(), False),
            pa.field("flow_id", pa.uint32(), False),
            pa.field("bytes", pa.uint64(), False),
            pa.field("goodput_mbps", pa.float64(), False),
        ]
    ),
    "link": pa.schema(
        [
            pa.field("t", pa.float64(), False),
            pa.field("link", pa.string(), False),
            pa.field("bytes", pa.uint64(), False),
            pa.field("packets", pa.uint64(), False),
            pa.field("throughput_mbps", pa.float64(), False),
            pa.field("drops", pa.uint64(), False),
            pa.field("losses", pa.uint64(), False),
            pa.field("queue_pkts", pa.uint32(), False),
            pa.field("queue_max_pkts", pa.uint32(), False),
        ]
    ),
    "tcp": pa.schema(
        [
            pa.field("t", pa.float64(), False),
            pa.field("flow_id", pa.uint32(), False),
            pa.field("cwnd", pa.uint32(), False),
            pa.field("ssthresh", pa.uint32(), True),
            pa.field("srtt_ms", pa.float64(), False),
            pa.field("rto_ms", pa.float64(), False),
            pa.field("in_flight", pa.uint32(), False),
            pa.field("retransmissions", pa.uint64(), False),
            pa.field("ca_state", pa.uint8(), False),
        ]
    ),
}


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
    segments_sent, retransmissions). Logs do not tell fast recoveries or timeouts: 0."""
    ident = ("flow_id", "pair", "stream", "source", "sink", "variant", "role", "volume_bytes")
    return {**{k: getattr(e, k) for k in ident}, **measured, "fast_recoveries": 0, "timeouts": 0}


def table(name: str, rows: list[dict]) -> pa.Table:
    """A Trace table from row dicts, with the exact schema (an empty table when no rows)."""
    schema = SCHEMAS[name]
    return pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()


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


def synthetic_resolved(
    *,
    name: str,
    flows: pa.Table,
    goodput_interval_s: float,
    capacity_bps: float | None,
    rtt_s: float | None,
    mss: int,
    end_s: float | None,
) -> dict:
    """A "resolved" scenario for an imported run: what the logs and the user's options say,
    ``None`` where nothing does (the metrics that need it then come out as ``None``).
    Imported runs have no access rate of their own: the bottleneck capacity stands in."""
    f = flows.to_pandas()
    transfers_df = f[f["role"] == "transfer"]
    header = 52  # Linux default: IP + TCP + timestamps
    mtu = mss + header
    variants = sorted(set(transfers_df["variant"]))
    transfers = []
    for pair, g in transfers_df.groupby("pair"):
        vol = int(g["volume_bytes"].sum()) if g["volume_bytes"].notna().all() else None
        transfers.append(
            {
                "pair": int(pair),
                "streams": int(len(g)),
                "start_s": float(g["start"].min()),
                "volume_bytes": vol,
                "variant": "+".join(sorted(set(g["variant"]))),
            }
        )
    volumes = [t["volume_bytes"] for t in transfers]
    volume = int(np.mean(volumes)) if volumes and all(v is not None for v in volumes) else None
    ideal = ideal_goodput = None
    if capacity_bps:
        r = models.ideal_rates(capacity_bps, mtu=mtu, header_bytes=header)
        ideal = {"r_eth": r.r_eth_mbps, "r_ip": r.r_ip_mbps, "r_tp": r.r_tp_mbps}
        ideal_goodput = r.r_tp_mbps
        if volume is not None:
            times = models.ideal_completion_times(
                [t["volume_bytes"] for t in transfers], [t["start_s"] for t in transfers], r.r_tp_mbps * 1e6, r.r_tp_mbps * 1e6
            )
            for t, ct in zip(transfers, times, strict=True):
                t["ideal_completion_s"] = ct
    streams = sorted({t["streams"] for t in transfers})
    durations = (transfers_df["end"] - transfers_df["start"]).to_numpy()
    return {
        "name": name,
        "seed": None,
        "pairs": len(transfers),
        "streams": streams[0] if len(streams) == 1 else max(streams, default=0),
        "variant": variants[0] if len(variants) == 1 else "+".join(variants) or "unknown",
        "access_rate_bps": capacity_bps,
        "bottleneck_rate_bps": capacity_bps,
        "rtt_s": rtt_s,
        "mtu": mtu,
        "mss": mss,
        "header_bytes": header,
        "frame_overhead": 38,
        "bdp_packets": capacity_bps * rtt_s / (8 * mtu) if capacity_bps and rtt_s else None,
        "buffer_packets": None,
        "loss_rate": None,
        "shaper": None,
        "ideal_rates_mbps": ideal,
        "ideal_goodput_mbps": ideal_goodput,
        "window_cap_packets": None,
        "initial_cwnd": None,
        "delayed_ack": None,
        "rto_min_s": None,
        "duration_s": None if volume is not None else (float(np.median(durations)) if len(durations) else None),
        "volume_bytes": volume,
        "end_s": end_s,
        "goodput_interval_s": goodput_interval_s,
        "link_interval_s": goodput_interval_s,
        "tcp_interval_s": None,
        "window": "all",
        "reverse_sources": int((f["role"] == "reverse").sum()),
        "background_sources": 0,
        "background": [],
        "pair_paths": [],
        "flows": [],
        "transfers": transfers,
    }


def unknown_metrics(*, link: bool, timeouts: bool, retransmissions: bool = True) -> list[str]:
    """The metrics an import cannot know, for ``resolved["unknown_metrics"]`` (metrics.py
    then reports them as None, also when ``xferlab report`` recomputes them)."""
    out = []
    if not link:
        out += ["aggregate_throughput_mbps", "goodput_over_throughput", "bottleneck_drops", "bottleneck_losses"]
        out += ["bottleneck_max_queue_pkts"]
    if not timeouts:
        out.append("timeouts")
    if not retransmissions:
        out.append("retransmissions")
    return out


def write_run(
    out: Path,
    *,
    tables: dict[str, pa.Table],
    resolved: dict,
    given: dict,
    imported: dict,
    force: bool = False,
) -> dict:
    """Computes the metrics and writes a whole run folder at ``out`` (atomically, as
    :func:`xferlab.engine.run` does); returns the metrics."""
    from ..engine import versions

    trace_meta = {"backend": "import", "seed": None, "end_s": resolved["end_s"], "scenario": given, "resolved": resolved}
    trace = Trace(run=trace_meta, **{n: tables[n] for n in ("flows", "goodput", "link", "tcp")})
    try:
        m = metrics.compute(trace, resolved)
    except metrics.MetricsError as e:
        raise ImportLogError(f"cannot compute the metrics of the imported run: {e}") from None
    run_meta = {
        "scenario": given,
        "resolved": resolved,
        "backend": "import",
        "seed": None,
        "versions": versions(),
        "end_s": resolved["end_s"],
        "imported": imported,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {"node": platform.node(), "machine": platform.machine(), "cpus": os.cpu_count()},
    }
    with runfolder.staged(out, force) as tmp:
        trace.write(tmp / "trace")
        runfolder.write_json(tmp / runfolder.RUN_FILE, run_meta)
        runfolder.write_json(tmp / runfolder.METRICS_FILE, m)
        report.render(tmp, trace=trace, run_meta=run_meta, metrics=m)
    return m
