/* SPDX-License-Identifier: Apache-2.0 */
/* The attention forward kernel's variant choice and launch, shared by the dense, varlen and
 * packed forwards. */
#include "ops/forward_launch.h"

#include "programs/program_cache.h"
#include "tuning/tuning.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kernel variant chosen for one launch: its work-group shape and key tile. */
typedef struct forward_variant {
    cl_kernel kernel;
    cl_kernel pack;          /* the CPU kernel's K/V packing kernel, run first (else NULL) */
    int block_m, block_n;
    size_t wg_size;
    int chunked;             /* the rows kernel: keys in chunks under a loop cap (others never chunk) */
    fcl_forward_tiles tiles; /* the rows kernel's tiles */
} forward_variant;

int fcl_nv_mma_usable(fcl_context ctx, fcl_dtype dtype, const char *path_env)
{
    const char *env = getenv(path_env);
    const int forced_off = env && env[0] && strcmp(env, "auto") != 0 && strcmp(env, "nvidia-mma") != 0 &&
                           strcmp(env, "nvidia-wgmma") != 0;
    return !forced_off && ctx->info.nv_cc_major >= 8 && (dtype == FCL_F16 || dtype == FCL_BF16) &&
           fcl_device_loop_limit(ctx) == 0;
}

/* The tensor-core kernel applies: fcl_nv_mma_usable (FLASHCL_FORWARD_PATH) and a table entry
 * (its tiles for sequences of keys_per_seq keys, keys_per_sequence, in the packed form or not). */
static int mma_applies(fcl_context ctx, fcl_dtype dtype, int hdp, int64_t keys_per_seq, int packed,
                       fcl_mma_tiles *tiles)
{
    if (hdp > 256 || !fcl_nv_mma_usable(ctx, dtype, "FLASHCL_FORWARD_PATH"))
        return 0;
    *tiles = fcl_tune_forward_mma(ctx, hdp, keys_per_seq, packed);
    return tiles->block_m > 0;
}

/* The wgmma kernel applies: fcl_nv_mma_usable, FLASHCL_FORWARD_PATH is not "nvidia-mma", no
 * promotion was refused on ctx, and fcl_tune_forward_wgmma gives tiles (it gives none off
 * compute capability 9.0, where sm_90a code does not run, or where nothing fits). */
static int wgmma_applies(fcl_context ctx, fcl_dtype dtype, int hdp, int has_mask, fcl_wgmma_tiles *tiles)
{
    const char *env = getenv("FLASHCL_FORWARD_PATH");
    if (ctx->wgmma_refused || (env && strcmp(env, "nvidia-mma") == 0) ||
        !fcl_nv_mma_usable(ctx, dtype, "FLASHCL_FORWARD_PATH"))
        return 0;
    *tiles = fcl_tune_forward_wgmma(ctx, hdp, has_mask);
    return tiles->block_n > 0;
}

/* The blocked kernel applies: tiles for the device at hdp (fcl_tune_forward_blocked) and
 * FLASHCL_FORWARD_PATH is not "rows". */
static int blocked_applies(fcl_context ctx, int hdp, fcl_blocked_tiles *tiles)
{
    const char *env = getenv("FLASHCL_FORWARD_PATH");
    if (env && strcmp(env, "rows") == 0)
        return 0;
    *tiles = fcl_tune_forward_blocked(ctx, hdp);
    return tiles->block_m > 0;
}

/* The CPU kernel applies: tiles for the device at hdp (fcl_tune_forward_cpu: CPUs without a loop
 * cap) and FLASHCL_FORWARD_PATH is not "rows" or "blocked". */
static int cpu_applies(fcl_context ctx, int hdp, fcl_cpu_tiles *tiles)
{
    const char *env = getenv("FLASHCL_FORWARD_PATH");
    if (env && (strcmp(env, "rows") == 0 || strcmp(env, "blocked") == 0))
        return 0;
    *tiles = fcl_tune_forward_cpu(ctx, hdp);
    return tiles->rv > 0;
}

