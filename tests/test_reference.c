/* SPDX-License-Identifier: Apache-2.0 */
/* Proves the float64 reference (and its naive twin) on tiny, hand-checkable cases.
 * Needs no OpenCL device: only the library's host dtype conversions. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention.h"
#include "support.h"

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
static size_t lse_count(const ref_attn_problem *p) { return (size_t)p->B * p->Hq * p->Sq; }

Test(reference, round_to_dtype)
{
    cr_assert(ref_round_to_dtype(FCL_F32, 0.1f) == 0.1f);
    /* f16 has 10 fraction bits: 1 + 2^-11 is a tie and rounds to even (1). */
    cr_assert(ref_round_to_dtype(FCL_F16, 1.0f + 0x1.0p-11f) == 1.0f);
    cr_assert(ref_round_to_dtype(FCL_F16, 1.0f + 3 * 0x1.0p-11f) == 1.0f + 0x1.0p-9f);
    cr_assert(ref_round_to_dtype(FCL_F16, 1.0f + 0x1.8p-11f) == 1.0f + 0x1.0p-10f);
    cr_assert(isinf(ref_round_to_dtype(FCL_F16, 70000.0f)));
    /* bf16 has 7 fraction bits. */
    cr_assert(ref_round_to_dtype(FCL_BF16, 1.0f + 0x1.0p-8f) == 1.0f);
    cr_assert(ref_round_to_dtype(FCL_BF16, 1.0f + 3 * 0x1.0p-8f) == 1.0f + 0x1.0p-6f);
    cr_assert(ref_round_to_dtype(FCL_BF16, 1.0f + 0x1.8p-8f) == 1.0f + 0x1.0p-7f);
    cr_assert(isnan(ref_round_to_dtype(FCL_BF16, NAN)) && isnan(ref_round_to_dtype(FCL_F16, NAN)));
}

Test(reference, single_key_returns_v)
{
    ref_attn_problem p = problem(1, 1, 1, 1, 1, 5);
    float q[5], k[5], v[5];
    support_random(q, 5, 1, -1, 1, FCL_F32);
    support_random(k, 5, 2, -1, 1, FCL_F32);
    support_random(v, 5, 3, -1, 1, FCL_F32);
    double o[5], lse;
    ref_attention_row(&p, q, k, v, 0, 0, 0, o, &lse);
    double dot = 0;
    for (int d = 0; d < 5; d++) {
        cr_assert(o[d] == (double)v[d], "o[%d] %g != v %g", d, o[d], v[d]);
        dot += (double)q[d] * k[d];
    }
    cr_assert(fabs(lse - dot / sqrt(5.0)) < 1e-15, "lse %g vs %g", lse, dot / sqrt(5.0));
    float of[5], lf;
    ref_attention_row_naive(&p, FCL_F32, q, k, v, 0, 0, 0, of, &lf);
    for (int d = 0; d < 5; d++)
        cr_assert(of[d] == v[d]);
    cr_assert(fabs(lf - lse) < 1e-6);
    /* The F16 twin rounds the score: with one key its LSE is the score rounded to f16. */
    float dotf = 0.0f;
    for (int d = 0; d < 5; d++)
        dotf += q[d] * k[d];
    float sc = dotf * (float)(1.0 / sqrt(5.0));
    ref_attention_row_naive(&p, FCL_F16, q, k, v, 0, 0, 0, of, &lf);
    cr_assert(lf == ref_round_to_dtype(FCL_F16, sc) && lf != sc, "lse %.9g score %.9g", lf, sc);
    for (int d = 0; d < 5; d++)
        cr_assert(of[d] == ref_round_to_dtype(FCL_F16, v[d]));
}

Test(reference, uniform_scores_mean_of_v)
{
    enum { SK = 7, D = 3 };
    ref_attn_problem p = problem(1, 2, SK, 1, 1, D);
    float q[2 * D] = {0}, k[SK * D], v[SK * D];
    support_random(k, SK * D, 4, -1, 1, FCL_F32);
    support_random(v, SK * D, 5, -1, 1, FCL_F32);
    double o[D], lse;
    for (int i = 0; i < 2; i++) {
        ref_attention_row(&p, q, k, v, 0, i, 0, o, &lse);
        for (int d = 0; d < D; d++) {
            double mean = 0;
            for (int j = 0; j < SK; j++)
                mean += v[j * D + d];
            mean /= SK;
            cr_assert(fabs(o[d] - mean) < 1e-14, "o %g mean %g", o[d], mean);
        }
        cr_assert(fabs(lse - log((double)SK)) < 1e-14);
    }
}

