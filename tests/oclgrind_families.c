/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every kernel family once, on small odd shapes, for a device-side checker: scripts/test-abuse
 * runs this program under oclgrind (--check-api --data-races) and fails on any report. Families:
 * the forward's rows, blocked and chunked (loop-capped) kernels, varlen, packed, the backward
 * (and the packed one), decode with split keys and direct (the team form, and the three-phase
 * form with K in its batch and one batch ahead), decode over a paged cache with device lengths,
 * kv-cache append (contiguous and paged), flashcl's GEMM with float and int8 weights, the layer's
 * backward from kept activations (the weight and bias gradients). Each family poisons its
 * outputs with NaN first and must leave none: every output element written (the layer's
 * accumulated gradients start at zero instead, so only their kernels' accesses are checked).
 * `oclgrind_families` runs all; `oclgrind_families NAME` one. Exits non-zero on a failed call or
 * an unwritten output. Not a Criterion test: Criterion's runner forks per test, which the checker
 * does not need.
 */
#include <flashcl/flashcl.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fcl_context ctx;
static int failed;

/* A new F32 / I8 tensor filled with a fixed pattern (index-dependent values in [-1, 1]). */
static fcl_tensor tensor(fcl_dtype dt, int ndim, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t shape[4] = {a, b, c, d};
    fcl_tensor t = NULL;
    if (fcl_tensor_create(ctx, dt, ndim, shape, &t) != FCL_SUCCESS) {
        fprintf(stderr, "fcl_tensor_create: %s\n", fcl_last_error(ctx));
        exit(1);
    }
    const size_t n = (size_t)fcl_tensor_numel(t);
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        x[i] = dt == FCL_I8 ? (float)((int)(i * 37 % 255) - 127) : sinf(0.7f * (float)i + 0.3f);
    fcl_tensor_write_f32(t, x, n);
    free(x);
    return t;
}

static fcl_tensor ints(int ndim, int64_t a, int64_t b, const int32_t *v)
{
    const int64_t shape[2] = {a, b};
    fcl_tensor t = NULL;
    if (fcl_tensor_create(ctx, FCL_I32, ndim, shape, &t) != FCL_SUCCESS ||
        fcl_tensor_write_raw(t, v, sizeof(int32_t) * (size_t)fcl_tensor_numel(t)) != FCL_SUCCESS) {
        fprintf(stderr, "I32 tensor: %s\n", fcl_last_error(ctx));
        exit(1);
    }
    return t;
}

static void poison(fcl_tensor t)
{
    const size_t n = (size_t)fcl_tensor_numel(t);
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    fcl_tensor_write_f32(t, x, n);
    free(x);
}

/* Records a failure unless st is FCL_SUCCESS and every output is written (no NaN left;
 * inputs are finite). LSE may hold -inf for rows that see no key. */
static void check(const char *family, fcl_status st, fcl_tensor *outs, int n)
{
    if (st == FCL_SUCCESS)
        st = fcl_finish(ctx);
    if (st != FCL_SUCCESS) {
        printf("%s: FAILED: %s: %s\n", family, fcl_status_string(st), fcl_last_error(ctx));
        failed = 1;
        return;
    }
    for (int i = 0; i < n; i++) {
        const size_t k = (size_t)fcl_tensor_numel(outs[i]);
        float *x = malloc(sizeof(float) * k);
        fcl_tensor_read_f32(outs[i], x, k);
        for (size_t j = 0; j < k; j++)
            if (isnan(x[j])) {
                printf("%s: FAILED: output %d element %zu not written\n", family, i, j);
                failed = 1;
                free(x);
                return;
            }
        free(x);
    }
    printf("%s: ok\n", family);
}

static void release(fcl_tensor *t, int n)
{
    for (int i = 0; i < n; i++)
        fcl_tensor_release(t[i]);
}

/* Every flag at once: causal off, both windows, softcap, ALiBi, a key mask. */
static fcl_attn_params all_flags(fcl_tensor mask, fcl_tensor alibi)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_left = 3;
    p.window_right = 1;
    p.softcap = 20.0f;
    p.key_mask = mask;
    p.alibi_slopes = alibi;
    return p;
}

/* Dense forward, B 1, Sq 3, Sk (5, or 40 chunked), Hq 2, Hkv 1, D 5. */
static void forward(const char *family, int64_t sk)
{
    fcl_tensor t[7] = {tensor(FCL_F32, 4, 1, 3, 2, 5), tensor(FCL_F32, 4, 1, sk, 1, 5), tensor(FCL_F32, 4, 1, sk, 1, 5),
                       tensor(FCL_F32, 4, 1, 3, 2, 5), tensor(FCL_F32, 3, 1, 2, 3, 0), tensor(FCL_F32, 1, sk, 0, 0, 0),
                       tensor(FCL_F32, 1, 2, 0, 0, 0)};
    poison(t[3]);
    poison(t[4]);
    const fcl_attn_params p = all_flags(t[5], t[6]);
    check(family, fcl_attention_forward(ctx, &p, t[0], t[1], t[2], t[3], t[4], NULL), &t[3], 2);
    release(t, 7);
}

