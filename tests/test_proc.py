"""The one runner (process/proc.run): missing tools, timeouts and bytes, without raising."""

from __future__ import annotations

import sys

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
    code = "import sys, time; print('asking', file=sys.stderr, flush=True); time.sleep(30)"
    res = run([sys.executable, "-c", code], timeout=0.5)
    assert (res.rc, res.timed_out) == (TIMED_OUT, True)
    assert res.err.splitlines() == ["asking", f"{sys.executable}: no answer after 0.5s"]


def test_one_default_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TSB_SLURM_TOOL_TIMEOUT", raising=False)
    assert tool_timeout() == 120.0
    monkeypatch.setenv("TSB_SLURM_TOOL_TIMEOUT", "7")
    assert tool_timeout() == 7.0
