import json
import math

import pytest
from xferlab import datafile
from xferlab import scenario as sc


def load_text(tmp_path, text, overrides=None):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return sc.load(p, overrides)


QUICK = """
name: quick
topology: {pairs: 4, access_rate: 1Gbps, bottleneck_rate: 2Gbps, rtt: 10ms, buffer: 1.0bdp, mtu: 1500}
workload: {streams: 1, duration: 20s, stagger: 0s}
protocol: {variant: reno}
measure: {goodput_interval: 0.5s, link_interval: 20ms}
seed: 1
"""


def test_the_contract_shape_loads_and_resolves(tmp_path):
    s, given = load_text(tmp_path, QUICK)
    assert given["topology"]["rtt"] == "10ms"
    r = sc.resolve(s)
    # BDP: 2 Gbit/s × 10 ms / (1500 B × 8) = 1666.7 packets.
    assert r["bdp_packets"] == pytest.approx(1666.67, abs=0.01)
    assert r["buffer_packets"] == 1667
    assert r["mss"] == 1448  # 1500 − 40 − 12 (timestamps)
    # Ideal goodput limited by the 2 Gbit/s bottleneck (4 × 1 Gbit/s of access).
    assert r["ideal_goodput_mbps"] == pytest.approx(2000 * 1448 / 1538)
    assert len(r["flows"]) == 4
    assert all(0 <= f["start_s"] < 0.001 for f in r["flows"])  # 1 ms start jitter


def test_ideal_goodput_is_limited_by_access_links_when_they_are_slower(tmp_path):
    s, _ = load_text(tmp_path, QUICK, ["topology.pairs=1"])
    assert sc.resolve(s)["ideal_goodput_mbps"] == pytest.approx(1000 * 1448 / 1538)


def test_overrides_and_the_given_copy(tmp_path):
    s, given = load_text(tmp_path, QUICK, ["topology.rtt=100ms", "workload.streams=4", "protocol.variant=RENO"])
    assert s.topology.rtt == pytest.approx(0.1)
    assert s.workload.streams == 4 and s.protocol.variant == "reno"
    assert given["topology"]["rtt"] == "100ms" and given["workload"]["streams"] == 4
    r = sc.resolve(s)
    assert len(r["flows"]) == 16 and {f["stream"] for f in r["flows"]} == {0, 1, 2, 3}


def test_an_override_can_index_a_list_that_exists():
    data = {"requests": [{"volume": "1GB"}, {"volume": "2GB"}]}
    sc.set_path(data, "requests.1.volume", "5GB", "s.yaml")
    assert data["requests"] == [{"volume": "1GB"}, {"volume": "5GB"}]
    for bad, words in (("requests.2.volume", "2 is not an index of a list of 2"), ("requests.x", "x is not an index")):
        with pytest.raises(sc.ScenarioError, match=words):
            sc.set_path(data, bad, "1GB", "s.yaml")


def test_buffer_forms(tmp_path):
    for text, pkts in (("100", 100), ("0.5bdp", 833), ("150000", 150000), ("'1.5MB'", 1000)):
        s, _ = load_text(tmp_path, QUICK, [f"topology.buffer={text}"])
        assert sc.buffer_packets(s.topology) == pkts, text


def test_stagger_align_end_and_volumes(tmp_path):
    s, _ = load_text(tmp_path, QUICK, ["workload.stagger=200s", "workload.align_end=true", "workload.start_jitter=0s"])
    r = sc.resolve(s)
    assert [f["start_s"] for f in r["flows"]] == [0, 200, 400, 600]
    assert {f["start_s"] + f["duration_s"] for f in r["flows"]} == {620.0}
    s, _ = load_text(tmp_path, QUICK.replace("duration: 20s", "volume: 1GB"), ["workload.streams=3", "workload.start_jitter=0"])
    r = sc.resolve(s)
    vols = [f["volume_bytes"] for f in r["flows"] if f["pair"] == 0]
    assert sum(vols) == 10**9 and max(vols) - min(vols) <= 1
    # Four transfers share 2 Gbit/s: 0.5 Gbit/s of wire each, 1448/1538 of it payload.
    assert r["transfers"][0]["ideal_completion_s"] == pytest.approx(8e9 / (0.5e9 * 1448 / 1538))
    assert r["end_s"] > 10 * r["transfers"][0]["ideal_completion_s"]


