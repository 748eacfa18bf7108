/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_project_kv, fcl_attention_qkvo_forward (and _save), fcl_attention_q_with_kv_cached_forward:
 * the projections (linear.c) around the attention forward (forward_launch.c), through scratch
 * or the caller's saved activations. */
#include "core/tensor_checks.h"
#include "gemm/linear.h"
#include "ops/attn_params.h"
#include "ops/forward_launch.h"
#include "ops/projection.h"

/* A 2-D activation [rows, cols] of ctx in dtype `dt` (dt < 0: any float dtype). */
fcl_status fcl_proj_check_act(fcl_context ctx, const char *op, fcl_tensor t, const char *name, int64_t rows,
                            int64_t cols, int dt)
{
    fcl_status s = fcl_check_tensor(ctx, op, t, name, 2);
    if (s != FCL_SUCCESS)
        return s;
    if (dt < 0 && !fcl_tensor_is_f_activation(t->dtype))
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s dtype %s is not f32, f16 or bf16", op, name,
                        fcl_dtype_name(t->dtype));
    if (dt >= 0 && t->dtype != (fcl_dtype)dt)
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s dtype %s differs from X's %s", op, name, fcl_dtype_name(t->dtype),
                        fcl_dtype_name((fcl_dtype)dt));
    const int64_t shape[2] = {rows >= 0 ? rows : t->shape[0], cols >= 0 ? cols : t->shape[1]};
    if (!fcl_same_shape(t, shape))
        return fcl_shape_error(ctx, op, name, t, "[rows, cols] =", shape, 2);
    return FCL_SUCCESS;
}

/* out overlaps none of ins[0..n) nor any tensor of the weights. */
fcl_status fcl_proj_check_out(fcl_context ctx, const char *op, fcl_tensor out, const char *name, const fcl_tensor *ins,
                            int n, const fcl_weight *const *ws, int nw)
{
    fcl_status s = fcl_check_distinct(ctx, op, out, name);
    if (s != FCL_SUCCESS)
        return s;
    for (int i = 0; i < n; i++)
        if (fcl_overlaps(out, ins[i]))
            return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s overlaps an input in the same buffer", op, name);
    for (int i = 0; i < nw; i++)
        if (ws[i] && (fcl_overlaps(out, ws[i]->w) || fcl_overlaps(out, ws[i]->scale) || fcl_overlaps(out, ws[i]->bias)))
            return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s overlaps a weight in the same buffer", op, name);
    return FCL_SUCCESS;
}

/* Rows (output features) of a weight, or -1 when it is not a usable 2-D tensor yet (its own
 * check then reports it). */
int64_t fcl_proj_weight_rows(const fcl_weight *w)
{
    return w && w->w && w->w->ndim == 2 ? w->w->shape[0] : -1;
}

fcl_status fcl_proj_check_saved(fcl_context ctx, const char *op, const fcl_qkvo_saved *saved, int64_t H, int64_t Lq,
                                int64_t Lk, int64_t D, fcl_dtype dt)
{
    if (!saved)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: saved is NULL", op);
    fcl_status s;
    if ((s = fcl_proj_check_act(ctx, op, saved->Q, "saved.Q", Lq, D, (int)dt)) ||
        (s = fcl_proj_check_act(ctx, op, saved->K, "saved.K", Lk, D, (int)dt)) ||
        (s = fcl_proj_check_act(ctx, op, saved->V, "saved.V", Lk, D, (int)dt)) ||
        (s = fcl_proj_check_act(ctx, op, saved->A, "saved.A", Lq, D, (int)dt)) ||
        (s = fcl_check_tensor(ctx, op, saved->LSE, "saved.LSE", 2)))
        return s;
    if (saved->LSE->dtype != FCL_F32)
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: saved.LSE dtype %s must be f32", op, fcl_dtype_name(saved->LSE->dtype));
    const int64_t lse_shape[2] = {H, Lq};
    if (!fcl_same_shape(saved->LSE, lse_shape))
        return fcl_shape_error(ctx, op, "saved.LSE", saved->LSE, "[num_heads, Lq] =", lse_shape, 2);
    return FCL_SUCCESS;
}

struct fcl_tensor_s fcl_proj_lse_view(fcl_tensor lse)
{
    struct fcl_tensor_s v = *lse;
    v.ndim = 3;
    v.shape[0] = 1;
    v.shape[1] = lse->shape[0];
    v.shape[2] = lse->shape[1];
    v.strides[0] = lse->shape[0] * lse->strides[0];
    v.strides[1] = lse->strides[0];
    v.strides[2] = lse->strides[1];
    return v;
}

