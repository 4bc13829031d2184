"""A batch bigger than the cluster's MaxArraySize goes in as several arrays that Slurm takes
(decision max-array-size), without a cluster: sbatch here refuses an array index at or over
the limit, as Slurm's does ("Invalid job array specification")."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from trtllm_script_builder.process import slurm_submit
from trtllm_script_builder.process.probe import parse
from trtllm_script_builder.process.proc import CmdResult

from .test_batch_submit_watch import COMPILE_KEY, FakeSbatch, chain_folder

CONFIG = "Configuration data as of 2026-12-03T21:00:00\nMaxArraySize            = {}\nMaxJobCount = 10000\n"
_ARRAY = re.compile(r"#SBATCH --array=0-(\d+)(%\d+)?")


class LimitedSbatch(FakeSbatch):
    """FakeSbatch with a MaxArraySize: `scontrol show config` says it, and an sbatch whose
    script asks for an index at or over it fails with Slurm's words."""

    def __init__(self, limit: int, config_rc: int = 0) -> None:
        super().__init__()
        self.limit = limit
        self.config_rc = config_rc

    def __call__(self, argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
        argv = list(argv)
        if argv[:3] == ["scontrol", "show", "config"]:
            self.calls.append(argv)
            if self.config_rc:
                return CmdResult(1, "", "scontrol: error: slurm_load_ctl_conf error")
            return CmdResult(0, CONFIG.format(self.limit))
        if argv[0] == "sbatch" and "batch_array" in argv[-1]:
            m = _ARRAY.search(Path(argv[-1]).read_text())
            if m and int(m.group(1)) >= self.limit:
                self.calls.append(argv)
                return CmdResult(
                    1,
                    "",
                    "sbatch: error: Batch job submission failed: Invalid job array specification",
                )
        return super().__call__(argv, cwd)

    def arrays(self) -> list[str]:
        return [c[-1] for c in self.calls if c[0] == "sbatch" and "batch_array" in c[-1]]


def _ask(folder: Path, limit: int | None) -> None:
    """Give every job's slurm_env the probed MaxArraySize `limit` (None: not probed)."""
    for spec_file in folder.glob("job*/job_spec.json"):
        spec = json.loads(spec_file.read_text())
        spec["slurm_env"] = {**(spec.get("slurm_env") or {}), "max_array_size": limit}
        if limit is None:
            del spec["slurm_env"]["max_array_size"]
        spec_file.write_text(json.dumps(spec))


def _driver_ranges(fake: LimitedSbatch) -> list[str]:
    return [_ARRAY.search(Path(d).read_text()).group(0) for d in fake.arrays()]  # type: ignore[union-attr]


def test_a_batch_over_the_limit_read_from_the_cluster_goes_in_as_arrays_that_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = chain_folder(tmp_path, [COMPILE_KEY] * 7)
    _ask(folder, None)
    fake = LimitedSbatch(3)
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    said: list[str] = []
    batch = slurm_submit.submit_batch(folder, say=said.append)
    assert [c[:3] for c in fake.calls].count(["scontrol", "show", "config"]) == 1
    # 3 + 3 in two arrays, the seventh job alone
    assert _driver_ranges(fake) == ["#SBATCH --array=0-2", "#SBATCH --array=0-2"]
    assert [(a.size, a.job_id) for a in batch.arrays] == [(3, "102"), (3, "103")]
    assert [j.job_id for j in batch.jobs] == [
        "102_0", "102_1", "102_2", "103_0", "103_1", "103_2", "104",
    ]  # fmt: skip
    subs = [json.loads((folder / f"job{i}" / "submission.json").read_text()) for i in range(7)]
    assert [s["job_id"] for s in subs] == [j.job_id for j in batch.jobs]
    assert any("3 jobs of one shape" in s and "(MaxArraySize is 3)" in s for s in said), said
    # no throttle asked: the arrays wait for the compile only, not for each other
    assert all("afterany" not in " ".join(c) for c in fake.calls)


def test_the_probed_limit_is_used_and_the_throttle_holds_across_the_arrays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = chain_folder(tmp_path, [COMPILE_KEY] * 5)
    _ask(folder, 2)
    fake = LimitedSbatch(2)
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    batch = slurm_submit.submit_batch(folder, max_running=2)
    assert not [c for c in fake.calls if c[0] == "scontrol"]  # probe said it
    assert _driver_ranges(fake) == ["#SBATCH --array=0-1%2", "#SBATCH --array=0-1%2"]
    # each part waits for the one before to end, so never more than 2 run at once
    deps = [opts for _, opts in fake.sbatches()][2:]
    assert deps == [
        ["--dependency=afterok:100:101", "--kill-on-invalid-dep=yes"],
        ["--dependency=afterok:100:101,afterany:102", "--kill-on-invalid-dep=yes"],
        ["--dependency=afterok:100:101,afterany:103", "--kill-on-invalid-dep=yes"],
    ]
    assert [j.job_id for j in batch.jobs] == ["102_0", "102_1", "103_0", "103_1", "104"]


def test_without_an_answer_slurms_default_limit_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = chain_folder(tmp_path, [COMPILE_KEY] * 3)
    _ask(folder, None)
    fake = LimitedSbatch(1001, config_rc=1)
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    slurm_submit.submit_batch(folder)
    assert _driver_ranges(fake) == ["#SBATCH --array=0-2"]


def test_split_arrays_and_the_limit_in_scontrols_config() -> None:
    groups = [[0, 2, 4, 5, 6], [1], [3, 7]]
    assert slurm_submit.split_arrays(groups, 2) == [
        ([0, 2], False), ([4, 5], True), ([6], True), ([1], False), ([3, 7], False),
    ]  # fmt: skip
    assert slurm_submit.split_arrays(groups, 1001) == [(g, False) for g in groups]
    # MaxArraySize=0 turns arrays off: every job alone
    assert [len(g) for g, _ in slurm_submit.split_arrays(groups, 0)] == [1] * 8
    assert parse.max_array_size(parse.parse_config(CONFIG.format(101))) == 101
    for bad in ("", "-1", "1e3", "٣", "9" * 10):
        assert parse.max_array_size({"MaxArraySize": bad}) is None


def test_an_array_slurm_still_refuses_names_the_limit_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """probe recorded MaxArraySize 1001, the cluster's is 3 now: sbatch refuses the array of 5
    with "Invalid job array specification". The refusal names the array, the limit it was cut
    by and where that came from, the cluster's limit now, and the fix; not a job folder."""
    folder = chain_folder(tmp_path, [COMPILE_KEY] * 5)
    _ask(folder, 1001)
    fake = LimitedSbatch(3)
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    with pytest.raises(slurm_submit.ToolFailed) as err:
        slurm_submit.submit_batch(folder)
    line = err.value.line()
    assert line == (
        "error: sbatch: sbatch: error: Batch job submission failed: Invalid job array "
        "specification (an array of 5 jobs, indexes 0-4, cut by MaxArraySize 1001 from the "
        "jobs' slurm_env (probe); the cluster's MaxArraySize is 3 now); cancelled the 2 already "
        "submitted; probe the cluster again (trtllm-script-builder probe -o SLURM_ENV_FILE), "
        "build the batch again and submit it: it goes in as arrays of at most 3 jobs"
    )
    assert str(folder) not in line
    assert err.value.exit_code == 3
    assert [c[0] for c in fake.calls[-2:]] == ["scancel", "scontrol"]  # then the limit asked


def test_an_array_refused_for_another_reason_says_what_to_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = chain_folder(tmp_path, [COMPILE_KEY] * 3)
    _ask(folder, None)
    fake = LimitedSbatch(1001, config_rc=1)
    real = fake.__call__

    def refusing(argv: Any, cwd: Any = None, **k: Any) -> CmdResult:
        if list(argv)[0] == "sbatch" and "batch_array" in list(argv)[-1]:
            return CmdResult(1, "", "sbatch: error: Invalid job array specification")
        return real(argv, cwd, **k)

    monkeypatch.setattr("trtllm_script_builder.process.host.run", refusing)
    with pytest.raises(slurm_submit.ToolFailed) as err:
        slurm_submit.submit_batch(folder)
    assert err.value.line().endswith(
        "(an array of 3 jobs, indexes 0-2, cut by MaxArraySize 1001 from Slurm's default "
        "(`scontrol show config` did not say)); cancelled the 2 already submitted; check the "
        "array against the cluster (scontrol show config: MaxArraySize, MaxJobCount; sbatch "
        "--test-only on the driver script), then submit again"
    )
