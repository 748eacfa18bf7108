/* SPDX-License-Identifier: Apache-2.0 */
/* Proves the float64 reference gradients (and their naive storage-dtype twin): central finite
 * differences of L = sum(dO * O) on tiny shapes with every flag, hand-checkable cases, and the
 * naive twin's distance from float64. Needs no OpenCL device. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention_backward.h"
#include "support.h"

/* A problem with no flags set (windows unbounded). */
static ref_attn_problem problem(int B, int Sq, int Sk, int Hq, int Hkv, int D)
{
    ref_attn_problem p = {0};
    p.B = B; p.Sq = Sq; p.Sk = Sk; p.Hq = Hq; p.Hkv = Hkv; p.D = D;
    p.window_left = -1;
    p.window_right = -1;
    return p;
}

static size_t q_count(const ref_attn_problem *p) { return (size_t)p->B * p->Sq * p->Hq * p->D; }
static size_t kv_count(const ref_attn_problem *p) { return (size_t)p->B * p->Sk * p->Hkv * p->D; }

/* Q, K, V, dO host arrays of one problem. */
typedef struct inputs { float *Q, *K, *V, *dO; } inputs;

/* Random Q, K, V, dO in [lo, hi) rounded to dtype, seeds seed .. seed + 3 (malloc'd; free with
 * free_inputs). */
static inputs make_inputs(const ref_attn_problem *p, uint64_t seed, float lo, float hi, fcl_dtype dt)
{
    inputs in;
    in.Q = support_xmalloc(sizeof(float) * q_count(p));
    in.dO = support_xmalloc(sizeof(float) * q_count(p));
    in.K = support_xmalloc(sizeof(float) * kv_count(p));
    in.V = support_xmalloc(sizeof(float) * kv_count(p));
    support_random(in.Q, q_count(p), seed, lo, hi, dt);
    support_random(in.K, kv_count(p), seed + 1, lo, hi, dt);
    support_random(in.V, kv_count(p), seed + 2, lo, hi, dt);
    support_random(in.dO, q_count(p), seed + 3, lo, hi, dt);
    return in;
}

/* Frees what make_inputs allocated. */
static void free_inputs(inputs *in)
{
    free(in->Q); free(in->K); free(in->V); free(in->dO);
}

/* ---- 1. finite differences ---- */

typedef struct grad_case {
    const char *name;
    int B, Sq, Sk, Hq, Hkv, D;
    int causal, wl, wr;
    double softcap, scale;
    int mask;       /* 0 none; 1 shared [Sk] dropping key 1; 2 per batch, last batch row all 0 */
    int alibi;      /* 0 none; 1 per head [Hq]; 2 per batch [B, Hq] */
    int empty_rows; /* expected (b, i, h) rows that see no key */
} grad_case;

