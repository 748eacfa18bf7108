/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Float64 reference gradients of the attention forward (ref_attention.h semantics), the
 * storage-dtype "naive" twin used as the baseline of the 3x tolerance rule for gradients, and
 * a float64 loss used to prove the analytic gradients by central finite differences.
 *
 * Host arrays are dense row-major: Q, dO [B, Sq, Hq, D]; K, V [B, Sk, Hkv, D].
 * The loss whose gradients these are is L = sum(dO * O), O the forward output.
 */
#ifndef FLASHCL_REF_ATTENTION_BACKWARD_H
#define FLASHCL_REF_ATTENTION_BACKWARD_H

#include "ref_attention.h"

/*
 * Analytic gradients in float64: dQ [B, Sq, Hq, D], dK and dV [B, Sk, Hkv, D] (overwritten).
 * GQA: a KV head's gradients sum over the query heads that read it. The gradient flows through
 * softcap's tanh; ALiBi and masking are constants. Rows with no visible key and invisible
 * keys contribute exactly zero.
 */
void ref_attention_backward(const ref_attn_problem *p, const float *Q, const float *K,
                            const float *V, const float *dO, double *dQ, double *dK, double *dV);

/*
 * The same gradients computed the naive way in storage dtype `dtype`: float32 arithmetic with
 * the scores (after scale, softcap and ALiBi), probabilities, dP = dO V^T, dS (after the
 * softcap factor) and the outputs dQ, dK, dV each rounded to `dtype` (what autograd through a
 * plain attention in that dtype would do). delta_i = sum_j P_ij dP_ij is taken in float32 from
 * the rounded P and dP, as softmax's backward does, so O itself is not needed. Inputs are
 * assumed already representable in `dtype`.
 */
void ref_attention_backward_naive(const ref_attn_problem *p, fcl_dtype dtype, const float *Q,
                                  const float *K, const float *V, const float *dO, float *dQ,
                                  float *dK, float *dV);

/*
 * L = sum(dO * O) with everything in float64, from float64 inputs Qd, Kd, Vd (same layouts);
 * the function the finite-difference tests differentiate.
 */
double ref_attention_loss(const ref_attn_problem *p, const double *Qd, const double *Kd,
                          const double *Vd, const float *dO);

#endif
