/* SPDX-License-Identifier: Apache-2.0 */
/* The projection GEMM on NVIDIA tensor cores (cl/nvidia/linear_mma.cl): applicability, the
 * variant's options (layouts, alignment, epilogue, tiles) and the launch. */
#include "gemm/linear_mma.h"

#include "programs/program_cache.h"
#include "tuning/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const mma_sources[] = {"common", "warp_nv", "mma_nv", "linear_mma"};

int fcl_gemm_mma_usable(fcl_context ctx, fcl_dtype a, fcl_dtype b)
{
    const char *env = getenv("FLASHCL_GEMM");
    if ((env && strcmp(env, "own") == 0) || ctx->info.nv_cc_major < 8 || fcl_device_loop_limit(ctx) != 0 ||
        (a != FCL_F16 && a != FCL_BF16) || (b != a && b != FCL_I8))
        return 0;
    return fcl_tune_gemm_mma(ctx, 0).tile_m > 0;
}

/* Whether an operand's rows, `stride` elements apart from element `off` on, are `bytes`-byte aligned
 * for elements of `size` bytes. */
static int rows_aligned(cl_long off, cl_long stride, int size, int bytes)
{
    return (off * size) % bytes == 0 && (stride * size) % bytes == 0;
}

fcl_status fcl_gemm_mma_enqueue(fcl_context ctx, const gemm_job *g, cl_event *event, int *done)
{
    *done = 0;
    const int a_k1 = g->a_sk == 1, b_k1 = g->b_sk == 1, b_i8 = g->b_dtype == FCL_I8;
    if (!fcl_gemm_mma_usable(ctx, g->a_dtype, g->b_dtype) || (!a_k1 && g->a_sm != 1) || (!b_k1 && g->b_sn != 1))
        return FCL_SUCCESS;
    const int scale_on = b_i8 ? g->scale_on : 0;
    const fcl_gemm_mma_tiles t = fcl_tune_gemm_mma(ctx, scale_on == 2);
    if (t.tile_m == 0) /* the scales' stages do not fit */
        return FCL_SUCCESS;
    const cl_long a_rows = a_k1 ? g->a_sm : g->a_sk, b_rows = b_k1 ? g->b_sn : g->b_sk;
    char opts[512];
    int n = snprintf(opts, sizeof opts,
                     "-DFCL_DTYPE=%d -DB_I8=%d -DSCALE_ON=%d -DMMA_BF16=%d -DC_F32=%d -DHAS_BIAS=%d -DACCUMULATE=%d "
                     "-DTM=%d -DTN=%d -DTK=%d -DWARPS_M=%d -DWARPS_N=%d -DSTAGES=%d -DA_K1=%d -DB_K1=%d "
                     "-DA_ASYNC=%d -DB_ASYNC=%d -DB_VEC=%d",
                     (int)g->a_dtype, b_i8, scale_on, g->a_dtype == FCL_BF16 || scale_on == 2, g->c_dtype == FCL_F32,
                     g->bias != NULL, g->accumulate, t.tile_m, t.tile_n, t.tile_k, t.warps_m, t.warps_n, t.stages,
                     a_k1, b_k1, rows_aligned(g->a_off, a_rows, 2, 16),
                     !b_i8 && rows_aligned(g->b_off, b_rows, 2, 16), b_i8 && rows_aligned(g->b_off, b_rows, 1, 8));
    if (t.max_regs > 0)
        snprintf(opts + n, sizeof opts - (size_t)n, " -cl-nv-maxrregcount=%d", t.max_regs);
    cl_kernel k;
    fcl_status s = fcl_get_kernel(ctx, mma_sources, (int)(sizeof mma_sources / sizeof *mma_sources), opts, "gemm_mma",
                                  &k);
    if (s != FCL_SUCCESS)
        return s;
    const size_t wg = (size_t)(t.warps_m * t.warps_n * 32);
    size_t most = 0;
    cl_int err = clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof most, &most, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "clGetKernelWorkGroupInfo");
    if (most < wg) /* too many registers for this work-group: the portable kernel */
        return FCL_SUCCESS;
    const size_t local[2] = {wg, 1};
    const size_t global[2] = {((size_t)g->N + (size_t)t.tile_n - 1) / (size_t)t.tile_n * wg,
                              ((size_t)g->M + (size_t)t.tile_m - 1) / (size_t)t.tile_m};
    err = fcl_gemm_set_args(k, g);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, k, 2, NULL, global, local, 0, NULL, event);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "enqueueing the tensor-core projection GEMM");
    *done = 1;
    return FCL_SUCCESS;
}
