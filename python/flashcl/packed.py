# SPDX-License-Identifier: Apache-2.0
"""FlashAttention's packed calls: flash_attn_qkvpacked_func and flash_attn_varlen_qkvpacked_func
(the output of one fused QKV projection, q, k and v heads side by side in each row),
flash_attn_kvpacked_func and flash_attn_varlen_kvpacked_func (k and v side by side: a fused KV
projection, cross-attention), and their explicit backward calls (..._backward), which return the
packed gradient like the packed input.

q, k and v are never copied out of the packed array: the library reads strided views of it (the
varlen fused-QKV call runs fcl_attention_packed_qkv_forward, whose launch depends only on the
number of rows), and the backward calls write dq, dk, dv into views of one packed gradient. In
the fused-QKV calls every sequence's queries and keys are the same rows (Sq = Sk, H query heads
over H key heads, as in FlashAttention). Arguments and results are as in flashcl.attention
(numpy, pyopencl arrays, flashcl Tensors where they hold the shape: a Tensor has at most 4 dims);
dropout is not supported.
"""
from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple, Union

import numpy as np

from ._core import F32, I32, Call, Context, Tensor, _is_pyopencl, code_of, context_for, shape_of
from ._lib import check, lib
from .attention import (Array, _backward, _check_no_dropout, _dense_forward, _i32, _lse_out, _params,
                        flash_attn_func, flash_attn_varlen_func)


def _batched_rows(x: Array, parts: int, name: str) -> Tuple[Any, int, int, int, int]:
    """A [B, S, parts, H, D] numpy or pyopencl array as [B * S, parts, H, D] (a view where its
    layout allows, else a copy), with B, S, H, D."""
    if isinstance(x, Tensor):
        raise ValueError(f"{name} is [B, S, {parts}, H, D], which a flashcl Tensor (at most 4 dims) cannot hold; "
                         f"pass a [B * S, {parts}, H, D] Tensor to the varlen call with cu_seqlens 0, S, 2 S, ..., "
                         f"or views of it to flash_attn_func")
    shape = shape_of(x)
    if len(shape) != 5 or shape[2] != parts:
        raise ValueError(f"{name} shape {shape}: expected [B, S, {parts}, H, D]")
    B, S, _, H, D = shape
    rows = x.reshape(B * S, parts, H, D) if _is_pyopencl(x) else np.reshape(np.asarray(x), (B * S, parts, H, D))
    return rows, B, S, H, D


def _split(call: Call, t: Tensor, B: Optional[int] = None, S: Optional[int] = None) -> Tuple[Tensor, ...]:
    """The views of t, a [rows, parts, H, D] tensor, one per part: [B, S, H, D] with rows = B * S,
    or [rows, H, D] (varlen) without B and S."""
    s_row, s_part, s_head, s_dim = t.strides
    rows, parts, H, D = t.shape
    shape, strides = ((B, S, H, D), (S * s_row, s_row, s_head, s_dim)) if B is not None else \
        ((rows, H, D), (s_row, s_head, s_dim))
    return tuple(call._keep(t.view(shape, strides, i * s_part)) for i in range(parts))


def _seq_bounds(cu_seqlens: Array, rows: int, max_seqlen: int) -> np.ndarray:
    """Each row's sequence [start, end) as int32 [rows, 2] from the prefix sums (read back to the
    host where they are on the device); ValueError unless they start at 0, never decrease, end at
    `rows` and keep every sequence within max_seqlen."""
    host = cu_seqlens.numpy() if isinstance(cu_seqlens, Tensor) else \
        cu_seqlens.get() if _is_pyopencl(cu_seqlens) else cu_seqlens
    cu = _i32(host)
    lens = np.diff(cu) if cu.ndim == 1 else None
    if cu.ndim != 1 or cu.size == 0 or cu[0] != 0 or cu[-1] != rows or (lens < 0).any():
        raise ValueError(f"cu_seqlens must be int32 [B + 1] prefix sums from 0 to the {rows} rows of qkv, "
                         f"never decreasing; got {cu.tolist() if cu.size <= 16 else cu.shape}")
    if lens.size and lens.max() > max_seqlen:
        raise ValueError(f"a sequence of {int(lens.max())} rows exceeds max_seqlen {max_seqlen}")
    return np.repeat(np.stack([cu[:-1], cu[1:]], axis=1), lens, axis=0).astype(np.int32)


