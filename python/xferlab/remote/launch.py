"""The processes a run starts on its hosts, as shell text: detached, timed, and findable.

Each is a process group of its own (``setsid``) whose leader writes its PID to
``<workdir>/<name>.pid`` and whose command line names the run's folder, so that stopping it,
or a ``cleanup`` after the controller was killed, signals exactly the run's processes. A
timed start sleeps until an absolute time of the host's clock (ns since the epoch), notes when
it woke (``<name>.start``), runs the tool, and notes its exit status and end
(``<name>.rc``: "status end_ns").

The link sampler runs on the router: ``xfer qstats`` writes, every interval, the time and the
bottleneck's qdisc counters to ``link.out`` (:func:`parse_link_log` reads them back).
"""

from __future__ import annotations

import re
import shlex

from . import journal

#: Shell that sleeps until the host's clock reads $T ns (no-op when already past).
_SLEEP_UNTIL = (
    'n=$(date +%s%N); d=$((T - n)); [ "$d" -gt 0 ] && sleep "$(printf %d.%09d $((d / 1000000000)) $((d % 1000000000)))"'
)


#: The names of a run's processes (their files in the run's folder: NAME.pid, NAME.out…).
PROCESS_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _names(names: list[str]) -> str:
    """Process names as shell words (each checked against :data:`PROCESS_NAME`)."""
    for n in names:
        if not PROCESS_NAME.fullmatch(n):
            raise ValueError(f"process name {n!r}")
    return " ".join(names)


def detached(workdir: str, name: str, body: str) -> str:
    """A command that starts ``body`` detached in its own process group and returns at once."""
    _names([name])
    w = shlex.quote(workdir)
    inner = f"cd {w} && echo $$ > {name}.pid && {body}"
    # The redirections are the whole command's: nothing holds the SSH channel open.
    return f"setsid sh -c {shlex.quote(inner)} < /dev/null > /dev/null 2>&1 &"


def timed(workdir: str, name: str, at_ns: int | None, tool: list[str]) -> str:
    """Starts ``tool`` at host time ``at_ns`` (None: now): its stdout in ``NAME.out``, stderr in ``NAME.err``.

    The group's leader outlives a SIGTERM to the group (the tool gets it and ends, or not):
    it still writes ``NAME.rc``, never starts a tool it was waiting to start, and keeps the
    group findable by its command line, so that a KILL reaches a tool that ignored the TERM."""
    wait = f"T={int(at_ns)}; {_SLEEP_UNTIL}; " if at_ns is not None else ""
    body = (
        f"trap 'stopped=1' TERM; {wait}date +%s%N > {name}.start; "
        f'{{ [ -z "${{stopped:-}}" ] && {" ".join(map(shlex.quote, tool))} > {name}.out 2> {name}.err; }}; '
        f'echo "$? $(date +%s%N)" > {name}.rc.tmp && mv {name}.rc.tmp {name}.rc'
    )
    return detached(workdir, name, body)


def status(workdir: str, names: list[str]) -> str:
    """Prints ``NAME STATUS END_NS`` for each of ``names`` that has ended."""
    w = shlex.quote(workdir)
    return f'cd {w} && for n in {_names(names)}; do [ -f "$n.rc" ] && echo "$n $(cat "$n.rc")"; done; true'


def parse_status(text: str) -> dict[str, tuple[int, int]]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].lstrip("-").isdigit() and parts[2].isdigit():
            out[parts[0]] = (int(parts[1]), int(parts[2]))
    return out


def signal_group(workdir: str, name: str, sig: str = "TERM") -> str:
    """Signals the process group ``name`` started (if it is still ours and alive). The
    ``kill -s SIG -- -PGID`` form is POSIX: dash, a common login shell, refuses ``kill -SIG --
    -PGID`` ("Illegal number"), bash takes both."""
    if sig not in journal.SIGNALS:
        raise ValueError(f"signal {sig!r}")
    w, pid = shlex.quote(workdir), shlex.quote(f"{workdir}/{_names([name])}.pid")
    return (
        f'p=$(head -c 20 {pid} 2>/dev/null) && case "$p" in ""|*[!0-9]*) false;; esac '
        f'&& grep -qF -- {w} "/proc/$p/cmdline" 2>/dev/null && kill -s {sig} -- "-$p" 2>/dev/null; true'
    )


#: Prints the TCP ports something listens on.
LISTENING = "ss -Hltn 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u"


def alive(workdir: str, names: list[str]) -> str:
    """Prints each of ``names`` whose process group still has a process."""
    w = shlex.quote(workdir)
    return (
        f'for n in {_names(names)}; do p=$(head -c 20 {w}/"$n.pid" 2>/dev/null) && case "$p" in ""|*[!0-9]*) continue;; esac '
        '&& kill -s 0 -- "-$p" 2>/dev/null && echo "$n"; done; true'
    )


def parse_ports(text: str) -> set[int]:
    return {int(x) for x in text.split() if x.isdigit()}


def link_sampler(xfer: str, devices: list[str], t0_ns: int, interval_ns: int, duration_ns: int) -> list[str]:
    """The router's link sampler (``xfer qstats``, one long-lived process stamping each
    rtnetlink dump on the router's clock): the qdisc counters of ``devices`` every
    ``interval_ns`` from host time ``t0_ns`` (ticks on an absolute grid; a late tick is
    skipped, not bunched), for ``duration_ns`` or until stopped. Start it with :func:`timed`."""
    args = [xfer, "qstats"] + [w for d in devices for w in ("--dev", d)]
    return args + ["--interval-ns", str(int(interval_ns)), "--start-ns", str(int(t0_ns)), "--duration-ns", str(int(duration_ns))]


def parse_link_log(text: str, leaf: str = "100000") -> list[tuple[int, dict[str, dict]]]:
    """(host time ns, {device: {bytes, packets, drops, qlen}}) per sample of :func:`link_sampler`'s
    output: the counters of each device's leaf ``pfifo`` (handle ``leaf``: tc's 10:, major 0x10), where the
    bottleneck's queue is. A line cut off by the sampler's stop is left out."""
    samples: dict[int, dict[str, dict]] = {}
    for line in text.splitlines():
        w = line.split()
        if len(w) != 11 or w[0] != "S" or w[4] != leaf or not all(x.isdigit() for x in (w[1], *w[6:])):
            continue
        counters = {"bytes": int(w[6]), "packets": int(w[7]), "drops": int(w[8]), "qlen": int(w[9])}
        samples.setdefault(int(w[1]), {})[w[3]] = counters
    return sorted(samples.items())
