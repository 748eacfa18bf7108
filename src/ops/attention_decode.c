/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_attention_decode: checks, the form (portable, team shuffles, three-phase, tensor cores, CPU),
 * the split count, and the launches of cl/portable/attention_decode.cl (mask length when asked, partial states per
 * split, combine; with one split, the partial kernel alone, writing O; the tensor-core form's
 * partial kernel in cl/nvidia/attention_decode_mma.cl, the three-phase one in
 * cl/portable/attention_decode_keys.cl). */
#include "core/tensor_checks.h"
#include "ops/attn_params.h"
#include "ops/forward_launch.h"
#include "ops/kv_cache.h"
#include "ops/problem_checks.h"
#include "programs/program_cache.h"
#include "tuning/tuning.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op = "fcl_attention_decode";

/* The length form: exactly one of len >= 0, lens, mask. */
static fcl_status check_length(fcl_context ctx, int64_t B, const fcl_kv_view *kv, int64_t len, fcl_tensor lens,
                               fcl_tensor mask)
{
    const int forms = (len != -1) + (lens != NULL) + (mask != NULL);
    if (forms != 1)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: give exactly one length form (len >= 0, or len = -1 "
                        "with lens or mask); got len %lld, lens %s, mask %s", op, (long long)len,
                        lens ? "set" : "NULL", mask ? "set" : "NULL");
    if (len != -1 && (len < 0 || len > kv->l_max))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: len %lld outside [0, L_max = %lld]", op, (long long)len,
                        (long long)kv->l_max);
    fcl_status s;
    if (lens) {
        if ((s = fcl_check_index_tensor(ctx, op, lens, "lens", 1)))
            return s;
        if (lens->shape[0] != B)
            return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: lens has %lld entries; expected B = %lld", op,
                            (long long)lens->shape[0], (long long)B);
    }
    if (mask) {
        if (mask->ctx != ctx)
            return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: mask belongs to another context", op);
        if (mask->dtype != FCL_F32)
            return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: mask dtype %s must be f32", op, fcl_dtype_name(mask->dtype));
        const int64_t shape[2] = {B, kv->l_max};
        const int ok = (mask->ndim == 1 && mask->shape[0] == kv->l_max) || (mask->ndim == 2 && fcl_same_shape(mask, shape));
        if (!ok)
            return fcl_shape_error(ctx, op, "mask", mask, "[B, L_max] (or [L_max]) =", shape, 2);
    }
    return FCL_SUCCESS;
}

static fcl_status validate(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q, const fcl_kv_cache *cache,
                           int64_t len, fcl_tensor lens, fcl_tensor mask, fcl_tensor O, fcl_tensor LSE,
                           fcl_kv_view *kv, fcl_attn_resolved *r)
{
    fcl_status s;
    if ((s = fcl_check_tensor(ctx, op, Q, "Q", 4)) || (s = fcl_check_tensor(ctx, op, O, "O", 4)) ||
        (LSE && (s = fcl_check_tensor(ctx, op, LSE, "LSE", 3))))
        return s;
    const int64_t B = Q->shape[0], Lq = Q->shape[1], Hq = Q->shape[2], D = Q->shape[3];
    if ((s = fcl_check_kv_cache(ctx, op, cache, B, kv)) ||
        (s = fcl_check_attention_dtypes(ctx, op, Q, cache->k, cache->v, O, "O", LSE)) ||
        (s = fcl_check_heads(ctx, op, Hq, kv->Hkv, D, kv->D)))
        return s;
    if (!fcl_same_shape(O, Q->shape))
        return fcl_shape_error(ctx, op, "O", O, "like Q", Q->shape, 4);
    const int64_t lshape[3] = {B, Hq, Lq};
    if (LSE && !fcl_same_shape(LSE, lshape))
        return fcl_shape_error(ctx, op, "LSE", LSE, "[B, Hq, Lq] =", lshape, 3);
    if ((s = check_length(ctx, B, kv, len, lens, mask)))
        return s;
    if (params && params->key_mask)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: params.key_mask must be NULL (pass the validity mask "
                        "as the mask argument)", op);
    if (params && params->window_right > 0)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: window_right %d: decode is causal (use -1 or 0)", op,
                        params->window_right);
    if ((s = fcl_resolve_attn_params(ctx, op, params, 0, kv->l_max, B, Hq, D, Lq, kv->l_max, r)))
        return s;
    if (B > 65535 || Lq * Hq > INT32_MAX / 4)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: B %lld or Lq %lld x Hq beyond the supported range", op,
                        (long long)B, (long long)Lq);
    if ((s = fcl_check_host_size(ctx, "fcl_attention_decode: B x Lq x Hq rows", (uint64_t)(B * Lq * Hq))))
        return s;
    const fcl_tensor outs[2] = {O, LSE};
    const fcl_tensor ins[7] = {Q, cache->k, cache->v, cache->block_table, lens, mask, r->alibi};
    static const char *const out_names[2] = {"O", "LSE"};
    static const char *const in_names[7] = {"Q", "cache.k", "cache.v", "cache.block_table", "lens", "mask",
                                            "alibi_slopes"};
    return fcl_check_outputs_apart(ctx, op, 2, outs, out_names, 7, ins, in_names);
}

