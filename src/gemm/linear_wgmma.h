/* SPDX-License-Identifier: Apache-2.0 */
/* The projection GEMM on Hopper's warpgroup tensor cores (cl/nvidia/linear_wgmma.cl): where it
 * applies, its variant and launch. */
#ifndef FLASHCL_LINEAR_WGMMA_H
#define FLASHCL_LINEAR_WGMMA_H

#include "gemm/gemm_job.h"

/* Whether GEMMs of A operands of dtype `a` and B operands of dtype `b` can run on the wgmma GEMM
 * on ctx's device: the tensor-core GEMM applies (fcl_gemm_mma_usable), FLASHCL_GEMM is not "mma",
 * no sm_90a promotion was refused on ctx, and the device has wgmma tiles (fcl_tune_gemm_wgmma:
 * compute capability 9.0 only). */
int fcl_gemm_wgmma_usable(fcl_context ctx, fcl_dtype a, fcl_dtype b);

/* Enqueues job on the wgmma GEMM when fcl_gemm_wgmma_usable holds for its dtypes and its layout
 * suits the kernel (A K- or M-contiguous, B K- or N-contiguous, their rows 16-byte aligned; I8 B
 * with A K-contiguous: K-contiguous and scaled per column, run as C^T = B^T A^T with the weights
 * converted in registers, or N-contiguous and scaled along k), and sets *done; *done = 0 and
 * nothing enqueued otherwise, and when the kernel cannot run here (the driver refused the
 * promotion: ctx then never tries again; or the compiled kernel cannot run its work-group): the
 * caller then runs another GEMM. */
fcl_status fcl_gemm_wgmma_enqueue(fcl_context ctx, const gemm_job *job, cl_event *event, int *done);

#endif
