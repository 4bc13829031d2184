"""The jobs that run before a test job: an image import (enroot) and a compile of the checkout
(scripts/build_wheel.py), decided once from the request (decisions compile-cuda-arch,
compile-chain and image-import-cache).

Reads the checkout's build_wheel.py (which options it knows) but writes nothing and starts no
process. The renderers turn the returned Chain into import.slurm and compile.slurm.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.model.slurm_env import Partition
from trtllm_script_builder.resolve import image as img
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.backend import queued, scenarios_where
from trtllm_script_builder.resolve.stamp import file_stamp

BUILD_WHEEL = "scripts/build_wheel.py"
COMPILE_SCRIPT = "compile.slurm"
IMPORT_SCRIPT = "import.slurm"
# GPU type -> build_wheel.py --cuda_architectures (decisions compile-cuda-arch and gpu-arch-table):
# the GPU's compute capability, as TensorRT-LLM's CMake takes it. B300/GB300 are 10.3, built apart
# from 10.0 by TensorRT-LLM's CI (kernels built for 100a do not load on 10.3). A key of several
# words is matched against the first words of the name.
CUDA_ARCH = {
    "B200": "100-real",
    "GB200": "100-real",
    "B300": "103-real",
    "GB300": "103-real",
    "H100": "90-real",
    "H200": "90-real",
    "H800": "90-real",
    "H20": "90-real",
    "GH200": "90-real",
    "L40S": "89-real",
    "L40": "89-real",
    "L20": "89-real",
    "L4": "89-real",
    "A100": "80-real",
    "A800": "80-real",
    "A30": "80-real",
    "A10": "86-real",
    "A10G": "86-real",
    "A40": "86-real",
    "RTX PRO 6000": "120-real",
}
# The options a compile request turns on; the checkout's build_wheel.py must know each.
_FLAG_FIELDS = (("use_ccache", "--use_ccache"), ("benchmarks", "--benchmarks"), ("nvtx", "--nvtx"))
_ONLY_WITH_COMPILE = ("cuda_arch", "use_ccache", "benchmarks", "wheel_dir")
_SQSH_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class CompileStep:
    """compile.slurm: build_wheel.py's arguments and the folder the wheel lands in."""

    script = COMPILE_SCRIPT
    kind = "compile"
    name: str  # log file stem
    args: tuple[str, ...]  # after `python3 scripts/build_wheel.py`
    cuda_arch: str
    wheel_dir: str  # as the jobs see it (host path, mounted at the same path)
    image: str  # the image the compile runs in (the imported .sqsh when there is one)
    mounts_text: str
    key: str  # same key, same build: a batch submits it once
    # The Slurm job name: one per checkout, so that `--dependency=singleton` runs its compiles
    # one at a time in its one build tree (decision one-compile-per-checkout).
    job_name: str = ""
    # build_wheel.py has --job_count: the job passes the count it works out
    # (decision compile-job-count).
    job_count: bool = False
    # build_wheel.py has --build_dir: the build tree is cpp/build-<CPU arch>-<this>, one per
    # architecture (decision compile-no-gpus); "" when it has not.
    build_dir: str = ""


@dataclass(frozen=True)
class ImportStep:
    """import.slurm: `enroot import -o <sqsh> docker://<uri>` once per image."""

    script = IMPORT_SCRIPT
    kind = "import"
    name: str
    uri: str  # docker://host#path:tag
    sqsh: str
    key: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chain:
    compile: CompileStep | None
    image_import: ImportStep | None
    # Where they run without GPUs (decision compile-no-gpus): a CPU partition, whose node the
    # compile holds, else the test job's partition with the test job's share of a node.
    partition: str | None = None
    cpus_per_task: int | None = None
    mem: str | None = None

    def steps(self) -> list[CompileStep | ImportStep]:
        """In submission order: the import first (the compile runs in its image)."""
        return [s for s in (self.image_import, self.compile) if s is not None]


def cuda_arch_for(req: Request) -> str:
    """The request's cuda_arch, else the one of its device_type (decision compile-cuda-arch)."""
    if req.cuda_arch:
        return req.cuda_arch
    if not req.device_type:
        raise BuildError(
            "cuda_arch",
            "is not given and there is no device_type to derive it from",
            "pass --cuda-arch (e.g. 90-real) or --device-type (e.g. H100)",
        )
    arch = CUDA_ARCH.get(_gpu_name(req.device_type))
    if arch is None:
        raise BuildError(
            "cuda_arch",
            f"is not given and device_type {req.device_type!r} is not one of "
            f"{', '.join(CUDA_ARCH)}",
            "pass --cuda-arch (e.g. 90-real)",
        )
    return arch


