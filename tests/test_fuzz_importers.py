"""Standing fuzzers (issue 48), family "importer extremes": every importer (iperf3 JSON, ss
logs, xfer traces) given extreme values in any field — NaN, infinities, negatives, numbers
beyond 2**63, the wrong type — and logs whose intervals span up to years.

Properties: a log is imported (its Trace meets the contract and its metrics compute) or
refused with :class:`ImportLogError` naming the file, never another exception; a log whose
goodput table would be over the limits is refused before any row is made (so no size of
log hangs the import), and what is imported keeps every byte.

The examples are derandomized, so CI sees the same cases every time; ``XFERLAB_FUZZ_EXAMPLES``
and ``XFERLAB_FUZZ_SEED`` give more, random, ones (as ``tests/test_fuzz.py``).
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xferlab import engine, limits, metrics
from xferlab.importers import ImportLogError, iperf3, ss, xfer
from xferlab.registry import MetricsError
from xferlab.runfolder import RunFolderError

DATA = Path(__file__).parent / "data"
EXAMPLES = max(20, int(os.environ.get("XFERLAB_FUZZ_EXAMPLES", "150")) // 3)
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize="XFERLAB_FUZZ_SEED" not in os.environ,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)

# ----------------------------------------------------------------------------- values

#: JSON values: the extremes of every numeric field, and every wrong type. Text that names a
#: constant JSON does not have ("NaN", "Infinity", "1e400") is written as that constant.
EXTREMES = st.one_of(
    st.sampled_from(
        [None, True, "x", "", [], {}, {"a": [1]}, -1, -1e-300, 0, 1e-300, 0.5, 2**31, 2**32, 2**53 + 1, 2**63 - 1]
        + [2**63, 2**64, 10**30, 1e308, -1e308, "NaN", "Infinity", "-Infinity", "1e400", "-1e400"]
    ),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**70), max_value=2**70),
)
CONSTANTS = {f'"{c}"': c for c in ("NaN", "Infinity", "-Infinity", "1e400", "-1e400")}
#: ss prints numbers as text: their extremes as text.
SS_EXTREMES = st.one_of(
    st.sampled_from(["x", "-1", "0", "-0", "1e999", "nan", "inf", "", "1.5.5", "0.0000001", "9" * 40]),
    st.sampled_from([str(2**32), str(2**63), str(2**64), "4294967296", "1e308"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)
CAPACITIES = st.sampled_from([None, 1e6, 1e8, 1e9, 1e12])


def _json(docs: list) -> str:
    text = "\n".join(json.dumps(d) for d in docs)
    for quoted, bare in CONSTANTS.items():
        text = text.replace(quoted, bare)
    return text


def _places(node, at=()):
    """Every place of a document, a list's first and last item standing for all."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _places(v, (*at, k))
    elif isinstance(node, list):
        for i in sorted({0, len(node) - 1}) if node else []:
            yield from _places(node[i], (*at, i))
    if at:
        yield at


def _set(doc, place, value) -> None:
    for k in place[:-1]:
        doc = doc[k]
    doc[place[-1]] = value


def _docs(path: Path) -> list:
    text, dec, docs, i = path.read_text(), json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return docs
        d, i = dec.raw_decode(text, i)
        docs.append(d)


def _imported_or_refused(log: Path, make, save: bool, out: Path) -> str:
    """Imports ``log`` with ``make``: "ok" with a Trace that meets the contract and whose
    metrics compute (and, when ``save``, a whole run folder), or "refused" naming the log."""
    try:
        trace = make()
        trace.validate()
        metrics.compute(trace)
        if save:
            engine.save(engine.stamp(trace, scenario={"name": "fuzz"}, seed=None), out, force=True)
        return "ok"
    except (ImportLogError, RunFolderError, MetricsError) as e:
        assert str(log) in str(e), str(e)
        assert "\n" not in str(e).strip() or "Traceback" not in str(e), str(e)
        return "refused"


# ----------------------------------------------------------------------------- iperf3

IPERF3 = sorted(DATA.glob("iperf3_*.json"))


@FUZZ
@given(data=st.data(), capacity=CAPACITIES, save=st.integers(0, 9).map(lambda n: n == 0))
def test_iperf3_fields_with_extreme_values_import_or_are_refused(tmp_path_factory, data, capacity, save):
    tmp = tmp_path_factory.mktemp("iperf3")
    source = data.draw(st.sampled_from(IPERF3))
    docs = _docs(source)
    for _ in range(data.draw(st.integers(1, 3))):
        doc = data.draw(st.sampled_from(docs))
        _set(doc, data.draw(st.sampled_from(list(_places(doc)))), copy.deepcopy(data.draw(EXTREMES)))
    log = tmp / "in.json"
    log.write_text(_json(docs))
    _imported_or_refused(log, lambda: iperf3.import_trace([log], capacity_bps=capacity), save, tmp / "run")


# ----------------------------------------------------------------------------- ss

SS = sorted(DATA.glob("ss_*.log"))
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@FUZZ
@given(data=st.data(), capacity=CAPACITIES, save=st.integers(0, 9).map(lambda n: n == 0))
def test_ss_numbers_with_extreme_values_import_or_are_refused(tmp_path_factory, data, capacity, save):
    tmp = tmp_path_factory.mktemp("ss")
    lines = data.draw(st.sampled_from(SS)).read_text().splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        numbers = list(_NUMBER.finditer(lines[i]))
        if numbers:
            m = data.draw(st.sampled_from(numbers))
            lines[i] = lines[i][: m.start()] + data.draw(SS_EXTREMES) + lines[i][m.end() :]
    log = tmp / "in.log"
    log.write_text("\n".join(lines) + "\n")
    _imported_or_refused(log, lambda: ss.import_trace(log, capacity_bps=capacity), save, tmp / "run")


