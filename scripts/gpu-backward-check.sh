#!/usr/bin/env bash
# Runs on the NVIDIA GPU machine, from the project root, after `source .devcarry/boot.sh`
# (see ../shared/device/prepare.sh): the backward tests on the GPU (unless SKIP_TESTS=1),
# then flashcl-bench --op backward and PyTorch scaled_dot_product_attention's backward
# (.devcarry/sdpa_peer.py: flash and cuDNN backends) on FlashAttention's benchmark shapes
# (hidden 2048, batch x seqlen = 16k, F16), in one run. Output under $OUT (default
# ./gpu-out): ctest.txt, bench.jsonl, peer.jsonl. SEQS, DIMS, REPS narrow the sweep;
# SWEEP="M,N M,N ..." adds a FLASHCL_BACKWARD_TILES sweep at S 2048 into sweep.jsonl.
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-nvidia}
export FLASHCL_CACHE_DIR=${FLASHCL_CACHE_DIR:-$(mktemp -d)}
bench=build/tools/flashcl-bench

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
  start=$(date +%s)
  ctest --test-dir build --output-on-failure -j4 -R "${CTEST_REGEX:-backward}" > "$out/ctest.txt" 2>&1
  echo "ctest rc=$? in $(( $(date +%s) - start )) s" | tee -a "$out/ctest.txt"
fi

: > "$out/bench.jsonl"
: > "$out/peer.jsonl"
for d in ${DIMS:-64 128}; do
  for s in ${SEQS:-1024 4096}; do
    for causal in "" "--causal"; do
      b=$((16384 / s)); h=$((2048 / d))
      "$bench" --op backward --dtype f16 --b $b --sq $s --sk $s --hq $h --hkv $h --d $d $causal \
        --reps ${REPS:-3} --warmup 1 --json >> "$out/bench.jsonl" 2>>"$out/errors.log"
      python3 .devcarry/sdpa_peer.py --op backward --dtype f16 --b $b --sq $s --sk $s --hq $h --hkv $h \
        --d $d $causal >> "$out/peer.jsonl" 2>>"$out/errors.log"
    done
  done
done
cat "$out/bench.jsonl" "$out/peer.jsonl"

if [[ -n "${SWEEP:-}" ]]; then
  : > "$out/sweep.jsonl"
  for t in $SWEEP; do
    for d in 64 128; do
      h=$((2048 / d))
      FLASHCL_BACKWARD_TILES=$t "$bench" --op backward --dtype f16 --b 8 --sq 2048 --sk 2048 --hq $h --hkv $h \
        --d $d --reps 3 --warmup 1 --json 2>>"$out/errors.log" | sed "s/^{/{\"tiles\":\"$t\",/" >> "$out/sweep.jsonl"
    done
  done
  cat "$out/sweep.jsonl"
fi
