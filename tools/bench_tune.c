/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench --tune: the tile search of the forward kernel that runs on the device, of the
 * NVIDIA tensor-core backward or the GPUs' blocked backward where it runs, of decode, and of the
 * projections' tiled portable GEMM where it runs (GPUs, llvmpipe; checked on a qkvo layer of
 * L 301, D 512, 8 heads, then timed as flashcl-bench's qkvo layer, both with FLASHCL_GEMM=own and
 * weights of the activations' dtype, so that it is that GEMM whatever path the projections take
 * by default; candidates: 12 tile sets of 128 to 1024
 * work-items on GPUs, 6 small ones elsewhere; stored once for every projection).
 * Candidates are applied through the FLASHCL_FORWARD_TILES / FLASHCL_BLOCKED_TILES /
 * FLASHCL_CPU_TILES / FLASHCL_MMA_TILES / FLASHCL_WGMMA_TILES / FLASHCL_BACKWARD_MMA_TILES /
 * FLASHCL_BACKWARD_BLOCKED_TILES / FLASHCL_DECODE_TILES / FLASHCL_GEMM_TILES overrides (which win over the table and any
 * stored entry), each is timed and checked against the float64 reference (a backward candidate
 * on a smaller shape that the check covers, then timed on the big one; a decode candidate on
 * sampled rows of its own run), and the fastest candidate that passes is stored with
 * fcl_tuning_save: forward and backward candidates by TFLOP/s, decode ones by GB/s of K and V
 * read. The tiles that run now are tried first, so the winner is never slower than them. A
 * candidate that fails to build, run or pass the check is never stored.
 *
 * Decode runs one query row over a full cache: on GPUs two shapes, B 8 Sk 8192 and B 1 Sk 32768
 * (Hq 32, Hkv 8), scored by the geometric mean of their GB/s, since a setting that wins at one
 * batch can lose more at the other (on the H200, one warp per work-group: +1% at B 8, 6-19%
 * slower at B 1); B 1, Sk 4096, Hq 8, Hkv 2 on CPUs; B 1, Sk 1024, Hq 4, Hkv 2 elsewhere
 * (llvmpipe). Its candidates
 * (block_n, rows, wg, waves, split_min, max_regs, stages, tensor-core warps; a value not listed
 * is the current one): NVIDIA GPUs block_n {8, 16, 32} x wg {64, 128, 256} x waves {2, 4, 6} at
 * rows 4, split_min 128, max_regs 0, the current stages and no tensor-core warps (the
 * team-shuffle form), plus, where the device has cp.async (compute capability >= 8), stages
 * {0, 2, 3, 4} at the current tiles without tensor-core warps and tensor-core warps {1, 2, 4}
 * x stages {2, 3} x waves {2, 4, 6} at the current tiles (the tensor-core form where it
 * applies: F16 at D 128 runs it); other GPUs block_n {8, 16, 32}
 * x wg {64, 128, 256} x waves {2, 4}, stages 0 (the team forms); every GPU also the three-phase
 * form: key lanes {1, 2, 4} x wg {128, 256} x waves {1, 2, 4} at rows 4, split_min 128 (the
 * H200's best at D 64, 128 and 256 lie in it; 64 work-items, 8 key lanes and rounds of 8 were
 * the slowest there); CPUs block_n {16, 32, 64, 128} x rows {8, 16} x
 * waves {1, 2, 4}; elsewhere block_n {2, 4, 8} x wg {16, 32} x waves {1, 2}. Candidates with
 * the same tiles after the device's limits (fcl_tuning_get) run once. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CANDIDATES 96
#define MAX_TUNE_SHAPES 2

typedef enum tune_op { TUNE_FORWARD, TUNE_BACKWARD, TUNE_DECODE, TUNE_GEMM } tune_op;

