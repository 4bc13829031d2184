"""Pytest sizing: read the selected tests' GPU markers from the test file with `ast`.

Only the source is read; nothing is imported or run, so a test file with heavy imports
(torch, tensorrt_llm) is inspected in milliseconds on a machine without them.
"""

from __future__ import annotations

import ast
import math
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from trtllm_script_builder.atomic import open_regular
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.resolve.commands import normalise_name

DEFS = Path("tests") / "integration" / "defs"
DEVICE_MARKS = ("skip_less_device", "skip_less_mpi_world_size")
# Pytest options whose value is the next word; that word is never a test selection.
_QUOTING = set("'\"\\")
_VALUE_OPTS = {"-k", "-m", "-p", "-o", "-c", "-n", "-W", "-r", "--rootdir", "--test-list", "-F"}


@dataclass(frozen=True)
class Mark:
    name: str
    count: int | None  # None when the argument is not a literal we can read


@dataclass(frozen=True)
class Param:
    id: str
    marks: tuple[Mark, ...]
    exact: bool = True  # the id is pytest's for sure (a literal value or an explicit id)
    values: tuple[tuple[str, object], ...] = ()  # argument -> literal value


@dataclass(frozen=True)
class TestFunc:
    name: str
    cls: str | None
    marks: tuple[Mark, ...]  # decorator marks, nearest the `def` first (pytest's order)
    params: tuple[tuple[Param, ...], ...]  # one tuple per parametrize decorator
    # Every id pytest gives this test is in _full_ids: each parametrize was read whole, and
    # they cover every argument, so no fixture can add one (decision parameter-id-check).
    ids_exact: bool = False
    tags: frozenset[str] = frozenset()  # every mark's name, for `-m`
    skips: tuple[ast.expr, ...] = ()  # `if <test>: pytest.skip()` tests naming the GPU count
    launches: tuple[str, ...] = ()  # `mpirun -n N` texts in the body (N as written)


@dataclass(frozen=True)
class FileInfo:
    module_marks: tuple[Mark, ...]
    class_marks: dict[str, tuple[Mark, ...]]
    tests: tuple[TestFunc, ...]
    by_name: dict[str, tuple[TestFunc, ...]] = field(default_factory=dict)
    param_scopes: frozenset[str] = frozenset()  # classes ("" the module) parametrized whole
    tags: dict[str, frozenset[str]] = field(default_factory=dict)  # class ("" module) -> marks

    def candidates(self, func: str | None) -> tuple[TestFunc, ...]:
        """The tests a selection can name: by function name when it gives one."""
        return self.by_name.get(func, ()) if func else self.tests


@dataclass(frozen=True)
class Selection:
    text: str
    path: str
    cls: str | None
    func: str | None
    param_id: str | None


@dataclass
class PytestSizing:
    devices: int | None  # None: no marker found, the request's value (or 1) applies
    source: str
    model_name: str
    workdir_rel: str  # "" for the repo root, else tests/integration/defs
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- command parsing


@dataclass
class Command:
    selections: list[Selection]
    keyword: str | None  # the -k expression
    words: list[str]  # bare words that are not test ids: maybe folders of tests
    changes_dir: bool  # the command runs its own `cd`
    markexpr: str | None = None  # the -m expression


def split_selections(test_cmd: str) -> Command:
    try:
        # Most commands have no quoting at all; str.split gives the same words, much faster.
        words = test_cmd.split() if not _QUOTING.intersection(test_cmd) else shlex.split(test_cmd)
    except ValueError as exc:
        raise BuildError(
            "test_cmd", f"cannot be split into shell words ({exc})", "balance its quotes"
        ) from None
    cmd = Command([], None, [], False)
    skip_next = False
    for i, w in enumerate(words):
        if skip_next:
            skip_next = False
            if words[i - 1] == "-k":
                cmd.keyword = w
            elif words[i - 1] == "-m":
                cmd.markexpr = w
            continue
        if w in _VALUE_OPTS:
            skip_next = True
            continue
        if w.startswith("-"):
            if w.startswith("-k") and len(w) > 2:
                cmd.keyword = w[2:]
            continue
        if w == "cd" and (i == 0 or words[i - 1] in ("&&", ";", "||")):
            cmd.changes_dir = True
            skip_next = True
            continue
        if ".py" in w or "::" in w:
            cmd.selections.append(_selection(w))
        elif i > 0 and w not in ("&&", ";", "||"):
            cmd.words.append(w)
    return cmd


