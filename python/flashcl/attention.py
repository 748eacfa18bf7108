# SPDX-License-Identifier: Apache-2.0
"""FlashAttention-style calls: flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache,
and the explicit backward calls flash_attn_backward, flash_attn_varlen_backward.

Arguments may be numpy arrays (float32 or float16; on CPU devices that share the host's memory
they are used in place, elsewhere copied), pyopencl arrays (wrapped without a copy, on a context
over their queue) or flashcl Tensors (any of f32, f16, bf16; results stay on the device). Results
come back as the same kind as q. Layouts are FlashAttention's: q [B, Sq, Hq, D], k and v
[B, Sk, Hkv, D] (Hq a multiple of Hkv), varlen [total, H, D] with int32 cu_seqlens [B + 1].
Causal masks and windows are bottom-right aligned (FlashAttention >= 2.1), window_size is
(left, right) with -1 = unbounded. Errors raise flashcl.FlashCLError with the library's sentence.
"""
from __future__ import annotations

import ctypes
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from ._core import F32, I32, Call, Context, Tensor, code_of, context_for, shape_of
from ._lib import AttnParams, KVCache, check, lib

Array = Any  # numpy.ndarray, pyopencl.array.Array or flashcl.Tensor


def _params(call: Call, softmax_scale: Optional[float], causal: bool, window_size: Sequence[int], softcap: float,
            alibi_slopes: Optional[Array], key_mask: Optional[Array], batch: Optional[int], sk: int) -> AttnParams:
    if len(window_size) != 2:
        raise ValueError(f"window_size is (left, right), not {window_size!r}")
    p = AttnParams(float(softmax_scale or 0.0), int(bool(causal)), int(window_size[0]), int(window_size[1]),
                   float(softcap or 0.0), None, None)
    if key_mask is not None:
        p.key_mask = call.input(mask_to_keep(key_mask, batch, sk), F32, "key_mask").ptr
    if alibi_slopes is not None:
        p.alibi_slopes = call.input(np.asarray(alibi_slopes, np.float32) if not isinstance(alibi_slopes, Tensor)
                                    else alibi_slopes, F32, "alibi_slopes").ptr
    return p


def mask_to_keep(mask: Array, batch: Optional[int], sk: int) -> Array:
    """A key mask as flashcl takes it: float32 [B, Sk] or [Sk], 1.0 = attend, 0.0 = drop.

    bool and integer masks: True / non-zero = attend (PyTorch's SDPA boolean mask, Hugging Face's
    attention_mask). Float masks are additive (PyTorch's float attn_mask, Hugging Face's extended
    mask): 0 = attend, -inf or any value <= -1e3 = drop; other values would be a bias, which a key
    mask cannot express (ValueError). Shapes [Sk], [B, Sk] or [B, 1, 1, Sk]. A flashcl Tensor is
    passed as it is (F32, > 0.5 = attend)."""
    if isinstance(mask, Tensor):
        return mask
    m = np.asarray(mask)
    if m.ndim == 4 and m.shape[1] == 1 and m.shape[2] == 1:
        m = m.reshape(m.shape[0], m.shape[3])
    if m.ndim not in (1, 2) or m.shape[-1] != sk or (m.ndim == 2 and batch is not None and m.shape[0] != batch):
        raise ValueError(f"key mask shape {np.shape(mask)}: expected [{sk}], [B, {sk}] or [B, 1, 1, {sk}]")
    if m.dtype == np.bool_ or m.dtype.kind in "iu":
        return (m != 0).astype(np.float32)
    if m.dtype.kind == "f":
        keep = m == 0
        drop = (m <= -1e3) | np.isneginf(m)
        if not np.all(keep | drop):
            raise ValueError("an additive float mask may hold only 0 (attend) and -inf or values <= -1e3 (drop); "
                             "pass a bool mask, or a bias is not supported")
        return keep.astype(np.float32)
    raise ValueError(f"key mask dtype {m.dtype}: bool, integer or additive float")


def _check_no_dropout(dropout_p: float) -> None:
    if dropout_p:
        raise NotImplementedError("flashcl has no dropout: dropout_p must be 0.0")


