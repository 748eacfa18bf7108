/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the variable-length tests (test_varlen.c, test_packed_qkv.c,
 * test_varlen_backward.c): random packings and their prefix sums, key masks and ALiBi slopes
 * of packed problems, per-sequence reference problems and the forward's per-sequence check,
 * guarded views for the garbage-bounds tests, and the error-case scaffolding. */
#ifndef FLASHCL_TEST_SUPPORT_VARLEN_H
#define FLASHCL_TEST_SUPPORT_VARLEN_H

#include <flashcl/flashcl.h>
#include <stddef.h>
#include <stdint.h>

#include "ref_attention.h"

/* ---------------------------------------------------------------- small helpers */

/* Next value of the splitmix64 stream *s. */
uint64_t support_rng_next(uint64_t *s);

/* Uniform integer in [lo, hi] from the stream *s. */
int support_rng_int(uint64_t *s, int lo, int hi);

/* A new I32 tensor of `shape` holding vals (one per element); fails the test on error. */
fcl_tensor support_i32_tensor(fcl_context ctx, int ndim, const int64_t *shape, const int32_t *vals);

/* Sets every element of t to value. */
void support_fill(fcl_tensor t, float value);

/* A malloc'd copy of t's raw bytes (*bytes long); fails the test on error. */
unsigned char *support_read_raw_all(fcl_tensor t, size_t *bytes);

/* ---------------------------------------------------------------- varlen packings */

enum {
    PK_SHORT = 0,   /* B sequences of 1..24 query and 1..32 key rows, some empty on one side */
    PK_LONG = 1,    /* one long sequence (Sq < Sk) among B - 1 short ones */
    PK_LONG_QK = 2, /* one long sequence with Sq > Sk (causal: empty early rows) */
    PK_EMPTY = 3,   /* a fixed list with empty sequences first, last and between */
    PK_SINGLE = 4,  /* single tokens: (1,1), (1,n), (n,1) */
    PK_EQUAL = 5    /* Sq_b == Sk_b (self-attention; needed by the fused-QKV layout) */
};

/* What differs between the tests' packings: PK_SHORT empties one side of a sequence when a
 * draw in [0, short_draw] is 0 (q) or 1 (k); the long sequence of PK_LONG has
 * long_short[0]..[1] query and long_long[0]..[1] key rows (PK_LONG_QK the other way round);
 * PK_EMPTY is the list empty[n_empty] of (Sq, Sk) pairs. */
typedef struct support_packing_style {
    int short_draw;
    int long_short[2], long_long[2];
    const int (*empty)[2];
    int n_empty;
} support_packing_style;

/* B sequences with lq / lk rows; cq / ck their [B + 1] prefix sums (totals tq, tk; longest
 * maxq, maxk). */
typedef struct support_packing {
    int B;
    int *lq, *lk;
    int32_t *cq, *ck;
    int tq, tk, maxq, maxk;
} support_packing;

/* A packing of `kind` (PK_*) with B sequences (PK_EMPTY: the style's list) drawn from seed;
 * fails the test when every sequence is empty on one side. Free with support_packing_free. */
support_packing support_packing_make(const support_packing_style *style, int kind, int B, uint64_t seed);

void support_packing_free(support_packing *pk);

/* The reference problem of sequence b alone: `all` with B = 1, Sq, Sk of b, the key mask
 * (all.key_mask: [total_k], or NULL) moved to b's keys and the slopes (all.alibi: [Hq], or
 * [B, Hq] when slopes_per_seq) to b's row. */
ref_attn_problem support_packing_problem(ref_attn_problem all, const support_packing *pk, int b,
                                         int slopes_per_seq);

/* ---------------------------------------------------------------- packed-QKV packings */

enum {
    PP_SHORT = 0,  /* sequences of 1..24 rows */
    PP_LONG = 1,   /* one long sequence among short ones of 1..20 rows */
    PP_SINGLE = 2, /* mostly single rows, some of 2..3 */
    PP_ONE = 3     /* one sequence of all L rows */
};

/* L rows cut into nseq sequences (start, len); bounds [L, 2] each row's [start, end); cu the
 * [nseq + 1] prefix sums of the same packing. */
typedef struct support_ppack {
    int L, nseq, maxlen;
    int *start, *len;
    int32_t *bounds;
    int32_t *cu;
} support_ppack;

/* A packing of L rows of `kind` (PP_*) drawn from seed; PP_LONG's long sequence has long_len
 * rows (cut at L) and starts at the first boundary at or past L / 4. */
support_ppack support_ppack_make(int kind, int L, int long_len, uint64_t seed);

void support_ppack_free(support_ppack *p);

/* The reference problem of sequence b alone (B = 1, Sq = Sk = its length, H query and key
 * heads; the bidirectional window w, -1 = none, as w / 2 on each side; mask [L] moved to b's
 * rows, slopes [H] or NULL). */
