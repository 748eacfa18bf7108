/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench ops "backward", "varlen_backward" and "packed_qkv_backward":
 * fcl_attention_backward (or fcl_attention_varlen_backward over the seeded packing of
 * bench_pack.c, or fcl_attention_packed_qkv_backward over the same packing as one fused QKV
 * buffer) on random inputs (fixed seeds) after one forward for O and LSE, timed by bench_time
 * (wall clock: the op is several kernels, so its last event is not the op's device time), then
 * checked on batch 0's (the first sequence's) first KV-head group against the float64 reference
 * gradients with the 3x rule. */
#include "bench.h"
#include "ref_attention_backward.h"

#include <math.h>
#include <stdlib.h>

#define SEED_DO 0xD0D0ull
/* Largest check, in group * Sq * Sk * D (the float64 reference and its naive twin are
 * O(that) each); bigger cases are reported unchecked. */
#define CHECK_MAX_WORK 2.0e9

typedef struct bwd_data {
    bench_pack pk;  /* varlen and packed: the packing (pk.cu NULL: dense) */
    int packed;     /* the fused-QKV form: t[TQ] is QKV [total, 3, H, D], t[TDQ] dQKV, t[TCU] the
                     * seq_bounds [total, 2]; t[TK], t[TV], t[TDK], t[TDV] unused */
    bench_host h;   /* q, k, v; o gets dQ back */
    float *dout;    /* dO [B, Sq, Hq, D] (varlen: [total, Hq, D]) */
    float *dk, *dv; /* read back [B, Sk, Hkv, D] (varlen: [total, Hkv, D]) */
    fcl_tensor t[10]; /* Q K V O dO LSE dQ dK dV, and varlen's prefix sums */
} bwd_data;

enum { TQ, TK, TV, TO, TDO, TLSE, TDQ, TDK, TDV, TCU, N_TENSORS };

bench_case bench_backward_default(const bench_env *env)
{
    bench_case c = bench_forward_default(env);
    if (!env->is_gpu) {
        c.sq = c.sk = 256;
        c.hq = 4;
    }
    return c;
}

static void free_data(bwd_data *f)
{
    for (int i = 0; i < N_TENSORS; i++)
        fcl_tensor_release(f->t[i]);
    bench_pack_free(&f->pk);
    free(f->dout);
    free(f->dk);
    free(f->dv);
    bench_host_free(&f->h);
}

/* The fused-QKV form's device tensors (QKV and dQKV [total, 3, H, D], O and dO [total, H, D],
 * LSE [H, total], seq_bounds [total, 2]) from the host arrays, then its forward for O and LSE. */
static int prepare_packed(const bench_env *env, const bench_case *c, bwd_data *f)
{
    fcl_context ctx = env->ctx;
    const int64_t L = f->pk.total;
    const int64_t qkvs[4] = {L, 3, c->hq, c->d}, os[3] = {L, c->hq, c->d}, ls[2] = {c->hq, L}, bs[2] = {L, 2};
    const size_t row = (size_t)c->hq * (size_t)c->d;
    fcl_status st = fcl_tensor_create(ctx, c->dtype, 4, qkvs, &f->t[TQ]);
    if (!st) st = fcl_tensor_create(ctx, c->dtype, 4, qkvs, &f->t[TDQ]);
    if (!st) st = fcl_tensor_create(ctx, c->dtype, 3, os, &f->t[TO]);
    if (!st) st = fcl_tensor_create(ctx, c->dtype, 3, os, &f->t[TDO]);
    if (!st) st = fcl_tensor_create(ctx, FCL_F32, 2, ls, &f->t[TLSE]);
    if (!st) st = fcl_tensor_create(ctx, FCL_I32, 2, bs, &f->t[TCU]);
    if (st)
        return bench_lib_error(env, "creating tensors", st);
    const int rc = bench_pack_write_qkv(env, &f->pk, &f->h, row, f->t[TQ], f->t[TCU]);
    if (rc)
        return rc;
    if ((st = fcl_tensor_write_f32(f->t[TDO], f->dout, row * (size_t)L)))
        return bench_lib_error(env, "writing dO", st);
    fcl_attn_params p = bench_params_of(c);
    st = fcl_attention_packed_qkv_forward(ctx, &p, f->t[TQ], f->t[TCU], f->t[TO], f->t[TLSE], NULL);
    if (!st) st = fcl_finish(ctx);
    return st ? bench_lib_error(env, "the forward before the backward", st) : 0;
}

