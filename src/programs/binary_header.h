/* SPDX-License-Identifier: Apache-2.0 */
/* A plausibility check of cached program binaries before flashcl hands one to an OpenCL
 * implementation: a file forged with a valid checksum must not drive the implementation's
 * binary loader into its own bugs where flashcl knows the binary's format. */
#ifndef FLASHCL_BINARY_HEADER_H
#define FLASHCL_BINARY_HEADER_H

#include <stddef.h>

/*
 * Whether `bin` (len bytes) starts with a header that the implementation of platform
 * `platform_name` writes:
 *   PoCL          "poclbin\0";
 *   Mesa Rusticl  "rusticl\0" (Mesa 23 and later, which checks its own version), or Mesa 22's
 *                 format: version 1, the SPIR-V length (the rest of the binary), a binary
 *                 type, the SPIR-V magic number (an unknown version made Rusticl 22.3 panic);
 *   Intel         an ELF header ("\x7f" "ELF").
 * Other platforms: 1 (flashcl does not know their format).
 */
int fcl_binary_header_ok(const char *platform_name, const unsigned char *bin, size_t len);

#endif
