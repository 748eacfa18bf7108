/*
 * Bad input for the three backward calls: fcl_attention_backward, fcl_attention_varlen_backward
 * and fcl_attention_packed_qkv_backward. Every case changes one thing from a valid call (the
 * "control" tests prove that call succeeds and writes every gradient element), then checks:
 *   - the exact status,
 *   - that fcl_last_error holds a sentence naming the op and the argument / values that were wrong,
 *   - that a requested event stays NULL,
 *   - and, after fcl_finish, that every gradient output still holds the salted poison put in
 *     before (support_poison_raw), byte for byte, and that every input (and any shared buffer
 *     the views live in) is unchanged too.
 * Overlap cases build their tensors as views of one buffer (the "arena"); index tensors
 * (cu_seqlens, seq_bounds) are wrapped over it with their own dtype. The recompute form
 * (O and LSE NULL) has its own section: there dO alone carries O's shape and dtype.
 */
#include "support.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ message helpers */

/* Case-insensitive plain substring. */
static int has_substr(const char *msg, const char *sub)
{
    size_t n = strlen(sub);
    if (!msg)
        return 0;
    for (const char *p = msg; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)sub[i]))
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ problems
 * One slot per tensor argument of a layout, plus the key mask and ALiBi slopes. */

enum { L_DENSE, L_VARLEN, L_PACKED };
static const char *const op_name[3] = {"fcl_attention_backward", "fcl_attention_varlen_backward",
                                       "fcl_attention_packed_qkv_backward"};

enum { D_Q, D_K, D_V, D_O, D_DO, D_LSE, D_DQ, D_DK, D_DV };
enum { V_Q, V_K, V_V, V_O, V_DO, V_LSE, V_CUQ, V_CUK, V_DQ, V_DK, V_DV };
enum { P_QKV, P_O, P_DO, P_LSE, P_BOUNDS, P_DQKV };
enum { S_MASK = 11, S_ALIBI = 12, NSLOT = 13 };

static const char *const slot_name[3][NSLOT] = {
    {"Q", "K", "V", "O", "dO", "LSE", "dQ", "dK", "dV", NULL, NULL, "key_mask", "alibi_slopes"},
    {"Q", "K", "V", "O", "dO", "LSE", "cu_seqlens_q", "cu_seqlens_k", "dQ", "dK", "dV", "key_mask",
     "alibi_slopes"},
    {"QKV", "O", "dO", "LSE", "seq_bounds", "dQKV", NULL, NULL, NULL, NULL, NULL, "key_mask", "alibi_slopes"},
};

enum { R_IN = 1, R_OUT, R_INDEX };

typedef struct tspec {
    int role; /* 0 = absent (NULL argument) */
    fcl_dtype dtype;
    int ndim;
    int64_t shape[4];
    int64_t place;      /* -1: own buffer; else element offset into the shared arena buffer */
    int has_strides;    /* only for arena placements */
    int64_t strides[4];
} tspec;

typedef struct problem {
    int layout;
    tspec t[NSLOT];
    int max_q, max_k;   /* varlen */
    int64_t arena;      /* bytes of the shared buffer (0: none) */
} problem;

static void set_spec(tspec *s, int role, fcl_dtype dt, int ndim, int64_t a, int64_t b, int64_t c, int64_t d)
{
    memset(s, 0, sizeof *s);
    s->role = role;
    s->dtype = dt;
    s->ndim = ndim;
    const int64_t sh[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        s->shape[i] = i < ndim ? sh[i] : 0;
    s->place = -1;
}

/* Dense: B 2, Sq 3, Sk 5, Hq 6, Hkv 3 (GQA), D 16, F32. */
enum { B0 = 2, SQ0 = 3, SK0 = 5, HQ0 = 6, HKV0 = 3, D0 = 16 };

static problem problem_dense(void)
{
    problem p;
    memset(&p, 0, sizeof p);
    p.layout = L_DENSE;
    set_spec(&p.t[D_Q], R_IN, FCL_F32, 4, B0, SQ0, HQ0, D0);
    set_spec(&p.t[D_K], R_IN, FCL_F32, 4, B0, SK0, HKV0, D0);
    set_spec(&p.t[D_V], R_IN, FCL_F32, 4, B0, SK0, HKV0, D0);
    set_spec(&p.t[D_O], R_IN, FCL_F32, 4, B0, SQ0, HQ0, D0);
    set_spec(&p.t[D_DO], R_IN, FCL_F32, 4, B0, SQ0, HQ0, D0);
    set_spec(&p.t[D_LSE], R_IN, FCL_F32, 3, B0, HQ0, SQ0, 0);
    set_spec(&p.t[D_DQ], R_OUT, FCL_F32, 4, B0, SQ0, HQ0, D0);
    set_spec(&p.t[D_DK], R_OUT, FCL_F32, 4, B0, SK0, HKV0, D0);
    set_spec(&p.t[D_DV], R_OUT, FCL_F32, 4, B0, SK0, HKV0, D0);
    return p;
}

/* Varlen: 2 sequences, query lengths 3 and 4 (total_q 7), key lengths 5 and 4 (total_k 9),
 * Hq 4, Hkv 2, D 16, F32. */
enum { VB = 2, TQ0 = 7, TK0 = 9, VHQ = 4, VHKV = 2, VMAXQ = 4, VMAXK = 5 };
static const int cu_q0[VB + 1] = {0, 3, 7}, cu_k0[VB + 1] = {0, 5, 9};

static problem problem_varlen(void)
{
    problem p;
    memset(&p, 0, sizeof p);
    p.layout = L_VARLEN;
    set_spec(&p.t[V_Q], R_IN, FCL_F32, 3, TQ0, VHQ, D0, 0);
    set_spec(&p.t[V_K], R_IN, FCL_F32, 3, TK0, VHKV, D0, 0);
    set_spec(&p.t[V_V], R_IN, FCL_F32, 3, TK0, VHKV, D0, 0);
    set_spec(&p.t[V_O], R_IN, FCL_F32, 3, TQ0, VHQ, D0, 0);
    set_spec(&p.t[V_DO], R_IN, FCL_F32, 3, TQ0, VHQ, D0, 0);
    set_spec(&p.t[V_LSE], R_IN, FCL_F32, 2, VHQ, TQ0, 0, 0);
    set_spec(&p.t[V_CUQ], R_INDEX, FCL_I32, 1, VB + 1, 0, 0, 0);
    set_spec(&p.t[V_CUK], R_INDEX, FCL_I32, 1, VB + 1, 0, 0, 0);
    set_spec(&p.t[V_DQ], R_OUT, FCL_F32, 3, TQ0, VHQ, D0, 0);
    set_spec(&p.t[V_DK], R_OUT, FCL_F32, 3, TK0, VHKV, D0, 0);
    set_spec(&p.t[V_DV], R_OUT, FCL_F32, 3, TK0, VHKV, D0, 0);
    p.max_q = VMAXQ;
    p.max_k = VMAXK;
    return p;
}

/* Packed: L 6 rows in two sequences (rows 0-3, rows 4-5), H 2, D 16, F32. */
enum { PL = 6, PH = 2 };
static const int bounds0[PL * 2] = {0, 4, 0, 4, 0, 4, 0, 4, 4, 6, 4, 6};

static problem problem_packed(void)
{
    problem p;
    memset(&p, 0, sizeof p);
    p.layout = L_PACKED;
    set_spec(&p.t[P_QKV], R_IN, FCL_F32, 4, PL, 3, PH, D0);
    set_spec(&p.t[P_O], R_IN, FCL_F32, 3, PL, PH, D0, 0);
    set_spec(&p.t[P_DO], R_IN, FCL_F32, 3, PL, PH, D0, 0);
    set_spec(&p.t[P_LSE], R_IN, FCL_F32, 2, PH, PL, 0, 0);
    set_spec(&p.t[P_BOUNDS], R_INDEX, FCL_I32, 2, PL, 2, 0, 0);
    set_spec(&p.t[P_DQKV], R_OUT, FCL_F32, 4, PL, 3, PH, D0);
    return p;
}

static problem problem_of(int layout)
{
    return layout == L_DENSE ? problem_dense() : layout == L_VARLEN ? problem_varlen() : problem_packed();
}

static int64_t spec_numel(const tspec *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->shape[i];
    return n;
}

/* Elements a placed view spans: 1 + sum (shape - 1) * stride. */
static int64_t spec_extent(const tspec *s)
{
    if (!s->has_strides)
        return spec_numel(s);
    int64_t last = 0;
    for (int i = 0; i < s->ndim; i++)
        last += (s->shape[i] - 1) * s->strides[i];
    return last + 1;
}

/* Places slot `slot` at element offset `off` (of its dtype) of the shared buffer, growing it. */
static void place(problem *p, int slot, int64_t off)
{
    tspec *s = &p->t[slot];
    s->place = off;
    const int64_t end = (off + spec_extent(s)) * (int64_t)fcl_dtype_size(s->dtype);
    if (end > p->arena)
        p->arena = end;
}

/* ------------------------------------------------------------------ contexts
 * One context per test process, shared by the cases a test runs (and a second one for the
 * tensors of another context); released after each test. */

static fcl_context g_ctx, g_other;
static const char *g_case = "?"; /* the running case, for assertion messages */

static fcl_context shared_ctx(void)
{
    if (!g_ctx)
        g_ctx = support_context();
    return g_ctx;
}

static fcl_context other_ctx(void)
{
    if (!g_other)
        g_other = support_context();
    return g_other;
}

static void release_contexts(void)
{
    fcl_context_release(g_other);
    fcl_context_release(g_ctx);
    g_other = g_ctx = NULL;
}

TestSuite(backward_errors_dense, .fini = release_contexts);
TestSuite(backward_errors_varlen, .fini = release_contexts);
TestSuite(backward_errors_packed, .fini = release_contexts);

#define RUN(fn)             \
    do {                    \
        g_case = #fn;       \
        fn();               \
    } while (0)

/* ------------------------------------------------------------------ fixture */

typedef struct fx {
    fcl_context ctx;
    problem pb;
    fcl_tensor t[NSLOT];
    unsigned char *expect[NSLOT]; /* bytes each tensor must hold after a rejected call */
    size_t bytes[NSLOT];
    unsigned char *poison[NSLOT]; /* outputs: the salted pattern written into them */
    fcl_tensor arena;
    unsigned char *arena_expect;
    size_t arena_bytes;
} fx;

static size_t tensor_bytes(fcl_tensor t)
{
    return (size_t)fcl_tensor_numel(t) * fcl_dtype_size(fcl_tensor_dtype(t));
}

static fcl_tensor make_tensor(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(ctx, dt, ndim, shape, &t);
    cr_assert(st == FCL_SUCCESS && t != NULL, "fcl_tensor_create(%s, ndim %d): %s: %s", fcl_dtype_name(dt), ndim,
              fcl_status_string(st), fcl_last_error(ctx));
    return t;
}

static unsigned char *read_raw(fcl_tensor t, size_t *bytes)
{
    *bytes = tensor_bytes(t);
    unsigned char *p = support_xmalloc(*bytes);
    fcl_status st = fcl_tensor_read_raw(t, p, *bytes);
    cr_assert(st == FCL_SUCCESS, "fcl_tensor_read_raw: %s", fcl_status_string(st));
    return p;
}

/* Inputs: seeded values in [-1, 1); key mask: ones; ALiBi: small positive slopes. */
static void fill_input(fcl_tensor t, int slot, uint64_t seed)
{
    size_t n = (size_t)fcl_tensor_numel(t);
    float *h = support_xmalloc(sizeof(float) * n);
    fcl_dtype dt = fcl_tensor_dtype(t);
    if (slot == S_MASK) {
        for (size_t i = 0; i < n; i++)
            h[i] = 1.0f;
    } else if (slot == S_ALIBI) {
        for (size_t i = 0; i < n; i++)
            h[i] = 0.125f * (float)(i % 8 + 1);
    } else {
        support_random(h, n, seed, -1.0f, 1.0f, dt == FCL_F16 || dt == FCL_BF16 ? dt : FCL_F32);
    }
    support_write(t, h);
    free(h);
}

/* Index tensors: the valid prefix sums / bounds (repeated when the shape was changed). */
static void fill_index(fcl_tensor t, int layout, int slot)
{
    size_t n = (size_t)fcl_tensor_numel(t);
    const int *def = layout == L_PACKED ? bounds0 : slot == V_CUQ ? cu_q0 : cu_k0;
    const size_t def_n = layout == L_PACKED ? PL * 2 : VB + 1;
    float *h = support_xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)def[i % def_n];
    support_write(t, h);
    free(h);
}

