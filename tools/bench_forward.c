/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench op "forward": fcl_attention_forward on random inputs (fixed seeds), with an
 * F32 LSE output as in training, timed by bench_time, then checked on sampled rows. */
#include "bench.h"

#include <stdlib.h>

typedef struct fwd_data {
    bench_host h;                          /* host, dense [B,S,H,D] */
    fcl_tensor tq, tk, tv, to, tlse;
} fwd_data;

bench_case bench_forward_default(const bench_env *env)
{
    bench_case c = {FCL_F16, 2, 1024, 1024, 16, 4, 128, 0, -1, -1, 0.0f, 0};
    if (!env->is_gpu) {
        c.b = 1; c.sq = c.sk = 512; c.hq = 8; c.hkv = 2; c.d = 64;
    }
    return c;
}

static void free_data(fwd_data *f)
{
    fcl_tensor_release(f->tq);
    fcl_tensor_release(f->tk);
    fcl_tensor_release(f->tv);
    fcl_tensor_release(f->to);
    fcl_tensor_release(f->tlse);
    bench_host_free(&f->h);
}

/* Device tensors, filled from the host arrays (O poisoned). */
static int make_tensors(const bench_env *env, const bench_case *c, fwd_data *f, size_t nq,
                        size_t nk)
{
    fcl_context ctx = env->ctx;
    int64_t lse_shape[3] = {c->b, c->hq, c->sq};
    fcl_status st = bench_make_bshd(ctx, c->dtype, c->bhsd, c->b, c->sq, c->hq, c->d, &f->tq);
    if (!st) st = bench_make_bshd(ctx, c->dtype, c->bhsd, c->b, c->sk, c->hkv, c->d, &f->tk);
    if (!st) st = bench_make_bshd(ctx, c->dtype, c->bhsd, c->b, c->sk, c->hkv, c->d, &f->tv);
    if (!st) st = bench_make_bshd(ctx, c->dtype, c->bhsd, c->b, c->sq, c->hq, c->d, &f->to);
    if (!st) st = fcl_tensor_create(ctx, FCL_F32, 3, lse_shape, &f->tlse);
    if (st)
        return bench_lib_error(env, "creating tensors", st);
    st = fcl_tensor_write_f32(f->tq, f->h.q, nq);
    if (!st) st = fcl_tensor_write_f32(f->tk, f->h.k, nk);
    if (!st) st = fcl_tensor_write_f32(f->tv, f->h.v, nk);
    if (!st) st = fcl_tensor_write_f32(f->to, f->h.o, nq);
    return st ? bench_lib_error(env, "writing inputs", st) : 0;
}

typedef struct fwd_call {
    fcl_context ctx;
    fcl_attn_params p;
    const fwd_data *f;
} fwd_call;

static fcl_status enqueue_forward(void *arg, cl_event *ev)
{
    const fwd_call *c = arg;
    return fcl_attention_forward(c->ctx, &c->p, c->f->tq, c->f->tk, c->f->tv, c->f->to, c->f->tlse, ev);
}

/* Warmup, then the medians of the timed calls. */
static int time_runs(const bench_env *env, const bench_case *c, const fwd_data *f, bench_result *r)
{
    fwd_call call = {env->ctx, bench_params_of(c), f};
    return bench_time_op(env, enqueue_forward, &call, "fcl_attention_forward", r);
}

int bench_forward(const bench_env *env, const bench_case *c, bench_result *r)
{
    fwd_data f = {0};
    size_t nq = (size_t)c->b * c->sq * c->hq * c->d;
    size_t nk = (size_t)c->b * c->sk * c->hkv * c->d;
    int rc = 0;
    r->op = "forward";
    r->c = *c;
    if (bench_host_alloc(&f.h, c->dtype, nq, nk, 0)) {
        fprintf(stderr, "flashcl-bench: out of host memory for the inputs\n");
        rc = BENCH_EXIT_LIBRARY;
    }
    if (!rc) rc = make_tensors(env, c, &f, nq, nk);
    if (!rc) rc = time_runs(env, c, &f, r);
    if (!rc) {
        fcl_status st = fcl_tensor_read_f32(f.to, f.h.o, nq);
        if (st)
            rc = bench_lib_error(env, "reading O", st);
    }
    if (!rc) {
        bench_check_in in = {.c = c, .q = f.h.q, .k = f.h.k, .v = f.h.v, .o = f.h.o,
                             .check_rows = env->check_rows};
        bench_check_forward(&in, r);
        r->tflops = bench_flops_convention(c) / (r->ms * 1e-3) * 1e-12;
        r->tflops_exact = bench_flops_exact(c) / (r->ms * 1e-3) * 1e-12;
        r->tflops_event = bench_flops_convention(c) / (r->ms_event * 1e-3) * 1e-12;
    }
    free_data(&f);
    return rc;
}
