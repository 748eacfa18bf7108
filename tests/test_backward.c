/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcl_attention_backward (dense [B,S,H,D] layout) against the float64 reference gradients, on
 * the FLASHCL_DEVICE device.
 *
 * Each case: random Q, K, V, dO in [-1, 1) rounded to the dtype (fixed seeds); the device
 * forward gives O and LSE; dQ, dK, dV are NaN-poisoned (their whole base buffers) and the
 * backward runs. Rule (DESIGN.md), per gradient tensor: max |kernel - float64| <=
 * 3 * max |naive - float64| + 1e-5, "naive" being ref_attention_backward_naive in the same
 * dtype. No NaN may remain; keys no query sees get dK = dV = 0 exactly, rows that see no key
 * dQ = 0 exactly; nothing outside the gradient views is written; the returned event is valid.
 * Optional per case: a second run (no event requested) must give the same bits, and LSE = NULL
 * (recomputed) must give the same bits as passing the forward's LSE. Chunked launches must
 * give the one-launch bits.
 *
 * Criterion forks one process per Test and each process compiles (or loads) the programs it
 * uses, so cases are grouped into a few Tests that each iterate a table, sharing programs.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention_backward.h"
#include "support.h"

#define U (-1) /* unbounded window side */

enum { MASK_NONE = 0, MASK_BSK = 1, MASK_SK = 2, MASK_SK_ZERO = 3 };
enum { ALIBI_NONE = 0, ALIBI_H = 1, ALIBI_BH = 2 };
enum {
    LAYOUT_BSHD = 0,  /* contiguous [B,S,H,D] everywhere */
    LAYOUT_BHSD = 1,  /* every tensor stored [B,H,S,D] and passed as a permuted view; gradient
                       * views start at an offset inside a larger buffer; LSE rows padded */
    LAYOUT_PADDED = 2 /* padded rows and odd offsets; K and V interleaved in one buffer */
};
enum {
    CHK_REPEAT = 1, /* a second run gives the same bits */
    CHK_NOLSE = 2,  /* LSE = NULL gives the same bits as the forward's LSE */
    ALL_DT = 4      /* flags table: run in every dtype (else f32 only) */
};

typedef struct bcase {
    int Sq, Sk, B, Hq, Hkv, D;
    int causal, wl, wr;
    float softcap, scale;
    int mask, alibi, layout, checks;
} bcase;

static void describe(const bcase *c, fcl_dtype dt, char *buf, size_t n)
{
    snprintf(buf, n,
             "%s B%d Sq%d Sk%d Hq%d Hkv%d D%d causal%d wl%d wr%d softcap%g scale%g mask%d alibi%d "
             "layout%d",
             fcl_dtype_name(dt), c->B, c->Sq, c->Sk, c->Hq, c->Hkv, c->D, c->causal, c->wl, c->wr,
             (double)c->softcap, (double)c->scale, c->mask, c->alibi, c->layout);
}

/* ---------------------------------------------------------------- tensors */

/* A view's geometry over a base buffer of base_n elements. */
typedef struct vgeom {
    int64_t shape[4], strides[4], offset;
} vgeom;

/* A gradient output: its view, its own base buffer and the view's geometry. */
typedef struct grad_slot {
    fcl_tensor view, base;
    int64_t base_n;
    vgeom g;
} grad_slot;

typedef struct case_tensors {
    fcl_tensor q, k, v, o, dout, lse, mask, alibi;
    grad_slot dq, dk, dv;
} case_tensors;

static void release_tensors(case_tensors *t)
{
    fcl_tensor all[] = {t->q, t->k, t->v, t->o, t->dout, t->lse, t->mask, t->alibi,
                        t->dq.view, t->dk.view, t->dv.view, t->dq.base, t->dk.base, t->dv.base};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    memset(t, 0, sizeof *t);
}

/* A view over a fresh 1-D buffer of base_n elements; the base goes to *base. */
static fcl_tensor make_view(fcl_context ctx, fcl_dtype dt, int64_t base_n, int ndim, const int64_t *shape,
                            const int64_t *strides, int64_t offset, fcl_tensor *base)
{
    *base = support_tensor(ctx, dt, 1, &base_n, NULL);
    return support_view(*base, ndim, shape, strides, offset);
}

/* A view whose base buffer is released at once (the view keeps it alive). */
static fcl_tensor make_input_view(fcl_context ctx, fcl_dtype dt, int64_t base_n, const int64_t *shape,
                                  const int64_t *strides, int64_t offset, const float *host)
{
    fcl_tensor base, v = make_view(ctx, dt, base_n, 4, shape, strides, offset, &base);
    fcl_tensor_release(base);
    if (host)
        support_write(v, host);
    return v;
}

/* A gradient slot with its own base of base_n elements. */
static void make_grad(fcl_context ctx, fcl_dtype dt, grad_slot *s, int64_t base_n, const int64_t *shape,
                      const int64_t *strides, int64_t offset)
{
    s->base_n = base_n;
    memcpy(s->g.shape, shape, sizeof s->g.shape);
    memcpy(s->g.strides, strides, sizeof s->g.strides);
    s->g.offset = offset;
    s->view = make_view(ctx, dt, base_n, 4, shape, strides, offset, &s->base);
}

/* Contiguous row-major strides of a 4-D shape. */
static void dense_strides(const int64_t *shape, int64_t *st)
{
    st[3] = 1;
    for (int d = 2; d >= 0; d--)
        st[d] = st[d + 1] * shape[d + 1];
}

