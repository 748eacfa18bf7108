/* SPDX-License-Identifier: Apache-2.0 */
/* The part of a failed build's log that says why, for error messages. */
#ifndef FLASHCL_BUILD_LOG_H
#define FLASHCL_BUILD_LOG_H

#include "core/internal.h"

/* Writes into out (n bytes, always terminated) the build log of `prog` on ctx's device from its
 * first line that mentions an error (the whole log when none does; warnings before the errors
 * are skipped), with line breaks as " | ". The log is read whole, whatever its length. */
void fcl_build_log_excerpt(fcl_context ctx, cl_program prog, char *out, size_t n);

#endif
