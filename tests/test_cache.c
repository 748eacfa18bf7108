/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The program cache: per-context memory hits, the disk cache (FLASHCL_CACHE_DIR, read at
 * context creation), rejection and replacement of corrupt, truncated and foreign files,
 * "off", an unusable folder, and the XDG/HOME fallbacks. Every result is compared bitwise
 * with the first run, and the first run against the float64 reference.
 *
 * Whether the device gives program binaries at all is checked here directly with
 * clGetProgramInfo on a tiny program; where it does not, the disk tests check that the library
 * reported disk_writes == 0 and then skip (reported as skipped, never as passed). The tests
 * run with FLASHCL_CACHE_PROGRAMS=1, so that programs go to disk on PoCL too (by default they do
 * not there: PoCL keeps its own); programs_policy checks the default and =0. build_log_excerpt
 * checks what a failed build's message quotes (white box: programs/build_log.h).
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "programs/build_log.h"
#include "ref_attention.h"
#include "support.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ temp dirs */

static char g_tmp[256]; /* the test's sandbox, removed by the fini */

/* Environment variables a test may change, restored by the fini (tests may run in one
 * process with --no-fork). */
#define N_ENV 5
static const char *const g_env_names[N_ENV] = {"HOME", "XDG_CACHE_HOME", "FLASHCL_CACHE_DIR", "FLASHCL_CACHE_PROGRAMS",
                                               "POCL_KERNEL_CACHE"};
static char *g_env_saved[N_ENV];
static int g_env_was_set[N_ENV];

static void sandbox_init(void)
{
    for (int i = 0; i < N_ENV; i++) {
        const char *v = getenv(g_env_names[i]);
        g_env_was_set[i] = v != NULL;
        g_env_saved[i] = v ? strdup(v) : NULL;
    }
    snprintf(g_tmp, sizeof g_tmp, "/tmp/flashcl-test-cache-XXXXXX");
    cr_assert(mkdtemp(g_tmp) != NULL, "mkdtemp: %s", strerror(errno));
    cr_assert(setenv("FLASHCL_CACHE_PROGRAMS", "1", 1) == 0);
}

static void sandbox_fini(void)
{
    if (g_tmp[0])
        support_remove_tree(g_tmp);
    g_tmp[0] = '\0';
    for (int i = 0; i < N_ENV; i++) {
        if (g_env_was_set[i] && g_env_saved[i])
            setenv(g_env_names[i], g_env_saved[i], 1);
        else
            unsetenv(g_env_names[i]);
        free(g_env_saved[i]);
        g_env_saved[i] = NULL;
    }
}

TestSuite(cache, .init = sandbox_init, .fini = sandbox_fini);

/* <sandbox>/<name>, as a static buffer per call slot. */
static const char *sub(const char *name)
{
    static char bufs[4][PATH_MAX];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, PATH_MAX, "%s/%s", g_tmp, name);
    return b;
}

static void make_dir(const char *path)
{
    cr_assert(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
}

/* Regular files directly in `dir` (all of them, hidden included), recursively counted. */
static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) != 0)
            continue;
        if (S_ISREG(st.st_mode))
            n++;
        else if (S_ISDIR(st.st_mode))
            n += count_files(p);
    }
    closedir(d);
    return n;
}

typedef enum { MUTATE_FLIP, MUTATE_TRUNCATE_HALF, MUTATE_TRUNCATE_EMPTY, MUTATE_FOREIGN } mutation;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static unsigned char rnd_byte(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned char)(g_rng >> 56);
}

