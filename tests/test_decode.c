/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcl_kv_cache_append and fcl_attention_decode, on the FLASHCL_DEVICE device.
 *
 * Decode of Q [B, Lq, Hq, D] over a cache whose sequence b has valid length len_b is checked
 * against the float64 forward reference run per sequence as a B = 1 problem: causal
 * (bottom-right aligned) with Sq = Lq, Sk = len_b over the first len_b cache rows, window_left
 * as given and window_right 0, softcap, scale, ALiBi; in the mask form with the mask as the key
 * mask over those len_b keys (len_b = 1 + the last valid key). The DESIGN.md rule applies per
 * sequence to O and LSE: max |kernel - float64| <= 2 * max |naive - float64| + 1e-5. Outputs
 * are NaN-poisoned before every call; rows that see no key must be exactly O = 0, LSE = -inf.
 * Cache rows past each sequence's length, the padding between rows and heads of strided cache
 * views, the guards around them and unused pages all hold NaN, so a read of anything but the
 * visible rows shows up as NaN in O.
 *
 * Covered: host lengths 0, 1, odd and L_max for the three dtypes; MHA, GQA (8/2), MQA;
 * Lq 1..8 (Lq > len leaves early rows empty); softcap, window_left, ALiBi [Hq] and [B, Hq],
 * custom scale; D 16, 40, 59, 64, 96, 111, 128, 160, 256. The three length forms (host len,
 * device lens I32 [B], device mask F32 [B, L_max] or [L_max], prefix and with holes, no valid
 * key; NaN in dropped slots); device lengths above L_max or negative (clamped); paged caches
 * (page sizes 1, 3, 11, 16, 64, shuffled block tables) equal to contiguous ones, both filled by
 * fcl_kv_cache_append; 16-byte row loads (unpadded caches, rows aligned) and element-wise ones
 * (padded caches, head dims not a multiple of 8); the kernel's work-group shapes (teams of
 * several items and merges of several teams, one item per team) and different split counts
 * (FLASHCL_DECODE_TILES, FLASHCL_LOOP_LIMIT); host lengths that build no program past the
 * lengths L_max and 1; fcl_kv_cache_append bit for bit (host and device
 * positions, positions outside the cache, paged); the NVIDIA tensor-core form's work-group shapes
 * and ring stages where it runs; a 200-step generation loop against the
 * causal forward over the whole sequence; bad arguments (status, message, outputs untouched,
 * no event).
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention.h"
#include "support.h"
#include "support_decode.h"

#define U (-1)       /* unbounded window_left */
#define SWEEP (-100) /* host length: run 0, 1, an odd length and L_max */
enum { GUARD = 67 };        /* NaN elements before and after every guarded view */
enum { ALIGNED_LEAD = 72 }; /* NaN elements before an unpadded cache view: rows start 16-byte aligned */

