"""The one validation layer for values that reach a script, a command line or a file name
(decision one-validation-layer).

Every input the tool reads that a person may have written (the request and its flags, the
cluster file slurm_env.json, the site config, the allocation state file, the image table and
the test files of the checkout) hands its values to these checks. A value is matched whole
(`fullmatch`); characters no script line can carry are refused everywhere; a value that a
program would read as an option is refused where the tool cannot put `--` before it; and no
value may exceed what the kernel passes as one argument. A refusal is one line that names the
field and shows the value escaped and cut short, so a newline in it never starts a second
line.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

from trtllm_script_builder.errors import BuildError


def empty_list() -> list[Any]:
    """A model field's default_factory: for the builtin `list`, pydantic would read the text
    signature with the tokenizer, compiling its patterns (~6 ms a start)."""
    return []


# Linux takes no single argument or environment string of this many bytes or more
# (MAX_ARG_STRLEN, 32 pages): srun, docker and bash would fail with "Argument list too long".
MAX_ARG_BYTES = 131072
# A path longer than PATH_MAX names nothing the kernel opens.
MAX_PATH_BYTES = 4095
# A JSON or YAML file another person writes is read with this nesting at most.
MAX_DEPTH = 32

# Never in any value: NUL and the other C0 controls but tab and newline, DEL, the C1 controls
# (ESC sequences and their 8-bit twins redraw a terminal), the Unicode line and paragraph
# separators (a line break to many readers), and lone surrogates (no UTF-8 file can hold one).
_NEVER = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Fields that are one line (names, paths, times): tab and newline are refused too.
_NOT_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

# Whole-string patterns, shared by every file that carries such a value.
SLURM_NAME = re.compile(r"[A-Za-z0-9._+][A-Za-z0-9._+-]*")  # partition, account, MPI plugin
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # names files, jobs and containers
JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")  # a Slurm job id (an array task: 12_3)
HOST = re.compile(r"[A-Za-z0-9._%+@\[\]:][A-Za-z0-9._%+@\[\]:-]*")  # host, user@host, [::1]
NODELIST = re.compile(r"[A-Za-z0-9._\[\],-]*")  # gpunode, node[01-04],login
# Characters an image reference never holds: docker and pyxis would split at them.
_NOT_IMAGE = re.compile(r"[\s,\x00-\x1f\x7f]")
# sbatch splits an #SBATCH line at white space and knows no shell quoting.
_NOT_SBATCH = re.compile(r"[\s\"'\\]")
# A mount list is split at `,` (pyxis, docker's --mount CSV) and each entry at `:`; docker's
# CSV reader also takes `"` as a quote (control characters are refused before).
NOT_MOUNT = re.compile(r'[,:"]')

_NAMES = {
    "\x00": "a NUL byte",
    "\n": "a newline",
    "\r": "a carriage return",
    "\t": "a tab",
    "\x1b": "an escape character",
    "\u2028": "a line separator (U+2028)",
    "\u2029": "a paragraph separator (U+2029)",
}


def shown(value: Any, limit: int = 120) -> str:
    """A value in an error line: escaped like repr (a newline shows as \\n), and cut short
    (a line must not carry megabytes)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


# A line of another program's output as the tool shows it (evidence, a terminal line, an
# error's quoted reason): longer is cut, whatever the program printed.
MAX_SHOWN_LINE = 500
# What a terminal would act on rather than show: every control character but tab (an escape
# sequence can move the cursor, rewrite the screen, set the window title or the clipboard),
# the Unicode line and paragraph separators, lone surrogates, and the bidirectional and
# zero-width format characters (they reorder or hide what a line seems to say).
_NOT_SHOWN = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff"
    "\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]"
)


_WHOLE = re.compile(r"-?[0-9]{1,18}")


def whole_number(text: str | None, *, negative: bool = False) -> int | None:
    """`text` as a whole number when the whole of it is 1 to 18 ASCII digits (after a `-`
    where `negative`), else None: `str.isdigit` takes `²` and `٣`, which int() refuses or
    reads as 3, and int() refuses more than 4300 digits with a ValueError
    (decision shown-never-obeyed)."""
    if text is None or _WHOLE.fullmatch(text) is None:
        return None
    if text.startswith("-") and not negative:
        return None
    return int(text)