static fcl_tensor make_slot(fx *f, const tspec *s)
{
    if (s->place < 0)
        return make_tensor(f->ctx, s->dtype, s->ndim, s->shape);
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_wrap(f->ctx, fcl_tensor_buffer(f->arena), s->dtype, s->ndim, s->shape,
                                    s->has_strides ? s->strides : NULL, s->place, &t);
    cr_assert(st == FCL_SUCCESS, "fcl_tensor_wrap into the shared buffer: %s: %s", fcl_status_string(st),
              fcl_last_error(f->ctx));
    return t;
}

/* Creates and fills every tensor: the shared buffer gets a poison pattern, then inputs get
 * values, outputs their own salted poison, index tensors their valid contents (in that order,
 * so an index view inside an output still holds valid indices). */
static void fx_build(fx *f, const problem *pb)
{
    memset(f, 0, sizeof *f);
    f->pb = *pb;
    f->ctx = shared_ctx();
    if (pb->arena > 0) {
        const int64_t n[1] = {(pb->arena + 3) / 4};
        f->arena = make_tensor(f->ctx, FCL_F32, 1, n);
        free(support_poison_raw(f->arena, &f->arena_bytes, 97));
    }
    for (int i = 0; i < NSLOT; i++)
        if (pb->t[i].role)
            f->t[i] = make_slot(f, &pb->t[i]);
    for (int i = 0; i < NSLOT; i++)
        if (pb->t[i].role == R_IN)
            fill_input(f->t[i], i, 1000u + (unsigned)i);
    for (int i = 0; i < NSLOT; i++)
        if (pb->t[i].role == R_OUT)
            f->poison[i] = support_poison_raw(f->t[i], &f->bytes[i], 1u + (unsigned)i);
    for (int i = 0; i < NSLOT; i++)
        if (pb->t[i].role == R_INDEX)
            fill_index(f->t[i], pb->layout, i);
}

/* Records what every tensor holds now: a rejected call must leave exactly this. An output in
 * its own buffer must hold its poison pattern. */
static void fx_seal(fx *f)
{
    cr_assert(fcl_finish(f->ctx) == FCL_SUCCESS);
    for (int i = 0; i < NSLOT; i++) {
        if (!f->t[i])
            continue;
        f->expect[i] = read_raw(f->t[i], &f->bytes[i]);
        if (f->pb.t[i].role == R_OUT && f->pb.t[i].place < 0)
            cr_assert(memcmp(f->expect[i], f->poison[i], f->bytes[i]) == 0, "the poison of %s did not stick",
                      slot_name[f->pb.layout][i]);
    }
    if (f->arena)
        f->arena_expect = read_raw(f->arena, &f->arena_bytes);
}

static void fx_init(fx *f, const problem *pb)
{
    fx_build(f, pb);
    fx_seal(f);
}

/* fcl_finish, then every tensor (and the shared buffer) must hold what fx_seal recorded. */
static void fx_assert_untouched(fx *f)
{
    fcl_status st = fcl_finish(f->ctx);
    cr_assert(st == FCL_SUCCESS, "fcl_finish after a rejected call: %s: %s", fcl_status_string(st),
              fcl_last_error(f->ctx));
    for (int i = 0; i < NSLOT; i++) {
        if (!f->t[i])
            continue;
        size_t n;
        unsigned char *got = read_raw(f->t[i], &n);
        cr_assert(n == f->bytes[i]);
        cr_assert(memcmp(got, f->expect[i], n) == 0, "[%s] %s was written by a rejected call", g_case,
                  slot_name[f->pb.layout][i]);
        free(got);
    }
    if (f->arena) {
        size_t n;
        unsigned char *got = read_raw(f->arena, &n);
        cr_assert(memcmp(got, f->arena_expect, n) == 0, "[%s] the shared buffer was written by a rejected call",
                  g_case);
        free(got);
    }
}

static void fx_fini(fx *f)
{
    for (int i = 0; i < NSLOT; i++) {
        fcl_tensor_release(f->t[i]);
        free(f->expect[i]);
        free(f->poison[i]);
    }
    fcl_tensor_release(f->arena);
    free(f->arena_expect);
}

/* ------------------------------------------------------------------ calls */

typedef struct call {
    int layout;
    fcl_context ctx;
    fcl_attn_params params;
    const fcl_attn_params *p; /* &params, or NULL */
    fcl_tensor t[NSLOT];
    int max_q, max_k;
} call;

/* The call of f's tensors; `params` (NULL: FCL_ATTN_PARAMS_INIT) gets f's mask and ALiBi slots. */
static void fx_call(fx *f, const fcl_attn_params *params, call *c)
{
    memset(c, 0, sizeof *c);
    c->layout = f->pb.layout;
    c->ctx = f->ctx;
    fcl_attn_params def = FCL_ATTN_PARAMS_INIT;
    c->params = params ? *params : def;
    if (f->t[S_MASK])
        c->params.key_mask = f->t[S_MASK];
    if (f->t[S_ALIBI])
        c->params.alibi_slopes = f->t[S_ALIBI];
    c->p = &c->params;
    memcpy(c->t, f->t, sizeof c->t);
    c->max_q = f->pb.max_q;
    c->max_k = f->pb.max_k;
}

static fcl_status do_call(const call *c, cl_event *ev)
{
    const fcl_tensor *t = c->t;
    switch (c->layout) {
    case L_DENSE:
        return fcl_attention_backward(c->ctx, c->p, t[D_Q], t[D_K], t[D_V], t[D_O], t[D_DO], t[D_LSE], t[D_DQ],
                                      t[D_DK], t[D_DV], ev);
    case L_VARLEN:
        return fcl_attention_varlen_backward(c->ctx, c->p, t[V_Q], t[V_K], t[V_V], t[V_O], t[V_DO], t[V_LSE],
                                             t[V_CUQ], t[V_CUK], c->max_q, c->max_k, t[V_DQ], t[V_DK], t[V_DV],
                                             ev);
    default:
        return fcl_attention_packed_qkv_backward(c->ctx, c->p, t[P_QKV], t[P_O], t[P_DO], t[P_LSE], t[P_BOUNDS],
                                                 t[P_DQKV], ev);
    }
}

/* The forward of the same problem, into O and LSE (the controls' inputs). */
static void do_forward(const call *c)
{
    const fcl_tensor *t = c->t;
    fcl_status st;
    switch (c->layout) {
    case L_DENSE:
        st = fcl_attention_forward(c->ctx, c->p, t[D_Q], t[D_K], t[D_V], t[D_O], t[D_LSE], NULL);
        break;
    case L_VARLEN:
        st = fcl_attention_varlen_forward(c->ctx, c->p, t[V_Q], t[V_K], t[V_V], t[V_CUQ], t[V_CUK], c->max_q,
                                          c->max_k, t[V_O], t[V_LSE], NULL);
        break;
    default:
        st = fcl_attention_packed_qkv_forward(c->ctx, c->p, t[P_QKV], t[P_BOUNDS], t[P_O], t[P_LSE], NULL);
        break;
    }
    cr_assert(st == FCL_SUCCESS, "the forward of the control problem: %s: %s", fcl_status_string(st),
              fcl_last_error(c->ctx));
}

/* Copy of the message of the last case (the context's copy lives until its next call). */
static char g_msg[1024];

/* The call returned `st` and `ev`; it must have failed with `want`, returned no event and left
 * a sentence naming the op in fcl_last_error(msg_ctx). Returns a copy of the message. */
static const char *expect_fail(int layout, fcl_context msg_ctx, fcl_status st, cl_event ev, fcl_status want,
                               const char *what)
{
    cr_assert(st == want, "[%s] %s: %s returned %s (%d), expected %s; message: \"%s\"", g_case, what, op_name[layout],
              fcl_status_string(st), (int)st, fcl_status_string(want), fcl_last_error(msg_ctx));
    cr_assert(ev == NULL, "[%s] %s: a rejected call returned an event", g_case, what);
    const char *msg = fcl_last_error(msg_ctx);
    support_assert_sentence(msg);
    SUPPORT_ASSERT_TOKENS(msg, op_name[layout]);
    snprintf(g_msg, sizeof g_msg, "%s", msg);
    return g_msg;
}

/* The whole case: build `pb`, call with `params` (a NULL-params call when no_params), expect `want`,
 * check that nothing was written. */
static const char *run_case_p(const problem *pb, const fcl_attn_params *params, int no_params, fcl_status want,
                              const char *what)
{
    fx f;
    fx_init(&f, pb);
    call c;
    fx_call(&f, params, &c);
    if (no_params)
        c.p = NULL;
    cl_event ev = NULL;
    fcl_status st = do_call(&c, &ev);
    const char *msg = expect_fail(pb->layout, f.ctx, st, ev, want, what);
    fx_assert_untouched(&f);
    fx_fini(&f);
    return msg;
}

static const char *run_case(const problem *pb, fcl_status want, const char *what)
{
    return run_case_p(pb, NULL, 0, want, what);
}

/* The default problem of `layout` with `slot`'s argument replaced by NULL. */
static void run_null_case(int layout, int slot)
{
    problem pb = problem_of(layout);
    fx f;
    fx_init(&f, &pb);
    call c;
    fx_call(&f, NULL, &c);
    c.t[slot] = NULL;
    cl_event ev = NULL;
    char what[64];
    snprintf(what, sizeof what, "NULL %s", slot_name[layout][slot]);
    fcl_status st = do_call(&c, &ev);
    const char *msg = expect_fail(layout, f.ctx, st, ev, FCL_ERR_INVALID_ARGUMENT, what);
    SUPPORT_ASSERT_TOKENS(msg, slot_name[layout][slot]);
    cr_assert(has_substr(msg, "NULL"), "message \"%s\" does not say NULL", msg);
    if (!strcmp(slot_name[layout][slot], "O"))
        SUPPORT_ASSERT_TOKENS(msg, "LSE"); /* O may be NULL only with LSE NULL */
    fx_assert_untouched(&f);
    fx_fini(&f);
}

/* The default problem with `slot` (a tensor argument, the key mask or the ALiBi slopes) made in
 * another context, with the right shape and dtype. */
static void run_foreign_case_pb(const problem *pbp, int slot, const tspec *s)
{
    const int layout = pbp->layout;
    problem pb = *pbp;
    fx f;
    fx_init(&f, &pb);
    fcl_context other = other_ctx();
    fcl_tensor x = make_tensor(other, s->dtype, s->ndim, s->shape);
    if (s->role == R_INDEX)
        fill_index(x, layout, slot);
    else
        fill_input(x, slot, 4242);
    call c;
    fx_call(&f, NULL, &c);
    if (slot == S_MASK)
        c.params.key_mask = x;
    else if (slot == S_ALIBI)
        c.params.alibi_slopes = x;
    else
        c.t[slot] = x;
    cl_event ev = NULL;
    char what[64];
    snprintf(what, sizeof what, "%s of another context", slot_name[layout][slot]);
    fcl_status st = do_call(&c, &ev);
    const char *msg = expect_fail(layout, f.ctx, st, ev, FCL_ERR_INVALID_ARGUMENT, what);
    SUPPORT_ASSERT_TOKENS(msg, slot_name[layout][slot]);
    cr_assert(has_substr(msg, "context"), "message \"%s\" does not mention the context", msg);
    fx_assert_untouched(&f);
    fcl_tensor_release(x);
    fx_fini(&f);
}

static void run_foreign_case(int layout, int slot, const tspec *s)
{
    problem pb = problem_of(layout);
    run_foreign_case_pb(&pb, slot, s);
}

static void run_null_ctx_case(int layout)
{
    problem pb = problem_of(layout);
    fx f;
    fx_init(&f, &pb);
    call c;
    fx_call(&f, NULL, &c);
    c.ctx = NULL;
    cl_event ev = NULL;
    fcl_status st = do_call(&c, &ev);
    const char *msg = expect_fail(layout, NULL, st, ev, FCL_ERR_INVALID_ARGUMENT, "NULL ctx");
    cr_assert(support_has_token(msg, "ctx") || has_substr(msg, "context"),
              "the NULL-ctx message \"%s\" does not name the context", msg);
    fx_assert_untouched(&f);
    fx_fini(&f);
}

