/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcl_context: device selection (env, "cpu", "gpu", names, "P:D"), wrapping the caller's
 * OpenCL objects, device info, version, finish and release. What each selector should pick
 * is worked out here independently by listing platforms and devices with the OpenCL API.
 */
#include "support.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXP 32
#define MAXD 64

/* ------------------------------------------------------------------ OpenCL listing */

typedef struct listing {
    cl_uint np;
    cl_platform_id plat[MAXP];
    cl_uint nd[MAXP];
    cl_device_id dev[MAXP][MAXD];
} listing;

static void list_all(listing *L)
{
    memset(L, 0, sizeof *L);
    cl_int err = clGetPlatformIDs(MAXP, L->plat, &L->np);
    cr_assert(err == CL_SUCCESS && L->np > 0, "clGetPlatformIDs: %d", (int)err);
    if (L->np > MAXP)
        L->np = MAXP;
    for (cl_uint p = 0; p < L->np; p++) {
        cl_uint n = 0;
        if (clGetDeviceIDs(L->plat[p], CL_DEVICE_TYPE_ALL, MAXD, L->dev[p], &n) != CL_SUCCESS)
            n = 0;
        L->nd[p] = n < MAXD ? n : MAXD;
    }
}

static int contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

static void plat_str(cl_platform_id p, cl_platform_info what, char *buf, size_t n)
{
    buf[0] = '\0';
    if (clGetPlatformInfo(p, what, n, buf, NULL) != CL_SUCCESS)
        buf[0] = '\0';
    buf[n - 1] = '\0';
}

static void dev_str(cl_device_id d, cl_device_info what, char *buf, size_t n)
{
    buf[0] = '\0';
    if (clGetDeviceInfo(d, what, n, buf, NULL) != CL_SUCCESS)
        buf[0] = '\0';
    buf[n - 1] = '\0';
}

static cl_device_type dev_type(cl_device_id d)
{
    cl_device_type t = 0;
    cr_assert(clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof t, &t, NULL) == CL_SUCCESS);
    return t;
}

/* The first device of `type`, in platform order; NULL when none. */
static cl_device_id first_of_type(const listing *L, cl_device_type type)
{
    for (cl_uint p = 0; p < L->np; p++)
        for (cl_uint d = 0; d < L->nd[p]; d++)
            if (dev_type(L->dev[p][d]) & type)
                return L->dev[p][d];
    return NULL;
}

/* What the header says a word selects: the first device of the first platform whose name or
 * vendor contains `word`; when no platform does, the first device whose vendor or name does. */
static cl_device_id first_by_name(const listing *L, const char *word)
{
    char a[512];
    for (int pass = 0; pass < 2; pass++)
        for (cl_uint p = 0; p < L->np; p++)
            for (cl_uint d = 0; d < L->nd[p]; d++) {
                cl_device_id dv = L->dev[p][d];
                if (pass == 0) {
                    plat_str(L->plat[p], CL_PLATFORM_NAME, a, sizeof a);
                    if (contains_nocase(a, word)) return dv;
                    plat_str(L->plat[p], CL_PLATFORM_VENDOR, a, sizeof a);
                    if (contains_nocase(a, word)) return dv;
                } else {
                    dev_str(dv, CL_DEVICE_VENDOR, a, sizeof a);
                    if (contains_nocase(a, word)) return dv;
                    dev_str(dv, CL_DEVICE_NAME, a, sizeof a);
                    if (contains_nocase(a, word)) return dv;
                }
            }
    return NULL;
}

static int find_device(const listing *L, cl_device_id dv, cl_uint *pp, cl_uint *dd)
{
    for (cl_uint p = 0; p < L->np; p++)
        for (cl_uint d = 0; d < L->nd[p]; d++)
            if (L->dev[p][d] == dv) {
                *pp = p;
                *dd = d;
                return 1;
            }
    return 0;
}

static const char *dev_label(cl_device_id d)
{
    static char buf[512];
    if (!d)
        return "(none)";
    dev_str(d, CL_DEVICE_NAME, buf, sizeof buf);
    return buf;
}

