/*
 * Bad input for fcl_attention_forward (and the tensor-creation checks that stand in for
 * layouts the forward could otherwise receive). Every case changes exactly one thing from a
 * valid call (the "control" tests prove that call succeeds), then checks:
 *   - the exact status,
 *   - that fcl_last_error holds a non-empty sentence naming the values that were wrong,
 *   - that no event was returned,
 *   - and, after fcl_finish, that O and LSE are bit-identical to the poison put in before.
 */
#include "support.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ message helpers */

/* Case-insensitive plain substring. */
static int has_substr(const char *msg, const char *sub)
{
    size_t n = strlen(sub);
    if (!msg)
        return 0;
    for (const char *p = msg; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)sub[i]))
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ fixture */

enum { TQ = 0, TK = 1, TV = 2, TO = 3 };
static const char *const tname[4] = {"Q", "K", "V", "O"};

/* Base valid problem: B 2, Sq 3, Sk 5, Hq 6, Hkv 3 (GQA), D 16, F32. */
enum { B0 = 2, SQ0 = 3, SK0 = 5, HQ0 = 6, HKV0 = 3, D0 = 16 };

typedef struct spec {
    fcl_dtype dtype[4];
    int ndim[4];
    int64_t shape[4][4];
    int with_lse;
    fcl_dtype lse_dtype;
    int lse_ndim;
    int64_t lse_shape[4];
} spec;

static spec spec_default(void)
{
    spec s;
    memset(&s, 0, sizeof s);
    for (int t = 0; t < 4; t++) {
        s.dtype[t] = FCL_F32;
        s.ndim[t] = 4;
        int kv = (t == TK || t == TV);
        int64_t sh[4] = {B0, kv ? SK0 : SQ0, kv ? HKV0 : HQ0, D0};
        memcpy(s.shape[t], sh, sizeof sh);
    }
    s.with_lse = 1;
    s.lse_dtype = FCL_F32;
    s.lse_ndim = 3;
    s.lse_shape[0] = B0;
    s.lse_shape[1] = HQ0;
    s.lse_shape[2] = SQ0;
    return s;
}

typedef struct fixture {
    fcl_context ctx;
    fcl_tensor t[4];
    fcl_tensor lse;
    unsigned char *poison_o, *poison_lse;
    size_t o_bytes, lse_bytes;
} fixture;

static size_t tensor_bytes(fcl_tensor t)
{
    return (size_t)fcl_tensor_numel(t) * fcl_dtype_size(fcl_tensor_dtype(t));
}

static fcl_tensor make_tensor(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape)
{
    fcl_tensor t = NULL;
    fcl_status st = fcl_tensor_create(ctx, dt, ndim, shape, &t);
    cr_assert(st == FCL_SUCCESS && t != NULL, "fcl_tensor_create(%s, ndim %d): %s: %s",
              fcl_dtype_name(dt), ndim, fcl_status_string(st), fcl_last_error(ctx));
    return t;
}

/* A byte pattern that no kernel would write by accident. */
static unsigned char *poison_bytes(size_t n, unsigned salt)
{
    unsigned char *p = malloc(n ? n : 1);
    cr_assert(p != NULL);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 167u + 13u + salt * 29u) ^ (i >> 8));
    return p;
}

static void fill_random(fcl_tensor t, uint64_t seed)
{
    size_t n = (size_t)fcl_tensor_numel(t);
    float *h = malloc(sizeof(float) * n);
    cr_assert(h != NULL);
    fcl_dtype dt = fcl_tensor_dtype(t);
    int is_float = dt == FCL_F32 || dt == FCL_F16 || dt == FCL_BF16;
    support_random(h, n, seed, -1.0f, 1.0f, is_float ? dt : FCL_F32);
    fcl_status st = fcl_tensor_write_f32(t, h, n);
    free(h);
    cr_assert(st == FCL_SUCCESS, "fcl_tensor_write_f32: %s", fcl_status_string(st));
}

static void fixture_init(fixture *f, const spec *s)
{
    memset(f, 0, sizeof *f);
    f->ctx = support_context();
    for (int t = 0; t < 4; t++)
        f->t[t] = make_tensor(f->ctx, s->dtype[t], s->ndim[t], s->shape[t]);
    for (int t = 0; t < 3; t++)
        fill_random(f->t[t], 1000u + (unsigned)t);
    if (s->with_lse)
        f->lse = make_tensor(f->ctx, s->lse_dtype, s->lse_ndim, s->lse_shape);

    f->o_bytes = tensor_bytes(f->t[TO]);
    f->poison_o = poison_bytes(f->o_bytes, 1);
    fcl_status st = fcl_tensor_write_raw(f->t[TO], f->poison_o, f->o_bytes);
    cr_assert(st == FCL_SUCCESS, "poison O: %s: %s", fcl_status_string(st), fcl_last_error(f->ctx));
    if (f->lse) {
        f->lse_bytes = tensor_bytes(f->lse);
        f->poison_lse = poison_bytes(f->lse_bytes, 2);
        st = fcl_tensor_write_raw(f->lse, f->poison_lse, f->lse_bytes);
        cr_assert(st == FCL_SUCCESS, "poison LSE: %s: %s", fcl_status_string(st),
                  fcl_last_error(f->ctx));
    }
}

