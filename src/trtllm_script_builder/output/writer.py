"""The one writer of a job folder: a build's files land whole or not at all (single files:
`atomic`; an existing folder's sets: `output.sets`)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from trtllm_script_builder.atomic import cleanly, make_folders, remove_made, sweep_once, temp_name
from trtllm_script_builder.model.jobspec import OutFile
from trtllm_script_builder.output.sets import STAGE, install


def write_atomically(
    work_dir: Path, files: list[OutFile], stale: Callable[[str], set[str]] | None = None
) -> list[Path]:
    """Land every file in work_dir, or none of them (see `staged_set`)."""
    with staged_set(work_dir, stale) as stage:
        write_files(stage, files)
    return [work_dir / f.name for f in files]


def write_files(folder: Path, files: list[OutFile]) -> None:
    """New files in a private folder (a `staged_set`): nothing to replace, so no temporaries."""
    base = str(folder)
    for f in files:
        _write_new(f"{base}/{f.name}", f.text.encode(), 0o755 if f.executable else 0o644)


@contextlib.contextmanager
def staged_set(work_dir: Path, stale: Callable[[str], set[str]] | None = None) -> Iterator[Path]:
    """A private folder to write work_dir's new files in; they replace the old ones as a set.

    A new work_dir is the staged folder itself, made beside it and renamed into place: it
    appears whole (one rename: build-many makes thousands). An existing work_dir gets the
    folder inside it (same file system), and `install` makes it the folder's current set
    (`stale`: see there); nothing else in work_dir is touched. An exception, or a signal
    (`signals_to_exceptions`), removes the folder and the parents made here; what a SIGKILL
    leaves is removed by the next build into or beside work_dir
    (decisions atomic-job-set and failed-set-restored).
    """
    parent = os.path.dirname(os.path.abspath(work_dir))
    made: list[str] = []
    fresh = not os.path.lexists(work_dir)
    if fresh:
        stage = f"{parent}/{temp_name(work_dir.name)}"
    else:
        stage = f"{os.path.abspath(work_dir)}/{temp_name(STAGE)}"
    try:
        make_folders(parent, made)
        if not made:
            sweep_once(parent)
        if not fresh:
            sweep_once(work_dir)
        made.append(stage)  # first: a signal right after the mkdir must still remove it
        try:
            # never open to the team, whatever the umask: a set (decision sets-folder-is-own),
            # nor a new work_dir, where Slurm writes the logs (slurm-logs-folder-is-private)
            os.mkdir(stage, 0o755)
        except FileExistsError:
            made.remove(stage)  # a new random name already taken: not ours to remove
            raise
        yield Path(stage)
        if fresh:
            os.rename(stage, work_dir)
        else:
            install(stage, str(work_dir), stale)
    except BaseException:

        def discard() -> None:
            if stage in made:
                shutil.rmtree(stage, ignore_errors=True)
            remove_made(made)

        cleanly(discard)
        raise


def _write_new(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