const char *fcl_attention_forward_path(fcl_context ctx, fcl_dtype dtype, int64_t head_dim)
{
    FCL_LOCK(ctx);
    fcl_mma_tiles t;
    fcl_wgmma_tiles wt;
    fcl_blocked_tiles bt;
    fcl_cpu_tiles ct;
    if (!ctx)
        return NULL;
    const int hdp = head_dim > 0 ? fcl_pad_head_dim(head_dim) : 16;
    if (head_dim > 0 && wgmma_applies(ctx, dtype, hdp, 0, &wt))
        return "nvidia-wgmma";
    if (head_dim > 0 && mma_applies(ctx, dtype, hdp, INT64_MAX, 0, &t))
        return "nvidia-mma";
    return cpu_applies(ctx, hdp, &ct) ? "cpu" : blocked_applies(ctx, hdp, &bt) ? "blocked" : "rows";
}

int fcl_rows_aligned(fcl_tensor t, const int dims[3], int n)
{
    if (t->offset % n)
        return 0;
    for (int i = 0; i < 3; i++)
        if (dims[i] >= 0 && t->strides[dims[i]] % n)
            return 0;
    return 1;
}

/* Into buf: the build options every forward variant takes (dtype, padded head dim, layout, logit
 * mods, mask), then the variant's own (`fmt`), then on NVIDIA the register cap max_regs when > 0. */
static void forward_options(fcl_context ctx, const fcl_forward_job *job, int hdp, int max_regs, char *buf,
                            size_t size, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void forward_options(fcl_context ctx, const fcl_forward_job *job, int hdp, int max_regs, char *buf,
                            size_t size, const char *fmt, ...)
{
    const fcl_attn_resolved *r = &job->params;
    int n = snprintf(buf, size, "-DFCL_DTYPE=%d -DHEAD_DIM_PAD=%d -DLAYOUT=%d -DHAS_SOFTCAP=%d -DHAS_MASK=%d "
                     "-DHAS_ALIBI=%d ", (int)job->dtype, hdp, job->layout, r->softcap > 0.0f, r->mask != NULL,
                     r->alibi != NULL);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, size - (size_t)n, fmt, ap);
    va_end(ap);
    if (max_regs > 0 && ctx->info.nv_cc_major > 0)
        snprintf(buf + n, size - (size_t)n, " -cl-nv-maxrregcount=%d", max_regs);
}

/* Builds (or finds) kernel attention_forward of the n_sources `sources` with `opts`, and the
 * most work-items its compiled form can run per work-group. */
static fcl_status build_forward(fcl_context ctx, const char *const *sources, int n_sources, const char *opts,
                                cl_kernel *kernel, size_t *wg)
{
    fcl_status s = fcl_get_kernel(ctx, sources, n_sources, opts, "attention_forward", kernel);
    if (s != FCL_SUCCESS)
        return s;
    *wg = 0;
    cl_int err = clGetKernelWorkGroupInfo(*kernel, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof *wg, wg, NULL);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "clGetKernelWorkGroupInfo");
}

/* Builds (or finds) the rows kernel variant; halves BLOCK_M if the compiled kernel cannot run
 * BLOCK_M / ROWS work-items (register pressure on GPUs). */
static fcl_status get_rows_kernel(fcl_context ctx, const fcl_forward_job *job, int hdp, forward_variant *v)
{
    static const char *const sources[] = {"common", "attention_forward_rows", "attention_forward"};
    fcl_forward_tiles *tiles = &v->tiles;
    *tiles = fcl_tune_forward(ctx, hdp);
    for (;;) {
        char opts[256];
        forward_options(ctx, job, hdp, 0, opts, sizeof opts, "-DBLOCK_M=%d -DBLOCK_N=%d -DROWS=%d -DSMEM_FLOATS=%d",
                        tiles->block_m, tiles->block_n, tiles->rows, fcl_forward_smem_floats(tiles, hdp));
        size_t wg;
        fcl_status s = build_forward(ctx, sources, (int)(sizeof sources / sizeof *sources), opts, &v->kernel, &wg);
        if (s != FCL_SUCCESS)
            return s;
        if (wg >= (size_t)(tiles->block_m / tiles->rows) || tiles->block_m == tiles->rows)
            break;
        tiles->block_m /= 2;
    }
    v->chunked = 1;
    v->block_m = tiles->block_m;
    v->block_n = tiles->block_n;
    v->wg_size = (size_t)(tiles->block_m / tiles->rows);
    return FCL_SUCCESS;
}

