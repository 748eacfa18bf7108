/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench op "varlen": fcl_attention_varlen_forward over seeded random sequences packed
 * back to back (Q [total, Hq, D], K and V [total, Hkv, D], one I32 cu_seqlens tensor passed
 * for both sides since each sequence attends to itself), with an F32 LSE output, timed by
 * bench_time, then each sampled row checked against its sequence alone. */
#include "bench.h"

typedef struct vl_data {
    bench_pack pk;
    bench_host h;                  /* packed [total, H, D] */
    fcl_tensor tq, tk, tv, tcu, to, tlse;
} vl_data;

static void free_data(vl_data *f)
{
    fcl_tensor_release(f->tq);
    fcl_tensor_release(f->tk);
    fcl_tensor_release(f->tv);
    fcl_tensor_release(f->tcu);
    fcl_tensor_release(f->to);
    fcl_tensor_release(f->tlse);
    bench_host_free(&f->h);
    bench_pack_free(&f->pk);
}

static int make_tensors(const bench_env *env, const bench_case *c, vl_data *f, size_t nq, size_t nk)
{
    fcl_context ctx = env->ctx;
    int64_t qs[3] = {f->pk.total, c->hq, c->d}, ks[3] = {f->pk.total, c->hkv, c->d};
    int64_t cus[1] = {(int64_t)f->pk.seqs + 1}, lses[2] = {c->hq, f->pk.total};
    fcl_status st = fcl_tensor_create(ctx, c->dtype, 3, qs, &f->tq);
    if (!st) st = fcl_tensor_create(ctx, c->dtype, 3, ks, &f->tk);
    if (!st) st = fcl_tensor_create(ctx, c->dtype, 3, ks, &f->tv);
    if (!st) st = fcl_tensor_create(ctx, c->dtype, 3, qs, &f->to);
    if (!st) st = fcl_tensor_create(ctx, FCL_I32, 1, cus, &f->tcu);
    if (!st) st = fcl_tensor_create(ctx, FCL_F32, 2, lses, &f->tlse);
    if (st)
        return bench_lib_error(env, "creating tensors", st);
    st = fcl_tensor_write_f32(f->tq, f->h.q, nq);
    if (!st) st = fcl_tensor_write_f32(f->tk, f->h.k, nk);
    if (!st) st = fcl_tensor_write_f32(f->tv, f->h.v, nk);
    if (!st) st = fcl_tensor_write_f32(f->to, f->h.o, nq);
    if (!st) st = fcl_tensor_write_raw(f->tcu, f->pk.cu, sizeof *f->pk.cu * ((size_t)f->pk.seqs + 1));
    return st ? bench_lib_error(env, "writing inputs", st) : 0;
}

typedef struct vl_call {
    fcl_context ctx;
    fcl_attn_params p;
    const vl_data *f;
} vl_call;

static fcl_status enqueue_varlen(void *arg, cl_event *ev)
{
    const vl_call *c = arg;
    const vl_data *f = c->f;
    return fcl_attention_varlen_forward(c->ctx, &c->p, f->tq, f->tk, f->tv, f->tcu, f->tcu,
                                        f->pk.longest, f->pk.longest, f->to, f->tlse, ev);
}

static int time_runs(const bench_env *env, const bench_case *c, const vl_data *f, bench_result *r)
{
    vl_call call = {env->ctx, bench_params_of(c), f};
    return bench_time_op(env, enqueue_varlen, &call, "fcl_attention_varlen_forward", r);
}

int bench_varlen(const bench_env *env, const bench_case *c, int seqs, int max_len, bench_result *r)
{
    vl_data f = {0};
    size_t nq = 0, nk = 0;
    int rc = 0;
    r->op = "varlen";
    r->c = *c;
    if (bench_pack_make(&f.pk, seqs, max_len) == 0) {
        nq = (size_t)f.pk.total * c->hq * c->d;
        nk = (size_t)f.pk.total * c->hkv * c->d;
        r->c.b = seqs;
        r->c.sq = r->c.sk = f.pk.longest;
        r->c.bhsd = 0;
    }
    if (!f.pk.cu || bench_host_alloc(&f.h, c->dtype, nq, nk, 0)) {
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
    if (!rc)
        bench_pack_finish(env, &f.pk, &f.h, r);
    free_data(&f);
    return rc;
}