/* Device tensors from the host arrays (varlen: [total, H, D], LSE [Hq, total], the prefix sums
 * passed for both sides), then the forward for O and LSE. */
static int prepare(const bench_env *env, const bench_case *c, bwd_data *f, size_t nq, size_t nk)
{
    if (f->packed)
        return prepare_packed(env, c, f);
    fcl_context ctx = env->ctx;
    const bench_pack *pk = f->pk.cu ? &f->pk : NULL;
    const int dims = pk ? 3 : 4;
    const int64_t qs[4] = {c->b, c->sq, c->hq, c->d}, ks[4] = {c->b, c->sk, c->hkv, c->d};
    const int64_t vqs[3] = {pk ? pk->total : 0, c->hq, c->d}, vks[3] = {pk ? pk->total : 0, c->hkv, c->d};
    const int64_t ls[3] = {c->b, c->hq, c->sq}, vls[2] = {c->hq, pk ? pk->total : 0};
    const int64_t *q = pk ? vqs : qs, *k = pk ? vks : ks;
    const int64_t *shapes[9] = {q, k, k, q, q, pk ? vls : ls, q, k, k};
    fcl_status st = FCL_SUCCESS;
    for (int i = 0; i < 9 && !st; i++)
        st = fcl_tensor_create(ctx, i == TLSE ? FCL_F32 : c->dtype, i == TLSE ? dims - 1 : dims, shapes[i], &f->t[i]);
    const int64_t ncu = pk ? pk->seqs + 1 : 0;
    if (!st && pk) st = fcl_tensor_create(ctx, FCL_I32, 1, &ncu, &f->t[TCU]);
    if (st)
        return bench_lib_error(env, "creating tensors", st);
    st = fcl_tensor_write_f32(f->t[TQ], f->h.q, nq);
    if (!st) st = fcl_tensor_write_f32(f->t[TK], f->h.k, nk);
    if (!st) st = fcl_tensor_write_f32(f->t[TV], f->h.v, nk);
    if (!st) st = fcl_tensor_write_f32(f->t[TDO], f->dout, nq);
    if (!st && pk) st = fcl_tensor_write_raw(f->t[TCU], pk->cu, sizeof *pk->cu * (size_t)ncu);
    if (st)
        return bench_lib_error(env, "writing inputs", st);
    fcl_attn_params p = bench_params_of(c);
    fcl_tensor const *t = f->t;
    st = pk ? fcl_attention_varlen_forward(ctx, &p, t[TQ], t[TK], t[TV], t[TCU], t[TCU], pk->longest, pk->longest,
                                           t[TO], t[TLSE], NULL)
            : fcl_attention_forward(ctx, &p, t[TQ], t[TK], t[TV], t[TO], t[TLSE], NULL);
    if (!st) st = fcl_finish(ctx);
    return st ? bench_lib_error(env, "the forward before the backward", st) : 0;
}

typedef struct bwd_call {
    fcl_context ctx;
    fcl_attn_params p;
    const bwd_data *f;
} bwd_call;

static fcl_status enqueue_backward(void *arg, cl_event *ev)
{
    const bwd_call *c = arg;
    fcl_tensor const *t = c->f->t;
    const bench_pack *pk = &c->f->pk;
    if (c->f->packed)
        return fcl_attention_packed_qkv_backward(c->ctx, &c->p, t[TQ], t[TO], t[TDO], t[TLSE], t[TCU], t[TDQ], ev);
    if (pk->cu)
        return fcl_attention_varlen_backward(c->ctx, &c->p, t[TQ], t[TK], t[TV], t[TO], t[TDO], t[TLSE], t[TCU],
                                             t[TCU], pk->longest, pk->longest, t[TDQ], t[TDK], t[TDV], ev);
    return fcl_attention_backward(c->ctx, &c->p, t[TQ], t[TK], t[TV], t[TO], t[TDO], t[TLSE], t[TDQ], t[TDK],
                                  t[TDV], ev);
}

/* x[b=0, s, h0 .. h0+nh, :] of a dense [B, S, H, D] array, as a [1, S, nh, D] copy. */
static float *slice_heads(const float *x, int S, int H, int D, int h0, int nh)
{
    float *out = malloc(sizeof(float) * (size_t)S * nh * D);
    for (int s = 0; out && s < S; s++)
        for (int h = 0; h < nh; h++)
            for (int d = 0; d < D; d++)
                out[((size_t)s * nh + h) * D + d] = x[((size_t)s * H + h0 + h) * D + d];
    return out;
}

