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
import re
import shutil
from pathlib import Path

import duckdb

from .. import registry, runfolder
from .. import scenario as sc
from .spec import Campaign, CampaignError, RunSpec, family_of

FORMAT = "xferlab-campaign/1"
MANIFEST = "campaign.json"
CATALOG = "catalog.duckdb"
RUNS = "runs"
LOCK = ".lock"
#: What a killed worker leaves of a run in runs/: the engine's staging folder, or a previous
#: folder moved aside while the new one was put in place (".<run_key>.tmp-…", ".<run_key>.old-…").
STAGING = re.compile(r"\.([0-9a-f]{16})\.(?:tmp|old)-[A-Za-z0-9_]+")
#: Names a campaign folder may hold; anything else makes it foreign.
KNOWN = {MANIFEST, CATALOG, CATALOG + ".wal", RUNS, "report", LOCK}

#: Scalar metrics stored as columns (every run metric of the registry): column → path in metrics.json.
METRIC_COLUMNS: dict[str, tuple[str, ...]] = {m.catalog_column: tuple(m.key.split(".")) for m in registry.RUN_METRICS}
INTEGER_METRICS = {m.catalog_column for m in registry.RUN_METRICS if m.integer}
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


def _param_values(resolved: dict | None, given: dict) -> dict:
    """The parameter columns of a run: from its run.json's resolved scenario (the levels R and
    Bg as given); all None when the run failed before resolving."""
    if not resolved:
        return dict.fromkeys(PARAM_COLUMNS)
    w = given.get("workload") or {}
    c, ca = resolved.get("bottleneck_rate_bps"), resolved.get("access_rate_bps")
    return {
        "variant": resolved["variant"],
        "rtt_ms": resolved["rtt_s"] * 1e3 if resolved.get("rtt_s") is not None else None,
        "streams": resolved["streams"],
        "pairs": resolved["pairs"],
        "access_mbps": ca / 1e6 if ca else None,
        "bottleneck_mbps": c / 1e6 if c else None,
        "buffer_packets": resolved.get("buffer_packets"),
        "congestion_level": resolved["pairs"] * ca / c if c and ca else None,
        "reverse_level": float(w.get("reverse") or 0.0),
        "background_level": float((w.get("background") or {}).get("level") or 0.0),
        "volume_bytes": resolved.get("volume_bytes"),
        "duration_s": resolved.get("duration_s"),
    }


def _resolve(given: dict) -> dict | None:
    """A failed run has no run.json: its parameters come from its scenario, resolved again."""
    try:
        return sc.resolve(sc.from_dict(given))
    except sc.ScenarioError:
        return None


#: The manifest's fields a campaign folder relies on, and their types.
MANIFEST_FIELDS: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "name": str,
    "fingerprint": str,
    "backend": str,
    "scenario": (dict, str),
    "sweep": dict,
    "zip": dict,
    "repetitions": int,
    "runs": int,
}


