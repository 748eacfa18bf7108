/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bad input for the three backward calls: fcl_attention_backward, fcl_attention_varlen_backward
 * and fcl_attention_packed_qkv_backward, as tables run by errors_run (support_errors.h: the
 * default problems, the edits, and what every row checks). Each row changes one thing from the
 * valid call that the control rows (want FCL_SUCCESS) prove succeeds and writes every gradient
 * element. Overlap rows place tensors as views of one shared buffer; index tensors (cu_seqlens,
 * seq_bounds) are views of it with their own dtype. The "O NULL" rows are the recompute form
 * (O and LSE NULL): there dO alone carries O's shape and dtype, so a wrong dO must be reported
 * as dO's fault.
 * One test per group of rows: a process (one context) runs many rows, since context creation
 * dominates the run time on some devices; a failing row names itself and the group goes on.
 */
#include "support_errors.h"

#include <criterion/criterion.h>
#include <math.h>

/* The tensors of each side of a layout's problem. */
#define DQS (BIT(D_Q) | BIT(D_O) | BIT(D_DO) | BIT(D_DQ))
#define DKS (BIT(D_K) | BIT(D_V) | BIT(D_DK) | BIT(D_DV))
#define VQS (BIT(V_Q) | BIT(V_O) | BIT(V_DO) | BIT(V_DQ))
#define VKS (BIT(V_K) | BIT(V_V) | BIT(V_DK) | BIT(V_DV))
#define PQKV (BIT(P_QKV) | BIT(P_DQKV))
#define PODO (BIT(P_O) | BIT(P_DO))

/* The recompute-form rows of a layout: O and LSE absent (NO_O). dO's head dim is dim d_dim;
 * rank2_a x rank2_b is dO flattened to rank 2. */
#define RECOMPUTE_ROWS(lay, O_, DO_, LSE_, d_dim, rank2_a, rank2_b)                                          \
    {#lay "_recompute_control", FCL_SUCCESS, .edit = {NO_O(O_, LSE_)}},                                     \
    {#lay "_recompute_o_null_lse_given", FCL_ERR_INVALID_ARGUMENT, .edit = {E_ABSENT(BIT(O_))},             \
     .tokens = {"O", "LSE"}},                                                                               \
    {#lay "_recompute_do_null", FCL_ERR_INVALID_ARGUMENT, .edit = {E_ABSENT(BIT(O_) | BIT(LSE_) | BIT(DO_))}, \
     .tokens = {"dO"}},                                                                                     \
    {#lay "_recompute_do_head_dim", FCL_ERR_SHAPE, .edit = {NO_O(O_, LSE_), E_DIM(BIT(DO_), d_dim, 24)},     \
     .tokens = {"dO", "24", "16"}},                                                                         \
    {#lay "_recompute_do_dtype", FCL_ERR_DTYPE, .edit = {NO_O(O_, LSE_), E_DTYPE(BIT(DO_), FCL_F16)},        \
     .tokens = {"dO", "f16", "f32"}},                                                                       \
    {#lay "_recompute_do_rank", FCL_ERR_SHAPE,                                                              \
     .edit = {NO_O(O_, LSE_), E_SPEC(DO_, FCL_F32, 2, rank2_a, rank2_b, 0, 0)}, .tokens = {"dO", "2"}},      \
    {#lay "_recompute_do_foreign", FCL_ERR_INVALID_ARGUMENT, .edit = {NO_O(O_, LSE_), E_FOREIGN(BIT(DO_))},  \
     .tokens = {"dO"}, .subs = {"context"}}
#define NO_O(O_, LSE_) E_ABSENT(BIT(O_) | BIT(LSE_))

/* ================================================================== dense */

static const errors_case dense_controls[] = {
    {"dense_control_valid_call_succeeds_and_writes_gradients", FCL_SUCCESS, .edit = {E_FORWARD_FIRST}},
    /* NULL LSE (recomputed); [B, Sk] key mask + [Hq] ALiBi + windows + softcap; shared [Sk] key
     * mask + [B, Hq] ALiBi + causal: all valid, so the rejections are about the one change */
    {"dense_control_valid_optional_inputs_accepted/null_lse", FCL_SUCCESS, .edit = {E_ABSENT(BIT(D_LSE))}},
    {"dense_control_valid_optional_inputs_accepted/mask_b_sk_alibi_hq_windows_softcap", FCL_SUCCESS,
     .edit = {E_SPEC(S_MASK, FCL_F32, 2, B0, SK0, 0, 0), E_SPEC(S_ALIBI, FCL_F32, 1, HQ0, 0, 0, 0), E_WINDOW_LEFT(3),
              E_WINDOW_RIGHT(1), E_SOFTCAP(30.0f), E_SCALE(0.3f), E_FORWARD_FIRST}},
    {"dense_control_valid_optional_inputs_accepted/mask_sk_alibi_b_hq_causal", FCL_SUCCESS,
     .edit = {E_SPEC(S_MASK, FCL_F32, 1, SK0, 0, 0, 0), E_SPEC(S_ALIBI, FCL_F32, 2, B0, HQ0, 0, 0), E_CAUSAL,
              E_FORWARD_FIRST}},
    /* every tensor a view of one buffer, back to back: no overlap, so the call is valid and
     * writes only the gradients' ranges */
    {"dense_control_gradients_next_to_inputs_in_one_buffer", FCL_SUCCESS, .edit = {E_BACK_TO_BACK}},
    {"dense_valid_call_after_failed_one_clears_error", FCL_SUCCESS, .edit = {E_FAIL_FIRST(D_DK)}},
};

static const errors_case dense_null_arguments[] = {
    {"dense_null_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_NULL_CTX}, .any = {"ctx", "context"}},
    {"dense_null_params", FCL_ERR_INVALID_ARGUMENT, .edit = {E_NULL_PARAMS}, .tokens = {"params"}},
    {"dense_null_q", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(D_Q))}, .tokens = {"Q"}, .subs = {"NULL"}},
    {"dense_null_k", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(D_K))}, .tokens = {"K"}, .subs = {"NULL"}},
    {"dense_null_v", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(D_V))}, .tokens = {"V"}, .subs = {"NULL"}},
    /* O may be NULL only with LSE NULL */
    {"dense_null_o", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(D_O))}, .tokens = {"O", "LSE"},
     .subs = {"NULL"}},
    {"dense_null_do", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(D_DO))}, .tokens = {"dO"}, .subs = {"NULL"}},
    {"dense_null_dq", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(D_DQ))}, .tokens = {"dQ"}, .subs = {"NULL"}},
    {"dense_null_dk", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(D_DK))}, .tokens = {"dK"}, .subs = {"NULL"}},
    {"dense_null_dv", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(D_DV))}, .tokens = {"dV"}, .subs = {"NULL"}},
};

