"""resolve(request, cluster, site, ask) -> ResolvedJob: every decision of a build, made once.

Reads input files (the image table, test files, perf configs, the models folder) but writes
nothing and starts no process. The renderers read only what this returns.
"""

from __future__ import annotations

import os
import platform
import posixpath
import shlex
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtllm_script_builder.errors import BuildError, BuildErrors, refusal
from trtllm_script_builder.model.jobspec import OutFile, SlurmParams
from trtllm_script_builder.model.registry import WORKFLOWS
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.model.site_config import SiteConfig
from trtllm_script_builder.model.slurm_env import SlurmEnv
from trtllm_script_builder.model.values import MAX_ARG_BYTES, check_image, check_sbatch_value
from trtllm_script_builder.resolve import backend as be
from trtllm_script_builder.resolve import image as img
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.commands import (
    CALL_ENDS,
    find_model_dir,
)
from trtllm_script_builder.resolve.compile import (
    check_device_type,
    place_chain,
    plan_chain,
    refuse_for_submit_py,
)
from trtllm_script_builder.resolve.resolved import (
    Cluster,
    Paths,
    ResolvedJob,
    SubmitPlan,
)
from trtllm_script_builder.resolve.slurm import (
    ClusterFacts,
    cluster_facts,
    cpu_partition,
    find_partition,
    gpus_per_node,
    node_share,
    require_slurm_fields,
    time_limit_warnings,
)
from trtllm_script_builder.resolve.stamp import file_stamp
from trtllm_script_builder.resolve.workflow import (
    Draft,
    Sizing,
    Workflow,
    command_fields,
    workflow,
    workflows,
)

if TYPE_CHECKING:
    from trtllm_script_builder.resolve.perf.plan import PerfPlan

LAUNCH_SH = "slurm_launch.sh"
TEST_LIST = "test_list.txt"  # submit.py writes the id it runs there, beside the launch script
# What the launch script of the repo's submit.py prints when it passed or failed, whichever
# workflow it runs for (decision log-patterns).
SUBMIT_PY_PATTERNS = (
    (
        "Aggregated test completed successfully",
        "Disagg server and benchmark completed successfully",
    ),
    ("FAILED", "Error"),
)


def refuse_ask(field: str, question: str) -> str:
    """The asker when nobody can answer: the field's refusal line."""
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


def _once(ask: mnt.Ask) -> mnt.Ask:
    """A field is asked at most once per build; a second need gets the first answer."""
    answers: dict[str, str] = {}

    def ask_once(field: str, question: str) -> str:
        if field not in answers:
            answers[field] = ask(field, question)
        return answers[field]

    return ask_once


def check_request(req: Request) -> str:
    """The request's workflow, once its command and (on Slurm) its cluster fields are present."""
    wf = req.workflow()
    fields = workflow(wf).commands
    problems: list[BuildError] = []
    missing = fields and not any(getattr(req, f) for f in fields)
    if missing and not req.workflow_type:
        # Nothing says what to run: every command field is named, not only the default's.
        names = [f for f in command_fields() if f != "custom_script"]
        problems.append(
            BuildError(
                "test_cmd",
                "no command given",
                f"give one of {', '.join(names)} (or custom_script, or perf_config_yaml for "
                "perf-sanity)",
            )
        )
    elif missing:
        flag = " or ".join("--" + f.replace("_", "-") for f in fields)
        problems.append(
            BuildError(fields[0], f"is required for workflow_type {wf}", f"pass {flag}")
        )
    else:
        _one_command(req)
    if be.queued(req):
        problems += require_slurm_fields(req)
    if problems:
        raise refusal(problems)
    return wf


_QUOTES = frozenset("'\"\\")


@lru_cache(maxsize=4)
def _tool_workflows(names: tuple[str, ...]) -> dict[str, Workflow]:  # keyed by what is registered
    """The workflows that run a tool of their own, by tool: the field its command belongs in."""
    return {wf.tool: wf for wf in workflows() if wf.tool and wf.commands}


def _shell_words(cmd: str) -> list[str] | None:
    """The command's shell words; None when its quotes do not balance."""
    try:
        # Without quotes str.split gives shlex's words, much faster (build-many calls this often).
        return cmd.split() if not _QUOTES.intersection(cmd) else shlex.split(cmd)
    except ValueError:
        return None


def _tools(cmd: str, known: dict[str, Workflow]) -> set[str]:
    """The TensorRT-LLM tools a command line runs (`python -m pytest` counts as pytest)."""
    if not any(tool in cmd for tool in known):
        return set()
    words = _shell_words(cmd)
    if words is None:
        words = cmd.split()
    return {posixpath.basename(w) for w in words} & known.keys()


