/* SPDX-License-Identifier: Apache-2.0 */
/* The projection GEMM on NVIDIA tensor cores (cl/nvidia/linear_mma.cl): where it applies, its
 * variant and launch. */
#ifndef FLASHCL_LINEAR_MMA_H
#define FLASHCL_LINEAR_MMA_H

#include "gemm/gemm_job.h"

/* Whether GEMMs of A operands of dtype `a` and B operands of dtype `b` run on tensor cores on
 * ctx's device: NVIDIA compute capability >= 8.0 without a loop cap, A F16 or BF16, B of A's
 * dtype or I8, FLASHCL_GEMM not "own", and tiles for the device (fcl_tune_gemm_mma). */
int fcl_gemm_mma_usable(fcl_context ctx, fcl_dtype a, fcl_dtype b);

/* Enqueues g on tensor cores when fcl_gemm_mma_usable holds for its dtypes and each of A and B
 * has a unit stride (A's k or m stride, B's k or n stride), and sets *done; *done = 0 and nothing
 * enqueued otherwise, and when the compiled kernel cannot run its work-group (the caller then
 * runs the portable kernel). */
fcl_status fcl_gemm_mma_enqueue(fcl_context ctx, const gemm_job *g, cl_event *event, int *done);

#endif
