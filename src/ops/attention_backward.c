/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_attention_backward, fcl_attention_varlen_backward and fcl_attention_packed_qkv_backward:
 * each layout's checks and job; the launches are shared (backward_launch.c). */
#include "ops/backward_launch.h"
#include "ops/problem_checks.h"

/* Starts a backward call: clears the error, and when *O is NULL (recomputed) requires LSE to
 * be NULL too and points *O at o_like, a bufferless stand-in with dO's shape and dtype, so the
 * forward problem's checks apply to dO (named so); the op passes NULL on to the launch. */
static fcl_status begin(fcl_context ctx, const char *op, fcl_tensor *O, fcl_tensor dO, fcl_tensor LSE,
                        struct fcl_tensor_s *o_like)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    if (*O)
        return FCL_SUCCESS;
    if (LSE)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: O is NULL but LSE is not (with O NULL both are "
                        "recomputed; pass LSE NULL too)", op);
    if (!dO)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: dO is NULL", op);
    *o_like = *dO;
    o_like->buffer = NULL; /* overlaps nothing */
    *O = o_like;
    return FCL_SUCCESS;
}

/* Messages name the stand-in by the tensor the caller gave. */
#define O_NAME(O, stand_in) ((O) == (stand_in) ? "dO" : "O")

/* dO like O; dQ like Q, dK like K, dV like V; no gradient overlaps another or an input, or
 * repeats an element. */
static fcl_status check_grads(fcl_context ctx, const char *op, fcl_tensor Q, fcl_tensor K, fcl_tensor V,
                              fcl_tensor O, fcl_tensor dO, fcl_tensor LSE, fcl_tensor dQ, fcl_tensor dK,
                              fcl_tensor dV, const fcl_attn_params *params, fcl_tensor cu_q, fcl_tensor cu_k)
{
    static const char *const in_name[1] = {"dO"};
    fcl_status s = fcl_check_grads(ctx, op, 1, &dO, &O, in_name, 0, NULL);
    if (s != FCL_SUCCESS)
        return s;
    const fcl_tensor grads[3] = {dQ, dK, dV}, like[3] = {Q, K, V};
    const fcl_tensor inputs[10] = {Q, K, V, O, dO, LSE, params ? params->key_mask : NULL,
                                   params ? params->alibi_slopes : NULL, cu_q, cu_k};
    static const char *const names[3] = {"dQ", "dK", "dV"};
    if ((s = fcl_check_grads(ctx, op, 3, grads, like, names, 10, inputs)))
        return s;
    for (int i = 0; i < 3 && s == FCL_SUCCESS; i++)
        s = fcl_check_distinct(ctx, op, grads[i], names[i]);
    return s;
}

fcl_status fcl_attention_backward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q, fcl_tensor K,
                                  fcl_tensor V, fcl_tensor O, fcl_tensor dO, fcl_tensor LSE, fcl_tensor dQ,
                                  fcl_tensor dK, fcl_tensor dV, cl_event *event)
{
    FCL_LOCK(ctx);
    static const char *const op = "fcl_attention_backward";
    struct fcl_tensor_s o_like;
    fcl_status s = begin(ctx, op, &O, dO, LSE, &o_like);
    if (s || (s = fcl_check_dense_problem(ctx, op, Q, K, V, O, O_NAME(O, &o_like), LSE)) ||
        (s = check_grads(ctx, op, Q, K, V, O, dO, LSE, dQ, dK, dV, params, NULL, NULL)))
        return s;
    fcl_backward_job job = {
        .fwd = {.op = op, .layout = FCL_LAYOUT_DENSE, .dtype = Q->dtype, .D = Q->shape[3], .Hq = Q->shape[2],
                .Hkv = K->shape[2], .grid_b = Q->shape[0], .sq = Q->shape[1], .sk = K->shape[1],
                .Q = Q, .K = K, .V = V, .O = O == &o_like ? NULL : O, .LSE = LSE, .q_dims = {0, 1, 2},
                .k_dims = {0, 1, 2}, .v_dims = {0, 1, 2}, .o_dims = {0, 1, 2}, .lse_dims = {0, 1, 2}},
        .dO = dO, .dQ = dQ, .dK = dK, .dV = dV,
        .do_dims = {0, 1, 2}, .dq_dims = {0, 1, 2}, .dk_dims = {0, 1, 2}, .dv_dims = {0, 1, 2},
    };
    fcl_forward_job *f = &job.fwd;
    if ((s = fcl_resolve_attn_params(ctx, op, params, f->grid_b, f->sk, f->grid_b, f->Hq, f->D, f->sq, f->sk,
                                       &f->params)))
        return s;
    return fcl_backward_launch(ctx, &job, event);
}

