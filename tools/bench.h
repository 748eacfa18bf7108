/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench: shared types of the benchmark tool (one job per file):
 *   flashcl_bench.c  main: device, op table, default suite
 *   bench_args.c     command-line parsing and usage
 *   bench_forward.c  the attention-forward case (timing + correctness)
 *   bench_varlen.c   the varlen case (fcl_attention_varlen_forward)
 *   bench_packed.c   the packed-QKV case (fcl_attention_packed_qkv_forward)
 *   bench_backward.c the backward cases (fcl_attention_backward, _varlen_backward,
 *                    _packed_qkv_backward, 2.5x FLOPs)
 *   bench_decode.c   the decode case (fcl_attention_decode over a KV cache, GB/s)
 *   bench_copy.c     the bandwidth ceilings on the same device: clEnqueueCopyBuffer, a read-only kernel
 *   bench_qkvo.c     the attention block with projections (fcl_attention_qkvo_forward and
 *                    fcl_attention_qkvo_backward)
 *   bench_pack.c     the sequence packing of those two: seeded lengths, prefix sums, FLOPs
 *   bench_check.c    sampled comparison with the float64 reference
 *   bench_timer.c    warmup + timed runs (wall clock and profiling events)
 *   bench_sgemm.c    CLBlast SGEMM on the same device (the ceiling)
 *   bench_report.c   the table and the JSON lines
 *   bench_precompile.c --precompile: fcl_precompile for a deployment's shapes, dtypes, head dims
 *   bench_tune.c     --tune: the forward, backward and decode tile searches, stored through
 *                    fcl_tuning_save
 *   bench_util.c     clock, median, random numbers, host inputs, FLOP counts */
#ifndef FLASHCL_BENCH_H
#define FLASHCL_BENCH_H

#include <flashcl/flashcl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes. */
#define BENCH_EXIT_OK 0
#define BENCH_EXIT_LIBRARY 1  /* a flashcl call failed */
#define BENCH_EXIT_USAGE 2    /* bad arguments, or an op not implemented yet */
#define BENCH_EXIT_WRONG 3    /* a flashcl result failed the correctness check */

/* One attention problem. */
typedef struct bench_case {
    fcl_dtype dtype;
    int b, sq, sk, hq, hkv, d;
    int causal;
    int window_left, window_right; /* -1 = unbounded */
    float softcap;                 /* 0 = off */
    int bhsd;                      /* Q/K/V/O stored [B,H,S,D] (passed as strided views) */
} bench_case;

/* The command line. Case fields left 0 (dtype -1) take the op's default. */
typedef struct bench_opts {
    const char *op;     /* NULL: no --op given */
    const char *device; /* NULL: FLASHCL_DEVICE / default selector */
    int dtype;          /* fcl_dtype, or -1 */
    int b, sq, sk, hq, hkv, d;
    int causal, window_left, window_right, have_window;
    float softcap;
    int bhsd;
    int reps, warmup;   /* -1: device default */
    int back_to_back;   /* --back-to-back N: 0 = off */
    int check_rows;     /* -1: default (all rows up to 4096, else 64) */
    int json;
    long sgemm_n;       /* 0: device default */
    int seqs, max_len;  /* varlen / packed_qkv packing; 0: device default */
    int weights;        /* qkvo: weight dtype (fcl_dtype), or -1 for the op's default */
    int tune;           /* --tune: search and store the forward tiles */
    int tune_list;      /* --tune --list: print the stored tuned tiles */
    int tune_reset;     /* --tune --reset: forget them */
    const char *precompile; /* --precompile OPS: the comma list of op families to warm, else NULL */
    const char *dtypes, *dims; /* --dtype / --d given as comma lists (--precompile only), else NULL */
    int mask, alibi, bias;  /* --mask, --alibi, --bias (--precompile: warm those features) */
    int page_size;          /* --page-size N (--precompile decode: a paged cache); 0 = contiguous */
} bench_opts;

/* What every op run gets. */
typedef struct bench_env {
    fcl_context ctx;
    fcl_device_info info;
    int is_gpu;
    int reps, warmup;
    int back_to_back;   /* after the timed runs, this many calls without a wait between them (0: none) */
    int reps_auto;      /* reps is the default: bench_time may stop early on slow devices */
    int check_rows;     /* -1 = default rule */
    int json;
    int tune;           /* --tune or --precompile: the header is the device line alone */
} bench_env;