static const grad_case grad_cases[] = {
    {"plain MHA", 1, 3, 5, 2, 2, 3, 0, -1, -1, 0, 0, 0, 0, 0},
    {"plain GQA Sq>Sk", 2, 4, 3, 2, 1, 4, 0, -1, -1, 0, 0, 0, 0, 0},
    {"GQA 4 over 2 causal", 1, 3, 4, 4, 2, 2, 1, -1, -1, 0, 0, 0, 1, 0},
    {"D 1 single row", 1, 1, 4, 2, 1, 1, 0, -1, -1, 0, 0, 0, 0, 0},
    {"causal Sq=Sk", 1, 4, 4, 2, 1, 3, 1, -1, -1, 0, 0, 0, 0, 0},
    {"causal Sq<Sk", 2, 2, 5, 2, 2, 2, 1, -1, -1, 0, 0, 0, 0, 0},
    {"causal Sq>Sk", 2, 5, 2, 2, 1, 3, 1, -1, -1, 0, 0, 0, 0, 2 * 3 * 2},
    {"window left 1", 1, 5, 5, 2, 1, 3, 0, 1, -1, 0, 0, 0, 0, 0},
    {"window right 1", 1, 4, 5, 2, 1, 3, 0, -1, 1, 0, 0, 0, 0, 0},
    {"window left 1 right 1", 1, 5, 4, 2, 1, 4, 0, 1, 1, 0, 0, 0, 0, 0},
    {"softcap", 1, 3, 5, 2, 1, 4, 0, -1, -1, 1.0, 2.0, 0, 0, 0},
    {"shared key mask", 1, 3, 5, 2, 1, 3, 0, -1, -1, 0, 0, 1, 0, 0},
    {"per-batch key mask", 2, 3, 4, 2, 1, 3, 0, -1, -1, 0, 0, 2, 0, 3 * 2},
    {"alibi per head", 1, 4, 5, 2, 1, 3, 0, -1, -1, 0, 0, 0, 1, 0},
    {"alibi per batch", 2, 3, 4, 2, 2, 2, 0, -1, -1, 0, 0, 0, 2, 0},
    {"custom scale", 1, 3, 4, 2, 1, 4, 0, -1, -1, 0, 1.7, 0, 0, 0},
    {"combined", 2, 5, 4, 2, 1, 4, 1, 2, -1, 1.5, 1.3, 2, 2, 1 * 2 + 5 * 2},
};

static const float slopes4[4] = {0.5f, 0.25f, 0.75f, 1.0f};
static const float mask_shared[5] = {1, 0, 1, 1, 0.75f};
static const float mask_batch[2 * 5] = {1, 1, 0, 1, 1, 0, 0, 0, 0, 0}; /* row 1 all masked */

/* The problem a grad_case describes (mask and slopes point at the static tables). */
static ref_attn_problem case_problem(const grad_case *c)
{
    ref_attn_problem p = problem(c->B, c->Sq, c->Sk, c->Hq, c->Hkv, c->D);
    p.causal = c->causal;
    p.window_left = c->wl;
    p.window_right = c->wr;
    p.softcap = c->softcap;
    p.scale = c->scale;
    if (c->mask == 1)
        p.key_mask = mask_shared;
    if (c->mask == 2) { /* [B, Sk]: batch 0 drops key 2, the last batch row drops all */
        static float m[2 * 5];
        for (int b = 0; b < c->B; b++)
            for (int j = 0; j < c->Sk; j++)
                m[b * c->Sk + j] = mask_batch[(b == c->B - 1 ? 5 : 0) + j];
        p.key_mask = m;
        p.mask_per_batch = 1;
    }
    p.alibi = c->alibi ? slopes4 : NULL;
    p.alibi_per_batch = c->alibi == 2;
    return p;
}

/* |fd - g| / (1 + |g|) for every element of Q, K, V; also requires g == 0 exactly wherever the
 * loss does not move at all (fd == 0: an empty row or an invisible key). Returns the max. */
static double fd_max_err(const char *name, const ref_attn_problem *p, const inputs *in,
                         const double *dQ, const double *dK, const double *dV)
{
    const double eps = 1e-6;
    size_t nq = q_count(p), nkv = kv_count(p);
    double *X[3], *Q, *K, *V;
    const float *src[3] = {in->Q, in->K, in->V};
    const double *G[3] = {dQ, dK, dV};
    const size_t n[3] = {nq, nkv, nkv};
    const char *tn[3] = {"dQ", "dK", "dV"};
    for (int t = 0; t < 3; t++) {
        X[t] = support_xmalloc(sizeof(double) * n[t]);
        for (size_t k = 0; k < n[t]; k++)
            X[t][k] = src[t][k];
    }
    Q = X[0]; K = X[1]; V = X[2];
    double worst = 0.0;
    for (int t = 0; t < 3; t++)
        for (size_t k = 0; k < n[t]; k++) {
            double x = X[t][k];
            X[t][k] = x + eps;
            double lp = ref_attention_loss(p, Q, K, V, in->dO);
            X[t][k] = x - eps;
            double lm = ref_attention_loss(p, Q, K, V, in->dO);
            X[t][k] = x;
            double fd = (lp - lm) / (2 * eps), g = G[t][k];
            double err = fabs(fd - g) / (1 + fabs(g));
            cr_expect(!(err > 1e-7), "%s: %s[%zu] analytic %.12g, finite difference %.12g", name,
                      tn[t], k, g, fd);
            cr_expect(fd != 0.0 || g == 0.0, "%s: %s[%zu] = %g where the loss does not depend on it",
                      name, tn[t], k, g);
            if (!(err <= worst))
                worst = err;
        }
    for (int t = 0; t < 3; t++)
        free(X[t]);
    return worst;
}

