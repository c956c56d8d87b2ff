"""The fidelity matrix: 7 variants × RTT 10, 50, 200 ms × buffer 0.2 and 1 BDP × 1 and 4 flows,
hosts at 1 Gbit/s into a 300 Mbit/s bottleneck (what this host emulates without dilation).
Each case is a 30 s duration run (slow start, losses, goodput, fairness) and a volume run
(300 MB split over the pairs: completion time), on both backends."""

from __future__ import annotations

from dataclasses import dataclass

VARIANTS = ("reno", "bic", "cubic", "highspeed", "htcp", "scalable", "bbr")
RTTS_MS = (10, 50, 200)
BUFFERS = ("0.2bdp", "1.0bdp")
FLOWS = (1, 4)
BOTTLENECK, ACCESS = "300Mbps", "1Gbps"
DURATION_S = 30
VOLUME_BYTES = 300_000_000
#: The senders' cwnd samples, on both sides: the kernel's TCP_INFO sampler's step until each
#: flow's first retransmission (kernel.SAMPLE_SPARSE_S after), the simulator's tcp table's.
SAMPLE_S = 0.002


@dataclass(frozen=True)
class Case:
    variant: str
    rtt_ms: int
    buffer: str
    flows: int

    @classmethod
    def from_key(cls, key: str) -> Case:
        """The case of a key (``reno:50:1.0bdp:1``)."""
        v, rtt, buf, n = key.split(":")
        return cls(v, int(rtt), buf, int(n))

    @property
    def key(self) -> str:
        return f"{self.variant}:{self.rtt_ms}:{self.buffer}:{self.flows}"

    @property
    def stem(self) -> str:
        """The case's name in results directories' file names (``reno_10_0.2bdp_1``)."""
        return self.key.replace(":", "_")

    def scenario(self, kind: str, duration_s: float = DURATION_S) -> dict:
        """The scenario both backends run: `duration` or `volume`."""
        work = {"streams": 1, "start_jitter": "1ms"}
        if kind == "duration":
            work["duration"] = f"{duration_s:g}s"
        else:
            work["volume"] = VOLUME_BYTES // self.flows
        return {
            "name": f"fidelity-{self.variant}-{self.rtt_ms}-{self.buffer}-{self.flows}-{kind}",
            "topology": {
                "pairs": self.flows,
                "access_rate": ACCESS,
                "bottleneck_rate": BOTTLENECK,
                "rtt": f"{self.rtt_ms}ms",
                "buffer": self.buffer,
            },
            "workload": work,
            "protocol": {"variant": self.variant},
            "measure": {"goodput_interval": "0.5s", "link_interval": "10ms", "tcp_interval": "100ms"},
            "seed": 1,
        }


def matrix() -> list[Case]:
    return [Case(v, r, b, n) for v in VARIANTS for r in RTTS_MS for b in BUFFERS for n in FLOWS]


def select(cases: list[Case], patterns: list[str]) -> list[Case]:
    """Cases whose key starts with one of `patterns` (`reno`, `cubic:10`, `bbr:50:1.0bdp:4`)."""
    if not patterns:
        return cases
    return [c for c in cases if any(c.key == p or c.key.startswith(p + ":") for p in patterns)]
