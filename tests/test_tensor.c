/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcl_tensor: creation, getters, host copies with dtype conversion, raw copies, strided
 * views, views of views, wrapped caller buffers, and argument checking. The F16/BF16
 * conversions are checked against independent references written here (decoding by ldexp,
 * encoding by nearest-value search), never against the library's own output alone.
 */
#include "support.h"

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

static uint32_t fbits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float bitsf(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

static fcl_tensor make(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(ctx, dt, ndim, shape, &t);
    cr_assert(st == FCL_SUCCESS && t != NULL, "fcl_tensor_create(%s): %s: %s", fcl_dtype_name(dt),
              fcl_status_string(st), fcl_last_error(ctx));
    return t;
}

#define OK(ctx, call)                                                                        \
    do {                                                                                     \
        fcl_status st_ = (call);                                                             \
        cr_assert(st_ == FCL_SUCCESS, "%s: %s: %s", #call, fcl_status_string(st_),          \
                  fcl_last_error(ctx));                                                      \
    } while (0)

/* Independent IEEE binary16 decode: sign, 5-bit exponent, 10-bit mantissa. */
static double ref_f16_decode(uint16_t h)
{
    int sign = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, -24);
    else
        v = ldexp((double)(1024 + m), e - 25);
    return sign ? -v : v;
}

static int f16_is_nan(uint16_t h) { return ((h >> 10) & 31) == 31 && (h & 1023) != 0; }
static int bf16_is_nan(uint16_t b) { return ((b >> 7) & 255) == 255 && (b & 127) != 0; }

/* The finite non-negative halves in increasing order: bit patterns 0x0000..0x7bff. */
static double g_half_pos[0x7c00];
static void init_half_table(void)
{
    for (uint32_t h = 0; h < 0x7c00; h++)
        g_half_pos[h] = ref_f16_decode((uint16_t)h);
}

/* Independent f32 -> f16 by nearest-value search over all halves, ties to the even pattern,
 * overflow to inf when |x| >= 65520 (the midpoint of 65504 and 2^16). */
static uint16_t ref_f32_to_f16(float xf)
{
    if (isnan(xf))
        return 0x7e00; /* any NaN; callers compare NaN-ness only */
    uint16_t sign = signbit(xf) ? 0x8000 : 0;
    double x = fabs((double)xf);
    if (x >= 65520.0)
        return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7bff; /* largest pattern with value <= x */
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (g_half_pos[mid] <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    uint32_t q = lo;
    if (g_half_pos[q] == x || q == 0x7bff)
        return sign | (uint16_t)q;
    double dlo = x - g_half_pos[q], dhi = g_half_pos[q + 1] - x;
    if (dhi < dlo || (dhi == dlo && (q & 1)))
        q++;
    return sign | (uint16_t)q;
}

/* Independent f32 -> bf16: keep the top 16 bits, round the dropped 16 by nearest-even. */
static uint16_t ref_f32_to_bf16(float x)
{
    if (isnan(x))
        return 0x7fc0;
    uint32_t u = fbits(x);
    uint32_t keep = u >> 16, rest = u & 0xffff;
    if (rest > 0x8000 || (rest == 0x8000 && (keep & 1)))
        keep++; /* carries into the exponent correctly, up to inf */
    return (uint16_t)keep;
}

/* Tricky float32 inputs for the 16-bit formats. */
static size_t tricky_values(float *v)
{
    size_t n = 0;
    const float base[] = {
        0.0f, 1.0f, 0.1f, 1.0f / 3.0f, 65504.0f, 65519.0f, 65519.99f, 65520.0f, 65536.0f, 1e6f, 1e30f,
        FLT_MAX, INFINITY, 6.1035156e-05f /* 2^-14 */, 6.0975552e-05f /* max half subnormal */,
        5.9604645e-08f /* 2^-24 */, 2.9802322e-08f /* 2^-25: tie to 0 */, 4.4703484e-08f /* 0.75*2^-24 */,
        8.9406967e-08f /* 1.5*2^-24: tie -> 2*2^-24 */, 1.4901161e-07f /* 2.5*2^-24: tie -> 2*2^-24 */,
        2.9802326e-08f /* just above 2^-25 -> 2^-24 */, 1e-10f, FLT_MIN, 1e-45f /* f32 subnormal */,
        1.00048828125f /* 1 + 2^-11: tie -> 1 */, 1.00146484375f /* 1 + 3*2^-11: tie -> 1 + 2^-9 */,
        1.0004883f, 2049.0f /* tie -> 2048 */, 2051.0f /* tie -> 2052 */, 3.14159265f, 1.00390625f /* 1+2^-8: bf16 tie -> 1 */,
        1.01171875f /* 1+3*2^-8: bf16 tie -> 1+2^-6 */, 3.3895314e38f /* max bf16 */, 3.3961776e38f /* rounds to inf in bf16 */,
        255.5f, 256.5f, 257.0f, 0.5f, 1.5f, 2.5f, 12345.678f,
    };
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
        v[n++] = base[i];
        v[n++] = -base[i];
    }
    v[n++] = NAN;
    v[n++] = -NAN;
    v[n++] = bitsf(0x7f800001u); /* signalling-style NaN with a low payload */
    v[n++] = bitsf(0xffc00001u);
    v[n++] = bitsf(0x7f802000u); /* payload only in bits that f16 drops */
    return n;
}

/* ------------------------------------------------------------------ create, getters */

