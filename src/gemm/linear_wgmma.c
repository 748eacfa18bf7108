/* SPDX-License-Identifier: Apache-2.0 */
/* The projection GEMM on Hopper's warpgroup tensor cores (cl/nvidia/linear_wgmma.cl):
 * applicability, the variant's options (layouts, alignment, epilogue, tiles) and the launch. */
#include "gemm/linear_wgmma.h"

#include "gemm/linear_mma.h"
#include "programs/program_cache.h"
#include "tuning/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const wgmma_sources[] = {"common", "warp_nv", "mma_nv", "wgmma_nv", "linear_wgmma"};

/* The wgmma GEMM's tiles of `form` (FCL_WGMMA_*) for dtypes a and b on ctx (tile_m 0 where
 * fcl_gemm_wgmma_usable does not hold). */
static fcl_gemm_wgmma_tiles usable_tiles(fcl_context ctx, fcl_dtype a, fcl_dtype b, int form)
{
    const char *env = getenv("FLASHCL_GEMM");
    if ((env && strcmp(env, "mma") == 0) || ctx->wgmma_refused || !fcl_gemm_mma_usable(ctx, a, b))
        return (fcl_gemm_wgmma_tiles){0};
    return fcl_tune_gemm_wgmma(ctx, form);
}

int fcl_gemm_wgmma_usable(fcl_context ctx, fcl_dtype a, fcl_dtype b)
{
    return usable_tiles(ctx, a, b, b == FCL_I8 ? FCL_WGMMA_I8_REGS : FCL_WGMMA_W16).tile_m > 0;
}

/* g (I8 B K-contiguous, scaled per column: the forward's weights) as C^T = B^T A^T: the weights
 * become the I8 A, the activations the 16-bit B, C's strides swap, and the scale and the bias
 * apply per row (SCALE_ON 3). */
static gemm_job weights_as_a(const gemm_job *g)
{
    gemm_job h = *g;
    h.M = g->N;
    h.N = g->M;
    h.a = g->b;
    h.a_dtype = FCL_I8;
    h.a_off = g->b_off;
    h.a_sm = g->b_sn;
    h.a_sk = 1;
    h.b = g->a;
    h.b_dtype = g->a_dtype;
    h.b_off = g->a_off;
    h.b_sn = g->a_sm;
    h.b_sk = 1;
    h.c_sm = g->c_sn;
    h.c_sn = g->c_sm;
    h.scale_on = 3;
    return h;
}

fcl_status fcl_gemm_wgmma_enqueue(fcl_context ctx, const gemm_job *job, cl_event *event, int *done)
{
    *done = 0;
    /* each operand K-contiguous, else M- or N-contiguous, its rows 16-byte aligned; I8 B
     * K-contiguous scaled along n (the forward: run as the I8 A of weights_as_a, converted in
     * registers, with A K-contiguous), or N-contiguous scaled along k with A K-contiguous (the
     * input gradient: A scaled and split into BF16 hi + lo in registers) */
    const int a_i8 = job->b_dtype == FCL_I8 && job->b_sk == 1;
    if (a_i8 && (job->a_sk != 1 || !job->scale || job->scale_on != 1))
        return FCL_SUCCESS;
    const gemm_job swapped = a_i8 ? weights_as_a(job) : *job, *g = &swapped;
    const fcl_dtype act = a_i8 ? g->b_dtype : g->a_dtype;
    const int b_i8 = g->b_dtype == FCL_I8, a_mn = g->a_sk != 1, b_mn = g->b_sk != 1;
    const int split_a = b_i8 && b_mn;
    const cl_long a_rows = a_mn ? g->a_sk : g->a_sm, b_rows = b_mn ? g->b_sk : g->b_sn;
    const int scale_on = g->scale ? g->scale_on : 0; /* 16-bit B: scaled along n, or not at all */
    if ((a_mn && g->a_sm != 1) || (b_mn && g->b_sn != 1) || (b_i8 && scale_on != 2) ||
        (!b_i8 && !a_i8 && scale_on == 2) || (split_a && a_mn) ||
        !fcl_gemm_rows_aligned(g->a_off, a_rows, a_i8 ? 1 : 2, 16) ||
        !fcl_gemm_rows_aligned(g->b_off, b_rows, b_i8 ? 1 : 2, 16))
        return FCL_SUCCESS;
    const fcl_gemm_wgmma_tiles t = usable_tiles(ctx, act, job->b_dtype,
                                                a_i8 ? FCL_WGMMA_I8_REGS : b_i8 ? FCL_WGMMA_I8_TILES : FCL_WGMMA_W16);
    if (t.tile_m == 0)
        return FCL_SUCCESS;
    char opts[448];
    int n = snprintf(opts, sizeof opts,
                     "-DFCL_DTYPE=%d -DA_I8=%d -DB_I8=%d -DSCALE_ON=%d -DMMA_BF16=%d -DC_F32=%d -DHAS_BIAS=%d "
                     "-DACCUMULATE=%d -DTM=%d -DTN=%d -DTK=%d -DWGS=%d -DSTAGES=%d -DLAG=%d -DPAIRS=%d "
                     "-DWGMMA_SS_A_MN=%d -DWGMMA_SS_B_MN=%d -DSWIZZLED_TILES=1",
                     (int)act, a_i8, b_i8, scale_on, act == FCL_BF16 || split_a,
                     g->c_dtype == FCL_F32, g->bias != NULL,
                     g->accumulate, t.tile_m, t.tile_n, t.tile_k, t.warpgroups, t.stages, t.lag,
                     g->c_sn == 1 && g->c_off % 2 == 0 && g->c_sm % 2 == 0, a_mn, b_mn);
    if (t.max_regs > 0)
        snprintf(opts + n, sizeof opts - (size_t)n, " -cl-nv-maxrregcount=%d", t.max_regs);
    cl_kernel k;
    int refused;
    fcl_status s = fcl_wgmma_build_outcome(
        ctx,
        fcl_get_kernel(ctx, wgmma_sources, (int)(sizeof wgmma_sources / sizeof *wgmma_sources), opts, "gemm_wgmma", &k),
        &refused);
    if (s != FCL_SUCCESS || refused)
        return s;
    return fcl_gemm_enqueue_blocks(ctx, k, g, (size_t)(128 * t.warpgroups), t.tile_m, t.tile_n,
                                   "enqueueing the wgmma projection GEMM", event, done);
}
