"""What the emulation backend does to the host: one lock, one name prefix, one command runner.

Everything the netns backend creates on the host is named with :data:`PREFIX` (network
namespaces, BPF congestion controls are ``xl_*``) and is created while holding the host lock
(:func:`host_lock`).  Holding the lock proves that no other xferlab emulation is running, so
whatever carries the prefix at that moment is a leftover of a crashed run and may be removed
(:func:`cleanup_leftovers`).  Nothing without the prefix is ever touched.

Namespaces are created, listed, entered and removed with pyroute2's ``netns`` module (what
``ip netns`` does, without a process per call), and configured over rtnetlink with an
``IPRoute`` whose socket lives in the namespace (:func:`rtnl`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import signal
import socket
import stat
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2 import netns as nslib

#: Prefix of every network namespace the backend creates.
PREFIX = "xl-"
#: Prefix of every BPF congestion control the backend registers (kernel names are ≤ 15 chars).
BPF_PREFIX = "xl_"
#: Host state: the lock file.  Every process a run starts lives inside one of its namespaces,
#: so deleting the namespaces (after killing their PIDs) leaves nothing behind.
STATE_DIR = Path(os.environ.get("XFERLAB_STATE_DIR", "/run/xferlab"))
LOCK_FILE = "netns.lock"


class HostError(Exception):
    """The host cannot run an emulation (not root, a tool missing, a command failed)."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise HostError("the netns backend needs root (network namespaces, qdiscs, iptables, BPF); run it with sudo")


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise HostError(f"the netns backend needs {', '.join(missing)} on PATH (Debian: apt-get install {' '.join(missing)})")


@contextlib.contextmanager
def host_lock(wait: bool = True, on_wait=None) -> Iterator[None]:
    """Exclusive lock over all emulation on this host (flock: released if the holder dies).

    ``wait=False`` fails at once when another emulation holds it; otherwise ``on_wait()`` is
    called (once) before blocking."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    try:  # never through a link someone put there (it would truncate the file it names)
        fd = os.open(STATE_DIR / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        raise HostError(f"{STATE_DIR / LOCK_FILE}: cannot be opened as the emulation lock ({e.strerror}; a link?)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise HostError(f"{STATE_DIR / LOCK_FILE}: not a regular file of uid {os.geteuid()}; remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            if not wait:
                raise HostError("another xferlab emulation is running on this host") from None
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def sh(args: Sequence[str], ns: str | None = None, check: bool = True, timeout: float = 30) -> str:
    """Runs a command (inside namespace ``ns`` when given) and returns its stdout."""
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise HostError(f"{args[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise HostError(f"`{' '.join(cmd)}` took more than {timeout:.0f} s") from None
    if check and p.returncode != 0:
        raise HostError(f"`{' '.join(cmd)}` failed: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def namespaces() -> list[str]:
    """Names of the host's named network namespaces (``ip netns list``)."""
    return sorted(nslib.listnetns())


def own_namespaces() -> list[str]:
    return [n for n in namespaces() if n.startswith(PREFIX)]


def pids_in_namespace(ns: str) -> list[int]:
    """PIDs of the processes inside ``ns`` (``ip netns pids``)."""
    return nslib.ns_pids().get(ns, [])


