"""Qdisc counters read over rtnetlink from inside a namespace, without starting a process.

Spawning ``tc -s`` at every link interval costs milliseconds of CPU and, worse, its reading
time is unknown to a few tens of ms on a loaded host, which shows up as throughput spikes.
Here a NETLINK_ROUTE socket is opened inside the router's namespace once and each sample is
one ``RTM_GETQDISC`` dump, timestamped when the kernel read the counters (see
:meth:`QdiscReader.read`).

Two readers, one interface (``read() -> (time, {bytes, packets, drops, qlen, backlog})``):

* :class:`QdiscReader`, the link sampler's (every link interval, 20 ms at the finest, for the
  whole run): the request is packed and the answer walked with ``struct``, and only the
  counters of the one qdisc asked for are decoded.
* :class:`LibraryQdiscReader`: the same dump through pyroute2, which decodes every attribute
  of every qdisc of the namespace.  Used for one-off reads (:func:`qdisc_stats`) and as a
  second, independent parser in the tests.

Why the sampler does not use pyroute2: a sample costs 36× more through it, which the sampler,
at every link interval for the whole run, cannot pay on a 2-core host whose delay line needs a
core (``benches/qstats_cost.py``: 4 pairs, 7 qdiscs per dump, 1500 samples of each reader
interleaved every 20 ms, load average 4.7–6.4; BENCHMARKS.md "netns: qdisc sampling"):

================================  ==============================  =============================
reader                            µs per sample: min / med / p99  both links every 20 ms
================================  ==============================  =============================
QdiscReader (struct)              29 / 38 / 169                   0.4 % of a core
LibraryQdiscReader (IPRoute)      829 / 1357 / 5713               13.6 % of a core
pyroute2 IPRSocket, put/get       359 / 416 / 4893                4.2 % of a core
================================  ==============================  =============================
"""

from __future__ import annotations

import os
import socket
import struct
import time

from . import host

NETLINK_ROUTE = 0
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCA_KIND, TCA_STATS = 1, 3

_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
_RTATTR = struct.Struct("=HH")
_TC_STATS = struct.Struct("=QIIIIIII")  # bytes, packets, drops, overlimits, bps, pps, qlen, backlog
#: A sample's send() may take this long (s) for its middle to stand for when the kernel read
#: the counters (a dump of a few qdiscs: 30–170 µs here, the module's table); a longer one is
#: made again, at most STAMP_TRIES times in all (the last is kept).
STAMP_SPREAD_S = 0.001
STAMP_TRIES = 5


