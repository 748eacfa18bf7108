/* fcl_attention_packed_qkv_forward: rows of a fused QKV projection, sequences given per row. */
#include "forward_launch.h"
#include "op_checks.h"

static const char *const op = "fcl_attention_packed_qkv_forward";

static fcl_status validate(fcl_context ctx, fcl_tensor QKV, fcl_tensor bounds, fcl_tensor O, fcl_tensor LSE)
{
    fcl_status s;
    if ((s = fcl_check_tensor(ctx, op, QKV, "QKV", 4)) || (s = fcl_check_tensor(ctx, op, O, "O", 3)) ||
        (LSE && (s = fcl_check_tensor(ctx, op, LSE, "LSE", 2))) ||
        (s = fcl_check_index_tensor(ctx, op, bounds, "seq_bounds", 2)))
        return s;
    if ((s = fcl_check_attention_dtypes(ctx, op, QKV, QKV, QKV, O, LSE)) != FCL_SUCCESS)
        return s;
    const int64_t L = QKV->shape[0], H = QKV->shape[2], D = QKV->shape[3];
    if (QKV->shape[1] != 3)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: QKV dim 1 is %lld; expected 3 ([L, 3, H, D]: q | k | v)", op,
                        (long long)QKV->shape[1]);
    if ((s = fcl_check_heads(ctx, op, H, H, D, D)) != FCL_SUCCESS)
        return s;
    const int64_t oshape[3] = {L, H, D}, lshape[2] = {H, L}, bshape[2] = {L, 2};
    if (!fcl_same_shape(O, oshape))
        return fcl_shape_error(ctx, op, "O", O, "[L, H, D] =", oshape, 3);
    if (LSE && !fcl_same_shape(LSE, lshape))
        return fcl_shape_error(ctx, op, "LSE", LSE, "[H, L] =", lshape, 2);
    if (!fcl_same_shape(bounds, bshape))
        return fcl_shape_error(ctx, op, "seq_bounds", bounds, "[L, 2] =", bshape, 2);
    if (L > INT32_MAX / 2)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: L %lld beyond the supported range", op, (long long)L);
    if (fcl_overlaps(O, QKV) || fcl_overlaps(O, LSE))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: O overlaps QKV or LSE in the same buffer", op);
    return FCL_SUCCESS;
}

fcl_status fcl_attention_packed_qkv_forward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor QKV,
                                            fcl_tensor seq_bounds, fcl_tensor O, fcl_tensor LSE, cl_event *event)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    fcl_status s = validate(ctx, QKV, seq_bounds, O, LSE);
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
    if ((s = fcl_resolve_attn_params(ctx, op, params, 0, L, 0, H, D, &job.params)))
        return s;
    return fcl_forward_launch(ctx, &job, event);
}
