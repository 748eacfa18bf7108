/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Float64 reference of the projection ops (fcl_project_kv, fcl_attention_qkvo_forward,
 * fcl_attention_q_with_kv_cached_forward), written for clarity, not speed, plus the "naive"
 * twin in a storage dtype that the tolerance rule of DESIGN.md measures against.
 *
 * Host arrays are dense row-major float32. Weights are given dequantised: for I8 weights pass
 * the int8 values as floats together with their per-row scale, and the reference uses
 * w[n, k] * scale[n] (so the tolerance measures arithmetic only, not quantisation).
 */
#ifndef FLASHCL_REF_PROJECTION_H
#define FLASHCL_REF_PROJECTION_H

#include <flashcl/flashcl.h>

#include "ref_attention.h"

/* One projection's host data: w [N, K]; scale [N] or NULL (= 1); bias [N] or NULL (= 0). */
typedef struct ref_weight {
    const float *w;
    const float *scale;
    const float *bias;
} ref_weight;

/* y[M, N] = x[M, K] w[N, K]^T * scale[n] + bias[n], all in float64. */
void ref_linear(int M, int N, int K, const float *x, const ref_weight *w, double *y);

/* The same from float64 inputs x[M, K]. */
void ref_linear_d(int M, int N, int K, const double *x, const ref_weight *w, double *y);

/*
 * The naive twin: float32 arithmetic (the weight dequantised in float32 as w[n, k] * scale[n],
 * a float32 dot product, then + bias), each output rounded to `dtype`.
 */
void ref_linear_naive(fcl_dtype dtype, int M, int N, int K, const float *x, const ref_weight *w,
                      float *y);

/*
 * The attention block with its projections. X [Lq, D]; Ctx [Lk, D_ctx] or NULL (self-attention:
 * K and V from X, Lk = Lq, D_ctx = D). `attn` carries the semantics (scale, causal, windows,
 * softcap, key_mask [Lk], alibi [H]); its shape fields are ignored and set from Lq, Lk, H and
 * D / H (B = 1, Hq = Hkv = H, mask and ALiBi not per batch).
 */
typedef struct ref_qkvo_problem {
    int Lq, Lk, D, D_ctx, H;
    ref_attn_problem attn;
} ref_qkvo_problem;

/* The attention problem the block runs: [1, Lq, H, D / H] against [1, Lk, H, D / H]. */
ref_attn_problem ref_qkvo_attn_problem(const ref_qkvo_problem *p, int self);

/*
 * Float64: Q = X Wq^T + bq; K = C Wk^T + bk; V = C Wv^T + bv (C = Ctx, or X when Ctx is NULL);
 * A = attention(Q, K, V) by ref_attention_forward (which takes float32 inputs, so Q, K, V are
 * rounded to float32 there: a relative 6e-8, far below the 1e-5 floor of the rule);
 * O = A Wo^T + bo in float64. O [Lq, D].
 */
void ref_qkvo_forward(const ref_qkvo_problem *p, const float *X, const float *Ctx,
                      const ref_weight *wq, const ref_weight *wk, const ref_weight *wv,
                      const ref_weight *wo, double *O);

/* The same with K, V [Lk, D] given (already projected; fcl_attention_q_with_kv_cached_forward). */
void ref_q_with_kv_forward(const ref_qkvo_problem *p, const float *X, const float *K,
                           const float *V, const ref_weight *wq, const ref_weight *wo, double *O);

/*
 * The naive twin in storage dtype `dtype`: every stage (Q, K, V, the attention output, O) is
 * computed with ref_linear_naive / ref_attention_forward_naive and rounded to `dtype`.
 * Kn, Vn (each [Lk, D], may be NULL) receive the naive K and V.
 */
void ref_qkvo_forward_naive(const ref_qkvo_problem *p, fcl_dtype dtype, const float *X,
                            const float *Ctx, const ref_weight *wq, const ref_weight *wk,
                            const ref_weight *wv, const ref_weight *wo, float *O, float *Kn,
                            float *Vn);

/* The naive twin of ref_q_with_kv_forward (K, V assumed representable in dtype). */
void ref_q_with_kv_forward_naive(const ref_qkvo_problem *p, fcl_dtype dtype, const float *X,
                                 const float *K, const float *V, const ref_weight *wq,
                                 const ref_weight *wo, float *O);

#endif
