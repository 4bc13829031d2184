"""Rendering: one Jinja2 template per category; every value goes through the `q` filter."""

from __future__ import annotations

import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

TEMPLATES = Path(__file__).with_name("templates")


def _q(value: object) -> str:
    return shlex.quote(str(value))


def _qjoin(words: list[str]) -> str:
    return " ".join(shlex.quote(str(w)) for w in words)


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=False,
        autoescape=False,
    )
    env.filters["q"] = _q
    env.filters["qjoin"] = _qjoin
    return env


_BLANKS = re.compile(r"\n{3,}")


def render(template: str, **ctx: Any) -> str:
    # Optional blocks leave runs of blank lines; one blank line between steps reads best.
    return _BLANKS.sub("\n\n", _env().get_template(template).render(**ctx))
