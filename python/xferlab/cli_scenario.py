"""``xferlab check``, ``schema`` and ``ideal``: a scenario checked and resolved, its JSON
Schema, a link's ideal rates. Light: no simulator, no Arrow, no plots."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from . import scenario as sc
from .cli_common import console
from .cli_common import fail as _fail
from .models import ideal_rates
from .scenario import ScenarioError
from .units import parse_rate

#: The commands of this module (:mod:`xferlab.cli` finds them here by name).
app = typer.Typer()


@app.command()
def schema():
    """Print the JSON Schema of scenario files."""
    sys.stdout.write(json.dumps(sc.json_schema(), indent=2) + "\n")


#: Pairs whose settings `xferlab check` lists one by one.
CHECK_PAIRS_SHOWN = 50


@app.command()
def check(
    scenario: Path = typer.Argument(..., readable=False, help="scenario YAML file"),
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="override a field: section.field=value"),
):
    """Validate a scenario and print it resolved (rates in bit/s, times in s, packets)."""
    try:
        s, _ = sc.load(scenario, set_)
        r = sc.resolve(s)
    except ScenarioError as e:
        _fail(str(e))
    short = {k: v for k, v in r.items() if k not in ("flows", "transfers", "pair_paths")}
    short["flows"] = len(r["flows"])
    # Per-pair settings (variant, volume, RTT, access rate, rate limit, limiter): each pair's,
    # or the first ones and a count when there are many.
    shown = CHECK_PAIRS_SHOWN
    short["transfers"] = r["transfers"][:shown]
    if len(r["transfers"]) > shown:
        short["transfers_not_shown"] = len(r["transfers"]) - shown
    sys.stdout.write(json.dumps(short, indent=2) + "\n")


@app.command()
def ideal(
    rate: str = typer.Argument("1Gbps", help="link rate, e.g. 10Gbps"),
    mtu: int = typer.Option(1500, help="IP MTU, bytes"),
    headers: int = typer.Option(40, help="IP + TCP header bytes (52 with timestamps)"),
):
    """Ideal rates r_Eth, r_IP, r_TP of a link (seed 001 §3.3)."""
    try:
        bps = parse_rate(rate)
    except ValueError as e:
        _fail(str(e))
    r = ideal_rates(bps, mtu=mtu, header_bytes=headers)
    console.print(f"r_Eth = {r.r_eth_mbps:.2f} Mbit/s   r_IP = {r.r_ip_mbps:.2f} Mbit/s   r_TP = {r.r_tp_mbps:.2f} Mbit/s")
