/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench ops "qkvo", "qkvo_backward", "qkvo_backward_saved": one self-attention layer with its projections,
 * fcl_attention_qkvo_forward on X [L, D] with biases, weights in the chosen dtype (I8 with f32
 * row scales), and the attention core alone (fcl_attention_forward on the [1, L, H, D / H]
 * shapes) for the split; checked against the float64 reference when small enough. The backward
 * times fcl_attention_qkvo_backward of that layer (dX and every weight's and bias's gradient, in
 * the activations' dtype, as autograd keeps them), or fcl_attention_qkvo_backward_saved from one
 * fcl_attention_qkvo_forward_save; test_qkvo_backward checks their values. */
#include "bench.h"
#include "ref_projection.h"

#include <math.h>
#include <stdlib.h>

/* Largest check, in L * D * D (the float64 reference projects every row). */
#define CHECK_MAX_WORK 4.0e8

bench_case bench_qkvo_default(const bench_env *env)
{
    bench_case c = {FCL_F16, 1, 2048, 2048, 32, 32, 4096, 0, -1, -1, 0.0f, 0};
    if (!env->is_gpu) {
        c.sq = c.sk = 256;
        c.hq = c.hkv = 8;
        c.d = 512;
    }
    return c;
}

/* Host data of one layer: x, and per projection w (values as floats), scale, bias. */
typedef struct qkvo_host {
    float *x, *o, *w[4], *scale[4], *bias[4];
} qkvo_host;

typedef struct qkvo_dev {
    fcl_tensor x, o, a_q, a_k, a_v, a_o; /* a_*: [1, L, H, dh] tensors of the attention-only run */
    fcl_weight w[4];
    fcl_tensor dout;      /* the backward: dO [L, D] (X's values) */
    fcl_weight_grad g[4]; /* the backward: gradients of the weights and biases, zeroed */
    fcl_qkvo_saved saved; /* qkvo_backward_saved: the forward's activations */
} qkvo_dev;

static void host_free(qkvo_host *h)
{
    free(h->x);
    free(h->o);
    for (int i = 0; i < 4; i++) {
        free(h->w[i]);
        free(h->scale[i]);
        free(h->bias[i]);
    }
}

static void dev_free(qkvo_dev *d)
{
    fcl_tensor all[12] = {d->x,       d->o,       d->a_q,       d->a_k,       d->a_v,         d->a_o,
                          d->dout,    d->saved.Q, d->saved.K,   d->saved.V,   d->saved.A,     d->saved.LSE};
    for (int i = 0; i < 12; i++)
        fcl_tensor_release(all[i]);
    for (int i = 0; i < 4; i++) {
        fcl_tensor_release(d->w[i].w);
        fcl_tensor_release(d->w[i].scale);
        fcl_tensor_release(d->w[i].bias);
        fcl_tensor_release(d->g[i].dw);
        fcl_tensor_release(d->g[i].db);
    }
}

/* x rounded to a float dtype. */
static float as_dtype(fcl_dtype dt, float x)
{
    return dt == FCL_F16 ? fcl_f16_to_f32(fcl_f32_to_f16(x)) : dt == FCL_BF16 ? fcl_bf16_to_f32(fcl_f32_to_bf16(x)) : x;
}

/* Random layer: weights uniform / sqrt(D) (I8: integers in [-127, 127], scale 1 / (127 sqrt(D))). */
static int host_make(const bench_case *c, fcl_dtype wdt, qkvo_host *h)
{
    const size_t D = (size_t)c->d, L = (size_t)c->sq;
    h->x = malloc(sizeof(float) * L * D);
    h->o = malloc(sizeof(float) * L * D);
    if (!h->x || !h->o)
        return -1;
    bench_fill_random(h->x, L * D, 0x9C0, c->dtype);
    for (int i = 0; i < 4; i++) {
        h->w[i] = malloc(sizeof(float) * D * D);
        h->bias[i] = malloc(sizeof(float) * D);
        h->scale[i] = wdt == FCL_I8 ? malloc(sizeof(float) * D) : NULL;
        if (!h->w[i] || !h->bias[i] || (wdt == FCL_I8 && !h->scale[i]))
            return -1;
        bench_fill_random(h->w[i], D * D, 0x9C1 + (uint64_t)i, FCL_F32);
        bench_fill_random(h->bias[i], D, 0x9D1 + (uint64_t)i, c->dtype);
        for (size_t e = 0; e < D * D; e++) /* values exactly representable in the weight dtype */
            h->w[i][e] = wdt == FCL_I8 ? rintf(h->w[i][e] * 127.0f) : as_dtype(wdt, h->w[i][e] / sqrtf((float)D));
        for (size_t n = 0; wdt == FCL_I8 && n < D; n++)
            h->scale[i][n] = 1.0f / (127.0f * sqrtf((float)D));
        for (size_t n = 0; n < D; n++)
            h->bias[i][n] *= 0.1f;
    }
    return 0;
}

static fcl_status tensor_from(fcl_context ctx, fcl_dtype dt, int nd, const int64_t *shape, const float *x,
                              fcl_tensor *out)
{
    fcl_status st = fcl_tensor_create(ctx, dt, nd, shape, out);
    if (!st && x)
        st = fcl_tensor_write_f32(*out, x, (size_t)fcl_tensor_numel(*out));
    return st;
}

/* The layer's tensors; with `backward` also dO (X's values) and the weights' and biases'
 * gradients (zeros, from `zeros`: D * D floats), and with `saved` the saved activations. The
 * backward writes dX into o. */
static fcl_status dev_make(fcl_context ctx, const bench_case *c, fcl_dtype wdt, const float *zeros, int saved,
                           const qkvo_host *h, qkvo_dev *d)
{
    const int backward = zeros != NULL;
    const int64_t L = c->sq, D = c->d, xs[2] = {L, D}, ws[2] = {D, D}, bs[1] = {D};
    const int64_t as[4] = {1, L, c->hq, D / c->hq};
    fcl_status st = tensor_from(ctx, c->dtype, 2, xs, h->x, &d->x);
    if (!st) st = tensor_from(ctx, c->dtype, 2, xs, NULL, &d->o);
    fcl_tensor *att[4] = {&d->a_q, &d->a_k, &d->a_v, &d->a_o};
    for (int i = 0; i < 4 && !st; i++)
        st = tensor_from(ctx, c->dtype, 4, as, h->x, att[i]);
    for (int i = 0; i < 4 && !st; i++) {
        st = tensor_from(ctx, wdt, 2, ws, h->w[i], &d->w[i].w);
        if (!st) st = tensor_from(ctx, c->dtype, 1, bs, h->bias[i], &d->w[i].bias);
        if (!st && h->scale[i]) st = tensor_from(ctx, FCL_F32, 1, bs, h->scale[i], &d->w[i].scale);
        if (!st && backward) st = tensor_from(ctx, c->dtype, 2, ws, zeros, &d->g[i].dw);
        if (!st && backward) st = tensor_from(ctx, c->dtype, 1, bs, zeros, &d->g[i].db);
    }
    if (!st && backward)
        st = tensor_from(ctx, c->dtype, 2, xs, h->x, &d->dout);
    const int64_t ls[2] = {c->hq, L};
    fcl_tensor *keep[5] = {&d->saved.Q, &d->saved.K, &d->saved.V, &d->saved.A, &d->saved.LSE};
    for (int i = 0; i < 5 && saved && !st; i++)
        st = tensor_from(ctx, i < 4 ? c->dtype : FCL_F32, 2, i < 4 ? xs : ls, NULL, keep[i]);
    return st;
}

typedef struct qkvo_call {
    fcl_context ctx;
    fcl_attn_params p;
    const bench_case *c;
    const qkvo_dev *d;
} qkvo_call;

static fcl_status enqueue_qkvo(void *arg, cl_event *ev)
{
    const qkvo_call *q = arg;
    const qkvo_dev *d = q->d;
    return fcl_attention_qkvo_forward(q->ctx, &q->p, q->c->hq, d->x, NULL, &d->w[0], &d->w[1], &d->w[2], &d->w[3],
                                      d->o, ev);
}

static fcl_status enqueue_qkvo_backward(void *arg, cl_event *ev)
{
    const qkvo_call *q = arg;
    const qkvo_dev *d = q->d;
    return fcl_attention_qkvo_backward(q->ctx, &q->p, q->c->hq, d->x, NULL, &d->w[0], &d->w[1], &d->w[2], &d->w[3],
                                       d->dout, d->o, NULL, &d->g[0], &d->g[1], &d->g[2], &d->g[3], ev);
}

static fcl_status enqueue_qkvo_backward_saved(void *arg, cl_event *ev)
{
    const qkvo_call *q = arg;
    const qkvo_dev *d = q->d;
    return fcl_attention_qkvo_backward_saved(q->ctx, &q->p, q->c->hq, d->x, NULL, &d->w[0], &d->w[1], &d->w[2],
                                             &d->w[3], &d->saved, d->dout, d->o, NULL, &d->g[0], &d->g[1], &d->g[2],
                                             &d->g[3], ev);
}

static fcl_status enqueue_attention(void *arg, cl_event *ev)
{
    const qkvo_call *q = arg;
    const qkvo_dev *d = q->d;
    return fcl_attention_forward(q->ctx, &q->p, d->a_q, d->a_k, d->a_v, d->a_o, NULL, ev);
}

/* Every element of O against the float64 reference, when the case is small enough. */
static void check(const bench_case *c, fcl_dtype wdt, const qkvo_host *h, bench_result *r)
{
    r->rows_total = c->sq;
    r->rows_checked = 0;
    r->max_err = r->err_bound = NAN;
    if ((double)c->sq * c->d * c->d > CHECK_MAX_WORK)
        return;
    (void)wdt;
    ref_qkvo_problem p = {.Lq = c->sq, .Lk = c->sq, .D = c->d, .D_ctx = c->d, .H = c->hq};
    p.attn.causal = c->causal;
    p.attn.window_left = c->window_left;
    p.attn.window_right = c->window_right;
    p.attn.softcap = c->softcap;
    ref_weight w[4];
    for (int i = 0; i < 4; i++)
        w[i] = (ref_weight){h->w[i], h->scale[i], h->bias[i]};
    const size_t n = (size_t)c->sq * c->d;
    double *ref = malloc(sizeof(double) * n);
    float *naive = malloc(sizeof(float) * n);
    if (ref && naive) {
        ref_qkvo_forward(&p, h->x, NULL, &w[0], &w[1], &w[2], &w[3], ref);
        ref_qkvo_forward_naive(&p, c->dtype, h->x, NULL, &w[0], &w[1], &w[2], &w[3], naive, NULL, NULL);
        double err = 0.0, nerr = 0.0;
        for (size_t i = 0; i < n; i++) {
            const double e = isnan(h->o[i]) ? INFINITY : fabs((double)h->o[i] - ref[i]);
            const double ne = fabs((double)naive[i] - ref[i]);
            err = e > err ? e : err;
            nerr = ne > nerr ? ne : nerr;
        }
        r->rows_checked = c->sq;
        r->max_err = err;
        r->err_bound = 2.0 * nerr + 1e-5;
    }
    free(ref);
    free(naive);
}

int bench_qkvo(const bench_env *env, const bench_case *c, fcl_dtype wdt, int mode, bench_result *r)
{
    qkvo_host h = {0};
    qkvo_dev d = {0};
    int rc = 0;
    const int backward = mode != BENCH_QKVO_FORWARD, saved = mode == BENCH_QKVO_BACKWARD_SAVED;
    static const char *const ops[3] = {"qkvo", "qkvo_backward", "qkvo_backward_saved"};
    static const char *const calls[3] = {"fcl_attention_qkvo_forward", "fcl_attention_qkvo_backward",
                                         "fcl_attention_qkvo_backward_saved"};
    static fcl_status (*const enqueue[3])(void *, cl_event *) = {enqueue_qkvo, enqueue_qkvo_backward,
                                                                 enqueue_qkvo_backward_saved};
    r->op = ops[mode];
    r->c = *c;
    r->wdtype = (int)wdt;
    float *zeros = backward ? calloc((size_t)c->d * (size_t)c->d, sizeof(float)) : NULL;
    if (host_make(c, wdt, &h) || (backward && !zeros)) {
        fprintf(stderr, "flashcl-bench: out of host memory for the inputs\n");
        rc = BENCH_EXIT_LIBRARY;
    }
    fcl_status st = rc ? FCL_SUCCESS : dev_make(env->ctx, c, wdt, zeros, saved, &h, &d);
    if (st)
        rc = bench_lib_error(env, "creating tensors", st);
    qkvo_call call = {env->ctx, bench_params_of(c), c, &d};
    if (!rc && saved && (st = fcl_attention_qkvo_forward_save(env->ctx, &call.p, c->hq, d.x, NULL, &d.w[0], &d.w[1],
                                                              &d.w[2], &d.w[3], d.o, &d.saved, NULL)))
        rc = bench_lib_error(env, "fcl_attention_qkvo_forward_save", st);
    bench_result att = *r;
    if (!rc && !backward)
        rc = bench_time_op(env, enqueue_attention, &call, "fcl_attention_forward", &att);
    if (!rc)
        rc = bench_time_op(env, enqueue[mode], &call, calls[mode], r);
    if (!rc && (st = fcl_tensor_read_f32(d.o, h.o, (size_t)c->sq * c->d)))
        rc = bench_lib_error(env, backward ? "reading dX" : "reading O", st);
    if (!rc) {
        if (backward) { /* values: test_qkvo_backward */
            r->rows_total = c->sq;
            r->rows_checked = 0;
            r->max_err = r->err_bound = NAN;
        } else {
            check(c, wdt, &h, r);
        }
        r->has_nan = 0;
        for (size_t i = 0; i < (size_t)c->sq * c->d; i++)
            r->has_nan |= isnan(h.o[i]);
        r->ok = !r->has_nan && (r->rows_checked == 0 || r->max_err <= r->err_bound);
        bench_case a = *c;
        a.b = 1;
        a.sk = a.sq;
        a.hkv = a.hq;
        a.d = c->d / c->hq;
        /* the forward: 4 projections and the attention; the backward, as autograd counts it: each
         * projection's two gradients and the attention's backward (2.5 forwards), not the
         * recomputed forward */
        const double proj = 8.0 * c->sq * (double)c->d * c->d, attn = bench_flops_convention(&a);
        const double flops = backward ? 2.0 * proj + 2.5 * attn : proj + attn;
        r->ms_attention = backward ? NAN : att.ms;
        r->ms_event = NAN; /* several kernels */
        r->tflops = r->tflops_exact = flops / (r->ms * 1e-3) * 1e-12;
        r->tflops_event = NAN;
    }
    dev_free(&d);
    host_free(&h);
    free(zeros);
    return rc;
}
