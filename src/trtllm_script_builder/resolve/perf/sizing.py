"""How many GPUs and nodes a perf-sanity job gets: submit.py's hardware arithmetic.

* aggregated: ``tp*pp*cp`` of the matching ``server_configs`` entry;
  ``nodes = ceil(gpus / gpus_per_node)``;
* ctx_only: the same arithmetic on ``worker_config.ctx`` of a disaggregated config;
* gen_only_no_context (an ``aggr-`` id): the same on ``worker_config.gen`` (its
  ``world_size`` if set), which must be the one gen server;
* disaggregated: ``nodes = num_ctx*ceil(ctx_gpus/gpn) + num_gen*ceil(gen_gpus/gpn)``,
  ``gpus = num_ctx*ctx_gpus + num_gen*gen_gpus`` (each server gets whole nodes);
  ``gen_only`` with a ``benchmark.mode`` containing ``gen_only_no_context`` runs no ctx server.

In every case submit.py allocates whole nodes: ``#SBATCH --ntasks=nodes*gpus_per_node`` and
``--ntasks-per-node=gpus_per_node``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.datafile import DataError, load_yaml, yaml_loader_class
from trtllm_script_builder.resolve.perf.testid import DISAGG_MODES, PerfKind, PerfTestId

PERF_SANITY_DIR = Path("tests") / "scripts" / "perf-sanity"
NO_CONTEXT_MARK = "gen_only_no_context"
MAX_CONFIG_CHARS = 1 << 20  # TensorRT-LLM's perf-sanity configs are a few kilobytes
_PARALLEL_KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size")


@dataclass(frozen=True)
class PerfSizing:
    gpus: int  # world size: the sum of tp*pp*cp over the servers that run
    nodes: int
    gpus_per_node: int
    total_gpus: int  # nodes * gpus_per_node: what submit.py allocates
    ntasks_per_node: int
    mode: str  # aggr, ctx_only, e2e, gen_only or gen_only_no_context


def load_perf_config(path: Path | str, *, field: str = "perf_config_yaml") -> dict[str, Any]:
    """Read a perf-sanity config YAML (anchors and aliases allowed); it must be a mapping."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BuildError(field, f"perf config {p} is not UTF-8 text", "save it as UTF-8") from None
    except FileNotFoundError:
        raise BuildError(
            field,
            f"perf config {p} does not exist",
            "give the path of an existing perf-sanity config YAML",
        ) from None
    except OSError as exc:
        raise BuildError(
            field, f"perf config {p} cannot be read ({exc.strerror})", "make the file readable"
        ) from None
    if len(text) > MAX_CONFIG_CHARS:
        raise BuildError(
            field,
            f"perf config {p} holds {len(text)} characters, more than {MAX_CONFIG_CHARS}",
            "give a perf-sanity config YAML",
        )
    try:
        data = load_yaml(text, yaml_loader_class(aliases=True))
    except DataError as exc:
        raise BuildError(field, f"perf config {p} is refused: {exc}", "fix the YAML") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise BuildError(
            field, f"perf config {p} is not valid YAML{at}", "fix the YAML syntax"
        ) from None
    if not isinstance(data, dict):
        raise BuildError(
            field,
            f"perf config {p} is not a YAML mapping",
            "use a perf-sanity config with hardware and server_configs or worker_config",
        ) from None
    return data


def config_path_for(repo_root: Path, tid: PerfTestId) -> Path:
    """Where submit.py reads the config of a test id (its default folders)."""
    return repo_root / PERF_SANITY_DIR / tid.config_folder / f"{tid.config_base}.yaml"


def _where(source: str | None) -> str:
    return f" in {source}" if source else ""


