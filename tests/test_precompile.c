/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcl_precompile: after it, a deployment's first calls compile nothing, in the same context
 * (memory) and in a new one on the same cache folder (disk); a folder warmed on another device,
 * and entries moved under another key, are not used; bad specs are refused before anything
 * runs; an op's error comes back named.
 *
 * The disk tests run with FLASHCL_CACHE_PROGRAMS=1 (programs on disk on PoCL too). Where the
 * device gives no program binaries they skip after checking that nothing was written (reported
 * as skipped, never as passed); where no second OpenCL device is present the foreign-device
 * test skips likewise. The warmed calls' results are checked against the float64 reference.
 */
#define _XOPEN_SOURCE 700
#include "ref_attention.h"
#include "support.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char g_tmp[256];
static char *g_saved[2];
static const char *const g_env[2] = {"FLASHCL_CACHE_DIR", "FLASHCL_CACHE_PROGRAMS"};

static void sandbox_init(void)
{
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(g_env[i]);
        g_saved[i] = v ? strdup(v) : NULL;
    }
    snprintf(g_tmp, sizeof g_tmp, "/tmp/flashcl-test-precompile-XXXXXX");
    cr_assert(mkdtemp(g_tmp) != NULL, "mkdtemp: %s", strerror(errno));
    cr_assert(setenv("FLASHCL_CACHE_DIR", g_tmp, 1) == 0 && setenv("FLASHCL_CACHE_PROGRAMS", "1", 1) == 0);
}

static void sandbox_fini(void)
{
    support_remove_tree(g_tmp);
    for (int i = 0; i < 2; i++) {
        if (g_saved[i])
            setenv(g_env[i], g_saved[i], 1);
        else
            unsetenv(g_env[i]);
        free(g_saved[i]);
        g_saved[i] = NULL;
    }
}

TestSuite(precompile, .init = sandbox_init, .fini = sandbox_fini);

/* ---------------------------------------------------------------- the deployment */

/* A small deployment: F16, head dim 32, Hq 2 over Hkv 1, causal. Prefill: forward at B 2,
 * S 7, and the attention block with int8 weights and biases (Lq 7, 2 heads); generation:
 * decode over a cache of 48 rows, one query row. */
static const fcl_dtype k_dtypes[1] = {FCL_F16};
static const int k_dims[1] = {32};
enum { B = 2, S = 7, HQ = 2, HKV = 1, HD = 32, L_MAX = 48, LEN = 29 };

static fcl_precompile_spec prefill_spec(void)
{
    fcl_precompile_spec sp = FCL_PRECOMPILE_SPEC_INIT;
    sp.ops = FCL_PRECOMPILE_FORWARD | FCL_PRECOMPILE_QKVO;
    sp.features = FCL_PRECOMPILE_CAUSAL | FCL_PRECOMPILE_BIAS;
    sp.dtypes = k_dtypes, sp.n_dtypes = 1, sp.head_dims = k_dims, sp.n_head_dims = 1;
    sp.batch = B, sp.seq_q = S, sp.seq_k = S, sp.num_heads = HQ, sp.num_kv_heads = HKV;
    sp.weight_dtype = FCL_I8;
    return sp;
}

static fcl_precompile_spec decode_spec(void)
{
    fcl_precompile_spec sp = prefill_spec();
    sp.ops = FCL_PRECOMPILE_DECODE;
    sp.seq_q = 1, sp.seq_k = L_MAX;
    return sp;
}

static void warm(fcl_context ctx)
{
    const fcl_precompile_spec specs[2] = {prefill_spec(), decode_spec()};
    for (int i = 0; i < 2; i++) {
        const fcl_status s = fcl_precompile(ctx, &specs[i]);
        cr_assert_eq(s, FCL_SUCCESS, "fcl_precompile: %s: %s", fcl_status_string(s), fcl_last_error(ctx));
    }
}

static void expect_ok(fcl_context ctx, const char *what, fcl_status s)
{
    cr_assert_eq(s, FCL_SUCCESS, "%s: %s: %s", what, fcl_status_string(s), fcl_last_error(ctx));
}

/* The deployment's calls on random data: forward (checked against the float64 reference),
 * qkvo, a cache append and a decode at length LEN (no NaN in their outputs). */
