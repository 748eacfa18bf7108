/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcl_attention_packed_qkv_forward on the FLASHCL_DEVICE device.
 *
 * QKV is the (L, 3*H*D) output of a fused projection seen as [L, 3, H, D]; seq_bounds I32
 * [L, 2] gives each row its sequence [start, end). Checked:
 *  - every sequence against the float64 reference of that sequence alone (B = 1, Sq = Sk = its
 *    length), with the DESIGN.md rule per sequence for O [L, H, D] and LSE [H, L]:
 *    bidirectional, the reference's window w as window_left = window_right = w / 2, causal,
 *    softcap, ALiBi [H], key mask [L], strided (padded) layouts;
 *  - with one-hot V rows, the exact set of keys each row weighs: its own sequence's rows j
 *    with |r - j| <= w / 2 (and j <= r when causal), nothing else;
 *  - garbage seq_bounds: the call succeeds, nothing outside O and LSE is written (views in
 *    the middle of guarded buffers), no guard of QKV is read (NaN guards), O is overwritten;
 *  - bad arguments: status, message, outputs untouched.
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

#define U (-1)

typedef support_ppack ppack;

/* PP_LONG: one sequence of 450 rows. */
static ppack make_ppack(int kind, int L, uint64_t seed) { return support_ppack_make(kind, L, 450, seed); }

/* ---------------------------------------------------------------- cases */

enum {
    PL_CONTIG = 0, /* QKV a view of a contiguous (L, 3*H*D) buffer; O, LSE contiguous */
    PL_PADDED = 1, /* QKV rows padded to 3*H*D + 5 from element 3; O rows padded; LSE rows padded */
    PL_NO_LSE = 2
};

typedef struct pcase {
    int pack, L, H, D;
    int causal, w; /* w: the reference's bidirectional window (-1 = none) -> w / 2 each side */
    float softcap, scale;
    int mask, alibi, layout;
    float amp;
} pcase;

static void describe(const pcase *c, fcl_dtype dt, const ppack *p, char *buf, size_t n)
{
    snprintf(buf, n,
             "%s pack%d L%d (%d sequences, longest %d) H%d D%d causal%d w%d softcap%g scale%g mask%d "
             "alibi%d layout%d amp%g",
             fcl_dtype_name(dt), c->pack, c->L, p->nseq, p->maxlen, c->H, c->D, c->causal, c->w,
             (double)c->softcap, (double)c->scale, c->mask, c->alibi, c->layout, (double)c->amp);
}

typedef struct ptensors {
    fcl_tensor base, qkv, bounds, mask, alibi;
    int64_t row; /* elements per QKV row in the base buffer */
    int64_t qkv_offset;
    support_fwd_out out;
} ptensors;

static void ptensors_release(ptensors *t)
{
    fcl_tensor all[] = {t->base, t->qkv, t->bounds, t->mask, t->alibi};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    support_fwd_out_release(&t->out);
    memset(t, 0, sizeof *t);
}

typedef struct phost {
    float *qkv, *mask, *slopes; /* qkv dense [L, 3, H, D] */
} phost;

static void phost_free(phost *h)
{
    free(h->qkv);
    free(h->mask);
    free(h->slopes);
    memset(h, 0, sizeof *h);
}

static void setup_case(fcl_context ctx, fcl_dtype dt, const pcase *c, const ppack *p, uint64_t seed, phost *h,
                       ptensors *t)
{
    const int64_t L = c->L, H = c->H, D = c->D, HD = H * D;
    memset(h, 0, sizeof *h);
    memset(t, 0, sizeof *t);
    h->qkv = support_xmalloc(sizeof(float) * (size_t)(L * 3 * HD));
    support_random(h->qkv, (size_t)(L * 3 * HD), seed * 8 + 1, -c->amp, c->amp, dt);
    t->qkv = support_qkv_buffer(ctx, dt, L, H, D, c->layout == PL_PADDED, h->qkv, &t->base, &t->row, &t->qkv_offset);
    const int64_t bs[2] = {L, 2};
    t->bounds = support_i32_tensor(ctx, 2, bs, p->bounds);
    /* padded: O with head stride D + 1 from element 1, LSE rows padded */
    support_fwd_out_make(ctx, dt, L, H, D, c->layout == PL_PADDED ? 1 : -1, 1, c->layout != PL_NO_LSE, &t->out);
    if (c->mask == MASK_ON) {
        /* 0 and 0.5 drop a key, 0.51 / 0.75 / 1 keep it; one sequence (longer than one row)
         * has every key dropped */
        h->mask = support_xmalloc(sizeof(float) * (size_t)L);
        support_ppack_mask(p, seed * 8 + 4, h->mask);
        t->mask = support_tensor(ctx, FCL_F32, 1, &L, h->mask);
    }
    if (c->alibi == ALIBI_H) {
        h->slopes = support_xmalloc(sizeof(float) * (size_t)H);
        support_alibi_slopes((int)H, (int)H, h->slopes);
        t->alibi = support_tensor(ctx, FCL_F32, 1, &H, h->slopes);
    }
}

