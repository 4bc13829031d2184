"""Category 4: perf-sanity, and evals wider than a node, through the repo's own submit.py.

Planning is pure; the submit.py run happens when the result is written (`finish`).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError
from ..resolve.commands import normalise_name
from .fallback import dump_yaml, eval_fallback_config
from .sizing import PerfSizing, config_path_for, load_perf_config, size_config
from .submit_py import submit_py_args
from .testid import PerfTestId, is_perf_sanity_cmd, parse_perf_test_id

LAUNCH_SH = "slurm_launch.sh"

__all__ = ["LAUNCH_SH", "PerfPlan", "is_perf_sanity_cmd", "plan_eval_fallback", "plan_perf_sanity"]


@dataclass
class PerfPlan:
    model_name: str
    sizing: PerfSizing
    test_id: str | None
    config_file: str | None  # local path handed to submit.py
    test_name: str | None
    benchmark_mode: str | None
    job_suffix: str  # perf (a test id) or benchmark (a config file)
    fallback_yaml: tuple[str, str] | None = None  # (file name in work_dir, text)
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
        return submit_py_args(
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
        path = Path(perf_config_yaml) if perf_config_yaml else config_path_for(Path(repo_root), tid)
        cfg = load_perf_config(path, field="perf_config_yaml" if perf_config_yaml else "test_cmd")
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
        config_file=None if tid and not perf_config_yaml else str(path),
        test_name=perf_test_name if tid is None else None,
        benchmark_mode=None,
        job_suffix="perf" if tid else "benchmark",
        ship_config=remote and perf_config_yaml is not None and not inside_repo,
    )


def plan_eval_fallback(
    *,
    model_name: str,
    model_path: str,
    tp: int,
    pp: int,
    gpus_per_node: int,
    task: str | None,
    work_dir: str,
) -> PerfPlan:
    """DESIGN decision 11: an aggregated config with the eval's parallelism, through submit.py."""
    if not task:
        raise BuildError(
            "eval_cmd",
            "names no task subcommand (gsm8k, mmlu, ...) for the multi-node fallback",
            "add the task after the trtllm-eval options",
        )
    server = f"{model_name}_tp{tp}_pp{pp}"
    cfg = eval_fallback_config(
        model_name=model_name,
        model_path=model_path,
        tp=tp,
        pp=pp,
        gpus_per_node=gpus_per_node,
        task=task,
        server_name=server,
    )
    name = f"{model_name}_eval_fallback.yaml"
    sizing = size_config(cfg, kind="aggr", server_name=server, source=name)
    return PerfPlan(
        model_name=model_name,
        sizing=sizing,
        test_id=None,
        config_file=posixpath.join(work_dir, name),
        test_name=server,
        benchmark_mode=None,
        job_suffix="benchmark",
        fallback_yaml=(name, dump_yaml(cfg)),
    )
