"""A job folder's set of files, made current whole (decisions atomic-job-set,
failed-set-restored and one-commit-per-folder).

An existing work_dir keeps each set of its files in a generation folder of its own,
`.tsb-sets/g-<digest of the set>`, and the link `.tsb-sets/current` names the current one.
The files keep their documented paths: `work_dir/<name>` is a link to
`.tsb-sets/current/<name>`, which users, sbatch and the tool read as the file. Making a new
set current is one rename of the `current` link, so whatever interrupts a rebuild (a SIGKILL
too), a reader sees the old set or the new one, never a mix; work_dir itself never moves (it
may be a checkout's root, or a running job's folder holding its logs and records).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
from collections.abc import Callable

from trtllm_script_builder.atomic import folder_lock, remove, signals_held, temp_name
from trtllm_script_builder.errors import BuildError

SETS = ".tsb-sets"
CURRENT = "current"
STAGE = "tsb-set"  # the staged set inside work_dir: `.tsb-set.tsb-<host>-<pid>-<token>.tmp`
_GEN = re.compile(r"g-[0-9a-f]{16}")
_LINKED = f"{SETS}/{CURRENT}/"


def install(stage: str, folder: str, stale: Callable[[str], set[str]] | None = None) -> None:
    """Make the set staged in `stage` (a folder inside `folder`) the folder's current set,
    under the folder's lock with signals held (decisions atomic-job-set,
    failed-set-restored and one-commit-per-folder). `stale`, called under the lock, names files of
    the old set beyond the new set's names."""
    names = sorted(os.listdir(stage))
    with folder_lock(folder), signals_held():
        for path in (os.path.join(folder, n) for n in names):
            if stat.S_ISDIR(_mode(path)):  # a folder is never replaced by a file
                raise FileExistsError(errno.EEXIST, f"{path} is in the way of a file", path)
        sets = os.path.join(folder, SETS)
        made = not os.path.lexists(sets)
        if made:
            os.mkdir(sets, 0o755)  # never open to the team, whatever the umask
        else:
            _check_own(sets)
        try:
            _tidy(sets)
            drop = (stale(folder) if stale else set()) - set(names)
            _adopt(folder, sorted({*names, *drop}))
        except BaseException:
            if made:
                remove(sets)
            raise
        gen = _digest(stage)
        same = _current(sets) == gen
        if same:  # the set there already: its links only (one may have been removed)
            remove(stage)
        else:
            remove(os.path.join(sets, gen))
            os.rename(stage, os.path.join(sets, gen))
        for n in names:
            _link(folder, n)
        if not same:
            _switch(sets, gen)
        _tidy(sets)
        _drop_unfilled(folder)


def _adopt(folder: str, names: list[str]) -> None:
    """The regular files among `names` (a folder built before it had generations, the user's
    own) become links to a generation holding them, made current first: what they read never
    changes. One that cannot be replaced (immutable, a mount point) puts the rest back."""
    real = [n for n in names if stat.S_ISREG(_mode(os.path.join(folder, n)))]
    if not real:
        return
    sets = os.path.join(folder, SETS)
    before = _current(sets)
    tmp = os.path.join(sets, temp_name("adopted"))
    if before:
        shutil.copytree(os.path.join(sets, before), tmp, symlinks=True, copy_function=_same)
    else:
        os.mkdir(tmp)
    for n in real:
        remove(os.path.join(tmp, n))
        _same(os.path.join(folder, n), os.path.join(tmp, n))
    gen = _digest(tmp)
    target = os.path.join(sets, gen)
    remove(target)
    os.rename(tmp, target)
    _switch(sets, gen)
    done: list[str] = []
    try:
        for n in real:
            _link(folder, n)
            done.append(n)
    except BaseException:
        for n in reversed(done):  # the file itself (a hard link of it) or its copy, back
            back = os.path.join(folder, temp_name(n))
            _same(os.path.join(target, n), back)
            os.replace(back, os.path.join(folder, n))
        if before:
            _switch(sets, before)
        else:
            remove(os.path.join(sets, CURRENT))
        remove(target)
        raise


def _same(src: str, dst: str) -> None:
    """dst is src: a hard link, or where one cannot be made (another user's file, a file
    system without them) a copy with its mode."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def _link(folder: str, name: str) -> None:
    """folder/name becomes the link to `.tsb-sets/current/name`, in one rename."""
    path = os.path.join(folder, name)
    want = _LINKED + name
    with contextlib.suppress(OSError):
        if os.readlink(path) == want:
            return
    tmp = os.path.join(folder, temp_name(name))
    os.symlink(want, tmp)
    try:
        os.replace(tmp, path)
    except BaseException:
        remove(tmp)
        raise


def _check_own(sets: str) -> None:
    """`.tsb-sets` is a real folder of this user's that nobody else may write (decision
    sets-folder-is-own): in a team's work_dir another member could put a link there (the
    tidy-up then removed the files of the folder it named) or a folder of theirs (the job
    folder's links then read their scripts)."""
    st = os.lstat(sets)
    what = (
        "a link"
        if stat.S_ISLNK(st.st_mode)
        else "not a folder"
        if not stat.S_ISDIR(st.st_mode)
        else f"owned by uid {st.st_uid}, not by you"
        if st.st_uid != os.geteuid()
        else "writable by others"
        if st.st_mode & 0o022
        else None
    )
    if what is not None:
        raise BuildError(
            "work_dir",
            f"{sets} is {what}: it must be a folder of yours that only you may write",
            "remove it (and check who else writes into this work_dir), then build again",
        )


def _switch(sets: str, gen: str) -> None:
    """`current` names `gen`: the one step that changes which set is read."""
    tmp = os.path.join(sets, temp_name(CURRENT))
    os.symlink(gen, tmp)
    os.replace(tmp, os.path.join(sets, CURRENT))


def _current(sets: str) -> str | None:
    try:
        gen = os.readlink(os.path.join(sets, CURRENT))
    except OSError:
        return None
    return gen if _GEN.fullmatch(gen) and os.path.isdir(os.path.join(sets, gen)) else None


def _tidy(sets: str) -> None:
    """Everything in `.tsb-sets` but `current` and its generation goes: the lock is held, so
    nothing else is being made there (a SIGKILL's leftovers, generations no longer read)."""
    keep = {CURRENT, _current(sets)}
    for e in os.scandir(sets):
        if e.name not in keep:
            remove(e.path)


def _drop_unfilled(folder: str) -> None:
    """Links of ours that the current set does not fill (an old set's names) go."""
    for e in os.scandir(folder):
        if e.is_symlink() and not os.path.exists(e.path):
            with contextlib.suppress(OSError):
                if os.readlink(e.path).startswith(_LINKED):
                    os.unlink(e.path)


def _mode(path: str) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _digest(folder: str) -> str:
    """The generation name of a set: the same files, the same name."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            st = os.lstat(path)
            h.update(f"{os.path.relpath(path, folder)}\0{st.st_mode:o}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
    return "g-" + h.hexdigest()[:16]