/* Max |got - ref| over a slice (NaN -> inf) and the naive error; updates the worst ratio. */
static void compare(const float *got, const double *ref, const float *naive, size_t n, bench_result *r,
                    double *worst)
{
    double err = 0.0, nerr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = isnan(got[i]) ? INFINITY : fabs((double)got[i] - ref[i]);
        double ne = fabs((double)naive[i] - ref[i]);
        err = e > err ? e : err;
        nerr = ne > nerr ? ne : nerr;
    }
    const double bound = 3.0 * nerr + 1e-5;
    if (err / bound > *worst || isnan(r->max_err)) {
        *worst = err / bound;
        r->max_err = err;
        r->err_bound = bound;
    }
}

/* Batch 0, KV head 0 and its query heads: every gradient element of that sub-problem; nothing
 * with --check-rows 0 (check_rows). */
static void check(const bench_case *c, const bwd_data *f, int check_rows, bench_result *r)
{
    const int g = c->hq / c->hkv;
    r->max_err = r->err_bound = NAN;
    r->rows_total = (long)c->b * c->sq * c->hq;
    r->rows_checked = 0;
    if (check_rows == 0 || (double)g * c->sq * c->sk * c->d > CHECK_MAX_WORK)
        return;
    ref_attn_problem p = {.B = 1, .Sq = c->sq, .Sk = c->sk, .Hq = g, .Hkv = 1, .D = c->d, .causal = c->causal,
                          .window_left = c->window_left, .window_right = c->window_right, .softcap = c->softcap};
    const size_t nq = (size_t)c->sq * g * c->d, nk = (size_t)c->sk * c->d;
    float *in[8] = {slice_heads(f->h.q, c->sq, c->hq, c->d, 0, g), slice_heads(f->h.k, c->sk, c->hkv, c->d, 0, 1),
                    slice_heads(f->h.v, c->sk, c->hkv, c->d, 0, 1), slice_heads(f->dout, c->sq, c->hq, c->d, 0, g),
                    slice_heads(f->h.o, c->sq, c->hq, c->d, 0, g), slice_heads(f->dk, c->sk, c->hkv, c->d, 0, 1),
                    slice_heads(f->dv, c->sk, c->hkv, c->d, 0, 1), malloc(sizeof(float) * (nq + 2 * nk))};
    double *ref = malloc(sizeof(double) * (nq + 2 * nk));
    int have = ref != NULL;
    for (int i = 0; i < 8; i++)
        have = have && in[i];
    if (have) {
        float *naive = in[7];
        ref_attention_backward(&p, in[0], in[1], in[2], in[3], ref, ref + nq, ref + nq + nk);
        ref_attention_backward_naive(&p, c->dtype, in[0], in[1], in[2], in[3], naive, naive + nq, naive + nq + nk);
        double worst = 0.0;
        compare(in[4], ref, naive, nq, r, &worst);
        compare(in[5], ref + nq, naive + nq, nk, r, &worst);
        compare(in[6], ref + nq + nk, naive + nq + nk, nk, r, &worst);
        r->rows_checked = (long)c->sq * g;
    }
    for (int i = 0; i < 8; i++)
        free(in[i]);
    free(ref);
}

static int any_nan(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (isnan(x[i]))
            return 1;
    return 0;
}

/* dQ into f->h.o, dK and dV into f->dk and f->dv (the fused form: split out of dQKV). */
static int read_gradients(const bench_env *env, bwd_data *f, size_t nq, size_t nk)
{
    fcl_status st = FCL_SUCCESS;
    if (f->packed) {
        float *dqkv = malloc(sizeof *dqkv * 3 * nq);
        if (!dqkv) {
            fprintf(stderr, "flashcl-bench: out of host memory for the gradients\n");
            return BENCH_EXIT_LIBRARY;
        }
        st = fcl_tensor_read_f32(f->t[TDQ], dqkv, 3 * nq);
        if (!st)
            bench_unpack_qkv(dqkv, f->h.o, f->dk, f->dv, (size_t)f->pk.total, nq / (size_t)f->pk.total);
        free(dqkv);
    } else {
        st = fcl_tensor_read_f32(f->t[TDQ], f->h.o, nq);
        if (!st) st = fcl_tensor_read_f32(f->t[TDK], f->dk, nk);
        if (!st) st = fcl_tensor_read_f32(f->t[TDV], f->dv, nk);
    }
    return st ? bench_lib_error(env, "reading the gradients", st) : 0;
}

