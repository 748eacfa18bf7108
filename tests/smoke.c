/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flashcl-smoke: one small case of each op family that an embedded deployment runs (forward,
 * varlen forward, KV-cache decode, the attention block with int8-weight projections) on the
 * FLASHCL_DEVICE device, each against the float64 reference (tests/ref) by DESIGN.md's rule:
 * max |kernel - float64| <= 2 * max |naive - float64| + 1e-5, no NaN, outputs NaN-poisoned
 * first. Shapes are tiny and every case shares one head dim and dtype where it can, so the whole
 * run builds four kernel programs: it is what scripts/cross-build runs on an emulated Arm CPU,
 * where PoCL's compiler is slow.
 *
 * Also the host's size limits: a tensor beyond a 32-bit host's size_t is refused.
 *
 * No Criterion (Debian has none for armhf): plain C, one line per case, then
 * "N passed, N failed". Arguments name the cases to run (default: all). Exit status 0 only
 * when every case run passed; 2 on a bad argument or when no context could be made (no device:
 * nothing ran).
 */
#include <flashcl/flashcl.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention.h"
#include "ref_projection.h"

enum { HD = 32 }; /* the head dim of every case */

static int g_passed, g_failed;

/* splitmix64 uniform values in [lo, hi), rounded to dtype so host and device data agree. */
static void fill_random(float *x, size_t n, uint64_t seed, float lo, float hi, fcl_dtype dt)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        x[i] = ref_round_to_dtype(dt, lo + (hi - lo) * (float)((double)(z >> 11) / 9007199254740992.0));
    }
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "flashcl-smoke: out of host memory\n");
        exit(1);
    }
    return p;
}

/* A contiguous tensor, filled from host floats when x is given, else NaN-poisoned; NULL (with a
 * message) on failure. */
static fcl_tensor make_tensor(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape, const float *x)
{
    fcl_tensor t = NULL;
    if (fcl_tensor_create(ctx, dt, ndim, shape, &t) != FCL_SUCCESS) {
        printf("  tensor: %s\n", fcl_last_error(ctx));
        return NULL;
    }
    const size_t n = (size_t)fcl_tensor_numel(t);
    float *poison = NULL;
    if (!x) {
        poison = xcalloc(n, sizeof(float));
        for (size_t i = 0; i < n; i++)
            poison[i] = NAN;
    }
    if (fcl_tensor_write_f32(t, x ? x : poison, n) != FCL_SUCCESS) {
        printf("  tensor write: %s\n", fcl_last_error(ctx));
        fcl_tensor_release(t);
        t = NULL;
    }
    free(poison);
    return t;
}

/* Max |a - ref| over n elements; a NaN gives +INFINITY, equal infinities count as 0. */
static double max_err(const float *a, const double *ref, size_t n)
{
    double err = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(ref[i]))
            return INFINITY;
        if (isinf(a[i]) && isinf(ref[i]) && (a[i] > 0) == (ref[i] > 0))
            continue;
        const double e = fabs((double)a[i] - ref[i]);
        if (e > err)
            err = e;
    }
    return err;
}

/* The rule for one output: prints the errors, returns 1 when it holds. */
static int check(const char *what, const float *got, const double *ref, const float *naive, size_t n)
{
    const double err = max_err(got, ref, n), nerr = max_err(naive, ref, n), bound = 2.0 * nerr + 1e-5;
    const int ok = err <= bound;
    printf("  %-4s err %.3g bound %.3g (naive %.3g) over %zu%s\n", what, err, bound, nerr, n, ok ? "" : "  FAILED");
    return ok;
}

/* Records a case's outcome. */
static void report(const char *name, int ok)
{
    printf("%s %s\n", ok ? "PASS" : "FAIL", name);
    if (ok)
        g_passed++;
    else
        g_failed++;
}

static int call_ok(fcl_context ctx, const char *op, fcl_status s)
{
    if (s != FCL_SUCCESS)
        printf("  %s: %s: %s\n", op, fcl_status_string(s), fcl_last_error(ctx));
    return s == FCL_SUCCESS;
}

