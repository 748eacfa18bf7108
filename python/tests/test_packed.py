# SPDX-License-Identifier: Apache-2.0
"""The packed calls against the float64 reference: flash_attn_qkvpacked_func,
flash_attn_varlen_qkvpacked_func, flash_attn_kvpacked_func and flash_attn_varlen_kvpacked_func
(DESIGN.md rule: max error <= 2 x the naive storage-dtype error + 1e-5) and their backward calls
(3 x the float32 formula's error + 1e-5), with flags, LSE, key masks, GQA, and the argument
errors."""
import numpy as np
import pytest
from conftest import rand
from reference import attention, attention_backward, max_err, naive, within

import flashcl

B, S, H, D = 2, 27, 3, 40
CU = np.array([0, 1, 14, 14, 45], np.int32)  # lengths 1, 13, 0, 31
FLAGS = [dict(), dict(causal=True), dict(window=(6, 2), softcap=2.0)]


def kwargs(flags):
    return dict(causal=flags.get("causal", False), window_size=flags.get("window", (-1, -1)),
                softcap=flags.get("softcap", 0.0))


def split(packed):
    """The parts (q, k, v or k, v) of a [..., n, H, D] array, with a leading batch of one added to
    varlen rows."""
    parts = [packed[..., i, :, :] for i in range(packed.shape[-3])]
    return [p[None] if packed.ndim == 4 else p for p in parts]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("flags", FLAGS)
def test_qkvpacked_forward(any_ctx, dtype, flags):
    qkv = rand((B, S, 3, H, D), 21, dtype)
    out, lse, probs = flashcl.flash_attn_qkvpacked_func(qkv, return_attn_probs=True, context=any_ctx,
                                                        **kwargs(flags))
    assert probs is None and out.shape == (B, S, H, D) and out.dtype == dtype and lse.shape == (B, H, S)
    q, k, v = split(qkv)
    ref, ref_lse = attention(q, k, v, **flags)
    nv, _ = naive(q, k, v, dtype, **flags)
    assert within(max_err(out, ref), max_err(nv, ref)), f"{max_err(out, ref)} vs naive {max_err(nv, ref)}"
    assert max_err(lse, ref_lse) < 1e-3


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("flags", FLAGS)
def test_varlen_qkvpacked_forward(any_ctx, dtype, flags):
    total = int(CU[-1])
    qkv = rand((total, 3, H, D), 22, dtype)
    out, lse, _ = flashcl.flash_attn_varlen_qkvpacked_func(qkv, CU, 31, return_attn_probs=True, context=any_ctx,
                                                           **kwargs(flags))
    assert out.shape == (total, H, D) and lse.shape == (H, total)
    for a, b in zip(CU[:-1], CU[1:]):
        if a == b:
            continue
        q, k, v = split(qkv[a:b])
        ref, ref_lse = attention(q, k, v, **flags)
        nv, _ = naive(q, k, v, dtype, **flags)
        assert within(max_err(out[None, a:b], ref), max_err(nv, ref)), f"rows {a}..{b}"
        assert max_err(lse[:, a:b], ref_lse[0]) < 1e-3


def test_varlen_qkvpacked_key_mask_alibi(ctx):
    total = int(CU[-1])
    qkv = rand((total, 3, H, D), 23)
    keep = np.random.default_rng(5).random(total) > 0.3
    slopes = np.array([0.5, 0.25, 0.125], np.float32)
    out = flashcl.flash_attn_varlen_qkvpacked_func(qkv, CU, 31, causal=True, key_mask=keep, alibi_slopes=slopes,
                                                   context=ctx)
    for a, b in ((1, 14), (14, 45)):
        q, k, v = split(qkv[a:b])
        kw = dict(causal=True, key_mask=keep[a:b].astype(np.float32), alibi=slopes)
        ref, _ = attention(q, k, v, **kw)
        nv, _ = naive(q, k, v, np.float32, **kw)
        assert within(max_err(out[None, a:b], ref), max_err(nv, ref))


@pytest.mark.parametrize("with_forward", [True, False])
def test_qkvpacked_backward(any_ctx, with_forward):
    qkv, do = rand((B, S, 3, H, D), 24), rand((B, S, H, D), 25)
    kw = dict(causal=True, softcap=3.0)
    out = lse = None
    if with_forward:
        out, lse, _ = flashcl.flash_attn_qkvpacked_func(qkv, return_attn_probs=True, context=any_ctx, **kw)
    dqkv = flashcl.flash_attn_qkvpacked_backward(do, qkv, out, lse, context=any_ctx, **kw)
    assert dqkv.shape == qkv.shape
    ref = attention_backward(*split(qkv), do, **kw)
    nv = attention_backward(*split(qkv), do, dtype=np.float32, **kw)
    for i, (r, n) in enumerate(zip(ref, nv)):
        g = dqkv[:, :, i]
        assert within(max_err(g, r), max_err(n, r), 3.0), f"part {i}: {max_err(g, r)} vs naive {max_err(n, r)}"