/* fcl_finish, then O and LSE must still hold the poison, byte for byte. */
static void fixture_assert_untouched(fixture *f)
{
    fcl_status st = fcl_finish(f->ctx);
    cr_assert(st == FCL_SUCCESS, "fcl_finish after a rejected call: %s: %s", fcl_status_string(st),
              fcl_last_error(f->ctx));
    unsigned char *got = malloc(f->o_bytes ? f->o_bytes : 1);
    cr_assert(got != NULL);
    st = fcl_tensor_read_raw(f->t[TO], got, f->o_bytes);
    cr_assert(st == FCL_SUCCESS, "read O: %s", fcl_status_string(st));
    cr_assert(memcmp(got, f->poison_o, f->o_bytes) == 0, "O was written by a rejected call");
    free(got);
    if (f->lse) {
        got = malloc(f->lse_bytes);
        cr_assert(got != NULL);
        st = fcl_tensor_read_raw(f->lse, got, f->lse_bytes);
        cr_assert(st == FCL_SUCCESS, "read LSE: %s", fcl_status_string(st));
        cr_assert(memcmp(got, f->poison_lse, f->lse_bytes) == 0, "LSE was written by a rejected call");
        free(got);
    }
}

static void fixture_fini(fixture *f)
{
    for (int t = 0; t < 4; t++)
        fcl_tensor_release(f->t[t]);
    fcl_tensor_release(f->lse);
    free(f->poison_o);
    free(f->poison_lse);
    fcl_context_release(f->ctx);
}

/* Calls the forward with f's tensors and `p`, expects `want`; returns the context message. */
static const char *call_expect(fixture *f, const fcl_attn_params *p, fcl_status want)
{
    cl_event ev = NULL;
    fcl_status st = fcl_attention_forward(f->ctx, p, f->t[TQ], f->t[TK], f->t[TV], f->t[TO], f->lse, &ev);
    cr_assert(st == want, "fcl_attention_forward returned %s (%d), expected %s; message: \"%s\"",
              fcl_status_string(st), (int)st, fcl_status_string(want), fcl_last_error(f->ctx));
    cr_assert(ev == NULL, "a rejected call returned an event");
    const char *msg = fcl_last_error(f->ctx);
    support_assert_sentence(msg);
    return msg;
}

/* Copy of the message of the last case (the context's copy lives until its next call). */
static char g_msg_buf[1024];

/* The whole case for a changed spec: build, call, expect `want`, check the outputs. */
static const char *run_spec_case(const spec *s, const fcl_attn_params *p, fcl_status want, fixture *f)
{
    fixture_init(f, s);
    const char *msg = call_expect(f, p, want);
    snprintf(g_msg_buf, sizeof g_msg_buf, "%s", msg);
    fixture_assert_untouched(f);
    return g_msg_buf;
}

/* ------------------------------------------------------------------ controls */

Test(forward_errors, control_valid_call_succeeds_and_writes_outputs)
{
    fixture f;
    spec s = spec_default();
    fixture_init(&f, &s);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    cl_event ev = NULL;
    fcl_status st = fcl_attention_forward(f.ctx, &p, f.t[TQ], f.t[TK], f.t[TV], f.t[TO], f.lse, &ev);
    cr_assert(st == FCL_SUCCESS, "valid forward: %s: %s", fcl_status_string(st), fcl_last_error(f.ctx));
    cr_assert(ev != NULL, "a successful call with an event pointer returned no event");
    cl_int ce = clWaitForEvents(1, &ev);
    cr_assert(ce == CL_SUCCESS, "clWaitForEvents: %d", (int)ce);
    clReleaseEvent(ev);
    cr_assert(fcl_finish(f.ctx) == FCL_SUCCESS);
    unsigned char *got = malloc(f.o_bytes);
    cr_assert(got != NULL);
    cr_assert(fcl_tensor_read_raw(f.t[TO], got, f.o_bytes) == FCL_SUCCESS);
    cr_assert(memcmp(got, f.poison_o, f.o_bytes) != 0, "the valid call left O untouched");
    free(got);
    float lse[B0 * HQ0 * SQ0];
    cr_assert(fcl_tensor_read_f32(f.lse, lse, (size_t)B0 * HQ0 * SQ0) == FCL_SUCCESS);
    for (int i = 0; i < B0 * HQ0 * SQ0; i++)
        cr_assert(isfinite(lse[i]), "LSE[%d] = %g after a valid call", i, (double)lse[i]);
    fixture_fini(&f);
}

Test(forward_errors, control_valid_optional_inputs_accepted)
{
    /* NULL LSE, a [B, Sk] key mask, a shared [Sk] key mask, [Hq] and [B, Hq] ALiBi slopes,
     * windows and softcap: all valid, so the rejections below are about the one change. */
    fixture f;
    spec s = spec_default();
    fixture_init(&f, &s);
    int64_t mb[2] = {B0, SK0}, ms[1] = {SK0}, ah[1] = {HQ0}, abh[2] = {B0, HQ0};
    fcl_tensor mask_b = make_tensor(f.ctx, FCL_F32, 2, mb);
    fcl_tensor mask_s = make_tensor(f.ctx, FCL_F32, 1, ms);
    fcl_tensor al_h = make_tensor(f.ctx, FCL_F32, 1, ah);
    fcl_tensor al_bh = make_tensor(f.ctx, FCL_F32, 2, abh);
    float ones[B0 * SK0], slopes[B0 * HQ0];
    for (int i = 0; i < B0 * SK0; i++)
        ones[i] = 1.0f;
    for (int i = 0; i < B0 * HQ0; i++)
        slopes[i] = 0.125f * (float)(i + 1);
    cr_assert(fcl_tensor_write_f32(mask_b, ones, B0 * SK0) == FCL_SUCCESS);
    cr_assert(fcl_tensor_write_f32(mask_s, ones, SK0) == FCL_SUCCESS);
    cr_assert(fcl_tensor_write_f32(al_h, slopes, HQ0) == FCL_SUCCESS);
    cr_assert(fcl_tensor_write_f32(al_bh, slopes, B0 * HQ0) == FCL_SUCCESS);

    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    fcl_status st = fcl_attention_forward(f.ctx, &p, f.t[TQ], f.t[TK], f.t[TV], f.t[TO], NULL, NULL);
    cr_assert(st == FCL_SUCCESS, "NULL LSE: %s: %s", fcl_status_string(st), fcl_last_error(f.ctx));
    p.key_mask = mask_b;
    p.alibi_slopes = al_h;
    p.window_left = 2;
    p.window_right = 0;
    p.softcap = 30.0f;
    st = fcl_attention_forward(f.ctx, &p, f.t[TQ], f.t[TK], f.t[TV], f.t[TO], f.lse, NULL);
    cr_assert(st == FCL_SUCCESS, "[B,Sk] mask + [Hq] alibi: %s: %s", fcl_status_string(st),
              fcl_last_error(f.ctx));
    p.key_mask = mask_s;
    p.alibi_slopes = al_bh;
    p.causal = 1;
    st = fcl_attention_forward(f.ctx, &p, f.t[TQ], f.t[TK], f.t[TV], f.t[TO], f.lse, NULL);
    cr_assert(st == FCL_SUCCESS, "[Sk] mask + [B,Hq] alibi: %s: %s", fcl_status_string(st),
              fcl_last_error(f.ctx));
    cr_assert(fcl_finish(f.ctx) == FCL_SUCCESS);
    fcl_tensor_release(mask_b);
    fcl_tensor_release(mask_s);
    fcl_tensor_release(al_h);
    fcl_tensor_release(al_bh);
    fixture_fini(&f);
}