/* The launch geometry: tiles (teams, keys per batch, rows per work-group), key splits. */
typedef struct decode_plan {
    fcl_decode_tiles t;
    fcl_decode_shape s; /* of t */
    int hdp, group, n_rows, row_blocks, n_splits, split_keys;
    int aim_splits;     /* the splits plan_splits aims at for a long cache (before the cap by the
                         * keys): what the combine's lanes are sized for, the same at every length */
    int kv_heads;       /* Hkv of the call (1 where no call is planned: fcl_attention_decode_path) */
    int wg, batch;      /* work-items per work-group, keys per work-group and batch */
    int combine_lanes;  /* decode_combine: lanes of splits ... */
    int combine_dl;     /* ... times lanes of dims (float4s; divides hdp / 4) */
    fcl_dtype dtype;
    int wide;           /* K and V rows are read as aligned 16-byte chunks (WIDE) */
    int shuffle_lanes;  /* > 0: the team-shuffle form is wanted, with teams inside warps (32 lanes:
                         * NVIDIA compute capability >= 7) or subgroups of this size; 0 with
                         * FLASHCL_DECODE_SHUFFLE=0 */
    int shuffle;        /* the plan uses it (TEAM_SHUFFLE): its shape allows it */
    int stages;         /* ASYNC_STAGES: batches in the cp.async ring (0: none) */
    int warps;          /* > 0: the tensor-core form (decode_partial_mma), warps per work-group */
    int cpu;            /* > 0: the CPU form (decode_partial_cpu), its vector width: one work-item per
                         * work-group (team of one) on a device without a loop cap */
    int heads;          /* KV heads per work-item of the CPU form: all of them where their rows fit
                         * (HEADS; the grid then has no KV head dimension), else 1 */
    int direct;         /* DIRECT_OUT: one split, whose partial kernel writes O and LSE (no combine) */
    int full_dim;       /* the head dim is the padded one (FULL_DIM: no chunk past it) */
    int key_lanes;      /* > 0: the three-phase form (decode_partial_keys), work-items per key in its
                         * K phase; its batch is wg / key_lanes keys, KEYS per team in P V */
} decode_plan;

static int power_of_two(int x)
{
    return x > 0 && (x & (x - 1)) == 0;
}

/* The combine's work-group: lanes of dims (a float4 each, or more past `items` lanes), times 1
 * to 8 lanes of splits while that stays within `items` work-items (raise_combine_lanes may take
 * the lanes further once the splits are planned). */
static void combine_shape(decode_plan *p, int items)
{
    p->combine_dl = p->hdp / 4;
    while (p->combine_dl > (items > 32 ? items : 32) && p->combine_dl % 2 == 0)
        p->combine_dl /= 2;
    p->combine_lanes = 1;
    while (p->combine_lanes < 8 && p->combine_lanes * 2 * p->combine_dl <= items)
        p->combine_lanes *= 2;
}

/* Once the splits are planned: the combine's lanes of splits doubled (up to 16 lanes, 512
 * work-items) while a lane would take more than one round of its four loads in flight at the
 * plan's aim (a long cache; the same lanes at every length, so a generation loop builds no new
 * program as its cache grows). The combine is one work-group per row, so its time is rounds of
 * latency. Not on CPUs' one-item form (there lanes are loops), nor with one split (no combine). */
static void raise_combine_lanes(fcl_context ctx, decode_plan *p)
{
    const long slots = (long)p->aim_splits * (p->warps > 0 ? p->warps : 1);
    while (!p->cpu && !p->direct && p->combine_lanes < 16 && 4L * p->combine_lanes < slots &&
           2 * p->combine_lanes * p->combine_dl <= 512 &&
           (size_t)(2 * p->combine_lanes * p->combine_dl) <= ctx->info.max_work_group_size)
        p->combine_lanes *= 2;
}

/* The tensor-core form's shape: 16 keys per warp and step, 16 rows per work-group, a ring of
 * 2 to 4 stages per warp (the tiles' stages, lowered, then the warps halved, until the ring, the
 * kernel's only local array, fits the local memory; no form, warps 0, when one warp's 2 stages
 * do not), the combine's work-group up to 128 work-items. Returns whether the form stays. */
