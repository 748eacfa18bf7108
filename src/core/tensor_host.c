/* SPDX-License-Identifier: Apache-2.0 */
/* Tensors over the caller's host memory (CL_MEM_USE_HOST_PTR): wrapping, syncing back, and the
 * alignment at which implementations use such memory in place. */
#include "core/internal.h"

#include <stdio.h>
#include <string.h>

size_t fcl_host_alignment(fcl_context ctx)
{
    if (!ctx)
        return 0;
    cl_bool unified = CL_FALSE;
    cl_uint align_bits = 0;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL) != CL_SUCCESS ||
        !unified)
        return 0;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL) !=
        CL_SUCCESS)
        return 0;
    return align_bits >= 8 ? align_bits / 8 : 1;
}

fcl_status fcl_tensor_wrap_host(fcl_context ctx, void *host, size_t bytes, fcl_dtype dtype, int ndim,
                                const int64_t *shape, const int64_t *strides, int64_t offset, fcl_tensor *out)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_wrap_host: ctx is NULL");
    FCL_LOCK(ctx);
    fcl_clear_error(ctx);
    if (out)
        *out = NULL;
    if (!out || !host)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_wrap_host: %s is NULL", !out ? "out" : "host");
    if (bytes == 0)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_wrap_host: bytes is 0");
    const size_t es = fcl_dtype_size(dtype);
    if (es == 0)
        return fcl_fail(ctx, FCL_ERR_DTYPE, "fcl_tensor_wrap_host: unknown dtype %d", (int)dtype);
    if ((uintptr_t)host % es)
        return fcl_fail(ctx, FCL_ERR_LAYOUT, "fcl_tensor_wrap_host: host address %p is not aligned to the %zu bytes "
                        "of a %s element", host, es, fcl_dtype_name(dtype));
    cl_int err;
    cl_mem buf = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, host, &err);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "fcl_tensor_wrap_host: clCreateBuffer(CL_MEM_USE_HOST_PTR)");
    fcl_status s = fcl_tensor_wrap(ctx, buf, dtype, ndim, shape, strides, offset, out);
    clReleaseMemObject(buf); /* the tensor holds its own reference */
    if (s != FCL_SUCCESS) {
        /* fcl_tensor_wrap named itself; name this call instead */
        char msg[FCL_ERROR_MAX];
        const char *prefix = "fcl_tensor_wrap:";
        snprintf(msg, sizeof msg, "%s", fcl_last_error(ctx));
        const size_t n = strlen(prefix);
        return fcl_fail(ctx, s, "fcl_tensor_wrap_host:%s", strncmp(msg, prefix, n) == 0 ? msg + n : msg);
    }
    return FCL_SUCCESS;
}

fcl_status fcl_tensor_sync_host(fcl_tensor t)
{
    if (!t)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_sync_host: tensor is NULL");
    fcl_context ctx = t->ctx;
    FCL_LOCK(ctx);
    fcl_clear_error(ctx);
    cl_mem_flags flags = 0;
    cl_int err = clGetMemObjectInfo(t->buffer, CL_MEM_FLAGS, sizeof flags, &flags, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "fcl_tensor_sync_host: clGetMemObjectInfo");
    if (!(flags & CL_MEM_USE_HOST_PTR))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_sync_host: the tensor's buffer is not over host "
                        "memory (make it with fcl_tensor_wrap_host)");
    void *p = clEnqueueMapBuffer(ctx->queue, t->buffer, CL_TRUE, CL_MAP_READ, 0, t->buffer_bytes, 0, NULL, NULL,
                                 &err);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "fcl_tensor_sync_host: clEnqueueMapBuffer");
    err = clEnqueueUnmapMemObject(ctx->queue, t->buffer, p, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clFinish(ctx->queue);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "fcl_tensor_sync_host: unmapping the buffer");
    return FCL_SUCCESS;
}