fcl_status fcl_attention_varlen_backward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q,
                                         fcl_tensor K, fcl_tensor V, fcl_tensor O, fcl_tensor dO, fcl_tensor LSE,
                                         fcl_tensor cu_seqlens_q, fcl_tensor cu_seqlens_k, int max_seqlen_q,
                                         int max_seqlen_k, fcl_tensor dQ, fcl_tensor dK, fcl_tensor dV,
                                         cl_event *event)
{
    FCL_LOCK(ctx);
    static const char *const op = "fcl_attention_varlen_backward";
    struct fcl_tensor_s o_like;
    fcl_status s = begin(ctx, op, &O, dO, LSE, &o_like);
    if (s || (s = fcl_check_varlen_problem(ctx, op, Q, K, V, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                           max_seqlen_k, O, O_NAME(O, &o_like), LSE)) ||
        (s = check_grads(ctx, op, Q, K, V, O, dO, LSE, dQ, dK, dV, params, cu_seqlens_q, cu_seqlens_k)))
        return s;
    const int64_t Tq = Q->shape[0], Tk = K->shape[0];
    fcl_backward_job job = {
        .fwd = {.op = op, .layout = FCL_LAYOUT_VARLEN, .dtype = Q->dtype, .D = Q->shape[2], .Hq = Q->shape[1],
                .Hkv = K->shape[1], .grid_b = cu_seqlens_q->shape[0] - 1,
                .sq = max_seqlen_q < Tq ? max_seqlen_q : Tq, .sk = max_seqlen_k < Tk ? max_seqlen_k : Tk,
                .total_q = Tq, .total_k = Tk, .Q = Q, .K = K, .V = V, .O = O == &o_like ? NULL : O, .LSE = LSE,
                .q_dims = {-1, 0, 1}, .k_dims = {-1, 0, 1}, .v_dims = {-1, 0, 1}, .o_dims = {-1, 0, 1},
                .lse_dims = {-1, 0, 1}, .seq_q = cu_seqlens_q, .seq_k = cu_seqlens_k},
        .dO = dO, .dQ = dQ, .dK = dK, .dV = dV,
        .do_dims = {-1, 0, 1}, .dq_dims = {-1, 0, 1}, .dk_dims = {-1, 0, 1}, .dv_dims = {-1, 0, 1},
    };
    fcl_forward_job *f = &job.fwd;
    if ((s = fcl_resolve_attn_params(ctx, op, params, 0, Tk, f->grid_b, f->Hq, f->D, f->sq, f->sk, &f->params)))
        return s;
    return fcl_backward_launch(ctx, &job, event);
}

fcl_status fcl_attention_packed_qkv_backward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor QKV,
                                             fcl_tensor O, fcl_tensor dO, fcl_tensor LSE, fcl_tensor seq_bounds,
                                             fcl_tensor dQKV, cl_event *event)
{
    FCL_LOCK(ctx);
    static const char *const op = "fcl_attention_packed_qkv_backward";
    struct fcl_tensor_s o_like;
    fcl_status s = begin(ctx, op, &O, dO, LSE, &o_like);
    if (s || (s = fcl_check_packed_problem(ctx, op, QKV, seq_bounds, O, O_NAME(O, &o_like), LSE)))
        return s;
    static const char *const names[2] = {"dO", "dQKV"};
    const fcl_tensor inputs[7] = {QKV, O, dO, LSE, params ? params->key_mask : NULL,
                                  params ? params->alibi_slopes : NULL, seq_bounds};
    if ((s = fcl_check_grads(ctx, op, 1, &dO, &O, names, 0, NULL)) ||
        (s = fcl_check_grads(ctx, op, 1, &dQKV, &QKV, names + 1, 7, inputs)))
        return s;
    /* Q, K, V and their gradients are the three slices of dim 1 (see the packed forward). */
    struct fcl_tensor_s q = *QKV, k = *QKV, v = *QKV, dq = *dQKV, dk = *dQKV, dv = *dQKV;
    k.offset += QKV->strides[1];
    v.offset += 2 * QKV->strides[1];
    dk.offset += dQKV->strides[1];
    dv.offset += 2 * dQKV->strides[1];
    const int64_t L = QKV->shape[0], H = QKV->shape[2], D = QKV->shape[3];
    fcl_backward_job job = {
        .fwd = {.op = op, .layout = FCL_LAYOUT_PACKED, .dtype = QKV->dtype, .D = D, .Hq = H, .Hkv = H,
                .grid_b = 1, .sq = L, .sk = L, .total_q = L, .total_k = L, .Q = &q, .K = &k, .V = &v,
                .O = O == &o_like ? NULL : O, .LSE = LSE, .q_dims = {-1, 0, 2}, .k_dims = {-1, 0, 2},
                .v_dims = {-1, 0, 2}, .o_dims = {-1, 0, 1}, .lse_dims = {-1, 0, 1}, .seq_q = seq_bounds},
        .dO = dO, .dQ = &dq, .dK = &dk, .dV = &dv,
        .do_dims = {-1, 0, 1}, .dq_dims = {-1, 0, 2}, .dk_dims = {-1, 0, 2}, .dv_dims = {-1, 0, 2},
    };
    if ((s = fcl_resolve_attn_params(ctx, op, params, 0, L, 0, H, D, L, L, &job.fwd.params)))
        return s;
    /* the three gradient slices as [L, H, D] views must not share an element */
    struct fcl_tensor_s slice[3] = {dq, dk, dv};
    for (int i = 0; i < 3; i++) {
        slice[i].ndim = 3;
        slice[i].shape[1] = H;
        slice[i].shape[2] = D;
        slice[i].strides[1] = dQKV->strides[2];
        slice[i].strides[2] = dQKV->strides[3];
    }
    if (fcl_overlaps(&slice[0], &slice[1]) || fcl_overlaps(&slice[1], &slice[2]) || fcl_overlaps(&slice[0], &slice[2]))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: the dQ, dK and dV slices of dQKV overlap (dim 1 "
                        "stride %lld)", op, (long long)dQKV->strides[1]);
    if ((s = fcl_check_distinct(ctx, op, dQKV, "dQKV"))) /* after the slices: their overlap is named so */
        return s;
    return fcl_backward_launch(ctx, &job, event);
}
