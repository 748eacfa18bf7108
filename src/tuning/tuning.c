/* SPDX-License-Identifier: Apache-2.0 */
/* The per-device tuning table. Entries are matched in order; the first whose device-name or
 * vendor substring and device type match wins (an empty substring matches any). */
#include "tuning/tuning.h"

#include "tuning/tuned.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fcl_pad_head_dim(int64_t D)
{
    return D <= 16 ? 16 : D > FCL_MAX_HEAD_DIM ? FCL_MAX_HEAD_DIM + 32 : (int)((D + 31) / 32 * 32);
}

typedef struct tuning_entry {
    const char *name;      /* substring of the device name or vendor, "" = any */
    fcl_device_type type;  /* FCL_DEVICE_OTHER = any type */
    int max_head_dim_pad;  /* the entry's forward tiles apply up to this padded head dim */
    long loop_limit;       /* see fcl_device_loop_limit; 0 = none */
    fcl_forward_tiles forward;
    fcl_blocked_tiles blocked;
    fcl_mma_tiles mma;
    fcl_backward_tiles backward;
    fcl_backward_mma_tiles backward_mma;
    fcl_decode_tiles decode;
    fcl_cpu_tiles cpu;     /* the CPU forward; none (simd 0 and rv 0) off CPUs */
    fcl_backward_blocked_tiles backward_blocked; /* the GPUs' portable backward; none (block_a 0) elsewhere */
    fcl_decode_tiles decode_f32; /* decode of F32 caches where it differs from `decode` (wg 0: as `decode`) */
} tuning_entry;

/* Other GPUs' entry up to padded head dim `max_dim`: one set of forward and backward tiles for every
 * head dim, the 16-bit caches' decode tiles (the other arguments) per head dim, one set for F32 caches. */
#define OTHER_GPU(max_dim, ...)                                                                                    \
    {"", FCL_DEVICE_GPU, max_dim, 0, {64, 16, 1}, {64, 64, 4, 4, 16, 16, 0, 0, 1}, {0, 0, 0, 0, 0}, {32, 32},     \
     {0}, {__VA_ARGS__}, {0}, {64, 64, 4, 4, 16, 16, 0}, {32, 4, 256, 1, 128, 0, 0, 0, 2, 0}}

/* NVIDIA's entry up to padded head dim `max_dim` <= 64, its mma.sync forward with `mma_keys`-key
 * tiles (the wgmma forward, from 64 on, has its own). */
#define NVIDIA_UP_TO_64(max_dim, mma_keys)                                                                         \
    {"NVIDIA", FCL_DEVICE_GPU, max_dim, 0, {128, 32, 1}, {64, 128, 8, 8, 16, 16, 0, 0, 1}, {128, mma_keys, 2, 0, 0}, \
     {32, 32}, {64, 64, 64, 32, 0, 256, 256}, {32, 4, 128, 2, 128, 0, 2, 2, 2, 1}, {0}, {64, 64, 4, 8, 8, 16, 0},   \
     {32, 4, 128, 2, 128, 0, 2, 2, 2, 0}}

static const tuning_entry table[] = {
    {"llvmpipe", FCL_DEVICE_OTHER, 256, 65535, {16, 16, 1}, {0}, {0, 0, 0, 0, 0}, {16, 16}, {0},
     {4, 2, 32, 1, 0, 0, 0, 0, 0, 0}, {0}, {0}, {0}},
    /* H200 sweeps (docs/perf.md): portable 128x32 best at D 64, 32x32 at D 128 (2026-11-29);
     * tensor-core 128x64, 2 m-tiles per warp at D 64, 128x32, 2 m-tiles at D 128, where 3 of the 8
     * Q k steps sit in local memory (the registers: +20%, 2026-12-01 session 2); tensor-core
     * backward 64,32,64,32 (2026-12-01), then 64-row dK/dV tiles at D 64 (+17-19%) and 2 of the 8
     * K/V k steps in local memory at D 128 (+3%) (session 3); past D 128 (v0.25.0, B 2 S 4096 H 16
     * causal F16; history "v0.25.0"): the same tiles (lowered to 16-row local tiles past D 160), 3
     * K/V k steps in local memory, whole dQ rows, and whole dK/dV rows up to D 224 (D 192 4.74 ms
     * against 5.45 with two column slices, D 224 6.06 against 6.92) but two slices at D 256, where
     * BF16 (B 2 S 2048 H 8) takes 1.09 ms against 1.24 whole and F16 7.29 against 7.00 (H100, v0.47.0
     * with one BF16 product for dS: BF16 0.832-0.836 against 0.896-0.907 whole, F16 B 2 S 4096 H 16
     * 5.84-5.88 against 5.95-5.96; history "v0.47.0"); blocked
     * 64x128 of 8x8 at D 64, 128x64 of 8x4 at D 128 (2026-12-01, perf.md v0.7.0-dev), 64x64 of 8x4
     * at D 128 once the Q/K slices had two buffers (-0.3 to +12%, perf.md v0.15.0-dev), with two V
     * buffers there (+0.0 to +1.5%; -1.1 to +0.0% at D 64 with 64x64 blocks, and the table's
     * 64x128 has no room for them, perf.md v0.16.0-dev); blocked backward 128x64 of 8x4 with 16-row
     * update slices at D <= 128 (at D 128 lowered to 64 rows by the 48 KB of local memory: 18.3-18.9
     * TFLOP/s against 13.6-15.9 for 64x64 of 4x4), 64x64 of 4x4 at D 256 (16.0 against 14.5),
     * perf.md v0.18.0-dev; with dS stored in vectors (v0.30.0, history "v0.30.0") 64x64 of 4x4
     * with 16-dim slices at D 128 causal (25.5-25.6 against 24.2) and at D 64 64x64 of 4x8 (H100,
     * v0.33.0: 25.5-25.7 TFLOP/s against 24.9-25.0 for v0.30.0's 8x4, three runs); the three-phase
     * decode (FLASHCL_DECODE_PATH=portable, no shuffles) of 16-bit caches reads K one batch ahead
     * at D 64 and 256 (H100, v0.31.0: 82-85% of copy against 73-77% at D 64, 80-87% against 78-81%
     * at D 256) and, in rounds of one work-group per SM, at D 65-128 (H100, v0.33.0: B 32 L 4k
     * 82-84% against 78-80%, B 8 L 32k 92-93% against 91%, the tensor-core path within its spread;
     * D 96: B 8 L 32k 2.7% slower, B 32 L 4k 15% faster); F32 caches lose with it and keep their
     * own tiles without it; padded head dims 16 and 32 (the mma.sync forward: the wgmma one starts
     * at 64) take 128-key tiles on dense sequences of >= 256 keys (fcl_tune_forward_mma), which fit
     * the 48 KB there (H100, v0.34.0, B 4 S 4096 H 16 F16:
     * D 32 0.622 ms against 0.712 with 64-key tiles, D 16 0.528 against 0.596; history "v0.34.0");
     * their other tiles are the D 64 entry's */
    NVIDIA_UP_TO_64(32, 128),
    NVIDIA_UP_TO_64(64, 64),
    {"NVIDIA", FCL_DEVICE_GPU, 128, 0, {32, 32, 1}, {64, 64, 8, 4, 16, 16, 0, 0, 2}, {128, 32, 2, 0, 3}, {32, 32},
     {64, 32, 64, 32, 2, 256, 256}, {16, 4, 128, 1, 128, 0, 2, 2, 2, 1}, {0}, {64, 64, 4, 4, 16, 16, 0},
     {16, 4, 128, 2, 128, 0, 2, 2, 2, 0}},
    {"NVIDIA", FCL_DEVICE_GPU, 256, 0, {32, 32, 1}, {64, 32, 4, 2, 16, 16, 0, 0, 1}, {64, 16, 1, 0, 0}, {32, 32},
     {64, 32, 64, 32, 3, 224, 256}, {8, 4, 128, 4, 128, 0, 3, 0, 2, 1}, {0}, {64, 64, 4, 4, 8, 8, 0},
     {8, 4, 128, 4, 128, 0, 3, 0, 2, 0}},
    /* other GPUs: 256 work-items of 4 x 4 (within AMD's, Intel's and Mali's limits); the blocked
     * backward with 16-dim product and 16-row update slices (H200: 14-15% faster than 8 and 8);
     * the three-phase decode per head dim (H200 sweeps, docs/perf/history.md v0.23.0): for 16-bit
     * caches 128 work-items in 2 rounds with 1 key lane at D <= 64, 256 in 1 round with 1 at D 96,
     * with 2 at D 128, 128 in 2 rounds with 4 past 128; F32 caches 256 in 1 round with 2 at every
     * head dim (90-102% of copy against 66-85% with the 16-bit tiles); v0.31.0 (H100, history
     * "v0.31.0"): at D <= 64 2 key lanes with K read one batch ahead (83% of copy against 73-76%;
     * ahead with 1 lane 56%, at D 128 80% against 90%, at D 256 with 4 lanes 73% against 92%) */
    OTHER_GPU(64, 32, 4, 128, 2, 128, 0, 0, 0, 2, 1),
    OTHER_GPU(96, 32, 4, 256, 1, 128, 0, 0, 0, 1, 0),
    OTHER_GPU(128, 32, 4, 256, 1, 128, 0, 0, 0, 2, 0),
    OTHER_GPU(256, 32, 4, 128, 2, 128, 0, 0, 0, 4, 0),
    /* CPUs: the CPU forward, 32 rows (two native vectors) per work-item, tiles of 8 keys, 4 dims per
     * P V step (2-core Xeon, PoCL and Intel's runtime, D 64 f32 S 1024: 5x the rows kernel,
     * docs/perf.md v0.17.0-dev); reading F32 K/V in place with 16-float vectors, 64 rows, tiles of
     * 6 keys, 2 dims per step: each strided K/V element feeds twice the FMAs (2-core Xeon, history
     * "v0.32.0": B 2 S 512 H 16 D 128 30.0 -> 20.4 ms on Intel's runtime, 27.6 -> 23.3 on PoCL;
     * where K/V are packed first the same tiles lose up to 7%) */
    {"", FCL_DEVICE_CPU, 256, 0, {16, 64, 16}, {0}, {0, 0, 0, 0, 0}, {32, 32}, {0}, {32, 16, 1, 2, 0, 0, 0, 0, 0, 0},
     {0, 2, 8, 4, 4, 6, 2}, {0}, {0}},
    {"", FCL_DEVICE_OTHER, 256, 0, {32, 16, 1}, {0}, {0, 0, 0, 0, 0}, {16, 16}, {0}, {4, 2, 32, 1, 0, 0, 0, 0, 0, 0},
     {0}, {0}, {0}},
};

