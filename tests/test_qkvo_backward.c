/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcl_attention_qkvo_backward against the float64 reference gradients
 * (tests/ref/ref_projection_backward.h), on the FLASHCL_DEVICE device, and the proof of that
 * reference by central finite differences (needs no device).
 *
 * Rule (DESIGN.md, gradients): max |kernel - float64| <= 3 * max |naive - float64| + 1e-5 for
 * each of dX, dCtx, dWq, dWk, dWv, dWo and dbq..dbo, where "naive" computes in float32 and
 * rounds every stage (Q, K, V, A, dA, dQ, dK, dV, each input-gradient product and sum) to the
 * activation dtype and the weight gradients to their own storage dtype. I8 weights enter both
 * references dequantised (w[n, k] * scale[n]); their gradients are those of the dequantised
 * weight.
 *
 * Every case runs the backward twice on zeroed weight gradients: dX / dCtx are overwritten
 * (bit-identical both times: the op is deterministic) while dw / db accumulate (the second
 * call leaves twice the first's values, within the rounding of their dtype). dX and dCtx are
 * NaN-poisoned before each call. Bad input: the exact status, a sentence naming the argument,
 * every output byte-identical to its poison, no event.
 *
 * Criterion forks one process per Test and each compiles the programs it uses, so cases are
 * grouped into a few Tests that iterate tables.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_projection_backward.h"
#include "support.h"

enum { WQ = 0, WK = 1, WV = 2, WO = 3 };
enum { BQ = 1, BK = 2, BV = 4, BO = 8, BALL = 15 };
enum { MASK_NONE = 0, MASK_LK = 1 };
enum { DW_F32 = 0, DW_ACT = 1 };

static const char *const wname[4] = {"q", "k", "v", "o"};

#define W4(t) {t, t, t, t}
#define WMIX {FCL_I8, FCL_F16, FCL_BF16, FCL_F32}

/* ================================================================ 1. the reference, proven */

/* A tiny problem for finite differences: Lq 3, Lk 4 (cross) or 3 (self), D 4, 2 heads,
 * D_ctx 3. */
typedef struct fd_case {
    const char *name;
    int self;
    int bias;   /* BQ | BK | BV | BO */
    int causal;
    int mask;   /* key mask [Lk] dropping one key */
    int scaled; /* weights with per-row scales (as I8 weights are given) */
    double scale;
} fd_case;

static const fd_case fd_cases[] = {
    {"self, biases", 1, BALL, 0, 0, 0, 0},
    {"self, biases, causal", 1, BALL, 1, 0, 0, 0},
    {"cross, biases", 0, BALL, 0, 0, 0, 0},
    {"cross, biases, causal", 0, BALL, 1, 0, 0, 0},
    {"cross, no bias, mask, row scales", 0, 0, 0, 1, 1, 0},
    {"self, bq bo, causal, mask, row scales, scale 0.7", 1, BQ | BO, 1, 1, 1, 0.7},
    {"cross, bk bv, causal, mask", 0, BK | BV, 1, 1, 0, 0},
};

static const float fd_mask[4] = {1.0f, 0.0f, 0.75f, 1.0f};

/* |fd - g| / (1 + |g|) bound: the reference rounds Q, K, V and dA to float32 before the
 * attention core (a relative 6e-8; the worst measured is 5.3e-8), the finite difference's own
 * error is ~1e-10; a wrong gradient is off by O(1). */
#define FD_TOL 5e-7

typedef struct fd_param {
    const char *name;
    double *x;        /* the float64 values perturbed */
    const double *g;  /* the analytic gradient */
    size_t n;
} fd_param;

Test(qkvo_backward_reference, finite_differences)
{
    for (size_t c = 0; c < sizeof fd_cases / sizeof fd_cases[0]; c++) {
        const fd_case *fc = &fd_cases[c];
        const int Lq = 3, Lk = fc->self ? 3 : 4, D = 4, H = 2, Dc = fc->self ? 4 : 3;
        const uint64_t seed = 1000 + 100 * c;
        ref_qkvo_problem p = {.Lq = Lq, .Lk = Lk, .D = D, .D_ctx = Dc, .H = H};
        p.attn = (ref_attn_problem){.scale = fc->scale, .causal = fc->causal, .window_left = -1,
                                    .window_right = -1, .key_mask = fc->mask ? fd_mask : NULL};
        const size_t nx = (size_t)Lq * D, nc = (size_t)Lk * Dc;
        float *X = support_xmalloc(sizeof(float) * nx), *C = fc->self ? NULL : support_xmalloc(sizeof(float) * nc);
        float *dO = support_xmalloc(sizeof(float) * nx);
        support_random(X, nx, seed, -1.0f, 1.0f, FCL_F32);
        if (C)
            support_random(C, nc, seed + 1, -1.0f, 1.0f, FCL_F32);
        support_random(dO, nx, seed + 2, -1.0f, 1.0f, FCL_F32);
        float *w[4], *s[4], *b[4];
        ref_weight rw[4];
        int K[4];
        for (int i = 0; i < 4; i++) {
            K[i] = i == WK || i == WV ? Dc : D;
            w[i] = support_xmalloc(sizeof(float) * (size_t)D * K[i]);
            support_random(w[i], (size_t)D * K[i], seed + 10 + 3 * i, -1.0f, 1.0f, FCL_F32);
            s[i] = NULL;
            if (fc->scaled) {
                s[i] = support_xmalloc(sizeof(float) * D);
                support_random(s[i], D, seed + 11 + 3 * i, 0.5f, 1.5f, FCL_F32);
            }
            b[i] = NULL;
            if ((fc->bias >> i) & 1) {
                b[i] = support_xmalloc(sizeof(float) * D);
                support_random(b[i], D, seed + 12 + 3 * i, -0.5f, 0.5f, FCL_F32);
            }
            rw[i] = (ref_weight){w[i], s[i], b[i]};
        }

        /* Analytic gradients. */
        double *dX = support_xmalloc(sizeof(double) * nx), *dC = support_xmalloc(sizeof(double) * nc);
        double *dw[4], *db[4];
        ref_weight_grad g[4];
        for (int i = 0; i < 4; i++) {
            dw[i] = support_xmalloc(sizeof(double) * (size_t)D * K[i]);
            db[i] = b[i] ? support_xmalloc(sizeof(double) * D) : NULL;
            g[i] = (ref_weight_grad){dw[i], db[i]};
        }
        ref_qkvo_backward(&p, X, C, &rw[WQ], &rw[WK], &rw[WV], &rw[WO], dO, dX, fc->self ? NULL : dC, &g[WQ],
                          &g[WK], &g[WV], &g[WO]);

        /* Float64 parameters of the loss: X, Ctx, dequantised weights, biases. */
        double *Xd = support_xmalloc(sizeof(double) * nx), *Cd = C ? support_xmalloc(sizeof(double) * nc) : NULL;
        for (size_t k = 0; k < nx; k++)
            Xd[k] = X[k];
        for (size_t k = 0; C && k < nc; k++)
            Cd[k] = C[k];
        double *Wd[4], *Bd[4];
        for (int i = 0; i < 4; i++) {
            Wd[i] = support_xmalloc(sizeof(double) * (size_t)D * K[i]);
            for (int n = 0; n < D; n++)
                for (int k = 0; k < K[i]; k++)
                    Wd[i][(size_t)n * K[i] + k] = (double)w[i][(size_t)n * K[i] + k] * (s[i] ? (double)s[i][n] : 1.0);
            Bd[i] = NULL;
            if (b[i]) {
                Bd[i] = support_xmalloc(sizeof(double) * D);
                for (int n = 0; n < D; n++)
                    Bd[i][n] = b[i][n];
            }
        }
        const double *const *cw = (const double *const *)Wd, *const *cb = (const double *const *)Bd;

        /* The loss is the forward's: L == sum(dO * O) with O from ref_qkvo_forward (which rounds
         * Q, K, V to float32, hence the tolerance). */
        double *O = support_xmalloc(sizeof(double) * nx), L0 = 0.0;
        ref_qkvo_forward(&p, X, C, &rw[WQ], &rw[WK], &rw[WV], &rw[WO], O);
        for (size_t k = 0; k < nx; k++)
            L0 += (double)dO[k] * O[k];
        const double L1 = ref_qkvo_loss_d(&p, Xd, Cd, cw, cb, dO);
        cr_expect(fabs(L1 - L0) <= 1e-6 * (1 + fabs(L0)), "%s: loss %.12g, sum(dO * ref_qkvo_forward) %.12g",
                  fc->name, L1, L0);

        fd_param prm[12];
        int np = 0;
        prm[np++] = (fd_param){"dX", Xd, dX, nx};
        if (C)
            prm[np++] = (fd_param){"dCtx", Cd, dC, nc};
        static const char *const wn[4] = {"dWq", "dWk", "dWv", "dWo"}, *const bn[4] = {"dbq", "dbk", "dbv", "dbo"};
        for (int i = 0; i < 4; i++) {
            prm[np++] = (fd_param){wn[i], Wd[i], dw[i], (size_t)D * K[i]};
            if (Bd[i])
                prm[np++] = (fd_param){bn[i], Bd[i], db[i], D};
        }
        const double eps = 1e-6;
        double worst = 0.0;
        size_t zeros = 0;
        for (int t = 0; t < np; t++)
            for (size_t k = 0; k < prm[t].n; k++) {
                const double x = prm[t].x[k];
                prm[t].x[k] = x + eps;
                const double lp = ref_qkvo_loss_d(&p, Xd, Cd, cw, cb, dO);
                prm[t].x[k] = x - eps;
                const double lm = ref_qkvo_loss_d(&p, Xd, Cd, cw, cb, dO);
                prm[t].x[k] = x;
                const double fd = (lp - lm) / (2 * eps), gv = prm[t].g[k];
                const double err = fabs(fd - gv) / (1 + fabs(gv));
                cr_expect(err <= FD_TOL, "%s: %s[%zu] analytic %.12g, finite difference %.12g", fc->name,
                          prm[t].name, k, gv, fd);
                zeros += gv == 0.0;
                if (!(err <= worst))
                    worst = err;
            }
        cr_log_info("%-48s max |fd - g| / (1 + |g|) = %.3g (%zu exact zeros)", fc->name, worst, zeros);

        /* The naive twin in F32 stays near float64 (it is the rule's baseline). */
        {
            float *nX = support_xmalloc(sizeof(float) * nx), *nC = support_xmalloc(sizeof(float) * nc);
            float *nw[4], *nb[4];
            ref_weight_grad_f ng[4];
            for (int i = 0; i < 4; i++) {
                nw[i] = support_xmalloc(sizeof(float) * (size_t)D * K[i]);
                nb[i] = b[i] ? support_xmalloc(sizeof(float) * D) : NULL;
                ng[i] = (ref_weight_grad_f){nw[i], nb[i]};
            }
            ref_qkvo_backward_naive(&p, FCL_F32, FCL_F32, X, C, &rw[WQ], &rw[WK], &rw[WV], &rw[WO], dO, nX,
                                    C ? nC : NULL, &ng[WQ], &ng[WK], &ng[WV], &ng[WO]);
            double e = support_max_err_f(nX, dX, nx);
            if (C)
                e = fmax(e, support_max_err_f(nC, dC, nc));
            for (int i = 0; i < 4; i++) {
                e = fmax(e, support_max_err_f(nw[i], dw[i], (size_t)D * K[i]));
                if (b[i])
                    e = fmax(e, support_max_err_f(nb[i], db[i], D));
            }
            cr_expect(e <= 1e-5, "%s: naive F32 twin is %.3g from float64", fc->name, e);
            free(nX), free(nC);
            for (int i = 0; i < 4; i++)
                free(nw[i]), free(nb[i]);
        }

        free(X), free(C), free(dO), free(dX), free(dC), free(Xd), free(Cd), free(O);
        for (int i = 0; i < 4; i++)
            free(w[i]), free(s[i]), free(b[i]), free(dw[i]), free(db[i]), free(Wd[i]), free(Bd[i]);
    }
}

/* Masked keys, and queries of rows that see no key, get exactly zero gradients in the
 * reference (cross, causal with Lq > Lk: the first rows are empty). */
Test(qkvo_backward_reference, excluded_positions_are_zero)
{
    const int Lq = 5, Lk = 3, D = 4, H = 2, Dc = 3;
    static const float mask[3] = {1.0f, 0.0f, 1.0f};
    ref_qkvo_problem p = {.Lq = Lq, .Lk = Lk, .D = D, .D_ctx = Dc, .H = H};
    p.attn = (ref_attn_problem){.causal = 1, .window_left = -1, .window_right = -1, .key_mask = mask};
    float X[5 * 4], C[3 * 3], dO[5 * 4], w[4][16];
    support_random(X, 20, 1, -1, 1, FCL_F32);
    support_random(C, 9, 2, -1, 1, FCL_F32);
    support_random(dO, 20, 3, -1, 1, FCL_F32);
    ref_weight rw[4];
    for (int i = 0; i < 4; i++) {
        support_random(w[i], 16, 10 + i, -1, 1, FCL_F32);
        rw[i] = (ref_weight){w[i], NULL, NULL};
    }
    double dX[20], dC[9], dw[4][16];
    ref_weight_grad g[4];
    for (int i = 0; i < 4; i++)
        g[i] = (ref_weight_grad){dw[i], NULL};
    ref_qkvo_backward(&p, X, C, &rw[0], &rw[1], &rw[2], &rw[3], dO, dX, dC, &g[0], &g[1], &g[2], &g[3]);
    /* Query i sits at position i - 2 and sees keys j <= i - 2 with mask[j] > 0.5: rows 0, 1 see
     * nothing, so dQ (hence dX) is 0 there; key 1 is masked, so dCtx row 1 is 0. */
    for (int d = 0; d < D; d++)
        cr_expect(dX[d] == 0.0 && dX[D + d] == 0.0, "empty query rows have dX != 0");
    for (int d = 0; d < Dc; d++)
        cr_expect(dC[Dc + d] == 0.0, "masked key row has dCtx[1][%d] = %g", d, dC[Dc + d]);
}

/* ================================================================ 2. the kernel */

typedef struct bcase {
    int Lq, Lk, D, H, Dctx; /* Dctx 0: self-attention (K, V from X; Lk = Lq) */
    fcl_dtype w[4];         /* weight dtypes of wq, wk, wv, wo */
    int bias;               /* which projections have a bias (BQ | BK | BV | BO) */
    int causal, mask;
    float scale;            /* attention scale, 0 = 1/sqrt(D / H) */
    int dw_act;             /* weight gradients in the activations' dtype (else F32) */
    float softcap;          /* 0 = off (the key bias's gradient is then exactly 0) */
} bcase;

static void describe(const bcase *c, fcl_dtype act, char *buf, size_t n)
{
    snprintf(buf, n,
             "act %s %s Lq%d Lk%d D%d H%d Dctx%d w %s/%s/%s/%s bias%s%s%s%s causal%d mask%d scale%g softcap%g dw %s",
             fcl_dtype_name(act), c->Dctx ? "cross" : "self", c->Lq, c->Dctx ? c->Lk : c->Lq, c->D, c->H,
             c->Dctx ? c->Dctx : c->D, fcl_dtype_name(c->w[0]), fcl_dtype_name(c->w[1]),
             fcl_dtype_name(c->w[2]), fcl_dtype_name(c->w[3]), c->bias & BQ ? " q" : "",
             c->bias & BK ? " k" : "", c->bias & BV ? " v" : "", c->bias & BO ? " o" : "", c->causal,
             c->mask, (double)c->scale, (double)c->softcap, c->dw_act ? fcl_dtype_name(act) : "f32");
}

/* The largest err / bound seen by check_grad, and where (logged per table); the same over the
 * bias gradients alone (the key bias's is exactly 0 without softcap, so its error is all
 * rounding). */
static double worst_ratio, worst_bias_ratio;
static char worst_where[480], worst_bias_where[480];

/* Keeps ratio and its place in *worst and where when it is the largest seen. */
static void keep_worst(double ratio, double *worst, char *where, size_t size, const char *name, const char *what,
                       double err, double nerr)
{
    if (!(ratio <= *worst)) {
        *worst = ratio;
        snprintf(where, size, "%s %s: err %.3g naive %.3g", name, what, err, nerr);
    }
}

/* The rule for gradients; reports (cr_expect) and returns whether it holds. */
static int check_grad(const char *name, const char *what, const float *got, const double *ref,
                      const float *naive, size_t n)
{
    const size_t nan = support_count_nan(got, n);
    const double err = support_max_err_f(got, ref, n), nerr = support_max_err_f(naive, ref, n);
    const double bound = support_bound(nerr, 3.0);
    const int ok = nan == 0 && err <= bound;
    keep_worst(err / bound, &worst_ratio, worst_where, sizeof worst_where, name, what, err, nerr);
    if (strncmp(what, "db", 2) == 0)
        keep_worst(err / bound, &worst_bias_ratio, worst_bias_where, sizeof worst_bias_where, name, what, err, nerr);
    cr_expect(ok, "[%s] %s: err %.3g bound %.3g (naive %.3g), NaN %zu of %zu", name, what, err, bound, nerr, nan,
              n);
    return ok;
}

/* Unit roundoff of a storage dtype. */
static double unit_roundoff(fcl_dtype dt)
{
    return dt == FCL_F16 ? ldexp(1.0, -11) : dt == FCL_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -24);
}