/* Creates a context with `selector` and checks it lands on `want` (NULL: FCL_ERR_NO_DEVICE). */
static void expect_selector(const char *selector, cl_device_id want)
{
    fcl_context ctx = (fcl_context)(uintptr_t)1; /* must be set to NULL on failure */
    fcl_status st = fcl_context_create(selector, &ctx);
    if (!want) {
        cr_assert_eq(st, FCL_ERR_NO_DEVICE, "selector \"%s\": no such device listed, but got %s",
                     selector, fcl_status_string(st));
        cr_assert(ctx == NULL, "selector \"%s\": *out not NULL on failure", selector);
        const char *msg = fcl_last_error(NULL);
        cr_assert(msg && msg[0], "selector \"%s\": no message", selector);
        cr_assert(strstr(msg, selector) != NULL, "message \"%s\" does not name the selector \"%s\"", msg,
                  selector);
        return;
    }
    cr_assert_eq(st, FCL_SUCCESS, "selector \"%s\": %s: %s (expected device %s)", selector,
                 fcl_status_string(st), fcl_last_error(NULL), dev_label(want));
    cr_assert(ctx != NULL);
    cl_device_id got = fcl_context_cl_device(ctx);
    char gn[512];
    snprintf(gn, sizeof gn, "%s", dev_label(got));
    cr_assert(got == want, "selector \"%s\" chose %s, expected %s", selector, gn, dev_label(want));
    fcl_context_release(ctx);
}

/* ------------------------------------------------------------------ tests */

Test(context, create_from_env)
{
    listing L;
    list_all(&L);
    fcl_context ctx = NULL;
    fcl_status st = fcl_context_create(NULL, &ctx);
    cr_assert_eq(st, FCL_SUCCESS, "fcl_context_create(NULL): %s: %s", fcl_status_string(st),
                 fcl_last_error(NULL));
    cr_assert(ctx != NULL);
    cl_device_id got = fcl_context_cl_device(ctx);
    cl_uint p = 0, d = 0;
    cr_assert(find_device(&L, got, &p, &d), "the context's device is not among the listed devices");
    const char *env = getenv("FLASHCL_DEVICE");
    cl_device_id want;
    if (!env || !*env)
        want = first_of_type(&L, CL_DEVICE_TYPE_GPU) ? first_of_type(&L, CL_DEVICE_TYPE_GPU)
                                                      : first_of_type(&L, CL_DEVICE_TYPE_CPU);
    else if (!strcmp(env, "gpu"))
        want = first_of_type(&L, CL_DEVICE_TYPE_GPU);
    else if (!strcmp(env, "cpu"))
        want = first_of_type(&L, CL_DEVICE_TYPE_CPU);
    else {
        unsigned ep = 0, ed = 0;
        char tail = 0;
        if (sscanf(env, "%u:%u%c", &ep, &ed, &tail) == 2)
            want = (ep < L.np && ed < L.nd[ep]) ? L.dev[ep][ed] : NULL;
        else
            want = first_by_name(&L, env);
    }
    char gn[512];
    snprintf(gn, sizeof gn, "%s", dev_label(got));
    cr_assert(want == got, "FLASHCL_DEVICE=%s chose %s, expected %s", env ? env : "(unset)", gn,
              dev_label(want));
    /* "" means the same as NULL */
    fcl_context ctx2 = NULL;
    st = fcl_context_create("", &ctx2);
    cr_assert_eq(st, FCL_SUCCESS, "fcl_context_create(\"\"): %s", fcl_status_string(st));
    cr_assert(fcl_context_cl_device(ctx2) == got, "\"\" picked another device than NULL");
    fcl_context_release(ctx2);
    cr_assert_str_eq(fcl_last_error(ctx), "", "a fresh context has a message");
    fcl_context_release(ctx);
}

Test(context, selector_cpu_and_gpu)
{
    listing L;
    list_all(&L);
    expect_selector("cpu", first_of_type(&L, CL_DEVICE_TYPE_CPU));
    expect_selector("gpu", first_of_type(&L, CL_DEVICE_TYPE_GPU));
}

