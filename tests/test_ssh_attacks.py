"""The ssh socket folder and host as a second user of the machine would attack them: a
~/.ssh others may write or own, a host that hides an option after `user@`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.process.ssh import SshTarget

from .test_backend_host import OTHER_UID, short_tmp

__all__ = ["short_tmp"]  # the fixture, used here by name


def _refusal() -> str:
    with pytest.raises(BuildError) as err:
        SshTarget("login.example.com").line_argv("true")
    assert err.value.exit_code == 2 and "\n" not in err.value.line()
    return err.value.line()


@pytest.mark.parametrize("how", ["open", "theirs"])
def test_a_dot_ssh_others_may_write_or_own_is_refused(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """~/.ssh mode 0777 (not sticky) or another uid's: its owner, or anyone, could rename
    tsb-control away and put a folder of theirs in its place after the check."""
    if how == "theirs" and os.getuid() != 0:
        pytest.skip("needs root to make a folder of another user's")
    home = short_tmp / "h"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    if how == "open":
        (home / ".ssh").chmod(0o777)
        why = f"inside {home}/.ssh, which others may write (mode 777)"
    else:
        os.chown(home / ".ssh", OTHER_UID, OTHER_UID)
        why = f"inside {home}/.ssh, owned by uid {OTHER_UID}"
    assert _refusal() == (
        f"error: ssh_host: {home}/.ssh/tsb-control is not a private folder of yours ({why}): "
        "another user could take over the ssh connection through it; remove it, or set "
        "TSB_SSH_CONTROL_DIR to a short folder of yours with mode 0700"
    )


@pytest.mark.parametrize(
    "host", ["me@-oProxyCommand=x", "me@-J", "a@b@-F/tmp/x", "-l", "me@host name"]
)
def test_a_host_that_hides_an_option_is_refused(host: str) -> None:
    with pytest.raises(BuildError) as err:
        SshTarget(host)
    assert err.value.line().startswith("error: ssh_host: ")
    assert "is not a host name; give host, user@host or an ssh config alias" in err.value.line()


def test_our_options_come_before_the_host_and_after_the_users_config(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ssh takes the first value of an option it reads: the command line's before any config
    file's. A config of the user's (-F) cannot turn our calls into a terminal session or
    another command."""
    monkeypatch.setenv("TSB_SSH_CONFIG", "/etc/their_config")
    argv = SshTarget("login.example.com").line_argv("true")
    host = argv.index("login.example.com")
    options = [argv[i + 1] for i in range(host) if argv[i] == "-o"]
    assert argv[1:3] == ["-F", "/etc/their_config"]
    for want in ("RemoteCommand=none", "RequestTTY=no", "PermitLocalCommand=no",
                 "ClearAllForwardings=yes", "BatchMode=yes", "ControlMaster=auto"):  # fmt: skip
        assert want in options
    assert argv[host + 1] == "--"
