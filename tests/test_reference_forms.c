/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Each forward operation of the reference family (../shared/reference), expressed through
 * fcl_attention_forward exactly as docs/API.md maps it, checked in two steps:
 *  1. the mapping: the float64 reference run with the mapped fcl_attn_params equals (to 1e-12)
 *     an independent float64 attention whose visibility rule is the reference's own text;
 *  2. the kernel: fcl_attention_forward with those params meets the DESIGN.md tolerance rule
 *     against the float64 reference.
 * Tensors use the reference's 2-D layout (rows, heads * head_dim) as [1, rows, heads, D]
 * views, or [B, H, S, D] storage for the WGSL kernel.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention.h"
#include "support.h"

/* The reference's visibility rule for query i, key j. */
typedef int (*visible_fn)(int i, int j, int Sq, int Sk, int window, int causal);

/* flash_attention_forward / gqa_forward: causal means j <= i (they require Lq == Lk). */
static int vis_plain(int i, int j, int Sq, int Sk, int window, int causal)
{
    (void)Sq; (void)Sk; (void)window;
    return !causal || j <= i;
}

/* flash_attention_windowed_forward: queries are the last Lq positions (aq = i + Lk - Lq). */
static int vis_windowed(int i, int j, int Sq, int Sk, int window, int causal)
{
    const int aq = i + Sk - Sq;
    if (causal)
        return j <= aq && (window <= 0 || j >= aq - window + 1);
    return window <= 0 || (j >= aq - window / 2 && j <= aq + window / 2);
}

/* The WGSL kernel: keys [start, end), start = i - w + 1 when w > 0 and i >= w, end = i + 1
 * when causal (top-left aligned). */
static int vis_wgsl(int i, int j, int Sq, int Sk, int window, int causal)
{
    (void)Sq;
    const int start = (window > 0 && i >= window) ? i - window + 1 : 0;
    const int end = causal ? (i + 1 < Sk ? i + 1 : Sk) : Sk;
    return j >= start && j < end;
}

typedef struct form {
    int B, Sq, Sk, Hq, Hkv, D;
    int window, causal, use_mask;
    visible_fn visible;
} form;

/* Independent float64 attention of one row (dense [B,S,H,D] host arrays, 1/sqrt(D) scale). */
static void expected_row(const form *f, const float *Q, const float *K, const float *V, const float *mask,
                         int b, int i, int h, double *o, double *lse)
{
    const int hk = h / (f->Hq / f->Hkv);
    double *s = malloc(sizeof(double) * (size_t)f->Sk);
    double mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < f->Sk; j++) {
        s[j] = -INFINITY;
        if (!f->visible(i, j, f->Sq, f->Sk, f->window, f->causal) || (mask && !(mask[j] > 0.5f)))
            continue;
        double dot = 0.0;
        for (int d = 0; d < f->D; d++)
            dot += (double)Q[(((size_t)b * f->Sq + i) * f->Hq + h) * f->D + d] *
                   (double)K[(((size_t)b * f->Sk + j) * f->Hkv + hk) * f->D + d];
        s[j] = dot / sqrt((double)f->D);
        mx = fmax(mx, s[j]);
    }
    for (int d = 0; d < f->D; d++)
        o[d] = 0.0;
    for (int j = 0; j < f->Sk && mx > -INFINITY; j++) {
        if (s[j] == -INFINITY)
            continue;
        const double p = exp(s[j] - mx);
        sum += p;
        for (int d = 0; d < f->D; d++)
            o[d] += p * (double)V[(((size_t)b * f->Sk + j) * f->Hkv + hk) * f->D + d];
    }
    for (int d = 0; d < f->D && sum > 0.0; d++)
        o[d] /= sum;
    *lse = sum > 0.0 ? mx + log(sum) : -INFINITY;
    free(s);
}

/* Step 1: the mapped params reproduce the reference rule. */
static void check_mapping(const form *f, const ref_attn_problem *p, const float *Q, const float *K,
                          const float *V, const float *mask)
{
    double *o1 = malloc(sizeof(double) * (size_t)f->D), *o2 = malloc(sizeof(double) * (size_t)f->D);
    for (int b = 0; b < f->B; b++)
        for (int i = 0; i < f->Sq; i++)
            for (int h = 0; h < f->Hq; h++) {
                double l1, l2;
                expected_row(f, Q, K, V, mask, b, i, h, o1, &l1);
                ref_attention_row(p, Q, K, V, b, i, h, o2, &l2);
                cr_assert(l1 == l2 || fabs(l1 - l2) <= 1e-12, "mapping: LSE row b%d i%d h%d: %g vs %g", b, i, h,
                          l1, l2);
                for (int d = 0; d < f->D; d++)
                    cr_assert(fabs(o1[d] - o2[d]) <= 1e-12, "mapping: O row b%d i%d h%d d%d: %g vs %g", b, i, h,
                              d, o1[d], o2[d]);
            }
    free(o1);
    free(o2);
}

