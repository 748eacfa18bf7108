#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# flashcl on the CPU against PyTorch's CPU attention, in one run, case by case interleaved:
# flashcl-bench on each OpenCL CPU implementation (DEVICES, default "pocl intel"), then
# scripts/cpu_peer.py (PyTorch scaled_dot_product_attention with torch.set_num_threads equal to
# the device's compute units) on the same shape. Cases: encoder batches (16 sequences of 1..128
# tokens, 12 heads, D 32, as varlen and packed QKV against PyTorch's padded batch with a key
# mask; varlen D 64 F16 up to 512 tokens and D 128 BF16 up to 256; dense D 64 / 128 at S 16 / 256
# / 512), prefill (S 1024 .. 8192, GQA, causal, F32, BF16 and F16),
# decode (one query row over caches of 4k .. 64k keys, GQA 32 / 8, D 128; against the device's
# copy bandwidth too), and the backward (dense S 1024 / 2048, and the D 32 encoder batch as varlen
# and packed QKV against the padded batch's backward). Prints one markdown table with the times and the ratios
# (PyTorch's time / flashcl's: above 1, flashcl is faster) and writes it, bench.jsonl and
# peer.jsonl under OUT (default build/cpu-peer).
#
#   scripts/cpu-peer.sh --install   first: PyTorch and numpy from PyPI into .deps/torch-venv (PyPI's
#                                   torch wheel brings about 5 GB of CUDA libraries; never part of
#                                   the test command)
#   scripts/cpu-peer.sh             the run (QUICK=1: one case of each kind; CASES="w1 w2": the cases
#                                   whose name contains one of the words)
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."

venv=.deps/torch-venv
if [[ ${1:-} == --install ]]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet torch numpy
  exit 0
fi
[[ -x $venv/bin/python ]] || { echo "cpu-peer.sh: no PyTorch; run scripts/cpu-peer.sh --install first" >&2; exit 2; }
if [[ -z ${OCL_ICD_VENDORS:-} && -d .deps/opencl-vendors ]]; then
  export OCL_ICD_VENDORS=$PWD/.deps/opencl-vendors
fi
# PoCL's worker threads pinned, one per core (docs/API.md, "CPUs"), unless the caller chose
export POCL_AFFINITY=${POCL_AFFINITY:-1}
[[ -x build/tools/flashcl-bench ]] || scripts/build
out=${OUT:-build/cpu-peer}
mkdir -p "$out"
: >"$out/bench.jsonl"
: >"$out/peer.jsonl"
read -r -a devices <<<"${DEVICES:-pocl intel}"

