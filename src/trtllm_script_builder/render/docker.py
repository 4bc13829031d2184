"""Category 1: the `docker run` words and the in-container payload."""

from __future__ import annotations

from trtllm_script_builder.render import render
from trtllm_script_builder.resolve.mounts import Mount


def docker_run(
    *,
    name: str,
    image: str,
    mounts: list[Mount],
    env: list[tuple[str, str]],
    install: bool,
    eval_requirements: bool,
    custom_env: bool,
    has_prep: bool,
) -> tuple[list[list[str]], str]:
    """The `docker run` options, one group a line, and the payload for `bash -c`.

    GPU access comes from the NVIDIA runtime and the payload does its own `cd`, as in the
    reference Category 1; every value reaches the container through `--env`.
    """
    args: list[list[str]] = [
        ["--rm"],
        ["--net=host"],
        ["--runtime=nvidia"],
        ["--ipc=host"],
        ["--cap-add=SYS_PTRACE", "--cap-add=SYS_ADMIN", "--cap-add=DAC_READ_SEARCH"],
        ["--security-opt", "seccomp=unconfined"],
        ["--name", name],
    ]
    for m in mounts:
        target, _, flags = m.container.partition(":")
        ro = ",readonly" if flags == "ro" else ""
        args.append(["--mount", f"type=bind,source={m.host},target={target}{ro}"])
    args += [["--env", f"{k}={v}"] for k, v in env]
    args.append([image])
    payload = render(
        "docker_payload.j2",
        s={
            "install": install,
            "eval_requirements": eval_requirements,
            "custom_env": custom_env,
            "has_prep": has_prep,
        },
    )
    return args, payload
