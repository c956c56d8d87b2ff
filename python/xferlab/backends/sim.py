"""The built-in packet-level simulator (Rust, ``crates/sim``), the embedded default."""

from __future__ import annotations

import json

from .. import constants
from ..runinfo import HostInfo, PathInfo, Provenance, RunInfo
from ..trace import Trace
from .base import BackendError, Progress
from .extension import module, variants

NAME = "sim"


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def _limiter(spec: dict) -> dict:
    """A limiter (runinfo.LimiterInfo) as the simulator takes it; a rate of None is unlimited."""
    out = {"kind": spec["kind"], "rate_bps": spec["rate_bps"]}
    if spec["kind"] == "token_bucket":
        out["burst_bytes"] = spec["burst_bytes"]
    if spec["kind"] in ("token_bucket", "sleep_timer"):
        out["tick_ns"] = _ns(spec["tick_s"])
    return out


def _flow(f: dict, window_cap: int | None) -> dict:
    """One flow of the simulator's configuration: its limiter with the plan's rate steps,
    and what it waits for when it starts after another pair."""
    lim = f.get("limiter")
    after = f.get("start_after")
    return {
        "pair": f["pair"],
        "stream": f["stream"],
        "variant": f["variant"],
        "role": f.get("role", "transfer"),
        "start_ns": _ns(f["start_s"]),
        "duration_ns": _ns(f["duration_s"]) if f["duration_s"] is not None else None,
        "volume_bytes": f["volume_bytes"],
        "max_window_pkts": window_cap,
        "limiter": _limiter(lim) if lim else None,
        "profile": [{"at_ns": _ns(st["t_s"]), "rate_bps": st["rate_bps"]} for st in (lim or {}).get("profile") or []],
        "start_after": {"pair": after["pair"], "delay_ns": _ns(after["delay_s"])} if after else None,
    }


def sim_config(resolved: dict) -> dict:
    """The simulator's configuration (crates/sim/src/config.rs) from a resolved scenario."""
    ns, r = _ns, RunInfo.model_validate(resolved)
    flows = [_flow(f, r.window_cap_packets) for f in r.dump()["flows"]]
    paths = r.pair_paths or [PathInfo(access_rate_bps=r.access_rate_bps, rtt_s=r.rtt_s)] * r.pairs
    bottleneck = {"rate_bps": r.bottleneck_rate_bps, "buffer_pkts": r.buffer_packets, "loss_rate": r.loss_rate}
    if r.shaper is not None:
        bottleneck["rate_bps"] = r.shaper.line_rate_bps
        bottleneck["shaper"] = _limiter(r.shaper.model_dump())
    reverse = any(f["role"] == "reverse" for f in flows)
    host = r.host or HostInfo(noise=True, kernel="linux6")
    return {
        "seed": r.seed,
        "mss": r.mss,
        "header_bytes": r.header_bytes,
        "frame_overhead": r.frame_overhead,
        "bottleneck": bottleneck,
        # The reverse direction is a queue of its own only when data flows that way.
        "reverse_bottleneck": dict(bottleneck, loss_rate=0.0) if reverse else None,
        "pairs": [{"access_rate_bps": p.access_rate_bps, "rtt_ns": ns(p.rtt_s)} for p in paths],
        "flows": flows,
        "background": [
            {
                "access_rate_bps": b.rate_bps,
                "mean_on_ns": ns(b.mean_on_s),
                "mean_off_ns": ns(b.mean_off_s),
                "packet_bytes": r.mtu,
            }
            for b in r.background
        ],
        "tcp": {
            "initial_cwnd": r.initial_cwnd,
            "delayed_ack": r.delayed_ack,
            "rto_min_ns": ns(r.rto_min_s),
            "kernel": host.kernel,
            # A resolved scenario from before the receive window did not model it (HostInfo).
            "rcvbuf_autotuning": host.rcvbuf_autotuning,
            "linux_acks": host.linux_acks,
            "tso_defer": host.tso_defer,
            # The real backends' hosts get this limit too (netns and ssh backends).
            "rmem_max_bytes": constants.host_buffers(resolved, max(p.rtt_s for p in paths))[1],
        },
        "noise": {"enabled": host.noise},
        "measure": {
            "goodput_interval_ns": ns(r.goodput_interval_s),
            "link_interval_ns": ns(r.link_interval_s),
            "tcp_interval_ns": ns(r.tcp_interval_s),
        },
        "end_ns": ns(r.end_s) if r.end_s is not None else None,
    }


def expected_end_s(resolved: dict) -> float | None:
    r = RunInfo.model_validate(resolved)
    if r.duration_s is not None:
        return max(f.start_s + f.duration_s for f in r.flows if f.role == "transfer")
    return None


def run(scenario, resolved: dict, progress: Progress | None = None) -> Trace:
    implemented = set(variants())
    missing = sorted({f["variant"] for f in resolved["flows"]} - implemented)
    if missing:
        raise BackendError(
            f"variant {', '.join(missing)} is not implemented by the simulator yet "
            f"(implemented: {', '.join(sorted(implemented))})"
        )
    return run_config(sim_config(resolved), resolved, progress)


def bottleneck_capture(cfg: dict, acks: bool = False) -> dict | tuple[dict, dict]:
    """Runs a simulator configuration for its capture only: every data segment offered to
    the bottleneck (``t_ns``, ``flow``, ``seq``, ``departs_ns``: -1 for a drop), as
    tcpdump at its router would see it (benches/path_trains.py --sim); with ``acks`` also
    every ACK as its receiver sends it (``t_ns``, ``flow``, ``cum``: the next segment
    expected, ``wnd``: the window offered, bytes). A diagnostic: the run's Trace is not
    built."""
    try:
        out = module().run(json.dumps(cfg), None, 1.0, True)
    except ValueError as e:
        raise BackendError(f"simulator: {e}") from None
    if acks:
        return dict(out["capture"]), dict(out["ack_capture"])
    return dict(out["capture"])


def run_config(cfg: dict, resolved: dict, progress: Progress | None = None) -> Trace:
    """Runs a simulator configuration: ``sim_config(resolved)``, or one a bench altered (the
    emulation's hosts modelled, a cut-off end, noise off), and returns its Trace."""
    sim = module()
    total = expected_end_s(resolved)
    callback = None
    if progress is not None:
        callback = lambda now_s, _events: progress(now_s, total)  # noqa: E731
    chunk = max(0.05, (total or 10.0) / 200)
    try:
        out = sim.run(json.dumps(cfg), callback, chunk)
    except ValueError as e:
        raise BackendError(f"simulator: {e}") from None
    stats = dict(out["stats"])
    provenance = Provenance(
        producer=NAME,
        setup=[
            ("simulated events", f"{stats['events']:,}".replace(",", " ")),
            ("simulated packets", f"{stats['packets']:,}".replace(",", " ")),
        ],
        stats=stats,
    )
    return Trace.build(
        dict(out["tables"]),
        resolved,
        provenance,
        end_s=stats["end_s"],
        versions={"xferlab-sim": sim.__version__},
    )
