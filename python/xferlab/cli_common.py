"""What every ``xferlab`` sub-command shares: the consoles, the one way to fail, and the
last line of defence against a traceback."""

from __future__ import annotations

import os
import sys
import traceback

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import registry

#: Exit status for a user mistake (bad scenario, bad folder), as argparse/click use.
USAGE = 2
#: Exit status for a failure of xferlab itself (a bug, or the machine out of memory).
INTERNAL = 1


#: Columns of a line off a terminal: wide enough that nothing is wrapped (a path, a table).
UNWRAPPED = 100_000


def _console(stderr: bool) -> Console:
    """A console; off a terminal (a pipe, a log, CI) lines are not wrapped at 80 columns
    (nor at a COLUMNS inherited from a parent), so paths and table cells stay whole."""
    c = Console(stderr=stderr)
    if not c.is_terminal:
        c = Console(stderr=stderr, width=UNWRAPPED, soft_wrap=True)
    return c


#: The consoles of every command and of ``make demo`` (xferlab.demo): none other is made.
console = _console(stderr=False)
err = _console(stderr=True)


def fail(message: str, status: int = USAGE):
    """Prints ``error: message`` on stderr and exits with ``status`` (no traceback)."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(status)


def run_app(app: typer.Typer) -> None:
    """Runs a Typer app; an exception that escapes every command's own handling becomes one
    line (``XFERLAB_DEBUG=1`` shows the traceback) and exit status 1, never a wall of text."""
    extra = {}
    if not (console.is_terminal and err.is_terminal):
        # Typer's own help and usage errors: plain lines, not panels wrapped at 80 columns.
        app.rich_markup_mode = None
        extra = {"terminal_width": UNWRAPPED, "max_content_width": UNWRAPPED}
    try:
        app(standalone_mode=True, **extra)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        err.print("[bold red]error:[/] interrupted", highlight=False)
        sys.exit(130)
    except MemoryError:
        err.print("[bold red]error:[/] out of memory; the scenario or input is too large for this machine", highlight=False)
        sys.exit(INTERNAL)
    except Exception as e:  # noqa: BLE001 - the last line of defence, said plainly
        if os.environ.get("XFERLAB_DEBUG"):
            raise
        where = traceback.extract_tb(e.__traceback__)[-1]
        err.print(
            f"[bold red]error:[/] internal error: {type(e).__name__}: {escape(str(e))} "
            f"(at {os.path.basename(where.filename)}:{where.lineno}); this is a bug of xferlab — "
            "please report it with the command; XFERLAB_DEBUG=1 shows the traceback",
            highlight=False,
            markup=True,
            soft_wrap=True,
        )
        sys.exit(INTERNAL)


#: The metrics the CLI prints after a run (labels, units and formats from the registry).
SUMMARY = [
    "aggregate_goodput_mbps",
    "ideal_goodput_mbps",
    "efficiency",
    "mean_flow_goodput_mbps",
    "jain_index",
    "jain_index_per_transfer",
    "mean_flow_cov",
    "retransmissions",
    "bottleneck_drops",
    "completion.mean_s",
    "completion.p99_s",
    "completion.makespan_deficiency",
    "completion.incomplete",
]


def print_summary(m: dict, out) -> None:
    """A run's main metrics as a table, and where its report is."""
    t = Table(show_header=True, header_style="bold")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for key in SUMMARY:
        value = registry.get(m, key)
        if key.startswith("completion.") and (value is None or (key.endswith("incomplete") and not value)):
            continue  # duration-bound runs have no completion times; complete runs no "incomplete"
        d = registry.METRICS[key]
        t.add_row(d.label, f"{d.format(value)} {d.unit}".rstrip() if value is not None else "—")
    w = m["window"]
    t.add_row("metrics window", f"{w['kind']} {w['start_s']:.2f}–{w['end_s']:.2f} s")
    console.print(t)
    console.print(f"report: [bold]{escape(str(out / 'report.html'))}[/]")
