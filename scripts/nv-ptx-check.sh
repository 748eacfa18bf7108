#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks an NVIDIA kernel variant here, without a GPU: clang compiles the concatenated embedded
# sources (cl/portable/NAME.cl or cl/nvidia/NAME.cl, in the order given) as OpenCL C for nvptx64 with
# libclc's builtins, the PTX is promoted to sm_90a as src/programs/ptx_promote.c does (SM90A markers
# removed), and CUDA's ptxas assembles it and reports registers, spills, local memory and its warnings;
# scripts/ptx-wgmma-hazards.py then reports instructions that touch a wgmma product's registers while
# it is in flight (the script then exits 1). Catches syntax errors, bad inline PTX and wgmma operand
# mistakes before any device time is spent; the register counts are clang's, not NVIDIA's compiler's
# (they differ by tens). Needs clang-15, libclc-15 (Debian packages) and ptxas (the CUDA toolkit) on
# PATH.
#   scripts/nv-ptx-check.sh "common attention_forward_rows warp_nv mma_nv forward_softmax_nv wgmma_nv \
#     attention_forward_wgmma" "-DFCL_DTYPE=1 -DHEAD_DIM_PAD=128 -DQK_DIM=128 -DQ_REGS=0 -DBLOCK_M=64 -DBLOCK_N=64 \
#     -DM_TILES=1 -DSTAGES=1 -DOVERLAP=1 -DSWIZZLED_TILES=1 -DASYNC_COPY=1 -DPAIRS=1 -DLAYOUT=0 -DHAS_SOFTCAP=0 \
#     -DHAS_MASK=0 -DHAS_ALIBI=0"
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
[[ $# -eq 2 ]] || { sed -n '2,15p' "$0" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for name in $1; do cat cl/*/"$name.cl"; echo; done > "$tmp/k.cl"
# shellcheck disable=SC2086 # the options are words
clang-15 -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -finclude-default-header \
  -Xclang -mlink-builtin-bitcode -Xclang /usr/lib/clc/nvptx64--nvidiacl.bc -O3 -S -Wno-everything \
  -DFCL_UNROLL=1 -DFCL_ROUND_GROUPS=528 $2 -o "$tmp/k.ptx" "$tmp/k.cl"
sed -i -e 's#//@@##' -e 's/^\.target sm_[0-9]*.*/.target sm_90a/' -e 's/^\.version .*/.version 8.0/' "$tmp/k.ptx"
ptxas -arch=sm_90a -c -v "$tmp/k.ptx" -o "$tmp/k.o" 2>&1 | grep -E "error|warn|spill|Used|bytes stack|Compiling entry" || true
if grep -q "wgmma.mma_async" "$tmp/k.ptx"; then
  python3 scripts/ptx-wgmma-hazards.py "$tmp/k.ptx" # exits 1 when it finds a hazard
fi