Test(tensor, create_release_and_getters)
{
    fcl_context ctx = support_context();
    int64_t sh[4] = {2, 3, 4, 5};
    fcl_tensor t = make(ctx, FCL_F32, 4, sh);
    cr_assert_eq(fcl_tensor_dtype(t), FCL_F32);
    cr_assert_eq(fcl_tensor_ndim(t), 4);
    const int64_t want_st[4] = {60, 20, 5, 1};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(fcl_tensor_dim(t, i), sh[i], "dim %d", i);
        cr_assert_eq(fcl_tensor_stride(t, i), want_st[i], "stride %d", i);
    }
    cr_assert_eq(fcl_tensor_offset(t), 0);
    cr_assert_eq(fcl_tensor_numel(t), 120);
    cl_mem m = fcl_tensor_buffer(t);
    cr_assert(m != NULL);
    size_t bytes = 0;
    cr_assert(clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof bytes, &bytes, NULL) == CL_SUCCESS);
    cr_assert(bytes >= 120 * sizeof(float), "buffer holds %zu bytes for 120 floats", bytes);
    cl_context cc = NULL;
    cr_assert(clGetMemObjectInfo(m, CL_MEM_CONTEXT, sizeof cc, &cc, NULL) == CL_SUCCESS);
    cr_assert(cc == fcl_context_cl_context(ctx), "the buffer belongs to another cl_context");
    /* out-of-range dims give 0 */
    cr_assert_eq(fcl_tensor_dim(t, -1), 0);
    cr_assert_eq(fcl_tensor_dim(t, 4), 0);
    cr_assert_eq(fcl_tensor_stride(t, 4), 0);
    int64_t sh2[2] = {7, 9};
    fcl_tensor t2 = make(ctx, FCL_I8, 2, sh2);
    cr_assert_eq(fcl_tensor_ndim(t2), 2);
    cr_assert_eq(fcl_tensor_dim(t2, 2), 0, "dim beyond ndim must be 0");
    cr_assert_eq(fcl_tensor_stride(t2, 0), 9);
    cr_assert_eq(fcl_tensor_numel(t2), 63);
    cr_assert_eq(fcl_tensor_dtype(t2), FCL_I8);
    fcl_tensor_release(t);
    fcl_tensor_release(t2);
    fcl_tensor_release(NULL);
    fcl_context_release(ctx);
}

Test(tensor, getters_on_null)
{
    cr_assert_eq(fcl_tensor_ndim(NULL), 0);
    cr_assert_eq(fcl_tensor_dim(NULL, 0), 0);
    cr_assert_eq(fcl_tensor_stride(NULL, 0), 0);
    cr_assert_eq(fcl_tensor_offset(NULL), 0);
    cr_assert_eq(fcl_tensor_numel(NULL), 0);
    cr_assert(fcl_tensor_buffer(NULL) == NULL);
}

Test(tensor, dtype_sizes_and_names)
{
    cr_assert_eq(fcl_dtype_size(FCL_F32), 4);
    cr_assert_eq(fcl_dtype_size(FCL_F16), 2);
    cr_assert_eq(fcl_dtype_size(FCL_BF16), 2);
    cr_assert_eq(fcl_dtype_size(FCL_I8), 1);
    cr_assert_eq(fcl_dtype_size(FCL_I32), 4);
    cr_assert_eq(fcl_dtype_size((fcl_dtype)99), 0);
    cr_assert_str_eq(fcl_dtype_name(FCL_F32), "f32");
    cr_assert_str_eq(fcl_dtype_name(FCL_F16), "f16");
    cr_assert_str_eq(fcl_dtype_name(FCL_BF16), "bf16");
    cr_assert_str_eq(fcl_dtype_name(FCL_I8), "i8");
    cr_assert_str_eq(fcl_dtype_name(FCL_I32), "i32");
    cr_assert_str_eq(fcl_dtype_name((fcl_dtype)99), "?");
}

/* ------------------------------------------------------------------ bad creation */

static void expect_create_fails(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape,
                                const char *what)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(ctx, dt, ndim, shape, &t);
    cr_assert(st == FCL_ERR_SHAPE || st == FCL_ERR_INVALID_ARGUMENT,
              "%s: fcl_tensor_create returned %s, expected FCL_ERR_SHAPE or FCL_ERR_INVALID_ARGUMENT",
              what, fcl_status_string(st));
    cr_assert(t == NULL, "%s: a rejected create returned a tensor", what);
    cr_assert(fcl_last_error(ctx)[0] != '\0', "%s: no message", what);
}

Test(tensor, create_rejects_bad_ndim)
{
    fcl_context ctx = support_context();
    int64_t sh[5] = {2, 2, 2, 2, 2};
    expect_create_fails(ctx, FCL_F32, 0, sh, "ndim 0");
    expect_create_fails(ctx, FCL_F32, 5, sh, "ndim 5");
    expect_create_fails(ctx, FCL_F32, -1, sh, "ndim -1");
    fcl_context_release(ctx);
}

Test(tensor, create_rejects_negative_shape)
{
    fcl_context ctx = support_context();
    int64_t sh[3] = {2, -3, 4};
    expect_create_fails(ctx, FCL_F32, 3, sh, "shape [2, -3, 4]");
    int64_t sh1[1] = {-1};
    expect_create_fails(ctx, FCL_F16, 1, sh1, "shape [-1]");
    fcl_context_release(ctx);
}

Test(tensor, create_rejects_bad_args)
{
    fcl_context ctx = support_context();
    int64_t sh[2] = {2, 3};
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(NULL, FCL_F32, 2, sh, &t);
    cr_assert_eq(st, FCL_ERR_INVALID_ARGUMENT, "NULL ctx: %s", fcl_status_string(st));
    cr_assert(t == NULL);
    cr_assert(fcl_last_error(NULL)[0] != '\0', "NULL ctx leaves no thread message");
    st = fcl_tensor_create(ctx, FCL_F32, 2, NULL, &t);
    cr_assert_eq(st, FCL_ERR_INVALID_ARGUMENT, "NULL shape: %s", fcl_status_string(st));
    cr_assert(t == NULL);
    st = fcl_tensor_create(ctx, FCL_F32, 2, sh, NULL);
    cr_assert_eq(st, FCL_ERR_INVALID_ARGUMENT, "NULL out: %s", fcl_status_string(st));
    st = fcl_tensor_create(ctx, (fcl_dtype)42, 2, sh, &t);
    cr_assert_eq(st, FCL_ERR_DTYPE, "unknown dtype: %s", fcl_status_string(st));
    cr_assert(t == NULL);
    fcl_context_release(ctx);
}

