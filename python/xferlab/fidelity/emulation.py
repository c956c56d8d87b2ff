"""The simulator configured as the emulation the netns backend builds (its netns/topology.py),
so that the two backends differ in TCP only: veths under HTB shapers, the hosts' transmit
batches and receive coalescing as this machine's, and the receivers' reads as one of
settings.READS_MODELS says (``emulated``), from what was measured on this machine's
emulated hosts: their applications' reads (EMULATION_READS) and their waits for a CPU
(EMULATION_STALLS, or those traced in the case's own kernel runs: ``case_stalls_ns``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from ..netns import sched_waits, topology
from . import store
from .matrix import Case
from .settings import OPTIONS, ROOT

#: The veths' rate: each host's access link and the bottleneck are a veth under an HTB.
VETH_BPS = 10e9
#: Mean spacing of the emulation hosts' softirq runs (transmit batching), from the trains
#: of packets seen at the left router in a capture; the capture itself is not kept in the repository.
EMULATION_TX_BATCH_NS = 400_000
#: The emulation hosts' receiving applications (iperf3, xfer): how long after data passed
#: the right router the receiver's ACK came back, where Linux leaves the ACK to the
#: application's read (a window held back by unread data), as per-mille quantiles pooled
#: from captures of four runs (`benches/path_trains.py --reads-out`;
#: docs/journal/validation-history.md, "The receiving application's reads, measured"). The
#: simulator draws its wake-ups from these less
#: the receive path it adds itself (EMULATION_RX_NS of receive coalescing).
EMULATION_READS = ROOT / "benches" / "emulation-reads.json"
EMULATION_RX_NS = 25_000
#: How long after its data connection is set up an iperf3 stream's first data reaches the
#: receiver, beyond the path's RTT: its control messages go round the path first. 1.06 ms
#: in a traced run (RTT 100.16 ms; first data 101.22 ms after the cookie that ends the
#: handshake: VALIDATION.md §6, "iperf3's start"; docs/journal/validation-history.md,
#: "iperf3's start, and the receive queue's buffers"). xfer's data follows the handshake.
IPERF3_TURNAROUND_NS = 1_000_000
#: The application that receives each kind of run on the netns backend (its reads differ).
NETNS_APPS = {"duration": "iperf3", "volume": "xfer"}
#: The emulated hosts' receiving applications' waits for a CPU (woken or preempted, until
#: they run), traced with ftrace beside unobserved runs (`benches/receiver_waits.py`):
#: per application, waits per second and the quantiles of their lengths. With --reads
#: stalls every read due during one waits for its end (noise.app_stall_*): the waits traced
#: in the case's own kernel runs (Options.stall_runs) where they were, else these.
EMULATION_STALLS = ROOT / "benches" / "emulation-stalls.json"


def emulated(cfg: dict, kind: str = "duration", reads: str | None = None, stalls: tuple[float, list[int]] | None = None) -> dict:
    """The simulator's configuration changed into the emulation netns builds (its
    topology.py), so that the two backends differ in TCP only: each host's access link is
    a veth (~10 Gbit/s) under an HTB at the access rate with a burst of 1 ms or 10 frames,
    the bottleneck a veth under an HTB at C with a burst of 20 frames (both counting wire
    bytes), the hosts batch their transmissions as this machine's saturated CPUs do
    (softirq runs every ~0.4 ms, measured: see EMULATION_TX_BATCH_NS); with ``reads``
    (default Options.reads) "linux" or "measured" their receivers also acknowledge by Linux's rules
    (`linux_acks`), with "measured" their applications read when this machine woke them
    (EMULATION_READS: those of the application that receives a run of ``kind`` there), and
    with "stalls" every read waits out the application's waits for a CPU traced there
    (``stalls``: case_stalls_ns's; None: EMULATION_STALLS's for the number of flows). The
    receivers of a duration run (iperf3) had their connections set up an RTT and
    IPERF3_TURNAROUND_NS before the data (``connected_before_ns``)."""
    frame = cfg["mss"] + cfg["header_bytes"] + 14
    wire = frame / (frame + topology.WIRE_OVERHEAD)
    bucket = lambda rate, burst: {"kind": "token_bucket", "rate_bps": rate * wire, "burst_bytes": burst, "tick_ns": 1000}  # noqa: E731
    for f in cfg["flows"]:
        rate = cfg["pairs"][f["pair"]]["access_rate_bps"]
        if f.get("limiter") is None:
            f["limiter"] = bucket(rate, max(10 * frame, int(rate / 8 * 1e-3)))
    for p in cfg["pairs"]:
        p["access_rate_bps"] = VETH_BPS
    b = cfg["bottleneck"]
    b["shaper"] = bucket(b["rate_bps"], topology.BOTTLENECK_BURST_PKTS * frame)
    b["rate_bps"] = VETH_BPS
    if kind == "duration":
        for f in cfg["flows"]:
            f["connected_before_ns"] = cfg["pairs"][f["pair"]]["rtt_ns"] + IPERF3_TURNAROUND_NS
    cfg["noise"]["tx_batch_ns"] = EMULATION_TX_BATCH_NS
    cfg["noise"]["rx_coalesce_ns"] = EMULATION_RX_NS
    reads = reads or OPTIONS.reads
    if reads == "measured":
        cfg["noise"]["app_wakeup_quantiles_ns"] = emulation_wakeups_ns(NETNS_APPS[kind])
    if reads == "stalls":
        rate, lengths = stalls or emulation_stalls_ns(NETNS_APPS[kind], None, len(cfg["flows"]))
        cfg["noise"]["app_stall_rate_hz"] = rate
        cfg["noise"]["app_stall_quantiles_ns"] = lengths
    if reads in ("measured", "linux", "stalls"):
        cfg["tcp"]["linux_acks"] = True
    return cfg


def case_stalls_ns(case: Case, kind: str) -> tuple[float, list[int]]:
    """The stall model of ``case``'s receivers in a run of ``kind``: the waits traced in the
    case's kernel runs (traced_records, pooled), else those of EMULATION_STALLS
    (emulation_stalls_ns)."""
    if records := traced_records(case, kind):
        return sched_waits.stall_model(records)
    return emulation_stalls_ns(NETNS_APPS[kind], case.key, case.flows)


def traced_records(case: Case, kind: str) -> list[dict]:
    """The receivers' waits (sched_waits.record) traced in ``case``'s runs of ``kind`` in
    Options.stall_runs (None: Options.results), those clean and not void."""
    runs = OPTIONS.stall_runs if OPTIONS.stall_runs is not None else (OPTIONS.results,)
    return [w for run in runs if (w := kept_waits(run, case, kind)) is not None]


def kept_waits(run: Path, case: Case, kind: str) -> dict | None:
    """The receivers' waits ``run`` (an archive or a results directory) traced in ``case``'s
    run of ``kind``, if it did and that run was clean and not void."""
    got = store.kernel_side(run, case, samples=False)  # the waits are not in the samples
    side = None if got is None or "failed" in got else got[kind]
    if side and side.get("waits") and not store.unclean(side) and side.get("broken") is None:
        return side["waits"]
    return None


@functools.cache
def emulation_stalls_ns(app: str, case_key: str | None, flows: int) -> tuple[float, list[int]]:
    """``app``'s waits for a CPU on the emulated hosts: per second and receiver, and the
    quantiles of their lengths (ns), from EMULATION_STALLS — those traced in case
    ``case_key``'s runs if it was, else those of the cases with the nearest number of flows
    (the waits depend on the case: VALIDATION.md §6, "The receiving applications' waits")."""
    measured = json.loads(EMULATION_STALLS.read_text())["apps"][app]
    if case_key not in measured:
        pooled = [k for k in measured if k.startswith("flows ")]
        case_key = min(pooled, key=lambda k: abs(int(k.split()[1]) - flows))
    m = measured[case_key]
    return m["rate_hz"], [round(q * 1e3) for q in m["quantiles_us"]]


@functools.cache
def emulation_wakeups_ns(app: str) -> list[int]:
    """``app``'s wake-ups on the emulated hosts (ns, per-mille quantiles): EMULATION_READS
    less the receive path the simulator models on its own, never below 0."""
    measured = json.loads(EMULATION_READS.read_text())["apps"][app]["quantiles_us"]
    return [max(0, round(q * 1e3) - EMULATION_RX_NS) for q in measured]