fcl_status fcl_project_kv(fcl_context ctx, fcl_tensor Ctx, const fcl_weight *wk, const fcl_weight *wv, fcl_tensor K,
                          fcl_tensor V, cl_event *event)
{
    FCL_LOCK(ctx);
    static const char *const op = "fcl_project_kv";
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    fcl_status s = fcl_proj_check_act(ctx, op, Ctx, "Ctx", -1, -1, -1);
    if (s != FCL_SUCCESS)
        return s;
    const int64_t Lk = Ctx->shape[0], Dc = Ctx->shape[1];
    /* the width: K's when K and V agree on one, else wk's (the checks then name the odd one) */
    const int agree = K && V && K->ndim == 2 && V->ndim == 2 && K->shape[1] == V->shape[1];
    const int64_t D = agree ? K->shape[1] : fcl_proj_weight_rows(wk);
    const fcl_weight *ws[2] = {wk, wv};
    if ((s = fcl_check_weight(ctx, op, "wk", wk, D, Dc, Ctx->dtype)) ||
        (s = fcl_check_weight(ctx, op, "wv", wv, D, Dc, Ctx->dtype)) ||
        (s = fcl_proj_check_act(ctx, op, K, "K", Lk, D, Ctx->dtype)) || (s = fcl_proj_check_act(ctx, op, V, "V", Lk, D, Ctx->dtype)) ||
        (s = fcl_proj_check_out(ctx, op, K, "K", &Ctx, 1, ws, 2)) || (s = fcl_proj_check_out(ctx, op, V, "V", &Ctx, 1, ws, 2)))
        return s;
    if (fcl_overlaps(K, V))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: outputs K and V overlap in the same buffer", op);
    if ((s = fcl_linear_enqueue(ctx, Ctx, wk, K, NULL)))
        return s;
    return fcl_linear_enqueue(ctx, Ctx, wv, V, event);
}

/* The [1, L, H, D / H] view of a 2-D activation [L, D] (last-dim contiguous). */
struct fcl_tensor_s fcl_proj_heads_view(fcl_tensor t, int64_t H)
{
    struct fcl_tensor_s v = *t;
    const int64_t L = t->shape[0], D = t->shape[1];
    v.ndim = 4;
    v.shape[0] = 1;
    v.shape[1] = L;
    v.shape[2] = H;
    v.shape[3] = D / H;
    v.strides[0] = L * t->strides[0];
    v.strides[1] = t->strides[0];
    v.strides[2] = D / H;
    v.strides[3] = 1;
    return v;
}

/* The attention step of the projection ops, prepared before anything is enqueued: the job with
 * its params resolved, and Q and the attention output A ([Lq, D] each) in scratch. */
typedef struct attend_plan {
    fcl_forward_job job;
    struct fcl_tensor_s q, a, lse; /* lse: with saved activations only (job.LSE points at it) */
} attend_plan;

/* Resolves params for H heads over Lq queries and Lk keys and takes Q and A from `saved` (its LSE
 * written too) or else from scratch. */
static fcl_status plan_attend(fcl_context ctx, const char *op, const fcl_attn_params *params, int64_t H,
                              fcl_tensor X, int64_t Lk, int64_t D, const fcl_qkvo_saved *saved, attend_plan *p)
{
    const int64_t Lq = X->shape[0];
    p->job = (fcl_forward_job){.op = op, .layout = FCL_LAYOUT_DENSE, .dtype = X->dtype, .D = D / H, .Hq = H,
                               .Hkv = H, .grid_b = 1, .sq = Lq, .sk = Lk, .q_dims = {0, 1, 2}, .k_dims = {0, 1, 2},
                               .v_dims = {0, 1, 2}, .o_dims = {0, 1, 2}, .lse_dims = {0, 1, 2}};
    fcl_status s = fcl_resolve_attn_params(ctx, op, params, 0, Lk, 0, H, D / H, Lq, Lk, &p->job.params);
    if (s != FCL_SUCCESS)
        return s;
    if (saved) {
        p->q = *saved->Q;
        p->a = *saved->A;
        p->lse = fcl_proj_lse_view(saved->LSE);
        p->job.LSE = &p->lse;
        return FCL_SUCCESS;
    }
    const uint64_t bytes = (uint64_t)(Lq * D) * fcl_dtype_size(X->dtype);
    cl_mem qa = fcl_scratch_buffer(ctx, FCL_SCRATCH_PROJ_QA, 2 * bytes, &s);
    if (!qa)
        return s;
    const int64_t shape[2] = {Lq, D};
    p->q = fcl_scratch_view(ctx, qa, X->dtype, 2, shape);
    p->a = p->q;
    p->a.offset = Lq * D; /* the attention output follows Q in the same buffer */
    return FCL_SUCCESS;
}