Test(reference_backward, finite_differences)
{
    for (size_t c = 0; c < sizeof grad_cases / sizeof grad_cases[0]; c++) {
        const grad_case *gc = &grad_cases[c];
        ref_attn_problem p = case_problem(gc);
        inputs in = make_inputs(&p, 100 + 10 * c, -1, 1, FCL_F32);
        size_t nq = q_count(&p), nkv = kv_count(&p), nl = (size_t)p.B * p.Hq * p.Sq;
        double *dQ = support_xmalloc(sizeof(double) * nq), *dK = support_xmalloc(sizeof(double) * nkv);
        double *dV = support_xmalloc(sizeof(double) * nkv), *O = support_xmalloc(sizeof(double) * nq);
        double *L = support_xmalloc(sizeof(double) * nl);
        ref_attention_backward(&p, in.Q, in.K, in.V, in.dO, dQ, dK, dV);
        double err = fd_max_err(gc->name, &p, &in, dQ, dK, dV);
        cr_log_info("%-22s max |fd - g| / (1 + |g|) = %.3g", gc->name, err);

        /* Rows with no visible key (LSE = -inf) are the expected ones and have dQ == 0. */
        ref_attention_forward(&p, in.Q, in.K, in.V, O, L);
        int empty = 0;
        for (int b = 0; b < p.B; b++)
            for (int h = 0; h < p.Hq; h++)
                for (int i = 0; i < p.Sq; i++) {
                    if (L[((size_t)b * p.Hq + h) * p.Sq + i] != -INFINITY)
                        continue;
                    empty++;
                    for (int d = 0; d < p.D; d++)
                        cr_expect(dQ[(((size_t)b * p.Sq + i) * p.Hq + h) * p.D + d] == 0.0,
                                  "%s: empty row b %d i %d h %d has dQ != 0", gc->name, b, i, h);
                }
        cr_expect(empty == gc->empty_rows, "%s: %d empty rows, want %d", gc->name, empty,
                  gc->empty_rows);
        /* A fully masked batch row: zero gradients for all of it. */
        if (gc->mask == 2) {
            size_t qb = nq / p.B, kb = nkv / p.B, last = (size_t)p.B - 1;
            for (size_t k = 0; k < qb; k++)
                cr_expect(dQ[last * qb + k] == 0.0, "%s: masked batch dQ[%zu] != 0", gc->name, k);
            for (size_t k = 0; k < kb; k++)
                cr_expect(dK[last * kb + k] == 0.0 && dV[last * kb + k] == 0.0,
                          "%s: masked batch dK/dV[%zu] != 0", gc->name, k);
        }
        free(dQ); free(dK); free(dV); free(O); free(L);
        free_inputs(&in);
    }
}

/* The loss is the forward's: L == sum(dO * O) with O from ref_attention_forward, in every
 * case (this ties the shared row code of loss and gradients to the proven forward). */
