/* SPDX-License-Identifier: Apache-2.0 */
/* The projection GEMM (cl/portable/linear.cl): weight checks, variant choice and launch (the
 * tensor-core GEMMs of linear_wgmma.c and linear_mma.c first, where they apply). */
#include "gemm/linear.h"

#include "core/tensor_checks.h"
#include "gemm/gemm_job.h"
#include "gemm/linear_mma.h"
#include "gemm/linear_wgmma.h"
#include "programs/program_cache.h"
#include "tuning/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef FLASHCL_HAVE_CLBLAST
#include <clblast_c.h>
#endif

#define CPU_ROWS 8  /* one-work-item blocks (CPUs): rows x columns of C per work-item */
#define CPU_COLS 32

/* Rows of column_sums' work-groups (32 columns each): on GPUs as many as the work-group holds,
 * up to 32 (loads in flight); 1 on CPUs (the columns are the SIMD lanes). */
static int column_sum_rows(fcl_context ctx)
{
    if (!fcl_gemm_tiled(ctx))
        return 1;
    const size_t fit = ctx->info.max_work_group_size / 32;
    return fit >= 32 ? 32 : fit >= 1 ? (int)fit : 1;
}


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

/* The program of cl/portable/linear.cl for a GEMM's dtypes, epilogue and tiles (the tiled variant's
 * load directions from the operands' k strides). */
static fcl_status linear_kernel(fcl_context ctx, const gemm_job *g, const fcl_gemm_tiles *t, const char *name,
                                cl_kernel *k)
{
    char opts[320];
    snprintf(opts, sizeof opts,
             "-DFCL_DTYPE=%d -DW_DTYPE=%d -DC_F32=%d -DSCALE_ON=%d -DHAS_BIAS=%d -DACCUMULATE=%d -DONE_ITEM=%d "
             "-DROWS=%d -DCOLS=%d -DTM=%d -DTN=%d -DTK=%d -DWM=%d -DWN=%d -DVW=%d -DA_K1=%d -DB_K1=%d -DCS_ROWS=%d",
             (int)g->a_dtype, g->b_dtype == FCL_I8 ? 3 : (int)g->b_dtype, g->c_dtype == FCL_F32, g->scale_on,
             g->bias != NULL, g->accumulate, !fcl_gemm_tiled(ctx), CPU_ROWS, CPU_COLS, t->tile_m, t->tile_n, t->tile_k,
             t->wpt_m, t->wpt_n, t->vw, g->a_sk == 1, g->b_sk == 1, column_sum_rows(ctx));
    return fcl_get_kernel(ctx, linear_sources, 2, opts, name, k);
}

/* Tile elements of A (TM x TK) or B (TK x TN) that each work-item of the tiled kernel loads. */
static long tile_loads(const fcl_gemm_tiles *t, int rows)
{
    const long items = (long)(t->tile_m / t->wpt_m) * (t->tile_n / t->wpt_n);
    return ((long)rows * t->tile_k + items - 1) / items;
}

/* Loop iterations of a tiled-kernel work-item (counted generously, as if no loop were
 * unrolled): per K slice, and outside the slice loop. */
static void gemm_loop_counts(const fcl_gemm_tiles *t, long *per_slice, long *fixed)
{
    const long loads = tile_loads(t, t->tile_m) + tile_loads(t, t->tile_n), wm = t->wpt_m, wn = t->wpt_n;
    *per_slice = 2 * loads + (long)t->tile_k * (1 + wm / t->vw + wn / t->vw + wm + wm * wn) + 1;
    *fixed = loads + 2 * (wm + wm * wn) + wn + 8;
}

int fcl_gemm_rows_aligned(cl_long off, cl_long stride, int size, int bytes)
{
    return (off * size) % bytes == 0 && (stride * size) % bytes == 0;
}