/* Second call's accumulated values a2 against twice the first's a1, within the rounding of dt. */
static int check_doubled(const char *name, const char *what, const float *a1, const float *a2, size_t n,
                         fcl_dtype dt)
{
    double amax = 0.0;
    for (size_t i = 0; i < n; i++) { /* not fmax(): GCC 12.2 for aarch64 crashes vectorising that (ICE) */
        const double v = fabs((double)a1[i]);
        if (v > amax)
            amax = v;
    }
    const double u = unit_roundoff(dt);
    size_t bad = 0;
    long first = -1;
    for (size_t i = 0; i < n; i++) {
        const double want = 2.0 * a1[i], tol = 4.0 * u * (fabs(want) + amax) + 1e-30;
        if (!(fabs((double)a2[i] - want) <= tol)) {
            if (first < 0)
                first = (long)i;
            bad++;
        }
    }
    cr_expect(bad == 0, "[%s] %s after a second call is not twice the first in %zu of %zu (first at %ld: %g vs 2 * %g)",
              name, what, bad, n, first, first >= 0 ? (double)a2[first] : 0.0, first >= 0 ? (double)a1[first] : 0.0);
    return bad == 0;
}

static int expect_ok(fcl_context ctx, const char *name, const char *op, fcl_status st)
{
    cr_expect(st == FCL_SUCCESS, "[%s] %s: %s: %s", name, op, fcl_status_string(st), fcl_last_error(ctx));
    return st == FCL_SUCCESS;
}

