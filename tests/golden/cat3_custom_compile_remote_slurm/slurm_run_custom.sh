#!/bin/bash
# Runs inside the container, once per task, for a custom job written by trtllm-script-builder.
# It reads CUSTOM_COMMAND, CUSTOM_ENV (shell-quoted KEY=VALUE words), CUSTOM_WORKDIR and
# llmSrcNode from the environment the batch script exported.
set -Eeuo pipefail
trap 'echo "slurm_run_custom.sh: line $LINENO: command failed: $BASH_COMMAND" >&2' ERR

if [ "${SLURM_JOB_NUM_NODES:-1}" = 1 ]; then
  # A leftover PMI/PMIX/SLURM environment makes mpi4py start a false MPI world (MPI_ERR_SPAWN).
  for v in $(compgen -e); do
    case "$v" in
      SLURM_PROCID|SLURM_LOCALID) ;;
      PMI*|MPI*|OMPI*|SLURM*) unset "$v" ;;
    esac
  done
fi
# The words were quoted when the script was built, so eval gives back the literal values.
if [ -n "${CUSTOM_ENV:-}" ]; then
  eval "export $CUSTOM_ENV"
fi

cd "${CUSTOM_WORKDIR:-$llmSrcNode}"
set +e
bash -c "$CUSTOM_COMMAND"
status=$?
echo "Rank${SLURM_PROCID:-0} Custom command finished with exit code $status"
exit "$status"
