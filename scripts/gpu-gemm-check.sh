#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs on a machine with an NVIDIA GPU, from the project root of a built tree (build/): the
# projection GEMMs on tensor cores (cl/nvidia/linear_wgmma.cl on compute capability 9.0,
# cl/nvidia/linear_mma.cl elsewhere and for the other layouts), checked and timed in one run.
#  1. Tests under each FLASHCL_GEMM of TEST_GEMMS (default "default mma": the wgmma GEMM where it
#     applies, then the mma.sync one alone; "own" adds flashcl's portable GEMM): test_gemm (every
#     GEMM layout, dtype pair, edge and alignment case against a float64 GEMM; on such a device it
#     asserts that F16/BF16 take "nvidia-wgmma" or "nvidia-mma"), test_qkvo and test_qkvo_backward. Each test's whole output goes into tests.txt; the
#     summary names each test's rc and prints the failing expectations (case, error, bound, the
#     worst and the first element beyond the bound).
#  2. One self-attention layer (flashcl-bench --op qkvo, L 2048, D 4096, 32 heads, biases):
#     activations/weights f16/f16, f16/i8, bf16/bf16, bf16/i8 on the default path, f16/f16 and
#     f16/i8 with FLASHCL_GEMM=mma (the mma.sync GEMM, for the ratio), the same pairs at L 256 D 1024 H 8 with
#     the bench's float64 check, and PyTorch's layer (scripts/layer_peer.py: 4 x F.linear + SDPA
#     flash, F16 and BF16) in the same run; the layer's backward (--op qkvo_backward, f16/f16,
#     f16/i8, bf16/bf16 and bf16/i8; also --op qkvo_backward_saved: from
#     fcl_attention_qkvo_forward_save's activations)
#     against autograd's (layer_peer.py --backward); a table of the ratios; the
#     backward's device time per kernel (build/tools/libflashcl-kernel-profile.so preloaded), and
#     each GEMM layout of that layer alone (flashcl-gemm-bench: forward, input gradient plain and
#     accumulating, weight gradient into F16 and F32) on the default path and FLASHCL_GEMM=mma.
#  3. A small sweep of FLASHCL_GEMM_WGMMA_TILES="TM,TN,TK,G,S,L[,R]" (SWEEP=... to change it,
#     SWEEP= to skip) on the layer with f16 and i8 weights.
# Output under $OUT (default ./gpu-out), at most 8 files: summary.txt (also on stdout), gpu.txt
# (nvidia-smi, flashcl-info), tests.txt, bench.jsonl, peer.jsonl, sweep.jsonl, errors.log and
# cache.tgz (the disk cache of the run: NVIDIA's PTX of every program built, for ptxas
# elsewhere). Knobs: BUILD (default build), REPS (default 10), SKIP_TESTS=1, BUDGET_S (default
# 450: every command runs under `timeout`, cut to what is left of this budget; steps past it are
# skipped and say so).
set -uo pipefail
out=${OUT:-gpu-out}
mkdir -p "$out"
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-nvidia}
export FLASHCL_CACHE_DIR=${FLASHCL_CACHE_DIR:-$(mktemp -d)}
unset FLASHCL_GEMM FLASHCL_GEMM_MMA_TILES FLASHCL_GEMM_WGMMA_TILES
build=${BUILD:-build}
bench=$build/tools/flashcl-bench
reps=${REPS:-10}
deadline=$(($(date +%s) + ${BUDGET_S:-450}))
sum=$out/summary.txt
: > "$sum"
: > "$out/errors.log"
exec 3>&1 # say writes here (the script's stdout) even inside redirected commands
say() { echo "$*" | tee -a "$sum" >&3; }