/* Reads t (numel n) into a new host array; NULL on failure. */
static float *read_back(fcl_context ctx, fcl_tensor t, size_t n)
{
    float *x = xcalloc(n, sizeof(float));
    if (!call_ok(ctx, "fcl_tensor_read_f32", fcl_tensor_read_f32(t, x, n))) {
        free(x);
        return NULL;
    }
    return x;
}

/* Dense forward: F16, GQA (Hq 2, Hkv 1), Sq < Sk, causal, LSE. */
static void forward_case(fcl_context ctx)
{
    const fcl_dtype dt = FCL_F16;
    const int B = 2, Sq = 5, Sk = 9, Hq = 2, Hkv = 1;
    const size_t nq = (size_t)B * Sq * Hq * HD, nk = (size_t)B * Sk * Hkv * HD, nl = (size_t)B * Hq * Sq;
    float *q = xcalloc(nq, sizeof(float)), *k = xcalloc(nk, sizeof(float)), *v = xcalloc(nk, sizeof(float));
    fill_random(q, nq, 11, -1.0f, 1.0f, dt);
    fill_random(k, nk, 12, -1.0f, 1.0f, dt);
    fill_random(v, nk, 13, -1.0f, 1.0f, dt);
    const int64_t qs[4] = {B, Sq, Hq, HD}, ks[4] = {B, Sk, Hkv, HD}, ls[3] = {B, Hq, Sq};
    fcl_tensor tq = make_tensor(ctx, dt, 4, qs, q), tk = make_tensor(ctx, dt, 4, ks, k),
               tv = make_tensor(ctx, dt, 4, ks, v), to = make_tensor(ctx, dt, 4, qs, NULL),
               tl = make_tensor(ctx, FCL_F32, 3, ls, NULL);
    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    prm.causal = 1;
    int ok = tq && tk && tv && to && tl &&
             call_ok(ctx, "fcl_attention_forward", fcl_attention_forward(ctx, &prm, tq, tk, tv, to, tl, NULL)) &&
             call_ok(ctx, "fcl_finish", fcl_finish(ctx));
    float *o = ok ? read_back(ctx, to, nq) : NULL, *l = ok ? read_back(ctx, tl, nl) : NULL;
    if (o && l) {
        const ref_attn_problem p = {.B = B, .Sq = Sq, .Sk = Sk, .Hq = Hq, .Hkv = Hkv, .D = HD, .causal = 1,
                                    .window_left = -1, .window_right = -1};
        double *ro = xcalloc(nq, sizeof(double)), *rl = xcalloc(nl, sizeof(double));
        float *no = xcalloc(nq, sizeof(float)), *nl_ = xcalloc(nl, sizeof(float));
        ref_attention_forward(&p, q, k, v, ro, rl);
        ref_attention_forward_naive(&p, dt, q, k, v, no, nl_);
        ok = check("O", o, ro, no, nq) & check("LSE", l, rl, nl_, nl);
        free(ro), free(rl), free(no), free(nl_);
    } else {
        ok = 0;
    }
    report("forward f16 B2 Sq5 Sk9 Hq2 Hkv1 D32 causal", ok);
    free(o), free(l), free(q), free(k), free(v);
    fcl_tensor_release(tq), fcl_tensor_release(tk), fcl_tensor_release(tv), fcl_tensor_release(to);
    fcl_tensor_release(tl);
}