@pytest.mark.parametrize("with_forward", [True, False])
def test_varlen_qkvpacked_backward(any_ctx, with_forward):
    total = int(CU[-1])
    qkv, do = rand((total, 3, H, D), 26), rand((total, H, D), 27)
    kw = dict(window_size=(5, 3))
    out = lse = None
    if with_forward:
        out, lse, _ = flashcl.flash_attn_varlen_qkvpacked_func(qkv, CU, 31, return_attn_probs=True, context=any_ctx,
                                                               **kw)
    dqkv = flashcl.flash_attn_varlen_qkvpacked_backward(do, qkv, CU, 31, out, lse, context=any_ctx, **kw)
    assert dqkv.shape == qkv.shape
    for a, b in zip(CU[:-1], CU[1:]):
        if a == b:
            continue
        sub_do = do[None, a:b]
        ref = attention_backward(*split(qkv[a:b]), sub_do, window=(5, 3))
        nv = attention_backward(*split(qkv[a:b]), sub_do, window=(5, 3), dtype=np.float32)
        for i, (r, n) in enumerate(zip(ref, nv)):
            assert within(max_err(dqkv[None, a:b, i], r), max_err(n, r), 3.0), f"rows {a}..{b}, part {i}"


def test_packed_matches_separate_calls(ctx):
    """The views of qkv give what flash_attn_func gives on copies of q, k, v (the same kernels)."""
    qkv = rand((B, S, 3, H, D), 28, np.float16)
    packed = flashcl.flash_attn_qkvpacked_func(qkv, causal=True, context=ctx)
    q, k, v = (np.ascontiguousarray(qkv[:, :, i]) for i in range(3))
    separate = flashcl.flash_attn_func(q, k, v, causal=True, context=ctx)
    assert np.array_equal(packed, separate)


def test_argument_errors(ctx):
    qkv = rand((B, S, 3, H, D), 29)
    rows = rand((45, 3, H, D), 30)
    with pytest.raises(ValueError, match=r"\[B, S, 3, H, D\]"):
        flashcl.flash_attn_qkvpacked_func(rows, context=ctx)
    with pytest.raises(ValueError, match="at most 4 dims"):
        flashcl.flash_attn_qkvpacked_func(ctx.tensor(rows), context=ctx)
    with pytest.raises(ValueError, match=r"\[total, 3, H, D\]"):
        flashcl.flash_attn_varlen_qkvpacked_func(qkv, CU, 31, context=ctx)
    for bad in ([1, 45], [0, 20, 10, 45], [0, 44], [[0, 45]]):
        with pytest.raises(ValueError, match="prefix sums"):
            flashcl.flash_attn_varlen_qkvpacked_func(rows, np.array(bad, np.int32), 45, context=ctx)
    with pytest.raises(ValueError, match="max_seqlen"):
        flashcl.flash_attn_varlen_qkvpacked_func(rows, CU, 30, context=ctx)
    with pytest.raises(NotImplementedError):
        flashcl.flash_attn_qkvpacked_func(qkv, dropout_p=0.1, context=ctx)
    with pytest.raises(flashcl.FlashCLError):  # the library's own check: ALiBi of the packed form is [H]
        flashcl.flash_attn_varlen_qkvpacked_func(rows, CU, 31, alibi_slopes=np.ones((4, H), np.float32),
                                                 context=ctx)


CU_Q = np.array([0, 5, 5, 22], np.int32)   # query lengths 5, 0, 17
CU_K = np.array([0, 9, 12, 40], np.int32)  # key lengths 9, 3, 28


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("flags", FLAGS)
def test_kvpacked_forward(any_ctx, dtype, flags):
    q, kv = rand((B, 19, 4, D), 31, dtype), rand((B, 33, 2, 2, D), 32, dtype)  # GQA 4 / 2, Sq < Sk
    out, lse, _ = flashcl.flash_attn_kvpacked_func(q, kv, return_attn_probs=True, context=any_ctx, **kwargs(flags))
    assert out.shape == q.shape and out.dtype == dtype and lse.shape == (B, 4, 19)
    k, v = split(kv)
    ref, ref_lse = attention(q, k, v, **flags)
    nv, _ = naive(q, k, v, dtype, **flags)
    assert within(max_err(out, ref), max_err(nv, ref)), f"{max_err(out, ref)} vs naive {max_err(nv, ref)}"
    assert max_err(lse, ref_lse) < 1e-3


