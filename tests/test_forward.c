/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcl_attention_forward against the float64 reference, on the FLASHCL_DEVICE device.
 *
 * Rule (DESIGN.md): max |kernel - float64| <= 2 * max |naive - float64| + 1e-5, for O and for
 * LSE, where "naive" rounds scores, probabilities and outputs to the storage dtype.
 * Outputs are NaN-poisoned before each run; no NaN may remain; rows that see no key must
 * write O = 0 exactly and LSE = -inf; elements outside strided output views stay poisoned.
 *
 * Criterion forks one process per Test, and each process compiles the programs it uses, so
 * cases are grouped into a few Tests that each iterate a table, sharing compiled programs.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention.h"
#include "support.h"

#define U (-1) /* unbounded window side */

enum { MASK_NONE = 0, MASK_BSK = 1, MASK_SK = 2, MASK_SK_ZERO = 3 };
enum { ALIBI_NONE = 0, ALIBI_H = 1, ALIBI_BH = 2 };
enum {
    LAYOUT_BSHD = 0,   /* contiguous [B,S,H,D] everywhere, LSE contiguous */
    LAYOUT_BHSD = 1,   /* Q,K,V,O stored [B,H,S,D], passed as permuted views; LSE padded rows */
    LAYOUT_PADDED = 2, /* Q/O with padded head stride and odd offsets; K,V one fused KV buffer */
    LAYOUT_NO_LSE = 3  /* contiguous, LSE = NULL */
};

typedef struct fcase {
    int Sq, Sk, B, Hq, Hkv, D;
    int causal, wl, wr;
    float softcap, scale;
    int mask, alibi, layout;
    float amp; /* inputs uniform in [-amp, amp) */
} fcase;

static void describe(const fcase *c, fcl_dtype dt, char *buf, size_t n)
{
    snprintf(buf, n,
             "%s B%d Sq%d Sk%d Hq%d Hkv%d D%d causal%d wl%d wr%d softcap%g scale%g mask%d alibi%d "
             "layout%d amp%g",
             fcl_dtype_name(dt), c->B, c->Sq, c->Sk, c->Hq, c->Hkv, c->D, c->causal, c->wl, c->wr,
             (double)c->softcap, (double)c->scale, c->mask, c->alibi, c->layout, (double)c->amp);
}

/* A strided view over a fresh buffer of base_n elements; the base is returned in *base. */
static fcl_tensor make_view(fcl_context ctx, fcl_dtype dt, int64_t base_n, int ndim,
                            const int64_t *shape, const int64_t *strides, int64_t offset,
                            fcl_tensor *base)
{
    fcl_tensor b = support_tensor(ctx, dt, 1, &base_n, NULL), v = NULL;
    fcl_status st = fcl_tensor_view(b, ndim, shape, strides, offset, &v);
    cr_assert(st == FCL_SUCCESS, "fcl_tensor_view: %s: %s", fcl_status_string(st),
              fcl_last_error(ctx));
    *base = b;
    return v;
}

/* Device tensors of one case, with the bases of the strided outputs. */
typedef struct case_tensors {
    fcl_tensor q, k, v, o, lse, mask, alibi;
    fcl_tensor o_base, lse_base, q_base, kv_base; /* NULL when not strided */
    int64_t o_base_n, lse_base_n;
    int64_t o_shape[4], o_strides[4], o_offset;
    int64_t l_shape[3], l_strides[3], l_offset;
} case_tensors;

static void release_tensors(case_tensors *t)
{
    fcl_tensor all[] = {t->q, t->k, t->v, t->o, t->lse, t->mask, t->alibi,
                        t->o_base, t->lse_base, t->q_base, t->kv_base};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    memset(t, 0, sizeof *t);
}