/* ---------------------------------------------------------------- small helpers */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static fcl_tensor i32_tensor(fcl_context ctx, int ndim, const int64_t *shape, const int32_t *vals)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(ctx, FCL_I32, ndim, shape, &t);
    cr_assert(st == FCL_SUCCESS, "I32 tensor: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    if (vals) {
        st = fcl_tensor_write_raw(t, vals, sizeof(int32_t) * (size_t)fcl_tensor_numel(t));
        cr_assert(st == FCL_SUCCESS, "write I32: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    }
    return t;
}

static unsigned char *read_raw_all(fcl_tensor t, size_t *bytes)
{
    *bytes = (size_t)fcl_tensor_numel(t) * fcl_dtype_size(fcl_tensor_dtype(t));
    unsigned char *b = support_xmalloc(*bytes);
    fcl_status st = fcl_tensor_read_raw(t, b, *bytes);
    cr_assert(st == FCL_SUCCESS, "read_raw: %s", fcl_status_string(st));
    return b;
}

static float *nan_array(size_t n)
{
    float *x = support_xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

static int clampi(long long x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : (int)x; }

static void make_slopes(int n, int Hq, float *s)
{
    for (int i = 0; i < n; i++) /* geometric slopes, varied per sequence */
        s[i] = exp2f(-8.0f * (float)(i % Hq + 1) / (float)Hq) * (1.0f + 0.25f * (float)(i / Hq % 5));
}

/* ---------------------------------------------------------------- caches */

/*
 * A K/V cache pair on the device. Contiguous: views [B, L_max, Hkv, D]; paged: views
 * [num_pages, page_size, Hkv, D] with a shuffled block table [B, max_pages] (spare pages
 * unused). Each view sits `lead` elements into its own buffer (GUARD with `pad`, whose head, row
 * and batch/page strides have gaps, so that rows are misaligned; else ALIGNED_LEAD, so that the
 * kernel's 16-byte row loads run), with GUARD elements after it. The base buffers are what tests
 * fill and read whole.
 */
typedef struct cache_dev {
    fcl_dtype dt;
    int B, Lmax, Hkv, D;
    int paged, page_size, max_pages, num_pages;
    int64_t shape[4], strides[4], base_n, lead;
    fcl_tensor kbase, vbase, k, v, table;
    int32_t *bt; /* host block table [B, max_pages] */
    fcl_kv_cache kv;
} cache_dev;

static void cache_create(fcl_context ctx, cache_dev *c, fcl_dtype dt, int B, int Lmax, int Hkv, int D, int page_size,
                         int pad, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->B = B;
    c->Lmax = Lmax;
    c->Hkv = Hkv;
    c->D = D;
    c->paged = page_size > 0;
    int dim0 = B, rows = Lmax;
    if (c->paged) {
        cr_assert(Lmax % page_size == 0, "test bug: L_max %d is not a multiple of page_size %d", Lmax, page_size);
        c->page_size = page_size;
        c->max_pages = Lmax / page_size;
        c->num_pages = B * c->max_pages + 3; /* three spare pages, never referenced */
        dim0 = c->num_pages;
        rows = page_size;
    }
    const int64_t sh = D + (pad ? 3 : 0), sr = Hkv * sh + (pad ? 5 : 0), s0 = rows * sr + (pad ? 7 : 0);
    const int64_t shape[4] = {dim0, rows, Hkv, D}, strides[4] = {s0, sr, sh, 1};
    memcpy(c->shape, shape, sizeof shape);
    memcpy(c->strides, strides, sizeof strides);
    c->lead = pad ? GUARD : ALIGNED_LEAD;
    c->base_n = c->lead + dim0 * s0 + GUARD;
    c->kbase = support_tensor(ctx, dt, 1, &c->base_n, NULL);
    c->vbase = support_tensor(ctx, dt, 1, &c->base_n, NULL);
    c->k = support_view(c->kbase, 4, shape, strides, c->lead);
    c->v = support_view(c->vbase, 4, shape, strides, c->lead);
    if (c->paged) {
        /* a random permutation of the pages; the first B * max_pages are used */
        int *perm = support_xmalloc(sizeof(int) * (size_t)c->num_pages);
        uint64_t s = seed * 0x9E3779B97F4A7C15ull + 11;
        for (int i = 0; i < c->num_pages; i++)
            perm[i] = i;
        for (int i = c->num_pages - 1; i > 0; i--) {
            int j = (int)(rng_next(&s) % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        c->bt = support_xmalloc(sizeof(int32_t) * (size_t)(B * c->max_pages));
        for (int i = 0; i < B * c->max_pages; i++)
            c->bt[i] = perm[i];
        free(perm);
        const int64_t ts[2] = {B, c->max_pages};
        c->table = i32_tensor(ctx, 2, ts, c->bt);
    }
    c->kv.k = c->k;
    c->kv.v = c->v;
    c->kv.block_table = c->table;
}

static void cache_release(cache_dev *c)
{
    fcl_tensor all[] = {c->k, c->v, c->kbase, c->vbase, c->table};
    for (int i = 0; i < 5; i++)
        fcl_tensor_release(all[i]);
    free(c->bt);
    memset(c, 0, sizeof *c);
}

/* Element index in the base buffer of logical (b, j, h, d), or -1 when the page number is
 * outside [0, num_pages) (a row that is never written). */
static int64_t cache_index(const cache_dev *c, int b, int j, int h, int d)
{
    int64_t i0 = b, r = j;
    if (c->paged) {
        i0 = c->bt[b * c->max_pages + j / c->page_size];
        if (i0 < 0 || i0 >= c->num_pages)
            return -1;
        r = j % c->page_size;
    }
    return c->lead + i0 * c->strides[0] + r * c->strides[1] + (int64_t)h * c->strides[2] + d;
}

/* Writes logical caches k, v [B, L_max, Hkv, D] into the base buffers, NaN everywhere else. */
static void cache_store(cache_dev *c, const float *k, const float *v)
{
    float *hk = nan_array((size_t)c->base_n), *hv = nan_array((size_t)c->base_n);
    for (int b = 0; b < c->B; b++)
        for (int j = 0; j < c->Lmax; j++)
            for (int h = 0; h < c->Hkv; h++)
                for (int d = 0; d < c->D; d++) {
                    const size_t li = (((size_t)b * c->Lmax + j) * c->Hkv + h) * c->D + d;
                    const int64_t bi = cache_index(c, b, j, h, d);
                    if (bi >= 0) {
                        hk[bi] = k[li];
                        hv[bi] = v[li];
                    }
                }
    support_write(c->kbase, hk);
    support_write(c->vbase, hv);
    free(hk);
    free(hv);
}

/* Random logical caches [B, L_max, Hkv, D] (values in the dtype), NaN in rows >= fill[b]. */
static void logical_caches(const cache_dev *c, const int *fill, uint64_t seed, float amp, float **k, float **v)
{
    const size_t row = (size_t)c->Hkv * c->D, n = (size_t)c->B * c->Lmax * row;
    *k = support_xmalloc(sizeof(float) * n);
    *v = support_xmalloc(sizeof(float) * n);
    support_random(*k, n, seed * 8 + 2, -amp, amp, c->dt);
    support_random(*v, n, seed * 8 + 3, -amp, amp, c->dt);
    for (int b = 0; b < c->B; b++)
        for (int j = fill[b]; j < c->Lmax; j++)
            for (size_t e = 0; e < row; e++) {
                (*k)[((size_t)b * c->Lmax + j) * row + e] = NAN;
                (*v)[((size_t)b * c->Lmax + j) * row + e] = NAN;
            }
}

/* ---------------------------------------------------------------- decode cases */

enum { F_HOST = 0, F_LENS = 1, F_MASK = 2 };
enum { M_PREFIX = 0, M_HOLES = 1, M_SHARED = 2 }; /* mask form: [B, L_max] prefix or holes; [L_max] holes */
enum { AL_NONE = 0, AL_H = 1, AL_BH = 2 };

typedef struct dcase {
    fcl_dtype dt;
    int B, Hq, Hkv, D, Lmax, Lq;
    int form, mask_kind;
    int lens[4]; /* F_HOST: lens[0] (or SWEEP); F_LENS: device values (any int); F_MASK: 1 + last valid key */
    int wl;
    float softcap, scale;
    int alibi;
    int page_size; /* 0 = contiguous */
    int pad;       /* strided cache views; O and LSE as views in guarded buffers */
    int no_lse;
    float amp;
} dcase;

static void describe(const dcase *c, int host_len, char *buf, size_t n)
{
    static const char *const forms[3] = {"host len", "device lens", "device mask"};
    static const char *const masks[3] = {"prefix", "holes", "shared [L_max]"};
    char lens[96];
    if (c->form == F_HOST)
        snprintf(lens, sizeof lens, "len %d", host_len);
    else
        snprintf(lens, sizeof lens, "%s {%d, %d, %d, %d}", c->form == F_LENS ? "lens" : "last valid + 1", c->lens[0],
                 c->lens[1], c->lens[2], c->lens[3]);
    snprintf(buf, n,
             "%s B%d Hq%d Hkv%d D%d L_max%d Lq%d %s%s%s %s wl%d softcap%g scale%g alibi%d page_size%d pad%d "
             "lse%d",
             fcl_dtype_name(c->dt), c->B, c->Hq, c->Hkv, c->D, c->Lmax, c->Lq, forms[c->form],
             c->form == F_MASK ? " " : "", c->form == F_MASK ? masks[c->mask_kind] : "", lens, c->wl,
             (double)c->softcap, (double)c->scale, c->alibi, c->page_size, c->pad, !c->no_lse);
}

/* Mask values: valid keys hold 1, 0.75 or 0.51, dropped keys 0, 0.5 or 0.25 (the test is > 0.5). */
static float mask_value(int valid, int j)
{
    static const float on[3] = {1.0f, 0.75f, 0.51f}, off[3] = {0.0f, 0.5f, 0.25f};
    return valid ? on[j % 3] : off[j % 3];
}

/* Fills a mask row of L_max keys whose last valid key is last - 1 (none when last <= 0). */
static void mask_row(float *m, int Lmax, int last, int holes)
{
    for (int j = 0; j < Lmax; j++) {
        int valid = j < last;
        if (holes && j != last - 1)
            valid = valid && (j % 5 != 2 && j % 7 != 3);
        m[j] = mask_value(valid, j);
    }
}

/* The host and device state of one decode case. */
typedef struct dstate {
    dcase c;
    cache_dev cache;
    float *q, *k, *v, *mask, *slopes;
    int eff[4];
    fcl_tensor tq, to, tl, obase, lbase, tlens, tmask, talibi;
    int64_t o_shape[4], o_strides[4], l_shape[3], l_strides[3], o_base_n, l_base_n;
} dstate;

static void dstate_release(dstate *s)
{
    fcl_tensor all[] = {s->tq, s->to, s->tl, s->obase, s->lbase, s->tlens, s->tmask, s->talibi};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    cache_release(&s->cache);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->mask);
    free(s->slopes);
    memset(s, 0, sizeof *s);
}

/* Builds a case: host inputs, the cache (rows past each length NaN), Q, O, LSE, the length
 * tensors and the slopes. For the host form host_len is the length. */
static void dstate_init(fcl_context ctx, dstate *s, const dcase *c, int host_len, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->c = *c;
    cr_assert(c->B <= 4, "test bug: B %d > 4", c->B);
    const int B = c->B, Lmax = c->Lmax;
    if (c->form == F_MASK) {
        const int rows = c->mask_kind == M_SHARED ? 1 : B;
        s->mask = support_xmalloc(sizeof(float) * (size_t)rows * Lmax);
        for (int b = 0; b < rows; b++)
            mask_row(s->mask + (size_t)b * Lmax, Lmax, c->lens[b], c->mask_kind != M_PREFIX);
    }
    for (int b = 0; b < B; b++) {
        if (c->form == F_HOST)
            s->eff[b] = host_len;
        else if (c->form == F_LENS)
            s->eff[b] = clampi(c->lens[b], 0, Lmax);
        else
            s->eff[b] = clampi(c->lens[c->mask_kind == M_SHARED ? 0 : b], 0, Lmax);
    }
    cache_create(ctx, &s->cache, c->dt, B, Lmax, c->Hkv, c->D, c->page_size, c->pad, seed);
    logical_caches(&s->cache, s->eff, seed, c->amp, &s->k, &s->v);
    cache_store(&s->cache, s->k, s->v);

    const size_t nq = (size_t)B * c->Lq * c->Hq * c->D;
    s->q = support_xmalloc(sizeof(float) * nq);
    support_random(s->q, nq, seed * 8 + 1, -c->amp, c->amp, c->dt);
    const int64_t qs[4] = {B, c->Lq, c->Hq, c->D}, ls[3] = {B, c->Hq, c->Lq};
    s->tq = support_tensor(ctx, c->dt, 4, qs, s->q);
    memcpy(s->o_shape, qs, sizeof qs);
    memcpy(s->l_shape, ls, sizeof ls);
    if (c->pad) { /* O rows padded by 2, heads by 1; LSE rows by 3; both GUARD into their buffers */
        const int64_t os[4] = {c->Lq * (c->Hq * (c->D + 1) + 2), c->Hq * (c->D + 1) + 2, c->D + 1, 1};
        const int64_t lst[3] = {c->Hq * (c->Lq + 3), c->Lq + 3, 1};
        memcpy(s->o_strides, os, sizeof os);
        memcpy(s->l_strides, lst, sizeof lst);
        s->o_base_n = 2 * GUARD + B * os[0];
        s->l_base_n = 2 * GUARD + B * lst[0];
        s->obase = support_tensor(ctx, c->dt, 1, &s->o_base_n, NULL);
        s->to = support_view(s->obase, 4, qs, os, GUARD);
        if (!c->no_lse) {
            s->lbase = support_tensor(ctx, FCL_F32, 1, &s->l_base_n, NULL);
            s->tl = support_view(s->lbase, 3, ls, lst, GUARD);
        }
    } else {
        s->to = support_tensor(ctx, c->dt, 4, qs, NULL);
        if (!c->no_lse)
            s->tl = support_tensor(ctx, FCL_F32, 3, ls, NULL);
    }
    if (c->form == F_LENS) {
        const int64_t n = B;
        s->tlens = i32_tensor(ctx, 1, &n, c->lens);
    } else if (c->form == F_MASK) {
        const int64_t ms[2] = {B, Lmax};
        s->tmask = c->mask_kind == M_SHARED ? support_tensor(ctx, FCL_F32, 1, &ms[1], s->mask)
                                            : support_tensor(ctx, FCL_F32, 2, ms, s->mask);
    }
    if (c->alibi != AL_NONE) {
        const int n = c->alibi == AL_BH ? B * c->Hq : c->Hq;
        s->slopes = support_xmalloc(sizeof(float) * (size_t)n);
        make_slopes(n, c->Hq, s->slopes);
        const int64_t as[2] = {B, c->Hq};
        s->talibi = c->alibi == AL_BH ? support_tensor(ctx, FCL_F32, 2, as, s->slopes)
                                      : support_tensor(ctx, FCL_F32, 1, &as[1], s->slopes);
    }
}

static support_decode_problem dstate_prob(const dstate *s)
{
    const dcase *c = &s->c;
    support_decode_problem p = {c->dt, c->B, c->Lq, c->Hq, c->Hkv, c->D, c->Lmax, c->wl, c->softcap, c->scale, s->q, s->k, s->v,
               s->eff, s->mask, c->mask_kind == M_SHARED, s->slopes, c->alibi == AL_BH};
    return p;
}

static fcl_attn_params dstate_params(const dstate *s)
{
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.scale = s->c.scale;
    p.window_left = s->c.wl;
    p.softcap = s->c.softcap;
    p.alibi_slopes = s->talibi;
    return p;
}

/* Poisons O and LSE (their whole buffers), runs decode, reads O and LSE back (lse zeroed
 * when the case has none) and counts elements written outside the views. */
static fcl_status dstate_run(fcl_context ctx, dstate *s, int host_len, float *o, float *lse, size_t *outside)
{
    const dcase *c = &s->c;
    support_poison(s->obase ? s->obase : s->to);
    if (s->tl)
        support_poison(s->lbase ? s->lbase : s->tl);
    const fcl_attn_params prm = dstate_params(s);
    cl_event ev = NULL;
    fcl_status st = fcl_attention_decode(ctx, &prm, s->tq, &s->cache.kv, c->form == F_HOST ? host_len : -1, s->tlens,
                                         s->tmask, s->to, s->tl, &ev);
    if (st != FCL_SUCCESS)
        return st;
    cr_assert(ev != NULL, "fcl_attention_decode succeeded without returning the event asked for");
    clReleaseEvent(ev);
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "fcl_finish: %s", fcl_last_error(ctx));
    support_read(s->to, o);
    if (s->tl)
        support_read(s->tl, lse);
    *outside = 0;
    if (s->obase) {
        float *b = support_xmalloc(sizeof(float) * (size_t)s->o_base_n);
        support_read(s->obase, b);
        *outside += support_touched_outside(b, s->o_base_n, 4, s->o_shape, s->o_strides, GUARD);
        free(b);
    }
    if (s->lbase) {
        float *b = support_xmalloc(sizeof(float) * (size_t)s->l_base_n);
        support_read(s->lbase, b);
        *outside += support_touched_outside(b, s->l_base_n, 3, s->l_shape, s->l_strides, GUARD);
        free(b);
    }
    return FCL_SUCCESS;
}

/* Runs one case at one host length (ignored by the device forms) and checks it against the
 * reference. When o_out / lse_out are given they receive O and LSE, and naive[0], naive[1] the
 * largest naive O and LSE errors. Returns 1 when it passes. */
static int decode_case(fcl_context ctx, const dcase *c, int host_len, uint64_t seed, float *o_out, float *lse_out,
                       double naive[2])
{
    char name[400], why[400];
    describe(c, host_len, name, sizeof name);
    dstate s;
    dstate_init(ctx, &s, c, host_len, seed);
    const size_t no = (size_t)c->B * c->Lq * c->Hq * c->D, nl = (size_t)c->B * c->Hq * c->Lq;
    float *o = support_xmalloc(sizeof(float) * no), *lse = support_xmalloc(sizeof(float) * nl);
    size_t outside = 0;
    fcl_status st = dstate_run(ctx, &s, host_len, o, lse, &outside);
    cr_expect(st == FCL_SUCCESS, "[%s] fcl_attention_decode: %s: %s", name, fcl_status_string(st),
              fcl_last_error(ctx));
    int ok = st == FCL_SUCCESS;
    if (ok) {
        const support_decode_problem p = dstate_prob(&s);
        const support_decode_check r = support_decode_check_ref(&p, o, s.tl ? lse : NULL);
        support_decode_describe(&r, why, sizeof why);
        ok = r.ok && outside == 0;
        cr_expect(ok, "[%s] %s; %zu elements written outside the O/LSE views", name, why, outside);
        if (naive) {
            naive[0] = r.naive_o;
            naive[1] = r.naive_l;
        }
    }
    if (o_out)
        memcpy(o_out, o, sizeof(float) * no);
    if (lse_out)
        memcpy(lse_out, lse, sizeof(float) * nl);
    free(o);
    free(lse);
    dstate_release(&s);
    return ok;
}

/* Runs every case of a table (host SWEEP cases at 0, 1, an odd length and L_max); returns the
 * failed runs and adds the runs to *runs. */
static size_t run_table(fcl_context ctx, const dcase *cases, size_t n, uint64_t seed0, size_t *runs_out)
{
    size_t failed = 0, runs = 0;
    for (size_t i = 0; i < n; i++) {
        const dcase *c = &cases[i];
        if (c->form == F_HOST && c->lens[0] == SWEEP) {
            const int odd = (c->Lmax / 2) | 1, sweep[4] = {0, 1, odd < c->Lmax ? odd : c->Lmax - 2, c->Lmax};
            for (int k = 0; k < 4; k++, runs++)
                failed += !decode_case(ctx, c, sweep[k], seed0 + 10 * i + (uint64_t)k, NULL, NULL, NULL);
        } else {
            failed += !decode_case(ctx, c, c->lens[0], seed0 + 10 * i, NULL, NULL, NULL);
            runs++;
        }
    }
    *runs_out += runs;
    return failed;
}

/* Runs every case of a table with the device's default tiles. */
static void decode_table(const dcase *cases, size_t n, uint64_t seed0)
{
    fcl_context ctx = support_context();
    size_t runs = 0;
    const size_t failed = run_table(ctx, cases, n, seed0, &runs);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu decode runs failed", failed, runs);
}

#define S4 {SWEEP, 0, 0, 0}

/* ---------------------------------------------------------------- host length: dtypes, heads, flags */

/* dtype, B, Hq, Hkv, D, L_max, Lq, form, mask, lens, wl, softcap, scale, alibi, page, pad, no_lse, amp */
Test(decode, host_len_f32)
{
    static const dcase cases[] = {
        {FCL_F32, 3, 4, 4, 64, 37, 1, F_HOST, 0, S4, U, 0, 0, AL_NONE, 0, 1, 0, 2},    /* MHA */
        {FCL_F32, 2, 8, 2, 64, 33, 3, F_HOST, 0, S4, U, 5.0f, 0, AL_NONE, 0, 0, 0, 3}, /* GQA, softcap */
        {FCL_F32, 2, 4, 1, 128, 50, 8, F_HOST, 0, S4, 9, 0, 0, AL_NONE, 0, 1, 0, 2},   /* MQA, window */
        {FCL_F32, 2, 2, 2, 256, 21, 2, F_HOST, 0, S4, U, 0, 0.3f, AL_BH, 0, 0, 0, 2},  /* scale, ALiBi */
        {FCL_F32, 1, 8, 2, 64, 33, 3, F_HOST, 0, {2, 0, 0, 0}, U, 5.0f, 0, AL_NONE, 0, 0, 1, 3}, /* Lq > len, no LSE */
        /* the CPU form's steps (QK_KEYS, PV_CHUNKS in cl/portable/attention_decode_cpu.cl) with
         * AVX-512's 16 floats: 8 rows of 6 chunks (2 keys per Q K^T step, 2 chunks per P V step),
         * 4 rows of one partial chunk (2 keys, 1 chunk) */
        {FCL_F32, 2, 8, 2, 96, 41, 2, F_HOST, 0, S4, U, 0, 0, AL_NONE, 0, 0, 0, 2},
        {FCL_F32, 1, 4, 1, 12, 35, 1, F_HOST, 0, S4, U, 0, 0, AL_NONE, 0, 1, 0, 2},
    };
    decode_table(cases, sizeof cases / sizeof cases[0], 1000);
}

Test(decode, host_len_f16)
{
    static const dcase cases[] = {
        {FCL_F16, 2, 8, 2, 59, 45, 5, F_HOST, 0, S4, 6, 0, 0, AL_H, 0, 1, 0, 2},        /* GQA, window, ALiBi */
        {FCL_F16, 3, 3, 1, 16, 19, 1, F_HOST, 0, S4, U, 5.0f, 0.5f, AL_NONE, 0, 0, 0, 3}, /* MQA, softcap, scale */
        {FCL_F16, 2, 2, 2, 128, 64, 7, F_HOST, 0, S4, U, 0, 0, AL_NONE, 0, 1, 0, 2},     /* MHA, Lq 7 */
    };
    decode_table(cases, sizeof cases / sizeof cases[0], 2000);
}

Test(decode, host_len_bf16)
{
    static const dcase cases[] = {
        {FCL_BF16, 2, 8, 2, 64, 40, 2, F_HOST, 0, S4, 5, 5.0f, 0, AL_BH, 0, 1, 0, 3}, /* everything */
        {FCL_BF16, 2, 4, 1, 59, 29, 8, F_HOST, 0, S4, U, 0, 0, AL_NONE, 0, 0, 0, 2}, /* MQA, Lq 8 */
        {FCL_BF16, 3, 2, 2, 16, 23, 1, F_HOST, 0, S4, U, 0, 0.7f, AL_H, 0, 1, 0, 2}, /* MHA */
    };
    decode_table(cases, sizeof cases / sizeof cases[0], 3000);
}

/* ---------------------------------------------------------------- device length forms */

/* Per-sequence lengths from a device I32 tensor; masks [B, L_max] (prefix and with holes) and
 * [L_max]; sequences with no valid key write zeros. */
Test(decode, device_forms)
{
    static const dcase cases[] = {
        /* f32 GQA D 64 Lq 3, softcap: the same shape in every form */
        {FCL_F32, 4, 8, 2, 64, 33, 3, F_LENS, 0, {0, 1, 17, 33}, U, 5.0f, 0, AL_NONE, 0, 1, 0, 3},
        {FCL_F32, 4, 8, 2, 64, 33, 3, F_LENS, 0, {2, 33, 5, 32}, U, 5.0f, 0, AL_NONE, 0, 0, 0, 3},
        {FCL_F32, 4, 8, 2, 64, 33, 3, F_MASK, M_PREFIX, {0, 1, 17, 33}, U, 5.0f, 0, AL_NONE, 0, 1, 0, 3},
        {FCL_F32, 4, 8, 2, 64, 33, 3, F_MASK, M_HOLES, {33, 0, 17, 2}, U, 5.0f, 0, AL_NONE, 0, 1, 0, 3},
        {FCL_F32, 3, 8, 2, 64, 33, 3, F_MASK, M_SHARED, {26, 0, 0, 0}, U, 5.0f, 0, AL_NONE, 0, 0, 0, 3},
        {FCL_F32, 3, 8, 2, 64, 33, 3, F_MASK, M_SHARED, {0, 0, 0, 0}, U, 5.0f, 0, AL_NONE, 0, 0, 0, 3},
        /* holes with window_left 0: rows whose own key is dropped see nothing */
        {FCL_F32, 4, 8, 2, 64, 33, 3, F_MASK, M_HOLES, {33, 9, 23, 4}, 0, 5.0f, 0, AL_NONE, 0, 0, 0, 3},
        /* f16 MQA D 16, ALiBi [B, Hq], window */
        {FCL_F16, 3, 4, 1, 16, 40, 2, F_LENS, 0, {39, 1, 0, 0}, 7, 0, 0, AL_BH, 0, 0, 0, 2},
        {FCL_F16, 3, 4, 1, 16, 40, 2, F_MASK, M_HOLES, {40, 3, 0, 0}, 7, 0, 0, AL_BH, 0, 1, 0, 2},
        /* bf16 MHA D 128, scale */
        {FCL_BF16, 2, 2, 2, 128, 48, 4, F_LENS, 0, {47, 3, 0, 0}, U, 0, 0.2f, AL_NONE, 0, 0, 0, 2},
        {FCL_BF16, 2, 2, 2, 128, 48, 4, F_MASK, M_PREFIX, {48, 0, 0, 0}, U, 0, 0.2f, AL_NONE, 0, 1, 0, 2},
    };
    decode_table(cases, sizeof cases / sizeof cases[0], 4000);
}

/*
 * One problem in the three forms: host len L, lens {L, ...}, a prefix mask of L keys for every
 * sequence; all must be within tolerance of the reference and of each other.
 */
Test(decode, forms_agree)
{
    static const dcase base = {FCL_F32, 3, 8, 2, 64, 33, 3, F_HOST, 0, {21, 21, 21, 21}, 4, 5.0f, 0, AL_NONE, 0, 0,
                               0, 3};
    fcl_context ctx = support_context();
    const size_t no = (size_t)base.B * base.Lq * base.Hq * base.D, nl = (size_t)base.B * base.Hq * base.Lq;
    float *o[3], *l[3];
    double naive[3][2] = {{0, 0}, {0, 0}, {0, 0}};
    int ok = 1;
    for (int f = 0; f < 3; f++) {
        dcase c = base;
        c.form = f;
        c.mask_kind = M_PREFIX;
        o[f] = support_xmalloc(sizeof(float) * no);
        l[f] = support_xmalloc(sizeof(float) * nl);
        ok &= decode_case(ctx, &c, 21, 4500, o[f], l[f], naive[f]); /* same seed: same data */
    }
    for (int f = 1; f < 3; f++) {
        double d, dl;
        long first, fl;
        support_bit_diff(o[0], o[f], no, &d, &first);
        support_bit_diff(l[0], l[f], nl, &dl, &fl);
        const int agree = support_within(d, naive[0][0], 2.0) && support_within(dl, naive[0][1], 2.0);
        cr_expect(agree, "form %s vs host len: max |O diff| %.3g (bound %.3g), max |LSE diff| %.3g (bound %.3g)",
                  f == 1 ? "device lens" : "device mask", d, 2.0 * naive[0][0] + 1e-5, dl, 2.0 * naive[0][1] + 1e-5);
        ok &= agree;
    }
    for (int f = 0; f < 3; f++) {
        free(o[f]);
        free(l[f]);
    }
    fcl_context_release(ctx);
    cr_assert(ok, "the three length forms disagree");
}

/* Device lengths above L_max or negative are clamped to [0, L_max]: cache views sit in NaN
 * buffers (NaN between heads, rows and sequences too), so a read past L_max gives NaN. */
Test(decode, clamped_lengths)
{
    static const dcase cases[] = {
        {FCL_F32, 4, 8, 2, 64, 33, 3, F_LENS, 0, {34, -3, INT_MAX, INT_MIN}, U, 5.0f, 0, AL_NONE, 0, 1, 0, 3},
        {FCL_F32, 4, 8, 2, 64, 33, 3, F_LENS, 0, {1000, -1, 33, 1 << 30}, U, 5.0f, 0, AL_NONE, 0, 1, 0, 3},
        /* paged: L_max = 3 pages of 11 */
        {FCL_F32, 4, 8, 2, 64, 33, 3, F_LENS, 0, {34, INT_MIN, INT_MAX, 20}, U, 5.0f, 0, AL_NONE, 11, 1, 0, 3},
        {FCL_F16, 3, 4, 1, 16, 40, 2, F_LENS, 0, {41, -40, INT_MAX, 0}, 7, 0, 0, AL_BH, 0, 1, 0, 2},
    };
    decode_table(cases, sizeof cases / sizeof cases[0], 5000);
}

/* ---------------------------------------------------------------- paged == contiguous */

/*
 * A paged cache (page_size, shuffled block table, spare pages) and a contiguous cache of the
 * same L_max, both NaN-filled and then filled by fcl_kv_cache_append in two chunks (host pos,
 * then device positions); decoded with a host length and with per-sequence device lengths.
 * Both must match the reference, and each other bit for bit (same split plan).
 */
typedef struct pcase {
    fcl_dtype dt;
    int page_size, Lmax, B, Hq, Hkv, D, Lq;
    int chunk1;       /* rows appended at pos 0 */
    int host_len;     /* appended rows in all: chunk 2 is host_len - chunk1 rows */
    int lens[4];      /* device lengths (<= host_len) */
    int wl;
    float softcap;
    int forms; /* 1: host len, 2: device lens, 3: both */
} pcase;

static int paged_case(fcl_context ctx, const pcase *pc, uint64_t seed)
{
    char name[300];
    snprintf(name, sizeof name,
             "%s page_size %d L_max %d B%d Hq%d Hkv%d D%d Lq%d appended %d+%d, lens {%d, %d, %d, %d} wl%d "
             "softcap%g",
             fcl_dtype_name(pc->dt), pc->page_size, pc->Lmax, pc->B, pc->Hq, pc->Hkv, pc->D, pc->Lq, pc->chunk1,
             pc->host_len - pc->chunk1, pc->lens[0], pc->lens[1], pc->lens[2], pc->lens[3], pc->wl,
             (double)pc->softcap);
    const int B = pc->B, Hkv = pc->Hkv, D = pc->D;
    cache_dev cc, cp;
    cache_create(ctx, &cc, pc->dt, B, pc->Lmax, Hkv, D, 0, 1, seed);
    cache_create(ctx, &cp, pc->dt, B, pc->Lmax, Hkv, D, pc->page_size, 1, seed);
    support_poison(cc.kbase);
    support_poison(cc.vbase);
    support_poison(cp.kbase);
    support_poison(cp.vbase);
    int fill[4];
    for (int b = 0; b < B; b++)
        fill[b] = pc->host_len;
    float *hk, *hv;
    logical_caches(&cc, fill, seed, 2.0f, &hk, &hv);

    /* append: rows [0, chunk1) at host pos 0, then [chunk1, host_len) at device positions */
    const size_t krow = (size_t)Hkv * D;
    const int chunks[2][2] = {{0, pc->chunk1}, {pc->chunk1, pc->host_len}};
    for (int ch = 0; ch < 2; ch++) {
        const int r0 = chunks[ch][0], ln = chunks[ch][1] - r0;
        if (ln == 0)
            continue;
        const int64_t ns[4] = {B, ln, Hkv, D};
        float *nk = support_xmalloc(sizeof(float) * (size_t)B * ln * krow), *nv = support_xmalloc(sizeof(float) * (size_t)B * ln * krow);
        for (int b = 0; b < B; b++) {
            memcpy(nk + (size_t)b * ln * krow, hk + ((size_t)b * pc->Lmax + r0) * krow, sizeof(float) * ln * krow);
            memcpy(nv + (size_t)b * ln * krow, hv + ((size_t)b * pc->Lmax + r0) * krow, sizeof(float) * ln * krow);
        }
        fcl_tensor tk = support_tensor(ctx, pc->dt, 4, ns, nk), tv = support_tensor(ctx, pc->dt, 4, ns, nv);
        int32_t pos[4] = {r0, r0, r0, r0};
        const int64_t nb = B;
        fcl_tensor tpos = ch == 1 ? i32_tensor(ctx, 1, &nb, pos) : NULL;
        const cache_dev *both[2] = {&cc, &cp};
        for (int w = 0; w < 2; w++) {
            fcl_status st = fcl_kv_cache_append(ctx, &both[w]->kv, tk, tv, ch == 1 ? -1 : r0, tpos, NULL);
            cr_assert(st == FCL_SUCCESS, "[%s] fcl_kv_cache_append (%s, chunk %d): %s: %s", name,
                      w ? "paged" : "contiguous", ch, fcl_status_string(st), fcl_last_error(ctx));
        }
        fcl_tensor_release(tk);
        fcl_tensor_release(tv);
        fcl_tensor_release(tpos);
        free(nk);
        free(nv);
    }

    const int64_t qs[4] = {B, pc->Lq, pc->Hq, D}, ls[3] = {B, pc->Hq, pc->Lq}, nb = B;
    const size_t nq = (size_t)B * pc->Lq * pc->Hq * D, nl = (size_t)B * pc->Hq * pc->Lq;
    float *hq = support_xmalloc(sizeof(float) * nq);
    support_random(hq, nq, seed * 8 + 1, -2.0f, 2.0f, pc->dt);
    fcl_tensor tq = support_tensor(ctx, pc->dt, 4, qs, hq), to = support_tensor(ctx, pc->dt, 4, qs, NULL);
    fcl_tensor tl = support_tensor(ctx, FCL_F32, 3, ls, NULL), tlens = i32_tensor(ctx, 1, &nb, pc->lens);
    float *o[2], *l[2];
    int ok = 1;
    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    prm.window_left = pc->wl;
    prm.softcap = pc->softcap;
    for (int form = 0; form < 2; form++) { /* host len, device lens */
        if (!(pc->forms & (1 << form)))
            continue;
        int eff[4];
        for (int b = 0; b < B; b++)
            eff[b] = form == 0 ? pc->host_len : pc->lens[b];
        for (int w = 0; w < 2; w++) {
            const cache_dev *cd = w ? &cp : &cc;
            o[w] = support_xmalloc(sizeof(float) * nq);
            l[w] = support_xmalloc(sizeof(float) * nl);
            support_poison(to);
            support_poison(tl);
            fcl_status st = fcl_attention_decode(ctx, &prm, tq, &cd->kv, form == 0 ? pc->host_len : -1,
                                                 form == 0 ? NULL : tlens, NULL, to, tl, NULL);
            cr_assert(st == FCL_SUCCESS, "[%s] decode (%s): %s: %s", name, w ? "paged" : "contiguous",
                      fcl_status_string(st), fcl_last_error(ctx));
            cr_assert(fcl_finish(ctx) == FCL_SUCCESS);
            support_read(to, o[w]);
            support_read(tl, l[w]);
            const support_decode_problem p = {pc->dt, B, pc->Lq, pc->Hq, Hkv, D, pc->Lmax, pc->wl, pc->softcap, 0.0f, hq, hk, hv, eff,
                             NULL, 0, NULL, 0};
            const support_decode_check r = support_decode_check_ref(&p, o[w], l[w]);
            char why[400];
            support_decode_describe(&r, why, sizeof why);
            cr_expect(r.ok, "[%s] %s cache, %s: %s", name, w ? "paged" : "contiguous",
                      form ? "device lens" : "host len", why);
            ok &= r.ok;
        }
        double d, dl;
        long first, fl;
        const size_t nd = support_bit_diff(o[0], o[1], nq, &d, &first);
        const size_t ndl = support_bit_diff(l[0], l[1], nl, &dl, &fl);
        cr_expect(nd == 0 && ndl == 0,
                  "[%s] %s: paged and contiguous results differ: %zu of %zu O elements (max |diff| %.3g, first "
                  "at %ld), %zu of %zu LSE elements (max |diff| %.3g)",
                  name, form ? "device lens" : "host len", nd, nq, d, first, ndl, nl, dl);
        ok &= nd == 0 && ndl == 0;
        for (int w = 0; w < 2; w++) {
            free(o[w]);
            free(l[w]);
        }
    }
    fcl_tensor all[] = {tq, to, tl, tlens};
    for (int i = 0; i < 4; i++)
        fcl_tensor_release(all[i]);
    free(hq);
    free(hk);
    free(hv);
    cache_release(&cc);
    cache_release(&cp);
    return ok;
}

Test(decode, paged_equals_contiguous)
{
    static const pcase cases[] = {
        /* dt  page L_max B Hq Hkv D Lq chunk1 len  lens        wl softcap forms */
        {FCL_F32, 1, 50, 3, 8, 2, 64, 3, 7, 45, {45, 1, 30, 0}, U, 5.0f, 3},
        {FCL_F32, 3, 51, 3, 8, 2, 64, 3, 10, 51, {51, 4, 0, 0}, U, 5.0f, 3},
        {FCL_F32, 16, 80, 2, 8, 2, 64, 3, 16, 71, {17, 71, 0, 0}, U, 5.0f, 3},
        {FCL_F32, 64, 128, 2, 8, 2, 64, 3, 63, 127, {65, 127, 0, 0}, U, 5.0f, 3},
        {FCL_F32, 3, 51, 3, 8, 2, 64, 3, 0, 50, {50, 2, 49, 0}, 6, 5.0f, 3},
        {FCL_BF16, 16, 64, 2, 2, 2, 128, 4, 5, 64, {64, 33, 0, 0}, U, 0, 2},
    };
    fcl_context ctx = support_context();
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ok &= paged_case(ctx, &cases[i], 6000 + i);
    fcl_context_release(ctx);
    cr_assert(ok, "paged decode differs from contiguous decode or from the reference");
}

/* ---------------------------------------------------------------- split counts */

/*
 * The same problems with different split plans: the device's default tiles, batches of 8
 * and of 32 keys (FLASHCL_DECODE_TILES), one-batch splits of 16 keys aiming at 64 work-groups
 * per compute unit (dozens of splits to combine), a loop cap of 20000 iterations
 * (FLASHCL_LOOP_LIMIT: a few batches per split on any device), and one split (fewest keys per
 * split 1048576), whose partial kernel writes O and LSE itself (no combine): with several
 * teams, with one team of several items (their rows' m and l meet in local memory), and with
 * one item (not on llvmpipe, whose compiler takes minutes over that shape). Every run must
 * match the reference, and the runs must agree with each other within the rule's bound.
 */
Test(decode, split_counts)
{
    static const dcase cases[] = {
        {FCL_F32, 2, 8, 2, 64, 700, 3, F_HOST, 0, {650, 0, 0, 0}, U, 5.0f, 0, AL_NONE, 0, 0, 0, 2},
        {FCL_F32, 2, 8, 2, 64, 700, 3, F_LENS, 0, {700, 333, 0, 0}, 250, 5.0f, 0, AL_NONE, 0, 0, 0, 2},
        {FCL_BF16, 2, 2, 2, 128, 520, 4, F_LENS, 0, {517, 200, 0, 0}, U, 0, 0.2f, AL_NONE, 0, 0, 0, 2},
    };
    /* settings: default tiles, FLASHCL_DECODE_TILES 8,4,16, 32,4,32 and 16,4,32,64,1,
     * FLASHCL_LOOP_LIMIT, one split of 16,4,32, 4,2,8 and 5,2,1; the cases each setting runs
     * (bit i for case i: each tile setting compiles anew) */
    enum { NS = 8, LOOP = 4, ONE_ITEM = 7 };
    static const char *const setting[NS] = {
        "default tiles", "FLASHCL_DECODE_TILES=8,4,16", "FLASHCL_DECODE_TILES=32,4,32",
        "FLASHCL_DECODE_TILES=16,4,32,64,1", "FLASHCL_LOOP_LIMIT=20000", "FLASHCL_DECODE_TILES=16,4,32,2,1048576",
        "FLASHCL_DECODE_TILES=4,2,8,2,1048576", "FLASHCL_DECODE_TILES=5,2,1,2,1048576"};
    static const char *const tiles[NS] = {NULL,         "8,4,16", "32,4,32", "16,4,32,64,1", NULL, "16,4,32,2,1048576",
                                          "4,2,8,2,1048576", "5,2,1,2,1048576"};
    static const unsigned runs_cases[NS] = {7, 2, 2, 2, 7, 7, 2, 2};
    fcl_context ctx = support_context();
    fcl_device_info info;
    cr_assert(fcl_context_device_info(ctx, &info) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    const int llvmpipe = strstr(info.name, "llvmpipe") != NULL;
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const dcase *c = &cases[i];
        const size_t no = (size_t)c->B * c->Lq * c->Hq * c->D, nl = (size_t)c->B * c->Hq * c->Lq;
        float *o[NS] = {NULL}, *l[NS] = {NULL};
        double naive[2] = {0.0, 0.0};
        for (int t = 0; t < NS; t++) {
            if (!(runs_cases[t] >> i & 1) || (t == ONE_ITEM && llvmpipe))
                continue;
            o[t] = support_xmalloc(sizeof(float) * no);
            l[t] = support_xmalloc(sizeof(float) * nl);
            if (tiles[t])
                setenv("FLASHCL_DECODE_TILES", tiles[t], 1);
            if (t == LOOP)
                support_force_chunks(1);
            const int r = decode_case(ctx, c, c->lens[0], 7000 + i, o[t], l[t], naive); /* same data each time */
            unsetenv("FLASHCL_DECODE_TILES");
            support_force_chunks(0);
            cr_expect(r, "(case %zu above ran with %s)", i, setting[t]);
            ok &= r;
        }
        for (int t = 1; t < NS; t++) {
            if (!o[t])
                continue;
            double d, dl;
            long f1, f2;
            support_bit_diff(o[0], o[t], no, &d, &f1);
            support_bit_diff(l[0], l[t], nl, &dl, &f2);
            const int agree = support_within(d, naive[0], 2.0) && support_within(dl, naive[1], 2.0);
            cr_expect(agree,
                      "case %zu: %s vs default tiles: max |O diff| %.3g (bound %.3g), max |LSE diff| %.3g (bound %.3g)",
                      i, setting[t], d, 2.0 * naive[0] + 1e-5, dl, 2.0 * naive[1] + 1e-5);
            ok &= agree;
        }
        for (int t = 0; t < NS; t++) {
            free(o[t]);
            free(l[t]);
        }
    }
    fcl_context_release(ctx);
    cr_assert(ok, "decode with different split counts disagrees");
}

/*
 * A generation loop over host lengths builds nothing past its first two calls: after the lengths
 * L_max (the split form) and 1 (one split, O written by the partial kernel), every length in
 * between runs on the same programs, as fcl_precompile promises (it warms decode with exactly
 * those two), with the device's tiles and with dozens of splits (16,4,32,64,1: the combine's lanes
 * sized for the plan's aim, not the call's split count). Every call must match the reference. On
 * llvmpipe (slow compiles) with the device's tiles only.
 */
Test(decode, host_lengths_build_once)
{
    static const dcase c = {FCL_F16, 2, 8, 2, 64, 700, 1, F_HOST, 0, {700, 0, 0, 0}, U, 0, 0, AL_NONE, 0, 0, 0, 2};
    static const char *const tiles[] = {NULL, "16,4,32,64,1"};
    static const int lengths[] = {2, 3, 17, 64, 100, 255, 256, 300, 511, 699};
    fcl_context ctx = support_context();
    fcl_device_info info;
    cr_assert(fcl_context_device_info(ctx, &info) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    const int llvmpipe = strstr(info.name, "llvmpipe") != NULL;
    int ok = 1;
    for (size_t t = 0; t < (llvmpipe ? 1 : sizeof tiles / sizeof tiles[0]); t++) {
        const char *what = tiles[t] ? tiles[t] : "default";
        if (tiles[t])
            setenv("FLASHCL_DECODE_TILES", tiles[t], 1);
        ok &= decode_case(ctx, &c, c.Lmax, 9500 + t, NULL, NULL, NULL);
        ok &= decode_case(ctx, &c, 1, 9510 + t, NULL, NULL, NULL);
        const fcl_cache_stats warm = support_cache_stats(ctx);
        for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
            ok &= decode_case(ctx, &c, lengths[i], 9520 + 10 * t + i, NULL, NULL, NULL);
            const fcl_cache_stats now = support_cache_stats(ctx);
            const int same = now.compiles == warm.compiles && now.disk_hits == warm.disk_hits;
            cr_expect(same, "tiles %s: host length %d built a program after lengths %d and 1: " STATS_FMT
                      " (after them: " STATS_FMT ")", what, lengths[i], c.Lmax, STATS_ARGS(now), STATS_ARGS(warm));
            ok &= same;
        }
        unsetenv("FLASHCL_DECODE_TILES");
    }
    fcl_context_release(ctx);
    cr_assert(ok, "a host length missed the reference or built a program of its own");
}

/* ---------------------------------------------------------------- work-group shapes */

/* The shape cases of team_shapes and three_phase_shapes. */
static const dcase shape_cases[] = {
    {FCL_F16, 2, 8, 2, 128, 150, 3, F_HOST, 0, S4, U, 0, 0, AL_NONE, 0, 0, 0, 2},           /* GQA Lq 3: 12 rows */
    {FCL_BF16, 2, 4, 1, 40, 77, 2, F_LENS, 0, {77, 31, 0, 0}, 20, 5.0f, 0, AL_H, 0, 0, 0, 3}, /* MQA D 40 */
    {FCL_F32, 2, 6, 2, 96, 90, 1, F_MASK, M_HOLES, {90, 45, 0, 0}, U, 0, 0, AL_NONE, 0, 0, 0, 2}, /* D 96, holes */
    {FCL_F16, 2, 4, 2, 111, 66, 4, F_LENS, 0, {66, 9, 0, 0}, U, 0, 0.2f, AL_BH, 11, 1, 0, 2}, /* D 111, paged */
    {FCL_F32, 1, 2, 1, 256, 41, 2, F_HOST, 0, S4, 7, 0, 0, AL_BH, 0, 0, 0, 2},              /* D 256, window */
    {FCL_BF16, 2, 3, 3, 16, 70, 1, F_HOST, 0, S4, U, 5.0f, 0, AL_NONE, 0, 1, 1, 3},          /* MHA D 16, no LSE */
    {FCL_F16, 1, 4, 2, 160, 45, 1, F_MASK, M_PREFIX, {43, 0, 0, 0}, U, 0, 0, AL_NONE, 0, 0, 0, 2}, /* D 160 */
    {FCL_F32, 2, 4, 2, 59, 37, 3, F_HOST, 0, {29, 0, 0, 0}, 5, 0, 0, AL_NONE, 0, 0, 0, 2},  /* D 59, window */
};

/* Runs cases[0 .. n_cases - 1] under each of the n_values settings of the environment variable
 * `env` (FLASHCL_DECODE_TILES, FLASHCL_CPU_SIMD; on llvmpipe, about 9 s a program, case i only
 * with setting i % n_values: every setting and every case still runs), expecting
 * fcl_attention_decode_path `form` (F16, D 128) under each when form is not NULL. The failed
 * runs; *runs counts them all. */
static size_t run_with_setting(fcl_context ctx, const char *env, const char *const *values, size_t n_values,
                               const dcase *cases, size_t n_cases, const char *form, uint64_t seed0, size_t *runs)
{
    fcl_device_info info;
    cr_assert(fcl_context_device_info(ctx, &info) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    const int llvmpipe = strstr(info.name, "llvmpipe") != NULL;
    size_t failed = 0;
    for (size_t t = 0; t < n_values; t++) {
        setenv(env, values[t], 1);
        const char *path = fcl_attention_decode_path(ctx, FCL_F16, 128);
        cr_expect(!form || strcmp(path, form) == 0, "%s=%s: path %s, expected %s", env, values[t], path,
                  form ? form : "any");
        size_t f = 0;
        for (size_t i = 0; i < n_cases; i++)
            if (!llvmpipe || i % n_values == t)
                f += run_table(ctx, &cases[i], 1, seed0 + 100 * t + 10 * i, runs);
        unsetenv(env);
        cr_expect(f == 0, "(the failures above ran with %s=%s)", env, values[t]);
        failed += f;
    }
    return failed;
}

/*
 * The kernel's work-group shapes on any device, through FLASHCL_DECODE_TILES (N keys per
 * batch, R rows, W work-items, G waves, S fewest keys per split):
 *   16,4,64,8,0    the GPU shape: teams of head_dim_pad / 8 items (2 at D 16, 12 at D 96, 20 at
 *                  D 160, 32 at D 256), several teams merged at the end of a split (32 at D 16),
 *                  1 to 8 keys per team, K prefetched, 2 rows per owner at D 16; many splits
 *   4,2,8,2,0      teams of 5 to 8 items owning several 8-dim chunks each
 *   12,3,48,2,0    1 to 16 teams, 1 to 12 keys (batches not a power of two), R 4
 *   5,2,1,2,0      the CPU shape: one item owning every dim, 5 keys per batch (not on llvmpipe:
 *                  its compiler takes minutes over that much state per work-item; PoCL runs
 *                  this shape by default)
 * over head dims 16, 40 (padded to 64: chunks past the head dim), 59 and 111 (element-wise
 * loads), 96, 160, 256, with 16-byte row loads (unpadded caches) and without (padded), GQA
 * with Lq > 1, MQA, MHA, every length form, paged caches and every logit modifier, at lengths
 * that are not multiples of any batch. On llvmpipe each case runs with one of the first three
 * shapes (the cross product runs on PoCL).
 */
Test(decode, team_shapes)
{
    /* the CPU shape last: llvmpipe runs the first three only */
    static const char *const tiles[] = {"16,4,64,8,0", "4,2,8,2,0", "12,3,48,2,0", "5,2,1,2,0"};
    fcl_context ctx = support_context();
    fcl_device_info info;
    cr_assert(fcl_context_device_info(ctx, &info) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    const size_t n_tiles = strstr(info.name, "llvmpipe") ? 3 : 4, n_cases = sizeof shape_cases / sizeof *shape_cases;
    size_t runs = 0;
    const size_t failed =
        run_with_setting(ctx, "FLASHCL_DECODE_TILES", tiles, n_tiles, shape_cases, n_cases, NULL, 8000, &runs);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu decode runs failed", failed, runs);
}

/*
 * The CPU form (fcl_attention_decode_path "cpu", cl/portable/attention_decode_cpu.cl) at 8 and 4
 * floats per vector (FLASHCL_CPU_SIMD), where the device's native width (16 on AVX-512) is what
 * the other tests run: its reduction trees, pairs of BF16 chunks and prefetch distances at the
 * other widths, over team_shapes' cases (head dims 16 to 256 with edge chunks, every length
 * form, masks with holes, paged caches, windows, every logit modifier). Skipped where the CPU
 * form does not run (GPUs, devices that cap loops).
 */
Test(decode, cpu_vector_widths)
{
    static const char *const widths[] = {"8", "4"};
    fcl_context ctx = support_context();
    const char *path = fcl_attention_decode_path(ctx, FCL_F16, 128);
    if (strcmp(path, "cpu") != 0) {
        fcl_context_release(ctx);
        cr_skip_test("no CPU decode form on this device (decode path %s)", path);
    }
    size_t runs = 0;
    const size_t failed = run_with_setting(ctx, "FLASHCL_CPU_SIMD", widths, sizeof widths / sizeof widths[0],
                                           shape_cases, sizeof shape_cases / sizeof *shape_cases, "cpu", 8700, &runs);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu decode runs failed", failed, runs);
}

/*
 * The three-phase form (fcl_attention_decode_path "three-phase", cl/portable/attention_decode_keys.cl)
 * on any device, through FLASHCL_DECODE_TILES with key lanes (N unused, R rows, W work-items, G
 * waves, S fewest keys per split, no register cap, ring or tensor-core warps, K key lanes, P: K
 * read one batch ahead):
 *   32,4,64,4,0,0,0,0,4,1      4 lanes per key, 16 keys per batch (D 128: 4 teams of 16 in P V),
 *                              K ahead
 *   32,2,128,4,0,0,0,0,2,0     2 lanes per key, 64 keys per batch, 2 rows
 *   32,8,32,2,0,0,0,0,1,1      a lane per key, 32 keys per batch, 8 rows (8 (key, row) pairs per
 *                              lane in the P step; GQA Lq 3: two row blocks), one team at D 256,
 *                              K ahead
 *   32,4,128,2,1048576,0,0,0,16,0  one split (O and LSE written by the partial kernel), key lanes
 *                              lowered to the team (2 at D 16, 4 at D 96: 12 chunks)
 *   32,2,128,2,0,0,0,0,2,1     2 lanes per key, 2 rows, K ahead (a short sequence beside a long
 *                              one: its splits past its length are empty and must read no K)
 * over team_shapes' cases (head dims 16 to 256, element-wise and 16-byte loads, every length
 * form, masks with holes, paged caches, windows, every logit modifier) and two more: large logits
 * (amplitude 4: a row's maximum rises past the kernel's RAISE margin in later batches, so the
 * rescaling path runs mid-split) and small ones (amplitude 0.3: after the first batch only the
 * p's of the P step are used). On llvmpipe each case runs with one of the tile sets in turn.
 */
Test(decode, three_phase_shapes)
{
    static const dcase logits[] = {
        {FCL_F16, 2, 8, 2, 128, 300, 1, F_HOST, 0, {297, 0, 0, 0}, U, 0, 0, AL_NONE, 0, 0, 0, 4}, /* large logits */
        {FCL_F32, 1, 8, 2, 64, 260, 1, F_LENS, 0, {260, 0, 0, 0}, U, 0, 0, AL_NONE, 0, 0, 0, 0.3f}, /* small ones */
    };
    static const char *const tiles[] = {"32,4,64,4,0,0,0,0,4,1", "32,2,128,4,0,0,0,0,2,0", "32,8,32,2,0,0,0,0,1,1",
                                        "32,4,128,2,1048576,0,0,0,16,0", "32,2,128,2,0,0,0,0,2,1"};
    const size_t n_tiles = sizeof tiles / sizeof tiles[0];
    fcl_context ctx = support_context();
    size_t runs = 0;
    size_t failed = run_with_setting(ctx, "FLASHCL_DECODE_TILES", tiles, n_tiles, shape_cases,
                                     sizeof shape_cases / sizeof *shape_cases, "three-phase", 8500, &runs);
    failed += run_with_setting(ctx, "FLASHCL_DECODE_TILES", tiles, n_tiles, logits, 2, "three-phase", 8900, &runs);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu decode runs failed", failed, runs);
}

/*
 * The tensor-core form (fcl_attention_decode_path "nvidia-mma": NVIDIA compute capability >= 8,
 * F16 / BF16, head dims up to 128) with the device's tiles and with 1, 2 and 4 warps per
 * work-group and 2 to 4 ring stages (the last two values of FLASHCL_DECODE_TILES; 4 x 4 is
 * lowered to what fits), and in one split (fewest keys per split 1048576: the warps' states
 * merged in the work-group, O and LSE written by it) with 4 warps (lowered to what fits) and
 * with 1: the decode issue's GQA 32 / 8 at D 128 (unpadded ring rows), 20 query
 * rows per KV head (two 16-row blocks) at D 64, D 96 (padded ring rows) paged with a window and
 * soft-cap, D 40 (padded to 64: dims past the head dim) with ALiBi and a custom scale, host
 * lengths 0, 1, odd and L_max and device lengths (one of them 0), none a multiple of 16 keys;
 * a masked case (the team-shuffle form's, as masks keep to it). Elsewhere the path is never
 * "nvidia-mma" and the cases run once with the device's tiles.
 */
Test(decode, tensor_core_shapes)
{
    static const dcase cases[] = {
        {FCL_F16, 2, 32, 8, 128, 300, 1, F_HOST, 0, S4, U, 0, 0, AL_NONE, 0, 0, 0, 2},
        {FCL_BF16, 2, 10, 2, 64, 150, 4, F_LENS, 0, {150, 33, 0, 0}, U, 0, 0, AL_H, 0, 0, 0, 3},
        {FCL_F16, 1, 4, 1, 96, 96, 2, F_HOST, 0, {77, 0, 0, 0}, 20, 5.0f, 0, AL_NONE, 16, 0, 0, 2},
        {FCL_BF16, 2, 8, 4, 40, 70, 1, F_LENS, 0, {70, 0, 0, 0}, U, 0, 0.3f, AL_BH, 0, 0, 1, 2},
        {FCL_F16, 1, 8, 2, 128, 64, 1, F_MASK, M_HOLES, {64, 0, 0, 0}, U, 0, 0, AL_NONE, 0, 0, 0, 2},
    };
    static const char *const tiles[] = {NULL,
                                        "16,4,128,4,128,0,2,1",
                                        "16,4,128,4,128,0,3,2",
                                        "16,4,128,4,16,0,4,4",
                                        "16,4,128,2,1048576,0,2,4",
                                        "16,4,128,2,1048576,0,4,1"};
    fcl_context ctx = support_context();
    fcl_device_info info;
    cr_assert(fcl_context_device_info(ctx, &info) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    const char *path = fcl_attention_decode_path(ctx, FCL_F16, 128);
    cr_assert(path != NULL && fcl_attention_decode_path(NULL, FCL_F16, 128) == NULL);
    const int mma = strcmp(path, "nvidia-mma") == 0;
    cr_assert(!mma || info.nv_cc_major >= 8, "path %s on compute capability %d", path, info.nv_cc_major);
    cr_assert(strcmp(fcl_attention_decode_path(ctx, FCL_F32, 128), "nvidia-mma") != 0, "F32 on tensor cores");
    cr_assert(strcmp(fcl_attention_decode_path(ctx, FCL_F16, 136), "nvidia-mma") != 0, "D 136 on tensor cores");
    const size_t n_tiles = mma ? sizeof tiles / sizeof tiles[0] : 1;
    size_t failed = 0, runs = 0;
    for (size_t t = 0; t < n_tiles; t++) {
        if (tiles[t])
            setenv("FLASHCL_DECODE_TILES", tiles[t], 1);
        const size_t f = run_table(ctx, cases, sizeof cases / sizeof cases[0], 9000 + 100 * t, &runs);
        unsetenv("FLASHCL_DECODE_TILES");
        cr_expect(f == 0, "(the failures above ran with FLASHCL_DECODE_TILES=%s)", tiles[t] ? tiles[t] : "unset");
        failed += f;
    }
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu decode runs failed (path %s)", failed, runs, path);
}

/*
 * The team-shuffle form on subgroups (fcl_attention_decode_path "subgroup-shuffle": a device whose
 * subgroup size flashcl can fix, Intel's cl_intel_required_subgroup_size, with shuffles), forced
 * with GPU team shapes through FLASHCL_DECODE_TILES: teams of 16 lanes (D 128: one subgroup of 16,
 * or 2 teams in a 32-lane subgroup), 8 (D 64, D 40 padded), 4 (D 32) and 2 (D 16) inside the
 * subgroup, 1 to 8 teams per work-group, 1 to 4 keys per team, rows 1 to 4, one split and many,
 * every length form, paged, GQA with Lq > 1, MQA, window, soft-cap, ALiBi, masks with holes (the
 * portable team form of such shapes runs in team_shapes, on every device).
 * Skipped (reported as such) on devices without the subgroup form.
 */
Test(decode, subgroup_shuffle_form)
{
    static const dcase cases[] = {
        {FCL_F16, 2, 32, 8, 128, 300, 1, F_HOST, 0, S4, U, 0, 0, AL_NONE, 0, 0, 0, 2},
        {FCL_BF16, 2, 10, 2, 64, 150, 2, F_LENS, 0, {150, 33, 0, 0}, U, 0, 0, AL_H, 0, 0, 0, 3},
        {FCL_F32, 2, 8, 4, 40, 70, 1, F_LENS, 0, {70, 0, 0, 0}, U, 0, 0.3f, AL_BH, 0, 0, 1, 2},
        {FCL_F16, 1, 8, 2, 128, 64, 1, F_MASK, M_HOLES, {64, 0, 0, 0}, U, 0, 0, AL_NONE, 0, 0, 0, 2},
        {FCL_F32, 1, 4, 2, 32, 96, 3, F_HOST, 0, {93, 0, 0, 0}, 20, 5.0f, 0, AL_NONE, 16, 0, 0, 2},
        {FCL_BF16, 2, 3, 3, 16, 70, 1, F_HOST, 0, S4, U, 5.0f, 0, AL_NONE, 0, 1, 1, 3},
    };
    static const char *const tiles[] = {"16,4,64,8,0", "32,4,128,4,1048576", "8,2,32,2,0", "64,1,128,2,16"};
    fcl_context ctx = support_context();
    setenv("FLASHCL_DECODE_TILES", tiles[0], 1);
    const char *path = fcl_attention_decode_path(ctx, FCL_F16, 128);
    unsetenv("FLASHCL_DECODE_TILES");
    if (strcmp(path, "subgroup-shuffle") != 0) {
        fcl_context_release(ctx);
        cr_skip_test("no subgroup form on this device (decode path with GPU tiles: %s)", path);
    }
    size_t runs = 0;
    const size_t failed = run_with_setting(ctx, "FLASHCL_DECODE_TILES", tiles, sizeof tiles / sizeof tiles[0], cases,
                                           sizeof cases / sizeof cases[0], "subgroup-shuffle", 9500, &runs);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %zu decode runs failed", failed, runs);
}

/* ---------------------------------------------------------------- fcl_kv_cache_append */

/* Places new rows (raw bytes of K_new/V_new [B, L_new, Hkv, D]) into the expected base images
 * the way append must: row t of sequence b at position pos[b] + t, skipped outside [0, L_max)
 * or on a page number outside [0, num_pages). */
static void expect_append(const cache_dev *c, unsigned char *ek, unsigned char *ev, const unsigned char *nk,
                          const unsigned char *nv, int L_new, const long long *pos)
{
    const size_t es = fcl_dtype_size(c->dt);
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < L_new; t++) {
            const long long p = pos[b] + t;
            if (p < 0 || p >= c->Lmax)
                continue;
            for (int h = 0; h < c->Hkv; h++)
                for (int d = 0; d < c->D; d++) {
                    const int64_t bi = cache_index(c, b, (int)p, h, d);
                    if (bi < 0)
                        continue;
                    const size_t ni = ((((size_t)b * L_new + t) * c->Hkv + h) * c->D + d) * es;
                    memcpy(ek + bi * es, nk + ni, es);
                    memcpy(ev + bi * es, nv + ni, es);
                }
        }
}

/* Compares both base buffers with the expected images byte for byte. */
static int cache_matches(const cache_dev *c, const unsigned char *ek, const unsigned char *ev, const char *what)
{
    size_t n1, n2;
    unsigned char *gk = read_raw_all(c->kbase, &n1), *gv = read_raw_all(c->vbase, &n2);
    const size_t es = fcl_dtype_size(c->dt);
    size_t bad = 0;
    long first = -1;
    for (size_t i = 0; i < n1; i++)
        if (gk[i] != ek[i] || gv[i] != ev[i]) {
            if (first < 0)
                first = (long)(i / es);
            bad++;
        }
    cr_expect(bad == 0, "[%s] %zu bytes of the cache buffers differ from the expected contents (first at element %ld "
              "of the base buffer: view at element %lld, element strides {%lld, %lld, %lld})",
              what, bad, first, (long long)c->lead, (long long)c->strides[0], (long long)c->strides[1], (long long)c->strides[2]);
    free(gk);
    free(gv);
    return bad == 0;
}

/* New rows [B, L_new, Hkv, D] of random values; V_new is a strided view (padded rows) when
 * `strided`. Returns their raw bytes in *rk, *rv. */
static void new_rows(fcl_context ctx, const cache_dev *c, int L_new, int strided, uint64_t seed, fcl_tensor *tk,
                     fcl_tensor *tv, fcl_tensor *vbase, unsigned char **rk, unsigned char **rv)
{
    const int64_t ns[4] = {c->B, L_new, c->Hkv, c->D};
    *tk = support_tensor_random(ctx, c->dt, 4, ns, seed);
    *vbase = NULL;
    if (strided) {
        const int64_t st[4] = {L_new * (c->Hkv * (c->D + 2) + 1), c->Hkv * (c->D + 2) + 1, c->D + 2, 1};
        const int64_t n = 3 + c->B * st[0];
        *vbase = support_tensor_random(ctx, c->dt, 1, &n, seed + 1);
        *tv = support_view(*vbase, 4, ns, st, 3);
    } else {
        *tv = support_tensor_random(ctx, c->dt, 4, ns, seed + 1);
    }
    size_t b1, b2;
    *rk = read_raw_all(*tk, &b1);
    *rv = read_raw_all(*tv, &b2);
}

/* Host-position appends of different sizes (one overwriting earlier rows) into a cache whose
 * buffers hold a byte pattern: after each step the buffers equal the expected bytes exactly. */
static int append_host_steps(fcl_context ctx, fcl_dtype dt, int page_size, uint64_t seed)
{
    enum { B = 3, LMAX = 24, HKV = 2, D = 40 };
    char what[160];
    cache_dev c;
    cache_create(ctx, &c, dt, B, LMAX, HKV, D, page_size, 1, seed);
    size_t nb;
    unsigned char *ek = support_poison_raw(c.kbase, &nb, 1), *ev = support_poison_raw(c.vbase, &nb, 2);
    static const int steps[][2] = {{0, 3}, {3, 1}, {4, 7}, {2, 2}, {11, 13}, {23, 1}, {0, 24}};
    int ok = 1;
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        const int pos = steps[s][0], L_new = steps[s][1];
        snprintf(what, sizeof what, "%s %s page_size %d: append step %zu, pos %d, L_new %d", fcl_dtype_name(dt),
                 page_size ? "paged" : "contiguous", page_size, s, pos, L_new);
        fcl_tensor tk, tv, vb;
        unsigned char *rk, *rv;
        new_rows(ctx, &c, L_new, s % 2 == 1, seed * 100 + s * 2 + 1, &tk, &tv, &vb, &rk, &rv);
        const long long p[B] = {pos, pos, pos};
        expect_append(&c, ek, ev, rk, rv, L_new, p);
        cl_event e = NULL;
        fcl_status st = fcl_kv_cache_append(ctx, &c.kv, tk, tv, pos, NULL, &e);
        cr_assert(st == FCL_SUCCESS, "[%s] fcl_kv_cache_append: %s: %s", what, fcl_status_string(st),
                  fcl_last_error(ctx));
        cr_assert(e != NULL, "[%s] no event returned", what);
        clReleaseEvent(e);
        ok &= cache_matches(&c, ek, ev, what);
        fcl_tensor_release(tk);
        fcl_tensor_release(tv);
        fcl_tensor_release(vb);
        free(rk);
        free(rv);
    }
    free(ek);
    free(ev);
    cache_release(&c);
    return ok;
}

Test(kv_append, host_positions)
{
    fcl_context ctx = support_context();
    int ok = 1;
    static const fcl_dtype dts[3] = {FCL_F32, FCL_F16, FCL_BF16};
    for (int i = 0; i < 3; i++) {
        ok &= append_host_steps(ctx, dts[i], 0, 100 + (uint64_t)i);
        ok &= append_host_steps(ctx, dts[i], i == 0 ? 1 : i == 1 ? 6 : 8, 200 + (uint64_t)i);
    }
    fcl_context_release(ctx);
    cr_assert(ok, "fcl_kv_cache_append (host pos) wrote wrong bytes or outside its rows");
}

/* Device positions, different per sequence, some partly or wholly outside [0, L_max) (those
 * rows are skipped); in the paged form block-table entries outside [0, num_pages) are never
 * written either. The caches are views in pattern-filled buffers checked whole. */
static int append_device(fcl_context ctx, fcl_dtype dt, int page_size, uint64_t seed)
{
    enum { B = 4, LMAX = 30, HKV = 2, D = 24 };
    cache_dev c;
    cache_create(ctx, &c, dt, B, LMAX, HKV, D, page_size, 1, seed);
    if (page_size) { /* bad page numbers: sequence 0 page 1, sequence 2 page 0, sequence 3 its last page */
        c.bt[0 * c.max_pages + 1] = -1;
        c.bt[3 * c.max_pages + c.max_pages - 1] = c.num_pages;
        c.bt[2 * c.max_pages + 0] = 1 << 20;
        cr_assert(fcl_tensor_write_raw(c.table, c.bt, sizeof(int32_t) * B * (size_t)c.max_pages) == FCL_SUCCESS);
    }
    size_t nb;
    unsigned char *ek = support_poison_raw(c.kbase, &nb, 3), *ev = support_poison_raw(c.vbase, &nb, 4);
    static const struct {
        int L_new;
        int32_t pos[B];
    } steps[] = {
        {4, {0, 5, LMAX - 2, -2}},                 /* seq 2: last 2 rows skipped; seq 3: first 2 skipped */
        {1, {4, LMAX, -1, LMAX - 1}},              /* past the end, just before the start, the last row */
        {3, {INT_MAX, INT_MIN, 9, INT_MAX - 1}},   /* far outside (no overflow into range) */
        {6, {7, 24, -6, -5}},                      /* seq 2: all before 0; seq 3: one row */
        {30, {0, 0, 0, 0}},                        /* everything */
    };
    int ok = 1;
    char what[200];
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        const int L_new = steps[s].L_new;
        snprintf(what, sizeof what, "%s %s page_size %d: device positions {%d, %d, %d, %d}, L_new %d",
                 fcl_dtype_name(dt), page_size ? "paged" : "contiguous", page_size, steps[s].pos[0], steps[s].pos[1],
                 steps[s].pos[2], steps[s].pos[3], L_new);
        fcl_tensor tk, tv, vb;
        unsigned char *rk, *rv;
        new_rows(ctx, &c, L_new, s % 2 == 0, seed * 100 + s * 2 + 1, &tk, &tv, &vb, &rk, &rv);
        long long p[B];
        for (int b = 0; b < B; b++)
            p[b] = steps[s].pos[b];
        expect_append(&c, ek, ev, rk, rv, L_new, p);
        const int64_t n = B;
        fcl_tensor tpos = i32_tensor(ctx, 1, &n, steps[s].pos);
        fcl_status st = fcl_kv_cache_append(ctx, &c.kv, tk, tv, -1, tpos, NULL);
        cr_assert(st == FCL_SUCCESS, "[%s] fcl_kv_cache_append: %s: %s", what, fcl_status_string(st),
                  fcl_last_error(ctx));
        ok &= cache_matches(&c, ek, ev, what);
        fcl_tensor_release(tpos);
        fcl_tensor_release(tk);
        fcl_tensor_release(tv);
        fcl_tensor_release(vb);
        free(rk);
        free(rv);
    }
    free(ek);
    free(ev);
    cache_release(&c);
    return ok;
}

Test(kv_append, device_positions)
{
    fcl_context ctx = support_context();
    int ok = 1;
    ok &= append_device(ctx, FCL_F32, 0, 300);
    ok &= append_device(ctx, FCL_F16, 0, 301);
    ok &= append_device(ctx, FCL_F32, 3, 302);
    ok &= append_device(ctx, FCL_BF16, 10, 303);
    ok &= append_device(ctx, FCL_F32, 1, 304);
    fcl_context_release(ctx);
    cr_assert(ok, "fcl_kv_cache_append (device positions) wrote wrong bytes or outside its rows");
}

/* ---------------------------------------------------------------- generation loop */

/*
 * 200 steps of B 2, Hq 4, Hkv 2, D 64: each step appends one K/V row at device positions
 * (a view of row s of a [200, B] I32 tensor) and decodes one query with device lengths s + 1,
 * writing row s of O [B, 200, Hq, D] and LSE [B, Hq, 200] through views. The cache (L_max 256)
 * starts NaN-filled, so reading a row not yet appended gives NaN. The 200 rows must match the
 * float64 causal forward over the whole sequence, and one fcl_attention_forward causal call.
 */
static int generation(fcl_context ctx, fcl_dtype dt, uint64_t seed)
{
    enum { B = 2, HQ = 4, HKV = 2, D = 64, S = 200, LMAX = 256 };
    cache_dev c;
    cache_create(ctx, &c, dt, B, LMAX, HKV, D, 0, 0, seed);
    support_poison(c.kbase);
    support_poison(c.vbase);
    const size_t nq = (size_t)B * S * HQ * D, nk = (size_t)B * S * HKV * D, nl = (size_t)B * HQ * S;
    float *hq = support_xmalloc(sizeof(float) * nq), *hk = support_xmalloc(sizeof(float) * nk);
    float *hv = support_xmalloc(sizeof(float) * nk);
    support_random(hq, nq, seed * 8 + 1, -2.0f, 2.0f, dt);
    support_random(hk, nk, seed * 8 + 2, -2.0f, 2.0f, dt);
    support_random(hv, nk, seed * 8 + 3, -1.0f, 1.0f, dt);
    const int64_t qs[4] = {B, S, HQ, D}, ks[4] = {B, S, HKV, D}, ls[3] = {B, HQ, S}, ps[2] = {S, B};
    fcl_tensor Q = support_tensor(ctx, dt, 4, qs, hq), K = support_tensor(ctx, dt, 4, ks, hk);
    fcl_tensor V = support_tensor(ctx, dt, 4, ks, hv), O = support_tensor(ctx, dt, 4, qs, NULL);
    fcl_tensor L = support_tensor(ctx, FCL_F32, 3, ls, NULL);
    int32_t pos[S][B], lens[S][B];
    for (int s = 0; s < S; s++)
        for (int b = 0; b < B; b++) {
            pos[s][b] = s;
            lens[s][b] = s + 1;
        }
    fcl_tensor P = i32_tensor(ctx, 2, ps, &pos[0][0]), N = i32_tensor(ctx, 2, ps, &lens[0][0]);
    support_poison(O);
    support_poison(L);
    fcl_attn_params prm = FCL_ATTN_PARAMS_INIT;
    const int64_t q1[4] = {B, 1, HQ, D}, qst[4] = {S * HQ * D, HQ * D, D, 1};
    const int64_t k1[4] = {B, 1, HKV, D}, kst[4] = {S * HKV * D, HKV * D, D, 1};
    const int64_t l1[3] = {B, HQ, 1}, lst[3] = {HQ * S, S, 1}, b1 = B, one = 1;
    for (int s = 0; s < S; s++) {
        fcl_tensor qv = support_view(Q, 4, q1, qst, (int64_t)s * HQ * D), ov = support_view(O, 4, q1, qst, (int64_t)s * HQ * D);
        fcl_tensor kv = support_view(K, 4, k1, kst, (int64_t)s * HKV * D), vv = support_view(V, 4, k1, kst, (int64_t)s * HKV * D);
        fcl_tensor lv = support_view(L, 3, l1, lst, s), pv = support_view(P, 1, &b1, &one, (int64_t)s * B);
        fcl_tensor nv = support_view(N, 1, &b1, &one, (int64_t)s * B);
        fcl_status st = fcl_kv_cache_append(ctx, &c.kv, kv, vv, -1, pv, NULL);
        cr_assert(st == FCL_SUCCESS, "[%s step %d] append: %s: %s", fcl_dtype_name(dt), s, fcl_status_string(st),
                  fcl_last_error(ctx));
        st = fcl_attention_decode(ctx, &prm, qv, &c.kv, -1, nv, NULL, ov, lv, NULL);
        cr_assert(st == FCL_SUCCESS, "[%s step %d] decode: %s: %s", fcl_dtype_name(dt), s, fcl_status_string(st),
                  fcl_last_error(ctx));
        fcl_tensor all[] = {qv, ov, kv, vv, lv, pv, nv};
        for (int i = 0; i < 7; i++)
            fcl_tensor_release(all[i]);
    }
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "fcl_finish: %s", fcl_last_error(ctx));
    float *o = support_xmalloc(sizeof(float) * nq), *l = support_xmalloc(sizeof(float) * nl);
    support_read(O, o);
    support_read(L, l);

    /* the forward over all 200 rows */
    fcl_tensor Of = support_tensor(ctx, dt, 4, qs, NULL), Lf = support_tensor(ctx, FCL_F32, 3, ls, NULL);
    support_poison(Of);
    support_poison(Lf);
    prm.causal = 1;
    fcl_status st = fcl_attention_forward(ctx, &prm, Q, K, V, Of, Lf, NULL);
    cr_assert(st == FCL_SUCCESS, "forward: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    float *of = support_xmalloc(sizeof(float) * nq), *lf = support_xmalloc(sizeof(float) * nl);
    support_read(Of, of);
    support_read(Lf, lf);

    const ref_attn_problem rp = {B, S, S, HQ, HKV, D, 0.0, 1, U, U, 0.0, NULL, 0, NULL, 0};
    double *ro = support_xmalloc(sizeof(double) * nq), *rl = support_xmalloc(sizeof(double) * nl);
    float *no = support_xmalloc(sizeof(float) * nq), *nl_ = support_xmalloc(sizeof(float) * nl);
    ref_attention_forward(&rp, hq, hk, hv, ro, rl);
    ref_attention_forward_naive(&rp, dt, hq, hk, hv, no, nl_);
    const double e_o = support_max_err_f(o, ro, nq), e_l = support_max_err_f(l, rl, nl);
    const double n_o = support_max_err_f(no, ro, nq), n_l = support_max_err_f(nl_, rl, nl);
    const double f_o = support_max_err_f(of, ro, nq), f_l = support_max_err_f(lf, rl, nl);
    double d_o, d_l;
    long f1, f2;
    support_bit_diff(o, of, nq, &d_o, &f1);
    support_bit_diff(l, lf, nl, &d_l, &f2);
    /* the worst step, for the message */
    int worst = -1;
    double werr = -1.0;
    for (size_t i = 0; i < nq; i++) {
        const double e = isnan(o[i]) ? INFINITY : fabs((double)o[i] - ro[i]);
        if (e > werr) {
            werr = e;
            worst = (int)(i / (HQ * D) % S);
        }
    }
    const int ok_dec = support_within(e_o, n_o, 2.0) && support_within(e_l, n_l, 2.0);
    const int ok_fwd = support_within(f_o, n_o, 2.0) && support_within(f_l, n_l, 2.0);
    const int ok_agree = support_within(d_o, n_o, 2.0) && support_within(d_l, n_l, 2.0);
    cr_expect(ok_dec, "[%s generation] decode vs float64 causal forward: O err %.3g (bound %.3g, worst at step %d), "
              "LSE err %.3g (bound %.3g)",
              fcl_dtype_name(dt), e_o, 2 * n_o + 1e-5, worst, e_l, 2 * n_l + 1e-5);
    cr_expect(ok_fwd, "[%s generation] fcl_attention_forward vs float64: O err %.3g (bound %.3g), LSE err %.3g",
              fcl_dtype_name(dt), f_o, 2 * n_o + 1e-5, f_l);
    cr_expect(ok_agree, "[%s generation] decode vs fcl_attention_forward: max |O diff| %.3g (bound %.3g), "
              "max |LSE diff| %.3g (bound %.3g)",
              fcl_dtype_name(dt), d_o, 2 * n_o + 1e-5, d_l, 2 * n_l + 1e-5);
    fcl_tensor all[] = {Q, K, V, O, L, P, N, Of, Lf};
    for (int i = 0; i < 9; i++)
        fcl_tensor_release(all[i]);
    free(hq);
    free(hk);
    free(hv);
    free(o);
    free(l);
    free(of);
    free(lf);
    free(ro);
    free(rl);
    free(no);
    free(nl_);
    cache_release(&c);
    return ok_dec && ok_fwd && ok_agree;
}

Test(decode, generation_200_steps)
{
    fcl_context ctx = support_context();
    int ok = generation(ctx, FCL_F32, 8000);
    ok &= generation(ctx, FCL_F16, 8001);
    fcl_context_release(ctx);
    cr_assert(ok, "the generation loop does not reproduce the causal forward");
}

/* ---------------------------------------------------------------- bad arguments */

/* A valid small problem (B 2, L_max 16, Lq 1, Hq 4, Hkv 4, D 64, f32: the kernel of the first
 * host_len_f32 case); each test swaps one argument for a bad one. O, LSE and the caches hold
 * byte patterns that must survive. */
enum { EB = 2, ELMAX = 16, ELQ = 1, EHQ = 4, EHKV = 4, ED = 64 };

typedef struct efix {
    fcl_context ctx;
    fcl_tensor q, k, v, o, lse, lens, mask, table, pages_k, pages_v;
    fcl_kv_cache cache;
    unsigned char *po, *pl, *pk, *pv;
    size_t ob, lb, kb, vb;
} efix;

static char g_msg[1024];

static void efix_init(efix *f)
{
    memset(f, 0, sizeof *f);
    f->ctx = support_context();
    const int64_t qs[4] = {EB, ELQ, EHQ, ED}, ks[4] = {EB, ELMAX, EHKV, ED}, ls[3] = {EB, EHQ, ELQ};
    const int64_t ms[2] = {EB, ELMAX}, nb = EB;
    f->q = support_tensor_random(f->ctx, FCL_F32, 4, qs, 31);
    f->k = support_tensor_random(f->ctx, FCL_F32, 4, ks, 32);
    f->v = support_tensor_random(f->ctx, FCL_F32, 4, ks, 33);
    f->o = support_tensor_random(f->ctx, FCL_F32, 4, qs, 0);
    f->lse = support_tensor_random(f->ctx, FCL_F32, 3, ls, 0);
    static const int32_t lens[EB] = {5, 16};
    f->lens = i32_tensor(f->ctx, 1, &nb, lens);
    float m[EB * ELMAX];
    for (int i = 0; i < EB * ELMAX; i++)
        m[i] = 1.0f;
    f->mask = support_tensor(f->ctx, FCL_F32, 2, ms, m);
    f->cache.k = f->k;
    f->cache.v = f->v;
    f->po = support_poison_raw(f->o, &f->ob, 1);
    f->pl = support_poison_raw(f->lse, &f->lb, 2);
    f->pk = support_poison_raw(f->k, &f->kb, 3);
    f->pv = support_poison_raw(f->v, &f->vb, 4);
}

static void efix_untouched(efix *f)
{
    cr_assert(fcl_finish(f->ctx) == FCL_SUCCESS, "fcl_finish after a rejected call: %s", fcl_last_error(f->ctx));
    const fcl_tensor t[4] = {f->o, f->lse, f->k, f->v};
    const unsigned char *want[4] = {f->po, f->pl, f->pk, f->pv};
    const size_t nb[4] = {f->ob, f->lb, f->kb, f->vb};
    const char *names[4] = {"O", "LSE", "cache.k", "cache.v"};
    for (int i = 0; i < 4; i++) {
        size_t n;
        unsigned char *got = read_raw_all(t[i], &n);
        cr_assert(n == nb[i] && memcmp(got, want[i], n) == 0, "%s was written by a rejected call", names[i]);
        free(got);
    }
}

static void efix_fini(efix *f)
{
    fcl_tensor all[] = {f->q, f->k, f->v, f->o, f->lse, f->lens, f->mask, f->table, f->pages_k, f->pages_v};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    free(f->po);
    free(f->pl);
    free(f->pk);
    free(f->pv);
    fcl_context_release(f->ctx);
}

/* Replaces one of f's input tensors by a new random one. */
static void efix_replace(efix *f, fcl_tensor *slot, fcl_dtype dt, int ndim, const int64_t *shape)
{
    fcl_tensor_release(*slot);
    *slot = NULL;
    if (dt == FCL_I32) {
        int64_t n = 1;
        for (int i = 0; i < ndim; i++)
            n *= shape[i];
        int32_t *z = calloc((size_t)n, sizeof(int32_t));
        *slot = i32_tensor(f->ctx, ndim, shape, z);
        free(z);
    } else {
        *slot = support_tensor_random(f->ctx, dt, ndim, shape, 41);
    }
}

/* Checks a rejected call: status, a sentence naming things, no event, nothing written. */
static const char *expect_rejected(efix *f, fcl_status st, cl_event ev, fcl_status want, const char *what)
{
    snprintf(g_msg, sizeof g_msg, "%s", fcl_last_error(f->ctx));
    cr_assert(st == want, "%s returned %s, expected %s; message: \"%s\"", what, fcl_status_string(st),
              fcl_status_string(want), g_msg);
    if (want == FCL_SUCCESS) {
        cr_assert(ev != NULL, "a successful %s returned no event", what);
        clReleaseEvent(ev);
        return g_msg;
    }
    cr_assert(ev == NULL, "a rejected %s returned an event", what);
    support_assert_sentence(g_msg);
    efix_untouched(f);
    return g_msg;
}

static const char *dcall(efix *f, const fcl_attn_params *p, int64_t len, fcl_tensor lens, fcl_tensor mask,
                         fcl_status want)
{
    cl_event ev = NULL;
    fcl_status st = fcl_attention_decode(f->ctx, p, f->q, &f->cache, len, lens, mask, f->o, f->lse, &ev);
    return expect_rejected(f, st, ev, want, "fcl_attention_decode");
}

static const char *acall(efix *f, fcl_tensor kn, fcl_tensor vn, int64_t pos, fcl_tensor positions, fcl_status want)
{
    cl_event ev = NULL;
    fcl_status st = fcl_kv_cache_append(f->ctx, &f->cache, kn, vn, pos, positions, &ev);
    return expect_rejected(f, st, ev, want, "fcl_kv_cache_append");
}

static int has_sub(const char *msg, const char *sub) { return strstr(msg, sub) != NULL; }

Test(decode_errors, control_valid_calls_write)
{
    efix f;
    efix_init(&f);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    dcall(&f, &p, 7, NULL, NULL, FCL_SUCCESS);
    cr_assert(fcl_finish(f.ctx) == FCL_SUCCESS);
    size_t n;
    unsigned char *got = read_raw_all(f.o, &n);
    cr_assert(memcmp(got, f.po, n) != 0, "the valid decode left O untouched");
    free(got);
    const int64_t ns[4] = {EB, 1, EHKV, ED};
    fcl_tensor kn = support_tensor_random(f.ctx, FCL_F32, 4, ns, 61), vn = support_tensor_random(f.ctx, FCL_F32, 4, ns, 62);
    acall(&f, kn, vn, ELMAX - 1, NULL, FCL_SUCCESS); /* the last row is allowed */
    cr_assert(fcl_finish(f.ctx) == FCL_SUCCESS);
    got = read_raw_all(f.k, &n);
    cr_assert(memcmp(got, f.pk, n) != 0, "the valid append left cache.k untouched");
    free(got);
    fcl_tensor_release(kn);
    fcl_tensor_release(vn);
    efix_fini(&f);
}

Test(decode_errors, length_forms)
{
    efix f;
    efix_init(&f);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = dcall(&f, &p, 5, f.lens, NULL, FCL_ERR_INVALID_ARGUMENT); /* host len and lens */
    SUPPORT_ASSERT_TOKENS(msg, "len", "lens");
    msg = dcall(&f, &p, -1, f.lens, f.mask, FCL_ERR_INVALID_ARGUMENT); /* lens and mask */
    SUPPORT_ASSERT_TOKENS(msg, "lens", "mask");
    dcall(&f, &p, 3, f.lens, f.mask, FCL_ERR_INVALID_ARGUMENT); /* all three */
    msg = dcall(&f, &p, -1, NULL, NULL, FCL_ERR_INVALID_ARGUMENT); /* none */
    SUPPORT_ASSERT_TOKENS(msg, "len", "lens", "mask");
    msg = dcall(&f, &p, ELMAX + 1, NULL, NULL, FCL_ERR_INVALID_ARGUMENT); /* host len > L_max */
    SUPPORT_ASSERT_TOKENS(msg, "len", "17", "16");
    msg = dcall(&f, &p, -5, NULL, NULL, FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(msg, "len", "-5");
    efix_fini(&f);
}

Test(decode_errors, length_tensors)
{
    efix f;
    efix_init(&f);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const int64_t nb = EB, nb1 = EB + 1, b2[2] = {EB, 1}, ms[2] = {EB, ELMAX + 1}, m1 = ELMAX - 1;
    efix_replace(&f, &f.lens, FCL_F32, 1, &nb);
    const char *msg = dcall(&f, &p, -1, f.lens, NULL, FCL_ERR_DTYPE);
    SUPPORT_ASSERT_TOKENS(msg, "lens", "f32");
    efix_replace(&f, &f.lens, FCL_I32, 1, &nb1);
    msg = dcall(&f, &p, -1, f.lens, NULL, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "lens", "3", "2");
    efix_replace(&f, &f.lens, FCL_I32, 2, b2);
    msg = dcall(&f, &p, -1, f.lens, NULL, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "lens");
    efix_replace(&f, &f.mask, FCL_F32, 2, ms);
    msg = dcall(&f, &p, -1, NULL, f.mask, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "mask", "17");
    efix_replace(&f, &f.mask, FCL_F32, 1, &m1);
    msg = dcall(&f, &p, -1, NULL, f.mask, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "mask", "15");
    efix_replace(&f, &f.mask, FCL_I32, 2, ms);
    msg = dcall(&f, &p, -1, NULL, f.mask, FCL_ERR_DTYPE);
    SUPPORT_ASSERT_TOKENS(msg, "mask");
    efix_fini(&f);
}

Test(decode_errors, tensors_and_params)
{
    efix f;
    efix_init(&f);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    /* Q f16 over an f32 cache (O f16 too, so only the cache differs) */
    const int64_t qs[4] = {EB, ELQ, EHQ, ED}, q32[4] = {EB, ELQ, EHQ, 32}, q6[4] = {EB, ELQ, 6, ED};
    fcl_tensor keep_q = f.q;
    f.q = NULL;
    efix_replace(&f, &f.q, FCL_F16, 4, qs);
    const char *msg = dcall(&f, &p, 4, NULL, NULL, FCL_ERR_DTYPE);
    SUPPORT_ASSERT_TOKENS(msg, "f16", "f32");
    /* head dim 32 over a cache of head dim 64 */
    efix_replace(&f, &f.q, FCL_F32, 4, q32);
    msg = dcall(&f, &p, 4, NULL, NULL, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "head_dim", "32", "64");
    /* Hq 6 not a multiple of Hkv 4 */
    efix_replace(&f, &f.q, FCL_F32, 4, q6);
    msg = dcall(&f, &p, 4, NULL, NULL, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "6", "4");
    fcl_tensor_release(f.q);
    f.q = keep_q;
    /* O of another shape */
    fcl_tensor keep_o = f.o;
    const int64_t o3[4] = {EB, ELQ + 1, EHQ, ED};
    f.o = support_tensor_random(f.ctx, FCL_F32, 4, o3, 0);
    fcl_tensor o_bad = f.o;
    unsigned char *keep_po = f.po;
    size_t keep_ob = f.ob;
    f.po = support_poison_raw(f.o, &f.ob, 5);
    msg = dcall(&f, &p, 4, NULL, NULL, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "O");
    free(f.po);
    fcl_tensor_release(o_bad);
    f.o = keep_o;
    f.po = keep_po;
    f.ob = keep_ob;
    /* key_mask given */
    fcl_attn_params pm = FCL_ATTN_PARAMS_INIT;
    pm.key_mask = f.mask;
    msg = dcall(&f, &pm, 4, NULL, NULL, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "key_mask"), "message \"%s\" does not name key_mask", msg);
    /* window_right > 0 */
    fcl_attn_params pw = FCL_ATTN_PARAMS_INIT;
    pw.window_right = 3;
    msg = dcall(&f, &pw, 4, NULL, NULL, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "window_right"), "message \"%s\" does not name window_right", msg);
    SUPPORT_ASSERT_TOKENS(msg, "3");
    /* cache.v of another dtype than cache.k */
    fcl_tensor keep_v = f.v;
    const int64_t ks[4] = {EB, ELMAX, EHKV, ED};
    f.cache.v = support_tensor_random(f.ctx, FCL_F16, 4, ks, 44);
    msg = dcall(&f, &p, 4, NULL, NULL, FCL_ERR_DTYPE);
    cr_assert(has_sub(msg, "cache.v"), "message \"%s\" does not name cache.v", msg);
    fcl_tensor_release(f.cache.v);
    f.cache.v = keep_v;
    efix_fini(&f);
}

Test(decode_errors, block_table)
{
    efix f;
    efix_init(&f);
    /* pages [5, 4, Hkv, D]; block tables of B + 1 rows, and of dtype f32 */
    const int64_t pg[4] = {5, 4, EHKV, ED}, bt3[2] = {EB + 1, 4}, bt2[2] = {EB, 4};
    f.pages_k = support_tensor_random(f.ctx, FCL_F32, 4, pg, 71);
    f.pages_v = support_tensor_random(f.ctx, FCL_F32, 4, pg, 72);
    f.cache.k = f.pages_k;
    f.cache.v = f.pages_v;
    free(f.pk);
    free(f.pv);
    f.pk = support_poison_raw(f.pages_k, &f.kb, 3);
    f.pv = support_poison_raw(f.pages_v, &f.vb, 4);
    fcl_tensor keep_k = f.k, keep_v = f.v;
    f.k = f.pages_k; /* efix_untouched checks f.k / f.v */
    f.v = f.pages_v;
    efix_replace(&f, &f.table, FCL_I32, 2, bt3);
    f.cache.block_table = f.table;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = dcall(&f, &p, 4, NULL, NULL, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "3", "2");
    cr_assert(has_sub(msg, "block_table"), "message \"%s\" does not name block_table", msg);
    const int64_t ns[4] = {EB, 1, EHKV, ED};
    fcl_tensor kn = support_tensor_random(f.ctx, FCL_F32, 4, ns, 61), vn = support_tensor_random(f.ctx, FCL_F32, 4, ns, 62);
    msg = acall(&f, kn, vn, 0, NULL, FCL_ERR_SHAPE);
    cr_assert(has_sub(msg, "block_table"), "message \"%s\" does not name block_table", msg);
    efix_replace(&f, &f.table, FCL_F32, 2, bt2);
    f.cache.block_table = f.table;
    msg = dcall(&f, &p, 4, NULL, NULL, FCL_ERR_DTYPE);
    cr_assert(has_sub(msg, "block_table"), "message \"%s\" does not name block_table", msg);
    /* a contiguous cache whose batch differs from Q's */
    f.cache.block_table = NULL;
    const int64_t k3[4] = {EB + 1, ELMAX, EHKV, ED};
    fcl_tensor ck = support_tensor_random(f.ctx, FCL_F32, 4, k3, 73), cv = support_tensor_random(f.ctx, FCL_F32, 4, k3, 74);
    f.cache.k = ck;
    f.cache.v = cv;
    msg = dcall(&f, &p, 4, NULL, NULL, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "3", "2");
    fcl_tensor_release(ck);
    fcl_tensor_release(cv);
    fcl_tensor_release(kn);
    fcl_tensor_release(vn);
    f.k = keep_k;
    f.v = keep_v;
    f.cache.k = f.k;
    f.cache.v = f.v;
    efix_fini(&f);
}

Test(append_errors, positions_and_rows)
{
    efix f;
    efix_init(&f);
    const int64_t ns[4] = {EB, 3, EHKV, ED}, nb = EB, nb1 = EB + 1;
    fcl_tensor kn = support_tensor_random(f.ctx, FCL_F32, 4, ns, 61), vn = support_tensor_random(f.ctx, FCL_F32, 4, ns, 62);
    /* pos + L_new > L_max */
    const char *msg = acall(&f, kn, vn, 14, NULL, FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(msg, "pos", "14", "3", "16");
    msg = acall(&f, kn, vn, -3, NULL, FCL_ERR_INVALID_ARGUMENT);
    SUPPORT_ASSERT_TOKENS(msg, "-3");
    /* pos and positions both given */
    static const int32_t pz[EB] = {0, 0};
    fcl_tensor pos = i32_tensor(f.ctx, 1, &nb, pz);
    msg = acall(&f, kn, vn, 2, pos, FCL_ERR_INVALID_ARGUMENT);
    cr_assert(has_sub(msg, "positions"), "message \"%s\" does not name positions", msg);
    /* positions f32, positions [B + 1] */
    fcl_tensor pf = support_tensor_random(f.ctx, FCL_F32, 1, &nb, 63);
    msg = acall(&f, kn, vn, -1, pf, FCL_ERR_DTYPE);
    SUPPORT_ASSERT_TOKENS(msg, "positions", "f32");
    fcl_tensor p3 = i32_tensor(f.ctx, 1, &nb1, NULL);
    msg = acall(&f, kn, vn, -1, p3, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "positions", "3", "2");
    /* K_new f16 into an f32 cache; K_new with another Hkv; V_new of another shape */
    const int64_t n1[4] = {EB, 3, 1, ED}, n4[4] = {EB, 4, EHKV, ED};
    fcl_tensor k16 = support_tensor_random(f.ctx, FCL_F16, 4, ns, 64);
    fcl_tensor k1 = support_tensor_random(f.ctx, FCL_F32, 4, n1, 65);
    fcl_tensor v4 = support_tensor_random(f.ctx, FCL_F32, 4, n4, 66);
    msg = acall(&f, k16, vn, 0, NULL, FCL_ERR_DTYPE);
    SUPPORT_ASSERT_TOKENS(msg, "K_new", "f16", "f32");
    msg = acall(&f, k1, vn, 0, NULL, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "K_new");
    msg = acall(&f, kn, v4, 0, NULL, FCL_ERR_SHAPE);
    SUPPORT_ASSERT_TOKENS(msg, "V_new");
    fcl_tensor all[] = {kn, vn, pos, pf, p3, k16, k1, v4};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    efix_fini(&f);
}

/* Mask form: dropped cache slots may hold anything (freed rows); here their K and V are NaN,
 * and O must still be the reference over the kept keys (queries at the last kept key); with
 * the device's tiles and with the GPU shape (FLASHCL_DECODE_TILES=16,4,64,8,0). */
Test(decode, dropped_slots_hold_nan)
{
    const int B = 2, L = 80, Lq = 2, Hq = 4, Hkv = 2, D = 64;
    const int64_t qs[4] = {B, Lq, Hq, D}, cs[4] = {B, L, Hkv, D}, ms[2] = {B, L};
    const size_t nq = (size_t)B * Lq * Hq * D, nc = (size_t)B * L * Hkv * D, row = (size_t)Hkv * D;
    float *q = support_xmalloc(sizeof(float) * nq), *k = support_xmalloc(sizeof(float) * nc);
    float *v = support_xmalloc(sizeof(float) * nc), *o = support_xmalloc(sizeof(float) * nq);
    float *kn = support_xmalloc(sizeof(float) * nc), *vn = support_xmalloc(sizeof(float) * nc);
    float m[2 * 80];
    support_random(q, nq, 1601, -1, 1, FCL_F16);
    support_random(k, nc, 1602, -1, 1, FCL_F16);
    support_random(v, nc, 1603, -1, 1, FCL_F16);
    const int last[2] = {70, 41}; /* the last kept key of each sequence */
    for (int b = 0; b < B; b++)
        for (int j = 0; j < L; j++)
            m[b * L + j] = j <= last[b] && (j % 4 != 1 || j == last[b]) ? 1.0f : 0.0f;
    memcpy(kn, k, sizeof(float) * nc);
    memcpy(vn, v, sizeof(float) * nc);
    for (size_t e = 0; e < nc; e++)
        if (m[e / row] == 0.0f) /* e / row = b * L + j */
            kn[e] = vn[e] = NAN;
    fcl_context ctx = support_context();
    fcl_tensor tq = support_tensor(ctx, FCL_F16, 4, qs, q), to = support_tensor(ctx, FCL_F16, 4, qs, NULL);
    fcl_tensor tm = support_tensor(ctx, FCL_F32, 2, ms, m);
    fcl_kv_cache cache = {support_tensor(ctx, FCL_F16, 4, cs, kn), support_tensor(ctx, FCL_F16, 4, cs, vn), NULL};
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    static const char *const tiles[2] = {NULL, "16,4,64,8,0"};
    for (int t = 0; t < 2; t++) {
        if (tiles[t])
            setenv("FLASHCL_DECODE_TILES", tiles[t], 1);
        support_poison(to);
        const fcl_status st = fcl_attention_decode(ctx, &p, tq, &cache, -1, NULL, tm, to, NULL, NULL);
        unsetenv("FLASHCL_DECODE_TILES");
        cr_assert(st == FCL_SUCCESS, "%s", fcl_last_error(ctx));
        support_read(to, o);
        for (int b = 0; b < B; b++) { /* each sequence alone: Sk = last + 1, its mask as key mask */
            const int Sk = last[b] + 1;
            float *ks = support_xmalloc(sizeof(float) * (size_t)Sk * row);
            float *vs = support_xmalloc(sizeof(float) * (size_t)Sk * row);
            memcpy(ks, k + (size_t)b * L * row, sizeof(float) * (size_t)Sk * row);
            memcpy(vs, v + (size_t)b * L * row, sizeof(float) * (size_t)Sk * row);
            ref_attn_problem rp = {.B = 1, .Sq = Lq, .Sk = Sk, .Hq = Hq, .Hkv = Hkv, .D = D, .causal = 1,
                                   .window_left = -1, .window_right = -1, .key_mask = m + b * L};
            const size_t n = (size_t)Lq * Hq * D;
            double *ref = support_xmalloc(sizeof(double) * n);
            float *naive = support_xmalloc(sizeof(float) * n);
            ref_attention_forward(&rp, q + (size_t)b * n, ks, vs, ref, NULL);
            ref_attention_forward_naive(&rp, FCL_F16, q + (size_t)b * n, ks, vs, naive, NULL);
            const double err = support_max_err_f(o + (size_t)b * n, ref, n), nerr = support_max_err_f(naive, ref, n);
            cr_expect(support_within(err, nerr, 2.0), "sequence %d (tiles %s): NaN in dropped slots reached O: err %g, "
                      "naive %g", b, tiles[t] ? tiles[t] : "default", err, nerr);
            free(ks), free(vs), free(ref), free(naive);
        }
    }
    fcl_tensor all[] = {tq, to, tm, cache.k, cache.v};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    fcl_context_release(ctx);
    free(q), free(k), free(v), free(o), free(kn), free(vn);
}
