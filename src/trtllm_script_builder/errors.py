"""The one error type every refusal goes through, so the CLI can print one line and exit 2."""

from __future__ import annotations

EXIT_INVALID = 2
EXIT_TOOL_FAILED = 3


class BuildError(Exception):
    """A request that cannot be honoured: names the field, what is wrong and what to do."""

    exit_code = EXIT_INVALID

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(self.line())

    def line(self) -> str:
        return f"error: {self.field}: {self.problem}; {self.fix}"


class ToolFailed(BuildError):
    """A program the build runs (the repo's submit.py) failed; its own text is in `problem`."""

    exit_code = EXIT_TOOL_FAILED
