"""Asking for a value the request left out, for `build` and `run` alike.

A person at a terminal is asked; without one (or when the request itself comes on standard
input) the build refuses the field instead. An answer that is only whitespace is asked again,
and so is one the field cannot take, with the reason on one line; end of input at the prompt
is refused like a missing terminal, so a script feeding stdin gets the field's one-line
refusal and exit 2 rather than click's bare "Aborted!". Earlier answers are kept.

When the build is done and values were typed, the site-wide ones can be saved into the site
config (decision saved-site-answers), so the next build does not ask again.
"""

from __future__ import annotations

import sys

import click

from trtllm_script_builder.errors import BuildError

# Enough for a slipped Enter or two typos; a prompt that keeps getting nothing is not being
# answered.
ATTEMPTS = 3


def stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


def _refuse(field: str, question: str) -> str:
    from trtllm_script_builder.build import refuse_ask

    return refuse_ask(field, question)


def _check_answer(field: str, answer: str) -> None:
    """Raise the field's BuildError for an answer it cannot take (the build would refuse it)."""
    from trtllm_script_builder.resolve.mounts import check_mount_path

    if field in ("llm_models_root", "models_path"):
        check_mount_path(answer, field)


class Prompter:
    """The asker for a person at a terminal; it remembers what was typed (`answers`)."""

    def __init__(self) -> None:
        self.answers: dict[str, str] = {}

    def __call__(self, field: str, question: str) -> str:
        bad: BuildError | None = None
        for attempt in range(ATTEMPTS):
            try:
                # default="" makes an empty answer come back to us to count, instead of click
                # asking again for ever.
                answer: str = click.prompt(
                    f"{question} [{field}]", default="", show_default=False, err=True
                )
            except click.Abort as exc:
                # click raises Abort "from None": the EOFError is the context, not the cause.
                # Ctrl-C (KeyboardInterrupt) stays an abort, which the CLI reports as
                # interrupted.
                if isinstance(exc.__context__, EOFError):
                    click.echo(err=True)  # end the prompt's line: the refusal stands alone
                    return _refuse(field, question)
                raise
            answer = answer.strip()
            last = attempt + 1 == ATTEMPTS
            if not answer:
                bad = None
                if not last:
                    click.echo(f"{field} needs a value (Ctrl-D to stop)", err=True)
                continue
            try:
                _check_answer(field, answer)
            except BuildError as err:
                bad = err
                if not last:
                    click.echo(f"{err.field}: {err.problem}; {err.fix}", err=True)
                continue
            self.answers[field] = answer
            return answer
        if bad is not None:
            raise bad
        return _refuse(field, question)


def prompter_for(request: str | None) -> Prompter | None:
    """The prompter when a person can answer: stdin is a terminal and does not hold REQUEST."""
    return Prompter() if request != "-" and stdin_is_terminal() else None


def offer_to_save(prompter: Prompter | None) -> None:
    """After a build that asked: offer to save the site-wide answers into the site config
    (merged with what is there, written whole). Ctrl-D or anything but yes declines."""
    from trtllm_script_builder.model.site_config import SITE_WIDE

    if prompter is None:
        return
    values = {SITE_WIDE[f]: v for f, v in prompter.answers.items() if f in SITE_WIDE}
    if not values:
        return
    from trtllm_script_builder.model.site_config import merged_site_config, site_config_path

    try:
        path = site_config_path()
    except BuildError:
        return  # the build read the config already; it cannot be wrong here
    shown = ", ".join(f"{k}: {v}" for k, v in values.items())
    try:
        yes = click.confirm(f"Save {shown} to {path}?", default=False, err=True)
    except click.Abort as exc:
        if isinstance(exc.__context__, EOFError):
            click.echo(err=True)
            return
        raise
    if not yes:
        return
    from trtllm_script_builder.atomic import write_file

    try:
        existing = path.read_text() if path.exists() else ""
        text = merged_site_config(existing, values, path)
        write_file(path, text)
    except (OSError, UnicodeDecodeError, BuildError) as exc:
        why = exc.line() if isinstance(exc, BuildError) else str(exc)
        click.echo(f"warning: the site config was not saved: {why}", err=True)
        return
    click.echo(f"saved to {path}", err=True)