/* Enqueues Q = X Wq^T + bq; A = attention(Q, K, V); O = A Wo^T + bo for plan p. */
static fcl_status attend_and_project(fcl_context ctx, attend_plan *p, fcl_tensor X, fcl_tensor K, fcl_tensor V,
                                     const fcl_weight *wq, const fcl_weight *wo, fcl_tensor O, cl_event *event)
{
    const int64_t H = p->job.Hq;
    struct fcl_tensor_s q4 = fcl_proj_heads_view(&p->q, H), k4 = fcl_proj_heads_view(K, H);
    struct fcl_tensor_s v4 = fcl_proj_heads_view(V, H), a4 = fcl_proj_heads_view(&p->a, H);
    p->job.Q = &q4;
    p->job.K = &k4;
    p->job.V = &v4;
    p->job.O = &a4;
    fcl_status s;
    if ((s = fcl_linear_enqueue(ctx, X, wq, &p->q, NULL)) == FCL_SUCCESS &&
        (s = fcl_forward_launch(ctx, &p->job, NULL)) == FCL_SUCCESS)
        s = fcl_linear_enqueue(ctx, &p->a, wo, O, event);
    return s;
}

/* The checks shared by the two attention-with-projections ops (X, O, wq, wo, heads); the
 * model width D comes from wq. */
fcl_status fcl_proj_check_block(fcl_context ctx, const char *op, int num_heads, fcl_tensor X, const fcl_weight *wq,
                                const fcl_weight *wo, fcl_tensor O, const char *o_name, int64_t *D)
{
    fcl_status s = fcl_proj_check_act(ctx, op, X, "X", -1, -1, -1);
    if (s != FCL_SUCCESS)
        return s;
    /* a square wq gives the width; else X does (and wq's check names wq) */
    *D = fcl_proj_weight_rows(wq) > 0 && wq->w->shape[1] == wq->w->shape[0] ? fcl_proj_weight_rows(wq) : X->shape[1];
    if ((s = fcl_proj_check_act(ctx, op, X, "X", -1, *D, -1)))
        return s;
    if (num_heads < 1)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: num_heads %d must be >= 1", op, num_heads);
    if (*D % num_heads != 0)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: num_heads %d does not divide D %lld", op, num_heads, (long long)*D);
    if (*D / num_heads > FCL_MAX_HEAD_DIM)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: head_dim %lld exceeds the limit %d", op,
                        (long long)(*D / num_heads), FCL_MAX_HEAD_DIM);
    const fcl_weight *ws[2] = {wq, wo};
    if ((s = fcl_proj_check_act(ctx, op, O, o_name, X->shape[0], *D, X->dtype)) ||
        (s = fcl_check_weight(ctx, op, "wq", wq, *D, *D, X->dtype)) ||
        (s = fcl_check_weight(ctx, op, "wo", wo, *D, *D, X->dtype)) || (s = fcl_proj_check_out(ctx, op, O, o_name, &X, 1, ws, 2)))
        return s;
    return FCL_SUCCESS;
}

