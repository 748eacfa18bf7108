#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compiles every variant of the tensor-core projection GEMM (cl/nvidia/linear_mma.cl) that
# src/gemm/linear_mma.c can ask for, without a GPU, through scripts/nv-ptx-check.sh (clang-15,
# libclc, ptxas): activations F16 and BF16; weights of their dtype or I8; the forward's layout
# (A and B k-contiguous; bias or not; I8 scale per n), the input gradient's (B n-contiguous;
# accumulate or not; I8 scale per k: BF16 products) and the weight gradient's (A m-contiguous,
# B n-contiguous; C in F32 or the activations' dtype); each with rows aligned (cp.async) and not.
# One line per variant: registers, spills, local memory (clang's registers, not NVIDIA's
# compiler's). TILES="TM,TN,TK,WM,WN,S" (default 128,128,32,2,4,2, the table's entry).
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
IFS=, read -r tm tn tk wm wn st <<<"${TILES:-128,128,32,2,4,2}"
tiles="-DTM=$tm -DTN=$tn -DTK=$tk -DWARPS_M=$wm -DWARPS_N=$wn -DSTAGES=$st"

# check NAME FCL_DTYPE B_I8 SCALE_ON MMA_BF16 C_F32 HAS_BIAS ACCUMULATE A_K1 B_K1 ALIGNED
check() {
  local b_async=$((1 - $3)) b_vec=$3
  ((${11})) || b_async=0 b_vec=0
  local opts="-DFCL_DTYPE=$2 -DB_I8=$3 -DSCALE_ON=$4 -DMMA_BF16=$5 -DC_F32=$6 -DHAS_BIAS=$7 -DACCUMULATE=$8"
  opts+=" -DA_K1=$9 -DB_K1=${10} -DA_ASYNC=${11} -DB_ASYNC=$b_async -DB_VEC=$b_vec $tiles"
  printf "%-40s %s\n" "$1" "$(scripts/nv-ptx-check.sh "common warp_nv mma_nv linear_mma" "$opts" 2>&1 |
    sed -E 's/ptxas info *: //' | tr -s ' \n' ' ')"
}

for dt in 1 2; do
  act=$([[ $dt == 1 ]] && echo f16 || echo bf16)
  for i8 in 0 1; do
    w=$([[ $i8 == 1 ]] && echo i8 || echo "$act")
    for al in 0 1; do
      for bias in 0 1; do
        check "forward $act/$w bias$bias aligned$al" $dt $i8 $i8 $((dt == 2)) 0 $bias 0 1 1 $al
      done
      for acc in 0 1; do
        check "grad-input $act/$w acc$acc aligned$al" $dt $i8 $((2 * i8)) $((dt == 2 || i8)) 0 0 $acc 1 0 $al
      done
    done
  done
  for al in 0 1; do
    for f32 in 0 1; do
      check "grad-weight $act C-f32=$f32 aligned$al" $dt 0 0 $((dt == 2)) $f32 0 1 0 0 $al
    done
  done
done
