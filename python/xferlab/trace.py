"""The Trace: the contract between whatever produces a run and whatever analyses it.

Every producer — the simulator, the netns backend, the importers of foreign logs — returns a
:class:`Trace`; metrics, reports, comparisons and the catalog read nothing else. It holds:

* four Arrow tables whose columns, types, units and nullability are declared here
  (:data:`TABLES`): ``flows`` (one row per TCP connection), ``goodput`` (receiver-side
  bytes per interval), ``link`` (bottleneck counters per interval), ``tcp`` (sender samples).
  A value a producer cannot know is **null**, never a made-up 0;
* ``run``: the run's metadata, which is also ``run.json``: the scenario as given, the
  resolved scenario (:class:`RunInfo`, typed), the :class:`Provenance` (who produced the
  run, the setup rows a report shows, warnings, and what is unknown and why), versions.

Times are seconds from the start of the run (``srtt_ms``/``rto_ms``: milliseconds); rates
are Mbit/s; windows are segments. :data:`TRACE_VERSION` is stored in every run; older run
folders are upgraded on reading (:func:`upgrade`). :meth:`Trace.validate` is called on every
Trace a backend or an importer returns.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import limits
from .runinfo import Provenance, RunInfo, RunMeta, validation_message

#: Version of the tables and of ``run.json``. 1: before nullability was part of the
#: contract (no version stored). 2: explicit nullability, RunInfo, provenance. 3: the
#: receive window (``tcp.rwnd``). 4: the sender's ACK count (``tcp.acks_in``).
TRACE_VERSION = 4


#: Where a run folder keeps its metadata and its tables (relative to the folder).
RUN_JSON = "run.json"
TRACE_DIR = "trace"


def table_file(name: str) -> str:
    """The file of table ``name`` in a run folder (``trace/goodput.parquet``)."""
    return f"{TRACE_DIR}/{name}.parquet"


class TraceError(Exception):
    """A Trace that breaks the contract (a producer's bug, or a foreign or damaged folder);
    ``file``: the file of a run folder at fault (``run.json``, ``trace/goodput.parquet``)."""

    def __init__(self, message: str, file: str | None = None, detail: str | None = None):
        super().__init__(message)
        self.file = file
        #: the message without the table's name, for a reader who names the file instead
        self.detail = detail or message


def table_error(name: str, detail: str) -> TraceError:
    return TraceError(f"table {name}: {detail}", table_file(name), detail)


# ----------------------------------------------------------------------------- the tables


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    nullable: bool
    #: "id", "label", "time" (scaled by a time dilation), "rate" (scaled), "count", "size",
    #: "window", "state"
    kind: str
    unit: str
    doc: str
    #: the only values a label may take (empty: any)
    values: tuple[str, ...] = ()


def _c(name, type_, nullable, kind, unit, doc, values=()) -> Column:
    return Column(name, type_, nullable, kind, unit, doc, values)


u8, u32, u64, f64, s = pa.uint8(), pa.uint32(), pa.uint64(), pa.float64(), pa.string()

TABLES: dict[str, tuple[Column, ...]] = {
    "flows": (
        _c("flow_id", u32, False, "id", "", "the flow's number in the run"),
        _c("pair", u32, False, "id", "", "host pair (a transfer is a pair's streams)"),
        _c("stream", u32, False, "id", "", "stream index within its pair"),
        _c("source", s, False, "label", "", "sending host"),
        _c("sink", s, False, "label", "", "receiving host"),
        _c("variant", s, False, "label", "", "congestion control, as Linux names it"),
        _c("role", s, False, "label", "", "transfer, or reverse (reverse traffic)", ("transfer", "reverse")),
        _c("start", f64, False, "time", "s", "first byte sent"),
        _c("end", f64, False, "time", "s", "last byte received, or the end of the run"),
        _c("bytes", u64, False, "size", "bytes", "bytes delivered to the receiver"),
        _c("volume_bytes", u64, True, "size", "bytes", "volume to move (null: duration-bound)"),
        _c("completion_time", f64, True, "time", "s", "first byte sent to last delivered (null: not volume-bound or not done)"),
        _c("segments_sent", u64, True, "count", "segments", "data segments sent, retransmissions included"),
        _c("retransmissions", u64, True, "count", "segments", "segments retransmitted"),
        _c("fast_recoveries", u64, True, "count", "", "fast recoveries entered"),
        _c("timeouts", u64, True, "count", "", "retransmission timeouts"),
    ),
    "goodput": (
        _c("t", f64, False, "time", "s", "start of the interval"),
        _c("flow_id", u32, False, "id", "", "flow"),
        _c("bytes", u64, False, "size", "bytes", "bytes delivered in the interval"),
        _c("goodput_mbps", f64, False, "rate", "Mbit/s", "bytes × 8 / interval"),
    ),
    "link": (
        _c("t", f64, False, "time", "s", "start of the interval"),
        _c("link", s, False, "label", "", "bottleneck, or reverse", ("bottleneck", "reverse")),
        _c("bytes", u64, False, "size", "bytes", "IP bytes forwarded in the interval"),
        _c("packets", u64, False, "count", "packets", "packets forwarded in the interval"),
        _c("throughput_mbps", f64, False, "rate", "Mbit/s", "IP bytes × 8 / interval"),
        _c("drops", u64, True, "count", "packets", "packets dropped by the full queue"),
        _c("losses", u64, True, "count", "packets", "packets lost at random (loss_rate)"),
        _c("queue_pkts", u32, True, "count", "packets", "queue length at the end of the interval"),
        _c("queue_max_pkts", u32, True, "count", "packets", "longest queue in the interval"),
    ),
    "tcp": (
        _c("t", f64, False, "time", "s", "sample time"),
        _c("flow_id", u32, False, "id", "", "flow"),
        _c("cwnd", u32, False, "window", "segments", "congestion window"),
        _c("ssthresh", u32, True, "window", "segments", "slow-start threshold (null: infinite or unknown)"),
        _c("srtt_ms", f64, True, "time", "ms", "smoothed RTT"),
        _c("rto_ms", f64, True, "time", "ms", "retransmission timeout"),
        _c("in_flight", u32, True, "window", "segments", "segments in flight"),
        _c("retransmissions", u64, True, "count", "segments", "segments retransmitted so far"),
        _c("ca_state", u8, True, "state", "", "Linux's tcp_ca_state: 0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss"),
        _c("rwnd", u32, True, "window", "segments", "receive window the receiver offers (the sender's snd_wnd)"),
        _c("acks_in", u64, True, "count", "segments", "segments the sender received so far: its ACK clock (tcpi_segs_in)"),
    ),
}
NAMES = tuple(TABLES)
SCHEMAS: dict[str, pa.Schema] = {
    name: pa.schema(
        [pa.field(c.name, c.type, c.nullable, metadata={"unit": c.unit, "kind": c.kind}) for c in cols],
        metadata={"xferlab.trace_version": str(TRACE_VERSION)},
    )
    for name, cols in TABLES.items()
}


def columns_of_kind(table: str, kind: str) -> list[str]:
    return [c.name for c in TABLES[table] if c.kind == kind]


def table(name: str, rows: list[dict]) -> pa.Table:
    """A table of the contract from row dicts (missing keys and None are null)."""
    schema = SCHEMAS[name]
    return pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()


def conform(name: str, t: pa.Table | pa.RecordBatch) -> pa.Table:
    """``t`` with exactly the contract's columns, order, types and nullability. Float NaN in
    a nullable column becomes null (an unknown value); a missing column, a value out of its
    type's range or a null in a non-null column is a :class:`TraceError`."""
    if isinstance(t, pa.RecordBatch):
        t = pa.Table.from_batches([t])
    schema = SCHEMAS[name]
    twice = sorted({c for c in t.column_names if t.column_names.count(c) > 1})
    if twice:
        raise table_error(name, f"column(s) {', '.join(twice)} appear more than once")
    missing = [f.name for f in schema if f.name not in t.column_names]
    extra = [c for c in t.column_names if c not in schema.names]
    if missing:
        raise table_error(name, f"missing column(s) {', '.join(missing)}")
    if extra:
        raise table_error(name, f"column(s) {', '.join(extra)} are not in the contract")
    cols = []
    for f in schema:
        col = t.column(f.name)
        if f.nullable and pa.types.is_floating(col.type):
            col = pc.if_else(pc.is_nan(col), pa.scalar(None, col.type), col)
        if not f.nullable and col.null_count:
            raise table_error(name, f"column {f.name} has {col.null_count} null(s); it is always known")
        try:
            cols.append(col.cast(f.type, safe=True))
        except pa.ArrowException as e:  # a value out of range, a float where an integer belongs, a text
            raise table_error(name, f"column {f.name} is not {f.type}: {str(e).splitlines()[0]}") from None
    return pa.Table.from_arrays(cols, schema=schema)


# ----------------------------------------------------------------------------- the Trace


@dataclass
class Trace:
    flows: pa.Table
    goodput: pa.Table
    link: pa.Table
    tcp: pa.Table
    run: dict  # run.json: trace_version, scenario, resolved, provenance, backend, seed, end_s, versions, …
    #: Files the producer hands to the run folder beside the trace (a backend's raw logs):
    #: name in the folder → a local file or folder, moved in by ``engine.save``. Not read back.
    files: dict[str, Path] = dataclasses.field(default_factory=dict)

    @classmethod
    def build(cls, tables: dict, info: RunInfo | dict, provenance: Provenance, **run: Any) -> Trace:
        """A producer's Trace: its tables conformed to the contract, its RunInfo and provenance."""
        info = info if isinstance(info, RunInfo) else RunInfo.model_validate(info)
        conformed = {name: conform(name, tables[name]) if name in tables else SCHEMAS[name].empty_table() for name in NAMES}
        meta = {
            "trace_version": TRACE_VERSION,
            "backend": provenance.producer,
            "resolved": info.dump(),
            "provenance": provenance.model_dump(mode="json"),
            **run,
        }
        return cls(run=meta, **conformed)

    @property
    def info(self) -> RunInfo:
        return RunInfo.model_validate(self.run["resolved"])

    @property
    def provenance(self) -> Provenance:
        return Provenance.model_validate(self.run.get("provenance") or {"producer": self.run.get("backend", "?")})

    @property
    def end_s(self) -> float:
        end = self.run.get("end_s")
        if end is None and self.flows.num_rows:
            end = max(self.flows.column("end").to_pylist())
        return float(end or 0.0)

    def table(self, name: str) -> pa.Table:
        return getattr(self, name)

    def df(self, name: str):
        """A table as a pandas DataFrame (nulls of integer columns become NaN)."""
        return self.table(name).to_pandas()

    # ------------------------------------------------------------------ the contract

    def validate(self) -> Trace:
        """Checks the contract; returns self, or raises :class:`TraceError` saying what broke."""
        try:
            meta = RunMeta.model_validate(self.run)
        except ValidationError as e:
            detail = validation_message(e)
            raise TraceError(f"run metadata: {detail}", RUN_JSON, detail) from None
        if meta.trace_version != TRACE_VERSION:
            raise TraceError(f"trace version {meta.trace_version!r}, expected {TRACE_VERSION}", RUN_JSON)
        for name in NAMES:
            t = self.table(name)
            if not t.schema.equals(SCHEMAS[name], check_metadata=False):
                raise table_error(name, f"not the contract's schema: {_schema_diff(t.schema, SCHEMAS[name])}")
            for f in SCHEMAS[name]:
                if not f.nullable and t.column(f.name).null_count:
                    raise table_error(name, f"column {f.name} has nulls")
        self._check_rows(meta.resolved)
        return self

    def _check_rows(self, info: RunInfo) -> None:
        if self.flows.num_rows == 0:
            raise table_error("flows", "no flows; a run has at least one")
        ids = self.flows.column("flow_id").to_pylist()
        if len(set(ids)) != len(ids):
            raise table_error("flows", "a flow_id appears twice")
        known = set(ids)
        for name in ("goodput", "tcp"):
            unknown = set(pc.unique(self.table(name).column("flow_id")).to_pylist()) - known
            if unknown:
                raise table_error(name, f"flow_id {sorted(unknown)[:5]} not in flows")
        for name in NAMES:
            for c in TABLES[name]:
                self._check_values(name, c)
        if pc.min(self.flows.column("start")).as_py() < -1e-9:
            raise table_error("flows", "a flow starts before t = 0")
        if "transfer" not in pc.unique(self.flows.column("role")).to_pylist():
            raise table_error("flows", "no flow is a transfer (role transfer); a run has at least one")
        del info  # parsed above: the resolved scenario is well-formed

    def _check_values(self, name: str, c: Column) -> None:
        """Values a column of the contract cannot hold: not finite, a time beyond any run, a
        label outside its set."""
        col = self.table(name).column(c.name).drop_null()
        if not len(col):
            return
        if c.type == f64 and not pc.all(pc.is_finite(col)).as_py():
            raise table_error(name, f"column {c.name} holds a value that is not finite")
        bound = limits.TRACE_TIME_MAX
        if c.kind == "time" and pc.max(pc.abs(col)).as_py() > bound.value:
            raise table_error(name, f"column {c.name} holds a time beyond {bound.value:g} {c.unit} ({bound.reason})")
        if c.values:
            odd = sorted(set(pc.unique(col).to_pylist()) - set(c.values))
            if odd:
                raise table_error(name, f"column {c.name} holds {odd[0]!r}; expected {' or '.join(c.values)}")

    # ------------------------------------------------------------------ storage

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name in NAMES:
            pq.write_table(self.table(name), folder / f"{name}.parquet", compression="zstd")
        row = {k: [json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v] for k, v in self.run.items()}
        pq.write_table(pa.table(row), folder / "run.parquet", compression="zstd")

    @classmethod
    def read(cls, folder: Path, run: dict | None = None) -> Trace:
        """The Trace of a run folder's ``trace/`` (``run``: its run.json when at hand), upgraded
        to the current version. A table that is missing, not a file or not Parquet is a
        :class:`TraceError` naming its file."""
        tables = {name: _read_table(folder / f"{name}.parquet", table_file(name)) for name in NAMES}
        if run is None:
            run = {}
            if (folder / "run.parquet").exists():
                rows = _read_table(folder / "run.parquet", table_file("run")).to_pylist()
                for k, v in (rows[0] if rows else {}).items():
                    run[k] = json.loads(v) if isinstance(v, str) and v[:1] in "{[" else v
        return upgrade(tables, dict(run))


def _read_table(path: Path, file: str) -> pa.Table:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise TraceError(f"{path}: missing trace table", file, "missing trace table") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror}", file, f"cannot read: {e.strerror}") from None
    if not stat.S_ISREG(mode):  # a folder would be read as a dataset, a FIFO would block
        what = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise TraceError(f"{path}: {what}; expected a Parquet table", file, f"{what}; expected a Parquet table")
    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        detail = f"not a readable Parquet table ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        raise TraceError(f"{path}: {detail}", file, detail) from None


