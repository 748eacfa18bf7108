/* SPDX-License-Identifier: Apache-2.0 */
/* Float64 reference of the attention forward and its storage-dtype "naive" twin.
 * Written for clarity: one row at a time, one key at a time. */
#include "ref_attention.h"

#include <math.h>
#include <stdlib.h>

float ref_round_to_dtype(fcl_dtype dtype, float x)
{
    switch (dtype) {
    case FCL_F16: return fcl_f16_to_f32(fcl_f32_to_f16(x));
    case FCL_BF16: return fcl_bf16_to_f32(fcl_f32_to_bf16(x));
    default: return x;
    }
}

long ref_query_pos(const ref_attn_problem *p, int i)
{
    return (long)i + p->Sk - p->Sq;
}

int ref_key_visible(const ref_attn_problem *p, int b, int i, int j)
{
    if (j < 0 || j >= p->Sk)
        return 0;
    long pos = ref_query_pos(p, i);
    int wr = p->causal ? 0 : p->window_right; /* causal forces window_right = 0 */
    if (p->window_left >= 0 && j < pos - p->window_left)
        return 0;
    if (wr >= 0 && j > pos + wr)
        return 0;
    if (p->key_mask) {
        float m = p->mask_per_batch ? p->key_mask[(size_t)b * p->Sk + j] : p->key_mask[j];
        if (!(m > 0.5f))
            return 0;
    }
    return 1;
}

double ref_alibi_slope(const ref_attn_problem *p, int b, int h)
{
    if (!p->alibi)
        return 0.0;
    return p->alibi_per_batch ? p->alibi[(size_t)b * p->Hq + h] : p->alibi[h];
}

static const float *q_row(const ref_attn_problem *p, const float *Q, int b, int i, int h)
{
    return Q + (((size_t)b * p->Sq + i) * p->Hq + h) * p->D;
}

static const float *kv_row(const ref_attn_problem *p, const float *KV, int b, int j, int h)
{
    int hk = h / (p->Hq / p->Hkv); /* GQA: query head h reads KV head h / (Hq / Hkv) */
    return KV + (((size_t)b * p->Sk + j) * p->Hkv + hk) * p->D;
}

void ref_attention_row(const ref_attn_problem *p, const float *Q, const float *K, const float *V,
                       int b, int i, int h, double *o, double *lse)
{
    const int D = p->D, Sk = p->Sk;
    const double scale = p->scale != 0.0 ? p->scale : 1.0 / sqrt((double)D);
    const double slope = ref_alibi_slope(p, b, h);
    const long pos = ref_query_pos(p, i);
    const float *q = q_row(p, Q, b, i, h);
    double *s = malloc(sizeof(double) * (size_t)(Sk > 0 ? Sk : 1));
    char *vis = malloc((size_t)(Sk > 0 ? Sk : 1));

    /* Scores: scale, then softcap, then ALiBi, then masking. */
    double m = -INFINITY;
    for (int j = 0; j < Sk; j++) {
        vis[j] = (char)ref_key_visible(p, b, i, j);
        if (!vis[j])
            continue;
        const float *k = kv_row(p, K, b, j, h);
        double dot = 0.0;
        for (int d = 0; d < D; d++)
            dot += (double)q[d] * (double)k[d];
        double sc = scale * dot;
        if (p->softcap > 0.0)
            sc = p->softcap * tanh(sc / p->softcap);
        sc += -slope * fabs((double)(pos - j));
        s[j] = sc;
        if (sc > m)
            m = sc;
    }

    for (int d = 0; d < D; d++)
        o[d] = 0.0;
    if (m == -INFINITY) { /* no visible key */
        if (lse)
            *lse = -INFINITY;
        free(s);
        free(vis);
        return;
    }

    /* Softmax (max-subtracted) and the weighted sum of V. */
    double sum = 0.0;
    for (int j = 0; j < Sk; j++)
        if (vis[j])
            sum += exp(s[j] - m);
    for (int j = 0; j < Sk; j++) {
        if (!vis[j])
            continue;
        double w = exp(s[j] - m) / sum;
        const float *v = kv_row(p, V, b, j, h);
        for (int d = 0; d < D; d++)
            o[d] += w * (double)v[d];
    }
    if (lse)
        *lse = m + log(sum);
    free(s);
    free(vis);
}

