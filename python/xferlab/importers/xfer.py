"""xfer's ``--json`` trace → the Trace's flows, goodput and tcp tables.

The netns backend moves volume-bound transfers with ``xfer`` (``crates/xfer``) rather than
``iperf3 -n``: an ``iperf3 -n`` test ends when its last byte is *written to the socket*,
and its receiver stops counting at that moment, a socket buffer short of the volume, so its
"completion time" is early by up to a buffer's worth. xfer's receiver counts every byte and
its sender measures the completion time from the data connections being up to the
receiver's verdict, as the simulator does (first byte sent to last byte delivered).

Time bases in an xfer trace: ``goodput``/``flows`` are relative to the receiver's session
start, ``tcp`` to the sender's data start. The caller gives the sender's data start in the
run's time (``data_start_s``) and the path's one-way delay of data (``forward_delay_s``);
the receiver's first data byte is then at ``data_start_s + forward_delay_s``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from ..constants import LINUX_MSS
from ..trace import table
from .common import (
    ImportLogError,
    check_rows,
    check_values,
    flow_row,
    goodput_part,
    goodput_table,
    json_documents,
    malformed,
    rebin,
)


@dataclass
class XferFlow:
    doc: dict
    flow_id: int
    pair: int
    stream: int
    variant: str
    data_start_s: float
    forward_delay_s: float = 0.0
    role: str = "transfer"
    volume_bytes: int | None = None
    source: str = ""
    sink: str = ""
    mss: int = LINUX_MSS


#: Numbers the importer reads (non-negative, below 2**63) and the sections it relies on.
_NUMBERS = {"t", "bytes", "start", "end", "completion_time", "interval", "cwnd", "ssthresh", "srtt_ms", "retransmissions"}
_SHAPES = {"run": dict, "flows": list, "goodput": list, "tcp": list}


def load(path: str | Path) -> dict:
    """An xfer ``--json`` trace, or :class:`ImportLogError` naming the file and the field
    when it is not one, or holds a value the importer cannot use."""
    docs = json_documents(path, "an xfer --json trace")
    doc = docs[0] if len(docs) == 1 else None
    if not isinstance(doc, dict) or not isinstance(doc.get("run"), dict) or doc["run"].get("tool") != "xfer":
        raise ImportLogError(f"{path}: not an xfer --json trace (one JSON object whose run.tool is xfer)")
    check_values(doc, str(path), "an xfer trace", _NUMBERS, _SHAPES)
    for section in ("flows", "goodput", "tcp"):
        for k, row in enumerate(doc.get(section) or []):
            if not isinstance(row, dict):
                raise ImportLogError(f"{path}: {section}.{k}: expected an object, got {type(row).__name__}")
    return doc


def tables_from_xfer(
    entries: list[XferFlow], *, goodput_interval_s: float, where: str = "the xfer traces"
) -> dict[str, pa.Table]:
    """The flows, goodput and tcp tables of single-stream xfer transfers (``-P 1``); a trace
    that does not hold what they need is an :class:`ImportLogError` (``where`` names it)."""
    with malformed(where, "xfer trace"):
        return _tables(entries, goodput_interval_s, where)


def _tables(entries: list[XferFlow], goodput_interval_s: float, where: str) -> dict[str, pa.Table]:
    placed = [_placed(e, goodput_interval_s, where) for e in entries]
    check_rows([(start, end) for start, end, _, _ in placed], goodput_interval_s, where)
    flows, goodput, tcp = [], [], []
    for e, (start, end, rx, f) in zip(entries, placed, strict=True):
        run = e.doc.get("run") or {}
        received = int(f.get("bytes") or 0)
        completion = run.get("completion_time")
        if e.volume_bytes is not None and received < e.volume_bytes:
            completion = None
        flows.append(
            flow_row(
                e,
                start=start,
                end=end,
                bytes=received,
                completion_time=float(completion) if completion is not None else None,
                segments_sent=-(-int(run.get("bytes") or received) // e.mss),
                retransmissions=int(max((r.get("retransmissions") or 0 for r in e.doc.get("tcp") or []), default=0)),
            )
        )
        goodput.append(goodput_part(e.flow_id, rebin(rx, goodput_interval_s, start, end), goodput_interval_s))
        for r in e.doc.get("tcp") or []:
            tcp.append(
                {
                    "t": e.data_start_s + float(r["t"]),
                    "flow_id": e.flow_id,
                    "cwnd": int(r.get("cwnd") or 0),
                    "ssthresh": r.get("ssthresh"),
                    "srtt_ms": float(r["srtt_ms"]) if r.get("srtt_ms") is not None else None,
                    "rto_ms": None,  # xfer's trace holds neither the RTO, in-flight data nor the state
                    "in_flight": None,
                    "retransmissions": int(r.get("retransmissions") or 0),
                    "ca_state": None,
                }
            )
    return {"flows": table("flows", flows), "goodput": goodput_table(goodput), "tcp": table("tcp", tcp)}


def _placed(e: XferFlow, goodput_interval_s: float, where: str) -> tuple[float, float, list[tuple[float, float, float]], dict]:
    """A transfer's first and last time in the run, its goodput intervals (run time) and its
    flows row."""
    run = e.doc.get("run") or {}
    f_rows = e.doc.get("flows") or []
    if len(f_rows) != 1:
        raise ImportLogError(f"{where}: flow {e.flow_id}: expected one xfer stream, found {len(f_rows)}")
    f = f_rows[0]
    # receiver time r ↦ run time: its first data byte arrived one forward delay after the data start
    shift = e.data_start_s + e.forward_delay_s - float(f["start"])
    start, end = e.data_start_s, shift + float(f["end"])
    interval = float(run.get("interval") or goodput_interval_s)
    rx, prev = [], None
    for g in sorted(e.doc.get("goodput") or [], key=lambda r: r["t"]):
        t = float(g["t"])
        a = prev if prev is not None else max(float(f["start"]), t - interval)
        rx.append((shift + a, shift + t, float(g["bytes"])))
        prev = t
    return start, end, rx, f
