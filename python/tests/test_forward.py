# SPDX-License-Identifier: Apache-2.0
"""flash_attn_func and flash_attn_varlen_func on numpy arrays against the float64 reference
(DESIGN.md rule: max error <= 2 x the naive storage-dtype error + 1e-5), with every flag, GQA,
LSE, and the mask forms (bool, uint8, additive float, Hugging Face's [B, 1, 1, Sk])."""
import numpy as np
import pytest
from conftest import rand
from reference import attention, max_err, naive, within

import flashcl

SHAPE = dict(B=2, Sq=37, Sk=53, Hq=4, Hkv=2, D=40)


def inputs(dtype, seed=1, **over):
    s = dict(SHAPE, **over)
    q = rand((s["B"], s["Sq"], s["Hq"], s["D"]), seed, dtype)
    k = rand((s["B"], s["Sk"], s["Hkv"], s["D"]), seed + 1, dtype)
    v = rand((s["B"], s["Sk"], s["Hkv"], s["D"]), seed + 2, dtype)
    return q, k, v


def assert_close(out, q, k, v, storage, **kw):
    ref, ref_lse = attention(q, k, v, **kw)
    nv, _ = naive(q, k, v, storage, **kw)
    err, nerr = max_err(out, ref), max_err(nv, ref)
    assert within(err, nerr), f"max error {err}, naive {nerr}"
    return ref_lse


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("flags", [
    dict(),
    dict(causal=True),
    dict(window=(8, 3)),
    dict(causal=True, window=(5, -1), softcap=2.5),
])
def test_forward_numpy(any_ctx, dtype, flags):
    q, k, v = inputs(dtype)
    out = flashcl.flash_attn_func(q, k, v, causal=flags.get("causal", False), window_size=flags.get("window", (-1, -1)),
                                  softcap=flags.get("softcap", 0.0), context=any_ctx)
    assert isinstance(out, np.ndarray) and out.dtype == dtype and out.shape == q.shape
    assert_close(out, q, k, v, dtype, **flags)


def test_lse_alibi_scale(ctx):
    q, k, v = inputs(np.float32, seed=7)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    out, lse, probs = flashcl.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True, alibi_slopes=slopes,
                                              return_attn_probs=True, context=ctx)
    assert probs is None and lse.shape == (2, 4, 37) and lse.dtype == np.float32
    ref_lse = assert_close(out, q, k, v, np.float32, scale=0.3, causal=True, alibi=slopes)
    assert max_err(lse, ref_lse) < 1e-4


def test_strided_inputs_bhsd(any_ctx):
    """[B, H, S, D] storage passed as a transposed view: in place where the device allows it."""
    qh = rand((2, 4, 37, 40), 11)
    kh, vh = rand((2, 2, 53, 40), 12), rand((2, 2, 53, 40), 13)
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (qh, kh, vh))
    out = flashcl.flash_attn_func(q, k, v, causal=True, context=any_ctx)
    assert_close(out, q, k, v, np.float32, causal=True)


BOOL_MASK = np.array([[True] * 40 + [False] * 13, [False] * 5 + [True] * 48])


@pytest.mark.parametrize("form", ["bool", "uint8", "int64", "additive-inf", "additive-min", "hf-extended", "shared"])
def test_key_mask_forms(ctx, form):
    q, k, v = inputs(np.float32, seed=21)
    keep = BOOL_MASK
    mask = {
        "bool": keep,
        "uint8": keep.astype(np.uint8),
        "int64": keep.astype(np.int64),
        "additive-inf": np.where(keep, 0.0, -np.inf).astype(np.float32),
        "additive-min": np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32),
        "hf-extended": np.where(keep, 0.0, -1e4).astype(np.float32)[:, None, None, :],
        "shared": keep[0],
    }[form]
    out = flashcl.flash_attn_func(q, k, v, key_mask=mask, context=ctx)
    ref_keep = (keep[0] if form == "shared" else keep).astype(np.float32)
    assert_close(out, q, k, v, np.float32, key_mask=ref_keep)


def test_additive_bias_is_refused(ctx):
    q, k, v = inputs(np.float32)
    with pytest.raises(ValueError, match="additive"):
        flashcl.flash_attn_func(q, k, v, key_mask=np.full((2, 53), 0.5, np.float32), context=ctx)
    with pytest.raises(ValueError, match="mask shape"):
        flashcl.flash_attn_func(q, k, v, key_mask=np.ones((2, 52), bool), context=ctx)


def test_varlen(any_ctx):
    lens = [5, 17, 0, 9]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    total, H, D = int(cu[-1]), 3, 32
    q, k, v = rand((total, H, D), 31), rand((total, H, D), 32), rand((total, H, D), 33)
    out = flashcl.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, validate=True,
                                         context=any_ctx)
    assert out.shape == (total, H, D)
    for s in range(len(lens)):
        a, b = cu[s], cu[s + 1]
        if a == b:
            continue
        sub = [x[None, a:b] for x in (q, k, v)]
        ref, _ = attention(*sub, causal=True)
        nv, _ = naive(*sub, np.float32, causal=True)
        assert within(max_err(out[None, a:b], ref), max_err(nv, ref)), f"sequence {s}"


def test_varlen_f16_lse(ctx):
    cu = np.array([0, 7, 20], np.int32)
    q, k, v = (rand((20, 2, 64), 40 + i, np.float16) for i in range(3))
    out, lse, _ = flashcl.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, return_attn_probs=True, context=ctx)
    assert out.dtype == np.float16 and lse.shape == (2, 20)
    for a, b in ((0, 7), (7, 20)):
        sub = [x[None, a:b] for x in (q, k, v)]
        ref, ref_lse = attention(*sub)
        nv, _ = naive(*sub, np.float16)
        assert within(max_err(out[None, a:b], ref), max_err(nv, ref))
        assert max_err(lse[:, a:b], ref_lse[0]) < 1e-3
