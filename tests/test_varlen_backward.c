/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcl_attention_varlen_backward and fcl_attention_packed_qkv_backward on the FLASHCL_DEVICE
 * device.
 *
 * Each case: random Q, K, V, dO in [-1, 1) rounded to the dtype (fixed seeds); the matching
 * forward on the device gives O and LSE; the gradients (views in the middle of NaN-poisoned
 * buffers) are computed twice and must be bit-identical (determinism), nothing outside the
 * views may be written, and every sequence is compared on its own with the float64 reference
 * of that sequence as a dense B = 1 problem (its own Sq, Sk; bottom-right causal and windows;
 * its keys' mask values; its ALiBi row) under the DESIGN.md rule for gradients, per tensor:
 * max |kernel - float64| <= 3 * max |naive - float64| + 1e-5. No NaN in any written row; a
 * head row whose reference gradient is exactly zero (no visible key / seen by no query) must
 * be exactly zero; keys of an empty query sequence get dK = dV = 0 and rows of an empty key
 * sequence dQ = 0, exactly.
 *
 * Varlen: random packings (many short, one long among short, empty sequences on either side,
 * single tokens, Sq != Sk), all dtypes, MHA/GQA/MQA, causal, windows, softcap, key mask
 * [total_k], ALiBi [Hq] and [B, Hq], head dims 1..256, LSE given or NULL (recomputed),
 * strided views. Packed: QKV [L, 3, H, D] with seq_bounds [L, 2] against the reference
 * (window w as w/2 on each side, causal too), and, given the forward's LSE, bit-identical to
 * the varlen backward of the same data (Q, K, V views of the QKV buffer, cu_seqlens of the same
 * packing) on the kernels whose tiles sit on one grid for both (not the tensor cores, whose varlen
 * tiles start at each sequence's first row and key); without the LSE each recomputes it by its
 * own forward form, and those differ in the last bits. Where the bits may differ, the varlen
 * twin is checked against the reference.
 * Isolation: changing one sequence's Q, K/V or dO leaves every other sequence's gradients
 * bit-identical. Placement: leaving out the sequences before one does not change its gradients'
 * bits. Chunked launches (FLASHCL_LOOP_LIMIT) equal one launch bit for bit.
 * Garbage prefix sums / seq_bounds: the call succeeds and writes nothing outside dQ, dK, dV
 * (guards stay as they were) and nothing into the inputs; values are not checked.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention_backward.h"
#include "support.h"
#include "support_varlen.h"

#define U (-1) /* unbounded window side */

/* ---------------------------------------------------------------- small helpers */

static float *xfloats(size_t n) { return support_xmalloc(sizeof(float) * n); }

static void finish(fcl_context ctx)
{
    fcl_status st = fcl_finish(ctx);
    cr_assert(st == FCL_SUCCESS, "fcl_finish: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
}

/* ---------------------------------------------------------------- guarded views */

enum { GUARD = 97 }; /* elements before and after every gradient view */

/* A view of `shape` (last dim padded by `pad` elements in the strides) GUARD elements into a
 * 1-D buffer of its own with GUARD elements to spare after it. */
typedef struct gview {
    fcl_tensor base, view;
    int ndim;
    int64_t base_n, shape[4], strides[4], offset;
} gview;

static void gview_make(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape, int pad, gview *g)
{
    memset(g, 0, sizeof *g);
    g->ndim = ndim;
    int64_t span = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        g->shape[i] = shape[i];
        g->strides[i] = span;
        span *= i == ndim - 1 ? shape[i] + pad : shape[i];
    }
    g->offset = GUARD;
    g->base_n = span + 2 * GUARD;
    g->base = support_tensor(ctx, dt, 1, &g->base_n, NULL);
    g->view = support_view(g->base, ndim, g->shape, g->strides, g->offset);
}

static void gview_release(gview *g)
{
    fcl_tensor_release(g->view);
    fcl_tensor_release(g->base);
    memset(g, 0, sizeof *g);
}

/* Elements of g's buffer outside the view that are no longer NaN (after a NaN poison). */
static size_t gview_outside(const gview *g)
{
    float *b = xfloats((size_t)g->base_n);
    support_read(g->base, b);
    size_t n = support_touched_outside(b, g->base_n, g->ndim, g->shape, g->strides, g->offset);
    free(b);
    return n;
}

/* 1 for each element of g's buffer that the view addresses. */
static char *gview_inside(const gview *g)
{
    char *in = calloc((size_t)g->base_n, 1);
    cr_assert(in != NULL);
    int64_t sh[4] = {1, 1, 1, 1}, st[4] = {0, 0, 0, 0}, i[4];
    for (int d = 0; d < g->ndim; d++) {
        sh[4 - g->ndim + d] = g->shape[d];
        st[4 - g->ndim + d] = g->strides[d];
    }
    for (i[0] = 0; i[0] < sh[0]; i[0]++)
        for (i[1] = 0; i[1] < sh[1]; i[1]++)
            for (i[2] = 0; i[2] < sh[2]; i[2]++)
                for (i[3] = 0; i[3] < sh[3]; i[3]++)
                    in[g->offset + i[0] * st[0] + i[1] * st[1] + i[2] * st[2] + i[3] * st[3]] = 1;
    return in;
}

/* ---------------------------------------------------------------- per-sequence check */

/* Result of comparing one sequence (or all of them: the first failure and counts). */
typedef struct gcheck {
    int failed_seqs, first_seq, first_t, first_lq, first_lk;
    double first_err, first_naive;
    size_t zero_bad;  /* elements not exactly 0 in head rows that receive no term (zero_rows_bad) */
    size_t empty_bad; /* elements not exactly 0 in rows of a sequence empty on the other side */
    size_t nan;       /* NaN in the gradients */
    int empty_q_seqs, empty_k_seqs; /* sequences checked that way (coverage) */
    double worst_ratio;             /* max over tensors of err / (3 * naive + 1e-5) */
} gcheck;

static const char *const grad_name[3] = {"dQ", "dK", "dV"};

static void gcheck_init(gcheck *r)
{
    memset(r, 0, sizeof *r);
    r->first_seq = -1;
}

/* Elements not exactly 0 in the head rows of gradient t (0 dQ [Sq, Hq, D], 1 dK and 2 dV
 * [Sk, Hkv, D]) that receive no term at all: query rows that see no key, key rows that no
 * query sees (a leak or a stray write shows here). Rows that are 0 only by cancellation (a
 * query that sees one key: dS = P (dP - delta) = 0) are left to the tolerance check, since
 * dP and delta are sums taken in different orders. */
static size_t zero_rows_bad(const ref_attn_problem *p, int t, const float *g)
{
    const int rows = t == 0 ? p->Sq : p->Sk, heads = t == 0 ? p->Hq : p->Hkv, other = t == 0 ? p->Sk : p->Sq;
    size_t bad = 0;
    for (int r = 0; r < rows; r++) {
        int seen = 0;
        for (int o = 0; o < other && !seen; o++)
            seen = t == 0 ? ref_key_visible(p, 0, r, o) : ref_key_visible(p, 0, o, r);
        for (size_t e = 0; !seen && e < (size_t)heads * (size_t)p->D; e++)
            bad += g[(size_t)r * (size_t)heads * (size_t)p->D + e] != 0.0f;
    }
    return bad;
}

static size_t nonzero(const float *g, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += g[i] != 0.0f;
    return k;
}

/*
 * Sequence `seq` as the dense problem p (B = 1): Q, dO [Sq, Hq, D], K, V [Sk, Hkv, D] and the
 * kernel's gradients gq, gk, gv in the same layouts. Accumulates into r.
 */
static void check_sequence(const ref_attn_problem *p, fcl_dtype dt, int seq, const float *Q, const float *K,
                           const float *V, const float *dO, const float *gq, const float *gk, const float *gv,
                           gcheck *r)
{
    const size_t nq = (size_t)p->Sq * p->Hq * p->D, nk = (size_t)p->Sk * p->Hkv * p->D;
    if (p->Sq == 0 || p->Sk == 0) {
        if (p->Sq == 0 && p->Sk > 0) {
            r->empty_bad += nonzero(gk, nk) + nonzero(gv, nk);
            r->empty_q_seqs++;
        }
        if (p->Sk == 0 && p->Sq > 0) {
            r->empty_bad += nonzero(gq, nq);
            r->empty_k_seqs++;
        }
        return;
    }
    double *ref[3] = {support_xmalloc(sizeof(double) * nq), support_xmalloc(sizeof(double) * nk),
                      support_xmalloc(sizeof(double) * nk)};
    float *nv[3] = {xfloats(nq), xfloats(nk), xfloats(nk)};
    const float *got[3] = {gq, gk, gv};
    const size_t n[3] = {nq, nk, nk};
    ref_attention_backward(p, Q, K, V, dO, ref[0], ref[1], ref[2]);
    ref_attention_backward_naive(p, dt, Q, K, V, dO, nv[0], nv[1], nv[2]);
    int ok = 1;
    for (int t = 0; t < 3; t++) {
        const double err = support_max_err_f(got[t], ref[t], n[t]), naive = support_max_err_f(nv[t], ref[t], n[t]);
        const double ratio = err / (3.0 * naive + 1e-5);
        if (!(ratio <= r->worst_ratio))
            r->worst_ratio = ratio;
        if (!support_within(err, naive, 3.0) && ok) {
            ok = 0;
            if (r->first_seq < 0) {
                r->first_seq = seq;
                r->first_t = t;
                r->first_lq = p->Sq;
                r->first_lk = p->Sk;
                r->first_err = err;
                r->first_naive = naive;
            }
        }
        r->zero_bad += zero_rows_bad(p, t, got[t]);
        free(ref[t]);
        free(nv[t]);
    }
    r->failed_seqs += !ok;
}

static int gcheck_ok(const gcheck *r)
{
    return r->failed_seqs == 0 && r->zero_bad == 0 && r->empty_bad == 0 && r->nan == 0;
}

/* Appends the failure summary of r to buf. */
static void gcheck_describe(const gcheck *r, int nseq, char *buf, size_t n)
{
    if (r->first_seq >= 0)
        snprintf(buf, n,
                 "%d of %d sequences out of tolerance (first: seq %d (Sq %d Sk %d) %s err %.3g > 3 * naive "
                 "%.3g + 1e-5) | %zu NaN | %zu elements not 0 in rows that see no key / no query | %zu elements not 0 "
                 "in sequences empty on the other side",
                 r->failed_seqs, nseq, r->first_seq, r->first_lq, r->first_lk, grad_name[r->first_t], r->first_err,
                 r->first_naive, r->nan, r->zero_bad, r->empty_bad);
    else
        snprintf(buf, n,
                 "all %d sequences within tolerance (worst err/bound %.3g) | %zu NaN | %zu elements not 0 in rows "
                 "that see no key / no query | %zu elements not 0 in sequences empty on the other side",
                 nseq, r->worst_ratio, r->nan, r->zero_bad, r->empty_bad);
}

/* Elements whose bits differ between two gradient sets (each of three tensors). */
static size_t grads_bit_diff(float *const a[3], float *const b[3], const size_t n[3], int *first_t, long *first_i,
                             double *max_diff)
{
    size_t total = 0;
    *first_t = -1;
    *first_i = -1;
    *max_diff = 0.0;
    for (int t = 0; t < 3; t++) {
        double md;
        long f;
        size_t k = support_bit_diff(a[t], b[t], n[t], &md, &f);
        if (k && *first_t < 0) {
            *first_t = t;
            *first_i = f;
        }
        if (!(md <= *max_diff))
            *max_diff = md;
        total += k;
    }
    return total;
}

/* ================================================================ varlen */

/* PK_LONG: one sequence of 140..180 query and 240..280 key rows; PK_SHORT empties one side of
 * one sequence in six. */
static const int empty_list[][2] = {{0, 0}, {0, 5}, {4, 0}, {6, 6}, {0, 0}, {1, 0}, {0, 1},
                                    {9, 17}, {17, 9}, {1, 1}, {3, 0}, {0, 3}, {0, 0}};
static const support_packing_style style = {11, {140, 180}, {240, 280}, empty_list,
                                            (int)(sizeof empty_list / sizeof empty_list[0])};

typedef support_packing packing;

static packing make_packing(int kind, int B, uint64_t seed) { return support_packing_make(&style, kind, B, seed); }


typedef struct vcase {
    int pack, B;
    int Hq, Hkv, D;
    int causal, wl, wr;
    float softcap, scale;
    int mask, alibi;
    int lse;     /* 1: pass the forward's LSE; 0: NULL (recomputed) */
    int strided; /* padded Q/dO/LSE, K and V interleaved, padded gradient views */
    int slack;   /* added to the exact max_seqlen_q / _k */
} vcase;

static void vdescribe(const vcase *c, fcl_dtype dt, const packing *pk, char *buf, size_t n)
{
    snprintf(buf, n,
             "varlen %s pack%d B%d (total_q %d total_k %d max %d/%d) Hq%d Hkv%d D%d causal%d wl%d wr%d "
             "softcap%g scale%g mask%d alibi%d lse%d strided%d slack%d",
             fcl_dtype_name(dt), c->pack, pk->B, pk->tq, pk->tk, pk->maxq, pk->maxk, c->Hq, c->Hkv, c->D,
             c->causal, c->wl, c->wr, (double)c->softcap, (double)c->scale, c->mask, c->alibi, c->lse,
             c->strided, c->slack);
}

typedef struct vhost {
    float *q, *k, *v, *dout, *mask, *slopes;
} vhost;

static void vhost_free(vhost *h)
{
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->dout);
    free(h->mask);
    free(h->slopes);
    memset(h, 0, sizeof *h);
}

typedef struct vtensors {
    fcl_tensor q, k, v, o, dout, lse, cq, ck, mask, alibi;
    fcl_tensor q_base, kv_base, do_base, lse_base;
    gview g[3]; /* dQ, dK, dV */
} vtensors;

static void vtensors_release(vtensors *t)
{
    fcl_tensor all[] = {t->q, t->k, t->v, t->o, t->dout, t->lse, t->cq, t->ck, t->mask, t->alibi,
                        t->q_base, t->kv_base, t->do_base, t->lse_base};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    for (int i = 0; i < 3; i++)
        gview_release(&t->g[i]);
    memset(t, 0, sizeof *t);
}

/* Host inputs and device tensors of a case (inputs written, gradients not yet). */
static void vsetup(fcl_context ctx, fcl_dtype dt, const vcase *c, const packing *pk, uint64_t seed, vhost *h,
                   vtensors *t)
{
    const int64_t tq = pk->tq, tk = pk->tk, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    const size_t nq = (size_t)(tq * Hq * D), nk = (size_t)(tk * Hkv * D);
    memset(h, 0, sizeof *h);
    memset(t, 0, sizeof *t);
    h->q = xfloats(nq);
    h->k = xfloats(nk);
    h->v = xfloats(nk);
    h->dout = xfloats(nq);
    support_random(h->q, nq, seed * 8 + 1, -1.0f, 1.0f, dt);
    support_random(h->k, nk, seed * 8 + 2, -1.0f, 1.0f, dt);
    support_random(h->v, nk, seed * 8 + 3, -1.0f, 1.0f, dt);
    support_random(h->dout, nq, seed * 8 + 4, -1.0f, 1.0f, dt);

    const int64_t qs[3] = {tq, Hq, D}, ks[3] = {tk, Hkv, D}, ls[2] = {Hq, tq}, nb = pk->B + 1;
    t->cq = support_i32_tensor(ctx, 1, &nb, pk->cq);
    t->ck = support_i32_tensor(ctx, 1, &nb, pk->ck);
    t->o = support_tensor(ctx, dt, 3, qs, NULL);
    if (!c->strided) {
        t->q = support_tensor(ctx, dt, 3, qs, h->q);
        t->k = support_tensor(ctx, dt, 3, ks, h->k);
        t->v = support_tensor(ctx, dt, 3, ks, h->v);
        t->dout = support_tensor(ctx, dt, 3, qs, h->dout);
        t->lse = support_tensor(ctx, FCL_F32, 2, ls, NULL);
    } else {
        /* Q rows with head stride D + 3 from element 5; K and V interleaved per row; dO with
         * head stride D + 1 from element 2; LSE rows padded by 3 from element 2 */
        const int64_t qst[3] = {Hq * (D + 3), D + 3, 1}, kst[3] = {2 * Hkv * D, D, 1};
        const int64_t dst[3] = {Hq * (D + 1), D + 1, 1}, lst[2] = {tq + 3, 1};
        const int64_t nqb = tq * Hq * (D + 3) + 5, nkb = tk * 2 * Hkv * D, ndb = tq * Hq * (D + 1) + 2;
        const int64_t nlb = Hq * (tq + 3) + 2;
        t->q_base = support_tensor(ctx, dt, 1, &nqb, NULL);
        t->kv_base = support_tensor(ctx, dt, 1, &nkb, NULL);
        t->do_base = support_tensor(ctx, dt, 1, &ndb, NULL);
        t->lse_base = support_tensor(ctx, FCL_F32, 1, &nlb, NULL);
        support_poison(t->q_base);
        support_poison(t->do_base);
        t->q = support_view(t->q_base, 3, qs, qst, 5);
        t->k = support_view(t->kv_base, 3, ks, kst, 0);
        t->v = support_view(t->kv_base, 3, ks, kst, Hkv * D);
        t->dout = support_view(t->do_base, 3, qs, dst, 2);
        t->lse = support_view(t->lse_base, 2, ls, lst, 2);
        support_write(t->q, h->q);
        support_write(t->k, h->k);
        support_write(t->v, h->v);
        support_write(t->dout, h->dout);
    }
    const int pad = c->strided ? 2 : 0;
    gview_make(ctx, dt, 3, qs, pad, &t->g[0]);
    gview_make(ctx, dt, 3, ks, pad, &t->g[1]);
    gview_make(ctx, dt, 3, ks, pad + 1, &t->g[2]);
    if (c->mask == MASK_ON) {
        /* random values, and every key of one non-empty sequence from the middle on dropped */
        h->mask = xfloats((size_t)tk);
        support_packing_mask(pk, seed * 8 + 5, h->mask);
        t->mask = support_tensor(ctx, FCL_F32, 1, &tk, h->mask);
    }
    if (c->alibi != ALIBI_NONE) {
        const int per = c->alibi == ALIBI_BH, n = per ? pk->B * c->Hq : c->Hq;
        h->slopes = xfloats((size_t)n);
        support_alibi_slopes(n, c->Hq, h->slopes);
        const int64_t shape[2] = {pk->B, c->Hq};
        t->alibi = per ? support_tensor(ctx, FCL_F32, 2, shape, h->slopes)
                       : support_tensor(ctx, FCL_F32, 1, shape + 1, h->slopes);
    }
}

static fcl_attn_params vparams(const vcase *c, const vtensors *t)
{
    return support_attn_params(c->scale, c->causal, c->wl, c->wr, c->softcap, t->mask, t->alibi);
}

static void vforward(fcl_context ctx, const vcase *c, const packing *pk, const vtensors *t, const char *name)
{
    const fcl_attn_params prm = vparams(c, t);
    fcl_status st = fcl_attention_varlen_forward(ctx, &prm, t->q, t->k, t->v, t->cq, t->ck, pk->maxq + c->slack,
                                                 pk->maxk + c->slack, t->o, t->lse, NULL);
    cr_assert(st == FCL_SUCCESS, "[%s] varlen forward: %s: %s", name, fcl_status_string(st), fcl_last_error(ctx));
}

/* Poisons the gradient buffers, runs the backward, reads dQ, dK, dV (dense host copies);
 * *outside gets the elements written outside the three views. */
static void vbackward(fcl_context ctx, const vcase *c, const packing *pk, const vtensors *t, float *const g[3],
                      size_t *outside, const char *name)
{
    const fcl_attn_params prm = vparams(c, t);
    for (int i = 0; i < 3; i++)
        support_poison(t->g[i].base);
    fcl_status st = fcl_attention_varlen_backward(ctx, &prm, t->q, t->k, t->v, t->o, t->dout, c->lse ? t->lse : NULL,
                                                  t->cq, t->ck, pk->maxq + c->slack, pk->maxk + c->slack,
                                                  t->g[0].view, t->g[1].view, t->g[2].view, NULL);
    cr_assert(st == FCL_SUCCESS, "[%s] fcl_attention_varlen_backward: %s: %s", name, fcl_status_string(st),
              fcl_last_error(ctx));
    finish(ctx);
    *outside = 0;
    for (int i = 0; i < 3; i++) {
        support_read(t->g[i].view, g[i]);
        *outside += gview_outside(&t->g[i]);
    }
}

/* The reference problem of sequence b alone (B = 1 over its rows). */
static ref_attn_problem vseq_problem(const vcase *c, const packing *pk, const vhost *h, int b)
{
    const ref_attn_problem all = {1, 0, 0, c->Hq, c->Hkv, c->D, (double)c->scale, c->causal, c->wl, c->wr,
                                  (double)c->softcap, h->mask, 0, h->slopes, 0};
    return support_packing_problem(all, pk, b, c->alibi == ALIBI_BH);
}

/* Every sequence of g (dense [total, H, D] gradients) against its own reference. */
static gcheck vcompare(const vcase *c, fcl_dtype dt, const packing *pk, const vhost *h, float *const g[3])
{
    gcheck r;
    gcheck_init(&r);
    const size_t qrow = (size_t)c->Hq * c->D, krow = (size_t)c->Hkv * c->D;
    r.nan = support_count_nan(g[0], (size_t)pk->tq * qrow) + support_count_nan(g[1], (size_t)pk->tk * krow) +
            support_count_nan(g[2], (size_t)pk->tk * krow);
    for (int b = 0; b < pk->B; b++) {
        const ref_attn_problem p = vseq_problem(c, pk, h, b);
        const size_t oq = (size_t)pk->cq[b] * qrow, ok = (size_t)pk->ck[b] * krow;
        check_sequence(&p, dt, b, h->q + oq, h->k + ok, h->v + ok, h->dout + oq, g[0] + oq, g[1] + ok, g[2] + ok,
                       &r);
    }
    return r;
}

static void grads_alloc(float *g[3], size_t n[3], size_t nq, size_t nk)
{
    n[0] = nq;
    n[1] = n[2] = nk;
    for (int i = 0; i < 3; i++)
        g[i] = xfloats(n[i]);
}

static void grads_free(float *g[3])
{
    for (int i = 0; i < 3; i++) {
        free(g[i]);
        g[i] = NULL;
    }
}

/* One varlen case set up: its packing, name, host inputs, device tensors, and room for two
 * runs' gradients g[run][dQ, dK, dV] of n[] elements. */
typedef struct vrun {
    packing pk;
    char name[400];
    vhost h;
    vtensors t;
    float *g[2][3];
    size_t n[3];
} vrun;

static void vrun_begin(vrun *r, fcl_context ctx, fcl_dtype dt, const vcase *c, uint64_t seed)
{
    r->pk = make_packing(c->pack, c->B, seed);
    vdescribe(c, dt, &r->pk, r->name, sizeof r->name);
    vsetup(ctx, dt, c, &r->pk, seed, &r->h, &r->t);
    grads_alloc(r->g[0], r->n, (size_t)r->pk.tq * c->Hq * c->D, (size_t)r->pk.tk * c->Hkv * c->D);
    grads_alloc(r->g[1], r->n, r->n[0], r->n[1]);
}

static void vrun_end(vrun *r)
{
    grads_free(r->g[0]);
    grads_free(r->g[1]);
    vtensors_release(&r->t);
    vhost_free(&r->h);
    support_packing_free(&r->pk);
}

/* Totals over a table, to prove the empty-sequence checks ran. */
static int g_empty_q_seen, g_empty_k_seen;

/* One varlen case: forward, backward twice (bit-identical), reference per sequence. */
static int vcheck_case(fcl_context ctx, fcl_dtype dt, const vcase *c, uint64_t seed)
{
    char msg[600];
    vrun v;
    vrun_begin(&v, ctx, dt, c, seed);
    const packing *pk = &v.pk;
    const char *name = v.name;
    float **g1 = v.g[0], **g2 = v.g[1];
    const size_t *n = v.n;
    vforward(ctx, c, pk, &v.t, name);
    size_t out1, out2;
    vbackward(ctx, c, pk, &v.t, g1, &out1, name);
    vbackward(ctx, c, pk, &v.t, g2, &out2, name);
    int ft;
    long fi;
    double md;
    const size_t diff = grads_bit_diff(g1, g2, n, &ft, &fi, &md);
    gcheck r = vcompare(c, dt, pk, &v.h, g1);
    g_empty_q_seen += r.empty_q_seqs;
    g_empty_k_seen += r.empty_k_seqs;
    gcheck_describe(&r, pk->B, msg, sizeof msg);
    const int ok = gcheck_ok(&r) && diff == 0 && out1 == 0 && out2 == 0;
    cr_expect(gcheck_ok(&r), "[%s] %s", name, msg);
    cr_expect(diff == 0, "[%s] two runs differ in %zu elements (first: %s element %ld, max |diff| %.3g)", name, diff,
              ft >= 0 ? grad_name[ft] : "-", fi, md);
    cr_expect(out1 == 0 && out2 == 0, "[%s] %zu / %zu elements written outside the dQ, dK, dV views", name, out1,
              out2);
    vrun_end(&v);
    return ok;
}

static void vtable(fcl_dtype dt, const vcase *cases, size_t n, uint64_t seed0)
{
    fcl_context ctx = support_context();
    size_t failed = 0;
    g_empty_q_seen = g_empty_k_seen = 0;
    for (size_t i = 0; i < n; i++)
        failed += !vcheck_case(ctx, dt, &cases[i], seed0 + i);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu %s varlen backward cases failed", failed, n, fcl_dtype_name(dt));
    cr_assert(g_empty_q_seen > 0 && g_empty_k_seen > 0,
              "test bug: the table checked %d empty-query and %d empty-key sequences", g_empty_q_seen,
              g_empty_k_seen);
}

/* ---------------------------------------------------------------- varlen tables */

/* Kernel variants are compiled per (dtype, padded D, softcap?, mask?, alibi?): each table
 * uses few of them; causal, windows, scale, Hq/Hkv and the packing are run-time values. */

Test(varlen_backward, f32)
{
    static const vcase cases[] = {
        /* pack      B   Hq Hkv D   causal wl  wr  softcap scale mask alibi lse strided slack */
        {PK_SHORT, 24, 4, 2, 59, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0},
        {PK_SHORT, 24, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 0, 0, 3},
        {PK_LONG, 10, 4, 1, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0},
        {PK_LONG_QK, 8, 2, 2, 59, 1, 40, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0},
        {PK_EMPTY, 0, 4, 4, 64, 0, 5, 3, 0, 0, MASK_NONE, ALIBI_NONE, 1, 1, 0},
        {PK_EMPTY, 0, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 0, 0, 0},
        {PK_SINGLE, 24, 3, 1, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 1},
        {PK_SHORT, 24, 4, 2, 64, 0, U, 2, 0, 0.3f, MASK_NONE, ALIBI_NONE, 1, 1, 0},
        /* softcap + key mask + ALiBi [B, Hq] / [Hq] */
        {PK_SHORT, 24, 6, 2, 59, 1, 9, U, 2.0f, 0.5f, MASK_ON, ALIBI_BH, 1, 0, 2},
        {PK_EMPTY, 0, 4, 2, 64, 0, U, 4, 2.0f, 0, MASK_ON, ALIBI_H, 0, 1, 0},
        {PK_LONG, 8, 2, 1, 64, 0, 60, 20, 2.0f, 0.5f, MASK_ON, ALIBI_BH, 1, 0, 0},
        {PK_SINGLE, 20, 4, 4, 59, 0, U, U, 2.0f, 0, MASK_ON, ALIBI_H, 0, 0, 0},
        /* D 111: key mask alone */
        {PK_SHORT, 16, 4, 2, 111, 1, U, U, 0, 0, MASK_ON, ALIBI_NONE, 1, 0, 0},
        {PK_EMPTY, 0, 2, 2, 111, 0, 6, 6, 0, 0, MASK_ON, ALIBI_NONE, 0, 1, 0},
        /* D 1 */
        {PK_SINGLE, 20, 4, 2, 1, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0},
        {PK_SHORT, 16, 2, 1, 1, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 0, 1, 0},
    };
    vtable(FCL_F32, cases, sizeof cases / sizeof cases[0], 1000);
}

Test(varlen_backward, f16)
{
    static const vcase cases[] = {
        {PK_SHORT, 24, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0},
        {PK_EMPTY, 0, 4, 1, 59, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 0, 1, 0},
        {PK_LONG, 10, 2, 2, 64, 0, 50, 10, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0},
        {PK_SINGLE, 24, 4, 2, 59, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0},
        /* softcap alone */
        {PK_SHORT, 24, 4, 2, 64, 0, 6, U, 2.0f, 0, MASK_NONE, ALIBI_NONE, 1, 1, 0},
        {PK_LONG_QK, 8, 4, 2, 59, 1, U, U, 2.0f, 0.5f, MASK_NONE, ALIBI_NONE, 0, 0, 0},
        /* D 256: ALiBi alone */
        {PK_SHORT, 10, 4, 2, 256, 0, U, U, 0, 0, MASK_NONE, ALIBI_H, 1, 0, 0},
        {PK_EMPTY, 0, 2, 1, 256, 1, U, U, 0, 0, MASK_NONE, ALIBI_BH, 0, 0, 0},
    };
    vtable(FCL_F16, cases, sizeof cases / sizeof cases[0], 2000);
}

Test(varlen_backward, bf16)
{
    static const vcase cases[] = {
        {PK_SHORT, 24, 4, 2, 128, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0},
        {PK_EMPTY, 0, 4, 4, 128, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 0, 0, 0},
        {PK_LONG_QK, 8, 4, 1, 111, 1, 30, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0},
        {PK_SINGLE, 24, 2, 1, 128, 0, 2, 2, 0, 0, MASK_NONE, ALIBI_NONE, 1, 1, 0},
        /* key mask + ALiBi */
        {PK_SHORT, 24, 4, 2, 111, 1, 7, U, 0, 0, MASK_ON, ALIBI_BH, 0, 1, 1},
        {PK_LONG, 8, 2, 2, 128, 0, U, U, 0, 0, MASK_ON, ALIBI_H, 1, 0, 0},
    };
    vtable(FCL_BF16, cases, sizeof cases / sizeof cases[0], 3000);
}

/* ---------------------------------------------------------------- varlen placement */

/*
 * A sequence's gradients do not depend on where it sits in the packing: the case runs once;
 * then sequences s .. B - 1 run alone, as a packing from row 0 (their Q, K, V and dO rows
 * uploaded anew, prefix sums shifted; the forward run again on them when the LSE is passed),
 * where s is the first sequence whose first query and key rows are both odd (else either): the
 * shifts are no multiples of any tile size. Their dQ, dK and dV rows must be the same bits in
 * both runs, and the first run must match the reference.
 */
static int vplacement_case(fcl_context ctx, fcl_dtype dt, const vcase *c, uint64_t seed)
{
    char msg[600];
    vrun v;
    vrun_begin(&v, ctx, dt, c, seed);
    const packing *pk = &v.pk;
    const char *name = v.name;
    size_t out1, out2;
    vforward(ctx, c, pk, &v.t, name);
    vbackward(ctx, c, pk, &v.t, v.g[0], &out1, name);
    int s = 1;
    while (s < pk->B && !(pk->cq[s] % 2 && pk->ck[s] % 2))
        s++;
    for (int b = 1; s == pk->B && b < pk->B; b++)
        if (pk->cq[b] % 2 || pk->ck[b] % 2)
            s = b;
    cr_assert(s < pk->B, "test bug: [%s] no sequence starts at an odd row", name);

    /* the packing of sequences s .. B - 1 alone */
    const int B2 = pk->B - s;
    packing sub = {B2, pk->lq + s, pk->lk + s, support_xmalloc(sizeof(int32_t) * (size_t)(B2 + 1)),
                   support_xmalloc(sizeof(int32_t) * (size_t)(B2 + 1)), pk->tq - pk->cq[s], pk->tk - pk->ck[s],
                   pk->maxq, pk->maxk};
    for (int b = 0; b <= B2; b++) {
        sub.cq[b] = pk->cq[s + b] - pk->cq[s];
        sub.ck[b] = pk->ck[s + b] - pk->ck[s];
    }
    const size_t qrow = (size_t)c->Hq * c->D, krow = (size_t)c->Hkv * c->D;
    const int64_t qs[3] = {sub.tq, c->Hq, c->D}, ks[3] = {sub.tk, c->Hkv, c->D}, ls[2] = {c->Hq, sub.tq};
    const int64_t nb = B2 + 1;
    vtensors t2;
    memset(&t2, 0, sizeof t2);
    t2.q = support_tensor(ctx, dt, 3, qs, v.h.q + (size_t)pk->cq[s] * qrow);
    t2.k = support_tensor(ctx, dt, 3, ks, v.h.k + (size_t)pk->ck[s] * krow);
    t2.v = support_tensor(ctx, dt, 3, ks, v.h.v + (size_t)pk->ck[s] * krow);
    t2.dout = support_tensor(ctx, dt, 3, qs, v.h.dout + (size_t)pk->cq[s] * qrow);
    t2.o = support_tensor(ctx, dt, 3, qs, NULL);
    t2.lse = support_tensor(ctx, FCL_F32, 2, ls, NULL);
    t2.cq = support_i32_tensor(ctx, 1, &nb, sub.cq);
    t2.ck = support_i32_tensor(ctx, 1, &nb, sub.ck);
    gview_make(ctx, dt, 3, qs, 0, &t2.g[0]);
    gview_make(ctx, dt, 3, ks, 0, &t2.g[1]);
    gview_make(ctx, dt, 3, ks, 0, &t2.g[2]);
    vforward(ctx, c, &sub, &t2, name);
    float *g2[3];
    size_t n2[3];
    grads_alloc(g2, n2, (size_t)sub.tq * qrow, (size_t)sub.tk * krow);
    vbackward(ctx, c, &sub, &t2, g2, &out2, name);

    /* the first run's rows of sequences s .. */
    float *const moved[3] = {v.g[0][0] + (size_t)pk->cq[s] * qrow, v.g[0][1] + (size_t)pk->ck[s] * krow,
                             v.g[0][2] + (size_t)pk->ck[s] * krow};
    int ft;
    long fi;
    double md;
    const size_t diff = grads_bit_diff(moved, g2, n2, &ft, &fi, &md);
    gcheck r = vcompare(c, dt, pk, &v.h, v.g[0]);
    gcheck_describe(&r, pk->B, msg, sizeof msg);
    const int ok = gcheck_ok(&r) && diff == 0 && out1 == 0 && out2 == 0;
    cr_expect(gcheck_ok(&r), "[%s] %s", name, msg);
    cr_expect(diff == 0,
              "[%s] sequences %d .. %d moved %d query and %d key rows forward: %zu gradient elements changed "
              "(first: %s element %ld, max |diff| %.3g)",
              name, s, pk->B - 1, pk->cq[s], pk->ck[s], diff, ft >= 0 ? grad_name[ft] : "-", fi, md);
    cr_expect(out1 == 0 && out2 == 0, "[%s] %zu / %zu elements written outside the gradient views", name, out1,
              out2);
    grads_free(g2);
    vtensors_release(&t2);
    free(sub.cq);
    free(sub.ck);
    vrun_end(&v);
    return ok;
}

Test(varlen_backward, placement)
{
    typedef struct {
        fcl_dtype dt;
        vcase c;
    } entry;
    static const entry cases[] = {
        {FCL_F16, {PK_SHORT, 24, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0}},
        {FCL_BF16, {PK_LONG, 10, 2, 2, 128, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 0, 0, 0}},
        {FCL_F16, {PK_LONG_QK, 8, 4, 2, 59, 1, 40, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0}},
        {FCL_F32, {PK_SHORT, 24, 4, 2, 64, 0, U, U, 2.0f, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0}},
    };
    fcl_context ctx = support_context();
    size_t failed = 0, n = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; i++)
        failed += !vplacement_case(ctx, cases[i].dt, &cases[i].c, 300 + i);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu cases: a sequence's gradients depend on its place in the packing", failed, n);
}

