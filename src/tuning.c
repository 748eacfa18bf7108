/* The per-device tuning table. Entries are matched in order; the first whose vendor
 * substring and device type match wins (an empty vendor matches any). */
#include "tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tuning_entry {
    const char *vendor;    /* substring of CL_DEVICE_VENDOR, "" = any */
    fcl_device_type type;
    int max_head_dim_pad;  /* entry applies up to this padded head dim */
    fcl_forward_tiles forward;
} tuning_entry;

static const tuning_entry table[] = {
    {"NVIDIA", FCL_DEVICE_GPU, 256, {64, 32, 1}},
    {"", FCL_DEVICE_GPU, 256, {64, 16, 1}},
    {"", FCL_DEVICE_CPU, 256, {16, 64, 16}},
    {"", FCL_DEVICE_OTHER, 256, {32, 16, 1}},
};

static int device_matches(const fcl_device_info *info, const tuning_entry *e)
{
    if (e->vendor[0] && !strstr(info->vendor, e->vendor))
        return 0;
    return e->type == FCL_DEVICE_OTHER || e->type == info->type;
}

fcl_forward_tiles fcl_tune_forward(fcl_context ctx, int head_dim_pad)
{
    fcl_forward_tiles t = {32, 16, 1};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (head_dim_pad <= table[i].max_head_dim_pad && device_matches(&ctx->info, &table[i])) {
            t = table[i].forward;
            break;
        }
    }
    const char *env = getenv("FLASHCL_FORWARD_TILES");
    int m, n, r;
    if (env && sscanf(env, "%d,%d,%d", &m, &n, &r) == 3 && m > 0 && n > 0 && r > 0 && m % r == 0) {
        t.block_m = m;
        t.block_n = n;
        t.rows = r;
    }
    /* K and V tiles (plus the mask row) must fit in half the local memory. */
    uint64_t budget = ctx->info.local_mem_bytes / 2;
    while (t.block_n > 1 && (uint64_t)(2 * t.block_n * head_dim_pad + t.block_n) * 4 > budget)
        t.block_n /= 2;
    while (t.block_m > t.rows && (size_t)(t.block_m / t.rows) > ctx->info.max_work_group_size)
        t.block_m /= 2;
    return t;
}