def _varlen_rows(qkv: Array, cu_seqlens: Array, max_seqlen: int) -> Tuple[int, int, int, int, np.ndarray]:
    """total, H, D, the dtype code of a [total, 3, H, D] qkv, and its rows' bounds (_seq_bounds)."""
    shape = shape_of(qkv)
    if len(shape) != 4 or shape[1] != 3:
        raise ValueError(f"qkv shape {shape}: expected [total, 3, H, D]")
    return shape[0], shape[2], shape[3], code_of(qkv), _seq_bounds(cu_seqlens, shape[0], int(max_seqlen))


def flash_attn_qkvpacked_func(qkv: Array, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                              causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                              alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                              return_attn_probs: bool = False, *, key_mask: Optional[Array] = None,
                              context: Optional[Context] = None) -> Union[Array, Tuple[Array, Array, None]]:
    """flash_attn_func of qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2] (read in place, not copied).

    qkv [B, S, 3, H, D], numpy or pyopencl (float32 or float16). Returns out [B, S, H, D]; with
    return_attn_probs (out, softmax_lse [B, H, S] float32, None). The other arguments as for
    flash_attn_func (key_mask [B, S] or [S])."""
    _check_no_dropout(dropout_p)
    rows, B, S, H, D = _batched_rows(qkv, 3, "qkv")
    ctx = context_for((rows,), context)
    code = code_of(rows)
    with Call(ctx) as call:
        tq, tk, tv = _split(call, call.input(rows, code, "qkv"), B, S)
        p = _params(call, softmax_scale, causal, window_size, softcap, alibi_slopes, key_mask, B, S)
        return _dense_forward(call, p, tq, tk, tv, qkv, (B, S, H, D), (B, H, S), code, return_attn_probs)


def flash_attn_qkvpacked_backward(dout: Array, qkv: Array, out: Optional[Array] = None,
                                  softmax_lse: Optional[Array] = None, softmax_scale: Optional[float] = None,
                                  causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                                  softcap: float = 0.0, alibi_slopes: Optional[Array] = None, *,
                                  key_mask: Optional[Array] = None, context: Optional[Context] = None) -> Array:
    """Gradient of flash_attn_qkvpacked_func with the same arguments: dqkv [B, S, 3, H, D], like
    qkv (dq, dk, dv written into its three parts). dout [B, S, H, D]; out and softmax_lse
    optional (without them the forward runs again), as for flash_attn_backward."""
    rows, B, S, H, D = _batched_rows(qkv, 3, "qkv")
    ctx = context_for((rows, dout), context)
    code = code_of(rows)
    with Call(ctx) as call:
        tq, tk, tv = _split(call, call.input(rows, code, "qkv"), B, S)
        tg, grad = call.output(qkv, (B * S, 3, H, D), code)
        _backward(call, dout, tq, tk, tv, out, softmax_lse, softmax_scale, causal, window_size, softcap,
                  alibi_slopes, key_mask, into=_split(call, tg, B, S))
        call.finish()
    return grad.reshape(B, S, 3, H, D)


