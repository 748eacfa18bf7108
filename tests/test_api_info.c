/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The introspection calls bindings and tools use: fcl_struct_layout against the compiler's own
 * sizeof/offsetof of every public struct, and the tuned-entry listing (fcl_tuning_count,
 * fcl_tuning_entry) and fcl_tuning_reset in a fresh cache folder: entries saved are listed with
 * their values, a reset forgets them on disk (a new context lists none) and brings the built-in
 * tiles back; bad arguments with their status and message.
 */
#include "support.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#define LAYOUT(s, f) cr_assert_eq(fcl_struct_layout(#s, #f), offsetof(s, f), #s "." #f)

Test(api_info, struct_layout)
{
    cr_assert_eq(fcl_struct_layout("fcl_attn_params", NULL), sizeof(fcl_attn_params));
    cr_assert_eq(fcl_struct_layout("fcl_device_info", NULL), sizeof(fcl_device_info));
    cr_assert_eq(fcl_struct_layout("fcl_cache_stats", NULL), sizeof(fcl_cache_stats));
    cr_assert_eq(fcl_struct_layout("fcl_kv_cache", NULL), sizeof(fcl_kv_cache));
    cr_assert_eq(fcl_struct_layout("fcl_weight", NULL), sizeof(fcl_weight));
    cr_assert_eq(fcl_struct_layout("fcl_weight_grad", NULL), sizeof(fcl_weight_grad));
    LAYOUT(fcl_attn_params, softcap);
    LAYOUT(fcl_attn_params, key_mask);
    LAYOUT(fcl_attn_params, alibi_slopes);
    LAYOUT(fcl_device_info, type);
    LAYOUT(fcl_device_info, global_mem_bytes);
    LAYOUT(fcl_device_info, nv_cc_minor);
    LAYOUT(fcl_cache_stats, disk_rejects);
    LAYOUT(fcl_kv_cache, block_table);
    LAYOUT(fcl_weight, bias);
    LAYOUT(fcl_weight_grad, db);
    cr_assert_eq(fcl_struct_layout("fcl_attn_params", "nope"), (size_t)-1);
    cr_assert_eq(fcl_struct_layout("fcl_nope", NULL), (size_t)-1);
    cr_assert_eq(fcl_struct_layout(NULL, NULL), (size_t)-1);
}

static char g_dir[] = "/tmp/flashcl-api-info-XXXXXX";

static void sandbox(void)
{
    cr_assert(mkdtemp(g_dir) != NULL);
    setenv("FLASHCL_CACHE_DIR", g_dir, 1);
    unsetenv("FLASHCL_FORWARD_TILES");
    unsetenv("FLASHCL_DECODE_TILES");
}

static void cleanup(void)
{
    support_remove_tree(g_dir);
    unsetenv("FLASHCL_CACHE_DIR");
}

Test(api_info, tuned_entries_listed_and_reset, .init = sandbox, .fini = cleanup)
{
    fcl_context ctx = support_context();
    int before[3], after[3];
    cr_assert_eq(fcl_tuning_get(ctx, "forward", 40, before, 3), FCL_SUCCESS, "%s", fcl_last_error(ctx));
    cr_assert_eq(fcl_tuning_count(ctx), 0);
    const int fwd[3] = {32, 16, 4}, dec[10] = {16, 4, 64, 2, 128, 0, 0, 0, 2, 1};
    cr_assert_eq(fcl_tuning_save(ctx, "forward", 40, fwd, 3), FCL_SUCCESS, "%s", fcl_last_error(ctx));
    cr_assert_eq(fcl_tuning_save(ctx, "decode", 128, dec, 10), FCL_SUCCESS, "%s", fcl_last_error(ctx));
    cr_assert_eq(fcl_tuning_count(ctx), 2);

    fcl_context again = support_context(); /* read from disk */
    cr_assert_eq(fcl_tuning_count(again), 2);
    int seen = 0;
    for (int i = 0; i < 2; i++) {
        char kernel[16];
        int hdp = 0, n = 0, v[FCL_TUNING_MAX_VALUES];
        cr_assert_eq(fcl_tuning_entry(again, i, kernel, &hdp, v, &n), FCL_SUCCESS, "%s", fcl_last_error(again));
        if (strcmp(kernel, "forward") == 0) {
            cr_assert(hdp == 64 && n == 3 && memcmp(v, fwd, sizeof fwd) == 0, "forward entry: D %d, %d values", hdp, n);
            seen |= 1;
        } else {
            cr_assert(strcmp(kernel, "decode") == 0 && hdp == 128 && n == 10 && memcmp(v, dec, sizeof dec) == 0,
                      "entry %s D %d, %d values", kernel, hdp, n);
            seen |= 2;
        }
    }
    cr_assert_eq(seen, 3);
    char kernel[16];
    int hdp, n, v[FCL_TUNING_MAX_VALUES];
    cr_assert_eq(fcl_tuning_entry(again, 2, kernel, &hdp, v, &n), FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(fcl_last_error(again), "index", "2");
    cr_assert_eq(fcl_tuning_entry(again, 0, NULL, &hdp, v, &n), FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(fcl_last_error(again), "kernel");

    cr_assert_eq(fcl_tuning_reset(again), FCL_SUCCESS, "%s", fcl_last_error(again));
    cr_assert_eq(fcl_tuning_count(again), 0);
    cr_assert_eq(fcl_tuning_get(again, "forward", 40, after, 3), FCL_SUCCESS);
    cr_assert(memcmp(before, after, sizeof before) == 0, "after the reset the table's tiles run again");
    fcl_context third = support_context();
    cr_assert_eq(fcl_tuning_count(third), 0, "the reset reached the disk");
    fcl_context_release(third);
    fcl_context_release(again);
    fcl_context_release(ctx);
}

Test(api_info, tuning_reset_without_disk_cache)
{
    setenv("FLASHCL_CACHE_DIR", "off", 1);
    fcl_context ctx = support_context();
    cr_assert_eq(fcl_tuning_count(ctx), 0);
    cr_assert_eq(fcl_tuning_reset(ctx), FCL_ERR_UNSUPPORTED);
    SUPPORT_ASSERT_TOKENS(fcl_last_error(ctx), "FLASHCL_CACHE_DIR");
    cr_assert_eq(fcl_tuning_reset(NULL), FCL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(fcl_tuning_count(NULL), 0);
    fcl_context_release(ctx);
    unsetenv("FLASHCL_CACHE_DIR");
}
