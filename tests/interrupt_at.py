"""Run the command line with a stop made by the test suite, not by a hook in the tool.

    python tests/interrupt_at.py SPEC [ARGS...]   (ARGS as for trtllm-script-builder)

SPEC is one of
  pause:NAME      before the first call of NAME (`os.rename`, or `package.module.attr`), print
                  `tsb-pause NAME` on stderr and wait until stdin ends (the test closes it,
                  e.g. by `communicate()`), then call it: the test does what it must while the
                  command waits, however slow the machine (one signal blocked at that moment
                  arrives after it);
  kill:SIG:N      send this process SIG just before its Nth change to the file system (a
                  rename, link, symlink, unlink, mkdir or rmdir), N counted from 1;
  count           run as is, and say `tsb-ops N` on stderr at the end: the N of `kill`.
"""

from __future__ import annotations

import atexit
import importlib
import os
import signal
import sys
from typing import Any

OPS = ("replace", "rename", "link", "symlink", "unlink", "mkdir", "rmdir")


def _patch(owner: Any, attr: str, before: Any) -> None:
    real = getattr(owner, attr)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        before()
        return real(*args, **kwargs)

    setattr(owner, attr, wrapped)


def _owner(name: str) -> tuple[Any, str]:
    module, _, attr = name.rpartition(".")
    return importlib.import_module(module), attr


def main() -> None:
    spec, args = sys.argv[1], sys.argv[2:]
    kind, _, rest = spec.partition(":")
    if kind == "pause":
        done: list[bool] = []

        def pause() -> None:
            if not done:
                done.append(True)
                sys.stderr.write(f"tsb-pause {rest}\n")
                sys.stderr.flush()
                sys.stdin.read()

        _patch(*_owner(rest), pause)
    else:
        sig, _, nth = rest.partition(":")
        count = [0]

        def step() -> None:
            count[0] += 1
            if kind == "kill" and count[0] == int(nth):
                os.kill(os.getpid(), getattr(signal, sig))

        for op in OPS:
            _patch(os, op, step)
        if kind == "count":
            atexit.register(lambda: sys.stderr.write(f"tsb-ops {count[0]}\n"))
    from trtllm_script_builder.cli import main as cli

    sys.argv = ["trtllm-script-builder", *args]
    cli()


if __name__ == "__main__":
    main()
