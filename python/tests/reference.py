# SPDX-License-Identifier: Apache-2.0
"""A float64 numpy reference of the attention ops (DESIGN.md semantics) and the "naive" twin in
the storage dtype that the tolerance rule is measured against."""
from __future__ import annotations

from typing import Tuple

import numpy as np


def visible(sq: int, sk: int, causal: bool, window: Tuple[int, int]) -> np.ndarray:
    """[sq, sk] bool: query i (at position i + sk - sq) sees key j."""
    left, right = window
    if causal:
        right = 0
    pos = np.arange(sq)[:, None] + sk - sq
    j = np.arange(sk)[None, :]
    ok = np.ones((sq, sk), bool)
    if left >= 0:
        ok &= j >= pos - left
    if right >= 0:
        ok &= j <= pos + right
    return ok


def attention(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0, key_mask=None, alibi=None,
              dtype=np.float64, round_to=None):
    """O [B, Sq, Hq, D] and LSE [B, Hq, Sq] of q [B, Sq, Hq, D], k, v [B, Sk, Hkv, D].

    key_mask: float [B, Sk] or [Sk], > 0.5 = attend. alibi: [Hq] or [B, Hq]. With round_to (a
    numpy dtype) the naive form: float32 math, scores, probabilities and output rounded to it."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(D) if not scale else scale
    rnd = (lambda x: x.astype(round_to).astype(dtype)) if round_to is not None else (lambda x: x)
    out = np.zeros((B, Sq, Hq, D), dtype)
    lse = np.full((B, Hq, Sq), -np.inf, dtype)
    vis = visible(Sq, Sk, causal, window)
    pos = np.arange(Sq)[:, None] + Sk - Sq
    for b in range(B):
        mask = vis.copy()
        if key_mask is not None:
            km = np.asarray(key_mask)
            mask &= (km[b] if km.ndim == 2 else km)[None, :] > 0.5
        for h in range(Hq):
            g = h // (Hq // Hkv)
            s = (q[b, :, h].astype(dtype) @ k[b, :, g].astype(dtype).T) * dtype(scale)
            if softcap:
                s = dtype(softcap) * np.tanh(s / dtype(softcap))
            if alibi is not None:
                a = np.asarray(alibi, dtype)
                slope = a[b, h] if a.ndim == 2 else a[h]
                s = s - slope * np.abs(pos - np.arange(Sk)[None, :])
            s = rnd(s)
            s = np.where(mask, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            rows = np.isfinite(m[:, 0])
            m = np.where(np.isfinite(m), m, 0)
            p = np.exp(s - m)
            l = p.sum(axis=1, keepdims=True)
            p = rnd(p / np.where(l > 0, l, 1))
            o = rnd(p @ v[b, :, g].astype(dtype))
            out[b, :, h] = np.where(rows[:, None], o, 0)
            lse[b, h] = np.where(rows, (m + np.log(np.where(l > 0, l, 1)))[:, 0], -np.inf)
    return out, lse


def naive(q, k, v, storage, **kw):
    """The naive implementation in storage dtype `storage` (float32 or float16)."""
    return attention(q, k, v, dtype=np.float32, round_to=storage, **kw)


def attention_backward(q, k, v, do, scale=None, causal=False, window=(-1, -1), softcap=0.0, key_mask=None,
                       dtype=np.float64):
    """(dq, dk, dv) of attention(q, k, v) for the upstream gradient do, in `dtype` arithmetic."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(D) if not scale else scale
    dq = np.zeros(q.shape, dtype)
    dk = np.zeros(k.shape, dtype)
    dv = np.zeros(v.shape, dtype)
    vis = visible(Sq, Sk, causal, window)
    for b in range(B):
        mask = vis.copy()
        if key_mask is not None:
            km = np.asarray(key_mask)
            mask &= (km[b] if km.ndim == 2 else km)[None, :] > 0.5
        for h in range(Hq):
            g = h // (Hq // Hkv)
            qh, kh, vh = (x.astype(dtype) for x in (q[b, :, h], k[b, :, g], v[b, :, g]))
            doh = do[b, :, h].astype(dtype)
            raw = (qh @ kh.T) * dtype(scale)
            t = np.tanh(raw / dtype(softcap)) if softcap else None
            s = dtype(softcap) * t if softcap else raw
            s = np.where(mask, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            m = np.where(np.isfinite(m), m, 0)
            p = np.exp(s - m)
            l = p.sum(axis=1, keepdims=True)
            p = p / np.where(l > 0, l, 1)
            o = p @ vh
            dv[b, :, g] += p.T @ doh
            dp = doh @ vh.T
            ds = p * (dp - (doh * o).sum(axis=1, keepdims=True))
            if softcap:
                ds = ds * (1 - t * t)
            dq[b, :, h] = ds @ kh * dtype(scale)
            dk[b, :, g] += ds.T @ qh * dtype(scale)
    return dq, dk, dv


def within(err: float, naive_err: float, factor: float = 2.0) -> bool:
    """DESIGN.md's rule: err <= factor * naive_err + 1e-5."""
    return err <= factor * naive_err + 1e-5


def max_err(a, ref) -> float:
    a = np.asarray(a, np.float64)
    if np.isnan(a).any():
        return float("inf")
    return float(np.max(np.abs(a - ref))) if a.size else 0.0
