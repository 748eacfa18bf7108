#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs on a machine with an NVIDIA GPU, from the project root of a built tree (build/), with
# PyTorch for the peers. First the backward correctness grid (test_backward,
# test_varlen_backward, test_qkvo_backward) once per backward kernel: the mma.sync tensor-core
# path ("mma": FLASHCL_BACKWARD_PATH=nvidia-mma), Hopper's wgmma form ("wgmma":
# FLASHCL_BACKWARD_PATH=nvidia-wgmma, the default on compute capability 9.0; its tests fail at
# once elsewhere), the register-blocked one that other GPUs run
# (FLASHCL_BACKWARD_PATH=blocked) and the row-per-work-item one (FLASHCL_BACKWARD_PATH=portable).
# A path that fails its grid is not timed. Then flashcl-bench --op backward (JSON) for the
# paths in BENCH_PATHS that passed (default "mma wgmma blocked": the row-per-work-item kernels take
# seconds per call at these sizes) and PyTorch scaled_dot_product_attention's backward (scripts/sdpa_peer.py:
# flash and cuDNN backends) on FlashAttention's benchmark shapes (hidden 2048, batch x seqlen =
# 16k, F16), and one table with the ratios (scripts/peer_table.py) in table.md (flashcl on the
# wall clock) and table-span.md (on ms_span, the clock of SDPA's CUDA events).
# Then flashcl-bench --op varlen_backward and --op packed_qkv_backward on three encoder-sized
# packings, the same sequences in both forms (bench-varlen.jsonl).
# Output under $OUT (default ./gpu-out): ctest-<path>.txt, ptx-hazards.txt (scripts/ptx-wgmma-hazards.py on
# NVIDIA's PTX of the wgmma kernels, from the program cache), sass-fragments.txt
# (scripts/sass-fragment-check.py on the same, where ptxas and cuobjdump are on PATH), bench.jsonl,
# peer.jsonl, table.md.
# A wgmma path that fails its grid is then triaged (triage.jsonl, triage.txt): flashcl-bench --op backward with its
# float64 check, F16 and BF16 at head dims 64 and 128, MHA and GQA, one and several query tiles per
# dK/dV work-group, to say which of those the failures follow.
# Knobs: SEQS, DIMS, REPS, TEST_PATHS ("mma wgmma blocked portable"), BENCH_PATHS, SKIP_TESTS=1, TESTS
# (ctest regex), SWEEP="KN,KM,QM,QN ..." (FLASHCL_BACKWARD_MMA_TILES settings timed at S 4096
# into sweep.jsonl).
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-nvidia}
export FLASHCL_CACHE_DIR=${FLASHCL_CACHE_DIR:-$(mktemp -d)}
bench=build/tools/flashcl-bench

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
path_env() { [[ $1 == portable || $1 == blocked ]] && echo "$1" || echo "nvidia-$1"; }
# One line per flashcl-bench JSON line of file $1: its "label" field, the kernels, the case, the
# rate and the float64 check.
case_lines() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        check = "err %.3g bound %.3g" % (r["max_err"], r["err_bound"]) if r.get("rows_checked") else "unchecked"
        print(r["label"], r["backward_path"], r["dtype"], "D", r["d"], "S", r["sq"], "H", r["hq"], "/", r["hkv"],
              "causal" if r["causal"] else "full", "%.1f TF/s" % r["tflops"], check, "ok" if r["ok"] else "FAILED")
' "$1"
}
source scripts/gpu-grid.sh

passed=""
for path in ${TEST_PATHS:-mma wgmma blocked portable}; do
  grid_pass "$path" 4 "${TESTS:-^(test_backward|test_varlen_backward|test_qkvo_backward)$}" \
    FLASHCL_BACKWARD_PATH="$(path_env "$path")"
