"""The receiver's window autotuning on the kernel: Linux's ``tcp:tcp_rcvbuf_grow`` tracepoint
during a netns run, and the DRS law checked against it.

    sudo .venv/bin/python benches/rcvbuf_trace.py reno:200:1.0bdp:1 [--seconds 4]

Runs one duration case of benches/fidelity.py on the netns backend (with its TCP_INFO
sampler, so the sender's ``snd_wnd`` per round is printed too) while a private tracefs
instance records ``tcp_rcvbuf_grow`` for the receivers (port 5201). Each event is one
growth of dynamic right-sizing (DRS, ``tcp_rcv_space_adjust``): printed with the bytes the
application read in the last receiver RTT (``copied``), the part still queued (``inq``),
and the receive buffer, window clamp and ``rcv_ssthresh`` before the growth.

The law (Linux 6.18 ``tcp_rcvbuf_grow``): with n = copied − inq and o the previous
measure, ``rcvwin = 2n + 2·(2n·(n − o)/o)``; the buffer becomes ``rcvwin`` in memory units
(÷ scaling_ratio/256, capped at ``tcp_rmem[2]``) when that is more, and the window clamp
follows it. ``predicted`` is the clamp the law gives from each event, ``next`` the clamp the
kernel reports at the next one: they agree within the ratio's rounding when the law is the
kernel's.

``--recovery``: a second sampler reads the sender's and the receiver's sockets together
(sock_diag, every 2 ms, one clock), and the first loss recovery is printed every 10 ms: the
sender's window, data in flight and segments the receiver holds out of order (``sacked``),
and the receiver's window, buffer and memory (``rmem_alloc``, skb truesize queued), with
the memory per held segment (VALIDATION.md §6, "A second reduction"; traced in
docs/journal/validation-history.md, "One flow at 200 ms with 0.2 BDP: a lost retransmission of the head").
Needs root and tracefs (mounted here if it is not).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from xferlab.fidelity import kernel
from xferlab.fidelity.matrix import Case

ROOT = Path(__file__).resolve().parent.parent

TRACEFS = Path("/sys/kernel/tracing")
EVENT = "events/tcp/tcp_rcvbuf_grow"
FIELDS = ("time", "rtt_us", "copied", "inq", "space", "scaling_ratio", "rcvbuf", "rcv_ssthresh", "window_clamp", "rcv_wnd")
_VALUES = " ".join(rf"{f}=(\d+)" if f != "scaling_ratio" else r"ooo=\d+ scaling_ratio=(\d+)" for f in FIELDS)
LINE = re.compile(r"\s(\d+\.\d+): tcp_rcvbuf_grow: " + _VALUES + r".* sock_cookie=([0-9a-f]+)")


def parse(text: str) -> dict[str, list[dict]]:
    """The events by socket (cookie), in the order their sockets first grew."""
    socks: dict[str, list[dict]] = {}
    for line in text.splitlines():
        m = LINE.search(line)
        if m:
            values = {f: int(v) for f, v in zip(FIELDS, m.groups()[1:-1], strict=True)}
            socks.setdefault(m.group(m.lastindex), []).append({"t": float(m.group(1)), **values})
    return socks


def the_runs(socks: dict[str, list[dict]], rtt_s: float) -> list[dict]:
    """The first receiver of this run: the tracepoint sees every receiver on port 5201, also
    those of another emulation that held the host meanwhile; this run's measure its RTT."""
    ours = [rows for rows in socks.values() if 0.8 * rtt_s <= rows[0]["rtt_us"] / 1e6 <= 1.5 * rtt_s]
    return ours[-1] if ours else []


