/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tuned tiles (fcl_tuning_save / fcl_tuning_get): bad input is refused with its status and
 * a sentence and stores nothing; tensor-core forward and backward entries read back where those
 * kernels run (the forward's Q k steps lowered to what fits);
 * a stored entry is used at once and by a later context on the same device (through its own
 * disk cache folder), the environment override still wins, a damaged entry is ignored (the
 * table's tiles come back), the disk cache off refuses to store, and the forward run with tuned
 * tiles meets the float64 reference (2x rule) and equals the same tiles forced through the
 * environment bit for bit; the blocked kernel with tiles whose second Q/K slice buffer is larger
 * than its probabilities meets the reference at odd and even slice counts. The decode tiles
 * ("decode", 10 values) likewise: invalid values and wrong counts refused, stored beside 3- and
 * 4-value entries and read back by a later context, FLASHCL_DECODE_TILES winning over the entry
 * (values it leaves out keep the entry's), and a decode with tuned tiles within the float64
 * rule and bit for bit the same tiles through FLASHCL_DECODE_TILES.
 */
#define _XOPEN_SOURCE 700
#include "ref_attention.h"
#include "support.h"
#include "support_decode.h"
#include "tuning/tuning.h" /* white box: fcl_fit_columns */

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

static void sandbox_init(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/flashcl-tuning-XXXXXX");
    cr_assert(mkdtemp(g_dir) != NULL);
    setenv("FLASHCL_CACHE_DIR", g_dir, 1);
    unsetenv("FLASHCL_FORWARD_TILES");
    unsetenv("FLASHCL_FORWARD_PATH");
    unsetenv("FLASHCL_BLOCKED_TILES");
    unsetenv("FLASHCL_WGMMA_TILES");
    unsetenv("FLASHCL_DECODE_TILES");
    unsetenv("FLASHCL_BACKWARD_PATH");
    unsetenv("FLASHCL_BACKWARD_BLOCKED_TILES");
}

static void sandbox_fini(void)
{
    unsetenv("FLASHCL_CACHE_DIR");
    unsetenv("FLASHCL_FORWARD_PATH");
    unsetenv("FLASHCL_BLOCKED_TILES");
    unsetenv("FLASHCL_FORWARD_TILES");
    unsetenv("FLASHCL_WGMMA_TILES");
    unsetenv("FLASHCL_DECODE_TILES");
    support_remove_tree(g_dir);
}

TestSuite(tuning, .init = sandbox_init, .fini = sandbox_fini);

static int count_files(void)
{
    int n = 0;
    DIR *d = opendir(g_dir);
    cr_assert(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Flips a byte in the middle of every file of the folder. */
static void damage_files(void)
{
    DIR *d = opendir(g_dir);
    cr_assert(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", g_dir, e->d_name);
        FILE *f = fopen(path, "r+b");
        cr_assert(f != NULL);
        cr_assert(fseek(f, 0, SEEK_END) == 0);
        const long n = ftell(f);
        cr_assert(n > 100 && fseek(f, n - 3, SEEK_SET) == 0);
        const int c = fgetc(f);
        cr_assert(fseek(f, n - 3, SEEK_SET) == 0 && fputc(c ^ 0x5a, f) != EOF);
        fclose(f);
    }
    closedir(d);
}

Test(tuning, bad_input_refused)
{
    fcl_context ctx = support_context();
    static const int good[4] = {32, 32, 1, 0}, uneven[3] = {30, 32, 4}, zero[3] = {0, 32, 1};
    static const int mma_bad[5] = {40, 32, 1, 0, 0}, mma_regs[5] = {64, 32, 1, 300, 0};
    static const int mma_qlocal[5] = {64, 32, 1, 0, 17};
    /* forward_wgmma: keys per tile, stages, register cap, overlap, Q in registers; each with one
     * value out of range */
    static const int wg_keys[5] = {96, 1, 0, 0, 0}, wg_stages[5] = {64, 3, 0, 0, 0}, wg_regs[5] = {64, 1, 256, 0, 0};
    static const int wg_overlap[5] = {64, 1, 0, 2, 0}, wg_qregs[5] = {32, 1, 0, 1, 2};
    static const int bwd_odd[7] = {64, 20, 64, 32, 0, 64, 64}, bwd_big[7] = {512, 32, 64, 32, 0, 64, 64};
    static const int bwd_zero[7] = {64, 32, 0, 32, 0, 64, 64}, bwd_kvlocal[7] = {64, 32, 64, 32, 17, 64, 64};
    static const int bwd_cols[7] = {64, 32, 64, 32, 0, 24, 64}, bwd_wide[7] = {64, 32, 64, 32, 0, 64, 272};
    static const int blk_uneven[4] = {64, 64, 6, 4}, blk_big[4] = {512, 64, 8, 4}, blk_wide[4] = {64, 64, 4, 32};
    static const int bb_uneven[4] = {64, 64, 4, 3}, bb_big[4] = {64, 512, 4, 4}, bb_wide[4] = {64, 64, 32, 4};
    static const int cpu_simd[4] = {12, 2, 8, 4}, cpu_rows[4] = {16, 9, 8, 4}, cpu_keys[4] = {16, 2, 65, 4};
    static const int cpu_db[4] = {16, 2, 8, 3};
    /* decode: block_n, rows, wg, waves, split_min, max_regs, stages, tensor-core warps, key lanes,
     * K one batch ahead;
     * valid (for the count cases), then each with one value out of range */
    static const int dec_good[10] = {8, 4, 8, 2, 64, 0, 0, 0, 0};
    static const int dec_stage1[10] = {8, 4, 8, 2, 64, 0, 1, 0, 0}, dec_stage5[10] = {8, 4, 8, 2, 64, 0, 5, 0, 0};
    static const int dec_keys[10] = {0, 4, 8, 2, 64, 0, 0, 0, 0}, dec_rows[10] = {8, 65, 8, 2, 64, 0, 0, 0, 0};
    static const int dec_wg[10] = {8, 4, 2048, 2, 64, 0, 0, 0, 0}, dec_waves[10] = {8, 4, 8, 0, 64, 0, 0, 0, 0};
    static const int dec_split[10] = {8, 4, 8, 2, -1, 0, 0, 0, 0}, dec_regs[10] = {8, 4, 8, 2, 64, 256, 0, 0, 0};
    static const int dec_warps[10] = {8, 4, 8, 2, 64, 0, 0, 9, 0}, dec_lanes3[10] = {8, 4, 8, 2, 64, 0, 0, 0, 3};
    static const int dec_lanes64[10] = {8, 4, 8, 2, 64, 0, 0, 0, 64}, dec_ahead2[10] = {8, 4, 8, 2, 64, 0, 0, 0, 2, 2};
    /* gemm: TM, TN, TK, WM, WN; each with one value out of range or not dividing */
    static const int gemm_uneven[5] = {64, 64, 16, 3, 4}, gemm_big[5] = {512, 64, 16, 8, 4};
    static const int gemm_k[5] = {64, 64, 0, 4, 4}, gemm_items[5] = {256, 256, 8, 4, 4};
    static const struct {
        const char *kernel;
        int head_dim;
        const int *values;
        int n;
        const char *token;
    } cases[] = {
        {NULL, 64, good, 3, "kernel"},
        {"forward", 64, NULL, 3, "values"},
        {"backward", 64, good, 3, "backward"},
        {"forward", 64, good, 4, "3"},
        {"forward_mma", 64, good, 4, "5"},
        {"forward", 0, good, 3, "head_dim"},
        {"forward", 257, good, 3, "head_dim"},
        {"forward", 64, uneven, 3, "forward"},
        {"forward", 64, zero, 3, "forward"},
        {"forward_mma", 64, mma_bad, 5, "forward_mma"},
        {"forward_mma", 64, mma_regs, 5, "forward_mma"},
        {"forward_mma", 64, mma_qlocal, 5, "forward_mma"},
        {"forward_wgmma", 64, good, 4, "5"},
        {"forward_wgmma", 64, wg_keys, 5, "forward_wgmma"},
        {"forward_wgmma", 64, wg_stages, 5, "forward_wgmma"},
        {"forward_wgmma", 64, wg_regs, 5, "forward_wgmma"},
        {"forward_wgmma", 64, wg_overlap, 5, "forward_wgmma"},
        {"forward_wgmma", 64, wg_qregs, 5, "forward_wgmma"},
        {"backward_mma", 64, bwd_odd, 5, "7"},
        {"backward_mma", 64, bwd_odd, 7, "backward_mma"},
        {"backward_mma", 64, bwd_big, 7, "backward_mma"},
        {"backward_mma", 64, bwd_zero, 7, "backward_mma"},
        {"backward_mma", 64, bwd_kvlocal, 7, "backward_mma"},
        {"backward_mma", 64, bwd_cols, 7, "backward_mma"},
        {"backward_mma", 64, bwd_wide, 7, "backward_mma"},
        {"forward_blocked", 64, good, 3, "4"},
        {"forward_blocked", 64, blk_uneven, 4, "forward_blocked"},
        {"forward_blocked", 64, blk_big, 4, "forward_blocked"},
        {"forward_blocked", 64, blk_wide, 4, "forward_blocked"},
        {"backward_blocks", 64, good, 3, "4"},
        {"backward_blocks", 64, bb_uneven, 4, "backward_blocks"},
        {"backward_blocks", 64, bb_big, 4, "backward_blocks"},
        {"backward_blocks", 64, bb_wide, 4, "backward_blocks"},
        {"forward_cpu", 64, good, 3, "4"},
        {"forward_cpu", 64, cpu_simd, 4, "forward_cpu"},
        {"forward_cpu", 64, cpu_rows, 4, "forward_cpu"},
        {"forward_cpu", 64, cpu_keys, 4, "forward_cpu"},
        {"forward_cpu", 64, cpu_db, 4, "forward_cpu"},
        {"decode", 64, dec_good, 9, "10"},
        {"decode", 64, dec_good, 3, "10"},
        {"forward", 64, dec_good, 10, "3"},
        {"decode", 0, dec_good, 10, "head_dim"},
        {"decode", 64, dec_stage1, 10, "decode"},
        {"decode", 64, dec_stage5, 10, "decode"},
        {"decode", 64, dec_keys, 10, "decode"},
        {"decode", 64, dec_rows, 10, "decode"},
        {"decode", 64, dec_wg, 10, "decode"},
        {"decode", 64, dec_waves, 10, "decode"},
        {"decode", 64, dec_split, 10, "decode"},
        {"decode", 64, dec_regs, 10, "decode"},
        {"decode", 64, dec_warps, 10, "decode"},
        {"decode", 64, dec_lanes3, 10, "decode"},
        {"decode", 64, dec_lanes64, 10, "decode"},
        {"decode", 64, dec_ahead2, 10, "decode"},
        {"gemm", 64, good, 3, "5"},
        {"gemm", 64, gemm_uneven, 5, "gemm"},
        {"gemm", 64, gemm_big, 5, "gemm"},
        {"gemm", 64, gemm_k, 5, "gemm"},
        {"gemm", 64, gemm_items, 5, "gemm"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const fcl_status st = fcl_tuning_save(ctx, cases[i].kernel, cases[i].head_dim, cases[i].values, cases[i].n);
        cr_assert(st == FCL_ERR_INVALID_ARGUMENT, "case %zu: %s", i, fcl_status_string(st));
        const char *msg = fcl_last_error(ctx);
        support_assert_sentence(msg);
        cr_assert(support_has_token(msg, cases[i].token), "case %zu: \"%s\" does not name \"%s\"", i, msg,
                  cases[i].token);
    }
    cr_assert(fcl_tuning_save(ctx, "decoder", 64, dec_good, 10) == FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(fcl_last_error(ctx), "forward", "forward_blocked", "forward_cpu", "forward_mma",
                          "forward_wgmma", "backward_mma", "backward_blocks", "decode", "gemm");
    cr_assert(fcl_tuning_save(NULL, "forward", 64, good, 3) == FCL_ERR_INVALID_ARGUMENT);
    int out[FCL_TUNING_MAX_VALUES];
    cr_assert(fcl_tuning_get(ctx, "forward", 64, out, 4) == FCL_ERR_INVALID_ARGUMENT);
    cr_assert(fcl_tuning_get(ctx, "decode", 64, out, 4) == FCL_ERR_INVALID_ARGUMENT);
    cr_assert(fcl_tuning_get(ctx, "nope", 64, out, 3) == FCL_ERR_INVALID_ARGUMENT);
    cr_assert(fcl_tuning_get(NULL, "forward", 64, out, 3) == FCL_ERR_INVALID_ARGUMENT);
    cr_assert(count_files() == 0, "a refused call wrote into the cache folder");
    fcl_context_release(ctx);
}

/* The tensor-core backward's column split: the widest equal split of the padded head dim into
 * multiples of 16 within the most columns asked for (white box: it decides every device's
 * split, while the kernels that take it run on NVIDIA only). */
Test(tuning, backward_column_split)
{
    static const int cases[][3] = {/* padded head dim, most columns, columns per work-group */
                                   {96, 64, 48},   {96, 256, 96},  {256, 224, 128}, {256, 128, 128}, {224, 160, 112},
                                   {224, 111, 32}, {192, 160, 96}, {160, 224, 160}, {160, 64, 32},   {256, 0, 16},
                                   {16, 256, 16},  {128, 17, 16}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        cr_assert(fcl_fit_columns(cases[i][0], cases[i][1]) == cases[i][2], "head dim %d, at most %d: %d, not %d",
                  cases[i][0], cases[i][1], fcl_fit_columns(cases[i][0], cases[i][1]), cases[i][2]);
}

/* A tensor-core backward entry is stored and read back where that kernel runs, its K/V k steps
 * in local memory lowered to the head dim's (6 at D 96) and to what fits beside the dK/dV
 * kernel's stages, its most dK/dV columns per work-group (64) to the widest equal split of the
 * 96 columns into multiples of 16 within them (48); elsewhere fcl_tuning_get reports no such
 * kernel (first value 0) whatever is stored. */
Test(tuning, backward_mma_entry)
{
    fcl_context ctx = support_context();
    const int v[7] = {32, 16, 128, 32, 16, 64, 256}; /* the tiles fit 48 KB of local memory at D 96 */
    cr_assert(fcl_tuning_save(ctx, "backward_mma", 96, v, 7) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    int now[7] = {-1, -1, -1, -1, -1, -1, -1};
    cr_assert(fcl_tuning_get(ctx, "backward_mma", 96, now, 7) == FCL_SUCCESS);
    if (strcmp(fcl_attention_backward_path(ctx, FCL_F16, 96), "nvidia-mma") == 0)
        cr_assert(memcmp(now, v, 4 * sizeof(int)) == 0 && now[4] > 0 && now[4] <= 96 / 16 && now[5] == 48 &&
                      now[6] == 96,
                  "stored 32,16,128,32,16,64,256, got %d,%d,%d,%d,%d,%d,%d", now[0], now[1], now[2], now[3], now[4],
                  now[5], now[6]);
    else
        cr_assert(now[0] == 0, "no tensor-core backward here, yet fcl_tuning_get gave %d keys per work-group", now[0]);
    fcl_context_release(ctx);
}

/* A blocked-backward entry is stored and read back where that kernel runs (forced here with
 * FLASHCL_BACKWARD_PATH=blocked, which any device without a loop cap runs; its own rows halved
 * only where the device's work-group or local memory asks); elsewhere (loop-capped devices)
 * fcl_tuning_get reports no such kernel (first value 0). */
Test(tuning, backward_blocks_entry)
{
    setenv("FLASHCL_BACKWARD_PATH", "blocked", 1);
    fcl_context ctx = support_context();
    const int v[4] = {128, 64, 8, 4};
    cr_assert(fcl_tuning_save(ctx, "backward_blocks", 64, v, 4) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    int now[4] = {-1, -1, -1, -1};
    cr_assert(fcl_tuning_get(ctx, "backward_blocks", 64, now, 4) == FCL_SUCCESS);
    if (strcmp(fcl_attention_backward_path(ctx, FCL_F32, 64), "blocked") == 0)
        cr_assert(memcmp(now, v, sizeof v) == 0 || (now[0] < v[0] && now[1] == v[1] && now[2] == v[2]),
                  "stored 128,64,8,4, got %d,%d,%d,%d", now[0], now[1], now[2], now[3]);
    else
        cr_assert(now[0] == 0, "no blocked backward here, yet fcl_tuning_get gave %d rows per work-group", now[0]);
    fcl_context_release(ctx);
}

/* A GEMM entry, saved at any head dim, serves every projection: read back at another head dim
 * where the tiled GEMM runs (its work-group and K slice lowered only where the device asks),
 * first value 0 where it does not (CPUs without a loop cap: the one-work-item GEMM). */
Test(tuning, gemm_entry)
{
    fcl_context ctx = support_context();
    const int v[5] = {32, 64, 8, 2, 4};
    cr_assert(fcl_tuning_save(ctx, "gemm", 128, v, 5) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    int now[5] = {-1, -1, -1, -1, -1};
    cr_assert(fcl_tuning_get(ctx, "gemm", 32, now, 5) == FCL_SUCCESS);
    fcl_device_info info;
    cr_assert(fcl_context_device_info(ctx, &info) == FCL_SUCCESS);
    if (now[0] != 0) /* the tiled GEMM: GPUs and loop-capped CPUs (llvmpipe) */
        cr_assert(now[0] == v[0] && now[1] == v[1] && now[3] == v[3] && now[4] == v[4] && now[2] > 0 && now[2] <= v[2],
                  "stored 32,64,8,2,4, got %d,%d,%d,%d,%d", now[0], now[1], now[2], now[3], now[4]);
    else
        cr_assert(info.type == FCL_DEVICE_CPU, "a %s device reports no tiled GEMM", fcl_device_type_name(info.type));
    cr_assert(fcl_tuning_count(ctx) == 1, "one entry for every projection, not one per head dim");
    fcl_context_release(ctx);
}

/* Random Q [nq] and K, V [nk] in dtype dt's range (Q, K in [-1.5, 1.5], V in [-1, 1]) from
 * seeds seed, seed + 1, seed + 2; the caller frees them. */
static void random_qkv(size_t nq, size_t nk, uint64_t seed, fcl_dtype dt, float **Q, float **K, float **V)
{
    *Q = support_xmalloc(sizeof(float) * nq);
    *K = support_xmalloc(sizeof(float) * nk);
    *V = support_xmalloc(sizeof(float) * nk);
    support_random(*Q, nq, seed, -1.5f, 1.5f, dt);
    support_random(*K, nk, seed + 1, -1.5f, 1.5f, dt);
    support_random(*V, nk, seed + 2, -1.0f, 1.0f, dt);
}

/* A causal GQA forward (F16 or F32, head dim D) with ctx's stored tiles, then with the tiles
 * given through the environment variable env = tiles: both outputs within the float64 rule, and
 * with `same_bits` (the same tiles both times) the same bits. */
static void check_forward_tiles(fcl_context ctx, fcl_dtype dt, int D, const char *env, const char *tiles,
                                int same_bits)
{
    const int B = 1, Sq = 77, Sk = 133, Hq = 4, Hkv = 2;
    const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D;
    float *Q, *K, *V;
    random_qkv(nq, nk, 71, dt, &Q, &K, &V);
    float *o1 = support_xmalloc(sizeof(float) * nq), *o2 = support_xmalloc(sizeof(float) * nq);
    float *naive = support_xmalloc(sizeof(float) * nq);
    double *ref = support_xmalloc(sizeof(double) * nq);
    const int64_t qs[4] = {B, Sq, Hq, D}, ks[4] = {B, Sk, Hkv, D};
    fcl_tensor q = support_tensor(ctx, dt, 4, qs, Q), k = support_tensor(ctx, dt, 4, ks, K);
    fcl_tensor v = support_tensor(ctx, dt, 4, ks, V), o = support_tensor(ctx, dt, 4, qs, NULL);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.causal = 1;
    support_poison(o);
    cr_assert(fcl_attention_forward(ctx, &p, q, k, v, o, NULL, NULL) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    support_read(o, o1);
    setenv(env, tiles, 1);
    support_poison(o);
    cr_assert(fcl_attention_forward(ctx, &p, q, k, v, o, NULL, NULL) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    support_read(o, o2);
    unsetenv(env);
    double md;
    long first;
    cr_assert(!same_bits || support_bit_diff(o1, o2, nq, &md, &first) == 0,
              "tuned tiles differ from the same tiles via %s", env);
    ref_attn_problem rp = {B, Sq, Sk, Hq, Hkv, D, 0.0, 1, -1, -1, 0.0, NULL, 0, NULL, 0};
    ref_attention_forward(&rp, Q, K, V, ref, NULL);
    ref_attention_forward_naive(&rp, dt, Q, K, V, naive, NULL);
    const double nerr = support_max_err_f(naive, ref, nq);
    const float *const outs[2] = {o1, o2};
    for (int i = 0; i < 2; i++) {
        const double err = support_max_err_f(outs[i], ref, nq);
        cr_assert(support_count_nan(outs[i], nq) == 0, "NaN in O (%s)", i ? tiles : "stored tiles");
        cr_assert(support_within(err, nerr, 2.0), "O (%s): err %g > 2 * naive %g + 1e-5", i ? tiles : "stored tiles",
                  err, nerr);
    }
    fcl_tensor ts[] = {q, k, v, o};
    for (int i = 0; i < 4; i++)
        fcl_tensor_release(ts[i]);
    free(Q); free(K); free(V); free(o1); free(o2); free(naive); free(ref);
}

/* A tensor-core forward entry (Q k steps in local memory included) is stored and read back where
 * that kernel runs (FLASHCL_FORWARD_PATH=nvidia-mma: on Hopper too), Q lowered to the head dim's
 * k steps and to what fits beside the K/V ring, and the forward with it matches the same tiles
 * given through FLASHCL_MMA_TILES; elsewhere fcl_tuning_get reports no such kernel (first value
 * 0) whatever is stored. */
Test(tuning, forward_mma_entry)
{
    setenv("FLASHCL_FORWARD_PATH", "nvidia-mma", 1);
    fcl_context ctx = support_context();
    const int D = 128, v[5] = {64, 32, 1, 0, 16}; /* 16 Q k steps asked for, 8 exist at D 128 */
    cr_assert(fcl_tuning_save(ctx, "forward_mma", D, v, 5) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    int now[5] = {-1, -1, -1, -1, -1};
    cr_assert(fcl_tuning_get(ctx, "forward_mma", D, now, 5) == FCL_SUCCESS);
    if (strcmp(fcl_attention_forward_path(ctx, FCL_F16, D), "nvidia-mma") == 0) {
        cr_assert(memcmp(now, v, 4 * sizeof(int)) == 0 && now[4] > 0 && now[4] <= D / 16,
                  "stored 64,32,1,0,16, got %d,%d,%d,%d,%d", now[0], now[1], now[2], now[3], now[4]);
        check_forward_tiles(ctx, FCL_F16, D, "FLASHCL_MMA_TILES", "64,32,1,0,16", 1);
    } else {
        cr_assert(now[0] == 0, "no tensor-core forward here, yet fcl_tuning_get gave %d rows per work-group", now[0]);
    }
    fcl_context_release(ctx);
}

/* A Hopper wgmma forward entry is stored and read back where that kernel runs, its stages lowered
 * to what fits the local memory (two stages of 128-key tiles do not fit 48 KB at D 64), and the
 * forward with it matches the same tiles given through FLASHCL_WGMMA_TILES; likewise an entry
 * with Q in registers at D 256 (two stages of 32-key tiles, 64 KB, lowered to one); elsewhere
 * fcl_tuning_get reports no such kernel (first value 0) whatever is stored. */
Test(tuning, forward_wgmma_entry)
{
    fcl_context ctx = support_context();
    static const struct {
        int D, v[5];
        const char *tiles;
    } entries[] = {{64, {128, 2, 0, 1, 0}, "128,2,0,1,0"}, {256, {32, 2, 0, 0, 1}, "32,2,0,0,1"}};
    for (size_t i = 0; i < sizeof entries / sizeof *entries; i++) {
        const int D = entries[i].D, *v = entries[i].v;
        cr_assert(fcl_tuning_save(ctx, "forward_wgmma", D, v, 5) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
        int now[5] = {-1, -1, -1, -1, -1};
        cr_assert(fcl_tuning_get(ctx, "forward_wgmma", D, now, 5) == FCL_SUCCESS);
        if (strcmp(fcl_attention_forward_path(ctx, FCL_F16, D), "nvidia-wgmma") != 0) {
            cr_assert(now[0] == 0, "no wgmma forward here, yet fcl_tuning_get gave %d keys per tile", now[0]);
            continue;
        }
        fcl_device_info info;
        cr_assert(fcl_context_device_info(ctx, &info) == FCL_SUCCESS);
        /* Q (unless in registers; then its 64 staged rows at least) and two stages */
        const uint64_t rows = v[4] ? (4 * v[0] > 64 ? 4 * v[0] : 64) : 64 + 4 * v[0];
        const int stages = info.local_mem_bytes >= rows * D * 2 ? 2 : 1;
        cr_assert(now[0] == v[0] && now[1] == stages && now[2] == v[2] && now[3] == v[3] && now[4] == v[4],
                  "stored %s, got %d,%d,%d,%d,%d (%d stages fit)", entries[i].tiles, now[0], now[1], now[2], now[3],
                  now[4], stages);
        check_forward_tiles(ctx, FCL_F16, D, "FLASHCL_WGMMA_TILES", entries[i].tiles, 1);
    }
    fcl_context_release(ctx);
}

/* A blocked-kernel entry is used where that kernel runs (here forced, FLASHCL_FORWARD_PATH=blocked,
 * on any device without a loop cap): fcl_tuning_get reads it back, and the forward with it is
 * correct and the same bits as those tiles through FLASHCL_BLOCKED_TILES. */
Test(tuning, blocked_entry)
{
    fcl_context ctx = support_context();
    setenv("FLASHCL_FORWARD_PATH", "blocked", 1);
    const int D = 64;
    int table[4] = {0, 0, 0, 0};
    cr_assert(fcl_tuning_get(ctx, "forward_blocked", D, table, 4) == FCL_SUCCESS);
    if (strcmp(fcl_attention_forward_path(ctx, FCL_F32, D), "blocked") != 0) { /* a loop-capped device */
        cr_assert(table[0] == 0, "no blocked kernel here, yet fcl_tuning_get gave %d rows per work-group", table[0]);
        fcl_context_release(ctx);
        return;
    }
    const int tuned[4] = {32, table[1] == 32 ? 64 : 32, 4, 4}; /* unlike the table's, within every limit */
    cr_assert(fcl_tuning_save(ctx, "forward_blocked", D, tuned, 4) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    int now[4];
    cr_assert(fcl_tuning_get(ctx, "forward_blocked", D, now, 4) == FCL_SUCCESS);
    cr_assert(memcmp(now, tuned, sizeof now) == 0, "stored %d,%d,%d,%d, got %d,%d,%d,%d", tuned[0], tuned[1],
              tuned[2], tuned[3], now[0], now[1], now[2], now[3]);
    char tiles[64];
    snprintf(tiles, sizeof tiles, "%d,%d,%d,%d", tuned[0], tuned[1], tuned[2], tuned[3]);
    check_forward_tiles(ctx, FCL_F32, D, "FLASHCL_BLOCKED_TILES", tiles, 1);
    fcl_context_release(ctx);
}

/* The blocked kernel (forced, on any device without a loop cap) with tiles whose second Q/K slice
 * buffer is larger than the probabilities' array (32 x 16 blocks of 4 x 2, 32-dim slices), at
 * an odd (head dim 96: 3) and an even (64: 2) slice count; and with two V buffers (the eighth
 * value 2) at an even (16 keys in 4-key slices) and an odd (24 keys in 8-key slices, 3 keys
 * per work-item: vector width 1) V slice count: within the float64 rule. */
Test(tuning, blocked_slice_buffers)
{
    fcl_context ctx = support_context();
    setenv("FLASHCL_FORWARD_PATH", "blocked", 1);
    if (strcmp(fcl_attention_forward_path(ctx, FCL_F32, 64), "blocked") != 0) { /* a loop-capped device */
        int table[4];
        cr_assert(fcl_tuning_get(ctx, "forward_blocked", 64, table, 4) == FCL_SUCCESS);
        cr_assert(table[0] == 0, "no blocked kernel here, yet fcl_tuning_get gave %d rows per work-group", table[0]);
        fcl_context_release(ctx);
        return;
    }
    check_forward_tiles(ctx, FCL_F16, 96, "FLASHCL_BLOCKED_TILES", "32,16,4,2,32,16", 0);
    check_forward_tiles(ctx, FCL_F32, 64, "FLASHCL_BLOCKED_TILES", "32,16,4,2,32,16", 0);
    check_forward_tiles(ctx, FCL_F16, 96, "FLASHCL_BLOCKED_TILES", "32,16,4,2,16,4,0,2", 0);
    check_forward_tiles(ctx, FCL_F32, 64, "FLASHCL_BLOCKED_TILES", "32,24,4,3,16,8,0,2", 0);
    fcl_context_release(ctx);
}

/* A CPU-kernel entry is used where that kernel runs (here forced, FLASHCL_FORWARD_PATH=cpu, on
 * any device without a loop cap): fcl_tuning_get reads it back, and the forward with it is correct
 * and the same bits as those tiles through FLASHCL_CPU_TILES; then the kernel's shapes through
 * FLASHCL_CPU_TILES: 4-, 8- and 16-float vectors, one to three row vectors, tiles of 1, 3, 5 and
 * 16 keys, 1 to 16 dims per P V step, at head dims 40 (padded to 64: dims past the head dim), 96
 * and 16, within the float64 rule. */
Test(tuning, cpu_entry)
{
    fcl_context ctx = support_context();
    setenv("FLASHCL_FORWARD_PATH", "cpu", 1);
    const int D = 64;
    int table[4] = {0, 0, 0, 0};
    cr_assert(fcl_tuning_get(ctx, "forward_cpu", D, table, 4) == FCL_SUCCESS);
    if (strcmp(fcl_attention_forward_path(ctx, FCL_F32, D), "cpu") != 0) { /* a loop-capped device */
        cr_assert(table[1] == 0, "no CPU kernel here, yet fcl_tuning_get gave %d row vectors", table[1]);
        fcl_context_release(ctx);
        return;
    }
    cr_assert(table[0] == 4 || table[0] == 8 || table[0] == 16, "vector width %d", table[0]);
    const int tuned[4] = {table[0], table[1] == 3 ? 2 : 3, table[2] == 4 ? 8 : 4, 2}; /* unlike the table's */
    cr_assert(fcl_tuning_save(ctx, "forward_cpu", D, tuned, 4) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    int now[4];
    cr_assert(fcl_tuning_get(ctx, "forward_cpu", D, now, 4) == FCL_SUCCESS);
    cr_assert(memcmp(now, tuned, sizeof now) == 0, "stored %d,%d,%d,%d, got %d,%d,%d,%d", tuned[0], tuned[1],
              tuned[2], tuned[3], now[0], now[1], now[2], now[3]);
    char tiles[64];
    snprintf(tiles, sizeof tiles, "%d,%d,%d,%d", tuned[0], tuned[1], tuned[2], tuned[3]);
    check_forward_tiles(ctx, FCL_F32, D, "FLASHCL_CPU_TILES", tiles, 1);
    check_forward_tiles(ctx, FCL_F16, 40, "FLASHCL_CPU_TILES", "4,3,5,1", 0);
    check_forward_tiles(ctx, FCL_F32, 96, "FLASHCL_CPU_TILES", "8,1,3,16", 0);
    check_forward_tiles(ctx, FCL_F16, 16, "FLASHCL_CPU_TILES", "16,2,16,8", 0);
    check_forward_tiles(ctx, FCL_F32, 64, "FLASHCL_CPU_TILES", "16,1,1,4", 0);
    fcl_context_release(ctx);
}

Test(tuning, cache_off_refuses)
{
    setenv("FLASHCL_CACHE_DIR", "off", 1);
    fcl_context ctx = support_context();
    const int v[3] = {16, 16, 1};
    cr_assert(fcl_tuning_save(ctx, "forward", 64, v, 3) == FCL_ERR_UNSUPPORTED);
    support_assert_sentence(fcl_last_error(ctx));
    fcl_context_release(ctx);
}

/* Stores tiles unlike the table's, then checks every place they must show. */
Test(tuning, stored_used_kept_and_overridden)
{
    fcl_context ctx = support_context();
    int table[3], now[3];
    cr_assert(fcl_tuning_get(ctx, "forward", 64, table, 3) == FCL_SUCCESS);
    /* small tiles that fit every device's limits unchanged, and differ from the table's */
    const int tuned[3] = {table[0] == 8 ? 16 : 8, 16, 2};
    cr_assert(fcl_tuning_save(ctx, "forward", 64, tuned, 3) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    cr_assert(fcl_tuning_get(ctx, "forward", 64, now, 3) == FCL_SUCCESS);
    cr_assert(memcmp(now, tuned, sizeof now) == 0, "the stored tiles are not used at once");
    cr_assert(fcl_tuning_get(ctx, "forward", 50, now, 3) == FCL_SUCCESS); /* pads to 64 too */
    cr_assert(memcmp(now, tuned, sizeof now) == 0, "head dim 50 (padded 64) does not use the entry");
    cr_assert(fcl_tuning_get(ctx, "forward", 128, now, 3) == FCL_SUCCESS);
    int table128[3];
    fcl_context fresh = NULL;
    setenv("FLASHCL_CACHE_DIR", "off", 1);
    fresh = support_context();
    cr_assert(fcl_tuning_get(fresh, "forward", 128, table128, 3) == FCL_SUCCESS);
    fcl_context_release(fresh);
    setenv("FLASHCL_CACHE_DIR", g_dir, 1);
    cr_assert(memcmp(now, table128, sizeof now) == 0, "another head dim changed");
    fcl_context_release(ctx);

    ctx = support_context(); /* a later context on the same device reads the entry */
    cr_assert(fcl_tuning_get(ctx, "forward", 64, now, 3) == FCL_SUCCESS);
    cr_assert(memcmp(now, tuned, sizeof now) == 0, "a new context does not read the stored tiles");
    setenv("FLASHCL_FORWARD_TILES", "16,16,4", 1);
    cr_assert(fcl_tuning_get(ctx, "forward", 64, now, 3) == FCL_SUCCESS);
    cr_assert(now[0] == 16 && now[1] == 16 && now[2] == 4, "the environment does not win over the entry");
    unsetenv("FLASHCL_FORWARD_TILES");
    fcl_context_release(ctx);

    damage_files(); /* a damaged entry is ignored */
    ctx = support_context();
    cr_assert(fcl_tuning_get(ctx, "forward", 64, now, 3) == FCL_SUCCESS);
    cr_assert(memcmp(now, table, sizeof now) == 0, "a damaged entry was used");
    fcl_context_release(ctx);
}

/* The forward with stored tiles: correct, and the same bits as those tiles through the env. */
Test(tuning, forward_with_tuned_tiles)
{
    fcl_context ctx = support_context();
    const int tuned[3] = {16, 32, 2}, D = 40;
    cr_assert(fcl_tuning_save(ctx, "forward", D, tuned, 3) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    setenv("FLASHCL_FORWARD_PATH", "rows", 1); /* the entry is the rows kernel's */
    check_forward_tiles(ctx, FCL_F16, D, "FLASHCL_FORWARD_TILES", "16,32,2", 1);
    unsetenv("FLASHCL_FORWARD_PATH");
    fcl_context_release(ctx);
}

/* Decode tiles that run as given on every device at D 64 (one team of 8 work-items, 8 dims
 * each, 4 rows; no cp.async ring, no tensor-core form; the three-phase form with 2 work-items
 * per key, K one batch ahead), unlike every table entry. */
static const int k_decode_tiles[10] = {8, 4, 8, 2, 64, 0, 0, 0, 2, 1};

static void expect_values(const int *got, const int *want, int n, const char *what)
{
    char g[96] = "", w[96] = "";
    for (int i = 0; i < n; i++) {
        snprintf(g + strlen(g), sizeof g - strlen(g), i ? ",%d" : "%d", got[i]);
        snprintf(w + strlen(w), sizeof w - strlen(w), i ? ",%d" : "%d", want[i]);
    }
    cr_assert(memcmp(got, want, sizeof(int) * (size_t)n) == 0, "%s: got %s, expected %s", what, g, w);
}

/* A decode entry is stored beside 3- and 4-value entries, used at once (at every head dim that
 * pads to the same size) and by a later context; FLASHCL_DECODE_TILES wins over it (the values
 * it leaves out keep the entry's), unless it is invalid. */
Test(tuning, decode_entry)
{
    fcl_context ctx = support_context();
    const int fwd[3] = {16, 16, 2}, bwd[7] = {32, 16, 128, 32, 1, 64, 64};
    int table[10], now[10];
    cr_assert(fcl_tuning_get(ctx, "decode", 64, table, 10) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    cr_assert(memcmp(table, k_decode_tiles, sizeof table) != 0, "test bug: the table has the tuned tiles");
    cr_assert(fcl_tuning_save(ctx, "forward", 64, fwd, 3) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    cr_assert(fcl_tuning_save(ctx, "decode", 64, k_decode_tiles, 10) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    cr_assert(fcl_tuning_save(ctx, "backward_mma", 64, bwd, 7) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    cr_assert(fcl_tuning_get(ctx, "decode", 64, now, 10) == FCL_SUCCESS);
    expect_values(now, k_decode_tiles, 10, "decode D 64 right after fcl_tuning_save");
    cr_assert(fcl_tuning_get(ctx, "decode", 50, now, 10) == FCL_SUCCESS);
    expect_values(now, k_decode_tiles, 10, "decode D 50 (padded 64)");
    cr_assert(fcl_tuning_get(ctx, "decode", 128, now, 10) == FCL_SUCCESS);
    cr_assert(memcmp(now, k_decode_tiles, sizeof now) != 0, "the D 64 entry changed D 128");
    fcl_context_release(ctx);

    ctx = support_context(); /* a later context reads all three entries */
    cr_assert(fcl_tuning_get(ctx, "decode", 64, now, 10) == FCL_SUCCESS);
    expect_values(now, k_decode_tiles, 10, "decode in a later context");
    cr_assert(fcl_tuning_get(ctx, "forward", 64, now, 3) == FCL_SUCCESS);
    expect_values(now, fwd, 3, "forward in a later context");
    cr_assert(fcl_tuning_get(ctx, "backward_mma", 64, now, 7) == FCL_SUCCESS);
    if (strncmp(fcl_attention_backward_path(ctx, FCL_F16, 64), "nvidia-", 7) == 0) /* mma or wgmma */
        expect_values(now, bwd, 7, "backward_mma in a later context");
    else
        cr_assert(now[0] == 0, "no tensor-core backward here, yet fcl_tuning_get gave %d keys per work-group", now[0]);

    setenv("FLASHCL_DECODE_TILES", "16,2,16", 1);
    cr_assert(fcl_tuning_get(ctx, "decode", 64, now, 10) == FCL_SUCCESS);
    const int env[10] = {16, 2, 16, k_decode_tiles[3], k_decode_tiles[4], k_decode_tiles[5], k_decode_tiles[6],
                         k_decode_tiles[7], k_decode_tiles[8], k_decode_tiles[9]};
    expect_values(now, env, 10, "FLASHCL_DECODE_TILES=16,2,16 over the entry");
    setenv("FLASHCL_DECODE_TILES", "16,2,16,2,64,0,1", 1); /* stages 1: invalid, ignored */
    cr_assert(fcl_tuning_get(ctx, "decode", 64, now, 10) == FCL_SUCCESS);
    expect_values(now, k_decode_tiles, 10, "an invalid FLASHCL_DECODE_TILES over the entry");
    unsetenv("FLASHCL_DECODE_TILES");
    fcl_context_release(ctx);
}

/* Poisons O and LSE, runs decode over the first len rows of the cache and reads both back. */
static void run_decode(fcl_context ctx, fcl_tensor q, const fcl_kv_cache *cache, int len, fcl_tensor o,
                       fcl_tensor lse, float *ho, float *hl)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    support_poison(o);
    support_poison(lse);
    cr_assert(fcl_attention_decode(ctx, &p, q, cache, len, NULL, NULL, o, lse, NULL) == FCL_SUCCESS, "%s",
              fcl_last_error(ctx));
    support_read(o, ho);
    support_read(lse, hl);
}

/* Decode (F16, GQA 4 / 2, two query rows, host length 261 of a 300-row cache whose later rows
 * hold NaN) with stored tiles: within the float64 rule, and the same bits of O and LSE as those
 * tiles through FLASHCL_DECODE_TILES. Splits of at least 16 keys, so several splits merge. */
Test(tuning, decode_with_tuned_tiles)
{
    fcl_context ctx = support_context();
    const int B = 2, Lq = 2, Hq = 4, Hkv = 2, D = 64, L = 300, len = 261;
    const int tuned[10] = {8, 4, 8, 3, 16, 0, 0, 0, 0};
    cr_assert(fcl_tuning_save(ctx, "decode", D, tuned, 10) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    int now[10];
    cr_assert(fcl_tuning_get(ctx, "decode", D, now, 10) == FCL_SUCCESS);
    expect_values(now, tuned, 10, "the stored decode tiles");
    const size_t nq = (size_t)B * Lq * Hq * D, nk = (size_t)B * L * Hkv * D, nl = (size_t)B * Hq * Lq;
    float *Q, *K, *V;
    random_qkv(nq, nk, 81, FCL_F16, &Q, &K, &V);
    float *o1 = support_xmalloc(sizeof(float) * nq), *o2 = support_xmalloc(sizeof(float) * nq);
    float *l1 = support_xmalloc(sizeof(float) * nl), *l2 = support_xmalloc(sizeof(float) * nl);
    for (size_t e = 0; e < nk; e++)
        if (e / ((size_t)Hkv * D) % L >= (size_t)len) /* rows past the length: never read */
            K[e] = V[e] = NAN;
    const int64_t qs[4] = {B, Lq, Hq, D}, ks[4] = {B, L, Hkv, D}, ls[3] = {B, Hq, Lq};
    fcl_tensor q = support_tensor(ctx, FCL_F16, 4, qs, Q), o = support_tensor(ctx, FCL_F16, 4, qs, NULL);
    fcl_tensor lse = support_tensor(ctx, FCL_F32, 3, ls, NULL);
    fcl_kv_cache cache = {support_tensor(ctx, FCL_F16, 4, ks, K), support_tensor(ctx, FCL_F16, 4, ks, V), NULL};
    run_decode(ctx, q, &cache, len, o, lse, o1, l1);
    setenv("FLASHCL_DECODE_TILES", "8,4,8,3,16,0,0,0,0", 1);
    run_decode(ctx, q, &cache, len, o, lse, o2, l2);
    unsetenv("FLASHCL_DECODE_TILES");
    double md;
    long first;
    cr_assert(support_bit_diff(o1, o2, nq, &md, &first) == 0, "O: tuned tiles differ from the same tiles via "
              "FLASHCL_DECODE_TILES (first at %ld, by %g)", first, md);
    cr_assert(support_bit_diff(l1, l2, nl, &md, &first) == 0, "LSE: tuned tiles differ from the same tiles via "
              "FLASHCL_DECODE_TILES (first at %ld, by %g)", first, md);
    const int eff[2] = {len, len};
    const support_decode_problem p = {FCL_F16, B, Lq, Hq, Hkv, D, L, -1, 0.0f, 0.0f, Q, K, V, eff, NULL, 0, NULL, 0};
    const support_decode_check r = support_decode_check_ref(&p, o1, l1);
    char why[400];
    support_decode_describe(&r, why, sizeof why);
    cr_assert(r.ok, "decode with tuned tiles: %s", why);
    fcl_tensor ts[] = {q, o, lse, cache.k, cache.v};
    for (int i = 0; i < 5; i++)
        fcl_tensor_release(ts[i]);
    free(Q); free(K); free(V); free(o1); free(o2); free(l1); free(l2);
    fcl_context_release(ctx);
}
