/* SPDX-License-Identifier: Apache-2.0 */
/* The attention backward's kernel variants, scratch, chunking and launches, shared by the
 * dense, varlen and packed backwards. */
#include "ops/backward_launch.h"

#include "programs/program_cache.h"
#include "tuning/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_DELTA, K_DKDV, K_DQ, N_KERNELS };
static const char *const kernel_names[N_KERNELS] = {"attention_backward_delta", "attention_backward_dkdv",
                                                     "attention_backward_dq"};

/* The kernels of one backward and their launch shape. */
typedef struct backward_variant {
    cl_kernel kern[N_KERNELS];
    int mma;                 /* the tensor-core kernels (never chunked) */
    int blocked;             /* the register-blocked GPU kernels (never chunked) */
    long ds_keys;            /* dS stored by the dK/dV kernel (DS_STORED): keys per launch pair; 0: recomputed */
    fcl_backward_tiles t;    /* block_n keys per dK/dV work-group, block_m rows per dQ work-group */
    size_t dkdv_wg, dq_wg;   /* work-items per work-group */
    size_t dkdv_slices, dq_slices; /* work-groups per block that split its gradient's columns */
    size_t delta_lanes;      /* work-items per query row of the delta kernel; 0: one work-item per work-group */
    size_t delta_rows;       /* query rows per work-group of the delta kernel */
} backward_variant;

/* Work-items per query row of the delta kernel at padded head dim hdp: on GPUs one per two
 * 4-element chunks, up to 32 (reads along the row; H100, F16: D 64 34.4 us with 8 lanes against
 * 42.8-44.2 with 4 or 16 and 63.8 with 32; D 128 61.1 us with 16 against 74.2 with 8). 1 on CPUs
 * (a row per SIMD lane; Intel's CPU runtime also crashes running the form with lanes, which PoCL
 * and oclgrind run clean). The CPU kernels' program builds it with 0 instead (get_cpu_kernels). */
static int delta_lanes(fcl_context ctx, int hdp)
{
    return ctx->info.type == FCL_DEVICE_CPU ? 1 : hdp / 8 < 32 ? hdp / 8 : 32;
}

/* Work-items of the delta kernel's work-groups with several lanes per row, at most (as its
 * DELTA_MAX_ROWS rows of DELTA_LANES). */
#define DELTA_GROUP_ITEMS 256

/* Query rows per work-group of the delta kernel on CPUs: one work-item each with 1 lane, one
 * work-item for all of them with 0 (-DDELTA_CPU_ROWS in the CPU kernels' program). */
#define DELTA_CPU_ROWS 32

/* The three kernels of the program of `sources` built with `opts` (whose -DDELTA_LANES is
 * `lanes`) into v->kern, the shape of its delta kernel (v->delta_lanes = lanes; v->delta_rows: up
 * to DELTA_GROUP_ITEMS / lanes on GPUs, as many as it can run; DELTA_CPU_ROWS on CPUs), and the
 * most work-items each of dkdv and dq can run per work-group (wg). */
static fcl_status build_kernels(fcl_context ctx, const char *const *sources, int n_sources, const char *opts,
                                int lanes, backward_variant *v, size_t wg[2])
{
    for (int k = 0; k < N_KERNELS; k++) {
        fcl_status s = fcl_get_kernel(ctx, sources, n_sources, opts, kernel_names[k], &v->kern[k]);
        if (s != FCL_SUCCESS)
            return s;
    }
    size_t most[N_KERNELS];
    for (int k = 0; k < N_KERNELS; k++) {
        cl_int err = clGetKernelWorkGroupInfo(v->kern[k], ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof most[k],
                                              &most[k], NULL);
        if (err != CL_SUCCESS)
            return fcl_fail_cl(ctx, err, "clGetKernelWorkGroupInfo");
    }
    wg[0] = most[K_DKDV];
    wg[1] = most[K_DQ];
    v->dkdv_slices = v->dq_slices = 1;
    const size_t fit = lanes > 0 ? most[K_DELTA] / (size_t)lanes : 0;
    v->delta_lanes = (size_t)lanes;
    const size_t most_rows = DELTA_GROUP_ITEMS / (size_t)(lanes > 1 ? lanes : 1);
    v->delta_rows = lanes <= 1 ? DELTA_CPU_ROWS : fit >= most_rows ? most_rows : fit >= 1 ? fit : 1;
    return FCL_SUCCESS;
}

/* The portable kernels (cl/portable/attention_backward.cl); halves a tile whose kernel cannot run that
 * many work-items. */