static void write_host(fcl_context ctx, fcl_tensor t, const float *x)
{
    fcl_status st = fcl_tensor_write_f32(t, x, (size_t)fcl_tensor_numel(t));
    cr_assert(st == FCL_SUCCESS, "write_f32: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
}

/* Creates Q, K, V, O, LSE in the case's layout and uploads Q, K, V. */
static void make_tensors(fcl_context ctx, fcl_dtype dt, const fcase *c, const float *q,
                         const float *k, const float *v, case_tensors *t)
{
    const int64_t B = c->B, Sq = c->Sq, Sk = c->Sk, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    const int64_t qs[4] = {B, Sq, Hq, D}, ks[4] = {B, Sk, Hkv, D}, ls[3] = {B, Hq, Sq};
    memset(t, 0, sizeof *t);
    memcpy(t->o_shape, qs, sizeof qs);
    memcpy(t->l_shape, ls, sizeof ls);
    if (c->layout == LAYOUT_BSHD || c->layout == LAYOUT_NO_LSE) {
        t->q = support_tensor(ctx, dt, 4, qs, q);
        t->k = support_tensor(ctx, dt, 4, ks, k);
        t->v = support_tensor(ctx, dt, 4, ks, v);
        t->o = support_tensor(ctx, dt, 4, qs, NULL);
        if (c->layout == LAYOUT_BSHD)
            t->lse = support_tensor(ctx, FCL_F32, 3, ls, NULL);
        return;
    }
    fcl_tensor base;
    if (c->layout == LAYOUT_BHSD) {
        /* [B,H,S,D] storage seen as [B,S,H,D]. */
        const int64_t qst[4] = {Hq * Sq * D, D, Sq * D, 1}, kst[4] = {Hkv * Sk * D, D, Sk * D, 1};
        t->q = make_view(ctx, dt, B * Hq * Sq * D, 4, qs, qst, 0, &base);
        fcl_tensor_release(base); /* the view keeps the buffer */
        t->k = make_view(ctx, dt, B * Hkv * Sk * D, 4, ks, kst, 0, &base);
        fcl_tensor_release(base);
        t->v = make_view(ctx, dt, B * Hkv * Sk * D, 4, ks, kst, 0, &base);
        fcl_tensor_release(base);
        t->o_base_n = B * Hq * Sq * D;
        memcpy(t->o_strides, qst, sizeof qst);
        t->o_offset = 0;
    } else {
        /* Q in [B,Sq,Hq,D+3] rows starting at element 5; K and V interleaved in one
         * [B,Sk,2,Hkv,D] buffer (a KV-cache slice); O in [B,Sq,Hq,D+1] rows from element 1. */
        const int64_t qst[4] = {Sq * Hq * (D + 3), Hq * (D + 3), D + 3, 1};
        const int64_t kst[4] = {Sk * 2 * Hkv * D, 2 * Hkv * D, D, 1};
        t->q = make_view(ctx, dt, B * Sq * Hq * (D + 3) + 5, 4, qs, qst, 5, &t->q_base);
        t->k = make_view(ctx, dt, B * Sk * 2 * Hkv * D, 4, ks, kst, 0, &t->kv_base);
        fcl_status st = fcl_tensor_view(t->kv_base, 4, ks, kst, Hkv * D, &t->v);
        cr_assert(st == FCL_SUCCESS, "V view: %s", fcl_last_error(ctx));
        const int64_t ost[4] = {Sq * Hq * (D + 1), Hq * (D + 1), D + 1, 1};
        t->o_base_n = B * Sq * Hq * (D + 1) + 1;
        memcpy(t->o_strides, ost, sizeof ost);
        t->o_offset = 1;
    }
    write_host(ctx, t->q, q);
    write_host(ctx, t->k, k);
    write_host(ctx, t->v, v);
    t->o = make_view(ctx, dt, t->o_base_n, 4, qs, t->o_strides, t->o_offset, &t->o_base);
    /* LSE rows padded to Sq + 3, starting at element 2. */
    const int64_t lst[3] = {Hq * (Sq + 3), Sq + 3, 1};
    memcpy(t->l_strides, lst, sizeof lst);
    t->l_offset = 2;
    t->lse_base_n = B * Hq * (Sq + 3);
    t->lse = make_view(ctx, FCL_F32, t->lse_base_n, 3, ls, lst, 2, &t->lse_base);
}

/* Mask values: 0 and 0.5 drop a key (the test is > 0.5), 0.51, 0.75 and 1 keep it. */
static void make_mask(const fcase *c, uint64_t seed, float *m, size_t n)
{
    support_random(m, n, seed, 0.0f, 1.0f, FCL_F32);
    for (size_t i = 0; i < n; i++) {
        float u = m[i];
        m[i] = u < 0.2f ? 0.0f : u < 0.3f ? 0.5f : u < 0.4f ? 0.51f : u < 0.6f ? 0.75f : 1.0f;
    }
    if (c->mask == MASK_BSK && c->B > 1) /* last batch row sees nothing: empty rows */
        for (int j = 0; j < c->Sk; j++)
            m[(size_t)(c->B - 1) * c->Sk + j] = 0.0f;
    if (c->mask == MASK_SK_ZERO)
        for (size_t i = 0; i < n; i++)
            m[i] = 0.0f;
}

/* Outputs of one run read back to host: O [B,Sq,Hq,D], LSE [B,Hq,Sq]. */
typedef struct run_out {
    float *o, *lse;
    size_t outside_o, outside_lse; /* poison overwritten outside the output views */
} run_out;

/* Poisons outputs, runs the forward, reads back. Returns the status of the call. */
static fcl_status run_forward(fcl_context ctx, const fcase *c, const fcl_attn_params *prm,
                              case_tensors *t, run_out *r)
{
    support_poison(t->o_base ? t->o_base : t->o);
    if (t->lse)
        support_poison(t->lse_base ? t->lse_base : t->lse);
    fcl_status st = fcl_attention_forward(ctx, prm, t->q, t->k, t->v, t->o, t->lse, NULL);
    if (st != FCL_SUCCESS)
        return st;
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "fcl_finish: %s", fcl_last_error(ctx));
    const size_t no = (size_t)c->B * c->Sq * c->Hq * c->D, nl = (size_t)c->B * c->Hq * c->Sq;
    cr_assert(fcl_tensor_read_f32(t->o, r->o, no) == FCL_SUCCESS, "read O: %s", fcl_last_error(ctx));
    if (t->lse)
        cr_assert(fcl_tensor_read_f32(t->lse, r->lse, nl) == FCL_SUCCESS, "read LSE: %s",
                  fcl_last_error(ctx));
    r->outside_o = r->outside_lse = 0;
    if (t->o_base) {
        float *b = malloc(sizeof(float) * (size_t)t->o_base_n);
        cr_assert(fcl_tensor_read_f32(t->o_base, b, (size_t)t->o_base_n) == FCL_SUCCESS);
        r->outside_o = support_touched_outside(b, t->o_base_n, 4, t->o_shape, t->o_strides, t->o_offset);
        free(b);
    }
    if (t->lse_base) {
        float *b = malloc(sizeof(float) * (size_t)t->lse_base_n);
        cr_assert(fcl_tensor_read_f32(t->lse_base, b, (size_t)t->lse_base_n) == FCL_SUCCESS);
        r->outside_lse = support_touched_outside(b, t->lse_base_n, 3, t->l_shape, t->l_strides, t->l_offset);
        free(b);
    }
    return FCL_SUCCESS;
}

