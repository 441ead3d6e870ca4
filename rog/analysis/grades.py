"""The three grades of a verdict row and the counts every paper's section opens with.

A reproduced paper's claim is one :class:`GradedRow`: the paper's number, ours, the outcome of the claim's
rule (:data:`AGREES`, :data:`DOES_NOT`, :data:`NOT_DECIDABLE`), the setting it ran in and the null models
(:class:`NullResult`: the figure the emulation gives with the mechanism under test switched off or replaced
by its trivial version, judged by the same rule).  :func:`grade` gives one of three grades:

* :data:`BUILT_IN`: a null model gets the same decided outcome, or the row states why it holds by
  construction of the emulation or of the reading (``built_in_reason``).  Shown in its own table with the
  reason and never counted as agreement;
* :data:`REDUCED` (``consistent at reduced scale``): the row names a scaled setting (``scaled_setting``) and
  gives no argument that the scaling preserves the paper's number (``scaling_argument``);
* :data:`REPRODUCED`: the paper's setting, or a scaled one whose scaling is argued, against the paper's own
  number, and a null model (where there is one) does not get the same outcome.

A row that reads a claim a second way (``counted=False``: the reading set beside the fixed one) is shown
and never counted.  The rules are tested one by one on hand-made rows (``tests/test_grades.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .tables import markdown_table

__all__ = ["REPRODUCED", "REDUCED", "BUILT_IN", "GRADES", "AGREES", "DOES_NOT", "NOT_DECIDABLE", "OUTCOMES",
           "NullResult", "GradedRow", "grade", "outcome_of", "counts", "counts_markdown", "rows_markdown",
           "section_opening", "rows_json", "papers_table"]

REPRODUCED, REDUCED, BUILT_IN = "reproduced", "consistent at reduced scale", "built in"
GRADES = (REPRODUCED, REDUCED, BUILT_IN)
AGREES, DOES_NOT, NOT_DECIDABLE = "agrees", "does not", "not decidable"
OUTCOMES = (AGREES, DOES_NOT, NOT_DECIDABLE)

# verdict words of the papers' rules -> outcome (checked in this order: "does not agree" before "agree")
_NEGATIVE = ("not decidable", "not decided", "no verdict", "not measured", "n/a", "undecid")
_DOES_NOT = ("does not", "disagree", "not met", "fail", "misses", "below", "above", "neighbour", "no")
_AGREES = ("agree", "match", "pass", "holds", "met", "yes")


def outcome_of(verdict: str | bool | None) -> str:
    """One of :data:`OUTCOMES` from a rule's verdict: ``True``/``False``, or a word such as ``agrees``,
    ``matches``, ``pass``, ``holds``, ``met`` (agrees), ``does not agree``, ``disagrees``, ``FAIL``,
    ``below``, ``above``, ``neighbour`` (does not), ``not decidable (...)``, ``no verdict``, None (not decidable).
    An unknown word is a ValueError (a verdict must never be counted by accident)."""
    if verdict is None:
        return NOT_DECIDABLE
    if isinstance(verdict, bool):
        return AGREES if verdict else DOES_NOT
    v = str(verdict).strip().lower()
    if any(v.startswith(w) for w in _NEGATIVE):
        return NOT_DECIDABLE
    if any(v.startswith(w) for w in _DOES_NOT):
        return DOES_NOT
    if any(v.startswith(w) for w in _AGREES):
        return AGREES
    raise ValueError(f"verdict {verdict!r} names no outcome (expected agrees / does not agree / not decidable)")


@dataclass(frozen=True)
class NullResult:
    """A null model's figure for one row and the outcome the row's own rule gives it."""

    name: str  # what is switched off or made trivial, e.g. "pacing alone (1:1:3, no communication)"
    value: str  # its figure, as the row prints ours
    outcome: str  # one of OUTCOMES, by the row's rule

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"null model {self.name!r}: outcome {self.outcome!r} is not one of {OUTCOMES}")


@dataclass(frozen=True)
class GradedRow:
    """One claim of a paper as judged here, with what its grade rests on."""

    paper: str
    claim: str
    paper_value: str
    ours: str
    outcome: str  # one of OUTCOMES
    scaled_setting: str = ""  # the reduced setting the row ran in; '' = the paper's own setting
    scaling_argument: str = ""  # why that scaling keeps the paper's number comparable; '' = not argued
    nulls: tuple[NullResult, ...] = ()
    built_in_reason: str = ""  # why it holds by construction of the emulation or of the reading ('' = none stated)
    seeds: str = ""  # the seeds / traces / runs it rests on
    sentence: str = ""  # the one sentence a reviewer most needs
    reading: str = ""  # which reading of the paper's words this row uses ('' = the only one)
    counted: bool = True  # False: a reading set beside the fixed one, shown, never counted
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"{self.paper}: {self.claim!r}: outcome {self.outcome!r} is not one of {OUTCOMES}")

    @property
    def grade(self) -> str:
        """This row's grade (:func:`grade`)."""
        return grade(self)[0]

    @property
    def why(self) -> str:
        """Why it has its grade, in one clause."""
        return grade(self)[1]

    def to_json(self) -> dict[str, Any]:
        """The row as summary.json holds it (``grade`` and ``grade_reason`` included)."""
        g, why = grade(self)
        return dict(paper=self.paper, claim=self.claim, reading=self.reading, paper_value=self.paper_value,
                    ours=self.ours, outcome=self.outcome, grade=g, grade_reason=why, counted=self.counted,
                    scaled_setting=self.scaled_setting, scaling_argument=self.scaling_argument,
                    nulls=[dict(name=n.name, value=n.value, outcome=n.outcome) for n in self.nulls],
                    built_in_reason=self.built_in_reason, seeds=self.seeds, sentence=self.sentence, **self.extra)