Test(reference_backward, loss_matches_forward)
{
    for (size_t c = 0; c < sizeof grad_cases / sizeof grad_cases[0]; c++) {
        ref_attn_problem p = case_problem(&grad_cases[c]);
        inputs in = make_inputs(&p, 7 + c, -1, 1, FCL_F32);
        size_t nq = q_count(&p), nkv = kv_count(&p);
        double *O = support_xmalloc(sizeof(double) * nq), *Qd = support_xmalloc(sizeof(double) * nq);
        double *Kd = support_xmalloc(sizeof(double) * nkv), *Vd = support_xmalloc(sizeof(double) * nkv);
        for (size_t k = 0; k < nq; k++)
            Qd[k] = in.Q[k];
        for (size_t k = 0; k < nkv; k++) {
            Kd[k] = in.K[k];
            Vd[k] = in.V[k];
        }
        ref_attention_forward(&p, in.Q, in.K, in.V, O, NULL);
        double want = 0.0;
        for (size_t k = 0; k < nq; k++)
            want += (double)in.dO[k] * O[k];
        double got = ref_attention_loss(&p, Qd, Kd, Vd, in.dO);
        cr_expect(fabs(got - want) < 1e-13 && want != 0.0, "%s: loss %.17g, forward gives %.17g",
                  grad_cases[c].name, got, want);
        free(O); free(Qd); free(Kd); free(Vd);
        free_inputs(&in);
    }
}

/* ---- 2. hand checks ---- */

/* One key: P = 1 exactly, so dQ = dK = 0 and dV = the sum of the dO rows that see the key. */
Test(reference_backward, one_key)
{
    enum { SQ = 3, HQ = 2, D = 3 };
    for (int causal = 0; causal <= 1; causal++) {
        ref_attn_problem p = problem(1, SQ, 1, HQ, 1, D);
        p.causal = causal; /* positions i - 2: only row 2 sees key 0 */
        p.softcap = 1.5;
        p.alibi = slopes4;
        inputs in = make_inputs(&p, 40, -1, 1, FCL_F32);
        double dQ[SQ * HQ * D], dK[D], dV[D], want[D] = {0};
        ref_attention_backward(&p, in.Q, in.K, in.V, in.dO, dQ, dK, dV);
        for (int i = causal ? SQ - 1 : 0; i < SQ; i++)
            for (int h = 0; h < HQ; h++)
                for (int d = 0; d < D; d++)
                    want[d] += in.dO[(i * HQ + h) * D + d];
        for (int k = 0; k < SQ * HQ * D; k++)
            cr_assert(dQ[k] == 0.0, "causal %d: dQ[%d] = %g", causal, k, dQ[k]);
        for (int d = 0; d < D; d++) {
            cr_assert(dK[d] == 0.0, "causal %d: dK[%d] = %g", causal, d, dK[d]);
            cr_assert(fabs(dV[d] - want[d]) < 1e-15, "causal %d: dV[%d] %g want %g", causal, d,
                      dV[d], want[d]);
        }
        const fcl_dtype dts[3] = {FCL_F32, FCL_F16, FCL_BF16};
        for (int t = 0; t < 3; t++) {
            float nQ[SQ * HQ * D], nK[D], nV[D];
            ref_attention_backward_naive(&p, dts[t], in.Q, in.K, in.V, in.dO, nQ, nK, nV);
            for (int k = 0; k < SQ * HQ * D; k++)
                cr_assert(nQ[k] == 0.0f);
            for (int d = 0; d < D; d++)
                cr_assert(nK[d] == 0.0f && fabs(nV[d] - want[d]) < 1e-2 * (1 + fabs(want[d])),
                          "%s: dK %g dV %g want %g", fcl_dtype_name(dts[t]), nK[d], nV[d], want[d]);
        }
        free_inputs(&in);
    }
}

/* Keys no query sees (outside every window, or masked) get exactly 0 gradients; the others
 * do not. Sq = 3, Sk = 6: positions 3..5, window left 1 right 0 sees keys 2..5; the mask drops
 * key 4 in batch 0 and key 3 in batch 1. */
