/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The chunked forward (keys split over several launches that carry the softmax state, the
 * path taken on devices that cap a work-item's loop iterations) must give exactly the
 * one-launch result: the state is kept in float, so the arithmetic is the same. The cap is
 * imposed with FLASHCL_LOOP_LIMIT so the path runs on every device; results are also checked
 * against the float64 reference with the DESIGN.md rule.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention.h"
#include "support.h"

typedef struct chunk_case {
    fcl_dtype dt;
    int B, Sq, Sk, Hq, Hkv, D;
    int causal, wl, wr;
    int with_mask;
} chunk_case;

/* Runs the forward once (poisoned outputs) and reads O and LSE back. */
static void run(fcl_context ctx, const fcl_attn_params *p, fcl_tensor q, fcl_tensor k, fcl_tensor v, fcl_tensor o,
                fcl_tensor l, float *o_host, size_t no, float *l_host, size_t nl)
{
    support_poison(o);
    support_poison(l);
    fcl_status st = fcl_attention_forward(ctx, p, q, k, v, o, l, NULL);
    cr_assert(st == FCL_SUCCESS, "forward: %s: %s", fcl_status_string(st), fcl_last_error(ctx));
    cr_assert(fcl_finish(ctx) == FCL_SUCCESS);
    cr_assert(fcl_tensor_read_f32(o, o_host, no) == FCL_SUCCESS);
    cr_assert(fcl_tensor_read_f32(l, l_host, nl) == FCL_SUCCESS);
}

static void check(const chunk_case *c, uint64_t seed)
{
    fcl_context ctx = support_context();
    const size_t nq = (size_t)c->B * c->Sq * c->Hq * c->D, nk = (size_t)c->B * c->Sk * c->Hkv * c->D;
    const size_t nl = (size_t)c->B * c->Hq * c->Sq, nm = (size_t)c->B * c->Sk;
    float *Q = malloc(sizeof(float) * nq), *K = malloc(sizeof(float) * nk), *V = malloc(sizeof(float) * nk);
    float *M = malloc(sizeof(float) * nm);
    support_random(Q, nq, seed, -1.5f, 1.5f, c->dt);
    support_random(K, nk, seed + 1, -1.5f, 1.5f, c->dt);
    support_random(V, nk, seed + 2, -1.0f, 1.0f, c->dt);
    for (size_t j = 0; j < nm; j++)
        M[j] = (j * 7 % 9 == 4) ? 0.0f : 1.0f;
    const int64_t qs[4] = {c->B, c->Sq, c->Hq, c->D}, ks[4] = {c->B, c->Sk, c->Hkv, c->D};
    const int64_t ls[3] = {c->B, c->Hq, c->Sq}, ms[2] = {c->B, c->Sk};
    fcl_tensor q = support_tensor(ctx, c->dt, 4, qs, Q), k = support_tensor(ctx, c->dt, 4, ks, K);
    fcl_tensor v = support_tensor(ctx, c->dt, 4, ks, V), o = support_tensor(ctx, c->dt, 4, qs, NULL);
    fcl_tensor l = support_tensor(ctx, FCL_F32, 3, ls, NULL), m = support_tensor(ctx, FCL_F32, 2, ms, M);
    fcl_attn_params p = FCL_ATTN_PARAMS_INIT;
    p.causal = c->causal;
    p.window_left = c->wl;
    p.window_right = c->wr;
    p.key_mask = c->with_mask ? m : NULL;

    float *o1 = malloc(sizeof(float) * nq), *o2 = malloc(sizeof(float) * nq);
    float *l1 = malloc(sizeof(float) * nl), *l2 = malloc(sizeof(float) * nl);
    /* the same tiles on every device, so that a cap of 20000 iterations means a few key tiles
     * per launch everywhere */
    support_fix_tiles(1);
    support_force_chunks(0);
    run(ctx, &p, q, k, v, o, l, o1, nq, l1, nl);
    support_force_chunks(1);
    run(ctx, &p, q, k, v, o, l, o2, nq, l2, nl);
    support_force_chunks(0);
    support_fix_tiles(0);
    cr_assert(memcmp(o1, o2, sizeof(float) * nq) == 0, "chunked O differs from the one-launch O");
    cr_assert(memcmp(l1, l2, sizeof(float) * nl) == 0, "chunked LSE differs from the one-launch LSE");

    ref_attn_problem rp = {c->B, c->Sq, c->Sk, c->Hq, c->Hkv, c->D, 0.0, c->causal, c->wl, c->wr, 0.0,
                           c->with_mask ? M : NULL, 1, NULL, 0};
    double *ref = malloc(sizeof(double) * nq), *lref = malloc(sizeof(double) * nl);
    float *naive = malloc(sizeof(float) * nq), *lnaive = malloc(sizeof(float) * nl);
    ref_attention_forward(&rp, Q, K, V, ref, lref);
    ref_attention_forward_naive(&rp, c->dt, Q, K, V, naive, lnaive);
    const double err = support_max_err_f(o2, ref, nq), nerr = support_max_err_f(naive, ref, nq);
    const double lerr = support_max_err_f(l2, lref, nl), lnerr = support_max_err_f(lnaive, lref, nl);
    cr_assert(support_within(err, nerr, 2.0), "O: err %g > 2 * naive %g + 1e-5", err, nerr);
    cr_assert(support_within(lerr, lnerr, 2.0), "LSE: err %g > 2 * naive %g + 1e-5", lerr, lnerr);

    fcl_tensor ts[] = {q, k, v, o, l, m};
    for (int i = 0; i < 6; i++)
        fcl_tensor_release(ts[i]);
    fcl_context_release(ctx);
    free(Q); free(K); free(V); free(M); free(o1); free(o2); free(l1); free(l2);
    free(ref); free(lref); free(naive); free(lnaive);
}

Test(forward_chunks, plain_f32) { chunk_case c = {FCL_F32, 1, 70, 600, 2, 1, 32, 0, -1, -1, 0}; check(&c, 1); }
Test(forward_chunks, causal_mask_f16) { chunk_case c = {FCL_F16, 2, 300, 300, 2, 2, 64, 1, -1, -1, 1}; check(&c, 2); }
Test(forward_chunks, window_bf16) { chunk_case c = {FCL_BF16, 1, 40, 500, 4, 2, 40, 0, 60, 30, 0}; check(&c, 3); }
