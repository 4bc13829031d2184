"""Big clusters and tools that hang or answer with something hostile: every parse reads in time
linear in what it is given, and nothing a command waits for outlasts its bound."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from trtllm_script_builder.errors import ToolFailed
from trtllm_script_builder.process import slurm, slurm_submit
from trtllm_script_builder.process.handles import SlurmJob, read_local
from trtllm_script_builder.process.probe import parse
from trtllm_script_builder.process.probe.collect import _probe
from trtllm_script_builder.process.probe.parse import parse_gres
from trtllm_script_builder.process.proc import (
    MAX_OUTPUT,
    TIMED_OUT,
    TOO_MUCH,
    CmdResult,
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
    start = time.process_time()  # CPU time: a busy machine does not stretch it
    got = parse_gres("gpu:h100:8" + "(x)" * 80_000 + "y,nic:1(S:0)")
    assert time.process_time() - start < 2.0  # a generous bound: the quadratic one took 40 s
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
    assert time_left() is None


def test_a_nested_box_without_seconds_keeps_the_outer_one() -> None:
    with time_box(100), time_box(None):
        left = time_left()
        assert left is not None and 90 < left <= 100


def test_polls_squeue_did_not_answer_end_watch_naming_squeue() -> None:
    """slurmctld does not answer squeue: sacct (slurmdbd) is still asked, scontrol (slurmctld
    again) is not, and a job nothing answered for is marked so."""
    asked: list[str] = []

    def hung(argv: Sequence[str], cwd: Path | None = None) -> CmdResult:
        asked.append(argv[0])
        if argv[0] == "sacct":
            return CmdResult(0, "41|RUNNING|0:0|00:01:00|n1|41|Unknown\n")
        return CmdResult(TIMED_OUT, "", f"{argv[0]}: no answer after 120s", b"", True)

    got = slurm.query_many(hung, ["41", "42_3"], accounting=True)
    assert asked == ["squeue", "sacct"]
    assert (got["41"].state, got["41"].source) == ("RUNNING", "sacct")
    assert (got["42_3"].known, got["42_3"].source) == (False, NO_ANSWER)
    got = slurm.query_many(hung, ["41"], accounting=False)
    assert got["41"].source == NO_ANSWER and asked[-1] == "squeue"
    job = SlurmJob("41", hung, read_local, None, None, None)
    assert not job.update(got["41"])
    job.unknown_since = time.monotonic() - 100
    with pytest.raises(ToolFailed, match="squeue gave no answer about job 41 for 10"):
        job.update(got["41"])


def test_a_tool_that_prints_without_end_is_stopped_at_the_output_limit() -> None:
    """A cluster's `squeue` printing /dev/zero filled memory until its timeout (120 s)."""
    start = time.monotonic()
    res = run(["/bin/sh", "-c", "echo asking >&2; exec cat /dev/zero"], timeout=120)
    assert res.rc == TOO_MUCH and not res.timed_out
    assert len(res.raw) == MAX_OUTPUT and set(res.raw) == {0}
    assert res.err == f"asking\n/bin/sh: printed more than {MAX_OUTPUT} bytes; stopped"
    assert time.monotonic() - start < 60


def test_a_tool_given_input_and_printing_both_streams_is_read_whole() -> None:
    data = b"x" * (3 << 20)  # more than a pipe holds: written while its output is read
    script = "import sys; d = sys.stdin.buffer.read(); sys.stdout.buffer.write(d); print(len(d), file=sys.stderr)"
    res = run([sys.executable, "-c", script], input=data, timeout=120)
    assert (res.rc, res.raw == data, res.err) == (0, True, f"{len(data)}\n")