/* One attention result line. */
typedef struct bench_result {
    const char *op;
    bench_case c;
    int reps;            /* timed runs made */
    double ms;           /* median wall time of one call + fcl_finish */
    double ms_enqueue;   /* median wall time of the call alone (host work before the wait) */
    double ms_event;     /* median device time of the op's event; NaN without profiling */
    double ms_span;      /* median device-clock time between markers enqueued before and after the
                          * call (no event on it): CUDA events' clock; NaN without it */
    double ms_back_to_back; /* wall time per call of env->back_to_back calls enqueued without a wait
                             * between them, then one fcl_finish; 0 when not measured */
    double tflops;       /* FlashAttention convention (see bench_util.c) */
    double tflops_exact; /* from the exact count of visible (query, key) pairs */
    double tflops_event; /* convention FLOPs over ms_event (NaN without it) */
    double max_err, err_bound; /* NaN when nothing was checked */
    int has_nan;         /* a NaN anywhere in O */
    int ok;
    long rows_checked, rows_total;
    /* varlen and packed_qkv (seqs 0 otherwise): c.b = seqs, c.sq = c.sk = the longest
     * sequence; tflops and tflops_exact both use the exact count */
    int seqs, max_len;
    long total_q, total_k;
    double gbps;         /* decode: K and V bytes read per second (0 for other ops) */
    int wdtype;          /* qkvo: the weights' dtype (-1 for other ops) */
    double ms_attention; /* qkvo: the attention core alone, same shapes (projections = ms - it) */
} bench_result;

/* One CLBlast SGEMM result line. */
typedef struct sgemm_result {
    long m, n, k;
    int reps;
    double ms, ms_event, tflops; /* as in bench_result */
    int status; /* CLBlast status (0 = success) */
    int ok;
} sgemm_result;

/* bench_args.c: 0 on success, else prints the error (with the option's valid values) to stderr,
 * or the usage / version to stdout, and returns an exit code (BENCH_EXIT_OK for --help and
 * --version). */
int bench_parse_args(int argc, char **argv, bench_opts *o, int *exit_code);
void bench_usage(FILE *f);
/* Whether any option describing an attention case was given. */
int bench_opts_has_case(const bench_opts *o);

/* bench_forward.c: runs one forward case; returns an exit code (0, or BENCH_EXIT_LIBRARY
 * after printing the library's error). */
int bench_forward(const bench_env *env, const bench_case *c, bench_result *r);
/* The forward default case for the env's device type. */
bench_case bench_forward_default(const bench_env *env);

/* bench_backward.c: one backward case (after a forward for O and LSE); TFLOP/s count 2.5x the
 * forward's FLOPs; checked on batch 0's first KV-head group with the 3x gradient rule (cases
 * too big for the float64 reference are reported unchecked); exit code as bench_forward. */
int bench_backward(const bench_env *env, const bench_case *c, bench_result *r);
bench_case bench_backward_default(const bench_env *env);

/* bench_decode.c: one decode case: Q [B, Sq, Hq, D] (Sq = the draft rows, default 1) over a
 * full contiguous cache of Sk positions; GB/s from the K and V bytes; exit code as
 * bench_forward. */
int bench_decode(const bench_env *env, const bench_case *c, bench_result *r);
bench_case bench_decode_default(const bench_env *env);

/* bench_qkvo.c: one self-attention layer: X [Sq, D] (c->sq, c->d), c->hq heads, weights of
 * dtype `wdtype` (I8 with row scales), biases on; times the whole call and the attention core
 * alone on the same shapes; TFLOP/s from 8*L*D^2 (projections) + the attention's FLOPs; checked
 * on sampled rows against the float64 reference (2x rule). With `backward`: times
 * fcl_attention_qkvo_backward of that layer instead (op "qkvo_backward"; TFLOP/s from 16*L*D^2 +
 * 2.5 times the attention's FLOPs; values unchecked: test_qkvo_backward checks them; NaN in dX
 * fails); BENCH_QKVO_BACKWARD_SAVED times fcl_attention_qkvo_backward_saved after one untimed
 * fcl_attention_qkvo_forward_save (op "qkvo_backward_saved", the same FLOP count). Exit code as
 * bench_forward. */
enum { BENCH_QKVO_FORWARD, BENCH_QKVO_BACKWARD, BENCH_QKVO_BACKWARD_SAVED };
int bench_qkvo(const bench_env *env, const bench_case *c, fcl_dtype wdtype, int mode, bench_result *r);
bench_case bench_qkvo_default(const bench_env *env);

/* bench_copy.c: times clEnqueueCopyBuffer of `bytes` on the env's queue; GB/s counts the bytes
 * read and written (2 * bytes); NaN when a buffer cannot be made. Prints its line. */