/* Creates every tensor of the case in its layout and uploads Q, K, V, dO. */
static void make_tensors(fcl_context ctx, fcl_dtype dt, const bcase *c, const float *q, const float *k,
                         const float *v, const float *dout, case_tensors *t)
{
    const int64_t B = c->B, Sq = c->Sq, Sk = c->Sk, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    const int64_t qs[4] = {B, Sq, Hq, D}, ks[4] = {B, Sk, Hkv, D}, ls[3] = {B, Hq, Sq};
    const int64_t nq = B * Sq * Hq * D, nk = B * Sk * Hkv * D;
    memset(t, 0, sizeof *t);
    if (c->layout == LAYOUT_BSHD) {
        int64_t qst[4], kst[4];
        dense_strides(qs, qst);
        dense_strides(ks, kst);
        t->q = support_tensor(ctx, dt, 4, qs, q);
        t->k = support_tensor(ctx, dt, 4, ks, k);
        t->v = support_tensor(ctx, dt, 4, ks, v);
        t->o = support_tensor(ctx, dt, 4, qs, NULL);
        t->dout = support_tensor(ctx, dt, 4, qs, dout);
        t->lse = support_tensor(ctx, FCL_F32, 3, ls, NULL);
        make_grad(ctx, dt, &t->dq, nq, qs, qst, 0);
        make_grad(ctx, dt, &t->dk, nk, ks, kst, 0);
        make_grad(ctx, dt, &t->dv, nk, ks, kst, 0);
        return;
    }
    if (c->layout == LAYOUT_BHSD) {
        const int64_t qst[4] = {Hq * Sq * D, D, Sq * D, 1}, kst[4] = {Hkv * Sk * D, D, Sk * D, 1};
        t->q = make_input_view(ctx, dt, nq, qs, qst, 0, q);
        t->k = make_input_view(ctx, dt, nk, ks, kst, 0, k);
        t->v = make_input_view(ctx, dt, nk, ks, kst, 0, v);
        t->o = make_input_view(ctx, dt, nq, qs, qst, 0, NULL);
        t->dout = make_input_view(ctx, dt, nq, qs, qst, 0, dout);
        /* gradients: 4 elements before and 3 after each view */
        make_grad(ctx, dt, &t->dq, nq + 7, qs, qst, 4);
        make_grad(ctx, dt, &t->dk, nk + 7, ks, kst, 4);
        make_grad(ctx, dt, &t->dv, nk + 7, ks, kst, 4);
    } else {
        /* Q rows [D+3] from element 5, dO rows [D+2] from 7, O rows [D+1] from 1; K and V
         * interleaved in one [B,Sk,2,Hkv,D] buffer; dQ rows [D+2] from 3, dK rows [D+1] from 2,
         * dV rows [D+4] from 6, each gradient buffer with 3 spare elements at its end.
         * (dK and dV interleaved in one buffer: Test interleaved_grads.) */
        const int64_t q3[4] = {Sq * Hq * (D + 3), Hq * (D + 3), D + 3, 1};
        const int64_t o1[4] = {Sq * Hq * (D + 1), Hq * (D + 1), D + 1, 1};
        const int64_t q2[4] = {Sq * Hq * (D + 2), Hq * (D + 2), D + 2, 1};
        const int64_t kv[4] = {Sk * 2 * Hkv * D, 2 * Hkv * D, D, 1};
        const int64_t k1[4] = {Sk * Hkv * (D + 1), Hkv * (D + 1), D + 1, 1};
        const int64_t k4[4] = {Sk * Hkv * (D + 4), Hkv * (D + 4), D + 4, 1};
        t->q = make_input_view(ctx, dt, B * Sq * Hq * (D + 3) + 5, qs, q3, 5, q);
        t->dout = make_input_view(ctx, dt, B * Sq * Hq * (D + 2) + 7, qs, q2, 7, dout);
        t->o = make_input_view(ctx, dt, B * Sq * Hq * (D + 1) + 1, qs, o1, 1, NULL);
        fcl_tensor kvb;
        t->k = make_view(ctx, dt, 2 * nk, 4, ks, kv, 0, &kvb);
        t->v = support_view(kvb, 4, ks, kv, Hkv * D);
        fcl_tensor_release(kvb);
        support_write(t->k, k);
        support_write(t->v, v);
        make_grad(ctx, dt, &t->dq, B * Sq * Hq * (D + 2) + 6, qs, q2, 3);
        make_grad(ctx, dt, &t->dk, B * Sk * Hkv * (D + 1) + 5, ks, k1, 2);
        make_grad(ctx, dt, &t->dv, B * Sk * Hkv * (D + 4) + 9, ks, k4, 6);
    }
    /* LSE rows padded to Sq + 3, from element 2. */
    const int64_t lst[3] = {Hq * (Sq + 3), Sq + 3, 1};
    fcl_tensor lb;
    t->lse = make_view(ctx, FCL_F32, B * Hq * (Sq + 3), 3, ls, lst, 2, &lb);
    fcl_tensor_release(lb);
}

/* Mask values: 0 and 0.5 drop a key (the test is > 0.5), 0.51, 0.75 and 1 keep it. The last
 * batch row of a [B,Sk] mask drops every key (rows that see nothing). */
static void make_mask(const bcase *c, uint64_t seed, float *m, size_t n)
{
    support_random(m, n, seed, 0.0f, 1.0f, FCL_F32);
    for (size_t i = 0; i < n; i++) {
        float u = m[i];
        m[i] = u < 0.2f ? 0.0f : u < 0.3f ? 0.5f : u < 0.4f ? 0.51f : u < 0.6f ? 0.75f : 1.0f;
    }
    if (c->mask == MASK_BSK && c->B > 1)
        for (int j = 0; j < c->Sk; j++)
            m[(size_t)(c->B - 1) * c->Sk + j] = 0.0f;
    if (c->mask == MASK_SK_ZERO)
        for (size_t i = 0; i < n; i++)
            m[i] = 0.0f;
}

/* Whether query i of batch b sees key j (DESIGN.md semantics, independent of the reference). */
static int visible(const bcase *c, const float *mask, int b, int i, int j)
{
    const long p = (long)i + c->Sk - c->Sq;
    const int wr = c->causal ? 0 : c->wr;
    if (c->wl >= 0 && j < p - c->wl)
        return 0;
    if (wr >= 0 && j > p + wr)
        return 0;
    if (mask) {
        const float m = c->mask == MASK_BSK ? mask[(size_t)b * c->Sk + j] : mask[j];
        if (!(m > 0.5f))
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- one run */

/* Gradients of one run, read back in dense [B,S,H,D] order. */
typedef struct grads {
    float *dq, *dk, *dv;
    size_t outside; /* poison overwritten outside the gradient views */
    int event_ok;
} grads;

static void grads_alloc(grads *g, size_t nq, size_t nk)
{
    g->dq = support_xmalloc(sizeof(float) * nq);
    g->dk = support_xmalloc(sizeof(float) * nk);
    g->dv = support_xmalloc(sizeof(float) * nk);
    g->outside = 0;
    g->event_ok = 0;
}

static void grads_free(grads *g)
{
    free(g->dq);
    free(g->dk);
    free(g->dv);
}

/* Marks the elements of one view in in[]. */
static void mark_view(char *in, const vgeom *g)
{
    for (int64_t a = 0; a < g->shape[0]; a++)
        for (int64_t b = 0; b < g->shape[1]; b++)
            for (int64_t c = 0; c < g->shape[2]; c++)
                for (int64_t d = 0; d < g->shape[3]; d++)
                    in[g->offset + a * g->strides[0] + b * g->strides[1] + c * g->strides[2] +
                       d * g->strides[3]] = 1;
}

/* Elements of a gradient's base outside its view that are no longer NaN. */
static size_t outside_written(const grad_slot *s)
{
    float *b = support_xmalloc(sizeof(float) * (size_t)s->base_n);
    char *in = calloc((size_t)s->base_n, 1);
    cr_assert(in != NULL);
    support_read(s->base, b);
    mark_view(in, &s->g);
    size_t bad = 0;
    for (int64_t i = 0; i < s->base_n; i++)
        bad += !in[i] && !isnan(b[i]);
    free(in);
    free(b);
    return bad;
}

/* A returned event must be a complete, valid event of the context's queue. */
static int check_event(fcl_context ctx, cl_event ev)
{
    if (!ev)
        return 0;
    cl_int status = -1;
    cl_command_queue q = NULL;
    int ok = clWaitForEvents(1, &ev) == CL_SUCCESS &&
             clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) == CL_SUCCESS &&
             status == CL_COMPLETE &&
             clGetEventInfo(ev, CL_EVENT_COMMAND_QUEUE, sizeof q, &q, NULL) == CL_SUCCESS &&
             q == fcl_context_cl_queue(ctx);
    clReleaseEvent(ev);
    return ok;
}

/* Poisons the gradient bases, runs the backward (LSE or NULL; with or without an event, which
 * must then be valid), reads everything back. */
static fcl_status run_backward(fcl_context ctx, const fcl_attn_params *prm, case_tensors *t, int use_lse,
                               int want_event, grads *g)
{
    support_poison(t->dq.base);
    support_poison(t->dk.base);
    support_poison(t->dv.base);
    cl_event ev = NULL;
    fcl_status st = fcl_attention_backward(ctx, prm, t->q, t->k, t->v, t->o, t->dout, use_lse ? t->lse : NULL,
                                           t->dq.view, t->dk.view, t->dv.view, want_event ? &ev : NULL);
    if (st != FCL_SUCCESS)
        return st;
    g->event_ok = want_event ? check_event(ctx, ev) : 1;
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "fcl_finish: %s", fcl_last_error(ctx));
    support_read(t->dq.view, g->dq);
    support_read(t->dk.view, g->dk);
    support_read(t->dv.view, g->dv);
    g->outside = outside_written(&t->dq) + outside_written(&t->dk) + outside_written(&t->dv);
    return FCL_SUCCESS;
}

