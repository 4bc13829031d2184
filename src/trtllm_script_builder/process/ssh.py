"""OpenSSH: command lines for one host, a runner that runs tools there, and file copies.

Every call goes through one ControlMaster connection per host (`ControlMaster=auto`,
`ControlPersist`), with the control socket in a private folder: `$TSB_SSH_CONTROL_DIR`, else
`~/.ssh/tsb-control` (`$TMPDIR/tsb-ssh-<uid>`, /tmp by default, when that cannot be made or is
too long for a socket path). The folder must be this user's own, mode 0700 and not a link,
checked before each use: whoever can write there could answer in ssh's place
(decision ssh-control-private), and every folder above it root's or the user's (one others may
write sticky, as /tmp). The socket's name is ssh's `%C` hash of (local host, remote
host, port, user); in a folder path longer than 45 characters, 16 hex digits of a hash of the
host and the ssh config. Every remote command runs under `sh`, whatever the login shell.
An ssh config file can be given with `$TSB_SSH_CONFIG` (passed as `ssh -F`); otherwise the
user's own ~/.ssh/config applies, so `ssh_host` may be an alias defined there.
Calls are non-interactive (`BatchMode=yes`): a host that needs a password or MFA must have a
master connection opened by hand first, e.g. `ssh -fNM -o ControlPath=<dir>/%C HOST`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import re
import secrets
import shlex
import stat
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.values import check_host
from trtllm_script_builder.process.proc import CmdResult, Session, run, tool_timeout

SSH_FAILED = 255  # ssh's own exit status when the connection fails
CONTROL_PERSIST = "15m"
Cwd = Path | str | None  # a folder to run in
Input = bytes | Path | None  # stdin: bytes, or a file the program reads itself
Secs = float | None  # a time limit for one call (None: the host's own)
MAX_READ = 8 * 1024 * 1024  # bytes of one file per read, here and over ssh alike


# A socket path must fit in sockaddr_un (104 bytes on some systems); ssh adds a 17-character
# temporary suffix while it sets the master up. The name is ssh's `%C` (40 hex digits), or in
# a longer folder 16 hex digits of our own.
_NAME = 16
_SOCKET_ROOM = 104 - 1 - 17 - 1 - _NAME
_PERCENT_C_ROOM = _SOCKET_ROOM - 40 + _NAME
_CONTROL_FIX = "remove it, or set TSB_SSH_CONTROL_DIR to a short folder of yours with mode 0700"


def control_dir() -> Path:
    """This user's private folder for the ssh control sockets (made when missing), or a
    refusal naming what is wrong with it."""
    env = os.environ.get("TSB_SSH_CONTROL_DIR")
    tmp = Path(os.environ.get("TMPDIR") or "/tmp") / f"tsb-ssh-{os.getuid()}"
    for d in [Path(env)] if env else [Path.home() / ".ssh" / "tsb-control", tmp]:
        if len(str(d)) > _SOCKET_ROOM:
            continue
        try:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.lstat(d)
        except OSError:
            continue
        why = _unsafe_above(d) or (
            "a symbolic link"
            if stat.S_ISLNK(st.st_mode)
            else "not a folder"
            if not stat.S_ISDIR(st.st_mode)
            else f"owned by uid {st.st_uid}"
            if st.st_uid != os.getuid()
            else f"mode {st.st_mode & 0o777:o}, not 700"
            if st.st_mode & 0o077
            else ""
        )
        if why:
            raise BuildError(
                "ssh_host",
                f"{d} is not a private folder of yours ({why}): another user could take over "
                "the ssh connection through it",
                _CONTROL_FIX,
            )
        return d
    tried = env or f"~/.ssh/tsb-control and {tmp}"
    raise BuildError(
        "ssh_host",
        f"no folder for ssh's connection sockets: {tried} cannot be made or is longer than "
        f"{_SOCKET_ROOM} characters",
        _CONTROL_FIX.removeprefix("remove it, or "),
    )


def _unsafe_above(d: Path) -> str:
    """What lets another user change a folder above `d` (as written, and with its links
    followed), or "": each must be root's or this user's, and one others may write must be
    sticky, as /tmp is. Whoever owns one could rename our folder away and put theirs in its
    place between the check and ssh's connect (decision ssh-control-private)."""
    uid = os.getuid()
    for above in dict.fromkeys([*Path(os.path.abspath(d)).parents, *Path(d).resolve().parents]):
        try:
            st = os.lstat(above)
        except OSError:
            continue
        if st.st_uid not in (0, uid):
            return f"inside {above}, owned by uid {st.st_uid}"
        if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return f"inside {above}, which others may write (mode {st.st_mode & 0o777:o})"
    return ""