def keyword_matches(expr: str, names: str, marks: frozenset[str] | None = None) -> bool | None:
    """pytest's -k: `and`/`or`/`not`/parentheses over case-insensitive substrings of the names;
    with `marks`, pytest's -m: the same over exact mark names.

    None when the expression cannot be read (the selection is then not narrowed).
    """
    parts = []
    for tok in re.findall(r"\(|\)|[^\s()]+", expr):
        parts.append(tok if tok in ("and", "or", "not", "(", ")") else f"_m({tok!r})")
    low = names.lower()

    def hit(t: str) -> bool:
        return t in marks if marks is not None else t.lower() in low

    try:
        return bool(eval(" ".join(parts), {"__builtins__": {}}, {"_m": hit}))  # noqa: S307 - only _m calls on quoted literals
    except Exception:  # a malformed expression: pytest would refuse it too
        return None


def _selection(text: str) -> Selection:
    param_id = None
    body = text
    if body.endswith("]") and "[" in body:
        body, _, rest = body.partition("[")
        param_id = rest[:-1]
    parts = body.split("::")
    path = parts[0]
    names = parts[1:]
    cls = next((n for n in names if n[:1].isupper()), None)
    func = next((n for n in reversed(names) if not n[:1].isupper()), None)
    return Selection(text, path, cls, func, param_id)


# ---------------------------------------------------------------- file inspection


def _const_int(node: ast.expr, consts: dict[str, int]) -> int | None:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    return None


