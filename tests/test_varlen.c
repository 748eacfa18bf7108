/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcl_attention_varlen_forward and fcl_varlen_validate, on the FLASHCL_DEVICE device.
 *
 * Correctness: random packings (many short sequences, one long among short ones, empty
 * sequences in Q and/or K, single tokens); every sequence is compared on its own with the
 * float64 reference run as a B = 1 problem on that sequence's rows (causal and windows
 * bottom-right aligned inside the sequence, Sq_b != Sk_b), with the DESIGN.md rule applied
 * per sequence: max |kernel - float64| <= 2 * max |naive - float64| + 1e-5, for O and LSE.
 * Outputs are NaN-poisoned; rows that see no key must be exactly O = 0, LSE = -inf.
 *
 * Structure: with one-hot V rows the output of a row is its attention weights, so the set of
 * keys each row sees is checked exactly (no key of another sequence, per-sequence windows).
 * Isolation: changing one sequence's K/V (or Q) leaves every other sequence's O and LSE
 * bit-identical. Placement: a sequence's O and LSE bits do not change when the sequences
 * before it are left out.
 * Bounds: garbage device prefix sums (past the total, negative, decreasing, max_seqlen too
 * small) still succeed and write nothing outside O and LSE (views in the middle of larger
 * guarded buffers), and read nothing outside Q, K, V (NaN guards around them).
 * Errors: fcl_varlen_validate and bad arguments of the forward (status, message, outputs
 * untouched).
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention.h"
#include "support.h"
#include "support_varlen.h"

#define U (-1) /* unbounded window side */

/* PK_LONG: one sequence of 380..420 query and 560..600 key rows; PK_SHORT empties one side of
 * one sequence in eight. */
static const int empty_list[][2] = {{0, 0}, {0, 5}, {4, 0},  {6, 6},  {0, 0}, {1, 0}, {0, 1},
                                    {9, 17}, {17, 9}, {1, 1}, {3, 0}, {0, 0}};
static const support_packing_style style = {15, {380, 420}, {560, 600}, empty_list,
                                            (int)(sizeof empty_list / sizeof empty_list[0])};

typedef support_packing packing;

static packing make_packing(int kind, int B, uint64_t seed) { return support_packing_make(&style, kind, B, seed); }

static fcl_tensor i32_tensor(fcl_context ctx, int64_t n, const int32_t *vals) { return support_i32_tensor(ctx, 1, &n, vals); }

/* ---------------------------------------------------------------- cases */

enum {
    LAYOUT_CONTIG = 0,  /* contiguous [total, H, D]; LSE contiguous [Hq, total_q] */
    LAYOUT_STRIDED = 1, /* Q/O with padded head stride and odd offsets, K and V interleaved in one
                           [total_k, 2, Hkv, D] buffer, LSE rows padded */
    LAYOUT_FUSED = 2,   /* Q, K, V views of one fused [total, Hq + 2 Hkv, D] projection buffer */
    LAYOUT_NO_LSE = 3
};

typedef struct vcase {
    int pack, B;
    int Hq, Hkv, D;
    int causal, wl, wr;
    float softcap, scale;
    int mask, alibi, layout;
    int slack; /* added to the exact max_seqlen_q / _k passed to the call */
    float amp;
} vcase;

static void describe(const vcase *c, fcl_dtype dt, const packing *pk, char *buf, size_t n)
{
    snprintf(buf, n,
             "%s pack%d B%d (total_q %d total_k %d max %d/%d) Hq%d Hkv%d D%d causal%d wl%d wr%d "
             "softcap%g scale%g mask%d alibi%d layout%d slack%d amp%g",
             fcl_dtype_name(dt), c->pack, pk->B, pk->tq, pk->tk, pk->maxq, pk->maxk, c->Hq, c->Hkv,
             c->D, c->causal, c->wl, c->wr, (double)c->softcap, (double)c->scale, c->mask, c->alibi,
             c->layout, c->slack, (double)c->amp);
}

/* Device tensors of one case; *_base are the buffers strided views live in (or NULL). */
typedef struct vtensors {
    fcl_tensor q, k, v, cq, ck, mask, alibi;
    fcl_tensor q_base, kv_base;
    support_fwd_out out;
} vtensors;

static void vtensors_release(vtensors *t)
{
    fcl_tensor all[] = {t->q, t->k, t->v, t->cq, t->ck, t->mask, t->alibi, t->q_base, t->kv_base};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    support_fwd_out_release(&t->out);
    memset(t, 0, sizeof *t);
}

static void make_tensors(fcl_context ctx, fcl_dtype dt, const vcase *c, const packing *pk,
                         const float *q, const float *k, const float *v, vtensors *t)
{
    const int64_t tq = pk->tq, tk = pk->tk, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    const int64_t qs[3] = {tq, Hq, D}, ks[3] = {tk, Hkv, D};
    memset(t, 0, sizeof *t);
    t->cq = i32_tensor(ctx, pk->B + 1, pk->cq);
    t->ck = i32_tensor(ctx, pk->B + 1, pk->ck);
    if (c->layout == LAYOUT_CONTIG || c->layout == LAYOUT_NO_LSE) {
        t->q = support_tensor(ctx, dt, 3, qs, q);
        t->k = support_tensor(ctx, dt, 3, ks, k);
        t->v = support_tensor(ctx, dt, 3, ks, v);
        support_fwd_out_make(ctx, dt, tq, Hq, D, -1, 0, c->layout == LAYOUT_CONTIG, &t->out);
        return;
    }
    if (c->layout == LAYOUT_FUSED) {
        cr_assert(tq == tk, "test bug: the fused layout needs total_q == total_k");
        const int64_t W = (Hq + 2 * Hkv) * D, n = tq * W;
        const int64_t qst[3] = {W, D, 1};
        t->q_base = support_tensor(ctx, dt, 1, &n, NULL);
        t->q = support_view(t->q_base, 3, qs, qst, 0);
        t->k = support_view(t->q_base, 3, ks, qst, Hq * D);
        t->v = support_view(t->q_base, 3, ks, qst, (Hq + Hkv) * D);
        /* O as rows of a [total_q, Hq, D + 2] buffer */
        support_fwd_out_make(ctx, dt, tq, Hq, D, 2, 0, 1, &t->out);
    } else {
        const int64_t qst[3] = {Hq * (D + 3), D + 3, 1}, kst[3] = {2 * Hkv * D, D, 1};
        const int64_t nqb = tq * Hq * (D + 3) + 5, nkb = tk * 2 * Hkv * D;
        t->q_base = support_tensor(ctx, dt, 1, &nqb, NULL);
        t->q = support_view(t->q_base, 3, qs, qst, 5);
        t->kv_base = support_tensor(ctx, dt, 1, &nkb, NULL);
        t->k = support_view(t->kv_base, 3, ks, kst, 0);
        t->v = support_view(t->kv_base, 3, ks, kst, Hkv * D);
        /* O with head stride D + 1 from element 1 */
        support_fwd_out_make(ctx, dt, tq, Hq, D, 1, 1, 1, &t->out);
    }
    support_write(t->q, q);
    support_write(t->k, k);
    support_write(t->v, v);
}

/* The host side of one case: inputs, params for the reference. */
typedef struct vhost {
    float *q, *k, *v, *mask, *slopes;
} vhost;

static void vhost_free(vhost *h)
{
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->mask);
    free(h->slopes);
    memset(h, 0, sizeof *h);
}

/* The reference problem of sequence b alone (B = 1 over its rows). */
static ref_attn_problem seq_problem(const vcase *c, const packing *pk, const vhost *h, int b)
{
    const ref_attn_problem all = {1, 0, 0, c->Hq, c->Hkv, c->D, (double)c->scale, c->causal, c->wl, c->wr,
                                  (double)c->softcap, h->mask, 0, h->slopes, 0};
    return support_packing_problem(all, pk, b, c->alibi == ALIBI_BH);
}

