/* SPDX-License-Identifier: Apache-2.0 */
/* Float64 reference gradients of the projection block, their naive storage-dtype twin and the
 * float64 loss for finite differences (ref_projection_backward.h). Written for clarity. */
#include "ref_projection_backward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention_backward.h"

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort(); /* the reference has no error path; tests run far below memory limits */
    return p;
}

/* The dequantised weight w[n, k] * scale[n] in float64 and in float32 (as the naive twin and
 * ref_linear_naive form it). */
static double wd(const ref_weight *w, int K, int n, int k)
{
    return (double)w->w[(size_t)n * K + k] * (w->scale ? (double)w->scale[n] : 1.0);
}

static float wf(const ref_weight *w, int K, int n, int k)
{
    return w->w[(size_t)n * K + k] * (w->scale ? w->scale[n] : 1.0f);
}

static float *to_float(const double *x, size_t n)
{
    float *f = xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)x[i];
    return f;
}

/* y[M, K] = g[M, N] W[N, K] (the input gradient of a projection), float64; accumulates into y
 * when acc. */
static void back_input_d(int M, int N, int K, const double *g, const ref_weight *w, double *y, int acc)
{
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            double s = 0.0;
            for (int n = 0; n < N; n++)
                s += g[(size_t)m * N + n] * wd(w, K, n, k);
            y[(size_t)m * K + k] = (acc ? y[(size_t)m * K + k] : 0.0) + s;
        }
}

/* dw[N, K] = g[M, N]^T x[M, K]; db[N] = column sums of g (when db). Float64. */
static void back_weight_d(int M, int N, int K, const double *g, const float *x, const ref_weight_grad *gr)
{
    if (gr->dw)
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                double s = 0.0;
                for (int m = 0; m < M; m++)
                    s += g[(size_t)m * N + n] * (double)x[(size_t)m * K + k];
                gr->dw[(size_t)n * K + k] = s;
            }
    if (gr->db)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int m = 0; m < M; m++)
                s += g[(size_t)m * N + n];
            gr->db[n] = s;
        }
}

/* The same with double x (the attention output A). */
static void back_weight_dd(int M, int N, int K, const double *g, const double *x, const ref_weight_grad *gr)
{
    if (gr->dw)
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                double s = 0.0;
                for (int m = 0; m < M; m++)
                    s += g[(size_t)m * N + n] * x[(size_t)m * K + k];
                gr->dw[(size_t)n * K + k] = s;
            }
    if (gr->db)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int m = 0; m < M; m++)
                s += g[(size_t)m * N + n];
            gr->db[n] = s;
        }
}

void ref_qkvo_backward(const ref_qkvo_problem *p, const float *X, const float *Ctx,
                       const ref_weight *wq, const ref_weight *wk, const ref_weight *wv,
                       const ref_weight *wo, const float *dO, double *dX, double *dCtx,
                       const ref_weight_grad *gq, const ref_weight_grad *gk,
                       const ref_weight_grad *gv, const ref_weight_grad *go)
{
    const int self = Ctx == NULL;
    const ref_attn_problem a = ref_qkvo_attn_problem(p, self);
    const float *C = self ? X : Ctx;
    const int Lq = p->Lq, Lk = a.Sk, D = p->D, Dc = self ? p->D : p->D_ctx;
    const size_t nq = (size_t)Lq * D, nk = (size_t)Lk * D;

    /* Forward: Q, K, V in float64, rounded to float32 for the attention core; A in float64. */
    double *Qd = xmalloc(sizeof(double) * nq), *Kd = xmalloc(sizeof(double) * nk);
    double *Vd = xmalloc(sizeof(double) * nk), *A = xmalloc(sizeof(double) * nq);
    ref_linear(Lq, D, D, X, wq, Qd);
    ref_linear(Lk, D, Dc, C, wk, Kd);
    ref_linear(Lk, D, Dc, C, wv, Vd);
    float *Q = to_float(Qd, nq), *K = to_float(Kd, nk), *V = to_float(Vd, nk);
    ref_attention_forward(&a, Q, K, V, A, NULL);

    /* Output projection. */
    double *dOd = xmalloc(sizeof(double) * nq), *dA = xmalloc(sizeof(double) * nq);
    for (size_t i = 0; i < nq; i++)
        dOd[i] = (double)dO[i];
    back_input_d(Lq, D, D, dOd, wo, dA, 0);
    back_weight_dd(Lq, D, D, dOd, A, go);

    /* Attention core. */
    float *dAf = to_float(dA, nq);
    double *dQ = xmalloc(sizeof(double) * nq), *dK = xmalloc(sizeof(double) * nk);
    double *dV = xmalloc(sizeof(double) * nk);
    ref_attention_backward(&a, Q, K, V, dAf, dQ, dK, dV);

    /* Input projections. */
    back_weight_d(Lq, D, D, dQ, X, gq);
    back_weight_d(Lk, D, Dc, dK, C, gk);
    back_weight_d(Lk, D, Dc, dV, C, gv);
    back_input_d(Lq, D, D, dQ, wq, dX, 0);
    double *dC = self ? dX : dCtx;
    if (dC) {
        back_input_d(Lk, D, Dc, dK, wk, dC, self); /* self: dX already holds dQ Wq */
        back_input_d(Lk, D, Dc, dV, wv, dC, 1);
    }
    free(Qd), free(Kd), free(Vd), free(A), free(Q), free(K), free(V);
    free(dOd), free(dA), free(dAf), free(dQ), free(dK), free(dV);
}

