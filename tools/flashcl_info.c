/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-info: every OpenCL platform and device as flashcl sees it (indices P:D are the
 * selector's), the device the default selector picks, its disk cache folder, kernels and tuned
 * tiles, and the version.
 * Exit: 0, 1 when flashcl could not open a listed device, 2 on bad arguments. */
#include "device_hint.h"
#include "tuning_print.h"

#include <flashcl/flashcl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLATFORMS 32
#define MAX_DEVICES 64

static const char *yes_no(int x)
{
    return x ? "yes" : "no";
}

/* Bytes as "123.4 MiB" style text. */
static void fmt_bytes(char *buf, size_t n, uint64_t bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)bytes;
    int u = 0;
    while (x >= 1024.0 && u < 4) {
        x /= 1024.0;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", x, units[u]);
}

static void print_info(const fcl_device_info *in)
{
    char gm[32], ma[32], lm[32];
    fmt_bytes(gm, sizeof gm, in->global_mem_bytes);
    fmt_bytes(ma, sizeof ma, in->max_alloc_bytes);
    fmt_bytes(lm, sizeof lm, in->local_mem_bytes);
    printf("        vendor: %s\n", in->vendor);
    printf("        driver: %s; device version: %s\n", in->driver_version, in->device_version);
    printf("        type: %s; compute units: %u; max work-group: %zu\n", fcl_device_type_name(in->type),
           in->compute_units, in->max_work_group_size);
    printf("        global mem: %s (max alloc %s); local mem: %s\n", gm, ma, lm);
    printf("        fp16: %s; fp64: %s; subgroups: %s\n", yes_no(in->has_fp16),
           yes_no(in->has_fp64), yes_no(in->has_subgroups));
    if (in->nv_cc_major)
        printf("        NVIDIA compute capability: %d.%d\n", in->nv_cc_major, in->nv_cc_minor);
}

/* Opens device P:D through flashcl and prints what it reports; returns 0 or -1. */
static int print_device(cl_uint p, cl_uint d, cl_device_id expected)
{
    char sel[32];
    fcl_context ctx = NULL;
    fcl_device_info info;
    snprintf(sel, sizeof sel, "%u:%u", (unsigned)p, (unsigned)d);
    fcl_status st = fcl_context_create(sel, &ctx);
    if (st == FCL_SUCCESS)
        st = fcl_context_device_info(ctx, &info);
    if (st != FCL_SUCCESS) {
        printf("    %s  (flashcl cannot open it: %s: %s)\n", sel, fcl_status_string(st),
               fcl_last_error(ctx));
        fcl_context_release(ctx);
        return -1;
    }
    printf("    %s  %s\n", sel, info.name);
    print_info(&info);
    int rc = 0;
    if (fcl_context_cl_device(ctx) != expected) {
        printf("        warning: selector \"%s\" opened a different device than listed\n", sel);
        rc = -1;
    }
    fcl_context_release(ctx);
    return rc;
}

static void platform_string(cl_platform_id p, cl_platform_info what, char *buf, size_t n)
{
    if (clGetPlatformInfo(p, what, n, buf, NULL) != CL_SUCCESS)
        snprintf(buf, n, "?");
    buf[n - 1] = '\0';
}

/* Prints platform p and its devices; returns the count of devices flashcl failed to open. */
static int print_platform(cl_uint index, cl_platform_id p)
{
    char name[256], version[256];
    cl_device_id devs[MAX_DEVICES];
    cl_uint nd = 0;
    platform_string(p, CL_PLATFORM_NAME, name, sizeof name);
    platform_string(p, CL_PLATFORM_VERSION, version, sizeof version);
    printf("Platform %u: %s (%s)\n", (unsigned)index, name, version);
    cl_int err = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, MAX_DEVICES, devs, &nd);
    if (err != CL_SUCCESS || nd == 0) {
        if (err == CL_SUCCESS || err == CL_DEVICE_NOT_FOUND)
            printf("    (no devices)\n");
        else
            printf("    (no devices: clGetDeviceIDs returned %d)\n", (int)err);
        return 0;
    }
    if (nd > MAX_DEVICES)
        nd = MAX_DEVICES;
    int failed = 0;
    for (cl_uint d = 0; d < nd; d++)
        failed += print_device(index, d, devs[d]) != 0;
    return failed;
}

