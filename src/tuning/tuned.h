/* SPDX-License-Identifier: Apache-2.0 */
/* Tuned tiles: per-device entries that flashcl-bench --tune found, kept in the disk cache
 * folder (one entry of the program-binary cache, keyed by the device, driver and platform) and
 * read once per context. Internal to flashcl. */
#ifndef FLASHCL_TUNED_H
#define FLASHCL_TUNED_H

#include "core/internal.h"

/* Number of values of a tuned kernel ("forward" 3; "forward_blocked", "forward_cpu", "forward_wgmma",
 * "backward_blocks" 4; "forward_mma", "gemm" 5; "backward_mma" 7; "decode" 10, at most
 * FCL_TUNING_MAX_VALUES), 0 for an unknown name. */
int fcl_tuned_value_count(const char *kernel);

/* The tuned kernels' names, for messages. */
#define FCL_TUNED_KERNEL_NAMES "forward, forward_blocked, forward_cpu, forward_mma, forward_wgmma, backward_mma, backward_blocks, decode, gemm"

/* Whether `values` (fcl_tuned_value_count(kernel) of them) are valid tiles for `kernel` (see
 * fcl_tuning_save). */
int fcl_tuned_values_valid(const char *kernel, const int *values);

/* The padded head dim an entry of `kernel` for `head_dim` is kept under: fcl_pad_head_dim's, and
 * 16 for "gemm" (the projections' GEMM has no head dim: one entry serves every call). */
int fcl_tuned_head_dim(const char *kernel, int head_dim);

/* Copies the tuned values of (kernel, head_dim_pad) into values and returns 1, else 0. The
 * context's entries are read from its disk cache folder at the first lookup (none when the cache
 * is off, there is no entry, or it is bad; malformed lines are skipped). */
int fcl_tuned_find(fcl_context ctx, const char *kernel, int head_dim_pad, int *values);

#endif
