/* flashcl-bench --tune: the tile search of the forward kernel that runs on the device, and of
 * the NVIDIA tensor-core backward where it runs. Candidates are applied through the
 * FLASHCL_FORWARD_TILES / FLASHCL_BLOCKED_TILES / FLASHCL_MMA_TILES / FLASHCL_BACKWARD_MMA_TILES
 * overrides (which win over the table and any stored entry), each is timed and checked against
 * the float64 reference (a backward candidate on a smaller shape that the check covers, then
 * timed on the big one), and the fastest candidate that passes is stored with fcl_tuning_save.
 * A candidate that fails to build or fails the check is never stored. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#define MAX_CANDIDATES 48

typedef struct tune_space {
    int backward;       /* the candidates are backward tiles */
    const char *kernel; /* fcl_tuning_save's name */
    const char *env;    /* the override variable */
    int n_values;
    int count;
    int values[MAX_CANDIDATES][4];
} tune_space;

static void add(tune_space *s, int a, int b, int c, int d)
{
    if (s->count < MAX_CANDIDATES) {
        const int v[4] = {a, b, c, d};
        memcpy(s->values[s->count++], v, sizeof v);
    }
}

/* The candidates for the kernel that runs at (dtype, d) on this device. */
static void make_space(const bench_env *env, fcl_dtype dt, int d, tune_space *s)
{
    memset(s, 0, sizeof *s);
    if (strcmp(fcl_attention_forward_path(env->ctx, dt, d), "nvidia-mma") == 0) {
        *s = (tune_space){0, "forward_mma", "FLASHCL_MMA_TILES", 4, 0, {{0}}};
        static const int mt[][2] = {{64, 1}, {64, 2}, {128, 1}, {128, 2}, {256, 2}}; /* rows, m-tiles */
        for (size_t i = 0; i < sizeof mt / sizeof *mt; i++)
            for (int n = 16; n <= 64; n *= 2)
                add(s, mt[i][0], n, mt[i][1], 0);
        return;
    }
    if (strcmp(fcl_attention_forward_path(env->ctx, dt, d), "blocked") == 0) {
        *s = (tune_space){0, "forward_blocked", "FLASHCL_BLOCKED_TILES", 4, 0, {{0}}};
        static const int bw[][4] = {{64, 64, 4, 4},  {128, 64, 4, 4}, {128, 64, 8, 4}, {64, 64, 8, 4},
                                    {64, 32, 4, 2},  {128, 32, 8, 2}, {64, 128, 4, 8}, {128, 128, 8, 8},
                                    {32, 64, 2, 4},  {64, 64, 4, 8},  {128, 64, 8, 8}, {256, 64, 16, 4}};
        for (size_t i = 0; i < sizeof bw / sizeof *bw; i++)
            add(s, bw[i][0], bw[i][1], bw[i][2], bw[i][3]);
        return;
    }
    *s = (tune_space){0, "forward", "FLASHCL_FORWARD_TILES", 3, 0, {{0}}};
    if (env->info.type == FCL_DEVICE_CPU) { /* a few work-items with many rows each */
        static const int mr[][2] = {{8, 8}, {16, 8}, {16, 16}, {32, 16}, {32, 32}};
        for (size_t i = 0; i < sizeof mr / sizeof *mr; i++)
            for (int n = 32; n <= 128; n *= 2)
                add(s, mr[i][0], n, mr[i][1], 0);
    } else if (env->is_gpu) {
        for (int m = 32; m <= 256; m *= 2)
            for (int n = 16; n <= 64; n *= 2)
                for (int r = 1; r <= 2; r++)
                    add(s, m, n, r, 0);
    } else {
        for (int m = 16; m <= 32; m *= 2)
            for (int n = 16; n <= 32; n *= 2)
                for (int r = 1; r <= 2; r++)
                    add(s, m, n, r, 0);
    }
}