/* Causal with Sq == Sk: row i equals a non-causal problem over keys 0..i. */
Test(reference, causal_is_lower_triangle)
{
    enum { S = 9, D = 4 };
    ref_attn_problem p = problem(1, S, S, 1, 1, D);
    p.causal = 1;
    float q[S * D], k[S * D], v[S * D];
    support_random(q, S * D, 6, -2, 2, FCL_F32);
    support_random(k, S * D, 7, -2, 2, FCL_F32);
    support_random(v, S * D, 8, -2, 2, FCL_F32);
    for (int i = 0; i < S; i++) {
        double o[D], lse, om[D], lsem;
        ref_attention_row(&p, q, k, v, 0, i, 0, o, &lse);
        ref_attn_problem sub = problem(1, 1, i + 1, 1, 1, D);
        ref_attention_row(&sub, q + i * D, k, v, 0, 0, 0, om, &lsem);
        for (int d = 0; d < D; d++)
            cr_assert(fabs(o[d] - om[d]) < 1e-14, "row %d d %d: %g vs %g", i, d, o[d], om[d]);
        cr_assert(fabs(lse - lsem) < 1e-14);
    }
}

/*
 * Window / causal / mask visibility on hand-computed cases. Q = 0 makes every visible key
 * weigh the same; with D = 1 and V[j] = 2^j the output is the mean of 2^j over the visible
 * set, and LSE = log(count). expect[i] is the bitmask of keys row i sees.
 */
typedef struct vis_case {
    const char *name;
    int Sq, Sk, causal, wl, wr;
    const float *mask; /* [Sk] or NULL */
    unsigned expect[6];
} vis_case;

static const float mask_5[5] = {1, 0, 1, 0.5f, 0.75f}; /* keys 1 and 3 dropped (0.5 is not > 0.5) */

static const vis_case vis_cases[] = {
    /* Sq=3, Sk=5: positions p = 2, 3, 4 */
    {"full", 3, 5, 0, -1, -1, NULL, {0x1f, 0x1f, 0x1f}},
    {"causal Sq<Sk", 3, 5, 1, -1, -1, NULL, {0x07, 0x0f, 0x1f}},
    {"causal forces wr=0", 3, 5, 1, -1, 2, NULL, {0x07, 0x0f, 0x1f}},
    {"left 1", 3, 5, 0, 1, -1, NULL, {0x1e, 0x1c, 0x18}},
    {"right 0", 3, 5, 0, -1, 0, NULL, {0x07, 0x0f, 0x1f}},
    {"right 1", 3, 5, 0, -1, 1, NULL, {0x0f, 0x1f, 0x1f}},
    {"left 1 right 0", 3, 5, 0, 1, 0, NULL, {0x06, 0x0c, 0x18}},
    {"left 0 right 0", 3, 5, 0, 0, 0, NULL, {0x04, 0x08, 0x10}},
    {"left 0 causal", 3, 5, 1, 0, -1, NULL, {0x04, 0x08, 0x10}},
    {"mask", 3, 5, 0, -1, -1, mask_5, {0x15, 0x15, 0x15}},
    {"mask causal", 3, 5, 1, -1, -1, mask_5, {0x05, 0x05, 0x15}},
    {"mask left 0 causal", 3, 5, 1, 0, -1, mask_5, {0x04, 0x00, 0x10}},
    /* Sq=6, Sk=3: positions p = -3 .. 2 */
    {"causal Sq>Sk", 6, 3, 1, -1, -1, NULL, {0, 0, 0, 0x1, 0x3, 0x7}},
    {"left 0 right 1 Sq>Sk", 6, 3, 0, 0, 1, NULL, {0, 0, 0x1, 0x3, 0x6, 0x4}},
    {"right 2 Sq>Sk", 6, 3, 0, -1, 2, NULL, {0, 0x1, 0x3, 0x7, 0x7, 0x7}},
    {"left 1 Sq>Sk", 6, 3, 0, 1, -1, NULL, {0x7, 0x7, 0x7, 0x7, 0x7, 0x6}},
};

