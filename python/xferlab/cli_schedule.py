"""``xferlab schedule plan``: what the planner makes of a scenario's transfer requests."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from . import backends, limits, schedule
from . import scenario as sc
from .backends import xfer_plan
from .backends.base import BackendError
from .cli_common import console, err
from .cli_common import fail as _fail
from .report import plan_figure
from .runinfo import PlanInfo, RunInfo
from .scenario import ScenarioError
from .units import format_duration, format_rate, format_size

schedule_app = typer.Typer(no_args_is_help=True, help="Flow scheduling of transfer requests (seed 001).")


#: Rows of the plan table on the terminal; the whole plan goes to --json.
TABLE_ROWS = 60


@schedule_app.command("plan")
def schedule_plan(
    scenario: Path = typer.Argument(..., help="scenario YAML file with requests (and a schedule)"),
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="override a field: section.field=value"),
    figure: Optional[Path] = typer.Option(None, "--figure", "-f", help="write the plan as a PNG (seed 001 fig. 6)"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write the whole plan as JSON (run.json's plan)"),
):
    """Plan the requests: start, rates over time, predicted completion, admission (no run)."""
    try:
        s, _ = sc.load(scenario, set_)
    except ScenarioError as e:
        _fail(str(e))
    if not s.requests:
        _fail(f"{scenario}: no requests to plan (add requests: [{{volume: …}}, …] and a schedule)")
    strategy = (s.schedule or sc.Schedule()).strategy
    if estimate := _estimate(s):  # said on a log too, where the spinner is not shown
        console.print(f"planning {len(s.requests)} requests ({strategy}){estimate}", highlight=False)
    try:
        with console.status(f"planning {len(s.requests)} requests ({strategy})…"):
            p = PlanInfo.model_validate(sc.plan_of(s))
    except ScenarioError as e:
        _fail(str(e))
    console.print(_plan_table(p))
    _plan_summary(p)
    if json_out is not None:
        _write(json_out, lambda f: f.write_text(json.dumps(p.model_dump(), indent=1)))
        console.print(f"plan: [bold]{escape(str(json_out))}[/]")
    if figure is not None:
        _write(figure, lambda f: f.write_bytes(plan_figure(p)))
        console.print(f"figure: [bold]{escape(str(figure))}[/]")


def _estimate(s: sc.Scenario) -> str:
    """What a long plan will take, said before it starts: multirate's linear program."""
    if (s.schedule or sc.Schedule()).strategy != "multirate":
        return ""
    reqs = [schedule.Request(r.volume, r.release, r.deadline) for r in s.requests]
    n = schedule.multirate_variables(reqs)
    return f": a linear program of up to {n:,} variables, {schedule.multirate_seconds(n)}" if n > 10_000 else ""


def _write(path: Path, write) -> None:
    try:
        write(path)
    except OSError as e:
        _fail(f"{path}: cannot write: {e.strerror or e}", status=2 if isinstance(e, IsADirectoryError) else 1)


def _plan_table(p: PlanInfo) -> Table:
    t = Table(show_header=True, header_style="bold", title=f"{p.strategy} plan, enforced by {p.mechanism} ({p.sync} starts)")
    for col in ("request", "pair", "volume", "release", "deadline", "start", "rates (goodput)", "completion", "admitted"):
        t.add_column(col, justify="right")
    shown = p.requests if len(p.requests) <= TABLE_ROWS else _some(p.requests)
    for r in shown:
        rates = ", ".join(
            f"{format_duration(g.start_s)}–{format_duration(g.end_s)}: {format_rate(g.rate_bps) if g.rate_bps else 'unlimited'}"
            for g in r.segments[:4]
        ) + (f", … ({len(r.segments)} segments)" if len(r.segments) > 4 else "")
        follows = f" (after {r.after})" if r.after is not None else ""
        t.add_row(
            escape(r.name) or str(r.request),
            str(r.pair),
            format_size(r.volume_bytes),
            format_duration(r.release_s),
            format_duration(r.deadline_s) if r.deadline_s is not None else "—",
            (format_duration(r.start_s) + follows) if r.start_s is not None else "—",
            rates or "—",
            format_duration(r.completion_s) if r.completion_s is not None else "—",
            "yes" if r.admitted else f"[red]no[/]: {escape(r.reason)}",
        )
    if len(shown) < len(p.requests):
        t.caption = f"{len(shown)} of {len(p.requests)} requests shown (the first, and the first refused); --json has all"
    return t