/* Builds (or finds) the blocked kernel variant with tiles t; halves BLOCK_M while the compiled
 * kernel cannot run its work-group. v->kernel stays NULL when no BLOCK_M fits (the rows kernel
 * then runs). */
static fcl_status get_blocked_kernel(fcl_context ctx, const fcl_forward_job *job, int hdp, fcl_blocked_tiles t,
                                     forward_variant *v)
{
    /* the TX work-items of a row block meet by subgroup shuffles where the device's subgroups
     * hold whole row blocks */
    const int tx = t.block_n / t.wn, sg = ctx->subgroup_size;
    const int shuffle = sg > 0 && (tx & (tx - 1)) == 0 && sg % tx == 0;
    static const char *const plain[] = {"common", "attention_forward_rows", "attention_forward_blocked"};
    static const char *const shuffled[] = {"common", "subgroup", "attention_forward_rows", "attention_forward_blocked"};
    const int vec = job->D % 4 == 0 && fcl_rows_aligned(job->Q, job->q_dims, 4) &&
                    fcl_rows_aligned(job->K, job->k_dims, 4) && fcl_rows_aligned(job->V, job->v_dims, 4);
    v->kernel = NULL;
    for (; t.block_m >= t.wm && t.block_m % t.wm == 0; t.block_m /= 2) {
        const int row_shuffle = shuffle && (t.block_m / t.wm * tx) % sg == 0;
        char opts[384];
        forward_options(ctx, job, hdp, t.max_regs, opts, sizeof opts,
                        "-DBLOCK_M=%d -DBLOCK_N=%d -DWM=%d -DWN=%d -DDK=%d -DNK=%d -DVW=%d -DV_BUFFERS=%d "
                        "-DVEC_LOAD=%d -DROW_SHUFFLE=%d -DFCL_SUBGROUP_SIZE=%d",
                        t.block_m, t.block_n, t.wm, t.wn, t.dk, t.nk, t.vw, t.v_buffers, vec, row_shuffle,
                        row_shuffle ? sg : 0);
        size_t wg;
        fcl_status s = build_forward(ctx, row_shuffle ? shuffled : plain, row_shuffle ? 4 : 3, opts, &v->kernel, &wg);
        if (s != FCL_SUCCESS)
            return s;
        const size_t items = (size_t)(t.block_m / t.wm * (t.block_n / t.wn));
        if (wg >= items) {
            v->chunked = 0;
            v->block_m = t.block_m;
            v->block_n = t.block_n;
            v->wg_size = items;
            return FCL_SUCCESS;
        }
        v->kernel = NULL;
    }
    return FCL_SUCCESS;
}

/* The CPU kernel reads F32 K/V in place, without the packed copy, where each KV head's keys are
 * read by at most this many query rows (Sq x Hq / Hkv): there the copy costs more than the
 * strided rows do. 2-core AMD EPYC, PoCL / Intel's runtime, ms packed -> in place: B 8 S 256
 * H 12 D 64 12.3 -> 10.8 / 12.9 -> 10.5; S 1024 H 8 D 64 13.1 -> 13.1 / 13.2 -> 11.9; B 2 S 512
 * H 16 D 128 25.2 -> 25.5 / 25.7 -> 24.4; S 2048 GQA 16/4 D 128 causal (8192 rows a head)
 * 93.5 -> 99.2 / 88.4 -> 91.1, which keeps the copy. */
#define CPU_KV_IN_PLACE_MAX_ROWS 1024

/* Builds (or finds) the CPU kernel variant with tiles t for job: work-groups of one work-item,
 * each t.simd * rv query rows, rv = t.rv or fewer when the sequences have fewer rows; K/V read in
 * place (KV_DIRECT; with t's in-place tiles where the sequences fill them) or packed first
 * (v->pack). */