def _mark_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _marks_of(node: ast.expr, consts: dict[str, int]) -> list[Mark]:
    """Device marks in one decorator, `marks=` value or `pytestmark` value."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return [m for elt in node.elts for m in _marks_of(elt, consts)]
    if isinstance(node, ast.Call):
        name = _mark_name(node.func)
        if name in DEVICE_MARKS:
            count = _const_int(node.args[0], consts) if node.args else None
            return [Mark(name, count)]
    gpus = _GPU_MARK.fullmatch(_mark_name(node) or "") if _is_mark(node) else None
    return [Mark("gpu", int(gpus.group(1)))] if gpus else []


# `@pytest.mark.gpu4`: TensorRT-LLM's unit tests name the GPUs they need (decision gpu-need).
_GPU_MARK = re.compile(r"gpu([1-9][0-9]?)")


def _is_mark(node: ast.expr) -> bool:
    """`pytest.mark.X` or `mark.X`, called or not."""
    if isinstance(node, ast.Call):
        node = node.func
    return isinstance(node, ast.Attribute) and _mark_name(node.value) == "mark"


def _tags(nodes: list[ast.expr]) -> frozenset[str]:
    """The names of the marks among decorators or `pytestmark` values, for `-m`."""
    out: set[str] = set()
    for node in nodes:
        for n in node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]:
            if _is_mark(n):
                out.add(_mark_name(n.func if isinstance(n, ast.Call) else n) or "")
    return frozenset(out)


def _scalar_id(value: ast.expr, argname: str, index: int) -> tuple[str, bool]:
    """pytest's id of one value, and whether it is surely pytest's: a name or a call may hold
    a string or a number, which pytest would show instead of `argname<index>`; pytest escapes
    a string that is not printable ASCII."""
    if isinstance(value, ast.Constant) and isinstance(
        value.value, (str, int, float, bool, type(None))
    ):
        text = str(value.value)
        return text, bool(text) and text.isascii() and text.isprintable()
    if (
        isinstance(value, ast.UnaryOp)
        and isinstance(value.op, ast.USub)
        and isinstance(value.operand, ast.Constant)
        and isinstance(value.operand.value, (int, float))
    ):
        return f"-{value.operand.value!s}", True
    return f"{argname}{index}", False


def _argnames(node: ast.expr) -> list[str] | None:
    """The argument names of a parametrize call's first argument; None when not literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [a.strip() for a in node.value.split(",") if a.strip()]
    if isinstance(node, (ast.List, ast.Tuple)):
        names = [
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
        return names if len(names) == len(node.elts) else None
    return None


def _param_sets(
    call: ast.Call, names: dict[str, ast.expr], consts: dict[str, int]
) -> tuple[Param, ...]:
    """The ids and marks of one `parametrize` / `parametrize_with_ids` decorator."""
    if len(call.args) < 2:
        return ()
    argnames_node, values_node = call.args[0], call.args[1]
    if isinstance(values_node, ast.Name):
        values_node = names.get(values_node.id, values_node)
    if not isinstance(values_node, (ast.List, ast.Tuple)):
        return ()
    argnames = _argnames(argnames_node) or []
    ids_kw = next((k.value for k in call.keywords if k.arg == "ids"), None)
    ids = None
    # ids given as a function (or anything but a literal list) make no id certain.
    certain = ids_kw is None or isinstance(ids_kw, (ast.List, ast.Tuple))
    if isinstance(ids_kw, (ast.List, ast.Tuple)):
        ids = [e.value if isinstance(e, ast.Constant) else None for e in ids_kw.elts]
        # an element that is not a literal ("tp2_" + SUFFIX) names an id we cannot know
        certain = all(isinstance(e, ast.Constant) for e in ids_kw.elts)
    with_names = _mark_name(call.func) == "parametrize_with_ids"
    out = []
    for i, elt in enumerate(values_node.elts):
        marks: list[Mark] = []
        pid: str | None = None
        exact = certain
        vals: list[ast.expr]
        if isinstance(elt, ast.Call) and _mark_name(elt.func) == "param":
            vals = list(elt.args)
            for k in elt.keywords:
                if k.arg == "marks":
                    marks = _marks_of(k.value, consts)
                elif k.arg == "id":
                    if isinstance(k.value, ast.Constant) and k.value.value is not None:
                        pid = str(k.value.value)
                    elif not isinstance(k.value, ast.Constant):
                        exact = False  # id=None is pytest's own id, computed below
        elif isinstance(elt, ast.Tuple) and len(argnames) > 1:
            vals = list(elt.elts)
        elif isinstance(elt, ast.Starred):
            vals, exact = [elt], False
        else:
            vals = [elt]
        known = [
            (argnames[j], v.value)
            for j, v in enumerate(vals)
            if j < len(argnames) and isinstance(v, ast.Constant)
        ]
        if pid is None and ids is not None and i < len(ids) and ids[i] is not None:
            pid = str(ids[i])
        if pid is None:
            parts = []
            exact = exact and len(vals) == max(len(argnames), 1)
            for j, v in enumerate(vals):
                name = argnames[j] if j < len(argnames) else f"arg{j}"
                sid, sure = _scalar_id(v, name, i)
                exact = exact and sure
                parts.append(f"{name}={sid}" if with_names else sid)
            pid = "-".join(parts)
        out.append(Param(pid, tuple(marks), exact, tuple(known)))
    return tuple(out)


def _func_info(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    cls: str | None,
    names: dict[str, ast.expr],
    consts: dict[str, int],
) -> TestFunc:
    marks: list[Mark] = []
    params: list[tuple[Param, ...]] = []
    covered: set[str] = set()
    exact = True
    # Decorators apply bottom-up, so the one nearest the `def` comes first, as pytest orders them.
    for dec in reversed(fn.decorator_list):
        marks.extend(_marks_of(dec, consts))
        if _is_parametrize(dec):
            assert isinstance(dec, ast.Call)
            found = _param_sets(dec, names, consts)
            params.append(found)
            argnames = _argnames(dec.args[0]) if dec.args else None
            exact = exact and bool(found) and argnames is not None
            exact = exact and all(p.exact for p in found)
            covered.update(argnames or ())
    args = [*fn.args.posonlyargs, *fn.args.args]
    # Arguments with a default are no fixtures; `self` and `request` are never parametrized.
    fixtures = [a.arg for a in args[: len(args) - len(fn.args.defaults)]]
    fixtures += [
        a.arg for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True) if d is None
    ]
    free = set(fixtures) - covered - {"self", "cls", "request"}
    exact = exact and bool(params) and not free and fn.args.vararg is None
    ids = [p.id for ps in params for p in ps]
    full = _full_ids(params)
    exact = exact and len(full) == len(set(full)) and all(ids)
    skips, launches = _body_needs(fn)
    tags = _tags(fn.decorator_list)
    return TestFunc(fn.name, cls, tuple(marks), tuple(params), exact, tags, skips, launches)


# What a test body calls to learn how many GPUs it has, and `mpirun -n N` in its commands.
_COUNT_CALLS = ("get_device_count", "device_count")
_MPIRUN = re.compile(r"\bmpirun\b[^;|&\n]*?\s-(?:n|np)(?:\s+(\d+)\b|\s*$)")


