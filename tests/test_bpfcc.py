"""The project's BPF congestion controls (bpf/xl_*.bpf.c) on real Linux TCP.

* Registration: ``bpfcc.registered()`` makes the ``xl_*`` names usable by any socket and
  removes them on exit, also when the body raises.
* Laws: a bulk flow with each variant crosses an emulated drop-tail bottleneck (three
  namespaces: sender — router — receiver; HTB at 100 Mbit/s with a 200-packet pfifo on the
  router's egress, so losses recur every few hundred ms).  The sender's ``TCP_INFO`` is
  sampled every ~1 ms, and the samples are checked against the law of the simulator's
  variant (crates/sim/src/cc/*.rs, same constants):

  - reduction: at each loss event, the new ``ssthresh`` against the law applied to the
    window sampled just before it;
  - growth: between losses, the law is replayed from the window at the end of recovery,
    fed with the segments the kernel reports delivered (and, for H-TCP, the time since the
    loss), and its growth is compared with the window's.

  The same checks run on a Reno flow must fail for every law: they can tell the variants
  apart.

The path has no propagation delay (this kernel has no netem): the RTT (0.1–25 ms) is the
queue's, which does not matter for laws expressed per acknowledged segment, per RTT or per
second.  (tests/test_bpfcc_delay.py runs the same path with the NFQUEUE delay line,
``bottleneck_path(delay_s=…)``, for H-TCP's RTT-dependent backoff.)  Root, clang, bpftool,
iproute2 and ethtool are needed; without them the host tests are skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import platform
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pytest
from xferlab.backends.netns import VOID_RETRIES
from xferlab.netns import bpfcc, host, tcpdiag, topology, watch

TOOLS = ("clang", "bpftool", "ip", "tc", "ethtool")


def _host_missing() -> str | None:
    """Why this host cannot run the BPF tests, or None."""
    if os.geteuid() != 0:
        return "BPF congestion controls and namespaces need root"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"needs {', '.join(missing)} (Debian: apt-get install clang llvm libbpf-dev bpftool iproute2 ethtool)"
    if not bpfcc.VMLINUX_BTF.exists():
        return "the kernel has no BTF (/sys/kernel/btf/vmlinux)"
    return None


needs_host = pytest.mark.skipif(_host_missing() is not None, reason=_host_missing() or "")

# ---------------------------------------------------------------------------------------------
# The emulated path and the sampled flow


SND, RTR, RCV = "xl-bpfcc-snd", "xl-bpfcc-rtr", "xl-bpfcc-rcv"
RECEIVER = "10.251.2.2"
PORT = 5201
RATE = "100mbit"
#: pfifo limit in packets: windows peak near 200 segments, so Scalable stays above 100
#: (its a = 0.01 region) and HighSpeed well above Low_Window = 38.
QUEUE = 200
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def in_netns(ns: str) -> Iterator[None]:
    """Runs the body (this thread) inside namespace ``ns``: sockets made there stay there."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns}")
        yield
    finally:
        _libc.setns(own, CLONE_NEWNET)
        os.close(target)
        os.close(own)


@contextlib.contextmanager
def bottleneck_path(rate: str = RATE, queue: int = QUEUE, delay_s: float = 0.0) -> Iterator[None]:
    """sender —veth— router —veth— receiver; drop-tail bottleneck on the router's egress.

    The bottleneck is not on the sender's own egress: there TCP Small Queues would cap the
    queue the flow builds, and the queue would never overflow.  Offloads are off so the
    queue holds MTU-size packets.  With ``delay_s`` > 0, the delay line (``xferlab-delay``,
    as the netns backend runs it) holds the ACKs crossing the router towards the sender for
    ``delay_s``: the propagation delay of the path.  Call with :func:`host.host_lock` held.
    """
    names = (SND, RTR, RCV)
    delay_line: subprocess.Popen | None = None
    for ns in names:
        if ns in host.namespaces():
            host.delete_namespace(ns)
    try:
        for ns in names:
            host.sh(["ip", "netns", "add", ns])
            host.sh(["ip", "link", "set", "lo", "up"], ns=ns)
        host.sh(["ip", "link", "add", "xls", "netns", SND, "type", "veth", "peer", "name", "xlrs", "netns", RTR])
        host.sh(["ip", "link", "add", "xlrr", "netns", RTR, "type", "veth", "peer", "name", "xlr", "netns", RCV])
        for ns, dev, addr in (
            (SND, "xls", "10.251.1.1/24"),
            (RTR, "xlrs", "10.251.1.2/24"),
            (RTR, "xlrr", "10.251.2.1/24"),
            (RCV, "xlr", f"{RECEIVER}/24"),
        ):
            host.sh(["ip", "addr", "add", addr, "dev", dev], ns=ns)
            host.sh(["ip", "link", "set", dev, "up"], ns=ns)
            host.sh(["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off"], ns=ns)
            topology.steer_receive(ns, dev)  # or the path reorders: see void_because
        host.sh(["ip", "route", "add", "default", "via", "10.251.1.2"], ns=SND)
        host.sh(["ip", "route", "add", "default", "via", "10.251.2.1"], ns=RCV)
        host.sh(["sysctl", "-qw", "net.ipv4.ip_forward=1"], ns=RTR)
        tc = ["tc", "-n", RTR]
        host.sh([*tc, "qdisc", "add", "dev", "xlrr", "root", "handle", "1:", "htb", "default", "1"])
        burst = ["burst", "3028", "cburst", "3028"]  # two frames: a smooth 100 Mbit/s
        host.sh([*tc, "class", "add", "dev", "xlrr", "parent", "1:", "classid", "1:1", "htb", "rate", rate, *burst])
        host.sh([*tc, "qdisc", "add", "dev", "xlrr", "parent", "1:1", "handle", "10:", "pfifo", "limit", str(queue)])
        if delay_s > 0:
            delay_line = start_delay_line(delay_s)
        yield
    finally:
        if delay_line is not None:
            stop_delay_line(delay_line)
        for ns in names:
            host.delete_namespace(ns)


