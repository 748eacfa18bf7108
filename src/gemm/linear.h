/* SPDX-License-Identifier: Apache-2.0 */
/* The projection GEMM of cl/portable/linear.cl and the fcl_weight checks, shared by the projection ops. */
#ifndef FLASHCL_LINEAR_H
#define FLASHCL_LINEAR_H

#include "core/internal.h"

/* w is a weight of ctx: w->w [N, K] F32/F16/BF16/I8; scale F32 [N] exactly when I8; bias NULL
 * or [N] in the activations' dtype `act`. `name` ("wq", ...) names it in messages. */
fcl_status fcl_check_weight(fcl_context ctx, const char *op, const char *name, const fcl_weight *w, int64_t N,
                            int64_t K, fcl_dtype act);

/* Enqueues Y = X W^T (* scale) (+ bias): X [M, K] and Y [M, N] 2-D tensors of one activation
 * dtype (checked by the caller, as is w). CLBlast where fcl_projection_path says so and the
 * layouts suit it (row strides at least the row lengths), else flashcl's kernel. */
fcl_status fcl_linear_enqueue(fcl_context ctx, fcl_tensor X, const fcl_weight *w, fcl_tensor Y, cl_event *event);

/* Enqueues Y (+)= G W: G [M, N] activations, w->w [N, K] (I8: dequantised with its row scale),
 * Y [M, K] in G's dtype; accumulate adds to Y. */
fcl_status fcl_linear_grad_input(fcl_context ctx, fcl_tensor G, const fcl_weight *w, fcl_tensor Y, int accumulate);

/* Enqueues dW += G^T X: G [M, N], X [M, K] activations of one dtype; dW [N, K] F32 or that dtype. */
fcl_status fcl_linear_grad_weight(fcl_context ctx, fcl_tensor G, fcl_tensor X, fcl_tensor dW);

/* Enqueues db += column sums of G [M, N]; db [N] F32 or G's dtype. */
fcl_status fcl_column_sums(fcl_context ctx, fcl_tensor G, fcl_tensor db);

#endif
