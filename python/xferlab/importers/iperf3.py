"""iperf3 JSON (``iperf3 -J``, iperf3 ≥ 3.1) → Trace tables.

Accepted files: one JSON document as ``iperf3 -J`` prints it, files written with
``-J --logfile`` (several documents one after the other), or any concatenation of them.

Which side measured what:

* the **receiver** intervals (bytes per interval as read by the receiving socket) give the
  goodput. They are the client's own intervals with ``-R``, or the server's, which
  ``--get-server-output`` puts in ``server_output_json`` when the server runs with ``-J``.
  Without them the sender intervals stand in (bytes written, a little ahead of the
  receiver); which was used is recorded per flow.
* the **sender** intervals (the client's, or the server's with ``-R``) give the Linux
  TCP_INFO samples: ``snd_cwnd`` and, where iperf3 writes it, ``snd_wnd`` (bytes → segments
  via the MSS), ``rtt``/``rttvar`` (µs), ``retransmits`` per interval. iperf3 does not report ssthresh, the RTO, the data in
  flight or the congestion state: ssthresh is null, rto_ms NaN, in_flight and ca_state 0.

The netns backend calls :func:`tables_from_runs` with one :class:`Iperf3Flow` per stream;
``xferlab import iperf3`` is built on the same functions (:func:`entries_from_docs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from .. import limits
from ..constants import LINUX_MSS
from ..runinfo import Provenance
from ..trace import Trace, table
from .common import (
    ImportLogError,
    check_mss,
    check_name,
    check_rows,
    check_values,
    checked,
    flow_row,
    goodput_part,
    goodput_table,
    imported_info,
    json_documents,
    malformed,
    name_of_file,
    rebin,
    unknown,
)

#: Linux's MSS over a 1500-byte MTU with timestamps, when the document does not say.
DEFAULT_MSS = LINUX_MSS


@dataclass
class Iperf3Flow:
    """One TCP stream of one iperf3 test, placed in a run.

    ``doc`` is the client's JSON (with or without ``server_output_json``); ``start_s`` the
    offset of this test's start from the run's t = 0; ``mss`` None = from the document.
    ``index`` is the stream's position in the document's ``intervals[].streams`` (None:
    0 for a ``-P 1`` test, else ``stream``)."""

    doc: dict
    flow_id: int
    pair: int
    stream: int
    variant: str
    role: str = "transfer"
    start_s: float = 0.0
    volume_bytes: int | None = None
    source: str = ""
    sink: str = ""
    mss: int | None = None
    index: int | None = None


# ----------------------------------------------------------------------------- reading


def load_docs(path: str | Path) -> list[dict]:
    """The iperf3 documents of a file (one, or several concatenated as ``--logfile``
    writes them). Raises :class:`ImportLogError` naming the file when it is missing,
    unreadable, not JSON, not iperf3, or an iperf3 error report."""
    p = Path(path)
    docs = json_documents(p, "iperf3 JSON output (iperf3 -J)")
    if not docs:
        raise ImportLogError(f"{p}: empty file, expected iperf3 JSON output (iperf3 -J)")
    for n, doc in enumerate(docs, 1):
        where = f"{p}" + (f" (document {n})" if len(docs) > 1 else "")
        if not isinstance(doc, dict) or "start" not in doc or "intervals" not in doc:
            raise ImportLogError(f"{where}: not iperf3 JSON output (no 'start' and 'intervals')")
        check_values(doc, where, "iperf3 output", _NUMBERS, _SHAPES, _TEXTS)
        _check_sizes(doc, where)
        if doc.get("error"):
            raise ImportLogError(f"{where}: iperf3 reported an error: {str(doc['error'])[:300]}")
        ts = doc["start"].get("test_start", {})
        if ts.get("protocol", "TCP") != "TCP":
            raise ImportLogError(f"{where}: a {ts.get('protocol')} test; only TCP tests can be imported")
        if ts.get("bidir"):
            raise ImportLogError(f"{where}: a --bidir test; import the two directions as separate tests")
        if not doc.get("end") or not doc["end"].get("streams"):
            raise ImportLogError(f"{where}: the test did not finish (no 'end' section)")
    return docs


def _check_sizes(doc: dict, where: str) -> None:
    """The MSS and the -n volume a test states, refused out of what TCP and a run can have."""
    for d, at in ((doc, ""), (doc.get("server_output_json") or {}, "server_output_json.")):
        start = d.get("start") or {}
        for field in ("tcp_mss_default", "tcp_mss"):
            if start.get(field):
                check_mss(start[field], where, f"{at}start.{field}")
    volume = (doc["start"].get("test_start") or {}).get("bytes") or 0
    if volume > limits.VOLUME_MAX_BYTES.value:
        said = limits.too_big("a volume of", volume, limits.VOLUME_MAX_BYTES, " bytes")
        raise ImportLogError(f"{where}: start.test_start.bytes: {said}")


#: Numbers the importer reads: counters, times and sizes (non-negative, below 2**63).
_NUMBERS = {"bytes", "seconds", "start", "end", "snd_cwnd", "snd_wnd", "rtt", "rttvar", "retransmits"}
_NUMBERS |= {"tcp_mss", "tcp_mss_default", "local_port", "remote_port"}
_NUMBERS |= {"timesecs", "min_rtt", "max_rtt", "mean_rtt", "num_streams", "bits_per_second"}
#: Sections whose shape the importer relies on.
_SHAPES = {"start": dict, "end": dict, "intervals": list, "streams": list, "test_start": dict, "timestamp": dict}
_SHAPES |= {"connected": list, "server_output_json": dict}
#: Text the importer shows (names of hosts and congestion controls), with its longest length.
_TEXTS = {"sender_tcp_congestion": 64, "congestion": 64, "protocol": 16, "local_host": 255, "remote_host": 255}


def is_reverse(doc: dict) -> bool:
    return bool(doc["start"].get("test_start", {}).get("reverse"))


def is_server(doc: dict) -> bool:
    """A server's own ``iperf3 -s -J`` output (it accepted the connection)."""
    return "accepted_connection" in doc["start"]


