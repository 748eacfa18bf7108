#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs on a machine with a GPU, from the project root of a built tree (build/): the portable
# paths, the kernels that AMD, Intel and Mali GPUs run,
# forced on this GPU and timed in one run beside the device's limits measured in the same run
# (clEnqueueCopyBuffer bandwidth, flashcl-bench --op copy; CLBlast SGEMM 8192^3, --op sgemm; the
# FP32 FMA peak from FMA_PEAK). F16, every case checked by flashcl-bench against float64 on
# sampled rows. Rows:
#   backward, blocked (FLASHCL_BACKWARD_PATH=blocked): B 16 S 1024 H 32 D 64; B 8 S 2048 H 16 D 128 causal
#   decode without cp.async (FLASHCL_DECODE_PATH=portable FLASHCL_DECODE_SHUFFLE=0): the
#     three-phase form with the other GPUs' table tiles (FLASHCL_DECODE_TILES=32,4,256,1,128,0,0,0,2:
#     what AMD, Intel and Mali GPUs run), with this device's, and the team form (key lanes 0);
#     the lanes meeting by shuffles through a cp.async ring (FLASHCL_DECODE_PATH=portable):
#     B 8, L 32k, Hq 32, Hkv 8, D 128
#   forward, blocked (FLASHCL_FORWARD_PATH=blocked): B 4 S 4096 H 16 D 128 causal
#   projections, portable GEMM (FLASHCL_GEMM=own): the qkvo layer L 2048, D 4096, 32 heads, F16
#     and I8 weights; its projections' TFLOP/s = 8 L D^2 over the layer's time less the core's
# Output under $OUT (default ./gpu-out): bench.jsonl, errors.log, table.md (also on stdout).
# Knobs: FMA_PEAK (TFLOP/s, default 64: the H200's), REPS (default 5), BUILD (default build).
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-nvidia}
export FLASHCL_CACHE_DIR=${FLASHCL_CACHE_DIR:-$(mktemp -d)}
unset FLASHCL_BACKWARD_PATH FLASHCL_DECODE_PATH FLASHCL_DECODE_SHUFFLE FLASHCL_FORWARD_PATH FLASHCL_GEMM
bench=${BUILD:-build}/tools/flashcl-bench
: > "$out/bench.jsonl"

# case NAME ENV... -- BENCH ARGS: one flashcl-bench line, tagged with NAME
case_() {
  local name=$1 envs=()
  shift
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 300 "$bench" --reps "${REPS:-5}" --warmup 1 --check-rows 16 --json "$@" 2>>"$out/errors.log" |
    python3 -c 'import json, sys; [print(json.dumps(dict(json.loads(l), case=sys.argv[1]))) for l in sys.stdin if l.startswith("{")]' \
      "$name" >> "$out/bench.jsonl" || echo "gpu-portable-check: $name failed" >&2
}

dec=(--op decode --dtype f16 --b 8 --sq 1 --sk 32768 --hq 32 --hkv 8 --d 128)
layer=(--op qkvo --dtype f16 --sq 2048 --hq 32 --d 4096)
case_ copy -- --op copy
case_ sgemm -- --op sgemm
case_ "backward D64" FLASHCL_BACKWARD_PATH=blocked -- --op backward --dtype f16 --b 16 --sq 1024 --sk 1024 --hq 32 --hkv 32 --d 64
case_ "backward D128 causal" FLASHCL_BACKWARD_PATH=blocked -- --op backward --dtype f16 --b 8 --sq 2048 --sk 2048 --hq 16 --hkv 16 --d 128 --causal
case_ "decode, three-phase, other GPUs' tiles" FLASHCL_DECODE_PATH=portable FLASHCL_DECODE_SHUFFLE=0 \
  FLASHCL_DECODE_TILES=32,4,256,1,128,0,0,0,2 -- "${dec[@]}"
case_ "decode, three-phase, this device's tiles" FLASHCL_DECODE_PATH=portable FLASHCL_DECODE_SHUFFLE=0 -- "${dec[@]}"
case_ "decode, team form, no shuffles" FLASHCL_DECODE_PATH=portable FLASHCL_DECODE_SHUFFLE=0 \
  FLASHCL_DECODE_TILES=16,4,128,2,128,0,2,2,0 -- "${dec[@]}"
case_ "decode, shuffles and cp.async" FLASHCL_DECODE_PATH=portable -- "${dec[@]}"
case_ "forward D128 causal" FLASHCL_FORWARD_PATH=blocked -- --op forward --dtype f16 --b 4 --sq 4096 --sk 4096 --hq 16 --hkv 16 --d 128 --causal
case_ "GEMM, f16 weights" FLASHCL_GEMM=own -- "${layer[@]}"
case_ "GEMM, i8 weights" FLASHCL_GEMM=own -- "${layer[@]}" --weights i8
case_ sgemm -- --op sgemm

python3 - "$out/bench.jsonl" "${FMA_PEAK:-64}" <<'EOF' | tee "$out/table.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
peak = float(sys.argv[2])
copy = max((r.get("gbps") or 0) for r in rows if r["case"] == "copy") if any(r["case"] == "copy" for r in rows) else 0
sgemm = [r["tflops"] for r in rows if r["case"] == "sgemm" and r.get("tflops")]
sg = sum(sgemm) / len(sgemm) if sgemm else 0
print(f"device: {rows[0]['device'] if rows else '?'}; copy {copy:.0f} GB/s, CLBlast SGEMM {sg:.1f} TFLOP/s "
      f"(mean of {len(sgemm)}), FMA peak {peak:g} TFLOP/s\n")
print("| portable path (F16) | figure | of the limit | checked |")
print("|---|---|---|---|")
for r in rows:
    c = r["case"]
    if c in ("copy", "sgemm"):
        continue
    ok = "ok" if r.get("ok") else "NOT ok"
    if c.startswith("decode"):
        g = r.get("gbps") or 0
        print(f"| {c} | {g:.0f} GB/s | {100 * g / copy:.0f}% of copy | {ok} |" if copy else f"| {c} | {g:.0f} GB/s | | {ok} |")
    elif c.startswith("GEMM"):
        proj = 8 * r["sq"] * r["d"] ** 2 / ((r["ms"] - r["ms_attention"]) * 1e-3) * 1e-12
        print(f"| {c}: projections | {proj:.1f} TFLOP/s | {proj / sg:.2f}x SGEMM | {ok} |" if sg else f"| {c} | {proj:.1f} TFLOP/s | | {ok} |")
    else:
        t = r.get("tflops") or 0
        print(f"| {c} | {t:.1f} TFLOP/s | {100 * t / peak:.0f}% of the FMA peak | {ok} |")
EOF