/* The header does not forbid a 0 dim; whichever the library does, it must be clean: either
 * an empty tensor (numel 0, copies of 0 elements fine) or a clean error with a message. */
Test(tensor, zero_size_dim_is_clean)
{
    fcl_context ctx = support_context();
    int64_t sh[2] = {0, 4};
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(ctx, FCL_F32, 2, sh, &t);
    if (st == FCL_SUCCESS) {
        cr_assert(t != NULL);
        cr_assert_eq(fcl_tensor_numel(t), 0);
        float dummy = 0.0f;
        OK(ctx, fcl_tensor_write_f32(t, &dummy, 0));
        OK(ctx, fcl_tensor_read_f32(t, &dummy, 0));
        cr_assert(fcl_tensor_write_f32(t, &dummy, 1) == FCL_ERR_INVALID_ARGUMENT);
        fcl_tensor_release(t);
        cr_log_info("fcl_tensor_create with a 0 dim: accepted (empty tensor)");
    } else {
        cr_assert(st == FCL_ERR_SHAPE || st == FCL_ERR_INVALID_ARGUMENT,
                  "a 0 dim gave %s", fcl_status_string(st));
        cr_assert(t == NULL);
        cr_assert(fcl_last_error(ctx)[0] != '\0');
        cr_log_info("fcl_tensor_create with a 0 dim: rejected with %s: %s", fcl_status_string(st),
                    fcl_last_error(ctx));
    }
    fcl_context_release(ctx);
}

/* ------------------------------------------------------------------ conversions */

