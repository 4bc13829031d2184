"""Compiled templates cached on disk by the writing step: reused across processes, never
trusted over the source; render alone writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from trtllm_script_builder import render
from trtllm_script_builder.output import template_cache as r

CTX = {"name": "a b", "n": 3}
SOURCE = "x={{ name | q }} n={{ n }}\n"


def env(folder: Path | None, source: str = SOURCE) -> jinja2.Environment:
    e = jinja2.Environment(
        loader=jinja2.DictLoader({"t.j2": source}),
        bytecode_cache=r.TemplateCache(folder) if folder else None,
        **render.OPTIONS,
    )
    e.filters["q"] = render.quote
    return e


def test_second_environment_loads_what_the_first_compiled(tmp_path: Path) -> None:
    first = env(tmp_path).get_template("t.j2").render(**CTX)
    [cached] = list(tmp_path.iterdir())
    compiled = []
    e = env(tmp_path)
    e.compile = lambda *a, **k: compiled.append(a)  # type: ignore[method-assign]
    assert e.get_template("t.j2").render(**CTX) == first == "x='a b' n=3\n"
    assert compiled == []
    assert cached.name.endswith(".j2c")


def test_changed_source_is_compiled_again_not_served_from_cache(tmp_path: Path) -> None:
    env(tmp_path).get_template("t.j2").render(**CTX)
    changed = SOURCE.replace("n=", "count=")
    assert env(tmp_path, changed).get_template("t.j2").render(**CTX) == "x='a b' count=3\n"


@pytest.mark.parametrize("junk", [b"", b"j2", b"not a cache file at all", b"\x80\x02" * 40])
def test_torn_or_foreign_cache_file_is_ignored(tmp_path: Path, junk: bytes) -> None:
    env(tmp_path).get_template("t.j2")
    [cached] = list(tmp_path.iterdir())
    cached.write_bytes(junk)
    assert env(tmp_path).get_template("t.j2").render(**CTX) == "x='a b' n=3\n"


def test_unwritable_cache_folder_still_renders(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert env(blocker / "sub").get_template("t.j2").render(**CTX) == "x='a b' n=3\n"
    assert blocker.read_text() == ""


def test_key_depends_on_jinja_python_and_options(tmp_path: Path) -> None:
    cache = r.TemplateCache(tmp_path)
    key = cache.get_cache_key("t.j2")
    cache._salt = cache._salt.replace(jinja2.__version__, "0.0.0")
    assert cache.get_cache_key("t.j2") != key


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(r.CACHE_ENV_VAR, str(tmp_path / "c"))
    assert r.cache_dir() == tmp_path / "c"
    monkeypatch.setenv(r.CACHE_ENV_VAR, "")
    assert r.cache_dir() is None
    monkeypatch.delenv(r.CACHE_ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert r.cache_dir() == tmp_path / "x" / "trtllm-script-builder" / "templates"


def test_scripts_are_identical_cold_warm_and_without_cache(tmp_path: Path) -> None:
    """Whole builds in fresh processes: no cache, an empty cache, then the filled cache."""
    example = Path(__file__).resolve().parents[1] / "examples" / "requests"
    request = example / "pytest_local_slurm.yaml"
    outputs = []
    for i, folder in enumerate(["", str(tmp_path / "cache"), str(tmp_path / "cache")]):
        work = tmp_path / f"w{i}"
        done = subprocess.run(
            [sys.executable, "-m", "trtllm_script_builder", "build", str(request)]
            + ["--work-dir", str(work)],
            env={**os.environ, r.CACHE_ENV_VAR: folder},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        [script] = work.glob("*.slurm")
        outputs.append(script.read_text().replace(str(work), "WORK"))
    assert outputs[0] == outputs[1] == outputs[2]
    assert any((tmp_path / "cache").iterdir())


def test_render_alone_writes_no_cache(tmp_path: Path) -> None:
    """The render layer writes nothing; the writing step gives it the cache."""
    folder = tmp_path / "cache"
    env = {**os.environ, r.CACHE_ENV_VAR: str(folder)}
    given = "from trtllm_script_builder.output.template_cache import use_template_cache\n"
    code = "from trtllm_script_builder.render import render\nrender('_clear_mpi.j2')\n"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert not folder.exists()
    subprocess.run(
        [sys.executable, "-c", given + "use_template_cache()\n" + code], env=env, check=True
    )
    assert [p.suffix for p in folder.iterdir()] == [".j2c"]
