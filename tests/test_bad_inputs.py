"""Malformed traces (both formats), hosts files, device profiles and command lines, table-driven
(benchmarks.faults.bad_inputs.CASES): each is refused with the documented error type, and the message names
the file, the line or field, and how to fix it."""

from __future__ import annotations

import pytest

from benchmarks.faults.bad_inputs import CASES, BadInput, check


def test_the_table_is_large_and_covers_every_input_kind():
    assert len(CASES) >= 40
    assert len({c.case for c in CASES}) == len(CASES)
    kinds = {c.kind for c in CASES}
    assert {"trace", "hosts", "profile", "run_cli", "run_main", "items_cli", "tc_replay_cli", "testbed_cli"} <= kinds
    traces = [c for c in CASES if c.kind == "trace"]
    assert any("," in c.content for c in traces) and any(c.case.startswith("rec_") for c in traces)  # both formats


@pytest.mark.parametrize("case", CASES, ids=[c.case for c in CASES])
def test_bad_input_gets_a_clear_error(case, tmp_path):
    msg, problems = check(case, tmp_path)
    assert not problems, f"{problems}; message was: {msg}"


def test_the_checker_rejects_a_vague_message(tmp_path):
    """A case whose expected hint is absent from the real message is reported (the check can fail)."""
    vague = BadInput("vague", "trace", "t_s,mbps\n0,50\n1,-4\n", (":3:", "call the helpdesk"))
    _, problems = check(vague, tmp_path)
    assert problems == ["the message lacks 'call the helpdesk'"]
    good_input = BadInput("fine", "trace", "t_s,mbps\n0,50\n1,40\n", (":2:",))
    assert check(good_input, tmp_path)[1] == ["accepted"]
