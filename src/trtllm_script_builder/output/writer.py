"""The one atomic writer: a build's files land whole or not at all (single files: `atomic`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from trtllm_script_builder.atomic import open_atomically, write_file
from trtllm_script_builder.model.jobspec import OutFile

__all__ = ["open_atomically", "write_atomically", "write_file"]


def write_atomically(work_dir: Path, files: list[OutFile]) -> list[Path]:
    """Land every file in work_dir, or none of them.

    A new work_dir is filled under a temporary name beside it and renamed into place, so it
    appears whole (one rename: build-many makes thousands). An existing one gets each file under
    a temporary name, then the renames. A failure before the renames leaves the disk as it was,
    parents made here included; the renames themselves do not fail short of a broken disk.
    """
    made: list[str] = []
    d = os.path.dirname(os.path.abspath(work_dir))
    while not os.path.exists(d):
        made.append(d)
        d = os.path.dirname(d)
    fresh = not os.path.lexists(work_dir)
    tag = f".{os.getpid()}.tmp"
    stage = f"{os.path.dirname(os.path.abspath(work_dir))}/.{work_dir.name}{tag}"
    temps: list[tuple[str, Path]] = []
    try:
        for m in reversed(made):
            os.mkdir(m)
        if fresh:
            os.mkdir(stage)
        for f in files:
            tmp = f"{stage}/{f.name}" if fresh else f"{work_dir}/.{f.name}{tag}"
            temps.append((tmp, work_dir / f.name))
            _write_new(tmp, f.text.encode(), 0o755 if f.executable else 0o644)
        if fresh:
            os.rename(stage, work_dir)
        else:
            for tmp, final in temps:
                os.replace(tmp, final)
    except BaseException:
        for tmp, _ in temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for leftover in ([stage] if fresh else []) + made:
            with contextlib.suppress(OSError):
                os.rmdir(leftover)
        raise
    return [final for _, final in temps]


def _write_new(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