static fcl_status get_portable_kernels(fcl_context ctx, const fcl_forward_job *f, int hdp, backward_variant *v)
{
    static const char *const sources[] = {"common", "attention_backward_rows", "attention_backward"};
    fcl_backward_tiles *t = &v->t;
    *t = fcl_tune_backward(ctx, hdp);
    v->mma = v->blocked = 0;
    v->ds_keys = 0;
    for (;;) {
        char opts[256];
        snprintf(opts, sizeof opts,
                 "-DFCL_DTYPE=%d -DHEAD_DIM_PAD=%d -DBLOCK_M=%d -DBLOCK_N=%d -DLAYOUT=%d -DHAS_SOFTCAP=%d "
                 "-DHAS_MASK=%d -DHAS_ALIBI=%d -DDELTA_LANES=%d",
                 (int)f->dtype, hdp, t->block_m, t->block_n, f->layout, f->params.softcap > 0.0f,
                 f->params.mask != NULL, f->params.alibi != NULL, delta_lanes(ctx, hdp));
        size_t wg[2] = {0, 0};
        fcl_status s = build_kernels(ctx, sources, 3, opts, delta_lanes(ctx, hdp), v, wg);
        if (s != FCL_SUCCESS)
            return s;
        if (wg[0] >= (size_t)t->block_n && wg[1] >= (size_t)t->block_m) {
            v->dkdv_wg = (size_t)t->block_n;
            v->dq_wg = (size_t)t->block_m;
            return FCL_SUCCESS;
        }
        if (wg[0] < (size_t)t->block_n && t->block_n > 1)
            t->block_n /= 2;
        else if (wg[1] < (size_t)t->block_m && t->block_m > 1)
            t->block_m /= 2;
        else
            return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: the backward kernels cannot run on device \"%s\"", f->op,
                            ctx->info.name);
    }
}

/* The blocked kernels apply (their tiles in *t): fcl_tune_backward_blocked (GPUs without a loop
 * cap, or FLASHCL_BACKWARD_PATH=blocked) and FLASHCL_BACKWARD_PATH is not "portable". */
static int blocked_applies(fcl_context ctx, int hdp, fcl_backward_blocked_tiles *t)
{
    const char *env = getenv("FLASHCL_BACKWARD_PATH");
    if (env && strcmp(env, "portable") == 0)
        return 0;
    *t = fcl_tune_backward_blocked(ctx, hdp);
    return t->block_a > 0;
}

/* The keys a row of dS takes in `scores` for a launch pair of `keys` keys: rounded up to a
 * multiple of 4, as scores_pitch (cl/portable/attention_backward_rows.cl) lays the rows out. */
static uint64_t ds_pitch_keys(uint64_t keys)
{
    return (keys + 3) / 4 * 4;
}

/* Keys per launch pair of the kernels with dS stored (a multiple of the dK/dV block
 * `block`, up to all of them), so that dS of one pair (FP32, every query row of every head per
 * key) fits the budget: FLASHCL_BACKWARD_DS_BYTES, else a quarter of the device's memory within
 * its largest allocation. 0 (dS recomputed by the dQ kernel) where one block does not fit, the
 * budget is 0, or there are no rows or keys. */
static long stored_ds_keys(fcl_context ctx, const fcl_forward_job *f, int block)
{
    const char *env = getenv("FLASHCL_BACKWARD_DS_BYTES");
    uint64_t budget = ctx->info.global_mem_bytes / 4;
    budget = budget < ctx->info.max_alloc_bytes ? budget : ctx->info.max_alloc_bytes;
    if (env && *env) {
        char *end = NULL;
        const unsigned long long e = strtoull(env, &end, 10);
        if (end && *end == '\0')
            budget = e;
    }
    const uint64_t per_key = (uint64_t)f->grid_b * (uint64_t)f->Hq * (uint64_t)f->sq * sizeof(float);
    if (f->sq <= 0 || f->sk <= 0 || per_key == 0)
        return 0;
    /* ds_pitch_keys(keys) fits the budget's keys exactly when keys fit them rounded down to 4 */
    const uint64_t fit = budget / per_key / 4 * 4;
    const uint64_t all = ((uint64_t)f->sk + block - 1) / block, blocks = fit / (uint64_t)block;
    return blocks == 0 ? 0 : (long)((blocks < all ? blocks : all) * (uint64_t)block);
}

/* The register-blocked GPU kernels (cl/portable/attention_backward_blocked.cl), or the portable
 * ones where the compiled kernels cannot run their work-groups (registers). */