static fcl_attn_params case_params(const pcase *c, const ptensors *t)
{
    return support_attn_params(c->scale, c->causal, support_half_window(c->w), support_half_window(c->w), c->softcap,
                               t->mask, t->alibi);
}

/* Poisons, runs the packed forward, reads back O [L,H,D] and LSE [H,L] (when present). */
static fcl_status run_packed(fcl_context ctx, const pcase *c, const ptensors *t, float *o, float *lse,
                             size_t *outside_o, size_t *outside_l)
{
    const fcl_attn_params prm = case_params(c, t);
    support_fwd_out_poison(&t->out);
    fcl_status st = fcl_attention_packed_qkv_forward(ctx, &prm, t->qkv, t->bounds, t->out.o, t->out.lse, NULL);
    if (st != FCL_SUCCESS)
        return st;
    support_fwd_out_read(ctx, &t->out, o, lse, outside_o, outside_l);
    return FCL_SUCCESS;
}

typedef support_fwd_check seq_check;

/* Every sequence against the reference of its rows alone (B = 1, Sq = Sk = its length). */
static seq_check compare_sequences(const pcase *c, fcl_dtype dt, const ppack *p, const phost *h, const float *o,
                                   const float *lse)
{
    seq_check r;
    const size_t HD = (size_t)c->H * c->D;
    support_fwd_check_init(&r, o, (size_t)c->L * HD, lse, (size_t)c->H * c->L);
    for (int b = 0; b < p->nseq; b++) {
        const int n = p->len[b], s0 = p->start[b];
        float *in[3];
        for (int k = 0; k < 3; k++) {
            in[k] = support_xmalloc(sizeof(float) * n * HD);
            support_split_rows(h->qkv, k, s0, n, HD, in[k]);
        }
        const ref_attn_problem pr = support_ppack_problem(p, b, c->H, c->D, c->scale, c->causal, c->w, c->softcap,
                                                          h->mask, h->slopes);
        support_fwd_check_seq(&pr, dt, b, in[0], in[1], in[2], o, lse, c->L, s0, &r);
        for (int k = 0; k < 3; k++)
            free(in[k]);
    }
    return r;
}

/* One case set up: its packing, name, host inputs, device tensors, and room for two runs'
 * O [L, H, D] (no elements) and LSE [H, L] (nl). */
typedef struct prun {
    ppack p;
    char name[400];
    phost h;
    ptensors t;
    size_t no, nl;
    float *o[2], *l[2];
} prun;

static void prun_begin(prun *r, fcl_context ctx, fcl_dtype dt, const pcase *c, uint64_t seed)
{
    r->p = make_ppack(c->pack, c->L, seed);
    describe(c, dt, &r->p, r->name, sizeof r->name);
    setup_case(ctx, dt, c, &r->p, seed, &r->h, &r->t);
    r->no = (size_t)c->L * c->H * c->D;
    r->nl = (size_t)c->H * c->L;
    for (int i = 0; i < 2; i++) {
        r->o[i] = support_xmalloc(sizeof(float) * r->no);
        r->l[i] = support_xmalloc(sizeof(float) * r->nl);
    }
}

static void prun_end(prun *r)
{
    for (int i = 0; i < 2; i++) {
        free(r->o[i]);
        free(r->l[i]);
    }
    ptensors_release(&r->t);
    phost_free(&r->h);
    support_ppack_free(&r->p);
}