def _body_needs(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
) -> tuple[tuple[ast.expr, ...], tuple[str, ...]]:
    """What the body says it needs (decision gpu-need): the tests of its `if ...: pytest.skip()`
    that name the GPU count, and the `mpirun -n N` of the commands it runs."""
    skips = [
        stmt.test
        for stmt in fn.body
        if isinstance(stmt, ast.If)
        and any(
            _mark_name(c.func) in _COUNT_CALLS
            for c in ast.walk(stmt.test)
            if isinstance(c, ast.Call)
        )
        and any(
            isinstance(c, ast.Call) and _mark_name(c.func) == "skip"
            for b in stmt.body
            for c in ast.walk(b)
        )
    ]
    launches = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
        ):
            text = " ".join(str(e.value) for e in node.elts if isinstance(e, ast.Constant))
        else:
            continue
        launches += [m.group(0).strip() for m in _MPIRUN.finditer(text)]
    return tuple(skips), tuple(launches)


def _is_parametrize(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and _mark_name(node.func) in (
        "parametrize",
        "parametrize_with_ids",
    )


def _pytestmarks(body: list[ast.stmt]) -> list[ast.expr]:
    """The values of a module's or class's `pytestmark = ...` assignments."""
    return [
        stmt.value
        for stmt in body
        if isinstance(stmt, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets)
    ]


def _pytestmark(body: list[ast.stmt], consts: dict[str, int]) -> list[Mark]:
    return [m for value in _pytestmarks(body) for m in _marks_of(value, consts)]


# TensorRT-LLM's largest test files are a few hundred KiB; parsing is bounded well above that.
MAX_TEST_FILE_CHARS = 8 << 20


# Python shows an integer in decimal up to this many digits (3.11+); a hexadecimal literal
# parses whatever its size and failed later, where its value was shown as an id or a count.
_MAX_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300


def _refuse_huge_integers(tree: ast.AST) -> None:
    """A ValueError naming the first integer too long to show (bits per digit: log2(10) > 3.3)."""
    for node in ast.walk(tree):
        value = getattr(node, "value", None) if isinstance(node, ast.Constant) else None
        if isinstance(value, int) and value.bit_length() > 3.3 * _MAX_DIGITS:
            line = getattr(node, "lineno", "?")
            raise ValueError(f"line {line}: an integer of about {_MAX_DIGITS} digits or more")


def read_source(path: str) -> str:
    """A test file's text: a regular file (a named pipe would block for ever, /dev/zero never
    ends) of at most MAX_TEST_FILE_CHARS bytes, its UTF-8 byte order mark dropped as Python
    does; OSError or ValueError otherwise."""
    with open_regular(path) as fh:
        data = fh.read(MAX_TEST_FILE_CHARS + 1)
    if len(data) > MAX_TEST_FILE_CHARS:
        raise ValueError(f"larger than {MAX_TEST_FILE_CHARS} characters")
    return data.decode("utf-8-sig", errors="replace")


@lru_cache(maxsize=256)
def inspect_file(path: str) -> FileInfo:
    """Parse one test file once per run, however many selections point at it."""
    try:
        tree = ast.parse(read_source(path), filename=path)
        _refuse_huge_integers(tree)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        # A 5,000-digit literal (ValueError), a 3,000-term sum (RecursionError in the parser),
        # nesting past the parser's limit (SyntaxError): one line, never a traceback.
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise BuildError(
            "test_cmd",
            f"cannot parse {path} ({reason})",
            "fix the test file or pass --required-devices",
        ) from None
    names: dict[str, ast.expr] = {}
    consts: dict[str, int] = {}
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            names[stmt.targets[0].id] = stmt.value
            v = _const_int(stmt.value, {})
            if v is not None:
                consts[stmt.targets[0].id] = v
    tests: list[TestFunc] = []
    class_marks: dict[str, tuple[Mark, ...]] = {}
    tags = {"": _tags(_pytestmarks(tree.body))}
    scopes: set[str] = {""} if _marked_parametrize(tree.body) else set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name.startswith(
            "test"
        ):
            tests.append(_func_info(stmt, None, names, consts))
        elif isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test"):
            if any(_is_parametrize(d) for d in stmt.decorator_list) or _marked_parametrize(
                stmt.body
            ):
                scopes.add(stmt.name)
            cmarks = [m for d in reversed(stmt.decorator_list) for m in _marks_of(d, consts)]
            cmarks += _pytestmark(stmt.body, consts)
            class_marks[stmt.name] = tuple(cmarks)
            tags[stmt.name] = _tags([*stmt.decorator_list, *_pytestmarks(stmt.body)])
            for sub in stmt.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub.name.startswith(
                    "test"
                ):
                    tests.append(_func_info(sub, stmt.name, names, consts))
    by_name: dict[str, list[TestFunc]] = {}
    for t in tests:
        by_name.setdefault(t.name, []).append(t)
    index = {k: tuple(v) for k, v in by_name.items()}
    return FileInfo(
        tuple(_pytestmark(tree.body, consts)),
        class_marks,
        tuple(tests),
        index,
        frozenset(scopes),
        tags,
    )


def _marked_parametrize(body: list[ast.stmt]) -> bool:
    """A `pytestmark = ...` that holds a parametrize: every test of its scope gets its ids."""
    for value in _pytestmarks(body):
        values = value.elts if isinstance(value, (ast.List, ast.Tuple)) else []
        if any(_is_parametrize(v) for v in [value, *values]):
            return True
    return False


# ---------------------------------------------------------------- sizing


def _selected(param_id: str | None, p: Param) -> bool:
    if param_id is None:
        return True
    return f"-{p.id}-" in f"-{param_id}-"


def _closest(name: str, t: TestFunc, info: FileInfo, param_id: str | None) -> list[Mark]:
    """pytest's get_closest_marker: function decorators, then param marks, class, module.

    With no parametrisation pinned, every param's mark is a candidate (the largest wins).
    """
    own = [m for m in t.marks if m.name == name]
    if own:
        return own[:1]
    from_params = [
        m
        for ps in t.params
        for p in ps
        if _selected(param_id, p)
        for m in p.marks
        if m.name == name
    ]
    if from_params:
        return from_params if param_id is None else from_params[:1]
    for level in (info.class_marks.get(t.cls or "", ()), info.module_marks):
        hit = [m for m in level if m.name == name]
        if hit:
            return hit[:1]
    return []


def model_name_for(sel: Selection) -> str:
    if sel.cls:
        return normalise_name(sel.cls.removeprefix("Test")) or normalise_name(sel.cls)
    if sel.func:
        return normalise_name(sel.func.removeprefix("test_")) or normalise_name(sel.func)
    return normalise_name(Path(sel.path).stem) or "pytest"


@lru_cache(maxsize=4096)
def _locate(repo_root: Path, rel: str) -> tuple[Path | None, str]:
    p = Path(rel)
    if p.is_absolute():
        return (p if p.exists() else None), ""
    # `unittest/...` lives in tests/ and runs from there, as CI runs it (decision test-db-lines)
    for root_rel in ("", *(["tests"] if p.parts[:1] == ("unittest",) else []), str(DEFS)):
        cand = repo_root / root_rel / p
        if cand.exists():
            return cand, root_rel
    return None, ""


def size_pytest(test_cmd: str, repo_root: Path) -> PytestSizing:
    cmd = split_selections(test_cmd)
    sels = list(cmd.selections)
    for w in cmd.words:  # `pytest accuracy/` names a folder of tests
        path, _ = _locate(repo_root, w)
        if path is not None and path.is_dir():
            sels.append(Selection(w, w, None, None, None))
    if not sels:
        unit = any(w.startswith("unittest/") for w in cmd.words)  # decision test-db-lines
        return PytestSizing(
            None,
            "",
            "pytest",
            "tests" if unit and not cmd.changes_dir else "",
            ["test_cmd names no test file; sized from required_devices"],
        )
    notes: list[str] = []
    best: tuple[int, str] | None = None
    workdir_rel = ""
    for n, sel in enumerate(sels):
        path, root_rel = _locate(repo_root, sel.path)
        if n == 0 and not cmd.changes_dir:
            workdir_rel = root_rel
        if path is None:
            if cmd.changes_dir:  # relative to a folder the command changes to: cannot tell
                notes.append(f"{sel.path} not found under {repo_root} or {repo_root / DEFS}")
                continue
            raise BuildError(
                "test_cmd",
                f"{sel.path} is not under {repo_root} or {repo_root / DEFS}",
                _near_file(repo_root, sel.path),
            )
        if path.is_dir() and not path.resolve().is_relative_to(repo_root.resolve()):
            # A walk of `/` or /proc would never end well; the tests live in the checkout.
            notes.append(f"{sel.path} is a folder outside {repo_root}; its tests are not read")
            continue
        files = sorted(path.rglob("test*.py")) if path.is_dir() else [path]
        for f in files:
            info = inspect_file(str(f))
            if path.is_file():
                _check_selection(sel, info, f, notes)
            for t in info.candidates(sel.func):
                if sel.cls and t.cls != sel.cls or sel.func and t.name != sel.func:
                    continue
                if cmd.markexpr and not _mark_selected(cmd.markexpr, t, info, notes):
                    continue
                for pid in _param_ids(t, sel, cmd.keyword, f.stem, notes):
                    best = _largest(best, t, info, pid, f, notes)
                    best = _needed(best, t, pid, f, notes)
    devices, source = best or (None, "")
    return PytestSizing(devices, source, model_name_for(sels[0]), workdir_rel, notes)


def _nearest(given: str, names: list[str]) -> str | None:
    from difflib import get_close_matches

    near = get_close_matches(given, names, n=1, cutoff=0.6)
    return near[0] if near else None


def _near_file(repo_root: Path, rel: str) -> str:
    for base in (repo_root / DEFS, repo_root):
        folder = (base / rel).parent
        if folder.is_dir():
            near = _nearest(Path(rel).name, [e.name for e in folder.iterdir()])
            if near:
                return f"did you mean {str(Path(rel).with_name(near))}?"
    return "test ids are relative to tests/integration/defs; check the path"


def _check_selection(sel: Selection, info: FileInfo, f: Path, notes: list[str]) -> None:
    """A test id names a test the file has: a misspelt class or function is refused, a
    parameter id that no literal parametrize gives is warned (a fixture may add it)."""
    if not sel.func:
        if sel.cls and sel.cls not in info.class_marks:
            near = _nearest(sel.cls, list(info.class_marks))
            raise BuildError(
                "test_cmd",
                f"{f} has no class {sel.cls}",
                f"did you mean {near}?" if near else "check the test id",
            )
        return
    found = [t for t in info.candidates(sel.func) if not sel.cls or t.cls == sel.cls]
    if not found:
        names = ["::".join(x for x in (t.cls, t.name) if x) for t in info.tests]
        given = "::".join(x for x in (sel.cls, sel.func) if x)
        near = _nearest(given, names)
        raise BuildError(
            "test_cmd",
            f"{f} has no test {given}",
            f"did you mean {near}?" if near else "check the test id",
        )
    if sel.param_id is None:
        return
    ids = [i for t in found for i in _full_ids(t.params)]
    if sel.param_id not in ids:
        near = _nearest(sel.param_id, ids)
        sure = all(
            t.ids_exact and t.cls not in info.param_scopes and "" not in info.param_scopes
            for t in found
        )
        # decision parameter-id-check: every id pytest gives the test is known, and this is none
        if sure:
            shown = ", ".join(ids[:8]) + (", ..." if len(ids) > 8 else "")
            raise BuildError(
                "test_cmd",
                f"{sel.func} has no parameter id [{sel.param_id}] (its ids: {shown})",
                f"did you mean [{near}]?" if near else "use one of its ids",
            )
        hint = f" (nearest: {near})" if near else ""
        notes.append(
            f"[{sel.param_id}] is not a parameter id the parametrize decorators of {sel.func} "
            f"give{hint}; it may come from a fixture, so the test is sized without it"
        )


def _full_ids(params: Sequence[tuple[Param, ...]]) -> list[str]:
    """pytest's ids of stacked parametrize decorators: the one nearest the `def` first."""
    ids = [""]
    for ps in params:
        ids = [f"{a}-{p.id}" if a else p.id for a in ids for p in ps]
    return [i for i in ids if i]


def _param_ids(
    t: TestFunc, sel: Selection, keyword: str | None, stem: str, notes: list[str]
) -> list[str | None]:
    """The parametrisations a selection runs of this test; [] when -k deselects it."""
    if keyword is None:
        return [sel.param_id]
    ids: list[str | None] = (
        [sel.param_id] if sel.param_id else [p.id for ps in t.params for p in ps] or [None]
    )
    chosen = []
    for pid in ids:
        hit = keyword_matches(keyword, f"{stem} {t.cls or ''} {t.name} {pid or ''}")
        if hit is None:
            notes.append(f"-k {keyword!r} could not be read; sized without it")
            return [sel.param_id]
        if hit:
            chosen.append(pid)
    return chosen


def _largest(
    best: tuple[int, str] | None,
    t: TestFunc,
    info: FileInfo,
    pid: str | None,
    f: Path,
    notes: list[str],
) -> tuple[int, str] | None:
    for name in (*DEVICE_MARKS, "gpu"):
        for m in _closest(name, t, info, pid):
            if m.count is None:
                notes.append(f"{name} on {t.name} has a count that is not a literal")
                continue
            shown = f"gpu{m.count} mark" if name == "gpu" else f"{name}({m.count})"
            where = f"{shown} on {'::'.join(x for x in (t.cls, t.name) if x)} in {f}"
            count = m.count
            if count < 1:  # "skip with fewer than 0 GPUs" never skips: the test needs one
                notes.append(f"{where} asks for no GPU; sized as 1")
                count = 1
            if best is None or count > best[0]:
                best = (count, where)
    return best


# ---------------------------------------------------------------- what the body needs


def _mark_selected(expr: str, t: TestFunc, info: FileInfo, notes: list[str]) -> bool:
    """pytest's -m over the test's marks, its class's and its module's."""
    tags = t.tags | info.tags.get("", frozenset())
    if t.cls:
        tags |= info.tags.get(t.cls, frozenset())
    hit = keyword_matches(expr, "", tags)
    if hit is None:
        notes.append(f"-m {expr!r} could not be read; sized without it")
        return True
    return hit


_UNKNOWN = object()
MAX_BODY_DEVICES = 64  # far above a node; a skip that holds for every count is reported


def _value(node: ast.expr, env: dict[str, object], devices: int) -> object:
    """A skip test's value with `devices` GPUs, or _UNKNOWN where it reads what is not known
    (another call, a fixture); `and`/`or` decide when one side does."""
    import operator

    ops: dict[type, object] = {
        ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne,
    }  # fmt: skip
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id, _UNKNOWN)
    if isinstance(node, ast.Call) and _mark_name(node.func) in _COUNT_CALLS:
        return devices
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        v = _value(node.operand, env, devices)
        return _UNKNOWN if v is _UNKNOWN else not v
    if isinstance(node, ast.BoolOp):
        vals = [_value(v, env, devices) for v in node.values]
        decisive = isinstance(node.op, ast.Or)  # True decides an `or`, False an `and`
        if any(v is not _UNKNOWN and bool(v) is decisive for v in vals):
            return decisive
        return _UNKNOWN if any(v is _UNKNOWN for v in vals) else not decisive
    pairs: list[tuple[object, ast.expr, ast.expr]] = []
    if isinstance(node, ast.BinOp):
        pairs = [(ops.get(type(node.op)), node.left, node.right)]
    elif isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        pairs = [
            (ops.get(type(o)), a, b) for o, a, b in zip(node.ops, sides, sides[1:], strict=False)
        ]
    out: object = _UNKNOWN
    for op, a, b in pairs:
        x, y = _value(a, env, devices), _value(b, env, devices)
        if op is None or x is _UNKNOWN or y is _UNKNOWN:
            return _UNKNOWN
        try:
            out = op(x, y)  # type: ignore[operator]
        except Exception:  # a string times a string: not what a GPU count is made of
            return _UNKNOWN
        if isinstance(node, ast.Compare) and not out:
            return False
    return out


