"""The Trace: the tables every backend produces, stored as Parquet (DESIGN.md).

* ``flows``   — one row per TCP connection: flow_id, pair, stream, source, sink, variant,
  start, end, bytes, volume_bytes, completion_time, segments_sent, retransmissions, ...
* ``goodput`` — receiver-side bytes per interval per flow: t, flow_id, bytes, goodput_mbps
* ``link``    — bottleneck counters per interval: t, link, bytes, packets,
  throughput_mbps, drops, losses, queue_pkts, queue_max_pkts
* ``tcp``     — sender samples per flow: t, flow_id, cwnd, ssthresh, srtt_ms, rto_ms,
  in_flight, retransmissions, ca_state
* ``run``     — one row of metadata: backend, seed, scenario and resolved scenario (JSON)

Times are seconds from the start of the run; rates are Mbit/s; windows are segments.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

TABLES = ("flows", "goodput", "link", "tcp")


@dataclass
class Trace:
    flows: pa.Table
    goodput: pa.Table
    link: pa.Table
    tcp: pa.Table
    run: dict

    def table(self, name: str) -> pa.Table:
        return getattr(self, name)

    def df(self, name: str):
        """A table as a pandas DataFrame."""
        return self.table(name).to_pandas()

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name in TABLES:
            pq.write_table(self.table(name), folder / f"{name}.parquet", compression="zstd")
        row = {k: [json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v] for k, v in self.run.items()}
        pq.write_table(pa.table(row), folder / "run.parquet", compression="zstd")

    @classmethod
    def read(cls, folder: Path) -> Trace:
        tables = {}
        for name in TABLES:
            path = folder / f"{name}.parquet"
            if not path.exists():
                raise FileNotFoundError(f"{path}: missing trace table")
            tables[name] = pq.read_table(path)
        run = {}
        if (folder / "run.parquet").exists():
            for k, v in pq.read_table(folder / "run.parquet").to_pylist()[0].items():
                run[k] = json.loads(v) if isinstance(v, str) and v[:1] in "{[" else v
        return cls(run=run, **tables)

    @classmethod
    def from_batches(cls, batches: dict, run: dict) -> Trace:
        tables = {
            name: batches[name] if isinstance(batches[name], pa.Table) else pa.Table.from_batches([batches[name]])
            for name in TABLES
        }
        return cls(run=run, **tables)