Test(tensor, f16_decode_exhaustive_and_round_trip)
{
    init_half_table();
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fcl_f16_to_f32((uint16_t)h);
        double want = ref_f16_decode((uint16_t)h);
        if (f16_is_nan((uint16_t)h)) {
            cr_assert(isnan(f), "f16 0x%04x is NaN but decodes to %g", h, (double)f);
            uint16_t back = fcl_f32_to_f16(f);
            cr_assert(f16_is_nan(back), "f16 NaN 0x%04x re-encodes to non-NaN 0x%04x", h, back);
            continue;
        }
        cr_assert((double)f == want && !signbit(f) == !signbit(want),
                  "fcl_f16_to_f32(0x%04x) = %a, expected %a", h, (double)f, want);
        uint16_t back = fcl_f32_to_f16(f);
        cr_assert_eq(back, h, "f16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
}

Test(tensor, bf16_decode_exhaustive_and_round_trip)
{
    for (uint32_t b = 0; b < 65536; b++) {
        float f = fcl_bf16_to_f32((uint16_t)b);
        if (bf16_is_nan((uint16_t)b)) {
            cr_assert(isnan(f), "bf16 0x%04x is NaN but decodes to %g", b, (double)f);
            uint16_t back = fcl_f32_to_bf16(f);
            cr_assert(bf16_is_nan(back), "bf16 NaN 0x%04x re-encodes to non-NaN 0x%04x", b, back);
            continue;
        }
        cr_assert_eq(fbits(f), b << 16, "fcl_bf16_to_f32(0x%04x) has bits 0x%08x", b, fbits(f));
        uint16_t back = fcl_f32_to_bf16(f);
        cr_assert_eq(back, b, "bf16 0x%04x -> %a -> 0x%04x", b, (double)f, back);
    }
}

static void check_f16_encode(float x)
{
    uint16_t got = fcl_f32_to_f16(x);
    uint16_t want = ref_f32_to_f16(x);
    if (isnan(x)) {
        cr_assert(f16_is_nan(got), "fcl_f32_to_f16(NaN 0x%08x) = 0x%04x is not NaN", fbits(x), got);
        return;
    }
    cr_assert_eq(got, want, "fcl_f32_to_f16(%a) = 0x%04x, expected 0x%04x", (double)x, got, want);
}

static void check_bf16_encode(float x)
{
    uint16_t got = fcl_f32_to_bf16(x);
    uint16_t want = ref_f32_to_bf16(x);
    if (isnan(x)) {
        cr_assert(bf16_is_nan(got), "fcl_f32_to_bf16(NaN 0x%08x) = 0x%04x is not NaN", fbits(x), got);
        return;
    }
    cr_assert_eq(got, want, "fcl_f32_to_bf16(%a) = 0x%04x, expected 0x%04x", (double)x, got, want);
}

Test(tensor, f16_bf16_encode_tricky_and_random)
{
    init_half_table();
    /* spot checks of the reference itself, from the IEEE definition */
    cr_assert_eq(ref_f32_to_f16(65520.0f), 0x7c00);
    cr_assert_eq(ref_f32_to_f16(65519.0f), 0x7bff);
    cr_assert_eq(ref_f32_to_f16(1.00048828125f), 0x3c00);
    cr_assert_eq(ref_f32_to_f16(1.00146484375f), 0x3c02);
    cr_assert_eq(ref_f32_to_f16(2.9802322e-08f), 0x0000);
    cr_assert_eq(ref_f32_to_f16(8.9406967e-08f), 0x0002);
    cr_assert_eq(ref_f32_to_f16(-0.0f), 0x8000);
    cr_assert_eq(ref_f32_to_bf16(1.00390625f), 0x3f80);
    cr_assert_eq(ref_f32_to_bf16(1.01171875f), 0x3f82);
    cr_assert_eq(ref_f32_to_bf16(3.3961776e38f), 0x7f80);

    float v[128];
    size_t n = tricky_values(v);
    for (size_t i = 0; i < n; i++) {
        check_f16_encode(v[i]);
        check_bf16_encode(v[i]);
    }
    /* 2M random bit patterns, plus every f32 whose exponent lies in the half range's edges */
    uint64_t s = 0x1234567u;
    for (int i = 0; i < 2000000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float x = bitsf((uint32_t)(s >> 32));
        check_f16_encode(x);
        check_bf16_encode(x);
    }
    /* every rounding position around the first halves, around 1, and near the overflow edge */
    const float centres[] = {5.9604645e-08f, 6.1035156e-05f, 1.0f, 2048.0f, 65504.0f};
    for (size_t c = 0; c < sizeof centres / sizeof centres[0]; c++) {
        uint32_t u0 = fbits(centres[c]);
        for (uint32_t d = 0; d < 40000; d++) {
            check_f16_encode(bitsf(u0 - 20000 + d));
            check_bf16_encode(bitsf(u0 - 20000 + d));
        }
    }
}

/* ------------------------------------------------------------------ host copies */

Test(tensor, f32_round_trip_exact)
{
    fcl_context ctx = support_context();
    float v[128];
    size_t nt = tricky_values(v);
    enum { N = 3 * 5 * 7 };
    float in[N], out[N];
    support_random(in, N, 42, -1000.0f, 1000.0f, FCL_F32);
    for (size_t i = 0; i < nt && i < N; i++)
        in[i] = v[i];
    int64_t sh[3] = {3, 5, 7};
    fcl_tensor t = make(ctx, FCL_F32, 3, sh);
    OK(ctx, fcl_tensor_write_f32(t, in, N));
    memset(out, 0, sizeof out);
    OK(ctx, fcl_tensor_read_f32(t, out, N));
    for (int i = 0; i < N; i++) {
        if (isnan(in[i]))
            cr_assert(isnan(out[i]), "[%d] NaN came back as %g", i, (double)out[i]);
        else
            cr_assert_eq(fbits(out[i]), fbits(in[i]), "[%d] %a came back as %a", i, (double)in[i],
                         (double)out[i]);
    }
    /* raw read of an F32 tensor gives the same bits */
    uint32_t raw[N];
    OK(ctx, fcl_tensor_read_raw(t, raw, sizeof raw));
    for (int i = 0; i < N; i++)
        if (!isnan(in[i]))
            cr_assert_eq(raw[i], fbits(in[i]), "raw [%d]", i);
    fcl_tensor_release(t);
    fcl_context_release(ctx);
}

static void half_tensor_case(fcl_dtype dt)
{
    init_half_table();
    fcl_context ctx = support_context();
    float v[128];
    size_t nt = tricky_values(v);
    enum { N = 200 };
    float in[N], out[N];
    uint16_t raw[N];
    support_random(in, N, 7, -70000.0f, 70000.0f, FCL_F32);
    for (size_t i = 0; i < nt && i < N; i++)
        in[i] = v[i];
    int64_t sh[2] = {10, 20};
    fcl_tensor t = make(ctx, dt, 2, sh);
    OK(ctx, fcl_tensor_write_f32(t, in, N));
    OK(ctx, fcl_tensor_read_raw(t, raw, sizeof raw));
    OK(ctx, fcl_tensor_read_f32(t, out, N));
    for (int i = 0; i < N; i++) {
        uint16_t want = dt == FCL_F16 ? ref_f32_to_f16(in[i]) : ref_f32_to_bf16(in[i]);
        uint16_t lib = dt == FCL_F16 ? fcl_f32_to_f16(in[i]) : fcl_f32_to_bf16(in[i]);
        if (isnan(in[i])) {
            cr_assert(dt == FCL_F16 ? f16_is_nan(raw[i]) : bf16_is_nan(raw[i]),
                      "[%d] NaN stored as 0x%04x", i, raw[i]);
            cr_assert(isnan(out[i]), "[%d] NaN read back as %g", i, (double)out[i]);
            continue;
        }
        cr_assert_eq(raw[i], want, "%s [%d]: %a stored as 0x%04x, expected 0x%04x", fcl_dtype_name(dt), i,
                     (double)in[i], raw[i], want);
        cr_assert_eq(raw[i], lib, "%s [%d]: tensor copy and host conversion disagree", fcl_dtype_name(dt), i);
        double dec = dt == FCL_F16 ? ref_f16_decode(want) : (double)bitsf((uint32_t)want << 16);
        cr_assert((double)out[i] == dec && !signbit(out[i]) == !signbit(dec),
                  "%s [%d]: read back %a, expected %a", fcl_dtype_name(dt), i, (double)out[i], dec);
    }
    /* raw write then f32 read decodes every pattern, including NaNs and subnormals */
    for (int i = 0; i < N; i++)
        raw[i] = (uint16_t)(i * 331 + 17);
    raw[0] = 0x7c01; /* NaN */
    raw[1] = 0xffff; /* NaN */
    raw[2] = 0x8000; /* -0 */
    raw[3] = 0x0001; /* smallest subnormal */
    OK(ctx, fcl_tensor_write_raw(t, raw, sizeof raw));
    OK(ctx, fcl_tensor_read_f32(t, out, N));
    for (int i = 0; i < N; i++) {
        int nan = dt == FCL_F16 ? f16_is_nan(raw[i]) : bf16_is_nan(raw[i]);
        if (nan) {
            cr_assert(isnan(out[i]), "%s raw 0x%04x read as %g", fcl_dtype_name(dt), raw[i], (double)out[i]);
            continue;
        }
        double dec = dt == FCL_F16 ? ref_f16_decode(raw[i]) : (double)bitsf((uint32_t)raw[i] << 16);
        cr_assert((double)out[i] == dec && !signbit(out[i]) == !signbit(dec),
                  "%s raw 0x%04x read as %a, expected %a", fcl_dtype_name(dt), raw[i], (double)out[i], dec);
    }
    fcl_tensor_release(t);
    fcl_context_release(ctx);
}

Test(tensor, f16_tensor_round_to_nearest_even) { half_tensor_case(FCL_F16); }
Test(tensor, bf16_tensor_round_to_nearest_even) { half_tensor_case(FCL_BF16); }

/* Whether `got` is a nearest integer of x (either one on an exact tie). */
static int is_nearest_int(double x, double got)
{
    double f = floor(x), c = ceil(x);
    if (x - f < c - x)
        return got == f;
    if (c - x < x - f)
        return got == c;
    return got == f || got == c;
}

Test(tensor, i32_round_and_saturate)
{
    fcl_context ctx = support_context();
    const float in[] = {0.0f, 1.0f, -1.0f, 1.4f, 1.6f, -1.4f, -1.6f, 2.5f, -2.5f, 0.5f, 123456.7f,
                        16777216.0f, 2147483520.0f, -2147483648.0f, 2147483648.0f, 3e9f, -3e9f,
                        1e20f, -1e20f, INFINITY, -INFINITY, -0.0f, 99.49f, -99.51f};
    enum { N = sizeof in / sizeof in[0] };
    int64_t sh[1] = {N};
    fcl_tensor t = make(ctx, FCL_I32, 1, sh);
    OK(ctx, fcl_tensor_write_f32(t, in, N));
    int32_t raw[N];
    float out[N];
    OK(ctx, fcl_tensor_read_raw(t, raw, sizeof raw));
    OK(ctx, fcl_tensor_read_f32(t, out, N));
    for (int i = 0; i < N; i++) {
        double x = in[i];
        if (x >= 2147483647.0)
            cr_assert_eq(raw[i], INT32_MAX, "i32 of %g = %d, expected saturation", x, raw[i]);
        else if (x <= -2147483648.0)
            cr_assert_eq(raw[i], INT32_MIN, "i32 of %g = %d, expected saturation", x, raw[i]);
        else
            cr_assert(is_nearest_int(x, (double)raw[i]), "i32 of %.9g = %d is not the nearest", x, raw[i]);
        cr_assert_eq(out[i], (float)raw[i], "i32 %d read as f32 %g", raw[i], (double)out[i]);
    }
    cr_log_info("I32 ties: 0.5 -> %d, 2.5 -> %d, -2.5 -> %d", raw[9], raw[7], raw[8]);
    /* raw int32 written and read back exactly, including values not representable in f32 */
    int32_t r2[N];
    for (int i = 0; i < N; i++)
        r2[i] = (int32_t)(0x7fffffff - i * 7919);
    OK(ctx, fcl_tensor_write_raw(t, r2, sizeof r2));
    int32_t r3[N];
    OK(ctx, fcl_tensor_read_raw(t, r3, sizeof r3));
    cr_assert(memcmp(r2, r3, sizeof r2) == 0);
    fcl_tensor_release(t);
    fcl_context_release(ctx);
}

Test(tensor, i8_round_and_saturate)
{
    fcl_context ctx = support_context();
    const float in[] = {0.0f, 1.0f, -1.0f, 127.0f, 127.4f, 127.6f, 128.0f, 200.0f, 1e9f, INFINITY,
                        -128.0f, -128.3f, -128.6f, -200.0f, -INFINITY, 0.6f, -0.6f, 3.49f, -3.51f,
                        0.5f, 1.5f, -0.5f, 42.0f, -77.2f};
    enum { N = sizeof in / sizeof in[0] };
    int64_t sh[2] = {4, N / 4};
    fcl_tensor t = make(ctx, FCL_I8, 2, sh);
    OK(ctx, fcl_tensor_write_f32(t, in, N));
    int8_t raw[N];
    float out[N];
    OK(ctx, fcl_tensor_read_raw(t, raw, sizeof raw));
    OK(ctx, fcl_tensor_read_f32(t, out, N));
    for (int i = 0; i < N; i++) {
        double x = in[i];
        if (x >= 127.0)
            cr_assert_eq(raw[i], 127, "i8 of %g = %d", x, raw[i]);
        else if (x <= -128.0)
            cr_assert_eq(raw[i], -128, "i8 of %g = %d", x, raw[i]);
        else
            cr_assert(is_nearest_int(x, (double)raw[i]), "i8 of %g = %d is not the nearest", x, raw[i]);
        cr_assert_eq(out[i], (float)raw[i]);
    }
    cr_log_info("I8 ties: 0.5 -> %d, 1.5 -> %d, -0.5 -> %d", raw[19], raw[20], raw[21]);
    fcl_tensor_release(t);
    fcl_context_release(ctx);
}

Test(tensor, raw_round_trip_every_dtype)
{
    fcl_context ctx = support_context();
    const fcl_dtype dts[] = {FCL_F32, FCL_F16, FCL_BF16, FCL_I8, FCL_I32};
    int64_t sh[3] = {3, 7, 11};
    for (size_t d = 0; d < 5; d++) {
        fcl_tensor t = make(ctx, dts[d], 3, sh);
        size_t bytes = 3 * 7 * 11 * fcl_dtype_size(dts[d]);
        unsigned char *in = malloc(bytes), *out = malloc(bytes);
        cr_assert(in && out);
        for (size_t i = 0; i < bytes; i++)
            in[i] = (unsigned char)(i * 97 + d * 31 + 5);
        OK(ctx, fcl_tensor_write_raw(t, in, bytes));
        memset(out, 0, bytes);
        OK(ctx, fcl_tensor_read_raw(t, out, bytes));
        cr_assert(memcmp(in, out, bytes) == 0, "%s raw round trip differs", fcl_dtype_name(dts[d]));
        free(in);
        free(out);
        fcl_tensor_release(t);
    }
    fcl_context_release(ctx);
}

Test(tensor, copy_argument_checks)
{
    fcl_context ctx = support_context();
    int64_t sh[2] = {4, 6};
    fcl_tensor t = make(ctx, FCL_F16, 2, sh);
    float f[25] = {0};
    uint16_t r[25] = {0};
    const fcl_status inv = FCL_ERR_INVALID_ARGUMENT;
    cr_assert_eq(fcl_tensor_write_f32(t, f, 23), inv, "write_f32 count 23 of 24");
    cr_assert(fcl_last_error(ctx)[0] != '\0');
    cr_assert_eq(fcl_tensor_write_f32(t, f, 25), inv, "write_f32 count 25 of 24");
    cr_assert_eq(fcl_tensor_read_f32(t, f, 0), inv, "read_f32 count 0 of 24");
    cr_assert_eq(fcl_tensor_read_f32(t, f, 48), inv, "read_f32 count 48 (bytes instead of count)");
    cr_assert_eq(fcl_tensor_write_raw(t, r, 24), inv, "write_raw 24 bytes (count instead of bytes)");
    cr_assert_eq(fcl_tensor_write_raw(t, r, 47), inv, "write_raw 47 bytes");
    cr_assert_eq(fcl_tensor_read_raw(t, r, 50), inv, "read_raw 50 bytes");
    cr_assert_eq(fcl_tensor_read_raw(t, r, 96), inv, "read_raw 96 bytes (f32 size)");
    cr_assert_eq(fcl_tensor_write_f32(t, NULL, 24), inv, "write_f32 NULL src");
    cr_assert_eq(fcl_tensor_read_raw(t, NULL, 48), inv, "read_raw NULL dst");
    cr_assert_eq(fcl_tensor_write_f32(NULL, f, 24), inv, "write_f32 NULL tensor");
    cr_assert_eq(fcl_tensor_read_f32(NULL, f, 24), inv, "read_f32 NULL tensor");
    cr_assert_eq(fcl_tensor_write_raw(NULL, r, 48), inv, "write_raw NULL tensor");
    cr_assert_eq(fcl_tensor_read_raw(NULL, r, 48), inv, "read_raw NULL tensor");
    /* and the right sizes work */
    OK(ctx, fcl_tensor_write_f32(t, f, 24));
    OK(ctx, fcl_tensor_read_raw(t, r, 48));
    fcl_tensor_release(t);
    fcl_context_release(ctx);
}

/* ------------------------------------------------------------------ strided views */

/* Values representable exactly in every dtype (I8 included). */
static float small_value(int i) { return (float)((i * 37) % 200 - 100); }
static const float SENTINEL = 120.0f;

static void permuted_view_case(fcl_dtype dt)
{
    fcl_context ctx = support_context();
    /* storage [B, H, S, DP] with D = 5 used at element offset 1 of each DP = 7 row, plus a
     * global view offset: the view is logical [B, S, H, D]. */
    enum { B = 2, S = 3, H = 4, D = 5, DP = 7, TOTAL = B * H * S * DP + 3 };
    int64_t bsh[1] = {TOTAL};
    fcl_tensor base = make(ctx, dt, 1, bsh);
    float *host = malloc(sizeof(float) * TOTAL);
    cr_assert(host != NULL);
    for (int i = 0; i < TOTAL; i++)
        host[i] = SENTINEL;
    OK(ctx, fcl_tensor_write_f32(base, host, TOTAL));

    const int64_t off = 2 + 1; /* 2 leading elements, then 1 into each padded row */
    int64_t vsh[4] = {B, S, H, D};
    int64_t vst[4] = {H * S * DP, DP, S * DP, 1};
    fcl_tensor v = NULL;
    OK(ctx, fcl_tensor_view(base, 4, vsh, vst, off, &v));
    cr_assert_eq(fcl_tensor_offset(v), off);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(fcl_tensor_dim(v, i), vsh[i]);
        cr_assert_eq(fcl_tensor_stride(v, i), vst[i]);
    }
    cr_assert_eq(fcl_tensor_numel(v), B * S * H * D);
    cr_assert(fcl_tensor_buffer(v) == fcl_tensor_buffer(base));
    cr_assert_eq(fcl_tensor_dtype(v), dt);

    float vin[B * S * H * D], vout[B * S * H * D];
    for (int i = 0; i < B * S * H * D; i++)
        vin[i] = small_value(i);
    OK(ctx, fcl_tensor_write_f32(v, vin, B * S * H * D));
    OK(ctx, fcl_tensor_read_f32(base, host, TOTAL));
    char *hit = calloc(TOTAL, 1);
    cr_assert(hit != NULL);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++) {
                    int li = ((b * S + s) * H + h) * D + d;
                    int64_t pi = off + b * vst[0] + s * vst[1] + h * vst[2] + d;
                    cr_assert(pi < TOTAL);
                    hit[pi] = 1;
                    cr_assert_eq(host[pi], vin[li], "%s: view[%d,%d,%d,%d] landed wrong: base[%lld] = %g, want %g",
                                 fcl_dtype_name(dt), b, s, h, d, (long long)pi, (double)host[pi], (double)vin[li]);
                }
    for (int i = 0; i < TOTAL; i++)
        if (!hit[i])
            cr_assert_eq(host[i], SENTINEL, "%s: base[%d] outside the view was overwritten with %g",
                         fcl_dtype_name(dt), i, (double)host[i]);
    /* gather: read the view back */
    OK(ctx, fcl_tensor_read_f32(v, vout, B * S * H * D));
    for (int i = 0; i < B * S * H * D; i++)
        cr_assert_eq(vout[i], vin[i], "%s: view read [%d]", fcl_dtype_name(dt), i);
    /* raw write through the view also scatters and leaves the gaps */
    size_t es = fcl_dtype_size(dt);
    unsigned char *rin = malloc((size_t)B * S * H * D * es), *rall = malloc((size_t)TOTAL * es),
                  *rall2 = malloc((size_t)TOTAL * es);
    cr_assert(rin && rall && rall2);
    OK(ctx, fcl_tensor_read_raw(base, rall, (size_t)TOTAL * es));
    for (size_t i = 0; i < (size_t)B * S * H * D * es; i++)
        rin[i] = (unsigned char)(i * 13 + 1);
    OK(ctx, fcl_tensor_write_raw(v, rin, (size_t)B * S * H * D * es));
    OK(ctx, fcl_tensor_read_raw(base, rall2, (size_t)TOTAL * es));
    for (int i = 0; i < TOTAL; i++)
        if (!hit[i])
            cr_assert(memcmp(rall + (size_t)i * es, rall2 + (size_t)i * es, es) == 0,
                      "%s: raw view write changed base[%d] outside the view", fcl_dtype_name(dt), i);
    for (int li = 0; li < B * S * H * D; li++) {
        int b = li / (S * H * D), s = li / (H * D) % S, h = li / D % H, d = li % D;
        int64_t pi = off + b * vst[0] + s * vst[1] + h * vst[2] + d;
        cr_assert(memcmp(rall2 + (size_t)pi * es, rin + (size_t)li * es, es) == 0,
                  "%s: raw view element %d misplaced", fcl_dtype_name(dt), li);
    }
    free(rin);
    free(rall);
    free(rall2);
    free(hit);
    free(host);
    fcl_tensor_release(v);
    fcl_tensor_release(base);
    fcl_context_release(ctx);
}

