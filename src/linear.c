/* The projection GEMM (cl/linear.cl): weight checks, variant choice and launch. */
#include "linear.h"
#include "op_checks.h"

#include <stdio.h>

#define LINEAR_TILE 16

fcl_status fcl_check_weight(fcl_context ctx, const char *op, const char *name, const fcl_weight *w, int64_t N,
                            int64_t K, fcl_dtype act)
{
    char what[32];
    if (!w)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
    snprintf(what, sizeof what, "%s.w", name);
    fcl_status s = fcl_check_tensor(ctx, op, w->w, what, 2);
    if (s != FCL_SUCCESS)
        return s;
    const fcl_dtype dt = w->w->dtype;
    if (dt != FCL_F32 && dt != FCL_F16 && dt != FCL_BF16 && dt != FCL_I8)
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s dtype %s is not f32, f16, bf16 or i8", op, what,
                        fcl_dtype_name(dt));
    const int64_t shape[2] = {N, K};
    if (!fcl_same_shape(w->w, shape))
        return fcl_shape_error(ctx, op, what, w->w, "[N, K] =", shape, 2);
    snprintf(what, sizeof what, "%s.scale", name);
    if (dt == FCL_I8 && !w->scale)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s is NULL; i8 weights need an f32 scale per output row",
                        op, what);
    if (dt != FCL_I8 && w->scale)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s is given for %s weights (only i8 weights take one)", op,
                        what, fcl_dtype_name(dt));
    if (w->scale) {
        if ((s = fcl_check_tensor(ctx, op, w->scale, what, 1)))
            return s;
        if (w->scale->dtype != FCL_F32)
            return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s dtype %s must be f32", op, what,
                            fcl_dtype_name(w->scale->dtype));
        if (w->scale->shape[0] != N)
            return fcl_shape_error(ctx, op, what, w->scale, "[N] =", shape, 1);
    }
    snprintf(what, sizeof what, "%s.bias", name);
    if (w->bias) {
        if ((s = fcl_check_tensor(ctx, op, w->bias, what, 1)))
            return s;
        if (w->bias->dtype != act)
            return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s dtype %s differs from the activations' %s", op, what,
                            fcl_dtype_name(w->bias->dtype), fcl_dtype_name(act));
        if (w->bias->shape[0] != N)
            return fcl_shape_error(ctx, op, what, w->bias, "[N] =", shape, 1);
    }
    if (N > INT32_MAX / 2 || K > INT32_MAX / 2)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: %s of %lld x %lld beyond the supported range", op, name,
                        (long long)N, (long long)K);
    return FCL_SUCCESS;
}

fcl_status fcl_linear_enqueue(fcl_context ctx, fcl_tensor X, const fcl_weight *w, fcl_tensor Y, cl_event *event)
{
    static const char *const sources[] = {"common", "linear"};
    const fcl_dtype wdt = w->w->dtype;
    char opts[128];
    snprintf(opts, sizeof opts, "-DFCL_DTYPE=%d -DW_DTYPE=%d -DHAS_BIAS=%d -DTILE=%d", (int)X->dtype,
             wdt == FCL_I8 ? 3 : (int)wdt, w->bias != NULL, LINEAR_TILE);
    cl_kernel k;
    fcl_status s = fcl_get_kernel(ctx, sources, 2, opts, "linear", &k);
    if (s != FCL_SUCCESS)
        return s;
    const cl_mem dummy = Y->buffer; /* absent scale / bias: never read */
    const cl_mem bufs[5] = {X->buffer, w->w->buffer, w->scale ? w->scale->buffer : dummy,
                            w->bias ? w->bias->buffer : dummy, Y->buffer};
    const int64_t M = X->shape[0], K = X->shape[1], N = Y->shape[1];
    const cl_int ints[3] = {(cl_int)M, (cl_int)N, (cl_int)K};
    const cl_long longs[10] = {X->offset, X->strides[0], w->w->offset, w->w->strides[0], Y->offset, Y->strides[0],
                               w->bias ? w->bias->offset : 0, w->bias ? w->bias->strides[0] : 0,
                               w->scale ? w->scale->offset : 0, w->scale ? w->scale->strides[0] : 0};
    cl_int err = CL_SUCCESS;
    cl_uint arg = 0;
    for (int i = 0; i < 5 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_mem), &bufs[i]);
    for (int i = 0; i < 3 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_int), &ints[i]);
    for (int i = 0; i < 10 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_long), &longs[i]);
    const size_t t = LINEAR_TILE;
    const size_t global[2] = {((size_t)N + t - 1) / t * t, ((size_t)M + t - 1) / t * t}, local[2] = {t, t};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, k, 2, NULL, global, local, 0, NULL, event);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the projection kernel");
}