@pytest.mark.parametrize(
    "override,field,words",
    [
        ("topology.colour=red", "topology.colour", "unknown field"),
        ("topology.access_rate=10Gbs", "topology.access_rate", "unit"),
        ("topology.bottleneck_rate=-1Gbps", "topology.bottleneck_rate", "positive"),
        ("topology.bottleneck_rate=0Gbps", "topology.bottleneck_rate", "positive"),
        ("topology.buffer=0", "topology.buffer", "at least 1"),
        ("topology.buffer=0bdp", "topology.buffer", "positive"),
        ("protocol.variant=vegas", "protocol.variant", "unknown variant"),
        ("workload.volume=1GB", "workload", "exactly one"),
        ("topology.rtt=0ms", "topology.rtt", "positive"),
        ("measure.window=[5s, 1s]", "measure.window", "start < end"),
        ("seed=-1", "seed", "greater than or equal"),
    ],
)
def test_bad_input_names_the_file_and_field(tmp_path, override, field, words):
    with pytest.raises(sc.ScenarioError) as e:
        load_text(tmp_path, QUICK, [override])
    msg = str(e.value)
    assert str(tmp_path / "s.yaml") in msg and f": {field}: " in msg and words in msg, msg


def test_neither_volume_nor_duration(tmp_path):
    with pytest.raises(sc.ScenarioError, match="exactly one of workload.duration and workload.volume"):
        load_text(tmp_path, QUICK.replace("duration: 20s, ", ""))


def test_unreadable_files(tmp_path):
    with pytest.raises(sc.ScenarioError, match="no such file"):
        sc.load(tmp_path / "missing.yaml")
    with pytest.raises(sc.ScenarioError, match="not valid YAML"):
        load_text(tmp_path, "name: [unclosed")
    with pytest.raises(sc.ScenarioError, match="expected a mapping"):
        load_text(tmp_path, "- a list")


def test_schema_describes_the_sections():
    schema = sc.json_schema()
    json.dumps(schema)
    assert {"topology", "workload", "protocol", "measure", "seed"} <= set(schema["properties"])


def test_per_pair_overrides_cycle_over_pairs(tmp_path):
    s, _ = load_text(
        tmp_path,
        QUICK.replace("duration: 20s", "volume: 1GB"),
        ["workload.per_pair=[{variant: cubic, volume: 2GB}, {variant: htcp, rtt: 50ms, rate_limit: 300Mbps}]"],
    )
    r = sc.resolve(s)
    assert [f["variant"] for f in r["flows"]] == ["cubic", "htcp", "cubic", "htcp"]
    assert [f["volume_bytes"] for f in r["flows"]] == [2 * 10**9, 10**9, 2 * 10**9, 10**9]
    assert r["pair_paths"][1]["rtt_s"] == pytest.approx(0.05)
    assert r["flows"][1]["limiter"]["kind"] == "pacer" and r["flows"][1]["limiter"]["rate_bps"] == 300e6
    assert r["transfers"][1]["rate_limit_bps"] == 300e6 and r["transfers"][1]["rtt_s"] == pytest.approx(0.05)
    assert r["flows"][0]["limiter"] is None


def test_rate_limits_split_over_streams_and_token_bucket_defaults(tmp_path):
    s, _ = load_text(tmp_path, QUICK, ["protocol.rate_limit=400Mbps", "protocol.limiter=token_bucket", "workload.streams=4"])
    lim = sc.resolve(s)["flows"][0]["limiter"]
    assert lim["kind"] == "token_bucket" and lim["rate_bps"] == pytest.approx(100e6)
    # HTB's default depth: one timer tick of tokens (HZ = 250: 4 ms) plus one frame.
    assert lim["burst_bytes"] == math.ceil(100e6 / 8 * 0.004) + 1514 and lim["tick_s"] == pytest.approx(0.004)