def local_sends(doc: dict) -> bool:
    """Whether the host that wrote ``doc`` sent the data: the client unless ``-R``."""
    return is_reverse(doc) == is_server(doc)


def sides(doc: dict) -> tuple[dict | None, dict | None]:
    """(sender document, receiver document) of a document (a client's, possibly with the
    server's in ``server_output_json``, or a server's own); either may be None when the
    other end's output was not collected."""
    remote = doc.get("server_output_json")
    if not isinstance(remote, dict) or not remote.get("intervals"):
        remote = None
    return (doc, remote) if local_sends(doc) else (remote, doc)


def n_streams(doc: dict) -> int:
    return len(doc["end"]["streams"])


def doc_mss(doc: dict) -> int:
    for d in (doc, doc.get("server_output_json") or {}):
        mss = (d.get("start") or {}).get("tcp_mss_default") or (d.get("start") or {}).get("tcp_mss")
        if mss:
            return int(mss)
    return DEFAULT_MSS


def doc_variant(doc: dict) -> str:
    """The sender's congestion control, as iperf3 reports it."""
    end, ts = doc.get("end", {}), doc["start"].get("test_start", {})
    return end.get("sender_tcp_congestion") or ts.get("congestion") or "unknown"


def doc_volume(doc: dict) -> int | None:
    """The ``-n BYTES`` of a volume-bound test (all streams together), else None."""
    return int(doc["start"].get("test_start", {}).get("bytes") or 0) or None