/* Varlen forward: F32, two sequences of 3 and 6 rows packed back to back, causal. */
static void varlen_case(fcl_context ctx)
{
    const fcl_dtype dt = FCL_F32;
    const int H = 2, cu[3] = {0, 3, 9}, total = 9, max_len = 6;
    const size_t n = (size_t)total * H * HD;
    float *q = xcalloc(n, sizeof(float)), *k = xcalloc(n, sizeof(float)), *v = xcalloc(n, sizeof(float));
    fill_random(q, n, 21, -1.0f, 1.0f, dt);
    fill_random(k, n, 22, -1.0f, 1.0f, dt);
    fill_random(v, n, 23, -1.0f, 1.0f, dt);
    const float cuf[3] = {(float)cu[0], (float)cu[1], (float)cu[2]};
    const int64_t s3[3] = {total, H, HD}, sc[1] = {3};
    fcl_tensor tq = make_tensor(ctx, dt, 3, s3, q), tk = make_tensor(ctx, dt, 3, s3, k),
               tv = make_tensor(ctx, dt, 3, s3, v), to = make_tensor(ctx, dt, 3, s3, NULL),
               tc = make_tensor(ctx, FCL_I32, 1, sc, cuf);
    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    prm.causal = 1;
    int ok = tq && tk && tv && to && tc &&
             call_ok(ctx, "fcl_attention_varlen_forward",
                     fcl_attention_varlen_forward(ctx, &prm, tq, tk, tv, tc, tc, max_len, max_len, to, NULL,
                                                  NULL)) &&
             call_ok(ctx, "fcl_finish", fcl_finish(ctx));
    float *o = ok ? read_back(ctx, to, n) : NULL;
    if (o) {
        double *ro = xcalloc(n, sizeof(double));
        float *no = xcalloc(n, sizeof(float));
        for (int b = 0; b < 2; b++) { /* each sequence alone: [1, len, H, HD] from its first row */
            const int len = cu[b + 1] - cu[b];
            const size_t at = (size_t)cu[b] * H * HD;
            const ref_attn_problem p = {.B = 1, .Sq = len, .Sk = len, .Hq = H, .Hkv = H, .D = HD, .causal = 1,
                                        .window_left = -1, .window_right = -1};
            ref_attention_forward(&p, q + at, k + at, v + at, ro + at, NULL);
            ref_attention_forward_naive(&p, dt, q + at, k + at, v + at, no + at, NULL);
        }
        ok = check("O", o, ro, no, n);
        free(ro), free(no);
    } else {
        ok = 0;
    }
    report("varlen f32 lengths 3,6 H2 D32 causal", ok);
    free(o), free(q), free(k), free(v);
    fcl_tensor_release(tq), fcl_tensor_release(tk), fcl_tensor_release(tv), fcl_tensor_release(to);
    fcl_tensor_release(tc);
}

/* Decode: F16 cache [2, 16, 1, HD], one query row of 2 heads (GQA), host length 11; against the
 * forward over the first 11 keys with the query at the end (causal, Sq 1). */
static void decode_case(fcl_context ctx)
{
    const fcl_dtype dt = FCL_F16;
    const int B = 2, L = 16, len = 11, Hq = 2;
    const size_t nq = (size_t)B * Hq * HD, nc = (size_t)B * L * HD, nk = (size_t)B * len * HD;
    float *q = xcalloc(nq, sizeof(float)), *kc = xcalloc(nc, sizeof(float)), *vc = xcalloc(nc, sizeof(float));
    fill_random(q, nq, 31, -1.0f, 1.0f, dt);
    fill_random(kc, nc, 32, -1.0f, 1.0f, dt);
    fill_random(vc, nc, 33, -1.0f, 1.0f, dt);
    const int64_t qs[4] = {B, 1, Hq, HD}, cs[4] = {B, L, 1, HD};
    fcl_tensor tq = make_tensor(ctx, dt, 4, qs, q), tk = make_tensor(ctx, dt, 4, cs, kc),
               tv = make_tensor(ctx, dt, 4, cs, vc), to = make_tensor(ctx, dt, 4, qs, NULL);
    const fcl_kv_cache cache = {tk, tv, NULL};
    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    int ok = tq && tk && tv && to &&
             call_ok(ctx, "fcl_attention_decode",
                     fcl_attention_decode(ctx, &prm, tq, &cache, len, NULL, NULL, to, NULL, NULL)) &&
             call_ok(ctx, "fcl_finish", fcl_finish(ctx));
    float *o = ok ? read_back(ctx, to, nq) : NULL;
    if (o) {
        float *k = xcalloc(nk, sizeof(float)), *v = xcalloc(nk, sizeof(float));
        for (int b = 0; b < B; b++) { /* the valid rows of each sequence */
            memcpy(k + (size_t)b * len * HD, kc + (size_t)b * L * HD, sizeof(float) * (size_t)len * HD);
            memcpy(v + (size_t)b * len * HD, vc + (size_t)b * L * HD, sizeof(float) * (size_t)len * HD);
        }
        const ref_attn_problem p = {.B = B, .Sq = 1, .Sk = len, .Hq = Hq, .Hkv = 1, .D = HD, .causal = 1,
                                    .window_left = -1, .window_right = -1};
        double *ro = xcalloc(nq, sizeof(double));
        float *no = xcalloc(nq, sizeof(float));
        ref_attention_forward(&p, q, k, v, ro, NULL);
        ref_attention_forward_naive(&p, dt, q, k, v, no, NULL);
        ok = check("O", o, ro, no, nq);
        free(ro), free(no), free(k), free(v);
    } else {
        ok = 0;
    }
    report("decode f16 B2 L16 len11 Hq2 Hkv1 D32", ok);
    free(o), free(q), free(kc), free(vc);
    fcl_tensor_release(tq), fcl_tensor_release(tk), fcl_tensor_release(tv), fcl_tensor_release(to);
}

