/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The projection ops against the float64 reference (tests/ref/ref_projection.h), on the
 * FLASHCL_DEVICE device: fcl_project_kv, fcl_attention_qkvo_forward (self- and
 * cross-attention) and fcl_attention_q_with_kv_cached_forward.
 *
 * Rule (DESIGN.md): max |kernel - float64| <= 2 * max |naive - float64| + 1e-5, for O and for
 * the K, V of fcl_project_kv, where "naive" computes in float32 and rounds every stage's output
 * (Q, K, V, attention output, O) to the activation dtype. I8 weights enter both references
 * dequantised (w[n, k] * scale[n]), so the rule measures arithmetic only.
 *
 * Every case runs all three ops: qkvo_forward -> O1; project_kv -> K, V; q_with_kv_cached on
 * those K, V -> O2, which must equal O1 bit for bit (same kernels) and meet the rule on its own.
 * On a device with the wgmma GEMM the 16-bit tables run again with I8 weights converted first.
 * Outputs are NaN-poisoned before each call. Bad input: the exact status, a message naming
 * the argument, outputs byte-identical to their poison, no event.
 *
 * Criterion forks one process per Test and each compiles the programs it uses, so cases are
 * grouped into a few Tests that iterate tables.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_projection.h"
#include "support.h"

enum { WQ = 0, WK = 1, WV = 2, WO = 3 };
enum { BQ = 1, BK = 2, BV = 4, BO = 8, BALL = 15 };
enum { MASK_NONE = 0, MASK_LK = 1 };

#define W4(t) {t, t, t, t}
#define WMIX {FCL_I8, FCL_F16, FCL_BF16, FCL_F32}

typedef struct qcase {
    int Lq, Lk, D, H, Dctx; /* Dctx 0: self-attention (K, V from X; Lk = Lq) */
    fcl_dtype w[4];         /* weight dtypes of wq, wk, wv, wo */
    int bias;               /* which projections have a bias (BQ | BK | BV | BO) */
    int causal, mask;
    float scale;            /* attention scale, 0 = 1/sqrt(D / H) */
} qcase;

static void describe(const qcase *c, fcl_dtype act, char *buf, size_t n)
{
    snprintf(buf, n, "act %s %s Lq%d Lk%d D%d H%d Dctx%d w %s/%s/%s/%s bias%s%s%s%s causal%d mask%d scale%g",
             fcl_dtype_name(act), c->Dctx ? "cross" : "self", c->Lq, c->Dctx ? c->Lk : c->Lq, c->D, c->H,
             c->Dctx ? c->Dctx : c->D, fcl_dtype_name(c->w[0]), fcl_dtype_name(c->w[1]),
             fcl_dtype_name(c->w[2]), fcl_dtype_name(c->w[3]), c->bias & BQ ? " q" : "",
             c->bias & BK ? " k" : "", c->bias & BV ? " v" : "", c->bias & BO ? " o" : "",
             c->causal, c->mask, (double)c->scale);
}


/* ---------------------------------------------------------------- checks */

/* The rule for one output; reports (cr_expect) and returns whether it holds. */
static int check_out(const char *name, const char *what, const float *got, const double *ref,
                     const float *naive, size_t n)
{
    const size_t nan = support_count_nan(got, n);
    const double err = support_max_err_f(got, ref, n), nerr = support_max_err_f(naive, ref, n);
    const int ok = nan == 0 && support_within(err, nerr, 2.0);
    cr_expect(ok, "[%s] %s: err %.3g bound %.3g (naive %.3g), NaN %zu of %zu", name, what, err,
              2.0 * nerr + 1e-5, nerr, nan, n);
    return ok;
}

static int expect_ok(fcl_context ctx, const char *name, const char *op, fcl_status st)
{
    cr_expect(st == FCL_SUCCESS, "[%s] %s: %s: %s", name, op, fcl_status_string(st), fcl_last_error(ctx));
    return st == FCL_SUCCESS;
}

