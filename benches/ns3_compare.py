"""ns-3 as a second, independent reference for the simulator (issue 11, item 4).

    .venv/bin/python benches/ns3_compare.py                      # every case; rewrites docs/validation/ns3.md
    .venv/bin/python benches/ns3_compare.py ns2 --jobs 2          # one group, two ns-3 runs at a time
    .venv/bin/python benches/ns3_compare.py --quick               # a short subset, nothing written
    .venv/bin/python benches/ns3_compare.py --trace ns2-170-reno  # cwnd, drops and goodput of one case, both simulators

Each case is one scenario, resolved once (``xferlab.scenario.resolve``); the same resolved
dict goes to xferlab's simulator (``backends.sim``) and to the ns-3 dumbbell
(``benches/ns3/dumbbell.cc``, built by ``benches/ns3/build.sh`` from the ``ns3`` wheel on
PyPI). ns-3's output becomes a Trace, so both runs go through the same ``metrics.compute``:
same window, same samples, same Jain index. Utilisation is each simulator's aggregate
goodput over its own ceiling, the goodput of a full bottleneck:

* xferlab: r_TP = C·MSS/(MTU + 38), Ethernet framing on the wire (``ideal_goodput_mbps``);
* ns-3: C·MSS/(MTU + 2), a point-to-point link carries IP packets and a 2-byte PPP header.

With ``--kernel`` (root) each case also runs on the netns backend, real Linux TCP on this
host (the same resolved scenario; the kernel's ceiling is xferlab's, HTB counting wire
bytes), and a second table puts the three side by side: where the two simulators disagree,
which one the kernel is nearer.

Runs are kept under ``results/ns3/<case>/`` (the resolved scenario, the simulator's trace,
ns-3's JSON, the kernel's trace and metrics) for ``--trace``; ``--reuse`` takes ns-3's and
the kernel's results from there when the scenario is unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml
from benchlib import machine
from xferlab import backends, metrics, models, scenario
from xferlab.fidelity import validation_md
from xferlab.runinfo import Provenance
from xferlab.trace import Trace
from xferlab.trace import table as trace_table

ROOT = Path(__file__).resolve().parent.parent

NS3_DIR = ROOT / "benches" / "ns3"
BUILD = NS3_DIR / "build.sh"
RESULTS = ROOT / "results" / "ns3"

#: xferlab's variant names and the ns-3 class the dumbbell runs for each.
NS3_CLASS = {
    "reno": "TcpLinuxReno",
    "bic": "TcpBic",
    "cubic": "TcpCubic",
    "highspeed": "TcpHighSpeed",
    "htcp": "TcpHtcp",
    "scalable": "TcpScalable",
    "bbr": "TcpBbr",
}

#: A disagreement in utilisation beyond this is investigated (the issue's 5 %).
TOLERANCE = 0.05

#: Link framing of ns-3's point-to-point devices: a PPP header, nothing else on the wire.
PPP_HEADER = 2


@dataclass(frozen=True)
class Case:
    name: str
    group: str
    label: str
    data: dict


def _ns2_cases(quick: bool) -> list[Case]:
    """Seed 004's NS-2 scenario reduced (12 × 30 Mbit/s into 300 Mbit/s, 20 ms, 60 s) with
    B = 170 packets (0.34 BDP) and 1 BDP, for each variant."""
    base = yaml.safe_load((ROOT / "scenarios/seed004-ns2-reduced.yaml").read_text())
    out = []
    for buffer in (170, "1.0bdp"):
        for variant in NS3_CLASS:
            if quick:  # ns-3's slow start into 1 000-packet host queues is slow to simulate
                continue
            data = json.loads(json.dumps(base))
            data["name"] = f"ns2-{buffer}-{variant}".replace("1.0bdp", "1bdp")
            data["topology"]["buffer"] = buffer
            data["protocol"]["variant"] = variant
            if quick:
                data["workload"]["duration"] = "10s"
            label = f"NS-2 reduced, B = {'1 BDP' if buffer == '1.0bdp' else buffer}"
            out.append(Case(data["name"], "ns2", label, data))
    return out


def _dumbbell_cases(quick: bool) -> list[Case]:
    """1 and 4 pairs, 1 Gbit/s access into 100 Mbit/s, 10/50/200 ms, 0.5 BDP, 30 s."""
    out = []
    for pairs in (1, 4):
        for rtt in (10, 50, 200):
            for variant in NS3_CLASS:
                if quick and (variant not in ("reno", "cubic", "bbr") or rtt != 50):
                    continue
                name = f"db{pairs}-{rtt}ms-{variant}"
                data = {
                    "name": name,
                    "topology": {
                        "pairs": pairs,
                        "access_rate": "1Gbps",
                        "bottleneck_rate": "100Mbps",
                        "rtt": f"{rtt}ms",
                        "buffer": "0.5bdp",
                    },
                    "workload": {"streams": 1, "duration": "10s" if quick else "30s"},
                    "protocol": {"variant": variant},
                    "measure": {"goodput_interval": "0.5s", "link_interval": "100ms"},
                    "seed": 1,
                }
                label = f"{pairs} flow{'s' if pairs > 1 else ''}, {rtt} ms"
                out.append(Case(name, "dumbbell", label, data))
    return out


GROUPS = {"ns2": _ns2_cases, "dumbbell": _dumbbell_cases}


# ----------------------------------------------------------------------------- the two runs


def ns3_ceiling_mbps(resolved: dict) -> float:
    """Goodput of a full ns-3 bottleneck: C·MSS/(MTU + 2) (IP packets in PPP, no Ethernet),
    of the bottleneck or of the access links if they are the smaller."""
    limit = min(resolved["bottleneck_rate_bps"], sum(p["access_rate_bps"] for p in resolved["pair_paths"]))
    r = models.ideal_rates(
        limit, mtu=resolved["mtu"], header_bytes=resolved["header_bytes"], l2_header=PPP_HEADER, fcs=0, preamble=0, ifg=0
    )
    return r.r_tp_mbps


def run_sim(s: scenario.Scenario, resolved: dict, folder: Path) -> tuple[dict | None, float, str | None]:
    """xferlab's simulator on the resolved scenario: (metrics, wall s, refusal or None)."""
    t0 = time.perf_counter()
    try:
        trace = backends.get("sim").run(s, resolved)
    except backends.BackendError as e:
        return None, 0.0, str(e)
    wall = time.perf_counter() - t0
    trace.write(folder / "sim")
    return metrics.compute(trace), wall, None


