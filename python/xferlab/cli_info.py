"""``xferlab limits`` and ``version``: what xferlab checks inputs against, and what it is."""

from __future__ import annotations

import typer
from rich.table import Table

from . import __version__, limits
from .backends import extension
from .cli_common import console

#: The commands of this module (:mod:`xferlab.cli` finds them here by name).
app = typer.Typer()


@app.command("limits")
def limits_command():
    """Print the bounds a scenario, a campaign or an import is checked against, and why."""
    t = Table(show_header=True, header_style="bold")
    for col in ("limit", "value", "why"):
        t.add_column(col)
    for name, value in vars(limits).items():
        if isinstance(value, limits.Limit):
            t.add_row(name.lower(), f"{value.value:,.6g}".replace(",", " "), value.reason)
    console.print(t)


@app.command()
def version():
    """Print the versions of xferlab and its simulator."""
    console.print(f"xferlab {__version__}, simulator {extension.version()} (variants: {', '.join(extension.variants())})")
