/* SPDX-License-Identifier: Apache-2.0 */
/* One self-attention layer with int8 weights (W8A16): X [L, DM] in F16; Q, K, V = X W^T + b
 * with each W an I8 [DM, DM] matrix and F32 per-output-row scales (row n is w[n, :] * scale[n]),
 * F16 biases; causal attention over 4 heads; O = A Wo^T + bo. At this length the weights are
 * converted on their way into the products, never copied to a float matrix (Hopper converts the
 * weights first for GEMMs of 2048 rows or more, 1024 with BF16 activations). Checks O against a
 * host computation in double. */
#include "example.h"

#include <stdint.h>

enum { L = 24, DM = 128, HEADS = 4, HD = DM / HEADS };

typedef struct host_weight {
    int8_t w[DM * DM];
    float scale[DM], bias[DM];
} host_weight;

/* Random int8 weights, their row scales (about 1/sqrt(DM) per unit of the int8 range) and
 * F16-exact biases; the device tensors of the same values in *out. */
static void make_weight(fcl_context ctx, host_weight *h, unsigned seed, fcl_weight *out)
{
    float *r = random_values(DM * DM, seed, 0), *s = random_values(DM, seed + 1, 0);
    float *b = random_values(DM, seed + 2, 1);
    for (int i = 0; i < DM * DM; i++)
        h->w[i] = (int8_t)lrintf(r[i] * 127.0f);
    for (int n = 0; n < DM; n++) {
        h->scale[n] = (1.0f + 0.25f * s[n]) / (127.0f * sqrtf((float)DM));
        h->bias[n] = 0.1f * b[n];
        h->bias[n] = fcl_f16_to_f32(fcl_f32_to_f16(h->bias[n]));
    }
    const int64_t wshape[2] = {DM, DM}, nshape[1] = {DM};
    CHECK(ctx, fcl_tensor_create(ctx, FCL_I8, 2, wshape, &out->w));
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F32, 1, nshape, &out->scale));
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F16, 1, nshape, &out->bias)); /* the activations' dtype */
    CHECK(ctx, fcl_tensor_write_raw(out->w, h->w, sizeof h->w));
    CHECK(ctx, fcl_tensor_write_f32(out->scale, h->scale, DM));
    CHECK(ctx, fcl_tensor_write_f32(out->bias, h->bias, DM));
    free(r);
    free(s);
    free(b);
}

static void release_weight(fcl_weight *w)
{
    fcl_tensor_release(w->w);
    fcl_tensor_release(w->scale);
    fcl_tensor_release(w->bias);
}

/* y[L, DM] = x[L, DM] W^T + b with W dequantised (double). */
static void host_project(const double *x, const host_weight *h, double *y)
{
    for (int i = 0; i < L; i++)
        for (int n = 0; n < DM; n++) {
            double acc = 0.0;
            for (int c = 0; c < DM; c++)
                acc += x[i * DM + c] * h->w[n * DM + c];
            y[i * DM + n] = acc * h->scale[n] + h->bias[n];
        }
}

int main(void)
{
    static host_weight hq, hk, hv, ho;
    fcl_context ctx = NULL;
    CHECK(NULL, fcl_context_create(NULL, &ctx));
    fcl_weight wq, wk, wv, wo;
    make_weight(ctx, &hq, 20, &wq);
    make_weight(ctx, &hk, 30, &wk);
    make_weight(ctx, &hv, 40, &wv);
    make_weight(ctx, &ho, 50, &wo);

    const int64_t xshape[2] = {L, DM};
    float *x = random_values(L * DM, 60, 1), *o = xmalloc(sizeof(float) * L * DM);
    fcl_tensor X, O;
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F16, 2, xshape, &X));
    CHECK(ctx, fcl_tensor_create(ctx, FCL_F16, 2, xshape, &O));
    CHECK(ctx, fcl_tensor_write_f32(X, x, L * DM));
    printf("projection GEMM: %s\n", fcl_projection_path(ctx, FCL_F16, FCL_I8));

    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.causal = 1;
    CHECK(ctx, fcl_attention_qkvo_forward(ctx, &p, HEADS, X, NULL, &wq, &wk, &wv, &wo, O, NULL));
    CHECK(ctx, fcl_tensor_read_f32(O, o, L * DM));

    /* host: the projections, causal attention per head, the output projection */
    static double xd[L * DM], q[L * DM], k[L * DM], v[L * DM], a[L * DM], ref[L * DM];
    for (int i = 0; i < L * DM; i++)
        xd[i] = x[i];
    host_project(xd, &hq, q);
    host_project(xd, &hk, k);
    host_project(xd, &hv, v);
    static float qf[L * DM], kf[L * DM], vf[L * DM];
    for (int i = 0; i < L * DM; i++) {
        qf[i] = (float)q[i];
        kf[i] = (float)k[i];
        vf[i] = (float)v[i];
    }
    for (int i = 0; i < L; i++)
        for (int h = 0; h < HEADS; h++)
            host_attention_row(qf + i * DM + h * HD, kf + h * HD, vf + h * HD, i + 1, DM, HD, 1.0 / sqrt(HD),
                               a + i * DM + h * HD);
    host_project(a, &ho, ref);
    const double max_err = max_abs_diff(0.0, o, ref, (size_t)L * DM);

    fcl_tensor_release(X);
    fcl_tensor_release(O);
    release_weight(&wq);
    release_weight(&wk);
    release_weight(&wv);
    release_weight(&wo);
    fcl_context_release(ctx);
    free(x);
    free(o);
    /* Q, K, V and the attention output are stored in F16 between the steps: ~1e-3 */
    return report("qkvo layer (F16 activations, int8 weights)", max_err, 5e-3);
}