Test(forward_errors, params_default_matches_init)
{
    fcl_attn_params a = fcl_attn_params_default();
    fcl_attn_params b = FCL_ATTN_PARAMS_INIT;
    cr_assert(a.scale == 0.0f && b.scale == 0.0f);
    cr_assert(a.causal == 0 && b.causal == 0);
    cr_assert(a.window_left == -1 && b.window_left == -1);
    cr_assert(a.window_right == -1 && b.window_right == -1);
    cr_assert(a.softcap == 0.0f && b.softcap == 0.0f);
    cr_assert(a.key_mask == NULL && b.key_mask == NULL);
    cr_assert(a.alibi_slopes == NULL && b.alibi_slopes == NULL);
}

/* ------------------------------------------------------------------ NULL arguments */

Test(forward_errors, null_context)
{
    fixture f;
    spec s = spec_default();
    fixture_init(&f, &s);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    cl_event ev = NULL;
    fcl_status st = fcl_attention_forward(NULL, &p, f.t[TQ], f.t[TK], f.t[TV], f.t[TO], f.lse, &ev);
    cr_assert(st == FCL_ERR_INVALID_ARGUMENT, "NULL ctx: got %s, expected FCL_ERR_INVALID_ARGUMENT",
              fcl_status_string(st));
    cr_assert(ev == NULL);
    const char *msg = fcl_last_error(NULL);
    support_assert_sentence(msg);
    cr_assert(has_substr(msg, "ctx") || has_substr(msg, "context"),
              "the NULL-ctx message \"%s\" does not name the context", msg);
    fixture_assert_untouched(&f);
    fixture_fini(&f);
}

static void null_tensor_case(int which)
{
    fixture f;
    spec s = spec_default();
    fixture_init(&f, &s);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    fcl_tensor a[4] = {f.t[TQ], f.t[TK], f.t[TV], f.t[TO]};
    a[which] = NULL;
    cl_event ev = NULL;
    fcl_status st = fcl_attention_forward(f.ctx, &p, a[0], a[1], a[2], a[3], f.lse, &ev);
    cr_assert(st == FCL_ERR_INVALID_ARGUMENT, "NULL %s: got %s (%s)", tname[which], fcl_status_string(st),
              fcl_last_error(f.ctx));
    cr_assert(ev == NULL);
    const char *msg = fcl_last_error(f.ctx);
    support_assert_sentence(msg);
    SUPPORT_ASSERT_TOKENS(msg, tname[which]);
    fixture_assert_untouched(&f);
    fixture_fini(&f);
}

Test(forward_errors, null_q) { null_tensor_case(TQ); }
Test(forward_errors, null_k) { null_tensor_case(TK); }
Test(forward_errors, null_v) { null_tensor_case(TV); }
Test(forward_errors, null_o) { null_tensor_case(TO); }

Test(forward_errors, null_params)
{
    fixture f;
    spec s = spec_default();
    fixture_init(&f, &s);
    cl_event ev = NULL;
    fcl_status st = fcl_attention_forward(f.ctx, NULL, f.t[TQ], f.t[TK], f.t[TV], f.t[TO], f.lse, &ev);
    cr_assert(st == FCL_ERR_INVALID_ARGUMENT, "NULL params: got %s (%s)", fcl_status_string(st),
              fcl_last_error(f.ctx));
    cr_assert(ev == NULL);
    const char *msg = fcl_last_error(f.ctx);
    support_assert_sentence(msg);
    cr_assert(has_substr(msg, "param"), "the message \"%s\" does not name params", msg);
    fixture_assert_untouched(&f);
    fixture_fini(&f);
}

/* ------------------------------------------------------------------ shapes */

Test(forward_errors, batch_mismatch_q_k)
{
    fixture f;
    spec s = spec_default();
    s.shape[TK][0] = 11;
    s.shape[TV][0] = 11;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "11", "2");
    fixture_fini(&f);
}

Test(forward_errors, seqlen_mismatch_q_o)
{
    fixture f;
    spec s = spec_default();
    s.shape[TO][1] = 13;
    /* LSE keeps Q's shape, so the one disagreement is O's Sq */
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "13", "3");
    fixture_fini(&f);
}