/*
 * Checks one run against the references: the error rule for O and LSE, no NaN, empty rows
 * exactly O = 0 / LSE = -inf (and finite LSE elsewhere), nothing written outside the views.
 * Reports a failure with the case's description; returns 1 when everything holds.
 */
static int compare(const fcase *c, fcl_dtype dt, const char *name, const ref_attn_problem *p,
                   const float *q, const float *k, const float *v, const run_out *r, int has_lse)
{
    const size_t nq = (size_t)c->B * c->Sq * c->Hq * c->D, nl = (size_t)c->B * c->Hq * c->Sq;
    double *O = malloc(sizeof(double) * nq), *L = malloc(sizeof(double) * nl);
    float *On = malloc(sizeof(float) * nq), *Ln = malloc(sizeof(float) * nl);
    ref_attention_forward(p, q, k, v, O, L);
    ref_attention_forward_naive(p, dt, q, k, v, On, Ln);

    size_t nan_o = support_count_nan(r->o, nq), nan_l = has_lse ? support_count_nan(r->lse, nl) : 0;
    double err_o = support_max_err_f(r->o, O, nq), naive_o = support_max_err_f(On, O, nq);
    double err_l = has_lse ? support_max_err_f(r->lse, L, nl) : 0.0;
    double naive_l = support_max_err_f(Ln, L, nl);
    size_t bad_rows = 0, empty_rows = 0;
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->Hq; h++)
            for (int i = 0; i < c->Sq; i++) {
                size_t li = ((size_t)b * c->Hq + h) * c->Sq + i;
                if (L[li] != -INFINITY) {
                    if (has_lse && !isfinite(r->lse[li]))
                        bad_rows++;
                    continue;
                }
                empty_rows++;
                const float *orow = r->o + (((size_t)b * c->Sq + i) * c->Hq + h) * c->D;
                int bad = has_lse && r->lse[li] != -INFINITY;
                for (int d = 0; d < c->D; d++)
                    bad |= orow[d] != 0.0f;
                bad_rows += bad;
            }

    int ok = nan_o == 0 && nan_l == 0 && bad_rows == 0 && r->outside_o == 0 &&
             r->outside_lse == 0 && support_within(err_o, naive_o, 2.0) &&
             support_within(err_l, naive_l, 2.0);
    cr_expect(ok,
              "[%s] O err %.3g bound %.3g (naive %.3g) | LSE err %.3g bound %.3g (naive %.3g) | "
              "NaN O %zu LSE %zu | bad rows %zu (%zu empty) | written outside view O %zu LSE %zu",
              name, err_o, 2.0 * naive_o + 1e-5, naive_o, err_l, 2.0 * naive_l + 1e-5, naive_l,
              nan_o, nan_l, bad_rows, empty_rows, r->outside_o, r->outside_lse);
    free(O);
    free(L);
    free(On);
    free(Ln);
    return ok;
}

