/* SPDX-License-Identifier: Apache-2.0 */
/* The launch of cl/portable/attention_forward.cl shared by the dense, varlen and packed forwards. */
#ifndef FLASHCL_FORWARD_LAUNCH_H
#define FLASHCL_FORWARD_LAUNCH_H

#include "core/internal.h"
#include "ops/attn_params.h"

enum { FCL_LAYOUT_DENSE = 0, FCL_LAYOUT_VARLEN = 1, FCL_LAYOUT_PACKED = 2 };

/* Everything one forward launch needs, filled by the op after its checks. Views are given as
 * (tensor, dim index of batch / seq / head); absent optional tensors are NULL. */
typedef struct fcl_forward_job {
    const char *op;
    int layout;
    fcl_dtype dtype;
    int64_t D, Hq, Hkv;
    int64_t grid_b;       /* dense: batches; varlen: sequences; packed: 1 */
    int64_t sq, sk;       /* dense/packed: lengths; varlen: max_seqlen_q / max_seqlen_k */
    int64_t total_q, total_k; /* varlen/packed: rows of Q and K; dense: unused */
    fcl_tensor Q, K, V, O, LSE;
    int q_dims[3], k_dims[3], v_dims[3], o_dims[3]; /* dims holding batch, seq, head (-1: none) */
    int lse_dims[3];                                /* dims holding batch, head, seq (-1: none) */
    fcl_tensor seq_q, seq_k; /* varlen: cu_seqlens; packed: seq_bounds in seq_q */
    int fp32_probs;          /* a portable kernel whatever the device: O is then the sum of FP32
                              * probabilities times V, which the backward's delta = rowsum(dO * O)
                              * assumes (set where the attention backward recomputes an O that its
                              * caller did not give) */
    fcl_attn_resolved params;
} fcl_forward_job;

/* The NVIDIA tensor-core kernels may run: compute capability >= 8.0, F16 or BF16, no loop
 * cap, and the environment variable path_env is unset, empty, "auto" or "nvidia-mma" (any other
 * value, such as "portable", keeps them off). */
int fcl_nv_mma_usable(fcl_context ctx, fcl_dtype dtype, const char *path_env);

/* Rows of view t (dims d: batch, seq, head) start at multiples of n elements: the offset and
 * those strides are (n 8: 16-byte rows of 16-bit dtypes for cp.async copies; n 4: the blocked
 * forward's vector loads). */
int fcl_rows_aligned(fcl_tensor t, const int dims[3], int n);

/* Offset and the strides of dims d[0..2] of t into out (0 for an absent dim or tensor). */
void fcl_view_params(fcl_tensor t, const int d[3], cl_long out[4]);

/* Builds (or finds) the kernel variant (tensor-core, blocked or rows, see
 * fcl_attention_forward_path) and enqueues the launch(es). */
fcl_status fcl_forward_launch(fcl_context ctx, const fcl_forward_job *job, cl_event *event);

#endif