typedef struct tune_space {
    tune_op op;         /* what a candidate runs, and its score: TFLOP/s, decode GB/s */
    const char *kernel; /* fcl_tuning_save's name */
    const char *env;    /* the override variable */
    int n_values;
    int count;
    int values[MAX_CANDIDATES][FCL_TUNING_MAX_VALUES];
} tune_space;

static void add_values(tune_space *s, const int *v)
{
    if (s->count < MAX_CANDIDATES)
        memcpy(s->values[s->count++], v, sizeof(int) * (size_t)s->n_values);
}

/* A candidate of up to five values (those past the kernel's count are ignored). */
static void add(tune_space *s, int a, int b, int c, int d, int e)
{
    const int v[5] = {a, b, c, d, e};
    add_values(s, v);
}

/* The candidates for the kernel that runs at (dtype, d) on this device. */
static void make_space(const bench_env *env, fcl_dtype dt, int d, tune_space *s)
{
    memset(s, 0, sizeof *s);
    if (strcmp(fcl_attention_forward_path(env->ctx, dt, d), "nvidia-wgmma") == 0) {
        *s = (tune_space){TUNE_FORWARD, "forward_wgmma", "FLASHCL_WGMMA_TILES", 5, 0, {{0}}};
        for (int n = 32; n <= 128; n *= 2)         /* keys per tile */
            for (int st = 1; st <= 2; st++)        /* stages (lowered to what fits) */
                for (int o = 1; o >= 0; o--)       /* next tile's Q K^T behind P V, or after */
                    for (int q = 0; q <= 1; q++)   /* Q in local memory or in registers */
                        for (int r = 0; r <= 168; r += 168) /* the compiler's registers; 3 work-groups per SM */
                            add(s, n, st, r, o, q);
        return;
    }
    if (strcmp(fcl_attention_forward_path(env->ctx, dt, d), "nvidia-mma") == 0) {
        *s = (tune_space){TUNE_FORWARD, "forward_mma", "FLASHCL_MMA_TILES", 5, 0, {{0}}};
        static const int mt[][2] = {{64, 1}, {64, 2}, {128, 1}, {128, 2}, {256, 2}}; /* rows, m-tiles */
        for (size_t i = 0; i < sizeof mt / sizeof *mt; i++)
            for (int n = 16; n <= 128; n *= 2) /* keys per tile (lowered to what fits) */
                for (int q = 0; q <= 16; q += 16) /* Q in registers; as much Q in local memory as fits */
                    add(s, mt[i][0], n, mt[i][1], 0, q);
        return;
    }
    if (strcmp(fcl_attention_forward_path(env->ctx, dt, d), "cpu") == 0) {
        *s = (tune_space){TUNE_FORWARD, "forward_cpu", "FLASHCL_CPU_TILES", 4, 0, {{0}}};
        int cur[4] = {16, 2, 8, 4};
        fcl_tuning_get(env->ctx, "forward_cpu", d, cur, 4); /* its vector width: the device's */
        for (int rv = 1; rv <= 4; rv++)                     /* row vectors per work-item */
            for (int bn = 4; bn <= 16; bn *= 2)             /* keys per tile */
                for (int db = 2; db <= 8; db *= 2)          /* dims per P V step */
                    add(s, cur[0], rv, bn, db, 0);
        return;
    }
    if (strcmp(fcl_attention_forward_path(env->ctx, dt, d), "blocked") == 0) {
        *s = (tune_space){TUNE_FORWARD, "forward_blocked", "FLASHCL_BLOCKED_TILES", 4, 0, {{0}}};
        static const int bw[][4] = {{64, 64, 4, 4},  {128, 64, 4, 4}, {128, 64, 8, 4}, {64, 64, 8, 4},
                                    {64, 32, 4, 2},  {128, 32, 8, 2}, {64, 128, 4, 8}, {128, 128, 8, 8},
                                    {32, 64, 2, 4},  {64, 64, 4, 8},  {128, 64, 8, 8}, {256, 64, 16, 4}};
        for (size_t i = 0; i < sizeof bw / sizeof *bw; i++)
            add(s, bw[i][0], bw[i][1], bw[i][2], bw[i][3], 0);
        return;
    }
    *s = (tune_space){TUNE_FORWARD, "forward", "FLASHCL_FORWARD_TILES", 3, 0, {{0}}};
    if (env->info.type == FCL_DEVICE_CPU) { /* a few work-items with many rows each */
        static const int mr[][2] = {{8, 8}, {16, 8}, {16, 16}, {32, 16}, {32, 32}};
        for (size_t i = 0; i < sizeof mr / sizeof *mr; i++)
            for (int n = 32; n <= 128; n *= 2)
                add(s, mr[i][0], n, mr[i][1], 0, 0);
    } else if (env->is_gpu) {
        for (int m = 32; m <= 256; m *= 2)
            for (int n = 16; n <= 64; n *= 2)
                for (int r = 1; r <= 2; r++)
                    add(s, m, n, r, 0, 0);
    } else {
        for (int m = 16; m <= 32; m *= 2)
            for (int n = 16; n <= 32; n *= 2)
                for (int r = 1; r <= 2; r++)
                    add(s, m, n, r, 0, 0);
    }
}