static void deployment_calls(fcl_context ctx)
{
    const fcl_dtype dt = FCL_F16;
    const int64_t qs[4] = {B, S, HQ, HD}, ks[4] = {B, S, HKV, HD}, ls[3] = {B, HQ, S};
    const size_t nq = (size_t)B * S * HQ * HD, nk = (size_t)B * S * HKV * HD;
    float *q = support_xmalloc(sizeof(float) * nq), *k = support_xmalloc(sizeof(float) * nk);
    float *v = support_xmalloc(sizeof(float) * nk), *o = support_xmalloc(sizeof(float) * nq);
    support_random(q, nq, 1, -1.0f, 1.0f, dt);
    support_random(k, nk, 2, -1.0f, 1.0f, dt);
    support_random(v, nk, 3, -1.0f, 1.0f, dt);
    fcl_tensor tq = support_tensor(ctx, dt, 4, qs, q), tk = support_tensor(ctx, dt, 4, ks, k);
    fcl_tensor tv = support_tensor(ctx, dt, 4, ks, v), to = support_tensor(ctx, dt, 4, qs, NULL);
    fcl_tensor tl = support_tensor(ctx, FCL_F32, 3, ls, NULL);
    support_poison(to);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.causal = 1;
    expect_ok(ctx, "fcl_attention_forward", fcl_attention_forward(ctx, &p, tq, tk, tv, to, tl, NULL));
    support_read(to, o);
    const ref_attn_problem rp = {.B = B, .Sq = S, .Sk = S, .Hq = HQ, .Hkv = HKV, .D = HD, .causal = 1,
                                 .window_left = -1, .window_right = -1};
    double *oref = support_xmalloc(sizeof(double) * nq);
    float *onaive = support_xmalloc(sizeof(float) * nq);
    ref_attention_forward(&rp, q, k, v, oref, NULL);
    ref_attention_forward_naive(&rp, dt, q, k, v, onaive, NULL);
    const double err = support_max_err_f(o, oref, nq), nerr = support_max_err_f(onaive, oref, nq);
    cr_expect(support_within(err, nerr, 2.0), "forward after fcl_precompile: err %.3g, naive %.3g", err, nerr);

    /* the attention block: X [S, HQ * HD], int8 weights with row scales and biases */
    const int64_t xs[2] = {S, HQ * HD};
    const size_t nx = (size_t)S * HQ * HD;
    float *x = support_xmalloc(sizeof(float) * nx), *ox = support_xmalloc(sizeof(float) * nx);
    support_random(x, nx, 4, -1.0f, 1.0f, dt);
    fcl_tensor tx = support_tensor(ctx, dt, 2, xs, x), tox = support_tensor(ctx, dt, 2, xs, NULL);
    support_poison(tox);
    support_weight hw[4];
    fcl_weight fw[4];
    for (int i = 0; i < 4; i++) {
        support_weight_make(ctx, &hw[i], FCL_I8, dt, HQ * HD, HQ * HD, 1, 10 + 3 * (uint64_t)i);
        fw[i] = support_weight_fcl(&hw[i]);
    }
    expect_ok(ctx, "fcl_attention_qkvo_forward",
              fcl_attention_qkvo_forward(ctx, &p, HQ, tx, NULL, &fw[0], &fw[1], &fw[2], &fw[3], tox, NULL));
    support_read(tox, ox);
    cr_expect(support_count_nan(ox, nx) == 0, "qkvo after fcl_precompile wrote NaN");

    /* generation: append one row per sequence at LEN - 1, decode at LEN */
    const int64_t cs[4] = {B, L_MAX, HKV, HD}, ns[4] = {B, 1, HKV, HD}, dq[4] = {B, 1, HQ, HD};
    fcl_tensor kc = support_tensor_random(ctx, dt, 4, cs, 5), vc = support_tensor_random(ctx, dt, 4, cs, 6);
    fcl_tensor kn = support_tensor_random(ctx, dt, 4, ns, 7), vn = support_tensor_random(ctx, dt, 4, ns, 8);
    fcl_tensor qd = support_tensor_random(ctx, dt, 4, dq, 9), od = support_tensor(ctx, dt, 4, dq, NULL);
    support_poison(od);
    const fcl_kv_cache cache = {kc, vc, NULL};
    fcl_attn_params pd = FCL_ATTN_PARAMS_INIT;
    pd.causal = 1;
    expect_ok(ctx, "fcl_kv_cache_append", fcl_kv_cache_append(ctx, &cache, kn, vn, LEN - 1, NULL, NULL));
    expect_ok(ctx, "fcl_attention_decode", fcl_attention_decode(ctx, &pd, qd, &cache, LEN, NULL, NULL, od, NULL, NULL));
    float *odh = support_xmalloc(sizeof(float) * (size_t)B * HQ * HD);
    support_read(od, odh);
    cr_expect(support_count_nan(odh, (size_t)B * HQ * HD) == 0, "decode after fcl_precompile wrote NaN");

    for (int i = 0; i < 4; i++)
        support_weight_release(&hw[i]);
    const fcl_tensor all[] = {tq, tk, tv, to, tl, tx, tox, kc, vc, kn, vn, qd, od};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        fcl_tensor_release(all[i]);
    free(q), free(k), free(v), free(o), free(oref), free(onaive), free(x), free(ox), free(odh);
}