def delay_binary() -> str | None:
    """The delay line binary (as the netns backend finds it), or None when it is not built."""
    from xferlab.backends import netns as backend

    try:
        return backend.delay_binary()
    except backend.BackendError:
        return None


def start_delay_line(delay_s: float) -> subprocess.Popen:
    """NFQUEUE 0 in the router takes the packets from the receiver (the ACKs); ``xferlab-delay``
    accepts each ``delay_s`` after it arrived.  No --queue-bypass: without the daemon they are dropped."""
    binary = delay_binary()
    if binary is None:
        raise host.HostError("xferlab-delay is not built (cargo build --release -p xferlab-delayline)")
    host.sh(["iptables", "-w", "-A", "FORWARD", "-i", "xlrr", "-j", "NFQUEUE", "--queue-num", "0"], ns=RTR)
    cmd = [binary, "--queue", f"0:{delay_s * 1e6:.3f}us", "--rt-priority", "50"]
    p = subprocess.Popen(
        ["ip", "netns", "exec", RTR, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    ready = threading.Event()
    reader = threading.Thread(target=lambda: p.stdout.readline().strip() == b"ready" and ready.set(), daemon=True)
    reader.start()
    reader.join(10)
    if not ready.is_set():
        stop_delay_line(p)
        raise host.HostError(f"the delay line did not start: {p.stderr.read().decode().strip() or 'no ready line in 10 s'}")
    return p


def stop_delay_line(p: subprocess.Popen) -> None:
    """Stops the delay line started by :func:`start_delay_line` (by its PID only)."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@dataclass
class Trace:
    """TCP_INFO of the sending socket, one row per sample (~1 ms apart)."""

    t: np.ndarray  # s since the start
    ca_state: np.ndarray  # 0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss
    cwnd: np.ndarray  # segments
    ssthresh: np.ndarray  # segments
    delivered: np.ndarray  # segments delivered (cumulatively ACKed or SACKed), the cong_avoid count
    srtt: np.ndarray  # s
    min_rtt: np.ndarray  # s
    retrans: np.ndarray  # total retransmitted segments
    reord_seen: np.ndarray  # times the sender saw the path reorder (tcpi_reord_seen)
    t0: float = 0.0  # time.monotonic() (CLOCK_MONOTONIC) at t = 0


# struct tcp_info (include/uapi/linux/tcp.h): byte offsets of the fields sampled.
_TCPI = {
    "ca_state": (1, "B"),
    "unacked": (24, "I"),
    "sacked": (28, "I"),
    "lost": (32, "I"),
    "retrans_out": (36, "I"),
    "rcv_ssthresh": (64, "I"),
    "srtt": (68, "I"),
    "reordering": (88, "I"),
    "ssthresh": (76, "I"),
    "cwnd": (80, "I"),
    "rcv_space": (96, "I"),
    "retrans": (100, "I"),
    "segs_in": (140, "I"),
    "min_rtt": (148, "I"),
    "data_segs_out": (156, "I"),
    "delivered": (192, "I"),
    "reord_seen": (220, "I"),
    "total_rto": (240, "H"),
}


def _tcp_info(sock: socket.socket) -> tuple[int, ...]:
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return tuple(struct.unpack_from("=" + fmt, raw, off)[0] for off, fmt in _TCPI.values())


def connect(cc: str) -> tuple[socket.socket, socket.socket, socket.socket]:
    """The listener, the sender (congestion control ``cc``) and the receiver of a connection
    across the path."""
    with in_netns(RCV):
        listener = socket.create_server((RECEIVER, PORT))
    with in_netns(SND):
        sender = socket.socket()
    sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    sender.connect((RECEIVER, PORT))
    receiver, _ = listener.accept()
    return listener, sender, receiver


def drain(receiver: socket.socket) -> None:
    """Reads and discards until the connection ends or the socket is closed."""
    buf = bytearray(1 << 20)
    with contextlib.suppress(OSError):
        while receiver.recv_into(buf):
            pass


def bulk_flow(cc: str, seconds: float) -> Trace:
    """A bulk transfer sender → receiver with congestion control ``cc``; samples its TCP_INFO."""
    listener, sender, receiver = connect(cc)
    stop = threading.Event()

    def source() -> None:
        data = bytes(1 << 20)
        with contextlib.suppress(OSError):
            while not stop.is_set():
                sender.send(data)

    threads = [threading.Thread(target=drain, args=(receiver,), daemon=True), threading.Thread(target=source, daemon=True)]
    for th in threads:
        th.start()
    rows = []
    start = time.monotonic()
    try:
        while (now := time.monotonic()) - start < seconds:
            rows.append((now - start, *_tcp_info(sender)))
            time.sleep(0.001)
    finally:
        stop.set()
        sender.close()
        receiver.close()
        listener.close()
        for th in threads:
            th.join(timeout=2)
    a = np.array(rows, dtype=np.float64)
    cols = dict(zip(["t", *_TCPI], a.T, strict=True))
    cols["srtt"] = cols["srtt"] / 1e6
    cols["min_rtt"] = cols["min_rtt"] / 1e6
    return Trace(**{k: cols[k] for k in Trace.__dataclass_fields__ if k != "t0"}, t0=start)


def void_because(tr: Trace) -> str | None:
    """Why the law cannot be checked on the run, or None.  The fault is not the program's:

    * the kernel handed the socket a window no congestion control gives
      (bpfcc.impossible_window; VALIDATION.md §6, "Void kernel runs"), named by its first sample;
    * no congestion event: the sender never filled the buffer (a busy machine slowed it),
      so the law was never exercised;
    * the path reordered.  The kernel then enters recovery on a segment that was only late,
      calls the program's ``ssthresh`` (H-TCP restarts Δ, BIC moves W_max) and undoes the
      reduction a few ms later, often between two samples: the next epochs grow from a state
      the replayed law never had (a CI run: H-TCP at 0.55 × its law, BIC at 2.5 ×).  The
      simulator's path never reorders and its sender has no undo, so its law says nothing
      there.  bottleneck_path steers each veth's receive to one CPU, which stops this
      (measured: 2–23 reorderings per 6 s run without it on a 2-CPU machine, 0 with it).
    """
    bad = [i for i in range(len(tr.t)) if bpfcc.impossible_window(int(tr.ssthresh[i]), int(tr.cwnd[i]))]
    if bad:
        i = bad[0]
        return f"the kernel set ssthresh to {int(tr.ssthresh[i]):#x}, cwnd {int(tr.cwnd[i])} at {tr.t[i]:.2f} s"
    if tr.reord_seen[-1] > 0:
        i = int(np.argmax(tr.reord_seen > 0))
        return f"the path reordered ({int(tr.reord_seen[-1])} times, the first by {tr.t[i]:.2f} s)"
    if len(tr.t) and not (tr.ssthresh < bpfcc.SSTHRESH_INFINITE).any():
        # A loaded machine (a busy loop per core) once kept a sender from ever filling the
        # bottleneck's buffer: no loss, no law to check, not the program's fault.
        return f"no congestion event in {tr.t[-1]:.1f} s (the sender never filled the bottleneck's buffer)"
    return None


R = TypeVar("R")


def valid_run(run: Callable[[], R], trace_of: Callable[[R], Trace] = lambda r: r) -> R:
    """``run()`` again while its trace is void, as the netns backend does (one run and up to
    VOID_RETRIES more); marks the test xfail, naming each void attempt, when every one is."""
    void = []
    for _ in range(1 + VOID_RETRIES):
        r = run()
        why = void_because(trace_of(r))
        if why is None:
            return r
        void.append(why)
        print(f"\nvoid run, run again: {why}")
    pytest.xfail(f"{len(void)} runs in a row were void: " + "; ".join(void))


def run_flow(variant: str, seconds: float) -> Trace:
    def run() -> Trace:
        with host.host_lock(), bpfcc.registered([variant]), bottleneck_path():
            return bulk_flow(bpfcc.kernel_name(variant), seconds)

    return valid_run(run)


# ---------------------------------------------------------------------------------------------
# Loss events and epochs seen in a trace


@dataclass
class Event:
    """A congestion event (the kernel called ssthresh): the window before it and the ssthresh set."""

    i: int  # first sample showing it
    t: float
    cwnd_before: int  # -1 when not sampled (slow-start exit, back-to-back recoveries)
    ssthresh: int
    timeout: bool = False


@dataclass
class Epoch:
    """Congestion avoidance between the end of one recovery and the next loss event."""

    event: Event  # the loss event that started it
    idx: np.ndarray  # sample indices (Open/Disorder, cwnd ≥ ssthresh)


OPEN_STATES = (0, 1)


def _settled_ssthresh(tr: Trace, i: int) -> int:
    """The ssthresh a recovery starting at sample i holds: the median of its first three
    samples (the lower of two).  The kernel sets it once on entering recovery; one CI run (stop 16, BIC) showed a
    single sample reading 52 million segments amid values of ~165.  Since then impossible
    values void the run (void_because); 52 million is not impossible by that test, so
    one odd sample is still stepped over here, and a value that persists is checked."""
    j = i
    while j < min(len(tr.t), i + 3) and tr.ca_state[j] == 3:
        j += 1
    held = sorted(tr.ssthresh[i : max(j, i + 1)])
    return int(held[(len(held) - 1) // 2])


def events_and_epochs(tr: Trace) -> tuple[list[Event], list[Epoch]]:
    events: list[Event] = []
    n = len(tr.t)
    for i in range(1, n):
        state, before = tr.ca_state[i], tr.ca_state[i - 1]
        new_ssthresh = tr.ssthresh[i] != tr.ssthresh[i - 1]
        if state == 3 and before in OPEN_STATES:
            # The sample before shows the window the reduction saw, except at the slow-start
            # exit, where cwnd doubles per RTT.
            in_ca = tr.cwnd[i - 1] >= tr.ssthresh[i - 1]
            events.append(Event(i, tr.t[i], int(tr.cwnd[i - 1]) if in_ca else -1, _settled_ssthresh(tr, i)))
        elif state in (3, 4) and new_ssthresh:
            # A recovery ending and the next starting on the same ACK (cwnd had just been set
            # to ssthresh), or a retransmission timeout.
            events.append(Event(i, tr.t[i], -1, int(tr.ssthresh[i]), timeout=state == 4))
    epochs = []
    for k, ev in enumerate(events):
        end = events[k + 1].i if k + 1 < len(events) else n
        j = ev.i
        while j < end and tr.ca_state[j] not in OPEN_STATES:
            j += 1
        if any(tr.ca_state[j:end] == 4):  # a timeout inside: not a clean epoch
            continue
        idx = np.arange(j, end)
        idx = idx[(np.isin(tr.ca_state[idx], OPEN_STATES)) & (tr.cwnd[idx] >= tr.ssthresh[idx])]
        if len(idx) >= 50:
            epochs.append(Epoch(ev, idx))
    return events, epochs


# ---------------------------------------------------------------------------------------------
# The simulator's laws (crates/sim/src/cc/*.rs), replayed on the kernel's own ACK counts


class Law:
    """A variant's reduction and growth laws, as the simulator implements them."""

    name = ""

    def ssthresh(self, cwnd: int) -> int:
        raise NotImplementedError

    def start_epoch(self, ev: Event) -> None:
        """Per-epoch state after the loss event ``ev`` (W_max, the origin of Δ, …)."""

    def grow(self, w: float, acked: int, t: float) -> float:
        """The real-valued window after ``acked`` more segments, at time ``t``."""
        raise NotImplementedError


class ScalableLaw(Law):
    """Kelly 2003: +0.01 per acknowledged segment (one per min(w, 100)); × 0.875 on loss."""

    name = "scalable"

    def ssthresh(self, cwnd: int) -> int:
        return max(cwnd - (cwnd >> 3), 2)

    def grow(self, w: float, acked: int, t: float) -> float:
        return w + acked / min(max(math.floor(w), 1), 100)


class BicLaw(Law):
    """Xu, Harfoush, Rhee 2004: binary search to W_max, S_max 16, S_min 0.01; β = 819/1024."""

    name = "bic"
    BETA = 819 / 1024

    def __init__(self) -> None:
        self.w_max = 0.0
        self.round_left = 0
        self.round_cwnd = 1
        self.round_inc = 0.0

    def ssthresh(self, cwnd: int) -> int:
        return max(cwnd * 819 // 1024, 2) if cwnd > 14 else max(cwnd // 2, 2)

    def window_seen(self, ev: Event) -> float:
        """The window the reduction saw, read back from the kernel's own ssthresh.

        The sample before a loss can lag it by a segment or two (SSTHRESH_TOLERANCE), and
        fast convergence flips on one segment: a window of 201 against a W_max of 202 gives
        W_max 182, and a window of 202 keeps W_max 202 — a 10-segment difference in where the
        next epoch goes (a CI run: growth 1.22 × the law's).  β·cwnd is one-to-one at these
        windows, so the kernel's ssthresh names the window exactly; the slow-start exit is
        not sampled at all, and there it is all there is.
        """
        if ev.cwnd_before <= 0:
            return ev.ssthresh / self.BETA
        near = range(ev.cwnd_before - SSTHRESH_TOLERANCE, ev.cwnd_before + 4 * SSTHRESH_TOLERANCE)
        exact = [c for c in near if self.ssthresh(c) == ev.ssthresh]
        return min(exact, key=lambda c: abs(c - ev.cwnd_before), default=ev.cwnd_before)

    def start_epoch(self, ev: Event) -> None:
        # W_max with fast convergence, from the window the loss saw.
        cwnd = self.window_seen(ev)
        self.w_max = cwnd * (1 + self.BETA) / 2 if cwnd < self.w_max else cwnd
        if ev.timeout:
            self.w_max = 0.0  # a timeout forgets W_max
        self.round_left = 0

    def increment(self, w: float) -> float:
        if w <= 14:
            return 1.0
        inc = (self.w_max - w) / 2 if w < self.w_max else w - self.w_max
        return min(max(inc, 0.01), 16.0)

    def grow(self, w: float, acked: int, t: float) -> float:
        for _ in range(acked):
            if self.round_left == 0:
                self.round_cwnd = max(math.floor(w), 1)
                self.round_left = self.round_cwnd
                self.round_inc = self.increment(w)
            self.round_left -= 1
            w += self.round_inc / self.round_cwnd
        return w


class HighSpeedLaw(Law):
    """RFC 3649 §5: +a(w) per RTT, × (1 − b(w)) on loss (Low_Window 38 … High_Window 83000)."""

    name = "highspeed"

    @staticmethod
    def _pos(w: float) -> float:
        return (math.log(w) - math.log(38)) / (math.log(83000) - math.log(38))

    def b(self, w: float) -> float:
        return 0.5 if w <= 38 else (0.1 - 0.5) * self._pos(w) + 0.5

    def a(self, w: float) -> float:
        if w <= 38:
            return 1.0
        p = math.exp(self._pos(w) * (math.log(1e-7) - math.log(1e-3)) + math.log(1e-3))
        bw = self.b(w)
        return max(w * w * p * 2 * bw / (2 - bw), 1.0)

    def ssthresh(self, cwnd: int) -> int:
        return max(math.floor(cwnd * (1 - self.b(cwnd))), 2)

    def grow(self, w: float, acked: int, t: float) -> float:
        cwnd = max(math.floor(w), 1)
        return w + acked * self.a(cwnd) / cwnd


class HtcpLaw(Law):
    """Leith & Shorten 2004: +2(1−β)α(Δ) per RTT; β = RTT_min/RTT_max in [0.5, 0.8], or 0.5 by
    the throughput reset and whenever RTT_min ≤ 10 ms (the simulator's default mode)."""

    name = "htcp"

    def __init__(self, min_rtt: Callable[[], float]) -> None:
        self.min_rtt = min_rtt
        self.t0 = 0.0

    def beta(self) -> float:
        # This path has no propagation delay: RTT_min ≪ 10 ms, so the law gives β = 0.5
        # (the adaptive branch RTT_min/RTT_max would clamp to 0.5 here as well).
        return 0.5 if self.min_rtt() <= 0.010 else float("nan")

    @staticmethod
    def alpha(delta: float) -> float:
        if delta <= 1.0:
            return 1.0
        d = delta - 1.0
        return 1 + 10 * d + (d / 2) ** 2

    def ssthresh(self, cwnd: int) -> int:
        return max(math.floor(cwnd * self.beta()), 2)

    def start_epoch(self, ev: Event) -> None:
        self.t0 = ev.t

    def grow(self, w: float, acked: int, t: float) -> float:
        cwnd = max(math.floor(w), 1)
        return w + acked * 2 * (1 - self.beta()) * self.alpha(t - self.t0) / cwnd


# ---------------------------------------------------------------------------------------------
# Comparing a trace with a law

#: ssthresh may differ from the law applied to the sampled window by this many segments: the
#: window is sampled ~1 ms (more when the machine is busy) before the reduction, and in that
#: time each law grows it by at most about one segment at these windows (~8 segments are
#: ACKed per ms).  Measured: 0 to +2.  Reno's reductions miss the laws by 16 segments or more.
SSTHRESH_TOLERANCE = 3
#: Over an epoch, the window's growth must be within this fraction (plus one segment) of the
#: law's replayed growth.  What the replay cannot see: ACKs on which the kernel does not
#: call cong_avoid (not cwnd-limited right after recovery), the ~1 ms between the end of
#: recovery and the first sample, and the integer window (one segment of the 25–100 an epoch
#: grows).  Measured: 0.93–1.03 (docs/bpf-cc.md).  Reno's growth is 0.19–0.66 of these laws'
#: (a last, truncated epoch can come within 4 % of H-TCP's, whose α is 1 for a second).
GROWTH_TOLERANCE = 0.10


@dataclass
class Fit:
    law: str
    betas: list[float] = field(default_factory=list)  # ssthresh / cwnd before, per event
    beta_law: list[float] = field(default_factory=list)  # the law's ratio for the same windows
    ssthresh_errors: list[int] = field(default_factory=list)  # ssthresh − law, segments
    #: per event, the error allowed: SSTHRESH_TOLERANCE plus what the window can have grown
    #: between the last sample before the loss and the loss (more on a busy machine)
    ssthresh_slack: list[int] = field(default_factory=list)
    growth_ratios: list[float] = field(default_factory=list)  # window growth / law's growth, per epoch
    growth: list[tuple[float, float]] = field(default_factory=list)  # (window's, law's) growth per epoch
    deviations: list[float] = field(default_factory=list)  # largest |cwnd − law's window| in each epoch, segments
    detail: list[str] = field(default_factory=list)

    def reductions_follow_law(self) -> bool:
        pairs = zip(self.ssthresh_errors, self.ssthresh_slack, strict=True)
        return len(self.ssthresh_errors) >= 3 and all(abs(e) <= slack for e, slack in pairs)

    def growth_follows_law(self) -> bool:
        # One segment more: the window is an integer, the law's replay is not.
        return len(self.growth) >= 2 and all(abs(seen - law) <= GROWTH_TOLERANCE * law + 1 for seen, law in self.growth)

    def summary(self) -> str:
        return (
            f"{self.law}: β fitted {np.mean(self.betas):.4f} (law {np.mean(self.beta_law):.4f}) over {len(self.betas)} losses, "
            f"ssthresh − law ∈ [{min(self.ssthresh_errors, default=0)}, {max(self.ssthresh_errors, default=0)}] "
            f"(allowed ±{min(self.ssthresh_slack, default=0)}…{max(self.ssthresh_slack, default=0)}); "
            f"growth / law per epoch: {', '.join(f'{r:.3f}' for r in self.growth_ratios)}; "
            f"largest gap to the law's window {max(self.deviations, default=0):.0f} segments"
        )


#: The span over which the window's growth rate before a loss is measured.
GROWTH_RATE_SPAN_S = 0.02
#: The least time counted between two samples: a sample's time is read just before its
#: getsockopt, and on a loaded machine the thread can wait that long between the two.
SAMPLE_LAG_S = 0.005


def _growth_in_gap(tr: Trace, i: int) -> int:
    """How much the window may have grown, unseen, between sample i − 1 and the loss shown
    at sample i: its growth rate over the 20 ms before, times the gap (at least
    SAMPLE_LAG_S), rounded up.

    A loaded pass saw ssthresh 4 above BIC's law applied to the sample before, with the
    samples' times under 2 ms apart, where 3 was allowed: 5 segments had grown unseen. At
    these windows the laws grow about a segment per ms, so this adds about 5 segments; the
    other laws miss Reno's reductions by 16 or more."""
    gap = max(tr.t[i] - tr.t[i - 1], SAMPLE_LAG_S)
    j = int(np.searchsorted(tr.t, tr.t[i - 1] - GROWTH_RATE_SPAN_S))
    if i - 1 <= j:
        return 0
    rate = max(0.0, (tr.cwnd[i - 1] - tr.cwnd[j]) / (tr.t[i - 1] - tr.t[j]))
    return math.ceil(rate * gap)


def fit(tr: Trace, law: Law) -> Fit:
    events, epochs = events_and_epochs(tr)
    f = Fit(law.name)
    for ev in events:
        if ev.cwnd_before > 0:
            expect = law.ssthresh(ev.cwnd_before)
            f.betas.append(ev.ssthresh / ev.cwnd_before)
            f.beta_law.append(expect / ev.cwnd_before)
            f.ssthresh_errors.append(ev.ssthresh - expect)
            f.ssthresh_slack.append(SSTHRESH_TOLERANCE + _growth_in_gap(tr, ev.i))
    epoch_of = {id(ep.event): ep for ep in epochs}
    for ev in events:
        law.start_epoch(ev)  # every event: the law's state (BIC's W_max) depends on the history
        ep = epoch_of.get(id(ev))
        if ep is None or ev.cwnd_before < 0:
            # No clean epoch, or the one after the slow-start exit: there the window the loss
            # saw was not sampled (it doubles per RTT), so the law's W_max or Δ is uncertain.
            continue
        i0 = ep.idx[0]
        w = float(tr.cwnd[i0])
        deviation = 0.0
        for a, b in zip(ep.idx[:-1], ep.idx[1:], strict=True):
            w = law.grow(w, int(tr.delivered[b] - tr.delivered[a]), tr.t[b])
            deviation = max(deviation, abs(tr.cwnd[b] - math.floor(w)))
        grown = w - tr.cwnd[i0]
        seen = tr.cwnd[ep.idx[-1]] - tr.cwnd[i0]
        if grown >= 10:  # enough growth to measure a ratio
            f.growth_ratios.append(seen / grown)
            f.growth.append((seen, grown))
            f.deviations.append(deviation)
            f.detail.append(
                f"epoch at {tr.t[i0]:.2f} s: cwnd {tr.cwnd[i0]:.0f} → {tr.cwnd[ep.idx[-1]]:.0f}, "
                f"law → {tr.cwnd[i0] + grown:.1f}, largest gap {deviation:.0f}"
            )
    return f


def growth_by(tr: Trace, law: Law, key: Callable[[int, Event], float], edges: list[float]) -> list[tuple[float, float, float]]:
    """Window growth over the law's, grouped by ``key(sample, event)`` into bins (``edges``).

    Returns (mean key, window growth, law's growth) per bin with data; the law's growth is
    evaluated at the observed window and time of each sample interval.
    """
    events, epochs = events_and_epochs(tr)
    sums = [[0.0, 0.0, 0.0, 0] for _ in edges[:-1]]
    epoch_of = {id(ep.event): ep for ep in epochs}
    for ev in events:
        law.start_epoch(ev)
        ep = epoch_of.get(id(ev))
        if ep is None or ev.cwnd_before < 0:
            continue
        for a, b in zip(ep.idx[:-1], ep.idx[1:], strict=True):
            k = key(a, ev)
            j = int(np.searchsorted(edges, k, side="right")) - 1
            if 0 <= j < len(sums):
                w = float(tr.cwnd[a])
                sums[j][0] += k
                sums[j][1] += tr.cwnd[b] - tr.cwnd[a]
                sums[j][2] += law.grow(w, int(tr.delivered[b] - tr.delivered[a]), tr.t[b]) - w
                sums[j][3] += 1
    return [(s[0] / s[3], s[1], s[2]) for s in sums if s[3] > 0]


def fitted_parameters(tr: Trace, variant: str) -> str:
    """The law's parameter as fitted from the window (for the log and docs/bpf-cc.md)."""
    law = laws(tr)[variant]
    if variant == "scalable":
        ((w, seen, grown),) = growth_by(tr, law, lambda i, ev: tr.cwnd[i], [100, 1e9])
        return f"a fitted {0.01 * seen / grown:.5f} per acked segment (law 0.01) at mean cwnd {w:.0f}"
    if variant == "highspeed":
        rows = growth_by(tr, law, lambda i, ev: tr.cwnd[i], [100, 125, 150, 175, 200, 225])
        assert isinstance(law, HighSpeedLaw)
        return "a(w) fitted: " + ", ".join(f"w {w:.0f}: {law.a(w) * s / g:.2f} (law {law.a(w):.2f})" for w, s, g in rows)
    if variant == "htcp":
        rows = growth_by(tr, law, lambda i, ev: tr.t[i] - ev.t, [0, 0.5, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 2.0])
        alpha = HtcpLaw.alpha
        return "α(Δ) fitted: " + ", ".join(f"Δ {d:.2f} s: {alpha(d) * s / g:.2f} (law {alpha(d):.2f})" for d, s, g in rows)
    if variant == "bic":
        # Increment per RTT (Δcwnd per cwnd segments acknowledged), grouped by the increment
        # the replayed law chose for the round: S_max = 16 far below W_max, half the distance
        # near it, S_min (0.01) at it, then max probing.
        assert isinstance(law, BicLaw)
        edges = [0, 0.011, 1, 15.99, 1e9]
        sums = np.zeros((len(edges) - 1, 3))
        events, epochs = events_and_epochs(tr)
        epoch_of = {id(ep.event): ep for ep in epochs}
        for ev in events:
            law.start_epoch(ev)
            ep = epoch_of.get(id(ev))
            if ep is None or ev.cwnd_before < 0:
                continue
            w = float(tr.cwnd[ep.idx[0]])
            for a, b in zip(ep.idx[:-1], ep.idx[1:], strict=True):
                acked = int(tr.delivered[b] - tr.delivered[a])
                new = law.grow(w, acked, tr.t[b])
                j = int(np.searchsorted(edges, law.round_inc, side="right")) - 1
                sums[j] += (acked / tr.cwnd[a], tr.cwnd[b] - tr.cwnd[a], new - w)
                w = new
        names = ["S_min", "< 1", "1–16", "S_max"]
        return "increment per RTT fitted (law), by the law's round increment: " + ", ".join(
            f"{n}: {o / r:.2f} ({g / r:.2f}) over {r:.0f} RTTs" for n, (r, o, g) in zip(names, sums, strict=True) if r > 0
        )
    return ""


def laws(tr: Trace) -> dict[str, Law]:
    return {
        "scalable": ScalableLaw(),
        "bic": BicLaw(),
        "highspeed": HighSpeedLaw(),
        "htcp": HtcpLaw(lambda: float(tr.min_rtt[-1])),
    }


# ---------------------------------------------------------------------------------------------
# Tests


def test_kernel_names_and_prefix_guard():
    assert bpfcc.kernel_name("scalable") == "xl_scalable"
    assert [bpfcc.kernel_name(v) for v in ("reno", "cubic", "bbr")] == ["reno", "cubic", "bbr"]
    assert all(n.startswith(host.BPF_PREFIX) for n in bpfcc.KERNEL_NAMES.values())
    with pytest.raises(ValueError, match="unknown variant"):
        bpfcc.kernel_name("vegas")
    with pytest.raises(ValueError, match="refusing"):
        bpfcc.unregister(["cubic"])


def _usable(name: str) -> bool:
    with socket.socket() as s:
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
        except OSError:
            return False
        return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode() == name


@needs_host
def test_registration_and_unregistration():
    names = list(bpfcc.KERNEL_NAMES.values())
    with host.host_lock():
        try:
            with bpfcc.registered([*bpfcc.KERNEL_NAMES, "reno", "cubic"]) as got:
                assert got == names
                assert set(names) <= set(bpfcc.available())
                assert all(_usable(n) for n in names)
            assert not set(names) & set(bpfcc.available())
            assert not any(_usable(n) for n in names)
            # A leftover (registered outside this context) is replaced by a fresh
            # registration, and everything is removed on exit even when the body raises.
            bpfcc.register(["bic"])
            leftover = _struct_ops_id("xl_bic")
            with pytest.raises(RuntimeError), bpfcc.registered(["bic", "htcp"]):
                assert {"xl_bic", "xl_htcp"} <= set(bpfcc.available())
                assert _struct_ops_id("xl_bic") != leftover
                raise RuntimeError("the run failed")
            assert not {"xl_bic", "xl_htcp"} & set(bpfcc.available())
            with bpfcc.registered(["reno", "cubic"]) as got:  # built-ins need nothing
                assert got == []
        finally:
            bpfcc.unregister(names)  # whatever an assertion left behind


def _struct_ops_id(name: str) -> int:
    (entry,) = json.loads(host.sh(["bpftool", "-j", "struct_ops", "show", "name", name]))
    return entry["id"]


#: Seconds per flow: a few loss epochs after slow start.  H-TCP's epochs last ~1.5 s (α
#: stays 1 for the first second after each loss), so it runs longer.
SECONDS = {"scalable": 3.0, "bic": 4.0, "highspeed": 3.5, "htcp": 6.0, "reno": 6.0}


@needs_host
@pytest.mark.parametrize("variant", ["scalable", "bic", "highspeed", "htcp"])
def test_window_follows_the_simulators_law(variant):
    tr = run_flow(variant, SECONDS[variant])
    f = fit(tr, laws(tr)[variant])
    print("\n" + f.summary() + "\n  " + fitted_parameters(tr, variant) + "\n  " + "\n  ".join(f.detail))
    assert f.reductions_follow_law(), f.summary()
    assert f.growth_follows_law(), f.summary()


@needs_host
def test_reno_fails_every_law():
    """The checks can fail: Reno's window (½ on loss, +1 per RTT) matches none of the four laws.

    Its growth fails each law; its reduction fails all but H-TCP's, whose β is also 0.5 on a
    path without propagation delay.
    """
    tr = run_flow("reno", SECONDS["reno"])
    for name, law in laws(tr).items():
        f = fit(tr, law)
        print("\nreno vs " + f.summary())
        assert not f.growth_follows_law(), f"reno's growth passes the {name} law: {f.summary()}"
        if name != "htcp":
            assert not f.reductions_follow_law(), f"reno's reduction passes the {name} law: {f.summary()}"


# ---------------------------------------------------------------------------------------------
# The socket watch the netns backend runs beside every run (netns.watch.SocketWatch)


@contextlib.contextmanager
def idle_connection(cc: str, seconds: float) -> Iterator[tuple[socket.socket, int]]:
    """A connection that sent for ``seconds`` through the bottleneck (losses included) and is
    then idle with everything acknowledged: its tcp_info no longer changes. Yields the
    sending socket and the bytes it sent."""
    listener, sender, receiver = connect(cc)
    sink = threading.Thread(target=drain, args=(receiver,), daemon=True)
    sink.start()
    try:
        data, end, sent = bytes(1 << 16), time.monotonic() + seconds, 0
        while time.monotonic() < end:
            sent += sender.send(data)
        while struct.unpack_from("=I", sender.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256), 24)[0]:
            time.sleep(0.05)  # tcpi_unacked: wait until every segment is acknowledged
        yield sender, sent
    finally:
        sender.close()
        receiver.close()
        listener.close()
        sink.join(timeout=2)


@needs_host
def test_sock_diag_reads_what_the_socket_says():
    """tcpdiag's dump of the sender's namespace against the socket's own TCP_INFO, parsed here
    with this file's offsets: every field equal on an idle connection that had losses."""
    with host.host_lock(), bottleneck_path(), idle_connection("reno", 1.5) as (sender, sent):
        own = dict(zip(_TCPI, _tcp_info(sender), strict=True))
        own_rcvbuf = sender.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        port = sender.getsockname()[1]
        with tcpdiag.TcpDiag(SND) as diag:
            (seen,) = diag.find().values()
    assert (seen.sport, seen.dport) == (port, PORT)
    assert own["retrans"] > 0 and own["ssthresh"] < bpfcc.SSTHRESH_INFINITE, own  # it had losses
    got = {"ca_state": seen.ca_state, "srtt": seen.rtt_us, "ssthresh": seen.ssthresh, "cwnd": seen.cwnd}
    got |= {"retrans": seen.total_retrans, "delivered": seen.delivered, "data_segs_out": seen.data_segs_out}
    got |= {"unacked": seen.unacked, "sacked": seen.sacked, "rcv_ssthresh": seen.rcv_ssthresh, "rcv_space": seen.rcv_space}
    got |= {"reordering": seen.reordering, "reord_seen": seen.reord_seen, "segs_in": seen.segs_in}
    got |= {"total_rto": seen.total_rto}
    assert got == {k: own[k] for k in got}
    # Its memory (sk_meminfo): the buffer it may receive into, nothing queued on a sender.
    assert seen.rcvbuf == own_rcvbuf and seen.rmem_alloc == 0
    assert seen.lost == own["lost"] == 0
    # Idle with everything acknowledged: nothing in flight, by Linux's count.
    assert seen.in_flight == own["unacked"] - own["sacked"] - own["lost"] + own["retrans_out"] == 0
    assert seen.bytes_acked == sent + 1  # a 64-bit field further on; the SYN counts one
    # Each data segment was delivered once, or resent: at least delivered − 1 (the SYN is
    # delivered, not a data segment), at most that plus every retransmission. Not equal to
    # the sum: a retransmission of a segment that was not lost (a tail loss probe) is
    # delivered twice and counted once (a loaded pass: 13 690 against 13 490 + 202 − 1).
    assert seen.delivered - 1 <= seen.data_segs_out <= seen.delivered - 1 + seen.total_retrans


@needs_host
def test_window_watch_sees_a_window_and_names_the_socket(monkeypatch):
    """The watch finds a window its predicate calls impossible, on the right socket, and no
    sighting on the same kind of flow when the predicate is the real one."""
    with host.host_lock(), bottleneck_path():
        clean = watch.SocketWatch([SND], time.monotonic())
        clean.start()
        with idle_connection("reno", 1.0):
            pass
        clean.stop.set()
        clean.join()
        monkeypatch.setattr(bpfcc, "impossible_window", lambda ssthresh, cwnd: cwnd > 40)
        t0 = time.monotonic()
        w = watch.SocketWatch([SND], t0)
        w.start()
        with idle_connection("reno", 1.0) as (sender, _):
            w.join(timeout=5)
            port = sender.getsockname()[1]
    assert clean.sighting is None and clean.samples > 100, (clean.sighting, clean.samples)
    seen = w.sighting
    assert seen is not None and (seen.ns, seen.sport, seen.dport) == (SND, port, PORT)
    assert 40 < seen.cwnd < 10_000 and 0 < seen.t < 1.0


@needs_host
def test_the_watch_counts_a_connections_timeouts_as_its_socket_does():
    """A connection whose path is cut for 1.5 s while it sends times out (Linux backs off
    from 200 ms: about three RTOs); once the path is back and all is acknowledged, the
    watch's count for it equals the socket's own tcpi_total_rto."""
    if tuple(int(x) for x in platform.release().split(".")[:2]) < (6, 7):
        pytest.skip("tcpi_total_rto is Linux 6.7+")
    cut = ["FORWARD", "-j", "DROP"]
    with host.host_lock(), bottleneck_path():
        w = watch.SocketWatch([SND], time.monotonic(), interval=watch.RTO_WATCH_INTERVAL_S)
        w.start()
        listener, sender, receiver = connect("reno")
        sink = threading.Thread(target=drain, args=(receiver,), daemon=True)
        sink.start()
        try:
            sender.sendall(bytes(1 << 16))
            host.sh(["iptables", "-w", "-I", *cut], ns=RTR)
            sender.sendall(bytes(1 << 16))
            time.sleep(1.5)
            host.sh(["iptables", "-w", "-D", *cut], ns=RTR)
            while struct.unpack_from("=I", sender.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256), 24)[0]:
                time.sleep(0.05)  # tcpi_unacked: wait until every segment is acknowledged
            read, deadline = w.samples, time.monotonic() + 10
            while w.samples < read + 3:  # idle: the watch's next readings are final
                assert time.monotonic() < deadline, "the watch read nothing more"
                time.sleep(w.interval)
            own = dict(zip(_TCPI, _tcp_info(sender), strict=True))["total_rto"]
            w.stop.set()
            w.join()
            port = sender.getsockname()[1]
        finally:
            sender.close()
            receiver.close()
            listener.close()
            sink.join(timeout=2)
    assert own >= 2, own
    seen = {k: (r.total_rto, r.data_segs_out) for k, r in w.last.items()}
    assert w.timeouts(SND, PORT) == own and w.last[(SND, port, PORT)].total_rto == own, (own, port, seen)
    assert w.timeouts(SND, PORT + 1) is None  # no such connection was read


@needs_host
def test_a_dump_of_open_or_closing_sockets_finds_a_sender_that_shut_down():
    """A sender that shut its side down (FIN_WAIT2, its peer still open) still has its
    tcp_info: the watch's dump (OPEN_OR_CLOSING) finds it, an established-only dump not."""
    with host.host_lock(), bottleneck_path():
        listener, sender, receiver = connect("reno")
        try:
            sender.sendall(bytes(1 << 16))
            sender.shutdown(socket.SHUT_WR)
            got = 0
            while got < 1 << 16:
                got += len(receiver.recv(1 << 16))
            assert receiver.recv(1) == b""  # the FIN arrived
            deadline = time.monotonic() + 10
            while sender.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0] != tcpdiag.TCP_FIN_WAIT2:
                assert time.monotonic() < deadline, "the FIN's ACK never reached the sender"
                time.sleep(0.01)  # FIN_WAIT1 until the receiver's ACK of the FIN is back
            with tcpdiag.TcpDiag(SND) as est, tcpdiag.TcpDiag(SND, states=tcpdiag.OPEN_OR_CLOSING) as live:
                established, closing = est.find(), live.find()
        finally:
            sender.close()
            receiver.close()
            listener.close()
    assert established == {}
    (seen,) = closing.values()
    assert seen.dport == PORT and seen.data_segs_out >= 45 and seen.unacked == 0
