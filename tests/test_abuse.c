/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Regression tests of the defects an outside probe found by fuzzing flashcl 0.16.0 (issue 28):
 * each case is an input that crashed the process, gave a silently wrong result or was accepted
 * though it breaks the documented rules. Rejected calls must return their exact status with a
 * sentence, give no event and leave every byte of the outputs' buffers as it was; accepted
 * ones must give what the equivalent well-formed call gives, bit for bit.
 */
#include "cache/disk_cache.h" /* white box: the entry layout, to forge one */
#include "cache/sha256.h"
#include "support.h"
#include "support_varlen.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ helpers */

static cl_mem new_buffer(fcl_context ctx, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    cr_assert(err == CL_SUCCESS, "clCreateBuffer(%zu): %d", bytes, (int)err);
    return m;
}

/* The whole buffer's bytes (malloc'd, *n long). */
static unsigned char *buffer_bytes(fcl_context ctx, cl_mem m, size_t *n)
{
    cr_assert(clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof *n, n, NULL) == CL_SUCCESS);
    unsigned char *b = support_xmalloc(*n);
    cr_assert(clEnqueueReadBuffer(fcl_context_cl_queue(ctx), m, CL_TRUE, 0, *n, b, 0, NULL, NULL) == CL_SUCCESS);
    return b;
}

/* Fills the whole buffer with a salted byte pattern and returns a copy of it (*n long). */
static unsigned char *buffer_sentinel(fcl_context ctx, cl_mem m, size_t *n, unsigned salt)
{
    cr_assert(clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof *n, n, NULL) == CL_SUCCESS);
    unsigned char *b = support_xmalloc(*n);
    for (size_t i = 0; i < *n; i++)
        b[i] = (unsigned char)((i * 151u + 7u + salt * 31u) ^ (i >> 7));
    cr_assert(clEnqueueWriteBuffer(fcl_context_cl_queue(ctx), m, CL_TRUE, 0, *n, b, 0, NULL, NULL) == CL_SUCCESS);
    return b;
}

/* Fails unless m still holds the n bytes of `before` (after finishing the queue). */
static void assert_buffer_unchanged(fcl_context ctx, cl_mem m, const unsigned char *before, size_t n,
                                    const char *what)
{
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "fcl_finish: %s", fcl_last_error(ctx));
    size_t now_n;
    unsigned char *now = buffer_bytes(ctx, m, &now_n);
    cr_assert(now_n == n && memcmp(now, before, n) == 0, "%s was written by a rejected call", what);
    free(now);
}

/* A rejected call: the exact status, a sentence naming `token`, no event. */
static void assert_rejected(fcl_context ctx, fcl_status got, fcl_status want, cl_event ev, const char *token)
{
    cr_assert(got == want, "status %s, expected %s (%s)", fcl_status_string(got), fcl_status_string(want),
              fcl_last_error(ctx));
    support_assert_sentence(fcl_last_error(ctx));
    if (token)
        SUPPORT_ASSERT_TOKENS(fcl_last_error(ctx), token);
    cr_assert(ev == NULL, "a rejected call returned an event");
}

static fcl_tensor wrap(fcl_context ctx, cl_mem m, fcl_dtype dt, int ndim, const int64_t *shape,
                       const int64_t *strides, int64_t offset)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_wrap(ctx, m, dt, ndim, shape, strides, offset, &t);
    cr_assert(st == FCL_SUCCESS, "fcl_tensor_wrap: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    return t;
}

/* t's elements as float32 (malloc'd). */
static float *read_all(fcl_tensor t)
{
    float *x = support_xmalloc(sizeof(float) * (size_t)fcl_tensor_numel(t));
    support_read(t, x);
    return x;
}

/* Fails unless a and b (n floats) are bit-identical. */
static void assert_same_bits(const float *a, const float *b, size_t n, const char *what)
{
    double max_diff;
    long first;
    const size_t bad = support_bit_diff(a, b, n, &max_diff, &first);
    cr_assert(bad == 0, "%s: %zu of %zu elements differ (first %ld: %g vs %g)", what, bad, n, first,
              first >= 0 ? (double)a[first] : 0.0, first >= 0 ? (double)b[first] : 0.0);
}

static fcl_attn_params window(int wl, int wr)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_left = wl;
    p.window_right = wr;
    return p;
}

/* ------------------------------------------------------------------ 1, 2: tensor geometry */

/* A view whose extent overflows int64 was accepted (shape {9,1,1,4}, strides {2^61,4,4,1} over
 * 64 bytes: reading it or writing it as an output crashed). */
Test(abuse, view_extent_overflow_rejected)
{
    fcl_context ctx = support_context();
    cl_mem m = new_buffer(ctx, 64);
    const int64_t big = (int64_t)1 << 61;
    const struct { int64_t shape[4], strides[4], offset; } cases[] = {
        {{9, 1, 1, 4}, {big, 4, 4, 1}, 0},              /* 8 * 2^61 = 2^64 */
        {{3, 1, 1, 4}, {(int64_t)1 << 62, 4, 4, 1}, 0}, /* 2 * 2^62 = 2^63 */
        {{2, 2, 1, 4}, {INT64_MAX / 2 + 1, INT64_MAX / 2 + 1, 4, 1}, 0},
        {{1, 1, 2, 4}, {4, 4, INT64_MAX, 1}, 0},
        {{1, 1, 2, 4}, {4, 4, 8, 1}, INT64_MAX - 4}, /* the offset plus the extent */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        fcl_tensor t = (fcl_tensor)&cases[c];
        fcl_status st = fcl_tensor_wrap(ctx, m, FCL_F32, 4, cases[c].shape, cases[c].strides, cases[c].offset, &t);
        cr_assert(st == FCL_ERR_LAYOUT, "case %zu: fcl_tensor_wrap gave %s (%s)", c, fcl_status_string(st),
                  fcl_last_error(ctx));
        cr_assert(t == NULL, "case %zu: *out not cleared", c);
        support_assert_sentence(fcl_last_error(ctx));
    }
    /* the same through fcl_tensor_view of a valid base */
    const int64_t n16[1] = {16};
    fcl_tensor base = wrap(ctx, m, FCL_F32, 1, n16, NULL, 0);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        fcl_tensor t = NULL;
        fcl_status st = fcl_tensor_view(base, 4, cases[c].shape, cases[c].strides, cases[c].offset, &t);
        cr_assert(st == FCL_ERR_LAYOUT && t == NULL, "case %zu: fcl_tensor_view gave %s (%s)", c,
                  fcl_status_string(st), fcl_last_error(ctx));
    }
    fcl_tensor_release(base);
    clReleaseMemObject(m);
    fcl_context_release(ctx);
}

/* fcl_tensor_create accepted {4098, 538037401, 32681, 256} (2^64 + 512 elements) with a 2048-byte
 * buffer; views whose element count overflows (broadcast strides) were accepted too. */
