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

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from ..constants import LINUX_MSS
from ..trace import table
from .common import ImportLogError, flow_row, goodput_rows, read_log, rebin


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


def load(path: str | Path) -> dict:
    try:
        doc = json.loads(read_log(path))
    except ValueError as e:
        raise ImportLogError(f"{path}: not an xfer trace ({e})") from None
    if not isinstance(doc, dict) or doc.get("run", {}).get("tool") != "xfer":
        raise ImportLogError(f"{path}: not an xfer --json trace")
    return doc


def tables_from_xfer(entries: list[XferFlow], *, goodput_interval_s: float) -> dict[str, pa.Table]:
    """The flows, goodput and tcp tables of single-stream xfer transfers (``-P 1``)."""
    flows, goodput, tcp = [], [], []
    for e in entries:
        run = e.doc.get("run") or {}
        f_rows = e.doc.get("flows") or []
        if len(f_rows) != 1:
            raise ImportLogError(f"flow {e.flow_id}: expected one xfer stream, found {len(f_rows)}")
        f = f_rows[0]
        # receiver time r ↦ run time: its first data byte arrived one forward delay after the data start
        shift = e.data_start_s + e.forward_delay_s - float(f["start"])
        start, end = e.data_start_s, shift + float(f["end"])
        received = int(f.get("bytes") or 0)
        completion = run.get("completion_time")
        if e.volume_bytes is not None and received < e.volume_bytes:
            completion = None
        interval = float(run.get("interval") or goodput_interval_s)
        rx, prev = [], None
        for g in sorted(e.doc.get("goodput") or [], key=lambda r: r["t"]):
            t = float(g["t"])
            a = prev if prev is not None else max(float(f["start"]), t - interval)
            rx.append((shift + a, shift + t, float(g["bytes"])))
            prev = t
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
        goodput += goodput_rows(e.flow_id, rebin(rx, goodput_interval_s, start, end), goodput_interval_s)
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
    return {"flows": table("flows", flows), "goodput": table("goodput", goodput), "tcp": table("tcp", tcp)}
