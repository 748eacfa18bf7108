/* SPDX-License-Identifier: Apache-2.0 */
/* fcl_struct_layout: the public structs' sizes and field offsets as compiled, for bindings. */
#include "core/internal.h"

#include <string.h>

#define FIELD(s, f) {#s, #f, offsetof(s, f)}
#define SIZE(s) {#s, NULL, sizeof(s)}

static const struct {
    const char *name, *field;
    size_t value;
} k_layout[] = {
    SIZE(fcl_attn_params), FIELD(fcl_attn_params, scale), FIELD(fcl_attn_params, causal),
    FIELD(fcl_attn_params, window_left), FIELD(fcl_attn_params, window_right), FIELD(fcl_attn_params, softcap),
    FIELD(fcl_attn_params, key_mask), FIELD(fcl_attn_params, alibi_slopes),
    SIZE(fcl_device_info), FIELD(fcl_device_info, name), FIELD(fcl_device_info, vendor),
    FIELD(fcl_device_info, driver_version), FIELD(fcl_device_info, device_version),
    FIELD(fcl_device_info, platform_name), FIELD(fcl_device_info, platform_version), FIELD(fcl_device_info, type),
    FIELD(fcl_device_info, compute_units), FIELD(fcl_device_info, global_mem_bytes),
    FIELD(fcl_device_info, max_alloc_bytes), FIELD(fcl_device_info, local_mem_bytes),
    FIELD(fcl_device_info, max_work_group_size), FIELD(fcl_device_info, has_fp16), FIELD(fcl_device_info, has_fp64),
    FIELD(fcl_device_info, has_subgroups), FIELD(fcl_device_info, nv_cc_major), FIELD(fcl_device_info, nv_cc_minor),
    SIZE(fcl_cache_stats), FIELD(fcl_cache_stats, compiles), FIELD(fcl_cache_stats, memory_hits),
    FIELD(fcl_cache_stats, disk_hits), FIELD(fcl_cache_stats, disk_writes), FIELD(fcl_cache_stats, disk_rejects),
    SIZE(fcl_kv_cache), FIELD(fcl_kv_cache, k), FIELD(fcl_kv_cache, v), FIELD(fcl_kv_cache, block_table),
    SIZE(fcl_weight), FIELD(fcl_weight, w), FIELD(fcl_weight, scale), FIELD(fcl_weight, bias),
    SIZE(fcl_weight_grad), FIELD(fcl_weight_grad, dw), FIELD(fcl_weight_grad, db),
};

size_t fcl_struct_layout(const char *name, const char *field)
{
    if (!name)
        return (size_t)-1;
    for (size_t i = 0; i < sizeof k_layout / sizeof *k_layout; i++) {
        if (strcmp(k_layout[i].name, name) != 0)
            continue;
        if (!field ? !k_layout[i].field : k_layout[i].field && strcmp(k_layout[i].field, field) == 0)
            return k_layout[i].value;
    }
    return (size_t)-1;
}