cl_int fcl_gemm_set_args(cl_kernel k, const gemm_job *g)
{
    const cl_mem dummy = g->c; /* absent scale / bias: never read */
    const cl_mem bufs[5] = {g->a, g->b, g->scale ? g->scale->buffer : dummy, g->bias ? g->bias->buffer : dummy,
                            g->c};
    const cl_int ints[3] = {(cl_int)g->M, (cl_int)g->N, (cl_int)g->K};
    const cl_long s_s = g->scale ? g->scale->strides[0] : 0;
    const cl_long longs[13] = {g->a_off, g->a_sm, g->a_sk, g->b_off, g->b_sk, g->b_sn, g->c_off, g->c_sm, g->c_sn,
                               g->bias ? g->bias->offset : 0, g->bias ? g->bias->strides[0] : 0,
                               g->scale ? g->scale->offset + g->scale_k0 * s_s : 0, s_s};
    cl_int err = CL_SUCCESS;
    cl_uint arg = 0;
    for (int i = 0; i < 5 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_mem), &bufs[i]);
    for (int i = 0; i < 3 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_int), &ints[i]);
    for (int i = 0; i < 13 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_long), &longs[i]);
    return err;
}

fcl_status fcl_gemm_enqueue_blocks(fcl_context ctx, cl_kernel k, const gemm_job *g, size_t wg, int tile_m, int tile_n,
                                   const char *what, cl_event *event, int *done)
{
    size_t most = 0;
    cl_int err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof most, &most, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "clGetKernelWorkGroupInfo");
    if (most < wg) /* too many registers for this work-group: another kernel */
        return FCL_SUCCESS;
    const size_t local[2] = {wg, 1};
    const size_t global[2] = {((size_t)g->N + (size_t)tile_n - 1) / (size_t)tile_n * wg,
                              ((size_t)g->M + (size_t)tile_m - 1) / (size_t)tile_m};
    err = fcl_gemm_set_args(k, g);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, k, 2, NULL, global, local, 0, NULL, event);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, what);
    *done = 1;
    return FCL_SUCCESS;
}

/* One launch of the GEMM kernel for g. */
static fcl_status gemm_launch(fcl_context ctx, const gemm_job *g, const fcl_gemm_tiles *t, cl_event *event)
{
    cl_kernel k;
    fcl_status s = linear_kernel(ctx, g, t, "gemm", &k);
    if (s != FCL_SUCCESS)
        return s;
    cl_int err = fcl_gemm_set_args(k, g);
    size_t global[2], local[2];
    if (!fcl_gemm_tiled(ctx)) { /* CPUs: the one-work-item GEMM, loops along n vectorised by the compiler */
        global[0] = ((size_t)g->N + CPU_COLS - 1) / CPU_COLS;
        global[1] = ((size_t)g->M + CPU_ROWS - 1) / CPU_ROWS;
        local[0] = local[1] = 1;
    } else {
        local[0] = (size_t)(t->tile_n / t->wpt_n);
        local[1] = (size_t)(t->tile_m / t->wpt_m);
        global[0] = ((size_t)g->N + (size_t)t->tile_n - 1) / (size_t)t->tile_n * local[0];
        global[1] = ((size_t)g->M + (size_t)t->tile_m - 1) / (size_t)t->tile_m * local[1];
    }
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, k, 2, NULL, global, local, 0, NULL, event);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the projection GEMM");
}

/* Sets the arguments of a one-pass kernel of cl/portable/linear.cl (gemm_finish, column_sums,
 * weights_dequantize, linear_bias): its two buffers, two ints, then n_longs longs. */
static cl_int set_pass_args(cl_kernel k, cl_mem first, cl_mem second, const cl_int ints[2], const cl_long *longs,
                            cl_uint n_longs)
{
    cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &first);
    if (err == CL_SUCCESS)
        err = clSetKernelArg(k, 1, sizeof(cl_mem), &second);
    for (cl_uint i = 0; i < 2 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, 2 + i, sizeof(cl_int), &ints[i]);
    for (cl_uint i = 0; i < n_longs && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, 4 + i, sizeof(cl_long), &longs[i]);
    return err;
}