static const tuning_entry *entry_for(const fcl_device_info *info, int head_dim_pad)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const tuning_entry *e = &table[i];
        if (e->name[0] && !strstr(info->name, e->name) && !strstr(info->vendor, e->name))
            continue;
        if (head_dim_pad > e->max_head_dim_pad)
            continue;
        if (e->type == FCL_DEVICE_OTHER || e->type == info->type)
            return e;
    }
    return &table[sizeof table / sizeof table[0] - 1];
}

long fcl_device_loop_limit(fcl_context ctx)
{
    const char *env = getenv("FLASHCL_LOOP_LIMIT"); /* testing: force the chunked path anywhere */
    long forced;
    if (env && sscanf(env, "%ld", &forced) == 1 && forced > 0)
        return forced;
    return entry_for(&ctx->info, 0)->loop_limit;
}

long fcl_tiles_under_loop_cap(fcl_context ctx, long per_tile, long fixed)
{
    const long limit = fcl_device_loop_limit(ctx);
    if (limit <= 0)
        return 0;
    const long n = (limit * 3 / 4 - fixed) / per_tile;
    return n >= 1 ? n : -1;
}

fcl_status fcl_loop_cap_error(fcl_context ctx, const char *op, const char *what, long per_tile, long fixed)
{
    return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: one %s tile needs %ld loop iterations, more than device \"%s\" "
                    "allows (%ld)", op, what, per_tile + fixed, ctx->info.name, fcl_device_loop_limit(ctx));
}

/* Up to `most` comma-separated integers of s ("a,b,c") into v; returns how many were read
 * (reading stops at the first text that is not one). */
static int parse_values(const char *s, int *v, int most)
{
    int n = 0;
    while (n < most) {
        char *end = NULL;
        const long x = strtol(s, &end, 10);
        if (end == s || x < INT_MIN || x > INT_MAX)
            break;
        v[n++] = (int)x;
        if (*end != ',')
            break;
        s = end + 1;
    }
    return n;
}

/* Where a kernel's tiles came from (override_tiles). */
enum { TILES_TABLE = 0, TILES_TUNED = 1, TILES_ENV = 2 };

/* The tuned entry of (kernel, head_dim_pad), then the environment variable env_name ("a,b,c,...":
 * at least `least` values; those it leaves out keep what lies below it), each taken only when
 * fcl_tuned_values_valid accepts it, laid over v (fcl_tuned_value_count(kernel) values). Returns
 * the last source taken: TILES_TABLE (neither), TILES_TUNED or TILES_ENV. */
static int override_tiles(fcl_context ctx, const char *kernel, int head_dim_pad, const char *env_name, int least,
                          int v[FCL_TUNING_MAX_VALUES])
{
    int t[FCL_TUNING_MAX_VALUES] = {0}, source = TILES_TABLE;
    if (fcl_tuned_find(ctx, kernel, head_dim_pad, t)) {
        memcpy(v, t, sizeof t);
        source = TILES_TUNED;
    }
    const char *env = getenv(env_name);
    int e[FCL_TUNING_MAX_VALUES];
    memcpy(e, v, sizeof e);
    if (env && parse_values(env, e, fcl_tuned_value_count(kernel)) >= least && fcl_tuned_values_valid(kernel, e)) {
        memcpy(v, e, sizeof e);
        source = TILES_ENV;
    }
    return source;
}

fcl_forward_tiles fcl_tune_forward(fcl_context ctx, int head_dim_pad)
{
    const fcl_forward_tiles table = entry_for(&ctx->info, head_dim_pad)->forward;
    int v[FCL_TUNING_MAX_VALUES] = {table.block_m, table.block_n, table.rows};
    override_tiles(ctx, "forward", head_dim_pad, "FLASHCL_FORWARD_TILES", 3, v);
    fcl_forward_tiles t = {v[0], v[1], v[2]};
    /* The local array (plus the mask row) must fit in half the local memory. */
    const uint64_t budget = ctx->info.local_mem_bytes / 2;
    while (t.block_n > 1 && (uint64_t)(fcl_forward_smem_floats(&t, head_dim_pad) + t.block_n) * 4 > budget)
        t.block_n /= 2;
    while (t.block_m > t.rows && ((uint64_t)(fcl_forward_smem_floats(&t, head_dim_pad) + t.block_n) * 4 > budget ||
                                  (size_t)(t.block_m / t.rows) > ctx->info.max_work_group_size))
        t.block_m /= 2;
    return t;
}