/* ---------------------------------------------------------------- varlen isolation */

/*
 * Runs a case, changes one sequence's Q (what = 0), K and V (1) or dO (2), runs forward and
 * backward again: every other sequence's dQ rows and dK/dV rows must be bit-identical, the
 * changed sequence's gradients must change, and the second run must match the reference.
 */
static int visolation_case(fcl_context ctx, fcl_dtype dt, const vcase *c, uint64_t seed, int what)
{
    static const char *const what_name[3] = {"Q", "K/V", "dO"};
    char msg[600];
    vrun v;
    vrun_begin(&v, ctx, dt, c, seed);
    const packing *pk = &v.pk;
    const char *name = v.name;
    float **g1 = v.g[0], **g2 = v.g[1];
    const size_t qrow = (size_t)c->Hq * c->D, krow = (size_t)c->Hkv * c->D;
    size_t out;
    vforward(ctx, c, pk, &v.t, name);
    vbackward(ctx, c, pk, &v.t, g1, &out, name);

    /* the last sequence with query rows and at least two visible-ish keys (one key: dQ = dK = 0
     * whatever Q holds) and not the fully masked one */
    int s = -1;
    for (int b = pk->B - 1; b >= 0 && s < 0; b--) {
        int kept = 0;
        for (int j = pk->ck[b]; j < pk->ck[b + 1]; j++)
            kept += !v.h.mask || v.h.mask[j] > 0.5f;
        if (pk->lq[b] > 0 && kept > 1)
            s = b;
    }
    cr_assert(s >= 0, "test bug: no sequence to change");
    if (what == 0) {
        support_random(v.h.q + (size_t)pk->cq[s] * qrow, (size_t)pk->lq[s] * qrow, seed * 8 + 6, -1.0f, 1.0f, dt);
        support_write(v.t.q, v.h.q);
    } else if (what == 1) {
        support_random(v.h.k + (size_t)pk->ck[s] * krow, (size_t)pk->lk[s] * krow, seed * 8 + 6, -1.0f, 1.0f, dt);
        support_random(v.h.v + (size_t)pk->ck[s] * krow, (size_t)pk->lk[s] * krow, seed * 8 + 7, -1.0f, 1.0f, dt);
        support_write(v.t.k, v.h.k);
        support_write(v.t.v, v.h.v);
    } else {
        support_random(v.h.dout + (size_t)pk->cq[s] * qrow, (size_t)pk->lq[s] * qrow, seed * 8 + 6, -1.0f, 1.0f, dt);
        support_write(v.t.dout, v.h.dout);
    }
    vforward(ctx, c, pk, &v.t, name);
    vbackward(ctx, c, pk, &v.t, g2, &out, name);

    size_t other = 0, own = 0;
    for (int r = 0; r < pk->tq; r++) {
        const int mine = r >= pk->cq[s] && r < pk->cq[s + 1];
        for (size_t e = 0; e < qrow; e++) {
            const size_t i = (size_t)r * qrow + e;
            if (mine)
                own += g1[0][i] != g2[0][i];
            else
                other += memcmp(&g1[0][i], &g2[0][i], sizeof(float)) != 0;
        }
    }
    for (int r = 0; r < pk->tk; r++) {
        const int mine = r >= pk->ck[s] && r < pk->ck[s + 1];
        for (int t2 = 1; t2 < 3; t2++)
            for (size_t e = 0; e < krow; e++) {
                const size_t i = (size_t)r * krow + e;
                if (mine)
                    own += g1[t2][i] != g2[t2][i];
                else
                    other += memcmp(&g1[t2][i], &g2[t2][i], sizeof(float)) != 0;
            }
    }
    gcheck r = vcompare(c, dt, pk, &v.h, g2);
    gcheck_describe(&r, pk->B, msg, sizeof msg);
    const int ok = other == 0 && own > 0 && gcheck_ok(&r);
    cr_expect(other == 0 && own > 0,
              "[%s] changed %s of sequence %d (q rows [%d,%d), k rows [%d,%d)): %zu gradient elements of other "
              "sequences changed (must be 0), %zu of its own changed (must be > 0)",
              name, what_name[what], s, pk->cq[s], pk->cq[s + 1], pk->ck[s], pk->ck[s + 1], other, own);
    cr_expect(gcheck_ok(&r), "[%s] after changing %s of sequence %d: %s", name, what_name[what], s, msg);
    vrun_end(&v);
    return ok;
}