static int reshape_mma(fcl_context ctx, decode_plan *p)
{
    /* one warp's stage: 16 rows of K and of V, unpadded where rows are whole 128-byte spans
     * (RING_PITCH in cl/nvidia/attention_decode_mma.cl) */
    const uint64_t pitch = (uint64_t)(p->hdp % 64 == 0 ? p->hdp : p->hdp + 8), stage_bytes = 2u * 16u * pitch * 2u;
    p->stages = p->t.stages > 2 ? p->t.stages : 2;
    while ((uint64_t)p->warps * (uint64_t)p->stages * stage_bytes > ctx->info.local_mem_bytes && p->warps > 0) {
        if (p->stages > 2)
            p->stages--;
        else
            p->warps /= 2;
    }
    if (p->warps == 0)
        return 0;
    p->wg = 32 * p->warps;
    p->batch = 16 * p->warps;
    p->row_blocks = (p->n_rows + 15) / 16;
    p->shuffle = 0;
    combine_shape(p, p->wg > 128 ? p->wg : 128);
    return 1;
}

/* The team shape of the plan's tiles (also the tensor-core program's: its other kernels use it);
 * then the tensor-core form's shape (reshape_mma) when it has warps and they fit; else the
 * work-group size and batch of the team shape, its row blocks, whether the team-shuffle form
 * applies (teams of 2 lanes or more inside warps or subgroups, every row's keys in one team), and
 * the cp.async
 * stages that fit the device's local memory. */
static void reshape(fcl_context ctx, decode_plan *p)
{
    p->s = fcl_decode_shape_of(&p->t, p->hdp);
    p->heads = 1;
    p->key_lanes = 0;
    if (p->warps > 0 && reshape_mma(ctx, p))
        return;
    p->wg = p->s.team * p->s.teams;
    p->batch = p->s.teams * p->s.keys;
    /* the CPU form (decode_partial_cpu: vectors along keys, software prefetch) on CPUs only; a
     * one-item work-group elsewhere (forced tiles) runs the portable kernel's one-item team */
    p->cpu = p->wg == 1 && ctx->info.type == FCL_DEVICE_CPU && fcl_device_loop_limit(ctx) == 0
                 ? fcl_device_simd_floats(ctx) : 0;
    if (p->cpu)
        p->batch = p->cpu; /* one vector of keys per step */
    /* the CPU form over every KV head at once while their rows' states stay small (32 rows) */
    if (p->cpu && p->kv_heads > 1 && p->kv_heads * p->t.rows <= 32)
        p->heads = p->kv_heads;
    p->row_blocks = (p->n_rows + p->t.rows - 1) / p->t.rows;
    p->shuffle = p->shuffle_lanes > 0 && p->s.team >= 2 && p->s.team <= p->shuffle_lanes && power_of_two(p->s.team) &&
                 p->t.rows <= p->s.team && power_of_two(p->t.rows * p->s.keys) && p->wg % p->shuffle_lanes == 0;
    /* the ring (stages x keys x K and V x the work-group's chunks of 16 bytes, 32 for f32) beside
     * the other local arrays (counted as the portable form's: more than this form's) */
    const uint64_t stage_bytes = (uint64_t)p->s.keys * 2 * (uint64_t)(p->hdp / 8) * 16 * (p->dtype == FCL_F32 ? 2 : 1);
    const uint64_t other = (uint64_t)fcl_decode_local_floats(&p->t, p->hdp) * 4 + 256;
    p->stages = p->shuffle && p->wide ? p->t.stages : 0; /* fcl_tune_decode: 0 without cp.async */
    while (p->stages >= 2 && other + p->stages * stage_bytes * (uint64_t)p->s.teams > ctx->info.local_mem_bytes)
        p->stages--;
    if (p->stages < 2)
        p->stages = 0;
    /* the three-phase form where the tiles have key lanes and no cp.async ring runs */
    p->key_lanes = p->cpu || p->stages ? 0 : fcl_decode_key_lanes(&p->t, p->hdp);
    if (p->key_lanes) {
        p->shuffle = 0;
        p->s.keys = p->s.team / p->key_lanes;
        p->batch = p->wg / p->key_lanes;
    }
    combine_shape(p, p->wg);
}

/* Key batches one work-item may run under the device's loop cap (0 when there is none, -1
 * when not even one fits); loop iterations of cl/portable/attention_decode.cl per batch and outside
 * the batch loop counted generously (every loop, unrolled or not, element-wise loads). */
