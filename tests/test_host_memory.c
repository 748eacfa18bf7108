/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tensors over host memory (fcl_tensor_wrap_host, fcl_tensor_sync_host, fcl_host_alignment):
 * a forward whose Q, K, V and O all live in the caller's host arrays, aligned to the device's
 * in-place alignment and merely element-aligned, F32 and F16, checked against the float64
 * reference with the DESIGN.md rule after a sync (O poisoned with NaN before the call); a view
 * with strides and an offset into a larger host array, whose elements outside the view must stay
 * NaN; bad arguments with their status and message.
 */
#include "ref_attention.h"
#include "support.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OK(ctx, call)                                                                                     \
    do {                                                                                                  \
        fcl_status st_ = (call);                                                                          \
        cr_assert(st_ == FCL_SUCCESS, "%s: %s: %s", #call, fcl_status_string(st_), fcl_last_error(ctx)); \
    } while (0)

/* Host memory of `bytes` at `align` (a power of two) plus `skew` bytes; *base is what to free. */
static void *host_block(size_t bytes, size_t align, size_t skew, void **base)
{
    *base = support_xmalloc(bytes + align + skew);
    uintptr_t p = ((uintptr_t)*base + align - 1) / align * align;
    return (void *)(p + skew);
}

/* n floats of x stored as `dt` (F32 or F16) at dst. */
static void store(fcl_dtype dt, void *dst, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == FCL_F32) {
            ((float *)dst)[i] = x[i];
        } else {
            ((uint16_t *)dst)[i] = fcl_f32_to_f16(x[i]);
        }
    }
}

static float load(fcl_dtype dt, const void *src, size_t i)
{
    return dt == FCL_F32 ? ((const float *)src)[i] : fcl_f16_to_f32(((const uint16_t *)src)[i]);
}

/* A causal GQA forward entirely in host memory with the given alignment and skew. */
static void forward_in_host_memory(fcl_dtype dt, size_t skew)
{
    enum { B = 2, SQ = 37, SK = 53, HQ = 4, HKV = 2, D = 40 };
    fcl_context ctx = support_context();
    const size_t align = fcl_host_alignment(ctx) > 64 ? fcl_host_alignment(ctx) : 64;
    const size_t nq = (size_t)B * SQ * HQ * D, nk = (size_t)B * SK * HKV * D, es = fcl_dtype_size(dt);
    float *q = support_xmalloc(sizeof(float) * nq), *k = support_xmalloc(sizeof(float) * nk);
    float *v = support_xmalloc(sizeof(float) * nk), *nan_o = support_xmalloc(sizeof(float) * nq);
    support_random(q, nq, 71, -1.0f, 1.0f, dt);
    support_random(k, nk, 72, -1.0f, 1.0f, dt);
    support_random(v, nk, 73, -1.0f, 1.0f, dt);
    for (size_t i = 0; i < nq; i++)
        nan_o[i] = NAN;
    void *bq, *bk, *bv, *bo;
    void *hq = host_block(nq * es, align, skew, &bq), *hk = host_block(nk * es, align, skew, &bk);
    void *hv = host_block(nk * es, align, skew, &bv), *ho = host_block(nq * es, align, skew, &bo);
    store(dt, hq, q, nq);
    store(dt, hk, k, nk);
    store(dt, hv, v, nk);
    store(dt, ho, nan_o, nq);

    const int64_t qs[4] = {B, SQ, HQ, D}, ks[4] = {B, SK, HKV, D};
    fcl_tensor Q, K, V, O;
    OK(ctx, fcl_tensor_wrap_host(ctx, hq, nq * es, dt, 4, qs, NULL, 0, &Q));
    OK(ctx, fcl_tensor_wrap_host(ctx, hk, nk * es, dt, 4, ks, NULL, 0, &K));
    OK(ctx, fcl_tensor_wrap_host(ctx, hv, nk * es, dt, 4, ks, NULL, 0, &V));
    OK(ctx, fcl_tensor_wrap_host(ctx, ho, nq * es, dt, 4, qs, NULL, 0, &O));
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.causal = 1;
    OK(ctx, fcl_attention_forward(ctx, &p, Q, K, V, O, NULL, NULL));
    OK(ctx, fcl_tensor_sync_host(O));

    ref_attn_problem rp = {B, SQ, SK, HQ, HKV, D, 0.0, 1, -1, -1, 0.0, NULL, 0, NULL, 0};
    double *ref = support_xmalloc(sizeof(double) * nq);
    float *naive = support_xmalloc(sizeof(float) * nq), *got = support_xmalloc(sizeof(float) * nq);
    ref_attention_forward(&rp, q, k, v, ref, NULL);
    ref_attention_forward_naive(&rp, dt, q, k, v, naive, NULL);
    for (size_t i = 0; i < nq; i++)
        got[i] = load(dt, ho, i);
    const double err = support_max_err_f(got, ref, nq), naive_err = support_max_err_f(naive, ref, nq);
    cr_assert(support_within(err, naive_err, 2.0), "%s skew %zu: max error %g, naive %g", fcl_dtype_name(dt), skew,
              err, naive_err);

    fcl_tensor_release(Q);
    fcl_tensor_release(K);
    fcl_tensor_release(V);
    fcl_tensor_release(O);
    fcl_context_release(ctx);
    free(bq);
    free(bk);
    free(bv);
    free(bo);
    free(q);
    free(k);
    free(v);
    free(nan_o);
    free(ref);
    free(naive);
    free(got);
}

