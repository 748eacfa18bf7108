#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs on a machine with an NVIDIA GPU, from the project root of a built tree (build/), with
# PyTorch for the peers. First the forward correctness grid (test_forward,
# test_varlen, test_packed_qkv, test_backward: its recompute is the forward) once per forward
# kernel: Hopper's wgmma path ("wgmma": FLASHCL_FORWARD_PATH=nvidia-wgmma, the default where it
# applies), the mma.sync tensor-core path ("mma": nvidia-mma), the register-blocked portable one
# ("blocked") and the row-per-work-item one ("rows"). A path that fails its grid is not timed.
# Then, for each path of BENCH_PATHS (default "wgmma mma blocked") that
# passed, flashcl-bench (JSON) on FlashAttention's benchmark shapes (hidden 2048,
# batch x seqlen = 16k, seqlen 512..16k, D 64 and 128, causal and not, F16), PyTorch
# scaled_dot_product_attention (flash and cuDNN backends, scripts/sdpa_peer.py) on the same
# shapes, CLBlast SGEMM, and one table with the ratios (scripts/peer_table.py) in table.md
# (flashcl on the wall clock) and table-span.md (on ms_span, the clock of SDPA's CUDA events).
# Everything goes under $OUT (default ./gpu-out): ctest-<path>.txt, bench.jsonl, peer.jsonl.
# Knobs: SEQS, DIMS, REPS, PATHS ("wgmma mma blocked rows"), BENCH_PATHS, SKIP_TESTS=1, TESTS (ctest
# regex), TUNE=1 (flashcl-bench --tune first, into tune.jsonl: the stored winners are then used
# by the table), SWEEP="M,N,T ..." (FLASHCL_MMA_TILES settings timed at S 4096 into sweep.jsonl),
# WGMMA_SWEEP="N,S[,R] ..." (FLASHCL_WGMMA_TILES settings, likewise, into wgmma-sweep.jsonl),
# BLOCKED_SWEEP="M,N,WM,WN[,DK,NK,R] ..." (FLASHCL_BLOCKED_TILES settings, likewise, into
# blocked-sweep.jsonl), PTX=1 (the compiled programs of one D 64 and one D 128 case per path,
# i.e. the PTX NVIDIA's compiler made, as ptx-<path>.tgz for ptxas / nvdisasm elsewhere).
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-nvidia}
export FLASHCL_CACHE_DIR=${FLASHCL_CACHE_DIR:-$(mktemp -d)}
bench=build/tools/flashcl-bench

clinfo -l > "$out/clinfo.txt" 2>&1
build/tools/flashcl-info > "$out/info.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1

path_env() { [[ $1 == mma || $1 == wgmma ]] && echo "nvidia-$1" || echo "$1"; }
source scripts/gpu-grid.sh

passed=""
for path in ${PATHS:-wgmma mma blocked rows}; do
  grid_pass "$path" 8 "${TESTS:-^(test_forward|test_varlen|test_packed_qkv|test_backward)$}" \
    FLASHCL_FORWARD_PATH="$(path_env "$path")"
done
echo "paths that passed the grid:${passed:- none}"
timed=$(passed_among "${BENCH_PATHS:-wgmma mma blocked}")

if [[ "${PTX:-0}" == 1 ]]; then
  for path in $timed; do
    dir=$(mktemp -d)
    for d in 64 128; do
      FLASHCL_CACHE_DIR=$dir FLASHCL_FORWARD_PATH=$(path_env "$path") "$bench" --op forward --dtype f16 --b 1 \
        --sq 1024 --sk 1024 --hq 2 --hkv 2 --d $d --reps 1 --warmup 0 --check-rows 0 > /dev/null 2>>"$out/errors.log"
    done
    tar -czf "$out/ptx-$path.tgz" -C "$dir" .
  done
fi

if [[ "${TUNE:-0}" == 1 ]]; then
  for path in $timed; do
    FLASHCL_FORWARD_PATH=$(path_env "$path") "$bench" --tune --op forward --json > "$out/tune-$path.jsonl" 2>>"$out/errors.log"
    cat "$out/tune-$path.jsonl"
  done
fi

: > "$out/bench.jsonl"
: > "$out/peer.jsonl"
"$bench" --op sgemm --json --reps 5 >> "$out/bench.jsonl" 2>>"$out/errors.log"
for d in ${DIMS:-64 128}; do
  for s in ${SEQS:-512 1024 2048 4096 8192 16384}; do
    for causal in "" "--causal"; do
      b=$((16384 / s)); h=$((2048 / d))
      for path in $timed; do
        FLASHCL_FORWARD_PATH=$(path_env "$path") "$bench" --op forward --dtype f16 --b $b --sq $s --sk $s \
          --hq $h --hkv $h --d $d $causal --reps ${REPS:-10} --warmup 2 --check-rows 32 --json \
          >> "$out/bench.jsonl" 2>>"$out/errors.log"
      done
      python3 scripts/sdpa_peer.py --op forward --dtype f16 --b $b --sq $s --sk $s --hq $h --hkv $h \
        --d $d $causal >> "$out/peer.jsonl" 2>>"$out/errors.log"
    done
  done
done
python3 scripts/peer_table.py "$out/bench.jsonl" "$out/peer.jsonl" forward | tee "$out/table.md"
python3 scripts/peer_table.py "$out/bench.jsonl" "$out/peer.jsonl" forward span | tee "$out/table-span.md"

# Optional tile sweeps, S 4096, D 64 and 128, F16, causal and not: tile_sweep VARIABLE PATH FILE
# SETTINGS... times every setting of the tiles variable on that forward path into FILE (one
# JSON line per case, "tiles" added) and prints a line per case.
tile_sweep() {
  local var=$1 path=$2 file=$3 t d h causal
  shift 3
  : > "$file"
  for t in "$@"; do
    for d in 64 128; do
      h=$((2048 / d))
      for causal in "" "--causal"; do
        env "$var=$t" FLASHCL_FORWARD_PATH="$path" "$bench" --op forward --dtype f16 --b 4 --sq 4096 --sk 4096 \
          --hq $h --hkv $h --d $d $causal --reps 5 --warmup 1 --check-rows 16 --json 2>>"$out/errors.log" |
          sed "s/^{/{\"tiles\":\"$t\",/" >> "$file"
      done
    done
  done
  python3 - "$file" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['tiles']:>22} D {r['d']:>3} causal {str(r['causal']):5} {r['tflops']:7.2f} TFLOP/s ok {r['ok']} "
          f"{r['forward_path']}")
PY
}
if [[ -n "${SWEEP:-}" ]]; then
  tile_sweep FLASHCL_MMA_TILES nvidia-mma "$out/sweep.jsonl" $SWEEP
fi
if [[ -n "${WGMMA_SWEEP:-}" ]]; then
  tile_sweep FLASHCL_WGMMA_TILES nvidia-wgmma "$out/wgmma-sweep.jsonl" $WGMMA_SWEEP
fi
if [[ -n "${BLOCKED_SWEEP:-}" ]]; then
  tile_sweep FLASHCL_BLOCKED_TILES blocked "$out/blocked-sweep.jsonl" $BLOCKED_SWEEP
fi
