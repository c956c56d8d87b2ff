"""What the judgement reads of a run, on either backend: its figures (``summarize``) from its
metrics, the backend's stats and the senders' samples — the kernel's from the TCP_INFO
sampler (``netns_samples``), the simulator's from its tcp table (``sim_samples``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..netns import bpfcc
from ..trace import Trace
from .matrix import DURATION_S


def sim_samples(trace: Trace) -> pd.DataFrame:
    """Per-flow sender samples, time from each flow's start: t, flow, cwnd, ss_done,
    ssthresh, retransmissions, in_flight and the receive window (rwnd, segments)."""
    t = trace.df("tcp")
    starts = trace.df("flows").set_index("flow_id")["start"]
    t = t[t["t"] >= t["flow_id"].map(starts)].copy()
    t["t"] = t["t"] - t["flow_id"].map(starts)
    t["ss_done"] = t["ssthresh"].notna()
    cols = ["t", "flow", "cwnd", "ss_done", "ssthresh", "retransmissions", "in_flight", "rwnd"]
    return t.rename(columns={"flow_id": "flow"})[cols]


def netns_samples(csv: Path, n_flows: int, t_end: int) -> pd.DataFrame | None:
    """The sampler's rows for each sender's data connection (its busiest socket), time from
    its first data segment (`start_s`: when that was, from the first flow's). Of the
    emulations the sampler saw, ours is the one whose namespaces (`xl-<run>-a<k>`) were seen
    last before our run ended."""
    if not csv.exists():
        return None
    df = pd.read_csv(csv)
    df = df[df["t_ns"] <= t_end]
    if df.empty:
        return None
    df["run"] = df["ns"].str.rsplit("-", n=1).str[0]
    df = df[df["run"] == df.groupby("run")["t_ns"].max().idxmax()]
    out = []
    for k in range(n_flows):
        d = df[df["ns"].str.endswith(f"-a{k}")]
        if d.empty:
            continue
        port = d.groupby("sport")["bytes_acked"].max().idxmax()
        # iperf3 sends its 37-byte cookie first: data starts with the second segment.
        d = d[(d["sport"] == port) & (d["data_segs_out"] > 1)].sort_values("t_ns")
        t = (d["t_ns"] - d["t_ns"].iloc[0]) / 1e9
        out.append(
            pd.DataFrame(
                {
                    "t": t.to_numpy(),
                    "flow": k,
                    "start_ns": d["t_ns"].iloc[0],
                    "cwnd": d["cwnd"].to_numpy(),
                    "ss_done": (d["ssthresh"] < 0x7FFFFFFF).to_numpy(),
                    "retransmissions": d["total_retrans"].to_numpy(),
                    "ssthresh": d["ssthresh"].to_numpy(),
                    "rtt_us": d["rtt_us"].to_numpy(),
                    "in_flight": d["in_flight"].to_numpy(),
                    "ca_state": d["ca_state"].to_numpy(),
                    # what else held the sender back: the receiver's window (bytes), and the
                    # time so far limited by it and by the socket's send buffer (µs)
                    "snd_wnd": d["snd_wnd"].to_numpy(),
                    "rwnd_limited_us": d["rwnd_limited_us"].to_numpy(),
                    "sndbuf_limited_us": d["sndbuf_limited_us"].to_numpy(),
                }
                # reorderings the sender saw (samplers before 2026-11-27 did not read it)
                | ({"reord_seen": d["reord_seen"].to_numpy()} if "reord_seen" in d else {})
                # segments the sender received (ACKs) and data segments it sent (before
                # 2026-11-28e the sampler did not read the first)
                | ({"segs_in": d["segs_in"].to_numpy(), "data_segs_out": d["data_segs_out"].to_numpy()} if "segs_in" in d else {})
            )
        )
    if not out:
        return None
    df = pd.concat(out, ignore_index=True)
    start_ns = df.pop("start_ns")
    df["start_s"] = (start_ns - start_ns.min()) / 1e9
    return df


def kernel_starts(samples: pd.DataFrame | None, n_flows: int) -> list[float] | None:
    """Each kernel flow's first data sample, in seconds after the first flow's: iperf3 and
    xfer start their data a few round trips after their launch, and each launch is a process
    start on a busy 2-core host, so the kernel's flows do not start within the scenario's
    1 ms jitter. Known to the sampling interval (2 ms), or None when a flow was not seen."""
    if samples is None or "start_s" not in samples or samples["flow"].nunique() != n_flows:
        return None
    first = samples.groupby("flow")["start_s"].first().sort_index()
    return [round(float(x), 6) for x in first]


def slow_start_exit(s: pd.DataFrame) -> tuple[float, float] | None:
    """Mean over flows of (the first ssthresh, the time it is set).

    ssthresh is what the variant's law made of the window at the exit (half of it for
    Reno, 0.7 for CUBIC, all of it at a HyStart exit), so with the same law on both sides
    the ratio of the two ssthresh is the ratio of the windows at the exit. The window
    itself cannot be read there: it doubles every RTT and the sampler sees it every 2 ms,
    so the last sample before the exit reads from 60 % to 100 % of it at a 10 ms RTT.
    None when a flow's samples began after its first retransmission (seen_from_start)."""
    if not seen_from_start(s):
        return None
    exits = [e for e in flow_exits(s) if e is not None]
    return (float(np.mean([e[0] for e in exits])), float(np.mean([e[1] for e in exits]))) if exits else None