Test(forward_errors, seqlen_mismatch_k_v)
{
    fixture f;
    spec s = spec_default();
    s.shape[TV][1] = 17;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "17", "5");
    fixture_fini(&f);
}

Test(forward_errors, kv_heads_mismatch_k_v)
{
    fixture f;
    spec s = spec_default();
    s.shape[TV][2] = 2; /* K has 3 KV heads; both would divide Hq = 6 */
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "2", "3");
    fixture_fini(&f);
}

Test(forward_errors, q_heads_mismatch_q_o)
{
    fixture f;
    spec s = spec_default();
    s.shape[TO][2] = 12;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "12", "6");
    fixture_fini(&f);
}

Test(forward_errors, head_dim_mismatch_q_k)
{
    fixture f;
    spec s = spec_default();
    s.shape[TQ][3] = 96;
    s.shape[TO][3] = 96;
    s.shape[TK][3] = 64;
    s.shape[TV][3] = 64;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "96", "64");
    fixture_fini(&f);
}

Test(forward_errors, head_dim_mismatch_k_v)
{
    fixture f;
    spec s = spec_default();
    s.shape[TV][3] = 40;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "40", "16");
    fixture_fini(&f);
}

Test(forward_errors, head_dim_mismatch_q_o)
{
    fixture f;
    spec s = spec_default();
    s.shape[TO][3] = 24;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "24", "16");
    fixture_fini(&f);
}

Test(forward_errors, q_heads_not_multiple_of_kv_heads)
{
    fixture f;
    spec s = spec_default();
    s.shape[TK][2] = 4;
    s.shape[TV][2] = 4;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "6", "4");
    fixture_fini(&f);
}

Test(forward_errors, q_ndim_3)
{
    fixture f;
    spec s = spec_default();
    s.ndim[TQ] = 3;
    int64_t q3[4] = {SQ0, HQ0, D0, 0};
    memcpy(s.shape[TQ], q3, sizeof q3);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "Q", "3", "4");
    fixture_fini(&f);
}

Test(forward_errors, head_dim_above_limit)
{
    fixture f;
    spec s = spec_default();
    for (int t = 0; t < 4; t++)
        s.shape[t][3] = FCL_MAX_HEAD_DIM + 1;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_UNSUPPORTED, &f);
    SUPPORT_ASSERT_TOKENS(msg, "257", "256");
    fixture_fini(&f);
}

/* ------------------------------------------------------------------ dtypes */

Test(forward_errors, mixed_dtypes_q_f16_k_f32)
{
    fixture f;
    spec s = spec_default();
    s.dtype[TQ] = FCL_F16;
    s.dtype[TO] = FCL_F16;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_DTYPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "f16", "f32");
    fixture_fini(&f);
}

Test(forward_errors, o_dtype_differs)
{
    fixture f;
    spec s = spec_default();
    s.dtype[TO] = FCL_BF16;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_DTYPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "bf16", "f32");
    fixture_fini(&f);
}

Test(forward_errors, q_dtype_i32)
{
    fixture f;
    spec s = spec_default();
    for (int t = 0; t < 4; t++)
        s.dtype[t] = FCL_I32;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_DTYPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "i32");
    fixture_fini(&f);
}

Test(forward_errors, q_dtype_i8)
{
    fixture f;
    spec s = spec_default();
    for (int t = 0; t < 4; t++)
        s.dtype[t] = FCL_I8;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_DTYPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "i8");
    fixture_fini(&f);
}

/* ------------------------------------------------------------------ LSE */

Test(forward_errors, lse_wrong_shape_transposed)
{
    fixture f;
    spec s = spec_default();
    s.lse_shape[1] = SQ0; /* [B, Sq, Hq] instead of [B, Hq, Sq] */
    s.lse_shape[2] = HQ0;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "LSE");
    fixture_fini(&f);
}

Test(forward_errors, lse_wrong_rank)
{
    fixture f;
    spec s = spec_default();
    s.lse_ndim = 2;
    s.lse_shape[0] = B0 * HQ0;
    s.lse_shape[1] = SQ0;
    s.lse_shape[2] = 0;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_SHAPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "LSE");
    fixture_fini(&f);
}

Test(forward_errors, lse_wrong_dtype_f16)
{
    fixture f;
    spec s = spec_default();
    s.lse_dtype = FCL_F16;
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_DTYPE, &f);
    SUPPORT_ASSERT_TOKENS(msg, "LSE", "f16");
    fixture_fini(&f);
}

/* ------------------------------------------------------------------ key mask, ALiBi */

/* Runs the default problem with one extra tensor as the key mask (as_mask) or ALiBi slopes. */
static const char *run_param_tensor_case(fcl_dtype dt, int ndim, const int64_t *shape, int as_mask,
                                         fcl_status want, fixture *f)
{
    spec s = spec_default();
    fixture_init(f, &s);
    fcl_tensor x = make_tensor(f->ctx, dt, ndim, shape);
    fill_random(x, 77);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    if (as_mask)
        p.key_mask = x;
    else
        p.alibi_slopes = x;
    const char *msg = call_expect(f, &p, want);
    snprintf(g_msg_buf, sizeof g_msg_buf, "%s", msg);
    fixture_assert_untouched(f);
    fcl_tensor_release(x);
    return g_msg_buf;
}

Test(forward_errors, key_mask_wrong_shape)
{
    fixture f;
    int64_t sh[2] = {B0, 19};
    const char *msg = run_param_tensor_case(FCL_F32, 2, sh, 1, FCL_ERR_SHAPE, &f);
    cr_assert(has_substr(msg, "mask"), "message \"%s\" does not name the key mask", msg);
    SUPPORT_ASSERT_TOKENS(msg, "19", "5");
    fixture_fini(&f);
}

