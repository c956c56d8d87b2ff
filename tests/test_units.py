import pytest
from xferlab.units import parse_duration, parse_rate, parse_size


@pytest.mark.parametrize(
    "text,bps",
    [("10Gbps", 10e9), ("1Gbit/s", 1e9), ("400Mbps", 400e6), ("1.5 Gb/s", 1.5e9), ("100kbps", 1e5), ("2.5e9bps", 2.5e9)],
)
def test_rates(text, bps):
    assert parse_rate(text) == pytest.approx(bps)


@pytest.mark.parametrize("text", ["10", "10GBps", "100MB/s", "fast", "10Gbs", "", "-"])
def test_bad_rates_say_what_is_expected(text):
    with pytest.raises(ValueError) as e:
        parse_rate(text)
    assert "rate" in str(e.value) or "unit" in str(e.value)


@pytest.mark.parametrize(
    "text,s", [("11.5ms", 0.0115), ("20s", 20.0), ("2min", 120.0), ("500us", 5e-4), ("1h", 3600.0), (3, 3.0), ("0.5", 0.5)]
)
def test_durations(text, s):
    assert parse_duration(text) == pytest.approx(s)


@pytest.mark.parametrize(
    "text,b",
    [("15GB", 15 * 10**9), ("1GiB", 2**30), ("3000MB", 3 * 10**9), ("512KiB", 2**19), ("100", 100), ("1.5TB", 15 * 10**11)],
)
def test_sizes(text, b):
    assert parse_size(text) == b


def test_sizes_reject_bits_and_unknown_units():
    with pytest.raises(ValueError, match="bytes"):
        parse_size("10Gb")
    with pytest.raises(ValueError, match="unknown size unit"):
        parse_size("3 parsecs")