def flow_exits(s: pd.DataFrame) -> list[tuple[float, float] | None]:
    """Each flow's (first ssthresh, the time it is set), in flow order; None for a flow
    still in slow start."""
    out = []
    for _, f in s.groupby("flow"):
        done = f[f["ss_done"]]
        out.append(None if done.empty else (done["ssthresh"].iloc[0], done["t"].iloc[0]))
    return out


def first_loss(s: pd.DataFrame) -> float | None:
    """When the first flow first retransmitted; None if a flow's samples began after that
    (seen_from_start)."""
    lost = s[s["retransmissions"] > 0]
    return float(lost["t"].min()) if len(lost) and seen_from_start(s) else None


def seen_from_start(s: pd.DataFrame) -> bool:
    """Whether every flow's first sample came before its first retransmission. A starved
    sampler can find a kernel's socket late: the first sample of `reno:10:1.0bdp:1` came
    after the slow start's loss and its recovery in three kernel runs of 2026-11-27/28
    (519 retransmissions, ssthresh 253 at "0.00 s") where the runs before had seen that
    exit at 0.09 s (ssthresh 509 and 501). Such an exit and first loss are unknown, not
    figures to compare. (A sample after the exit but before any retransmission still reads
    the exit's ssthresh: nothing else sets it.)"""
    first = s.sort_values("t").groupby("flow").first()
    return bool((first["retransmissions"] == 0).all())


def trajectory(s: pd.DataFrame, horizon: float, step: float = 0.01) -> dict[int, np.ndarray]:
    """Each flow's cwnd on a common grid (the last sample held)."""
    grid = np.arange(0.0, horizon, step)
    out = {}
    for k, f in s.groupby("flow"):
        f = f.sort_values("t")
        idx = np.searchsorted(f["t"].to_numpy(), grid, side="right") - 1
        out[int(k)] = np.where(idx >= 0, f["cwnd"].to_numpy()[np.clip(idx, 0, None)], np.nan)
    return out


def summarize(m: dict, stats: dict, samples: pd.DataFrame | None) -> dict:
    """A run's figures, as stored and judged: from its metrics ``m``, the backend's ``stats``
    and, for a duration run, the senders' ``samples``."""
    out = {
        "goodput_mbps": m["aggregate_goodput_mbps"],
        "jain": m["jain_index"],
        "cov": m["mean_flow_cov"],
        "retransmissions": m["retransmissions"],
        "drops": m["bottleneck_drops"],
        "makespan_s": (m.get("completion") or {}).get("makespan_s"),
        "wall_s": stats.get("wall_s"),
        "timeouts": m["timeouts"],
        "acks_per_seg": acks_per_segment(stats, samples),
        "rx_batch": rx_batch(stats),
        "backlog_merged": backlog_merged(stats),
    }
    if samples is not None:
        out |= sample_fields(samples)
    return out


