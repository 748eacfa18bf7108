/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_attention_packed_qkv_forward: rows of a fused QKV projection, sequences given per row. */
#include "ops/forward_launch.h"
#include "ops/problem_checks.h"

static const char *const op = "fcl_attention_packed_qkv_forward";


fcl_status fcl_attention_packed_qkv_forward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor QKV,
                                            fcl_tensor seq_bounds, fcl_tensor O, fcl_tensor LSE, cl_event *event)
{
    FCL_LOCK(ctx);
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    fcl_status s = fcl_check_packed_problem(ctx, op, QKV, seq_bounds, O, "O", LSE);
    if (s != FCL_SUCCESS)
        return s;
    /* Q, K and V are the three slices of dim 1: views of QKV at offsets 0, 1 and 2 steps of
     * that dim, sharing its row and head strides. */
    struct fcl_tensor_s q = *QKV, k = *QKV, v = *QKV;
    k.offset += QKV->strides[1];
    v.offset += 2 * QKV->strides[1];
    const int64_t L = QKV->shape[0], H = QKV->shape[2], D = QKV->shape[3];
    fcl_forward_job job = {
        .op = op, .layout = FCL_LAYOUT_PACKED, .dtype = QKV->dtype, .D = D, .Hq = H, .Hkv = H, .grid_b = 1,
        .sq = L, .sk = L, .total_q = L, .total_k = L, .Q = &q, .K = &k, .V = &v, .O = O, .LSE = LSE,
        .q_dims = {-1, 0, 2}, .k_dims = {-1, 0, 2}, .v_dims = {-1, 0, 2}, .o_dims = {-1, 0, 1},
        .lse_dims = {-1, 0, 1}, .seq_q = seq_bounds,
    };
    if ((s = fcl_resolve_attn_params(ctx, op, params, 0, L, 0, H, D, L, L, &job.params)) ||
        (s = fcl_check_forward_outputs(ctx, op, O, LSE, QKV, QKV, QKV, params, seq_bounds, "seq_bounds", NULL, NULL)))
        return s;
    return fcl_forward_launch(ctx, &job, event);
}
