"""The fidelity table of VALIDATION.md §3.2: a row per case, the simulator's figures beside
the kernel's, each tolerance checked (judge.verdicts), then the tallies; and the table read
back (``read_table``: the kernel's side of a run whose results are gone, as printed)."""

from __future__ import annotations

import math
import re

from ..backends import netns as netns_backend
from . import validation_md
from .judge import distance, tally, verdicts
from .store import unclean

HEADER = [
    "| variant | RTT | B (BDP) | flows (starts over) | goodput, sim / netns (Mbit/s) | Jain | CoV "
    "| ssthresh at slow-start exit (time) "
    "| first loss (s) | retx/drops, sim · netns | completion (s) | cwnd distance | load | misses |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
]


def _pair(a, b, fmt="{:.1f}") -> str:
    f = lambda x: "–" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)  # noqa: E731
    return f"{f(a)} / {f(b)}"


def row(res: dict) -> tuple[str, dict]:
    """A case's row (``res``: runs.run_case's) and its verdicts."""
    v, rtt, buf, n = res["case"].split(":")
    sd, nd, sv, nv = res["sim_duration"], res["netns_duration"], res["sim_volume"], res["netns_volume"]
    ok = verdicts(res)
    d = distance(sd.get("trajectory") or {}, nd.get("trajectory") or {})
    ss = lambda r: None if r.get("ss_ssthresh") is None else f"{r['ss_ssthresh']:.0f} ({r['ss_time_s']:.2f} s)"  # noqa: E731
    misses = [k for k, good in ok.items() if good is False]
    if (bad := nd.get("broken")) is not None:
        misses = [f"kernel run void: ssthresh {bad['ssthresh']:#x} at {bad['t']:.2f} s"]
    elif unclean(nd) or unclean(nv):
        late = max(nd.get("late_mean_ms") or 0.0, nv.get("late_mean_ms") or 0.0)
        misses = [f"kernel run unclean: delay line late {late:.2f} ms on average"]
    cells = [
        v,
        f"{rtt} ms",
        buf.replace("bdp", ""),
        f"{n} ({spread * 1e3:.0f} ms)" if (spread := start_spread(nd)) is not None else n,
        _pair(sd["goodput_mbps"], nd["goodput_mbps"]),
        _pair(sd["jain"], nd["jain"], "{:.3f}"),
        _pair(sd["cov"], nd["cov"], "{:.2f}"),
        f"{ss(sd) or '–'} / {ss(nd) or '–'}",
        _pair(sd.get("first_loss_s"), nd.get("first_loss_s"), "{:.2f}"),
        f"{sd['retransmissions']}/{sd['drops']} · {nd['retransmissions']}/{nd['drops']}",
        _pair(sv["makespan_s"], nv["makespan_s"], "{:.2f}"),
        "–" if d is None else f"{d:.2f}",
        f"{max(nd.get('load', [0])[0], nv.get('load', [0])[0]):.1f}",
        ", ".join(misses) or "✓",
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |", ok


def start_spread(r: dict) -> float | None:
    """How far apart (s) the kernel's flows started, if more than one and it was recorded."""
    starts = r.get("starts_s")
    return max(starts) - min(starts) if starts and len(starts) > 1 else None


def table(results: list[dict]) -> str:
    """The table of cases' results (runs.run_case's), with its tallies: the cases whose
    kernel run was void, unclean or failed are listed and left out of them."""
    lines = list(HEADER)
    failed = [r for r in results if "failed" in r]
    ran = [r for r in results if r not in failed]
    for res in ran:
        lines.append(row(res)[0])
    void = [r for r in ran if r["netns_duration"].get("broken") is not None]
    dirty = [r for r in ran if r not in void and (unclean(r["netns_duration"]) or unclean(r["netns_volume"]))]
    valid = [r for r in ran if r not in void and r not in dirty]
    lines += ["", tally([verdicts(r) for r in valid]) + "."]
    if void:
        lines += [
            "",
            f"{len(void)} cases are left out: their kernel run set an ssthresh no congestion control can "
            "give (" + ", ".join(r["case"] for r in void) + ").",
        ]
    if dirty:
        lines += [
            "",
            f"{len(dirty)} cases are left out: their kernel run's emulation was not clean, by the netns backend's "
            f"own tolerance (the delay line late by more than {netns_backend.LATE_MEAN_MS} ms on average, or "
            "packets lost outside the bottleneck: " + ", ".join(r["case"] for r in dirty) + ").",
        ]
    if failed:
        lines += [
            "",
            f"No kernel run in {len(failed)} of the cases: every attempt the netns backend made was void, the "
            "kernel giving a flow an impossible window (" + ", ".join(r["case"] for r in failed) + ").",
        ]
    plain = [verdicts(r, "simplain") for r in valid if "simplain_duration" in r]
    if plain:
        lines += [
            "",
            "The simulator on the scenario as written (quiet hosts, real 1 Gbit/s interfaces, an exact "
            "bottleneck) against the same netns runs: " + tally(plain) + ".",
        ]
    return "\n".join(lines)


def _number(cell: str) -> float | None:
    return None if cell.strip() in ("–", "") else float(cell)


def read_row(cells: list[str]) -> tuple[str, dict]:
    """A row of the table (``row``) read back: the case's key and its kernel side, the
    figures as printed."""
    v, rtt, buf, flows = cells[:4]
    key = f"{v}:{rtt.removesuffix(' ms')}:{buf}bdp:{flows.split()[0]}"
    net = lambda cell: cell.split(" / ")[1]  # noqa: E731
    ss = re.fullmatch(r"(\d+) \(([\d.]+) s\)", net(cells[7]).strip())
    retx, drops = cells[9].split(" · ")[1].split("/")
    void = re.match(r"kernel run void: ssthresh (0x[0-9a-f]+) at ([\d.]+) s", cells[13])
    duration = {
        "goodput_mbps": _number(net(cells[4])),
        "jain": _number(net(cells[5])),
        "cov": _number(net(cells[6])),
        "ss_ssthresh": float(ss.group(1)) if ss else None,
        "ss_time_s": float(ss.group(2)) if ss else None,
        "first_loss_s": _number(net(cells[8])),
        "retransmissions": int(retx),
        "drops": int(drops),
        "broken": {"t": float(void.group(2)), "ssthresh": int(void.group(1), 16)} if void else None,
        "load": [float(cells[12])],
    }
    return key, {"duration": duration, "volume": {"makespan_s": _number(net(cells[10]))}}


def read_table(text: str) -> dict:
    """The kernel side of each case in a fidelity table as a document printed it (between its
    markers: docs/validation/fidelity.md, once VALIDATION.md), for an archive of a run whose
    results are gone."""
    table = validation_md.block(text, "fidelity")
    cases = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(HEADER[0].strip("|").split("|")) and cells[1].endswith(" ms"):
            key, side = read_row(cells)
            cases[key] = side
    if failed := re.search(r"No kernel run in \d+ of the cases: .*\((.*)\)\.", table):
        for key in failed.group(1).split(", "):
            cases[key] = {"failed": "every attempt was void (as the table says)"}
    return cases