int fcl_device_simd_floats(fcl_context ctx)
{
    const char *env = getenv("FLASHCL_CPU_SIMD");
    if (env && (strcmp(env, "4") == 0 || strcmp(env, "8") == 0 || strcmp(env, "16") == 0))
        return atoi(env);
    cl_uint w = 0;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof w, &w, NULL) != CL_SUCCESS)
        w = 4;
    return w >= 16 ? 16 : w >= 8 ? 8 : 4;
}

fcl_cpu_tiles fcl_tune_forward_cpu(fcl_context ctx, int head_dim_pad)
{
    fcl_cpu_tiles t = entry_for(&ctx->info, head_dim_pad)->cpu;
    const char *path = getenv("FLASHCL_FORWARD_PATH");
    if (t.rv == 0 && path && strcmp(path, "cpu") == 0) { /* forced: the CPUs' tiles */
        const fcl_device_info cpu = {.name = "", .vendor = "", .type = FCL_DEVICE_CPU};
        t = entry_for(&cpu, head_dim_pad)->cpu;
    }
    if (t.rv == 0 || fcl_device_loop_limit(ctx) > 0) /* no CPU kernel on this device */
        return (fcl_cpu_tiles){0};
    if (t.simd == 0)
        t.simd = fcl_device_simd_floats(ctx);
    int v[FCL_TUNING_MAX_VALUES] = {t.simd, t.rv, t.bn, t.db};
    const int source = override_tiles(ctx, "forward_cpu", head_dim_pad, "FLASHCL_CPU_TILES", 4, v);
    fcl_cpu_tiles r = {v[0], v[1], v[2], v[3], 0, 0, 0};
    if (source == TILES_TABLE && r.simd == 16) { /* the table's in-place tiles need AVX-512's 32 registers */
        r.direct_rv = t.direct_rv;
        r.direct_bn = t.direct_bn;
        r.direct_db = t.direct_db;
    }
    return r;
}

/* A register-blocked kernel's slices: *dk head dims per product slice to a multiple of 4 that
 * divides head_dim_pad, *nk rows per update slice to a divisor of the tile's rows. */
static void fit_slices(int head_dim_pad, int tile_rows, int *dk, int *nk)
{
    *dk = *dk < 4 ? 4 : *dk / 4 * 4;
    while (head_dim_pad % *dk)
        *dk -= 4;
    while (tile_rows % *nk)
        (*nk)--;
}

/* The widest of 4, 2, 1 that divides the blocked kernel's rows, keys and dims per work-item. */
static int blocked_vw(const fcl_blocked_tiles *t, int head_dim_pad)
{
    const int oc = head_dim_pad / (t->block_n / t->wn);
    return t->wm % 4 == 0 && t->wn % 4 == 0 && oc % 4 == 0 ? 4 : t->wm % 2 == 0 && t->wn % 2 == 0 && oc % 2 == 0 ? 2 : 1;
}

uint64_t fcl_blocked_local_bytes(const fcl_blocked_tiles *t, int head_dim_pad)
{
    /* as declared in cl/portable/attention_forward_blocked.cl: the staging array (Q and K slices, V
     * slices or partial row results), the probabilities (or the second Q and K slices), the
     * rows' key ranges, with two V buffers the odd V slices */
    const uint64_t vw = (uint64_t)t->vw, tx = (uint64_t)(t->block_n / t->wn);
    const uint64_t qs = t->block_m / vw + 1, ks = t->block_n / vw + 1, vs = head_dim_pad / vw + 1;
    const uint64_t qk = (uint64_t)t->dk * (qs + ks), ps = (uint64_t)t->block_n * qs;
    uint64_t stage = qk;
    if ((uint64_t)t->nk * vs > stage)
        stage = (uint64_t)t->nk * vs;
    if (tx * (t->block_m / vw) > stage)
        stage = tx * (t->block_m / vw);
    const uint64_t v_odd = t->v_buffers == 2 ? (uint64_t)t->nk * vs : 0;
    return (stage + (ps > qk ? ps : qk) + v_odd) * vw * 4 + 8 * (uint64_t)t->block_m;
}

fcl_blocked_tiles fcl_tune_forward_blocked(fcl_context ctx, int head_dim_pad)
{
    fcl_blocked_tiles t = entry_for(&ctx->info, head_dim_pad)->blocked;
    const char *path = getenv("FLASHCL_FORWARD_PATH");
    if (t.block_m == 0 && path && strcmp(path, "blocked") == 0) { /* forced: any GPU's tiles */
        const fcl_device_info gpu = {.name = "", .vendor = "", .type = FCL_DEVICE_GPU};
        t = entry_for(&gpu, head_dim_pad)->blocked;
    }
    if (t.block_m == 0 || fcl_device_loop_limit(ctx) > 0) /* no blocked kernel on this device */
        return (fcl_blocked_tiles){0, 0, 0, 0, 0, 0, 0, 0, 0};
    int v[4] = {t.block_m, t.block_n, t.wm, t.wn};
    if (fcl_tuned_find(ctx, "forward_blocked", head_dim_pad, v)) {
        t.block_m = v[0];
        t.block_n = v[1];
        t.wm = v[2];
        t.wn = v[3];
    }
    const char *env = getenv("FLASHCL_BLOCKED_TILES");
    int e[8] = {0, 0, 0, 0, t.dk, t.nk, t.max_regs, t.v_buffers};
    if (env &&
        sscanf(env, "%d,%d,%d,%d,%d,%d,%d,%d", &e[0], &e[1], &e[2], &e[3], &e[4], &e[5], &e[6], &e[7]) >= 4 &&
        fcl_tuned_values_valid("forward_blocked", e) && e[4] > 0 && e[5] > 0 && e[6] >= 0 && e[6] <= 255 &&
        (e[7] == 1 || e[7] == 2))
        t = (fcl_blocked_tiles){e[0], e[1], e[2], e[3], e[4], e[5], e[6], 0, e[7]};
    while (head_dim_pad % (t.block_n / t.wn) && t.wn < t.block_n)
        t.wn *= 2;
    fit_slices(head_dim_pad, t.block_n, &t.dk, &t.nk);
    t.vw = blocked_vw(&t, head_dim_pad);
    if (t.v_buffers == 2 && fcl_blocked_local_bytes(&t, head_dim_pad) > ctx->info.local_mem_bytes)
        t.v_buffers = 1;
    while (t.block_m > t.wm && ((size_t)(t.block_m / t.wm * (t.block_n / t.wn)) > ctx->info.max_work_group_size ||
                                fcl_blocked_local_bytes(&t, head_dim_pad) > ctx->info.local_mem_bytes)) {
        t.block_m /= 2;
        t.vw = blocked_vw(&t, head_dim_pad);
    }
    if ((size_t)(t.block_m / t.wm * (t.block_n / t.wn)) > ctx->info.max_work_group_size ||
        fcl_blocked_local_bytes(&t, head_dim_pad) > ctx->info.local_mem_bytes || t.block_m % t.wm ||
        t.block_n % t.wn || head_dim_pad % (t.block_n / t.wn))
        t.block_m = 0;
    return t;
}

/* The most k steps of A fragments (`want`, at most the head dim's head_dim_pad / 16) of
 * `step_bytes` each that a tensor-core kernel can keep in `local` bytes of local memory beside
 * the `used` bytes of its tiles. */
