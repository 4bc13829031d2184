"""slurm_env.json is read by one pydantic model: what it converts, what it refuses and the
keys a newer probe adds, which it keeps."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model import slurm_env as se

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BASE = json.loads((EXAMPLES / "slurm_env.json").read_text())


def edited(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    at: Any = data
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return data


# (where, value given, what the model holds there afterwards)
TAKEN = [
    (("partitions", 0, "gpus_per_node"), "8", 8),
    (("partitions", 0, "gpus_per_node"), True, 1),
    (("partitions", 0, "gpus_per_node"), 8.0, 8),
    (("partitions", 0, "requires_gres"), 1, True),
    (("partitions", 0, "requires_gres"), "yes", True),
    (("partitions", 0, "state"), None, None),
    (("accounts",), ("a",), ["a"]),
    (("pmix",), {"available": ["pmix"]}, se.Pmix(available=["pmix"])),
    (("mounts",), ["/a:/a"], ["/a:/a"]),
    (("mfa_style",), "true", True),
    (("user",), None, None),
]
# (where, value given, the location pydantic names)
REFUSED = [
    (("partitions", 0, "name"), 3, ("partitions", 0, "name")),
    (("accounts",), ["a", 1], ("accounts", 1)),
    (("pmix",), {"available": "pmix"}, ("pmix", "available")),
    (("pmix",), None, ("pmix",)),
    (("user",), 5, ("user",)),
    (("partitions",), [{"state": "up"}], ("partitions", 0, "name")),
    (("partitions",), None, ("partitions",)),
]


@pytest.mark.parametrize("path,value,held", TAKEN, ids=repr)
def test_values_are_converted_to_the_field_types(path: Any, value: Any, held: Any) -> None:
    env: Any = se.SlurmEnv.model_validate(edited(path, value))
    for key in path:
        env = env[key] if isinstance(key, int) else getattr(env, key)
    assert env == held


@pytest.mark.parametrize("path,value,loc", REFUSED, ids=repr)
def test_wrong_values_are_refused_where_they_are(path: Any, value: Any, loc: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        se.SlurmEnv.model_validate(edited(path, value))
    assert caught.value.errors()[0]["loc"] == loc


def test_keys_of_a_newer_probe_are_kept() -> None:
    env = se.SlurmEnv.model_validate(
        {**edited(("partitions", 0, "surplus"), {"any": "thing"}), "newer_probe_key": [1, 2]}
    )
    assert env.model_extra == {"newer_probe_key": [1, 2]}
    assert env.partitions[0].model_extra == {"surplus": {"any": "thing"}}


def test_examples_load_and_a_bad_file_names_the_key(tmp_path: Path) -> None:
    for name in ("slurm_env.json", "slurm_env_remote.json"):
        env, raw = se.load_slurm_env(EXAMPLES / name)
        assert env.model_dump(exclude_unset=True) == raw
    bad = tmp_path / "slurm_env.json"
    bad.write_text(json.dumps(edited(("accounts",), ["a", 1])))
    with pytest.raises(BuildError) as caught:
        se.load_slurm_env(bad)
    assert caught.value.line() == (
        f"error: slurm_env_file: {bad}: accounts.1: Input should be a valid string; "
        "probe the cluster first (trtllm-script-builder probe --output slurm_env.json)"
    )
