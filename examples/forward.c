/* SPDX-License-Identifier: Apache-2.0 */
/* Dense attention forward: Q [B, S, Hq, D], K and V [B, S, Hkv, D] in F16 (GQA: two query heads
 * per KV head), causal. Checks every output against a host computation. */
#include "example.h"

int main(void)
{
    enum { B = 2, S = 48, HQ = 4, HKV = 2, D = 64 };
    fcl_context ctx = NULL;
    CHECK(NULL, fcl_context_create(NULL, &ctx)); /* FLASHCL_DEVICE, else the default device */
    fcl_device_info info;
    CHECK(ctx, fcl_context_device_info(ctx, &info));
    printf("device: %s (%s)\n", info.name, info.platform_name);

    const int64_t qshape[4] = {B, S, HQ, D}, kshape[4] = {B, S, HKV, D};
    const size_t nq = (size_t)B * S * HQ * D, nk = (size_t)B * S * HKV * D;
    float *q = random_values(nq, 1, 1), *k = random_values(nk, 2, 1), *v = random_values(nk, 3, 1);
    float *o = xmalloc(sizeof(float) * nq);

    fcl_tensor Q, K, V, O;
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F16, 4, qshape, &Q));
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F16, 4, kshape, &K));
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F16, 4, kshape, &V));
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F16, 4, qshape, &O));
    CHECK(ctx, fcl_tensor_write_f32(Q, q, nq)); /* converted to F16 on the host */
    CHECK(ctx, fcl_tensor_write_f32(K, k, nk));
    CHECK(ctx, fcl_tensor_write_f32(V, v, nk));

    fcl_attn_params p = FCL_ATTN_PARAMS_INIT; /* scale 1/sqrt(D) */
    p.causal = 1;
    CHECK(ctx, fcl_attention_forward(ctx, &p, Q, K, V, O, NULL, NULL)); /* enqueued, not waited */
    CHECK(ctx, fcl_tensor_read_f32(O, o, nq));                          /* waits, then copies */

    /* query (b, i, h) sees keys 0..i of KV head h / (HQ / HKV) */
    double max_err = 0.0, ref[D];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < S; i++)
            for (int h = 0; h < HQ; h++) {
                const size_t qi = (((size_t)b * S + i) * HQ + h) * D;
                const size_t k0 = ((size_t)b * S * HKV + h / (HQ / HKV)) * D;
                host_attention_row(q + qi, k + k0, v + k0, i + 1, (long)HKV * D, D, 1.0 / sqrt(D), ref);
                max_err = max_abs_diff(max_err, o + qi, ref, D);
            }

    fcl_tensor_release(Q);
    fcl_tensor_release(K);
    fcl_tensor_release(V);
    fcl_tensor_release(O);
    fcl_context_release(ctx); /* after its tensors */
    free(q);
    free(k);
    free(v);
    free(o);
    return report("forward (F16, causal, GQA)", max_err, 2e-3); /* F16 output rounding: <= 1e-3 */
}
