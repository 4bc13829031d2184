"""The documentation cannot rot: its examples are run, its outputs compared, its catalogues
checked against the code.

Conventions in docs/*.md (an HTML comment on the line before a fenced block):

- `<!-- run -->` before a ```bash block: run it (bash, errexit and pipefail on) from the root
  of a temporary copy of this clone, with `trtllm-script-builder` on PATH; it must exit 0.
  `<!-- run: exit N -->` expects exit status N instead.
- `<!-- output -->` before a block: what the last run block printed (standard output and
  standard error together).
- `<!-- file: PATH -->` before a block: the contents of PATH (relative to the clone) at that
  point of the page.

The temporary clone sits at <tmp>/home/me/trtllm-script-builder with HOME=<tmp>/home/me, and
<tmp> is removed from what is compared, so the pages show /home/me/trtllm-script-builder/...
A ```json block is compared as data, anything else as text. After an intended change,
`UPDATE_DOCS=1 pytest tests/test_docs.py` rewrites the output and file blocks; read the diff.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from trtllm_script_builder.resolve.compile import checkout_job_name
from trtllm_script_builder.resolve.job import docker_container_name as container_name

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOCS = ROOT / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md"))
WORKFLOW_PAGES = [
    "pytest.md",
    "eval.md",
    "bench.md",
    "custom.md",
    "perf-sanity.md",
    "docker.md",
    "remote-slurm.md",
]

BLOCK = re.compile(
    r"<!--\s*(?P<kind>run(?::\s*exit\s+(?P<exit>\d+))?|output|file:\s*(?P<path>\S+))\s*-->\n"
    r"```(?P<lang>[\w-]*)\n(?P<body>.*?)^```[ \t]*$",
    re.M | re.S,
)


@dataclass
class Block:
    kind: str  # run, output or file
    lang: str
    body: str
    start: int  # span of body in the page
    end: int
    exit: int = 0
    path: str = ""


def blocks(text: str) -> list[Block]:
    out = []
    for m in BLOCK.finditer(text):
        kind = m.group("kind").split(":")[0]
        out.append(
            Block(
                kind,
                m.group("lang"),
                m.group("body"),
                m.start("body"),
                m.end("body"),
                int(m.group("exit") or 0),
                m.group("path") or "",
            )
        )
    return out


class Clone:
    """A temporary copy of what the docs' commands use, with the program on PATH."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp.resolve()
        self.home = self.tmp / "home" / "me"
        self.root = self.home / "trtllm-script-builder"
        shutil.copytree(
            ROOT / "examples",
            self.root / "examples",
            # As a fresh clone has it: examples/work/ holds only its .gitkeep
            # (decision work-dir-parent-made).
            ignore=lambda d, names: (
                [n for n in names if n != ".gitkeep"]
                if Path(d) == ROOT / "examples" / "work"
                else []
            ),
        )
        shutil.copytree(ROOT / "schemas", self.root / "schemas")
        self.bin = self.tmp / "bin"
        self.bin.mkdir()
        exe = self.bin / "trtllm-script-builder"
        exe.write_text(
            f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(SRC)!r})\n"
            "from trtllm_script_builder.cli import main\nmain()\n"
        )
        exe.chmod(0o755)

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("TRTLLM_SCRIPT_BUILDER_CONFIG", "NO_COLOR", "FORCE_COLOR")
        }
        bin_dirs = f"{self.bin}{os.pathsep}{Path(sys.executable).parent}"
        env.update(HOME=str(self.home), PATH=f"{bin_dirs}{os.pathsep}{env.get('PATH', '')}")
        env.update(COLUMNS="80", LC_ALL="C.UTF-8")  # help text is wrapped to the width
        return env

    def run(self, script: str) -> tuple[int, str]:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=self.root,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
        )
        return done.returncode, self.normalise(done.stdout)

    def normalise(self, text: str) -> str:
        # A Docker container name carries a hash of its job folder: shown as the shown folder's.
        work = self.root / "examples" / "work"
        for folder in (p for p in work.rglob("*") if p.is_dir()) if work.is_dir() else ():
            shown = str(folder).replace(str(self.tmp), "")
            text = text.replace(container_name("", str(folder)), container_name("", shown))
        # A compile's job name carries a hash of its checkout: shown as the shown checkout's.
        for script in self.root.glob("examples/*/scripts/build_wheel.py"):
            checkout = str(script.parent.parent)
            shown = checkout.replace(str(self.tmp), "")
            text = text.replace(checkout_job_name(checkout), checkout_job_name(shown))
        # `--dry-run` names the interpreter the build runs submit.py with: shown as python3
        return text.replace(str(self.tmp), "").replace(f"{sys.executable} ", "python3 ")


