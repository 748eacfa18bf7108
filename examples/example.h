/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the examples: error checks, random inputs, and a plain host attention row
 * that each example compares its result with. Not part of flashcl's API. */
#ifndef FLASHCL_EXAMPLE_H
#define FLASHCL_EXAMPLE_H

#include <flashcl/flashcl.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Runs a flashcl call; on an error prints where, the status and fcl_last_error's sentence and
 * exits 1. */
#define CHECK(ctx, call)                                                                            \
    do {                                                                                            \
        fcl_status st_ = (call);                                                                    \
        if (st_ != FCL_SUCCESS) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, fcl_status_string(st_),           \
                    fcl_last_error(ctx));                                                           \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* malloc that exits on failure. */
static inline void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    return p;
}

/* n uniform values in [-1, 1) from `seed`; with `f16` rounded through half precision, so the
 * host holds exactly what an F16 tensor stores. */
static inline float *random_values(size_t n, unsigned seed, int f16)
{
    float *x = xmalloc(sizeof(float) * n);
    unsigned long long s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
        if (f16)
            x[i] = fcl_f16_to_f32(fcl_f32_to_f16(x[i]));
    }
    return x;
}

/* out[d] = sum_j softmax_j(scale * q . k_j) v_j[d] over keys j in [0, nkeys), where key j's
 * row starts at k + j * kstride (and v + j * kstride), head dim D. */
static inline void host_attention_row(const float *q, const float *k, const float *v, long nkeys,
                                      long kstride, int D, double scale, double *out)
{
    double m = -INFINITY, l = 0.0;
    double *s = xmalloc(sizeof(double) * (size_t)(nkeys ? nkeys : 1));
    for (long j = 0; j < nkeys; j++) {
        double dot = 0.0;
        for (int d = 0; d < D; d++)
            dot += (double)q[d] * k[j * kstride + d];
        s[j] = dot * scale;
        m = s[j] > m ? s[j] : m;
    }
    for (int d = 0; d < D; d++)
        out[d] = 0.0;
    for (long j = 0; j < nkeys; j++) {
        const double p = exp(s[j] - m);
        l += p;
        for (int d = 0; d < D; d++)
            out[d] += p * v[j * kstride + d];
    }
    for (int d = 0; d < D; d++)
        out[d] = nkeys ? out[d] / l : 0.0;
    free(s);
}

/* The largest |got[i] - want[i]| over n values, at least `so_far` (a NaN in got is returned as NaN).
 * A plain loop: Debian 12's aarch64 gcc vectorises an fmax reduction over this into a crash. */
static inline double max_abs_diff(double so_far, const float *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - want[i]);
        if (!(e <= so_far))
            so_far = e;
    }
    return so_far;
}

/* Prints the example's verdict; the exit code: 0 when max_err <= tol. */
static inline int report(const char *name, double max_err, double tol)
{
    const int ok = max_err <= tol;
    printf("%s: max |flashcl - host| = %.3g (tolerance %.3g): %s\n", name, max_err, tol, ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}

#endif
