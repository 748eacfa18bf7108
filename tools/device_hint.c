/* SPDX-License-Identifier: Apache-2.0 */
/* The RUSTICL_ENABLE hint (Mesa's Rusticl exposes no device until RUSTICL_ENABLE names a driver)
 * and the POCL_AFFINITY hint (PoCL's CPU threads, unpinned, can share a core). */
#include "device_hint.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Whether s contains "rusticl", case-insensitively. */
static int names_rusticl(const char *s)
{
    const char *w = "rusticl";
    for (; s && *s; s++) {
        size_t i = 0;
        while (w[i] && s[i] && tolower((unsigned char)s[i]) == w[i])
            i++;
        if (!w[i])
            return 1;
    }
    return 0;
}

void tools_device_hint(FILE *f, const char *selector, fcl_status st)
{
    const char *sel = selector && *selector ? selector : getenv("FLASHCL_DEVICE");
    const char *enable = getenv("RUSTICL_ENABLE");
    if (st != FCL_ERR_NO_DEVICE || !names_rusticl(sel) || (enable && *enable))
        return;
    fprintf(f, "hint: Mesa's Rusticl lists no device until RUSTICL_ENABLE names its driver, e.g. "
               "RUSTICL_ENABLE=llvmpipe (the CPU) or RUSTICL_ENABLE=radeonsi,iris\n");
}

void tools_pocl_affinity_hint(FILE *f, const fcl_device_info *info)
{
    const char *affinity = getenv("POCL_AFFINITY");
    /* PoCL by its platform name, as the library tells it (src/cache/disk_cache.c) */
    if (info->type != FCL_DEVICE_CPU || !strstr(info->platform_name, "Portable Computing Language") ||
        (affinity && *affinity))
        return;
    fprintf(f, "hint: PoCL's CPU threads are not pinned (POCL_AFFINITY unset): after each wait they can "
               "wake on one core, and calls of a few ms then take up to twice as long; POCL_AFFINITY=1 "
               "pins one thread per core (docs/API.md, \"CPUs\")\n");
}
