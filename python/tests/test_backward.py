# SPDX-License-Identifier: Apache-2.0
"""flash_attn_backward and flash_attn_varlen_backward against float64 gradients (DESIGN.md rule
for gradients: max error <= 3 x the error of the same formula in float32 + 1e-5)."""
import numpy as np
import pytest
from conftest import rand
from reference import attention_backward, max_err, within

import flashcl


@pytest.mark.parametrize("with_forward", [True, False])
def test_backward(any_ctx, with_forward):
    q, k, v = rand((1, 29, 4, 32), 1), rand((1, 41, 2, 32), 2), rand((1, 41, 2, 32), 3)
    do = rand((1, 29, 4, 32), 4)
    kw = dict(causal=True, softcap=3.0)
    out = lse = None
    if with_forward:
        out, lse, _ = flashcl.flash_attn_func(q, k, v, return_attn_probs=True, context=any_ctx, **kw)
    grads = flashcl.flash_attn_backward(do, q, k, v, out, lse, context=any_ctx, **kw)
    ref = attention_backward(q, k, v, do, **kw)
    nv = attention_backward(q, k, v, do, dtype=np.float32, **kw)
    for name, g, r, n in zip(("dq", "dk", "dv"), grads, ref, nv):
        assert g.shape == r.shape
        assert within(max_err(g, r), max_err(n, r), 3.0), f"{name}: {max_err(g, r)} vs naive {max_err(n, r)}"


def test_varlen_backward(ctx):
    cu = np.array([0, 6, 19], np.int32)
    q, k, v, do = (rand((19, 2, 32), 10 + i) for i in range(4))
    dq, dk, dv = flashcl.flash_attn_varlen_backward(do, q, k, v, cu, cu, 13, 13, causal=True, context=ctx)
    for a, b in ((0, 6), (6, 19)):
        sub = [x[None, a:b] for x in (q, k, v, do)]
        ref = attention_backward(*sub, causal=True)
        nv = attention_backward(*sub, causal=True, dtype=np.float32)
        for g, r, n in zip((dq, dk, dv), ref, nv):
            assert within(max_err(g[None, a:b], r), max_err(n, r), 3.0)
