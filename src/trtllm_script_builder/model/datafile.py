"""JSON and YAML that another person may have written, read one bounded way
(decision one-data-reader).

Every file the tool reads goes through `parse_json` or a loader from `yaml_loader_class`: a key
written twice is refused (the second would silently win), nesting is bounded while the text
is parsed (not after a RecursionError), and where YAML aliases are allowed at all the document
they expand to is bounded in size and depth before anything walks it. Problems are raised as
`DataError`, a ValueError whose text is one line for the caller's own message.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from trtllm_script_builder.model.values import MAX_DEPTH, shown

# Values (scalars, lists, mappings) a YAML document may hold once its aliases are expanded:
# far above any perf-sanity config, far below what makes a walk over it slow.
MAX_NODES = 100_000


class DataError(ValueError):
    """What is wrong with a JSON or YAML text, in one line; for a JSON syntax error also
    `where` (`:line:column`) and `what`, for a `file:line:column` message."""

    where: str | None = None
    what: str = ""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DataError(f"the key {shown(key)} is written twice")
        out[key] = value
    return out


# Digits of a whole number: far above any count, id or size the files hold, far below the
# 4300 beyond which Python refuses to convert the text (a ValueError, not a parse error).
MAX_DIGITS = 64


def _whole(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise DataError(f"it holds a whole number of {len(text)} digits, more than {MAX_DIGITS}")
    return int(text)


def parse_json(text: str) -> Any:
    """`text` as JSON, refusing repeated keys, nesting deeper than MAX_DEPTH and whole
    numbers longer than MAX_DIGITS (decision shown-never-obeyed). NaN, Infinity and 1e999 are read
    as Python reads them, so that a request's field refuses them by name; whoever does arithmetic on
    a number from a file checks that it is finite."""
    try:
        data = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_int=_whole,
        )
    except RecursionError:
        raise DataError(f"it nests deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        err = DataError(f"{exc.msg} at line {exc.lineno} column {exc.colno}")
        err.where, err.what = f":{exc.lineno}:{exc.colno}", exc.msg
        raise err from None
    _check_depth(data)
    return data


def _check_depth(data: Any) -> None:
    todo = [(data, 0)]
    while todo:
        item, level = todo.pop()
        if level > MAX_DEPTH:
            raise DataError(f"it nests deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            todo.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            todo.extend((v, level + 1) for v in item)


@lru_cache(maxsize=4)
def yaml_loader_class(*, aliases: bool) -> Any:
    """A yaml.SafeLoader subclass that refuses repeated keys and deep nesting, and aliases
    unless `aliases` (then the document they expand to is bounded: see `load_yaml`)."""
    import yaml

    merge = "tag:yaml.org,2002:merge"

    class Loader(yaml.SafeLoader):
        allow_aliases = aliases

        def __init__(self, stream: Any) -> None:
            super().__init__(stream)
            self.level = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                if not self.allow_aliases:
                    # nested aliases expand exponentially: a few hundred bytes ask for gigabytes
                    raise DataError(f"aliases (*name) are not allowed{_line(self.peek_event())}")
                return super().compose_node(parent, index)
            self.level += 1
            try:
                if self.level > MAX_DEPTH:
                    raise DataError(
                        f"it nests deeper than {MAX_DEPTH} levels{_line(self.peek_event())}"
                    )
                return super().compose_node(parent, index)
            finally:
                self.level -= 1

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == merge:
                    continue  # `<<: *base` may be overridden by the keys beside it
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise DataError(f"the key {shown(key)} is written twice{_line(key_node)}")
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key: SafeLoader's own error follows
            return super().construct_mapping(node, deep)

    return Loader


def yaml_error_at(exc: Exception, text: str) -> tuple[str, str, str]:
    """(`:line:column` or "", what is wrong there, the fix) of a YAML parser's error, as an
    editor would point at it; a tab, which YAML never takes as indentation, named as one."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is None:
        return "", what, "fix its syntax"
    where = f":{mark.line + 1}:{mark.column + 1}"
    lines = text.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    if "\t" in line[: mark.column + 1] or "'\\t'" in what:
        return where, "a tab, which YAML does not take for indentation", "indent with spaces"
    context = getattr(exc, "context", None)
    return where, f"{what} ({context})" if context else what, "fix the YAML there"


def _line(where: Any) -> str:
    mark = getattr(where, "start_mark", None)
    return f" (line {mark.line + 1})" if mark is not None else ""


def compose_yaml(text: str, loader: Any) -> Any:
    """The node tree of `text` (None when empty), bounded as the loader says."""
    reader = loader(text)
    try:
        node = reader.get_single_node()
    finally:
        reader.dispose()
    if node is not None and reader.allow_aliases:
        _expanded(node, 0, {}, set())
    return node


def construct_yaml(node: Any, loader: Any) -> Any:
    """The Python value of a node from `compose_yaml` (or one of its children)."""
    reader = loader("")
    try:
        return reader.construct_document(node)
    finally:
        reader.dispose()


def load_yaml(text: str, loader: Any) -> Any:
    """`text` as YAML through `loader` (see yaml_loader_class)."""
    node = compose_yaml(text, loader)
    return None if node is None else construct_yaml(node, loader)


def _expanded(
    node: Any, level: int, memo: dict[int, tuple[int, int]], open_: set[int]
) -> tuple[int, int]:
    """(values, height) of `node` with its aliases expanded; each node is measured once, so
    the walk costs the document's size, not the expansion's."""
    import yaml

    if level > MAX_DEPTH:
        raise DataError(f"its aliases expand to nesting deeper than {MAX_DEPTH} levels")
    key = id(node)
    got = memo.get(key)
    if got is None:
        if key in open_:
            raise DataError(f"an alias refers to the value that holds it{_line(node)}")
        open_.add(key)
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        size, height = 1, 0
        for child in children:
            s, h = _expanded(child, level + 1, memo, open_)
            size, height = size + s, max(height, h + 1)
            if size > MAX_NODES:
                raise DataError(f"its aliases expand to more than {MAX_NODES} values")
        open_.discard(key)
        memo[key] = got = (size, height)
    if level + got[1] > MAX_DEPTH:
        raise DataError(f"its aliases expand to nesting deeper than {MAX_DEPTH} levels")
    return got
