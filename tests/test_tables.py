"""The one table writer and number formatter (rog/analysis/tables.py): cells, rules, alignment, refusals."""

import math

import pytest

from rog.analysis.tables import console_table, fmt, markdown_table, pct, row


def test_markdown_table_writes_header_rule_and_rows_as_the_summaries_did():
    assert markdown_table(["a", "bb"], [[1, None], ["x", ""]]) == ["| a | bb |", "|---|---|", "| 1 | None |", "| x |  |"]
    assert markdown_table(("run", "s"), align=["l", "r"]) == ["| run | s |", "|:---|---:|"]
    assert markdown_table(["c"], [[2.5]], align="c") == ["| c |", "|:---:|", "| 2.5 |"]
    assert row(iter([0, "a"])) == "| 0 | a |"


def test_markdown_table_refuses_a_ragged_row_and_an_unknown_alignment():
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        markdown_table(["a", "b", "c"], [[1, 2]])
    with pytest.raises(ValueError, match="align"):
        markdown_table(["a", "b"], align=["l"])
    with pytest.raises(ValueError, match="align"):
        markdown_table(["a"], align="x")


def test_console_table_pads_every_column_to_its_widest_cell_at_any_width():
    long = "y" * 40  # past the 28 characters the --dry-run plan table padded to
    lines = console_table(["item", "n"], [["a", 1], [long, 12]], align=["l", "r"])
    assert lines == ["item" + " " * 36 + "   n", "-" * 40 + "  " + "--", "a" + " " * 39 + "   1", long + "  12"]
    assert {len(ln) for ln in lines} == {44}  # the right-aligned column ends at one place on every line
    assert console_table(["a", "b"], [["xyz", "1"]], gap=1, rule=False) == ["a   b", "xyz 1"]
    with pytest.raises(ValueError, match="align"):
        console_table(["a"], [], align="c")


def test_fmt_and_pct_follow_the_conventions_of_the_formatters_they_replace():
    assert fmt(1.23456) == "1.23" and fmt(2, 0) == "2" and fmt(1234.5, 3, 1e-3) == "1.234"  # claim_table.fmt
    assert fmt(None) == "-" and fmt(math.nan) == "-" and fmt(math.inf) == "-"
    assert fmt(None, none="n/a") == "n/a" and fmt(0.5, 1, unit=" s") == "0.5 s"
    assert fmt(0.25, sign=True, unit=" pts") == "+0.25 pts" and fmt(-0.25, sign=True) == "-0.25"
    assert pct(0.1234) == "12.3 %" and pct(None) == "n/a" and pct(float("nan")) == "n/a"  # the papers' _pct
    assert pct(0.5, 0, none="-") == "50 %" and pct(None, 0, none="-") == "-"  # atp's
    assert pct(-0.031, sign=True, unit=" points") == "-3.1 points"  # noniid_four's _pts
