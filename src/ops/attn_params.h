/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of fcl_attn_params, shared by every attention op. */
#ifndef FLASHCL_ATTN_PARAMS_H
#define FLASHCL_ATTN_PARAMS_H

#include "core/internal.h"

/* fcl_attn_params after checking, with defaults applied. */
typedef struct fcl_attn_resolved {
    float scale;          /* 1/sqrt(D) when the caller gave 0 */
    int window_left;      /* -1 = unbounded; else < sk */
    int window_right;     /* causal folded in: min(window_right, 0); -1 = unbounded; else < sq */
    float softcap;
    fcl_tensor mask;      /* NULL or F32 [B, Sk] / [Sk] */
    int64_t mask_sb, mask_ss; /* element strides; mask_sb = 0 when shared by all batches */
    fcl_tensor alibi;     /* NULL or F32 [B, Hq] / [Hq] */
    int64_t alibi_sb, alibi_sh;
} fcl_attn_resolved;

/* Checks params against the problem and fills *out: key_mask must be [mask_keys] or [mask_B,
 * mask_keys] (only [mask_keys] when mask_B <= 0), alibi_slopes [Hq] or [alibi_B, Hq]; D sets the
 * default scale. sq and sk bound one sequence's query rows and keys: a window that reaches
 * past them whatever the row (window_left >= sk, window_right >= sq) is unbounded and resolved
 * to -1, so the kernels' position +- window stays far inside int. `op` names the calling op in
 * messages. */
fcl_status fcl_resolve_attn_params(fcl_context ctx, const char *op, const fcl_attn_params *params, int64_t mask_B,
                                   int64_t mask_keys, int64_t alibi_B, int64_t Hq, int64_t D, int64_t sq, int64_t sk,
                                   fcl_attn_resolved *out);

#endif
