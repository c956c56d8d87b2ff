"""Other builds of the simulator beside this checkout's: the fixed reference that
BENCHMARKS.md compares today's cost with (a commit's extension, built once and kept under
``target/reference/COMMIT/``), or any older build given by path; loaded beside this one in
one process, and run on configurations that may postdate them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from importlib.machinery import ExtensionFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where reference builds are kept (one folder per commit), and their Cargo cache.
KEPT = ROOT / "target" / "reference"


def reference_build(commit: str) -> Path:
    """The extension of ``commit`` (its ``_sim.abi3.so``), built with ``maturin build
    --release`` in a temporary worktree the first time, then kept."""
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise SystemExit(f"not a commit id: {commit!r}")
    kept = KEPT / commit / "_sim.abi3.so"
    if kept.exists():
        return kept
    print(f"building the reference {commit} (once; kept in {kept.parent})", flush=True)
    with tempfile.TemporaryDirectory(prefix="xferlab-ref-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True, capture_output=True)
        try:
            env = {**os.environ, "CARGO_TARGET_DIR": str(KEPT / "cargo")}
            maturin = ROOT / ".venv" / "bin" / "maturin"
            cmd = [
                str(maturin),
                "build",
                "--release",
                "-q",
                "-m",
                str(tree / "crates/py/Cargo.toml"),
                "-o",
                str(Path(tmp) / "wheels"),
            ]
            subprocess.run(cmd, cwd=tree, env=env, check=True)
            (wheel,) = (Path(tmp) / "wheels").glob("*.whl")
            with zipfile.ZipFile(wheel) as z:
                (member,) = [n for n in z.namelist() if n.endswith("_sim.abi3.so")]
                kept.parent.mkdir(parents=True, exist_ok=True)
                with z.open(member) as src, open(str(kept) + ".part", "wb") as dst:
                    shutil.copyfileobj(src, dst)
            Path(str(kept) + ".part").rename(kept)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    return kept


def load_build(path: str, name: str = "baseline._sim"):
    """Another build of the extension module, loaded beside this one."""
    loader = ExtensionFileLoader(name, path)
    mod = module_from_spec(spec_from_loader(name, loader))
    loader.exec_module(mod)
    return mod


def _drop_empty(node, key: str) -> bool:
    """Removes ``key`` wherever it holds an empty value (None, [], {}) or a switch left off
    (False: a model the baseline predates, e.g. ``tso_defer``); whether any went."""
    found = False
    if isinstance(node, dict):
        if key in node and (node[key] is False or node[key] in (None, [], {})):
            del node[key]
            found = True
        children = node.values()
    else:
        children = node if isinstance(node, list) else []
    for child in children:
        found = _drop_empty(child, key) or found
    return found


#: Keys of a model the comparison is about: a baseline that predates them runs without it
#: (the receive window, 2026-11-27).
MODEL_KEYS = {"rcvbuf_autotuning", "rmem_max_bytes"}


def _drop_model_key(cfg: dict, key: str) -> bool:
    if key in MODEL_KEYS and key in cfg.get("tcp", {}):
        del cfg["tcp"][key]
        return True
    return False


def run_on_build(mod, cfg: dict) -> tuple[float, float, dict]:
    """One run of ``cfg`` on a build (this one or an older one, whose config may predate some
    keys: a key it refuses is left out where it is empty or off (the default), or where it
    turns on a model the comparison is about (MODEL_KEYS), never elsewhere where it says
    something). Returns its wall and CPU seconds and the simulator's own counts."""
    while True:
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            out = mod.run(json.dumps(cfg), None, 1.0)
            return time.perf_counter() - w0, time.process_time() - c0, dict(out["stats"])
        except ValueError as e:
            m = re.search(r"unknown field `(\w+)`", str(e))
            if not m or not (_drop_empty(cfg, m.group(1)) or _drop_model_key(cfg, m.group(1))):
                raise SystemExit(f"the build cannot run this case: {e}") from None