Test(tensor, permuted_view_f32) { permuted_view_case(FCL_F32); }
Test(tensor, permuted_view_f16) { permuted_view_case(FCL_F16); }
Test(tensor, permuted_view_bf16) { permuted_view_case(FCL_BF16); }
Test(tensor, permuted_view_i8) { permuted_view_case(FCL_I8); }
Test(tensor, permuted_view_i32) { permuted_view_case(FCL_I32); }

Test(tensor, view_of_view_offsets_add_and_outlive_base)
{
    fcl_context ctx = support_context();
    enum { N = 64 };
    int64_t sh[1] = {N};
    fcl_tensor base = make(ctx, FCL_F32, 1, sh);
    float host[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)i;
    OK(ctx, fcl_tensor_write_f32(base, host, N));

    fcl_tensor a = NULL, b = NULL, c = NULL;
    int64_t sa[1] = {50}, sb[2] = {3, 4}, stb[2] = {10, 1}, sc[1] = {2};
    OK(ctx, fcl_tensor_view(base, 1, sa, NULL, 3, &a)); /* elements 3..52 */
    cr_assert_eq(fcl_tensor_offset(a), 3);
    OK(ctx, fcl_tensor_view(a, 2, sb, stb, 7, &b)); /* starts at 10, rows of 10 */
    cr_assert_eq(fcl_tensor_offset(b), 10, "view of a view: offset %lld, expected 3 + 7 = 10",
                 (long long)fcl_tensor_offset(b));
    OK(ctx, fcl_tensor_view(b, 1, sc, NULL, 21, &c)); /* starts at 31 */
    cr_assert_eq(fcl_tensor_offset(c), 31);

    float got[12];
    OK(ctx, fcl_tensor_read_f32(b, got, 12));
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 4; k++)
            cr_assert_eq(got[r * 4 + k], (float)(10 + r * 10 + k), "b[%d,%d]", r, k);

    /* the views keep the buffer alive after the base and the middle view are released */
    fcl_tensor_release(base);
    fcl_tensor_release(a);
    float w[2] = {-5.0f, -6.0f};
    OK(ctx, fcl_tensor_write_f32(c, w, 2));
    OK(ctx, fcl_tensor_read_f32(b, got, 12));
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 4; k++) {
            int e = 10 + r * 10 + k;
            float want = e == 31 ? -5.0f : e == 32 ? -6.0f : (float)e;
            cr_assert_eq(got[r * 4 + k], want, "after writing c: element %d = %g", e, (double)got[r * 4 + k]);
        }
    fcl_tensor_release(c);
    fcl_tensor_release(b);
    fcl_context_release(ctx);
}

