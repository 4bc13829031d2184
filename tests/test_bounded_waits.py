"""Big clusters and tools that hang or answer with something hostile: every parse reads in time
linear in what it is given, and nothing a command waits for outlasts its bound."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from trtllm_script_builder.process import slurm
from trtllm_script_builder.process.probe.parse import parse_gres
from trtllm_script_builder.process.proc import CmdResult


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