/* The candidates of the tensor-core backward at (dtype, d); 0 where it does not run. */
static int make_backward_space(const bench_env *env, fcl_dtype dt, int d, tune_space *s)
{
    memset(s, 0, sizeof *s);
    if (strcmp(fcl_attention_backward_path(env->ctx, dt, d), "nvidia-mma") != 0)
        return 0;
    *s = (tune_space){1, "backward_mma", "FLASHCL_BACKWARD_MMA_TILES", 4, 0, {{0}}};
    for (int kn = 32; kn <= 128; kn *= 2)      /* dK/dV keys per work-group */
        for (int km = 16; km <= 64; km *= 2)   /* dK/dV query rows per tile */
            for (int qm = 64; qm <= 128; qm *= 2) /* dQ rows per work-group */
                add(s, kn, km, qm, qm == 64 ? 32 : 16);
    for (int qn = 16; qn <= 64; qn *= 2)       /* dQ keys per tile, at the default dK/dV tiles */
        add(s, 64, 32, 64, qn);
    return 1;
}

/* The timed shape: FlashAttention's benchmark at S 4096 on GPUs, a small one elsewhere. */
static bench_case tune_case(const bench_env *env, fcl_dtype dt, int d)
{
    bench_case c = {dt, 1, 512, 512, 4, 4, d, 0, -1, -1, 0.0f, 0};
    if (env->is_gpu) {
        c.b = 4;
        c.sq = c.sk = 4096;
        c.hq = c.hkv = d <= 2048 ? 2048 / d : 1;
    } else if (env->info.type != FCL_DEVICE_CPU) {
        c.sq = c.sk = 256;
        c.hq = c.hkv = 2;
    }
    return c;
}

static void values_str(const int *v, int n, char *buf, size_t len)
{
    if (n == 3)
        snprintf(buf, len, "%d,%d,%d", v[0], v[1], v[2]);
    else
        snprintf(buf, len, "%d,%d,%d,%d", v[0], v[1], v[2], v[3]);
}