/* Runs one case through the three ops; returns 1 when every check holds. */
static int check_case(fcl_context ctx, fcl_dtype act, const qcase *c, uint64_t seed)
{
    char name[400];
    describe(c, act, name, sizeof name);
    const int self = c->Dctx == 0, Lq = c->Lq, Lk = self ? c->Lq : c->Lk, D = c->D;
    const int Dc = self ? D : c->Dctx;
    const size_t nx = (size_t)Lq * D, nc = (size_t)Lk * Dc, nk = (size_t)Lk * D;

    float *x = support_xmalloc(sizeof(float) * nx), *cx = self ? NULL : support_xmalloc(sizeof(float) * nc);
    support_random(x, nx, seed * 16 + 1, -1.0f, 1.0f, act);
    if (cx)
        support_random(cx, nc, seed * 16 + 2, -1.0f, 1.0f, act);
    const int64_t xs[2] = {Lq, D}, cs[2] = {Lk, Dc}, ks[2] = {Lk, D}, ms[1] = {Lk};
    fcl_tensor tx = support_tensor(ctx, act, 2, xs, x), tc = cx ? support_tensor(ctx, act, 2, cs, cx) : NULL;
    fcl_tensor to1 = support_tensor(ctx, act, 2, xs, NULL), to2 = support_tensor(ctx, act, 2, xs, NULL);
    fcl_tensor tk = support_tensor(ctx, act, 2, ks, NULL), tv = support_tensor(ctx, act, 2, ks, NULL);

    support_weight hw[4];
    for (int i = 0; i < 4; i++)
        support_weight_make(ctx, &hw[i], c->w[i], act, D, i == WK || i == WV ? Dc : D, (c->bias >> i) & 1,
                    seed * 16 + 4 + 3 * (uint64_t)i);
    ref_weight rw[4];
    fcl_weight fw[4];
    for (int i = 0; i < 4; i++)
        rw[i] = support_weight_ref(&hw[i]), fw[i] = support_weight_fcl(&hw[i]);

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
    prm.key_mask = tm;

    ref_qkvo_problem p = {.Lq = Lq, .Lk = Lk, .D = D, .D_ctx = Dc, .H = c->H};
    p.attn = (ref_attn_problem){.scale = (double)c->scale, .causal = c->causal, .window_left = -1,
                                .window_right = -1, .key_mask = mask};

    /* References. */
    const float *chost = self ? x : cx;
    double *O64 = support_xmalloc(sizeof(double) * nx), *K64 = support_xmalloc(sizeof(double) * nk);
    double *V64 = support_xmalloc(sizeof(double) * nk), *O64b = support_xmalloc(sizeof(double) * nx);
    float *On = support_xmalloc(sizeof(float) * nx), *Onb = support_xmalloc(sizeof(float) * nx);
    float *Kn = support_xmalloc(sizeof(float) * nk), *Vn = support_xmalloc(sizeof(float) * nk);
    ref_qkvo_forward(&p, x, cx, &rw[WQ], &rw[WK], &rw[WV], &rw[WO], O64);
    ref_qkvo_forward_naive(&p, act, x, cx, &rw[WQ], &rw[WK], &rw[WV], &rw[WO], On, Kn, Vn);
    ref_linear(Lk, D, Dc, chost, &rw[WK], K64);
    ref_linear(Lk, D, Dc, chost, &rw[WV], V64);

    float *o1 = support_xmalloc(sizeof(float) * nx), *o2 = support_xmalloc(sizeof(float) * nx);
    float *k = support_xmalloc(sizeof(float) * nk), *v = support_xmalloc(sizeof(float) * nk);
    int ok = 1;

    /* 1. The whole block. */
    support_poison(to1);
    cl_event ev = NULL;
    fcl_status st = fcl_attention_qkvo_forward(ctx, &prm, c->H, tx, tc, &fw[WQ], &fw[WK], &fw[WV], &fw[WO], to1, &ev);
    int ok1 = expect_ok(ctx, name, "fcl_attention_qkvo_forward", st);
    if (ok1) {
        cr_expect(ev != NULL, "[%s] qkvo_forward returned no event", name);
        ok1 = ev != NULL;
        if (ev)
            clReleaseEvent(ev);
        cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "[%s] fcl_finish: %s", name, fcl_last_error(ctx));
        support_read(to1, o1);
        ok1 &= check_out(name, "qkvo_forward O", o1, O64, On, nx);
    }
    ok &= ok1;

    /* 2. K and V once (fcl_project_kv). */
    support_poison(tk);
    support_poison(tv);
    st = fcl_project_kv(ctx, self ? tx : tc, &fw[WK], &fw[WV], tk, tv, NULL);
    int ok2 = expect_ok(ctx, name, "fcl_project_kv", st);
    if (ok2) {
        support_read(tk, k);
        support_read(tv, v);
        ok2 &= check_out(name, "project_kv K", k, K64, Kn, nk);
        ok2 &= check_out(name, "project_kv V", v, V64, Vn, nk);
    }
    ok &= ok2;

    /* 3. The block on those K, V: bit-identical to 1, and within the rule on its own. */
    if (ok2) {
        support_poison(to2);
        st = fcl_attention_q_with_kv_cached_forward(ctx, &prm, c->H, tx, tk, tv, &fw[WQ], &fw[WO], to2, NULL);
        int ok3 = expect_ok(ctx, name, "fcl_attention_q_with_kv_cached_forward", st);
        if (ok3) {
            support_read(to2, o2);
            ref_q_with_kv_forward(&p, x, k, v, &rw[WQ], &rw[WO], O64b);
            ref_q_with_kv_forward_naive(&p, act, x, k, v, &rw[WQ], &rw[WO], Onb);
            ok3 &= check_out(name, "q_with_kv_cached O", o2, O64b, Onb, nx);
            if (ok1) {
                double maxd = 0.0;
                long first = -1;
                size_t nd = support_bit_diff(o1, o2, nx, &maxd, &first);
                cr_expect(nd == 0,
                          "[%s] q_with_kv_cached O differs from qkvo_forward O in %zu of %zu elements "
                          "(max |diff| %.3g, first at %ld)",
                          name, nd, nx, maxd, first);
                ok3 &= nd == 0;
            }
        }
        ok &= ok3;
    }

    free(x), free(cx), free(mask), free(O64), free(K64), free(V64), free(O64b), free(On), free(Onb);
    free(Kn), free(Vn), free(o1), free(o2), free(k), free(v);
    for (int i = 0; i < 4; i++)
        support_weight_release(&hw[i]);
    fcl_tensor all[] = {tx, tc, to1, to2, tk, tv, tm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    return ok;
}