/* Whether the context's device gives program binaries (a tiny program, built directly). */
static int device_gives_binaries(fcl_context ctx)
{
    const char *src = "__kernel void k(__global int *x) { x[get_global_id(0)] += 1; }";
    cl_int err = CL_SUCCESS;
    cl_device_id dv = fcl_context_cl_device(ctx);
    cl_program p = clCreateProgramWithSource(fcl_context_cl_context(ctx), 1, &src, NULL, &err);
    cr_assert(err == CL_SUCCESS && clBuildProgram(p, 1, &dv, "", NULL, NULL) == CL_SUCCESS);
    size_t size = 0;
    err = clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL);
    clReleaseProgram(p);
    return err == CL_SUCCESS && size > 0;
}

/* A context on the test's device whose cache folder is g_tmp, with zero counters. */
static fcl_context new_context(void)
{
    fcl_context ctx = support_context();
    const fcl_cache_stats s = support_cache_stats(ctx);
    cr_assert(s.compiles == 0 && s.disk_hits == 0, "a new context has non-zero cache counters");
    return ctx;
}

Test(precompile, same_context_compiles_nothing_after)
{
    fcl_context ctx = new_context();
    warm(ctx);
    const fcl_cache_stats w = support_cache_stats(ctx);
    cr_assert(w.compiles + w.disk_hits > 0, "fcl_precompile built nothing: " STATS_FMT, STATS_ARGS(w));
    deployment_calls(ctx);
    const fcl_cache_stats d = support_cache_stats(ctx);
    cr_expect(d.compiles == w.compiles && d.disk_hits == w.disk_hits && d.memory_hits > w.memory_hits,
              "the deployment's calls built programs after fcl_precompile: before " STATS_FMT ", after " STATS_FMT,
              STATS_ARGS(w), STATS_ARGS(d));
    fcl_context_release(ctx);
}

Test(precompile, new_context_loads_everything_from_disk)
{
    fcl_context ctx = new_context();
    warm(ctx);
    const fcl_cache_stats w = support_cache_stats(ctx);
    const int binaries = device_gives_binaries(ctx);
    fcl_context_release(ctx);
    if (!binaries) {
        cr_expect(w.disk_writes == 0, "no binaries, yet " STATS_FMT, STATS_ARGS(w));
        cr_skip("the device gives no program binaries: nothing to load from disk");
    }
    cr_assert(w.disk_writes > 0 && w.disk_writes == w.compiles, "fcl_precompile stored " STATS_FMT, STATS_ARGS(w));
    ctx = new_context();
    deployment_calls(ctx);
    const fcl_cache_stats d = support_cache_stats(ctx);
    cr_expect(d.compiles == 0 && d.disk_hits > 0 && d.disk_rejects == 0,
              "a new context compiled after fcl_precompile: " STATS_FMT, STATS_ARGS(d));
    fcl_context_release(ctx);
}

