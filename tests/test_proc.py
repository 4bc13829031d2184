"""The one runner (process/proc.run): missing tools, timeouts and bytes, without raising."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trtllm_script_builder.process.proc import NOT_FOUND, TIMED_OUT, run, tool_timeout


def test_missing_tool_is_127() -> None:
    res = run(["tsb-no-such-tool-here", "x"])
    assert (res.rc, res.found, res.err) == (
        NOT_FOUND,
        False,
        "tsb-no-such-tool-here: command not found",
    )


def test_output_as_text_and_bytes() -> None:
    res = run(
        [
            sys.executable,
            "-c",
            "import sys; sys.stdout.buffer.write(b'a\\xffb'); print('e', file=sys.stderr)",
        ]
    )
    assert (res.rc, res.raw, res.out, res.err) == (0, b"a\xffb", "a\ufffdb", "e\n")
    assert res.text == "a\ufffdb\ne\n"


def test_timeout_keeps_what_was_printed() -> None:
    # sh, not Python: it prints in milliseconds even on a busy machine, well within the timeout
    res = run(["/bin/sh", "-c", "echo asking >&2; exec sleep 30"], timeout=0.5)
    assert (res.rc, res.timed_out) == (TIMED_OUT, True)
    assert res.err.splitlines() == ["asking", "/bin/sh: no answer after 0.5s"]


def test_one_default_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TSB_SLURM_TOOL_TIMEOUT", raising=False)
    assert tool_timeout() == 120.0
    monkeypatch.setenv("TSB_SLURM_TOOL_TIMEOUT", "7")
    assert tool_timeout() == 7.0


def test_stdin_from_bytes_or_streamed_from_a_file(tmp_path: Path) -> None:
    """A file given as input reaches the program as its stdin without being read into this
    process (a first sync's git bundle can be gigabytes); bytes still work, no input is EOF."""
    big = tmp_path / "bundle"
    with big.open("wb") as f:
        f.truncate(64 << 20)  # 64 MiB, sparse
    code = "import sys; print(len(sys.stdin.buffer.read()))"
    # measured in a fresh process: this one's peak may be above the file's size already
    probe = (
        "import resource, sys; from pathlib import Path; "
        "from trtllm_script_builder.process.proc import run; "
        "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; before = peak(); "
        f"out = run([sys.executable, '-c', {code!r}], input=Path(sys.argv[1])).out; "
        "print(out.strip(), peak() - before)"
    )
    size, grown_kib = run([sys.executable, "-c", probe, str(big)]).out.split()
    assert int(size) == 64 << 20
    assert int(grown_kib) < 16 << 10, f"the runner grew by {grown_kib} KiB"
    assert run([sys.executable, "-c", code], input=b"abc").out == "3\n"
    assert run([sys.executable, "-c", code]).out == "0\n"
    res = run([sys.executable, "-c", code], input=tmp_path / "missing")
    assert res.rc == NOT_FOUND and "No such file" in res.err