static long batches_under_cap(fcl_context ctx, const decode_plan *p, long *per_batch_out, long *fixed_out)
{
    const long team = p->s.team, teams = p->s.teams, keys = p->s.keys, r = p->t.rows;
    const long ch = p->hdp / team / 8, own = (r + team - 1) / team;
    long per_batch, fixed;
    if (p->key_lanes) { /* attention_decode_keys.cl */
        const long kl = p->key_lanes, kc = p->hdp / 8 / kl, batch_pairs = p->batch * r;
        const long k_phase = kc * (1 + 8) + kc * (1 + r) + 2 * r;       /* loads, unpack and partials, stores */
        const long v_loads = keys * ch * (1 + 8);
        const long p_step = (batch_pairs + p->wg - 1) / p->wg * (kl + 24); /* sums, logit, exp2 */
        const long raise = r * (p->batch + ch + 4);                      /* the new maxima, rescale */
        const long pv = keys * (3 * r + ch * (1 + r) + 1);
        per_batch = k_phase + v_loads + p_step + raise + pv + 16;
        fixed = (r * p->hdp / 8 + p->wg - 1) / p->wg * (8 + 4) + r * (ch + 2) + teams * (r * ch + r + 2) +
                r * (ch + teams + 4) + 64;
    } else {
        const long loads = 3 * keys * ch * (1 + 8);               /* K, V and spare; 8 elements each */
        const long dots = keys * (ch + r * ch) + r * keys;         /* unpack, partials, their stores */
        const long owner = own * (keys * (team + 4) + 2 * keys);   /* sums, logits, softmax step */
        const long pv = r * keys + r * ch + keys * (r + ch + ch * r) + keys * ch;
        per_batch = loads + dots + owner + pv + 16;
        fixed = r * ch * (8 + 2) + own + teams * (2 * r + r * ch + 2) + r * (ch + teams + 2) + 64;
    }
    *per_batch_out = per_batch;
    *fixed_out = fixed;
    return fcl_tiles_under_loop_cap(ctx, per_batch, fixed);
}

/*
 * The key splits of a length bound `bound` (the host length, or L_max for the device forms).
 * B * Hkv * row_blocks work-groups per split. A round is `waves` work-groups per compute unit
 * (as many as run at once there); the split count is 1 when one split's work-groups fill their
 * last round at least 7/8 full (then the partial kernel writes O itself), else the smallest,
 * from the one that fills a round on, whose work-groups do (up to 4 times that count), so that
 * no round runs with idle compute units. No split gets fewer than split_min keys
 * (its fixed costs: Q, the team merge, the state written and combined) or one batch; split
 * lengths are whole batches. On loop-capped devices a split's batches also stay under the cap
 * (more splits).
 */
static void plan_splits(fcl_context ctx, int64_t B, int64_t Hkv, int64_t bound, decode_plan *p)
{
    const long batch = p->batch, keys = bound > 0 ? (long)bound : 1;
    const long base = (long)(B * (Hkv / p->heads) * p->row_blocks);
    const long round = (long)ctx->info.compute_units * p->t.waves;
    const long least = p->t.split_min > batch ? p->t.split_min : batch;
    const long most = (keys + least - 1) / least;
    const long first = (round + base - 1) / base;
    long splits = first;
    if (8 * base >= 7 * round * ((base + round - 1) / round))
        splits = 1;
    else
        for (long n = first; n <= 4 * first; n++) {
            const long groups = base * n, rounds = (groups + round - 1) / round;
            if (8 * groups >= 7 * rounds * round) {
                splits = n;
                break;
            }
        }
    p->aim_splits = (int)(splits < 1 ? 1 : splits);
    splits = splits < 1 ? 1 : splits > most ? most : splits;
    long split_batches = ((keys + splits - 1) / splits + batch - 1) / batch;
    long per_batch, fixed;
    const long cap = batches_under_cap(ctx, p, &per_batch, &fixed);
    if (cap > 0 && split_batches > cap)
        split_batches = cap;
    p->split_keys = (int)(split_batches * batch);
    p->n_splits = (int)((keys + p->split_keys - 1) / p->split_keys);
}

/* Builds (or finds) the program, with the combine's lanes raised (raise_combine_lanes); while
 * a kernel cannot run its work-group, halves the partial kernel's work-group (the tensor-core
 * form's warps; past one warp, the team-shuffle or portable form), else the combine's lanes of
 * splits, else its lanes of dims. With p->direct, k[2] (the combine) is NULL. */
