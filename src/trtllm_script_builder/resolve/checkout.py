"""Whether the checkout's install step can work: TensorRT-LLM's compiled bindings
(decision install-step).

TensorRT-LLM's setup.py refuses `pip install -e .` unless `tensorrt_llm/bindings` (or its
`bindings.pyi` stubs) exists, and the package only imports with the compiled module
`tensorrt_llm/bindings.<python tag>-<arch>-linux-gnu.so` that `scripts/build_wheel.py` leaves
there. A checkout that was never built, or was built on another CPU architecture, fails in
the job's first minutes; the build says so at once.
"""

from __future__ import annotations

import os
import re

from trtllm_script_builder.model.values import text_problem
from trtllm_script_builder.resolve.image import normalise_arch

_ARCH_TAG = re.compile(r"(x86_64|aarch64|arm64|amd64)")
_WAYS = (
    "set skip_install with an image that already holds a build of this checkout, or set "
    "TRTLLM_USE_PRECOMPILED=1 in the environment the job is started from, so that setup.py "
    "takes the compiled parts from the matching release wheel (the install step then "
    "downloads it)"
)


def compiled_bindings(repo_root: str) -> list[str] | None:
    """The compiled bindings modules under repo_root/tensorrt_llm (paths relative to
    repo_root), or None when the checkout has no tensorrt_llm package to look in."""
    pkg = os.path.join(repo_root, "tensorrt_llm")
    if not os.path.isdir(pkg):
        return None
    top = [f"tensorrt_llm/{n}" for n in _names(pkg) if n.startswith("bindings")]
    inside = [f"tensorrt_llm/bindings/{n}" for n in _names(os.path.join(pkg, "bindings"))]
    return [p for p in top + inside if p.endswith(".so")]


def _names(folder: str) -> list[str]:
    """The folder's names; one that no line can carry (a newline, an escape) is no module of
    ours and would reach a warning line, so it is left out (decision one-validation-layer)."""
    try:
        return sorted(n for n in os.listdir(folder) if text_problem(n) is None)
    except OSError:
        return []


def so_arch(name: str) -> str | None:
    """The CPU architecture in an extension module's platform tag (`cpython-312-x86_64-...`)."""
    m = _ARCH_TAG.search(os.path.basename(name))
    return normalise_arch(m.group(1)) if m else None


def bindings_warnings(repo_root: str, arch: str | None, where: str) -> list[str]:
    """Warnings for an install step that cannot work: no compiled bindings, or bindings for
    another architecture than `arch` (the nodes' or this machine's, when known)."""
    found = compiled_bindings(repo_root)
    if found is None:
        return []
    if not found:
        return [
            f"repo_root {repo_root} has no compiled bindings (tensorrt_llm/bindings*.so): "
            "TensorRT-LLM's setup.py refuses the install step's `pip install -e .` without the "
            "bindings module, and the package does not import without the compiled one; build "
            f"the checkout with scripts/build_wheel.py, or {_WAYS}"
        ]
    archs = {a for a in map(so_arch, found) if a}
    if arch is None or not archs or arch in archs:
        return []
    built = ", ".join(sorted(archs))
    return [
        f"the compiled bindings in repo_root {repo_root} ({found[0]}) are for {built}, but "
        f"{where} is {arch}: the installed package will not import there; build the checkout "
        f"on {arch}, or {_WAYS}"
    ]


# What a build of the checkout leaves that git ignores, so a sync neither sends nor removes it:
# `pip install -e .` takes it as it is (decision install-step). One path a line, those present.
LIST_BUILD_OUTPUTS = (
    'cd "$1" 2>/dev/null || exit 0; for p in tensorrt_llm/libs tensorrt_llm/bindings*.so '
    'tensorrt_llm/bindings/*.so cpp/build; do [ -e "$p" ] && printf "%s\\n" "$p"; done; exit 0'
)


def stale_build_warning(where: str, found: list[str]) -> str | None:
    """The clone keeps compiled parts of an earlier build: the install step's `pip install -e .`
    installs the new Python over them."""
    if not found:
        return None
    return (
        f"{where} keeps build outputs git does not track ({', '.join(found[:3])}): a job "
        "without compile installs this commit's Python with `pip install -e .` over the C++ "
        f"of the build that left them; build it with compile, or {_WAYS}"
    )