/* Runs one case (two backward calls); returns 1 when every check holds. */
static int check_case(fcl_context ctx, fcl_dtype act, const bcase *c, uint64_t seed)
{
    char name[400];
    describe(c, act, name, sizeof name);
    const int self = c->Dctx == 0, Lq = c->Lq, Lk = self ? c->Lq : c->Lk, D = c->D;
    const int Dc = self ? D : c->Dctx;
    const size_t nx = (size_t)Lq * D, nc = (size_t)Lk * Dc;
    const fcl_dtype gdt = c->dw_act ? act : FCL_F32;

    float *x = support_xmalloc(sizeof(float) * nx), *cx = self ? NULL : support_xmalloc(sizeof(float) * nc);
    float *dO = support_xmalloc(sizeof(float) * nx);
    support_random(x, nx, seed * 16 + 1, -1.0f, 1.0f, act);
    if (cx)
        support_random(cx, nc, seed * 16 + 2, -1.0f, 1.0f, act);
    support_random(dO, nx, seed * 16 + 5, -1.0f, 1.0f, act);
    const int64_t xs[2] = {Lq, D}, cs[2] = {Lk, Dc}, ms[1] = {Lk};
    fcl_tensor tx = support_tensor(ctx, act, 2, xs, x), tc = cx ? support_tensor(ctx, act, 2, cs, cx) : NULL;
    fcl_tensor tdo = support_tensor(ctx, act, 2, xs, dO);
    fcl_tensor tdx = support_tensor(ctx, act, 2, xs, NULL), tdc = cx ? support_tensor(ctx, act, 2, cs, NULL) : NULL;

    support_weight hw[4];
    int K[4];
    for (int i = 0; i < 4; i++) {
        K[i] = i == WK || i == WV ? Dc : D;
        support_weight_make(ctx, &hw[i], c->w[i], act, D, K[i], (c->bias >> i) & 1, seed * 16 + 6 + 2 * (uint64_t)i);
    }
    ref_weight rw[4];
    fcl_weight fw[4];
    for (int i = 0; i < 4; i++)
        rw[i] = support_weight_ref(&hw[i]), fw[i] = support_weight_fcl(&hw[i]);

    /* Weight gradients, zeroed. */
    fcl_tensor tdw[4], tdb[4];
    fcl_weight_grad fg[4];
    float *zeros = support_xmalloc(sizeof(float) * (size_t)D * (D > Dc ? D : Dc));
    memset(zeros, 0, sizeof(float) * (size_t)D * (D > Dc ? D : Dc));
    for (int i = 0; i < 4; i++) {
        const int64_t ws[2] = {D, K[i]}, bs[1] = {D};
        tdw[i] = support_tensor(ctx, gdt, 2, ws, zeros);
        tdb[i] = hw[i].bias ? support_tensor(ctx, gdt, 1, bs, zeros) : NULL;
        fg[i] = (fcl_weight_grad){tdw[i], tdb[i]};
    }

    /* Key mask [Lk]: 0 and 0.5 drop a key (the test is > 0.5), 0.75 and 1 keep it. */
    float *mask = NULL;
    fcl_tensor tm = NULL;
    if (c->mask == MASK_LK) {
        mask = support_xmalloc(sizeof(float) * (size_t)Lk);
        support_random(mask, (size_t)Lk, seed * 16 + 3, 0.0f, 1.0f, FCL_F32);
        for (int j = 0; j < Lk; j++)
            mask[j] = mask[j] < 0.2f ? 0.0f : mask[j] < 0.3f ? 0.5f : mask[j] < 0.5f ? 0.75f : 1.0f;
        tm = support_tensor(ctx, FCL_F32, 1, ms, mask);
    }
    fcl_attn_params prm = fcl_attn_params_default();
    prm.scale = c->scale;
    prm.causal = c->causal;
    prm.softcap = c->softcap;
    prm.key_mask = tm;

    ref_qkvo_problem p = {.Lq = Lq, .Lk = Lk, .D = D, .D_ctx = Dc, .H = c->H};
    p.attn = (ref_attn_problem){.scale = (double)c->scale, .causal = c->causal, .window_left = -1,
                                .window_right = -1, .softcap = (double)c->softcap, .key_mask = mask};

    /* References. */
    double *rX = support_xmalloc(sizeof(double) * nx), *rC = support_xmalloc(sizeof(double) * nc);
    float *nX = support_xmalloc(sizeof(float) * nx), *nC = support_xmalloc(sizeof(float) * nc);
    double *rw_d[4], *rb_d[4];
    float *nw[4], *nb[4];
    ref_weight_grad rg[4];
    ref_weight_grad_f ng[4];
    for (int i = 0; i < 4; i++) {
        const size_t n = (size_t)D * K[i];
        rw_d[i] = support_xmalloc(sizeof(double) * n);
        nw[i] = support_xmalloc(sizeof(float) * n);
        rb_d[i] = hw[i].bias ? support_xmalloc(sizeof(double) * D) : NULL;
        nb[i] = hw[i].bias ? support_xmalloc(sizeof(float) * D) : NULL;
        rg[i] = (ref_weight_grad){rw_d[i], rb_d[i]};
        ng[i] = (ref_weight_grad_f){nw[i], nb[i]};
    }
    ref_qkvo_backward(&p, x, cx, &rw[WQ], &rw[WK], &rw[WV], &rw[WO], dO, rX, self ? NULL : rC, &rg[WQ], &rg[WK],
                      &rg[WV], &rg[WO]);
    ref_qkvo_backward_naive(&p, act, gdt, x, cx, &rw[WQ], &rw[WK], &rw[WV], &rw[WO], dO, nX, self ? NULL : nC,
                            &ng[WQ], &ng[WK], &ng[WV], &ng[WO]);

    /* Results of call 1 and 2. */
    float *gX[2], *gC[2], *gw[2][4], *gb[2][4];
    for (int r = 0; r < 2; r++) {
        gX[r] = support_xmalloc(sizeof(float) * nx);
        gC[r] = support_xmalloc(sizeof(float) * nc);
        for (int i = 0; i < 4; i++) {
            gw[r][i] = support_xmalloc(sizeof(float) * (size_t)D * K[i]);
            gb[r][i] = support_xmalloc(sizeof(float) * (size_t)D);
        }
    }

    int ok = 1;
    for (int r = 0; r < 2 && ok; r++) {
        support_poison(tdx);
        if (tdc)
            support_poison(tdc);
        cl_event ev = NULL;
        fcl_status st = fcl_attention_qkvo_backward(ctx, &prm, c->H, tx, tc, &fw[WQ], &fw[WK], &fw[WV], &fw[WO], tdo,
                                                    tdx, tdc, &fg[WQ], &fg[WK], &fg[WV], &fg[WO], &ev);
        if (!expect_ok(ctx, name, r ? "fcl_attention_qkvo_backward (second call)" : "fcl_attention_qkvo_backward", st)) {
            ok = 0;
            break;
        }
        cr_expect(ev != NULL, "[%s] qkvo_backward returned no event", name);
        ok &= ev != NULL;
        if (ev)
            clReleaseEvent(ev);
        cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "[%s] fcl_finish: %s", name, fcl_last_error(ctx));
        support_read(tdx, gX[r]);
        if (tdc)
            support_read(tdc, gC[r]);
        for (int i = 0; i < 4; i++) {
            support_read(tdw[i], gw[r][i]);
            if (tdb[i])
                support_read(tdb[i], gb[r][i]);
        }
    }
    if (ok) {
        char what[64];
        ok &= check_grad(name, "dX", gX[0], rX, nX, nx);
        if (!self)
            ok &= check_grad(name, "dCtx", gC[0], rC, nC, nc);
        for (int i = 0; i < 4; i++) {
            snprintf(what, sizeof what, "dW%s", wname[i]);
            ok &= check_grad(name, what, gw[0][i], rw_d[i], nw[i], (size_t)D * K[i]);
            if (hw[i].bias) {
                snprintf(what, sizeof what, "db%s", wname[i]);
                ok &= check_grad(name, what, gb[0][i], rb_d[i], nb[i], (size_t)D);
            }
        }
        /* Second call: dX / dCtx overwritten with the same bits, dw / db doubled. */
        double maxd = 0.0;
        long first = -1;
        size_t nd = support_bit_diff(gX[0], gX[1], nx, &maxd, &first);
        cr_expect(nd == 0, "[%s] dX of the second call differs from the first in %zu of %zu (max %.3g, first %ld): "
                  "not overwritten, or not deterministic", name, nd, nx, maxd, first);
        ok &= nd == 0;
        if (!self) {
            nd = support_bit_diff(gC[0], gC[1], nc, &maxd, &first);
            cr_expect(nd == 0, "[%s] dCtx of the second call differs from the first in %zu of %zu (max %.3g, first %ld)",
                      name, nd, nc, maxd, first);
            ok &= nd == 0;
        }
        for (int i = 0; i < 4; i++) {
            snprintf(what, sizeof what, "dW%s", wname[i]);
            ok &= check_doubled(name, what, gw[0][i], gw[1][i], (size_t)D * K[i], gdt);
            if (hw[i].bias) {
                snprintf(what, sizeof what, "db%s", wname[i]);
                ok &= check_doubled(name, what, gb[0][i], gb[1][i], (size_t)D, gdt);
            }
        }
    }

    /* Third call: fcl_attention_qkvo_forward_save (its O bit-identical to fcl_attention_qkvo_forward's),
     * then fcl_attention_qkvo_backward_saved on zeroed weight gradients: every output bit-identical
     * to the first call's (the same kernels, minus the recompute). */
    if (ok) {
        const int64_t ls[2] = {c->H, Lq}, ks[2] = {Lk, D};
        fcl_tensor to[2] = {support_tensor(ctx, act, 2, xs, NULL), support_tensor(ctx, act, 2, xs, NULL)};
        const fcl_qkvo_saved sv = {support_tensor(ctx, act, 2, xs, NULL), support_tensor(ctx, act, 2, ks, NULL),
                                   support_tensor(ctx, act, 2, ks, NULL), support_tensor(ctx, act, 2, xs, NULL),
                                   support_tensor(ctx, FCL_F32, 2, ls, NULL)};
        for (int i = 0; i < 4; i++) {
            support_write(tdw[i], zeros);
            if (tdb[i])
                support_write(tdb[i], zeros);
        }
        support_poison(tdx);
        if (tdc)
            support_poison(tdc);
        fcl_status st = fcl_attention_qkvo_forward(ctx, &prm, c->H, tx, tc, &fw[WQ], &fw[WK], &fw[WV], &fw[WO], to[0],
                                                   NULL);
        ok &= expect_ok(ctx, name, "fcl_attention_qkvo_forward", st);
        st = fcl_attention_qkvo_forward_save(ctx, &prm, c->H, tx, tc, &fw[WQ], &fw[WK], &fw[WV], &fw[WO], to[1], &sv,
                                             NULL);
        ok &= expect_ok(ctx, name, "fcl_attention_qkvo_forward_save", st);
        st = fcl_attention_qkvo_backward_saved(ctx, &prm, c->H, tx, tc, &fw[WQ], &fw[WK], &fw[WV], &fw[WO], &sv, tdo,
                                               tdx, tdc, &fg[WQ], &fg[WK], &fg[WV], &fg[WO], NULL);
        ok &= expect_ok(ctx, name, "fcl_attention_qkvo_backward_saved", st);
        cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "[%s] fcl_finish: %s", name, fcl_last_error(ctx));
        if (ok) {
            float *o[2] = {support_xmalloc(sizeof(float) * nx), support_xmalloc(sizeof(float) * nx)};
            support_read(to[0], o[0]);
            support_read(to[1], o[1]);
            support_read(tdx, gX[1]);
            if (tdc)
                support_read(tdc, gC[1]);
            const float *got[10] = {o[1], gX[1], tdc ? gC[1] : NULL}, *want[10] = {o[0], gX[0], tdc ? gC[0] : NULL};
            size_t n[10] = {nx, nx, nc};
            const char *what[10] = {"O of forward_save", "dX", "dCtx", "dWq", "dWk", "dWv", "dWo", "dbq", "dbk", "dbv"};
            for (int i = 0; i < 4; i++) {
                support_read(tdw[i], gw[1][i]);
                got[3 + i] = gw[1][i], want[3 + i] = gw[0][i], n[3 + i] = (size_t)D * K[i];
            }
            for (int i = 0; i < 10; i++) {
                double maxd = 0.0;
                long first = -1;
                const size_t nd = got[i] ? support_bit_diff(got[i], want[i], n[i], &maxd, &first) : 0;
                cr_expect(nd == 0, "[%s] %s with saved activations differs from the recompute's in %zu of %zu (max "
                          "%.3g, first %ld)", name, what[i], nd, n[i], maxd, first);
                ok &= nd == 0;
            }
            for (int i = 0; i < 4; i++)
                if (tdb[i]) {
                    double maxd = 0.0;
                    long first = -1;
                    support_read(tdb[i], gb[1][i]);
                    const size_t nd = support_bit_diff(gb[1][i], gb[0][i], (size_t)D, &maxd, &first);
                    cr_expect(nd == 0, "[%s] db%s with saved activations differs from the recompute's in %zu of %d",
                              name, wname[i], nd, D);
                    ok &= nd == 0;
                }
            free(o[0]), free(o[1]);
        }
        fcl_tensor mine[7] = {to[0], to[1], sv.Q, sv.K, sv.V, sv.A, sv.LSE};
        for (int i = 0; i < 7; i++)
            fcl_tensor_release(mine[i]);
    }

    free(x), free(cx), free(dO), free(zeros), free(mask), free(rX), free(rC), free(nX), free(nC);
    for (int i = 0; i < 4; i++) {
        free(rw_d[i]), free(rb_d[i]), free(nw[i]), free(nb[i]);
        support_weight_release(&hw[i]);
        fcl_tensor_release(tdw[i]), fcl_tensor_release(tdb[i]);
    }
    for (int r = 0; r < 2; r++) {
        free(gX[r]), free(gC[r]);
        for (int i = 0; i < 4; i++)
            free(gw[r][i]), free(gb[r][i]);
    }
    fcl_tensor all[] = {tx, tc, tdo, tdx, tdc, tm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    return ok;
}

