/* SPDX-License-Identifier: Apache-2.0 */
/* Float64 reference gradients of the attention forward, their storage-dtype "naive" twin, and
 * the float64 loss the finite-difference tests differentiate. Written for clarity: one query
 * row at a time, recomputing its probabilities, then spreading its gradient over the keys. */
#include "ref_attention_backward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The effective score scale (0 = 1/sqrt(D)). */
static double eff_scale(const ref_attn_problem *p)
{
    return p->scale != 0.0 ? p->scale : 1.0 / sqrt((double)p->D);
}

/* Offset of row (b, i, h) in Q, dQ, dO. */
static size_t q_off(const ref_attn_problem *p, int b, int i, int h)
{
    return (((size_t)b * p->Sq + i) * p->Hq + h) * p->D;
}

/* Offset of key j in K, V, dK, dV as read by query head h (GQA: KV head h / (Hq / Hkv)). */
static size_t kv_off(const ref_attn_problem *p, int b, int j, int h)
{
    int hk = h / (p->Hq / p->Hkv);
    return (((size_t)b * p->Sk + j) * p->Hkv + hk) * p->D;
}

/* Float64 probabilities of row (b, i, h) from float64 inputs: P[Sk] (0 for invisible keys) and
 * dt[Sk], the softcap factor 1 - tanh^2 (1 when off). Returns 0 when the row sees no key. */
static int probs_row(const ref_attn_problem *p, const double *Q, const double *K, int b, int i,
                     int h, double *P, double *dt)
{
    const double scale = eff_scale(p), slope = ref_alibi_slope(p, b, h);
    const double *q = Q + q_off(p, b, i, h);
    double m = -INFINITY;
    for (int j = 0; j < p->Sk; j++) {
        P[j] = -INFINITY; /* the score, for now */
        dt[j] = 1.0;
        if (!ref_key_visible(p, b, i, j))
            continue;
        const double *k = K + kv_off(p, b, j, h);
        double s = 0.0;
        for (int d = 0; d < p->D; d++)
            s += q[d] * k[d];
        s *= scale;
        if (p->softcap > 0.0) {
            double t = tanh(s / p->softcap);
            s = p->softcap * t;
            dt[j] = 1.0 - t * t;
        }
        P[j] = s - slope * fabs((double)(ref_query_pos(p, i) - j));
        if (P[j] > m)
            m = P[j];
    }
    if (m == -INFINITY)
        return 0;
    double sum = 0.0;
    for (int j = 0; j < p->Sk; j++) {
        P[j] = P[j] == -INFINITY ? 0.0 : exp(P[j] - m);
        sum += P[j];
    }
    for (int j = 0; j < p->Sk; j++)
        P[j] /= sum;
    return 1;
}

/* A float64 copy of x[n]. */
static double *to_double(const float *x, size_t n)
{
    double *y = malloc(sizeof(double) * (n ? n : 1));
    for (size_t k = 0; k < n; k++)
        y[k] = (double)x[k];
    return y;
}

void ref_attention_backward(const ref_attn_problem *p, const float *Q, const float *K,
                            const float *V, const float *dO, double *dQ, double *dK, double *dV)
{
    const int D = p->D, Sk = p->Sk;
    const size_t nq = (size_t)p->B * p->Sq * p->Hq * D, nkv = (size_t)p->B * Sk * p->Hkv * D;
    const double scale = eff_scale(p);
    double *Qd = to_double(Q, nq), *Kd = to_double(K, nkv);
    double *P = malloc(sizeof(double) * (size_t)(Sk > 0 ? Sk : 1));
    double *dt = malloc(sizeof(double) * (size_t)(Sk > 0 ? Sk : 1));
    double *dP = malloc(sizeof(double) * (size_t)(Sk > 0 ? Sk : 1));
    memset(dQ, 0, sizeof(double) * nq);
    memset(dK, 0, sizeof(double) * nkv);
    memset(dV, 0, sizeof(double) * nkv);

    for (int b = 0; b < p->B; b++)
        for (int h = 0; h < p->Hq; h++)
            for (int i = 0; i < p->Sq; i++) {
                if (!probs_row(p, Qd, Kd, b, i, h, P, dt))
                    continue; /* no visible key: no contribution */
                const size_t qo = q_off(p, b, i, h);
                /* dP_j = dO_i . V_j; delta_i = sum_j P_j dP_j */
                double delta = 0.0;
                for (int j = 0; j < Sk; j++) {
                    dP[j] = 0.0;
                    if (P[j] == 0.0)
                        continue; /* invisible (or underflowed): contributes exactly 0 */
                    const float *v = V + kv_off(p, b, j, h);
                    for (int d = 0; d < D; d++)
                        dP[j] += (double)dO[qo + d] * (double)v[d];
                    delta += P[j] * dP[j];
                }
                /* dS_j = P_j (dP_j - delta) through softcap; dQ_i += scale dS_j K_j,
                 * dK_j += scale dS_j Q_i, dV_j += P_j dO_i. */
                for (int j = 0; j < Sk; j++) {
                    if (P[j] == 0.0)
                        continue;
                    const size_t ko = kv_off(p, b, j, h);
                    double ds = scale * P[j] * (dP[j] - delta) * dt[j];
                    for (int d = 0; d < D; d++) {
                        dQ[qo + d] += ds * Kd[ko + d];
                        dK[ko + d] += ds * Qd[qo + d];
                        dV[ko + d] += P[j] * (double)dO[qo + d];
                    }
                }
            }
    free(Qd);
    free(Kd);
    free(P);
    free(dt);
    free(dP);
}

