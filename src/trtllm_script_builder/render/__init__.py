"""Rendering: one Jinja2 template per category; every value goes through the `q` filter."""

from __future__ import annotations

import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

TEMPLATES = Path(__file__).with_name("templates")


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


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The one environment of the package's templates (compiled templates are cached on disk
    only when the writing step gives it a cache: `output.template_cache`)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), **OPTIONS)
    env.filters["q"] = quote
    env.filters["qjoin"] = _qjoin
    return env


def render(template: str | Path, **ctx: Any) -> str:
    """A template of the package by name, or a file of its own (a workflow's from elsewhere)."""
    if isinstance(template, Path):
        return environment().from_string(template.read_text()).render(**ctx)
    return environment().get_template(template).render(**ctx)
