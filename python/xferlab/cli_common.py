"""What every ``xferlab`` sub-command shares: the consoles and the one way to fail."""

from __future__ import annotations

import typer
from rich.console import Console

console = Console()
err = Console(stderr=True)

#: Exit status for a user mistake (bad scenario, bad folder), as argparse/click use.
USAGE = 2


def fail(message: str, status: int = USAGE):
    """Prints ``error: message`` on stderr and exits with ``status`` (no traceback)."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(status)
