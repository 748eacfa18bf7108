/* SPDX-License-Identifier: Apache-2.0 */
/* Device selection from a selector string (see fcl_context_create). */
#ifndef FLASHCL_DEVICE_SELECT_H
#define FLASHCL_DEVICE_SELECT_H

#include <flashcl/flashcl.h>

typedef struct fcl_device_choice {
    cl_platform_id platform;
    cl_device_id device;
} fcl_device_choice;

/* Resolves `selector` (NULL/"" -> FLASHCL_DEVICE -> first GPU, else CPU). On failure the
 * thread's context-free error message says why. */
fcl_status fcl_select_device(const char *selector, fcl_device_choice *out);

#endif