/* C = (accumulate ? C : 0) + T for g's C, T [M, N] F32 contiguous: the end of a K-split GEMM. */
static fcl_status gemm_finish(fcl_context ctx, const gemm_job *g, const fcl_gemm_tiles *t, cl_mem T,
                              cl_event *event)
{
    cl_kernel k;
    fcl_status s = linear_kernel(ctx, g, t, "gemm_finish", &k);
    if (s != FCL_SUCCESS)
        return s;
    const cl_int ints[2] = {(cl_int)g->M, (cl_int)g->N};
    const cl_long longs[3] = {g->c_off, g->c_sm, g->c_sn};
    cl_int err = set_pass_args(k, T, g->c, ints, longs, 3);
    const size_t global[2] = {((size_t)g->N + 15) / 16 * 16, (size_t)g->M}, local[2] = {16, 1};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, k, 2, NULL, global, local, 0, NULL, event);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the projection GEMM's last step");
}

/* Enqueues g: one launch, or under a loop cap (llvmpipe) launches over chunks of K that sum
 * into C when it is F32, else into an F32 temporary that gemm_finish adds to C (one rounding,
 * as in one launch). The bias goes with the first chunk. */
static fcl_status gemm_enqueue(fcl_context ctx, const gemm_job *g, cl_event *event)
{
    int done = 0;
    fcl_status s = fcl_gemm_wgmma_enqueue(ctx, g, event, &done);
    if (s == FCL_SUCCESS && !done)
        s = fcl_gemm_mma_enqueue(ctx, g, event, &done);
    if (s != FCL_SUCCESS || done)
        return s;
    const fcl_gemm_tiles t = fcl_tune_gemm(ctx);
    long per_slice, fixed;
    gemm_loop_counts(&t, &per_slice, &fixed);
    const long slices = !fcl_gemm_tiled(ctx) ? 0 : fcl_tiles_under_loop_cap(ctx, per_slice, fixed);
    if (slices < 0)
        return fcl_loop_cap_error(ctx, "projection GEMM", "K", per_slice, fixed);
    const int64_t kc = slices * t.tile_k;
    if (slices == 0 || g->K <= kc)
        return gemm_launch(ctx, g, &t, event);
    cl_mem T = NULL;
    gemm_job part = *g;
    if (g->c_dtype != FCL_F32) {
        T = fcl_scratch_buffer(ctx, FCL_SCRATCH_GEMM_PARTIAL, (uint64_t)(g->M * g->N) * sizeof(float), &s);
        if (!T)
            return s;
        part.c = T;
        part.c_dtype = FCL_F32;
        part.c_off = 0;
        part.c_sm = g->N;
        part.c_sn = 1;
        part.accumulate = 0;
    }
    for (int64_t k0 = 0; k0 < g->K && s == FCL_SUCCESS; k0 += kc) {
        part.K = g->K - k0 < kc ? g->K - k0 : kc;
        part.a_off = g->a_off + k0 * g->a_sk;
        part.b_off = g->b_off + k0 * g->b_sk;
        part.scale_k0 = g->scale_on == 2 ? g->scale_k0 + k0 : g->scale_k0;
        if (k0 > 0) {
            part.bias = NULL;
            part.accumulate = 1;
        }
        s = gemm_launch(ctx, &part, &t, !T && k0 + kc >= g->K ? event : NULL);
    }
    if (T && s == FCL_SUCCESS)
        s = gemm_finish(ctx, g, &t, T, event);
    return s;
}

const char *fcl_projection_path(fcl_context ctx, fcl_dtype act, fcl_dtype weight)
{
    FCL_LOCK(ctx);
    if (!ctx)
        return NULL;
    if (fcl_gemm_wgmma_usable(ctx, act, weight))
        return "nvidia-wgmma";
    if (fcl_gemm_mma_usable(ctx, act, weight))
        return "nvidia-mma";
#ifdef FLASHCL_HAVE_CLBLAST
    const char *env = getenv("FLASHCL_GEMM");
    const int own = env && strcmp(env, "own") == 0;
    /* CLBlast's kernels are not split for loop-capped devices (llvmpipe): flashcl's there */
    /* CLBlast's HGEMM accumulates in half precision, which flashcl's FP32-accumulation contract
     * rules out: F16 projections take flashcl's kernel on every device */
    if (!own && fcl_device_loop_limit(ctx) == 0 && act == FCL_F32 && weight == FCL_F32)
        return "clblast-sgemm";
#else
    (void)act;
    (void)weight;
#endif
    return "flashcl";
}

