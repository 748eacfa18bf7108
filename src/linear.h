/* The projection GEMM of cl/linear.cl and the fcl_weight checks, shared by the projection ops. */
#ifndef FLASHCL_LINEAR_H
#define FLASHCL_LINEAR_H

#include "internal.h"

/* w is a weight of ctx: w->w [N, K] F32/F16/BF16/I8; scale F32 [N] exactly when I8; bias NULL
 * or [N] in the activations' dtype `act`. `name` ("wq", ...) names it in messages. */
fcl_status fcl_check_weight(fcl_context ctx, const char *op, const char *name, const fcl_weight *w, int64_t N,
                            int64_t K, fcl_dtype act);

/* Enqueues Y = X W^T (* scale) (+ bias): X [M, K] and Y [M, N] 2-D tensors of one activation
 * dtype (checked by the caller, as is w). */
fcl_status fcl_linear_enqueue(fcl_context ctx, fcl_tensor X, const fcl_weight *w, fcl_tensor Y, cl_event *event);

#endif