static int check_case(fcl_context ctx, fcl_dtype dt, const pcase *c, uint64_t seed)
{
    prun v;
    prun_begin(&v, ctx, dt, c, seed);
    const ppack *p = &v.p;
    const char *name = v.name;
    float *o = v.o[0], *l = v.l[0];
    size_t oo = 0, ol = 0;
    fcl_status st = run_packed(ctx, c, &v.t, o, l, &oo, &ol);
    cr_expect(st == FCL_SUCCESS, "[%s] fcl_attention_packed_qkv_forward: %s: %s", name, fcl_status_string(st),
              fcl_last_error(ctx));
    int ok = st == FCL_SUCCESS;
    if (ok) {
        seq_check r = compare_sequences(c, dt, p, &v.h, o, v.t.out.lse ? l : NULL);
        ok = support_fwd_check_ok(&r) && oo == 0 && ol == 0;
        cr_expect(ok,
                  "[%s] %d of %d sequences out of tolerance (first: seq %d, O err %.3g bound %.3g, LSE "
                  "err %.3g bound %.3g) | NaN O %zu LSE %zu | bad rows %zu (%zu empty) | written outside "
                  "views O %zu LSE %zu",
                  name, r.failed_seqs, p->nseq, r.first_bad, r.o_err, r.o_bound, r.l_err, r.l_bound, r.nan_o,
                  r.nan_l, r.bad_rows, r.empty_rows, oo, ol);
    }
    prun_end(&v);
    return ok;
}

static void check_table(fcl_dtype dt, const pcase *cases, size_t n, uint64_t seed0)
{
    fcl_context ctx = support_context();
    size_t failed = 0;
    for (size_t i = 0; i < n; i++)
        failed += !check_case(ctx, dt, &cases[i], seed0 + i);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu %s packed cases failed", failed, n, fcl_dtype_name(dt));
}

/* ---------------------------------------------------------------- correctness tables */

