#!/usr/bin/env bash
# Runs on the NVIDIA GPU machine, from the project root, after `source .devcarry/boot.sh`
# (see ../shared/device/prepare.sh): the decode and backward tests on the GPU (unless
# SKIP_TESTS=1; the decode tests a second time with FLASHCL_DECODE_SHUFFLE=0, the portable form
# that NVIDIA GPUs otherwise do not run), the copy bandwidth, then flashcl-bench --op decode and PyTorch
# scaled_dot_product_attention (.devcarry/sdpa_peer.py --op decode) on the decode issue's
# shapes, in one run: B in {1, 8, 32}, Hq 32, Hkv 8, D 128, cache 4k / 32k / 128k, F16, one
# query row. Output under $OUT (default ./gpu-out): ctest.txt, ctest-portable.txt, bench.jsonl,
# peer.jsonl.
# BS, LENS, REPS narrow the sweep (caches over MAX_CACHE_GB, default 8, are skipped);
# SWEEP="N,R,W[,G[,S[,M[,A[,T]]]]] ..." adds a FLASHCL_DECODE_TILES sweep at B 8, L 32k into sweep.jsonl;
# TUNE=1 runs flashcl-bench --tune --op decode --d 128 first (tune.jsonl): the stored winner is
# then what the timed shapes use.
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-nvidia}
export FLASHCL_CACHE_DIR=${FLASHCL_CACHE_DIR:-$(mktemp -d)}
bench=build/tools/flashcl-bench

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
  start=$(date +%s)
  ctest --test-dir build --output-on-failure -j4 -R "${CTEST_REGEX:-decode|backward}" > "$out/ctest.txt" 2>&1
  echo "ctest rc=$? in $(( $(date +%s) - start )) s" | tee -a "$out/ctest.txt"
  FLASHCL_DECODE_SHUFFLE=0 ctest --test-dir build --output-on-failure -R decode > "$out/ctest-portable.txt" 2>&1
  echo "ctest (FLASHCL_DECODE_SHUFFLE=0) rc=$? in $(( $(date +%s) - start )) s" | tee -a "$out/ctest-portable.txt"
fi

if [[ "${TUNE:-0}" == 1 ]]; then
  "$bench" --tune --op decode --d 128 --json > "$out/tune.jsonl" 2>>"$out/errors.log"
  cat "$out/tune.jsonl"
fi

: > "$out/bench.jsonl"
: > "$out/peer.jsonl"
for b in ${BS:-1 8 32}; do
  for l in ${LENS:-4096 32768 131072}; do
    # the bench builds the cache from host float arrays: skip caches over MAX_CACHE_GB (default 8)
    (( b * l * 8 * 128 * 4 <= ${MAX_CACHE_GB:-8} * 1073741824 )) || { echo "skip B $b L $l (cache over ${MAX_CACHE_GB:-8} GB)"; continue; }
    timeout ${CASE_LIMIT:-120} "$bench" --op decode --dtype f16 --b $b --sq 1 --sk $l --hq 32 --hkv 8 --d 128 --reps ${REPS:-10} \
      --warmup 2 --json >> "$out/bench.jsonl" 2>>"$out/errors.log"
    python3 .devcarry/sdpa_peer.py --op decode --dtype f16 --b $b --sk $l --hq 32 --hkv 8 --d 128 \
      >> "$out/peer.jsonl" 2>>"$out/errors.log"
  done
done
timeout 60 "$bench" --op copy --json >> "$out/bench.jsonl" 2>>"$out/errors.log"
cat "$out/bench.jsonl" "$out/peer.jsonl"

if [[ -n "${SWEEP:-}" ]]; then
  : > "$out/sweep.jsonl"
  for t in $SWEEP; do
    FLASHCL_DECODE_TILES=$t "$bench" --op decode --dtype f16 --b 8 --sq 1 --sk 32768 --hq 32 --hkv 8 --d 128 \
      --reps 10 --warmup 2 --json 2>>"$out/errors.log" | sed "s/^{/{\"tiles\":\"$t\",/" >> "$out/sweep.jsonl"
  done
  cat "$out/sweep.jsonl"
fi
