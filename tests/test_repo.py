"""The repository's own promises: the README's test command is what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    block = re.search(r"## Set up.*?```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block, "README has no Set up block"
    return [ln for ln in block.group(1).splitlines() if ln and not ln.startswith("#")]


def test_readme_has_two_setup_commands() -> None:
    cmds = readme_commands()
    assert len(cmds) == 2
    assert "trtllm-script-builder build examples/" in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command() -> None:
    assert readme_commands()[1] in (ROOT / ".ci" / "run").read_text().splitlines()


def _project_texts() -> list[Path]:
    roots = [ROOT / "src", ROOT / "tests", ROOT / "bench", ROOT / "docs", ROOT / ".ci"]
    files = [ROOT / "README.md"]
    for r in roots:
        files += [
            p for p in r.rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".j2", ".sh", "")
        ]
    return [p for p in files if "__pycache__" not in p.parts and "golden" not in p.parts]


def test_the_project_points_at_no_document_outside_it() -> None:
    """Reasons live in docs/decisions.md; nothing refers to design notes kept elsewhere."""
    banned = re.compile(r"DESIGN|\bseed\b|trtllm-facts|DEVELOPERS\.md|facts \d|\bissue \d", re.I)
    this = Path(__file__).resolve()
    hits = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in _project_texts()
        if p.resolve() != this
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if banned.search(line)
    ]
    assert not hits, "\n".join(hits)