static fcl_status get_blocked_kernels(fcl_context ctx, const fcl_backward_job *job, int hdp,
                                      const fcl_backward_blocked_tiles *t, backward_variant *v)
{
    static const char *const sources[] = {"common", "attention_backward_rows", "attention_backward_blocked"};
    const fcl_forward_job *f = &job->fwd;
    const int vec = f->D % 4 == 0 && fcl_rows_aligned(f->Q, f->q_dims, 4) && fcl_rows_aligned(f->K, f->k_dims, 4) &&
                    fcl_rows_aligned(f->V, f->v_dims, 4) && fcl_rows_aligned(job->dO, job->do_dims, 4);
    const long ds_keys = stored_ds_keys(ctx, f, t->block_a);
    char opts[320];
    snprintf(opts, sizeof opts,
             "-DFCL_DTYPE=%d -DHEAD_DIM_PAD=%d -DBLOCK_A=%d -DBLOCK_B=%d -DWA=%d -DWB=%d -DDK=%d -DNK=%d -DVW=%d "
             "-DVEC_LOAD=%d -DDS_STORED=%d -DLAYOUT=%d -DHAS_SOFTCAP=%d -DHAS_MASK=%d -DHAS_ALIBI=%d -DDELTA_LANES=%d",
             (int)f->dtype, hdp, t->block_a, t->block_b, t->wa, t->wb, t->dk, t->nk, t->vw, vec, ds_keys > 0,
             f->layout, f->params.softcap > 0.0f, f->params.mask != NULL, f->params.alibi != NULL,
             delta_lanes(ctx, hdp));
    size_t wg[2] = {0, 0};
    fcl_status s = build_kernels(ctx, sources, 3, opts, delta_lanes(ctx, hdp), v, wg);
    if (s != FCL_SUCCESS)
        return s;
    v->mma = 0;
    v->blocked = 1;
    v->ds_keys = ds_keys;
    v->t = (fcl_backward_tiles){t->block_a, t->block_a};
    v->dkdv_wg = v->dq_wg = (size_t)(t->block_a / t->wa * (t->block_b / t->wb));
    if (wg[0] < v->dkdv_wg || wg[1] < v->dq_wg)
        return get_portable_kernels(ctx, f, hdp, v);
    return FCL_SUCCESS;
}

/* The CPU kernels apply (their tiles in *t): the CPU forward's tiles (CPUs without a loop cap)
 * and FLASHCL_BACKWARD_PATH is not "portable" or "blocked". */
static int cpu_applies(fcl_context ctx, int hdp, fcl_cpu_tiles *t)
{
    const char *env = getenv("FLASHCL_BACKWARD_PATH");
    if (env && (strcmp(env, "portable") == 0 || strcmp(env, "blocked") == 0))
        return 0;
    *t = fcl_tune_forward_cpu(ctx, hdp);
    return t->rv > 0;
}

/* The CPU kernels (cl/portable/attention_backward_cpu.cl): work-groups of one work-item, each
 * t->simd * t->rv keys (dK/dV) or query rows (dQ). */
static fcl_status get_cpu_kernels(fcl_context ctx, const fcl_forward_job *f, int hdp, const fcl_cpu_tiles *t,
                                  backward_variant *v)
{
    static const char *const sources[] = {"common", "attention_backward_rows", "attention_backward_cpu"};
    const long ds_keys = stored_ds_keys(ctx, f, t->simd * t->rv);
    char opts[256];
    snprintf(opts, sizeof opts,
             "-DFCL_DTYPE=%d -DHEAD_DIM_PAD=%d -DSIMD=%d -DRV=%d -DDS_STORED=%d -DLAYOUT=%d -DHAS_SOFTCAP=%d "
             "-DHAS_MASK=%d -DHAS_ALIBI=%d -DDELTA_LANES=0 -DDELTA_CPU_ROWS=%d -DFCL_CPU_PREFETCH=1",
             (int)f->dtype, hdp, t->simd, t->rv, ds_keys > 0, f->layout, f->params.softcap > 0.0f,
             f->params.mask != NULL, f->params.alibi != NULL, DELTA_CPU_ROWS);
    size_t wg[2] = {0, 0};
    fcl_status s = build_kernels(ctx, sources, 3, opts, 0, v, wg); /* delta: vectors along each row */
    if (s != FCL_SUCCESS)
        return s;
    v->mma = v->blocked = 0;
    v->ds_keys = ds_keys;
    v->t = (fcl_backward_tiles){t->simd * t->rv, t->simd * t->rv};
    v->dkdv_wg = v->dq_wg = 1;
    return FCL_SUCCESS;
}

/* The tensor-core kernels apply: fcl_nv_mma_usable (FLASHCL_BACKWARD_PATH) and tiles for hdp
 * (the packed form's with `packed`). */
static int mma_applies(fcl_context ctx, fcl_dtype dtype, int hdp, int packed, fcl_backward_mma_tiles *t)
{
    if (!fcl_nv_mma_usable(ctx, dtype, "FLASHCL_BACKWARD_PATH"))
        return 0;
    *t = fcl_tune_backward_mma(ctx, hdp, 0, packed);
    return t->dkdv_block_n > 0;
}

/* The wgmma form of the tensor-core kernels (-DWGMMA_BACKWARD) applies to tiles t at padded head
 * dim hdp: FLASHCL_BACKWARD_PATH is not "nvidia-mma" (which keeps the mma.sync form), compute
 * capability 9.0, no refused sm_90a promotion, padded head dims 64 and 128 with dS recomputed
 * (ds_keys 0) and whole columns, 64-key dK/dV and 64-row dQ blocks (a warpgroup each; the packed
 * form's 32-key blocks keep the mma.sync kernels). It then runs wgmma_tiles. */
