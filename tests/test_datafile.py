"""One bounded way to read JSON and YAML (decision one-data-reader), and every reader that takes it:
a key written twice, deep nesting and alias bombs are refused with one line, never a traceback."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from trtllm_script_builder.cli import main
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.datafile import (
    MAX_NODES,
    DataError,
    load_yaml,
    parse_json,
    yaml_loader_class,
)
from trtllm_script_builder.model.values import MAX_DEPTH
from trtllm_script_builder.resolve.perf.sizing import load_perf_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ALIASES = yaml_loader_class(aliases=True)
NO_ALIASES = yaml_loader_class(aliases=False)

# Each level doubles what the last one names: 2**40 values from a few hundred bytes.
BOMB = "a0: &a0 [x, x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, 41))
DEEP = "[" * 100_000 + "]" * 100_000


def test_json_refuses_a_key_written_twice_and_deep_nesting() -> None:
    assert parse_json('{"a": {"b": [1, 2]}}') == {"a": {"b": [1, 2]}}
    with pytest.raises(DataError, match=r"the key 'a' is written twice"):
        parse_json('{"a": 1, "b": {}, "a": 2}')
    with pytest.raises(DataError, match=r"the key 'k' is written twice"):
        parse_json('[{"x": {"k": 1, "k": 1}}]')
    with pytest.raises(DataError, match=f"deeper than {MAX_DEPTH}"):
        parse_json(DEEP)
    with pytest.raises(DataError, match=f"deeper than {MAX_DEPTH}"):
        parse_json("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2))
    parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH)  # the bound itself is fine
    with pytest.raises(DataError, match="at line 2"):
        parse_json('{"a": 1,\n}')


def test_yaml_refuses_a_key_written_twice_but_takes_merge_keys() -> None:
    with pytest.raises(DataError, match=r"the key 'hardware' is written twice \(line 3\)"):
        load_yaml("hardware: 1\nx: 2\nhardware: 3\n", ALIASES)
    with pytest.raises(DataError, match=r"the key 'b' is written twice"):
        load_yaml("- a: {b: 1, b: 2}\n", NO_ALIASES)
    # a merge key's values may be overridden beside it: that is what `<<` is for
    text = "base: &b {tp: 4, pp: 1}\nserver: {<<: *b, tp: 8}\n"
    assert load_yaml(text, ALIASES)["server"] == {"tp": 8, "pp": 1}


def test_yaml_bounds_nesting_and_what_aliases_expand_to() -> None:
    for loader in (ALIASES, NO_ALIASES):
        with pytest.raises(DataError, match=f"deeper than {MAX_DEPTH} levels"):
            load_yaml(DEEP, loader)
    t0 = time.process_time()  # CPU time: a busy machine does not stretch it
    with pytest.raises(DataError, match=f"more than {MAX_NODES} values"):
        load_yaml(BOMB, ALIASES)
    assert time.process_time() - t0 < 5  # measured once per node, not per expansion
    with pytest.raises(DataError, match=r"aliases \(\*name\) are not allowed \(line 2\)"):
        load_yaml(BOMB, NO_ALIASES)
    # a chain of aliases, each one level deeper than the last, is as deep as it expands
    chain = "a0: &a0 [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 60))
    with pytest.raises(DataError, match="expand to nesting deeper"):
        load_yaml(chain, ALIASES)
    with pytest.raises(DataError, match="refers to the value that holds it"):
        load_yaml("a: &a [x, *a]\n", ALIASES)
    # what a perf-sanity config does with anchors stays readable
    ok = "common: &c {max_batch_size: 8}\nserver_configs:\n  - {name: a, cfg: *c}\n  - {cfg: *c}\n"
    assert load_yaml(ok, ALIASES)["server_configs"][1] == {"cfg": {"max_batch_size": 8}}


def test_a_tag_error_is_still_yamls_own() -> None:
    with pytest.raises(yaml.YAMLError):
        load_yaml("a: !!python/object:os.system x\n", ALIASES)


# ---------------------------------------------------------------- every reader, one line


def one_line(args: list[str]) -> str:
    res = CliRunner().invoke(main, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def request(tmp_path: Path, **extra: object) -> dict[str, object]:
    req = {
        "execution_scenario": "local_slurm",
        "workflow_type": "custom",
        "custom_cmd": "echo hi",
        "repo_root": str(EXAMPLES / "trtllm_repo"),
        "work_dir": str(tmp_path / "job"),
        "slurm_env_file": str(EXAMPLES / "slurm_env.json"),
        "partition": "gpu",
        "account": "tsb",
        "container_image": "nvcr.io/nvidia/x:1",
    }
    req.update(extra)
    return req


def test_a_request_with_a_key_written_twice_is_refused(tmp_path: Path) -> None:
    text = "".join(f"{k}: {json.dumps(v)}\n" for k, v in request(tmp_path).items())
    (tmp_path / "r.yaml").write_text(text + "workflow_type: pytest\n")
    line = one_line(["build", str(tmp_path / "r.yaml")])
    assert "the key 'workflow_type' is written twice" in line
    body = json.dumps(request(tmp_path))[:-1] + ', "partition": "cpu"}'
    (tmp_path / "r.json").write_text(body)
    assert "the key 'partition' is written twice" in one_line(["build", str(tmp_path / "r.json")])
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize("trouble", ["dup", "deep"])
def test_the_cluster_file_and_the_forwarded_job_spec(tmp_path: Path, trouble: str) -> None:
    text = {"dup": '{"partitions": [], "partitions": []}', "deep": DEEP}[trouble]
    words = {"dup": "the key 'partitions' is written twice", "deep": "deeper than"}[trouble]
    (tmp_path / "env.json").write_text(text)
    req = request(tmp_path, slurm_env_file=str(tmp_path / "env.json"))
    (tmp_path / "r.json").write_text(json.dumps(req))
    line = one_line(["build", str(tmp_path / "r.json")])
    assert line.startswith("error: slurm_env_file: ") and words in line, line
    (tmp_path / "spec.json").write_text(text)
    (tmp_path / "r2.json").write_text(
        json.dumps(request(tmp_path, job_spec_file=str(tmp_path / "spec.json")))
    )
    line = one_line(["build", str(tmp_path / "r2.json")])
    assert line.startswith("error: job_spec_file: ") and words in line, line


@pytest.mark.parametrize("trouble", ["dup", "deep"])
def test_a_build_many_list_file(tmp_path: Path, trouble: str) -> None:
    base = tmp_path / "base.json"
    req = request(tmp_path)
    req.pop("custom_cmd")
    base.write_text(json.dumps(req))
    listing = tmp_path / "list.yaml"
    if trouble == "deep":
        listing.write_text(DEEP)
        line = one_line(["build-many", str(listing), "--base", str(base)])
        assert line.startswith("error: LIST: ") and "deeper than" in line
        return
    listing.write_text("- {custom_cmd: a, custom_cmd: b}\n- {custom_cmd: c}\n")
    res = CliRunner().invoke(main, ["build-many", str(listing), "--base", str(base), "--dry-run"])
    assert res.exit_code == 2, res.output
    assert "the key 'custom_cmd' is written twice" in res.stderr


def test_a_site_config_with_a_key_written_twice(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("account: tsb\naccount: tsb2\n")
    (tmp_path / "r.json").write_text(json.dumps(request(tmp_path)))
    res = CliRunner(env={"TRTLLM_SCRIPT_BUILDER_CONFIG": str(site)}).invoke(
        main, ["build", str(tmp_path / "r.json")]
    )
    assert res.exit_code == 2 and "the key 'account' is written twice" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "text, words",
    [
        (BOMB, f"expand to more than {MAX_NODES} values"),
        (DEEP, "deeper than"),
        ("hardware: {gpus_per_node: 4}\nhardware: {gpus_per_node: 8}\n", "written twice"),
        ("x" * ((1 << 20) + 1), "characters, more than"),
    ],
)
def test_a_perf_config(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    with pytest.raises(BuildError) as got:
        load_perf_config(path)
    assert words in str(got.value) and "\n" not in str(got.value), got.value
