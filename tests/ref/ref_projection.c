/* SPDX-License-Identifier: Apache-2.0 */
/* Float64 reference of the projection ops and its naive storage-dtype twin (ref_projection.h). */
#include "ref_projection.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void *xmalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1); /* zeroed: no reads of unset memory, even for empty shapes */
    if (!p)
        abort(); /* the reference has no error path; tests run far below memory limits */
    return p;
}

/* The dequantised weight w[n, k] * scale[n] in float64. */
static double weight_at(const ref_weight *w, int K, int n, int k)
{
    double s = w->scale ? (double)w->scale[n] : 1.0;
    return (double)w->w[(size_t)n * K + k] * s;
}

void ref_linear_d(int M, int N, int K, const double *x, const ref_weight *w, double *y)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++)
                acc += x[(size_t)m * K + k] * weight_at(w, K, n, k);
            y[(size_t)m * N + n] = acc + (w->bias ? (double)w->bias[n] : 0.0);
        }
}

void ref_linear(int M, int N, int K, const float *x, const ref_weight *w, double *y)
{
    double *xd = xmalloc(sizeof(double) * (size_t)M * K);
    for (size_t i = 0; i < (size_t)M * K; i++)
        xd[i] = (double)x[i];
    ref_linear_d(M, N, K, xd, w, y);
    free(xd);
}

void ref_linear_naive(fcl_dtype dtype, int M, int N, int K, const float *x, const ref_weight *w,
                      float *y)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const float s = w->scale ? w->scale[n] : 1.0f;
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc += x[(size_t)m * K + k] * (w->w[(size_t)n * K + k] * s);
            if (w->bias)
                acc += w->bias[n];
            y[(size_t)m * N + n] = ref_round_to_dtype(dtype, acc);
        }
}

ref_attn_problem ref_qkvo_attn_problem(const ref_qkvo_problem *p, int self)
{
    ref_attn_problem a = p->attn;
    a.B = 1;
    a.Sq = p->Lq;
    a.Sk = self ? p->Lq : p->Lk;
    a.Hq = a.Hkv = p->H;
    a.D = p->D / p->H;
    a.mask_per_batch = 0;
    a.alibi_per_batch = 0;
    return a;
}

static float *to_float(const double *x, size_t n)
{
    float *f = xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)x[i];
    return f;
}

/* Attention over float Q, K, V then the output projection, all in float64 after the inputs. */
static void attend_and_project(const ref_attn_problem *a, int D, const float *Q, const float *K,
                               const float *V, const ref_weight *wo, double *O)
{
    double *A = xmalloc(sizeof(double) * (size_t)a->Sq * D);
    ref_attention_forward(a, Q, K, V, A, NULL);
    ref_linear_d(a->Sq, D, D, A, wo, O);
    free(A);
}

void ref_qkvo_forward(const ref_qkvo_problem *p, const float *X, const float *Ctx,
                      const ref_weight *wq, const ref_weight *wk, const ref_weight *wv,
                      const ref_weight *wo, double *O)
{
    const int self = Ctx == NULL;
    const ref_attn_problem a = ref_qkvo_attn_problem(p, self);
    const float *C = self ? X : Ctx;
    const int Dc = self ? p->D : p->D_ctx, Lk = a.Sk, D = p->D;
    double *Qd = xmalloc(sizeof(double) * (size_t)p->Lq * D);
    double *Kd = xmalloc(sizeof(double) * (size_t)Lk * D), *Vd = xmalloc(sizeof(double) * (size_t)Lk * D);
    ref_linear(p->Lq, D, D, X, wq, Qd);
    ref_linear(Lk, D, Dc, C, wk, Kd);
    ref_linear(Lk, D, Dc, C, wv, Vd);
    float *Q = to_float(Qd, (size_t)p->Lq * D), *K = to_float(Kd, (size_t)Lk * D),
          *V = to_float(Vd, (size_t)Lk * D);
    attend_and_project(&a, D, Q, K, V, wo, O);
    free(Qd), free(Kd), free(Vd), free(Q), free(K), free(V);
}

void ref_q_with_kv_forward(const ref_qkvo_problem *p, const float *X, const float *K,
                           const float *V, const ref_weight *wq, const ref_weight *wo, double *O)
{
    const ref_attn_problem a = ref_qkvo_attn_problem(p, 0);
    const int D = p->D;
    double *Qd = xmalloc(sizeof(double) * (size_t)p->Lq * D);
    ref_linear(p->Lq, D, D, X, wq, Qd);
    float *Q = to_float(Qd, (size_t)p->Lq * D);
    attend_and_project(&a, D, Q, K, V, wo, O);
    free(Qd), free(Q);
}

static void naive_attend_and_project(const ref_attn_problem *a, fcl_dtype dtype, int D,
                                     const float *Q, const float *K, const float *V,
                                     const ref_weight *wo, float *O)
{
    float *A = xmalloc(sizeof(float) * (size_t)a->Sq * D);
    ref_attention_forward_naive(a, dtype, Q, K, V, A, NULL); /* A rounded to dtype */
    ref_linear_naive(dtype, a->Sq, D, D, A, wo, O);
    free(A);
}

void ref_qkvo_forward_naive(const ref_qkvo_problem *p, fcl_dtype dtype, const float *X,
                            const float *Ctx, const ref_weight *wq, const ref_weight *wk,
                            const ref_weight *wv, const ref_weight *wo, float *O, float *Kn,
                            float *Vn)
{
    const int self = Ctx == NULL;
    const ref_attn_problem a = ref_qkvo_attn_problem(p, self);
    const float *C = self ? X : Ctx;
    const int Dc = self ? p->D : p->D_ctx, Lk = a.Sk, D = p->D;
    float *Q = xmalloc(sizeof(float) * (size_t)p->Lq * D);
    float *K = xmalloc(sizeof(float) * (size_t)Lk * D), *V = xmalloc(sizeof(float) * (size_t)Lk * D);
    ref_linear_naive(dtype, p->Lq, D, D, X, wq, Q);
    ref_linear_naive(dtype, Lk, D, Dc, C, wk, K);
    ref_linear_naive(dtype, Lk, D, Dc, C, wv, V);
    naive_attend_and_project(&a, dtype, D, Q, K, V, wo, O);
    if (Kn)
        memcpy(Kn, K, sizeof(float) * (size_t)Lk * D);
    if (Vn)
        memcpy(Vn, V, sizeof(float) * (size_t)Lk * D);
    free(Q), free(K), free(V);
}

void ref_q_with_kv_forward_naive(const ref_qkvo_problem *p, fcl_dtype dtype, const float *X,
                                 const float *K, const float *V, const ref_weight *wq,
                                 const ref_weight *wo, float *O)
{
    const ref_attn_problem a = ref_qkvo_attn_problem(p, 0);
    const int D = p->D;
    float *Q = xmalloc(sizeof(float) * (size_t)p->Lq * D);
    ref_linear_naive(dtype, p->Lq, D, D, X, wq, Q);
    naive_attend_and_project(&a, dtype, D, Q, K, V, wo, O);
    free(Q);
}
