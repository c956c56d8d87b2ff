"""Samples the senders' TCP_INFO in the netns backend's namespaces every few milliseconds.

    python benches/fidelity_tcpinfo.py --out samples.csv [--interval 0.002] [--pattern 'xl-*-a*']

Runs as root beside an emulation (benches/fidelity.py starts it): it opens a sock_diag
netlink socket in every namespace named like the pattern as soon as it appears
(/run/netns), then dumps the established TCP sockets of each with their ``tcp_info`` and,
for BBR, ``tcp_bbr_info``, and writes one CSV row per socket and sample. iperf3 reports
TCP_INFO at most every 0.1 s, too coarse for a slow start of a few 10 ms round trips. It
runs until SIGTERM. Other emulations' namespaces may match too (the reader keeps the run
whose namespaces were seen last before its own run ended).
"""

from __future__ import annotations

import argparse
import ctypes
import fnmatch
import os
import signal
import socket
import struct
import sys
import time

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_DONE, NLMSG_ERROR = 3, 2
INET_DIAG_INFO, INET_DIAG_VEGASINFO, INET_DIAG_BBRINFO = 2, 3, 16
TCP_ESTABLISHED = 1
CLONE_NEWNET = 0x40000000

#: Columns written, after the sample time (ns, CLOCK_MONOTONIC) and the namespace.
FIELDS = (
    "sport",
    "dport",
    "ca_state",
    "cwnd",
    "ssthresh",
    "rtt_us",
    "total_retrans",
    "lost",
    "delivered",
    "bytes_acked",
    "data_segs_out",
    "pacing_rate",
    "bbr_pacing_gain",
    "rwnd_limited_us",
    "sndbuf_limited_us",
    "snd_wnd",
    "max_pacing_rate",
)


def _request() -> bytes:
    # idiag_ext is 8 bits: BBR answers the VEGASINFO request with its BBRINFO attribute.
    ext = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_VEGASINFO - 1))
    sockid = b"\0" * 48
    req = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, ext, 0, 1 << TCP_ESTABLISHED) + sockid
    hdr = struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
    return hdr + req


def _parse(msg: bytes) -> tuple | None:
    """One inet_diag_msg with its attributes → the FIELDS values (None if no tcp_info)."""
    sport, dport = struct.unpack_from("!HH", msg, 4)
    info, gain = None, -1.0
    off = 72  # sizeof(struct inet_diag_msg)
    while off + 4 <= len(msg):
        alen, atype = struct.unpack_from("=HH", msg, off)
        if alen < 4:
            break
        payload = msg[off + 4 : off + alen]
        if atype == INET_DIAG_INFO:
            info = payload
        elif atype == INET_DIAG_BBRINFO and len(payload) >= 20:
            gain = struct.unpack_from("=I", payload, 12)[0] / 256.0
        off += (alen + 3) & ~3
    if info is None or len(info) < 196:
        return None
    ca_state = info[1]
    ssthresh, cwnd = struct.unpack_from("=II", info, 76)
    rtt = struct.unpack_from("=I", info, 68)[0]
    lost = struct.unpack_from("=I", info, 32)[0]
    total_retrans = struct.unpack_from("=I", info, 100)[0]
    pacing_rate, max_pacing_rate, bytes_acked = struct.unpack_from("=QQQ", info, 104)
    data_segs_out = struct.unpack_from("=I", info, 156)[0]
    delivered = struct.unpack_from("=I", info, 192)[0]
    rwnd_limited, sndbuf_limited = struct.unpack_from("=QQ", info, 176)
    snd_wnd = struct.unpack_from("=I", info, 228)[0] if len(info) >= 232 else -1
    return (sport, dport, ca_state, cwnd, ssthresh, rtt, total_retrans, lost, delivered, bytes_acked, data_segs_out) + (
        pacing_rate,
        gain,
        rwnd_limited,
        sndbuf_limited,
        snd_wnd,
        max_pacing_rate,
    )


def dump(sock: socket.socket) -> list[tuple]:
    sock.send(_request())
    rows = []
    while True:
        data = sock.recv(1 << 20)
        off = 0
        while off + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, off)
            if kind in (NLMSG_DONE, NLMSG_ERROR) or length < 16:
                return rows
            row = _parse(data[off + 16 : off + length])
            if row is not None:
                rows.append(row)
            off += (length + 3) & ~3


def _open_in(ns: str) -> socket.socket:
    """A sock_diag socket bound to network namespace `ns` (created there, kept after)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns}")
        return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
    finally:
        libc.setns(own, CLONE_NEWNET)
        os.close(target)
        os.close(own)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.002)
    ap.add_argument("--pattern", default="xl-*-a*")
    ap.add_argument("--max-seconds", type=float, default=3600.0)
    args = ap.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    socks: dict[str, socket.socket] = {}
    t_end = time.monotonic() + args.max_seconds
    with open(args.out, "w") as out:
        out.write(",".join(("t_ns", "ns") + FIELDS) + "\n")
        while not stop and time.monotonic() < t_end:
            present = set(fnmatch.filter(os.listdir("/run/netns") if os.path.isdir("/run/netns") else [], args.pattern))
            for ns in sorted(present - socks.keys()):
                try:
                    socks[ns] = _open_in(ns)
                except OSError:
                    pass
            for ns, s in socks.items():
                if ns not in present:
                    continue
                t = time.monotonic_ns()
                try:
                    rows = dump(s)
                except OSError:
                    continue
                for row in rows:
                    out.write(f"{t},{ns}," + ",".join(str(v) for v in row) + "\n")
            time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