void ref_attention_row_naive(const ref_attn_problem *p, fcl_dtype dtype, const float *Q,
                             const float *K, const float *V, int b, int i, int h, float *o,
                             float *lse)
{
    const int D = p->D, Sk = p->Sk;
    const float scale = p->scale != 0.0 ? (float)p->scale : (float)(1.0 / sqrt((double)D));
    const float softcap = (float)p->softcap;
    const float slope = (float)ref_alibi_slope(p, b, h);
    const long pos = ref_query_pos(p, i);
    const float *q = q_row(p, Q, b, i, h);
    float *s = malloc(sizeof(float) * (size_t)(Sk > 0 ? Sk : 1));
    char *vis = malloc((size_t)(Sk > 0 ? Sk : 1));

    /* Scores in float32, rounded to dtype after scale, softcap and ALiBi. */
    float m = -INFINITY;
    for (int j = 0; j < Sk; j++) {
        vis[j] = (char)ref_key_visible(p, b, i, j);
        if (!vis[j])
            continue;
        const float *k = kv_row(p, K, b, j, h);
        float dot = 0.0f;
        for (int d = 0; d < D; d++)
            dot += q[d] * k[d];
        float sc = dot * scale;
        if (softcap > 0.0f)
            sc = softcap * tanhf(sc / softcap);
        sc += -slope * fabsf((float)(pos - j));
        sc = ref_round_to_dtype(dtype, sc);
        s[j] = sc;
        if (sc > m)
            m = sc;
    }

    for (int d = 0; d < D; d++)
        o[d] = 0.0f;
    if (m == -INFINITY) {
        if (lse)
            *lse = -INFINITY;
        free(s);
        free(vis);
        return;
    }

    /* Softmax in float32; probabilities rounded to dtype; output accumulated in float32. */
    float sum = 0.0f;
    for (int j = 0; j < Sk; j++)
        if (vis[j])
            sum += expf(s[j] - m);
    for (int j = 0; j < Sk; j++) {
        if (!vis[j])
            continue;
        float w = ref_round_to_dtype(dtype, expf(s[j] - m) / sum);
        const float *v = kv_row(p, V, b, j, h);
        for (int d = 0; d < D; d++)
            o[d] += w * v[d];
    }
    for (int d = 0; d < D; d++)
        o[d] = ref_round_to_dtype(dtype, o[d]);
    if (lse)
        *lse = m + logf(sum);
    free(s);
    free(vis);
}

void ref_attention_forward(const ref_attn_problem *p, const float *Q, const float *K,
                           const float *V, double *O, double *LSE)
{
    for (int b = 0; b < p->B; b++)
        for (int i = 0; i < p->Sq; i++)
            for (int h = 0; h < p->Hq; h++) {
                double *o = O + (((size_t)b * p->Sq + i) * p->Hq + h) * p->D;
                double *l = LSE ? LSE + ((size_t)b * p->Hq + h) * p->Sq + i : NULL;
                ref_attention_row(p, Q, K, V, b, i, h, o, l);
            }
}

void ref_attention_forward_naive(const ref_attn_problem *p, fcl_dtype dtype, const float *Q,
                                 const float *K, const float *V, float *O, float *LSE)
{
    for (int b = 0; b < p->B; b++)
        for (int i = 0; i < p->Sq; i++)
            for (int h = 0; h < p->Hq; h++) {
                float *o = O + (((size_t)b * p->Sq + i) * p->Hq + h) * p->D;
                float *l = LSE ? LSE + ((size_t)b * p->Hq + h) * p->Sq + i : NULL;
                ref_attention_row_naive(p, dtype, Q, K, V, b, i, h, o, l);
            }
}