/* ================================================================ packed */

typedef support_ppack ppack;

/* PP_LONG: one sequence of L / 2 rows. */
static ppack make_ppack(int kind, int L, uint64_t seed) { return support_ppack_make(kind, L, L / 2, seed); }

typedef struct pcase {
    int pack, L, H, D;
    int causal, w; /* w: the reference's bidirectional window (-1 = none) -> w / 2 each side */
    float softcap, scale;
    int mask, alibi; /* alibi: ALIBI_NONE or ALIBI_H */
    int lse, padded; /* lse 0: O and LSE NULL; padded: QKV rows padded (NaN), O/dO/LSE strided, dQKV padded */
} pcase;

static void pdescribe(const pcase *c, fcl_dtype dt, const ppack *p, char *buf, size_t n)
{
    snprintf(buf, n,
             "packed %s pack%d L%d (%d sequences, longest %d) H%d D%d causal%d w%d softcap%g scale%g mask%d "
             "alibi%d lse%d padded%d",
             fcl_dtype_name(dt), c->pack, c->L, p->nseq, p->maxlen, c->H, c->D, c->causal, c->w,
             (double)c->softcap, (double)c->scale, c->mask, c->alibi, c->lse, c->padded);
}

typedef struct phost {
    float *qkv, *dout, *mask, *slopes; /* qkv [L, 3, H, D], dout [L, H, D] */
} phost;

