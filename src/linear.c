/* The projection GEMM (cl/linear.cl): weight checks, variant choice and launch. */
#include "linear.h"
#include "op_checks.h"
#include "tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef FLASHCL_HAVE_CLBLAST
#include <clblast_c.h>
#endif

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

static const char *const linear_sources[] = {"common", "linear"};

/* The program of cl/linear.cl for activations `act`, weights `wdt`, with or without bias. */
static fcl_status linear_kernel(fcl_context ctx, fcl_dtype act, fcl_dtype wdt, int bias, const char *name,
                                cl_kernel *k)
{
    char opts[128];
    snprintf(opts, sizeof opts, "-DFCL_DTYPE=%d -DW_DTYPE=%d -DHAS_BIAS=%d -DTILE=%d", (int)act,
             wdt == FCL_I8 ? 3 : (int)wdt, bias, LINEAR_TILE);
    return fcl_get_kernel(ctx, linear_sources, 2, opts, name, k);
}

const char *fcl_projection_path(fcl_context ctx, fcl_dtype act, fcl_dtype weight)
{
    if (!ctx)
        return NULL;
#ifdef FLASHCL_HAVE_CLBLAST
    const char *env = getenv("FLASHCL_GEMM");
    const int own = env && strcmp(env, "own") == 0;
    /* CLBlast's kernels are not split for loop-capped devices (llvmpipe): flashcl's there */
    if (!own && fcl_device_loop_limit(ctx) == 0 && act == weight) {
        if (act == FCL_F32)
            return "clblast-sgemm";
        if (act == FCL_F16 && ctx->info.has_fp16)
            return "clblast-hgemm";
    }
#else
    (void)act;
    (void)weight;
#endif
    return "flashcl";
}

#ifdef FLASHCL_HAVE_CLBLAST
/* Y = X W^T through CLBlast (row-major, W transposed), then the bias kernel when there is one. */
static fcl_status clblast_linear(fcl_context ctx, fcl_tensor X, const fcl_weight *w, fcl_tensor Y, cl_event *event)
{
    const size_t M = (size_t)X->shape[0], K = (size_t)X->shape[1], N = (size_t)Y->shape[1];
    cl_event *ev = w->bias ? NULL : event;
    CLBlastStatusCode st;
    if (X->dtype == FCL_F32)
        st = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, M, N, K, 1.0f, X->buffer,
                          (size_t)X->offset, (size_t)X->strides[0], w->w->buffer, (size_t)w->w->offset,
                          (size_t)w->w->strides[0], 0.0f, Y->buffer, (size_t)Y->offset, (size_t)Y->strides[0],
                          &ctx->queue, ev);
    else
        st = CLBlastHgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, M, N, K, 0x3C00 /* 1 */,
                          X->buffer, (size_t)X->offset, (size_t)X->strides[0], w->w->buffer, (size_t)w->w->offset,
                          (size_t)w->w->strides[0], 0 /* 0 */, Y->buffer, (size_t)Y->offset, (size_t)Y->strides[0],
                          &ctx->queue, ev);
    if (st != CLBlastSuccess)
        return fcl_fail(ctx, FCL_ERR_OPENCL, "CLBlast %s failed with status %d", X->dtype == FCL_F32 ? "SGEMM" : "HGEMM",
                        (int)st);
    if (!w->bias)
        return FCL_SUCCESS;
    cl_kernel k;
    fcl_status s = linear_kernel(ctx, X->dtype, X->dtype, 1, "linear_bias", &k);
    if (s != FCL_SUCCESS)
        return s;
    const cl_int ints[2] = {(cl_int)M, (cl_int)N};
    const cl_long longs[4] = {Y->offset, Y->strides[0], w->bias->offset, w->bias->strides[0]};
    cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &Y->buffer);
    if (err == CL_SUCCESS)
        err = clSetKernelArg(k, 1, sizeof(cl_mem), &w->bias->buffer);
    for (cl_uint i = 0; i < 2 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, 2 + i, sizeof(cl_int), &ints[i]);
    for (cl_uint i = 0; i < 4 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, 4 + i, sizeof(cl_long), &longs[i]);
    const size_t global[2] = {(N + 15) / 16 * 16, M}, local[2] = {16, 1};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, k, 2, NULL, global, local, 0, NULL, event);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the projection bias kernel");
}
#endif

fcl_status fcl_linear_enqueue(fcl_context ctx, fcl_tensor X, const fcl_weight *w, fcl_tensor Y, cl_event *event)
{
    const fcl_dtype wdt = w->w->dtype;
#ifdef FLASHCL_HAVE_CLBLAST
    if (strncmp(fcl_projection_path(ctx, X->dtype, wdt), "clblast", 7) == 0)
        return clblast_linear(ctx, X, w, Y, event);
#endif
    cl_kernel k;
    fcl_status s = linear_kernel(ctx, X->dtype, wdt, w->bias != NULL, "linear", &k);
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
