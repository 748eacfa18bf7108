/* SPDX-License-Identifier: Apache-2.0 */
/* The RUSTICL_ENABLE hint: Mesa's Rusticl exposes no device until RUSTICL_ENABLE names a driver. */
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
