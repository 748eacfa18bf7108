/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bad-input tables for the attention ops: one errors_case row per case, run by errors_run.
 *
 * A row starts from its op's valid default problem (below), applies its edits in order (the
 * problem's tensors, the parameters, then the call's arguments), calls the op once with an
 * event pointer and checks:
 *   - the exact status (`want`, or `also` when a row accepts two),
 *   - that the event stays NULL,
 *   - that fcl_last_error is a sentence naming the op and every token / substring of the row,
 *   - after fcl_finish, that every tensor the row made (and the shared buffer, when the row
 *     places tensors in one) holds byte for byte what it held before the call: inputs their
 *     values, outputs their salted poison (support_poison_raw).
 * A row with want FCL_SUCCESS is a control instead: the call succeeds, returns an event,
 * clears the message, writes every element of every output (finite) and changes no input.
 * These checks do not stop the table: a failing one reports "[row name] ..." and the next row
 * runs, so one broken check in the library shows every case it breaks (a row whose tensors
 * cannot be made stops its test, naming the row too).
 */
#ifndef FLASHCL_TEST_SUPPORT_ERRORS_H
#define FLASHCL_TEST_SUPPORT_ERRORS_H

#include <flashcl/flashcl.h>

#include <stddef.h>
#include <stdint.h>

/* The ops a table calls. */
typedef enum errors_op {
    ERRORS_FORWARD,         /* fcl_attention_forward */
    ERRORS_BACKWARD,        /* fcl_attention_backward */
    ERRORS_VARLEN_BACKWARD, /* fcl_attention_varlen_backward */
    ERRORS_PACKED_BACKWARD, /* fcl_attention_packed_qkv_backward */
} errors_op;

/* Slots: each op's tensor arguments in call order, then the key mask and the ALiBi slopes
 * (both absent from the default problems; an E_SPEC on them adds them to the params). */
enum { F_Q, F_K, F_V, F_O, F_LSE };
enum { D_Q, D_K, D_V, D_O, D_DO, D_LSE, D_DQ, D_DK, D_DV };
enum { V_Q, V_K, V_V, V_O, V_DO, V_LSE, V_CUQ, V_CUK, V_DQ, V_DK, V_DV };
enum { P_QKV, P_O, P_DO, P_LSE, P_BOUNDS, P_DQKV };
enum { S_MASK = 11, S_ALIBI = 12, ERRORS_NSLOT = 13 };
#define BIT(slot) (1u << (slot))

/* The default problems, all F32:
 * dense (forward and backward): Q, O, dO, dQ [B0, SQ0, HQ0, D0]; K, V, dK, dV [B0, SK0, HKV0, D0];
 *   LSE [B0, HQ0, SQ0].
 * varlen: 2 sequences, query lengths 3 and 4 (cu_seqlens_q {0, 3, 7}), key lengths 5 and 4
 *   (cu_seqlens_k {0, 5, 9}); Q, O, dO, dQ [TQ0, VHQ, D0]; K, V, dK, dV [TK0, VHKV, D0];
 *   LSE [VHQ, TQ0]; max_seqlen_q VMAXQ, max_seqlen_k VMAXK.
 * packed: L PL rows in two sequences (rows 0-3, 4-5); QKV, dQKV [PL, 3, PH, D0]; O, dO
 *   [PL, PH, D0]; LSE [PH, PL]; seq_bounds [PL, 2]. */
enum { B0 = 2, SQ0 = 3, SK0 = 5, HQ0 = 6, HKV0 = 3, D0 = 16 };
enum { VB = 2, TQ0 = 7, TK0 = 9, VHQ = 4, VHKV = 2, VMAXQ = 4, VMAXK = 5 };
enum { PL = 6, PH = 2 };

/* What an edit changes; the E_ macros below build them. */
typedef enum errors_edit_kind {
    ERR_END,          /* no edit (the rest of the list is empty) */
    ERR_RESIZE,       /* dense ops, first edit: every tensor for v = B, Sq, Sk, Hq, Hkv, D */
    ERR_DIM,          /* shape[v0] = v1 in every slot of `slots` */
    ERR_DTYPE,        /* dtype = v0 in every slot of `slots` */
    ERR_SPEC,         /* one slot: dtype v0, rank v1, shape v2..v5; unplaced, role kept (input when new) */
    ERR_ABSENT,       /* the slots are not made and passed as NULL */
    ERR_FOREIGN,      /* the slots are made in a second context */
    ERR_STRIDES,      /* one slot's element strides v0..v3 (for a placed slot) */
    ERR_PLACE,        /* one slot as a view at element v0 of the shared buffer */
    ERR_AFTER,        /* one slot at element place(v0) + extent(v0) + v1 (v0 placed before) */
    ERR_BACK_TO_BACK, /* every slot placed in slot order, each right after the one before */
    ERR_MAX_Q,        /* varlen: max_seqlen_q = v0 */
    ERR_MAX_K,        /* varlen: max_seqlen_k = v0 */
    ERR_CAUSAL,       /* params.causal = 1 */
    ERR_WINDOW_LEFT,  /* params.window_left = v0 */
    ERR_WINDOW_RIGHT, /* params.window_right = v0 */
    ERR_SCALE,        /* params.scale = f */
    ERR_SOFTCAP,      /* params.softcap = f */
    ERR_PASS_NULL,    /* the slots are made but passed as NULL */
    ERR_PASS_AS,      /* one slot's argument is slot v0's tensor */
    ERR_NULL_PARAMS,  /* params passed as NULL */
    ERR_NULL_CTX,     /* ctx passed as NULL (the message is fcl_last_error(NULL)) */
    ERR_FORWARD_FIRST, /* controls of a backward: the forward writes O and LSE first */
    ERR_FAIL_FIRST,   /* controls: a call with slot v0 NULL fails first and leaves a message */
} errors_edit_kind;

