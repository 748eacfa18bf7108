/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_attention_qkvo_backward (and _saved): recompute the block's forward (projections and
 * attention with its LSE) unless the caller saved it, then its gradients: dA = dO Wo, the
 * attention backward, dX / dCtx through the input projections, and the weight and bias
 * gradients (accumulated). */
#include "core/tensor_checks.h"
#include "gemm/linear.h"
#include "ops/attn_params.h"
#include "ops/backward_launch.h"
#include "ops/projection.h"

#include <stdio.h>

/* g (named name) is given, dw [N, K] F32 or `act`, db [N] in dw's dtype exactly when w has a bias. */
static fcl_status check_grad(fcl_context ctx, const char *op, const char *name, const fcl_weight_grad *g, const fcl_weight *w,
                             fcl_dtype act)
{
    char what[32];
    if (!g)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
    snprintf(what, sizeof what, "%s.dw", name);
    fcl_status s = fcl_check_tensor(ctx, op, g->dw, what, 2);
    if (s != FCL_SUCCESS)
        return s;
    if (g->dw->dtype != FCL_F32 && g->dw->dtype != act)
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s dtype %s must be f32 or the activations' %s", op, what,
                        fcl_dtype_name(g->dw->dtype), fcl_dtype_name(act));
    if (!fcl_same_shape(g->dw, w->w->shape))
        return fcl_shape_error(ctx, op, what, g->dw, "like the weight:", w->w->shape, 2);
    snprintf(what, sizeof what, "%s.db", name);
    if (!w->bias != !g->db)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s is %s but the forward's bias is %s (give db exactly "
                        "when the weight has a bias)", op, what, g->db ? "given" : "NULL", w->bias ? "given" : "NULL");
    if (g->db) {
        if ((s = fcl_check_tensor(ctx, op, g->db, what, 1)))
            return s;
        if (g->db->dtype != g->dw->dtype)
            return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s dtype %s differs from its dw's %s", op, what,
                            fcl_dtype_name(g->db->dtype), fcl_dtype_name(g->dw->dtype));
        if (!fcl_same_shape(g->db, w->w->shape))
            return fcl_shape_error(ctx, op, what, g->db, "[N] =", w->w->shape, 1);
    }
    return FCL_SUCCESS;
}

/* Every check but params': the forward's, saved's (when given), dO, dX, dCtx, the four
 * gradients, and no overlaps (the outputs with each other, the inputs, saved, the weights and
 * params' side tensors). */
static fcl_status validate(fcl_context ctx, const char *op, const fcl_attn_params *params, int num_heads,
                           fcl_tensor X, fcl_tensor Ctx, const fcl_weight *const w[4], const fcl_qkvo_saved *saved,
                           fcl_tensor dO, fcl_tensor dX, fcl_tensor dCtx, const fcl_weight_grad *const g[4],
                           int64_t *D)
{
    fcl_status s = fcl_proj_check_block(ctx, op, num_heads, X, w[0], w[3], dX, "dX", D);
    if (s || (s = fcl_proj_check_act(ctx, op, dO, "dO", X->shape[0], *D, X->dtype)))
        return s;
    if (Ctx && (s = fcl_proj_check_act(ctx, op, Ctx, "Ctx", -1, -1, X->dtype)))
        return s;
    fcl_tensor src = Ctx ? Ctx : X;
    if ((s = fcl_check_weight(ctx, op, "wk", w[1], *D, src->shape[1], X->dtype)) ||
        (s = fcl_check_weight(ctx, op, "wv", w[2], *D, src->shape[1], X->dtype)))
        return s;
    if (saved && (s = fcl_proj_check_saved(ctx, op, saved, num_heads, X->shape[0], src->shape[0], *D, X->dtype)))
        return s;
    if (!Ctx != !dCtx)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: dCtx is %s but Ctx is %s (dCtx exactly for "
                        "cross-attention)", op, dCtx ? "given" : "NULL", Ctx ? "given" : "NULL");
    if (dCtx && (s = fcl_proj_check_act(ctx, op, dCtx, "dCtx", Ctx->shape[0], Ctx->shape[1], X->dtype)))
        return s;
    static const char *const names[4] = {"gq", "gk", "gv", "go"};
    for (int i = 0; i < 4; i++)
        if ((s = check_grad(ctx, op, names[i], g[i], w[i], X->dtype)))
            return s;
    const fcl_tensor outs[10] = {dX, dCtx, g[0]->dw, g[0]->db, g[1]->dw, g[1]->db, g[2]->dw, g[2]->db, g[3]->dw,
                                 g[3]->db};
    static const char *const out_names[10] = {"dX", "dCtx", "gq.dw", "gq.db", "gk.dw", "gk.db", "gv.dw", "gv.db",
                                              "go.dw", "go.db"};
    const fcl_tensor ins[10] = {X, Ctx, dO, params ? params->key_mask : NULL, params ? params->alibi_slopes : NULL,
                                saved ? saved->Q : NULL, saved ? saved->K : NULL, saved ? saved->V : NULL,
                                saved ? saved->A : NULL, saved ? saved->LSE : NULL};
    for (int i = 0; i < 10; i++) {
        if (outs[i] && (s = fcl_proj_check_out(ctx, op, outs[i], out_names[i], ins, 10, w, 4)))
            return s;
        for (int k = i + 1; k < 10; k++)
            if (fcl_overlaps(outs[i], outs[k]))
                return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: outputs %s and %s overlap in the same buffer", op,
                                out_names[i], out_names[k]);
    }
    return FCL_SUCCESS;
}

