"""Single files replaced whole: a reader sees the old bytes or the new ones, never a part.

The lowest layer, so every layer that keeps a file (output, the template cache, the runner's
records) writes it the same way; a build's folder of files is `output.writer`'s job.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def write_file(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """One file replaced whole, its folder made when missing."""
    with open_atomically(path, mode, binary=isinstance(data, bytes)) as fh:
        fh.write(data)


@contextlib.contextmanager
def open_atomically(path: Path, mode: int = 0o644, binary: bool = False) -> Iterator[IO[Any]]:
    """A file written under a temporary name beside `path`, renamed over it on success."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path.parent}/.{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
