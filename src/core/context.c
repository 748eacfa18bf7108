/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_context: device, in-order queue, capabilities and the program cache. */
#include "cache/disk_cache.h"
#include "core/device_select.h"
#include "core/internal.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001
#define CL_DEVICE_SUB_GROUP_SIZES_INTEL 0x4108

static void query_string(cl_device_id d, cl_device_info what, char *dst, size_t n)
{
    if (clGetDeviceInfo(d, what, n, dst, NULL) != CL_SUCCESS)
        dst[0] = '\0';
    dst[n - 1] = '\0';
}

static int has_extension(const char *list, const char *ext)
{
    size_t n = strlen(ext);
    for (const char *p = strstr(list, ext); p; p = strstr(p + 1, ext))
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}

/* The subgroup size of the kernels' subgroup forms (see internal.h), from the device's extension
 * list `ext`: 16 where the device can be told to use it, else the largest size it offers up to 32. */
static int subgroup_size(cl_device_id d, const char *ext)
{
    const char *env = getenv("FLASHCL_SUBGROUPS");
    if ((env && strcmp(env, "0") == 0) || !has_extension(ext, "cl_intel_required_subgroup_size") ||
        !(has_extension(ext, "cl_intel_subgroups") ||
          (has_extension(ext, "cl_khr_subgroups") && has_extension(ext, "cl_khr_subgroup_shuffle"))))
        return 0;
    size_t sizes[16], bytes = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_SUB_GROUP_SIZES_INTEL, sizeof sizes, sizes, &bytes) != CL_SUCCESS)
        return 0;
    int best = 0;
    for (size_t i = 0; i < bytes / sizeof sizes[0] && i < 16; i++) {
        if (sizes[i] == 16)
            return 16;
        if (sizes[i] <= 32 && (int)sizes[i] > best && (sizes[i] & (sizes[i] - 1)) == 0)
            best = (int)sizes[i];
    }
    return best >= 4 ? best : 0;
}

const char *fcl_device_type_name(fcl_device_type type)
{
    switch (type) {
    case FCL_DEVICE_CPU: return "cpu";
    case FCL_DEVICE_GPU: return "gpu";
    case FCL_DEVICE_ACCELERATOR: return "accelerator";
    case FCL_DEVICE_OTHER: break;
    }
    return "other";
}

fcl_status fcl_query_device_info(fcl_context ctx)
{
    fcl_device_info *info = &ctx->info;
    cl_device_id d = ctx->device;
    memset(info, 0, sizeof *info);
    query_string(d, CL_DEVICE_NAME, info->name, sizeof info->name);
    query_string(d, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
    query_string(d, CL_DRIVER_VERSION, info->driver_version, sizeof info->driver_version);
    query_string(d, CL_DEVICE_VERSION, info->device_version, sizeof info->device_version);
    if (clGetPlatformInfo(ctx->platform, CL_PLATFORM_NAME, sizeof info->platform_name, info->platform_name, NULL))
        info->platform_name[0] = '\0';
    if (clGetPlatformInfo(ctx->platform, CL_PLATFORM_VERSION, sizeof info->platform_version, info->platform_version, NULL))
        info->platform_version[0] = '\0';

    cl_device_type type = 0;
    cl_uint cu = 0;
    cl_ulong gmem = 0, alloc = 0, lmem = 0;
    size_t wg = 0;
    cl_int err = clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    err |= clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    err |= clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gmem, &gmem, NULL);
    err |= clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof alloc, &alloc, NULL);
    err |= clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL);
    err |= clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, FCL_ERR_OPENCL, "querying the capabilities of device \"%s\" failed", info->name);
    info->type = (type & CL_DEVICE_TYPE_GPU) ? FCL_DEVICE_GPU
               : (type & CL_DEVICE_TYPE_CPU) ? FCL_DEVICE_CPU
               : (type & CL_DEVICE_TYPE_ACCELERATOR) ? FCL_DEVICE_ACCELERATOR : FCL_DEVICE_OTHER;
    info->compute_units = cu;
    info->global_mem_bytes = gmem;
    info->max_alloc_bytes = alloc;
    info->local_mem_bytes = lmem;
    info->max_work_group_size = wg;

    size_t ext_len = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_len) == CL_SUCCESS && ext_len > 0) {
        char *ext = malloc(ext_len + 1);
        if (!ext)
            return fcl_fail(ctx, FCL_ERR_OUT_OF_MEMORY, "out of host memory reading device extensions");
        if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, ext_len, ext, NULL) != CL_SUCCESS)
            ext[0] = '\0';
        ext[ext_len] = '\0';
        info->has_fp16 = has_extension(ext, "cl_khr_fp16");
        info->has_fp64 = has_extension(ext, "cl_khr_fp64");
        info->has_subgroups = has_extension(ext, "cl_khr_subgroups") || has_extension(ext, "cl_intel_subgroups");
        ctx->subgroup_size = subgroup_size(d, ext);
        if (has_extension(ext, "cl_nv_device_attribute_query")) {
            cl_uint ma = 0, mi = 0;
            if (clGetDeviceInfo(d, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof ma, &ma, NULL) == CL_SUCCESS &&
                clGetDeviceInfo(d, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof mi, &mi, NULL) == CL_SUCCESS) {
                info->nv_cc_major = (int)ma;
                info->nv_cc_minor = (int)mi;
            }
        }
        free(ext);
    }
    return FCL_SUCCESS;
}

