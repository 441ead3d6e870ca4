"""The per-rank event log: header, typed records, and a reader that names the file and line of bad input."""

import json
import threading

import pytest

from rog.runtime.events import (
    KINDS,
    SCHEMA_VERSION,
    EventLog,
    EventLogError,
    check_record,
    events_file_name,
    read_events,
    worker_rank,
)

PUSH = dict(iteration=3, rows_planned=100, rows_delivered=40, bytes=1234, deadline_s=0.5, delivered_share=0.4,
            duration_s=0.51, mandatory_s=0.2)


def test_file_names_per_rank():
    assert events_file_name("ps") == "events-ps.jsonl"
    assert events_file_name(worker_rank(3)) == "events-w3.jsonl"
    with pytest.raises(ValueError, match="rank"):
        events_file_name("worker3")
    with pytest.raises(ValueError, match="worker"):
        worker_rank(-1)


def test_round_trip_header_and_records(tmp_path):
    path = tmp_path / events_file_name("w1")
    with EventLog(path, "w1", "ROG4-b1-w4-seed0", origin_monotonic_s=100.0) as log:
        log.write("run_start", t_s=0.0, policy="ROG", threshold=4, n_workers=4, worker=1)
        log.write("compute", t_s=1.0, iteration=1, duration_s=0.25, sleep_s=0.0)
        log.write("push", t_s=1.25, **PUSH)
        log.write("pull", t_s=2.0, **{**PUSH, "deadline_s": None, "mandatory_s": None})
        log.write("stall", t_s=3.0, iteration=1, duration_s=0.1, reason="gate")
        log.write("staleness", t_s=3.1, iteration=1, max=2, mean=0.5)
        log.write("eval", t_s=4.0, iteration=1, accuracy=0.6, loss=1.2)
        log.write("flush", t_s=5.0, direction="push", rows_delivered=10, bytes=99, duration_s=0.01)
        log.write("run_end", t_s=6.0, status="ok", iterations=1)
    header, recs = read_events(path)
    assert header["schema"] == SCHEMA_VERSION and header["rank"] == "w1" and header["run_id"] == "ROG4-b1-w4-seed0"
    assert header["origin_monotonic_s"] == 100.0
    assert [r["kind"] for r in recs] == ["run_start", "compute", "push", "pull", "stall", "staleness", "eval", "flush",
                                         "run_end"]
    assert recs[2] == {"kind": "push", "t_s": 1.25, **PUSH}
    assert recs[3]["deadline_s"] is None


def test_t_s_defaults_to_seconds_since_the_origin(tmp_path):
    import time

    origin = time.monotonic() - 50.0
    with EventLog(tmp_path / "events-ps.jsonl", "ps", "r", origin_monotonic_s=origin) as log:
        rec = log.write("run_start")
    assert 50.0 <= rec["t_s"] < 50.0 + 60.0  # the origin was 50 s ago (generous upper bound: a slow machine)
    assert log.at(origin + 2.5) == pytest.approx(2.5)


@pytest.mark.parametrize(
    "kind, fields, match",
    [
        ("bogus", {}, "unknown kind"),
        ("compute", {"iteration": 1}, "misses field 'duration_s'"),
        ("compute", {"iteration": 1, "duration_s": 0.1, "typo_s": 1}, "unknown field 'typo_s'"),
        ("compute", {"iteration": 1.5, "duration_s": 0.1}, "'iteration' has a bad value"),
        ("compute", {"iteration": True, "duration_s": 0.1}, "'iteration' has a bad value"),
        ("compute", {"iteration": 1, "duration_s": float("nan")}, "'duration_s' has a bad value"),
        ("stall", {"iteration": 1, "duration_s": 0.1, "reason": "coffee"}, "reason must be one of"),
        ("flush", {"direction": "up", "rows_delivered": 1, "bytes": 1, "duration_s": 0.0}, "direction must be"),
    ],
)
def test_writer_rejects_bad_records(tmp_path, kind, fields, match):
    with EventLog(tmp_path / "events-ps.jsonl", "ps", "r") as log:
        with pytest.raises(ValueError, match=match):
            log.write(kind, t_s=0.0, **fields)
    _, recs = read_events(tmp_path / "events-ps.jsonl")
    assert recs == []  # nothing bad was written


