"""The JSON Schemas: the checked-in copies match the models, and real files validate.

Regenerate after an intended model change with `UPDATE_SCHEMAS=1 pytest tests/test_schema.py`
and read the diff before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from trtllm_script_builder.cli import main
from trtllm_script_builder.cli.schema import SCHEMAS, render
from trtllm_script_builder.model.jobspec import SCHEMA_VERSION

from .conftest import SLURM_ENV

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = ROOT / "schemas"
GOLDEN_SPECS = sorted((ROOT / "tests" / "golden").glob("*/job_spec.json"))


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    return data


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load(name))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_checked_in_schema_matches_the_code(name: str) -> None:
    path = SCHEMA_DIR / f"{name}.schema.json"
    if os.environ.get("UPDATE_SCHEMAS"):
        path.write_text(render(name))
    assert path.read_text() == render(name), (
        f"{path} is stale: regenerate with UPDATE_SCHEMAS=1 pytest tests/test_schema.py"
    )


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_is_a_valid_versioned_schema(name: str) -> None:
    schema = load(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith(f":{name}:v{1 if name != 'job-spec' else SCHEMA_VERSION}")
    assert "schema version" in schema["title"]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_cli_prints_the_checked_in_schema(name: str, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["schema", name])
    assert r.exit_code == 0, r.output
    assert r.stdout == (SCHEMA_DIR / f"{name}.schema.json").read_text()
    out = tmp_path / "s.json"
    r = CliRunner().invoke(main, ["schema", name, "-o", str(out)])
    assert r.exit_code == 0 and r.stdout == ""
    assert out.read_text() == render(name)


def test_unknown_schema_name_is_a_usage_error() -> None:
    r = CliRunner().invoke(main, ["schema", "jobspec"])
    assert r.exit_code == 2
    assert "job-spec" in r.stderr


def test_job_spec_schema_pins_the_version() -> None:
    schema = load("job-spec")
    assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    assert "schema_version" in schema["required"]


@pytest.mark.parametrize("path", GOLDEN_SPECS, ids=lambda p: p.parent.name)
def test_every_golden_job_spec_validates(path: Path) -> None:
    spec = json.loads(path.read_text())
    validator("job-spec").validate(spec)
    assert validator("slurm-env").is_valid(spec.get("slurm_env") or {})


def test_golden_job_specs_exist() -> None:
    assert len(GOLDEN_SPECS) >= 10


def test_schema_refuses_what_a_reader_must_not_trust() -> None:
    spec = json.loads(GOLDEN_SPECS[0].read_text())
    v = validator("job-spec")
    assert v.is_valid(spec)
    assert not v.is_valid({**spec, "schema_version": SCHEMA_VERSION + 1})
    assert not v.is_valid({**spec, "unknown_field": 1})
    assert not v.is_valid({k: val for k, val in spec.items() if k != "script_path"})
    assert not v.is_valid({**spec, "category": 7})


def test_example_requests_and_cluster_files_validate() -> None:
    req = validator("request")
    for path in sorted((ROOT / "examples" / "requests").glob("*.yaml")):
        req.validate(yaml.safe_load(path.read_text()))
    env = validator("slurm-env")
    for path in sorted((ROOT / "examples").glob("slurm_env*.json")):
        env.validate(json.loads(path.read_text()))
    env.validate(SLURM_ENV)


def test_request_schema_refuses_what_build_refuses() -> None:
    req = validator("request")
    base = {"execution_scenario": "local_docker", "work_dir": "/w", "repo_root": "/r"}
    assert req.is_valid(base)
    assert not req.is_valid({**base, "test_cmnd": "pytest x"})  # a typo is not ignored
    assert not req.is_valid({**base, "execution_scenario": "docker"})
    assert not req.is_valid({**base, "required_devices": 0})
    assert not req.is_valid({k: v for k, v in base.items() if k != "work_dir"})


def test_output_into_a_new_folder_and_an_impossible_path(tmp_path: Path) -> None:
    target = tmp_path / "new" / "r.json"
    r = CliRunner().invoke(main, ["schema", "request", "-o", str(target)])
    assert r.exit_code == 0 and target.read_text() == render("request")
    (tmp_path / "afile").write_text("")
    r = CliRunner().invoke(main, ["schema", "request", "-o", str(tmp_path / "afile" / "r.json")])
    assert r.exit_code == 2 and r.stderr.startswith("error: output: cannot write ")
    assert r.stderr.count("\n") == 1
