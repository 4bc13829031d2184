"""Running the cluster's tools: the one place in the package that starts processes."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

NOT_FOUND = 127
TIMED_OUT = 124
DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class CmdResult:
    """What a tool did: exit status (127 = not found, 124 = timed out), stdout, stderr."""

    rc: int
    out: str = ""
    err: str = ""

    @property
    def found(self) -> bool:
        return self.rc != NOT_FOUND

    @property
    def text(self) -> str:
        """stdout and stderr together (some tools print their answer on stderr)."""
        return "\n".join(s for s in (self.out, self.err) if s)


class Runner(Protocol):
    def __call__(self, argv: Sequence[str], cwd: Path | None = None) -> CmdResult: ...


def run(argv: Sequence[str], cwd: Path | None = None) -> CmdResult:
    """Run argv without a shell; never raises for a missing tool, a failure or a timeout."""
    if shutil.which(argv[0]) is None:
        return CmdResult(NOT_FOUND, "", f"{argv[0]}: command not found")
    timeout = float(os.environ.get("TSB_SLURM_TOOL_TIMEOUT", DEFAULT_TIMEOUT))
    try:
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CmdResult(TIMED_OUT, "", f"{argv[0]}: no answer after {timeout:g}s")
    except OSError as exc:
        return CmdResult(NOT_FOUND, "", f"{argv[0]}: {exc.strerror}")
    return CmdResult(proc.returncode, proc.stdout, proc.stderr)
