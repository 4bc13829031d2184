"""Render one sbatch script with NeMo-Run's Slurm executor: the peer tool's side of the benchmark.

Run with an interpreter that has nemo_run installed: `python bench/nemo_render.py OUT_FILE`.
It asks for what our pytest example asks for: one node, one task, 8 GPUs by GRES, a container
image and mounts, and a pytest command.
"""

import sys
import tempfile

import nemo_run as run
from nemo_run.core.execution.slurm import SlurmBatchRequest


def main(out: str) -> None:
    job_dir = tempfile.mkdtemp()
    executor = run.SlurmExecutor(
        account="tsb",
        partition="gpu",
        nodes=1,
        ntasks_per_node=1,
        gres="gpu:8",
        time="02:00:00",
        container_image="registry.example.com#trtllm/tensorrt-llm:pytorch-x86_64-example",
        container_mounts=["/root:/root", "/repo:/repo", "/models:/scratch.trt_llm_data/llm-models"],
        tunnel=run.LocalTunnel(job_dir=job_dir),
    )
    executor.job_dir = job_dir
    request = SlurmBatchRequest(
        launch_cmd=["sbatch", "--parsable"],
        jobs=["llama_auto_test"],
        command_groups=[
            [
                "bash -c 'cd /repo/tests/integration/defs && pytest accuracy/test_llm_api_pytorch.py -v'"
            ]
        ],
        executor=executor,
        max_retries=0,
        extra_env={"LLM_MODELS_ROOT": "/scratch.trt_llm_data/llm-models"},
    )
    with open(out, "w") as fh:
        fh.write(request.materialize())


if __name__ == "__main__":
    main(sys.argv[1])