static const errors_case dense_tensors_of_another_context[] = {
    {"dense_q_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(D_Q))}, .tokens = {"Q"},
     .subs = {"context"}},
    {"dense_k_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(D_K))}, .tokens = {"K"},
     .subs = {"context"}},
    {"dense_o_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(D_O))}, .tokens = {"O"},
     .subs = {"context"}},
    {"dense_do_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(D_DO))}, .tokens = {"dO"},
     .subs = {"context"}},
    {"dense_lse_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(D_LSE))}, .tokens = {"LSE"},
     .subs = {"context"}},
    {"dense_dq_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(D_DQ))}, .tokens = {"dQ"},
     .subs = {"context"}},
    {"dense_dk_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(D_DK))}, .tokens = {"dK"},
     .subs = {"context"}},
    {"dense_dv_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(D_DV))}, .tokens = {"dV"},
     .subs = {"context"}},
    {"dense_key_mask_of_another_context", FCL_ERR_INVALID_ARGUMENT,
     .edit = {E_SPEC(S_MASK, FCL_F32, 2, B0, SK0, 0, 0), E_FOREIGN(BIT(S_MASK))}, .tokens = {"key_mask"},
     .subs = {"context"}},
    {"dense_alibi_of_another_context", FCL_ERR_INVALID_ARGUMENT,
     .edit = {E_SPEC(S_ALIBI, FCL_F32, 1, HQ0, 0, 0, 0), E_FOREIGN(BIT(S_ALIBI))}, .tokens = {"alibi_slopes"},
     .subs = {"context"}},
};

static const errors_case dense_ranks[] = {
    {"dense_q_rank_3", FCL_ERR_SHAPE, .edit = {E_SPEC(D_Q, FCL_F32, 3, SQ0, HQ0, D0, 0)}, .tokens = {"Q", "3", "4"}},
    {"dense_do_rank_3", FCL_ERR_SHAPE, .edit = {E_SPEC(D_DO, FCL_F32, 3, B0 * SQ0, HQ0, D0, 0)},
     .tokens = {"dO", "3", "4"}},
    {"dense_dq_rank_3", FCL_ERR_SHAPE, .edit = {E_SPEC(D_DQ, FCL_F32, 3, B0 * SQ0, HQ0, D0, 0)},
     .tokens = {"dQ", "3", "4"}},
    {"dense_dk_rank_2", FCL_ERR_SHAPE, .edit = {E_SPEC(D_DK, FCL_F32, 2, B0 * SK0 * HKV0, D0, 0, 0)},
     .tokens = {"dK", "2", "4"}},
    {"dense_dv_rank_1", FCL_ERR_SHAPE, .edit = {E_SPEC(D_DV, FCL_F32, 1, B0 * SK0 * HKV0 * D0, 0, 0, 0)},
     .tokens = {"dV", "1", "4"}},
    {"dense_lse_rank_2", FCL_ERR_SHAPE, .edit = {E_SPEC(D_LSE, FCL_F32, 2, B0 * HQ0, SQ0, 0, 0)},
     .tokens = {"LSE", "2", "3"}},
};

static const errors_case dense_gradient_shapes[] = {
    {"dense_do_seqlen_differs_from_o", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_DO), 1, 13)}, .tokens = {"dO", "13", "3"}},
    {"dense_do_head_dim_differs_from_o", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_DO), 3, 24)},
     .tokens = {"dO", "24", "16"}},
    /* [B, Hq, Sq, D] passed as if it were [B, Sq, Hq, D] */
    {"dense_do_transposed_heads_and_seq", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_DO), 1, HQ0), E_DIM(BIT(D_DO), 2, SQ0)},
     .tokens = {"dO", "6", "3"}},
    {"dense_dq_heads_differ_from_q", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_DQ), 2, 12)}, .tokens = {"dQ", "12", "6"}},
    {"dense_dq_batch_differs_from_q", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_DQ), 0, 7)}, .tokens = {"dQ", "7", "2"}},
    {"dense_dk_seqlen_differs_from_k", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_DK), 1, 11)}, .tokens = {"dK", "11", "5"}},
    /* a common slip: dK allocated like dQ ([B, Sq, Hq, D]) */
    {"dense_dk_shaped_like_q", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_DK), 1, SQ0), E_DIM(BIT(D_DK), 2, HQ0)},
     .tokens = {"dK", "5", "3"}},
    {"dense_dv_head_dim_differs_from_v", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_DV), 3, 32)},
     .tokens = {"dV", "32", "16"}},
    /* dV with Hq heads instead of Hkv */
    {"dense_dv_kv_heads_differ_from_v", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_DV), 2, HQ0)}, .tokens = {"dV", "6", "3"}},
};

