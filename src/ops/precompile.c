/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_precompile: each op family of a spec runs once per dtype and head dim on zero-filled
 * temporaries, so the kernel variants those calls choose are built through the same choice as
 * any call (and, where an implementation compiles kernels per launch shape at their first
 * enqueue, as PoCL does, compiled for it). */
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEMPS 32

/* One run's temporaries, released together, and its first failure. */
typedef struct run {
    fcl_context ctx;
    const fcl_precompile_spec *sp;
    fcl_dtype dt;
    int64_t D;
    fcl_tensor t[MAX_TEMPS];
    int n;
    fcl_status s;
} run;

/* A new tensor of `shape` (ndim 1..4), zero-filled, or host-filled from `raw` (numel x dtype
 * size bytes) when given; NULL once the run has failed. */
static fcl_tensor temp(run *r, fcl_dtype dt, int ndim, const int64_t *shape, const void *raw)
{
    fcl_tensor t = NULL;
    if (r->s != FCL_SUCCESS || r->n == MAX_TEMPS)
        return NULL;
    if ((r->s = fcl_tensor_create(r->ctx, dt, ndim, shape, &t)) != FCL_SUCCESS)
        return NULL;
    r->t[r->n++] = t;
    if (raw) {
        r->s = fcl_tensor_write_raw(t, raw, (size_t)fcl_tensor_numel(t) * fcl_dtype_size(dt));
    } else {
        const cl_uchar zero = 0;
        cl_int err = clEnqueueFillBuffer(r->ctx->queue, t->buffer, &zero, 1, 0, t->buffer_bytes, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            r->s = fcl_fail_cl(r->ctx, err, "clEnqueueFillBuffer");
    }
    return r->s == FCL_SUCCESS ? t : NULL;
}

/* temp() with the shape given as up to four dims (0 ends the list). */
static fcl_tensor temp4(run *r, fcl_dtype dt, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    const int64_t shape[4] = {d0, d1, d2, d3};
    const int ndim = d1 == 0 ? 1 : d2 == 0 ? 2 : d3 == 0 ? 3 : 4;
    return temp(r, dt, ndim, shape, NULL);
}

/* An I32 tensor [n] (ndim 1) or [n / 2, 2] (ndim 2) holding vals. */
static fcl_tensor temp_i32(run *r, int ndim, int64_t n, const cl_int *vals)
{
    const int64_t shape[2] = {ndim == 1 ? n : n / 2, 2};
    return temp(r, FCL_I32, ndim, shape, vals);
}

/* The spec's features as attention params, the key mask of shape [m0] (ndim_mask 1) or
 * [m0, m1] (2), none with ndim_mask 0. */
static fcl_attn_params params_of(run *r, int ndim_mask, int64_t m0, int64_t m1)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const unsigned f = r->sp->features;
    p.causal = (f & FCL_PRECOMPILE_CAUSAL) != 0;
    p.softcap = (f & FCL_PRECOMPILE_SOFTCAP) ? 30.0f : 0.0f;
    if ((f & FCL_PRECOMPILE_KEY_MASK) && ndim_mask > 0)
        p.key_mask = ndim_mask == 1 ? temp4(r, FCL_F32, m0, 0, 0, 0) : temp4(r, FCL_F32, m0, m1, 0, 0);
    if (f & FCL_PRECOMPILE_ALIBI)
        p.alibi_slopes = temp4(r, FCL_F32, r->sp->num_heads, 0, 0, 0);
    return p;
}

/* Records a call's status as the run's failure. */
static void call(run *r, fcl_status s)
{
    if (r->s == FCL_SUCCESS)
        r->s = s;
}

static int backward(const run *r) { return (r->sp->ops & FCL_PRECOMPILE_BACKWARD) != 0; }

static void forward(run *r)
{
    const fcl_precompile_spec *sp = r->sp;
    const int64_t B = sp->batch, Hq = sp->num_heads, Hkv = sp->num_kv_heads, D = r->D;
    fcl_attn_params p = params_of(r, 2, B, sp->seq_k);
    fcl_tensor q = temp4(r, r->dt, B, sp->seq_q, Hq, D), k = temp4(r, r->dt, B, sp->seq_k, Hkv, D);
    fcl_tensor v = temp4(r, r->dt, B, sp->seq_k, Hkv, D), o = temp4(r, r->dt, B, sp->seq_q, Hq, D);
    fcl_tensor lse = temp4(r, FCL_F32, B, Hq, sp->seq_q, 0);
    if (r->s == FCL_SUCCESS)
        call(r, fcl_attention_forward(r->ctx, &p, q, k, v, o, lse, NULL));
    if (!backward(r))
        return;
    fcl_tensor dout = temp4(r, r->dt, B, sp->seq_q, Hq, D), dq = temp4(r, r->dt, B, sp->seq_q, Hq, D);
    fcl_tensor dk = temp4(r, r->dt, B, sp->seq_k, Hkv, D), dv = temp4(r, r->dt, B, sp->seq_k, Hkv, D);
    if (r->s == FCL_SUCCESS)
        call(r, fcl_attention_backward(r->ctx, &p, q, k, v, o, dout, lse, dq, dk, dv, NULL));
}