/* Applies `m` to every regular file in `dir`; returns how many files it changed. */
static int mutate_files(const char *dir, mutation m)
{
    DIR *d = opendir(dir);
    cr_assert(d != NULL, "opendir %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        size_t size = (size_t)st.st_size;
        cr_assert(size >= 4, "cache file %s has only %zu bytes", p, size);
        if (m == MUTATE_TRUNCATE_HALF || m == MUTATE_TRUNCATE_EMPTY) {
            cr_assert(truncate(p, m == MUTATE_TRUNCATE_HALF ? (off_t)(size / 2) : 0) == 0, "truncate %s", p);
        } else {
            FILE *f = fopen(p, "r+b");
            cr_assert(f != NULL, "fopen %s", p);
            unsigned char *buf = malloc(size);
            cr_assert(buf != NULL);
            cr_assert(fread(buf, 1, size, f) == size);
            if (m == MUTATE_FLIP) {
                /* flip 16 bytes in the middle */
                size_t mid = size / 2, len = size >= 64 ? 16 : 1;
                for (size_t i = 0; i < len; i++)
                    buf[mid - len / 2 + i] ^= 0xff;
            } else {
                for (size_t i = 0; i < size; i++)
                    buf[i] = rnd_byte();
            }
            rewind(f);
            cr_assert(fwrite(buf, 1, size, f) == size);
            cr_assert(fclose(f) == 0);
            free(buf);
        }
        n++;
    }
    closedir(d);
    return n;
}

/* ------------------------------------------------------------------ the op */

enum { B = 1, SQ = 5, SK = 9, H = 2 };

typedef struct result {
    unsigned char *o, *lse;
    size_t o_bytes, lse_bytes;
} result;

static void result_free(result *r)
{
    free(r->o);
    free(r->lse);
    memset(r, 0, sizeof *r);
}

static void assert_same(const result *a, const result *b, const char *what)
{
    cr_assert(a->o_bytes == b->o_bytes && memcmp(a->o, b->o, a->o_bytes) == 0,
              "%s: O differs bitwise from the first run", what);
    cr_assert(a->lse_bytes == b->lse_bytes && memcmp(a->lse, b->lse, a->lse_bytes) == 0,
              "%s: LSE differs bitwise from the first run", what);
}

/* Runs the forward B1 Sq5 Sk9 H2 D F32 on ctx (poisoned outputs), returns O and LSE bytes, and
 * checks O against the float64 reference by the DESIGN.md rule. */
static result run_forward(fcl_context ctx, int D)
{
    const size_t nq = (size_t)B * SQ * H * D, nk = (size_t)B * SK * H * D, nl = (size_t)B * H * SQ;
    float *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nk * sizeof *v);
    float *o = malloc(nq * sizeof *o), *on = malloc(nq * sizeof *on), *ln = malloc(nl * sizeof *ln);
    double *oref = malloc(nq * sizeof *oref), *lref = malloc(nl * sizeof *lref);
    cr_assert(q && k && v && o && on && ln && oref && lref);
    support_random(q, nq, 11u + (unsigned)D, -1.0f, 1.0f, FCL_F32);
    support_random(k, nk, 12u + (unsigned)D, -1.0f, 1.0f, FCL_F32);
    support_random(v, nk, 13u + (unsigned)D, -1.0f, 1.0f, FCL_F32);
    int64_t qs[4] = {B, SQ, H, D}, ks[4] = {B, SK, H, D}, ls[3] = {B, H, SQ};
    fcl_tensor Q = support_tensor(ctx, FCL_F32, 4, qs, q);
    fcl_tensor K = support_tensor(ctx, FCL_F32, 4, ks, k);
    fcl_tensor V = support_tensor(ctx, FCL_F32, 4, ks, v);
    fcl_tensor O = support_tensor(ctx, FCL_F32, 4, qs, NULL);
    fcl_tensor L = support_tensor(ctx, FCL_F32, 3, ls, NULL);
    support_poison(O);
    support_poison(L);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    fcl_status st = fcl_attention_forward(ctx, &p, Q, K, V, O, L, NULL);
    cr_assert_eq(st, FCL_SUCCESS, "forward: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    cr_assert_eq(fcl_finish(ctx), FCL_SUCCESS, "finish: %s", fcl_last_error(ctx));

    result r;
    r.o_bytes = nq * sizeof(float);
    r.lse_bytes = nl * sizeof(float);
    r.o = malloc(r.o_bytes);
    r.lse = malloc(r.lse_bytes);
    cr_assert(r.o && r.lse);
    cr_assert(fcl_tensor_read_raw(O, r.o, r.o_bytes) == FCL_SUCCESS);
    cr_assert(fcl_tensor_read_raw(L, r.lse, r.lse_bytes) == FCL_SUCCESS);

    ref_attn_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.B = B; pr.Sq = SQ; pr.Sk = SK; pr.Hq = H; pr.Hkv = H; pr.D = D;
    pr.window_left = -1; pr.window_right = -1;
    ref_attention_forward(&pr, q, k, v, oref, lref);
    ref_attention_forward_naive(&pr, FCL_F32, q, k, v, on, ln);
    memcpy(o, r.o, r.o_bytes);
    double err = support_max_err_f(o, oref, nq);
    double naive = 0.0;
    for (size_t i = 0; i < nq; i++)
        if (fabs((double)on[i] - oref[i]) > naive)
            naive = fabs((double)on[i] - oref[i]);
    cr_assert(support_within(err, naive, 2.0), "D %d: O error %g vs naive %g", D, err, naive);
    float lse[B * H * SQ];
    memcpy(lse, r.lse, r.lse_bytes);
    double lerr = support_max_err_f(lse, lref, nl);
    cr_assert(lerr <= 1e-4, "D %d: LSE error %g", D, lerr);

    fcl_tensor_release(Q);
    fcl_tensor_release(K);
    fcl_tensor_release(V);
    fcl_tensor_release(O);
    fcl_tensor_release(L);
    free(q); free(k); free(v); free(o); free(on); free(ln); free(oref); free(lref);
    return r;
}

