"""Importing testbed logs: iperf3 JSON and ss snapshots become run folders."""

from pathlib import Path

import pytest
from xferlab.importers import ImportLogError
from xferlab.importers import iperf3 as ip
from xferlab.importers.common import SCHEMAS

DATA = Path(__file__).parent / "data"
P2 = DATA / "iperf3_p2_server.json"  # -P 2 -t 2 -i 0.2 --get-server-output (server -J -i 0.2), reno
REVERSE = DATA / "iperf3_reverse.json"  # -R -t 2 --get-server-output, bbr
VOLUME = DATA / "iperf3_volume.json"  # -n 20M, no server output, cubic
LOGFILE = DATA / "iperf3_logfile.json"  # two -t 1 tests appended by --logfile, 2 s apart


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
