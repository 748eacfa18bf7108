/* SPDX-License-Identifier: Apache-2.0 */
/* The launches of cl/portable/attention_backward.cl shared by the dense, varlen and packed backwards. */
#ifndef FLASHCL_BACKWARD_LAUNCH_H
#define FLASHCL_BACKWARD_LAUNCH_H

#include "ops/forward_launch.h"

/* One backward problem, filled by the op after its checks: the forward problem it
 * differentiates (fwd.O is the forward's output; fwd.LSE may be NULL, then it is recomputed
 * into scratch, so fwd.lse_dims must always be set for the layout), and the gradient views. */
typedef struct fcl_backward_job {
    fcl_forward_job fwd;
    fcl_tensor dO, dQ, dK, dV;
    int do_dims[3], dq_dims[3], dk_dims[3], dv_dims[3]; /* dims holding batch, seq, head (-1: none) */
} fcl_backward_job;

/* Builds (or finds) the kernel variants and enqueues the preprocessing, dK/dV and dQ
 * launches (and the LSE recompute when fwd.LSE is NULL); scratch is released once they run. */
fcl_status fcl_backward_launch(fcl_context ctx, const fcl_backward_job *job, cl_event *event);

#endif
