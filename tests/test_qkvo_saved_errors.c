/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bad input to fcl_attention_qkvo_forward_save and fcl_attention_qkvo_backward_saved (their
 * values: test_qkvo_backward, which checks them bit for bit against the recompute): saved NULL,
 * a saved tensor of the wrong shape or dtype, and outputs that overlap a saved tensor. Each
 * call must return its status with a sentence naming the argument, enqueue nothing (no event)
 * and leave every output byte-identical to its poison. A valid control call runs first.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "support.h"

enum { L = 3, D = 16, H = 2 };
#define ACT FCL_F16

/* One self-attention layer (no biases) with its outputs and saved activations. */
typedef struct sfix {
    fcl_context ctx;
    support_weight hw[4];
    fcl_weight fw[4];
    fcl_tensor X, O, dO, dX, dw[4];
    fcl_weight_grad fg[4];
    fcl_qkvo_saved saved;
    fcl_tensor base; /* a shared buffer for the overlap cases, or NULL */
} sfix;

static fcl_tensor act2(fcl_context ctx, fcl_dtype dt, int64_t rows, int64_t cols, uint64_t seed)
{
    const int64_t shape[2] = {rows, cols};
    return support_tensor_random(ctx, dt, 2, shape, seed);
}

static void sfix_init(sfix *f, fcl_context ctx)
{
    memset(f, 0, sizeof *f);
    f->ctx = ctx;
    for (int i = 0; i < 4; i++) {
        support_weight_make(ctx, &f->hw[i], ACT, ACT, D, D, 0, 40 + (uint64_t)i);
        f->fw[i] = support_weight_fcl(&f->hw[i]);
        f->dw[i] = act2(ctx, FCL_F32, D, D, 0);
        f->fg[i] = (fcl_weight_grad){f->dw[i], NULL};
    }
    f->X = act2(ctx, ACT, L, D, 7);
    f->O = act2(ctx, ACT, L, D, 0);
    f->dO = act2(ctx, ACT, L, D, 8);
    f->dX = act2(ctx, ACT, L, D, 0);
    f->saved = (fcl_qkvo_saved){act2(ctx, ACT, L, D, 0), act2(ctx, ACT, L, D, 0), act2(ctx, ACT, L, D, 0),
                                act2(ctx, ACT, L, D, 0), act2(ctx, FCL_F32, H, L, 0)};
}

static void sfix_fini(sfix *f)
{
    fcl_tensor all[] = {f->X, f->O, f->dO, f->dX, f->saved.Q, f->saved.K, f->saved.V, f->saved.A, f->saved.LSE,
                        f->base};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        fcl_tensor_release(all[i]);
    for (int i = 0; i < 4; i++) {
        support_weight_release(&f->hw[i]);
        fcl_tensor_release(f->dw[i]);
    }
}

static fcl_status call_forward(sfix *f, const fcl_qkvo_saved *saved, cl_event *ev)
{
    fcl_attn_params p = fcl_attn_params_default();
    return fcl_attention_qkvo_forward_save(f->ctx, &p, H, f->X, NULL, &f->fw[0], &f->fw[1], &f->fw[2], &f->fw[3],
                                           f->O, saved, ev);
}

static fcl_status call_backward(sfix *f, const fcl_qkvo_saved *saved, cl_event *ev)
{
    fcl_attn_params p = fcl_attn_params_default();
    return fcl_attention_qkvo_backward_saved(f->ctx, &p, H, f->X, NULL, &f->fw[0], &f->fw[1], &f->fw[2], &f->fw[3],
                                             saved, f->dO, f->dX, NULL, &f->fg[0], &f->fg[1], &f->fg[2], &f->fg[3],
                                             ev);
}

/* Replaces *slot with a view [rows, cols] at element `at` of f's shared buffer. */
static void shared_view(sfix *f, fcl_tensor *slot, int64_t rows, int64_t cols, int64_t at)
{
    if (!f->base) {
        const int64_t n = 4 * L * D;
        f->base = support_tensor_random(f->ctx, ACT, 1, &n, 93);
    }
    const int64_t shape[2] = {rows, cols};
    fcl_tensor_release(*slot);
    *slot = support_view(f->base, 2, shape, NULL, at);
}

enum { FWD, BWD };

typedef struct scase {
    const char *what;
    int call;          /* FWD or BWD */
    int null_saved;    /* pass saved = NULL */
    fcl_status want;
    const char *token; /* the message must name it */
} scase;

static const scase cases[] = {
    /* 0 */ {"forward_save, saved NULL", FWD, 1, FCL_ERR_INVALID_ARGUMENT, "saved"},
    /* 1 */ {"backward_saved, saved NULL", BWD, 1, FCL_ERR_INVALID_ARGUMENT, "saved"},
    /* 2 */ {"saved.LSE [H, L + 1]", BWD, 0, FCL_ERR_SHAPE, "saved.LSE"},
    /* 3 */ {"saved.A BF16 with F16 activations", BWD, 0, FCL_ERR_DTYPE, "saved.A"},
    /* 4 */ {"saved.K [L, D + 1] to forward_save", FWD, 0, FCL_ERR_SHAPE, "saved.K"},
    /* 5 */ {"saved.Q overlaps O (forward_save)", FWD, 0, FCL_ERR_INVALID_ARGUMENT, "O"},
    /* 6 */ {"saved.V overlaps X (forward_save)", FWD, 0, FCL_ERR_INVALID_ARGUMENT, "saved.V"},
    /* 7 */ {"dX overlaps saved.Q (backward_saved)", BWD, 0, FCL_ERR_INVALID_ARGUMENT, "dX"},
    /* 8 */ {"saved.LSE F16", FWD, 0, FCL_ERR_DTYPE, "saved.LSE"},
};