Test(reference, window_mask_visibility)
{
    for (size_t c = 0; c < sizeof vis_cases / sizeof vis_cases[0]; c++) {
        const vis_case *vc = &vis_cases[c];
        ref_attn_problem p = problem(1, vc->Sq, vc->Sk, 1, 1, 1);
        p.causal = vc->causal;
        p.window_left = vc->wl;
        p.window_right = vc->wr;
        p.key_mask = vc->mask;
        float q[6] = {0}, k[6], v[6];
        support_random(k, (size_t)vc->Sk, 9, -1, 1, FCL_F32);
        for (int j = 0; j < vc->Sk; j++)
            v[j] = (float)(1 << j);
        for (int i = 0; i < vc->Sq; i++) {
            double o, lse;
            float of, lf;
            ref_attention_row(&p, q, k, v, 0, i, 0, &o, &lse);
            ref_attention_row_naive(&p, FCL_F32, q, k, v, 0, i, 0, &of, &lf);
            unsigned m = vc->expect[i];
            int count = 0;
            double sum = 0;
            for (int j = 0; j < vc->Sk; j++)
                if (m & (1u << j)) {
                    count++;
                    sum += v[j];
                }
            if (count == 0) {
                cr_expect(o == 0.0 && lse == -INFINITY, "%s row %d: o %g lse %g, want empty",
                          vc->name, i, o, lse);
                cr_expect(of == 0.0f && lf == -INFINITY, "%s row %d naive: o %g lse %g",
                          vc->name, i, of, lf);
            } else {
                cr_expect(fabs(o - sum / count) < 1e-12 && fabs(lse - log((double)count)) < 1e-12,
                          "%s row %d: o %g lse %g, want %g %g", vc->name, i, o, lse, sum / count,
                          log((double)count));
                cr_expect(fabs(of - sum / count) < 1e-5 * sum && fabs(lf - log((double)count)) < 1e-6,
                          "%s row %d naive: o %g lse %g", vc->name, i, of, lf);
            }
        }
    }
}

Test(reference, empty_rows)
{
    /* An all-zero mask for batch 1 empties every row of it; batch 0 stays full. */
    ref_attn_problem p = problem(2, 3, 4, 2, 1, 3);
    float mask[8] = {1, 1, 1, 1, 0, 0, 0, 0};
    p.key_mask = mask;
    p.mask_per_batch = 1;
    p.softcap = 2.0;
    float q[2 * 3 * 2 * 3], k[2 * 4 * 3], v[2 * 4 * 3];
    support_random(q, q_count(&p), 10, -1, 1, FCL_F32);
    support_random(k, kv_count(&p), 11, -1, 1, FCL_F32);
    support_random(v, kv_count(&p), 12, -1, 1, FCL_F32);
    double O[36], L[12];
    float On[36], Ln[12];
    ref_attention_forward(&p, q, k, v, O, L);
    ref_attention_forward_naive(&p, FCL_BF16, q, k, v, On, Ln);
    for (int i = 0; i < 36; i++) {
        int empty = i >= 18;
        cr_assert(empty ? O[i] == 0.0 && On[i] == 0.0f : isfinite(O[i]) && O[i] != 0.0);
    }
    for (int i = 0; i < 12; i++) {
        int empty = i >= 6;
        cr_assert(empty ? L[i] == -INFINITY && Ln[i] == -INFINITY : isfinite(L[i]) && isfinite(Ln[i]));
    }
}

/* GQA: Hq = 4 over Hkv = 2 equals MHA with each KV head repeated for its query heads. */
Test(reference, gqa_mapping)
{
    enum { B = 2, SQ = 3, SK = 5, HQ = 4, HKV = 2, D = 6 };
    ref_attn_problem g = problem(B, SQ, SK, HQ, HKV, D);
    ref_attn_problem m = problem(B, SQ, SK, HQ, HQ, D);
    g.causal = m.causal = 1;
    float q[B * SQ * HQ * D], k[B * SK * HKV * D], v[B * SK * HKV * D];
    float k4[B * SK * HQ * D], v4[B * SK * HQ * D];
    support_random(q, q_count(&g), 13, -1, 1, FCL_F32);
    support_random(k, kv_count(&g), 14, -1, 1, FCL_F32);
    support_random(v, kv_count(&g), 15, -1, 1, FCL_F32);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < SK; j++)
            for (int h = 0; h < HQ; h++)
                for (int d = 0; d < D; d++) {
                    size_t src = (((size_t)b * SK + j) * HKV + h / 2) * D + d;
                    size_t dst = (((size_t)b * SK + j) * HQ + h) * D + d;
                    k4[dst] = k[src];
                    v4[dst] = v[src];
                }
    double Og[B * SQ * HQ * D], Om[B * SQ * HQ * D], Lg[B * HQ * SQ], Lm[B * HQ * SQ];
    ref_attention_forward(&g, q, k, v, Og, Lg);
    ref_attention_forward(&m, q, k4, v4, Om, Lm);
    cr_assert(memcmp(Og, Om, sizeof Og) == 0);
    cr_assert(memcmp(Lg, Lm, sizeof Lg) == 0);
    /* MQA too: Hkv = 1 equals heads all reading KV head 0. */
    ref_attn_problem q1 = problem(1, SQ, SK, HQ, 1, D);
    double o1[D], l1;
    ref_attention_row(&q1, q, k, v, 0, 1, 3, o1, &l1);
    ref_attn_problem single = problem(1, SQ, SK, 1, 1, D);
    float qrow[SQ * D];
    for (int i = 0; i < SQ; i++)
        memcpy(qrow + i * D, q + ((size_t)i * HQ + 3) * D, sizeof(float) * D);
    double o2[D], l2;
    ref_attention_row(&single, qrow, k, v, 0, 1, 0, o2, &l2);
    cr_assert(memcmp(o1, o2, sizeof o1) == 0 && l1 == l2);
}

