"""job_spec.json is one pydantic model: what a build fills, what submit and watch read back,
and its schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from trtllm_script_builder.model import jobspec

GOLDEN = Path(__file__).resolve().parent / "golden"
SPECS = sorted(GOLDEN.glob("*/job_spec.json"))


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


def test_reading_a_spec_builds_only_the_job_spec_models() -> None:
    """Pydantic builds a model's validator on first use: watch reads a job_spec.json without
    building the request's or the cluster file's models."""
    code = (
        "from trtllm_script_builder.model import jobspec, request, site_config, slurm_env\n"
        f"jobspec.JobSpec.model_validate_json(open({str(SPECS[0])!r}).read())\n"
        "models = [jobspec.JobSpec, request.Request, request.EnvCheck,"
        " slurm_env.SlurmEnv, site_config.SiteConfig]\n"
        "print(*(m.__pydantic_complete__ for m in models))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert done.stdout.split() == [b"True", b"False", b"False", b"False", b"False"]


def test_a_spec_holds_what_it_was_given() -> None:
    env = {"partitions": []}
    values = dict(
        workflow_type="x", category=2, model_name="m", execution_scenario="s",
        container_image="i", docker_image="i", script_path="p", script_name="n",
        success_patterns=[], failure_patterns=[], required_devices=1, node_count=1,
        work_dir="w", repo_root="r", slurm_env=env,
    )  # fmt: skip
    spec = jobspec.JobSpec(**values)
    assert spec.slurm_env is env  # embedded as probed, never copied: a batch shares it
    assert spec.schema_version == jobspec.SCHEMA_VERSION and spec.extra_files == []
    with pytest.raises(ValidationError):
        jobspec.JobSpec(**{**values, "category": 7})
