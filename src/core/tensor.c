/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_tensor: strided views over cl_mem, with checked creation and host copies. */
#include "core/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t fcl_dtype_size(fcl_dtype d)
{
    switch (d) {
    case FCL_F32: case FCL_I32: return 4;
    case FCL_F16: case FCL_BF16: return 2;
    case FCL_I8: return 1;
    }
    return 0;
}

const char *fcl_dtype_name(fcl_dtype d)
{
    switch (d) {
    case FCL_F32: return "f32";
    case FCL_F16: return "f16";
    case FCL_BF16: return "bf16";
    case FCL_I8: return "i8";
    case FCL_I32: return "i32";
    }
    return "?";
}

int fcl_tensor_is_f_activation(fcl_dtype d) { return d == FCL_F32 || d == FCL_F16 || d == FCL_BF16; }

const char *fcl_shape_str(fcl_tensor t, char *buf, size_t n)
{
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (len < n)
        snprintf(buf + len, n - len, "]");
    return buf;
}

/* Highest element index the view can address (inclusive). */
static int64_t last_element(const struct fcl_tensor_s *t)
{
    int64_t last = t->offset;
    for (int i = 0; i < t->ndim; i++)
        last += (t->shape[i] - 1) * t->strides[i];
    return last;
}

/* *acc += n * step when the sum stays within int64 (all three >= 0); else returns 0, *acc kept. */
static int add_product(int64_t *acc, int64_t n, int64_t step)
{
    if (n > 0 && step > (INT64_MAX - *acc) / n)
        return 0;
    *acc += n * step;
    return 1;
}

/* Fills t's geometry after checking it; `what` names the call in messages. The element count
 * times the element size and the highest element the view addresses must fit in int64, so no
 * later index or byte computation overflows. */
static fcl_status set_geometry(fcl_context ctx, struct fcl_tensor_s *t, const char *what, fcl_dtype dtype,
                               int ndim, const int64_t *shape, const int64_t *strides, int64_t offset,
                               size_t buffer_bytes)
{
    if (fcl_dtype_size(dtype) == 0)
        return fcl_fail(ctx, FCL_ERR_DTYPE, "%s: unknown dtype %d", what, (int)dtype);
    if (ndim < 1 || ndim > FCL_MAX_DIMS)
        return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: ndim %d is outside 1..%d", what, ndim, FCL_MAX_DIMS);
    if (!shape)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: shape is NULL", what);
    if (offset < 0)
        return fcl_fail(ctx, FCL_ERR_LAYOUT, "%s: offset %lld is negative", what, (long long)offset);
    t->dtype = dtype;
    t->ndim = ndim;
    t->offset = offset;
    const int64_t es = (int64_t)fcl_dtype_size(dtype);
    int64_t dense = 1; /* elements of the dims after i */
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] < 1 || shape[i] > ((int64_t)1 << 40))
            return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: dim %d is %lld; every dim must be >= 1", what, i,
                            (long long)shape[i]);
        t->shape[i] = shape[i];
        t->strides[i] = strides ? strides[i] : dense;
        if (t->strides[i] < 0)
            return fcl_fail(ctx, FCL_ERR_LAYOUT, "%s: stride %lld of dim %d is negative", what,
                            (long long)t->strides[i], i);
        if (shape[i] > INT64_MAX / es / dense)
            return fcl_fail(ctx, FCL_ERR_SHAPE, "%s: the shape's element count overflows (dim %d of %lld after "
                            "%lld elements of %s; at most INT64_MAX bytes)", what, i, (long long)shape[i],
                            (long long)dense, fcl_dtype_name(dtype));
        dense *= shape[i];
    }
    if (t->strides[ndim - 1] != 1)
        return fcl_fail(ctx, FCL_ERR_LAYOUT, "%s: the last dim must be contiguous (stride 1), got stride %lld",
                        what, (long long)t->strides[ndim - 1]);
    int64_t last = offset;
    for (int i = 0; i < ndim; i++)
        if (!add_product(&last, t->shape[i] - 1, t->strides[i]))
            return fcl_fail(ctx, FCL_ERR_LAYOUT, "%s: the view's extent overflows int64 (offset %lld, dim %d: %lld "
                            "elements of stride %lld)", what, (long long)offset, i, (long long)t->shape[i],
                            (long long)t->strides[i]);
    if ((uint64_t)last >= buffer_bytes / (uint64_t)es)
        return fcl_fail(ctx, FCL_ERR_LAYOUT,
                        "%s: the view reaches element %lld but the buffer holds %llu elements of %s",
                        what, (long long)last, (unsigned long long)(buffer_bytes / (uint64_t)es),
                        fcl_dtype_name(dtype));
    t->buffer_bytes = buffer_bytes;
    return FCL_SUCCESS;
}

