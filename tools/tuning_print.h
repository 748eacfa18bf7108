/* SPDX-License-Identifier: Apache-2.0 */
/* The tuned tiles stored for a device, printed readably (flashcl-info, flashcl-bench --tune --list). */
#ifndef FLASHCL_TUNING_PRINT_H
#define FLASHCL_TUNING_PRINT_H

#include <flashcl/flashcl.h>
#include <stdio.h>

/* One line per tuned entry of ctx's device, each starting with `indent`: the kernel, the head dims
 * it serves and its values by name; "(none)" when there are none. Returns the entry count, or -1
 * when an entry could not be read (its error printed). */
int tools_print_tuned(FILE *f, fcl_context ctx, const char *indent);

#endif
