"""The CLI loads a subcommand's module only when that subcommand runs: `xferlab --help`,
`version`, `check`, `schema`, `limits` and `ideal` answer without the simulator's stack
(numpy, Arrow, pandas, plots, DuckDB), and the help listing they show without loading
anything is the listing the loaded commands give. Counted in modules, not timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.core import TyperGroup
from typer.testing import CliRunner
from xferlab import cli

ROOT = Path(__file__).resolve().parent.parent

#: What a light subcommand must not import (each costs 0.1–0.5 s of CPU to import).
HEAVY = ("numpy", "pyarrow", "pandas", "matplotlib", "scipy", "duckdb", "asyncssh", "pyroute2", "xferlab.engine", "xferlab.trace")

PROBE = """
import json, sys
from xferlab import cli
sys.argv = ["xferlab", *json.loads(sys.argv[1])]
try:
    cli.main()
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def modules_of(args: list[str]) -> tuple[int, set[str]]:
    p = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    last = json.loads(p.stdout.strip().splitlines()[-1])
    return last["code"], set(last["modules"])


@pytest.mark.parametrize(
    "args",
    [["--help"], ["version"], ["check", "scenarios/quick.yaml"], ["schema"], ["limits"], ["ideal", "10Gbps"]],
)
def test_a_light_subcommand_imports_nothing_heavy(args):
    code, loaded = modules_of(args)
    assert code in (0, None)
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY or m in HEAVY)
    assert heavy == [], f"xferlab {' '.join(args)} imported {heavy[:8]}"


def test_run_still_imports_what_it_needs(tmp_path):
    """The probe can fail: the heavy stack appears as soon as a scenario is run."""
    out = tmp_path / "run"
    code, loaded = modules_of(["run", "scenarios/quick.yaml", "--set", "workload.duration=0.2s", "--out", str(out), "-q"])
    assert code in (0, None) and (out / "run.json").exists()
    assert "xferlab.engine" in loaded and "pandas" in loaded and "matplotlib" in loaded


def test_the_listing_shown_without_loading_is_the_loaded_commands_listing(monkeypatch):
    """`xferlab --help` lists each subcommand from :data:`cli.COMMANDS`; the same help with
    every subcommand loaded (click's own listing) must read the same, line for line."""
    lazy = CliRunner().invoke(cli.app, ["--help"], terminal_width=200)
    monkeypatch.setattr(cli.LazyGroup, "format_help", TyperGroup.format_help)
    loaded = CliRunner().invoke(cli.app, ["--help"], terminal_width=200)
    assert lazy.exit_code == loaded.exit_code == 0
    assert lazy.output == loaded.output
    assert all(name in lazy.output for name in cli.COMMANDS)


def test_every_subcommand_loads_and_runs_its_own_help():
    for name in cli.COMMANDS:
        r = CliRunner().invoke(cli.app, [name, "--help"])
        assert r.exit_code == 0 and "Usage:" in r.output and name in r.output, (name, r.output)


def test_an_unknown_subcommand_is_one_usage_error():
    r = CliRunner().invoke(cli.app, ["rnu"])
    assert r.exit_code == 2 and "No such command" in r.output
