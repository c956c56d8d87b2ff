"""An advice kept as a folder: its campaign (every simulator run) and what it concluded,
so that it can be opened again (``xferlab campaign report DIR``) without simulating.

    DIR/advice.json    the advice as ``--json`` prints it, with a format tag: the question,
                       the plans, the configurations in the order tried, the campaign's counts
    DIR/runs.parquet   one row per simulator run: its round (screening or contenders), its
                       configuration (none: the competing flows alone, the harm's
                       baseline), repetition, seconds, the goodput series and, for a run
                       that moved the whole job, its completion time
    DIR/index.html     the page (advisor/page.py), with figures/ beside it

Opening a folder re-derives every row, the recommendation and the default from the runs,
with the same rules and draws as when it was made (:func:`recommend.rows` is seeded), and
checks what it reads as the command line checks a question: the files are data, whoever
wrote them.
"""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import TypeAdapter, ValidationError

from .. import runfolder, variants
from ..runfolder import RunFolderError
from . import page
from .advice import Advice
from .candidates import Config, Plan
from .question import AdviceError, Question, ask
from .recommend import choose, default_row, rows
from .runs import Results

FORMAT = "xferlab-advice"
VERSION = 1
ADVICE_FILE = "advice.json"
RUNS_FILE = "runs.parquet"
ROUNDS = ("screening", "contenders")
#: The most configurations an advice lists (it tries 105 at most).
MAX_CONFIGS = 1000
#: The largest runs table opened (a 60 s budget writes a few MB).
RUNS_MAX_BYTES = 1 << 30

_SERIES = pa.list_(pa.float64())
RUNS_SCHEMA = pa.schema(
    [
        ("round", pa.string()),
        ("variant", pa.string()),  # null: the competing flows alone
        ("streams", pa.int64()),
        ("pacing", pa.float64()),
        ("rep", pa.int64()),
        ("wall_s", pa.float64()),
        ("completion_s", pa.float64()),
        ("t", _SERIES),
        ("job_bps", _SERIES),
        ("competing_bps", _SERIES),
    ]
)


def is_advice_folder(folder: Path) -> bool:
    return (Path(folder) / ADVICE_FILE).is_file()


def write(a: Advice, out: Path) -> Path:
    """Writes the advice folder whole or not at all (``runfolder.staged``: a new or empty
    folder only). Returns the page's path."""
    with runfolder.staged(out) as tmp:
        runfolder.write_json(tmp / ADVICE_FILE, {"format": FORMAT, "version": VERSION, **a.as_dict()})
        pq.write_table(runs_table(a), tmp / RUNS_FILE)
        page.render(tmp, a)
    return Path(out) / page.PAGE_FILE


def runs_table(a: Advice) -> pa.Table:
    out = []
    for name, runs in zip(ROUNDS, (a.screen_runs, a.final_runs), strict=True):
        for r in runs:
            c = r["config"]
            out.append(
                {
                    "round": name,
                    "variant": c.variant if c else None,
                    "streams": c.streams if c else None,
                    "pacing": c.pacing if c else None,
                    "rep": r["rep"],
                    "wall_s": r["wall_s"],
                    "completion_s": r["completion_s"],
                    "t": r["t"],
                    "job_bps": r["job_bps"],
                    "competing_bps": r["competing_bps"],
                }
            )
    return pa.Table.from_pylist(out, schema=RUNS_SCHEMA)


def render(folder: Path) -> Path:
    """Opens an advice folder and writes its page again; returns the page's path."""
    folder = Path(folder)
    a = load(folder)
    page.render(folder, a)
    return folder / page.PAGE_FILE


def load(folder: Path) -> Advice:
    """The advice of a folder, re-derived from its runs (AdviceError: not an advice folder,
    or one whose files do not hold what xferlab writes)."""
    folder = Path(folder)
    try:
        d = runfolder.read_json(folder / ADVICE_FILE)
    except RunFolderError as e:
        raise AdviceError(str(e)) from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise AdviceError(f"{folder / ADVICE_FILE}: not an advice of xferlab (no format {FORMAT!r})")
    if d.get("version") != VERSION:
        raise AdviceError(f"{folder / ADVICE_FILE}: advice format version {d.get('version')!r}; this xferlab reads {VERSION}")
    try:
        return _advice(d, _runs(folder / RUNS_FILE))
    except (ValidationError, KeyError, TypeError, ValueError) as e:
        if isinstance(e, AdviceError):
            raise AdviceError(f"{folder / ADVICE_FILE}: {e}") from None
        raise AdviceError(f"{folder}: not an advice folder xferlab wrote ({_short(e)})") from None