typedef support_fwd_check seq_check;

/*
 * Compares O [total_q, Hq, D] and LSE [Hq, total_q] (may be NULL) with the reference of every
 * sequence alone. Empty rows (reference LSE -inf) must be exactly O = 0 and LSE = -inf, others
 * must have a finite LSE.
 */
static seq_check compare_sequences(const vcase *c, fcl_dtype dt, const packing *pk, const vhost *h,
                                   const float *o, const float *lse)
{
    seq_check r;
    support_fwd_check_init(&r, o, (size_t)pk->tq * c->Hq * c->D, lse, (size_t)c->Hq * pk->tq);
    const size_t qrow = (size_t)c->Hq * c->D, krow = (size_t)c->Hkv * c->D;
    for (int b = 0; b < pk->B; b++) {
        if (pk->lq[b] == 0)
            continue;
        const ref_attn_problem p = seq_problem(c, pk, h, b);
        const size_t oq = (size_t)pk->cq[b] * qrow, ok = (size_t)pk->ck[b] * krow;
        support_fwd_check_seq(&p, dt, b, h->q + oq, h->k + ok, h->v + ok, o, lse, pk->tq, pk->cq[b], &r);
    }
    return r;
}

static int seq_check_ok(const seq_check *r) { return support_fwd_check_ok(r); }

static fcl_attn_params case_params(const vcase *c, const vtensors *t)
{
    return support_attn_params(c->scale, c->causal, c->wl, c->wr, c->softcap, t->mask, t->alibi);
}

/* Builds the host inputs and the device tensors of a case. */
static void setup_case(fcl_context ctx, fcl_dtype dt, const vcase *c, const packing *pk, uint64_t seed,
                       vhost *h, vtensors *t)
{
    const size_t nq = (size_t)pk->tq * c->Hq * c->D, nk = (size_t)pk->tk * c->Hkv * c->D;
    memset(h, 0, sizeof *h);
    h->q = support_xmalloc(sizeof(float) * nq);
    h->k = support_xmalloc(sizeof(float) * nk);
    h->v = support_xmalloc(sizeof(float) * nk);
    support_random(h->q, nq, seed * 8 + 1, -c->amp, c->amp, dt);
    support_random(h->k, nk, seed * 8 + 2, -c->amp, c->amp, dt);
    support_random(h->v, nk, seed * 8 + 3, -c->amp, c->amp, dt);
    make_tensors(ctx, dt, c, pk, h->q, h->k, h->v, t);
    if (c->mask == MASK_ON) {
        h->mask = support_xmalloc(sizeof(float) * (size_t)pk->tk);
        support_packing_mask(pk, seed * 8 + 4, h->mask);
        const int64_t n = pk->tk;
        t->mask = support_tensor(ctx, FCL_F32, 1, &n, h->mask);
    }
    if (c->alibi != ALIBI_NONE) {
        int per = c->alibi == ALIBI_BH;
        int n = per ? pk->B * c->Hq : c->Hq;
        h->slopes = support_xmalloc(sizeof(float) * (size_t)n);
        support_alibi_slopes(n, c->Hq, h->slopes);
        const int64_t shape[2] = {pk->B, c->Hq};
        t->alibi = per ? support_tensor(ctx, FCL_F32, 2, shape, h->slopes)
                       : support_tensor(ctx, FCL_F32, 1, shape + 1, h->slopes);
    }
}

/* Poisons, runs, reads back O and LSE (when present). Returns the status of the call. */
static fcl_status run_varlen(fcl_context ctx, const vcase *c, const packing *pk, const vtensors *t,
                             float *o, float *lse, size_t *outside_o, size_t *outside_l)
{
    const fcl_attn_params prm = case_params(c, t);
    support_fwd_out_poison(&t->out);
    fcl_status st = fcl_attention_varlen_forward(ctx, &prm, t->q, t->k, t->v, t->cq, t->ck,
                                                 pk->maxq + c->slack, pk->maxk + c->slack, t->out.o,
                                                 t->out.lse, NULL);
    if (st != FCL_SUCCESS)
        return st;
    support_fwd_out_read(ctx, &t->out, o, lse, outside_o, outside_l);
    return FCL_SUCCESS;
}

/* One case set up: its packing, name, host inputs, device tensors, and room for two runs'
 * O [total_q, Hq, D] (no elements) and LSE [Hq, total_q] (nl). */
typedef struct vrun {
    packing pk;
    char name[400];
    vhost h;
    vtensors t;
    size_t no, nl;
    float *o[2], *l[2];
} vrun;

static void vrun_begin(vrun *r, fcl_context ctx, fcl_dtype dt, const vcase *c, uint64_t seed)
{
    r->pk = make_packing(c->pack, c->B, seed);
    describe(c, dt, &r->pk, r->name, sizeof r->name);
    setup_case(ctx, dt, c, &r->pk, seed, &r->h, &r->t);
    r->no = (size_t)r->pk.tq * c->Hq * c->D;
    r->nl = (size_t)c->Hq * r->pk.tq;
    for (int i = 0; i < 2; i++) {
        r->o[i] = support_xmalloc(sizeof(float) * r->no);
        r->l[i] = support_xmalloc(sizeof(float) * r->nl);
    }
}

static void vrun_end(vrun *r)
{
    for (int i = 0; i < 2; i++) {
        free(r->o[i]);
        free(r->l[i]);
    }
    vtensors_release(&r->t);
    vhost_free(&r->h);
    support_packing_free(&r->pk);
}

/* Runs one case and checks every sequence; returns 1 when it passes. */
static int check_case(fcl_context ctx, fcl_dtype dt, const vcase *c, uint64_t seed)
{
    vrun v;
    vrun_begin(&v, ctx, dt, c, seed);
    const packing *pk = &v.pk;
    const char *name = v.name;
    float *o = v.o[0], *lse = v.l[0];
    size_t out_o = 0, out_l = 0;
    fcl_status st = run_varlen(ctx, c, pk, &v.t, o, lse, &out_o, &out_l);
    cr_expect(st == FCL_SUCCESS, "[%s] fcl_attention_varlen_forward: %s: %s", name,
              fcl_status_string(st), fcl_last_error(ctx));
    int ok = st == FCL_SUCCESS;
    if (ok) {
        seq_check r = compare_sequences(c, dt, pk, &v.h, o, v.t.out.lse ? lse : NULL);
        ok = seq_check_ok(&r) && out_o == 0 && out_l == 0;
        cr_expect(ok,
                  "[%s] %d of %d sequences out of tolerance (first: seq %d, O err %.3g bound %.3g, "
                  "LSE err %.3g bound %.3g) | NaN O %zu LSE %zu | bad rows %zu (%zu empty) | "
                  "written outside views O %zu LSE %zu",
                  name, r.failed_seqs, pk->B, r.first_bad, r.o_err, r.o_bound, r.l_err,
                  r.l_bound, r.nan_o, r.nan_l, r.bad_rows, r.empty_rows, out_o, out_l);
    }
    vrun_end(&v);
    return ok;
}

static void check_table(fcl_dtype dt, const vcase *cases, size_t n, uint64_t seed0)
{
    fcl_context ctx = support_context();
    size_t failed = 0;
    for (size_t i = 0; i < n; i++)
        failed += !check_case(ctx, dt, &cases[i], seed0 + i);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu %s varlen cases failed", failed, n, fcl_dtype_name(dt));
}

/* ---------------------------------------------------------------- correctness tables */