/* ---------------------------------------------------------------- checks */

/* The float64 reference and naive gradients of one case. */
typedef struct refs {
    double *dq, *dk, *dv;
    double naive_q, naive_k, naive_v;
} refs;

static void refs_make(refs *r, const ref_attn_problem *p, fcl_dtype dt, const float *q, const float *k,
                      const float *v, const float *dout, size_t nq, size_t nk)
{
    r->dq = support_xmalloc(sizeof(double) * nq);
    r->dk = support_xmalloc(sizeof(double) * nk);
    r->dv = support_xmalloc(sizeof(double) * nk);
    float *nq_ = support_xmalloc(sizeof(float) * nq), *nk_ = support_xmalloc(sizeof(float) * nk),
          *nv_ = support_xmalloc(sizeof(float) * nk);
    ref_attention_backward(p, q, k, v, dout, r->dq, r->dk, r->dv);
    ref_attention_backward_naive(p, dt, q, k, v, dout, nq_, nk_, nv_);
    r->naive_q = support_max_err_f(nq_, r->dq, nq);
    r->naive_k = support_max_err_f(nk_, r->dk, nk);
    r->naive_v = support_max_err_f(nv_, r->dv, nk);
    free(nq_);
    free(nk_);
    free(nv_);
}

static void refs_free(refs *r)
{
    free(r->dq);
    free(r->dk);
    free(r->dv);
}

/* What the exact-zero check found. */
typedef struct zero_stats {
    size_t empty_rows, hidden_keys; /* (b, i) rows seeing no key, (b, j) keys seen by no row */
    size_t bad;                     /* elements there that are not exactly +-0 */
} zero_stats;

/* Excluded positions must hold exactly zero: dQ of rows that see no key, dK and dV of keys no
 * row sees (in every head). */
static zero_stats check_zeros(const bcase *c, const float *mask, const grads *g)
{
    zero_stats z = {0, 0, 0};
    for (int b = 0; b < c->B; b++) {
        for (int i = 0; i < c->Sq; i++) {
            int any = 0;
            for (int j = 0; j < c->Sk && !any; j++)
                any = visible(c, mask, b, i, j);
            if (any)
                continue;
            z.empty_rows++;
            const float *row = g->dq + ((size_t)b * c->Sq + i) * c->Hq * c->D;
            for (int e = 0; e < c->Hq * c->D; e++)
                z.bad += row[e] != 0.0f;
        }
        for (int j = 0; j < c->Sk; j++) {
            int any = 0;
            for (int i = 0; i < c->Sq && !any; i++)
                any = visible(c, mask, b, i, j);
            if (any)
                continue;
            z.hidden_keys++;
            const size_t o = ((size_t)b * c->Sk + j) * c->Hkv * c->D;
            for (int e = 0; e < c->Hkv * c->D; e++)
                z.bad += (g->dk[o + e] != 0.0f) + (g->dv[o + e] != 0.0f);
        }
    }
    return z;
}

/* The largest err / bound of dQ, dK and dV that compare has seen since the last table began
 * (check_table logs it, so a log shows each table's margin). */
static double worst_ratio[3];

/*
 * Checks one run: the rule for dQ, dK, dV, no NaN, exact zeros, nothing written outside the
 * views, a valid event. Reports a failure with the case's name; returns 1 when all hold.
 */
static int compare(const bcase *c, const char *name, const char *what, const refs *r, const grads *g,
                   const float *mask, size_t nq, size_t nk, zero_stats *zs)
{
    const double eq = support_max_err_f(g->dq, r->dq, nq), ek = support_max_err_f(g->dk, r->dk, nk);
    const double ev = support_max_err_f(g->dv, r->dv, nk);
    const double bq = support_bound(r->naive_q, 3.0), bk = support_bound(r->naive_k, 3.0);
    const double bv = support_bound(r->naive_v, 3.0), ratio[3] = {eq / bq, ek / bk, ev / bv};
    for (int i = 0; i < 3; i++)
        worst_ratio[i] = ratio[i] > worst_ratio[i] ? ratio[i] : worst_ratio[i];
    const size_t nan = support_count_nan(g->dq, nq) + support_count_nan(g->dk, nk) + support_count_nan(g->dv, nk);
    const zero_stats z = check_zeros(c, mask, g);
    if (zs)
        *zs = z;
    const int ok = eq <= bq && ek <= bk && ev <= bv && nan == 0 && z.bad == 0 && g->outside == 0 && g->event_ok;
    cr_expect(ok,
              "[%s] %s: dQ err %.3g bound %.3g | dK err %.3g bound %.3g | dV err %.3g bound %.3g | NaN %zu | "
              "non-zero excluded %zu (%zu empty rows, %zu hidden keys) | written outside views %zu | event %s",
              name, what, eq, bq, ek, bk, ev, bv, nan, z.bad, z.empty_rows, z.hidden_keys, g->outside, g->event_ok ? "ok" : "invalid");
    return ok;
}

