/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the decode tests (test_decode.c, test_tuning.c): a decode problem's
 * per-sequence check against the float64 forward reference. */
#ifndef FLASHCL_TEST_SUPPORT_DECODE_H
#define FLASHCL_TEST_SUPPORT_DECODE_H

#include <flashcl/flashcl.h>
#include <stddef.h>

/* One decode problem on the host: what the reference needs. */
typedef struct support_decode_problem {
    fcl_dtype dt;
    int B, Lq, Hq, Hkv, D, Lmax;
    int wl;
    float softcap, scale;
    const float *q;      /* [B, Lq, Hq, D] */
    const float *k, *v;  /* logical caches [B, L_max, Hkv, D] */
    const int *eff;      /* [B] the length each sequence decodes over */
    const float *mask;   /* NULL, [B, L_max], or [L_max] when mask_shared */
    int mask_shared;
    const float *slopes; /* NULL, [Hq], or [B, Hq] when alibi_bh */
    int alibi_bh;
} support_decode_problem;

/* The outcome of support_decode_check_ref. */
typedef struct support_decode_check {
    int ok;
    int bad_b;                 /* first failing sequence, -1 when none */
    double eo, bo, el, bl;     /* O and LSE errors and bounds: the first failing sequence, else the worst */
    double naive_o, naive_l;   /* largest naive errors over the sequences */
    size_t nan_o, nan_l, bad_empty, empty;
} support_decode_check;

/* Compares O [B, Lq, Hq, D] and LSE [B, Hq, Lq] (may be NULL) with the float64 reference run per
 * sequence b as a B = 1 problem: causal (bottom-right aligned) with Sq = Lq, Sk = eff[b] over
 * the first eff[b] cache rows, window_left wl, softcap, scale, the mask as key mask and ALiBi.
 * ok: every sequence within the DESIGN.md rule (2x the naive error + 1e-5) for O and LSE, no
 * NaN, and rows that see no key exactly O = 0, LSE = -inf. */
support_decode_check support_decode_check_ref(const support_decode_problem *p, const float *o, const float *lse);

/* One line of a check's errors and bounds (for a failure message) into buf. */
void support_decode_describe(const support_decode_check *r, char *buf, size_t n);

#endif
