/* SPDX-License-Identifier: Apache-2.0 */
/* Test helpers: device context, seeded random data, tensors, poison, error measures. */
#include "support.h"
#include "ref_attention.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

fcl_context support_context(void)
{
    fcl_context ctx = NULL;
    fcl_status st = fcl_context_create(NULL, &ctx);
    cr_assert(st == FCL_SUCCESS && ctx != NULL, "fcl_context_create(FLASHCL_DEVICE=%s): %s: %s",
              getenv("FLASHCL_DEVICE") ? getenv("FLASHCL_DEVICE") : "(unset)",
              fcl_status_string(st), fcl_last_error(NULL));
    /* a run that forces the blocked forward kernel must get it, not the rows fallback */
    const char *path = getenv("FLASHCL_FORWARD_PATH");
    if (path && strcmp(path, "blocked") == 0)
        cr_assert(strcmp(fcl_attention_forward_path(ctx, FCL_F32, 64), "blocked") == 0,
                  "FLASHCL_FORWARD_PATH=blocked, but this device runs the %s forward kernel (a loop cap?)",
                  fcl_attention_forward_path(ctx, FCL_F32, 64));
    /* a run that names the Hopper kernel must get it where it applies (F16 at D 64) */
    if (path && strcmp(path, "nvidia-wgmma") == 0)
        cr_assert(strcmp(fcl_attention_forward_path(ctx, FCL_F16, 64), "nvidia-wgmma") == 0,
                  "FLASHCL_FORWARD_PATH=nvidia-wgmma, but this device runs the %s forward kernel",
                  fcl_attention_forward_path(ctx, FCL_F16, 64));
    /* and the same for the backward's wgmma kernels (F16 at D 64; the default on compute
     * capability 9.0), which FLASHCL_BACKWARD_PATH=nvidia-mma keeps off */
    const char *backward = getenv("FLASHCL_BACKWARD_PATH");
    if (backward && strcmp(backward, "nvidia-wgmma") == 0)
        cr_assert(strcmp(fcl_attention_backward_path(ctx, FCL_F16, 64), "nvidia-wgmma") == 0,
                  "FLASHCL_BACKWARD_PATH=nvidia-wgmma, but this device runs the %s backward kernels",
                  fcl_attention_backward_path(ctx, FCL_F16, 64));
    if (backward && strcmp(backward, "nvidia-mma") == 0)
        cr_assert(strcmp(fcl_attention_backward_path(ctx, FCL_F16, 64), "nvidia-wgmma") != 0,
                  "FLASHCL_BACKWARD_PATH=nvidia-mma, but this device runs the nvidia-wgmma backward kernels");
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

double support_bound(double naive_err, double factor)
{
    return factor * naive_err + 1e-5;
}

int support_within(double err, double naive_err, double factor)
{
    return err <= support_bound(naive_err, factor);
}

size_t support_count_nan(const float *x, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += isnan(x[i]) != 0;
    return k;
}

/* Count of base elements outside the view (shape/strides/offset) that are not NaN. */
size_t support_touched_outside(const float *base, int64_t base_n, int ndim, const int64_t *shape,
                              const int64_t *strides, int64_t offset)
{
    char *in = calloc((size_t)base_n, 1);
    cr_assert(in != NULL);
    int64_t idx[4] = {0, 0, 0, 0}, sh[4] = {1, 1, 1, 1}, st[4] = {0, 0, 0, 0};
    for (int d = 0; d < ndim; d++) {
        sh[4 - ndim + d] = shape[d];
        st[4 - ndim + d] = strides[d];
    }
    for (idx[0] = 0; idx[0] < sh[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < sh[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < sh[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < sh[3]; idx[3]++)
                    in[offset + idx[0] * st[0] + idx[1] * st[1] + idx[2] * st[2] + idx[3] * st[3]] = 1;
    size_t bad = 0;
    for (int64_t i = 0; i < base_n; i++)
        if (!in[i] && !isnan(base[i]))
            bad++;
    free(in);
    return bad;
}

/* Elements whose bits differ between a and b; *max_diff gets the largest |a - b| and
 * *first the index of the first difference (-1 when none). */
size_t support_bit_diff(const float *a, const float *b, size_t n, double *max_diff, long *first)
{
    size_t k = 0;
    *max_diff = 0.0;
    *first = -1;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (k++ == 0)
                *first = (long)i;
            double e = fabs((double)a[i] - (double)b[i]);
            if (!(e <= *max_diff))
                *max_diff = e;
        }
    return k;
}

static int is_word_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Whether `msg` contains `tok` case-insensitively as a whole token ("6" is not in "16"). */
int support_has_token(const char *msg, const char *tok)
{
    size_t n = strlen(tok);
    if (!msg || n == 0)
        return 0;
    for (const char *p = msg; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)tok[i]))
            i++;
        if (i != n)
            continue;
        if (is_word_char(tok[0]) && p > msg && is_word_char(p[-1]))
            continue;
        if (is_word_char(tok[n - 1]) && is_word_char(p[n]))
            continue;
        return 1;
    }
    return 0;
}