static int wgmma_applies(fcl_context ctx, int hdp, const fcl_backward_mma_tiles *t, long ds_keys)
{
    const char *env = getenv("FLASHCL_BACKWARD_PATH");
    return !(env && strcmp(env, "nvidia-mma") == 0) && !ctx->wgmma_refused && ctx->info.nv_cc_major == 9 &&
           ctx->info.nv_cc_minor == 0 && (hdp == 64 || hdp == 128) && ds_keys == 0 && t->dkdv_cols >= hdp &&
           t->dq_cols >= hdp && t->dkdv_block_n == 64 && t->dq_block_m == 64;
}

/* The wgmma form's tiles from t for layout `layout`: its blocks, its dK/dV query tiles (t's 64 rows
 * for the dense layout, the table's at padded head dim 64; else 32), 32-key tiles in the dQ kernel
 * whatever t says, and no fragments in local memory. H100, F16 D 64 (history "v0.42.0"): dense
 * 1.05-1.13x faster with 64 rows; varlen 64 sequences of up to 2048 1.03x, but up to 512 0.95x and
 * 512 of up to 128 0.90x (short sequences fill less of a 64-row tile). 64-row tiles need the
 * kernel's wgmma_keep_fragments: without it NVIDIA's ptxas gave the K and V fragments' registers
 * to the P and dS fragments, and every tile after a work-group's first got wrong dK and dV
 * (history "v0.41.0"). They fit local memory wherever t does (fcl_tune_backward_mma sizes t for
 * the mma.sync form's padded rows, which are longer). */
static fcl_backward_mma_tiles wgmma_tiles(const fcl_backward_mma_tiles *t, int layout)
{
    fcl_backward_mma_tiles w = *t;
    w.dkdv_block_m = t->dkdv_block_m == 64 && layout == FCL_LAYOUT_DENSE ? 64 : 32;
    w.dq_block_n = 32;
    w.kv_local = 0;
    return w;
}

const char *fcl_attention_backward_path(fcl_context ctx, fcl_dtype dtype, int64_t head_dim)
{
    FCL_LOCK(ctx);
    fcl_backward_mma_tiles t;
    fcl_backward_blocked_tiles bt;
    fcl_cpu_tiles ct;
    if (!ctx)
        return NULL;
    const int hdp = head_dim > 0 ? fcl_pad_head_dim(head_dim) : 16;
    return head_dim > 0 && mma_applies(ctx, dtype, hdp, 0, &t) ? (wgmma_applies(ctx, hdp, &t, 0) ? "nvidia-wgmma"
                                                                                                : "nvidia-mma")
           : cpu_applies(ctx, hdp, &ct)                     ? "cpu"
           : blocked_applies(ctx, hdp, &bt)                 ? "blocked"
                                                            : "portable";
}

/* The least padded head dim at which the tensor-core dQ kernel reads dS stored by the dK/dV
 * kernel instead of recomputing it. H200, B 2 S 4096 H 16 causal F16, recomputing against stored
 * (history "v0.28.0"): D 192 4.11 -> 3.76 ms, D 256 7.23 -> 5.88, but D 64 (B 16 S 1024 H 32)
 * 2.22 -> 2.76, D 128 1.98 -> 2.05, D 160 3.09 -> 3.17: below 192 the products are cheaper than
 * the dK/dV kernel's stores and the dQ kernel's loads of dS. */
#define MMA_STORED_DS_DIM 192

/* The tensor-core kernels (cl/nvidia/attention_backward_mma.cl): their wgmma form where
 * wgmma_applies (the mma.sync form where its promotion is refused or its kernels cannot run a
 * warpgroup), or the portable ones where the compiled kernels cannot run their work-groups
 * (registers). */
