"""The ``xferlab`` command. Each subcommand lives in a ``cli_*`` module that imports what it
needs (the engine and the backends for ``run``, plots for reports, DuckDB for campaigns); this
one loads a subcommand's module only when that subcommand is asked for, so ``xferlab check``
or ``xferlab version`` answer without importing the simulator's whole stack.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import click
import typer
from typer.core import TyperGroup

from .cli_common import run_app


@dataclass(frozen=True)
class Entry:
    """Where a subcommand is defined: ``module`` (under ``xferlab``) and its attribute, a
    Typer app (``command`` names the command in it, or None when the app is the subcommand's
    own group), and the line ``xferlab --help`` shows for it (the first line of its own help,
    checked by a test)."""

    module: str
    attribute: str
    command: str | None
    line: str


#: Every subcommand, in the order ``xferlab --help`` lists them.
COMMANDS: dict[str, Entry] = {
    "run": Entry("cli_run", "app", "run", "Run one scenario and write its run folder (trace, metrics, report)."),
    "report": Entry("cli_run", "app", "report", "Re-render the metrics and the report of a run folder from its stored trace."),
    "cleanup": Entry("cli_run", "app", "cleanup", "Undo what crashed runs left behind: here, or on remote hosts (--inventory)."),
    "schema": Entry("cli_scenario", "app", "schema", "Print the JSON Schema of scenario files."),
    "check": Entry(
        "cli_scenario", "app", "check", "Validate a scenario and print it resolved (rates in bit/s, times in s, packets)."
    ),
    "ideal": Entry("cli_scenario", "app", "ideal", "Ideal rates r_Eth, r_IP, r_TP of a link (seed 001 §3.3)."),
    "limits": Entry(
        "cli_info", "app", "limits", "Print the bounds a scenario, a campaign or an import is checked against, and why."
    ),
    "version": Entry("cli_info", "app", "version", "Print the versions of xferlab and its simulator."),
    "import": Entry(
        "cli_import",
        "import_app",
        None,
        "Turn logs from a real testbed (iperf3 JSON, ss snapshots) into a run folder with trace, metrics and report.",
    ),
    "compare": Entry(
        "cli_import",
        "compare_app",
        "compare",
        "Put two runs side by side: metrics with their relative difference, goodput and cwnd over time.",
    ),
    "campaign": Entry(
        "cli_campaign", "campaign_app", None, "Sweeps and repetitions of a scenario, archived in a DuckDB catalog."
    ),
    "schedule": Entry("cli_schedule", "schedule_app", None, "Flow scheduling of transfer requests (seed 001)."),
    "bench": Entry("cli_campaign", "bench_app", None, "Benchmark suites (seed 004's user-oriented benchmark)."),
    "advise": Entry(
        "cli_advise",
        "app",
        "advise",
        "Advise a transfer: variant, streams and pacing for a path, with its predicted completion time.",
    ),
}


def load(name: str) -> click.Command:
    """The click command of subcommand ``name``, its module imported now."""
    e = COMMANDS[name]
    app = getattr(importlib.import_module(f"xferlab.{e.module}"), e.attribute)
    group = typer.main.get_group(app)
    cmd = group if e.command is None else group.commands[e.command]
    cmd.name = name
    return cmd


class LazyGroup(TyperGroup):
    """The top-level group: lists :data:`COMMANDS` from the table and loads one when it is
    run (its help listing shows the table's lines, without loading any)."""

    listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        if self.listing:
            line = COMMANDS[cmd_name].line
            return click.Command(cmd_name, help=line, short_help=line)
        cmd = load(cmd_name)
        _markup(cmd, self.rich_markup_mode)
        return cmd

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False


def _markup(cmd: click.Command, mode) -> None:
    """The top level's help style (rich panels on a terminal, plain text otherwise) for a
    loaded command and its subcommands."""
    if hasattr(cmd, "rich_markup_mode"):
        cmd.rich_markup_mode = mode
    for sub in getattr(cmd, "commands", {}).values():
        _markup(sub, mode)


app = typer.Typer(
    cls=LazyGroup,
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="xferlab: experiments on bulk data transfers over high bandwidth-delay-product networks.",
)


@app.callback()
def _top() -> None:
    """xferlab: experiments on bulk data transfers over high bandwidth-delay-product networks."""


def main():  # pragma: no cover
    run_app(app)


if __name__ == "__main__":  # pragma: no cover
    main()