/* The candidates of the tensor-core or the blocked backward at (dtype, d); 0 where neither runs. */
static int make_backward_space(const bench_env *env, fcl_dtype dt, int d, tune_space *s)
{
    memset(s, 0, sizeof *s);
    if (strcmp(fcl_attention_backward_path(env->ctx, dt, d), "blocked") == 0) {
        *s = (tune_space){TUNE_BACKWARD, "backward_blocks", "FLASHCL_BACKWARD_BLOCKED_TILES", 4, 0, {{0}}};
        static const int bw[][4] = {{64, 64, 4, 4}, {128, 64, 8, 4}, {64, 128, 4, 8}, {128, 32, 8, 2},
                                    {64, 32, 4, 2}, {32, 64, 2, 4},  {128, 128, 8, 8}, {64, 64, 8, 8}};
        for (size_t i = 0; i < sizeof bw / sizeof *bw; i++)
            add(s, bw[i][0], bw[i][1], bw[i][2], bw[i][3], 0);
        return 1;
    }
    if (strcmp(fcl_attention_backward_path(env->ctx, dt, d), "nvidia-mma") != 0)
        return 0;
    *s = (tune_space){TUNE_BACKWARD, "backward_mma", "FLASHCL_BACKWARD_MMA_TILES", 7, 0, {{0}}};
    int cur[FCL_TUNING_MAX_VALUES] = {0};
    if (fcl_tuning_get(env->ctx, "backward_mma", d, cur, s->n_values) != FCL_SUCCESS)
        return 0;
    for (int kv = 0; kv <= 16; kv += 16) {          /* K, V in registers; as much in local memory as fits */
        for (int kn = 32; kn <= 128; kn *= 2)        /* dK/dV keys per work-group (64 only with K, V in
                                                      * local memory) */
            for (int km = 16; km <= 64; km *= 2)     /* dK/dV query rows per tile */
                for (int qm = 64; qm <= 128; qm *= 2) /* dQ rows per work-group */
                    if (kv == 0 || kn == 64) {
                        const int c[FCL_TUNING_MAX_VALUES] = {kn, km, qm, qm == 64 ? 32 : 16, kv, cur[5], cur[6]};
                        add_values(s, c);
                    }
        for (int qn = 16; qn <= 64; qn *= 2) {       /* dQ keys per tile, at the default dK/dV tiles */
            const int c[FCL_TUNING_MAX_VALUES] = {64, 32, 64, qn, kv, cur[5], cur[6]};
            add_values(s, c);
        }
    }
    /* the most dK/dV and dQ columns per work-group at the current tiles (past D 128 each split
     * trades registers for recomputing S and dP) */
    static const int cols[][2] = {{256, 256}, {192, 256}, {160, 256}, {128, 256}, {96, 256}, {64, 256}, {128, 128}};
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) {
        int c[FCL_TUNING_MAX_VALUES];
        memcpy(c, cur, sizeof c);
        c[5] = cols[i][0];
        c[6] = cols[i][1];
        add_values(s, c);
    }
    return 1;
}

