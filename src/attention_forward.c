/* fcl_attention_forward: argument checks, kernel variant choice and launch. */
#include "attn_params.h"
#include "internal.h"
#include "tuning.h"

#include <stdio.h>
#include <string.h>

static const char *const forward_sources[] = {"common", "attention_forward"};

static fcl_status check_tensor(fcl_context ctx, fcl_tensor t, const char *name, int ndim)
{
    if (!t)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_attention_forward: %s is NULL", name);
    if (t->ctx != ctx)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_attention_forward: %s belongs to another context", name);
    if (t->ndim != ndim)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "fcl_attention_forward: %s has %d dims; expected %d", name, t->ndim, ndim);
    return FCL_SUCCESS;
}

static int same_shape(fcl_tensor a, const int64_t *shape)
{
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != shape[i])
            return 0;
    return 1;
}

static fcl_status shape_error(fcl_context ctx, const char *name, fcl_tensor t, const char *expect, const int64_t *s,
                              int n)
{
    char got[96], want[96];
    size_t len = (size_t)snprintf(want, sizeof want, "[");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(want + len, sizeof want - len, "%s%lld", i ? ", " : "", (long long)s[i]);
    snprintf(want + len, sizeof want - len, "]");
    return fcl_fail(ctx, FCL_ERR_SHAPE, "fcl_attention_forward: %s has shape %s; expected %s %s", name,
                    fcl_shape_str(t, got, sizeof got), expect, want);
}

/* Byte range [lo, hi) a view can touch. */
static void byte_range(fcl_tensor t, uint64_t *lo, uint64_t *hi)
{
    int64_t last = t->offset;
    for (int i = 0; i < t->ndim; i++)
        last += (t->shape[i] - 1) * t->strides[i];
    *lo = (uint64_t)t->offset * fcl_dtype_size(t->dtype);
    *hi = (uint64_t)(last + 1) * fcl_dtype_size(t->dtype);
}

static int overlaps(fcl_tensor a, fcl_tensor b)
{
    if (!a || !b || a->buffer != b->buffer)
        return 0;
    uint64_t alo, ahi, blo, bhi;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

static fcl_status validate(fcl_context ctx, fcl_tensor Q, fcl_tensor K, fcl_tensor V, fcl_tensor O, fcl_tensor LSE)
{
    static const char *op = "fcl_attention_forward";
    fcl_status s;
    if ((s = check_tensor(ctx, Q, "Q", 4)) || (s = check_tensor(ctx, K, "K", 4)) ||
        (s = check_tensor(ctx, V, "V", 4)) || (s = check_tensor(ctx, O, "O", 4)) ||
        (LSE && (s = check_tensor(ctx, LSE, "LSE", 3))))
        return s;
    if (!fcl_tensor_is_f_activation(Q->dtype))
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: Q dtype %s is not f32, f16 or bf16", op, fcl_dtype_name(Q->dtype));
    fcl_tensor same[3] = {K, V, O};
    const char *names[3] = {"K", "V", "O"};
    for (int i = 0; i < 3; i++)
        if (same[i]->dtype != Q->dtype)
            return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s dtype %s differs from Q dtype %s", op, names[i],
                            fcl_dtype_name(same[i]->dtype), fcl_dtype_name(Q->dtype));
    if (LSE && LSE->dtype != FCL_F32)
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: LSE dtype %s must be f32", op, fcl_dtype_name(LSE->dtype));

    const int64_t B = Q->shape[0], Sq = Q->shape[1], Hq = Q->shape[2], D = Q->shape[3];
    const int64_t Sk = K->shape[1], Hkv = K->shape[2];
    if (K->shape[3] != D)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: Q head_dim %lld != K head_dim %lld", op, (long long)D,
                        (long long)K->shape[3]);
    const int64_t kshape[4] = {B, Sk, Hkv, D};
    if (!same_shape(K, kshape))
        return shape_error(ctx, "K", K, "(batch must match Q's) ", kshape, 4);
    if (!same_shape(V, kshape))
        return shape_error(ctx, "V", V, "like K", kshape, 4);
    if (!same_shape(O, Q->shape))
        return shape_error(ctx, "O", O, "like Q", Q->shape, 4);
    const int64_t lshape[3] = {B, Hq, Sq};
    if (LSE && !same_shape(LSE, lshape))
        return shape_error(ctx, "LSE", LSE, "[B, Hq, Sq] =", lshape, 3);
    if (Hq % Hkv != 0)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: Hq %lld is not a multiple of Hkv %lld", op, (long long)Hq,
                        (long long)Hkv);
    if (D > FCL_MAX_HEAD_DIM)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: head_dim %lld exceeds the limit %d", op, (long long)D,
                        FCL_MAX_HEAD_DIM);
    if (Sq > INT32_MAX / 2 || Sk > INT32_MAX / 2 || B > 65535 || Hq > 65535)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: B %lld, Sq %lld, Sk %lld or Hq %lld beyond the supported range",
                        op, (long long)B, (long long)Sq, (long long)Sk, (long long)Hq);
    if (overlaps(O, Q) || overlaps(O, K) || overlaps(O, V) || overlaps(O, LSE))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: O overlaps Q, K, V or LSE in the same buffer", op);
    return FCL_SUCCESS;
}

