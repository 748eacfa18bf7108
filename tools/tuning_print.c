/* SPDX-License-Identifier: Apache-2.0 */
/* Tuned entries as text: fcl_tuning_count / fcl_tuning_entry with each value named (see
 * fcl_tuning_save in flashcl.h for what the values mean). */
#include "tuning_print.h"

#include <string.h>

typedef struct kernel_names {
    const char *kernel;
    const char *names[FCL_TUNING_MAX_VALUES];
} kernel_names;

static const kernel_names k_names[] = {
    {"forward", {"rows_per_group", "keys_per_tile", "rows_per_item"}},
    {"forward_blocked", {"rows_per_group", "keys_per_tile", "rows_per_item", "keys_per_item"}},
    {"forward_cpu", {"floats_per_vector", "row_vectors_per_item", "keys_per_tile", "dims_per_pv_step"}},
    {"forward_mma", {"rows_per_group", "keys_per_tile", "row_tiles_per_warp", "max_registers", "q_steps_in_local"}},
    {"forward_wgmma", {"keys_per_tile", "stages", "max_registers", "overlap", "q_in_registers"}},
    {"backward_mma", {"dkdv_keys_per_group", "dkdv_rows_per_tile", "dq_rows_per_group", "dq_keys_per_tile",
                      "kv_steps_in_local", "dkdv_columns_per_group", "dq_columns_per_group"}},
    {"backward_blocks", {"own_rows_per_group", "tile_rows", "own_rows_per_item", "tile_rows_per_item"}},
    {"decode", {"keys_per_group", "rows_per_group", "items_per_group", "groups_per_unit", "min_keys_per_split",
                "max_registers", "async_stages", "mma_warps", "key_lanes", "k_ahead"}},
    {"gemm", {"rows_per_group", "columns_per_group", "k_slice", "rows_per_item", "columns_per_item"}},
};

static const char *value_name(const char *kernel, int i)
{
    for (size_t k = 0; k < sizeof k_names / sizeof *k_names; k++)
        if (strcmp(k_names[k].kernel, kernel) == 0 && k_names[k].names[i])
            return k_names[k].names[i];
    return "value";
}

int tools_print_tuned(FILE *f, fcl_context ctx, const char *indent)
{
    const int n = fcl_tuning_count(ctx);
    if (n == 0)
        fprintf(f, "%s(none)\n", indent);
    for (int i = 0; i < n; i++) {
        char kernel[16];
        int hdp = 0, nv = 0, v[FCL_TUNING_MAX_VALUES];
        fcl_status st = fcl_tuning_entry(ctx, i, kernel, &hdp, v, &nv);
        if (st != FCL_SUCCESS) {
            fprintf(f, "%s(entry %d: %s: %s)\n", indent, i, fcl_status_string(st), fcl_last_error(ctx));
            return -1;
        }
        /* padded head dims: 16 serves 1-16, then each multiple of 32 the 32 below it; the GEMM has none */
        const int lo = hdp <= 16 ? 1 : hdp == 32 ? 17 : hdp - 31;
        if (strcmp(kernel, "gemm") == 0)
            fprintf(f, "%s%s, every projection:", indent, kernel);
        else
            fprintf(f, "%s%s, head dims %d-%d:", indent, kernel, lo, hdp);
        for (int k = 0; k < nv; k++)
            fprintf(f, " %s=%d", value_name(kernel, k), v[k]);
        fputc('\n', f);
    }
    return n;
}
