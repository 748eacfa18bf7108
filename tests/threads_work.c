/* SPDX-License-Identifier: Apache-2.0 */
/* The thread scenarios of test_threads.c and threads_alone.c (see threads_work.h). */
#include "threads_work.h"

#include "support.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { THREADS = 4, ROUNDS = 3, OUT_MAX = 80 };

/* One thread's work: its tensors, its results and what went wrong (threads never assert). */
typedef struct work {
    int index;
    fcl_context ctx;
    fcl_tensor Q, K, V, O, LSE;        /* forward: Q, O [1, 5, 2, 8]; K, V [1, 7, 1, 8] */
    fcl_tensor Kc, Vc, Kn, Vn, Qd, Od; /* cache [1, 6, 1, 8], 2 new rows at 4, decode Q, O [1, 1, 2, 8] */
    fcl_tensor X, W, Y, Y2;            /* fcl_project_kv: X [3, 8], W [8, 8], Y, Y2 [3, 8] */
    float out[4][OUT_MAX];             /* O, LSE, decode O, Y */
    fcl_cache_stats stats;
    char why[512];
} work;

/* Records the first failure of w; returns 0 so callers write `return fail(...)`. */
static int fail(work *w, const char *what, fcl_status st)
{
    if (!w->why[0])
        snprintf(w->why, sizeof w->why, "thread %d: %s: %s: %s", w->index, what, fcl_status_string(st),
                 fcl_last_error(w->ctx));
    return 0;
}

/* A new tensor of w's context filled with seeded values (seed 0: left undefined). */
static int make(work *w, fcl_tensor *t, int ndim, const int64_t *shape, uint64_t seed)
{
    fcl_status st = fcl_tensor_create(w->ctx, FCL_F32, ndim, shape, t);
    if (st != FCL_SUCCESS)
        return fail(w, "fcl_tensor_create", st);
    if (!seed)
        return 1;
    const size_t n = (size_t)fcl_tensor_numel(*t);
    float *x = malloc(sizeof(float) * n);
    if (!x)
        return fail(w, "malloc", FCL_ERR_OUT_OF_MEMORY);
    support_random(x, n, seed, -1.0f, 1.0f, FCL_F32);
    st = fcl_tensor_write_f32(*t, x, n);
    free(x);
    return st == FCL_SUCCESS ? 1 : fail(w, "fcl_tensor_write_f32", st);
}

/* w's tensors on w->ctx, seeded by w->index. */
static int make_all(work *w)
{
    const uint64_t s = 1000 + 100 * (uint64_t)w->index;
    const int64_t q[4] = {1, 5, 2, 8}, k[4] = {1, 7, 1, 8}, l[3] = {1, 2, 5}, c[4] = {1, 6, 1, 8};
    const int64_t n[4] = {1, 2, 1, 8}, d[4] = {1, 1, 2, 8}, x[2] = {3, 8}, wt[2] = {8, 8};
    return make(w, &w->Q, 4, q, s + 1) && make(w, &w->K, 4, k, s + 2) && make(w, &w->V, 4, k, s + 3) &&
           make(w, &w->O, 4, q, 0) && make(w, &w->LSE, 3, l, 0) && make(w, &w->Kc, 4, c, s + 4) &&
           make(w, &w->Vc, 4, c, s + 5) && make(w, &w->Kn, 4, n, s + 6) && make(w, &w->Vn, 4, n, s + 7) &&
           make(w, &w->Qd, 4, d, s + 8) && make(w, &w->Od, 4, d, 0) && make(w, &w->X, 2, x, s + 9) &&
           make(w, &w->W, 2, wt, s + 10) && make(w, &w->Y, 2, x, 0) && make(w, &w->Y2, 2, x, 0);
}