#ifdef FLASHCL_HAVE_CLBLAST
/* CLBlast takes row-major operands only with leading dimensions at least the row length (lda,
 * ldb >= K for X and the transposed W, ldc >= N for Y); flashcl's views may also repeat a row
 * (row stride 0) or overlap rows, which flashcl's own kernel takes. */
static int clblast_takes(fcl_tensor X, const fcl_weight *w, fcl_tensor Y)
{
    return X->strides[0] >= X->shape[1] && w->w->strides[0] >= w->w->shape[1] && Y->strides[0] >= Y->shape[1];
}

/* Y = X W^T through CLBlast's SGEMM (F32, row-major, W transposed), then the bias kernel when
 * there is one. */
static fcl_status clblast_linear(fcl_context ctx, fcl_tensor X, const fcl_weight *w, fcl_tensor Y, cl_event *event)
{
    const size_t M = (size_t)X->shape[0], K = (size_t)X->shape[1], N = (size_t)Y->shape[1];
    cl_event *ev = w->bias ? NULL : event;
    const CLBlastStatusCode st =
        CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, M, N, K, 1.0f, X->buffer,
                     (size_t)X->offset, (size_t)X->strides[0], w->w->buffer, (size_t)w->w->offset,
                     (size_t)w->w->strides[0], 0.0f, Y->buffer, (size_t)Y->offset, (size_t)Y->strides[0],
                     &ctx->queue, ev);
    if (st != CLBlastSuccess)
        return fcl_fail(ctx, FCL_ERR_OPENCL, "CLBlast SGEMM failed with status %d", (int)st);
    if (!w->bias)
        return FCL_SUCCESS;
    cl_kernel k;
    const gemm_job bias_prog = {.a_dtype = X->dtype, .b_dtype = X->dtype, .c_dtype = X->dtype, .bias = w->bias};
    const fcl_gemm_tiles t = fcl_tune_gemm(ctx);
    fcl_status s = linear_kernel(ctx, &bias_prog, &t, "linear_bias", &k);
    if (s != FCL_SUCCESS)
        return s;
    const cl_int ints[2] = {(cl_int)M, (cl_int)N};
    const cl_long longs[4] = {Y->offset, Y->strides[0], w->bias->offset, w->bias->strides[0]};
    cl_int err = set_pass_args(k, Y->buffer, w->bias->buffer, ints, longs, 4);
    const size_t global[2] = {(N + 15) / 16 * 16, M}, local[2] = {16, 1};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, k, 2, NULL, global, local, 0, NULL, event);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the projection bias kernel");
}
#endif

/* g (I8 B, K-contiguous) as its B converted to A's dtype in a scratch buffer (rows padded to 16
 * bytes) and the wgmma GEMM of that, the scale in its epilogue: the same products and sums; sets
 * *done, 0 when the wgmma GEMM does not take it or the buffer cannot be had (the caller then runs
 * g itself, which needs no copy). */
