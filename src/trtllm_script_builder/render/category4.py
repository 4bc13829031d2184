"""Category 4: perf-sanity, and evals wider than a node, through the repo's own submit.py.

Planning is pure; the submit.py run happens when the result is written (`finish`).
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.process.submit_py import submit_py_args
from trtllm_script_builder.resolve.commands import normalise_name
from trtllm_script_builder.resolve.perf.fallback import dump_yaml, eval_fallback_config
from trtllm_script_builder.resolve.perf.sizing import (
    PerfSizing,
    config_path_for,
    load_perf_config,
    size_config,
)
from trtllm_script_builder.resolve.perf.testid import (
    PerfTestId,
    is_perf_sanity_cmd,
    parse_perf_test_id,
)

if TYPE_CHECKING:
    from trtllm_script_builder.build import BuildResult, Paths
    from trtllm_script_builder.model.request import Request
    from trtllm_script_builder.model.site_config import SiteConfig
    from trtllm_script_builder.model.slurm_env import SlurmEnv
    from trtllm_script_builder.resolve.mounts import Ask
    from trtllm_script_builder.resolve.slurm import ClusterFacts
    from trtllm_script_builder.resolve.workflows import Sizing

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


# ---------------------------------------------------------------- building and writing
# (build.py hands Category 4 over to these; they import it back only inside functions.)


def build_category4(
    req: Request,
    wf: str,
    plan: PerfPlan,
    env: SlurmEnv | None,
    env_raw: dict[str, Any] | None,
    facts: ClusterFacts | None,
    image: str,
    paths: Paths,
    models_root: str,
    site: SiteConfig,
    ask: Ask,
    warnings: list[str],
) -> BuildResult:
    """The submit.py call; it runs when the result is written (`finish`)."""
    from trtllm_script_builder import build as b
    from trtllm_script_builder.model.jobspec import JobSpec, OutFile, SlurmParams
    from trtllm_script_builder.resolve import image as img
    from trtllm_script_builder.resolve import mounts as mnt

    assert facts is not None and req.partition and req.account
    work_dir = Path(req.work_dir)
    home, project, models = b.base_mounts(req, env, paths, models_root, site, ask)
    # submit.py makes work_dir the container's working folder and writes its output there.
    job_dir = mnt.Mount(mnt.check_mount_path(paths.log_dir, "work_dir"), paths.log_dir, "work_dir")
    mounts_text = ",".join(m.entry() for m in mnt.assemble(home, project, models, [job_dir]))
    # submit.py runs here with local paths (DESIGN 22): it must see the local repo in the mounts
    # so that it adds no second copy, and the rewrite afterwards turns it into the remote one.
    local_project = mnt.Mount(req.repo_root, req.repo_root, "repo_root")
    local_job_dir = mnt.Mount(str(work_dir), str(work_dir), "work_dir")
    submit_mounts = (
        ",".join(m.entry() for m in mnt.assemble(home, local_project, models, [local_job_dir]))
        if paths.remote
        else mounts_text
    )
    before: list[OutFile] = []
    if plan.fallback_yaml:
        before.append(OutFile(*plan.fallback_yaml))
    if plan.ship_config and plan.config_file:  # ship_config is only set with a config file
        name = Path(plan.config_file).name
        before.append(OutFile(name, Path(plan.config_file).read_text()))
        plan.config_file = str(work_dir / name)
    script_image = img.enroot_uri(image) if site.enroot_uri_rewrite else image
    args = plan.args(
        partition=req.partition,
        account=req.account,
        image=script_image,
        mounts=submit_mounts,
        work_dir=str(work_dir),
        llm_src=req.repo_root,
        models_root=models_root,
        time=req.time_limit,
    )
    sz = plan.sizing
    gres = f"gpu:{sz.gpus_per_node}" if facts.gres else None
    params = SlurmParams(
        partition=req.partition,
        account=req.account,
        time_limit=req.time_limit,
        nodes=sz.nodes,
        ntasks=sz.total_gpus,
        ntasks_per_node=sz.ntasks_per_node,
        gpus_per_node=sz.gpus_per_node,
        gres=gres,
        mpi_plugin=facts.mpi_plugin,
    )
    spec = JobSpec(
        workflow_type=wf,
        category=4,
        model_name=plan.model_name,
        execution_scenario=req.execution_scenario,
        container_image=image,
        docker_image=image,
        script_path=str(work_dir / LAUNCH_SH),
        script_name=LAUNCH_SH,
        log_file_pattern=f"{paths.log_dir}/slurm-%j.out",
        success_patterns=b.PATTERNS["perf_sanity"][0],
        failure_patterns=b.PATTERNS["perf_sanity"][1],
        extra_files=[str(work_dir / f.name) for f in before],
        required_devices=sz.gpus,
        node_count=sz.nodes,
        slurm_params=params,
        slurm_env=env_raw,
        work_dir=str(work_dir),
        repo_root=req.repo_root,
        llm_models_root=models_root,
        warnings=warnings,
        **b.scenario_fields(req, paths, env, LAUNCH_SH, None, mounts_text),
    )
    rewrite = (
        {
            "repo_root": req.repo_root,
            "remote_repo_path": paths.project,
            "work_dir": str(work_dir),
            "remote_work_dir": paths.log_dir,
        }
        if paths.remote
        else None
    )
    step = b.SubmitStep(req.repo_root, before, args, work_dir / LAUNCH_SH, rewrite)
    return b.BuildResult(spec, [OutFile("job_spec.json", spec.to_json())], work_dir, warnings, step)


def build_eval_fallback(
    req: Request,
    sz: Sizing,
    env: SlurmEnv | None,
    env_raw: dict[str, Any] | None,
    facts: ClusterFacts | None,
    image: str,
    paths: Paths,
    models_root: str,
    site: SiteConfig,
    ask: Ask,
) -> BuildResult:
    """DESIGN decision 11: an eval wider than a node runs as an aggregated perf config."""
    from trtllm_script_builder import build as b
    from trtllm_script_builder.assemble import eval_cmd_with_local_model
    from trtllm_script_builder.resolve import mounts as mnt
    from trtllm_script_builder.resolve.commands import parse_eval

    assert facts is not None
    ev = parse_eval(req.eval_cmd or "")
    warnings = list(sz.warnings)
    home, project, models = b.base_mounts(req, env, paths, models_root, site, ask)
    mounts = mnt.assemble(home, project, models, [])
    cmd = eval_cmd_with_local_model(req, paths, mounts, models_root, warnings)
    model_path = parse_eval(cmd).model or ev.model or sz.model_name
    plan = plan_eval_fallback(
        model_name=sz.model_name,
        model_path=model_path,
        tp=ev.tp,
        pp=ev.pp,
        gpus_per_node=ev.gpus_per_node or facts.gpus_per_node,
        task=ev.task,
        work_dir=req.work_dir,  # submit.py runs locally (DESIGN 22), so the local path
    )
    warnings.append(
        f"eval needs {sz.required_devices} GPUs, more than one node's {ev.gpus_per_node or facts.gpus_per_node}: "
        "it runs through submit.py with accuracy.enable_accuracy_test; the submit.py versions read so far "
        "wire the accuracy runner for disaggregated configs only (DESIGN 23)"
    )
    return build_category4(
        req, "eval", plan, env, env_raw, facts, image, paths, models_root, site, ask, warnings
    )


def run_submit_step(result: BuildResult) -> list[Path]:
    """Write the files submit.py needs, run it, move its paths for remote, write job_spec."""
    from trtllm_script_builder.model.jobspec import OutFile
    from trtllm_script_builder.output.writer import write_atomically
    from trtllm_script_builder.process.submit_py import rewrite_remote_paths, run_submit_py

    step = result.submit
    assert step is not None

    work_dir = result.work_dir
    existed = work_dir.exists()
    saved = _snapshot(work_dir)
    try:
        written = write_atomically(work_dir, step.before)
        run_submit_py(Path(step.repo_root), step.args, cwd=Path(step.repo_root))
        if not step.launch_sh.is_file():
            raise BuildError(
                "repo_root",
                f"submit.py exited 0 but wrote no {step.launch_sh}",
                "check the repo's submit.py",
            )
        if step.rewrite:
            text = step.launch_sh.read_text()
            step.launch_sh.write_text(rewrite_remote_paths(text, **step.rewrite))
        # What submit.py wrote besides the launch script travels with it (e.g. test_list.txt).
        after = _snapshot(work_dir)
        made = sorted(
            n for n, (stamp, _) in after.items() if n not in saved or saved[n][0] != stamp
        )
        made = [n for n in made if n not in (step.launch_sh.name, "job_spec.json")]
        result.spec.extra_files = sorted(
            {*result.spec.extra_files, *(str(work_dir / n) for n in made)}
        )
        result.files = [OutFile("job_spec.json", result.spec.to_json())]
        return written + [step.launch_sh] + write_atomically(work_dir, result.files)
    except BaseException:
        _restore(work_dir, saved, existed)
        raise


def _snapshot(work_dir: Path) -> dict[str, tuple[int, bytes]]:
    """The top-level files of work_dir: modification time and bytes (a job folder is small)."""
    if not work_dir.is_dir():
        return {}
    return {
        e.name: (e.stat(follow_symlinks=False).st_mtime_ns, Path(e.path).read_bytes())
        for e in os.scandir(work_dir)
        if e.is_file(follow_symlinks=False)
    }


def _restore(work_dir: Path, saved: dict[str, tuple[int, bytes]], existed: bool) -> None:
    """Put work_dir back as it was: new entries removed, changed files given their old bytes."""
    import shutil

    if not work_dir.exists():
        return
    if not existed:
        shutil.rmtree(work_dir, ignore_errors=True)
        return
    for entry in os.scandir(work_dir):
        p = Path(entry.path)
        if entry.name in saved:
            if entry.is_file(follow_symlinks=False) and p.read_bytes() != saved[entry.name][1]:
                p.write_bytes(saved[entry.name][1])
        elif entry.is_dir(follow_symlinks=False):
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    for name, (_, data) in saved.items():
        if not (work_dir / name).exists():
            (work_dir / name).write_bytes(data)