static void run_null_params_case(int layout)
{
    problem pb = problem_of(layout);
    const char *msg = run_case_p(&pb, NULL, 1, FCL_ERR_INVALID_ARGUMENT, "NULL params");
    SUPPORT_ASSERT_TOKENS(msg, "params");
}

/* Every element of every output was written (differs from its poison) and is finite. */
static void assert_outputs_written(fx *f)
{
    for (int i = 0; i < NSLOT; i++) {
        if (f->pb.t[i].role != R_OUT)
            continue;
        const char *name = slot_name[f->pb.layout][i];
        size_t n;
        unsigned char *got = read_raw(f->t[i], &n);
        cr_assert(f->pb.t[i].dtype == FCL_F32);
        size_t unwritten = 0, bad = 0;
        for (size_t e = 0; e < n / 4; e++) {
            float x;
            memcpy(&x, got + 4 * e, 4);
            unwritten += memcmp(got + 4 * e, f->poison[i] + 4 * e, 4) == 0;
            bad += !isfinite(x);
        }
        cr_assert(unwritten == 0, "the valid call left %zu of %zu elements of %s as poison", unwritten, n / 4, name);
        cr_assert(bad == 0, "the valid call wrote %zu non-finite elements into %s", bad, name);
        free(got);
    }
}

/* A valid call with an event: succeeds, returns an event, clears the message, writes every
 * gradient element (finite), and changes no input. */
static void run_control(const problem *pb, const fcl_attn_params *params, int forward_first)
{
    fx f;
    fx_build(&f, pb);
    call c;
    fx_call(&f, params, &c);
    if (forward_first)
        do_forward(&c);
    fx_seal(&f);
    cl_event ev = NULL;
    fcl_status st = do_call(&c, &ev);
    cr_assert(st == FCL_SUCCESS, "[%s] valid %s: %s: %s", g_case, op_name[pb->layout], fcl_status_string(st),
              fcl_last_error(f.ctx));
    cr_assert(ev != NULL, "a successful call with an event pointer returned no event");
    cl_int ce = clWaitForEvents(1, &ev);
    cr_assert(ce == CL_SUCCESS, "clWaitForEvents: %d", (int)ce);
    clReleaseEvent(ev);
    cr_assert_str_eq(fcl_last_error(f.ctx), "", "a successful call left a message");
    cr_assert(fcl_finish(f.ctx) == FCL_SUCCESS);
    assert_outputs_written(&f);
    for (int i = 0; i < NSLOT; i++) {
        if (!f.t[i] || f.pb.t[i].role == R_OUT)
            continue;
        size_t n;
        unsigned char *got = read_raw(f.t[i], &n);
        cr_assert(memcmp(got, f.expect[i], n) == 0, "the valid call changed the input %s",
                  slot_name[pb->layout][i]);
        free(got);
    }
    fx_fini(&f);
}

/* A failed call leaves a message; the next valid call clears it and succeeds. */
static void run_error_cleared(int layout, int bad_slot)
{
    problem pb = problem_of(layout);
    fx f;
    fx_init(&f, &pb);
    call c;
    fx_call(&f, NULL, &c);
    c.t[bad_slot] = NULL;
    fcl_status st = do_call(&c, NULL);
    cr_assert(st == FCL_ERR_INVALID_ARGUMENT, "NULL %s: got %s", slot_name[layout][bad_slot],
              fcl_status_string(st));
    cr_assert(fcl_last_error(f.ctx)[0] != '\0', "a failed call left no message");
    fx_call(&f, NULL, &c);
    st = do_call(&c, NULL);
    cr_assert(st == FCL_SUCCESS, "valid call after a failed one: %s: %s", fcl_status_string(st),
              fcl_last_error(f.ctx));
    cr_assert_str_eq(fcl_last_error(f.ctx), "", "a successful call kept the previous call's message");
    cr_assert(fcl_finish(f.ctx) == FCL_SUCCESS);
    assert_outputs_written(&f);
    fx_fini(&f);
}

/* The default problem with the key mask (as_mask) or ALiBi slopes of the given dtype/shape. */
static const char *run_side_case(int layout, int as_mask, fcl_dtype dt, int ndim, int64_t a, int64_t b,
                                 int64_t c3, fcl_status want, const char *what)
{
    problem pb = problem_of(layout);
    set_spec(&pb.t[as_mask ? S_MASK : S_ALIBI], R_IN, dt, ndim, a, b, c3, 0);
    const char *msg = run_case(&pb, want, what);
    SUPPORT_ASSERT_TOKENS(msg, as_mask ? "key_mask" : "alibi_slopes");
    return msg;
}

static const char *run_params_case(int layout, fcl_attn_params p, const char *what)
{
    problem pb = problem_of(layout);
    return run_case_p(&pb, &p, 0, FCL_ERR_INVALID_ARGUMENT, what);
}

/* ================================================================== dense */

/* ------------------------------------------------------------------ controls */

static void dense_control_valid_call_succeeds_and_writes_gradients(void)
{
    problem pb = problem_dense();
    run_control(&pb, NULL, 1);
}

static void dense_control_valid_optional_inputs_accepted(void)
{
    /* NULL LSE (recomputed); [B, Sk] key mask + [Hq] ALiBi + windows + softcap; shared [Sk]
     * key mask + [B, Hq] ALiBi + causal: all valid, so the rejections below are about the one
     * change. */
    problem pb = problem_dense();
    pb.t[D_LSE].role = 0;
    run_control(&pb, NULL, 0);
    pb = problem_dense();
    set_spec(&pb.t[S_MASK], R_IN, FCL_F32, 2, B0, SK0, 0, 0);
    set_spec(&pb.t[S_ALIBI], R_IN, FCL_F32, 1, HQ0, 0, 0, 0);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_left = 3;
    p.window_right = 1;
    p.softcap = 30.0f;
    p.scale = 0.3f;
    run_control(&pb, &p, 1);
    pb = problem_dense();
    set_spec(&pb.t[S_MASK], R_IN, FCL_F32, 1, SK0, 0, 0, 0);
    set_spec(&pb.t[S_ALIBI], R_IN, FCL_F32, 2, B0, HQ0, 0, 0);
    fcl_attn_params q = FCL_ATTN_PARAMS_INIT;
    q.causal = 1;
    run_control(&pb, &q, 1);
}

static void dense_control_gradients_next_to_inputs_in_one_buffer(void)
{
    /* every tensor a view of one buffer, back to back: no overlap, so the call is valid and
     * writes only the gradients' ranges */
    problem pb = problem_dense();
    int64_t off = 0;
    const int order[9] = {D_Q, D_K, D_V, D_O, D_DO, D_LSE, D_DQ, D_DK, D_DV};
    for (int i = 0; i < 9; i++) {
        place(&pb, order[i], off);
        off += spec_numel(&pb.t[order[i]]);
    }
    run_control(&pb, NULL, 0);
}

static void dense_valid_call_after_failed_one_clears_error(void)
{
    run_error_cleared(L_DENSE, D_DK);
}

/* ------------------------------------------------------------------ NULL arguments, contexts */

static void dense_null_context(void) { run_null_ctx_case(L_DENSE); }
static void dense_null_params(void) { run_null_params_case(L_DENSE); }
static void dense_null_q(void) { run_null_case(L_DENSE, D_Q); }
static void dense_null_k(void) { run_null_case(L_DENSE, D_K); }
static void dense_null_v(void) { run_null_case(L_DENSE, D_V); }
static void dense_null_o(void) { run_null_case(L_DENSE, D_O); }
static void dense_null_do(void) { run_null_case(L_DENSE, D_DO); }
static void dense_null_dq(void) { run_null_case(L_DENSE, D_DQ); }
static void dense_null_dk(void) { run_null_case(L_DENSE, D_DK); }
static void dense_null_dv(void) { run_null_case(L_DENSE, D_DV); }

static void dense_foreign(int slot)
{
    problem pb = problem_dense();
    run_foreign_case(L_DENSE, slot, &pb.t[slot]);
}

static void dense_q_of_another_context(void) { dense_foreign(D_Q); }
static void dense_k_of_another_context(void) { dense_foreign(D_K); }
static void dense_o_of_another_context(void) { dense_foreign(D_O); }
static void dense_do_of_another_context(void) { dense_foreign(D_DO); }
static void dense_lse_of_another_context(void) { dense_foreign(D_LSE); }
static void dense_dq_of_another_context(void) { dense_foreign(D_DQ); }
static void dense_dk_of_another_context(void) { dense_foreign(D_DK); }
static void dense_dv_of_another_context(void) { dense_foreign(D_DV); }

static void dense_key_mask_of_another_context(void)
{
    tspec s;
    set_spec(&s, R_IN, FCL_F32, 2, B0, SK0, 0, 0);
    run_foreign_case(L_DENSE, S_MASK, &s);
}

static void dense_alibi_of_another_context(void)
{
    tspec s;
    set_spec(&s, R_IN, FCL_F32, 1, HQ0, 0, 0, 0);
    run_foreign_case(L_DENSE, S_ALIBI, &s);
}

/* ------------------------------------------------------------------ ranks */

static void dense_q_rank_3(void)
{
    problem pb = problem_dense();
    set_spec(&pb.t[D_Q], R_IN, FCL_F32, 3, SQ0, HQ0, D0, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "Q rank 3");
    SUPPORT_ASSERT_TOKENS(msg, "Q", "3", "4");
}

static void dense_do_rank_3(void)
{
    problem pb = problem_dense();
    set_spec(&pb.t[D_DO], R_IN, FCL_F32, 3, B0 * SQ0, HQ0, D0, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dO rank 3");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "3", "4");
}

static void dense_dq_rank_3(void)
{
    problem pb = problem_dense();
    set_spec(&pb.t[D_DQ], R_OUT, FCL_F32, 3, B0 * SQ0, HQ0, D0, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dQ rank 3");
    SUPPORT_ASSERT_TOKENS(msg, "dQ", "3", "4");
}

static void dense_dk_rank_2(void)
{
    problem pb = problem_dense();
    set_spec(&pb.t[D_DK], R_OUT, FCL_F32, 2, B0 * SK0 * HKV0, D0, 0, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dK rank 2");
    SUPPORT_ASSERT_TOKENS(msg, "dK", "2", "4");
}

static void dense_dv_rank_1(void)
{
    problem pb = problem_dense();
    set_spec(&pb.t[D_DV], R_OUT, FCL_F32, 1, B0 * SK0 * HKV0 * D0, 0, 0, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dV rank 1");
    SUPPORT_ASSERT_TOKENS(msg, "dV", "1", "4");
}

static void dense_lse_rank_2(void)
{
    problem pb = problem_dense();
    set_spec(&pb.t[D_LSE], R_IN, FCL_F32, 2, B0 * HQ0, SQ0, 0, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "LSE rank 2");
    SUPPORT_ASSERT_TOKENS(msg, "LSE", "2", "3");
}

/* ------------------------------------------------------------------ gradient shapes */

static void dense_do_seqlen_differs_from_o(void)
{
    problem pb = problem_dense();
    pb.t[D_DO].shape[1] = 13;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dO Sq 13");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "13", "3");
}

static void dense_do_head_dim_differs_from_o(void)
{
    problem pb = problem_dense();
    pb.t[D_DO].shape[3] = 24;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dO D 24");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "24", "16");
}

static void dense_do_transposed_heads_and_seq(void)
{
    problem pb = problem_dense();
    pb.t[D_DO].shape[1] = HQ0; /* [B, Hq, Sq, D] passed as if it were [B, Sq, Hq, D] */
    pb.t[D_DO].shape[2] = SQ0;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dO [B, Hq, Sq, D]");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "6", "3");
}

static void dense_dq_heads_differ_from_q(void)
{
    problem pb = problem_dense();
    pb.t[D_DQ].shape[2] = 12;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dQ Hq 12");
    SUPPORT_ASSERT_TOKENS(msg, "dQ", "12", "6");
}

static void dense_dq_batch_differs_from_q(void)
{
    problem pb = problem_dense();
    pb.t[D_DQ].shape[0] = 7;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dQ B 7");
    SUPPORT_ASSERT_TOKENS(msg, "dQ", "7", "2");
}

static void dense_dk_seqlen_differs_from_k(void)
{
    problem pb = problem_dense();
    pb.t[D_DK].shape[1] = 11;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dK Sk 11");
    SUPPORT_ASSERT_TOKENS(msg, "dK", "11", "5");
}

static void dense_dk_shaped_like_q(void)
{
    /* a common slip: dK allocated like dQ ([B, Sq, Hq, D]) */
    problem pb = problem_dense();
    pb.t[D_DK].shape[1] = SQ0;
    pb.t[D_DK].shape[2] = HQ0;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dK like Q");
    SUPPORT_ASSERT_TOKENS(msg, "dK", "5", "3");
}

static void dense_dv_head_dim_differs_from_v(void)
{
    problem pb = problem_dense();
    pb.t[D_DV].shape[3] = 32;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dV D 32");
    SUPPORT_ASSERT_TOKENS(msg, "dV", "32", "16");
}

static void dense_dv_kv_heads_differ_from_v(void)
{
    problem pb = problem_dense();
    pb.t[D_DV].shape[2] = HQ0; /* dV with Hq heads instead of Hkv */
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dV Hkv 6");
    SUPPORT_ASSERT_TOKENS(msg, "dV", "6", "3");
}

/* ------------------------------------------------------------------ forward-problem shapes */

static void dense_head_dim_mismatch_q_k(void)
{
    problem pb = problem_dense();
    const int qs[4] = {D_Q, D_O, D_DO, D_DQ}, ks[4] = {D_K, D_V, D_DK, D_DV};
    for (int i = 0; i < 4; i++) {
        pb.t[qs[i]].shape[3] = 96;
        pb.t[ks[i]].shape[3] = 64;
    }
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "Q D 96, K D 64");
    SUPPORT_ASSERT_TOKENS(msg, "96", "64");
}

static void dense_head_dim_mismatch_k_v(void)
{
    problem pb = problem_dense();
    pb.t[D_V].shape[3] = 40;
    pb.t[D_DV].shape[3] = 40;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "V D 40");
    SUPPORT_ASSERT_TOKENS(msg, "V", "40", "16");
}

static void dense_q_heads_not_multiple_of_kv_heads(void)
{
    problem pb = problem_dense();
    const int ks[4] = {D_K, D_V, D_DK, D_DV};
    for (int i = 0; i < 4; i++)
        pb.t[ks[i]].shape[2] = 4;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "Hq 6, Hkv 4");
    SUPPORT_ASSERT_TOKENS(msg, "6", "4");
}

static void dense_head_dim_above_limit(void)
{
    problem pb = problem_dense();
    const int all[8] = {D_Q, D_K, D_V, D_O, D_DO, D_DQ, D_DK, D_DV};
    for (int i = 0; i < 8; i++)
        pb.t[all[i]].shape[3] = FCL_MAX_HEAD_DIM + 1;
    const char *msg = run_case(&pb, FCL_ERR_UNSUPPORTED, "D 257");
    SUPPORT_ASSERT_TOKENS(msg, "257", "256");
}

static void dense_o_seqlen_differs_from_q(void)
{
    problem pb = problem_dense();
    pb.t[D_O].shape[1] = 9;
    pb.t[D_DO].shape[1] = 9;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "O Sq 9");
    SUPPORT_ASSERT_TOKENS(msg, "O", "9", "3");
}