static int local_fragment_steps(int want, int head_dim_pad, uint64_t used, uint64_t step_bytes, uint64_t local)
{
    const uint64_t room = used < local ? (local - used) / step_bytes : 0;
    const int most = want < head_dim_pad / 16 ? want : head_dim_pad / 16;
    return (uint64_t)most < room ? most : (int)room;
}

fcl_mma_tiles fcl_tune_forward_mma(fcl_context ctx, int head_dim_pad, int64_t keys_per_seq, int packed)
{
    const fcl_mma_tiles table = entry_for(&ctx->info, head_dim_pad)->mma;
    if (table.block_m == 0) /* no tensor-core kernel on this device */
        return table;
    int v[FCL_TUNING_MAX_VALUES] = {table.block_m, table.block_n, table.m_tiles, table.max_regs, table.q_local};
    /* The table's or a tuned entry's tiles follow the work (FLASHCL_MMA_TILES is taken as given).
     * Wide key tiles pay from 2 of them per sequence (H100, history "v0.34.0" and "v0.35.0": D 16
     * and 32 at S 512 1.00-1.10x the speed of 64-key tiles; at S 256 1.05-1.12x not causal and
     * 0.97-1.03x causal over three runs). In the packed form a row block spans every sequence its
     * rows touch, and the keys of all of them: at padded D 16 and 32 each warp takes one m tile of
     * 64-row blocks (H100, history "v0.36.0": packed batches 1.16-1.76x faster with the packed
     * first key tiles; dense causal and varlen batches gained nothing steady) */
    if (override_tiles(ctx, "forward_mma", head_dim_pad, "FLASHCL_MMA_TILES", 3, v) != TILES_ENV) {
        if (v[1] > 64 && keys_per_seq < 2 * (int64_t)v[1])
            v[1] = 64;
        if (packed && head_dim_pad <= 32 && v[2] == 2) {
            v[0] /= 2;
            v[2] = 1;
        }
    }
    fcl_mma_tiles t = {v[0], v[1], v[2], v[3], v[4]};
    /* per key: two stages of a K and a V row of head_dim_pad + 8 halves and of a mask value (as
     * declared in cl/nvidia/mma_nv.cl); per Q k step: 16 bytes per work-item and m tile (32 per row) */
    const uint64_t key_bytes = 8 * (uint64_t)(head_dim_pad + 8) + 8, local = ctx->info.local_mem_bytes;
    while (t.block_n > 16 && t.block_n * key_bytes > local)
        t.block_n /= 2;
    t.q_local = local_fragment_steps(t.q_local, head_dim_pad, t.block_n * key_bytes, 32 * (uint64_t)t.block_m, local);
    if ((size_t)(t.block_m / (16 * t.m_tiles) * 32) > ctx->info.max_work_group_size)
        t.block_m = 0;
    return t;
}

/* Bytes of the wgmma forward's local arrays (as declared in cl/nvidia/attention_forward_wgmma.cl): 64 Q
 * rows and the stages' K and V tiles of 16-bit values (with Q in registers the stages alone, Q
 * staged in their space: at least its 64 rows), and with a mask its values per stage. */
static uint64_t wgmma_local_bytes(const fcl_wgmma_tiles *t, int head_dim_pad, int has_mask)
{
    const uint64_t stage_keys = (uint64_t)t->stages * (uint64_t)t->block_n;
    const uint64_t rows = t->q_regs ? (2 * stage_keys > 64 ? 2 * stage_keys : 64) : 64 + 2 * stage_keys;
    return rows * (uint64_t)head_dim_pad * 2 + (has_mask ? 4 * stage_keys : 0);
}

fcl_wgmma_tiles fcl_tune_forward_wgmma(fcl_context ctx, int head_dim_pad, int has_mask)
{
    if (head_dim_pad % 32 || head_dim_pad < 64 || head_dim_pad > 256 || ctx->info.nv_cc_major != 9 ||
        ctx->info.nv_cc_minor != 0)
        return (fcl_wgmma_tiles){0};
    /* 96: the D 128 kernel, 1.34x the mma.sync one's speed; 160 and 224 the next kernel up */
    const int dim = head_dim_pad == 64 ? 64 : head_dim_pad <= 128 ? 128 : head_dim_pad <= 192 ? 192 : 256;
    /* H200 tune (docs/perf.md v0.14.0-dev): 64-key tiles at D 128 (Q and one stage fill the 48 KB),
     * the next Q K^T behind P V (+2%); 128-key tiles at D 64 (+12% over 64), Q K^T after P V (+2%);
     * past D 128 Q in registers, Q K^T after P V (history "v0.27.0"): 64-key tiles at D 192 (+16%
     * over 32 keys), 32-key tiles at D 256 (64 do not fit) */
    int v[FCL_TUNING_MAX_VALUES] = {dim == 64 ? 128 : dim == 256 ? 32 : 64, 1, 0, dim == 128, dim > 128};
    override_tiles(ctx, "forward_wgmma", head_dim_pad, "FLASHCL_WGMMA_TILES", 2, v);
    fcl_wgmma_tiles t = {v[0], v[1], v[2], v[3], v[4], dim};
    const int least = dim > 128 ? 32 : 64;
    while (wgmma_local_bytes(&t, dim, has_mask) > ctx->info.local_mem_bytes && t.block_n > 0) {
        if (t.stages > 1)
            t.stages--;
        else
            t.block_n = t.block_n > least ? t.block_n / 2 : 0;
    }
    return t;
}

int fcl_fit_columns(int head_dim_pad, int most)
{
    int s = 1;
    most = most > 16 ? most : 16;
    while (head_dim_pad % s || (head_dim_pad / s) % 16 || head_dim_pad / s > most)
        s++;
    return head_dim_pad / s;
}

fcl_backward_mma_tiles fcl_tune_backward_mma(fcl_context ctx, int head_dim_pad, int stored_ds, int packed)
{
    fcl_backward_mma_tiles t = entry_for(&ctx->info, head_dim_pad)->backward_mma;
    if (t.dkdv_block_n == 0 || ctx->info.nv_cc_major < 8) /* no tensor-core backward here */
        return (fcl_backward_mma_tiles){0};
    int v[FCL_TUNING_MAX_VALUES] = {t.dkdv_block_n, t.dkdv_block_m, t.dq_block_m, t.dq_block_n, t.kv_local,
                                    t.dkdv_cols, t.dq_cols};
    /* In the packed form a block spans every sequence its rows or keys touch, so the table's
     * tiles (and a tuned entry's; FLASHCL_BACKWARD_MMA_TILES is taken as given) become 32-key
     * dK/dV blocks with 64-row query tiles at padded D 64 and 32-row ones elsewhere, 32-row dQ
     * blocks and 32-key dQ tiles (H100, history "v0.38.0") */
    if (override_tiles(ctx, "backward_mma", head_dim_pad, "FLASHCL_BACKWARD_MMA_TILES", 4, v) != TILES_ENV && packed &&
        head_dim_pad <= 128) {
        v[0] = v[0] < 32 ? v[0] : 32;
        v[1] = head_dim_pad == 64 ? 64 : 32;
        v[2] = v[2] < 32 ? v[2] : 32;
        v[3] = v[3] < 32 ? v[3] : 32;
    }
    t = (fcl_backward_mma_tiles){v[0], v[1], v[2], v[3], v[4], fcl_fit_columns(head_dim_pad, v[5]),
                                 fcl_fit_columns(head_dim_pad, v[6])};
    /* two stages of two tiles of rows of head_dim_pad + 8 halves, plus a few floats per row (as
     * declared in cl/nvidia/attention_backward_mma.cl; the dQ kernel with dS stored: two stages of
     * K alone); per K/V k step in local memory: 16 bytes per work-item for each of K and V */
    const uint64_t row_bytes = 8 * (uint64_t)(head_dim_pad + 8) + 32, local = ctx->info.local_mem_bytes;
    const uint64_t dq_row_bytes = stored_ds ? 4 * (uint64_t)(head_dim_pad + 8) : row_bytes;
    while (t.dkdv_block_m > 16 && t.dkdv_block_m * row_bytes > local)
        t.dkdv_block_m /= 2;
    while (t.dq_block_n > 16 && t.dq_block_n * dq_row_bytes > local)
        t.dq_block_n /= 2;
    t.kv_local =
        local_fragment_steps(t.kv_local, head_dim_pad, t.dkdv_block_m * row_bytes, 64 * (uint64_t)t.dkdv_block_n, local);
    if ((size_t)(2 * t.dkdv_block_n) > ctx->info.max_work_group_size ||
        (size_t)(2 * t.dq_block_m) > ctx->info.max_work_group_size ||
        t.dkdv_block_m * row_bytes > local || t.dq_block_n * dq_row_bytes > local)
        t.dkdv_block_n = 0;
    return t;
}

