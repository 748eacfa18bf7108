/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Float64 reference gradients of the attention block with its projections
 * (fcl_attention_qkvo_backward, semantics of ref_qkvo_forward in ref_projection.h), the "naive"
 * storage-dtype twin used as the baseline of the 3x tolerance rule for gradients, and a float64
 * loss used to prove the analytic gradients by central finite differences.
 *
 * The loss is L = sum(dO * O), O = ref_qkvo_forward(...). Forward, with C = Ctx (or X when Ctx
 * is NULL) and W the dequantised weights w[n, k] * scale[n]:
 *   Q = X Wq^T + bq,  K = C Wk^T + bk,  V = C Wv^T + bv,  A = attention(Q, K, V),
 *   O = A Wo^T + bo.
 * Backward:
 *   dA = dO Wo,  dWo = dO^T A,  dbo = colsum(dO),
 *   (dQ, dK, dV) = attention backward of dA (ref_attention_backward),
 *   dWq = dQ^T X, dbq = colsum(dQ);  dWk = dK^T C, dbk = colsum(dK);  dWv = dV^T C, ...
 *   dX = dQ Wq (+ dK Wk + dV Wv for self-attention);  dCtx = dK Wk + dV Wv (cross only).
 *
 * Host arrays are dense row-major; weights are given as in ref_projection.h (ref_weight).
 */
#ifndef FLASHCL_REF_PROJECTION_BACKWARD_H
#define FLASHCL_REF_PROJECTION_BACKWARD_H

#include "ref_projection.h"

/* One projection's float64 gradients: dw [N, K] (of the dequantised weight) and db [N], or
 * NULL when not wanted (db NULL: the weight has no bias, or its gradient is not asked for). */
typedef struct ref_weight_grad {
    double *dw;
    double *db;
} ref_weight_grad;

/* The same in float32, for the naive twin. */
typedef struct ref_weight_grad_f {
    float *dw;
    float *db;
} ref_weight_grad_f;

/*
 * Analytic gradients in float64 (all outputs overwritten, not accumulated). X [Lq, D];
 * Ctx [Lk, D_ctx] or NULL; dO [Lq, D]. dX [Lq, D]; dCtx [Lk, D_ctx] (ignored, may be NULL, for
 * self-attention). The attention core runs through ref_attention_backward, which takes float32
 * inputs: Q, K, V and dA are rounded to float32 there (a relative 6e-8, far below the rule's
 * 1e-5 floor). Causal- and mask-excluded positions contribute exactly zero.
 */
void ref_qkvo_backward(const ref_qkvo_problem *p, const float *X, const float *Ctx,
                       const ref_weight *wq, const ref_weight *wk, const ref_weight *wv,
                       const ref_weight *wo, const float *dO, double *dX, double *dCtx,
                       const ref_weight_grad *gq, const ref_weight_grad *gk,
                       const ref_weight_grad *gv, const ref_weight_grad *go);

/*
 * The naive twin: float32 arithmetic with every stage rounded to the activation dtype `dtype`
 * (forward: Q, K, V, A as ref_qkvo_forward_naive; backward: dA, then dQ, dK, dV by
 * ref_attention_backward_naive, then each product dQ Wq, dK Wk, dV Wv and their sums), and the
 * weight gradients (dw, db) rounded to `dw_dtype`, the storage dtype of the weight gradients.
 * Inputs are assumed already representable in `dtype` (dO too).
 */
void ref_qkvo_backward_naive(const ref_qkvo_problem *p, fcl_dtype dtype, fcl_dtype dw_dtype,
                             const float *X, const float *Ctx, const ref_weight *wq,
                             const ref_weight *wk, const ref_weight *wv, const ref_weight *wo,
                             const float *dO, float *dX, float *dCtx, const ref_weight_grad_f *gq,
                             const ref_weight_grad_f *gk, const ref_weight_grad_f *gv,
                             const ref_weight_grad_f *go);

/*
 * L = sum(dO * O) with everything in float64 (projections and attention, no float32 rounding
 * anywhere), from float64 inputs: X [Lq, D], Ctx [Lk, D_ctx] or NULL, dequantised weights
 * w[i] [D, K_i] and biases b[i] [D] or NULL (i = 0..3: q, k, v, o). The semantics of
 * p->attn (scale, causal, windows, softcap, key mask [Lk], ALiBi [H]) as ref_attention_forward.
 * The function the finite-difference tests differentiate.
 */
double ref_qkvo_loss_d(const ref_qkvo_problem *p, const double *X, const double *Ctx,
                       const double *const w[4], const double *const b[4], const float *dO);

#endif
