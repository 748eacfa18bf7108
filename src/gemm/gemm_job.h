/* SPDX-License-Identifier: Apache-2.0 */
/* One strided GEMM of the projection ops, as flashcl's kernels take it: the portable one
 * (cl/portable/linear.cl, launched by linear.c) and the NVIDIA tensor-core one
 * (cl/nvidia/linear_mma.cl, linear_mma.c). */
#ifndef FLASHCL_GEMM_JOB_H
#define FLASHCL_GEMM_JOB_H

#include "core/internal.h"

/* C[m, n] (+)= sum_k A[m, k] B[k, n] (* scale) (+ bias[n]): element (m, k) of A at a + a_off +
 * m * a_sm + k * a_sk, and likewise B and C (element strides of the buffers). */
typedef struct gemm_job {
    int64_t M, N, K;
    cl_mem a;
    fcl_dtype a_dtype;
    cl_long a_off, a_sm, a_sk;
    cl_mem b;
    fcl_dtype b_dtype;
    cl_long b_off, b_sk, b_sn;
    fcl_tensor scale; /* I8 B only */
    int scale_on;     /* 1: indexed by n, 2: by k */
    cl_long scale_k0; /* SCALE_ON 2: scale rows skipped (the start of a K chunk) */
    fcl_tensor bias;  /* [N] in A's dtype, or NULL */
    cl_mem c;
    fcl_dtype c_dtype; /* F32 or A's dtype */
    cl_long c_off, c_sm, c_sn;
    int accumulate;
} gemm_job;

/* Sets the 21 arguments of a GEMM kernel for g (cl/portable/linear.cl's gemm and
 * cl/nvidia/linear_mma.cl's gemm_mma take the same): A, B, scale, bias, C; M, N, K; the offsets
 * and strides. */
cl_int fcl_gemm_set_args(cl_kernel k, const gemm_job *g);

/* Enqueues kernel k, a tensor-core GEMM whose work-groups of `wg` work-items each compute a
 * tile_m x tile_n block of C (group id 0 along n, 1 along m), for g and sets *done; *done stays 0
 * and nothing is enqueued when the compiled kernel cannot run work-groups of wg (its registers):
 * the caller then runs another kernel. `what` ("enqueueing ...") names the step in messages. */
fcl_status fcl_gemm_enqueue_blocks(fcl_context ctx, cl_kernel k, const gemm_job *g, size_t wg, int tile_m, int tile_n,
                                   const char *what, cl_event *event, int *done);

/* Whether an operand's rows, `stride` elements apart from element `off` on, are `bytes`-byte
 * aligned for elements of `size` bytes (the buffer's start is). */
int fcl_gemm_rows_aligned(cl_long off, cl_long stride, int size, int bytes);

#endif
