/* SPDX-License-Identifier: Apache-2.0 */
/* The KV-cache descriptor's checks and kernel-ready view, shared by append and decode. */
#ifndef FLASHCL_KV_CACHE_H
#define FLASHCL_KV_CACHE_H

#include "core/internal.h"

/* A checked fcl_kv_cache, in the terms the kernels take. */
typedef struct fcl_kv_view {
    int paged;
    fcl_dtype dtype;
    int64_t l_max, Hkv, D;
    int64_t page_size, num_pages; /* paged only (contiguous: page_size = l_max, num_pages = B) */
    cl_long k[4], v[4];           /* element offset, then strides of dims 0 (batch or page), 1 (row), 2 (head) */
    cl_long bt[3];                /* block table: offset, batch stride, page stride (0 when contiguous) */
    cl_mem k_buf, v_buf, bt_buf;  /* bt_buf: k's buffer when contiguous (never read) */
} fcl_kv_view;

/* Checks `cache` for a batch of B sequences: k and v tensors of ctx with 4 dims, one shape
 * and dtype (F32/F16/BF16); contiguous [B, L_max, Hkv, D]; or paged pages [P, page_size,
 * Hkv, D] with an I32 block_table [B, max_pages]; fills *out. */
fcl_status fcl_check_kv_cache(fcl_context ctx, const char *op, const fcl_kv_cache *cache, int64_t B,
                              fcl_kv_view *out);

#endif
