/* SPDX-License-Identifier: Apache-2.0 */
/* Tuned tiles, kept as one text entry of the disk cache per device (see tuned.h): lines
 * "<kernel> <head_dim_pad> <values...>", written whole through the cache's atomic store, so a
 * torn or corrupted file is never read (the cache's checksum rejects it). */
#include "tuning/tuned.h"

#include "cache/disk_cache.h"
#include "cache/sha256.h"
#include "tuning/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fcl_tuned_value_count(const char *kernel)
{
    if (!kernel)
        return 0;
    if (strcmp(kernel, "forward") == 0)
        return 3;
    if (strcmp(kernel, "forward_blocked") == 0 || strcmp(kernel, "forward_cpu") == 0 ||
        strcmp(kernel, "backward_blocks") == 0)
        return 4;
    if (strcmp(kernel, "forward_mma") == 0 || strcmp(kernel, "forward_wgmma") == 0 || strcmp(kernel, "gemm") == 0)
        return 5;
    if (strcmp(kernel, "backward_mma") == 0)
        return 7;
    if (strcmp(kernel, "decode") == 0)
        return 10;
    return 0;
}

int fcl_tuned_values_valid(const char *kernel, const int *v)
{
    if (!kernel)
        return 0;
    if (strcmp(kernel, "forward") == 0) /* block_m, block_n, rows */
        return v[0] > 0 && v[0] <= 1024 && v[1] > 0 && v[1] <= 1024 && v[2] > 0 && v[0] % v[2] == 0;
    if (strcmp(kernel, "forward_blocked") == 0 || strcmp(kernel, "backward_blocks") == 0)
        /* own rows per work-group, tile rows, and of each per work-item (block_m, block_n, wm, wn
         * of the forward; block_a, block_b, wa, wb of the backward) */
        return v[2] > 0 && v[2] <= 16 && v[3] > 0 && v[3] <= 16 && v[0] > 0 && v[0] <= 256 && v[0] % v[2] == 0 &&
               v[1] > 0 && v[1] <= 256 && v[1] % v[3] == 0;
    if (strcmp(kernel, "forward_cpu") == 0) /* floats per vector, row vectors, keys per tile, dims per P V step */
        return (v[0] == 4 || v[0] == 8 || v[0] == 16) && v[1] > 0 && v[1] <= 8 && v[2] > 0 && v[2] <= 64 &&
               v[3] > 0 && v[3] <= 16 && (v[3] & (v[3] - 1)) == 0;
    if (strcmp(kernel, "forward_mma") == 0) /* block_m, block_n, m_tiles, max_regs, Q k steps in local memory */
        return v[2] > 0 && v[2] <= 8 && v[0] > 0 && v[0] <= 1024 && v[0] % (16 * v[2]) == 0 && v[1] > 0 &&
               v[1] <= 256 && v[1] % 16 == 0 && v[3] >= 0 && v[3] <= 255 && v[4] >= 0 &&
               v[4] <= FCL_MAX_HEAD_DIM / 16;
    if (strcmp(kernel, "forward_wgmma") == 0) /* keys per tile, stages, max_regs, overlap, Q in registers */
        return (v[0] == 32 || v[0] == 64 || v[0] == 128) && (v[1] == 1 || v[1] == 2) && v[2] >= 0 &&
               v[2] <= 255 && (v[3] == 0 || v[3] == 1) && (v[4] == 0 || v[4] == 1);
    if (strcmp(kernel, "backward_mma") == 0) { /* dkdv keys, dkdv rows, dq rows, dq keys, K/V k steps in
                                                 * local memory, most dK/dV and dQ columns
                                                 * per work-group */
        for (int i = 0; i < 4; i++)
            if (v[i] < 16 || v[i] > 256 || v[i] % 16)
                return 0;
        return v[4] >= 0 && v[4] <= FCL_MAX_HEAD_DIM / 16 && v[5] >= 16 && v[5] <= 256 && v[5] % 16 == 0 &&
               v[6] >= 16 && v[6] <= 256 && v[6] % 16 == 0;
    }
    if (strcmp(kernel, "gemm") == 0) /* block rows and columns, K slice, rows and columns per work-item */
        return v[0] > 0 && v[0] <= 256 && v[1] > 0 && v[1] <= 256 && v[2] > 0 && v[2] <= 64 && v[3] > 0 &&
               v[3] <= 16 && v[4] > 0 && v[4] <= 16 && v[0] % v[3] == 0 && v[1] % v[4] == 0 &&
               (v[0] / v[3]) * (v[1] / v[4]) <= 1024;
    if (strcmp(kernel, "decode") == 0) /* block_n, rows, wg, waves, split_min, max_regs, stages (the
                                        * kernel's ASYNC_STAGES takes 0 or 2 to 4), tensor-core warps,
                                        * key lanes (0 or a power of two up to 32), K one batch
                                        * ahead (0 or 1) */
        return v[0] > 0 && v[0] <= 1024 && v[1] > 0 && v[1] <= 64 && v[2] > 0 && v[2] <= 1024 && v[3] > 0 &&
               v[3] <= 64 && v[4] >= 0 && v[4] <= 1048576 && v[5] >= 0 && v[5] <= 255 &&
               (v[6] == 0 || (v[6] >= 2 && v[6] <= 4)) && v[7] >= 0 && v[7] <= 8 && v[8] >= 0 && v[8] <= 32 &&
               (v[8] & (v[8] - 1)) == 0 && (v[9] == 0 || v[9] == 1);
    return 0;
}