def _one_command(req: Request) -> None:
    """One command per request, in the field of the tool it runs: a bench job built from a
    pytest line, or a second command dropped without a word, would surprise only later."""
    given = [f for f in command_fields() if getattr(req, f)]
    if len(given) > 1:
        raise BuildError(
            given[1],
            f"is given together with {given[0]}, but a request builds one job",
            f"keep one of {' and '.join(given)} (build-many builds several jobs)",
        )
    known = _tool_workflows(WORKFLOWS.names())
    for own, wf in known.items():
        field = wf.commands[0]
        cmd = getattr(req, field)
        if not cmd:
            continue
        tools = _tools(cmd, known)
        if tools and own not in tools:
            tool = sorted(tools)[0]
            right = known[tool].commands[0]
            raise BuildError(
                field,
                f"runs {tool}, which is a {right} command",
                f"pass it as --{right.replace('_', '-')}",
            )
        _runs_its_tool(field, own, cmd, wf.model_options)


def _runs_its_tool(field: str, own: str, cmd: str, options: tuple[str, ...]) -> None:
    """Decision command-runs-its-tool: a command field runs its own tool, once for pytest, each call
    with the model the tool requires. A misspelt tool, a bare test id or a second pytest call would
    only fail in the queue (command not found, a usage error, one id's results dropped)."""
    ws = _shell_words(cmd)
    if ws is None:
        return  # the sizing step names the unbalanced quote
    names = [posixpath.basename(w) for w in ws]
    if own not in names:
        from difflib import get_close_matches

        # A near miss is a typo; another program altogether (a wrapper script) is the
        # user's choice and is sized from its options with a warning
        # (decision command-runs-its-tool).
        words = [n for n in names if n and not n.startswith("-")]
        near = next((w for w in words if get_close_matches(w, [own], n=1, cutoff=0.8)), None)
        if near is not None:
            raise BuildError(
                field,
                f"runs {near}, not {own}",
                f"did you mean {own}? correct the name in {field}",
            )
        return
    if field == "test_cmd" and names.count(own) > 1:
        raise BuildError(
            field,
            f"runs pytest {names.count(own)} times, but a request builds one job",
            "give every test id to one pytest call, or list them for build-many",
        )
    if not options:  # the options the tool refuses to start without
        return
    starts = [i for i, n in enumerate(names) if n == own]
    for k, start in enumerate(starts):
        call = ws[start : starts[k + 1] if k + 1 < len(starts) else len(ws)]
        call = call[: next((j for j, w in enumerate(call) if w in CALL_ENDS), len(call))]
        if not any(w in options or w.startswith("--model=") for w in call):
            raise BuildError(
                field,
                f"a {own} call names no --model, which {own} requires",
                f"add --model <Hugging Face id or checkpoint path> to every {own} call",
            )


def _fits_the_partition(req: Request, facts: ClusterFacts, nodes: int, gpn: int) -> None:
    """A job wider than its partition would pend forever (sbatch may even take it): refused
    with what the partition holds, when the cluster file says how many nodes it has."""
    part = facts.partition
    count = part.nodes if part is not None else None
    if part is None or count is None or not count.isdigit() or not 0 < int(count) < nodes:
        return
    field = "node_count" if (req.node_count or 0) > int(count) else "required_devices"
    raise BuildError(
        field,
        f"the job needs {nodes} nodes of {gpn} GPUs, but partition {part.name} has {count}",
        f"ask for at most {int(count) * gpn} GPUs ({count} node{'s' if count != '1' else ''}), "
        "or pick a partition with "
        "more nodes",
    )