/* Applies case id to a valid fixture. */
static void mutate(sfix *f, int id)
{
    switch (id) {
    case 2: fcl_tensor_release(f->saved.LSE), f->saved.LSE = act2(f->ctx, FCL_F32, H, L + 1, 0); break;
    case 3: fcl_tensor_release(f->saved.A), f->saved.A = act2(f->ctx, FCL_BF16, L, D, 0); break;
    case 4: fcl_tensor_release(f->saved.K), f->saved.K = act2(f->ctx, ACT, L, D + 1, 0); break;
    case 5: shared_view(f, &f->saved.Q, L, D, 0), shared_view(f, &f->O, L, D, 8); break;
    case 6: shared_view(f, &f->saved.V, L, D, 0), shared_view(f, &f->X, L, D, D); break;
    case 7: shared_view(f, &f->saved.Q, L, D, 0), shared_view(f, &f->dX, L, D, 2); break;
    case 8: fcl_tensor_release(f->saved.LSE), f->saved.LSE = act2(f->ctx, FCL_F16, H, L, 0); break;
    default: break;
    }
}

/* Poisons the call's outputs and keeps their bytes; returns how many. */
static int take(const sfix *f, int call, fcl_tensor *t, unsigned char **b, size_t *n)
{
    int count = 0;
    if (call == FWD) {
        const fcl_tensor outs[6] = {f->O, f->saved.Q, f->saved.K, f->saved.V, f->saved.A, f->saved.LSE};
        for (int i = 0; i < 6; i++)
            t[count++] = outs[i];
    } else {
        t[count++] = f->dX;
        for (int i = 0; i < 4; i++)
            t[count++] = f->dw[i];
    }
    for (int j = 0; j < count; j++)
        free(support_poison_raw(t[j], &n[j], 5u + (unsigned)j));
    for (int j = 0; j < count; j++) { /* shared views: what each holds after all the poisoning */
        b[j] = support_xmalloc(n[j]);
        cr_assert(fcl_tensor_read_raw(t[j], b[j], n[j]) == FCL_SUCCESS);
    }
    return count;
}

static int check_case(fcl_context ctx, int id)
{
    const scase *c = &cases[id];
    sfix f;
    sfix_init(&f, ctx);
    mutate(&f, id);
    fcl_tensor t[6];
    unsigned char *b[6];
    size_t n[6];
    const int count = take(&f, c->call, t, b, n);
    cl_event ev = NULL;
    const fcl_qkvo_saved *saved = c->null_saved ? NULL : &f.saved;
    const fcl_status st = c->call == FWD ? call_forward(&f, saved, &ev) : call_backward(&f, saved, &ev);
    const char *msg = fcl_last_error(ctx);
    int ok = st == c->want && ev == NULL && support_has_token(msg, c->token);
    cr_expect(st == c->want, "[%s] returned %s, expected %s: \"%s\"", c->what, fcl_status_string(st),
              fcl_status_string(c->want), msg);
    cr_expect(ev == NULL, "[%s] a rejected call returned an event", c->what);
    cr_expect(support_has_token(msg, c->token), "[%s] message \"%s\" does not name %s", c->what, msg, c->token);
    support_assert_sentence(msg);
    if (ev)
        clReleaseEvent(ev);
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    for (int j = 0; j < count; j++) {
        unsigned char *got = support_xmalloc(n[j]);
        cr_assert(fcl_tensor_read_raw(t[j], got, n[j]) == FCL_SUCCESS);
        const int same = memcmp(got, b[j], n[j]) == 0;
        cr_expect(same, "[%s] output %d was written by a rejected call", c->what, j);
        ok &= same;
        free(got);
        free(b[j]);
    }
    sfix_fini(&f);
    return ok;
}

/* The valid fixture succeeds through both calls (so each bad case fails for its one change). */
Test(qkvo_saved_errors, control)
{
    fcl_context ctx = support_context();
    sfix f;
    sfix_init(&f, ctx);
    cl_event ev[2] = {NULL, NULL};
    fcl_status st = call_forward(&f, &f.saved, &ev[0]);
    cr_expect(st == FCL_SUCCESS, "forward_save: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    st = call_backward(&f, &f.saved, &ev[1]);
    cr_expect(st == FCL_SUCCESS, "backward_saved: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    for (int i = 0; i < 2; i++) {
        cr_expect(ev[i] != NULL, "a valid call returned no event");
        if (ev[i])
            clReleaseEvent(ev[i]);
    }
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS, "%s", fcl_last_error(ctx));
    sfix_fini(&f);
    fcl_context_release(ctx);
}

Test(qkvo_saved_errors, bad_input)
{
    fcl_context ctx = support_context();
    int failed = 0;
    const int count = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < count; i++)
        failed += !check_case(ctx, i);
    fcl_context_release(ctx);
    cr_assert(failed == 0, "%d of %d bad-input cases failed", failed, count);
}