/* Step 2: the kernel on the given views against the float64 reference of the mapped params. */
static void check_kernel(fcl_context ctx, const ref_attn_problem *p, fcl_dtype dt, const fcl_attn_params *params,
                         fcl_tensor tq, fcl_tensor tk, fcl_tensor tv, fcl_tensor to, fcl_tensor tl,
                         const float *Q, const float *K, const float *V)
{
    const size_t no = (size_t)p->B * p->Sq * p->Hq * p->D, nl = (size_t)p->B * p->Hq * p->Sq;
    support_poison(to);
    if (tl)
        support_poison(tl);
    fcl_status st = fcl_attention_forward(ctx, params, tq, tk, tv, to, tl, NULL);
    cr_assert(st == FCL_SUCCESS, "forward: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS);
    float *o = malloc(sizeof(float) * no), *naive = malloc(sizeof(float) * no);
    float *l = malloc(sizeof(float) * nl), *lnaive = malloc(sizeof(float) * nl);
    double *ref = malloc(sizeof(double) * no), *lref = malloc(sizeof(double) * nl);
    cr_assert(fcl_tensor_read_f32(to, o, no) == FCL_SUCCESS);
    ref_attention_forward(p, Q, K, V, ref, lref);
    ref_attention_forward_naive(p, dt, Q, K, V, naive, lnaive);
    const double err = support_max_err_f(o, ref, no), nerr = support_max_err_f(naive, ref, no);
    cr_assert(support_within(err, nerr, 2.0), "%s O: err %g > 2 * naive %g + 1e-5", fcl_dtype_name(dt), err, nerr);
    if (tl) {
        cr_assert(fcl_tensor_read_f32(tl, l, nl) == FCL_SUCCESS);
        const double lerr = support_max_err_f(l, lref, nl), lnerr = support_max_err_f(lnaive, lref, nl);
        cr_assert(support_within(lerr, lnerr, 2.0), "LSE: err %g > 2 * naive %g + 1e-5", lerr, lnerr);
    }
    free(o); free(naive); free(l); free(lnaive); free(ref); free(lref);
}

static ref_attn_problem problem_of(const form *f, const fcl_attn_params *params, const float *mask)
{
    ref_attn_problem p = {f->B, f->Sq, f->Sk, f->Hq, f->Hkv, f->D, 0.0, params->causal, params->window_left,
                          params->window_right, 0.0, mask, 0, NULL, 0};
    return p;
}

/* The 2-D reference forms: (rows, heads * D) buffers viewed as [1, rows, heads, D]. */
static void run_2d(const form *f, fcl_dtype dt, const fcl_attn_params *base_params, uint64_t seed)
{
    fcl_context ctx = support_context();
    const size_t nq = (size_t)f->Sq * f->Hq * f->D, nk = (size_t)f->Sk * f->Hkv * f->D;
    float *Q = malloc(sizeof(float) * nq), *K = malloc(sizeof(float) * nk), *V = malloc(sizeof(float) * nk);
    float *mask = malloc(sizeof(float) * (size_t)f->Sk);
    support_random(Q, nq, seed, -1.5f, 1.5f, dt);
    support_random(K, nk, seed + 1, -1.5f, 1.5f, dt);
    support_random(V, nk, seed + 2, -1.0f, 1.0f, dt);
    for (int j = 0; j < f->Sk; j++)
        mask[j] = (j % 5 == 3) ? 0.0f : 1.0f;
    const int64_t q2[2] = {f->Sq, (int64_t)f->Hq * f->D}, k2[2] = {f->Sk, (int64_t)f->Hkv * f->D};
    const int64_t q4[4] = {1, f->Sq, f->Hq, f->D}, k4[4] = {1, f->Sk, f->Hkv, f->D}, l3[3] = {1, f->Hq, f->Sq};
    const int64_t sk1 = f->Sk;
    fcl_tensor bq = support_tensor(ctx, dt, 2, q2, Q), bk = support_tensor(ctx, dt, 2, k2, K);
    fcl_tensor bv = support_tensor(ctx, dt, 2, k2, V), bo = support_tensor(ctx, dt, 2, q2, NULL);
    fcl_tensor tm = support_tensor(ctx, FCL_F32, 1, &sk1, mask), tl = support_tensor(ctx, FCL_F32, 3, l3, NULL);
    fcl_tensor tq, tk, tv, to;
    cr_assert(fcl_tensor_view(bq, 4, q4, NULL, 0, &tq) == FCL_SUCCESS);
    cr_assert(fcl_tensor_view(bk, 4, k4, NULL, 0, &tk) == FCL_SUCCESS);
    cr_assert(fcl_tensor_view(bv, 4, k4, NULL, 0, &tv) == FCL_SUCCESS);
    cr_assert(fcl_tensor_view(bo, 4, q4, NULL, 0, &to) == FCL_SUCCESS);
    fcl_attn_params params = *base_params;
    params.key_mask = f->use_mask ? tm : NULL;
    ref_attn_problem p = problem_of(f, &params, f->use_mask ? mask : NULL);
    check_mapping(f, &p, Q, K, V, f->use_mask ? mask : NULL);
    check_kernel(ctx, &p, dt, &params, tq, tk, tv, to, tl, Q, K, V);
    fcl_tensor ts[] = {bq, bk, bv, bo, tm, tl, tq, tk, tv, to};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        fcl_tensor_release(ts[i]);
    fcl_context_release(ctx);
    free(Q); free(K); free(V); free(mask);
}

static fcl_attn_params windowed_params(int window, int causal)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.causal = causal;
    if (window > 0) {
        p.window_left = causal ? window - 1 : window / 2;
        p.window_right = causal ? -1 : window / 2;
    }
    return p;
}

