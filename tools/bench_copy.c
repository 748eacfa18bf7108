/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench ops "copy" and "read", the memory-bandwidth ceilings decode is read against, on
 * the flashcl context's queue: clEnqueueCopyBuffer between two device buffers (GB/s count the
 * bytes read and written, 2 x the copy's size), and a kernel that only reads a buffer (sums it
 * in float4 loads, grid-stride, one float written per work-item: GB/s count the bytes read),
 * which is what decode does. */
#include "bench.h"

#include <math.h>

/* Prints a ceiling's line (JSON with env->json): `moved` bytes over t's wall and event times;
 * `what` (a format taking the MiB of `bytes`) says what was timed. */
static void report_ceiling(const bench_env *env, const char *op, const char *what, size_t bytes, double moved,
                           const bench_timing *t)
{
    const double gbps = moved / (t->ms_wall * 1e-3) * 1e-9, gbps_event = moved / (t->ms_event * 1e-3) * 1e-9;
    if (env->json) {
        printf("{\"op\":\"%s\",\"device\":\"%s\",\"bytes\":%zu,\"reps\":%d,\"ms\":%.6g,\"gbps\":%.6g,"
               "\"gbps_event\":%.6g}\n", op, env->info.name, bytes, t->reps, t->ms_wall, isfinite(gbps) ? gbps : 0.0,
               isfinite(gbps_event) ? gbps_event : 0.0);
    } else {
        printf("# %s bandwidth (", op);
        printf(what, bytes >> 20);
        printf("): %.1f GB/s wall, %.1f GB/s event\n", gbps, gbps_event);
    }
    fflush(stdout);
}

typedef struct copy_call {
    cl_command_queue q;
    cl_mem src, dst;
    size_t bytes;
} copy_call;

static fcl_status enqueue_copy(void *arg, cl_event *ev)
{
    const copy_call *c = arg;
    return clEnqueueCopyBuffer(c->q, c->src, c->dst, 0, 0, c->bytes, 0, NULL, ev) == CL_SUCCESS ? FCL_SUCCESS
                                                                                                : FCL_ERR_OPENCL;
}

void bench_copy(const bench_env *env, size_t bytes)
{
    cl_context cl = fcl_context_cl_context(env->ctx);
    copy_call call = {fcl_context_cl_queue(env->ctx), NULL, NULL, bytes};
    cl_int err = CL_SUCCESS;
    bench_timing t = {0, NAN, NAN, NAN, NAN, 0.0};
    if ((uint64_t)bytes <= env->info.max_alloc_bytes && 2 * (uint64_t)bytes <= env->info.global_mem_bytes) {
        call.src = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
        if (err == CL_SUCCESS)
            call.dst = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
        /* the source's contents do not matter; fill it so no driver skips the copy */
        const cl_uint pattern = 0x5A5A5A5Au;
        if (err == CL_SUCCESS)
            err = clEnqueueFillBuffer(call.q, call.src, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL);
        if (err == CL_SUCCESS && bench_time(env, enqueue_copy, &call, &t) != FCL_SUCCESS)
            t.ms_wall = NAN;
    }
    report_ceiling(env, "copy", "clEnqueueCopyBuffer %zu MiB, read + write", bytes, 2.0 * (double)bytes, &t);
    if (call.src)
        clReleaseMemObject(call.src);
    if (call.dst)
        clReleaseMemObject(call.dst);
}

/* Work-item i sums float4 elements i * first + k * step of src, k = 0 .. per - 1 (4 chains):
 * GPUs stride across the work-items (first 1, step n: neighbours read neighbours), CPUs read a
 * contiguous run each (first per, step 1: a stream per core for the prefetchers). */