static fcl_status new_tensor(fcl_context ctx, cl_mem buffer, const char *what, fcl_dtype dtype, int ndim,
                             const int64_t *shape, const int64_t *strides, int64_t offset, fcl_tensor *out)
{
    size_t bytes = 0;
    cl_int err = clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: buffer is not a valid cl_mem (%s)", what,
                        fcl_cl_error_name(err));
    struct fcl_tensor_s tmp;
    memset(&tmp, 0, sizeof tmp);
    fcl_status s = set_geometry(ctx, &tmp, what, dtype, ndim, shape, strides, offset, bytes);
    if (s != FCL_SUCCESS)
        return s;
    fcl_tensor t = malloc(sizeof *t);
    if (!t)
        return fcl_fail(ctx, FCL_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    *t = tmp;
    t->ctx = ctx;
    t->buffer = buffer;
    clRetainMemObject(buffer);
    *out = t;
    return FCL_SUCCESS;
}

/* A new tensor's bytes (numel x dtype size) must fit the host's size_t, which a 32-bit host's
 * does not where a 64-bit one's does: FCL_ERR_UNSUPPORTED then. Shapes that are invalid or whose
 * bytes pass 63 bits are left to set_geometry's checks. */
static fcl_status check_create_bytes(fcl_context ctx, fcl_dtype dtype, int ndim, const int64_t *shape)
{
    if (!shape || ndim < 1 || ndim > FCL_MAX_DIMS || fcl_dtype_size(dtype) == 0)
        return FCL_SUCCESS;
    uint64_t bytes = fcl_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1 || bytes > (uint64_t)INT64_MAX / (uint64_t)shape[i])
            return FCL_SUCCESS;
        bytes *= (uint64_t)shape[i];
    }
    return fcl_check_host_size(ctx, "fcl_tensor_create: byte size", bytes);
}

fcl_status fcl_tensor_create(fcl_context ctx, fcl_dtype dtype, int ndim, const int64_t *shape, fcl_tensor *out)
{
    FCL_LOCK(ctx);
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_create: ctx is NULL");
    fcl_clear_error(ctx);
    if (!out)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_create: out is NULL");
    *out = NULL;
    struct fcl_tensor_s probe;
    memset(&probe, 0, sizeof probe);
    fcl_status s = check_create_bytes(ctx, dtype, ndim, shape);
    if (s == FCL_SUCCESS)
        s = set_geometry(ctx, &probe, "fcl_tensor_create", dtype, ndim, shape, NULL, 0, SIZE_MAX);
    if (s != FCL_SUCCESS)
        return s;
    size_t bytes = (size_t)(last_element(&probe) + 1) * fcl_dtype_size(dtype);
    if (bytes > ctx->info.max_alloc_bytes)
        return fcl_fail(ctx, FCL_ERR_OUT_OF_MEMORY, "fcl_tensor_create: %zu bytes exceed the device's largest allocation (%llu)",
                        bytes, (unsigned long long)ctx->info.max_alloc_bytes);
    cl_int err;
    cl_mem buf = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS)
        return fcl_fail_cl(ctx, err, "clCreateBuffer");
    s = new_tensor(ctx, buf, "fcl_tensor_create", dtype, ndim, shape, NULL, 0, out);
    clReleaseMemObject(buf); /* the tensor holds its own reference */
    return s;
}

fcl_status fcl_tensor_wrap(fcl_context ctx, cl_mem buffer, fcl_dtype dtype, int ndim, const int64_t *shape,
                           const int64_t *strides, int64_t offset, fcl_tensor *out)
{
    FCL_LOCK(ctx);
    if (!ctx)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_wrap: ctx is NULL");
    fcl_clear_error(ctx);
    if (!out || !buffer)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_wrap: %s is NULL", !out ? "out" : "buffer");
    *out = NULL;
    return new_tensor(ctx, buffer, "fcl_tensor_wrap", dtype, ndim, shape, strides, offset, out);
}