Test(abuse, element_count_overflow_rejected)
{
    fcl_context ctx = support_context();
    const int64_t shape[4] = {4098, 538037401, 32681, 256};
    fcl_tensor t = (fcl_tensor)shape;
    fcl_status st = fcl_tensor_create(ctx, FCL_F32, 4, shape, &t);
    cr_assert(st == FCL_ERR_SHAPE && t == NULL, "fcl_tensor_create: %s (%s)", fcl_status_string(st),
              fcl_last_error(ctx));
    support_assert_sentence(fcl_last_error(ctx));
    const int64_t two31[4] = {(int64_t)1 << 31, (int64_t)1 << 31, 2, 1}; /* 2^63 elements */
    st = fcl_tensor_create(ctx, FCL_I8, 4, two31, &t);
    cr_assert(st == FCL_ERR_SHAPE && t == NULL, "fcl_tensor_create 2^63: %s (%s)", fcl_status_string(st),
              fcl_last_error(ctx));
    /* broadcast views address one element but count 2^120, or 2^62 elements of 4 bytes */
    cl_mem m = new_buffer(ctx, 16);
    const int64_t huge[4] = {(int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40, 1}, zero[4] = {0, 0, 0, 1};
    const int64_t wide[4] = {(int64_t)1 << 31, (int64_t)1 << 31, 1, 1};
    st = fcl_tensor_wrap(ctx, m, FCL_F32, 4, huge, zero, 0, &t);
    cr_assert(st == FCL_ERR_SHAPE && t == NULL, "wrap 2^120: %s (%s)", fcl_status_string(st), fcl_last_error(ctx));
    st = fcl_tensor_wrap(ctx, m, FCL_F32, 4, wide, zero, 0, &t);
    cr_assert(st == FCL_ERR_SHAPE && t == NULL, "wrap 2^62 x 4 bytes: %s (%s)", fcl_status_string(st),
              fcl_last_error(ctx));
    clReleaseMemObject(m);
    fcl_context_release(ctx);
}

/* ------------------------------------------------------------------ 3, 4: windows near INT MAX */

/* O and LSE of one decode call (len, or lens when len == -1) with window_left wl. */
static void decode_run(fcl_context ctx, fcl_tensor Q, const fcl_kv_cache *cache, int64_t len, fcl_tensor lens,
                       int wl, fcl_tensor O, fcl_tensor LSE, float **o, float **lse)
{
    fcl_attn_params p = window(wl, -1);
    support_poison(O);
    support_poison(LSE);
    fcl_status st = fcl_attention_decode(ctx, &p, Q, cache, len, lens, NULL, O, LSE, NULL);
    cr_assert(st == FCL_SUCCESS, "decode (window_left %d, len %lld): %s: %s", wl, (long long)len,
              fcl_status_string(st), fcl_last_error(ctx));
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "fcl_finish: %s", fcl_last_error(ctx));
    *o = read_all(O);
    *lse = read_all(LSE);
}

/* Decode with window_left near INT_MAX and query rows before position 0 (len < Lq): p -
 * window_left overflowed and the kernel crashed. Such a window is unbounded: the result must be
 * window_left = -1's, bit for bit, for host and device lengths, contiguous and paged. */
Test(abuse, decode_window_near_int_max)
{
    fcl_context ctx = support_context();
    const int64_t kshape[4] = {1, 16, 1, 8}, qshape[4] = {1, 2, 1, 8}, lshape[3] = {1, 1, 2};
    const int64_t pshape[4] = {4, 4, 1, 8}, bshape[2] = {1, 4}, one[1] = {1};
    fcl_tensor K = support_tensor_random(ctx, FCL_F32, 4, kshape, 11), V = support_tensor_random(ctx, FCL_F32, 4, kshape, 12);
    fcl_tensor Kp = support_tensor_random(ctx, FCL_F32, 4, pshape, 13), Vp = support_tensor_random(ctx, FCL_F32, 4, pshape, 14);
    const int32_t pages[4] = {2, 0, 3, 1};
    fcl_tensor bt = support_i32_tensor(ctx, 2, bshape, pages);
    fcl_tensor Q = support_tensor_random(ctx, FCL_F32, 4, qshape, 15);
    fcl_tensor O = support_tensor_random(ctx, FCL_F32, 4, qshape, 0), LSE = support_tensor_random(ctx, FCL_F32, 3, lshape, 0);
    const fcl_kv_cache caches[2] = {{K, V, NULL}, {Kp, Vp, bt}};
    const int64_t lens_host[] = {0, 1, 2, 9, 16};
    const int wls[] = {INT_MAX, INT_MAX - 1, 16, 100000};
    for (int c = 0; c < 2; c++)
        for (size_t li = 0; li < sizeof lens_host / sizeof *lens_host; li++)
            for (int dev = 0; dev < 2; dev++) {
                const int32_t lv = (int32_t)lens_host[li];
                fcl_tensor lens = dev ? support_i32_tensor(ctx, 1, one, &lv) : NULL;
                const int64_t len = dev ? -1 : lens_host[li];
                float *o0, *l0;
                decode_run(ctx, Q, &caches[c], len, lens, -1, O, LSE, &o0, &l0);
                for (size_t w = 0; w < sizeof wls / sizeof *wls; w++) {
                    float *o1, *l1;
                    decode_run(ctx, Q, &caches[c], len, lens, wls[w], O, LSE, &o1, &l1);
                    char what[128];
                    snprintf(what, sizeof what, "%s cache, len %lld (%s), window_left %d", c ? "paged" : "contiguous",
                             (long long)lens_host[li], dev ? "device" : "host", wls[w]);
                    assert_same_bits(o1, o0, 16, what);
                    assert_same_bits(l1, l0, 2, what);
                    free(o1);
                    free(l1);
                }
                free(o0);
                free(l0);
                fcl_tensor_release(lens);
            }
    fcl_tensor_release(K);
    fcl_tensor_release(V);
    fcl_tensor_release(Kp);
    fcl_tensor_release(Vp);
    fcl_tensor_release(bt);
    fcl_tensor_release(Q);
    fcl_tensor_release(O);
    fcl_tensor_release(LSE);
    fcl_context_release(ctx);
}

/* One dense forward's O and LSE with params p. */
static void forward_run(fcl_context ctx, const fcl_attn_params *p, fcl_tensor Q, fcl_tensor K, fcl_tensor V,
                        fcl_tensor O, fcl_tensor LSE, float **o, float **lse)
{
    support_poison(O);
    support_poison(LSE);
    fcl_status st = fcl_attention_forward(ctx, p, Q, K, V, O, LSE, NULL);
    cr_assert(st == FCL_SUCCESS, "forward (windows %d, %d): %s: %s", p->window_left, p->window_right,
              fcl_status_string(st), fcl_last_error(ctx));
    *o = read_all(O);
    *lse = read_all(LSE);
}

/* The windows that must equal unbounded ones (-1) for a problem of sq queries and sk keys, and
 * the pairs (wl, wr) to compare: each side near INT_MAX alone and both, with the other side -1
 * or a bounded value that stays. */
typedef struct window_case {
    int wl, wr, ref_wl, ref_wr;
} window_case;

static const window_case window_cases[] = {
    {INT_MAX, -1, -1, -1},          {-1, INT_MAX, -1, -1},          {INT_MAX, INT_MAX, -1, -1},
    {INT_MAX - 1, 2, -1, 2},        {1, INT_MAX - 2, 1, -1},        {INT_MAX, 0, -1, 0},
    {1000000, 1000000, -1, -1},
};

