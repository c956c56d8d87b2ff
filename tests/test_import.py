"""Importing testbed logs: iperf3 JSON and ss snapshots become run folders."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from xferlab.importers import ImportLogError, ss
from xferlab.importers import iperf3 as ip
from xferlab.trace import SCHEMAS

DATA = Path(__file__).parent / "data"
P2 = DATA / "iperf3_p2_server.json"  # -P 2 -t 2 -i 0.2 --get-server-output (server -J -i 0.2), reno
REVERSE = DATA / "iperf3_reverse.json"  # -R -t 2 --get-server-output, bbr
VOLUME = DATA / "iperf3_volume.json"  # -n 20M, no server output, cubic
LOGFILE = DATA / "iperf3_logfile.json"  # two -t 1 tests appended by --logfile, 2 s apart


def run_cli(*args, check=False):
    """The CLI in this process (faster than a subprocess; same exit status and output)."""
    from types import SimpleNamespace

    from typer.testing import CliRunner
    from xferlab.cli import app

    r = CliRunner().invoke(app, [str(a) for a in args])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    if check:
        assert r.exit_code == 0, r.output
    return SimpleNamespace(returncode=r.exit_code, stdout=r.stdout, stderr=r.stderr)


def test_tables_have_the_trace_schemas_and_keep_every_byte():
    docs = ip.load_docs(P2)
    entries = ip.entries_from_docs(docs)
    assert [(e.pair, e.stream) for e in entries] == [(0, 0), (0, 1)]
    t = ip.tables_from_runs(entries, goodput_interval_s=0.5, end_s=None)
    for name, schema in SCHEMAS.items():
        assert t[name].schema.equals(schema), name
    flows, gp = t["flows"].to_pandas(), t["goodput"].to_pandas()
    # Re-binned receiver bytes: the total is exact and the grid starts at run t = 0.
    assert gp.groupby("flow_id")["bytes"].sum().tolist() == flows["bytes"].tolist()
    assert sorted(gp["t"].unique())[:4] == [0.0, 0.5, 1.0, 1.5]
    full = gp[gp["t"] < 1.5]
    assert full["goodput_mbps"].between(90, 110).all()  # -b 100M per stream
    tcp = t["tcp"].to_pandas()
    assert len(tcp) == 20 and (tcp["cwnd"] > 0).all() and tcp["ssthresh"].isna().all()
    # What iperf3 does not report is null, not a made-up 0 (the Trace's contract).
    assert tcp["in_flight"].isna().all() and tcp["ca_state"].isna().all() and tcp["rto_ms"].isna().all()
    assert tcp["t"].iloc[0] == pytest.approx(0.2, abs=0.01)
    assert ip.goodput_side(entries) == {0: "receiver", 1: "receiver"}


def test_start_offsets_shift_goodput_and_tcp_onto_the_run_grid():
    doc = ip.load_docs(VOLUME)[0]
    e = ip.Iperf3Flow(doc=doc, flow_id=3, pair=1, stream=0, variant="cubic", start_s=0.25, volume_bytes=20 << 20)
    t = ip.tables_from_runs([e], goodput_interval_s=0.5, end_s=None)
    gp = t["goodput"].to_pandas()
    assert gp["t"].tolist() == [0.0, 0.5, 1.0, 1.5]
    assert gp["bytes"].iloc[0] == pytest.approx(gp["bytes"].iloc[1] / 2, rel=0.05)  # the first cell is half covered
    f = t["flows"].to_pylist()[0]
    assert f["start"] == 0.25 and f["completion_time"] == pytest.approx(1.668, abs=0.01)
    assert t["tcp"].to_pandas()["t"].iloc[0] == pytest.approx(0.45, abs=0.01)


def test_reverse_test_takes_the_server_as_sender():
    docs = ip.load_docs(REVERSE)
    e = ip.entries_from_docs(docs)
    t = ip.tables_from_runs(e, goodput_interval_s=0.5, end_s=1.0)
    f = t["flows"].to_pylist()[0]
    assert f["source"].endswith(":25203") and f["variant"] == "bbr" and f["end"] == 1.0
    assert len(t["tcp"]) == 4  # the server's sender samples up to end_s (the 5th ends at 1.0001 s)
    assert (t["goodput"].to_pandas()["t"] < 1.0).all()


def test_logfile_with_two_documents_is_aligned_by_timestamp():
    docs = ip.load_docs(LOGFILE)
    assert len(docs) == 2
    flows = ip.tables_from_runs(ip.entries_from_docs(docs), goodput_interval_s=0.5, end_s=None)["flows"].to_pandas()
    assert flows["pair"].tolist() == [0, 1] and flows["start"].tolist() == [0.0, 2.0]
    flows = ip.tables_from_runs(ip.entries_from_docs(docs, [0.0, 0.5]), goodput_interval_s=0.5, end_s=None)["flows"]
    assert flows.to_pandas()["start"].tolist() == [0.0, 0.5]


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ("", "empty file"),
        ("hello", "not iperf3 JSON"),
        ('{"a": 1}', "not iperf3 JSON"),
        ('{"start": {}, "intervals": [], "error": "unable to connect"}', "unable to connect"),
    ],
)
def test_bad_iperf3_files_raise_one_clear_error(tmp_path, content, message):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ImportLogError, match=message):
        ip.load_docs(path)


# ----------------------------------------------------------------------------- ss


SS_H = DATA / "ss_tinH.log"  # `date +%s.%N; ss -tinH state established dst …` every 0.2 s, iperf3 -P 2 client side
SS_BOTH = DATA / "ss_tin_both_ends.log"  # plain `ss -tin` (with header) of both ends of an iperf3 -R test


def test_ss_snapshots_become_flows_tcp_samples_and_goodput():
    tables, learnt = ss.tables_from_log(SS_H, goodput_interval_s=0.2)
    assert "link" not in tables  # ss has no bottleneck counters
    for name in ("flows", "goodput", "tcp"):
        assert tables[name].schema.equals(SCHEMAS[name]), name
    flows = tables["flows"].to_pandas()
    # The iperf3 control connection (186 bytes) is left out; the two data streams are one transfer.
    assert flows["source"].tolist() == ["127.0.0.1:34242", "127.0.0.1:34256"]
    assert flows["pair"].tolist() == [0, 0] and flows["stream"].tolist() == [0, 1]
    assert set(flows["variant"]) == {"bbr"} and learnt["snapshots"] == 8
    gp = tables["goodput"].to_pandas()
    assert gp.groupby("flow_id")["bytes"].sum().tolist() == flows["bytes"].tolist()
    assert gp[gp["t"] < 1.4]["goodput_mbps"].between(85, 115).all()  # -b 100M per stream
    tcp = tables["tcp"].to_pandas()
    assert len(tcp) == 16 and (tcp["cwnd"] == 18).all() and tcp["rto_ms"].eq(204).all()
    assert tcp["srtt_ms"].between(0.01, 1).all() and tcp["ssthresh"].isna().all()
    # snd_wnd (bytes) over the socket's MSS (65 483 on loopback): 328 704 → 5, 1 113 088 → 17.
    assert sorted(tcp["rwnd"].value_counts().items()) == [(5, 2), (17, 14)]
    # segs_in: each stream's ACK clock, 27 segments at the first snapshot, ~100 a second on.
    clock = tcp.groupby("flow_id")["acks_in"]
    assert clock.first().tolist() == [27, 27] and clock.last().tolist() == [185, 179]


def test_ss_with_both_ends_counts_what_the_receiver_read():
    tables, learnt = ss.tables_from_log(SS_BOTH, goodput_interval_s=0.2)
    f = tables["flows"].to_pylist()
    assert len(f) == 1 and f[0]["source"] == "127.0.0.1:25205"  # -R: the server sends
    assert learnt["goodput_side"] == ["receiver (bytes_received)"]
    assert len(tables["tcp"]) == 4  # the sending socket's samples


# ----------------------------------------------------------------------------- the command


def test_import_iperf3_writes_a_run_folder_like_a_simulator_run(cli, tmp_path):
    out = tmp_path / "imp"
    p = cli("import", "iperf3", P2, "--capacity", "1Gbps", "--out", out, check=True)
    assert "aggregate goodput" in p.stdout
    for name in ("flows", "goodput", "link", "tcp"):
        assert pq.read_table(out / "trace" / f"{name}.parquet").schema.equals(SCHEMAS[name], check_metadata=False)
    m = json.loads((out / "metrics.json").read_text())
    assert m["aggregate_goodput_mbps"] == pytest.approx(200, rel=0.05)
    assert m["efficiency"] == pytest.approx(0.2, rel=0.05)
    assert m["jain_index"] == pytest.approx(1.0, abs=1e-3)
    assert m["timeouts"] is None and m["bottleneck_drops"] is None and m["retransmissions"] == 0
    run = json.loads((out / "run.json").read_text())
    prov = run["provenance"]
    assert run["backend"] == "import" and prov["source"] == "iperf3"
    assert ["goodput measured by", "receiver intervals"] in prov["setup"]
    assert prov["files"] == [str(P2.resolve())]
    assert m["null_reasons"]["timeouts"] == "iperf3 does not report timeouts"
    assert run["resolved"]["pairs"] == 1 and run["resolved"]["streams"] == 2 and run["resolved"]["variant"] == "reno"
    html = (out / "report.html").read_text()
    assert "Imported from iperf3 logs" in html and P2.name in html and "iperf3 does not report timeouts" in html
    # The report can be recomputed from the stored trace, unknowns stay unknown.
    cli("report", out, check=True)
    assert json.loads((out / "metrics.json").read_text())["timeouts"] is None


def test_import_volume_test_has_completion_times_and_no_capacity_means_none(cli, tmp_path):
    out = tmp_path / "vol"
    run_cli("import", "iperf3", VOLUME, "--out", out, check=True)
    m = json.loads((out / "metrics.json").read_text())
    assert m["completion"]["count"] == 1 and m["completion"]["mean_s"] == pytest.approx(1.668, abs=0.01)
    assert m["efficiency"] is None and m["ideal_goodput_mbps"] is None
    assert m["completion"]["ideal_makespan_s"] is None
    assert not (out / "figures" / "distribution.png").exists()


def test_import_several_files_one_transfer_per_test(cli, tmp_path):
    out = tmp_path / "many"
    run_cli("import", "iperf3", REVERSE, LOGFILE, "--out", out, "--offset", "0", "--offset", "1", "--offset", "2", check=True)
    flows = pq.read_table(out / "trace" / "flows.parquet").to_pandas()
    assert flows["pair"].tolist() == [0, 1, 2] and flows["start"].tolist() == [0.0, 1.0, 2.0]
    assert flows["variant"].tolist() == ["bbr", "bbr", "reno"]


def test_import_ss_writes_a_run_folder(cli, tmp_path):
    out = tmp_path / "ss"
    run_cli("import", "ss", SS_H, "--interval", "0.2s", "--capacity", "1Gbps", "--out", out, check=True)
    m = json.loads((out / "metrics.json").read_text())
    assert len(m["flows"]) == 2 and m["aggregate_goodput_mbps"] == pytest.approx(200, rel=0.05)
    assert "Imported from ss logs" in (out / "report.html").read_text()


@pytest.mark.parametrize(
    "kind, content, message",
    [
        ("iperf3", None, "no such file"),
        ("iperf3", "not json at all", "not iperf3 JSON"),
        ("iperf3", '{"start": {}, "intervals": [], "error": "unable to connect to server"}', "unable to connect"),
        ("ss", "1795366694.7\n1795366694.9\n", "no TCP connection moved data"),
        ("ss", "hello world\n", "not a line of `ss -tin` output"),
        ("ss", None, "no such file"),
    ],
)
def test_bad_logs_are_one_clear_line_and_nothing_is_written(cli, tmp_path, kind, content, message):
    log = tmp_path / "log"
    if content is not None:
        log.write_text(content)
    out = tmp_path / "out"
    p = run_cli("import", kind, log, "--out", out)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not out.exists() and [x.name for x in tmp_path.iterdir()] == (["log"] if content is not None else [])


def test_a_servers_own_output_is_read_from_its_side():
    # `iperf3 -s -J -i 0.2 --logfile`: the server side of the P2 test, then of the -R test.
    forward, reverse = ip.load_docs(DATA / "iperf3_server_logfile.json")
    t = ip.tables_from_runs(ip.entries_from_docs([forward]), goodput_interval_s=0.5, end_s=None)
    assert t["flows"].num_rows == 2 and t["tcp"].num_rows == 0  # the receiver: goodput only
    assert t["flows"].to_pandas()["sink"].str.endswith(":25203").all()
    e = ip.entries_from_docs([reverse])
    t = ip.tables_from_runs(e, goodput_interval_s=0.5, end_s=None)
    assert t["tcp"].num_rows == 10 and ip.goodput_side(e) == {0: "sender"}
    assert t["flows"].to_pylist()[0]["source"].endswith(":25203")


def test_a_volume_cut_off_by_the_end_of_the_run_has_no_completion_time():
    doc = ip.load_docs(VOLUME)[0]
    e = ip.Iperf3Flow(doc=doc, flow_id=0, pair=0, stream=0, variant="cubic", volume_bytes=20 << 20)
    assert ip.tables_from_runs([e], goodput_interval_s=0.5, end_s=1.0)["flows"].to_pylist()[0]["completion_time"] is None
    e.volume_bytes = 30 << 20  # more than the test sent
    assert ip.tables_from_runs([e], goodput_interval_s=0.5, end_s=None)["flows"].to_pylist()[0]["completion_time"] is None


def test_netns_style_one_single_stream_test_per_flow():
    # The netns backend runs one `iperf3 -P 1` per stream and numbers the streams itself.
    doc = ip.load_docs(VOLUME)[0]
    entries = [
        ip.Iperf3Flow(doc=doc, flow_id=k, pair=0, stream=k, variant="cubic", start_s=0.1 * k, source="s0", sink="r0", mss=1448)
        for k in range(3)
    ]
    t = ip.tables_from_runs(entries, goodput_interval_s=0.5, end_s=None)
    flows = t["flows"].to_pandas()
    assert flows["stream"].tolist() == [0, 1, 2] and flows["start"].tolist() == pytest.approx([0.0, 0.1, 0.2])
    assert (t["tcp"].to_pandas()["cwnd"] == round(720313 / 1448)).any()  # snd_cwnd bytes / the given MSS
    # iperf3 (3.10 on) writes the receiver's window as the sender sees it: bytes / the MSS.
    assert set(t["tcp"].to_pandas()["rwnd"]) == {round(1907712 / 1448)}


# ----------------------------------------------------------------------------- hostile inputs (issue 48)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../../escape", "not a path"),
        ("a/b", "not a path"),
        ("..", "names one folder"),
        (".", "names one folder"),
        ("", "is empty"),
        (".hidden", "starts with '.'"),
        ("-rf", "starts with '-'"),
        ("run 1", "holds ' '"),
        ("x" * 101, "101 characters long"),
    ],
)
def test_a_run_name_is_one_folder_name_inside_results(tmp_path, monkeypatch, name, why):
    monkeypatch.chdir(tmp_path)
    r = run_cli("import", "iperf3", P2, "--name", name)
    assert r.returncode == 2 and why in r.stderr and "--name" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no results/, nothing beside it


def test_a_name_with_nul_is_refused_by_the_importer():
    with pytest.raises(ImportLogError, match="U\\+0000"):
        ip.import_trace([P2], name="a\0b")


def test_the_default_name_of_an_odd_file_name_is_a_folder_name(tmp_path, monkeypatch):
    log = tmp_path / ".my test (2).json"
    log.write_bytes(P2.read_bytes())
    monkeypatch.chdir(tmp_path)
    run_cli("import", "iperf3", log, check=True)
    (folder,) = (tmp_path / "results").iterdir()
    assert folder.name == "my-test--2-"


def test_a_goodput_far_above_the_capacity_given_is_refused(tmp_path):
    """P2 moved 200 Mbit/s, counted by the receiver: --capacity 100Mbps (a slip of units, or
    not the path's bottleneck) is refused rather than reported as an efficiency of 2.00."""
    r = run_cli("import", "iperf3", P2, "--capacity", "100Mbps", "--out", tmp_path / "r")
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and str(P2) in said and "2.01 times the ideal goodput r_TP" in said and "--capacity" in said
    assert not (tmp_path / "r").exists()


def test_a_goodput_a_little_above_the_capacity_is_a_warning_of_the_run(tmp_path):
    r = run_cli("import", "iperf3", P2, "--capacity", "180Mbps", "--out", tmp_path / "r", check=True)
    assert "warning:" in r.stderr and "1.12 times the ideal goodput r_TP" in " ".join(r.stderr.split())
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    (warning,) = run["provenance"]["warnings"]
    assert "not the path's bottleneck" in warning and "efficiency (1.11)" in warning
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["efficiency"] == pytest.approx(1.11, abs=0.01)
    assert "not the path&#x27;s bottleneck" in (tmp_path / "r" / "report.html").read_text()


def test_a_goodput_counted_by_senders_above_the_capacity_says_so(tmp_path):
    # VOLUME has no server output: its sender's count stands in, and may run a buffer ahead.
    r = run_cli("import", "iperf3", VOLUME, "--capacity", "90Mbps", "--out", tmp_path / "r", check=True)
    assert "it is the senders' count, which runs up to a socket buffer ahead" in " ".join(r.stderr.split())
    r = run_cli("import", "iperf3", VOLUME, "--capacity", "1kbps", "--out", tmp_path / "r2")
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and "1.01e+05 times the ideal goodput" in said and "senders' count" in said


def _deep(levels: int) -> str:
    doc = json.loads(VOLUME.read_text())
    doc["extra"] = json.loads("[" * levels + "]" * levels)
    return json.dumps(doc)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "{" + '"a":{' * 50_000 + "}" * 50_001, _deep(40)])