/* The entry's key: the device, its driver and platform (a driver update starts afresh). */
static void tuned_key(fcl_context ctx, uint8_t key[32])
{
    fcl_sha256 s;
    fcl_sha256_init(&s);
    fcl_sha256_update_field(&s, "flashcl tuned tiles v1");
    fcl_sha256_update_field(&s, ctx->info.name);
    fcl_sha256_update_field(&s, ctx->info.vendor);
    fcl_sha256_update_field(&s, ctx->info.driver_version);
    fcl_sha256_update_field(&s, ctx->info.platform_name);
    fcl_sha256_update_field(&s, ctx->info.platform_version);
    fcl_sha256_final(&s, key);
}

/* The entry of one line "<kernel> <head_dim_pad> <values...>" into *e: 1 when the line has
 * exactly the kernel's count of values and they are valid, else 0 (comments, other kernels'
 * counts, bad values, trailing text). */
static int parse_line(const char *line, fcl_tuned_entry *e)
{
    int pos = 0;
    memset(e, 0, sizeof *e);
    if (line[0] == '#' || sscanf(line, "%15s %d%n", e->kernel, &e->head_dim_pad, &pos) != 2)
        return 0;
    const int want = fcl_tuned_value_count(e->kernel);
    if (want == 0 || e->head_dim_pad != fcl_pad_head_dim(e->head_dim_pad) || e->head_dim_pad > FCL_MAX_HEAD_DIM)
        return 0;
    for (int k = 0; k < want; k++) {
        int used = 0;
        if (sscanf(line + pos, "%d%n", &e->values[k], &used) != 1)
            return 0;
        pos += used;
    }
    while (line[pos] == ' ' || line[pos] == '\t' || line[pos] == '\r')
        pos++;
    return line[pos] == '\0' && fcl_tuned_values_valid(e->kernel, e->values);
}

static void parse(fcl_context ctx, const char *text, size_t len)
{
    ctx->n_tuned = 0;
    size_t i = 0;
    while (i < len && ctx->n_tuned < FCL_TUNED_MAX) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        char line[128];
        const size_t n = j - i < sizeof line - 1 ? j - i : sizeof line - 1;
        memcpy(line, text + i, n);
        line[n] = '\0';
        i = j + 1;
        fcl_tuned_entry e;
        if (parse_line(line, &e))
            ctx->tuned[ctx->n_tuned++] = e;
    }
}

