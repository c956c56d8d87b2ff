"""Validation of the simulator against theory and against the seeds' published figures.

    .venv/bin/python benches/validate.py [mathis altman table1 table2 ns2 ...] [--quick]
    sudo .venv/bin/python benches/validate.py netns_ns2 netns_variants   # vs real Linux TCP
    sudo .venv/bin/python benches/validate.py --all       # every table of VALIDATION.md, one command
    .venv/bin/python benches/validate.py netns_ns2 netns_variants --sim-only   # the simulator's side only
    .venv/bin/python benches/validate.py --host linux_acks=true   # the tables with a host option (printed only)

Each case runs scenarios through the same engine as `xferlab run` and rewrites its table
between its `<!-- table:NAME -->` markers, in VALIDATION.md or in docs/validation/NAME.md
(`xferlab.fidelity.validation_md`; the prose around them is kept).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml
from xferlab import backends, metrics, models, scenario
from xferlab.campaign import load as load_campaign
from xferlab.campaign import report as creport
from xferlab.campaign import runner
from xferlab.demo import TABLE2_VARIANTS
from xferlab.fidelity import dispersion, runs, validation_md
from xferlab.fidelity.matrix import Case, matrix, select
from xferlab.fidelity.table import table as fidelity_table

ROOT = Path(__file__).resolve().parent.parent

PAPER = yaml.safe_load((ROOT / "python/xferlab/data/seed_results.yaml").read_text())


#: Host options (scenario `host:`) set on every case by --host: an option's effect on the tables.
HOST: dict = {}


def run(data: dict, window=None, backend: str = "sim") -> tuple[dict, dict, float]:
    if HOST:
        data = {**data, "host": {**data.get("host", {}), **HOST}}
    s = scenario.from_dict(data, data.get("name", "validation"))
    r = scenario.resolve(s)
    t0 = time.perf_counter()
    out = backends.get(backend).run(s, r)
    wall = time.perf_counter() - t0
    return metrics.compute(out, window), r, wall


def mathis(quick: bool) -> str:
    rows = [
        "| loss p | Mathis (Mbit/s) | simulated (Mbit/s) | sim / model | timeouts | simulated time | wall |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p, secs in ((1e-3, 600), (1e-4, 1200), (1e-5, 3000)):
        if quick and p < 1e-4:
            continue
        m, r, wall = run(
            {
                "name": f"mathis-{p:g}",
                "topology": {
                    "pairs": 1,
                    "access_rate": "1Gbps",
                    "bottleneck_rate": "1Gbps",
                    "rtt": "100ms",
                    "buffer": "2.0bdp",
                    "loss_rate": p,
                },
                "workload": {"duration": f"{secs}s"},
                "protocol": {"variant": "reno"},
                "measure": {"window": ["20s", f"{secs}s"]},
            }
        )
        model = models.mathis_throughput(r["mss"], r["rtt_s"], p) / 1e6
        g = m["aggregate_goodput_mbps"]
        rows.append(f"| {p:g} | {model:.2f} | {g:.2f} | {g / model:.3f} | {m['timeouts']} | {secs} s | {wall:.1f} s |")
    return "\n".join(rows)


def altman(quick: bool) -> str:
    """Altman's x(N) against the simulator with its Linux 6 host and with the 2006 kernel
    profile (the seeds' era: no SACK compression, no RACK)."""
    rows = [
        "| streams N | Altman x(N) (Mbit/s) | Linux 6 host (Mbit/s) | sim / model | 2006 kernel (Mbit/s) | sim / model |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n in (1, 2, 4) if quick else range(1, 11):
        cells = []
        for kernel in ("linux6", "linux2006"):
            m, r, _ = run(
                {
                    "name": f"altman-{n}",
                    "topology": {"pairs": 1, "access_rate": "10Gbps", "bottleneck_rate": "1Gbps", "rtt": "11.5ms", "buffer": 10},
                    "workload": {"streams": n, "duration": "120s", "start_jitter": "20ms"},
                    "protocol": {"variant": "reno"},
                    "measure": {"window": ["20s", "120s"]},
                    "host": {"kernel": kernel},
                }
            )
            model = models.altman_goodput(n, r["ideal_goodput_mbps"], 0.5)
            g = m["aggregate_goodput_mbps"]
            cells.append(f"{g:.1f} | {g / model:.3f}")
        rows.append(f"| {n} | {model:.1f} | {' | '.join(cells)} |")
    return "\n".join(rows)


def table1(quick: bool) -> str:
    paper = PAPER["parallel_streams_grid5000"]
    rows = [
        "| streams/pair | total goodput, paper | sim | flow mean, paper | sim | Jain, paper | sim | Jain/transfer, paper | sim |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = yaml.safe_load((ROOT / "scenarios/seed002-table1.yaml").read_text())
    for i, n in enumerate(paper["streams_per_node"]):
        if quick and n > 2:
            continue
        for buffer in ("1.0bdp", "0.2bdp"):
            data = yaml.safe_load(yaml.safe_dump(base))
            data["workload"]["streams"] = n
            data["topology"]["buffer"] = buffer
            m, _, _ = run(data)
            label = f"{n} (B = {buffer.replace('bdp', ' BDP')})"
            rows.append(
                f"| {label} | {paper['mean_total_goodput_mbps'][i]:.0f} | {m['aggregate_goodput_mbps']:.0f} | "
                f"{paper['flow_mean_goodput_mbps'][i]:.1f} | {m['mean_flow_goodput_mbps']:.1f} | "
                f"{paper['jain_index_per_stream'][i]:.4f} | {m['jain_index']:.4f} | "
                f"{paper['jain_index_per_transfer'][i]:.4f} | {m['jain_index_per_transfer']:.4f} |"
            )
    return "\n".join(rows)


def table2(quick: bool) -> str:
    """Seed 002 Table II at 1/10 of the rates: 12 × 100 Mbit/s into 1 Gbit/s, the seed's
    procedure (a pair every 200 s, all stop together, 2 800 s), metrics while all 12 are
    active. Same RTTs, flows, and buffer in BDP; windows (BDP in packets) 10× smaller, so
    congestion epochs are 10× shorter and the 600 s window holds several of them."""
    paper = PAPER["variants_vs_rtt_gtrcnet10"]
    rows = [
        "| variant | RTT | buffer | flow mean, paper (of 941) | sim (of 94.1) | Jain, paper | sim | CoV, paper | sim |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, variant in TABLE2_VARIANTS.items():
        for j, rtt in enumerate(paper["rtt_ms"]):
            for buffer in ("1.0bdp", "0.1bdp"):
                if quick and (variant not in ("reno", "cubic") or rtt > 50 or buffer != "0.1bdp"):
                    continue
                m, _, _ = run(
                    {
                        "name": f"table2-{variant}-{rtt}",
                        "topology": {
                            "pairs": 12,
                            "access_rate": "100Mbps",
                            "bottleneck_rate": "1Gbps",
                            "rtt": f"{rtt}ms",
                            "buffer": buffer,
                        },
                        "workload": {
                            "duration": "60s" if quick else "600s",
                            "stagger": "20s" if quick else "200s",
                            "align_end": True,
                            "start_jitter": "10ms",
                        },
                        "protocol": {"variant": variant},
                        "measure": {"window": "all-active"},
                    }
                )
                rows.append(
                    f"| {variant} | {rtt:g} ms | {buffer.replace('bdp', ' BDP')} | "
                    f"{paper['flow_mean_goodput_mbps'][key][j]:.1f} | "
                    f"{m['mean_flow_goodput_mbps']:.1f} | {paper['mean_fairness_jain'][key][j]:.3f} | {m['jain_index']:.3f} | "
                    f"{paper['normalised_std_deviation'][key][j]:.3f} | {m['mean_flow_cov']:.3f} |"
                )
    return "\n".join(rows)


_FULL_RATE: dict = {}


def _full_rate(variant: str, rtt: float, quick: bool, kernel: str = "linux6") -> dict:
    """One §2.3 run (remembered, so that the 2006 table reuses the Linux 6 runs)."""
    key = (variant, rtt, quick, kernel)
    if key not in _FULL_RATE:
        _FULL_RATE[key] = run(
            {
                "name": f"table2-{variant}-{rtt}-{kernel}",
                "topology": {"pairs": 12, "access_rate": "1Gbps", "bottleneck_rate": "10Gbps", "rtt": f"{rtt}ms", "buffer": 1000},
                "workload": {
                    "duration": "60s" if quick else "300s",
                    "stagger": "10s" if quick else "50s",
                    "align_end": True,
                    "start_jitter": "10ms",
                },
                "protocol": {"variant": variant},
                "host": {"kernel": kernel},
                "measure": {"window": "all-active"},
            }
        )[0]
    return _FULL_RATE[key]


def table2_full_rate(quick: bool) -> str:
    """Seed 002 Table II at full rate (12 × 1 Gbit/s into 10 Gbit/s) with a fixed,
    switch-like buffer of 1 000 packets at both RTTs, pairs 50 s apart (the seed: 200 s) and
    a 300 s window with all 12 active (the seed: ~600 s)."""
    paper = PAPER["variants_vs_rtt_gtrcnet10"]
    rows = [
        "| variant | RTT | flow mean, paper | sim | Jain, paper | sim | CoV, paper | sim |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, variant in TABLE2_VARIANTS.items():
        for j, rtt in enumerate(paper["rtt_ms"]):
            if quick and variant not in ("reno", "cubic"):
                continue
            m = _full_rate(variant, rtt, quick)
            rows.append(
                f"| {variant} | {rtt:g} ms | {paper['flow_mean_goodput_mbps'][key][j]:.1f} | {m['mean_flow_goodput_mbps']:.1f} | "
                f"{paper['mean_fairness_jain'][key][j]:.3f} | {m['jain_index']:.3f} | "
                f"{paper['normalised_std_deviation'][key][j]:.3f} | {m['mean_flow_cov']:.3f} |"
            )
    return "\n".join(rows)


def ns2(quick: bool) -> str:
    rows = [
        "| buffer (packets) | aggregate goodput (Mbit/s) | efficiency G/C | Jain | drops | mean flow CoV | wall |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = yaml.safe_load((ROOT / "scenarios/seed004-ns2.yaml").read_text())
    for buffer in (170, 17000):
        data = yaml.safe_load(yaml.safe_dump(base))
        data["topology"]["buffer"] = buffer
        if quick:
            data["workload"]["duration"] = "30s"
        m, _, wall = run(data)
        rows.append(
            f"| {buffer} | {m['aggregate_goodput_mbps']:.0f} | {m['efficiency']:.3f} | {m['jain_index']:.4f} | "
            f"{m['bottleneck_drops']} | {m['mean_flow_cov']:.3f} | {wall:.1f} s |"
        )
    return "\n".join(rows)


def _ifs(rtt_ms: float, kernel: str, seed: int, scale: float) -> float:
    """Seed 001's IFS: two BIC transfers (15 and 30 GB × scale) start together on a 1 Gbit/s
    bottleneck with a 100-packet buffer; the makespan deficiency against (v1 + v2) / r_TP."""
    v = int(15e9 * scale)
    m, _, _ = run(
        {
            "name": f"seed001-ifs-{rtt_ms:g}ms-{kernel}-{seed}",
            "topology": {"pairs": 2, "access_rate": "1Gbps", "bottleneck_rate": "1Gbps", "rtt": f"{rtt_ms}ms", "buffer": 100},
            "workload": {"volume": v, "per_pair": [{}, {"volume": 2 * v}]},
            "protocol": {"variant": "bic"},
            "host": {"kernel": kernel},
            "measure": {"goodput_interval": "1s", "link_interval": "1s", "tcp_interval": "1s"},
            "seed": seed,
        }
    )
    return 100 * m["completion"]["makespan_deficiency"]


def seed001_ifs(quick: bool) -> str:
    """Seed 001 Table 2, IFS, on both sender models: mean and worst deficiency over seeds."""
    scale, seeds = (0.02, 3) if quick else (0.1, 10)
    rows = [
        "| RTT | paper mean (p99) | Linux 6 sender: mean (max) | 2006 sender: mean (max) |",
        "|---:|---:|---:|---:|",
    ]
    paper = PAPER["flow_scheduling_1gbe"]
    for j, rtt in enumerate(paper["rtt_ms"]):
        mean, p99 = paper["mean_completion_deficiency_pct"]["ifs"][j], paper["p99_completion_deficiency_pct"]["ifs"][j]
        cells = [f"{rtt:g} ms", f"{mean:.1f} % ({p99:.1f} %)"]
        for kernel in ("linux6", "linux2006"):
            d = [_ifs(rtt, kernel, k, scale) for k in range(1, seeds + 1)]
            cells.append(f"{sum(d) / len(d):.1f} % ({max(d):.1f} %)")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


#: Seed 001's strategies as the shipped campaign labels them → seed_results.yaml's keys.
SEED001_LABELS = {"IFS": "ifs", "ViFi": "vifi", "SS (pacing)": "ss_pspacer", "SS (token bucket)": "ss_htb"}


def seed001_tables(quick: bool) -> str:
    """Seed 001 Tables 2 and 3: scenarios/campaigns/seed001-tables.yaml on the simulator
    (full volumes), run into results/seed001-tables-REPS/ (resumable: a rerun finishes it), the
    deficiency of the mean and of the 99th percentile makespan beside the seed's."""
    reps = 2 if quick else SEED001_REPETITIONS
    camp = load_campaign(ROOT / "scenarios/campaigns/seed001-tables.yaml", {"repetitions": reps})
    out = ROOT / "results" / ("seed001-tables-quick" if quick else f"seed001-tables-{reps}")
    runner.run(camp, out, workers=2)
    manifest, df = creport.load(out)
    ok = df[df["status"] == "ok"].copy()
    axes = creport.axes_of(manifest, ok)
    t = creport.makespan_table(ok, axes)
    paper = PAPER["flow_scheduling_1gbe"]
    rows = [
        "| strategy | RTT | runs | Table 2 (mean), paper | sim | Table 3 (p99), paper | sim | σ (s) | slot for 99 % (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, key in SEED001_LABELS.items():
        for j, rtt in enumerate(paper["rtt_ms"]):
            r = t[(t["axis:schedule"] == label) & (t["rtt_ms"].round(3) == round(rtt, 3))]
            if r.empty:
                continue
            r = r.iloc[0]
            rows.append(
                f"| {label} | {rtt:g} ms | {r['runs']:.0f} | {paper['mean_completion_deficiency_pct'][key][j]:.1f} % "
                f"| {100 * r['mean_deficiency']:.1f} % | {paper['p99_completion_deficiency_pct'][key][j]:.1f} % "
                f"| {100 * r['p99_deficiency']:.1f} % | {r['std_s']:.2f} | {r['slot_p99_s']:.1f} |"
            )
    return "\n".join(rows)


def table2_2006(quick: bool) -> str:
    """§2.4: §2.3's full-rate runs with the 2006 sender beside the Linux 6 one."""
    paper = PAPER["variants_vs_rtt_gtrcnet10"]
    rows = [
        "| variant | RTT | flow mean, paper | Linux 6 | 2006 | Jain, paper | Linux 6 | 2006 | CoV, paper | Linux 6 | 2006 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, variant in TABLE2_VARIANTS.items():
        for j, rtt in enumerate(paper["rtt_ms"]):
            if quick and variant not in ("reno", "cubic"):
                continue
            a, b = (_full_rate(variant, rtt, quick, k) for k in ("linux6", "linux2006"))
            rows.append(
                f"| {variant} | {rtt:g} ms | {paper['flow_mean_goodput_mbps'][key][j]:.1f} | "
                f"{a['mean_flow_goodput_mbps']:.1f} | {b['mean_flow_goodput_mbps']:.1f} | "
                f"{paper['mean_fairness_jain'][key][j]:.3f} | {a['jain_index']:.3f} | {b['jain_index']:.3f} | "
                f"{paper['normalised_std_deviation'][key][j]:.3f} | {a['mean_flow_cov']:.3f} | {b['mean_flow_cov']:.3f} |"
            )
    return "\n".join(rows)


#: Set by --sim-only: the netns rows of a sim-vs-netns table are kept from the stored table (the
#: kernel's side does not change with the simulator) and only the simulator's side reruns.
SIM_ONLY = False


def _stored_netns_row(table: str, label: str) -> list[str]:
    """The cells of the netns row for `label` in the current `table` (validation_md.read)."""
    try:
        block = validation_md.read(table)
    except ValueError:
        block = ""
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] == [label, "netns"]:
            return cells
    raise SystemExit(f"--sim-only: no stored netns row for {label!r} in the {table} table")


def _sim_vs_netns(rows: list[str], label: str, data: dict, table: str) -> None:
    m, _, wall = run(data, backend="sim")
    rows.append(
        f"| {label} | sim | {m['aggregate_goodput_mbps']:.1f} | {m['jain_index']:.4f} | {m['mean_flow_cov']:.3f} | "
        f"{m['retransmissions']} | {m['bottleneck_drops']} | {wall:.1f} s |"
    )
    if SIM_ONLY:
        cells = _stored_netns_row(table, label)
        rows.append("| " + " | ".join(cells) + " |")
        kernel = float(cells[2])
    else:
        k, _, wall = run(data, backend="netns")
        kernel = k["aggregate_goodput_mbps"]
        rows.append(
            f"| {label} | netns | {kernel:.1f} | {k['jain_index']:.4f} | {k['mean_flow_cov']:.3f} | "
            f"{k['retransmissions']} | {k['bottleneck_drops']} | {wall:.1f} s |"
        )
    a = m["aggregate_goodput_mbps"]
    rows.append(f"| {label} | netns − sim | {100 * (kernel - a) / a:+.1f} % | | | | | |")


_HEADER = [
    "| case | backend | aggregate goodput (Mbit/s) | Jain | mean flow CoV | retransmissions | drops | wall |",
    "|---|---|---:|---:|---:|---:|---:|---:|",
]


def netns_ns2(quick: bool) -> str:
    """Seed 004's NS-2 vs NXE comparison, reduced to what this host emulates (simulator vs netns)."""
    rows = list(_HEADER)
    base = yaml.safe_load((ROOT / "scenarios/seed004-ns2-reduced.yaml").read_text())
    for buffer in (170, "1.0bdp"):
        data = yaml.safe_load(yaml.safe_dump(base))
        data["topology"]["buffer"] = buffer
        if quick:
            data["workload"]["duration"] = "10s"
        _sim_vs_netns(rows, f"B = {buffer}", data, "netns_ns2")
    return "\n".join(rows)


def netns_variants(quick: bool) -> str:
    """The six seed variants on both backends: 2 pairs, 200 Mbit/s, 40 ms, 0.5 BDP, 30 s."""
    rows = list(_HEADER)
    for variant in TABLE2_VARIANTS.values():
        data = {
            "name": f"variants-{variant}",
            "topology": {"pairs": 2, "access_rate": "200Mbps", "bottleneck_rate": "200Mbps", "rtt": "40ms", "buffer": "0.5bdp"},
            "workload": {"streams": 1, "duration": "10s" if quick else "30s"},
            "protocol": {"variant": variant},
            "measure": {"goodput_interval": "0.5s", "link_interval": "100ms"},
            "seed": 1,
        }
        _sim_vs_netns(rows, variant, data, "netns_variants")
    return "\n".join(rows)


def netns_fidelity(quick: bool) -> str:
    """benches/fidelity.py's matrix (stored cases are reused; see its --force)."""
    cases = select(matrix(), ["reno:50", "cubic:50"] if quick else [])
    return fidelity_table([runs.run_case(c) for c in cases])


def netns_dispersion(quick: bool) -> str:
    """Run-to-run spread of completion times, netns against the simulator's host noise."""
    keys = ["reno:50:1.0bdp:1"] if quick else ["reno:50:1.0bdp:1", "cubic:10:0.2bdp:4"]
    return "\n\n".join(dispersion.dispersion(Case.from_key(key), 3 if quick else 10) for key in keys)


CASES = {
    "mathis": mathis,
    "altman": altman,
    "table1": table1,
    "table2": table2,
    "table2_full_rate": table2_full_rate,
    "ns2": ns2,
    "table2_2006": table2_2006,
    "seed001_ifs": seed001_ifs,
    "seed001_tables": seed001_tables,
    "netns_ns2": netns_ns2,
    "netns_variants": netns_variants,
    "netns_fidelity": netns_fidelity,
    "netns_dispersion": netns_dispersion,
}


#: What runs by default: the simulator cases (the netns ones need root and real time).
#: Repetitions per point of seed001_tables (the seed: 100; about 25 s of wall time per run).
SEED001_REPETITIONS = 30
#: Cases that need root (netns) or long campaigns: run by name, or with --all.
SIM_CASES = [c for c in CASES if not c.startswith("netns") and c != "seed001_tables"]
#: What --all runs: every table VALIDATION.md and docs/validation/ show. netns_fidelity and
#: netns_dispersion are run by name only: the matrix's table (§3.2) and its spreads are
#: benches/fidelity.py's, which `make validation` runs after this script.
ALL_CASES = [c for c in CASES if c not in ("netns_fidelity", "netns_dispersion")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", default=[], choices=list(CASES) + [[]])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter cases (no file written)")
    ap.add_argument("--all", action="store_true", help="every table, the netns ones included (root; hours)")
    ap.add_argument(
        "--sim-only",
        action="store_true",
        help="netns_ns2/netns_variants: rerun the simulator's side only, keep the stored kernel rows",
    )
    ap.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a host option (scenario host:) on every case, e.g. linux_acks=true; tables printed, not written",
    )
    args = ap.parse_args()
    global SIM_ONLY
    SIM_ONLY = args.sim_only
    try:
        HOST.update({k: yaml.safe_load(v) for k, v in (h.split("=", 1) for h in args.host)})
    except ValueError:
        ap.error("--host takes KEY=VALUE, e.g. linux_acks=true")
    for name in ALL_CASES if args.all else args.cases or SIM_CASES:
        t0 = time.perf_counter()
        table = CASES[name](args.quick)
        print(f"## {name} ({time.perf_counter() - t0:.0f} s)\n{table}\n", flush=True)
        if not args.quick and not HOST:
            validation_md.write(name, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