static void phost_free(phost *h)
{
    free(h->qkv);
    free(h->dout);
    free(h->mask);
    free(h->slopes);
    memset(h, 0, sizeof *h);
}

typedef struct ptensors {
    fcl_tensor base, qkv, bounds, o, dout, lse, mask, alibi, o_base, do_base, lse_base;
    int64_t row, qkv_offset; /* elements per QKV row of the base; the view's offset */
    gview g;                 /* dQKV */
} ptensors;

static void ptensors_release(ptensors *t)
{
    fcl_tensor all[] = {t->base, t->qkv, t->bounds, t->o, t->dout, t->lse, t->mask, t->alibi, t->o_base,
                        t->do_base, t->lse_base};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    gview_release(&t->g);
    memset(t, 0, sizeof *t);
}

static void psetup(fcl_context ctx, fcl_dtype dt, const pcase *c, const ppack *p, uint64_t seed, phost *h,
                   ptensors *t)
{
    const int64_t L = c->L, H = c->H, D = c->D, HD = H * D;
    memset(h, 0, sizeof *h);
    memset(t, 0, sizeof *t);
    h->qkv = xfloats((size_t)(L * 3 * HD));
    h->dout = xfloats((size_t)(L * HD));
    support_random(h->qkv, (size_t)(L * 3 * HD), seed * 8 + 1, -1.0f, 1.0f, dt);
    support_random(h->dout, (size_t)(L * HD), seed * 8 + 2, -1.0f, 1.0f, dt);

    t->qkv = support_qkv_buffer(ctx, dt, L, H, D, c->padded, h->qkv, &t->base, &t->row, &t->qkv_offset);
    const int64_t qshape[4] = {L, 3, H, D};
    const int64_t bs[2] = {L, 2};
    t->bounds = support_i32_tensor(ctx, 2, bs, p->bounds);

    const int64_t os[3] = {L, H, D}, ls[2] = {H, L};
    if (c->padded) {
        const int64_t ost[3] = {H * (D + 1), D + 1, 1}, dst[3] = {H * (D + 2), D + 2, 1}, lst[2] = {L + 3, 1};
        const int64_t on = L * H * (D + 1) + 1, dn = L * H * (D + 2) + 4, ln = H * (L + 3) + 2;
        t->o_base = support_tensor(ctx, dt, 1, &on, NULL);
        t->do_base = support_tensor(ctx, dt, 1, &dn, NULL);
        t->lse_base = support_tensor(ctx, FCL_F32, 1, &ln, NULL);
        support_poison(t->do_base);
        t->o = support_view(t->o_base, 3, os, ost, 1);
        t->dout = support_view(t->do_base, 3, os, dst, 4);
        t->lse = support_view(t->lse_base, 2, ls, lst, 2);
        support_write(t->dout, h->dout);
    } else {
        t->o = support_tensor(ctx, dt, 3, os, NULL);
        t->dout = support_tensor(ctx, dt, 3, os, h->dout);
        t->lse = support_tensor(ctx, FCL_F32, 2, ls, NULL);
    }
    gview_make(ctx, dt, 4, qshape, c->padded ? 3 : 0, &t->g);
    if (c->mask == MASK_ON) {
        /* random values; one sequence longer than one row has every key dropped */
        h->mask = xfloats((size_t)L);
        support_ppack_mask(p, seed * 8 + 4, h->mask);
        t->mask = support_tensor(ctx, FCL_F32, 1, &L, h->mask);
    }
    if (c->alibi != ALIBI_NONE) {
        h->slopes = xfloats((size_t)H);
        support_alibi_slopes((int)H, (int)H, h->slopes);
        t->alibi = support_tensor(ctx, FCL_F32, 1, &H, h->slopes);
    }
}