fcl_status fcl_tuning_get(fcl_context ctx, const char *kernel, int head_dim, int *values, int n_values)
{
    FCL_LOCK(ctx);
    const int want = fcl_tuned_value_count(kernel);
    if (!ctx || !values || want == 0 || n_values != want || head_dim < 1 || head_dim > FCL_MAX_HEAD_DIM)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tuning_get: %s", !ctx ? "ctx is NULL" : !values ? "values is NULL"
                        : want == 0 ? "unknown kernel (" FCL_TUNED_KERNEL_NAMES ")"
                        : n_values != want ? "wrong value count"
                        : "head_dim outside [1, 256]");
    const int hdp = fcl_pad_head_dim(head_dim);
    if (strcmp(kernel, "gemm") == 0) { /* the tiled GEMM's, where it runs */
        const fcl_gemm_tiles t = fcl_tune_gemm(ctx);
        values[0] = fcl_gemm_tiled(ctx) ? t.tile_m : 0;
        values[1] = t.tile_n;
        values[2] = t.tile_k;
        values[3] = t.wpt_m;
        values[4] = t.wpt_n;
    } else if (strcmp(kernel, "decode") == 0) { /* as a KV head with at least the tiles' query rows runs them */
        const fcl_decode_tiles t = fcl_tune_decode(ctx, hdp, FCL_F16, INT_MAX);
        values[0] = t.block_n;
        values[1] = t.rows;
        values[2] = t.wg;
        values[3] = t.waves;
        values[4] = t.split_min;
        values[5] = t.max_regs;
        values[6] = t.stages;
        values[7] = t.mma_warps;
        values[8] = t.key_lanes;
        values[9] = t.k_ahead;
    } else if (strcmp(kernel, "forward_wgmma") == 0) {
        const fcl_wgmma_tiles t = fcl_tune_forward_wgmma(ctx, hdp, 0);
        values[0] = t.block_n;
        values[1] = t.stages;
        values[2] = t.max_regs;
        values[3] = t.overlap;
        values[4] = t.q_regs;
    } else if (want == 3) {
        const fcl_forward_tiles t = fcl_tune_forward(ctx, hdp);
        values[0] = t.block_m;
        values[1] = t.block_n;
        values[2] = t.rows;
    } else if (strcmp(kernel, "forward_cpu") == 0) {
        const fcl_cpu_tiles t = fcl_tune_forward_cpu(ctx, hdp);
        values[0] = t.simd;
        values[1] = t.rv;
        values[2] = t.bn;
        values[3] = t.db;
    } else if (strcmp(kernel, "forward_blocked") == 0) {
        const fcl_blocked_tiles t = fcl_tune_forward_blocked(ctx, hdp);
        values[0] = t.block_m;
        values[1] = t.block_n;
        values[2] = t.wm;
        values[3] = t.wn;
    } else if (strcmp(kernel, "backward_blocks") == 0) {
        const fcl_backward_blocked_tiles t = fcl_tune_backward_blocked(ctx, hdp);
        values[0] = t.block_a;
        values[1] = t.block_b;
        values[2] = t.wa;
        values[3] = t.wb;
    } else if (strcmp(kernel, "backward_mma") == 0) {
        const fcl_backward_mma_tiles t = fcl_tune_backward_mma(ctx, hdp, 0, 0);
        values[0] = t.dkdv_block_n;
        values[1] = t.dkdv_block_m;
        values[2] = t.dq_block_m;
        values[3] = t.dq_block_n;
        values[4] = t.kv_local;
        values[5] = t.dkdv_cols;
        values[6] = t.dq_cols;
    } else {
        const fcl_mma_tiles t = fcl_tune_forward_mma(ctx, hdp, INT64_MAX, 0);
        values[0] = t.block_m;
        values[1] = t.block_n;
        values[2] = t.m_tiles;
        values[3] = t.max_regs;
        values[4] = t.q_local;
    }
    return FCL_SUCCESS;
}

int fcl_forward_smem_floats(const fcl_forward_tiles *t, int head_dim_pad)
{
    const int tiles = head_dim_pad * (t->block_n + 1) + t->block_n * head_dim_pad;
    const int rows = t->block_m * head_dim_pad;
    return tiles > rows ? tiles : rows;
}

fcl_backward_tiles fcl_tune_backward(fcl_context ctx, int head_dim_pad)
{
    fcl_backward_tiles t = entry_for(&ctx->info, head_dim_pad)->backward;
    const char *env = getenv("FLASHCL_BACKWARD_TILES");
    int m, n;
    if (env && sscanf(env, "%d,%d", &m, &n) == 2 && m > 0 && n > 0) {
        t.block_m = m;
        t.block_n = n;
    }
    const uint64_t budget = ctx->info.local_mem_bytes - 256; /* one kernel's arrays; a little spare */
    while (t.block_m > 1 && ((uint64_t)(2 * t.block_m * head_dim_pad + 4 * t.block_m) * 4 > budget ||
                             (size_t)t.block_m > ctx->info.max_work_group_size))
        t.block_m /= 2;
    while (t.block_n > 1 && ((uint64_t)(2 * t.block_n * head_dim_pad + t.block_n) * 4 > budget ||
                             (size_t)t.block_n > ctx->info.max_work_group_size))
        t.block_n /= 2;
    return t;
}

/* The widest of 4, 2, 1 that divides the blocked backward's rows per work-item and dims per item. */
static int backward_blocked_vw(const fcl_backward_blocked_tiles *t, int head_dim_pad)
{
    const int oc = head_dim_pad / (t->block_b / t->wb);
    int vw = 4;
    while (vw > 1 && (t->wa % vw || t->wb % vw || oc % vw))
        vw /= 2;
    return vw;
}

uint64_t fcl_backward_blocked_local_bytes(const fcl_backward_blocked_tiles *t, int head_dim_pad)
{
    /* as declared in cl/portable/attention_backward_blocked.cl: the staging array (a product
     * slice or two rank-update slices), the transposed P / dS tile (or a product slice), the
     * dK/dV kernel's rows */
    const uint64_t vw = (uint64_t)t->vw, as = t->block_a / vw + 1, bs = t->block_b / vw + 1;
    const uint64_t slice = 2 * (uint64_t)t->dk * (as + bs), cslices = 2 * (uint64_t)t->nk * (head_dim_pad / vw + 1);
    const uint64_t p = (uint64_t)t->block_b * as;
    return ((slice > cslices ? slice : cslices) + (p > slice ? p : slice)) * vw * 4 + (uint64_t)t->block_b * 16;
}

