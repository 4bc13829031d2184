#!/bin/bash
# local Docker command for tiny_model (bench, local_docker)
# Written by trtllm-script-builder 0.1.0 from one request; rebuild rather than edit.
set -euo pipefail

# docker refuses -t without a terminal, so -it is added only when run from one.
tty=()
if [ -t 0 ] && [ -t 1 ]; then
  tty=(-it)
fi

exec docker run "${tty[@]}" \
  --rm \
  --net=host \
  --gpus '"device=0,1"' \
  --ipc=host \
  --ulimit memlock=-1 --ulimit stack=67108864 \
  --cap-add=SYS_PTRACE --cap-add=SYS_ADMIN --cap-add=DAC_READ_SEARCH \
  --security-opt seccomp=unconfined \
  --name tiny_model_bench_337030c3 \
  --mount type=bind,source=/ROOT/home,target=/ROOT/home \
  --mount type=bind,source=/ROOT/repo,target=/ROOT/repo \
  --mount type=bind,source=/ROOT/repo/models,target=/models,readonly \
  --env PROJECT_PATH=/ROOT/repo \
  --env LLM_MODELS_ROOT=/models \
  --env 'PREP_CMD=trtllm-bench --model /models/org/Tiny-Model prepare-dataset --output /tmp/d.json token-norm-dist --num-requests 4' \
  --env RUN_WORKDIR=/ROOT/repo \
  --env 'RUN_CMD=trtllm-bench --model org/Tiny-Model --model_path /models/org/Tiny-Model throughput --dataset /tmp/d.json --tp 2' \
  nvcr.io/test/trtllm:x86_64-1 \
  bash -c 'set -euo pipefail
cd "$PROJECT_PATH"
cd "$RUN_WORKDIR"
bash -c "$PREP_CMD"
bash -c "$RUN_CMD"
'