/* The packings with plain, causal and windowed attention; GQA and MHA. */
static const vcase packing_cases[] = {
    /* pack       B   Hq Hkv D  causal wl wr softcap scale mask alibi layout slack amp */
    {PK_SHORT, 40, 4, 2, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_SHORT, 40, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 3, 2},
    {PK_LONG, 16, 4, 1, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_LONG_QK, 16, 2, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_LONG, 12, 2, 2, 64, 0, 70, 0, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_EMPTY, 0, 4, 2, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_EMPTY, 0, 4, 4, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_SINGLE, 30, 4, 2, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_SINGLE, 30, 3, 1, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 1, 2},
    /* windows: left, right, both, causal + left */
    {PK_SHORT, 40, 4, 2, 64, 0, 5, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_SHORT, 40, 4, 2, 64, 0, U, 3, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_SHORT, 40, 4, 2, 64, 0, 6, 2, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_EMPTY, 0, 2, 1, 64, 1, 4, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    /* softcap, custom scale, large inputs */
    {PK_SHORT, 40, 4, 2, 64, 0, U, U, 5.0f, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 3},
    {PK_EQUAL, 20, 4, 2, 64, 1, U, U, 0, 0.3f, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 3},
    /* key mask [total_k] (one sequence fully masked), ALiBi [Hq] and [B, Hq] */
    {PK_SHORT, 40, 4, 2, 64, 0, U, U, 0, 0, MASK_ON, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_EMPTY, 0, 4, 2, 64, 1, U, U, 0, 0, MASK_ON, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    {PK_SHORT, 40, 4, 2, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_H, LAYOUT_CONTIG, 0, 2},
    {PK_LONG_QK, 10, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_BH, LAYOUT_CONTIG, 0, 2},
    /* everything at once */
    {PK_SHORT, 40, 6, 2, 64, 1, 9, U, 5.0f, 0.4f, MASK_ON, ALIBI_BH, LAYOUT_CONTIG, 2, 3},
    {PK_SINGLE, 30, 4, 1, 64, 0, 3, 2, 5.0f, 0, MASK_ON, ALIBI_H, LAYOUT_CONTIG, 0, 3},
    /* strided views: padded Q/O, interleaved K/V, padded LSE; fused QKV projection; no LSE */
    {PK_SHORT, 40, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_STRIDED, 0, 2},
    {PK_EMPTY, 0, 4, 2, 64, 0, 5, 5, 5.0f, 0, MASK_ON, ALIBI_BH, LAYOUT_STRIDED, 0, 3},
    {PK_EQUAL, 24, 4, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_FUSED, 0, 2},
    {PK_EQUAL, 24, 2, 2, 64, 0, 8, 8, 0, 0, MASK_ON, ALIBI_H, LAYOUT_FUSED, 0, 2},
    {PK_SHORT, 40, 4, 2, 64, 1, U, U, 0, 0, MASK_ON, ALIBI_NONE, LAYOUT_NO_LSE, 0, 2},
};

/* A second head dim per dtype. */
static void other_d(vcase *out, int D)
{
    const vcase a = {PK_SHORT, 30, 4, 2, D, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2};
    const vcase b = {PK_EMPTY, 0, 2, 1, D, 0, 6, 3, 5.0f, 0, MASK_ON, ALIBI_BH, LAYOUT_STRIDED, 0, 3};
    const vcase c = {PK_LONG_QK, 8, 2, 2, D, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2};
    out[0] = a;
    out[1] = b;
    out[2] = c;
}

static void packings(fcl_dtype dt, int D2, uint64_t seed0)
{
    enum { N = sizeof packing_cases / sizeof packing_cases[0] };
    vcase cases[N + 3];
    memcpy(cases, packing_cases, sizeof packing_cases);
    other_d(cases + N, D2);
    check_table(dt, cases, N + 3, seed0);
}

Test(varlen, packings_f32) { packings(FCL_F32, 111, 1000); }
Test(varlen, packings_f16) { packings(FCL_F16, 40, 2000); }
Test(varlen, packings_bf16) { packings(FCL_BF16, 128, 3000); }

/* A few odd head dims (MQA among them) on a short packing. */
Test(varlen, head_dims)
{
    static const int dims[] = {1, 8, 59, 96, 160, 256};
    static const fcl_dtype dts[] = {FCL_F32, FCL_F16, FCL_BF16};
    enum { N = sizeof dims / sizeof dims[0] };
    fcl_context ctx = support_context();
    size_t failed = 0;
    for (int i = 0; i < N; i++) {
        vcase c = {i % 2 ? PK_SINGLE : PK_SHORT, 12, 4, i % 3 == 2 ? 1 : 2, dims[i], i % 2, U, U,
                   0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2};
        failed += !check_case(ctx, dts[i % 3], &c, 4000 + (uint64_t)i);
    }
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %d head-dim cases failed", failed, (int)N);
}

/* ---------------------------------------------------------------- structure (one-hot V) */

/*
 * V row j (global key row) is the unit vector e_j, so O[i, h, :] is row i's attention
 * weights over all key rows. Each row must weigh exactly the keys of its own sequence that
 * its bottom-right window lets it see (> 0), and no other (== 0).
 */
static int structure_case(fcl_context ctx, const packing *pk, int causal, int wl, int wr, int masked)
{
    const int Hq = 2, Hkv = 1, D = 256;
    cr_assert(pk->tk <= D, "test bug: total_k %d > D", pk->tk);
    const size_t nq = (size_t)pk->tq * Hq * D, nk = (size_t)pk->tk * Hkv * D;
    float *q = support_xmalloc(sizeof(float) * nq), *k = support_xmalloc(sizeof(float) * nk);
    float *v = calloc(nk, sizeof(float)), *o = support_xmalloc(sizeof(float) * nq);
    float *m = support_xmalloc(sizeof(float) * (size_t)pk->tk);
    cr_assert(v != NULL);
    support_random(q, nq, 11, -0.5f, 0.5f, FCL_F32);
    support_random(k, nk, 12, -0.5f, 0.5f, FCL_F32);
    for (int j = 0; j < pk->tk; j++) {
        v[(size_t)j * D + j] = 1.0f;
        m[j] = masked && (j % 5 == 3) ? 0.0f : 1.0f;
    }
    const int64_t qs[3] = {pk->tq, Hq, D}, ks[3] = {pk->tk, Hkv, D}, ms = pk->tk;
    fcl_tensor tq_ = support_tensor(ctx, FCL_F32, 3, qs, q), tk_ = support_tensor(ctx, FCL_F32, 3, ks, k);
    fcl_tensor tv = support_tensor(ctx, FCL_F32, 3, ks, v), to = support_tensor(ctx, FCL_F32, 3, qs, NULL);
    fcl_tensor tm = support_tensor(ctx, FCL_F32, 1, &ms, m);
    fcl_tensor cq = i32_tensor(ctx, pk->B + 1, pk->cq), ck = i32_tensor(ctx, pk->B + 1, pk->ck);
    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    prm.causal = causal;
    prm.window_left = wl;
    prm.window_right = wr;
    prm.key_mask = masked ? tm : NULL;
    support_poison(to);
    fcl_status st = fcl_attention_varlen_forward(ctx, &prm, tq_, tk_, tv, cq, ck, pk->maxq, pk->maxk, to,
                                                 NULL, NULL);
    cr_assert(st == FCL_SUCCESS, "varlen forward: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS);
    support_read(to, o);
    size_t wrong = 0;
    int first_b = -1, first_i = -1, first_j = -1;
    float first_val = 0;
    for (int b = 0; b < pk->B; b++)
        for (int i = 0; i < pk->lq[b]; i++) {
            const long pos = (long)i + pk->lk[b] - pk->lq[b];
            const int wrr = causal ? 0 : wr;
            for (int h = 0; h < Hq; h++) {
                const float *row = o + ((size_t)(pk->cq[b] + i) * Hq + h) * D;
                for (int j = 0; j < D; j++) {
                    int jl = j - pk->ck[b];
                    int vis = j < pk->tk && jl >= 0 && jl < pk->lk[b] && (wl < 0 || jl >= pos - wl) &&
                              (wrr < 0 || jl <= pos + wrr) && (!masked || m[j] > 0.5f);
                    int got = row[j] > 0.0f;
                    if (vis != got || isnan(row[j]) || row[j] < 0.0f) {
                        if (wrong++ == 0) {
                            first_b = b;
                            first_i = i;
                            first_j = j;
                            first_val = row[j];
                        }
                    }
                }
            }
        }
    cr_expect(wrong == 0,
              "causal %d wl %d wr %d mask %d: %zu weights wrong; first: sequence %d (q rows [%d,%d), "
              "k rows [%d,%d)) local row %d, key row %d has weight %g",
              causal, wl, wr, masked, wrong, first_b, first_b >= 0 ? pk->cq[first_b] : 0,
              first_b >= 0 ? pk->cq[first_b + 1] : 0, first_b >= 0 ? pk->ck[first_b] : 0,
              first_b >= 0 ? pk->ck[first_b + 1] : 0, first_i, first_j, (double)first_val);
    fcl_tensor all[] = {tq_, tk_, tv, to, tm, cq, ck};
    for (int i = 0; i < 7; i++)
        fcl_tensor_release(all[i]);
    free(q);
    free(k);
    free(v);
    free(o);
    free(m);
    return wrong == 0;
}

Test(varlen, structure_one_hot_v)
{
    fcl_context ctx = support_context();
    packing a = make_packing(PK_SHORT, 8, 51), e = make_packing(PK_EMPTY, 0, 0); /* total_k <= 256 */
    int ok = 1;
    ok &= structure_case(ctx, &a, 0, U, U, 0);
    ok &= structure_case(ctx, &a, 1, U, U, 0);
    ok &= structure_case(ctx, &a, 0, 3, 2, 0);
    ok &= structure_case(ctx, &a, 1, 4, U, 1);
    ok &= structure_case(ctx, &e, 1, U, U, 0);
    ok &= structure_case(ctx, &e, 0, 2, 5, 1);
    support_packing_free(&a);
    support_packing_free(&e);
    fcl_context_release(ctx);
    cr_assert(ok, "varlen attention weights are not confined to each sequence's visible keys");
}

/* ---------------------------------------------------------------- chunked keys */

/*
 * Devices that cap a work-item's loop iterations run the keys in chunks (several launches
 * carrying the softmax state, kept per row of [Hq, total_q]). FLASHCL_LOOP_LIMIT imposes the
 * cap everywhere; with the same tiles the chunked result must equal the one-launch result
 * bit for bit, and match the reference.
 */
static int chunk_case(fcl_context ctx, fcl_dtype dt, const vcase *c, uint64_t seed)
{
    vrun v;
    vrun_begin(&v, ctx, dt, c, seed);
    const packing *pk = &v.pk;
    const char *name = v.name;
    const size_t no = v.no, nl = v.nl;
    float *o1 = v.o[0], *l1 = v.l[0], *o2 = v.o[1], *l2 = v.l[1];
    size_t oo1, ol1, oo2, ol2;
    support_fix_tiles(1);
    support_force_chunks(0);
    fcl_status st1 = run_varlen(ctx, c, pk, &v.t, o1, l1, &oo1, &ol1);
    support_force_chunks(1);
    fcl_status st2 = run_varlen(ctx, c, pk, &v.t, o2, l2, &oo2, &ol2);
    support_force_chunks(0);
    support_fix_tiles(0);
    cr_assert(st1 == FCL_SUCCESS && st2 == FCL_SUCCESS, "[%s] one launch: %s, chunked: %s: %s", name,
              fcl_status_string(st1), fcl_status_string(st2), fcl_last_error(ctx));
    double dmo, dml;
    long fo, fl;
    size_t dno = support_bit_diff(o1, o2, no, &dmo, &fo), dnl = v.t.out.lse ? support_bit_diff(l1, l2, nl, &dml, &fl) : 0;
    int same = dno == 0 && dnl == 0;
    seq_check r = compare_sequences(c, dt, pk, &v.h, o2, v.t.out.lse ? l2 : NULL);
    int ok = same && seq_check_ok(&r) && oo2 == 0 && ol2 == 0;
    cr_expect(same,
              "[%s] chunked results differ from one launch: %zu of %zu O elements (max |diff| %.3g, first at "
              "q row %ld), %zu of %zu LSE elements",
              name, dno, no, dmo, fo < 0 ? -1L : fo / (long)(c->Hq * c->D), dnl, nl);
    cr_expect(seq_check_ok(&r) && oo2 == 0 && ol2 == 0,
              "[%s] chunked: %d sequences out of tolerance (first %d: O err %.3g bound %.3g, LSE err %.3g "
              "bound %.3g), NaN O %zu LSE %zu, bad rows %zu, written outside views O %zu LSE %zu",
              name, r.failed_seqs, r.first_bad, r.o_err, r.o_bound, r.l_err, r.l_bound, r.nan_o, r.nan_l,
              r.bad_rows, oo2, ol2);
    vrun_end(&v);
    return ok;
}

Test(varlen, chunked_keys)
{
    static const vcase cases[] = {
        {PK_LONG, 10, 2, 1, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
        {PK_LONG_QK, 10, 2, 2, 64, 1, U, U, 5.0f, 0, MASK_ON, ALIBI_BH, LAYOUT_STRIDED, 0, 3},
        {PK_EMPTY, 0, 2, 1, 32, 1, 6, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
        /* windows whose start is not a multiple of the tile size: chunk boundaries may fall
         * inside a tile of the one-launch run */
        {PK_LONG, 10, 2, 1, 64, 0, 71, 13, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 3},
        {PK_LONG, 10, 4, 1, 64, 0, 45, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 3},
    };
    static const fcl_dtype dts[] = {FCL_F32, FCL_F16, FCL_BF16, FCL_F32, FCL_F32};
    enum { N = sizeof cases / sizeof cases[0] };
    fcl_context ctx = support_context();
    int ok = 1;
    for (int i = 0; i < N; i++)
        ok &= chunk_case(ctx, dts[i], &cases[i], 5500 + (uint64_t)i);
    fcl_context_release(ctx);
    cr_assert(ok, "chunked varlen forward differs from the one-launch forward or the reference");
}

/* ---------------------------------------------------------------- isolation */

/*
 * Runs a case, then changes the K/V rows (or the Q rows) of one sequence and runs again:
 * every other sequence's O rows and LSE entries must be bit-identical, the changed sequence's
 * must differ, and the second run must still match the reference.
 */
static int isolation_case(fcl_context ctx, fcl_dtype dt, const vcase *c, uint64_t seed, int change_q)
{
    vrun v;
    vrun_begin(&v, ctx, dt, c, seed);
    const packing *pk = &v.pk;
    const char *name = v.name;
    float *o1 = v.o[0], *l1 = v.l[0], *o2 = v.o[1], *l2 = v.l[1];
    const size_t rowel = (size_t)c->Hq * c->D;
    size_t oo, ol;
    fcl_status st = run_varlen(ctx, c, pk, &v.t, o1, l1, &oo, &ol);
    cr_assert(st == FCL_SUCCESS, "[%s] first run: %s: %s", name, fcl_status_string(st), fcl_last_error(ctx));

    /* the sequence to change: the last one with query rows and at least two key rows (with
     * one key O is that key's V whatever Q holds; support_packing_mask drops every key of the first
     * such sequence from the middle on, not this one) */
    int s = -1;
    for (int b = pk->B - 1; b >= 0 && s < 0; b--)
        if (pk->lq[b] > 0 && pk->lk[b] > 1)
            s = b;
    cr_assert(s >= 0, "test bug: no sequence to change");
    if (change_q) {
        const size_t n = (size_t)pk->lq[s] * rowel;
        support_random(v.h.q + (size_t)pk->cq[s] * rowel, n, seed * 8 + 6, -c->amp, c->amp, dt);
        support_write(v.t.q, v.h.q);
    } else {
        const size_t krow = (size_t)c->Hkv * c->D, n = (size_t)pk->lk[s] * krow;
        support_random(v.h.k + (size_t)pk->ck[s] * krow, n, seed * 8 + 6, -c->amp, c->amp, dt);
        support_random(v.h.v + (size_t)pk->ck[s] * krow, n, seed * 8 + 7, -c->amp, c->amp, dt);
        support_write(v.t.k, v.h.k);
        support_write(v.t.v, v.h.v);
    }
    st = run_varlen(ctx, c, pk, &v.t, o2, l2, &oo, &ol);
    cr_assert(st == FCL_SUCCESS, "[%s] second run: %s: %s", name, fcl_status_string(st), fcl_last_error(ctx));

    size_t other_rows_changed = 0, own_elems_changed = 0;
    for (int r = 0; r < pk->tq; r++) {
        int own = r >= pk->cq[s] && r < pk->cq[s + 1];
        int same = memcmp(o1 + (size_t)r * rowel, o2 + (size_t)r * rowel, sizeof(float) * rowel) == 0;
        for (int hh = 0; hh < c->Hq; hh++)
            same &= memcmp(&l1[(size_t)hh * pk->tq + r], &l2[(size_t)hh * pk->tq + r], sizeof(float)) == 0;
        if (!own)
            other_rows_changed += !same;
        else
            for (size_t e = 0; e < rowel; e++)
                own_elems_changed += o1[(size_t)r * rowel + e] != o2[(size_t)r * rowel + e];
        if (own)
            for (int hh = 0; hh < c->Hq; hh++)
                own_elems_changed += l1[(size_t)hh * pk->tq + r] != l2[(size_t)hh * pk->tq + r];
    }
    seq_check r = compare_sequences(c, dt, pk, &v.h, o2, l2);
    int ok = other_rows_changed == 0 && own_elems_changed > 0 && seq_check_ok(&r);
    cr_expect(ok,
              "[%s] changed %s of sequence %d (q rows [%d,%d), k rows [%d,%d)): %zu rows of other "
              "sequences changed (must be 0), %zu elements of its own O rows and LSE changed (must be > 0), "
              "%d sequences out of tolerance after the change",
              name, change_q ? "Q" : "K/V", s, pk->cq[s], pk->cq[s + 1], pk->ck[s], pk->ck[s + 1],
              other_rows_changed, own_elems_changed, r.failed_seqs);
    vrun_end(&v);
    return ok;
}

Test(varlen, isolation)
{
    static const vcase cases[] = {
        {PK_SHORT, 16, 4, 2, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
        {PK_SHORT, 16, 4, 2, 64, 1, 7, U, 5.0f, 0, MASK_ON, ALIBI_BH, LAYOUT_CONTIG, 0, 3},
        {PK_EMPTY, 0, 2, 1, 40, 0, 4, 4, 0, 0, MASK_NONE, ALIBI_H, LAYOUT_STRIDED, 0, 2},
        {PK_LONG, 8, 2, 2, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    };
    fcl_context ctx = support_context();
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        fcl_dtype dt = i == 0 ? FCL_F32 : i == 1 ? FCL_F16 : i == 2 ? FCL_BF16 : FCL_F32;
        ok &= isolation_case(ctx, dt, &cases[i], 5000 + (uint64_t)i, 0);
        ok &= isolation_case(ctx, dt, &cases[i], 5100 + (uint64_t)i, 1);
    }
    fcl_context_release(ctx);
    cr_assert(ok, "a change to one sequence's inputs leaked into another's outputs");
}

/* ---------------------------------------------------------------- placement */

/*
 * A sequence's outputs do not depend on where it sits in the packing (the key tiles start at
 * each sequence's first key). The case runs once; then sequences s .. B - 1 run alone, as a
 * packing whose rows start at row 0 (their Q, K and V rows uploaded anew, prefix sums
 * shifted), where s is the first sequence whose first key row is odd: the shift is no multiple
 * of any tile size. Their O rows and LSE entries must be the same bits in both runs, and the
 * first run must match the reference.
 */
static int placement_case(fcl_context ctx, fcl_dtype dt, const vcase *c, uint64_t seed)
{
    vrun v;
    vrun_begin(&v, ctx, dt, c, seed);
    const packing *pk = &v.pk;
    size_t oo, ol;
    fcl_status st = run_varlen(ctx, c, pk, &v.t, v.o[0], v.l[0], &oo, &ol);
    cr_assert(st == FCL_SUCCESS, "[%s] whole packing: %s: %s", v.name, fcl_status_string(st), fcl_last_error(ctx));
    int s = 1;
    while (s < pk->B && pk->ck[s] % 2 == 0)
        s++;
    cr_assert(s < pk->B, "test bug: [%s] no sequence starts at an odd key row", v.name);

    const int B2 = pk->B - s, tq2 = pk->tq - pk->cq[s], tk2 = pk->tk - pk->ck[s];
    const size_t qrow = (size_t)c->Hq * c->D, krow = (size_t)c->Hkv * c->D;
    int32_t *cq2 = support_xmalloc(sizeof(int32_t) * (size_t)(B2 + 1));
    int32_t *ck2 = support_xmalloc(sizeof(int32_t) * (size_t)(B2 + 1));
    for (int b = 0; b <= B2; b++) {
        cq2[b] = pk->cq[s + b] - pk->cq[s];
        ck2[b] = pk->ck[s + b] - pk->ck[s];
    }
    const int64_t qs[3] = {tq2, c->Hq, c->D}, ks[3] = {tk2, c->Hkv, c->D};
    fcl_tensor q = support_tensor(ctx, dt, 3, qs, v.h.q + (size_t)pk->cq[s] * qrow);
    fcl_tensor k = support_tensor(ctx, dt, 3, ks, v.h.k + (size_t)pk->ck[s] * krow);
    fcl_tensor val = support_tensor(ctx, dt, 3, ks, v.h.v + (size_t)pk->ck[s] * krow);
    fcl_tensor cu_q = i32_tensor(ctx, B2 + 1, cq2), cu_k = i32_tensor(ctx, B2 + 1, ck2);
    support_fwd_out out;
    support_fwd_out_make(ctx, dt, tq2, c->Hq, c->D, -1, 0, 1, &out);
    support_fwd_out_poison(&out);
    const fcl_attn_params prm = case_params(c, &v.t);
    st = fcl_attention_varlen_forward(ctx, &prm, q, k, val, cu_q, cu_k, pk->maxq, pk->maxk, out.o, out.lse, NULL);
    cr_assert(st == FCL_SUCCESS, "[%s] sequences %d on alone: %s: %s", v.name, s, fcl_status_string(st),
              fcl_last_error(ctx));
    float *o2 = support_xmalloc(sizeof(float) * (size_t)tq2 * qrow);
    float *l2 = support_xmalloc(sizeof(float) * (size_t)tq2 * (size_t)c->Hq);
    support_fwd_out_read(ctx, &out, o2, l2, &oo, &ol);

    double max_o, max_l;
    long first_o, first_l;
    const size_t diff_o = support_bit_diff(v.o[0] + (size_t)pk->cq[s] * qrow, o2, (size_t)tq2 * qrow, &max_o, &first_o);
    size_t diff_l = 0;
    for (int hh = 0; hh < c->Hq; hh++)
        diff_l += support_bit_diff(v.l[0] + (size_t)hh * pk->tq + pk->cq[s], l2 + (size_t)hh * tq2, (size_t)tq2,
                                   &max_l, &first_l);
    seq_check r = compare_sequences(c, dt, pk, &v.h, v.o[0], v.l[0]);
    const int ok = diff_o == 0 && diff_l == 0 && seq_check_ok(&r);
    cr_expect(diff_o == 0 && diff_l == 0,
              "[%s] sequences %d .. %d moved %d key rows (%d query rows) forward: %zu of %zu O elements "
              "(max |diff| %.3g) and %zu LSE elements changed",
              v.name, s, pk->B - 1, pk->ck[s], pk->cq[s], diff_o, (size_t)tq2 * qrow, max_o, diff_l);
    cr_expect(seq_check_ok(&r), "[%s] %d sequences out of tolerance", v.name, r.failed_seqs);
    fcl_tensor all[] = {q, k, val, cu_q, cu_k};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    support_fwd_out_release(&out);
    free(o2);
    free(l2);
    free(cq2);
    free(ck2);
    vrun_end(&v);
    return ok;
}

Test(varlen, placement)
{
    static const vcase cases[] = {
        {PK_SHORT, 16, 4, 2, 64, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
        {PK_LONG, 8, 2, 1, 64, 1, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 3},
        {PK_SHORT, 16, 4, 2, 40, 0, 7, U, 5.0f, 0, MASK_NONE, ALIBI_H, LAYOUT_CONTIG, 0, 3},
        {PK_LONG, 8, 4, 4, 128, 0, U, U, 0, 0, MASK_NONE, ALIBI_NONE, LAYOUT_CONTIG, 0, 2},
    };
    static const fcl_dtype dts[] = {FCL_F32, FCL_F16, FCL_BF16, FCL_F16};
    enum { N = sizeof cases / sizeof cases[0] };
    fcl_context ctx = support_context();
    int ok = 1;
    for (int i = 0; i < N; i++)
        ok &= placement_case(ctx, dts[i], &cases[i], 5200 + (uint64_t)i);
    fcl_context_release(ctx);
    cr_assert(ok, "a sequence's varlen outputs depend on where it sits in the packing");
}

/* ---------------------------------------------------------------- garbage device bounds */

enum { GUARD = 777, SPARE = 3 }; /* every guarded view: GUARD elements on each side, SPARE more after */

/*
 * Q, K, V live in the middle of NaN-filled buffers; O and LSE in the middle of buffers
 * filled with -555 (guards), their own elements set to 777. With nonsense prefix sums the
 * call must succeed, the guards must stay bit-identical, and no NaN may show up in O or LSE
 * (a NaN can only come from reading a guard: inputs are finite and there is no ALiBi).
 */
static int garbage_case(fcl_context ctx, fcl_dtype dt, const support_garbage_sums *g, int causal, int wl,
                        int masked, uint64_t seed)
{
    enum { B = 5, TQ = 41, TK = 53, HQ = 4, HKV = 2, D = 32 };
    const int64_t qs[3] = {TQ, HQ, D}, ks[3] = {TK, HKV, D}, ls[2] = {HQ, TQ}, ms = TK;
    fcl_tensor qb, kb, vb;
    fcl_tensor q = support_guarded_input(ctx, dt, 3, qs, GUARD, SPARE, seed, -2.0f, 2.0f, &qb);
    fcl_tensor k = support_guarded_input(ctx, dt, 3, ks, GUARD, SPARE, seed + 1, -2.0f, 2.0f, &kb);
    fcl_tensor v = support_guarded_input(ctx, dt, 3, ks, GUARD, SPARE, seed + 2, -2.0f, 2.0f, &vb);
    float hm[TK];
    for (int j = 0; j < TK; j++)
        hm[j] = j % 3 == 1 ? 0.0f : 1.0f;
    fcl_tensor m = support_tensor(ctx, FCL_F32, 1, &ms, hm);
    support_guarded_out o, l;
    support_guarded_out_make(ctx, dt, 3, qs, GUARD, SPARE, &o);
    support_guarded_out_make(ctx, FCL_F32, 2, ls, GUARD, SPARE, &l);
    fcl_tensor cq = i32_tensor(ctx, B + 1, g->cq), ck = i32_tensor(ctx, B + 1, g->ck);

    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    prm.causal = causal;
    prm.window_left = wl;
    prm.key_mask = masked ? m : NULL;
    fcl_status st = fcl_attention_varlen_forward(ctx, &prm, q, k, v, cq, ck, g->maxq, g->maxk, o.view, l.view, NULL);
    int ok = st == FCL_SUCCESS;
    cr_expect(ok, "[%s %s] varlen forward with garbage prefix sums: %s: %s (the host must not read them)",
              g->what, fcl_dtype_name(dt), fcl_status_string(st), fcl_last_error(ctx));
    fcl_status fs = fcl_finish(ctx);
    cr_assert(fs == FCL_SUCCESS, "[%s %s] fcl_finish after garbage prefix sums: %s: %s", g->what,
              fcl_dtype_name(dt), fcl_status_string(fs), fcl_last_error(ctx));
    const size_t bad_o = support_guarded_out_changed(&o), bad_l = support_guarded_out_changed(&l);
    size_t nan_o, nan_l;
    float *ho = support_guarded_out_read(&o, &nan_o), *hl = support_guarded_out_read(&l, &nan_l);
    ok &= bad_o == 0 && bad_l == 0 && nan_o == 0 && nan_l == 0;
    cr_expect(bad_o == 0 && bad_l == 0,
              "[%s %s causal %d wl %d mask %d] written outside the outputs: %zu guard bytes of O's "
              "buffer, %zu of LSE's changed",
              g->what, fcl_dtype_name(dt), causal, wl, masked, bad_o, bad_l);
    cr_expect(nan_o == 0 && nan_l == 0,
              "[%s %s causal %d wl %d mask %d] %zu NaN in O, %zu in LSE: read outside Q, K or V "
              "(their NaN guards)",
              g->what, fcl_dtype_name(dt), causal, wl, masked, nan_o, nan_l);
    fcl_tensor all[] = {q, k, v, qb, kb, vb, m, cq, ck};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    support_guarded_out_release(&o);
    support_guarded_out_release(&l);
    free(ho);
    free(hl);
    return ok;
}

static void garbage_all(fcl_dtype dt, uint64_t seed)
{
    fcl_context ctx = support_context();
    int ok = 1;
    for (int i = 0; i < SUPPORT_N_GARBAGE_SUMS; i++) {
        ok &= garbage_case(ctx, dt, &support_garbage_sums_list[i], 0, U, 0, seed + (uint64_t)i);
        ok &= garbage_case(ctx, dt, &support_garbage_sums_list[i], 1, 5, 1, seed + 100 + (uint64_t)i);
    }
    fcl_context_release(ctx);
    cr_assert(ok, "garbage prefix sums: a failed call, or memory written or read outside the tensors");
}

Test(varlen, garbage_bounds_f32) { garbage_all(FCL_F32, 6000); }
Test(varlen, garbage_bounds_f16) { garbage_all(FCL_F16, 6100); }

/* The same in chunks (several launches carrying per-row state through a scratch buffer). */
Test(varlen, garbage_bounds_chunked)
{
    support_fix_tiles(1);
    support_force_chunks(1);
    garbage_all(FCL_F32, 6200);
    support_force_chunks(0);
    support_fix_tiles(0);
}

/* ---------------------------------------------------------------- fcl_varlen_validate */

/* Valid prefix sums: q lengths {3, 0, 7, 2, 8} (total 20, max 8), k lengths {5, 1, 0, 3, 2}
 * (total 11, max 5). */
static const int32_t VQ[6] = {0, 3, 3, 10, 12, 20}, VK[6] = {0, 5, 6, 6, 9, 11};
enum { VTQ = 20, VTK = 11, VMQ = 8, VMK = 5 };

static char g_msg[1024]; /* the last message of validate_expect */

/* fcl_varlen_validate on host arrays; expects `want`; returns a copy of the message. */
static const char *validate_expect(const int32_t *cq, int nq, const int32_t *ck, int nk, int64_t tq, int64_t tk,
                                   int mq, int mk, fcl_status want)
{
    fcl_context ctx = support_context();
    fcl_tensor a = i32_tensor(ctx, nq, cq), b = i32_tensor(ctx, nk, ck);
    fcl_status st = fcl_varlen_validate(ctx, a, b, tq, tk, mq, mk);
    snprintf(g_msg, sizeof g_msg, "%s", fcl_last_error(ctx));
    fcl_tensor_release(a);
    fcl_tensor_release(b);
    fcl_context_release(ctx);
    cr_assert(st == want, "fcl_varlen_validate returned %s, expected %s; message: \"%s\"", fcl_status_string(st),
              fcl_status_string(want), g_msg);
    if (want != FCL_SUCCESS)
        support_assert_sentence(g_msg);
    return g_msg;
}

static int has_sub(const char *msg, const char *sub) { return strstr(msg, sub) != NULL; }

Test(varlen_validate, valid_succeeds)
{
    validate_expect(VQ, 6, VK, 6, VTQ, VTK, VMQ, VMK, FCL_SUCCESS);
    validate_expect(VQ, 6, VK, 6, VTQ, VTK, VMQ + 10, VMK + 3, FCL_SUCCESS); /* bounds may be loose */
    static const int32_t z[3] = {0, 0, 4}, w[3] = {0, 2, 2};                /* empty sequences */
    validate_expect(z, 3, w, 3, 4, 2, 4, 2, FCL_SUCCESS);
}

Test(varlen_validate, q_not_monotone)
{
    const int32_t q[6] = {0, 3, 3, 10, 9, 20};
    const char *msg = validate_expect(q, 6, VK, 6, VTQ, VTK, VMQ + 20, VMK, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "cu_seqlens_q"), "message \"%s\" does not name cu_seqlens_q", msg);
    SUPPORT_ASSERT_TOKENS(msg, "4", "9"); /* entry 4 holds 9 < 10 */
}

Test(varlen_validate, k_not_monotone)
{
    const int32_t k[6] = {0, 5, 6, 4, 9, 11};
    const char *msg = validate_expect(VQ, 6, k, 6, VTQ, VTK, VMQ, VMK + 20, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "cu_seqlens_k"), "message \"%s\" does not name cu_seqlens_k", msg);
    SUPPORT_ASSERT_TOKENS(msg, "3", "4"); /* entry 3 holds 4 < 6 */
}

Test(varlen_validate, first_entry_not_zero)
{
    const int32_t k[6] = {2, 5, 6, 6, 9, 11};
    const char *msg = validate_expect(VQ, 6, k, 6, VTQ, VTK, VMQ, VMK, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "cu_seqlens_k"), "message \"%s\" does not name cu_seqlens_k", msg);
    SUPPORT_ASSERT_TOKENS(msg, "0", "2"); /* entry 0 holds 2 */
}

Test(varlen_validate, q_first_entry_negative)
{
    const int32_t q[6] = {-3, 3, 3, 10, 12, 20};
    const char *msg = validate_expect(q, 6, VK, 6, VTQ, VTK, VMQ + 20, VMK, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "cu_seqlens_q"), "message \"%s\" does not name cu_seqlens_q", msg);
    SUPPORT_ASSERT_TOKENS(msg, "-3");
}

Test(varlen_validate, last_entry_not_total)
{
    const char *msg = validate_expect(VQ, 6, VK, 6, 21, VTK, VMQ, VMK, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "cu_seqlens_q"), "message \"%s\" does not name cu_seqlens_q", msg);
    SUPPORT_ASSERT_TOKENS(msg, "20", "21");
    msg = validate_expect(VQ, 6, VK, 6, VTQ, 10, VMQ, VMK, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "cu_seqlens_k"), "message \"%s\" does not name cu_seqlens_k", msg);
    SUPPORT_ASSERT_TOKENS(msg, "11", "10");
}

Test(varlen_validate, sequence_longer_than_max_seqlen)
{
    /* q sequence 2 has 7 rows > 6; k sequence 0 has 5 rows > 4 */
    const char *msg = validate_expect(VQ, 6, VK, 6, VTQ, VTK, 6, VMK, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "cu_seqlens_q") || has_sub(msg, "max_seqlen_q"),
              "message \"%s\" names neither cu_seqlens_q nor max_seqlen_q", msg);
    SUPPORT_ASSERT_TOKENS(msg, "7", "6");
    msg = validate_expect(VQ, 6, VK, 6, VTQ, VTK, VMQ, 4, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "cu_seqlens_k") || has_sub(msg, "max_seqlen_k"),
              "message \"%s\" names neither cu_seqlens_k nor max_seqlen_k", msg);
    SUPPORT_ASSERT_TOKENS(msg, "5", "4");
}