Test(forward_errors, key_mask_wrong_batch)
{
    fixture f;
    int64_t sh[2] = {7, SK0};
    const char *msg = run_param_tensor_case(FCL_F32, 2, sh, 1, FCL_ERR_SHAPE, &f);
    cr_assert(has_substr(msg, "mask"), "message \"%s\" does not name the key mask", msg);
    SUPPORT_ASSERT_TOKENS(msg, "7");
    fixture_fini(&f);
}

Test(forward_errors, key_mask_wrong_dtype)
{
    fixture f;
    int64_t sh[2] = {B0, SK0};
    const char *msg = run_param_tensor_case(FCL_F16, 2, sh, 1, FCL_ERR_DTYPE, &f);
    cr_assert(has_substr(msg, "mask"), "message \"%s\" does not name the key mask", msg);
    SUPPORT_ASSERT_TOKENS(msg, "f16");
    fixture_fini(&f);
}

Test(forward_errors, alibi_wrong_shape)
{
    fixture f;
    int64_t sh[1] = {9};
    const char *msg = run_param_tensor_case(FCL_F32, 1, sh, 0, FCL_ERR_SHAPE, &f);
    cr_assert(has_substr(msg, "alibi"), "message \"%s\" does not name the ALiBi slopes", msg);
    SUPPORT_ASSERT_TOKENS(msg, "9", "6");
    fixture_fini(&f);
}

Test(forward_errors, alibi_wrong_batch)
{
    fixture f;
    int64_t sh[2] = {7, HQ0};
    const char *msg = run_param_tensor_case(FCL_F32, 2, sh, 0, FCL_ERR_SHAPE, &f);
    cr_assert(has_substr(msg, "alibi"), "message \"%s\" does not name the ALiBi slopes", msg);
    SUPPORT_ASSERT_TOKENS(msg, "7");
    fixture_fini(&f);
}

Test(forward_errors, alibi_wrong_dtype)
{
    fixture f;
    int64_t sh[1] = {HQ0};
    const char *msg = run_param_tensor_case(FCL_BF16, 1, sh, 0, FCL_ERR_DTYPE, &f);
    cr_assert(has_substr(msg, "alibi"), "message \"%s\" does not name the ALiBi slopes", msg);
    SUPPORT_ASSERT_TOKENS(msg, "bf16");
    fixture_fini(&f);
}

/* ------------------------------------------------------------------ scalar params */

Test(forward_errors, window_left_below_minus_one)
{
    fixture f;
    spec s = spec_default();
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_left = -2;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_INVALID_ARGUMENT, &f);
    cr_assert(has_substr(msg, "window"), "message \"%s\" does not name the window", msg);
    SUPPORT_ASSERT_TOKENS(msg, "-2");
    fixture_fini(&f);
}

Test(forward_errors, window_right_below_minus_one)
{
    fixture f;
    spec s = spec_default();
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.window_right = -3;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_INVALID_ARGUMENT, &f);
    cr_assert(has_substr(msg, "window"), "message \"%s\" does not name the window", msg);
    SUPPORT_ASSERT_TOKENS(msg, "-3");
    fixture_fini(&f);
}

Test(forward_errors, softcap_negative)
{
    fixture f;
    spec s = spec_default();
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.softcap = -1.5f;
    const char *msg = run_spec_case(&s, &p, FCL_ERR_INVALID_ARGUMENT, &f);
    cr_assert(has_substr(msg, "softcap"), "message \"%s\" does not name softcap", msg);
    cr_assert(has_substr(msg, "-1.5"), "message \"%s\" does not give the value -1.5", msg);
    fixture_fini(&f);
}

static void bad_scalar_case(float scale, float softcap, const char *name, const char *what)
{
    fixture f;
    spec s = spec_default();
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.scale = scale;
    p.softcap = softcap;
    fixture_init(&f, &s);
    cl_event ev = NULL;
    fcl_status st = fcl_attention_forward(f.ctx, &p, f.t[TQ], f.t[TK], f.t[TV], f.t[TO], f.lse, &ev);
    cr_assert(st == FCL_ERR_INVALID_ARGUMENT, "%s: got %s (%s)", what, fcl_status_string(st), fcl_last_error(f.ctx));
    cr_assert(ev == NULL);
    const char *msg = fcl_last_error(f.ctx);
    support_assert_sentence(msg);
    cr_assert(has_substr(msg, name), "%s: message \"%s\" does not name %s", what, msg, name);
    fixture_assert_untouched(&f);
    fixture_fini(&f);
}

Test(forward_errors, scale_nan) { bad_scalar_case(NAN, 0.0f, "scale", "scale NaN"); }
Test(forward_errors, scale_inf) { bad_scalar_case(INFINITY, 0.0f, "scale", "scale inf"); }
Test(forward_errors, softcap_nan) { bad_scalar_case(0.0f, NAN, "softcap", "softcap NaN"); }
Test(forward_errors, softcap_inf) { bad_scalar_case(0.0f, INFINITY, "softcap", "softcap inf"); }

/* ------------------------------------------------------------------ ownership, aliasing */

