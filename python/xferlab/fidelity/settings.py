"""Where the fidelity bench keeps what it measures, and the choices of one run of it.

The choices are its command line's (benches/fidelity.py sets :data:`OPTIONS` once, before
anything runs); every module reads them when it needs them, so a test or another bench sets a
field of ``OPTIONS`` and the whole sub-package follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: The repository: the bench's results, archives and measurements live beside the package.
ROOT = Path(__file__).resolve().parents[3]
#: Each case's sides as last run, per backend (a rerun reuses them: ``runs.run_case``).
RESULTS = ROOT / "results" / "fidelity"
#: Archived kernel runs of the matrix (--archive), one gzipped JSON each.
ARCHIVE = ROOT / "benches" / "fidelity-runs"
#: How the emulated simulator's receivers read and ACK: "uniform" (the simulator's default
#: hosts: reads 20 µs after the data on average, an ACK per two segments; the table's),
#: "measured" (the reads of emulation.EMULATION_READS, with Linux's ACK rules), "linux" (the
#: default hosts' reads, with Linux's ACK rules) or "stalls" (the default hosts' reads, with
#: Linux's ACK rules, held by the waits for a CPU of emulation.EMULATION_STALLS); `--reads`. The measured reads were
#: captured with tcpdump beside the run, which slows the emulated hosts it watches: against
#: the first kernel run sampled without disturbing it (2026-11-28c) the default hosts hold
#: every tolerance in 44-46 of 84 cases, the measured reads in 34-43
#: (docs/journal/validation-history.md, "The table judges the simulator's default hosts").
#: Against the median of 2026-11-28b, c and d: uniform 47, linux 41, measured 39.
READS_MODELS = ("uniform", "measured", "linux", "stalls")


@dataclass
class Options:
    """The choices of a run of the bench, each with its command-line option."""

    #: Where each case's sides are stored and read (RESULTS; tests point it elsewhere).
    results: Path = RESULTS
    #: The emulated simulator's receivers (READS_MODELS; `--reads`).
    reads: str = READS_MODELS[0]
    #: The simulator's senders defer new data as Linux's TSO deferral does (TcpConfig
    #: tso_defer, the default since 2026-12-06; `--no-tso-defer`): VALIDATION.md §6, "TSO deferral".
    tso_defer: bool = True
    #: Whether a kernel run traces its receivers' waits (netns.sched_waits; `--no-trace-waits`):
    #: about a microsecond per scheduler event of theirs, a few thousand a second.
    trace_waits: bool = True
    #: Whether a kernel run traces its flows' segments with tcp_probe (netns.tcp_probes;
    #: `--no-trace-acks`), kept as their ACK delays and trains (``acks``): an event per segment
    #: received, in the kernel, read after the run.
    trace_acks: bool = True
    #: The kernel runs (archives or results directories) whose traced waits --reads stalls
    #: gives the simulator: the --kernel-runs judged against, else ``results`` (None).
    stall_runs: tuple[Path, ...] | None = None
    #: The emulation needs the machine to itself (2 cores here): a netns run waits until the
    #: 1-minute load average is below this (`--max-load`), for at most ``max_wait_s``.
    max_load: float = 3.0
    max_wait_s: float = 1800


#: The choices in force (benches/fidelity.py's command line, or the defaults).
OPTIONS = Options()