Test(varlen_validate, batch_mismatch_q_k)
{
    const int32_t k[5] = {0, 5, 6, 9, 11};
    const char *msg = validate_expect(VQ, 6, k, 5, VTQ, VTK, VMQ, VMK, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "6", "5");
}

Test(varlen_validate, wrong_dtype_and_bad_bounds)
{
    fcl_context ctx = support_context();
    const int64_t n = 6;
    fcl_tensor a = i32_tensor(ctx, 6, VQ), b = i32_tensor(ctx, 6, VK), f = NULL;
    cr_assert(fcl_tensor_create(ctx, FCL_F32, 1, &n, &f) == FCL_SUCCESS);
    fcl_status st = fcl_varlen_validate(ctx, f, b, VTQ, VTK, VMQ, VMK);
    cr_expect(st == FCL_ERR_DTYPE, "f32 cu_seqlens_q: got %s (%s)", fcl_status_string(st), fcl_last_error(ctx));
    st = fcl_varlen_validate(ctx, a, f, VTQ, VTK, VMQ, VMK);
    cr_expect(st == FCL_ERR_DTYPE, "f32 cu_seqlens_k: got %s (%s)", fcl_status_string(st), fcl_last_error(ctx));
    st = fcl_varlen_validate(ctx, NULL, b, VTQ, VTK, VMQ, VMK);
    cr_expect(st == FCL_ERR_INVALID_ARGUMENT, "NULL cu_seqlens_q: got %s", fcl_status_string(st));
    st = fcl_varlen_validate(ctx, a, b, VTQ, VTK, -1, VMK);
    cr_expect(st == FCL_ERR_INVALID_ARGUMENT, "max_seqlen_q -1: got %s", fcl_status_string(st));
    st = fcl_varlen_validate(ctx, a, b, VTQ, VTK, VMQ, VMK);
    cr_expect(st == FCL_SUCCESS, "valid after errors: got %s (%s)", fcl_status_string(st), fcl_last_error(ctx));
    fcl_tensor_release(a);
    fcl_tensor_release(b);
    fcl_tensor_release(f);
    fcl_context_release(ctx);
}

