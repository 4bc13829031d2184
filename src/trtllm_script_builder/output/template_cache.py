"""Compiled templates kept on disk, so a process does not compile them again.

Compiling is most of a build's own work: resolve and render of the bundled pytest example take
about 36 ms compiling and 11 ms with the cache; `bench/run.py` shows whole builds both ways.
Render writes nothing: the writing step gives render's environment this cache
(`use_template_cache`) before a build renders.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from pathlib import Path

import jinja2

from trtllm_script_builder.atomic import write_file
from trtllm_script_builder.render import OPTIONS, environment

CACHE_ENV_VAR = "TRTLLM_SCRIPT_BUILDER_CACHE_DIR"


class TemplateCache(jinja2.BytecodeCache):
    """A file is found by a key over the template's name, the Jinja2 and Python builds and the
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


def use_template_cache() -> None:
    """Render's templates are compiled through the cache from now on (once per process)."""
    env = environment()
    if env.bytecode_cache is None:
        folder = cache_dir()
        if folder is not None:
            env.bytecode_cache = TemplateCache(folder)