fcl_status fcl_tensor_view(fcl_tensor base, int ndim, const int64_t *shape, const int64_t *strides,
                           int64_t offset, fcl_tensor *out)
{
    FCL_LOCK(base ? base->ctx : NULL);
    if (!base)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_view: base is NULL");
    fcl_clear_error(base->ctx);
    if (!out)
        return fcl_fail(base->ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_view: out is NULL");
    *out = NULL;
    if (offset < 0)
        return fcl_fail(base->ctx, FCL_ERR_LAYOUT, "fcl_tensor_view: offset %lld is negative", (long long)offset);
    if (offset > INT64_MAX - base->offset)
        return fcl_fail(base->ctx, FCL_ERR_LAYOUT, "fcl_tensor_view: offset %lld past base's offset %lld overflows "
                        "int64", (long long)offset, (long long)base->offset);
    return new_tensor(base->ctx, base->buffer, "fcl_tensor_view", base->dtype, ndim, shape, strides,
                      base->offset + offset, out);
}

void fcl_tensor_release(fcl_tensor t)
{
    if (!t)
        return;
    clReleaseMemObject(t->buffer);
    free(t);
}

fcl_dtype fcl_tensor_dtype(fcl_tensor t) { return t ? t->dtype : FCL_F32; }
int fcl_tensor_ndim(fcl_tensor t) { return t ? t->ndim : 0; }
int64_t fcl_tensor_dim(fcl_tensor t, int i) { return (t && i >= 0 && i < t->ndim) ? t->shape[i] : 0; }
int64_t fcl_tensor_stride(fcl_tensor t, int i) { return (t && i >= 0 && i < t->ndim) ? t->strides[i] : 0; }
int64_t fcl_tensor_offset(fcl_tensor t) { return t ? t->offset : 0; }
cl_mem fcl_tensor_buffer(fcl_tensor t) { return t ? t->buffer : NULL; }

int64_t fcl_tensor_numel(fcl_tensor t)
{
    if (!t)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* ------------------------------------------------------------------ host copies */

static void store_elem(fcl_dtype d, unsigned char *p, float x)
{
    switch (d) {
    case FCL_F32: memcpy(p, &x, 4); break;
    case FCL_F16: { uint16_t h = fcl_f32_to_f16(x); memcpy(p, &h, 2); break; }
    case FCL_BF16: { uint16_t h = fcl_f32_to_bf16(x); memcpy(p, &h, 2); break; }
    case FCL_I8: {
        float r = isnan(x) ? 0.0f : nearbyintf(fminf(fmaxf(x, -128.0f), 127.0f));
        int8_t v = (int8_t)r; memcpy(p, &v, 1); break;
    }
    case FCL_I32: {
        double r = isnan(x) ? 0.0 : nearbyint(fmin(fmax((double)x, -2147483648.0), 2147483647.0));
        int32_t v = (int32_t)r; memcpy(p, &v, 4); break;
    }
    }
}

static float load_elem(fcl_dtype d, const unsigned char *p)
{
    switch (d) {
    case FCL_F32: { float x; memcpy(&x, p, 4); return x; }
    case FCL_F16: { uint16_t h; memcpy(&h, p, 2); return fcl_f16_to_f32(h); }
    case FCL_BF16: { uint16_t h; memcpy(&h, p, 2); return fcl_bf16_to_f32(h); }
    case FCL_I8: { int8_t v; memcpy(&v, p, 1); return (float)v; }
    case FCL_I32: { int32_t v; memcpy(&v, p, 4); return (float)v; }
    }
    return 0.0f;
}

/* Whether the strides are the dense row-major ones (host order equals memory order). */
static int is_row_major(fcl_tensor t)
{
    int64_t dense = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] > 1 && t->strides[i] != dense)
            return 0;
        dense *= t->shape[i];
    }
    return 1;
}

/* Moves *off (bytes from the span start) from one element of t to the next in row-major
 * logical order, idx being the element's index: a counter over the dims, no division. */
static void next_element(fcl_tensor t, int64_t *idx, int64_t *off, size_t es)
{
    for (int i = t->ndim - 1; i >= 0; i--) {
        *off += t->strides[i] * (int64_t)es;
        if (++idx[i] < t->shape[i])
            return;
        *off -= t->strides[i] * t->shape[i] * (int64_t)es;
        idx[i] = 0;
    }
}

/* Copies between host elements (row-major, `host_es` bytes each) and the device view.
 * `convert`: 0 raw, 1 float32. `to_device` selects the direction. */