#define N_WINDOW_CASES (sizeof window_cases / sizeof *window_cases)

/* Dense forward with windows near INT_MAX, Sq > Sk and Sq < Sk: i_last + shift + window_right
 * overflowed (rows saw no key: O = 0, LSE = -inf). */
static void forward_windows_case(void)
{
    fcl_context ctx = support_context();
    const int sizes[2][2] = {{7, 3}, {3, 9}};
    for (int z = 0; z < 2; z++) {
        const int64_t qs[4] = {2, sizes[z][0], 2, 8}, ks[4] = {2, sizes[z][1], 1, 8}, ls[3] = {2, 2, sizes[z][0]};
        fcl_tensor Q = support_tensor_random(ctx, FCL_F32, 4, qs, 21), K = support_tensor_random(ctx, FCL_F32, 4, ks, 22);
        fcl_tensor V = support_tensor_random(ctx, FCL_F32, 4, ks, 23), O = support_tensor_random(ctx, FCL_F32, 4, qs, 0);
        fcl_tensor LSE = support_tensor_random(ctx, FCL_F32, 3, ls, 0);
        const size_t no = (size_t)fcl_tensor_numel(O), nl = (size_t)fcl_tensor_numel(LSE);
        for (size_t c = 0; c < N_WINDOW_CASES; c++) {
            const fcl_attn_params p = window(window_cases[c].wl, window_cases[c].wr);
            const fcl_attn_params r = window(window_cases[c].ref_wl, window_cases[c].ref_wr);
            float *o0, *l0, *o1, *l1;
            forward_run(ctx, &r, Q, K, V, O, LSE, &o0, &l0);
            forward_run(ctx, &p, Q, K, V, O, LSE, &o1, &l1);
            char what[128];
            snprintf(what, sizeof what, "Sq %d, Sk %d, windows (%d, %d)", sizes[z][0], sizes[z][1], p.window_left,
                     p.window_right);
            assert_same_bits(o1, o0, no, what);
            assert_same_bits(l1, l0, nl, what);
            free(o0);
            free(l0);
            free(o1);
            free(l1);
        }
        fcl_tensor_release(Q);
        fcl_tensor_release(K);
        fcl_tensor_release(V);
        fcl_tensor_release(O);
        fcl_tensor_release(LSE);
    }
    fcl_context_release(ctx);
}

Test(abuse, forward_window_near_int_max) { forward_windows_case(); }

/* The same with the keys in chunks (one launch each: the loop-capped devices' path). */
Test(abuse, forward_window_near_int_max_chunked)
{
    support_fix_tiles(1);
    support_force_chunks(1);
    forward_windows_case();
}