void support_assert_sentence(const char *msg)
{
    cr_assert(msg != NULL, "fcl_last_error returned NULL");
    size_t letters = 0;
    for (const char *p = msg; *p; p++)
        letters += isalpha((unsigned char)*p) != 0;
    cr_assert(letters >= 5, "error message is not a sentence: \"%s\"", msg);
}

fcl_cache_stats support_cache_stats(fcl_context ctx)
{
    fcl_cache_stats s;
    cr_assert_eq(fcl_context_cache_stats(ctx, &s), FCL_SUCCESS, "%s", fcl_last_error(ctx));
    return s;
}

void *support_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    cr_assert(p != NULL, "out of host memory");
    return p;
}

void support_write(fcl_tensor t, const float *x)
{
    fcl_status st = fcl_tensor_write_f32(t, x, (size_t)fcl_tensor_numel(t));
    cr_assert(st == FCL_SUCCESS, "write_f32: %s", fcl_status_string(st));
}

void support_read(fcl_tensor t, float *x)
{
    fcl_status st = fcl_tensor_read_f32(t, x, (size_t)fcl_tensor_numel(t));
    cr_assert(st == FCL_SUCCESS, "read_f32: %s", fcl_status_string(st));
}

fcl_tensor support_view(fcl_tensor base, int ndim, const int64_t *shape, const int64_t *strides,
                          int64_t offset)
{
    fcl_tensor v = NULL;
    fcl_status st = fcl_tensor_view(base, ndim, shape, strides, offset, &v);
    cr_assert(st == FCL_SUCCESS, "fcl_tensor_view: %s", fcl_status_string(st));
    return v;
}

fcl_tensor support_tensor_random(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape, uint64_t seed)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(ctx, dt, ndim, shape, &t);
    cr_assert(st == FCL_SUCCESS, "fcl_tensor_create: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    if (seed) {
        size_t n = (size_t)fcl_tensor_numel(t);
        float *x = support_xmalloc(sizeof(float) * n);
        support_random(x, n, seed, -1.0f, 1.0f, dt == FCL_F16 || dt == FCL_BF16 ? dt : FCL_F32);
        support_write(t, x);
        free(x);
    }
    return t;
}

/* Writes a byte pattern into t and returns a copy of it. */
unsigned char *support_poison_raw(fcl_tensor t, size_t *bytes, unsigned salt)
{
    *bytes = (size_t)fcl_tensor_numel(t) * fcl_dtype_size(fcl_tensor_dtype(t));
    unsigned char *p = support_xmalloc(*bytes);
    for (size_t i = 0; i < *bytes; i++)
        p[i] = (unsigned char)((i * 167u + 13u + salt * 29u) ^ (i >> 8));
    cr_assert(fcl_tensor_write_raw(t, p, *bytes) == FCL_SUCCESS);
    return p;
}

/* Sets or restores one environment variable around support_fix_tiles. */
static void pin_env(int on, const char *name, const char *value, char *saved, size_t n, int *had)
{
    if (on) {
        const char *old = getenv(name);
        *had = old != NULL;
        snprintf(saved, n, "%s", old ? old : "");
        setenv(name, value, 1);
    } else {
        if (*had)
            setenv(name, saved, 1);
        else
            unsetenv(name);
        *had = 0;
    }
}

