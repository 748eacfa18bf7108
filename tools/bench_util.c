/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench helpers: clock, median, seeded random data and host inputs, FLOP counts.
 *
 * FLOP counts (two matmuls of 2*D FLOPs per visible (query, key) pair):
 *  - exact:      4 * B * Hq * D * visible_pairs, pairs counted with the bottom-right aligned
 *                window of DESIGN.md;
 *  - convention: what FlashAttention and PyTorch benchmarks report, so figures compare:
 *                4 * B * Hq * Sq * Sk * D, halved when causal; when a sliding window is set
 *                (a bounded window_left, or a window_right without causal) there is no
 *                common convention and the exact count is used. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SEED_Q 101u
#define SEED_K 202u
#define SEED_V 303u

double bench_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *x, int n)
{
    if (n <= 0)
        return 0.0;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

uint64_t bench_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float round_to(fcl_dtype dtype, float x)
{
    if (dtype == FCL_F16)
        return fcl_f16_to_f32(fcl_f32_to_f16(x));
    if (dtype == FCL_BF16)
        return fcl_bf16_to_f32(fcl_f32_to_bf16(x));
    return x;
}

void bench_fill_random(float *x, size_t n, uint64_t seed, fcl_dtype dtype)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(bench_rng_next(&s) >> 11) * 0x1.0p-53; /* [0, 1) */
        x[i] = round_to(dtype, (float)(2.0 * u - 1.0));
    }
}

/* The elements of a block of `period` elements (0: all n) repeated over n. */
static size_t period_block(size_t n, size_t period)
{
    return period && period < n ? period : n;
}

/* Copies x's first `block` elements (es bytes each) over the rest of its n elements. */
static void repeat_block(unsigned char *x, size_t n, size_t block, size_t es)
{
    for (size_t at = block; at < n; at += block)
        memcpy(x + at * es, x, es * (n - at < block ? n - at : block));
}

/* A random block of `period` elements (0: all of x) repeated over x[n]. */
static void fill_periodic(float *x, size_t n, size_t period, uint64_t seed, fcl_dtype dtype)
{
    const size_t block = period_block(n, period);
    bench_fill_random(x, block, seed, dtype);
    repeat_block((unsigned char *)x, n, block, sizeof(float));
}

int bench_host_alloc(bench_host *h, fcl_dtype dtype, size_t nq, size_t nk, size_t kv_period)
{
    h->q = malloc(nq * sizeof(float));
    h->k = malloc(nk * sizeof(float));
    h->v = malloc(nk * sizeof(float));
    h->o = malloc(nq * sizeof(float));
    if (!h->q || !h->k || !h->v || !h->o)
        return -1;
    bench_fill_random(h->q, nq, SEED_Q, dtype);
    fill_periodic(h->k, nk, kv_period, SEED_K, dtype);
    fill_periodic(h->v, nk, kv_period, SEED_V, dtype);
    for (size_t i = 0; i < nq; i++)
        h->o[i] = NAN;
    return 0;
}

void bench_host_free(bench_host *h)
{
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->o);
    h->q = h->k = h->v = h->o = NULL;
}

fcl_status bench_write_periodic(fcl_tensor t, const float *x, size_t n, size_t period)
{
    const fcl_dtype dt = fcl_tensor_dtype(t);
    const size_t es = fcl_dtype_size(dt), block = period_block(n, period);
    unsigned char *raw = dt != FCL_I8 && dt != FCL_I32 ? malloc(n * es) : NULL;
    if (!raw) /* integer dtypes, or no memory for the stored copy: converted element by element */
        return fcl_tensor_write_f32(t, x, n);
    for (size_t i = 0; i < block; i++) {
        const uint16_t h = dt == FCL_F16 ? fcl_f32_to_f16(x[i]) : dt == FCL_BF16 ? fcl_f32_to_bf16(x[i]) : 0;
        memcpy(raw + i * es, dt == FCL_F32 ? (const void *)&x[i] : (const void *)&h, es);
    }
    repeat_block(raw, n, block, es);
    const fcl_status st = fcl_tensor_write_raw(t, raw, n * es);
    free(raw);
    return st;
}

fcl_status bench_make_bshd(fcl_context ctx, fcl_dtype dt, int bhsd, int b, int s, int h, int d, fcl_tensor *out)
{
    int64_t shape[4] = {b, s, h, d};
    if (!bhsd)
        return fcl_tensor_create(ctx, dt, 4, shape, out);
    int64_t store[4] = {b, h, s, d};
    int64_t strides[4] = {(int64_t)h * s * d, d, (int64_t)s * d, 1};
    fcl_tensor base = NULL;
    fcl_status st = fcl_tensor_create(ctx, dt, 4, store, &base);
    if (st == FCL_SUCCESS)
        st = fcl_tensor_view(base, 4, shape, strides, 0, out);
    fcl_tensor_release(base);
    return st;
}

double bench_visible_pairs(const bench_case *c)
{
    int wr = c->causal ? 0 : c->window_right;
    double pairs = 0.0;
    for (long i = 0; i < c->sq; i++) {
        long p = i + c->sk - c->sq;
        long lo = c->window_left < 0 ? 0 : p - c->window_left;
        long hi = wr < 0 ? c->sk - 1 : p + wr;
        if (lo < 0)
            lo = 0;
        if (hi > c->sk - 1)
            hi = c->sk - 1;
        if (hi >= lo)
            pairs += (double)(hi - lo + 1);
    }
    return pairs;
}

double bench_flops_exact(const bench_case *c)
{
    return 4.0 * c->b * c->hq * c->d * bench_visible_pairs(c);
}

double bench_flops_convention(const bench_case *c)
{
    int windowed = c->window_left >= 0 || (!c->causal && c->window_right >= 0);
    if (windowed)
        return bench_flops_exact(c);
    double full = 4.0 * c->b * c->hq * (double)c->sq * c->sk * c->d;
    return c->causal ? full / 2 : full;
}

fcl_attn_params bench_params_of(const bench_case *c)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.causal = c->causal;
    p.window_left = c->window_left;
    p.window_right = c->window_right;
    p.softcap = c->softcap;
    return p;
}

int bench_parse_dtype(const char *s)
{
    if (strcmp(s, "f32") == 0)
        return FCL_F32;
    if (strcmp(s, "f16") == 0)
        return FCL_F16;
    if (strcmp(s, "bf16") == 0)
        return FCL_BF16;
    return -1;
}