def same(lang: str, shown: str, actual: str) -> bool:
    if lang == "json":
        try:
            return bool(json.loads(shown) == json.loads(actual))
        except ValueError:
            return False
    return shown.rstrip("\n") == actual.rstrip("\n")


def test_docs_has_pages() -> None:
    for name in [*WORKFLOW_PAGES, "README.md", "site-config.md", "errors.md", "verdicts.md"]:
        assert name in PAGES, f"docs/{name} is missing"


def test_every_page_is_linked_from_the_index() -> None:
    index = (DOCS / "README.md").read_text()
    for name in PAGES:
        if name != "README.md":
            assert f"]({name})" in index, f"docs/README.md does not link {name}"


@pytest.mark.parametrize("name", WORKFLOW_PAGES)
def test_workflow_pages_show_request_command_script_and_job_spec(name: str) -> None:
    found = blocks((DOCS / name).read_text())
    assert any(b.kind == "run" and "trtllm-script-builder build" in b.body for b in found)
    shown = [b.path for b in found if b.kind == "file"]
    printed = [b.body for b in found if b.kind == "output"]
    assert any(p.endswith("job_spec.json") for p in shown) or any(
        '"schema_version"' in text for text in printed
    ), f"{name} shows no job_spec.json"
    assert any(not p.endswith(".json") for p in shown) or any(
        "==> would run" in text for text in printed
    ), f"{name} shows no script or request"


@pytest.mark.parametrize("name", PAGES)
def test_page_examples_run_and_print_what_the_page_shows(name: str, tmp_path: Path) -> None:
    page = DOCS / name
    text = page.read_text()
    found = blocks(text)
    if not found:
        pytest.skip(f"{name} has no marked examples")
    clone = Clone(tmp_path)
    updates: list[tuple[Block, str]] = []
    problems: list[str] = []
    last: tuple[str, int, str] | None = None  # script, status, output
    for b in found:
        if b.kind == "run":
            status, output = clone.run(b.body)
            last = (b.body, status, output)
            if status != b.exit:
                problems.append(
                    f"`{b.body.strip()}` exited {status}, the page expects {b.exit}:\n{output}"
                )
            continue
        if b.kind == "output":
            assert last is not None, f"{name}: an output block before any run block"
            actual, what = last[2], f"the output of `{last[0].strip()}`"
        else:
            path = clone.root / b.path
            if not path.is_file():
                problems.append(f"{b.path} does not exist at this point of the page")
                continue
            actual, what = clone.normalise(path.read_text()), b.path
        if not same(b.lang, b.body, actual):
            updates.append((b, actual))
            problems.append(f"{what} differs from the page:\n{actual}")
    failed_runs = any("the page expects" in p for p in problems)
    if updates and os.environ.get("UPDATE_DOCS") and not failed_runs:
        for b, actual in sorted(updates, key=lambda u: u[0].start, reverse=True):
            body = actual if actual.endswith("\n") else actual + "\n"
            text = text[: b.start] + body + text[b.end :]
        page.write_text(text)
        problems = [p for p in problems if "differs from the page" not in p]
    assert not problems, f"docs/{name}:\n\n" + "\n\n".join(problems)


# ---------------------------------------------------------------- the error catalogue

ELLIPSIS = "…"


def _template(node: ast.expr | None) -> str:
    """A message as its call site writes it, every interpolation shown as …"""
    if node is None:
        return ""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(v.value) if isinstance(v, ast.Constant) else ELLIPSIS for v in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _template(node.left) + _template(node.right)
    return ELLIPSIS


@dataclass(frozen=True)
class Site:
    where: str
    exc: str
    field: str | None  # None when the call site computes the field
    problem: str