def check_device_type(req: Request, part: Partition | None) -> None:
    """A device_type whose GPUs are not the partition's (its GRES names their type): the
    compile would build for the one the job does not run on (decision compile-cuda-arch)."""
    gpu = img.gres_gpu_type(part.gres) if part else None
    if not req.device_type or gpu is None or part is None:
        return
    want, have = CUDA_ARCH.get(_gpu_name(req.device_type)), CUDA_ARCH.get(_gpu_name(gpu))
    if want is not None and have is not None and want != have:
        raise BuildError(
            "device_type",
            f"{req.device_type} ({want}) is not the GPU of partition {part.name}, whose GRES "
            f"names {gpu} ({have})",
            f"pass --device-type {gpu}, or a partition of {req.device_type} GPUs with --partition",
        )


def _gpu_name(device_type: str) -> str:
    """`NVIDIA H100 80GB HBM3` or `h100-sxm` -> `H100`; `NVIDIA RTX PRO 6000 Blackwell` or
    `rtx_pro_6000` -> `RTX PRO 6000` (the key whose words begin the name)."""
    words = re.findall(r"[A-Z0-9]+", device_type.upper())
    if words[:1] == ["NVIDIA"]:
        words = words[1:]
    for key in sorted(CUDA_ARCH, key=lambda k: -len(k.split())):
        if words[: len(key.split())] == key.split():
            return key
    return words[0] if words else ""


# `enroot import`'s grammar of an image (enroot src/docker.sh): docker://[USER@][REGISTRY#]IMAGE[:TAG],
# the image path in lower case, a tag and no digest.
_ENROOT_URI = re.compile(
    r"docker://(?:[A-Za-z0-9_.!~*'()%;:&=+$,-]+@)?(?:(?P<registry>[^#]+)#)?"
    r"(?P<image>[a-z0-9/._-]+)(?::(?P<tag>[A-Za-z0-9._:-]+))?"
)
# Docker Hub, which enroot uses when the reference names no registry.
_HUB = ("registry-1.docker.io", "docker.io", "index.docker.io")


def image_key(uri: str) -> str | None:
    """What `enroot import` fetches for `uri`, spelled one way (decision import-cache-key): the
    registry (Docker Hub's names made one), the image path (`library/` for a Hub image of one part)
    and the tag (`latest` when none is given); the user part, which only authenticates, is left
    out. None when enroot would refuse the reference."""
    m = _ENROOT_URI.fullmatch(uri)
    if m is None:
        return None
    registry, image = m.group("registry") or _HUB[0], m.group("image")
    if registry in _HUB:
        registry = _HUB[1]
        image = image if "/" in image else f"library/{image}"
    return f"{registry}#{image}:{m.group('tag') or 'latest'}"


def sqsh_name(uri: str) -> str:
    """The cache file of an image: what enroot imports for it made a file name, plus 8 hex
    digits of it, so that two images never share a file and one image spelled two ways has
    one (decisions image-import-cache and import-cache-key). `uri` is the import's URI, or an image
    reference in the spelling a build writes by default (the registry rewrite of `enroot_uri`)."""
    if not uri.startswith("docker://"):
        uri = "docker://" + img.enroot_uri(uri)
    key = image_key(uri) or uri
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{_SQSH_NAME.sub('_', key).strip('_.')}-{digest}.sqsh"


def plan_chain(
    req: Request,
    *,
    image: str,
    script_image: str,
    log_dir: str,
    home: mnt.Mount,
    project: mnt.Mount,
    model_name: str,
) -> Chain | None:
    """The import and compile jobs the request asks for; None when it asks for neither."""
    if not req.compile:
        given = next((f for f in _ONLY_WITH_COMPILE if getattr(req, f)), None)
        if given is not None:
            raise BuildError(
                given, "is a compile option, but compile is not asked for", "add --compile"
            )
    if not req.compile and not req.sqsh_cache_dir:
        return None
    field = "compile" if req.compile else "sqsh_cache_dir"
    if not queued(req):
        raise BuildError(
            field,
            f"runs as a Slurm job before the test job, and {req.execution_scenario} has no Slurm",
            f"use {scenarios_where(lambda b, _: b.queued)}",
        )
    imp = _import_step(req, image, script_image, model_name) if req.sqsh_cache_dir else None
    run_image = imp.sqsh if imp else script_image
    comp = None
    if req.compile:
        comp = _compile_step(req, run_image, log_dir, home, project, model_name)
    return Chain(comp, imp)


def refuse_for_submit_py(req: Request) -> None:
    """perf-sanity jobs are written by the repo's submit.py, which builds and imports itself."""
    field = "compile" if req.compile else "sqsh_cache_dir" if req.sqsh_cache_dir else None
    if field is not None:
        raise BuildError(
            field,
            "is not available for perf-sanity jobs, whose script the repo's submit.py writes",
            f"drop {field}",
        )