def _some(rows: list) -> list:
    """The rows a terminal can take: the first refused ones (up to half the table), and the
    first rows for the rest."""
    refused = [r for r in rows if not r.admitted][: TABLE_ROWS // 2]
    head = rows[: TABLE_ROWS - len(refused)]
    return sorted({r.request: r for r in head + refused}.values(), key=lambda r: r.request)


def _plan_summary(p: PlanInfo) -> None:
    refused = sum(1 for r in p.requests if not r.admitted)
    makespan = f"{p.makespan_s:.3f} s" if p.makespan_s is not None else "—"
    console.print(
        f"r_TP {p.capacity_bps / 1e6:.2f} Mbit/s; {len(p.requests) - refused} of {len(p.requests)} requests admitted"
        + (f", {refused} refused" if refused else "")
        + f"; planned makespan {makespan}, ideal {p.ideal_makespan_s:.3f} s (admitted volume)"
        + (f"; largest load {p.congestion_factor:.3f} of r_TP" if p.congestion_factor is not None else ""),
        highlight=False,
    )
    if any(r.deadline_s is not None for r in p.requests):
        margin = format_duration(p.margin_s)
        console.print(f"each request planned to end {margin} before its deadline ({p.margin})", highlight=False)


@schedule_app.command("run")
def schedule_run(
    scenario: Path = typer.Argument(..., help="scenario YAML file with requests and a schedule"),
    dest: str = typer.Argument(..., help="an `xfer serve` to send to: HOST:PORT (the data is discarded there)"),
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="override a field: section.field=value"),
    key_file: Optional[Path] = typer.Option(None, "--key-file", help="the server's shared key (xfer --key-file)"),
    insecure: bool = typer.Option(False, "--insecure", help="no key (loopback servers only, as xfer)"),
    out: Path = typer.Option(Path("schedule-run"), "--out", "-o", help="folder for the transfers' traces and the summary"),
    lead: float = typer.Option(2.0, "--lead", help="seconds from now to the plan's time 0 (sessions are set up meanwhile)"),
):
    """Move the plan's requests as real data with xfer: each starts on this host's clock or on its
    predecessor's signal, at the plan's rates through the schedule's mechanism."""
    if (key_file is None) == (not insecure):
        _fail("give the server's --key-file, or --insecure for a loopback server")
    if key_file is not None and not key_file.is_file():
        _fail(f"--key-file {key_file}: not a readable file")
    if not 0 <= lead <= 3600:
        _fail(f"--lead {lead:g}: give 0 to 3600 seconds")
    try:
        host, port = xfer_plan.destination(dest)
    except ValueError as e:
        _fail(str(e))
    try:
        s, _ = sc.load(scenario, set_)
        info = RunInfo.model_validate(sc.resolve(s))
        xfer = backends.get("netns").xfer_binary()
    except (ScenarioError, BackendError) as e:
        _fail(str(e))
    if info.plan is None:
        _fail(f"{scenario}: no requests to run (add requests: [{{volume: …}}, …] and a schedule)")
    if why := xfer_plan.not_enforceable(info.plan):
        _fail(why)
    admitted = sum(1 for r in info.plan.requests if r.admitted)
    if admitted > limits.XFER_SESSIONS_MAX.value:
        _fail(limits.too_big(f"{scenario}: one xfer per admitted request:", admitted, limits.XFER_SESSIONS_MAX, " transfers"))
    if out.exists() and not out.is_dir():
        _fail(f"--out {out}: a file is there, not a folder: give a new --out")
    try:
        xfer_plan.reachable(host, port)
    except BackendError as e:
        _fail(str(e), status=1)
    folder = _fresh_folder(out)
    auth = ["--insecure"] if insecure else ["--key-file", str(key_file)]
    t0 = time.time() + lead
    runs = xfer_plan.launches(info, dest, auth, folder, xfer, t0, (s.schedule or sc.Schedule()).hz)
    wait = xfer_plan.wait_s(info.plan.makespan_s or 0.0, lead)
    with console.status(f"transfers running (stopped after {wait:.0f} s)…") as st:
        xfer_plan.run(runs, wait, lambda done, n: st.update(f"{done}/{n} transfers done"), _echo_warning)
    rows = [xfer_plan.outcome(ln, t0) for ln in runs]
    summary = folder / "schedule-run.json"
    try:
        summary.write_text(json.dumps({"plan": info.plan.model_dump(), "requests": rows}, indent=1))
    except OSError as e:
        _fail(f"{summary}: cannot write: {e.strerror or e}", status=1)
    console.print(_outcome_table(info, rows))
    console.print(f"traces: [bold]{escape(str(folder))}[/]")
    _fail_on_errors(rows, wait)