/* The decode candidates at head dim d (see the top of this file): the tiles that run now, each
 * grid's values laid over them. 0, or an exit code when the current tiles cannot be read. */
static int make_decode_space(const bench_env *env, int d, tune_space *s)
{
    memset(s, 0, sizeof *s);
    *s = (tune_space){TUNE_DECODE, "decode", "FLASHCL_DECODE_TILES", 10, 0, {{0}}};
    int cur[FCL_TUNING_MAX_VALUES] = {0}, v[FCL_TUNING_MAX_VALUES];
    const fcl_status st = fcl_tuning_get(env->ctx, "decode", d, cur, s->n_values);
    if (st != FCL_SUCCESS)
        return bench_lib_error(env, "fcl_tuning_get", st);
    static const int wgs[3] = {64, 128, 256};
    if (env->is_gpu && env->info.nv_cc_major > 0) { /* NVIDIA: teams in warps, a cp.async ring */
        static const int waves[3] = {2, 4, 6};
        for (int n = 8; n <= 32; n *= 2)
            for (int w = 0; w < 3; w++)
                for (int g = 0; g < 3; g++) {
                    const int c[FCL_TUNING_MAX_VALUES] = {n, 4, wgs[w], waves[g], 128, 0, cur[6], 0, cur[8]};
                    add_values(s, c);
                }
        static const int stages[4] = {0, 2, 3, 4};
        for (int a = 0; a < 4 && env->info.nv_cc_major >= 8; a++) { /* the ring needs cp.async */
            memcpy(v, cur, sizeof v);
            v[6] = stages[a];
            v[7] = 0;
            add_values(s, v);
        }
        for (int m = 1; m <= 4 && env->info.nv_cc_major >= 8; m *= 2) /* tensor-core warps and their ring */
            for (int a = 2; a <= 3; a++)
                for (int g = 0; g < 3; g++) {
                    memcpy(v, cur, sizeof v);
                    v[3] = waves[g];
                    v[6] = a;
                    v[7] = m;
                    add_values(s, v);
                }
    } else if (env->is_gpu) {
        for (int n = 8; n <= 32; n *= 2)
            for (int w = 0; w < 3; w++)
                for (int g = 2; g <= 4; g *= 2) {
                    memcpy(v, cur, sizeof v);
                    v[0] = n;
                    v[2] = wgs[w];
                    v[3] = g;
                    v[6] = 0;
                    v[8] = 0; /* the team forms */
                    add_values(s, v);
                }
    }
    if (env->is_gpu) { /* the three-phase form: 1, 2 or 4 work-items per key (no ring, no tensor cores), K
                        * read in its batch or one batch ahead */
        for (int kl = 1; kl <= 4; kl *= 2)
            for (int w = 1; w < 3; w++)
                for (int g = 1; g <= 4; g *= 2)
                    for (int ahead = 0; ahead <= 1; ahead++) {
                        const int c[FCL_TUNING_MAX_VALUES] = {cur[0], 4, wgs[w], g, 128, 0, 0, 0, kl, ahead};
                        add_values(s, c);
                    }
    } else if (env->info.type == FCL_DEVICE_CPU) {
        for (int n = 16; n <= 128; n *= 2)
            for (int r = 8; r <= 16; r *= 2)
                for (int g = 1; g <= 4; g *= 2) {
                    memcpy(v, cur, sizeof v);
                    v[0] = n;
                    v[1] = r;
                    v[3] = g;
                    add_values(s, v);
                }
    } else {
        for (int n = 2; n <= 8; n *= 2)
            for (int w = 16; w <= 32; w *= 2)
                for (int g = 1; g <= 2; g++) {
                    memcpy(v, cur, sizeof v);
                    v[0] = n;
                    v[2] = w;
                    v[3] = g;
                    add_values(s, v);
                }
    }
    return 0;
}

