"""The one error type every refusal goes through, so the CLI can print one line and exit 2."""

from __future__ import annotations

import re

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
        """One line, whatever the parts hold: a control character from a value or an OS
        message is escaped, and a problem longer than a screen keeps its start and end."""
        problem = _one_line(self.problem)
        if len(problem) > _LONGEST:
            left_out = len(problem) - 900
            problem = f"{problem[:600]}... ({left_out} characters left out) ...{problem[-300:]}"
        return f"error: {_one_line(self.field)}: {problem}; {_one_line(self.fix)}"


class BuildErrors(BuildError):
    """Every problem of one request at once: a line each, in the request's field order."""

    def __init__(self, errors: list[BuildError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(first.field, first.problem, first.fix)

    def line(self) -> str:
        return "\n".join(e.line() for e in self.errors)


def refusal(errors: list[BuildError]) -> BuildError:
    """One error as itself, more as one BuildErrors (the caller has at least one)."""
    return errors[0] if len(errors) == 1 else BuildErrors(errors)


_LONGEST = 1000
# Control characters, line separators, lone surrogates, and the bidirectional and zero-width
# format characters, as values.printable escapes them (decision shown-never-obeyed).
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]"
)


def _one_line(text: str) -> str:
    return _CONTROL.sub(lambda m: ascii(m.group(0))[1:-1], text)


class ToolFailed(BuildError):
    """A program the build runs (the repo's submit.py) failed; its own text is in `problem`."""

    exit_code = EXIT_TOOL_FAILED
