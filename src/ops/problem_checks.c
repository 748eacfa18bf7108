/* SPDX-License-Identifier: Apache-2.0 */
/* The forward problem checks (inputs Q, K, V, O, LSE and their layout) shared by the forward
 * and backward ops of each layout. */
#include "ops/problem_checks.h"

fcl_status fcl_check_attention_dtypes(fcl_context ctx, const char *op, fcl_tensor Q, fcl_tensor K, fcl_tensor V,
                                      fcl_tensor O, const char *o_name, fcl_tensor LSE)
{
    if (!fcl_tensor_is_f_activation(Q->dtype))
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: Q dtype %s is not f32, f16 or bf16", op, fcl_dtype_name(Q->dtype));
    const fcl_tensor same[3] = {K, V, O};
    const char *names[3] = {"K", "V", o_name};
    for (int i = 0; i < 3; i++)
        if (same[i]->dtype != Q->dtype)
            return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s dtype %s differs from Q dtype %s", op, names[i],
                            fcl_dtype_name(same[i]->dtype), fcl_dtype_name(Q->dtype));
    if (LSE && LSE->dtype != FCL_F32)
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: LSE dtype %s must be f32", op, fcl_dtype_name(LSE->dtype));
    return FCL_SUCCESS;
}

fcl_status fcl_check_heads(fcl_context ctx, const char *op, int64_t Hq, int64_t Hkv, int64_t Dq, int64_t Dk)
{
    if (Dk != Dq)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: Q head_dim %lld != K head_dim %lld", op, (long long)Dq, (long long)Dk);
    if (Hq % Hkv != 0)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: Hq %lld is not a multiple of Hkv %lld", op, (long long)Hq,
                        (long long)Hkv);
    if (Dq > FCL_MAX_HEAD_DIM)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: head_dim %lld exceeds the limit %d", op, (long long)Dq,
                        FCL_MAX_HEAD_DIM);
    if (Hq > 65535)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: Hq %lld exceeds the limit 65535", op, (long long)Hq);
    return FCL_SUCCESS;
}

fcl_status fcl_check_dense_problem(fcl_context ctx, const char *op, fcl_tensor Q, fcl_tensor K, fcl_tensor V,
                                   fcl_tensor O, const char *o_name, fcl_tensor LSE)
{
    fcl_status s;
    if ((s = fcl_check_tensor(ctx, op, Q, "Q", 4)) || (s = fcl_check_tensor(ctx, op, K, "K", 4)) ||
        (s = fcl_check_tensor(ctx, op, V, "V", 4)) || (s = fcl_check_tensor(ctx, op, O, o_name, 4)) ||
        (LSE && (s = fcl_check_tensor(ctx, op, LSE, "LSE", 3))))
        return s;
    if ((s = fcl_check_attention_dtypes(ctx, op, Q, K, V, O, o_name, LSE)) != FCL_SUCCESS)
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
        return fcl_shape_error(ctx, op, o_name, O, "like Q", Q->shape, 4);
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

fcl_status fcl_check_varlen_problem(fcl_context ctx, const char *op, fcl_tensor Q, fcl_tensor K, fcl_tensor V,
                                    fcl_tensor cu_q, fcl_tensor cu_k, int max_q, int max_k, fcl_tensor O,
                                    const char *o_name, fcl_tensor LSE)
{
    fcl_status s;
    if ((s = fcl_check_tensor(ctx, op, Q, "Q", 3)) || (s = fcl_check_tensor(ctx, op, K, "K", 3)) ||
        (s = fcl_check_tensor(ctx, op, V, "V", 3)) || (s = fcl_check_tensor(ctx, op, O, o_name, 3)) ||
        (LSE && (s = fcl_check_tensor(ctx, op, LSE, "LSE", 2))) ||
        (s = fcl_check_index_tensor(ctx, op, cu_q, "cu_seqlens_q", 1)) ||
        (s = fcl_check_index_tensor(ctx, op, cu_k, "cu_seqlens_k", 1)))
        return s;
    if ((s = fcl_check_attention_dtypes(ctx, op, Q, K, V, O, o_name, LSE)) != FCL_SUCCESS)
        return s;
    const int64_t Tq = Q->shape[0], Hq = Q->shape[1], D = Q->shape[2], Tk = K->shape[0], Hkv = K->shape[1];
    if ((s = fcl_check_heads(ctx, op, Hq, Hkv, D, K->shape[2])) != FCL_SUCCESS)
        return s;
    if (!fcl_same_shape(V, K->shape))
        return fcl_shape_error(ctx, op, "V", V, "like K", K->shape, 3);
    if (!fcl_same_shape(O, Q->shape))
        return fcl_shape_error(ctx, op, o_name, O, "like Q", Q->shape, 3);
    const int64_t lshape[2] = {Hq, Tq};
    if (LSE && !fcl_same_shape(LSE, lshape))
        return fcl_shape_error(ctx, op, "LSE", LSE, "[Hq, total_q] =", lshape, 2);
    if (cu_k->shape[0] != cu_q->shape[0])
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: cu_seqlens_q has %lld entries but cu_seqlens_k has %lld (both B + 1)",
                        op, (long long)cu_q->shape[0], (long long)cu_k->shape[0]);
    if (cu_q->shape[0] < 2 || cu_q->shape[0] - 1 > 65535)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: cu_seqlens has %lld entries; expected B + 1 with 1 <= B <= 65535", op,
                        (long long)cu_q->shape[0]);
    if (max_q < 0 || max_k < 0)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: max_seqlen_q %d and max_seqlen_k %d must be >= 0", op,
                        max_q, max_k);
    if (Tq > INT32_MAX / 2 || Tk > INT32_MAX / 2)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: total_q %lld or total_k %lld beyond the supported range", op,
                        (long long)Tq, (long long)Tk);
    if (fcl_overlaps(O, Q) || fcl_overlaps(O, K) || fcl_overlaps(O, V) || fcl_overlaps(O, LSE))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: O overlaps Q, K, V or LSE in the same buffer", op);
    return FCL_SUCCESS;
}

