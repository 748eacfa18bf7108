/* SPDX-License-Identifier: Apache-2.0 */
/* The program cache: a kernel variant compiles once per context (memory) and once per
 * machine (disk, keyed by a SHA-256 of source, options, device, driver, platform and
 * library version). */
#include "programs/program_cache.h"

#include "cache/disk_cache.h"
#include "cache/sha256.h"
#include "programs/binary_header.h"
#include "programs/build_log.h"
#include "programs/ptx_promote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static char *join_key(const char *const *names, int n, const char *options)
{
    size_t len = strlen(options) + 2;
    for (int i = 0; i < n; i++)
        len += strlen(names[i]) + 1;
    char *key = malloc(len);
    if (!key)
        return NULL;
    key[0] = '\0';
    for (int i = 0; i < n; i++) {
        strcat(key, names[i]);
        strcat(key, "+");
    }
    strcat(key, "|");
    strcat(key, options);
    return key;
}

static char *join_sources(const char *const *names, int n)
{
    size_t len = 1;
    for (int i = 0; i < n; i++) {
        const char *src = fcl_kernel_source(names[i]);
        if (!src)
            return NULL;
        len += strlen(src) + 1;
    }
    char *text = malloc(len);
    if (!text)
        return NULL;
    text[0] = '\0';
    for (int i = 0; i < n; i++) {
        strcat(text, fcl_kernel_source(names[i]));
        strcat(text, "\n");
    }
    return text;
}

static void disk_key(fcl_context ctx, const char *source, const char *options, uint8_t key[32])
{
    fcl_sha256 h;
    fcl_sha256_init(&h);
    fcl_sha256_update_field(&h, "flashcl program cache v1");
    fcl_sha256_update_field(&h, FCL_VERSION_STRING);
    fcl_sha256_update_field(&h, source);
    fcl_sha256_update_field(&h, options);
    fcl_sha256_update_field(&h, ctx->info.name);
    fcl_sha256_update_field(&h, ctx->info.vendor);
    fcl_sha256_update_field(&h, ctx->info.driver_version);
    fcl_sha256_update_field(&h, ctx->info.device_version);
    fcl_sha256_update_field(&h, ctx->info.platform_name);
    fcl_sha256_update_field(&h, ctx->info.platform_version);
    fcl_sha256_final(&h, key);
}

static fcl_status build_failure(fcl_context ctx, cl_program prog, cl_int err, const char *options)
{
    char log[FCL_ERROR_MAX];
    fcl_build_log_excerpt(ctx, prog, log, sizeof log);
    return fcl_fail(ctx, FCL_ERR_BUILD, "kernel build failed (%s): %.280s (options \"%.160s\")",
                    fcl_cl_error_name(err), log, options);
}

/* Tries the disk cache; returns a built program or NULL (miss or rejected file). A binary is
 * rejected before the implementation sees it when its header is not the implementation's
 * (fcl_binary_header_ok), and after building when it yields no kernel. */
static cl_program load_from_disk(fcl_context ctx, const uint8_t key[32], const char *options)
{
    unsigned char *bin = NULL;
    size_t len = 0;
    int r = fcl_disk_cache_load(ctx->cache_dir, key, &bin, &len);
    if (r > 0 && !fcl_binary_header_ok(ctx->info.platform_name, bin, len)) {
        free(bin);
        r = -1;
    }
    if (r <= 0) {
        if (r < 0)
            ctx->stats.disk_rejects++;
        return NULL;
    }
    cl_int status = CL_SUCCESS, err;
    const unsigned char *bins[1] = {bin};
    pthread_mutex_t *lock = fcl_device_program_lock(ctx->device); /* one load at a time (PoCL) */
    pthread_mutex_lock(lock);
    cl_program prog = clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->device, &len, bins, &status, &err);
    free(bin);
    if (err == CL_SUCCESS && status == CL_SUCCESS)
        err = clBuildProgram(prog, 1, &ctx->device, options, NULL, NULL);
    size_t n_kernels = 0;
    if (err == CL_SUCCESS && status == CL_SUCCESS)
        err = clGetProgramInfo(prog, CL_PROGRAM_NUM_KERNELS, sizeof n_kernels, &n_kernels, NULL);
    if (err == CL_SUCCESS && n_kernels == 0) /* a forged module that "built" (Rusticl) */
        err = CL_INVALID_BINARY;
    if ((err != CL_SUCCESS || status != CL_SUCCESS) && prog) {
        clReleaseProgram(prog);
        prog = NULL;
    }
    pthread_mutex_unlock(lock);
    if (!prog) {
        ctx->stats.disk_rejects++;
        return NULL;
    }
    ctx->stats.disk_hits++;
    return prog;
}

static void store_to_disk(fcl_context ctx, cl_program prog, const uint8_t key[32])
{
    size_t len = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL) != CL_SUCCESS || len == 0)
        return; /* this implementation gives no binaries: nothing to keep */
    unsigned char *bin = malloc(len);
    if (!bin)
        return;
    unsigned char *bins[1] = {bin};
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS &&
        fcl_disk_cache_store(ctx->cache_dir, key, bin, len) == 0)
        ctx->stats.disk_writes++;
    free(bin);
}