@dataclass(frozen=True)
class SshTarget:
    """One remote host as ssh names it (`host`, `user@host` or a config alias)."""

    host: str
    config: str | None = field(default_factory=lambda: os.environ.get("TSB_SSH_CONFIG") or None)
    connect_timeout: int = 15

    def __post_init__(self) -> None:
        # ssh reads a host that starts with `-` as an option (`-oProxyCommand=...`), whatever
        # follows; the name comes from a cluster file another person may have written.
        check_host(self.host)

    def options(self) -> list[str]:
        argv: list[str] = []
        if self.config:
            argv += ["-F", self.config]
        folder = str(control_dir())
        name = (
            "%C"
            if len(folder) <= _PERCENT_C_ROOM
            else hashlib.sha256(f"{self.config}\0{self.host}".encode()).hexdigest()[:_NAME]
        )
        folder = folder.replace("%", "%%")  # ssh expands `%` tokens in the path
        control = f"{folder}/{name}"
        if not _PLAIN.fullmatch(control):
            # ssh splits an option's value at blanks (a home such as `/home/Jane Doe`) unless
            # it is quoted, and reads `\\` and `"` inside quotes as escapes (its argv_split)
            control = '"' + control.replace("\\", "\\\\").replace('"', '\\"') + '"'
        argv += [
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={self.connect_timeout}",
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={control}",
            "-o", f"ControlPersist={CONTROL_PERSIST}",
            "-o", "ServerAliveInterval=30",
            # the user's ssh config must not turn our calls into something else: a command
            # of its own (ssh then refuses ours), a terminal (it would mangle the bytes of a
            # bundle on the input), a local command or forwardings (decision ssh-own-options)
            "-o", "RemoteCommand=none",
            "-o", "RequestTTY=no",
            "-o", "PermitLocalCommand=no",
            "-o", "ClearAllForwardings=yes",
        ]  # fmt: skip
        return argv

    def argv(self, remote_argv: Sequence[str], cwd: str | None = None) -> list[str]:
        """`ssh <options> HOST -- '<command>'`: the remote shell gets one quoted line."""
        return self.line_argv(remote_line(remote_argv, cwd))

    def line_argv(self, line: str) -> list[str]:
        """`ssh <options> HOST -- LINE`; LINE is run by `sh` there (`as_sh`)."""
        return ["ssh", *self.options(), self.host, "--", as_sh(line)]

    def control_argv(self, op: str) -> list[str]:
        """`ssh -O check|exit HOST` for the master connection."""
        return ["ssh", *self.options(), "-O", op, self.host]


_PLAIN = re.compile(r"[A-Za-z0-9_./:=+,@%-]+")
_KEPT = re.compile(r"[A-Za-z0-9_./:=+,@% -]")  # passed through printf %b unchanged


def as_sh(line: str) -> str:
    """LINE as a command any login shell hands to `sh`: ssh gives the command to the
    account's shell, and csh or tcsh read quotes, `!` and newlines otherwise than sh. A plain
    word goes as it is; anything else travels as octal escapes (`\\0NNN`) that `sh` decodes
    with `printf %b` and runs with `eval`."""
    if _PLAIN.fullmatch(line):
        return line
    data = line.encode()
    esc = "".join(chr(b) if _KEPT.fullmatch(chr(b)) else f"\\0{b:03o}" for b in data)
    return f"""sh -c 'eval "$(printf %b "{esc}")"'"""