def _check_host_paths(req: Request, cluster: Cluster | None) -> None:
    """Host paths the build or the job reads must exist, and the partition and account must be
    the cluster's: typos found now, not in the queue, and all at once.

    Over ssh the models paths are the cluster's, so only the local checkout is checked.
    """
    problems = []
    if not os.path.isdir(req.repo_root):
        problems.append(
            BuildError(
                "repo_root",
                f"{req.repo_root} is not a folder",
                "pass the path of your TensorRT-LLM checkout with --repo-root",
            )
        )
    else:
        _repo_root_is_the_top(req.repo_root)
        if os.path.normpath(req.work_dir) == os.path.normpath(req.repo_root) or (
            os.path.isdir(req.work_dir) and os.path.samefile(req.work_dir, req.repo_root)
        ):
            problems.append(
                BuildError(
                    "work_dir",
                    f"is the checkout {req.repo_root} itself, so the job's files would be "
                    "written among its sources",
                    f"give the job a folder of its own, e.g. {req.repo_root}/work_dirs/<name>",
                )
            )
    if not be.over_ssh(req.execution_scenario):
        if req.models_path and not os.path.isdir(req.models_path):
            problems.append(
                BuildError(
                    "models_path",
                    f"{req.models_path} is not a folder on this machine",
                    "pass the host folder that holds the models with --models-path",
                )
            )
        if req.checkpoint_path and not os.path.exists(req.checkpoint_path):
            problems.append(
                BuildError(
                    "checkpoint_path",
                    f"{req.checkpoint_path} does not exist on this machine",
                    "pass the path of an existing checkpoint with --checkpoint-path",
                )
            )
    if cluster is not None and be.queued(req) and req.partition and req.account:
        try:  # the names are checked again with the partition's facts, below
            find_partition(req, cluster.env)
        except BuildErrors as errs:
            problems += errs.errors
        except BuildError as err:
            problems.append(err)
    if problems:
        order = list(Request.model_fields)
        raise refusal(sorted(problems, key=lambda e: order.index(e.field)))


def request_problems(req: Request, cluster: Cluster | None) -> list[BuildError]:
    """Every problem found before the job is sized: its command, its Slurm fields, its host
    paths and its cluster's names, a line each (a request with several mistakes takes one
    round trip, not one per mistake)."""
    problems: list[BuildError] = []
    for check in (check_request, lambda r: _check_host_paths(r, cluster)):
        try:
            check(req)
        except BuildErrors as errs:
            problems += errs.errors
        except BuildError as err:
            problems.append(err)
    return problems


@lru_cache(maxsize=64)  # build-many asks once per job about the same checkout
def _repo_root_is_the_top(repo_root: str) -> None:
    """A folder inside the checkout (its tests/integration/defs, where test ids start) is
    refused naming the top: the image table, submit.py and the install are read from the top."""
    if os.path.isdir(os.path.join(repo_root, "tests", "integration", "defs")):
        return
    here = os.path.abspath(repo_root)
    up = os.path.dirname(here)
    while up != here:
        if os.path.isdir(os.path.join(up, "tests", "integration", "defs")):
            raise BuildError(
                "repo_root",
                f"{repo_root} is a folder inside the TensorRT-LLM checkout {up}",
                f"pass the checkout's top folder: --repo-root {shlex.quote(up)}",
            )
        here, up = up, os.path.dirname(up)


# ---------------------------------------------------------------- the entry point


def resolve(
    req: Request,
    cluster: Cluster | None,
    site: SiteConfig,
    ask: mnt.Ask | None = None,
    *,
    checked: bool = False,
) -> ResolvedJob:
    """Everything a build decides; `checked` when the caller found no request_problems."""
    ask = _once(ask or refuse_ask)
    wf = req.workflow() if checked else check_request(req)
    if not checked:
        _check_host_paths(req, cluster)
    env = cluster.env if cluster else None
    flow = workflow(wf)
    perf = flow.submit_py(req)
    if not perf:
        req = flow.adjust(req)
    slurm = be.queued(req)
    if perf and not slurm:
        raise BuildError(
            "execution_scenario",
            "perf-sanity runs through the repo's submit.py, which needs Slurm",
            f"use {be.scenarios_where(lambda b, _: b.queued)}",
        )
    facts = cluster_facts(req, env) if slurm else None
    gpn, gpn_source = (
        (facts.gpus_per_node, facts.gpus_source) if facts else gpus_per_node(req, None)
    )
    limit_notes = time_limit_warnings(req, facts) if slurm else []
    limit_notes += _unused_field_warnings(req)
    if req.gpus_per_node and gpn != req.gpus_per_node:
        # Decision gpus-per-node: what the cluster or this machine reports wins over the request's.
        limit_notes.append(
            f"gpus_per_node {req.gpus_per_node} is not used: {gpn_source} reports {gpn}"
        )
    image, arch_image = _image(req, facts, site, limit_notes)
    paths = _paths(req, env, site)
    models_root = req.llm_models_root or site.default_llm_models_root
    if not models_root:
        models_root = ask("llm_models_root", "Models root inside the container (LLM_MODELS_ROOT)")
    mnt.check_mount_path(models_root, "llm_models_root")
    base = _Base(req, cluster, facts, image, arch_image, paths, models_root, site, ask)
    if perf:
        from trtllm_script_builder.resolve.perf.plan import plan_perf_sanity

        refuse_for_submit_py(req)

        plan = plan_perf_sanity(
            repo_root=req.repo_root,
            test_cmd=req.test_cmd,
            perf_config_yaml=req.perf_config_yaml,
            perf_test_name=req.perf_test_name,
            model_name=req.model_name,
            remote=be.over_ssh(req.execution_scenario),
        )
        return _category4(base, wf, plan, base.mounts(), limit_notes)
    assert flow.size is not None, f"workflow {wf} has no sizing and no submit.py plan"
    sizing = flow.size(req, gpn, gpn_source)
    available = req.env_check.available_gpus if req.env_check and not slurm else None
    if available is not None and sizing.required_devices > available:
        raise BuildError(
            "required_devices",
            f"{sizing.required_devices} GPUs are more than this machine's {available} (env_check.available_gpus)",
            "run it on Slurm, or on a machine with more GPUs",
        )
    sizing.warnings += limit_notes
    return _job(base, flow, sizing, gpn)


