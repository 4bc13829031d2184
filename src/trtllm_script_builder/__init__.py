"""trtllm-script-builder: TensorRT-LLM commands to correct Slurm/Docker scripts and job_spec.json."""

__version__ = "0.1.0"
