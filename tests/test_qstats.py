"""The qdisc counters the link sampler reads (xferlab.netns.qstats), against a queue whose
every count is known in advance.

Two namespaces joined by a veth; the sender's egress is an HTB class at 80 bit/s with a
one-byte burst over a ``pfifo limit 20``.  A burst of 50 UDP datagrams of 1000 bytes: the
first leaves at once (a class may send while its tokens are not negative), and the next
would wait 100 s for tokens, so the pfifo then holds 20 and drops 29.
IPv6 is off and both addresses are permanent neighbours, so nothing else (router
solicitations, ARP) crosses that queue.  Root only.
"""

from __future__ import annotations

import contextlib
import os
import socket

import pytest
from xferlab.netns import host, qstats

SND, RCV = f"{host.PREFIX}qst-snd", f"{host.PREFIX}qst-rcv"
SND_ADDR, RCV_ADDR = "10.252.0.1", "10.252.0.2"
LIMIT, BURST, PAYLOAD = 20, 50, 1000
FRAME = PAYLOAD + 8 + 20 + 14  # UDP, IP and Ethernet headers: what the qdisc counts
NUD_PERMANENT = 0x80

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and qdiscs need root")


@pytest.fixture
def queue_path():
    """sender —veth— receiver, the sender's egress shaped to a standstill over a pfifo of LIMIT."""
    with host.host_lock():
        for ns in (SND, RCV):
            if ns in host.namespaces():
                host.delete_namespace(ns)
        try:
            with contextlib.ExitStack() as handles:
                build(handles)
            yield
        finally:
            for ns in (SND, RCV):
                host.delete_namespace(ns)


def build(handles: contextlib.ExitStack) -> None:
    nl = {}
    for ns in (SND, RCV):
        host.create_namespace(ns)
        nl[ns] = handles.enter_context(host.rtnl(ns))
        host.set_sysctls(ns, {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"})
    nl[SND].link("add", ifname="eth0", kind="veth", peer={"ifname": "eth0", "net_ns_fd": RCV})
    index = {}
    for ns, addr in ((SND, SND_ADDR), (RCV, RCV_ADDR)):
        (link,) = nl[ns].link("get", ifname="eth0")
        index[ns] = link["index"]
        nl[ns].addr("add", index=index[ns], address=addr, prefixlen=30)
        nl[ns].link("set", index=index[ns], state="up")
    # Permanent neighbours both ways: no ARP request or reply joins the queue (the
    # receiver answers the datagram with an ICMP error, which would otherwise need one).
    for ns, peer, addr in ((SND, RCV, RCV_ADDR), (RCV, SND, SND_ADDR)):
        mac = nl[peer].link("get", index=index[peer])[0].get_attr("IFLA_ADDRESS")
        nl[ns].neigh("add", dst=addr, lladdr=mac, ifindex=index[ns], state=NUD_PERMANENT)
    nl[SND].tc("add", "htb", index[SND], 0x10000, default=1)
    # 10 bytes/s, a one-byte burst: one datagram, then nothing for 100 s
    nl[SND].tc("add-class", "htb", index[SND], 0x10001, parent=0x10000, rate=10, burst=1, cburst=1, quantum=1514)
    nl[SND].tc("add", "pfifo", index[SND], 0x100000, parent=0x10001, limit=LIMIT)


def send_burst(count: int) -> None:
    with host.in_namespace(SND):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        for _ in range(count):
            # a full queue drops silently (no IP_RECVERR); never block the test on a full socket buffer
            sock.sendto(b"x" * PAYLOAD, socket.MSG_DONTWAIT, (RCV_ADDR, 9))


@needs_root
def test_both_readers_count_a_known_burst_exactly(queue_path):
    readers = [qstats.QdiscReader(SND, "eth0"), qstats.LibraryQdiscReader(SND, "eth0")]
    try:
        for r in readers:
            assert r.read()[1] == {"bytes": 0, "packets": 0, "drops": 0, "qlen": 0, "backlog": 0}
        send_burst(BURST)
        expected = {
            "bytes": FRAME,  # sent: the one datagram the class let through
            "packets": 1,
            "drops": BURST - 1 - LIMIT,
            "qlen": LIMIT,
            "backlog": LIMIT * FRAME,
        }
        for r in readers:
            stamp, q = r.read()
            assert q == expected, type(r).__name__
        assert qstats.qdisc_stats(SND, "eth0") == expected
        assert qstats.qdisc_stats(SND, "eth0", kind="htb")["drops"] == BURST - 1 - LIMIT  # HTB counts its leaf's drops
        assert qstats.qdisc_stats(SND, "lo") is None  # lo has no pfifo
    finally:
        for r in readers:
            r.close()


@needs_root
def test_reader_leaves_the_thread_home_and_never_creates_a_namespace(queue_path):
    home = os.stat("/proc/thread-self/ns/net").st_ino
    r = qstats.QdiscReader(SND, "eth0")
    r.close()
    assert os.stat("/proc/thread-self/ns/net").st_ino == home
    missing = f"{host.PREFIX}qst-missing"
    for reader in (qstats.QdiscReader, qstats.LibraryQdiscReader):
        with pytest.raises(OSError):
            reader(missing, "eth0")
        assert missing not in host.namespaces()
    with pytest.raises(OSError):
        qstats.QdiscReader(SND, "nonexistent0")
    assert os.stat("/proc/thread-self/ns/net").st_ino == home