class _Base:
    """Steps 1 and 2's results every category needs, and the mounts made from them once."""

    def __init__(
        self,
        req: Request,
        cluster: Cluster | None,
        facts: ClusterFacts | None,
        image: str,
        script_image: str,
        paths: Paths,
        models_root: str,
        site: SiteConfig,
        ask: mnt.Ask,
    ) -> None:
        self.req, self.cluster, self.facts = req, cluster, facts
        self.image, self.script_image = image, script_image
        self.paths, self.models_root, self.site, self.ask = paths, models_root, site, ask
        self._mounts: tuple[mnt.Mount, mnt.Mount, list[mnt.Mount]] | None = None

    @property
    def env(self) -> SlurmEnv | None:
        return self.cluster.env if self.cluster else None

    def mounts(self) -> tuple[mnt.Mount, mnt.Mount, list[mnt.Mount]]:
        """Home, project and model mounts (the model mounts may ask for models_path)."""
        if self._mounts is None:
            req, paths = self.req, self.paths
            field_home = "remote_cwd" if paths.remote else "HOME"
            home = mnt.Mount(mnt.check_mount_path(paths.home, field_home), paths.home, field_home)
            project_field = "remote_repo_path" if paths.remote else "repo_root"
            project = mnt.Mount(
                mnt.check_mount_path(paths.project, project_field), paths.project, project_field
            )
            models = mnt.models_mounts(
                checkpoint_path=req.checkpoint_path,
                models_path=req.models_path,
                slurm_env_mounts=self.env.mounts if self.env else None,
                default_models_repo=req.env_check.default_models_repo if req.env_check else None,
                site_models_repo=self.site.default_models_repo_host,
                llm_models_root=self.models_root,
                ask=self.ask,
            )
            self._mounts = home, project, models
        return self._mounts

    def common(self, mounts: list[mnt.Mount]) -> dict[str, Any]:
        """The fields every category's job takes from Steps 1 and 2."""
        return {
            "scenario": self.req.execution_scenario,
            "image": self.image,
            "repo_root": self.req.repo_root,
            "work_dir": self.req.work_dir,
            "paths": self.paths,
            "models_root": self.models_root,
            "mounts": tuple(mounts),
            "mounts_text": ",".join(m.entry() for m in mounts),
        }

    def slurm(
        self,
        *,
        nodes: int,
        ntasks: int,
        ntasks_per_node: int,
        gpus_per_node: int,
        gpus: int,
        mpi_plugin: str | None = None,
    ) -> dict[str, Any]:
        """The fields of a Slurm job: the allocation (GRES only where the partition has it,
        for the GPUs the job uses: decision gpu-gres-request) and what depends on the scenario."""
        req, facts = self.req, self.facts
        assert facts is not None and req.partition and req.account
        if req.node_count is not None and req.node_count < nodes:
            raise BuildError(
                "node_count",
                f"{req.node_count} asked, but the job needs {nodes} nodes of {gpus_per_node} GPUs",
                f"pass --node-count {nodes}, or drop it",
            )
        _fits_the_partition(req, facts, max(nodes, req.node_count or 0), gpus_per_node)
        plan = SlurmParams(
            partition=req.partition,
            account=req.account,
            time_limit=req.time_limit,
            nodes=nodes,
            ntasks=ntasks,
            ntasks_per_node=ntasks_per_node,
            gpus_per_node=gpus_per_node,
            gres=f"gpu:{gpus}" if facts.gres else None,
            mpi_plugin=mpi_plugin or facts.mpi_plugin,
        )
        return {
            "slurm": plan,
            "script_image": self.script_image,
            "cluster_raw": self.cluster.raw if self.cluster else None,
            "ssh_host": self.env.ssh_host if self.env and self.paths.remote else None,
        }


# ---------------------------------------------------------------- Steps 1 and 2


