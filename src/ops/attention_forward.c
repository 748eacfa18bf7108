/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_attention_forward: the dense [B, S, H, D] forward's checks; the launch is shared. */
#include "ops/forward_launch.h"
#include "ops/problem_checks.h"

static const char *const op = "fcl_attention_forward";


fcl_status fcl_attention_forward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q, fcl_tensor K,
                                 fcl_tensor V, fcl_tensor O, fcl_tensor LSE, cl_event *event)
{
    FCL_LOCK(ctx);
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    fcl_status s = fcl_check_dense_problem(ctx, op, Q, K, V, O, "O", LSE);
    if (s != FCL_SUCCESS)
        return s;
    fcl_forward_job job = {
        .op = op, .layout = FCL_LAYOUT_DENSE, .dtype = Q->dtype, .D = Q->shape[3], .Hq = Q->shape[2],
        .Hkv = K->shape[2], .grid_b = Q->shape[0], .sq = Q->shape[1], .sk = K->shape[1],
        .Q = Q, .K = K, .V = V, .O = O, .LSE = LSE,
        .q_dims = {0, 1, 2}, .k_dims = {0, 1, 2}, .v_dims = {0, 1, 2}, .o_dims = {0, 1, 2}, .lse_dims = {0, 1, 2},
    };
    if ((s = fcl_resolve_attn_params(ctx, op, params, job.grid_b, job.sk, job.grid_b, job.Hq, job.D, job.sq, job.sk,
                                       &job.params)) ||
        (s = fcl_check_forward_outputs(ctx, op, O, LSE, Q, K, V, params, NULL, NULL, NULL, NULL)))
        return s;
    return fcl_forward_launch(ctx, &job, event);
}
