/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_attention_varlen_forward: packed sequences with device prefix sums; and
 * fcl_varlen_validate, the optional host check of those prefix sums. */
#include "ops/forward_launch.h"
#include "ops/problem_checks.h"

#include <stdlib.h>

static const char *const op = "fcl_attention_varlen_forward";


fcl_status fcl_attention_varlen_forward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q, fcl_tensor K,
                                        fcl_tensor V, fcl_tensor cu_seqlens_q, fcl_tensor cu_seqlens_k,
                                        int max_seqlen_q, int max_seqlen_k, fcl_tensor O, fcl_tensor LSE,
                                        cl_event *event)
{
    FCL_LOCK(ctx);
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    fcl_status s = fcl_check_varlen_problem(ctx, op, Q, K, V, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                            max_seqlen_k, O, "O", LSE);
    if (s != FCL_SUCCESS)
        return s;
    fcl_forward_job job = {
        .op = op, .layout = FCL_LAYOUT_VARLEN, .dtype = Q->dtype, .D = Q->shape[2], .Hq = Q->shape[1],
        .Hkv = K->shape[1], .grid_b = cu_seqlens_q->shape[0] - 1,
        /* no sequence can be longer than its tensor: bounds past the totals size nothing */
        .sq = max_seqlen_q < Q->shape[0] ? max_seqlen_q : Q->shape[0],
        .sk = max_seqlen_k < K->shape[0] ? max_seqlen_k : K->shape[0],
        .total_q = Q->shape[0], .total_k = K->shape[0], .Q = Q, .K = K, .V = V, .O = O, .LSE = LSE,
        .q_dims = {-1, 0, 1}, .k_dims = {-1, 0, 1}, .v_dims = {-1, 0, 1}, .o_dims = {-1, 0, 1},
        .lse_dims = {-1, 0, 1}, .seq_q = cu_seqlens_q, .seq_k = cu_seqlens_k,
    };
    if ((s = fcl_resolve_attn_params(ctx, op, params, 0, job.total_k, job.grid_b, job.Hq, job.D, job.sq, job.sk,
                                       &job.params)) ||
        (s = fcl_check_forward_outputs(ctx, op, O, LSE, Q, K, V, params, cu_seqlens_q, "cu_seqlens_q", cu_seqlens_k,
                                       "cu_seqlens_k")))
        return s;
    return fcl_forward_launch(ctx, &job, event);
}

/* Checks one prefix-sum array read back from the device. */
static fcl_status check_prefix(fcl_context ctx, const char *name, const int32_t *cu, int64_t n, int64_t total,
                               int max_len, const char *max_name)
{
    if (cu[0] != 0)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_varlen_validate: %s[0] is %d; expected 0", name, cu[0]);
    for (int64_t b = 0; b + 1 < n; b++) {
        if (cu[b + 1] < cu[b])
            return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_varlen_validate: %s[%lld] = %d is below %s[%lld] = %d",
                            name, (long long)(b + 1), cu[b + 1], name, (long long)b, cu[b]);
        if (cu[b + 1] - cu[b] > max_len)
            return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT,
                            "fcl_varlen_validate: sequence %lld has length %d (%s[%lld] - %s[%lld]) above %s %d",
                            (long long)b, cu[b + 1] - cu[b], name, (long long)(b + 1), name, (long long)b, max_name,
                            max_len);
    }
    if (cu[n - 1] != total)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_varlen_validate: %s[%lld] is %d; expected the total %lld",
                        name, (long long)(n - 1), cu[n - 1], (long long)total);
    return FCL_SUCCESS;
}

fcl_status fcl_varlen_validate(fcl_context ctx, fcl_tensor cu_seqlens_q, fcl_tensor cu_seqlens_k, int64_t total_q,
                               int64_t total_k, int max_seqlen_q, int max_seqlen_k)
{
    FCL_LOCK(ctx);
    static const char *const vop = "fcl_varlen_validate";
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", vop);
    fcl_clear_error(ctx);
    fcl_status s;
    if ((s = fcl_check_index_tensor(ctx, vop, cu_seqlens_q, "cu_seqlens_q", 1)) ||
        (s = fcl_check_index_tensor(ctx, vop, cu_seqlens_k, "cu_seqlens_k", 1)))
        return s;
    const int64_t n = cu_seqlens_q->shape[0];
    if (cu_seqlens_k->shape[0] != n)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: cu_seqlens_q has %lld entries but cu_seqlens_k has %lld", vop,
                        (long long)n, (long long)cu_seqlens_k->shape[0]);
    int32_t *host = malloc(sizeof(int32_t) * (size_t)n * 2);
    if (!host)
        return fcl_fail(ctx, FCL_ERR_OUT_OF_MEMORY, "%s: out of host memory", vop);
    if ((s = fcl_tensor_read_raw(cu_seqlens_q, host, sizeof(int32_t) * (size_t)n)) == FCL_SUCCESS &&
        (s = fcl_tensor_read_raw(cu_seqlens_k, host + n, sizeof(int32_t) * (size_t)n)) == FCL_SUCCESS &&
        (s = check_prefix(ctx, "cu_seqlens_q", host, n, total_q, max_seqlen_q, "max_seqlen_q")) == FCL_SUCCESS)
        s = check_prefix(ctx, "cu_seqlens_k", host + n, n, total_k, max_seqlen_k, "max_seqlen_k");
    free(host);
    return s;
}