class QdiscReader:
    """Reads the counters of the qdisc of kind ``kind`` on ``dev`` in namespace ``ns``."""

    def __init__(self, ns: str, dev: str, kind: str = "pfifo"):
        self.kind = kind
        with host.in_namespace(ns):  # the socket, once opened, stays in ns
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
            try:
                self.ifindex = socket.if_nametoindex(dev)
            except OSError:
                self.sock.close()
                raise
        self.sock.bind((0, 0))
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def read(self) -> tuple[float, dict | None]:
        """(monotonic time the kernel read them, {bytes, packets, drops, qlen, backlog}) of the qdisc.

        The kernel reads the counters while it takes the request: a dump's first part is
        made within send() (``netlink_dump_start``), and one part holds every qdisc of a
        namespace here. So the time is the middle of the send(), and a send() that took
        longer than STAMP_SPREAD_S (the thread was preempted, or waited for the GIL after it)
        is made again, up to STAMP_TRIES times. Taken when the answer came, the time had
        whatever kept the thread from running after send() in it, which on a loaded host
        shortens or lengthens an interval by milliseconds (a 100 ms interval read 216 Mbit/s
        off a 200 Mbit/s link in a CI run under load). Needed: stamped once before send(),
        without the retry, a loaded run of the suite read rows of 243, 146, 260 and 98 Mbit/s
        off that link (their bytes right, 194.5 Mbit/s together; 2026-11-28, eighteenth
        session), although a lone thread's send() never took 1 ms under the same load: the
        sampler shares its process's GIL with the backend's other threads."""
        for _ in range(STAMP_TRIES):
            t0 = time.monotonic()
            self._request()
            t1 = time.monotonic()
            found = self._answer()
            if t1 - t0 <= STAMP_SPREAD_S:
                break
        return (t0 + t1) / 2, found

    def _request(self) -> None:
        self.seq += 1
        body = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        self.sock.send(_NLMSG.pack(_NLMSG.size + len(body), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) + body)

    def _answer(self) -> dict | None:
        """The counters of our qdisc in the answer to the last request (None: not there)."""
        found = None
        while True:
            data = self.sock.recv(1 << 16)
            off = 0
            while off + _NLMSG.size <= len(data):
                length, mtype, _, seq, _ = _NLMSG.unpack_from(data, off)
                if length < _NLMSG.size:
                    return found
                if seq == self.seq:
                    if mtype == NLMSG_DONE:
                        return found
                    if mtype == NLMSG_ERROR:
                        (code,) = struct.unpack_from("=i", data, off + _NLMSG.size)
                        if code:
                            raise OSError(-code, f"RTM_GETQDISC: {os.strerror(-code)}")
                    elif mtype == RTM_NEWQDISC:
                        q = self._parse(data[off + _NLMSG.size : off + length])
                        if q is not None:
                            found = q
                off += (length + 3) & ~3

    def _parse(self, msg: bytes) -> dict | None:
        _, ifindex, _, _, _ = _TCMSG.unpack_from(msg, 0)
        if ifindex != self.ifindex:
            return None
        off, kind, stats = _TCMSG.size, None, None
        while off + _RTATTR.size <= len(msg):
            alen, atype = _RTATTR.unpack_from(msg, off)
            if alen < _RTATTR.size:
                break
            payload = msg[off + _RTATTR.size : off + alen]
            if atype == TCA_KIND:
                kind = payload.rstrip(b"\0").decode()
            elif atype == TCA_STATS and len(payload) >= _TC_STATS.size:
                stats = _TC_STATS.unpack_from(payload, 0)
            off += (alen + 3) & ~3
        if kind != self.kind or stats is None:
            return None
        b, p, drops, _, _, _, qlen, backlog = stats
        return {"bytes": b, "packets": p, "drops": drops, "qlen": qlen, "backlog": backlog}


class LibraryQdiscReader:
    """:class:`QdiscReader` through pyroute2 (``IPRoute.get_qdiscs``, ``TCA_STATS2``); read it from
    the thread that opened it (:func:`host.rtnl`)."""

    def __init__(self, ns: str, dev: str, kind: str = "pfifo"):
        self.kind = kind
        self.ipr = host.rtnl(ns)
        try:
            (link,) = self.ipr.link("get", ifname=dev)
        except Exception:
            self.ipr.close()
            raise
        self.ifindex = link["index"]

    def close(self) -> None:
        self.ipr.close()

    def read(self) -> tuple[float, dict | None]:
        # The kernel fills the first part of a dump while handling the request, so the time
        # it is sent is when the counters were read.
        stamp = time.monotonic()
        for msg in self.ipr.get_qdiscs(index=self.ifindex):
            if msg["index"] != self.ifindex or msg.get_attr("TCA_KIND") != self.kind:
                continue
            stats = msg.get_attr("TCA_STATS2")
            basic, queue = stats.get_attr("TCA_STATS_BASIC"), stats.get_attr("TCA_STATS_QUEUE")
            return stamp, {
                "bytes": basic["bytes"],
                "packets": basic["packets"],
                "drops": queue["drops"],
                "qlen": queue["qlen"],
                "backlog": queue["backlog"],
            }
        return stamp, None


def qdisc_stats(ns: str, dev: str, kind: str = "pfifo") -> dict | None:
    """One reading of the counters of the ``kind`` qdisc on ``dev`` in ``ns`` (None if it has none)."""
    reader = LibraryQdiscReader(ns, dev, kind)
    try:
        return reader.read()[1]
    finally:
        reader.close()
