"""pytest: TensorRT-LLM's integration tests (Category 2), sized from the tests' GPU markers."""

from __future__ import annotations

import posixpath
import re
import shlex
from pathlib import Path
from typing import Any

from trtllm_script_builder.model.request import Request
from trtllm_script_builder.model.values import whole_number
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.backend import queued
from trtllm_script_builder.resolve.commands import launch_words, normalise_name, without_launcher
from trtllm_script_builder.resolve.job import work_dir_field
from trtllm_script_builder.resolve.perf.testid import is_perf_sanity_cmd, strip_timeout
from trtllm_script_builder.resolve.workflow import (
    Draft,
    Sizing,
    Workflow,
    by_world_size,
    devices_note,
    one_node,
)
from trtllm_script_builder.slurm_time import parse_time_minutes, seconds_to_time, time_to_seconds
from trtllm_script_builder.workflows.pytest_sizing import (
    DEFS,
    _selection,
    model_name_for,
    size_pytest,
    timeout_marks,
)

NAME = "pytest"
# A hung test otherwise holds its GPUs until Slurm's limit ends the whole job
# (decision pytest-sizing).
DEFAULT_TEST_TIMEOUT = 3600
_HAS_TIMEOUT = re.compile(r"(?:^|\s)--timeout(?:[= ]|$)")
_PYTEST_TIMEOUT = re.compile(r"(?:^|\s)--timeout[= ](\d+)(?=\s|$)")
NAME_MAX = 80  # a build-many folder name's length, as batch.py cuts them
# Beyond a test's own timeout mark, the job's install step and start-up (decision timeout-mark-time).
MARK_MARGIN = 1800


def size(req: Request, gpn: int, gpn_source: str) -> Sizing:
    assert req.test_cmd is not None
    found = size_pytest(req.test_cmd, Path(req.repo_root))
    warnings = list(found.notes)
    if found.devices is not None:
        devices, source = found.devices, found.source
        warnings += devices_note(req, devices, source)
    else:
        devices = req.required_devices or 1
        source = (
            "the request's required_devices"
            if req.required_devices
            else "the default of 1 (no GPU marker found)"
        )
    model = req.model_name or found.model_name
    if devices > gpn:
        # Wider than a node: one job over the nodes, one MPI rank per GPU under the launcher,
        # as TensorRT-LLM's CI runs its multi-node stages (decision multi-node-pytest).
        sz = by_world_size(req, devices, gpn, source, model)
        if source.startswith("skip_less_device("):
            sz.warnings.append(
                f"{source.split(' on ')[0]} counts the GPUs of one node, so on nodes of {gpn} "
                "GPUs the test skips itself; TensorRT-LLM's multi-node tests use "
                "skip_less_mpi_world_size, which counts the ranks of all nodes"
            )
    else:
        one_node(req, NAME)
        sz = Sizing(devices, 1, 1, model)
    warnings += _timeout_warning(req)
    mark = _mark(req) if queued(req) else None
    if mark is not None and req.time_limit == _time_for(mark):
        warnings.append(
            f"the selected test has @pytest.mark.timeout({mark}): time_limit raised to "
            f"{req.time_limit} to fit it and the install step"
        )
    sz.workdir_rel = found.workdir_rel
    sz.warnings = warnings + sz.warnings
    return sz


def _timeout_warning(req: Request) -> list[str]:
    """pytest's --timeout is per test; at or past the Slurm limit, Slurm ends the job first."""
    m = _PYTEST_TIMEOUT.search(req.test_cmd or "")
    if not m or not queued(req):
        return []
    limit, seconds = parse_time_minutes(req.time_limit), whole_number(m.group(1))
    if limit is None or (seconds is not None and seconds < limit * 60):
        return []
    return [
        f"pytest --timeout={m.group(1)} (seconds, per test) is not below the Slurm time limit "
        f"{req.time_limit}: Slurm would end the job before pytest reports; raise --time-limit"
    ]


def timeout_suffix_to_flag(req: Request) -> Request:
    """A test-list line pasted whole: its ` TIMEOUT (N)` (minutes) becomes pytest's --timeout."""
    if not req.test_cmd:
        return req
    cmd, minutes = strip_timeout(req.test_cmd)
    if minutes is None:
        return req
    return req.model_copy(update={"test_cmd": f"{cmd} --timeout={minutes * 60}"})


def _mark(req: Request) -> int | None:
    return timeout_marks(req.test_cmd or "", Path(req.repo_root))


