/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flashcl-gemm-bench: times one projection GEMM layout through the library's internal entry
 * points (src/gemm/linear.h; a measuring aid, not installed) on the FLASHCL_DEVICE device, on F16
 * operands of random values (bench_util.c), whichever kernel runs it there (FLASHCL_GEMM, FLASHCL_GEMM_*_TILES
 * apply). Prints the best of ROUNDS rounds (default 20, after 2 warm-up rounds) of 5 calls each,
 * in microseconds per call, and TFLOP/s (2 M N K per call).
 *   flashcl-gemm-bench LAYOUT M N K [ROUNDS]
 * LAYOUT, as the projection ops use them (A, B: the GEMM's operands):
 *   fwd   Y [M, N] = X [M, K] W^T, W [N, K]            A and B K-contiguous (fcl_linear_enqueue)
 *   gin   Y [M, K] = G [M, N] W, W [N, K]              B N-contiguous (fcl_linear_grad_input)
 *   gina  the same, accumulating into Y
 *   gw    dW [N, K] += G [M, N]^T X [M, K], dW F16     A and B MN-contiguous (fcl_linear_grad_weight)
 *   gw32  the same with dW F32
 */
#include "bench.h"
#include "gemm/linear.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A [rows, cols] tensor of dtype dt holding `values` (NULL: left as allocated); NULL on failure. */
static fcl_tensor make(fcl_context ctx, fcl_dtype dt, int64_t rows, int64_t cols, const float *values)
{
    const int64_t shape[2] = {rows, cols};
    fcl_tensor t = NULL;
    if (fcl_tensor_create(ctx, dt, 2, shape, &t) != FCL_SUCCESS ||
        (values && fcl_tensor_write_f32(t, values, (size_t)(rows * cols)) != FCL_SUCCESS)) {
        fprintf(stderr, "flashcl-gemm-bench: %s\n", fcl_last_error(ctx));
        fcl_tensor_release(t);
        return NULL;
    }
    return t;
}

/* One call of `layout` on a (first input), b (second input) and c (output). */
static fcl_status call(fcl_context ctx, const char *layout, fcl_tensor a, fcl_tensor b, fcl_tensor c)
{
    const fcl_weight w = {b, NULL, NULL};
    if (!strcmp(layout, "fwd"))
        return fcl_linear_enqueue(ctx, a, &w, c, NULL);
    if (!strcmp(layout, "gin") || !strcmp(layout, "gina"))
        return fcl_linear_grad_input(ctx, a, &w, c, !strcmp(layout, "gina"));
    return fcl_linear_grad_weight(ctx, a, b, c);
}

int main(int argc, char **argv)
{
    static const char *const layouts[] = {"fwd", "gin", "gina", "gw", "gw32"};
    int known = 0;
    for (size_t i = 0; argc >= 5 && i < sizeof layouts / sizeof *layouts; i++)
        known |= !strcmp(argv[1], layouts[i]);
    const long M = argc >= 5 ? atol(argv[2]) : 0, N = argc >= 5 ? atol(argv[3]) : 0, K = argc >= 5 ? atol(argv[4]) : 0;
    const int rounds = argc >= 6 ? atoi(argv[5]) : 20;
    if (!known || M <= 0 || N <= 0 || K <= 0 || rounds <= 0) {
        fprintf(stderr, "usage: flashcl-gemm-bench fwd|gin|gina|gw|gw32 M N K [ROUNDS]\n");
        return 2;
    }
    const char *layout = argv[1];
    fcl_context ctx;
    if (fcl_context_create(NULL, &ctx) != FCL_SUCCESS) {
        fprintf(stderr, "flashcl-gemm-bench: %s\n", fcl_last_error(NULL));
        return 1;
    }
    /* shapes (rows, cols) of the first input, the second input and the output */
    const int fwd = !strcmp(layout, "fwd"), gw = layout[1] == 'w';
    const long shapes[3][2] = {{M, fwd ? K : N}, {fwd ? N : gw ? M : N, K}, {gw ? N : M, fwd ? N : K}};
    const size_t most = (size_t)(M > N ? M : N) * (size_t)(N > K ? N : K) * 2;
    float *values = malloc(most * sizeof *values);
    int rc = 1;
    fcl_tensor t[3] = {NULL, NULL, NULL};
    if (!values)
        goto done;
    bench_fill_random(values, most, 1, FCL_F16);
    for (int i = 0; i < 3; i++) {
        const fcl_dtype dt = i == 2 && !strcmp(layout, "gw32") ? FCL_F32 : FCL_F16;
        if (!(t[i] = make(ctx, dt, shapes[i][0], shapes[i][1], i < 2 || !fwd ? values : NULL)))
            goto done;
    }
    double best = 1e30;
    for (int r = 0; r < rounds + 2; r++) {
        fcl_finish(ctx);
        const double t0 = bench_now_ms();
        for (int i = 0; i < 5; i++)
            if (call(ctx, layout, t[0], t[1], t[2]) != FCL_SUCCESS || (i == 4 && fcl_finish(ctx) != FCL_SUCCESS)) {
                fprintf(stderr, "flashcl-gemm-bench: %s\n", fcl_last_error(ctx));
                goto done;
            }
        const double ms = (bench_now_ms() - t0) / 5;
        if (r >= 2 && ms < best)
            best = ms;
    }
    printf("%s M %ld N %ld K %ld: %.1f us, %.0f TFLOP/s (%s)\n", layout, M, N, K, best * 1e3,
           2.0 * (double)M * (double)N * (double)K / best / 1e9, fcl_projection_path(ctx, FCL_F16, FCL_F16));
    rc = 0;
done:
    for (int i = 0; i < 3; i++)
        fcl_tensor_release(t[i]);
    free(values);
    fcl_context_release(ctx);
    return rc;
}
