"""The jobs that run before a test job: an image import (enroot) and a compile of the checkout
(scripts/build_wheel.py), decided once from the request (decisions 64-66).

Reads the checkout's build_wheel.py (which options it knows) but writes nothing and starts no
process. The renderers turn the returned Chain into import.slurm and compile.slurm.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.resolve import image as img
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.stamp import file_stamp

BUILD_WHEEL = "scripts/build_wheel.py"
COMPILE_SCRIPT = "compile.slurm"
IMPORT_SCRIPT = "import.slurm"
# GPU type -> build_wheel.py --cuda_architectures, as the TensorRT-LLM agent skills map them
# (exec-local-docker, exec-remote-slurm): decision 64.
CUDA_ARCH = {
    "B200": "100-real",
    "GB200": "100-real",
    "B300": "100-real",
    "GB300": "100-real",
    "H100": "90-real",
    "H200": "90-real",
    "L40S": "89-real",
    "A100": "80-real",
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
    name: str  # job name and log file stem
    args: tuple[str, ...]  # after `python3 scripts/build_wheel.py`
    cuda_arch: str
    wheel_dir: str  # as the jobs see it (host path, mounted at the same path)
    image: str  # the image the compile runs in (the imported .sqsh when there is one)
    mounts_text: str
    key: str  # same key, same build: a batch submits it once


@dataclass(frozen=True)
class ImportStep:
    """import.slurm: `enroot import -o <sqsh> docker://<uri>` once per image."""

    script = IMPORT_SCRIPT
    kind = "import"
    name: str
    uri: str  # docker://host#path:tag
    sqsh: str
    key: str


@dataclass(frozen=True)
class Chain:
    compile: CompileStep | None
    image_import: ImportStep | None

    def steps(self) -> list[CompileStep | ImportStep]:
        """In submission order: the import first (the compile runs in its image)."""
        return [s for s in (self.image_import, self.compile) if s is not None]


def cuda_arch_for(req: Request) -> str:
    """The request's cuda_arch, else the one of its device_type (decision 64)."""
    if req.cuda_arch:
        return req.cuda_arch
    if not req.device_type:
        raise BuildError(
            "cuda_arch",
            "is not given and there is no device_type to derive it from",
            "pass --cuda-arch (e.g. 90-real) or --device-type (e.g. H100)",
        )
    gpu = _gpu_name(req.device_type)
    arch = CUDA_ARCH.get(gpu)
    if arch is None:
        raise BuildError(
            "cuda_arch",
            f"is not given and device_type {req.device_type!r} is not one of "
            f"{', '.join(CUDA_ARCH)}",
            "pass --cuda-arch (e.g. 90-real)",
        )
    return arch


def _gpu_name(device_type: str) -> str:
    """`NVIDIA H100 80GB HBM3` or `h100-sxm` -> `H100`."""
    text = device_type.strip().upper().removeprefix("NVIDIA ").strip()
    m = re.match(r"[A-Z0-9]+", text)
    return m.group(0) if m else text


def sqsh_name(image: str) -> str:
    """The cache file of an image: its reference made a file name, plus 8 hex digits of the
    reference itself so that two references never share a file (decision 66)."""
    digest = hashlib.sha256(image.encode()).hexdigest()[:8]
    return f"{_SQSH_NAME.sub('_', image).strip('_.')}-{digest}.sqsh"


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
    if not req.is_slurm:
        raise BuildError(
            field,
            "runs as a Slurm job before the test job, and local_docker has no Slurm",
            "use local_slurm or remote_slurm",
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
    folder = req.sqsh_cache_dir.rstrip("/") or "/"
    sqsh = posixpath.join(folder, sqsh_name(image))
    uri = script_image if script_image.startswith("docker://") else f"docker://{script_image}"
    return ImportStep(f"{model_name}_import", uri, sqsh, key=f"import:{sqsh}")


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
    args = ["--cuda_architectures", arch, "--dist_dir", wheel_dir]
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
    wheel = mnt.Mount(wheel_dir, wheel_dir, "wheel_dir")
    mounts_text = ",".join(m.entry() for m in mnt.assemble(home, project, [], [wheel]))
    # What makes two compiles the same build: the checkout, the image and the options.
    key = "compile:" + " ".join([project.host, run_image, *args])
    return CompileStep(
        f"{model_name}_compile", tuple(args), arch, wheel_dir, run_image, mounts_text, key
    )


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
