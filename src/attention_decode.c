/* fcl_attention_decode: checks, the split count, and the launches of cl/attention_decode.cl
 * (mask length when asked, partial states per split, combine). */
#include "attn_params.h"
#include "forward_launch.h"
#include "kv_cache.h"
#include "op_checks.h"
#include "tuning.h"

#include <stdio.h>

static const char *const op = "fcl_attention_decode";
static const char *const sources[] = {"common", "attention_decode"};

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
    if ((s = fcl_resolve_attn_params(ctx, op, params, 0, kv->l_max, B, Hq, D, r)))
        return s;
    if (B > 65535 || Lq * Hq > INT32_MAX / 4)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: B %lld or Lq %lld x Hq beyond the supported range", op,
                        (long long)B, (long long)Lq);
    const fcl_tensor outs[2] = {O, LSE}, ins[6] = {Q, cache->k, cache->v, cache->block_table, lens, mask};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 6; k++)
            if (fcl_overlaps(outs[i], ins[k]) || fcl_overlaps(O, LSE))
                return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: O or LSE overlaps an input or each other", op);
    return FCL_SUCCESS;
}

/* The launch geometry: rows per work-group, key splits. */
typedef struct decode_plan {
    fcl_decode_tiles t;
    int hdp, group, n_rows, row_blocks, n_splits, split_keys;
} decode_plan;

/* Key tiles one work-item may run under the device's loop cap (0 when there is none, -1 when
 * not even one fits); loop iterations per tile and per launch counted generously. */
static long tiles_under_cap(fcl_context ctx, const decode_plan *p, long *per_tile_out, long *fixed_out)
{
    const long n = p->t.block_n, r = p->t.rows, w = p->t.wg, h = p->hdp;
    const long per_tile = (n * h + w - 1) / w + (r * n + w - 1) / w * (h + 1) + r * n * (w == 1 ? h : 0) + 2 * n * r +
                          (r * h + w - 1) / w * (n + 1) + 16;
    const long fixed = 3 * ((r * h + w - 1) / w) + 64;
    *per_tile_out = per_tile;
    *fixed_out = fixed;
    return fcl_tiles_under_loop_cap(ctx, per_tile, fixed);
}

/* Splits so that B * Hkv * row_blocks * splits fills the device (waves per compute unit), and,
 * on loop-capped devices, so that one split's tiles stay under the cap. */
static fcl_status plan_splits(fcl_context ctx, int64_t B, int64_t Hkv, int64_t bound, decode_plan *p)
{
    const long n = p->t.block_n;
    const long tiles = bound > 0 ? (long)((bound + n - 1) / n) : 1;
    const long base = (long)(B * Hkv * p->row_blocks);
    const long target = (long)ctx->info.compute_units * p->t.waves;
    long splits = (target + base - 1) / base;
    splits = splits < 1 ? 1 : splits > tiles ? tiles : splits;
    long split_tiles = (tiles + splits - 1) / splits;
    long per_tile, fixed;
    const long cap = tiles_under_cap(ctx, p, &per_tile, &fixed);
    if (cap > 0 && split_tiles > cap)
        split_tiles = cap;
    p->split_keys = (int)(split_tiles * n);
    p->n_splits = (int)((tiles + split_tiles - 1) / split_tiles);
    return FCL_SUCCESS;
}

/* Builds (or finds) the program; halves the work-group while the kernel cannot run it. */
static fcl_status get_kernels(fcl_context ctx, fcl_dtype dt, const fcl_attn_resolved *r, int len_device, int mask,
                              int paged, int vec, decode_plan *p, cl_kernel k[3])
{
    static const char *const names[3] = {"decode_mask_len", "decode_partial", "decode_combine"};
    for (;;) {
        char opts[256];
        snprintf(opts, sizeof opts,
                 "-DFCL_DTYPE=%d -DHEAD_DIM_PAD=%d -DBLOCK_N=%d -DROWS_WG=%d -DWG_SIZE=%d -DLEN_DEVICE=%d "
                 "-DHAS_MASK=%d -DPAGED=%d -DHAS_SOFTCAP=%d -DHAS_ALIBI=%d -DVEC=%d",
                 (int)dt, p->hdp, p->t.block_n, p->t.rows, p->t.wg, len_device, mask, paged, r->softcap > 0.0f,
                 r->alibi != NULL, vec);
        fcl_status s = FCL_SUCCESS;
        for (int i = 0; i < 3 && s == FCL_SUCCESS; i++)
            s = fcl_get_kernel(ctx, sources, 2, opts, names[i], &k[i]);
        if (s != FCL_SUCCESS)
            return s;
        size_t wg = 0;
        cl_int err = clGetKernelWorkGroupInfo(k[1], ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
        if (err != CL_SUCCESS)
            return fcl_fail_cl(ctx, err, "clGetKernelWorkGroupInfo");
        if (wg >= (size_t)p->t.wg)
            return FCL_SUCCESS;
        if (p->t.wg == 1)
            return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: the decode kernel cannot run on device \"%s\"", op,
                            ctx->info.name);
        p->t.wg /= 2;
    }
}