def _short(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:200]


def _advice(d: dict, runs: dict[str, list[dict]]) -> Advice:
    q = _question(d["question"])
    p = _plan(d["method"])
    if len(d["configurations"]) > MAX_CONFIGS or len(d["finalists"]) > MAX_CONFIGS:
        raise ValueError(f"more than {MAX_CONFIGS} configurations")
    configs = [_config(c) for c in d["configurations"]]
    table = rows(Results(runs=runs["screening"]), configs, q, p)
    finalists, p2 = [], None
    if d.get("finalists_method") is not None:
        p2 = _plan(d["finalists_method"])
        finalists = rows(Results(runs=runs["contenders"]), [_config(c) for c in d["finalists"]], q, p2)
    final = finalists or table
    if not final:
        raise ValueError("no configuration has a run")
    c = TypeAdapter(dict[str, float | int]).validate_python(d["campaign"])
    return Advice(
        q,
        p,
        table,
        choose(final, q),
        default_row(final),
        int(c["planned"]),
        int(c["ran"]),
        int(c["left_out"]),
        float(c["budget_s"]),
        float(c["wall_s"]),
        int(c["workers"]),
        finalists,
        p2,
        runs["screening"],
        runs["contenders"] if finalists else [],
    )


def _question(d: dict) -> Question:
    """The question, with every check of the command line's (``ask``) made again."""
    q = TypeAdapter(Question).validate_python(d, strict=False)
    checked = ask(
        f"{q.rtt_s!r}s",
        f"{q.bottleneck_bps!r}bps",
        f"{q.volume_bytes}B",
        f"{q.access_bps!r}bps",
        q.buffer,
        None if q.deadline_s is None else f"{q.deadline_s!r}s",
        q.competing,
        q.competing_variant,
        reverse=q.reverse,
        background=q.background,
    )
    if q.mtu != checked.mtu:
        raise AdviceError(f"an MTU of {q.mtu}: the advisor asks with {checked.mtu}")
    return checked


def _plan(d: dict) -> Plan:
    p = TypeAdapter(Plan).validate_python(d)
    times = (p.run_s, p.interval_s, p.epoch_s, p.slow_start_s, p.run_cost_s)
    if not all(math.isfinite(x) and x >= 0 for x in (p.scale, *times)) or p.scale < 1:
        raise ValueError("a plan with a negative or non-finite time, or a scale below 1")
    if not 0 < p.interval_s <= min(p.run_s, p.epoch_s):
        raise ValueError("a plan whose goodput interval is not within its run and its epoch")
    return p


def _config(d: dict) -> Config:
    c = Config(str(d["variant"]), int(d["streams"]), None if d["pacing"] is None else float(d["pacing"]))
    if c.variant != variants.canonical(c.variant) or not 1 <= c.streams <= 1024:
        raise ValueError(f"configuration {c.label}: not one the advisor tries")
    if c.pacing is not None and not 0 < c.pacing <= 1:
        raise ValueError(f"configuration {c.label}: pacing must be a share of the path in (0, 1]")
    return c


def _runs(path: Path) -> dict[str, list[dict]]:
    """The runs of each round, as ``runs.campaign`` gave them."""
    try:
        if path.is_symlink() or not path.is_file():
            raise AdviceError(f"{path}: missing, or not a regular file")
        if path.stat().st_size > RUNS_MAX_BYTES:
            raise AdviceError(f"{path}: larger than {RUNS_MAX_BYTES >> 20} MiB; not a runs table xferlab wrote")
        table = pq.read_table(path, schema=RUNS_SCHEMA)
    except (OSError, pa.ArrowException) as e:
        raise AdviceError(f"{path}: cannot read the runs ({_short(e)})") from None
    out: dict[str, list[dict]] = {name: [] for name in ROUNDS}
    for r in table.to_pylist():
        if r["round"] not in out:
            raise AdviceError(f"{path}: a run of round {r['round']!r}, not one of {', '.join(ROUNDS)}")
        series = [r["t"] or [], r["job_bps"] or [], r["competing_bps"] or []]
        if len({len(s) for s in series}) != 1 or not all(math.isfinite(x) and x >= 0 for s in series for x in s):
            raise AdviceError(f"{path}: a run whose goodput series differ in length or hold negative or non-finite values")
        config = None if r["variant"] is None else _config(r)
        out[r["round"]].append({**r, "config": config, "t": series[0], "job_bps": series[1], "competing_bps": series[2]})
    return out