Test(context, selector_pocl_by_name)
{
    listing L;
    list_all(&L);
    cl_device_id want = first_by_name(&L, "pocl");
    /* independent of the matching rule: is a PoCL platform with devices present at all? */
    int pocl_present = 0;
    for (cl_uint p = 0; p < L.np; p++) {
        char name[512], vendor[512];
        plat_str(L.plat[p], CL_PLATFORM_NAME, name, sizeof name);
        plat_str(L.plat[p], CL_PLATFORM_VENDOR, vendor, sizeof vendor);
        if (L.nd[p] > 0 && (contains_nocase(name, "Portable Computing Language") || contains_nocase(vendor, "pocl")))
            pocl_present = 1;
    }
    cr_log_info("PoCL platform with devices present: %s", pocl_present ? "yes" : "no");
    if (pocl_present)
        cr_assert(want != NULL, "a PoCL platform is listed but no device matches \"pocl\" by the header's rule "
                                "(platform name, vendor or device name)");
    expect_selector("pocl", want);
    expect_selector("PoCL", want); /* case-insensitive */
}

Test(context, selector_device_name_word)
{
    listing L;
    list_all(&L);
    /* a word taken from the env context's own device name must select a device (the first
     * that matches, which may be an earlier device with the same word) */
    fcl_context ctx = support_context();
    char name[512];
    dev_str(fcl_context_cl_device(ctx), CL_DEVICE_NAME, name, sizeof name);
    fcl_context_release(ctx);
    char word[64] = "";
    for (const char *p = name; *p && !word[0]; p++) {
        size_t n = 0;
        while (isalnum((unsigned char)p[n]) && n < sizeof word - 1)
            n++;
        if (n >= 4) {
            memcpy(word, p, n);
            word[n] = '\0';
        }
        if (n)
            p += n - 1;
    }
    cr_assert(word[0], "device name \"%s\" has no word of 4+ letters", name);
    expect_selector(word, first_by_name(&L, word));
}

/* Every word (4+ letters or digits) of every platform's name and vendor selects a device of a
 * platform that has the word, never a device of another platform whose device name or vendor
 * happens to contain it (PoCL names its CPU device after the processor: "...-Intel(R) Xeon(R)",
 * vendor "GenuineIntel", so "intel" must still find Intel's own platform). */
Test(context, selector_platform_word_before_device_word)
{
    listing L;
    list_all(&L);
    int checked = 0;
    for (cl_uint p = 0; p < L.np; p++) {
        if (L.nd[p] == 0)
            continue;
        for (int which = 0; which < 2; which++) {
            char text[512];
            plat_str(L.plat[p], which ? CL_PLATFORM_VENDOR : CL_PLATFORM_NAME, text, sizeof text);
            for (const char *c = text; *c;) {
                size_t n = 0;
                while (isalnum((unsigned char)c[n]))
                    n++;
                if (n >= 4 && n < 64) {
                    char word[64];
                    memcpy(word, c, n);
                    word[n] = '\0';
                    cl_device_id want = first_by_name(&L, word);
                    cl_uint wp = 0, wd = 0;
                    cr_assert(want && find_device(&L, want, &wp, &wd));
                    char name[512], vendor[512];
                    plat_str(L.plat[wp], CL_PLATFORM_NAME, name, sizeof name);
                    plat_str(L.plat[wp], CL_PLATFORM_VENDOR, vendor, sizeof vendor);
                    cr_assert(contains_nocase(name, word) || contains_nocase(vendor, word),
                              "\"%s\" should select a platform named after it", word);
                    expect_selector(word, want);
                    checked++;
                }
                c += n ? n : 1;
            }
        }
    }
    cr_assert(checked > 0, "no platform has a name or vendor word of 4+ letters");
}

Test(context, selector_platform_device_index)
{
    listing L;
    list_all(&L);
    fcl_context ctx = support_context();
    cl_device_id dv = fcl_context_cl_device(ctx);
    fcl_context_release(ctx);
    cl_uint p = 0, d = 0;
    cr_assert(find_device(&L, dv, &p, &d));
    char sel[32];
    snprintf(sel, sizeof sel, "%u:%u", p, d);
    expect_selector(sel, dv);
    /* every listed device by its index */
    for (cl_uint pp = 0; pp < L.np; pp++)
        for (cl_uint dd = 0; dd < L.nd[pp]; dd++) {
            snprintf(sel, sizeof sel, "%u:%u", pp, dd);
            expect_selector(sel, L.dev[pp][dd]);
        }
    /* one past the last device of the env platform */
    snprintf(sel, sizeof sel, "%u:%u", p, L.nd[p]);
    expect_selector(sel, NULL);
}

