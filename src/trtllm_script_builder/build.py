"""request -> resolve -> render -> job_spec: the whole procedure of the seed, Steps 1 to 6."""

from __future__ import annotations

import os
import platform
import posixpath
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.jobspec import JobSpec, OutFile
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.model.site_config import SiteConfig
from trtllm_script_builder.model.slurm_env import SlurmEnv, load_slurm_env
from trtllm_script_builder.resolve import image as img
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.slurm import (
    ClusterFacts,
    cluster_facts,
    gpus_per_node,
    require_slurm_fields,
    time_limit_warnings,
)
from trtllm_script_builder.resolve.workflows import (
    size_bench_job,
    size_custom_job,
    size_eval_job,
    size_pytest_job,
)

SUFFIX = {"pytest": "auto_test", "custom": "custom", "eval": "eval", "bench": "bench"}
# The seed's table (callers depend on it), widened to what the real tools print (DESIGN 8).
PATTERNS: dict[str, tuple[list[str], list[str]]] = {
    "pytest": (["passed"], ["FAILED", "ERROR"]),
    "eval": (["accuracy:", "score:", "rouge1:"], ["AssertionError", "Error"]),
    "bench": (["token/s", "throughput", "tokens/sec", "Throughput"], ["Error", "Traceback"]),
    "perf_sanity": (["8_done_", "test completed successfully"], ["FAILED", "Error"]),
    "custom": (["Custom command finished with exit code 0"], ["Error", "Traceback"]),
}


def _stamp(path: str) -> tuple[str, int, int]:
    try:
        st = os.stat(path)
        return path, st.st_mtime_ns, st.st_size
    except OSError:
        return path, -1, -1


@lru_cache(maxsize=16)
def _slurm_env_at(stamp: tuple[str, int, int]) -> tuple[SlurmEnv, dict[str, Any]]:
    return load_slurm_env(stamp[0])


@lru_cache(maxsize=16)
def _properties_at(repo_root: str, stamp: tuple[str, int, int]) -> tuple[str, str]:
    return img.read_properties(repo_root)


def _refuse_ask(field: str, question: str) -> str:
    flag = "--" + field.replace("_", "-")
    key = {
        "llm_models_root": "default_llm_models_root",
        "models_path": "default_models_repo_host",
    }.get(field, field)
    raise BuildError(
        field,
        f"is not given and nothing supplies it ({question.lower()})",
        f"pass {flag} or set {key} in the site config",
    )


@dataclass
class SubmitStep:
    """Category 4: files submit.py needs first, its arguments, and the remote path rewrite."""

    repo_root: str
    before: list[OutFile]
    args: list[str]
    launch_sh: Path
    rewrite: dict[str, str] | None = None


@dataclass
class BuildResult:
    spec: JobSpec
    files: list[OutFile]
    work_dir: Path
    warnings: list[str] = field(default_factory=list)
    submit: SubmitStep | None = None


# ---------------------------------------------------------------- helpers


def sbatch_value(value: str, field: str) -> str:
    """A value on an `#SBATCH` line: sbatch splits at white space and knows no shell quoting."""
    m = _NOT_SBATCH.search(value)
    if m is not None:
        bad = m.group(0)
        raise BuildError(
            field,
            f"{value!r} holds {bad!r}, which an #SBATCH line cannot carry",
            "use a path without white space, quotes or backslashes",
        )
    return value.replace("%", "%%")


def _command_for(req: Request, wf: str) -> None:
    need = {
        "pytest": ("test_cmd",),
        "eval": ("eval_cmd",),
        "bench": ("bench_cmd",),
        "custom": ("custom_cmd", "custom_script"),
    }
    fields = need.get(wf, ())
    if fields and not any(getattr(req, f) for f in fields):
        flag = " or ".join("--" + f.replace("_", "-") for f in fields)
        raise BuildError(fields[0], f"is required for workflow_type {wf}", f"pass {flag}")


def is_perf_sanity(req: Request, wf: str) -> bool:
    if wf == "perf_sanity":
        return True
    if wf != "pytest":
        return False
    from trtllm_script_builder.resolve.perf.testid import is_perf_sanity_cmd

    return is_perf_sanity_cmd(req.test_cmd or "") or bool(req.perf_config_yaml)


@dataclass
class Paths:
    project: str
    log_dir: str
    home: str
    remote: bool

    def to_script(self, local_repo: str, local_path: str) -> str | None:
        """A local path under the repo, as the script sees it (remote: under remote_repo_path)."""
        if not self.remote:
            return local_path
        if mnt.covers(local_repo, local_path):
            return self.project + local_path[len(local_repo.rstrip("/")) :]
        return None


