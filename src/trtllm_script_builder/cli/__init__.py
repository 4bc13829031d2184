"""The command line: thin; every command imports what it needs only when it runs."""

from __future__ import annotations

import sys
from typing import Any

import click

from trtllm_script_builder import __version__
from trtllm_script_builder.cli.flags import FieldsCommand
from trtllm_script_builder.errors import BuildError


def fail(err: BuildError) -> None:
    """The refusal's one line on stderr, and its exit status (every command's way out)."""
    click.echo(err.line(), err=True)
    sys.exit(err.exit_code)


def warn(warnings: list[str]) -> None:
    """A build's warnings, one `warning: ...` line each on stderr (decision warnings-to-stderr)."""
    for w in warnings:
        click.echo(f"warning: {w}", err=True)


def say(text: str) -> None:
    """A progress line, on stderr so stdout stays the command's answer; what it quotes of
    other programs and files is shown escaped, never obeyed by the terminal
    (decision shown-never-obeyed)."""
    from trtllm_script_builder.model.values import printable

    click.echo(printable(text, None), err=True)


# Commands that live in their own packages, imported only when asked for: `build` must not pay
# for probe, check, submit or the schemas at start-up.
LAZY_COMMANDS = {
    "build-many": "trtllm_script_builder.cli.build_many",
    "probe": "trtllm_script_builder.cli.probe",
    "check": "trtllm_script_builder.cli.check",
    "submit": "trtllm_script_builder.cli.run",
    "watch": "trtllm_script_builder.cli.run",
    "run": "trtllm_script_builder.cli.run",
    "release": "trtllm_script_builder.cli.run",
    "cancel": "trtllm_script_builder.cli.cancel",
    "report": "trtllm_script_builder.cli.report",
    "schema": "trtllm_script_builder.cli.schema",
    "completion": "trtllm_script_builder.cli.completion",
    "sync": "trtllm_script_builder.cli.sync",
}


# The exit statuses of the commands whose own text does not list them (shown after --help).
EXIT_STATUS = {
    "build": "Exit status: 0 built; 2 the request is invalid or cannot be resolved (one "
    "`error: <field>: ...` line per problem, nothing written); 3 a program the build runs (the "
    "repo's submit.py) failed; 130 interrupted (nothing half-written).",
    "build-many": "Exit status: 0 every entry built; 2 an entry or the shared fields are "
    "invalid (a line per problem; nothing written when no job was built); 130 interrupted.",
    "report": "Exit status: 0 the page was written; 2 DIR holds no verdict.json, jobs.json "
    "or job_spec.json, or one of them cannot be read.",
    "schema": "Exit status: 0 the schema was printed; 2 an unknown name.",
    "completion": "Exit status: 0 the script was printed; 2 an unknown shell.",
}


def _workflow_hint(message: str) -> str:
    """`did you mean X? ` for click's "'pytst' is not one of ..." of --workflow-type."""
    import re

    from trtllm_script_builder.model.request import nearest_workflow
    from trtllm_script_builder.workflows import WORKFLOWS

    assert WORKFLOWS.names()  # the import registers the workflows it looks among

    given = re.match(r"'(.*)' is not one of ", message)
    near = nearest_workflow(given.group(1)) if given else None
    return f"did you mean {near}? " if near else ""


