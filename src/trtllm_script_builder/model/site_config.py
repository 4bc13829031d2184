"""The optional site config: a site's defaults for values a request leaves out
(decision no-invented-defaults)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model import values

ENV_VAR = "TRTLLM_SCRIPT_BUILDER_CONFIG"


class SiteConfig(BaseModel):
    # Built on first use (defer_build): most builds have no config file and take the defaults.
    model_config = ConfigDict(extra="forbid", defer_build=True)

    default_llm_models_root: str | None = None
    default_models_repo_host: str | None = None
    default_user_root_dir: str | None = None
    enroot_uri_rewrite: bool = True


def site_config_path() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        if not os.path.isabs(env):  # it would name another file from every other folder
            raise BuildError(
                ENV_VAR,
                f"{env!r} is a relative path",
                'set it to an absolute path, e.g. "$PWD/config.yaml"',
            )
        return Path(env)
    return Path.home() / ".config" / "trtllm-script-builder" / "config.yaml"


def load_site_config() -> SiteConfig:
    """Read the site config; absent is fine, unreadable or wrong is an error."""
    path = site_config_path()
    if not path.exists():
        if os.environ.get(ENV_VAR):
            raise BuildError(
                ENV_VAR,
                f"names {path}, which does not exist",
                "point it at a config.yaml or unset it",
            )
        return SiteConfig()
    try:
        text = path.read_text()[: values.MAX_ARG_BYTES]
    except (OSError, ValueError) as exc:
        raise BuildError(
            "site config",
            f"cannot read {path} ({str(exc).splitlines()[0]})",
            "fix or remove the file",
        ) from None
    return parse_site_config(text, path)


def parse_site_config(text: str, path: Path) -> SiteConfig:
    """The site config that `text` (the file at `path`) holds, checked as a request is."""
    import yaml

    from trtllm_script_builder.model.datafile import load_yaml
    from trtllm_script_builder.model.request import yaml_loader

    try:
        # Read as a request is: no aliases, no !!binary, a few lines at most.
        data = load_yaml(text, yaml_loader()) or {}
    except (ValueError, RecursionError, yaml.YAMLError) as exc:
        raise BuildError(
            "site config",
            f"cannot read {path} ({str(exc).splitlines()[0]})",
            "fix or remove the file",
        ) from None
    if not isinstance(data, dict):
        raise BuildError("site config", f"{path} does not hold a mapping", "write key: value lines")
    found = values.tree_problem(data)
    if found is not None:
        where, problem, value = found
        raise BuildError(
            f"site config {where}",
            f"{problem} (got {values.shown(value)}) in {path}",
            "correct that value",
        )
    try:
        config = SiteConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise BuildError(
            f"site config {key}",
            f"{err['msg']} in {path}",
            "use the keys default_llm_models_root, default_models_repo_host, default_user_root_dir, enroot_uri_rewrite",
        ) from None
    for key in ("default_llm_models_root", "default_models_repo_host", "default_user_root_dir"):
        value = getattr(config, key)
        if value is not None and not values.is_absolute_path(value):
            raise BuildError(
                f"site config {key}",
                f"is not an absolute path (got {values.shown(value)}) in {path}",
                "give the full path",
            )
    return config


# The values a build asks for that hold for every job of a site, and the site config key each
# is saved under (decision saved-site-answers). Per-job fields (test_cmd, work_dir, partition, ...)
# are never saved: a default for them would build the wrong job without a word.
SITE_WIDE = {
    "llm_models_root": "default_llm_models_root",
    "models_path": "default_models_repo_host",
}

_KEY_LINE = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*:")


def merged_site_config(existing: str, updates: dict[str, str], path: Path) -> str:
    """The site config's text with `updates` (site config keys) set: a key already there has
    its line replaced, a new one is appended; other lines and comments stay as they are.
    The result is checked as `load_site_config` reads it."""
    import json

    lines = existing.splitlines()
    for key, value in updates.items():
        # a JSON string is a YAML double-quoted scalar: any path stays one string
        line = f"{key}: {json.dumps(value)}"
        at = [i for i, ln in enumerate(lines) if (m := _KEY_LINE.match(ln)) and m["key"] == key]
        if at:
            lines[at[0]] = line
        else:
            lines.append(line)
    text = "\n".join(lines) + "\n"
    parse_site_config(text, path)
    return text
