"""The Trace contract (trace.py): every producer's output has exactly its schema, unknowns are
null (not 0), older run folders are upgraded, and a broken trace is refused before it is
written."""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from xferlab import engine, runfolder
from xferlab import scenario as sc
from xferlab.backends import extension, sim
from xferlab.importers import iperf3, ss
from xferlab.runinfo import Provenance
from xferlab.trace import SCHEMAS, TRACE_VERSION, Trace, TraceError

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


def _sim_trace(**overrides) -> Trace:
    s, _ = sc.load(ROOT / "scenarios" / "quick.yaml", ["workload.duration=2s", *[f"{k}={v}" for k, v in overrides.items()]])
    return sim.run(s, sc.resolve(s))


def test_the_simulator_writes_exactly_the_contracts_schema():
    # Nullability is declared per column by the simulator itself (crates/sim/src/trace.rs),
    # not inferred from whether this particular run had nulls: the same for every run.
    for tr in (_sim_trace(), _sim_trace(**{"workload.duration": "null", "workload.volume": "20MB"})):
        for name, schema in SCHEMAS.items():
            assert tr.table(name).schema.equals(schema, check_metadata=False), name
        tr.validate()


def test_the_simulator_before_conforming_declares_the_same_nullability():
    s, _ = sc.load(ROOT / "scenarios" / "quick.yaml", ["workload.duration=1s"])
    out = extension.module().run(json.dumps(sim.sim_config(sc.resolve(s))), None, 1.0)
    for name, batch in out["tables"].items():
        for f in SCHEMAS[name]:
            got = batch.schema.field(f.name)
            assert (got.type, got.nullable) == (f.type, f.nullable), (name, f.name, got)


def test_the_simulator_numbers_congestion_states_as_linux():
    # tcp.ca_state is Linux's enum tcp_ca_state (0 Open, 3 Recovery, 4 Loss), the numbering
    # the netns backend's TCP_INFO samples carry; the simulator once wrote 1 and 2.
    tr = _sim_trace(**{"topology.buffer": "0.05bdp", "measure.tcp_interval": "1ms"})
    tcp = tr.df("tcp")
    assert set(tcp["ca_state"].unique()) <= {0, 3, 4}
    entered = 0
    for _, g in tcp.sort_values("t").groupby("flow_id"):
        state, cwnd, ssthresh = g["ca_state"].to_numpy(), g["cwnd"].to_numpy(), g["ssthresh"].to_numpy()
        i = np.flatnonzero(state == 3)
        if len(i) and i[0] > 0:
            entered += 1
            # Entering Recovery set ssthresh below the window the flow had before the loss.
            assert ssthresh[i[0]] < cwnd[i[0] - 1]
    assert entered == 4, "every flow should enter fast recovery in a 0.05-BDP buffer"


@pytest.mark.parametrize("make", ["iperf3", "ss"])
def test_importers_produce_the_contract_with_nulls_for_what_logs_do_not_tell(make):
    tr = iperf3.import_trace([DATA / "iperf3_p2_server.json"]) if make == "iperf3" else ss.import_trace(DATA / "ss_tinH.log")
    tr.validate()
    tcp = tr.df("tcp")
    assert tcp["ca_state"].isna().all()  # neither iperf3 nor ss tells the congestion state
    flows = tr.df("flows")
    assert flows["timeouts"].isna().all() and flows["fast_recoveries"].isna().all()
    assert tr.link.num_rows == 0 and "link" in tr.provenance.unknown