/*
 * Per activation dtype: every weight dtype (alone and mixed), self- and cross-attention
 * (D_ctx != D, Lq < Lk and Lq > Lk), biases all, none and some, causal (with empty rows when
 * Lq > Lk), a key mask, both together, 2, 3 and 4 heads, odd Lq / Lk (13, 21), head dims of 6
 * to 64, a custom scale, a softcap (the one case where the key bias's gradient is not zero), and
 * weight gradients in F32 and in the activations' dtype.
 */
static void backward_table(fcl_dtype act, uint64_t seed0)
{
    static const bcase cases[] = {
        /* Lq  Lk  D  H Dctx  weights          bias     causal mask      scale  dw_act softcap */
        {13, 0, 24, 2, 0, W4(FCL_F32), BALL, 0, MASK_NONE, 0, DW_F32, 0},
        {13, 21, 24, 3, 10, W4(FCL_F16), BALL, 1, MASK_NONE, 0, DW_F32, 0},
        {21, 13, 32, 4, 10, W4(FCL_BF16), 0, 1, MASK_LK, 0, DW_F32, 0},
        {21, 0, 24, 4, 0, W4(FCL_I8), BQ | BO, 0, MASK_LK, 0, DW_F32, 0},
        {13, 21, 24, 2, 18, WMIX, BK | BV, 0, MASK_LK, 0.3f, DW_ACT, 0},
        {13, 0, 36, 3, 0, WMIX, BALL, 1, MASK_LK, 0, DW_F32, 0},
        {13, 21, 32, 4, 10, W4(FCL_I8), BALL, 1, MASK_LK, 0, DW_ACT, 0},
        /* head dims of 64 and 32: the tensor-core forward recomputes the attention where it runs */
        {70, 0, 128, 2, 0, W4(FCL_F16), BALL, 0, MASK_NONE, 0, DW_ACT, 0},
        {40, 56, 128, 4, 64, WMIX, BALL, 1, MASK_NONE, 0, DW_F32, 0},
        {40, 0, 64, 2, 0, W4(FCL_BF16), BALL, 0, MASK_LK, 0, DW_ACT, 2.0f},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    fcl_context ctx = support_context();
    size_t failed = 0;
    worst_ratio = worst_bias_ratio = 0.0;
    worst_where[0] = worst_bias_where[0] = 0;
    for (size_t i = 0; i < N; i++)
        failed += !check_case(ctx, act, &cases[i], seed0 + i);
    fcl_context_release(ctx);
    cr_log_info("%s: largest err / bound %.3g at [%s]", fcl_dtype_name(act), worst_ratio, worst_where);
    cr_log_info("%s: bias gradients' largest err / bound %.3g at [%s]", fcl_dtype_name(act), worst_bias_ratio,
                worst_bias_where);
    cr_assert(failed == 0, "%zu of %d %s cases failed", failed, (int)N, fcl_dtype_name(act));
}

Test(qkvo_backward, f32) { backward_table(FCL_F32, 100); }
Test(qkvo_backward, f16) { backward_table(FCL_F16, 200); }
Test(qkvo_backward, bf16) { backward_table(FCL_BF16, 300); }

/* The F32 cases with flashcl's own projection kernel forced where CLBlast's SGEMM would run. */
Test(qkvo_backward, f32_own_gemm)
{
    fcl_context ctx = support_context();
    const char *path = fcl_projection_path(ctx, FCL_F32, FCL_F32);
    fcl_context_release(ctx);
    if (strcmp(path, "flashcl") == 0) {
        cr_log_info("f32 projections already run flashcl's kernel here; nothing more to test");
        return;
    }
    setenv("FLASHCL_GEMM", "own", 1);
    backward_table(FCL_F32, 100);
    unsetenv("FLASHCL_GEMM");
}

/* ================================================================ 3. bad input */

/* Base valid problem: F16 activations, D 16, 2 heads, Lq 3, Lk 5, D_ctx 8; wq F32 (bias),
 * wk I8 + scale (bias), wv F16 (no bias), wo BF16 (bias); weight gradients F32, db for q, k,
 * o. self = 1: Ctx NULL, dCtx NULL, wk / wv (and their dw) [D, D]. */
enum { EL_Q = 3, EL_K = 5, ED = 16, EDC = 8, EH = 2 };
static const fcl_dtype e_wdt[4] = {FCL_F32, FCL_I8, FCL_F16, FCL_BF16};
#define EACT FCL_F16

enum { NOUT = 10 }; /* dX, dCtx, dw[4], db[4] */

typedef struct efix {
    fcl_context ctx;
    int self;
    fcl_tensor X, C, dO;
    fcl_tensor w[4], s[4], b[4];
    fcl_tensor out[NOUT];             /* dX, dCtx, dw q k v o, db q k v o */
    fcl_tensor pass_C, pass_dC;       /* what is passed for Ctx and dCtx */
    fcl_weight fw[4];
    fcl_weight_grad fg[4];
    fcl_attn_params prm;
    fcl_tensor extra[8];
    int n_extra;
} efix;

#define E_DX(f) ((f)->out[0])
#define E_DC(f) ((f)->out[1])
#define E_DW(f, i) ((f)->out[2 + (i)])
#define E_DB(f, i) ((f)->out[6 + (i)])
static const char *const out_name[NOUT] = {"dX", "dCtx", "gq.dw", "gk.dw", "gv.dw", "go.dw",
                                           "gq.db", "gk.db", "gv.db", "go.db"};

static fcl_tensor etensor(efix *f, fcl_dtype dt, int ndim, int64_t d0, int64_t d1)
{
    const int64_t shape[2] = {d0, d1};
    return support_tensor_random(f->ctx, dt, ndim, shape, dt == FCL_I8 ? 0 : 77 + (uint64_t)d0 * 31 + (uint64_t)d1);
}

static void efix_init(efix *f, fcl_context ctx, int self)
{
    memset(f, 0, sizeof *f);
    f->ctx = ctx;
    f->self = self;
    const int Lk = self ? EL_Q : EL_K, Dc = self ? ED : EDC;
    f->X = etensor(f, EACT, 2, EL_Q, ED);
    f->C = self ? NULL : etensor(f, EACT, 2, Lk, Dc);
    f->dO = etensor(f, EACT, 2, EL_Q, ED);
    E_DX(f) = etensor(f, EACT, 2, EL_Q, ED);
    E_DC(f) = self ? NULL : etensor(f, EACT, 2, Lk, Dc);
    for (int i = 0; i < 4; i++) {
        const int K = i == WK || i == WV ? Dc : ED;
        f->w[i] = etensor(f, e_wdt[i], 2, ED, K);
        if (e_wdt[i] == FCL_I8) {
            int8_t q[ED * ED];
            for (int k = 0; k < ED * K; k++)
                q[k] = (int8_t)((k * 7) % 11 - 5);
            cr_assert(fcl_tensor_write_raw(f->w[i], q, (size_t)ED * K) == FCL_SUCCESS);
            f->s[i] = etensor(f, FCL_F32, 1, ED, 0);
        }
        E_DW(f, i) = etensor(f, FCL_F32, 2, ED, K);
        if (i != WV) {
            f->b[i] = etensor(f, EACT, 1, ED, 0);
            E_DB(f, i) = etensor(f, FCL_F32, 1, ED, 0);
        }
    }
    f->prm = fcl_attn_params_default();
}

/* Points the passed structs at the current tensors (call after mutating). */
static void efix_bind(efix *f)
{
    f->pass_C = f->C;
    f->pass_dC = E_DC(f);
    for (int i = 0; i < 4; i++) {
        f->fw[i] = (fcl_weight){f->w[i], f->s[i], f->b[i]};
        f->fg[i] = (fcl_weight_grad){E_DW(f, i), E_DB(f, i)};
    }
}

static void efix_fini(efix *f)
{
    fcl_tensor_release(f->X), fcl_tensor_release(f->C), fcl_tensor_release(f->dO);
    for (int i = 0; i < 4; i++)
        fcl_tensor_release(f->w[i]), fcl_tensor_release(f->s[i]), fcl_tensor_release(f->b[i]);
    for (int i = 0; i < NOUT; i++)
        fcl_tensor_release(f->out[i]);
    for (int i = 0; i < f->n_extra; i++)
        fcl_tensor_release(f->extra[i]);
    memset(f, 0, sizeof *f);
}

static fcl_status efix_call(efix *f, cl_event *ev)
{
    return fcl_attention_qkvo_backward(f->ctx, &f->prm, EH, f->X, f->pass_C, &f->fw[WQ], &f->fw[WK], &f->fw[WV],
                                       &f->fw[WO], f->dO, E_DX(f), f->pass_dC, &f->fg[WQ], &f->fg[WK],
                                       &f->fg[WV], &f->fg[WO], ev);
}

static void put(fcl_tensor *slot, fcl_tensor t)
{
    fcl_tensor_release(*slot);
    *slot = t;
}

/* a [ra, ca] at element 0 and b [rb, cb] at element `at` of one new EACT buffer. */
static void share(efix *f, fcl_tensor *a, int64_t ra, int64_t ca, fcl_tensor *b, int64_t rb, int64_t cb, int64_t at)
{
    const int64_t na = ra * ca, nb = at + rb * cb, n = na > nb ? na : nb;
    const int64_t sa[2] = {ra, ca}, sb[2] = {rb, cb};
    fcl_tensor base = support_tensor_random(f->ctx, EACT, 1, &n, 93);
    f->extra[f->n_extra++] = base;
    put(a, support_view(base, 2, sa, NULL, 0));
    put(b, support_view(base, 2, sb, NULL, at));
}

typedef struct ecase {
    const char *what;
    int self;           /* fixture: self-attention */
    fcl_status want;
    const char *tok[3]; /* the message must name one of the '|'-separated words of each */
} ecase;

/* Applies bad case `id` to a valid fixture (binding included). */
static void mutate(efix *f, int id)
{
    efix_bind(f);
    switch (id) {
    case 0: f->fg[WV].db = f->extra[f->n_extra++] = etensor(f, FCL_F32, 1, ED, 0); break; /* db without bias */
    case 1: f->fg[WQ].db = NULL; break;                                           /* bias without db */
    case 2: f->fg[WO].db = NULL; break;
    case 3: f->fw[WK].bias = NULL; break;                                         /* db, bias removed */
    case 4: f->pass_dC = f->extra[f->n_extra++] = etensor(f, EACT, 2, EL_Q, ED); break; /* self + dCtx */
    case 5: f->pass_dC = NULL; break;                                             /* cross, no dCtx */
    case 6: put(&E_DX(f), etensor(f, EACT, 2, EL_Q, ED + 1)); break;
    case 7: put(&E_DX(f), etensor(f, FCL_BF16, 2, EL_Q, ED)); break;
    case 8: put(&E_DC(f), etensor(f, EACT, 2, EL_K, ED)); break;                 /* [Lk, D] not D_ctx */
    case 9: put(&E_DC(f), etensor(f, FCL_F32, 2, EL_K, EDC)); break;
    case 10: put(&E_DW(f, WQ), etensor(f, FCL_F32, 2, ED, ED + 1)); break;
    case 11: put(&E_DW(f, WK), etensor(f, FCL_F32, 2, ED, ED)); break;           /* [D, D] not D_ctx */
    case 12: put(&E_DW(f, WV), etensor(f, FCL_BF16, 2, ED, EDC)); break;         /* neither F32 nor F16 */
    case 13: put(&E_DW(f, WQ), etensor(f, FCL_I8, 2, ED, ED)); break;
    case 14: put(&E_DB(f, WO), etensor(f, FCL_F32, 1, ED + 1, 0)); break;
    case 15: put(&E_DB(f, WK), etensor(f, FCL_F16, 1, ED, 0)); break;            /* db F16, dw F32 */
    case 16: put(&f->dO, etensor(f, EACT, 2, EL_Q + 1, ED)); break;
    case 17: put(&f->dO, etensor(f, FCL_F32, 2, EL_Q, ED)); break;
    case 18: share(f, &E_DX(f), EL_Q, ED, &f->dO, EL_Q, ED, 8); break;          /* dX overlaps dO */
    case 19: share(f, &E_DX(f), EL_Q, ED, &E_DC(f), EL_K, EDC, 16); break;      /* dX overlaps dCtx */
    case 20: put(&E_DX(f), etensor(f, EACT, 2, EL_Q + 1, ED)); break;
    default: break;
    }
    if (id >= 6) /* tensor replacements: rebind */
        efix_bind(f);
}

static const ecase ecases[] = {
    /* 0 */ {"gv.db given, wv has no bias", 0, FCL_ERR_INVALID_ARGUMENT, {"db|gv.db|dbv|bias"}},
    /* 1 */ {"gq.db NULL, wq has a bias", 0, FCL_ERR_INVALID_ARGUMENT, {"db|gq.db|dbq|bias"}},
    /* 2 */ {"go.db NULL, wo has a bias", 0, FCL_ERR_INVALID_ARGUMENT, {"db|go.db|dbo|bias"}},
    /* 3 */ {"gk.db given, wk.bias NULL", 0, FCL_ERR_INVALID_ARGUMENT, {"db|gk.db|dbk|bias"}},
    /* 4 */ {"dCtx given for self-attention", 1, FCL_ERR_INVALID_ARGUMENT, {"dCtx"}},
    /* 5 */ {"dCtx NULL for cross-attention", 0, FCL_ERR_INVALID_ARGUMENT, {"dCtx"}},
    /* 6 */ {"dX [Lq, D+1]", 0, FCL_ERR_SHAPE, {"dX"}},
    /* 7 */ {"dX BF16 with F16 activations", 0, FCL_ERR_DTYPE, {"dX", "bf16"}},
    /* 8 */ {"dCtx [Lk, D]", 0, FCL_ERR_SHAPE, {"dCtx"}},
    /* 9 */ {"dCtx F32 with F16 activations", 0, FCL_ERR_DTYPE, {"dCtx", "f32"}},
    /* 10 */ {"gq.dw [D, D+1]", 0, FCL_ERR_SHAPE, {"gq|dw|dWq|gq.dw"}},
    /* 11 */ {"gk.dw [D, D] with D_ctx 8", 0, FCL_ERR_SHAPE, {"gk|dw|dWk|gk.dw"}},
    /* 12 */ {"gv.dw BF16 (F16 activations)", 0, FCL_ERR_DTYPE, {"gv|dw|dWv|gv.dw", "bf16"}},
    /* 13 */ {"gq.dw I8", 0, FCL_ERR_DTYPE, {"gq|dw|dWq|gq.dw", "i8"}},
    /* 14 */ {"go.db [D+1]", 0, FCL_ERR_SHAPE, {"go|db|dbo|go.db"}},
    /* 15 */ {"gk.db F16 with gk.dw F32", 0, FCL_ERR_DTYPE, {"gk|db|dbk|gk.db"}},
    /* 16 */ {"dO [Lq+1, D]", 0, FCL_ERR_SHAPE, {"dO"}},
    /* 17 */ {"dO F32 with F16 activations", 0, FCL_ERR_DTYPE, {"dO", "f32"}},
    /* 18 */ {"dX overlaps dO", 0, FCL_ERR_INVALID_ARGUMENT, {"dX|dO"}},
    /* 19 */ {"dX overlaps dCtx", 0, FCL_ERR_INVALID_ARGUMENT, {"dX|dCtx"}},
    /* 20 */ {"self: dX [Lq+1, D]", 1, FCL_ERR_SHAPE, {"dX"}},
};

/* Whether msg names one of the '|'-separated words of alts. */
static int names_one_of(const char *msg, const char *alts)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", alts);
    for (char *save = NULL, *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save))
        if (support_has_token(msg, t))
            return 1;
    return 0;
}