static void varlen(void)
{
    const int32_t cq[3] = {0, 1, 4}, ck[3] = {0, 3, 7};
    fcl_tensor t[8] = {tensor(FCL_F32, 3, 4, 2, 5, 0), tensor(FCL_F32, 3, 7, 1, 5, 0), tensor(FCL_F32, 3, 7, 1, 5, 0),
                       tensor(FCL_F32, 3, 4, 2, 5, 0), tensor(FCL_F32, 2, 2, 4, 0, 0), ints(1, 3, 0, cq),
                       ints(1, 3, 0, ck), tensor(FCL_F32, 1, 7, 0, 0, 0)};
    poison(t[3]);
    fcl_attn_params p = all_flags(t[7], NULL);
    p.causal = 1;
    check("varlen", fcl_attention_varlen_forward(ctx, &p, t[0], t[1], t[2], t[5], t[6], 3, 4, t[3], t[4], NULL), &t[3],
          2);
    release(t, 8);
}

/* Packed forward and backward: 5 rows in two sequences. */
static void packed(void)
{
    const int32_t bounds[10] = {0, 2, 0, 2, 2, 5, 2, 5, 2, 5};
    fcl_tensor t[6] = {tensor(FCL_F32, 4, 5, 3, 2, 5), ints(2, 5, 2, bounds), tensor(FCL_F32, 3, 5, 2, 5, 0),
                       tensor(FCL_F32, 2, 2, 5, 0, 0), tensor(FCL_F32, 3, 5, 2, 5, 0), tensor(FCL_F32, 4, 5, 3, 2, 5)};
    poison(t[2]);
    poison(t[5]);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_left = p.window_right = 1;
    check("packed", fcl_attention_packed_qkv_forward(ctx, &p, t[0], t[1], t[2], t[3], NULL), &t[2], 2);
    check("packed backward", fcl_attention_packed_qkv_backward(ctx, &p, t[0], t[2], t[4], t[3], t[1], t[5], NULL),
          &t[5], 1);
    release(t, 6);
}

/* Dense backward with O and LSE from the forward, then recomputing them. */
static void backward(void)
{
    fcl_tensor t[11] = {tensor(FCL_F32, 4, 1, 3, 2, 5), tensor(FCL_F32, 4, 1, 5, 1, 5), tensor(FCL_F32, 4, 1, 5, 1, 5),
                        tensor(FCL_F32, 4, 1, 3, 2, 5), tensor(FCL_F32, 3, 1, 2, 3, 0), tensor(FCL_F32, 4, 1, 3, 2, 5),
                        tensor(FCL_F32, 4, 1, 3, 2, 5), tensor(FCL_F32, 4, 1, 5, 1, 5), tensor(FCL_F32, 4, 1, 5, 1, 5),
                        tensor(FCL_F32, 1, 5, 0, 0, 0), tensor(FCL_F32, 1, 2, 0, 0, 0)};
    const fcl_attn_params p = all_flags(t[9], t[10]);
    fcl_status st = fcl_attention_forward(ctx, &p, t[0], t[1], t[2], t[3], t[4], NULL);
    for (int form = 0; form < 2 && st == FCL_SUCCESS; form++) {
        for (int i = 6; i < 9; i++)
            poison(t[i]);
        st = fcl_attention_backward(ctx, &p, t[0], t[1], t[2], form ? NULL : t[3], t[5], form ? NULL : t[4], t[6], t[7],
                                    t[8], NULL);
        check(form ? "backward (recomputed O, LSE)" : "backward", st, &t[6], 3);
    }
    release(t, 11);
}

/* Decode over a contiguous cache of 40 rows at length 37, Lq 2, Hq 2, Hkv 1, D 5; `tiles` sets
 * FLASHCL_DECODE_TILES (waves 4: split keys; 1: one split, direct output; a ninth value: the
 * three-phase form's key lanes, a tenth: its K one batch ahead). */
static void decode(const char *family, const char *tiles)
{
    setenv("FLASHCL_DECODE_TILES", tiles, 1);
    fcl_tensor t[5] = {tensor(FCL_F32, 4, 1, 2, 2, 5), tensor(FCL_F32, 4, 1, 40, 1, 5), tensor(FCL_F32, 4, 1, 40, 1, 5),
                       tensor(FCL_F32, 4, 1, 2, 2, 5), tensor(FCL_F32, 3, 1, 2, 2, 0)};
    poison(t[3]);
    poison(t[4]);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_left = 30;
    p.softcap = 20.0f;
    const fcl_kv_cache cache = {t[1], t[2], NULL};
    check(family, fcl_attention_decode(ctx, &p, t[0], &cache, 37, NULL, NULL, t[3], t[4], NULL), &t[3], 2);
    release(t, 5);
    unsetenv("FLASHCL_DECODE_TILES");
}

