/* SPDX-License-Identifier: Apache-2.0 */
/* Checks and views shared by the projection ops (projection.c, projection_backward.c). */
#ifndef FLASHCL_PROJECTION_H
#define FLASHCL_PROJECTION_H

#include "core/internal.h"

/* A 2-D activation [rows, cols] of ctx (a negative rows/cols takes the tensor's own) in dtype
 * `dt` (dt < 0: any float dtype). */
fcl_status fcl_proj_check_act(fcl_context ctx, const char *op, fcl_tensor t, const char *name, int64_t rows,
                              int64_t cols, int dt);
/* out repeats no element (fcl_check_distinct) and overlaps none of ins[0..n) (NULLs skipped)
 * nor any tensor of the weights ws[0..nw). */
fcl_status fcl_proj_check_out(fcl_context ctx, const char *op, fcl_tensor out, const char *name,
                              const fcl_tensor *ins, int n, const fcl_weight *const *ws, int nw);
/* Rows (output features) of a weight, or -1 when it is not a usable 2-D tensor yet. */
int64_t fcl_proj_weight_rows(const fcl_weight *w);
/* The [1, L, H, D / H] view of a 2-D activation [L, D]. */
struct fcl_tensor_s fcl_proj_heads_view(fcl_tensor t, int64_t H);
/* X [Lq, D], O (an output named o_name) [Lq, D] in X's dtype, wq and wo [D, D], num_heads
 * dividing D (D from a square wq, else X); *D gets the width. */
fcl_status fcl_proj_check_block(fcl_context ctx, const char *op, int num_heads, fcl_tensor X, const fcl_weight *wq,
                                const fcl_weight *wo, fcl_tensor O, const char *o_name, int64_t *D);

/* saved (given: else FCL_ERR_INVALID_ARGUMENT): Q, A [Lq, D] and K, V [Lk, D] in dtype dt, LSE
 * [H, Lq] F32, each a usable tensor of ctx. */
fcl_status fcl_proj_check_saved(fcl_context ctx, const char *op, const fcl_qkvo_saved *saved, int64_t H, int64_t Lq,
                                int64_t Lk, int64_t D, fcl_dtype dt);
/* The [1, H, Lq] view of a saved LSE [H, Lq] (the attention job's LSE layout). */
struct fcl_tensor_s fcl_proj_lse_view(fcl_tensor lse);

#endif
