"""The TCP sockets of a namespace with their ``tcp_info``, read over sock_diag netlink.

iperf3 reports TCP_INFO at most every 0.1 s and leaves out ssthresh; the window watch of the
netns backend and ``benches/fidelity_tcpinfo.py`` need every socket's state every few ms.
A :class:`TcpDiag` opens one ``NETLINK_SOCK_DIAG`` socket inside a namespace;
:meth:`TcpDiag.find` is one ``SOCK_DIAG_BY_FAMILY`` dump of its established IPv4 TCP
sockets and :meth:`TcpDiag.lookup` one request for a socket already found, both walked with
``struct`` (the same reason as :mod:`.qstats`).

What they cost: a dump walks the host's whole established-connection hash table (one table
for every namespace unless ``tcp_child_ehash_entries`` is set), 262 144 buckets on this
host: 170 µs of CPU however few sockets the namespace has. A lookup is one hash probe:
a few µs. A watch every 2 ms therefore finds sockets by dump now and then and reads them
by lookup (BENCHMARKS.md "netns: the window watch").

Offsets are those of ``struct tcp_info`` in ``include/uapi/linux/tcp.h`` (Linux 4.19 and
later have every field read here but ``snd_wnd``, which is -1 before 5.4, ``rcv_wnd`` before
6.7 and ``total_rto`` before 6.7).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from typing import NamedTuple

from . import host

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_DONE, NLMSG_ERROR = 3, 2
INET_DIAG_INFO, INET_DIAG_VEGASINFO, INET_DIAG_SKMEMINFO, INET_DIAG_BBRINFO = 2, 3, 7, 16
#: Socket states (include/net/tcp_states.h) that still have their tcp_info: established, and
#: closed by one end with data or its FIN still to be acknowledged. A sender that closed with
#: data in its buffer keeps sending in FIN_WAIT1; TIME_WAIT (6) sockets carry no tcp_info.
TCP_ESTABLISHED, TCP_FIN_WAIT1, TCP_FIN_WAIT2, TCP_CLOSE_WAIT, TCP_LAST_ACK, TCP_CLOSING = 1, 4, 5, 8, 9, 11
ESTABLISHED_ONLY = 1 << TCP_ESTABLISHED
OPEN_OR_CLOSING = sum(
    1 << st for st in (TCP_ESTABLISHED, TCP_FIN_WAIT1, TCP_FIN_WAIT2, TCP_CLOSE_WAIT, TCP_LAST_ACK, TCP_CLOSING)
)
#: sizeof(struct inet_diag_msg): the attributes follow it.
INET_DIAG_MSG_LEN = 72
#: The shortest tcp_info read (up to tcpi_delivered).
TCP_INFO_MIN_LEN = 196
#: tcpi_total_rto (u16, Linux 6.7+): every retransmission timeout the socket had, the
#: recurring ones of one episode included (``tcp_retransmit_timer``).
TOTAL_RTO_OFF = 240


class TcpSample(NamedTuple):
    """One socket's state (segments, µs, bytes as tcp_info gives them)."""

    sport: int
    dport: int
    ca_state: int
    cwnd: int
    ssthresh: int
    rtt_us: int
    total_retrans: int
    lost: int  # tcpi_lost: segments marked lost and not yet resent or acknowledged
    in_flight: int  # unacked − sacked − lost + retrans: Linux's tcp_packets_in_flight
    delivered: int
    bytes_acked: int
    data_segs_out: int
    segs_in: int  # tcpi_segs_in: segments received (for a sender: its peer's ACKs)
    pacing_rate: int
    bbr_pacing_gain: float  # -1 unless the socket runs BBR
    rwnd_limited_us: int
    sndbuf_limited_us: int
    snd_wnd: int  # -1 on kernels before 5.4
    max_pacing_rate: int
    unacked: int  # tcpi_unacked: segments sent and not cumulatively acknowledged (packets_out)
    sacked: int  # tcpi_sacked: segments the peer holds out of order, by its SACKs
    reordering: int  # tcpi_reordering: the reordering the sender allows for (segments)
    reord_seen: int  # tcpi_reord_seen: reorderings it has seen (RACK then waits min_rtt/4)
    # The receiving side: its window state (bytes; rcv_wnd -1 before Linux 6.7, from
    # rcv_wup), the out-of-order segments it has queued so far (count), and its memory
    # (sk_meminfo: bytes of skb truesize queued, and the buffer they may take).
    rcv_ssthresh: int
    rcv_space: int
    rcv_wnd: int
    rcv_ooopack: int
    rmem_alloc: int
    rcvbuf: int
    total_rto: int  # tcpi_total_rto: retransmission timeouts so far (-1 before Linux 6.7)


FIELDS = TcpSample._fields


#: struct inet_diag_sockid (ports, addresses, interface, cookie) sits at this offset of an
#: inet_diag_msg and of an inet_diag_req_v2, and is this long.
SOCKID_OFF, SOCKID_LEN = 4, 48


def request(sockid: bytes | None = None, states: int = ESTABLISHED_ONLY) -> bytes:
    """The request for IPv4 TCP sockets in ``states`` (a mask) with tcp_info (and BBR's
    info): all of them (a dump) or the one ``sockid`` names (as a dump's message gave it)."""
    # idiag_ext is 8 bits: BBR answers the VEGASINFO request with its BBRINFO attribute.
    ext = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_VEGASINFO - 1)) | (1 << (INET_DIAG_SKMEMINFO - 1))
    req = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, ext, 0, states)
    req += sockid if sockid is not None else b"\0" * SOCKID_LEN
    flags = NLM_F_REQUEST | (NLM_F_DUMP if sockid is None else 0)
    hdr = struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, flags, 1, 0)
    return hdr + req