Test(reference_backward, invisible_keys_get_zero)
{
    enum { B = 2, SQ = 3, SK = 6, HQ = 2, D = 4 };
    static const float mask[B * SK] = {1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1};
    ref_attn_problem p = problem(B, SQ, SK, HQ, 1, D);
    p.window_left = 1;
    p.window_right = 0;
    p.key_mask = mask;
    p.mask_per_batch = 1;
    inputs in = make_inputs(&p, 50, -1, 1, FCL_F32);
    double dQ[B * SQ * HQ * D], dK[B * SK * D], dV[B * SK * D];
    float nQ[B * SQ * HQ * D], nK[B * SK * D], nV[B * SK * D];
    ref_attention_backward(&p, in.Q, in.K, in.V, in.dO, dQ, dK, dV);
    for (int t = 0; t < 4; t++) {
        fcl_dtype dt = t == 3 ? FCL_BF16 : t == 2 ? FCL_F16 : FCL_F32;
        if (t > 0)
            ref_attention_backward_naive(&p, dt, in.Q, in.K, in.V, in.dO, nQ, nK, nV);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < SK; j++) {
                int seen = j >= 2 && mask[b * SK + j] > 0.5f;
                for (int d = 0; d < D; d++) {
                    size_t k = ((size_t)b * SK + j) * D + d;
                    double gk = t ? nK[k] : dK[k], gv = t ? nV[k] : dV[k];
                    if (seen)
                        cr_expect(gv != 0.0 && isfinite(gk), "t %d b %d key %d: dV 0", t, b, j);
                    else
                        cr_expect(gk == 0.0 && gv == 0.0, "t %d b %d key %d: dK %g dV %g, want 0",
                                  t, b, j, gk, gv);
                }
            }
    }
    free_inputs(&in);
}

/* Every flag at once, large scores, empty rows and a fully masked batch row: no NaN or inf in
 * any gradient, float64 or naive. */
Test(reference_backward, no_nan)
{
    ref_attn_problem p = problem(2, 7, 4, 4, 2, 8);
    static const float mask[2 * 4] = {1, 0, 1, 1, 0, 0, 0, 0};
    static const float slopes[2 * 4] = {0.5f, 1, 2, 4, 0.1f, 0.2f, 0.3f, 0.4f};
    p.causal = 1;
    p.window_left = 1;
    p.softcap = 30.0;
    p.scale = 4.0;
    p.key_mask = mask;
    p.mask_per_batch = 1;
    p.alibi = slopes;
    p.alibi_per_batch = 1;
    inputs in = make_inputs(&p, 60, -4, 4, FCL_BF16);
    size_t nq = q_count(&p), nkv = kv_count(&p);
    double *dQ = support_xmalloc(sizeof(double) * nq), *dK = support_xmalloc(sizeof(double) * nkv);
    double *dV = support_xmalloc(sizeof(double) * nkv);
    float *nQ = support_xmalloc(sizeof(float) * nq), *nK = support_xmalloc(sizeof(float) * nkv);
    float *nV = support_xmalloc(sizeof(float) * nkv);
    ref_attention_backward(&p, in.Q, in.K, in.V, in.dO, dQ, dK, dV);
    for (size_t k = 0; k < nq; k++)
        cr_assert(isfinite(dQ[k]), "dQ[%zu] = %g", k, dQ[k]);
    for (size_t k = 0; k < nkv; k++)
        cr_assert(isfinite(dK[k]) && isfinite(dV[k]), "dK/dV[%zu] = %g %g", k, dK[k], dV[k]);
    const fcl_dtype dts[3] = {FCL_F32, FCL_F16, FCL_BF16};
    for (int t = 0; t < 3; t++) {
        ref_attention_backward_naive(&p, dts[t], in.Q, in.K, in.V, in.dO, nQ, nK, nV);
        cr_assert(support_count_nan(nQ, nq) == 0 && support_count_nan(nK, nkv) == 0 &&
                  support_count_nan(nV, nkv) == 0, "%s: NaN in naive gradients",
                  fcl_dtype_name(dts[t]));
        cr_assert(support_max_err_f(nQ, dQ, nq) < INFINITY && support_max_err_f(nK, dK, nkv) < INFINITY &&
                  support_max_err_f(nV, dV, nkv) < INFINITY, "%s: inf in naive gradients",
                  fcl_dtype_name(dts[t]));
    }
    free(dQ); free(dK); free(dV); free(nQ); free(nK); free(nV);
    free_inputs(&in);
}