/* The candidates of the projections' tiled GEMM (see the top of this file); 0 where it does not
 * run (CPUs take the one-work-item GEMM). */
static int make_gemm_space(const bench_env *env, tune_space *s)
{
    memset(s, 0, sizeof *s);
    *s = (tune_space){TUNE_GEMM, "gemm", "FLASHCL_GEMM_TILES", 5, 0, {{0}}};
    int cur[FCL_TUNING_MAX_VALUES] = {0};
    if (fcl_tuning_get(env->ctx, "gemm", 64, cur, s->n_values) != FCL_SUCCESS || cur[0] == 0)
        return 0;
    static const int gpu[][5] = {{256, 128, 8, 8, 4},  {128, 256, 8, 8, 8},  {128, 128, 16, 8, 4}, {128, 128, 8, 8, 4},
                                 {128, 128, 16, 4, 8}, {64, 128, 8, 8, 4},   {64, 128, 16, 8, 4},  {128, 64, 8, 8, 4},
                                 {128, 64, 16, 8, 4},  {64, 64, 16, 4, 4},   {64, 64, 8, 4, 4},    {128, 128, 16, 8, 8}};
    static const int other[][5] = {{32, 32, 16, 2, 2}, {32, 32, 8, 2, 2}, {32, 64, 16, 2, 4},
                                   {64, 64, 16, 4, 4}, {16, 32, 16, 2, 2}, {64, 32, 8, 4, 2}};
    const int(*const grid)[5] = env->is_gpu ? gpu : other;
    const size_t n = env->is_gpu ? sizeof gpu / sizeof *gpu : sizeof other / sizeof *other;
    for (size_t i = 0; i < n; i++)
        add_values(s, grid[i]);
    return 1;
}

/* The timed shapes into c (returns how many, at most MAX_TUNE_SHAPES): FlashAttention's
 * benchmark at S 4096 on GPUs, a small one elsewhere; decode one query row over a full cache
 * (see the top of this file). */
static int tune_cases(const bench_env *env, const tune_space *s, fcl_dtype dt, int d, bench_case *out)
{
    if (s->op == TUNE_GEMM) { /* flashcl-bench's qkvo layer, weights of the activations' dtype */
        out[0] = bench_qkvo_default(env);
        out[0].dtype = dt;
        return 1;
    }
    if (s->op == TUNE_DECODE) { /* flashcl-bench's decode case: shorter on GPUs, fewer heads elsewhere */
        bench_case c = bench_decode_default(env);
        c.dtype = dt;
        c.d = d;
        if (env->is_gpu) { /* 256 MiB of K and V per call at B 8, 128 MiB at B 1, past the caches */
            c.sk = 8192;
            out[0] = c;
            c.b = 1;
            c.sk = 32768;
            out[1] = c;
            return 2;
        }
        const int cpu = env->info.type == FCL_DEVICE_CPU;
        c.sk = cpu ? c.sk : 1024;
        c.hq = cpu ? 8 : 4;
        c.hkv = 2;
        out[0] = c;
        return 1;
    }
    bench_case c = {dt, 1, 512, 512, 4, 4, d, 0, -1, -1, 0.0f, 0};
    if (env->is_gpu) {
        c.b = 4;
        c.sq = c.sk = 4096;
        c.hq = c.hkv = d <= 2048 ? 2048 / d : 1;
    } else if (env->info.type != FCL_DEVICE_CPU) {
        c.sq = c.sk = 256;
        c.hq = c.hkv = 2;
    }
    out[0] = c;
    return 1;
}

static void values_str(const int *v, int n, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at < len; i++) {
        const int w = snprintf(buf + at, len - at, i ? ",%d" : "%d", v[i]);
        at += w > 0 ? (size_t)w : 0;
    }
}

