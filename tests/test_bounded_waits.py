"""Big clusters and tools that hang or answer with something hostile: every parse reads in time
linear in what it is given, and nothing a command waits for outlasts its bound."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from trtllm_script_builder.errors import ToolFailed
from trtllm_script_builder.process import slurm
from trtllm_script_builder.process.handles import SlurmJob, read_local
from trtllm_script_builder.process.probe.parse import parse_gres
from trtllm_script_builder.process.proc import (
    TIMED_OUT,
    CmdResult,
    extend_time_box,
    run,
    time_box,
    time_left,
)
from trtllm_script_builder.process.slurm import NO_ANSWER


def test_a_job_no_tool_knows_without_accounting_is_unknown_not_a_traceback() -> None:
    """Without slurmdbd a job slurmctld forgot (or a scontrol that timed out) has no status:
    query_many says so instead of raising."""

    def nobody(argv: Sequence[str], cwd: Path | None = None) -> CmdResult:
        if argv[0] == "scontrol":
            return CmdResult(1, "", "slurm_load_jobs error: Invalid job id specified")
        return CmdResult(0, "")

    got = slurm.query_many(nobody, ["41"], accounting=False)
    assert not got["41"].known


def test_a_gres_of_many_parentheses_is_read_in_linear_time() -> None:
    """`\\(.*\\)$` tried every `(` to the end of the string: a sinfo GRES of 240 KB took 40 s."""
    start = time.perf_counter()
    got = parse_gres("gpu:h100:8" + "(x)" * 80_000 + "y,nic:1(S:0)")
    assert time.perf_counter() - start < 2.0  # a generous bound: the quadratic one took 40 s
    assert [(g.name, g.count) for g in got] == [("gpu", None), ("nic", 1)]


def test_gres_with_types_sockets_and_indexes() -> None:
    got = parse_gres("gpu:h100:8(S:0-1),gpu:a100:4(IDX:0,2),nic:1,mps:no_consume:100")
    assert [(g.name, g.type, g.count) for g in got] == [
        ("gpu", "h100", 8),
        ("gpu", "a100", 4),
        ("nic", None, 1),
        ("mps", None, 100),
    ]


def test_a_tool_run_in_a_time_box_ends_with_the_box() -> None:
    with time_box(1.0):
        start = time.monotonic()
        res = run(["/bin/sh", "-c", "exec sleep 60"], timeout=60)
        assert res.timed_out and time.monotonic() - start < 10
        time.sleep(max(0.0, start + 1.0 - time.monotonic()))
        late = time.monotonic()
        res = run(["/bin/sh", "-c", "exec sleep 60"])
        assert (res.rc, res.timed_out) == (TIMED_OUT, True)
        assert res.err == "/bin/sh: not run, the time is up"
        assert time.monotonic() - late < 1.0  # not started at all
        extend_time_box(30)
        assert run(["/bin/sh", "-c", "echo hi"]).out == "hi\n"
    assert time_left() is None


def test_a_nested_box_without_seconds_keeps_the_outer_one() -> None:
    with time_box(100), time_box(None):
        left = time_left()
        assert left is not None and 90 < left <= 100


def test_polls_squeue_did_not_answer_end_watch_naming_squeue() -> None:
    def hung(argv: Sequence[str], cwd: Path | None = None) -> CmdResult:
        assert argv[0] == "squeue"  # sacct and scontrol would ask the same slurmctld
        return CmdResult(TIMED_OUT, "", "squeue: no answer after 120s", b"", True)

    got = slurm.query_many(hung, ["41", "42_3"], accounting=True)
    assert {j: s.source for j, s in got.items()} == {"41": NO_ANSWER, "42_3": NO_ANSWER}
    job = SlurmJob("41", hung, read_local, None, None, None)
    assert not job.update(got["41"])
    job.unknown_since = time.monotonic() - 100
    with pytest.raises(ToolFailed, match="squeue gave no answer about job 41 for 10"):
        job.update(got["41"])