def _envs(t: TestFunc, pid: str | None) -> list[dict[str, object]]:
    """The argument values of the parametrisations `pid` names (all of them when None)."""
    envs: list[dict[str, object]] = [{}]
    for ps in t.params:
        chosen = [p for p in ps if _selected(pid, p)][: None if pid is None else 1]
        envs = [{**e, **dict(p.values)} for e in envs for p in chosen] or envs
        if len(envs) > 512:  # a product this wide is sized by its marks
            return []
    return envs


# A test's own parallel sizes as it names its arguments (LLM(tensor_parallel_size=tp_size, ...)):
# their product is the world the test starts (decision gpu-need).
_PARALLEL_ARGS = (
    ("tp_size", "tensor_parallel_size"),
    ("pp_size", "pipeline_parallel_size"),
    ("cp_size", "context_parallel_size"),
)


def _parallel_needs(t: TestFunc, pid: str | None, name: str, f: Path) -> list[tuple[int, str]]:
    """tp_size x pp_size (x cp_size) of the parametrisations the id selects, where the
    parametrize decorators give them as literal whole numbers."""
    found: list[tuple[int, str]] = []
    for env in _envs(t, pid):
        sizes: list[tuple[str, int]] = []
        for names in _PARALLEL_ARGS:
            arg = next((n for n in names if n in env), None)
            value = env.get(arg) if arg else None
            if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 4096:
                sizes.append((str(arg), value))
        world = 1
        for _, v in sizes:
            world *= v
        if world < 2:  # one rank says no more than no parameters do
            continue
        shown = " ".join(f"{a}={v}" for a, v in sizes)
        found.append((world, f"parameters {shown} of {name}[{pid or ''}] in {f}"))
    return found


