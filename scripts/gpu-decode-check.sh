#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs on a machine with an NVIDIA GPU, from the project root of a built tree (build/), with
# PyTorch for the peers. First the decode correctness grid (test_decode, and
# test_tuning) once per decode form: the tensor-core one ("mma": "nvidia-mma", the default
# there), the team-shuffle one ("shuffle": FLASHCL_DECODE_PATH=portable) and the portable one
# ("portable": FLASHCL_DECODE_SHUFFLE=0); the first pass also runs the backward tests (CTEST_REGEX
# overrides its regex). A form that fails its grid is not timed. Then, for each form of
# BENCH_PATHS (default "mma shuffle") that passed, flashcl-bench --op decode and PyTorch
# scaled_dot_product_attention (scripts/sdpa_peer.py --op decode) on the decode issue's shapes:
# B in {1, 8, 32}, Hq 32, Hkv 8, D 128, cache 4k / 32k / 128k, F16, one query row; the copy
# bandwidth; one table with the ratios (scripts/peer_table.py decode) in table.md, and the same
# on ms_span (the clock of SDPA's CUDA events) in table-span.md. Each bench
# line also has ms_back_to_back (B2B calls, default 20, without a wait between them): against
# ms, the cost of the launches and the wait.
# Output under $OUT (default ./gpu-out): ctest-<form>.txt, bench.jsonl, peer.jsonl, table.md.
# LAYOUTS="bshd bhsd" also times caches stored [B, Hkv, L, D] (SDPA's storage, passed as views;
# their columns say bhsd).
# Knobs: PATHS ("mma shuffle portable"), BENCH_PATHS, SKIP_TESTS=1, BS, LENS, REPS (caches over
# MAX_CACHE_GB, default 8, are skipped); SWEEP="N,R,W[,G[,S[,M[,A[,T]]]]] ..." adds a
# FLASHCL_DECODE_TILES sweep at B 8, L 32k into sweep.jsonl; TUNE=1 runs flashcl-bench --tune
# --op decode --d 128 first (tune.jsonl): the stored winner is then what the timed shapes use.
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-nvidia}
export FLASHCL_CACHE_DIR=${FLASHCL_CACHE_DIR:-$(mktemp -d)}
bench=build/tools/flashcl-bench

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
build/tools/flashcl-info > "$out/info.txt" 2>&1

# the env arguments that select decode form $1
form_env() {
  case $1 in
    mma) echo "-u FLASHCL_DECODE_PATH -u FLASHCL_DECODE_SHUFFLE" ;;
    shuffle) echo "-u FLASHCL_DECODE_SHUFFLE FLASHCL_DECODE_PATH=portable" ;;
    portable) echo "-u FLASHCL_DECODE_PATH FLASHCL_DECODE_SHUFFLE=0" ;;
    *) echo "unknown decode form $1" >&2; return 2 ;;
  esac
}
source scripts/gpu-grid.sh

passed=""
regex="${CTEST_REGEX:-decode|backward|tuning}" # the first form's pass; then decode and tuning only
for form in ${PATHS:-mma shuffle portable}; do
  # shellcheck disable=SC2046 # form_env's words are separate env arguments
  grid_pass "$form" 4 "$regex" $(form_env "$form")
  regex="^(test_decode|test_tuning)$"
done
echo "forms that passed the grid:${passed:- none}"
timed=$(passed_among "${BENCH_PATHS:-mma shuffle}")

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
    for form in $timed; do
      for layout in ${LAYOUTS:-bshd}; do
        # shellcheck disable=SC2046
        env $(form_env "$form") timeout ${CASE_LIMIT:-120} "$bench" --op decode --dtype f16 --b $b --sq 1 --sk $l \
          --hq 32 --hkv 8 --d 128 --layout $layout --reps ${REPS:-10} --warmup 2 --back-to-back ${B2B:-20} --json \
          >> "$out/bench.jsonl" 2>>"$out/errors.log"
      done
    done
    python3 scripts/sdpa_peer.py --op decode --dtype f16 --b $b --sk $l --hq 32 --hkv 8 --d 128 \
      >> "$out/peer.jsonl" 2>>"$out/errors.log"
  done
done
timeout 60 "$bench" --op copy --json >> "$out/bench.jsonl" 2>>"$out/errors.log"
python3 scripts/peer_table.py "$out/bench.jsonl" "$out/peer.jsonl" decode > "$out/table.md"
python3 scripts/peer_table.py "$out/bench.jsonl" "$out/peer.jsonl" decode span > "$out/table-span.md"
cat "$out/table.md" "$out/table-span.md"
grep '"op":"copy"' "$out/bench.jsonl"

if [[ -n "${SWEEP:-}" ]]; then
  : > "$out/sweep.jsonl"
  for t in $SWEEP; do
    FLASHCL_DECODE_TILES=$t "$bench" --op decode --dtype f16 --b 8 --sq 1 --sk 32768 --hq 32 --hkv 8 --d 128 \
      --reps 10 --warmup 2 --json 2>>"$out/errors.log" | sed "s/^{/{\"tiles\":\"$t\",/" >> "$out/sweep.jsonl"
  done
  cat "$out/sweep.jsonl"
fi
