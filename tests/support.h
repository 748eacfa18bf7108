/* Helpers shared by the Criterion tests: a context on FLASHCL_DEVICE, seeded random data,
 * tensors from host arrays, and the DESIGN.md tolerance rule. */
#ifndef FLASHCL_TEST_SUPPORT_H
#define FLASHCL_TEST_SUPPORT_H

#include <flashcl/flashcl.h>
#include <stddef.h>
#include <stdint.h>

/* A new context on FLASHCL_DEVICE (default device when unset); fails the test (cr_assert)
 * with fcl_last_error's message when none can be made. Release with fcl_context_release. */
fcl_context support_context(void);

/* Fills x[n] with uniform values in [lo, hi) from a fixed-seed generator (splitmix64), then
 * rounds each to `dtype` so host data equals device data exactly. */
void support_random(float *x, size_t n, uint64_t seed, float lo, float hi, fcl_dtype dtype);

/* A new contiguous tensor of `dtype` filled from host floats (asserts on failure). */
fcl_tensor support_tensor(fcl_context ctx, fcl_dtype dtype, int ndim, const int64_t *shape,
                          const float *host);

/* Fills every element of t with NaN (the poison put into outputs before each run). */
void support_poison(fcl_tensor t);

/* Max |a - b| over n elements, NaN-aware: any NaN in a gives +INFINITY. */
double support_max_err_f(const float *a, const double *ref, size_t n);

/* The DESIGN.md rule: err <= factor * naive_err + 1e-5. */
int support_within(double err, double naive_err, double factor);

#endif