/* ---------------------------------------------------------------- naive twin */

/* y[M, K] = round(g[M, N] W[N, K]) in float32. */
static void back_input_f(fcl_dtype dt, int M, int N, int K, const float *g, const ref_weight *w, float *y)
{
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++)
                s += g[(size_t)m * N + n] * wf(w, K, n, k);
            y[(size_t)m * K + k] = ref_round_to_dtype(dt, s);
        }
}

/* dw = round(g^T x), db = round(colsum g) in float32. */
static void back_weight_f(fcl_dtype dt, int M, int N, int K, const float *g, const float *x,
                          const ref_weight_grad_f *gr)
{
    if (gr->dw)
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                float s = 0.0f;
                for (int m = 0; m < M; m++)
                    s += g[(size_t)m * N + n] * x[(size_t)m * K + k];
                gr->dw[(size_t)n * K + k] = ref_round_to_dtype(dt, s);
            }
    if (gr->db)
        for (int n = 0; n < N; n++) {
            float s = 0.0f;
            for (int m = 0; m < M; m++)
                s += g[(size_t)m * N + n];
            gr->db[n] = ref_round_to_dtype(dt, s);
        }
}

void ref_qkvo_backward_naive(const ref_qkvo_problem *p, fcl_dtype dtype, fcl_dtype dw_dtype,
                             const float *X, const float *Ctx, const ref_weight *wq,
                             const ref_weight *wk, const ref_weight *wv, const ref_weight *wo,
                             const float *dO, float *dX, float *dCtx, const ref_weight_grad_f *gq,
                             const ref_weight_grad_f *gk, const ref_weight_grad_f *gv,
                             const ref_weight_grad_f *go)
{
    const int self = Ctx == NULL;
    const ref_attn_problem a = ref_qkvo_attn_problem(p, self);
    const float *C = self ? X : Ctx;
    const int Lq = p->Lq, Lk = a.Sk, D = p->D, Dc = self ? p->D : p->D_ctx;
    const size_t nq = (size_t)Lq * D, nk = (size_t)Lk * D, nc = (size_t)Lk * Dc;

    float *Q = xmalloc(sizeof(float) * nq), *K = xmalloc(sizeof(float) * nk);
    float *V = xmalloc(sizeof(float) * nk), *A = xmalloc(sizeof(float) * nq);
    ref_linear_naive(dtype, Lq, D, D, X, wq, Q);
    ref_linear_naive(dtype, Lk, D, Dc, C, wk, K);
    ref_linear_naive(dtype, Lk, D, Dc, C, wv, V);
    ref_attention_forward_naive(&a, dtype, Q, K, V, A, NULL);

    float *dA = xmalloc(sizeof(float) * nq);
    back_input_f(dtype, Lq, D, D, dO, wo, dA);
    back_weight_f(dw_dtype, Lq, D, D, dO, A, go);

    float *dQ = xmalloc(sizeof(float) * nq), *dK = xmalloc(sizeof(float) * nk);
    float *dV = xmalloc(sizeof(float) * nk);
    ref_attention_backward_naive(&a, dtype, Q, K, V, dA, dQ, dK, dV);

    back_weight_f(dw_dtype, Lq, D, D, dQ, X, gq);
    back_weight_f(dw_dtype, Lk, D, Dc, dK, C, gk);
    back_weight_f(dw_dtype, Lk, D, Dc, dV, C, gv);

    /* Input gradients: each product rounded, then the sums rounded (as autograd would). */
    float *pq = xmalloc(sizeof(float) * nq), *pk = xmalloc(sizeof(float) * nc);
    float *pv = xmalloc(sizeof(float) * nc);
    back_input_f(dtype, Lq, D, D, dQ, wq, pq);
    back_input_f(dtype, Lk, D, Dc, dK, wk, pk);
    back_input_f(dtype, Lk, D, Dc, dV, wv, pv);
    if (self) {
        for (size_t i = 0; i < nq; i++)
            dX[i] = ref_round_to_dtype(dtype, ref_round_to_dtype(dtype, pq[i] + pk[i]) + pv[i]);
    } else {
        memcpy(dX, pq, sizeof(float) * nq);
        if (dCtx)
            for (size_t i = 0; i < nc; i++)
                dCtx[i] = ref_round_to_dtype(dtype, pk[i] + pv[i]);
    }
    free(Q), free(K), free(V), free(A), free(dA), free(dQ), free(dK), free(dV);
    free(pq), free(pk), free(pv);
}