def grade(row: GradedRow) -> tuple[str, str]:
    """``(grade, reason)`` of ``row`` by the rules of this module's docstring, in that order."""
    if row.outcome != NOT_DECIDABLE:
        same = [n for n in row.nulls if n.outcome == row.outcome]
        if same:
            n = same[0]
            return BUILT_IN, f"the null model '{n.name}' ({n.value}) also {_says(row.outcome)}"
    if row.built_in_reason:
        return BUILT_IN, row.built_in_reason
    if row.scaled_setting and not row.scaling_argument:
        return REDUCED, f"scaled setting, scaling not argued: {row.scaled_setting}"
    if row.scaled_setting:
        return REPRODUCED, f"scaled setting with its argument: {row.scaling_argument}"
    return REPRODUCED, "the paper's setting"


def _says(outcome: str) -> str:
    return "agrees" if outcome == AGREES else "does not agree"


def counts(rows: Iterable[GradedRow | dict]) -> dict[str, Any]:
    """Counts over the counted rows (:class:`GradedRow` or its :meth:`~GradedRow.to_json`): ``{"rows": n,
    "grades": {grade: n}, "outcomes": {outcome: n}, "by_grade": {grade: {outcome: n}}, "agreement": n}``.
    ``agreement`` counts the rows that agree and are not built in (a built-in row is never counted as
    agreement); ``outcomes`` counts every counted row."""
    by = {g: {o: 0 for o in OUTCOMES} for g in GRADES}
    for r in rows:
        g, o, counted = (r["grade"], r["outcome"], r["counted"]) if isinstance(r, dict) else (r.grade, r.outcome, r.counted)
        if counted:
            by[g][o] += 1
    grades = {g: sum(by[g].values()) for g in GRADES}
    outcomes = {o: sum(by[g][o] for g in GRADES) for o in OUTCOMES}
    return dict(rows=sum(grades.values()), grades=grades, outcomes=outcomes, by_grade=by,
                agreement=by[REPRODUCED][AGREES] + by[REDUCED][AGREES])


def counts_markdown(c: dict[str, Any], label: str = "") -> list[str]:
    """A grade x outcome table of :func:`counts`, with the agreement that counts under it."""
    head = f"{label}: " if label else ""
    out = markdown_table(["grade", *OUTCOMES, "rows"],
                         [[g, *(c["by_grade"][g][o] for o in OUTCOMES), c["grades"][g]] for g in GRADES]
                         + [["all", *(c["outcomes"][o] for o in OUTCOMES), c["rows"]]])
    return out + ["", f"{head}{c['agreement']} of {c['rows']} counted rows agree outside `built in` "
                  f"({c['by_grade'][REPRODUCED][AGREES]} reproduced, {c['by_grade'][REDUCED][AGREES]} at reduced scale); "
                  f"{c['grades'][BUILT_IN]} built in, never counted as agreement.", ""]


def _reading_cell(r: GradedRow) -> str:
    return (r.reading or "-") + ("" if r.counted else " (beside, not counted)")


def _nulls_cell(r: GradedRow) -> str:
    return "; ".join(f"{n.name}: {n.value} ({n.outcome})" for n in r.nulls) or "-"


def rows_markdown(rows: Sequence[GradedRow]) -> list[str]:
    """The graded rows (not built in) and the built-in rows in their own table, with the null models beside."""
    main = [r for r in rows if r.grade != BUILT_IN]
    built = [r for r in rows if r.grade == BUILT_IN]
    out = markdown_table(["claim", "reading", "paper", "ours", "outcome", "grade", "null model(s)", "setting"],
                         [[r.claim, _reading_cell(r), r.paper_value, r.ours, r.outcome, r.grade, _nulls_cell(r),
                           r.scaled_setting or "the paper's"] for r in main])
    if built:
        out += ["", "Built in (holds by construction of the emulation or of the reading; never counted as agreement):", "",
                *markdown_table(["claim", "reading", "paper", "ours", "outcome", "null model(s)", "why built in"],
                                [[r.claim, _reading_cell(r), r.paper_value, r.ours, r.outcome, _nulls_cell(r), r.why]
                                 for r in built])]
    return out + [""]


def section_opening(rows: Sequence[GradedRow], label: str) -> list[str]:
    """What a paper's section opens with: its counts per grade and outcome, then the graded rows."""
    if not rows:
        return []
    return [f"### {label}: grades", "", *counts_markdown(counts(rows), label), *rows_markdown(rows)]


def rows_json(rows: Sequence[GradedRow]) -> dict[str, Any]:
    """summary.json's value for one paper's graded rows: ``{"counts": ..., "rows": [...]}``."""
    return dict(counts=counts(rows), rows=[r.to_json() for r in rows])


def papers_table(by_paper: dict[str, dict[str, Any]]) -> list[str]:
    """One line per paper of its :func:`counts` (grades, outcomes, agreement outside ``built in``), then all papers."""
    tot = {k: 0 for k in (*GRADES, *OUTCOMES, "agreement", "rows")}
    body = []
    for paper, c in by_paper.items():
        vals = [c["grades"][g] for g in GRADES] + [c["outcomes"][o] for o in OUTCOMES] + [c["agreement"], c["rows"]]
        for k, v in zip(tot, vals):
            tot[k] += v
        body.append([paper, *vals])
    return markdown_table(["paper", *GRADES, *OUTCOMES, "agree outside built in", "rows"],
                          body + [["all", *tot.values()]]) + [""]