def _echo_warning(ln: xfer_plan.Launch, line: str) -> None:
    """xfer's own warnings, as they happen (a window clamp below two segments says to pace)."""
    if "warning" in line:
        err.print(f"request {escape(ln.row.name or str(ln.row.request))}: {escape(line)}", highlight=False)


def _fail_on_errors(rows: list[dict], wait: float) -> None:
    """One ``error:`` line for failed transfers: how many, and the first one's reason (with
    its warnings when it was stopped), exit status 1 (the network, the server, the key)."""
    failed = [r for r in rows if r.get("error")]
    if not failed:
        return
    first = failed[0]
    why = first["error"]
    if first.get("stopped"):
        why = f"still running {wait:.0f} s after the launch, stopped" + (
            f" ({first['warnings'][0]})" if first["warnings"] else ""
        )
    name = first["name"] or str(first["request"])
    _fail(f"{len(failed)} of {len(rows)} transfers failed; request {name}: {why}", status=1)


def _fresh_folder(out: Path) -> Path:
    """``--out``: a new or empty folder (exit 2 for a file or a folder in use, 1 when it
    cannot be made)."""
    if out.exists() and not out.is_dir():
        _fail(f"--out {out}: a file is there, not a folder: give a new --out")
    try:
        if out.exists() and any(out.iterdir()):
            _fail(f"--out {out} is not empty: give a new --out")
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _fail(f"--out {out}: cannot create: {e.strerror or e}", status=2 if isinstance(e, NotADirectoryError) else 1)
    return out


def _outcome_table(info: RunInfo, rows: list[dict]) -> Table:
    t = Table(title=f"{info.plan.strategy} plan on real transfers ({info.plan.mechanism}, {info.plan.sync} starts)")
    for col in ("request", "volume", "start (planned)", "completion (planned)", "late", "goodput", "deadline"):
        t.add_column(col, justify="right")
    for r in rows:
        if r.get("error"):
            t.add_row(r["name"] or str(r["request"]), format_size(r["volume_bytes"]), f"[red]{escape(str(r['error']))}[/]")
            continue
        deadline = "—" if r["deadline_met"] is None else ("met" if r["deadline_met"] else "[red]missed[/]")
        t.add_row(
            r["name"] or str(r["request"]),
            format_size(r["volume_bytes"]),
            f"{r['start_s']:.3f} s ({r['planned_start_s']:.3f})",
            f"{r['completion_s']:.3f} s ({r['planned_completion_s']:.3f})",
            f"{r['late_s']:+.3f} s",
            format_rate(r["goodput_bps"]) if r["goodput_bps"] else "—",
            deadline,
        )
    return t