def acks_per_segment(stats: dict, samples: pd.DataFrame | None) -> float | None:
    """ACKs the senders received per data segment they sent (retransmissions included):
    how far the receivers stretch their ACKs. The kernel's senders count both in TCP_INFO
    (tcpi_segs_in, tcpi_data_segs_out: each flow's last sample), the simulator in its run's
    stats. None when neither was read."""
    if samples is not None and "segs_in" in samples:
        last = samples.sort_values("t").groupby("flow").last()
        sent = last["data_segs_out"].sum()
        return float(last["segs_in"].sum() / sent) if sent else None
    if stats.get("acks") is not None and stats.get("packets"):
        return stats["acks"] / stats["packets"]
    return None


def rx_batch(stats: dict) -> float | None:
    """The size of the batch in which a data packet reached its receiver's stack, averaged
    over packets: on the kernel, the delay line's verdicts (which forward their packets, and
    run the receivers' TCP, within the call; its queues pooled, so one batch may feed
    several receivers), in the simulator its receivers' receive coalescing. None from a
    delay line before 2026-11-28 (eighteenth session) or a run with the noise off."""
    if "rx_batch_packet_mean" in stats:
        return stats["rx_batch_packet_mean"] or None
    queues = [q for q in ((stats.get("delay_line") or {}).get("queues") or {}).values() if "batch_packet_mean" in q]
    packets = sum(q["packets"] for q in queues)
    return sum(q["batch_packet_mean"] * q["packets"] for q in queues) / packets if packets else None


def backlog_merged(stats: dict) -> float | None:
    """The share of the kernel's receivers' segments merged into a socket backlog's last
    one while the application held the socket (TcpExt TCPBacklogCoalesce per Tcp InSegs):
    Linux acknowledges each merged run once. None for the simulator, which does not model
    it, and for runs before 2026-11-28 (eighteenth session)."""
    rx = stats.get("receivers") or {}
    merged, segs = rx.get("TcpExt:TCPBacklogCoalesce"), rx.get("Tcp:InSegs")
    return merged / segs if merged is not None and segs else None


def sample_fields(samples: pd.DataFrame) -> dict:
    """What the table reads from the senders' samples."""
    exit_ = slow_start_exit(samples)
    ss, t = exit_ if exit_ else (None, None)
    trajectories = {k: v.tolist() for k, v in trajectory(samples, DURATION_S).items()}
    out = {"ss_ssthresh": ss, "ss_time_s": t, "first_loss_s": first_loss(samples), "trajectory": trajectories}
    return out | {"broken": broken_window(samples), "reord_seen": reorderings(samples)}


def reorderings(samples: pd.DataFrame) -> int | None:
    """How often the kernel's senders saw the path reorder (``tcpi_reord_seen``, summed
    over flows); None where it was not sampled (the simulator's paths never reorder).
    RACK waits ``min_rtt/4`` before marking a loss once a sender has seen reordering
    (docs/journal/validation-history.md,
    "One flow at 200 ms with 0.2 BDP: a lost retransmission of the head")."""
    if "reord_seen" not in samples:
        return None
    return int(samples.groupby("flow")["reord_seen"].max().sum())


def broken_window(samples: pd.DataFrame) -> dict | None:
    """The first sample whose ssthresh or cwnd no congestion control can have produced, if
    any: the run's TCP did not follow its law (VALIDATION.md §6, "Void kernel runs")."""
    bad = samples[[bpfcc.impossible_window(t, c) for t, c in zip(samples["ssthresh"], samples["cwnd"], strict=True)]]
    if bad.empty:
        return None
    first = bad.iloc[0]
    return {"t": float(first["t"]), "flow": int(first["flow"]), "ssthresh": int(first["ssthresh"]), "cwnd": int(first["cwnd"])}
