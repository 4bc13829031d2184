"""slurm_env.json's plain classes (what a build reads) and their pydantic twins (errors,
conversions, schema) stay in step: the fast path takes a file only as the twins would."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from trtllm_script_builder.model import slurm_env as se

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BASE = json.loads((EXAMPLES / "slurm_env.json").read_text())


def via_twin(data: Any) -> se.SlurmEnv:
    return se._from_model(se._models()[2].model_validate(data))


@pytest.mark.parametrize("plain", [se.Partition, se.Pmix, se.SlurmEnv])
def test_fields_defaults_and_order_match_the_pydantic_twin(plain: type) -> None:
    twin = dict(zip(["Partition", "Pmix", "SlurmEnv"], se._models(), strict=True))[plain.__name__]
    mine = dataclasses.fields(plain)
    assert [f.name for f in mine] == list(twin.model_fields)
    for f in mine:
        theirs = twin.model_fields[f.name]
        assert theirs.is_required() == (
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        if f.default is not dataclasses.MISSING:
            assert theirs.default == f.default, f.name


def variants() -> list[Any]:
    out: list[Any] = [BASE, json.loads((EXAMPLES / "slurm_env_remote.json").read_text()), {}]
    edits = [
        ("partitions", 0, "gpus_per_node", "8"),
        ("partitions", 0, "gpus_per_node", True),
        ("partitions", 0, "gpus_per_node", 8.0),
        ("partitions", 0, "requires_gres", 1),
        ("partitions", 0, "requires_gres", "yes"),
        ("partitions", 0, "name", 3),
        ("partitions", 0, "surplus", {"any": "thing"}),
        ("partitions", 0, "state", None),
    ]
    for top, i, key, value in edits:
        d = copy.deepcopy(BASE)
        d[top][i][key] = value
        out.append(d)
    for key, value in [
        ("accounts", ["a", 1]),
        ("accounts", ("a",)),
        ("pmix", {"available": "pmix"}),
        ("pmix", None),
        ("mounts", None),
        ("mounts", ["/a:/a"]),
        ("mfa_style", "true"),
        ("user", None),
        ("user", 5),
        ("partitions", [{"state": "up"}]),
        ("partitions", None),
        ("newer_probe_key", [1, 2]),
    ]:
        d = copy.deepcopy(BASE)
        d[key] = value
        out.append(d)
    return out


@pytest.mark.parametrize("data", variants())
def test_fast_path_agrees_with_the_twins(data: Any) -> None:
    try:
        expected: se.SlurmEnv | str = via_twin(data)
    except ValidationError as exc:
        expected = str(exc)
    exact = se._exact(data)
    if exact is not None:
        assert exact == expected
    try:
        got: se.SlurmEnv | str = se.SlurmEnv.model_validate(data)
    except ValidationError as exc:
        got = str(exc)
    assert got == expected


def test_example_is_taken_by_the_fast_path() -> None:
    assert se._exact(BASE) is not None
    code = (
        "import sys\n"
        "from trtllm_script_builder.model.slurm_env import load_slurm_env\n"
        f"load_slurm_env({str(EXAMPLES / 'slurm_env.json')!r})\n"
        "assert 'pydantic.main' not in sys.modules, 'pydantic.main imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