/* ---------------------------------------------------------------- accuracy tables */

/*
 * Per activation dtype: every weight dtype, self- and cross-attention (D_ctx != D), biases all,
 * none and some, causal (Lq < Lk, Lq > Lk with empty rows, Lq == Lk), a key mask, both alone and
 * together, head dims 16 (D 64 / 4), 32 (D 96 / 3, D 64 / 2), 8 (D 40 / 5), a custom scale, and
 * a single query row.
 */
static void qkvo_table(fcl_dtype act, uint64_t seed0)
{
    static const qcase cases[] = {
        /* Lq  Lk  D  H Dctx  weights             bias     causal mask      scale */
        {37, 0, 64, 4, 0, W4(FCL_F32), BALL, 0, MASK_NONE, 0},
        {37, 0, 96, 3, 0, W4(FCL_F16), 0, 1, MASK_NONE, 0},
        {37, 53, 64, 4, 40, W4(FCL_BF16), BALL, 0, MASK_LK, 0},
        {37, 53, 96, 3, 40, W4(FCL_I8), BALL, 1, MASK_LK, 0},
        {37, 0, 64, 4, 0, W4(FCL_I8), 0, 0, MASK_LK, 0},
        {53, 37, 64, 4, 40, W4(FCL_F32), BQ | BV, 1, MASK_NONE, 0},
        {37, 53, 96, 3, 40, WMIX, BK | BO, 0, MASK_NONE, 0.3f},
        {1, 53, 64, 2, 40, W4(FCL_F16), BALL, 1, MASK_LK, 0},
        {29, 0, 40, 5, 0, WMIX, BALL, 1, MASK_LK, 0},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    fcl_context ctx = support_context();
    size_t failed = 0;
    for (size_t i = 0; i < N; i++)
        failed += !check_case(ctx, act, &cases[i], seed0 + i);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%zu of %d %s cases failed", failed, (int)N, fcl_dtype_name(act));
}

Test(qkvo, f32) { qkvo_table(FCL_F32, 100); }

/* The same F32 cases with flashcl's own projection kernel forced where CLBlast's SGEMM would
 * run (fcl_projection_path "clblast-sgemm"), so both paths are tested on such devices. */
Test(qkvo, f32_own_gemm)
{
    fcl_context ctx = support_context();
    const char *path = fcl_projection_path(ctx, FCL_F32, FCL_F32);
    setenv("FLASHCL_GEMM", "own", 1);
    cr_assert_str_eq(fcl_projection_path(ctx, FCL_F32, FCL_F32), "flashcl");
    fcl_context_release(ctx);
    cr_log_info("default f32 projection path: %s; forcing flashcl's kernel", path);
    qkvo_table(FCL_F32, 100);
    unsetenv("FLASHCL_GEMM");
}
Test(qkvo, f16) { qkvo_table(FCL_F16, 200); }
Test(qkvo, bf16) { qkvo_table(FCL_BF16, 300); }

/* The 16-bit tables with the forward GEMMs of I8 weights on weights converted first (the wgmma
 * GEMM's route for long GEMMs, here at every length; skipped where there is no such route). */
static void qkvo_converted(fcl_dtype act, uint64_t seed0)
{
    support_force_i8_conversion(act);
    qkvo_table(act, seed0);
}
Test(qkvo, f16_i8_converted) { qkvo_converted(FCL_F16, 400); }
Test(qkvo, bf16_i8_converted) { qkvo_converted(FCL_BF16, 500); }

/* ---------------------------------------------------------------- bad input */

/* Base valid problem: F16 activations, D 16, 2 heads, Lq 3, Lk 5, D_ctx 8; wq F32 (bias),
 * wk I8 + scale (bias), wv F16 (no bias), wo BF16 (bias). */
enum { EL_Q = 3, EL_K = 5, ED = 16, EDC = 8, EH = 2 };
static const fcl_dtype e_wdt[4] = {FCL_F32, FCL_I8, FCL_F16, FCL_BF16};
#define EACT FCL_F16

enum { OP_QKVO = 0, OP_KV = 1, OP_CACHED = 2 };
static const char *const op_name[3] = {"fcl_attention_qkvo_forward", "fcl_project_kv",
                                       "fcl_attention_q_with_kv_cached_forward"};

typedef struct efix {
    fcl_context ctx;
    fcl_tensor X, C, O, K, V;         /* K, V: outputs of project_kv, inputs of the cached op */
    fcl_tensor w[4], s[4], b[4];
    fcl_weight fw[4];
    const fcl_weight *pw[4];          /* what is passed (NULL-able) */
    int heads;
    int self;                         /* qkvo: pass Ctx = NULL */
    fcl_attn_params prm;
    fcl_tensor extra[8];              /* tensors owned by the fixture besides the above */
    int n_extra;
} efix;

static fcl_tensor etensor(efix *f, fcl_dtype dt, int ndim, int64_t d0, int64_t d1)
{
    const int64_t shape[2] = {d0, d1};
    return support_tensor_random(f->ctx, dt, ndim, shape, dt == FCL_I8 ? 0 : 77 + (uint64_t)d0 * 31 + (uint64_t)d1);
}

static void efix_init(efix *f, fcl_context ctx)
{
    memset(f, 0, sizeof *f);
    f->ctx = ctx;
    f->X = etensor(f, EACT, 2, EL_Q, ED);
    f->C = etensor(f, EACT, 2, EL_K, EDC);
    f->O = etensor(f, EACT, 2, EL_Q, ED);
    f->K = etensor(f, EACT, 2, EL_K, ED);
    f->V = etensor(f, EACT, 2, EL_K, ED);
    for (int i = 0; i < 4; i++) {
        const int K = i == WK || i == WV ? EDC : ED;
        f->w[i] = etensor(f, e_wdt[i], 2, ED, K);
        if (e_wdt[i] == FCL_I8) {
            const int8_t q[ED * EDC] = {1, -2, 3, 4, -5, 6, 7, -8};
            cr_assert(fcl_tensor_write_raw(f->w[i], q, sizeof q) == FCL_SUCCESS);
            f->s[i] = etensor(f, FCL_F32, 1, ED, 0);
        }
        if (i != WV)
            f->b[i] = etensor(f, EACT, 1, ED, 0);
    }
    f->heads = EH;
    f->prm = fcl_attn_params_default();
}

/* Re-points fw/pw at the current tensors (call after mutating w/s/b). */
static void efix_bind(efix *f)
{
    for (int i = 0; i < 4; i++) {
        f->fw[i] = (fcl_weight){f->w[i], f->s[i], f->b[i]};
        f->pw[i] = &f->fw[i];
    }
}

static void efix_fini(efix *f)
{
    fcl_tensor all[] = {f->X, f->C, f->O, f->K, f->V};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    for (int i = 0; i < 4; i++)
        fcl_tensor_release(f->w[i]), fcl_tensor_release(f->s[i]), fcl_tensor_release(f->b[i]);
    for (int i = 0; i < f->n_extra; i++)
        fcl_tensor_release(f->extra[i]);
    memset(f, 0, sizeof *f);
}

static fcl_status efix_call(efix *f, int op, cl_event *ev)
{
    switch (op) {
    case OP_QKVO:
        return fcl_attention_qkvo_forward(f->ctx, &f->prm, f->heads, f->X, f->self ? NULL : f->C, f->pw[WQ],
                                          f->pw[WK], f->pw[WV], f->pw[WO], f->O, ev);
    case OP_KV:
        return fcl_project_kv(f->ctx, f->C, f->pw[WK], f->pw[WV], f->K, f->V, ev);
    default:
        return fcl_attention_q_with_kv_cached_forward(f->ctx, &f->prm, f->heads, f->X, f->K, f->V, f->pw[WQ],
                                                      f->pw[WO], f->O, ev);
    }
}

/* Replaces *slot (releasing the old tensor). */
static void put(fcl_tensor *slot, fcl_tensor t)
{
    fcl_tensor_release(*slot);
    *slot = t;
}

/* Two [rows, cols] views of one new buffer, `shift` rows apart (overlapping when shift < rows);
 * the buffer's base is kept by the fixture. */
static void overlapping_pair(efix *f, int64_t rows, int64_t cols, int64_t shift, fcl_tensor *a, fcl_tensor *b)
{
    const int64_t n = (rows + shift) * cols, shape[2] = {rows, cols};
    fcl_tensor base = support_tensor_random(f->ctx, EACT, 1, &n, 91);
    fcl_tensor va = support_view(base, 2, shape, NULL, 0), vb = support_view(base, 2, shape, NULL, shift * cols);
    f->extra[f->n_extra++] = base;
    put(a, va);
    put(b, vb);
}

/* a [ra, ca] at element 0 and b [rb, cb] at element `at` of one new F16 buffer (a must be F16
 * and b's dtype F16 too); overlapping when at < ra * ca. */
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
    int op;
    fcl_status want;
    const char *tok[3]; /* tokens the message must name (NULL-terminated) */
} ecase;