/* ---- 3. the naive twin ---- */

/* F32 naive agrees with float64 to float32 accuracy on random flag mixes; F16 and BF16 are off
 * by a visible but plausible amount, so the baseline of the 3x rule is meaningful. */
Test(reference_backward, naive_close_to_float64)
{
    enum { B = 2, SQ = 17, SK = 29, HQ = 4, HKV = 2, D = 24 };
    static const float slopes[HQ] = {0.5f, 0.25f, 0.125f, 0.0625f};
    float mask[B * SK];
    support_random(mask, B * SK, 70, 0, 1.5f, FCL_F32);
    static const struct { int causal, wl, wr; double softcap; int alibi, mask; double scale; } cfg[] = {
        {0, -1, -1, 0, 0, 0, 0}, {1, -1, -1, 0, 0, 0, 0}, {0, 4, 2, 0, 0, 0, 0},
        {0, -1, -1, 1.0, 0, 0, 1.0}, {0, -1, -1, 0, 1, 0, 0}, {0, -1, -1, 0, 0, 1, 0},
        {1, 6, -1, 2.0, 1, 1, 0.7},
    };
    const size_t nq = (size_t)B * SQ * HQ * D, nkv = (size_t)B * SK * HKV * D;
    static double dQ[B * SQ * HQ * D], dK[B * SK * HKV * D], dV[B * SK * HKV * D];
    static float nQ[B * SQ * HQ * D], nK[B * SK * HKV * D], nV[B * SK * HKV * D];
    const fcl_dtype dts[3] = {FCL_F32, FCL_F16, FCL_BF16};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        ref_attn_problem p = problem(B, SQ, SK, HQ, HKV, D);
        p.causal = cfg[c].causal;
        p.window_left = cfg[c].wl;
        p.window_right = cfg[c].wr;
        p.softcap = cfg[c].softcap;
        p.alibi = cfg[c].alibi ? slopes : NULL;
        p.key_mask = cfg[c].mask ? mask : NULL;
        p.mask_per_batch = 1;
        p.scale = cfg[c].scale;
        for (int t = 0; t < 3; t++) {
            inputs in = make_inputs(&p, 80 + 10 * c, -1, 1, dts[t]);
            ref_attention_backward(&p, in.Q, in.K, in.V, in.dO, dQ, dK, dV);
            ref_attention_backward_naive(&p, dts[t], in.Q, in.K, in.V, in.dO, nQ, nK, nV);
            double e[3] = {support_max_err_f(nQ, dQ, nq), support_max_err_f(nK, dK, nkv),
                           support_max_err_f(nV, dV, nkv)};
            cr_log_info("cfg %zu %-4s naive err dQ %.3g dK %.3g dV %.3g", c, fcl_dtype_name(dts[t]),
                        e[0], e[1], e[2]);
            for (size_t k = 0; k < nkv; k++) /* outputs are stored in dtype */
                cr_expect(ref_round_to_dtype(dts[t], nK[k]) == nK[k] &&
                          ref_round_to_dtype(dts[t], nV[k]) == nV[k], "cfg %zu: dK/dV not %s", c,
                          fcl_dtype_name(dts[t]));
            for (size_t k = 0; k < nq; k++)
                cr_expect(ref_round_to_dtype(dts[t], nQ[k]) == nQ[k], "cfg %zu: dQ not %s", c,
                          fcl_dtype_name(dts[t]));
            for (int g = 0; g < 3; g++) {
                if (t == 0)
                    cr_expect(e[g] < 1e-5, "cfg %zu F32: grad %d naive err %g", c, g, e[g]);
                else
                    cr_expect(e[g] > 1e-5 && e[g] < 0.1, "cfg %zu %s: grad %d naive err %g not in "
                              "(1e-5, 0.1)", c, fcl_dtype_name(dts[t]), g, e[g]);
            }
            free_inputs(&in);
        }
    }
}