@lru_cache(maxsize=16)
def _properties_at(repo_root: str, stamp: tuple[str, int, int]) -> tuple[str, str]:
    return img.read_properties(repo_root)


def _image(
    req: Request, facts: ClusterFacts | None, site: SiteConfig, notes: list[str]
) -> tuple[str, str]:
    """Step 1: the canonical image reference, and the form the Slurm script takes."""
    # The repo's properties file is checked as the request is: a leading `-` would be read as
    # an option by docker run, enroot or pyxis.
    if req.container_image:
        _image_fits_arch(req, facts, check_image(req.container_image))
    image = check_image(req.container_image or _image_for_arch(req, facts, notes))
    return image, img.enroot_uri(image) if site.enroot_uri_rewrite else image


def _unused_field_warnings(req: Request) -> list[str]:
    """A field the scenario never reads: given for another scenario (a shared request file, a
    scenario changed by a flag), so the job will not be what the field says
    (decision unread-field-warning)."""
    return [
        f"{field} is not used by {req.execution_scenario} jobs (only {' and '.join(where)}); "
        "it is left out"
        for field, where in be.scenario_fields().items()
        if getattr(req, field) is not None and req.execution_scenario not in where
    ]


def _known_arch(req: Request, facts: ClusterFacts | None) -> tuple[str | None, str]:
    """The job's CPU architecture where something reports it, and what reports it."""
    if not be.queued(req):
        return img.normalise_arch(platform.machine()), "this machine"
    part = facts.partition if facts and not facts.fallback else None
    if part is not None and part.arch:
        return img.normalise_arch(part.arch), f"partition {part.name}"
    return None, ""


def _image_fits_arch(req: Request, facts: ClusterFacts | None, image: str) -> None:
    """Decision image-arch-mismatch: an image whose name says it is for the other architecture
    cannot start there (exec format error), so it is refused before the queue."""
    arch, where = _known_arch(req, facts)
    named = img.arch_in_name(image)
    if arch not in img.ARCH_KEYS or named is None or named == arch:
        return  # an architecture the tool has no image for is not judged either
    raise BuildError(
        "container_image",
        f"{image} is named for {named}, but {where} is {arch}",
        f"pass an {arch} image, or leave container_image out to take "
        f"{img.ARCH_KEYS.get(arch, 'the image')} from {img.PROPERTIES}",
    )


def _image_for_arch(req: Request, facts: ClusterFacts | None, notes: list[str]) -> str:
    arch, _ = _known_arch(req, facts)
    if not be.queued(req):
        arch = arch or "x86_64"
    else:
        part = facts.partition if facts else None
        gpu = img.gres_gpu_type(part.gres) if part else None
        # The partition's GPUs say it before the request's device type (decision image-by-arch).
        arch = arch or img.arch_from_device_type(gpu) or img.arch_from_device_type(req.device_type)
        if arch is None:
            # a cluster reached over ssh is taken for x86_64; the one this machine is on, for its
            arch = (
                "x86_64"
                if be.over_ssh(req.execution_scenario)
                else img.normalise_arch(platform.machine())
            )
            where = f"partition {part.name}" if part else "the partition"
            notes.append(
                f"container_image: the CPU architecture of {where} is unknown (the cluster file "
                f"records none, and no device_type says it), so the {arch} image is taken; pass "
                "--device-type, or --container-image, or probe the cluster again"
            )
    # A batch of builds reads the table once (keyed by mtime, so an edit is seen).
    text, source = _properties_at(
        req.repo_root, file_stamp(os.path.join(req.repo_root, img.PROPERTIES))
    )
    return img.image_from_properties(text, arch or "x86_64", source)