def doc_min_rtt_s(docs: list[dict]) -> float | None:
    """The smallest RTT any sender saw (``end.streams[].sender.min_rtt``, µs), in s."""
    rtts = []
    for doc in docs:
        sender, _ = sides(doc)
        for s in (sender or {}).get("end", {}).get("streams", []):
            v = (s.get("sender") or {}).get("min_rtt")
            if v:
                rtts.append(v / 1e6)
    return min(rtts) if rtts else None


def _stream_intervals(d: dict, index: int) -> list[dict]:
    out = []
    for iv in d.get("intervals", []):
        streams = iv.get("streams", [])
        if index < len(streams) and not streams[index].get("omitted"):
            out.append(streams[index])
    return out


def _end_stream(d: dict | None, index: int, side: str) -> dict:
    if not d:
        return {}
    streams = d.get("end", {}).get("streams", [])
    return (streams[index].get(side) or {}) if index < len(streams) else {}


def _index(e: Iperf3Flow, where: str) -> int:
    n = n_streams(e.doc)
    i = e.index if e.index is not None else (0 if n == 1 else e.stream)
    if not 0 <= i < n:
        raise ImportLogError(f"{where}: flow {e.flow_id}: stream {i} is not in the iperf3 test ({n} streams)")
    return i


# ----------------------------------------------------------------------------- tables


def unknown_tcp(tcp: pa.Table) -> dict[str, str]:
    """The tcp columns an iperf3 run leaves null, and why (a Trace's ``provenance.unknown``)."""
    out = {f"tcp.{c}": "iperf3 does not report it" for c in ("ssthresh", "rto_ms", "in_flight", "ca_state", "acks_in")}
    if tcp.column("rwnd").null_count == tcp.num_rows:
        out["tcp.rwnd"] = "snd_wnd is not reported (iperf3 before 3.10, xfer)"
    return out


@dataclass
class _Measured:
    """What one flow's measuring side logged, placed in the run."""

    index: int
    sender: dict | None
    receiver: dict | None
    rx: list[tuple[float, float, float]]  # (start, end, bytes) of each interval, run time
    start: float
    end: float


def _measured(e: Iperf3Flow, end_s: float | None, where: str) -> _Measured:
    i = _index(e, where)
    sender, receiver = sides(e.doc)
    ivs = _stream_intervals(receiver if receiver is not None else sender, i)
    if not ivs:
        raise ImportLogError(f"{where}: flow {e.flow_id}: the iperf3 test has no intervals")
    rx = [(e.start_s + float(v["start"]), e.start_s + float(v["end"]), float(v["bytes"])) for v in ivs]
    start = e.start_s + float(ivs[0]["start"])
    end = max(b for _, b, _ in rx)
    if end_s is not None:
        end = max(start, min(end, end_s))
    return _Measured(i, sender, receiver, rx, start, end)


def tables_from_runs(
    entries: list[Iperf3Flow], *, goodput_interval_s: float, end_s: float | None, where: str = "the iperf3 tests"
) -> dict[str, pa.Table]:
    """The ``flows``, ``goodput``, ``tcp`` (and an empty ``link``) tables of a run made of
    iperf3 streams. Goodput is re-binned onto the run's grid (t = k·interval from the run's
    t = 0, start of the cell); tcp samples are taken at the sender's interval ends, shifted
    by ``start_s``. With ``end_s``, everything after it is cut off. A run too long, or with
    too many goodput samples, is refused before any is made (``where`` names it)."""
    measured = [_measured(e, end_s, where) for e in entries]
    check_rows([(m.start, m.end) for m in measured], goodput_interval_s, where)
    flows, goodput, tcp = [], [], []
    for e, m in zip(entries, measured, strict=True):
        flows.append(_flow(e, m, end_s))
        goodput.append(goodput_part(e.flow_id, rebin(m.rx, goodput_interval_s, m.start, m.end), goodput_interval_s))
        tcp += _tcp_rows(e, m, end_s)
    tcp.sort(key=lambda r: (r["t"], r["flow_id"]))
    return {
        "flows": table("flows", flows),
        "goodput": goodput_table(goodput),
        "link": table("link", []),
        "tcp": table("tcp", tcp),
    }


