/* SPDX-License-Identifier: Apache-2.0 */
/* The cached binaries' header check (formats of the implementations flashcl is tested on). */
#include "programs/binary_header.h"

#include <stdint.h>
#include <string.h>

static uint32_t u32le(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int starts_with(const unsigned char *bin, size_t len, const char *magic, size_t n)
{
    return len >= n && memcmp(bin, magic, n) == 0;
}

/* Mesa 22's Rusticl binary: u32 version 1, u32 SPIR-V length n, u32 binary type (compiled
 * object 1, library 2, executable 4), then the n bytes of SPIR-V, which start with its magic. */
static int rusticl22_ok(const unsigned char *bin, size_t len)
{
    const uint32_t type = len >= 16 ? u32le(bin + 8) : 0;
    return len >= 16 && u32le(bin) == 1 && u32le(bin + 4) == len - 12 && (type == 1 || type == 2 || type == 4) &&
           u32le(bin + 12) == 0x07230203u;
}

int fcl_binary_header_ok(const char *platform_name, const unsigned char *bin, size_t len)
{
    if (!platform_name)
        return 1;
    if (strstr(platform_name, "Portable Computing Language"))
        return starts_with(bin, len, "poclbin", 8);
    if (strstr(platform_name, "rusticl"))
        return starts_with(bin, len, "rusticl", 8) || rusticl22_ok(bin, len);
    if (strstr(platform_name, "Intel(R) OpenCL"))
        return starts_with(bin, len, "\x7f" "ELF", 4);
    return 1;
}
