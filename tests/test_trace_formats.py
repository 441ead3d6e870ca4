"""Mahimahi and iperf3 --json traces (rog/trace_formats.py): detection, binned rates computed by hand, errors."""

import json

import numpy as np
import pytest

from rog.trace_formats import detect_format, parse_format, write_iperf3_json, write_mahimahi
from rog.traces import Trace, TraceError, load_trace

# one opportunity = 1500 bytes = 12000 bits = 0.012 Mbit


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_mahimahi_binned_rates_by_hand(tmp_path):
    # bin 0.5 s: (0, 500] ms holds 0, 10, 10, 499, 500 (5 opportunities; 0 counts in the first bin);
    # (500, 1000] holds 999 (1); (1000, 1500] holds 1200 (1) -> rates 5 * 0.012 / 0.5, 0.012 / 0.5, 0.012 / 0.5
    p = _write(tmp_path, "link.up", "0\n10\n10\n499\n500\n999\n1200\n")
    t = load_trace(p)
    assert np.allclose(t.times_s, [0.0, 0.5, 1.0])
    assert np.allclose(t.rate_mbit, [0.12, 0.024, 0.024])
    assert t.duration_s == pytest.approx(1.5)
    # every byte of the file is in the trace: 7 packets * 12000 bits
    assert t.integral_mbit_s(0.0, t.duration_s) == pytest.approx(7 * 0.012)


def test_mahimahi_bin_interval_from_the_format(tmp_path):
    # mahimahi:0.25 -> (0, 250]: 0, 10, 10 (3); (250, 500]: 499, 500 (2); the period is the last stamp, 500 ms
    p = _write(tmp_path, "t", "0\n10\n10\n499\n500\n")
    t = load_trace(p, fmt="mahimahi:0.25")
    assert np.allclose(t.rate_mbit, [3 * 0.012 / 0.25, 2 * 0.012 / 0.25])
    assert t.duration_s == pytest.approx(0.5)


def test_iperf3_intervals_by_hand(tmp_path):
    doc = {"start": {}, "intervals": [
        {"streams": [], "sum": {"start": 0.0, "end": 1.0, "bits_per_second": 20e6, "omitted": True}},
        {"streams": [], "sum": {"start": 1.0, "end": 2.0, "bits_per_second": 40e6}},
        {"streams": [], "sum": {"start": 2.0, "end": 3.0, "bits_per_second": 5.5e6}},
        {"streams": [], "sum": {"start": 3.0, "end": 3.5, "bits_per_second": 0.0}},
    ], "end": {}}
    p = _write(tmp_path, "robot.json", json.dumps(doc, indent=2))
    t = load_trace(p)
    assert np.allclose(t.times_s, [0.0, 1.0, 2.0])  # the omitted warm-up interval is skipped; starts at 0
    assert np.allclose(t.rate_mbit, [40.0, 5.5, 0.0])
    assert t.duration_s == pytest.approx(2.5)  # the last interval holds until its end (0.5 s)


def test_detection_by_content_and_override(tmp_path):
    assert detect_format("# c\n12\n13\n") == "mahimahi"
    assert detect_format(" {\n") == "iperf3"
    assert detect_format("t_s,mbps\n0,1\n") == "csv"
    assert detect_format("0.0 1.5\n") == "record"
    csv = _write(tmp_path, "a.csv", "t_s,mbps\n0,1\n1,2\n")
    assert np.allclose(load_trace(csv, fmt="csv").rate_mbit, [1, 2])
    with pytest.raises(TraceError, match=r"a\.csv:1: expected 2 columns 'seconds Mbps'"):
        load_trace(csv, fmt="record")  # the header is not a 'seconds Mbps' pair
    rec = _write(tmp_path, "r.txt", "10 1\n11 2\n")
    with pytest.raises(TraceError, match=r"r\.txt:1: --trace-format csv"):
        load_trace(rec, fmt="csv")
    with pytest.raises(TraceError, match=r"r\.txt:1: expected one integer millisecond"):
        load_trace(rec, fmt="mahimahi")
    with pytest.raises(TraceError, match="choose one of auto, csv, record, mahimahi, iperf3"):
        load_trace(rec, fmt="pcap")
    assert parse_format("Mahimahi:0.2") == ("mahimahi", 0.2)
    for bad in ("mahimahi:0", "mahimahi:x", "iperf3:1"):
        with pytest.raises(ValueError):
            parse_format(bad)


def test_mahimahi_errors_name_file_and_line(tmp_path):
    with pytest.raises(TraceError, match=r"m:3: timestamp 5 ms after 9 ms on line 2"):
        load_trace(_write(tmp_path, "m", "1\n9\n5\n"))
    with pytest.raises(TraceError, match=r"m2:2: expected one integer"):
        load_trace(_write(tmp_path, "m2", "1\n2.5\n"), fmt="mahimahi")
    with pytest.raises(TraceError, match=r"m3:1: all opportunities fall in one 0.5 s bin"):
        load_trace(_write(tmp_path, "m3", "1\n20\n"))


def test_iperf3_errors_name_file_and_line(tmp_path):
    with pytest.raises(TraceError, match=r"j1\.json:3: not valid JSON"):
        load_trace(_write(tmp_path, "j1.json", '{\n "intervals": [\n  {,\n]}'))
    with pytest.raises(TraceError, match=r"iperf3 reported an error: 'unable to connect'"):
        load_trace(_write(tmp_path, "j2.json", '{"error": "unable to connect"}'))
    bad = '{\n"start": {},\n"intervals": [{"sum": {"start": 0, "end": 1}}]}'
    with pytest.raises(TraceError, match=r"j3\.json:3: intervals\[0\]\.sum needs numbers"):
        load_trace(_write(tmp_path, "j3.json", bad))


def test_writers_give_back_the_trace_as_its_format_bins_it(tmp_path):
    src = Trace(np.array([0.0, 1.0, 2.0]), np.array([12.0, 2.4, 6.0]), hold_after_s=1.0)
    # 12 Mbit/s = 1000 opportunities/s: 1000 in [0,1), 200 in [1,2), 500 in [2,3) -> binned at 1 s, the same rates
    back = load_trace(write_mahimahi(src, tmp_path / "x.up"), fmt="mahimahi:1")
    assert np.allclose(back.rate_mbit, [12.0, 2.4, 6.0], rtol=2e-3)
    back = load_trace(write_iperf3_json(src, tmp_path / "x.json"))
    assert np.allclose(back.rate_mbit, [12.0, 2.4, 6.0])