def code_errors() -> list[Site]:
    """Every BuildError/ToolFailed the code can raise, and each Request validator message."""
    sites: list[Site] = []
    for path in sorted((SRC / "trtllm_script_builder").rglob("*.py")):
        tree = ast.parse(path.read_text())
        rel = path.relative_to(SRC)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            if node.func.id in ("BuildError", "ToolFailed") and len(node.args) >= 2:
                f = node.args[0]
                field = f.value if isinstance(f, ast.Constant) else None
                sites.append(
                    Site(f"{rel}:{node.lineno}", node.func.id, field, _template(node.args[1]))
                )
            elif node.func.id == "refuse" and len(node.args) >= 2:
                # model/values.py's refusal: "<what> (got <value>)"
                f = node.args[0]
                field = f.value if isinstance(f, ast.Constant) else None
                msg = f"{_template(node.args[1])} (got …)"
                sites.append(Site(f"{rel}:{node.lineno}", "BuildError", field, msg))
            elif (
                node.func.id in ("ValueError", "Problem")
                and path.name == "request.py"
                and node.args
            ):
                # a field validator: _first_error shows it as "<message> (got <value>)"
                msg = _template(node.args[0])
                sites.append(Site(f"{rel}:{node.lineno}", "ValueError", None, f"{msg} (got …)"))
        if path.name == "values.py":
            # the problems every value is checked for, shown as "<problem> (got <value>)"
            for fn in ast.walk(tree):
                if isinstance(fn, ast.FunctionDef) and fn.name == "text_problem":
                    for ret in ast.walk(fn):
                        if (
                            isinstance(ret, ast.Return)
                            and isinstance(ret.value, ast.JoinedStr | ast.Constant)
                            and ret.value is not None
                            and _template(ret.value) != "None"
                        ):
                            msg = f"{_template(ret.value)} (got …)"
                            sites.append(Site(f"{rel}:{ret.lineno}", "BuildError", None, msg))
    return sites


@dataclass(frozen=True)
class Row:
    fields: tuple[str, ...]
    problem: str
    line: int


def doc_rows() -> list[Row]:
    rows = []
    for n, line in enumerate((DOCS / "errors.md").read_text().splitlines(), 1):
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert len(cells) == 3, f"docs/errors.md:{n}: a row has field | message | cause and fix"
        fields = tuple(re.findall(r"`([^`]+)`", cells[0]))
        m = re.fullmatch(r"`(.+)`", cells[1])
        assert m, f"docs/errors.md:{n}: the message goes in backticks"
        problem = re.sub(r"\{[^{}]*\}", ELLIPSIS, m.group(1).replace("\\|", "|"))
        rows.append(Row(fields, problem, n))
    return rows


def test_the_catalogue_has_rows() -> None:
    assert len(doc_rows()) >= 50


def test_every_documented_error_is_one_the_code_can_raise() -> None:
    known = {s.problem for s in code_errors()}
    stale = [f"docs/errors.md:{r.line}: {r.problem}" for r in doc_rows() if r.problem not in known]
    assert not stale, "documented errors the code no longer raises:\n" + "\n".join(stale)


def test_every_error_the_code_can_raise_is_documented() -> None:
    rows = doc_rows()
    missing = []
    for site in code_errors():
        matching = [r for r in rows if r.problem == site.problem]
        if not matching or (
            site.field is not None and not any(site.field in r.fields for r in matching)
        ):
            field = f"`{site.field}`" if site.field else "`<field>`"
            missing.append(f"{site.where} ({site.exc}): | {field} | `{site.problem}` | ... |")
    assert not missing, (
        "errors the code can raise that docs/errors.md does not list (add a row; write each "
        "… as a {named} placeholder):\n" + "\n".join(missing)
    )


# ---------------------------------------------------------------- the verdicts


def test_the_verdict_table_matches_the_runner() -> None:
    verdict = pytest.importorskip("trtllm_script_builder.process.verdict")
    text = (DOCS / "verdicts.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| (\d+) \|", text, re.M))
    assert {v.value: int(c) for v, c in verdict.VERDICT_EXIT.items()} == {
        k: int(v) for k, v in rows.items()
    }


def test_the_verdict_page_names_every_verdict() -> None:
    text = (DOCS / "verdicts.md").read_text()
    for name in (
        "PASSED",
        "FAILED",
        "TIMEOUT",
        "CANCELLED",
        "OUT_OF_MEMORY",
        "HANG_DETECTED",
        "INFRA_FAILURE",
        "NOT_RUN",
    ):
        assert f"## {name}" in text, f"docs/verdicts.md has no section for {name}"
