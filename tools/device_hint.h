/* SPDX-License-Identifier: Apache-2.0 */
/* What to try when no device matched (flashcl-info, flashcl-bench). */
#ifndef FLASHCL_DEVICE_HINT_H
#define FLASHCL_DEVICE_HINT_H

#include <flashcl/flashcl.h>
#include <stdio.h>

/* After fcl_context_create(selector) returned `st`: when it found no device and the selector
 * (or FLASHCL_DEVICE when selector is NULL or "") names Rusticl while RUSTICL_ENABLE is unset,
 * prints a line saying that Mesa's Rusticl lists devices only for the drivers RUSTICL_ENABLE
 * names. */
void tools_device_hint(FILE *f, const char *selector, fcl_status st);

#endif