def _flow(e: Iperf3Flow, m: _Measured, end_s: float | None) -> dict:
    """The flows row of one stream: bytes received, sent, retransmitted, completion time."""
    i, mss = m.index, int(e.mss or doc_mss(e.doc))
    rx_end = _end_stream(e.doc, i, "receiver")
    tx_end = _end_stream(m.sender, i, "sender") or _end_stream(e.doc, i, "sender")
    if m.receiver is not None:
        received = int(sum(v["bytes"] for v in _stream_intervals(m.receiver, i)))
        received = max(received, int(rx_end.get("bytes") or 0))
    else:
        received = int(rx_end.get("bytes") or sum(b for _, _, b in m.rx))
    sent = int(tx_end.get("bytes") or 0)
    tx_ivs = _stream_intervals(m.sender, i) if m.sender is not None else []
    retrans = tx_end.get("retransmits")
    if retrans is None and tx_ivs:
        retrans = sum(int(v.get("retransmits") or 0) for v in tx_ivs)
    completion = None
    if e.volume_bytes is not None:
        # A -n test ends when its volume is sent: its duration is the completion time,
        # unless it moved less than asked or ended after the run did.
        completion = float(tx_end.get("seconds") or (m.end - m.start))
        if (sent and sent < e.volume_bytes) or (end_s is not None and e.start_s + completion > end_s + 1e-9):
            completion = None
    return flow_row(
        e,
        start=m.start,
        end=m.end,
        bytes=received,
        completion_time=completion,
        segments_sent=math.ceil(sent / mss) if sent else None,
        retransmissions=int(retrans) if retrans is not None else None,
    )


def _tcp_rows(e: Iperf3Flow, m: _Measured, end_s: float | None) -> list[dict]:
    """The sender's TCP_INFO samples, at its interval ends (none without the sender's log)."""
    rows, total, mss = [], 0, int(e.mss or doc_mss(e.doc))
    for v in _stream_intervals(m.sender, m.index) if m.sender is not None else []:
        t = e.start_s + float(v["end"])
        total += int(v.get("retransmits") or 0)
        if "snd_cwnd" not in v or (end_s is not None and t > end_s + 1e-9):
            continue
        rows.append(
            {
                "t": t,
                "flow_id": e.flow_id,
                "cwnd": round(int(v["snd_cwnd"]) / mss),
                "ssthresh": None,  # iperf3 reports neither ssthresh, the RTO, in-flight data nor the state
                "srtt_ms": float(v["rtt"]) / 1e3 if v.get("rtt") is not None else None,
                "rto_ms": None,
                "in_flight": None,
                "retransmissions": total,
                "ca_state": None,
                "rwnd": round(int(v["snd_wnd"]) / mss) if v.get("snd_wnd") is not None else None,
            }
        )
    return rows


def goodput_side(entries: list[Iperf3Flow]) -> dict[int, str]:
    """Per flow, which side's intervals gave the goodput: "receiver" or "sender"."""
    return {e.flow_id: ("receiver" if sides(e.doc)[1] is not None else "sender") for e in entries}


# ----------------------------------------------------------------------------- import