/* ---------------------------------------------------------------- forward argument errors */

/* A valid small problem: q lengths {2, 0, 3} (total 5), k lengths {4, 1, 2} (total 7),
 * Hq 4, Hkv 2, D 16, F32. Each test swaps one tensor or value for a bad one. */
enum { ETQ = 5, ETK = 7, EB = 3, EHQ = 4, EHKV = 2, ED = 16, EMQ = 3, EMK = 4 };
static const int32_t ECQ[4] = {0, 2, 2, 5}, ECK[4] = {0, 4, 5, 7};

typedef struct efix {
    fcl_context ctx;
    fcl_tensor q, k, v, cq, ck;
    support_outputs out; /* O and LSE with copies of their poison */
} efix;

static void efix_init(efix *f)
{
    memset(f, 0, sizeof *f);
    f->ctx = support_context();
    const int64_t qs[3] = {ETQ, EHQ, ED}, ks[3] = {ETK, EHKV, ED}, ls[2] = {EHQ, ETQ};
    f->q = support_tensor_random(f->ctx, FCL_F32, 3, qs, 31);
    f->k = support_tensor_random(f->ctx, FCL_F32, 3, ks, 32);
    f->v = support_tensor_random(f->ctx, FCL_F32, 3, ks, 33);
    f->out.o = support_tensor_random(f->ctx, FCL_F32, 3, qs, 0);
    f->out.lse = support_tensor_random(f->ctx, FCL_F32, 2, ls, 0);
    f->cq = i32_tensor(f->ctx, EB + 1, ECQ);
    f->ck = i32_tensor(f->ctx, EB + 1, ECK);
    support_outputs_poison(&f->out);
}