/* Applies bad case `id` to a valid fixture. */
static void mutate(efix *f, int id)
{
    switch (id) {
    case 0: put(&f->w[WQ], etensor(f, FCL_F32, 2, ED, ED + 1)); break;          /* wq [D, D+1] */
    case 1: put(&f->w[WQ], etensor(f, FCL_F32, 2, ED + 2, ED)); break;          /* wq [D+2, D] */
    case 2: put(&f->w[WK], etensor(f, FCL_I8, 2, ED, EDC + 1)); break;          /* wk K != D_ctx */
    case 3: put(&f->w[WV], etensor(f, FCL_F16, 2, ED, ED)); break;              /* wv K = D != D_ctx */
    case 4: put(&f->w[WO], etensor(f, FCL_BF16, 2, ED, EDC)); break;            /* wo [D, D_ctx] */
    case 5: put(&f->s[WK], NULL); break;                                        /* I8 without scale */
    case 6: put(&f->s[WQ], etensor(f, FCL_F32, 1, ED, 0)); break;               /* float w + scale */
    case 7: put(&f->s[WK], etensor(f, FCL_F32, 1, ED - 1, 0)); break;           /* scale [N-1] */
    case 8: put(&f->s[WK], etensor(f, FCL_F16, 1, ED, 0)); break;               /* scale F16 */
    case 9: put(&f->b[WQ], etensor(f, EACT, 1, ED + 1, 0)); break;              /* bias [N+1] */
    case 10: put(&f->b[WO], etensor(f, FCL_F32, 1, ED, 0)); break;             /* bias F32, acts F16 */
    case 11: f->heads = 3; break;                                               /* 16 % 3 != 0 */
    case 12: put(&f->C, etensor(f, FCL_F32, 2, EL_K, EDC)); break;              /* Ctx F32, X F16 */
    case 13: overlapping_pair(f, EL_Q, ED, 1, &f->X, &f->O); break;            /* O overlaps X */
    case 14: put(&f->w[WK], etensor(f, FCL_I8, 2, ED, EDC + 1)); break;         /* project_kv wk */
    case 15: put(&f->s[WK], NULL); break;                                       /* project_kv I8 no scale */
    case 16: put(&f->b[WK], etensor(f, FCL_BF16, 1, ED, 0)); break;             /* bias BF16, acts F16 */
    case 17: put(&f->K, etensor(f, EACT, 2, EL_K, ED + 1)); break;              /* K [Lk, D+1] */
    case 18: put(&f->V, etensor(f, FCL_F32, 2, EL_K, ED)); break;               /* V F32, Ctx F16 */
    case 19: overlapping_pair(f, EL_K, ED, 2, &f->K, &f->V); break;            /* K overlaps V */
    case 20: put(&f->K, etensor(f, FCL_F32, 2, EL_K, ED)); break;               /* cached K F32 */
    case 21: put(&f->V, etensor(f, EACT, 2, EL_K + 1, ED)); break;              /* cached V Lk+1 */
    case 22: f->heads = 5; break;                                               /* cached 16 % 5 */
    case 23: overlapping_pair(f, EL_Q, ED, 1, &f->X, &f->O); break;            /* cached O overlaps X */
    case 24: f->pw[WQ] = NULL; return;                                          /* NULL weight */
    case 25: put(&f->w[WV], NULL); break;                                       /* NULL w */
    case 26: put(&f->w[WQ], etensor(f, FCL_I32, 2, ED, ED)); break;             /* I32 weight */
    case 27: f->heads = 0; break;                                               /* no heads */
    case 28: f->self = 1; break; /* self-attention with wk, wv [D, D_ctx] != [D, D] */
    case 29: put(&f->X, etensor(f, EACT, 2, EL_Q, ED + 2)); break;              /* X [Lq, D+2] */
    case 30: put(&f->O, etensor(f, EACT, 2, EL_Q + 1, ED)); break;              /* O [Lq+1, D] */
    case 31: put(&f->O, etensor(f, FCL_BF16, 2, EL_Q, ED)); break;              /* O BF16, X F16 */
    case 32: f->extra[f->n_extra++] = etensor(f, FCL_F32, 1, EL_K + 1, 0);
             f->prm.key_mask = f->extra[f->n_extra - 1]; break;                 /* mask [Lk+1] */
    case 33: share(f, &f->O, EL_Q, ED, &f->C, EL_K, EDC, 8); break;            /* O overlaps Ctx */
    case 34: share(f, &f->O, EL_Q, ED, &f->w[WV], ED, EDC, 40); break;        /* O overlaps wv.w */
    case 35: share(f, &f->K, EL_K, ED, &f->C, EL_K, EDC, 30); break;          /* K overlaps Ctx */
    case 36: share(f, &f->O, EL_Q, ED, &f->K, EL_K, ED, 20); break;           /* O overlaps K */
    case 37: put(&f->K, etensor(f, EACT, 2, EL_K, ED + 2)); break;              /* cached K [Lk, D+2] */
    case 38: put(&f->w[WV], etensor(f, FCL_I8, 2, ED, EDC));                  /* I8 wv, F16 scale */
             put(&f->s[WV], etensor(f, FCL_F16, 1, ED, 0)); break;
    default: break;
    }
    efix_bind(f);
}