static const errors_case dense_forward_problem_shapes[] = {
    {"dense_head_dim_mismatch_q_k", FCL_ERR_SHAPE, .edit = {E_DIM(DQS, 3, 96), E_DIM(DKS, 3, 64)},
     .tokens = {"96", "64"}},
    {"dense_head_dim_mismatch_k_v", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_V) | BIT(D_DV), 3, 40)},
     .tokens = {"V", "40", "16"}},
    {"dense_q_heads_not_multiple_of_kv_heads", FCL_ERR_SHAPE, .edit = {E_DIM(DKS, 2, 4)}, .tokens = {"6", "4"}},
    {"dense_head_dim_above_limit", FCL_ERR_UNSUPPORTED, .edit = {E_DIM(DQS | DKS, 3, FCL_MAX_HEAD_DIM + 1)},
     .tokens = {"257", "256"}},
    {"dense_o_seqlen_differs_from_q", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_O) | BIT(D_DO), 1, 9)},
     .tokens = {"O", "9", "3"}},
    {"dense_k_batch_differs_from_q", FCL_ERR_SHAPE, .edit = {E_DIM(DKS, 0, 4)}, .tokens = {"K", "4", "2"}},
    /* [B, Sq, Hq] instead of [B, Hq, Sq] */
    {"dense_lse_transposed", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_LSE), 1, SQ0), E_DIM(BIT(D_LSE), 2, HQ0)},
     .tokens = {"LSE", "6", "3"}},
    {"dense_lse_wrong_batch", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(D_LSE), 0, 5)}, .tokens = {"LSE", "5", "2"}},
};

static const errors_case dense_dtypes[] = {
    {"dense_do_dtype_f16", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(D_DO), FCL_F16)}, .tokens = {"dO", "f16", "f32"}},
    {"dense_dq_dtype_bf16", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(D_DQ), FCL_BF16)}, .tokens = {"dQ", "bf16", "f32"}},
    {"dense_dk_dtype_f16", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(D_DK), FCL_F16)}, .tokens = {"dK", "f16", "f32"}},
    {"dense_dv_dtype_i32", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(D_DV), FCL_I32)}, .tokens = {"dV", "i32", "f32"}},
    /* an f16 problem whose dV stays f32 */
    {"dense_f16_problem_with_f32_gradient", FCL_ERR_DTYPE, .edit = {E_DTYPE((DQS | DKS) & ~BIT(D_DV), FCL_F16)},
     .tokens = {"dV", "f32", "f16"}},
    {"dense_k_dtype_differs_from_q", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(D_K) | BIT(D_DK), FCL_F16)},
     .tokens = {"K", "f16", "f32"}},
    {"dense_lse_dtype_f16", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(D_LSE), FCL_F16)}, .tokens = {"LSE", "f16"}},
    {"dense_lse_dtype_i32", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(D_LSE), FCL_I32)}, .tokens = {"LSE", "i32"}},
    {"dense_all_dtype_i8", FCL_ERR_DTYPE, .edit = {E_DTYPE(DQS | DKS, FCL_I8)}, .tokens = {"Q", "i8"}},
    {"dense_all_dtype_i32", FCL_ERR_DTYPE, .edit = {E_DTYPE(DQS | DKS, FCL_I32)}, .tokens = {"Q", "i32"}},
};

/* E_ON_LAST(b, a): b starts on a's last element. The key mask and the ALiBi slopes are inputs
 * the kernels read while the gradients are written (the header: "dQ, dK, dV must not overlap
 * each other or any input"). */
static const errors_case dense_overlaps[] = {
    {"dense_dq_aliases_q", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_AS(D_DQ, D_Q)}, .tokens = {"dQ"},
     .subs = {"overlap"}},
    {"dense_dq_aliases_do", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_AS(D_DQ, D_DO)}, .tokens = {"dQ"},
     .subs = {"overlap"}},
    {"dense_dk_aliases_k", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_AS(D_DK, D_K)}, .tokens = {"dK"},
     .subs = {"overlap"}},
    {"dense_dv_aliases_v", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_AS(D_DV, D_V)}, .tokens = {"dV"},
     .subs = {"overlap"}},
    {"dense_dk_and_dv_same_tensor", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_AS(D_DV, D_DK)}, .tokens = {"dV", "dK"},
     .subs = {"overlap"}},
    {"dense_dq_overlaps_dk", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(D_DQ, 0), E_ON_LAST(D_DK, D_DQ)},
     .tokens = {"dQ", "dK"}, .subs = {"overlap"}},
    {"dense_dk_overlaps_dv", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(D_DK, 0), E_ON_LAST(D_DV, D_DK)},
     .tokens = {"dK", "dV"}, .subs = {"overlap"}},
    {"dense_dk_overlaps_do", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(D_DO, 0), E_ON_LAST(D_DK, D_DO)},
     .tokens = {"dK"}, .subs = {"overlap"}},
    {"dense_dq_overlaps_o", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(D_O, 0), E_ON_LAST(D_DQ, D_O)},
     .tokens = {"dQ"}, .subs = {"overlap"}},
    {"dense_dq_overlaps_v", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(D_V, 0), E_ON_LAST(D_DQ, D_V)},
     .tokens = {"dQ"}, .subs = {"overlap"}},
    {"dense_dv_overlaps_lse", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(D_LSE, 0), E_ON_LAST(D_DV, D_LSE)},
     .tokens = {"dV"}, .subs = {"overlap"}},
    {"dense_lse_inside_dk", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(D_DK, 0), E_ON_LAST(D_LSE, D_DK)},
     .tokens = {"dK"}, .subs = {"overlap"}},
    /* the mask at element 100 of dV's 480 */
    {"dense_dv_overlaps_key_mask", FCL_ERR_INVALID_ARGUMENT,
     .edit = {E_SPEC(S_MASK, FCL_F32, 2, B0, SK0, 0, 0), E_PLACE(D_DV, 0), E_PLACE(S_MASK, 100)}, .tokens = {"dV"}},
    /* the slopes at element 17 of dQ's 576 */
    {"dense_dq_overlaps_alibi_slopes", FCL_ERR_INVALID_ARGUMENT,
     .edit = {E_SPEC(S_ALIBI, FCL_F32, 1, HQ0, 0, 0, 0), E_PLACE(D_DQ, 0), E_PLACE(S_ALIBI, 17)}, .tokens = {"dQ"}},
};