def _switch_given_a_value(
    group: click.Group, exc: click.UsageError, message: str, argv: list[str]
) -> str | None:
    """The error line for `--skip-install yes` or `--compile=true`: a switch takes no value,
    and click's own words name no field ("unexpected extra argument")."""
    import re

    command = exc.ctx.command if exc.ctx else None
    if (command is None or isinstance(command, click.Group)) and argv:
        # `--x=value` fails before the subcommand has a context: find it by its name.
        command = group.get_command(click.Context(group), argv[0])
    if command is None:
        return None
    value = None
    if m := re.fullmatch(r"Got unexpected extra arguments? \((.+)\)", message):
        first = m.group(1).split()[0]
        at = [i for i, a in enumerate(argv) if a == first]
        flag = argv[at[0] - 1] if at and at[0] > 0 else ""
        value = first
    elif m := re.fullmatch(r"Option '(--[\w-]+)' does not take a value", message):
        flag = m.group(1)
        value = next((a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")), "")
    else:
        return None
    for param in command.params:
        if isinstance(param, click.Option) and param.is_flag and flag in param.opts:
            off = f" or {param.secondary_opts[0]} for false" if param.secondary_opts else ""
            return BuildError(
                param.name or flag,
                f"is a switch and takes no value (got {value!r})",
                f"pass {flag} alone for true{off}",
            ).line()
    return None


def _choice_hint(param: Any, message: str) -> str:
    """`did you mean X? ` for a value of a fixed list that is near X, one of them."""
    import re
    from difflib import get_close_matches

    choices = [str(c) for c in getattr(getattr(param, "type", None), "choices", None) or ()]
    given = re.match(r"'(.*)' is not one of ", message)
    if not choices or not given:
        return ""
    text = given.group(1).strip().lower().replace("-", "_")
    lowered = {c.lower().replace("-", "_"): c for c in choices}
    near = get_close_matches(text, list(lowered), n=1, cutoff=0.6)
    return f"did you mean {lowered[near[0]]}? " if near else ""


class LazyGroup(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Usage errors get the tool's one-line form (`error: <field>: ...; <fix>`), exit 2."""
        from trtllm_script_builder.atomic import signals_to_exceptions

        kwargs["standalone_mode"] = False
        # The one place signals become exceptions: every command's cleanups run on Ctrl-C,
        # SIGTERM and SIGHUP, and a kill still ends the process by its signal
        # (decision atomic-job-set).
        with signals_to_exceptions():
            return self._main(*args, **kwargs)

    def _main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Exit as done:
            sys.exit(done.exit_code)
        except click.UsageError as exc:
            param = getattr(exc, "param", None)
            field = param.name if param is not None and param.name else "command line"
            where = exc.ctx.command_path if exc.ctx else "trtllm-script-builder"
            # A bad value: the field is named already, click's own "Invalid value for" is not needed.
            bad_value = isinstance(exc, click.BadParameter) and not isinstance(
                exc, click.MissingParameter
            )
            text = exc.message if bad_value else exc.format_message()
            # One line whatever click wrote (a missing choice lists the choices on lines).
            message = " ".join(text.split()).rstrip(".")
            hint = (
                _workflow_hint(message)
                if field == "workflow_type"
                else _choice_hint(param, message)
            )
            argv = list(kwargs.get("args") or (args[0] if args else sys.argv[1:]))
            switch = _switch_given_a_value(self, exc, message, argv)
            if switch:
                click.echo(switch, err=True)
                sys.exit(2)
            click.echo(f"error: {field}: {message}; {hint}see {where} --help", err=True)
            sys.exit(2)
        except click.Abort as exc:
            if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
                click.echo("error: interrupted", err=True)
                sys.exit(130)  # as a shell reports a SIGINT
            click.echo("error: aborted", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands or name not in LAZY_COMMANDS:
            return super().get_command(ctx, name)
        from importlib import import_module

        # Their requests, job specs, verdicts and schemas name workflows and scenarios:
        # registered first.
        import_module("trtllm_script_builder.workflows")
        import_module("trtllm_script_builder.backends")
        module = import_module(LAZY_COMMANDS[name])
        found = [c for c in getattr(module, "commands", []) if c.name == name]
        if found and name in EXIT_STATUS:
            found[0].epilog = EXIT_STATUS[name]
        return found[0] if found else None


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="trtllm-script-builder")
def main() -> None:
    """Turn a TensorRT-LLM command and a place to run it into a correct script and job_spec.json.

    \b
    Example:
      trtllm-script-builder build examples/requests/pytest_local_slurm.yaml

    Exit status: 0 done, 2 the input is wrong (a line per problem), 3 a program the tool runs
    failed, 130 interrupted; watch and run exit with the verdict's status (see watch --help).
    """


@main.command(cls=FieldsCommand, epilog=EXIT_STATUS["build"])
@click.argument("request", required=False, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="print job_spec.json instead of the report")
@click.option("--dry-run", is_flag=True, help="write nothing; print what would be written")
@click.option(
    "--force", is_flag=True, help="build into a work_dir that holds another or a submitted job"
)
def build(request: str | None, as_json: bool, dry_run: bool, force: bool, **fields: Any) -> None:
    """Build the script for REQUEST (a JSON/YAML file, or - for either on stdin) into work_dir.

    Every request field can also be given as a flag; a flag wins over the file, and an empty
    one (--test-cmd "") clears the file's value.

    \b
    Example:
      trtllm-script-builder build req.yaml --partition gpu --account tsb --json
      echo '{"execution_scenario": "local_docker", ...}' | trtllm-script-builder build -
    """
    from trtllm_script_builder.build import build as run_build
    from trtllm_script_builder.build import finish, problems_of, work_dir_parent_warnings
    from trtllm_script_builder.cli.prompt import offer_to_save, prompter_for
    from trtllm_script_builder.model.request import request_from_cli
    from trtllm_script_builder.model.site_config import load_site_config

    try:
        req = request_from_cli(request, fields, problems_of)
        made = work_dir_parent_warnings(req.work_dir, req.repo_root)
        prompter = prompter_for(request)
        result = run_build(req, load_site_config(), prompter)
        written = [] if dry_run else finish(result, force)
    except BuildError as err:
        fail(err)
        return
    warn([*made, *result.spec.warnings])
    if as_json:
        click.echo(result.spec.to_json(), nl=False)
    elif dry_run:
        if result.submit:
            import shlex
            import sys

            click.echo(
                f"==> would run: {sys.executable} {result.submit.repo_root}/jenkins/scripts/perf/local/submit.py {shlex.join(result.submit.args)}"
            )
            for f in result.submit.before:
                click.echo(f"==> {result.work_dir / f.name} (not written)")
                click.echo(f.text, nl=False)
        for f in result.files:
            click.echo(f"==> {result.work_dir / f.name} (not written)")
            click.echo(f.text, nl=False)
    else:
        from trtllm_script_builder.output.report import print_report

        # Category 4 writes more than its result's files: submit.py's inputs and launch script.
        extra = [x.rsplit("/", 1)[-1] for x in result.spec.extra_files]
        names = list(dict.fromkeys([p.name for p in written] + extra))
        print_report(result.spec, names, result.work_dir)
    if not dry_run:  # a dry run writes nothing, the site config neither
        offer_to_save(prompter)