def _time_for(mark: int) -> str:
    return seconds_to_time(-(-(mark + MARK_MARGIN) // 60) * 60)


def adjust(req: Request) -> Request:
    """A test-list line's TIMEOUT, then a job time limit that fits the test's own timeout mark
    (decision timeout-mark-time): the mark wins over --timeout, so a shorter job would be ended
    by Slurm while the test still runs."""
    req = timeout_suffix_to_flag(req)
    if not req.test_cmd or not queued(req):
        return req
    mark = _mark(req)
    limit = time_to_seconds(req.time_limit)
    if mark is None or limit is None or limit >= mark + MARK_MARGIN:
        return req
    return req.model_copy(update={"time_limit": _time_for(mark)})


def runs_perf_sanity(req: Request) -> bool:
    """A perf-sanity test id, or a perf config, runs through the repo's submit.py."""
    return is_perf_sanity_cmd(req.test_cmd or "") or bool(req.perf_config_yaml)


def junit_file(test_cmd: str, name: str, slurm: bool, warnings: list[str]) -> str:
    """The name of pytest's JUnit report in the job's folder; the Slurm job id in it keeps a
    rerun's results apart. A command that names its own report keeps it, unread by `watch`:
    pytest would write only the last --junitxml given."""
    try:  # shlex only when the option may be there: build-many runs this per line
        words = shlex.split(test_cmd) if "--junit" in test_cmd else []
    except ValueError:
        words = test_cmd.split()
    if any(w.startswith(("--junitxml", "--junit-xml")) for w in words):
        warnings.append(
            "test_cmd writes its own JUnit report (--junitxml), so `watch` reads no per-test "
            "results and judges by the exit code and the log"
        )
        return ""
    return f"{name}_%j_junit.xml" if slurm else f"{name}_junit.xml"


def _prepare(d: Draft) -> None:
    d.junit = junit_file(d.req.test_cmd or "", d.name, queued(d.req), d.warnings)
    if d.junit or _in_defs(d):  # pytest writes into the job's folder, which the container must see
        folder = mnt.check_mount_path(d.paths.log_dir, work_dir_field(d.paths))
        d.extras.append(mnt.Mount(folder, folder, "work_dir"))


def test_timeout(test_cmd: str, seconds: int | None, limit: str | None) -> int | None:
    """pytest's per-test limit: none when the command sets its own, else the request's, else
    the default when the job's time limit leaves room for it."""
    if _HAS_TIMEOUT.search(test_cmd):
        return None
    if seconds is None:
        allowed = parse_time_minutes(limit) if limit else None
        if allowed is not None and allowed * 60 <= DEFAULT_TEST_TIMEOUT:
            return None  # Slurm ends the job first; a shorter limit is the user's to set
        seconds = DEFAULT_TEST_TIMEOUT
    return seconds


def _command(d: Draft, mounts: list[mnt.Mount]) -> None:
    req = d.req
    d.run_cmd = req.test_cmd or ""
    limit = req.time_limit if queued(req) else None
    timeout = test_timeout(d.run_cmd, req.test_timeout, limit)
    # Through pytest's own environment variable, so the command arrives as written; the
    # options CI's slurm_run.sh gives (decision pytest-as-ci).
    opts = [f"--timeout={timeout}"] if timeout is not None else []
    # Only with a timeout: the option is pytest-timeout's, which pytest refuses without it.
    timed = opts or _HAS_TIMEOUT.search(d.run_cmd) or queued(req) and _mark(req) is not None
    if timed and "--timeout-method" not in d.run_cmd:
        opts.append("--timeout-method=thread")
    if _in_defs(d) and "--output-dir" not in d.run_cmd:
        opts.append("--output-dir=" + shlex.quote(d.paths.log_dir))
    if d.junit:
        opts.append("-o junit_logging=out-err")
    if opts:
        d.exports.append(("PYTEST_ADDOPTS", " ".join(opts)))
    rel = d.sizing.workdir_rel
    workdir = posixpath.join(d.paths.project, rel) if rel else d.paths.project
    if d.sizing.launcher:
        # Across nodes pytest runs on rank 0 under the launcher, which takes it as words
        # (decisions launcher-words, multi-node-pytest).
        d.run_cmd = launch_words(without_launcher(d.run_cmd), "test_cmd", d.warnings, ids=True)
    d.exports += [("TEST_WORKDIR", workdir), ("TEST_CMD", d.run_cmd)]


def _in_defs(d: Draft) -> bool:
    """The integration tests' conftest defines --output-dir; elsewhere pytest refuses it."""
    return d.sizing.workdir_rel == str(DEFS)


def test_job_name(test_id: str) -> str:
    """A test's folder name: its model (class), test and parameters, as file-name-safe words:
    `TestLlama3_1_8BInstruct::test_fp8[tp2]` -> `llama3_1_8binstruct_fp8_tp2`."""
    sel = _selection(test_id)
    parts = [model_name_for(sel)]
    if sel.cls is None:  # a module-level test: the file names it, model_name_for the test
        parts = [normalise_name(Path(sel.path).stem.removeprefix("test_"))]
    if sel.func:
        parts.append(normalise_name(sel.func.removeprefix("test_")))
    if sel.param_id:
        parts.append(normalise_name(sel.param_id))
    name = "_".join(p for p in parts if p)
    if len(name) > NAME_MAX:
        # two ids of one test differ at the end (`..._eplb0_mtp3` / `..._eplb288_mtp3`): a long
        # name loses its middle, never its end
        half = NAME_MAX // 2
        tail = name[-half:]
        tail = tail.split("_", 1)[1] if "_" in tail[1:] else tail  # from a word's start
        name = f"{name[: half - 1].rstrip('_')}_{tail}"
    return name.strip("_") or NAME


def _job_name(item: dict[str, Any]) -> str | None:
    if not isinstance(item.get("test_cmd"), str):
        return None
    ids = [w for w in str(item["test_cmd"]).split() if "::" in w or ".py" in w]
    return test_job_name(ids[0]) if ids else ""


PYTEST = Workflow(
    name=NAME,
    commands=("test_cmd",),
    infer_rank=99,  # what a request is when nothing says otherwise (decision workflow-inference)
    infers=lambda req: True,
    suffix="auto_test",
    category=2,
    patterns=(("passed",), ("FAILED", "ERROR")),
    size=size,
    aliases=("2",),
    tool="pytest",
    adjust=adjust,
    prepare=_prepare,
    command=_command,
    submit_py=runs_perf_sanity,
    junit=True,
    job_name=_job_name,
)
