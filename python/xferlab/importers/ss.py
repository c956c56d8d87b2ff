"""Repeated ``ss -tin`` snapshots → Trace tables.

Accepted log: snapshots of ``ss -tin`` (with or without ``-H``, with or without the State
column, any ``state``/``dst`` filter), each preceded by a line holding the Unix time in
seconds, as written by::

    while sleep 0.1; do date +%s.%N; ss -tinH state established dst 10.0.0.2; done > ss.log

A connection is identified by its 4-tuple. The side that sends the data gives the tcp
samples (cwnd, ssthresh, srtt, rto, unacked, retrans) and its ``bytes_acked`` increments
the goodput; when the log also holds the receiving socket (both ends on one host), its
``bytes_received`` increments are used instead (receiver-side, as the Trace wants).
Connections that moved less than ``min_bytes`` (control connections) are left out.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from ..constants import LINUX_MSS
from ..runinfo import Provenance
from ..trace import Trace, table
from .common import (
    ImportLogError,
    check_mss,
    check_name,
    check_rows,
    checked,
    goodput_part,
    goodput_table,
    imported_info,
    malformed,
    name_of_file,
    read_log,
    rebin,
    unknown,
)

#: Congestion controls ss prints as a bare word in the info line.
CONGESTION_CONTROLS = {
    "reno", "cubic", "bbr", "bbr2", "bbr3", "bic", "htcp", "highspeed", "scalable", "vegas", "veno", "westwood",
    "illinois", "hybla", "yeah", "lp", "dctcp", "cdg", "nv",
}  # fmt: skip
_TIME = re.compile(r"^\s*(\d{9,}(?:\.\d+)?)\s*$")
_ADDR = re.compile(r"^(\[?[0-9A-Za-z.:%*_-]+\]?):(\w+)$")


@dataclass
class Sample:
    t: float
    info: dict


@dataclass
class Socket:
    local: str
    peer: str
    samples: list[Sample] = field(default_factory=list)


def _info(line: str) -> dict:
    """``key:value`` fields of an ss info line, plus the congestion control."""
    out: dict = {}
    tokens = line.split()
    for i, tok in enumerate(tokens):
        if ":" in tok and not tok.startswith("("):
            k, v = tok.split(":", 1)
            out[k] = v
        elif tok in CONGESTION_CONTROLS and "cc" not in out:
            out["cc"] = tok
        elif tok in ("send", "pacing_rate", "delivery_rate") and i + 1 < len(tokens):
            out[tok] = tokens[i + 1]
    return out


def _num(info: dict, key: str, default=None):
    v = info.get(key)
    if v is None:
        return default
    try:
        x = float(v.split("/")[0].rstrip("ms"))
    except ValueError:
        return default
    return x if math.isfinite(x) and 0 <= x < 2**63 else default


def parse(path: str | Path) -> tuple[list[float], dict[tuple[str, str], Socket]]:
    """The snapshot times (Unix seconds) and the sockets seen, with their samples."""
    p = Path(path)
    text = read_log(p)
    times: list[float] = []
    sockets: dict[tuple[str, str], Socket] = {}
    current: Socket | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _TIME.match(line)
        if m:
            if len(m.group(1)) > 24 or float(m.group(1)) > 1e11:
                raise ImportLogError(f"{p}:{n}: {m.group(1)[:30]!r} is not a Unix time in seconds (date +%s.%N)")
            if times and float(m.group(1)) < times[-1]:
                raise ImportLogError(f"{p}:{n}: the timestamp goes back in time ({m.group(1)} after {times[-1]:.6f})")
            times.append(float(m.group(1)))
            current = None
            continue
        if line[0].isspace():  # the info line of the connection above
            if current is not None and times:
                current.samples.append(Sample(times[-1], _info(line)))
            current = None
            continue
        tokens = line.split()
        if tokens[0] in ("State", "Recv-Q", "Netid"):
            continue
        addrs = [t for t in tokens if _ADDR.match(t)]
        if len(addrs) < 2:
            raise ImportLogError(f"{p}:{n}: not a line of `ss -tin` output: {line.strip()[:80]!r}")
        if not times:
            raise ImportLogError(f"{p}:{n}: a connection before any timestamp line (write `date +%s.%N` before each ss)")
        key = (addrs[0], addrs[1])
        current = sockets.setdefault(key, Socket(*key))
    return times, sockets


@dataclass
class Flow:
    source: str
    sink: str
    sender: Socket | None
    receiver: Socket | None


def _total(s: Socket, key: str) -> float:
    return max((_num(x.info, key, 0.0) for x in s.samples), default=0.0)


def flows_of(sockets: dict[tuple[str, str], Socket], min_bytes: int) -> list[Flow]:
    """Data flows (sender → receiver), each from the socket(s) of its 4-tuple."""
    flows: dict[tuple[str, str], Flow] = {}
    for (local, peer), s in sockets.items():
        sending = _total(s, "bytes_acked") >= _total(s, "bytes_received")
        key = (local, peer) if sending else (peer, local)
        f = flows.setdefault(key, Flow(key[0], key[1], None, None))
        if sending:
            f.sender = s
        else:
            f.receiver = s
    out = []
    for f in flows.values():
        moved = max(_total(f.sender, "bytes_acked") if f.sender else 0, _total(f.receiver, "bytes_received") if f.receiver else 0)
        if moved >= min_bytes:
            out.append(f)
    return sorted(out, key=lambda f: (f.source, f.sink))


def _host(addr: str) -> str:
    return addr.rsplit(":", 1)[0]


def _intervals(f: Flow, times: list[float], t0: float) -> tuple[float, float, list[tuple[float, float, float]]]:
    """A flow's first and last sight and the bytes it moved between snapshots (run time), from
    the receiver's ``bytes_received`` or, without it, the sender's ``bytes_acked``."""
    counted = f.receiver if f.receiver is not None else f.sender
    counter = "bytes_received" if f.receiver is not None else "bytes_acked"
    first, last = counted.samples[0].t, counted.samples[-1].t
    before = bisect.bisect_left(times, first)  # snapshots before the first sight
    # The data counted at the first sight moved since the previous snapshot; at the very
    # first snapshot its start is unknown and it is left out.
    start = times[before - 1] if before else first
    prev_t, prev_b = (start, 0.0) if before else (first, _num(counted.samples[0].info, counter, 0.0))
    ivs = []
    for x in counted.samples:
        b = _num(x.info, counter, prev_b)
        if x.t > prev_t:
            ivs.append((prev_t - t0, x.t - t0, max(0.0, b - prev_b)))
        prev_t, prev_b = x.t, b
    return start, last, ivs


def _tcp_rows(f: Flow, fid: int, t0: float, mss_seen: list, rtt_seen: list) -> list[dict]:
    """The sending socket's samples (none when only the receiver was logged)."""
    rows = []
    for x in f.sender.samples if f.sender else []:
        i = x.info
        if "cwnd" not in i:
            continue
        if _num(i, "mss") is not None:
            mss_seen.append(int(_num(i, "mss")))
        if _num(i, "minrtt") is not None:
            rtt_seen.append(_num(i, "minrtt") / 1e3)
        ssthresh = _num(i, "ssthresh")
        snd_wnd, mss = _num(i, "snd_wnd"), _num(i, "mss")
        rows.append(
            {
                "t": x.t - t0,
                "flow_id": fid,
                "cwnd": int(_num(i, "cwnd", 0)),
                "ssthresh": int(ssthresh) if ssthresh is not None else None,
                "srtt_ms": _num(i, "rtt"),
                "rto_ms": _num(i, "rto"),
                "in_flight": int(_num(i, "unacked", 0)),  # ss omits unacked:0
                "retransmissions": int(_retrans_total(i)),
                "ca_state": None,  # ss does not show it
                "rwnd": round(snd_wnd / mss) if snd_wnd is not None and mss else None,  # iproute2 5.4 on
                "acks_in": int(segs_in) if (segs_in := _num(i, "segs_in")) is not None else None,
            }
        )
    return rows