/* Paged: 5 pages of 3 rows, 2 sequences of 2 pages each, device lengths; append first. */
static void paged(void)
{
    const int32_t table[4] = {4, 0, 2, 1}, lens[2] = {5, 2}, pos[2] = {3, 0};
    fcl_tensor t[9] = {tensor(FCL_F32, 4, 2, 1, 2, 5), tensor(FCL_F32, 4, 5, 3, 1, 5), tensor(FCL_F32, 4, 5, 3, 1, 5),
                       tensor(FCL_F32, 4, 2, 1, 2, 5), ints(2, 2, 2, table), ints(1, 2, 0, lens),
                       tensor(FCL_F32, 4, 2, 2, 1, 5), tensor(FCL_F32, 4, 2, 2, 1, 5), ints(1, 2, 0, pos)};
    poison(t[3]);
    const fcl_kv_cache cache = {t[1], t[2], t[4]};
    check("kv append (paged, device positions)", fcl_kv_cache_append(ctx, &cache, t[6], t[7], -1, t[8], NULL), NULL, 0);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    check("decode (paged, device lengths)", fcl_attention_decode(ctx, &p, t[0], &cache, -1, t[5], NULL, t[3], NULL, NULL),
          &t[3], 1);
    release(t, 9);
}

static void append(void)
{
    fcl_tensor t[4] = {tensor(FCL_F32, 4, 2, 7, 1, 5), tensor(FCL_F32, 4, 2, 7, 1, 5), tensor(FCL_F32, 4, 2, 3, 1, 5),
                       tensor(FCL_F32, 4, 2, 3, 1, 5)};
    const fcl_kv_cache cache = {t[0], t[1], NULL};
    check("kv append", fcl_kv_cache_append(ctx, &cache, t[2], t[3], 4, NULL, NULL), t, 2);
    release(t, 4);
}

/* fcl_project_kv through flashcl's GEMM (FLASHCL_GEMM=own): Ctx [3, 5], weights [7, 5] (float
 * or int8 with scales), biases [7]. */
static void gemm(const char *family, fcl_dtype wdt)
{
    setenv("FLASHCL_GEMM", "own", 1);
    fcl_tensor t[9] = {tensor(FCL_F32, 2, 3, 5, 0, 0), tensor(wdt, 2, 7, 5, 0, 0), tensor(wdt, 2, 7, 5, 0, 0),
                       tensor(FCL_F32, 1, 7, 0, 0, 0), tensor(FCL_F32, 1, 7, 0, 0, 0), tensor(FCL_F32, 2, 3, 7, 0, 0),
                       tensor(FCL_F32, 2, 3, 7, 0, 0), NULL, NULL};
    if (wdt == FCL_I8) {
        t[7] = tensor(FCL_F32, 1, 7, 0, 0, 0);
        t[8] = tensor(FCL_F32, 1, 7, 0, 0, 0);
    }
    poison(t[5]);
    poison(t[6]);
    const fcl_weight wk = {t[1], t[7], t[3]}, wv = {t[2], t[8], t[4]};
    check(family, fcl_project_kv(ctx, t[0], &wk, &wv, t[5], t[6], NULL), &t[5], 2);
    release(t, 9);
    unsetenv("FLASHCL_GEMM");
}

/* fcl_attention_qkvo_backward_saved through flashcl's GEMM (FLASHCL_GEMM=own): self-attention,
 * L 3, D 8, 2 heads, causal, F32 weights [8, 8] with biases; dX poisoned, dw and db (accumulated)
 * zeroed; after fcl_attention_qkvo_forward_save. */