Test(context, selector_no_such_device)
{
    expect_selector("nosuchdevice", NULL);
    expect_selector("99:0", NULL);
    const char *msg = fcl_last_error(NULL);
    cr_assert(strstr(msg, "99") != NULL, "message \"%s\" does not name 99", msg);
    expect_selector("0:99", NULL);
}

Test(context, create_argument_checks)
{
    fcl_status st = fcl_context_create("cpu", NULL);
    cr_assert_eq(st, FCL_ERR_INVALID_ARGUMENT, "NULL out: %s", fcl_status_string(st));
    fcl_context c = (fcl_context)(uintptr_t)1;
    st = fcl_context_create_from_cl(NULL, NULL, NULL, &c);
    cr_assert_eq(st, FCL_ERR_INVALID_ARGUMENT, "NULL cl objects: %s", fcl_status_string(st));
    cr_assert(c == NULL, "*out not NULL on failure");
    cr_assert(fcl_last_error(NULL)[0] != '\0');
}

/* ------------------------------------------------------------------ wrapping caller objects */

static cl_uint ctx_refs(cl_context c)
{
    cl_uint r = 0;
    cr_assert(clGetContextInfo(c, CL_CONTEXT_REFERENCE_COUNT, sizeof r, &r, NULL) == CL_SUCCESS);
    return r;
}

static cl_uint queue_refs(cl_command_queue q)
{
    cl_uint r = 0;
    cr_assert(clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof r, &r, NULL) == CL_SUCCESS);
    return r;
}

/* The reference count of `obj` (read by `refs`) once it has settled back to `want`:
 * implementations may drop the references held by finished commands a little later, on their
 * own threads (PoCL under valgrind does), so wait up to 5 s for it before calling it a leak. */
static cl_uint refs_settled(cl_uint (*refs)(void *), void *obj, cl_uint want)
{
    cl_uint r = refs(obj);
    for (int i = 0; i < 500 && r != want; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        r = refs(obj);
    }
    return r;
}

static cl_uint ctx_refs_any(void *c) { return ctx_refs((cl_context)c); }
static cl_uint queue_refs_any(void *q) { return queue_refs((cl_command_queue)q); }
#define ctx_refs_settled(c, want) refs_settled(ctx_refs_any, (void *)(c), (want))
#define queue_refs_settled(q, want) refs_settled(queue_refs_any, (void *)(q), (want))

/* Something real on the wrapped context: a tensor round trip and a small forward. */
static void exercise(fcl_context ctx)
{
    enum { B = 1, S = 4, H = 2, D = 8, N = B * S * H * D };
    int64_t sh[4] = {B, S, H, D};
    float q[N], k[N], v[N], o[N];
    support_random(q, N, 1, -1.0f, 1.0f, FCL_F32);
    support_random(k, N, 2, -1.0f, 1.0f, FCL_F32);
    support_random(v, N, 3, -1.0f, 1.0f, FCL_F32);
    fcl_tensor Q = support_tensor(ctx, FCL_F32, 4, sh, q);
    fcl_tensor K = support_tensor(ctx, FCL_F32, 4, sh, k);
    fcl_tensor V = support_tensor(ctx, FCL_F32, 4, sh, v);
    fcl_tensor O = support_tensor(ctx, FCL_F32, 4, sh, NULL);
    support_poison(O);
    float back[N];
    cr_assert(fcl_tensor_read_f32(Q, back, N) == FCL_SUCCESS);
    cr_assert(memcmp(back, q, sizeof q) == 0);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    fcl_status st = fcl_attention_forward(ctx, &p, Q, K, V, O, NULL, NULL);
    cr_assert_eq(st, FCL_SUCCESS, "forward on a wrapped context: %s: %s", fcl_status_string(st),
                 fcl_last_error(ctx));
    cr_assert_eq(fcl_finish(ctx), FCL_SUCCESS);
    cr_assert(fcl_tensor_read_f32(O, o, N) == FCL_SUCCESS);
    /* each output is a convex combination of V rows: finite and within V's range */
    for (int i = 0; i < N; i++)
        cr_assert(o[i] >= -1.0f && o[i] <= 1.0f, "O[%d] = %g", i, (double)o[i]);
    fcl_tensor_release(Q);
    fcl_tensor_release(K);
    fcl_tensor_release(V);
    fcl_tensor_release(O);
}