def run_ns3(resolved: dict, folder: Path, reuse: bool, extra: tuple[str, ...] = ()) -> dict:
    """ns-3's dumbbell on the same resolved scenario (its result JSON); ``extra`` are more
    arguments for the program (diagnostics, e.g. ``--ns3::TcpSocketState::EnablePacing=true``)."""
    folder.mkdir(parents=True, exist_ok=True)
    config, result, args_file = folder / "resolved.json", folder / "ns3.json", folder / "ns3-args.json"
    text = json.dumps(resolved, sort_keys=True, indent=1)
    args_text = json.dumps(list(extra))
    unchanged = config.exists() and config.read_text() == text
    unchanged = unchanged and (args_file.read_text() if args_file.exists() else "[]") == args_text
    if reuse and result.exists() and unchanged:
        return json.loads(result.read_text())
    config.write_text(text)
    args_file.write_text(args_text)
    result.unlink(missing_ok=True)
    proc = subprocess.run(
        [str(BUILD), "run", f"--config={config}", f"--out={result}", *extra], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"ns-3 dumbbell failed on {resolved['name']}: {proc.stderr.strip()}")
    return json.loads(result.read_text())


#: Attempts at a kernel run whose emulation was not clean (its delay line late). A void run (a
#: BPF congestion control given an impossible window) the netns backend makes again itself.
KERNEL_ATTEMPTS = 3


def run_kernel(s: scenario.Scenario, resolved: dict, folder: Path, reuse: bool) -> dict:
    """The netns backend (real Linux TCP, root) on the resolved scenario: {"metrics",
    "unclean", "attempts", "error"}, stored as ``netns.json`` (its Trace in ``netns/``) and
    taken from there with ``reuse`` when the scenario is unchanged. A run whose emulation
    was not clean is made again, up to KERNEL_ATTEMPTS, and the last kept, flagged; one the
    backend refused (void on each of its own attempts) is recorded with the reason."""
    stored = folder / "netns.json"
    text = json.dumps(resolved, sort_keys=True, indent=1)
    if reuse and stored.exists():
        old = json.loads(stored.read_text())
        if old.get("resolved") == text:
            return old
    shutil.rmtree(folder / "netns", ignore_errors=True)
    for attempt in range(1, KERNEL_ATTEMPTS + 1):
        try:
            trace = backends.get("netns").run(s, resolved)
        except backends.BackendError as e:  # void three times in a row (the backend's own retries)
            out = {"metrics": None, "unclean": False, "error": str(e)}
            break
        trace.write(folder / "netns")
        unclean = bool(trace.provenance.stats.get("delay_line_late"))
        out = {"metrics": metrics.compute(trace), "unclean": unclean, "error": None}
        if not unclean:
            break
        print(
            f"{resolved['name']}: kernel run {attempt} of {KERNEL_ATTEMPTS}: its emulation was not clean",
            file=sys.stderr,
            flush=True,
        )
    out |= {"attempts": attempt, "resolved": text}
    stored.write_text(json.dumps(out, default=float))
    return out


