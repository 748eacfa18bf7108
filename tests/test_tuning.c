/*
 * Tuned tiles (fcl_tuning_save / fcl_tuning_get): bad input is refused with its status and
 * a sentence and stores nothing; a tensor-core backward entry reads back where that kernel runs; a stored entry is used at once and by a later context on the
 * same device (through its own disk cache folder), the environment override still wins, a
 * damaged entry is ignored (the table's tiles come back), the disk cache off refuses to store,
 * and the forward run with tuned tiles meets the float64 reference (2x rule) and equals the same
 * tiles forced through the environment bit for bit.
 */
#define _XOPEN_SOURCE 700
#include "ref_attention.h"
#include "support.h"

#include <criterion/criterion.h>
#include <dirent.h>
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
}

static void sandbox_fini(void)
{
    unsetenv("FLASHCL_CACHE_DIR");
    unsetenv("FLASHCL_FORWARD_PATH");
    unsetenv("FLASHCL_BLOCKED_TILES");
    unsetenv("FLASHCL_FORWARD_TILES");
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
    static const int mma_bad[4] = {40, 32, 1, 0}, mma_regs[4] = {64, 32, 1, 300};
    static const int bwd_odd[4] = {64, 20, 64, 32}, bwd_big[4] = {512, 32, 64, 32}, bwd_zero[4] = {64, 32, 0, 32};
    static const int blk_uneven[4] = {64, 64, 6, 4}, blk_big[4] = {512, 64, 8, 4}, blk_wide[4] = {64, 64, 4, 32};
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
        {"forward_mma", 64, good, 3, "4"},
        {"forward", 0, good, 3, "head_dim"},
        {"forward", 257, good, 3, "head_dim"},
        {"forward", 64, uneven, 3, "forward"},
        {"forward", 64, zero, 3, "forward"},
        {"forward_mma", 64, mma_bad, 4, "forward_mma"},
        {"forward_mma", 64, mma_regs, 4, "forward_mma"},
        {"backward_mma", 64, good, 3, "4"},
        {"backward_mma", 64, bwd_odd, 4, "backward_mma"},
        {"backward_mma", 64, bwd_big, 4, "backward_mma"},
        {"backward_mma", 64, bwd_zero, 4, "backward_mma"},
        {"forward_blocked", 64, good, 3, "4"},
        {"forward_blocked", 64, blk_uneven, 4, "forward_blocked"},
        {"forward_blocked", 64, blk_big, 4, "forward_blocked"},
        {"forward_blocked", 64, blk_wide, 4, "forward_blocked"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const fcl_status st = fcl_tuning_save(ctx, cases[i].kernel, cases[i].head_dim, cases[i].values, cases[i].n);
        cr_assert(st == FCL_ERR_INVALID_ARGUMENT, "case %zu: %s", i, fcl_status_string(st));
        const char *msg = fcl_last_error(ctx);
        support_assert_sentence(msg);
        cr_assert(support_has_token(msg, cases[i].token), "case %zu: \"%s\" does not name \"%s\"", i, msg,
                  cases[i].token);
    }
    cr_assert(fcl_tuning_save(NULL, "forward", 64, good, 3) == FCL_ERR_INVALID_ARGUMENT);
    int out[3];
    cr_assert(fcl_tuning_get(ctx, "forward", 64, out, 4) == FCL_ERR_INVALID_ARGUMENT);
    cr_assert(fcl_tuning_get(ctx, "nope", 64, out, 3) == FCL_ERR_INVALID_ARGUMENT);
    cr_assert(fcl_tuning_get(NULL, "forward", 64, out, 3) == FCL_ERR_INVALID_ARGUMENT);
    cr_assert(count_files() == 0, "a refused call wrote into the cache folder");
    fcl_context_release(ctx);
}

/* A tensor-core backward entry is stored and read back where that kernel runs; elsewhere
 * fcl_tuning_get reports no such kernel (first value 0) whatever is stored. */
Test(tuning, backward_mma_entry)
{
    fcl_context ctx = support_context();
    const int v[4] = {32, 16, 128, 32}; /* fits 48 KB of local memory at D 96 */
    cr_assert(fcl_tuning_save(ctx, "backward_mma", 96, v, 4) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    int now[4] = {-1, -1, -1, -1};
    cr_assert(fcl_tuning_get(ctx, "backward_mma", 96, now, 4) == FCL_SUCCESS);
    if (strcmp(fcl_attention_backward_path(ctx, FCL_F16, 96), "nvidia-mma") == 0)
        cr_assert(memcmp(now, v, sizeof v) == 0, "stored %d,%d,%d,%d, got %d,%d,%d,%d", v[0], v[1], v[2], v[3],
                  now[0], now[1], now[2], now[3]);
    else
        cr_assert(now[0] == 0, "no tensor-core backward here, yet fcl_tuning_get gave %d keys per work-group", now[0]);
    fcl_context_release(ctx);
}

/* A causal GQA forward (F16 or F32, head dim D) with ctx's stored tiles, then with the same
 * tiles through the environment variable env = tiles: both outputs must be the same bits, and
 * within the float64 rule. */
static void check_tuned_forward(fcl_context ctx, fcl_dtype dt, int D, const char *env, const char *tiles)
{
    const int B = 1, Sq = 77, Sk = 133, Hq = 4, Hkv = 2;
    const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D;
    float *Q = support_xmalloc(sizeof(float) * nq), *K = support_xmalloc(sizeof(float) * nk);
    float *V = support_xmalloc(sizeof(float) * nk), *o1 = support_xmalloc(sizeof(float) * nq);
    float *o2 = support_xmalloc(sizeof(float) * nq), *naive = support_xmalloc(sizeof(float) * nq);
    double *ref = support_xmalloc(sizeof(double) * nq);
    support_random(Q, nq, 71, -1.5f, 1.5f, dt);
    support_random(K, nk, 72, -1.5f, 1.5f, dt);
    support_random(V, nk, 73, -1.0f, 1.0f, dt);
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
    cr_assert(support_bit_diff(o1, o2, nq, &md, &first) == 0, "tuned tiles differ from the same tiles via %s", env);
    ref_attn_problem rp = {B, Sq, Sk, Hq, Hkv, D, 0.0, 1, -1, -1, 0.0, NULL, 0, NULL, 0};
    ref_attention_forward(&rp, Q, K, V, ref, NULL);
    ref_attention_forward_naive(&rp, dt, Q, K, V, naive, NULL);
    const double err = support_max_err_f(o1, ref, nq), nerr = support_max_err_f(naive, ref, nq);
    cr_assert(support_count_nan(o1, nq) == 0, "NaN in O");
    cr_assert(support_within(err, nerr, 2.0), "O: err %g > 2 * naive %g + 1e-5", err, nerr);
    fcl_tensor ts[] = {q, k, v, o};
    for (int i = 0; i < 4; i++)
        fcl_tensor_release(ts[i]);
    free(Q); free(K); free(V); free(o1); free(o2); free(naive); free(ref);
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
    check_tuned_forward(ctx, FCL_F32, D, "FLASHCL_BLOCKED_TILES", tiles);
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
    check_tuned_forward(ctx, FCL_F16, D, "FLASHCL_FORWARD_TILES", "16,32,2");
    unsetenv("FLASHCL_FORWARD_PATH");
    fcl_context_release(ctx);
}
