#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layer peer, for flashcl-bench --op qkvo: one self-attention layer X[L,D] -> Q,K,V (linear with
bias) -> SDPA (flash) -> O linear with bias, activations and weights in one dtype (F16 or BF16), as
cuBLAS and the flash backend run it. One JSON line: ms (CUDA events, median) and TFLOP/s
(8*L*D^2 + 4*L^2*D, the attention half when causal). With --backward, the peer of flashcl-bench
--op qkvo_backward: autograd's backward of that layer alone (the forward runs untimed before each
rep), the gradients of X, every weight and every bias; TFLOP/s from 16*L*D^2 + 2.5 times the
attention's FLOPs.
Usage: layer_peer.py --l 2048 --d 4096 --h 32 [--dtype f16|bf16] [--causal] [--backward] [--reps N]"""
import argparse, json, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
p = argparse.ArgumentParser()
p.add_argument("--l", type=int, default=2048); p.add_argument("--d", type=int, default=4096)
p.add_argument("--h", type=int, default=32); p.add_argument("--causal", action="store_true")
p.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
p.add_argument("--reps", type=int, default=20)
p.add_argument("--backward", action="store_true")
a = p.parse_args()
dev, dt = "cuda", {"f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
x = torch.randn(a.l, a.d, device=dev, dtype=dt)
w = [torch.randn(a.d, a.d, device=dev, dtype=dt) * a.d ** -0.5 for _ in range(4)]
b = [torch.randn(a.d, device=dev, dtype=dt) for _ in range(4)]
hd = a.d // a.h
def layer():
    q, k, v = (F.linear(x, w[i], b[i]).view(1, a.l, a.h, hd).transpose(1, 2) for i in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
    return F.linear(o.transpose(1, 2).reshape(a.l, a.d), w[3], b[3])
params = [x] + w + b
dout = torch.randn(a.l, a.d, device=dev, dtype=dt)
def timed():
    """One rep's CUDA-event time: the layer, or (--backward) its backward after an untimed forward."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if not a.backward:
        s.record(); layer(); e.record()
    else:
        for t in params: t.grad = None
        out = layer()
        s.record(); out.backward(dout); e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e)
if a.backward:
    for t in params: t.requires_grad_(True)
for _ in range(3): timed()
ts = sorted(timed() for _ in range(a.reps))
ms = ts[len(ts) // 2]
attn = 4 * a.l * a.l * a.d * (0.5 if a.causal else 1)
fl = 16 * a.l * a.d * a.d + 2.5 * attn if a.backward else 8 * a.l * a.d * a.d + attn
print(json.dumps({"peer": "torch", "op": "qkvo_backward" if a.backward else "qkvo", "dtype": a.dtype, "l": a.l,
                  "d": a.d, "h": a.h, "causal": a.causal, "ms": ms, "tflops": fl / ms * 1e-9}))