def printable(text: str, limit: int | None = MAX_SHOWN_LINE) -> str:
    """`text` (a log line, a test id, a remote tool's answer) safe to print on one terminal
    line and to keep as evidence: control characters are shown escaped (`\\x1b`, `\\n`), and
    text beyond `limit` characters is cut with a note of its length
    (decision shown-never-obeyed)."""
    cut = text if limit is None else text[:limit]
    shown_text = _NOT_SHOWN.sub(lambda m: ascii(m.group(0))[1:-1], cut)
    if limit is not None and (len(shown_text) > limit or len(cut) < len(text)):
        shown_text = f"{shown_text[:limit]}... ({len(text)} characters)"
    return shown_text


def refuse(field: str, what: str, value: Any, fix: str) -> BuildError:
    """The refusal line: `error: <field>: <what> (got <value>); <fix>`."""
    return BuildError(field, f"{what} (got {shown(value)})", fix)


def character(ch: str) -> str:
    """A character named for an error line."""
    if ch in _NAMES:
        return _NAMES[ch]
    if "\ud800" <= ch <= "\udfff":
        return "a lone surrogate"
    return f"the control character {ascii(ch)}"


def text_problem(value: str, *, lines: bool = False, dash: bool = True) -> str | None:
    """What makes `value` no text a script can carry, or None. `lines`: tab and newline are
    allowed (commands); `dash`: a leading `-` is allowed (the tool puts `--` before it, or the
    value is never an argument of its own)."""
    m = (_NEVER if lines else _NOT_ONE_LINE).search(value)
    if m is not None:
        return f"holds {character(m.group(0))}, which no script or command line can carry"
    if not dash and value.startswith("-"):
        return "starts with -, so a program would read it as an option"
    size = len(value.encode("utf-8"))
    if size >= MAX_ARG_BYTES:
        return f"is {size} bytes, over the kernel's {MAX_ARG_BYTES}-byte limit for one argument"
    return None


def check_text(
    value: str, field: str, *, lines: bool = False, dash: bool = True, fix: str = "correct it"
) -> str:
    problem = text_problem(value, lines=lines, dash=dash)
    if problem is not None:
        raise refuse(field, problem, value, fix)
    return value


def plain_text(value: Any) -> Any:
    """What no request value may hold, as a field check's ValueError (its text becomes the
    error line's problem); lines are allowed here, a field that is one line is checked by
    `check_fields`."""
    if isinstance(value, str):
        problem = text_problem(value, lines=True)
        if problem is not None:
            raise ValueError(problem)
    return value


def matches(value: str, pattern: re.Pattern[str], field: str, what: str, fix: str) -> str:
    """`value` when the whole of it matches `pattern`; else the refusal `what`."""
    check_text(value, field, dash=False, fix=fix)
    if pattern.fullmatch(value) is None:
        raise refuse(field, what, value, fix)
    return value


def is_absolute_path(value: str) -> bool:
    """An absolute path of at most MAX_PATH_BYTES characters (the check of values read from
    files, which name the file in their own error line)."""
    return value.startswith("/") and len(value) <= MAX_PATH_BYTES


def check_path(value: str, field: str, *, absolute: bool = True) -> str:
    """A file or folder path: one line, bounded, absolute unless said otherwise."""
    check_text(value, field, fix="give a path without it")
    if len(value.encode("utf-8")) > MAX_PATH_BYTES:
        raise refuse(
            field,
            f"is longer than the {MAX_PATH_BYTES} bytes of a path",
            value,
            "give a shorter path",
        )
    if absolute and not value.startswith("/"):
        raise BuildError(field, f"{value!r} is not an absolute path", "give the full path")
    return value


@functools.lru_cache(maxsize=1024)  # build-many checks the same few mounts for every job
def check_mount_path(path: str, field: str) -> str:
    """A path in a pyxis or docker mount list, without its trailing `/`."""
    check_text(path, field, fix="give a path without it")
    bad = NOT_MOUNT.search(path)
    if bad is not None:
        raise BuildError(
            field,
            f"{shown(path)} holds {shown(bad.group(0))}, which pyxis/docker mount lists cannot carry",
            "use a path without it (a symlink works)",
        )
    check_path(path, field)
    if path.rstrip("/") == "":
        raise BuildError(
            field, "would mount the host's root directory /", "put it in a folder of its own"
        )
    return path.rstrip("/")


def check_sbatch_value(value: str, field: str) -> None:
    """A value for an `#SBATCH` line (its `%` is escaped where the line is written)."""
    check_text(value, field, fix="give a path without it")
    m = _NOT_SBATCH.search(value)
    if m is not None:
        raise BuildError(
            field,
            f"{shown(value)} holds {shown(m.group(0))}, which an #SBATCH line cannot carry",
            "use a path without white space, quotes or backslashes",
        )