static atomic_uint_fast64_t next_context_id = 1;

/* A zeroed context with its id and its recursive lock, or NULL. */
static fcl_context new_context(void)
{
    fcl_context ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    pthread_mutexattr_t attr;
    int ok = pthread_mutexattr_init(&attr) == 0;
    if (ok) {
        ok = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE) == 0 &&
             pthread_mutex_init(&ctx->lock, &attr) == 0;
        pthread_mutexattr_destroy(&attr);
    }
    if (!ok) {
        free(ctx);
        return NULL;
    }
    ctx->id = atomic_fetch_add(&next_context_id, 1);
    return ctx;
}

#define PROGRAM_LOCK_STRIPES 8
static pthread_mutex_t program_locks[PROGRAM_LOCK_STRIPES] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};

pthread_mutex_t *fcl_device_program_lock(cl_device_id device)
{
    return &program_locks[((uintptr_t)device >> 4) % PROGRAM_LOCK_STRIPES];
}

fcl_context fcl_context_lock(fcl_context ctx)
{
    if (ctx)
        pthread_mutex_lock(&ctx->lock);
    return ctx;
}

void fcl_context_unlock(fcl_context *held)
{
    if (*held)
        pthread_mutex_unlock(&(*held)->lock);
}

/* Fills the context's capabilities and the disk cache folder. On failure the message is moved
 * to the thread's context-free slot (the context is gone). */
static fcl_status finish_create(fcl_context ctx, fcl_context *out)
{
    fcl_status s = fcl_query_device_info(ctx);
    if (s == FCL_SUCCESS && !ctx->queue) {
        cl_int err;
        ctx->queue = clCreateCommandQueue(ctx->cl_ctx, ctx->device, CL_QUEUE_PROFILING_ENABLE, &err);
        if (err != CL_SUCCESS)
            s = fcl_fail_cl(ctx, err, "clCreateCommandQueue");
    }
    if (s != FCL_SUCCESS) {
        fcl_fail(NULL, s, "%s", fcl_last_error(ctx));
        fcl_context_release(ctx);
        return s;
    }
    ctx->cache_dir = fcl_disk_cache_resolve_dir();
    ctx->programs_on_disk = ctx->cache_dir && fcl_programs_on_disk(ctx->info.platform_name);
    *out = ctx;
    return FCL_SUCCESS;
}

fcl_status fcl_context_create(const char *selector, fcl_context *out)
{
    if (!out)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_context_create: out is NULL");
    *out = NULL;
    fcl_device_choice choice;
    fcl_status s = fcl_select_device(selector, &choice);
    if (s != FCL_SUCCESS)
        return s;
    fcl_context ctx = new_context();
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_OUT_OF_MEMORY, "out of host memory creating a context");
    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)choice.platform, 0};
    ctx->platform = choice.platform;
    ctx->device = choice.device;
    ctx->cl_ctx = clCreateContext(props, 1, &choice.device, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        pthread_mutex_destroy(&ctx->lock);
        free(ctx);
        return fcl_fail_cl(NULL, err, "clCreateContext");
    }
    return finish_create(ctx, out);
}

/* Whether `device` is one of cl_ctx's devices (0 also when cl_ctx cannot be queried). */
static int context_has_device(cl_context cl_ctx, cl_device_id device)
{
    size_t bytes = 0;
    if (clGetContextInfo(cl_ctx, CL_CONTEXT_DEVICES, 0, NULL, &bytes) != CL_SUCCESS || bytes == 0)
        return 0;
    cl_device_id *devs = malloc(bytes);
    int found = 0;
    if (devs && clGetContextInfo(cl_ctx, CL_CONTEXT_DEVICES, bytes, devs, NULL) == CL_SUCCESS)
        for (size_t i = 0; i < bytes / sizeof *devs && !found; i++)
            found = devs[i] == device;
    free(devs);
    return found;
}