def tables_from_log(path: str | Path, *, goodput_interval_s: float, min_bytes: int = 65536) -> tuple[dict[str, pa.Table], dict]:
    """The Trace tables of an ss log, and what was learnt on the way (t0, MSS, RTT…)."""
    times, sockets = parse(path)
    if not times:
        raise ImportLogError(f"{path}: no timestamp lines (write `date +%s.%N` before each ss snapshot)")
    flows = flows_of(sockets, min_bytes)
    if not flows:
        raise ImportLogError(f"{path}: no TCP connection moved data in this log (at least {min_bytes} bytes)")
    t0 = times[0]
    # Transfers: the streams between the same two hosts towards the same port (iperf3 -P, xfer).
    pairs: dict[tuple, int] = {}
    stream_of: dict[tuple, int] = defaultdict(int)
    rows, goodput, tcp = [], [], []
    mss_seen, rtt_seen = [], []
    seen = [_intervals(f, times, t0) for f in flows]
    check_rows([(start - t0, end - t0) for start, end, _ in seen], goodput_interval_s, str(path))
    for fid, (f, (start, end, ivs)) in enumerate(zip(flows, seen, strict=True)):
        key = (_host(f.source), f.sink)
        pair = pairs.setdefault(key, len(pairs))
        stream = stream_of[key]
        stream_of[key] += 1
        sent = f.sender.samples[-1].info if f.sender else {}
        variant = next((x.info["cc"] for x in (f.sender or f.receiver).samples if "cc" in x.info), "unknown")
        rows.append(
            {
                "flow_id": fid,
                "pair": pair,
                "stream": stream,
                "source": f.source,
                "sink": f.sink,
                "variant": variant,
                "role": "transfer",
                "start": start - t0,
                "end": end - t0,
                "bytes": int(sum(b for _, _, b in ivs)),
                "segments_sent": int(_num(sent, "data_segs_out", 0)) if f.sender else None,
                "retransmissions": int(_retrans_total(sent)) if f.sender else None,
                # volume, completion, fast recoveries and timeouts: ss does not tell (null)
            }
        )
        goodput.append(goodput_part(fid, rebin(ivs, goodput_interval_s, start - t0, end - t0), goodput_interval_s))
        tcp += _tcp_rows(f, fid, t0, mss_seen, rtt_seen)
    tcp.sort(key=lambda r: (r["t"], r["flow_id"]))
    for mss in set(mss_seen):
        check_mss(mss, str(path), "mss:")
    learnt = {
        "t0_unix_s": t0,
        "snapshots": len(times),
        "end_s": times[-1] - t0,
        "mss": max(set(mss_seen), key=mss_seen.count) if mss_seen else None,
        "rtt_s": min(rtt_seen) if rtt_seen else None,
        "goodput_side": sorted({"receiver (bytes_received)" if f.receiver else "sender (bytes_acked)" for f in flows}),
        "has_sender": all(f.sender is not None for f in flows),
    }
    tables = {"flows": table("flows", rows), "goodput": goodput_table(goodput), "tcp": table("tcp", tcp)}
    return tables, learnt