Test(reference_forms, flash_attention_forward)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    form f = {1, 77, 77, 4, 4, 32, 0, 1, 1, vis_plain};
    p.causal = 1;
    run_2d(&f, FCL_F16, &p, 11);
    f.causal = 0;
    f.Sk = 130;
    p.causal = 0;
    run_2d(&f, FCL_F32, &p, 12);
}

Test(reference_forms, flash_attention_gqa_forward)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    form f = {1, 65, 65, 8, 2, 64, 0, 1, 1, vis_plain};
    p.causal = 1;
    run_2d(&f, FCL_BF16, &p, 21);
    f.causal = 0;
    f.use_mask = 0;
    f.Sk = 97;
    p.causal = 0;
    run_2d(&f, FCL_F16, &p, 22);
}

Test(reference_forms, flash_attention_windowed_forward)
{
    /* causal and bidirectional windows; Lq == Lk (prefill) and Lq < Lk (decode block) */
    static const int cases[][5] = {
        /* Sq, Sk, window, causal, mask */
        {50, 50, 7, 1, 0}, {6, 90, 16, 1, 1}, {1, 64, 0, 1, 0}, {50, 50, 9, 0, 1},
        {8, 70, 10, 0, 0}, {40, 40, 0, 0, 0}, {3, 40, 1, 1, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        form f = {1, cases[c][0], cases[c][1], 6, 3, 40, cases[c][2], cases[c][3], cases[c][4], vis_windowed};
        fcl_attn_params p = windowed_params(f.window, f.causal);
        run_2d(&f, c % 2 ? FCL_F16 : FCL_F32, &p, 30 + c);
    }
}

/* The WGSL kernel: [B, H, S, D] storage, GQA, top-left causal, left window, LSE. Rows
 * [r0, r0 + nrows) of Q/O are passed with keys [0, nkeys) and `params`. */
typedef struct wgsl_call {
    int r0, nrows, nkeys, causal, window_left;
} wgsl_call;

static void run_wgsl(const form *f, const wgsl_call *calls, int ncalls, uint64_t seed)
{
    const fcl_dtype dt = FCL_F32; /* the WGSL kernel is f32 */
    fcl_context ctx = support_context();
    const int B = f->B, H = f->Hq, G = f->Hkv, Sq = f->Sq, Sk = f->Sk, D = f->D;
    const size_t nq = (size_t)B * Sq * H * D, nk = (size_t)B * Sk * G * D;
    float *Q = malloc(sizeof(float) * nq), *K = malloc(sizeof(float) * nk), *V = malloc(sizeof(float) * nk);
    support_random(Q, nq, seed, -1.5f, 1.5f, dt);
    support_random(K, nk, seed + 1, -1.5f, 1.5f, dt);
    support_random(V, nk, seed + 2, -1.0f, 1.0f, dt);
    /* device storage [B, H, S, D]; logical [B, S, H, D] views with permuted strides */
    const int64_t nq1 = (int64_t)nq, nk1 = (int64_t)nk, nl1 = (int64_t)B * H * Sq;
    fcl_tensor bq = support_tensor(ctx, dt, 1, &nq1, NULL), bk = support_tensor(ctx, dt, 1, &nk1, NULL);
    fcl_tensor bv = support_tensor(ctx, dt, 1, &nk1, NULL), bo = support_tensor(ctx, dt, 1, &nq1, NULL);
    fcl_tensor bl = support_tensor(ctx, FCL_F32, 1, &nl1, NULL);
    const int64_t q_st[4] = {(int64_t)H * Sq * D, D, (int64_t)Sq * D, 1};
    const int64_t k_st[4] = {(int64_t)G * Sk * D, D, (int64_t)Sk * D, 1};
    const int64_t l_st[3] = {(int64_t)H * Sq, Sq, 1};
    const int64_t q_full[4] = {B, Sq, H, D}, k_full[4] = {B, Sk, G, D};
    fcl_tensor fq, fk, fv;
    cr_assert(fcl_tensor_view(bq, 4, q_full, q_st, 0, &fq) == FCL_SUCCESS);
    cr_assert(fcl_tensor_view(bk, 4, k_full, k_st, 0, &fk) == FCL_SUCCESS);
    cr_assert(fcl_tensor_view(bv, 4, k_full, k_st, 0, &fv) == FCL_SUCCESS);
    cr_assert(fcl_tensor_write_f32(fq, Q, nq) == FCL_SUCCESS);
    cr_assert(fcl_tensor_write_f32(fk, K, nk) == FCL_SUCCESS);
    cr_assert(fcl_tensor_write_f32(fv, V, nk) == FCL_SUCCESS);
    support_poison(bo);
    support_poison(bl);
    for (int c = 0; c < ncalls; c++) {
        const wgsl_call *w = &calls[c];
        const int64_t qs[4] = {B, w->nrows, H, D}, ks[4] = {B, w->nkeys, G, D}, ls[3] = {B, H, w->nrows};
        fcl_tensor tq, tk, tv, to, tl;
        cr_assert(fcl_tensor_view(bq, 4, qs, q_st, (int64_t)w->r0 * D, &tq) == FCL_SUCCESS);
        cr_assert(fcl_tensor_view(bk, 4, ks, k_st, 0, &tk) == FCL_SUCCESS);
        cr_assert(fcl_tensor_view(bv, 4, ks, k_st, 0, &tv) == FCL_SUCCESS);
        cr_assert(fcl_tensor_view(bo, 4, qs, q_st, (int64_t)w->r0 * D, &to) == FCL_SUCCESS);
        cr_assert(fcl_tensor_view(bl, 3, ls, l_st, w->r0, &tl) == FCL_SUCCESS);
        fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
        p.causal = w->causal;
        p.window_left = w->window_left;
        cr_assert(fcl_attention_forward(ctx, &p, tq, tk, tv, to, tl, NULL) == FCL_SUCCESS, "%s",
                  fcl_last_error(ctx));
        fcl_tensor ts[] = {tq, tk, tv, to, tl};
        for (int i = 0; i < 5; i++)
            fcl_tensor_release(ts[i]);
    }
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS);
    /* every row against the independent WGSL rule; the mapping check and the naive error use
     * the float64 reference on each call's sub-problem (its rows, its key prefix) */
    const int64_t o_full[4] = {B, Sq, H, D}, l_full[3] = {B, H, Sq};
    fcl_tensor fo, fl;
    cr_assert(fcl_tensor_view(bo, 4, o_full, q_st, 0, &fo) == FCL_SUCCESS);
    cr_assert(fcl_tensor_view(bl, 3, l_full, l_st, 0, &fl) == FCL_SUCCESS);
    float *o = malloc(sizeof(float) * nq), *l = malloc(sizeof(float) * (size_t)nl1);
    cr_assert(fcl_tensor_read_f32(fo, o, nq) == FCL_SUCCESS);
    cr_assert(fcl_tensor_read_f32(fl, l, (size_t)nl1) == FCL_SUCCESS);
    double *ref = malloc(sizeof(double) * (size_t)D), *ref2 = malloc(sizeof(double) * (size_t)D);
    float *naive = malloc(sizeof(float) * (size_t)D);
    double err = 0.0, nerr = 0.0, lerr = 0.0, lnerr = 0.0;
    for (int c = 0; c < ncalls; c++) {
        const wgsl_call *w = &calls[c];
        /* the call's sub-problem, as the float64 reference sees it */
        ref_attn_problem p = {B, Sq, w->nkeys, H, G, D, 0.0, w->causal, w->window_left, -1, 0.0, NULL, 0, NULL, 0};
        ref_attn_problem pm = p;
        pm.Sq = w->nrows; /* row i of the call is row i - r0 of an (nrows, nkeys) problem */
        float *Qs = malloc(sizeof(float) * (size_t)B * w->nrows * H * D);
        float *Ks = malloc(sizeof(float) * (size_t)B * w->nkeys * G * D);
        float *Vs = malloc(sizeof(float) * (size_t)B * w->nkeys * G * D);
        for (int b = 0; b < B; b++) {
            memcpy(Qs + (size_t)b * w->nrows * H * D, Q + ((size_t)b * Sq + w->r0) * H * D,
                   sizeof(float) * (size_t)w->nrows * H * D);
            memcpy(Ks + (size_t)b * w->nkeys * G * D, K + (size_t)b * Sk * G * D, sizeof(float) * (size_t)w->nkeys * G * D);
            memcpy(Vs + (size_t)b * w->nkeys * G * D, V + (size_t)b * Sk * G * D, sizeof(float) * (size_t)w->nkeys * G * D);
        }
        for (int b = 0; b < B; b++)
            for (int i = w->r0; i < w->r0 + w->nrows; i++)
                for (int h = 0; h < H; h++) {
                    double lse, lse_m;
                    float nl;
                    expected_row(f, Q, K, V, NULL, b, i, h, ref, &lse);
                    ref_attention_row(&pm, Qs, Ks, Vs, b, i - w->r0, h, ref2, &lse_m);
                    ref_attention_row_naive(&pm, dt, Qs, Ks, Vs, b, i - w->r0, h, naive, &nl);
                    cr_assert(lse == lse_m || fabs(lse - lse_m) <= 1e-12, "WGSL mapping LSE b%d i%d h%d", b, i, h);
                    for (int d = 0; d < D; d++) {
                        cr_assert(fabs(ref[d] - ref2[d]) <= 1e-12, "WGSL mapping O b%d i%d h%d d%d", b, i, h, d);
                        const float got = o[(((size_t)b * Sq + i) * H + h) * D + d];
                        err = fmax(err, isnan(got) ? INFINITY : fabs(got - ref[d]));
                        nerr = fmax(nerr, fabs(naive[d] - ref[d]));
                    }
                    const float gl = l[((size_t)b * H + h) * Sq + i];
                    lerr = fmax(lerr, (gl == lse) ? 0.0 : (isnan(gl) ? INFINITY : fabs(gl - lse)));
                    lnerr = fmax(lnerr, (nl == lse) ? 0.0 : fabs(nl - lse));
                }
        free(Qs); free(Ks); free(Vs);
    }
    cr_assert(support_within(err, nerr, 2.0), "WGSL O: err %g > 2 * naive %g + 1e-5", err, nerr);
    cr_assert(support_within(lerr, lnerr, 2.0), "WGSL LSE: err %g > 2 * naive %g + 1e-5", lerr, lnerr);
    fcl_tensor ts[] = {bq, bk, bv, bo, bl, fq, fk, fv, fo, fl};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        fcl_tensor_release(ts[i]);
    fcl_context_release(ctx);
    free(Q); free(K); free(V); free(o); free(l); free(ref); free(ref2); free(naive);
}

Test(reference_forms, wgsl_forward_square)
{
    form f = {2, 45, 45, 4, 2, 24, 6, 1, 0, vis_wgsl};
    const wgsl_call c[] = {{0, 45, 45, 1, 5}};
    run_wgsl(&f, c, 1, 41);
    form g = {1, 33, 33, 2, 1, 16, 0, 0, 0, vis_wgsl};
    const wgsl_call d[] = {{0, 33, 33, 0, -1}};
    run_wgsl(&g, d, 1, 42);
}

Test(reference_forms, wgsl_forward_top_left_causal)
{
    /* Sq < Sk: keys past Sq are never seen; one call on the first Sq keys */
    form f = {1, 20, 50, 4, 4, 32, 0, 1, 0, vis_wgsl};
    const wgsl_call c[] = {{0, 20, 20, 1, -1}};
    run_wgsl(&f, c, 1, 43);
    /* Sq > Sk (no window): rows [0, Sk) causal over all keys, rows [Sk, Sq) see every key */
    form g = {1, 50, 20, 2, 1, 32, 0, 1, 0, vis_wgsl};
    const wgsl_call d[] = {{0, 20, 20, 1, -1}, {20, 30, 20, 0, -1}};
    run_wgsl(&g, d, 2, 44);
}