typedef struct errors_edit {
    errors_edit_kind kind;
    unsigned slots; /* BIT(slot) | ...: the slots the edit changes */
    int64_t v[6];
    float f;
} errors_edit;

#define E_RESIZE(B, Sq, Sk, Hq, Hkv, D) {.kind = ERR_RESIZE, .v = {(B), (Sq), (Sk), (Hq), (Hkv), (D)}}
#define E_DIM(mask, dim, n) {.kind = ERR_DIM, .slots = (mask), .v = {(dim), (n)}}
#define E_DTYPE(mask, dt) {.kind = ERR_DTYPE, .slots = (mask), .v = {(dt)}}
#define E_SPEC(s, dt, ndim, a, b, c, d) {.kind = ERR_SPEC, .slots = BIT(s), .v = {(dt), (ndim), (a), (b), (c), (d)}}
#define E_ABSENT(mask) {.kind = ERR_ABSENT, .slots = (mask)}
#define E_FOREIGN(mask) {.kind = ERR_FOREIGN, .slots = (mask)}
#define E_STRIDES(s, a, b, c, d) {.kind = ERR_STRIDES, .slots = BIT(s), .v = {(a), (b), (c), (d)}}
#define E_PLACE(s, off) {.kind = ERR_PLACE, .slots = BIT(s), .v = {(off)}}
#define E_ON_LAST(s, of) {.kind = ERR_AFTER, .slots = BIT(s), .v = {(of), -1}} /* starts on of's last element */
#define E_NEXT_TO(s, of) {.kind = ERR_AFTER, .slots = BIT(s), .v = {(of), 0}}  /* starts right after of */
#define E_BACK_TO_BACK {.kind = ERR_BACK_TO_BACK}
#define E_MAX_Q(n) {.kind = ERR_MAX_Q, .v = {(n)}}
#define E_MAX_K(n) {.kind = ERR_MAX_K, .v = {(n)}}
#define E_CAUSAL {.kind = ERR_CAUSAL}
#define E_WINDOW_LEFT(n) {.kind = ERR_WINDOW_LEFT, .v = {(n)}}
#define E_WINDOW_RIGHT(n) {.kind = ERR_WINDOW_RIGHT, .v = {(n)}}
#define E_SCALE(x) {.kind = ERR_SCALE, .f = (x)}
#define E_SOFTCAP(x) {.kind = ERR_SOFTCAP, .f = (x)}
#define E_PASS_NULL(mask) {.kind = ERR_PASS_NULL, .slots = (mask)}
#define E_PASS_AS(s, other) {.kind = ERR_PASS_AS, .slots = BIT(s), .v = {(other)}}
#define E_NULL_PARAMS {.kind = ERR_NULL_PARAMS}
#define E_NULL_CTX {.kind = ERR_NULL_CTX}
#define E_FORWARD_FIRST {.kind = ERR_FORWARD_FIRST}
#define E_FAIL_FIRST(s) {.kind = ERR_FAIL_FIRST, .v = {(s)}}

enum { ERRORS_MAX_EDITS = 8, ERRORS_MAX_TOKENS = 6, ERRORS_MAX_SUBS = 2, ERRORS_MAX_ANY = 2 };

/* One case. Lists end at the first NULL / ERR_END. */
typedef struct errors_case {
    const char *name;
    fcl_status want; /* FCL_SUCCESS: a control */
    errors_edit edit[ERRORS_MAX_EDITS];
    const char *tokens[ERRORS_MAX_TOKENS]; /* whole tokens the message names (besides the op) */
    const char *subs[ERRORS_MAX_SUBS];     /* case-insensitive substrings of the message */
    const char *any[ERRORS_MAX_ANY];       /* the message names at least one of these tokens */
    fcl_status also;                       /* a second accepted status (FCL_SUCCESS: none) */
} errors_case;

/* Runs every row of cases[n] against op in one context (made here, released at the end). */
void errors_run(errors_op op, const errors_case *cases, size_t n);
#define ERRORS_RUN(op, cases) errors_run((op), (cases), sizeof(cases) / sizeof((cases)[0]))

/* The checks of a rejected call's outcome, shared with tables of other calls (tensor views).
 * Each failure reports "[name] ..." without stopping the test. The status is `want` (or
 * `also`, unless FCL_SUCCESS); returns whether it was. */
int errors_expect_status(const char *name, const char *call, fcl_status st, fcl_status want, fcl_status also,
                         const char *msg);
/* msg is a sentence naming every tokens[] entry (whole tokens), containing every subs[] entry
 * and naming at least one any[] entry when any[0] is set (each list ends at NULL or its n). */
void errors_expect_message(const char *name, const char *msg, const char *const *tokens, size_t n_tokens,
                           const char *const *subs, size_t n_subs, const char *const *any, size_t n_any);

#endif
