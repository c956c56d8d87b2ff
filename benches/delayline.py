"""Delay line under load: the most the emulated dumbbell carries at 100 ms RTT, and how
punctual the delay line stays meanwhile (issue 5).

Path: sender ns → left router (HTB bottleneck at C, pfifo of B packets, on the link to the
right router) → right router (NFQUEUE rules: data queue 0, ACK queue 1, RTT/2 each, served
by xferlab-delay) → receiver ns. The delay line sits after the bottleneck queue, so every
loss is a bottleneck drop. One iperf3 flow (CUBIC, set explicitly: the default here is
BBR) per capacity. Prints a table and rewrites the "Delay line" section of BENCHMARKS.md.

    sudo python3 benches/delayline.py [--rates 300 500 700] [--duration 20] [--no-write]

Needs root, ip, iptables, tc, ethtool, iperf3 and `cargo build --release -p xferlab-delayline`.
Holds /run/xferlab/netns.lock while its xl-dlb-* namespaces exist.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xferlab.netns import host

ROOT = Path(__file__).resolve().parent.parent

BIN = ROOT / os.environ.get("CARGO_TARGET_DIR", "target") / "release" / "xferlab-delay"
SND, LEFT, RIGHT, RCV = (f"{host.PREFIX}dlb-{n}" for n in ("snd", "left", "right", "rcv"))
RCV_ADDR = "10.90.3.2"
MSS_FRAME = 1514  # bytes on the wire per full-size packet (what HTB counts)


def build(rate_mbit: int, buffer_pkts: int) -> None:
    for ns in (SND, LEFT, RIGHT, RCV):
        host.sh(["ip", "netns", "add", ns])
        host.sh(["ip", "link", "set", "lo", "up"], ns=ns)
    links = [
        (SND, "s0", "10.90.1.2/24", LEFT, "l0", "10.90.1.1/24"),
        (LEFT, "l1", "10.90.2.1/24", RIGHT, "r1", "10.90.2.2/24"),
        (RIGHT, "r0", "10.90.3.1/24", RCV, "c0", "10.90.3.2/24"),
    ]
    for ns1, d1, a1, ns2, d2, a2 in links:
        host.sh(["ip", "link", "add", d1, "netns", ns1, "type", "veth", "peer", "name", d2, "netns", ns2])
        for ns, dev, addr in ((ns1, d1, a1), (ns2, d2, a2)):
            host.sh(["ip", "addr", "add", addr, "dev", dev], ns=ns)
            host.sh(["ip", "link", "set", dev, "up"], ns=ns)
            # no 64 KB super-packets: queues and the delay line count real packets
            host.sh(["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off"], ns=ns)
    host.sh(["ip", "route", "add", "default", "via", "10.90.1.1"], ns=SND)
    host.sh(["ip", "route", "add", "default", "via", "10.90.3.1"], ns=RCV)
    host.sh(["ip", "route", "add", "10.90.3.0/24", "via", "10.90.2.2"], ns=LEFT)
    host.sh(["ip", "route", "add", "10.90.1.0/24", "via", "10.90.2.1"], ns=RIGHT)
    for ns in (LEFT, RIGHT):
        host.sh(["sysctl", "-qw", "net.ipv4.ip_forward=1"], ns=ns)
    # Bottleneck both ways: HTB at C with an explicit burst, exact packet drop-tail leaf.
    for ns, dev in ((LEFT, "l1"), (RIGHT, "r1")):
        host.sh(["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"], ns=ns)
        host.sh(
            [
                "tc",
                "class",
                "add",
                "dev",
                dev,
                "parent",
                "1:",
                "classid",
                "1:1",
                "htb",
                "rate",
                f"{rate_mbit}mbit",
                "ceil",
                f"{rate_mbit}mbit",
                "burst",
                "30000",
                "cburst",
                "30000",
            ],
            ns=ns,
        )
        host.sh(["tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "pfifo", "limit", str(buffer_pkts)], ns=ns)
    # The delay line after the bottleneck: data arriving from it, ACKs leaving towards it.
    host.sh(["iptables", "-A", "FORWARD", "-i", "r1", "-j", "NFQUEUE", "--queue-num", "0"], ns=RIGHT)
    host.sh(["iptables", "-A", "FORWARD", "-o", "r1", "-j", "NFQUEUE", "--queue-num", "1"], ns=RIGHT)
    # -w is capped by net.core.[rw]mem_max (4 MiB here, and a namespace cannot raise it),
    # below the BDP at 500 Mbit/s; raise the per-namespace autotuning limits instead.
    for ns in (SND, RCV):
        host.sh(["sysctl", "-qw", "net.ipv4.tcp_rmem=4096 131072 134217728"], ns=ns)
        host.sh(["sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 134217728"], ns=ns)


def teardown() -> None:
    for ns in (SND, LEFT, RIGHT, RCV):
        if ns in host.namespaces():
            host.delete_namespace(ns)


def steer_receive_processing() -> None:
    """The end hosts' receive processing (TCP of receiver and sender) runs on CPUs other than
    0 (RPS on their veths), so it is not done inside the daemon's verdict calls on CPU 0."""
    others = sum(1 << c for c in range(1, os.cpu_count() or 1))
    for ns, dev in ((RCV, "c0"), (SND, "s0")):
        host.sh(["sh", "-c", f"echo {others:x} > /sys/class/net/{dev}/queues/rx-0/rps_cpus"], ns=ns)