/* The caller's options plus the device-wide ones (see cl/portable/common.cl): -DFCL_UNROLL=1 on GPUs
 * (loops over private arrays fully unrolled), 0 elsewhere; -DFCL_ROUND_GROUPS, 4 x the compute
 * units (about two rounds of two work-groups per compute unit: the chunk of fcl_group_order).
 * NULL when out of memory. */
static char *device_options(fcl_context ctx, const char *options)
{
    char add[64];
    snprintf(add, sizeof add, " -DFCL_UNROLL=%d -DFCL_ROUND_GROUPS=%u", ctx->info.type == FCL_DEVICE_GPU,
             4 * (ctx->info.compute_units > 0 ? ctx->info.compute_units : 1));
    char *full = malloc(strlen(options) + strlen(add) + 1);
    if (full) {
        strcpy(full, options);
        strcat(full, add);
    }
    return full;
}

/* Programs that include cl/nvidia/wgmma_nv.cl are built for sm_90a (fcl_promote_sm90a); the disk cache
 * keeps the promoted program. */
static int uses_wgmma(const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], "wgmma_nv") == 0)
            return 1;
    return 0;
}

static fcl_status build_program(fcl_context ctx, const char *const *names, int n, const char *caller_options,
                                cl_program *out)
{
    char *options = device_options(ctx, caller_options);
    char *source = options ? join_sources(names, n) : NULL;
    if (!source) {
        free(options);
        return fcl_fail(ctx, FCL_ERR_OUT_OF_MEMORY, "kernel source %s missing or out of memory", names[n - 1]);
    }
    uint8_t key[32];
    disk_key(ctx, source, options, key);
    cl_program prog = ctx->programs_on_disk ? load_from_disk(ctx, key, options) : NULL;
    if (prog) {
        free(source);
        free(options);
        *out = prog;
        return FCL_SUCCESS;
    }
    cl_int err;
    const char *text = source;
    prog = clCreateProgramWithSource(ctx->cl_ctx, 1, &text, NULL, &err);
    free(source);
    if (err != CL_SUCCESS) {
        free(options);
        return fcl_fail_cl(ctx, err, "clCreateProgramWithSource");
    }
    err = clBuildProgram(prog, 1, &ctx->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        fcl_status s = build_failure(ctx, prog, err, options);
        clReleaseProgram(prog);
        free(options);
        return s;
    }
    if (uses_wgmma(names, n)) {
        cl_program promoted;
        fcl_status s = fcl_promote_sm90a(ctx, prog, options, &promoted);
        clReleaseProgram(prog);
        if (s != FCL_SUCCESS) {
            free(options);
            return s;
        }
        prog = promoted;
    }
    free(options);
    ctx->stats.compiles++;
    if (ctx->programs_on_disk)
        store_to_disk(ctx, prog, key);
    *out = prog;
    return FCL_SUCCESS;
}

static fcl_status entry_kernel(fcl_context ctx, fcl_program_entry *e, const char *name, cl_kernel *out)
{
    for (int i = 0; i < e->n_kernels; i++) {
        if (strcmp(e->kernel_names[i], name) == 0) {
            *out = e->kernels[i];
            return FCL_SUCCESS;
        }
    }
    if (e->n_kernels == FCL_KERNELS_PER_PROGRAM)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "too many kernels requested from one program");
    cl_int err;
    cl_kernel k = clCreateKernel(e->program, name, &err);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "clCreateKernel");
    char *copy = malloc(strlen(name) + 1);
    if (!copy) {
        clReleaseKernel(k);
        return fcl_fail(ctx, FCL_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    strcpy(copy, name);
    e->kernel_names[e->n_kernels] = copy;
    e->kernels[e->n_kernels++] = k;
    *out = k;
    return FCL_SUCCESS;
}

fcl_status fcl_get_kernel(fcl_context ctx, const char *const *source_names, int n_sources, const char *options,
                          const char *kernel_name, cl_kernel *out)
{
    char *key = join_key(source_names, n_sources, options);
    if (!key)
        return fcl_fail(ctx, FCL_ERR_OUT_OF_MEMORY, "out of host memory");
    for (fcl_program_entry *e = ctx->programs; e; e = e->next) {
        if (strcmp(e->key, key) == 0) {
            free(key);
            ctx->stats.memory_hits++;
            return entry_kernel(ctx, e, kernel_name, out);
        }
    }
    fcl_program_entry *e = calloc(1, sizeof *e);
    if (!e) {
        free(key);
        return fcl_fail(ctx, FCL_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    fcl_status s = build_program(ctx, source_names, n_sources, options, &e->program);
    if (s != FCL_SUCCESS) {
        free(key);
        free(e);
        return s;
    }
    e->key = key;
    e->next = ctx->programs;
    ctx->programs = e;
    return entry_kernel(ctx, e, kernel_name, out);
}

fcl_status fcl_wgmma_build_outcome(fcl_context ctx, fcl_status s, int *refused)
{
    *refused = s == FCL_ERR_UNSUPPORTED;
    if (!*refused)
        return s;
    ctx->wgmma_refused = 1;
    fcl_clear_error(ctx);
    return FCL_SUCCESS;
}
