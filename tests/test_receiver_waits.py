"""xferlab.netns.sched_waits and benches/receiver_waits.py: the receiving applications' waits read from
an ftrace text, kept per kernel run, and the stall model they give the emulated simulator
(benches/fidelity.py --reads stalls)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from xferlab import metrics
from xferlab.backends import sim as sim_backend
from xferlab.fidelity import emulation, simulator
from xferlab.fidelity.matrix import Case
from xferlab.fidelity.runs import made_with_reads, reads_tag
from xferlab.fidelity.settings import OPTIONS
from xferlab.netns import sched_waits

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benches"))

import receiver_waits  # noqa: E402


def _switch(t: float, prev: int, state: str, nxt: int, cpu: int = 1) -> str:
    return (
        f"          task-{prev}   [00{cpu}] d..2. {t:.6f}: sched_switch: prev_comm=task prev_pid={prev} "
        f"prev_prio=120 prev_state={state} ==> next_comm=other next_pid={nxt} next_prio=120"
    )


def _wakeup(t: float, waker: int, pid: int) -> str:
    return f"          waker-{waker}   [000] dNs6. {t:.6f}: sched_wakeup: comm=x pid={pid} prio=120 target_cpu=001"


def test_a_receiver_s_waits_run_from_its_wakeup_or_preemption_to_its_running():
    ours, other = 100, 200
    trace = "\n".join(
        [
            "# tracer: nop",
            _wakeup(1.000000, 7, ours),
            _switch(1.000070, 0, "R", ours),  # woken, runs 70 µs later
            _switch(1.001000, ours, "R+", 8),  # preempted
            _switch(1.003000, 8, "R", ours),  # back 2 ms later
            _wakeup(1.004000, ours, other),  # it wakes another task: recorded, not ours
            _switch(1.004500, ours, "S", other),  # sleeps; the other runs (not a wait of ours)
            _wakeup(1.010000, 9, ours),
            _wakeup(1.010050, 9, ours),  # a second wakeup before it ran: the first counts
            _switch(1.010100, 9, "S", ours),
            "garbage line",
        ]
    )
    w, span = sched_waits.waits(trace, {ours})
    assert w * 1e6 == pytest.approx([70, 2000, 100], abs=0.5)
    assert span == pytest.approx(0.0101)
    assert sched_waits.summary(w, span).startswith("297 waits/s, median 100 µs")
    assert sched_waits.summary(np.array([]), 0.0) == "no waits traced"


def test_receivers_are_recognised_by_the_command_lines_the_netns_backend_gives_them():
    assert sched_waits.is_receiver("iperf3", [b"iperf3", b"-s", b"-1", b"-J", b""])
    assert not sched_waits.is_receiver("iperf3", [b"iperf3", b"-c", b"10.2.0.1", b""])
    assert sched_waits.is_receiver("xfer", [b"/repo/target/release/xfer", b"serve", b"--listen", b""])
    assert not sched_waits.is_receiver("xfer", [b"/repo/target/release/xfer", b"send", b""])
    assert not sched_waits.is_receiver("xfer", [b""])


def test_the_stall_model_pools_every_wait_and_the_simulator_takes_it(tmp_path, monkeypatch):
    # Two runs of a lone flow, 10 s each: 3 000 waits of 0.1-2.9 ms in all, 150 per second;
    # one run of four flows, 10 s: 4 000 waits of its four receivers, 100 per second each.
    waits = [np.linspace(1e-4, 2.9e-3, 1000), np.linspace(1e-4, 2.9e-3, 2000)]
    runs = [{"case": "reno:10:0.2bdp:1"}] * 2
    four = {"waits": [np.full(4000, 5e-3)], "span_s": 10.0, "runs": [{"case": "cubic:50:1.0bdp:4"}]}
    one = {"flows": 1, "waits": waits, "span_s": 20.0, "runs": runs}
    four = {"flows": 4, **four}
    apps = {"iperf3": {"flows 1": one, "reno:10:0.2bdp:1": one, "flows 4": four}}
    model = receiver_waits.model(apps, dense=False)
    a = model["apps"]["iperf3"]["flows 1"]
    assert a["rate_hz"] == 150.0 and a["waits"] == 3000 and a["traced_s"] == 20.0
    assert model["apps"]["iperf3"]["reno:10:0.2bdp:1"] == a
    assert model["apps"]["iperf3"]["flows 4"]["rate_hz"] == 100.0
    assert len(a["quantiles_us"]) == sched_waits.QUANTILES
    assert a["quantiles_us"][0] == 100.0 and a["quantiles_us"][-1] == 2900.0
    assert a["quantiles_us"][500] == pytest.approx(1500.0, abs=2)
    stalls = tmp_path / "stalls.json"
    stalls.write_text(receiver_waits.dumps(model))
    assert json.loads(stalls.read_text()) == model
    assert len(stalls.read_text().splitlines()) < 60  # a list of numbers takes a line
    monkeypatch.setattr(emulation, "EMULATION_STALLS", stalls)
    monkeypatch.setattr(OPTIONS, "stall_runs", ())  # no kernel run's own waits
    emulation.emulation_stalls_ns.cache_clear()
    try:
        case = Case("reno", 10, "0.2bdp", 1)
        cfg, r = simulator.sim_setup(case, "duration", duration_s=2, reads="stalls")
        assert cfg["noise"]["app_stall_rate_hz"] == 150.0
        assert cfg["noise"]["app_stall_quantiles_ns"][0] == 100_000
        assert cfg["noise"]["app_stall_quantiles_ns"][-1] == 2_900_000
        assert cfg["tcp"]["linux_acks"] is True
        # A case measured takes its own; others, their number of flows' (or the nearest).
        four_cfg, _ = simulator.sim_setup(Case("reno", 10, "0.2bdp", 4), "duration", reads="stalls")
        assert four_cfg["noise"]["app_stall_rate_hz"] == 100.0
        assert emulation.emulation_stalls_ns("iperf3", "bic:50:1.0bdp:2", 2)[0] == 150.0
        model["apps"]["iperf3"]["reno:10:0.2bdp:1"] = {**a, "rate_hz": 75.0}
        stalls.write_text(json.dumps(model))
        emulation.emulation_stalls_ns.cache_clear()
        assert emulation.emulation_stalls_ns("iperf3", "reno:10:0.2bdp:1", 1)[0] == 75.0
        # The simulator runs with it: held a fifth of the time (150 waits of 1.5 ms a second),
        # a lone flow through a fifth of a BDP carries much less than with prompt readers.
        goodput = lambda c: metrics.compute(sim_backend.run_config(c, r))["aggregate_goodput_mbps"]  # noqa: E731
        prompt, _ = simulator.sim_setup(case, "duration", duration_s=2, reads="linux")
        assert goodput(cfg) < 0.8 * goodput(prompt)
        plain, _ = simulator.sim_setup(case, "duration", duration_s=2)
        assert "app_stall_rate_hz" not in plain["noise"]
    finally:
        emulation.emulation_stalls_ns.cache_clear()


def test_a_run_keeps_its_waits_as_a_histogram_whose_quantiles_are_within_a_bin_of_the_waits():
    rng = np.random.default_rng(7)
    w = rng.lognormal(np.log(70e-6), 1.2, 50_000)
    rec = sched_waits.record(w, 25.0, receivers=2)
    assert rec["waits"] == 50_000 and sum(rec["hist"]) == 50_000 and rec["receivers"] == 2
    assert len(json.dumps(rec)) < 1000  # what an archive holds per run and kind
    rate, lengths = sched_waits.stall_model([rec, rec])  # two runs pooled: the same rates
    assert rate == 1000.0  # 50 000 waits over 25 s of two receivers
    q = np.asarray(lengths) / 1e9
    assert len(q) == sched_waits.QUANTILES and np.all(np.diff(q) >= 0)
    width = 10 ** (1 / sched_waits.HIST_PER_DECADE)  # a bin's ratio of its edges
    for k in (10, 100, 500, 900, 990, 999):
        true = np.quantile(w, k / 1000)
        assert true / width <= q[k] <= true * width, k
    assert q[-1] >= w.max() and q[-1] <= w.max() * width
    long_ = (w >= 1e-3).sum() / 50.0  # per second per receiver
    assert sched_waits.per_second_at_least([rec], 1e-3) == pytest.approx(long_, rel=0.02)
    assert sched_waits.record(np.array([]), 0.0, 1) is None


def _kernel_side(waits: dict | None, unclean: bool = False) -> dict:
    side = {"goodput_mbps": 250.0, "unclean": unclean, "broken": None, "waits": waits}
    return {"duration": side, "volume": {**side, "makespan_s": 10.0}}


def test_the_simulator_takes_the_waits_traced_in_the_case_s_own_kernel_runs(tmp_path, monkeypatch):
    case = Case("reno", 10, "0.2bdp", 1)
    short = sched_waits.record(np.full(3000, 100e-6), 30.0, 1)  # 100 a second of 0.1 ms
    long_ = sched_waits.record(np.full(1000, 2e-3), 10.0, 1)  # 100 a second of 2 ms
    runs = [tmp_path / n for n in ("a", "b", "c")]
    for run, side in zip(runs, (_kernel_side(short), _kernel_side(long_), _kernel_side(long_, unclean=True)), strict=True):
        run.mkdir()
        (run / f"{case.stem}-netns.json").write_text(json.dumps(side))
    monkeypatch.setattr(OPTIONS, "reads", "stalls")
    monkeypatch.setattr(OPTIONS, "stall_runs", tuple(runs[:1]))
    rate, lengths = emulation.case_stalls_ns(case, "duration")
    assert rate == 100.0
    assert lengths[0] == pytest.approx(100_000, rel=0.13) and lengths[-1] == pytest.approx(100_000, rel=0.13)
    tag = reads_tag(case)
    # Two clean runs pooled (the unclean one left out): a quarter of the waits are 2 ms.
    monkeypatch.setattr(OPTIONS, "stall_runs", tuple(runs))
    rate, lengths = emulation.case_stalls_ns(case, "duration")
    assert rate == 100.0
    assert lengths[700] == pytest.approx(100_000, rel=0.13) and lengths[800] == pytest.approx(2_000_000, rel=0.13)
    cfg, _ = simulator.sim_setup(case, "duration", duration_s=2, reads="stalls")
    assert cfg["noise"]["app_stall_quantiles_ns"] == lengths
    # A stored simulator side made with other waits is made again.
    assert reads_tag(case) != tag
    assert not made_with_reads({"reads": tag}, case)
    # What a run kept, as `receiver_waits.py --from RUN` prints it (the unclean run: nothing).
    table = receiver_waits.kept_table(runs[1], [case]).splitlines()
    assert table[2].startswith("| reno:10:0.2bdp:1 | duration (iperf3) | 100 | 2113 | 2236 | 2239 | 100.0 |")
    assert "no traced waits" in receiver_waits.kept_table(runs[2], [case])
    # A case whose runs traced nothing takes the measured file's.
    other = Case("cubic", 50, "1.0bdp", 4)
    assert emulation.case_stalls_ns(other, "volume") == emulation.emulation_stalls_ns("xfer", other.key, 4)
