#!/bin/bash
#SBATCH --nodes=2
#SBATCH --segment=2
#SBATCH --ntasks=8
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --partition=gb
#SBATCH --time=02:00:00
#SBATCH --account=acct
#SBATCH -J tiny_cfg_perf
#SBATCH -o /lustre/rtester/TensorRT-LLM/work_dirs/work/slurm-%j.out
export llmSrcNode='/lustre/rtester/TensorRT-LLM'
export jobWorkspace='/lustre/rtester/TensorRT-LLM/work_dirs/work'
export runScript='/lustre/rtester/TensorRT-LLM/jenkins/scripts/perf/local/slurm_run.sh'
export installScript='/lustre/rtester/TensorRT-LLM/jenkins/scripts/perf/local/slurm_install.sh'
export configYamlPath='/lustre/rtester/TensorRT-LLM/tests/scripts/perf-sanity/aggregated/tiny_cfg.yaml'
export BUILD_WHEEL=false
export INSTALL_MODE='source'
export WHEEL_PATH=''
export CAPTURE_NSYS=false
export NSYS_PREFIX=""
export LLM_API_LAUNCH="/lustre/rtester/TensorRT-LLM/tensorrt_llm/llmapi/trtllm-llmapi-launch"
export PYTEST_COMMON_VARS="LLM_ROOT='/lustre/rtester/TensorRT-LLM' LLM_BACKEND_ROOT='/lustre/rtester/TensorRT-LLM/triton_backend' LLM_MODELS_ROOT='/models' AGG_CONFIG_FOLDER='tests/scripts/perf-sanity/aggregated' DISAGG_CONFIG_FOLDER='tests/scripts/perf-sanity/disaggregated' "
export PYTEST_COMMAND="pytest -v perf/test_perf_sanity.py --test-prefix=/lustre/rtester/TensorRT-LLM/tests/integration/defs --test-list=/lustre/rtester/TensorRT-LLM/work_dirs/work/test_list.txt --output-dir=/lustre/rtester/TensorRT-LLM/work_dirs/work -o junit_logging=out-err"
export WORKER_ENV_VARS="TLLM_PROFILE_START_STOP='' FLASHINFER_JIT_DIR=/tmp/flashinfer_jit_cache_\${SLURM_LOCALID} HF_HOME=/tmp/hf_home "
export SERVER_ENV_VARS=""
export pytestCommand="$SERVER_ENV_VARS $WORKER_ENV_VARS $PYTEST_COMMON_VARS $LLM_API_LAUNCH $PYTEST_COMMAND --junitxml=/lustre/rtester/TensorRT-LLM/work_dirs/work/report.xml"
export gpusPerNode=4
export gpusPerNodePerServer=4
export totalNodes=2
export totalGpus=8
export testOutputDir=/lustre/rtester/TensorRT-LLM/work_dirs/work/aggr-tiny_cfg-tiny_tp2pp3

srunArgs=(
  "--container-name=aggr_test-${SLURM_JOB_ID}"
  "--container-image=nvcr.io#test/trtllm:aarch64-1"
  "--container-workdir=/lustre/rtester/TensorRT-LLM/work_dirs/work"
  "--container-mounts=/home/rtester:/home/rtester,/lustre/rtester/TensorRT-LLM:/lustre/rtester/TensorRT-LLM,/lustre/ckpt/tiny:/models:ro,/lustre/rtester/TensorRT-LLM/work_dirs/work:/lustre/rtester/TensorRT-LLM/work_dirs/work"
  "--container-env=NVIDIA_IMEX_CHANNELS"
  "--mpi=pmix"
  "--container-env=pytestCommand"
)

cleanup_on_failure() {
    echo "Error: $1"
    scancel ${SLURM_JOB_ID}
    exit 1
}
mkdir -p $jobWorkspace
mkdir -p "$testOutputDir"
echo "Starting aggregated test..."
world_size=${world_size:-$((totalNodes * gpusPerNodePerServer))}
if ! srun "${srunArgs[@]}" --mpi=pmix --kill-on-bad-exit=1 -N $totalNodes \
    --ntasks=$world_size --ntasks-per-node=$gpusPerNodePerServer $runScript; then
    cleanup_on_failure "Aggregated test failed. See slurm-${SLURM_JOB_ID}.out"
fi
echo "Aggregated test completed successfully"
echo "Total runtime: $SECONDS seconds"