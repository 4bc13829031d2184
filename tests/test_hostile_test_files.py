"""A selected test file or a test list that is no ordinary file (a named pipe, /dev/zero, nesting
past the parser's limit, NULs, a byte order mark, CRLF, a timeout mark of 1e309, a 50 MB line):
`build` and `build-many` end with one clear line and exit 2, or read it as Python would, never
a traceback, a hang or memory without bound."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .conftest import Env, Run
from .test_batch import many


@pytest.fixture
def no_hang() -> Iterator[None]:
    """A hang fails the test after 60 s instead of holding the suite."""

    def hung(*_: object) -> None:
        raise AssertionError("build hung")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _file(env: Env) -> Path:
    return env.repo / "tests" / "integration" / "defs" / "accuracy" / "test_x.py"


REFUSED: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (os.mkfifo, "not a regular file"),
    "dev-zero": (lambda f: f.symlink_to("/dev/zero"), "not a regular file"),
    "deep": (
        lambda f: f.write_text("X = " + "(" * 100_000 + "1" + ")" * 100_000 + "\n"),
        "too many nested parentheses",
    ),
    "nul": (lambda f: f.write_bytes(b"import pytest\x00\ndef test_a():\n    pass\n"), "null"),
    "too-big": (
        lambda f: f.write_text("# x\n" * 2_200_000 + "def test_a():\n    pass\n"),
        "larger than",
    ),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_a_test_file_that_cannot_be_read_is_refused_in_one_line(
    cli: Callable[..., Run], env: Env, no_hang: None, kind: str
) -> None:
    make, reason = REFUSED[kind]
    make(_file(env))
    r = cli([], env.request(test_cmd="pytest accuracy/test_x.py::test_a"))
    assert r.code == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: test_cmd: cannot parse ") and reason in line, line


@pytest.mark.parametrize(
    "body",
    [
        b"\xef\xbb\xbfimport pytest\r\n@pytest.mark.skip_less_device(2)\r\ndef test_a():\r\n"
        b"    pass\r\n",  # a byte order mark and CRLF: Python runs it
        b"import pytest\n@pytest.mark.timeout(1e309)\n@pytest.mark.skip_less_device(2)\n"
        b"def test_a():\n    pass\n",  # an infinite timeout is no number of seconds
    ],
)
def test_a_test_file_python_runs_is_read(
    cli: Callable[..., Run], env: Env, no_hang: None, body: bytes
) -> None:
    _file(env).write_bytes(body)
    r = cli([], env.request(test_cmd="pytest accuracy/test_x.py::test_a"))
    assert r.code == 0, r.stderr
    assert "Devices:      2 GPUs" in r.stdout, r.stdout


LISTS: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "fifo": ("list.txt", os.mkfifo, "is not a regular file"),
    "dev-zero": ("list.txt", lambda f: f.symlink_to("/dev/zero"), "is not a regular file"),
    "yaml-fifo": ("list.yaml", os.mkfifo, "is not a regular file"),
    "yaml-dev-zero": ("list.yaml", lambda f: f.symlink_to("/dev/zero"), "is not a regular file"),
    "one-50-MB-line": (
        "list.txt",
        lambda f: f.write_bytes(b"x" * 50_000_000),
        "error: test_cmd: is longer than 1048576 bytes",
    ),
}


@pytest.mark.parametrize("kind", sorted(LISTS))
def test_a_list_that_cannot_be_read_is_refused_in_one_line(
    cli: Callable[..., Run], env: Env, tmp_path: Path, no_hang: None, kind: str
) -> None:
    name, make, reason = LISTS[kind]
    lst = tmp_path / name
    make(lst)
    r = cli(many(env, tmp_path, lst))
    assert r.code == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert reason in line, line
    assert not (env.work / "jobs.json").exists()  # nothing written