/* The device of the env context, and a fresh cl_context + in-order queue of the caller's. */
static void caller_objects(cl_device_id *dv, cl_context *cc, cl_command_queue *q)
{
    fcl_context env = support_context();
    *dv = fcl_context_cl_device(env);
    fcl_context_release(env);
    cl_int err = CL_SUCCESS;
    *cc = clCreateContext(NULL, 1, dv, NULL, NULL, &err);
    cr_assert(err == CL_SUCCESS && *cc, "clCreateContext: %d", (int)err);
    if (q) {
        *q = clCreateCommandQueue(*cc, *dv, 0, &err);
        cr_assert(err == CL_SUCCESS && *q, "clCreateCommandQueue: %d", (int)err);
    }
}

Test(context, create_from_cl_release_caller_first)
{
    cl_device_id dv;
    cl_context cc;
    cl_command_queue q;
    caller_objects(&dv, &cc, &q);
    cl_uint rc0 = ctx_refs(cc), rq0 = queue_refs(q);
    fcl_context ctx = NULL;
    fcl_status st = fcl_context_create_from_cl(cc, dv, q, &ctx);
    cr_assert_eq(st, FCL_SUCCESS, "%s: %s", fcl_status_string(st), fcl_last_error(NULL));
    cr_assert(fcl_context_cl_context(ctx) == cc);
    cr_assert(fcl_context_cl_device(ctx) == dv);
    cr_assert(fcl_context_cl_queue(ctx) == q, "the caller's queue was not used");
    cr_assert(ctx_refs(cc) > rc0, "the cl_context was not retained");
    cr_assert(queue_refs(q) > rq0, "the queue was not retained");
    /* the caller lets go first; the fcl_context must keep everything alive */
    clReleaseCommandQueue(q);
    clReleaseContext(cc);
    exercise(ctx);
    fcl_context_release(ctx);
}

Test(context, create_from_cl_release_fcl_first)
{
    cl_device_id dv;
    cl_context cc;
    cl_command_queue q;
    caller_objects(&dv, &cc, &q);
    cl_uint rc0 = ctx_refs(cc), rq0 = queue_refs(q);
    fcl_context ctx = NULL;
    fcl_status st = fcl_context_create_from_cl(cc, dv, q, &ctx);
    cr_assert_eq(st, FCL_SUCCESS, "%s: %s", fcl_status_string(st), fcl_last_error(NULL));
    exercise(ctx);
    fcl_context_release(ctx);
    /* everything the fcl_context held (tensors, programs, the queue) is given back */
    cl_uint rq1 = queue_refs_settled(q, rq0);
    cr_assert_eq(rq1, rq0, "queue references: %u after release (waited 5 s), %u before", rq1, rq0);
    cl_uint rc1 = ctx_refs_settled(cc, rc0);
    cr_assert_eq(rc1, rc0, "context references: %u after release (waited 5 s), %u before", rc1, rc0);
    /* the caller's objects still work */
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(cc, CL_MEM_READ_WRITE, 64, NULL, &err);
    cr_assert(err == CL_SUCCESS);
    float x[16] = {1.0f};
    cr_assert(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, sizeof x, x, 0, NULL, NULL) == CL_SUCCESS);
    cr_assert(clFinish(q) == CL_SUCCESS);
    clReleaseMemObject(m);
    clReleaseCommandQueue(q);
    clReleaseContext(cc);
}

Test(context, create_from_cl_null_queue)
{
    cl_device_id dv;
    cl_context cc;
    caller_objects(&dv, &cc, NULL);
    cl_uint rc0 = ctx_refs(cc);
    fcl_context ctx = NULL;
    fcl_status st = fcl_context_create_from_cl(cc, dv, NULL, &ctx);
    cr_assert_eq(st, FCL_SUCCESS, "%s: %s", fcl_status_string(st), fcl_last_error(NULL));
    cl_command_queue q = fcl_context_cl_queue(ctx);
    cr_assert(q != NULL, "no queue was created");
    cl_context qc = NULL;
    cl_device_id qd = NULL;
    cl_command_queue_properties props = 0;
    cr_assert(clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof qc, &qc, NULL) == CL_SUCCESS);
    cr_assert(clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof qd, &qd, NULL) == CL_SUCCESS);
    cr_assert(clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL) == CL_SUCCESS);
    cr_assert(qc == cc, "the new queue is on another cl_context");
    cr_assert(qd == dv, "the new queue is on another device");
    cr_assert(!(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE), "the new queue is out of order");
    exercise(ctx);
    fcl_context_release(ctx);
    cl_uint rc1 = ctx_refs_settled(cc, rc0);
    cr_assert_eq(rc1, rc0, "context references: %u after release (waited 5 s), %u before", rc1, rc0);
    clReleaseContext(cc);
}