Test(host_memory, forward_aligned_f32) { forward_in_host_memory(FCL_F32, 0); }
Test(host_memory, forward_aligned_f16) { forward_in_host_memory(FCL_F16, 0); }
/* element-aligned only: the implementation may copy, the results are the same */
Test(host_memory, forward_element_aligned_f32) { forward_in_host_memory(FCL_F32, 4); }
Test(host_memory, forward_element_aligned_f16) { forward_in_host_memory(FCL_F16, 2); }

/* O as a [1, S, H, D] view with a row stride of H*D + 5 and an offset of 7 elements into a
 * larger host array: the forward writes the view only. */
Test(host_memory, strided_view_writes_only_the_view)
{
    enum { S = 19, H = 2, D = 16, ROW = H * D + 5, OFF = 7 };
    fcl_context ctx = support_context();
    const size_t n = (size_t)S * H * D, total = OFF + (size_t)S * ROW;
    float *q = support_xmalloc(sizeof(float) * n), *k = support_xmalloc(sizeof(float) * n);
    float *v = support_xmalloc(sizeof(float) * n);
    support_random(q, n, 81, -1.0f, 1.0f, FCL_F32);
    support_random(k, n, 82, -1.0f, 1.0f, FCL_F32);
    support_random(v, n, 83, -1.0f, 1.0f, FCL_F32);
    void *base;
    float *ho = host_block(sizeof(float) * total, 128, 0, &base);
    for (size_t i = 0; i < total; i++)
        ho[i] = NAN;
    const int64_t shape[4] = {1, S, H, D}, strides[4] = {(int64_t)S * ROW, ROW, D, 1};
    fcl_tensor Q = support_tensor(ctx, FCL_F32, 4, shape, q), K = support_tensor(ctx, FCL_F32, 4, shape, k);
    fcl_tensor V = support_tensor(ctx, FCL_F32, 4, shape, v), O;
    OK(ctx, fcl_tensor_wrap_host(ctx, ho, sizeof(float) * total, FCL_F32, 4, shape, strides, OFF, &O));
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    OK(ctx, fcl_attention_forward(ctx, &p, Q, K, V, O, NULL, NULL));
    OK(ctx, fcl_tensor_sync_host(O));

    ref_attn_problem rp = {1, S, S, H, H, D, 0.0, 0, -1, -1, 0.0, NULL, 0, NULL, 0};
    double *ref = support_xmalloc(sizeof(double) * n);
    float *naive = support_xmalloc(sizeof(float) * n), *got = support_xmalloc(sizeof(float) * n);
    ref_attention_forward(&rp, q, k, v, ref, NULL);
    ref_attention_forward_naive(&rp, FCL_F32, q, k, v, naive, NULL);
    for (int s = 0; s < S; s++)
        memcpy(got + (size_t)s * H * D, ho + OFF + (size_t)s * ROW, sizeof(float) * H * D);
    const double err = support_max_err_f(got, ref, n), naive_err = support_max_err_f(naive, ref, n);
    cr_assert(support_within(err, naive_err, 2.0), "max error %g, naive %g", err, naive_err);
    cr_assert_eq(support_touched_outside(ho, (int64_t)total, 4, shape, strides, OFF), 0,
                 "elements outside the view were written");

    fcl_tensor_release(Q);
    fcl_tensor_release(K);
    fcl_tensor_release(V);
    fcl_tensor_release(O);
    fcl_context_release(ctx);
    free(base);
    free(q);
    free(k);
    free(v);
    free(ref);
    free(naive);
    free(got);
}

