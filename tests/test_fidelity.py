"""The simulator beside real Linux TCP (the netns backend), a few cases of benches/fidelity.py.

Root only (CI runs as root). Three 8 s runs on each backend, about a minute in all. The
tolerances are the fidelity suite's, widened where a loaded machine moves the kernel's
side (goodput ±8 % instead of ±5 %; the slow-start exit ±25 % instead of ±20 %).
"""

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_netns import needs_host
from xferlab.backends import extension
from xferlab.backends import sim as sim_backend
from xferlab.backends.netns import LATE_MEAN_MS
from xferlab.netns import bpfcc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benches"))
import fidelity  # noqa: E402
import fidelity_events  # noqa: E402
import ftrace  # noqa: E402
import sched_waits  # noqa: E402

pytestmark = [pytest.mark.slow]

CASES = [fidelity.Case("reno", 50, "1.0bdp", 1), fidelity.Case("cubic", 50, "1.0bdp", 1), fidelity.Case("bbr", 50, "1.0bdp", 1)]


#: How long a kernel run waits for the machine to quieten down. The bench waits up to 30
#: minutes (fidelity.MAX_WAIT_S); a test under sustained load would then wait that long per
#: run. Here it waits a little, then runs, and a loaded run is judged by _kernel_run.
QUIET_WAIT_S = 30


@pytest.fixture(autouse=True)
def _results_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(fidelity, "RESULTS", tmp_path)
    monkeypatch.setattr(fidelity, "MAX_WAIT_S", QUIET_WAIT_S)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.key)
def test_sim_retransmits_only_what_it_lost(case):
    sim = fidelity.run_sim(case, "duration", duration_s=8)
    assert sim["retransmissions"] <= 1.1 * sim["drops"]  # CUBIC leaves slow start by HyStart: none
    assert sim["timeouts"] == 0


#: Kernel runs at most per case. A loaded host only ever takes goodput away from the
#: emulated path (its processes and softirqs wait for a CPU), never adds any: the best run is
#: the path's. Seen in CI and here under load: 175–176 Mbit/s against 277, with the delay
#: line on time and the load average under the "busy" mark. A loaded host also moves Reno's
#: slow-start exit: one of four runs of reno:50:1.0bdp:1 with a busy loop and a table rerun
#: on the two cores (2026-12-06) left slow start at 0.96 s with ssthresh 4 307 (cwnd 8 611),
#: the other three at 0.58-0.59 s with 2 494-2 536 (the simulator: 0.55 s, 2 485), the
#: delay line on time and the load average under the mark in all four (not traced). So a
#: run ends the tries only if it agrees on every figure compared.
KERNEL_TRIES = 3


def _kernel_run(case, sim: dict) -> tuple[dict, bool]:
    """The netns side: up to KERNEL_TRIES runs, stopping at the first faithful run that
    agrees with the simulator's ``sim`` (_agrees; a faithful run: the delay line on time and no more
    runnable tasks than the machine has cores for the emulated hosts); else the best by
    goodput. Returns (summary, whether that run was faithful)."""
    best, best_faithful = None, False
    for attempt in range(KERNEL_TRIES):
        # Only the first run waits for a quiet machine: the load average moves over minutes,
        # so a second wait under the same load only lengthens the suite (it was 2 × 30 s of
        # each case's 120 s in a loaded pass).
        fidelity.MAX_WAIT_S = QUIET_WAIT_S if attempt == 0 else 0
        net = fidelity.run_netns_once(case, "duration", duration_s=8)  # this test's own retries
        busy = os.getloadavg()[0] > 1.5 * (os.cpu_count() or 1)
        faithful = (net.get("late_mean_ms") or 0.0) <= LATE_MEAN_MS and not busy
        if faithful and _agrees(case, sim, net):
            return net, True
        if best is None or net["goodput_mbps"] > best["goodput_mbps"]:
            best, best_faithful = net, faithful
    return best, best_faithful


#: The simulator's goodput against the kernel's best run.
GOODPUT_TOLERANCE = 0.08
#: Reno's slow-start exit (ssthresh and time) against the kernel's.
EXIT_TOLERANCE = 0.25


def _agrees(case, sim: dict, net: dict) -> bool:
    """Whether the kernel's run ``net`` agrees with the simulator's ``sim`` on the figures the
    test compares: goodput, and Reno's slow-start exit."""
    if abs(sim["goodput_mbps"] / net["goodput_mbps"] - 1) > GOODPUT_TOLERANCE:
        return False
    if case.variant != "reno":
        return True
    return all(net[k] and abs(sim[k] / net[k] - 1) <= EXIT_TOLERANCE for k in ("ss_ssthresh", "ss_time_s"))


@needs_host
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.key)
def test_sim_beside_the_kernel(case):
    sim = fidelity.run_sim(case, "duration", duration_s=8)
    net, faithful = _kernel_run(case, sim)
    # On a machine too loaded for the emulation (the run's report flags it) the kernel's
    # goodput is the machine's, not the path's: only a gross disagreement is caught then.
    tolerance = GOODPUT_TOLERANCE if faithful else 0.5
    assert sim["goodput_mbps"] == pytest.approx(net["goodput_mbps"], rel=tolerance), net
    if (ftrace.TRACEFS / "instances").exists():
        # The run traced its receiver's waits for a CPU: hundreds a second over the run.
        assert net["waits"]["traced_s"] >= 5 and net["waits"]["waits"] / net["waits"]["traced_s"] > 100, net["waits"]
        # ...and its flow's segments (tcp_probe): thousands of in-order ACKs of two segments
        # or more (Linux's delayed ACKs, and stretch ACKs: a receiver whose reads come late,
        # on a loaded machine, acknowledges a read's worth at once: 10.7-23.3 segments an ACK
        # and 6 300-8 100 ACKs with another process on one of two cores, 2026-12-06), a lone flow one train
        # (all its receiver got after slow start: what all its ACKs acknowledged, those in
        # loss recovery too, and what it got twice), each ACK sooner after the last segment
        # it acknowledges than after the first.
        acks = net["acks"]
        assert acks["flows"] == 1 and acks["acks"] > 1_000 and acks["lost"] == 0, acks
        # How many segments an ACK covers is the receiver's machine's on a loaded one (41.9
        # with a busy loop on each core, 2026-12-06): judged on faithful runs only.
        assert not faithful or 1.5 < acks["segments_per_ack"] < 40, acks
        # The train rules hold of a flow that acknowledged in order: not of one whose ACKs
        # were in loss recovery for a tenth or more (the kernel's BBR overflowed one BDP in
        # its startup in one run of a loaded pass: 30 % of its ACKs in recovery).
        if faithful and acks["in_recovery"] < 0.1:
            in_order = acks["acks"] * acks["segments_per_ack"]
            assert 0.99 * in_order <= acks["trains"], acks
            assert acks["trains"] == pytest.approx(acks["acknowledged"] + acks["twice"], rel=0.02), acks
            median = lambda h: sched_waits.hist_quantiles(np.asarray(h), np.array([0.5]))[0]  # noqa: E731
            assert median(acks["from_last"]) < median(acks["from_first"])
    if case.variant == "reno" and faithful:
        # Reno leaves slow start at its first loss, where and when the kernel does.
        assert sim["ss_ssthresh"] == pytest.approx(net["ss_ssthresh"], rel=EXIT_TOLERANCE)
        assert sim["ss_time_s"] == pytest.approx(net["ss_time_s"], rel=EXIT_TOLERANCE)
    # CUBIC's HyStart exit on the kernel moves from run to run (a window of 2 245, 2 704,
    # 4 646 segments in three runs of this case), and BBR's startup ends ~0.2 s later
    # on the simulator (VALIDATION.md §3.1): neither is compared here, where it would flicker.


