#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs on a machine with an NVIDIA GPU, from the project root of a built tree (build/), with
# PyTorch for the peers: the projection tests on the GPU (test_qkvo and
# test_qkvo_backward, plain and with FLASHCL_GEMM=own; unless SKIP_TESTS=1), then
# flashcl-bench's CLBlast SGEMM ceiling and --op qkvo for one transformer layer (D 4096, 32
# heads, L 2048, F16 activations) with f16, i8, bf16 and f32 weights, plus the same weights on a
# shape small enough for the bench's float64 check (L 256, D 1024, 8 heads). SWEEP="TM,TN,TK,WM,WN[,VW]
# ..." (a default list; SWEEP= to skip) runs the layer with f16 and i8 weights under each
# FLASHCL_GEMM_TILES value. Output under $OUT (default ./gpu-out): gpu.txt, tests.txt,
# sgemm.jsonl, qkvo.jsonl, sweep.jsonl, errors.log. BUILD names the build folder (default
# build); REPS the timed runs (default 3). Bounded: every command runs under `timeout`.
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-nvidia}
export FLASHCL_CACHE_DIR=${FLASHCL_CACHE_DIR:-$(mktemp -d)}
build=${BUILD:-build}
bench=$build/tools/flashcl-bench
reps=${REPS:-3}
layer=(--dtype f16 --sq 2048 --d 4096 --hq 32 --reps "$reps" --warmup 1 --check-rows 0 --json)
small=(--dtype f16 --sq 256 --d 1024 --hq 8 --reps "$reps" --warmup 1 --json)

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
"$build/tools/flashcl-info" >> "$out/gpu.txt" 2>&1

if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
  : > "$out/tests.txt"
  for gemm in "" own; do
    for t in test_qkvo test_qkvo_backward; do
      start=$(date +%s)
      FLASHCL_GEMM=$gemm timeout 120 "$build/tests/$t" >> "$out/tests.txt" 2>&1
      echo "== $t FLASHCL_GEMM=${gemm:-default}: rc=$? in $(( $(date +%s) - start )) s" | tee -a "$out/tests.txt"
    done
  done
fi

timeout 120 "$bench" --op sgemm --reps "$reps" --warmup 1 --json > "$out/sgemm.jsonl" 2>>"$out/errors.log"
cat "$out/sgemm.jsonl"

: > "$out/qkvo.jsonl"
for w in f16 i8 bf16 f32; do
  timeout 120 "$bench" --op qkvo --weights $w "${layer[@]}" >> "$out/qkvo.jsonl" 2>>"$out/errors.log"
  timeout 120 "$bench" --op qkvo --weights $w "${small[@]}" >> "$out/qkvo.jsonl" 2>>"$out/errors.log"
done
cat "$out/qkvo.jsonl"

sweep=${SWEEP-"256,128,8,8,4 128,256,8,8,8 128,128,16,8,4 64,128,8,8,4 64,64,16,4,4 128,128,16,8,8"}
if [[ -n "$sweep" ]]; then
  : > "$out/sweep.jsonl"
  for t in $sweep; do
    for w in f16 i8; do
      FLASHCL_GEMM_TILES=$t timeout 60 "$bench" --op qkvo --weights $w "${layer[@]}" 2>>"$out/errors.log" |
        sed "s/^{/{\"gemm_tiles\":\"$t\",/" >> "$out/sweep.jsonl"
    done
  done
  cat "$out/sweep.jsonl"
fi