/*
 * Runs one case and checks it. Returns 1 when it passes; on failure every broken check is
 * reported (cr_expect) with the case's description. When `repeat` is set the forward is run
 * a second time and both outputs must be bit-identical.
 */
static int check_case(fcl_context ctx, fcl_dtype dt, const fcase *c, uint64_t seed, int repeat)
{
    char name[320];
    describe(c, dt, name, sizeof name);
    const size_t nq = (size_t)c->B * c->Sq * c->Hq * c->D, nk = (size_t)c->B * c->Sk * c->Hkv * c->D;
    const size_t nl = (size_t)c->B * c->Hq * c->Sq;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk),
          *v = malloc(sizeof(float) * nk);
    support_random(q, nq, seed * 8 + 1, -c->amp, c->amp, dt);
    support_random(k, nk, seed * 8 + 2, -c->amp, c->amp, dt);
    support_random(v, nk, seed * 8 + 3, -c->amp, c->amp, dt);

    case_tensors t;
    make_tensors(ctx, dt, c, q, k, v, &t);

    ref_attn_problem p = {c->B, c->Sq, c->Sk, c->Hq, c->Hkv, c->D, (double)c->scale, c->causal,
                          c->wl, c->wr, (double)c->softcap, NULL, 0, NULL, 0};
    fcl_attn_params prm = fcl_attn_params_default();
    prm.scale = c->scale;
    prm.causal = c->causal;
    prm.window_left = c->wl;
    prm.window_right = c->wr;
    prm.softcap = c->softcap;

    float *mask = NULL, *slopes = NULL;
    if (c->mask != MASK_NONE) {
        int64_t shape[2] = {c->B, c->Sk};
        int per_batch = c->mask == MASK_BSK;
        size_t n = per_batch ? (size_t)c->B * c->Sk : (size_t)c->Sk;
        mask = malloc(sizeof(float) * n);
        make_mask(c, seed * 8 + 4, mask, n);
        t.mask = per_batch ? support_tensor(ctx, FCL_F32, 2, shape, mask)
                           : support_tensor(ctx, FCL_F32, 1, shape + 1, mask);
        p.key_mask = mask;
        p.mask_per_batch = per_batch;
        prm.key_mask = t.mask;
    }
    if (c->alibi != ALIBI_NONE) {
        int per_batch = c->alibi == ALIBI_BH;
        int64_t shape[2] = {c->B, c->Hq};
        size_t n = per_batch ? (size_t)c->B * c->Hq : (size_t)c->Hq;
        slopes = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) /* the usual geometric slopes, varied per batch */
            slopes[i] = exp2f(-8.0f * (float)(i % c->Hq + 1) / (float)c->Hq) *
                        (1.0f + 0.5f * (float)(i / c->Hq));
        t.alibi = per_batch ? support_tensor(ctx, FCL_F32, 2, shape, slopes)
                            : support_tensor(ctx, FCL_F32, 1, shape + 1, slopes);
        p.alibi = slopes;
        p.alibi_per_batch = per_batch;
        prm.alibi_slopes = t.alibi;
    }

    run_out r = {malloc(sizeof(float) * nq), malloc(sizeof(float) * nl), 0, 0};
    fcl_status st = run_forward(ctx, c, &prm, &t, &r);
    cr_expect(st == FCL_SUCCESS, "[%s] fcl_attention_forward: %s: %s", name,
              fcl_status_string(st), fcl_last_error(ctx));
    int ok = st == FCL_SUCCESS && compare(c, dt, name, &p, q, k, v, &r, t.lse != NULL);

    if (ok && repeat) {
        /* Determinism: a second run gives the same bits. */
        run_out r2 = {malloc(sizeof(float) * nq), malloc(sizeof(float) * nl), 0, 0};
        st = run_forward(ctx, c, &prm, &t, &r2);
        int same = st == FCL_SUCCESS && memcmp(r.o, r2.o, sizeof(float) * nq) == 0 &&
                   (t.lse == NULL || memcmp(r.lse, r2.lse, sizeof(float) * nl) == 0);
        cr_expect(same, "[%s] second run differs (status %s)", name, fcl_status_string(st));
        ok = same;
        free(r2.o);
        free(r2.lse);
    }
    release_tensors(&t);
    free(r.o);
    free(r.lse);
    free(q);
    free(k);
    free(v);
    free(mask);
    free(slopes);
    return ok;
}