Test(context, create_from_cl_null_queue_caller_released_first)
{
    cl_device_id dv;
    cl_context cc;
    caller_objects(&dv, &cc, NULL);
    fcl_context ctx = NULL;
    fcl_status st = fcl_context_create_from_cl(cc, dv, NULL, &ctx);
    cr_assert_eq(st, FCL_SUCCESS, "%s: %s", fcl_status_string(st), fcl_last_error(NULL));
    clReleaseContext(cc);
    exercise(ctx);
    fcl_context_release(ctx);
}

Test(context, create_from_cl_missing_device)
{
    cl_device_id dv;
    cl_context cc;
    caller_objects(&dv, &cc, NULL);
    fcl_context ctx = (fcl_context)(uintptr_t)1;
    cr_assert_eq(fcl_context_create_from_cl(cc, NULL, NULL, &ctx), FCL_ERR_INVALID_ARGUMENT);
    cr_assert(ctx == NULL);
    ctx = (fcl_context)(uintptr_t)1;
    cr_assert_eq(fcl_context_create_from_cl(NULL, dv, NULL, &ctx), FCL_ERR_INVALID_ARGUMENT);
    cr_assert(ctx == NULL);
    clReleaseContext(cc);
}

/* ------------------------------------------------------------------ info, version, misc */