/* Both public forms: with `save` the forward's activations come from saved, else recomputed. */
static fcl_status qkvo_backward(fcl_context ctx, const char *op, const fcl_attn_params *params, int num_heads,
                                fcl_tensor X, fcl_tensor Ctx, const fcl_weight *const w[4], const fcl_qkvo_saved *saved,
                                int save, fcl_tensor dO, fcl_tensor dX, fcl_tensor dCtx,
                                const fcl_weight_grad *const g[4], cl_event *event)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    if (save && !saved)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: saved is NULL", op);
    const fcl_weight *const wq = w[0], *const wk = w[1], *const wv = w[2], *const wo = w[3];
    const fcl_weight_grad *const go = g[3];
    int64_t D;
    fcl_status s = validate(ctx, op, params, num_heads, X, Ctx, w, save ? saved : NULL, dO, dX, dCtx, g, &D);
    if (s != FCL_SUCCESS)
        return s;
    fcl_tensor src = Ctx ? Ctx : X;
    const int64_t H = num_heads, Lq = X->shape[0], Lk = src->shape[0];
    fcl_backward_job job = {
        .fwd = {.op = op, .layout = FCL_LAYOUT_DENSE, .dtype = X->dtype, .D = D / H, .Hq = H, .Hkv = H, .grid_b = 1,
                .sq = Lq, .sk = Lk, .q_dims = {0, 1, 2}, .k_dims = {0, 1, 2}, .v_dims = {0, 1, 2},
                .o_dims = {0, 1, 2}, .lse_dims = {0, 1, 2}},
        .do_dims = {0, 1, 2}, .dq_dims = {0, 1, 2}, .dk_dims = {0, 1, 2}, .dv_dims = {0, 1, 2}};
    if ((s = fcl_resolve_attn_params(ctx, op, params, 0, Lk, 0, H, D / H, Lq, Lk, &job.fwd.params)))
        return s;

    /* Q, A, dA, dQ [Lq, D]; K, V, dK, dV [Lk, D]; LSE [1, H, Lq]: the gradients in one scratch
     * buffer, the forward's activations there too or in saved */
    const size_t es = fcl_dtype_size(X->dtype);
    const int64_t per_rows = save ? 2 : 4; /* scratch tensors per row group */
    cl_mem act = fcl_scratch_buffer(ctx, FCL_SCRATCH_PROJ_GRAD_ACT, (uint64_t)(per_rows * (Lq + Lk) * D) * es, &s);
    cl_mem lse_buf = act && !save ? fcl_scratch_buffer(ctx, FCL_SCRATCH_PROJ_GRAD_LSE,
                                                       (uint64_t)(H * Lq) * sizeof(float), &s)
                                  : NULL;
    if (!act || (!save && !lse_buf))
        return s;
    const int64_t qs[2] = {Lq, D}, ks[2] = {Lk, D}, ls[3] = {1, H, Lq};
    struct fcl_tensor_s t[8]; /* Q, A, dA, dQ, K, V, dK, dV */
    const fcl_tensor kept[8] = {save ? saved->Q : NULL, save ? saved->A : NULL, NULL, NULL,
                                save ? saved->K : NULL, save ? saved->V : NULL, NULL, NULL};
    for (int i = 0, slot_q = 0, slot_k = 0; i < 8; i++) {
        if (kept[i]) {
            t[i] = *kept[i];
            continue;
        }
        t[i] = fcl_scratch_view(ctx, act, X->dtype, 2, i < 4 ? qs : ks);
        t[i].offset = i < 4 ? slot_q++ * Lq * D : per_rows * Lq * D + slot_k++ * Lk * D;
    }
    struct fcl_tensor_s lse = save ? fcl_proj_lse_view(saved->LSE) : fcl_scratch_view(ctx, lse_buf, FCL_F32, 3, ls);
    struct fcl_tensor_s v4[8];
    for (int i = 0; i < 8; i++)
        v4[i] = fcl_proj_heads_view(&t[i], H);
    job.fwd.Q = &v4[0];
    job.fwd.O = &v4[1];
    job.fwd.K = &v4[4];
    job.fwd.V = &v4[5];
    job.fwd.LSE = &lse;
    job.dO = &v4[2];
    job.dQ = &v4[3];
    job.dK = &v4[6];
    job.dV = &v4[7];

    /* the forward again (unless saved), with its LSE; then dA = dO Wo and Wo's gradients */
    if ((!save && ((s = fcl_linear_enqueue(ctx, X, wq, &t[0], NULL)) ||
                   (s = fcl_linear_enqueue(ctx, src, wk, &t[4], NULL)) ||
                   (s = fcl_linear_enqueue(ctx, src, wv, &t[5], NULL)) ||
                   (s = fcl_forward_launch(ctx, &job.fwd, NULL)))) ||
        (s = fcl_linear_grad_input(ctx, dO, wo, &t[2], 0)) || (s = fcl_linear_grad_weight(ctx, dO, &t[1], go->dw)) ||
        (go->db && (s = fcl_column_sums(ctx, dO, go->db))))
        goto done;
    /* the attention's gradients, then the input projections' */
    if ((s = fcl_backward_launch(ctx, &job, NULL)) || (s = fcl_linear_grad_input(ctx, &t[3], wq, dX, 0)) ||
        (s = fcl_linear_grad_input(ctx, &t[6], wk, dCtx ? dCtx : dX, !dCtx)) ||
        (s = fcl_linear_grad_input(ctx, &t[7], wv, dCtx ? dCtx : dX, 1)))
        goto done;
    /* The key bias adds q_i . bk to every score of query row i, which the softmax ignores: its
     * gradient is exactly zero (the column sums of dK would be rounding noise around zero),
     * unless a softcap bends the scores first. */
    const int key_bias_counts = job.fwd.params.softcap > 0.0f;
    const fcl_tensor grads[3] = {&t[3], &t[6], &t[7]}, inputs[3] = {X, src, src};
    for (int i = 0; i < 3; i++)
        if ((s = fcl_linear_grad_weight(ctx, grads[i], inputs[i], g[i]->dw)) ||
            (g[i]->db && (i != 1 || key_bias_counts) && (s = fcl_column_sums(ctx, grads[i], g[i]->db))))
            goto done;
    cl_int err;
    if (event && (err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event)) != CL_SUCCESS)
        s = fcl_fail_cl(ctx, err, "clEnqueueMarkerWithWaitList");
