/* SPDX-License-Identifier: Apache-2.0 */
/* Counts computed in 64 bits (bytes, elements, work-items) that the host must hold in a size_t:
 * on a 32-bit host (armhf) they can exceed it where a 64-bit host has room. */
#include "core/internal.h"

#include <stdint.h>

fcl_status fcl_check_host_size(fcl_context ctx, const char *what, uint64_t n)
{
    if (n <= (uint64_t)SIZE_MAX)
        return FCL_SUCCESS;
    return fcl_fail(ctx, FCL_ERR_UNSUPPORTED, "%s %llu is beyond this host's %u-bit size_t", what,
                    (unsigned long long)n, (unsigned)(8 * sizeof(size_t)));
}