def _retrans_total(info: dict) -> float:
    """``retrans:X/Y``: X segments unrecovered now, Y retransmitted in total."""
    v = info.get("retrans")
    if not v:
        return 0.0
    return float(v.split("/")[-1])


def import_trace(
    path: Path,
    *,
    name: str | None = None,
    capacity_bps: float | None = None,
    goodput_interval_s: float = 0.5,
    min_bytes: int = 65536,
) -> Trace:
    """``xferlab import ss``: one ss log as a Trace."""
    with malformed(str(path), "ss log"):
        tables, learnt = tables_from_log(path, goodput_interval_s=goodput_interval_s, min_bytes=min_bytes)
        info = imported_info(
            name=check_name(name) if name is not None else name_of_file(path),
            flows=tables["flows"],
            goodput_interval_s=goodput_interval_s,
            capacity_bps=capacity_bps,
            rtt_s=learnt["rtt_s"],
            mss=learnt["mss"] or LINUX_MSS,
            end_s=learnt["end_s"],
        )
    none = {c: tables["tcp"].column(c).null_count == tables["tcp"].num_rows for c in ("rwnd", "acks_in")}
    provenance = Provenance(
        producer="import",
        source="ss",
        setup=[
            ("goodput measured by", " and ".join(learnt["goodput_side"])),
            ("snapshots", str(learnt["snapshots"])),
            ("RTT", "the smallest minrtt seen" if info.rtt_s else "unknown"),
            ("bottleneck capacity", "given (--capacity)" if capacity_bps else "unknown (no --capacity)"),
        ],
        unknown={
            **unknown(retransmissions=learnt["has_sender"], source="ss"),
            "tcp.ca_state": "ss does not show it",
            **({"tcp.rwnd": "this ss does not show snd_wnd"} if none["rwnd"] else {}),
            **({"tcp.acks_in": "this ss does not show segs_in"} if none["acks_in"] else {}),
        },
        files=[str(Path(path).resolve())],
        stats={"t0_unix_s": learnt["t0_unix_s"], "snapshots": learnt["snapshots"]},
    )
    with malformed(str(path), "ss log"):
        trace = Trace.build(tables, info, provenance, end_s=learnt["end_s"])
    return checked(trace, str(path))