static fcl_status get_kernels(fcl_context ctx, fcl_dtype dt, const fcl_attn_resolved *r, int len_device, int mask,
                              int paged, decode_plan *p, cl_kernel k[3])
{
    static const char *const portable_sources[] = {"common", "attention_decode"};
    const int subgroups = ctx->info.nv_cc_major == 0; /* the team-shuffle form on subgroups */
    const char *const shuffle_sources[] = {"common", subgroups ? "subgroup" : "warp_nv", "attention_decode"};
    static const char *const mma_sources[] = {"common", "warp_nv", "mma_nv", "attention_decode", "attention_decode_mma"};
    static const char *const cpu_sources[] = {"common", "attention_decode", "attention_decode_cpu"};
    static const char *const keys_sources[] = {"common", "attention_decode", "attention_decode_keys"};
    raise_combine_lanes(ctx, p);
    for (;;) {
        const char *const names[3] = {"decode_mask_len",
                                      p->warps       ? "decode_partial_mma"
                                      : p->cpu       ? "decode_partial_cpu"
                                      : p->key_lanes ? "decode_partial_keys"
                                                     : "decode_partial",
                                      "decode_combine"};
        const char *const *sources = p->warps       ? mma_sources
                                     : p->cpu       ? cpu_sources
                                     : p->key_lanes ? keys_sources
                                     : p->shuffle   ? shuffle_sources
                                                    : portable_sources;
        const int n_sources = p->warps ? 5 : p->cpu || p->key_lanes || p->shuffle ? 3 : 2;
        char opts[512];
        int n = snprintf(opts, sizeof opts,
                 "-DFCL_DTYPE=%d -DHEAD_DIM_PAD=%d -DFULL_DIM=%d -DDIMS=%d -DTEAMS=%d -DKEYS=%d -DROWS_WG=%d -DWIDE=%d "
                 "-DLEN_DEVICE=%d -DHAS_MASK=%d -DPAGED=%d -DHAS_SOFTCAP=%d -DHAS_ALIBI=%d "
                 "-DCOMBINE_LANES=%d -DCOMBINE_DL=%d -DTEAM_SHUFFLE=%d -DASYNC_STAGES=%d -DDECODE_MMA=%d "
                 "-DMMA_WARPS=%d -DDIRECT_OUT=%d -DFCL_SUBGROUP_SIZE=%d -DDECODE_CPU=%d -DDECODE_KEYS=%d -DK_AHEAD=%d",
                 (int)dt, p->hdp, p->full_dim, p->hdp / p->s.team, p->s.teams, p->s.keys, p->t.rows, p->wide,
                 len_device, mask, paged, r->softcap > 0.0f, r->alibi != NULL, p->combine_lanes, p->combine_dl,
                 p->shuffle, p->stages, p->warps > 0, p->warps, p->direct,
                 p->shuffle && subgroups ? p->shuffle_lanes : 0, p->cpu > 0, p->key_lanes,
                 p->key_lanes && p->t.k_ahead);
        if (p->cpu)
            n += snprintf(opts + n, sizeof opts - (size_t)n, " -DSIMD=%d -DFCL_CPU_PREFETCH=1 -DHEADS=%d", p->cpu,
                          p->heads);
        if (p->t.max_regs > 0 && ctx->info.nv_cc_major > 0) /* NVIDIA's compiler only */
            snprintf(opts + n, sizeof opts - (size_t)n, " -cl-nv-maxrregcount=%d", p->t.max_regs);
        fcl_status s = FCL_SUCCESS;
        k[2] = NULL;
        for (int i = 0; i < (p->direct ? 2 : 3) && s == FCL_SUCCESS; i++)
            s = fcl_get_kernel(ctx, sources, n_sources, opts, names[i], &k[i]);
        if (s != FCL_SUCCESS)
            return s;
        size_t wg = 0, wc = SIZE_MAX;
        cl_int err = clGetKernelWorkGroupInfo(k[1], ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
        if (err == CL_SUCCESS && k[2])
            err = clGetKernelWorkGroupInfo(k[2], ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wc, &wc, NULL);
        if (err != CL_SUCCESS)
            return fcl_fail_cl(ctx, err, "clGetKernelWorkGroupInfo");
        if (wg >= (size_t)p->wg && wc >= (size_t)(p->combine_dl * p->combine_lanes))
            return FCL_SUCCESS;
        if (wg < (size_t)p->wg && p->warps > 0) {
            p->warps /= 2;
            reshape(ctx, p);
        } else if (wg < (size_t)p->wg && p->wg > 1) {
            p->t.wg = p->wg / 2;
            reshape(ctx, p);
        } else if (wc < (size_t)(p->combine_dl * p->combine_lanes) && p->combine_lanes > 1) {
            p->combine_lanes /= 2;
        } else if (wc < (size_t)p->combine_dl && p->combine_dl % 2 == 0) {
            p->combine_dl /= 2;
        } else {
            return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: the decode kernels cannot run on device \"%s\"", op,
                            ctx->info.name);
        }
    }
}