def _needed(
    best: tuple[int, str] | None, t: TestFunc, pid: str | None, f: Path, notes: list[str]
) -> tuple[int, str] | None:
    """The GPUs the body asks for: the fewest with which no count-naming skip fires, and the
    `mpirun -n N` it launches (decision gpu-need)."""
    name = "::".join(x for x in (t.cls, t.name) if x)
    found: list[tuple[int, str]] = []
    for test in t.skips:
        funcs = {id(c.func) for c in ast.walk(test) if isinstance(c, ast.Call)}
        names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name) and id(n) not in funcs}
        counts = []
        for env in _envs(t, pid):
            if names - env.keys():  # a value the id does not give (a fixture, a global)
                counts.append(0)
                continue
            # The fewest GPUs with which the skip does not surely fire: what it reads beside
            # the count (the GPU's memory, its name) is the machine's, not the job's to choose.
            vals = (_value(test, env, d) for d in range(1, MAX_BODY_DEVICES + 1))
            counts.append(next((d for d, v in enumerate(vals, 1) if v is not True), 0))
        shown = f"`if {ast.unparse(test)}: pytest.skip(...)`"
        if not counts or not all(counts):
            notes.append(
                f"{name}[{pid or ''}] skips on {shown} with values the id does not give; "
                "its GPU count is not known from it"
            )
            continue
        found.append((max(counts), f"{shown} in the body of {name} in {f}"))
    found += _parallel_needs(t, pid, name, f)
    for text in t.launches:
        last = text.rsplit(None, 1)[-1]
        if last.isdigit():
            # int() refuses more than 4,300 digits (a traceback); any count this long is absurd
            count = int(last) if len(last) <= 18 else 10**18
            found.append((count, f"`{text}` in the body of {name} in {f}"))
        else:
            notes.append(f"{name} runs `{text} ...` with a count that is not a literal")
    for count, where in found:
        if best is None or count > best[0]:
            best = (count, where)
    return best