/* Prefix sums b * len of `batch` sequences of `len` rows into out[batch + 1]. */
static void prefix_sums(int batch, int len, cl_int *out)
{
    for (int b = 0; b <= batch; b++)
        out[b] = (cl_int)((int64_t)b * len);
}

static void varlen(run *r)
{
    const fcl_precompile_spec *sp = r->sp;
    const int64_t B = sp->batch, Hq = sp->num_heads, Hkv = sp->num_kv_heads, D = r->D;
    const int64_t tq = B * sp->seq_q, tk = B * sp->seq_k;
    cl_int *cu = malloc(sizeof(cl_int) * 2 * (size_t)(B + 1));
    if (!cu) {
        call(r, fcl_fail(r->ctx, FCL_ERR_OUT_OF_MEMORY, "out of host memory"));
        return;
    }
    prefix_sums(sp->batch, sp->seq_q, cu);
    prefix_sums(sp->batch, sp->seq_k, cu + B + 1);
    fcl_tensor cq = temp_i32(r, 1, B + 1, cu), ck = temp_i32(r, 1, B + 1, cu + B + 1);
    free(cu);
    fcl_attn_params p = params_of(r, 1, tk, 0);
    fcl_tensor q = temp4(r, r->dt, tq, Hq, D, 0), k = temp4(r, r->dt, tk, Hkv, D, 0);
    fcl_tensor v = temp4(r, r->dt, tk, Hkv, D, 0), o = temp4(r, r->dt, tq, Hq, D, 0);
    fcl_tensor lse = temp4(r, FCL_F32, Hq, tq, 0, 0);
    if (r->s == FCL_SUCCESS)
        call(r, fcl_attention_varlen_forward(r->ctx, &p, q, k, v, cq, ck, sp->seq_q, sp->seq_k, o, lse, NULL));
    if (!backward(r))
        return;
    fcl_tensor dout = temp4(r, r->dt, tq, Hq, D, 0), dq = temp4(r, r->dt, tq, Hq, D, 0);
    fcl_tensor dk = temp4(r, r->dt, tk, Hkv, D, 0), dv = temp4(r, r->dt, tk, Hkv, D, 0);
    if (r->s == FCL_SUCCESS)
        call(r, fcl_attention_varlen_backward(r->ctx, &p, q, k, v, o, dout, lse, cq, ck, sp->seq_q, sp->seq_k, dq,
                                              dk, dv, NULL));
}

static void packed(run *r)
{
    const fcl_precompile_spec *sp = r->sp;
    const int64_t H = sp->num_heads, D = r->D, L = (int64_t)sp->batch * sp->seq_q;
    cl_int *bounds = malloc(sizeof(cl_int) * 2 * (size_t)L);
    if (!bounds) {
        call(r, fcl_fail(r->ctx, FCL_ERR_OUT_OF_MEMORY, "out of host memory"));
        return;
    }
    for (int64_t row = 0; row < L; row++) {
        bounds[2 * row] = (cl_int)(row / sp->seq_q * sp->seq_q);
        bounds[2 * row + 1] = bounds[2 * row] + sp->seq_q;
    }
    fcl_tensor sb = temp_i32(r, 2, 2 * L, bounds);
    free(bounds);
    fcl_attn_params p = params_of(r, 1, L, 0);
    fcl_tensor qkv = temp4(r, r->dt, L, 3, H, D), o = temp4(r, r->dt, L, H, D, 0);
    fcl_tensor lse = temp4(r, FCL_F32, H, L, 0, 0);
    if (r->s == FCL_SUCCESS)
        call(r, fcl_attention_packed_qkv_forward(r->ctx, &p, qkv, sb, o, lse, NULL));
    if (!backward(r))
        return;
    fcl_tensor dout = temp4(r, r->dt, L, H, D, 0), dqkv = temp4(r, r->dt, L, 3, H, D);
    if (r->s == FCL_SUCCESS)
        call(r, fcl_attention_packed_qkv_backward(r->ctx, &p, qkv, o, dout, lse, sb, dqkv, NULL));
}