void bench_copy(const bench_env *env, size_t bytes);
/* bench_copy.c: times a kernel that reads `bytes` of a device buffer (and writes 256 KB); GB/s
 * count the bytes read (decode's ceiling: it only reads). Prints its line. */
void bench_read(const bench_env *env, size_t bytes);

/* Host arrays of a case: q, k, v, o (see bench_host_alloc). */
typedef struct bench_host {
    float *q, *k, *v, *o;
} bench_host;

/* bench_varlen.c / bench_packed.c: run one case of `seqs` sequences of seeded random lengths
 * in [1, max_len] (c->b, c->sq, c->sk and c->bhsd are ignored; packed needs hkv == hq);
 * exit code as bench_forward. */
int bench_varlen(const bench_env *env, const bench_case *c, int seqs, int max_len, bench_result *r);
int bench_packed_qkv(const bench_env *env, const bench_case *c, int seqs, int max_len,
                     bench_result *r);
/* bench_backward.c: fcl_attention_varlen_backward (fcl_attention_packed_qkv_backward off the
 * fused QKV [total, 3, H, D], hkv = hq) on such a packing, after its forward for O and LSE;
 * TFLOP/s count 2.5x the exact forward FLOPs; checked on the first sequence's first KV-head
 * group as bench_backward. */
int bench_varlen_backward(const bench_env *env, const bench_case *c, int seqs, int max_len, bench_result *r);
int bench_packed_qkv_backward(const bench_env *env, const bench_case *c, int seqs, int max_len, bench_result *r);

/* bench_pack.c: the packing. Lengths depend only on (seqs, max_len). */
typedef struct bench_pack {
    int seqs, max_len;
    int32_t *cu;  /* [seqs + 1] prefix sums of the lengths (cu[0] = 0) */
    long total;   /* cu[seqs] */
    int longest;
} bench_pack;
/* The default case of varlen / packed_qkv (BERT-style encoder: H 12, D 64, MHA) and packing. */
bench_case bench_pack_default(const bench_env *env, int *seqs, int *max_len);
int bench_pack_make(bench_pack *p, int seqs, int max_len); /* -1: out of host memory */
void bench_pack_free(bench_pack *p);
/* seq_bounds of the packed-QKV op: [total, 2], row r -> its sequence's [start, end). */
int32_t *bench_pack_bounds(const bench_pack *p);
/* h->q, h->k, h->v [total, row floats] interleaved into the fused tensor qkv [total, 3, row]
 * and p's seq_bounds into bounds [total, 2] (I32); returns an exit code (0: written). */
int bench_pack_write_qkv(const bench_env *env, const bench_pack *p, const bench_host *h, size_t row, fcl_tensor qkv,
                         fcl_tensor bounds);
/* A fused [rows, 3, row] array split back into q, k, v [rows, row]. */
void bench_unpack_qkv(const float *qkv, float *q, float *k, float *v, size_t rows, size_t row);
/* 4 * Hq * D * sum over sequences of the visible (query, key) pairs inside each. */
double bench_pack_flops(const bench_pack *p, const bench_case *c);
/* After the timed runs (r->c and r->ms, r->ms_event set) and O read into h->o [total, Hq, D]:
 * the packing fields, TFLOP/s from the exact count and the per-sequence check. */
void bench_pack_finish(const bench_env *env, const bench_pack *p, const bench_host *h,
                       bench_result *r);

/* bench_check.c: host inputs of a case and its output, compared on sampled rows. */
typedef struct bench_check_in {
    const bench_case *c;
    const float *q, *k, *v, *o; /* dense [B,S,H,D]; with cu: packed [total, H, D] */
    int check_rows;             /* -1 = default rule, 0 = none */
    const int32_t *cu;          /* NULL, or [seqs + 1]: sequence s is rows [cu[s], cu[s+1]) of
                                 * q, k, v and o, checked as its own B = 1 problem, Sq = Sk */
    int seqs;
} bench_check_in;
void bench_check_forward(const bench_check_in *in, bench_result *r);

/* bench_timer.c: warmup, then up to env->reps timed runs of `fn` (which enqueues the op and
 * may return the event of its last command in *ev, or leave it NULL). On success *out holds
 * the medians; a failing status of fn or fcl_finish is returned as is. */
