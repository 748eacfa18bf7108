/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench op "decode": fcl_attention_decode over a full contiguous KV cache (host
 * length = the cache length Sk) on random inputs (fixed seeds; the caches repeat a 4M-element
 * random block), timed by bench_time; GB/s count
 * the K and V bytes read (B * Sk * Hkv * D * 2 * dtype size); checked on sampled query rows
 * by bench_check_forward (causal, bottom-right: the Sq queries are the last positions).
 * --layout bhsd stores Q, O and the caches [B, H, S, D] (SDPA's layout), passed as views.
 * FLASHCL_DECODE_SWEEP="T1;T2;...": the case runs once per FLASHCL_DECODE_TILES setting Ti on
 * the same inputs (made once), each setting named on stderr before its result line; the exit
 * code follows the last setting's check (every line shows its own). An item NAME=VALUE sets
 * that environment variable for the items after it (e.g. FLASHCL_DECODE_PATH=portable). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_ROWS 16
/* The caches repeat a random block of this many elements: multi-GB caches are filled at
 * memcpy speed (values do not change the kernel's work), and the check reads the same data. */
#define CACHE_PERIOD ((size_t)1 << 22)

bench_case bench_decode_default(const bench_env *env)
{
    bench_case c = {FCL_F16, 8, 1, 32768, 32, 8, 128, 1, -1, -1, 0.0f, 0};
    if (!env->is_gpu) {
        c.b = 1;
        c.sk = 4096;
    }
    return c;
}

typedef struct dec_data {
    bench_host h; /* q, k, v (the cache [B, Sk, Hkv, D]), o; logical order whatever the layout */
    fcl_tensor tq, to;
    fcl_kv_cache cache;
} dec_data;

static void free_data(dec_data *f)
{
    fcl_tensor_release(f->tq);
    fcl_tensor_release(f->to);
    fcl_tensor_release(f->cache.k);
    fcl_tensor_release(f->cache.v);
    bench_host_free(&f->h);
}

static int make_tensors(const bench_env *env, const bench_case *c, dec_data *f, size_t nq, size_t nk)
{
    fcl_status st = bench_make_bshd(env->ctx, c->dtype, c->bhsd, c->b, c->sq, c->hq, c->d, &f->tq);
    if (!st) st = bench_make_bshd(env->ctx, c->dtype, c->bhsd, c->b, c->sq, c->hq, c->d, &f->to);
    if (!st) st = bench_make_bshd(env->ctx, c->dtype, c->bhsd, c->b, c->sk, c->hkv, c->d, &f->cache.k);
    if (!st) st = bench_make_bshd(env->ctx, c->dtype, c->bhsd, c->b, c->sk, c->hkv, c->d, &f->cache.v);
    if (st)
        return bench_lib_error(env, "creating tensors", st);
    st = fcl_tensor_write_f32(f->tq, f->h.q, nq);
    if (!st) st = bench_write_periodic(f->cache.k, f->h.k, nk, CACHE_PERIOD);
    if (!st) st = bench_write_periodic(f->cache.v, f->h.v, nk, CACHE_PERIOD);
    if (!st) st = fcl_tensor_write_f32(f->to, f->h.o, nq);
    return st ? bench_lib_error(env, "writing inputs", st) : 0;
}

typedef struct dec_call {
    fcl_context ctx;
    fcl_attn_params p;
    const dec_data *f;
    int64_t len;
} dec_call;

static fcl_status enqueue_decode(void *arg, cl_event *ev)
{
    const dec_call *c = arg;
    return fcl_attention_decode(c->ctx, &c->p, c->f->tq, &c->f->cache, c->len, NULL, NULL, c->f->to, NULL, ev);
}

/* Times the call, reads O back and checks it: one result in r (r->op and r->c set). */
static int run_once(const bench_env *env, dec_call *call, dec_data *f, size_t nq, size_t nk, bench_result *r)
{
    int rc = bench_time_op(env, enqueue_decode, call, "fcl_attention_decode", r);
    if (!rc) {
        fcl_status st = fcl_tensor_read_f32(f->to, f->h.o, nq);
        if (st)
            rc = bench_lib_error(env, "reading O", st);
    }
    if (!rc) {
        /* decode is the causal forward with Sq = the query rows, Sk = the cache length */
        bench_check_in in = {.c = &r->c, .q = f->h.q, .k = f->h.k, .v = f->h.v, .o = f->h.o, .check_rows = CHECK_ROWS};
        bench_check_forward(&in, r);
        const double bytes = 2.0 * (double)nk * (double)fcl_dtype_size(r->c.dtype);
        r->gbps = bytes / (r->ms * 1e-3) * 1e-9;
        r->ms_event = NAN; /* the event covers only the last of the op's kernels */
        r->tflops = r->tflops_exact = r->tflops_event = NAN;
    }
    return rc;
}

int bench_decode(const bench_env *env, const bench_case *c, bench_result *r)
{
    dec_data f = {0};
    const size_t nq = (size_t)c->b * c->sq * c->hq * c->d, nk = (size_t)c->b * c->sk * c->hkv * c->d;
    int rc = 0;
    r->op = "decode";
    r->c = *c;
    r->c.causal = 1;
    if (bench_host_alloc(&f.h, c->dtype, nq, nk, CACHE_PERIOD)) {
        fprintf(stderr, "flashcl-bench: out of host memory for the inputs\n");
        rc = BENCH_EXIT_LIBRARY;
    }
    if (!rc)
        rc = make_tensors(env, c, &f, nq, nk);
    dec_call call = {env->ctx, bench_params_of(&r->c), &f, c->sk};
    call.p.causal = 0; /* implied by decode */
    const char *sweep = getenv("FLASHCL_DECODE_SWEEP");
    if (!rc && sweep && *sweep) {
        char list[1024], *save = NULL;
        snprintf(list, sizeof list, "%s", sweep);
        const bench_result blank = *r;
        int first = 1;
        for (char *t = strtok_r(list, ";", &save); t && !rc; t = strtok_r(NULL, ";", &save)) {
            char *eq = strchr(t, '=');
            if (eq) { /* NAME=VALUE: an environment setting for the settings after it */
                *eq = '\0';
                setenv(t, eq + 1, 1);
                fprintf(stderr, "flashcl-bench: decode sweep: %s=%s\n", t, eq + 1);
                continue;
            }
            if (!first)
                bench_print_result(env, r); /* the previous setting's line */
            first = 0;
            *r = blank;
            setenv("FLASHCL_DECODE_TILES", t, 1);
            fprintf(stderr, "flashcl-bench: decode sweep: FLASHCL_DECODE_TILES=%s\n", t);
            rc = run_once(env, &call, &f, nq, nk, r);
        }
        unsetenv("FLASHCL_DECODE_TILES");
    } else if (!rc) {
        rc = run_once(env, &call, &f, nq, nk, r);
    }
    free_data(&f);
    return rc;
}