def _paths(req: Request, env: SlurmEnv | None, site: SiteConfig) -> Paths:
    if not be.over_ssh(req.execution_scenario):
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
            f"is required for {req.execution_scenario}",
            "pass --remote-repo-path (or set default_user_root_dir in the site config)",
        )
    work = req.remote_work_dir or posixpath.join(
        repo, "work_dirs", posixpath.basename(req.work_dir.rstrip("/"))
    )
    if env and not (env.ssh_host or env.remote_cwd or env.remote_home):
        # A file `probe` wrote without --ssh: the cluster this machine is on, not a remote one.
        raise BuildError(
            "slurm_env_file",
            f"{req.slurm_env_file} names no ssh_host, so it describes the cluster you are on, "
            "not a remote one",
            "probe the remote cluster (trtllm-script-builder probe --ssh HOST --output "
            "slurm_env_remote.json) and pass that file with --slurm-env-file",
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


# ---------------------------------------------------------------- Categories 1-3, 5, 6


def _job(base: _Base, flow: Workflow, sz: Sizing, gpn: int) -> ResolvedJob:
    req, paths = base.req, base.paths
    name = f"{sz.model_name}_{flow.suffix}"
    draft = Draft(req, paths, name, sz, base.models_root, list(sz.warnings))
    flow.prepare(draft)  # the workflow's exports, mounts and files come first
    warnings, exports, extra_files, extras = (
        draft.warnings,
        draft.exports,
        draft.extra_files,
        draft.extras,
    )
    home, project, models = base.mounts()
    wheel = ""
    check_device_type(req, base.facts.partition if base.facts else None)
    chain = plan_chain(
        req,
        image=base.image,
        script_image=base.script_image,
        log_dir=paths.log_dir,
        home=home,
        project=project,
        model_name=sz.model_name,
    )
    if chain is not None:
        # Sent with a remote job, submitted before it (decision compile-chain).
        extra_files += [str(Path(req.work_dir) / s.script) for s in chain.steps()]
        if chain.image_import is not None:
            warnings += chain.image_import.warnings
    if chain is not None and chain.compile is not None:
        # The test job installs what the compile job built (decision compile-chain).
        folder = chain.compile.wheel_dir
        extras.append(mnt.Mount(folder, folder, "wheel_dir"))
        exports.append(("WHEEL_DIR", folder))
    elif not req.skip_install and req.wheel:
        wheel = _wheel(req, paths, extras, extra_files)
        exports.append(("WHEEL_PATH", wheel))
    elif not req.skip_install and not be.over_ssh(req.execution_scenario):
        warnings += _install_warnings(req, base.facts)
    mounts = mnt.assemble(home, project, models, extras)
    flow.command(draft, mounts)
    _fits_one_argument(exports)
    job = ResolvedJob(
        workflow=flow.name,
        category=1,
        model_name=sz.model_name,
        name=name,
        container_name=name if be.queued(req) else docker_container_name(name, req.work_dir),
        script_image=base.image,
        required_devices=sz.required_devices,
        nodes=sz.nodes,
        success_patterns=flow.patterns[0],
        failure_patterns=flow.patterns[1],
        exports=tuple(exports),
        run_cmd=draft.run_cmd,
        prep_cmd=draft.prep_cmd,
        junit_file=draft.junit,
        install=not req.skip_install,
        wheel=wheel,
        mpi=sz.mpi,
        launcher=sz.launcher,
        extra_files=tuple(extra_files),
        warnings=tuple(warnings),
        **base.common(mounts),
    )
    if not be.queued(req):
        return job
    check_sbatch_value(paths.log_dir, work_dir_field(paths))
    slurm = base.slurm(
        nodes=sz.nodes,
        ntasks=sz.ntasks,
        ntasks_per_node=sz.ntasks_per_node,
        gpus_per_node=gpn,
        gpus=sz.required_devices // sz.nodes,  # GRES counts per node
    )
    share = node_share(
        base.facts.partition if base.facts else None,
        -(-sz.required_devices // sz.nodes),
        gpn,
        sz.ntasks_per_node,
    )
    slurm["slurm"] = slurm["slurm"].model_copy(
        update={"cpus_per_task": share.cpus_per_task, "mem": share.mem}
    )
    warnings = [*job.warnings, *share.warnings]
    if chain is not None:
        part = base.facts.partition if base.facts else None
        cpus = share.cpus_per_task and share.cpus_per_task * sz.ntasks_per_node
        chain, notes = place_chain(chain, cpu_partition(base.env, part), part, cpus, share.mem)
        warnings += notes
    if chain is not None and chain.image_import is not None:
        # the imported file (decision image-import-cache)
        slurm["script_image"] = chain.image_import.sqsh
    return replace(
        job,
        category=flow.category,
        run_script=draft.run_script,
        # A chain is submitted with sbatch dependencies; a held allocation has none.
        persistent=req.execution_scenario in be.backend_of(req.execution_scenario).persistent
        and req.persistent_mode is not False
        and chain is None,
        chain=chain,
        warnings=tuple(warnings),
        **slurm,
    )


def _wheel(req: Request, paths: Paths, extras: list[mnt.Mount], extra_files: list[str]) -> str:
    """The wheel as the job sees it; its folder is mounted (remote: shipped when outside the
    repo, like a custom script)."""
    assert req.wheel is not None
    if not req.wheel.endswith(".whl") or not Path(req.wheel).is_file():
        raise BuildError(
            "wheel",
            f"{req.wheel} is not a wheel file (.whl) on this machine",
            "give the path of a built TensorRT-LLM wheel, e.g. build/tensorrt_llm-*.whl",
        )
    in_job = paths.to_script(req.repo_root, req.wheel)
    if in_job is None:
        extra_files.append(req.wheel)
        in_job = posixpath.join(paths.log_dir, posixpath.basename(req.wheel))
    parent = posixpath.dirname(in_job)
    extras.append(mnt.Mount(mnt.check_mount_path(parent, "wheel"), parent, "wheel"))
    return in_job


def work_dir_field(paths: Paths) -> str:
    return "remote_work_dir" if paths.remote else "work_dir"


def _install_warnings(req: Request, facts: ClusterFacts | None) -> list[str]:
    """Decision install-step: a local checkout whose bindings are missing or of another
    architecture."""
    from trtllm_script_builder.resolve.checkout import bindings_warnings

    return bindings_warnings(req.repo_root, *_known_arch(req, facts))


def docker_container_name(name: str, work_dir: str) -> str:
    """`<model>_<suffix>_<8 hex digits of the job folder>`: two jobs of one model built into
    different folders may run side by side; docker refuses a name in use
    (decision local-docker-run)."""
    import hashlib

    digest = hashlib.sha256(os.path.abspath(work_dir).encode()).hexdigest()[:8]
    return f"{name}_{digest}"


_EXPORT_FIELD = {
    "TEST_CMD": "test_cmd",
    "EVAL_CMD": "eval_cmd",
    "BENCH_CMD": "bench_cmd",
    "PREP_CMD": "bench_cmd",
    "CUSTOM_COMMAND": "custom_cmd",
    "CUSTOM_ENV": "custom_env",
}


def _fits_one_argument(exports: list[tuple[str, str]]) -> None:
    for name, value in exports:
        size = len(f"{name}={value}".encode())
        if size >= MAX_ARG_BYTES:
            raise BuildError(
                _EXPORT_FIELD.get(name, name.lower()),
                f"is {size} bytes as the job passes it, over the kernel's {MAX_ARG_BYTES}-byte "
                "limit for one argument",
                "shorten it, or put it in a script and use custom_script",
            )


def local_copy(
    hf_id: str,
    paths: Paths,
    mounts: list[mnt.Mount],
    models_root: str,
    tool: str,
    warnings: list[str],
) -> str | None:
    """The container path of a Hugging Face id's copy under the models mount (depth 3), or
    None with a warning: the compute node would download it."""
    root = models_root.rstrip("/") or "/"
    host_root = next((m.host for m in mounts if m.target.rstrip("/") == root), None)
    if paths.remote or host_root is None:
        warnings.append(
            f"--model {hf_id} is a Hugging Face id that could not be looked up locally; it will be downloaded unless the job finds it"
        )
        return None
    found = find_model_dir(Path(host_root), hf_id)
    if found is None:
        warnings.append(
            f"--model {hf_id} was not found under {host_root} (depth 3); {tool} will try to download it"
        )
        return None
    return mnt.host_to_container(mounts, str(found)) or str(found)


# ---------------------------------------------------------------- Category 4


def _submit_py_knows(option: str, req: Request, *, quoted: bool = True) -> bool:
    """Older submit.py versions refuse options they lack, so one is passed only when known;
    `quoted` False: whether it writes `#SBATCH <option>` into the launch script."""
    path = Path(req.repo_root) / "jenkins" / "scripts" / "perf" / "local" / "submit.py"
    try:
        text = path.read_text(errors="replace")
        return f'"{option}"' in text if quoted else f"#SBATCH {option}" in text
    except OSError:
        return False


def _category4(
    base: _Base,
    wf: str,
    plan: PerfPlan,
    parts: tuple[mnt.Mount, mnt.Mount, list[mnt.Mount]],
    warnings: list[str],
) -> ResolvedJob:
    from trtllm_script_builder.resolve.perf.plan import (
        check_node_fits,
        check_unquoted,
        segment_note,
    )

    req, paths, facts = base.req, base.paths, base.facts
    assert facts is not None and req.partition and req.account
    work_dir = Path(req.work_dir)
    home, project, models = parts
    check_unquoted(
        {"work_dir": str(work_dir), "repo_root": req.repo_root, "llm_models_root": base.models_root,
         "perf_config_yaml": plan.config_file or "", "remote_work_dir": paths.log_dir,
         "remote_repo_path": paths.project}
    )  # fmt: skip
    field = "perf_config_yaml" if plan.config_file else "test_cmd"
    check_node_fits(plan.sizing, facts.gpus_per_node, facts.gpus_source, field)
    # submit.py makes work_dir the container's working folder and writes its output there.
    job_dir = mnt.Mount(mnt.check_mount_path(paths.log_dir, "work_dir"), paths.log_dir, "work_dir")
    extras = [job_dir]
    if plan.config_file and not paths.remote:
        # submit.py points the config-folder variable at the config's folder: the container
        # must see it there (dropped when the repo, home or work_dir mount covers it)
        folder = os.path.dirname(os.path.abspath(plan.config_file))
        extras.append(mnt.Mount(mnt.check_mount_path(folder, field), folder, field))
    mounts = mnt.assemble(home, project, models, extras)
    mounts_text = ",".join(m.entry() for m in mounts)
    # submit.py runs here with local paths (decision perf-sanity-submit-py): it must see the local
    # repo in the mounts so that it adds no second copy; the rewrite afterwards makes it the remote
    # one.
    submit_mounts = mounts_text
    if paths.remote:
        local_project = mnt.Mount(req.repo_root, req.repo_root, "repo_root")
        local_job_dir = mnt.Mount(str(work_dir), str(work_dir), "work_dir")
        local = mnt.assemble(home, local_project, models, [local_job_dir])
        submit_mounts = ",".join(m.entry() for m in local)
    before: list[OutFile] = []
    if plan.ship_config and plan.config_file:  # ship_config is only set with a config file
        name = Path(plan.config_file).name
        before.append(OutFile(name, Path(plan.config_file).read_text()))
        plan = replace(plan, config_file=str(work_dir / name))
    args = plan.args(
        partition=req.partition,
        account=req.account,
        image=base.script_image,
        mounts=submit_mounts,
        work_dir=str(work_dir),
        llm_src=req.repo_root,
        models_root=base.models_root,
        time=req.time_limit,
    )
    gpu_lines: tuple[str, ...] | None = None
    env = base.env
    # submit.py reads the cluster it runs on; the job runs on the target
    # (decisions perf-sanity-submit-py, slurm-version-cluster-name).
    if env is not None and env.cluster_name and _submit_py_knows("--cluster-name", req):
        args += ["--cluster-name", env.cluster_name]
    elif paths.remote and plan.sizing.mode not in ("aggr", "ctx_only"):
        warnings.append(
            "the cluster's name is not in the cluster file: submit.py picks the network (UCX) "
            "settings of the cluster it runs on here; probe the target cluster again"
        )
    if paths.remote:
        g = plan.sizing.gpus_per_node
        # as submit.py asks its own cluster: both lines where the partition has GPU GRES,
        # none where it has other GRES, --gpus-per-node alone where nothing is known
        if facts.gres:
            gpu_lines = (f"--gpus-per-node={g}", f"--gres=gpu:{g}")
        else:
            gpu_lines = () if facts.partition is not None else (f"--gpus-per-node={g}",)
    rewrite = (
        (
            ("repo_root", req.repo_root),
            ("remote_repo_path", paths.project),
            ("work_dir", str(work_dir)),
            ("remote_work_dir", paths.log_dir),
        )
        if paths.remote
        else None
    )
    # Known before submit.py runs, so a dry run's job_spec says them too: its `--segment` line
    # left out on an older Slurm, and the test_list.txt it always writes beside the script.
    version = env.slurm_version if env is not None else None
    if (note := segment_note(version)) and _submit_py_knows("--segment", req, quoted=False):
        warnings.append(note)
    listed = sorted({*(str(work_dir / f.name) for f in before), str(work_dir / TEST_LIST)})
    sz = plan.sizing
    return ResolvedJob(
        workflow=wf,
        category=4,
        model_name=plan.model_name,
        name=f"{plan.model_name}_{plan.job_suffix}",
        container_name=f"{plan.model_name}_{plan.job_suffix}",  # submit.py names its own
        required_devices=sz.gpus,
        nodes=sz.nodes,
        success_patterns=SUBMIT_PY_PATTERNS[0],
        failure_patterns=SUBMIT_PY_PATTERNS[1],
        extra_files=tuple(listed),
        warnings=tuple(warnings),
        submit=SubmitPlan(tuple(before), tuple(args), LAUNCH_SH, rewrite, gpu_lines),
        **base.common(mounts),
        **base.slurm(
            nodes=sz.nodes,
            ntasks=sz.total_gpus,
            ntasks_per_node=sz.ntasks_per_node,
            gpus_per_node=sz.gpus_per_node,
            gpus=sz.gpus_per_node,  # submit.py's jobs hold whole nodes of the config's size
            # the launch drafts start every server step with `srun --mpi=pmix`
            mpi_plugin="pmix",
        ),
    )