def _json_or_none(text):
    """What the catalog recorded as JSON, or None when it is not (a damaged catalog)."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None


def read_manifest(path: Path) -> dict:
    """A campaign folder's manifest, or :class:`CampaignError` naming the file and what is
    wrong with it (unreadable, not a regular file, not UTF-8 JSON, too deep, a field of the
    wrong type): the folder is corrupt."""
    try:
        m = runfolder.read_json(path)
    except runfolder.RunFolderError as e:
        raise CampaignError(f"{e}; not a readable campaign manifest, the folder is corrupt") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise CampaignError(f"{path}: not an xferlab campaign manifest (format {FORMAT!r} expected)")
    for field, kind in MANIFEST_FIELDS.items():
        value = m.get(field)
        if not isinstance(value, kind) or isinstance(value, bool):
            got = "missing" if field not in m else f"a {type(value).__name__}"
            raise CampaignError(f"{path}: {field} is {got}, not what a campaign manifest holds; the folder is corrupt")
    return m


class CampaignFolder:
    """An open campaign folder: manifest checked, lock held, catalog open."""

    def __init__(self, root: Path, campaign: Campaign | None, force: bool = False, create: bool = True):
        self.root = Path(root)
        self.campaign = campaign
        self._lock_fd = None
        self.grown_from: int | None = None  # the repetitions the folder held, when this run adds more
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
        return read_manifest(self.root / MANIFEST)

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
            if m is not None and m.get("fingerprint") != c.fingerprint() and not force and self._grows(m):
                m = None  # the same campaign with more repetitions: _init_catalog records it
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

    def _grows(self, held: dict) -> bool:
        """Whether this campaign is the one ``held`` (a manifest or the catalog's record) with
        more repetitions; fewer is an error (their runs are there: nothing is discarded)."""
        c = self.campaign
        if not isinstance(held, dict) or family_of(held) != c.family():
            return False
        had = held.get("repetitions")
        if not isinstance(had, int) or had > c.repetitions:
            raise CampaignError(
                f"{self.root} holds {c.name!r} with {had} repetitions; {c.source} asks for {c.repetitions}. "
                f"A campaign folder grows but never shrinks: ask for {had} or more (the report can select "
                "repetitions), or choose a new --out"
            )
        self.grown_from = had
        return True

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
        self._add_new_columns()
        row = self.db.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
        if row is None:
            with self.transaction():
                for k, v in (("format", FORMAT), ("name", c.name), ("fingerprint", c.fingerprint()), ("campaign", c.manifest())):
                    self.db.execute("INSERT INTO meta VALUES (?, ?)", [k, v if isinstance(v, str) else json.dumps(v)])
        elif row[0] != c.fingerprint():
            held = self.db.execute("SELECT value FROM meta WHERE key = 'campaign'").fetchone()
            if held is None or not self._grows(_json_or_none(held[0])):
                raise CampaignError(
                    f"{self.root / CATALOG} belongs to another campaign (fingerprint {row[0]}, not {c.fingerprint()}); "
                    "choose a new --out, or pass --force to discard it"
                )
            with self.transaction():
                for k, v in (("fingerprint", c.fingerprint()), ("campaign", json.dumps(c.manifest()))):
                    self.db.execute("UPDATE meta SET value = ? WHERE key = ?", [v, k])
        self._write_manifest()
        self.manifest = self._read_manifest()

    def _write_manifest(self) -> None:
        """The manifest, when missing (a new folder) or behind the catalog (a folder grown in place:
        the previous repetitions are kept in ``grown``, the first creation time stays)."""
        path = self.root / MANIFEST
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        old = read_manifest(path) if os.path.lexists(path) else None
        if old is not None and old.get("fingerprint") == self.campaign.fingerprint():
            return
        m = {"format": FORMAT, **self.campaign.manifest(), "created": now}
        if old is not None:
            grown = old.get("grown") if isinstance(old.get("grown"), list) else []
            m["created"] = old.get("created") if isinstance(old.get("created"), str) else now
            m["grown"] = [*grown, {"from": old.get("repetitions"), "to": self.campaign.repetitions, "at": now}]
        runfolder.write_json(path, m)

    def _add_new_columns(self) -> None:
        """A catalog written by an older xferlab lacks the metrics added since: add them (null)."""
        have = {
            r[0]
            for r in self.db.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'").fetchall()
        }
        for col in METRIC_COLUMNS:
            if col not in have:
                self.db.execute(f"ALTER TABLE runs ADD COLUMN {col} {'BIGINT' if col in INTEGER_METRICS else 'DOUBLE'}")

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

    def clear_staging(self) -> int:
        """Removes what killed workers left in ``runs/``: the staging folders of this campaign's
        runs, recognised by name (:data:`STAGING`), never anything else. Called with the lock
        held and no worker of this campaign alive; returns how many were removed."""
        keys = {r.key for r in self.campaign.runs}
        runs = self.root / RUNS
        removed = 0
        for name in os.listdir(runs) if runs.is_dir() else []:
            m = STAGING.fullmatch(name)
            if m is None or m.group(1) not in keys:
                continue
            p = runs / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed += 1
        return removed

    def record(self, run: RunSpec, status: str, metrics: dict | None = None, error: str | None = None, wall: float | None = None):
        """One row, in one transaction; replaces a failed row of the same run (retry)."""
        meta = self._run_json(run) if status == "ok" else None
        params = _param_values((meta or {}).get("resolved") or _resolve(run.given), run.given)
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

    def _run_json(self, run: RunSpec) -> dict | None:
        try:
            meta = runfolder.read_json(self.folder_of(run) / runfolder.RUN_FILE)
        except runfolder.RunFolderError:
            return None
        return meta if isinstance(meta, dict) else None

    def adopt(self, run: RunSpec) -> None:
        """Records a complete run folder that has no row yet (killed between the two commits)."""
        f = self.folder_of(run)
        m = runfolder.read_json(f / runfolder.METRICS_FILE)
        meta = runfolder.read_json(f / runfolder.RUN_FILE)
        self.record(run, "ok", metrics=m, wall=meta.get("wall_seconds"))