/* ------------------------------------------------------------------ contexts, stats */

static fcl_context new_context_with_dir(const char *dir)
{
    if (dir)
        cr_assert(setenv("FLASHCL_CACHE_DIR", dir, 1) == 0);
    else
        unsetenv("FLASHCL_CACHE_DIR");
    fcl_context ctx = support_context();
    fcl_cache_stats s;
    cr_assert_eq(fcl_context_cache_stats(ctx, &s), FCL_SUCCESS);
    cr_assert(s.compiles == 0 && s.memory_hits == 0 && s.disk_hits == 0 && s.disk_writes == 0 &&
              s.disk_rejects == 0, "a new context has non-zero cache counters");
    return ctx;
}

/* Whether the context's device returns a program binary for a tiny program it built. */
static int device_gives_binaries(fcl_context ctx)
{
    const char *src = "__kernel void k(__global int *x) { x[get_global_id(0)] += 1; }";
    cl_int err = CL_SUCCESS;
    cl_device_id dv = fcl_context_cl_device(ctx);
    cl_program p = clCreateProgramWithSource(fcl_context_cl_context(ctx), 1, &src, NULL, &err);
    cr_assert(err == CL_SUCCESS);
    cr_assert(clBuildProgram(p, 1, &dv, "", NULL, NULL) == CL_SUCCESS, "building a tiny program failed");
    size_t size = 0;
    err = clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL);
    clReleaseProgram(p);
    return err == CL_SUCCESS && size > 0;
}

static const char *device_name(fcl_context ctx)
{
    static char name[300];
    fcl_device_info info;
    cr_assert_eq(fcl_context_device_info(ctx, &info), FCL_SUCCESS);
    snprintf(name, sizeof name, "%s", info.name);
    return name;
}

static void assert_dir_is(fcl_context ctx, const char *want)
{
    const char *got = fcl_context_cache_dir(ctx);
    cr_assert(got != NULL, "fcl_context_cache_dir is NULL, expected %s", want);
    char a[PATH_MAX], b[PATH_MAX];
    cr_assert(realpath(got, a) != NULL, "cache dir %s does not exist", got);
    cr_assert(realpath(want, b) != NULL, "%s does not exist", want);
    cr_assert_str_eq(a, b, "cache dir %s, expected %s", got, want);
}