fcl_backward_blocked_tiles fcl_tune_backward_blocked(fcl_context ctx, int head_dim_pad)
{
    fcl_backward_blocked_tiles t = entry_for(&ctx->info, head_dim_pad)->backward_blocked;
    const char *path = getenv("FLASHCL_BACKWARD_PATH");
    if (t.block_a == 0 && path && strcmp(path, "blocked") == 0) { /* forced: any GPU's tiles */
        const fcl_device_info gpu = {.name = "", .vendor = "", .type = FCL_DEVICE_GPU};
        t = entry_for(&gpu, head_dim_pad)->backward_blocked;
    }
    if (t.block_a == 0 || fcl_device_loop_limit(ctx) > 0) /* no blocked kernel on this device */
        return (fcl_backward_blocked_tiles){0, 0, 0, 0, 0, 0, 0};
    int v[FCL_TUNING_MAX_VALUES] = {t.block_a, t.block_b, t.wa, t.wb, t.dk, t.nk};
    int tuned[FCL_TUNING_MAX_VALUES] = {0};
    if (fcl_tuned_find(ctx, "backward_blocks", head_dim_pad, tuned))
        memcpy(v, tuned, 4 * sizeof *v);
    const char *env = getenv("FLASHCL_BACKWARD_BLOCKED_TILES");
    int e[FCL_TUNING_MAX_VALUES];
    memcpy(e, v, sizeof e);
    if (env && parse_values(env, e, 6) >= 4 && fcl_tuned_values_valid("backward_blocks", e) && e[4] > 0 && e[5] > 0)
        memcpy(v, e, sizeof e);
    t = (fcl_backward_blocked_tiles){v[0], v[1], v[2], v[3], v[4], v[5], 0};
    while (head_dim_pad % (t.block_b / t.wb) && t.wb < t.block_b)
        t.wb *= 2;
    fit_slices(head_dim_pad, t.block_b, &t.dk, &t.nk);
    t.vw = backward_blocked_vw(&t, head_dim_pad);
    while (t.block_a > t.wa && ((size_t)(t.block_a / t.wa * (t.block_b / t.wb)) > ctx->info.max_work_group_size ||
                                fcl_backward_blocked_local_bytes(&t, head_dim_pad) > ctx->info.local_mem_bytes)) {
        t.block_a /= 2;
        t.vw = backward_blocked_vw(&t, head_dim_pad);
    }
    if ((size_t)(t.block_a / t.wa * (t.block_b / t.wb)) > ctx->info.max_work_group_size ||
        fcl_backward_blocked_local_bytes(&t, head_dim_pad) > ctx->info.local_mem_bytes || t.block_a % t.wa ||
        t.block_b % t.wb || head_dim_pad % (t.block_b / t.wb))
        t.block_a = 0;
    return t;
}

int fcl_decode_local_floats(const fcl_decode_tiles *t, int head_dim_pad)
{
    /* as declared in cl/portable/attention_decode.cl: the teams' partial dot products, p and rescale
     * factors (teams of several items), the teams' states and merge buffer (several teams);
     * plus decode_mask_len's array */
    const fcl_decode_shape sh = fcl_decode_shape_of(t, head_dim_pad);
    const int pairs = t->rows * sh.keys, red_ld = sh.team % 4 == 0 ? sh.team + 4 : sh.team + 1;
    int n = sh.team * sh.teams;
    if (sh.team > 1)
        n += sh.teams * (pairs * red_ld + 16) + sh.teams * (pairs + t->rows);
    if (sh.teams > 1)
        n += 2 * sh.teams * t->rows + t->rows * head_dim_pad;
    const int kl = fcl_decode_key_lanes(t, head_dim_pad);
    if (kl > 0) { /* attention_decode_keys.cl: queries, partials, logits and p's, flags, the rows' maxima
                   * and rescale factors, the teams' sums and merge buffer; decode_mask_len's array */
        const int wg = sh.team * sh.teams, batch_pairs = wg / kl * t->rows;
        const int keys = t->rows * head_dim_pad + (kl + 2) * batch_pairs + 2 + 2 * t->rows + wg +
                         (sh.teams > 1 ? sh.teams * t->rows + t->rows * head_dim_pad : 0);
        n = keys > n ? keys : n;
    }
    return n;
}

int fcl_decode_key_lanes(const fcl_decode_tiles *t, int head_dim_pad)
{
    const fcl_decode_shape sh = fcl_decode_shape_of(t, head_dim_pad);
    if (t->key_lanes <= 0 || sh.team * sh.teams <= 1)
        return 0;
    int kl = 1;
    while (kl * 2 <= t->key_lanes && sh.team % (kl * 2) == 0)
        kl *= 2;
    return kl;
}

fcl_decode_shape fcl_decode_shape_of(const fcl_decode_tiles *t, int head_dim_pad)
{
    const int chunks = head_dim_pad / 8 > 1 ? head_dim_pad / 8 : 1;
    fcl_decode_shape sh = {1, 1, 1};
    for (int d = 1; d <= chunks && d <= t->wg; d++)
        if (chunks % d == 0)
            sh.team = d;
    while (sh.team * sh.teams * 2 <= t->wg)
        sh.teams *= 2;
    sh.keys = t->block_n / sh.teams > 1 ? t->block_n / sh.teams : 1;
    return sh;
}

/* block_n and wg as the shape of t gives them. */
static void decode_normalise(fcl_decode_tiles *t, int head_dim_pad)
{
    const fcl_decode_shape sh = fcl_decode_shape_of(t, head_dim_pad);
    t->block_n = sh.teams * sh.keys;
    t->wg = sh.team * sh.teams;
}

/* The table's decode tiles: NVIDIA 128 work-items (8 teams of 16 at D 128), 2 keys per team,
 * 4 rows, rounds of 4 work-groups per compute unit, splits of at least 128 keys, a 3-stage
 * cp.async ring (H200 sweeps, docs/perf.md v0.8.0-dev; D 64 and 256 by analogy, unmeasured);
 * at D 128 the tensor-core form with 2 warps and a 2-stage ring (v0.12.0-dev sweeps: 1 warp, or
 * 3 and 4 stages, 4-15% slower; the team-shuffle form, which then also gets 2 stages, about 3%
 * slower with them) in rounds of 2 work-groups per compute unit (v0.13.0-dev: 2-10% faster
 * than 4 at B 1 L 32k, B 8 and B 32 L 4k, a tie elsewhere), at D 64 likewise (2 warps, 2
 * stages, rounds of 2: 19% faster than 3 stages in rounds of 4 at B 8 L 32k, v0.13.0-dev);
 * CPUs one work-item owning every dim, 32 keys per batch; llvmpipe small per-work-item state
 * (its compiler's time grows with it) and 32 work-items (its kernels report no more). GPUs
 * (NVIDIA too, where no cp.async or tensor-core form runs) the three-phase form with 2
 * work-items per key; other GPUs with 256 work-items in rounds of one work-group per compute
 * unit at D 128 (H200 sweep, B 8 L 32k GQA 32/8 D 128 F16, docs/perf.md v0.22.0: 3407 GB/s against
 * 2915-2938 for 128 work-items in rounds of 2, 1106-3231 for the other 22 shapes), per head dim
 * and for F32 caches as the table's comment says (v0.23.0). */
