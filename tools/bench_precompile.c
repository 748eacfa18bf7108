/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench --precompile: fcl_precompile for a deployment's shapes, dtypes and head dims,
 * timed, with the program-cache counters it leaves (what was built, loaded or stored). */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Splits the comma list `list` (validated by bench_args.c) into up to n items through `parse`. */
static int split(const char *list, int *out, int n, int (*parse)(const char *))
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    int k = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && k < n; t = strtok_r(NULL, ",", &save))
        out[k++] = parse(t);
    return k;
}

static int parse_dim(const char *s) { return atoi(s); }

int bench_precompile(const bench_env *env, const bench_opts *o)
{
    fcl_precompile_spec sp = FCL_PRECOMPILE_SPEC_INIT;
    char ops_buf[256];
    snprintf(ops_buf, sizeof ops_buf, "%s", o->precompile);
    for (char *save = NULL, *t = strtok_r(ops_buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        sp.ops |= bench_precompile_bit(t);
    int dtypes[8], dims[32];
    int nd = o->dtypes ? split(o->dtypes, dtypes, 8, bench_parse_dtype) : 1;
    if (!o->dtypes)
        dtypes[0] = o->dtype >= 0 ? o->dtype : FCL_F16;
    int nh = o->dims ? split(o->dims, dims, 32, parse_dim) : o->d ? 1 : 2;
    if (!o->dims) {
        dims[0] = o->d ? o->d : 64;
        dims[1] = 128;
    }
    fcl_dtype dts[8];
    for (int i = 0; i < nd; i++)
        dts[i] = (fcl_dtype)dtypes[i];
    const int decode_only = (sp.ops & ~FCL_PRECOMPILE_BACKWARD) == FCL_PRECOMPILE_DECODE;
    sp.dtypes = dts, sp.n_dtypes = nd, sp.head_dims = dims, sp.n_head_dims = nh;
    sp.batch = o->b ? o->b : 1;
    sp.seq_q = o->sq ? o->sq : decode_only ? 1 : o->sk ? o->sk : 512;
    sp.seq_k = o->sk ? o->sk : decode_only ? 4096 : sp.seq_q;
    sp.num_heads = o->hq ? o->hq : 8;
    sp.num_kv_heads = o->hkv ? o->hkv : sp.num_heads;
    sp.page_size = o->page_size;
    sp.weight_dtype = o->weights >= 0 ? (fcl_dtype)o->weights : FCL_F16;
    sp.features = (o->causal ? FCL_PRECOMPILE_CAUSAL : 0) | (o->softcap > 0 ? FCL_PRECOMPILE_SOFTCAP : 0) |
                  (o->mask ? FCL_PRECOMPILE_KEY_MASK : 0) | (o->alibi ? FCL_PRECOMPILE_ALIBI : 0) |
                  (o->bias ? FCL_PRECOMPILE_BIAS : 0);

    const double t0 = bench_now_ms();
    const fcl_status s = fcl_precompile(env->ctx, &sp);
    const double ms = bench_now_ms() - t0;
    fcl_cache_stats st;
    fcl_context_cache_stats(env->ctx, &st);
    const char *dir = fcl_context_cache_dir(env->ctx);
    if (s != FCL_SUCCESS) {
        fprintf(stderr, "flashcl-bench: fcl_precompile: %s: %s\n", fcl_status_string(s), fcl_last_error(env->ctx));
        return BENCH_EXIT_LIBRARY;
    }
    if (env->json) {
        printf("{\"op\":\"precompile\",\"ops\":\"%s\",\"dtypes\":\"%s\",\"head_dims\":\"%s\",\"b\":%d,\"sq\":%d,"
               "\"sk\":%d,\"hq\":%d,\"hkv\":%d,\"page_size\":%d,\"features\":%u,\"ms\":%.1f,\"compiles\":%llu,"
               "\"disk_hits\":%llu,\"disk_writes\":%llu,\"disk_rejects\":%llu,\"cache_dir\":\"%s\"}\n",
               o->precompile, o->dtypes ? o->dtypes : fcl_dtype_name(dts[0]), o->dims ? o->dims : "", sp.batch,
               sp.seq_q, sp.seq_k, sp.num_heads, sp.num_kv_heads, sp.page_size, sp.features, ms,
               (unsigned long long)st.compiles, (unsigned long long)st.disk_hits,
               (unsigned long long)st.disk_writes, (unsigned long long)st.disk_rejects, dir ? dir : "");
    } else {
        printf("precompile %s: %d dtype(s), %d head dim(s), B %d Sq %d Sk %d Hq %d Hkv %d%s: %.1f s; programs "
               "compiled %llu, loaded from disk %llu, stored %llu (rejected %llu); cache folder %s\n",
               o->precompile, nd, nh, sp.batch, sp.seq_q, sp.seq_k, sp.num_heads, sp.num_kv_heads,
               sp.page_size ? " paged" : "", ms / 1000.0, (unsigned long long)st.compiles,
               (unsigned long long)st.disk_hits, (unsigned long long)st.disk_writes,
               (unsigned long long)st.disk_rejects, dir ? dir : "off");
        if (st.compiles > 0 && st.disk_writes == 0 && dir)
            printf("  the programs were not stored in flashcl's folder: this implementation keeps its own "
                   "cache (PoCL: POCL_CACHE_DIR, filled now) or gives no binaries; FLASHCL_CACHE_PROGRAMS=1 "
                   "stores them here too\n");
    }
    return BENCH_EXIT_OK;
}
