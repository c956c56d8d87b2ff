"""One record per metric: its key, label, unit, format, definition, source and valid range.

:mod:`xferlab.metrics` computes the values; the run report, ``xferlab compare``, the CLI
summary, the campaign catalog (one column per run metric), the campaign report and the
HSTTS sheet take labels, units, formats and ranges from here, and nowhere else.

Keys are paths in ``metrics.json``: ``aggregate_goodput_mbps`` at the top level,
``completion.p99_s`` inside ``completion``; ``flows[].…`` and ``transfers[].…`` metrics are
per flow and per transfer (``scope``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: δ of delta-fair convergence: every transfer within ±δ of the fair share.
DELTA_FAIR = 0.2
#: Fraction of the fair share of the BDP a window must reach for the convergence speed.
CONVERGENCE_SHARE = 0.8
#: Relative deviation of X(t) from its mean beyond which the aggregate has not settled (R̄_X).
SETTLED = 0.1


class MetricsError(Exception):
    """The metrics cannot be computed as asked (e.g. an empty window). Here, beside the
    metrics' records, so that a command can catch it without importing the computation
    (pandas)."""


@dataclass(frozen=True)
class Metric:
    key: str  # path in metrics.json (dots into nested objects)
    label: str  # words, for tables and axes
    unit: str  # "Mbit/s", "s", "ms", "packets", "segments", "RTT", "" (a ratio)
    digits: int  # significant digits shown
    definition: str  # the formula, in the seed's notation
    source: str  # where it comes from
    scope: str = "run"  # run | flow | transfer
    lo: float | None = None  # valid range: error bars and axes are clipped to it
    hi: float | None = None
    integer: bool = False
    column: str | None = None  # the catalog's column (run metrics); default: the key with _ for .
    symbol: str = ""

    @property
    def catalog_column(self) -> str:
        return self.column or self.key.replace(".", "_")

    def heading(self) -> str:
        """``label (unit)``, as tables and axes show it."""
        return f"{self.label} ({self.unit})" if self.unit else self.label

    def format(self, value) -> str:
        """The value as a reader should see it: its significant digits, thousands apart,
        no exponent for ordinary magnitudes; "—" when unknown."""
        return format_value(value, self.digits, self.integer)


def format_value(value, digits: int = 4, integer: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if integer or (isinstance(value, int) and abs(value) >= 1):
        return f"{round(value):,}".replace(",", " ")
    a = abs(value)
    if a == 0:
        return "0"
    if a >= 10**digits or a < 1e-4:
        return f"{value:.{max(1, digits - 1)}e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(a)))
    text = f"{value:,.{decimals}f}".replace(",", " ")
    return text


def format_ci(key: str, value, ci) -> str:
    """``mean ± half-width``: the half-width with as many decimals as the mean shows (``0.9998 ±
    0.0001``, ``< 0.0001`` when it rounds to nothing), never in an exponent beside a plain mean."""
    m = METRICS[key]
    text = m.format(value)
    if ci is None or (isinstance(ci, float) and not math.isfinite(ci)) or value is None:
        return text
    decimals = len(text.split(".")[1]) if "." in text and "e" not in text else 0
    step = 10.0**-decimals
    return f"{text} ± {'< ' + format(step, f'.{decimals}f') if ci < step / 2 else format(ci, f',.{decimals}f').replace(',', ' ')}"


def _m(key, label, unit, digits, definition, source, **kw) -> Metric:
    return Metric(key, label, unit, digits, definition, source, **kw)


S002 = "seed 002 §II-C"
S004 = "seed 004, metrics table (TMRG, RFC 5166)"
S001 = "seed 001 §4.2"

METRICS: dict[str, Metric] = {
    m.key: m
    for m in (
        # ---------------------------------------------------------------- throughput
        _m("aggregate_goodput_mbps", "aggregate goodput G", "Mbit/s", 4, "G = mean over t of Σ_i g_i(t)", S004, lo=0, symbol="G"),
        _m("aggregate_goodput_std_mbps", "aggregate goodput σ", "Mbit/s", 3, "σ of Σ_i g_i(t) over t", S002, lo=0),
        _m("aggregate_goodput_cov", "aggregate goodput CoV", "", 3, "σ(G(t)) / G", S004, lo=0),
        _m(
            "aggregate_throughput_mbps",
            "bottleneck throughput X",
            "Mbit/s",
            4,
            "X = mean over t of Σ_i x_i(t), IP bytes at the bottleneck",
            S004,
            lo=0,
            symbol="X",
        ),
        _m(
            "ideal_goodput_mbps",
            "ideal goodput r_TP",
            "Mbit/s",
            5,
            "transport payload rate of the ideal transport through the narrowest of bottleneck and access links",
            "seed 001 §3.3",
            lo=0,
        ),
        _m("efficiency", "link efficiency G/C", "", 3, "G / C, C the bottleneck's capacity", "seed 004 §benchmark", lo=0, hi=1),
        _m("goodput_over_throughput", "efficiency E = G/X", "", 3, "E = G / X", S004, lo=0, hi=1, symbol="E"),
        _m("deficiency", "deficiency 1 − G/r_TP", "", 3, "1 − G / r_TP", "seed 001 §4.2", hi=1),
        # ---------------------------------------------------------------- fairness, stability
        _m(
            "jain_index",
            "Jain index (per stream)",
            "",
            4,
            "J = (Σ ḡ_i)² / (N Σ ḡ_i²) over the streams",
            S002,
            lo=0,
            hi=1,
            symbol="J",
        ),
        _m(
            "jain_index_per_transfer",
            "Jain index (per transfer)",
            "",
            4,
            "J over the transfers (a pair's streams summed)",
            "seed 004 §benchmark",
            lo=0,
            hi=1,
        ),
        _m("mean_flow_goodput_mbps", "mean flow goodput", "Mbit/s", 4, "mean over i of ḡ_i", S002, lo=0),
        _m(
            "mean_flow_std_mbps",
            "mean flow goodput σ",
            "Mbit/s",
            3,
            "mean over i of σ_i = √((1/T_i) Σ_t (g_i(t) − ḡ_i)²)",
            S004,
            lo=0,
        ),
        _m("mean_flow_cov", "mean flow CoV", "", 3, "mean over i of CoV_i = σ_i / ḡ_i", S004, lo=0),
        _m(
            "smoothness_mbps",
            "throughput smoothness S",
            "Mbit/s",
            3,
            "S = max_i max_t (g_i(t) − g_i(t + δt)): the largest drop between consecutive goodput samples",
            S004,
            lo=0,
            symbol="S",
        ),
        _m(
            "delta_fair_convergence_s",
            f"δ-fair convergence time (δ = {DELTA_FAIR:g})",
            "s",
            3,
            "from the last transfer's start to the first goodput interval where every transfer is within "
            f"±{DELTA_FAIR:g} of the fair share Σ g / N",
            "seed 004, metrics by point of view (RFC 5166 §2.3.2)",
            lo=0,
        ),
        # ---------------------------------------------------------------- reactivity, convergence
        _m(
            "responsiveness_rtt",
            "responsiveness R",
            "RTT",
            3,
            "R = ln ½ / ln β̄: round trips of sustained congestion after which a flow's rate has halved, β̄ the "
            "mean multiplicative decrease measured at its congestion events (ssthresh / cwnd before, or the window's "
            "drop when ssthresh is unknown); mean over flows",
            S004,
            lo=0,
            symbol="R",
        ),
        _m(
            "average_responsiveness_s",
            "average responsiveness R̄_X",
            "s",
            3,
            f"R̄_X = max t such that |X(t) − X̄| / X̄ > {SETTLED:g}, from the window's start: when the aggregate has settled",
            S004,
            lo=0,
        ),
        _m(
            "aggressiveness_mbps",
            "aggressiveness A",
            "Mbit/s per RTT",
            3,
            "A = max_i max_t (x_i(t + RTT) − x_i(t)), x_i = cwnd·MSS/RTT from the sender's samples "
            "(the mean growth per RTT when samples are further apart)",
            S004,
            lo=0,
            symbol="A",
        ),
        _m(
            "convergence_rtt",
            "convergence speed s_cwnd",
            "RTT",
            3,
            f"s = min u such that cwnd_i(start + u·RTT) ≥ {CONVERGENCE_SHARE:g} × BDP / N "
            "(the flow's share of the BDP); mean over the flows that reach it",
            S004,
            lo=0,
            symbol="s",
        ),
        # ---------------------------------------------------------------- loss and delay
        _m(
            "retransmissions",
            "retransmitted segments",
            "segments",
            4,
            "Σ_i retransmitted segments",
            S004,
            lo=0,
            integer=True,
            symbol="r",
        ),
        _m("timeouts", "retransmission timeouts", "", 4, "Σ_i retransmission timeouts", S004, lo=0, integer=True, symbol="t"),
        _m(
            "bottleneck_drops",
            "bottleneck drops",
            "packets",
            4,
            "packets dropped by the full bottleneck queue",
            S002,
            lo=0,
            integer=True,
        ),
        _m(
            "bottleneck_losses",
            "bottleneck random losses",
            "packets",
            4,
            "packets lost at random on the bottleneck",
            S002,
            lo=0,
            integer=True,
        ),
        _m(
            "retransmissions_beyond_drops",
            "retransmissions beyond the bottleneck's drops",
            "segments",
            4,
            "max(0, r − bottleneck drops): packets lost elsewhere on the path, or retransmitted without being lost",
            "xferlab (real paths: loss the bottleneck does not see)",
            lo=0,
            integer=True,
        ),
        _m(
            "packet_loss_rate",
            "packet loss rate p",
            "",
            3,
            "p = (drops + losses) / packets offered to the bottleneck",
            S004,
            lo=0,
            hi=1,
            symbol="p",
        ),
        _m(
            "bottleneck_max_queue_pkts",
            "largest bottleneck queue",
            "packets",
            4,
            "max over t of the bottleneck queue",
            S002,
            lo=0,
            integer=True,
        ),
        _m(
            "queueing_delay_ms",
            "queueing delay q",
            "ms",
            3,
            "q = mean over t of queue(t) × (MTU + 38) × 8 / C",
            S004,
            lo=0,
            symbol="q",
        ),
        _m(
            "queueing_delay_max_ms",
            "largest queueing delay",
            "ms",
            3,
            "max over t of queue_max(t) × (MTU + 38) × 8 / C",
            S004,
            lo=0,
        ),
        _m(
            "reverse_goodput_mbps",
            "reverse traffic goodput",
            "Mbit/s",
            4,
            "aggregate goodput of the reverse sources",
            "seed 004 §workload (R)",
            lo=0,
        ),
        # ---------------------------------------------------------------- completion times
        _m(
            "completion.count",
            "transfers completed",
            "",
            4,
            "transfers that moved their whole volume",
            S001,
            lo=0,
            integer=True,
            column="completion_count",
        ),
        _m(
            "completion.incomplete",
            "transfers not completed",
            "",
            4,
            "transfers still moving when the run ended",
            S001,
            lo=0,
            integer=True,
            column="completion_incomplete",
        ),
        _m(
            "completion.mean_s",
            "mean completion time T̄",
            "s",
            4,
            "T̄ = (1/N) Σ T_i",
            "seed 004 §benchmark",
            lo=0,
            column="completion_mean_s",
            symbol="T",
        ),
        _m(
            "completion.std_s",
            "completion time σ_T",
            "s",
            3,
            "σ_T over the transfers (population form)",
            "seed 004 §benchmark",
            lo=0,
            column="completion_std_s",
        ),
        _m(
            "completion.p50_s",
            "completion time p50",
            "s",
            4,
            "median of T_i",
            "seed 001 fig. 12",
            lo=0,
            column="completion_p50_s",
        ),
        _m(
            "completion.p75_s",
            "completion time p75",
            "s",
            4,
            "75th percentile of T_i",
            "seed 001 fig. 12",
            lo=0,
            column="completion_p75_s",
        ),
        _m(
            "completion.p99_s",
            "completion time p99",
            "s",
            4,
            "99th percentile of T_i",
            "seed 001 fig. 12",
            lo=0,
            column="completion_p99_s",
        ),
        _m(
            "completion.jain_index",
            "Jain over completion times",
            "",
            4,
            "J over the T_i",
            "seed 004 §benchmark",
            lo=0,
            hi=1,
            column="completion_jain_index",
        ),
        _m("completion.makespan_s", "makespan", "s", 4, "last completion − first start", S001, lo=0, column="makespan_s"),
        _m(
            "completion.ideal_makespan_s",
            "ideal makespan",
            "s",
            4,
            "makespan of the ideal max-min schedule at r_TP",
            S001,
            lo=0,
            column="ideal_makespan_s",
        ),
        _m(
            "completion.deadlines_missed",
            "deadlines missed",
            "",
            4,
            "requests whose transfer completed after its deadline, or not at all",
            S001,
            lo=0,
            integer=True,
            column="deadlines_missed",
        ),
        _m(
            "completion.rejected",
            "requests rejected",
            "",
            4,
            "requests the planner's admission control refused (their deadline could not be met)",
            S001,
            lo=0,
            integer=True,
            column="requests_rejected",
        ),
        _m(
            "completion.makespan_deficiency",
            "makespan deficiency",
            "",
            3,
            "(makespan − ideal) / ideal",
            S001,
            column="makespan_deficiency",
        ),
        # ---------------------------------------------------------------- per flow, per transfer
        _m("flows.mean_goodput_mbps", "mean goodput ḡ_i", "Mbit/s", 4, "ḡ_i = (1/T) Σ_t g_i(t)", S002, scope="flow", lo=0),
        _m("flows.std_goodput_mbps", "goodput σ_i", "Mbit/s", 3, "σ_i", S004, scope="flow", lo=0),
        _m("flows.cov", "CoV_i", "", 3, "σ_i / ḡ_i", S004, scope="flow", lo=0),
        _m(
            "flows.retransmissions",
            "retransmissions",
            "segments",
            4,
            "retransmitted segments",
            S004,
            scope="flow",
            lo=0,
            integer=True,
        ),
        _m("flows.timeouts", "timeouts", "", 4, "retransmission timeouts", S004, scope="flow", lo=0, integer=True),
        _m("flows.smoothness_mbps", "smoothness S_i", "Mbit/s", 3, "max_t (g_i(t) − g_i(t + δt))", S004, scope="flow", lo=0),
        _m("flows.responsiveness_rtt", "responsiveness R_i", "RTT", 3, "ln ½ / ln β̄_i", S004, scope="flow", lo=0),
        _m(
            "flows.aggressiveness_mbps",
            "aggressiveness A_i",
            "Mbit/s per RTT",
            3,
            "max_t (x_i(t + RTT) − x_i(t))",
            S004,
            scope="flow",
            lo=0,
        ),
        _m(
            "flows.convergence_rtt",
            "convergence speed s_i",
            "RTT",
            3,
            f"min u: cwnd_i ≥ {CONVERGENCE_SHARE:g} BDP / N",
            S004,
            scope="flow",
            lo=0,
        ),
        _m(
            "transfers.mean_goodput_mbps",
            "mean goodput",
            "Mbit/s",
            4,
            "mean over t of the pair's Σ g_i(t)",
            "seed 004 §benchmark",
            scope="transfer",
            lo=0,
        ),
        _m("transfers.cov", "CoV", "", 3, "σ / mean of the pair's goodput", S004, scope="transfer", lo=0),
        _m(
            "transfers.completion_time_s",
            "completion time",
            "s",
            4,
            "first start to last byte of the pair's streams",
            S001,
            scope="transfer",
            lo=0,
        ),
        _m(
            "transfers.completion_deficiency",
            "deficiency",
            "",
            3,
            "(T − T_ideal) / T_ideal; a planned request: (T − T_plan) / T_plan from its planned start",
            S001,
            scope="transfer",
        ),
        _m(
            "transfers.lateness_s",
            "lateness",
            "s",
            3,
            "completion − deadline, from the start of the run (negative: early)",
            S001,
            scope="transfer",
        ),
    )
}

#: Run metrics stored as catalog columns, in this order.
RUN_METRICS = [m for m in METRICS.values() if m.scope == "run"]


def metric(key: str) -> Metric:
    return METRICS[key]


def get(metrics: dict, key: str):
    """The value of metric ``key`` in a metrics.json dict (None when absent)."""
    node = metrics
    for part in key.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def fmt(key: str, value) -> str:
    return METRICS[key].format(value)


def clip(key: str, lo: float, hi: float) -> tuple[float, float]:
    """An interval clipped to the metric's valid range (error bars of a bounded index)."""
    m = METRICS[key]
    return (lo if m.lo is None else max(lo, m.lo), hi if m.hi is None else min(hi, m.hi))