static fcl_status host_copy(fcl_tensor t, void *host, size_t host_es, size_t count, int convert, int to_device,
                            const char *what)
{
    FCL_LOCK(t ? t->ctx : NULL);
    if (!t)
        return fcl_fail(NULL, FCL_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", what);
    fcl_context ctx = t->ctx;
    fcl_clear_error(ctx);
    int64_t numel = fcl_tensor_numel(t);
    if (!host)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: host pointer is NULL", what);
    if ((int64_t)count != numel)
        return fcl_fail(ctx, FCL_ERR_INVALID_ARGUMENT, "%s: %s %zu does not match the tensor's %lld elements%s", what,
                        convert ? "count" : "bytes", convert ? count : count * host_es, (long long)numel,
                        convert ? "" : " times the dtype size");
    size_t es = fcl_dtype_size(t->dtype);
    size_t span = (size_t)(last_element(t) - t->offset + 1) * es;
    size_t start = (size_t)t->offset * es;
    int dense = is_row_major(t);
    unsigned char *buf = (dense && !convert) ? host : malloc(span);
    if (!buf)
        return fcl_fail(ctx, FCL_ERR_OUT_OF_MEMORY, "%s: out of host memory (%zu bytes)", what, span);
    cl_int err = CL_SUCCESS;
    if (!to_device || !dense) /* a strided write keeps the elements between the view's */
        err = clEnqueueReadBuffer(ctx->queue, t->buffer, CL_TRUE, start, span, buf, 0, NULL, NULL);
    if (err == CL_SUCCESS && buf != host) {
        unsigned char *h = host;
        int64_t idx[FCL_MAX_DIMS] = {0}, off = 0;
        for (int64_t k = 0; k < numel; k++, next_element(t, idx, &off, es)) {
            unsigned char *d = buf + off;
            if (to_device && convert) store_elem(t->dtype, d, ((const float *)host)[k]);
            else if (to_device) memcpy(d, h + (size_t)k * es, es);
            else if (convert) ((float *)host)[k] = load_elem(t->dtype, d);
            else memcpy(h + (size_t)k * es, d, es);
        }
    }
    if (err == CL_SUCCESS && to_device)
        err = clEnqueueWriteBuffer(ctx->queue, t->buffer, CL_TRUE, start, span, buf, 0, NULL, NULL);
    if (buf != host)
        free(buf);
    return err == CL_SUCCESS ? FCL_SUCCESS : fcl_fail_cl(ctx, err, to_device ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer");
}

fcl_status fcl_tensor_write_f32(fcl_tensor t, const float *src, size_t count)
{
    return host_copy(t, (void *)src, sizeof(float), count, 1, 1, "fcl_tensor_write_f32");
}

fcl_status fcl_tensor_read_f32(fcl_tensor t, float *dst, size_t count)
{
    return host_copy(t, dst, sizeof(float), count, 1, 0, "fcl_tensor_read_f32");
}

fcl_status fcl_tensor_write_raw(fcl_tensor t, const void *src, size_t bytes)
{
    size_t es = t ? fcl_dtype_size(t->dtype) : 1;
    if (t && bytes % es != 0)
        return fcl_fail(t->ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_write_raw: %zu bytes is not a multiple of %zu", bytes, es);
    return host_copy(t, (void *)src, es, bytes / es, 0, 1, "fcl_tensor_write_raw");
}

fcl_status fcl_tensor_read_raw(fcl_tensor t, void *dst, size_t bytes)
{
    size_t es = t ? fcl_dtype_size(t->dtype) : 1;
    if (t && bytes % es != 0)
        return fcl_fail(t->ctx, FCL_ERR_INVALID_ARGUMENT, "fcl_tensor_read_raw: %zu bytes is not a multiple of %zu", bytes, es);
    return host_copy(t, dst, es, bytes / es, 0, 0, "fcl_tensor_read_raw");
}

struct fcl_tensor_s fcl_scratch_view(fcl_context ctx, cl_mem buffer, fcl_dtype dtype, int ndim,
                                     const int64_t *shape)
{
    struct fcl_tensor_s t;
    memset(&t, 0, sizeof t);
    t.ctx = ctx;
    t.buffer = buffer;
    t.dtype = dtype;
    t.ndim = ndim;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.strides[i] = stride;
        stride *= shape[i];
    }
    t.buffer_bytes = (size_t)stride * fcl_dtype_size(dtype);
    return t;
}