def test_a_broken_trace_is_refused_before_anything_is_written(tmp_path):
    tr = _sim_trace()
    bad = tr.flows.set_column(0, tr.flows.schema.field(0), pa.array([7] * tr.flows.num_rows, pa.uint32()))
    broken = Trace(flows=bad, goodput=tr.goodput, link=tr.link, tcp=tr.tcp, run=dict(tr.run))
    engine.stamp(broken, scenario={"name": "x"}, seed=1)
    with pytest.raises(TraceError, match="flow_id appears twice"):
        engine.save(broken, tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_null_where_the_contract_says_always_known_is_refused():
    tr = _sim_trace()
    with pytest.raises(TraceError, match="cwnd"):
        Trace.build(
            {"tcp": tr.tcp.set_column(2, "cwnd", pa.nulls(tr.tcp.num_rows, pa.uint32()))},
            tr.info,
            Provenance(producer="x"),
        )


def _as_version_1(folder: Path) -> None:
    """Rewrites a run folder of an import as version 1 wrote it: no version, made-up zeros for
    what iperf3 does not report, the producer's details in run.json's own keys."""
    run = json.loads((folder / "run.json").read_text())
    prov = run.pop("provenance")
    run.pop("trace_version")
    run["imported"] = {"format": prov["source"], "files": prov["files"], "goodput_side": "receiver intervals"}
    run["resolved"]["unknown_metrics"] = ["timeouts", "bottleneck_drops"]
    (folder / "run.json").write_text(json.dumps(run))
    tcp = pq.read_table(folder / "trace" / "tcp.parquet").drop_columns(["rwnd", "acks_in"])
    for col in ("in_flight", "ca_state"):
        i = tcp.column_names.index(col)
        tcp = tcp.set_column(i, col, pa.array([0] * tcp.num_rows, tcp.column(i).type))
    pq.write_table(tcp, folder / "trace" / "tcp.parquet")
    (folder / "trace" / "run.parquet").unlink()


def test_a_version_1_run_folder_is_upgraded_on_reading(tmp_path):
    tr = iperf3.import_trace([DATA / "iperf3_p2_server.json"], capacity_bps=1e9)
    engine.save(engine.stamp(tr, scenario={"name": "old"}, seed=None), tmp_path / "r")
    _as_version_1(tmp_path / "r")
    up = runfolder.load_trace(tmp_path / "r")
    assert up.run["trace_version"] == TRACE_VERSION
    assert up.df("tcp")["in_flight"].isna().all() and up.df("tcp")["ca_state"].isna().all()
    assert up.provenance.source == "iperf3" and up.provenance.unknown["timeouts"] == "not in the imported logs"
    up.validate()
    m = engine.rerender(tmp_path / "r")  # the report of an old folder, from the upgraded trace
    assert m["timeouts"] is None and m["aggregate_goodput_mbps"] > 0


def test_the_receive_window_is_linux_s_unless_turned_off():
    on = _sim_trace(**{"measure.tcp_interval": "1ms"})
    off = _sim_trace(**{"host.rcvbuf_autotuning": "false"})
    rwnd = on.df("tcp").groupby("flow_id")["rwnd"]
    assert (rwnd.first() == 65_160 // 1448).all(), "the SYN-ACK's window: 64 KiB in whole segments"
    assert (rwnd.max() > 500).all(), "autotuning opened it past each flow's share of the path (432 segments)"
    assert off.df("tcp")["rwnd"].isna().all()


def test_linux_s_ack_rules_are_an_option_that_reaches_the_receivers():
    # By default a receiver acknowledges every second segment (ACKs per data packet a little
    # under 0.5: some segments are acknowledged by the delayed-ACK timer). With Linux's rules
    # a receiver whose application has not read yet leaves the ACK to the read, which
    # acknowledges all it read at once: fewer ACKs on the quick scenario (VALIDATION.md §6,
    # "The receivers' ACKs").
    ratio = {}
    for on in (False, True):
        tr = _sim_trace(**{"host.linux_acks": str(on).lower()})
        assert tr.run["resolved"]["host"]["linux_acks"] is on
        ratio[on] = tr.provenance.stats["acks"] / tr.provenance.stats["packets"]
    assert 0.45 < ratio[False] <= 0.5
    assert ratio[True] < 0.45


def test_tso_deferral_is_an_option_that_sends_each_flow_in_longer_trains():
    # With TSO deferral a sender waits for an skb's worth of window (up to 1 ms after its
    # last transmission) and sends it at once: at the bottleneck each flow's segments come
    # in longer runs (weighted by length: sum(run²)/sum(run)). Four Reno flows at 10 ms,
    # from 0.5 s: slow start's overshoot into the shared queue leaves windows that reopen
    # in bursts either way (over its first 0.2 s 8.8 without deferral).
    trains = {}
    for on in (False, True):
        s, _ = sc.load(ROOT / "scenarios" / "quick.yaml", ["workload.duration=2s", f"host.tso_defer={str(on).lower()}"])
        r = sc.resolve(s)
        assert r["host"]["tso_defer"] is on
        capture = sim.bottleneck_capture(sim.sim_config(r))
        flow = np.asarray(capture["flow"])[np.asarray(capture["t_ns"]) >= 0.5e9]
        runs = np.diff(np.concatenate(([0], np.flatnonzero(np.diff(flow) != 0) + 1, [len(flow)])))
        trains[on] = float((runs**2).sum() / runs.sum())
    assert trains[False] < 1.3 and trains[True] > 2.0, trains  # measured 1.09 and 2.77


def test_a_version_2_run_folder_reads_with_an_unknown_receive_window(tmp_path):
    tr = _sim_trace()
    assert tr.df("tcp")["rwnd"].notna().all(), "the simulator models the receive window"
    engine.save(engine.stamp(tr, scenario={"name": "v2"}, seed=1), tmp_path / "r")
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    run["trace_version"] = 2
    (tmp_path / "r" / "run.json").write_text(json.dumps(run))
    tcp = pq.read_table(tmp_path / "r" / "trace" / "tcp.parquet").drop_columns(["rwnd", "acks_in"])
    pq.write_table(tcp, tmp_path / "r" / "trace" / "tcp.parquet")
    (tmp_path / "r" / "trace" / "run.parquet").unlink(missing_ok=True)
    up = runfolder.load_trace(tmp_path / "r")
    assert up.run["trace_version"] == TRACE_VERSION
    assert up.df("tcp")["rwnd"].isna().all() and len(up.df("tcp")) == tr.tcp.num_rows
    assert up.df("tcp")["acks_in"].isna().all(), "nor did it count the ACKs"
    assert up.df("tcp")["cwnd"].tolist() == tr.df("tcp")["cwnd"].tolist()
    up.validate()


def test_the_sender_counts_the_acks_it_receives():
    # Every second segment is acknowledged, so the ACK clock runs at about half the data
    # segments; with Linux's ACK rules (ACKs left to the read) it runs slower. A flow's
    # count only grows, and its last sample holds nearly all of the run's ACKs.
    for linux_acks, low, high in ((False, 0.45, 0.5), (True, 0.3, 0.45)):
        tr = _sim_trace(**{"host.linux_acks": str(linux_acks).lower(), "measure.tcp_interval": "1ms"})
        tcp = tr.df("tcp").sort_values("t")
        assert tcp["acks_in"].notna().all()
        assert (tcp.groupby("flow_id")["acks_in"].diff().dropna() >= 0).all()
        last = int(tcp.groupby("flow_id")["acks_in"].last().sum())
        sent = int(tr.df("flows")["segments_sent"].sum())
        assert low < last / sent < high
        assert 0.98 < last / tr.provenance.stats["acks"] <= 1.0


def test_a_version_3_run_folder_reads_with_an_unknown_ack_count(tmp_path):
    tr = _sim_trace()
    engine.save(engine.stamp(tr, scenario={"name": "v3"}, seed=1), tmp_path / "r")
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    run["trace_version"] = 3
    (tmp_path / "r" / "run.json").write_text(json.dumps(run))
    tcp = pq.read_table(tmp_path / "r" / "trace" / "tcp.parquet").drop_columns(["acks_in"])
    pq.write_table(tcp, tmp_path / "r" / "trace" / "tcp.parquet")
    (tmp_path / "r" / "trace" / "run.parquet").unlink(missing_ok=True)
    up = runfolder.load_trace(tmp_path / "r")
    assert up.run["trace_version"] == TRACE_VERSION
    assert up.df("tcp")["acks_in"].isna().all()
    assert up.df("tcp")["rwnd"].tolist() == tr.df("tcp")["rwnd"].tolist(), "the receive window is kept"
    up.validate()


def test_a_folder_from_a_newer_xferlab_is_refused(tmp_path):
    tr = _sim_trace()
    engine.save(engine.stamp(tr, scenario={"name": "new"}, seed=1), tmp_path / "r")
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    run["trace_version"] = TRACE_VERSION + 1
    (tmp_path / "r" / "run.json").write_text(json.dumps(run))
    with pytest.raises(runfolder.RunFolderError, match="newer than this xferlab"):
        runfolder.load_trace(tmp_path / "r")
    shutil.rmtree(tmp_path / "r")


def test_the_bottleneck_capture_accounts_for_every_segment_and_drop():
    # A diagnostic beside the trace (benches/path_trains.py --sim): every data segment
    # offered to the bottleneck, with when it left or -1 for a drop. Its drops are the
    # run's; nothing leaves before it arrived, and a FIFO lets segments out in order.
    s, _ = sc.load(ROOT / "scenarios" / "quick.yaml", ["workload.duration=2s", "topology.buffer=0.1bdp"])
    r = sc.resolve(s)
    cfg = sim.sim_config(r)
    c = {k: np.asarray(v) for k, v in sim.bottleneck_capture(cfg).items()}
    stats = sim.run_config(cfg, r).provenance.stats
    dropped = c["departs_ns"] < 0
    assert int(dropped.sum()) == stats["bottleneck_drops"] > 0
    # What was sent, less what was still on its way to the bottleneck at the end.
    assert 0.99 * stats["packets"] < len(c["t_ns"]) <= stats["packets"]
    left, arrived = c["departs_ns"][~dropped], c["t_ns"][~dropped]
    assert (left >= arrived).all() and (np.diff(left) > 0).all()
    assert set(np.unique(c["flow"])) == set(range(len(cfg["flows"])))


def test_the_ack_capture_shows_each_receivers_acks_as_sent():
    # The ACK side of the diagnostic: every ACK as its receiver sends it. A lone flow with
    # delayed ACKs acknowledges every second segment (most ACKs cover two); without them,
    # each segment (most cover one); cumulative ACKs never go back, and none acknowledges
    # more than the segments that reached the bottleneck.
    s, _ = sc.load(ROOT / "scenarios" / "quick.yaml", ["workload.duration=2s", "topology.pairs=1"])
    covers = {}
    for delayed in (True, False):
        cfg = sim.sim_config(sc.resolve(s))
        cfg["tcp"]["delayed_ack"] = delayed
        data, acks = sim.bottleneck_capture(cfg, acks=True)
        a = {k: np.asarray(v) for k, v in acks.items()}
        assert len(a["t_ns"]) == len(a["cum"]) > 100 and (np.diff(a["t_ns"]) >= 0).all()
        assert (np.diff(a["cum"]) >= 0).all() and a["cum"][-1] <= len(set(data["seq"]))
        step = np.diff(a["cum"])
        covers[delayed] = np.median(step[step > 0])
    assert covers == {True: 2, False: 1}