/* ---------------------------------------------------------------- float64 loss */

/* y[M, N] = x[M, K] w[N, K]^T + b[N] (b may be NULL), float64. */
static void linear_dd(int M, int N, int K, const double *x, const double *w, const double *b, double *y)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int k = 0; k < K; k++)
                s += x[(size_t)m * K + k] * w[(size_t)n * K + k];
            y[(size_t)m * N + n] = s + (b ? b[n] : 0.0);
        }
}

/* A[Sq, H, Dh] = attention(Q, K, V) entirely in float64 (B = 1, Hq = Hkv); rows that see no
 * key get 0. Same semantics as ref_attention_row. */
static void attention_dd(const ref_attn_problem *a, const double *Q, const double *K, const double *V,
                         double *A)
{
    const int H = a->Hq, Dh = a->D, Sk = a->Sk;
    const double scale = a->scale != 0.0 ? a->scale : 1.0 / sqrt((double)Dh);
    double *s = xmalloc(sizeof(double) * (size_t)(Sk > 0 ? Sk : 1));
    for (int i = 0; i < a->Sq; i++)
        for (int h = 0; h < H; h++) {
            const double *q = Q + ((size_t)i * H + h) * Dh;
            double *o = A + ((size_t)i * H + h) * Dh;
            const double slope = ref_alibi_slope(a, 0, h);
            double m = -INFINITY;
            for (int j = 0; j < Sk; j++) {
                s[j] = -INFINITY;
                if (!ref_key_visible(a, 0, i, j))
                    continue;
                const double *k = K + ((size_t)j * H + h) * Dh;
                double dot = 0.0;
                for (int d = 0; d < Dh; d++)
                    dot += q[d] * k[d];
                dot *= scale;
                if (a->softcap > 0.0)
                    dot = a->softcap * tanh(dot / a->softcap);
                s[j] = dot - slope * fabs((double)(ref_query_pos(a, i) - j));
                if (s[j] > m)
                    m = s[j];
            }
            for (int d = 0; d < Dh; d++)
                o[d] = 0.0;
            if (m == -INFINITY)
                continue;
            double sum = 0.0;
            for (int j = 0; j < Sk; j++) {
                s[j] = s[j] == -INFINITY ? 0.0 : exp(s[j] - m);
                sum += s[j];
            }
            for (int j = 0; j < Sk; j++) {
                if (s[j] == 0.0)
                    continue;
                const double *v = V + ((size_t)j * H + h) * Dh;
                for (int d = 0; d < Dh; d++)
                    o[d] += s[j] / sum * v[d];
            }
        }
    free(s);
}

double ref_qkvo_loss_d(const ref_qkvo_problem *p, const double *X, const double *Ctx,
                       const double *const w[4], const double *const b[4], const float *dO)
{
    const int self = Ctx == NULL;
    const ref_attn_problem a = ref_qkvo_attn_problem(p, self);
    const double *C = self ? X : Ctx;
    const int Lq = p->Lq, Lk = a.Sk, D = p->D, Dc = self ? p->D : p->D_ctx;
    const size_t nq = (size_t)Lq * D, nk = (size_t)Lk * D;
    double *Q = xmalloc(sizeof(double) * nq), *K = xmalloc(sizeof(double) * nk);
    double *V = xmalloc(sizeof(double) * nk), *A = xmalloc(sizeof(double) * nq);
    double *O = xmalloc(sizeof(double) * nq);
    linear_dd(Lq, D, D, X, w[0], b[0], Q);
    linear_dd(Lk, D, Dc, C, w[1], b[1], K);
    linear_dd(Lk, D, Dc, C, w[2], b[2], V);
    attention_dd(&a, Q, K, V, A);
    linear_dd(Lq, D, D, A, w[3], b[3], O);
    double L = 0.0;
    for (size_t i = 0; i < nq; i++)
        L += (double)dO[i] * O[i];
    free(Q), free(K), free(V), free(A), free(O);
    return L;
}
