#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The CPU peer in the same run: PyTorch's scaled_dot_product_attention on the CPU, on the shapes
flashcl-bench takes, with a given thread count; one JSON object per case (fields: peer, op, dtype,
b, sq, sk, hq, hkv, d, causal, threads, ms, and for decode gbps, the K and V bytes read per second).

  python3 scripts/cpu_peer.py --threads 2 --op forward --dtype f32 --b 1 --sq 1024 --sk 1024 --hq 8 --hkv 8 --d 64
  python3 scripts/cpu_peer.py --threads 2 --op forward --dtype f32 --b 16 --sq 128 --hq 12 --d 32 --lengths 2,17,...
        (a padded encoder batch: sequence i has lengths[i] real tokens; the keys past them are
         masked out, as a model runs a padded batch)
  python3 scripts/cpu_peer.py --threads 2 --op decode --dtype f32 --b 1 --sk 16384 --hq 32 --hkv 8 --d 128
  python3 scripts/cpu_peer.py --threads 2 --op backward --dtype f32 --b 1 --sq 1024 --hq 8 --d 64

Time: the median wall clock of --reps calls after two warm-up calls. Causal is top-left in
PyTorch, which equals flashcl's bottom-right when sq == sk (decode is one query row over the
whole cache, no mask needed). GQA through enable_gqa. Needs torch (scripts/cpu-peer.sh --install
puts it into .deps/torch-venv)."""
import argparse
import json
import time

import torch
import torch.nn.functional as F

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def median_ms(fn, reps):
    fn()
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2] * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=("forward", "backward", "decode"), default="forward")
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="f32")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--b", type=int, default=1)
    ap.add_argument("--sq", type=int, default=None)
    ap.add_argument("--sk", type=int, default=None)
    ap.add_argument("--hq", type=int, default=8)
    ap.add_argument("--hkv", type=int, default=None)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--lengths", default=None, help="comma-separated real lengths of a padded batch")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    sq = a.sq if a.sq is not None else (1 if a.op == "decode" else a.sk)
    sk = a.sk if a.sk is not None else sq
    hkv = a.hkv if a.hkv is not None else a.hq
    dt = DTYPES[a.dtype]
    grad = a.op == "backward"
    q = torch.randn(a.b, a.hq, sq, a.d, dtype=dt, requires_grad=grad)
    k = torch.randn(a.b, hkv, sk, a.d, dtype=dt, requires_grad=grad)
    v = torch.randn(a.b, hkv, sk, a.d, dtype=dt, requires_grad=grad)
    mask = None
    if a.lengths:
        lengths = [int(x) for x in a.lengths.split(",")]
        if len(lengths) != a.b:
            raise SystemExit("cpu_peer.py: --lengths needs one length per batch row")
        keep = torch.arange(sk)[None, :] < torch.tensor(lengths)[:, None]  # [B, Sk]
        mask = keep[:, None, None, :]
    causal = a.causal and a.op != "decode"

    def attend():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=a.hq != hkv)

    row = dict(peer="torch-cpu", torch=torch.__version__, op=a.op, dtype=a.dtype, b=a.b, sq=sq, sk=sk, hq=a.hq,
               hkv=hkv, d=a.d, causal=a.causal, threads=a.threads, lengths=a.lengths)
    try:
        with torch.no_grad() if not grad else torch.enable_grad():
            if grad:
                o = attend()
                g = torch.randn_like(o)
                row["ms"] = median_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True), a.reps)
            else:
                row["ms"] = median_ms(attend, a.reps)
        if a.op == "decode":
            row["gbps"] = 2.0 * a.b * hkv * sk * a.d * q.element_size() / (row["ms"] * 1e-3) / 1e9
    except Exception as ex:  # no kernel for this dtype or shape: say so
        row["error"] = str(ex).splitlines()[0][:200]
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