static fcl_status get_mma_kernels(fcl_context ctx, const fcl_backward_job *job, int hdp,
                                  const fcl_backward_mma_tiles *t_in, backward_variant *v)
{
    static const char *const sources[] = {"common", "attention_backward_rows", "warp_nv", "mma_nv", "attention_backward_mma"};
    static const char *const wgmma_sources[] = {"common",   "attention_backward_rows", "warp_nv",
                                                "mma_nv",   "wgmma_nv",                "attention_backward_mma"};
    const fcl_forward_job *f = &job->fwd;
    const long ds_keys = hdp >= MMA_STORED_DS_DIM ? stored_ds_keys(ctx, f, t_in->dkdv_block_n) : 0;
    const fcl_backward_mma_tiles stored =
        ds_keys > 0 ? fcl_tune_backward_mma(ctx, hdp, 1, f->layout == FCL_LAYOUT_PACKED) : *t_in;
    const fcl_backward_mma_tiles *t = &stored, wgmma_t = wgmma_tiles(&stored, f->layout); /* the same blocks */
    const int aligned = fcl_rows_aligned(f->Q, f->q_dims, 8) && fcl_rows_aligned(f->K, f->k_dims, 8) &&
                        fcl_rows_aligned(f->V, f->v_dims, 8) && fcl_rows_aligned(job->dO, job->do_dims, 8);
    const int pairs = f->D % 2 == 0 && fcl_rows_aligned(f->Q, f->q_dims, 2) && fcl_rows_aligned(f->K, f->k_dims, 2) &&
                      fcl_rows_aligned(f->V, f->v_dims, 2) && fcl_rows_aligned(job->dO, job->do_dims, 2) &&
                      fcl_rows_aligned(job->dQ, job->dq_dims, 2) && fcl_rows_aligned(job->dK, job->dk_dims, 2) &&
                      fcl_rows_aligned(job->dV, job->dv_dims, 2);
    const int dkdv_slices = hdp / t->dkdv_cols, dq_slices = hdp / t->dq_cols; /* work-groups per block */
    size_t wg[2] = {0, 0};
    for (int wgmma = wgmma_applies(ctx, hdp, t, ds_keys);; wgmma = 0) {
        const fcl_backward_mma_tiles *k = wgmma ? &wgmma_t : t; /* the kernels' tiles */
        char opts[384];
        snprintf(opts, sizeof opts,
                 "-DFCL_DTYPE=%d -DHEAD_DIM_PAD=%d -DDKDV_BLOCK_N=%d -DDKDV_BLOCK_M=%d -DDQ_BLOCK_M=%d -DDQ_BLOCK_N=%d "
                 "-DKV_LOCAL_STEPS=%d -DDKDV_SLICES=%d -DDQ_SLICES=%d -DDS_STORED=%d -DASYNC_COPY=%d -DPAIRS=%d "
                 "-DLAYOUT=%d -DHAS_SOFTCAP=%d -DHAS_MASK=%d -DHAS_ALIBI=%d -DDELTA_LANES=%d -DWGMMA_BACKWARD=%d "
                 "-DSWIZZLED_TILES=%d",
                 (int)f->dtype, hdp, k->dkdv_block_n, k->dkdv_block_m, k->dq_block_m, k->dq_block_n, k->kv_local,
                 dkdv_slices, dq_slices, ds_keys > 0, aligned, pairs, f->layout,
                 f->params.softcap > 0.0f, f->params.mask != NULL, f->params.alibi != NULL, delta_lanes(ctx, hdp),
                 wgmma, wgmma);
        int refused = 0;
        fcl_status s = wgmma ? build_kernels(ctx, wgmma_sources, 6, opts, delta_lanes(ctx, hdp), v, wg)
                             : build_kernels(ctx, sources, 5, opts, delta_lanes(ctx, hdp), v, wg);
        if (wgmma)
            s = fcl_wgmma_build_outcome(ctx, s, &refused);
        if (s != FCL_SUCCESS)
            return s;
        if (!wgmma || (!refused && wg[0] >= (size_t)(2 * t->dkdv_block_n) && wg[1] >= (size_t)(2 * t->dq_block_m)))
            break;
    }
    v->mma = 1;
    v->blocked = 0;
    v->ds_keys = ds_keys;
    v->t = (fcl_backward_tiles){t->dq_block_m, t->dkdv_block_n};
    v->dkdv_wg = (size_t)(2 * t->dkdv_block_n);
    v->dq_wg = (size_t)(2 * t->dq_block_m);
    v->dkdv_slices = (size_t)dkdv_slices;
    v->dq_slices = (size_t)dq_slices;
    if (wg[0] < v->dkdv_wg || wg[1] < v->dq_wg)
        return get_portable_kernels(ctx, f, hdp, v);
    return FCL_SUCCESS;
}

/* Tiles per launch so that a work-item stays under the device's loop cap (0: all tiles). */
static fcl_status tiles_per_launch(fcl_context ctx, const char *op, const char *what, long per_tile, long fixed,
                                   long *out)
{
    *out = fcl_tiles_under_loop_cap(ctx, per_tile, fixed);
    return *out < 0 ? fcl_loop_cap_error(ctx, op, what, per_tile, fixed) : FCL_SUCCESS;
}

/* The context's scratch buffer `slot` of at least n floats, or NULL with a message. */
static cl_mem scratch(fcl_context ctx, int slot, uint64_t n, fcl_status *s)
{
    return fcl_scratch_buffer(ctx, slot, n * sizeof(float), s);
}

/* Enqueues the forward into scratch O and LSE (views into *o_view, *lse_view; O has dO's
 * shape). */