/* Sets kernel arguments from a list of (size, pointer) pairs. */
static cl_int set_args(cl_kernel k, int n, const size_t *sizes, const void *const *vals)
{
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < n && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, (cl_uint)i, sizes[i], vals[i]);
    return err;
}

fcl_status fcl_attention_decode(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q,
                                const fcl_kv_cache *cache, int64_t len, fcl_tensor lens, fcl_tensor mask,
                                fcl_tensor O, fcl_tensor LSE, cl_event *event)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    fcl_kv_view kv;
    fcl_attn_resolved r;
    fcl_status s = validate(ctx, params, Q, cache, len, lens, mask, O, LSE, &kv, &r);
    if (s != FCL_SUCCESS)
        return s;
    const int64_t B = Q->shape[0], Lq = Q->shape[1], Hq = Q->shape[2], D = Q->shape[3];
    decode_plan p = {.hdp = fcl_pad_head_dim(D), .group = (int)(Hq / kv.Hkv)};
    p.n_rows = p.group * (int)Lq;
    p.t = fcl_tune_decode(ctx, p.hdp, p.n_rows);
    p.row_blocks = (p.n_rows + p.t.rows - 1) / p.t.rows;
    const int len_device = len == -1;
    cl_kernel k[3];
    /* 4-wide K/V loads when every row of the caches starts at a multiple of 4 elements */
    int vec = D % 4 == 0 ? 4 : 1;
    for (int i = 0; i < 4; i++)
        if (kv.k[i] % 4 || kv.v[i] % 4)
            vec = 1;
    /* on loop-capped devices, smaller tiles until one tile fits under the cap */
    for (;;) {
        if ((s = get_kernels(ctx, Q->dtype, &r, len_device, mask != NULL, kv.paged, vec, &p, k)))
            return s;
        long per_tile, fixed;
        if (tiles_under_cap(ctx, &p, &per_tile, &fixed) >= 0)
            break;
        if (p.t.block_n == 1 && p.t.rows == 1)
            return fcl_loop_cap_error(ctx, op, "key", per_tile, fixed);
        if (p.t.block_n >= p.t.rows)
            p.t.block_n /= 2;
        else
            p.t.rows /= 2;
        p.row_blocks = (p.n_rows + p.t.rows - 1) / p.t.rows;
    }
    if ((s = plan_splits(ctx, B, kv.Hkv, len_device ? kv.l_max : len, &p)))
        return s;
    const long limit = fcl_device_loop_limit(ctx);
    if (mask && limit > 0 && kv.l_max / p.t.wg > limit / 2)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: a mask over %lld keys needs more loop iterations than device "
                        "\"%s\" allows", op, (long long)kv.l_max, ctx->info.name);

    cl_int err = CL_SUCCESS;
    const size_t part_floats = (size_t)(B * Hq * Lq) * (size_t)p.n_splits * (size_t)(p.hdp + 2);
    /* kept by the context: a generation loop allocates nothing per step */
    cl_mem part = fcl_scratch_buffer(ctx, FCL_SCRATCH_DECODE_PARTIAL, part_floats * sizeof(float), &s);
    cl_mem mask_lens = NULL;
    if (part && mask)
        mask_lens = fcl_scratch_buffer(ctx, FCL_SCRATCH_DECODE_LENS, (size_t)B * sizeof(cl_int), &s);
    if (!part || (mask && !mask_lens))
        return s;
    const cl_mem dummy = O->buffer; /* bound to absent inputs; never read */
    const cl_mem lens_buf = mask ? mask_lens : lens ? lens->buffer : dummy;
    const cl_long mask_v[3] = {mask ? mask->offset : 0, mask && mask->ndim == 2 ? mask->strides[0] : 0,
                               mask ? mask->strides[mask->ndim - 1] : 0};
    const cl_long lens_v[2] = {lens ? lens->offset : 0, lens ? lens->strides[0] : 1};
    if (mask) {
        const cl_mem mb = mask->buffer;
        const cl_int lmax = (cl_int)kv.l_max;
        const size_t sz[6] = {sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_int), 8, 8, 8};
        const void *const v[6] = {&mb, &mask_lens, &lmax, &mask_v[0], &mask_v[1], &mask_v[2]};
        const size_t g[2] = {(size_t)p.t.wg, (size_t)B}, l[2] = {(size_t)p.t.wg, 1};
        err = set_args(k[0], 6, sz, v);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, k[0], 2, NULL, g, l, 0, NULL, NULL);
    }
    {
        const cl_mem qb = Q->buffer, mb = mask ? mask->buffer : dummy, ab = r.alibi ? r.alibi->buffer : dummy;
        const cl_int ints[11] = {(cl_int)(len_device ? 0 : len), (cl_int)Lq, p.group, (cl_int)D, (cl_int)kv.l_max,
                                 p.split_keys, p.n_splits, r.window_left, (cl_int)kv.page_size,
                                 (cl_int)kv.num_pages, p.row_blocks};
        const cl_float fl[2] = {r.scale, r.softcap};
        const cl_long qv[4] = {Q->offset, Q->strides[0], Q->strides[1], Q->strides[2]};
        const cl_long al[3] = {r.alibi ? r.alibi->offset : 0, r.alibi_sb, r.alibi_sh};
        size_t sz[45];
        const void *v[45];
        int n = 0;
        const cl_mem *bufs[8] = {&qb, &kv.k_buf, &kv.v_buf, &lens_buf, &mb, &kv.bt_buf, &ab, &part};
        for (int i = 0; i < 8; i++, n++) {
            sz[n] = sizeof(cl_mem);
            v[n] = bufs[i];
        }
        for (int i = 0; i < 11; i++, n++) {
            sz[n] = sizeof(cl_int);
            v[n] = &ints[i];
        }
        for (int i = 0; i < 2; i++, n++) {
            sz[n] = sizeof(cl_float);
            v[n] = &fl[i];
        }
        const cl_long *longs[7] = {qv, kv.k, kv.v, mask_v, kv.bt, al, lens_v};
        const int counts[7] = {4, 4, 4, 3, 3, 3, 2};
        for (int g = 0; g < 7; g++)
            for (int i = 0; i < counts[g]; i++, n++) {
                sz[n] = sizeof(cl_long);
                v[n] = &longs[g][i];
            }
        const size_t g[3] = {(size_t)p.n_splits * (size_t)p.t.wg, (size_t)(kv.Hkv * p.row_blocks), (size_t)B};
        const size_t l[3] = {(size_t)p.t.wg, 1, 1};
        if (err == CL_SUCCESS)
            err = set_args(k[1], n, sz, v);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, k[1], 3, NULL, g, l, 0, NULL, NULL);
    }
    {
        const cl_mem ob = O->buffer, lb = LSE ? LSE->buffer : dummy;
        const cl_int ints[5] = {(cl_int)Lq, (cl_int)Hq, (cl_int)D, p.n_splits, LSE != NULL};
        const cl_long ov[4] = {O->offset, O->strides[0], O->strides[1], O->strides[2]};
        const cl_long lv[4] = {LSE ? LSE->offset : 0, LSE ? LSE->strides[0] : 0, LSE ? LSE->strides[1] : 0,
                               LSE ? LSE->strides[2] : 0};
        size_t sz[16] = {sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem)};
        const void *v[16] = {&part, &ob, &lb};
        for (int i = 0; i < 5; i++) {
            sz[3 + i] = sizeof(cl_int);
            v[3 + i] = &ints[i];
        }
        for (int i = 0; i < 4; i++) {
            sz[8 + i] = sz[12 + i] = sizeof(cl_long);
            v[8 + i] = &ov[i];
            v[12 + i] = &lv[i];
        }
        const size_t g[2] = {((size_t)D + 31) / 32 * 32, (size_t)(B * Hq * Lq)}, l[2] = {32, 1};
        if (err == CL_SUCCESS)
            err = set_args(k[2], 16, sz, v);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, k[2], 2, NULL, g, l, 0, NULL, event);
    }
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing the decode kernels");
}
