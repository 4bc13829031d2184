"""The lock of one clone on a cluster that a sync holds (decision sync-lock): a folder beside
remote_repo_path made with `mkdir`, held by a shell of the sync's own ssh session."""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
from collections.abc import Callable, Iterator

from trtllm_script_builder.errors import ToolFailed
from trtllm_script_builder.process.host import Host
from trtllm_script_builder.process.probe.collect import first_line
from trtllm_script_builder.process.proc import CmdResult, Session
from trtllm_script_builder.process.ssh import SSH_FAILED

_CLEANUP_TIMEOUT = 60.0

# $1 path, $2 seconds to wait, $3 this sync's machine and pid: one sync of remote_repo_path at a
# time, whoever runs it and from wherever (decision sync-lock). A lock is a folder (mkdir is
# atomic on shared file systems too), `owner` inside it: one beside the path (it covers making
# a new clone), taken when the account can write there, then, once the clone is there, one in
# its `.git` (every account that may change the clone can take that one, also one that cannot
# write beside it). This shell holds them while its input is open (the sync's own ssh session)
# and refreshes their time every 10 s. A lock whose holder is gone from this host, or that went
# 2 minutes without a refresh, is removed (one remover at a time, under `<lock>.break`). Lines
# in: `work=DIR` (a folder this sync made, removed when the input ends without `done`), `done`.
# $4 a token: its line `begin=TOKEN` comes first. Lines out: `lock=` (each lock as it is taken), `held=` (owner, while it waits), then
# `locked`, or `busy=`, `stuck=` (a lock of an ended sync it cannot remove), `error=`.
LOCK = r"""
[ -z "$4" ] || printf 'begin=%s\n' "$4"  # what the account's rc files printed is before it
set -f
p=$1 wait=$2 from=$3
parent=$(dirname -- "$p") && name=$(basename -- "$p") || exit 50
host=$(uname -n)
uid=$(id -u)
started() {  # $1 a pid: when its process started on this host (Linux's /proc), else -
  s=$(cut -d')' -f2- "/proc/$1/stat" 2>/dev/null | awk '{ print $20 }')
  printf '%s\n' "${s:--}"
}
me="$host $$ $uid $(id -un) $from $(started $$)"
beside= inside= work= beat=
finish() {
  [ -z "$work" ] || rm -rf -- "$work"
  [ -z "$beat" ] || kill "$beat" 2>/dev/null
  for l in "$inside" "$beside"; do
    [ -z "$l" ] || [ "$(head -n 1 -- "$l/owner" 2>/dev/null)" != "$me" ] || rm -rf -- "$l"
  done
}
quit() { finish; exit "$1"; }
trap 'quit 57' HUP INT TERM PIPE  # PIPE: the sync is gone
ended() {  # $1 a lock, $2 its owner line: its holder is gone from this host, or went quiet
  l=$1
  set -- $2
  case $2 in ''|*[!0-9]*) ;; *)
    if [ "$1" = "$host" ]; then
      # its shell still runs here, whoever's (the same process: its start time, where the
      # lock has one): live, however long since its last refresh
      if ps -p "$2" >/dev/null 2>&1 && { [ "${6:--}" = - ] || [ "$(started "$2")" = "$6" ]; }; then
        return 1
      fi
      [ "$3" != "$uid" ] || return 0
    fi
  esac
  [ -n "$(find "$l" -prune -mmin +2 2>/dev/null)" ]
}
take() {  # $1 the lock folder, $2 beside or inside: returns once this shell holds it
  L=$1
  printf 'lock=%s\n' "$L"
  start=$(date +%s) told=
  while :; do
    why=$(mkdir -- "$L" 2>&1) && break
    if [ -h "$L" ] || { [ -e "$L" ] && [ ! -d "$L" ]; }; then
      printf 'error=%s is there and is not a lock folder\n' "$L"; quit 54
    fi
    if [ ! -d "$L" ]; then  # removed meanwhile, or it cannot be made
      mkdir -- "$L" 2>/dev/null && break
      [ -d "$L" ] || { printf 'error=%s\n' "$why"; quit 54; }
      continue
    fi
    owner=$(head -n 1 -- "$L/owner" 2>/dev/null)
    if ended "$L" "$owner"; then
      if mkdir -- "$L.break" 2>/dev/null; then
        if [ "$(head -n 1 -- "$L/owner" 2>/dev/null)" = "$owner" ] && ended "$L" "$owner"; then
          rm -rf -- "$L" 2>/dev/null
          if [ -d "$L" ] && [ "$(head -n 1 -- "$L/owner" 2>/dev/null)" = "$owner" ]; then
            rmdir -- "$L.break"; printf 'stuck=%s\n' "$owner"; quit 56
          fi
        fi
        rmdir -- "$L.break"
        continue
      elif [ -n "$(find "$L.break" -prune -mmin +1 2>/dev/null)" ]; then
        rmdir -- "$L.break" 2>/dev/null  # a sync that died while it removed a lock
      fi
    fi
    [ -n "$told" ] || { printf 'held=%s\n' "$owner"; told=1; }
    [ $(($(date +%s) - start)) -lt "$wait" ] || { printf 'busy=%s\n' "$owner"; quit 55; }
    sleep 1
  done
  printf '%s\n' "$me" >"$L/owner" || { rm -rf -- "$L"; printf 'error=cannot write %s\n' "$L/owner"; quit 54; }
  case $2 in beside) beside=$L ;; *) inside=$L ;; esac
}
clone=  # a clone's own git folder this account may write (else the sync changes nothing there)
[ ! -d "$p/.git" ] || [ -h "$p/.git" ] || [ ! -w "$p/.git" ] || clone=1
if [ -d "$parent" ] && [ ! -w "$parent" ] && [ -n "$clone" ]; then
  :  # no new clone can be made there: the clone's own lock only
else
  mkdir -p -- "$parent" 2>/dev/null || { printf 'error=cannot make the folder %s\n' "$parent"; exit 54; }
  take "$parent/.$name.tsb-sync.lock" beside
  [ ! -d "$p/.git" ] || [ -h "$p/.git" ] || [ ! -w "$p/.git" ] || clone=1  # made meanwhile
fi
[ -z "$clone" ] || take "$p/.git/tsb-sync.lock" inside
( while kill -0 $$ 2>/dev/null; do
    sleep 10
    for l in "$beside" "$inside"; do [ -z "$l" ] || touch -c -- "$l" 2>/dev/null; done
  done ) </dev/null >/dev/null 2>&1 &
beat=$!
echo locked
while IFS= read -r line; do
  case $line in
    work=/*) work=${line#work=} ;;
    done) work= ;;
  esac
done
finish
"""