def _file_with(tmp_path, lines):
    path = tmp_path / "events-w0.jsonl"
    header = {"kind": "header", "schema": SCHEMA_VERSION, "rank": "w0", "run_id": "r", "origin_monotonic_s": 0.0,
              "origin_unix_s": 0.0}
    path.write_text("\n".join([json.dumps(header)] + lines) + "\n")
    return path


@pytest.mark.parametrize(
    "line, match",
    [
        ('{"kind": "nope", "t_s": 0}', r"events-w0.jsonl:3: unknown kind 'nope'"),
        ('{"kind": "push", "t_s": 0, "iteration": 1}', r"events-w0.jsonl:3: push record misses field"),
        ('{"kind": "eval", "iteration": 1, "accuracy": 0.5, "loss": 1}', r"events-w0.jsonl:3: eval record misses field 't_s'"),
        ('{"kind": "compute", "t_s": 0, "iteration": 1, "duration_s"', r"events-w0.jsonl:3: not a JSON line"),
        ("[1, 2]", r"events-w0.jsonl:3: a record must be a JSON object"),
    ],
)
def test_reader_names_file_and_line(tmp_path, line, match):
    good = '{"kind": "compute", "t_s": 0.5, "iteration": 1, "duration_s": 0.1}'
    path = _file_with(tmp_path, [good, line, good])
    with pytest.raises(EventLogError, match=match):
        read_events(path)


def test_reader_needs_a_header(tmp_path):
    path = tmp_path / "events-w0.jsonl"
    path.write_text('{"kind": "compute", "t_s": 0.5, "iteration": 1, "duration_s": 0.1}\n')
    with pytest.raises(EventLogError, match=r"events-w0.jsonl:1: first line must be the header"):
        read_events(path)
    path.write_text("")
    with pytest.raises(EventLogError, match=r":1: empty event file"):
        read_events(path)
    path.write_text(json.dumps({"kind": "header", "schema": 99, "rank": "w0", "run_id": "r", "origin_monotonic_s": 0,
                                "origin_unix_s": 0}) + "\n")
    with pytest.raises(EventLogError, match="schema version 99"):
        read_events(path)


def test_partial_last_line_of_a_live_file(tmp_path):
    good = '{"kind": "compute", "t_s": 0.5, "iteration": 1, "duration_s": 0.1}'
    path = _file_with(tmp_path, [good])
    with open(path, "a") as f:
        f.write('{"kind": "compute", "t_s": 0.6, "itera')  # a writer is in the middle of a line
    with pytest.raises(EventLogError, match=":3: not a JSON line"):
        read_events(path)
    _, recs = read_events(path, allow_partial_last_line=True)
    assert len(recs) == 1


def test_every_kind_has_the_fields_the_brief_names():
    transfer = {"iteration", "rows_planned", "rows_delivered", "bytes", "deadline_s", "delivered_share", "duration_s",
                "mandatory_s"}
    assert set(KINDS["push"][0]) == transfer and set(KINDS["pull"][0]) == transfer
    assert set(KINDS["compute"][0]) == {"iteration", "duration_s"}
    assert set(KINDS["stall"][0]) == {"iteration", "duration_s", "reason"}
    assert set(KINDS["staleness"][0]) == {"iteration", "max", "mean"}
    assert set(KINDS["eval"][0]) == {"iteration", "accuracy", "loss"}
    check_record({"kind": "run_end", "t_s": 1.0, "status": "ok"})


def test_threads_share_one_log_without_tearing_lines(tmp_path):
    path = tmp_path / "events-ps.jsonl"
    with EventLog(path, "ps", "r") as log:

        def burst(w):
            for n in range(1, 201):
                log.write("compute", iteration=n, duration_s=0.001, worker=w)

        threads = [threading.Thread(target=burst, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    _, recs = read_events(path)
    assert len(recs) == 800
    for w in range(4):
        assert [r["iteration"] for r in recs if r["worker"] == w] == list(range(1, 201))
