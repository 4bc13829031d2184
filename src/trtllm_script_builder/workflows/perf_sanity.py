"""perf_sanity: a perf config run by the repo's submit.py, which writes the launch script
(Category 4); the plan is resolve/perf's, the results process/perf_sanity.py's."""

from __future__ import annotations

from trtllm_script_builder.resolve.job import SUBMIT_PY_PATTERNS
from trtllm_script_builder.resolve.workflow import Workflow

PERF_SANITY = Workflow(
    name="perf_sanity",
    commands=(),  # perf_config_yaml or a perf-sanity test id, checked by the plan
    infer_rank=4,
    infers=lambda req: bool(req.perf_config_yaml and not req.test_cmd),
    suffix="perf_sanity",
    category=4,
    patterns=SUBMIT_PY_PATTERNS,
    aliases=("perf", "submit.py", "4"),
    submit_py=lambda req: True,
)