/* Every output tensor of the fixture (passed or not) with its poison. */
typedef struct snap {
    fcl_tensor t[NOUT + 8];
    const char *name[NOUT + 8];
    unsigned char *b[NOUT + 8];
    size_t n[NOUT + 8];
    int count;
} snap;

static void snap_take(efix *f, snap *s)
{
    s->count = 0;
    for (int i = 0; i < NOUT; i++)
        if (f->out[i])
            s->t[s->count] = f->out[i], s->name[s->count++] = out_name[i];
    if (f->pass_dC && f->pass_dC != E_DC(f))
        s->t[s->count] = f->pass_dC, s->name[s->count++] = "dCtx (passed)";
    for (int i = 0; i < 4; i++)
        if (f->fg[i].db && f->fg[i].db != E_DB(f, i))
            s->t[s->count] = f->fg[i].db, s->name[s->count++] = out_name[6 + i];
    for (int j = 0; j < s->count; j++)
        free(support_poison_raw(s->t[j], &s->n[j], 11u + (unsigned)j));
    /* Overlapping views share bytes: keep what each holds after all poisoning. */
    for (int j = 0; j < s->count; j++) {
        s->b[j] = support_xmalloc(s->n[j]);
        cr_assert(fcl_tensor_read_raw(s->t[j], s->b[j], s->n[j]) == FCL_SUCCESS);
    }
}