static fcl_status get_cpu_kernel(fcl_context ctx, const fcl_forward_job *job, int hdp, const fcl_cpu_tiles *t,
                                 forward_variant *v)
{
    static const char *const sources[] = {"common", "attention_forward_rows", "attention_forward_cpu"};
    const int64_t vectors = (job->sq + t->simd - 1) / t->simd;
    const int in_place = job->dtype == FCL_F32 && !job->params.mask && job->layout != FCL_LAYOUT_VARLEN &&
                         job->D == hdp && job->sq * (job->Hq / job->Hkv) <= CPU_KV_IN_PLACE_MAX_ROWS;
    /* the in-place tiles: dense layouts only (measured there; packed QKV keeps the other tiles) */
    const int direct = in_place && job->layout == FCL_LAYOUT_DENSE && t->direct_rv > 0 && vectors >= t->direct_rv;
    const int rv = direct ? t->direct_rv : vectors < 1 ? 1 : vectors < t->rv ? (int)vectors : t->rv;
    const int bn = direct ? t->direct_bn : t->bn, db = direct ? t->direct_db : t->db;
    char opts[256];
    forward_options(ctx, job, hdp, 0, opts, sizeof opts, "-DSIMD=%d -DRV=%d -DBN=%d -DDB=%d -DKV_DIRECT=%d", t->simd,
                    rv, bn, db, in_place);
    size_t wg;
    fcl_status s = build_forward(ctx, sources, (int)(sizeof sources / sizeof *sources), opts, &v->kernel, &wg);
    if (s == FCL_SUCCESS && !in_place)
        s = fcl_get_kernel(ctx, sources, (int)(sizeof sources / sizeof *sources), opts, "attention_pack_kv", &v->pack);
    if (s != FCL_SUCCESS)
        return s;
    v->chunked = 0;
    v->block_m = t->simd * rv;
    v->block_n = bn;
    v->wg_size = 1;
    return FCL_SUCCESS;
}

/* The device's portable kernel: the CPU one where it applies, else the blocked one where it
 * applies and fits, else the rows one. */
static fcl_status get_portable_kernel(fcl_context ctx, const fcl_forward_job *job, int hdp, forward_variant *v)
{
    fcl_cpu_tiles ct;
    if (cpu_applies(ctx, hdp, &ct))
        return get_cpu_kernel(ctx, job, hdp, &ct, v);
    fcl_blocked_tiles t;
    if (blocked_applies(ctx, hdp, &t)) {
        fcl_status s = get_blocked_kernel(ctx, job, hdp, t, v);
        if (s != FCL_SUCCESS || v->kernel)
            return s;
    }
    return get_rows_kernel(ctx, job, hdp, v);
}

static fcl_status get_mma_kernel(fcl_context ctx, const fcl_forward_job *job, int hdp, const fcl_mma_tiles *t,
                                 forward_variant *v)
{
    static const char *const sources[] = {"common",        "attention_forward_rows", "warp_nv",
                                          "mma_nv",        "forward_softmax_nv",     "attention_forward_mma"};
    char opts[320];
    forward_options(ctx, job, hdp, t->max_regs, opts, sizeof opts,
                    "-DBLOCK_M=%d -DBLOCK_N=%d -DM_TILES=%d -DASYNC_COPY=%d -DPAIRS=%d -DQ_LOCAL_STEPS=%d",
                    t->block_m, t->block_n, t->m_tiles,
                    fcl_rows_aligned(job->K, job->k_dims, 8) && fcl_rows_aligned(job->V, job->v_dims, 8),
                    job->D % 2 == 0 && fcl_rows_aligned(job->Q, job->q_dims, 2) &&
                        fcl_rows_aligned(job->O, job->o_dims, 2),
                    t->q_local);
    size_t wg;
    fcl_status s = build_forward(ctx, sources, (int)(sizeof sources / sizeof *sources), opts, &v->kernel, &wg);
    if (s != FCL_SUCCESS)
        return s;
    v->chunked = 0;
    v->block_m = t->block_m;
    v->block_n = t->block_n;
    v->wg_size = (size_t)(t->block_m / (16 * t->m_tiles) * 32);
    if (wg < v->wg_size) /* too many registers for this work-group shape: the portable kernel */
        return get_portable_kernel(ctx, job, hdp, v);
    return FCL_SUCCESS;
}