@contextlib.contextmanager
def cluster_lock(
    host: Host, path: str, where: str, timeout: float, say: Callable[[str], None]
) -> Iterator[Session]:
    """The lock on remote_repo_path on its host, held while the block runs (decision
    sync-lock): it waits for another sync of that path, whoever runs it, at most the sync's
    time limit; a lock whose sync has ended is removed. The session takes `work=DIR` lines:
    a folder of this sync's that the host removes if this process dies."""
    wait = int(timeout)
    who = f"{plain(os.uname().nodename)}:{os.getpid()}"
    token = secrets.token_hex(8)
    session = host.start(shlex.join(["sh", "-c", LOCK, "tsb-sync", path, str(wait), who, token]))
    try:
        lock, said, begun = "", list[str](), False
        while True:
            line = session.line(timeout + 60)
            if line is not None and not begun:
                # lines before it are the account's rc files' (decision remote-output-marked)
                begun = line == f"begin={token}"
                if not begun:
                    said.append(line)
                continue
            if line is None:
                rc = session.end(_CLEANUP_TIMEOUT)
                res = CmdResult(rc, "", "\n".join(said) or f"exit status {rc}")
                if rc == SSH_FAILED:
                    raise ToolFailed(
                        "ssh_host",
                        f"ssh {host.name}: {first_line(res)}",
                        "check the host name and that `ssh HOST true` works without a prompt "
                        "(open a ControlMaster first for MFA hosts)",
                    )
                if not begun:  # not one line of the script: the login shell ran nothing
                    raise ToolFailed(
                        "ssh_host",
                        f"the account's login shell on {host.name} runs no command "
                        f"({first_line(res)})",
                        f"give the account a login shell that runs commands (`ssh {host.name} "
                        "sh -c true` must work; /bin/false and nologin do not), or use another "
                        "account",
                    )
                raise ToolFailed(
                    "remote_repo_path",
                    f"taking the sync lock of {where} failed: {first_line(res)}",
                    "check that its folder can be written there",
                )
            key, _, value = line.partition("=")
            if line == "locked":
                break
            if key == "lock":
                lock = value
            elif key == "held":
                say(f"waiting for {_holder(value)} to end: it syncs {where} ({lock})")
            elif key == "busy":
                raise ToolFailed(
                    "remote_repo_path",
                    f"{where} is being synced by {_holder(value)}, which did not end within "
                    f"{wait}s",
                    f"run sync again once it has ended (its lock there is {lock})",
                )
            elif key == "stuck":
                raise ToolFailed(
                    "remote_repo_path",
                    f"{where} is locked by {_holder(value)}, which has ended, and this account "
                    f"cannot remove the lock {lock}",
                    "remove that folder there (its owner, or an administrator), then sync again",
                )
            elif key == "error":
                raise ToolFailed(
                    "remote_repo_path",
                    f"taking the sync lock of {where} failed: {plain(value)}",
                    "check that its folder can be written there",
                )
            else:
                said.append(line)
        yield session
    finally:
        session.end(_CLEANUP_TIMEOUT)


def plain(text: str) -> str:
    """A value read from the cluster (a file others may write), fit to show: no control
    characters, at most 200 characters."""
    return text[:200].encode("unicode_escape").decode()


def _holder(owner: str) -> str:
    """Who holds a lock, from its owner line (host, pid, uid, user, machine:pid, the pid's
    start time)."""
    words = owner.split()
    if len(words) < 5:
        return "another sync"
    host, pid, _uid, user, origin = (plain(w) for w in words[:5])
    return f"the sync of {user} from {origin} (pid {pid} on {host})"


__all__ = ["LOCK", "cluster_lock", "plain"]