static fcl_attn_params pparams(const pcase *c, const ptensors *t)
{
    return support_attn_params(c->scale, c->causal, support_half_window(c->w), support_half_window(c->w), c->softcap,
                               t->mask, t->alibi);
}

static void pforward(fcl_context ctx, const pcase *c, const ptensors *t, const char *name)
{
    const fcl_attn_params prm = pparams(c, t);
    fcl_status st = fcl_attention_packed_qkv_forward(ctx, &prm, t->qkv, t->bounds, t->o, t->lse, NULL);
    cr_assert(st == FCL_SUCCESS, "[%s] packed forward: %s: %s", name, fcl_status_string(st), fcl_last_error(ctx));
}

/* Poisons dQKV's buffer, runs the packed backward, reads dQKV [L, 3, H, D]; *outside gets the
 * elements written outside the view. */
static void pbackward(fcl_context ctx, const pcase *c, const ptensors *t, float *dqkv, size_t *outside,
                      const char *name)
{
    const fcl_attn_params prm = pparams(c, t);
    support_poison(t->g.base);
    /* lse 0: O and LSE both NULL, the reference's recompute-only form */
    fcl_status st = fcl_attention_packed_qkv_backward(ctx, &prm, t->qkv, c->lse ? t->o : NULL, t->dout,
                                                      c->lse ? t->lse : NULL, t->bounds, t->g.view, NULL);
    cr_assert(st == FCL_SUCCESS, "[%s] fcl_attention_packed_qkv_backward: %s: %s", name, fcl_status_string(st),
              fcl_last_error(ctx));
    finish(ctx);
    support_read(t->g.view, dqkv);
    *outside = gview_outside(&t->g);
}

/* One packed case set up: its packing, name, host inputs, device tensors, and room for two
 * runs' dQKV g[run] of n elements. */
typedef struct prun {
    ppack p;
    char name[400];
    phost h;
    ptensors t;
    size_t n;
    float *g[2];
} prun;

static void prun_begin(prun *r, fcl_context ctx, fcl_dtype dt, const pcase *c, uint64_t seed)
{
    r->p = make_ppack(c->pack, c->L, seed);
    pdescribe(c, dt, &r->p, r->name, sizeof r->name);
    psetup(ctx, dt, c, &r->p, seed, &r->h, &r->t);
    r->n = (size_t)c->L * 3 * c->H * c->D;
    r->g[0] = xfloats(r->n);
    r->g[1] = xfloats(r->n);
}

static void prun_end(prun *r)
{
    free(r->g[0]);
    free(r->g[1]);
    ptensors_release(&r->t);
    phost_free(&r->h);
    support_ppack_free(&r->p);
}

/* Every sequence of dQKV against the reference of its rows alone (B = 1, Sq = Sk = length). */
static gcheck pcompare(const pcase *c, fcl_dtype dt, const ppack *p, const phost *h, const float *dqkv)
{
    gcheck r;
    gcheck_init(&r);
    const size_t HD = (size_t)c->H * c->D;
    r.nan = support_count_nan(dqkv, (size_t)c->L * 3 * HD);
    for (int b = 0; b < p->nseq; b++) {
        const int n = p->len[b], s0 = p->start[b];
        const size_t m = (size_t)n * HD;
        float *in[3], *g[3];
        for (int k = 0; k < 3; k++) {
            in[k] = xfloats(m);
            g[k] = xfloats(m);
            support_split_rows(h->qkv, k, s0, n, HD, in[k]);
            support_split_rows(dqkv, k, s0, n, HD, g[k]);
        }
        const ref_attn_problem pr = support_ppack_problem(p, b, c->H, c->D, c->scale, c->causal, c->w, c->softcap,
                                                          h->mask, h->slopes);
        check_sequence(&pr, dt, b, in[0], in[1], in[2], h->dout + (size_t)s0 * HD, g[0], g[1], g[2], &r);
        for (int k = 0; k < 3; k++) {
            free(in[k]);
            free(g[k]);
        }
    }
    return r;
}

/*
 * The varlen backward of the same data: Q, K, V as [L, H, D] views of the QKV buffer, the
 * packed forward's O and LSE, cu_seqlens of the same packing for q and k; dQ, dK, dV into
 * fresh NaN-poisoned views, returned as dense [L, 3, H, D] in out. Returns the elements written
 * outside those views.
 */