Test(forward_errors, tensor_from_another_context)
{
    fixture f;
    spec s = spec_default();
    fixture_init(&f, &s);
    fcl_context other = support_context();
    fcl_tensor k2 = make_tensor(other, FCL_F32, 4, s.shape[TK]);
    fill_random(k2, 5);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    cl_event ev = NULL;
    fcl_status st = fcl_attention_forward(f.ctx, &p, f.t[TQ], k2, f.t[TV], f.t[TO], f.lse, &ev);
    cr_assert(st == FCL_ERR_INVALID_ARGUMENT, "K of another context: got %s (%s)", fcl_status_string(st),
              fcl_last_error(f.ctx));
    cr_assert(ev == NULL);
    const char *msg = fcl_last_error(f.ctx);
    support_assert_sentence(msg);
    SUPPORT_ASSERT_TOKENS(msg, "K");
    fixture_assert_untouched(&f);
    /* a key mask of another context, too */
    int64_t ms[1] = {SK0};
    fcl_tensor m2 = make_tensor(other, FCL_F32, 1, ms);
    fill_random(m2, 6);
    p.key_mask = m2;
    st = fcl_attention_forward(f.ctx, &p, f.t[TQ], f.t[TK], f.t[TV], f.t[TO], f.lse, NULL);
    cr_assert(st == FCL_ERR_INVALID_ARGUMENT, "mask of another context: got %s (%s)", fcl_status_string(st),
              fcl_last_error(f.ctx));
    fixture_assert_untouched(&f);
    fcl_tensor_release(m2);
    fcl_tensor_release(k2);
    fcl_context_release(other);
    fixture_fini(&f);
}

Test(forward_errors, output_overlaps_input)
{
    /* one buffer holding Q's elements, then O's: O shifted one element back overlaps Q */
    fcl_context ctx = support_context();
    const int64_t n = B0 * SQ0 * HQ0 * D0;
    int64_t all[1] = {2 * n};
    fcl_tensor buf = make_tensor(ctx, FCL_F32, 1, all);
    int64_t qs[4] = {B0, SQ0, HQ0, D0}, ks[4] = {B0, SK0, HKV0, D0};
    fcl_tensor Q = NULL, O_ok = NULL, O_bad = NULL;
    cr_assert(fcl_tensor_view(buf, 4, qs, NULL, 0, &Q) == FCL_SUCCESS);
    cr_assert(fcl_tensor_view(buf, 4, qs, NULL, n, &O_ok) == FCL_SUCCESS);
    cr_assert(fcl_tensor_view(buf, 4, qs, NULL, n - 1, &O_bad) == FCL_SUCCESS);
    fcl_tensor K = make_tensor(ctx, FCL_F32, 4, ks), V = make_tensor(ctx, FCL_F32, 4, ks);
    fill_random(K, 1);
    fill_random(V, 2);
    size_t bytes = (size_t)(2 * n) * sizeof(float);
    unsigned char *before = poison_bytes(bytes, 3), *after = malloc(bytes);
    cr_assert(after != NULL);
    /* small finite values for Q's part so the control call is meaningful */
    for (int64_t i = 0; i < n; i++) {
        float x = (float)((i % 17) - 8) / 16.0f;
        memcpy(before + i * 4, &x, 4);
    }
    cr_assert(fcl_tensor_write_raw(buf, before, bytes) == FCL_SUCCESS);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    cl_event ev = NULL;
    fcl_status st = fcl_attention_forward(ctx, &p, Q, K, V, O_bad, NULL, &ev);
    cr_assert(st == FCL_ERR_INVALID_ARGUMENT, "O overlapping Q by one element: got %s (%s)", fcl_status_string(st),
              fcl_last_error(ctx));
    cr_assert(ev == NULL);
    support_assert_sentence(fcl_last_error(ctx));
    st = fcl_attention_forward(ctx, &p, Q, K, V, Q, NULL, NULL);
    cr_assert(st == FCL_ERR_INVALID_ARGUMENT, "O == Q: got %s (%s)", fcl_status_string(st), fcl_last_error(ctx));
    st = fcl_attention_forward(ctx, &p, Q, K, V, K, NULL, NULL);
    cr_assert(st == FCL_ERR_SHAPE || st == FCL_ERR_INVALID_ARGUMENT, "O == K: got %s", fcl_status_string(st));
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS);
    cr_assert(fcl_tensor_read_raw(buf, after, bytes) == FCL_SUCCESS);
    cr_assert(memcmp(before, after, bytes) == 0, "a rejected aliased call wrote into the buffer");
    /* control: O right after Q in the same buffer does not overlap */
    st = fcl_attention_forward(ctx, &p, Q, K, V, O_ok, NULL, NULL);
    cr_assert(st == FCL_SUCCESS, "adjacent O: %s (%s)", fcl_status_string(st), fcl_last_error(ctx));
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS);
    cr_assert(fcl_tensor_read_raw(buf, after, bytes) == FCL_SUCCESS);
    cr_assert(memcmp(before, after, (size_t)n * 4) == 0, "the adjacent O call changed Q");
    cr_assert(memcmp(before + n * 4, after + n * 4, (size_t)n * 4) != 0, "the adjacent O call wrote nothing");
    free(before);
    free(after);
    fcl_tensor_release(Q);
    fcl_tensor_release(O_ok);
    fcl_tensor_release(O_bad);
    fcl_tensor_release(K);
    fcl_tensor_release(V);
    fcl_tensor_release(buf);
    fcl_context_release(ctx);
}

/* ------------------------------------------------------------------ layouts
 * A forward can only receive tensors that creation accepted, and creation refuses a
 * non-contiguous last dim and any view reaching past its buffer. */

static void expect_view(fcl_context ctx, fcl_tensor base, int ndim, const int64_t *shape,
                        const int64_t *strides, int64_t offset, fcl_status want, const char *what)
{
    fcl_tensor v = NULL;
    fcl_status st = fcl_tensor_view(base, ndim, shape, strides, offset, &v);
    cr_assert(st == want, "%s: fcl_tensor_view returned %s, expected %s (message \"%s\")", what,
              fcl_status_string(st), fcl_status_string(want), fcl_last_error(ctx));
    if (want == FCL_SUCCESS) {
        cr_assert(v != NULL);
        fcl_tensor_release(v);
    } else {
        cr_assert(v == NULL, "%s: a rejected view returned a tensor", what);
        support_assert_sentence(fcl_last_error(ctx));
    }
}