static const pcase packed_cases[] = {
    /* pack      L    H  D  causal w  softcap scale mask alibi layout amp */
    {PP_SHORT, 600, 4, 64, 0, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
    {PP_SHORT, 600, 4, 64, 1, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
    {PP_LONG, 700, 2, 64, 0, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
    {PP_LONG, 700, 2, 64, 1, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
    {PP_SINGLE, 300, 4, 64, 0, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
    {PP_ONE, 257, 2, 64, 0, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
    /* windows: odd and even w, causal + window */
    {PP_SHORT, 600, 4, 64, 0, 7, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
    {PP_LONG, 700, 2, 64, 0, 64, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
    {PP_SHORT, 600, 4, 64, 1, 10, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
    {PP_SINGLE, 300, 2, 64, 0, 1, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2}, /* w/2 = 0: self only */
    /* softcap, scale, key mask [L], ALiBi [H], combinations */
    {PP_SHORT, 600, 4, 64, 0, U, 5.0f, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 3},
    {PP_SHORT, 600, 4, 64, 1, U, 0, 0.3f, MASK_ON, ALIBI_NONE, PL_CONTIG, 2},
    {PP_SHORT, 600, 4, 64, 0, 9, 0, 0, MASK_NONE, ALIBI_H, PL_CONTIG, 2},
    {PP_LONG, 700, 2, 64, 1, 40, 5.0f, 0, MASK_ON, ALIBI_H, PL_CONTIG, 3},
    /* strided layouts */
    {PP_SHORT, 600, 4, 64, 0, 12, 0, 0, MASK_NONE, ALIBI_NONE, PL_PADDED, 2},
    {PP_SINGLE, 300, 2, 64, 1, U, 5.0f, 0, MASK_ON, ALIBI_H, PL_PADDED, 3},
    {PP_SHORT, 600, 4, 64, 1, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_NO_LSE, 2},
};

static void packed_table(fcl_dtype dt, int D2, uint64_t seed0)
{
    enum { N = sizeof packed_cases / sizeof packed_cases[0] };
    pcase cases[N + 2];
    memcpy(cases, packed_cases, sizeof packed_cases);
    const pcase a = {PP_SHORT, 300, 2, D2, 1, 16, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2};
    const pcase b = {PP_SINGLE, 200, 3, D2, 0, U, 5.0f, 0, MASK_ON, ALIBI_H, PL_PADDED, 3};
    cases[N] = a;
    cases[N + 1] = b;
    check_table(dt, cases, N + 2, seed0);
}

Test(packed_qkv, sequences_f32) { packed_table(FCL_F32, 111, 100); }
Test(packed_qkv, sequences_f16) { packed_table(FCL_F16, 40, 200); }
Test(packed_qkv, sequences_bf16) { packed_table(FCL_BF16, 128, 300); }

/* ---------------------------------------------------------------- structure (one-hot V) */

/*
 * V of row j is the unit vector e_j (D >= L), so O[r, h, :] are row r's attention weights
 * over all rows: positive exactly for the rows j of r's own sequence with |r - j| <= w / 2
 * (j <= r when causal) whose mask keeps them, zero everywhere else.
 */
static int structure_case(fcl_context ctx, const ppack *p, int causal, int w, int masked)
{
    const int L = p->L, H = 2, D = 208;
    cr_assert(L <= D, "test bug: L > D");
    const size_t HD = (size_t)H * D;
    float *qkv = support_xmalloc(sizeof(float) * L * 3 * HD), *o = support_xmalloc(sizeof(float) * L * HD);
    float *m = support_xmalloc(sizeof(float) * (size_t)L);
    support_random(qkv, (size_t)L * 3 * HD, 77, -0.5f, 0.5f, FCL_F32);
    for (int r = 0; r < L; r++) {
        float *v = qkv + (size_t)r * 3 * HD + 2 * HD;
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++)
                v[(size_t)h * D + d] = d == r ? 1.0f : 0.0f;
        m[r] = masked && r % 7 == 2 ? 0.0f : 1.0f;
    }
    const int64_t bs[2] = {L, (int64_t)(3 * HD)}, qs[4] = {L, 3, H, D}, os[3] = {L, H, D}, ss[2] = {L, 2};
    const int64_t ms = L;
    fcl_tensor base = support_tensor(ctx, FCL_F32, 2, bs, qkv);
    fcl_tensor q4 = support_view(base, 4, qs, NULL, 0);
    fcl_tensor to = support_tensor(ctx, FCL_F32, 3, os, NULL), tm = support_tensor(ctx, FCL_F32, 1, &ms, m);
    fcl_tensor tb = support_i32_tensor(ctx, 2, ss, p->bounds);
    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    prm.causal = causal;
    prm.window_left = prm.window_right = support_half_window(w);
    prm.key_mask = masked ? tm : NULL;
    support_poison(to);
    fcl_status st = fcl_attention_packed_qkv_forward(ctx, &prm, q4, tb, to, NULL, NULL);
    cr_assert(st == FCL_SUCCESS, "packed forward: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS);
    support_read(to, o);
    size_t wrong = 0;
    int fr = -1, fj = -1;
    float fv = 0;
    for (int r = 0; r < L; r++) {
        const int s0 = p->bounds[2 * r], s1 = p->bounds[2 * r + 1];
        for (int h = 0; h < H; h++)
            for (int j = 0; j < D; j++) {
                const float x = o[((size_t)r * H + h) * D + j];
                int vis = j >= s0 && j < s1 && (w < 0 || abs(r - j) <= w / 2) && (!causal || j <= r) &&
                          (!masked || m[j] > 0.5f);
                if (isnan(x) || x < 0.0f || (x > 0.0f) != vis) {
                    if (wrong++ == 0) {
                        fr = r;
                        fj = j;
                        fv = x;
                    }
                }
            }
    }
    cr_expect(wrong == 0,
              "causal %d w %d (half %d) mask %d: %zu weights wrong; first: row %d (sequence [%d,%d)) gives key "
              "row %d weight %g",
              causal, w, support_half_window(w), masked, wrong, fr, fr >= 0 ? p->bounds[2 * fr] : 0,
              fr >= 0 ? p->bounds[2 * fr + 1] : 0, fj, (double)fv);
    fcl_tensor all[] = {base, q4, to, tm, tb};
    for (int i = 0; i < 5; i++)
        fcl_tensor_release(all[i]);
    free(qkv);
    free(o);
    free(m);
    return wrong == 0;
}

Test(packed_qkv, structure_one_hot_v)
{
    fcl_context ctx = support_context();
    ppack a = make_ppack(PP_SHORT, 200, 61), b = make_ppack(PP_ONE, 150, 0);
    int ok = 1;
    ok &= structure_case(ctx, &a, 0, U, 0);
    ok &= structure_case(ctx, &a, 0, 7, 0);  /* |r - j| <= 3 */
    ok &= structure_case(ctx, &a, 0, 8, 0);  /* |r - j| <= 4 */
    ok &= structure_case(ctx, &a, 1, U, 0);
    ok &= structure_case(ctx, &a, 1, 10, 1); /* r - 5 <= j <= r */
    ok &= structure_case(ctx, &b, 0, 21, 1);
    support_ppack_free(&a);
    support_ppack_free(&b);
    fcl_context_release(ctx);
    cr_assert(ok, "packed attention weights are not confined to each row's window in its sequence");
}

/* ---------------------------------------------------------------- chunked keys */

/* Under FLASHCL_LOOP_LIMIT the keys run in chunks; with the same tiles the result must equal
 * the one-launch result bit for bit and match the reference. */
static int chunk_case(fcl_context ctx, fcl_dtype dt, const pcase *c, uint64_t seed)
{
    prun v;
    prun_begin(&v, ctx, dt, c, seed);
    const ppack *p = &v.p;
    const char *name = v.name;
    const size_t no = v.no, nl = v.nl;
    float *o1 = v.o[0], *l1 = v.l[0], *o2 = v.o[1], *l2 = v.l[1];
    size_t oo1, ol1, oo2, ol2;
    support_fix_tiles(1);
    support_force_chunks(0);
    fcl_status st1 = run_packed(ctx, c, &v.t, o1, l1, &oo1, &ol1);
    support_force_chunks(1);
    fcl_status st2 = run_packed(ctx, c, &v.t, o2, l2, &oo2, &ol2);
    support_force_chunks(0);
    support_fix_tiles(0);
    cr_assert(st1 == FCL_SUCCESS && st2 == FCL_SUCCESS, "[%s] one launch: %s, chunked: %s: %s", name,
              fcl_status_string(st1), fcl_status_string(st2), fcl_last_error(ctx));
    double dmo, dml;
    long fo, fl;
    size_t dno = support_bit_diff(o1, o2, no, &dmo, &fo), dnl = v.t.out.lse ? support_bit_diff(l1, l2, nl, &dml, &fl) : 0;
    int same = dno == 0 && dnl == 0;
    seq_check r = compare_sequences(c, dt, p, &v.h, o2, v.t.out.lse ? l2 : NULL);
    int good = support_fwd_check_ok(&r) && oo2 == 0 && ol2 == 0;
    const long frow = fo < 0 ? -1L : fo / (long)(c->H * c->D);
    cr_expect(same,
              "[%s] chunked results differ from one launch: %zu of %zu O elements (max |diff| %.3g, first at "
              "row %ld of sequence [%d,%d)), %zu of %zu LSE elements",
              name, dno, no, dmo, frow, frow < 0 ? 0 : p->bounds[2 * frow], frow < 0 ? 0 : p->bounds[2 * frow + 1],
              dnl, nl);
    cr_expect(good, "[%s] chunked: %d sequences out of tolerance (first %d: O err %.3g bound %.3g), NaN O %zu "
              "LSE %zu, bad rows %zu, outside views O %zu LSE %zu",
              name, r.failed_seqs, r.first_bad, r.o_err, r.o_bound, r.nan_o, r.nan_l, r.bad_rows, oo2, ol2);
    prun_end(&v);
    return same && good;
}

Test(packed_qkv, chunked_keys)
{
    static const pcase cases[] = {
        {PP_LONG, 600, 2, 64, 0, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
        {PP_LONG, 600, 2, 64, 1, 100, 5.0f, 0, MASK_ON, ALIBI_H, PL_PADDED, 3},
    };
    fcl_context ctx = support_context();
    int ok = chunk_case(ctx, FCL_F32, &cases[0], 810);
    ok &= chunk_case(ctx, FCL_F16, &cases[1], 811);
    fcl_context_release(ctx);
    cr_assert(ok, "chunked packed forward differs from the one-launch forward or the reference");
}

/* ---------------------------------------------------------------- garbage seq_bounds */

enum { GUARD = 555, SPARE = 1 }; /* every guarded view: GUARD elements on each side, SPARE more after */

/*
 * QKV lives GUARD elements into a NaN-filled buffer; O and LSE are views GUARD elements into
 * buffers filled with -555, their own elements set to 777. seq_bounds hold nonsense. The
 * call must succeed; the guards must stay bit-identical; no NaN may appear in O or LSE (inputs
 * are finite and there is no ALiBi, so a NaN means a guard of QKV was read); and O, being
 * overwritten for every row, must hold no 777 left over.
 */
static int garbage_case(fcl_context ctx, fcl_dtype dt, int pattern, int causal, int w, uint64_t seed)
{
    enum { L = 97, H = 3, D = 32 };
    const int64_t qs[4] = {L, 3, H, D}, os[3] = {L, H, D}, ls[2] = {H, L}, bs[2] = {L, 2};
    fcl_tensor qb;
    fcl_tensor qkv = support_guarded_input(ctx, dt, 4, qs, GUARD, SPARE, seed, -2.0f, 2.0f, &qb);
    support_guarded_out o, l;
    support_guarded_out_make(ctx, dt, 3, os, GUARD, SPARE, &o);
    support_guarded_out_make(ctx, FCL_F32, 2, ls, GUARD, SPARE, &l);
    int32_t bounds[2 * L];
    support_garbage_bounds(pattern, L, seed, bounds);
    fcl_tensor tb = support_i32_tensor(ctx, 2, bs, bounds);

    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    prm.causal = causal;
    prm.window_left = prm.window_right = support_half_window(w);
    fcl_status st = fcl_attention_packed_qkv_forward(ctx, &prm, qkv, tb, o.view, l.view, NULL);
    int ok = st == FCL_SUCCESS;
    cr_expect(ok, "[pattern %d %s] packed forward with garbage seq_bounds: %s: %s", pattern, fcl_dtype_name(dt),
              fcl_status_string(st), fcl_last_error(ctx));
    fcl_status fs = fcl_finish(ctx);
    cr_assert(fs == FCL_SUCCESS, "[pattern %d %s] fcl_finish: %s: %s", pattern, fcl_dtype_name(dt),
              fcl_status_string(fs), fcl_last_error(ctx));
    const size_t bad_o = support_guarded_out_changed(&o), bad_l = support_guarded_out_changed(&l);
    size_t nan_o, nan_l, left = 0;
    float *ho = support_guarded_out_read(&o, &nan_o), *hl = support_guarded_out_read(&l, &nan_l);
    for (size_t i = 0; i < o.n; i++)
        left += ho[i] == 777.0f;
    ok &= bad_o == 0 && bad_l == 0 && nan_o == 0 && nan_l == 0 && left == 0;
    cr_expect(bad_o == 0 && bad_l == 0,
              "[pattern %d %s causal %d w %d] written outside the outputs: %zu guard bytes of O's buffer, %zu "
              "of LSE's changed",
              pattern, fcl_dtype_name(dt), causal, w, bad_o, bad_l);
    cr_expect(nan_o == 0 && nan_l == 0,
              "[pattern %d %s causal %d w %d] %zu NaN in O, %zu in LSE: a guard of QKV was read", pattern,
              fcl_dtype_name(dt), causal, w, nan_o, nan_l);
    cr_expect(left == 0, "[pattern %d %s causal %d w %d] %zu O elements not overwritten", pattern,
              fcl_dtype_name(dt), causal, w, left);
    fcl_tensor all[] = {qb, qkv, tb};
    for (int i = 0; i < 3; i++)
        fcl_tensor_release(all[i]);
    support_guarded_out_release(&o);
    support_guarded_out_release(&l);
    free(ho);
    free(hl);
    return ok;
}

Test(packed_qkv, garbage_seq_bounds)
{
    fcl_context ctx = support_context();
    int ok = 1;
    for (int pattern = 0; pattern < 4; pattern++) {
        ok &= garbage_case(ctx, FCL_F32, pattern, 0, U, 900 + (uint64_t)pattern);
        ok &= garbage_case(ctx, FCL_F16, pattern, 1, 9, 950 + (uint64_t)pattern);
    }
    /* and in chunks (per-row state carried between launches) */
    support_fix_tiles(1);
    support_force_chunks(1);
    for (int pattern = 0; pattern < 4; pattern++)
        ok &= garbage_case(ctx, FCL_F32, pattern, pattern % 2, pattern == 3 ? 20 : U, 980 + (uint64_t)pattern);
    support_force_chunks(0);
    support_fix_tiles(0);
    fcl_context_release(ctx);
    cr_assert(ok, "garbage seq_bounds: a failed call, or memory written or read outside the tensors");
}

/* ---------------------------------------------------------------- argument errors */

enum { EL = 9, EH = 2, ED = 16 };

typedef struct efix {
    fcl_context ctx;
    fcl_tensor qkv, bounds;
    support_outputs out; /* O and LSE with copies of their poison */
} efix;

/* A valid problem: L 9 rows in sequences {0..3}, {4}, {5..8}; H 2, D 16, F32. */
static void efix_init(efix *f)
{
    memset(f, 0, sizeof *f);
    f->ctx = support_context();
    const int64_t qs[4] = {EL, 3, EH, ED}, bs[2] = {EL, 2}, os[3] = {EL, EH, ED}, ls[2] = {EH, EL};
    static const int32_t b[2 * EL] = {0, 4, 0, 4, 0, 4, 0, 4, 4, 5, 5, 9, 5, 9, 5, 9, 5, 9};
    f->qkv = support_tensor_random(f->ctx, FCL_F32, 4, qs, 21);
    f->bounds = support_i32_tensor(f->ctx, 2, bs, b);
    f->out.o = support_tensor_random(f->ctx, FCL_F32, 3, os, 0);
    f->out.lse = support_tensor_random(f->ctx, FCL_F32, 2, ls, 0);
    support_outputs_poison(&f->out);
}

static void efix_fini(efix *f)
{
    fcl_tensor_release(f->qkv);
    fcl_tensor_release(f->bounds);
    support_outputs_free(&f->out);
    fcl_context_release(f->ctx);
}

static const char *ecall(efix *f, const fcl_attn_params *p, fcl_status want)
{
    cl_event ev = NULL;
    fcl_status st = fcl_attention_packed_qkv_forward(f->ctx, p, f->qkv, f->bounds, f->out.o, f->out.lse, &ev);
    return support_outputs_expect(f->ctx, &f->out, "fcl_attention_packed_qkv_forward", st, ev, want);
}

/* Replaces `slot` by a tensor of dt and shape (random contents; poisoned again if O or LSE)
 * and calls with default params: the message of the expected `want`. */
static const char *ecall_replaced(efix *f, fcl_tensor *slot, fcl_dtype dt, int ndim, const int64_t *shape,
                                  fcl_status want)
{
    support_outputs_replace(f->ctx, &f->out, slot, dt, ndim, shape);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    return ecall(f, &p, want);
}

Test(packed_qkv_errors, control_valid_call_writes_outputs)
{
    efix f;
    efix_init(&f);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    ecall(&f, &p, FCL_SUCCESS);
    support_outputs_written(f.ctx, &f.out, EH * EL);
    efix_fini(&f);
}

Test(packed_qkv_errors, qkv_not_4d)
{
    efix f;
    efix_init(&f);
    const int64_t sh[3] = {EL, 3 * EH, ED};
    const char *msg = ecall_replaced(&f, &f.qkv, FCL_F32, 3, sh, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "QKV");
    efix_fini(&f);
}

Test(packed_qkv_errors, qkv_second_dim_not_3)
{
    efix f;
    efix_init(&f);
    const int64_t sh[4] = {EL, 2, EH, ED};
    const char *msg = ecall_replaced(&f, &f.qkv, FCL_F32, 4, sh, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "QKV");
    efix_fini(&f);
}

Test(packed_qkv_errors, seq_bounds_dtype_not_i32)
{
    efix f;
    efix_init(&f);
    const int64_t sh[2] = {EL, 2};
    const char *msg = ecall_replaced(&f, &f.bounds, FCL_F32, 2, sh, FCL_ERR_DTYPE);
    cr_assert(strstr(msg, "seq_bounds") != NULL, "message \"%s\" does not name seq_bounds", msg);
    SUPPORT_ASSERT_TOKENS(msg, "f32");
    efix_fini(&f);
}

Test(packed_qkv_errors, seq_bounds_wrong_shape)
{
    efix f;
    efix_init(&f);
    const int64_t sh[2] = {EL + 1, 2};
    fcl_tensor_release(f.bounds);
    f.bounds = NULL;
    cr_assert(fcl_tensor_create(f.ctx, FCL_I32, 2, sh, &f.bounds) == FCL_SUCCESS);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = ecall(&f, &p, FCL_ERR_SHAPE);
    cr_assert(strstr(msg, "seq_bounds") != NULL, "message \"%s\" does not name seq_bounds", msg);
    SUPPORT_ASSERT_TOKENS(msg, "10", "9");
    const int64_t sh3[2] = {EL, 3};
    fcl_tensor_release(f.bounds);
    f.bounds = NULL;
    cr_assert(fcl_tensor_create(f.ctx, FCL_I32, 2, sh3, &f.bounds) == FCL_SUCCESS);
    msg = ecall(&f, &p, FCL_ERR_SHAPE);
    cr_assert(strstr(msg, "seq_bounds") != NULL, "message \"%s\" does not name seq_bounds", msg);
    efix_fini(&f);
}

Test(packed_qkv_errors, o_wrong_shape_and_dtype)
{
    efix f;
    efix_init(&f);
    const int64_t sh[3] = {EL, EH, ED + 1};
    const char *msg = ecall_replaced(&f, &f.out.o, FCL_F32, 3, sh, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "O", "17", "16");
    const int64_t ok_sh[3] = {EL, EH, ED};
    msg = ecall_replaced(&f, &f.out.o, FCL_F16, 3, ok_sh, FCL_ERR_DTYPE);
    SUPPORT_ASSERT_TOKENS(msg, "f16", "f32");
    efix_fini(&f);
}

Test(packed_qkv_errors, lse_transposed)
{
    efix f;
    efix_init(&f);
    const int64_t sh[2] = {EL, EH}; /* [L, H] instead of [H, L] */
    const char *msg = ecall_replaced(&f, &f.out.lse, FCL_F32, 2, sh, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "LSE");
    efix_fini(&f);
}

Test(packed_qkv_errors, qkv_dtype_i32)
{
    efix f;
    efix_init(&f);
    const int64_t sh[4] = {EL, 3, EH, ED};
    const char *msg = ecall_replaced(&f, &f.qkv, FCL_I32, 4, sh, FCL_ERR_DTYPE);
    SUPPORT_ASSERT_TOKENS(msg, "i32");
    efix_fini(&f);
}

Test(packed_qkv_errors, key_mask_and_alibi_wrong_length)
{
    efix f;
    efix_init(&f);
    const int64_t n = EL + 2, h = EH + 1;
    fcl_tensor m = support_tensor_random(f.ctx, FCL_F32, 1, &n, 5), a = support_tensor_random(f.ctx, FCL_F32, 1, &h, 6);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.key_mask = m;
    const char *msg = ecall(&f, &p, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "11", "9");
    p.key_mask = NULL;
    p.alibi_slopes = a;
    msg = ecall(&f, &p, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "3", "2");
    fcl_tensor_release(m);
    fcl_tensor_release(a);
    efix_fini(&f);
}

Test(packed_qkv_errors, null_arguments)
{
    efix f;
    efix_init(&f);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    fcl_tensor keep = f.bounds;
    f.bounds = NULL;
    const char *msg = ecall(&f, &p, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(msg, "seq_bounds") != NULL, "message \"%s\" does not name seq_bounds", msg);
    f.bounds = keep;
    keep = f.qkv;
    f.qkv = NULL;
    msg = ecall(&f, &p, FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(msg, "QKV");
    f.qkv = keep;
    efix_fini(&f);
}
