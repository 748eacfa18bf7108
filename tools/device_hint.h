/* SPDX-License-Identifier: Apache-2.0 */
/* What to try when no device matched, or a device runs below its speed (flashcl-info,
 * flashcl-bench). */
#ifndef FLASHCL_DEVICE_HINT_H
#define FLASHCL_DEVICE_HINT_H

#include <flashcl/flashcl.h>
#include <stdio.h>

/* After fcl_context_create(selector) returned `st`: when it found no device and the selector
 * (or FLASHCL_DEVICE when selector is NULL or "") names Rusticl while RUSTICL_ENABLE is unset,
 * prints a line saying that Mesa's Rusticl lists devices only for the drivers RUSTICL_ENABLE
 * names. */
void tools_device_hint(FILE *f, const char *selector, fcl_status st);

/* When `info` is a CPU under PoCL and POCL_AFFINITY is unset, prints a line saying that PoCL's
 * worker threads are then not pinned: after each wait the kernel scheduler can wake them on one
 * core, which doubles calls of a few milliseconds, and POCL_AFFINITY=1 pins one per core. */
void tools_pocl_affinity_hint(FILE *f, const fcl_device_info *info);

#endif