/* Replaces one of f's tensors by a new one (random contents; poisoned again if O or LSE). */
static void efix_replace(efix *f, fcl_tensor *slot, fcl_dtype dt, int ndim, const int64_t *shape)
{
    support_outputs_replace(f->ctx, &f->out, slot, dt, ndim, shape);
}

static void efix_fini(efix *f)
{
    fcl_tensor all[] = {f->q, f->k, f->v, f->cq, f->ck};
    for (int i = 0; i < 5; i++)
        fcl_tensor_release(all[i]);
    support_outputs_free(&f->out);
    fcl_context_release(f->ctx);
}

/* Calls the varlen forward with f's tensors; expects `want`; checks event, message and that
 * the outputs are untouched; returns a copy of the message. */
static const char *ecall(efix *f, const fcl_attn_params *p, int mq, int mk, fcl_status want)
{
    cl_event ev = NULL;
    fcl_status st = fcl_attention_varlen_forward(f->ctx, p, f->q, f->k, f->v, f->cq, f->ck, mq, mk, f->out.o,
                                                 f->out.lse, &ev);
    return support_outputs_expect(f->ctx, &f->out, "fcl_attention_varlen_forward", st, ev, want);
}

/* A fixture with `slot` replaced by a tensor of dt and shape, called with default params:
 * the message of the expected `want`. */