/* Compares every snapped output with its poison; frees the snapshot. */
static int snap_check(snap *s, const char *label)
{
    int ok = 1;
    for (int j = 0; j < s->count; j++) {
        unsigned char *got = support_xmalloc(s->n[j]);
        cr_assert(fcl_tensor_read_raw(s->t[j], got, s->n[j]) == FCL_SUCCESS);
        const int same = memcmp(got, s->b[j], s->n[j]) == 0;
        cr_expect(same, "[%s] %s was written by a rejected call", label, s->name[j]);
        ok &= same;
        free(got);
        free(s->b[j]);
    }
    return ok;
}

static int check_bad(fcl_context ctx, int i)
{
    const ecase *e = &ecases[i];
    char label[160];
    snprintf(label, sizeof label, "bad %d: %s", i, e->what);
    efix f;
    efix_init(&f, ctx, e->self);
    mutate(&f, i);
    snap s;
    snap_take(&f, &s);
    cl_event ev = NULL;
    const fcl_status st = efix_call(&f, &ev);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fcl_last_error(ctx));
    int ok = 1;
    cr_expect(st == e->want, "[%s] fcl_attention_qkvo_backward returned %s, expected %s; message \"%s\"", label,
              fcl_status_string(st), fcl_status_string(e->want), msg);
    ok &= st == e->want;
    cr_expect(ev == NULL, "[%s] a rejected call returned an event", label);
    ok &= ev == NULL;
    if (ev)
        clReleaseEvent(ev);
    support_assert_sentence(msg);
    for (int k = 0; k < 3 && e->tok[k]; k++) {
        const int has = names_one_of(msg, e->tok[k]);
        cr_expect(has, "[%s] message \"%s\" names none of \"%s\"", label, msg, e->tok[k]);
        ok &= has;
    }
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "fcl_finish after a rejected call: %s", fcl_last_error(ctx));
    ok &= snap_check(&s, label);
    efix_fini(&f);
    return ok;
}

/* The valid fixtures succeed (so each bad case fails for its one change), self and cross. */
Test(qkvo_backward_errors, control)
{
    fcl_context ctx = support_context();
    for (int self = 0; self < 2; self++) {
        efix f;
        efix_init(&f, ctx, self);
        efix_bind(&f);
        cl_event ev = NULL;
        fcl_status st = efix_call(&f, &ev);
        cr_expect(st == FCL_SUCCESS, "control (%s): %s: %s", self ? "self" : "cross", fcl_status_string(st),
                  fcl_last_error(ctx));
        cr_expect(st != FCL_SUCCESS || ev != NULL, "control returned no event");
        if (ev)
            clReleaseEvent(ev);
        cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
        efix_fini(&f);
    }
    fcl_context_release(ctx);
}

Test(qkvo_backward_errors, bad_input)
{
    fcl_context ctx = support_context();
    int failed = 0;
    const int n = (int)(sizeof ecases / sizeof ecases[0]);
    for (int i = 0; i < n; i++)
        failed += !check_bad(ctx, i);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%d of %d bad-input cases failed", failed, n);
}