def ns3_trace(res: dict, resolved: dict) -> Trace:
    """ns-3's result as a Trace (the schema every backend writes), for ``metrics.compute``."""
    gi, li, mss = res["goodput_interval_s"], res["link_interval_s"], resolved["mss"]
    flows, goodput, tcp = [], [], []
    for f in res["flows"]:
        flows.append(
            {
                "flow_id": f["flow_id"],
                "pair": f["pair"],
                "stream": f["stream"],
                "source": f"s{f['pair']}",
                "sink": f"r{f['pair']}",
                "variant": f["variant"],
                "role": "transfer",
                "start": f["start"],
                "end": f["end"],
                "bytes": f["bytes"],
                "volume_bytes": f["volume_bytes"],
                "completion_time": f["completion_time"],
                "segments_sent": f["segments_sent"],
                "retransmissions": f["retransmissions"],
                "fast_recoveries": f["fast_recoveries"],
                "timeouts": f["timeouts"],
            }
        )
        first = int(f["start"] // gi)
        for k, b in enumerate(f["goodput_bytes"]):
            if k >= first and k * gi < f["end"]:
                goodput.append({"t": k * gi, "flow_id": f["flow_id"], "bytes": b, "goodput_mbps": b * 8 / gi / 1e6})
        for t, cwnd, ssthresh, srtt, rto, inflight, retx, ca in f["tcp"]:
            tcp.append(
                {
                    "t": t,
                    "flow_id": f["flow_id"],
                    "cwnd": cwnd // mss,
                    "ssthresh": None if ssthresh >= 2**31 else ssthresh // mss,
                    "srtt_ms": srtt,
                    "rto_ms": rto,
                    "in_flight": inflight // mss,
                    "retransmissions": retx,
                    "ca_state": ca,
                }
            )
    link = [
        {
            "t": t,
            "link": "bottleneck",
            "bytes": b,
            "packets": n,
            "throughput_mbps": b * 8 / li / 1e6,
            "drops": d,
            "losses": 0,
            "queue_pkts": q,
            "queue_max_pkts": qmax,
        }
        for t, b, n, d, q, qmax in res["link"]
    ]
    tables = {"flows": flows, "goodput": goodput, "link": link, "tcp": tcp}
    return Trace.build(
        {name: trace_table(name, rows) for name, rows in tables.items()},
        resolved,
        Provenance(producer="ns-3"),
        end_s=res["end_s"],
        versions={"ns-3": res["ns3_version"]},
    )


@dataclass
class Row:
    case: Case
    sim: dict | None
    sim_refusal: str | None
    sim_wall: float
    ns3: dict
    ns3_res: dict
    ceiling_sim: float
    ceiling_ns3: float
    kernel: dict | None = None  # run_kernel's, with --kernel

    @property
    def util_kernel(self) -> float | None:
        m = (self.kernel or {}).get("metrics")
        return None if m is None else m["aggregate_goodput_mbps"] / self.ceiling_sim

    @property
    def util_sim(self) -> float | None:
        return None if self.sim is None else self.sim["aggregate_goodput_mbps"] / self.ceiling_sim

    @property
    def util_ns3(self) -> float:
        return self.ns3["aggregate_goodput_mbps"] / self.ceiling_ns3

    @property
    def diff(self) -> float | None:
        u = self.util_sim
        return None if u is None else (self.util_ns3 - u) / u


def run_case(case: Case, reuse: bool, extra: tuple[str, ...] = (), kernel: bool = False) -> Row:
    s = scenario.from_dict(case.data, case.name)
    resolved = scenario.resolve(s)
    folder = RESULTS / (case.name + ("+diag" if extra else ""))
    res = run_ns3(resolved, folder, reuse, extra)
    m_ns3 = metrics.compute(ns3_trace(res, resolved))
    m_sim, wall, refusal = run_sim(s, resolved, folder)
    k = run_kernel(s, resolved, folder, reuse) if kernel else None
    return Row(case, m_sim, refusal, wall, m_ns3, res, resolved["ideal_goodput_mbps"], ns3_ceiling_mbps(resolved), k)


# ----------------------------------------------------------------------------- the table


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def _ns3_drops(r: Row) -> str:
    """Bottleneck drops, and the drops at the senders' own queues when there were any."""
    host = r.ns3_res.get("host_drops", 0)
    return f"{r.ns3['bottleneck_drops']}" + (f" (+{host} at hosts)" if host else "")


def render(rows: list[Row], notes: dict[str, str]) -> str:
    out = [
        "| scenario | variant (ns-3) | utilisation, xferlab | ns-3 | ns-3 − xferlab | Jain, xferlab | ns-3 "
        "| drops, xferlab | ns-3 | timeouts, xferlab | ns-3 | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        v = r.case.data["protocol"]["variant"]
        n = r.ns3
        if r.sim is None:
            sim_cols = ["not simulated", "", "", ""]
            d = ""
        else:
            sim_cols = [_pct(r.util_sim), "", f"{r.sim['jain_index']:.3f}", ""]
            d = f"{100 * r.diff:+.1f} %"
            if abs(r.diff) > TOLERANCE:
                d = f"**{d}**"
        note = notes.get(r.case.name, "")
        out.append(
            f"| {r.case.label} | {v} ({NS3_CLASS[v]}) | {sim_cols[0]} | {_pct(r.util_ns3)} | {d} | "
            f"{sim_cols[2] or '—'} | {n['jain_index']:.3f} | "
            f"{r.sim['bottleneck_drops'] if r.sim else '—'} | {_ns3_drops(r)} | "
            f"{r.sim['timeouts'] if r.sim else '—'} | {n['timeouts']} | {note} |"
        )
    return "\n".join(out)


def _rel(x: float | None, ref: float | None) -> str:
    """x against the reference, relative, bold beyond TOLERANCE."""
    if x is None or not ref:
        return "—"
    d = f"{100 * (x / ref - 1):+.1f} %"
    return f"**{d}**" if abs(x / ref - 1) > TOLERANCE else d


#: Two simulators whose distances to the kernel's utilisation differ by less than this (half
#: a point of utilisation) are as near it.
AS_NEAR = 0.005


def nearer(r: Row) -> str:
    """Which simulator's utilisation is nearer the kernel's ("both": within AS_NEAR)."""
    k, x, n = r.util_kernel, r.util_sim, r.util_ns3
    if k is None or x is None:
        return "—"
    dx, dn = abs(x - k), abs(n - k)
    return "both" if abs(dx - dn) < AS_NEAR else ("xferlab" if dx < dn else "ns-3")


def kernel_tally(rows: list[Row]) -> str:
    """How many cases each simulator holds within TOLERANCE of the kernel's utilisation, and
    which one the kernel sides with where the two simulators are more than TOLERANCE apart."""
    ran = [r for r in rows if r.util_kernel is not None and r.util_sim is not None]
    clean = [r for r in ran if not r.kernel["unclean"]]
    within = lambda u, r: abs(u / r.util_kernel - 1) <= TOLERANCE  # noqa: E731
    apart = [r for r in clean if r.diff is not None and abs(r.diff) > TOLERANCE]
    sides = {s: sum(nearer(r) == s for r in apart) for s in ("xferlab", "ns-3", "both")}
    return (
        f"Of {len(clean)} cases with a clean kernel run ({len(ran) - len(clean)} unclean left out), xferlab is within "
        f"{100 * TOLERANCE:.0f} % of the kernel's utilisation in {sum(within(r.util_sim, r) for r in clean)}, ns-3 in "
        f"{sum(within(r.util_ns3, r) for r in clean)}. Where the two simulators are more than {100 * TOLERANCE:.0f} % apart "
        f"({len(apart)} cases) the kernel is nearer xferlab in {sides['xferlab']}, ns-3 in {sides['ns-3']}"
        + (f", as near both in {sides['both']}" if sides["both"] else "")
        + "."
    )


def _refusal(error: str) -> str:
    """Why the kernel has no run of a case, short enough for a table cell."""
    if "impossible window" in error:
        return "void three times (a BPF congestion control's impossible window, docs/bpf-cc.md)"
    return error if len(error) <= 100 else error[:99] + "…"


def render_kernel(rows: list[Row]) -> str:
    """The three side by side: each simulator's utilisation against the kernel's."""
    out = [
        "| scenario | variant | utilisation, kernel | xferlab | ns-3 | xferlab − kernel | ns-3 − kernel "
        "| Jain, kernel | xferlab | ns-3 | drops, kernel | timeouts, kernel | nearer the kernel |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if r.kernel is None:
            continue
        m = r.kernel.get("metrics")
        if m is None:
            out.append(
                f"| {r.case.label} | {r.case.data['protocol']['variant']} | no run: {_refusal(r.kernel['error'])} |" + " |" * 10
            )
            continue
        k = _pct(r.util_kernel) + (" (unclean)" if r.kernel["unclean"] else "")
        jain = lambda mm: "—" if mm is None else f"{mm['jain_index']:.3f}"  # noqa: E731
        to = m.get("timeouts")
        out.append(
            f"| {r.case.label} | {r.case.data['protocol']['variant']} | {k} | {_pct(r.util_sim)} | {_pct(r.util_ns3)} | "
            f"{_rel(r.util_sim, r.util_kernel)} | {_rel(r.util_ns3, r.util_kernel)} | {jain(m)} | {jain(r.sim)} | "
            f"{jain(r.ns3)} | {m['bottleneck_drops']} | {'—' if to is None else to} | {nearer(r)} |"
        )
    return "\n".join(out) + "\n\n" + kernel_tally(rows)


# ----------------------------------------------------------------------------- traces


def trace_case(name: str) -> None:
    """Prints, per second, each simulator's (and the kernel's, if it ran) mean cwnd, bottleneck
    drops and goodput of one stored case, and draws them (results/ns3/<case>/compare.png)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    folder = RESULTS / name
    resolved = json.loads((folder / "resolved.json").read_text())
    res = json.loads((folder / "ns3.json").read_text())
    ns3 = ns3_trace(res, resolved)
    series = {"ns-3": ns3}
    if (folder / "sim" / "flows.parquet").exists():
        series = {"xferlab": Trace.read(folder / "sim"), **series}
    if (folder / "netns" / "flows.parquet").exists():
        series["kernel"] = Trace.read(folder / "netns")
    fig, axes = plt.subplots(len(series) + 2, 1, figsize=(10, 3 * (len(series) + 2)), sharex=True)
    summary = {}
    for i, (label, tr) in enumerate(series.items()):
        tcp, link, gp = tr.df("tcp"), tr.df("link"), tr.df("goodput")
        for fid, g in tcp.groupby("flow_id"):
            axes[i].plot(g["t"], g["cwnd"], lw=0.8, label=f"flow {fid}")
        axes[i].set_ylabel(f"{label}: cwnd (segments)")
        if tcp["flow_id"].nunique() <= 4:
            axes[i].legend(fontsize=7)
        drops = link[link["drops"] > 0]
        axes[-2].scatter(drops["t"], drops["drops"], s=6, label=label)
        agg = gp.groupby("t")["goodput_mbps"].sum()
        axes[-1].plot(agg.index, agg.values, label=label)
        sec = lambda df: df["t"].astype(float).floordiv(1.0)  # noqa: E731
        summary[label] = pd.DataFrame(
            {
                "cwnd": tcp.groupby(sec(tcp))["cwnd"].mean(),
                "srtt": tcp.groupby(sec(tcp))["srtt_ms"].mean(),
                "drops": link.groupby(sec(link))["drops"].sum(),
                "goodput": gp.groupby(sec(gp))["goodput_mbps"].sum() * resolved["goodput_interval_s"],
            }
        )
    axes[-2].set_ylabel("drops per link interval")
    axes[-1].set_ylabel("aggregate goodput (Mbit/s)")
    axes[-1].set_xlabel("time (s)")
    for ax in axes[-2:]:
        ax.legend()
    fig.suptitle(name)
    fig.tight_layout()
    fig.savefig(folder / "compare.png", dpi=110)
    table_ = pd.concat(summary, axis=1).round(1)
    print(table_.to_string())
    print(f"ns-3 host drops: {res.get('host_drops')}; figure: {folder / 'compare.png'}")


# ----------------------------------------------------------------------------- main


NOTES_FILE = NS3_DIR / "notes.yaml"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("groups", nargs="*", choices=list(GROUPS) + [[]], help="case groups (default: all)")
    ap.add_argument("--quick", action="store_true", help="a short subset (nothing written)")
    ap.add_argument("--jobs", type=int, default=1, help="ns-3 runs at a time (default 1)")
    ap.add_argument("--only", help="run the cases whose name matches this regular expression")
    ap.add_argument("--reuse", action="store_true", help="reuse stored ns-3 results of unchanged scenarios")
    ap.add_argument("--no-write", action="store_true", help="print the table, do not write it")
    ap.add_argument("--trace", metavar="CASE", help="compare cwnd, drops and goodput of one stored case")
    ap.add_argument(
        "--kernel",
        action="store_true",
        help="also run each case on the netns backend (real Linux TCP; root, one case at a time, a quiet machine)",
    )
    ap.add_argument(
        "--ns3-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="diagnostics: one more argument for the ns-3 program (repeatable), e.g. "
        "--ns3-arg=--ns3::TcpSocketState::EnablePacing=true; runs go to results/ns3/<case>+diag, nothing is written",
    )
    args = ap.parse_args()

    if args.trace:
        trace_case(args.trace)
        return 0
    if args.kernel and args.jobs > 1:
        ap.error("--kernel runs one case at a time (the emulation needs the machine to itself): drop --jobs")
    if args.kernel and os.geteuid() != 0:
        ap.error("--kernel needs root (the netns backend builds network namespaces)")
    subprocess.run([str(BUILD), "build"], check=True, stdout=subprocess.DEVNULL)
    cases = [c for g in (args.groups or list(GROUPS)) for c in GROUPS[g](args.quick)]
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.name)]
    t0 = time.perf_counter()
    one = lambda c: run_case(c, args.reuse, tuple(args.ns3_arg), args.kernel)  # noqa: E731
    # One at a time in the main thread (the netns backend stops its emulation cleanly on
    # SIGTERM only there); several ns-3 runs at a time in a pool.
    with ThreadPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else contextlib.nullcontext() as pool:
        rows = []
        for row in pool.map(one, cases) if pool else map(one, cases):
            rows.append(row)
            d = "not simulated" if row.diff is None else f"{100 * row.diff:+.1f} %"
            k = (
                ""
                if row.kernel is None
                else f"  kernel {_pct(row.util_kernel):>8s}" + (" unclean" if row.kernel["unclean"] else "")
            )
            print(
                f"{row.case.name:28s} util xferlab {_pct(row.util_sim):>8s}  ns-3 {_pct(row.util_ns3):>8s}  {d:>14s}{k}"
                f"  (ns-3 {row.ns3_res['wall_s']:.0f} s)",
                flush=True,
            )
    total = time.perf_counter() - t0
    notes = yaml.safe_load(NOTES_FILE.read_text()) if NOTES_FILE.exists() else {}
    table_ = render(rows, notes or {})
    if args.kernel:
        table_ += "\n\nBeside the kernel (`--kernel`: the netns backend, real Linux TCP on this machine, one run per case):\n\n"
        table_ += render_kernel(rows)
    print(table_)
    ns3_wall = sum(r.ns3_res["wall_s"] for r in rows)
    print(f"\n{len(rows)} cases in {total:.0f} s (ns-3 runs: {ns3_wall:.0f} s of CPU)")
    if args.quick or args.no_write or args.only or args.ns3_arg:
        return 0
    version = rows[0].ns3_res["ns3_version"] if rows else "?"
    groups = "".join(f"{g} " for g in args.groups)
    flags = f"--jobs {args.jobs}" + (" --reuse" if args.reuse else "") + (" --kernel" if args.kernel else "")
    cost = f"{len(rows)} cases, {total / 60:.0f} min wall, ns-3 {ns3_wall / 60:.0f} min of CPU"
    if args.reuse:  # ns-3's side may come from results/ns3/ (its CPU time is when it ran)
        cost += " when its stored results were made; unchanged scenarios reuse them" + (
            ", and the kernel's runs" if args.kernel else ""
        )
    body = (
        f"Command: `.venv/bin/python benches/ns3_compare.py {groups}{flags}` ({cost}), "
        f"{time.strftime('%Y-%m-%d')}. ns-3 {version} (the `ns3` wheel from PyPI); machine: {machine()}.\n\n{table_}"
    )
    validation_md.write("ns3", body)  # docs/validation/ns3.md, which VALIDATION.md §4 links to
    return 0


if __name__ == "__main__":
    sys.exit(main())
