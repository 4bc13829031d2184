"""Asking for a value the request left out, for `build` and `run` alike.

A person at a terminal is asked; without one (or when the request itself comes on standard
input) the build refuses the field instead. An answer that is only whitespace is asked again,
and end of input at the prompt is refused like a missing terminal, so a script feeding stdin
gets the field's one-line refusal and exit 2 rather than click's bare "Aborted!".
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

Ask = Callable[[str, str], str]  # (field, question) -> answer

# Enough for a slipped Enter; a prompt that keeps getting nothing is not being answered.
ATTEMPTS = 3


def stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


def prompter_for(request: str | None) -> Ask | None:
    """The prompter when a person can answer: stdin is a terminal and does not hold REQUEST."""
    return ask if request != "-" and stdin_is_terminal() else None


def _refuse(field: str, question: str) -> str:
    from trtllm_script_builder.build import refuse_ask

    return refuse_ask(field, question)


def ask(field: str, question: str) -> str:
    for attempt in range(ATTEMPTS):
        try:
            # default="" makes an empty answer come back to us to count, instead of click
            # asking again for ever.
            answer: str = click.prompt(
                f"{question} [{field}]", default="", show_default=False, err=True
            )
        except click.Abort as exc:
            # click raises Abort "from None": the EOFError is the context, not the cause.
            # Ctrl-C (KeyboardInterrupt) stays an abort, which the CLI reports as interrupted.
            if isinstance(exc.__context__, EOFError):
                click.echo(err=True)  # end the prompt's line, so the refusal stands on its own
                return _refuse(field, question)
            raise
        if answer.strip():
            return answer.strip()
        if attempt + 1 < ATTEMPTS:
            click.echo(f"{field} needs a value (Ctrl-D to stop)", err=True)
    return _refuse(field, question)