static void release_all(work *w)
{
    const fcl_tensor all[] = {w->Q, w->K, w->V, w->O, w->LSE, w->Kc, w->Vc, w->Kn, w->Vn, w->Qd, w->Od, w->X,
                              w->W, w->Y, w->Y2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        fcl_tensor_release(all[i]);
}

/* One round: the calls, a rejected call whose message must be this thread's, the results. */
/* Set for THREADS_CACHED_LOADS: the kv-cache append alone (one small program), since PoCL with
 * its kernel cache off compiles every kernel again in every context. */
static int append_only;

static int run(work *w)
{
    fcl_status st;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.causal = 1;
    if (!append_only && (st = fcl_attention_forward(w->ctx, &p, w->Q, w->K, w->V, w->O, w->LSE, NULL)))
        return fail(w, "fcl_attention_forward", st);
    const fcl_kv_cache cache = {w->Kc, w->Vc, NULL};
    if ((st = fcl_kv_cache_append(w->ctx, &cache, w->Kn, w->Vn, 4, NULL, NULL)) != FCL_SUCCESS)
        return fail(w, "fcl_kv_cache_append", st);
    fcl_attn_params pd = FCL_ATTN_PARAMS_INIT;
    if (!append_only && (st = fcl_attention_decode(w->ctx, &pd, w->Qd, &cache, 6, NULL, NULL, w->Od, NULL, NULL)))
        return fail(w, "fcl_attention_decode", st);
    const fcl_weight wt = {w->W, NULL, NULL};
    if (!append_only && (st = fcl_project_kv(w->ctx, w->X, &wt, &wt, w->Y, w->Y2, NULL)))
        return fail(w, "fcl_project_kv", st);
    /* window_left -(2 + index): rejected, and the message names this thread's value */
    fcl_attn_params bad = FCL_ATTN_PARAMS_INIT;
    bad.window_left = -(2 + w->index);
    char token[16];
    snprintf(token, sizeof token, "%d", bad.window_left);
    if (fcl_attention_forward(w->ctx, &bad, w->Q, w->K, w->V, w->O, w->LSE, NULL) != FCL_ERR_INVALID_ARGUMENT ||
        !support_has_token(fcl_last_error(w->ctx), token)) {
        snprintf(w->why, sizeof w->why, "thread %d: the rejected call's message is \"%s\"; expected one naming %s",
                 w->index, fcl_last_error(w->ctx), token);
        return 0;
    }
    const fcl_tensor outs[4] = {append_only ? w->Kc : w->O, w->LSE, w->Od, w->Y};
    for (int i = 0; i < (append_only ? 1 : 4); i++)
        if ((st = fcl_tensor_read_f32(outs[i], w->out[i], (size_t)fcl_tensor_numel(outs[i]))) != FCL_SUCCESS)
            return fail(w, "fcl_tensor_read_f32", st);
    return 1;
}

/* The expected results into out: each thread's work run alone, one after the other, on one
 * context. Returns NULL or what failed (static). */
static const char *expected(float out[THREADS][4][OUT_MAX])
{
    static char why[512];
    fcl_context ctx = NULL;
    if (fcl_context_create(NULL, &ctx) != FCL_SUCCESS) {
        snprintf(why, sizeof why, "fcl_context_create: %s", fcl_last_error(NULL));
        return why;
    }
    const char *failed = NULL;
    for (int t = 0; t < THREADS && !failed; t++) {
        work w = {.index = t, .ctx = ctx};
        if (make_all(&w) && run(&w))
            memcpy(out[t], w.out, sizeof w.out);
        else
            failed = strcpy(why, w.why);
        release_all(&w);
    }
    fcl_context_release(ctx);
    return failed;
}

/* NULL when every thread finished without a failure and matched its expected results (and,
 * with `from_disk`, loaded every program from the disk cache); else what differed (static). */
static const char *check(const work *ws, float want[THREADS][4][OUT_MAX], int from_disk)
{
    static char why[512];
    for (int t = 0; t < THREADS; t++) {
        if (ws[t].why[0])
            return strcpy(why, ws[t].why);
        for (int i = 0; i < 4; i++)
            if (memcmp(ws[t].out[i], want[t][i], sizeof want[t][i]) != 0) {
                snprintf(why, sizeof why, "thread %d, output %d differs from the single-threaded run", t, i);
                return why;
            }
        if (from_disk && (ws[t].stats.compiles != 0 || ws[t].stats.disk_hits == 0)) {
            snprintf(why, sizeof why, "thread %d: %llu compiles, %llu disk hits, %llu rejects; expected every program "
                     "from the disk", t, (unsigned long long)ws[t].stats.compiles,
                     (unsigned long long)ws[t].stats.disk_hits, (unsigned long long)ws[t].stats.disk_rejects);
            return why;
        }
    }
    return NULL;
}

/* ROUNDS rounds of w's work on its own tensors (made here, on w->ctx). */
static void *shared_thread(void *arg)
{
    work *w = arg;
    if (make_all(w))
        for (int r = 0; r < ROUNDS && run(w); r++)
            ;
    release_all(w);
    return NULL;
}

/* A context of its own, then shared_thread's work; the context's cache counters into w->stats. */
static void *own_context_thread(void *arg)
{
    work *w = arg;
    fcl_status st = fcl_context_create(NULL, &w->ctx);
    if (st != FCL_SUCCESS) {
        snprintf(w->why, sizeof w->why, "thread %d: fcl_context_create: %s", w->index, fcl_last_error(NULL));
        return NULL;
    }
    shared_thread(w);
    fcl_context_cache_stats(w->ctx, &w->stats);
    fcl_context_release(w->ctx);
    return NULL;
}

const char *threads_scenario_run(threads_scenario s)
{
    static float want[THREADS][4][OUT_MAX];
    static work ws[THREADS];
    static char why[512];
    char dir[] = "/tmp/flashcl-threads-cache.XXXXXX";
    if (s == THREADS_CACHED_LOADS) {
        if (!mkdtemp(dir))
            return "mkdtemp failed";
        setenv("FLASHCL_CACHE_DIR", dir, 1);
        setenv("FLASHCL_CACHE_PROGRAMS", "1", 1);
        setenv("POCL_KERNEL_CACHE", "0", 1);
    }
    append_only = s == THREADS_CACHED_LOADS;
    const char *failed = expected(want); /* with the disk cache on: compiles and stores every program */
    fcl_context shared = NULL;
    if (!failed && s == THREADS_ONE_CONTEXT && fcl_context_create(NULL, &shared) != FCL_SUCCESS)
        failed = strcpy(why, fcl_last_error(NULL));
    if (!failed) {
        memset(ws, 0, sizeof ws);
        pthread_t th[THREADS];
        int started[THREADS] = {0};
        for (int t = 0; t < THREADS; t++) {
            ws[t].index = t;
            ws[t].ctx = shared;
            started[t] = pthread_create(&th[t], NULL, shared ? shared_thread : own_context_thread, &ws[t]) == 0;
            if (!started[t])
                snprintf(ws[t].why, sizeof ws[t].why, "thread %d: pthread_create failed", t);
        }
        for (int t = 0; t < THREADS; t++)
            if (started[t])
                pthread_join(th[t], NULL);
        failed = check(ws, want, s == THREADS_CACHED_LOADS);
    }
    fcl_context_release(shared);
    if (s == THREADS_CACHED_LOADS)
        support_remove_tree(dir);
    return failed;
}