static void decode(run *r)
{
    const fcl_precompile_spec *sp = r->sp;
    const int64_t B = sp->batch, Lq = sp->seq_q, L = sp->seq_k, Hq = sp->num_heads, Hkv = sp->num_kv_heads;
    const int64_t D = r->D, ps = sp->page_size, pages = ps > 0 ? (L + ps - 1) / ps : 0;
    fcl_kv_cache cache = {NULL, NULL, NULL};
    cl_int *ints = malloc(sizeof(cl_int) * (size_t)(B * (pages > 0 ? pages : 1)));
    if (!ints) {
        call(r, fcl_fail(r->ctx, FCL_ERR_OUT_OF_MEMORY, "out of host memory"));
        return;
    }
    if (ps > 0) { /* sequence b owns pages b * pages .. */
        for (int64_t i = 0; i < B * pages; i++)
            ints[i] = (cl_int)i;
        const int64_t bt_shape[2] = {B, pages};
        cache.block_table = temp(r, FCL_I32, 2, bt_shape, ints);
        cache.k = temp4(r, r->dt, B * pages, ps, Hkv, D);
        cache.v = temp4(r, r->dt, B * pages, ps, Hkv, D);
    } else {
        cache.k = temp4(r, r->dt, B, L, Hkv, D);
        cache.v = temp4(r, r->dt, B, L, Hkv, D);
    }
    for (int64_t b = 0; b < B; b++)
        ints[b] = (cl_int)L;
    fcl_tensor lens = temp_i32(r, 1, B, ints), positions = temp4(r, FCL_I32, B, 0, 0, 0);
    free(ints);
    fcl_tensor kn = temp4(r, r->dt, B, Lq, Hkv, D), vn = temp4(r, r->dt, B, Lq, Hkv, D);
    fcl_tensor q = temp4(r, r->dt, B, Lq, Hq, D), o = temp4(r, r->dt, B, Lq, Hq, D);
    fcl_tensor lse = temp4(r, FCL_F32, B, Hq, Lq, 0);
    fcl_attn_params p = params_of(r, 0, 0, 0); /* decode's mask is its own length form */
    fcl_tensor mask = (sp->features & FCL_PRECOMPILE_KEY_MASK) ? temp4(r, FCL_F32, B, L, 0, 0) : NULL;
    if (r->s != FCL_SUCCESS)
        return;
    if (Lq <= L) {
        call(r, fcl_kv_cache_append(r->ctx, &cache, kn, vn, 0, NULL, NULL));
        call(r, fcl_kv_cache_append(r->ctx, &cache, kn, vn, -1, positions, NULL));
    }
    call(r, fcl_attention_decode(r->ctx, &p, q, &cache, L, NULL, NULL, o, lse, NULL));
    call(r, fcl_attention_decode(r->ctx, &p, q, &cache, 1, NULL, NULL, o, lse, NULL));
    call(r, fcl_attention_decode(r->ctx, &p, q, &cache, -1, lens, NULL, o, lse, NULL));
    if (mask)
        call(r, fcl_attention_decode(r->ctx, &p, q, &cache, -1, NULL, mask, o, lse, NULL));
}

/* One projection weight [N, K] of the spec's weight dtype (I8 with its F32 scale), with a bias in
 * the activations' dtype under FCL_PRECOMPILE_BIAS. */
static fcl_weight weight(run *r, int64_t N, int64_t K)
{
    const fcl_dtype wd = r->sp->weight_dtype;
    fcl_weight w = {temp4(r, wd, N, K, 0, 0), NULL, NULL};
    if (wd == FCL_I8)
        w.scale = temp4(r, FCL_F32, N, 0, 0, 0);
    if (r->sp->features & FCL_PRECOMPILE_BIAS)
        w.bias = temp4(r, r->dt, N, 0, 0, 0);
    return w;
}

static void qkvo(run *r)
{
    const fcl_precompile_spec *sp = r->sp;
    const int64_t H = sp->num_heads, Dm = H * r->D, Lq = sp->seq_q;
    fcl_attn_params p = params_of(r, 1, Lq, 0);
    fcl_tensor x = temp4(r, r->dt, Lq, Dm, 0, 0), o = temp4(r, r->dt, Lq, Dm, 0, 0);
    fcl_weight w[4];
    for (int i = 0; i < 4; i++)
        w[i] = weight(r, Dm, Dm);
    if (r->s == FCL_SUCCESS)
        call(r, fcl_attention_qkvo_forward(r->ctx, &p, (int)H, x, NULL, &w[0], &w[1], &w[2], &w[3], o, NULL));
    if (!backward(r))
        return;
    fcl_tensor dout = temp4(r, r->dt, Lq, Dm, 0, 0), dx = temp4(r, r->dt, Lq, Dm, 0, 0);
    fcl_weight_grad g[4];
    for (int i = 0; i < 4; i++) {
        g[i].dw = temp4(r, FCL_F32, Dm, Dm, 0, 0);
        g[i].db = (sp->features & FCL_PRECOMPILE_BIAS) ? temp4(r, FCL_F32, Dm, 0, 0, 0) : NULL;
    }
    if (r->s == FCL_SUCCESS)
        call(r, fcl_attention_qkvo_backward(r->ctx, &p, (int)H, x, NULL, &w[0], &w[1], &w[2], &w[3], dout, dx, NULL,
                                            &g[0], &g[1], &g[2], &g[3], NULL));
}

