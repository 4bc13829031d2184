"""Category 4 planning: which perf-sanity config or test id, its sizing, and submit.py's arguments."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.slurm_env import version_before
from trtllm_script_builder.resolve.commands import normalise_name
from trtllm_script_builder.resolve.perf.sizing import (
    PerfSizing,
    config_path_for,
    load_perf_config,
    size_config,
)
from trtllm_script_builder.resolve.perf.testid import PerfTestId, parse_perf_test_id

LAUNCH_SH = "slurm_launch.sh"


@dataclass(frozen=True)
class PerfPlan:
    model_name: str
    sizing: PerfSizing
    test_id: str | None
    config_file: str | None  # local path handed to submit.py
    test_name: str | None
    benchmark_mode: str | None
    job_suffix: str  # perf (a test id) or benchmark (a config file)
    ship_config: bool = False  # remote: the config lives outside the repo and must travel

    def args(
        self,
        *,
        partition: str,
        account: str,
        image: str,
        mounts: str,
        work_dir: str,
        llm_src: str,
        models_root: str,
        time: str,
    ) -> list[str]:
        return submit_args(
            test_id=self.test_id,
            config_file=self.config_file,
            test_name=self.test_name,
            benchmark_mode=self.benchmark_mode,
            partition=partition,
            account=account,
            job_name=f"{self.model_name}_{self.job_suffix}",
            image=image,
            mounts=mounts,
            work_dir=work_dir,
            llm_src=llm_src,
            llm_models_root=models_root,
            launch_sh=str(Path(work_dir) / LAUNCH_SH),
            time=time,
        )


def plan_perf_sanity(
    *,
    repo_root: str,
    test_cmd: str | None,
    perf_config_yaml: str | None,
    perf_test_name: str | None,
    model_name: str | None,
    remote: bool,
) -> PerfPlan:
    tid: PerfTestId | None = parse_perf_test_id(test_cmd) if test_cmd else None
    if tid is None and not perf_config_yaml:
        raise BuildError(
            "perf_config_yaml",
            "perf-sanity needs a test id or a config",
            "pass test_cmd with perf/test_perf_sanity.py::test_e2e[...] or --perf-config-yaml",
        )
    if tid is not None:
        # submit.py reads the config the id names (its --test-list wins over --config-file)
        path = config_path_for(Path(repo_root), tid)
        cfg = load_perf_config(path, field="test_cmd")
        if perf_config_yaml and _differs(Path(perf_config_yaml), path):
            raise BuildError(
                "perf_config_yaml",
                f"{perf_config_yaml} is not the config the test id runs: submit.py runs "
                f"{path} for {tid.label}, and sizing from another file would not match it",
                "drop perf_config_yaml (the id's config is used), or drop the test id and "
                "give perf_test_name",
            )
        sizing = size_config(
            cfg,
            kind=tid.kind,
            server_name=tid.server_name,
            benchmark_mode=tid.mode,
            name_field="test_cmd",
            source=str(path),
        )
        base = tid.config_base
    else:
        assert perf_config_yaml is not None
        path = Path(perf_config_yaml)
        cfg = load_perf_config(path)
        sizing = size_config(
            cfg,
            kind=None,
            server_name=perf_test_name,
            name_field="perf_test_name",
            source=str(path),
        )
        base = path.stem
    inside_repo = str(path.resolve()).startswith(str(Path(repo_root).resolve()) + "/")
    return PerfPlan(
        model_name=model_name or normalise_name(base) or "perf",
        sizing=sizing,
        test_id=tid.raw_id if tid else None,
        config_file=None if tid else str(path),
        test_name=perf_test_name if tid is None else None,
        benchmark_mode=None,
        job_suffix="perf" if tid else "benchmark",
        ship_config=remote and tid is None and not inside_repo,
    )


def _differs(given: Path, runs: Path) -> bool:
    """Whether a perf_config_yaml is another config than the one a test id runs."""
    try:
        return not (given.resolve() == runs.resolve() or given.read_bytes() == runs.read_bytes())
    except OSError:
        return True


# What submit.py writes into the launch script without quotes (`-o <work_dir>/slurm-%j.out`,
# `--test-list=<work_dir>/test_list.txt` inside a double-quoted string that is split again,
# `testOutputDir=<work_dir>/<case>`): only characters that survive that stay as they are.
_UNQUOTED_SAFE = re.compile(r"[A-Za-z0-9_./+@%:,=~-]+")


def check_unquoted(values: dict[str, str]) -> None:
    """Refuse a path submit.py would write unquoted when it holds a character the shell
    reads (a space, a quote, `$`, `;`, ...): the launch script would break (decision
    submit-py-unquoted)."""
    for field, value in values.items():
        if value and not _UNQUOTED_SAFE.fullmatch(value):
            bad = sorted({c for c in value if not _UNQUOTED_SAFE.fullmatch(c)})
            raise BuildError(
                field,
                f"{value!r} holds {' '.join(repr(c) for c in bad)}, which submit.py writes "
                "unquoted into the launch script",
                "use a path of letters, digits and . _ - / + @ % : , = ~ for perf-sanity",
            )


def check_node_fits(sizing: PerfSizing, partition_gpus: int, where: str, field: str) -> None:
    """submit.py asks for the config's hardware.gpus_per_node on every node: a partition
    with fewer GPUs per node never runs the job."""
    if sizing.gpus_per_node > partition_gpus:
        raise BuildError(
            field,
            f"the perf config asks for {sizing.gpus_per_node} GPUs per node (hardware."
            f"gpus_per_node) but {where} has {partition_gpus}",
            "pick a partition with that many GPUs per node, or a config written for this one",
        )


# topology/block's `--segment` came with Slurm 23.11; 22.05 refuses the whole script
# (decision slurm-version-cluster-name)
SEGMENT_SINCE = (23, 11)


def segment_note(slurm_version: str | None) -> str | None:
    """What the build says when it leaves submit.py's `#SBATCH --segment` out: known before
    submit.py runs, so a dry run says it too."""
    if not version_before(slurm_version, *SEGMENT_SINCE):
        return None
    return (
        f"#SBATCH --segment left out of the launch script: the cluster runs Slurm "
        f"{slurm_version}, and sbatch before {SEGMENT_SINCE[0]}.{SEGMENT_SINCE[1]} "
        "refuses it (the nodes are not kept in one topology block)"
    )


def submit_args(
    *,
    test_id: str | None,
    config_file: str | None,
    test_name: str | None,
    benchmark_mode: str | None,
    partition: str,
    account: str,
    job_name: str,
    image: str,
    mounts: str | Sequence[str],
    work_dir: str,
    llm_src: str,
    llm_models_root: str,
    launch_sh: str,
    time: str,
) -> list[str]:
    """submit.py's arguments, in the order of the Category 4 template.

    A test id wins (`--test-list <id>`); otherwise `--config-file` with the optional
    `--test-name` and `--benchmark-mode`. `mounts` is a comma-separated string or a list.
    """
    args: list[str] = []
    if test_id:
        args += ["--test-list", test_id]
    elif config_file:
        args += ["--config-file", config_file]
        if test_name:
            args += ["--test-name", test_name]
        if benchmark_mode:
            args += ["--benchmark-mode", benchmark_mode]
    else:
        raise BuildError(
            "perf_config_yaml",
            "neither a perf-sanity test id nor a perf config is given",
            "give test_cmd with a perf/test_perf_sanity.py::test_e2e[...] id, or "
            "perf_config_yaml (with perf_test_name for an aggregated config)",
        )
    mount_text = mounts if isinstance(mounts, str) else ",".join(m for m in mounts if m)
    args += [
        "--partition", partition,
        "--account", account,
        "--job-name", job_name,
        "--image", image,
        "--mounts", mount_text,
        "--work-dir", work_dir,
        "--llm-src", llm_src,
        "--llm-models-root", llm_models_root,
        "--launch-sh", launch_sh,
        "--time", time,
    ]  # fmt: skip
    return args