static void progress(int done, int total, int d, const char *tiles, double tflops, double best)
{
    char bar[25];
    const int fill = total > 0 ? done * 24 / total : 24;
    for (int i = 0; i < 24; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[24] = '\0';
    fprintf(stderr, "\r[%s] %2d/%-2d D %-3d %-14s %8.3f TFLOP/s (best %.3f)  ", bar, done, total, d, tiles,
            tflops, best > 0 ? best : 0.0);
    fflush(stderr);
}

/* Times one candidate (the override set); 1 when it ran and passed the check. A backward
 * candidate is first checked on a shape small enough for the float64 reference (odd lengths,
 * GQA, causal), since the timed one is reported unchecked. */
static int try_candidate(const bench_env *env, const tune_space *s, const bench_case *c, double *tflops)
{
    bench_env quiet = *env;
    quiet.json = 0;
    quiet.reps = env->is_gpu ? 5 : 3;
    quiet.warmup = 1;
    quiet.check_rows = 8;
    bench_result r;
    memset(&r, 0, sizeof r);
    *tflops = 0.0;
    if (s->backward) {
        bench_case small = *c;
        small.b = 2;
        small.sq = 301;
        small.sk = 517;
        small.hq = 4;
        small.hkv = 2;
        small.causal = 1;
        bench_env once = quiet;
        once.reps = 1;
        once.warmup = 0;
        if (bench_backward(&once, &small, &r) != 0 || !r.ok || r.rows_checked == 0)
            return 0;
        memset(&r, 0, sizeof r);
        if (bench_backward(&quiet, c, &r) != 0 || !r.ok)
            return 0;
    } else if (bench_forward(&quiet, c, &r) != 0 || !r.ok) {
        return 0;
    }
    *tflops = r.tflops;
    return 1;
}

/* One kernel's search space at one head dim: returns an exit code. */
static int tune_space_at(const bench_env *env, fcl_dtype dt, int d, const tune_space *sp)
{
    const tune_space s = *sp;
    const bench_case c = tune_case(env, dt, d);
    int table[4] = {0, 0, 0, 0}, best_v[4] = {0, 0, 0, 0};
    double best = -1.0, table_tflops = -1.0;
    if (fcl_tuning_get(env->ctx, s.kernel, d, table, s.n_values) != FCL_SUCCESS)
        return bench_lib_error(env, "fcl_tuning_get", FCL_ERR_INVALID_ARGUMENT);
    /* the current tiles first (so the winner is never worse than what runs now), then the grid */
    int tried[MAX_CANDIDATES + 1][4];
    int n_tried = 0;
    for (int i = -1; i < s.count; i++) {
        char tiles[48];
        const int *want = i < 0 ? table : s.values[i];
        values_str(want, s.n_values, tiles, sizeof tiles);
        setenv(s.env, tiles, 1);
        int eff[4] = {0, 0, 0, 0}; /* after the device's limits */
        if (fcl_tuning_get(env->ctx, s.kernel, d, eff, s.n_values) != FCL_SUCCESS)
            continue;
        int seen = 0;
        for (int k = 0; k < n_tried && !seen; k++)
            seen = memcmp(tried[k], eff, sizeof eff) == 0;
        double tflops = 0.0;
        if (!seen) {
            memcpy(tried[n_tried++], eff, sizeof eff);
            if (try_candidate(env, &s, &c, &tflops)) {
                if (i < 0)
                    table_tflops = tflops;
                if (tflops > best) {
                    best = tflops;
                    memcpy(best_v, eff, sizeof eff);
                }
            }
        }
        values_str(eff, s.n_values, tiles, sizeof tiles);
        progress(i + 2, s.count + 1, d, tiles, tflops, best);
    }
    unsetenv(s.env);
    fputc('\n', stderr);
    char won[48], was[48];
    values_str(best_v, s.n_values, won, sizeof won);
    values_str(table, s.n_values, was, sizeof was);
    if (best <= 0.0) {
        fprintf(stderr, "flashcl-bench: tune D %d: no candidate passed the check; nothing stored\n", d);
        return BENCH_EXIT_WRONG;
    }
    const fcl_status st = fcl_tuning_save(env->ctx, s.kernel, d, best_v, s.n_values);
    if (env->json)
        printf("{\"op\":\"tune\",\"device\":\"%s\",\"kernel\":\"%s\",\"dtype\":\"%s\",\"d\":%d,\"b\":%d,\"s\":%d,"
               "\"h\":%d,\"tiles\":\"%s\",\"tflops\":%.6g,\"previous_tiles\":\"%s\",\"previous_tflops\":%.6g,"
               "\"candidates\":%d,\"stored\":%s}\n",
               env->info.name, s.kernel, fcl_dtype_name(dt), d, c.b, c.sq, c.hq, won, best, was, table_tflops,
               n_tried, st == FCL_SUCCESS ? "true" : "false");
    else
        printf("tune %s D %d (%s, B %d, S %d, H %d): %s at %.3f TFLOP/s (was %s at %.3f), %d settings; %s\n",
               s.kernel, d, fcl_dtype_name(dt), c.b, c.sq, c.hq, won, best, was, table_tflops, n_tried,
               st == FCL_SUCCESS ? "stored" : "NOT stored");
    return st == FCL_SUCCESS ? BENCH_EXIT_OK : bench_lib_error(env, "fcl_tuning_save", st);
}

int bench_tune(const bench_env *env, const bench_opts *o)
{
    const fcl_dtype dt = o->dtype >= 0 ? (fcl_dtype)o->dtype : FCL_F16;
    const int dims[2] = {o->d > 0 ? o->d : 64, 128};
    const int n = o->d > 0 ? 1 : 2;
    int rc = BENCH_EXIT_OK;
    const int fwd = !o->op || !strcmp(o->op, "forward"), bwd = !o->op || !strcmp(o->op, "backward");
    if (!fwd && !bwd) {
        fprintf(stderr, "flashcl-bench: --tune takes --op forward or --op backward (or no --op: both)\n");
        return BENCH_EXIT_USAGE;
    }
    for (int i = 0; i < n; i++) {
        tune_space s;
        int r = BENCH_EXIT_OK;
        if (fwd) {
            make_space(env, dt, dims[i], &s);
            r = tune_space_at(env, dt, dims[i], &s);
        }
        if (bwd && make_backward_space(env, dt, dims[i], &s)) {
            const int rb = tune_space_at(env, dt, dims[i], &s);
            r = rb > r ? rb : r;
        } else if (bwd && !fwd) {
            fprintf(stderr, "flashcl-bench: tune D %d: the backward runs the portable kernels here (their tiles "
                            "come from the table and FLASHCL_BACKWARD_TILES); nothing to tune\n", dims[i]);
        }
        if (r > rc)
            rc = r;
    }
    return rc;
}
