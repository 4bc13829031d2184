"""job_spec.json's plain classes (what a build fills) and their pydantic twins (what reads it
and gives its schema) stay in step."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from trtllm_script_builder.model import jobspec

GOLDEN = Path(__file__).resolve().parent / "golden"
SPECS = sorted(GOLDEN.glob("*/job_spec.json"))


@pytest.mark.parametrize("plain", [jobspec.SlurmParams, jobspec.JobSpec])
def test_fields_defaults_and_order_match_the_pydantic_twin(plain: type) -> None:
    twin = {"SlurmParams": jobspec._models()[0], "JobSpec": jobspec._models()[1]}[plain.__name__]
    mine = dataclasses.fields(plain)
    assert [f.name for f in mine] == list(twin.model_fields)
    for f in mine:
        theirs = twin.model_fields[f.name]
        if f.default is not dataclasses.MISSING:
            assert theirs.default == f.default, f.name
        elif f.default_factory is not dataclasses.MISSING:
            assert theirs.default_factory is not None, f.name
            assert theirs.default_factory() == f.default_factory(), f.name  # type: ignore[call-arg]
        else:
            assert theirs.is_required(), f.name


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.parent.name)
def test_golden_job_spec_reads_back_to_the_same_bytes(path: Path) -> None:
    text = path.read_text()
    spec = jobspec.JobSpec.model_validate_json(text)
    assert isinstance(spec, jobspec.JobSpec)
    assert spec.slurm_params is None or isinstance(spec.slurm_params, jobspec.SlurmParams)
    assert spec.to_json() == text


def test_reading_refuses_what_the_schema_refuses() -> None:
    text = SPECS[0].read_text()
    with pytest.raises(ValidationError):
        jobspec.JobSpec.model_validate_json(text.replace('"category": ', '"category": 9', 1))
    with pytest.raises(ValidationError):
        jobspec.JobSpec.model_validate_json(text.replace("{", '{"surplus": 1,', 1))


def test_building_a_spec_does_not_build_pydantic_models() -> None:
    code = (
        "import sys\n"
        "from trtllm_script_builder.model.jobspec import JobSpec\n"
        "JobSpec(workflow_type='x', category=2, model_name='m', execution_scenario='s',"
        " container_image='i', docker_image='i', script_path='p', script_name='n',"
        " success_patterns=[], failure_patterns=[], required_devices=1, node_count=1,"
        " work_dir='w', repo_root='r').to_json()\n"
        "assert 'pydantic.main' not in sys.modules, 'pydantic.main imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