/* Softcap, ALiBi and scale on a row small enough to write out by hand. */
Test(reference, softcap_alibi_scale_by_hand)
{
    /* D = 1, q = 2, k = {1.5, -0.5, 3}, v = {1, 2, 4}; Sq = 1 so p = Sk - 1 = 2. */
    ref_attn_problem p = problem(2, 1, 3, 2, 1, 1);
    float q[4] = {2, 2, 2, 2}, k[6] = {1.5f, -0.5f, 3, 1.5f, -0.5f, 3}, v[6] = {1, 2, 4, 1, 2, 4};
    float slopes[4] = {0.25f, 0.5f, 1.0f, 0.125f}; /* [B, Hq] */
    p.scale = 0.75;
    p.softcap = 2.0;
    p.alibi = slopes;
    p.alibi_per_batch = 1;
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 2; h++) {
            double s[3], sum = 0, want = 0;
            for (int j = 0; j < 3; j++)
                s[j] = 2.0 * tanh(0.75 * 2.0 * k[j] / 2.0) - slopes[b * 2 + h] * (2 - j);
            for (int j = 0; j < 3; j++)
                sum += exp(s[j]);
            for (int j = 0; j < 3; j++)
                want += exp(s[j]) / sum * v[j];
            double o, lse;
            ref_attention_row(&p, q, k, v, b, 0, h, &o, &lse);
            cr_assert(fabs(o - want) < 1e-14, "b %d h %d: o %.17g want %.17g", b, h, o, want);
            cr_assert(fabs(lse - log(sum)) < 1e-14, "b %d h %d: lse %.17g want %.17g", b, h, lse,
                      log(sum));
            float of, lf;
            ref_attention_row_naive(&p, FCL_F32, q, k, v, b, 0, h, &of, &lf);
            cr_assert(fabs(of - want) < 1e-6 && fabs(lf - log(sum)) < 1e-6);
        }
    /* [Hq] slopes are shared by the batches. */
    p.alibi_per_batch = 0;
    double o0, o1;
    ref_attention_row(&p, q, k, v, 0, 0, 1, &o0, NULL);
    ref_attention_row(&p, q, k, v, 1, 0, 1, &o1, NULL);
    cr_assert(o0 == o1);
    /* scale 0 means 1 / sqrt(D). */
    ref_attn_problem a = problem(1, 2, 4, 1, 1, 7), c;
    float q2[14], k2[28], v2[28];
    support_random(q2, 14, 16, -2, 2, FCL_F32);
    support_random(k2, 28, 17, -2, 2, FCL_F32);
    support_random(v2, 28, 18, -2, 2, FCL_F32);
    c = a;
    c.scale = 1.0 / sqrt(7.0);
    double oa[7], oc[7], la, lc;
    ref_attention_row(&a, q2, k2, v2, 0, 1, 0, oa, &la);
    ref_attention_row(&c, q2, k2, v2, 0, 1, 0, oc, &lc);
    cr_assert(memcmp(oa, oc, sizeof oa) == 0 && la == lc);
    /* A different scale changes the result. */
    c.scale = 2.0;
    ref_attention_row(&c, q2, k2, v2, 0, 1, 0, oc, &lc);
    cr_assert(la != lc);
}