static const char *ecall_replaced(efix *f, fcl_tensor *slot, fcl_dtype dt, int ndim, const int64_t *shape,
                                  fcl_status want)
{
    efix_replace(f, slot, dt, ndim, shape);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    return ecall(f, &p, EMQ, EMK, want);
}

Test(varlen_errors, control_valid_call_writes_outputs)
{
    efix f;
    efix_init(&f);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT; /* not causal: every row sees a key */
    ecall(&f, &p, EMQ, EMK, FCL_SUCCESS);
    support_outputs_written(f.ctx, &f.out, EHQ * ETQ);
    efix_fini(&f);
}

Test(varlen_errors, cu_seqlens_dtype_not_i32)
{
    efix f;
    efix_init(&f);
    const int64_t n = EB + 1;
    const char *msg = ecall_replaced(&f, &f.cq, FCL_F32, 1, &n, FCL_ERR_DTYPE);
    cr_assert(has_sub(msg, "cu_seqlens_q"), "message \"%s\" does not name cu_seqlens_q", msg);
    SUPPORT_ASSERT_TOKENS(msg, "f32");
    efix_fini(&f);
}

Test(varlen_errors, cu_seqlens_not_1d)
{
    efix f;
    efix_init(&f);
    const int64_t sh[2] = {EB + 1, 1};
    fcl_tensor_release(f.ck);
    f.ck = NULL;
    cr_assert(fcl_tensor_create(f.ctx, FCL_I32, 2, sh, &f.ck) == FCL_SUCCESS);
    cr_assert(fcl_tensor_write_raw(f.ck, ECK, sizeof ECK) == FCL_SUCCESS);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = ecall(&f, &p, EMQ, EMK, FCL_ERR_SHAPE);
    cr_assert(has_sub(msg, "cu_seqlens_k"), "message \"%s\" does not name cu_seqlens_k", msg);
    efix_fini(&f);
}