static void dense_k_batch_differs_from_q(void)
{
    problem pb = problem_dense();
    const int ks[4] = {D_K, D_V, D_DK, D_DV};
    for (int i = 0; i < 4; i++)
        pb.t[ks[i]].shape[0] = 4;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "K B 4");
    SUPPORT_ASSERT_TOKENS(msg, "K", "4", "2");
}

static void dense_lse_transposed(void)
{
    problem pb = problem_dense();
    pb.t[D_LSE].shape[1] = SQ0; /* [B, Sq, Hq] instead of [B, Hq, Sq] */
    pb.t[D_LSE].shape[2] = HQ0;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "LSE [B, Sq, Hq]");
    SUPPORT_ASSERT_TOKENS(msg, "LSE", "6", "3");
}

static void dense_lse_wrong_batch(void)
{
    problem pb = problem_dense();
    pb.t[D_LSE].shape[0] = 5;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "LSE B 5");
    SUPPORT_ASSERT_TOKENS(msg, "LSE", "5", "2");
}

/* ------------------------------------------------------------------ dtypes */

static void dense_do_dtype_f16(void)
{
    problem pb = problem_dense();
    pb.t[D_DO].dtype = FCL_F16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "dO f16");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "f16", "f32");
}

static void dense_dq_dtype_bf16(void)
{
    problem pb = problem_dense();
    pb.t[D_DQ].dtype = FCL_BF16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "dQ bf16");
    SUPPORT_ASSERT_TOKENS(msg, "dQ", "bf16", "f32");
}

static void dense_dk_dtype_f16(void)
{
    problem pb = problem_dense();
    pb.t[D_DK].dtype = FCL_F16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "dK f16");
    SUPPORT_ASSERT_TOKENS(msg, "dK", "f16", "f32");
}

static void dense_dv_dtype_i32(void)
{
    problem pb = problem_dense();
    pb.t[D_DV].dtype = FCL_I32;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "dV i32");
    SUPPORT_ASSERT_TOKENS(msg, "dV", "i32", "f32");
}

static void dense_f16_problem_with_f32_gradient(void)
{
    problem pb = problem_dense();
    const int ins[5] = {D_Q, D_K, D_V, D_O, D_DO};
    for (int i = 0; i < 5; i++)
        pb.t[ins[i]].dtype = FCL_F16;
    pb.t[D_DQ].dtype = FCL_F16;
    pb.t[D_DK].dtype = FCL_F16; /* dV stays f32 */
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "f16 problem, f32 dV");
    SUPPORT_ASSERT_TOKENS(msg, "dV", "f32", "f16");
}

static void dense_k_dtype_differs_from_q(void)
{
    problem pb = problem_dense();
    pb.t[D_K].dtype = FCL_F16;
    pb.t[D_DK].dtype = FCL_F16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "K f16");
    SUPPORT_ASSERT_TOKENS(msg, "K", "f16", "f32");
}

static void dense_lse_dtype_f16(void)
{
    problem pb = problem_dense();
    pb.t[D_LSE].dtype = FCL_F16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "LSE f16");
    SUPPORT_ASSERT_TOKENS(msg, "LSE", "f16");
}

static void dense_lse_dtype_i32(void)
{
    problem pb = problem_dense();
    pb.t[D_LSE].dtype = FCL_I32;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "LSE i32");
    SUPPORT_ASSERT_TOKENS(msg, "LSE", "i32");
}

static void dense_all_dtype(fcl_dtype dt, const char *tok)
{
    problem pb = problem_dense();
    const int all[8] = {D_Q, D_K, D_V, D_O, D_DO, D_DQ, D_DK, D_DV};
    for (int i = 0; i < 8; i++)
        pb.t[all[i]].dtype = dt;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, tok);
    SUPPORT_ASSERT_TOKENS(msg, "Q", tok);
}

static void dense_all_dtype_i8(void) { dense_all_dtype(FCL_I8, "i8"); }
static void dense_all_dtype_i32(void) { dense_all_dtype(FCL_I32, "i32"); }

/* ------------------------------------------------------------------ overlaps */

static void dense_alias_case(int grad, int with, const char *tok2)
{
    problem pb = problem_dense();
    fx f;
    fx_init(&f, &pb);
    call c;
    fx_call(&f, NULL, &c);
    c.t[grad] = c.t[with];
    cl_event ev = NULL;
    char what[64];
    snprintf(what, sizeof what, "%s passed as %s", slot_name[L_DENSE][with], slot_name[L_DENSE][grad]);
    fcl_status st = do_call(&c, &ev);
    const char *msg = expect_fail(L_DENSE, f.ctx, st, ev, FCL_ERR_INVALID_ARGUMENT, what);
    cr_assert(has_substr(msg, "overlap"), "message \"%s\" does not say overlap", msg);
    SUPPORT_ASSERT_TOKENS(msg, slot_name[L_DENSE][grad]);
    if (tok2)
        SUPPORT_ASSERT_TOKENS(msg, tok2);
    fx_assert_untouched(&f);
    fx_fini(&f);
}

static void dense_dq_aliases_q(void) { dense_alias_case(D_DQ, D_Q, NULL); }
static void dense_dq_aliases_do(void) { dense_alias_case(D_DQ, D_DO, NULL); }
static void dense_dk_aliases_k(void) { dense_alias_case(D_DK, D_K, NULL); }
static void dense_dv_aliases_v(void) { dense_alias_case(D_DV, D_V, NULL); }
static void dense_dk_and_dv_same_tensor(void) { dense_alias_case(D_DV, D_DK, "dK"); }

/* `a` at offset 0 of one buffer, `b` starting on a's last element. */
static const char *dense_overlap_case(int a, int b, fcl_status want)
{
    problem pb = problem_dense();
    place(&pb, a, 0);
    place(&pb, b, spec_extent(&pb.t[a]) - 1);
    char what[64];
    snprintf(what, sizeof what, "%s overlapping %s by one element", slot_name[L_DENSE][b],
             slot_name[L_DENSE][a]);
    const char *msg = run_case(&pb, want, what);
    cr_assert(has_substr(msg, "overlap"), "message \"%s\" does not say overlap", msg);
    return msg;
}