fcl_decode_tiles fcl_tune_decode(fcl_context ctx, int head_dim_pad, fcl_dtype dtype, int rows)
{
    const tuning_entry *e = entry_for(&ctx->info, head_dim_pad);
    const fcl_decode_tiles table = dtype == FCL_F32 && e->decode_f32.wg > 0 ? e->decode_f32 : e->decode;
    int v[FCL_TUNING_MAX_VALUES] = {table.block_n,   table.rows,     table.wg,     table.waves,    table.split_min,
                                    table.max_regs,  table.stages,   table.mma_warps, table.key_lanes,
                                    table.k_ahead};
    override_tiles(ctx, "decode", head_dim_pad, "FLASHCL_DECODE_TILES", 3, v);
    fcl_decode_tiles t = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]};
    if (ctx->info.nv_cc_major < 8) { /* no cp.async, no mma.sync of this shape */
        t.stages = 0;
        t.mma_warps = 0;
    }
    int need = 1;
    while (need < rows && need < t.rows)
        need *= 2;
    t.rows = need;
    while ((size_t)t.wg > ctx->info.max_work_group_size && t.wg > 1)
        t.wg /= 2;
    decode_normalise(&t, head_dim_pad);
    const uint64_t budget = ctx->info.local_mem_bytes - 256;
    while ((uint64_t)fcl_decode_local_floats(&t, head_dim_pad) * 4 > budget &&
           (t.block_n > 1 || t.rows > 1 || t.wg > 1)) {
        const fcl_decode_shape sh = fcl_decode_shape_of(&t, head_dim_pad);
        if (sh.keys > 1 && sh.keys >= t.rows)
            t.block_n /= 2;
        else if (t.rows > 1)
            t.rows /= 2;
        else
            t.wg /= 2;
        decode_normalise(&t, head_dim_pad);
    }
    return t;
}

/* ---- projection GEMM (cl/portable/linear.cl, tiled variant) ---- */

typedef struct gemm_entry {
    const char *name;      /* as tuning_entry */
    fcl_device_type type;
    fcl_gemm_tiles tiles;
    fcl_gemm_mma_tiles mma; /* the tensor-core GEMM (NVIDIA compute capability >= 8.0, checked by the caller) */
    fcl_gemm_wgmma_tiles wgmma; /* the wgmma GEMM (compute capability 9.0, checked by fcl_tune_gemm_wgmma) */
} gemm_entry;

/* NVIDIA: 256 x 128 blocks of 8 x 4 per work-item, K slices of 8 (1024 work-items; H200 sweep of
 * the two-buffer kernel, qkvo D 4096 L 2048, f16 weights, ms: 256x128x8 8x4 8.52, 128x256x8 8x8
 * 8.55, 128x128x16 8x4 9.00, 128x128x8 8x4 9.01, 128x128x16 4x8 9.14, 64x128x8 8x4 9.17,
 * 64x128x16 8x4 10.9, 128x64x16 8x4 11.0, 64x64x16 4x4 11.1, 128x128x16 8x8 14.5, v0.19.0);
 * other GPUs 64 x 128 of 8 x 4 with K slices of 8 (256 work-items, within AMD's and Mali's
 * limits; 13 KB of local memory; the fastest 256-work-item tiles of that sweep); llvmpipe and the rest (CPUs on the tiled
 * kernel under a loop cap) 32 x 32 of 2 x 2, which keep a work-item's loop count per K slice low
 * (llvmpipe, qkvo L 256 D 512 f16: 2 x 2 took 0.6x the time of 4 x 4, 32 x 32 and 64 x 64 blocks
 * alike). Tensor cores (NVIDIA): 128 x 128 blocks of 8 warps (2 x 4, 64 x 32 each), K slices of
 * 32 in a 2-stage ring (40 KB of the 48 KB of local memory; the fastest of 11 tile sets in the
 * v0.19.0 H200 sweep, 1.23 ms against 1.34-1.94 for the layer above). wgmma (compute capability
 * 9.0): 128 x 128 blocks of two warpgroups, K slices of 32 in a 3-stage ring (48 KB; the input
 * gradients' I8 weights: the same with a raw ring of 2; v0.20.0 H200 sweep of 9 tile sets, the
 * layer above: 0.78 ms against 0.93-1.23; two stages 1.10, slices of 16 1.13-1.23). The forward's
 * I8 weights (A in registers) take a fourth stage (v0.46.0 H100, the layer above with I8 weights,
 * F16 activations, ms: 4 stages 0.825-0.842, 3 stages 1.001, 128 x 64 blocks 1.095, slices of 16
 * 1.234). They are converted first, and the 16-bit GEMM run, only with BF16 activations from 2048
 * rows, where the conversion in registers costs more than F16's (same call, converted / in
 * registers: L 2048 BF16 0.892-0.895 / 0.901-0.909, F16 0.898-0.901 / 0.825-0.842; L 1024 BF16
 * 0.484-0.485 / 0.440-0.449, F16 0.452-0.456 / 0.409-0.411; L 512 BF16 0.340-0.341 / 0.272-0.277,
 * F16 0.296-0.303 / 0.264-0.270). */
static const gemm_entry gemm_table[] = {
    {"llvmpipe", FCL_DEVICE_OTHER, {32, 32, 16, 2, 2, 2}, {0}, {0}},
    {"NVIDIA", FCL_DEVICE_GPU, {256, 128, 8, 8, 4, 4}, {128, 128, 32, 2, 4, 2, 0},
     {128, 128, 32, 2, 3, 0, 0, {0, 2048}}},
    {"", FCL_DEVICE_GPU, {64, 128, 8, 8, 4, 4}, {0}, {0}},
    {"", FCL_DEVICE_OTHER, {32, 32, 16, 2, 2, 2}, {0}, {0}},
};

/* The GEMM table's entry for ctx's device. */
static const gemm_entry *gemm_entry_for(fcl_context ctx)
{
    for (size_t i = 0; i < sizeof gemm_table / sizeof gemm_table[0]; i++) {
        const gemm_entry *g = &gemm_table[i];
        if ((!g->name[0] || strstr(ctx->info.name, g->name) || strstr(ctx->info.vendor, g->name)) &&
            (g->type == FCL_DEVICE_OTHER || g->type == ctx->info.type))
            return g;
    }
    return &gemm_table[sizeof gemm_table / sizeof gemm_table[0] - 1];
}

int fcl_gemm_local_floats(const fcl_gemm_tiles *t)
{
    return 2 * t->tile_k * (t->tile_m + t->vw + t->tile_n + t->vw);
}

int fcl_gemm_tiled(fcl_context ctx)
{
    return !(ctx->info.type == FCL_DEVICE_CPU && fcl_device_loop_limit(ctx) == 0);
}

