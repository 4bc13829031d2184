"""build-many: a job per test id (or per GPU count), an index `jobs.json`, and a summary.

Entries are built and written one at a time, so memory stays flat in the number of jobs;
an entry that cannot be built is reported with its line number and the others go on.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import click

from .errors import BuildError
from .flags import field_options

_TIMEOUT = re.compile(r"\s+TIMEOUT\s*\((\d+)\)\s*$")


@dataclass
class Entry:
    line: int
    text: str  # the id as written (test lists) or a short description (YAML)
    fields: dict[str, Any]  # request fields this entry sets over the base
    name: str  # the job's folder under the base work_dir
    selection: str = ""  # test lists: the id, without its TIMEOUT
    timeout: int | None = None  # test lists: pytest's --timeout, seconds


@dataclass
class Bad:
    line: int
    text: str
    error: BuildError


def _test_entry(lineno: int, raw: str) -> Entry | Bad:
    from .resolve.pytest_sizing import _selection, model_name_for

    text = raw.strip()
    m = _TIMEOUT.search(text)
    selection = text[: m.start()] if m else text
    try:
        words = (
            shlex.split(selection) if set("'\"\\").intersection(selection) else selection.split()
        )
    except ValueError as exc:
        return Bad(
            lineno,
            text,
            BuildError("test_cmd", f"cannot be split into words ({exc})", "fix the line's quotes"),
        )
    first = words[0] if words else ""
    if ".py" not in first and "::" not in first and "/" not in first:
        return Bad(
            lineno,
            text,
            BuildError(
                "test_cmd",
                f"{first!r} is not a pytest id (path[::Class]::test[params])",
                "write one test id per line",
            ),
        )
    if first.count("[") != first.count("]"):
        return Bad(
            lineno,
            text,
            BuildError("test_cmd", f"{first!r} has unbalanced brackets", "fix the test id"),
        )
    timeout = int(m.group(1)) * 60 if m else None
    cmd = "pytest -v " + selection + (f" --timeout={timeout}" if timeout else "")
    name = f"{lineno:05d}_{model_name_for(_selection(first))}"
    return Entry(lineno, text, {"test_cmd": cmd}, name, selection, timeout)


def read_entries(path: Path) -> Iterator[Entry | Bad]:
    """Test-list lines, or the items of a YAML list of requests (each with its line number)."""
    if path.suffix in (".yaml", ".yml"):
        yield from _yaml_entries(path)
        return
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, raw in enumerate(fh, 1):
            s = raw.strip()
            if s and not s.startswith("#"):
                yield _test_entry(lineno, s)


def _yaml_entries(path: Path) -> Iterator[Entry | Bad]:
    import yaml

    try:
        root = yaml.compose(path.read_text())
    except yaml.YAMLError as exc:
        raise BuildError(
            "LIST", f"{path} is not YAML ({str(exc).splitlines()[0]})", "fix its syntax"
        ) from None
    if not isinstance(root, yaml.SequenceNode):
        raise BuildError(
            "LIST", f"{path} is not a YAML list of requests", "write a list of request mappings"
        )
    for i, node in enumerate(root.value, 1):
        line = node.start_mark.line + 1
        item = yaml.safe_load(yaml.serialize(node))
        if not isinstance(item, dict):
            yield Bad(
                line,
                str(item),
                BuildError("request", "is not a mapping of fields", "write field: value pairs"),
            )
            continue
        label = str(
            item.get("test_cmd")
            or item.get("eval_cmd")
            or item.get("bench_cmd")
            or item.get("custom_cmd")
            or f"item {i}"
        )
        yield Entry(line, label, item, f"{i:05d}_{item.get('workflow_type') or 'job'}")


def group_by_devices(entries: Iterator[Entry | Bad], repo_root: str) -> Iterator[Entry | Bad]:
    """One entry per GPU count, running all its tests in one pytest call."""
    from .resolve.pytest_sizing import size_pytest

    groups: dict[int, list[Entry]] = {}
    for e in entries:
        if isinstance(e, Bad):
            yield e
            continue
        if not e.selection:
            yield Bad(
                e.line,
                e.text,
                BuildError(
                    "LIST", "--group-by devices takes a test list, not requests", "drop --group-by"
                ),
            )
            continue
        try:
            devices = size_pytest(e.fields["test_cmd"], Path(repo_root)).devices or 1
        except BuildError as err:
            yield Bad(e.line, e.text, err)
            continue
        groups.setdefault(devices, []).append(e)
    for devices, members in sorted(groups.items()):
        cmd = "pytest -v " + " ".join(m.selection for m in members)
        # pytest-timeout applies --timeout to each test: the group needs its longest.
        timeout = max((m.timeout for m in members if m.timeout), default=None)
        if timeout:
            cmd += f" --timeout={timeout}"
        yield Entry(
            members[0].line,
            f"{len(members)} tests",
            {"test_cmd": cmd, "model_name": f"gpus{devices}"},
            f"gpus{devices}",
        )


def build_many(
    list_path: Path,
    base: dict[str, Any],
    base_dir: Path,
    flags: dict[str, Any],
    group_by: str | None,
    out: TextIO,
    err: TextIO,
) -> int:
    from .build import build, finish
    from .request import load_request
    from .site_config import load_site_config

    site = load_site_config()
    # A flag's relative path is taken from the current folder, the base file's from its folder.
    if flags.get("work_dir"):
        root = Path(os.path.normpath(os.path.join(Path.cwd(), flags["work_dir"])))
    elif base.get("work_dir"):
        root = Path(os.path.normpath(os.path.join(base_dir, base["work_dir"])))
    else:
        raise BuildError(
            "work_dir",
            "is required: it is the folder under which each job gets its own",
            "pass --work-dir",
        )
    entries = read_entries(list_path)
    if group_by == "devices":
        repo = load_request(
            base, base_dir, {**flags, "work_dir": str(root), "test_cmd": "pytest"}
        ).repo_root
        entries = group_by_devices(entries, repo)
    try:
        base_req = load_request(base, base_dir, {**flags, "work_dir": str(root)})
    except BuildError:
        base_req = None  # each entry then reports what is missing, with its line
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".jobs.", suffix=".json", dir=root)
    ok = failed = warned = 0
    devices: Counter[int] = Counter()
    with os.fdopen(fd, "w", encoding="utf-8") as index:
        index.write("[")
        for e in entries:
            row: dict[str, Any] = {"line": e.line, "entry": e.text}
            if isinstance(e, Entry):
                try:
                    own = e.fields.get("work_dir")
                    job_dir = str(list_path.parent / own if own else root / e.name)
                    if base_req is not None and set(e.fields) <= {"test_cmd", "model_name"}:
                        # Test-list entries only set strings on an already validated base.
                        req = base_req.model_copy(update={**e.fields, "work_dir": job_dir})
                    else:
                        req = load_request(
                            base, base_dir, {**flags, **e.fields, "work_dir": job_dir}
                        )
                    result = build(req, site)
                    finish(result)
                    s = result.spec
                    row.update(
                        work_dir=s.work_dir,
                        script_path=s.script_path,
                        category=s.category,
                        required_devices=s.required_devices,
                        node_count=s.node_count,
                        status="built",
                    )
                    if s.warnings:
                        row["warnings"] = s.warnings
                        warned += 1
                    devices[s.required_devices] += 1
                    ok += 1
                except BuildError as error:
                    e = Bad(e.line, e.text, error)
            if isinstance(e, Bad):
                row.update(status="error", error=e.error.line())
                err.write(f"{list_path}:{e.line}: {e.error.line()}\n")
                failed += 1
            index.write(("\n  " if ok + failed == 1 else ",\n  ") + json.dumps(row))
        index.write("\n]\n")
    os.replace(tmp, root / "jobs.json")
    out.write(summary(ok, failed, warned, devices, root))
    return 0 if failed == 0 else 2


def summary(ok: int, failed: int, warned: int, devices: Counter[int], root: Path) -> str:
    lines = [f"{'GPUs':>6}  {'jobs':>6}"]
    lines += [f"{d:>6}  {n:>6}" for d, n in sorted(devices.items())]
    # A job sized without its test file (a warning) is built, but its GPU count is a guess.
    note = f", {warned} with warnings" if warned else ""
    lines.append(f"built {ok} job(s){note}, {failed} failed; index: {root / 'jobs.json'}")
    return "\n".join(lines) + "\n"


@click.command("build-many")
@click.argument(
    "test_list", metavar="LIST", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--base", "base_file", default=None, help="a request file with the fields every job shares"
)
@click.option(
    "--group-by",
    type=click.Choice(["devices"]),
    default=None,
    help="one job per GPU count, its tests in one pytest call",
)
@field_options
def build_many_command(
    test_list: Path, base_file: str | None, group_by: str | None, **fields: Any
) -> None:
    """Build one job per entry of LIST into its own folder under work_dir.

    LIST is a test list (one pytest id per line, relative to tests/integration/defs, an optional
    ` TIMEOUT (N)` in minutes, `#` comments) or a YAML list of requests. The shared fields come
    from --base and the field flags. Writes `jobs.json` (every job with its sizing) and prints a
    summary; exit 0 when every entry was built, 2 otherwise.

    \b
    Example:
      trtllm-script-builder build-many tests/integration/test_lists/qa/llm_function_sanity.txt \\
        --base examples/requests/pytest_local_slurm.yaml --work-dir /tmp/sanity
    """
    from .request import parse_flag_values, read_request_file

    try:
        fields = parse_flag_values(fields)
        base, base_dir = read_request_file(base_file) if base_file else ({}, Path.cwd())
        base.pop("test_cmd", None)
        code = build_many(test_list, base, base_dir, fields, group_by, sys.stdout, sys.stderr)
    except BuildError as error:
        click.echo(error.line(), err=True)
        sys.exit(error.exit_code)
    sys.exit(code)


commands = [build_many_command]
