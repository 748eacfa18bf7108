/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_kv_cache_append, and the KV-cache descriptor checks shared with decode. */
#include "ops/kv_cache.h"

#include "core/tensor_checks.h"
#include "programs/program_cache.h"

#include <stdio.h>

fcl_status fcl_check_kv_cache(fcl_context ctx, const char *op, const fcl_kv_cache *cache, int64_t B,
                              fcl_kv_view *out)
{
    if (!cache)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: cache is NULL", op);
    fcl_tensor k = cache->k, v = cache->v, bt = cache->block_table;
    fcl_status s;
    if ((s = fcl_check_tensor(ctx, op, k, "cache.k", 4)) || (s = fcl_check_tensor(ctx, op, v, "cache.v", 4)))
        return s;
    if (!fcl_tensor_is_f_activation(k->dtype))
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: cache.k dtype %s is not f32, f16 or bf16", op,
                        fcl_dtype_name(k->dtype));
    if (v->dtype != k->dtype)
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: cache.v dtype %s differs from cache.k dtype %s", op,
                        fcl_dtype_name(v->dtype), fcl_dtype_name(k->dtype));
    if (!fcl_same_shape(v, k->shape))
        return fcl_shape_error(ctx, op, "cache.v", v, "like cache.k", k->shape, 4);
    if (fcl_overlaps(k, v))
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: cache.k and cache.v overlap in the same buffer", op);
    out->paged = bt != NULL;
    out->dtype = k->dtype;
    out->Hkv = k->shape[2];
    out->D = k->shape[3];
    if (bt) {
        if ((s = fcl_check_index_tensor(ctx, op, bt, "cache.block_table", 2)))
            return s;
        if (bt->shape[0] != B)
            return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: cache.block_table has %lld rows; expected B = %lld", op,
                            (long long)bt->shape[0], (long long)B);
        out->page_size = k->shape[1];
        out->num_pages = k->shape[0];
        out->l_max = bt->shape[1] * k->shape[1];
        out->bt[0] = bt->offset;
        out->bt[1] = bt->strides[0];
        out->bt[2] = bt->strides[1];
        out->bt_buf = bt->buffer;
    } else {
        if (k->shape[0] != B)
            return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: cache.k has batch %lld; expected B = %lld", op,
                            (long long)k->shape[0], (long long)B);
        out->page_size = out->l_max = k->shape[1];
        out->num_pages = B;
        out->bt[0] = out->bt[1] = out->bt[2] = 0;
        out->bt_buf = k->buffer;
    }
    if (out->l_max > INT32_MAX / 2 || out->num_pages > INT32_MAX)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: cache length %lld beyond the supported range", op,
                        (long long)out->l_max);
    const fcl_tensor t[2] = {k, v};
    cl_long *dst[2] = {out->k, out->v};
    for (int i = 0; i < 2; i++) {
        dst[i][0] = t[i]->offset;
        for (int d = 0; d < 3; d++)
            dst[i][1 + d] = t[i]->strides[d];
    }
    out->k_buf = k->buffer;
    out->v_buf = v->buffer;
    return FCL_SUCCESS;
}

static const char *const op = "fcl_kv_cache_append";