def _paths(req: Request, env: SlurmEnv | None, site: SiteConfig) -> Paths:
    if not req.is_remote:
        home = os.environ.get("HOME") or str(Path.home())
        return Paths(req.repo_root.rstrip("/") or "/", req.work_dir.rstrip("/") or "/", home, False)
    repo = req.remote_repo_path
    if not repo and site.default_user_root_dir:
        repo = posixpath.join(
            site.default_user_root_dir, posixpath.basename(req.repo_root.rstrip("/"))
        )
    if not repo:
        raise BuildError(
            "remote_repo_path",
            "is required for remote_slurm",
            "pass --remote-repo-path (or set default_user_root_dir in the site config)",
        )
    work = req.remote_work_dir or posixpath.join(
        repo, "work_dirs", posixpath.basename(req.work_dir.rstrip("/"))
    )
    if env and env.remote_home:  # measured on the cluster by `probe --ssh`
        return Paths(repo.rstrip("/"), work.rstrip("/"), env.remote_home.rstrip("/") or "/", True)
    cwd = env.remote_cwd if env else None
    if not cwd:
        raise BuildError(
            "remote_cwd",
            "slurm_env has no remote_cwd, so the cluster home is unknown",
            "add remote_cwd to slurm_env.json (probe --ssh HOST records it)",
        )
    home = posixpath.dirname(cwd.rstrip("/")) or "/"
    return Paths(repo.rstrip("/"), work.rstrip("/"), home, True)


def _image(
    req: Request, facts: ClusterFacts | None, env: SlurmEnv | None
) -> tuple[str, str | None]:
    """Step 1. Returns the canonical URI and, when it was looked up, the arch used."""
    if req.container_image:
        return req.container_image, None
    arch: str | None
    if not req.is_slurm:
        arch = img.normalise_arch(platform.machine()) or "x86_64"
    else:
        arch = facts.partition.arch if facts and facts.partition and not facts.fallback else None
        arch = img.normalise_arch(arch) or img.arch_from_device_type(req.device_type)
        if arch is None:
            arch = (
                img.normalise_arch(platform.machine())
                if req.execution_scenario == "local_slurm"
                else "x86_64"
            )
    # A batch of builds reads each input file once (keyed by mtime, so an edit is seen).
    text, source = _properties_at(
        req.repo_root, _stamp(os.path.join(req.repo_root, img.PROPERTIES))
    )
    return img.image_from_properties(text, arch or "x86_64", source), arch


_NOT_IMAGE = re.compile(r"[\s,]")
_NOT_SBATCH = re.compile(r"[\s\"'\\]")


def _check_image(image: str) -> None:
    if not image or _NOT_IMAGE.search(image):
        raise BuildError(
            "container_image",
            f"{image!r} is not an image reference",
            "give registry/path:tag or a .sqsh path",
        )


# ---------------------------------------------------------------- the build


def build(req: Request, site: SiteConfig | None = None, ask: mnt.Ask | None = None) -> BuildResult:
    site = site or SiteConfig()
    ask = ask or _refuse_ask
    wf = req.workflow()
    _command_for(req, wf)
    env: SlurmEnv | None = None
    env_raw: dict[str, Any] | None = None
    if req.is_slurm:
        require_slurm_fields(req)
        assert req.slurm_env_file is not None
        env, env_raw = _slurm_env_at(_stamp(req.slurm_env_file))
    perf = is_perf_sanity(req, wf)
    if wf == "pytest" and not perf and req.test_cmd:
        req = _timeout_suffix_to_flag(req, req.test_cmd)
    if perf and not req.is_slurm:
        raise BuildError(
            "execution_scenario",
            "perf-sanity runs through the repo's submit.py, which needs Slurm",
            "use local_slurm or remote_slurm",
        )
    facts = cluster_facts(req, env) if req.is_slurm else None
    gpn, gpn_source = (
        (facts.gpus_per_node, facts.gpus_source) if facts else gpus_per_node(req, None)
    )

    limit_notes = time_limit_warnings(req, facts) if facts else []
    common = _common(req, facts, env, site, ask)
    if perf:
        from trtllm_script_builder.render.category4 import build_category4, plan_perf_sanity

        plan = plan_perf_sanity(
            repo_root=req.repo_root,
            test_cmd=req.test_cmd,
            perf_config_yaml=req.perf_config_yaml,
            perf_test_name=req.perf_test_name,
            model_name=req.model_name,
            remote=req.is_remote,
        )
        return build_category4(req, wf, plan, env, env_raw, facts, *common, site, ask, limit_notes)
    sizing = {
        "pytest": size_pytest_job,
        "eval": size_eval_job,
        "bench": size_bench_job,
        "custom": size_custom_job,
    }[wf](req, gpn, gpn_source)
    available = req.env_check.available_gpus if req.env_check and not req.is_slurm else None
    if available is not None and sizing.required_devices > available:
        raise BuildError(
            "required_devices",
            f"{sizing.required_devices} GPUs are more than this machine's {available} (env_check.available_gpus)",
            "run it on Slurm, or on a machine with more GPUs",
        )
    sizing.warnings += limit_notes
    if sizing.fallback_to_perf:
        from trtllm_script_builder.render.category4 import build_eval_fallback

        if not req.is_slurm:
            raise BuildError(
                "required_devices",
                f"{sizing.required_devices} GPUs (tp x pp of eval_cmd) exceed the {gpn} GPUs of this machine; the multi-node fallback needs Slurm",
                "lower --tp_size/--pp_size or use a Slurm scenario",
            )
        return build_eval_fallback(req, sizing, env, env_raw, facts, *common, site, ask)

    from trtllm_script_builder.assemble import assemble

    return assemble(req, wf, env, env_raw, facts, gpn, sizing, *common, site, ask)


