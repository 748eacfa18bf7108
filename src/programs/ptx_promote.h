/* SPDX-License-Identifier: Apache-2.0 */
/* Promotion of NVIDIA programs to sm_90a, for the kernels that use Hopper's wgmma. */
#ifndef FLASHCL_PTX_PROMOTE_H
#define FLASHCL_PTX_PROMOTE_H

#include "core/internal.h"

/* A new program built (with `options`) from the PTX of `built` (a program NVIDIA's OpenCL
 * compiler built for compute capability 9.0 from sources that include cl/nvidia/wgmma_nv.cl) with the
 * SM90A markers removed and the target made sm_90a. `built` is left as it is (the caller
 * releases it). FCL_ERR_UNSUPPORTED with a message when the driver gives no such PTX (the
 * caller may take another kernel), FCL_ERR_BUILD with the build log when the promoted text does
 * not build. */
fcl_status fcl_promote_sm90a(fcl_context ctx, cl_program built, const char *options, cl_program *out);

#endif