def _samples(rows):
    return pd.DataFrame(rows, columns=["t", "flow", "cwnd", "ssthresh", "ss_done"]).assign(retransmissions=0)


def test_slow_start_exit_is_read_from_the_first_ssthresh():
    # Two flows: the window doubles between samples, so the exit is read from ssthresh.
    inf = bpfcc.SSTHRESH_INFINITE
    s = _samples(
        [
            (0.00, 0, 100, inf, False),
            (0.01, 0, 180, inf, False),
            (0.02, 0, 150, 132, True),
            (0.03, 0, 132, 132, True),
            (0.00, 1, 100, inf, False),
            (0.04, 1, 200, 120, True),
        ]
    )
    assert fidelity.slow_start_exit(s) == (126.0, 0.03)
    assert fidelity.slow_start_exit(s[s["t"] < 0.02]) is None


def test_an_exit_the_sampler_came_too_late_for_is_unknown_not_compared():
    inf = bpfcc.SSTHRESH_INFINITE
    # A HyStart exit before the first sample: its ssthresh still reads the exit.
    hystart = _samples([(0.00, 0, 480, 464, True), (0.01, 0, 470, 464, True)])
    assert fidelity.slow_start_exit(hystart) == (464.0, 0.0)
    # The first sample after the slow start's loss (reno:10:1.0bdp:1, 2026-11-28): the
    # ssthresh read may be a later back-off's, and the first loss came before any sample.
    late = _samples([(0.00, 0, 257, 253, True), (0.01, 0, 258, 253, True)]).assign(retransmissions=519)
    assert fidelity.slow_start_exit(late) is None
    assert fidelity.first_loss(late) is None
    # One of two flows seen late leaves the mean exit unknown.
    seen = _samples([(0.00, 1, 10, inf, False), (0.02, 1, 300, 150, True)])
    both = pd.concat([late, seen.assign(retransmissions=[0, 3])])
    assert fidelity.slow_start_exit(both) is None
    assert fidelity.slow_start_exit(seen) == (150.0, 0.02)
    # The archives keep figures, not samples: a first loss at time 0 marks the same.
    kept = {"ss_ssthresh": 253.0, "ss_time_s": 0.0, "first_loss_s": 0.0, "goodput_mbps": 279.0}
    unseen = {"ss_ssthresh": None, "ss_time_s": None, "first_loss_s": None}
    assert fidelity.unseen_starts_dropped(kept) == unseen | {"goodput_mbps": 279.0}


def test_a_window_no_congestion_control_gives_voids_the_run():
    inf = bpfcc.SSTHRESH_INFINITE
    good = [(0.0, 0, 10, inf, False), (1.0, 0, 300, 183, True)]
    assert fidelity.broken_window(_samples(good)) is None
    # What this host's BPF BIC and HighSpeed handed the kernel (VALIDATION.md §6, "Void kernel runs").
    bad = _samples([*good, (24.49, 0, 130_554_012, 0x822034E5, True), (24.5, 0, 1498, 0x822034E5, True)])
    assert fidelity.broken_window(bad) == {"t": 24.49, "flow": 0, "ssthresh": 0x822034E5, "cwnd": 130_554_012}
    # A window of 2^24 segments is as impossible here.
    assert fidelity.broken_window(_samples([*good, (2.0, 0, 1 << 25, 183, True)]))["cwnd"] == 1 << 25


def _sampler_rows(ns: str, sport: int, first_data_ns: int) -> list[dict]:
    """Sampler rows of one sender: a control connection and a data connection whose data
    starts at ``first_data_ns`` (the cookie counts as its first segment)."""
    base = {"ns": ns, "cwnd": 10, "ssthresh": bpfcc.SSTHRESH_INFINITE, "total_retrans": 0, "rtt_us": 50_000}
    base |= {"in_flight": 0, "ca_state": 0, "snd_wnd": 65_536, "rwnd_limited_us": 0, "sndbuf_limited_us": 0}
    rows = [base | {"t_ns": first_data_ns - 40_000_000, "sport": 5000, "bytes_acked": 200, "data_segs_out": 4}]
    for k, segs in enumerate((1, 1, 5, 25, 125)):
        t = first_data_ns + (k - 2) * 2_000_000  # a sample every 2 ms, data from the third
        rows.append(base | {"t_ns": t, "sport": sport, "bytes_acked": 1448 * segs, "data_segs_out": segs})
    return rows


