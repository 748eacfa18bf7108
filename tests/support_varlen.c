/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the variable-length tests; see support_varlen.h. */
#include "support_varlen.h"
#include "support.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- small helpers */

uint64_t support_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int support_rng_int(uint64_t *s, int lo, int hi)
{
    return lo + (int)(support_rng_next(s) % (uint64_t)(hi - lo + 1));
}

fcl_tensor support_i32_tensor(fcl_context ctx, int ndim, const int64_t *shape, const int32_t *vals)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(ctx, FCL_I32, ndim, shape, &t);
    cr_assert(st == FCL_SUCCESS, "I32 tensor: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    st = fcl_tensor_write_raw(t, vals, sizeof(int32_t) * (size_t)fcl_tensor_numel(t));
    cr_assert(st == FCL_SUCCESS, "write I32: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    return t;
}

void support_fill(fcl_tensor t, float value)
{
    size_t n = (size_t)fcl_tensor_numel(t);
    float *x = support_xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        x[i] = value;
    support_write(t, x);
    free(x);
}

unsigned char *support_read_raw_all(fcl_tensor t, size_t *bytes)
{
    *bytes = (size_t)fcl_tensor_numel(t) * fcl_dtype_size(fcl_tensor_dtype(t));
    unsigned char *b = support_xmalloc(*bytes);
    fcl_status st = fcl_tensor_read_raw(t, b, *bytes);
    cr_assert(st == FCL_SUCCESS, "read_raw: %s", fcl_status_string(st));
    return b;
}

/* ---------------------------------------------------------------- varlen packings */

/* Fills the prefix sums, totals and longest lengths of pk from lq, lk. */
static void packing_sums(support_packing *pk)
{
    pk->cq = support_xmalloc(sizeof(int32_t) * (size_t)(pk->B + 1));
    pk->ck = support_xmalloc(sizeof(int32_t) * (size_t)(pk->B + 1));
    pk->cq[0] = pk->ck[0] = 0;
    pk->maxq = pk->maxk = 0;
    for (int b = 0; b < pk->B; b++) {
        pk->cq[b + 1] = pk->cq[b] + pk->lq[b];
        pk->ck[b + 1] = pk->ck[b] + pk->lk[b];
        if (pk->lq[b] > pk->maxq)
            pk->maxq = pk->lq[b];
        if (pk->lk[b] > pk->maxk)
            pk->maxk = pk->lk[b];
    }
    pk->tq = pk->cq[pk->B];
    pk->tk = pk->ck[pk->B];
    cr_assert(pk->tq > 0 && pk->tk > 0, "test bug: an all-empty packing");
}

support_packing support_packing_make(const support_packing_style *style, int kind, int B, uint64_t seed)
{
    support_packing pk;
    memset(&pk, 0, sizeof pk);
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 7;
    if (kind == PK_EMPTY)
        B = style->n_empty;
    pk.B = B;
    pk.lq = support_xmalloc(sizeof(int) * (size_t)B);
    pk.lk = support_xmalloc(sizeof(int) * (size_t)B);
    const int long_at = B / 3;
    for (int b = 0; b < B; b++) {
        int q = 0, k = 0;
        switch (kind) {
        case PK_SHORT: {
            q = support_rng_int(&s, 1, 24);
            k = support_rng_int(&s, 1, 32);
            const int r = support_rng_int(&s, 0, style->short_draw);
            if (r == 0)
                q = 0;
            else if (r == 1)
                k = 0;
            break;
        }
        case PK_LONG:
        case PK_LONG_QK: {
            const int *a = kind == PK_LONG ? style->long_short : style->long_long;
            const int *c = kind == PK_LONG ? style->long_long : style->long_short;
            if (b == long_at) {
                q = support_rng_int(&s, a[0], a[1]);
                k = support_rng_int(&s, c[0], c[1]);
            } else {
                q = support_rng_int(&s, 0, 16);
                k = support_rng_int(&s, 1, 16);
            }
            break;
        }
        case PK_EMPTY:
            q = style->empty[b][0];
            k = style->empty[b][1];
            break;
        case PK_SINGLE:
            switch (b % 4) {
            case 1: q = 1; k = support_rng_int(&s, 2, 40); break;
            case 2: q = support_rng_int(&s, 2, 20); k = 1; break;
            default: q = 1; k = 1; break;
            }
            break;
        case PK_EQUAL:
            q = k = support_rng_int(&s, 0, 7) == 0 ? 0 : support_rng_int(&s, 1, 48);
            break;
        default: cr_assert_fail("unknown packing %d", kind);
        }
        pk.lq[b] = q;
        pk.lk[b] = k;
    }
    packing_sums(&pk);
    return pk;
}

void support_packing_free(support_packing *pk)
{
    free(pk->lq);
    free(pk->lk);
    free(pk->cq);
    free(pk->ck);
    memset(pk, 0, sizeof *pk);
}

ref_attn_problem support_packing_problem(ref_attn_problem all, const support_packing *pk, int b,
                                         int slopes_per_seq)
{
    ref_attn_problem p = all;
    p.B = 1;
    p.Sq = pk->lq[b];
    p.Sk = pk->lk[b];
    p.key_mask = all.key_mask ? all.key_mask + pk->ck[b] : NULL;
    p.mask_per_batch = 0;
    p.alibi = all.alibi && slopes_per_seq ? all.alibi + (size_t)b * all.Hq : all.alibi;
    p.alibi_per_batch = 0;
    return p;
}

/* ---------------------------------------------------------------- packed-QKV packings */

support_ppack support_ppack_make(int kind, int L, int long_len, uint64_t seed)
{
    support_ppack p;
    memset(&p, 0, sizeof p);
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 3;
    p.L = L;
    p.start = support_xmalloc(sizeof(int) * (size_t)L);
    p.len = support_xmalloc(sizeof(int) * (size_t)L);
    int r = 0, long_done = 0;
    while (r < L) {
        int n = 1;
        switch (kind) {
        case PP_SHORT: n = support_rng_int(&s, 1, 24); break;
        case PP_LONG:
            if (!long_done && r >= L / 4) {
                n = long_len;
                long_done = 1;
            } else {
                n = support_rng_int(&s, 1, 20);
            }
            break;
        case PP_SINGLE: n = support_rng_int(&s, 0, 4) == 0 ? support_rng_int(&s, 2, 3) : 1; break;
        case PP_ONE: n = L; break;
        default: cr_assert_fail("unknown packing %d", kind);
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

void support_ppack_free(support_ppack *p)
{
    free(p->start);
    free(p->len);
    free(p->bounds);
    free(p->cu);
    memset(p, 0, sizeof *p);
}

int support_half_window(int w) { return w < 0 ? -1 : w / 2; }

ref_attn_problem support_ppack_problem(const support_ppack *p, int b, int H, int D, float scale, int causal,
                                       int w, float softcap, const float *mask, const float *slopes)
{
    const int n = p->len[b], s0 = p->start[b];
    const ref_attn_problem pr = {1, n, n, H, H, D, (double)scale, causal, support_half_window(w),
                                 support_half_window(w), (double)softcap, mask ? mask + s0 : NULL, 0, slopes, 0};
    return pr;
}

void support_split_rows(const float *x, int which, int r0, int n, size_t HD, float *out)
{
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * HD, x + ((size_t)(r0 + i) * 3 + which) * HD, sizeof(float) * HD);
}

fcl_tensor support_qkv_buffer(fcl_context ctx, fcl_dtype dt, int64_t L, int64_t H, int64_t D, int padded,
                              const float *host, fcl_tensor *base, int64_t *row, int64_t *offset)
{
    const int64_t HD = H * D;
    *row = padded ? 3 * HD + 5 : 3 * HD;
    *offset = padded ? 3 : 0;
    const int64_t bshape[2] = {L, *row};
    *base = support_tensor(ctx, dt, 2, bshape, NULL);
    support_poison(*base);
    const int64_t qshape[4] = {L, 3, H, D}, qstr[4] = {*row, HD, D, 1};
    fcl_tensor qkv = support_view(*base, 4, qshape, qstr, *offset);
    support_write(qkv, host);
    return qkv;
}

void support_qkv_views(fcl_tensor base, int64_t row, int64_t offset, int64_t L, int64_t H, int64_t D,
                       fcl_tensor qkv[3])
{
    const int64_t vs[3] = {L, H, D}, vst[3] = {row, D, 1};
    for (int i = 0; i < 3; i++)
        qkv[i] = support_view(base, 3, vs, vst, offset + i * H * D);
}

void support_garbage_bounds(int pattern, int L, uint64_t seed, int32_t *bounds)
{
    uint64_t s = seed;
    const int32_t odd[] = {INT_MIN, -1000000, -5, -1, 0, 1, 50, L - 1, L, L + 1, L + 1000, INT_MAX};
    const int nodd = (int)(sizeof odd / sizeof odd[0]);
    for (int r = 0; r < L; r++) {
        int32_t a, b;
        switch (pattern) {
        case 0: /* any pair of odd values */
            a = odd[support_rng_int(&s, 0, nodd - 1)];
            b = odd[support_rng_int(&s, 0, nodd - 1)];
            break;
        case 1: /* start past end */
            a = support_rng_int(&s, 1, L);
            b = a - support_rng_int(&s, 1, a);
            break;
        case 2: /* ranges that do not contain the row */
            a = r < L / 2 ? r + 1 : 0;
            b = r < L / 2 ? L : r;
            break;
        default: /* ranges reaching past both ends */
            a = -support_rng_int(&s, 1, 1000);
            b = L + support_rng_int(&s, 1, 1000);
            break;
        }
        bounds[2 * r] = a;
        bounds[2 * r + 1] = b;
    }
}

/* ---------------------------------------------------------------- masks, ALiBi, params */

void support_mask_values(float *m, int n, uint64_t seed)
{
    support_random(m, (size_t)n, seed, 0.0f, 1.0f, FCL_F32);
    for (int j = 0; j < n; j++) {
        float u = m[j];
        m[j] = u < 0.2f ? 0.0f : u < 0.3f ? 0.5f : u < 0.4f ? 0.51f : u < 0.6f ? 0.75f : 1.0f;
    }
}

void support_packing_mask(const support_packing *pk, uint64_t seed, float *m)
{
    support_mask_values(m, pk->tk, seed);
    for (int b = pk->B / 2; b < pk->B; b++)
        if (pk->lq[b] > 0 && pk->lk[b] > 0) {
            for (int j = pk->ck[b]; j < pk->ck[b + 1]; j++)
                m[j] = 0.0f;
            break;
        }
}

void support_ppack_mask(const support_ppack *p, uint64_t seed, float *m)
{
    support_mask_values(m, p->L, seed);
    for (int b = p->nseq / 2; b < p->nseq; b++)
        if (p->len[b] > 1) {
            for (int j = p->start[b]; j < p->start[b] + p->len[b]; j++)
                m[j] = 0.0f;
            break;
        }
}

void support_alibi_slopes(int n, int Hq, float *s)
{
    for (int i = 0; i < n; i++)
        s[i] = exp2f(-8.0f * (float)(i % Hq + 1) / (float)Hq) * (1.0f + 0.25f * (float)(i / Hq % 5));
}

fcl_attn_params support_attn_params(float scale, int causal, int wl, int wr, float softcap, fcl_tensor mask,
                                    fcl_tensor alibi)
{
    fcl_attn_params prm = fcl_attn_params_default();
    prm.scale = scale;
    prm.causal = causal;
    prm.window_left = wl;
    prm.window_right = wr;
    prm.softcap = softcap;
    prm.key_mask = mask;
    prm.alibi_slopes = alibi;
    return prm;
}

/* ---------------------------------------------------------------- forward outputs */

void support_fwd_out_make(fcl_context ctx, fcl_dtype dt, int64_t total, int64_t H, int64_t D, int o_pad,
                          int64_t o_offset, int with_lse, support_fwd_out *out)
{
    const int64_t os[3] = {total, H, D}, ls[2] = {H, total};
    memset(out, 0, sizeof *out);
    memcpy(out->o_shape, os, sizeof os);
    memcpy(out->l_shape, ls, sizeof ls);
    if (o_pad < 0) {
        out->o = support_tensor(ctx, dt, 3, os, NULL);
        if (with_lse)
            out->lse = support_tensor(ctx, FCL_F32, 2, ls, NULL);
        return;
    }
    const int64_t ost[3] = {H * (D + o_pad), D + o_pad, 1}, lst[2] = {total + 3, 1};
    memcpy(out->o_strides, ost, sizeof ost);
    memcpy(out->l_strides, lst, sizeof lst);
    out->o_offset = o_offset;
    out->l_offset = 2;
    out->o_base_n = total * H * (D + o_pad) + o_offset;
    out->lse_base_n = H * (total + 3);
    out->o_base = support_tensor(ctx, dt, 1, &out->o_base_n, NULL);
    out->lse_base = support_tensor(ctx, FCL_F32, 1, &out->lse_base_n, NULL);
    out->o = support_view(out->o_base, 3, os, ost, o_offset);
    out->lse = support_view(out->lse_base, 2, ls, lst, 2);
}

void support_fwd_out_poison(const support_fwd_out *out)
{
    support_poison(out->o_base ? out->o_base : out->o);
    if (out->lse)
        support_poison(out->lse_base ? out->lse_base : out->lse);
}

void support_fwd_out_read(fcl_context ctx, const support_fwd_out *out, float *o, float *lse, size_t *outside_o,
                          size_t *outside_l)
{
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "fcl_finish: %s", fcl_last_error(ctx));
    support_read(out->o, o);
    if (out->lse)
        support_read(out->lse, lse);
    *outside_o = *outside_l = 0;
    if (out->o_base) {
        float *b = support_xmalloc(sizeof(float) * (size_t)out->o_base_n);
        support_read(out->o_base, b);
        *outside_o = support_touched_outside(b, out->o_base_n, 3, out->o_shape, out->o_strides, out->o_offset);
        free(b);
    }
    if (out->lse_base) {
        float *b = support_xmalloc(sizeof(float) * (size_t)out->lse_base_n);
        support_read(out->lse_base, b);
        *outside_l = support_touched_outside(b, out->lse_base_n, 2, out->l_shape, out->l_strides, out->l_offset);
        free(b);
    }
}

void support_fwd_out_release(support_fwd_out *out)
{
    fcl_tensor all[] = {out->o, out->lse, out->o_base, out->lse_base};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    memset(out, 0, sizeof *out);
}

/* ---------------------------------------------------------------- forward per-sequence check */

void support_fwd_check_init(support_fwd_check *r, const float *o, size_t no, const float *lse, size_t nl)
{
    memset(r, 0, sizeof *r);
    r->first_bad = -1;
    r->nan_o = support_count_nan(o, no);
    r->nan_l = lse ? support_count_nan(lse, nl) : 0;
}

void support_fwd_check_seq(const ref_attn_problem *p, fcl_dtype dt, int seq, const float *Q, const float *K,
                           const float *V, const float *o, const float *lse, int total, int row0,
                           support_fwd_check *r)
{
    const int Hq = p->Hq, D = p->D, lq = p->Sq;
    const size_t rowel = (size_t)Hq * D, n = (size_t)lq * rowel, nl = (size_t)Hq * lq;
    double *O = support_xmalloc(sizeof(double) * n), *L = support_xmalloc(sizeof(double) * nl);
    float *On = support_xmalloc(sizeof(float) * n), *Ln = support_xmalloc(sizeof(float) * nl);
    float *lb = support_xmalloc(sizeof(float) * nl);
    ref_attention_forward(p, Q, K, V, O, L);
    ref_attention_forward_naive(p, dt, Q, K, V, On, Ln);
    const float *ob = o + (size_t)row0 * rowel;
    for (int hh = 0; hh < Hq; hh++)
        for (int i = 0; i < lq; i++)
            lb[(size_t)hh * lq + i] = lse ? lse[(size_t)hh * total + row0 + i] : 0.0f;
    double eo = support_max_err_f(ob, O, n), no = support_max_err_f(On, O, n);
    double el = lse ? support_max_err_f(lb, L, nl) : 0.0;
    double nle = support_max_err_f(Ln, L, nl);
    for (int hh = 0; hh < Hq; hh++)
        for (int i = 0; i < lq; i++) {
            size_t li = (size_t)hh * lq + i;
            if (L[li] != -INFINITY) {
                if (lse && !isfinite(lb[li]))
                    r->bad_rows++;
                continue;
            }
            r->empty_rows++;
            int bad = lse && lb[li] != -INFINITY;
            for (int d = 0; d < D; d++)
                bad |= ob[((size_t)i * Hq + hh) * D + d] != 0.0f;
            r->bad_rows += bad;
        }
    const int ok = support_within(eo, no, 2.0) && support_within(el, nle, 2.0);
    if (!ok)
        r->failed_seqs++;
    /* the first failing sequence, else the worst O error so far */
    if ((!ok && r->failed_seqs == 1) || (ok && r->failed_seqs == 0 && eo > r->o_err)) {
        if (!ok)
            r->first_bad = seq;
        r->o_err = eo;
        r->o_bound = 2.0 * no + 1e-5;
        r->l_err = el;
        r->l_bound = 2.0 * nle + 1e-5;
    }
    free(O);
    free(L);
    free(On);
    free(Ln);
    free(lb);
}

int support_fwd_check_ok(const support_fwd_check *r)
{
    return r->failed_seqs == 0 && r->nan_o == 0 && r->nan_l == 0 && r->bad_rows == 0;
}

/* ---------------------------------------------------------------- guarded views */

fcl_tensor support_guarded_view(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape, int64_t guard,
                                int64_t spare, fcl_tensor *base)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    const int64_t bn = n + 2 * guard + spare;
    *base = support_tensor(ctx, dt, 1, &bn, NULL);
    return support_view(*base, ndim, shape, NULL, guard);
}

fcl_tensor support_guarded_input(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape, int64_t guard,
                                 int64_t spare, uint64_t seed, float lo, float hi, fcl_tensor *base)
{
    fcl_tensor v = support_guarded_view(ctx, dt, ndim, shape, guard, spare, base);
    support_poison(*base);
    const size_t n = (size_t)fcl_tensor_numel(v);
    float *x = support_xmalloc(sizeof(float) * n);
    support_random(x, n, seed, lo, hi, dt);
    support_write(v, x);
    free(x);
    return v;
}

void support_guarded_out_make(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape, int64_t guard,
                              int64_t spare, support_guarded_out *g)
{
    memset(g, 0, sizeof *g);
    g->view = support_guarded_view(ctx, dt, ndim, shape, guard, spare, &g->base);
    g->n = (size_t)fcl_tensor_numel(g->view);
    g->guard = guard;
    support_fill(g->base, -555.0f);
    support_fill(g->view, 777.0f);
    g->before = support_read_raw_all(g->base, &g->bytes);
}

size_t support_guarded_out_changed(const support_guarded_out *g)
{
    size_t bytes;
    unsigned char *now = support_read_raw_all(g->base, &bytes);
    const size_t es = fcl_dtype_size(fcl_tensor_dtype(g->base));
    const size_t lo = (size_t)g->guard * es, hi = ((size_t)g->guard + g->n) * es;
    size_t bad = 0;
    for (size_t i = 0; i < g->bytes; i++)
        if ((i < lo || i >= hi) && g->before[i] != now[i])
            bad++;
    free(now);
    return bad;
}

float *support_guarded_out_read(const support_guarded_out *g, size_t *nan)
{
    float *x = support_xmalloc(sizeof(float) * g->n);
    support_read(g->view, x);
    *nan = support_count_nan(x, g->n);
    return x;
}

void support_guarded_out_release(support_guarded_out *g)
{
    fcl_tensor_release(g->view);
    fcl_tensor_release(g->base);
    free(g->before);
    memset(g, 0, sizeof *g);
}

const support_garbage_sums support_garbage_sums_list[SUPPORT_N_GARBAGE_SUMS] = {
    /* valid, as a control of the harness (TQ 41, TK 53) */
    {"valid", {0, 7, 7, 20, 33, 41}, {0, 10, 12, 30, 30, 53}, 13, 23},
    {"past total", {0, 30, 90, 1000, 1000000, 41}, {0, 60, 53, 5000, 54, 2000000}, 41, 53},
    {"negative", {-5, -1, -100, INT_MIN, -3, 41}, {0, -7, -7, -1000000, INT_MIN, -53}, 20, 20},
    {"decreasing", {41, 30, 20, 10, 5, 0}, {53, 0, 53, 0, 53, 0}, 41, 53},
    {"extremes", {INT_MAX, INT_MIN, INT_MAX, 0, INT_MAX, INT_MIN}, {INT_MIN, INT_MAX, 0, INT_MIN, 1, INT_MAX}, 41, 53},
    {"start past end", {50, 60, 70, 80, 90, 100}, {-60, -50, -40, 60, 70, 80}, 16, 16},
    /* valid sums, bounds below the real lengths (rows past the bound are not written) */
    {"max_seqlen too small", {0, 7, 7, 20, 33, 41}, {0, 10, 12, 30, 30, 53}, 2, 3},
    {"max_seqlen zero", {0, 7, 7, 20, 33, 41}, {0, 10, 12, 30, 30, 53}, 0, 0},
};

/* ---------------------------------------------------------------- error cases */

static char g_msg[1024];

void support_outputs_poison(support_outputs *out)
{
    out->po = support_poison_raw(out->o, &out->ob, 1);
    out->pl = support_poison_raw(out->lse, &out->lb, 2);
}

void support_outputs_replace(fcl_context ctx, support_outputs *out, fcl_tensor *slot, fcl_dtype dt, int ndim,
                             const int64_t *shape)
{
    fcl_tensor_release(*slot);
    *slot = support_tensor_random(ctx, dt, ndim, shape, slot == &out->o || slot == &out->lse ? 0 : 41);
    if (slot == &out->o) {
        free(out->po);
        out->po = support_poison_raw(out->o, &out->ob, 1);
    } else if (slot == &out->lse) {
        free(out->pl);
        out->pl = support_poison_raw(out->lse, &out->lb, 2);
    }
}

const char *support_outputs_expect(fcl_context ctx, const support_outputs *out, const char *fn, fcl_status st,
                                   cl_event ev, fcl_status want)
{
    snprintf(g_msg, sizeof g_msg, "%s", fcl_last_error(ctx));
    cr_assert(st == want, "%s returned %s, expected %s; message: \"%s\"", fn, fcl_status_string(st),
              fcl_status_string(want), g_msg);
    if (want == FCL_SUCCESS) {
        cr_assert(ev != NULL, "a successful call with an event pointer returned no event");
        clReleaseEvent(ev);
        return g_msg;
    }
    cr_assert(ev == NULL, "a rejected call returned an event");
    support_assert_sentence(g_msg);
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "fcl_finish after a rejected call: %s", fcl_last_error(ctx));
    size_t n;
    unsigned char *got = support_read_raw_all(out->o, &n);
    cr_assert(n == out->ob && memcmp(got, out->po, n) == 0, "O was written by a rejected call");
    free(got);
    got = support_read_raw_all(out->lse, &n);
    cr_assert(n == out->lb && memcmp(got, out->pl, n) == 0, "LSE was written by a rejected call");
    free(got);
    return g_msg;
}

void support_outputs_written(fcl_context ctx, const support_outputs *out, int n_lse)
{
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS);
    float *lse = support_xmalloc(sizeof(float) * (size_t)n_lse);
    support_read(out->lse, lse);
    for (int i = 0; i < n_lse; i++)
        cr_assert(isfinite(lse[i]), "LSE[%d] = %g after a valid call", i, (double)lse[i]);
    free(lse);
    size_t n;
    unsigned char *got = support_read_raw_all(out->o, &n);
    cr_assert(memcmp(got, out->po, n) != 0, "the valid call left O untouched");
    free(got);
}

void support_outputs_free(support_outputs *out)
{
    fcl_tensor_release(out->o);
    fcl_tensor_release(out->lse);
    free(out->po);
    free(out->pl);
    memset(out, 0, sizeof *out);
}
