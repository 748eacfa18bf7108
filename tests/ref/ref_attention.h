/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Float64 reference of the attention forward, written for clarity, not speed, plus the
 * "naive" twin that rounds inputs, scores, probabilities and outputs to a storage dtype
 * (the baseline of the tolerance rule in DESIGN.md). Semantics exactly as DESIGN.md and
 * fcl_attn_params document them.
 *
 * Host arrays are dense float32: Q [B, Sq, Hq, D], K and V [B, Sk, Hkv, D] (row-major).
 */
#ifndef FLASHCL_REF_ATTENTION_H
#define FLASHCL_REF_ATTENTION_H

#include <flashcl/flashcl.h>

typedef struct ref_attn_problem {
    int B, Sq, Sk, Hq, Hkv, D;
    double scale;              /* 0 = 1/sqrt(D) */
    int causal;
    int window_left, window_right; /* -1 = unbounded */
    double softcap;            /* 0 = off */
    const float *key_mask;     /* NULL, or [B, Sk] when mask_per_batch, else [Sk]; > 0.5 = attend */
    int mask_per_batch;
    const float *alibi;        /* NULL, or [B, Hq] when alibi_per_batch, else [Hq] */
    int alibi_per_batch;
} ref_attn_problem;

/*
 * One output row in float64: batch b, query i, query head h. Writes o[D] and *lse
 * (-INFINITY and o = 0 when the row sees no key). lse may be NULL.
 */
void ref_attention_row(const ref_attn_problem *p, const float *Q, const float *K, const float *V,
                       int b, int i, int h, double *o, double *lse);

/*
 * The same row computed the naive way in storage dtype `dtype`: float32 arithmetic, with the
 * scores (after scale, softcap and ALiBi), the softmax probabilities and the output each
 * rounded to `dtype` (inputs are assumed already representable in it). Writes o[D] and *lse.
 */
void ref_attention_row_naive(const ref_attn_problem *p, fcl_dtype dtype, const float *Q,
                             const float *K, const float *V, int b, int i, int h, float *o,
                             float *lse);

/* Whole-tensor forms: O [B, Sq, Hq, D], LSE [B, Hq, Sq] (LSE may be NULL). */
void ref_attention_forward(const ref_attn_problem *p, const float *Q, const float *K,
                           const float *V, double *O, double *LSE);
void ref_attention_forward_naive(const ref_attn_problem *p, fcl_dtype dtype, const float *Q,
                                 const float *K, const float *V, float *O, float *LSE);

/* The absolute position of query row i: i + Sk - Sq (bottom-right aligned). */
long ref_query_pos(const ref_attn_problem *p, int i);

/* Whether query row i of batch b sees key j (0 <= j < Sk; window, causal, key mask). */
int ref_key_visible(const ref_attn_problem *p, int b, int i, int j);

/* The ALiBi slope of batch b, query head h (0 when off). */
double ref_alibi_slope(const ref_attn_problem *p, int b, int h);

/* Rounds x to the nearest value representable in dtype (F32: unchanged). */
float ref_round_to_dtype(fcl_dtype dtype, float x);

#endif
