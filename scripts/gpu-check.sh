#!/usr/bin/env bash
# The GPU check, in one run: the versions and the GPU, the GPU tests (`make test-gpu`'s), and
# the GPU weight-sync benchmark. Each stage writes its log into OUT as it ends, and a line to
# OUT/summary.txt, so a run cut short still says how far it got.
#
#   bash scripts/gpu-check.sh [OUT]        # OUT: ./gpu-check by default
#
# PYTHON (python3) is the interpreter; TESTS_S (1500) and BENCH_S (600) bound each stage.
set -u
out=${1:-gpu-check}
py=${PYTHON:-python3}
mkdir -p "$out"
: > "$out/summary.txt"
export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}

stage() {  # stage NAME SECONDS COMMAND...: run it, log it, note its exit status
    local name=$1 limit=$2 started=$SECONDS
    shift 2
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc in $((SECONDS - started)) s" | tee -a "$out/summary.txt"
    return $rc
}

stage versions 120 "$py" -c '
import torch, vllm, transformers
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("vllm", vllm.__version__, "transformers", transformers.__version__)
for i in range(torch.cuda.device_count()):
    print("gpu", i, torch.cuda.get_device_name(i))
import agenthub.agents._vllm_compat as compat
print("vllm series", compat.VERSION)
' || exit 1
stage tests "${TESTS_S:-1500}" "$py" -m pytest -m gpu -q -p no:randomly -p no:cacheprovider \
    --junitxml "$out/tests.xml" tests
stage bench "${BENCH_S:-600}" "$py" benchmarks/weight_sync_gpu.py --out "$out"
tail -n 5 "$out/bench.log" >> "$out/summary.txt"
