#!/bin/bash
# local Docker command for tiny (pytest, local_docker)
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
  --gpus '"device=0,1,2,3"' \
  --ipc=host \
  --ulimit memlock=-1 --ulimit stack=67108864 \
  --cap-add=SYS_PTRACE --cap-add=SYS_ADMIN --cap-add=DAC_READ_SEARCH \
  --security-opt seccomp=unconfined \
  --name tiny_auto_test_337030c3 \
  --mount type=bind,source=/ROOT/home,target=/ROOT/home \
  --mount type=bind,source=/ROOT/repo,target=/ROOT/repo \
  --mount type=bind,source=/ROOT/repo/models,target=/models,readonly \
  --mount type=bind,source=/ROOT/work,target=/ROOT/work \
  --env PROJECT_PATH=/ROOT/repo \
  --env LLM_MODELS_ROOT=/models \
  --env 'PYTEST_ADDOPTS=--timeout=3600 --timeout-method=thread --output-dir=/ROOT/work -o junit_logging=out-err' \
  --env RUN_WORKDIR=/ROOT/repo/tests/integration/defs \
  --env 'RUN_CMD=pytest accuracy/test_tiny.py::TestTiny::test_four[tp4] -v' \
  --env JUNIT_FILE=/ROOT/work/tiny_auto_test_junit.xml \
  --env TRTLLM_USE_PRECOMPILED \
  nvcr.io/test/trtllm:x86_64-1 \
  bash -c 'set -euo pipefail
cd "$PROJECT_PATH"
pip install --retries 10 --timeout 60 -e . 2>&1 | tail -5
pip install --retries 10 --timeout 60 -r requirements-dev.txt 2>&1 | tail -5
python3 -c "import tensorrt_llm; print(\"TensorRT-LLM\", tensorrt_llm.__version__)" || {
  echo "ERROR: TRT-LLM installation verification failed"
  exit 1
}
cd "$RUN_WORKDIR"
rm -f "$JUNIT_FILE"
bash -c "$RUN_CMD \"\$@\"" bash "--junitxml=$JUNIT_FILE"
'
