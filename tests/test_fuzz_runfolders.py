"""Standing fuzzers (issue 48): damaged run folders and hostile output folders.

Properties, through the command line (in this process, as `xferlab` runs it):

* **damaged run folders** — a run folder with one thing wrong: a field of run.json (any,
  however deep) given a value of another type or removed, run.json not JSON at all, a table
  with a column of another type, NaN, nulls, no rows or a column too many, or any kind of
  file-system object (nothing, an empty or a garbage file, a folder, a FIFO, a device, a
  dangling link, a link loop, a link to a user's file) in any place of the folder.
  `xferlab report` and `xferlab compare` then exit 0, or exit 1 or 2 with one line
  ``error: …`` that names the folder (or the file in it at fault) — never an internal error;
  nothing of the folder or of the user's is lost, and no staging is left.
* **output folders** — ``xferlab run S --out X`` with and without ``--force``, for X of every
  kind (nothing, an empty folder, a previous run folder, one with a user's file in it, a
  user's folder or file, a FIFO, the current, home or root folder or one that holds the
  current folder, a path under a file, a name of 255 or 256 bytes, a link to any of these, a
  dangling link, a link loop): the run writes X only where it may (nothing, an empty folder,
  or with ``--force`` a previous run folder); everything else is refused with one line that
  names X. A user's file is never lost and no staging is left.

Derandomized like tests/test_fuzz.py; XFERLAB_FUZZ_EXAMPLES and XFERLAB_FUZZ_SEED give more,
random, examples. The figures' PNG encoding is stubbed to keep the examples fast (the files
are written as in a real report).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from xferlab import compare, engine, report, scenario
from xferlab.cli import app

EXAMPLES = int(os.environ.get("XFERLAB_FUZZ_EXAMPLES", "150"))
#: The families that write a report per example run fewer of them.
SLOW_EXAMPLES = max(10, EXAMPLES // 3)


def fuzz(n: int):
    return settings(
        max_examples=n,
        derandomize="XFERLAB_FUZZ_SEED" not in os.environ,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )


TINY = {
    "name": "tiny",
    "topology": {"pairs": 2, "access_rate": "100Mbps", "bottleneck_rate": "100Mbps", "rtt": "10ms", "buffer": "0.5bdp"},
    "workload": {"streams": 1, "duration": "0.4s"},
    "protocol": {"variant": "reno"},
    "measure": {"goodput_interval": "0.1s"},
    "seed": 7,
}
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


@pytest.fixture(scope="module")
def quick_figures():
    """The figures drawn, but not encoded (matplotlib's PNG writer is most of a report's time)."""
    mp = pytest.MonkeyPatch()

    def png(fig) -> bytes:
        report.plt.close(fig)
        return PNG

    mp.setattr(report, "png", png)
    mp.setattr(compare, "png", png)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def base(tmp_path_factory, quick_figures) -> Path:
    root = tmp_path_factory.mktemp("base")
    (root / "tiny.yaml").write_text(json.dumps(TINY))
    s, given = scenario.load(root / "tiny.yaml")
    engine.run(s, given, root / "run")
    return root


def cli(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise AssertionError(f"xferlab {' '.join(map(str, args))}: an internal error") from r.exception
    return r


def refused_or_done(r, names: str) -> None:
    """Exit 0, or 1/2 with one ``error:`` line naming ``names`` (never an internal error)."""
    assert r.exit_code in (0, 1, 2), (r.exit_code, r.stderr)
    if r.exit_code:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
        assert "internal error" not in lines[0] and names in lines[0], r.stderr


def staging_left(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*") if re.search(r"\.(tmp|old|probe)-", p.name)]


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every name under ``root`` (links not followed) and the bytes of its regular files."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p.read_bytes() if p.is_file() and not p.is_symlink() else None
    return out


def _fresh(root: Path, base: Path) -> tuple[Path, Path]:
    """A copy of the base run to damage, and a user's file beside it."""
    shutil.copytree(base / "run", root / "run", symlinks=True)
    (root / "precious").write_text("mine")
    return root / "run", root / "precious"


# ----------------------------------------------------------------------------- damaged run folders

GARBAGE = [None, True, False, "", "x", "4", [], {}, [1, 2], [None], {"a": 1}, -1, 0, 1.5, 10**30, -1e300, 1e300]


