#!/bin/bash
#SBATCH --nodes=2
#SBATCH --segment=2
#SBATCH --ntasks=8
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --partition=gb
#SBATCH --time=02:00:00
#SBATCH --account=acct
#SBATCH -J tiny_cfg_perf
#SBATCH -o /ROOT/work/slurm-%j.out
export llmSrcNode='/ROOT/repo'
export jobWorkspace='/ROOT/work'
export runScript='/ROOT/repo/jenkins/scripts/perf/local/slurm_run.sh'
export installScript='/ROOT/repo/jenkins/scripts/perf/local/slurm_install.sh'
export configYamlPath='/ROOT/repo/tests/scripts/perf-sanity/aggregated/tiny_cfg.yaml'
export BUILD_WHEEL=false
export INSTALL_MODE='source'
export WHEEL_PATH=''
export CAPTURE_NSYS=false
export NSYS_PREFIX=""
export LLM_API_LAUNCH="/ROOT/repo/tensorrt_llm/llmapi/trtllm-llmapi-launch"
export PYTEST_COMMON_VARS="LLM_ROOT='/ROOT/repo' LLM_BACKEND_ROOT='/ROOT/repo/triton_backend' LLM_MODELS_ROOT='/models' AGG_CONFIG_FOLDER='tests/scripts/perf-sanity/aggregated' DISAGG_CONFIG_FOLDER='tests/scripts/perf-sanity/disaggregated' "
export PYTEST_COMMAND="pytest -v perf/test_perf_sanity.py --test-prefix=/ROOT/repo/tests/integration/defs --test-list=/ROOT/work/test_list.txt --output-dir=/ROOT/work -o junit_logging=out-err"
export WORKER_ENV_VARS="TLLM_PROFILE_START_STOP='' FLASHINFER_JIT_DIR=/tmp/flashinfer_jit_cache_\${SLURM_LOCALID} HF_HOME=/tmp/hf_home "
export SERVER_ENV_VARS=""
export pytestCommand="$SERVER_ENV_VARS $WORKER_ENV_VARS $PYTEST_COMMON_VARS $LLM_API_LAUNCH $PYTEST_COMMAND --junitxml=/ROOT/work/report.xml"
export gpusPerNode=4
export gpusPerNodePerServer=4
export totalNodes=2
export totalGpus=8
export testOutputDir=/ROOT/work/aggr-tiny_cfg-tiny_tp2pp3

srunArgs=(
  "--container-name=aggr_test-${SLURM_JOB_ID}"
  "--container-image=nvcr.io#test/trtllm:aarch64-1"
  "--container-workdir=/ROOT/work"
  "--container-mounts=/ROOT/home:/ROOT/home,/ROOT/repo:/ROOT/repo,/ROOT/repo/models:/models:ro,/ROOT/work:/ROOT/work"
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