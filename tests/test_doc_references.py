"""Citations in code and docs stay inside the repository: every ``docs/<page>.md#<section>`` named in
rog/, scripts/, tests/ or docs/ is a page of docs/ with a heading of that anchor (GitHub's rule:
lower case, punctuation dropped, spaces to hyphens), and nothing cites a design document by section
number that the repository does not hold."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"docs/([A-Za-z0-9_-]+\.md)#([A-Za-z0-9_-]+)")
OUTSIDE = re.compile(r"\b" + "DES" + r"IGN(?:\.md)?\s+\d")  # a section number of a design file not in the repo


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading's text."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of every heading of ``page`` (fenced code blocks skipped)."""
    out, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            out.add(anchor(line.lstrip("#")))
    return out


def problems(root: Path) -> list[str]:
    """``file:line: what`` for every citation under ``root`` that points nowhere or outside the repository."""
    found, known = [], {}
    files = [p for d in ("rog", "scripts", "tests", "docs") if (root / d).is_dir()
             for p in sorted((root / d).rglob("*")) if p.suffix in (".py", ".sh", ".md")]
    for path in files:
        rel = path.relative_to(root)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{rel}:{n}: cites a design file outside the repository (use docs/design.md#<section>)")
            for page, frag in CITATION.findall(line):
                target = root / "docs" / page
                if not target.is_file():
                    found.append(f"{rel}:{n}: docs/{page} does not exist")
                    continue
                if page not in known:
                    known[page] = anchors(target)
                if frag not in known[page]:
                    found.append(f"{rel}:{n}: docs/{page} has no section #{frag}")
    return found


def test_every_doc_citation_resolves_inside_the_repository():
    bad = problems(ROOT)
    assert not bad, "\n".join(bad)


def test_the_design_page_holds_the_sections_the_code_cites():
    cited = {frag for p in ("rog", "scripts") for f in (ROOT / p).rglob("*.py")
             for page, frag in CITATION.findall(f.read_text(encoding="utf-8")) if page == "design.md"}
    assert {"artifact-choices", "transport-deadlines", "quick-regime", "energy-model", "event-records"} <= cited
    assert cited <= anchors(ROOT / "docs" / "design.md")


def test_the_checker_finds_a_broken_anchor_a_missing_page_and_an_outside_citation(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text("# Title\n\n## Quick regime\n\n```\n## not a heading\n```\n")
    (tmp_path / "rog").mkdir()
    d = "docs" + "/"  # split so that this file's own source cites nothing
    (tmp_path / "rog" / "m.py").write_text(
        f'"""ok: {d}x.md#quick-regime; broken: {d}x.md#quick; fenced: {d}x.md#not-a-heading."""\n'
        f"# gone: {d}y.md#title\n"
        "# outside: " + "DES" + "IGN 3.3\n")
    assert problems(tmp_path) == [
        "rog/m.py:1: docs/x.md has no section #quick",
        "rog/m.py:1: docs/x.md has no section #not-a-heading",
        "rog/m.py:2: docs/y.md does not exist",
        "rog/m.py:3: cites a design file outside the repository (use docs/design.md#<section>)",
    ]
    assert anchor("The ROG toolkit: design (v2)") == "the-rog-toolkit-design-v2"