ref_attn_problem support_ppack_problem(const support_ppack *p, int b, int H, int D, float scale, int causal,
                                       int w, float softcap, const float *mask, const float *slopes);

/* w / 2, or -1 (unbounded) when w < 0: a bidirectional window as its two sides. */
int support_half_window(int w);

/* Copies rows [r0, r0 + n) of part `which` (0 Q, 1 K, 2 V) of x [L, 3, H, D] to dense out
 * [n, H, D] (HD = H * D). */
void support_split_rows(const float *x, int which, int r0, int n, size_t HD, float *out);

/* QKV [L, 3, H, D] holding host, as a view of a new [L, *row] buffer (*base): rows of
 * 3 * H * D elements, or when padded of 3 * H * D + 5 with the view from element 3 (*offset)
 * and the padding NaN (it must never be read). */
fcl_tensor support_qkv_buffer(fcl_context ctx, fcl_dtype dt, int64_t L, int64_t H, int64_t D, int padded,
                              const float *host, fcl_tensor *base, int64_t *row, int64_t *offset);

/* Q, K, V as [L, H, D] views of a QKV buffer `base` whose rows are `row` elements long, the
 * QKV rows starting at element `offset` (the varlen twin of a packed problem). */
void support_qkv_views(fcl_tensor base, int64_t row, int64_t offset, int64_t L, int64_t H, int64_t D,
                       fcl_tensor qkv[3]);

/* Garbage seq_bounds [L, 2] of `pattern`: 0 any pair of odd values, 1 start past end, 2 ranges
 * that do not contain the row, 3 ranges reaching past both ends. */
void support_garbage_bounds(int pattern, int L, uint64_t seed, int32_t *bounds);

/* ---------------------------------------------------------------- masks, ALiBi, params */

enum { MASK_NONE = 0, MASK_ON = 1 };
enum { ALIBI_NONE = 0, ALIBI_H = 1, ALIBI_BH = 2 };

/* n key-mask values: 0 and 0.5 drop a key (the test is > 0.5), 0.51, 0.75 and 1 keep it. */
void support_mask_values(float *m, int n, uint64_t seed);

/* Mask values [total_k] (support_mask_values) with every key of the first sequence from B / 2
 * on that has query and key rows dropped (its rows see nothing). */
void support_packing_mask(const support_packing *pk, uint64_t seed, float *m);

/* Mask values [L] with every key of the first sequence from nseq / 2 on that is longer than
 * one row dropped. */
void support_ppack_mask(const support_ppack *p, uint64_t seed, float *m);

/* n ALiBi slopes: the usual geometric ones of Hq heads, varied per row of Hq (n = B * Hq). */
void support_alibi_slopes(int n, int Hq, float *s);

/* fcl_attn_params_default() with these settings. */
fcl_attn_params support_attn_params(float scale, int causal, int wl, int wr, float softcap, fcl_tensor mask,
                                    fcl_tensor alibi);

/* ---------------------------------------------------------------- forward outputs */

/* The outputs of a forward case: O [total, H, D] and LSE [H, total] (NULL when not asked
 * for), each a tensor of its own or a strided view into a larger buffer (o_base / lse_base;
 * NULL when none) whose view geometry is kept to find writes outside it. */
typedef struct support_fwd_out {
    fcl_tensor o, lse, o_base, lse_base;
    int64_t o_base_n, lse_base_n;
    int64_t o_shape[3], o_strides[3], o_offset;
    int64_t l_shape[2], l_strides[2], l_offset;
} support_fwd_out;

/* o_pad < 0: contiguous O, and contiguous LSE when with_lse. o_pad >= 0: O a view with head
 * stride D + o_pad from element o_offset of its buffer, LSE a view with rows padded by 3
 * from element 2 of its buffer. */
void support_fwd_out_make(fcl_context ctx, fcl_dtype dt, int64_t total, int64_t H, int64_t D, int o_pad,
                          int64_t o_offset, int with_lse, support_fwd_out *out);

/* NaN-poisons O and LSE (their whole buffers when they are views). */
void support_fwd_out_poison(const support_fwd_out *out);

/* Finishes the queue, reads O into o and LSE (when present) into lse, and counts the elements
 * of the buffers outside the views that are no longer NaN into *outside_o, *outside_l. */
void support_fwd_out_read(fcl_context ctx, const support_fwd_out *out, float *o, float *lse, size_t *outside_o,
                          size_t *outside_l);

void support_fwd_out_release(support_fwd_out *out);

/* ---------------------------------------------------------------- forward per-sequence check */

/* Forward outputs against the reference, sequence by sequence. The first failing sequence's
 * errors and bounds (else those of the worst O error) are kept. */
typedef struct support_fwd_check {
    int failed_seqs, first_bad;
    double o_err, o_bound, l_err, l_bound;
    size_t nan_o, nan_l;
    size_t bad_rows;   /* rows with a finite reference LSE but not a finite one, or empty rows not
                          exactly O = 0, LSE = -inf */
    size_t empty_rows; /* rows that see no key */
} support_fwd_check;