static size_t pas_varlen(fcl_context ctx, const pcase *c, const ppack *p, const ptensors *t, fcl_dtype dt, float *out,
                       const char *name)
{
    const int64_t L = c->L, H = c->H, D = c->D, HD = H * D;
    const int64_t vs[3] = {L, H, D}, nc = p->nseq + 1;
    fcl_tensor qkv[3];
    support_qkv_views(t->base, t->row, t->qkv_offset, L, H, D, qkv);
    fcl_tensor cu = support_i32_tensor(ctx, 1, &nc, p->cu);
    gview g[3];
    for (int i = 0; i < 3; i++) {
        gview_make(ctx, dt, 3, vs, i, &g[i]);
        support_poison(g[i].base);
    }
    const fcl_attn_params prm = pparams(c, t);
    /* the same inputs as the packed call: with lse 0, O and LSE both NULL (recomputed) */
    fcl_status st = fcl_attention_varlen_backward(ctx, &prm, qkv[0], qkv[1], qkv[2], c->lse ? t->o : NULL, t->dout,
                                                  c->lse ? t->lse : NULL, cu, cu, p->maxlen, p->maxlen, g[0].view,
                                                  g[1].view, g[2].view, NULL);
    cr_assert(st == FCL_SUCCESS, "[%s] varlen backward of the packed data: %s: %s", name, fcl_status_string(st),
              fcl_last_error(ctx));
    finish(ctx);
    float *x = xfloats((size_t)(L * HD));
    size_t outside = 0;
    for (int i = 0; i < 3; i++) {
        support_read(g[i].view, x);
        outside += gview_outside(&g[i]);
        for (int64_t r = 0; r < L; r++)
            memcpy(out + ((size_t)r * 3 + i) * HD, x + (size_t)r * HD, sizeof(float) * (size_t)HD);
        gview_release(&g[i]);
    }
    free(x);
    fcl_tensor all[] = {qkv[0], qkv[1], qkv[2], cu};
    for (int i = 0; i < 4; i++)
        fcl_tensor_release(all[i]);
    return outside;
}

/* One packed case: forward, backward twice (bit-identical), reference per sequence, and the
 * varlen backward of the same data: bit-identical given the LSE off the tensor cores (nvidia-mma,
 * nvidia-wgmma), else within the reference's tolerance. */
static int pcheck_case(fcl_context ctx, fcl_dtype dt, const pcase *c, uint64_t seed)
{
    char msg[600];
    prun v;
    prun_begin(&v, ctx, dt, c, seed);
    const ppack *p = &v.p;
    const char *name = v.name;
    const size_t n = v.n;
    float *g1 = v.g[0], *g2 = v.g[1];
    const size_t HD = (size_t)c->H * c->D;
    float *gv = xfloats(n);
    size_t out1, out2;
    pforward(ctx, c, &v.t, name);
    pbackward(ctx, c, &v.t, g1, &out1, name);
    pbackward(ctx, c, &v.t, g2, &out2, name);
    const size_t out3 = pas_varlen(ctx, c, p, &v.t, dt, gv, name);
    double md, mv;
    long f, fv;
    const size_t diff = support_bit_diff(g1, g2, n, &md, &f), vdiff = support_bit_diff(g1, gv, n, &mv, &fv);
    const char *path = fcl_attention_backward_path(ctx, dt, c->D);
    const int same_bits = c->lse && !(path && strncmp(path, "nvidia-", 7) == 0);
    gcheck r = pcompare(c, dt, p, &v.h, g1), rv = same_bits ? r : pcompare(c, dt, p, &v.h, gv);
    gcheck_describe(&r, p->nseq, msg, sizeof msg);
    const int twin_ok = same_bits ? vdiff == 0 : gcheck_ok(&rv);
    const int ok = gcheck_ok(&r) && diff == 0 && twin_ok && out1 == 0 && out2 == 0 && out3 == 0;
    cr_expect(gcheck_ok(&r), "[%s] %s", name, msg);
    cr_expect(diff == 0, "[%s] two runs differ in %zu elements (max |diff| %.3g)", name, diff, md);
    if (!same_bits) {
        gcheck_describe(&rv, p->nseq, msg, sizeof msg);
        cr_expect(gcheck_ok(&rv), "[%s] varlen twin (%s): %s", name, c->lse ? path : "LSE recomputed", msg);
    }
    cr_expect(!same_bits || vdiff == 0,
              "[%s] packed and varlen gradients differ in %zu of %zu elements (max |diff| %.3g; first: %s of row "
              "%ld, sequence [%d,%d))",
              name, vdiff, n, mv, fv < 0 ? "-" : grad_name[(fv / (long)HD) % 3], fv < 0 ? -1L : fv / (long)(3 * HD),
              fv < 0 ? 0 : p->bounds[2 * (fv / (long)(3 * HD))], fv < 0 ? 0 : p->bounds[2 * (fv / (long)(3 * HD)) + 1]);
    cr_expect(out1 == 0 && out2 == 0 && out3 == 0,
              "[%s] %zu / %zu elements written outside the dQKV view, %zu outside the varlen twin's views", name,
              out1, out2, out3);
    free(gv);
    prun_end(&v);
    return ok;
}

Test(packed_backward, sequences_and_varlen_twin)
{
    typedef struct {
        fcl_dtype dt;
        pcase c;
    } entry;
    static const entry cases[] = {
        /*          pack      L    H  D   causal w  softcap scale mask alibi lse padded */
        {FCL_F32, {PP_SHORT, 300, 4, 64, 0, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0}},
        {FCL_F32, {PP_LONG, 400, 2, 59, 1, U, 0, 0, MASK_NONE, ALIBI_NONE, 0, 0}},
        {FCL_F32, {PP_SINGLE, 200, 4, 64, 0, 1, 0, 0, MASK_NONE, ALIBI_NONE, 1, 1}}, /* w/2 = 0: self only */
        {FCL_F32, {PP_ONE, 150, 2, 64, 0, 20, 0, 0.3f, MASK_NONE, ALIBI_NONE, 1, 0}},
        {FCL_F32, {PP_SHORT, 300, 4, 64, 1, 10, 2.0f, 0.5f, MASK_ON, ALIBI_H, 0, 1}},
        {FCL_F32, {PP_LONG, 400, 2, 59, 0, 33, 2.0f, 0, MASK_ON, ALIBI_H, 1, 0}},
        {FCL_F16, {PP_SHORT, 300, 4, 64, 1, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0}},
        {FCL_F16, {PP_SINGLE, 200, 2, 59, 0, 9, 0, 0, MASK_NONE, ALIBI_NONE, 0, 1}},
        {FCL_BF16, {PP_SHORT, 300, 2, 128, 0, 12, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0}},
        {FCL_BF16, {PP_LONG, 300, 2, 111, 1, U, 0, 0, MASK_ON, ALIBI_H, 0, 1}},
    };
    fcl_context ctx = support_context();
    size_t failed = 0, n = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; i++)
        failed += !pcheck_case(ctx, cases[i].dt, &cases[i].c, 100 + i);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu packed backward cases failed", failed, n);
}

/* Packed isolation: changing one sequence's Q, K/V or dO rows leaves every other row's dQKV
 * bit-identical. */
static int pisolation_case(fcl_context ctx, fcl_dtype dt, const pcase *c, uint64_t seed, int what)
{
    static const char *const what_name[3] = {"Q", "K/V", "dO"};
    prun v;
    prun_begin(&v, ctx, dt, c, seed);
    const ppack *p = &v.p;
    const char *name = v.name;
    float *g1 = v.g[0], *g2 = v.g[1];
    const size_t HD = (size_t)c->H * c->D;
    size_t out;
    pforward(ctx, c, &v.t, name);
    pbackward(ctx, c, &v.t, g1, &out, name);
    int s = -1; /* a sequence of at least 3 rows in the middle, not the masked one */
    for (int b = p->nseq / 3; b < p->nseq && s < 0; b++) {
        int kept = 0;
        for (int j = p->start[b]; j < p->start[b] + p->len[b]; j++)
            kept += !v.h.mask || v.h.mask[j] > 0.5f;
        if (kept > 2)
            s = b;
    }
    cr_assert(s >= 0, "test bug: no sequence to change");
    const int r0 = p->start[s], r1 = p->start[s] + p->len[s];
    for (int r = r0; r < r1; r++)
        if (what == 2)
            support_random(v.h.dout + (size_t)r * HD, HD, seed * 8 + 6 + (uint64_t)r, -1.0f, 1.0f, dt);
        else
            for (int k = what == 0 ? 0 : 1; k <= (what == 0 ? 0 : 2); k++)
                support_random(v.h.qkv + ((size_t)r * 3 + k) * HD, HD, seed * 8 + 6 + (uint64_t)(r * 3 + k), -1.0f,
                               1.0f, dt);
    support_write(v.t.qkv, v.h.qkv);
    support_write(v.t.dout, v.h.dout);
    pforward(ctx, c, &v.t, name);
    pbackward(ctx, c, &v.t, g2, &out, name);
    size_t other = 0, own = 0;
    for (int r = 0; r < c->L; r++)
        for (size_t e = 0; e < 3 * HD; e++) {
            const size_t i = (size_t)r * 3 * HD + e;
            if (r >= r0 && r < r1)
                own += g1[i] != g2[i];
            else
                other += memcmp(&g1[i], &g2[i], sizeof(float)) != 0;
        }
    cr_expect(other == 0 && own > 0,
              "[%s] changed %s of sequence %d (rows [%d,%d)): %zu dQKV elements of other rows changed (must be 0), "
              "%zu of its own changed (must be > 0)",
              name, what_name[what], s, r0, r1, other, own);
    prun_end(&v);
    return other == 0 && own > 0;
}