/* Builds (or finds) the wgmma kernel with tiles t. v->kernel stays NULL when it cannot run here
 * (the driver refused the sm_90a promotion: ctx then never tries again; or the compiled kernel
 * cannot run a warpgroup); the tensor-core mma kernel runs instead. */
static fcl_status get_wgmma_kernel(fcl_context ctx, const fcl_forward_job *job, int hdp, const fcl_wgmma_tiles *t,
                                   forward_variant *v)
{
    static const char *const sources[] = {"common", "attention_forward_rows", "warp_nv",  "mma_nv",
                                          "forward_softmax_nv", "wgmma_nv", "attention_forward_wgmma"};
    char opts[320];
    forward_options(ctx, job, t->kernel_dim, t->max_regs, opts, sizeof opts,
                    "-DQK_DIM=%d -DBLOCK_M=64 -DBLOCK_N=%d -DM_TILES=1 -DSTAGES=%d -DOVERLAP=%d -DSWIZZLED_TILES=1 "
                    "-DASYNC_COPY=%d -DPAIRS=%d -DQ_REGS=%d",
                    hdp, t->block_n, t->stages, t->overlap,
                    fcl_rows_aligned(job->Q, job->q_dims, 8) && fcl_rows_aligned(job->K, job->k_dims, 8) &&
                        fcl_rows_aligned(job->V, job->v_dims, 8),
                    job->D % 2 == 0 && fcl_rows_aligned(job->O, job->o_dims, 2), t->q_regs);
    size_t wg;
    v->kernel = NULL;
    int refused;
    fcl_status s = fcl_wgmma_build_outcome(
        ctx, build_forward(ctx, sources, (int)(sizeof sources / sizeof *sources), opts, &v->kernel, &wg), &refused);
    if (s != FCL_SUCCESS || refused) {
        v->kernel = NULL;
        return s;
    }
    if (wg < 128) {
        v->kernel = NULL;
        return FCL_SUCCESS;
    }
    v->chunked = 0;
    v->block_m = 64;
    v->block_n = t->block_n;
    v->wg_size = 128;
    return FCL_SUCCESS;
}

/* The keys per sequence that pick the tensor-core forward's tiles: the dense form's length; 0
 * (short) for the varlen form, whose batches of mixed lengths ran slower with wide key tiles at
 * every measured length (H100, history "v0.34.0"), and for the packed form, whose sequences the
 * host never reads. */
static int64_t keys_per_sequence(const fcl_forward_job *job)
{
    return job->layout == FCL_LAYOUT_DENSE ? job->sk : 0;
}

/* The tensor-core kernel for the job where one applies (wgmma, then mma), else the portable one. */
static fcl_status get_forward_kernel(fcl_context ctx, const fcl_forward_job *job, int hdp, forward_variant *v)
{
    fcl_wgmma_tiles wt;
    fcl_mma_tiles mt;
    if (job->fp32_probs)
        return get_portable_kernel(ctx, job, hdp, v);
    if (wgmma_applies(ctx, job->dtype, hdp, job->params.mask != NULL, &wt)) {
        fcl_status s = get_wgmma_kernel(ctx, job, hdp, &wt, v);
        if (s != FCL_SUCCESS || v->kernel)
            return s;
    }
    if (mma_applies(ctx, job->dtype, hdp, keys_per_sequence(job), job->layout == FCL_LAYOUT_PACKED, &mt))
        return get_mma_kernel(ctx, job, hdp, &mt, v);
    return get_portable_kernel(ctx, job, hdp, v);
}

/* On devices that cap the loop iterations of a work-item, the keys are processed in chunks
 * (one launch each) whose iterations stay well under the cap; elsewhere one chunk. */