def _int_value(value: Any, what: str, *, minimum: int, field: str, source: str | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        bound = "a positive" if minimum >= 1 else "a non-negative"
        raise BuildError(
            field,
            f"{what} is {value!r}{_where(source)}, not {bound} integer",
            f"set {what} to {bound} integer",
        )
    return value


def server_gpus(
    server: Mapping[str, Any],
    what: str,
    *,
    field: str = "perf_config_yaml",
    source: str | None = None,
) -> int:
    """tp*pp*cp of one server (each default 1), as submit.py multiplies them: a `world_size`
    key is not read (the server config of an AutoDeploy run names one; submit.py launches
    tp*pp*cp tasks whatever it says)."""
    present = {k: server.get(k) for k in _PARALLEL_KEYS if server.get(k) is not None}
    gpus = 1
    for key, value in present.items():
        gpus *= _int_value(value, f"{what}.{key}", minimum=1, field=field, source=source)
    return gpus


def server_names(cfg: Mapping[str, Any]) -> list[str]:
    """The `name`s of an aggregated config's server_configs, in file order."""
    servers = cfg.get("server_configs")
    if not isinstance(servers, list):
        return []
    return [str(s["name"]) for s in servers if isinstance(s, Mapping) and s.get("name")]


def detect_kind(
    cfg: Mapping[str, Any],
    benchmark_mode: str | None = None,
    *,
    field: str = "perf_config_yaml",
    source: str | None = None,
) -> PerfKind:
    """The config's type from its content, as submit.py decides for --config-file."""
    if isinstance(cfg.get("worker_config"), Mapping):
        return "ctx_only" if benchmark_mode == "ctx_only" else "disagg"
    if isinstance(cfg.get("server_configs"), list):
        if benchmark_mode not in (None, ""):
            raise BuildError(
                field,
                f"benchmark mode {benchmark_mode!r} given for an aggregated config{_where(source)}",
                "drop the benchmark mode: it applies to disaggregated configs only",
            )
        return "aggr"
    raise BuildError(
        field,
        f"the perf config{_where(source)} has neither worker_config "
        "(disaggregated) nor server_configs (aggregated)",
        "use a perf-sanity config from tests/scripts/perf-sanity/",
    )


def _gpus_per_node(cfg: Mapping[str, Any], field: str, source: str | None) -> int:
    hardware = cfg.get("hardware")
    if not isinstance(hardware, Mapping) or hardware.get("gpus_per_node") is None:
        raise BuildError(
            field,
            f"hardware.gpus_per_node is missing{_where(source)}",
            "add hardware: {gpus_per_node: <GPUs per node>} to the config (submit.py requires it)",
        )
    return _int_value(
        hardware["gpus_per_node"], "hardware.gpus_per_node", minimum=1, field=field, source=source
    )


def _one_server(gpus: int, gpn: int, mode: str) -> PerfSizing:
    return _whole_nodes(gpus, math.ceil(gpus / gpn), gpn, mode)


def _whole_nodes(gpus: int, nodes: int, gpn: int, mode: str) -> PerfSizing:
    """submit.py allocates whole nodes, one task per GPU."""
    return PerfSizing(gpus, nodes, gpn, total_gpus=nodes * gpn, ntasks_per_node=gpn, mode=mode)


def _worker(cfg: Mapping[str, Any], role: str, field: str, source: str | None) -> Mapping[str, Any]:
    workers = cfg.get("worker_config")
    worker = workers.get(role) if isinstance(workers, Mapping) else None
    if not isinstance(worker, Mapping):
        raise BuildError(
            field,
            f"worker_config.{role} is missing{_where(source)}",
            f"add the {role} worker's settings under worker_config.{role}",
        )
    return worker


def size_config(
    cfg: Mapping[str, Any],
    *,
    kind: PerfKind | None,
    server_name: str | None = None,
    benchmark_mode: str | None = None,
    name_field: str = "test_cmd",
    config_field: str = "perf_config_yaml",
    source: str | None = None,
) -> PerfSizing:
    """Size a perf-sanity config the way submit.py does.

    `kind` None detects it from the content (the --config-file path). `server_name` selects
    the aggregated server config; `benchmark_mode` is the disaggregated mode (default e2e).
    Errors name `name_field` when the selection (server name, mode) is wrong and `config_field`
    when the config is; `source` (a path) is quoted in the messages.
    """
    if kind is None:
        kind = detect_kind(cfg, benchmark_mode, field=config_field, source=source)
    has_servers = isinstance(cfg.get("server_configs"), list)
    has_workers = isinstance(cfg.get("worker_config"), Mapping)
    if not has_servers and not has_workers:
        detect_kind(cfg, field=config_field, source=source)  # raises the "neither" error
    if kind == "aggr" and not has_servers:
        raise BuildError(
            config_field,
            f"the config{_where(source)} is disaggregated "
            "(worker_config) but the selection is an aggregated one",
            "use a disagg-<e2e|gen_only>-<config> or aggr-ctx_only-<config> id, "
            "or an aggregated config",
        )
    if kind != "aggr" and not has_workers:
        raise BuildError(
            config_field,
            f"the config{_where(source)} is aggregated "
            f"(server_configs) but the selection is {kind}",
            "use an aggr-<config>-<server> id or a disaggregated config",
        )
    gpn = _gpus_per_node(cfg, config_field, source)

    if kind == "aggr":
        names = server_names(cfg)
        listed = ", ".join(names) if names else "none"
        if not server_name:
            raise BuildError(
                name_field,
                f"no server config named for the aggregated config"
                f"{_where(source)} (server configs: {listed})",
                "name one of them (aggr-<config>-<server> or the test name)",
            )
        for server in cfg["server_configs"]:
            if isinstance(server, Mapping) and server.get("name") == server_name:
                gpus = server_gpus(
                    server, f"server_configs[{server_name}]", field=config_field, source=source
                )
                return _one_server(gpus, gpn, "aggr")
        raise BuildError(
            name_field,
            f"server config {server_name!r} is not"
            f"{_where(source) or ' in the config'} (server configs: {listed})",
            "name one of the listed server configs",
        )

    if kind == "ctx_only":
        ctx = _worker(cfg, "ctx", config_field, source)
        return _one_server(
            server_gpus(ctx, "worker_config.ctx", field=config_field, source=source),
            gpn,
            "ctx_only",
        )
    if kind == NO_CONTEXT_MARK:
        gen = _worker(cfg, "gen", config_field, source)
        if cfg["hardware"].get("num_gen_servers") != 1:
            raise BuildError(
                config_field,
                f"{NO_CONTEXT_MARK} runs one gen server, but hardware.num_gen_servers is "
                f"{cfg['hardware'].get('num_gen_servers')!r}{_where(source)}",
                "use a config with num_gen_servers: 1, or a disagg-gen_only id",
            )
        if gen.get("world_size"):  # submit.py reads it here, and only here
            gpus = _int_value(
                gen["world_size"], "worker_config.gen.world_size", minimum=1,
                field=config_field, source=source,
            )  # fmt: skip
        else:
            gpus = server_gpus(gen, "worker_config.gen", field=config_field, source=source)
        return _one_server(gpus, gpn, NO_CONTEXT_MARK)

    mode = benchmark_mode or "e2e"
    if mode not in DISAGG_MODES:
        raise BuildError(
            name_field,
            f"benchmark mode {mode!r} is not one of "
            f"{', '.join(DISAGG_MODES)} for a disaggregated config",
            "use e2e or gen_only (ctx_only runs the ctx worker alone)",
        )
    hardware = cfg["hardware"]
    counts: dict[str, int] = {}
    for key in ("num_ctx_servers", "num_gen_servers"):
        if hardware.get(key) is None:
            raise BuildError(
                config_field,
                f"hardware.{key} is missing{_where(source)}",
                f"add hardware.{key} (submit.py requires it for disaggregated configs)",
            )
        counts[key] = _int_value(
            hardware[key], f"hardware.{key}", minimum=0, field=config_field, source=source
        )
    num_ctx, num_gen = counts["num_ctx_servers"], counts["num_gen_servers"]
    benchmark = cfg.get("benchmark")
    bench_mode = benchmark.get("mode") if isinstance(benchmark, Mapping) else None
    if mode == "gen_only" and NO_CONTEXT_MARK in str(bench_mode or ""):
        num_ctx, mode = 0, NO_CONTEXT_MARK
    gpus = nodes = 0
    for role, count in (("ctx", num_ctx), ("gen", num_gen)):
        if count == 0:
            continue
        per_server = server_gpus(
            _worker(cfg, role, config_field, source),
            f"worker_config.{role}",
            field=config_field,
            source=source,
        )
        gpus += count * per_server
        nodes += count * math.ceil(per_server / gpn)
    if gpus == 0:
        raise BuildError(
            config_field,
            f"the config{_where(source)} runs no server "
            f"(num_ctx_servers {num_ctx}, num_gen_servers {num_gen})",
            "set hardware.num_gen_servers (and num_ctx_servers) to at least 1",
        )
    return _whole_nodes(gpus, nodes, gpn, mode)