static const errors_case dense_params[] = {
    {"dense_window_left_below_minus_one", FCL_ERR_INVALID_ARGUMENT, .edit = {E_WINDOW_LEFT(-2)},
     .tokens = {"window_left", "-2"}},
    {"dense_window_right_below_minus_one", FCL_ERR_INVALID_ARGUMENT, .edit = {E_WINDOW_RIGHT(-3)},
     .tokens = {"window_right", "-3"}},
    {"dense_softcap_negative", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SOFTCAP(-1.5f)}, .tokens = {"softcap", "-1.5"}},
    {"dense_softcap_inf", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SOFTCAP(INFINITY)}, .tokens = {"softcap", "inf"}},
    {"dense_softcap_nan", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SOFTCAP(NAN)}, .tokens = {"softcap", "nan"}},
    {"dense_scale_nan", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SCALE(NAN)}, .tokens = {"scale", "nan"}},
    {"dense_scale_inf", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SCALE(-INFINITY)}, .tokens = {"scale", "inf"}},
    {"dense_key_mask_wrong_length", FCL_ERR_SHAPE, .edit = {E_SPEC(S_MASK, FCL_F32, 2, B0, 19, 0, 0)},
     .tokens = {"key_mask", "19", "5"}},
    {"dense_key_mask_wrong_batch", FCL_ERR_SHAPE, .edit = {E_SPEC(S_MASK, FCL_F32, 2, 7, SK0, 0, 0)},
     .tokens = {"key_mask", "7", "5"}},
    {"dense_key_mask_rank_3", FCL_ERR_SHAPE, .edit = {E_SPEC(S_MASK, FCL_F32, 3, B0, 1, SK0, 0)},
     .tokens = {"key_mask", "5"}},
    {"dense_key_mask_dtype_f16", FCL_ERR_DTYPE, .edit = {E_SPEC(S_MASK, FCL_F16, 2, B0, SK0, 0, 0)},
     .tokens = {"key_mask", "f16"}},
    {"dense_key_mask_dtype_i32", FCL_ERR_DTYPE, .edit = {E_SPEC(S_MASK, FCL_I32, 1, SK0, 0, 0, 0)},
     .tokens = {"key_mask", "i32"}},
    {"dense_alibi_wrong_length", FCL_ERR_SHAPE, .edit = {E_SPEC(S_ALIBI, FCL_F32, 1, 9, 0, 0, 0)},
     .tokens = {"alibi_slopes", "9", "6"}},
    {"dense_alibi_kv_heads_instead_of_q_heads", FCL_ERR_SHAPE, .edit = {E_SPEC(S_ALIBI, FCL_F32, 2, B0, HKV0, 0, 0)},
     .tokens = {"alibi_slopes", "3", "6"}},
    {"dense_alibi_wrong_batch", FCL_ERR_SHAPE, .edit = {E_SPEC(S_ALIBI, FCL_F32, 2, 7, HQ0, 0, 0)},
     .tokens = {"alibi_slopes", "7", "6"}},
    {"dense_alibi_dtype_bf16", FCL_ERR_DTYPE, .edit = {E_SPEC(S_ALIBI, FCL_BF16, 1, HQ0, 0, 0, 0)},
     .tokens = {"alibi_slopes", "bf16"}},
};

static const errors_case dense_o_null_recompute[] = {
    RECOMPUTE_ROWS(dense, D_O, D_DO, D_LSE, 3, B0, SQ0 * HQ0 * D0),
    {"dense_recompute_dq_aliases_do", FCL_ERR_INVALID_ARGUMENT,
     .edit = {NO_O(D_O, D_LSE), E_PASS_AS(D_DQ, D_DO)}, .tokens = {"dQ"}},
};

static const errors_case dense_launch_grid_limits[] = {
    {"dense_batch_above_limit", FCL_ERR_UNSUPPORTED, .edit = {E_RESIZE(65536, 1, 1, 1, 1, 1)}, .tokens = {"65536"}},
    {"dense_q_heads_above_limit", FCL_ERR_UNSUPPORTED, .edit = {E_RESIZE(1, 1, 1, 65536, 1, 1)},
     .tokens = {"65536", "65535"}},
};

Test(backward_errors_dense, controls) { ERRORS_RUN(ERRORS_BACKWARD, dense_controls); }
Test(backward_errors_dense, null_arguments) { ERRORS_RUN(ERRORS_BACKWARD, dense_null_arguments); }
Test(backward_errors_dense, tensors_of_another_context)
{
    ERRORS_RUN(ERRORS_BACKWARD, dense_tensors_of_another_context);
}
Test(backward_errors_dense, ranks) { ERRORS_RUN(ERRORS_BACKWARD, dense_ranks); }
Test(backward_errors_dense, gradient_shapes) { ERRORS_RUN(ERRORS_BACKWARD, dense_gradient_shapes); }
Test(backward_errors_dense, forward_problem_shapes) { ERRORS_RUN(ERRORS_BACKWARD, dense_forward_problem_shapes); }
Test(backward_errors_dense, dtypes) { ERRORS_RUN(ERRORS_BACKWARD, dense_dtypes); }
Test(backward_errors_dense, overlaps) { ERRORS_RUN(ERRORS_BACKWARD, dense_overlaps); }
Test(backward_errors_dense, params) { ERRORS_RUN(ERRORS_BACKWARD, dense_params); }
Test(backward_errors_dense, o_null_recompute) { ERRORS_RUN(ERRORS_BACKWARD, dense_o_null_recompute); }
Test(backward_errors_dense, launch_grid_limits) { ERRORS_RUN(ERRORS_BACKWARD, dense_launch_grid_limits); }

/* ================================================================== varlen */