/* Runs a table of cases; reports how many failed. */
static void check_table(fcl_dtype dt, const fcase *cases, size_t n, uint64_t seed0)
{
    fcl_context ctx = support_context();
    size_t failed = 0;
    for (size_t i = 0; i < n; i++)
        failed += !check_case(ctx, dt, &cases[i], seed0 + i, 0);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu %s cases failed", failed, n, fcl_dtype_name(dt));
}

/* ---------------------------------------------------------------- head dims */

/* Every head dim of the list once per dtype, plain features, on a small odd shape;
 * MHA / GQA / MQA and causal rotate through the list. */
static void head_dims(fcl_dtype dt, uint64_t seed0)
{
    static const int dims[] = {1, 8, 16, 32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256};
    enum { N = sizeof dims / sizeof dims[0] };
    fcase cases[N];
    for (int i = 0; i < N; i++) {
        static const int heads[3][2] = {{2, 2}, {4, 2}, {3, 1}};
        fcase c = {37, 70, 2, heads[i % 3][0], heads[i % 3][1], dims[i], i % 2, U, U,
                   0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2.0f};
        cases[i] = c;
    }
    check_table(dt, cases, N, seed0);
}

Test(forward, head_dims_f32) { head_dims(FCL_F32, 100); }
Test(forward, head_dims_f16) { head_dims(FCL_F16, 200); }
Test(forward, head_dims_bf16) { head_dims(FCL_BF16, 300); }