static fcl_status validate(fcl_context ctx, const fcl_kv_cache *cache, fcl_tensor K_new, fcl_tensor V_new,
                           int64_t pos, fcl_tensor positions, fcl_kv_view *kv)
{
    fcl_status s;
    if ((s = fcl_check_tensor(ctx, op, K_new, "K_new", 4)) || (s = fcl_check_tensor(ctx, op, V_new, "V_new", 4)))
        return s;
    const int64_t B = K_new->shape[0], L_new = K_new->shape[1];
    if ((s = fcl_check_kv_cache(ctx, op, cache, B, kv)))
        return s;
    if (K_new->dtype != kv->dtype || V_new->dtype != kv->dtype)
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: K_new %s / V_new %s must have the cache's dtype %s", op,
                        fcl_dtype_name(K_new->dtype), fcl_dtype_name(V_new->dtype), fcl_dtype_name(kv->dtype));
    const int64_t shape[4] = {B, L_new, kv->Hkv, kv->D};
    if (!fcl_same_shape(K_new, shape))
        return fcl_shape_error(ctx, op, "K_new", K_new, "[B, L_new, Hkv, D] with the cache's Hkv, D:", shape, 4);
    if (!fcl_same_shape(V_new, shape))
        return fcl_shape_error(ctx, op, "V_new", V_new, "like K_new", shape, 4);
    if (positions) {
        if (pos != -1)
            return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: pos is %lld but positions is given; pass pos = -1 "
                            "with device positions", op, (long long)pos);
        if ((s = fcl_check_index_tensor(ctx, op, positions, "positions", 1)))
            return s;
        if (positions->shape[0] != B)
            return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: positions has %lld entries; expected B = %lld", op,
                            (long long)positions->shape[0], (long long)B);
    } else if (pos < 0 || pos > kv->l_max - L_new) { /* not pos + L_new: pos may be near INT64_MAX */
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: pos %lld + L_new %lld exceeds the cache length %lld "
                        "(or pos < 0)", op, (long long)pos, (long long)L_new, (long long)kv->l_max);
    }
    if ((s = fcl_check_distinct(ctx, op, cache->k, "cache.k")) || (s = fcl_check_distinct(ctx, op, cache->v, "cache.v")))
        return s;
    const fcl_tensor news[2] = {K_new, V_new}, caches[2] = {cache->k, cache->v};
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 2; c++)
            if (fcl_overlaps(news[i], caches[c]) || fcl_overlaps(cache->block_table, caches[c]) ||
                fcl_overlaps(positions, caches[c]))
                return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: an input overlaps the cache it writes", op);
    if (L_new * kv->Hkv > INT32_MAX || B > 65535)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s: L_new %lld x Hkv or B %lld beyond the supported range", op,
                        (long long)L_new, (long long)B);
    return FCL_SUCCESS;
}

fcl_status fcl_kv_cache_append(fcl_context ctx, const fcl_kv_cache *cache, fcl_tensor K_new, fcl_tensor V_new,
                               int64_t pos, fcl_tensor positions, cl_event *event)
{
    FCL_LOCK(ctx);
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    fcl_clear_error(ctx);
    fcl_kv_view kv;
    fcl_status s = validate(ctx, cache, K_new, V_new, pos, positions, &kv);
    if (s != FCL_SUCCESS)
        return s;
    static const char *const sources[] = {"kv_cache"};
    char opts[128];
    snprintf(opts, sizeof opts, "-DELEM_BYTES=%d -DPOS_DEVICE=%d -DPAGED=%d", (int)fcl_dtype_size(kv.dtype),
             positions != NULL, kv.paged);
    cl_kernel k;
    if ((s = fcl_get_kernel(ctx, sources, 1, opts, "kv_cache_append", &k)))
        return s;
    const int64_t B = K_new->shape[0], L_new = K_new->shape[1];
    const cl_mem bufs[6] = {K_new->buffer, V_new->buffer, kv.k_buf, kv.v_buf,
                            positions ? positions->buffer : kv.k_buf, kv.bt_buf};
    const cl_int ints[6] = {(cl_int)(positions ? 0 : pos), (cl_int)L_new, (cl_int)kv.D, (cl_int)kv.l_max,
                            (cl_int)kv.page_size, (cl_int)kv.num_pages};
    cl_long longs[21];
    const fcl_tensor news[2] = {K_new, V_new};
    for (int i = 0; i < 2; i++) {
        longs[4 * i] = news[i]->offset;
        for (int d = 0; d < 3; d++)
            longs[4 * i + 1 + d] = news[i]->strides[d];
    }
    for (int i = 0; i < 4; i++) {
        longs[8 + i] = kv.k[i];
        longs[12 + i] = kv.v[i];
    }
    longs[16] = positions ? positions->offset : 0;
    longs[17] = positions ? positions->strides[0] : 0;
    for (int i = 0; i < 3; i++)
        longs[18 + i] = kv.bt[i];
    cl_int err = CL_SUCCESS;
    cl_uint arg = 0;
    for (int i = 0; i < 6 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_mem), &bufs[i]);
    for (int i = 0; i < 6 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_int), &ints[i]);
    for (int i = 0; i < 21 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, arg++, sizeof(cl_long), &longs[i]);
    /* an explicit work-group size, so the compiled kernel does not depend on the shape */
    const size_t global[3] = {((size_t)kv.D + 31) / 32 * 32, (size_t)(L_new * kv.Hkv), (size_t)B};
    const size_t local[3] = {32, 1, 1};
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(ctx->queue, k, 3, NULL, global, local, 0, NULL, event);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, "enqueueing kv_cache_append");
}