static void layer_backward(void)
{
    setenv("FLASHCL_GEMM", "own", 1);
    enum { L = 3, D = 8 };
    fcl_tensor x = tensor(FCL_F32, 2, L, D, 0, 0), o = tensor(FCL_F32, 2, L, D, 0, 0);
    fcl_tensor dout = tensor(FCL_F32, 2, L, D, 0, 0), dx = tensor(FCL_F32, 2, L, D, 0, 0);
    fcl_tensor act[4], lse = tensor(FCL_F32, 2, 2, L, 0, 0), w[4], b[4], dw[4], db[4];
    fcl_weight wt[4];
    fcl_weight_grad g[4];
    float zeros[D * D] = {0};
    for (int i = 0; i < 4; i++) {
        act[i] = tensor(FCL_F32, 2, L, D, 0, 0);
        w[i] = tensor(FCL_F32, 2, D, D, 0, 0);
        b[i] = tensor(FCL_F32, 1, D, 0, 0, 0);
        dw[i] = tensor(FCL_F32, 2, D, D, 0, 0);
        db[i] = tensor(FCL_F32, 1, D, 0, 0, 0);
        fcl_tensor_write_f32(dw[i], zeros, D * D);
        fcl_tensor_write_f32(db[i], zeros, D);
        wt[i] = (fcl_weight){w[i], NULL, b[i]};
        g[i] = (fcl_weight_grad){dw[i], db[i]};
    }
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.causal = 1;
    const fcl_qkvo_saved saved = {act[0], act[1], act[2], act[3], lse};
    poison(dx);
    fcl_status st = fcl_attention_qkvo_forward_save(ctx, &p, 2, x, NULL, &wt[0], &wt[1], &wt[2], &wt[3], o, &saved,
                                                    NULL);
    if (st == FCL_SUCCESS)
        st = fcl_attention_qkvo_backward_saved(ctx, &p, 2, x, NULL, &wt[0], &wt[1], &wt[2], &wt[3], &saved, dout, dx,
                                               NULL, &g[0], &g[1], &g[2], &g[3], NULL);
    fcl_tensor outs[9] = {dx, dw[0], dw[1], dw[2], dw[3], db[0], db[1], db[2], db[3]};
    check("layer backward (kept activations)", st, outs, 9);
    fcl_tensor rest[5] = {x, o, dout, lse, dx};
    release(rest, 5);
    release(act, 4);
    release(w, 4);
    release(b, 4);
    release(dw, 4);
    release(db, 4);
    unsetenv("FLASHCL_GEMM");
}

static void chunked(void)
{
    setenv("FLASHCL_FORWARD_PATH", "rows", 1);
    setenv("FLASHCL_FORWARD_TILES", "16,16,1", 1);
    setenv("FLASHCL_LOOP_LIMIT", "20000", 1);
    forward("forward chunked (loop cap)", 40);
    unsetenv("FLASHCL_LOOP_LIMIT");
    unsetenv("FLASHCL_FORWARD_TILES");
    unsetenv("FLASHCL_FORWARD_PATH");
}

/* The forward with FLASHCL_FORWARD_PATH=path, which must be the kernel that runs. */
static void forward_path(const char *path, const char *family)
{
    setenv("FLASHCL_FORWARD_PATH", path, 1);
    if (strcmp(fcl_attention_forward_path(ctx, FCL_F32, 5), path) != 0) {
        printf("%s: FAILED: the device runs the %s kernel\n", family, fcl_attention_forward_path(ctx, FCL_F32, 5));
        failed = 1;
    } else {
        forward(family, 5);
    }
    unsetenv("FLASHCL_FORWARD_PATH");
}

static void rows(void) { forward_path("rows", "forward rows"); }
static void blocked(void) { forward_path("blocked", "forward blocked"); }

static void decode_split(void) { decode("decode (split keys)", "16,4,64,4,0"); }
static void decode_direct(void) { decode("decode (one split, direct)", "16,4,64,1,0"); }
static void decode_keys_split(void) { decode("decode three-phase (split keys, K ahead)", "16,4,64,4,0,0,0,0,2,1"); }
static void decode_keys_direct(void) { decode("decode three-phase (one split, direct)", "16,4,64,1,0,0,0,0,2,0"); }
static void gemm_f32(void) { gemm("gemm", FCL_F32); }
static void gemm_i8(void) { gemm("gemm (int8 weights)", FCL_I8); }

int main(int argc, char **argv)
{
    static const struct { const char *name; void (*run)(void); } families[] = {
        {"rows", rows},          {"blocked", blocked},           {"chunked", chunked}, {"varlen", varlen},
        {"packed", packed},      {"backward", backward},         {"decode-split", decode_split},
        {"decode-direct", decode_direct}, {"decode-keys-split", decode_keys_split},
        {"decode-keys-direct", decode_keys_direct}, {"paged", paged}, {"append", append}, {"gemm", gemm_f32},
        {"gemm-i8", gemm_i8}, {"layer-backward", layer_backward},
    };
    if (fcl_context_create(NULL, &ctx) != FCL_SUCCESS) {
        fprintf(stderr, "fcl_context_create: %s\n", fcl_last_error(NULL));
        return 1;
    }
    fcl_device_info info;
    fcl_context_device_info(ctx, &info);
    printf("device: %s (%s)\n", info.name, info.platform_name);
    int ran = 0;
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (argc < 2 || strcmp(argv[1], families[i].name) == 0) {
            families[i].run();
            ran++;
        }
    fcl_context_release(ctx);
    if (!ran) {
        fprintf(stderr, "unknown family %s\n", argv[1]);
        return 2;
    }
    return failed;
}
