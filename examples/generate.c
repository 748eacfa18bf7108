/* SPDX-License-Identifier: Apache-2.0 */
/* A generation loop over a paged KV cache (vLLM style), F16: two sequences whose keys and values
 * live in pages of 16 positions, scattered over a shared pool by a block table. Prefill appends
 * the 20-token prompts to the cache and runs causal attention over them; then each decode step
 * appends one token's K/V and attends its query to the whole cache so far. (Q, K and V are random
 * here; in a model they come from the layer's projections.) Checks the prompt's outputs and every
 * step's output against a host computation over the keys so far. */
#include "example.h"

#include <string.h>

enum { B = 2, HQ = 4, HKV = 2, D = 64, PAGE = 16, MAX_PAGES = 4, NUM_PAGES = 8, PROMPT = 20, STEPS = 6 };
enum { L_MAX = PAGE * MAX_PAGES };

/* Host copy of every key and value appended so far: [B, L_MAX, HKV, D]. */
static float host_k[B][L_MAX][HKV][D], host_v[B][L_MAX][HKV][D];

/* Keeps rows [pos, pos + len) of new K/V [B, len, HKV, D] in the host copy. */
static void host_append(const float *k, const float *v, int pos, int len)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < len; t++) {
            memcpy(host_k[b][pos + t], k + ((size_t)b * len + t) * HKV * D, sizeof(float) * HKV * D);
            memcpy(host_v[b][pos + t], v + ((size_t)b * len + t) * HKV * D, sizeof(float) * HKV * D);
        }
}

/* Max error of O [B, rows, HQ, D] against attention of query row t (at position first + t) over
 * the host cache's keys 0..first + t. */
static double check(const float *q, const float *o, int rows, int first)
{
    double max_err = 0.0, ref[D];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < rows; t++)
            for (int h = 0; h < HQ; h++) {
                const size_t qi = (((size_t)b * rows + t) * HQ + h) * D;
                const int g = h / (HQ / HKV);
                host_attention_row(q + qi, host_k[b][0][g], host_v[b][0][g], first + t + 1, (long)HKV * D, D,
                                   1.0 / sqrt(D), ref);
                max_err = max_abs_diff(max_err, o + qi, ref, D);
            }
    return max_err;
}

/* An F16 tensor of `shape` holding `x` (converted on the host). */
static fcl_tensor f16_tensor(fcl_context ctx, const int64_t *shape, const float *x)
{
    fcl_tensor t;
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F16, 4, shape, &t));
    if (x)
        CHECK(ctx, fcl_tensor_write_f32(t, x, (size_t)fcl_tensor_numel(t)));
    return t;
}

int main(void)
{
    fcl_context ctx = NULL;
    CHECK(NULL, fcl_context_create(NULL, &ctx));

    /* The cache: a pool of pages [NUM_PAGES, PAGE, HKV, D] for K and for V, and the block table
     * I32 [B, MAX_PAGES]: position j of sequence b is row j % PAGE of page table[b][j / PAGE]. */
    const int32_t table[B][MAX_PAGES] = {{5, 0, 3, 6}, {1, 7, 2, 4}};
    const int64_t page_shape[4] = {NUM_PAGES, PAGE, HKV, D}, table_shape[2] = {B, MAX_PAGES};
    fcl_kv_cache cache;
    cache.k = f16_tensor(ctx, page_shape, NULL);
    cache.v = f16_tensor(ctx, page_shape, NULL);
    CHECK(ctx, fcl_tensor_create(ctx, FCL_I32, 2, table_shape, &cache.block_table));
    CHECK(ctx, fcl_tensor_write_raw(cache.block_table, table, sizeof table));
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    int failed = 0;

    /* Prefill: append the prompts' K/V at position 0, causal attention over the prompts. */
    const int64_t pq[4] = {B, PROMPT, HQ, D}, pk[4] = {B, PROMPT, HKV, D};
    float *q = random_values((size_t)B * PROMPT * HQ * D, 10, 1);
    float *k = random_values((size_t)B * PROMPT * HKV * D, 11, 1);
    float *v = random_values((size_t)B * PROMPT * HKV * D, 12, 1);
    float *o = xmalloc(sizeof(float) * B * PROMPT * HQ * D);
    fcl_tensor Q = f16_tensor(ctx, pq, q), K = f16_tensor(ctx, pk, k), V = f16_tensor(ctx, pk, v);
    fcl_tensor O = f16_tensor(ctx, pq, NULL);
    CHECK(ctx, fcl_kv_cache_append(ctx, &cache, K, V, 0, NULL, NULL));
    p.causal = 1;
    CHECK(ctx, fcl_attention_forward(ctx, &p, Q, K, V, O, NULL, NULL));
    CHECK(ctx, fcl_tensor_read_f32(O, o, (size_t)B * PROMPT * HQ * D));
    host_append(k, v, 0, PROMPT);
    failed |= report("prefill (F16, paged cache)", check(q, o, PROMPT, 0), 2e-3);
    fcl_tensor_release(Q);
    fcl_tensor_release(K);
    fcl_tensor_release(V);
    fcl_tensor_release(O);
    free(q);
    free(k);
    free(v);
    free(o);

    /* Decode: one token per step; the step's tensors are made once and refilled. */
    const int64_t sq[4] = {B, 1, HQ, D}, sk[4] = {B, 1, HKV, D};
    Q = f16_tensor(ctx, sq, NULL);
    K = f16_tensor(ctx, sk, NULL);
    V = f16_tensor(ctx, sk, NULL);
    O = f16_tensor(ctx, sq, NULL);
    p = fcl_attn_params_default(); /* decode is causal by construction */
    o = xmalloc(sizeof(float) * B * HQ * D);
    double max_err = 0.0;
    for (int step = 0; step < STEPS; step++) {
        const int pos = PROMPT + step; /* the new token's position; the cache then holds pos + 1 */
        q = random_values((size_t)B * HQ * D, 100 + 3 * step, 1);
        k = random_values((size_t)B * HKV * D, 101 + 3 * step, 1);
        v = random_values((size_t)B * HKV * D, 102 + 3 * step, 1);
        CHECK(ctx, fcl_tensor_write_f32(Q, q, (size_t)B * HQ * D));
        CHECK(ctx, fcl_tensor_write_f32(K, k, (size_t)B * HKV * D));
        CHECK(ctx, fcl_tensor_write_f32(V, v, (size_t)B * HKV * D));
        CHECK(ctx, fcl_kv_cache_append(ctx, &cache, K, V, pos, NULL, NULL));
        CHECK(ctx, fcl_attention_decode(ctx, &p, Q, &cache, pos + 1, NULL, NULL, O, NULL, NULL));
        CHECK(ctx, fcl_tensor_read_f32(O, o, (size_t)B * HQ * D));
        host_append(k, v, pos, 1);
        max_err = fmax(max_err, check(q, o, 1, pos));
        free(q);
        free(k);
        free(v);
    }
    failed |= report("decode steps (F16, paged cache)", max_err, 2e-3);

    fcl_tensor_release(Q);
    fcl_tensor_release(K);
    fcl_tensor_release(V);
    fcl_tensor_release(O);
    fcl_tensor_release(cache.k);
    fcl_tensor_release(cache.v);
    fcl_tensor_release(cache.block_table);
    fcl_context_release(ctx);
    free(o);
    return failed;
}
