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
                     a_k1, b_k1, fcl_gemm_rows_aligned(g->a_off, a_rows, 2, 16),
                     !b_i8 && fcl_gemm_rows_aligned(g->b_off, b_rows, 2, 16), b_i8 && fcl_gemm_rows_aligned(g->b_off, b_rows, 1, 8));
    if (t.max_regs > 0)
        snprintf(opts + n, sizeof opts - (size_t)n, " -cl-nv-maxrregcount=%d", t.max_regs);
    cl_kernel k;
    fcl_status s = fcl_get_kernel(ctx, mma_sources, (int)(sizeof mma_sources / sizeof *mma_sources), opts, "gemm_mma",
                                  &k);
    if (s != FCL_SUCCESS)
        return s;
    return fcl_gemm_enqueue_blocks(ctx, k, g, (size_t)(t.warps_m * t.warps_n * 32), t.tile_m, t.tile_n,
                                   "enqueueing the tensor-core projection GEMM", event, done);
}