Test(tensor, view_argument_checks)
{
    fcl_context ctx = support_context();
    int64_t sh[2] = {4, 8};
    fcl_tensor base = make(ctx, FCL_F32, 2, sh);
    fcl_tensor v = NULL;
    int64_t s5[5] = {1, 1, 1, 1, 1};
    cr_assert_eq(fcl_tensor_view(NULL, 2, sh, NULL, 0, &v), FCL_ERR_INVALID_ARGUMENT);
    cr_assert(v == NULL);
    cr_assert(fcl_last_error(NULL)[0] != '\0');
    cr_assert_eq(fcl_tensor_view(base, 2, sh, NULL, 0, NULL), FCL_ERR_INVALID_ARGUMENT);
    fcl_status st = fcl_tensor_view(base, 0, sh, NULL, 0, &v);
    cr_assert(st == FCL_ERR_SHAPE || st == FCL_ERR_INVALID_ARGUMENT, "ndim 0: %s", fcl_status_string(st));
    cr_assert(v == NULL);
    st = fcl_tensor_view(base, 5, s5, NULL, 0, &v);
    cr_assert(st == FCL_ERR_SHAPE || st == FCL_ERR_INVALID_ARGUMENT, "ndim 5: %s", fcl_status_string(st));
    cr_assert(v == NULL);
    int64_t neg[2] = {2, -1};
    st = fcl_tensor_view(base, 2, neg, NULL, 0, &v);
    cr_assert(st == FCL_ERR_SHAPE || st == FCL_ERR_INVALID_ARGUMENT, "negative dim: %s", fcl_status_string(st));
    cr_assert(v == NULL);
    fcl_tensor_release(base);
    fcl_context_release(ctx);
}