/* [Sk] mask equals the same mask repeated per batch row. */
Test(reference, shared_mask_equals_per_batch)
{
    ref_attn_problem p = problem(3, 4, 6, 2, 2, 5);
    float q[3 * 4 * 2 * 5], k[3 * 6 * 2 * 5], v[3 * 6 * 2 * 5];
    support_random(q, q_count(&p), 19, -1, 1, FCL_F32);
    support_random(k, kv_count(&p), 20, -1, 1, FCL_F32);
    support_random(v, kv_count(&p), 21, -1, 1, FCL_F32);
    float m1[6] = {1, 0, 1, 1, 0, 1}, m3[18];
    for (int b = 0; b < 3; b++)
        memcpy(m3 + b * 6, m1, sizeof m1);
    double O1[120], O3[120], L1[24], L3[24];
    p.key_mask = m1;
    ref_attention_forward(&p, q, k, v, O1, L1);
    p.key_mask = m3;
    p.mask_per_batch = 1;
    ref_attention_forward(&p, q, k, v, O3, L3);
    cr_assert(memcmp(O1, O3, sizeof O1) == 0 && memcmp(L1, L3, sizeof L1) == 0);
    /* and the mask does drop keys: with no mask the result differs */
    p.key_mask = NULL;
    ref_attention_forward(&p, q, k, v, O3, L3);
    cr_assert(memcmp(L1, L3, sizeof L1) != 0);
}

/* The naive F32 twin agrees with float64 to float32 accuracy on random flag mixes; the F16
 * and BF16 twins are off by their rounding, not more. */
Test(reference, naive_close_to_float64)
{
    enum { B = 2, SQ = 17, SK = 29, HQ = 4, HKV = 2, D = 24 };
    float slopes[HQ] = {0.5f, 0.25f, 0.125f, 0.0625f};
    float mask[B * SK];
    support_random(mask, B * SK, 22, 0, 1.5f, FCL_F32);
    static const struct { int causal, wl, wr; double softcap; int alibi, mask; double scale; } cfg[] = {
        {0, -1, -1, 0, 0, 0, 0}, {1, -1, -1, 0, 0, 0, 0}, {0, 4, 2, 0, 0, 0, 0},
        {0, -1, -1, 3.0, 0, 0, 1.0}, {0, -1, -1, 0, 1, 0, 0}, {0, -1, -1, 0, 0, 1, 0},
        {1, 6, -1, 5.0, 1, 1, 0.3},
    };
    float q[B * SQ * HQ * D], k[B * SK * HKV * D], v[B * SK * HKV * D];
    static double O[B * SQ * HQ * D], L[B * HQ * SQ];
    static float On[B * SQ * HQ * D], Ln[B * HQ * SQ];
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
        const fcl_dtype dts[3] = {FCL_F32, FCL_F16, FCL_BF16};
        const double lim[3] = {1e-5, 4e-3, 3e-2};
        for (int t = 0; t < 3; t++) {
            support_random(q, q_count(&p), 23 + c, -2, 2, dts[t]);
            support_random(k, kv_count(&p), 24 + c, -2, 2, dts[t]);
            support_random(v, kv_count(&p), 25 + c, -2, 2, dts[t]);
            ref_attention_forward(&p, q, k, v, O, L);
            ref_attention_forward_naive(&p, dts[t], q, k, v, On, Ln);
            double eo = support_max_err_f(On, O, q_count(&p));
            double el = support_max_err_f(Ln, L, lse_count(&p));
            cr_expect(eo < lim[t] && el < lim[t], "cfg %zu dtype %s: O err %g LSE err %g (limit %g)",
                      c, fcl_dtype_name(dts[t]), eo, el, lim[t]);
            /* Rounding to a narrower dtype must show up as some error. */
            if (t > 0)
                cr_expect(eo > 1e-6, "cfg %zu dtype %s: naive O err %g suspiciously 0", c,
                          fcl_dtype_name(dts[t]), eo);
        }
    }
}

Test(reference, max_err_rules)
{
    float a[4] = {1.0f, -INFINITY, 2.5f, INFINITY};
    double r[4] = {1.25, -INFINITY, 2.0, INFINITY};
    cr_assert(support_max_err_f(a, r, 4) == 0.5);
    a[3] = NAN;
    cr_assert(isinf(support_max_err_f(a, r, 4)));
    a[3] = INFINITY;
    r[1] = 0.0; /* -inf where a finite value was expected */
    cr_assert(isinf(support_max_err_f(a, r, 4)));
    r[1] = INFINITY; /* opposite infinities */
    cr_assert(isinf(support_max_err_f(a, r, 4)));
    cr_assert(support_within(2e-5, 1e-5, 2.0));
    cr_assert(!support_within(3.1e-5, 1e-5, 2.0));
}
