/* SPDX-License-Identifier: Apache-2.0 */
/* Argument checks shared by the ops. */
#include "core/tensor_checks.h"

#include <stdio.h>

fcl_status fcl_check_tensor(fcl_context ctx, const char *op, fcl_tensor t, const char *name, int ndim)
{
    if (!t)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
    if (t->ctx != ctx)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s belongs to another context", op, name);
    if (t->ndim != ndim)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: %s has %d dims; expected %d", op, name, t->ndim, ndim);
    return FCL_SUCCESS;
}

int fcl_same_shape(fcl_tensor t, const int64_t *shape)
{
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != shape[i])
            return 0;
    return 1;
}

fcl_status fcl_shape_error(fcl_context ctx, const char *op, const char *name, fcl_tensor t, const char *expect,
                           const int64_t *shape, int n)
{
    char got[96], want[96];
    size_t len = (size_t)snprintf(want, sizeof want, "[");
    for (int i = 0; i < n && len < sizeof want; i++)
        len += (size_t)snprintf(want + len, sizeof want - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < sizeof want)
        snprintf(want + len, sizeof want - len, "]");
    return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: %s has shape %s; expected %s %s", op, name,
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

/* Whether delta = sum of c[i] * strides[order[i]] for some integers |c[i]| < shape, trying dims
 * from the largest stride down; exact when the strides nest (each at least the extent of the
 * dims below it), since the rest then stays below the current stride. */
static int reachable(int64_t delta, const int64_t *shape, const int64_t *strides, const int *order, int n)
{
    if (n == 0)
        return delta == 0;
    const int64_t s = strides[order[0]], lim = shape[order[0]] - 1;
    const int64_t q = delta / s; /* truncated: the candidates are q and q -/+ 1 */
    for (int64_t c = q - 1; c <= q + 1; c++)
        if (c >= -lim && c <= lim && reachable(delta - c * s, shape, strides, order + 1, n - 1))
            return 1;
    return 0;
}

/* Element-exact test for two views with one dtype, shape and set of nested strides (e.g. K and
 * V interleaved in one [B, S, 2, H, D] buffer); -1 when it does not apply. */
static int same_layout_overlap(fcl_tensor a, fcl_tensor b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return -1;
    int order[FCL_MAX_DIMS] = {0};
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] != b->shape[i] || a->strides[i] != b->strides[i] || a->strides[i] <= 0)
            return -1;
        order[i] = i;
    }
    for (int i = 1; i < a->ndim; i++) /* dims by stride, largest first */
        for (int k = i; k > 0 && a->strides[order[k]] > a->strides[order[k - 1]]; k--) {
            const int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    for (int i = 0; i + 1 < a->ndim; i++)
        if (a->strides[order[i]] < a->strides[order[i + 1]] * a->shape[order[i + 1]])
            return -1;
    return reachable(b->offset - a->offset, a->shape, a->strides, order, a->ndim);
}

int fcl_overlaps(fcl_tensor a, fcl_tensor b)
{
    if (!a || !b || a->buffer != b->buffer)
        return 0;
    const int exact = same_layout_overlap(a, b);
    if (exact >= 0)
        return exact;
    uint64_t alo, ahi, blo, bhi;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

fcl_status fcl_check_distinct(fcl_context ctx, const char *op, fcl_tensor t, const char *name)
{
    if (!t)
        return FCL_SUCCESS;
    int order[FCL_MAX_DIMS], n = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] > 1) {
            int k = n++;
            for (; k > 0 && t->strides[order[k - 1]] > t->strides[i]; k--)
                order[k] = order[k - 1];
            order[k] = i;
        }
    int64_t reach = 0; /* the farthest element the smaller dims reach, from the first */
    for (int k = 0; k < n; k++) {
        const int d = order[k];
        if (t->strides[d] <= reach)
            return fcl_fail(ctx, FCL_ERR_LAYOUT, "%s: output %s repeats elements (dim %d: %lld elements of stride "
                            "%lld within the %lld the smaller dims span); an output's elements must be distinct",
                            op, name, d, (long long)t->shape[d], (long long)t->strides[d], (long long)reach + 1);
        reach += (t->shape[d] - 1) * t->strides[d];
    }
    return FCL_SUCCESS;
}

fcl_status fcl_check_outputs_apart(fcl_context ctx, const char *op, int n_out, const fcl_tensor *outs,
                                   const char *const *out_names, int n_in, const fcl_tensor *ins,
                                   const char *const *in_names)
{
    for (int i = 0; i < n_out; i++) {
        fcl_status s = fcl_check_distinct(ctx, op, outs[i], out_names[i]);
        if (s != FCL_SUCCESS)
            return s;
        for (int k = i + 1; k < n_out; k++)
            if (fcl_overlaps(outs[i], outs[k]))
                return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: outputs %s and %s overlap in the same buffer", op,
                                out_names[i], out_names[k]);
        for (int k = 0; k < n_in; k++)
            if (fcl_overlaps(outs[i], ins[k]))
                return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: output %s overlaps input %s in the same buffer",
                                op, out_names[i], in_names[k]);
    }
    return FCL_SUCCESS;
}

fcl_status fcl_check_index_tensor(fcl_context ctx, const char *op, fcl_tensor t, const char *name, int ndim)
{
    fcl_status s = fcl_check_tensor(ctx, op, t, name, ndim);
    if (s == FCL_SUCCESS && t->dtype != FCL_I32)
        s = fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s dtype %s must be i32", op, name, fcl_dtype_name(t->dtype));
    return s;
}

fcl_status fcl_check_grads(fcl_context ctx, const char *op, int n, const fcl_tensor *grads, const fcl_tensor *like,
                           const char *const *names, int n_in, const fcl_tensor *inputs)
{
    for (int i = 0; i < n; i++) {
        fcl_status s = fcl_check_tensor(ctx, op, grads[i], names[i], like[i]->ndim);
        if (s != FCL_SUCCESS)
            return s;
        if (!fcl_same_shape(grads[i], like[i]->shape))
            return fcl_shape_error(ctx, op, names[i], grads[i], "shape", like[i]->shape, like[i]->ndim);
        if (grads[i]->dtype != like[i]->dtype)
            return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: %s dtype %s differs from the input dtype %s", op, names[i],
                            fcl_dtype_name(grads[i]->dtype), fcl_dtype_name(like[i]->dtype));
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < n; k++)
            if (k != i && fcl_overlaps(grads[i], grads[k]))
                return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s overlaps %s in the same buffer", op, names[i],
                                names[k]);
        for (int k = 0; k < n_in; k++)
            if (fcl_overlaps(grads[i], inputs[k]))
                return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s overlaps an input in the same buffer", op,
                                names[i]);
    }
    return FCL_SUCCESS;
}
