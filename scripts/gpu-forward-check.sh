#!/usr/bin/env bash
# Runs on the NVIDIA GPU machine, from the project root, after `source .devcarry/boot.sh`
# (see ../shared/device/prepare.sh): the whole test suite on the GPU, then flashcl-bench
# (JSON) and PyTorch scaled_dot_product_attention (.devcarry/sdpa_peer.py: flash and cuDNN
# backends) on the same forward shapes, plus CLBlast SGEMM on the same device, then the
# varlen and packed-QKV forwards on an encoder-style batch. Everything is
# written under $OUT (default ./gpu-out); the tests' log is ctest.txt, the figures bench.jsonl
# and peer.jsonl.
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-nvidia}
export FLASHCL_CACHE_DIR=${FLASHCL_CACHE_DIR:-$(mktemp -d)}
bench=build/tools/flashcl-bench

clinfo -l > "$out/clinfo.txt" 2>&1
build/tools/flashcl-info > "$out/info.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1

if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
  start=$(date +%s)
  ctest --test-dir build --output-on-failure -j4 ${CTEST_ARGS:-} > "$out/ctest.txt" 2>&1
  echo "ctest rc=$? in $(( $(date +%s) - start )) s" | tee -a "$out/ctest.txt"
fi

# The forward shapes of FlashAttention's benchmark (hidden 2048, batch x seqlen = 16k), F16.
: > "$out/bench.jsonl"
: > "$out/peer.jsonl"
"$bench" --op sgemm --json --reps 5 >> "$out/bench.jsonl" 2>>"$out/errors.log"
for d in ${DIMS:-64 128}; do
  for s in ${SEQS:-1024 4096}; do
    for causal in "" "--causal"; do
      b=$((16384 / s)); h=$((2048 / d))
      "$bench" --op forward --dtype f16 --b $b --sq $s --sk $s --hq $h --hkv $h --d $d $causal \
        --reps ${REPS:-5} --warmup 1 --check-rows 32 --json >> "$out/bench.jsonl" 2>>"$out/errors.log"
      python3 .devcarry/sdpa_peer.py --op forward --dtype f16 --b $b --sq $s --sk $s --hq $h --hkv $h \
        --d $d $causal >> "$out/peer.jsonl" 2>>"$out/errors.log"
    done
  done
done
cat "$out/bench.jsonl" "$out/peer.jsonl"

# Varlen and packed fused-QKV (BERT-style encoder batch: 64 sequences of random length
# 1..2048, H 12, D 64, F16), bidirectional and causal.
for op in varlen packed_qkv; do
  for causal in "" "--causal"; do
    "$bench" --op $op --dtype f16 --seqs 64 --max-len 2048 --hq 12 --d 64 $causal --reps ${REPS:-5} \
      --warmup 1 --check-rows 32 --json >> "$out/bench.jsonl" 2>>"$out/errors.log"
  done
done

# Optional tile sweep (SWEEP="M,N,R M,N,R ..."): the forward at S=4096, D 64 and 128, F16,
# per FLASHCL_FORWARD_TILES setting, into sweep.jsonl (each line tagged with its tiles).
if [[ -n "${SWEEP:-}" ]]; then
  : > "$out/sweep.jsonl"
  for t in $SWEEP; do
    for d in 64 128; do
      h=$((2048 / d))
      FLASHCL_FORWARD_TILES=$t "$bench" --op forward --dtype f16 --b 4 --sq 4096 --sk 4096 --hq $h --hkv $h \
        --d $d --reps 3 --warmup 1 --check-rows 16 --json 2>>"$out/errors.log" | sed "s/^{/{\"tiles\":\"$t\",/" >> "$out/sweep.jsonl"
    done
  done
  cat "$out/sweep.jsonl"
fi
