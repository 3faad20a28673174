#!/usr/bin/env bash
# GPU smoke test of the paper grid's code paths: one GPU, no network, at most 8 minutes (bench/gpu_smoke.py
# says what each step does). Figures go to OUT_DIR/gpu_smoke.json (default $OUT, else results/gpu_smoke),
# rewritten after every step, so a run cut at the limit keeps what it measured.
#
#   bench/gpu_smoke.sh [OUT_DIR] [--cpu-dry] [--skip STEPS]
#
# Without a GPU it says so and exits 2; --cpu-dry then runs every step on the CPU with tiny shapes.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-results/gpu_smoke}"
if [[ $# -gt 0 && "$1" != --* ]]; then out="$1"; shift; fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# as the workflow's GPU train jobs (workflow/rules/train.smk): PyTorch's allocator grows segments in place
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"
limit="${GPU_SMOKE_LIMIT_S:-470}"   # 8 minutes, less the start-up
status=0
timeout --signal=INT --kill-after=10 "$limit" python bench/gpu_smoke.py --out "$out" "$@" || status=$?
if [[ $status -eq 124 ]]; then echo "[gpu_smoke] stopped at the ${limit} s limit; figures so far in $out/gpu_smoke.json"; fi
exit $status