def check_image(image: str, field: str = "container_image") -> str:
    """An image reference as docker, enroot and pyxis take it: one word, not an option."""
    if not image or image.startswith("-") or _NOT_IMAGE.search(image) or text_problem(image):
        raise BuildError(
            field,
            f"{shown(image)} is not an image reference",
            "give registry/path:tag or a .sqsh path",
        )
    _check_reference(image, field)
    return image


_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def _check_reference(image: str, field: str) -> None:
    """What docker's reference grammar refuses in a registry image (a .sqsh file is a path):
    an empty or malformed tag, and capitals in the repository path, which docker pull refuses
    as an invalid reference format (the registry host may have them)."""
    if image.startswith(("/", ".")) or image.endswith(".sqsh"):
        return
    name = image.split("://", 1)[-1].split("@sha256:", 1)[0].replace("#", "/")
    slash, colon = name.rfind("/"), name.rfind(":")
    repo, tag = (name[:colon], name[colon + 1 :]) if colon > slash else (name, None)
    fix = "write registry/path:tag (a tag is letters, digits and _ . -) or leave the tag out"
    if tag == "":
        raise BuildError(field, f"{shown(image)} ends with ':' and no tag", fix)
    if tag is not None and not _TAG.fullmatch(tag):
        raise BuildError(field, f"{shown(image)} has a tag docker refuses ({shown(tag)})", fix)
    parts = repo.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # the registry host
    path = "/".join(parts)
    if ":" in path:
        raise BuildError(
            field,
            f"{shown(image)} has more than one tag",
            "write registry/path:tag with one ':' after the path",
        )
    if path != path.lower():
        raise BuildError(
            field,
            f"{shown(image)} has capitals in its repository path, which docker refuses",
            f"write it in lower case: {shown(image.replace(path, path.lower(), 1))}",
        )


def check_host(host: str, field: str = "ssh_host") -> str:
    """A host as ssh takes it; a leading `-` would be an option (`-oProxyCommand=...`)."""
    # `user@-oProxyCommand=...`: older ssh clients hand that host to a configured
    # ProxyCommand's `%h`, where it reads as an option of the proxy program
    if not HOST.fullmatch(host) or len(host) > 255 or "@-" in host:
        raise BuildError(
            field,
            f"{shown(host[:200])} is not a host name",
            "give host, user@host or an ssh config alias",
        )
    return host


def tree_problem(data: Any, where: str = "", depth: int = 0) -> tuple[str, str, Any] | None:
    """The first string (key or value) of a JSON or YAML document that is not one line of
    text, or nesting deeper than MAX_DEPTH: (where, problem, value); None when all is well."""
    if depth > MAX_DEPTH:
        return where or "the file", f"nests deeper than {MAX_DEPTH}", "..."
    if isinstance(data, str):
        problem = text_problem(data)
        return None if problem is None else (where or "a value", problem, data)
    if isinstance(data, dict):
        for key, value in data.items():
            name = f"{where}.{key}" if where else str(key)
            problem = text_problem(str(key))
            found = (name, problem, key) if problem else tree_problem(value, name, depth + 1)
            if found:
                return found
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found = tree_problem(value, f"{where}[{i}]", depth + 1)
            if found:
                return found
    return None


# ---------------------------------------------------------------- request fields

# Request fields that may hold several lines and tabs (shell command lines); every other
# string field is one line. A new field is one line unless it is added here.
MULTILINE_FIELDS = frozenset({"test_cmd", "eval_cmd", "bench_cmd", "custom_cmd", "custom_env"})
# Fields whose value may start with `-`: it only ever reaches a program inside a shell-quoted
# command line or an environment variable, never as an argument of its own. Paths made
# absolute and names matched by a pattern cannot start with `-` anyway.
DASH_FIELDS = MULTILINE_FIELDS | frozenset({"skill_dir"})


def check_fields(values: Iterable[tuple[str, Any]], prefix: str = "") -> None:
    """A request's string values after their types are known: one line unless the field may
    hold lines, no leading `-` unless the field allows it, bounded."""
    for name, value in values:
        if isinstance(value, str):
            field = prefix + name
            check_text(
                value,
                field,
                lines=name in MULTILINE_FIELDS,
                dash=name in DASH_FIELDS,
                fix="correct the value",
            )
