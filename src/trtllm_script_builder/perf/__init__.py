"""Perf-sanity (Category 4) building blocks: test ids, config sizing, the eval fallback config
and the one call out to the repo's ``jenkins/scripts/perf/local/submit.py``."""

from __future__ import annotations

from .fallback import dump_yaml, eval_fallback_config
from .sizing import PerfSizing, config_path_for, detect_kind, load_perf_config, size_config
from .submit_py import rewrite_remote_paths, run_submit_py, submit_py_args
from .testid import PerfTestId, is_perf_sanity_cmd, parse_perf_test_id

__all__ = [
    "PerfSizing",
    "PerfTestId",
    "config_path_for",
    "detect_kind",
    "dump_yaml",
    "eval_fallback_config",
    "is_perf_sanity_cmd",
    "load_perf_config",
    "parse_perf_test_id",
    "rewrite_remote_paths",
    "run_submit_py",
    "size_config",
    "submit_py_args",
]
