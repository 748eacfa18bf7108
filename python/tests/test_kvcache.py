# SPDX-License-Identifier: Apache-2.0
"""flash_attn_with_kvcache: contiguous numpy caches updated in place, per-sequence lengths,
paged caches held as flashcl Tensors over a generation loop, and the non-causal multi-row form;
every output against the float64 reference over the keys appended so far."""
import numpy as np
import pytest
from conftest import rand
from reference import attention, max_err, naive, within

import flashcl

B, HQ, HKV, D, L_MAX = 2, 4, 2, 64, 48


def check(out, q, keys, values, storage, causal=True):
    ref, _ = attention(q, keys, values, causal=causal)
    nv, _ = naive(q, keys, values, storage, causal=causal)
    err, nerr = max_err(out, ref), max_err(nv, ref)
    assert within(err, nerr), f"max error {err}, naive {nerr}"


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_numpy_cache_append_in_place(any_ctx, dtype):
    k_cache = np.zeros((B, L_MAX, HKV, D), dtype)
    v_cache = np.zeros((B, L_MAX, HKV, D), dtype)
    k_cache[:, :20], v_cache[:, :20] = rand((B, 20, HKV, D), 1, dtype), rand((B, 20, HKV, D), 2, dtype)
    q = rand((B, 1, HQ, D), 3, dtype)
    k, v = rand((B, 1, HKV, D), 4, dtype), rand((B, 1, HKV, D), 5, dtype)
    out = flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=20, context=any_ctx)
    assert np.array_equal(k_cache[:, 20:21], k) and np.array_equal(v_cache[:, 20:21], v), "cache not updated"
    check(out, q, k_cache[:, :21], v_cache[:, :21], dtype)


def test_per_sequence_lengths_and_draft_rows(any_ctx):
    lens = np.array([9, 30], np.int32)
    k_cache, v_cache = rand((B, L_MAX, HKV, D), 6), rand((B, L_MAX, HKV, D), 7)
    q = rand((B, 3, HQ, D), 8)  # three draft rows, causal among themselves
    k, v = rand((B, 3, HKV, D), 9), rand((B, 3, HKV, D), 10)
    out, lse = flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, causal=True,
                                               return_softmax_lse=True, context=any_ctx)
    assert lse.shape == (B, HQ, 3)
    for b in range(B):
        n = lens[b] + 3
        assert np.array_equal(k_cache[b, lens[b]:n], k[b])
        check(out[b:b + 1], q[b:b + 1], k_cache[b:b + 1, :n], v_cache[b:b + 1, :n], np.float32)


def test_paged_generation_loop_on_device(ctx):
    """Prefill then decode steps over a paged cache of flashcl Tensors (stays on the device)."""
    page, max_pages, num_pages = 8, 4, 9
    table = np.array([[3, 0, 7, 5], [1, 8, 2, 6]], np.int32)
    k_pages, v_pages = ctx.empty((num_pages, page, HKV, D), "f16"), ctx.empty((num_pages, page, HKV, D), "f16")
    host_k = np.zeros((B, page * max_pages, HKV, D), np.float16)
    host_v = np.zeros_like(host_k)
    length = 0
    for step, new in enumerate([11, 1, 1, 1]):
        q = rand((B, new, HQ, D), 100 + step, np.float16)
        k, v = rand((B, new, HKV, D), 200 + step, np.float16), rand((B, new, HKV, D), 300 + step, np.float16)
        out = flashcl.flash_attn_with_kvcache(ctx.tensor(q), k_pages, v_pages, ctx.tensor(k), ctx.tensor(v),
                                              cache_seqlens=length, block_table=table, causal=True)
        assert isinstance(out, flashcl.Tensor)
        host_k[:, length:length + new], host_v[:, length:length + new] = k, v
        length += new
        check(out.numpy(), q, host_k[:, :length], host_v[:, :length], np.float16)


def test_non_causal_rows_over_contiguous_cache(ctx):
    k_cache, v_cache = rand((B, L_MAX, HKV, D), 20), rand((B, L_MAX, HKV, D), 21)
    q = rand((B, 4, HQ, D), 22)
    out = flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=25, causal=False, context=ctx)
    check(out, q, k_cache[:, :25], v_cache[:, :25], np.float32, causal=False)


def test_unsupported_arguments(ctx):
    k_cache = v_cache = np.zeros((B, L_MAX, HKV, D), np.float32)
    q = rand((B, 1, HQ, D), 1)
    with pytest.raises(NotImplementedError, match="rotary"):
        flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, rotary_cos=np.zeros(1), context=ctx)