static int pad_head_dim(int64_t D)
{
    return D <= 16 ? 16 : (int)((D + 31) / 32 * 32);
}

/* Builds (or finds) the kernel variant; halves BLOCK_M if the compiled kernel cannot run
 * BLOCK_M / ROWS work-items (register pressure on GPUs). */
static fcl_status get_forward_kernel(fcl_context ctx, fcl_dtype dtype, int hdp, const fcl_attn_resolved *r,
                                     fcl_forward_tiles *tiles, cl_kernel *out)
{
    for (;;) {
        char opts[256];
        snprintf(opts, sizeof opts,
                 "-DFCL_DTYPE=%d -DHEAD_DIM_PAD=%d -DBLOCK_M=%d -DBLOCK_N=%d -DROWS=%d -DSMEM_FLOATS=%d "
                 "-DHAS_SOFTCAP=%d -DHAS_MASK=%d -DHAS_ALIBI=%d",
                 (int)dtype, hdp, tiles->block_m, tiles->block_n, tiles->rows, fcl_forward_smem_floats(tiles, hdp),
                 r->softcap > 0.0f, r->mask != NULL,
                 r->alibi != NULL);
        fcl_status s = fcl_get_kernel(ctx, forward_sources, 2, opts, "attention_forward", out);
        if (s != FCL_SUCCESS)
            return s;
        size_t wg = 0;
        cl_int err = clGetKernelWorkGroupInfo(*out, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
        if (err != CL_SUCCESS)
            return fcl_fail_cl(ctx, err, "clGetKernelWorkGroupInfo");
        if (wg >= (size_t)(tiles->block_m / tiles->rows) || tiles->block_m == tiles->rows)
            return FCL_SUCCESS;
        tiles->block_m /= 2;
    }
}

/* On devices that cap the loop iterations of a work-item, the keys are processed in chunks
 * (one launch each) whose iterations stay well under the cap; elsewhere one chunk. */
static fcl_status chunk_for_loop_limit(fcl_context ctx, const fcl_forward_tiles *t, int hdp, int64_t Sk,
                                       int64_t *chunk_keys)
{
    const long limit = fcl_device_loop_limit(ctx);
    if (limit <= 0)
        return FCL_SUCCESS;
    const long m = t->rows, n = t->block_n, wg = t->block_m / t->rows;
    /* loop iterations per key tile and outside the tile loop, counted generously */
    const long per_tile = (n * hdp + wg - 1) / wg + n + m * (n + 1) + hdp * (1 + m * (n + 1)) +
                          m * (2 + 2 * n + hdp + n * hdp) + 8;
    const long fixed = m * (3 * hdp + 8) + (t->block_m * hdp + wg - 1) / wg + 64;
    const long tiles_per_chunk = (limit * 3 / 4 - fixed) / per_tile;
    if (tiles_per_chunk < 1)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "fcl_attention_forward: one key tile needs %ld loop iterations, "
                        "more than device \"%s\" allows (%ld)", per_tile + fixed, ctx->info.name, limit);
    if (tiles_per_chunk * n < Sk)
        *chunk_keys = tiles_per_chunk * n;
    return FCL_SUCCESS;
}