static fcl_status recompute_forward(fcl_context ctx, const fcl_backward_job *job, cl_mem o_buf, cl_mem lse_buf,
                                    struct fcl_tensor_s *o_view, struct fcl_tensor_s *lse_view)
{
    const fcl_forward_job *f = &job->fwd;
    const int64_t lse_shape[3] = {f->grid_b, f->Hq, f->sq};
    const int64_t lse_flat[2] = {f->Hq, f->total_q};
    *o_view = fcl_scratch_view(ctx, o_buf, f->dtype, job->dO->ndim, job->dO->shape);
    *lse_view = f->layout == FCL_LAYOUT_DENSE ? fcl_scratch_view(ctx, lse_buf, FCL_F32, 3, lse_shape)
                                               : fcl_scratch_view(ctx, lse_buf, FCL_F32, 2, lse_flat);
    fcl_forward_job fj = *f;
    fj.O = o_view;
    fj.LSE = lse_view;
    fj.fp32_probs = f->O == NULL; /* O recomputed: see fcl_forward_job; LSE alone: the forward's own path */
    return fcl_forward_launch(ctx, &fj, NULL);
}

/* The kernel argument index of the first chunk argument (item_lo; then item_hi, load_state,
 * save_state): after the 16 buffers. */
#define CHUNK_ARG 16

/* Sets the arguments of a backward kernel (all three take the same list; the chunk arguments
 * are set again per launch). */
static cl_int set_shared_args(cl_kernel k, const fcl_backward_job *job, fcl_tensor O, fcl_tensor lse, cl_mem delta,
                              cl_mem state, cl_mem scores, const cl_int ints[9], const cl_float floats[2])
{
    const fcl_forward_job *f = &job->fwd;
    const fcl_attn_resolved *r = &f->params;
    const cl_mem dummy = job->dQ->buffer; /* bound to absent optional buffers; never touched */
    const cl_mem bufs[CHUNK_ARG] = {f->Q->buffer, f->K->buffer, f->V->buffer, O->buffer, job->dO->buffer,
                                    lse->buffer, job->dQ->buffer, job->dK->buffer, job->dV->buffer,
                                    r->mask ? r->mask->buffer : dummy, r->alibi ? r->alibi->buffer : dummy, delta,
                                    state ? state : dummy, scores ? scores : dummy,
                                    f->seq_q ? f->seq_q->buffer : dummy, f->seq_k ? f->seq_k->buffer : dummy};
    const fcl_tensor views[9] = {f->Q, f->K, f->V, O, job->dO, job->dQ, job->dK, job->dV, lse};
    const int *dims[9] = {f->q_dims, f->k_dims, f->v_dims, f->o_dims, job->do_dims,
                          job->dq_dims, job->dk_dims, job->dv_dims, f->lse_dims};
    const cl_long sides[9] = {r->mask ? r->mask->offset : 0, r->mask_sb, r->mask_ss,
                              r->alibi ? r->alibi->offset : 0, r->alibi_sb, r->alibi_sh,
                              f->seq_q ? f->seq_q->offset : 0, f->seq_k ? f->seq_k->offset : 0,
                              (f->seq_q && f->seq_q->ndim == 2) ? f->seq_q->strides[0] : 1};
    cl_int err = CL_SUCCESS;
    cl_uint arg = 0;
    for (int i = 0; i < CHUNK_ARG && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_mem), &bufs[i]);
    const cl_int no_chunk[4] = {0, 0, 0, 0}; /* replaced per launch by enqueue_chunks */
    for (int i = 0; i < 4 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_int), &no_chunk[i]);
    for (int i = 0; i < 9 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_int), &ints[i]);
    for (int i = 0; i < 2 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_float), &floats[i]);
    for (int t = 0; t < 9; t++) {
        cl_long v[4];
        fcl_view_params(views[t], dims[t], v);
        for (int i = 0; i < 4 && err == CL_SUCCESS; i++)
            err = clSetKernelArg(k, arg++, sizeof(cl_long), &v[i]);
    }
    for (int i = 0; i < 9 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_long), &sides[i]);
    return err;
}

/* Enqueues `k` over items [0, n_items) in launches of `per_launch` items (0 = one launch),
 * carrying the accumulators through `state` between launches. */
static cl_int enqueue_chunks(fcl_context ctx, cl_kernel k, const size_t global[3], const size_t local[3],
                             long n_items, long per_launch, cl_event *event)
{
    const long n_launches = per_launch > 0 && n_items > 0 ? (n_items + per_launch - 1) / per_launch : 1;
    if (n_launches == 1)
        per_launch = n_items > 0 ? n_items : 1;
    cl_int err = CL_SUCCESS;
    for (long c = 0; c < n_launches && err == CL_SUCCESS; c++) {
        const long hi = (c + 1) * per_launch < n_items ? (c + 1) * per_launch : n_items;
        const cl_int chunk[4] = {(cl_int)(c * per_launch), (cl_int)(hi - 1), c > 0, c + 1 < n_launches};
        for (cl_uint i = 0; i < 4 && err == CL_SUCCESS; i++)
            err = clSetKernelArg(k, CHUNK_ARG + i, sizeof(cl_int), &chunk[i]);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, k, 3, NULL, global, local, 0, NULL,
                                         c + 1 == n_launches ? event : NULL);
    }
    return err;
}

