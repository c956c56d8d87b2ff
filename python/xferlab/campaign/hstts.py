"""Seed 004's user-oriented benchmark (HSTTS): completion times of file transfers under
congestion and reverse traffic, for a candidate variant beside the reference, Reno.

Seed 004 ("Benchmark orienté utilisateur"): 3000 MB files sent at once by up to 42
independent sources; RTT 0–200 ms, bottleneck C = 1 or 10 Gbit/s with aggregation level
K = C/Ca = 1 or 10, congestion level Cg = sources × Ca / C and reverse traffic level R from
0 to 2.0; the result sheet gives, beside the reference, the mean completion time
T̄ = (1/N) Σ T_i, its standard deviation σ_T, the Jain index over the completion times and
the efficiency E = G/C (its example: 19.8 ms RTT, Cg = 1.0, R = 1.0, reference Reno).

Scaled for the simulator: K = 10 with every rate divided by 10 (Ca = 100 Mbit/s,
C = 1 Gbit/s) and the files too (300 MB), so that a lone transfer lasts as long as the
seed's (about 25 s) over the same RTTs, in a tenth of the packets. The grid is
RTT ∈ {19.8, 100} ms × Cg ∈ {0.5, 1.0, 1.5} × R ∈ {0, 1.0}: 12 scenarios, each with the
candidate and with Reno, repeated with different seeds. ``--quick`` keeps RTT 19.8 ms,
Cg 1.0, R ∈ {0, 1.0} with 30 MB files (a first look, and the tests).
"""

from __future__ import annotations

import csv
import html
import io
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
from rich.table import Table

from .. import registry
from ..report import CSS, img, plt, png
from ..variants import canonical as canonical_variant
from .report import load, mean_ci
from .spec import Campaign, CampaignError, from_dict

REFERENCE = "reno"
RTTS = ["19.8ms", "100ms"]
CONGESTION = [0.5, 1.0, 1.5]
REVERSE = [0.0, 1.0]

SCENARIO = {
    "name": "hstts",
    "description": "Seed 004's user-oriented benchmark, rates and volumes scaled by 1/10 (K = C/Ca = 10).",
    "topology": {"access_rate": "100Mbps", "bottleneck_rate": "1Gbps", "rtt": "19.8ms", "buffer": "1.0bdp", "mtu": 1500},
    "workload": {"streams": 1, "volume": "300MB", "congestion_level": 1.0, "reverse": 0.0, "start_jitter": "10ms"},
    "protocol": {"variant": "reno"},
    "seed": 4,
}


def campaign(candidates: list[str], backend: str = "sim", repetitions: int = 3, quick: bool = False) -> Campaign:
    """The HSTTS campaign: the grid for Reno and each candidate."""
    variants = [REFERENCE]
    for v in candidates:
        for name in str(v).split(","):
            if not name.strip():
                continue
            try:
                c = canonical_variant(name)
            except ValueError as e:
                raise CampaignError(f"--variant: {e}") from None
            if c not in variants:
                variants.append(c)
    data = {
        "name": "hstts-quick" if quick else "hstts",
        "description": __doc__.split("\n\n")[0].replace("\n", " "),
        "scenario": SCENARIO,
        "set": {"workload.volume": "30MB"} if quick else {},
        "sweep": {
            "protocol.variant": variants,
            "topology.rtt": RTTS[:1] if quick else RTTS,
            "workload.congestion_level": [1.0] if quick else CONGESTION,
            "workload.reverse": REVERSE,
        },
        "repetitions": repetitions,
        "backend": backend,
    }
    return from_dict(data, "hstts")


#: The sheet's measures (registry keys; the catalog's columns hold them): seed 004's T̄, σ_T,
#: Jain over the completion times and the efficiency E = G/C.
MEASURES = ["completion.mean_s", "completion.std_s", "completion.jain_index", "efficiency"]


def _col(key: str) -> str:
    return registry.METRICS[key].catalog_column