/* fcl_attention_qkvo_forward, with saved: writing Q, K, V, A and LSE there. */
static fcl_status qkvo_forward(fcl_context ctx, const char *op, const fcl_attn_params *params, int num_heads,
                               fcl_tensor X, fcl_tensor Ctx, const fcl_weight *wq, const fcl_weight *wk,
                               const fcl_weight *wv, const fcl_weight *wo, fcl_tensor O, const fcl_qkvo_saved *saved,
                               int save, cl_event *event)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    int64_t D;
    fcl_status s = fcl_proj_check_block(ctx, op, num_heads, X, wq, wo, O, "O", &D);
    if (s != FCL_SUCCESS)
        return s;
    fcl_tensor src = Ctx ? Ctx : X;
    if (Ctx && (s = fcl_proj_check_act(ctx, op, Ctx, "Ctx", -1, -1, X->dtype)))
        return s;
    const int64_t Lk = src->shape[0], Dc = src->shape[1];
    const fcl_weight *ws[4] = {wk, wv, wq, wo};
    const fcl_tensor ins[4] = {src, params ? params->key_mask : NULL, params ? params->alibi_slopes : NULL, X};
    if ((s = fcl_check_weight(ctx, op, "wk", wk, D, Dc, X->dtype)) ||
        (s = fcl_check_weight(ctx, op, "wv", wv, D, Dc, X->dtype)) ||
        (s = fcl_proj_check_out(ctx, op, O, "O", ins, 3, ws, 2)))
        return s;
    if (save) {
        if ((s = fcl_proj_check_saved(ctx, op, saved, num_heads, X->shape[0], Lk, D, X->dtype)))
            return s;
        const fcl_tensor outs[6] = {saved->Q, saved->K, saved->V, saved->A, saved->LSE, O};
        static const char *const names[6] = {"saved.Q", "saved.K", "saved.V", "saved.A", "saved.LSE", "O"};
        for (int i = 0; i < 5; i++) {
            if ((s = fcl_proj_check_out(ctx, op, outs[i], names[i], ins, 4, ws, 4)))
                return s;
            for (int k = i + 1; k < 6; k++)
                if (fcl_overlaps(outs[i], outs[k]))
                    return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: outputs %s and %s overlap in the same buffer",
                                    op, names[i], names[k]);
        }
    }
    attend_plan plan;
    if ((s = plan_attend(ctx, op, params, num_heads, X, Lk, D, save ? saved : NULL, &plan)))
        return s;
    struct fcl_tensor_s k, v;
    if (save) {
        k = *saved->K;
        v = *saved->V;
    } else {
        const uint64_t bytes = (uint64_t)(Lk * D) * fcl_dtype_size(X->dtype);
        cl_mem kv = fcl_scratch_buffer(ctx, FCL_SCRATCH_PROJ_KV, 2 * bytes, &s);
        if (!kv)
            return s;
        const int64_t shape[2] = {Lk, D};
        k = fcl_scratch_view(ctx, kv, X->dtype, 2, shape);
        v = k;
        v.offset = Lk * D;
    }
    if ((s = fcl_linear_enqueue(ctx, src, wk, &k, NULL)) == FCL_SUCCESS &&
        (s = fcl_linear_enqueue(ctx, src, wv, &v, NULL)) == FCL_SUCCESS)
        s = attend_and_project(ctx, &plan, X, &k, &v, wq, wo, O, event);
    return s;
}

fcl_status fcl_attention_qkvo_forward(fcl_context ctx, const fcl_attn_params *params, int num_heads, fcl_tensor X,
                                      fcl_tensor Ctx, const fcl_weight *wq, const fcl_weight *wk,
                                      const fcl_weight *wv, const fcl_weight *wo, fcl_tensor O, cl_event *event)
{
    FCL_LOCK(ctx);
    return qkvo_forward(ctx, "fcl_attention_qkvo_forward", params, num_heads, X, Ctx, wq, wk, wv, wo, O, NULL, 0,
                        event);
}

fcl_status fcl_attention_qkvo_forward_save(fcl_context ctx, const fcl_attn_params *params, int num_heads,
                                           fcl_tensor X, fcl_tensor Ctx, const fcl_weight *wq, const fcl_weight *wk,
                                           const fcl_weight *wv, const fcl_weight *wo, fcl_tensor O,
                                           const fcl_qkvo_saved *saved, cl_event *event)
{
    FCL_LOCK(ctx);
    return qkvo_forward(ctx, "fcl_attention_qkvo_forward_save", params, num_heads, X, Ctx, wq, wk, wv, wo, O, saved, 1,
                        event);
}

fcl_status fcl_attention_q_with_kv_cached_forward(fcl_context ctx, const fcl_attn_params *params, int num_heads,
                                                  fcl_tensor X, fcl_tensor K, fcl_tensor V, const fcl_weight *wq,
                                                  const fcl_weight *wo, fcl_tensor O, cl_event *event)
{
    FCL_LOCK(ctx);
    static const char *const op = "fcl_attention_q_with_kv_cached_forward";
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    int64_t D;
    fcl_status s = fcl_proj_check_block(ctx, op, num_heads, X, wq, wo, O, "O", &D);
    if (s || (s = fcl_proj_check_act(ctx, op, K, "K", -1, D, X->dtype)) ||
        (s = fcl_proj_check_act(ctx, op, V, "V", K->shape[0], D, X->dtype)))
        return s;
    const fcl_tensor ins[4] = {K, V, params ? params->key_mask : NULL, params ? params->alibi_slopes : NULL};
    attend_plan plan;
    if ((s = fcl_proj_check_out(ctx, op, O, "O", ins, 4, NULL, 0)) ||
        (s = plan_attend(ctx, op, params, num_heads, X, K->shape[0], D, NULL, &plan)))
        return s;
    return attend_and_project(ctx, &plan, X, K, V, wq, wo, O, event);
}