def _timeout_suffix_to_flag(req: Request, test_cmd: str) -> Request:
    """A test-list line pasted whole: its ` TIMEOUT (N)` (minutes) becomes pytest's --timeout."""
    from trtllm_script_builder.resolve.perf.testid import strip_timeout

    cmd, minutes = strip_timeout(test_cmd)
    if minutes is None:
        return req
    return req.model_copy(update={"test_cmd": f"{cmd} --timeout={minutes * 60}"})


def _common(
    req: Request, facts: ClusterFacts | None, env: SlurmEnv | None, site: SiteConfig, ask: mnt.Ask
) -> tuple[str, Paths, str]:
    """Steps 1 and 2's inputs every category needs: image, paths, models root."""
    image, _arch = _image(req, facts, env)
    _check_image(image)
    paths = _paths(req, env, site)
    models_root = req.llm_models_root or site.default_llm_models_root
    if not models_root:
        models_root = ask("llm_models_root", "Models root inside the container (LLM_MODELS_ROOT)")
    mnt.check_mount_path(models_root, "llm_models_root")
    return image, paths, models_root


def base_mounts(
    req: Request,
    env: SlurmEnv | None,
    paths: Paths,
    models_root: str,
    site: SiteConfig,
    ask: mnt.Ask,
) -> tuple[mnt.Mount, mnt.Mount, list[mnt.Mount]]:
    field_home = "remote_cwd" if paths.remote else "HOME"
    home = mnt.Mount(mnt.check_mount_path(paths.home, field_home), paths.home, field_home)
    project_field = "remote_repo_path" if paths.remote else "repo_root"
    project = mnt.Mount(
        mnt.check_mount_path(paths.project, project_field), paths.project, project_field
    )
    models = mnt.models_mounts(
        checkpoint_path=req.checkpoint_path,
        models_path=req.models_path,
        slurm_env_mounts=env.mounts if env else None,
        default_models_repo=req.env_check.default_models_repo if req.env_check else None,
        site_models_repo=site.default_models_repo_host,
        llm_models_root=models_root,
        ask=ask,
    )
    return home, project, models


def scenario_fields(
    req: Request,
    paths: Paths,
    env: SlurmEnv | None,
    script: str,
    container_name: str | None,
    mounts_text: str,
) -> dict[str, Any]:
    """Remote fields for remote_slurm only; persistent-mode fields for local_slurm only."""
    if paths.remote:
        return {
            "remote_repo_path": paths.project,
            "remote_work_dir": paths.log_dir,
            "remote_script_path": posixpath.join(paths.log_dir, script),
            "ssh_host": env.ssh_host if env else None,
        }
    if (
        req.execution_scenario == "local_slurm"
        and req.persistent_mode is not False
        and container_name
    ):
        return {
            "persistent_mode": True,
            "container_name": container_name,
            "container_mounts": mounts_text,
        }
    return {}


def finish(result: BuildResult) -> list[Path]:
    """Write the result; Category 4 runs submit.py first and undoes everything on failure."""
    from trtllm_script_builder.output.writer import write_atomically

    def unwritable(exc: OSError) -> BuildError:
        return BuildError(
            "work_dir",
            f"cannot write into {result.work_dir} ({exc.strerror})",
            "give a folder you can write to",
        )

    try:
        not_a_folder = result.work_dir.exists() and not result.work_dir.is_dir()
    except OSError as exc:  # a name too long, a parent that is a file
        raise unwritable(exc) from None
    if not_a_folder:
        raise BuildError(
            "work_dir", f"{result.work_dir} exists and is not a folder", "give a folder path"
        )
    if result.submit is None:
        try:
            return write_atomically(result.work_dir, result.files)
        except OSError as exc:
            raise unwritable(exc) from None
    from trtllm_script_builder.render.category4 import run_submit_step

    return run_submit_step(result)
