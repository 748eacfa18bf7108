/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the Criterion tests: a context on FLASHCL_DEVICE, seeded random data,
 * tensors from host arrays, and the DESIGN.md tolerance rule. */
#ifndef FLASHCL_TEST_SUPPORT_H
#define FLASHCL_TEST_SUPPORT_H

#include <flashcl/flashcl.h>

#include "ref_projection.h"
#include <stddef.h>
#include <stdint.h>

/* A new context on FLASHCL_DEVICE (default device when unset); fails the test (cr_assert)
 * with fcl_last_error's message when none can be made, and when FLASHCL_FORWARD_PATH=blocked
 * (or nvidia-wgmma: F16 at D 64) but the device would run another forward kernel, or when
 * FLASHCL_BACKWARD_PATH=nvidia-wgmma but another backward would run at F16 D 64 (so a forced run
 * never passes on the fallback). Release with fcl_context_release. */
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

/* The DESIGN.md rule's bound on a kernel's error: factor * naive_err + 1e-5. */
double support_bound(double naive_err, double factor);

/* The DESIGN.md rule: err <= support_bound(naive_err, factor). */
int support_within(double err, double naive_err, double factor);

/* The context's program-cache counters (fcl_context_cache_stats; fails the test on error), and a
 * printf format with its arguments for all five. */
fcl_cache_stats support_cache_stats(fcl_context ctx);
#define STATS_FMT "compiles %llu, memory_hits %llu, disk_hits %llu, disk_writes %llu, disk_rejects %llu"
#define STATS_ARGS(s)                                                                                    \
    (unsigned long long)(s).compiles, (unsigned long long)(s).memory_hits,                               \
        (unsigned long long)(s).disk_hits, (unsigned long long)(s).disk_writes,                          \
        (unsigned long long)(s).disk_rejects

/* malloc that fails the test instead of returning NULL (n = 0 allowed). */
void *support_xmalloc(size_t n);

/* Whole-tensor host copies through float32 that fail the test on error. */
void support_write(fcl_tensor t, const float *x);
void support_read(fcl_tensor t, float *x);

/* fcl_tensor_view that fails the test on error. */
fcl_tensor support_view(fcl_tensor base, int ndim, const int64_t *shape, const int64_t *strides, int64_t offset);

/* A new tensor, filled with seeded random values in [-1, 1) when seed != 0. */
fcl_tensor support_tensor_random(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape, uint64_t seed);

/* Writes a salted byte pattern into t and returns a malloc'd copy of it (*bytes long). */
unsigned char *support_poison_raw(fcl_tensor t, size_t *bytes, unsigned salt);

/* The chunked-launch switches (see FLASHCL_LOOP_LIMIT in src/tuning/tuning.h): support_fix_tiles(1)
 * pins the kernels that chunk, the rows forward (FLASHCL_FORWARD_PATH=rows) with tiles 16x16x1
 * and the portable backward (FLASHCL_BACKWARD_PATH=portable) with tiles 16x16, on every device;
 * support_force_chunks(1) then caps the loop iterations at 20000, i.e. a few tiles per launch;
 * (0) undoes each (restoring the caller's FLASHCL_FORWARD_PATH and FLASHCL_BACKWARD_PATH). */
void support_fix_tiles(int on);
void support_force_chunks(int on);

/* Forces the route of forward GEMMs of I8 weights with `act` (F16 or BF16) activations that
 * converts the weights first, at every row count (FLASHCL_GEMM_DEQUANT_ROWS=1), or skips the
 * test (cr_skip_test) where the device has no wgmma GEMM and so no such route. */
void support_force_i8_conversion(fcl_dtype act);

/* Keys per dK/dV work-group of the backward that runs for dtype dt at head dim D on ctx's device
 * (fcl_attention_backward_path: "blocked", "cpu", "nvidia-mma" or "nvidia-wgmma"; the stored-dS
 * key ranges are whole blocks of it); 0 for the portable kernels. */
int support_backward_key_block(fcl_context ctx, fcl_dtype dt, int D);

/* Elements of x[n] that are NaN. */
size_t support_count_nan(const float *x, size_t n);

/* Elements of base[base_n] outside the view (shape, strides, offset; up to 4 dims) that are no
 * longer NaN: writes outside a poisoned view. */
size_t support_touched_outside(const float *base, int64_t base_n, int ndim, const int64_t *shape,
                               const int64_t *strides, int64_t offset);

/* Elements whose bits differ between a and b; *max_diff gets the largest |a - b| and *first
 * the index of the first difference (-1 when none). */
size_t support_bit_diff(const float *a, const float *b, size_t n, double *max_diff, long *first);

/* Whether msg contains tok case-insensitively as a whole token ("6" is not in "16"). */
int support_has_token(const char *msg, const char *tok);

/* Fails the test unless msg is a sentence (non-NULL, at least a few letters). */
void support_assert_sentence(const char *msg);

/* Fails the test unless msg names every token given. */
#define SUPPORT_ASSERT_TOKENS(msg, ...)                                                                 \
    do {                                                                                                \
        const char *toks_[] = {__VA_ARGS__, NULL};                                                      \
        for (int k_ = 0; toks_[k_]; k_++)                                                               \
            cr_assert(support_has_token((msg), toks_[k_]), "error message \"%s\" does not name \"%s\"", \
                      (msg), toks_[k_]);                                                                \
    } while (0)

/* A projection weight of the qkvo tests: host copies and the device tensors. */
typedef struct support_weight {
    float *w, *scale, *bias; /* host copies (scale, bias NULL when absent) */
    fcl_tensor tw, ts, tb;
} support_weight;

/*
 * w [N, K]: float dtypes uniform in [-1, 1) / sqrt(K) rounded to wdt; I8 integers in
 * [-127, 127] with F32 scales in [0.5, 1.5) / (127 sqrt(K)). bias [N] (when with_bias) in
 * `act`, in [-0.5, 0.5). Seeds seed, seed + 1, seed + 2. Release with support_weight_release.
 */
void support_weight_make(fcl_context ctx, support_weight *hw, fcl_dtype wdt, fcl_dtype act, int N, int K,
                         int with_bias, uint64_t seed);
void support_weight_release(support_weight *hw);
/* The weight as the library and the float64 reference take it (borrowed pointers). */
fcl_weight support_weight_fcl(const support_weight *hw);
ref_weight support_weight_ref(const support_weight *hw);

/* Removes a file or a folder with everything below it (test sandboxes); errors are ignored. */
void support_remove_tree(const char *path);

#endif
