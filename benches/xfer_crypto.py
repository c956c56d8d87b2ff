#!/usr/bin/env python3
"""The cost of xfer's encryption (issue 51, item 4): goodput and CPU seconds of both
processes, memory to memory over loopback, with and without encryption, 1, 2, 4 and 8
streams.

One `xfer serve` on 127.0.0.1 (which takes either mode on loopback); each run is an
`xfer send -P N mem:SIZE HOST:PORT --discard`, with `--encrypt` (loopback would
otherwise be plaintext) or with `--plaintext`. The two modes alternate run by run so both
see the same machine state. Per run: goodput (the trace's bytes / completion_time), the
client's CPU seconds (wait4 rusage) and the server's (utime + stime from /proc/PID/stat,
before and after), and goodput per core = bytes x 8 / (client + server CPU seconds).

    cargo build --release -p xfer
    python3 benches/xfer_crypto.py            # PASSES=3 SIZE=4G STREAMS=1,2,4,8
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
XFER = ROOT / "target" / "release" / "xfer"
PASSES = int(os.environ.get("PASSES", "3"))
SIZE = os.environ.get("SIZE", "4G")
STREAMS = [int(x) for x in os.environ.get("STREAMS", "1,2,4,8").split(",")]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def one_run(tmp: Path, key: Path, server: subprocess.Popen, addr: str, streams: int, enc: bool) -> dict:
    trace = tmp / "t.json"
    args = [str(XFER), "send", "--key-file", str(key), "-P", str(streams), "--no-progress", "-q"]
    args += ["--encrypt" if enc else "--plaintext", "--json", str(trace), f"mem:{SIZE}", addr, "--discard"]
    s0 = cpu_of(server.pid)
    t0 = time.monotonic()
    p = subprocess.Popen(args, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    s1 = cpu_of(server.pid)
    err = p.stderr.read().decode()
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"xfer send failed: {err}")
    run = json.loads(trace.read_text())["run"]
    if run["encrypted"] != enc:
        sys.exit(f"run.encrypted is {run['encrypted']}, expected {enc}")
    client_cpu, server_cpu = ru.ru_utime + ru.ru_stime, s1 - s0
    gbps = run["bytes"] * 8 / run["completion_time"] / 1e9
    return {
        "goodput": gbps,
        "client_cpu": client_cpu,
        "server_cpu": server_cpu,
        "per_core": run["bytes"] * 8 / (client_cpu + server_cpu) / 1e9,
        "wall": wall,
    }


def fmt(xs: list[float]) -> str:
    return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"


def main() -> None:
    if not XFER.exists():
        sys.exit("build first: cargo build --release -p xfer")
    with tempfile.TemporaryDirectory(prefix="xfer-crypto-") as d:
        tmp = Path(d)
        key = tmp / "key"
        key.write_bytes(os.urandom(32).hex().encode())
        key.chmod(0o600)
        (tmp / "root").mkdir()
        server = subprocess.Popen(
            [str(XFER), "serve", "--listen", "127.0.0.1:0", "--root", str(tmp / "root"), "--key-file", str(key)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            addr = server.stdout.readline().strip().removeprefix("xfer: listening on ")
            print(f"# uptime before: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
            print(f"# mem:{SIZE} per run, {PASSES} passes, modes alternating run by run")
            rows = {}
            for n in STREAMS:
                for i in range(PASSES):
                    for enc in (False, True) if i % 2 == 0 else (True, False):
                        r = one_run(tmp, key, server, addr, n, enc)
                        rows.setdefault((n, enc), []).append(r)
                        print(f"#   P={n} {'encrypted' if enc else 'plaintext'} pass {i + 1}: {json.dumps(r)}", flush=True)
            print(f"# uptime after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
        finally:
            server.terminate()
            server.wait()
    print()
    print(
        "| streams | mode | goodput Gbit/s (min / median / max) | client CPU s | server CPU s "
        "| Gbit/s per core (min / median / max) | per core vs plaintext |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in STREAMS:
        base = statistics.median(r["per_core"] for r in rows[(n, False)])
        for enc in (False, True):
            rs = rows[(n, enc)]
            pc = [r["per_core"] for r in rs]
            print(
                f"| {n} | {'encrypted' if enc else 'plaintext'} | {fmt([r['goodput'] for r in rs])} "
                f"| {statistics.median(r['client_cpu'] for r in rs):.2f} "
                f"| {statistics.median(r['server_cpu'] for r in rs):.2f} | {fmt(pc)} "
                f"| {statistics.median(pc) / base * 100:.0f} % |"
            )


if __name__ == "__main__":
    main()
