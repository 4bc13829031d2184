"""The optional site config: a site's defaults for values a request leaves out (decision 4)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from trtllm_script_builder.errors import BuildError

ENV_VAR = "TRTLLM_SCRIPT_BUILDER_CONFIG"


# Plain: most builds have no config file, and a pydantic model costs more to build than a
# build; a file that exists is validated by a pydantic twin made when one is read.
@dataclass(kw_only=True)
class SiteConfig:
    default_llm_models_root: str | None = None
    default_models_repo_host: str | None = None
    default_user_root_dir: str | None = None
    enroot_uri_rewrite: bool = True


def _validate(data: dict[str, object]) -> SiteConfig:
    from pydantic import BaseModel, ConfigDict

    class SiteConfigModel(BaseModel):
        model_config = ConfigDict(extra="forbid")

        default_llm_models_root: str | None = None
        default_models_repo_host: str | None = None
        default_user_root_dir: str | None = None
        enroot_uri_rewrite: bool = True

    return SiteConfig(**SiteConfigModel.model_validate(data).model_dump())


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
    import yaml
    from pydantic import ValidationError

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise BuildError(
            "site config",
            f"cannot read {path} ({str(exc).splitlines()[0]})",
            "fix or remove the file",
        ) from None
    if not isinstance(data, dict):
        raise BuildError("site config", f"{path} does not hold a mapping", "write key: value lines")
    try:
        return _validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise BuildError(
            f"site config {key}",
            f"{err['msg']} in {path}",
            "use the keys default_llm_models_root, default_models_repo_host, default_user_root_dir, enroot_uri_rewrite",
        ) from None