/* Regular files directly in dir, their names into names[] (up to n), returns how many. */
static int list_files(const char *dir, char names[][PATH_MAX], int n)
{
    DIR *d = opendir(dir);
    cr_assert(d != NULL, "opendir %s", dir);
    int k = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && k < n) {
        const size_t len = strlen(e->d_name);
        if (len > 6 && strcmp(e->d_name + len - 6, ".clbin") == 0)
            snprintf(names[k++], PATH_MAX, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    return k;
}

/* Each entry's content moved under the next entry's name (a well-formed entry of another key,
 * as a file of another device or driver would be under this name): all are refused and
 * rebuilt, and the results stay right. */
Test(precompile, entries_under_another_key_refused)
{
    fcl_context ctx = new_context();
    warm(ctx);
    const int binaries = device_gives_binaries(ctx);
    fcl_context_release(ctx);
    if (!binaries)
        cr_skip("the device gives no program binaries: no entries to move");
    static char names[64][PATH_MAX];
    const int n = list_files(g_tmp, names, 64);
    cr_assert(n >= 2, "fcl_precompile left %d entries", n);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/rotating", g_tmp);
    cr_assert(rename(names[0], tmp) == 0);
    for (int i = 1; i < n; i++)
        cr_assert(rename(names[i], names[i - 1]) == 0);
    cr_assert(rename(tmp, names[n - 1]) == 0);
    ctx = new_context();
    deployment_calls(ctx);
    const fcl_cache_stats d = support_cache_stats(ctx);
    cr_expect(d.disk_hits == 0 && d.disk_rejects > 0 && d.compiles > 0,
              "entries under another key were not refused: " STATS_FMT, STATS_ARGS(d));
    fcl_context_release(ctx);
}

/* The folder warmed on the test's device, then used by a context on another OpenCL device of
 * another platform (this machine's other implementation): nothing of it is used. */
Test(precompile, folder_of_another_device_unused)
{
    fcl_context ctx = new_context();
    warm(ctx);
    fcl_device_info mine;
    cr_assert_eq(fcl_context_device_info(ctx, &mine), FCL_SUCCESS);
    const int binaries = device_gives_binaries(ctx);
    fcl_context_release(ctx);
    if (!binaries)
        cr_skip("the device gives no program binaries: nothing to refuse");
    setenv("RUSTICL_ENABLE", "llvmpipe", 0);
    cl_platform_id platforms[16];
    cl_uint np = 0;
    cr_assert(clGetPlatformIDs(16, platforms, &np) == CL_SUCCESS);
    fcl_context other = NULL;
    for (cl_uint p = 0; p < np && !other; p++) {
        char name[256] = "";
        cl_uint nd = 0;
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof name, name, NULL);
        if (strcmp(name, mine.platform_name) == 0 ||
            clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
            continue;
        char sel[32];
        snprintf(sel, sizeof sel, "%u:0", p);
        if (fcl_context_create(sel, &other) != FCL_SUCCESS)
            other = NULL;
    }
    if (!other)
        cr_skip("no OpenCL device of another platform on this machine");
    deployment_calls(other);
    const fcl_cache_stats d = support_cache_stats(other);
    cr_expect(d.disk_hits == 0 && d.compiles > 0, "another device used the warmed folder: " STATS_FMT,
              STATS_ARGS(d));
    fcl_context_release(other);
}

/* ---------------------------------------------------------------- errors */

/* fcl_precompile(spec) fails with `want`, a message naming `token`, and builds nothing. */
static void bad_spec(const fcl_precompile_spec *spec, fcl_status want, const char *token)
{
    fcl_context ctx = new_context();
    const fcl_status s = fcl_precompile(ctx, spec);
    const char *msg = fcl_last_error(ctx);
    cr_expect_eq(s, want, "got %s (%s), want %s", fcl_status_string(s), msg, fcl_status_string(want));
    support_assert_sentence(msg);
    cr_expect(strstr(msg, token) != NULL, "message \"%s\" does not name \"%s\"", msg, token);
    const fcl_cache_stats st = support_cache_stats(ctx);
    cr_expect(st.compiles == 0 && st.disk_hits == 0, "a refused spec built programs: " STATS_FMT, STATS_ARGS(st));
    fcl_context_release(ctx);
}

Test(precompile, bad_specs_refused)
{
    bad_spec(NULL, FCL_ERR_INVALID_ARGUMENT, "spec");
    fcl_precompile_spec sp = prefill_spec();
    sp.ops = FCL_PRECOMPILE_BACKWARD;
    bad_spec(&sp, FCL_ERR_INVALID_ARGUMENT, "spec.ops");
    sp.ops = 1u << 9;
    bad_spec(&sp, FCL_ERR_INVALID_ARGUMENT, "spec.ops");
    sp = prefill_spec();
    sp.features = 1u << 12;
    bad_spec(&sp, FCL_ERR_INVALID_ARGUMENT, "spec.features");
    sp = prefill_spec();
    sp.n_dtypes = 0;
    bad_spec(&sp, FCL_ERR_INVALID_ARGUMENT, "spec.dtypes");
    sp = prefill_spec();
    sp.head_dims = NULL;
    bad_spec(&sp, FCL_ERR_INVALID_ARGUMENT, "spec.head_dims");
    static const int zero_dim[1] = {0};
    sp = prefill_spec();
    sp.head_dims = zero_dim;
    bad_spec(&sp, FCL_ERR_INVALID_ARGUMENT, "spec.head_dims[0]");
    sp = prefill_spec();
    sp.seq_k = 0;
    bad_spec(&sp, FCL_ERR_INVALID_ARGUMENT, "seq_k");
    sp = prefill_spec();
    sp.page_size = -1;
    bad_spec(&sp, FCL_ERR_INVALID_ARGUMENT, "page_size");
}

Test(precompile, op_errors_named)
{
    static const int dims[1] = {300};
    fcl_precompile_spec sp = prefill_spec();
    sp.ops = FCL_PRECOMPILE_FORWARD;
    sp.head_dims = dims;
    bad_spec(&sp, FCL_ERR_UNSUPPORTED, "fcl_precompile (forward, f16, head_dim 300)");
    sp = prefill_spec();
    sp.num_kv_heads = 3; /* 2 % 3 != 0 */
    fcl_context ctx = new_context();
    const fcl_status s = fcl_precompile(ctx, &sp);
    cr_expect(s != FCL_SUCCESS && strstr(fcl_last_error(ctx), "fcl_precompile (forward, f16, head_dim 32)"),
              "Hq 2 over Hkv 3: %s (%s)", fcl_status_string(s), fcl_last_error(ctx));
    fcl_context_release(ctx);
}