static fcl_status dequantized_linear(fcl_context ctx, const gemm_job *g, cl_event *event, int *done)
{
    const int64_t pitch = (g->K + 7) / 8 * 8;
    fcl_status s;
    cl_mem W16 = fcl_scratch_buffer(ctx, FCL_SCRATCH_GEMM_WEIGHTS, (uint64_t)(g->N * pitch) * 2, &s);
    if (!W16) { /* beyond the largest allocation, or its creation failed: its message is dropped */
        fcl_clear_error(ctx);
        return FCL_SUCCESS;
    }
    const gemm_job prog = {.a_dtype = g->a_dtype, .b_dtype = FCL_I8, .c_dtype = g->a_dtype};
    const fcl_gemm_tiles t = fcl_tune_gemm(ctx);
    cl_kernel k;
    if ((s = linear_kernel(ctx, &prog, &t, "weights_dequantize", &k)))
        return s;
    const cl_int ints[2] = {(cl_int)g->N, (cl_int)g->K};
    const cl_long longs[3] = {g->b_off, g->b_sn, pitch};
    cl_int err = set_pass_args(k, g->b, W16, ints, longs, 3);
    const size_t global[2] = {((size_t)(g->K + 7) / 8 + 63) / 64 * 64, (size_t)g->N}, local[2] = {64, 1};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, k, 2, NULL, global, local, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "enqueueing the weights' conversion");
    gemm_job h = *g;
    h.b = W16;
    h.b_dtype = g->a_dtype;
    h.b_off = 0;
    h.b_sn = pitch;
    return fcl_gemm_wgmma_enqueue(ctx, &h, event, done);
}

fcl_status fcl_linear_enqueue(fcl_context ctx, fcl_tensor X, const fcl_weight *w, fcl_tensor Y, cl_event *event)
{
#ifdef FLASHCL_HAVE_CLBLAST
    if (strncmp(fcl_projection_path(ctx, X->dtype, w->w->dtype), "clblast", 7) == 0 && clblast_takes(X, w, Y))
        return clblast_linear(ctx, X, w, Y, event);
#endif
    const gemm_job g = {.M = X->shape[0], .N = Y->shape[1], .K = X->shape[1], .a = X->buffer, .a_dtype = X->dtype,
                        .a_off = X->offset, .a_sm = X->strides[0], .a_sk = 1, .b = w->w->buffer,
                        .b_dtype = w->w->dtype, .b_off = w->w->offset, .b_sk = 1, .b_sn = w->w->strides[0],
                        .scale = w->scale, .scale_on = 1, .bias = w->bias, .c = Y->buffer, .c_dtype = Y->dtype,
                        .c_off = Y->offset, .c_sm = Y->strides[0], .c_sn = 1};
    if (g.b_dtype == FCL_I8 && g.a_dtype != FCL_F32) { /* long GEMMs: the weights converted first */
        const int64_t rows = fcl_tune_gemm_wgmma(ctx, FCL_WGMMA_I8_REGS).dequant_rows[g.a_dtype == FCL_BF16];
        int done = 0;
        fcl_status s = FCL_SUCCESS;
        if (rows > 0 && g.M >= rows && fcl_gemm_rows_aligned(g.a_off, g.a_sm, 2, 16) &&
            fcl_gemm_wgmma_usable(ctx, g.a_dtype, g.a_dtype))
            s = dequantized_linear(ctx, &g, event, &done);
        if (s != FCL_SUCCESS || done)
            return s;
    }
    return gemm_enqueue(ctx, &g, event);
}

fcl_status fcl_linear_grad_input(fcl_context ctx, fcl_tensor G, const fcl_weight *w, fcl_tensor Y, int accumulate)
{
    const gemm_job g = {.M = G->shape[0], .N = Y->shape[1], .K = G->shape[1], .a = G->buffer, .a_dtype = G->dtype,
                        .a_off = G->offset, .a_sm = G->strides[0], .a_sk = 1, .b = w->w->buffer,
                        .b_dtype = w->w->dtype, .b_off = w->w->offset, .b_sk = w->w->strides[0], .b_sn = 1,
                        .scale = w->scale, .scale_on = 2, .c = Y->buffer, .c_dtype = Y->dtype, .c_off = Y->offset,
                        .c_sm = Y->strides[0], .c_sn = 1, .accumulate = accumulate};
    return gemm_enqueue(ctx, &g, NULL);
}

