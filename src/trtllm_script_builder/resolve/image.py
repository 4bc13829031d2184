"""Step 1: which container image, for which CPU architecture, in which spelling."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from trtllm_script_builder.errors import BuildError

PROPERTIES = "jenkins/current_image_tags.properties"
ARCH_KEYS = {"x86_64": "LLM_DOCKER_IMAGE", "aarch64": "LLM_SBSA_DOCKER_IMAGE"}
_ARCH_ALIASES = {"amd64": "x86_64", "x86-64": "x86_64", "arm64": "aarch64", "sbsa": "aarch64"}


def normalise_arch(arch: str | None) -> str | None:
    if not arch:
        return None
    a = arch.strip().lower()
    return _ARCH_ALIASES.get(a, a)


# An architecture named as a word of an image reference (`...-aarch64-ubuntu24.04-...`).
_ARCH_WORD = re.compile(r"(?<![a-z0-9])(x86_64|x86-64|amd64|aarch64|arm64|sbsa)(?![a-z0-9])")


def arch_in_name(image: str) -> str | None:
    """The one architecture an image's name says it is for; None when it names none or both."""
    found = {normalise_arch(m) for m in _ARCH_WORD.findall(image.lower())}
    return found.pop() if len(found) == 1 else None


def arch_from_device_type(device_type: str | None) -> str | None:
    """Grace-based parts (GB200, GH200, GB300) are aarch64; the case-executor uses the same rule."""
    if device_type and device_type.strip().upper().startswith(("GB", "GH")):
        return "aarch64"
    return None


def gres_gpu_type(gres: str | None) -> str | None:
    """The GPU type a partition's GRES names (`gpu:gb200:4`, `gpu:h100:8(S:0-1)` -> the type),
    None when it names none."""
    for entry in (gres or "").split(","):
        parts = entry.strip().split("(")[0].split(":")
        if len(parts) == 3 and parts[0] == "gpu" and parts[1] and not parts[1].isdigit():
            return parts[1]
    return None


@lru_cache(maxsize=8)
def parse_properties(text: str) -> dict[str, str]:
    """`KEY=value` lines; comments and blanks skipped; keys matched exactly, never by prefix."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(("#", "!")) or "=" not in s:
            continue
        key, _, value = s.partition("=")
        out[key.strip()] = value.strip()
    return out


def image_from_properties(text: str, arch: str, source: str) -> str:
    key = ARCH_KEYS.get(arch)
    if key is None:
        raise BuildError(
            "container_image", f"no image key for architecture {arch!r}", "pass --container-image"
        )
    value = parse_properties(text).get(key)
    if not value:
        raise BuildError(
            "container_image", f"{source} has no {key}= line for {arch}", "pass --container-image"
        )
    return value


def read_properties(repo_root: str) -> tuple[str, str]:
    path = Path(repo_root) / PROPERTIES
    try:
        return path.read_text(encoding="utf-8", errors="replace"), str(path)
    except OSError:
        if not (Path(repo_root) / "tests" / "integration" / "defs").is_dir():
            # Neither the image table nor the tests: the folder is no checkout at all.
            raise BuildError(
                "repo_root",
                f"{repo_root} is not a TensorRT-LLM checkout (no {PROPERTIES}, no "
                "tests/integration/defs)",
                "pass the top folder of your TensorRT-LLM clone with --repo-root",
            ) from None
        raise BuildError(
            "container_image",
            f"not given and {path} cannot be read",
            "pass --container-image or check repo_root",
        ) from None


_REGISTRY_RE = re.compile(r"([^/#]+)/(.+)", re.S)


def is_squashfs(image: str) -> bool:
    """The image is a squashfs file (a path, or a `.sqsh`/`.squashfs` name), not a registry's."""
    return image.startswith(("/", ".")) or image.endswith((".sqsh", ".squashfs"))


def enroot_uri(image: str) -> str:
    """`host/path:tag` -> `host#path:tag` when the first component is a registry host.

    Without the `#`, enroot reads the host as part of a docker.io path. Squashfs files and
    already-rewritten URIs pass through unchanged.
    """
    if is_squashfs(image) or "#" in image:
        return image
    scheme = "docker://" if image.startswith("docker://") else ""
    m = _REGISTRY_RE.fullmatch(image.removeprefix(scheme))
    if not m:
        return image
    host = m.group(1)
    if "." in host or ":" in host or host == "localhost":
        return f"{scheme}{host}#{m.group(2)}"
    return image
