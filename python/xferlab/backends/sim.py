"""The built-in packet-level simulator (Rust, ``crates/sim``), the embedded default."""

from __future__ import annotations

import json

from ..trace import Provenance, Trace
from .base import BackendError, Progress

try:
    from .. import _sim
except ImportError as _e:  # pragma: no cover - a broken install: said when a run is asked for
    _sim = None
    _MISSING = str(_e)

NAME = "sim"


def _module():
    if _sim is None:  # pragma: no cover
        raise BackendError(f"the simulator extension is not built ({_MISSING}); run `make install`")
    return _sim


def version() -> str:
    return _module().__version__


def variants() -> list[str]:
    return list(_module().variants())


def _limiter(spec: dict) -> dict:
    if spec["kind"] == "pacer":
        return {"kind": "pacer", "rate_bps": spec["rate_bps"]}
    return {
        "kind": "token_bucket",
        "rate_bps": spec["rate_bps"],
        "burst_bytes": spec["burst_bytes"],
        "tick_ns": int(round(spec["tick_s"] * 1e9)),
    }


def sim_config(resolved: dict) -> dict:
    """The simulator's configuration (crates/sim/src/config.rs) from a resolved scenario."""
    ns = lambda s: int(round(s * 1e9))  # noqa: E731
    flows = []
    for f in resolved["flows"]:
        limiter = _limiter(f["limiter"]) if f.get("limiter") else None
        flows.append(
            {
                "pair": f["pair"],
                "stream": f["stream"],
                "variant": f["variant"],
                "role": f.get("role", "transfer"),
                "start_ns": ns(f["start_s"]),
                "duration_ns": ns(f["duration_s"]) if f["duration_s"] is not None else None,
                "volume_bytes": f["volume_bytes"],
                "max_window_pkts": resolved["window_cap_packets"],
                "limiter": limiter,
            }
        )
    paths = (
        resolved.get("pair_paths")
        or [{"access_rate_bps": resolved["access_rate_bps"], "rtt_s": resolved["rtt_s"]}] * resolved["pairs"]
    )
    bottleneck = {
        "rate_bps": resolved["bottleneck_rate_bps"],
        "buffer_pkts": resolved["buffer_packets"],
        "loss_rate": resolved["loss_rate"],
    }
    sh = resolved.get("shaper")
    if sh is not None:
        bottleneck["rate_bps"] = sh["line_rate_bps"]
        bottleneck["shaper"] = _limiter(sh)
    reverse = any(f["role"] == "reverse" for f in flows)
    return {
        "seed": resolved["seed"],
        "mss": resolved["mss"],
        "header_bytes": resolved["header_bytes"],
        "frame_overhead": resolved["frame_overhead"],
        "bottleneck": bottleneck,
        # The reverse direction is a queue of its own only when data flows that way.
        "reverse_bottleneck": dict(bottleneck, loss_rate=0.0) if reverse else None,
        "pairs": [{"access_rate_bps": p["access_rate_bps"], "rtt_ns": ns(p["rtt_s"])} for p in paths],
        "flows": flows,
        "background": [
            {
                "access_rate_bps": b["rate_bps"],
                "mean_on_ns": ns(b["mean_on_s"]),
                "mean_off_ns": ns(b["mean_off_s"]),
                "packet_bytes": resolved["mtu"],
            }
            for b in resolved.get("background", [])
        ],
        "tcp": {
            "initial_cwnd": resolved["initial_cwnd"],
            "delayed_ack": resolved["delayed_ack"],
            "rto_min_ns": ns(resolved["rto_min_s"]),
        },
        "measure": {
            "goodput_interval_ns": ns(resolved["goodput_interval_s"]),
            "link_interval_ns": ns(resolved["link_interval_s"]),
            "tcp_interval_ns": ns(resolved["tcp_interval_s"]),
        },
        "end_ns": ns(resolved["end_s"]) if resolved["end_s"] is not None else None,
    }


def expected_end_s(resolved: dict) -> float | None:
    if resolved["duration_s"] is not None:
        return max(f["start_s"] + f["duration_s"] for f in resolved["flows"] if f.get("role", "transfer") == "transfer")
    return None


def unsupported(resolved: dict) -> str | None:
    """What of a resolved scenario the simulator cannot run yet, said plainly (None: all)."""
    for f in resolved["flows"]:
        lim = f.get("limiter") or {}
        if lim.get("kind") in ("cwnd_clamp", "sleep_timer"):
            return f"the {lim['kind'].replace('_', ' ')} mechanism"
        if lim.get("profile"):
            return "a rate that changes over time (a multi-rate or preemptive plan)"
        if f.get("start_after"):
            return "a start signalled by another transfer's completion (schedule.time_control.sync: signal or broker)"
    return None


def run(scenario, resolved: dict, progress: Progress | None = None) -> Trace:
    sim = _module()
    missing_feature = unsupported(resolved)
    if missing_feature:
        raise BackendError(f"the simulator does not implement {missing_feature} yet")
    implemented = set(sim.variants())
    missing = sorted({f["variant"] for f in resolved["flows"]} - implemented)
    if missing:
        raise BackendError(
            f"variant {', '.join(missing)} is not implemented by the simulator yet "
            f"(implemented: {', '.join(sorted(implemented))})"
        )
    total = expected_end_s(resolved)
    callback = None
    if progress is not None:
        callback = lambda now_s, _events: progress(now_s, total)  # noqa: E731
    chunk = max(0.05, (total or 10.0) / 200)
    try:
        out = sim.run(json.dumps(sim_config(resolved)), callback, chunk)
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