/* Reads ctx's entries once, at the first lookup or save (none when the disk cache is off, there
 * is no entry, or it cannot be read). */
static void load_once(fcl_context ctx)
{
    if (ctx->tuned_loaded)
        return;
    ctx->tuned_loaded = 1;
    ctx->n_tuned = 0;
    if (!ctx->cache_dir)
        return;
    uint8_t key[32];
    tuned_key(ctx, key);
    unsigned char *bin = NULL;
    size_t len = 0;
    if (fcl_disk_cache_load(ctx->cache_dir, key, &bin, &len) == 1)
        parse(ctx, (const char *)bin, len);
    free(bin);
}

int fcl_tuned_head_dim(const char *kernel, int head_dim)
{
    return strcmp(kernel, "gemm") == 0 ? 16 : fcl_pad_head_dim(head_dim);
}

int fcl_tuned_find(fcl_context ctx, const char *kernel, int head_dim_pad, int *values)
{
    load_once(ctx);
    for (int i = 0; i < ctx->n_tuned; i++)
        if (ctx->tuned[i].head_dim_pad == head_dim_pad && strcmp(ctx->tuned[i].kernel, kernel) == 0) {
            memcpy(values, ctx->tuned[i].values, sizeof(int) * (size_t)fcl_tuned_value_count(kernel));
            return 1;
        }
    return 0;
}

/* "a,b,c" of n values into buf. */
static void values_text(const int *v, int n, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at < len; i++) {
        const int w = snprintf(buf + at, len - at, i ? ",%d" : "%d", v[i]);
        at += w > 0 ? (size_t)w : 0;
    }
}

/* Longest line of the entry text: the longest kernel name, the head dim and every value at its
 * widest (11 characters each), spaces and the newline. */
#define LINE_CHARS (16 + 12 * (1 + FCL_TUNING_MAX_VALUES) + 1)

fcl_status fcl_tuning_save(fcl_context ctx, const char *kernel, int head_dim, const int *values, int n_values)
{
    FCL_LOCK(ctx);
    if (!ctx || !kernel || !values)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tuning_save: %s is NULL",
                        !ctx ? "ctx" : !kernel ? "kernel" : "values");
    const int want = fcl_tuned_value_count(kernel);
    if (want == 0)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tuning_save: unknown kernel \"%s\" (" FCL_TUNED_KERNEL_NAMES
                        ")", kernel);
    if (n_values != want)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tuning_save: %s takes %d values, not %d", kernel, want,
                        n_values);
    if (head_dim < 1 || head_dim > FCL_MAX_HEAD_DIM)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tuning_save: head_dim %d is outside [1, %d]", head_dim,
                        FCL_MAX_HEAD_DIM);
    int v[FCL_TUNING_MAX_VALUES] = {0};
    memcpy(v, values, sizeof(int) * (size_t)want);
    if (!fcl_tuned_values_valid(kernel, v)) {
        char given[12 * FCL_TUNING_MAX_VALUES];
        values_text(v, want, given, sizeof given);
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tuning_save: %s are not valid %s tiles", given, kernel);
    }
    if (!ctx->cache_dir)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "fcl_tuning_save: the disk cache is off; tuned tiles live in its "
                        "folder (FLASHCL_CACHE_DIR)");
    load_once(ctx);
    const int hdp = fcl_tuned_head_dim(kernel, head_dim);
    int slot = 0;
    while (slot < ctx->n_tuned && !(ctx->tuned[slot].head_dim_pad == hdp && strcmp(ctx->tuned[slot].kernel, kernel) == 0))
        slot++;
    if (slot == FCL_TUNED_MAX)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "fcl_tuning_save: %d tuned entries already", FCL_TUNED_MAX);
    fcl_tuned_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.kernel, sizeof e.kernel, "%s", kernel);
    e.head_dim_pad = hdp;
    memcpy(e.values, v, sizeof v);
    const fcl_tuned_entry old = ctx->tuned[slot];
    const int old_n = ctx->n_tuned;
    ctx->tuned[slot] = e;
    if (slot == ctx->n_tuned)
        ctx->n_tuned++;

    char text[FCL_TUNED_MAX * LINE_CHARS + 512];
    int len = snprintf(text, sizeof text, "# flashcl tuned tiles for %s (%s, driver %s)\n", ctx->info.name,
                       ctx->info.platform_name, ctx->info.driver_version);
    if (len < 0 || (size_t)len >= sizeof text - LINE_CHARS * FCL_TUNED_MAX)
        len = 0; /* only the comment could be that long */
    for (int i = 0; i < ctx->n_tuned; i++) {
        const fcl_tuned_entry *t = &ctx->tuned[i];
        len += snprintf(text + len, sizeof text - (size_t)len, "%s %d", t->kernel, t->head_dim_pad);
        for (int k = 0; k < fcl_tuned_value_count(t->kernel); k++)
            len += snprintf(text + len, sizeof text - (size_t)len, " %d", t->values[k]);
        len += snprintf(text + len, sizeof text - (size_t)len, "\n");
    }
    uint8_t key[32];
    tuned_key(ctx, key);
    if (fcl_disk_cache_store(ctx->cache_dir, key, (const unsigned char *)text, (size_t)len) != 0) {
        ctx->tuned[slot] = old;
        ctx->n_tuned = old_n;
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "fcl_tuning_save: could not write the entry into %s", ctx->cache_dir);
    }
    return FCL_SUCCESS;
}