static const errors_case varlen_controls[] = {
    {"varlen_control_valid_call_succeeds_and_writes_gradients", FCL_SUCCESS, .edit = {E_FORWARD_FIRST}},
    /* NULL LSE; a [total_k] key mask, [B, Hq] ALiBi, causal and softcap */
    {"varlen_control_valid_optional_inputs_accepted/null_lse", FCL_SUCCESS, .edit = {E_ABSENT(BIT(V_LSE))}},
    {"varlen_control_valid_optional_inputs_accepted/mask_total_k_alibi_b_hq_causal_softcap", FCL_SUCCESS,
     .edit = {E_SPEC(S_MASK, FCL_F32, 1, TK0, 0, 0, 0), E_SPEC(S_ALIBI, FCL_F32, 2, VB, VHQ, 0, 0), E_CAUSAL,
              E_SOFTCAP(20.0f), E_FORWARD_FIRST}},
    {"varlen_valid_call_after_failed_one_clears_error", FCL_SUCCESS, .edit = {E_FAIL_FIRST(V_CUK)}},
};

static const errors_case varlen_null_arguments[] = {
    {"varlen_null_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_NULL_CTX}, .any = {"ctx", "context"}},
    {"varlen_null_params", FCL_ERR_INVALID_ARGUMENT, .edit = {E_NULL_PARAMS}, .tokens = {"params"}},
    {"varlen_null_q", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(V_Q))}, .tokens = {"Q"}, .subs = {"NULL"}},
    {"varlen_null_k", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(V_K))}, .tokens = {"K"}, .subs = {"NULL"}},
    {"varlen_null_v", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(V_V))}, .tokens = {"V"}, .subs = {"NULL"}},
    {"varlen_null_o", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(V_O))}, .tokens = {"O", "LSE"},
     .subs = {"NULL"}},
    {"varlen_null_do", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(V_DO))}, .tokens = {"dO"}, .subs = {"NULL"}},
    {"varlen_null_cu_seqlens_q", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(V_CUQ))},
     .tokens = {"cu_seqlens_q"}, .subs = {"NULL"}},
    {"varlen_null_cu_seqlens_k", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(V_CUK))},
     .tokens = {"cu_seqlens_k"}, .subs = {"NULL"}},
    {"varlen_null_dq", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(V_DQ))}, .tokens = {"dQ"}, .subs = {"NULL"}},
    {"varlen_null_dk", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(V_DK))}, .tokens = {"dK"}, .subs = {"NULL"}},
    {"varlen_null_dv", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(V_DV))}, .tokens = {"dV"}, .subs = {"NULL"}},
};

static const errors_case varlen_tensors_of_another_context[] = {
    {"varlen_cu_seqlens_q_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(V_CUQ))},
     .tokens = {"cu_seqlens_q"}, .subs = {"context"}},
    {"varlen_do_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(V_DO))}, .tokens = {"dO"},
     .subs = {"context"}},
    {"varlen_dk_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(V_DK))}, .tokens = {"dK"},
     .subs = {"context"}},
};

static const errors_case varlen_prefix_sums[] = {
    {"varlen_cu_seqlens_q_dtype_f32", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(V_CUQ), FCL_F32)},
     .tokens = {"cu_seqlens_q", "f32", "i32"}},
    {"varlen_cu_seqlens_k_dtype_i8", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(V_CUK), FCL_I8)},
     .tokens = {"cu_seqlens_k", "i8", "i32"}},
    {"varlen_cu_seqlens_q_rank_2", FCL_ERR_SHAPE, .edit = {E_SPEC(V_CUQ, FCL_I32, 2, 1, VB + 1, 0, 0)},
     .tokens = {"cu_seqlens_q", "2", "1"}},
    {"varlen_cu_seqlens_lengths_differ", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(V_CUK), 0, 4)},
     .tokens = {"cu_seqlens_q", "cu_seqlens_k", "3", "4"}},
    /* B = 0 */
    {"varlen_cu_seqlens_one_entry", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(V_CUQ) | BIT(V_CUK), 0, 1)},
     .tokens = {"cu_seqlens", "1"}},
    {"varlen_max_seqlen_q_negative", FCL_ERR_INVALID_ARGUMENT, .edit = {E_MAX_Q(-1)}, .tokens = {"max_seqlen_q", "-1"}},
    {"varlen_max_seqlen_k_negative", FCL_ERR_INVALID_ARGUMENT, .edit = {E_MAX_K(-7)}, .tokens = {"max_seqlen_k", "-7"}},
};

static const errors_case varlen_gradient_shapes_and_dtypes[] = {
    {"varlen_dq_rows_differ_from_total_q", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(V_DQ), 0, 8)},
     .tokens = {"dQ", "8", "7"}},
    {"varlen_dq_rank_4", FCL_ERR_SHAPE, .edit = {E_SPEC(V_DQ, FCL_F32, 4, 1, TQ0, VHQ, D0)},
     .tokens = {"dQ", "4", "3"}},
    {"varlen_dk_rows_total_q_instead_of_total_k", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(V_DK), 0, TQ0)},
     .tokens = {"dK", "7", "9"}},
    {"varlen_dv_heads_hq_instead_of_hkv", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(V_DV), 1, VHQ)},
     .tokens = {"dV", "4", "2"}},
    {"varlen_do_head_dim_differs_from_o", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(V_DO), 2, 20)},
     .tokens = {"dO", "20", "16"}},
    {"varlen_dq_dtype_f16", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(V_DQ), FCL_F16)}, .tokens = {"dQ", "f16", "f32"}},
    {"varlen_do_dtype_bf16", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(V_DO), FCL_BF16)}, .tokens = {"dO", "bf16", "f32"}},
    {"varlen_q_dtype_i8", FCL_ERR_DTYPE, .edit = {E_DTYPE(VQS | VKS, FCL_I8)}, .tokens = {"Q", "i8"}},
};