def _import_step(req: Request, image: str, script_image: str, model_name: str) -> ImportStep:
    assert req.sqsh_cache_dir is not None
    if img.is_squashfs(image):
        raise BuildError(
            "sqsh_cache_dir",
            f"container_image {image!r} is a squashfs file already, so there is nothing to import",
            "drop sqsh_cache_dir, or give a registry image",
        )
    uri = script_image if script_image.startswith("docker://") else f"docker://{script_image}"
    key = image_key(uri)
    if key is None:
        raise BuildError(
            "container_image",
            f"{image!r} is not a reference enroot import takes ({uri}: "
            "[REGISTRY#]IMAGE[:TAG], the image path in lower case, a tag and no digest)",
            "give the image by a tag, or drop sqsh_cache_dir",
        )
    folder = req.sqsh_cache_dir.rstrip("/") or "/"
    sqsh = posixpath.join(folder, sqsh_name(uri))
    warnings: tuple[str, ...] = ()
    if key.endswith(":latest"):
        warnings = (
            f"sqsh_cache_dir: {image!r} names the tag latest, which moves; the cache keeps "
            f"the image as first imported ({sqsh}): delete that file to import it again, or "
            "name a fixed tag",
        )
    return ImportStep(f"{model_name}_import", uri, sqsh, key=f"import:{sqsh}", warnings=warnings)


def _compile_step(
    req: Request,
    run_image: str,
    log_dir: str,
    home: mnt.Mount,
    project: mnt.Mount,
    model_name: str,
) -> CompileStep:
    if req.skip_install:
        raise BuildError(
            "compile",
            "builds a wheel for the install step, which skip_install leaves out",
            "drop skip_install or compile",
        )
    if req.wheel:
        raise BuildError(
            "compile", "builds the wheel that wheel names already", "drop wheel or compile"
        )
    text = _build_wheel_text(req)
    arch = cuda_arch_for(req)
    wheel_dir = mnt.check_mount_path(req.wheel_dir or posixpath.join(log_dir, "wheel"), "wheel_dir")
    # --dist_dir is the script's: a folder of the compile job's own id under wheel_dir
    # (decision own-wheel-per-chain)
    args = ["--cuda_architectures", arch]
    for name, option in _FLAG_FIELDS:
        if not getattr(req, name):
            continue
        if f'"{option}"' not in text:
            raise BuildError(
                name,
                f"the checkout's {BUILD_WHEEL} has no {option} option",
                f"drop {name} (newer checkouts dropped it), or build an older checkout",
            )
        args.append(option)
    if '"--configure_cmake"' in text:
        # CMake is configured (the architectures and options take effect) only in a new build
        # tree unless asked: a tree built before for another GPU would build that GPU again
        # (decision always-configure-cmake).
        args.append("--configure_cmake")
    if '"--yes"' in text:
        # A batch job has no terminal: a prompt would end the build (decision build-wheel-yes).
        args.append("--yes")
    wheel = mnt.Mount(wheel_dir, wheel_dir, "wheel_dir")
    mounts_text = ",".join(m.entry() for m in mnt.assemble(home, project, [], [wheel]))
    # What makes two compiles the same build: the checkout, the image and the options.
    key = "compile:" + " ".join([project.host, run_image, *args, "--dist_dir", wheel_dir])
    return CompileStep(
        f"{model_name}_compile",
        tuple(args),
        arch,
        wheel_dir,
        run_image,
        mounts_text,
        key,
        job_name=checkout_job_name(project.host),
        job_count='"--job_count"' in text,
        build_dir=re.sub(r"[^A-Za-z0-9.-]+", "_", arch) if '"--build_dir"' in text else "",
    )


def place_chain(
    chain: Chain, cpu: Partition | None, part: Partition | None, cpus: int | None, mem: str | None
) -> tuple[Chain, list[str]]:
    """Decision compile-no-gpus: the chain on a CPU partition of the job's architecture, else on
    the job's partition without GPUs, with `cpus` and `mem` (the test job's share) and a warning."""
    if cpu is not None:
        return replace(chain, partition=cpu.name), []
    where = f"partition {part.name}" if part else "the job's partition"
    arch = f" of {part.arch}" if part and part.arch else ""
    note = (
        f"the cluster file lists no CPU partition{arch}, so the "
        f"{' and '.join(s.kind for s in chain.steps())} job(s) run on {where} without GPUs"
    )
    return replace(chain, cpus_per_task=cpus, mem=mem), [note]


def checkout_job_name(checkout: str) -> str:
    """`tsb_compile_<folder name>_<8 hex digits of the path>`: the same for every compile of
    one checkout (as the jobs see it), another for any other checkout
    (decision one-compile-per-checkout)."""
    base = _SQSH_NAME.sub("_", posixpath.basename(checkout.rstrip("/"))).strip("_.")[:40]
    digest = hashlib.sha256(checkout.encode()).hexdigest()[:8]
    return f"tsb_compile_{base or 'root'}_{digest}"


@lru_cache(maxsize=8)
def _text_at(stamp: tuple[str, int, int]) -> str:
    return Path(stamp[0]).read_text(errors="replace")


def _build_wheel_text(req: Request) -> str:
    path = Path(req.repo_root) / BUILD_WHEEL
    try:
        return _text_at(file_stamp(str(path)))  # a compile batch reads it once
    except OSError:
        raise BuildError(
            "compile",
            f"{path} cannot be read, so there is nothing to build the wheel with",
            "point repo_root at a TensorRT-LLM checkout",
        ) from None