static const ecase ecases[] = {
    /* 0 */ {"wq.w [D, D+1]", OP_QKVO, FCL_ERR_SHAPE, {"wq", "17"}},
    /* 1 */ {"wq.w [D+2, D]", OP_QKVO, FCL_ERR_SHAPE, {"wq", "18"}},
    /* 2 */ {"wk.w [D, D_ctx+1]", OP_QKVO, FCL_ERR_SHAPE, {"wk", "9"}},
    /* 3 */ {"wv.w [D, D] with D_ctx 8", OP_QKVO, FCL_ERR_SHAPE, {"wv"}},
    /* 4 */ {"wo.w [D, D_ctx]", OP_QKVO, FCL_ERR_SHAPE, {"wo"}},
    /* 5 */ {"I8 wk without scale", OP_QKVO, FCL_ERR_INVALID_ARGUMENT, {"wk", "scale"}},
    /* 6 */ {"F32 wq with a scale", OP_QKVO, FCL_ERR_INVALID_ARGUMENT, {"wq", "scale"}},
    /* 7 */ {"wk.scale [N-1]", OP_QKVO, FCL_ERR_SHAPE, {"wk", "scale", "15"}},
    /* 8 */ {"wk.scale F16", OP_QKVO, FCL_ERR_DTYPE, {"wk", "scale", "f16"}},
    /* 9 */ {"wq.bias [N+1]", OP_QKVO, FCL_ERR_SHAPE, {"wq", "bias", "17"}},
    /* 10 */ {"wo.bias F32 with F16 activations", OP_QKVO, FCL_ERR_DTYPE, {"wo", "bias", "f32"}},
    /* 11 */ {"num_heads 3 with D 16", OP_QKVO, FCL_ERR_SHAPE, {"3", "16"}},
    /* 12 */ {"Ctx F32 with X F16", OP_QKVO, FCL_ERR_DTYPE, {"Ctx", "f32"}},
    /* 13 */ {"O overlaps X", OP_QKVO, FCL_ERR_INVALID_ARGUMENT, {"O", "overlaps"}},
    /* 14 */ {"project_kv wk.w [D, D_ctx+1]", OP_KV, FCL_ERR_SHAPE, {"wk", "9"}},
    /* 15 */ {"project_kv I8 wk without scale", OP_KV, FCL_ERR_INVALID_ARGUMENT, {"wk", "scale"}},
    /* 16 */ {"project_kv wk.bias BF16 with F16 Ctx", OP_KV, FCL_ERR_DTYPE, {"wk", "bias", "bf16"}},
    /* 17 */ {"project_kv K [Lk, D+1] (V, wk, wv agree on D 16)", OP_KV, FCL_ERR_SHAPE, {"K", "17"}},
    /* 18 */ {"project_kv V F32 with F16 Ctx", OP_KV, FCL_ERR_DTYPE, {"V", "f32"}},
    /* 19 */ {"project_kv K overlaps V", OP_KV, FCL_ERR_INVALID_ARGUMENT, {"K", "V"}},
    /* 20 */ {"cached K F32 with X F16", OP_CACHED, FCL_ERR_DTYPE, {"K", "f32"}},
    /* 21 */ {"cached V [Lk+1, D]", OP_CACHED, FCL_ERR_SHAPE, {"V", "6"}},
    /* 22 */ {"cached num_heads 5 with D 16", OP_CACHED, FCL_ERR_SHAPE, {"5", "16"}},
    /* 23 */ {"cached O overlaps X", OP_CACHED, FCL_ERR_INVALID_ARGUMENT, {"O", "overlaps"}},
    /* 24 */ {"wq NULL", OP_QKVO, FCL_ERR_INVALID_ARGUMENT, {"wq"}},
    /* 25 */ {"wv.w NULL", OP_KV, FCL_ERR_INVALID_ARGUMENT, {"wv"}},
    /* 26 */ {"wq.w I32", OP_QKVO, FCL_ERR_DTYPE, {"wq", "i32"}},
    /* 27 */ {"num_heads 0", OP_QKVO, FCL_ERR_INVALID_ARGUMENT, {"num_heads"}},
    /* 28 */ {"self-attention with wk [D, D_ctx]", OP_QKVO, FCL_ERR_SHAPE, {"wk"}},
    /* 29 */ {"X [Lq, D+2] (O, wq, wo, wk agree on D 16)", OP_QKVO, FCL_ERR_SHAPE, {"X", "18"}},
    /* 30 */ {"O [Lq+1, D]", OP_QKVO, FCL_ERR_SHAPE, {"O"}},
    /* 31 */ {"O BF16 with X F16", OP_QKVO, FCL_ERR_DTYPE, {"O", "bf16"}},
    /* 32 */ {"key_mask [Lk+1]", OP_QKVO, FCL_ERR_SHAPE, {"key_mask"}},
    /* 33 */ {"O overlaps Ctx", OP_QKVO, FCL_ERR_INVALID_ARGUMENT, {"O", "overlaps"}},
    /* 34 */ {"O overlaps wv.w", OP_QKVO, FCL_ERR_INVALID_ARGUMENT, {"O", "overlaps"}},
    /* 35 */ {"project_kv K overlaps Ctx", OP_KV, FCL_ERR_INVALID_ARGUMENT, {"K", "overlaps"}},
    /* 36 */ {"cached O overlaps K", OP_CACHED, FCL_ERR_INVALID_ARGUMENT, {"O", "overlaps"}},
    /* 37 */ {"cached K [Lk, D+2]", OP_CACHED, FCL_ERR_SHAPE, {"K", "18"}},
    /* 38 */ {"project_kv wv.scale F16", OP_KV, FCL_ERR_DTYPE, {"wv", "scale"}},
};