/* Whether two runs gave identical bits; reports the difference otherwise. */
static int same_bits(const char *name, const char *what, const grads *a, const grads *b, size_t nq, size_t nk)
{
    double mq, mk, mv;
    long fq, fk, fv;
    const size_t dq = support_bit_diff(a->dq, b->dq, nq, &mq, &fq);
    const size_t dk = support_bit_diff(a->dk, b->dk, nk, &mk, &fk);
    const size_t dv = support_bit_diff(a->dv, b->dv, nk, &mv, &fv);
    cr_expect(dq + dk + dv == 0,
              "[%s] %s: bits differ: dQ %zu (max %.3g, first %ld) dK %zu (max %.3g, first %ld) "
              "dV %zu (max %.3g, first %ld)",
              name, what, dq, mq, fq, dk, mk, fk, dv, mv, fv);
    return dq + dk + dv == 0;
}

/* ---------------------------------------------------------------- one case */

/* Host data, device tensors, params and references of one case. */
typedef struct case_data {
    char name[320];
    fcl_dtype dt;
    size_t nq, nk;
    float *q, *k, *v, *dout, *mask, *slopes;
    case_tensors t;
    ref_attn_problem p;
    fcl_attn_params prm;
} case_data;

static void case_setup(fcl_context ctx, fcl_dtype dt, const bcase *c, uint64_t seed, case_data *cd)
{
    memset(cd, 0, sizeof *cd);
    describe(c, dt, cd->name, sizeof cd->name);
    cd->dt = dt;
    cd->nq = (size_t)c->B * c->Sq * c->Hq * c->D;
    cd->nk = (size_t)c->B * c->Sk * c->Hkv * c->D;
    cd->q = support_xmalloc(sizeof(float) * cd->nq);
    cd->dout = support_xmalloc(sizeof(float) * cd->nq);
    cd->k = support_xmalloc(sizeof(float) * cd->nk);
    cd->v = support_xmalloc(sizeof(float) * cd->nk);
    support_random(cd->q, cd->nq, seed * 8 + 1, -1.0f, 1.0f, dt);
    support_random(cd->k, cd->nk, seed * 8 + 2, -1.0f, 1.0f, dt);
    support_random(cd->v, cd->nk, seed * 8 + 3, -1.0f, 1.0f, dt);
    support_random(cd->dout, cd->nq, seed * 8 + 4, -1.0f, 1.0f, dt);
    make_tensors(ctx, dt, c, cd->q, cd->k, cd->v, cd->dout, &cd->t);

    ref_attn_problem p = {c->B, c->Sq, c->Sk, c->Hq, c->Hkv, c->D, (double)c->scale, c->causal,
                          c->wl, c->wr, (double)c->softcap, NULL, 0, NULL, 0};
    fcl_attn_params prm = fcl_attn_params_default();
    prm.scale = c->scale;
    prm.causal = c->causal;
    prm.window_left = c->wl;
    prm.window_right = c->wr;
    prm.softcap = c->softcap;
    if (c->mask != MASK_NONE) {
        const int per_batch = c->mask == MASK_BSK;
        const int64_t shape[2] = {c->B, c->Sk};
        const size_t n = per_batch ? (size_t)c->B * c->Sk : (size_t)c->Sk;
        cd->mask = support_xmalloc(sizeof(float) * n);
        make_mask(c, seed * 8 + 5, cd->mask, n);
        cd->t.mask = per_batch ? support_tensor(ctx, FCL_F32, 2, shape, cd->mask)
                               : support_tensor(ctx, FCL_F32, 1, shape + 1, cd->mask);
        p.key_mask = cd->mask;
        p.mask_per_batch = per_batch;
        prm.key_mask = cd->t.mask;
    }
    if (c->alibi != ALIBI_NONE) {
        const int per_batch = c->alibi == ALIBI_BH;
        const int64_t shape[2] = {c->B, c->Hq};
        const size_t n = per_batch ? (size_t)c->B * c->Hq : (size_t)c->Hq;
        cd->slopes = support_xmalloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) /* the usual geometric slopes, varied per batch */
            cd->slopes[i] = exp2f(-8.0f * (float)(i % c->Hq + 1) / (float)c->Hq) * (1.0f + 0.5f * (float)(i / c->Hq));
        cd->t.alibi = per_batch ? support_tensor(ctx, FCL_F32, 2, shape, cd->slopes)
                                : support_tensor(ctx, FCL_F32, 1, shape + 1, cd->slopes);
        p.alibi = cd->slopes;
        p.alibi_per_batch = per_batch;
        prm.alibi_slopes = cd->t.alibi;
    }
    cd->p = p;
    cd->prm = prm;
}

static void case_free(case_data *cd)
{
    release_tensors(&cd->t);
    free(cd->q);
    free(cd->k);
    free(cd->v);
    free(cd->dout);
    free(cd->mask);
    free(cd->slopes);
}

/* Runs the device forward into the case's O and LSE. */
static int case_forward(fcl_context ctx, case_data *cd)
{
    fcl_status st = fcl_attention_forward(ctx, &cd->prm, cd->t.q, cd->t.k, cd->t.v, cd->t.o, cd->t.lse, NULL);
    cr_expect(st == FCL_SUCCESS, "[%s] fcl_attention_forward: %s: %s", cd->name, fcl_status_string(st),
              fcl_last_error(ctx));
    return st == FCL_SUCCESS;
}

/* Runs the backward and reports a failed call; returns 1 on success. */
static int case_backward(fcl_context ctx, case_data *cd, int use_lse, int want_event, grads *g)
{
    fcl_status st = run_backward(ctx, &cd->prm, &cd->t, use_lse, want_event, g);
    cr_expect(st == FCL_SUCCESS, "[%s] fcl_attention_backward (LSE %s): %s: %s", cd->name,
              use_lse ? "given" : "NULL", fcl_status_string(st), fcl_last_error(ctx));
    return st == FCL_SUCCESS;
}

/*
 * Runs one case and checks it (see the top); `zs` (may be NULL) gets the exact-zero counts.
 * Returns 1 when it passes; every broken check is reported with the case's description.
 */
static int check_case(fcl_context ctx, fcl_dtype dt, const bcase *c, uint64_t seed, zero_stats *zs)
{
    case_data cd;
    case_setup(ctx, dt, c, seed, &cd);
    grads g1, g2;
    grads_alloc(&g1, cd.nq, cd.nk);
    grads_alloc(&g2, cd.nq, cd.nk);
    refs r;
    refs_make(&r, &cd.p, dt, cd.q, cd.k, cd.v, cd.dout, cd.nq, cd.nk);

    int ok = case_forward(ctx, &cd) && case_backward(ctx, &cd, 1, 1, &g1);
    ok = ok && compare(c, cd.name, "LSE given", &r, &g1, cd.mask, cd.nq, cd.nk, zs);
    if (ok && (c->checks & CHK_REPEAT))
        ok = case_backward(ctx, &cd, 1, 0, &g2) && same_bits(cd.name, "second run", &g1, &g2, cd.nq, cd.nk);
    if (ok && (c->checks & CHK_NOLSE)) {
        ok = case_backward(ctx, &cd, 0, 1, &g2);
        /* both: the rule, and the bits of the run with the forward's LSE */
        ok = ok && (compare(c, cd.name, "LSE NULL", &r, &g2, cd.mask, cd.nq, cd.nk, NULL) &
                    same_bits(cd.name, "LSE NULL vs given", &g1, &g2, cd.nq, cd.nk));
    }
    refs_free(&r);
    grads_free(&g1);
    grads_free(&g2);
    case_free(&cd);
    return ok;
}