def _schema_diff(got: pa.Schema, want: pa.Schema) -> str:
    if got.names != want.names:
        return f"columns {got.names}, expected {want.names}"
    bad = [
        f"{w.name} is {g.type}{'' if g.nullable else ' not null'}, expected {w.type}{'' if w.nullable else ' not null'}"
        for g, w in zip(got, want, strict=True)
        if (g.type, g.nullable) != (w.type, w.nullable)
    ]
    return "; ".join(bad)


# ----------------------------------------------------------------------------- older runs


def upgrade(tables: dict[str, pa.Table], run: dict) -> Trace:
    """A Trace of the current version from the tables and run.json of any version."""
    version = run.get("trace_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        detail = f"trace_version {version!r} is not a version of xferlab's trace (an integer from 1 to {TRACE_VERSION})"
        raise TraceError(detail, RUN_JSON)
    if version > TRACE_VERSION:
        raise TraceError(f"trace version {version} is newer than this xferlab ({TRACE_VERSION}): upgrade xferlab", RUN_JSON)
    if not isinstance(run.get("resolved"), dict):
        raise TraceError(
            f"resolved: expected the resolved scenario (a mapping), got {type(run.get('resolved')).__name__}", RUN_JSON
        )
    if version == 1:
        tables, run = _from_v1(tables, run)
    if version <= 2:
        tables = _from_v2(tables)
    if version <= 3:
        tables, run = _from_v3(tables), {**run, "trace_version": TRACE_VERSION}
    return Trace(run=run, **{name: conform(name, tables[name]) for name in NAMES})


def _from_v3(tables: dict) -> dict:
    """Version 3 had no ACK count (``tcp.acks_in``): unknown."""
    tcp = tables["tcp"]
    if "acks_in" in tcp.column_names:
        return tables
    return {**tables, "tcp": tcp.append_column("acks_in", pa.nulls(tcp.num_rows, pa.uint64()))}


def _from_v2(tables: dict) -> dict:
    """Version 2 had no receive window (``tcp.rwnd``): unknown."""
    tcp = tables["tcp"]
    if "rwnd" in tcp.column_names:
        return tables
    return {**tables, "tcp": tcp.append_column("rwnd", pa.nulls(tcp.num_rows, pa.uint32()))}


class _V1Run(BaseModel):
    """The keys of a version-1 run.json that the upgrade reads (the others pass through)."""

    model_config = ConfigDict(extra="allow", strict=True)

    class Imported(BaseModel):
        format: str | None = None
        files: list[str] = Field(default_factory=list)

    class Environment(BaseModel):
        warnings: list[str] = Field(default_factory=list)

    backend: str = "?"
    imported: Imported | None = None
    environment: Environment | None = None
    stats: dict[str, Any] | None = None
    sim_events: int | None = None
    unknown_metrics: list[str] = Field(default_factory=list)  # resolved.unknown_metrics
    transfers: list[dict[str, Any]] = Field(default_factory=list)  # resolved.transfers


def _from_v1(tables: dict, run: dict) -> tuple[dict, dict]:
    """Version 1 stored made-up zeros where iperf3 knows nothing (in_flight, ca_state, NaN
    rto) and kept the producer's details in several run.json keys."""
    resolved = dict(run["resolved"])
    try:
        old = _V1Run.model_validate(
            {
                **{k: v for k, v in run.items() if k != "resolved"},
                **{k: resolved[k] for k in ("unknown_metrics", "transfers") if k in resolved},
            }
        )
    except ValidationError as e:
        raise TraceError(f"a version 1 run.json: {validation_message(e)}", RUN_JSON) from None
    backend = old.backend
    tcp = tables["tcp"]
    if backend in ("import", "netns") and tcp.num_rows:
        for col in ("in_flight", "ca_state"):
            if col in tcp.column_names:
                i = tcp.column_names.index(col)
                tcp = tcp.set_column(i, col, pa.nulls(tcp.num_rows, tcp.column(i).type))
        tables = {**tables, "tcp": tcp}
    resolved.pop("unknown_metrics", None)
    setup = [("simulated events", f"{old.sim_events:,}")] if old.sim_events is not None else []
    prov = Provenance(
        producer=backend,
        source=old.imported.format if old.imported else None,
        setup=setup,
        warnings=old.environment.warnings if old.environment else [],
        unknown={k: "not in the imported logs" for k in old.unknown_metrics},
        files=old.imported.files if old.imported else [],
        stats=old.stats or {},
    )
    resolved["transfers"] = [{"variant": resolved.get("variant", "unknown"), **t} for t in old.transfers]
    new = {k: v for k, v in run.items() if k not in ("imported", "environment", "stats", "sim_events")}
    new.update(trace_version=TRACE_VERSION, resolved=resolved, provenance=prov.model_dump(mode="json"))
    return tables, new
