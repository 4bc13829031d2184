"""The workflows, one module each, registered in `model.registry.WORKFLOWS` when imported.

Importing this package is what makes a request's `workflow_type` known: every entry point
(the build pipeline, build-many, the CLI) imports it.
"""

from trtllm_script_builder.model.registry import WORKFLOWS
from trtllm_script_builder.resolve.workflow import register
from trtllm_script_builder.workflows import bench, custom, eval, perf_sanity, pytest

# The schema lists them in this order.
for _wf in (pytest.PYTEST, eval.EVAL, bench.BENCH, custom.CUSTOM, perf_sanity.PERF_SANITY):
    register(_wf)

__all__ = ["WORKFLOWS"]