def test_the_kernel_flows_starts_are_read_from_their_first_data_samples(tmp_path):
    # Three senders whose data started 0, 12 and 37 ms after the first's (the run of
    # another emulation, seen earlier, is left out).
    t0 = 5_000_000_000
    rows = _sampler_rows("xl-old-a0", 6000, 1_000_000)
    for k, delay_ms in enumerate((12, 0, 37)):
        rows += _sampler_rows(f"xl-run-a{k}", 6001 + k, t0 + delay_ms * 1_000_000)
    csv = tmp_path / "samples.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    samples = fidelity.netns_samples(csv, 3, t_end=t0 + 10**9)
    assert fidelity.kernel_starts(samples, 3) == [0.012, 0.0, 0.037]
    # Each flow's own clock starts at its first data sample.
    assert samples.groupby("flow")["t"].min().tolist() == [0.0, 0.0, 0.0]
    # A flow the sampler never saw: no starts rather than wrong ones.
    assert fidelity.kernel_starts(samples, 4) is None


def test_acks_per_segment_come_from_the_senders_last_samples_or_the_simulator_s_counts(tmp_path):
    # Two senders: 125 segments out and 25 ACKs in at the last sample, and 125 against 11.
    rows = []
    for k, acks in enumerate((25, 11)):
        for row in _sampler_rows(f"xl-run-a{k}", 6001 + k, 5_000_000_000):
            rows.append(row | {"segs_in": row["data_segs_out"] * acks // 125})
    csv = tmp_path / "samples.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    samples = fidelity.netns_samples(csv, 2, t_end=6 * 10**9)
    assert fidelity.acks_per_segment({}, samples) == pytest.approx(36 / 250)
    # The simulator's run counts them; a sampler that did not read segs_in gives nothing.
    assert fidelity.acks_per_segment({"acks": 500, "packets": 1000}, None) == 0.5
    assert fidelity.acks_per_segment({}, samples.drop(columns=["segs_in"])) is None


def test_receive_batches_and_backlog_merges_come_from_either_backend_s_counters():
    # The delay line's two queues: 300 packets in verdicts of 6 on average (over packets),
    # 100 in verdicts of 2: a packet went on in a verdict of 5 on average.
    delay = {"queues": {"0": {"packets": 300, "batch_packet_mean": 6.0}, "1": {"packets": 100, "batch_packet_mean": 2.0}}}
    assert fidelity.rx_batch({"delay_line": delay}) == pytest.approx(5.0)
    assert fidelity.rx_batch({"rx_batch_packet_mean": 7.5}) == 7.5
    # A delay line before the batches were counted, or a simulator with the noise off: nothing.
    assert fidelity.rx_batch({"delay_line": {"queues": {"0": {"packets": 10}}}}) is None
    assert fidelity.rx_batch({"rx_batch_packet_mean": 0.0}) is None
    rx = {"Tcp:InSegs": 723622, "Tcp:OutSegs": 59848, "TcpExt:TCPBacklogCoalesce": 282193}
    assert fidelity.backlog_merged({"receivers": rx}) == pytest.approx(0.39, abs=0.001)
    assert fidelity.backlog_merged({"acks": 1, "packets": 2}) is None


def test_the_simulator_s_receivers_get_a_short_buffer_s_trains_in_clumps():
    """The emulated senders' transmit batches pass a bottleneck with 0.2 BDP of buffer as
    trains: the receivers get them in clumps (the kernel's delay line let them go in
    verdicts of 8.5-12.6 packets at 10 and 50 ms). A full bottleneck spaces them out (the
    simulator's shaper; the kernel's HTB still lets 5-6 go together). No noise, no batches."""
    short, full = fidelity.Case("reno", 10, "0.2bdp", 1), fidelity.Case("reno", 10, "1.0bdp", 1)
    assert fidelity.rx_batch(fidelity.sim_trace(short, "duration", duration_s=3.0).provenance.stats) > 4
    assert fidelity.rx_batch(fidelity.sim_trace(full, "duration", duration_s=3.0).provenance.stats) < 2
    assert fidelity.rx_batch(fidelity.sim_trace(short, "duration", duration_s=3.0, noise=False).provenance.stats) is None


def _reduced_twice(case: fidelity.Case, seed: int, connected_before_ns: int | None = None, tso_defer: bool = True) -> bool:
    """Whether the simulator's emulated flow (8 s) lowered its ssthresh after leaving slow
    start; ``connected_before_ns``: its receiver's connection set up this long before the
    data instead of as the emulation's iperf3 does (an RTT and a little more)."""
    cfg, r = fidelity.sim_setup(case, "duration", 8.0, seed=seed, tso_defer=tso_defer)
    if connected_before_ns is not None:
        for f in cfg["flows"]:
            f["connected_before_ns"] = connected_before_ns
    ssthresh = sim_backend.run_config(cfg, r).df("tcp")["ssthresh"].dropna()
    return bool((ssthresh.diff() < 0).any())


def test_iperf3_s_start_keeps_the_kernel_s_single_reduction():
    """A lone CUBIC flow at 200 ms with 0.2 BDP ends slow start in a full queue; the
    kernel's (traced) reduces once and grows from there. iperf3 sends its data an RTT after
    the handshake, and Linux's receiver times its buffer's measures from the handshake: they
    fall inside the trains with segments queued, and its window opens a round later than
    when the data follows the handshake. Modelled, a sender without TSO deferral reduces
    once in 5 of 6 seeds; with the data right after the handshake (xfer's start), its
    window past the first loss fills, opens in a burst and brings a second loss in 3 of 6
    (5 of 6 before the receiver acknowledged a window-limited flight's pushed last segment
    at its read, 2026-12-06: the window then opens in more, smaller steps).
    A deferring sender (the default), which sends that opening an skb at a time, reduces
    once with iperf3's start in 5 of 6 and with xfer's in 4 of 6 (5 of 6 each before)."""
    case = fidelity.Case("cubic", 200, "0.2bdp", 1)
    seeds = range(1, 7)
    as_iperf3 = [_reduced_twice(case, seed, tso_defer=False) for seed in seeds]
    at_once = [_reduced_twice(case, seed, connected_before_ns=0, tso_defer=False) for seed in seeds]
    assert sum(as_iperf3) <= 1, as_iperf3
    assert sum(at_once) >= 3, at_once
    deferring = [_reduced_twice(case, seed) for seed in seeds] + [
        _reduced_twice(case, seed, connected_before_ns=0) for seed in seeds
    ]
    assert sum(deferring) <= 3, deferring


def test_tso_deferral_is_recorded_with_the_simulator_s_stored_side(monkeypatch):
    # Deferral is the default (since 2026-12-06): a side stored before, without it, is not
    # the default's and is made again; --no-tso-defer reads it.
    case = fidelity.Case("reno", 10, "1.0bdp", 1)
    assert fidelity.reads_tag(case) == "uniform+tso-defer"
    assert not fidelity.made_with_reads({"reads": "uniform"}, case)
    monkeypatch.setattr(fidelity, "TSO_DEFER", False)
    assert fidelity.reads_tag(case) == "uniform"
    assert fidelity.made_with_reads({"reads": "uniform"}, case)


def test_a_side_stored_by_another_build_of_the_simulator_is_made_again():
    # --kernel-runs read seed 1's figures from sides stored by the build before a change (a
    # fidelity figure of 2026-12-06 was so): a stored side says which build made it.
    case = fidelity.Case("reno", 10, "1.0bdp", 1)
    this = extension.build_digest()
    assert len(this) == 12 and this == extension.build_digest()
    made = {"reads": fidelity.reads_tag(case), "simulator": this}
    assert fidelity.made_now(made, case, "sim") and fidelity.made_now({"simulator": this}, case, "simplain")
    assert not fidelity.made_now(made | {"simulator": "0123456789ab"}, case, "sim")
    assert not fidelity.made_now({"reads": fidelity.reads_tag(case)}, case, "sim")
    assert not fidelity.made_now(made | {"reads": "uniform"}, case, "sim")


def test_a_case_whose_kernel_attempts_were_all_void_is_listed_not_fatal(monkeypatch):
    case = fidelity.Case("bic", 10, "0.2bdp", 1)

    def void(case, kind):
        raise fidelity.BackendError("3 runs in a row were void, the last because flow 0 had ssthresh 0x822034e5")

    monkeypatch.setitem(fidelity.RUNNERS, "netns", void)
    monkeypatch.setitem(fidelity.RUNNERS, "sim", lambda case, kind: {"stub": kind})
    monkeypatch.delitem(fidelity.RUNNERS, "simplain")
    res = fidelity.run_case(case)
    assert res["failed"].startswith("3 runs in a row were void")
    assert res["sim_duration"] == {"stub": "duration"}
    # Stored as failed: the table lists it under the tally instead of judging it.
    again = fidelity.run_case(case, backends_=())
    assert again["failed"] == res["failed"]
    assert "No kernel run in 1 of the cases" in fidelity.table([again])


def test_dense_kernel_runs_of_a_case_void_on_every_attempt_are_listed_not_fatal(monkeypatch, capsys, tmp_path):
    # fidelity_events --kernel-runs: a case the netns backend refuses (every attempt void)
    # is a row saying so, and the next case still runs.
    tried = []

    def void(case, kind, samples_dir=None, dense=False):
        tried.append(case.key)
        (samples_dir / f"{case.stem}-netns-samples.parquet").write_bytes(b"left by the sampler")
        raise fidelity.BackendError("3 runs in a row were void, the last because flow 1 (htcp) had cwnd 1524355904")

    monkeypatch.setattr(fidelity, "run_netns_once", void)
    cases = [fidelity.Case("htcp", 10, "0.2bdp", 4), fidelity.Case("htcp", 50, "0.2bdp", 4)]
    fidelity_events.fresh_runs(cases, 2, tmp_path)
    out = capsys.readouterr().out
    assert tried == ["htcp:10:0.2bdp:4"] * 2 + ["htcp:50:0.2bdp:4"] * 2
    assert out.count("| kernel 1 | no run: 3 runs in a row were void") == 2 and "median" not in out
    assert list(tmp_path.iterdir()) == [], "no samples of a void run are kept"


def test_a_kernel_run_whose_emulation_was_not_clean_is_made_again_then_left_out(monkeypatch, capsys):
    case = fidelity.Case("cubic", 50, "0.2bdp", 1)
    made = []

    def once(case, kind, duration_s=fidelity.DURATION_S, samples_dir=None):
        made.append(kind)
        late = 0.71 if len(made) < 3 else 0.03  # the backend's tolerance: a mean of 0.2 ms
        return {"goodput_mbps": 106.4 if late > 0.2 else 250.1, "late_mean_ms": late, "unclean": late > 0.2}

    monkeypatch.setattr(fidelity, "run_netns_once", once)
    got = fidelity.run_netns(case, "duration")
    assert (got["goodput_mbps"], got["attempts"], got["unclean"]) == (250.1, 3, False)
    assert "emulation not clean (attempt 2 of 3)" in capsys.readouterr().err
    # Never clean: the last attempt is kept, flagged.
    made.clear()
    monkeypatch.setattr(fidelity, "CLEAN_ATTEMPTS", 2)
    assert fidelity.run_netns(case, "volume") | {"goodput_mbps": 0} == {
        "goodput_mbps": 0,
        "late_mean_ms": 0.71,
        "unclean": True,
        "attempts": 2,
    }

    # Judging: a flagged run, or one stored before the flag whose delay line was late on
    # average beyond the backend's tolerance, is not the scenario and is left out.
    side = {"goodput_mbps": 106.4, "jain": 1.0, "retransmissions": 5, "drops": 5}
    for flagged in ({"unclean": True, "late_mean_ms": 0.1}, {"late_mean_ms": 0.712}):
        _store_kernel(case, side | flagged, {"makespan_s": 20.3})
        assert fidelity.unclean(side | flagged)
        assert fidelity.kernel_run(fidelity.RESULTS, case) is None
    _store_kernel(case, side | {"late_mean_ms": 0.03}, {"makespan_s": 20.3, "unclean": False})
    assert fidelity.kernel_run(fidelity.RESULTS, case)["goodput_mbps"] == 106.4
    # In the table: its row says why, and the tally leaves it out.
    sim = {"goodput_mbps": 257.6, "jain": 1.0, "cov": 0.1, "retransmissions": 5, "drops": 5}
    res = {"case": case.key, "sim_duration": sim, "sim_volume": {"makespan_s": 10.6}}
    res |= {"netns_duration": side | {"cov": 0.1, "late_mean_ms": 0.712}, "netns_volume": {"makespan_s": 20.3}}
    text = fidelity.table([res])
    assert "kernel run unclean: delay line late 0.71 ms on average" in text
    assert "**0 of 0 cases hold" in text and "1 cases are left out: their kernel run's emulation was not clean" in text


def test_the_simulator_is_judged_against_the_kernel_s_range_when_it_has_two_runs():
    run = lambda g, j, ss, done: {"goodput_mbps": g, "jain": j, "ss_ssthresh": ss, "makespan_s": done}  # noqa: E731
    kernel = [run(200.0, 0.90, 100.0, 10.0), run(260.0, 0.99, 200.0, 14.0)]
    sim = run(230.0, 0.60, 150.0, 14.5) | {"retransmissions": 10, "drops": 10}
    ok = fidelity.within_range(sim, kernel)
    # Between the two runs: 230 Mbit/s and an exit of 150 (±5 % and ±20 % of neither).
    assert ok["goodput"] and ok["ss_exit"]
    # Below both runs' Jain by more than 0.05; 14.5 s is within 5 % of 14 s.
    assert ok["jain"] is False and ok["completion"] is True
    assert ok["retx"] is True
    # Against either run alone the goodput and the exit miss.
    assert not any(fidelity.verdict(sim, k)["goodput"] for k in kernel)


def test_the_kernel_s_median_run_takes_each_metric_s_median():
    runs = [
        {"goodput_mbps": 250.0, "jain": 0.99, "ss_ssthresh": 300.0, "makespan_s": 9.0},
        {"goodput_mbps": 200.0, "jain": 0.70, "ss_ssthresh": None, "makespan_s": 20.0},
        {"goodput_mbps": 260.0, "jain": 0.95, "ss_ssthresh": 200.0, "makespan_s": 10.0},
    ]
    m = fidelity.median_run(runs)
    # One outlying run moves no median; a metric a run lacks is left out of its median.
    assert m == {"goodput_mbps": 250.0, "jain": 0.95, "ss_ssthresh": 250.0, "makespan_s": 10.0}


def _store_kernel(case, duration: dict, volume: dict | None = None, samples: pd.DataFrame | None = None) -> None:
    stem = fidelity.RESULTS / case.key.replace(":", "_")
    doc = {"duration": duration, "volume": volume} if volume is not None else duration
    (stem.parent / f"{stem.name}-netns.json").write_text(fidelity.json.dumps(doc))
    if samples is not None:
        samples.to_parquet(stem.parent / f"{stem.name}-netns-samples.parquet")


def test_an_archived_kernel_run_judges_as_its_results_directory(tmp_path):
    inf = bpfcc.SSTHRESH_INFINITE
    ok, void = fidelity.Case("reno", 10, "0.2bdp", 1), fidelity.Case("reno", 10, "0.2bdp", 4)
    failed = fidelity.Case("bic", 50, "1.0bdp", 1)
    base = {"goodput_mbps": 251.5, "jain": 0.998, "cov": 0.1, "retransmissions": 30, "drops": 30}
    base["trajectory"] = {"0": [1.0] * 3000}
    # The exit is read from the samples (ssthresh 64 at 0.05 s), not from the stored figure.
    samples = _samples([(0.0, 0, 10, inf, False), (0.05, 0, 128, 64, True), (0.1, 0, 66, 64, True)])
    _store_kernel(ok, base | {"ss_ssthresh": 99.0}, {"makespan_s": 10.25, "starts_s": None}, samples)
    bad = _samples([(0.0, 0, 10, inf, False), (1.0, 0, 130_554_012, 0x822034E5, True)])
    _store_kernel(void, base | {"starts_s": [0.0, 0.012]}, {"makespan_s": 11.0, "starts_s": [0.0, 0.01, 0.02, 0.03]}, bad)
    _store_kernel(failed, {"failed": "3 runs in a row were void"})

    path = fidelity.archive("test-run", into=tmp_path / "runs")
    assert path.name == "test-run.json.gz" and path.stat().st_size < 2000  # no trajectories
    # The machine it ran on is kept with it: a kernel run measures its host as well as TCP.
    host = fidelity.json.loads(fidelity.gzip.decompress(path.read_bytes()))["host"]
    assert host["kernel"] == fidelity.os.uname().release and host["cpus"] == fidelity.os.cpu_count()
    for run in (fidelity.RESULTS, path):
        got = fidelity.kernel_run(run, ok)
        assert (got["goodput_mbps"], got["ss_ssthresh"], got["ss_time_s"], got["makespan_s"]) == (251.5, 64.0, 0.05, 10.25)
        assert fidelity.kernel_run(run, void) is None  # an impossible window
        assert fidelity.kernel_run(run, failed) is None
        assert fidelity.kernel_run(run, fidelity.Case("cubic", 200, "1.0bdp", 4)) is None  # not run
    # The flows' starts a simulator's run takes are kept.
    assert fidelity.kernel_side(path, void)["volume"]["starts_s"] == [0.0, 0.01, 0.02, 0.03]
    assert fidelity.kernel_side(path, failed) == {"failed": "3 runs in a row were void"}
    for run in (fidelity.RESULTS, path):
        starts = fidelity.starts_from_kernel(run, void)
        assert starts == {"duration": [0.0, 0.012], "volume": [0.0, 0.01, 0.02, 0.03]}
        # One flow starts at the scenario's time; a failed or missing case has no starts.
        assert fidelity.starts_from_kernel(run, ok) is None and fidelity.starts_from_kernel(run, failed) is None
        assert fidelity.starts_from_kernel(run, fidelity.Case("cubic", 200, "1.0bdp", 4)) is None


def test_archiving_nothing_is_an_error_and_a_bad_archive_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no kernel run of the matrix is stored"):
        fidelity.archive("empty", into=tmp_path / "runs")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(SystemExit, match="bad.json.gz is not an archived kernel run"):
        fidelity.kernel_run(bad, fidelity.Case("reno", 10, "0.2bdp", 1))


def _archived_runs(tmp_path, case, sides: list[tuple[dict, dict]]) -> list:
    """Kernel runs of ``case`` (its duration and volume figures per run), each stored and
    archived as a matrix run would be; RESULTS is left at an empty table's directory."""
    runs = []
    for k, (duration, volume) in enumerate(sides):
        fidelity.RESULTS = tmp_path / f"run{k}"  # restored by the fixture's monkeypatch
        fidelity.RESULTS.mkdir()
        _store_kernel(case, duration, volume)
        runs.append(fidelity.archive(f"run{k}", into=tmp_path / "runs"))
    fidelity.RESULTS = tmp_path / "table"
    return runs


def test_the_simulator_is_judged_against_archived_runs_with_the_last_run_s_starts(tmp_path, monkeypatch):
    case = fidelity.Case("cubic", 50, "1.0bdp", 4)
    sides = []
    for k, (goodput, jain) in enumerate(((240.0, 0.9), (260.0, 0.7), (250.0, 0.8))):
        starts = [0.0, 0.01 * (k + 1), 0.02, 0.03]
        duration = {"goodput_mbps": goodput, "jain": jain, "retransmissions": 5, "drops": 5, "starts_s": starts}
        sides.append((duration, {"makespan_s": 10.0 + k, "starts_s": starts[::-1]}))
    runs = _archived_runs(tmp_path, case, sides)
    seen = []

    def sim(case, kind, starts_s=None):
        seen.append((kind, starts_s))
        return {"goodput_mbps": 247.0, "jain": 0.79, "retransmissions": 5, "drops": 5, "makespan_s": 11.3}

    monkeypatch.setitem(fidelity.RUNNERS, "sim", sim)
    text = fidelity.against_runs(runs, [case])
    # Median 250 Mbit/s, Jain 0.8, 11 s: the simulator holds all three.
    assert text.startswith("The simulator against the median of 3 kernel runs per case: **1 of 1 cases hold every")
    assert seen == [("duration", [0.0, 0.03, 0.02, 0.03]), ("volume", [0.03, 0.02, 0.03, 0.0])]
    # Stored for the table: judged again without running.
    fidelity.against_runs(runs, [case])
    assert len(seen) == 2


def test_the_simulator_s_median_over_seeds_is_judged_against_the_kernel_s_median(tmp_path, monkeypatch):
    case = fidelity.Case("cubic", 200, "0.2bdp", 1)
    duration = {"jain": 1.0, "retransmissions": 5, "drops": 5, "ss_ssthresh": 3000.0}
    kernel = ((250.0, 12.0), (200.0, 16.0), (210.0, 13.0))
    runs = _archived_runs(tmp_path, case, [(duration | {"goodput_mbps": g}, {"makespan_s": done}) for g, done in kernel])
    # Seed 1 (the table's) backs off twice: 160 Mbit/s; seeds 2-5 do not (205-245).
    by_seed = {1: 160.0, 2: 245.0, 3: 205.0, 4: 212.0, 5: 240.0}
    made = []

    def sim(case, kind, seed=None, starts_s=None, reads=None, tso_defer=None):
        made.append((kind, seed or 1, reads))
        g = by_seed[seed or 1]
        retx = 9 if seed == 5 else 5  # one seed resends more than it lost
        figures = {"goodput_mbps": g, "jain": 1.0, "retransmissions": retx, "drops": 5, "ss_ssthresh": 3100.0}
        return figures | {"makespan_s": 3000 / g}

    monkeypatch.setattr(fidelity, "run_sim", sim)
    monkeypatch.setitem(fidelity.RUNNERS, "sim", sim)
    text = fidelity.against_runs(runs, [case], seeds=[1, 2, 3, 4, 5])
    lines = text.split("\n\n")
    # The kernel's median: 210 Mbit/s, 13 s. Seed 1 misses both by 24 %; the seeds' median
    # (212 Mbit/s, 14.15 s) holds the goodput but not the completion (+8.8 %), and seed 5's
    # 9 retransmissions for 5 drops fail the simulator's own check.
    assert "**0 of 1 cases" in lines[0] and "goodput ±5 %: 0/1" in lines[0]
    assert lines[1].startswith("The median of the simulator's runs with seeds 1, 2, 3, 4, 5")
    assert "goodput ±5 %: 1/1" in lines[1] and "completion ±5 %: 0/1" in lines[1]
    assert "sim retransmissions ≤ 1.1 × drops: 0/1" in lines[1]
    assert sorted(s for k, s, _ in made if k == "volume") == [1, 1, 2, 3, 4, 5]  # seed 1 once stored, once seeded
    assert {r for *_, r in made} == {fidelity.READS, None}
    # Spread: the kernel's goodput (250 - 200) / 210 = 0.238, the seeds' (245 - 160) / 212 = 0.401.
    assert "goodput: over 10 % in 1 of 1 cases on the kernel and 1 of 1 on the simulator" in lines[3]
    assert "(mean spread 0.238 and 0.401)" in lines[3]
    assert "slow-start exit: over 10 % in 0 of 1 cases" in lines[3]
    # The seeds' median (212 Mbit/s, 14.15 s) is inside the kernel's range (200-250, 12-16 s);
    # seed 1 (160 Mbit/s, 18.75 s) is outside it.
    assert "`cubic:200:0.2bdp:1` (goodput 160.0 Mbit/s against 200.0–250.0 Mbit/s; completion 18.75 s" in lines[4]
    assert lines[5].startswith("The median of the simulator's seeds against the range of all of a case's runs: **1 of 1")
    assert lines[5].endswith("outside it: none.")


def test_a_simulator_side_stored_with_other_reads_is_made_again(tmp_path, monkeypatch):
    case = fidelity.Case("reno", 10, "1.0bdp", 1)
    side = ({"goodput_mbps": 250.0, "jain": 1.0, "retransmissions": 5, "drops": 5}, {"makespan_s": 10.0})
    runs = _archived_runs(tmp_path, case, [side, side])
    made = []

    def sim(case, kind):
        made.append((fidelity.READS, kind))
        goodput = 250.0 if fidelity.READS == "uniform" else 200.0
        return {"goodput_mbps": goodput, "jain": 1.0, "retransmissions": 5, "drops": 5, "makespan_s": 10.0}

    monkeypatch.setitem(fidelity.RUNNERS, "sim", sim)
    texts = []
    for reads in ("measured", "measured", "uniform", "uniform"):
        monkeypatch.setattr(fidelity, "READS", reads)
        texts.append(fidelity.against_runs(runs, [case]))
    # Made once per model, then judged from storage; each model's own figures judged.
    assert made == [("measured", "duration"), ("measured", "volume"), ("uniform", "duration"), ("uniform", "volume")]
    held = [t.split("**")[1].split(" of ")[0] for t in texts]
    assert held == ["0", "0", "1", "1"]  # 200 Mbit/s misses the kernel's 250 by 20 %; 250 holds


def test_a_run_is_read_back_from_the_table_as_printed():
    side = {"goodput_mbps": 243.61, "jain": 0.99951, "cov": 0.221, "ss_ssthresh": 3187.4, "ss_time_s": 1.891}
    side |= {"first_loss_s": 1.889, "retransmissions": 1265, "drops": 1264, "load": [2.2, 1.0], "starts_s": [0.0, 0.012]}
    sim = side | {"goodput_mbps": 200.0, "ss_ssthresh": None}

    def res(key, kernel, sim_done, kernel_done):
        sides = {"sim_duration": sim, "netns_duration": kernel}
        return {"case": key, **sides, "sim_volume": {"makespan_s": sim_done}, "netns_volume": {"makespan_s": kernel_done}}

    broken = {"t": 2.23, "flow": 0, "ssthresh": 0x822034E5, "cwnd": 10}
    rows = [res("cubic:200:0.2bdp:2", side, 14.2, 13.004), res("bic:10:1.0bdp:1", side | {"broken": broken}, 9.0, 8.7)]
    rows.append({"case": "htcp:50:1.0bdp:4", "failed": "void"})
    text = f"<!-- table:fidelity -->\n{fidelity.table(rows)}\n<!-- /table:fidelity -->"
    cases = fidelity.read_table(text)
    assert cases["cubic:200:0.2bdp:2"]["duration"] == {
        **{"goodput_mbps": 243.6, "jain": 1.0, "cov": 0.22, "ss_ssthresh": 3187.0, "ss_time_s": 1.89, "first_loss_s": 1.89},
        **{"retransmissions": 1265, "drops": 1264, "broken": None, "load": [2.2]},
    }
    assert cases["cubic:200:0.2bdp:2"]["volume"] == {"makespan_s": 13.0}
    assert cases["bic:10:1.0bdp:1"]["duration"]["broken"] == {"t": 2.23, "ssthresh": 0x822034E5}
    assert "failed" in cases["htcp:50:1.0bdp:4"]


def test_the_reorderings_the_kernel_s_senders_saw_are_counted_per_run():
    inf = bpfcc.SSTHRESH_INFINITE
    rows = [(0.0, 0, 10, inf, False), (0.1, 0, 40, inf, False), (0.0, 1, 10, inf, False), (0.2, 1, 30, 20, True)]
    s = _samples(rows).assign(reord_seen=[0, 7, 2, 3])  # cumulative per socket
    assert fidelity.sample_fields(s)["reord_seen"] == 10
    # The simulator's samples have no such field: its paths never reorder.
    assert fidelity.sample_fields(_samples(rows))["reord_seen"] is None


def _flow_events(flow: int, times: tuple[float, ...]) -> list[tuple]:
    """A flow's dense samples: slow start left at 0.10 s (cwnd 320 → 160), then an event at
    each of ``times`` from cwnd 300 to ssthresh 150 (Reno's halving), two samples of Recovery each."""
    inf = bpfcc.SSTHRESH_INFINITE
    rows = [(0.0, flow, 10, inf, 0), (0.098, flow, 320, inf, 0), (0.100, flow, 320, 160, 3)]
    rows += [(0.102, flow, 160, 160, 3), (0.104, flow, 160, 160, 0)]
    for t in times:
        rows += [(t - 0.002, flow, 300, 150, 0), (t, flow, 300, 150, 3), (t + 0.002, flow, 150, 150, 3)]
        rows += [(t + 0.004, flow, 151, 150, 0)]
    return rows


def test_congestion_events_their_spacing_and_backoff_are_read_from_dense_samples():
    frame = lambda rows: pd.DataFrame(rows, columns=["t", "flow", "cwnd", "ssthresh", "ca_state"])  # noqa: E731
    s = frame(_flow_events(0, (1.4, 2.7, 4.0)))
    assert fidelity_events.events(s) == (4, 300.0, 300.0, 0.5)  # cwnd 320, 300, 300, 300 before the four
    assert fidelity_events.event_gap(s) == pytest.approx(1.3)  # the slow start's event is not a gap's start
    # Flows' gaps are pooled: two of 1.3 s and two of 2.0 s; a flow with one later event has none.
    both = frame(_flow_events(0, (1.4, 2.7, 4.0)) + _flow_events(1, (2.0, 4.0, 6.0)) + _flow_events(2, (3.0,)))
    assert fidelity_events.event_gap(both) == pytest.approx(1.65)
    assert np.isnan(fidelity_events.event_gap(frame(_flow_events(0, (1.4,)))))
    figures = {"goodput_mbps": 221.28, "retransmissions": 204, "late_mean_ms": 0.3, "unclean": True}
    text, values = fidelity_events.run_row("kernel 1", figures, s)
    assert text == "| kernel 1 | 221.3 | 204 | 4 | 1.30 | 300 | 0.50 | 0.30 (unclean) |"
    assert values[:3] == [221.28, 204, 4]


def test_each_congestion_event_s_retransmissions_and_the_ack_stall_before_it_are_read():
    # One flow sampled every 2 ms for 2 s: slow start left at 0.1 s (30 resent), an event at
    # 1.0 s with ACKs flowing before it (3 resent), one at 1.5 s after 6 ms without an ACK
    # (40 resent); the sampler itself skipped 12 ms at 1.8 s.
    t = np.round(np.arange(0, 2.0005, 0.002), 3)
    t = t[(t <= 1.8) | (t >= 1.812)]
    state = np.where(((t >= 0.1) & (t < 0.104)) | ((t >= 1.0) & (t < 1.012)) | ((t >= 1.5) & (t < 1.512)), 3, 0)
    retx = 30 * (t >= 0.102) + 3 * (t >= 1.002) + 40 * (t >= 1.502)
    acks = np.cumsum(np.where((t > 1.490) & (t <= 1.496), 0, 5))
    s = pd.DataFrame({"t": t, "flow": 0, "cwnd": 300, "ca_state": state, "retransmissions": retx, "segs_in": acks})
    d = fidelity_events.event_drops(s)
    assert d.t.tolist() == [1.0, 1.5] and d.retx.tolist() == [3, 40] and d.cwnd.tolist() == [300, 300]
    assert d.stall_ms.tolist() == pytest.approx([0.0, 6.0])
    per_s, longest = fidelity_events.sampler_gaps(s)
    assert (per_s, longest) == (pytest.approx(0.5), pytest.approx(12.0))
    cells = fidelity_events.drops_cells(d, (per_s, longest))
    assert cells == ["2", "22", "21.5", "40", "1 of 2", "93%", "0.5", "12"]
    # Samples with no ACK count (an iperf3 trace's): no stall is read, the cells stay empty.
    plain = fidelity_events.event_drops(s.drop(columns="segs_in"))
    assert plain.stall_ms.isna().all() and fidelity_events.drops_cells(plain, None)[4:] == ["", "", "", ""]


def test_ack_free_stretches_are_counted_per_flow_and_second_after_slow_start():
    # Two flows sampled every 2 ms for 4 s, ACKs in every interval but: flow 0 none for
    # 24 ms at 2.5 s and 6 ms at 3.0 s, none for 30 ms at 0.5 s (slow start: not counted)
    # and none for 30 ms at 3.5 s where the sampler itself skipped 8 ms (not counted).
    t = np.round(np.arange(0, 4.0005, 0.002), 3)
    t = t[(t <= 3.51) | (t >= 3.518)]
    quiet = ((t > 2.5) & (t <= 2.524)) | ((t > 3.0) & (t <= 3.006)) | ((t > 0.5) & (t <= 0.53)) | ((t > 3.5) & (t <= 3.53))
    flows = [
        pd.DataFrame({"t": t, "flow": 0, "segs_in": np.cumsum(np.where(quiet, 0, 3))}),
        pd.DataFrame({"t": t, "flow": 1, "segs_in": np.cumsum(np.ones(len(t), int))}),
    ]
    per_s = fidelity_events.ack_gaps(pd.concat(flows))
    assert fidelity_events.ACK_GAP_LEVELS_S == (0.002, 0.004, 0.01, 0.02)
    assert per_s == pytest.approx([2 / 4, 2 / 4, 1 / 4, 1 / 4])  # two flows, 2 s each


def test_held_out_kernel_runs_and_the_simulator_face_the_same_ranges():
    run = lambda g: {"goodput_mbps": g, "jain": 1.0, "ss_ssthresh": None, "makespan_s": 3000 / g}  # noqa: E731
    kernel = {"reno:50:1.0bdp:1": [run(200.0), run(240.0), run(260.0)]}
    sims = {"reno:50:1.0bdp:1": run(250.0) | {"retransmissions": 5, "drops": 5}}
    text = fidelity.held_out(kernel, sims)
    # 200 is 17 % below the others' range (240-260) and 260 is 8 % above theirs (200-240):
    # one kernel run of three stands among its fellows. 250 is within 5 % of 240 or
    # between the others in all three ranges.
    assert "**1 of 3 held-out kernel runs hold every tolerance** (goodput ±5 %: 1/3" in text
    assert "the simulator against the same ranges: **3 of 3 hold" in text
    assert "against the range of all of a case's runs: **1 of 1 cases hold every tolerance**" in text
    assert text.endswith("outside it: none")
    # 180 Mbit/s is outside every range, and the case is named with the kernel's range.
    low = fidelity.held_out(kernel, {k: v | {"goodput_mbps": 180.0} for k, v in sims.items()})
    assert "**0 of 3 hold every tolerance**" in low
    assert low.endswith("outside it: `reno:50:1.0bdp:1` (goodput 180.0 Mbit/s against 200.0–260.0 Mbit/s)")
    # A case with fewer than three kernel runs has no held-out test.
    assert "in the 0 cases" in fidelity.held_out({k: v[:2] for k, v in kernel.items()}, sims)


def test_the_controls_show_whether_the_tests_tell_a_worse_simulator_apart(tmp_path, monkeypatch):
    case = fidelity.Case("htcp", 50, "1.0bdp", 1)
    duration = {"jain": 1.0, "retransmissions": 5, "drops": 5, "ss_ssthresh": 2500.0}
    kernel = (240.0, 250.0, 262.0)
    runs = _archived_runs(tmp_path, case, [(duration | {"goodput_mbps": g}, {"makespan_s": 3000 / g}) for g in kernel])
    made = []

    def sim(case, kind, seed=None, starts_s=None, reads=None, tso_defer=None, plain=False, noise=True):
        made.append((case.variant, seed, plain, noise, tso_defer))
        # Reno's law (the swapped control) carries 180 Mbit/s, the plain hosts 230, the rest 251.
        g = 180.0 if case.variant == "reno" else 230.0 if plain else 251.0
        return {"goodput_mbps": g, "jain": 1.0, "retransmissions": 5, "drops": 5, "ss_ssthresh": 2450.0} | {
            "makespan_s": 3000 / g
        }

    monkeypatch.setattr(fidelity, "run_sim", sim)
    monkeypatch.setitem(fidelity.RUNNERS, "sim", sim)
    text = fidelity.against_runs(runs, [case], with_controls=True)
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    # The table's simulator (251) is within 5 % of the median (250) and of every range.
    assert rows["the table's simulator (seed 1)"].endswith("| 1 | 3 | 1 |")
    # Plain hosts (230): 8 % below the median, 4.2 % below 240 (its completion 4.3 % longer):
    # it stands in the two ranges that keep the 240 Mbit/s run and in the whole range, so
    # ranges tell it apart less than the median does. Reno's law (180) misses everything.
    assert rows["the emulation not modelled (plain hosts)"].endswith("| 0 | 2 | 1 |")
    assert rows["another variant's law"].endswith("| 0 | 0 | 0 |")
    # Held out, 240 is 4 % below 250 and 262 is 4.8 % above 250: all three kernel runs stand.
    assert rows["(the held-out kernel runs themselves)"].endswith("| | 3 | |")
    assert ("reno", 1, False, True, None) in made and ("htcp", 1, True, True, None) in made
    assert ("htcp", 1, False, True, False) in made and ("htcp", 1, False, False, None) in made