/* Starts a check of O[no] and LSE[nl] (lse may be NULL): counts their NaN. */
void support_fwd_check_init(support_fwd_check *r, const float *o, size_t no, const float *lse, size_t nl);

/*
 * Checks sequence `seq`, the dense problem p (B = 1; Q [Sq, Hq, D], K, V [Sk, Hkv, D]), whose
 * outputs are rows [row0, row0 + Sq) of o [total, Hq, D] and columns of lse [Hq, total] (may be
 * NULL), under the DESIGN.md rule (2x the naive error + 1e-5) for O and LSE; rows that see
 * no key must be exactly O = 0, LSE = -inf, the others must have a finite LSE.
 */
void support_fwd_check_seq(const ref_attn_problem *p, fcl_dtype dt, int seq, const float *Q, const float *K,
                           const float *V, const float *o, const float *lse, int total, int row0,
                           support_fwd_check *r);

/* No sequence out of tolerance, no NaN, no bad row. */
int support_fwd_check_ok(const support_fwd_check *r);

/* ---------------------------------------------------------------- guarded views */

/* A view of contiguous `shape` placed `guard` elements into a new 1-D buffer of
 * numel + 2 * guard + spare elements (returned in *base). */
fcl_tensor support_guarded_view(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape, int64_t guard,
                                int64_t spare, fcl_tensor *base);

/* support_guarded_view with the buffer NaN-filled and the view's own elements random in
 * [lo, hi) from seed (rounded to dt): reading a guard gives NaN. */
fcl_tensor support_guarded_input(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape, int64_t guard,
                                 int64_t spare, uint64_t seed, float lo, float hi, fcl_tensor *base);

/* An output view in the middle of a guarded buffer (support_guarded_view): the buffer filled
 * with -555, the view's elements with 777, and a raw snapshot of the buffer kept. */
typedef struct support_guarded_out {
    fcl_tensor base, view;
    size_t n; /* elements of the view */
    int64_t guard;
    unsigned char *before;
    size_t bytes;
} support_guarded_out;

void support_guarded_out_make(fcl_context ctx, fcl_dtype dt, int ndim, const int64_t *shape, int64_t guard,
                              int64_t spare, support_guarded_out *g);

/* Bytes of g's buffer outside the view that differ from the snapshot. */
size_t support_guarded_out_changed(const support_guarded_out *g);

/* The view's elements as a malloc'd float array; *nan gets how many are NaN. */
float *support_guarded_out_read(const support_guarded_out *g, size_t *nan);

void support_guarded_out_release(support_guarded_out *g);

/* Garbage device prefix sums of a B = 5 problem of total_q 41, total_k 53, with the bounds
 * passed as max_seqlen_q / _k. */
typedef struct support_garbage_sums {
    const char *what;
    int32_t cq[6], ck[6];
    int maxq, maxk;
} support_garbage_sums;

/* The list run by the forward and the backward: a valid control first, then nonsense sums
 * (past the total, negative, decreasing, extremes, start past end) and bounds below the real
 * lengths. */
enum { SUPPORT_N_GARBAGE_SUMS = 8 };
extern const support_garbage_sums support_garbage_sums_list[SUPPORT_N_GARBAGE_SUMS];

/* ---------------------------------------------------------------- error cases */

/* The outputs of an error test, O and LSE, filled with salted byte patterns (salts 1 and 2)
 * whose copies po, pl (ob, lb bytes) are kept: a rejected call must leave them untouched. */
typedef struct support_outputs {
    fcl_tensor o, lse;
    unsigned char *po, *pl;
    size_t ob, lb;
} support_outputs;

/* Fills out->o and out->lse with their patterns and keeps copies. */
void support_outputs_poison(support_outputs *out);

/* Replaces *slot (one of the test's tensors, or &out->o / &out->lse) by a new tensor: random
 * contents, or poisoned again when it is O or LSE. */
void support_outputs_replace(fcl_context ctx, support_outputs *out, fcl_tensor *slot, fcl_dtype dt, int ndim,
                             const int64_t *shape);

/*
 * Checks a call to `fn` that returned st and event ev against `want`: a success must return
 * an event (released here); a rejection no event, a message that is a sentence, and outputs
 * untouched. Returns a copy of the message (valid until the next call).
 */
const char *support_outputs_expect(fcl_context ctx, const support_outputs *out, const char *fn, fcl_status st,
                                   cl_event ev, fcl_status want);

/* After a valid call: every one of LSE's n_lse entries is finite and O was overwritten. */
void support_outputs_written(fcl_context ctx, const support_outputs *out, int n_lse);

/* Releases O and LSE and frees the copies. */
void support_outputs_free(support_outputs *out);

#endif