/* One row written out by hand with every rounding point of the naive twin: Sq = 1, Sk = 3,
 * D = 2, scale 0.9, softcap 1.5, ALiBi slope 0.25 (position 2). */
static void naive_row_by_hand(fcl_dtype dt, const float *q, const float *k, const float *v,
                              const float *g, float *dq, float *dk, float *dv)
{
    const float scale = 0.9f, cap = 1.5f, slope = 0.25f;
    float s[3], th[3], P[3], dP[3], m = -INFINITY, sum = 0.0f, delta = 0.0f;
    for (int j = 0; j < 3; j++) {
        th[j] = tanhf((q[0] * k[2 * j] + q[1] * k[2 * j + 1]) * scale / cap);
        s[j] = ref_round_to_dtype(dt, cap * th[j] - slope * (float)(2 - j));
        m = fmaxf(m, s[j]);
    }
    for (int j = 0; j < 3; j++)
        sum += expf(s[j] - m);
    for (int j = 0; j < 3; j++) {
        P[j] = ref_round_to_dtype(dt, expf(s[j] - m) / sum);
        dP[j] = ref_round_to_dtype(dt, g[0] * v[2 * j] + g[1] * v[2 * j + 1]);
        delta += P[j] * dP[j];
    }
    dq[0] = dq[1] = 0.0f;
    for (int j = 0; j < 3; j++) {
        float ds = ref_round_to_dtype(dt, P[j] * (dP[j] - delta) * (1.0f - th[j] * th[j]));
        for (int d = 0; d < 2; d++) {
            dq[d] += ds * k[2 * j + d];
            dk[2 * j + d] = ref_round_to_dtype(dt, scale * (ds * q[d]));
            dv[2 * j + d] = ref_round_to_dtype(dt, P[j] * g[d]);
        }
    }
    for (int d = 0; d < 2; d++)
        dq[d] = ref_round_to_dtype(dt, scale * dq[d]);
}

Test(reference_backward, naive_by_hand)
{
    static const float slope[1] = {0.25f};
    ref_attn_problem p = problem(1, 1, 3, 1, 1, 2);
    p.scale = 0.9;
    p.softcap = 1.5;
    p.alibi = slope;
    const fcl_dtype dts[3] = {FCL_F32, FCL_F16, FCL_BF16};
    for (int t = 0; t < 3; t++)
        for (uint64_t seed = 0; seed < 8; seed++) {
            float q[2], k[6], v[6], g[2], dq[2], dk[6], dv[6], hq[2], hk[6], hv[6];
            support_random(q, 2, 90 + 4 * seed, -2, 2, dts[t]);
            support_random(k, 6, 91 + 4 * seed, -2, 2, dts[t]);
            support_random(v, 6, 92 + 4 * seed, -1, 1, dts[t]);
            support_random(g, 2, 93 + 4 * seed, -1, 1, dts[t]);
            ref_attention_backward_naive(&p, dts[t], q, k, v, g, dq, dk, dv);
            naive_row_by_hand(dts[t], q, k, v, g, hq, hk, hv);
            for (int e = 0; e < 14; e++) {
                float a = e < 2 ? dq[e] : e < 8 ? dk[e - 2] : dv[e - 8];
                float h = e < 2 ? hq[e] : e < 8 ? hk[e - 2] : hv[e - 8];
                cr_expect(fabsf(a - h) <= 1e-6f * (1 + fabsf(h)), "%s seed %d element %d: naive "
                          "%.9g, by hand %.9g", fcl_dtype_name(dts[t]), (int)seed, e, a, h);
            }
        }
}
