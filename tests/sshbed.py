"""A testbed of real hosts for the ssh backend, made of network namespaces on this machine.

::

    controller (this namespace) ── 10.250.j.0/24 control links ── sshd in every host namespace

    s0 ─┐  left                        right  ┌─ r0        senders 10.251.0.k+1, receivers 10.252.0.k+1
    s1 ─┴─ [bridge] ─ router rt ─ [bridge] ───┴─ r1        access links: HTB at the access rate on eth0
                      FORWARD right→left: NFQUEUE → xferlab-delay (the RTT, on the ACK path)

Each host namespace runs its own ``sshd`` (Debian's openssh-server) on its control address,
with a host key made for the test; the controller logs in as root with a client key made for
the test and checks host keys against a ``known_hosts`` written here.  The router's egress
devices (``right``: towards the receivers, ``left``: towards the senders) are left to the
ssh backend, which shapes the bottleneck there as the inventory's router.  The delay line
delays everything routed towards the senders by the RTT.

Everything is named with :data:`PREFIX` (namespaces ``xlssh-<id>-*``, root-side veths
``xlssh<id>c<j>``) so that a crashed test's leftovers are found (:func:`remove_leftovers`);
every process started here is stopped by its PID.  Used by tests/test_ssh.py and by
benches/ssh_three_backends.py.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import yaml

#: Names of everything the bed makes, and the first two bytes of its control links' /24s.
#: ``XFERLAB_SSHBED=PREFIX:NET`` (e.g. ``xlsst:10.240``) gives a second bed that can run beside
#: a test suite's (a developer's check; tests that name 10.250 addresses then do not hold).
PREFIX, CONTROL_NET = os.environ.get("XFERLAB_SSHBED", "xlssh:10.250").split(":")
ROOT = Path(__file__).resolve().parent.parent
SSHD = "/usr/sbin/sshd"
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def stateless_faketime(command: list[str]) -> list[str]:
    """``command`` with a private, read-only /dev/shm. libfaketime (0.9.10) shares a
    semaphore between a process and its descendants through /dev/shm, and a forked child that
    exits (a shell's ``$(...)``) unlinks it under its parent: the next program the parent starts
    dies with "sem_open failed" (5 in 300 ``ip route get`` in a loop here; CI once lost a
    route that way). Where it cannot create the semaphore it shares nothing, silently, and an
    offset clock needs no sharing."""
    mount = "mount -t tmpfs -o ro,size=64k xl-noshm /dev/shm && exec " + " ".join(map(shlex.quote, command))
    return ["unshare", "--mount", "sh", "-c", mount]


def sh(*args: str, ns: str | None = None, check: bool = True) -> str:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {p.stderr.strip()}")
    return p.stdout


def namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX + "-")]


def pids_in(ns: str) -> list[int]:
    return [int(x) for x in sh("ip", "netns", "pids", ns, check=False).split()]


def kill(pids) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def remove_leftovers() -> list[str]:
    """Removes what an earlier testbed left (its namespaces, their processes, by PID)."""
    gone = []
    for ns in namespaces():
        kill(pids_in(ns))
        sh("ip", "netns", "del", ns, check=False)
        gone.append(ns)
    for line in sh("ip", "-o", "link", "show", check=False).splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(PREFIX):
            sh("ip", "link", "del", name, check=False)
            gone.append(name)
    return gone


def missing() -> str | None:
    """Why this machine cannot build the testbed, or None."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ip", "tc", "iptables", "ethtool", "iperf3", "ssh-keygen", "ss", "setsid"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not os.path.exists(SSHD):
        return "needs openssh-server (sshd)"
    if not os.path.exists(FAKETIME_LIB):
        return "needs faketime (libfaketime)"
    for built in ("xferlab-delay", "xfer"):
        if not (ROOT / "target" / "release" / built).exists():
            return f"needs target/release/{built} (make build)"
    return None


class Bed:
    """``pairs`` sender/receiver hosts and a router, each with its sshd; see the module."""

    def __init__(self, pairs: int = 2, access_bps: float = 100e6, rtt_s: float = 0.02, clock_skew: dict | None = None):
        self.id = uuid.uuid4().hex[:4]
        self.pairs, self.access_bps, self.rtt_s = pairs, access_bps, rtt_s
        self.clock_skew = clock_skew or {}  # host → FAKETIME offset ("+3s"): its processes see a shifted clock
        self.dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-{self.id}-"))
        self.hosts = [f"s{k}" for k in range(pairs)] + [f"r{k}" for k in range(pairs)] + ["rt"]
        self.sshd: dict[str, subprocess.Popen] = {}
        self.delay: subprocess.Popen | None = None

    # names and addresses -------------------------------------------------------------
    def ns(self, host: str) -> str:
        return f"{PREFIX}-{self.id}-{host}"

    def ctl(self, host: str) -> str:
        return f"{CONTROL_NET}.{self.hosts.index(host)}.1"

    @staticmethod
    def data(host: str) -> str:
        if host == "rt":
            return "10.252.0.254"
        return f"10.{251 if host[0] == 's' else 252}.0.{int(host[1:]) + 1}"

    # build ----------------------------------------------------------------------------
    def __enter__(self) -> Bed:
        try:
            self.build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def build(self) -> None:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation folder
        for h in self.hosts:
            sh("ip", "netns", "add", self.ns(h))
            sh("ip", "link", "set", "lo", "up", ns=self.ns(h))
        for j, h in enumerate(self.hosts):
            self._control(j, h)
        self._data_plane()
        self._keys()
        for h in self.hosts:
            self.start_sshd(h)
        self._start_delay()
        self.write_inventory(self.dir / "hosts.yaml")

    def _control(self, j: int, h: str) -> None:
        root_end = f"{PREFIX}{self.id}c{j}"
        sh("ip", "link", "add", root_end, "type", "veth", "peer", "name", "ctl", "netns", self.ns(h))
        sh("ip", "addr", "add", f"{CONTROL_NET}.{j}.254/24", "dev", root_end)
        sh("ip", "link", "set", root_end, "up")
        sh("ip", "addr", "add", f"{self.ctl(h)}/24", "dev", "ctl", ns=self.ns(h))
        sh("ip", "link", "set", "ctl", "up", ns=self.ns(h))

    def _data_plane(self) -> None:
        rt = self.ns("rt")
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=rt)
        for side, net in (("left", "10.251.0"), ("right", "10.252.0")):
            sh("ip", "link", "add", side, "type", "bridge", ns=rt)
            sh("ip", "addr", "add", f"{net}.254/24", "dev", side, ns=rt)
            sh("ip", "link", "set", side, "up", ns=rt)
        for h in self.hosts[:-1]:
            side, other = ("left", "10.252.0.0/24") if h[0] == "s" else ("right", "10.251.0.0/24")
            sh("ip", "link", "add", h, "type", "veth", "peer", "name", "eth0", "netns", self.ns(h), ns=rt)
            sh("ip", "link", "set", h, "master", side, "up", ns=rt)
            sh("ip", "addr", "add", f"{self.data(h)}/24", "dev", "eth0", ns=self.ns(h))
            sh("ip", "link", "set", "eth0", "up", ns=self.ns(h))
            gateway = "10.251.0.254" if h[0] == "s" else "10.252.0.254"
            sh("ip", "route", "add", other, "via", gateway, ns=self.ns(h))
            # Wires carry packets, not 64 KB super-packets: a queue of B packets holds B packets.
            for ns, dev in ((rt, h), (self.ns(h), "eth0")):
                sh("ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off", ns=ns, check=False)
            self._access_link(h)
        for side in ("left", "right"):
            sh("ethtool", "-K", side, "tso", "off", "gso", "off", "gro", "off", "tx", "off", ns=rt, check=False)

    def _access_link(self, h: str) -> None:
        """The host's NIC at the access rate: HTB over a pfifo of 1000 packets, counting the wire's 24 bytes."""
        rate = f"{int(self.access_bps)}bit"
        ns = self.ns(h)
        sh("tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1", ns=ns)
        sh("tc", "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate", rate, "burst", "15140",
           "cburst", "15140", "overhead", "24", "mtu", "1600", ns=ns)  # fmt: skip
        sh("tc", "qdisc", "add", "dev", "eth0", "parent", "1:1", "pfifo", "limit", "1000", ns=ns)

    def _keys(self) -> None:
        self.key = self.dir / "id_ed25519"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "xferlab-test-client", "-f", str(self.key))
        (self.dir / "authorized_keys").write_text((self.dir / "id_ed25519.pub").read_text())
        lines = []
        for h in self.hosts:
            k = self.dir / f"hostkey-{h}"
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"xferlab-test-{h}", "-f", str(k))
            lines.append(f"{self.ctl(h)} {' '.join(Path(f'{k}.pub').read_text().split()[:2])}")
        (self.dir / "known_hosts").write_text("\n".join(lines) + "\n")

    def fingerprint(self, host: str) -> str:
        out = sh("ssh-keygen", "-l", "-E", "sha256", "-f", str(self.dir / f"hostkey-{host}.pub"))
        return out.split()[1]

    def start_sshd(self, h: str) -> None:
        cfg = self.dir / f"sshd-{h}.conf"
        lines = [
            f"ListenAddress {self.ctl(h)}",
            "Port 22",
            f"HostKey {self.dir / f'hostkey-{h}'}",
            f"PidFile {self.dir / f'sshd-{h}.pid'}",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "LogLevel ERROR",
        ]
        # A home of the bed's own: root's login shell (bash) sources ~/.bashrc for every SSH
        # command, and a developer's there (pyenv's rehash, which waits for a lock a killed
        # session can leave behind) once hung every command of a run for a minute.
        home = self.dir / f"home-{h}"
        home.mkdir(exist_ok=True)
        env = [f"HOME={home}"]
        if h in self.clock_skew:
            env += [f"LD_PRELOAD={FAKETIME_LIB}", f"FAKETIME={self.clock_skew[h]}", "FAKETIME_DONT_FAKE_MONOTONIC=1"]
        lines.append("SetEnv " + " ".join(env))
        cfg.write_text("\n".join(lines) + "\n")
        log = open(self.dir / f"sshd-{h}.log", "ab")
        args = ["ip", "netns", "exec", self.ns(h), SSHD, "-D", "-e", "-f", str(cfg)]
        if h in self.clock_skew:
            args = ["ip", "netns", "exec", self.ns(h), *stateless_faketime(args[4:])]
        self.sshd[h] = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection((self.ctl(h), 22), timeout=0.5):
                return
            if self.sshd[h].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd of {h} did not start: {(self.dir / f'sshd-{h}.log').read_text()}")
            time.sleep(0.05)

    def _start_delay(self) -> None:
        rt = self.ns("rt")
        for k in range(self.pairs):
            sh("iptables", "-w", "-A", "FORWARD", "-i", "right", "-o", "left", "-d", self.data(f"s{k}"),
               "-j", "NFQUEUE", "--queue-num", "0", ns=rt)  # fmt: skip
        binary = str(ROOT / "target" / "release" / "xferlab-delay")
        args = [binary, "--queue", f"0:{self.rtt_s * 1e6:.0f}us", "--rt-priority", "50", "--stats", str(self.dir / "delay.json")]
        self.delay = subprocess.Popen(["ip", "netns", "exec", rt, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ready = threading.Event()
        threading.Thread(target=lambda: self.delay.stdout.readline().strip() == b"ready" and ready.set(), daemon=True).start()
        if not ready.wait(10):
            raise RuntimeError(f"the delay line did not start: {self.delay.stderr.read1().decode()}")

    # the inventory ----------------------------------------------------------------------
    def inventory(self, pin: str | None = None, **options) -> dict:
        hosts = {}
        for h in self.hosts:
            hosts[h] = {"ssh": self.ctl(h), "data": self.data(h)}
            if h == pin:
                hosts[h]["fingerprint"] = self.fingerprint(h)
        return {
            "name": f"testbed {self.id}",
            "defaults": {"user": "root", "key": str(self.key), "known_hosts": str(self.dir / "known_hosts")},
            "hosts": hosts,
            "senders": [f"s{k}" for k in range(self.pairs)],
            "receivers": [f"r{k}" for k in range(self.pairs)],
            "router": {"host": "rt", "bottleneck": "right", "reverse": "left"},
            "options": {"calibration": "1s", **options},
        }

    def write_inventory(self, path: Path, data: dict | None = None) -> Path:
        path.write_text(yaml.safe_dump(data if data is not None else self.inventory(), sort_keys=False))
        return path

    # faults -------------------------------------------------------------------------------
    def kill_host(self, h: str) -> list[int]:
        """The host dies: every process in its namespace (its sshd, its sessions, its tools) is killed."""
        pids = pids_in(self.ns(h))
        kill(pids)
        if h in self.sshd:
            self.sshd.pop(h).wait()
        return pids

    # looking at a host, from outside ---------------------------------------------------
    def sysctl(self, h: str, key: str) -> str:
        return sh("cat", f"/proc/sys/{key.replace('.', '/')}", ns=self.ns(h)).strip()

    def qdisc(self, h: str, dev: str) -> str:
        return sh("tc", "qdisc", "show", "dev", dev, ns=self.ns(h))

    def routes(self, h: str) -> str:
        return sh("ip", "route", "show", ns=self.ns(h))

    def state(self) -> dict:
        """What the backend may change, per host: sysctls, routes, root qdiscs of the router,
        the end hosts' qdiscs on eth0 (token buckets add a clsact there) and their ifb devices."""
        out = {}
        for h in self.hosts:
            keys = ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_no_metrics_save", "net.ipv4.tcp_congestion_control")
            out[h] = {k: self.sysctl(h, k) for k in keys}
            out[h]["routes"] = self.routes(h)
            if h == "rt":
                out[h]["qdisc"] = self.qdisc(h, "right") + self.qdisc(h, "left")
            else:
                out[h]["qdisc"] = self.qdisc(h, "eth0")
                out[h]["ifb"] = sh("ip", "-o", "link", "show", "type", "ifb", ns=self.ns(h))
        return out

    def tools(self, with_args: bool = False) -> list[str]:
        """Traffic tools running in the testbed's hosts (iperf3, xfer): "host:name", or
        "host:name args…" with ``with_args``."""
        names = []
        for h in self.hosts:
            for pid in pids_in(self.ns(h)):
                with contextlib.suppress(OSError):
                    name = Path(f"/proc/{pid}/comm").read_text().strip()
                    if name in ("iperf3", "xfer"):
                        args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                        names.append(f"{h}:{name} {args}" if with_args else f"{h}:{name}")
        return names

    # teardown -----------------------------------------------------------------------------
    def teardown(self) -> None:
        for p in [*self.sshd.values(), self.delay]:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        self.sshd.clear()
        for h in self.hosts:
            kill(pids_in(self.ns(h)))
            sh("ip", "netns", "del", self.ns(h), check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
