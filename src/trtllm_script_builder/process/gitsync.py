"""Bring a local checkout's whole working state to the clone on a remote cluster
(decision sync-snapshot).

`sync_checkout` snapshots what the checkout holds - commits, staged, unstaged and untracked
files that .gitignore does not exclude - into one commit, sends that commit to
`remote_repo_path` on a host (the cluster's login node over ssh, or this machine) and checks
it out there, detached. The tool's job folders at the top (`work_dirs/`, where
remote_work_dir goes by default) are not part of it, on either side.

The user's checkout is only read: the snapshot is made with a temporary index
(GIT_INDEX_FILE) and a temporary object folder (GIT_OBJECT_DIRECTORY, the checkout's own
objects as an alternate), both in a temporary folder, so index, working tree, HEAD, branches,
stash and even .git/objects stay as they were, whatever fails. The commit travels either as a
temporary branch pushed to the repository the remote clone's `origin` names (when a remote of
the local checkout is that repository), or as a `git bundle` streamed into one shell line.
Everything on the remote side runs under the clone's lock there (`sync_lock`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import posixpath
import re
import secrets
import shlex
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trtllm_script_builder.atomic import cleanly, folder_lock, sweep, temp_name
from trtllm_script_builder.errors import BuildError, ToolFailed
from trtllm_script_builder.model.values import whole_number
from trtllm_script_builder.process.host import Host, OverSsh
from trtllm_script_builder.process.probe.collect import first_line
from trtllm_script_builder.process.proc import CmdResult, Session, run, tool_timeout
from trtllm_script_builder.process.ssh import SSH_FAILED, SshTarget
from trtllm_script_builder.process.sync_lock import cluster_lock, plain

Say = Callable[[str], None]

TEMP_BRANCH_PREFIX = "refs/heads/tsb-sync/"
# The tool's own job folders at the top of a checkout (remote_work_dir's default is
# <remote_repo_path>/work_dirs/<name>; TensorRT-LLM's .gitignore does not name the folder):
# they do not travel, are no change of the cluster clone's own, and --force keeps them
# (decision sync-skips-work-dirs).
JOB_FOLDERS = "work_dirs"
_NOT_JOB_FOLDERS = (".", f":(top,exclude,literal){JOB_FOLDERS}")  # a pathspec
FORCE_HINT = "pass --force to discard them"  # the end of a refused sync's fix (sync --force)
TRANSFER_TIMEOUT = 1800.0  # a first bundle of a big repository takes a while
_CLEANUP_TIMEOUT = 60.0
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# an absolute path on the cluster, no control characters (they would end the ssh line)
_REMOTE_PATH = re.compile(r"/[^\x00-\x1f\x7f]*")
# variables that would point git at another repository, index or object folder than ours
_GIT_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
)
# the temporary index is a copy; keep git from writing shared or cached parts of it elsewhere
_INDEX_CONFIG = (
    "-c", "core.fsmonitor=false",
    "-c", "core.splitIndex=false",
    "-c", "core.untrackedCache=false",
    "-c", "gc.auto=0",
    "-c", "core.hooksPath=/dev/null",  # no post-index-change hook for our own index
    # Git LFS's clean filter would store a changed file in the checkout's .git/lfs/objects
    # and the snapshot would hold a pointer the cluster cannot resolve: the content travels
    # (decision sync-content).
    "-c", "filter.lfs.clean=",
    "-c", "filter.lfs.process=",
    "-c", "filter.lfs.required=false",
)  # fmt: skip
_SNAPSHOT_NAME = "trtllm-script-builder"
_SNAPSHOT_EMAIL = "tsb-sync@localhost"

# exit statuses of the remote scripts below (50: no folder, 52: git failed)
_RC_DIRTY = 51
_RC_SUBMODULES = 53
_RC_LFS_POINTERS = 58


@dataclass(frozen=True)
class SyncResult:
    """What sits checked out at remote_repo_path now, and how it got there.

    `method`: "push" (a temporary branch on the shared origin), "bundle" (streamed over ssh),
    "present" (the cluster had the commit already) or "shared" (remote_repo_path is the
    local checkout itself, on a filesystem both share: nothing is sent or changed, and
    `commit` names the state its files are in). `snapshot` is False when the checkout
    had nothing uncommitted, so `commit` is its HEAD.
    """

    commit: str
    method: str
    snapshot: bool
    notes: tuple[str, ...] = field(default_factory=tuple)


def check_remote_path(path: str) -> str:
    """remote_repo_path as the sync takes it: absolute, no control characters, not `/`."""
    if not _REMOTE_PATH.fullmatch(path) or path.rstrip("/") == "":
        shown = path[:120].encode("unicode_escape").decode()
        raise BuildError(
            "remote_repo_path",
            f"{shown!r} is not an absolute path of a folder",
            "give the full path of the checkout on the cluster, e.g. /lustre/users/me/TensorRT-LLM",
        )
    return path.rstrip("/")


# ---------------------------------------------------------------- the local side


def _clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}
    env["GIT_TERMINAL_PROMPT"] = "0"  # never wait for a password nobody types
    env.update(extra or {})
    return env


class _Local:
    """git in the user's checkout (`root`), read-only unless an env says otherwise."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def git(
        self,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        input: bytes | None = None,
        timeout: float | None = None,
    ) -> CmdResult:
        return run(["git", *args], self.root, env=_clean_env(env), input=input, timeout=timeout)

    def must(self, what: str, args: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        res = self.git(args, env)
        if res.rc != 0:
            raise ToolFailed(
                "repo_root",
                f"git {what} failed in {self.root}: {first_line(res)}",
                "check the checkout with `git status` there",
            )
        return res.out.strip()


def _open_checkout(local_repo: Path) -> _Local:
    local_repo = Path(local_repo)
    if not local_repo.is_dir():
        raise BuildError(
            "repo_root", f"{local_repo} is not a git checkout (no such folder)", _ROOT_FIX
        )
    res = run(
        ["git", "rev-parse", "--is-bare-repository", "--show-toplevel"],
        local_repo,
        env=_clean_env(),
    )
    lines = res.out.split("\n")
    if res.rc != 0 or lines[0].strip() != "false" or len(lines) < 2 or not lines[1]:
        why = first_line(res) if res.rc != 0 else "a bare repository has no working tree"
        raise BuildError("repo_root", f"{local_repo} is not a git checkout ({why})", _ROOT_FIX)
    top = Path(lines[1])
    if top.resolve() != local_repo.resolve():
        # the whole outer checkout would land at remote_repo_path, not this folder
        raise BuildError(
            "repo_root",
            f"{local_repo} is a folder inside the git checkout {top}, not its top",
            "give the top folder of your TensorRT-LLM clone",
        )
    return _Local(top)


_ROOT_FIX = "give the root of your TensorRT-LLM clone (repo_root)"


@dataclass
class _Snapshot:
    commit: str
    snapshot: bool
    store: Path  # a bare repository: the snapshot's new objects, the checkout's as alternate
    objects: Path  # the checkout's own object folder
    notes: list[str]


def _snapshot(local: _Local, tmp: Path) -> _Snapshot:
    head = local.git(["rev-parse", "-q", "--verify", "HEAD^{commit}"]).out.strip()
    if not _SHA.fullmatch(head):
        raise BuildError("repo_root", f"{local.root} has no commit yet", "commit once, then sync")
    paths = local.must("rev-parse", ["rev-parse", "--git-path", "index", "--git-path", "objects"])
    index_rel, objects_rel = paths.splitlines()
    user_index = local.root / index_rel
    objects = (local.root / objects_rel).resolve()

    store = tmp / "snapshot.git"
    local.must("init", ["init", "-q", "--bare", "--", str(store)])
    (store / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (store / "objects" / "info" / "alternates").write_text(f"{objects}\n")

    index = tmp / "index"
    if user_index.is_file():
        # A copy keeps the stat data, so `git add` hashes only what changed; it keeps the
        # index's own time too, by which git tells a file changed in the second it was
        # staged (racily clean) and compares its content (decision sync-content).
        shutil.copy2(user_index, index)
    env = {
        "GIT_INDEX_FILE": str(index),
        "GIT_OBJECT_DIRECTORY": str(store / "objects"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(objects),
    }
    if not index.exists():
        local.must("read-tree", [*_INDEX_CONFIG, "read-tree", "HEAD"], env)
    # --sparse: an untracked file outside a sparse checkout's cone travels too
    local.must("add", [*_INDEX_CONFIG, "add", "-A", "--sparse", "--", *_NOT_JOB_FOLDERS], env)
    notes = _drop_nested(local, env)
    tree = local.must("write-tree", [*_INDEX_CONFIG, "write-tree"], env)
    notes += _submodule_notes(local, env)
    if tree == local.must("rev-parse", ["rev-parse", "HEAD^{tree}"]):
        notes.insert(0, f"nothing uncommitted: sending HEAD {head[:12]}")
        return _Snapshot(head, False, store, objects, notes)
    # Same state, same commit: name, e-mail and dates are fixed (HEAD's commit time), so a
    # second sync of an unchanged tree finds the commit on the cluster already.
    when = local.must("log", ["log", "-1", "--format=@%ct +0000", "HEAD"])
    branch = local.git(["symbolic-ref", "-q", "--short", "HEAD"]).out.strip() or "detached HEAD"
    env |= {
        "GIT_AUTHOR_NAME": _SNAPSHOT_NAME,
        "GIT_AUTHOR_EMAIL": _SNAPSHOT_EMAIL,
        "GIT_AUTHOR_DATE": when,
        "GIT_COMMITTER_NAME": _SNAPSHOT_NAME,
        "GIT_COMMITTER_EMAIL": _SNAPSHOT_EMAIL,
        "GIT_COMMITTER_DATE": when,
    }
    message = f"tsb-sync: uncommitted work of {branch} on top of {head[:12]}"
    commit = local.must(
        "commit-tree", ["commit-tree", "--no-gpg-sign", "-p", head, "-m", message, tree], env
    )
    notes.insert(0, f"snapshot {commit[:12]} of the uncommitted work on top of {head[:12]}")
    return _Snapshot(commit, True, store, objects, notes)


def _drop_nested(local: _Local, env: Mapping[str, str]) -> list[str]:
    """Untracked repositories inside the checkout (`git add` makes them links to a commit
    that exists only here, which the cluster's submodule update fails on) stay out of the
    snapshot, each with a note. A submodule the user added (`git submodule add`: its link is
    in the user's own index) is none of them: it travels."""

    def links(args: list[str], env: Mapping[str, str] | None = env) -> set[str]:
        out = local.must(args[0], [*_INDEX_CONFIG, *args], env).split("\0")
        return {e.partition("\t")[2] for e in out if e.startswith("160000 ")}

    known = links(["ls-tree", "-r", "-z", "HEAD"]) | links(["ls-files", "-s", "-z"], None)
    new = sorted(links(["ls-files", "-s", "-z"]) - known)
    if new:
        drop = local.git(
            [*_INDEX_CONFIG, "update-index", "--force-remove", "-z", "--stdin"],
            env, input="".join(f"{n}\0" for n in new).encode(),
        )  # fmt: skip
        if drop.rc != 0:
            raise ToolFailed(
                "repo_root",
                f"git update-index failed in {local.root}: {first_line(drop)}",
                "check the checkout with `git status` there",
            )
    return [
        f"{n} is a git repository of its own that is not a submodule: it stays here "
        "(add it as a submodule, or copy it to the cluster yourself)"
        for n in new
    ]


def _submodule_notes(local: _Local, env: Mapping[str, str]) -> list[str]:
    """Submodules whose own uncommitted changes cannot travel (only their commit does)."""
    res = local.git(
        [*_INDEX_CONFIG, "--no-optional-locks", "status", "--porcelain=v2", "-z",
         "--untracked-files=no", "--ignore-submodules=none"],
        env,
    )  # fmt: skip
    notes = []
    for entry in res.out.split("\0"):
        parts = entry.split(" ", 8)
        if len(parts) == 9 and parts[0] == "1" and parts[2].startswith("S"):
            sub, path = parts[2], parts[8]
            if sub[2] == "M" or sub[3] == "U":
                notes.append(
                    f"submodule {path} has uncommitted changes that stay here "
                    "(only its commit travels); commit them in the submodule and push them"
                )
    return notes


# ---------------------------------------------------------------- the remote side

# Every remote script starts with `keep`, the pathspec of what is not a job folder.
_KEEP = f"keep={shlex.quote(_NOT_JOB_FOLDERS[1])}\n"

# $1 path, $2 commit: what is at the path (key=value lines)
_PROBE = (
    _KEEP
    + r"""
p=$1
if [ ! -e "$p" ]; then
  if [ -L "$p" ]; then echo state=notdir; else echo state=missing; fi
  exit 0
fi
[ -d "$p" ] || { echo state=notdir; exit 0; }
cd "$p" 2>/dev/null || { echo state=unreadable; exit 0; }
[ -n "$(ls -A . 2>/dev/null)" ] || { echo state=empty; exit 0; }
command -v git >/dev/null 2>&1 || { echo state=nogit; exit 0; }
if ! top=$(git rev-parse --show-toplevel 2>/dev/null); then
  # git refuses a repository another account owns (its safe.directory check)
  if [ -d .git ] && [ ! -O . ]; then
    printf 'state=foreign\nowner=%s\n' "$(ls -ld . | awk '{ print $3 }')"
  else
    echo state=notgit
  fi
  exit 0
fi
[ "$top" = "$(pwd -P)" ] || { echo state=notgit; exit 0; }
echo state=repo
# what any account may change makes git run their programs (decision sync-cluster-git)
gd=$(git rev-parse --absolute-git-dir 2>/dev/null)
for f in "$gd" "$gd/config" "$gd/hooks" "$gd/info" "$gd/modules"; do
  [ -z "$(find "$f" -prune -perm -0002 ! -type l 2>/dev/null)" ] || printf 'open=%s\n' "$f"
done
printf 'top=%s\n' "$top"
printf 'inode=%s\n' "$(ls -di . | awk '{ print $1 }')"
# where origin fetches from (the clone's own insteadOf rewrites applied)
if [ -n "$(git config --get remote.origin.url)" ]; then
  printf 'origin=%s\n' "$(git ls-remote --get-url origin)"
fi
printf 'head=%s\n' "$(git rev-parse -q --verify 'HEAD^{commit}')"
if git cat-file -e "$2^{commit}" 2>/dev/null; then echo has=yes; else echo has=no; fi
git status --porcelain --ignore-submodules=all -- . "$keep" 2>/dev/null |
  awk 'NR <= 3 { print "change=" $0 } END { print "changes=" NR }'
git log -n 20 --format='tip=%H' 2>/dev/null
git for-each-ref --sort=-committerdate --count=100 --format='tip=%(objectname)' \
  refs/heads refs/remotes 2>/dev/null
"""
)

# $1 path, $2 url (empty: a new empty repository): a new clone for a missing or empty path,
# made in a private folder beside it (printed as `work=`) and renamed into place once whole
# (_PUBLISH): a sync that fails removes only that folder, and of two syncs to one path the
# second cannot replace the first's clone (decision sync-leaves-nothing).
_CREATE = r"""
parent=$(dirname -- "$1") && name=$(basename -- "$1") || exit 50
mkdir -p -- "$parent" || exit 50
# what a killed sync of this user left here (under the lock no other sync of the path runs);
# the name's own `*`, `?` and `[` match only themselves
glob=$(printf '%s\n' "$name" | sed 's/[][*?\\]/\\&/g')
find "$parent" -mindepth 1 -maxdepth 1 -type d -name ".$glob.tsb-sync-??????" -user "$(id -u)" \
  -exec rm -rf -- {} + 2>/dev/null
t=$(mktemp -d "$parent/.$name.tsb-sync-XXXXXX") || exit 50
chmod "$(umask -S)" "$t" || exit 50
printf 'work=%s\n' "$t"
if [ -n "$2" ] && GIT_TERMINAL_PROMPT=0 git clone -q --no-checkout -- "$2" "$t" </dev/null; then
  echo cloned=yes
  exit 0
fi
cd "$t" && git init -q || exit 52
"""

# $1 the finished clone's folder, $2 path: a rename, refused when path is there and not empty
_PUBLISH = r"""
mv -T -- "$1" "$2"
"""

# $1 path, $2 ref: fetch the temporary branch from origin (no remote-tracking ref is made)
_FETCH_ORIGIN = r"""
cd "$1" || exit 50
GIT_TERMINAL_PROMPT=0 git fetch -q --no-tags --refmap= origin "$2" </dev/null || exit 52
"""

# $1 path, $2 ref; stdin: the bundle. The bundle file lives in .git while git reads it.
_FETCH_BUNDLE = r"""
cd "$1" || exit 50
gd=$(cd "$(git rev-parse --git-dir)" && pwd -P) || exit 52
t=$(mktemp "$gd/tsb-sync-XXXXXX") || exit 52
trap 'rm -f "$t"' EXIT
trap 'rm -f "$t"; exit 52' HUP INT TERM
cat >"$t" || exit 52
git fetch -q --no-tags --refmap= -- "$t" "$2" </dev/null || exit 52
"""

# $1 path, $2 commit, $3 force (1 or empty), $4 submodules (1 or empty; decision sync-submodules)
_CHECKOUT = (
    _KEEP
    + r"""
cd "$1" || exit 50
export GIT_TERMINAL_PROMPT=0
if [ -z "$3" ] && [ -n "$(git status --porcelain --ignore-submodules=all -- . "$keep" | head -n 1)" ]; then
  echo "the checkout has changes of its own" >&2
  exit 51
fi
if [ -n "$3" ]; then
  git checkout -q -f --detach "$2" && git clean -q -f -d -- . "$keep" || exit 52
else
  git checkout -q --detach "$2" || exit 52
fi
[ "$(git rev-parse HEAD)" = "$2" ] || { echo "HEAD is not $2 after the checkout" >&2; exit 52; }
if [ -n "$4" ] && [ -f .gitmodules ]; then
  { git submodule sync -q --recursive && git submodule update -q --init --recursive; } \
    </dev/null || exit 53
fi
# Git LFS files checked out as pointer text: no git-lfs here, or not set up (decision sync-content)
found=$(git -c core.quotePath=false ls-files -- ':(attr:filter=lfs)' 2>/dev/null |
  while IFS= read -r f; do
    if [ -f "$f" ] && [ ! -h "$f" ] && head -c 100 -- "$f" | grep -q '^version https://git-lfs'; then
      printf 'pointer=%s\n' "$f"
    fi
  done | head -n 3)
[ -n "$found" ] || exit 0
printf '%s\n' "$found"
[ -z "$GIT_LFS_SKIP_SMUDGE" ] || { echo skipped=yes; exit 0; }  # asked for there: a note
exit 58
"""
)


# Before every remote script (decision sync-cluster-git): the account's session may point git
# at another repository (GIT_DIR, GIT_WORK_TREE from an rc file or sshd's environment), and a
# clone others may write may hold hooks or an fsmonitor command of theirs; git runs neither.
_CLUSTER_GIT = (
    f"unset {' '.join(_GIT_LOCATION_VARS)}\n"
    "export GIT_TERMINAL_PROMPT=0\n"
    'git() { command git -c core.hooksPath=/dev/null -c core.fsmonitor= "$@"; }\n'
)


def _line(script: str, *args: str) -> str:
    """One remote shell line: `sh -c SCRIPT tsb-sync ARGS...`, every value quoted."""
    return shlex.join(["sh", "-c", _CLUSTER_GIT + script, "tsb-sync", *args])


@dataclass
class _Remote:
    state: str
    owner: str = ""  # of a clone git refuses (state foreign)
    open: list[str] = field(default_factory=list)  # its git folder's parts anyone may write
    top: str = ""  # the clone's folder, symbolic links resolved
    inode: str = ""  # of that folder
    origin: str = ""
    head: str = ""
    has: bool = False
    changes: int = 0
    examples: list[str] = field(default_factory=list)
    tips: list[str] = field(default_factory=list)


def _parse_probe(text: str) -> _Remote:
    r = _Remote(state="")
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key in ("state", "owner", "top", "inode", "origin", "head"):
            setattr(r, key, value)
        elif key == "open":
            r.open.append(value)
        elif key == "has":
            r.has = value == "yes"
        elif key == "changes" and whole_number(value) is not None:
            r.changes = whole_number(value) or 0
        elif key == "change":
            r.examples.append(value.strip())
        elif key == "tip" and _SHA.fullmatch(value) and value not in r.tips:
            r.tips.append(value)
    return r


def _values(out: str, key: str) -> list[str]:
    """The values of a script's `key=value` lines, the last first (an rc file's lines come
    before the script's own)."""
    return [ln.partition("=")[2] for ln in reversed(out.splitlines()) if ln.startswith(f"{key}=")]


def repo_key(url: str) -> tuple[str, str]:
    """(host, path) naming one repository whatever the URL's form: scp-like, ssh://,
    https://, file:// or a path; `.git` and slashes at the end do not count, and hosted
    paths are compared without case."""
    u = url.strip()
    m = re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/]*@)?([^/:]*)(?::\d*)?(/.*)?", u)
    if m and not u.lower().startswith("file://"):
        host, path = m.group(1), m.group(2) or ""
    elif u.lower().startswith("file://"):
        host, path = "", u[len("file://") :]
    elif m2 := re.fullmatch(r"(?:[^@/:]+@)?([^/:]+):(?!//)(.+)", u):
        host, path = m2.group(1), m2.group(2)
    else:
        host, path = "", u
    path = path.rstrip("/").removesuffix(".git").rstrip("/")
    if host:
        return host.lower(), path.strip("/").lower()
    return "", path


def _push_urls(local: _Local, remote_origin: str, notes: list[str]) -> list[tuple[str, str]]:
    """(remote name, URL) of each local remote that is the same repository as the cluster
    clone's origin, as the URL a push really goes to after the user's `url.<base>.insteadOf`
    and `pushInsteadOf` rewrites: never a `pushurl` or a rewrite elsewhere (a fork), which the
    cluster does not read. A remote whose push is rewritten elsewhere gets a note and no push
    (decision sync-push-target)."""
    if not remote_origin:
        return []
    res = local.git(["config", "-z", "--get-regexp", r"^remote\..*\.(url|pushurl)$"])
    urls: dict[str, list[str]] = {}
    push: dict[str, list[str]] = {}
    for entry in res.out.split("\0"):
        key, _, value = entry.partition("\n")
        m = re.fullmatch(r"remote\.(.+)\.(url|pushurl)", key, re.DOTALL)
        if m and value:
            (push if m.group(2) == "pushurl" else urls).setdefault(m.group(1), []).append(value)
    fetch_rules, push_rules = _rewrites(local)
    want = repo_key(remote_origin)
    found = []
    for name, fetch_urls in urls.items():
        for url in push.get(name, []) + fetch_urls:
            target = push_target(url, fetch_rules, push_rules)
            ok = (
                repo_key(target) == want
                and not target.startswith("-")
                and push_target(target, fetch_rules, push_rules) == target  # pushed as is
                and repo_key(_alias(target, fetch_rules) or target) == want  # ls-remote too
            )
            if ok:
                found.append((name, target))
                break
            if repo_key(url) == want:
                notes.append(
                    f"a push to {name} ({url}) goes to {target} (url.<base>.pushInsteadOf or "
                    "insteadOf in your git config), which the cluster does not read: not pushed"
                )
    return found


def _rewrites(local: _Local) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The user's URL rewrites, (base, prefix) in config order: `url.<base>.insteadOf` and
    `url.<base>.pushInsteadOf`."""
    res = local.git(["config", "-z", "--get-regexp", r"^url\..*\.(insteadof|pushinsteadof)$"])
    fetch: list[tuple[str, str]] = []
    push: list[tuple[str, str]] = []
    for entry in res.out.split("\0"):
        key, _, value = entry.partition("\n")
        m = re.fullmatch(r"url\.(.*)\.(insteadof|pushinsteadof)", key, re.DOTALL)
        if m:
            (push if m.group(2) == "pushinsteadof" else fetch).append((m.group(1), value))
    return fetch, push


def _alias(url: str, rules: list[tuple[str, str]]) -> str | None:
    """git's rewrite of `url` by the longest matching prefix (the first of equal ones), None
    when none matches (git's remote.c, alias_url)."""
    best: tuple[str, str] | None = None
    for base, prefix in rules:
        if url.startswith(prefix) and (best is None or len(prefix) > len(best[1])):
            best = (base, prefix)
    return None if best is None else best[0] + url[len(best[1]) :]


def push_target(
    url: str, fetch_rules: list[tuple[str, str]], push_rules: list[tuple[str, str]]
) -> str:
    """Where `git push URL` goes: a pushInsteadOf rewrite, else an insteadOf one, else URL
    itself (git's remote.c: add_url_alias, add_pushurl_alias)."""
    return _alias(url, push_rules) or _alias(url, fetch_rules) or url


def _clone_url(local: _Local) -> str | None:
    """The URL a new cluster clone is made from: where the local checkout's `origin` fetches
    from (its insteadOf rewrites applied: the cluster does not know them)."""
    if not local.git(["config", "--get", "remote.origin.url"]).out.strip():
        return None
    url = local.git(["ls-remote", "--get-url", "origin"]).out.strip()
    return url if url and not url.startswith("-") else None


# ---------------------------------------------------------------- the procedure


@dataclass(frozen=True)
class _There:
    """The host of remote_repo_path, every shell line given the sync's long time limit; ssh
    failing to reach it is the refusal ssh_failed."""

    host: Host
    timeout: float

    @property
    def name(self) -> str:
        return self.host.name

    def __call__(self, line: str, input: Path | None = None) -> CmdResult:
        res = self.host.shell(line, input, timeout=self.timeout)
        if res.rc == SSH_FAILED:
            raise ssh_failed(res, self.name)
        return res


def sync_checkout(
    target: Host | SshTarget,
    local_repo: Path,
    remote_repo_path: str,
    *,
    force: bool = False,
    submodules: bool = True,
    timeout: float | None = None,
    say: Say = lambda _: None,
    force_hint: str = FORCE_HINT,
) -> SyncResult:
    """Make remote_repo_path on `target` (a Host; an SshTarget is that host over ssh) hold
    exactly what local_repo holds now (committed, staged, unstaged and untracked files
    .gitignore does not exclude), checked out detached.

    Refuses (BuildError, exit 2) a remote checkout with changes of its own unless `force`
    (which discards them: `checkout -f` and `git clean -fd`, ignored files stay). With
    `submodules`, `git submodule update --init --recursive` runs there after the checkout.
    Raises ToolFailed (exit 3) when git or ssh fails; local_repo is never changed.
    `force_hint` ends the refusal's fix: how the caller's user discards the changes.
    """
    path = check_remote_path(remote_repo_path)
    host = OverSsh(target) if isinstance(target, SshTarget) else target
    where = f"{host.name}:{path}"
    local = _open_checkout(local_repo)
    there = _There(host, timeout or max(TRANSFER_TIMEOUT, tool_timeout()))
    # one sync of this checkout at a time: a temporary branch of its name is then a leftover
    with folder_lock(local.must("rev-parse", ["rev-parse", "--absolute-git-dir"])):
        base = tempfile.gettempdir()
        sweep(base)  # the snapshot folder of a sync that was killed (decision sync-leaves-nothing)
        tmp = Path(base) / temp_name("tsb-sync")
        tmp.mkdir(mode=0o700)
        try:
            snap = _snapshot(local, tmp)
            notes = list(snap.notes)
            sha = snap.commit

            with cluster_lock(there.host, path, where, there.timeout, say) as lock:
                remote = _probe(there, path, sha, where)
                if _same_folder(local, remote):
                    notes.append(
                        f"{where} is this checkout itself (a shared filesystem): nothing sent, "
                        "nothing changed"
                    )
                    say(f"{where} is this checkout itself: the cluster sees its files as they are")
                    return SyncResult(sha, "shared", snap.snapshot, tuple(notes))
                fresh = remote.state in ("missing", "empty")  # nothing of anyone's to keep there
                work = path  # where the steps run: a new clone's own folder until it is whole
                try:
                    if fresh:
                        work, remote = _create(there, local, path, sha, where, notes, say, lock)
                    elif remote.changes and not force:
                        raise _dirty(where, remote, force_hint)
                    method = "present"
                    if remote.has:
                        notes.append(f"the cluster had {sha[:12]} already")
                        _sweep_branches(local, remote, notes, there.timeout)
                    else:
                        method = _transfer(there, local, snap, remote, work, where, notes, say)
                    for note in _checkout(
                        there, work, sha, where, force or fresh, submodules, force_hint
                    ):
                        notes.append(note)
                        say(f"warning: {note}")
                    if fresh and there(_line(_PUBLISH, work, path)).rc != 0:
                        raise ToolFailed(
                            "remote_repo_path",
                            f"{where} was made by another sync meanwhile; it was left as it is",
                            "run sync again",
                        )
                    lock.send("done\n")
                except BaseException:
                    if work != path:  # the folder this sync made, and only that
                        host.shell(shlex.join(["rm", "-rf", "--", work]), timeout=there.timeout)
                    raise
                if remote.changes and force and not fresh:
                    notes.append(
                        f"discarded {remote.changes} change(s) of the cluster checkout (--force)"
                    )
                say(f"{where} is at {sha[:12]} ({method})")
                stale = _build_outputs(there, path, where)
                if stale is not None:
                    notes.append(stale)
                    say(f"warning: {stale}")
                return SyncResult(sha, method, snap.snapshot, tuple(notes))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _same_folder(local: _Local, remote: _Remote) -> bool:
    """remote_repo_path is the local checkout itself (a filesystem the cluster shares): the
    same resolved path and the same inode. Syncing there would detach, or with `force` reset,
    the user's own checkout."""
    if remote.state != "repo" or not remote.top or not remote.inode.isdigit():
        return False
    return (
        remote.top == str(local.root.resolve()) and int(remote.inode) == os.stat(local.root).st_ino
    )


def ssh_failed(res: CmdResult, host: str) -> ToolFailed:
    """The refusal when ssh cannot reach `host`, with ssh's own complaint."""
    return ToolFailed(
        "ssh_host",
        f"ssh {host}: {first_line(res)}",
        "check the host name and that `ssh HOST true` works without a prompt "
        "(open a ControlMaster first for MFA hosts)",
    )


def _probe(there: _There, path: str, sha: str, where: str) -> _Remote:
    res = there(_line(_PROBE, path, sha))
    if res.rc != 0 and "state=" not in res.out:
        raise ssh_failed(res, there.name)
    remote = _parse_probe(res.out)
    if remote.state == "notdir":
        raise BuildError(
            "remote_repo_path",
            f"{where} is not a folder",
            "give the folder of the checkout there (or a path that does not exist yet)",
        )
    if remote.state == "unreadable":
        raise BuildError(
            "remote_repo_path", f"{where} cannot be entered", "check its permissions there"
        )
    if remote.state == "foreign":
        raise BuildError(
            "remote_repo_path",
            f"{where} is a clone of another account ({plain(remote.owner)}), which git there "
            "refuses to work in",
            "give a clone of your own (or a path that does not exist yet); for a team's clone "
            "its owner must let you write it and you must trust it (`git config --global --add "
            "safe.directory PATH` there)",
        )
    if remote.open:
        raise BuildError(
            "remote_repo_path",
            f"{where}: {plain(remote.open[0])} may be changed by every account there "
            "(world-writable), and git would run the programs its config names",
            "make it writable by its owner only (`chmod o-w` there), then sync again",
        )
    if remote.state == "notgit":
        raise BuildError(
            "remote_repo_path",
            f"{where} holds files but is not the top of a git checkout",
            "give the folder of a clone, an empty folder or a path that does not exist yet",
        )
    if remote.state == "nogit":
        raise ToolFailed(
            "remote_repo_path",
            f"{there.name} has no git",
            "install git there, or put it on the PATH of non-interactive ssh shells",
        )
    return remote


def _dirty(where: str, remote: _Remote, force_hint: str) -> BuildError:
    shown = ", ".join(remote.examples[:3])
    return BuildError(
        "remote_repo_path",
        f"{where} has changes of its own ({remote.changes} file(s): {shown}) "
        "that the sync would overwrite or leave behind",
        f"commit or stash them there, or {force_hint}",
    )


def _create(
    there: _There,
    local: _Local,
    path: str,
    sha: str,
    where: str,
    notes: list[str],
    say: Say,
    lock: Session,
) -> tuple[str, _Remote]:
    """A new clone of the local origin for a missing or empty path, else an empty repository
    (the bundle then carries the whole history), in a folder of its own beside the path: that
    folder and what is there."""
    url = _clone_url(local) or ""
    if url:
        say(f"cloning {url} into {where}")
    res = there(_line(_CREATE, path, url))
    # the folder _CREATE made, by its name (decision remote-output-marked): lines the
    # account's rc files print come first and say anything; this folder is removed on failure
    parent, name = posixpath.split(path)
    made = re.compile(re.escape(f"{parent}/.{name}.tsb-sync-") + "[A-Za-z0-9]{6}")
    work = next((w for w in _values(res.out, "work") if made.fullmatch(w)), "")
    if work.startswith("/"):
        lock.send(f"work={work}\n")  # removed there if this process dies before it is whole
    if res.rc != 0 or not work.startswith("/"):
        if work.startswith("/"):
            there(shlex.join(["rm", "-rf", "--", work]))
        raise ToolFailed(
            "remote_repo_path",
            f"making the checkout at {where} failed: {first_line(res)}",
            "check that its parent folder can be written",
        )
    if "cloned=yes" in res.out.splitlines():
        notes.append(f"cloned {url} into {where}")
    elif url:
        notes.append(f"cloning {url} there failed ({first_line(res)}); made an empty repository")
    else:
        notes.append(f"made an empty repository at {where}")
    return work, _probe(there, work, sha, where)


def _transfer(
    there: _There,
    local: _Local,
    snap: _Snapshot,
    remote: _Remote,
    path: str,
    where: str,
    notes: list[str],
    say: Say,
) -> str:
    """Send the commit; returns the method that worked. A shared origin is tried first; a
    push it refuses or a fetch the cluster cannot make falls back to the bundle."""
    sha = snap.commit
    mine = f"{TEMP_BRANCH_PREFIX}{_checkout_tag(local)}-"
    ref = f"{mine}{sha[:12]}-{secrets.token_hex(4)}"
    for name, url in _push_urls(local, remote.origin, notes):
        # this checkout's syncs run one at a time (the lock in sync_checkout): a branch of
        # its name there is what an interrupted or killed one left
        left = local.git(["ls-remote", "--refs", "--", url, f"{mine}*"], timeout=there.timeout)
        stale = [r for r in (ln.partition("\t")[2] for ln in left.out.splitlines()) if r]
        say(f"pushing {sha[:12]} to {name} as {ref.removeprefix('refs/heads/')}")
        env = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(snap.store / "objects")}
        try:
            push = local.git(
                ["push", "-q", "--no-verify", "--no-follow-tags", "--recurse-submodules=no",
                 "--", url, f"{sha}:{ref}"],
                env, timeout=there.timeout,
            )  # fmt: skip
            fetched = there(_line(_FETCH_ORIGIN, path, ref)) if push.rc == 0 else None
        finally:
            cleanly(functools.partial(_delete_branches, local, url, name, [ref, *stale], notes))
        if fetched is None:
            notes.append(f"push to {name} refused ({first_line(push)}); sent a bundle instead")
            break
        if fetched.rc == 0:
            return "push"
        notes.append(
            f"the cluster could not fetch from its origin ({first_line(fetched)}); "
            "sent a bundle instead"
        )
        break
    _send_bundle(there, local, snap, remote, path, where, ref, say)
    return "bundle"


def _sweep_branches(local: _Local, remote: _Remote, notes: list[str], timeout: float) -> None:
    """The temporary branches a killed sync of this checkout left on the shared origin go
    with the next sync, also one that sends nothing (decision sync-leaves-nothing)."""
    mine = f"{TEMP_BRANCH_PREFIX}{_checkout_tag(local)}-"
    for name, url in _push_urls(local, remote.origin, []):
        left = local.git(["ls-remote", "--refs", "--", url, f"{mine}*"], timeout=timeout)
        stale = [r for r in (ln.partition("\t")[2] for ln in left.out.splitlines()) if r]
        if stale:
            cleanly(functools.partial(_delete_branches, local, url, name, stale, notes))


def _delete_branches(local: _Local, url: str, name: str, refs: list[str], notes: list[str]) -> None:
    """The temporary branches gone from the shared origin, whatever ended the push (signals
    wait meanwhile: a short time limit)."""
    left = local.git(["ls-remote", "--refs", "--", url, *refs], timeout=_CLEANUP_TIMEOUT)
    found = [r for r in (ln.partition("\t")[2] for ln in left.out.splitlines()) if r in refs]
    if not found:
        return
    push = ["push", "-q", "--no-verify", "--recurse-submodules=no", "--", url]
    gone = local.git([*push, *(f":{r}" for r in found)], timeout=_CLEANUP_TIMEOUT)
    if gone.rc != 0:
        notes.append(
            f"could not delete the temporary branch {found[0]} on {name} "
            f"({first_line(gone)}); the next sync from here deletes it"
        )


def _checkout_tag(local: _Local) -> str:
    """Names this checkout of this user on this machine in the temporary branches it pushes."""
    who = f"{os.uname().nodename}\0{os.getuid()}\0{local.root.resolve()}"
    return hashlib.sha256(who.encode()).hexdigest()[:12]


def _send_bundle(
    there: _There,
    local: _Local,
    snap: _Snapshot,
    remote: _Remote,
    path: str,
    where: str,
    ref: str,
    say: Say,
) -> None:
    store = snap.store
    sha = snap.commit
    # what the cluster has and this checkout knows too: the bundle leaves it out
    known = local.git(
        ["cat-file", "--batch-check=%(objectname) %(objecttype)"],
        {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(store / "objects")},
        input="".join(f"{t}\n" for t in remote.tips).encode(),
    )
    have = [w[0] for w in (ln.split() for ln in known.out.splitlines()) if w[1:] == ["commit"]]
    git_dir = ["--git-dir", str(store)]
    local.must("update-ref", [*git_dir, "update-ref", ref, sha])
    bundle = store.parent / "sync.bundle"
    local.must("bundle", [*git_dir, "bundle", "create", "-q", str(bundle), ref, *(f"^{h}" for h in have)])  # fmt: skip
    say(f"sending a {bundle.stat().st_size / 1e6:.1f} MB bundle to {where}")
    res = there(_line(_FETCH_BUNDLE, path, ref), input=bundle)  # streamed from the file
    if res.rc != 0:
        raise ToolFailed(
            "remote_repo_path",
            f"sending the snapshot to {where} failed: {first_line(res)}",
            "check the free space and the permissions there",
        )


def _build_outputs(there: _There, path: str, where: str) -> str | None:
    """The warning for a clone whose ignored build outputs outlived the sync (the local build's
    bindings check, asked through the host)."""
    from trtllm_script_builder.resolve.checkout import LIST_BUILD_OUTPUTS, stale_build_warning

    res = there(_line(LIST_BUILD_OUTPUTS, path))
    return stale_build_warning(where, res.out.split()) if res.rc == 0 else None


def _checkout(
    there: _There,
    path: str,
    sha: str,
    where: str,
    force: bool,
    submodules: bool,
    force_hint: str = FORCE_HINT,
) -> list[str]:
    """Check `sha` out at `path`; the notes to give (LFS files left as pointers there)."""
    res = there(_line(_CHECKOUT, path, sha, "1" if force else "", "1" if submodules else ""))
    if res.rc == 0:
        if "yes" not in _values(res.out, "skipped"):
            return []
        shown = ", ".join(plain(f) for f in reversed(_values(res.out, "pointer")))
        return [
            f"Git LFS files at {where} hold pointer text, not their content ({shown}): "
            "GIT_LFS_SKIP_SMUDGE is set there; run `git lfs pull` in the clone for them"
        ]
    if res.rc == _RC_DIRTY:
        probe = _probe(there, path, sha, where)
        raise _dirty(where, probe, force_hint)
    if res.rc == _RC_LFS_POINTERS:
        shown = ", ".join(plain(ln[8:]) for ln in res.out.splitlines() if ln[:8] == "pointer=")
        raise ToolFailed(
            "remote_repo_path",
            f"{where} is at {sha[:12]} but its Git LFS files hold pointer text, not their "
            f"content ({shown})",
            "install git-lfs there, run `git lfs install` and `git lfs pull` in the clone (the "
            "objects must be on origin's LFS server: `git lfs push origin HEAD` here), then "
            "sync again",
        )
    lfs = re.search(r"fatal: (.+): smudge filter lfs failed", res.err)
    if lfs:
        raise ToolFailed(
            "remote_repo_path",
            f"checking out {sha[:12]} at {where} failed: Git LFS could not get the content of "
            f"{plain(lfs.group(1))} there",
            "push the LFS objects to origin's LFS server (`git lfs push origin HEAD` here), or "
            "let the cluster reach it, then sync again",
        )
    if res.rc == _RC_SUBMODULES:
        raise ToolFailed(
            "remote_repo_path",
            f"{where} is at {sha[:12]} but its submodules could not be updated: {first_line(res)}",
            "push the submodule commits (or let the cluster reach their URLs), or pass "
            "--no-submodules and update them there yourself",
        )
    raise ToolFailed(
        "remote_repo_path",
        f"checking out {sha[:12]} at {where} failed: {first_line(res)}",
        "look at `git status` there",
    )


__all__ = ["SyncResult", "check_remote_path", "repo_key", "sync_checkout"]