/* The kernels with dS stored (blocked, CPU, tensor cores): per range of `keys` keys (whole dK/dV
 * blocks of `block` keys), the dK/dV launch over the range's blocks (global[0] of g_dkdv cut to
 * them), which stores their dS, then the dQ launch that adds their terms (resuming from and
 * saving to its state except first and last). */
static cl_int enqueue_stored_ds(fcl_context ctx, cl_kernel dkdv, cl_kernel dq, const size_t g_dkdv[3],
                                const size_t l_dkdv[3], const size_t g_dq[3], const size_t l_dq[3], long sk, long keys,
                                long block, cl_event *event)
{
    const long n = (sk + keys - 1) / keys;
    cl_int err = CL_SUCCESS;
    for (long c = 0; c < n && err == CL_SUCCESS; c++) {
        const long lo = c * keys, hi = (lo + keys < sk ? lo + keys : sk) - 1;
        const cl_int chunk[4] = {(cl_int)lo, (cl_int)hi, c > 0, c + 1 < n};
        const size_t g[3] = {(size_t)((hi - lo) / block + 1) * l_dkdv[0], g_dkdv[1], g_dkdv[2]};
        for (cl_uint i = 0; i < 4 && err == CL_SUCCESS; i++)
            if ((err = clSetKernelArg(dkdv, CHUNK_ARG + i, sizeof(cl_int), &chunk[i])) == CL_SUCCESS)
                err = clSetKernelArg(dq, CHUNK_ARG + i, sizeof(cl_int), &chunk[i]);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, dkdv, 3, NULL, g, l_dkdv, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, dq, 3, NULL, g_dq, l_dq, 0, NULL, c + 1 == n ? event : NULL);
    }
    return err;
}

