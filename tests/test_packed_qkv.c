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
 *  - packed equals varlen bit for bit: Q, K and V as views of the same QKV buffer with
 *    cu_seqlens from the same packing give the same O and LSE bits;
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

#define U (-1)

/* ---------------------------------------------------------------- small helpers */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int rng_int(uint64_t *s, int lo, int hi)
{
    return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

static fcl_tensor i32_tensor(fcl_context ctx, int ndim, const int64_t *shape, const int32_t *vals)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(ctx, FCL_I32, ndim, shape, &t);
    cr_assert(st == FCL_SUCCESS, "I32 tensor: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    st = fcl_tensor_write_raw(t, vals, sizeof(int32_t) * (size_t)fcl_tensor_numel(t));
    cr_assert(st == FCL_SUCCESS, "write I32: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    return t;
}

static void fill_value(fcl_tensor t, float value)
{
    size_t n = (size_t)fcl_tensor_numel(t);
    float *x = support_xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        x[i] = value;
    support_write(t, x);
    free(x);
}

static unsigned char *read_raw_all(fcl_tensor t, size_t *bytes)
{
    *bytes = (size_t)fcl_tensor_numel(t) * fcl_dtype_size(fcl_tensor_dtype(t));
    unsigned char *b = support_xmalloc(*bytes);
    fcl_status st = fcl_tensor_read_raw(t, b, *bytes);
    cr_assert(st == FCL_SUCCESS, "read_raw: %s", fcl_status_string(st));
    return b;
}

/* ---------------------------------------------------------------- packings */

enum {
    PP_SHORT = 0,  /* sequences of 1..24 rows */
    PP_LONG = 1,   /* one sequence of ~450 rows among short ones */
    PP_SINGLE = 2, /* mostly single rows, some of 2..3 */
    PP_ONE = 3     /* one sequence of all L rows */
};

typedef struct ppack {
    int L, nseq, maxlen;
    int *start, *len; /* per sequence */
    int32_t *bounds;  /* [L, 2] */
    int32_t *cu;      /* [nseq + 1] */
} ppack;

static ppack make_ppack(int kind, int L, uint64_t seed)
{
    ppack p;
    memset(&p, 0, sizeof p);
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 3;
    p.L = L;
    p.start = support_xmalloc(sizeof(int) * (size_t)L);
    p.len = support_xmalloc(sizeof(int) * (size_t)L);
    int r = 0, long_done = 0;
    while (r < L) {
        int n;
        switch (kind) {
        case PP_SHORT: n = rng_int(&s, 1, 24); break;
        case PP_LONG:
            if (!long_done && r >= L / 4) {
                n = 450;
                long_done = 1;
            } else {
                n = rng_int(&s, 1, 20);
            }
            break;
        case PP_SINGLE: n = rng_int(&s, 0, 4) == 0 ? rng_int(&s, 2, 3) : 1; break;
        case PP_ONE: n = L; break;
        default: cr_assert_fail("unknown packing %d", kind); n = 1;
        }
        if (n > L - r)
            n = L - r;
        p.start[p.nseq] = r;
        p.len[p.nseq] = n;
        if (n > p.maxlen)
            p.maxlen = n;
        p.nseq++;
        r += n;
    }
    p.bounds = support_xmalloc(sizeof(int32_t) * 2 * (size_t)L);
    p.cu = support_xmalloc(sizeof(int32_t) * (size_t)(p.nseq + 1));
    for (int b = 0; b < p.nseq; b++) {
        p.cu[b] = p.start[b];
        for (int i = p.start[b]; i < p.start[b] + p.len[b]; i++) {
            p.bounds[2 * i] = p.start[b];
            p.bounds[2 * i + 1] = p.start[b] + p.len[b];
        }
    }
    p.cu[p.nseq] = L;
    return p;
}

static void ppack_free(ppack *p)
{
    free(p->start);
    free(p->len);
    free(p->bounds);
    free(p->cu);
    memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------------- cases */

enum { MASK_NONE = 0, MASK_ON = 1 };
enum { ALIBI_NONE = 0, ALIBI_H = 1 };
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

static int half_window(int w) { return w < 0 ? U : w / 2; }

typedef struct ptensors {
    fcl_tensor base, qkv, bounds, o, lse, mask, alibi;
    fcl_tensor o_base, lse_base;
    int64_t row; /* elements per QKV row in the base buffer */
    int64_t qkv_offset;
    int64_t o_base_n, lse_base_n;
    int64_t o_shape[3], o_strides[3], o_offset;
    int64_t l_shape[2], l_strides[2], l_offset;
} ptensors;

static void ptensors_release(ptensors *t)
{
    fcl_tensor all[] = {t->base, t->qkv, t->bounds, t->o, t->lse, t->mask, t->alibi, t->o_base, t->lse_base};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
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

    t->row = c->layout == PL_PADDED ? 3 * HD + 5 : 3 * HD;
    t->qkv_offset = c->layout == PL_PADDED ? 3 : 0;
    const int64_t bshape[2] = {L, t->row};
    t->base = support_tensor(ctx, dt, 2, bshape, NULL);
    if (c->layout == PL_PADDED)
        fill_value(t->base, NAN); /* the padding must never be read */
    const int64_t qshape[4] = {L, 3, H, D}, qstr[4] = {t->row, HD, D, 1};
    t->qkv = support_view(t->base, 4, qshape, qstr, t->qkv_offset);
    support_write(t->qkv, h->qkv);
    const int64_t bs[2] = {L, 2};
    t->bounds = i32_tensor(ctx, 2, bs, p->bounds);

    const int64_t os[3] = {L, H, D}, ls[2] = {H, L};
    memcpy(t->o_shape, os, sizeof os);
    memcpy(t->l_shape, ls, sizeof ls);
    if (c->layout == PL_PADDED) {
        const int64_t ost[3] = {H * (D + 1), D + 1, 1}, lst[2] = {L + 3, 1};
        memcpy(t->o_strides, ost, sizeof ost);
        memcpy(t->l_strides, lst, sizeof lst);
        t->o_offset = 1;
        t->l_offset = 2;
        t->o_base_n = L * H * (D + 1) + 1;
        t->lse_base_n = H * (L + 3);
        t->o_base = support_tensor(ctx, dt, 1, &t->o_base_n, NULL);
        t->lse_base = support_tensor(ctx, FCL_F32, 1, &t->lse_base_n, NULL);
        t->o = support_view(t->o_base, 3, os, ost, 1);
        t->lse = support_view(t->lse_base, 2, ls, lst, 2);
    } else {
        t->o = support_tensor(ctx, dt, 3, os, NULL);
        if (c->layout != PL_NO_LSE)
            t->lse = support_tensor(ctx, FCL_F32, 2, ls, NULL);
    }
    if (c->mask == MASK_ON) {
        /* 0 and 0.5 drop a key, 0.51 / 0.75 / 1 keep it; one sequence (longer than one row)
         * has every key dropped */
        h->mask = support_xmalloc(sizeof(float) * (size_t)L);
        support_random(h->mask, (size_t)L, seed * 8 + 4, 0.0f, 1.0f, FCL_F32);
        for (int j = 0; j < L; j++) {
            float u = h->mask[j];
            h->mask[j] = u < 0.2f ? 0.0f : u < 0.3f ? 0.5f : u < 0.4f ? 0.51f : u < 0.6f ? 0.75f : 1.0f;
        }
        for (int b = p->nseq / 2; b < p->nseq; b++)
            if (p->len[b] > 1) {
                for (int j = p->start[b]; j < p->start[b] + p->len[b]; j++)
                    h->mask[j] = 0.0f;
                break;
            }
        const int64_t n = L;
        t->mask = support_tensor(ctx, FCL_F32, 1, &n, h->mask);
    }
    if (c->alibi == ALIBI_H) {
        h->slopes = support_xmalloc(sizeof(float) * (size_t)H);
        for (int i = 0; i < H; i++)
            h->slopes[i] = exp2f(-8.0f * (float)(i + 1) / (float)H);
        const int64_t n = H;
        t->alibi = support_tensor(ctx, FCL_F32, 1, &n, h->slopes);
    }
}

static fcl_attn_params case_params(const pcase *c, const ptensors *t)
{
    fcl_attn_params prm = fcl_attn_params_default();
    prm.scale = c->scale;
    prm.causal = c->causal;
    prm.window_left = half_window(c->w);
    prm.window_right = half_window(c->w);
    prm.softcap = c->softcap;
    prm.key_mask = t->mask;
    prm.alibi_slopes = t->alibi;
    return prm;
}

/* Poisons, runs the packed forward, reads back O [L,H,D] and LSE [H,L] (when present). */
static fcl_status run_packed(fcl_context ctx, const pcase *c, const ptensors *t, float *o, float *lse,
                             size_t *outside_o, size_t *outside_l)
{
    const fcl_attn_params prm = case_params(c, t);
    support_poison(t->o_base ? t->o_base : t->o);
    if (t->lse)
        support_poison(t->lse_base ? t->lse_base : t->lse);
    fcl_status st = fcl_attention_packed_qkv_forward(ctx, &prm, t->qkv, t->bounds, t->o, t->lse, NULL);
    if (st != FCL_SUCCESS)
        return st;
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "fcl_finish: %s", fcl_last_error(ctx));
    support_read(t->o, o);
    if (t->lse)
        support_read(t->lse, lse);
    *outside_o = *outside_l = 0;
    if (t->o_base) {
        float *b = support_xmalloc(sizeof(float) * (size_t)t->o_base_n);
        support_read(t->o_base, b);
        *outside_o = support_touched_outside(b, t->o_base_n, 3, t->o_shape, t->o_strides, t->o_offset);
        free(b);
    }
    if (t->lse_base) {
        float *b = support_xmalloc(sizeof(float) * (size_t)t->lse_base_n);
        support_read(t->lse_base, b);
        *outside_l = support_touched_outside(b, t->lse_base_n, 2, t->l_shape, t->l_strides, t->l_offset);
        free(b);
    }
    return FCL_SUCCESS;
}

typedef struct seq_check {
    int failed_seqs, first_bad;
    double o_err, o_bound, l_err, l_bound; /* of the first failing sequence, else the worst O */
    size_t nan_o, nan_l, bad_rows, empty_rows;
} seq_check;

/* Every sequence against the reference of its rows alone (B = 1, Sq = Sk = its length). */
static seq_check compare_sequences(const pcase *c, fcl_dtype dt, const ppack *p, const phost *h, const float *o,
                                   const float *lse)
{
    seq_check r;
    memset(&r, 0, sizeof r);
    r.first_bad = -1;
    const int H = c->H, D = c->D, L = c->L;
    const size_t rowel = (size_t)H * D;
    r.nan_o = support_count_nan(o, (size_t)L * rowel);
    r.nan_l = lse ? support_count_nan(lse, (size_t)H * L) : 0;
    for (int b = 0; b < p->nseq; b++) {
        const int n = p->len[b], s0 = p->start[b];
        float *Q = support_xmalloc(sizeof(float) * n * rowel), *K = support_xmalloc(sizeof(float) * n * rowel);
        float *V = support_xmalloc(sizeof(float) * n * rowel);
        for (int i = 0; i < n; i++) {
            const float *row = h->qkv + (size_t)(s0 + i) * 3 * rowel;
            memcpy(Q + (size_t)i * rowel, row, sizeof(float) * rowel);
            memcpy(K + (size_t)i * rowel, row + rowel, sizeof(float) * rowel);
            memcpy(V + (size_t)i * rowel, row + 2 * rowel, sizeof(float) * rowel);
        }
        ref_attn_problem pr = {1, n, n, H, H, D, (double)c->scale, c->causal, half_window(c->w),
                               half_window(c->w), (double)c->softcap, h->mask ? h->mask + s0 : NULL, 0,
                               h->slopes, 0};
        double *O = support_xmalloc(sizeof(double) * n * rowel), *Lr = support_xmalloc(sizeof(double) * (size_t)H * n);
        float *On = support_xmalloc(sizeof(float) * n * rowel), *Ln = support_xmalloc(sizeof(float) * (size_t)H * n);
        float *lb = support_xmalloc(sizeof(float) * (size_t)H * n);
        ref_attention_forward(&pr, Q, K, V, O, Lr);
        ref_attention_forward_naive(&pr, dt, Q, K, V, On, Ln);
        const float *ob = o + (size_t)s0 * rowel;
        for (int hh = 0; hh < H; hh++)
            for (int i = 0; i < n; i++)
                lb[(size_t)hh * n + i] = lse ? lse[(size_t)hh * L + s0 + i] : 0.0f;
        double eo = support_max_err_f(ob, O, n * rowel), no = support_max_err_f(On, O, n * rowel);
        double el = lse ? support_max_err_f(lb, Lr, (size_t)H * n) : 0.0;
        double nl = support_max_err_f(Ln, Lr, (size_t)H * n);
        for (int hh = 0; hh < H; hh++)
            for (int i = 0; i < n; i++) {
                size_t li = (size_t)hh * n + i;
                if (Lr[li] != -INFINITY) {
                    if (lse && !isfinite(lb[li]))
                        r.bad_rows++;
                    continue;
                }
                r.empty_rows++;
                int bad = lse && lb[li] != -INFINITY;
                for (int d = 0; d < D; d++)
                    bad |= ob[((size_t)i * H + hh) * D + d] != 0.0f;
                r.bad_rows += bad;
            }
        int ok = support_within(eo, no, 2.0) && support_within(el, nl, 2.0);
        if (!ok && r.failed_seqs++ == 0) {
            r.first_bad = b;
            r.o_err = eo;
            r.o_bound = 2.0 * no + 1e-5;
            r.l_err = el;
            r.l_bound = 2.0 * nl + 1e-5;
        } else if (ok && r.failed_seqs == 0 && eo > r.o_err) {
            r.o_err = eo;
            r.o_bound = 2.0 * no + 1e-5;
            r.l_err = el;
            r.l_bound = 2.0 * nl + 1e-5;
        }
        free(Q);
        free(K);
        free(V);
        free(O);
        free(Lr);
        free(On);
        free(Ln);
        free(lb);
    }
    return r;
}

static int check_case(fcl_context ctx, fcl_dtype dt, const pcase *c, uint64_t seed)
{
    ppack p = make_ppack(c->pack, c->L, seed);
    char name[400];
    describe(c, dt, &p, name, sizeof name);
    phost h;
    ptensors t;
    setup_case(ctx, dt, c, &p, seed, &h, &t);
    float *o = support_xmalloc(sizeof(float) * (size_t)c->L * c->H * c->D), *l = support_xmalloc(sizeof(float) * (size_t)c->H * c->L);
    size_t oo = 0, ol = 0;
    fcl_status st = run_packed(ctx, c, &t, o, l, &oo, &ol);
    cr_expect(st == FCL_SUCCESS, "[%s] fcl_attention_packed_qkv_forward: %s: %s", name, fcl_status_string(st),
              fcl_last_error(ctx));
    int ok = st == FCL_SUCCESS;
    if (ok) {
        seq_check r = compare_sequences(c, dt, &p, &h, o, t.lse ? l : NULL);
        ok = r.failed_seqs == 0 && r.nan_o == 0 && r.nan_l == 0 && r.bad_rows == 0 && oo == 0 && ol == 0;
        cr_expect(ok,
                  "[%s] %d of %d sequences out of tolerance (first: seq %d, O err %.3g bound %.3g, LSE "
                  "err %.3g bound %.3g) | NaN O %zu LSE %zu | bad rows %zu (%zu empty) | written outside "
                  "views O %zu LSE %zu",
                  name, r.failed_seqs, p.nseq, r.first_bad, r.o_err, r.o_bound, r.l_err, r.l_bound, r.nan_o,
                  r.nan_l, r.bad_rows, r.empty_rows, oo, ol);
    }
    free(o);
    free(l);
    ptensors_release(&t);
    phost_free(&h);
    ppack_free(&p);
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
    fcl_tensor tb = i32_tensor(ctx, 2, ss, p->bounds);
    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    prm.causal = causal;
    prm.window_left = prm.window_right = half_window(w);
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
              causal, w, half_window(w), masked, wrong, fr, fr >= 0 ? p->bounds[2 * fr] : 0,
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
    ppack_free(&a);
    ppack_free(&b);
    fcl_context_release(ctx);
    cr_assert(ok, "packed attention weights are not confined to each row's window in its sequence");
}

/* ---------------------------------------------------------------- packed == varlen */

/*
 * The same data through fcl_attention_varlen_forward: Q, K, V as [L, H, D] views of the
 * QKV buffer (row stride of the buffer, head stride D, offsets 0, H*D, 2*H*D) and cu_seqlens
 * from the same packing for both q and k. The two outputs must be bit-identical.
 */
static int packed_vs_varlen(fcl_context ctx, fcl_dtype dt, const pcase *c, uint64_t seed)
{
    ppack p = make_ppack(c->pack, c->L, seed);
    char name[400];
    describe(c, dt, &p, name, sizeof name);
    phost h;
    ptensors t;
    setup_case(ctx, dt, c, &p, seed, &h, &t);
    const int64_t L = c->L, H = c->H, D = c->D, HD = H * D;
    const size_t no = (size_t)(L * HD), nl = (size_t)(H * L);
    float *o1 = support_xmalloc(sizeof(float) * no), *l1 = support_xmalloc(sizeof(float) * nl);
    float *o2 = support_xmalloc(sizeof(float) * no), *l2 = support_xmalloc(sizeof(float) * nl);
    size_t oo, ol;
    fcl_status st = run_packed(ctx, c, &t, o1, l1, &oo, &ol);
    cr_assert(st == FCL_SUCCESS, "[%s] packed: %s: %s", name, fcl_status_string(st), fcl_last_error(ctx));

    const int64_t vs[3] = {L, H, D}, vst[3] = {t.row, D, 1};
    fcl_tensor q = support_view(t.base, 3, vs, vst, t.qkv_offset);
    fcl_tensor k = support_view(t.base, 3, vs, vst, t.qkv_offset + HD);
    fcl_tensor v = support_view(t.base, 3, vs, vst, t.qkv_offset + 2 * HD);
    const int64_t nc = p.nseq + 1;
    fcl_tensor cu = i32_tensor(ctx, 1, &nc, p.cu);
    const fcl_attn_params prm = case_params(c, &t);
    support_poison(t.o_base ? t.o_base : t.o);
    if (t.lse)
        support_poison(t.lse_base ? t.lse_base : t.lse);
    st = fcl_attention_varlen_forward(ctx, &prm, q, k, v, cu, cu, p.maxlen, p.maxlen, t.o, t.lse, NULL);
    cr_assert(st == FCL_SUCCESS, "[%s] varlen: %s: %s", name, fcl_status_string(st), fcl_last_error(ctx));
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS);
    support_read(t.o, o2);
    if (t.lse)
        support_read(t.lse, l2);

    double max_o, max_l = 0;
    long fo, fl;
    size_t diff_o = support_bit_diff(o1, o2, no, &max_o, &fo), diff_l = t.lse ? support_bit_diff(l1, l2, nl, &max_l, &fl) : 0;
    const long frow = fo < 0 ? -1L : fo / (long)HD;
    /* both must also be right, so that equality is not of two wrong answers */
    seq_check r = compare_sequences(c, dt, &p, &h, o1, t.lse ? l1 : NULL);
    int ok = diff_o == 0 && diff_l == 0 && r.failed_seqs == 0 && r.nan_o == 0 && r.bad_rows == 0;
    cr_expect(diff_o == 0 && diff_l == 0,
              "[%s] packed and varlen outputs differ: %zu of %zu O elements (max |diff| %.3g, first at row "
              "%ld of sequence [%d,%d)), %zu of %zu LSE elements (max |diff| %.3g)",
              name, diff_o, no, max_o, frow, frow < 0 ? 0 : p.bounds[2 * frow], frow < 0 ? 0 : p.bounds[2 * frow + 1],
              diff_l, nl, max_l);
    cr_expect(r.failed_seqs == 0 && r.nan_o == 0 && r.bad_rows == 0,
              "[%s] packed result out of tolerance in %d sequences (NaN %zu, bad rows %zu)", name, r.failed_seqs,
              r.nan_o, r.bad_rows);
    fcl_tensor all[] = {q, k, v, cu};
    for (int i = 0; i < 4; i++)
        fcl_tensor_release(all[i]);
    free(o1);
    free(l1);
    free(o2);
    free(l2);
    ptensors_release(&t);
    phost_free(&h);
    ppack_free(&p);
    return ok;
}

Test(packed_qkv, equals_varlen_bitwise)
{
    static const pcase cases[] = {
        {PP_SHORT, 400, 4, 64, 0, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
        {PP_SHORT, 400, 4, 64, 1, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
        {PP_LONG, 600, 2, 64, 0, 33, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 2},
        {PP_SINGLE, 200, 2, 40, 1, 10, 5.0f, 0, MASK_ON, ALIBI_H, PL_PADDED, 3},
        {PP_SHORT, 400, 3, 96, 0, 12, 5.0f, 0.3f, MASK_ON, ALIBI_H, PL_CONTIG, 3},
        /* a long sequence not aligned to any tile, every key visible: many key tiles */
        {PP_LONG, 600, 2, 64, 0, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 3},
        {PP_LONG, 600, 2, 64, 1, U, 0, 0, MASK_NONE, ALIBI_NONE, PL_CONTIG, 3},
    };
    static const fcl_dtype dts[] = {FCL_F32, FCL_F16, FCL_BF16, FCL_F32, FCL_F16, FCL_F32, FCL_BF16};
    enum { N = sizeof cases / sizeof cases[0] };
    fcl_context ctx = support_context();
    int ok = 1;
    for (int i = 0; i < N; i++)
        ok &= packed_vs_varlen(ctx, dts[i], &cases[i], 700 + (uint64_t)i);
    fcl_context_release(ctx);
    cr_assert(ok, "packed QKV and varlen on the same data are not bit-identical");
}

/* ---------------------------------------------------------------- chunked keys */

/* Under FLASHCL_LOOP_LIMIT the keys run in chunks; with the same tiles the result must equal
 * the one-launch result bit for bit and match the reference. */
static int chunk_case(fcl_context ctx, fcl_dtype dt, const pcase *c, uint64_t seed)
{
    ppack p = make_ppack(c->pack, c->L, seed);
    char name[400];
    describe(c, dt, &p, name, sizeof name);
    phost h;
    ptensors t;
    setup_case(ctx, dt, c, &p, seed, &h, &t);
    const size_t no = (size_t)c->L * c->H * c->D, nl = (size_t)c->H * c->L;
    float *o1 = support_xmalloc(sizeof(float) * no), *l1 = support_xmalloc(sizeof(float) * nl);
    float *o2 = support_xmalloc(sizeof(float) * no), *l2 = support_xmalloc(sizeof(float) * nl);
    size_t oo1, ol1, oo2, ol2;
    support_fix_tiles(1);
    support_force_chunks(0);
    fcl_status st1 = run_packed(ctx, c, &t, o1, l1, &oo1, &ol1);
    support_force_chunks(1);
    fcl_status st2 = run_packed(ctx, c, &t, o2, l2, &oo2, &ol2);
    support_force_chunks(0);
    support_fix_tiles(0);
    cr_assert(st1 == FCL_SUCCESS && st2 == FCL_SUCCESS, "[%s] one launch: %s, chunked: %s: %s", name,
              fcl_status_string(st1), fcl_status_string(st2), fcl_last_error(ctx));
    double dmo, dml;
    long fo, fl;
    size_t dno = support_bit_diff(o1, o2, no, &dmo, &fo), dnl = t.lse ? support_bit_diff(l1, l2, nl, &dml, &fl) : 0;
    int same = dno == 0 && dnl == 0;
    seq_check r = compare_sequences(c, dt, &p, &h, o2, t.lse ? l2 : NULL);
    int good = r.failed_seqs == 0 && r.nan_o == 0 && r.nan_l == 0 && r.bad_rows == 0 && oo2 == 0 && ol2 == 0;
    const long frow = fo < 0 ? -1L : fo / (long)(c->H * c->D);
    cr_expect(same,
              "[%s] chunked results differ from one launch: %zu of %zu O elements (max |diff| %.3g, first at "
              "row %ld of sequence [%d,%d)), %zu of %zu LSE elements",
              name, dno, no, dmo, frow, frow < 0 ? 0 : p.bounds[2 * frow], frow < 0 ? 0 : p.bounds[2 * frow + 1],
              dnl, nl);
    cr_expect(good, "[%s] chunked: %d sequences out of tolerance (first %d: O err %.3g bound %.3g), NaN O %zu "
              "LSE %zu, bad rows %zu, outside views O %zu LSE %zu",
              name, r.failed_seqs, r.first_bad, r.o_err, r.o_bound, r.nan_o, r.nan_l, r.bad_rows, oo2, ol2);
    free(o1);
    free(l1);
    free(o2);
    free(l2);
    ptensors_release(&t);
    phost_free(&h);
    ppack_free(&p);
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

enum { GUARD = 555 };

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
    const int64_t HD = H * D, qn = L * 3 * HD, on = L * HD, ln = H * L;
    const int64_t qbn = qn + 2 * GUARD + 1, obn = on + 2 * GUARD + 1, lbn = ln + 2 * GUARD + 1;
    fcl_tensor qb = support_tensor(ctx, dt, 1, &qbn, NULL), ob = support_tensor(ctx, dt, 1, &obn, NULL);
    fcl_tensor lb = support_tensor(ctx, FCL_F32, 1, &lbn, NULL);
    const int64_t qs[4] = {L, 3, H, D}, os[3] = {L, H, D}, ls[2] = {H, L}, bs[2] = {L, 2};
    fcl_tensor qkv = support_view(qb, 4, qs, NULL, GUARD), o = support_view(ob, 3, os, NULL, GUARD);
    fcl_tensor l = support_view(lb, 2, ls, NULL, GUARD);
    fill_value(qb, NAN);
    float *hq = support_xmalloc(sizeof(float) * (size_t)qn);
    support_random(hq, (size_t)qn, seed, -2.0f, 2.0f, dt);
    support_write(qkv, hq);
    fill_value(ob, -555.0f);
    fill_value(o, 777.0f);
    fill_value(lb, -555.0f);
    fill_value(l, 777.0f);

    int32_t *bounds = support_xmalloc(sizeof(int32_t) * 2 * L);
    uint64_t s = seed;
    static const int32_t odd[] = {INT_MIN, -1000000, -5, -1, 0, 1, 50, L - 1, L, L + 1, L + 1000, INT_MAX};
    const int nodd = (int)(sizeof odd / sizeof odd[0]);
    for (int r = 0; r < L; r++) {
        int32_t a, b;
        switch (pattern) {
        case 0: /* any pair of odd values */
            a = odd[rng_int(&s, 0, nodd - 1)];
            b = odd[rng_int(&s, 0, nodd - 1)];
            break;
        case 1: /* start past end */
            a = rng_int(&s, 1, L);
            b = a - rng_int(&s, 1, a);
            break;
        case 2: /* ranges that do not contain the row */
            a = r < L / 2 ? r + 1 : 0;
            b = r < L / 2 ? L : r;
            break;
        default: /* ranges reaching past both ends */
            a = -rng_int(&s, 1, 1000);
            b = L + rng_int(&s, 1, 1000);
            break;
        }
        bounds[2 * r] = a;
        bounds[2 * r + 1] = b;
    }
    fcl_tensor tb = i32_tensor(ctx, 2, bs, bounds);
    size_t ob_bytes, lb_bytes;
    unsigned char *o_before = read_raw_all(ob, &ob_bytes), *l_before = read_raw_all(lb, &lb_bytes);

    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    prm.causal = causal;
    prm.window_left = prm.window_right = half_window(w);
    fcl_status st = fcl_attention_packed_qkv_forward(ctx, &prm, qkv, tb, o, l, NULL);
    int ok = st == FCL_SUCCESS;
    cr_expect(ok, "[pattern %d %s] packed forward with garbage seq_bounds: %s: %s", pattern, fcl_dtype_name(dt),
              fcl_status_string(st), fcl_last_error(ctx));
    fcl_status fs = fcl_finish(ctx);
    cr_assert(fs == FCL_SUCCESS, "[pattern %d %s] fcl_finish: %s: %s", pattern, fcl_dtype_name(dt),
              fcl_status_string(fs), fcl_last_error(ctx));
    size_t b1, b2;
    unsigned char *o_after = read_raw_all(ob, &b1), *l_after = read_raw_all(lb, &b2);
    const size_t es = fcl_dtype_size(dt);
    size_t bad_o = 0, bad_l = 0;
    for (size_t i = 0; i < ob_bytes; i++)
        if ((i < GUARD * es || i >= (size_t)(GUARD + on) * es) && o_before[i] != o_after[i])
            bad_o++;
    for (size_t i = 0; i < lb_bytes; i++)
        if ((i < GUARD * sizeof(float) || i >= (size_t)(GUARD + ln) * sizeof(float)) && l_before[i] != l_after[i])
            bad_l++;
    float *ho = support_xmalloc(sizeof(float) * (size_t)on), *hl = support_xmalloc(sizeof(float) * (size_t)ln);
    support_read(o, ho);
    support_read(l, hl);
    size_t nan_o = support_count_nan(ho, (size_t)on), nan_l = support_count_nan(hl, (size_t)ln), left = 0;
    for (int64_t i = 0; i < on; i++)
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
    fcl_tensor all[] = {qb, ob, lb, qkv, o, l, tb};
    for (int i = 0; i < 7; i++)
        fcl_tensor_release(all[i]);
    free(hq);
    free(bounds);
    free(o_before);
    free(l_before);
    free(o_after);
    free(l_after);
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
    fcl_tensor qkv, bounds, o, lse;
    unsigned char *po, *pl;
    size_t ob, lb;
} efix;

/* A valid problem: L 9 rows in sequences {0..3}, {4}, {5..8}; H 2, D 16, F32. */
static void efix_init(efix *f)
{
    memset(f, 0, sizeof *f);
    f->ctx = support_context();
    const int64_t qs[4] = {EL, 3, EH, ED}, bs[2] = {EL, 2}, os[3] = {EL, EH, ED}, ls[2] = {EH, EL};
    static const int32_t b[2 * EL] = {0, 4, 0, 4, 0, 4, 0, 4, 4, 5, 5, 9, 5, 9, 5, 9, 5, 9};
    f->qkv = support_tensor_random(f->ctx, FCL_F32, 4, qs, 21);
    f->bounds = i32_tensor(f->ctx, 2, bs, b);
    f->o = support_tensor_random(f->ctx, FCL_F32, 3, os, 0);
    f->lse = support_tensor_random(f->ctx, FCL_F32, 2, ls, 0);
    f->po = support_poison_raw(f->o, &f->ob, 1);
    f->pl = support_poison_raw(f->lse, &f->lb, 2);
}

static void efix_replace(efix *f, fcl_tensor *slot, fcl_dtype dt, int ndim, const int64_t *shape)
{
    fcl_tensor_release(*slot);
    *slot = support_tensor_random(f->ctx, dt, ndim, shape, slot == &f->o || slot == &f->lse ? 0 : 41);
    if (slot == &f->o) {
        free(f->po);
        f->po = support_poison_raw(f->o, &f->ob, 1);
    } else if (slot == &f->lse) {
        free(f->pl);
        f->pl = support_poison_raw(f->lse, &f->lb, 2);
    }
}

static void efix_fini(efix *f)
{
    fcl_tensor all[] = {f->qkv, f->bounds, f->o, f->lse};
    for (int i = 0; i < 4; i++)
        fcl_tensor_release(all[i]);
    free(f->po);
    free(f->pl);
    fcl_context_release(f->ctx);
}

static char g_msg[1024];

static const char *ecall(efix *f, const fcl_attn_params *p, fcl_status want)
{
    cl_event ev = NULL;
    fcl_status st = fcl_attention_packed_qkv_forward(f->ctx, p, f->qkv, f->bounds, f->o, f->lse, &ev);
    snprintf(g_msg, sizeof g_msg, "%s", fcl_last_error(f->ctx));
    cr_assert(st == want, "fcl_attention_packed_qkv_forward returned %s, expected %s; message: \"%s\"",
              fcl_status_string(st), fcl_status_string(want), g_msg);
    if (want == FCL_SUCCESS) {
        cr_assert(ev != NULL, "a successful call with an event pointer returned no event");
        clReleaseEvent(ev);
        return g_msg;
    }
    cr_assert(ev == NULL, "a rejected call returned an event");
    support_assert_sentence(g_msg);
    cr_assert(fcl_finish(f->ctx) == FCL_SUCCESS);
    size_t n;
    unsigned char *got = read_raw_all(f->o, &n);
    cr_assert(n == f->ob && memcmp(got, f->po, n) == 0, "O was written by a rejected call");
    free(got);
    got = read_raw_all(f->lse, &n);
    cr_assert(n == f->lb && memcmp(got, f->pl, n) == 0, "LSE was written by a rejected call");
    free(got);
    return g_msg;
}

Test(packed_qkv_errors, control_valid_call_writes_outputs)
{
    efix f;
    efix_init(&f);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    ecall(&f, &p, FCL_SUCCESS);
    cr_assert(fcl_finish(f.ctx) == FCL_SUCCESS);
    float lse[EH * EL];
    support_read(f.lse, lse);
    for (int i = 0; i < EH * EL; i++)
        cr_assert(isfinite(lse[i]), "LSE[%d] = %g after a valid call", i, (double)lse[i]);
    size_t n;
    unsigned char *got = read_raw_all(f.o, &n);
    cr_assert(memcmp(got, f.po, n) != 0, "the valid call left O untouched");
    free(got);
    efix_fini(&f);
}

Test(packed_qkv_errors, qkv_not_4d)
{
    efix f;
    efix_init(&f);
    const int64_t sh[3] = {EL, 3 * EH, ED};
    efix_replace(&f, &f.qkv, FCL_F32, 3, sh);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = ecall(&f, &p, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "QKV");
    efix_fini(&f);
}

Test(packed_qkv_errors, qkv_second_dim_not_3)
{
    efix f;
    efix_init(&f);
    const int64_t sh[4] = {EL, 2, EH, ED};
    efix_replace(&f, &f.qkv, FCL_F32, 4, sh);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = ecall(&f, &p, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "QKV");
    efix_fini(&f);
}

Test(packed_qkv_errors, seq_bounds_dtype_not_i32)
{
    efix f;
    efix_init(&f);
    const int64_t sh[2] = {EL, 2};
    efix_replace(&f, &f.bounds, FCL_F32, 2, sh);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = ecall(&f, &p, FCL_ERR_DTYPE);
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
    efix_replace(&f, &f.o, FCL_F32, 3, sh);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = ecall(&f, &p, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "O", "17", "16");
    const int64_t ok_sh[3] = {EL, EH, ED};
    efix_replace(&f, &f.o, FCL_F16, 3, ok_sh);
    msg = ecall(&f, &p, FCL_ERR_DTYPE);
    SUPPORT_ASSERT_TOKENS(msg, "f16", "f32");
    efix_fini(&f);
}

Test(packed_qkv_errors, lse_transposed)
{
    efix f;
    efix_init(&f);
    const int64_t sh[2] = {EL, EH}; /* [L, H] instead of [H, L] */
    efix_replace(&f, &f.lse, FCL_F32, 2, sh);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = ecall(&f, &p, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "LSE");
    efix_fini(&f);
}

Test(packed_qkv_errors, qkv_dtype_i32)
{
    efix f;
    efix_init(&f);
    const int64_t sh[4] = {EL, 3, EH, ED};
    efix_replace(&f, &f.qkv, FCL_I32, 4, sh);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = ecall(&f, &p, FCL_ERR_DTYPE);
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