static const errors_case varlen_lse_heads[] = {
    /* [total_q, Hq] instead of [Hq, total_q] */
    {"varlen_lse_transposed", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(V_LSE), 0, TQ0), E_DIM(BIT(V_LSE), 1, VHQ)},
     .tokens = {"LSE", "7", "4"}},
    /* the dense [B, Hq, max_seqlen_q] */
    {"varlen_lse_dense_shape", FCL_ERR_SHAPE, .edit = {E_SPEC(V_LSE, FCL_F32, 3, VB, VHQ, VMAXQ, 0)},
     .tokens = {"LSE", "3", "2"}},
    {"varlen_lse_dtype_f16", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(V_LSE), FCL_F16)}, .tokens = {"LSE", "f16"}},
    {"varlen_head_dim_mismatch_q_k", FCL_ERR_SHAPE, .edit = {E_DIM(VQS, 2, 48), E_DIM(VKS, 2, 32)},
     .tokens = {"48", "32"}},
    {"varlen_q_heads_not_multiple_of_kv_heads", FCL_ERR_SHAPE, .edit = {E_DIM(VKS, 1, 3)}, .tokens = {"4", "3"}},
    {"varlen_head_dim_above_limit", FCL_ERR_UNSUPPORTED, .edit = {E_DIM(VQS | VKS, 2, 300)},
     .tokens = {"300", "256"}},
};

/* cu_seqlens are inputs too: I32 views of a gradient's buffer inside its range. */
static const errors_case varlen_overlaps[] = {
    {"varlen_dq_aliases_q", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_AS(V_DQ, V_Q)}, .tokens = {"dQ"}},
    /* dV over the second half of dK's 288 elements */
    {"varlen_dk_overlaps_dv", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(V_DK, 0), E_PLACE(V_DV, 144)},
     .tokens = {"dK", "dV"}},
    {"varlen_dq_overlaps_lse", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(V_LSE, 0), E_ON_LAST(V_DQ, V_LSE)},
     .tokens = {"dQ"}},
    /* cu_seqlens_q at element 40 of dQ's 448 */
    {"varlen_dq_overlaps_cu_seqlens_q", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(V_DQ, 0), E_PLACE(V_CUQ, 40)},
     .tokens = {"dQ"}},
    /* dK starting on cu_seqlens_k[2] */
    {"varlen_dk_overlaps_cu_seqlens_k", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(V_CUK, 0), E_ON_LAST(V_DK, V_CUK)},
     .tokens = {"dK"}},
};

static const errors_case varlen_params[] = {
    /* varlen masks are one value per key row: [total_k] only */
    {"varlen_key_mask_per_batch_rejected", FCL_ERR_SHAPE, .edit = {E_SPEC(S_MASK, FCL_F32, 2, VB, TK0, 0, 0)},
     .tokens = {"key_mask", "9"}},
    {"varlen_key_mask_max_seqlen_k_long", FCL_ERR_SHAPE, .edit = {E_SPEC(S_MASK, FCL_F32, 1, VMAXK, 0, 0, 0)},
     .tokens = {"key_mask", "5", "9"}},
    {"varlen_alibi_wrong_batch", FCL_ERR_SHAPE, .edit = {E_SPEC(S_ALIBI, FCL_F32, 2, VB + 1, VHQ, 0, 0)},
     .tokens = {"alibi_slopes", "3", "4"}},
    {"varlen_window_left_below_minus_one", FCL_ERR_INVALID_ARGUMENT, .edit = {E_WINDOW_LEFT(-5)},
     .tokens = {"window_left", "-5"}},
    {"varlen_softcap_negative", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SOFTCAP(-0.25f)}, .tokens = {"softcap", "-0.25"}},
};

static const errors_case varlen_o_null_recompute[] = {
    RECOMPUTE_ROWS(varlen, V_O, V_DO, V_LSE, 2, TQ0, VHQ * D0),
};

static const errors_case varlen_launch_grid_limits[] = {
    {"varlen_q_heads_above_limit", FCL_ERR_UNSUPPORTED, .edit = {E_DIM(VQS, 1, 65536), E_DIM(BIT(V_LSE), 0, 65536)},
     .tokens = {"65536", "65535"}},
    /* 65536 sequences: beyond the launch grid like a dense B of 65536 (FCL_ERR_UNSUPPORTED
     * there), but the varlen check reports it as a shape error; either status is accepted */
    {"varlen_batch_above_limit", FCL_ERR_UNSUPPORTED, .edit = {E_DIM(BIT(V_CUQ) | BIT(V_CUK), 0, 65537)},
     .tokens = {"65537"}, .also = FCL_ERR_SHAPE},
};

Test(backward_errors_varlen, controls) { ERRORS_RUN(ERRORS_VARLEN_BACKWARD, varlen_controls); }
Test(backward_errors_varlen, null_arguments) { ERRORS_RUN(ERRORS_VARLEN_BACKWARD, varlen_null_arguments); }
Test(backward_errors_varlen, tensors_of_another_context)
{
    ERRORS_RUN(ERRORS_VARLEN_BACKWARD, varlen_tensors_of_another_context);
}
Test(backward_errors_varlen, prefix_sums) { ERRORS_RUN(ERRORS_VARLEN_BACKWARD, varlen_prefix_sums); }
Test(backward_errors_varlen, gradient_shapes_and_dtypes)
{
    ERRORS_RUN(ERRORS_VARLEN_BACKWARD, varlen_gradient_shapes_and_dtypes);
}
Test(backward_errors_varlen, lse_heads) { ERRORS_RUN(ERRORS_VARLEN_BACKWARD, varlen_lse_heads); }
Test(backward_errors_varlen, overlaps) { ERRORS_RUN(ERRORS_VARLEN_BACKWARD, varlen_overlaps); }
Test(backward_errors_varlen, params) { ERRORS_RUN(ERRORS_VARLEN_BACKWARD, varlen_params); }
Test(backward_errors_varlen, o_null_recompute) { ERRORS_RUN(ERRORS_VARLEN_BACKWARD, varlen_o_null_recompute); }
Test(backward_errors_varlen, launch_grid_limits) { ERRORS_RUN(ERRORS_VARLEN_BACKWARD, varlen_launch_grid_limits); }

/* ================================================================== packed */