def drs_clamp(row: dict, rmem_max: int) -> int:
    """The window clamp the law gives from one event (Linux 6.18 ``tcp_rcvbuf_grow``)."""
    new, old = row["copied"] - row["inq"], row["space"]
    rcvwin = 2 * new
    rcvwin += 2 * (rcvwin * (new - old) // old)
    rcvbuf = min(rcvwin * 256 // row["scaling_ratio"], rmem_max)
    return max(rcvbuf, row["rcvbuf"]) * row["scaling_ratio"] // 256


def rounds(samples: pd.DataFrame | None, rtt_s: float, n: int = 12) -> list[str]:
    """The sender's window and cwnd at the end of each of the first n rounds."""
    if samples is None or "snd_wnd" not in samples:
        return []
    f = samples[samples.flow == samples.flow.min()]
    out = []
    for k in range(n):
        s = f[(f.t >= k * rtt_s) & (f.t < (k + 1) * rtt_s)]
        if len(s):
            e = s.iloc[-1]
            out.append(f"round {k:2d}: snd_wnd {e.snd_wnd:>10} B ({e.snd_wnd / 1448:7.1f} segments), cwnd {e.cwnd:6}")
    return out


#: What the recovery timeline shows of each side (sock_diag fields).
SENDER_COLS = ("cwnd", "in_flight", "unacked", "sacked", "snd_wnd", "ca_state", "reordering", "reord_seen")
RECEIVER_COLS = ("rcv_wnd", "rcv_ssthresh", "rcv_space", "rcvbuf", "rmem_alloc", "rcv_ooopack")


def both_sides(csv: Path) -> pd.DataFrame | None:
    """The data connection's sender (ns ``…-a0``) and receiver (``…-b0``) rows of the last
    emulation in ``csv``, joined on the sample time (s from the sender's first sample)."""
    if not csv.exists():
        return None
    df = pd.read_csv(csv)
    df["run"] = df["ns"].str.rsplit("-", n=1).str[0]
    df = df[df["run"] == df.groupby("run")["t_ns"].max().idxmax()]
    snd = df[df["ns"].str.endswith("-a0")]
    if snd.empty:
        return None
    port = snd.groupby("sport")["bytes_acked"].max().idxmax()
    snd = snd[snd["sport"] == port].sort_values("t_ns")[["t_ns", *SENDER_COLS]]
    rcv = df[df["ns"].str.endswith("-b0") & (df["dport"] == port)].sort_values("t_ns")[["t_ns", *RECEIVER_COLS]]
    both = pd.merge_asof(snd, rcv, on="t_ns", direction="nearest", tolerance=2_000_000)
    both["t"] = (both.pop("t_ns") - snd["t_ns"].iloc[0]) / 1e9
    return both


def recovery(both: pd.DataFrame, rtt_s: float, rounds_after: float = 4.0, step_s: float = 0.01) -> list[str]:
    """The first recovery, every ``step_s``: from just before the first sample out of the
    Open state to ``rounds_after`` RTTs later."""
    out_of_open = both[both["ca_state"] > 0]
    if out_of_open.empty:
        return ["no loss in the run"]
    t0 = out_of_open["t"].iloc[0]
    at = out_of_open.iloc[0]
    lines = [
        f"first recovery from {t0:.3f} s (segments of 1448 B; memory in bytes); the sender then allowed a reordering "
        f"of {at['reordering']:.0f} segments and had seen {at['reord_seen']:.0f} reorderings:",
        "     t  ca   cwnd  inflight  unacked  sacked  snd_wnd  rcv_wnd  rcv_ssth  rcv_space    rcvbuf  rmem_alloc  B/held",
    ]
    for t in np.arange(t0 - 2 * step_s, t0 + rounds_after * rtt_s, step_s):
        r = both[both["t"] <= t]
        if r.empty:
            continue
        r = r.iloc[-1]
        per = r["rmem_alloc"] / r["sacked"] if r["sacked"] > 0 else float("nan")
        lines.append(
            f"{t:6.3f} {r['ca_state']:3.0f} {r['cwnd']:6.0f} {r['in_flight']:9.0f} {r['unacked']:8.0f} {r['sacked']:7.0f} "
            f"{r['snd_wnd'] / 1448:8.0f} {r['rcv_wnd'] / 1448:8.0f} {r['rcv_ssthresh'] / 1448:9.0f} "
            f"{r['rcv_space'] / 1448:10.0f} {r['rcvbuf']:9.0f} {r['rmem_alloc']:11.0f} {per:7.0f}"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", help="a fidelity case key, e.g. reno:200:1.0bdp:1")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--recovery", action="store_true", help="also the first loss recovery, both sides, every 10 ms")
    args = ap.parse_args()
    if os.geteuid() == 0 and not (TRACEFS / "events").exists():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=False)
    if os.geteuid() != 0 or not (TRACEFS / EVENT).exists():
        print(f"error: needs root and {TRACEFS / EVENT}", file=sys.stderr)
        return 2
    v, rtt, buf, n = args.case.split(":")
    case = Case(v, int(rtt), buf, int(n))
    inst = TRACEFS / "instances" / f"xferlab-rcvbuf-{os.getpid()}"
    inst.mkdir()
    tmp = Path(tempfile.mkdtemp(prefix="xferlab-rcvbuf-"))
    try:
        (inst / EVENT / "filter").write_text("sport == 5201\n")
        (inst / EVENT / "enable").write_text("1\n")
        pair_csv, pair = tmp / "pair.csv", None
        if args.recovery:
            pair = kernel.start_sampler(pair_csv, "--pattern", "xl-*-[ab]0")
        try:
            kernel.run_netns(case, "duration", duration_s=args.seconds, samples_dir=tmp)
        finally:
            if pair is not None:
                pair.terminate()
                pair.wait(timeout=10)
        (inst / EVENT / "enable").write_text("0\n")
        rows = the_runs(parse((inst / "trace").read_text()), case.rtt_ms / 1e3)
    finally:
        inst.rmdir()
    samples_path = tmp / f"{case.stem}-netns-samples.parquet"
    samples = pd.read_parquet(samples_path) if samples_path.exists() else None
    both = both_sides(pair_csv) if args.recovery else None
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{case.key}: {len(rows)} growths of the receive buffer (first receiver)")
    rmem_max = max((r["rcvbuf"] for r in rows), default=0) or 1 << 30
    head = ("t (s)", "rtt ms", "copied", "inq", "n", "clamp", "ssthresh", "predicted", "next")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (8, 7, 9, 8, 9, 10, 10, 10, 10), strict=True)))
    t0 = rows[0]["t"] if rows else 0.0
    for a, b in zip(rows, rows[1:] + [None], strict=True):
        nxt = "" if b is None else f"{b['window_clamp']:>10}"
        print(
            f"{a['t'] - t0:8.3f} {a['rtt_us'] / 1e3:7.1f} {a['copied']:9} {a['inq']:8} {a['copied'] - a['inq']:9} "
            f"{a['window_clamp']:10} {a['rcv_ssthresh']:10} {drs_clamp(a, rmem_max):10} {nxt}"
        )
    for line in rounds(samples, case.rtt_ms / 1e3):
        print(line)
    if args.recovery:
        print("\n".join(recovery(both, case.rtt_ms / 1e3) if both is not None else ["no samples of the pair"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