fcl_status fcl_backward_launch(fcl_context ctx, const fcl_backward_job *job, cl_event *event)
{
    const fcl_forward_job *f = &job->fwd;
    const int hdp = fcl_pad_head_dim(f->D);
    backward_variant v;
    fcl_backward_mma_tiles mt;
    fcl_backward_blocked_tiles bt;
    fcl_cpu_tiles ct;
    const int packed = f->layout == FCL_LAYOUT_PACKED;
    fcl_status s = mma_applies(ctx, f->dtype, hdp, packed, &mt) ? get_mma_kernels(ctx, job, hdp, &mt, &v)
                   : cpu_applies(ctx, hdp, &ct)        ? get_cpu_kernels(ctx, f, hdp, &ct, &v)
                   : blocked_applies(ctx, hdp, &bt)    ? get_blocked_kernels(ctx, job, hdp, &bt, &v)
                                                        : get_portable_kernels(ctx, f, hdp, &v);
    if (s != FCL_SUCCESS)
        return s;
    cl_kernel *kern = v.kern;
    const fcl_backward_tiles t = v.t;
    const long bm = t.block_m, bn = t.block_n, group = (long)(f->Hq / f->Hkv);
    const long n_qtiles = f->sq > 0 ? (long)((f->sq + bm - 1) / bm) : 1;
    long dkdv_tiles = 0, dq_tiles = 0; /* the portable kernels' chunks (the others: never) */
    if (!v.mma && !v.blocked && ((s = tiles_per_launch(ctx, f->op, "query", (bm * hdp + bn - 1) / bn + bm * (3 * hdp + 6) + 16,
                                         3 * hdp + bn + group + 64, &dkdv_tiles)) ||
                   (s = tiles_per_launch(ctx, f->op, "key", (bn * hdp + bm - 1) / bm + bn * (2 * hdp + 6) + 16,
                                         3 * hdp + bm + 64, &dq_tiles))))
        return s;
    const long dkdv_items = group * n_qtiles, dq_keys = (long)f->sk;
    const long dkdv_per = dkdv_tiles, dq_per = dq_tiles * bn;
    const long ds_pairs = v.ds_keys > 0 ? ((long)f->sk + v.ds_keys - 1) / v.ds_keys : 0; /* stored-dS launch pairs */
    const int chunked_dkdv = dkdv_per > 0 && dkdv_per < dkdv_items;
    const int chunked_dq = (dq_per > 0 && dq_per < dq_keys) || ds_pairs > 1;
    const int64_t rows_q = f->Hq * (f->layout == FCL_LAYOUT_VARLEN ? f->total_q : f->grid_b * f->sq);
    const int64_t rows_k = f->Hkv * (f->layout == FCL_LAYOUT_VARLEN ? f->total_k : f->grid_b * f->sk);

    cl_mem mem[6] = {NULL, NULL, NULL, NULL, NULL, NULL}; /* delta, dK/dV state, dQ state, O and LSE scratch, dS */
    struct fcl_tensor_s o_view, lse_view;
    fcl_tensor O = f->O, lse = f->LSE;
    if (!(mem[0] = scratch(ctx, FCL_SCRATCH_BWD_DELTA, (uint64_t)rows_q, &s)))
        return s;
    if (chunked_dkdv && !(mem[1] = scratch(ctx, FCL_SCRATCH_BWD_DKDV_STATE, (uint64_t)(rows_k * 2 * hdp), &s)))
        return s;
    if (chunked_dq && !(mem[2] = scratch(ctx, FCL_SCRATCH_BWD_DQ_STATE, (uint64_t)(rows_q * hdp), &s)))
        return s;
    if (ds_pairs > 0 && !(mem[5] = scratch(ctx, FCL_SCRATCH_BWD_SCORES,
                                           (uint64_t)f->grid_b * (uint64_t)f->Hq * (uint64_t)f->sq *
                                               ds_pitch_keys((uint64_t)v.ds_keys),
                                           &s)))
        return s;
    if (!lse || !O) { /* the op checked: O NULL implies LSE NULL */
        const uint64_t o_floats = (uint64_t)(fcl_tensor_numel(job->dO) * (int64_t)fcl_dtype_size(f->dtype) + 3) / 4;
        if (!(mem[3] = scratch(ctx, FCL_SCRATCH_BWD_O, o_floats, &s)) ||
            !(mem[4] = scratch(ctx, FCL_SCRATCH_BWD_LSE, (uint64_t)rows_q, &s)) ||
            (s = recompute_forward(ctx, job, mem[3], mem[4], &o_view, &lse_view)) != FCL_SUCCESS)
            return s;
        lse = &lse_view;
        O = O ? O : &o_view;
    }

    const cl_int ints[9] = {(cl_int)f->sq, (cl_int)f->sk, (cl_int)f->D, (cl_int)group, f->params.window_left,
                            f->params.window_right, (cl_int)f->total_q, (cl_int)f->total_k, (cl_int)n_qtiles};
    const cl_float floats[2] = {f->params.scale, f->params.softcap};
    cl_int err = CL_SUCCESS;
    for (int k = 0; k < N_KERNELS && err == CL_SUCCESS; k++)
        err = set_shared_args(kern[k], job, O, lse, mem[0], k == K_DKDV ? mem[1] : k == K_DQ ? mem[2] : NULL,
                              k == K_DELTA ? NULL : mem[5], ints, floats);
    const size_t q_groups = (size_t)((f->sq + bm - 1) / bm), k_groups = (size_t)((f->sk + bn - 1) / bn);
    /* delta: delta_lanes work-items per row, up to DELTA_GROUP_ITEMS / delta_lanes rows per
     * work-group on GPUs (what the kernel can run), 32 on CPUs (with no lanes: one work-item for
     * them); an explicit work-group so that PoCL compiles one delta kernel for every shape */
    const size_t lanes = v.delta_lanes, delta_rows = v.delta_rows;
    const size_t delta_blocks = ((size_t)f->sq + delta_rows - 1) / delta_rows;
    const size_t g_delta[3] = {lanes ? delta_blocks * delta_rows * lanes : delta_blocks, (size_t)f->Hq,
                               (size_t)f->grid_b};
    const size_t l_delta[3] = {lanes ? delta_rows * lanes : 1, 1, 1};
    const size_t g_dkdv[3] = {k_groups * v.dkdv_wg, (size_t)f->Hkv * v.dkdv_slices, (size_t)f->grid_b};
    const size_t g_dq[3] = {q_groups * v.dq_wg, (size_t)f->Hq * v.dq_slices, (size_t)f->grid_b};
    const size_t l_dkdv[3] = {v.dkdv_wg, 1, 1}, l_dq[3] = {v.dq_wg, 1, 1};
    if (err == CL_SUCCESS && f->sq > 0)
        err = clEnqueueNDRangeKernel(ctx->queue, kern[K_DELTA], 3, NULL, g_delta, l_delta, 0, NULL, NULL);
    if (err == CL_SUCCESS && ds_pairs > 0) {
        err = enqueue_stored_ds(ctx, kern[K_DKDV], kern[K_DQ], g_dkdv, l_dkdv, g_dq, l_dq, (long)f->sk, v.ds_keys, bn,
                                event);
    } else {
        if (err == CL_SUCCESS && k_groups > 0)
            err = enqueue_chunks(ctx, kern[K_DKDV], g_dkdv, l_dkdv, dkdv_items, chunked_dkdv ? dkdv_per : 0,
                                 q_groups > 0 ? NULL : event);
        if (err == CL_SUCCESS && q_groups > 0)
            err = enqueue_chunks(ctx, kern[K_DQ], g_dq, l_dq, dq_keys, chunked_dq ? dq_per : 0, event);
    }
    if (err == CL_SUCCESS && q_groups == 0 && k_groups == 0 && event)
        err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the attention backward");
}