/* One int8 weight [N, K] with F32 row scales and an F16 bias: host copies and tensors. */
typedef struct i8_weight {
    float w[64 * 64], scale[64], bias[64];
    fcl_tensor tw, ts, tb;
} i8_weight;

static int make_i8_weight(fcl_context ctx, i8_weight *hw, int N, int K, uint64_t seed)
{
    fill_random(hw->w, (size_t)N * K, seed, -127.0f, 128.0f, FCL_F32);
    for (int i = 0; i < N * K; i++)
        hw->w[i] = floorf(hw->w[i]);
    fill_random(hw->scale, (size_t)N, seed + 1, 0.5f, 1.5f, FCL_F32);
    for (int i = 0; i < N; i++)
        hw->scale[i] /= 127.0f * sqrtf((float)K);
    fill_random(hw->bias, (size_t)N, seed + 2, -0.5f, 0.5f, FCL_F16);
    const int64_t ws[2] = {N, K}, ns[1] = {N};
    hw->tw = make_tensor(ctx, FCL_I8, 2, ws, hw->w);
    hw->ts = make_tensor(ctx, FCL_F32, 1, ns, hw->scale);
    hw->tb = make_tensor(ctx, FCL_F16, 1, ns, hw->bias);
    return hw->tw && hw->ts && hw->tb;
}

/* The attention block: F16 activations X [6, 64], 2 heads of HD, int8 weights (W8A16) with
 * row scales and biases, self-attention, causal. */
static void qkvo_case(fcl_context ctx)
{
    const fcl_dtype dt = FCL_F16;
    const int Lq = 6, H = 2, Dm = H * HD;
    const size_t n = (size_t)Lq * Dm;
    float *x = xcalloc(n, sizeof(float));
    fill_random(x, n, 41, -1.0f, 1.0f, dt);
    const int64_t xs[2] = {Lq, Dm};
    fcl_tensor tx = make_tensor(ctx, dt, 2, xs, x), to = make_tensor(ctx, dt, 2, xs, NULL);
    i8_weight *hw = xcalloc(4, sizeof(i8_weight));
    int ok = tx && to;
    for (int i = 0; i < 4; i++)
        ok = make_i8_weight(ctx, &hw[i], Dm, Dm, 42 + 3 * (uint64_t)i) && ok;
    fcl_weight fw[4];
    ref_weight rw[4];
    for (int i = 0; i < 4; i++) {
        fw[i] = (fcl_weight){hw[i].tw, hw[i].ts, hw[i].tb};
        rw[i] = (ref_weight){hw[i].w, hw[i].scale, hw[i].bias};
    }
    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    prm.causal = 1;
    ok = ok &&
         call_ok(ctx, "fcl_attention_qkvo_forward",
                 fcl_attention_qkvo_forward(ctx, &prm, H, tx, NULL, &fw[0], &fw[1], &fw[2], &fw[3], to, NULL)) &&
         call_ok(ctx, "fcl_finish", fcl_finish(ctx));
    float *o = ok ? read_back(ctx, to, n) : NULL;
    if (o) {
        ref_qkvo_problem p = {.Lq = Lq, .Lk = Lq, .D = Dm, .D_ctx = Dm, .H = H};
        p.attn = (ref_attn_problem){.causal = 1, .window_left = -1, .window_right = -1};
        double *ro = xcalloc(n, sizeof(double));
        float *no = xcalloc(n, sizeof(float));
        ref_qkvo_forward(&p, x, NULL, &rw[0], &rw[1], &rw[2], &rw[3], ro);
        ref_qkvo_forward_naive(&p, dt, x, NULL, &rw[0], &rw[1], &rw[2], &rw[3], no, NULL, NULL);
        ok = check("O", o, ro, no, n);
        free(ro), free(no);
    } else {
        ok = 0;
    }
    report("qkvo f16 act, i8 weights + bias, Lq6 D64 H2 causal", ok);
    for (int i = 0; i < 4; i++)
        fcl_tensor_release(hw[i].tw), fcl_tensor_release(hw[i].ts), fcl_tensor_release(hw[i].tb);
    free(hw), free(o), free(x);
    fcl_tensor_release(tx), fcl_tensor_release(to);
}

