"""The perf config the eval-wider-than-a-node fallback writes
(decisions multi-node-eval and aggregated-fallback-warning).

An eval whose tp*pp does not fit on one node runs as an aggregated perf-sanity case through
the repo's submit.py: one server config with the eval's parallelism and model, one small
client config, and the flat ``accuracy`` block with the eval's task.

``server_configs[0].model_name`` holds the model *path*: test_perf_sanity.py looks the name up
in its own model table and, when the name is not there, passes it to ``trtllm-serve`` as is.
Every other key of a server config is forwarded to the LLM API options, so nothing else is
added to it.
"""

from __future__ import annotations

from typing import Any

import yaml

FALLBACK_CLIENT_NAME = "accuracy_con1_iter1"


def eval_fallback_config(
    *,
    model_name: str,
    model_path: str,
    tp: int,
    pp: int,
    gpus_per_node: int,
    task: str,
    server_name: str,
) -> dict[str, Any]:
    """The aggregated perf config (a plain dict, in file order) for the eval fallback."""
    for what, value in (("tp", tp), ("pp", pp), ("gpus_per_node", gpus_per_node)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{what} must be a positive integer, not {value!r}")
    for what, text in (
        ("model_name", model_name),
        ("model_path", model_path),
        ("task", task),
        ("server_name", server_name),
    ):
        if not text:
            raise ValueError(f"{what} must not be empty")
    return {
        "metadata": {"model_name": model_name},
        "hardware": {"gpus_per_node": gpus_per_node},
        "server_configs": [
            {
                "name": server_name,
                "model_name": model_path,
                "tensor_parallel_size": tp,
                "pipeline_parallel_size": pp,
                "client_configs": [
                    {
                        "name": FALLBACK_CLIENT_NAME,
                        "concurrency": 1,
                        "iterations": 1,
                        "isl": 1024,
                        "osl": 1024,
                        "backend": "openai",
                    }
                ],
            }
        ],
        "accuracy": {
            "enable_accuracy_test": True,
            "tasks": task,
            "model": "local-completions",
        },
    }


def dump_yaml(cfg: dict[str, Any]) -> str:
    """Deterministic YAML text: keys in insertion order, block style, no aliases."""

    class _NoAliases(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return yaml.dump(
        cfg,
        Dumper=_NoAliases,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=100,
    )