static const errors_case packed_controls[] = {
    {"packed_control_valid_call_succeeds_and_writes_gradients", FCL_SUCCESS, .edit = {E_FORWARD_FIRST}},
    /* NULL LSE; an [L] key mask, [H] ALiBi, windows; a dQKV in [L, H, 3, D] storage (permuted
     * strides, slices interleaved but disjoint) */
    {"packed_control_valid_optional_inputs_accepted/null_lse", FCL_SUCCESS, .edit = {E_ABSENT(BIT(P_LSE))}},
    {"packed_control_valid_optional_inputs_accepted/mask_l_alibi_h_windows", FCL_SUCCESS,
     .edit = {E_SPEC(S_MASK, FCL_F32, 1, PL, 0, 0, 0), E_SPEC(S_ALIBI, FCL_F32, 1, PH, 0, 0, 0), E_WINDOW_LEFT(1),
              E_WINDOW_RIGHT(1), E_FORWARD_FIRST}},
    {"packed_control_valid_optional_inputs_accepted/dqkv_in_l_h_3_d_storage", FCL_SUCCESS,
     .edit = {E_STRIDES(P_DQKV, PH * 3 * D0, D0, 3 * D0, 1), E_PLACE(P_DQKV, 0), E_FORWARD_FIRST}},
    {"packed_valid_call_after_failed_one_clears_error", FCL_SUCCESS, .edit = {E_FAIL_FIRST(P_DQKV)}},
};

static const errors_case packed_null_arguments[] = {
    {"packed_null_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_NULL_CTX}, .any = {"ctx", "context"}},
    {"packed_null_params", FCL_ERR_INVALID_ARGUMENT, .edit = {E_NULL_PARAMS}, .tokens = {"params"}},
    {"packed_null_qkv", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(P_QKV))}, .tokens = {"QKV"},
     .subs = {"NULL"}},
    {"packed_null_o", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(P_O))}, .tokens = {"O", "LSE"},
     .subs = {"NULL"}},
    {"packed_null_do", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(P_DO))}, .tokens = {"dO"}, .subs = {"NULL"}},
    {"packed_null_seq_bounds", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(P_BOUNDS))},
     .tokens = {"seq_bounds"}, .subs = {"NULL"}},
    {"packed_null_dqkv", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_NULL(BIT(P_DQKV))}, .tokens = {"dQKV"},
     .subs = {"NULL"}},
};

static const errors_case packed_tensors_of_another_context[] = {
    {"packed_seq_bounds_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(P_BOUNDS))},
     .tokens = {"seq_bounds"}, .subs = {"context"}},
    {"packed_do_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(P_DO))}, .tokens = {"dO"},
     .subs = {"context"}},
    {"packed_dqkv_of_another_context", FCL_ERR_INVALID_ARGUMENT, .edit = {E_FOREIGN(BIT(P_DQKV))},
     .tokens = {"dQKV"}, .subs = {"context"}},
};

static const errors_case packed_qkv_dqkv[] = {
    {"packed_qkv_dim1_is_2", FCL_ERR_SHAPE, .edit = {E_DIM(PQKV, 1, 2)}, .tokens = {"QKV", "2", "3"}},
    {"packed_qkv_rank_3", FCL_ERR_SHAPE, .edit = {E_SPEC(P_QKV, FCL_F32, 3, PL, 3 * PH, D0, 0)},
     .tokens = {"QKV", "3", "4"}},
    {"packed_dqkv_dim1_is_4", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(P_DQKV), 1, 4)}, .tokens = {"dQKV", "4", "3"}},
    {"packed_dqkv_rows_differ", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(P_DQKV), 0, 10)}, .tokens = {"dQKV", "10", "6"}},
    {"packed_dqkv_rank_3", FCL_ERR_SHAPE, .edit = {E_SPEC(P_DQKV, FCL_F32, 3, PL, 3 * PH, D0, 0)},
     .tokens = {"dQKV", "3", "4"}},
    {"packed_dqkv_dtype_f16", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(P_DQKV), FCL_F16)},
     .tokens = {"dQKV", "f16", "f32"}},
    {"packed_dqkv_dtype_i32", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(P_DQKV), FCL_I32)},
     .tokens = {"dQKV", "i32", "f32"}},
    {"packed_qkv_dtype_i8", FCL_ERR_DTYPE, .edit = {E_DTYPE(PQKV | PODO, FCL_I8)}, .tokens = {"Q", "i8"}},
    {"packed_head_dim_above_limit", FCL_ERR_UNSUPPORTED, .edit = {E_DIM(PQKV, 3, 512), E_DIM(PODO, 2, 512)},
     .tokens = {"512", "256"}},
};

static const errors_case packed_o_do_lse[] = {
    {"packed_do_head_dim_differs_from_o", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(P_DO), 2, 8)},
     .tokens = {"dO", "8", "16"}},
    {"packed_do_rank_4", FCL_ERR_SHAPE, .edit = {E_SPEC(P_DO, FCL_F32, 4, 1, PL, PH, D0)}, .tokens = {"dO", "4", "3"}},
    {"packed_do_dtype_f16", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(P_DO), FCL_F16)}, .tokens = {"dO", "f16", "f32"}},
    {"packed_o_rows_differ", FCL_ERR_SHAPE, .edit = {E_DIM(PODO, 0, 5)}, .tokens = {"O", "5", "6"}},
    {"packed_lse_transposed", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(P_LSE), 0, PL), E_DIM(BIT(P_LSE), 1, PH)},
     .tokens = {"LSE", "6", "2"}},
    {"packed_lse_dtype_bf16", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(P_LSE), FCL_BF16)}, .tokens = {"LSE", "bf16"}},
};