/* Host sizes: a tensor of 2^40 bytes is refused before anything is allocated, by the size_t
 * check on a 32-bit host (FCL_ERR_UNSUPPORTED, the message naming size_t), by the device's
 * largest allocation on a 64-bit one (FCL_ERR_OUT_OF_MEMORY); no tensor is returned. */
static void sizes_case(fcl_context ctx)
{
    const int64_t shape[3] = {(int64_t)1 << 14, (int64_t)1 << 14, (int64_t)1 << 10};
    fcl_tensor t = (fcl_tensor)&t; /* must come back NULL */
    const fcl_status s = fcl_tensor_create(ctx, FCL_F32, 3, shape, &t);
    const int narrow = sizeof(size_t) < 8;
    const fcl_status want = narrow ? FCL_ERR_UNSUPPORTED : FCL_ERR_OUT_OF_MEMORY;
    const char *msg = fcl_last_error(ctx);
    const int ok = s == want && t == NULL && (!narrow || strstr(msg, "size_t") != NULL);
    printf("  fcl_tensor_create [2^14, 2^14, 2^10] f32: %s (%s), want %s\n", fcl_status_string(s), msg,
           fcl_status_string(want));
    report(narrow ? "sizes: 2^40 bytes refused by the 32-bit size_t check"
                  : "sizes: 2^40 bytes refused by the device's largest allocation", ok);
    if (t && t != (fcl_tensor)&t)
        fcl_tensor_release(t);
}

/* The cases by name, run in this order when none is named. */
static const struct {
    const char *name;
    void (*run)(fcl_context);
} cases[] = {{"sizes", sizes_case}, {"forward", forward_case}, {"varlen", varlen_case}, {"decode", decode_case},
             {"qkvo", qkvo_case}};
enum { N_CASES = sizeof cases / sizeof cases[0] };

int main(int argc, char **argv)
{
    for (int a = 1; a < argc; a++) {
        int known = 0;
        for (int i = 0; i < N_CASES; i++)
            known |= strcmp(argv[a], cases[i].name) == 0;
        if (!known) {
            fprintf(stderr, "usage: flashcl-smoke [sizes] [forward] [varlen] [decode] [qkvo] (default: all)\n");
            return 2;
        }
    }
    fcl_context ctx;
    if (fcl_context_create(NULL, &ctx) != FCL_SUCCESS) {
        fprintf(stderr, "flashcl-smoke: no context: %s\n", fcl_last_error(NULL));
        return 2;
    }
    fcl_device_info info;
    fcl_context_device_info(ctx, &info);
    printf("flashcl-smoke: flashcl %s, %zu-bit host, device %s (%s, %s)\n", fcl_version_string(),
           8 * sizeof(size_t), info.name, info.platform_name, info.driver_version);
    for (int i = 0; i < N_CASES; i++) {
        int wanted = argc == 1;
        for (int a = 1; a < argc; a++)
            wanted |= strcmp(argv[a], cases[i].name) == 0;
        if (wanted) {
            fflush(stdout);
            cases[i].run(ctx);
        }
    }
    fcl_context_release(ctx);
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