void support_fix_tiles(int on)
{
    static char saved_fwd[64], saved_bwd[64];
    static int had_fwd, had_bwd;
    /* the kernels that chunk: the rows forward and the portable backward, with these tiles */
    pin_env(on, "FLASHCL_FORWARD_PATH", "rows", saved_fwd, sizeof saved_fwd, &had_fwd);
    pin_env(on, "FLASHCL_BACKWARD_PATH", "portable", saved_bwd, sizeof saved_bwd, &had_bwd);
    if (on) {
        setenv("FLASHCL_FORWARD_TILES", "16,16,1", 1);
        setenv("FLASHCL_BACKWARD_TILES", "16,16", 1);
    } else {
        unsetenv("FLASHCL_FORWARD_TILES");
        unsetenv("FLASHCL_BACKWARD_TILES");
    }
}

int support_backward_key_block(fcl_context ctx, fcl_dtype dt, int D)
{
    const char *path = fcl_attention_backward_path(ctx, dt, D);
    int v[9] = {0};
    if (path && strcmp(path, "blocked") == 0) {
        cr_assert(fcl_tuning_get(ctx, "backward_blocks", D, v, 4) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
        return v[0];
    }
    if (path && strcmp(path, "cpu") == 0) { /* simd x rv keys */
        cr_assert(fcl_tuning_get(ctx, "forward_cpu", D, v, 4) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
        return v[0] * v[1];
    }
    if (path && strncmp(path, "nvidia-", 7) == 0) { /* nvidia-mma, nvidia-wgmma */
        cr_assert(fcl_tuning_get(ctx, "backward_mma", D, v, 7) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
        return v[0];
    }
    return 0;
}

void support_force_chunks(int on)
{
    if (on)
        setenv("FLASHCL_LOOP_LIMIT", "20000", 1);
    else
        unsetenv("FLASHCL_LOOP_LIMIT");
}

void support_force_i8_conversion(fcl_dtype act)
{
    fcl_context ctx = support_context();
    const int wgmma = strcmp(fcl_projection_path(ctx, act, FCL_I8), "nvidia-wgmma") == 0;
    fcl_context_release(ctx);
    if (!wgmma)
        cr_skip_test("no wgmma GEMM on this device: I8 weights are never converted first");
    cr_assert(setenv("FLASHCL_GEMM_DEQUANT_ROWS", "1", 1) == 0);
}

void support_weight_make(fcl_context ctx, support_weight *hw, fcl_dtype wdt, fcl_dtype act, int N, int K,
                         int with_bias, uint64_t seed)
{
    memset(hw, 0, sizeof *hw);
    const size_t n = (size_t)N * K;
    const float r = 1.0f / sqrtf((float)K);
    const int64_t wshape[2] = {N, K}, nshape[1] = {N};
    hw->w = support_xmalloc(sizeof(float) * n);
    if (wdt == FCL_I8) {
        support_random(hw->w, n, seed, -127.0f, 128.0f, FCL_F32);
        for (size_t i = 0; i < n; i++)
            hw->w[i] = floorf(hw->w[i]);
        hw->scale = support_xmalloc(sizeof(float) * (size_t)N);
        support_random(hw->scale, (size_t)N, seed + 1, 0.5f, 1.5f, FCL_F32);
        for (int i = 0; i < N; i++)
            hw->scale[i] *= r / 127.0f;
        hw->ts = support_tensor(ctx, FCL_F32, 1, nshape, hw->scale);
    } else {
        support_random(hw->w, n, seed, -r, r, wdt);
    }
    hw->tw = support_tensor(ctx, wdt, 2, wshape, hw->w);
    if (with_bias) {
        hw->bias = support_xmalloc(sizeof(float) * (size_t)N);
        support_random(hw->bias, (size_t)N, seed + 2, -0.5f, 0.5f, act);
        hw->tb = support_tensor(ctx, act, 1, nshape, hw->bias);
    }
}

void support_weight_release(support_weight *hw)
{
    free(hw->w), free(hw->scale), free(hw->bias);
    fcl_tensor_release(hw->tw), fcl_tensor_release(hw->ts), fcl_tensor_release(hw->tb);
    memset(hw, 0, sizeof *hw);
}

fcl_weight support_weight_fcl(const support_weight *hw) { return (fcl_weight){hw->tw, hw->ts, hw->tb}; }

ref_weight support_weight_ref(const support_weight *hw) { return (ref_weight){hw->w, hw->scale, hw->bias}; }

void support_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                    continue;
                char sub[PATH_MAX];
                snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                support_remove_tree(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}