def test_deeply_nested_json_is_refused_with_the_data_files_rule(tmp_path, text):
    log = tmp_path / "deep.json"
    log.write_text(text)
    r = run_cli("import", "iperf3", log, "--out", tmp_path / "r")
    assert r.returncode == 2 and str(log) in r.stderr and "nested too deeply" in r.stderr and "at most 32" in r.stderr
    assert "internal error" not in r.stderr


def _long_test(span_s: float, streams: int = 1, intervals: int = 1) -> str:
    """An iperf3 -P ``streams`` test whose ``intervals`` intervals cover ``span_s`` seconds."""
    doc = json.loads(VOLUME.read_text())
    stream = doc["intervals"][0]["streams"][0]
    step = span_s / intervals
    at = [{"start": i * step, "end": (i + 1) * step, "seconds": step} for i in range(intervals)]
    doc["intervals"] = [{"streams": [{**stream, "socket": 5 + k, **a} for k in range(streams)]} for a in at]
    doc["end"]["streams"] = doc["end"]["streams"] * streams
    doc["start"]["connected"] = [{**doc["start"]["connected"][0], "local_port": 40000 + k} for k in range(streams)]
    del doc["start"]["test_start"]["bytes"]
    return json.dumps(doc)


def test_one_interval_of_days_is_refused_up_front_or_re_binned_at_once(tmp_path):
    log = tmp_path / "long.json"
    log.write_text(_long_test(1.9e6))
    r = run_cli("import", "iperf3", log, "--interval", "50ms", "--out", tmp_path / "fine")
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and "3.8e+07 goodput samples" in said and "over the limit of 2e+07" in said
    assert "use --interval 0.096s or more" in said and not (tmp_path / "fine").exists()
    run_cli("import", "iperf3", log, "--interval", "1000s", "--out", tmp_path / "coarse", check=True)
    gp = pq.read_table(tmp_path / "coarse" / "trace" / "goodput.parquet").to_pandas()
    assert len(gp) == 1900 and gp["bytes"].sum() == json.loads(log.read_text())["intervals"][0]["streams"][0]["bytes"]