static void dense_dq_overlaps_dk(void)
{
    const char *msg = dense_overlap_case(D_DQ, D_DK, FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(msg, "dQ", "dK");
}

static void dense_dk_overlaps_dv(void)
{
    const char *msg = dense_overlap_case(D_DK, D_DV, FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(msg, "dK", "dV");
}

static void dense_dk_overlaps_do(void)
{
    const char *msg = dense_overlap_case(D_DO, D_DK, FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(msg, "dK");
}

static void dense_dq_overlaps_o(void)
{
    const char *msg = dense_overlap_case(D_O, D_DQ, FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(msg, "dQ");
}

static void dense_dq_overlaps_v(void)
{
    const char *msg = dense_overlap_case(D_V, D_DQ, FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(msg, "dQ");
}

static void dense_dv_overlaps_lse(void)
{
    const char *msg = dense_overlap_case(D_LSE, D_DV, FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(msg, "dV");
}

static void dense_lse_inside_dk(void)
{
    const char *msg = dense_overlap_case(D_DK, D_LSE, FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(msg, "dK");
}

/* The header: "dQ, dK, dV must not overlap each other or any input"; the key mask and the
 * ALiBi slopes are inputs the kernels read while the gradients are written. */
static void dense_dv_overlaps_key_mask(void)
{
    problem pb = problem_dense();
    set_spec(&pb.t[S_MASK], R_IN, FCL_F32, 2, B0, SK0, 0, 0);
    place(&pb, D_DV, 0);
    place(&pb, S_MASK, 100); /* inside dV's 480 elements */
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "key_mask inside dV");
    SUPPORT_ASSERT_TOKENS(msg, "dV");
}

static void dense_dq_overlaps_alibi_slopes(void)
{
    problem pb = problem_dense();
    set_spec(&pb.t[S_ALIBI], R_IN, FCL_F32, 1, HQ0, 0, 0, 0);
    place(&pb, D_DQ, 0);
    place(&pb, S_ALIBI, 17); /* inside dQ's 576 elements */
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "alibi_slopes inside dQ");
    SUPPORT_ASSERT_TOKENS(msg, "dQ");
}

/* ------------------------------------------------------------------ params */

static void dense_window_left_below_minus_one(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_left = -2;
    const char *msg = run_params_case(L_DENSE, p, "window_left -2");
    SUPPORT_ASSERT_TOKENS(msg, "window_left", "-2");
}

static void dense_window_right_below_minus_one(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_right = -3;
    const char *msg = run_params_case(L_DENSE, p, "window_right -3");
    SUPPORT_ASSERT_TOKENS(msg, "window_right", "-3");
}

static void dense_softcap_negative(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.softcap = -1.5f;
    const char *msg = run_params_case(L_DENSE, p, "softcap -1.5");
    SUPPORT_ASSERT_TOKENS(msg, "softcap", "-1.5");
}

static void dense_softcap_inf(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.softcap = INFINITY;
    const char *msg = run_params_case(L_DENSE, p, "softcap inf");
    SUPPORT_ASSERT_TOKENS(msg, "softcap", "inf");
}

static void dense_softcap_nan(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.softcap = NAN;
    const char *msg = run_params_case(L_DENSE, p, "softcap NaN");
    SUPPORT_ASSERT_TOKENS(msg, "softcap", "nan");
}

static void dense_scale_nan(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.scale = NAN;
    const char *msg = run_params_case(L_DENSE, p, "scale NaN");
    SUPPORT_ASSERT_TOKENS(msg, "scale", "nan");
}

static void dense_scale_inf(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.scale = -INFINITY;
    const char *msg = run_params_case(L_DENSE, p, "scale -inf");
    SUPPORT_ASSERT_TOKENS(msg, "scale", "inf");
}

static void dense_key_mask_wrong_length(void)
{
    const char *msg = run_side_case(L_DENSE, 1, FCL_F32, 2, B0, 19, 0, FCL_ERR_SHAPE, "key_mask [B, 19]");
    SUPPORT_ASSERT_TOKENS(msg, "19", "5");
}

static void dense_key_mask_wrong_batch(void)
{
    const char *msg = run_side_case(L_DENSE, 1, FCL_F32, 2, 7, SK0, 0, FCL_ERR_SHAPE, "key_mask [7, Sk]");
    SUPPORT_ASSERT_TOKENS(msg, "7", "5");
}

static void dense_key_mask_rank_3(void)
{
    const char *msg = run_side_case(L_DENSE, 1, FCL_F32, 3, B0, 1, SK0, FCL_ERR_SHAPE, "key_mask [B, 1, Sk]");
    SUPPORT_ASSERT_TOKENS(msg, "5");
}

static void dense_key_mask_dtype_f16(void)
{
    const char *msg = run_side_case(L_DENSE, 1, FCL_F16, 2, B0, SK0, 0, FCL_ERR_DTYPE, "key_mask f16");
    SUPPORT_ASSERT_TOKENS(msg, "f16");
}

static void dense_key_mask_dtype_i32(void)
{
    const char *msg = run_side_case(L_DENSE, 1, FCL_I32, 1, SK0, 0, 0, FCL_ERR_DTYPE, "key_mask i32");
    SUPPORT_ASSERT_TOKENS(msg, "i32");
}

static void dense_alibi_wrong_length(void)
{
    const char *msg = run_side_case(L_DENSE, 0, FCL_F32, 1, 9, 0, 0, FCL_ERR_SHAPE, "alibi_slopes [9]");
    SUPPORT_ASSERT_TOKENS(msg, "9", "6");
}

static void dense_alibi_kv_heads_instead_of_q_heads(void)
{
    const char *msg = run_side_case(L_DENSE, 0, FCL_F32, 2, B0, HKV0, 0, FCL_ERR_SHAPE, "alibi_slopes [B, Hkv]");
    SUPPORT_ASSERT_TOKENS(msg, "3", "6");
}

static void dense_alibi_wrong_batch(void)
{
    const char *msg = run_side_case(L_DENSE, 0, FCL_F32, 2, 7, HQ0, 0, FCL_ERR_SHAPE, "alibi_slopes [7, Hq]");
    SUPPORT_ASSERT_TOKENS(msg, "7", "6");
}

static void dense_alibi_dtype_bf16(void)
{
    const char *msg = run_side_case(L_DENSE, 0, FCL_BF16, 1, HQ0, 0, 0, FCL_ERR_DTYPE, "alibi_slopes bf16");
    SUPPORT_ASSERT_TOKENS(msg, "bf16");
}

/* ================================================================== varlen */

static void varlen_control_valid_call_succeeds_and_writes_gradients(void)
{
    problem pb = problem_varlen();
    run_control(&pb, NULL, 1);
}

static void varlen_control_valid_optional_inputs_accepted(void)
{
    /* NULL LSE; a [total_k] key mask, [B, Hq] ALiBi, causal and softcap */
    problem pb = problem_varlen();
    pb.t[V_LSE].role = 0;
    run_control(&pb, NULL, 0);
    pb = problem_varlen();
    set_spec(&pb.t[S_MASK], R_IN, FCL_F32, 1, TK0, 0, 0, 0);
    set_spec(&pb.t[S_ALIBI], R_IN, FCL_F32, 2, VB, VHQ, 0, 0);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.causal = 1;
    p.softcap = 20.0f;
    run_control(&pb, &p, 1);
}

static void varlen_valid_call_after_failed_one_clears_error(void)
{
    run_error_cleared(L_VARLEN, V_CUK);
}

static void varlen_null_context(void) { run_null_ctx_case(L_VARLEN); }
static void varlen_null_params(void) { run_null_params_case(L_VARLEN); }
static void varlen_null_q(void) { run_null_case(L_VARLEN, V_Q); }
static void varlen_null_k(void) { run_null_case(L_VARLEN, V_K); }
static void varlen_null_v(void) { run_null_case(L_VARLEN, V_V); }
static void varlen_null_o(void) { run_null_case(L_VARLEN, V_O); }
static void varlen_null_do(void) { run_null_case(L_VARLEN, V_DO); }
static void varlen_null_cu_seqlens_q(void) { run_null_case(L_VARLEN, V_CUQ); }
static void varlen_null_cu_seqlens_k(void) { run_null_case(L_VARLEN, V_CUK); }
static void varlen_null_dq(void) { run_null_case(L_VARLEN, V_DQ); }
static void varlen_null_dk(void) { run_null_case(L_VARLEN, V_DK); }
static void varlen_null_dv(void) { run_null_case(L_VARLEN, V_DV); }

static void varlen_foreign(int slot)
{
    problem pb = problem_varlen();
    run_foreign_case(L_VARLEN, slot, &pb.t[slot]);
}

static void varlen_cu_seqlens_q_of_another_context(void) { varlen_foreign(V_CUQ); }
static void varlen_do_of_another_context(void) { varlen_foreign(V_DO); }
static void varlen_dk_of_another_context(void) { varlen_foreign(V_DK); }

/* ------------------------------------------------------------------ prefix sums */

static void varlen_cu_seqlens_q_dtype_f32(void)
{
    problem pb = problem_varlen();
    pb.t[V_CUQ].dtype = FCL_F32;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "cu_seqlens_q f32");
    SUPPORT_ASSERT_TOKENS(msg, "cu_seqlens_q", "f32", "i32");
}

static void varlen_cu_seqlens_k_dtype_i8(void)
{
    problem pb = problem_varlen();
    pb.t[V_CUK].dtype = FCL_I8;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "cu_seqlens_k i8");
    SUPPORT_ASSERT_TOKENS(msg, "cu_seqlens_k", "i8", "i32");
}

static void varlen_cu_seqlens_q_rank_2(void)
{
    problem pb = problem_varlen();
    set_spec(&pb.t[V_CUQ], R_INDEX, FCL_I32, 2, 1, VB + 1, 0, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "cu_seqlens_q [1, B + 1]");
    SUPPORT_ASSERT_TOKENS(msg, "cu_seqlens_q", "2", "1");
}

static void varlen_cu_seqlens_lengths_differ(void)
{
    problem pb = problem_varlen();
    pb.t[V_CUK].shape[0] = 4;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "cu_seqlens_q 3 entries, cu_seqlens_k 4");
    SUPPORT_ASSERT_TOKENS(msg, "cu_seqlens_q", "cu_seqlens_k", "3", "4");
}

static void varlen_cu_seqlens_one_entry(void)
{
    problem pb = problem_varlen();
    pb.t[V_CUQ].shape[0] = 1;
    pb.t[V_CUK].shape[0] = 1;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "cu_seqlens of 1 entry (B = 0)");
    SUPPORT_ASSERT_TOKENS(msg, "cu_seqlens", "1");
}

static void varlen_max_seqlen_q_negative(void)
{
    problem pb = problem_varlen();
    pb.max_q = -1;
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "max_seqlen_q -1");
    SUPPORT_ASSERT_TOKENS(msg, "max_seqlen_q", "-1");
}

static void varlen_max_seqlen_k_negative(void)
{
    problem pb = problem_varlen();
    pb.max_k = -7;
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "max_seqlen_k -7");
    SUPPORT_ASSERT_TOKENS(msg, "max_seqlen_k", "-7");
}

/* ------------------------------------------------------------------ gradient shapes and dtypes */

static void varlen_dq_rows_differ_from_total_q(void)
{
    problem pb = problem_varlen();
    pb.t[V_DQ].shape[0] = 8;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dQ total_q 8");
    SUPPORT_ASSERT_TOKENS(msg, "dQ", "8", "7");
}

static void varlen_dq_rank_4(void)
{
    problem pb = problem_varlen();
    set_spec(&pb.t[V_DQ], R_OUT, FCL_F32, 4, 1, TQ0, VHQ, D0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dQ [1, total_q, Hq, D]");
    SUPPORT_ASSERT_TOKENS(msg, "dQ", "4", "3");
}

static void varlen_dk_rows_total_q_instead_of_total_k(void)
{
    problem pb = problem_varlen();
    pb.t[V_DK].shape[0] = TQ0;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dK [total_q, Hkv, D]");
    SUPPORT_ASSERT_TOKENS(msg, "dK", "7", "9");
}

static void varlen_dv_heads_hq_instead_of_hkv(void)
{
    problem pb = problem_varlen();
    pb.t[V_DV].shape[1] = VHQ;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dV [total_k, Hq, D]");
    SUPPORT_ASSERT_TOKENS(msg, "dV", "4", "2");
}

static void varlen_do_head_dim_differs_from_o(void)
{
    problem pb = problem_varlen();
    pb.t[V_DO].shape[2] = 20;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dO D 20");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "20", "16");
}

static void varlen_dq_dtype_f16(void)
{
    problem pb = problem_varlen();
    pb.t[V_DQ].dtype = FCL_F16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "dQ f16");
    SUPPORT_ASSERT_TOKENS(msg, "dQ", "f16", "f32");
}

static void varlen_do_dtype_bf16(void)
{
    problem pb = problem_varlen();
    pb.t[V_DO].dtype = FCL_BF16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "dO bf16");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "bf16", "f32");
}

static void varlen_q_dtype_i8(void)
{
    problem pb = problem_varlen();
    const int all[8] = {V_Q, V_K, V_V, V_O, V_DO, V_DQ, V_DK, V_DV};
    for (int i = 0; i < 8; i++)
        pb.t[all[i]].dtype = FCL_I8;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "all i8");
    SUPPORT_ASSERT_TOKENS(msg, "Q", "i8");
}

/* ------------------------------------------------------------------ LSE, heads */

static void varlen_lse_transposed(void)
{
    problem pb = problem_varlen();
    pb.t[V_LSE].shape[0] = TQ0; /* [total_q, Hq] instead of [Hq, total_q] */
    pb.t[V_LSE].shape[1] = VHQ;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "LSE [total_q, Hq]");
    SUPPORT_ASSERT_TOKENS(msg, "LSE", "7", "4");
}

static void varlen_lse_dense_shape(void)
{
    problem pb = problem_varlen();
    set_spec(&pb.t[V_LSE], R_IN, FCL_F32, 3, VB, VHQ, VMAXQ, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "LSE [B, Hq, max_seqlen_q]");
    SUPPORT_ASSERT_TOKENS(msg, "LSE", "3", "2");
}

static void varlen_lse_dtype_f16(void)
{
    problem pb = problem_varlen();
    pb.t[V_LSE].dtype = FCL_F16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "LSE f16");
    SUPPORT_ASSERT_TOKENS(msg, "LSE", "f16");
}

static void varlen_head_dim_mismatch_q_k(void)
{
    problem pb = problem_varlen();
    const int qs[4] = {V_Q, V_O, V_DO, V_DQ}, ks[4] = {V_K, V_V, V_DK, V_DV};
    for (int i = 0; i < 4; i++) {
        pb.t[qs[i]].shape[2] = 48;
        pb.t[ks[i]].shape[2] = 32;
    }
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "Q D 48, K D 32");
    SUPPORT_ASSERT_TOKENS(msg, "48", "32");
}

static void varlen_q_heads_not_multiple_of_kv_heads(void)
{
    problem pb = problem_varlen();
    const int ks[4] = {V_K, V_V, V_DK, V_DV};
    for (int i = 0; i < 4; i++)
        pb.t[ks[i]].shape[1] = 3;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "Hq 4, Hkv 3");
    SUPPORT_ASSERT_TOKENS(msg, "4", "3");
}

static void varlen_head_dim_above_limit(void)
{
    problem pb = problem_varlen();
    const int all[8] = {V_Q, V_K, V_V, V_O, V_DO, V_DQ, V_DK, V_DV};
    for (int i = 0; i < 8; i++)
        pb.t[all[i]].shape[2] = 300;
    const char *msg = run_case(&pb, FCL_ERR_UNSUPPORTED, "D 300");
    SUPPORT_ASSERT_TOKENS(msg, "300", "256");
}

/* ------------------------------------------------------------------ overlaps */