static fcl_status chunk_for_loop_limit(fcl_context ctx, const char *op, const fcl_forward_tiles *t, int hdp,
                                       int64_t Sk, int64_t *chunk_keys)
{
    const long m = t->rows, n = t->block_n, wg = t->block_m / t->rows;
    /* loop iterations per key tile and outside the tile loop, counted generously */
    const long per_tile = (n * hdp + wg - 1) / wg + n + m * (n + 1) + hdp * (1 + m * (n + 1)) +
                          m * (2 + 2 * n + hdp + n * hdp) + 8;
    const long fixed = m * (3 * hdp + 8) + (t->block_m * hdp + wg - 1) / wg + t->block_m + 64;
    const long tiles_per_chunk = fcl_tiles_under_loop_cap(ctx, per_tile, fixed);
    if (tiles_per_chunk < 0)
        return fcl_loop_cap_error(ctx, op, "key", per_tile, fixed);
    if (tiles_per_chunk > 0 && tiles_per_chunk * n < Sk)
        *chunk_keys = tiles_per_chunk * n;
    return FCL_SUCCESS;
}


void fcl_view_params(fcl_tensor t, const int d[3], cl_long out[4])
{
    out[0] = t ? t->offset : 0;
    for (int i = 0; i < 3; i++)
        out[1 + i] = (t && d[i] >= 0) ? t->strides[d[i]] : 0;
}