def remote_line(remote_argv: Sequence[str], cwd: str | None = None) -> str:
    line = shlex.join(remote_argv)
    return f"cd -- {shlex.quote(cwd)} && {line}" if cwd else line


class SshRunner:
    """A cluster's login node through one shared ssh connection: the `host.Host` that is not
    this machine (`host.OverSsh`).

    A tool missing there gives 127 (the remote shell's "command not found"), as locally;
    a failed connection gives ssh's 255 with ssh's message.
    """

    remote = True

    def __init__(self, target: SshTarget | str, timeout: float | None = None) -> None:
        self.target = target if isinstance(target, SshTarget) else SshTarget(target)
        self.name: str = self.target.host
        self.ssh_host: str | None = self.target.host
        self.timeout = timeout or tool_timeout()

    def __call__(self, argv: Sequence[str], cwd: Cwd = None, *, timeout: Secs = None) -> CmdResult:
        return self.shell(remote_line(argv, str(cwd) if cwd else None), timeout=timeout)

    def shell(self, line: str, input: Input = None, *, timeout: Secs = None) -> CmdResult:
        """Run one shell line remotely (the caller quotes every value). Its output is what the
        line printed: what the account's rc files print before it (a welcome, a module
        system's notes) is left out, by a random mark the line prints first (decision
        remote-output-marked)."""
        mark = secrets.token_hex(8)
        res = run(
            self.target.line_argv(f"printf '%s\\n' {mark}; {line}"),
            input=input,
            timeout=timeout or self.timeout,
        )
        at = res.raw.find(f"{mark}\n".encode())
        if at < 0:  # the line never ran: ssh failed, or the login shell runs nothing
            return res
        raw = res.raw[at + len(mark) + 1 :]
        return dataclasses.replace(res, raw=raw, out=raw.decode(errors="replace"))

    def start(self, line: str) -> Session:
        """Run one shell line remotely, kept running beside the caller (`proc.Session`): its
        input is the ssh connection's, so it ends when this process does."""
        return Session(self.target.line_argv(line))

    def check(self) -> CmdResult:
        """Connect (opening the master) and return `pwd`, `$HOME` and the user of the login
        shell, one a line."""
        return self.shell('pwd && printf "%s\\n" "$HOME" && id -un')

    def copy(self, files: Sequence[Path], remote_dir: str) -> CmdResult:
        """Copy files (flat, keeping their mode) into remote_dir, made if missing: one tar
        stream through ssh, no scp/sftp/rsync needed on the host."""
        buf = io.BytesIO()
        # dereference: a rebuilt job folder's files are links into its current set
        with tarfile.open(fileobj=buf, mode="w", dereference=True) as tar:
            for f in files:
                tar.add(str(f), arcname=f.name, recursive=False)
        q = shlex.quote(remote_dir)
        # folders it makes are open to nobody else, whatever the login's umask: the jobs'
        # logs go there (decision slurm-logs-folder-is-private)
        line = f"umask 022 && mkdir -p -- {q} && tar -x -m --no-same-owner -f - -C {q}"
        return self.shell(line, input=buf.getvalue())

    def read_from(self, path: str, offset: int) -> bytes | None:
        """The bytes of a remote file from `offset` on, at most `limit` of them (as a local
        read takes them), None when it does not exist yet. The path comes from files others
        may edit: `--` keeps a leading `-` from being an option (decision shown-never-obeyed)."""
        q = shlex.quote(path)
        res = self.shell(
            # a regular file, not a link: a shared work_dir (decision shared-work-dir)
            f"{{ test -f {q} && ! test -h {q}; }} || exit 3; "
            f"tail -c +{offset + 1} -- {q} | head -c {MAX_READ}"
        )
        if res.rc != 0:
            return None
        return res.raw

    def close(self) -> None:
        """Stop the master connection (if one runs)."""
        run(self.target.control_argv("exit"), timeout=15)