static void expect_wrap(fcl_context ctx, cl_mem buf, int ndim, const int64_t *shape,
                        const int64_t *strides, int64_t offset, fcl_status want, const char *what)
{
    fcl_tensor v = NULL;
    fcl_status st = fcl_tensor_wrap(ctx, buf, FCL_F32, ndim, shape, strides, offset, &v);
    cr_assert(st == want, "%s: fcl_tensor_wrap returned %s, expected %s (message \"%s\")", what,
              fcl_status_string(st), fcl_status_string(want), fcl_last_error(ctx));
    if (want == FCL_SUCCESS) {
        cr_assert(v != NULL);
        fcl_tensor_release(v);
    } else {
        cr_assert(v == NULL, "%s: a rejected wrap returned a tensor", what);
        support_assert_sentence(fcl_last_error(ctx));
    }
}

static cl_mem new_buffer(fcl_context ctx, size_t bytes)
{
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    cr_assert(err == CL_SUCCESS && m != NULL, "clCreateBuffer: %d", (int)err);
    return m;
}

Test(forward_errors, view_noncontiguous_last_dim)
{
    fcl_context ctx = support_context();
    int64_t bs[4] = {B0, SQ0, HQ0, 2 * D0};
    fcl_tensor base = make_tensor(ctx, FCL_F32, 4, bs);
    int64_t sh[4] = {B0, SQ0, HQ0, D0};
    int64_t st_bad[4] = {SQ0 * HQ0 * 2 * D0, HQ0 * 2 * D0, 2 * D0, 2};
    int64_t st_ok[4] = {SQ0 * HQ0 * 2 * D0, HQ0 * 2 * D0, 2 * D0, 1};
    expect_view(ctx, base, 4, sh, st_ok, 0, FCL_SUCCESS, "control: stride-1 view into padded rows");
    expect_view(ctx, base, 4, sh, st_bad, 0, FCL_ERR_LAYOUT, "last-dim stride 2");
    const char *msg = fcl_last_error(ctx);
    cr_assert(has_substr(msg, "stride"), "message \"%s\" does not mention the stride", msg);
    SUPPORT_ASSERT_TOKENS(msg, "2");
    int64_t st_zero[4] = {SQ0 * HQ0 * 2 * D0, HQ0 * 2 * D0, 2 * D0, 0};
    expect_view(ctx, base, 4, sh, st_zero, 0, FCL_ERR_LAYOUT, "last-dim stride 0");
    fcl_tensor_release(base);
    fcl_context_release(ctx);
}

Test(forward_errors, wrap_noncontiguous_last_dim)
{
    fcl_context ctx = support_context();
    cl_mem buf = new_buffer(ctx, 100 * sizeof(float));
    int64_t sh[2] = {4, 10};
    int64_t st_ok[2] = {20, 1}, st_bad[2] = {20, 2};
    expect_wrap(ctx, buf, 2, sh, st_ok, 0, FCL_SUCCESS, "control: row stride 20");
    expect_wrap(ctx, buf, 2, sh, st_bad, 0, FCL_ERR_LAYOUT, "last-dim stride 2");
    const char *msg = fcl_last_error(ctx);
    cr_assert(has_substr(msg, "stride"), "message \"%s\" does not mention the stride", msg);
    clReleaseMemObject(buf);
    fcl_context_release(ctx);
}

Test(forward_errors, view_past_buffer_end)
{
    fcl_context ctx = support_context();
    int64_t bs[4] = {B0, SQ0, HQ0, D0}; /* 576 elements */
    fcl_tensor base = make_tensor(ctx, FCL_F32, 4, bs);
    const int64_t n = B0 * SQ0 * HQ0 * D0;
    int64_t one[1] = {1}, all[1] = {n};
    expect_view(ctx, base, 4, bs, NULL, 0, FCL_SUCCESS, "control: the whole tensor");
    expect_view(ctx, base, 1, one, NULL, n - 1, FCL_SUCCESS, "control: the last element");
    expect_view(ctx, base, 1, all, NULL, 0, FCL_SUCCESS, "control: flat");
    expect_view(ctx, base, 1, one, NULL, n, FCL_ERR_LAYOUT, "offset == numel");
    expect_view(ctx, base, 4, bs, NULL, 1, FCL_ERR_LAYOUT, "full shape, offset 1");
    expect_view(ctx, base, 1, all, NULL, 1, FCL_ERR_LAYOUT, "flat, offset 1");
    /* [B, H, S, D] permuted view whose strides reach one row too far */
    int64_t psh[4] = {B0, HQ0, SQ0, D0};
    int64_t pst_ok[4] = {SQ0 * HQ0 * D0, D0, HQ0 * D0, 1};
    int64_t pst_bad[4] = {SQ0 * HQ0 * D0, D0, HQ0 * D0 + D0, 1};
    expect_view(ctx, base, 4, psh, pst_ok, 0, FCL_SUCCESS, "control: permuted view");
    expect_view(ctx, base, 4, psh, pst_bad, 0, FCL_ERR_LAYOUT, "permuted view with a stride too large");
    /* a view of a view: offsets add, so an offset fine for the inner view is past the end */
    fcl_tensor inner = NULL;
    int64_t half[1] = {n / 2};
    cr_assert(fcl_tensor_view(base, 1, half, NULL, n / 2, &inner) == FCL_SUCCESS, "%s",
              fcl_last_error(ctx));
    expect_view(ctx, inner, 1, half, NULL, 0, FCL_SUCCESS, "control: view of view, offset 0");
    expect_view(ctx, inner, 1, one, NULL, n / 2 - 1, FCL_SUCCESS, "control: view of view, last");
    expect_view(ctx, inner, 1, one, NULL, n / 2, FCL_ERR_LAYOUT, "view of view past the end");
    fcl_tensor_release(inner);
    /* negative offsets address before the buffer */
    {
        fcl_tensor v = NULL;
        fcl_status st = fcl_tensor_view(base, 1, one, NULL, -1, &v);
        cr_assert(st == FCL_ERR_LAYOUT || st == FCL_ERR_INVALID_ARGUMENT,
                  "negative view offset: got %s", fcl_status_string(st));
        cr_assert(v == NULL);
    }
    fcl_tensor_release(base);
    fcl_context_release(ctx);
}