Test(varlen_backward, isolation)
{
    typedef struct {
        fcl_dtype dt;
        vcase c;
    } entry;
    static const entry cases[] = {
        {FCL_F32, {PK_SHORT, 12, 4, 2, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0}},
        {FCL_F32, {PK_SHORT, 12, 6, 2, 59, 1, 7, U, 2.0f, 0.5f, MASK_ON, ALIBI_BH, 0, 1, 0}},
        {FCL_F16, {PK_EMPTY, 0, 2, 1, 64, 0, 4, 4, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0}},
        {FCL_BF16, {PK_LONG, 6, 2, 1, 111, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0}},
    };
    static const pcase pcases[] = {
        {PP_SHORT, 200, 2, 64, 0, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0},
        {PP_SHORT, 200, 4, 64, 1, 10, 2.0f, 0.5f, MASK_ON, ALIBI_H, 0, 1},
    };
    fcl_context ctx = support_context();
    int ok = 1;
    for (int i = 0; i < 4; i++)
        for (int what = 0; what < 3; what++)
            ok &= visolation_case(ctx, cases[i].dt, &cases[i].c, 5000 + (uint64_t)(10 * i + what), what);
    for (int i = 0; i < 2; i++)
        for (int what = 0; what < 3; what++)
            ok &= pisolation_case(ctx, FCL_F32, &pcases[i], 5100 + (uint64_t)(10 * i + what), what);
    fcl_context_release(ctx);
    cr_assert(ok, "a change to one sequence's inputs leaked into another's gradients");
}

/* ================================================================ chunked launches */

/*
 * With the tiles pinned (support_fix_tiles), the backward run in chunks (FLASHCL_LOOP_LIMIT:
 * several launches carrying the accumulators through scratch) must equal the one-launch
 * backward bit for bit and match the reference. Both use the same O and LSE.
 */
/* The two ways one backward splits into several launches: loop-cap chunks (tiles pinned by the
 * caller), or the stored-dS key ranges (of the blocked kernels where the caller set
 * FLASHCL_BACKWARD_PATH=blocked, else of the device's path), one dK/dV block per range against
 * dS recomputed. */
enum { SPLIT_CHUNKS, SPLIT_DS_RANGES };

/* Sets the split on (the second run) or off (the first) for head dim D; with the stored-dS
 * ranges, `rows` (every query row of every head that one key's dS holds) sizes a range's dS to
 * one dK/dV block. */
static void split_set(fcl_context ctx, fcl_dtype dt, int split, int on, int D, long long rows)
{
    if (split == SPLIT_CHUNKS) {
        support_force_chunks(on);
        return;
    }
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%lld", on ? rows * support_backward_key_block(ctx, dt, D) * 4 : 0LL);
    setenv("FLASHCL_BACKWARD_DS_BYTES", bytes, 1);
}

static int vchunk_case(fcl_context ctx, fcl_dtype dt, const vcase *c, uint64_t seed, int split)
{
    char msg[600];
    vrun v;
    vrun_begin(&v, ctx, dt, c, seed);
    const packing *pk = &v.pk;
    const char *name = v.name;
    float **g1 = v.g[0], **g2 = v.g[1];
    const size_t *n = v.n;
    size_t out1, out2;
    const long long rows = (long long)pk->B * c->Hq * (pk->maxq + c->slack); /* max_seqlen_q per sequence */
    split_set(ctx, dt, split, 0, c->D, rows);
    vforward(ctx, c, pk, &v.t, name);
    vbackward(ctx, c, pk, &v.t, g1, &out1, name);
    split_set(ctx, dt, split, 1, c->D, rows);
    vbackward(ctx, c, pk, &v.t, g2, &out2, name);
    support_force_chunks(0);
    unsetenv("FLASHCL_BACKWARD_DS_BYTES");
    int ft;
    long fi;
    double md;
    const size_t diff = grads_bit_diff(g1, g2, n, &ft, &fi, &md);
    gcheck r = vcompare(c, dt, pk, &v.h, g2);
    gcheck_describe(&r, pk->B, msg, sizeof msg);
    const int ok = diff == 0 && gcheck_ok(&r) && out1 == 0 && out2 == 0;
    cr_expect(diff == 0, "[%s] split (%s) and one-launch gradients differ in %zu elements (first: %s element %ld, "
              "max |diff| %.3g)", name, split == SPLIT_CHUNKS ? "chunks" : "dS ranges", diff, ft >= 0 ? grad_name[ft] : "-",
              fi, md);
    cr_expect(gcheck_ok(&r), "[%s] chunked: %s", name, msg);
    cr_expect(out1 == 0 && out2 == 0, "[%s] %zu / %zu elements written outside the gradient views", name, out1, out2);
    vrun_end(&v);
    return ok;
}

static int pchunk_case(fcl_context ctx, fcl_dtype dt, const pcase *c, uint64_t seed, int split)
{
    char msg[600];
    prun v;
    prun_begin(&v, ctx, dt, c, seed);
    const ppack *p = &v.p;
    const char *name = v.name;
    const size_t n = v.n;
    float *g1 = v.g[0], *g2 = v.g[1];
    size_t out1, out2;
    split_set(ctx, dt, split, 0, c->D, (long long)c->H * c->L);
    pforward(ctx, c, &v.t, name);
    pbackward(ctx, c, &v.t, g1, &out1, name);
    split_set(ctx, dt, split, 1, c->D, (long long)c->H * c->L);
    pbackward(ctx, c, &v.t, g2, &out2, name);
    support_force_chunks(0);
    unsetenv("FLASHCL_BACKWARD_DS_BYTES");
    double md;
    long f;
    const size_t diff = support_bit_diff(g1, g2, n, &md, &f);
    gcheck r = pcompare(c, dt, p, &v.h, g2);
    gcheck_describe(&r, p->nseq, msg, sizeof msg);
    const int ok = diff == 0 && gcheck_ok(&r) && out1 == 0 && out2 == 0;
    cr_expect(diff == 0, "[%s] split (%s) and one-launch dQKV differ in %zu elements (first %ld, max |diff| %.3g)",
              name, split == SPLIT_CHUNKS ? "chunks" : "dS ranges", diff, f, md);
    cr_expect(gcheck_ok(&r), "[%s] chunked: %s", name, msg);
    cr_expect(out1 == 0 && out2 == 0, "[%s] %zu / %zu elements written outside the dQKV view", name, out1, out2);
    prun_end(&v);
    return ok;
}

/* ================================================================ garbage bounds */

/* Raw snapshots of tensors, to prove they were not written. */
typedef struct snap {
    int n;
    fcl_tensor t[12];
    unsigned char *b[12];
    size_t bytes[12];
} snap;

static void snap_take(snap *s, int n, const fcl_tensor *t)
{
    s->n = n;
    for (int i = 0; i < n; i++) {
        s->t[i] = t[i];
        s->b[i] = t[i] ? support_read_raw_all(t[i], &s->bytes[i]) : NULL;
    }
}

/* Tensors of s whose bytes changed; frees s. */
static int snap_changed(snap *s)
{
    int changed = 0;
    for (int i = 0; i < s->n; i++) {
        if (!s->t[i])
            continue;
        size_t bytes;
        unsigned char *now = support_read_raw_all(s->t[i], &bytes);
        changed += bytes != s->bytes[i] || memcmp(now, s->b[i], bytes) != 0;
        free(now);
        free(s->b[i]);
    }
    return changed;
}

/* Bytes of g's buffer outside the view that differ from `before`. */
static size_t guard_changed(const gview *g, const unsigned char *before)
{
    size_t bytes;
    unsigned char *now = support_read_raw_all(g->base, &bytes);
    char *in = gview_inside(g);
    const size_t es = fcl_dtype_size(fcl_tensor_dtype(g->base));
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++)
        bad += !in[i / es] && now[i] != before[i];
    free(in);
    free(now);
    return bad;
}

/* The shared garbage prefix sums, and one more for the backward: bounds far above the totals. */
static const support_garbage_sums huge = {"max_seqlen huge", {0, 41, 0, 41, 0, 41}, {53, 0, 53, 0, 53, 0}, 100000,
                                          100000};

static const support_garbage_sums *garbage_sums(int i)
{
    return i < SUPPORT_N_GARBAGE_SUMS ? &support_garbage_sums_list[i] : &huge;
}

/* A tensor of `shape` GUARD elements into a NaN-filled buffer, its own elements random. */
static fcl_tensor guarded_input(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape, uint64_t seed,
                                float lo, float hi, fcl_tensor *base)
{
    return support_guarded_input(ctx, dt, ndim, shape, GUARD, 0, seed, lo, hi, base);
}

/*
 * Varlen backward with nonsense prefix sums (full = causal, window, softcap, mask, ALiBi [B, Hq],
 * LSE NULL; else plain with LSE): the call and fcl_finish succeed, the bytes around dQ, dK, dV
 * (salted patterns) and every input buffer stay as they were.
 */