def start_daemon(one_way_ms: float, stats: Path, rt_priority: int, steer: bool) -> subprocess.Popen:
    args = [str(BIN), "--queue", f"0:{one_way_ms}ms", "--queue", f"1:{one_way_ms}ms", "--stats", str(stats)]
    if rt_priority:
        args += ["--rt-priority", str(rt_priority)]
    if steer:
        args += ["--cpu", "0"]
    p = subprocess.Popen(["ip", "netns", "exec", RIGHT, *args], stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([p.stdout], [], [], 10)
    if not ready or p.stdout.readline().strip() != "ready":
        p.kill()
        raise host.HostError("xferlab-delay did not become ready")
    return p


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15 of proc(5))


def ping_rtt(count: int) -> tuple[float, float, float] | None:
    """min, avg, max RTT in ms (ping's summary line: µs precision, unlike its per-reply lines)."""
    out = host.sh(["ping", "-n", "-q", "-c", str(count), "-i", "0.1", RCV_ADDR], ns=SND, check=False)
    m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/", out)
    return (float(m.group(1)), float(m.group(2)), float(m.group(3))) if m else None


def backlog_drops() -> int:
    """Packets dropped host-wide because a CPU's input backlog was full (netdev_max_backlog):
    a loss outside the bottleneck, which RPS steering can cause when the other CPUs are busy."""
    return sum(int(line.split()[1], 16) for line in Path("/proc/net/softnet_stat").read_text().splitlines())


def bottleneck_drops() -> int:
    out = host.sh(["tc", "-s", "qdisc", "show", "dev", "l1"], ns=LEFT)
    m = re.search(r"pfifo 10:.*?dropped (\d+)", out, re.S)
    return int(m.group(1)) if m else -1


