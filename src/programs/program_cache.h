/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel programs: the embedded OpenCL C sources, compiled per context on first use and kept in
 * memory (the context's program list) and on disk (src/cache/). */
#ifndef FLASHCL_PROGRAM_CACHE_H
#define FLASHCL_PROGRAM_CACHE_H

#include "core/internal.h"

/* Kernel sources embedded at build time (generated/kernel_sources.c); NULL if unknown. */
const char *fcl_kernel_source(const char *name);

/*
 * Returns the kernel `kernel_name` of the program built from the embedded sources
 * `source_names` (concatenated in order) with `options`, compiling it on first use and
 * caching it in memory (per context) and on disk. The kernel is owned by the cache.
 */
fcl_status fcl_get_kernel(fcl_context ctx, const char *const *source_names, int n_sources,
                          const char *options, const char *kernel_name, cl_kernel *out);

/* The outcome of building a program that includes cl/nvidia/wgmma_nv.cl, whose build returned s:
 * a refused sm_90a promotion (FCL_ERR_UNSUPPORTED) marks ctx for good (ctx->wgmma_refused: no
 * wgmma kernel is tried on it again), clears its message, sets *refused and becomes FCL_SUCCESS
 * (the caller runs another kernel); any other status passes through with *refused 0. */
fcl_status fcl_wgmma_build_outcome(fcl_context ctx, fcl_status s, int *refused);


#endif