def _lse_out(call: Call, like: Array, shape: Sequence[int]) -> Tuple[Tensor, Any]:
    return call.output(like, shape, F32)


def _dense_forward(call: Call, p: AttnParams, tq: Tensor, tk: Tensor, tv: Tensor, like: Array,
                   out_shape: Sequence[int], lse_shape: Sequence[int], code: int,
                   return_attn_probs: bool) -> Union[Array, Tuple[Array, Array, None]]:
    """fcl_attention_forward of tq, tk, tv into a new out (and LSE) of the kind of `like`, waited for."""
    ctx = call.ctx
    to, out = call.output(like, out_shape, code)
    tl, lse = _lse_out(call, like, lse_shape) if return_attn_probs else (None, None)
    with ctx._handle.lock:
        check(lib.fcl_attention_forward(ctx.ptr, ctypes.byref(p), tq.ptr, tk.ptr, tv.ptr, to.ptr,
                                        tl.ptr if tl else None, None), ctx.ptr)
    call.finish()
    return (out, lse, None) if return_attn_probs else out


def flash_attn_func(q: Array, k: Array, v: Array, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                    causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                    return_attn_probs: bool = False, *, key_mask: Optional[Array] = None,
                    context: Optional[Context] = None) -> Union[Array, Tuple[Array, Array, None]]:
    """Attention forward: softmax(softmax_scale * q k^T [+ ALiBi], masked) v.

    q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D]; D <= 256. softmax_scale None = 1/sqrt(D); softcap
    > 0: scores s -> softcap * tanh(s / softcap); alibi_slopes float32 [Hq] or [B, Hq]; key_mask
    [B, Sk] or [Sk] (bool/integer: True = attend; float: additive, see mask_to_keep). Returns out
    like q; with return_attn_probs (out, softmax_lse [B, Hq, Sq] float32, None): flashcl never forms
    the probabilities. deterministic is accepted for FlashAttention's signature (flashcl always
    is). A row that sees no key gets out = 0 and lse = -inf."""
    _check_no_dropout(dropout_p)
    ctx = context_for((q, k, v), context)
    B, Sq, Hq, D = shape_of(q)
    Sk = shape_of(k)[1]
    code = code_of(q)
    with Call(ctx) as call:
        tq, tk, tv = (call.input(x, code, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
        p = _params(call, softmax_scale, causal, window_size, softcap, alibi_slopes, key_mask, B, Sk)
        return _dense_forward(call, p, tq, tk, tv, q, (B, Sq, Hq, D), (B, Hq, Sq), code, return_attn_probs)


def flash_attn_varlen_func(q: Array, k: Array, v: Array, cu_seqlens_q: Array, cu_seqlens_k: Array,
                           max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                           alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                           return_attn_probs: bool = False, *, key_mask: Optional[Array] = None,
                           validate: bool = False,
                           context: Optional[Context] = None) -> Union[Array, Tuple[Array, Array, None]]:
    """Variable-length attention: B sequences packed without padding.

    q [total_q, Hq, D], k and v [total_k, Hkv, D]; cu_seqlens_q / _k int32 [B + 1] prefix sums
    (sequence b is rows cu[b]..cu[b+1]); max_seqlen_* bound every sequence's length. Never attends
    across sequences; causal and windows per sequence. key_mask: one value per key row [total_k].
    validate=True reads the prefix sums back and checks them first (fcl_varlen_validate).
    Returns out [total_q, Hq, D]; with return_attn_probs (out, lse [Hq, total_q], None)."""
    _check_no_dropout(dropout_p)
    ctx = context_for((q, k, v), context)
    Tq, Hq, D = shape_of(q)
    Tk = shape_of(k)[0]
    code = code_of(q)
    with Call(ctx) as call:
        tq, tk, tv = (call.input(x, code, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
        cq = call.input(_i32(cu_seqlens_q), I32, "cu_seqlens_q")
        ck = call.input(_i32(cu_seqlens_k), I32, "cu_seqlens_k")
        if validate:
            with ctx._handle.lock:
                check(lib.fcl_varlen_validate(ctx.ptr, cq.ptr, ck.ptr, Tq, Tk, int(max_seqlen_q), int(max_seqlen_k)),
                      ctx.ptr)
        p = _params(call, softmax_scale, causal, window_size, softcap, alibi_slopes, key_mask, None, Tk)
        to, out = call.output(q, (Tq, Hq, D), code)
        tl, lse = _lse_out(call, q, (Hq, Tq)) if return_attn_probs else (None, None)
        with ctx._handle.lock:
            check(lib.fcl_attention_varlen_forward(ctx.ptr, ctypes.byref(p), tq.ptr, tk.ptr, tv.ptr, cq.ptr, ck.ptr,
                                                   int(max_seqlen_q), int(max_seqlen_k), to.ptr,
                                                   tl.ptr if tl else None, None), ctx.ptr)
        call.finish()
    return (out, lse, None) if return_attn_probs else out


def _i32(x: Any) -> Any:
    if isinstance(x, Tensor) or hasattr(x, "base_data"):
        return x
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise ValueError(f"prefix sums / lengths must be integers, not {a.dtype}")
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        raise ValueError("prefix sums / lengths do not fit int32")
    return a.astype(np.int32)


def flash_attn_with_kvcache(q: Array, k_cache: Array, v_cache: Array, k: Optional[Array] = None,
                            v: Optional[Array] = None, rotary_cos: Any = None, rotary_sin: Any = None,
                            cache_seqlens: Union[int, Array, None] = None, cache_batch_idx: Any = None,
                            cache_leftpad: Any = None, block_table: Optional[Array] = None,
                            softmax_scale: Optional[float] = None, causal: bool = False,
                            window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                            rotary_interleaved: bool = True, alibi_slopes: Optional[Array] = None,
                            num_splits: int = 0, return_softmax_lse: bool = False, *,
                            context: Optional[Context] = None) -> Union[Array, Tuple[Array, Array]]:
    """Attention of new queries over a KV cache, appending new keys and values first (in place).

    q [B, Sq, Hq, D]: the last Sq positions of each sequence. k_cache, v_cache [B, L_max, Hkv, D],
    or pages [num_pages, page_size, Hkv, D] with block_table int32 [B, max_pages] (vLLM style).
    cache_seqlens: the lengths before this call's k/v, an int (all sequences) or int32 [B] (read on
    the device); None = the whole cache. k, v [B, Sk_new, Hkv, D] (optional): written into the
    cache at positions cache_seqlens .. + Sk_new (numpy caches are updated in place too), then
    attended. With Sq > 1 the new rows are causal among themselves (pass causal=True); causal=False
    with Sq > 1 is supported for a contiguous cache and an int length only. window_size left limits
    the keys (right must be -1 or 0). Rotary embeddings, cache_batch_idx and cache_leftpad are not
    supported (NotImplementedError); num_splits is chosen by flashcl. Returns out like q, with
    return_softmax_lse (out, lse [B, Hq, Sq] float32)."""
    for name, val in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin), ("cache_batch_idx", cache_batch_idx),
                      ("cache_leftpad", cache_leftpad)):
        if val is not None:
            raise NotImplementedError(f"flash_attn_with_kvcache: {name} is not supported by flashcl")
    if (k is None) != (v is None):
        raise ValueError("give both k and v, or neither")
    ctx = context_for((q, k_cache, v_cache), context)
    B, Sq, Hq, D = shape_of(q)
    paged = block_table is not None
    l_max = shape_of(k_cache)[1] * (shape_of(block_table)[1] if paged else 1)
    s_new = shape_of(k)[1] if k is not None else 0
    code = code_of(q)
    host_len = cache_seqlens is None or np.isscalar(cache_seqlens) or np.ndim(cache_seqlens) == 0
    if not causal and Sq > 1 and (paged or not host_len):
        raise NotImplementedError("causal=False with several query rows needs a contiguous cache and an int "
                                  "cache_seqlens (flashcl's decode is causal among the new rows)")
    with Call(ctx) as call:
        cache = KVCache(call.inout(k_cache, "k_cache").ptr, call.inout(v_cache, "v_cache").ptr,
                        call.input(_i32(block_table), I32, "block_table").ptr if paged else None)
        tq = call.input(q, code, "q")
        if host_len:
            before = l_max - s_new if cache_seqlens is None else int(cache_seqlens)
            lens_t, positions_t = None, None
        else:
            lens = _i32(cache_seqlens)
            positions_t = call.input(lens, I32, "cache_seqlens")
            lens_t = call.input(lens + s_new if isinstance(lens, np.ndarray) else _device_add(call, lens, s_new),
                                I32, "cache_seqlens + new")
            before = -1
        if k is not None:
            tk, tv = call.input(k, code, "k"), call.input(v, code, "v")
            with ctx._handle.lock:
                check(lib.fcl_kv_cache_append(ctx.ptr, ctypes.byref(cache), tk.ptr, tv.ptr, before,
                                              positions_t.ptr if positions_t else None, None), ctx.ptr)
        p = _params(call, softmax_scale, True, (window_size[0], -1 if window_size[1] < 0 else window_size[1]),
                    softcap, alibi_slopes, None, B, l_max)
        to, out = call.output(q, (B, Sq, Hq, D), code)
        tl, lse = _lse_out(call, q, (B, Hq, Sq)) if return_softmax_lse else (None, None)
        with ctx._handle.lock:
            if not causal and Sq > 1:  # plain attention over the first `length` cache rows
                length = before + s_new
                tkc = call._keep(_view_rows(ctx, cache.k, length))
                tvc = call._keep(_view_rows(ctx, cache.v, length))
                p.causal = 0
                p.window_right = window_size[1]
                check(lib.fcl_attention_forward(ctx.ptr, ctypes.byref(p), tq.ptr, tkc.ptr, tvc.ptr, to.ptr,
                                                tl.ptr if tl else None, None), ctx.ptr)
            else:
                check(lib.fcl_attention_decode(ctx.ptr, ctypes.byref(p), tq.ptr, ctypes.byref(cache),
                                               before + s_new if host_len else -1,
                                               lens_t.ptr if lens_t else None, None, to.ptr,
                                               tl.ptr if tl else None, None), ctx.ptr)
        call.finish()
    return (out, lse) if return_softmax_lse else out


def _view_rows(ctx: Context, cache_ptr: int, length: int) -> Tensor:
    """A [B, length, H, D] view of the first `length` rows of a contiguous cache tensor."""
    from ._core import _i64
    nd = lib.fcl_tensor_ndim(cache_ptr)
    shape = [lib.fcl_tensor_dim(cache_ptr, i) for i in range(nd)]
    strides = [lib.fcl_tensor_stride(cache_ptr, i) for i in range(nd)]
    shape[1] = length
    out = ctypes.c_void_p()
    check(lib.fcl_tensor_view(cache_ptr, nd, _i64(shape), _i64(strides), 0, ctypes.byref(out)), ctx.ptr)
    return Tensor(ctx, out.value, None)


def _device_add(call: Call, lens: Any, s_new: int) -> np.ndarray:
    """Device lengths plus s_new, through the host (a pyopencl or Tensor length array)."""
    host = lens.numpy() if isinstance(lens, Tensor) else lens.get()
    return host.astype(np.int32) + s_new


def _backward(call: Call, dout: Array, q: Array, k: Array, v: Array, out: Optional[Array],
              softmax_lse: Optional[Array], softmax_scale: Optional[float], causal: bool, window_size: Sequence[int],
              softcap: float, alibi_slopes: Optional[Array], key_mask: Optional[Array],
              varlen: Optional[Tuple[Array, Array, int, int]] = None,
              into: Sequence[Optional[Tensor]] = (None, None, None)) -> Tuple[Any, Any, Any]:
    """Enqueues (dq, dk, dv) of the dense forward, or of the varlen one with varlen =
    (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k), on call's context; the caller's
    call.finish() waits and fills them. A gradient whose tensor `into` gives is written there
    (and that tensor returned); the others are new, of the kind of q."""
    ctx = call.ctx
    code = code_of(q)
    tq, tk, tv, tdo = (call.input(x, code, n) for x, n in ((q, "q"), (k, "k"), (v, "v"), (dout, "dout")))
    to = call.input(out, code, "out") if out is not None else None
    tl = call.input(softmax_lse, F32, "softmax_lse") if softmax_lse is not None else None
    batch, sk = (None, shape_of(k)[0]) if varlen else (shape_of(q)[0], shape_of(k)[1])
    p = _params(call, softmax_scale, causal, window_size, softcap, alibi_slopes, key_mask, batch, sk)
    grads = [(t, t) if t is not None else call.output(q, shape_of(x), code) for t, x in zip(into, (q, k, v))]
    (tdq, dq), (tdk, dk), (tdv, dv) = grads
    common = (tdo.ptr, tl.ptr if tl else None)
    if varlen:
        cq = call.input(_i32(varlen[0]), I32, "cu_seqlens_q")
        ck = call.input(_i32(varlen[1]), I32, "cu_seqlens_k")
    with ctx._handle.lock:
        if varlen:
            check(lib.fcl_attention_varlen_backward(ctx.ptr, ctypes.byref(p), tq.ptr, tk.ptr, tv.ptr,
                                                    to.ptr if to else None, *common, cq.ptr, ck.ptr, int(varlen[2]),
                                                    int(varlen[3]), tdq.ptr, tdk.ptr, tdv.ptr, None), ctx.ptr)
        else:
            check(lib.fcl_attention_backward(ctx.ptr, ctypes.byref(p), tq.ptr, tk.ptr, tv.ptr,
                                             to.ptr if to else None, *common, tdq.ptr, tdk.ptr, tdv.ptr, None), ctx.ptr)
    return dq, dk, dv


def _backward_waited(context: Optional[Context], dout: Array, q: Array, k: Array, v: Array,
                     *args: Any) -> Tuple[Any, Any, Any]:
    """_backward on a call of its own (context, else the arguments'), waited for."""
    with Call(context_for((q, k, v, dout), context)) as call:
        grads = _backward(call, dout, q, k, v, *args)
        call.finish()
    return grads


def flash_attn_backward(dout: Array, q: Array, k: Array, v: Array, out: Optional[Array] = None,
                        softmax_lse: Optional[Array] = None, softmax_scale: Optional[float] = None,
                        causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                        alibi_slopes: Optional[Array] = None, *, key_mask: Optional[Array] = None,
                        context: Optional[Context] = None) -> Tuple[Array, Array, Array]:
    """Gradients of flash_attn_func with the same arguments: (dq, dk, dv) like q, k, v.

    dout [B, Sq, Hq, D] is the gradient of the forward's output. out and softmax_lse (from
    flash_attn_func(..., return_attn_probs=True)) are optional: without them the backward runs the
    forward again. Deterministic (no atomics)."""
    return _backward_waited(context, dout, q, k, v, out, softmax_lse, softmax_scale, causal, window_size, softcap,
                            alibi_slopes, key_mask)


def flash_attn_varlen_backward(dout: Array, q: Array, k: Array, v: Array, cu_seqlens_q: Array, cu_seqlens_k: Array,
                               max_seqlen_q: int, max_seqlen_k: int, out: Optional[Array] = None,
                               softmax_lse: Optional[Array] = None, softmax_scale: Optional[float] = None,
                               causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                               softcap: float = 0.0, alibi_slopes: Optional[Array] = None, *,
                               key_mask: Optional[Array] = None,
                               context: Optional[Context] = None) -> Tuple[Array, Array, Array]:
    """Gradients of flash_attn_varlen_func with the same arguments: (dq, dk, dv) like q, k, v;
    out and softmax_lse optional as for flash_attn_backward."""
    return _backward_waited(context, dout, q, k, v, out, softmax_lse, softmax_scale, causal, window_size, softcap,
                            alibi_slopes, key_mask, (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))