done:
    return s;
}

fcl_status fcl_attention_qkvo_backward(fcl_context ctx, const fcl_attn_params *params, int num_heads, fcl_tensor X,
                                       fcl_tensor Ctx, const fcl_weight *wq, const fcl_weight *wk,
                                       const fcl_weight *wv, const fcl_weight *wo, fcl_tensor dO, fcl_tensor dX,
                                       fcl_tensor dCtx, const fcl_weight_grad *gq, const fcl_weight_grad *gk,
                                       const fcl_weight_grad *gv, const fcl_weight_grad *go, cl_event *event)
{
    FCL_LOCK(ctx);
    const fcl_weight *const w[4] = {wq, wk, wv, wo};
    const fcl_weight_grad *const g[4] = {gq, gk, gv, go};
    return qkvo_backward(ctx, "fcl_attention_qkvo_backward", params, num_heads, X, Ctx, w, NULL, 0, dO, dX, dCtx, g,
                         event);
}

fcl_status fcl_attention_qkvo_backward_saved(fcl_context ctx, const fcl_attn_params *params, int num_heads,
                                             fcl_tensor X, fcl_tensor Ctx, const fcl_weight *wq, const fcl_weight *wk,
                                             const fcl_weight *wv, const fcl_weight *wo, const fcl_qkvo_saved *saved,
                                             fcl_tensor dO, fcl_tensor dX, fcl_tensor dCtx, const fcl_weight_grad *gq,
                                             const fcl_weight_grad *gk, const fcl_weight_grad *gv,
                                             const fcl_weight_grad *go, cl_event *event)
{
    FCL_LOCK(ctx);
    const fcl_weight *const w[4] = {wq, wk, wv, wo};
    const fcl_weight_grad *const g[4] = {gq, gk, gv, go};
    return qkvo_backward(ctx, "fcl_attention_qkvo_backward_saved", params, num_heads, X, Ctx, w, saved, 1, dO, dX, dCtx,
                         g, event);
}
