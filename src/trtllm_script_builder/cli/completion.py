"""`trtllm-script-builder completion bash|zsh`: the shell completion script, from click."""

from __future__ import annotations

import click

PROG_NAME = "trtllm-script-builder"
# What click derives from the program name; the script calls the program back with it set.
COMPLETE_VAR = "_TRTLLM_SCRIPT_BUILDER_COMPLETE"
SHELLS = ("bash", "zsh")


def completion_source(shell: str, cli: click.Command) -> str:
    """The completion script for `shell` (what `_TRTLLM_SCRIPT_BUILDER_COMPLETE=<shell>_source`
    prints when the program is run with it)."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - click ships bash and zsh
        raise click.UsageError(f"click has no completion for {shell}")
    text = cls(cli, {}, PROG_NAME, COMPLETE_VAR).source()
    return text if text.endswith("\n") else text + "\n"


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion_command(shell: str) -> None:
    """Print the completion script for SHELL (bash or zsh): commands, options and choices.

    Load it from your shell's start-up file; it asks the program itself what to offer, so it
    stays right after an upgrade.

    \b
    Example:
      eval "$(trtllm-script-builder completion bash)"   # in ~/.bashrc
      eval "$(trtllm-script-builder completion zsh)"    # in ~/.zshrc, after compinit
    """
    root = click.get_current_context().find_root().command
    click.echo(completion_source(shell, root), nl=False)


commands = [completion_command]