Test(forward_errors, wrap_past_buffer_end)
{
    fcl_context ctx = support_context();
    cl_mem buf = new_buffer(ctx, 100 * sizeof(float));
    int64_t four[1] = {4}, hundred[1] = {100}, sh[2] = {3, 4};
    int64_t st_ok[2] = {10, 1}, st_bad[2] = {40, 1};
    expect_wrap(ctx, buf, 1, hundred, NULL, 0, FCL_SUCCESS, "control: exactly the buffer");
    expect_wrap(ctx, buf, 1, four, NULL, 96, FCL_SUCCESS, "control: the last four elements");
    expect_wrap(ctx, buf, 2, sh, st_ok, 5, FCL_SUCCESS, "control: strided, offset 5");
    expect_wrap(ctx, buf, 1, four, NULL, 97, FCL_ERR_LAYOUT, "offset 97 + 4 elements");
    const char *msg = fcl_last_error(ctx);
    cr_assert(support_has_token(msg, "100") || support_has_token(msg, "400"),
              "message \"%s\" does not give the buffer's size (100 elements / 400 bytes)", msg);
    int64_t h1[1] = {101};
    expect_wrap(ctx, buf, 1, h1, NULL, 0, FCL_ERR_LAYOUT, "101 elements in 100");
    expect_wrap(ctx, buf, 2, sh, st_bad, 20, FCL_ERR_LAYOUT, "stride 40, offset 20");
    expect_wrap(ctx, buf, 1, four, NULL, 1000, FCL_ERR_LAYOUT, "offset far past the end");
    {
        fcl_tensor v = NULL;
        fcl_status st = fcl_tensor_wrap(ctx, buf, FCL_F32, 1, four, NULL, -1, &v);
        cr_assert(st == FCL_ERR_LAYOUT || st == FCL_ERR_INVALID_ARGUMENT,
                  "negative wrap offset: got %s", fcl_status_string(st));
        cr_assert(v == NULL);
    }
    /* the buffer's size is counted in elements of the dtype: 100 floats = 200 halves */
    {
        fcl_tensor v = NULL;
        int64_t n200[1] = {200}, n201[1] = {201};
        fcl_status st = fcl_tensor_wrap(ctx, buf, FCL_F16, 1, n200, NULL, 0, &v);
        cr_assert(st == FCL_SUCCESS, "200 f16 in 400 bytes: %s: %s", fcl_status_string(st),
                  fcl_last_error(ctx));
        fcl_tensor_release(v);
        v = NULL;
        st = fcl_tensor_wrap(ctx, buf, FCL_F16, 1, n201, NULL, 0, &v);
        cr_assert(st == FCL_ERR_LAYOUT, "201 f16 in 400 bytes: got %s", fcl_status_string(st));
        cr_assert(v == NULL);
    }
    clReleaseMemObject(buf);
    fcl_context_release(ctx);
}

/* ------------------------------------------------------------------ status strings */

Test(forward_errors, status_strings)
{
    static const struct { fcl_status s; const char *name; } all[] = {
        {FCL_SUCCESS, "FCL_SUCCESS"},
        {FCL_ERR_INVALID_ARGUMENT, "FCL_ERR_INVALID_ARGUMENT"},
        {FCL_ERR_SHAPE, "FCL_ERR_SHAPE"},
        {FCL_ERR_DTYPE, "FCL_ERR_DTYPE"},
        {FCL_ERR_LAYOUT, "FCL_ERR_LAYOUT"},
        {FCL_ERR_UNSUPPORTED, "FCL_ERR_UNSUPPORTED"},
        {FCL_ERR_NO_DEVICE, "FCL_ERR_NO_DEVICE"},
        {FCL_ERR_OPENCL, "FCL_ERR_OPENCL"},
        {FCL_ERR_BUILD, "FCL_ERR_BUILD"},
        {FCL_ERR_OUT_OF_MEMORY, "FCL_ERR_OUT_OF_MEMORY"},
    };
    const size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n; i++) {
        const char *got = fcl_status_string(all[i].s);
        cr_assert(got != NULL, "fcl_status_string(%d) is NULL", (int)all[i].s);
        cr_assert_str_eq(got, all[i].name, "fcl_status_string(%d)", (int)all[i].s);
    }
    const int unknown[] = {1, 7, -10, -100, 12345, -2147483647};
    for (size_t u = 0; u < sizeof unknown / sizeof unknown[0]; u++) {
        const char *got = fcl_status_string((fcl_status)unknown[u]);
        cr_assert(got != NULL && got[0] != '\0', "fcl_status_string(%d) is NULL or empty", unknown[u]);
        for (size_t i = 0; i < n; i++)
            cr_assert(strcmp(got, all[i].name) != 0, "unknown status %d is named %s", unknown[u], got);
    }
}
