/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The projection GEMMs (src/gemm/linear.h, internal) against a float64 GEMM, on the
 * FLASHCL_DEVICE device, through whichever kernel runs them there (fcl_projection_path: NVIDIA
 * tensor cores, CLBlast, or flashcl's portable kernel; FLASHCL_GEMM=own forces the last), on each
 * layout the projection ops use:
 *   forward      Y = X W^T (* scale[n]) (+ bias)   fcl_linear_enqueue     A k-contiguous, B = W^T
 *   grad input   Y (+)= G W (row n of W * scale[n]) fcl_linear_grad_input  A k-contiguous, B = W
 *   grad weight  dW += G^T X                        fcl_linear_grad_weight A = G^T, B = X
 * with odd and aligned sizes, rows padded (aligned or not), offset views, partial tiles at every
 * edge, F16 and BF16 activations with weights of their own dtype and I8 (the tensor cores' pairs),
 * F32 activations with I8 and BF16 weights (F32 weights would take CLBlast where it is built in),
 * bias, accumulate, and dW in F32 or the activations' dtype. CPU run time with cold caches on a
 * 2-core machine under load: 18-27 s per device (PoCL, Intel's runtime, Rusticl), most of it
 * compiling the 30 variants.
 *
 * Rule (DESIGN.md): max |kernel - float64| <= 2 * max |naive - float64| + 1e-5, where "naive"
 * computes in float32 (I8 weights dequantised as w[n, k] * scale[n] in float32, products summed in
 * order, then the bias, then the old C when accumulating) and rounds to C's dtype. Outputs are
 * NaN-poisoned first unless accumulated into (then random); buffer elements outside the output
 * view must keep their values.
 *
 * Criterion forks one process per Test and each compiles the programs it uses: one Test per
 * activation dtype iterates the case table.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm/linear.h"
#include "support.h"

enum { FWD, GRAD_IN, GRAD_W };
static const char *const op_names[] = {"forward Y = X W^T", "grad input Y (+)= G W", "grad weight dW += G^T X"};

typedef struct gcase {
    int op;
    int M, N, K; /* FWD: X [M, K], W [N, K], Y [M, N]; GRAD_IN: G [M, N], W [N, K], Y [M, K];
                  * GRAD_W: G [M, N], X [M, K], dW [N, K] */
    int pad[3];  /* extra elements per row of the first input, the second input and the output */
    int off;     /* elements before every view's first one */
    int bias;    /* FWD: with a bias */
    int flag;    /* GRAD_IN: accumulate into Y; GRAD_W: dW in F32 (else the activations' dtype) */
} gcase;

/* Rows are 16-byte aligned (the tensor-core kernel's cp.async path) where offset and padded row
 * length are multiples of 8 elements; 45, 77, 131, 203 and offset 1 are not. */
static const gcase cases[] = {
    {FWD, 131, 77, 45, {0, 0, 0}, 0, 1, 0},      /* odd, every row misaligned */
    {FWD, 260, 136, 136, {0, 0, 0}, 0, 0, 0},    /* aligned, 3 x 2 tiles of 128 with partial edges, 5 K slices */
    {FWD, 150, 140, 203, {5, 5, 3}, 0, 1, 0},    /* aligned padded rows, K tail inside a 16-byte chunk */
    {FWD, 1, 3, 5, {0, 0, 0}, 0, 1, 0},          /* tiny */
    {FWD, 70, 33, 64, {0, 0, 0}, 1, 0, 0},       /* offset 1: misaligned */
    {FWD, 300, 264, 272, {0, 0, 0}, 0, 1, 0},    /* I8 rows 16-byte aligned too, 3 x 3 tiles of 128 with partial
                                                  * edges, a K tail of 16: the wgmma GEMM with I8 weights */
    {FWD, 70, 40, 204, {4, 3, 0}, 0, 1, 0},      /* aligned X, I8 rows of 207 bytes: converted (16-bit GEMMs) by
                                                  * single bytes, with a tail of 4 */
    {GRAD_IN, 131, 45, 77, {0, 0, 0}, 0, 0, 0},  /* odd */
    {GRAD_IN, 260, 136, 144, {0, 0, 0}, 0, 0, 1}, /* aligned, accumulating */
    {GRAD_IN, 150, 203, 140, {5, 4, 4}, 0, 0, 1}, /* aligned padded rows, reduction tail inside a chunk */
    {GRAD_IN, 2, 9, 3, {0, 0, 0}, 1, 0, 0},      /* tiny, offset 1 */
    {GRAD_W, 45, 131, 77, {0, 0, 0}, 0, 0, 0},   /* odd, dW in the activations' dtype */
    {GRAD_W, 136, 264, 136, {0, 0, 0}, 0, 0, 1}, /* aligned, F32 dW */
    {GRAD_W, 37, 140, 203, {4, 5, 1}, 0, 0, 1},  /* aligned padded rows, reduction of 37, column tail in a chunk */
    {GRAD_W, 1, 5, 3, {0, 0, 0}, 1, 0, 0},       /* tiny, offset 1 */
};

/* One operand or output: rows x cols elements of a buffer whose rows are cols + pad apart, from
 * element `off` on. */
typedef struct mat {
    int rows, cols;
    int64_t stride, off, base_n;
    float *base;  /* every element of the buffer, as written */
    float *host;  /* the view's elements, row-major */
    fcl_tensor tb, view;
} mat;

/* Makes m in `dt`: every buffer element NaN (poison), random in [lo, hi) rounded to dt, or (I8)
 * random integers in [-127, 127]. */
enum { FILL_NAN, FILL_RANDOM, FILL_INT8 };
static void mat_make(fcl_context ctx, mat *m, fcl_dtype dt, int rows, int cols, int pad, int off, int fill,
                     uint64_t seed)
{
    m->rows = rows, m->cols = cols, m->stride = cols + pad, m->off = off;
    m->base_n = off + (int64_t)rows * m->stride;
    m->base = support_xmalloc(sizeof(float) * (size_t)m->base_n);
    m->host = support_xmalloc(sizeof(float) * (size_t)rows * (size_t)cols);
    if (fill == FILL_NAN)
        for (int64_t i = 0; i < m->base_n; i++)
            m->base[i] = NAN;
    else if (fill == FILL_RANDOM)
        support_random(m->base, (size_t)m->base_n, seed, -1.0f, 1.0f, dt);
    else {
        support_random(m->base, (size_t)m->base_n, seed, -127.49f, 127.49f, FCL_F32);
        for (int64_t i = 0; i < m->base_n; i++)
            m->base[i] = rintf(m->base[i]);
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            m->host[(size_t)r * cols + c] = m->base[off + r * m->stride + c];
    m->tb = support_tensor(ctx, dt, 1, &m->base_n, m->base);
    const int64_t shape[2] = {rows, cols}, strides[2] = {m->stride, 1};
    m->view = support_view(m->tb, 2, shape, strides, off);
}

static void mat_free(mat *m)
{
    free(m->base);
    free(m->host);
    fcl_tensor_release(m->view);
    fcl_tensor_release(m->tb);
}

/* A tensor [n] of dtype dt from host values. */
static fcl_tensor vec(fcl_context ctx, fcl_dtype dt, int n, const float *x)
{
    const int64_t shape[1] = {n};
    return support_tensor(ctx, dt, 1, shape, x);
}

/* The case's name, for messages. */
static void describe(const gcase *c, fcl_dtype act, fcl_dtype w, char *buf, size_t n)
{
    snprintf(buf, n, "%s act %s w %s M%d N%d K%d pad %d/%d/%d off %d%s%s", op_names[c->op], fcl_dtype_name(act),
             c->op == GRAD_W ? "-" : fcl_dtype_name(w), c->M, c->N, c->K, c->pad[0], c->pad[1], c->pad[2], c->off,
             c->bias ? " bias" : "", c->flag ? (c->op == GRAD_W ? " dW f32" : " accumulate") : "");
}

/* The rule on out (rows x cols, from the device) against ref and naive; every buffer element
 * outside the view equal to its value before (base0). Reports the worst element and the first
 * beyond the bound. */
static int check(const char *name, const mat *out, const float *base0, const double *ref, const float *naive)
{
    const size_t n = (size_t)out->rows * (size_t)out->cols;
    double err = 0.0, nerr = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = isnan(out->host[i]) ? INFINITY : fabs((double)out->host[i] - ref[i]);
        const double ne = fabs((double)naive[i] - ref[i]);
        if (e > err)
            err = e, worst = i;
        nerr = ne > nerr ? ne : nerr;
    }
    const double bound = 2.0 * nerr + 1e-5;
    int ok = support_within(err, nerr, 2.0);
    cr_expect(ok, "[%s] err %.3g > bound %.3g (naive %.3g); worst at (%zu, %zu): got %.9g, float64 %.9g, naive %.9g",
              name, err, bound, nerr, worst / (size_t)out->cols, worst % (size_t)out->cols, (double)out->host[worst],
              ref[worst], (double)naive[worst]);
    for (size_t i = 0; i < n && !ok; i++) {
        const double e = isnan(out->host[i]) ? INFINITY : fabs((double)out->host[i] - ref[i]);
        if (e > bound) {
            cr_log_error("[%s] first element beyond the bound: (%zu, %zu): got %.9g, float64 %.9g, naive %.9g", name,
                         i / (size_t)out->cols, i % (size_t)out->cols, (double)out->host[i], ref[i],
                         (double)naive[i]);
            break;
        }
    }
    size_t touched = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < out->base_n; i++) {
        const int64_t r = (i - out->off) / out->stride, col = (i - out->off) % out->stride;
        const int inside = i >= out->off && r < out->rows && col < out->cols;
        if (!inside && !(out->base[i] == base0[i] || (isnan(out->base[i]) && isnan(base0[i])))) {
            if (touched++ == 0)
                first = i;
        }
    }
    cr_expect(touched == 0, "[%s] %zu buffer elements outside the output view changed (first: element %lld)", name,
              touched, (long long)first);
    return ok && touched == 0;
}

/* Runs one case; returns 1 when it passes. */
static int run_case(fcl_context ctx, const gcase *c, fcl_dtype act, fcl_dtype wdt, uint64_t seed)
{
    char name[256];
    describe(c, act, wdt, name, sizeof name);
    const int M = c->M, N = c->N, K = c->K;
    /* output shape, and the reduction length */
    const int rows = M, cols = c->op == FWD ? N : K, red = c->op == FWD ? K : c->op == GRAD_IN ? N : M;
    const fcl_dtype out_dt = c->op == GRAD_W && c->flag ? FCL_F32 : act;
    const int accumulate = c->op == GRAD_W || (c->op == GRAD_IN && c->flag);
    mat a, b, out; /* FWD: X, W, Y; GRAD_IN: G, W, Y; GRAD_W: G, X, dW */
    float *scale = NULL, *bias = NULL;
    fcl_tensor ts = NULL, tbias = NULL;
    if (c->op == FWD)
        mat_make(ctx, &a, act, M, K, c->pad[0], c->off, FILL_RANDOM, seed);
    else
        mat_make(ctx, &a, act, M, N, c->pad[0], c->off, FILL_RANDOM, seed);
    if (c->op == GRAD_W)
        mat_make(ctx, &b, act, M, K, c->pad[1], c->off, FILL_RANDOM, seed + 1);
    else
        mat_make(ctx, &b, wdt, N, K, c->pad[1], c->off, wdt == FCL_I8 ? FILL_INT8 : FILL_RANDOM, seed + 1);
    mat_make(ctx, &out, out_dt, c->op == GRAD_W ? N : rows, cols, c->pad[2], c->off,
             accumulate ? FILL_RANDOM : FILL_NAN, seed + 2);
    if (c->op != GRAD_W && wdt == FCL_I8) { /* per output row of W: [0.5, 1.5) / (127 sqrt(K)) */
        scale = support_xmalloc(sizeof(float) * (size_t)N);
        support_random(scale, (size_t)N, seed + 3, 0.5f, 1.5f, FCL_F32);
        for (int n = 0; n < N; n++)
            scale[n] /= 127.0f * sqrtf((float)K);
        ts = vec(ctx, FCL_F32, N, scale);
    } else if (c->op != GRAD_W) { /* float weights scaled to [-1, 1) / sqrt(K), exactly in their dtype */
        for (size_t i = 0; i < (size_t)N * K; i++)
            b.host[i] = ref_round_to_dtype(wdt, b.host[i] / sqrtf((float)K));
        for (int r = 0; r < N; r++)
            for (int k = 0; k < K; k++)
                b.base[b.off + r * b.stride + k] = b.host[(size_t)r * K + k];
        support_write(b.tb, b.base);
    }
    if (c->bias) {
        bias = support_xmalloc(sizeof(float) * (size_t)N);
        support_random(bias, (size_t)N, seed + 4, -0.5f, 0.5f, act);
        tbias = vec(ctx, act, N, bias);
    }
    const fcl_weight w = {c->op == GRAD_W ? NULL : b.view, ts, tbias};

    /* float64 reference and the float32 naive twin, out[rows' x cols] */
    const int out_rows = c->op == GRAD_W ? N : rows;
    const size_t n_out = (size_t)out_rows * (size_t)cols;
    double *ref = support_xmalloc(sizeof(double) * n_out);
    float *naive = support_xmalloc(sizeof(float) * n_out);
    for (int i = 0; i < out_rows; i++)
        for (int j = 0; j < cols; j++) {
            double s = 0.0;
            float f = 0.0f;
            for (int r = 0; r < red; r++) {
                float x, q, sc = 1.0f; /* the product A[i, r] B[r, j], B = q * sc (I8: the scale of W's row) */
                if (c->op == FWD)
                    x = a.host[(size_t)i * K + r], q = b.host[(size_t)j * K + r], sc = scale ? scale[j] : 1.0f;
                else if (c->op == GRAD_IN)
                    x = a.host[(size_t)i * N + r], q = b.host[(size_t)r * K + j], sc = scale ? scale[r] : 1.0f;
                else
                    x = a.host[(size_t)r * N + i], q = b.host[(size_t)r * K + j];
                s += (double)x * ((double)q * sc);
                f += x * (q * sc);
            }
            if (bias)
                s += bias[j], f += bias[j];
            if (accumulate)
                s += out.host[(size_t)i * cols + j], f += out.host[(size_t)i * cols + j];
            ref[(size_t)i * cols + j] = s;
            naive[(size_t)i * cols + j] = ref_round_to_dtype(out_dt, f);
        }

    float *base0 = support_xmalloc(sizeof(float) * (size_t)out.base_n);
    memcpy(base0, out.base, sizeof(float) * (size_t)out.base_n);
    fcl_status st;
    if (c->op == FWD)
        st = fcl_linear_enqueue(ctx, a.view, &w, out.view, NULL);
    else if (c->op == GRAD_IN)
        st = fcl_linear_grad_input(ctx, a.view, &w, out.view, accumulate);
    else
        st = fcl_linear_grad_weight(ctx, a.view, b.view, out.view);
    cr_expect(st == FCL_SUCCESS, "[%s] %s: %s", name, fcl_status_string(st), fcl_last_error(ctx));
    int ok = st == FCL_SUCCESS;
    if (ok) {
        cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "[%s] fcl_finish: %s", name, fcl_last_error(ctx));
        support_read(out.tb, out.base);
        support_read(out.view, out.host);
        ok = check(name, &out, base0, ref, naive);
    }
    free(base0), free(ref), free(naive), free(scale), free(bias);
    fcl_tensor_release(ts);
    fcl_tensor_release(tbias);
    mat_free(&a), mat_free(&b), mat_free(&out);
    return ok;
}

/* Every case with activations `act` and weights of both dtypes in `wdts` (the grad-weight cases,
 * which take no weight, once). On NVIDIA devices of compute capability >= 8.0, where FLASHCL_GEMM
 * is not "own", the F16 and BF16 products with weights of their own dtype or I8 must run on tensor
 * cores (fcl_projection_path "nvidia-mma"; "nvidia-wgmma" at compute capability 9.0 unless
 * FLASHCL_GEMM is "mma", where the forward cases with 16-byte aligned rows take the wgmma GEMM
 * and the others the mma one), so that the test cannot pass on another kernel. */
static void gemm_table(fcl_dtype act, const fcl_dtype wdts[2], uint64_t seed0)
{
    fcl_context ctx = support_context();
    fcl_device_info info;
    cr_assert(fcl_context_device_info(ctx, &info) == FCL_SUCCESS);
    const char *env = getenv("FLASHCL_GEMM");
    const int own = env && strcmp(env, "own") == 0;
    for (int i = 0; i < 2; i++) {
        const char *path = fcl_projection_path(ctx, act, wdts[i]);
        cr_log_info("act %s weights %s: projection path %s", fcl_dtype_name(act), fcl_dtype_name(wdts[i]), path);
        const int hopper = info.nv_cc_major == 9 && info.nv_cc_minor == 0 && !(env && strcmp(env, "mma") == 0);
        if (info.nv_cc_major >= 8 && !own && act != FCL_F32 && (wdts[i] == act || wdts[i] == FCL_I8))
            cr_assert_str_eq(path, hopper ? "nvidia-wgmma" : "nvidia-mma", "act %s weights %s on compute capability %d.%d",
                             fcl_dtype_name(act), fcl_dtype_name(wdts[i]), info.nv_cc_major, info.nv_cc_minor);
    }
    const size_t n_cases = sizeof cases / sizeof cases[0];
    int failed = 0, run = 0;
    for (size_t i = 0; i < n_cases; i++)
        for (int j = 0; j < (cases[i].op == GRAD_W ? 1 : 2); j++) {
            failed += !run_case(ctx, &cases[i], act, wdts[j], seed0 + 8 * (uint64_t)(i * 3 + (size_t)j));
            run++;
        }
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%d of %d %s cases failed", failed, run, fcl_dtype_name(act));
}

Test(gemm, f16)
{
    const fcl_dtype w[2] = {FCL_F16, FCL_I8};
    gemm_table(FCL_F16, w, 1000);
}

Test(gemm, bf16)
{
    const fcl_dtype w[2] = {FCL_BF16, FCL_I8};
    gemm_table(FCL_BF16, w, 2000);
}

/* The forward cases of I8 weights converted to the activations' dtype first, then the 16-bit
 * GEMM (the wgmma GEMM's route for GEMMs of many rows, here at every row count; skipped where
 * there is no such route). */
static void gemm_converted(fcl_dtype act, uint64_t seed0)
{
    support_force_i8_conversion(act);
    const fcl_dtype w[2] = {FCL_I8, FCL_I8};
    gemm_table(act, w, seed0);
}

Test(gemm, f16_i8_converted)
{
    gemm_converted(FCL_F16, 4000);
}

Test(gemm, bf16_i8_converted)
{
    gemm_converted(FCL_BF16, 5000);
}

Test(gemm, f32)
{
    const fcl_dtype w[2] = {FCL_I8, FCL_BF16}; /* F32 weights take CLBlast (where built in), not a GEMM of flashcl's */
    gemm_table(FCL_F32, w, 3000);
}
