"""build-many: a job per test id (or per GPU count), an index `jobs.json`, and a summary.

The list is a test list, a TensorRT-LLM test-db YAML file, or a YAML list of requests.
Entries are built and written one at a time, so memory stays flat in the number of jobs;
an entry that cannot be built is reported with its line number and the others go on.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO

from trtllm_script_builder.atomic import open_regular, sweep
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.values import printable, text_problem
from trtllm_script_builder.resolve.backend import over_ssh, queued
from trtllm_script_builder.resolve.commands import normalise_name
from trtllm_script_builder.resolve.workflow import workflows
from trtllm_script_builder.workflows.pytest import PYTEST, test_job_name

# A `#` at the start or after a space starts a comment, as in TensorRT-LLM's own lists
# (`...::test_x[pp2] # 2 mins`, `... TIMEOUT (90) # failed`).
_COMMENT = re.compile(r"(?:^|\s)#.*$", re.S)
# Words a test list may hold unquoted; anything else is quoted, for the job runs `bash -c`.
_PLAIN = re.compile(r"[\w@%+=:,./\[\]-]+")
# Linux refuses an environment string over 128 KiB; a group's TEST_CMD stays well below.
_GROUP_CMD_MAX = 60_000
_NAME_MAX = 80
# A test's TIMEOUT (N), in minutes: a day is more than any test of TensorRT-LLM's lists asks;
# a larger N is a typo, and would make a Slurm time limit no partition accepts
# (decision batch-names-timeout).
MAX_TIMEOUT_MINUTES = 1440
# Half an hour for the install step and start-up, on top of a test's TIMEOUT
# (decision batch-names-timeout).
INSTALL_SECONDS = 1800
# What CI's test_unittests_v2[<line>] runs a `unittest/...` line with, from tests/
# (decision test-db-lines).
UNITTEST_CMD = (
    "pytest -v --timeout=1600 --timeout-method=thread --test-prefix=unittest -p no:xdist "
    "--ignore=integration"
)
# A test-list line's markers, as CI's parser reads them (decision test-db-lines).
_MARKER = re.compile(r"\s(XFAIL|SKIP|UNSTABLE)\b\s*(?:\((.*?)\))?.*$")
_FULL = re.compile(r"^full:[^/\s]*/")


@dataclass
class Entry:
    line: int
    text: str  # the id as written (test lists) or a short description (YAML)
    fields: dict[str, Any]  # request fields this entry sets over the base
    name: str  # the job's folder under the base work_dir
    words: tuple[str, ...] = ()  # test lists: the id and its options, without TIMEOUT
    timeout: int | None = None  # test lists: pytest's --timeout, seconds
    lines: tuple[int, ...] = ()  # a group: the lines of its tests
    unit: bool = False  # a `unittest/...` line, run as CI's test_unittests_v2 runs it
    isolated: bool = False  # ISOLATION: CI runs it alone


@dataclass
class Bad:
    line: int
    text: str
    error: BuildError


def _words(words: tuple[str, ...]) -> str:
    return " ".join(w if _PLAIN.fullmatch(w) else shlex.quote(w) for w in words)


def _test_entry(lineno: int, raw: str, devices: int | None = None) -> Entry | Bad | None:
    """One line of a test list: None for a comment or a blank, Bad when it cannot be a job;
    `devices`: the GPUs of its test-db block."""
    text = _COMMENT.sub("", raw).strip()
    if not text:
        return None
    try:
        entry = _test_line(lineno, text)
    except BuildError as err:
        return Bad(lineno, text, err)
    if devices:
        entry.fields["required_devices"] = devices
    return entry


def _markers(text: str) -> tuple[str, bool]:
    """The line without CI's markers but TIMEOUT, and whether it asks for ISOLATION
    (decision test-db-lines)."""
    isolated = "ISOLATION" in text
    if isolated:  # as L0_Test.groovy removes it: with the comma beside another marker
        for form in ("ISOLATION,", ",ISOLATION", " ISOLATION"):
            if form in text:
                text = text.replace(form, "").strip()
                break
    marker = _MARKER.search(text)
    if marker and marker.group(1) == "SKIP":
        why = f" ({marker.group(2)})" if marker.group(2) else ""
        raise BuildError(
            "test_cmd",
            f"is marked SKIP{why}, so CI does not run it",
            "remove the marker to build it",
        )
    if marker:  # XFAIL, UNSTABLE: CI runs the test and judges its result
        text = text[: marker.start()].rstrip()
    return _FULL.sub("", text), isolated


def _test_line(lineno: int, text: str) -> Entry:
    from trtllm_script_builder.resolve.perf.testid import strip_timeout

    if text_problem(text, lines=True):  # model/values.py; a tab separates words here
        raise BuildError("test_cmd", "holds a control character", "remove it from the line")
    text, isolated = _markers(text)
    try:
        selection, minutes = strip_timeout(text)
    except ValueError:  # more digits than Python turns into an int: over the maximum
        selection, minutes = text, MAX_TIMEOUT_MINUTES + 1
    if minutes == 0:
        raise BuildError(
            "test_cmd", "TIMEOUT (0) gives the test no time", "give it in minutes, at least 1"
        )
    if minutes is not None and minutes > MAX_TIMEOUT_MINUTES:
        digits = text.rsplit("(", 1)[-1].rstrip(") \t")
        shown = digits if len(digits) <= 24 else f"{digits[:20]}... ({len(digits)} digits)"
        raise BuildError(
            "test_cmd",
            f"TIMEOUT ({shown}) is over the maximum of {MAX_TIMEOUT_MINUTES} minutes (a day)",
            f"give the test's timeout in minutes, at most {MAX_TIMEOUT_MINUTES}",
        )
    if "timeout" in selection.lower().split():
        raise BuildError(
            "test_cmd",
            "has a TIMEOUT that is not a trailing TIMEOUT (N) in minutes",
            "end the line with it, as in `path::test TIMEOUT (90)`",
        )
    try:
        quoted = set("'\"\\").intersection(selection)
        words = tuple(shlex.split(selection) if quoted else selection.split())
    except ValueError as exc:
        raise BuildError(
            "test_cmd", f"cannot be split into words ({exc})", "fix the line's quotes"
        ) from None
    first = words[0] if words else ""
    if ".py" not in first and "::" not in first and "/" not in first:
        raise BuildError(
            "test_cmd",
            f"{first!r} is not a pytest id (path[::Class]::test[params])",
            "write one test id per line",
        )
    if first.count("[") != first.count("]"):
        raise BuildError("test_cmd", f"{first!r} has unbalanced brackets", "fix the test id")
    timeout = minutes * 60 if minutes else None
    unit = first.startswith("unittest/")
    cmd = f"{UNITTEST_CMD if unit else 'pytest -v'} {_words(words)}"
    if timeout and not unit:  # a unit line's TIMEOUT bounds its whole run: the time limit
        cmd += f" --timeout={timeout}"
    name = test_job_name(first)
    if unit and len(words) > 1:  # `-m "gpu2 and part0"` tells apart lines of one file
        name = f"{name}_{normalise_name(' '.join(w for w in words[1:] if w[:1] != '-'))}"[:80]
    return Entry(
        lineno, text, {"test_cmd": cmd}, name, words, timeout, unit=unit, isolated=isolated
    )


def request_job_name(item: dict[str, Any]) -> str:
    """A request item's folder name: its model_name, else the name its command gives."""

    def safe(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")[:_NAME_MAX]

    given = item.get("model_name")
    if isinstance(given, str) and safe(given):
        return safe(given)
    name: str | None = None
    try:  # the first workflow whose command the item holds names it
        names = (wf.job_name(item) for wf in workflows())
        name = next((n for n in names if n is not None), None)
    except (BuildError, ValueError):
        name = None  # the build names what is wrong with the command
    workflow = item.get("workflow_type")
    return safe(name or "") or (safe(workflow) if isinstance(workflow, str) else "") or "job"


class Names:
    """The folder names given so far: `name`, or `name_2`, `name_3`, ... when an earlier
    entry has it, so the same list gives the same folders every time."""

    def __init__(self) -> None:
        self.taken: set[str] = set()
        self.last: dict[str, int] = {}  # a name -> the last suffix it got (no rescans)

    def unique(self, name: str) -> str:
        found, n = name, self.last.get(name, 1)
        if n > 1:
            found = f"{name}_{n}"
        while found in self.taken:
            n += 1
            found = f"{name}_{n}"
        self.last[name] = n
        self.taken.add(found)
        return found


@dataclass(frozen=True)
class Target:
    """The machine a test-db file's blocks are chosen for: its GPU's name and count."""

    gpu: str | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        if self.gpu is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", self.gpu):
            raise BuildError(
                "--gpu-type", f"{self.gpu!r} is not a GPU name", "give one such as h100 or gb200"
            )

    def takes(self, cond: Any) -> bool:
        from fnmatch import fnmatch

        wild = cond.get("wildcards") if isinstance(cond, dict) else None
        gpus = wild.get("gpu") if isinstance(wild, dict) else None
        patterns = [str(w).lower() for w in (gpus if isinstance(gpus, list) else [gpus])]
        if self.gpu and gpus and not any(fnmatch(self.gpu.lower(), w) for w in patterns):
            return False
        low, high = _gpu_range(cond)
        return self.count is None or (low or 0) <= self.count <= (high or self.count)


def _gpu_range(cond: Any) -> tuple[int | None, int | None]:
    """A block condition's `ranges.system_gpu_count` bounds (`gte`, `lte`)."""
    ranges = cond.get("ranges") if isinstance(cond, dict) else None
    count = ranges.get("system_gpu_count") if isinstance(ranges, dict) else None
    if not isinstance(count, dict):
        return None, None
    low, high = count.get("gte"), count.get("lte")
    ok = [
        v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None for v in (low, high)
    ]
    return ok[0], ok[1]


def read_entries(path: Path, target: Target | None = None) -> Iterable[Entry | Bad]:
    """Test-list lines, streamed; or, read at once, a YAML list of requests or a test-db file
    (the blocks `target` takes)."""
    if path.suffix in (".yaml", ".yml"):
        return _yaml_entries(path, target or Target())
    return _list_entries(path)


# A YAML list is read whole: 64 MiB holds tens of thousands of requests.
MAX_YAML_LIST = 64 << 20
# A test-list line longer than this is no test id: it is refused without being read whole.
MAX_LIST_LINE = 1 << 20


def _open_list(path: Path) -> IO[bytes]:
    """The list opened for reading when it is a regular file: a named pipe would block
    build-many for ever and /dev/zero fill its memory."""
    try:
        return open_regular(path)
    except OSError as exc:
        raise BuildError(
            "LIST", f"cannot read {path} ({exc.strerror})", "give a readable file"
        ) from None
    except ValueError:
        raise BuildError(
            "LIST", f"{path} is not a regular file", "give a test list or YAML file"
        ) from None


def _list_entries(path: Path) -> Iterator[Entry | Bad]:
    with _open_list(path) as fh:
        for lineno, raw in enumerate(iter(lambda: fh.readline(MAX_LIST_LINE + 1), b""), 1):
            if len(raw) > MAX_LIST_LINE and not raw.endswith(b"\n"):
                yield Bad(
                    lineno,
                    printable(raw[:80].decode(errors="replace")),
                    BuildError("test_cmd", f"is longer than {MAX_LIST_LINE} bytes", "split it"),
                )
                return  # the rest of that line is no line of its own
            try:
                text = (raw.removeprefix(codecs.BOM_UTF8) if lineno == 1 else raw).decode()
            except UnicodeDecodeError:
                yield Bad(
                    lineno,
                    raw.decode(errors="replace").strip(),
                    BuildError("test_cmd", "is not UTF-8 text", "save the list as UTF-8"),
                )
                continue
            entry = _test_entry(lineno, text)
            if entry is not None:
                yield entry


def _yaml_entries(path: Path, target: Target) -> list[Entry | Bad]:
    import yaml

    from trtllm_script_builder.model.datafile import compose_yaml, construct_yaml
    from trtllm_script_builder.model.request import absolutise, yaml_loader

    loader = yaml_loader()  # as a request file is read: an unquoted 4:00:00 stays a time
    try:
        with _open_list(path) as fh:
            data = fh.read(MAX_YAML_LIST + 1)
        if len(data) > MAX_YAML_LIST:
            raise BuildError("LIST", f"{path} is larger than {MAX_YAML_LIST} bytes", "split it")
        root = compose_yaml(data.decode("utf-8-sig"), loader)
    except UnicodeDecodeError:
        raise BuildError("LIST", f"{path} is not UTF-8 text", "save it as UTF-8") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise BuildError(
            "LIST", f"{path} is not YAML ({str(exc).splitlines()[0]})", "fix its syntax"
        ) from None
    if isinstance(root, yaml.MappingNode):
        blocks = _test_db_blocks(root, loader)
        kept = [(tests, cond) for tests, cond in blocks if target.takes(cond)]
        if blocks and not kept:
            raise BuildError(
                "LIST",
                f"no block of {path} is for --gpu-type {target.gpu} --gpu-count {target.count}",
                "give a GPU and count one of its block conditions names",
            )
        if blocks:
            # CI runs a block's tests on a machine of its GPU count (decision test-db-lines).
            return [
                e
                for tests, cond in kept
                for node in tests.value
                if isinstance(node, yaml.ScalarNode)
                and (
                    e := _test_entry(node.start_mark.line + 1, str(node.value), _gpu_range(cond)[0])
                )
                is not None
            ]
    if not isinstance(root, yaml.SequenceNode):
        raise BuildError(
            "LIST",
            f"{path} is neither a YAML list of requests nor a test-db file",
            "write a list of request mappings",
        )
    out: list[Entry | Bad] = []
    for i, node in enumerate(root.value, 1):
        line = node.start_mark.line + 1
        try:
            item = construct_yaml(node, loader)
        except (yaml.YAMLError, ValueError) as exc:
            out.append(
                Bad(
                    line,
                    "",
                    BuildError(
                        "request", f"cannot be read ({str(exc).splitlines()[0]})", "fix that entry"
                    ),
                )
            )
            continue
        if not isinstance(item, dict):
            out.append(
                Bad(
                    line,
                    str(item),
                    BuildError("request", "is not a mapping of fields", "write field: value pairs"),
                )
            )
            continue
        # Paths in an item are taken from the list's folder, as a request file's from its own.
        absolutise(item, path.parent)
        label = str(
            item.get("test_cmd")
            or item.get("eval_cmd")
            or item.get("bench_cmd")
            or item.get("custom_cmd")
            or f"item {i}"
        )
        out.append(Entry(line, label, item, request_job_name(item)))
    return out


def _test_db_blocks(root: Any, loader: Any) -> list[tuple[Any, Any]]:
    """The `tests:` lists of a TensorRT-LLM test-db file (`<name>: [{condition, tests}, ...]`),
    each with its block's condition."""
    import yaml

    from trtllm_script_builder.model.datafile import construct_yaml

    found = []
    for _key, value in root.value:
        if isinstance(value, yaml.SequenceNode):
            for block in value.value:
                if isinstance(block, yaml.MappingNode):
                    parts = {k.value: v for k, v in block.value if isinstance(k, yaml.ScalarNode)}
                    tests, cond = parts.get("tests"), parts.get("condition")
                    if isinstance(tests, yaml.SequenceNode):
                        found.append((tests, construct_yaml(cond, loader) if cond else None))
    return found


def group_by_devices(entries: Iterable[Entry | Bad], repo_root: str) -> Iterator[Entry | Bad]:
    """One entry per GPU count, running all its tests in one pytest call.

    Lines with their own options (`-m "gpu2 and part0"`) form their own groups, so an option
    never narrows another line's tests; so do lines of another TIMEOUT, so every test keeps
    the --timeout it has in a job of its own (decision batch-names-timeout); a group too long for
    one environment variable is split in parts.
    """
    from trtllm_script_builder.workflows.pytest_sizing import size_pytest

    groups: dict[tuple[int, tuple[str, ...], int, bool, int], list[Entry]] = {}
    for e in entries:
        if isinstance(e, Bad):
            yield e
            continue
        try:
            found = size_pytest(e.fields["test_cmd"], Path(repo_root)).devices
        except BuildError as err:
            yield Bad(e.line, e.text, err)
            continue
        devices = int(found or e.fields.get("required_devices") or 1)
        # An ISOLATION line runs alone, as CI runs it (decision test-db-lines).
        key = (devices, e.words[1:], e.timeout or 0, e.unit, e.line if e.isolated else 0)
        groups.setdefault(key, []).append(e)
    parts: list[tuple[int, list[Entry]]] = []
    for (devices, *_), members in sorted(groups.items(), key=lambda kv: kv[0][0]):
        chunk: list[Entry] = []
        size = 0
        for m in members:
            width = len(_words(m.words[:1])) + 1  # as it will stand in TEST_CMD
            if chunk and size + width > _GROUP_CMD_MAX:
                parts.append((devices, chunk))
                chunk, size = [], 0
            chunk.append(m)
            size += width
        parts.append((devices, chunk))
    per_count = Counter(devices for devices, _ in parts)
    seen: Counter[int] = Counter()
    for devices, members in parts:
        seen[devices] += 1
        name = f"gpus{devices}" + (f"_{seen[devices]}" if per_count[devices] > 1 else "")
        unit = members[0].unit
        words = _words((*(m.words[0] for m in members), *members[0].words[1:]))
        cmd = f"{UNITTEST_CMD if unit else 'pytest -v'} {words}"
        # pytest-timeout applies --timeout to each test: every member has the same one.
        timeout = members[0].timeout
        if timeout and not unit:
            cmd += f" --timeout={timeout}"
        fields: dict[str, Any] = {"test_cmd": cmd, "model_name": name}
        if "required_devices" in members[0].fields:
            fields["required_devices"] = devices
        yield Entry(
            members[0].line,
            f"{len(members)} tests",
            fields,
            name,
            timeout=timeout,
            lines=tuple(m.line for m in members),
        )


def _time_for(entry: Entry, base_limit: str) -> str | None:
    """A test's TIMEOUT plus half an hour for the install, when the base limit is shorter;
    the same for a job of one test and for a group, whose tests share one TIMEOUT
    (decision batch-names-timeout): pytest then reports a hung test before Slurm ends the job."""
    from trtllm_script_builder.slurm_time import parse_time_minutes, seconds_to_time

    limit = parse_time_minutes(base_limit)
    if entry.timeout is None or limit is None:
        return None
    need = entry.timeout + INSTALL_SECONDS
    return None if need <= limit * 60 else seconds_to_time(need)


def _build_tag(req: Any) -> str:
    """What makes two compiles of a batch one build: the checkout, the image, the options,
    and the architecture as the compile derives it (an H100 and an H200 entry build 90-real
    both)."""
    import hashlib

    from trtllm_script_builder.resolve.compile import cuda_arch_for

    try:
        arch = cuda_arch_for(req)
    except BuildError:
        arch = None  # that entry's build refuses it, naming cuda_arch
    what = (req.repo_root, req.container_image, arch, req.use_ccache, req.benchmarks, req.nvtx,
            req.execution_scenario)  # fmt: skip
    return hashlib.sha256(repr(what).encode()).hexdigest()[:8]


def _root(
    base: dict[str, Any], base_dir: Path, flags: dict[str, Any], force: bool, make: bool = True
) -> tuple[Path, list[str]]:
    from trtllm_script_builder.model.request import refuse_unexpanded

    for given in (flags.get("work_dir"), base.get("work_dir")):
        if isinstance(given, str):
            refuse_unexpanded("work_dir", given)  # `~/jobs` is no folder named `~` (as build)
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
    from trtllm_script_builder.build import work_dir_parent_warnings

    repo = flags.get("repo_root") or base.get("repo_root")
    at = Path.cwd() if flags.get("repo_root") else base_dir
    made = work_dir_parent_warnings(root, os.path.join(at, repo) if isinstance(repo, str) else None)
    try:
        # what a killed run left (decision atomic-job-set) does not make the folder "not empty"
        sweep(root)
        if not force and root.is_dir() and any(root.iterdir()):
            # An earlier run's job folders may hold logs of submitted jobs: never overwrite them.
            raise BuildError(
                "work_dir",
                f"{root} is not empty (an earlier build-many, or other files)",
                "choose a new or empty --work-dir, or pass --force to build over it",
            )
        if make:
            root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(
            "work_dir", f"cannot make {root} ({exc.strerror})", "give a folder you can write to"
        ) from None
    return root, made


def _job_dir(e: Entry, root: Path, used: dict[str, int], names: Names) -> str:
    """The entry's own work_dir (a request's) or its folder under the list's, named after
    its test or model, with a suffix when an earlier entry has the name."""
    own = e.fields.get("work_dir")
    if own is not None and not isinstance(own, str):
        raise BuildError("work_dir", f"must be a path (got {own!r})", "give a folder path")
    if own:
        job_dir = os.path.normpath(own)
    else:
        name = names.unique(e.name)
        while str(root / name) in used:  # an earlier request's own work_dir
            name = names.unique(e.name)
        job_dir = str(root / name)
    if job_dir == str(root):
        raise BuildError(
            "work_dir",
            f"{job_dir} is the folder of the whole list",
            "give the request a folder of its own",
        )
    if job_dir in used:
        raise BuildError(
            "work_dir",
            f"{job_dir} is already the folder of line {used[job_dir]}",
            "give each request its own work_dir",
        )
    return job_dir


def build_many(
    list_path: Path,
    base: dict[str, Any],
    base_dir: Path,
    flags: dict[str, Any],
    group_by: str | None,
    out: TextIO,
    err: TextIO,
    force: bool = False,
    *,
    dry_run: bool = False,
    as_json: bool = False,
    target: Target | None = None,
) -> int:
    """Build every entry; `dry_run` builds each in memory and writes nothing, `as_json` ends
    standard output with one JSON object (the summary and the rows of jobs.json)."""
    from trtllm_script_builder.build import build, finish, problems_of, refuse_foreign_link
    from trtllm_script_builder.model.request import load_request
    from trtllm_script_builder.model.site_config import load_site_config

    site = load_site_config()
    # a YAML list is read here, before anything is written
    entries = read_entries(list_path, target)
    requests = isinstance(entries, list) and any(
        isinstance(e, Entry) and not e.words for e in entries
    )
    if not requests:
        for key in ("eval_cmd", "bench_cmd", "custom_cmd", "custom_script"):
            if base.get(key) or flags.get(key):
                raise BuildError(
                    key,
                    "is set by the base, but a test list builds pytest jobs",
                    "use a base without it",
                )
    if group_by == "devices" and requests:
        raise BuildError(
            "LIST", "--group-by devices takes a test list, not requests", "drop --group-by"
        )
    if not requests:
        # A test list's entries give only their tests: what the shared fields lack is said
        # once, before anything is made, not once per line.
        load_request(base, base_dir, {**flags, "test_cmd": PYTEST.tool})
    root, made = _root(base, base_dir, flags, force, make=False)
    fresh = not root.exists()  # removed again when no job is built
    if not dry_run:
        _root(base, base_dir, flags, force)
    for note in made:
        err.write(f"warning: {note}\n")
    root_flags = {**flags, "work_dir": str(root)}
    if group_by == "devices":
        repo = load_request(base, base_dir, {**root_flags, "test_cmd": PYTEST.tool}).repo_root
        entries = group_by_devices(entries, repo)
    try:
        base_req = load_request(base, base_dir, root_flags)
    except BuildError:
        base_req = None  # each entry then reports what is missing, with its line
    wheels: dict[str, str] = {}  # what a compile builds -> the batch's wheel folder for it
    if (
        base_req is not None
        and base_req.compile
        and not base_req.wheel_dir
        and queued(base_req)
        and not over_ssh(base_req.execution_scenario)  # a folder this machine's cluster sees
    ):
        # One wheel folder for the batch, so its jobs share one compile
        # (decision batch-prerequisites); an entry of a request list that builds otherwise gets a
        # folder of its own (decision one-wheel-per-folder).
        wheels[_build_tag(base_req)] = str(root / "wheel")
        base_req = base_req.model_copy(update={"wheel_dir": str(root / "wheel")})
    from trtllm_script_builder.atomic import FolderBusy, folder_lock, open_atomically

    # Interrupted or failed: the jobs built so far stay whole, but no index is left half-written.
    stack = contextlib.ExitStack()
    index: IO[str] | None = None
    if not dry_run:
        refuse_foreign_link(root)
        try:
            # One run at a time writes a batch folder (decision build-many-folder-lock): a second
            # one, even with --force, would mix its jobs and its index with this one's.
            stack.enter_context(folder_lock(str(root), wait=False))
            index = stack.enter_context(open_atomically(root / "jobs.json"))
        except FolderBusy:
            raise BuildError(
                "work_dir",
                f"{root} is being written by another build-many",
                "wait for it to end, or choose another --work-dir",
            ) from None
        except OSError as exc:
            stack.close()  # the lock, when the index could not be opened
            raise BuildError(
                "work_dir",
                f"cannot write in {root} ({exc.strerror})",
                "give a folder you can write to",
            ) from None
    ok = failed = warned = 0
    devices: Counter[int] = Counter()
    # A request list's job folders -> their lines, so no two share one; a test list's folders
    # are all named here: only their names are kept (a list of 10,000 ids: under a megabyte).
    used: dict[str, int] = {}
    names = Names()
    rows: list[dict[str, Any]] = []  # kept for --json only
    with contextlib.suppress(_NothingBuilt), stack:
        if index is not None:
            index.write("[")
        for e in entries:
            row: dict[str, Any] = {"line": e.line, "entry": e.text}
            if isinstance(e, Entry):
                if e.lines:
                    row["lines"] = list(e.lines)
                try:
                    job_dir = _job_dir(e, root, used, names)
                    fields = {**e.fields, "work_dir": job_dir}
                    if base_req is not None:
                        time_limit = _time_for(e, base_req.time_limit)
                        if time_limit:
                            fields["time_limit"] = time_limit
                    if base_req is not None and e.words:
                        # Test-list entries set checked strings on an already validated base.
                        req = base_req.model_copy(update=fields)
                    else:
                        req = load_request(base, base_dir, {**flags, **fields}, problems_of)
                        local = queued(req) and not over_ssh(req.execution_scenario)
                        if wheels and req.compile and not req.wheel_dir and local:
                            tag = _build_tag(req)
                            own = wheels.setdefault(tag, str(root / f"wheel-{tag}"))
                            req = req.model_copy(update={"wheel_dir": own})
                    result = build(req, site)
                    if not dry_run:
                        finish(result, force)
                    if requests:
                        used[job_dir] = e.line
                    s = result.spec
                    row.update(
                        work_dir=s.work_dir,
                        script_path=s.script_path,
                        category=s.category,
                        required_devices=s.required_devices,
                        node_count=s.node_count,
                        status="would build" if dry_run else "built",
                    )
                    if s.warnings:
                        row["warnings"] = s.warnings
                        warned += 1
                        if warned <= SHOWN_WARNINGS:  # the rest are in jobs.json
                            where = ",".join(map(str, row.get("lines", [e.line])))
                            for w in s.warnings:
                                err.write(f"{list_path}:{where}: warning: {w}\n")
                    devices[s.required_devices] += 1
                    ok += 1
                    if dry_run and not as_json:
                        out.write(
                            f"{list_path}:{e.line}: would build {s.work_dir} "
                            f"({s.required_devices} GPU(s))\n"
                        )
                except BuildError as error:
                    e = Bad(e.line, e.text, error)
            if isinstance(e, Bad):
                row.update(status="error", error=e.error.line())
                where = ",".join(map(str, row.get("lines", [e.line])))
                for line in e.error.line().splitlines():
                    err.write(f"{list_path}:{where}: {line}\n")
                failed += 1
            if index is not None:
                index.write(("\n  " if ok + failed == 1 else ",\n  ") + json.dumps(row))
            if as_json:
                rows.append(row)
        if index is not None:
            if ok == 0:  # nothing built: no index, so the corrected run finds the folder empty
                raise _NothingBuilt
            index.write("\n]\n")
    if ok == 0 and fresh and not dry_run:
        with contextlib.suppress(OSError):
            root.rmdir()
    if ok + failed == 0:  # an empty list is a mistake (the wrong file, a list not yet filled)
        raise BuildError(
            "LIST",
            f"{list_path} holds no entry (only comments and blank lines)",
            "give a list with one test id per line, or a YAML list of requests",
        )
    if as_json:
        out.write(
            json.dumps(
                {
                    "built": 0 if dry_run else ok,
                    "would_build": ok if dry_run else 0,
                    "failed": failed,
                    "with_warnings": warned,
                    "jobs_per_gpu_count": {str(d): n for d, n in sorted(devices.items())},
                    "index": None if dry_run or not ok else str(root / "jobs.json"),
                    "dry_run": dry_run,
                    "jobs": rows,
                }
            )
            + "\n"
        )
    else:
        out.write(summary(ok, failed, warned, devices, root, dry_run))
    return 0 if failed == 0 else 2


class _NothingBuilt(Exception):
    """Raised inside the index's writer to discard it."""


# Warnings printed per job; a list of thousands with one shared warning stays readable.
SHOWN_WARNINGS = 20


def summary(
    ok: int, failed: int, warned: int, devices: Counter[int], root: Path, dry_run: bool = False
) -> str:
    lines = [f"{'GPUs':>6}  {'jobs':>6}"]
    lines += [f"{d:>6}  {n:>6}" for d, n in sorted(devices.items())]
    # A job sized without its test file (a warning) is built, but its GPU count is a guess.
    note = f", {warned} with warnings" if warned else ""
    if warned > SHOWN_WARNINGS:
        note += f" (the first {SHOWN_WARNINGS} printed above, all in jobs.json)"
    if dry_run:
        lines.append(f"would build {ok} job(s){note}, {failed} failed; nothing written")
    else:
        done = f"index: {root / 'jobs.json'}" if ok else "nothing written"
        lines.append(f"built {ok} job(s){note}, {failed} failed; {done}")
    return "\n".join(lines) + "\n"