static const errors_case packed_seq_bounds[] = {
    {"packed_seq_bounds_three_columns", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(P_BOUNDS), 1, 3)},
     .tokens = {"seq_bounds", "3", "2"}},
    {"packed_seq_bounds_rows_differ", FCL_ERR_SHAPE, .edit = {E_DIM(BIT(P_BOUNDS), 0, 7)},
     .tokens = {"seq_bounds", "7", "6"}},
    {"packed_seq_bounds_rank_1", FCL_ERR_SHAPE, .edit = {E_SPEC(P_BOUNDS, FCL_I32, 1, 2 * PL, 0, 0, 0)},
     .tokens = {"seq_bounds", "1", "2"}},
    {"packed_seq_bounds_dtype_f32", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(P_BOUNDS), FCL_F32)},
     .tokens = {"seq_bounds", "f32", "i32"}},
    {"packed_seq_bounds_dtype_i8", FCL_ERR_DTYPE, .edit = {E_DTYPE(BIT(P_BOUNDS), FCL_I8)},
     .tokens = {"seq_bounds", "i8", "i32"}},
};

static const errors_case packed_overlaps[] = {
    {"packed_dqkv_aliases_qkv", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PASS_AS(P_DQKV, P_QKV)}, .tokens = {"dQKV"},
     .subs = {"overlap"}},
    {"packed_dqkv_overlaps_qkv", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(P_QKV, 0), E_ON_LAST(P_DQKV, P_QKV)},
     .tokens = {"dQKV"}},
    {"packed_dqkv_overlaps_o", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(P_DQKV, 0), E_ON_LAST(P_O, P_DQKV)},
     .tokens = {"dQKV"}},
    {"packed_dqkv_overlaps_do", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(P_DO, 0), E_ON_LAST(P_DQKV, P_DO)},
     .tokens = {"dQKV"}},
    {"packed_dqkv_overlaps_lse", FCL_ERR_INVALID_ARGUMENT, .edit = {E_PLACE(P_DQKV, 0), E_ON_LAST(P_LSE, P_DQKV)},
     .tokens = {"dQKV"}},
    /* seq_bounds is an input the kernels read while dQKV is written: an I32 view at element
     * 64 of dQKV's 576 */
    {"packed_dqkv_overlaps_seq_bounds", FCL_ERR_INVALID_ARGUMENT,
     .edit = {E_PLACE(P_DQKV, 0), E_PLACE(P_BOUNDS, 64)}, .tokens = {"dQKV"}},
    /* a dQKV whose dim-1 stride is 0: its dQ, dK and dV slices are the same memory, which the
     * backward's "dQ, dK, dV must not overlap each other" rules out */
    {"packed_dqkv_slices_alias_each_other", FCL_ERR_INVALID_ARGUMENT,
     .edit = {E_STRIDES(P_DQKV, PH * D0, 0, D0, 1), E_PLACE(P_DQKV, 0)}, .tokens = {"dQKV"}},
};

static const errors_case packed_params[] = {
    {"packed_key_mask_per_batch_rejected", FCL_ERR_SHAPE, .edit = {E_SPEC(S_MASK, FCL_F32, 2, 1, PL, 0, 0)},
     .tokens = {"key_mask", "6"}},
    {"packed_alibi_per_batch_rejected", FCL_ERR_SHAPE, .edit = {E_SPEC(S_ALIBI, FCL_F32, 2, 2, PH, 0, 0)},
     .tokens = {"alibi_slopes", "2"}},
    {"packed_key_mask_dtype_i8", FCL_ERR_DTYPE, .edit = {E_SPEC(S_MASK, FCL_I8, 1, PL, 0, 0, 0)},
     .tokens = {"key_mask", "i8"}},
    {"packed_window_right_below_minus_one", FCL_ERR_INVALID_ARGUMENT, .edit = {E_WINDOW_RIGHT(-9)},
     .tokens = {"window_right", "-9"}},
    {"packed_scale_nan", FCL_ERR_INVALID_ARGUMENT, .edit = {E_SCALE(NAN)}, .tokens = {"scale", "nan"}},
};

static const errors_case packed_o_null_recompute[] = {
    RECOMPUTE_ROWS(packed, P_O, P_DO, P_LSE, 2, PL, PH * D0),
    {"packed_recompute_dqkv_overlaps_do", FCL_ERR_INVALID_ARGUMENT,
     .edit = {NO_O(P_O, P_LSE), E_PLACE(P_DO, 0), E_ON_LAST(P_DQKV, P_DO)}, .tokens = {"dQKV"}},
};

static const errors_case packed_launch_grid_limits[] = {
    {"packed_heads_above_limit", FCL_ERR_UNSUPPORTED,
     .edit = {E_DIM(PQKV, 2, 65536), E_DIM(PODO, 1, 65536), E_DIM(BIT(P_LSE), 0, 65536)},
     .tokens = {"65536", "65535"}},
};

Test(backward_errors_packed, controls) { ERRORS_RUN(ERRORS_PACKED_BACKWARD, packed_controls); }
Test(backward_errors_packed, null_arguments) { ERRORS_RUN(ERRORS_PACKED_BACKWARD, packed_null_arguments); }
Test(backward_errors_packed, tensors_of_another_context)
{
    ERRORS_RUN(ERRORS_PACKED_BACKWARD, packed_tensors_of_another_context);
}
Test(backward_errors_packed, qkv_dqkv) { ERRORS_RUN(ERRORS_PACKED_BACKWARD, packed_qkv_dqkv); }
Test(backward_errors_packed, o_do_lse) { ERRORS_RUN(ERRORS_PACKED_BACKWARD, packed_o_do_lse); }
Test(backward_errors_packed, seq_bounds) { ERRORS_RUN(ERRORS_PACKED_BACKWARD, packed_seq_bounds); }
Test(backward_errors_packed, overlaps) { ERRORS_RUN(ERRORS_PACKED_BACKWARD, packed_overlaps); }
Test(backward_errors_packed, params) { ERRORS_RUN(ERRORS_PACKED_BACKWARD, packed_params); }
Test(backward_errors_packed, o_null_recompute) { ERRORS_RUN(ERRORS_PACKED_BACKWARD, packed_o_null_recompute); }
Test(backward_errors_packed, launch_grid_limits) { ERRORS_RUN(ERRORS_PACKED_BACKWARD, packed_launch_grid_limits); }
