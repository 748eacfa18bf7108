/* SPDX-License-Identifier: Apache-2.0 */
/* The bad-input table runner (support_errors.h): problems, fixtures, calls and checks. */
#include "support_errors.h"
#include "support.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ checks */

/* Records one check of case `name`: passes, or fails the test with "[name] <fmt>" and goes on. */
__attribute__((format(printf, 3, 4))) static int expect(const char *name, int ok, const char *fmt, ...)
{
    char why[1024] = "";
    if (!ok) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
    }
    cr_expect(ok, "[%s] %s", name, why);
    return ok;
}

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

int errors_expect_status(const char *name, const char *call, fcl_status st, fcl_status want, fcl_status also,
                         const char *msg)
{
    const int ok = st == want || (also != FCL_SUCCESS && st == also);
    return expect(name, ok, "%s returned %s (%d), expected %s%s%s; message: \"%s\"", call, fcl_status_string(st),
                  (int)st, fcl_status_string(want), also != FCL_SUCCESS ? " or " : "",
                  also != FCL_SUCCESS ? fcl_status_string(also) : "", msg ? msg : "(NULL)");
}

void errors_expect_message(const char *name, const char *msg, const char *const *tokens, size_t n_tokens,
                           const char *const *subs, size_t n_subs, const char *const *any, size_t n_any)
{
    if (!expect(name, msg != NULL, "fcl_last_error returned NULL"))
        return;
    size_t letters = 0;
    for (const char *p = msg; *p; p++)
        letters += isalpha((unsigned char)*p) != 0;
    expect(name, letters >= 5, "the message \"%s\" is not a sentence", msg);
    for (size_t i = 0; i < n_tokens && tokens[i]; i++)
        expect(name, support_has_token(msg, tokens[i]), "the message \"%s\" does not name \"%s\"", msg, tokens[i]);
    for (size_t i = 0; i < n_subs && subs[i]; i++)
        expect(name, has_substr(msg, subs[i]), "the message \"%s\" does not contain \"%s\"", msg, subs[i]);
    if (n_any && any[0]) {
        int found = 0;
        for (size_t i = 0; i < n_any && any[i]; i++)
            found |= support_has_token(msg, any[i]);
        expect(name, found, "the message \"%s\" names none of the alternatives (\"%s\", ...)", msg, any[0]);
    }
}

/* ------------------------------------------------------------------ ops */

enum { R_IN = 1, R_OUT, R_INDEX }; /* a slot's role; 0: absent */

static const char *const op_name[4] = {"fcl_attention_forward", "fcl_attention_backward",
                                       "fcl_attention_varlen_backward", "fcl_attention_packed_qkv_backward"};

static const char *const slot_name[4][ERRORS_NSLOT] = {
    {"Q", "K", "V", "O", "LSE", NULL, NULL, NULL, NULL, NULL, NULL, "key_mask", "alibi_slopes"},
    {"Q", "K", "V", "O", "dO", "LSE", "dQ", "dK", "dV", NULL, NULL, "key_mask", "alibi_slopes"},
    {"Q", "K", "V", "O", "dO", "LSE", "cu_seqlens_q", "cu_seqlens_k", "dQ", "dK", "dV", "key_mask",
     "alibi_slopes"},
    {"QKV", "O", "dO", "LSE", "seq_bounds", "dQKV", NULL, NULL, NULL, NULL, NULL, "key_mask", "alibi_slopes"},
};

static const int cu_q0[VB + 1] = {0, 3, 7}, cu_k0[VB + 1] = {0, 5, 9};
static const int bounds0[PL * 2] = {0, 4, 0, 4, 0, 4, 0, 4, 4, 6, 4, 6};

/* ------------------------------------------------------------------ problems */

typedef struct tspec {
    int role;
    int foreign; /* made in the second context */
    fcl_dtype dtype;
    int ndim;
    int64_t shape[4];
    int64_t place;   /* -1: own buffer; else element offset (of its dtype) into the shared buffer */
    int has_strides; /* placed slots only */
    int64_t strides[4];
} tspec;