/*
 * First context on a fresh `dir`: compiles, writes (when the device gives binaries), result
 * checked against the reference. Returns 1 when binaries exist (disk tests can run); 0 after
 * checking the library reported no writes, with everything released (the caller skips).
 */
static int populate(const char *dir, result *first)
{
    fcl_context ctx = new_context_with_dir(dir);
    assert_dir_is(ctx, dir);
    *first = run_forward(ctx, 16);
    fcl_cache_stats s = support_cache_stats(ctx);
    int bins = device_gives_binaries(ctx);
    cr_assert(s.compiles >= 1, "first context: " STATS_FMT, STATS_ARGS(s));
    cr_assert(s.disk_hits == 0 && s.disk_rejects == 0, "first context: " STATS_FMT, STATS_ARGS(s));
    int files = count_files(dir);
    if (bins) {
        cr_assert(s.disk_writes >= 1, "the device gives binaries but nothing was written: " STATS_FMT,
                  STATS_ARGS(s));
        cr_assert_eq((uint64_t)files, s.disk_writes, "%d files in the cache dir after %llu writes", files,
                     (unsigned long long)s.disk_writes);
    } else {
        cr_assert(s.disk_writes == 0, "no binaries from the device, yet disk_writes = %llu",
                  (unsigned long long)s.disk_writes);
        cr_assert_eq(files, 0, "no binaries from the device, yet %d files were written", files);
    }
    char name[300];
    snprintf(name, sizeof name, "%s", device_name(ctx));
    fcl_context_release(ctx);
    if (!bins) {
        result_free(first);
        cr_log_warn("device %s returns no program binaries: the disk cache cannot hit there", name);
    }
    return bins;
}

#define POPULATE_OR_SKIP(dir, first)                                                             \
    do {                                                                                         \
        if (!populate((dir), (first)))                                                           \
            cr_skip_test("the device returns no program binaries (library reported disk_writes "  \
                         "== 0), so the disk cache cannot be exercised on it");                  \
    } while (0)

/* ------------------------------------------------------------------ tests */