# ---------------------------------------------------------------- timeout marks


def _timeout_of(decorators: list[ast.expr]) -> int | None:
    """N of a `@pytest.mark.timeout(N)` among the decorators (a literal number only)."""
    for d in decorators:
        if isinstance(d, ast.Call) and _mark_name(d.func) == "timeout" and d.args:
            try:
                value = ast.literal_eval(d.args[0])
            except ValueError:
                continue
            # 1e309 is a float infinity: no number of seconds
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return int(-(-value // 1)) if math.isfinite(value) else None
    return None


@lru_cache(maxsize=256)
def _file_timeout_marks(path: str) -> tuple[tuple[str | None, str, int], ...]:
    """(class or None, test, seconds) for each test of one file with a timeout mark of its own
    or of its class: parsed once per run, however many selections point at the file (a group
    of 2,000 lines of one file parsed it 2,000 times)."""
    try:
        tree = ast.parse(read_source(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return ()  # size_pytest reports an unreadable file
    scopes: list[tuple[ast.ClassDef | None, list[ast.stmt]]] = [(None, tree.body)]
    scopes += [(c, c.body) for c in tree.body if isinstance(c, ast.ClassDef)]
    marked: list[tuple[str | None, str, int]] = []
    for cls, body in scopes:
        cls_mark = _timeout_of(cls.decorator_list) if cls is not None else None
        for f in body:
            if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if not f.name.startswith("test"):
                continue
            mark = _timeout_of(f.decorator_list) or cls_mark
            if mark is not None:
                marked.append((cls.name if cls is not None else None, f.name, mark))
    return tuple(marked)


def timeout_marks(test_cmd: str, repo_root: Path) -> int | None:
    """The longest `@pytest.mark.timeout(N)` (seconds) on a selected test or its class, which
    pytest-timeout puts before the command line's --timeout (decision timeout-mark-time)."""
    longest: int | None = None
    for sel in split_selections(test_cmd).selections:
        path, _ = _locate(repo_root, sel.path)
        if path is None or not path.is_file():
            continue
        for cls, func, mark in _file_timeout_marks(str(path)):
            if sel.cls is not None and cls != sel.cls:
                continue  # a module-level test, or another class
            if sel.func not in (None, func):
                continue
            if longest is None or mark > longest:
                longest = mark
    return longest