/* Times the op on the inputs of c (varlen: f->pk made) and checks it: batch 0's (the first
 * sequence's) first KV-head group. */
static int run_backward(const bench_env *env, const bench_case *c, bwd_data *f, bench_result *r)
{
    const long rows_q = f->pk.cu ? f->pk.total : (long)c->b * c->sq, rows_k = f->pk.cu ? f->pk.total : (long)c->b * c->sk;
    const size_t nq = (size_t)rows_q * c->hq * c->d, nk = (size_t)rows_k * c->hkv * c->d;
    int rc = 0;
    f->dout = malloc(sizeof(float) * nq);
    f->dk = malloc(sizeof(float) * nk);
    f->dv = malloc(sizeof(float) * nk);
    if (bench_host_alloc(&f->h, c->dtype, nq, nk, 0) || !f->dout || !f->dk || !f->dv) {
        fprintf(stderr, "flashcl-bench: out of host memory for the inputs\n");
        rc = BENCH_EXIT_LIBRARY;
    }
    if (!rc) {
        bench_fill_random(f->dout, nq, SEED_DO, c->dtype);
        rc = prepare(env, c, f, nq, nk);
    }
    bwd_call call = {env->ctx, bench_params_of(c), f};
    if (!rc)
        rc = bench_time_op(env, enqueue_backward, &call,
                           f->packed   ? "fcl_attention_packed_qkv_backward"
                           : f->pk.cu ? "fcl_attention_varlen_backward"
                                      : "fcl_attention_backward",
                           r);
    if (!rc)
        rc = read_gradients(env, f, nq, nk);
    if (!rc) {
        bench_case first = *c; /* varlen: sequence 0 alone, at rows 0 .. of the packed arrays */
        if (f->pk.cu) {
            first.b = 1;
            first.sq = first.sk = f->pk.cu[1];
        }
        check(&first, f, env->check_rows, r);
        r->rows_total = (long)rows_q * c->hq;
        r->has_nan = any_nan(f->h.o, nq) || any_nan(f->dk, nk) || any_nan(f->dv, nk);
        r->ok = !r->has_nan && (r->rows_checked == 0 || r->max_err <= r->err_bound);
        r->ms_event = NAN; /* several kernels: only the wall clock covers the op */
        const double flops = f->pk.cu ? bench_pack_flops(&f->pk, c) : bench_flops_convention(c);
        const double exact = f->pk.cu ? flops : bench_flops_exact(c);
        r->tflops = 2.5 * flops / (r->ms * 1e-3) * 1e-12;
        r->tflops_exact = 2.5 * exact / (r->ms * 1e-3) * 1e-12;
        r->tflops_event = NAN;
    }
    return rc;
}

int bench_backward(const bench_env *env, const bench_case *c, bench_result *r)
{
    bwd_data f = {0};
    r->op = "backward";
    r->c = *c;
    const int rc = run_backward(env, c, &f, r);
    free_data(&f);
    return rc;
}

/* The varlen or fused-QKV backward (op name `op`) on a packing of `seqs` sequences of up to
 * `max_len` rows. */
static int run_packing(const bench_env *env, const bench_case *c, int seqs, int max_len, int packed, const char *op,
                       bench_result *r)
{
    bwd_data f = {.packed = packed};
    int rc = 0;
    r->op = op;
    r->c = *c;
    if (bench_pack_make(&f.pk, seqs, max_len) != 0 || !f.pk.cu) {
        fprintf(stderr, "flashcl-bench: out of host memory for the packing\n");
        rc = BENCH_EXIT_LIBRARY;
    } else {
        r->c.b = seqs;
        r->c.sq = r->c.sk = f.pk.longest;
        r->c.bhsd = 0;
        if (packed)
            r->c.hkv = c->hq;
        r->seqs = seqs;
        r->max_len = max_len;
        r->total_q = r->total_k = f.pk.total;
        rc = run_backward(env, &r->c, &f, r);
    }
    free_data(&f);
    return rc;
}

int bench_varlen_backward(const bench_env *env, const bench_case *c, int seqs, int max_len, bench_result *r)
{
    return run_packing(env, c, seqs, max_len, 0, "varlen_backward", r);
}

int bench_packed_qkv_backward(const bench_env *env, const bench_case *c, int seqs, int max_len, bench_result *r)
{
    return run_packing(env, c, seqs, max_len, 1, "packed_qkv_backward", r);
}
