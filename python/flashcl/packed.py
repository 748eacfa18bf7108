# SPDX-License-Identifier: Apache-2.0
"""FlashAttention's fused-QKV calls: flash_attn_qkvpacked_func and flash_attn_varlen_qkvpacked_func
(the output of one QKV projection, q, k and v heads side by side in each row), and their explicit
backward calls flash_attn_qkvpacked_backward and flash_attn_varlen_qkvpacked_backward.

q, k and v are never copied out of qkv: the batched form passes the library three strided views
of it, the varlen form runs fcl_attention_packed_qkv_forward, whose launch depends only on the
number of rows. Self-attention: every sequence's queries and keys are the same rows, so Sq = Sk
and H query heads read H key heads (FlashAttention's packed calls are MHA too). Arguments and
results are as in flashcl.attention (numpy, pyopencl arrays, flashcl Tensors where they hold the
shape); dropout is not supported.
"""
from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple, Union

import numpy as np

from ._core import F32, I32, Call, Context, Tensor, _is_pyopencl, code_of, context_for, shape_of
from ._lib import check, lib
from .attention import Array, _check_no_dropout, _dense_forward, _i32, _lse_out, _params


def _batched_rows(qkv: Array) -> Tuple[Any, int, int, int, int]:
    """A [B, S, 3, H, D] numpy or pyopencl qkv as [B * S, 3, H, D] (a view where its layout
    allows, else a copy), with B, S, H, D."""
    if isinstance(qkv, Tensor):
        raise ValueError("flash_attn_qkvpacked_*: qkv is [B, S, 3, H, D], which a flashcl Tensor (at most 4 dims) "
                         "cannot hold; pass a [B * S, 3, H, D] Tensor to flash_attn_varlen_qkvpacked_func with "
                         "cu_seqlens 0, S, 2 S, ..., or views of it to flash_attn_func")
    shape = shape_of(qkv)
    if len(shape) != 5 or shape[2] != 3:
        raise ValueError(f"qkv shape {shape}: expected [B, S, 3, H, D]")
    B, S, _, H, D = shape
    rows = qkv.reshape(B * S, 3, H, D) if _is_pyopencl(qkv) else np.reshape(np.asarray(qkv), (B * S, 3, H, D))
    return rows, B, S, H, D


def _split(call: Call, t: Tensor, B: int, S: int) -> Tuple[Tensor, Tensor, Tensor]:
    """The three [B, S, H, D] views of t, a [B * S, 3, H, D] tensor: q, k, v (or dq, dk, dv)."""
    s_row, s_part, s_head, s_dim = t.strides
    _, _, H, D = t.shape
    return tuple(call._keep(t.view((B, S, H, D), (S * s_row, s_row, s_head, s_dim), i * s_part)) for i in range(3))


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
    rows, B, S, H, D = _batched_rows(qkv)
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
    rows, B, S, H, D = _batched_rows(qkv)
    ctx = context_for((rows, dout), context)
    code = code_of(rows)
    with Call(ctx) as call:
        tq, tk, tv = _split(call, call.input(rows, code, "qkv"), B, S)
        tdo = call.input(dout, code, "dout")
        to = call.input(out, code, "out") if out is not None else None
        tl = call.input(softmax_lse, F32, "softmax_lse") if softmax_lse is not None else None
        p = _params(call, softmax_scale, causal, window_size, softcap, alibi_slopes, key_mask, B, S)
        tg, grad = call.output(qkv, (B * S, 3, H, D), code)
        tdq, tdk, tdv = _split(call, tg, B, S)
        with ctx._handle.lock:
            check(lib.fcl_attention_backward(ctx.ptr, ctypes.byref(p), tq.ptr, tk.ptr, tv.ptr, to.ptr if to else None,
                                             tdo.ptr, tl.ptr if tl else None, tdq.ptr, tdk.ptr, tdv.ptr, None), ctx.ptr)
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
