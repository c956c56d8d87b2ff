"""ACK trains at the sender of a netns run: what CUBIC's HyStart sees on the kernel.

    sudo .venv/bin/python benches/ack_trains.py cubic:10:1.0bdp:1 [--seconds 2] [--until 0.1]

Runs one duration case of benches/fidelity.py on the netns backend, with ``tcpdump``
capturing headers on the first sender's interface (started as its namespace appears), then
prints, from the first data segment on, each burst of ACKs (ACKs less than ``--gap`` apart):
its span, how many ACKs, how many segments they acknowledge, and the data sent in reply.
HyStart's ACK-train test (Linux ``hystart_update``) fires when the ACKs of one round keep
coming within 2 ms of each other for longer than (min RTT + ``hystart_ack_delay``)/2.
Needs root and tcpdump. The capture is kept (``--pcap``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from xferlab.fidelity import kernel
from xferlab.fidelity.matrix import Case

ROOT = Path(__file__).resolve().parent.parent

ETH_IPV4, ETH_LEN = b"\x08\x00", 14
PCAP_NS_MAGIC = 0xA1B23C4D


def capture_when_up(pcap: Path, pattern: str, started: list, timeout_s: float = 60.0, dev: str = "eth0") -> None:
    """Starts tcpdump on ``dev`` in the first new namespace ending in ``pattern`` (puts the
    Popen in ``started``)."""
    before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        new = [n for n in (os.listdir("/run/netns") if os.path.isdir("/run/netns") else []) if n not in before]
        ns = next((n for n in new if n.endswith(pattern)), None)
        if ns:
            cmd = ["ip", "netns", "exec", ns, "tcpdump", "-i", dev, "-s", "96", "-U", "-w", str(pcap), "tcp"]
            for _ in range(400):  # the interface appears just after the namespace
                if subprocess.run(["ip", "-n", ns, "link", "show", dev], capture_output=True).returncode == 0:
                    break
                time.sleep(0.005)
            started.append(subprocess.Popen(cmd, stderr=subprocess.DEVNULL))
            return
        time.sleep(0.005)


def captured_run(case: Case, seconds: float, pcap: Path, pattern: str, dev: str, kind: str = "duration") -> dict:
    """One netns run of ``case`` (``kind``: a duration run of ``seconds``, iperf3's, or its
    volume run, xfer's) with tcpdump on ``dev`` of the namespace ending in ``pattern``
    writing ``pcap``; the run's summary."""
    pcap.unlink(missing_ok=True)
    started: list = []
    watcher = threading.Thread(target=capture_when_up, args=(pcap, pattern, started, 60.0, dev), daemon=True)
    watcher.start()
    try:
        return kernel.run_netns(case, kind, duration_s=seconds, samples_dir=Path(tempfile.mkdtemp()))
    finally:
        watcher.join(timeout=1)
        for p in started:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=10)


def packets(path: Path):
    """(time s, sport, dport, seq, ack, payload bytes) of each IPv4 TCP packet of a pcap."""
    b = path.read_bytes()
    scale = 1e9 if struct.unpack_from("<I", b)[0] == PCAP_NS_MAGIC else 1e6
    off = 24
    while off + 16 <= len(b):
        sec, frac, incl, _ = struct.unpack_from("<IIII", b, off)
        p = b[off + 16 : off + 16 + incl]
        off += 16 + incl
        if len(p) < ETH_LEN + 20 or p[12:14] != ETH_IPV4:
            continue
        ihl = (p[ETH_LEN] & 15) * 4
        total = struct.unpack_from(">H", p, ETH_LEN + 2)[0]
        tcp = ETH_LEN + ihl
        if len(p) < tcp + 13:  # a record cut short when the capture was stopped
            continue
        sport, dport, seq, ack = struct.unpack_from(">HHII", p, tcp)
        doff = (p[tcp + 12] >> 4) * 4
        yield sec + frac / scale, sport, dport, seq, ack, total - ihl - doff


def trains(path: Path, until_s: float, gap_ms: float, mss: int) -> list[str]:
    pk = list(packets(path))
    volume: dict[tuple, int] = {}
    for _, sp, dp, _, _, pay in pk:
        volume[(sp, dp)] = volume.get((sp, dp), 0) + pay
    sp, dp = max(volume, key=volume.get)  # the data connection (iperf3's control one is small)
    data = [(t, seq) for t, a, b, seq, _, pay in pk if (a, b) == (sp, dp) and pay > 0]
    acks = [(t, ack) for t, a, b, _, ack, _ in pk if (a, b) == (dp, sp)]
    t0 = data[0][0]
    acks = [(t - t0, a) for t, a in acks if 0 <= t - t0 <= until_s]
    sent = [t - t0 for t, _ in data]
    out, group, base = [], [acks[0]], data[0][1]
    for prev, cur in zip(acks, acks[1:], strict=False):
        if (cur[0] - prev[0]) * 1e3 > gap_ms:
            out.append(_describe(group, base, sent, mss))
            base, group = group[-1][1], []
        group.append(cur)
    out.append(_describe(group, base, sent, mss))
    return out


def _describe(group: list, base: int, sent: list, mss: int) -> str:
    """One train: its span, its ACKs, the segments they acknowledge (from `base`, the
    acknowledgement before the train), the segments sent in reply."""
    t_a, t_b = group[0][0], group[-1][0]
    segs = ((group[-1][1] - base) % 2**32) / mss
    replies = sum(t_a <= t <= t_b + 0.0005 for t in sent)
    return (
        f"{t_a * 1e3:9.3f} – {t_b * 1e3:9.3f} ms ({(t_b - t_a) * 1e3:6.3f} ms): {len(group):4d} ACKs "
        f"for {segs:6.0f} segments; {replies:4d} segments sent meanwhile"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", help="a fidelity case key, e.g. cubic:10:1.0bdp:1")
    ap.add_argument("--seconds", type=float, default=2.0, help="the run's duration")
    ap.add_argument("--until", type=float, default=0.1, help="print the ACKs of the first this many seconds")
    ap.add_argument("--gap", type=float, default=2.0, help="ms between ACKs that ends a train (hystart_ack_delta_us)")
    ap.add_argument("--pcap", default="/tmp/xferlab-ack-trains.pcap")
    args = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("tcpdump"):
        print("error: needs root and tcpdump", file=sys.stderr)
        return 2
    v, rtt, buf, n = args.case.split(":")
    case = Case(v, int(rtt), buf, int(n))
    pcap = Path(args.pcap)
    res = captured_run(case, args.seconds, pcap, "-a0", "eth0")
    print(f"{case.key}: ssthresh at slow-start exit {res.get('ss_ssthresh')} at {res.get('ss_time_s')} s")
    for line in trains(pcap, args.until, args.gap, 1448):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
