/* fcl_attention_forward: the dense [B, S, H, D] forward's checks; the launch is shared. */
#include "forward_launch.h"
#include "op_checks.h"

static const char *const op = "fcl_attention_forward";

static fcl_status validate(fcl_context ctx, fcl_tensor Q, fcl_tensor K, fcl_tensor V, fcl_tensor O, fcl_tensor LSE)
{
    fcl_status s;
    if ((s = fcl_check_tensor(ctx, op, Q, "Q", 4)) || (s = fcl_check_tensor(ctx, op, K, "K", 4)) ||
        (s = fcl_check_tensor(ctx, op, V, "V", 4)) || (s = fcl_check_tensor(ctx, op, O, "O", 4)) ||
        (LSE && (s = fcl_check_tensor(ctx, op, LSE, "LSE", 3))))
        return s;
    if ((s = fcl_check_attention_dtypes(ctx, op, Q, K, V, O, LSE)) != FCL_SUCCESS)
        return s;
    const int64_t B = Q->shape[0], Sq = Q->shape[1], Hq = Q->shape[2], D = Q->shape[3];
    const int64_t Sk = K->shape[1], Hkv = K->shape[2];
    if (K->shape[3] != D)
        return fcl_check_heads(ctx, op, Hq, Hkv, D, K->shape[3]);
    const int64_t kshape[4] = {B, Sk, Hkv, D};
    if (!fcl_same_shape(K, kshape))
        return fcl_shape_error(ctx, op, "K", K, "(batch must match Q's)", kshape, 4);
    if (!fcl_same_shape(V, kshape))
        return fcl_shape_error(ctx, op, "V", V, "like K", kshape, 4);
    if (!fcl_same_shape(O, Q->shape))
        return fcl_shape_error(ctx, op, "O", O, "like Q", Q->shape, 4);
    const int64_t lshape[3] = {B, Hq, Sq};
    if (LSE && !fcl_same_shape(LSE, lshape))
        return fcl_shape_error(ctx, op, "LSE", LSE, "[B, Hq, Sq] =", lshape, 3);
    if ((s = fcl_check_heads(ctx, op, Hq, Hkv, D, D)) != FCL_SUCCESS)
        return s;
    if (Sq > INT32_MAX / 2 || Sk > INT32_MAX / 2 || B > 65535)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: B %lld, Sq %lld or Sk %lld beyond the supported range", op,
                        (long long)B, (long long)Sq, (long long)Sk);
    if (fcl_overlaps(O, Q) || fcl_overlaps(O, K) || fcl_overlaps(O, V) || fcl_overlaps(O, LSE))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: O overlaps Q, K, V or LSE in the same buffer", op);
    return FCL_SUCCESS;
}

fcl_status fcl_attention_forward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q, fcl_tensor K,
                                 fcl_tensor V, fcl_tensor O, fcl_tensor LSE, cl_event *event)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    fcl_status s = validate(ctx, Q, K, V, O, LSE);
    if (s != FCL_SUCCESS)
        return s;
    fcl_forward_job job = {
        .op = op, .layout = FCL_LAYOUT_DENSE, .dtype = Q->dtype, .D = Q->shape[3], .Hq = Q->shape[2],
        .Hkv = K->shape[2], .grid_b = Q->shape[0], .sq = Q->shape[1], .sk = K->shape[1],
        .Q = Q, .K = K, .V = V, .O = O, .LSE = LSE,
        .q_dims = {0, 1, 2}, .k_dims = {0, 1, 2}, .v_dims = {0, 1, 2}, .o_dims = {0, 1, 2}, .lse_dims = {0, 1, 2},
    };
    if ((s = fcl_resolve_attn_params(ctx, op, params, job.grid_b, job.sk, job.grid_b, job.Hq, job.D, &job.params)))
        return s;
    return fcl_forward_launch(ctx, &job, event);
}
