"""Category 1: the `docker run` words and the in-container payload."""

from __future__ import annotations

from trtllm_script_builder.model.values import check_mount_path
from trtllm_script_builder.render import render
from trtllm_script_builder.resolve.mounts import Mount

# As TensorRT-LLM's docker/Makefile runs its containers: pinned memory (NCCL, CUDA IPC) is
# unbounded, and the stack is 64 MiB (decision local-docker-run).
ULIMITS = ("memlock=-1", "stack=67108864")


def gpus_value(count: int) -> str:
    """`--gpus`'s device form for GPUs 0..count-1; the double quotes keep docker's CSV reader
    from splitting the list at its commas (decision local-docker-run)."""
    return '"device=' + ",".join(str(i) for i in range(count)) + '"'


def docker_run(
    *,
    name: str,
    image: str,
    gpus: int,
    mounts: list[Mount],
    env: list[tuple[str, str]],
    install: bool,
    wheel: bool,
    eval_requirements: bool,
    custom_env: bool,
    has_prep: bool,
    junit: bool = False,
) -> tuple[list[list[str]], str]:
    """The `docker run` options, one group a line, and the payload for `bash -c`.

    GPU access is `--gpus` (the NVIDIA container toolkit; no `--runtime=nvidia`,
    decision local-docker-run) and the payload does its own `cd`; every value reaches the container
    through `--env`.
    """
    args: list[list[str]] = [
        ["--rm"],
        ["--net=host"],
        ["--gpus", gpus_value(gpus)],
        ["--ipc=host"],
        [w for u in ULIMITS for w in ("--ulimit", u)],
        ["--cap-add=SYS_PTRACE", "--cap-add=SYS_ADMIN", "--cap-add=DAC_READ_SEARCH"],
        ["--security-opt", "seccomp=unconfined"],
        ["--name", name],
    ]
    for m in mounts:
        target, _, flags = m.container.partition(":")
        # docker's --mount is CSV: a `,` or `"` in a path would add or end a field. Resolve
        # checked every path already; this keeps the promise where the option is written.
        check_mount_path(m.host, m.field)
        check_mount_path(target, m.field)
        ro = ",readonly" if flags == "ro" else ""
        args.append(["--mount", f"type=bind,source={m.host},target={target}{ro}"])
    args += [["--env", f"{k}={v}"] for k, v in env]
    if install:
        # Named without a value: docker passes the caller's, if set, so setup.py can take the
        # compiled parts from the release wheel for a checkout never built (decision install-step).
        args.append(["--env", "TRTLLM_USE_PRECOMPILED"])
    args.append([image])
    payload = render(
        "docker_payload.j2",
        s={
            "install": install,
            "wheel": wheel,
            "eval_requirements": eval_requirements,
            "custom_env": custom_env,
            "has_prep": has_prep,
            "junit": junit,
        },
    )
    return args, payload