fcl_gemm_tiles fcl_tune_gemm(fcl_context ctx)
{
    fcl_gemm_tiles t = gemm_entry_for(ctx)->tiles;
    int v[FCL_TUNING_MAX_VALUES];
    if (fcl_tuned_find(ctx, "gemm", fcl_tuned_head_dim("gemm", 0), v))
        t = (fcl_gemm_tiles){v[0], v[1], v[2], v[3], v[4], 4};
    const char *env = getenv("FLASHCL_GEMM_TILES");
    fcl_gemm_tiles o = {0, 0, 0, 0, 0, 4};
    const int got = env ? sscanf(env, "%d,%d,%d,%d,%d,%d", &o.tile_m, &o.tile_n, &o.tile_k, &o.wpt_m, &o.wpt_n,
                                 &o.vw) : 0;
    if ((got == 5 || got == 6) && o.tile_m > 0 && o.tile_n > 0 && o.tile_k > 0 && o.wpt_m > 0 && o.wpt_n > 0 &&
        o.vw > 0 && o.tile_m % o.wpt_m == 0 && o.tile_n % o.wpt_n == 0)
        t = o;
    t.vw = t.vw >= 4 ? 4 : t.vw >= 2 ? 2 : 1;
    while (t.wpt_m % t.vw || t.wpt_n % t.vw)
        t.vw /= 2;
    /* work-items along m and n: halve the larger until the work-group fits */
    int dm = t.tile_m / t.wpt_m, dn = t.tile_n / t.wpt_n;
    while ((size_t)dm * (size_t)dn > ctx->info.max_work_group_size && dm * dn > 1) {
        if (dm >= dn)
            dm /= 2;
        else
            dn /= 2;
    }
    t.tile_m = dm * t.wpt_m;
    t.tile_n = dn * t.wpt_n;
    const uint64_t budget = ctx->info.local_mem_bytes - 256;
    while (t.tile_k > 1 && (uint64_t)fcl_gemm_local_floats(&t) * 4 > budget)
        t.tile_k /= 2;
    while ((dm > 1 || dn > 1) && (uint64_t)fcl_gemm_local_floats(&t) * 4 > budget) {
        if (dm >= dn && dm > 1)
            dm /= 2;
        else
            dn /= 2;
        t.tile_m = dm * t.wpt_m;
        t.tile_n = dn * t.wpt_n;
    }
    return t;
}

uint64_t fcl_gemm_mma_local_bytes(const fcl_gemm_mma_tiles *t, int scales)
{
    const uint64_t m = (uint64_t)t->tile_m, n = (uint64_t)t->tile_n, k = (uint64_t)t->tile_k;
    const uint64_t halves = (m + n) * k + 8 * ((m > k ? m : k) + (n > k ? n : k));
    return (uint64_t)t->stages * (2 * halves + (scales ? 4 * k : 0));
}

/* Whether t's values are tiles the tensor-core GEMM takes (see fcl_tune_gemm_mma). */
static int gemm_mma_valid(const fcl_gemm_mma_tiles *t)
{
    return t->warps_m > 0 && t->warps_n > 0 && t->warps_m * t->warps_n <= 16 && t->tile_m > 0 && t->tile_m <= 256 &&
           t->tile_m % (16 * t->warps_m) == 0 && t->tile_n > 0 && t->tile_n <= 256 &&
           t->tile_n % (16 * t->warps_n) == 0 && t->tile_k >= 16 && t->tile_k <= 128 && t->tile_k % 16 == 0 &&
           t->stages >= 2 && t->stages <= 4 && t->max_regs >= 0 && t->max_regs <= 255;
}

fcl_gemm_mma_tiles fcl_tune_gemm_mma(fcl_context ctx, int scales)
{
    fcl_gemm_mma_tiles t = gemm_entry_for(ctx)->mma;
    if (t.tile_m == 0)
        return t;
    const char *env = getenv("FLASHCL_GEMM_MMA_TILES");
    int v[7] = {t.tile_m, t.tile_n, t.tile_k, t.warps_m, t.warps_n, t.stages, t.max_regs};
    if (env && parse_values(env, v, 7) >= 5) {
        const fcl_gemm_mma_tiles o = {v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
        if (gemm_mma_valid(&o))
            t = o;
    }
    while (fcl_gemm_mma_local_bytes(&t, scales) > ctx->info.local_mem_bytes && (t.stages > 2 || t.tile_k > 16)) {
        if (t.stages > 2)
            t.stages--;
        else
            t.tile_k -= 16;
    }
    if (fcl_gemm_mma_local_bytes(&t, scales) > ctx->info.local_mem_bytes ||
        (size_t)(t.warps_m * t.warps_n * 32) > ctx->info.max_work_group_size)
        t.tile_m = 0;
    return t;
}

/* Bytes of the wgmma GEMM's local array with tiles t in `form` (cl/nvidia/linear_wgmma.cl: the
 * stages of A and B; with I8 B two converted B tiles beside a raw ring of I8 B, one slice per
 * stage ahead; with I8 A its stages of a byte per value). */
static uint64_t gemm_wgmma_local_bytes(const fcl_gemm_wgmma_tiles *t, int form)
{
    const uint64_t a = (uint64_t)t->tile_m * (uint64_t)t->tile_k * 2, b = (uint64_t)t->tile_n * (uint64_t)t->tile_k;
    if (form == FCL_WGMMA_I8_TILES)
        return (uint64_t)t->stages * a + (uint64_t)(t->stages - 1 - t->lag) * b + 4 * b;
    return (uint64_t)t->stages * ((form == FCL_WGMMA_I8_REGS ? a / 2 : a) + 2 * b);
}

/* Whether t's values are tiles the wgmma GEMM takes (see fcl_tune_gemm_wgmma). */
static int gemm_wgmma_valid(const fcl_gemm_wgmma_tiles *t)
{
    return (t->warpgroups == 1 || t->warpgroups == 2) &&
           (t->tile_m == 64 * t->warpgroups || t->tile_m == 128 * t->warpgroups) &&
           (t->tile_n == 64 || t->tile_n == 128 || t->tile_n == 256) &&
           (t->tile_k == 16 || t->tile_k == 32 || t->tile_k == 64) && (t->lag == 0 || t->lag == 1) &&
           t->stages >= t->lag + 2 && t->stages <= 4 && t->max_regs >= 0 && t->max_regs <= 255;
}

fcl_gemm_wgmma_tiles fcl_tune_gemm_wgmma(fcl_context ctx, int form)
{
    fcl_gemm_wgmma_tiles t = gemm_entry_for(ctx)->wgmma;
    if (t.tile_m == 0 || ctx->info.nv_cc_major != 9 || ctx->info.nv_cc_minor != 0)
        return (fcl_gemm_wgmma_tiles){0};
    const char *env = getenv("FLASHCL_GEMM_WGMMA_TILES");
    int v[7] = {t.tile_m, t.tile_n, t.tile_k, t.warpgroups, t.stages, t.lag, t.max_regs};
    int overridden = 0;
    if (env && parse_values(env, v, 7) >= 6) {
        const fcl_gemm_wgmma_tiles o = {v[0], v[1], v[2], v[3], v[4], v[5], v[6],
                                          {t.dequant_rows[0], t.dequant_rows[1]}};
        if ((overridden = gemm_wgmma_valid(&o)))
            t = o;
    }
    const char *rows = getenv("FLASHCL_GEMM_DEQUANT_ROWS");
    if (rows && parse_values(rows, v, 1) == 1 && v[0] >= 0)
        t.dequant_rows[0] = t.dequant_rows[1] = v[0];
    if (form != FCL_WGMMA_W16) /* converted values are reused once the previous slice's products completed */
        t.lag = 0;
    if (form == FCL_WGMMA_I8_REGS && !overridden && t.stages < 4) /* its stages hold a byte per weight */
        t.stages++;
    /* I8 A reads slice kt + 1's fragments during slice kt's products: 3 stages at least */
    const int least = form == FCL_WGMMA_I8_REGS ? 3 : t.lag + 2;
    while (gemm_wgmma_local_bytes(&t, form) > ctx->info.local_mem_bytes && t.stages > least)
        t.stages--;
    if (gemm_wgmma_local_bytes(&t, form) > ctx->info.local_mem_bytes || t.stages < least ||
        (size_t)(128 * t.warpgroups) > ctx->info.max_work_group_size)
        t.tile_m = 0;
    return t;
}
