/* SPDX-License-Identifier: Apache-2.0 */
/* A varlen encoder batch: three sentences of different lengths packed back to back without
 * padding, Q/K/V [total, H, D] in F32, the sequences' bounds given as prefix sums cu_seqlens =
 * {0, 5, 22, 31} (I32, on the device), bidirectional attention inside each sentence. Checks every
 * output against a host computation per sentence. */
#include "example.h"

int main(void)
{
    enum { SEQS = 3, H = 4, D = 32 };
    const int32_t cu[SEQS + 1] = {0, 5, 22, 31}; /* lengths 5, 17, 9 */
    const int total = cu[SEQS], max_len = 17;
    fcl_context ctx = NULL;
    CHECK(NULL, fcl_context_create(NULL, &ctx));

    const int64_t shape[3] = {total, H, D}, cu_shape[1] = {SEQS + 1};
    const size_t n = (size_t)total * H * D;
    float *q = random_values(n, 4, 0), *k = random_values(n, 5, 0), *v = random_values(n, 6, 0);
    float *o = xmalloc(sizeof(float) * n);

    fcl_tensor Q, K, V, O, CU;
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F32, 3, shape, &Q));
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F32, 3, shape, &K));
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F32, 3, shape, &V));
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F32, 3, shape, &O));
    CHECK(ctx, fcl_tensor_create(ctx, FCL_I32, 1, cu_shape, &CU));
    CHECK(ctx, fcl_tensor_write_f32(Q, q, n));
    CHECK(ctx, fcl_tensor_write_f32(K, k, n));
    CHECK(ctx, fcl_tensor_write_f32(V, v, n));
    CHECK(ctx, fcl_tensor_write_raw(CU, cu, sizeof cu));
    /* optional: read the prefix sums back and check them once (the kernels never read outside
     * the tensors whatever they hold, but wrong ones give wrong rows) */
    CHECK(ctx, fcl_varlen_validate(ctx, CU, CU, total, total, max_len, max_len));

    fcl_attn_params p = FCL_ATTN_PARAMS_INIT; /* not causal: an encoder */
    CHECK(ctx, fcl_attention_varlen_forward(ctx, &p, Q, K, V, CU, CU, max_len, max_len, O, NULL, NULL));
    CHECK(ctx, fcl_tensor_read_f32(O, o, n));

    double max_err = 0.0, ref[D];
    for (int s = 0; s < SEQS; s++)
        for (int r = cu[s]; r < cu[s + 1]; r++)
            for (int h = 0; h < H; h++) {
                const size_t qi = ((size_t)r * H + h) * D, k0 = ((size_t)cu[s] * H + h) * D;
                host_attention_row(q + qi, k + k0, v + k0, cu[s + 1] - cu[s], (long)H * D, D, 1.0 / sqrt(D), ref);
                max_err = max_abs_diff(max_err, o + qi, ref, D);
            }

    fcl_tensor_release(Q);
    fcl_tensor_release(K);
    fcl_tensor_release(V);
    fcl_tensor_release(O);
    fcl_tensor_release(CU);
    fcl_context_release(ctx);
    free(q);
    free(k);
    free(v);
    free(o);
    return report("varlen encoder batch (F32, 3 sequences)", max_err, 1e-5);
}