static const char *read_source =
    "__kernel void read_sum(__global const float4 *src, __global float *out, const long first,\n"
    "                       const long step, const long per)\n"
    "{\n"
    "    const long base = get_global_id(0) * first;\n"
    "    float4 s0 = (float4)(0.0f), s1 = s0, s2 = s0, s3 = s0;\n"
    "    for (long k = 0; k < per; k += 4) {\n"
    "        s0 += src[base + k * step];\n"
    "        s1 += src[base + (k + 1) * step];\n"
    "        s2 += src[base + (k + 2) * step];\n"
    "        s3 += src[base + (k + 3) * step];\n"
    "    }\n"
    "    const float4 s = s0 + s1 + s2 + s3;\n"
    "    out[get_global_id(0)] = s.x + s.y + s.z + s.w;\n"
    "}\n";

typedef struct read_call {
    cl_command_queue q;
    cl_kernel k;
    size_t global, local;
} read_call;

static fcl_status enqueue_read(void *arg, cl_event *ev)
{
    const read_call *c = arg;
    return clEnqueueNDRangeKernel(c->q, c->k, 1, NULL, &c->global, &c->local, 0, NULL, ev) == CL_SUCCESS
               ? FCL_SUCCESS
               : FCL_ERR_OPENCL;
}

void bench_read(const bench_env *env, size_t bytes)
{
    cl_context cl = fcl_context_cl_context(env->ctx);
    cl_device_id dev = fcl_context_cl_device(env->ctx);
    /* GPUs: 65536 work-items in groups of 64; CPUs: 8 single work-items per compute unit */
    const size_t items = env->is_gpu ? 65536 : 8 * (size_t)(env->info.compute_units ? env->info.compute_units : 1);
    read_call call = {fcl_context_cl_queue(env->ctx), NULL, items, env->is_gpu ? 64 : 1};
    cl_int err = CL_SUCCESS;
    cl_mem src = NULL, out = NULL;
    cl_program prog = NULL;
    bench_timing t = {0, NAN, NAN, NAN, NAN, 0.0};
    if ((uint64_t)bytes <= env->info.max_alloc_bytes && (uint64_t)bytes < env->info.global_mem_bytes) {
        src = clCreateBuffer(cl, CL_MEM_READ_ONLY, bytes, NULL, &err);
        if (err == CL_SUCCESS)
            out = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, items * sizeof(float), NULL, &err);
        const cl_uint pattern = 0x3F800000u; /* 1.0f: the sums stay finite */
        if (err == CL_SUCCESS)
            err = clEnqueueFillBuffer(call.q, src, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            prog = clCreateProgramWithSource(cl, 1, &read_source, NULL, &err);
        if (err == CL_SUCCESS)
            err = clBuildProgram(prog, 1, &dev, "", NULL, NULL);
        if (err == CL_SUCCESS)
            call.k = clCreateKernel(prog, "read_sum", &err);
        const cl_long per = (cl_long)(bytes / 16 / items) / 4 * 4; /* float4s per work-item */
        const cl_long first = env->is_gpu ? 1 : per, step = env->is_gpu ? (cl_long)items : 1;
        bytes = (size_t)per * items * 16; /* what is read */
        if (err == CL_SUCCESS)
            err = clSetKernelArg(call.k, 0, sizeof src, &src);
        if (err == CL_SUCCESS)
            err = clSetKernelArg(call.k, 1, sizeof out, &out);
        if (err == CL_SUCCESS)
            err = clSetKernelArg(call.k, 2, sizeof first, &first);
        if (err == CL_SUCCESS)
            err = clSetKernelArg(call.k, 3, sizeof step, &step);
        if (err == CL_SUCCESS)
            err = clSetKernelArg(call.k, 4, sizeof per, &per);
        if (err == CL_SUCCESS && bench_time(env, enqueue_read, &call, &t) != FCL_SUCCESS)
            t.ms_wall = NAN;
    }
    report_ceiling(env, "read", "a kernel summing %zu MiB, bytes read", bytes, (double)bytes, &t);
    if (call.k)
        clReleaseKernel(call.k);
    if (prog)
        clReleaseProgram(prog);
    if (src)
        clReleaseMemObject(src);
    if (out)
        clReleaseMemObject(out);
}