int fcl_tuning_count(fcl_context ctx)
{
    if (!ctx)
        return 0;
    FCL_LOCK(ctx);
    load_once(ctx);
    return ctx->n_tuned;
}

fcl_status fcl_tuning_entry(fcl_context ctx, int index, char *kernel, int *head_dim_pad, int *values, int *n_values)
{
    if (!ctx || !kernel || !head_dim_pad || !values || !n_values)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tuning_entry: %s is NULL",
                        !ctx ? "ctx" : !kernel ? "kernel" : !head_dim_pad ? "head_dim_pad" : !values ? "values"
                                                                                               : "n_values");
    FCL_LOCK(ctx);
    fcl_clear_error(ctx);
    load_once(ctx);
    if (index < 0 || index >= ctx->n_tuned)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tuning_entry: index %d is outside [0, %d)", index,
                        ctx->n_tuned);
    const fcl_tuned_entry *e = &ctx->tuned[index];
    memcpy(kernel, e->kernel, sizeof e->kernel);
    *head_dim_pad = e->head_dim_pad;
    memcpy(values, e->values, sizeof e->values);
    *n_values = fcl_tuned_value_count(e->kernel);
    return FCL_SUCCESS;
}

fcl_status fcl_tuning_reset(fcl_context ctx)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_tuning_reset: ctx is NULL");
    FCL_LOCK(ctx);
    fcl_clear_error(ctx);
    if (!ctx->cache_dir)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "fcl_tuning_reset: the disk cache is off; tuned tiles live in its "
                        "folder (FLASHCL_CACHE_DIR)");
    /* an entry of comment lines only: no tiles (the cache stores no empty entries) */
    char text[1024];
    int len = snprintf(text, sizeof text, "# flashcl tuned tiles for %s (%s, driver %s): reset\n", ctx->info.name,
                       ctx->info.platform_name, ctx->info.driver_version);
    if (len < 0 || (size_t)len >= sizeof text)
        len = snprintf(text, sizeof text, "# flashcl tuned tiles: reset\n");
    uint8_t key[32];
    tuned_key(ctx, key);
    if (fcl_disk_cache_store(ctx->cache_dir, key, (const unsigned char *)text, (size_t)len) != 0)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "fcl_tuning_reset: could not write the entry into %s",
                        ctx->cache_dir);
    ctx->n_tuned = 0;
    ctx->tuned_loaded = 1;
    return FCL_SUCCESS;
}
