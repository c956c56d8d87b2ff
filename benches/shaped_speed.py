"""One run through a shaped bottleneck with nothing dropped, for A/B timing of the link code.

    python benches/shaped_speed.py [ROOT]     # ROOT: a checkout whose python/ and build to use

(A checkout older than python/xferlab/fidelity/ runs its own copy of this script.)

One Reno flow paced at 250 Mbit/s through the emulated 300 Mbit/s bottleneck of
benches/fidelity.py (a token bucket on a 10 Gbit/s line), 10 ms, 60 s simulated: no packet is
dropped, so two builds that differ only in what a drop costs do the same work. Prints the
simulation's own time, its events and its drops as JSON. BENCHMARKS.md, "the shaper fix",
pairs two checkouts with farm-bench.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

from xferlab import scenario  # noqa: E402
from xferlab.backends import sim as sim_backend  # noqa: E402
from xferlab.fidelity import emulation  # noqa: E402
from xferlab.fidelity.matrix import Case  # noqa: E402

#: Its figures (BENCHMARKS.md) were measured on the emulated hosts with prompt reads.
READS = "uniform"


def main() -> int:
    data = Case("reno", 10, "1.0bdp", 1).scenario("duration", 60)
    data["protocol"]["rate_limit"] = "250Mbps"
    data["protocol"]["limiter"] = "pacing"
    s = scenario.from_dict(data, data["name"])
    r = scenario.resolve(s)
    cfg = emulation.emulated(sim_backend.sim_config(r), reads=READS)
    t0 = time.perf_counter()
    stats = sim_backend.run_config(cfg, r).provenance.stats
    print(json.dumps({"sim_s": time.perf_counter() - t0, "events": stats.get("events"), "drops": stats.get("bottleneck_drops")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