static int vgarbage_case(fcl_context ctx, const support_garbage_sums *gb, int full, uint64_t seed)
{
    enum { B = 5, TQ = 41, TK = 53, HQ = 4, HKV = 2, D = 64 };
    const int64_t qs[3] = {TQ, HQ, D}, ks[3] = {TK, HKV, D}, ls[2] = {HQ, TQ}, mk = TK, as[2] = {B, HQ}, nb = B + 1;
    fcl_tensor base[6];
    fcl_tensor q = guarded_input(ctx, FCL_F32, 3, qs, seed, -1.0f, 1.0f, &base[0]);
    fcl_tensor k = guarded_input(ctx, FCL_F32, 3, ks, seed + 1, -1.0f, 1.0f, &base[1]);
    fcl_tensor v = guarded_input(ctx, FCL_F32, 3, ks, seed + 2, -1.0f, 1.0f, &base[2]);
    fcl_tensor o = guarded_input(ctx, FCL_F32, 3, qs, seed + 3, -1.0f, 1.0f, &base[3]);
    fcl_tensor dout = guarded_input(ctx, FCL_F32, 3, qs, seed + 4, -1.0f, 1.0f, &base[4]);
    fcl_tensor lse = guarded_input(ctx, FCL_F32, 2, ls, seed + 5, 2.0f, 4.0f, &base[5]);
    float hm[TK], ha[B * HQ];
    for (int j = 0; j < TK; j++)
        hm[j] = j % 3 == 1 ? 0.0f : 1.0f;
    support_alibi_slopes(B * HQ, HQ, ha);
    fcl_tensor m = support_tensor(ctx, FCL_F32, 1, &mk, hm), a = support_tensor(ctx, FCL_F32, 2, as, ha);
    fcl_tensor cq = support_i32_tensor(ctx, 1, &nb, gb->cq), ck = support_i32_tensor(ctx, 1, &nb, gb->ck);
    gview g[3];
    unsigned char *before[3];
    for (int i = 0; i < 3; i++) {
        gview_make(ctx, FCL_F32, 3, i == 0 ? qs : ks, i, &g[i]);
        size_t bytes;
        before[i] = support_poison_raw(g[i].base, &bytes, (unsigned)(i + 1));
    }
    snap s;
    const fcl_tensor inputs[10] = {base[0], base[1], base[2], base[3], base[4], base[5], m, a, cq, ck};
    snap_take(&s, 10, inputs);

    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    if (full) {
        prm.causal = 1;
        prm.window_left = 5;
        prm.softcap = 2.0f;
        prm.key_mask = m;
        prm.alibi_slopes = a;
    }
    fcl_status st = fcl_attention_varlen_backward(ctx, &prm, q, k, v, o, dout, full ? NULL : lse, cq, ck, gb->maxq,
                                                  gb->maxk, g[0].view, g[1].view, g[2].view, NULL);
    int ok = st == FCL_SUCCESS;
    cr_expect(ok, "[%s full %d] varlen backward with garbage prefix sums: %s: %s (the host must not read them)",
              gb->what, full, fcl_status_string(st), fcl_last_error(ctx));
    finish(ctx);
    size_t bad[3];
    for (int i = 0; i < 3; i++)
        bad[i] = guard_changed(&g[i], before[i]);
    const int changed = snap_changed(&s);
    ok &= bad[0] == 0 && bad[1] == 0 && bad[2] == 0 && changed == 0;
    cr_expect(bad[0] == 0 && bad[1] == 0 && bad[2] == 0,
              "[%s full %d] written outside the gradients: %zu guard bytes of dQ's buffer, %zu of dK's, %zu of dV's",
              gb->what, full, bad[0], bad[1], bad[2]);
    cr_expect(changed == 0, "[%s full %d] %d input buffers were written", gb->what, full, changed);
    for (int i = 0; i < 3; i++) {
        gview_release(&g[i]);
        free(before[i]);
    }
    fcl_tensor all[] = {q, k, v, o, dout, lse, m, a, cq, ck, base[0], base[1], base[2], base[3], base[4], base[5]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    return ok;
}

/* Packed backward with nonsense seq_bounds (patterns as in test_packed_qkv.c): the call
 * succeeds, the bytes around dQKV and every input buffer stay as they were. */
static int pgarbage_case(fcl_context ctx, int pattern, int full, uint64_t seed)
{
    enum { L = 97, H = 3, D = 64 };
    const int64_t qs[4] = {L, 3, H, D}, os[3] = {L, H, D}, ls[2] = {L, 2}, lse_s[2] = {H, L}, nl = L, nh = H;
    fcl_tensor base[4];
    fcl_tensor qkv = guarded_input(ctx, FCL_F32, 4, qs, seed, -1.0f, 1.0f, &base[0]);
    fcl_tensor o = guarded_input(ctx, FCL_F32, 3, os, seed + 1, -1.0f, 1.0f, &base[1]);
    fcl_tensor dout = guarded_input(ctx, FCL_F32, 3, os, seed + 2, -1.0f, 1.0f, &base[2]);
    fcl_tensor lse = guarded_input(ctx, FCL_F32, 2, lse_s, seed + 3, 2.0f, 4.0f, &base[3]);
    float hm[L], ha[H];
    for (int j = 0; j < L; j++)
        hm[j] = j % 4 == 2 ? 0.0f : 1.0f;
    support_alibi_slopes(H, H, ha);
    fcl_tensor m = support_tensor(ctx, FCL_F32, 1, &nl, hm), a = support_tensor(ctx, FCL_F32, 1, &nh, ha);
    int32_t bounds[2 * L];
    support_garbage_bounds(pattern, L, seed, bounds);
    fcl_tensor tb = support_i32_tensor(ctx, 2, ls, bounds);
    gview g;
    gview_make(ctx, FCL_F32, 4, qs, 1, &g);
    size_t bytes;
    unsigned char *before = support_poison_raw(g.base, &bytes, 7);
    snap sn;
    const fcl_tensor inputs[7] = {base[0], base[1], base[2], base[3], m, a, tb};
    snap_take(&sn, 7, inputs);

    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    if (full) {
        prm.causal = 1;
        prm.window_left = prm.window_right = 9;
        prm.softcap = 2.0f;
        prm.key_mask = m;
        prm.alibi_slopes = a;
    }
    fcl_status st = fcl_attention_packed_qkv_backward(ctx, &prm, qkv, o, dout, full ? NULL : lse, tb, g.view, NULL);
    int ok = st == FCL_SUCCESS;
    cr_expect(ok, "[pattern %d full %d] packed backward with garbage seq_bounds: %s: %s", pattern, full,
              fcl_status_string(st), fcl_last_error(ctx));
    finish(ctx);
    const size_t bad = guard_changed(&g, before);
    const int changed = snap_changed(&sn);
    ok &= bad == 0 && changed == 0;
    cr_expect(bad == 0, "[pattern %d full %d] written outside dQKV: %zu guard bytes changed", pattern, full, bad);
    cr_expect(changed == 0, "[pattern %d full %d] %d input buffers were written", pattern, full, changed);
    gview_release(&g);
    free(before);
    fcl_tensor all[] = {qkv, o, dout, lse, m, a, tb, base[0], base[1], base[2], base[3]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    return ok;
}

static int garbage_all(fcl_context ctx, uint64_t seed)
{
    int ok = 1;
    for (int i = 0; i < SUPPORT_N_GARBAGE_SUMS + 1; i++)
        for (int full = 0; full < 2; full++)
            ok &= vgarbage_case(ctx, garbage_sums(i), full, seed + (uint64_t)(2 * i + full));
    for (int pattern = 0; pattern < 4; pattern++)
        for (int full = 0; full < 2; full++)
            ok &= pgarbage_case(ctx, pattern, full, seed + 100 + (uint64_t)(2 * pattern + full));
    return ok;
}

Test(varlen_backward, garbage_bounds)
{
    fcl_context ctx = support_context();
    const int ok = garbage_all(ctx, 6000);
    fcl_context_release(ctx);
    cr_assert(ok, "garbage prefix sums / seq_bounds: a failed call, or memory written outside the gradients");
}

/* Chunked launches: bit-identical to one launch (tiles pinned), and garbage bounds in chunks. */
Test(varlen_backward, chunked)
{
    static const vcase vc[] = {
        {PK_LONG, 6, 2, 1, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 0},
        {PK_LONG_QK, 6, 4, 2, 59, 1, 37, U, 2.0f, 0.5f, MASK_ON, ALIBI_BH, 0, 1, 0},
        {PK_EMPTY, 0, 2, 1, 64, 0, 5, 3, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 2},
    };
    static const pcase pc[] = {
        {PP_LONG, 400, 2, 64, 0, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0},
        {PP_LONG, 400, 2, 64, 1, 100, 2.0f, 0, MASK_ON, ALIBI_H, 0, 1},
    };
    fcl_context ctx = support_context();
    support_fix_tiles(1);
    int ok = 1;
    for (int i = 0; i < 3; i++)
        ok &= vchunk_case(ctx, FCL_F32, &vc[i], 7000 + (uint64_t)i, SPLIT_CHUNKS);
    for (int i = 0; i < 2; i++)
        ok &= pchunk_case(ctx, FCL_F32, &pc[i], 7100 + (uint64_t)i, SPLIT_CHUNKS);
    support_force_chunks(1);
    ok &= garbage_all(ctx, 7200);
    support_force_chunks(0);
    support_fix_tiles(0);
    fcl_context_release(ctx);
    cr_assert(ok, "chunked backward differs from one launch or the reference, or wrote outside the gradients");
}

/* Stored dS in one range per dK/dV block, on the blocked kernels (FLASHCL_BACKWARD_PATH=blocked)
 * and on the CPU kernels where they run: bit-identical to dS recomputed, and the rule per
 * sequence (empty sequences, GQA, windows, masks, strided views; packed sequences that cross
 * the ranges' ends). Skipped (reported as skipped) where neither runs (a loop cap). */
Test(varlen_backward, stored_scores_ranges)
{
    static const vcase vc[] = {
        {PK_LONG_QK, 6, 4, 2, 59, 1, 37, U, 2.0f, 0.5f, MASK_ON, ALIBI_BH, 0, 1, 0},
        {PK_EMPTY, 0, 2, 1, 64, 0, 5, 3, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0, 2},
    };
    static const pcase pc[] = {
        {PP_SHORT, 300, 2, 64, 0, U, 0, 0, MASK_NONE, ALIBI_NONE, 1, 0},
        {PP_LONG, 400, 2, 59, 1, 100, 2.0f, 0, MASK_ON, ALIBI_H, 0, 1},
    };
    fcl_context ctx = support_context();
    int ok = 1, ran = 0;
    for (int forced = 1; forced >= 0; forced--) {
        if (forced)
            setenv("FLASHCL_BACKWARD_PATH", "blocked", 1);
        const char *path = fcl_attention_backward_path(ctx, FCL_F32, 64);
        if (path && strcmp(path, forced ? "blocked" : "cpu") == 0) {
            ran++;
            for (int i = 0; i < 2; i++) {
                ok &= vchunk_case(ctx, i ? FCL_F32 : FCL_F16, &vc[i], 7300 + (uint64_t)i, SPLIT_DS_RANGES);
                ok &= pchunk_case(ctx, i ? FCL_F16 : FCL_F32, &pc[i], 7400 + (uint64_t)i, SPLIT_DS_RANGES);
            }
        }
        unsetenv("FLASHCL_BACKWARD_PATH");
    }
    fcl_context_release(ctx);
    if (!ran)
        cr_skip_test("neither the blocked nor the CPU backward runs on this device");
    cr_assert(ok, "stored dS in ranges differs from dS recomputed or the reference, or wrote outside the gradients");
}
