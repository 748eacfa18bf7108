/* flashcl-bench correctness column: sampled query rows against the float64 reference, with
 * the DESIGN.md bound 2 * naive_err + 1e-5 (naive = float32 math rounding to the dtype). */
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

/* Max errors of one row: of the kernel (NaN-aware: NaN -> inf) and of the naive twin. */
static void row_errors(const bench_check_in *in, const ref_attn_problem *p, long row,
                       double *ref, float *naive, double *err, double *naive_err)
{
    const bench_case *c = in->c;
    int h = (int)(row % c->hq), i = (int)(row / c->hq % c->sq), b = (int)(row / c->hq / c->sq);
    const float *o = in->o + (size_t)row * (size_t)c->d;
    ref_attention_row(p, in->q, in->k, in->v, b, i, h, ref, NULL);
    ref_attention_row_naive(p, c->dtype, in->q, in->k, in->v, b, i, h, naive, NULL);
    for (int d = 0; d < c->d; d++) {
        double e = isnan(o[d]) ? INFINITY : fabs((double)o[d] - ref[d]);
        double ne = fabs((double)naive[d] - ref[d]);
        *err = e > *err ? e : *err;
        *naive_err = ne > *naive_err ? ne : *naive_err;
    }
}

void bench_check_forward(const bench_check_in *in, bench_result *r)
{
    const bench_case *c = in->c;
    long total = (long)c->b * c->sq * c->hq;
    long n = rows_to_check(total, in->check_rows);
    ref_attn_problem p = problem_of(c);
    long *rows = malloc(sizeof *rows * (size_t)(n > 0 ? n : 1));
    double *ref = malloc(sizeof *ref * (size_t)c->d);
    float *naive = malloc(sizeof *naive * (size_t)c->d);
    double err = 0.0, naive_err = 0.0;
    int nan = any_nan(in->o, (size_t)total * (size_t)c->d);
    if (!rows || !ref || !naive) {
        n = 0; /* out of host memory: report as unchecked */
    } else {
        pick_rows(rows, n, total);
        for (long k = 0; k < n; k++)
            row_errors(in, &p, rows[k], ref, naive, &err, &naive_err);
    }
    r->rows_total = total;
    r->rows_checked = n;
    r->max_err = n ? err : NAN;
    r->err_bound = n ? 2.0 * naive_err + 1e-5 : NAN;
    r->has_nan = nan;
    r->ok = !nan && (n == 0 || err <= r->err_bound);
    free(rows);
    free(ref);
    free(naive);
}