def test_workload_model_of_seed_004(tmp_path):
    text = QUICK.replace("pairs: 4, ", "")
    s, _ = load_text(
        tmp_path,
        text,
        ["workload.congestion_level=1.5", "workload.reverse=1.0", "workload.background={level: 0.25, mean_on: 2s, mean_off: 2s}"],
    )
    r = sc.resolve(s)
    # Cg = pairs × Ca / C: 1.5 × 2 Gbit/s / 1 Gbit/s = 3 pairs; R = 1.0: 2 reverse sources.
    assert r["pairs"] == 3 and r["reverse_sources"] == 2
    assert [f["role"] for f in r["flows"]].count("reverse") == 2
    # Bg = 0.25 of 2 Gbit/s from sources of at most 1 Gbit/s ON half the time: one source
    # sending 1 Gbit/s while ON.
    assert r["background_sources"] == 1
    assert r["background"][0]["rate_bps"] == pytest.approx(1e9)
    s, _ = load_text(tmp_path, QUICK, ["workload.background={level: 0.6, mean_on: 1s, mean_off: 3s}"])
    r = sc.resolve(s)
    # 1.2 Gbit/s of mean load at a 25 % duty cycle: 5 sources at 0.96 Gbit/s while ON.
    assert r["background_sources"] == 5
    assert r["background"][0]["rate_bps"] == pytest.approx(1.2e9 / (5 * 0.25))
    with pytest.raises(sc.ScenarioError, match="not both"):
        load_text(tmp_path, QUICK, ["workload.congestion_level=1.5"])


def test_per_pair_volume_needs_a_volume_workload(tmp_path):
    with pytest.raises(sc.ScenarioError, match="volume-based"):
        load_text(tmp_path, QUICK, ["workload.per_pair=[{volume: 1GB}]"])


def test_shaped_bottleneck(tmp_path):
    s, _ = load_text(tmp_path, QUICK, ["topology.shaper={limiter: token_bucket}"])
    sh = sc.resolve(s)["shaper"]
    assert sh["line_rate_bps"] == 20e9 and sh["rate_bps"] == 2e9
    assert sh["burst_bytes"] == math.ceil(2e9 / 8 / 250) + 1514
    with pytest.raises(sc.ScenarioError, match="line_rate"):
        sc.resolve(load_text(tmp_path, QUICK, ["topology.shaper={line_rate: 1Gbps}"])[0])


@pytest.mark.parametrize(
    "text,value",
    [("1e-4", 1e-4), ("1E-4", 1e-4), ("+1e-3", 1e-3), ("1.5e-3", 1.5e-3), (".5e-2", 0.005), ("1.0e-4", 1e-4), ("0", 0)],
)
def test_a_number_in_exponent_form_is_a_number_in_a_file_and_in_set(tmp_path, text, value):
    # YAML 1.1 (PyYAML) reads 1e-4 as text: the field then refused "a valid number, got '1e-4'".
    s, given = load_text(tmp_path, QUICK.replace("mtu: 1500}", f"mtu: 1500, loss_rate: {text}}}"))
    assert s.topology.loss_rate == pytest.approx(value) and given["topology"]["loss_rate"] == pytest.approx(value)
    s, given = load_text(tmp_path, QUICK, [f"topology.loss_rate={text}"])
    assert s.topology.loss_rate == pytest.approx(value) and given["topology"]["loss_rate"] == pytest.approx(value)


