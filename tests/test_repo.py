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