def entries_from_docs(docs: list[dict], offsets: list[float] | None = None) -> list[Iperf3Flow]:
    """One pair per iperf3 test and one flow per stream. Tests are placed in time by
    ``start.timestamp.timesecs`` (1 s resolution; the earliest at t = 0) unless
    ``offsets`` (seconds, one per test) are given."""
    if offsets is not None and len(offsets) != len(docs):
        raise ImportLogError(f"{len(offsets)} offsets given for {len(docs)} iperf3 tests")
    if offsets is None:
        stamps = [(d["start"].get("timestamp") or {}).get("timesecs") for d in docs]
        if any(s is None for s in stamps):
            stamps = [0] * len(docs)
        offsets = [float(s - min(stamps)) for s in stamps]
    entries = []
    for pair, (doc, off) in enumerate(zip(docs, offsets, strict=True)):
        n = n_streams(doc)
        volume = doc_volume(doc)
        conns = doc["start"].get("connected") or []
        for k in range(n):
            c = conns[k] if k < len(conns) else {}
            local = f"{c.get('local_host', 'client')}:{c.get('local_port', '')}".rstrip(":")
            remote = f"{c.get('remote_host', 'server')}:{c.get('remote_port', '')}".rstrip(":")
            src, dst = (local, remote) if local_sends(doc) else (remote, local)
            stream_volume = None
            if volume is not None:
                # -n is the whole test's volume; each stream carried its own share of it.
                sender, _ = sides(doc)
                stream_volume = int(_end_stream(sender or doc, k, "sender").get("bytes") or math.ceil(volume / n))
            entries.append(
                Iperf3Flow(
                    doc=doc,
                    flow_id=len(entries),
                    pair=pair,
                    stream=k,
                    variant=doc_variant(doc),
                    start_s=off,
                    volume_bytes=stream_volume,
                    source=src,
                    sink=dst,
                    index=k,
                )
            )
    return entries


def import_trace(
    paths: list[Path],
    *,
    name: str | None = None,
    capacity_bps: float | None = None,
    goodput_interval_s: float = 0.5,
    offsets: list[float] | None = None,
) -> Trace:
    """``xferlab import iperf3``: the iperf3 tests of ``paths`` (in order) as one Trace."""
    docs, files = [], []
    for p in paths:
        with malformed(str(p), "iperf3 output"):
            got = load_docs(p)
        docs += got
        files += [str(p)] * len(got)
    where = str(paths[0]) if len(paths) == 1 else f"{paths[0]} (and {len(paths) - 1} more)"
    with malformed(where, "iperf3 output"):
        entries = entries_from_docs(docs, offsets)
        tables = tables_from_runs(entries, goodput_interval_s=goodput_interval_s, end_s=None, where=where)
        end_s = max(tables["flows"].column("end").to_pylist())
        info = imported_info(
            name=check_name(name) if name is not None else name_of_file(paths[0]),
            flows=tables["flows"],
            goodput_interval_s=goodput_interval_s,
            capacity_bps=capacity_bps,
            rtt_s=doc_min_rtt_s(docs),
            mss=doc_mss(docs[0]),
            end_s=end_s,
        )
        sides_used = goodput_side(entries)
    has_sender = all(sides(d)[0] is not None for d in docs)
    tests = [next(x for x in entries if x.pair == k) for k in range(len(docs))]
    provenance = Provenance(
        producer="import",
        source="iperf3",
        setup=[
            ("goodput measured by", " and ".join(sorted(set(sides_used.values()))) + " intervals"),
            ("tests aligned by", "offsets given" if offsets is not None else "start.timestamp.timesecs (1 s resolution)"),
            ("RTT", "the smallest any sender saw" if info.rtt_s else "unknown"),
            ("bottleneck capacity", "given (--capacity)" if capacity_bps else "unknown (no --capacity)"),
        ],
        unknown={
            **unknown(retransmissions=has_sender, source="iperf3"),
            **unknown_tcp(tables["tcp"]),
        },
        files=[str(Path(p).resolve()) for p in paths],
        stats={
            "tests": [
                {"file": f, "pair": k, "start_s": e.start_s, "streams": n_streams(e.doc), "reverse": is_reverse(e.doc)}
                for k, (f, e) in enumerate(zip(files, tests, strict=True))
            ]
        },
    )
    with malformed(where, "iperf3 output"):
        trace = Trace.build(tables, info, provenance, end_s=end_s)
    return checked(trace, where, sender_counts="sender" in sides_used.values())
