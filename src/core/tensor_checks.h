/* SPDX-License-Identifier: Apache-2.0 */
/* Tensor argument checks shared by the ops and the GEMM; each failure sets a message starting with the op name. */
#ifndef FLASHCL_OP_CHECKS_H
#define FLASHCL_OP_CHECKS_H

#include "core/internal.h"

/* t is non-NULL, of ctx, with `ndim` dims. */
fcl_status fcl_check_tensor(fcl_context ctx, const char *op, fcl_tensor t, const char *name, int ndim);
/* t's shape equals shape[0..ndim). */
int fcl_same_shape(fcl_tensor t, const int64_t *shape);
/* FCL_ERR_SHAPE: "<op>: <name> has shape [..]; expected <expect> [..]". */
fcl_status fcl_shape_error(fcl_context ctx, const char *op, const char *name, fcl_tensor t, const char *expect,
                           const int64_t *shape, int n);
/* Whether two views of one buffer may share an element (either may be NULL): exact for views
 * of one dtype, shape and nested strides (interleaved K/V halves do not overlap), else by their
 * byte ranges. */
int fcl_overlaps(fcl_tensor a, fcl_tensor b);
/* FCL_ERR_LAYOUT unless output t (NULL: fine) addresses each of its elements once: its dims of
 * more than one element, taken by stride from the smallest, each step past everything the
 * smaller ones reach (a stride of 0, or dims that overlap, would let work-items race). */
fcl_status fcl_check_distinct(fcl_context ctx, const char *op, fcl_tensor t, const char *name);
/* No output repeats an element (fcl_check_distinct) or overlaps another or an input:
 * outs[0..n_out) against each other and ins[0..n_in) (NULLs skipped), named by out_names /
 * in_names in the message. */
fcl_status fcl_check_outputs_apart(fcl_context ctx, const char *op, int n_out, const fcl_tensor *outs,
                                   const char *const *out_names, int n_in, const fcl_tensor *ins,
                                   const char *const *in_names);
/* An I32 tensor of ctx with `ndim` dims (index inputs: prefix sums, bounds). */
fcl_status fcl_check_index_tensor(fcl_context ctx, const char *op, fcl_tensor t, const char *name, int ndim);
/* Gradient tensors: grads[i] (named names[i]) is a tensor of ctx with the dims, shape and
 * dtype of like[i]; no gradient overlaps another or any of inputs[0..n_in) (NULLs skipped). */
fcl_status fcl_check_grads(fcl_context ctx, const char *op, int n, const fcl_tensor *grads, const fcl_tensor *like,
                           const char *const *names, int n_in, const fcl_tensor *inputs);

#endif