def sheet(folder: Path) -> pd.DataFrame:
    """One row per scenario and candidate: each measure (mean ± 95 % CI over repetitions) beside Reno's."""
    folder = Path(folder)
    manifest, df = load(folder)
    ok = df[df["status"] == "ok"]
    if ok.empty:
        raise CampaignError(f"{folder}: no successful run to put on the sheet")
    keys = ["rtt_ms", "congestion_level", "reverse_level"]
    rows = []
    candidates = [v for v in manifest["sweep"]["protocol.variant"] if v != REFERENCE] or [REFERENCE]
    for scen, g in ok.groupby(keys, sort=True):
        ref = g[g["variant"] == REFERENCE]
        for v in candidates:
            cand = g[g["variant"] == v]
            row = dict(zip(keys, scen, strict=True))
            row["pairs"] = int(g["pairs"].iloc[0])
            row["variant"] = v
            row["runs"] = len(cand)
            row["incomplete"] = int(cand["completion_incomplete"].fillna(0).sum() + ref["completion_incomplete"].fillna(0).sum())
            for col in map(_col, MEASURES):
                row[col], row[col + "_ci"], _n = mean_ci(cand[col])
                row[col + "_ref"], row[col + "_ref_ci"], _n = mean_ci(ref[col])
            t, tr = row["completion_mean_s"], row["completion_mean_s_ref"]
            row["time_ratio"] = t / tr if tr and not math.isnan(t) else math.nan
            rows.append(row)
    out = pd.DataFrame(rows)
    _write(folder, manifest, out)
    return out


def _pm(key: str, v, ci) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return registry.format_ci(key, v, ci)


def _ratio(v) -> str:
    return "—" if v is None or math.isnan(v) else f"{v:.3f}"


def _label(key: str) -> str:
    return registry.METRICS[key].heading()


def fig_sheet(table: pd.DataFrame) -> bytes:
    """Seed 004's result graph: per scenario, the candidate's mean completion time beside the
    reference's (mean ± 95 % CI), one panel per candidate."""
    cands = list(dict.fromkeys(table["variant"]))
    fig, axs = plt.subplots(
        len(cands), 1, figsize=(max(6.5, 0.55 * len(table) / max(1, len(cands)) + 3), 3.2 * len(cands)), squeeze=False
    )
    col = _col("completion.mean_s")
    for ax, v in zip(axs[:, 0], cands, strict=True):
        t = table[table["variant"] == v].reset_index(drop=True)
        x = np.arange(len(t))
        for offset, (suffix, name, color) in ((-0.2, ("", v, "C0")), (0.2, ("_ref", REFERENCE, "0.55"))):
            ax.bar(
                x + offset,
                t[col + suffix],
                width=0.38,
                yerr=t[col + suffix + "_ci"].fillna(0),
                capsize=2,
                color=color,
                label=name,
            )
        labels = [f"{r.rtt_ms:g} ms\nCg {r.congestion_level:g}\nR {r.reverse_level:g}" for r in t.itertuples()]
        ax.set_xticks(x, labels, fontsize=7)
        ax.set_ylabel(_label("completion.mean_s"))
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left")
        ax.set_title(f"{v} beside {REFERENCE}: mean completion time per scenario (mean ± 95 % CI)", fontsize=9)
    fig.tight_layout()
    return png(fig)