/* Varlen forward: two sequences (Sq > Sk and Sq < Sk). */
Test(abuse, varlen_window_near_int_max)
{
    fcl_context ctx = support_context();
    const int32_t cq[3] = {0, 6, 8}, ck[3] = {0, 2, 9};
    const int64_t qs[3] = {8, 2, 8}, ks[3] = {9, 1, 8}, ls[2] = {2, 8}, n3[1] = {3};
    fcl_tensor Q = support_tensor_random(ctx, FCL_F32, 3, qs, 31), K = support_tensor_random(ctx, FCL_F32, 3, ks, 32);
    fcl_tensor V = support_tensor_random(ctx, FCL_F32, 3, ks, 33), O = support_tensor_random(ctx, FCL_F32, 3, qs, 0);
    fcl_tensor LSE = support_tensor_random(ctx, FCL_F32, 2, ls, 0);
    fcl_tensor tq = support_i32_tensor(ctx, 1, n3, cq), tk = support_i32_tensor(ctx, 1, n3, ck);
    for (size_t c = 0; c < N_WINDOW_CASES; c++) {
        const fcl_attn_params p = window(window_cases[c].wl, window_cases[c].wr);
        const fcl_attn_params r = window(window_cases[c].ref_wl, window_cases[c].ref_wr);
        float *o[2], *l[2];
        for (int k = 0; k < 2; k++) {
            support_poison(O);
            support_poison(LSE);
            fcl_status st = fcl_attention_varlen_forward(ctx, k ? &p : &r, Q, K, V, tq, tk, 6, 7, O, LSE, NULL);
            cr_assert(st == FCL_SUCCESS, "varlen: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
            o[k] = read_all(O);
            l[k] = read_all(LSE);
        }
        char what[96];
        snprintf(what, sizeof what, "varlen, windows (%d, %d)", p.window_left, p.window_right);
        assert_same_bits(o[1], o[0], 8 * 16, what);
        assert_same_bits(l[1], l[0], 16, what);
        for (int k = 0; k < 2; k++) {
            free(o[k]);
            free(l[k]);
        }
    }
    fcl_tensor_release(Q);
    fcl_tensor_release(K);
    fcl_tensor_release(V);
    fcl_tensor_release(O);
    fcl_tensor_release(LSE);
    fcl_tensor_release(tq);
    fcl_tensor_release(tk);
    fcl_context_release(ctx);
}

/* Packed fused-QKV forward and backward: 7 rows in two sequences. */
Test(abuse, packed_window_near_int_max)
{
    fcl_context ctx = support_context();
    const int64_t qkv[4] = {7, 3, 2, 8}, os[3] = {7, 2, 8}, ls[2] = {2, 7}, bs[2] = {7, 2};
    const int32_t bounds[14] = {0, 3, 0, 3, 0, 3, 3, 7, 3, 7, 3, 7, 3, 7};
    fcl_tensor QKV = support_tensor_random(ctx, FCL_F32, 4, qkv, 41), O = support_tensor_random(ctx, FCL_F32, 3, os, 0);
    fcl_tensor LSE = support_tensor_random(ctx, FCL_F32, 2, ls, 0), dO = support_tensor_random(ctx, FCL_F32, 3, os, 42);
    fcl_tensor dQKV = support_tensor_random(ctx, FCL_F32, 4, qkv, 0);
    fcl_tensor sb = support_i32_tensor(ctx, 2, bs, bounds);
    for (size_t c = 0; c < N_WINDOW_CASES; c++) {
        const fcl_attn_params p = window(window_cases[c].wl, window_cases[c].wr);
        const fcl_attn_params r = window(window_cases[c].ref_wl, window_cases[c].ref_wr);
        float *o[2], *l[2], *g[2];
        for (int k = 0; k < 2; k++) {
            support_poison(O);
            support_poison(LSE);
            support_poison(dQKV);
            fcl_status st = fcl_attention_packed_qkv_forward(ctx, k ? &p : &r, QKV, sb, O, LSE, NULL);
            cr_assert(st == FCL_SUCCESS, "packed: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
            st = fcl_attention_packed_qkv_backward(ctx, k ? &p : &r, QKV, O, dO, LSE, sb, dQKV, NULL);
            cr_assert(st == FCL_SUCCESS, "packed backward: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
            o[k] = read_all(O);
            l[k] = read_all(LSE);
            g[k] = read_all(dQKV);
        }
        char what[96];
        snprintf(what, sizeof what, "packed, windows (%d, %d)", p.window_left, p.window_right);
        assert_same_bits(o[1], o[0], 7 * 16, what);
        assert_same_bits(l[1], l[0], 14, what);
        assert_same_bits(g[1], g[0], 7 * 3 * 16, what);
        for (int k = 0; k < 2; k++) {
            free(o[k]);
            free(l[k]);
            free(g[k]);
        }
    }
    fcl_tensor_release(QKV);
    fcl_tensor_release(O);
    fcl_tensor_release(LSE);
    fcl_tensor_release(dO);
    fcl_tensor_release(dQKV);
    fcl_tensor_release(sb);
    fcl_context_release(ctx);
}

/* Dense and varlen backward (given and recomputed O and LSE). */
Test(abuse, backward_window_near_int_max)
{
    fcl_context ctx = support_context();
    const int64_t qs[4] = {1, 7, 2, 8}, ks[4] = {1, 3, 2, 8}, ls[3] = {1, 2, 7};
    fcl_tensor Q = support_tensor_random(ctx, FCL_F32, 4, qs, 51), K = support_tensor_random(ctx, FCL_F32, 4, ks, 52);
    fcl_tensor V = support_tensor_random(ctx, FCL_F32, 4, ks, 53), dO = support_tensor_random(ctx, FCL_F32, 4, qs, 54);
    fcl_tensor O = support_tensor_random(ctx, FCL_F32, 4, qs, 0), LSE = support_tensor_random(ctx, FCL_F32, 3, ls, 0);
    fcl_tensor dQ = support_tensor_random(ctx, FCL_F32, 4, qs, 0), dK = support_tensor_random(ctx, FCL_F32, 4, ks, 0);
    fcl_tensor dV = support_tensor_random(ctx, FCL_F32, 4, ks, 0);
    /* the varlen form of the same data: [total, H, D] views of the dense tensors */
    const int64_t vq[3] = {7, 2, 8}, vk[3] = {3, 2, 8}, n2[1] = {2};
    fcl_tensor vQ = support_view(Q, 3, vq, NULL, 0), vK = support_view(K, 3, vk, NULL, 0);
    fcl_tensor vV = support_view(V, 3, vk, NULL, 0), vdO = support_view(dO, 3, vq, NULL, 0);
    fcl_tensor vdQ = support_view(dQ, 3, vq, NULL, 0), vdK = support_view(dK, 3, vk, NULL, 0);
    fcl_tensor vdV = support_view(dV, 3, vk, NULL, 0);
    const int32_t cq[2] = {0, 7}, ck[2] = {0, 3};
    fcl_tensor tq = support_i32_tensor(ctx, 1, n2, cq), tk = support_i32_tensor(ctx, 1, n2, ck);
    const fcl_tensor grads[3] = {dQ, dK, dV};
    const size_t ng[3] = {7 * 16, 3 * 16, 3 * 16};
    for (size_t c = 0; c < N_WINDOW_CASES; c++) {
        const fcl_attn_params p = window(window_cases[c].wl, window_cases[c].wr);
        const fcl_attn_params r = window(window_cases[c].ref_wl, window_cases[c].ref_wr);
        for (int form = 0; form < 3; form++) { /* dense given O/LSE, dense recomputed, varlen */
            float *g[2][3];
            for (int k = 0; k < 2; k++) {
                const fcl_attn_params *pp = k ? &p : &r;
                fcl_status st = fcl_attention_forward(ctx, pp, Q, K, V, O, LSE, NULL);
                cr_assert(st == FCL_SUCCESS, "forward: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
                for (int i = 0; i < 3; i++)
                    support_poison(grads[i]);
                if (form == 0)
                    st = fcl_attention_backward(ctx, pp, Q, K, V, O, dO, LSE, dQ, dK, dV, NULL);
                else if (form == 1)
                    st = fcl_attention_backward(ctx, pp, Q, K, V, NULL, dO, NULL, dQ, dK, dV, NULL);
                else
                    st = fcl_attention_varlen_backward(ctx, pp, vQ, vK, vV, NULL, vdO, NULL, tq, tk, 7, 3, vdQ, vdK,
                                                       vdV, NULL);
                cr_assert(st == FCL_SUCCESS, "backward form %d: %s: %s", form, fcl_status_string(st),
                          fcl_last_error(ctx));
                for (int i = 0; i < 3; i++)
                    g[k][i] = read_all(grads[i]);
            }
            for (int i = 0; i < 3; i++) {
                char what[96];
                snprintf(what, sizeof what, "backward form %d, d%c, windows (%d, %d)", form, "QKV"[i],
                         p.window_left, p.window_right);
                assert_same_bits(g[1][i], g[0][i], ng[i], what);
                free(g[0][i]);
                free(g[1][i]);
            }
        }
    }
    const fcl_tensor all[] = {Q, K, V, dO, O, LSE, dQ, dK, dV, vQ, vK, vV, vdO, vdQ, vdK, vdV, tq, tk};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        fcl_tensor_release(all[i]);
    fcl_context_release(ctx);
}

/* ------------------------------------------------------------------ 5: kv-cache position */

/* pos + L_new overflowed: pos INT64_MAX with L_new 2 and L_max 8 was accepted and row 1 went to
 * position 0. */
Test(abuse, kv_append_position_overflow_rejected)
{
    fcl_context ctx = support_context();
    const int64_t cs[4] = {1, 8, 1, 8}, ns[4] = {1, 2, 1, 8};
    fcl_tensor Kc = support_tensor_random(ctx, FCL_F32, 4, cs, 61), Vc = support_tensor_random(ctx, FCL_F32, 4, cs, 62);
    fcl_tensor Kn = support_tensor_random(ctx, FCL_F32, 4, ns, 63), Vn = support_tensor_random(ctx, FCL_F32, 4, ns, 64);
    const fcl_kv_cache cache = {Kc, Vc, NULL};
    size_t nk, nv;
    unsigned char *k0 = buffer_sentinel(ctx, fcl_tensor_buffer(Kc), &nk, 1);
    unsigned char *v0 = buffer_sentinel(ctx, fcl_tensor_buffer(Vc), &nv, 2);
    const int64_t positions[] = {INT64_MAX, INT64_MAX - 1, INT64_MAX - 7, 7, -2, INT64_MIN};
    for (size_t c = 0; c < sizeof positions / sizeof *positions; c++) {
        cl_event ev = NULL;
        fcl_status st = fcl_kv_cache_append(ctx, &cache, Kn, Vn, positions[c], NULL, &ev);
        assert_rejected(ctx, st, FCL_ERR_INVALID_ARGUMENT, ev, "pos");
        assert_buffer_unchanged(ctx, fcl_tensor_buffer(Kc), k0, nk, "cache.k");
        assert_buffer_unchanged(ctx, fcl_tensor_buffer(Vc), v0, nv, "cache.v");
    }
    fcl_status st = fcl_kv_cache_append(ctx, &cache, Kn, Vn, 6, NULL, NULL); /* the last valid position */
    cr_assert(st == FCL_SUCCESS, "pos 6: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    free(k0);
    free(v0);
    const fcl_tensor all[] = {Kc, Vc, Kn, Vn};
    for (size_t i = 0; i < 4; i++)
        fcl_tensor_release(all[i]);
    fcl_context_release(ctx);
}

/* ------------------------------------------------------------------ 6: projection layouts */

/* y[m, n] = sum_k x[m, k] w[n, k] in float64, host arrays dense. */
static void host_linear(const float *x, const float *w, int M, int N, int K, double *y)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int k = 0; k < K; k++)
                s += (double)x[m * K + k] * w[n * K + k];
            y[m * N + n] = s;
        }
}

/* Views flashcl accepts but CLBlast does not take (row stride 0: broadcast; row stride below
 * the row length: overlapping rows) failed with FCL_ERR_OPENCL on the CLBlast path, and
 * fcl_project_kv had written K when V's GEMM failed. Both outputs must be right. */
Test(abuse, projection_views_clblast_refuses)
{
    fcl_context ctx = support_context();
    enum { L = 4, D = 8 };
    const int64_t row[1] = {D}, w2[2] = {D, D}, a2[2] = {L, D}, bcast[2] = {0, 1}, slide[2] = {1, 1};
    const int64_t n_slide[1] = {L + D - 1};
    float hrow[D], hw[D * D], hslide[L + D - 1];
    support_random(hrow, D, 71, -1.0f, 1.0f, FCL_F32);
    support_random(hw, D * D, 72, -1.0f, 1.0f, FCL_F32);
    support_random(hslide, L + D - 1, 73, -1.0f, 1.0f, FCL_F32);
    fcl_tensor trow = support_tensor(ctx, FCL_F32, 1, row, hrow), tw = support_tensor(ctx, FCL_F32, 2, w2, hw);
    fcl_tensor tslide = support_tensor(ctx, FCL_F32, 1, n_slide, hslide);
    fcl_tensor wb = support_view(trow, 2, w2, bcast, 0);     /* every weight row is hrow */
    fcl_tensor xb = support_view(trow, 2, a2, bcast, 0);     /* every activation row is hrow */
    fcl_tensor xs = support_view(tslide, 2, a2, slide, 0);   /* row m is hslide[m .. m + D) */
    fcl_tensor K = support_tensor_random(ctx, FCL_F32, 2, a2, 0), V = support_tensor_random(ctx, FCL_F32, 2, a2, 0);
    /* host copies of the logical operands */
    float x_b[L * D], x_s[L * D], w_b[D * D];
    for (int m = 0; m < L; m++)
        for (int k = 0; k < D; k++) {
            x_b[m * D + k] = hrow[k];
            x_s[m * D + k] = hslide[m + k];
        }
    for (int n = 0; n < D; n++)
        memcpy(&w_b[n * D], hrow, sizeof hrow);
    const struct { fcl_tensor x; const float *hx; } acts[3] = {{xb, x_b}, {xs, x_s}, {tw, NULL}};
    for (int a = 0; a < 2; a++) {
        const fcl_weight wk = {tw, NULL, NULL}, wv = {wb, NULL, NULL};
        support_poison(K);
        support_poison(V);
        fcl_status st = fcl_project_kv(ctx, acts[a].x, &wk, &wv, K, V, NULL);
        cr_assert(st == FCL_SUCCESS, "fcl_project_kv (activations %s): %s: %s", a ? "overlapping rows" : "broadcast",
                  fcl_status_string(st), fcl_last_error(ctx));
        float k[L * D], v[L * D];
        support_read(K, k);
        support_read(V, v);
        double rk[L * D], rv[L * D];
        host_linear(acts[a].hx, hw, L, D, D, rk);
        host_linear(acts[a].hx, w_b, L, D, D, rv);
        /* float32 sums of 8 products of values in [-1, 1): far below the rule's 1e-5 */
        cr_assert(support_max_err_f(k, rk, L * D) <= 1e-5, "K off by %g", support_max_err_f(k, rk, L * D));
        cr_assert(support_max_err_f(v, rv, L * D) <= 1e-5, "V off by %g", support_max_err_f(v, rv, L * D));
    }
    const fcl_tensor all[] = {trow, tw, tslide, wb, xb, xs, K, V};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        fcl_tensor_release(all[i]);
    fcl_context_release(ctx);
}

/* ------------------------------------------------------------------ 7: disk cache */

/* The one *.clbin entry of dir, as a malloc'd path (fails the test unless exactly one). */
static char *only_entry(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d != NULL, "opendir %s", dir);
    char *found = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        if (len > 6 && strcmp(e->d_name + len - 6, ".clbin") == 0) {
            n++;
            free(found);
            found = support_xmalloc(strlen(dir) + len + 2);
            sprintf(found, "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    cr_assert(n == 1, "%d cache entries in %s; expected 1", n, dir);
    return found;
}

/* One kv_cache_append (one small program) on a new context; its cache counters into *stats. */
static void append_once(fcl_cache_stats *stats)
{
    fcl_context ctx = support_context();
    const int64_t cs[4] = {1, 4, 1, 4}, ns[4] = {1, 1, 1, 4};
    fcl_tensor Kc = support_tensor_random(ctx, FCL_F32, 4, cs, 81), Vc = support_tensor_random(ctx, FCL_F32, 4, cs, 82);
    fcl_tensor Kn = support_tensor_random(ctx, FCL_F32, 4, ns, 83), Vn = support_tensor_random(ctx, FCL_F32, 4, ns, 84);
    const fcl_kv_cache cache = {Kc, Vc, NULL};
    fcl_status st = fcl_kv_cache_append(ctx, &cache, Kn, Vn, 1, NULL, NULL);
    cr_assert(st == FCL_SUCCESS, "append: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS);
    cr_assert(fcl_context_cache_stats(ctx, stats) == FCL_SUCCESS);
    const fcl_tensor all[] = {Kc, Vc, Kn, Vn};
    for (size_t i = 0; i < 4; i++)
        fcl_tensor_release(all[i]);
    fcl_context_release(ctx);
}

/* A folder planted under an entry's name was rejected on every run and never replaced (the
 * rename onto a folder fails): the next store must replace it, so the run after hits. */
Test(abuse, cache_folder_at_entry_name_is_replaced)
{
    char dir[] = "/tmp/flashcl-abuse-cache.XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    setenv("FLASHCL_CACHE_DIR", dir, 1);
    setenv("FLASHCL_CACHE_PROGRAMS", "1", 1);
    fcl_cache_stats s;
    append_once(&s);
    cr_assert(s.disk_writes == 1 && s.disk_hits == 0, "first run: %llu writes, %llu hits",
              (unsigned long long)s.disk_writes, (unsigned long long)s.disk_hits);
    char *entry = only_entry(dir);
    cr_assert(unlink(entry) == 0);
    cr_assert(mkdir(entry, 0755) == 0);
    char inner[4096];
    snprintf(inner, sizeof inner, "%s/planted", entry);
    FILE *f = fopen(inner, "w");
    cr_assert(f != NULL);
    fputs("not a program\n", f);
    fclose(f);
    append_once(&s);
    cr_assert(s.disk_rejects == 1 && s.disk_writes == 1, "second run: %llu rejects, %llu writes",
              (unsigned long long)s.disk_rejects, (unsigned long long)s.disk_writes);
    struct stat st;
    cr_assert(stat(entry, &st) == 0 && S_ISREG(st.st_mode), "the planted folder is still at %s", entry);
    append_once(&s);
    cr_assert(s.disk_hits == 1 && s.disk_rejects == 0 && s.compiles == 0, "third run: %llu hits, %llu rejects",
              (unsigned long long)s.disk_hits, (unsigned long long)s.disk_rejects);
    free(entry);
    support_remove_tree(dir);
}

/* Forges the cache entry at path as an attacker would: `payload` (n bytes) under the file's own
 * header, with the length and SHA-256 the header needs (cache/disk_cache.h's layout). */
static void forge_entry(const char *path, const unsigned char *payload, size_t n)
{
    FILE *f = fopen(path, "r+b");
    cr_assert(f != NULL, "open %s", path);
    unsigned char hdr[FCL_DISK_CACHE_HEADER_SIZE];
    cr_assert(fread(hdr, 1, sizeof hdr, f) == sizeof hdr);
    for (int i = 0; i < 8; i++)
        hdr[48 + i] = (unsigned char)((uint64_t)n >> (8 * i));
    fcl_sha256_digest(payload, n, hdr + 56);
    cr_assert(fseek(f, 0, SEEK_SET) == 0);
    cr_assert(fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr && fwrite(payload, 1, n, f) == n);
    cr_assert(ftruncate(fileno(f), (off_t)(sizeof hdr + n)) == 0);
    fclose(f);
}

/* An entry forged with a valid checksum (Mesa 22's Rusticl panicked, "unknown version", on a
 * binary whose version field was not 1): the binary's header is checked before the
 * implementation sees it, and a program without kernels is rejected after the build. Both
 * forgeries must be rejected and recompiled, on every implementation, and the genuine entry
 * stored then must be used. */
Test(abuse, cache_forged_binary_rejected)
{
    char dir[] = "/tmp/flashcl-abuse-forge.XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    setenv("FLASHCL_CACHE_DIR", dir, 1);
    setenv("FLASHCL_CACHE_PROGRAMS", "1", 1);
    fcl_cache_stats s;
    append_once(&s);
    cr_assert(s.disk_writes == 1, "first run: %llu writes", (unsigned long long)s.disk_writes);
    char *entry = only_entry(dir);
    for (int forgery = 0; forgery < 2; forgery++) {
        FILE *f = fopen(entry, "rb");
        cr_assert(f != NULL);
        cr_assert(fseek(f, 0, SEEK_END) == 0);
        const size_t n = (size_t)ftell(f) - FCL_DISK_CACHE_HEADER_SIZE;
        unsigned char *payload = support_xmalloc(n);
        cr_assert(fseek(f, FCL_DISK_CACHE_HEADER_SIZE, SEEK_SET) == 0 && fread(payload, 1, n, f) == n);
        fclose(f);
        if (forgery == 0) /* the first word: Rusticl's version, PoCL's and ELF's magic */
            payload[0] ^= 0x5a;
        else
            support_random((float *)payload, n / sizeof(float), 111, -1e30f, 1e30f, FCL_F32);
        forge_entry(entry, payload, n);
        free(payload);
        append_once(&s);
        cr_assert(s.disk_rejects == 1 && s.compiles == 1 && s.disk_writes == 1,
                  "forgery %d: %llu rejects, %llu compiles, %llu writes", forgery,
                  (unsigned long long)s.disk_rejects, (unsigned long long)s.compiles,
                  (unsigned long long)s.disk_writes);
    }
    append_once(&s); /* the genuine binary stored after the last forgery passes the checks */
    cr_assert(s.disk_hits == 1 && s.disk_rejects == 0 && s.compiles == 0, "last run: %llu hits, %llu rejects",
              (unsigned long long)s.disk_hits, (unsigned long long)s.disk_rejects);
    free(entry);
    support_remove_tree(dir);
}

/* ------------------------------------------------------------------ 8: validation gaps */

/* A queue of another cl_context was accepted; every later call failed with CL_INVALID_CONTEXT. */
Test(abuse, create_from_cl_rejects_foreign_queue)
{
    fcl_context base = support_context();
    cl_device_id dev = fcl_context_cl_device(base);
    cl_int err;
    cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cr_assert(err == CL_SUCCESS);
    cl_command_queue q = clCreateCommandQueue(other, dev, 0, &err);
    cr_assert(err == CL_SUCCESS);
    fcl_context ctx = (fcl_context)&err;
    fcl_status st = fcl_context_create_from_cl(fcl_context_cl_context(base), dev, q, &ctx);
    cr_assert(st == FCL_ERR_INVALID_ARGUMENT && ctx == NULL, "%s (%s)", fcl_status_string(st), fcl_last_error(NULL));
    SUPPORT_ASSERT_TOKENS(fcl_last_error(NULL), "queue", "context");
    /* the queue's own context is fine */
    st = fcl_context_create_from_cl(other, dev, q, &ctx);
    cr_assert(st == FCL_SUCCESS, "%s (%s)", fcl_status_string(st), fcl_last_error(NULL));
    fcl_context_release(ctx);
    clReleaseCommandQueue(q);
    clReleaseContext(other);
    fcl_context_release(base);
}

/* Outputs over side inputs were accepted: forward O over key_mask, packed O over seq_bounds,
 * decode O over alibi_slopes (and the like). Each is one buffer wrapped twice. */
Test(abuse, outputs_over_side_inputs_rejected)
{
    fcl_context ctx = support_context();
    const int64_t qs[4] = {1, 3, 2, 8}, ks[4] = {1, 5, 2, 8}, ls[3] = {1, 2, 3};
    fcl_tensor Q = support_tensor_random(ctx, FCL_F32, 4, qs, 91), K = support_tensor_random(ctx, FCL_F32, 4, ks, 92);
    fcl_tensor V = support_tensor_random(ctx, FCL_F32, 4, ks, 93);
    cl_mem ob = new_buffer(ctx, 48 * 4), lb = new_buffer(ctx, 6 * 4);
    fcl_tensor O = wrap(ctx, ob, FCL_F32, 4, qs, NULL, 0), LSE = wrap(ctx, lb, FCL_F32, 3, ls, NULL, 0);
    const int64_t n5[1] = {5}, n2[1] = {2};
    size_t no, nl;
    unsigned char *o0 = buffer_sentinel(ctx, ob, &no, 3), *l0 = buffer_sentinel(ctx, lb, &nl, 4);
    struct { fcl_tensor mask, alibi; const char *token; } fwd[4] = {
        {wrap(ctx, ob, FCL_F32, 1, n5, NULL, 7), NULL, "key_mask"},
        {NULL, wrap(ctx, ob, FCL_F32, 1, n2, NULL, 40), "alibi_slopes"},
        {wrap(ctx, lb, FCL_F32, 1, n5, NULL, 1), NULL, "key_mask"},
        {NULL, wrap(ctx, lb, FCL_F32, 1, n2, NULL, 4), "alibi_slopes"},
    };
    for (int c = 0; c < 4; c++) {
        fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
        p.key_mask = fwd[c].mask;
        p.alibi_slopes = fwd[c].alibi;
        cl_event ev = NULL;
        fcl_status st = fcl_attention_forward(ctx, &p, Q, K, V, O, LSE, &ev);
        assert_rejected(ctx, st, FCL_ERR_INVALID_ARGUMENT, ev, fwd[c].token);
        assert_buffer_unchanged(ctx, ob, o0, no, "O");
        assert_buffer_unchanged(ctx, lb, l0, nl, "LSE");
        fcl_tensor_release(fwd[c].mask);
        fcl_tensor_release(fwd[c].alibi);
    }
    /* LSE over an input of the forward */
    {
        const int64_t k1[4] = {1, 1, 1, 4}, q1[4] = {1, 1, 1, 4}, l1[3] = {1, 1, 1};
        fcl_tensor Kl = wrap(ctx, lb, FCL_F32, 4, k1, NULL, 2); /* elements 2..5; LSE is element 3 */
        fcl_tensor Q1 = support_tensor_random(ctx, FCL_F32, 4, q1, 94), O1 = support_tensor_random(ctx, FCL_F32, 4, q1, 0);
        fcl_tensor V1 = support_tensor_random(ctx, FCL_F32, 4, k1, 95), L1 = wrap(ctx, lb, FCL_F32, 3, l1, NULL, 3);
        fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
        cl_event ev = NULL;
        fcl_status st = fcl_attention_forward(ctx, &p, Q1, Kl, V1, O1, L1, &ev);
        assert_rejected(ctx, st, FCL_ERR_INVALID_ARGUMENT, ev, "LSE");
        assert_buffer_unchanged(ctx, lb, l0, nl, "LSE");
        const fcl_tensor all[] = {Kl, Q1, O1, V1, L1};
        for (size_t i = 0; i < 5; i++)
            fcl_tensor_release(all[i]);
    }
    /* packed: O over seq_bounds (an I32 view of O's buffer) */
    {
        const int64_t qkv[4] = {3, 3, 2, 8}, os[3] = {3, 2, 8}, bs[2] = {3, 2};
        fcl_tensor QKV = support_tensor_random(ctx, FCL_F32, 4, qkv, 96);
        fcl_tensor Op = wrap(ctx, ob, FCL_F32, 3, os, NULL, 0), sb = wrap(ctx, ob, FCL_I32, 2, bs, NULL, 10);
        fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
        cl_event ev = NULL;
        fcl_status st = fcl_attention_packed_qkv_forward(ctx, &p, QKV, sb, Op, NULL, &ev);
        assert_rejected(ctx, st, FCL_ERR_INVALID_ARGUMENT, ev, "seq_bounds");
        assert_buffer_unchanged(ctx, ob, o0, no, "O");
        fcl_tensor_release(QKV);
        fcl_tensor_release(Op);
        fcl_tensor_release(sb);
    }
    /* varlen: O over cu_seqlens_k */
    {
        const int64_t vq[3] = {3, 2, 8}, vk[3] = {5, 2, 8}, n2b[1] = {2};
        fcl_tensor vQ = support_view(Q, 3, vq, NULL, 0), vK = support_view(K, 3, vk, NULL, 0);
        fcl_tensor vV = support_view(V, 3, vk, NULL, 0), vO = wrap(ctx, ob, FCL_F32, 3, vq, NULL, 0);
        const int32_t cq[2] = {0, 3};
        fcl_tensor tq = support_i32_tensor(ctx, 1, n2b, cq), tk = wrap(ctx, ob, FCL_I32, 1, n2b, NULL, 20);
        fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
        cl_event ev = NULL;
        fcl_status st = fcl_attention_varlen_forward(ctx, &p, vQ, vK, vV, tq, tk, 3, 5, vO, NULL, &ev);
        assert_rejected(ctx, st, FCL_ERR_INVALID_ARGUMENT, ev, "cu_seqlens_k");
        assert_buffer_unchanged(ctx, ob, o0, no, "O");
        const fcl_tensor all[] = {vQ, vK, vV, vO, tq, tk};
        for (size_t i = 0; i < 6; i++)
            fcl_tensor_release(all[i]);
    }
    /* decode: O over alibi_slopes */
    {
        const int64_t dq[4] = {1, 1, 2, 8}, dk[4] = {1, 4, 2, 8};
        fcl_tensor dQ = support_tensor_random(ctx, FCL_F32, 4, dq, 97), dO = wrap(ctx, ob, FCL_F32, 4, dq, NULL, 0);
        fcl_tensor Kc = support_tensor_random(ctx, FCL_F32, 4, dk, 98), Vc = support_tensor_random(ctx, FCL_F32, 4, dk, 99);
        fcl_tensor al = wrap(ctx, ob, FCL_F32, 1, n2, NULL, 3);
        const fcl_kv_cache cache = {Kc, Vc, NULL};
        fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
        p.alibi_slopes = al;
        cl_event ev = NULL;
        fcl_status st = fcl_attention_decode(ctx, &p, dQ, &cache, 4, NULL, NULL, dO, NULL, &ev);
        assert_rejected(ctx, st, FCL_ERR_INVALID_ARGUMENT, ev, "alibi_slopes");
        assert_buffer_unchanged(ctx, ob, o0, no, "O");
        const fcl_tensor all[] = {dQ, dO, Kc, Vc, al};
        for (size_t i = 0; i < 5; i++)
            fcl_tensor_release(all[i]);
    }
    free(o0);
    free(l0);
    const fcl_tensor all[] = {Q, K, V, O, LSE};
    for (size_t i = 0; i < 5; i++)
        fcl_tensor_release(all[i]);
    clReleaseMemObject(ob);
    clReleaseMemObject(lb);
    fcl_context_release(ctx);
}

/* A view's offset past INT64_MAX once added to its base's offset. */
Test(abuse, view_offset_overflow_rejected)
{
    fcl_context ctx = support_context();
    cl_mem m = new_buffer(ctx, 64);
    const int64_t n8[1] = {8}, n1[1] = {1};
    fcl_tensor base = wrap(ctx, m, FCL_F32, 1, n8, NULL, 3);
    const int64_t offsets[] = {INT64_MAX, INT64_MAX - 2, INT64_MAX - 3};
    for (size_t c = 0; c < sizeof offsets / sizeof *offsets; c++) {
        fcl_tensor t = NULL;
        fcl_status st = fcl_tensor_view(base, 1, n1, NULL, offsets[c], &t);
        cr_assert(st == FCL_ERR_LAYOUT && t == NULL, "offset %lld: %s (%s)", (long long)offsets[c],
                  fcl_status_string(st), fcl_last_error(ctx));
        support_assert_sentence(fcl_last_error(ctx));
    }
    fcl_tensor_release(base);
    clReleaseMemObject(m);
    fcl_context_release(ctx);
}

/* Outputs that address an element twice (a stride of 0) were accepted, and work-items raced for
 * those elements (oclgrind's data-race check found it in attention_backward_dq when fuzzing):
 * FCL_ERR_LAYOUT naming the output, every buffer untouched; a permuted but distinct layout
 * stays accepted. */
Test(abuse, outputs_repeating_elements_rejected)
{
    fcl_context ctx = support_context();
    const int64_t qs[4] = {1, 3, 2, 8}, ks[4] = {1, 5, 2, 8}, rep[4] = {48, 0, 8, 1};
    fcl_tensor Q = support_tensor_random(ctx, FCL_F32, 4, qs, 121), K = support_tensor_random(ctx, FCL_F32, 4, ks, 122);
    fcl_tensor V = support_tensor_random(ctx, FCL_F32, 4, ks, 123), dO = support_tensor_random(ctx, FCL_F32, 4, qs, 124);
    fcl_tensor O = support_tensor_random(ctx, FCL_F32, 4, qs, 0), dK = support_tensor_random(ctx, FCL_F32, 4, ks, 0);
    fcl_tensor dV = support_tensor_random(ctx, FCL_F32, 4, ks, 0);
    cl_mem ob = new_buffer(ctx, 48 * 4);
    fcl_tensor Orep = wrap(ctx, ob, FCL_F32, 4, qs, rep, 0); /* every row is row 0 */
    size_t n;
    unsigned char *o0 = buffer_sentinel(ctx, ob, &n, 6);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    cl_event ev = NULL;
    fcl_status st = fcl_attention_forward(ctx, &p, Q, K, V, Orep, NULL, &ev);
    assert_rejected(ctx, st, FCL_ERR_LAYOUT, ev, "O");
    SUPPORT_ASSERT_TOKENS(fcl_last_error(ctx), "repeats");
    assert_buffer_unchanged(ctx, ob, o0, n, "O");
    cr_assert(fcl_attention_forward(ctx, &p, Q, K, V, O, NULL, NULL) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    st = fcl_attention_backward(ctx, &p, Q, K, V, NULL, dO, NULL, Orep, dK, dV, &ev);
    assert_rejected(ctx, st, FCL_ERR_LAYOUT, ev, "dQ");
    assert_buffer_unchanged(ctx, ob, o0, n, "dQ");
    /* the cache of an append, and a projection output */
    const int64_t cs[4] = {1, 6, 1, 8}, ns[4] = {1, 2, 1, 8}, crep[4] = {48, 0, 8, 1};
    fcl_tensor Kc = wrap(ctx, ob, FCL_F32, 4, cs, crep, 0), Vc = support_tensor_random(ctx, FCL_F32, 4, cs, 125);
    fcl_tensor Kn = support_tensor_random(ctx, FCL_F32, 4, ns, 126), Vn = support_tensor_random(ctx, FCL_F32, 4, ns, 127);
    const fcl_kv_cache cache = {Kc, Vc, NULL};
    st = fcl_kv_cache_append(ctx, &cache, Kn, Vn, 1, NULL, &ev);
    assert_rejected(ctx, st, FCL_ERR_LAYOUT, ev, "cache.k");
    assert_buffer_unchanged(ctx, ob, o0, n, "cache.k");
    const int64_t xs[2] = {4, 8}, ws[2] = {8, 8}, xrep[2] = {0, 1};
    fcl_tensor X = support_tensor_random(ctx, FCL_F32, 2, xs, 128), W = support_tensor_random(ctx, FCL_F32, 2, ws, 129);
    fcl_tensor Kp = wrap(ctx, ob, FCL_F32, 2, xs, xrep, 0), Vp = support_tensor_random(ctx, FCL_F32, 2, xs, 0);
    const fcl_weight w = {W, NULL, NULL};
    st = fcl_project_kv(ctx, X, &w, &w, Kp, Vp, &ev);
    assert_rejected(ctx, st, FCL_ERR_LAYOUT, ev, "K");
    assert_buffer_unchanged(ctx, ob, o0, n, "K");
    /* [B, H, S, D] storage of O: permuted strides, every element once */
    const int64_t perm[4] = {48, 8, 24, 1};
    fcl_tensor Operm = wrap(ctx, ob, FCL_F32, 4, qs, perm, 0);
    cr_assert(fcl_attention_forward(ctx, &p, Q, K, V, Operm, NULL, NULL) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    free(o0);
    const fcl_tensor all[] = {Q, K, V, dO, O, dK, dV, Orep, Kc, Vc, Kn, Vn, X, W, Kp, Vp, Operm};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        fcl_tensor_release(all[i]);
    clReleaseMemObject(ob);
    fcl_context_release(ctx);
}

/* fcl_pad_head_dim computed D + 31 for head_dim INT64_MAX (undefined behaviour, caught by the
 * sanitizer build): the path getters take any head_dim. */
Test(abuse, path_getters_take_any_head_dim)
{
    fcl_context ctx = support_context();
    const int64_t dims[] = {INT64_MAX, INT64_MAX - 30, (int64_t)INT_MAX + 1, INT_MAX, 257, 0, -1, INT64_MIN};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
        cr_assert(fcl_attention_forward_path(ctx, FCL_F32, dims[i]) != NULL);
        cr_assert(fcl_attention_backward_path(ctx, FCL_F16, dims[i]) != NULL);
        cr_assert(fcl_attention_decode_path(ctx, FCL_BF16, dims[i]) != NULL);
    }
    fcl_context_release(ctx);
}

/* Scratch larger than the device can allocate gave FCL_ERR_OPENCL (CL_INVALID_BUFFER_SIZE):
 * it is FCL_ERR_OUT_OF_MEMORY, before anything is enqueued. Ctx is a broadcast view of 2^29
 * rows (one row stored), so its K and V scratch would be 256 GiB. */
Test(abuse, scratch_beyond_device_is_out_of_memory)
{
    fcl_context ctx = support_context();
    enum { D = 64 };
    const int64_t xs[2] = {1, D}, ws[2] = {D, D}, cs[2] = {(int64_t)1 << 29, D}, bc[2] = {0, 1};
    fcl_tensor X = support_tensor_random(ctx, FCL_F32, 2, xs, 101), row = support_tensor_random(ctx, FCL_F32, 2, xs, 102);
    fcl_tensor C = support_view(row, 2, cs, bc, 0);
    fcl_tensor w[4];
    for (int i = 0; i < 4; i++)
        w[i] = support_tensor_random(ctx, FCL_F32, 2, ws, 103 + (uint64_t)i);
    const fcl_weight wq = {w[0], NULL, NULL}, wk = {w[1], NULL, NULL}, wv = {w[2], NULL, NULL}, wo = {w[3], NULL, NULL};
    cl_mem ob = new_buffer(ctx, D * 4);
    fcl_tensor O = wrap(ctx, ob, FCL_F32, 2, xs, NULL, 0);
    size_t no;
    unsigned char *o0 = buffer_sentinel(ctx, ob, &no, 5);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    cl_event ev = NULL;
    fcl_status st = fcl_attention_qkvo_forward(ctx, &p, 1, X, C, &wq, &wk, &wv, &wo, O, &ev);
    assert_rejected(ctx, st, FCL_ERR_OUT_OF_MEMORY, ev, NULL);
    assert_buffer_unchanged(ctx, ob, o0, no, "O");
    free(o0);
    const fcl_tensor all[] = {X, row, C, w[0], w[1], w[2], w[3], O};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        fcl_tensor_release(all[i]);
    clReleaseMemObject(ob);
    fcl_context_release(ctx);
}