@pytest.mark.parametrize("flags", FLAGS)
def test_varlen_kvpacked_forward(any_ctx, flags):
    q, kv = rand((22, 4, D), 33), rand((40, 2, 2, D), 34)
    out = flashcl.flash_attn_varlen_kvpacked_func(q, kv, CU_Q, CU_K, 17, 28, context=any_ctx, **kwargs(flags))
    assert out.shape == q.shape
    for (qa, qb), (ka, kb) in zip(zip(CU_Q[:-1], CU_Q[1:]), zip(CU_K[:-1], CU_K[1:])):
        if qa == qb:
            continue
        k, v = split(kv[ka:kb])
        ref, _ = attention(q[None, qa:qb], k, v, **flags)
        nv, _ = naive(q[None, qa:qb], k, v, np.float32, **flags)
        assert within(max_err(out[None, qa:qb], ref), max_err(nv, ref)), f"queries {qa}..{qb}"


@pytest.mark.parametrize("with_forward", [True, False])
def test_kvpacked_backward(any_ctx, with_forward):
    q, kv, do = rand((B, 19, 4, D), 35), rand((B, 33, 2, 2, D), 36), rand((B, 19, 4, D), 37)
    kw = dict(causal=True, softcap=3.0)
    out = lse = None
    if with_forward:
        out, lse, _ = flashcl.flash_attn_kvpacked_func(q, kv, return_attn_probs=True, context=any_ctx, **kw)
    dq, dkv = flashcl.flash_attn_kvpacked_backward(do, q, kv, out, lse, context=any_ctx, **kw)
    assert dq.shape == q.shape and dkv.shape == kv.shape
    ref = attention_backward(q, *split(kv), do, **kw)
    nv = attention_backward(q, *split(kv), do, dtype=np.float32, **kw)
    for name, g, r, n in zip(("dq", "dk", "dv"), (dq, dkv[:, :, 0], dkv[:, :, 1]), ref, nv):
        assert within(max_err(g, r), max_err(n, r), 3.0), f"{name}: {max_err(g, r)} vs naive {max_err(n, r)}"


def test_varlen_kvpacked_backward(ctx):
    q, kv, do = rand((22, 4, D), 38), rand((40, 2, 2, D), 39), rand((22, 4, D), 40)
    dq, dkv = flashcl.flash_attn_varlen_kvpacked_backward(do, q, kv, CU_Q, CU_K, 17, 28, causal=True, context=ctx)
    assert dq.shape == q.shape and dkv.shape == kv.shape
    for (qa, qb), (ka, kb) in zip(zip(CU_Q[:-1], CU_Q[1:]), zip(CU_K[:-1], CU_K[1:])):
        k, v = split(kv[ka:kb])
        ref = attention_backward(q[None, qa:qb], k, v, do[None, qa:qb], causal=True)
        nv = attention_backward(q[None, qa:qb], k, v, do[None, qa:qb], causal=True, dtype=np.float32)
        got = (dq[None, qa:qb], dkv[None, ka:kb, 0], dkv[None, ka:kb, 1])
        for name, g, r, n in zip(("dq", "dk", "dv"), got, ref, nv):
            assert within(max_err(g, r), max_err(n, r), 3.0), f"{name} of sequence {qa}..{qb} / {ka}..{kb}"


def test_kvpacked_tensor_rows(ctx):
    """A [total_k, 2, Hkv, D] flashcl Tensor in the varlen call: the result stays a Tensor like q."""
    q, kv = rand((22, 4, D), 41), rand((40, 2, 2, D), 42)
    out = flashcl.flash_attn_varlen_kvpacked_func(ctx.tensor(q), ctx.tensor(kv), CU_Q, CU_K, 17, 28, context=ctx)
    assert isinstance(out, flashcl.Tensor)
    plain = flashcl.flash_attn_varlen_kvpacked_func(q, kv, CU_Q, CU_K, 17, 28, context=ctx)
    assert np.array_equal(out.numpy(), plain)


def test_kvpacked_argument_errors(ctx):
    q = rand((B, 19, 4, D), 43)
    with pytest.raises(ValueError, match=r"\[B, S, 2, H, D\]"):
        flashcl.flash_attn_kvpacked_func(q, rand((B, 33, 3, 2, D), 44), context=ctx)
    with pytest.raises(ValueError, match=r"\[total_k, 2, Hkv, D\]"):
        flashcl.flash_attn_varlen_kvpacked_func(rand((22, 4, D), 45), rand((40, 2, D), 46), CU_Q, CU_K, 17, 28,
                                                context=ctx)