def _write(folder: Path, manifest: dict, table: pd.DataFrame) -> None:
    buf = io.StringIO()
    w = csv.writer(buf)
    cols = ["rtt_ms", "congestion_level", "reverse_level", "pairs", "variant", "runs"]
    meas = [_col(k) for k in MEASURES]
    w.writerow(cols + [x for c in meas for x in (c, c + "_ci", c + "_ref", c + "_ref_ci")] + ["time_ratio", "incomplete"])
    for _, r in table.iterrows():
        w.writerow([r[c] for c in cols] + [r[x] for c in meas for x in (c, c + "_ci", c + "_ref", c + "_ref_ci")]
                   + [r["time_ratio"], r["incomplete"]])  # fmt: skip
    _atomic(folder / "hstts.csv", buf.getvalue())

    head = "<tr><th>RTT (ms)</th><th>Cg</th><th>R</th><th>sources</th><th>variant</th>"
    head += "".join(f"<th>{html.escape(_label(k))}</th><th>Reno</th>" for k in MEASURES) + "<th>T̄ / T̄ Reno</th></tr>"
    body = ""
    for _, r in table.iterrows():
        body += (
            f"<tr><td>{r['rtt_ms']:g}</td><td>{r['congestion_level']:g}</td><td>{r['reverse_level']:g}</td>"
            f"<td>{r['pairs']}</td><td>{html.escape(r['variant'])}</td>"
        )
        for k in MEASURES:
            c = _col(k)
            body += f"<td>{_pm(k, r[c], r[c + '_ci'])}</td><td>{_pm(k, r[c + '_ref'], r[c + '_ref_ci'])}</td>"
        body += f"<td><b>{_ratio(r['time_ratio'])}</b></td></tr>"
    reps = manifest.get("repetitions")
    incomplete = int(table["incomplete"].sum())
    doc = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>xferlab — HSTTS sheet</title><style>{CSS}</style></head><body>",
        "<h1>HSTTS result sheet</h1>",
        "<p>Seed 004's user-oriented benchmark on the <b>" + html.escape(manifest.get("backend", "")) + "</b> backend: "
        "every source sends one file at once through a shared bottleneck; the sheet gives the candidate's mean completion "
        "time T̄, its standard deviation σ_T, the Jain index over completion times and the efficiency E = G/C, each beside "
        f"the reference (Reno), as mean ± 95 % CI over {reps} repetition(s) (different seeds). T̄ / T̄ Reno below 1: the "
        "candidate finishes sooner.</p>",
        "<p class=muted>Scaled by 1/10 from the seed (Ca = 100 Mbit/s, C = 1 Gbit/s, K = 10, 300 MB files instead of "
        "3000 MB; 30 MB with --quick): a lone transfer lasts about as long as the seed's, over the same RTTs. "
        "Buffer: one BDP. Sources = Cg × C / Ca; R × C / Ca reverse sources send from the receivers' side all along.</p>",
    ]
    if incomplete:
        doc.append(f"<p class=warn>{incomplete} transfer(s) did not complete: their times are left out.</p>")
    doc += [f'<div style="overflow-x:auto"><table class=sheet><thead>{head}</thead><tbody>{body}</tbody></table></div>']
    doc += [
        "<h2>Result graph</h2>",
        img(folder, "hstts", fig_sheet(table), "candidate beside Reno per scenario"),
        "</body></html>",
    ]
    _atomic(folder / "hstts.html", "".join(doc))
    _atomic(folder / "hstts.md", markdown(table, manifest))


def markdown(table: pd.DataFrame, manifest: dict) -> str:
    """The sheet as a Markdown table (mean over repetitions; ± the 95 % CI half-width)."""
    labels = " | ".join(f"{_label(k)} | Reno" for k in MEASURES)
    lines = [
        f"| RTT (ms) | Cg | R | sources | variant | {labels} | T̄ / T̄ Reno |",
        "|" + "---:|" * 4 + "---|" + "---:|" * (2 * len(MEASURES) + 1),
    ]
    for _, r in table.iterrows():
        cells = [f"{r['rtt_ms']:g}", f"{r['congestion_level']:g}", f"{r['reverse_level']:g}", str(r["pairs"]), r["variant"]]
        for k in MEASURES:
            c = _col(k)
            cells += [_pm(k, r[c], r[c + "_ci"]), _pm(k, r[c + "_ref"], r[c + "_ref_ci"])]
        cells.append(f"**{_ratio(r['time_ratio'])}**")
        lines.append("| " + " | ".join(cells) + " |")
    note = f"{manifest.get('repetitions')} repetition(s) per scenario and variant, {manifest.get('backend')} backend."
    if int(table["incomplete"].sum()):
        note += f" {int(table['incomplete'].sum())} transfer(s) did not complete and are left out."
    return "\n".join(lines) + "\n\n" + note + "\n"


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def print_sheet(table: pd.DataFrame, console) -> None:
    t = Table(title="HSTTS: candidate beside Reno (mean over repetitions)", header_style="bold")
    for label in ("RTT ms", "Cg", "R", "variant", "T̄ s", "Reno", "σ_T s", "Reno", "J(T)", "Reno", "E", "Reno", "T̄/Reno"):
        t.add_column(label, justify="right")
    for _, r in table.iterrows():
        cells = [f"{r['rtt_ms']:g}", f"{r['congestion_level']:g}", f"{r['reverse_level']:g}", r["variant"]]
        for k in MEASURES:
            c = _col(k)
            cells += [registry.fmt(k, r[c]), registry.fmt(k, r[c + "_ref"])]
        cells.append(_ratio(r["time_ratio"]))
        t.add_row(*cells)
    console.print(t)
