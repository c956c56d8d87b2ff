"""The processes a run starts on its hosts, as shell text: detached, timed, and findable.

Each is a process group of its own (``setsid``) whose leader writes its PID to
``<workdir>/<name>.pid`` and whose command line names the run's folder, so that stopping it,
or a ``cleanup`` after the controller was killed, signals exactly the run's processes. A
timed start sleeps until an absolute time of the host's clock (ns since the epoch), notes when
it woke (``<name>.start``), runs the tool, and notes its exit status and end
(``<name>.rc``: "status end_ns").

The link sampler runs on the router: every interval it writes the time and the bottleneck's
``tc -s qdisc`` counters to ``link.log`` (:func:`parse_link_log` reads them back).
"""

from __future__ import annotations

import re
import shlex

#: Shell that sleeps until the host's clock reads $T ns (no-op when already past).
_SLEEP_UNTIL = (
    'n=$(date +%s%N); d=$((T - n)); [ "$d" -gt 0 ] && sleep "$(printf %d.%09d $((d / 1000000000)) $((d % 1000000000)))"'
)


def detached(workdir: str, name: str, body: str) -> str:
    """A command that starts ``body`` detached in its own process group and returns at once."""
    w = shlex.quote(workdir)
    inner = f"cd {w} && echo $$ > {name}.pid && {body}"
    # The redirections are the whole command's: nothing holds the SSH channel open.
    return f"setsid sh -c {shlex.quote(inner)} < /dev/null > /dev/null 2>&1 &"


def timed(workdir: str, name: str, at_ns: int | None, tool: list[str]) -> str:
    """Starts ``tool`` at host time ``at_ns`` (None: now): its stdout in ``NAME.out``, stderr in ``NAME.err``.

    The group's leader outlives a SIGTERM to the group (the tool gets it and ends, or not):
    it still writes ``NAME.rc``, never starts a tool it was waiting to start, and keeps the
    group findable by its command line, so that a KILL reaches a tool that ignored the TERM."""
    wait = f"T={at_ns}; {_SLEEP_UNTIL}; " if at_ns is not None else ""
    body = (
        f"trap 'stopped=1' TERM; {wait}date +%s%N > {name}.start; "
        f'{{ [ -z "${{stopped:-}}" ] && {" ".join(map(shlex.quote, tool))} > {name}.out 2> {name}.err; }}; '
        f'echo "$? $(date +%s%N)" > {name}.rc.tmp && mv {name}.rc.tmp {name}.rc'
    )
    return detached(workdir, name, body)


def status(workdir: str, names: list[str]) -> str:
    """Prints ``NAME STATUS END_NS`` for each of ``names`` that has ended."""
    w = shlex.quote(workdir)
    return f'cd {w} && for n in {" ".join(names)}; do [ -f $n.rc ] && echo "$n $(cat $n.rc)"; done; true'


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
    w = shlex.quote(workdir)
    return (
        f"p=$(cat {w}/{name}.pid 2>/dev/null) && grep -qF {w} /proc/$p/cmdline 2>/dev/null "
        f"&& kill -s {sig} -- -$p 2>/dev/null; true"
    )


#: Prints the TCP ports something listens on.
LISTENING = "ss -Hltn 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u"


def alive(workdir: str, names: list[str]) -> str:
    """Prints each of ``names`` whose process group still has a process."""
    w = shlex.quote(workdir)
    return (
        f"for n in {' '.join(names)}; do p=$(cat {w}/$n.pid 2>/dev/null) && kill -s 0 -- -$p 2>/dev/null && echo $n; done; true"
    )


def parse_ports(text: str) -> set[int]:
    return {int(x) for x in text.split() if x.isdigit()}


def link_sampler(workdir: str, devices: list[str], t0_ns: int, interval_ns: int) -> str:
    """Samples the ``tc -s qdisc`` counters of ``devices`` every ``interval_ns`` from host time
    ``t0_ns`` (ticks on an absolute grid; a late tick is skipped, not bunched)."""
    shows = "; ".join(f'echo "D {d}"; tc -s qdisc show dev {shlex.quote(d)}' for d in devices)
    body = (
        f'i=0; while :; do echo "T $(date +%s%N)"; {shows}; i=$((i + 1)); '
        f"T=$(({t0_ns} + i * {interval_ns})); n=$(date +%s%N); "
        f"if [ $((T - n)) -le 0 ]; then i=$(((n - {t0_ns}) / {interval_ns})); continue; fi; "
        f'd=$((T - n)); sleep "$(printf %d.%09d $((d / 1000000000)) $((d % 1000000000)))"; done > link.log'
    )
    return detached(workdir, "link", body)


_SENT = re.compile(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+)")
_BACKLOG = re.compile(r"backlog \S+ (\d+)p")


def parse_link_log(text: str, leaf: str = "10:") -> list[tuple[int, dict[str, dict]]]:
    """(host time ns, {device: {bytes, packets, drops, qlen}}) per sample: the counters of each
    device's leaf ``pfifo`` (handle ``leaf``), where the bottleneck's queue is."""
    samples: list[tuple[int, dict]] = []
    dev, in_leaf = None, False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("T ") and s[2:].isdigit():
            samples.append((int(s[2:]), {}))
        elif s.startswith("D ") and samples:
            dev, in_leaf = s[2:], False
        elif s.startswith("qdisc "):
            in_leaf = s.split()[2:3] == [leaf]
        elif in_leaf and dev and samples:
            m = _SENT.search(s)
            if m:
                samples[-1][1][dev] = {"bytes": int(m[1]), "packets": int(m[2]), "drops": int(m[3]), "qlen": 0}
            m = _BACKLOG.search(s)
            if m and dev in samples[-1][1]:
                samples[-1][1][dev]["qlen"] = int(m[1])
    # The last sample may be cut off mid-way by the sampler's stop.
    return [(t, q) for t, q in samples if q]