static void varlen_dq_aliases_q(void)
{
    problem pb = problem_varlen();
    fx f;
    fx_init(&f, &pb);
    call c;
    fx_call(&f, NULL, &c);
    c.t[V_DQ] = c.t[V_Q];
    cl_event ev = NULL;
    fcl_status st = do_call(&c, &ev);
    const char *msg = expect_fail(L_VARLEN, f.ctx, st, ev, FCL_ERR_INVALID_ARGUMENT, "Q passed as dQ");
    SUPPORT_ASSERT_TOKENS(msg, "dQ");
    fx_assert_untouched(&f);
    fx_fini(&f);
}

static void varlen_dk_overlaps_dv(void)
{
    problem pb = problem_varlen();
    place(&pb, V_DK, 0);
    place(&pb, V_DV, spec_numel(&pb.t[V_DK]) / 2);
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "dV over the second half of dK");
    SUPPORT_ASSERT_TOKENS(msg, "dK", "dV");
}

static void varlen_dq_overlaps_lse(void)
{
    problem pb = problem_varlen();
    place(&pb, V_LSE, 0);
    place(&pb, V_DQ, spec_numel(&pb.t[V_LSE]) - 1);
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "dQ overlapping LSE");
    SUPPORT_ASSERT_TOKENS(msg, "dQ");
}

/* cu_seqlens are inputs too: an I32 view of dQ's buffer inside dQ's range. */
static void varlen_dq_overlaps_cu_seqlens_q(void)
{
    problem pb = problem_varlen();
    place(&pb, V_DQ, 0);
    place(&pb, V_CUQ, 40); /* inside dQ's 448 elements */
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "cu_seqlens_q inside dQ");
    SUPPORT_ASSERT_TOKENS(msg, "dQ");
}

static void varlen_dk_overlaps_cu_seqlens_k(void)
{
    problem pb = problem_varlen();
    place(&pb, V_CUK, 0);
    place(&pb, V_DK, 2); /* starts on cu_seqlens_k's last entry */
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "dK starting on cu_seqlens_k[2]");
    SUPPORT_ASSERT_TOKENS(msg, "dK");
}

/* ------------------------------------------------------------------ params */

static void varlen_key_mask_per_batch_rejected(void)
{
    /* varlen masks are one value per key row: [total_k] only */
    const char *msg = run_side_case(L_VARLEN, 1, FCL_F32, 2, VB, TK0, 0, FCL_ERR_SHAPE, "key_mask [B, total_k]");
    SUPPORT_ASSERT_TOKENS(msg, "9");
}

static void varlen_key_mask_max_seqlen_k_long(void)
{
    const char *msg = run_side_case(L_VARLEN, 1, FCL_F32, 1, VMAXK, 0, 0, FCL_ERR_SHAPE, "key_mask [max_seqlen_k]");
    SUPPORT_ASSERT_TOKENS(msg, "5", "9");
}

static void varlen_alibi_wrong_batch(void)
{
    const char *msg = run_side_case(L_VARLEN, 0, FCL_F32, 2, VB + 1, VHQ, 0, FCL_ERR_SHAPE, "alibi_slopes [B + 1, Hq]");
    SUPPORT_ASSERT_TOKENS(msg, "3", "4");
}

static void varlen_window_left_below_minus_one(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_left = -5;
    const char *msg = run_params_case(L_VARLEN, p, "window_left -5");
    SUPPORT_ASSERT_TOKENS(msg, "window_left", "-5");
}

static void varlen_softcap_negative(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.softcap = -0.25f;
    const char *msg = run_params_case(L_VARLEN, p, "softcap -0.25");
    SUPPORT_ASSERT_TOKENS(msg, "softcap", "-0.25");
}

/* ================================================================== packed */

static void packed_control_valid_call_succeeds_and_writes_gradients(void)
{
    problem pb = problem_packed();
    run_control(&pb, NULL, 1);
}

static void packed_control_valid_optional_inputs_accepted(void)
{
    /* NULL LSE; an [L] key mask, [H] ALiBi, windows; a dQKV in [L, H, 3, D] storage (permuted
     * strides, slices interleaved but disjoint) */
    problem pb = problem_packed();
    pb.t[P_LSE].role = 0;
    run_control(&pb, NULL, 0);
    pb = problem_packed();
    set_spec(&pb.t[S_MASK], R_IN, FCL_F32, 1, PL, 0, 0, 0);
    set_spec(&pb.t[S_ALIBI], R_IN, FCL_F32, 1, PH, 0, 0, 0);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_left = 1;
    p.window_right = 1;
    run_control(&pb, &p, 1);
    pb = problem_packed();
    pb.t[P_DQKV].has_strides = 1;
    const int64_t st[4] = {PH * 3 * D0, D0, 3 * D0, 1};
    memcpy(pb.t[P_DQKV].strides, st, sizeof st);
    place(&pb, P_DQKV, 0);
    run_control(&pb, NULL, 1);
}

static void packed_valid_call_after_failed_one_clears_error(void)
{
    run_error_cleared(L_PACKED, P_DQKV);
}

static void packed_null_context(void) { run_null_ctx_case(L_PACKED); }
static void packed_null_params(void) { run_null_params_case(L_PACKED); }
static void packed_null_qkv(void) { run_null_case(L_PACKED, P_QKV); }
static void packed_null_o(void) { run_null_case(L_PACKED, P_O); }
static void packed_null_do(void) { run_null_case(L_PACKED, P_DO); }
static void packed_null_seq_bounds(void) { run_null_case(L_PACKED, P_BOUNDS); }
static void packed_null_dqkv(void) { run_null_case(L_PACKED, P_DQKV); }

static void packed_foreign(int slot)
{
    problem pb = problem_packed();
    run_foreign_case(L_PACKED, slot, &pb.t[slot]);
}

static void packed_seq_bounds_of_another_context(void) { packed_foreign(P_BOUNDS); }
static void packed_do_of_another_context(void) { packed_foreign(P_DO); }
static void packed_dqkv_of_another_context(void) { packed_foreign(P_DQKV); }

/* ------------------------------------------------------------------ QKV, dQKV */

static void packed_qkv_dim1_is_2(void)
{
    problem pb = problem_packed();
    pb.t[P_QKV].shape[1] = 2;
    pb.t[P_DQKV].shape[1] = 2;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "QKV [L, 2, H, D]");
    SUPPORT_ASSERT_TOKENS(msg, "QKV", "2", "3");
}

static void packed_qkv_rank_3(void)
{
    problem pb = problem_packed();
    set_spec(&pb.t[P_QKV], R_IN, FCL_F32, 3, PL, 3 * PH, D0, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "QKV [L, 3H, D]");
    SUPPORT_ASSERT_TOKENS(msg, "QKV", "3", "4");
}

static void packed_dqkv_dim1_is_4(void)
{
    problem pb = problem_packed();
    pb.t[P_DQKV].shape[1] = 4;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dQKV [L, 4, H, D]");
    SUPPORT_ASSERT_TOKENS(msg, "dQKV", "4", "3");
}

static void packed_dqkv_rows_differ(void)
{
    problem pb = problem_packed();
    pb.t[P_DQKV].shape[0] = 10;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dQKV L 10");
    SUPPORT_ASSERT_TOKENS(msg, "dQKV", "10", "6");
}

static void packed_dqkv_rank_3(void)
{
    problem pb = problem_packed();
    set_spec(&pb.t[P_DQKV], R_OUT, FCL_F32, 3, PL, 3 * PH, D0, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dQKV [L, 3H, D]");
    SUPPORT_ASSERT_TOKENS(msg, "dQKV", "3", "4");
}

static void packed_dqkv_dtype_f16(void)
{
    problem pb = problem_packed();
    pb.t[P_DQKV].dtype = FCL_F16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "dQKV f16");
    SUPPORT_ASSERT_TOKENS(msg, "dQKV", "f16", "f32");
}

static void packed_dqkv_dtype_i32(void)
{
    problem pb = problem_packed();
    pb.t[P_DQKV].dtype = FCL_I32;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "dQKV i32");
    SUPPORT_ASSERT_TOKENS(msg, "dQKV", "i32", "f32");
}

static void packed_qkv_dtype_i8(void)
{
    problem pb = problem_packed();
    const int all[4] = {P_QKV, P_O, P_DO, P_DQKV};
    for (int i = 0; i < 4; i++)
        pb.t[all[i]].dtype = FCL_I8;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "all i8");
    SUPPORT_ASSERT_TOKENS(msg, "Q", "i8");
}

static void packed_head_dim_above_limit(void)
{
    problem pb = problem_packed();
    const int all[4] = {P_QKV, P_O, P_DO, P_DQKV};
    for (int i = 0; i < 4; i++)
        pb.t[all[i]].shape[pb.t[all[i]].ndim - 1] = 512;
    const char *msg = run_case(&pb, FCL_ERR_UNSUPPORTED, "D 512");
    SUPPORT_ASSERT_TOKENS(msg, "512", "256");
}

/* ------------------------------------------------------------------ O, dO, LSE */

static void packed_do_head_dim_differs_from_o(void)
{
    problem pb = problem_packed();
    pb.t[P_DO].shape[2] = 8;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dO D 8");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "8", "16");
}

static void packed_do_rank_4(void)
{
    problem pb = problem_packed();
    set_spec(&pb.t[P_DO], R_IN, FCL_F32, 4, 1, PL, PH, D0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "dO [1, L, H, D]");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "4", "3");
}

static void packed_do_dtype_f16(void)
{
    problem pb = problem_packed();
    pb.t[P_DO].dtype = FCL_F16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "dO f16");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "f16", "f32");
}

static void packed_o_rows_differ(void)
{
    problem pb = problem_packed();
    pb.t[P_O].shape[0] = 5;
    pb.t[P_DO].shape[0] = 5;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "O L 5");
    SUPPORT_ASSERT_TOKENS(msg, "O", "5", "6");
}

static void packed_lse_transposed(void)
{
    problem pb = problem_packed();
    pb.t[P_LSE].shape[0] = PL;
    pb.t[P_LSE].shape[1] = PH;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "LSE [L, H]");
    SUPPORT_ASSERT_TOKENS(msg, "LSE", "6", "2");
}

static void packed_lse_dtype_bf16(void)
{
    problem pb = problem_packed();
    pb.t[P_LSE].dtype = FCL_BF16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "LSE bf16");
    SUPPORT_ASSERT_TOKENS(msg, "LSE", "bf16");
}

/* ------------------------------------------------------------------ seq_bounds */

static void packed_seq_bounds_three_columns(void)
{
    problem pb = problem_packed();
    pb.t[P_BOUNDS].shape[1] = 3;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "seq_bounds [L, 3]");
    SUPPORT_ASSERT_TOKENS(msg, "seq_bounds", "3", "2");
}

static void packed_seq_bounds_rows_differ(void)
{
    problem pb = problem_packed();
    pb.t[P_BOUNDS].shape[0] = 7;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "seq_bounds [7, 2]");
    SUPPORT_ASSERT_TOKENS(msg, "seq_bounds", "7", "6");
}

static void packed_seq_bounds_rank_1(void)
{
    problem pb = problem_packed();
    set_spec(&pb.t[P_BOUNDS], R_INDEX, FCL_I32, 1, 2 * PL, 0, 0, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "seq_bounds [2L]");
    SUPPORT_ASSERT_TOKENS(msg, "seq_bounds", "1", "2");
}

static void packed_seq_bounds_dtype_f32(void)
{
    problem pb = problem_packed();
    pb.t[P_BOUNDS].dtype = FCL_F32;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "seq_bounds f32");
    SUPPORT_ASSERT_TOKENS(msg, "seq_bounds", "f32", "i32");
}

static void packed_seq_bounds_dtype_i8(void)
{
    problem pb = problem_packed();
    pb.t[P_BOUNDS].dtype = FCL_I8;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "seq_bounds i8");
    SUPPORT_ASSERT_TOKENS(msg, "seq_bounds", "i8", "i32");
}

/* ------------------------------------------------------------------ overlaps */

static void packed_alias_case(int with)
{
    problem pb = problem_packed();
    fx f;
    fx_init(&f, &pb);
    call c;
    fx_call(&f, NULL, &c);
    c.t[P_DQKV] = c.t[with];
    cl_event ev = NULL;
    fcl_status st = do_call(&c, &ev);
    const char *msg = expect_fail(L_PACKED, f.ctx, st, ev, FCL_ERR_INVALID_ARGUMENT, "QKV passed as dQKV");
    cr_assert(has_substr(msg, "overlap"), "message \"%s\" does not say overlap", msg);
    SUPPORT_ASSERT_TOKENS(msg, "dQKV");
    fx_assert_untouched(&f);
    fx_fini(&f);
}