def test_twenty_streams_over_a_million_seconds_are_counted_together(tmp_path):
    log = tmp_path / "wide.json"
    log.write_text(_long_test(1e6, streams=20, intervals=10))
    r = run_cli("import", "iperf3", log, "--out", tmp_path / "r")
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and "4e+07 goodput samples (20 flow(s) over 1e+06 s)" in said
    assert "use --interval 1.1s or more" in said


def test_ss_snapshots_a_million_seconds_apart_are_refused_up_front(tmp_path):
    lines = []
    for n, t in enumerate((1795366694.0, 1795366694.0 + 1e6)):
        lines.append(f"{t:.6f}")
        for k in range(20):
            lines.append(f"0 0 10.0.0.1:{40000 + k} 10.0.0.2:5201")
            lines.append(f"\t cubic rto:204 rtt:1/0.5 mss:1448 cwnd:10 bytes_acked:{(n + 1) * 10**9} minrtt:1")
    log = tmp_path / "ss.log"
    log.write_text("\n".join(lines) + "\n")
    r = run_cli("import", "ss", log, "--out", tmp_path / "r")
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and str(log) in said and "goodput samples (20 flow(s) over 1e+06 s)" in said


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d["flows"][0].update(start=float("nan")), ["NaN"]),
        (lambda d: d["goodput"][0].update(bytes=-1), ["goodput.0.bytes", "out of range"]),
        (lambda d: d["tcp"][0].update(cwnd="many"), ["tcp.0.cwnd", "expected a number"]),
        (lambda d: d.update(flows={"0": 1}), ["flows", "expected a list"]),
        (lambda d: d["goodput"].append(7), ["goodput.1", "expected an object"]),
        (lambda d: d["run"].update(completion_time=1e400), ["completion_time", "out of range"]),
    ],
)
def test_xfer_traces_with_bad_values_are_refused_naming_the_field(tmp_path, edit, words):
    from xferlab.importers import xfer

    doc = {
        "run": {"tool": "xfer", "completion_time": 1.0, "bytes": 1000, "interval": 0.5},
        "flows": [{"flow_id": 0, "start": 0.0, "end": 1.0, "bytes": 1000}],
        "goodput": [{"t": 0.5, "flow_id": 0, "bytes": 1000}],
        "tcp": [{"t": 0.5, "flow_id": 0, "cwnd": 10, "srtt_ms": 1.0, "retransmissions": 0}],
    }
    edit(doc)
    log = tmp_path / "x.json"
    log.write_text(json.dumps(doc).replace("NaN", "NaN").replace("Infinity", "1e400"))
    with pytest.raises(ImportLogError) as e:
        xfer.load(log)
    assert str(log) in str(e.value) and all(w in str(e.value) for w in words), str(e.value)


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d["start"].update(tcp_mss_default=10**6), ["start.tcp_mss_default", "not a TCP MSS"]),
        (lambda d: d["start"]["test_start"].update(bytes=2**62), ["start.test_start.bytes", "1 PB per transfer"]),
        (lambda d: d["end"].update(sender_tcp_congestion={"name": "cubic"}), ["sender_tcp_congestion", "got dict"]),
        (lambda d: d["intervals"][0]["streams"][0].update(start=2**32), ["flows", "beyond"]),
    ],
)
def test_iperf3_values_no_run_has_are_refused_naming_the_field(tmp_path, edit, words):
    doc = json.loads(VOLUME.read_text())
    edit(doc)
    log = tmp_path / "bad.json"
    log.write_text(json.dumps(doc))
    r = run_cli("import", "iperf3", log, "--out", tmp_path / "r")
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and str(log) in said and all(w in said for w in words), said


def test_an_ss_rto_of_years_is_refused_naming_the_log(tmp_path):
    log = tmp_path / "ss.log"
    log.write_text(SS_H.read_text().replace("rto:204", "rto:4294967296"))
    r = run_cli("import", "ss", log, "--out", tmp_path / "r")
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and str(log) in said and "rto_ms" in said and "internal error" not in said, said
