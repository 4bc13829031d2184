"""Rendering: one Jinja2 template per category; every value goes through the `q` filter."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

TEMPLATES = Path(__file__).with_name("templates")
CACHE_ENV_VAR = "TRTLLM_SCRIPT_BUILDER_CACHE_DIR"


_BARE = re.compile(r"[\w@%+:,./-][\w@%+=:,./#-]*", re.ASCII)  # `X==` upsets shellcheck
_DOUBLE_UNSAFE = set('"$`\\!')
_RUNS = re.compile(r"[^'\\]+|['\\]")


def quote(value: object) -> str:
    """One shell word that reads back as exactly `value`, in the most readable safe form."""
    text = str(value)
    if _BARE.fullmatch(text):  # whole: `$` would match before a final newline
        return text
    if "'" not in text and not text.endswith("\\"):
        return f"'{text}'"
    if not _DOUBLE_UNSAFE.intersection(text):
        return f'"{text}"'
    if "\\" not in text:
        return shlex.quote(text)
    # A backslash next to a closing single quote reads like a mistake (shellcheck SC1003), so
    # quotes and backslashes are escaped outside the single-quoted runs.
    return "".join(
        f"\\{part}" if part in ("'", "\\") else f"'{part}'" for part in _RUNS.findall(text)
    )


def _qjoin(words: list[str]) -> str:
    return " ".join(quote(w) for w in words)


OPTIONS: dict[str, Any] = {
    "undefined": jinja2.StrictUndefined,
    "keep_trailing_newline": True,
    "trim_blocks": True,
    "lstrip_blocks": True,
    "autoescape": False,
    "auto_reload": False,  # the templates ship with the package; no stat per render
}


class TemplateCache(jinja2.BytecodeCache):
    """Compiled templates kept on disk, so a process does not compile them again (a third of
    a build's own time otherwise).

    A file is found by a key over the template's name, the Jinja2 and Python builds and the
    environment's options, and is used only when it carries the checksum of the template's
    current source; anything else (stale, torn, foreign) is compiled afresh. A folder that
    cannot be written only costs the compilation.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._salt = "|".join(
            [jinja2.__version__, sys.version, sys.implementation.cache_tag or "", repr(OPTIONS)]
        )

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return hashlib.sha256(f"{self._salt}|{name}".encode()).hexdigest()[:32]

    def get_source_checksum(self, source: str) -> str:
        return hashlib.sha256(source.encode()).hexdigest()

    def _path(self, bucket: jinja2.bccache.Bucket) -> Path:
        return self.directory / f"{bucket.key}.j2c"

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            data = self._path(bucket).read_bytes()
        except OSError:
            return
        try:
            bucket.bytecode_from_string(data)
        except Exception:  # a torn or foreign file: compile instead
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        from trtllm_script_builder.atomic import write_file

        # Whole or not at all for a concurrent reader; a folder we cannot write only costs time.
        with contextlib.suppress(OSError):
            write_file(self._path(bucket), bucket.bytecode_to_string())


def cache_dir() -> Path | None:
    """Where compiled templates go: $TRTLLM_SCRIPT_BUILDER_CACHE_DIR (empty: none), else the
    user's cache folder."""
    if CACHE_ENV_VAR in os.environ:
        value = os.environ[CACHE_ENV_VAR]
        return Path(value) if value else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        return None
    return Path(base) / "trtllm-script-builder" / "templates"


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    folder = cache_dir()
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        bytecode_cache=TemplateCache(folder) if folder else None,
        **OPTIONS,
    )
    env.filters["q"] = quote
    env.filters["qjoin"] = _qjoin
    return env


def render(template: str | Path, **ctx: Any) -> str:
    """A template of the package by name, or a file of its own (a workflow's from elsewhere)."""
    if isinstance(template, Path):
        return _env().from_string(template.read_text()).render(**ctx)
    return _env().get_template(template).render(**ctx)