def parse(msg: bytes) -> TcpSample | None:
    """One inet_diag_msg with its attributes (None when it carries no tcp_info)."""
    sport, dport = struct.unpack_from("!HH", msg, 4)
    info, gain, mem = None, -1.0, (-1, -1)
    off = INET_DIAG_MSG_LEN
    while off + 4 <= len(msg):
        alen, atype = struct.unpack_from("=HH", msg, off)
        if alen < 4:
            break
        payload = msg[off + 4 : off + alen]
        if atype == INET_DIAG_INFO:
            info = payload
        elif atype == INET_DIAG_SKMEMINFO and len(payload) >= 8:
            mem = struct.unpack_from("=II", payload, 0)  # SK_MEMINFO_RMEM_ALLOC, SK_MEMINFO_RCVBUF
        elif atype == INET_DIAG_BBRINFO and len(payload) >= 20:
            gain = struct.unpack_from("=I", payload, 12)[0] / 256.0
        off += (alen + 3) & ~3
    if info is None or len(info) < TCP_INFO_MIN_LEN:
        return None
    ssthresh, cwnd = struct.unpack_from("=II", info, 76)
    pacing_rate, max_pacing_rate, bytes_acked = struct.unpack_from("=QQQ", info, 104)
    rwnd_limited, sndbuf_limited = struct.unpack_from("=QQ", info, 176)
    unacked, sacked, lost, retrans_out = struct.unpack_from("=IIII", info, 24)
    return TcpSample(
        sport=sport,
        dport=dport,
        ca_state=info[1],
        cwnd=cwnd,
        ssthresh=ssthresh,
        rtt_us=struct.unpack_from("=I", info, 68)[0],
        total_retrans=struct.unpack_from("=I", info, 100)[0],
        lost=lost,
        in_flight=unacked - sacked - lost + retrans_out,
        delivered=struct.unpack_from("=I", info, 192)[0],
        bytes_acked=bytes_acked,
        data_segs_out=struct.unpack_from("=I", info, 156)[0],
        segs_in=struct.unpack_from("=I", info, 140)[0],
        pacing_rate=pacing_rate,
        bbr_pacing_gain=gain,
        rwnd_limited_us=rwnd_limited,
        sndbuf_limited_us=sndbuf_limited,
        snd_wnd=struct.unpack_from("=I", info, 228)[0] if len(info) >= 232 else -1,
        max_pacing_rate=max_pacing_rate,
        unacked=unacked,
        sacked=sacked,
        reordering=struct.unpack_from("=I", info, 88)[0],
        reord_seen=struct.unpack_from("=I", info, 220)[0] if len(info) >= 224 else -1,
        rcv_ssthresh=struct.unpack_from("=I", info, 64)[0],
        rcv_space=struct.unpack_from("=I", info, 96)[0],
        rcv_wnd=struct.unpack_from("=I", info, 232)[0] if len(info) >= 236 else -1,
        rcv_ooopack=struct.unpack_from("=I", info, 224)[0] if len(info) >= 228 else -1,
        rmem_alloc=mem[0],
        rcvbuf=mem[1],
        total_rto=struct.unpack_from("=H", info, TOTAL_RTO_OFF)[0] if len(info) >= TOTAL_RTO_OFF + 2 else -1,
    )


def _messages(data: bytes):
    """The netlink messages' payloads in ``data``; None for the end of a dump or an error
    (a lookup of a socket that is gone is answered with ENOENT)."""
    off = 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if kind in (NLMSG_DONE, NLMSG_ERROR) or length < 16:
            yield None
            return
        yield data[off + 16 : off + length]
        off += (length + 3) & ~3


class TcpDiag:
    """A sock_diag socket opened inside namespace ``ns`` (it stays there) that finds the
    sockets in ``states`` (a mask: established ones unless told); close when done."""

    def __init__(self, ns: str, states: int = ESTABLISHED_ONLY) -> None:
        with host.in_namespace(ns):
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
        self.ns, self.states = ns, states
        self.known: list[bytes] = []  # the sockets the last poll(discover=True) found

    def poll(self, discover: bool, keep: Callable[[TcpSample], bool] | None = None) -> list[TcpSample]:
        """The namespace's sockets now: found afresh by a dump when ``discover``, else the
        ones the last discovery found and ``keep`` kept, each read by lookup (those gone are
        left out)."""
        if discover:
            found = self.find()
            self.known = [sockid for sockid, r in found.items() if keep is None or keep(r)]
            return list(found.values())
        return [r for sockid in self.known if (r := self.lookup(sockid)) is not None]

    def find(self) -> dict[bytes, TcpSample]:
        """Every IPv4 TCP socket of the namespace in :attr:`states`, by its sock_diag id."""
        self.sock.send(request(states=self.states))
        rows = {}
        while True:
            data = self.sock.recv(1 << 20)
            for msg in _messages(data):
                if msg is None:
                    return rows
                row = parse(msg)
                if row is not None:
                    rows[msg[SOCKID_OFF : SOCKID_OFF + SOCKID_LEN]] = row
            if not data:
                return rows

    def lookup(self, sockid: bytes) -> TcpSample | None:
        """The socket ``sockid`` names (a key of :meth:`find`); None once it is gone."""
        self.sock.send(request(sockid))
        msg = next(_messages(self.sock.recv(1 << 16)), None)
        return parse(msg) if msg is not None else None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> TcpDiag:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
