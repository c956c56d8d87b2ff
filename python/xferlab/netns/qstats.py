"""Qdisc counters read over rtnetlink from inside a namespace, without starting a process.

Spawning ``tc -s`` at every link interval costs milliseconds of CPU and, worse, its reading
time is unknown to a few tens of ms on a loaded host, which shows up as throughput spikes.
Here a NETLINK_ROUTE socket is opened inside the router's namespace once (``setns`` of the
calling thread, then back) and each sample is one ``RTM_GETQDISC`` dump, timestamped when
the kernel's answer arrives.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import time

CLONE_NEWNET = 0x40000000
NETLINK_ROUTE = 0
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCA_KIND, TCA_STATS = 1, 3

_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
_RTATTR = struct.Struct("=HH")
_TC_STATS = struct.Struct("=QIIIIIII")  # bytes, packets, drops, overlimits, bps, pps, qlen, backlog

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class QdiscReader:
    """Reads the counters of the qdisc of kind ``kind`` on ``dev`` in namespace ``ns``."""

    def __init__(self, ns: str, dev: str, kind: str = "pfifo"):
        self.kind = kind
        target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            _setns(target)
            try:
                self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
                self.ifindex = socket.if_nametoindex(dev)
            finally:
                _setns(home)
        finally:
            os.close(target)
            os.close(home)
        self.sock.bind((0, 0))
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def read(self) -> tuple[float, dict | None]:
        """(monotonic time of the answer, {bytes, packets, drops, qlen, backlog}) of the qdisc."""
        self.seq += 1
        body = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        self.sock.send(_NLMSG.pack(_NLMSG.size + len(body), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) + body)
        found = None
        stamp = None
        while True:
            data = self.sock.recv(1 << 16)
            if stamp is None:
                stamp = time.monotonic()
            off = 0
            while off + _NLMSG.size <= len(data):
                length, mtype, _, seq, _ = _NLMSG.unpack_from(data, off)
                if length < _NLMSG.size:
                    return stamp, found
                if seq == self.seq:
                    if mtype == NLMSG_DONE:
                        return stamp, found
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