/* The outputs' bytes (O, K, V) before a call, to compare after. */
typedef struct snap {
    unsigned char *b[3];
    size_t n[3];
} snap;

static fcl_tensor *snap_slot(efix *f, int i) { return i == 0 ? &f->O : i == 1 ? &f->K : &f->V; }

/* Runs bad case i on a fresh fixture; returns 1 when every check holds. */
static int check_bad(fcl_context ctx, int i)
{
    const ecase *e = &ecases[i];
    efix f;
    efix_init(&f, ctx);
    efix_bind(&f);
    mutate(&f, i);
    /* Poison every output, then keep what they hold (overlapping views share bytes). */
    snap s;
    for (int j = 0; j < 3; j++)
        free(support_poison_raw(*snap_slot(&f, j), &s.n[j], 5u + (unsigned)j));
    for (int j = 0; j < 3; j++) {
        s.b[j] = support_xmalloc(s.n[j]);
        cr_assert(fcl_tensor_read_raw(*snap_slot(&f, j), s.b[j], s.n[j]) == FCL_SUCCESS);
    }
    cl_event ev = NULL;
    const fcl_status st = efix_call(&f, e->op, &ev);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fcl_last_error(ctx));
    int ok = 1;
    cr_expect(st == e->want, "[bad %d: %s] %s returned %s, expected %s; message \"%s\"", i, e->what,
              op_name[e->op], fcl_status_string(st), fcl_status_string(e->want), msg);
    ok &= st == e->want;
    cr_expect(ev == NULL, "[bad %d: %s] a rejected call returned an event", i, e->what);
    ok &= ev == NULL;
    if (ev)
        clReleaseEvent(ev);
    support_assert_sentence(msg);
    for (int k = 0; k < 3 && e->tok[k]; k++) {
        const int has = support_has_token(msg, e->tok[k]);
        cr_expect(has, "[bad %d: %s] message \"%s\" does not name \"%s\"", i, e->what, msg, e->tok[k]);
        ok &= has;
    }
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "fcl_finish after a rejected call: %s", fcl_last_error(ctx));
    for (int j = 0; j < 3; j++) {
        unsigned char *got = support_xmalloc(s.n[j]);
        cr_assert(fcl_tensor_read_raw(*snap_slot(&f, j), got, s.n[j]) == FCL_SUCCESS);
        const int same = memcmp(got, s.b[j], s.n[j]) == 0;
        cr_expect(same, "[bad %d: %s] %s was written by a rejected call", i, e->what, j == 0 ? "O" : j == 1 ? "K" : "V");
        ok &= same;
        free(got);
        free(s.b[j]);
    }
    efix_fini(&f);
    return ok;
}