/* 1 when K and V can be read 8 elements at a time as aligned 16-byte loads: head_dim % 8 == 0
 * and every row start (offset, strides; a host pointer under the buffer) 16-byte aligned. */
static int wide_loads(const fcl_kv_view *kv, int64_t D)
{
    const size_t esize = fcl_dtype_size(kv->dtype);
    if (D % 8)
        return 0;
    for (int i = 0; i < 4; i++)
        if ((size_t)kv->k[i] * esize % 16 || (size_t)kv->v[i] * esize % 16)
            return 0;
    const cl_mem bufs[2] = {kv->k_buf, kv->v_buf};
    for (int i = 0; i < 2; i++) {
        void *host = NULL;
        if (clGetMemObjectInfo(bufs[i], CL_MEM_HOST_PTR, sizeof host, &host, NULL) != CL_SUCCESS ||
            (uintptr_t)host % 16)
            return 0;
    }
    return 1;
}

/* A kernel's arguments as (size, pointer) pairs, the pointed-to values owned by the caller; room
 * for 16 (the partial kernel takes 14 at most). */
typedef struct arg_list {
    int n;
    size_t size[16];
    const void *val[16];
} arg_list;

static void arg_add(arg_list *a, size_t size, const void *val)
{
    a->size[a->n] = size;
    a->val[a->n++] = val;
}

/* Adds n arguments of one size from consecutive values. */
static void arg_add_n(arg_list *a, size_t size, const void *vals, int n)
{
    for (int i = 0; i < n; i++)
        arg_add(a, size, (const char *)vals + (size_t)i * size);
}

/* Sets kernel k's arguments. */
static cl_int set_args(cl_kernel k, const arg_list *a)
{
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < a->n && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, (cl_uint)i, a->size[i], a->val[i]);
    return err;
}

/* The output's values, in OUT_ARGS order (cl/portable/attention_decode.cl): O, LSE, a long8 of O's
 * offset and strides, then LSE's. */
typedef struct out_args {
    cl_mem o, lse;
    cl_long strides[8];
} out_args;

static void arg_add_out(arg_list *a, const out_args *o)
{
    arg_add(a, sizeof(cl_mem), &o->o);
    arg_add(a, sizeof(cl_mem), &o->lse);
    arg_add(a, sizeof(cl_long8), o->strides);
}

/* The lanes that a team-shuffle team lives in (0: the form is not wanted): 32 where the device
 * has warp shuffles (NVIDIA, compute capability >= 7), the subgroup size where the portable
 * kernels use subgroups (fcl_context's subgroup_size); 0 with FLASHCL_DECODE_SHUFFLE=0. */
static int shuffle_wanted(fcl_context ctx)
{
    const char *env = getenv("FLASHCL_DECODE_SHUFFLE"); /* "0": the portable form everywhere */
    if (env && strcmp(env, "0") == 0)
        return 0;
    return ctx->info.nv_cc_major >= 7 ? 32 : ctx->info.nv_cc_major > 0 ? 0 : ctx->subgroup_size;
}

/* The tensor-core form applies (its warps, else 0): the shuffle form is wanted, 16-byte
 * aligned rows, no mask (the other forms zero the V of dropped slots), F16 / BF16 on compute
 * capability >= 8 (fcl_nv_mma_usable: not FLASHCL_DECODE_PATH=portable), head dims up to 128
 * (registers), and the tiles have warps. */
static int mma_warps(fcl_context ctx, fcl_dtype dt, int hdp, int wide, int mask, const fcl_decode_tiles *t)
{
    return shuffle_wanted(ctx) && wide && !mask && hdp <= 128 && fcl_nv_mma_usable(ctx, dt, "FLASHCL_DECODE_PATH")
               ? t->mma_warps
               : 0;
}

const char *fcl_attention_decode_path(fcl_context ctx, fcl_dtype dtype, int64_t head_dim)
{
    FCL_LOCK(ctx);
    if (!ctx)
        return NULL;
    const int hdp = head_dim > 0 ? fcl_pad_head_dim(head_dim) : 16;
    const fcl_decode_tiles t = fcl_tune_decode(ctx, hdp, dtype, INT_MAX);
    if (mma_warps(ctx, dtype, hdp, head_dim % 8 == 0, 0, &t) > 0)
        return "nvidia-mma";
    decode_plan p = {.hdp = hdp, .t = t, .n_rows = t.rows, .kv_heads = 1, .dtype = dtype,
                     .shuffle_lanes = shuffle_wanted(ctx)};
    reshape(ctx, &p);
    return p.cpu         ? "cpu"
           : p.key_lanes ? "three-phase"
           : !p.shuffle  ? "portable"
           : ctx->info.nv_cc_major > 0 ? "nvidia-shuffle" : "subgroup-shuffle";
}