fcl_status fcl_forward_launch(fcl_context ctx, const fcl_forward_job *job, cl_event *event)
{
    const fcl_attn_resolved *r = &job->params;
    const int hdp = fcl_pad_head_dim(job->D);
    forward_variant v = {0};
    fcl_status s = get_forward_kernel(ctx, job, hdp, &v);
    if (s != FCL_SUCCESS)
        return s;
    cl_kernel kernel = v.kernel;
    /* keys are counted from the sequence's first key, the tile grid's origin */
    int64_t chunk_keys = job->sk > 0 ? job->sk : 1;
    if (v.chunked && (s = chunk_for_loop_limit(ctx, job->op, &v.tiles, hdp, chunk_keys, &chunk_keys)) != FCL_SUCCESS)
        return s;
    const int64_t n_chunks = job->sk > 0 ? (job->sk + chunk_keys - 1) / chunk_keys : 1;
    const int64_t state_rows = job->Hq * (job->layout == FCL_LAYOUT_VARLEN ? job->total_q : job->grid_b * job->sq);
    /* the state buffer: the rows kernel's chunk state, or the CPU kernel's packed K/V rows (each
     * KV head's rows, [K | V] floats, followed by block_n zero rows; see attention_forward_cpu.cl) */
    const int64_t packed_rows =
        job->Hkv * (job->layout == FCL_LAYOUT_VARLEN ? job->total_k + v.block_n : job->grid_b * (job->sk + v.block_n));
    const uint64_t state_bytes = v.pack ? (uint64_t)packed_rows * 2 * (uint64_t)hdp * sizeof(float)
                                 : n_chunks > 1 ? (uint64_t)(state_rows * (hdp + 2)) * sizeof(float) : 0;
    cl_mem state = NULL;
    if (state_bytes > 0 && !(state = fcl_scratch_buffer(ctx, FCL_SCRATCH_FWD_STATE, state_bytes, &s)))
        return s;
    /* Absent optional tensors are bound to O's buffer; the kernel never touches them. */
    const cl_mem dummy = job->O->buffer;
    const cl_mem bufs[10] = {job->Q->buffer, job->K->buffer, job->V->buffer, job->O->buffer,
                             job->LSE ? job->LSE->buffer : dummy, r->mask ? r->mask->buffer : dummy,
                             r->alibi ? r->alibi->buffer : dummy, state ? state : dummy,
                             job->seq_q ? job->seq_q->buffer : dummy, job->seq_k ? job->seq_k->buffer : dummy};
    cl_long views[5][4];
    fcl_view_params(job->Q, job->q_dims, views[0]);
    fcl_view_params(job->K, job->k_dims, views[1]);
    fcl_view_params(job->V, job->v_dims, views[2]);
    fcl_view_params(job->O, job->o_dims, views[3]);
    fcl_view_params(job->LSE, job->lse_dims, views[4]);
    const cl_long sides[6] = {r->mask ? r->mask->offset : 0, r->mask_sb, r->mask_ss,
                              r->alibi ? r->alibi->offset : 0, r->alibi_sb, r->alibi_sh};
    const cl_long seqs[3] = {job->seq_q ? job->seq_q->offset : 0, job->seq_k ? job->seq_k->offset : 0,
                             (job->seq_q && job->seq_q->ndim == 2) ? job->seq_q->strides[0] : 1};
    const cl_int ints[7] = {(cl_int)job->sq, (cl_int)job->sk, (cl_int)job->D, (cl_int)(job->Hq / job->Hkv),
                            r->window_left, r->window_right, job->LSE != NULL};
    const cl_float floats[2] = {r->scale, r->softcap};
    const cl_int totals[2] = {(cl_int)job->total_q, (cl_int)job->total_k};
    cl_int err = CL_SUCCESS;
    const cl_uint chunk_arg = 10; /* key_lo, key_hi, load_state, save_state: set per launch */
    const cl_kernel kernels[2] = {kernel, v.pack};
    for (int kk = 0; kk < 2 && kernels[kk]; kk++) {
        const cl_kernel k = kernels[kk];
        cl_uint arg = 0;
        for (int i = 0; i < 10 && err == CL_SUCCESS; i++)
            err = clSetKernelArg(k, arg++, sizeof(cl_mem), &bufs[i]);
        arg += 4;
        for (int i = 0; i < 7 && err == CL_SUCCESS; i++)
            err = clSetKernelArg(k, arg++, sizeof(cl_int), &ints[i]);
        for (int i = 0; i < 2 && err == CL_SUCCESS; i++)
            err = clSetKernelArg(k, arg++, sizeof(cl_float), &floats[i]);
        for (int t = 0; t < 5; t++) /* Q, K, V, O: offset + batch, seq, head; LSE: offset + batch, head, seq */
            for (int i = 0; i < 4 && err == CL_SUCCESS; i++)
                err = clSetKernelArg(k, arg++, sizeof(cl_long), &views[t][i]);
        for (int i = 0; i < 6 && err == CL_SUCCESS; i++)
            err = clSetKernelArg(k, arg++, sizeof(cl_long), &sides[i]);
        for (int i = 0; i < 3 && err == CL_SUCCESS; i++)
            err = clSetKernelArg(k, arg++, sizeof(cl_long), &seqs[i]);
        for (int i = 0; i < 2 && err == CL_SUCCESS; i++)
            err = clSetKernelArg(k, arg++, sizeof(cl_int), &totals[i]);
    }
    if (v.pack && err == CL_SUCCESS) { /* the CPU kernel's K/V rows, packed first */
        const cl_int none[4] = {0, 0, 0, 0};
        for (cl_uint i = 0; i < 4 && err == CL_SUCCESS; i++)
            err = clSetKernelArg(v.pack, chunk_arg + i, sizeof(cl_int), &none[i]);
        const size_t pg[3] = {(size_t)((job->sk + v.block_n + 15) / 16 * 16), (size_t)job->Hkv, (size_t)job->grid_b};
        const size_t pl[3] = {16, 1, 1};
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, v.pack, 3, NULL, pg, pl, 0, NULL, NULL);
    }
    size_t local[3] = {v.wg_size, 1, 1};
    size_t global[3] = {(size_t)((job->sq + v.block_m - 1) / v.block_m) * local[0], (size_t)job->Hq,
                        (size_t)job->grid_b};
    for (int64_t c = 0; c < n_chunks && err == CL_SUCCESS && global[0] > 0; c++) {
        const int64_t hi = ((c + 1) * chunk_keys < job->sk ? (c + 1) * chunk_keys : job->sk) - 1;
        const cl_int chunk[4] = {(cl_int)(c * chunk_keys), (cl_int)hi, c > 0, c + 1 < n_chunks};
        for (cl_uint i = 0; i < 4 && err == CL_SUCCESS; i++)
            err = clSetKernelArg(kernel, chunk_arg + i, sizeof(cl_int), &chunk[i]);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, kernel, 3, NULL, global, local, 0, NULL,
                                         c + 1 == n_chunks ? event : NULL);
    }
    if (err == CL_SUCCESS && global[0] == 0 && event) /* no query rows (max_seqlen_q 0): still an event */
        err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "enqueueing attention_forward");
    return FCL_SUCCESS;
}