def test_a_big_clusters_nodes_are_read_once_not_once_per_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """300 partitions of 5,000 nodes: each node's partition list was split twice per
    partition (3 million splits, about two minutes when every node is in every partition), and
    each partition was tried with its own `sbatch --test-only` (300 round trips)."""
    parts = [f"p{i:03d}" for i in range(300)]
    sinfo = "\n".join(f"{p}|up|4:00:00|5000|gpu:h100:8(S:0-1)" for p in parts)
    nodes = "\n".join(
        f"NodeName=gpu{i:04d} Arch={'aarch64' if i % 2 else 'x86_64'} CPUTot={64 + i % 3} "
        f"RealMemory=900000 Gres=gpu:h100:8(S:0-1) Partitions={','.join(parts[i % 300 :][:10])}"
        for i in range(5000)
    )

    def cluster(argv: Sequence[str], cwd: Path | None = None) -> CmdResult:
        answers = {
            "sinfo": sinfo,
            "sacctmgr": "tsb|tsb|\n",
            "scontrol show node": nodes,
            "srun": "MPI plugin types are...\n\tpmix\n",
            "scontrol show config": "ClusterName = big\nMaxArraySize = 1001\n",
            "sbatch": "",  # --test-only: every partition may be used
        }
        asked.append(argv[0])
        key = " ".join(argv[:3]) if argv[0] == "scontrol" else argv[0]
        return CmdResult(0, answers[key]) if key in answers else CmdResult(1, "", "not here")

    asked: list[str] = []
    splits = 0
    real = parse.node_partitions

    def counted(node: dict[str, str]) -> list[str]:
        nonlocal splits
        splits += 1
        return real(node)

    monkeypatch.setattr(parse, "node_partitions", counted)
    env, rc = _probe(None, cluster, "me")
    assert splits <= 5000
    assert asked.count("sbatch") == 1  # the preferred partition answered: no other is tried
    assert (rc, env["errors"]) == (0, []), env["errors"][0][:300]
    by_name = {p["name"]: p for p in env["partitions"]}
    assert len(by_name) == 300
    p0, p1 = by_name["p000"], by_name["p001"]
    assert (p0["gpus_per_node"], p0["arch"], p0["cpus_per_node"]) == (8, "x86_64", 64)
    assert p1["arch"] == "x86_64"  # gpu0000 (x86_64) is in p000-p009, gpu0001 from p001 on


def test_an_exit_code_of_thousands_of_digits_is_no_exit_code() -> None:
    """sacct's or scontrol's ExitCode `9999...:0` (5,000 digits) ended watch in a ValueError
    traceback (Python converts at most 4,300 digits)."""
    huge = "9" * 5000
    assert slurm.parse_exit_code(f"{huge}:0") == (None, None)
    rows = slurm.sacct_rows(f"5|FAILED|{huge}:0|00:01:00|n1|5|2026-12-04T10:00:00")
    assert (rows["5"].state, rows["5"].exit_code) == ("FAILED", None)
    st = slurm.status_from_scontrol("5", f"JobId=5 JobState=FAILED ExitCode=0:{huge}")
    assert (st.state, st.exit_code, st.signal) == ("FAILED", None, None)
    assert slurm.parse_exit_code(" 1:15 ") == (1, 15)


def test_a_nodes_numbers_that_int_cannot_take_are_no_numbers() -> None:
    huge = "9" * 5000
    nodes = [{"CPUTot": huge, "RealMemory": "²"}, {"CPUEfctv": "٣", "CPUTot": "64"}]
    assert parse.node_size(nodes) == (64, None)
    assert parse.preferred_pmix([f"pmix_v{huge}", "pmix_v4", "pmix"]) == "pmix_v4"


@pytest.mark.parametrize("entry", ["watch", "watch_batch"])
def test_watch_and_a_batchs_watch_run_in_a_time_box_of_the_timeout_and_after(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, entry: str
) -> None:
    from trtllm_script_builder.process import follow
    from trtllm_script_builder.process import watch as watching

    monkeypatch.setattr(watching, f"_{entry}", lambda *_: time_left())
    left = getattr(watching, entry)(tmp_path, timeout=5, console=None)
    assert 5 + follow.AFTER_TIMEOUT - 2 < left <= 5 + follow.AFTER_TIMEOUT
    assert getattr(watching, entry)(tmp_path, console=None) is None  # no --timeout: no box


@pytest.mark.parametrize(
    ("said", "arrays"),
    [
        ("0", []),  # arrays off: every job alone
        ("1", []),  # only index 0: every job alone
        ("2", ["#SBATCH --array=0-1", "#SBATCH --array=0-1"]),  # and the fifth alone
        ("1e3", ["#SBATCH --array=0-4"]),  # not a number: Slurm's default, 1001
        ("9" * 5000, ["#SBATCH --array=0-4"]),
    ],
)
def test_max_array_size_0_1_and_unparsable_in_scontrols_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: str, arrays: list[str]
) -> None:
    from .test_batch_submit_watch import COMPILE_KEY, chain_folder
    from .test_max_array_size import CONFIG, LimitedSbatch, _ask, _driver_ranges

    folder = chain_folder(tmp_path, [COMPILE_KEY] * 5)
    _ask(folder, None)

    class Said(LimitedSbatch):
        def __call__(self, argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
            if list(argv[:3]) == ["scontrol", "show", "config"]:
                return CmdResult(0, CONFIG.format(said))
            return super().__call__(argv, cwd)

    fake = Said(int(said) if said.isdigit() and len(said) < 5 else 1001)
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    batch = slurm_submit.submit_batch(folder, say=lambda _: None)
    assert _driver_ranges(fake) == arrays
    assert len({j.job_id for j in batch.jobs}) == 5  # each job submitted once
    alone = [c for c in fake.calls if c[0] == "sbatch" and c[-1].endswith("x.slurm")]
    assert len(alone) == 5 - sum(int(a.rsplit("-", 1)[1]) + 1 for a in arrays)
