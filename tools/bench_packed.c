/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench op "packed_qkv": fcl_attention_packed_qkv_forward straight off a fused QKV
 * buffer [L, 3, H, D] of seeded random sequences packed back to back, with I32 seq_bounds
 * [L, 2] built from the packing and an F32 LSE output, timed by bench_time, then each
 * sampled row checked against its sequence alone. */
#include "bench.h"

#include <stdlib.h>

typedef struct pq_data {
    bench_pack pk;
    bench_host h;                  /* q, k, v, o each [L, H, D] */
    fcl_tensor tqkv, tbounds, to, tlse;
} pq_data;

static void free_data(pq_data *f)
{
    fcl_tensor_release(f->tqkv);
    fcl_tensor_release(f->tbounds);
    fcl_tensor_release(f->to);
    fcl_tensor_release(f->tlse);
    bench_host_free(&f->h);
    bench_pack_free(&f->pk);
}

/* Writes QKV [L, 3, H, D] (row = H * D) and the row bounds, then the poisoned O; returns an
 * exit code. */
static int write_inputs(const bench_env *env, const pq_data *f, size_t row)
{
    int rc = bench_pack_write_qkv(env, &f->pk, &f->h, row, f->tqkv, f->tbounds);
    fcl_status st = rc ? FCL_SUCCESS : fcl_tensor_write_f32(f->to, f->h.o, row * (size_t)f->pk.total);
    return rc ? rc : st ? bench_lib_error(env, "writing O", st) : 0;
}

static int make_tensors(const bench_env *env, const bench_case *c, pq_data *f)
{
    fcl_context ctx = env->ctx;
    int64_t L = f->pk.total;
    int64_t qkvs[4] = {L, 3, c->hq, c->d}, bs[2] = {L, 2}, os[3] = {L, c->hq, c->d}, lses[2] = {c->hq, L};
    fcl_status st = fcl_tensor_create(ctx, c->dtype, 4, qkvs, &f->tqkv);
    if (!st) st = fcl_tensor_create(ctx, FCL_I32, 2, bs, &f->tbounds);
    if (!st) st = fcl_tensor_create(ctx, c->dtype, 3, os, &f->to);
    if (!st) st = fcl_tensor_create(ctx, FCL_F32, 2, lses, &f->tlse);
    if (st)
        return bench_lib_error(env, "creating tensors", st);
    return write_inputs(env, f, (size_t)c->hq * (size_t)c->d);
}

typedef struct pq_call {
    fcl_context ctx;
    fcl_attn_params p;
    const pq_data *f;
} pq_call;

static fcl_status enqueue_packed(void *arg, cl_event *ev)
{
    const pq_call *c = arg;
    return fcl_attention_packed_qkv_forward(c->ctx, &c->p, c->f->tqkv, c->f->tbounds, c->f->to,
                                            c->f->tlse, ev);
}

static int time_runs(const bench_env *env, const bench_case *c, const pq_data *f, bench_result *r)
{
    pq_call call = {env->ctx, bench_params_of(c), f};
    return bench_time_op(env, enqueue_packed, &call, "fcl_attention_packed_qkv_forward", r);
}

int bench_packed_qkv(const bench_env *env, const bench_case *c, int seqs, int max_len,
                     bench_result *r)
{
    pq_data f = {0};
    size_t n = 0;
    int rc = 0;
    r->op = "packed_qkv";
    r->c = *c;
    r->c.hkv = c->hq;
    if (bench_pack_make(&f.pk, seqs, max_len) == 0) {
        n = (size_t)f.pk.total * c->hq * c->d;
        r->c.b = seqs;
        r->c.sq = r->c.sk = f.pk.longest;
        r->c.bhsd = 0;
    }
    if (!f.pk.cu || bench_host_alloc(&f.h, c->dtype, n, n, 0)) {
        fprintf(stderr, "flashcl-bench: out of host memory for the inputs\n");
        rc = BENCH_EXIT_LIBRARY;
    }
    if (!rc) rc = make_tensors(env, &r->c, &f);
    if (!rc) rc = time_runs(env, &r->c, &f, r);
    if (!rc) {
        fcl_status st = fcl_tensor_read_f32(f.to, f.h.o, n);
        if (st)
            rc = bench_lib_error(env, "reading O", st);
    }
    if (!rc)
        bench_pack_finish(env, &f.pk, &f.h, r);
    free_data(&f);
    return rc;
}