# run_for LIMIT CMD...: CMD under `timeout`, LIMIT seconds or what is left of the budget if less;
# not run (rc 124) when less than 10 s are left.
run_for() {
  local limit=$1 left=$((deadline - $(date +%s)))
  shift
  ((left < limit)) && limit=$left
  if ((limit < 10)); then
    say "SKIPPED (time budget spent): $*"
    return 124
  fi
  timeout "$limit" "$@"
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
"$build/tools/flashcl-info" >> "$out/gpu.txt" 2>&1
say "== device"
grep -E "H200|NVIDIA|Projection GEMMs" "$out/gpu.txt" | head -n 6 | tee -a "$sum"

# ---------------------------------------------------------------- 1. tests
if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
  say "== tests"
  : > "$out/tests.txt"
  for gemm in ${TEST_GEMMS:-default mma}; do
    for t in test_gemm test_qkvo test_qkvo_backward; do
      start=$(date +%s)
      echo "######## $t FLASHCL_GEMM=$gemm" >> "$out/tests.txt"
      if [[ $gemm != default ]]; then
        FLASHCL_GEMM=$gemm run_for 150 "$build/tests/$t" -j1 --verbose=0 > "$out/t.log" 2>&1
      else
        run_for 150 "$build/tests/$t" -j1 --verbose=0 > "$out/t.log" 2>&1
      fi
      rc=$?
      cat "$out/t.log" >> "$out/tests.txt"
      say "$t FLASHCL_GEMM=$gemm: rc=$rc in $(($(date +%s) - start)) s: $(grep -E 'Synthesis' "$out/t.log" | tail -n 1)"
      grep -E "projection path" "$out/t.log" | sort -u | sed 's/^/    /' | tee -a "$sum"
      if ((rc != 0)); then # the failing expectations, whole (case, error, worst and first element)
        grep -E -A3 "FAIL|Assertion|error|beyond|CRASH|signal|timeout" "$out/t.log" | head -n 80 | tee -a "$sum"
      fi
    done
  done
  rm -f "$out/t.log"
fi

# ---------------------------------------------------------------- 2. the layer, and the peer
say "== layer (flashcl-bench --op qkvo; projections = 8 L D^2 FLOP)"
layer=(--sq 2048 --d 4096 --hq 32 --reps "$reps" --warmup 2 --check-rows 0 --json)
small=(--sq 256 --d 1024 --hq 8 --reps 3 --warmup 1 --json)
: > "$out/bench.jsonl"
pairs="f16/f16 f16/i8 bf16/bf16 bf16/i8"
for p in $pairs; do
  run_for 90 "$bench" --op qkvo --dtype "${p%/*}" --weights "${p#*/}" "${layer[@]}" \
    >> "$out/bench.jsonl" 2>> "$out/errors.log" || say "bench qkvo $p failed (rc $?)"
done
for p in f16/f16 f16/i8; do # the mma.sync GEMM, for the before/after ratio
  FLASHCL_GEMM=mma run_for 90 "$bench" --op qkvo --dtype "${p%/*}" --weights "${p#*/}" "${layer[@]}" \
    2>> "$out/errors.log" | sed 's/^{/{"gemm":"mma",/' >> "$out/bench.jsonl" || say "bench qkvo mma $p failed"
done
for p in $pairs; do # the layer's backward, recomputing or from saved activations
  for op in qkvo_backward qkvo_backward_saved; do # (values: test_qkvo_backward)
    run_for 90 "$bench" --op $op --dtype "${p%/*}" --weights "${p#*/}" "${layer[@]}" \
      >> "$out/bench.jsonl" 2>> "$out/errors.log" || say "bench $op $p failed (rc $?)"
  done
done
for p in $pairs; do # small enough for the bench's float64 check (ok, max_err, err_bound)
  run_for 60 "$bench" --op qkvo --dtype "${p%/*}" --weights "${p#*/}" "${small[@]}" \
    >> "$out/bench.jsonl" 2>> "$out/errors.log" || say "bench qkvo small $p failed (rc $?)"
done
: > "$out/peer.jsonl"
for dt in f16 bf16; do
  for dir in "" --backward; do
    run_for 60 python3 scripts/layer_peer.py --l 2048 --d 4096 --h 32 --dtype $dt $dir \
      >> "$out/peer.jsonl" 2>> "$out/errors.log" || say "layer_peer.py $dt $dir failed (rc $?)"
  done
done

python3 - "$out/bench.jsonl" "$out/peer.jsonl" << 'PY' | tee -a "$sum"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
peer = {(p["op"], p["dtype"]): p for p in (json.loads(l) for l in open(sys.argv[2]) if l.startswith("{"))}
print("| op | act | weights | GEMM | L | D | ms | attention ms | projection TF/s | torch ms | torch / flashcl | check |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    try:
        bwd = r["op"].startswith("qkvo_backward")
        proj = float("nan") if bwd else 8.0 * r["sq"] * r["d"] ** 2 / ((r["ms"] - r["ms_attention"]) * 1e-3) * 1e-12
        t = peer.get(("qkvo_backward" if bwd else r["op"], r["dtype"])) if r["sq"] == 2048 and r["d"] == 4096 else None
        gemm = r.get("gemm", r.get("projection_path", "?"))
        check = "ok" if r["ok"] and r["rows_checked"] else "NOT OK" if not r["ok"] else "-"
        if r["rows_checked"]:
            check += " (err %.2e, bound %.2e)" % (r["max_err"], r["err_bound"])
        print("| %s | %s | %s | %s | %d | %d | %.3f | %s | %.1f | %s | %s | %s |" % (
            r["op"], r["dtype"], r["weights"], gemm, r["sq"], r["d"], r["ms"],
            "-" if bwd else "%.3f" % r["ms_attention"], proj,
            "%.3f" % t["ms"] if t else "-", "%.2f" % (t["ms"] / r["ms"]) if t else "-", check))
    except (KeyError, TypeError, ZeroDivisionError) as e:
        print("| row without its figures (%r): %s |" % (e, json.dumps(r)[:300]))
PY

# The backward's device time per kernel (tools/kernel_profile.c, preloaded), F16
profile=$build/tools/libflashcl-kernel-profile.so
if [[ -f $profile ]]; then
  say "== qkvo_backward f16, device time per kernel (every launch of the bench run)"
  LD_PRELOAD=$PWD/$profile run_for 90 "$bench" --op qkvo_backward --dtype f16 --weights f16 "${layer[@]}" 2>&1 \
    > /dev/null | grep "^kernel-profile" | tee -a "$sum"
fi

# Each GEMM layout of the layer alone (tools/gemm_bench.c), M 2048 (L), N and K 4096 (D)
gemm_bench=$build/tools/flashcl-gemm-bench
if [[ -x $gemm_bench ]]; then
  say "== the layer's GEMM layouts alone (flashcl-gemm-bench, M 2048 N 4096 K 4096)"
  for gemm in default mma; do
    for layout in fwd gin gina gw gw32; do
      if [[ $gemm == default ]]; then
        run_for 60 "$gemm_bench" $layout 2048 4096 4096 2>> "$out/errors.log" | tee -a "$sum"
      else
        FLASHCL_GEMM=$gemm run_for 60 "$gemm_bench" $layout 2048 4096 4096 2>> "$out/errors.log" | tee -a "$sum"
      fi
    done
  done
fi

# ---------------------------------------------------------------- 3. tile sweep
default_sweep="128,128,32,2,3,0 128,128,32,2,3,1 128,256,16,2,4,0 128,256,16,2,4,1 64,256,32,1,2,0
  128,128,16,2,4,1 128,64,64,1,2,0 256,128,16,2,4,1 128,128,32,1,3,0 128,256,32,2,2,0"
sweep=${SWEEP-$default_sweep}
if [[ -n "$sweep" ]]; then
  say "== sweep (FLASHCL_GEMM_WGMMA_TILES; f16 activations)"
  : > "$out/sweep.jsonl"
  for t in $sweep; do
    for w in f16 i8; do
      FLASHCL_GEMM_WGMMA_TILES=$t run_for 60 "$bench" --op qkvo --dtype f16 --weights $w "${layer[@]}" \
        2>> "$out/errors.log" | sed "s/^{/{\"wgmma_tiles\":\"$t\",/" >> "$out/sweep.jsonl"
    done
  done
  python3 - "$out/sweep.jsonl" << 'PY' | tee -a "$sum"
import json, sys
print("| tiles TM,TN,TK,G,S,L[,R] | weights | ms | projection TF/s |")
print("|---|---|---|---|")
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        try:
            proj = 8.0 * r["sq"] * r["d"] ** 2 / ((r["ms"] - r["ms_attention"]) * 1e-3) * 1e-12
            print("| %s | %s | %.3f | %.1f |" % (r["wgmma_tiles"], r["weights"], r["ms"], proj))
        except (KeyError, TypeError, ZeroDivisionError) as e:
            print("| row without its figures (%r): %s |" % (e, json.dumps(r)[:300]))
PY
fi

tar -czf "$out/cache.tgz" -C "$FLASHCL_CACHE_DIR" . 2>> "$out/errors.log"
say "== errors.log (last lines)"
tail -n 20 "$out/errors.log" | tee -a "$sum"
say "== done in $((${BUDGET_S:-450} - (deadline - $(date +%s)))) s"
