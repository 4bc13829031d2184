"""Probe a Slurm cluster into `slurm_env.json`.

`probe()` runs the cluster's tools on a host (`host.Here`, `host.OverSsh`, or a fake in
tests), `parse` holds the pure parsers, `render_text()` the text table; the click command
is in cli/probe.py.
"""

from __future__ import annotations

from trtllm_script_builder.process.probe.collect import (
    EXIT_CLEAN,
    EXIT_NO_TOOLS,
    EXIT_PARTIAL,
    probe,
)
from trtllm_script_builder.process.probe.render import render_text

__all__ = ["EXIT_CLEAN", "EXIT_NO_TOOLS", "EXIT_PARTIAL", "probe", "render_text"]