# ----------------------------------------------------------------------------- xfer

XFER = {
    "run": {"tool": "xfer", "streams": 1, "bytes": 20971520, "completion_time": 1.4666, "interval": 0.5},
    "flows": [{"flow_id": 0, "stream": 0, "start": 0.0208, "end": 1.4703, "bytes": 20971520, "completion_time": 1.4495}],
    "goodput": [{"t": 0.5003, "flow_id": 0, "bytes": 7239808}, {"t": 1.4703, "flow_id": 0, "bytes": 13731712}],
    "tcp": [
        {"t": 0.5001, "flow_id": 0, "cwnd": 14, "ssthresh": 8, "srtt_ms": 0.015, "retransmissions": 0},
        {"t": 1.0001, "flow_id": 0, "cwnd": 20, "ssthresh": None, "srtt_ms": 0.02, "retransmissions": 2},
    ],
}


def _xfer_tables(log: Path):
    doc = xfer.load(log)
    e = xfer.XferFlow(doc=doc, flow_id=0, pair=0, stream=0, variant="cubic", data_start_s=0.5, volume_bytes=20971520)
    return xfer.tables_from_xfer([e], goodput_interval_s=0.5, where=str(log))


@FUZZ
@given(data=st.data())
def test_xfer_trace_fields_with_extreme_values_load_or_are_refused(tmp_path_factory, data):
    doc = copy.deepcopy(XFER)
    for _ in range(data.draw(st.integers(1, 3))):
        _set(doc, data.draw(st.sampled_from(list(_places(doc)))), copy.deepcopy(data.draw(EXTREMES)))
    log = tmp_path_factory.mktemp("xfer") / "x.json"
    log.write_text(_json([doc]))
    try:
        tables = _xfer_tables(log)
    except ImportLogError as e:
        assert str(log) in str(e), str(e)
        return
    assert tables["goodput"].num_rows >= 0  # the contract's tables (table() checks types)


# ----------------------------------------------------------------------------- long spans

SPANS = st.sampled_from([1.0, 1e3, 1e5, 1e6, 1.9e6, 2.5e6, 1e9])
GRIDS = st.sampled_from([1e-6, 1e-3, 0.05, 0.5, 10.0, 1000.0])


def _iperf3_long(span_s: float, streams: int, intervals: int) -> str:
    doc = _docs(DATA / "iperf3_volume.json")[0]
    stream = doc["intervals"][0]["streams"][0]
    step = span_s / intervals
    at = [{"start": i * step, "end": (i + 1) * step, "seconds": step} for i in range(intervals)]
    doc["intervals"] = [{"streams": [{**stream, "socket": 5 + k, **a} for k in range(streams)]} for a in at]
    doc["end"]["streams"] = doc["end"]["streams"] * streams
    doc["start"]["connected"] = [{**doc["start"]["connected"][0], "local_port": 40000 + k} for k in range(streams)]
    del doc["start"]["test_start"]["bytes"]
    return json.dumps(doc)


def _ss_long(span_s: float, streams: int, snapshots: int) -> str:
    lines = []
    for n in range(snapshots):
        lines.append(f"{1795366694.0 + n * span_s / (snapshots - 1):.6f}")
        for k in range(streams):
            lines.append(f"0 0 10.0.0.1:{40000 + k} 10.0.0.2:5201")
            lines.append(f"\t cubic rto:204 rtt:1/0.5 mss:1448 cwnd:10 bytes_acked:{(n + 1) * 10**8} minrtt:1")
    return "\n".join(lines) + "\n"


@FUZZ
@given(
    kind=st.sampled_from(["iperf3", "ss"]),
    span=SPANS,
    grid=GRIDS,
    streams=st.sampled_from([1, 2, 20, 40]),
    pieces=st.integers(2, 12),
)
def test_logs_spanning_up_to_years_are_refused_up_front_or_keep_every_byte(tmp_path_factory, kind, span, grid, streams, pieces):
    """The rows a log would give are counted before any is made: over the limits it is refused
    at once, naming --interval or the span; a small one is imported with every byte."""
    log = tmp_path_factory.mktemp("long") / f"long.{kind}"
    log.write_text(_iperf3_long(span, streams, pieces) if kind == "iperf3" else _ss_long(span, streams, pieces))
    # Each flow meets ceil(span / grid) cells (+1 where its ends fall inside cells).
    rows = streams * span / grid
    over = span > limits.SPAN_MAX_S.value or rows > limits.SAMPLES_MAX.value * 1.01
    small = rows < 2e5
    if not (over or small):
        return  # between: imported in seconds, not at this fuzzer's pace (tests/test_import.py has one)
    importer = iperf3.import_trace if kind == "iperf3" else ss.import_trace
    try:
        trace = importer([log] if kind == "iperf3" else log, goodput_interval_s=grid)
    except ImportLogError as e:
        assert over, str(e)
        assert str(log) in str(e) and ("--interval" in str(e) or "the log spans" in str(e)), str(e)
        return
    assert not over, f"{rows:.3g} rows over {span:g} s were made"
    # Every byte the log counted between its samples is in the goodput table (ss counts
    # from its first snapshot on).
    per_piece = _docs(DATA / "iperf3_volume.json")[0]["intervals"][0]["streams"][0]["bytes"] if kind == "iperf3" else 10**8
    counted = per_piece * streams * (pieces if kind == "iperf3" else pieces - 1)
    assert sum(trace.goodput.column("bytes").to_pylist()) == counted