Test(host_memory, alignment_is_zero_or_a_power_of_two)
{
    fcl_context ctx = support_context();
    const size_t a = fcl_host_alignment(ctx);
    cr_assert(a == 0 || (a & (a - 1)) == 0, "fcl_host_alignment gave %zu", a);
    cr_assert_eq(fcl_host_alignment(NULL), 0);
    fcl_context_release(ctx);
}

Test(host_memory, bad_arguments)
{
    fcl_context ctx = support_context();
    const int64_t shape[2] = {4, 8};
    void *base;
    float *h = host_block(sizeof(float) * 32, 128, 0, &base);
    fcl_tensor t = (fcl_tensor)&t; /* must be set to NULL on failure */

    cr_assert_eq(fcl_tensor_wrap_host(ctx, NULL, 128, FCL_F32, 2, shape, NULL, 0, &t), FCL_ERR_INVALID_ARGUMENT);
    cr_assert_null(t);
    SUPPORT_ASSERT_TOKENS(fcl_last_error(ctx), "fcl_tensor_wrap_host", "host");
    cr_assert_eq(fcl_tensor_wrap_host(ctx, h, 0, FCL_F32, 2, shape, NULL, 0, &t), FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(fcl_last_error(ctx), "bytes");
    cr_assert_eq(fcl_tensor_wrap_host(ctx, (char *)h + 2, 120, FCL_F32, 2, shape, NULL, 0, &t), FCL_ERR_LAYOUT);
    SUPPORT_ASSERT_TOKENS(fcl_last_error(ctx), "aligned", "f32");
    /* 32 floats wrapped, 33 addressed: the view check names this call */
    cr_assert_eq(fcl_tensor_wrap_host(ctx, h, 128, FCL_F32, 2, shape, NULL, 1, &t), FCL_ERR_LAYOUT);
    cr_assert(strncmp(fcl_last_error(ctx), "fcl_tensor_wrap_host:", 21) == 0, "%s", fcl_last_error(ctx));
    cr_assert_null(t);
    cr_assert_eq(fcl_tensor_wrap_host(ctx, h, 128, (fcl_dtype)42, 2, shape, NULL, 0, &t), FCL_ERR_DTYPE);
    cr_assert_eq(fcl_tensor_wrap_host(NULL, h, 128, FCL_F32, 2, shape, NULL, 0, &t), FCL_ERR_INVALID_ARGUMENT);
    support_assert_sentence(fcl_last_error(NULL));

    /* sync: NULL, and a tensor not over host memory */
    cr_assert_eq(fcl_tensor_sync_host(NULL), FCL_ERR_INVALID_ARGUMENT);
    fcl_tensor dev = support_tensor_random(ctx, FCL_F32, 2, shape, 0);
    cr_assert_eq(fcl_tensor_sync_host(dev), FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(fcl_last_error(ctx), "fcl_tensor_wrap_host");
    fcl_tensor_release(dev);
    fcl_context_release(ctx);
    free(base);
}