def _leaves(node, at=()):
    """Every place of a JSON document: each key of a mapping, the first item of a list."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*at, k)
            yield from _leaves(v, (*at, k))
    elif isinstance(node, list) and node:
        yield (*at, 0)
        yield from _leaves(node[0], (*at, 0))


def _set(doc, path, value):
    node = doc
    for k in path[:-1]:
        node = node[k]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value


_DELETE = object()

WHOLE_FILE = {
    "utf-16": lambda text: text.encode("utf-16"),
    "utf-8 with a byte order mark": lambda text: b"\xef\xbb\xbf" + text.encode(),
    "latin-1 bytes": lambda text: text.replace('"', "\xe9", 1).encode("latin-1", "replace"),
    "empty": lambda text: b"",
    "truncated": lambda text: text[: len(text) // 2].encode(),
    "nested deep": lambda text: b"[" * 100_000 + b"]" * 100_000,
    "a list": lambda text: b"[1, 2]",
    "a number": lambda text: b"4",
    "NaN": lambda text: text.replace('"end_s": ', '"end_s": NaN, "x": ', 1).encode(),
    "Infinity": lambda text: text.replace('"end_s": ', '"end_s": 1e999, "x": ', 1).encode(),
    "binary": lambda text: bytes(range(256)) * 4,
}


@fuzz(EXAMPLES)
@given(st.data())
def test_a_damaged_run_json_is_refused_naming_it(base, tmp_path_factory, data):
    root = tmp_path_factory.mktemp("rj")
    folder, precious = _fresh(root, base)
    text = (folder / "run.json").read_text()
    if data.draw(st.booleans(), "whole file"):
        how = data.draw(st.sampled_from(sorted(WHOLE_FILE)), "how")
        (folder / "run.json").write_bytes(WHOLE_FILE[how](text))
    else:
        doc = json.loads(text)
        path = data.draw(st.sampled_from(list(_leaves(doc))), "field")
        value = data.draw(st.sampled_from([*GARBAGE, _DELETE]), "value")
        _set(doc, path, value)
        (folder / "run.json").write_text(json.dumps(doc))
    _check_report_and_compare(base, folder, precious)


def _check_report_and_compare(base: Path, folder: Path, precious: Path, always_compare: bool = False) -> None:
    before = snapshot(folder)
    r = cli("report", folder)
    refused_or_done(r, str(folder))
    after = snapshot(folder)
    # report rewrites metrics.json, report.html and the figures; it loses nothing else.
    rewritten = re.compile(r"^(metrics\.json|report\.html|figures(/.*)?)$")
    assert all(after.get(k) == v or rewritten.match(k) and k in after for k, v in before.items()), (before.keys(), after.keys())
    if r.exit_code or always_compare:  # compare reads what report reads, and draws the tables
        r = cli("compare", base / "run", folder, "--out", folder.parent / "cmp.html")
        refused_or_done(r, str(folder))
    assert precious.read_text() == "mine" and not staging_left(folder.parent)


PLACES = [
    "run.json",
    "metrics.json",
    "report.html",
    "figures",
    "figures/goodput.png",
    "trace",
    "trace/flows.parquet",
    "trace/goodput.parquet",
    "trace/link.parquet",
    "trace/tcp.parquet",
    "trace/run.parquet",
]
KINDS = [
    "missing",
    "empty file",
    "garbage file",
    "empty folder",
    "folder with a file",
    "fifo",
    "device",
    "dangling link",
    "link loop",
    "link to a user's file",
    "link to a user's folder",
]


def _put(p: Path, kind: str, precious: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif os.path.lexists(p):
        p.unlink()
    if kind == "empty file":
        p.write_bytes(b"")
    elif kind == "garbage file":
        p.write_bytes(b"\x00garbage\xff" * 10)
    elif kind == "empty folder":
        p.mkdir()
    elif kind == "folder with a file":
        p.mkdir()
        (p / "x").write_text("x")
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "device":
        p.symlink_to("/dev/zero")
    elif kind == "dangling link":
        p.symlink_to(p.parent / "nowhere")
    elif kind == "link loop":
        p.symlink_to(p)
    elif kind == "link to a user's file":
        p.symlink_to(precious)
    elif kind == "link to a user's folder":
        mine = precious.parent / "mine"
        mine.mkdir(exist_ok=True)
        (mine / "goodput.png").write_text("mine")
        p.symlink_to(mine)


@fuzz(SLOW_EXAMPLES)
@given(st.sampled_from(PLACES), st.sampled_from(KINDS))
def test_any_object_in_any_place_of_a_run_folder_is_refused_or_harmless(base, tmp_path_factory, place, kind):
    root = tmp_path_factory.mktemp("fs")
    folder, precious = _fresh(root, base)
    _put(folder / place, kind, precious)
    _check_report_and_compare(base, folder, precious)
    mine = root / "mine"
    if mine.exists():
        assert (mine / "goodput.png").read_text() == "mine" and os.listdir(mine) == ["goodput.png"]


def _column_damage(t: pa.Table, draw) -> pa.Table:
    if t.num_columns == 0:
        return t
    i = draw(st.integers(0, t.num_columns - 1), "column")
    name, n = t.column_names[i], t.num_rows
    how = draw(
        st.sampled_from(["fraction", "text", "drop", "extra", "twice", "nulls", "nan", "inf", "negative", "huge", "no rows"]),
        "how",
    )
    if how == "fraction":
        return t.set_column(i, name, pa.array([1.5] * n))
    if how == "text":
        return t.set_column(i, name, pa.array(["x"] * n))
    if how == "drop":
        return t.remove_column(i)
    if how == "extra":
        return t.append_column("extra", pa.array([1] * n))
    if how == "twice":
        return t.append_column(name, t.column(i))
    if how == "nulls":
        return t.set_column(i, name, pa.nulls(n, t.column(i).type))
    if how == "no rows":
        return t.slice(0, 0)
    value = {"nan": float("nan"), "inf": float("inf"), "negative": -1e300, "huge": 1e300}[how]
    return t.set_column(i, name, pa.array([value] * n))


@fuzz(SLOW_EXAMPLES)
@given(st.sampled_from(["flows", "goodput", "link", "tcp"]), st.data())
def test_a_damaged_table_is_refused_naming_it_or_harmless(base, tmp_path_factory, table, data):
    root = tmp_path_factory.mktemp("tb")
    folder, precious = _fresh(root, base)
    path = folder / "trace" / f"{table}.parquet"
    pq.write_table(_column_damage(pq.read_table(path), data.draw), path)
    _check_report_and_compare(base, folder, precious, always_compare=True)


# ----------------------------------------------------------------------------- output folders

DESTINATIONS = [
    "absent",
    "empty folder",
    "run folder",
    "run folder with a user's file",
    "user's folder",
    "user's file",
    "fifo",
    ".",
    "",
    "..",
    "home",
    "/",
    "under a file",
    "name of 255 bytes",
    "name of 256 bytes",
    "dangling link",
    "link loop",
]
LINKED = ["empty folder", "run folder", "run folder with a user's file", "user's folder", "user's file", "fifo", ".", "home"]
#: Where a run may go: without --force, and with it.
WRITABLE = {"absent", "empty folder", "name of 255 bytes", "link to empty folder"}
REPLACEABLE = {"run folder", "link to run folder"}


def _destination(box: Path, kind: str, base: Path) -> str:
    """Makes a destination of ``kind`` in ``box`` (the current folder is box/work) and
    returns the --out that names it."""
    if kind.startswith("link to "):
        target = _destination(box, kind.removeprefix("link to "), base)
        link = box / "link"
        link.symlink_to(Path(target) if Path(target).is_absolute() else box / "work" / target)
        return str(link)
    d = box / "out"
    if kind == "absent":
        return str(box / "new" / "deeper" / "run")
    if kind == "empty folder":
        d.mkdir()
    elif kind.startswith("run folder"):
        shutil.copytree(base / "run", d)
        if kind.endswith("user's file"):
            (d / "notes.txt").write_text("mine")
    elif kind == "user's folder":
        d.mkdir()
        (d / "thesis.tex").write_text("mine")
    elif kind == "user's file":
        d.write_text("mine")
    elif kind == "fifo":
        os.mkfifo(d)
    elif kind in (".", "", ".."):
        return kind
    elif kind == "home":
        return str(box / "home")
    elif kind == "/":
        return "/"
    elif kind == "under a file":
        (box / "afile").write_text("mine")
        return str(box / "afile" / "run")
    elif kind.startswith("name of"):
        return str(box / ("n" * int(kind.split()[2])))
    elif kind == "dangling link":
        d.symlink_to(box / "nowhere")
    elif kind == "link loop":
        d.symlink_to(d)
    return str(d)


@fuzz(SLOW_EXAMPLES)
@given(st.sampled_from(DESTINATIONS + [f"link to {k}" for k in LINKED]), st.booleans())
def test_a_run_writes_only_where_it_may_and_loses_nothing(base, tmp_path_factory, monkeypatch, kind, force):
    box = tmp_path_factory.mktemp("out")
    for d in (box / "work", box / "home"):
        d.mkdir()
        (d / "precious").write_text("mine")
    monkeypatch.setenv("HOME", str(box / "home"))
    monkeypatch.chdir(box / "work")
    out = _destination(box, kind, base)
    before = {k: v for k, v in snapshot(box).items() if v is not None}  # every file's bytes
    r = cli("run", base / "tiny.yaml", "--out", out, "-q", *(["--force"] if force else []))
    may = kind in WRITABLE or force and kind in REPLACEABLE
    assert (r.exit_code == 0) == may, (kind, force, r.exit_code, r.stderr)
    refused_or_done(r, str(Path(out)))
    after = snapshot(box)
    written = Path(os.path.realpath(Path(out) if Path(out).is_absolute() else box / "work" / out))
    for name, content in before.items():  # only the run folder it replaced may have changed
        if not (may and (box / name).resolve().is_relative_to(written)):
            assert after.get(name) == content, (kind, force, name)
    if may:
        assert (written / "run.json").is_file() and (written / "report.html").is_file()
    assert not staging_left(box)