fcl_status fcl_attention_decode(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q,
                                const fcl_kv_cache *cache, int64_t len, fcl_tensor lens, fcl_tensor mask,
                                fcl_tensor O, fcl_tensor LSE, cl_event *event)
{
    FCL_LOCK(ctx);
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    fcl_kv_view kv;
    fcl_attn_resolved r;
    fcl_status s = validate(ctx, params, Q, cache, len, lens, mask, O, LSE, &kv, &r);
    if (s != FCL_SUCCESS)
        return s;
    const int64_t B = Q->shape[0], Lq = Q->shape[1], Hq = Q->shape[2], D = Q->shape[3];
    decode_plan p = {.hdp = fcl_pad_head_dim(D), .group = (int)(Hq / kv.Hkv), .kv_heads = (int)kv.Hkv,
                     .dtype = Q->dtype, .shuffle_lanes = shuffle_wanted(ctx), .wide = wide_loads(&kv, D),
                     .full_dim = fcl_pad_head_dim(D) == D};
    p.n_rows = p.group * (int)Lq;
    p.t = fcl_tune_decode(ctx, p.hdp, Q->dtype, p.n_rows);
    p.warps = mma_warps(ctx, Q->dtype, p.hdp, p.wide, mask != NULL, &p.t);
    reshape(ctx, &p);
    const int len_device = len == -1;
    const int64_t bound = len_device ? kv.l_max : len;
    cl_kernel k[3];
    /* on loop-capped devices, smaller batches (then fewer rows) until one batch fits under the cap */
    for (;;) {
        plan_splits(ctx, B, kv.Hkv, bound, &p);
        p.direct = p.n_splits == 1;
        if ((s = get_kernels(ctx, Q->dtype, &r, len_device, mask != NULL, kv.paged, &p, k)))
            return s;
        long per_batch, fixed;
        if (batches_under_cap(ctx, &p, &per_batch, &fixed) >= 0)
            break;
        if (p.key_lanes) { /* the three-phase batch is wg / key_lanes: fewer rows, then a smaller work-group */
            if (p.t.rows == 1 && p.wg == 1)
                return fcl_loop_cap_error(ctx, op, "key", per_batch, fixed);
            if (p.t.rows > 1)
                p.t.rows /= 2;
            else
                p.t.wg = p.wg / 2;
        } else if (p.s.keys == 1 && p.t.rows == 1) {
            return fcl_loop_cap_error(ctx, op, "key", per_batch, fixed);
        } else if (p.s.keys >= p.t.rows) {
            p.t.block_n = p.batch / 2;
        } else {
            p.t.rows /= 2;
        }
        reshape(ctx, &p);
    }
    plan_splits(ctx, B, kv.Hkv, bound, &p);
    if (p.direct && p.n_splits != 1) { /* get_kernels shrank the batch: the combine takes any split count */
        p.direct = 0;
        if ((s = get_kernels(ctx, Q->dtype, &r, len_device, mask != NULL, kv.paged, &p, k)))
            return s;
        plan_splits(ctx, B, kv.Hkv, bound, &p);
    }
    if ((s = fcl_check_host_size(ctx, "fcl_attention_decode: splits x work-group items",
                                 (uint64_t)p.n_splits * (uint64_t)p.wg)))
        return s;
    const long limit = fcl_device_loop_limit(ctx);
    if (mask && limit > 0 && kv.l_max / p.wg > limit / 2)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: a mask over %lld keys needs more loop iterations than device "
                        "\"%s\" allows", op, (long long)kv.l_max, ctx->info.name);

    cl_int err = CL_SUCCESS;
    const cl_mem dummy = O->buffer; /* bound to absent inputs; never read */
    const int slots = p.n_splits * (p.warps > 0 ? p.warps : 1); /* split states per row */
    const uint64_t part_floats = (uint64_t)(B * Hq * Lq) * (uint64_t)slots * (uint64_t)(p.hdp + 8);
    /* kept by the context: a generation loop allocates nothing per step */
    cl_mem part = p.direct ? dummy
                           : fcl_scratch_buffer(ctx, FCL_SCRATCH_DECODE_PARTIAL, part_floats * sizeof(float), &s);
    cl_mem mask_lens = NULL;
    if (part && mask)
        mask_lens = fcl_scratch_buffer(ctx, FCL_SCRATCH_DECODE_LENS, (uint64_t)B * sizeof(cl_int), &s);
    if (!part || (mask && !mask_lens))
        return s;
    const cl_mem lens_buf = mask ? mask_lens : lens ? lens->buffer : dummy;
    const cl_long mask_v[3] = {mask ? mask->offset : 0, mask && mask->ndim == 2 ? mask->strides[0] : 0,
                               mask ? mask->strides[mask->ndim - 1] : 0};
    const cl_long lens_v[2] = {lens ? lens->offset : 0, lens ? lens->strides[0] : 1};
    const out_args out = {O->buffer, LSE ? LSE->buffer : dummy,
                          {O->offset, O->strides[0], O->strides[1], O->strides[2], LSE ? LSE->offset : 0,
                           LSE ? LSE->strides[0] : 0, LSE ? LSE->strides[1] : 0, LSE ? LSE->strides[2] : 0}};
    const cl_int write_lse = LSE != NULL;
    if (mask) {
        const cl_mem mb = mask->buffer;
        const cl_int lmax = (cl_int)kv.l_max;
        arg_list a = {0};
        arg_add(&a, sizeof(cl_mem), &mb);
        arg_add(&a, sizeof(cl_mem), &mask_lens);
        arg_add(&a, sizeof(cl_int), &lmax);
        arg_add_n(&a, sizeof(cl_long), mask_v, 3);
        const size_t g[2] = {(size_t)p.wg, (size_t)B}, l[2] = {(size_t)p.wg, 1};
        err = set_args(k[0], &a);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, k[0], 2, NULL, g, l, 0, NULL, NULL);
    }
    {
        const cl_mem qb = Q->buffer, mb = mask ? mask->buffer : dummy, ab = r.alibi ? r.alibi->buffer : dummy;
        const cl_mem bufs[8] = {qb, kv.k_buf, kv.v_buf, lens_buf, mb, kv.bt_buf, ab, part};
        /* DECODE_PARTIAL_UNPACK's order: an int16, a long16 and a long8 */
        cl_int ints[16] = {(cl_int)(len_device ? 0 : len), (cl_int)Lq, p.group, (cl_int)D, (cl_int)kv.l_max,
                           p.split_keys, p.n_splits, r.window_left, (cl_int)kv.page_size, (cl_int)kv.num_pages,
                           p.row_blocks, 0, 0, write_lse};
        memcpy(&ints[11], &r.scale, sizeof(cl_float));
        memcpy(&ints[12], &r.softcap, sizeof(cl_float));
        cl_long longs[24] = {Q->offset, Q->strides[0], Q->strides[1], Q->strides[2]};
        const cl_long al[3] = {r.alibi ? r.alibi->offset : 0, r.alibi_sb, r.alibi_sh};
        const cl_long *parts[6] = {kv.k, kv.v, mask_v, kv.bt, al, lens_v};
        const int counts[6] = {4, 4, 3, 3, 3, 2};
        for (int i = 0, n = 4; i < 6; n += counts[i++])
            memcpy(&longs[n], parts[i], (size_t)counts[i] * sizeof(cl_long));
        arg_list a = {0};
        arg_add_n(&a, sizeof(cl_mem), bufs, 8);
        arg_add(&a, sizeof(cl_int16), ints);
        arg_add(&a, sizeof(cl_long16), longs);
        arg_add(&a, sizeof(cl_long8), &longs[16]);
        if (p.direct)
            arg_add_out(&a, &out);
        const size_t g[3] = {(size_t)p.n_splits * (size_t)p.wg, (size_t)(kv.Hkv / p.heads * p.row_blocks),
                             (size_t)B};
        const size_t l[3] = {(size_t)p.wg, 1, 1};
        if (err == CL_SUCCESS)
            err = set_args(k[1], &a);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, k[1], 3, NULL, g, l, 0, NULL, p.direct ? event : NULL);
    }
    if (!p.direct) {
        const cl_int ints[5] = {(cl_int)Lq, (cl_int)Hq, (cl_int)D, slots, write_lse};
        arg_list a = {0};
        arg_add(&a, sizeof(cl_mem), &part);
        arg_add_n(&a, sizeof(cl_int), ints, 5);
        arg_add_out(&a, &out);
        const size_t cw = (size_t)(p.combine_dl * p.combine_lanes);
        const size_t g[2] = {cw, (size_t)(B * Hq * Lq)}, l[2] = {cw, 1};
        if (err == CL_SUCCESS)
            err = set_args(k[2], &a);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, k[2], 2, NULL, g, l, 0, NULL, event);
    }
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the decode kernels");
}