fcl_status fcl_context_create_from_cl(cl_context cl_ctx, cl_device_id device, cl_command_queue queue,
                                      fcl_context *out)
{
    if (!out)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_context_create_from_cl: out is NULL");
    *out = NULL;
    if (!cl_ctx || !device)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_context_create_from_cl: %s is NULL",
                        !cl_ctx ? "cl_ctx" : "device");
    cl_platform_id platform;
    cl_int err = clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(NULL, err, "clGetDeviceInfo(CL_DEVICE_PLATFORM) on the given device");
    if (!context_has_device(cl_ctx, device))
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_context_create_from_cl: device is not a device of cl_ctx "
                        "(or cl_ctx is not a valid context)");
    if (queue) {
        cl_device_id qdev;
        cl_context qctx;
        cl_command_queue_properties qprops;
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL);
        err |= clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
        err |= clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof qprops, &qprops, NULL);
        if (err != CL_SUCCESS)
            return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_context_create_from_cl: queue is not a valid command queue");
        if (qctx != cl_ctx)
            return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_context_create_from_cl: queue belongs to another "
                            "context than cl_ctx");
        if (qdev != device)
            return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_context_create_from_cl: queue belongs to another device");
        if (qprops & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
            return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_context_create_from_cl: queue must be in-order");
    }
    fcl_context ctx = new_context();
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_OUT_OF_MEMORY, "out of host memory creating a context");
    clRetainContext(cl_ctx);
    clRetainDevice(device);
    if (queue)
        clRetainCommandQueue(queue);
    ctx->cl_ctx = cl_ctx;
    ctx->device = device;
    ctx->queue = queue;
    ctx->platform = platform;
    return finish_create(ctx, out);
}

/* Releases the context's compiled programs and their kernels. */
static void release_programs(fcl_context ctx)
{
    fcl_program_entry *e = ctx->programs;
    while (e) {
        fcl_program_entry *next = e->next;
        for (int i = 0; i < e->n_kernels; i++) {
            clReleaseKernel(e->kernels[i]);
            free(e->kernel_names[i]);
        }
        clReleaseProgram(e->program);
        free(e->key);
        free(e);
        e = next;
    }
    ctx->programs = NULL;
}

void fcl_context_release(fcl_context ctx)
{
    if (!ctx)
        return;
    if (ctx->queue) {
        clFinish(ctx->queue);
        clReleaseCommandQueue(ctx->queue);
    }
    pthread_mutex_lock(fcl_device_program_lock(ctx->device));
    release_programs(ctx);
    pthread_mutex_unlock(fcl_device_program_lock(ctx->device));
    fcl_scratch_release(ctx);
    if (ctx->cl_ctx)
        clReleaseContext(ctx->cl_ctx);
    if (ctx->device)
        clReleaseDevice(ctx->device);
    free(ctx->cache_dir);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

fcl_status fcl_finish(fcl_context ctx)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_finish: ctx is NULL");
    fcl_clear_error(ctx);
    cl_int err = clFinish(ctx->queue); /* without the lock: other threads may enqueue meanwhile */
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "clFinish");
}

fcl_status fcl_context_device_info(fcl_context ctx, fcl_device_info *out)
{
    if (!ctx || !out)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_context_device_info: %s is NULL", !ctx ? "ctx" : "out");
    *out = ctx->info;
    return FCL_SUCCESS;
}

fcl_status fcl_context_cache_stats(fcl_context ctx, fcl_cache_stats *out)
{
    FCL_LOCK(ctx);
    if (!ctx || !out)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_context_cache_stats: %s is NULL", !ctx ? "ctx" : "out");
    *out = ctx->stats;
    return FCL_SUCCESS;
}

const char *fcl_context_cache_dir(fcl_context ctx) { return ctx ? ctx->cache_dir : NULL; }
cl_context fcl_context_cl_context(fcl_context ctx) { return ctx ? ctx->cl_ctx : NULL; }
cl_device_id fcl_context_cl_device(fcl_context ctx) { return ctx ? ctx->device : NULL; }
cl_command_queue fcl_context_cl_queue(fcl_context ctx) { return ctx ? ctx->queue : NULL; }