typedef struct problem {
    errors_op op;
    tspec t[ERRORS_NSLOT];
    int max_q, max_k; /* varlen */
    int64_t arena;    /* bytes of the shared buffer (0: none) */
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

/* The dense problem of the forward or the backward with every tensor of the given sizes. */
static void problem_dense(problem *p, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D)
{
    if (p->op == ERRORS_FORWARD) {
        set_spec(&p->t[F_Q], R_IN, FCL_F32, 4, B, Sq, Hq, D);
        set_spec(&p->t[F_K], R_IN, FCL_F32, 4, B, Sk, Hkv, D);
        set_spec(&p->t[F_V], R_IN, FCL_F32, 4, B, Sk, Hkv, D);
        set_spec(&p->t[F_O], R_OUT, FCL_F32, 4, B, Sq, Hq, D);
        set_spec(&p->t[F_LSE], R_OUT, FCL_F32, 3, B, Hq, Sq, 0);
        return;
    }
    set_spec(&p->t[D_Q], R_IN, FCL_F32, 4, B, Sq, Hq, D);
    set_spec(&p->t[D_K], R_IN, FCL_F32, 4, B, Sk, Hkv, D);
    set_spec(&p->t[D_V], R_IN, FCL_F32, 4, B, Sk, Hkv, D);
    set_spec(&p->t[D_O], R_IN, FCL_F32, 4, B, Sq, Hq, D);
    set_spec(&p->t[D_DO], R_IN, FCL_F32, 4, B, Sq, Hq, D);
    set_spec(&p->t[D_LSE], R_IN, FCL_F32, 3, B, Hq, Sq, 0);
    set_spec(&p->t[D_DQ], R_OUT, FCL_F32, 4, B, Sq, Hq, D);
    set_spec(&p->t[D_DK], R_OUT, FCL_F32, 4, B, Sk, Hkv, D);
    set_spec(&p->t[D_DV], R_OUT, FCL_F32, 4, B, Sk, Hkv, D);
}

static void problem_default(problem *p, errors_op op)
{
    memset(p, 0, sizeof *p);
    p->op = op;
    switch (op) {
    case ERRORS_FORWARD:
    case ERRORS_BACKWARD:
        problem_dense(p, B0, SQ0, SK0, HQ0, HKV0, D0);
        break;
    case ERRORS_VARLEN_BACKWARD:
        set_spec(&p->t[V_Q], R_IN, FCL_F32, 3, TQ0, VHQ, D0, 0);
        set_spec(&p->t[V_K], R_IN, FCL_F32, 3, TK0, VHKV, D0, 0);
        set_spec(&p->t[V_V], R_IN, FCL_F32, 3, TK0, VHKV, D0, 0);
        set_spec(&p->t[V_O], R_IN, FCL_F32, 3, TQ0, VHQ, D0, 0);
        set_spec(&p->t[V_DO], R_IN, FCL_F32, 3, TQ0, VHQ, D0, 0);
        set_spec(&p->t[V_LSE], R_IN, FCL_F32, 2, VHQ, TQ0, 0, 0);
        set_spec(&p->t[V_CUQ], R_INDEX, FCL_I32, 1, VB + 1, 0, 0, 0);
        set_spec(&p->t[V_CUK], R_INDEX, FCL_I32, 1, VB + 1, 0, 0, 0);
        set_spec(&p->t[V_DQ], R_OUT, FCL_F32, 3, TQ0, VHQ, D0, 0);
        set_spec(&p->t[V_DK], R_OUT, FCL_F32, 3, TK0, VHKV, D0, 0);
        set_spec(&p->t[V_DV], R_OUT, FCL_F32, 3, TK0, VHKV, D0, 0);
        p->max_q = VMAXQ;
        p->max_k = VMAXK;
        break;
    case ERRORS_PACKED_BACKWARD:
        set_spec(&p->t[P_QKV], R_IN, FCL_F32, 4, PL, 3, PH, D0);
        set_spec(&p->t[P_O], R_IN, FCL_F32, 3, PL, PH, D0, 0);
        set_spec(&p->t[P_DO], R_IN, FCL_F32, 3, PL, PH, D0, 0);
        set_spec(&p->t[P_LSE], R_IN, FCL_F32, 2, PH, PL, 0, 0);
        set_spec(&p->t[P_BOUNDS], R_INDEX, FCL_I32, 2, PL, 2, 0, 0);
        set_spec(&p->t[P_DQKV], R_OUT, FCL_F32, 4, PL, 3, PH, D0);
        break;
    }
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

/* Places `slot` at element offset `off` (of its dtype) of the shared buffer, growing it. */
static void place(problem *p, int slot, int64_t off)
{
    tspec *s = &p->t[slot];
    s->place = off;
    const int64_t end = (off + spec_extent(s)) * (int64_t)fcl_dtype_size(s->dtype);
    if (end > p->arena)
        p->arena = end;
}

/* The slot a single-slot edit names. */
static int edit_slot(const errors_edit *e)
{
    for (int i = 0; i < ERRORS_NSLOT; i++)
        if (e->slots & BIT(i))
            return i;
    cr_assert_fail("an edit of kind %d names no slot", (int)e->kind);
    return 0;
}

/* The problem edits of a row (parameter and call edits are applied later). */
static void apply_problem_edits(problem *p, const errors_case *row)
{
    for (int k = 0; k < ERRORS_MAX_EDITS && row->edit[k].kind != ERR_END; k++) {
        const errors_edit *e = &row->edit[k];
        switch (e->kind) {
        case ERR_RESIZE:
            cr_assert(p->op == ERRORS_FORWARD || p->op == ERRORS_BACKWARD, "[%s] E_RESIZE on a non-dense op",
                      row->name);
            problem_dense(p, e->v[0], e->v[1], e->v[2], e->v[3], e->v[4], e->v[5]);
            break;
        case ERR_SPEC: {
            tspec *s = &p->t[edit_slot(e)];
            set_spec(s, s->role ? s->role : R_IN, (fcl_dtype)e->v[0], (int)e->v[1], e->v[2], e->v[3], e->v[4],
                     e->v[5]);
            break;
        }
        case ERR_STRIDES: {
            tspec *s = &p->t[edit_slot(e)];
            s->has_strides = 1;
            memcpy(s->strides, e->v, sizeof s->strides);
            break;
        }
        case ERR_PLACE:
            place(p, edit_slot(e), e->v[0]);
            break;
        case ERR_AFTER: {
            const tspec *of = &p->t[e->v[0]];
            cr_assert(of->place >= 0, "[%s] E_ON_LAST / E_NEXT_TO a slot that is not placed", row->name);
            place(p, edit_slot(e), of->place + spec_extent(of) + e->v[1]);
            break;
        }
        case ERR_BACK_TO_BACK: {
            int64_t off = 0;
            for (int i = 0; i < ERRORS_NSLOT; i++)
                if (p->t[i].role) {
                    place(p, i, off);
                    off += spec_extent(&p->t[i]);
                }
            break;
        }
        case ERR_MAX_Q:
            p->max_q = (int)e->v[0];
            break;
        case ERR_MAX_K:
            p->max_k = (int)e->v[0];
            break;
        default:
            for (int i = 0; i < ERRORS_NSLOT; i++) {
                if (!(e->slots & BIT(i)))
                    continue;
                if (e->kind == ERR_DIM)
                    p->t[i].shape[e->v[0]] = e->v[1];
                else if (e->kind == ERR_DTYPE)
                    p->t[i].dtype = (fcl_dtype)e->v[0];
                else if (e->kind == ERR_ABSENT)
                    p->t[i].role = 0;
                else if (e->kind == ERR_FOREIGN)
                    p->t[i].foreign = 1;
            }
            break;
        }
    }
}

/* ------------------------------------------------------------------ fixture */

typedef struct fx {
    const char *name; /* the running row */
    fcl_context ctx, other;
    problem pb;
    fcl_tensor t[ERRORS_NSLOT];
    unsigned char *expect[ERRORS_NSLOT]; /* bytes each tensor must hold after a rejected call */
    size_t bytes[ERRORS_NSLOT];
    unsigned char *poison[ERRORS_NSLOT]; /* outputs: the salted pattern written into them */
    fcl_tensor arena;
    unsigned char *arena_expect;
    size_t arena_bytes;
} fx;

static fcl_tensor make_tensor(const fx *f, fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(ctx, dt, ndim, shape, &t);
    cr_assert(st == FCL_SUCCESS && t != NULL, "[%s] fcl_tensor_create(%s, ndim %d): %s: %s", f->name,
              fcl_dtype_name(dt), ndim, fcl_status_string(st), fcl_last_error(ctx));
    return t;
}

static unsigned char *read_raw(const fx *f, fcl_tensor t, size_t *bytes)
{
    *bytes = (size_t)fcl_tensor_numel(t) * fcl_dtype_size(fcl_tensor_dtype(t));
    unsigned char *p = support_xmalloc(*bytes);
    fcl_status st = fcl_tensor_read_raw(t, p, *bytes);
    cr_assert(st == FCL_SUCCESS, "[%s] fcl_tensor_read_raw: %s", f->name, fcl_status_string(st));
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
static void fill_index(fcl_tensor t, errors_op op, int slot)
{
    size_t n = (size_t)fcl_tensor_numel(t);
    const int *def = op == ERRORS_PACKED_BACKWARD ? bounds0 : slot == V_CUQ ? cu_q0 : cu_k0;
    const size_t def_n = op == ERRORS_PACKED_BACKWARD ? PL * 2 : VB + 1;
    float *h = support_xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)def[i % def_n];
    support_write(t, h);
    free(h);
}

static fcl_tensor make_slot(fx *f, const tspec *s)
{
    if (s->foreign) {
        if (!f->other)
            f->other = support_context();
        return make_tensor(f, f->other, s->dtype, s->ndim, s->shape);
    }
    if (s->place < 0)
        return make_tensor(f, f->ctx, s->dtype, s->ndim, s->shape);
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_wrap(f->ctx, fcl_tensor_buffer(f->arena), s->dtype, s->ndim, s->shape,
                                    s->has_strides ? s->strides : NULL, s->place, &t);
    cr_assert(st == FCL_SUCCESS, "[%s] fcl_tensor_wrap into the shared buffer: %s: %s", f->name,
              fcl_status_string(st), fcl_last_error(f->ctx));
    return t;
}

/* Creates and fills every tensor: the shared buffer gets a poison pattern, then inputs get
 * values, outputs their own salted poison, index tensors their valid contents (in that order,
 * so an index view inside an output still holds valid indices). */
static void fx_build(fx *f)
{
    const problem *pb = &f->pb;
    if (pb->arena > 0) {
        const int64_t n[1] = {(pb->arena + 3) / 4};
        f->arena = make_tensor(f, f->ctx, FCL_F32, 1, n);
        free(support_poison_raw(f->arena, &f->arena_bytes, 97));
    }
    for (int i = 0; i < ERRORS_NSLOT; i++)
        if (pb->t[i].role)
            f->t[i] = make_slot(f, &pb->t[i]);
    for (int i = 0; i < ERRORS_NSLOT; i++)
        if (pb->t[i].role == R_IN)
            fill_input(f->t[i], i, 1000u + (unsigned)i);
    for (int i = 0; i < ERRORS_NSLOT; i++)
        if (pb->t[i].role == R_OUT)
            f->poison[i] = support_poison_raw(f->t[i], &f->bytes[i], 1u + (unsigned)i);
    for (int i = 0; i < ERRORS_NSLOT; i++)
        if (pb->t[i].role == R_INDEX)
            fill_index(f->t[i], pb->op, i);
}

/* Records what every tensor holds now: a rejected call must leave exactly this. An output in
 * its own buffer must hold its poison pattern. */
static void fx_seal(fx *f)
{
    cr_assert(fcl_finish(f->ctx) == FCL_SUCCESS, "[%s] fcl_finish before the call", f->name);
    for (int i = 0; i < ERRORS_NSLOT; i++) {
        if (!f->t[i])
            continue;
        f->expect[i] = read_raw(f, f->t[i], &f->bytes[i]);
        if (f->pb.t[i].role == R_OUT && f->pb.t[i].place < 0)
            cr_assert(memcmp(f->expect[i], f->poison[i], f->bytes[i]) == 0, "[%s] the poison of %s did not stick",
                      f->name, slot_name[f->pb.op][i]);
    }
    if (f->arena)
        f->arena_expect = read_raw(f, f->arena, &f->arena_bytes);
}

/* fcl_finish, then every tensor (and the shared buffer) must hold what fx_seal recorded. */
static void fx_expect_untouched(fx *f)
{
    fcl_status st = fcl_finish(f->ctx);
    expect(f->name, st == FCL_SUCCESS, "fcl_finish after a rejected call: %s: %s", fcl_status_string(st),
           fcl_last_error(f->ctx));
    for (int i = 0; i < ERRORS_NSLOT; i++) {
        if (!f->t[i])
            continue;
        size_t n;
        unsigned char *got = read_raw(f, f->t[i], &n);
        if (expect(f->name, n == f->bytes[i], "%s changed size", slot_name[f->pb.op][i]))
            expect(f->name, memcmp(got, f->expect[i], n) == 0, "%s was written by a rejected call",
                   slot_name[f->pb.op][i]);
        free(got);
    }
    if (f->arena) {
        size_t n;
        unsigned char *got = read_raw(f, f->arena, &n);
        expect(f->name, memcmp(got, f->arena_expect, n) == 0, "the shared buffer was written by a rejected call");
        free(got);
    }
}

static void fx_fini(fx *f)
{
    for (int i = 0; i < ERRORS_NSLOT; i++) {
        fcl_tensor_release(f->t[i]);
        free(f->expect[i]);
        free(f->poison[i]);
    }
    fcl_tensor_release(f->arena);
    free(f->arena_expect);
}

/* ------------------------------------------------------------------ calls */

typedef struct call {
    errors_op op;
    fcl_context ctx;
    fcl_attn_params params;
    const fcl_attn_params *p; /* &params, or NULL */
    fcl_tensor t[ERRORS_NSLOT];
    int max_q, max_k;
} call;

/* The call of f's tensors with the row's parameter and call edits. */
static void fx_call(const fx *f, const errors_case *row, call *c)
{
    memset(c, 0, sizeof *c);
    c->op = f->pb.op;
    c->ctx = f->ctx;
    c->params = fcl_attn_params_default();
    c->params.key_mask = f->t[S_MASK];
    c->params.alibi_slopes = f->t[S_ALIBI];
    c->p = &c->params;
    memcpy(c->t, f->t, sizeof c->t);
    c->max_q = f->pb.max_q;
    c->max_k = f->pb.max_k;
    for (int k = 0; k < ERRORS_MAX_EDITS && row->edit[k].kind != ERR_END; k++) {
        const errors_edit *e = &row->edit[k];
        switch (e->kind) {
        case ERR_CAUSAL:
            c->params.causal = 1;
            break;
        case ERR_WINDOW_LEFT:
            c->params.window_left = (int)e->v[0];
            break;
        case ERR_WINDOW_RIGHT:
            c->params.window_right = (int)e->v[0];
            break;
        case ERR_SCALE:
            c->params.scale = e->f;
            break;
        case ERR_SOFTCAP:
            c->params.softcap = e->f;
            break;
        case ERR_PASS_NULL:
            for (int i = 0; i < ERRORS_NSLOT; i++)
                if (e->slots & BIT(i))
                    c->t[i] = NULL;
            break;
        case ERR_PASS_AS:
            c->t[edit_slot(e)] = f->t[e->v[0]];
            break;
        case ERR_NULL_PARAMS:
            c->p = NULL;
            break;
        case ERR_NULL_CTX:
            c->ctx = NULL;
            break;
        default:
            break;
        }
    }
}

static fcl_status do_call(const call *c, cl_event *ev)
{
    const fcl_tensor *t = c->t;
    switch (c->op) {
    case ERRORS_FORWARD:
        return fcl_attention_forward(c->ctx, c->p, t[F_Q], t[F_K], t[F_V], t[F_O], t[F_LSE], ev);
    case ERRORS_BACKWARD:
        return fcl_attention_backward(c->ctx, c->p, t[D_Q], t[D_K], t[D_V], t[D_O], t[D_DO], t[D_LSE], t[D_DQ],
                                      t[D_DK], t[D_DV], ev);
    case ERRORS_VARLEN_BACKWARD:
        return fcl_attention_varlen_backward(c->ctx, c->p, t[V_Q], t[V_K], t[V_V], t[V_O], t[V_DO], t[V_LSE],
                                             t[V_CUQ], t[V_CUK], c->max_q, c->max_k, t[V_DQ], t[V_DK], t[V_DV],
                                             ev);
    case ERRORS_PACKED_BACKWARD:
        return fcl_attention_packed_qkv_backward(c->ctx, c->p, t[P_QKV], t[P_O], t[P_DO], t[P_LSE], t[P_BOUNDS],
                                                 t[P_DQKV], ev);
    }
    return FCL_ERR_INVALID_ARGUMENT;
}

/* The forward of a backward's problem, into O and LSE (the controls' inputs). */
static void do_forward(const fx *f, const call *c)
{
    const fcl_tensor *t = c->t;
    fcl_status st = FCL_ERR_INVALID_ARGUMENT;
    switch (c->op) {
    case ERRORS_BACKWARD:
        st = fcl_attention_forward(c->ctx, c->p, t[D_Q], t[D_K], t[D_V], t[D_O], t[D_LSE], NULL);
        break;
    case ERRORS_VARLEN_BACKWARD:
        st = fcl_attention_varlen_forward(c->ctx, c->p, t[V_Q], t[V_K], t[V_V], t[V_CUQ], t[V_CUK], c->max_q,
                                          c->max_k, t[V_O], t[V_LSE], NULL);
        break;
    case ERRORS_PACKED_BACKWARD:
        st = fcl_attention_packed_qkv_forward(c->ctx, c->p, t[P_QKV], t[P_BOUNDS], t[P_O], t[P_LSE], NULL);
        break;
    case ERRORS_FORWARD:
        cr_assert_fail("[%s] E_FORWARD_FIRST on the forward", f->name);
    }
    cr_assert(st == FCL_SUCCESS, "[%s] the forward of the control problem: %s: %s", f->name, fcl_status_string(st),
              fcl_last_error(c->ctx));
}

static const errors_edit *find_edit(const errors_case *row, errors_edit_kind kind)
{
    for (int k = 0; k < ERRORS_MAX_EDITS && row->edit[k].kind != ERR_END; k++)
        if (row->edit[k].kind == kind)
            return &row->edit[k];
    return NULL;
}

/* ------------------------------------------------------------------ rows */

static void run_rejected(fx *f, const errors_case *row, const call *c)
{
    const char *op = op_name[f->pb.op];
    cl_event ev = NULL;
    fcl_status st = do_call(c, &ev);
    const char *msg = fcl_last_error(c->ctx); /* fcl_last_error(NULL) for a NULL ctx */
    if (errors_expect_status(row->name, op, st, row->want, row->also, msg)) {
        errors_expect_message(row->name, msg, row->tokens, ERRORS_MAX_TOKENS, row->subs, ERRORS_MAX_SUBS, row->any,
                              ERRORS_MAX_ANY);
        expect(row->name, support_has_token(msg, op), "the message \"%s\" does not name %s", msg, op);
    }
    expect(row->name, ev == NULL, "a rejected call returned an event");
    if (ev)
        clReleaseEvent(ev);
    fx_expect_untouched(f);
}

/* Every element of every output was written (differs from its poison) and is finite. */
static void expect_outputs_written(fx *f)
{
    for (int i = 0; i < ERRORS_NSLOT; i++) {
        if (f->pb.t[i].role != R_OUT)
            continue;
        const char *name = slot_name[f->pb.op][i];
        size_t n;
        unsigned char *got = read_raw(f, f->t[i], &n);
        cr_assert(f->pb.t[i].dtype == FCL_F32, "[%s] a control's output %s is not f32", f->name, name);
        size_t unwritten = 0, bad = 0;
        for (size_t e = 0; e < n / 4; e++) {
            float x;
            memcpy(&x, got + 4 * e, 4);
            unwritten += memcmp(got + 4 * e, f->poison[i] + 4 * e, 4) == 0;
            bad += !isfinite(x);
        }
        expect(f->name, unwritten == 0, "the valid call left %zu of %zu elements of %s as poison", unwritten, n / 4,
               name);
        expect(f->name, bad == 0, "the valid call wrote %zu non-finite elements into %s", bad, name);
        free(got);
    }
}

/* A valid call with an event: succeeds, returns an event, clears the message, writes every
 * output element (finite), and changes no input. */
static void run_control(fx *f, const errors_case *row, const call *c)
{
    const char *op = op_name[f->pb.op];
    const errors_edit *fail_first = find_edit(row, ERR_FAIL_FIRST);
    if (fail_first) {
        call bad = *c;
        bad.t[fail_first->v[0]] = NULL;
        fcl_status st = do_call(&bad, NULL);
        expect(row->name, st == FCL_ERR_INVALID_ARGUMENT, "NULL %s: got %s", slot_name[f->pb.op][fail_first->v[0]],
               fcl_status_string(st));
        expect(row->name, fcl_last_error(f->ctx)[0] != '\0', "a failed call left no message");
    }
    cl_event ev = NULL;
    fcl_status st = do_call(c, &ev);
    if (!expect(row->name, st == FCL_SUCCESS, "valid %s: %s: %s", op, fcl_status_string(st), fcl_last_error(f->ctx)))
        return;
    if (expect(row->name, ev != NULL, "a successful call with an event pointer returned no event")) {
        cl_int ce = clWaitForEvents(1, &ev);
        expect(row->name, ce == CL_SUCCESS, "clWaitForEvents: %d", (int)ce);
        clReleaseEvent(ev);
    }
    expect(row->name, fcl_last_error(f->ctx)[0] == '\0', "a successful call left the message \"%s\"",
           fcl_last_error(f->ctx));
    st = fcl_finish(f->ctx);
    expect(row->name, st == FCL_SUCCESS, "fcl_finish after the valid call: %s", fcl_status_string(st));
    expect_outputs_written(f);
    for (int i = 0; i < ERRORS_NSLOT; i++) {
        if (!f->t[i] || f->pb.t[i].role == R_OUT)
            continue;
        size_t n;
        unsigned char *got = read_raw(f, f->t[i], &n);
        expect(row->name, memcmp(got, f->expect[i], n) == 0, "the valid call changed the input %s",
               slot_name[f->pb.op][i]);
        free(got);
    }
}

/* One row in ctx (and *other, made on first use, for E_FOREIGN). */
static void run_row(errors_op op, const errors_case *row, fcl_context ctx, fcl_context *other)
{
    fx f;
    memset(&f, 0, sizeof f);
    f.name = row->name;
    f.ctx = ctx;
    f.other = *other;
    problem_default(&f.pb, op);
    apply_problem_edits(&f.pb, row);
    fx_build(&f);
    *other = f.other;
    call c;
    fx_call(&f, row, &c);
    if (find_edit(row, ERR_FORWARD_FIRST))
        do_forward(&f, &c);
    fx_seal(&f);
    if (row->want == FCL_SUCCESS)
        run_control(&f, row, &c);
    else
        run_rejected(&f, row, &c);
    fx_fini(&f);
}

void errors_run(errors_op op, const errors_case *cases, size_t n)
{
    fcl_context ctx = support_context(), other = NULL;
    for (size_t r = 0; r < n; r++)
        run_row(op, &cases[r], ctx, &other);
    fcl_context_release(other);
    fcl_context_release(ctx);
}
