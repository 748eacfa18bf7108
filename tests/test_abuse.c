/*
 * Regression tests of the defects an outside probe found by fuzzing flashcl 0.16.0 (issue 28):
 * each case is an input that crashed the process, gave a silently wrong result or was accepted
 * though it breaks the documented rules. Rejected calls must return their exact status with a
 * sentence, give no event and leave every byte of the outputs' buffers as it was; accepted
 * ones must give what the equivalent well-formed call gives, bit for bit.
 */
#include "support.h"
#include "support_varlen.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ helpers */

static cl_mem new_buffer(fcl_context ctx, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    cr_assert(err == CL_SUCCESS, "clCreateBuffer(%zu): %d", bytes, (int)err);
    return m;
}

static fcl_tensor wrap(fcl_context ctx, cl_mem m, fcl_dtype dt, int ndim, const int64_t *shape,
                       const int64_t *strides, int64_t offset)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_wrap(ctx, m, dt, ndim, shape, strides, offset, &t);
    cr_assert(st == FCL_SUCCESS, "fcl_tensor_wrap: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    return t;
}

/* ------------------------------------------------------------------ 1, 2: tensor geometry */

/* A view whose extent overflows int64 was accepted (shape {9,1,1,4}, strides {2^61,4,4,1} over
 * 64 bytes: reading it or writing it as an output crashed). */
Test(abuse, view_extent_overflow_rejected)
{
    fcl_context ctx = support_context();
    cl_mem m = new_buffer(ctx, 64);
    const int64_t big = (int64_t)1 << 61;
    const struct { int64_t shape[4], strides[4], offset; } cases[] = {
        {{9, 1, 1, 4}, {big, 4, 4, 1}, 0},              /* 8 * 2^61 = 2^64 */
        {{3, 1, 1, 4}, {(int64_t)1 << 62, 4, 4, 1}, 0}, /* 2 * 2^62 = 2^63 */
        {{2, 2, 1, 4}, {INT64_MAX / 2 + 1, INT64_MAX / 2 + 1, 4, 1}, 0},
        {{1, 1, 2, 4}, {4, 4, INT64_MAX, 1}, 0},
        {{1, 1, 2, 4}, {4, 4, 8, 1}, INT64_MAX - 4}, /* the offset plus the extent */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        fcl_tensor t = (fcl_tensor)&cases[c];
        fcl_status st = fcl_tensor_wrap(ctx, m, FCL_F32, 4, cases[c].shape, cases[c].strides, cases[c].offset, &t);
        cr_assert(st == FCL_ERR_LAYOUT, "case %zu: fcl_tensor_wrap gave %s (%s)", c, fcl_status_string(st),
                  fcl_last_error(ctx));
        cr_assert(t == NULL, "case %zu: *out not cleared", c);
        support_assert_sentence(fcl_last_error(ctx));
    }
    /* the same through fcl_tensor_view of a valid base */
    const int64_t n16[1] = {16};
    fcl_tensor base = wrap(ctx, m, FCL_F32, 1, n16, NULL, 0);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        fcl_tensor t = NULL;
        fcl_status st = fcl_tensor_view(base, 4, cases[c].shape, cases[c].strides, cases[c].offset, &t);
        cr_assert(st == FCL_ERR_LAYOUT && t == NULL, "case %zu: fcl_tensor_view gave %s (%s)", c,
                  fcl_status_string(st), fcl_last_error(ctx));
    }
    fcl_tensor_release(base);
    clReleaseMemObject(m);
    fcl_context_release(ctx);
}

/* fcl_tensor_create accepted {4098, 538037401, 32681, 256} (2^64 + 512 elements) with a 2048-byte
 * buffer; views whose element count overflows (broadcast strides) were accepted too. */
Test(abuse, element_count_overflow_rejected)
{
    fcl_context ctx = support_context();
    const int64_t shape[4] = {4098, 538037401, 32681, 256};
    fcl_tensor t = (fcl_tensor)shape;
    fcl_status st = fcl_tensor_create(ctx, FCL_F32, 4, shape, &t);
    cr_assert(st == FCL_ERR_SHAPE && t == NULL, "fcl_tensor_create: %s (%s)", fcl_status_string(st),
              fcl_last_error(ctx));
    support_assert_sentence(fcl_last_error(ctx));
    const int64_t two31[4] = {(int64_t)1 << 31, (int64_t)1 << 31, 2, 1}; /* 2^63 elements */
    st = fcl_tensor_create(ctx, FCL_I8, 4, two31, &t);
    cr_assert(st == FCL_ERR_SHAPE && t == NULL, "fcl_tensor_create 2^63: %s (%s)", fcl_status_string(st),
              fcl_last_error(ctx));
    /* broadcast views address one element but count 2^120, or 2^62 elements of 4 bytes */
    cl_mem m = new_buffer(ctx, 16);
    const int64_t huge[4] = {(int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40, 1}, zero[4] = {0, 0, 0, 1};
    const int64_t wide[4] = {(int64_t)1 << 31, (int64_t)1 << 31, 1, 1};
    st = fcl_tensor_wrap(ctx, m, FCL_F32, 4, huge, zero, 0, &t);
    cr_assert(st == FCL_ERR_SHAPE && t == NULL, "wrap 2^120: %s (%s)", fcl_status_string(st), fcl_last_error(ctx));
    st = fcl_tensor_wrap(ctx, m, FCL_F32, 4, wide, zero, 0, &t);
    cr_assert(st == FCL_ERR_SHAPE && t == NULL, "wrap 2^62 x 4 bytes: %s (%s)", fcl_status_string(st),
              fcl_last_error(ctx));
    clReleaseMemObject(m);
    fcl_context_release(ctx);
}
