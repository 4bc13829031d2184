"""Decisions are cited by name (decision one-rank-no-mpi): every name cited in the project is an
entry of docs/decisions.md, and no citation by number is left, since merges renumbered them.

The check reads the tree as text, so it also covers templates, generated golden files, docs,
skills and schemas. It is run on the project and on a small tree with mistakes planted in it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = Path("docs") / "decisions.md"
AREAS = ["src", "docs", "skills", "schemas", "bench", "examples", "tests", ".ci", "README.md"]
SUFFIXES = {".py", ".md", ".j2", ".sh", ".json", ".yaml", ".yml", ".slurm", ".txt", ".toml", ""}

NAME = r"[a-z][a-z0-9]*(?:-[a-z0-9]+)+"
# A citation may be wrapped: the next line then starts with a comment marker or indentation.
GAP = r"(?:[ \t]*\n[ \t]*(?:(?:#+|//|\*|>)[ \t]*)?|[ \t]+)"
AND = rf"(?:,{GAP}?(?:(?:and|or){GAP})?|{GAP}(?:and|or){GAP})"
CITED = re.compile(rf"\b[Dd]ecisions?{GAP}({NAME}(?:{AND}{NAME})*)")
BY_NUMBER = re.compile(rf"\b[Dd]ecisions?(?:\.md)?{GAP}\(?\d")
DEFINED = re.compile(rf"^- \*\*({NAME})\*\*", re.M)
NUMBERED_ENTRY = re.compile(r"^\d+\. \*\*", re.M)


def _texts(root: Path) -> list[Path]:
    """The project's text files: in a checkout those git knows of, not a build's or a run's."""
    if (root / ".git").exists():
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "-co", "--exclude-standard", *AREAS],
            capture_output=True,
            check=True,
        ).stdout.decode()
        found = [root / p for p in sorted(set(listed.split("\0"))) if p]
    else:
        found = [
            p for a in AREAS if (root / a).exists() for p in [root / a, *(root / a).rglob("*")]
        ]
    this = Path(__file__).resolve()
    return [
        p
        for p in found
        if p.is_file()
        and p.suffix in SUFFIXES
        and "__pycache__" not in p.parts
        and p.resolve() != this
    ]


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def problems(root: Path) -> list[str]:
    """One line per wrong citation or definition under `root`: `file:line: what`."""
    doc = (root / DOC).read_text()
    out = []
    defined: set[str] = set()
    for m in DEFINED.finditer(doc):
        if m.group(1) in defined:
            out.append(f"{DOC}:{_line(doc, m.start())}: {m.group(1)} is defined twice")
        defined.add(m.group(1))
    for m in NUMBERED_ENTRY.finditer(doc):
        out.append(f"{DOC}:{_line(doc, m.start())}: an entry headed by a number, not a name")
    for path in _texts(root):
        text = path.read_text(errors="replace")
        rel = path.relative_to(root)
        for m in CITED.finditer(text):
            for name in re.findall(NAME, m.group(1)):
                if name not in defined:
                    out.append(f"{rel}:{_line(text, m.start())}: decision {name} is not defined")
        for m in BY_NUMBER.finditer(text):
            shown = " ".join(m.group(0).split())
            out.append(f"{rel}:{_line(text, m.start())}: cited by number: {shown}")
    return out


def test_every_cited_decision_is_defined_and_none_is_cited_by_number() -> None:
    found = problems(ROOT)
    assert not found, "\n".join(found)


def test_the_project_cites_decisions_and_defines_them() -> None:
    """Not a pass by reading nothing: the tree cites many of the names the document defines."""
    doc = (ROOT / DOC).read_text()
    defined = set(DEFINED.findall(doc))
    cited = {
        name
        for p in _texts(ROOT)
        for m in CITED.finditer(p.read_text(errors="replace"))
        for name in re.findall(NAME, m.group(1))
    }
    assert len(defined) >= 90 and {"one-rank-no-mpi", "atomic-job-set"} <= defined
    assert len(cited) >= 60 and cited <= defined


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


# Numbers are written as values, so that the text of this file cites none.
OLD = 63
DOC_TEXT = (
    "# Decisions\n\n## Some section\n\n"
    "- **atomic-job-set** (formerly 63).\n  *Nothing lost*: a set lands whole.\n"
    "- **one-rank-no-mpi**: one task runs without MPI, since it would hang.\n"
)


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            str(DOC): DOC_TEXT,
            "src/a.py": "# a set lands whole (decision atomic-job-set); see also\n"
            "# (decisions atomic-job-set and\n# one-rank-no-mpi)\n",
            "README.md": "Decision one-rank-no-mpi, as decided.\n",
        },
    )
    assert problems(root) == []


@pytest.mark.parametrize(
    ("rel", "text", "expected"),
    [
        ("src/a.py", "x = 1  # (decision no-such-name)\n", "src/a.py:1: decision no-such-name"),
        (
            "docs/b.md",
            "one\n(decisions atomic-job-set and made-up-name).\n",
            "docs/b.md:2: decision made-up-name is not defined",
        ),
        (
            "src/t/x.sh.j2",
            "# comment\n# submit passes it on (decision\n# not-there)\n",
            "src/t/x.sh.j2:2: decision not-there is not defined",
        ),
        ("src/a.py", f'"""As decision {OLD} says."""\n', "src/a.py:1: cited by number"),
        ("tests/golden/x/job.slurm", f"# (Decision {OLD})\n", "job.slurm:1: cited by number"),
        ("src/a.py", f"# a wrapped (decision\n# {OLD}) citation\n", "src/a.py:1: cited by number"),
        ("schemas/r.json", f'{{"description": "see decisions {OLD}-{OLD + 1}"}}', "cited by"),
        ("skills/s/SKILL.md", f"docs/decisions.md {OLD}\n", "SKILL.md:1: cited by number"),
    ],
)
def test_a_planted_mistake_is_found(tmp_path: Path, rel: str, text: str, expected: str) -> None:
    root = _tree(tmp_path, {str(DOC): DOC_TEXT, rel: text})
    found = problems(root)
    assert len(found) == 1 and expected in found[0], found


def test_a_document_with_a_name_twice_or_a_numbered_entry_fails(tmp_path: Path) -> None:
    twice = DOC_TEXT + "- **atomic-job-set**: again.\n" + f"{OLD + 1}. **Numbered**: old style.\n"
    found = problems(_tree(tmp_path, {str(DOC): twice}))
    assert any("atomic-job-set is defined twice" in f for f in found), found
    assert any("headed by a number" in f for f in found), found