fcl_status fcl_attention_forward(fcl_context ctx, const fcl_attn_params *params, fcl_tensor Q, fcl_tensor K,
                                 fcl_tensor V, fcl_tensor O, fcl_tensor LSE, cl_event *event)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_attention_forward: ctx is NULL");
    fcl_clear_error(ctx);
    fcl_status s = validate(ctx, Q, K, V, O, LSE);
    if (s != FCL_SUCCESS)
        return s;
    const int64_t B = Q->shape[0], Sq = Q->shape[1], Hq = Q->shape[2], D = Q->shape[3];
    const int64_t Sk = K->shape[1], Hkv = K->shape[2];
    fcl_attn_resolved r;
    if ((s = fcl_resolve_attn_params(ctx, "fcl_attention_forward", params, B, Sk, Hq, D, &r)) != FCL_SUCCESS)
        return s;

    const int hdp = pad_head_dim(D);
    fcl_forward_tiles tiles = fcl_tune_forward(ctx, hdp);
    cl_kernel kernel;
    if ((s = get_forward_kernel(ctx, Q->dtype, hdp, &r, &tiles, &kernel)) != FCL_SUCCESS)
        return s;
    int64_t chunk_keys = Sk;
    if ((s = chunk_for_loop_limit(ctx, &tiles, hdp, Sk, &chunk_keys)) != FCL_SUCCESS)
        return s;
    const int64_t n_chunks = (Sk + chunk_keys - 1) / chunk_keys;
    cl_mem state = NULL;
    if (n_chunks > 1) {
        cl_int e;
        state = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, (size_t)(B * Hq * Sq * (hdp + 2)) * sizeof(float), NULL, &e);
        if (e != CL_SUCCESS)
            return fcl_fail_cl(ctx, e, "clCreateBuffer (attention_forward chunk state)");
    }
    /* Absent optional tensors are bound to O's buffer; the kernel never touches them. */
    const cl_mem bufs[8] = {Q->buffer, K->buffer, V->buffer, O->buffer, LSE ? LSE->buffer : O->buffer,
                            r.mask ? r.mask->buffer : O->buffer, r.alibi ? r.alibi->buffer : O->buffer,
                            state ? state : O->buffer};
    const cl_long longs[26] = {
        Q->offset, Q->strides[0], Q->strides[1], Q->strides[2],
        K->offset, K->strides[0], K->strides[1], K->strides[2],
        V->offset, V->strides[0], V->strides[1], V->strides[2],
        O->offset, O->strides[0], O->strides[1], O->strides[2],
        LSE ? LSE->offset : 0, LSE ? LSE->strides[0] : 0, LSE ? LSE->strides[1] : 0, LSE ? LSE->strides[2] : 0,
        r.mask ? r.mask->offset : 0, r.mask_sb, r.mask_ss,
        r.alibi ? r.alibi->offset : 0, r.alibi_sb, r.alibi_sh};
    const cl_int ints[7] = {(cl_int)Sq, (cl_int)Sk, (cl_int)D, (cl_int)(Hq / Hkv), r.window_left, r.window_right,
                            LSE != NULL};
    const cl_float floats[2] = {r.scale, r.softcap};
    cl_int err = CL_SUCCESS;
    cl_uint arg = 0;
    for (int i = 0; i < 8 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(kernel, arg++, sizeof(cl_mem), &bufs[i]);
    const cl_uint chunk_arg = arg; /* key_lo, key_hi, load_state, save_state: set per launch */
    arg += 4;
    for (int i = 0; i < 7 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(kernel, arg++, sizeof(cl_int), &ints[i]);
    for (int i = 0; i < 2 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(kernel, arg++, sizeof(cl_float), &floats[i]);
    for (int i = 0; i < 26 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(kernel, arg++, sizeof(cl_long), &longs[i]);
    if (err != CL_SUCCESS) {
        if (state)
            clReleaseMemObject(state);
        return fcl_fail_cl(ctx, err, "clSetKernelArg (attention_forward)");
    }
    size_t local[3] = {(size_t)(tiles.block_m / tiles.rows), 1, 1};
    size_t global[3] = {(size_t)((Sq + tiles.block_m - 1) / tiles.block_m) * local[0], (size_t)Hq, (size_t)B};
    for (int64_t c = 0; c < n_chunks && err == CL_SUCCESS; c++) {
        const cl_int chunk[4] = {(cl_int)(c * chunk_keys), (cl_int)((c + 1) * chunk_keys < Sk ? (c + 1) * chunk_keys - 1 : Sk - 1),
                                 c > 0, c + 1 < n_chunks};
        for (cl_uint i = 0; i < 4 && err == CL_SUCCESS; i++)
            err = clSetKernelArg(kernel, chunk_arg + i, sizeof(cl_int), &chunk[i]);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, kernel, 3, NULL, global, local, 0, NULL,
                                     c + 1 == n_chunks ? event : NULL);
    }
    if (state)
        clReleaseMemObject(state); /* freed once the launches that use it complete */
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "enqueueing attention_forward");
    return FCL_SUCCESS;
}