def flash_attn_varlen_qkvpacked_func(qkv: Array, cu_seqlens: Array, max_seqlen: int, dropout_p: float = 0.0,
                                     softmax_scale: Optional[float] = None, causal: bool = False,
                                     window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                                     alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                                     return_attn_probs: bool = False, *, key_mask: Optional[Array] = None,
                                     context: Optional[Context] = None) -> Union[Array, Tuple[Array, Array, None]]:
    """Variable-length self-attention straight off a fused QKV projection: sequences packed back
    to back without padding (an encoder batch).

    qkv [total, 3, H, D]; cu_seqlens int32 [B + 1] prefix sums from 0 to total (sequence b is rows
    cu[b] .. cu[b + 1]; read on the host, from the device if they are there), max_seqlen the
    longest sequence. Never attends across sequences; causal and windows per sequence. alibi_slopes
    [H]; key_mask one value per row [total]. Returns out [total, H, D]; with return_attn_probs
    (out, lse [H, total] float32, None)."""
    _check_no_dropout(dropout_p)
    ctx = context_for((qkv,), context)
    total, H, D, code, bounds = _varlen_rows(qkv, cu_seqlens, max_seqlen)
    with Call(ctx) as call:
        tqkv = call.input(qkv, code, "qkv")
        tb = call.input(bounds, I32, "seq_bounds")
        p = _params(call, softmax_scale, causal, window_size, softcap, alibi_slopes, key_mask, None, total)
        to, out = call.output(qkv, (total, H, D), code)
        tl, lse = _lse_out(call, qkv, (H, total)) if return_attn_probs else (None, None)
        with ctx._handle.lock:
            check(lib.fcl_attention_packed_qkv_forward(ctx.ptr, ctypes.byref(p), tqkv.ptr, tb.ptr, to.ptr,
                                                       tl.ptr if tl else None, None), ctx.ptr)
        call.finish()
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_qkvpacked_backward(dout: Array, qkv: Array, cu_seqlens: Array, max_seqlen: int,
                                         out: Optional[Array] = None, softmax_lse: Optional[Array] = None,
                                         softmax_scale: Optional[float] = None, causal: bool = False,
                                         window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                                         alibi_slopes: Optional[Array] = None, *, key_mask: Optional[Array] = None,
                                         context: Optional[Context] = None) -> Array:
    """Gradient of flash_attn_varlen_qkvpacked_func with the same arguments: dqkv [total, 3, H, D]
    like qkv. dout [total, H, D]; out and softmax_lse optional (both or neither: without them
    the forward runs again)."""
    ctx = context_for((qkv, dout), context)
    total, H, D, code, bounds = _varlen_rows(qkv, cu_seqlens, max_seqlen)
    with Call(ctx) as call:
        tqkv = call.input(qkv, code, "qkv")
        tdo = call.input(dout, code, "dout")
        to = call.input(out, code, "out") if out is not None else None
        tl = call.input(softmax_lse, F32, "softmax_lse") if softmax_lse is not None else None
        tb = call.input(bounds, I32, "seq_bounds")
        p = _params(call, softmax_scale, causal, window_size, softcap, alibi_slopes, key_mask, None, total)
        tg, grad = call.output(qkv, (total, 3, H, D), code)
        with ctx._handle.lock:
            check(lib.fcl_attention_packed_qkv_backward(ctx.ptr, ctypes.byref(p), tqkv.ptr, to.ptr if to else None,
                                                        tdo.ptr, tl.ptr if tl else None, tb.ptr, tg.ptr, None),
                  ctx.ptr)
        call.finish()
    return grad


def _varlen_kv(kv: Array) -> None:
    shape = shape_of(kv)
    if len(shape) != 4 or shape[1] != 2:
        raise ValueError(f"kv shape {shape}: expected [total_k, 2, Hkv, D]")


def flash_attn_kvpacked_func(q: Array, kv: Array, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                             causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                             alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                             return_attn_probs: bool = False, *, key_mask: Optional[Array] = None,
                             context: Optional[Context] = None) -> Union[Array, Tuple[Array, Array, None]]:
    """flash_attn_func of q, kv[:, :, 0] and kv[:, :, 1] (read in place, not copied).

    q [B, Sq, Hq, D]; kv [B, Sk, 2, Hkv, D], numpy or pyopencl, of q's dtype. Returns what
    flash_attn_func returns."""
    rows, B, Sk, _, _ = _batched_rows(kv, 2, "kv")
    ctx = context_for((q, rows), context)
    with Call(ctx) as call:
        tk, tv = _split(call, call.input(rows, code_of(q), "kv"), B, Sk)
        return flash_attn_func(q, tk, tv, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                               deterministic, return_attn_probs, key_mask=key_mask, context=ctx)