/* ------------------------------------------------------------------ wrap */

static cl_uint mem_refcount(cl_mem m)
{
    cl_uint rc = 0;
    cr_assert(clGetMemObjectInfo(m, CL_MEM_REFERENCE_COUNT, sizeof rc, &rc, NULL) == CL_SUCCESS);
    return rc;
}

Test(tensor, wrap_retains_caller_buffer)
{
    fcl_context ctx = support_context();
    cl_int err = CL_SUCCESS;
    enum { N = 48 };
    cl_mem m = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE, N * sizeof(float), NULL, &err);
    cr_assert(err == CL_SUCCESS && m != NULL, "clCreateBuffer: %d", (int)err);
    cl_uint rc0 = mem_refcount(m);

    /* a wrap released while the caller still holds the buffer drops exactly its reference */
    int64_t sh[2] = {6, 8};
    fcl_tensor t0 = NULL;
    OK(ctx, fcl_tensor_wrap(ctx, m, FCL_F32, 2, sh, NULL, 0, &t0));
    cr_assert(fcl_tensor_buffer(t0) == m);
    cr_assert_eq(mem_refcount(m), rc0 + 1, "wrap did not retain the buffer");
    fcl_tensor_release(t0);
    cr_assert_eq(mem_refcount(m), rc0, "release did not drop the wrap's reference");

    /* strided wrap with an offset: rows 2..4 of 8, offset 2 */
    int64_t wsh[2] = {3, 4}, wst[2] = {8, 1};
    fcl_tensor t = NULL;
    OK(ctx, fcl_tensor_wrap(ctx, m, FCL_F32, 2, wsh, wst, 2 * 8 + 2, &t));
    cr_assert_eq(fcl_tensor_offset(t), 18);
    cr_assert_eq(fcl_tensor_stride(t, 0), 8);
    /* the caller lets go of its handle; the tensor keeps the buffer alive */
    clReleaseMemObject(m);
    float in[12], out[12];
    for (int i = 0; i < 12; i++)
        in[i] = 0.25f * (float)i - 1.0f;
    OK(ctx, fcl_tensor_write_f32(t, in, 12));
    OK(ctx, fcl_tensor_read_f32(t, out, 12));
    cr_assert(memcmp(in, out, sizeof in) == 0, "wrapped buffer round trip after the caller's release");
    fcl_tensor_release(t);
    fcl_context_release(ctx);
}