fcl_status fcl_linear_grad_weight(fcl_context ctx, fcl_tensor G, fcl_tensor X, fcl_tensor dW)
{
    const gemm_job g = {.M = G->shape[1], .N = X->shape[1], .K = G->shape[0], .a = G->buffer, .a_dtype = G->dtype,
                        .a_off = G->offset, .a_sm = 1, .a_sk = G->strides[0], .b = X->buffer, .b_dtype = X->dtype,
                        .b_off = X->offset, .b_sk = X->strides[0], .b_sn = 1, .c = dW->buffer, .c_dtype = dW->dtype,
                        .c_off = dW->offset, .c_sm = dW->strides[0], .c_sn = 1, .accumulate = 1};
    return gemm_enqueue(ctx, &g, NULL);
}

/* One launch of column_sums: out[n] (+)= sum of G's rows m0 .. m0 + rows - 1, out F32 or G's
 * dtype at (off, stride). */
static fcl_status column_sums_launch(fcl_context ctx, fcl_tensor G, int64_t m0, int64_t rows, cl_mem out,
                                     fcl_dtype out_dtype, cl_long off, cl_long stride, int accumulate)
{
    const gemm_job prog = {.a_dtype = G->dtype, .b_dtype = G->dtype, .c_dtype = out_dtype, .accumulate = accumulate};
    const fcl_gemm_tiles t = fcl_tune_gemm(ctx);
    cl_kernel k;
    fcl_status s = linear_kernel(ctx, &prog, &t, "column_sums", &k);
    if (s != FCL_SUCCESS)
        return s;
    const cl_int ints[2] = {(cl_int)rows, (cl_int)G->shape[1]};
    const cl_long longs[4] = {G->offset + m0 * G->strides[0], G->strides[0], off, stride};
    cl_int err = set_pass_args(k, G->buffer, out, ints, longs, 4);
    const size_t group_rows = (size_t)column_sum_rows(ctx);
    const size_t global[2] = {((size_t)G->shape[1] + 31) / 32 * 32, group_rows}, local[2] = {32, group_rows};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, k, 2, NULL, global, local, 0, NULL, NULL);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the bias-gradient kernel");
}

fcl_status fcl_column_sums(fcl_context ctx, fcl_tensor G, fcl_tensor db)
{
    /* a work-item loops over every rows-th row: under a loop cap, launches over chunks of rows,
     * summed in db when it is F32, else in an F32 temporary added to db at the end (one rounding) */
    const int rows = column_sum_rows(ctx);
    const long cap = fcl_tiles_under_loop_cap(ctx, 1, 4 + rows);
    const int64_t M = G->shape[0], N = G->shape[1], chunk = cap > 0 && cap * rows < M ? cap * rows : M;
    if (chunk == M || db->dtype == FCL_F32) {
        fcl_status s = FCL_SUCCESS;
        for (int64_t m0 = 0; m0 < M && s == FCL_SUCCESS; m0 += chunk)
            s = column_sums_launch(ctx, G, m0, M - m0 < chunk ? M - m0 : chunk, db->buffer, db->dtype, db->offset,
                                   db->strides[0], 1);
        return s;
    }
    fcl_status s;
    cl_mem T = fcl_scratch_buffer(ctx, FCL_SCRATCH_BIAS_PARTIAL, (uint64_t)N * sizeof(float), &s);
    if (!T)
        return s;
    for (int64_t m0 = 0; m0 < M && s == FCL_SUCCESS; m0 += chunk)
        s = column_sums_launch(ctx, G, m0, M - m0 < chunk ? M - m0 : chunk, T, FCL_F32, 0, 1, m0 > 0);
    if (s == FCL_SUCCESS) {
        const gemm_job fin = {.M = 1, .N = N, .a_dtype = G->dtype, .b_dtype = G->dtype, .c = db->buffer,
                              .c_dtype = db->dtype, .c_off = db->offset, .c_sn = db->strides[0], .accumulate = 1};
        const fcl_gemm_tiles t = fcl_tune_gemm(ctx);
        s = gemm_finish(ctx, &fin, &t, T, NULL);
    }
    return s;
}