Test(cache, first_context_compiles_then_memory_hits)
{
    const char *dir = sub("c");
    make_dir(dir);
    fcl_context ctx = new_context_with_dir(dir);
    assert_dir_is(ctx, dir);
    result r1 = run_forward(ctx, 16);
    fcl_cache_stats s1 = support_cache_stats(ctx);
    cr_assert(s1.compiles >= 1, STATS_FMT, STATS_ARGS(s1));
    cr_assert_eq(s1.disk_hits, 0);
    cr_assert_eq(s1.disk_rejects, 0);
    if (device_gives_binaries(ctx))
        cr_assert(s1.disk_writes >= 1, "binaries available but " STATS_FMT, STATS_ARGS(s1));
    else
        cr_assert_eq(s1.disk_writes, 0, "no binaries from %s but " STATS_FMT, device_name(ctx), STATS_ARGS(s1));

    result r2 = run_forward(ctx, 16);
    fcl_cache_stats s2 = support_cache_stats(ctx);
    cr_assert(s2.memory_hits > s1.memory_hits, "second call: memory_hits %llu -> %llu",
              (unsigned long long)s1.memory_hits, (unsigned long long)s2.memory_hits);
    cr_assert_eq(s2.compiles, s1.compiles, "second call compiled again: " STATS_FMT, STATS_ARGS(s2));
    cr_assert_eq(s2.disk_hits, s1.disk_hits);
    cr_assert_eq(s2.disk_writes, s1.disk_writes);
    assert_same(&r1, &r2, "same context, second call");
    result_free(&r1);
    result_free(&r2);
    cr_assert_eq(fcl_context_cache_stats(NULL, &s2), FCL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(fcl_context_cache_stats(ctx, NULL), FCL_ERR_INVALID_ARGUMENT);
    fcl_context_release(ctx);
}

Test(cache, variants_are_cached_separately)
{
    const char *dir = sub("c");
    make_dir(dir);
    fcl_context ctx = new_context_with_dir(dir);
    result a1 = run_forward(ctx, 16);
    fcl_cache_stats s1 = support_cache_stats(ctx);
    result b1 = run_forward(ctx, 32); /* another head dim is another compiled variant */
    fcl_cache_stats s2 = support_cache_stats(ctx);
    cr_assert(s2.compiles > s1.compiles, "D 32 after D 16 did not compile: " STATS_FMT, STATS_ARGS(s2));
    result a2 = run_forward(ctx, 16);
    result b2 = run_forward(ctx, 32);
    fcl_cache_stats s3 = support_cache_stats(ctx);
    cr_assert_eq(s3.compiles, s2.compiles, "re-running both variants compiled: " STATS_FMT, STATS_ARGS(s3));
    cr_assert(s3.memory_hits >= s2.memory_hits + 2, "memory hits %llu -> %llu",
              (unsigned long long)s2.memory_hits, (unsigned long long)s3.memory_hits);
    assert_same(&a1, &a2, "D 16 again");
    assert_same(&b1, &b2, "D 32 again");
    fcl_context_release(ctx);
    result_free(&a1); result_free(&a2); result_free(&b1); result_free(&b2);
}

Test(cache, second_context_hits_disk)
{
    const char *dir = sub("c");
    make_dir(dir);
    result first;
    POPULATE_OR_SKIP(dir, &first);
    int files_before = count_files(dir);
    fcl_context ctx = new_context_with_dir(dir);
    result r = run_forward(ctx, 16);
    fcl_cache_stats s = support_cache_stats(ctx);
    cr_assert_eq(s.compiles, 0, "second context compiled: " STATS_FMT, STATS_ARGS(s));
    cr_assert(s.disk_hits >= 1, "second context: " STATS_FMT, STATS_ARGS(s));
    cr_assert_eq(s.disk_rejects, 0, STATS_FMT, STATS_ARGS(s));
    cr_assert_eq(s.disk_writes, 0, "second context rewrote good files: " STATS_FMT, STATS_ARGS(s));
    cr_assert_eq(count_files(dir), files_before);
    assert_same(&first, &r, "second context from disk");
    /* and from memory after that */
    result r2 = run_forward(ctx, 16);
    fcl_cache_stats s2 = support_cache_stats(ctx);
    cr_assert(s2.memory_hits > s.memory_hits && s2.disk_hits == s.disk_hits && s2.compiles == 0,
              STATS_FMT, STATS_ARGS(s2));
    assert_same(&first, &r2, "second context, second call");
    fcl_context_release(ctx);
    result_free(&first); result_free(&r); result_free(&r2);
}

/* Populate, damage every file with `m`, then: a new context rejects, recompiles and replaces;
 * the one after that hits the disk again. */
static void damaged_files_case(mutation m, const char *what)
{
    const char *dir = sub("c");
    make_dir(dir);
    result first;
    POPULATE_OR_SKIP(dir, &first);
    int nfiles = count_files(dir);
    cr_assert_eq(mutate_files(dir, m), nfiles);

    fcl_context c2 = new_context_with_dir(dir);
    result r2 = run_forward(c2, 16);
    fcl_cache_stats s2 = support_cache_stats(c2);
    cr_assert(s2.compiles >= 1, "%s: no recompile: " STATS_FMT, what, STATS_ARGS(s2));
    cr_assert(s2.disk_rejects >= 1, "%s: not rejected: " STATS_FMT, what, STATS_ARGS(s2));
    cr_assert_eq(s2.disk_hits, 0, "%s: a damaged file counted as a hit: " STATS_FMT, what, STATS_ARGS(s2));
    cr_assert(s2.disk_writes >= 1, "%s: the bad file was not replaced: " STATS_FMT, what, STATS_ARGS(s2));
    assert_same(&first, &r2, what);
    cr_assert_eq(count_files(dir), nfiles, "%s: %d files after replacing, %d before", what, count_files(dir),
                 nfiles);
    fcl_context_release(c2);

    fcl_context c3 = new_context_with_dir(dir);
    result r3 = run_forward(c3, 16);
    fcl_cache_stats s3 = support_cache_stats(c3);
    cr_assert_eq(s3.compiles, 0, "%s: the replaced file was not used: " STATS_FMT, what, STATS_ARGS(s3));
    cr_assert(s3.disk_hits >= 1 && s3.disk_rejects == 0, "%s, third context: " STATS_FMT, what, STATS_ARGS(s3));
    assert_same(&first, &r3, what);
    fcl_context_release(c3);
    result_free(&first); result_free(&r2); result_free(&r3);
}

Test(cache, corrupted_file_rejected_and_replaced) { damaged_files_case(MUTATE_FLIP, "flipped bytes"); }
Test(cache, truncated_file_rejected_and_replaced) { damaged_files_case(MUTATE_TRUNCATE_HALF, "truncated to half"); }
Test(cache, empty_file_rejected_and_replaced) { damaged_files_case(MUTATE_TRUNCATE_EMPTY, "truncated to 0"); }
Test(cache, foreign_file_rejected_and_replaced) { damaged_files_case(MUTATE_FOREIGN, "random bytes"); }

Test(cache, dir_read_at_context_creation)
{
    const char *a = sub("a"), *b = sub("b");
    make_dir(a);
    make_dir(b);
    fcl_context ctx = new_context_with_dir(a);
    cr_assert(setenv("FLASHCL_CACHE_DIR", b, 1) == 0); /* after creation: must not matter */
    result r = run_forward(ctx, 16);
    assert_dir_is(ctx, a);
    cr_assert_eq(count_files(b), 0, "files were written to the folder set after creation");
    cr_assert_eq((uint64_t)count_files(a), support_cache_stats(ctx).disk_writes);
    fcl_context_release(ctx);
    result_free(&r);
}

Test(cache, missing_nested_dir_is_created)
{
    char nested[PATH_MAX];
    snprintf(nested, sizeof nested, "%s/x/y/z", g_tmp);
    fcl_context ctx = new_context_with_dir(nested);
    struct stat st;
    cr_assert(stat(nested, &st) == 0 && S_ISDIR(st.st_mode), "%s was not created", nested);
    assert_dir_is(ctx, nested);
    result r = run_forward(ctx, 16);
    cr_assert_eq((uint64_t)count_files(nested), support_cache_stats(ctx).disk_writes);
    fcl_context_release(ctx);
    result_free(&r);
}

Test(cache, off_disables_disk)
{
    /* HOME and XDG_CACHE_HOME point into the sandbox so a stray write would be seen */
    const char *home = sub("home"), *xdg = sub("xdg");
    make_dir(home);
    make_dir(xdg);
    cr_assert(setenv("HOME", home, 1) == 0);
    cr_assert(setenv("XDG_CACHE_HOME", xdg, 1) == 0);
    result first = {0};
    for (int round = 0; round < 2; round++) {
        fcl_context ctx = new_context_with_dir("off");
        cr_assert(fcl_context_cache_dir(ctx) == NULL, "FLASHCL_CACHE_DIR=off gave cache dir %s",
                  fcl_context_cache_dir(ctx));
        result r = run_forward(ctx, 16);
        fcl_cache_stats s = support_cache_stats(ctx);
        cr_assert(s.compiles >= 1, "round %d: " STATS_FMT, round, STATS_ARGS(s));
        cr_assert(s.disk_hits == 0 && s.disk_writes == 0 && s.disk_rejects == 0, "round %d: " STATS_FMT, round,
                  STATS_ARGS(s));
        if (round == 0)
            first = r;
        else {
            assert_same(&first, &r, "cache off, second context");
            result_free(&r);
        }
        fcl_context_release(ctx);
    }
    /* (the OpenCL implementation may keep its own cache there, e.g. PoCL's xdg/pocl/kcache) */
    char p1[PATH_MAX], p2[PATH_MAX];
    struct stat st;
    snprintf(p1, sizeof p1, "%s/flashcl", xdg);
    snprintf(p2, sizeof p2, "%s/.cache/flashcl", home);
    cr_assert(lstat(p1, &st) != 0, "%s was created with the cache off", p1);
    cr_assert(lstat(p2, &st) != 0, "%s was created with the cache off", p2);
    cr_assert_eq(count_files("off"), 0, "a folder named \"off\" was used");
    result_free(&first);
}

/* Where programs go without FLASHCL_CACHE_PROGRAMS: not to disk on PoCL while its kernel cache
 * is on (POCL_KERNEL_CACHE unset), to disk on PoCL with POCL_KERNEL_CACHE=0 and on every other
 * device that gives binaries; with FLASHCL_CACHE_PROGRAMS=0 nowhere. Tuned tiles go to the
 * folder in every case (fcl_tuning_save succeeds). Each context runs the same forward. */
Test(cache, programs_policy)
{
    result first = {0};
    static const struct {
        const char *programs, *pocl_cache;
    } runs[] = {{NULL, NULL}, {NULL, "0"}, {"0", NULL}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/run%zu", g_tmp, i);
        if (runs[i].programs)
            setenv("FLASHCL_CACHE_PROGRAMS", runs[i].programs, 1);
        else
            unsetenv("FLASHCL_CACHE_PROGRAMS");
        if (runs[i].pocl_cache)
            setenv("POCL_KERNEL_CACHE", runs[i].pocl_cache, 1);
        else
            unsetenv("POCL_KERNEL_CACHE");
        fcl_context ctx = new_context_with_dir(dir);
        fcl_device_info info;
        cr_assert_eq(fcl_context_device_info(ctx, &info), FCL_SUCCESS);
        const int pocl = strstr(info.platform_name, "Portable Computing Language") != NULL;
        const int want = !runs[i].programs && !(pocl && !runs[i].pocl_cache) && device_gives_binaries(ctx);
        result r = run_forward(ctx, 16);
        const fcl_cache_stats s = support_cache_stats(ctx);
        cr_assert(s.compiles >= 1 && s.disk_hits == 0 && s.disk_rejects == 0, "run %zu: " STATS_FMT, i,
                  STATS_ARGS(s));
        if (want)
            cr_assert(s.disk_writes >= 1 && count_files(dir) == (int)s.disk_writes,
                      "run %zu (%s): programs should go to disk: %d files, " STATS_FMT, i, info.platform_name,
                      count_files(dir), STATS_ARGS(s));
        else
            cr_assert(s.disk_writes == 0 && count_files(dir) == 0,
                      "run %zu (%s): programs should not go to disk: %d files, " STATS_FMT, i, info.platform_name,
                      count_files(dir), STATS_ARGS(s));
        const int tiles[3] = {16, 16, 1};
        cr_assert(fcl_tuning_save(ctx, "forward", 16, tiles, 3) == FCL_SUCCESS, "run %zu: %s", i,
                  fcl_last_error(ctx));
        cr_assert(count_files(dir) == (int)s.disk_writes + 1, "run %zu: the tuned entry is not in the folder", i);
        if (i == 0) {
            first = r;
        } else {
            assert_same(&first, &r, "programs policy");
            result_free(&r);
        }
        fcl_context_release(ctx);
    }
    result_free(&first);
}

Test(cache, unwritable_dir_disables_disk)
{
    const char *file = sub("file");
    FILE *f = fopen(file, "wb");
    cr_assert(f != NULL);
    fputs("not a folder\n", f);
    fclose(f);
    char bad[PATH_MAX];
    snprintf(bad, sizeof bad, "%s/sub", file);
    fcl_context ctx = new_context_with_dir(bad);
    cr_assert(fcl_context_cache_dir(ctx) == NULL, "an unusable folder gave cache dir %s", fcl_context_cache_dir(ctx));
    result r = run_forward(ctx, 16);
    fcl_cache_stats s = support_cache_stats(ctx);
    cr_assert(s.compiles >= 1 && s.disk_hits == 0 && s.disk_writes == 0, STATS_FMT, STATS_ARGS(s));
    result r2 = run_forward(ctx, 16);
    assert_same(&r, &r2, "unwritable dir, second call");
    fcl_context_release(ctx);
    result_free(&r);
    result_free(&r2);
    /* the regular file is untouched */
    struct stat st;
    cr_assert(stat(file, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 13);
}

Test(cache, xdg_cache_home_fallback)
{
    const char *xdg = sub("xdg");
    make_dir(xdg);
    cr_assert(setenv("XDG_CACHE_HOME", xdg, 1) == 0);
    fcl_context ctx = new_context_with_dir(NULL);
    char want[PATH_MAX];
    snprintf(want, sizeof want, "%s/flashcl", xdg);
    assert_dir_is(ctx, want);
    result r = run_forward(ctx, 16);
    cr_assert_eq((uint64_t)count_files(want), support_cache_stats(ctx).disk_writes);
    fcl_context_release(ctx);
    result_free(&r);
}

Test(cache, home_fallback)
{
    const char *home = sub("home");
    make_dir(home);
    unsetenv("XDG_CACHE_HOME");
    cr_assert(setenv("HOME", home, 1) == 0);
    fcl_context ctx = new_context_with_dir(NULL);
    char want[PATH_MAX];
    snprintf(want, sizeof want, "%s/.cache/flashcl", home);
    assert_dir_is(ctx, want);
    result r = run_forward(ctx, 16);
    cr_assert_eq((uint64_t)count_files(want), support_cache_stats(ctx).disk_writes);
    fcl_context_release(ctx);
    result_free(&r);
}

/* A build whose log is long (60 warnings, some 4 KB, before its errors: the length at which
 * NVIDIA's logs came back empty) is quoted from its first error line, the undeclared names
 * included; a program that built gives the text of its log, whatever it is, and never fails. */
Test(cache, build_log_excerpt)
{
    fcl_context ctx = support_context();
    char src[8192];
    int n = 0;
    for (int i = 0; i < 60; i++)
        n += snprintf(src + n, sizeof src - (size_t)n, "#warning padding the build log, line %d\n", i);
    snprintf(src + n, sizeof src - (size_t)n,
             "__kernel void k(__global float *x) { x[0] = undeclared_one; undeclared_two(); }\n");
    const char *text = src;
    cl_int err;
    cl_program prog = clCreateProgramWithSource(fcl_context_cl_context(ctx), 1, &text, NULL, &err);
    cr_assert(err == CL_SUCCESS);
    cl_device_id dev = fcl_context_cl_device(ctx);
    cr_assert(clBuildProgram(prog, 1, &dev, "", NULL, NULL) != CL_SUCCESS, "a program with undeclared names built");
    char out[512];
    memset(out, 'x', sizeof out);
    fcl_build_log_excerpt(ctx, prog, out, sizeof out);
    cr_assert(memchr(out, '\0', sizeof out) != NULL, "the excerpt is not terminated");
    const char *first_error = strstr(out, "undeclared_one"), *warning = strstr(out, "padding the build log");
    cr_assert(first_error != NULL, "the excerpt misses the first error: \"%s\"", out);
    cr_assert(warning == NULL || warning > first_error, "the excerpt starts before the errors: \"%s\"", out);
    cr_assert(strchr(out, '\n') == NULL, "a line break in the excerpt: \"%s\"", out);
    clReleaseProgram(prog);
    fcl_context_release(ctx);
}
