/* SPDX-License-Identifier: Apache-2.0 */
/* The promotion of an NVIDIA program to sm_90a (see cl/nvidia/wgmma_nv.cl): NVIDIA's OpenCL compiler
 * targets plain sm_90, whose ptxas refuses Hopper's warpgroup instructions, so the kernels write
 * them behind a PTX comment marker; the program's PTX (its "binary" on NVIDIA's platform) is
 * rewritten with the marker removed and `.target sm_90a`, and built again from that. */
#include "programs/ptx_promote.h"
#include "programs/build_log.h"

#include <stdlib.h>
#include <string.h>

#define SM90A_MARKER "//@@"

/* ptx with every marker removed and the first `.target sm_90` made `.target sm_90a`; NULL when
 * out of memory or when ptx has no sm_90 target line (not PTX for compute capability 9.0). */
static char *promoted_text(const char *ptx)
{
    const char *target = strstr(ptx, ".target sm_90");
    if (!target || (target[13] >= '0' && target[13] <= '9') || target[13] == 'a')
        return NULL;
    char *out = malloc(strlen(ptx) + 2);
    if (!out)
        return NULL;
    size_t j = 0;
    for (const char *p = ptx; *p;) {
        if (strncmp(p, SM90A_MARKER, strlen(SM90A_MARKER)) == 0) {
            p += strlen(SM90A_MARKER);
            continue;
        }
        if (p == target) {
            memcpy(out + j, ".target sm_90a", 14);
            j += 14;
            p += 13;
            continue;
        }
        out[j++] = *p++;
    }
    out[j] = '\0';
    return out;
}

/* The PTX of a built program, NUL-terminated (malloc'd); NULL when it gives none. */
static char *program_ptx(cl_program prog)
{
    size_t len = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL) != CL_SUCCESS || len == 0)
        return NULL;
    unsigned char *bin = malloc(len + 1);
    if (!bin)
        return NULL;
    unsigned char *bins[1] = {bin};
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) != CL_SUCCESS) {
        free(bin);
        return NULL;
    }
    bin[len] = '\0';
    return (char *)bin;
}

fcl_status fcl_promote_sm90a(fcl_context ctx, cl_program built, const char *options, cl_program *out)
{
    char *ptx = program_ptx(built);
    char *text = ptx ? promoted_text(ptx) : NULL;
    free(ptx);
    if (!text)
        return fcl_fail(ctx, FCL_ERR_UNSUPPORTED,
                        "this NVIDIA driver gives no sm_90 PTX to promote to sm_90a (wgmma kernels)");
    const size_t len = strlen(text) + 1;
    const unsigned char *bins[1] = {(const unsigned char *)text};
    cl_int status = CL_SUCCESS, err;
    cl_program prog = clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->device, &len, bins, &status, &err);
    free(text);
    if (err == CL_SUCCESS && status == CL_SUCCESS)
        err = clBuildProgram(prog, 1, &ctx->device, options, NULL, NULL);
    if (err != CL_SUCCESS || status != CL_SUCCESS) {
        char log[FCL_ERROR_MAX];
        fcl_build_log_excerpt(ctx, prog, log, sizeof log);
        if (prog)
            clReleaseProgram(prog);
        return fcl_fail(ctx, FCL_ERR_BUILD, "building the sm_90a promotion of a wgmma program failed (%s): %.300s",
                        fcl_cl_error_name(err != CL_SUCCESS ? err : status), log);
    }
    *out = prog;
    return FCL_SUCCESS;
}