Test(context, device_info_sane)
{
    fcl_context ctx = support_context();
    fcl_device_info info;
    memset(&info, 0xab, sizeof info);
    cr_assert_eq(fcl_context_device_info(ctx, &info), FCL_SUCCESS);
    cl_device_id dv = fcl_context_cl_device(ctx);
    char buf[512];
    cr_assert(memchr(info.name, '\0', sizeof info.name), "name not terminated");
    cr_assert(info.name[0], "empty device name");
    dev_str(dv, CL_DEVICE_NAME, buf, sizeof buf);
    cr_assert(strstr(buf, info.name) || strstr(info.name, buf), "name \"%s\" vs CL \"%s\"", info.name, buf);
    cr_assert(memchr(info.vendor, '\0', sizeof info.vendor) && info.vendor[0]);
    cr_assert(memchr(info.platform_name, '\0', sizeof info.platform_name) && info.platform_name[0],
              "empty platform name");
    cr_assert(memchr(info.platform_version, '\0', sizeof info.platform_version) &&
              !strncmp(info.platform_version, "OpenCL ", 7), "platform_version \"%s\"", info.platform_version);
    cr_assert(memchr(info.device_version, '\0', sizeof info.device_version) &&
              !strncmp(info.device_version, "OpenCL ", 7), "device_version \"%s\"", info.device_version);
    cr_assert(memchr(info.driver_version, '\0', sizeof info.driver_version) && info.driver_version[0]);
    cr_assert(info.compute_units > 0);
    cr_assert(info.local_mem_bytes > 0);
    cr_assert(info.max_work_group_size > 0);
    cr_assert(info.global_mem_bytes > 0);
    cr_assert(info.max_alloc_bytes > 0 && info.max_alloc_bytes <= info.global_mem_bytes);
    cl_device_type t = dev_type(dv);
    fcl_device_type want = (t & CL_DEVICE_TYPE_GPU) ? FCL_DEVICE_GPU
                         : (t & CL_DEVICE_TYPE_CPU) ? FCL_DEVICE_CPU
                         : (t & CL_DEVICE_TYPE_ACCELERATOR) ? FCL_DEVICE_ACCELERATOR : FCL_DEVICE_OTHER;
    cr_assert_eq(info.type, want);
    cl_uint cu = 0;
    clGetDeviceInfo(dv, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    cr_assert_eq(info.compute_units, cu);
    size_t ext_n = 0;
    cr_assert(clGetDeviceInfo(dv, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_n) == CL_SUCCESS);
    char *ext = calloc(ext_n + 2, 1);
    cr_assert(ext != NULL);
    clGetDeviceInfo(dv, CL_DEVICE_EXTENSIONS, ext_n, ext, NULL);
    char padded[8192];
    snprintf(padded, sizeof padded, " %s ", ext);
    cr_assert_eq(!!info.has_fp64, strstr(padded, " cl_khr_fp64 ") != NULL, "has_fp64");
    cr_assert_eq(!!info.has_fp16, strstr(padded, " cl_khr_fp16 ") != NULL, "has_fp16");
    if (!strstr(padded, " cl_nv_device_attribute_query ")) {
        cr_assert_eq(info.nv_cc_major, 0);
        cr_assert_eq(info.nv_cc_minor, 0);
    }
    free(ext);
    cr_assert_eq(fcl_context_device_info(NULL, &info), FCL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(fcl_context_device_info(ctx, NULL), FCL_ERR_INVALID_ARGUMENT);
    cr_log_info("device: %s (%s), %u CUs, %llu KiB local, max wg %zu", info.name, info.platform_name,
                info.compute_units, (unsigned long long)(info.local_mem_bytes / 1024), info.max_work_group_size);
    fcl_context_release(ctx);
}

Test(context, version)
{
    cr_assert(fcl_version_string() != NULL);
    cr_assert_str_eq(fcl_version_string(), FCL_VERSION_STRING);
    cr_assert_eq(fcl_version_number(), (unsigned)FCL_VERSION_NUMBER);
    char buf[32];
    snprintf(buf, sizeof buf, "%d.%d.%d", FCL_VERSION_MAJOR, FCL_VERSION_MINOR, FCL_VERSION_PATCH);
    cr_assert_str_eq(fcl_version_string(), buf);
    cr_assert_eq(fcl_version_number(),
                 (unsigned)(FCL_VERSION_MAJOR * 10000 + FCL_VERSION_MINOR * 100 + FCL_VERSION_PATCH));
}

Test(context, finish_and_release)
{
    fcl_context ctx = support_context();
    cr_assert_eq(fcl_finish(ctx), FCL_SUCCESS);
    /* finish waits for work: a write enqueued non-blocking by the caller on the queue */
    cl_int err = CL_SUCCESS;
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof(float));
    cr_assert(x != NULL);
    for (int i = 0; i < N; i++)
        x[i] = (float)i;
    cl_mem m = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE, N * sizeof(float), NULL, &err);
    cr_assert(err == CL_SUCCESS);
    cl_event ev = NULL;
    cr_assert(clEnqueueWriteBuffer(fcl_context_cl_queue(ctx), m, CL_FALSE, 0, N * sizeof(float), x, 0, NULL, &ev) ==
              CL_SUCCESS);
    cr_assert_eq(fcl_finish(ctx), FCL_SUCCESS);
    cl_int es = 1;
    cr_assert(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof es, &es, NULL) == CL_SUCCESS);
    cr_assert_eq(es, CL_COMPLETE, "fcl_finish returned before the queue drained (status %d)", (int)es);
    clReleaseEvent(ev);
    clReleaseMemObject(m);
    free(x);
    cr_assert_eq(fcl_finish(NULL), FCL_ERR_INVALID_ARGUMENT);
    fcl_context_release(ctx);
    fcl_context_release(NULL);
}

Test(context, two_contexts_independent)
{
    fcl_context a = support_context(), b = support_context();
    cr_assert(a != b);
    cr_assert(fcl_context_cl_queue(a) != fcl_context_cl_queue(b));
    /* an error on one context does not show on the other */
    fcl_tensor t = NULL;
    int64_t sh[1] = {-4};
    cr_assert(fcl_tensor_create(a, FCL_F32, 1, sh, &t) != FCL_SUCCESS);
    cr_assert(fcl_last_error(a)[0] != '\0');
    cr_assert_str_eq(fcl_last_error(b), "");
    fcl_context_release(a);
    exercise(b);
    fcl_context_release(b);
}
