/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench correctness column: sampled query rows against the float64 reference, with
 * the DESIGN.md bound 2 * naive_err + 1e-5 (naive = float32 math rounding to the dtype).
 * Packed (varlen) cases check each sampled row against its own sequence alone. */
#include "bench.h"
#include "ref_attention.h"

#include <math.h>
#include <stdlib.h>

#define CHECK_ALL_MAX 4096 /* check every row up to this many */
#define CHECK_DEFAULT 64   /* else this many random rows */
#define CHECK_SEED 0x5EEDC0DEull

static ref_attn_problem problem_of(const bench_case *c)
{
    ref_attn_problem p = {0};
    p.B = c->b; p.Sq = c->sq; p.Sk = c->sk; p.Hq = c->hq; p.Hkv = c->hkv; p.D = c->d;
    p.scale = 0.0;
    p.causal = c->causal;
    p.window_left = c->window_left;
    p.window_right = c->window_right;
    p.softcap = c->softcap;
    return p;
}

/* How many rows to check under the default rule or an explicit count. */
static long rows_to_check(long total, int check_rows)
{
    if (check_rows < 0)
        return total <= CHECK_ALL_MAX ? total : CHECK_DEFAULT;
    return check_rows < total ? check_rows : total;
}

/* Fills rows[n] with n distinct row indices in [0, total), ascending, chosen uniformly
 * with a fixed seed (selection sampling, Knuth's algorithm S); n == total takes every row. */
static void pick_rows(long *rows, long n, long total)
{
    uint64_t s = CHECK_SEED;
    long k = 0;
    for (long t = 0; t < total && k < n; t++)
        if ((long)(bench_rng_next(&s) % (uint64_t)(total - t)) < n - k)
            rows[k++] = t;
}

static int any_nan(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (isnan(x[i]))
            return 1;
    return 0;
}

/* Scratch and running maxima of the check. */
typedef struct check_acc {
    double *ref;
    float *naive;
    double err, naive_err;
} check_acc;

/* Query row i of batch b, head h of problem p against its output row o[D]; the kernel's error
 * is NaN-aware (NaN -> inf). */
static void row_errors(const ref_attn_problem *p, fcl_dtype dtype, const float *q, const float *k,
                       const float *v, int b, int i, int h, const float *o, check_acc *a)
{
    ref_attention_row(p, q, k, v, b, i, h, a->ref, NULL);
    ref_attention_row_naive(p, dtype, q, k, v, b, i, h, a->naive, NULL);
    for (int d = 0; d < p->D; d++) {
        double e = isnan(o[d]) ? INFINITY : fabs((double)o[d] - a->ref[d]);
        double ne = fabs((double)a->naive[d] - a->ref[d]);
        a->err = e > a->err ? e : a->err;
        a->naive_err = ne > a->naive_err ? ne : a->naive_err;
    }
}

/* The sequence holding packed row t: the s with cu[s] <= t < cu[s + 1]. */
static int seq_of(const int32_t *cu, int seqs, long t)
{
    int lo = 0, hi = seqs - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (cu[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Row `row` (query-major: row = query * Hq + h) of a dense or packed case. */
static void check_row(const bench_check_in *in, long row, check_acc *a)
{
    const bench_case *c = in->c;
    ref_attn_problem p = problem_of(c);
    const float *o = in->o + (size_t)row * (size_t)c->d;
    int h = (int)(row % c->hq);
    long t = row / c->hq;
    if (!in->cu) {
        row_errors(&p, c->dtype, in->q, in->k, in->v, (int)(t / c->sq), (int)(t % c->sq), h, o, a);
        return;
    }
    int s = seq_of(in->cu, in->seqs, t);
    size_t start = (size_t)in->cu[s];
    p.B = 1;
    p.Sq = p.Sk = in->cu[s + 1] - in->cu[s];
    row_errors(&p, c->dtype, in->q + start * (size_t)c->hq * (size_t)c->d,
               in->k + start * (size_t)c->hkv * (size_t)c->d,
               in->v + start * (size_t)c->hkv * (size_t)c->d, 0, (int)(t - (long)start), h, o, a);
}

void bench_check_forward(const bench_check_in *in, bench_result *r)
{
    const bench_case *c = in->c;
    long queries = in->cu ? (long)in->cu[in->seqs] : (long)c->b * c->sq;
    long total = queries * c->hq;
    long n = rows_to_check(total, in->check_rows);
    long *rows = malloc(sizeof *rows * (size_t)(n > 0 ? n : 1));
    check_acc a = {malloc(sizeof(double) * (size_t)c->d), malloc(sizeof(float) * (size_t)c->d), 0.0, 0.0};
    int nan = any_nan(in->o, (size_t)total * (size_t)c->d);
    if (!rows || !a.ref || !a.naive) {
        n = 0; /* out of host memory: report as unchecked */
    } else {
        pick_rows(rows, n, total);
        for (long k = 0; k < n; k++)
            check_row(in, rows[k], &a);
    }
    r->rows_total = total;
    r->rows_checked = n;
    r->max_err = n ? a.err : NAN;
    r->err_bound = n ? 2.0 * a.naive_err + 1e-5 : NAN;
    r->has_nan = nan;
    r->ok = !nan && (n == 0 || a.err <= r->err_bound);
    free(rows);
    free(a.ref);
    free(a.naive);
}