typedef fcl_status (*bench_enqueue_fn)(void *arg, cl_event *ev);
typedef struct bench_timing {
    int reps;        /* timed runs made */
    double ms_wall;  /* enqueue + fcl_finish, host clock */
    double ms_enqueue; /* the enqueue (the op's call) alone, host clock */
    double ms_event; /* CL_PROFILING_COMMAND_START..END of the event; NaN when unavailable */
    double ms_span;  /* device clock between markers around the call (run_span); NaN when unavailable */
    double ms_back_to_back; /* per call of env->back_to_back calls and one fcl_finish; 0: not measured */
} bench_timing;
fcl_status bench_time(const bench_env *env, bench_enqueue_fn fn, void *arg, bench_timing *out);
/* bench_time into r (reps, ms, ms_event); a library error is reported naming `op` and
 * returned as bench_lib_error's exit code, else 0. */
int bench_time_op(const bench_env *env, bench_enqueue_fn fn, void *arg, const char *op, bench_result *r);

/* bench_sgemm.c: times CLBlastSgemm (row-major n x n x n) on the env's queue. */
void bench_sgemm(const bench_env *env, long n, sgemm_result *r);

/* bench_precompile.c: fcl_precompile for --precompile OPS over the dtypes (--dtype, a comma
 * list; default f16), head dims (--d, a comma list; default 64,128), shapes (--b, --sq, --sk,
 * --hq, --hkv, --page-size, --weights) and features (--causal, --softcap, --mask, --alibi,
 * --bias); prints the time and the cache counters. Returns an exit code. */
int bench_precompile(const bench_env *env, const bench_opts *o);
/* The FCL_PRECOMPILE_* bits of an op family name of --precompile ("all": every one), else 0. */
unsigned bench_precompile_bit(const char *name);

/* bench_tune.c: for each head dim (--d, else 64 and 128), times every candidate tile setting of
 * the forward kernel that runs on this device (portable or tensor-core), of the tensor-core
 * backward where it runs and of decode (--op forward, backward or decode: that one alone),
 * checks each against the float64 reference, and stores the fastest that passes (TFLOP/s;
 * decode GB/s) with fcl_tuning_save. Exit code as bench_forward; BENCH_EXIT_WRONG when no
 * candidate passed. */
int bench_tune(const bench_env *env, const bench_opts *o);

/* bench_report.c */
void bench_print_header(const bench_env *env);
void bench_print_result(const bench_env *env, const bench_result *r);
void bench_print_sgemm(const bench_env *env, const sgemm_result *r);
/* Prints "flashcl-bench: what: STATUS: last error" to stderr; returns BENCH_EXIT_LIBRARY. */
int bench_lib_error(const bench_env *env, const char *what, fcl_status s);

/* bench_util.c */
double bench_now_ms(void);
double bench_median(double *x, int n); /* sorts x */
uint64_t bench_rng_next(uint64_t *state); /* splitmix64 */
/* Uniform values in [-1, 1), rounded to dtype so host and device data agree exactly. */
void bench_fill_random(float *x, size_t n, uint64_t seed, fcl_dtype dtype);
/* Host inputs: q [nq], k and v [nk] random (fixed seeds, rounded to dtype; with kv_period > 0
 * k and v repeat a random block of that many elements, for multi-GB caches), o [nq] NaN (a row
 * the kernel does not write fails the check). 0, or -1 when out of memory (then call free). */
int bench_host_alloc(bench_host *h, fcl_dtype dtype, size_t nq, size_t nk, size_t kv_period);
void bench_host_free(bench_host *h);
/* Writes x[n] (made by bench_host_alloc with `period`: x repeats its first `period` elements)
 * to t (a view too: fcl_tensor_write_raw scatters): the first period is converted to the
 * float dtype once and repeated as stored bytes; integer dtypes take fcl_tensor_write_f32. The
 * values written are the same either way. */
fcl_status bench_write_periodic(fcl_tensor t, const float *x, size_t n, size_t period);
/* A new logical [b, s, h, d] tensor (*out, owned by the caller); with bhsd, a strided view over
 * [b, h, s, d] storage (the view keeps its buffer). */
fcl_status bench_make_bshd(fcl_context ctx, fcl_dtype dt, int bhsd, int b, int s, int h, int d, fcl_tensor *out);
/* Visible (query, key) pairs of one (batch, head). */
double bench_visible_pairs(const bench_case *c);
/* FLOPs as FlashAttention reports them, and from the exact visible pairs. */
double bench_flops_convention(const bench_case *c);
double bench_flops_exact(const bench_case *c);
/* The case's causal, window and softcap as attention params (scale 0 = 1/sqrt(D)). */
fcl_attn_params bench_params_of(const bench_case *c);
/* Parses "f32"/"f16"/"bf16"; -1 when unknown. */
int bench_parse_dtype(const char *s);

#endif