static const struct {
    unsigned bit;
    const char *name;
    void (*run)(run *);
} families[] = {
    {FCL_PRECOMPILE_FORWARD, "forward", forward}, {FCL_PRECOMPILE_VARLEN, "varlen", varlen},
    {FCL_PRECOMPILE_PACKED_QKV, "packed_qkv", packed}, {FCL_PRECOMPILE_DECODE, "decode", decode},
    {FCL_PRECOMPILE_QKVO, "qkvo", qkvo},
};

static fcl_status check_spec(fcl_context ctx, const fcl_precompile_spec *sp)
{
    static const char *const op = "fcl_precompile";
    if (!sp)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: spec is NULL", op);
    if ((sp->ops & ~FCL_PRECOMPILE_BACKWARD) == 0 || (sp->ops & ~FCL_PRECOMPILE_ALL))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: spec.ops 0x%x names no op family, or unknown bits", op,
                        sp->ops);
    if (sp->features & ~(FCL_PRECOMPILE_CAUSAL | FCL_PRECOMPILE_SOFTCAP | FCL_PRECOMPILE_KEY_MASK |
                         FCL_PRECOMPILE_ALIBI | FCL_PRECOMPILE_BIAS))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: spec.features 0x%x has unknown bits", op, sp->features);
    if (!sp->dtypes || sp->n_dtypes < 1 || !sp->head_dims || sp->n_head_dims < 1)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: spec.dtypes (%d) and spec.head_dims (%d) must list at "
                        "least one each", op, sp->dtypes ? sp->n_dtypes : 0, sp->head_dims ? sp->n_head_dims : 0);
    for (int i = 0; i < sp->n_head_dims; i++)
        if (sp->head_dims[i] < 1)
            return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: spec.head_dims[%d] is %d; head dims are >= 1", op, i,
                            sp->head_dims[i]);
    if (sp->batch < 1 || sp->seq_q < 1 || sp->seq_k < 1 || sp->num_heads < 1 || sp->num_kv_heads < 1 ||
        sp->page_size < 0)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: spec.batch %d, seq_q %d, seq_k %d, num_heads %d and "
                        "num_kv_heads %d must be >= 1 (page_size %d >= 0)", op, sp->batch, sp->seq_q, sp->seq_k,
                        sp->num_heads, sp->num_kv_heads, sp->page_size);
    return FCL_SUCCESS;
}

fcl_status fcl_precompile(fcl_context ctx, const fcl_precompile_spec *spec)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_precompile: ctx is NULL");
    FCL_LOCK(ctx);
    fcl_clear_error(ctx);
    fcl_status s = check_spec(ctx, spec);
    for (int d = 0; s == FCL_SUCCESS && d < spec->n_dtypes; d++)
        for (int h = 0; s == FCL_SUCCESS && h < spec->n_head_dims; h++)
            for (size_t f = 0; s == FCL_SUCCESS && f < sizeof families / sizeof families[0]; f++) {
                if (!(spec->ops & families[f].bit))
                    continue;
                run r = {.ctx = ctx, .sp = spec, .dt = spec->dtypes[d], .D = spec->head_dims[h]};
                families[f].run(&r);
                char msg[FCL_ERROR_MAX];
                snprintf(msg, sizeof msg, "%s", fcl_last_error(ctx));
                const fcl_status fin = fcl_finish(ctx); /* the runs end before their tensors go */
                if (r.s == FCL_SUCCESS && fin != FCL_SUCCESS) {
                    r.s = fin;
                    snprintf(msg, sizeof msg, "%s", fcl_last_error(ctx));
                }
                for (int i = 0; i < r.n; i++)
                    fcl_tensor_release(r.t[i]);
                if ((s = r.s) != FCL_SUCCESS)
                    s = fcl_fail(ctx, s, "fcl_precompile (%s, %s, head_dim %d): %s", families[f].name,
                                 fcl_dtype_name(spec->dtypes[d]), spec->head_dims[h], msg);
            }
    return s;
}
