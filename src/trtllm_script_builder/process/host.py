"""The machine a job's tools run on: `Here` (this machine) or `OverSsh` (a cluster's login node).

Everything that starts a scheduler tool, copies a file to where a job runs or reads a job's
log takes a `Host`, so no caller asks whether the target is remote: probe, check, submit,
watch, sync and persistent allocations are written once against this interface.
"""

from __future__ import annotations

import getpass
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from trtllm_script_builder.atomic import read_regular, read_regular_stat
from trtllm_script_builder.process.proc import CmdResult, Session, run
from trtllm_script_builder.process.ssh import MAX_READ, Cwd, Input, Secs, SshRunner


def current_user() -> str:
    """This machine's user name ("unknown" when the system cannot tell)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


class Host(Protocol):
    """Run a program, run a shell line (or `start` one kept running beside the caller), copy
    files into a folder, read a file from an offset; `check` reaches it and answers its login folder, $HOME and user, one a line.

    `timeout` (seconds) overrides the host's own limit for one call (a git transfer, salloc).
    """

    name: str  # what messages call it: "this machine" or the ssh host
    remote: bool  # whether paths on it are not this machine's (only for where files are put)
    ssh_host: str | None  # the name ssh reaches it by, recorded in files (None: this machine)

    def __call__(
        self, argv: Sequence[str], cwd: Cwd = None, *, timeout: Secs = None
    ) -> CmdResult: ...

    def shell(self, line: str, input: Input = None, *, timeout: Secs = None) -> CmdResult: ...

    def start(self, line: str) -> Session: ...

    def check(self) -> CmdResult: ...

    def copy(self, files: Sequence[Path], folder: str) -> CmdResult: ...

    def read_from(self, path: str, offset: int) -> bytes | None: ...

    def close(self) -> None: ...


def host_user(host: Host) -> str:
    """The user the scheduler's tools run as on `host`: the last word of its `check`."""
    return user_in(host.check())


def user_in(check: CmdResult) -> str:
    """The user a host's `check` answered (this machine's user when it said none)."""
    return (check.out.split() or [current_user()])[-1]


class Here:
    """This machine: programs run directly, files are read and copied in place."""

    name = "this machine"
    remote = False
    ssh_host: str | None = None

    def __call__(self, argv: Sequence[str], cwd: Cwd = None, *, timeout: Secs = None) -> CmdResult:
        return run(argv, cwd, timeout=timeout)

    def shell(self, line: str, input: Input = None, *, timeout: Secs = None) -> CmdResult:
        # `sh`, as over ssh: the line is written once for both.
        return run(["sh", "-c", line], input=input, timeout=timeout)

    def start(self, line: str) -> Session:
        """The shell line kept running beside the caller (`proc.Session`), under `sh`."""
        return Session(["sh", "-c", line])

    def check(self) -> CmdResult:
        """As over ssh: the folder a command starts in, $HOME and the user, one a line."""
        try:
            cwd = os.getcwd()
        except OSError:  # a folder removed under this process: no answer, but no failure
            cwd = ""
        return CmdResult(0, f"{cwd}\n{Path.home()}\n{current_user()}\n")

    def copy(self, files: Sequence[Path], folder: str) -> CmdResult:
        dest = Path(folder)
        try:
            dest.mkdir(parents=True, exist_ok=True)
            for f in files:
                if f.resolve() != (dest / f.name).resolve():
                    shutil.copy2(f, dest / f.name)
        except OSError as exc:
            return CmdResult(1, "", f"cannot copy into {folder}: {exc.strerror or exc}")
        return CmdResult(0)

    def read_from(self, path: str, offset: int) -> bytes | None:
        return read_regular(path, offset)

    def close(self) -> None:
        return None


OverSsh = SshRunner  # a cluster's login node through one shared ssh connection (process.ssh)


def host_for(ssh_host: str | None) -> Host:
    """The host a job's tools run on: over ssh when the job names one, else here."""
    return OverSsh(ssh_host) if ssh_host else Here()


__all__ = [
    "MAX_READ",
    "CmdResult",
    "Here",
    "Host",
    "OverSsh",
    "current_user",
    "host_for",
    "read_regular",
    "read_regular_stat",
]