done
echo "paths that passed the grid:${passed:- none}"
# the wgmma path, if it failed: which dtypes, head dims, head groupings and tile counts fail
: > "$out/triage.jsonl"
if [[ " ${TEST_PATHS:-mma wgmma blocked portable} " == *" wgmma "* && " $passed " != *" wgmma "* ]]; then
  for dt in f16 bf16; do
    for d in 64 128; do
      for shape in "24 2 2" "200 2 2" "24 4 1" "200 4 1"; do # one or seven 32-row query tiles per head
        read -r s hq hkv <<< "$shape"
        FLASHCL_BACKWARD_PATH=nvidia-wgmma "$bench" --op backward --dtype $dt --b 1 --sq "$s" --hq "$hq" \
          --hkv "$hkv" --d $d --reps 1 --warmup 0 --json 2>>"$out/errors.log" |
          sed 's/^{/{"label":"triage",/' >> "$out/triage.jsonl"
      done
    done
  done
  case_lines "$out/triage.jsonl" | tee "$out/triage.txt"
fi
# NVIDIA's own PTX of the wgmma backward (the program cache keeps it): wgmma register hazards
for f in $(grep -l -a "attention_backward_dkdv" "$FLASHCL_CACHE_DIR"/* 2>/dev/null); do
  grep -q -a "wgmma.mma_async" "$f" && { echo "== $f"; python3 scripts/ptx-wgmma-hazards.py "$f" | tail -20; }
done > "$out/ptx-hazards.txt" 2>&1
# and its machine code, where ptxas and cuobjdump are on PATH: the K/V (Q/dO) fragments' registers
# apart from the gradient products' (scripts/sass-fragment-check.py)
if command -v ptxas > /dev/null && command -v cuobjdump > /dev/null; then
  python3 scripts/sass-fragment-check.py "$FLASHCL_CACHE_DIR"/* > "$out/sass-fragments.txt" 2>&1
else
  echo "no ptxas or cuobjdump on PATH: not checked" > "$out/sass-fragments.txt"
fi

: > "$out/bench.jsonl"
: > "$out/peer.jsonl"
for d in ${DIMS:-64 128}; do
  for s in ${SEQS:-1024 4096}; do
    for causal in "" "--causal"; do
      b=$((16384 / s)); h=$((2048 / d))
      for path in $(passed_among "${BENCH_PATHS:-mma wgmma blocked}"); do
        FLASHCL_BACKWARD_PATH=$(path_env "$path") "$bench" --op backward --dtype f16 --b $b --sq $s --sk $s \
          --hq $h --hkv $h --d $d $causal --reps ${REPS:-3} --warmup 1 --json >> "$out/bench.jsonl" 2>>"$out/errors.log"
      done
      python3 scripts/sdpa_peer.py --op backward --dtype f16 --b $b --sq $s --sk $s --hq $h --hkv $h \
        --d $d $causal >> "$out/peer.jsonl" 2>>"$out/errors.log"
    done
  done
done
python3 scripts/peer_table.py "$out/bench.jsonl" "$out/peer.jsonl" backward | tee "$out/table.md"
python3 scripts/peer_table.py "$out/bench.jsonl" "$out/peer.jsonl" backward span | tee "$out/table-span.md"

# the varlen and packed backwards (no SDPA peer): encoder-sized batches, lengths uniform in
# [1, max], the same packing in both forms
: > "$out/bench-varlen.jsonl"
for d in ${DIMS:-64 128}; do
  for sm in 512,128 64,512 64,2048; do
    for path in $(passed_among "${BENCH_PATHS:-mma wgmma blocked}"); do
      for op in varlen_backward packed_qkv_backward; do
        FLASHCL_BACKWARD_PATH=$(path_env "$path") "$bench" --op $op --dtype f16 --seqs ${sm%,*} --max-len ${sm#*,} \
          --hq 16 --d $d --reps ${REPS:-3} --warmup 1 --json >> "$out/bench-varlen.jsonl" 2>>"$out/errors.log"
      done
    done
  done
done

if [[ -n "${SWEEP:-}" ]]; then
  : > "$out/sweep.jsonl"
  for t in $SWEEP; do
    for d in 64 128; do
      h=$((2048 / d))
      for causal in "" "--causal"; do
        FLASHCL_BACKWARD_MMA_TILES=$t "$bench" --op backward --dtype f16 --b 4 --sq 4096 --sk 4096 --hq $h --hkv $h \
          --d $d $causal --reps 3 --warmup 1 --json 2>>"$out/errors.log" | sed "s/^{/{\"label\":\"$t\",/" >> "$out/sweep.jsonl"
      done
    done
  done
  case_lines "$out/sweep.jsonl"
fi