def flash_attn_kvpacked_backward(dout: Array, q: Array, kv: Array, out: Optional[Array] = None,
                                 softmax_lse: Optional[Array] = None, softmax_scale: Optional[float] = None,
                                 causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                                 alibi_slopes: Optional[Array] = None, *, key_mask: Optional[Array] = None,
                                 context: Optional[Context] = None) -> Tuple[Array, Array]:
    """Gradients of flash_attn_kvpacked_func with the same arguments: (dq like q, dkv [B, Sk, 2,
    Hkv, D] like kv). out and softmax_lse optional, as for flash_attn_backward."""
    rows, B, Sk, Hkv, D = _batched_rows(kv, 2, "kv")
    ctx = context_for((q, rows, dout), context)
    code = code_of(q)
    with Call(ctx) as call:
        tk, tv = _split(call, call.input(rows, code, "kv"), B, Sk)
        tg, grad = call.output(kv, (B * Sk, 2, Hkv, D), code)
        dq, _, _ = _backward(call, dout, q, tk, tv, out, softmax_lse, softmax_scale, causal, window_size, softcap,
                             alibi_slopes, key_mask, into=(None, *_split(call, tg, B, Sk)))
        call.finish()
    return dq, grad.reshape(B, Sk, 2, Hkv, D)


def flash_attn_varlen_kvpacked_func(q: Array, kv: Array, cu_seqlens_q: Array, cu_seqlens_k: Array, max_seqlen_q: int,
                                    max_seqlen_k: int, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                                    causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                                    softcap: float = 0.0, alibi_slopes: Optional[Array] = None,
                                    deterministic: bool = False, return_attn_probs: bool = False, *,
                                    key_mask: Optional[Array] = None, validate: bool = False,
                                    context: Optional[Context] = None) -> Union[Array, Tuple[Array, Array, None]]:
    """flash_attn_varlen_func of q and kv[:, 0], kv[:, 1] (read in place): q [total_q, Hq, D], kv
    [total_k, 2, Hkv, D] (numpy, pyopencl or a flashcl Tensor). Returns what
    flash_attn_varlen_func returns."""
    _varlen_kv(kv)
    ctx = context_for((q, kv), context)
    with Call(ctx) as call:
        tk, tv = _split(call, call.input(kv, code_of(q), "kv"))
        return flash_attn_varlen_func(q, tk, tv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                      softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                      return_attn_probs, key_mask=key_mask, validate=validate, context=ctx)


def flash_attn_varlen_kvpacked_backward(dout: Array, q: Array, kv: Array, cu_seqlens_q: Array, cu_seqlens_k: Array,
                                        max_seqlen_q: int, max_seqlen_k: int, out: Optional[Array] = None,
                                        softmax_lse: Optional[Array] = None, softmax_scale: Optional[float] = None,
                                        causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                                        softcap: float = 0.0, alibi_slopes: Optional[Array] = None, *,
                                        key_mask: Optional[Array] = None,
                                        context: Optional[Context] = None) -> Tuple[Array, Array]:
    """Gradients of flash_attn_varlen_kvpacked_func with the same arguments: (dq like q, dkv
    [total_k, 2, Hkv, D] like kv); out and softmax_lse optional."""
    _varlen_kv(kv)
    ctx = context_for((q, kv, dout), context)
    code = code_of(q)
    with Call(ctx) as call:
        tk, tv = _split(call, call.input(kv, code, "kv"))
        tg, grad = call.output(kv, shape_of(kv), code)
        dq, _, _ = _backward(call, dout, q, tk, tv, out, softmax_lse, softmax_scale, causal, window_size, softcap,
                             alibi_slopes, key_mask, (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k),
                             into=(None, *_split(call, tg)))
        call.finish()
    return dq, grad