/* The P:D of `dev` among the listed platforms, or "?" when not found. */
static void find_index(cl_platform_id *plats, cl_uint np, cl_device_id dev, char *buf, size_t n)
{
    snprintf(buf, n, "?");
    for (cl_uint p = 0; p < np; p++) {
        cl_device_id devs[MAX_DEVICES];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devs, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd && d < MAX_DEVICES; d++)
            if (devs[d] == dev)
                snprintf(buf, n, "%u:%u", (unsigned)p, (unsigned)d);
    }
}

/* The default selector's choice and the disk cache folder; returns 0, or -1 when flashcl
 * failed to open the device it chose. */
static int print_default(cl_platform_id *plats, cl_uint np)
{
    const char *env = getenv("FLASHCL_DEVICE");
    fcl_context ctx = NULL;
    fcl_device_info info;
    char where[32];
    printf("\nDefault device (FLASHCL_DEVICE=%s): ", env && *env ? env : "(unset)");
    fcl_status st = fcl_context_create(NULL, &ctx);
    if (st == FCL_SUCCESS)
        st = fcl_context_device_info(ctx, &info);
    if (st != FCL_SUCCESS) {
        printf("none (%s: %s)\n", fcl_status_string(st), fcl_last_error(ctx));
        tools_device_hint(stdout, NULL, st);
        printf("Disk cache: unknown (no context)\n");
        fcl_context_release(ctx);
        /* no device at all is not a failure; a FLASHCL_DEVICE that matches none is */
        return st == FCL_ERR_NO_DEVICE && !(env && *env) ? 0 : -1;
    }
    find_index(plats, np, fcl_context_cl_device(ctx), where, sizeof where);
    printf("%s  %s (%s)\n", where, info.name, info.platform_name);
    tools_pocl_affinity_hint(stdout, &info);
    const char *dir = fcl_context_cache_dir(ctx);
    printf("Disk cache: %s\n", dir ? dir : "off");
    printf("Projection GEMMs (activations / weights): f32/f32 %s, f16/f16 %s, bf16/bf16 %s, f16/i8 %s\n",
           fcl_projection_path(ctx, FCL_F32, FCL_F32), fcl_projection_path(ctx, FCL_F16, FCL_F16),
           fcl_projection_path(ctx, FCL_BF16, FCL_BF16), fcl_projection_path(ctx, FCL_F16, FCL_I8));
    printf("Attention forward kernel (D 128): f32 %s, f16 %s, bf16 %s\n", fcl_attention_forward_path(ctx, FCL_F32, 128),
           fcl_attention_forward_path(ctx, FCL_F16, 128), fcl_attention_forward_path(ctx, FCL_BF16, 128));
    printf("Attention backward kernels (D 128): f32 %s, f16 %s, bf16 %s\n",
           fcl_attention_backward_path(ctx, FCL_F32, 128), fcl_attention_backward_path(ctx, FCL_F16, 128),
           fcl_attention_backward_path(ctx, FCL_BF16, 128));
    printf("Decode kernel (D 128, aligned cache, no mask): f32 %s, f16 %s, bf16 %s\n",
           fcl_attention_decode_path(ctx, FCL_F32, 128), fcl_attention_decode_path(ctx, FCL_F16, 128),
           fcl_attention_decode_path(ctx, FCL_BF16, 128));
    printf("Tuned tiles (flashcl-bench --tune; --tune --reset forgets them):\n");
    const int tuned = tools_print_tuned(stdout, ctx, "    ");
    fcl_context_release(ctx);
    return tuned < 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--version") && argc == 2) {
        printf("flashcl-info %s\n", fcl_version_string());
        return 0;
    }
    if (argc > 1) {
        int help = !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help");
        fprintf(help ? stdout : stderr,
                "usage: flashcl-info [--version]\n  Lists OpenCL platforms and devices (P:D selectors), "
                "the default device (FLASHCL_DEVICE) with its disk cache folder, kernels and tuned "
                "tiles, and the version.\n");
        return help ? 0 : 2;
    }
    printf("flashcl %s\n\n", fcl_version_string());
    cl_platform_id plats[MAX_PLATFORMS];
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, plats, &np);
    if (err != CL_SUCCESS || np == 0) {
        printf("No OpenCL platforms (clGetPlatformIDs returned %d).\n", (int)err);
        np = 0;
    }
    if (np > MAX_PLATFORMS)
        np = MAX_PLATFORMS;
    int failed = 0;
    for (cl_uint p = 0; p < np; p++)
        failed += print_platform(p, plats[p]);
    if (print_default(plats, np) != 0)
        failed++;
    return failed ? 1 : 0;
}