/* ---------------------------------------------------------------- shapes */

/* The (Sq, Sk) grid at one head dim per dtype; large shapes use B = 1 and two heads. */
static void shapes(fcl_dtype dt, int D, int Hq, int Hkv, int causal, int wl, int wr,
                   uint64_t seed0)
{
    static const int sq_sk[][2] = {{1, 1},     {1, 7},     {7, 1},     {113, 203}, {128, 217},
                                   {108, 256}, {256, 512}, {512, 256}, {1023, 1024}};
    enum { N = sizeof sq_sk / sizeof sq_sk[0] };
    fcase cases[N + 1];
    for (int i = 0; i < N; i++) {
        int big = sq_sk[i][0] * sq_sk[i][1] >= 100000;
        fcase c = {sq_sk[i][0], sq_sk[i][1], big ? 1 : 2, big ? 2 : Hq, big ? (Hkv == Hq ? 2 : 1) : Hkv,
                   D, causal, wl, wr, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2.0f};
        cases[i] = c;
    }
    /* Larger inputs ([-3, 3)) stress the running max / rescaling of the softmax. */
    fcase big = {256, 512, 1, Hq, Hkv, D, causal, wl, wr, 0, 0, MASK_NONE, ALIBI_NONE,
                 LAYOUT_BSHD, 3.0f};
    cases[N] = big;
    check_table(dt, cases, N + 1, seed0);
}

Test(forward, shapes_f32) { shapes(FCL_F32, 64, 2, 2, 0, U, U, 400); }
Test(forward, shapes_f16) { shapes(FCL_F16, 128, 4, 2, 1, U, U, 500); }
Test(forward, shapes_bf16) { shapes(FCL_BF16, 40, 3, 1, 0, 100, 20, 600); }

/* ---------------------------------------------------------------- flags and layouts */

/* Every flag alone and in combination, at D = 64 (all 8 {softcap, mask, alibi} sets), plus
 * both strided layouts; Sq < Sk, Sq > Sk (empty early rows) and Sq == Sk. */