def kill_pids(pids: Sequence[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def delete_namespace(ns: str) -> None:
    """Kills what runs inside ``ns`` (by PID) and deletes it; its veths, qdiscs and rules go with it."""
    if not ns.startswith(PREFIX):  # never touch what is not ours
        raise ValueError(f"refusing to delete namespace {ns!r}: not created by xferlab")
    kill_pids(pids_in_namespace(ns))
    with contextlib.suppress(FileNotFoundError):  # already gone (or never fully created)
        nslib.remove(ns)


def create_namespace(ns: str) -> None:
    """Creates the named network namespace ``ns`` (``ip netns add``); fails if it exists."""
    if not ns.startswith(PREFIX):
        raise ValueError(f"refusing to create namespace {ns!r}: xferlab's names start with {PREFIX!r}")
    # pyroute2 forks a child that unshares and bind-mounts the namespace, then SIGKILLs it.
    # The child is a copy of this process: with SIGINT and SIGTERM blocked across the fork it
    # can never run this process's Python handlers (and go on as a second copy of it); here
    # they wait the few ms until the mask is restored.
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        nslib.create(ns)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def in_namespace(ns: str) -> Iterator[None]:
    """Runs the body with the calling thread inside namespace ``ns``, then brings it back.

    Only this thread moves (``setns``), so other threads are unaffected; sockets opened in the
    body stay in ``ns`` after it, and ``/proc/sys/net`` reads and writes in the body are ``ns``'s.
    Raises ``FileNotFoundError`` if ``ns`` does not exist (it is never created here)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            nslib.setns(ns, flags=0)
            yield
        finally:  # also when setns failed or a signal came right after it: going home is harmless
            nslib.setns(home)
    finally:
        os.close(home)


def rtnl(ns: str) -> IPRoute:
    """An rtnetlink handle (pyroute2 ``IPRoute``) on namespace ``ns``; close it when done.

    Its socket is opened with this thread inside ``ns`` and handed to pyroute2, so its requests
    go to ``ns``; use it from this thread (pyroute2 refuses another).  Not ``IPRoute(netns=ns)``:
    that forks a child per socket and stops it with SIGTERM, and a forked copy of a process with
    a Python SIGTERM handler (the backend's) can survive that and run on as a second copy of the
    parent (seen: the copy took the parent's netlink answers and the build hung)."""
    with in_namespace(ns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)
    try:
        return IPRoute(use_socket=sock, groups=0)  # groups=0: no event subscriptions
    except BaseException:
        sock.close()
        raise


def set_sysctls(ns: str, values: dict[str, str]) -> None:
    """Writes network sysctls (``net.ipv4.ip_forward`` …) of namespace ``ns`` (``sysctl -w``)."""
    with in_namespace(ns):
        for key, value in values.items():
            if not key.startswith("net."):  # only these are per namespace
                raise ValueError(f"{key}: not a per-namespace network sysctl")
            Path("/proc/sys", *key.split(".")).write_text(f"{value}\n")


#: The TCP counters of a namespace that tell how its receivers took their data: segments in
#: and out (Tcp), segments merged into the socket backlog's last one while the application
#: held the socket (`tcp_add_backlog`: one ACK for the merged run), segments merged into the
#: receive queue (`tcp_try_coalesce`), delayed ACKs sent by the timer (TcpExt).
TCP_COUNTERS = ("Tcp:InSegs", "Tcp:OutSegs", "TcpExt:TCPBacklogCoalesce", "TcpExt:TCPRcvCoalesce", "TcpExt:DelayedACKs")


def parse_proc_net(text: str) -> dict[str, int]:
    """``/proc/net/snmp`` or ``netstat`` (pairs of lines: names, values) as {"Group:Name": value}."""
    out: dict[str, int] = {}
    lines = text.splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        ks, vs = names.split(), values.split()
        if ks and vs and ks[0] == vs[0]:
            out |= {f"{ks[0]}{k}": int(v) for k, v in zip(ks[1:], vs[1:], strict=False) if v.lstrip("-").isdigit()}
    return out


def tcp_counters(ns: str) -> dict[str, int]:
    """The TCP_COUNTERS of namespace ``ns`` now (those its kernel does not keep are left out)."""
    with in_namespace(ns):
        text = "".join(Path("/proc/thread-self/net", f).read_text() for f in ("snmp", "netstat"))
    counters = parse_proc_net(text)
    return {k: counters[k] for k in TCP_COUNTERS if k in counters}


def own_bpf_congestion_controls() -> list[str]:
    """Names of registered struct_ops congestion controls carrying the xferlab prefix."""
    path = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    try:
        names = path.read_text().split()
    except OSError:
        return []
    return [n for n in names if n.startswith(BPF_PREFIX)]


def unregister_bpf(name: str) -> None:
    if not name.startswith(BPF_PREFIX):
        raise ValueError(f"refusing to unregister {name!r}: not registered by xferlab")
    if shutil.which("bpftool"):
        sh(["bpftool", "struct_ops", "unregister", "name", name], check=False)


def cleanup_leftovers() -> list[str]:
    """Removes what crashed runs left behind.  Call only while holding :func:`host_lock`.

    Returns a description of each thing removed (empty when the host was clean).
    """
    removed = []
    for ns in own_namespaces():
        delete_namespace(ns)
        removed.append(f"namespace {ns}")
    for name in own_bpf_congestion_controls():
        unregister_bpf(name)
        removed.append(f"congestion control {name}")
    return removed