Test(tensor, wrap_placement_through_second_wrap)
{
    fcl_context ctx = support_context();
    cl_int err = CL_SUCCESS;
    enum { N = 48 };
    cl_mem m = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE, N * sizeof(float), NULL, &err);
    cr_assert(err == CL_SUCCESS && m != NULL, "clCreateBuffer: %d", (int)err);
    int64_t fsh[1] = {N}, wsh[2] = {3, 4}, wst[2] = {8, 1};
    fcl_tensor full = NULL, t = NULL;
    OK(ctx, fcl_tensor_wrap(ctx, m, FCL_F32, 1, fsh, NULL, 0, &full));
    OK(ctx, fcl_tensor_wrap(ctx, m, FCL_F32, 2, wsh, wst, 18, &t));
    clReleaseMemObject(m);
    float all[N], in[12];
    for (int i = 0; i < N; i++)
        all[i] = -1.0f;
    OK(ctx, fcl_tensor_write_f32(full, all, N));
    for (int i = 0; i < 12; i++)
        in[i] = (float)(i + 1);
    OK(ctx, fcl_tensor_write_f32(t, in, 12));
    OK(ctx, fcl_tensor_read_f32(full, all, N));
    for (int i = 0; i < N; i++) {
        int r = (i - 18) / 8, k = (i - 18) % 8;
        int inside = i >= 18 && r < 3 && k < 4;
        float want = inside ? (float)(r * 4 + k + 1) : -1.0f;
        cr_assert_eq(all[i], want, "buffer[%d] = %g, expected %g", i, (double)all[i], (double)want);
    }
    fcl_tensor_release(full);
    fcl_tensor_release(t);
    fcl_context_release(ctx);
}

Test(tensor, wrap_argument_checks)
{
    fcl_context ctx = support_context();
    int64_t sh[1] = {4};
    fcl_tensor t = NULL;
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE, 64, NULL, &err);
    cr_assert(err == CL_SUCCESS);
    cr_assert_eq(fcl_tensor_wrap(ctx, NULL, FCL_F32, 1, sh, NULL, 0, &t), FCL_ERR_INVALID_ARGUMENT);
    cr_assert(t == NULL);
    cr_assert_eq(fcl_tensor_wrap(NULL, m, FCL_F32, 1, sh, NULL, 0, &t), FCL_ERR_INVALID_ARGUMENT);
    cr_assert(t == NULL);
    cr_assert_eq(fcl_tensor_wrap(ctx, m, FCL_F32, 1, sh, NULL, 0, NULL), FCL_ERR_INVALID_ARGUMENT);
    fcl_status st = fcl_tensor_wrap(ctx, m, FCL_F32, 0, sh, NULL, 0, &t);
    cr_assert(st == FCL_ERR_SHAPE || st == FCL_ERR_INVALID_ARGUMENT, "ndim 0: %s", fcl_status_string(st));
    cr_assert(t == NULL);
    cr_assert_eq(fcl_tensor_wrap(ctx, m, (fcl_dtype)17, 1, sh, NULL, 0, &t), FCL_ERR_DTYPE);
    cr_assert(t == NULL);
    clReleaseMemObject(m);
    fcl_context_release(ctx);
}