static const fcase flag_cases[] = {
    /* Sq   Sk  B Hq Hkv D  causal wl  wr  softcap scale mask alibi layout amp */
    {77, 77, 2, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {45, 130, 2, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {130, 45, 2, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {130, 45, 1, 2, 2, 64, 1, U, 5, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2}, /* wr ignored */
    /* windows: left only, right only, both; Sq < Sk and Sq > Sk */
    {45, 130, 2, 4, 2, 64, 0, 20, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {130, 45, 2, 4, 2, 64, 0, 20, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {45, 130, 2, 4, 2, 64, 0, U, 7, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {130, 45, 2, 4, 2, 64, 0, U, 7, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {77, 77, 2, 6, 2, 64, 0, U, 0, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {45, 130, 2, 4, 2, 64, 0, 16, 9, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {130, 45, 2, 4, 2, 64, 0, 16, 9, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {77, 77, 1, 4, 1, 64, 0, 0, 0, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {130, 45, 2, 4, 2, 64, 1, 30, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    /* custom scale, and large inputs */
    {45, 130, 2, 4, 2, 64, 0, U, U, 0, 0.3f, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {130, 45, 2, 4, 2, 64, 1, U, U, 0, 0.5f, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 3},
    /* softcap alone (inputs large enough that it bites), with a scale of 1 */
    {45, 130, 2, 4, 2, 64, 0, U, U, 5.0f, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 3},
    {77, 77, 2, 6, 2, 64, 1, U, U, 5.0f, 1.0f, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 3},
    /* negative scales (the tensor-core kernels negate Q instead: exact) */
    {77, 77, 2, 4, 2, 64, 1, U, U, 0, -0.3f, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    {45, 130, 2, 4, 2, 64, 0, U, U, 5.0f, -0.5f, MASK_BSK, ALIBI_H, LAYOUT_BHSD, 3},
    /* key masks: [B,Sk] with an all-zero batch row, [Sk], [Sk] all zero */
    {45, 130, 3, 4, 2, 64, 0, U, U, 0, 0, MASK_BSK, ALIBI_NONE, LAYOUT_BSHD, 2},
    {130, 45, 2, 4, 2, 64, 0, U, U, 0, 0, MASK_SK, ALIBI_NONE, LAYOUT_BSHD, 2},
    {13, 21, 2, 2, 1, 64, 0, U, U, 0, 0, MASK_SK_ZERO, ALIBI_NONE, LAYOUT_BSHD, 2},
    {77, 77, 2, 4, 2, 64, 1, 10, U, 0, 0, MASK_BSK, ALIBI_NONE, LAYOUT_BSHD, 2},
    /* ALiBi [Hq] and [B,Hq] */
    {77, 77, 2, 4, 2, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_H, LAYOUT_BSHD, 2},
    {45, 130, 2, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_BH, LAYOUT_BSHD, 2},
    /* combinations */
    {45, 130, 2, 4, 2, 64, 0, U, U, 5.0f, 0, MASK_BSK, ALIBI_NONE, LAYOUT_BSHD, 3},
    {130, 45, 2, 6, 2, 64, 1, U, U, 5.0f, 0.4f, MASK_NONE, ALIBI_BH, LAYOUT_BSHD, 3},
    {77, 77, 2, 4, 1, 64, 1, U, U, 0, 0, MASK_SK, ALIBI_H, LAYOUT_BSHD, 2},
    {130, 45, 2, 4, 2, 64, 1, 25, U, 5.0f, 0.7f, MASK_BSK, ALIBI_BH, LAYOUT_BSHD, 3},
    {45, 130, 2, 4, 1, 64, 0, 40, 11, 5.0f, 0, MASK_SK, ALIBI_BH, LAYOUT_BSHD, 3},
    /* layouts: [B,H,S,D] views, padded/odd-offset views with fused KV, LSE = NULL */
    {113, 203, 2, 4, 2, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BHSD, 2},
    {130, 45, 2, 4, 2, 64, 1, 25, U, 5.0f, 0, MASK_BSK, ALIBI_H, LAYOUT_BHSD, 3},
    {113, 203, 2, 4, 2, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_PADDED, 2},
    {45, 130, 2, 6, 2, 64, 1, U, U, 5.0f, 0, MASK_SK, ALIBI_BH, LAYOUT_PADDED, 3},
    {77, 77, 2, 4, 2, 64, 1, U, U, 0, 0, MASK_BSK, ALIBI_NONE, LAYOUT_NO_LSE, 2},
};

/* A second head dim per dtype: causal with empty rows, and everything at once. */
static void flags_other_d(fcase *out, int D)
{
    const fcase a = {130, 45, 2, 4, 2, D, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2};
    const fcase b = {45, 130, 2, 6, 2, D, 1, 30, U, 5.0f, 0, MASK_BSK, ALIBI_BH, LAYOUT_BHSD, 3};
    out[0] = a;
    out[1] = b;
}

static void flags(fcl_dtype dt, int D2, uint64_t seed0)
{
    enum { N = sizeof flag_cases / sizeof flag_cases[0] };
    fcase cases[N + 2];
    memcpy(cases, flag_cases, sizeof flag_cases);
    flags_other_d(cases + N, D2);
    check_table(dt, cases, N + 2, seed0);
}

Test(forward, flags_f32) { flags(FCL_F32, 111, 700); }
Test(forward, flags_f16) { flags(FCL_F16, 80, 800); }
Test(forward, flags_bf16) { flags(FCL_BF16, 160, 900); }

/* ---------------------------------------------------------------- determinism */

Test(forward, deterministic)
{
    static const fcase c[] = {
        {256, 512, 1, 4, 2, 64, 1, U, U, 5.0f, 0, MASK_BSK, ALIBI_H, LAYOUT_BSHD, 2},
        {200, 300, 2, 2, 1, 96, 0, 50, 10, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 2},
    };
    fcl_context ctx = support_context();
    int ok = check_case(ctx, FCL_F32, &c[0], 1000, 1);
    ok &= check_case(ctx, FCL_F16, &c[1], 1001, 1);
    fcl_context_release(ctx);
    cr_assert(ok, "determinism cases failed");
}

/* Keys dropped by the key mask may hold anything (freed or never-written rows): K and V rows
 * of dropped keys are NaN here, and O must still be the reference over the kept keys. */
Test(forward, dropped_keys_hold_nan)
{
    const int B = 2, Sq = 21, Sk = 45, H = 2, D = 32;
    const int64_t qs[4] = {B, Sq, H, D}, ks[4] = {B, Sk, H, D}, ms[2] = {B, Sk};
    const size_t nq = (size_t)B * Sq * H * D, nk = (size_t)B * Sk * H * D;
    float *q = support_xmalloc(sizeof(float) * nq), *k = support_xmalloc(sizeof(float) * nk);
    float *v = support_xmalloc(sizeof(float) * nk), *o = support_xmalloc(sizeof(float) * nq);
    float *kn = support_xmalloc(sizeof(float) * nk), *vn = support_xmalloc(sizeof(float) * nk);
    float m[2 * 45];
    double *ref = support_xmalloc(sizeof(double) * nq);
    float *naive = support_xmalloc(sizeof(float) * nq);
    support_random(q, nq, 1501, -1, 1, FCL_F16);
    support_random(k, nk, 1502, -1, 1, FCL_F16);
    support_random(v, nk, 1503, -1, 1, FCL_F16);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Sk; j++)
            m[b * Sk + j] = (j * 7 + b) % 3 == 0 ? 0.0f : 1.0f;
    memcpy(kn, k, sizeof(float) * nk);
    memcpy(vn, v, sizeof(float) * nk);
    for (size_t e = 0; e < nk; e++)
        if (m[(e / ((size_t)H * D) / Sk) * Sk + e / ((size_t)H * D) % Sk] == 0.0f)
            kn[e] = vn[e] = NAN;
    fcl_context ctx = support_context();
    fcl_tensor tq = support_tensor(ctx, FCL_F16, 4, qs, q), tk = support_tensor(ctx, FCL_F16, 4, ks, kn);
    fcl_tensor tv = support_tensor(ctx, FCL_F16, 4, ks, vn), to = support_tensor(ctx, FCL_F16, 4, qs, NULL);
    fcl_tensor tm = support_tensor(ctx, FCL_F32, 2, ms, m);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.key_mask = tm;
    support_poison(to);
    cr_assert(fcl_attention_forward(ctx, &p, tq, tk, tv, to, NULL, NULL) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    support_read(to, o);
    ref_attn_problem rp = {.B = B, .Sq = Sq, .Sk = Sk, .Hq = H, .Hkv = H, .D = D, .window_left = -1,
                           .window_right = -1, .key_mask = m, .mask_per_batch = 1};
    ref_attention_forward(&rp, q, k, v, ref, NULL);
    ref_attention_forward_naive(&rp, FCL_F16, q, k, v, naive, NULL);
    const double err = support_max_err_f(o, ref, nq), nerr = support_max_err_f(naive, ref, nq);
    cr_assert(support_within(err, nerr, 2.0), "NaN in dropped K/V rows reached O: err %g, naive %g", err, nerr);
    fcl_tensor all[] = {tq, tk, tv, to, tm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    fcl_context_release(ctx);
    free(q), free(k), free(v), free(o), free(kn), free(vn), free(ref), free(naive);
}