/* The valid fixture succeeds for each op (so each bad case fails for its one change). */
Test(qkvo_errors, control)
{
    fcl_context ctx = support_context();
    for (int op = 0; op < 3; op++)
        for (int self = 0; self < (op == OP_QKVO ? 2 : 1); self++) {
            efix f;
            efix_init(&f, ctx);
            if (self) { /* self-attention needs wk, wv [D, D] */
                put(&f.w[WK], etensor(&f, FCL_I8, 2, ED, ED));
                put(&f.w[WV], etensor(&f, FCL_F16, 2, ED, ED));
                f.self = 1;
            }
            efix_bind(&f);
            cl_event ev = NULL;
            fcl_status st = efix_call(&f, op, &ev);
            cr_expect(st == FCL_SUCCESS, "control %s%s: %s: %s", op_name[op], self ? " (self)" : "",
                      fcl_status_string(st), fcl_last_error(ctx));
            cr_expect(st != FCL_SUCCESS || ev != NULL, "control %s returned no event", op_name[op]);
            if (ev)
                clReleaseEvent(ev);
            cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
            efix_fini(&f);
        }
    fcl_context_release(ctx);
}

Test(qkvo_errors, bad_input)
{
    fcl_context ctx = support_context();
    int failed = 0;
    const int n = (int)(sizeof ecases / sizeof ecases[0]);
    for (int i = 0; i < n; i++)
        failed += !check_bad(ctx, i);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%d of %d bad-input cases failed", failed, n);
}