/* Runs a table of cases of one dtype; fails the Test when any failed. */
static void check_table(fcl_dtype dt, const bcase *cases, size_t n, uint64_t seed0)
{
    fcl_context ctx = support_context();
    size_t failed = 0;
    worst_ratio[0] = worst_ratio[1] = worst_ratio[2] = 0.0;
    for (size_t i = 0; i < n; i++)
        failed += !check_case(ctx, dt, &cases[i], seed0 + i, NULL);
    fcl_context_release(ctx);
    cr_log_info("%s, %zu cases: largest err / bound dQ %.3g, dK %.3g, dV %.3g", fcl_dtype_name(dt), n,
                worst_ratio[0], worst_ratio[1], worst_ratio[2]);
    cr_assert(failed == 0, "%zu of %zu %s cases failed", failed, n, fcl_dtype_name(dt));
}

/*
 * Cold runs are dominated by compiling kernel variants (a forward and a backward program per
 * dtype, padded head dim, tiles and {softcap, mask, alibi}), and runs on slow devices (Mesa
 * llvmpipe) by the work, so the tables reuse few variants and keep shapes modest:
 *   plain  f32: pad 16, 64, 256;  f16: 32, 96, 160, 224;  bf16: 64, 128, 192
 *          (all nine padded head dims 16..256, every listed D);
 *   flags  f32 pad 64: none, each alone, all three (the kernels' #if blocks for softcap, mask
 *          and alibi are independent, so pairs add no code path); f16 pad 96 and bf16 pad
 *          128: none and all three (the dtype only changes loads and stores);
 * the exact-zero, determinism and chunk Tests use only these (chunks pin the tiles, which is
 * a new variant on devices whose default tiles differ).
 */

/* ---------------------------------------------------------------- head dims */

/* Every listed D at least once, on a small odd shape; MHA / GQA / MQA and causal rotate. */
static void head_dims(fcl_dtype dt, const int *dims, int n, uint64_t seed0)
{
    static const int heads[4][2] = {{2, 2}, {4, 2}, {3, 1}, {6, 2}};
    bcase cases[16];
    cr_assert(n <= 16);
    for (int i = 0; i < n; i++) {
        const bcase c = {37, 70, 2, heads[i % 4][0], heads[i % 4][1], dims[i], i % 2, U, U,
                         0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0};
        cases[i] = c;
    }
    check_table(dt, cases, (size_t)n, seed0);
}

Test(backward, head_dims_f32)
{
    static const int d[] = {1, 16, 40, 59, 64, 256};
    head_dims(FCL_F32, d, sizeof d / sizeof d[0], 100);
}
Test(backward, head_dims_f16)
{
    static const int d[] = {32, 80, 96, 160, 224};
    head_dims(FCL_F16, d, sizeof d / sizeof d[0], 200);
}
Test(backward, head_dims_bf16)
{
    static const int d[] = {40, 111, 128, 192};
    head_dims(FCL_BF16, d, sizeof d / sizeof d[0], 300);
}

/* ---------------------------------------------------------------- shapes */

/* The (Sq, Sk) grid at one head dim per dtype. Larger shapes use B = 1, the two largest one
 * head, and (1023, 1024) D = 16 (the float64 reference is slow there). */
static void shapes(fcl_dtype dt, int D, int Hq, int Hkv, int causal, int wl, int wr, int with_huge, uint64_t seed0)
{
    static const int sq_sk[][2] = {{1, 1},     {1, 7},     {7, 1},     {113, 203}, {128, 217},
                                   {108, 256}, {256, 512}, {512, 256}, {1023, 1024}};
    enum { N = sizeof sq_sk / sizeof sq_sk[0] };
    bcase cases[N];
    int n = 0;
    for (int i = 0; i < N; i++) {
        const int mid = sq_sk[i][0] >= 100, big = sq_sk[i][0] * sq_sk[i][1] >= 100000;
        const int huge = sq_sk[i][0] >= 1023;
        if (huge && !with_huge)
            continue;
        const bcase c = {sq_sk[i][0], sq_sk[i][1], mid ? 1 : 2, big ? 1 : Hq, big ? 1 : Hkv, huge ? 16 : D,
                         causal, wl, wr, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0};
        cases[n++] = c;
    }
    check_table(dt, cases, (size_t)n, seed0);
}

Test(backward, shapes_f32) { shapes(FCL_F32, 64, 2, 2, 0, U, U, 1, 400); }
Test(backward, shapes_f16) { shapes(FCL_F16, 32, 4, 2, 1, U, U, 0, 500); }
Test(backward, shapes_bf16) { shapes(FCL_BF16, 40, 3, 1, 0, 100, 20, 0, 600); }

/* ---------------------------------------------------------------- flags and layouts */

/* Every flag alone and in combination, both strided layouts; Sq < Sk, Sq > Sk (empty early
 * rows with causal) and Sq == Sk. D is set per dtype; ALL_DT cases run in every dtype. Scores
 * of [-1, 1) inputs stay below ~1, so the softcaps are small enough to bite. */
