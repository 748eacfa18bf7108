/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench op "copy": clEnqueueCopyBuffer between two device buffers on the flashcl
 * context's queue, the memory-bandwidth ceiling decode is read against. GB/s count the bytes
 * read and written (2 x the copy's size). */
#include "bench.h"

#include <math.h>

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
    const double gbps = 2.0 * (double)bytes / (t.ms_wall * 1e-3) * 1e-9;
    const double gbps_event = 2.0 * (double)bytes / (t.ms_event * 1e-3) * 1e-9;
    if (env->json)
        printf("{\"op\":\"copy\",\"device\":\"%s\",\"bytes\":%zu,\"reps\":%d,\"ms\":%.6g,\"gbps\":%.6g,"
               "\"gbps_event\":%.6g}\n", env->info.name, bytes, t.reps, t.ms_wall, isfinite(gbps) ? gbps : 0.0,
               isfinite(gbps_event) ? gbps_event : 0.0);
    else
        printf("# copy bandwidth (clEnqueueCopyBuffer %zu MiB, read + write): %.1f GB/s wall, %.1f GB/s event\n",
               bytes >> 20, gbps, gbps_event);
    fflush(stdout);
    if (call.src)
        clReleaseMemObject(call.src);
    if (call.dst)
        clReleaseMemObject(call.dst);
}