# case: name | flashcl-bench arguments | cpu_peer.py arguments ("" = derived from the bench's
# JSON: padded varlen batches)
cases=(
  "encoder varlen|--op varlen --dtype f32 --seqs 16 --max-len 128 --hq 12 --hkv 12 --d 32|"
  "encoder packed|--op packed_qkv --dtype f32 --seqs 16 --max-len 128 --hq 12 --d 32|"
  "encoder varlen D64 f16|--op varlen --dtype f16 --seqs 16 --max-len 512 --hq 12 --hkv 12 --d 64|"
  "encoder varlen D128 bf16|--op varlen --dtype bf16 --seqs 8 --max-len 256 --hq 16 --hkv 16 --d 128|"
  "dense S16 D64|--op forward --dtype f32 --b 64 --sq 16 --hq 12 --hkv 12 --d 64|--op forward --dtype f32 --b 64 --sq 16 --hq 12 --hkv 12 --d 64"
  "dense S256 D64|--op forward --dtype f32 --b 8 --sq 256 --hq 12 --hkv 12 --d 64|--op forward --dtype f32 --b 8 --sq 256 --hq 12 --hkv 12 --d 64"
  "dense S512 D128|--op forward --dtype f32 --b 2 --sq 512 --hq 16 --hkv 16 --d 128|--op forward --dtype f32 --b 2 --sq 512 --hq 16 --hkv 16 --d 128"
  "prefill S1024|--op forward --dtype f32 --b 1 --sq 1024 --hq 8 --hkv 8 --d 64|--op forward --dtype f32 --b 1 --sq 1024 --hq 8 --hkv 8 --d 64"
  "prefill S2048 GQA causal|--op forward --dtype f32 --b 1 --sq 2048 --hq 16 --hkv 4 --d 128 --causal|--op forward --dtype f32 --b 1 --sq 2048 --hq 16 --hkv 4 --d 128 --causal"
  "prefill S2048 GQA causal bf16|--op forward --dtype bf16 --b 1 --sq 2048 --hq 16 --hkv 4 --d 128 --causal|--op forward --dtype bf16 --b 1 --sq 2048 --hq 16 --hkv 4 --d 128 --causal"
  "prefill S2048 GQA causal f16|--op forward --dtype f16 --b 1 --sq 2048 --hq 16 --hkv 4 --d 128 --causal|--op forward --dtype f16 --b 1 --sq 2048 --hq 16 --hkv 4 --d 128 --causal"
  "prefill S8192 causal|--op forward --dtype f32 --b 1 --sq 8192 --hq 8 --hkv 2 --d 64 --causal|--op forward --dtype f32 --b 1 --sq 8192 --hq 8 --hkv 2 --d 64 --causal"
  "decode L4k|--op decode --dtype f32 --b 1 --sq 1 --sk 4096 --hq 32 --hkv 8 --d 128|--op decode --dtype f32 --b 1 --sq 1 --sk 4096 --hq 32 --hkv 8 --d 128"
  "decode L16k|--op decode --dtype f32 --b 1 --sq 1 --sk 16384 --hq 32 --hkv 8 --d 128|--op decode --dtype f32 --b 1 --sq 1 --sk 16384 --hq 32 --hkv 8 --d 128"
  "decode L64k bf16|--op decode --dtype bf16 --b 1 --sq 1 --sk 65536 --hq 32 --hkv 8 --d 128|--op decode --dtype bf16 --b 1 --sq 1 --sk 65536 --hq 32 --hkv 8 --d 128"
  "backward S1024|--op backward --dtype f32 --b 1 --sq 1024 --hq 8 --hkv 8 --d 64|--op backward --dtype f32 --b 1 --sq 1024 --hq 8 --hkv 8 --d 64"
  "backward S2048 causal|--op backward --dtype f32 --b 1 --sq 2048 --hq 8 --hkv 2 --d 128 --causal|--op backward --dtype f32 --b 1 --sq 2048 --hq 8 --hkv 2 --d 128 --causal"
  "encoder backward varlen|--op varlen_backward --dtype f32 --seqs 16 --max-len 128 --hq 12 --hkv 12 --d 32|"
  "encoder backward packed|--op packed_qkv_backward --dtype f32 --seqs 16 --max-len 128 --hq 12 --d 32|"
)
# QUICK=1: one case of each kind, by name; CASES: the cases whose name contains one of its words
quick=("encoder varlen" "prefill S1024" "decode L16k" "backward S1024")
if [[ ${QUICK:-0} == 1 || -n ${CASES:-} ]]; then
  read -r -a words <<<"${CASES:-}"
  picked=()
  for c in "${cases[@]}"; do
    name=${c%%|*}
    if [[ ${QUICK:-0} == 1 ]]; then
      for q in "${quick[@]}"; do [[ $name == "$q" ]] && picked+=("$c"); done
      continue
    fi
    for w in "${words[@]}"; do
      [[ $name == *"$w"* ]] && { picked+=("$c"); break; }
    done
  done
  cases=("${picked[@]}")
fi

threads=$(FLASHCL_DEVICE=${devices[0]} build/tools/flashcl-info 2>/dev/null | awk -F'compute units: ' '/compute units/ { split($2, a, ";"); print a[1]; exit }')
threads=${threads:-$(nproc)}
for dev in "${devices[@]}"; do
  for ceiling in copy read; do # copy: read + write; read: a kernel that only reads, as decode does
    FLASHCL_DEVICE=$dev build/tools/flashcl-bench --op $ceiling --json >>"$out/bench.jsonl" 2>/dev/null || true
  done
done
for c in "${cases[@]}"; do
  IFS='|' read -r name bench_args peer_args <<<"$c"
  echo "== $name" >&2
  for dev in "${devices[@]}"; do
    # shellcheck disable=SC2086 # the arguments are words
    FLASHCL_DEVICE=$dev build/tools/flashcl-bench $bench_args --json |
      python3 -c 'import json, sys; [print(json.dumps(dict(json.loads(l), case=sys.argv[1]))) for l in sys.stdin if l.startswith("{")]' "$name" \
      >>"$out/bench.jsonl" || echo "cpu-peer.sh: flashcl-bench failed on $dev: $name" >&2
  done
  if [[ -z $peer_args ]]; then # a padded batch of the bench's sequences (its seeded lengths)
    peer_args=$(python3 scripts/cpu_table.py --padded-args "$out/bench.jsonl" "$name")
  fi
  # shellcheck disable=SC2086
  "$venv/bin/python" scripts/cpu_peer.py --threads "$threads" $peer_args |
    python3 -c 'import json, sys; [print(json.dumps(dict(json.loads(l), case=sys.argv[1]))) for l in sys.stdin if l.startswith("{")]' "$name" \
    >>"$out/peer.jsonl"
done
python3 scripts/cpu_table.py "$out/bench.jsonl" "$out/peer.jsonl" | tee "$out/table.md"
