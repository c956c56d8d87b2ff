"""The senders' sockets read while a netns run goes: a void run's sign, and each flow's RTOs.

iperf3 and xfer report neither ssthresh nor retransmission timeouts. A :class:`SocketWatch`
reads every sending namespace's TCP sockets over sock_diag (:mod:`.tcpdiag`) for the whole
run: it finds them by dump now and then (every :data:`WATCH_DISCOVER_S`, or
:data:`RTO_DISCOVER_S` when only timeouts are wanted) and reads each by lookup in between,
keeps each socket's last reading, and stops at the first socket seen with an impossible
window (:func:`.bpfcc.impossible_window`, a defect of BPF congestion controls on some
kernels: the run is then void). A flow's RTOs are ``tcpi_total_rto`` (Linux 6.7+) of its
socket's last reading: sockets are read while established and while closing (a sender that
closed keeps sending what its buffer holds), until they become TIME_WAIT or vanish; a
timeout in the last interval before that is missed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from . import bpfcc
from .tcpdiag import OPEN_OR_CLOSING, TcpDiag, TcpSample

#: How often the watch reads the senders' tcp_info where a BPF congestion control runs: as
#: often as the fidelity matrix's sampler, which found the 12 void runs of
#: docs/journal/validation-history.md, "12 kernel runs were void". They held 78 episodes of
#: an impossible window (1 to 36 per run), lasting from one 2 ms sample (12 episodes, and all
#: of one run's two) to 1.26 s, median 29 ms; a coarser watch would have missed that run.
WATCH_INTERVAL_S = 0.002
#: How often it reads them otherwise: only the timeouts are wanted, and a sender's socket
#: lives at least a round trip after its last timeout (the resent segment's ACK, then its
#: FIN's). Every 20 ms cost 3.7 % of a core (two BBR flows, 30 s, the machine loaded), every
#: 50 ms 2.3 %.
RTO_WATCH_INTERVAL_S = 0.05
#: How often the watch looks for new sockets (a dump, which costs 25 to 80 lookups;
#: tcpdiag). A new socket has no loss event, and so no ssthresh to spoil, in its first
#: round trip.
WATCH_DISCOVER_S = 0.1
#: ...and when only the timeouts are wanted: a dump walks the host's whole connection
#: table (1.3 ms of CPU on the machine of 2026-12-06), so the watch's cost is mostly its
#: dumps; a flow's socket is found within this, and one that lives less is not read.
RTO_DISCOVER_S = 0.5
#: Between discoveries the watch reads only the sockets that had sent more than this many
#: segments: the transfers, not iperf3's control connections (which send a few hundred
#: bytes); nothing is lost, so no ssthresh set, before the first window is out.
WATCH_MIN_SEGS = 10


@dataclass(frozen=True)
class Sighting:
    """A socket seen with an impossible window: when (s after the watch's t0), where, what."""

    t: float
    ns: str
    sport: int
    dport: int
    ssthresh: int
    cwnd: int


class SocketWatch(threading.Thread):
    """Reads the TCP sockets of ``namespaces`` every ``interval`` seconds (found by dump every
    ``discover_s``) until stopped, keeps each one's last reading (:attr:`last`) and the first one seen with an impossible
    window (:attr:`sighting`, which ends the watch). :attr:`samples` counts the sockets read
    and :attr:`cost_s` is the CPU time the watch spent."""

    def __init__(
        self, namespaces: Iterable[str], t0: float, interval: float = WATCH_INTERVAL_S, discover_s: float = WATCH_DISCOVER_S
    ) -> None:
        super().__init__(daemon=True, name="xferlab-socket-watch")
        self.namespaces = sorted(set(namespaces))
        self.t0, self.interval, self.discover_s = t0, interval, discover_s
        self.stop = threading.Event()
        self.sighting: Sighting | None = None
        self.last: dict[tuple[str, int, int], TcpSample] = {}
        self.samples = 0
        self.cost_s = 0.0

    def run(self) -> None:
        diags = [TcpDiag(ns, states=OPEN_OR_CLOSING) for ns in self.namespaces]
        every = max(1, round(self.discover_s / self.interval))
        try:
            tick = 0
            while self.sighting is None and not self.stop.wait(self.interval):
                c0 = time.thread_time()
                for d in diags:
                    self._look(d, discover=tick % every == 0)
                self.cost_s += time.thread_time() - c0
                tick += 1
        finally:
            for d in diags:
                d.close()

    def _look(self, d: TcpDiag, discover: bool) -> None:
        try:
            rows = d.poll(discover, keep=lambda r: r.data_segs_out > WATCH_MIN_SEGS)
        except OSError:  # the namespace is going away at the end of the run
            return
        self.samples += len(rows)
        for r in rows:
            self.last[(d.ns, r.sport, r.dport)] = r
            if bpfcc.impossible_window(r.ssthresh, r.cwnd) and self.sighting is None:
                self.sighting = Sighting(time.monotonic() - self.t0, d.ns, r.sport, r.dport, r.ssthresh, r.cwnd)

    def timeouts(self, ns: str, dport: int) -> int | None:
        """The retransmission timeouts of the connection from ``ns`` to port ``dport`` that
        sent the most segments (iperf3's control connection goes to the same port), at its
        last reading; None when no such socket was read or the kernel does not count them."""
        seen = [r for (where, _, port), r in self.last.items() if where == ns and port == dport]
        if not seen:
            return None
        rto = max(seen, key=lambda r: r.data_segs_out).total_rto
        return rto if rto >= 0 else None