def run_one(rate: int, rtt_ms: float, duration: int, buffer_pkts: int | None, rt_priority: int, steer: bool, tmp: Path) -> dict:
    bdp_pkts = round(rate * 1e6 * rtt_ms / 1e3 / 8 / MSS_FRAME)
    buffer_pkts = buffer_pkts or bdp_pkts
    build(rate, buffer_pkts)
    stats_path = tmp / f"delay-{rate}.json"
    if steer:
        steer_receive_processing()
    daemon = start_daemon(rtt_ms / 2, stats_path, rt_priority, steer)
    server = None
    try:
        idle = ping_rtt(10)
        server = subprocess.Popen(["ip", "netns", "exec", RCV, "iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        t0, c0, b0 = time.monotonic(), cpu_ticks(daemon.pid), backlog_drops()
        out = host.sh(
            ["iperf3", "-c", RCV_ADDR, "-t", str(duration), "-O", "2", "-C", "cubic", "-J"], ns=SND, timeout=duration + 30
        )
        cpu = (cpu_ticks(daemon.pid) - c0) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - t0)
        backlog = backlog_drops() - b0
        daemon.send_signal(signal.SIGTERM)
        if daemon.wait(timeout=10) != 0:
            raise host.HostError(f"xferlab-delay exited with {daemon.returncode}")
        stats = json.loads(stats_path.read_text())
        report = json.loads(out)
        ip = report["end"]
        # all retransmissions, those of the omitted first seconds (slow start) included
        nstat = host.sh(["nstat", "-az", "TcpRetransSegs"], ns=SND)
        retrans = int(re.search(r"TcpRetransSegs\s+(\d+)", nstat).group(1))
        return {
            "rate": rate,
            "buffer": buffer_pkts,
            "bdp": bdp_pkts,
            "steer": steer,
            "goodput": ip["sum_received"]["bits_per_second"] / 1e6,
            "retrans": retrans,
            "bottleneck_drops": bottleneck_drops(),
            "backlog_drops": backlog,
            "idle_rtt": idle,
            "cpu": cpu,
            "stats": stats,
        }
    finally:
        for p in (server, daemon):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        teardown()


def fmt_row(r: dict) -> str:
    d, a = r["stats"]["queues"]["0"], r["stats"]["queues"]["1"]
    dl_drops = sum(q["queue_dropped"] + q["user_dropped"] for q in (d, a)) + r["stats"]["enobufs"]
    cpu_s = r["stats"]["cpu_user_s"] + r["stats"]["cpu_sys_s"]
    sys_share = 100 * r["stats"]["cpu_sys_s"] / cpu_s if cpu_s else 0
    idle = "/".join(f"{x:.2f}" for x in r["idle_rtt"]) if r["idle_rtt"] else "-"
    return (
        f"| {r['rate']} | {'yes' if r['steer'] else 'no'} | {r['buffer']} | {r['goodput']:.1f} | {r['retrans']} "
        f"| {r['bottleneck_drops']} | {dl_drops} | {r['backlog_drops']} "
        f"| {d['late_mean_ms']:.3f} / {d['late_p99_ms']:.3f} / {d['late_max_ms']:.2f} "
        f"| {a['late_mean_ms']:.3f} / {a['late_p99_ms']:.3f} | {d['read_lag_mean_ms']:.3f} / {d['read_lag_p99_ms']:.3f} "
        f"| {d['max_held']} | {100 * r['cpu']:.0f} % ({sys_share:.0f} % sys) "
        f"| {idle} |"
    )


HEADER = (
    "| C (Mbit/s) | steered | B (pkts) | goodput (Mbit/s) | retrans | bottleneck drops | delay-line drops | backlog drops "
    "| data lateness mean / p99 / max (ms) | ACK lateness mean / p99 (ms) | data read lag mean / p99 (ms) "
    "| max held | daemon CPU | idle ping min/avg/max (ms) |\n"
    "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", type=int, nargs="+", default=[300, 500, 700], help="bottleneck capacities C, Mbit/s")
    ap.add_argument("--rtt-ms", type=float, default=100.0)
    ap.add_argument("--duration", type=int, default=20, help="iperf3 seconds (first 2 s omitted from goodput)")
    ap.add_argument("--buffer", type=int, default=None, help="bottleneck buffer B in packets (default: one BDP)")
    ap.add_argument("--rt-priority", type=int, default=50, help="SCHED_FIFO priority of the daemon (0: normal)")
    ap.add_argument(
        "--no-steer",
        action="store_true",
        help="leave the end hosts' receive processing where it falls (often inside the daemon's verdict calls)",
    )
    ap.add_argument("--both", action="store_true", help="each capacity with and without steering")
    ap.add_argument("--no-write", action="store_true", help="do not rewrite BENCHMARKS.md")
    args = ap.parse_args()
    host.require_root()
    host.require_tools("ip", "iptables", "tc", "ethtool", "iperf3", "ping")
    if not BIN.exists():
        raise SystemExit(f"{BIN} missing: cargo build --release -p xferlab-delayline")
    rows = []
    with host.host_lock(), tempfile.TemporaryDirectory(prefix="xl-delaybench-") as tmp:
        teardown()  # a leftover of a crashed run of this bench
        load_before = Path("/proc/loadavg").read_text().split()[:3]
        steers = [True, False] if args.both else [not args.no_steer]
        for rate in args.rates:
            for steer in steers:
                r = run_one(rate, args.rtt_ms, args.duration, args.buffer, args.rt_priority, steer, Path(tmp))
                rows.append(r)
                print(fmt_row(r), flush=True)
        load_after = Path("/proc/loadavg").read_text().split()[:3]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    cmd = "sudo python3 benches/delayline.py " + " ".join(sys.argv[1:])
    text = (
        f"Command: `{cmd.strip()}`. RTT {args.rtt_ms:g} ms ({args.rtt_ms / 2:g} ms per direction in the delay line), one "
        f"iperf3 CUBIC flow for {args.duration} s (goodput without the first 2 s), B = one BDP unless given, daemon "
        f'{"SCHED_FIFO " + str(args.rt_priority) if args.rt_priority else "not real-time"}; "steered" = daemon pinned '
        f"to CPU 0 (`--cpu 0`) and the end hosts' receive processing sent to the other CPUs (`rps_cpus` on their veths). "
        f"Lateness and read lag cover the whole run, slow start included. Machine: {os.cpu_count()} cores, "
        f"Linux {platform.release()}, commit {commit}; load average {' '.join(load_before)} before, "
        f"{' '.join(load_after)} after (the machine is shared). Lateness = verdict time − due time, per packet, "
        f"from the daemon's stats; delay-line drops = queue_dropped + user_dropped + ENOBUFS; "
        f"backlog drops = host-wide softnet input-backlog drops during the run.\n\n"
        f"{HEADER}\n" + "\n".join(fmt_row(r) for r in rows) + "\n"
    )
    print(text)
    if not args.no_write:
        write_section(text)


def write_section(body: str) -> None:
    path = ROOT / "BENCHMARKS.md"
    doc = path.read_text()
    marker = "## Delay line\n"
    section = marker + "\n" + body
    start = doc.find(marker)
    if start < 0:
        doc = doc.rstrip("\n") + "\n\n" + section
    else:
        nxt = doc.find("\n## ", start + len(marker))
        # keep the hand-written analysis that follows the generated table
        keep = doc[nxt:] if nxt >= 0 else ""
        end_auto = doc.find("\n### ", start)
        if 0 <= end_auto < (nxt if nxt >= 0 else len(doc)):
            keep = doc[end_auto:]
        doc = doc[:start] + section + keep
    path.write_text(doc)


if __name__ == "__main__":
    main()