Test(varlen_errors, cu_seqlens_lengths_differ)
{
    efix f;
    efix_init(&f);
    static const int32_t k5[5] = {0, 4, 5, 6, 7};
    fcl_tensor_release(f.ck);
    f.ck = i32_tensor(f.ctx, 5, k5);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = ecall(&f, &p, EMQ, EMK, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "4", "5");
    efix_fini(&f);
}

Test(varlen_errors, q_not_3d)
{
    efix f;
    efix_init(&f);
    const int64_t sh[4] = {1, ETQ, EHQ, ED};
    const char *msg = ecall_replaced(&f, &f.q, FCL_F32, 4, sh, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "Q", "4", "3");
    efix_fini(&f);
}

Test(varlen_errors, total_k_differs_from_total_v)
{
    efix f;
    efix_init(&f);
    const int64_t sh[3] = {ETK + 2, EHKV, ED};
    const char *msg = ecall_replaced(&f, &f.v, FCL_F32, 3, sh, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "V", "9", "7");
    efix_fini(&f);
}

Test(varlen_errors, total_q_differs_from_o)
{
    efix f;
    efix_init(&f);
    const int64_t sh[3] = {ETQ + 1, EHQ, ED};
    const char *msg = ecall_replaced(&f, &f.out.o, FCL_F32, 3, sh, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "O", "6", "5");
    efix_fini(&f);
}

Test(varlen_errors, lse_transposed)
{
    efix f;
    efix_init(&f);
    const int64_t sh[2] = {ETQ, EHQ}; /* [total_q, Hq] instead of [Hq, total_q] */
    const char *msg = ecall_replaced(&f, &f.out.lse, FCL_F32, 2, sh, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "LSE");
    efix_fini(&f);
}

Test(varlen_errors, negative_max_seqlen)
{
    efix f;
    efix_init(&f);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = ecall(&f, &p, -1, EMK, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "max_seqlen_q"), "message \"%s\" does not name max_seqlen_q", msg);
    SUPPORT_ASSERT_TOKENS(msg, "-1");
    msg = ecall(&f, &p, EMQ, -7, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "max_seqlen_k"), "message \"%s\" does not name max_seqlen_k", msg);
    SUPPORT_ASSERT_TOKENS(msg, "-7");
    efix_fini(&f);
}

Test(varlen_errors, null_cu_seqlens)
{
    efix f;
    efix_init(&f);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    fcl_tensor keep = f.cq;
    f.cq = NULL;
    const char *msg = ecall(&f, &p, EMQ, EMK, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "cu_seqlens_q"), "message \"%s\" does not name cu_seqlens_q", msg);
    f.cq = keep;
    efix_fini(&f);
}

Test(varlen_errors, key_mask_not_total_k)
{
    efix f;
    efix_init(&f);
    const int64_t n = ETQ; /* [total_q] instead of [total_k] */
    fcl_tensor m = support_tensor_random(f.ctx, FCL_F32, 1, &n, 51);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.key_mask = m;
    const char *msg = ecall(&f, &p, EMQ, EMK, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "5", "7");
    fcl_tensor_release(m);
    efix_fini(&f);
}

Test(varlen_errors, alibi_wrong_batch)
{
    efix f;
    efix_init(&f);
    const int64_t sh[2] = {EB + 1, EHQ}; /* [B + 1, Hq] */
    fcl_tensor a = support_tensor_random(f.ctx, FCL_F32, 2, sh, 52);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.alibi_slopes = a;
    ecall(&f, &p, EMQ, EMK, FCL_ERR_SHAPE);
    fcl_tensor_release(a);
    efix_fini(&f);
}

Test(varlen_errors, mixed_dtypes)
{
    efix f;
    efix_init(&f);
    const int64_t sh[3] = {ETK, EHKV, ED};
    const char *msg = ecall_replaced(&f, &f.k, FCL_F16, 3, sh, FCL_ERR_DTYPE);
    SUPPORT_ASSERT_TOKENS(msg, "f16", "f32");
    efix_fini(&f);
}
