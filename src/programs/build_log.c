/* SPDX-License-Identifier: Apache-2.0 */
/* The part of a failed build's log that says why (see build_log.h). */
#include "programs/build_log.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* The start of the first line of log that contains "error" in any case, or log. */
static const char *first_error_line(const char *log)
{
    for (const char *p = log; *p; p++) {
        int match = 1;
        for (int i = 0; i < 5 && match; i++)
            match = p[i] && tolower((unsigned char)p[i]) == "error"[i];
        if (!match)
            continue;
        while (p > log && p[-1] != '\n')
            p--;
        return p;
    }
    return log;
}

void fcl_build_log_excerpt(fcl_context ctx, cl_program prog, char *out, size_t n)
{
    if (n == 0)
        return;
    out[0] = '\0';
    size_t len = 0;
    if (!prog || clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &len) != CL_SUCCESS ||
        len == 0)
        return;
    char *log = malloc(len + 1);
    if (!log)
        return;
    if (clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, len, log, NULL) == CL_SUCCESS) {
        log[len] = '\0';
        size_t k = 0;
        for (const char *p = first_error_line(log); *p && k + 4 < n; p++) {
            if (*p == '\n') {
                if (p[1] && k > 0) {
                    memcpy(out + k, " | ", 3);
                    k += 3;
                }
            } else if (isprint((unsigned char)*p) || *p == '\t') {
                out[k++] = *p == '\t' ? ' ' : *p;
            }
        }
        out[k] = '\0';
    }
    free(log);
}