/* Naive float32 probabilities of row (b, i, h), as ref_attention_row_naive: scores rounded to
 * dtype after scale, softcap and ALiBi, P rounded to dtype (0 for invisible keys); dt[Sk] gets
 * the softcap factor 1 - tanh^2 (1 when off). Returns 0 when the row sees no key. */
static int probs_row_naive(const ref_attn_problem *p, fcl_dtype dtype, const float *Q,
                           const float *K, int b, int i, int h, float *P, float *dt)
{
    const float scale = (float)eff_scale(p), softcap = (float)p->softcap;
    const float slope = (float)ref_alibi_slope(p, b, h);
    const float *q = Q + q_off(p, b, i, h);
    float m = -INFINITY;
    for (int j = 0; j < p->Sk; j++) {
        P[j] = -INFINITY;
        dt[j] = 1.0f;
        if (!ref_key_visible(p, b, i, j))
            continue;
        const float *k = K + kv_off(p, b, j, h);
        float dot = 0.0f;
        for (int d = 0; d < p->D; d++)
            dot += q[d] * k[d];
        float s = dot * scale;
        if (softcap > 0.0f) {
            float t = tanhf(s / softcap);
            s = softcap * t;
            dt[j] = 1.0f - t * t;
        }
        s += -slope * fabsf((float)(ref_query_pos(p, i) - j));
        P[j] = ref_round_to_dtype(dtype, s);
        if (P[j] > m)
            m = P[j];
    }
    if (m == -INFINITY)
        return 0;
    float sum = 0.0f;
    for (int j = 0; j < p->Sk; j++)
        if (P[j] != -INFINITY)
            sum += expf(P[j] - m);
    for (int j = 0; j < p->Sk; j++)
        P[j] = P[j] == -INFINITY ? 0.0f : ref_round_to_dtype(dtype, expf(P[j] - m) / sum);
    return 1;
}

void ref_attention_backward_naive(const ref_attn_problem *p, fcl_dtype dtype, const float *Q,
                                  const float *K, const float *V, const float *dO, float *dQ,
                                  float *dK, float *dV)
{
    const int D = p->D, Sk = p->Sk;
    const size_t nq = (size_t)p->B * p->Sq * p->Hq * D, nkv = (size_t)p->B * Sk * p->Hkv * D;
    const float scale = (float)eff_scale(p);
    float *P = malloc(sizeof(float) * (size_t)(Sk > 0 ? Sk : 1));
    float *dt = malloc(sizeof(float) * (size_t)(Sk > 0 ? Sk : 1));
    float *dP = malloc(sizeof(float) * (size_t)(Sk > 0 ? Sk : 1));
    memset(dQ, 0, sizeof(float) * nq);
    memset(dK, 0, sizeof(float) * nkv);
    memset(dV, 0, sizeof(float) * nkv);

    /* Accumulate unscaled sums in float32; scale and round once at the end. */
    for (int b = 0; b < p->B; b++)
        for (int h = 0; h < p->Hq; h++)
            for (int i = 0; i < p->Sq; i++) {
                if (!probs_row_naive(p, dtype, Q, K, b, i, h, P, dt))
                    continue;
                const size_t qo = q_off(p, b, i, h);
                float delta = 0.0f;
                for (int j = 0; j < Sk; j++) {
                    float acc = 0.0f;
                    if (P[j] != 0.0f) {
                        const float *v = V + kv_off(p, b, j, h);
                        for (int d = 0; d < D; d++)
                            acc += dO[qo + d] * v[d];
                    }
                    dP[j] = ref_round_to_dtype(dtype, acc);
                    delta += P[j] * dP[j];
                }
                for (int j = 0; j < Sk; j++) {
                    if (P[j] == 0.0f)
                        continue;
                    const size_t ko = kv_off(p, b, j, h);
                    float ds = ref_round_to_dtype(dtype, P[j] * (dP[j] - delta) * dt[j]);
                    for (int d = 0; d < D; d++) {
                        dQ[qo + d] += ds * K[ko + d];
                        dK[ko + d] += ds * Q[qo + d];
                        dV[ko + d] += P[j] * dO[qo + d];
                    }
                }
            }
    for (size_t k = 0; k < nq; k++)
        dQ[k] = ref_round_to_dtype(dtype, scale * dQ[k]);
    for (size_t k = 0; k < nkv; k++) {
        dK[k] = ref_round_to_dtype(dtype, scale * dK[k]);
        dV[k] = ref_round_to_dtype(dtype, dV[k]);
    }
    free(P);
    free(dt);
    free(dP);
}

double ref_attention_loss(const ref_attn_problem *p, const double *Qd, const double *Kd,
                          const double *Vd, const float *dO)
{
    const int Sk = p->Sk;
    double *P = malloc(sizeof(double) * (size_t)(Sk > 0 ? Sk : 1));
    double *dt = malloc(sizeof(double) * (size_t)(Sk > 0 ? Sk : 1));
    double L = 0.0;
    for (int b = 0; b < p->B; b++)
        for (int h = 0; h < p->Hq; h++)
            for (int i = 0; i < p->Sq; i++) {
                if (!probs_row(p, Qd, Kd, b, i, h, P, dt))
                    continue; /* O = 0 */
                const size_t qo = q_off(p, b, i, h);
                for (int d = 0; d < p->D; d++) {
                    double o = 0.0; /* O_id = sum_j P_j V_jd */
                    for (int j = 0; j < Sk; j++)
                        o += P[j] * Vd[kv_off(p, b, j, h) + d];
                    L += (double)dO[qo + d] * o;
                }
            }
    free(P);
    free(dt);
    return L;
}