static void packed_dqkv_aliases_qkv(void) { packed_alias_case(P_QKV); }

static const char *packed_overlap_case(int a, int b, const char *what)
{
    problem pb = problem_packed();
    place(&pb, a, 0);
    place(&pb, b, spec_extent(&pb.t[a]) - 1);
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, what);
    SUPPORT_ASSERT_TOKENS(msg, "dQKV");
    return msg;
}

static void packed_dqkv_overlaps_qkv(void) { packed_overlap_case(P_QKV, P_DQKV, "dQKV starting on QKV's last element"); }
static void packed_dqkv_overlaps_o(void) { packed_overlap_case(P_DQKV, P_O, "O starting on dQKV's last element"); }
static void packed_dqkv_overlaps_do(void) { packed_overlap_case(P_DO, P_DQKV, "dQKV starting on dO's last element"); }
static void packed_dqkv_overlaps_lse(void) { packed_overlap_case(P_DQKV, P_LSE, "LSE starting on dQKV's last element"); }

/* seq_bounds is an input the kernels read while dQKV is written: an I32 view inside dQKV. */
static void packed_dqkv_overlaps_seq_bounds(void)
{
    problem pb = problem_packed();
    place(&pb, P_DQKV, 0);
    place(&pb, P_BOUNDS, 64); /* inside dQKV's 576 elements */
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "seq_bounds inside dQKV");
    SUPPORT_ASSERT_TOKENS(msg, "dQKV");
}

/* A dQKV whose dim-1 stride is 0: its dQ, dK and dV slices are the same memory, which the
 * backward's "dQ, dK, dV must not overlap each other" rules out. */
static void packed_dqkv_slices_alias_each_other(void)
{
    problem pb = problem_packed();
    pb.t[P_DQKV].has_strides = 1;
    const int64_t st[4] = {PH * D0, 0, D0, 1};
    memcpy(pb.t[P_DQKV].strides, st, sizeof st);
    place(&pb, P_DQKV, 0);
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "dQKV with dim-1 stride 0");
    SUPPORT_ASSERT_TOKENS(msg, "dQKV");
}

/* ------------------------------------------------------------------ params */

static void packed_key_mask_per_batch_rejected(void)
{
    const char *msg = run_side_case(L_PACKED, 1, FCL_F32, 2, 1, PL, 0, FCL_ERR_SHAPE, "key_mask [1, L]");
    SUPPORT_ASSERT_TOKENS(msg, "6");
}

static void packed_alibi_per_batch_rejected(void)
{
    const char *msg = run_side_case(L_PACKED, 0, FCL_F32, 2, 2, PH, 0, FCL_ERR_SHAPE, "alibi_slopes [2, H]");
    SUPPORT_ASSERT_TOKENS(msg, "2");
}

static void packed_key_mask_dtype_i8(void)
{
    const char *msg = run_side_case(L_PACKED, 1, FCL_I8, 1, PL, 0, 0, FCL_ERR_DTYPE, "key_mask i8");
    SUPPORT_ASSERT_TOKENS(msg, "i8");
}

static void packed_window_right_below_minus_one(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_right = -9;
    const char *msg = run_params_case(L_PACKED, p, "window_right -9");
    SUPPORT_ASSERT_TOKENS(msg, "window_right", "-9");
}

static void packed_scale_nan(void)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.scale = NAN;
    const char *msg = run_params_case(L_PACKED, p, "scale NaN");
    SUPPORT_ASSERT_TOKENS(msg, "scale", "nan");
}

/* ================================================================== launch-grid limits */

/* The dense problem with every tensor resized. */
static problem problem_dense_dims(int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D)
{
    problem p = problem_dense();
    const int qs[4] = {D_Q, D_O, D_DO, D_DQ}, ks[4] = {D_K, D_V, D_DK, D_DV};
    for (int i = 0; i < 4; i++) {
        const int64_t q[4] = {B, Sq, Hq, D}, k[4] = {B, Sk, Hkv, D};
        memcpy(p.t[qs[i]].shape, q, sizeof q);
        memcpy(p.t[ks[i]].shape, k, sizeof k);
    }
    const int64_t l[3] = {B, Hq, Sq};
    memcpy(p.t[D_LSE].shape, l, sizeof l);
    return p;
}

static void dense_batch_above_limit(void)
{
    problem pb = problem_dense_dims(65536, 1, 1, 1, 1, 1);
    const char *msg = run_case(&pb, FCL_ERR_UNSUPPORTED, "B 65536");
    SUPPORT_ASSERT_TOKENS(msg, "65536");
}

static void dense_q_heads_above_limit(void)
{
    problem pb = problem_dense_dims(1, 1, 1, 65536, 1, 1);
    const char *msg = run_case(&pb, FCL_ERR_UNSUPPORTED, "Hq 65536");
    SUPPORT_ASSERT_TOKENS(msg, "65536", "65535");
}

static void varlen_q_heads_above_limit(void)
{
    problem pb = problem_varlen();
    const int qs[4] = {V_Q, V_O, V_DO, V_DQ};
    for (int i = 0; i < 4; i++)
        pb.t[qs[i]].shape[1] = 65536;
    pb.t[V_LSE].shape[0] = 65536;
    const char *msg = run_case(&pb, FCL_ERR_UNSUPPORTED, "Hq 65536");
    SUPPORT_ASSERT_TOKENS(msg, "65536", "65535");
}

/* 65536 sequences: beyond the launch grid like a dense B of 65536 (FCL_ERR_UNSUPPORTED there),
 * but the varlen check reports it as a shape error; either status is accepted here. */
static void varlen_batch_above_limit(void)
{
    problem pb = problem_varlen();
    pb.t[V_CUQ].shape[0] = 65537;
    pb.t[V_CUK].shape[0] = 65537;
    fx f;
    fx_init(&f, &pb);
    call c;
    fx_call(&f, NULL, &c);
    cl_event ev = NULL;
    fcl_status st = do_call(&c, &ev);
    const fcl_status want = st == FCL_ERR_SHAPE ? FCL_ERR_SHAPE : FCL_ERR_UNSUPPORTED;
    const char *msg = expect_fail(L_VARLEN, f.ctx, st, ev, want, "65536 sequences");
    SUPPORT_ASSERT_TOKENS(msg, "65537");
    fx_assert_untouched(&f);
    fx_fini(&f);
}

static void packed_heads_above_limit(void)
{
    problem pb = problem_packed();
    pb.t[P_QKV].shape[2] = 65536;
    pb.t[P_DQKV].shape[2] = 65536;
    pb.t[P_O].shape[1] = 65536;
    pb.t[P_DO].shape[1] = 65536;
    pb.t[P_LSE].shape[0] = 65536;
    const char *msg = run_case(&pb, FCL_ERR_UNSUPPORTED, "H 65536");
    SUPPORT_ASSERT_TOKENS(msg, "65536", "65535");
}

/* ================================================================== O NULL (recomputed)
 * O may be NULL when LSE is NULL too: both are recomputed and dO alone carries O's shape and
 * dtype, so a wrong dO must be reported as dO's fault. */

static const int slot_O[3] = {D_O, V_O, P_O}, slot_dO[3] = {D_DO, V_DO, P_DO}, slot_LSE[3] = {D_LSE, V_LSE, P_LSE};

static problem problem_recompute(int layout)
{
    problem pb = problem_of(layout);
    pb.t[slot_O[layout]].role = 0;
    pb.t[slot_LSE[layout]].role = 0;
    return pb;
}

static void recompute_control(int layout)
{
    problem pb = problem_recompute(layout);
    run_control(&pb, NULL, 0);
}

static void recompute_do_head_dim(int layout)
{
    problem pb = problem_recompute(layout);
    tspec *d = &pb.t[slot_dO[layout]];
    d->shape[d->ndim - 1] = 24;
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "O NULL, dO D 24");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "24", "16");
}

static void recompute_do_dtype(int layout)
{
    problem pb = problem_recompute(layout);
    pb.t[slot_dO[layout]].dtype = FCL_F16;
    const char *msg = run_case(&pb, FCL_ERR_DTYPE, "O NULL, dO f16");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "f16", "f32");
}

static void recompute_do_rank(int layout)
{
    problem pb = problem_recompute(layout);
    tspec *d = &pb.t[slot_dO[layout]];
    set_spec(d, R_IN, FCL_F32, 2, d->shape[0], spec_numel(d) / d->shape[0], 0, 0);
    const char *msg = run_case(&pb, FCL_ERR_SHAPE, "O NULL, dO rank 2");
    SUPPORT_ASSERT_TOKENS(msg, "dO", "2");
}

static void recompute_do_foreign(int layout)
{
    problem pb = problem_recompute(layout);
    run_foreign_case_pb(&pb, slot_dO[layout], &pb.t[slot_dO[layout]]);
}

static void recompute_do_null(int layout)
{
    problem pb = problem_recompute(layout);
    pb.t[slot_dO[layout]].role = 0;
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "O, LSE and dO NULL");
    SUPPORT_ASSERT_TOKENS(msg, "dO");
}

static void recompute_o_null_lse_given(int layout)
{
    problem pb = problem_of(layout);
    pb.t[slot_O[layout]].role = 0;
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "O NULL, LSE given");
    SUPPORT_ASSERT_TOKENS(msg, "O", "LSE");
}

static void dense_recompute_dq_aliases_do(void)
{
    problem pb = problem_recompute(L_DENSE);
    fx f;
    fx_init(&f, &pb);
    call c;
    fx_call(&f, NULL, &c);
    c.t[D_DQ] = c.t[D_DO];
    cl_event ev = NULL;
    fcl_status st = do_call(&c, &ev);
    const char *msg = expect_fail(L_DENSE, f.ctx, st, ev, FCL_ERR_INVALID_ARGUMENT, "O NULL, dO passed as dQ");
    SUPPORT_ASSERT_TOKENS(msg, "dQ");
    fx_assert_untouched(&f);
    fx_fini(&f);
}

static void packed_recompute_dqkv_overlaps_do(void)
{
    problem pb = problem_recompute(L_PACKED);
    place(&pb, P_DO, 0);
    place(&pb, P_DQKV, spec_numel(&pb.t[P_DO]) - 1);
    const char *msg = run_case(&pb, FCL_ERR_INVALID_ARGUMENT, "O NULL, dQKV starting on dO's last element");
    SUPPORT_ASSERT_TOKENS(msg, "dQKV");
}

#define RECOMPUTE_CASES(lay, L)                                                     \
    static void lay##_recompute_control(void) { recompute_control(L); }              \
    static void lay##_recompute_do_head_dim(void) { recompute_do_head_dim(L); }      \
    static void lay##_recompute_do_dtype(void) { recompute_do_dtype(L); }            \
    static void lay##_recompute_do_rank(void) { recompute_do_rank(L); }              \
    static void lay##_recompute_do_foreign(void) { recompute_do_foreign(L); }        \
    static void lay##_recompute_do_null(void) { recompute_do_null(L); }              \
    static void lay##_recompute_o_null_lse_given(void) { recompute_o_null_lse_given(L); }

RECOMPUTE_CASES(dense, L_DENSE)
RECOMPUTE_CASES(varlen, L_VARLEN)
RECOMPUTE_CASES(packed, L_PACKED)

/* ================================================================== the tests
 * Cases are grouped so that one process (one context) runs many: context creation dominates
 * the run time on some devices. A case names itself in its assertion messages; the cases the
 * library currently gets wrong run alone, so they do not hide the others. */

Test(backward_errors_dense, controls)
{
    RUN(dense_control_valid_call_succeeds_and_writes_gradients);
    RUN(dense_control_valid_optional_inputs_accepted);
    RUN(dense_control_gradients_next_to_inputs_in_one_buffer);
    RUN(dense_valid_call_after_failed_one_clears_error);
}

Test(backward_errors_dense, null_arguments)
{
    RUN(dense_null_context);
    RUN(dense_null_params);
    RUN(dense_null_q);
    RUN(dense_null_k);
    RUN(dense_null_v);
    RUN(dense_null_o);
    RUN(dense_null_do);
    RUN(dense_null_dq);
    RUN(dense_null_dk);
    RUN(dense_null_dv);
}