def test_a_whole_number_in_exponent_form_is_an_integer(tmp_path):
    s, _ = load_text(tmp_path, QUICK, ["topology.pairs=1E1", "topology.buffer=2.5e3", "seed=1e3", "workload.streams=+2e0"])
    assert (s.topology.pairs, s.workload.streams, s.seed) == (10, 2, 1000)
    assert sc.buffer_packets(s.topology) == 2500
    with pytest.raises(sc.ScenarioError, match="topology.pairs"):  # a fraction is still no count of pairs
        load_text(tmp_path, QUICK, ["topology.pairs=1.5e0"])
    with pytest.raises(sc.ScenarioError, match="a number too large"):
        load_text(tmp_path, QUICK, ["topology.loss_rate=1e400"])
    # Words that merely look like numbers stay words.
    for text in ("1e", "e5", "1e4s", "1.e"):
        assert sc.parse_overrides([f"name={text}"]) == [("name", text)]


@pytest.mark.parametrize(
    "text,line,key",
    [
        (QUICK + "topology: {pairs: 1}\n", 8, "topology"),
        (QUICK.replace("seed: 1", "seed: 1\nseed: 2"), 8, "seed"),
        (QUICK.replace("rtt: 10ms,", "rtt: 10ms, rtt: 20ms,"), 3, "rtt"),
        ("name: x\ntopology:\n  pairs: 1\n  pairs: 2\nworkload: {duration: 1s}\n", 4, "pairs"),
    ],
)
def test_a_key_given_twice_is_refused_with_its_lines(tmp_path, text, line, key):
    # PyYAML keeps the last one silently, so `topology:` twice dropped the first section.
    with pytest.raises(sc.ScenarioError) as e:
        load_text(tmp_path, text)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 's.yaml'}: line {line}: '{key}' is given twice (first on line "), msg
    # The same rule in --set values (YAML too) and a merge key (<<) may still be overridden.
    with pytest.raises(sc.ScenarioError, match="'a' is given twice"):
        load_text(tmp_path, QUICK, ["topology.shaper={a: 1, a: 2}"])


def test_a_yaml_merge_may_be_overridden():
    data = datafile.parse("base: &b {streams: 2, duration: 5s}\nworkload:\n  <<: *b\n  streams: 3\n", "m.yaml")
    assert data["workload"] == {"streams": 3, "duration": "5s"}


def test_sampling_intervals_that_would_overfill_the_trace_are_refused_up_front(tmp_path):
    # measure.link_interval: 1us was accepted, then the run went silent for minutes (20 million
    # samples, and a bar per sample in the report).
    s, _ = load_text(tmp_path, QUICK, ["measure.link_interval=1us"])
    with pytest.raises(sc.ScenarioError) as e:
        sc.resolve(s)
    assert str(e.value).startswith(
        "quick: measure.link_interval: the trace would hold 2e+07 rows (goodput 160, tcp 800, link 2e+07; "
        "1 series × 20.0008s at 1us), over the limit of 2e+07 (a trace must fit in memory (about 1 GB)); use at least 1.0"
    ), str(e.value)
    # Every interval at 1 µs: the largest table is named, and no single change is enough.
    every = [f"measure.{f}=1us" for f in ("goodput_interval", "link_interval", "tcp_interval")]
    with pytest.raises(sc.ScenarioError, match=r"^quick: measure.goodput_interval: .* lengthen it and the other intervals$"):
        sc.resolve(load_text(tmp_path, QUICK, every)[0])
    # Tables that fit one by one but not together (1.6e7 + 4e6 rows).
    with pytest.raises(sc.ScenarioError, match="the trace would hold 2e"):
        sc.resolve(load_text(tmp_path, QUICK, ["measure.tcp_interval=5us", "measure.link_interval=5us"])[0])


def test_the_cost_counts_the_trace_rows(tmp_path):
    s, _ = load_text(tmp_path, QUICK, ["measure.link_interval=10us", "measure.tcp_interval=10us"])
    c = sc.resolve(s)["cost"]
    # 20 s of 4 flows: goodput every 0.5 s, tcp and the bottleneck every 10 µs.
    assert c["rows"] == pytest.approx(4 * 20 / 0.5 + 4 * 20 / 1e-5 + 20 / 1e-5, rel=1e-3)
    assert c["sim_wall_s"] > 100, "ten million rows are announced before the run"
