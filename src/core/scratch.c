/* SPDX-License-Identifier: Apache-2.0 */
/* The context's scratch pool: grow-only device buffers kept across calls. */
#include "core/internal.h"

cl_mem fcl_scratch_buffer(fcl_context ctx, int slot, uint64_t bytes, fcl_status *s)
{
    if ((*s = fcl_check_host_size(ctx, "scratch buffer size", bytes)) != FCL_SUCCESS)
        return NULL;
    if (bytes == 0)
        bytes = 1;
    if (ctx->scratch[slot] && ctx->scratch_bytes[slot] >= bytes)
        return ctx->scratch[slot];
    if (ctx->scratch[slot])
        clReleaseMemObject(ctx->scratch[slot]); /* freed once the commands using it complete */
    ctx->scratch[slot] = NULL;
    ctx->scratch_bytes[slot] = 0;
    if (bytes > ctx->info.max_alloc_bytes) { /* clCreateBuffer's CL_INVALID_BUFFER_SIZE: still memory */
        *s = fcl_fail(ctx, FCL_ERR_OUT_OF_MEMORY, "scratch of %llu bytes exceeds the device's largest allocation "
                      "(%llu bytes)", (unsigned long long)bytes, (unsigned long long)ctx->info.max_alloc_bytes);
        return NULL;
    }
    cl_int err;
    cl_mem m = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, (size_t)bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        *s = fcl_fail_cl(ctx, err, "clCreateBuffer (scratch)");
        return NULL;
    }
    ctx->scratch[slot] = m;
    ctx->scratch_bytes[slot] = (size_t)bytes;
    return m;
}

void fcl_scratch_release(fcl_context ctx)
{
    for (int i = 0; i < FCL_SCRATCH_SLOTS; i++) {
        if (ctx->scratch[i])
            clReleaseMemObject(ctx->scratch[i]);
        ctx->scratch[i] = NULL;
        ctx->scratch_bytes[i] = 0;
    }
}
