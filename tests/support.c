/* Test helpers: device context, seeded random data, tensors, poison, error measures. */
#include "support.h"
#include "ref_attention.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

fcl_context support_context(void)
{
    fcl_context ctx = NULL;
    fcl_status st = fcl_context_create(NULL, &ctx);
    cr_assert(st == FCL_SUCCESS && ctx != NULL, "fcl_context_create(FLASHCL_DEVICE=%s): %s: %s",
              getenv("FLASHCL_DEVICE") ? getenv("FLASHCL_DEVICE") : "(unset)",
              fcl_status_string(st), fcl_last_error(NULL));
    return ctx;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void support_random(float *x, size_t n, uint64_t seed, float lo, float hi, fcl_dtype dtype)
{
    uint64_t state = seed;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix64(&state) >> 11) * 0x1.0p-53; /* [0, 1) */
        float v = (float)(lo + (hi - lo) * u);
        if (v >= hi) /* float rounding could reach hi */
            v = lo;
        x[i] = ref_round_to_dtype(dtype, v);
    }
}

fcl_tensor support_tensor(fcl_context ctx, fcl_dtype dtype, int ndim, const int64_t *shape,
                          const float *host)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(ctx, dtype, ndim, shape, &t);
    cr_assert(st == FCL_SUCCESS, "fcl_tensor_create: %s: %s", fcl_status_string(st),
              fcl_last_error(ctx));
    if (host) {
        st = fcl_tensor_write_f32(t, host, (size_t)fcl_tensor_numel(t));
        cr_assert(st == FCL_SUCCESS, "fcl_tensor_write_f32: %s: %s", fcl_status_string(st),
                  fcl_last_error(ctx));
    }
    return t;
}

void support_poison(fcl_tensor t)
{
    size_t n = (size_t)fcl_tensor_numel(t);
    float *nan = malloc(sizeof(float) * (n ? n : 1));
    cr_assert(nan != NULL);
    for (size_t i = 0; i < n; i++)
        nan[i] = NAN;
    fcl_status st = fcl_tensor_write_f32(t, nan, n);
    free(nan);
    cr_assert(st == FCL_SUCCESS, "poison: fcl_tensor_write_f32: %s", fcl_status_string(st));
}

double support_max_err_f(const float *a, const double *ref, size_t n)
{
    double err = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(ref[i]))
            return INFINITY;
        if (isinf(a[i]) && isinf(ref[i]) && (a[i] > 0) == (ref[i] > 0))
            continue; /* the same infinity */
        double e = fabs((double)a[i] - ref[i]);
        if (e > err)
            err = e;
    }
    return err;
}

int support_within(double err, double naive_err, double factor)
{
    return err <= factor * naive_err + 1e-5;
}