fcl_status fcl_check_packed_problem(fcl_context ctx, const char *op, fcl_tensor QKV, fcl_tensor bounds,
                                    fcl_tensor O, const char *o_name, fcl_tensor LSE)
{
    fcl_status s;
    if ((s = fcl_check_tensor(ctx, op, QKV, "QKV", 4)) || (s = fcl_check_tensor(ctx, op, O, o_name, 3)) ||
        (LSE && (s = fcl_check_tensor(ctx, op, LSE, "LSE", 2))) ||
        (s = fcl_check_index_tensor(ctx, op, bounds, "seq_bounds", 2)))
        return s;
    if ((s = fcl_check_attention_dtypes(ctx, op, QKV, QKV, QKV, O, o_name, LSE)) != FCL_SUCCESS)
        return s;
    const int64_t L = QKV->shape[0], H = QKV->shape[2], D = QKV->shape[3];
    if (QKV->shape[1] != 3)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: QKV dim 1 is %lld; expected 3 ([L, 3, H, D]: q | k | v)", op,
                        (long long)QKV->shape[1]);
    if ((s = fcl_check_heads(ctx, op, H, H, D, D)) != FCL_SUCCESS)
        return s;
    const int64_t oshape[3] = {L, H, D}, lshape[2] = {H, L}, bshape[2] = {L, 2};
    if (!fcl_same_shape(O, oshape))
        return fcl_shape_error(ctx, op, o_name, O, "[L, H, D] =", oshape, 3);
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

fcl_status fcl_check_forward_outputs(fcl_context ctx, const char *op, fcl_tensor O, fcl_tensor LSE, fcl_tensor Q,
                                     fcl_tensor K, fcl_tensor V, const fcl_attn_params *params, fcl_tensor a,
                                     const char *a_name, fcl_tensor b, const char *b_name)
{
    const fcl_tensor outs[2] = {O, LSE}, ins[7] = {Q, K, V, params->key_mask, params->alibi_slopes, a, b};
    const char *const out_names[2] = {"O", "LSE"};
    const char *const in_names[7] = {"Q", "K", "V", "key_mask", "alibi_slopes", a_name, b_name};
    return fcl_check_outputs_apart(ctx, op, 2, outs, out_names, 7, ins, in_names);
}