Test(backward_errors_dense, tensors_of_another_context)
{
    RUN(dense_q_of_another_context);
    RUN(dense_k_of_another_context);
    RUN(dense_o_of_another_context);
    RUN(dense_do_of_another_context);
    RUN(dense_lse_of_another_context);
    RUN(dense_dq_of_another_context);
    RUN(dense_dk_of_another_context);
    RUN(dense_dv_of_another_context);
    RUN(dense_key_mask_of_another_context);
    RUN(dense_alibi_of_another_context);
}

Test(backward_errors_dense, ranks)
{
    RUN(dense_q_rank_3);
    RUN(dense_do_rank_3);
    RUN(dense_dq_rank_3);
    RUN(dense_dk_rank_2);
    RUN(dense_dv_rank_1);
    RUN(dense_lse_rank_2);
}

Test(backward_errors_dense, gradient_shapes)
{
    RUN(dense_do_seqlen_differs_from_o);
    RUN(dense_do_head_dim_differs_from_o);
    RUN(dense_do_transposed_heads_and_seq);
    RUN(dense_dq_heads_differ_from_q);
    RUN(dense_dq_batch_differs_from_q);
    RUN(dense_dk_seqlen_differs_from_k);
    RUN(dense_dk_shaped_like_q);
    RUN(dense_dv_head_dim_differs_from_v);
    RUN(dense_dv_kv_heads_differ_from_v);
}

Test(backward_errors_dense, forward_problem_shapes)
{
    RUN(dense_head_dim_mismatch_q_k);
    RUN(dense_head_dim_mismatch_k_v);
    RUN(dense_q_heads_not_multiple_of_kv_heads);
    RUN(dense_head_dim_above_limit);
    RUN(dense_o_seqlen_differs_from_q);
    RUN(dense_k_batch_differs_from_q);
    RUN(dense_lse_transposed);
    RUN(dense_lse_wrong_batch);
}

Test(backward_errors_dense, dtypes)
{
    RUN(dense_do_dtype_f16);
    RUN(dense_dq_dtype_bf16);
    RUN(dense_dk_dtype_f16);
    RUN(dense_dv_dtype_i32);
    RUN(dense_f16_problem_with_f32_gradient);
    RUN(dense_k_dtype_differs_from_q);
    RUN(dense_lse_dtype_f16);
    RUN(dense_lse_dtype_i32);
    RUN(dense_all_dtype_i8);
    RUN(dense_all_dtype_i32);
}

Test(backward_errors_dense, overlaps)
{
    RUN(dense_dq_aliases_q);
    RUN(dense_dq_aliases_do);
    RUN(dense_dk_aliases_k);
    RUN(dense_dv_aliases_v);
    RUN(dense_dk_and_dv_same_tensor);
    RUN(dense_dq_overlaps_dk);
    RUN(dense_dk_overlaps_dv);
    RUN(dense_dk_overlaps_do);
    RUN(dense_dq_overlaps_o);
    RUN(dense_dq_overlaps_v);
    RUN(dense_dv_overlaps_lse);
    RUN(dense_lse_inside_dk);
}

Test(backward_errors_dense, dv_overlaps_key_mask)
{
    RUN(dense_dv_overlaps_key_mask);
}

Test(backward_errors_dense, dq_overlaps_alibi_slopes)
{
    RUN(dense_dq_overlaps_alibi_slopes);
}

Test(backward_errors_dense, params)
{
    RUN(dense_window_left_below_minus_one);
    RUN(dense_window_right_below_minus_one);
    RUN(dense_softcap_negative);
    RUN(dense_softcap_inf);
    RUN(dense_softcap_nan);
    RUN(dense_scale_nan);
    RUN(dense_scale_inf);
    RUN(dense_key_mask_wrong_length);
    RUN(dense_key_mask_wrong_batch);
    RUN(dense_key_mask_rank_3);
    RUN(dense_key_mask_dtype_f16);
    RUN(dense_key_mask_dtype_i32);
    RUN(dense_alibi_wrong_length);
    RUN(dense_alibi_kv_heads_instead_of_q_heads);
    RUN(dense_alibi_wrong_batch);
    RUN(dense_alibi_dtype_bf16);
}

Test(backward_errors_varlen, controls)
{
    RUN(varlen_control_valid_call_succeeds_and_writes_gradients);
    RUN(varlen_control_valid_optional_inputs_accepted);
    RUN(varlen_valid_call_after_failed_one_clears_error);
}

Test(backward_errors_varlen, null_arguments)
{
    RUN(varlen_null_context);
    RUN(varlen_null_params);
    RUN(varlen_null_q);
    RUN(varlen_null_k);
    RUN(varlen_null_v);
    RUN(varlen_null_o);
    RUN(varlen_null_do);
    RUN(varlen_null_cu_seqlens_q);
    RUN(varlen_null_cu_seqlens_k);
    RUN(varlen_null_dq);
    RUN(varlen_null_dk);
    RUN(varlen_null_dv);
}

Test(backward_errors_varlen, tensors_of_another_context)
{
    RUN(varlen_cu_seqlens_q_of_another_context);
    RUN(varlen_do_of_another_context);
    RUN(varlen_dk_of_another_context);
}

Test(backward_errors_varlen, prefix_sums)
{
    RUN(varlen_cu_seqlens_q_dtype_f32);
    RUN(varlen_cu_seqlens_k_dtype_i8);
    RUN(varlen_cu_seqlens_q_rank_2);
    RUN(varlen_cu_seqlens_lengths_differ);
    RUN(varlen_cu_seqlens_one_entry);
    RUN(varlen_max_seqlen_q_negative);
    RUN(varlen_max_seqlen_k_negative);
}

Test(backward_errors_varlen, gradient_shapes_and_dtypes)
{
    RUN(varlen_dq_rows_differ_from_total_q);
    RUN(varlen_dq_rank_4);
    RUN(varlen_dk_rows_total_q_instead_of_total_k);
    RUN(varlen_dv_heads_hq_instead_of_hkv);
    RUN(varlen_do_head_dim_differs_from_o);
    RUN(varlen_dq_dtype_f16);
    RUN(varlen_do_dtype_bf16);
    RUN(varlen_q_dtype_i8);
}

Test(backward_errors_varlen, lse_heads)
{
    RUN(varlen_lse_transposed);
    RUN(varlen_lse_dense_shape);
    RUN(varlen_lse_dtype_f16);
    RUN(varlen_head_dim_mismatch_q_k);
    RUN(varlen_q_heads_not_multiple_of_kv_heads);
    RUN(varlen_head_dim_above_limit);
}

Test(backward_errors_varlen, overlaps)
{
    RUN(varlen_dq_aliases_q);
    RUN(varlen_dk_overlaps_dv);
    RUN(varlen_dq_overlaps_lse);
}

Test(backward_errors_varlen, dq_overlaps_cu_seqlens_q)
{
    RUN(varlen_dq_overlaps_cu_seqlens_q);
}

Test(backward_errors_varlen, dk_overlaps_cu_seqlens_k)
{
    RUN(varlen_dk_overlaps_cu_seqlens_k);
}

Test(backward_errors_varlen, params)
{
    RUN(varlen_key_mask_per_batch_rejected);
    RUN(varlen_key_mask_max_seqlen_k_long);
    RUN(varlen_alibi_wrong_batch);
    RUN(varlen_window_left_below_minus_one);
    RUN(varlen_softcap_negative);
}

Test(backward_errors_packed, controls)
{
    RUN(packed_control_valid_call_succeeds_and_writes_gradients);
    RUN(packed_control_valid_optional_inputs_accepted);
    RUN(packed_valid_call_after_failed_one_clears_error);
}

Test(backward_errors_packed, null_arguments)
{
    RUN(packed_null_context);
    RUN(packed_null_params);
    RUN(packed_null_qkv);
    RUN(packed_null_o);
    RUN(packed_null_do);
    RUN(packed_null_seq_bounds);
    RUN(packed_null_dqkv);
}

Test(backward_errors_packed, tensors_of_another_context)
{
    RUN(packed_seq_bounds_of_another_context);
    RUN(packed_do_of_another_context);
    RUN(packed_dqkv_of_another_context);
}

Test(backward_errors_packed, qkv_dqkv)
{
    RUN(packed_qkv_dim1_is_2);
    RUN(packed_qkv_rank_3);
    RUN(packed_dqkv_dim1_is_4);
    RUN(packed_dqkv_rows_differ);
    RUN(packed_dqkv_rank_3);
    RUN(packed_dqkv_dtype_f16);
    RUN(packed_dqkv_dtype_i32);
    RUN(packed_qkv_dtype_i8);
    RUN(packed_head_dim_above_limit);
}

Test(backward_errors_packed, o_do_lse)
{
    RUN(packed_do_head_dim_differs_from_o);
    RUN(packed_do_rank_4);
    RUN(packed_do_dtype_f16);
    RUN(packed_o_rows_differ);
    RUN(packed_lse_transposed);
    RUN(packed_lse_dtype_bf16);
}

Test(backward_errors_packed, seq_bounds)
{
    RUN(packed_seq_bounds_three_columns);
    RUN(packed_seq_bounds_rows_differ);
    RUN(packed_seq_bounds_rank_1);
    RUN(packed_seq_bounds_dtype_f32);
    RUN(packed_seq_bounds_dtype_i8);
}

Test(backward_errors_packed, overlaps)
{
    RUN(packed_dqkv_aliases_qkv);
    RUN(packed_dqkv_overlaps_qkv);
    RUN(packed_dqkv_overlaps_o);
    RUN(packed_dqkv_overlaps_do);
    RUN(packed_dqkv_overlaps_lse);
}

Test(backward_errors_packed, dqkv_overlaps_seq_bounds)
{
    RUN(packed_dqkv_overlaps_seq_bounds);
}

Test(backward_errors_packed, dqkv_slices_alias_each_other)
{
    RUN(packed_dqkv_slices_alias_each_other);
}

Test(backward_errors_packed, params)
{
    RUN(packed_key_mask_per_batch_rejected);
    RUN(packed_alibi_per_batch_rejected);
    RUN(packed_key_mask_dtype_i8);
    RUN(packed_window_right_below_minus_one);
    RUN(packed_scale_nan);
}

Test(backward_errors_dense, o_null_recompute)
{
    RUN(dense_recompute_control);
    RUN(dense_recompute_o_null_lse_given);
    RUN(dense_recompute_do_null);
    RUN(dense_recompute_dq_aliases_do);
}

Test(backward_errors_dense, o_null_do_head_dim) { RUN(dense_recompute_do_head_dim); }
Test(backward_errors_dense, o_null_do_dtype) { RUN(dense_recompute_do_dtype); }
Test(backward_errors_dense, o_null_do_rank) { RUN(dense_recompute_do_rank); }
Test(backward_errors_dense, o_null_do_of_another_context) { RUN(dense_recompute_do_foreign); }

Test(backward_errors_varlen, o_null_recompute)
{
    RUN(varlen_recompute_control);
    RUN(varlen_recompute_o_null_lse_given);
    RUN(varlen_recompute_do_null);
}

Test(backward_errors_varlen, o_null_do_head_dim) { RUN(varlen_recompute_do_head_dim); }
Test(backward_errors_varlen, o_null_do_dtype) { RUN(varlen_recompute_do_dtype); }
Test(backward_errors_varlen, o_null_do_rank) { RUN(varlen_recompute_do_rank); }
Test(backward_errors_varlen, o_null_do_of_another_context) { RUN(varlen_recompute_do_foreign); }

Test(backward_errors_packed, o_null_recompute)
{
    RUN(packed_recompute_control);
    RUN(packed_recompute_o_null_lse_given);
    RUN(packed_recompute_do_null);
    RUN(packed_recompute_dqkv_overlaps_do);
}

Test(backward_errors_packed, o_null_do_head_dim) { RUN(packed_recompute_do_head_dim); }
Test(backward_errors_packed, o_null_do_dtype) { RUN(packed_recompute_do_dtype); }
Test(backward_errors_packed, o_null_do_rank) { RUN(packed_recompute_do_rank); }
Test(backward_errors_packed, o_null_do_of_another_context) { RUN(packed_recompute_do_foreign); }

Test(backward_errors_dense, launch_grid_limits)
{
    RUN(dense_batch_above_limit);
    RUN(dense_q_heads_above_limit);
}

Test(backward_errors_varlen, launch_grid_limits)
{
    RUN(varlen_q_heads_above_limit);
    RUN(varlen_batch_above_limit);
}

Test(backward_errors_packed, launch_grid_limits) { RUN(packed_heads_above_limit); }
