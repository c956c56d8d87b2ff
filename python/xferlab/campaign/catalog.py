"""The campaign folder and its DuckDB catalog.

::

    DIR/campaign.json        manifest: name, fingerprint, scenario, axes, repetitions
    DIR/catalog.duckdb       tables `meta` (key, value) and `runs` (one row per finished run)
    DIR/runs/<key>/          one run folder per run (trace/*.parquet, metrics.json, ...)
    DIR/report/              `xferlab campaign report DIR`

Only the parent process writes the catalog (DuckDB allows one writer). A run is committed
in two steps, each atomic: its run folder (staged and renamed by the engine), then its row
(one transaction). A folder without its row — killed between the two — is adopted on
resume; a row is never written before its folder is complete.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import shutil
from pathlib import Path

from .. import runfolder
from .spec import Campaign, CampaignError, RunSpec

FORMAT = "xferlab-campaign/1"
MANIFEST = "campaign.json"
CATALOG = "catalog.duckdb"
RUNS = "runs"
LOCK = ".lock"
#: Names a campaign folder may hold; anything else makes it foreign.
KNOWN = {MANIFEST, CATALOG, CATALOG + ".wal", RUNS, "report", LOCK}

#: Scalar metrics stored as columns: column → path in metrics.json.
METRIC_COLUMNS: dict[str, tuple[str, ...]] = {
    "aggregate_goodput_mbps": ("aggregate_goodput_mbps",),
    "aggregate_goodput_cov": ("aggregate_goodput_cov",),
    "aggregate_throughput_mbps": ("aggregate_throughput_mbps",),
    "ideal_goodput_mbps": ("ideal_goodput_mbps",),
    "efficiency": ("efficiency",),
    "deficiency": ("deficiency",),
    "jain_index": ("jain_index",),
    "jain_index_per_transfer": ("jain_index_per_transfer",),
    "mean_flow_goodput_mbps": ("mean_flow_goodput_mbps",),
    "mean_flow_cov": ("mean_flow_cov",),
    "retransmissions": ("retransmissions",),
    "timeouts": ("timeouts",),
    "bottleneck_drops": ("bottleneck_drops",),
    "bottleneck_max_queue_pkts": ("bottleneck_max_queue_pkts",),
    "reverse_goodput_mbps": ("reverse_goodput_mbps",),
    "completion_count": ("completion", "count"),
    "completion_incomplete": ("completion", "incomplete"),
    "completion_mean_s": ("completion", "mean_s"),
    "completion_std_s": ("completion", "std_s"),
    "completion_p50_s": ("completion", "p50_s"),
    "completion_p75_s": ("completion", "p75_s"),
    "completion_p99_s": ("completion", "p99_s"),
    "completion_jain_index": ("completion", "jain_index"),
    "makespan_s": ("completion", "makespan_s"),
    "makespan_deficiency": ("completion", "makespan_deficiency"),
}
INTEGER_METRICS = {"retransmissions", "timeouts", "bottleneck_drops", "bottleneck_max_queue_pkts", "completion_count"}
INTEGER_METRICS |= {"completion_incomplete"}
#: Metrics every successful run has, whatever its workload.
CORE_METRICS = (
    "aggregate_goodput_mbps",
    "efficiency",
    "jain_index",
    "jain_index_per_transfer",
    "mean_flow_goodput_mbps",
    "retransmissions",
    "bottleneck_drops",
)

#: Parameters of the resolved scenario stored as columns (whatever the sweep axes).
PARAM_COLUMNS = {
    "variant": "VARCHAR",
    "rtt_ms": "DOUBLE",
    "streams": "INTEGER",
    "pairs": "INTEGER",
    "access_mbps": "DOUBLE",
    "bottleneck_mbps": "DOUBLE",
    "buffer_packets": "INTEGER",
    "congestion_level": "DOUBLE",
    "reverse_level": "DOUBLE",
    "background_level": "DOUBLE",
    "volume_bytes": "BIGINT",
    "duration_s": "DOUBLE",
}


def _ddl() -> str:
    params = ",\n  ".join(f"{k} {t}" for k, t in PARAM_COLUMNS.items())
    mets = ",\n  ".join(f"{k} {'BIGINT' if k in INTEGER_METRICS else 'DOUBLE'}" for k in METRIC_COLUMNS)
    return f"""
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS runs (
  run_key VARCHAR PRIMARY KEY,
  point INTEGER NOT NULL,
  repetition INTEGER NOT NULL,
  seed UBIGINT NOT NULL,
  backend VARCHAR NOT NULL,
  status VARCHAR NOT NULL,        -- ok | failed
  error VARCHAR,
  folder VARCHAR,                 -- relative to the campaign folder
  params JSON NOT NULL,           -- the swept fields of this point
  {params},
  wall_seconds DOUBLE,
  finished_at TIMESTAMPTZ NOT NULL,
  {mets},
  metrics JSON                    -- the whole metrics.json
);
"""


def _get(m: dict | None, path: tuple[str, ...]):
    for p in path:
        if not isinstance(m, dict):
            return None
        m = m.get(p)
    return m


def _param_values(given: dict) -> dict:
    from .. import scenario as sc

    s = sc.from_dict(given)
    r = sc.resolve(s)
    w = s.workload
    return {
        "variant": r["variant"],
        "rtt_ms": r["rtt_s"] * 1e3,
        "streams": r["streams"],
        "pairs": r["pairs"],
        "access_mbps": r["access_rate_bps"] / 1e6,
        "bottleneck_mbps": r["bottleneck_rate_bps"] / 1e6,
        "buffer_packets": r["buffer_packets"],
        "congestion_level": r["pairs"] * r["access_rate_bps"] / r["bottleneck_rate_bps"],
        "reverse_level": w.reverse,
        "background_level": w.background.level,
        "volume_bytes": r["volume_bytes"],
        "duration_s": r["duration_s"],
    }


class CampaignFolder:
    """An open campaign folder: manifest checked, lock held, catalog open."""

    def __init__(self, root: Path, campaign: Campaign | None, force: bool = False, create: bool = True):
        import duckdb

        self.root = Path(root)
        self.campaign = campaign
        self._lock_fd = None
        if campaign is not None:
            self._prepare(force, create)
        else:
            self._check_readable()
        self._lock()
        try:
            self.db = duckdb.connect(str(self.root / CATALOG), read_only=campaign is None)
        except duckdb.Error as e:
            self.close()
            if "lock" in str(e).lower():
                raise CampaignError(f"{self.root / CATALOG} is in use by a running campaign; wait for it to finish") from None
            raise CampaignError(f"{self.root / CATALOG}: cannot open the catalog ({e}); the folder looks corrupt") from None
        if campaign is not None:
            self._init_catalog()
        else:
            self._check_tables()

    # -- opening ---------------------------------------------------------------------

    def _read_manifest(self) -> dict:
        path = self.root / MANIFEST
        try:
            m = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise CampaignError(f"{path}: unreadable campaign manifest ({e}); the folder is corrupt") from None
        if not isinstance(m, dict) or m.get("format") != FORMAT:
            raise CampaignError(f"{path}: not an xferlab campaign manifest (format {FORMAT!r} expected)")
        return m

    def _check_readable(self) -> None:
        if not self.root.is_dir():
            raise CampaignError(f"{self.root}: no such folder")
        if not (self.root / MANIFEST).is_file() or not (self.root / CATALOG).is_file():
            raise CampaignError(f"{self.root}: not a campaign folder (no {MANIFEST} and {CATALOG})")
        self.manifest = self._read_manifest()

    def _prepare(self, force: bool, create: bool) -> None:
        c = self.campaign
        root = self.root
        hint = "choose a new --out, or pass --force to discard it and start again"
        if root.exists() and not root.is_dir():
            raise CampaignError(f"{root} exists and is not a folder; choose another --out")
        entries = set(os.listdir(root)) if root.is_dir() else set()
        if entries and MANIFEST not in entries:
            foreign = sorted(entries - KNOWN)
            if foreign or CATALOG not in entries:
                raise CampaignError(
                    f"{root} is not empty and is not a campaign folder (holds {', '.join(sorted(entries)[:5])}); "
                    "choose a new --out (it is never overwritten)"
                )
            # Killed during creation, before the manifest: the catalog must say it is ours.
        if MANIFEST in entries:
            try:
                m = self._read_manifest()
            except CampaignError as e:
                if not force:
                    raise CampaignError(f"{e}; {hint}") from None
                m = None
            if m is not None and m.get("fingerprint") != c.fingerprint():
                if not force:
                    raise CampaignError(
                        f"{root} holds another campaign ({m.get('name')!r}, {m.get('runs')} runs, fingerprint "
                        f"{m.get('fingerprint')}) than {c.source} ({c.name!r}, {len(c.runs)} runs, fingerprint "
                        f"{c.fingerprint()}); {hint}"
                    )
            if force and (m is None or m.get("fingerprint") != c.fingerprint()):
                self._wipe()
        if not create and not root.is_dir():
            raise CampaignError(f"{root}: no such campaign folder")
        root.mkdir(parents=True, exist_ok=True)
        (root / RUNS).mkdir(exist_ok=True)

    def _wipe(self) -> None:
        for name in os.listdir(self.root):
            p = self.root / name
            if name not in KNOWN:
                raise CampaignError(f"{self.root}: holds {name}, which a campaign does not write; not deleting it")
            shutil.rmtree(p) if p.is_dir() else p.unlink()

    def _lock(self) -> None:
        path = self.root / LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644) if self.campaign is not None else None
        except OSError as e:
            raise CampaignError(f"{path}: cannot create the lock file ({e})") from None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CampaignError(f"{self.root} is in use by another `xferlab campaign run`; wait for it or stop it") from None
        self._lock_fd = fd

    def _init_catalog(self) -> None:
        c = self.campaign
        self.db.execute(_ddl())
        row = self.db.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
        if row is None:
            with self.transaction():
                for k, v in (("format", FORMAT), ("name", c.name), ("fingerprint", c.fingerprint()), ("campaign", c.manifest())):
                    self.db.execute("INSERT INTO meta VALUES (?, ?)", [k, v if isinstance(v, str) else json.dumps(v)])
        elif row[0] != c.fingerprint():
            raise CampaignError(
                f"{self.root / CATALOG} belongs to another campaign (fingerprint {row[0]}, not {c.fingerprint()}); "
                "choose a new --out, or pass --force to discard it"
            )
        if not (self.root / MANIFEST).is_file():
            m = {"format": FORMAT, **c.manifest(), "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
            runfolder.write_json(self.root / MANIFEST, m)
        self.manifest = self._read_manifest()

    def _check_tables(self) -> None:
        tables = {r[0] for r in self.db.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if not {"meta", "runs"} <= tables:
            raise CampaignError(f"{self.root / CATALOG}: no runs/meta tables; the folder is corrupt")

    def close(self) -> None:
        db = getattr(self, "db", None)
        if db is not None:
            db.close()
            self.db = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- runs ------------------------------------------------------------------------

    def transaction(self):
        db = self.db

        class _Tx:
            def __enter__(self_):
                db.execute("BEGIN TRANSACTION")

            def __exit__(self_, et, ev, tb):
                db.execute("ROLLBACK" if et else "COMMIT")

        return _Tx()

    def recorded(self) -> dict[str, str]:
        """run_key → status of every run in the catalog."""
        return dict(self.db.execute("SELECT run_key, status FROM runs").fetchall())

    def folder_of(self, run: RunSpec) -> Path:
        return self.root / RUNS / run.key

    def complete_folder(self, run: RunSpec) -> bool:
        f = self.folder_of(run)
        return runfolder.is_run_folder(f) and (f / runfolder.METRICS_FILE).is_file()

    def clear_partial(self, run: RunSpec) -> None:
        """Removes what a killed worker may have left of this run (its staging folders)."""
        for p in (self.root / RUNS).glob(f".{run.key}.*"):
            shutil.rmtree(p, ignore_errors=True)

    def record(self, run: RunSpec, status: str, metrics: dict | None = None, error: str | None = None, wall: float | None = None):
        """One row, in one transaction; replaces a failed row of the same run (retry)."""
        params = _param_values(run.given)
        values = {
            "run_key": run.key,
            "point": run.point,
            "repetition": run.repetition,
            "seed": run.seed,
            "backend": self.campaign.backend,
            "status": status,
            "error": error,
            "folder": f"{RUNS}/{run.key}" if status == "ok" else None,
            "params": json.dumps(run.params, default=str),
            **params,
            "wall_seconds": wall,
            "finished_at": _dt.datetime.now(_dt.timezone.utc),
        }
        for col, path in METRIC_COLUMNS.items():
            values[col] = _get(metrics, path) if metrics else None
        values["metrics"] = json.dumps(metrics) if metrics is not None else None
        cols = list(values)
        with self.transaction():
            self.db.execute("DELETE FROM runs WHERE run_key = ? AND status <> 'ok'", [run.key])
            self.db.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", list(values.values()))

    def adopt(self, run: RunSpec) -> None:
        """Records a complete run folder that has no row yet (killed between the two commits)."""
        f = self.folder_of(run)
        m = runfolder.read_json(f / runfolder.METRICS_FILE)
        meta = runfolder.read_json(f / runfolder.RUN_FILE)
        self.record(run, "ok", metrics=m, wall=meta.get("wall_seconds"))
