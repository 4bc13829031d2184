"""The package's import graph runs one way: no circles, and each layer imports only those below.

Every `import` counts, including those inside functions and under TYPE_CHECKING: a lazy import
still ties two modules together for a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = "trtllm_script_builder"
ROOT = Path(__file__).resolve().parents[1] / "src" / PKG

# Lowest first. A module belongs to the first prefix it starts with.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "slurm_time", "atomic", ""),
    ("model",),
    ("resolve",),
    ("render",),
    ("output",),
    ("process",),
    ("backends",),
    ("workflows",),
    ("build", "batch"),
    ("cli", "__main__"),
]


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _imports(path: Path, mods: dict[str, Path]) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PKG):
            base = node.module[len(PKG) :].lstrip(".")
            names = [f"{base}.{a.name}".lstrip(".") for a in node.names]
            names = [n if n in mods else base for n in names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import; the package uses absolute ones"
        elif isinstance(node, ast.Import):
            names = [a.name[len(PKG) :].lstrip(".") for a in node.names if a.name.startswith(PKG)]
        out.update(names)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(path, mods) - {name} for name, path in mods.items()}


def _layer(module: str) -> int:
    top = module.split(".")[0]
    for i, members in enumerate(LAYERS):
        if top in members:
            return i
    raise AssertionError(f"{module} is in no layer; add its package to LAYERS")


def test_every_module_has_a_layer_and_imports_only_downwards() -> None:
    wrong = [
        f"{mod} (layer {_layer(mod)}) imports {dep} (layer {_layer(dep)})"
        for mod, deps in _graph().items()
        for dep in deps
        if _layer(dep) > _layer(mod)
    ]
    assert not wrong, "\n".join(wrong)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circles() -> None:
    found = _cycle(_graph())
    assert found is None, " -> ".join(found or [])


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_resolve_and_render_start_no_process_and_write_nothing() -> None:
    """resolve decides and render formats; starting programs and writing belong elsewhere."""
    banned = {"subprocess", "shutil", "tempfile"}
    for name, path in _modules().items():
        if name.split(".")[0] not in ("resolve", "render", "model"):
            continue
        tree = ast.parse(path.read_text())
        used = {
            a.name.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.Import)
            for a in n.names
        } | {
            n.module.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module
        }
        assert not used & banned, f"{name} imports {sorted(used & banned)}"
        text = path.read_text()
        for call in ("write_text(", "write_bytes(", "os.replace(", "os.rename(", "mkdir("):
            assert call not in text, f"{name} calls {call}"
