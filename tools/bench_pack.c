/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench packing of the varlen and packed_qkv ops: `seqs` sequences of lengths drawn
 * uniformly from [1, max_len] with a fixed seed, packed back to back; their prefix sums, the
 * packed-QKV row bounds, the default case, the exact FLOP count and the result fields. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#define SEED_LENGTHS 0x1E565EEDull

bench_case bench_pack_default(const bench_env *env, int *seqs, int *max_len)
{
    bench_case c = {FCL_F16, 1, 0, 0, 12, 12, 64, 0, -1, -1, 0.0f, 0};
    *seqs = env->is_gpu ? 64 : 8;
    *max_len = env->is_gpu ? 2048 : 256;
    return c;
}

int bench_pack_make(bench_pack *p, int seqs, int max_len)
{
    uint64_t s = SEED_LENGTHS;
    p->seqs = seqs;
    p->max_len = max_len;
    p->total = 0;
    p->longest = 0;
    p->cu = malloc(sizeof *p->cu * ((size_t)seqs + 1));
    if (!p->cu)
        return -1;
    p->cu[0] = 0;
    for (int i = 0; i < seqs; i++) {
        int len = 1 + (int)(bench_rng_next(&s) % (uint64_t)max_len);
        p->longest = len > p->longest ? len : p->longest;
        p->total += len;
        p->cu[i + 1] = (int32_t)p->total;
    }
    return 0;
}

void bench_pack_free(bench_pack *p)
{
    free(p->cu);
    p->cu = NULL;
}

int32_t *bench_pack_bounds(const bench_pack *p)
{
    int32_t *b = malloc(sizeof *b * 2 * (size_t)(p->total > 0 ? p->total : 1));
    if (!b)
        return NULL;
    for (int s = 0; s < p->seqs; s++)
        for (int32_t r = p->cu[s]; r < p->cu[s + 1]; r++) {
            b[2 * (size_t)r] = p->cu[s];
            b[2 * (size_t)r + 1] = p->cu[s + 1];
        }
    return b;
}

double bench_pack_flops(const bench_pack *p, const bench_case *c)
{
    bench_case one = *c;
    double pairs = 0.0;
    one.b = 1;
    for (int s = 0; s < p->seqs; s++) {
        one.sq = one.sk = p->cu[s + 1] - p->cu[s];
        pairs += bench_visible_pairs(&one);
    }
    return 4.0 * c->hq * c->d * pairs;
}

void bench_pack_finish(const bench_env *env, const bench_pack *p, const bench_host *h,
                       bench_result *r)
{
    double flops = bench_pack_flops(p, &r->c);
    bench_check_in in = {.c = &r->c, .q = h->q, .k = h->k, .v = h->v, .o = h->o,
                         .check_rows = env->check_rows, .cu = p->cu, .seqs = p->seqs};
    r->seqs = p->seqs;
    r->max_len = p->max_len;
    r->total_q = r->total_k = p->total;
    bench_check_forward(&in, r);
    r->tflops = r->tflops_exact = flops / (r->ms * 1e-3) * 1e-12;
    r->tflops_event = flops / (r->ms_event * 1e-3) * 1e-12;
}

int bench_pack_write_qkv(const bench_env *env, const bench_pack *p, const bench_host *h, size_t row, fcl_tensor qkv,
                         fcl_tensor bounds)
{
    const size_t L = (size_t)p->total;
    float *fused = malloc(sizeof *fused * 3 * row * (L > 0 ? L : 1));
    int32_t *b = bench_pack_bounds(p);
    int rc = 0;
    if (!fused || !b) {
        fprintf(stderr, "flashcl-bench: out of host memory for the inputs\n");
        rc = BENCH_EXIT_LIBRARY;
    } else {
        for (size_t r = 0; r < L; r++) {
            memcpy(fused + (3 * r + 0) * row, h->q + r * row, sizeof *fused * row);
            memcpy(fused + (3 * r + 1) * row, h->k + r * row, sizeof *fused * row);
            memcpy(fused + (3 * r + 2) * row, h->v + r * row, sizeof *fused * row);
        }
        fcl_status st = fcl_tensor_write_f32(qkv, fused, 3 * row * L);
        if (!st) st = fcl_tensor_write_raw(bounds, b, sizeof *b * 2 * L);
        if (st) rc = bench_lib_error(env, "writing QKV and the bounds", st);
    }
    free(fused);
    free(b);
    return rc;
}

void bench_unpack_qkv(const float *qkv, float *q, float *k, float *v, size_t rows, size_t row)
{
    for (size_t r = 0; r < rows; r++) {
        memcpy(q + r * row, qkv + (3 * r + 0) * row, sizeof *q * row);
        memcpy(k + r * row, qkv + (3 * r + 1) * row, sizeof *k * row);
        memcpy(v + r * row, qkv + (3 * r + 2) * row, sizeof *v * row);
    }
}