static const bcase flag_cases[] = {
    /* Sq Sk B Hq Hkv D causal wl wr softcap scale mask alibi layout checks */
    {61, 61, 2, 4, 2, 0, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    {40, 100, 2, 4, 2, 0, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, ALL_DT},
    {100, 40, 2, 4, 2, 0, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, ALL_DT},
    {100, 40, 1, 2, 2, 0, 1, U, 5, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0}, /* wr ignored */
    /* windows: left only, right only, both; Sq < Sk and Sq > Sk */
    {40, 100, 2, 4, 2, 0, 0, 20, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    {100, 40, 2, 4, 2, 0, 0, 20, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    {40, 100, 2, 4, 2, 0, 0, U, 7, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    {100, 40, 2, 4, 2, 0, 0, U, 7, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    {61, 61, 2, 6, 2, 0, 0, U, 0, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    {40, 100, 2, 4, 2, 0, 0, 16, 9, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, ALL_DT},
    {100, 40, 2, 4, 2, 0, 0, 16, 9, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    {61, 61, 1, 4, 1, 0, 0, 0, 0, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    {100, 40, 2, 4, 2, 0, 1, 30, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    /* custom scale */
    {40, 100, 2, 4, 2, 0, 0, U, U, 0, 0.3f, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, ALL_DT},
    {100, 40, 2, 4, 2, 0, 1, U, U, 0, 1.5f, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    /* softcap alone, with the default scale and with scale 1 */
    {40, 100, 2, 4, 2, 0, 0, U, U, 0.5f, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    {61, 61, 2, 6, 2, 0, 1, U, U, 2.0f, 1.0f, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0},
    /* key masks: [B,Sk] with an all-zero batch row, [Sk], [Sk] all zero */
    {40, 100, 3, 4, 2, 0, 0, U, U, 0, 0, MASK_BSK, ALIBI_NONE, LAYOUT_BSHD, 0},
    {100, 40, 2, 4, 2, 0, 0, U, U, 0, 0, MASK_SK, ALIBI_NONE, LAYOUT_BSHD, 0},
    {13, 21, 2, 2, 1, 0, 0, U, U, 0, 0, MASK_SK_ZERO, ALIBI_NONE, LAYOUT_BSHD, 0},
    {61, 61, 2, 4, 2, 0, 1, 10, U, 0, 0, MASK_BSK, ALIBI_NONE, LAYOUT_BSHD, 0},
    /* ALiBi [Hq] and [B,Hq] */
    {61, 61, 2, 4, 2, 0, 0, U, U, 0, 0, MASK_NONE, ALIBI_H, LAYOUT_BSHD, 0},
    {40, 100, 2, 4, 2, 0, 1, U, U, 0, 0, MASK_NONE, ALIBI_BH, LAYOUT_BSHD, 0},
    /* all three, with windows, scales, both mask and both ALiBi forms */
    {40, 100, 2, 4, 2, 0, 0, U, U, 0.5f, 0, MASK_BSK, ALIBI_H, LAYOUT_BSHD, 0},
    {100, 40, 2, 6, 2, 0, 1, U, U, 0.5f, 0.4f, MASK_SK, ALIBI_BH, LAYOUT_BSHD, 0},
    {61, 61, 2, 4, 1, 0, 1, U, U, 1.0f, 0, MASK_SK, ALIBI_H, LAYOUT_BSHD, 0},
    {100, 40, 3, 4, 2, 0, 1, 25, U, 1.0f, 0.7f, MASK_BSK, ALIBI_BH, LAYOUT_BSHD, ALL_DT},
    {40, 100, 2, 4, 1, 0, 0, 40, 11, 0.5f, 0, MASK_SK, ALIBI_BH, LAYOUT_BSHD, ALL_DT},
    {40, 100, 3, 6, 2, 0, 0, 30, 5, 0.7f, 0.25f, MASK_BSK, ALIBI_H, LAYOUT_BSHD, 0},
    /* strided layouts: [B,H,S,D] views and padded views; LSE = NULL on some */
    {70, 150, 2, 4, 2, 0, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BHSD, CHK_NOLSE},
    {100, 40, 2, 4, 2, 0, 1, 25, U, 0.5f, 0, MASK_BSK, ALIBI_H, LAYOUT_BHSD, ALL_DT},
    {70, 150, 1, 4, 2, 0, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_PADDED, ALL_DT},
    {40, 100, 2, 6, 2, 0, 1, U, U, 0.5f, 0, MASK_SK, ALIBI_BH, LAYOUT_PADDED, CHK_NOLSE | ALL_DT},
    {100, 40, 3, 4, 1, 0, 0, 20, 20, 1.0f, 0, MASK_BSK, ALIBI_BH, LAYOUT_PADDED, 0},
};

/* The table at head dim D: every case in f32, the ALL_DT cases in the other dtypes. */
static void flags(fcl_dtype dt, int D, uint64_t seed0)
{
    enum { N = sizeof flag_cases / sizeof flag_cases[0] };
    bcase cases[N];
    size_t n = 0;
    for (size_t i = 0; i < N; i++)
        if (dt == FCL_F32 || (flag_cases[i].checks & ALL_DT)) {
            cases[n] = flag_cases[i];
            cases[n++].D = D;
        }
    check_table(dt, cases, n, seed0);
}

Test(backward, flags_f32) { flags(FCL_F32, 64, 700); }
Test(backward, flags_f16) { flags(FCL_F16, 80, 800); }
Test(backward, flags_bf16) { flags(FCL_BF16, 111, 900); }
/* the padded head dims of Hopper's wgmma backward (64 and 128), in both of its dtypes */
Test(backward, flags_wgmma_dims)
{
    flags(FCL_F16, 64, 950);
    flags(FCL_BF16, 128, 1000);
}

/* ---------------------------------------------------------------- exact zeros */

/* Cases built to have keys no query sees and rows that see no key; besides the checks of every
 * case, the Test asserts that such positions exist. */
Test(backward, excluded_exact_zero)
{
    static const struct {
        fcl_dtype dt;
        bcase c;
        int want_rows, want_keys;
    } z[] = {
        /* [B,Sk] mask: last batch row fully masked (all its rows empty, all its keys hidden) */
        {FCL_F32, {40, 90, 3, 4, 2, 59, 0, U, U, 0, 0, MASK_BSK, ALIBI_NONE, LAYOUT_BSHD, 0}, 1, 1},
        /* window: keys left of every window (Sq < Sk) and right of every window */
        {FCL_F16, {30, 150, 2, 4, 1, 96, 0, 10, 3, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0}, 0, 1},
        /* causal Sq > Sk: early rows see nothing; masked keys; padded views */
        {FCL_BF16, {150, 40, 2, 4, 2, 128, 1, U, U, 0.5f, 0, MASK_SK, ALIBI_H, LAYOUT_PADDED, 0}, 1, 1},
        /* shared all-zero mask: everything excluded */
        {FCL_F32, {33, 47, 2, 2, 2, 40, 0, U, U, 0, 0, MASK_SK_ZERO, ALIBI_NONE, LAYOUT_BHSD, CHK_NOLSE}, 1, 1},
    };
    fcl_context ctx = support_context();
    int ok = 1;
    for (size_t i = 0; i < sizeof z / sizeof z[0]; i++) {
        zero_stats zs = {0, 0, 0};
        ok &= check_case(ctx, z[i].dt, &z[i].c, 1100 + i, &zs);
        cr_expect((!z[i].want_rows || zs.empty_rows > 0) && (!z[i].want_keys || zs.hidden_keys > 0),
                  "zero case %zu: %zu empty rows, %zu hidden keys: not what it was built for", i, zs.empty_rows,
                  zs.hidden_keys);
        ok &= (!z[i].want_rows || zs.empty_rows > 0) && (!z[i].want_keys || zs.hidden_keys > 0);
    }
    fcl_context_release(ctx);
    cr_assert(ok, "exact-zero cases failed");
}

/* ---------------------------------------------------------------- determinism and LSE = NULL */

Test(backward, deterministic_and_lse_null)
{
    static const struct {
        fcl_dtype dt;
        bcase c;
    } d[] = {
        {FCL_F32, {130, 250, 2, 4, 2, 64, 1, U, U, 0.5f, 0, MASK_BSK, ALIBI_H, LAYOUT_BSHD, CHK_REPEAT | CHK_NOLSE}},
        {FCL_F16, {100, 160, 2, 2, 1, 96, 0, 50, 10, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, CHK_REPEAT | CHK_NOLSE}},
        {FCL_BF16, {120, 64, 2, 4, 2, 111, 1, U, U, 0, 0.2f, MASK_NONE, ALIBI_NONE, LAYOUT_BHSD, CHK_REPEAT | CHK_NOLSE}},
        {FCL_F32, {1, 7, 2, 4, 1, 40, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_PADDED, CHK_REPEAT | CHK_NOLSE}},
    };
    fcl_context ctx = support_context();
    int ok = 1;
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        ok &= check_case(ctx, d[i].dt, &d[i].c, 1200 + i, NULL);
    fcl_context_release(ctx);
    cr_assert(ok, "determinism / LSE = NULL cases failed");
}

/* ---------------------------------------------------------------- chunked launches */

/*
 * With the tiles pinned (16x16 on every device), a loop cap of 20000 iterations splits the
 * dK/dV and dQ kernels into several launches carrying their accumulators; the gradients must
 * equal the one-launch gradients bit for bit (and meet the rule). One forward feeds both.
 */
static int check_chunked(fcl_context ctx, fcl_dtype dt, const bcase *c, uint64_t seed)
{
    case_data cd;
    case_setup(ctx, dt, c, seed, &cd);
    grads g1, g2;
    grads_alloc(&g1, cd.nq, cd.nk);
    grads_alloc(&g2, cd.nq, cd.nk);
    const int use_lse = !(c->checks & CHK_NOLSE);
    support_fix_tiles(1);
    support_force_chunks(0);
    int ok = case_forward(ctx, &cd) && case_backward(ctx, &cd, use_lse, 1, &g1);
    support_force_chunks(1);
    ok = ok && case_backward(ctx, &cd, use_lse, 0, &g2);
    support_force_chunks(0);
    support_fix_tiles(0);
    ok = ok && same_bits(cd.name, "chunked vs one launch", &g1, &g2, cd.nq, cd.nk);
    if (ok) {
        refs r;
        refs_make(&r, &cd.p, dt, cd.q, cd.k, cd.v, cd.dout, cd.nq, cd.nk);
        ok = compare(c, cd.name, "chunked", &r, &g2, cd.mask, cd.nq, cd.nk, NULL);
        refs_free(&r);
    }
    grads_free(&g1);
    grads_free(&g2);
    case_free(&cd);
    return ok;
}

/* A case of one dtype. */
typedef struct dt_case {
    fcl_dtype dt;
    bcase c;
} dt_case;

/* The cases that split one backward into several launches (loop-cap chunks, stored-dS key
 * ranges): GQA, causal, softcap + mask + ALiBi, strided, LSE recomputed (a chunked forward too);
 * and D 256, MQA, causal with a window, Sq > Sk (one query tile per chunked dK/dV launch). */
static const dt_case split_cases[] = {
    {FCL_F32, {100, 260, 2, 4, 2, 64, 1, U, U, 0.5f, 0, MASK_BSK, ALIBI_BH, LAYOUT_PADDED, CHK_NOLSE}},
    {FCL_BF16, {150, 120, 1, 2, 1, 256, 1, 60, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0}},
};

Test(backward, chunks)
{
    fcl_context ctx = support_context();
    int ok = 1;
    for (size_t i = 0; i < sizeof split_cases / sizeof split_cases[0]; i++)
        ok &= check_chunked(ctx, split_cases[i].dt, &split_cases[i].c, 1300 + i);
    fcl_context_release(ctx);
    cr_assert(ok, "chunked cases failed");
}

/* ---------------------------------------------------------------- stored dS */

/*
 * The backward with dS stored by the dK/dV kernel and read back by the dQ kernel, in one launch
 * pair (the default budget) and in one pair per dK/dV block (FLASHCL_BACKWARD_DS_BYTES set to
 * one block's dS), against the recomputing form (FLASHCL_BACKWARD_DS_BYTES=0): every run meets
 * the rule; the register-blocked and CPU kernels (`exact`) give the recomputing form's bits, the
 * tensor-core ones (whose dS comes from S^T = K Q^T products instead of S = Q K^T) the same bits
 * on a second run.
 */
static int check_stored_scores(fcl_context ctx, fcl_dtype dt, const bcase *c, uint64_t seed, int exact)
{
    case_data cd;
    case_setup(ctx, dt, c, seed, &cd);
    const int block = support_backward_key_block(ctx, dt, c->D);
    char one_block[32]; /* dS of one dK/dV block: every query row of every head */
    snprintf(one_block, sizeof one_block, "%lld", (long long)c->B * c->Hq * c->Sq * block * 4);
    const char *budgets[4] = {"0", NULL, one_block, one_block};
    grads g[4];
    const int use_lse = !(c->checks & CHK_NOLSE);
    int ok = case_forward(ctx, &cd);
    for (int i = 0; i < 4; i++) {
        grads_alloc(&g[i], cd.nq, cd.nk);
        if (budgets[i])
            setenv("FLASHCL_BACKWARD_DS_BYTES", budgets[i], 1);
        else
            unsetenv("FLASHCL_BACKWARD_DS_BYTES");
        ok = ok && case_backward(ctx, &cd, use_lse, i == 0, &g[i]);
    }
    unsetenv("FLASHCL_BACKWARD_DS_BYTES");
    ok = ok && same_bits(cd.name, "a pair per block, second run", &g[2], &g[3], cd.nq, cd.nk);
    if (exact) {
        ok = ok && same_bits(cd.name, "one launch pair vs recomputed dS", &g[0], &g[1], cd.nq, cd.nk);
        ok = ok && same_bits(cd.name, "a pair per block vs recomputed dS", &g[0], &g[2], cd.nq, cd.nk);
    }
    if (ok) {
        refs r;
        refs_make(&r, &cd.p, dt, cd.q, cd.k, cd.v, cd.dout, cd.nq, cd.nk);
        static const char *const what[3] = {"dS recomputed", "dS stored, one pair", "dS stored, a pair per block"};
        for (int i = 0; i < 3; i++)
            ok &= compare(c, cd.name, what[i], &r, &g[i], cd.mask, cd.nq, cd.nk, NULL);
        refs_free(&r);
    }
    for (int i = 0; i < 4; i++)
        grads_free(&g[i]);
    case_free(&cd);
    return ok;
}

/* The cases on the register-blocked kernels (FLASHCL_BACKWARD_PATH=blocked) and on the device's
 * own path where that stores dS (the CPU kernels; the tensor-core ones from padded head dim
 * 192); skipped (reported as skipped) where none runs (a loop cap, as on llvmpipe). */
Test(backward, stored_scores)
{
    /* split_cases, the first also in F16 (F32 runs no tensor cores), and: */
    const dt_case st[] = {
        split_cases[0],
        {FCL_F16, split_cases[0].c},
        split_cases[1],
        /* odd head dim, permuted views, a right window */
        {FCL_F16, {77, 201, 2, 3, 3, 40, 0, 30, 9, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BHSD, 0}},
        /* D 176 (the tensor cores' padded 192, where they store dS), GQA, causal, Sk > Sq */
        {FCL_BF16, {90, 300, 1, 4, 2, 176, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_BSHD, 0}},
    };
    fcl_context ctx = support_context();
    int ok = 1, ran = 0;
    char given[32] = ""; /* the run's own FLASHCL_BACKWARD_PATH (nvidia-wgmma, say), restored below */
    if (getenv("FLASHCL_BACKWARD_PATH"))
        snprintf(given, sizeof given, "%s", getenv("FLASHCL_BACKWARD_PATH"));
    setenv("FLASHCL_BACKWARD_PATH", "blocked", 1);
    const char *path = fcl_attention_backward_path(ctx, FCL_F32, 64);
    if (path && strcmp(path, "blocked") == 0) {
        ran++;
        for (size_t i = 0; i < sizeof st / sizeof st[0]; i++)
            ok &= check_stored_scores(ctx, st[i].dt, &st[i].c, 1350 + i, 1);
    }
    if (given[0])
        setenv("FLASHCL_BACKWARD_PATH", given, 1);
    else
        unsetenv("FLASHCL_BACKWARD_PATH");
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        path = fcl_attention_backward_path(ctx, st[i].dt, st[i].c.D);
        const int cpu = path && strcmp(path, "cpu") == 0;
        if (cpu || (path && strncmp(path, "nvidia-", 7) == 0)) {
            ran++;
            ok &= check_stored_scores(ctx, st[i].dt, &st[i].c, 1360 + i, cpu);
        }
    }
    fcl_context_release(ctx);
    if (!ran)
        cr_skip_test("none of the blocked, CPU or tensor-core backwards runs on this device");
    cr_assert(ok, "stored-dS cases failed");
}

/* ---------------------------------------------------------------- O = NULL, interleaved grads */

/* The backward of one random problem into dQ and into dK, dV given as the two halves of one
 * [B, Sk, 2, Hkv, D] buffer (the fused dKV layout), with O and LSE NULL (both recomputed): the
 * gradients equal those of separate dK, dV buffers with the forward's O and LSE, bit for bit,
 * and no element of the fused buffer is left unwritten. A recomputed O always comes from the
 * portable forward kernel (fcl_attention_forward_path), so the forward here is that one too. */
Test(backward, interleaved_grads_and_o_null)
{
    const int64_t B = 2, Sq = 37, Sk = 70, Hq = 4, Hkv = 2, D = 64;
    const int64_t qs[4] = {B, Sq, Hq, D}, ks[4] = {B, Sk, Hkv, D}, ls[3] = {B, Hq, Sq};
    const int64_t kv_st[4] = {Sk * 2 * Hkv * D, 2 * Hkv * D, D, 1}, nk = B * Sk * Hkv * D;
    const fcl_dtype dt = FCL_F16;
    fcl_context ctx = support_context();
    fcl_tensor q = support_tensor_random(ctx, dt, 4, qs, 1401), k = support_tensor_random(ctx, dt, 4, ks, 1402);
    fcl_tensor v = support_tensor_random(ctx, dt, 4, ks, 1403), dout = support_tensor_random(ctx, dt, 4, qs, 1404);
    fcl_tensor o = support_tensor(ctx, dt, 4, qs, NULL), lse = support_tensor(ctx, FCL_F32, 3, ls, NULL);
    fcl_tensor dq = support_tensor(ctx, dt, 4, qs, NULL), dk = support_tensor(ctx, dt, 4, ks, NULL);
    fcl_tensor dv = support_tensor(ctx, dt, 4, ks, NULL), dq2 = support_tensor(ctx, dt, 4, qs, NULL);
    const int64_t fused_n = 2 * nk;
    fcl_tensor fused = support_tensor(ctx, dt, 1, &fused_n, NULL);
    fcl_tensor dk2 = support_view(fused, 4, ks, kv_st, 0), dv2 = support_view(fused, 4, ks, kv_st, Hkv * D);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.causal = 1;
    support_poison(fused);
    setenv("FLASHCL_FORWARD_PATH", "portable", 1);
    cr_assert(fcl_attention_forward(ctx, &p, q, k, v, o, lse, NULL) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    unsetenv("FLASHCL_FORWARD_PATH");
    cr_assert(fcl_attention_backward(ctx, &p, q, k, v, o, dout, lse, dq, dk, dv, NULL) == FCL_SUCCESS, "%s",
              fcl_last_error(ctx));
    cr_assert(fcl_attention_backward(ctx, &p, q, k, v, NULL, dout, NULL, dq2, dk2, dv2, NULL) == FCL_SUCCESS,
              "interleaved dK/dV, O = NULL: %s", fcl_last_error(ctx));
    const size_t nq = (size_t)(B * Sq * Hq * D);
    float *a = support_xmalloc(sizeof(float) * nq), *b = support_xmalloc(sizeof(float) * nq);
    float *f = support_xmalloc(sizeof(float) * (size_t)fused_n), *c = support_xmalloc(sizeof(float) * (size_t)nk);
    const fcl_tensor sep[3] = {dq, dk, dv}, fus[3] = {dq2, dk2, dv2};
    for (int i = 0; i < 3; i++) {
        const size_t n = (size_t)fcl_tensor_numel(sep[i]);
        support_read(sep[i], i ? c : a);
        support_read(fus[i], b);
        double md;
        long first;
        cr_assert(support_bit_diff(i ? c : a, b, n, &md, &first) == 0,
                  "gradient %d: interleaved/O = NULL differs from separate buffers (first at %ld, max %g)", i, first,
                  md);
    }
    support_read(fused, f);
    cr_assert(support_count_nan(f, (size_t)fused_n) == 0, "the fused dKV buffer has unwritten elements");
    /* the same halves at one offset do overlap: refused */
    fcl_tensor same = support_view(fused, 4, ks, kv_st, 0);
    cr_assert(fcl_attention_backward(ctx, &p, q, k, v, o, dout, lse, dq2, dk2, same, NULL) ==
              FCL_ERR_INVALID_ARGUMENT);
    fcl_tensor all[] = {q, k, v, dout, o, lse, dq, dk, dv, dq2, fused, dk2, dv2, same};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    free(a);
    free(b);
    free(f);
    free(c);
    fcl_context_release(ctx);
}
