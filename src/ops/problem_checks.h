/* SPDX-License-Identifier: Apache-2.0 */
/* Checks of an attention problem's forward tensors (Q, K, V, O, LSE), one per layout, shared
 * by the forward and backward ops; each failure sets a message starting with `op`. Messages
 * call O `o_name` (the backward checks dO's shape there when O is NULL). */
#ifndef FLASHCL_PROBLEM_CHECKS_H
#define FLASHCL_PROBLEM_CHECKS_H

#include "core/tensor_checks.h"

/* Q is F32/F16/BF16; K, V, O have Q's dtype; LSE (may be NULL) is F32. O is called o_name. */
fcl_status fcl_check_attention_dtypes(fcl_context ctx, const char *op, fcl_tensor Q, fcl_tensor K, fcl_tensor V,
                                      fcl_tensor O, const char *o_name, fcl_tensor LSE);
/* Q and K head dims agree, Hq % Hkv == 0 and D <= FCL_MAX_HEAD_DIM. */
fcl_status fcl_check_heads(fcl_context ctx, const char *op, int64_t Hq, int64_t Hkv, int64_t Dq, int64_t Dk);
/* Q, O [B, Sq, Hq, D]; K, V [B, Sk, Hkv, D]; LSE NULL or F32 [B, Hq, Sq]. */
fcl_status fcl_check_dense_problem(fcl_context ctx, const char *op, fcl_tensor Q, fcl_tensor K, fcl_tensor V,
                                   fcl_tensor O, const char *o_name, fcl_tensor LSE);
/* Q, O [total_q, Hq, D]; K, V [total_k, Hkv, D]; LSE NULL or [Hq, total_q]; I32 prefix sums
 * [B + 1] each; max_seqlen_q/k >= 0. */
fcl_status fcl_check_varlen_problem(fcl_context ctx, const char *op, fcl_tensor Q, fcl_tensor K, fcl_tensor V,
                                    fcl_tensor cu_q, fcl_tensor cu_k, int max_q, int max_k, fcl_tensor O,
                                    const char *o_name, fcl_tensor LSE);
/* QKV [L, 3, H, D]; O [L, H, D]; LSE NULL or [H, L]; seq_bounds I32 [L, 2]. */
fcl_status fcl_check_packed_problem(fcl_context ctx, const char *op, fcl_tensor QKV, fcl_tensor bounds,
                                    fcl_tensor O, const char *o_name, fcl_tensor LSE);

/* The forward's outputs O and LSE (LSE may be NULL) overlap neither each other nor an input: Q,
 * K, V, params' key_mask and alibi_slopes (params not NULL), the index tensors a and b (NULL
 * when absent; named a_name, b_name). */
fcl_status fcl_check_forward_outputs(fcl_context ctx, const char *op, fcl_tensor O, fcl_tensor LSE, fcl_tensor Q,
                                     fcl_tensor K, fcl_tensor V, const fcl_attn_params *params, fcl_tensor a,
                                     const char *a_name, fcl_tensor b, const char *b_name);

#endif
