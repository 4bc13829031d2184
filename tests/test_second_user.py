"""Attacks of a second user account on what this tool shares with others: a /tmp that every
user writes, a team's work_dir, wheel folder and image cache, and the ssh socket folder.

Files the other user plants are made here and given to that user (`chown`: the tests run as
root on the test machine, and skip otherwise); the account is `tsbother` when it exists, else
`nobody`. Each attack got through once; the tests keep it out.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trtllm_script_builder import atomic
from trtllm_script_builder.process.proc import alive, start_time

from .conftest import Env
from .test_runner_docker import docker, last_json, run_cli
from .test_shared_work_dir import _in_time, _submitted

__all__ = ["docker", "run_cli"]  # fixtures, used here by name

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root")


def _other() -> int:
    for name in ("tsbother", "nobody"):
        try:
            return pwd.getpwnam(name).pw_uid
        except KeyError:
            continue
    return 65534


OTHER = _other()


def planted(path: Path) -> Path:
    """`path` (and a folder's contents) as another user's."""
    os.chown(path, OTHER, OTHER, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for p in path.rglob("*"):
            os.chown(p, OTHER, OTHER, follow_symlinks=False)
    return path


@pytest.fixture()
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this user started after the job, leading its own process group."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


# ---------------------------------------------------------------- temporaries in a shared parent


def test_a_planted_temporary_with_a_pid_too_big_for_kill_does_not_end_a_build(
    cli: Callable[..., Any], env: Env
) -> None:
    """A name kill(2) cannot take (OverflowError) planted beside the work_dir ended every
    build there in a traceback."""
    parent = env.work.parent
    parent.mkdir(parents=True, exist_ok=True)
    name = f".x.tsb-{atomic._HOST}-{'9' * 30}-{'a' * 12}.tmp"
    (parent / name).touch()
    planted(parent / name)
    r = cli([], env.request(custom_cmd="echo hi"))
    assert r.code == 0, r.stderr
    assert (parent / name).exists()  # another user's: left alone
    assert atomic.sweep(parent) == []