static const char *unit_of(const tune_space *s)
{
    return s->op == TUNE_DECODE ? "GB/s" : "TFLOP/s";
}

/* The progress bar after candidate `done` of `total`: its score, or `why` it has none (NULL: it
 * has one). */
static void progress(int done, int total, int d, const char *tiles, double score, const char *why, double best,
                     const char *unit)
{
    char bar[25];
    const int fill = total > 0 ? done * 24 / total : 24;
    for (int i = 0; i < 24; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[24] = '\0';
    char figure[48];
    if (why)
        snprintf(figure, sizeof figure, "%s", why);
    else
        snprintf(figure, sizeof figure, "%8.4g %s", score, unit);
    fprintf(stderr, "\r[%s] %2d/%-2d D %-3d %-14s %-15s (best %.4g %s)  ", bar, done, total, d, tiles, figure,
            best > 0 ? best : 0.0, unit);
    fflush(stderr);
}

/* One run of the candidate's op on shape c (flashcl-bench's case functions; the GEMM as the
 * qkvo layer with weights of the activations' dtype). */
static int run_case(const bench_env *env, const tune_space *s, const bench_case *c, bench_result *r)
{
    switch (s->op) {
    case TUNE_BACKWARD:
        return bench_backward(env, c, r);
    case TUNE_GEMM:
        return bench_qkvo(env, c, c->dtype, 0, r);
    case TUNE_DECODE:
        return bench_decode(env, c, r);
    default:
        return bench_forward(env, c, r);
    }
}

/* Times one candidate (the override set) on shape c; 1 when it ran and passed the check, its
 * score (TFLOP/s, decode GB/s) in *score. A backward or GEMM candidate is first checked once on a
 * shape small enough for the float64 reference (the backward: odd lengths, GQA, causal; the
 * GEMM: a layer of odd length), since the timed one is reported unchecked; a decode run checks
 * sampled rows of its own output. */
static int try_shape(const bench_env *env, const tune_space *s, const bench_case *c, double *score)
{
    bench_env quiet = *env;
    quiet.json = 0;
    quiet.reps = env->is_gpu ? 5 : 3;
    quiet.warmup = 1;
    quiet.check_rows = 8;
    if (s->op == TUNE_DECODE) { /* calls of a millisecond or less: more runs steady the median */
        quiet.reps = 10;
        quiet.warmup = 3;
    }
    bench_result r;
    memset(&r, 0, sizeof r);
    *score = 0.0;
    if (s->op == TUNE_BACKWARD || s->op == TUNE_GEMM) { /* checked once where the reference reaches */
        bench_case small = *c;
        if (s->op == TUNE_BACKWARD) { /* odd lengths, GQA, causal */
            small.b = 2;
            small.sq = 301;
            small.sk = 517;
            small.hq = 4;
            small.hkv = 2;
            small.causal = 1;
        } else { /* a layer of odd length */
            small.sq = small.sk = 301;
            small.d = 512;
            small.hq = small.hkv = 8;
        }
        bench_env once = quiet;
        once.reps = 1;
        once.warmup = 0;
        if (run_case(&once, s, &small, &r) != 0 || !r.ok || r.rows_checked == 0)
            return 0;
        memset(&r, 0, sizeof r);
    }
    if (run_case(&quiet, s, c, &r) != 0 || !r.ok || (s->op == TUNE_DECODE && r.rows_checked == 0))
        return 0;
    *score = s->op == TUNE_DECODE ? r.gbps : r.tflops;
    return 1;
}

/* Times one candidate on each of the n shapes c; 1 when it ran and passed the check on all,
 * the geometric mean of their scores in *score. */
static int try_candidate(const bench_env *env, const tune_space *s, const bench_case *c, int n, double *score)
{
    double log_sum = 0.0;
    *score = 0.0;
    for (int i = 0; i < n; i++) {
        double x;
        if (!try_shape(env, s, &c[i], &x) || !(x > 0.0))
            return 0;
        log_sum += log(x);
    }
    *score = exp(log_sum / n);
    return 1;
}

/* The result line (or JSON object) of one search (c: the first of its n shapes; the second, if
 * any, is named too). */
static void print_result(const bench_env *env, const tune_space *s, const bench_case *c, int n, const char *won,
                         double best, const char *was, double was_score, int n_tried, int stored)
{
    const char *dt = fcl_dtype_name(c->dtype);
    char also[64] = "";
    if (n > 1)
        snprintf(also, sizeof also, env->json ? ",\"b2\":%d,\"sk2\":%d" : " and B %d, Sk %d", c[1].b, c[1].sk);
    if (env->json && s->op == TUNE_DECODE)
        printf("{\"op\":\"tune\",\"device\":\"%s\",\"kernel\":\"%s\",\"dtype\":\"%s\",\"d\":%d,\"b\":%d,\"sq\":%d,"
               "\"sk\":%d,\"hq\":%d,\"hkv\":%d%s,\"tiles\":\"%s\",\"gbps\":%.6g,\"previous_tiles\":\"%s\","
               "\"previous_gbps\":%.6g,\"candidates\":%d,\"stored\":%s}\n",
               env->info.name, s->kernel, dt, c->d, c->b, c->sq, c->sk, c->hq, c->hkv, also, won, best, was,
               was_score, n_tried, stored ? "true" : "false");
    else if (env->json)
        printf("{\"op\":\"tune\",\"device\":\"%s\",\"kernel\":\"%s\",\"dtype\":\"%s\",\"d\":%d,\"b\":%d,\"s\":%d,"
               "\"h\":%d,\"tiles\":\"%s\",\"tflops\":%.6g,\"previous_tiles\":\"%s\",\"previous_tflops\":%.6g,"
               "\"candidates\":%d,\"stored\":%s}\n",
               env->info.name, s->kernel, dt, c->d, c->b, c->sq, c->hq, won, best, was, was_score, n_tried,
               stored ? "true" : "false");
    else if (s->op == TUNE_DECODE)
        printf("tune %s D %d (%s, B %d, Sq %d, Sk %d%s, Hq %d, Hkv %d): %s at %.3f GB/s%s (was %s at %.3f), %d "
               "settings; %s\n", s->kernel, c->d, dt, c->b, c->sq, c->sk, also, c->hq, c->hkv, won, best,
               n > 1 ? " (geometric mean)" : "", was, was_score, n_tried, stored ? "stored" : "NOT stored");
    else
        printf("tune %s D %d (%s, B %d, S %d, H %d): %s at %.4g TFLOP/s (was %s at %.4g), %d settings; %s\n",
               s->kernel, c->d, dt, c->b, c->sq, c->hq, won, best, was, was_score, n_tried,
               stored ? "stored" : "NOT stored");
}

/* One kernel's search space at one head dim: returns an exit code. */
static int tune_space_at(const bench_env *env, fcl_dtype dt, int d, const tune_space *sp)
{
    const tune_space s = *sp;
    bench_case c[MAX_TUNE_SHAPES];
    const int n_shapes = tune_cases(env, &s, dt, d, c);
    int current[FCL_TUNING_MAX_VALUES] = {0}, best_v[FCL_TUNING_MAX_VALUES] = {0};
    double best = -1.0, current_score = -1.0;
    if (fcl_tuning_get(env->ctx, s.kernel, d, current, s.n_values) != FCL_SUCCESS)
        return bench_lib_error(env, "fcl_tuning_get", FCL_ERR_INVALID_ARGUMENT);
    /* the current tiles first (so the winner is never worse than what runs now), then the grid */
    int tried[MAX_CANDIDATES + 1][FCL_TUNING_MAX_VALUES];
    int n_tried = 0;
    for (int i = -1; i < s.count; i++) {
        char tiles[96];
        const int *want = i < 0 ? current : s.values[i];
        values_str(want, s.n_values, tiles, sizeof tiles);
        setenv(s.env, tiles, 1);
        int eff[FCL_TUNING_MAX_VALUES] = {0}; /* after the device's limits */
        if (fcl_tuning_get(env->ctx, s.kernel, d, eff, s.n_values) != FCL_SUCCESS)
            continue;
        int seen = 0;
        for (int k = 0; k < n_tried && !seen; k++)
            seen = memcmp(tried[k], eff, sizeof eff) == 0;
        double score = 0.0;
        const char *why = seen ? "repeat" : NULL; /* the same tiles as an earlier setting after the limits */
        if (!seen) {
            memcpy(tried[n_tried++], eff, sizeof eff);
            if (!try_candidate(env, &s, c, n_shapes, &score)) {
                why = "failed";
            } else {
                if (i < 0)
                    current_score = score;
                if (score > best) {
                    best = score;
                    memcpy(best_v, eff, sizeof eff);
                }
            }
        }
        values_str(eff, s.n_values, tiles, sizeof tiles);
        progress(i + 2, s.count + 1, d, tiles, score, why, best, unit_of(&s));
    }
    unsetenv(s.env);
    fputc('\n', stderr);
    char won[96], was[96];
    values_str(best_v, s.n_values, won, sizeof won);
    values_str(current, s.n_values, was, sizeof was);
    if (best <= 0.0) {
        fprintf(stderr, "flashcl-bench: tune %s D %d: no candidate passed the check; nothing stored\n", s.kernel, d);
        return BENCH_EXIT_WRONG;
    }
    const fcl_status st = fcl_tuning_save(env->ctx, s.kernel, d, best_v, s.n_values);
    print_result(env, &s, c, n_shapes, won, best, was, current_score, n_tried, st == FCL_SUCCESS);
    return st == FCL_SUCCESS ? BENCH_EXIT_OK : bench_lib_error(env, "fcl_tuning_save", st);
}

int bench_tune(const bench_env *env, const bench_opts *o)
{
    const fcl_dtype dt = o->dtype >= 0 ? (fcl_dtype)o->dtype : FCL_F16;
    const int dims[2] = {o->d > 0 ? o->d : 64, 128};
    const int n = o->d > 0 ? 1 : 2;
    int rc = BENCH_EXIT_OK;
    const int fwd = !o->op || !strcmp(o->op, "forward"), bwd = !o->op || !strcmp(o->op, "backward");
    const int dec = !o->op || !strcmp(o->op, "decode"), gemm = !o->op || !strcmp(o->op, "qkvo");
    if (!fwd && !bwd && !dec && !gemm) {
        fprintf(stderr, "flashcl-bench: --tune takes --op forward, backward, decode or qkvo (or no --op: all four)\n");
        return BENCH_EXIT_USAGE;
    }
    if (dec)
        unsetenv("FLASHCL_DECODE_SWEEP"); /* its settings would replace the candidates' FLASHCL_DECODE_TILES */
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
        if (dec) {
            int rd = make_decode_space(env, dims[i], &s);
            if (rd == 0)
                rd = tune_space_at(env, dt, dims[i], &s);
            r = rd > r ? rd : r;
        }
        if (r > rc)
            rc = r;
    }
    tune_space s;
    if (gemm && make_gemm_space(env, &s)) { /* the portable GEMM, whatever path the projections take now */
        const char *was = getenv("FLASHCL_GEMM");
        char saved[32] = "";
        if (was)
            snprintf(saved, sizeof saved, "%s", was);
        setenv("FLASHCL_GEMM", "own", 1);
        const int r = tune_space_at(env, dt, 64, &s);
        if (was)
            setenv("FLASHCL_GEMM", saved, 1);
        else
            unsetenv("FLASHCL_GEMM");
        rc = r > rc ? r : rc;
    } else if (gemm && o->op) {
        fprintf(stderr, "flashcl-bench: tune qkvo: the projections run the one-work-item GEMM here (no tiles); "
                        "nothing to tune\n");
    }
    return rc;
}
