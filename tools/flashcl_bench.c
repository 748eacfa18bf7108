/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench: times flashcl ops on one device and checks them against the float64
 * reference; see bench_usage() for the options and bench.h for the file map. */
#include "bench.h"
#include "device_hint.h"
#include "tuning_print.h"

#include <stdlib.h>
#include <string.h>

/* An op of the table: runs the case(s) the options describe; returns an exit code. */
typedef int (*bench_op_fn)(const bench_env *env, const bench_opts *o);

typedef struct bench_op {
    const char *name;
    bench_op_fn run; /* NULL: not implemented yet */
} bench_op;

/* Worse of two exit codes (library error > wrong result > ok). */
static int worse(int a, int b)
{
    if (a == BENCH_EXIT_LIBRARY || b == BENCH_EXIT_LIBRARY)
        return BENCH_EXIT_LIBRARY;
    return a ? a : b;
}

/* The op's default case with the options' fields laid over it. */
static bench_case merge_case(bench_case c, const bench_opts *o)
{
    if (o->dtype >= 0) c.dtype = (fcl_dtype)o->dtype;
    if (o->b) c.b = o->b;
    if (o->sq) c.sq = c.sk = o->sq;
    if (o->sk) c.sk = o->sk;
    if (o->sk && !o->sq) c.sq = o->sk;
    if (o->hq) c.hq = o->hq;
    if (o->hkv) c.hkv = o->hkv;
    else if (o->hq) c.hkv = o->hq; /* --hq alone: MHA, as the PyTorch peers take it */
    if (o->d) c.d = o->d;
    c.causal = o->causal;
    if (o->have_window) {
        c.window_left = o->window_left;
        c.window_right = o->window_right;
    }
    c.softcap = o->softcap;
    c.bhsd = o->bhsd;
    return c;
}

/* Prints a finished case; its exit code. */
static int report(const bench_env *env, int rc, const bench_result *r)
{
    if (rc)
        return rc;
    bench_print_result(env, r);
    return r->ok ? BENCH_EXIT_OK : BENCH_EXIT_WRONG;
}

/* The dense ops: each runs one case into a result. */
typedef int (*bench_dense_fn)(const bench_env *env, const bench_case *c, bench_result *r);
typedef struct dense_op {
    bench_dense_fn run;
    bench_case (*defaults)(const bench_env *env);
} dense_op;
static const dense_op k_forward = {bench_forward, bench_forward_default};
static const dense_op k_backward = {bench_backward, bench_backward_default};
static const dense_op k_decode = {bench_decode, bench_decode_default};

static int run_case(const bench_env *env, const dense_op *op, const bench_case *c)
{
    bench_result r;
    memset(&r, 0, sizeof r);
    return report(env, op->run(env, c, &r), &r);
}

/* The packed ops: varlen, packed_qkv, varlen_backward, packed_qkv_backward. */
enum { PACK_VARLEN, PACK_QKV, PACK_VARLEN_BACKWARD, PACK_QKV_BACKWARD };

/* A case of the packed op `kind`. */
static int run_pack(const bench_env *env, int kind, const bench_case *c, int seqs, int max_len)
{
    bench_result r;
    memset(&r, 0, sizeof r);
    int rc = kind == PACK_QKV              ? bench_packed_qkv(env, c, seqs, max_len, &r)
             : kind == PACK_VARLEN_BACKWARD ? bench_varlen_backward(env, c, seqs, max_len, &r)
             : kind == PACK_QKV_BACKWARD    ? bench_packed_qkv_backward(env, c, seqs, max_len, &r)
                                            : bench_varlen(env, c, seqs, max_len, &r);
    return report(env, rc, &r);
}

static int usage_error(const char *msg)
{
    fprintf(stderr, "flashcl-bench: %s\n", msg);
    fprintf(stderr, "flashcl-bench: --help lists the options\n");
    return BENCH_EXIT_USAGE;
}

/* forward / backward / decode: the op's default case with the options laid over it. */
static int op_dense(const bench_env *env, const bench_opts *o, const dense_op *op)
{
    bench_case c = merge_case(op->defaults(env), o);
    if (c.hq % c.hkv) {
        char msg[80];
        snprintf(msg, sizeof msg, "Hq %d is not a multiple of Hkv %d", c.hq, c.hkv);
        return usage_error(msg);
    }
    return run_case(env, op, &c);
}

static int op_forward(const bench_env *env, const bench_opts *o)
{
    return op_dense(env, o, &k_forward);
}

static int op_backward(const bench_env *env, const bench_opts *o)
{
    return op_dense(env, o, &k_backward);
}

/* decode: --sq is the number of query rows (default 1), --sk the cache length. */
static int op_decode(const bench_env *env, const bench_opts *o)
{
    bench_opts d = *o;
    d.sq = d.sk = 0; /* merge_case ties sq and sk together; here they are independent */
    bench_case c = merge_case(bench_decode_default(env), &d);
    if (o->sq)
        c.sq = o->sq;
    if (o->sk)
        c.sk = o->sk;
    if (c.hq % c.hkv)
        return usage_error("--hq must be a multiple of --hkv");
    if (c.sq > c.sk)
        return usage_error("decode: --sq (query rows) must not exceed --sk (cache length)");
    c.causal = 1;
    return run_case(env, &k_decode, &c);
}

/* qkvo (qkvo_backward, qkvo_backward_saved): one self-attention layer (its gradients,
 * recomputed or from saved activations: mode as bench_qkvo); --sq is L, --d the model width,
 * --hq the heads. */
static int run_qkvo(const bench_env *env, const bench_opts *o, int mode)
{
    bench_case c = merge_case(bench_qkvo_default(env), o);
    if (!o->hq && c.d % c.hq)
        c.hq = 1;
    c.hkv = c.hq;
    if (c.d % c.hq)
        return usage_error("qkvo: --hq must divide --d");
    bench_result r;
    memset(&r, 0, sizeof r);
    return report(env, bench_qkvo(env, &c, o->weights >= 0 ? (fcl_dtype)o->weights : c.dtype, mode, &r), &r);
}

static int op_qkvo(const bench_env *env, const bench_opts *o)
{
    return run_qkvo(env, o, BENCH_QKVO_FORWARD);
}

static int op_qkvo_backward(const bench_env *env, const bench_opts *o)
{
    return run_qkvo(env, o, BENCH_QKVO_BACKWARD);
}

static int op_qkvo_backward_saved(const bench_env *env, const bench_opts *o)
{
    return run_qkvo(env, o, BENCH_QKVO_BACKWARD_SAVED);
}

static int op_copy(const bench_env *env, const bench_opts *o)
{
    (void)o;
    bench_copy(env, (size_t)(env->is_gpu ? 1024 : 256) << 20);
    return BENCH_EXIT_OK; /* the ceiling failing is reported, not an error of flashcl */
}

static int op_read(const bench_env *env, const bench_opts *o)
{
    (void)o;
    bench_read(env, (size_t)(env->is_gpu ? 1024 : 256) << 20);
    return BENCH_EXIT_OK; /* as op_copy */
}

/* varlen / packed_qkv / varlen_backward / packed_qkv_backward: their default case with the
 * options laid over it; Hkv follows Hq (MHA) unless --hkv is given. */
static int op_pack(const bench_env *env, const bench_opts *o, int kind)
{
    int seqs, max_len;
    bench_case c = merge_case(bench_pack_default(env, &seqs, &max_len), o);
    if (!o->hkv)
        c.hkv = c.hq;
    if (o->seqs)
        seqs = o->seqs;
    if (o->max_len)
        max_len = o->max_len;
    if (c.hq % c.hkv)
        return usage_error("--hq must be a multiple of --hkv");
    if ((int64_t)seqs * max_len > INT32_MAX)
        return usage_error("--seqs * --max-len must fit the I32 prefix sums (at most 2^31 - 1)");
    return run_pack(env, kind, &c, seqs, max_len);
}

static int op_varlen(const bench_env *env, const bench_opts *o)
{
    return op_pack(env, o, PACK_VARLEN);
}

static int op_packed_qkv(const bench_env *env, const bench_opts *o)
{
    return op_pack(env, o, PACK_QKV);
}

static int op_varlen_backward(const bench_env *env, const bench_opts *o)
{
    return op_pack(env, o, PACK_VARLEN_BACKWARD);
}

static int op_packed_qkv_backward(const bench_env *env, const bench_opts *o)
{
    return op_pack(env, o, PACK_QKV_BACKWARD);
}

static int op_sgemm(const bench_env *env, const bench_opts *o)
{
    sgemm_result r;
    bench_sgemm(env, o->sgemm_n ? o->sgemm_n : (env->is_gpu ? 8192 : 1024), &r);
    bench_print_sgemm(env, &r);
    return BENCH_EXIT_OK; /* the peer failing is reported, not an error of flashcl */
}

static const bench_op k_ops[] = {
    {"forward", op_forward}, {"sgemm", op_sgemm}, {"varlen", op_varlen},
    {"packed_qkv", op_packed_qkv}, {"backward", op_backward}, {"varlen_backward", op_varlen_backward},
    {"packed_qkv_backward", op_packed_qkv_backward}, {"decode", op_decode}, {"copy", op_copy}, {"read", op_read},
    {"qkvo", op_qkvo}, {"qkvo_backward", op_qkvo_backward},
    {"qkvo_backward_saved", op_qkvo_backward_saved},
};

static const bench_op *find_op(const char *name)
{
    for (size_t i = 0; i < sizeof k_ops / sizeof *k_ops; i++)
        if (strcmp(k_ops[i].name, name) == 0)
            return &k_ops[i];
    return NULL;
}

/*                 dtype     B  Sq    Sk    Hq  Hkv D    causal wl  wr  cap layout */
static const bench_case k_suite_cpu[] = {
    {FCL_F32,  1, 256,  256,  4,  2,  64,  0, -1, -1, 0, 0},
    {FCL_F32,  1, 256,  256,  4,  2,  128, 1, -1, -1, 0, 0},
    {FCL_F16,  1, 512,  512,  8,  2,  64,  1, -1, -1, 0, 0},
    {FCL_F16,  1, 512,  512,  8,  2,  128, 0, -1, -1, 0, 0},
    {FCL_BF16, 1, 512,  512,  8,  2,  64,  0, -1, -1, 0, 0},
    {FCL_BF16, 1, 512,  512,  8,  2,  128, 1, -1, -1, 0, 0},
};
static const bench_case k_suite_gpu[] = {
    {FCL_F16,  2, 1024, 1024, 16, 4,  128, 0, -1, -1, 0, 0},
    {FCL_F16,  2, 1024, 1024, 16, 4,  128, 1, -1, -1, 0, 0},
    {FCL_F16,  4, 4096, 4096, 16, 4,  64,  1, -1, -1, 0, 0},
    {FCL_BF16, 2, 2048, 2048, 16, 4,  128, 0, -1, -1, 0, 0},
    {FCL_BF16, 2, 2048, 2048, 16, 4,  128, 1, -1, -1, 0, 0},
    {FCL_F32,  2, 1024, 1024, 16, 4,  64,  0, -1, -1, 0, 0},
    {FCL_F32,  2, 1024, 1024, 16, 4,  128, 1, -1, -1, 0, 0},
};

/* Backward cases of the suite. */
static const bench_case k_backward_cpu[] = {
    {FCL_F16,  1, 256,  256,  4,  2,  64,  1, -1, -1, 0, 0},
};
static const bench_case k_backward_gpu[] = {
    {FCL_F16,  2, 1024, 1024, 16, 4,  128, 0, -1, -1, 0, 0},
    {FCL_F16,  2, 1024, 1024, 16, 4,  64,  1, -1, -1, 0, 0},
};

/* Decode cases of the suite (Sq = query rows, Sk = cache length). */
static const bench_case k_decode_cpu[] = {
    {FCL_F16,  1, 1,    4096, 32, 8,  128, 1, -1, -1, 0, 0},
};
static const bench_case k_decode_gpu[] = {
    {FCL_F16,  1, 1,   32768, 32, 8,  128, 1, -1, -1, 0, 0},
    {FCL_F16,  8, 1,   32768, 32, 8,  128, 1, -1, -1, 0, 0},
};

/* Packed cases of the suite (B, Sq, Sk unused): varlen, packed_qkv and their backwards (PACK_*). */
typedef struct suite_pack {
    int kind;
    bench_case c;
    int seqs, max_len;
} suite_pack;

/*                                          dtype     B  Sq Sk Hq  Hkv D   causal wl   wr   cap layout  seqs max */
static const suite_pack k_pack_cpu[] = {
    {PACK_VARLEN,          {FCL_F16,  1, 0, 0, 4,  2,  64, 1, -1,  -1,  0, 0}, 4,  128},
    {PACK_QKV,             {FCL_BF16, 1, 0, 0, 4,  4,  64, 0, 32,  32,  0, 0}, 4,  128},
    {PACK_VARLEN_BACKWARD, {FCL_F32,  1, 0, 0, 4,  2,  64, 1, -1,  -1,  0, 0}, 4,  128},
    {PACK_QKV_BACKWARD,    {FCL_F16,  1, 0, 0, 4,  4,  32, 1, -1,  -1,  0, 0}, 4,  128},
};
static const suite_pack k_pack_gpu[] = {
    {PACK_VARLEN,          {FCL_F16,  1, 0, 0, 12, 12, 64, 0, -1,  -1,  0, 0}, 64, 2048},
    {PACK_QKV,             {FCL_F16,  1, 0, 0, 12, 12, 64, 0, -1,  -1,  0, 0}, 64, 2048},
    {PACK_VARLEN_BACKWARD, {FCL_F16,  1, 0, 0, 12, 12, 64, 0, -1,  -1,  0, 0}, 64, 2048},
    {PACK_QKV_BACKWARD,    {FCL_F16,  1, 0, 0, 12, 12, 64, 0, -1,  -1,  0, 0}, 64, 2048},
};

/* The default suite: forward, packed, backward, decode and projection (qkvo) cases sized for
 * the device type, then the copy-bandwidth and SGEMM ceilings. */
static int run_suite(const bench_env *env, const bench_opts *o)
{
    const bench_case *cases = env->is_gpu ? k_suite_gpu : k_suite_cpu;
    size_t n = env->is_gpu ? sizeof k_suite_gpu / sizeof *k_suite_gpu
                           : sizeof k_suite_cpu / sizeof *k_suite_cpu;
    const suite_pack *packs = env->is_gpu ? k_pack_gpu : k_pack_cpu;
    size_t np = env->is_gpu ? sizeof k_pack_gpu / sizeof *k_pack_gpu
                            : sizeof k_pack_cpu / sizeof *k_pack_cpu;
    const bench_case *bwd = env->is_gpu ? k_backward_gpu : k_backward_cpu;
    size_t nb = env->is_gpu ? sizeof k_backward_gpu / sizeof *k_backward_gpu
                            : sizeof k_backward_cpu / sizeof *k_backward_cpu;
    int rc = BENCH_EXIT_OK;
    for (size_t i = 0; i < n; i++)
        rc = worse(rc, run_case(env, &k_forward, &cases[i]));
    for (size_t i = 0; i < np; i++)
        rc = worse(rc, run_pack(env, packs[i].kind, &packs[i].c, packs[i].seqs, packs[i].max_len));
    for (size_t i = 0; i < nb; i++)
        rc = worse(rc, run_case(env, &k_backward, &bwd[i]));
    const bench_case *dec = env->is_gpu ? k_decode_gpu : k_decode_cpu;
    size_t nd = env->is_gpu ? sizeof k_decode_gpu / sizeof *k_decode_gpu : sizeof k_decode_cpu / sizeof *k_decode_cpu;
    for (size_t i = 0; i < nd; i++)
        rc = worse(rc, run_case(env, &k_decode, &dec[i]));
    const bench_case layer = bench_qkvo_default(env);
    for (int i = 0; i < 2; i++) { /* one layer with f16 and with i8 (W8A16) weights */
        bench_result r;
        memset(&r, 0, sizeof r);
        rc = worse(rc, report(env, bench_qkvo(env, &layer, i ? FCL_I8 : FCL_F16, 0, &r), &r));
    }
    op_copy(env, o);
    return worse(rc, op_sgemm(env, o));
}

/* --tune --list / --reset: the device's stored tuned tiles, printed or forgotten. */
static int tune_list_or_reset(const bench_env *env, int reset)
{
    const char *dir = fcl_context_cache_dir(env->ctx);
    if (reset) {
        fcl_status st = fcl_tuning_reset(env->ctx);
        if (st != FCL_SUCCESS)
            return bench_lib_error(env, "--tune --reset", st);
        printf("tuned tiles of %s (%s) forgotten in %s\n", env->info.name, env->info.platform_name, dir);
        return BENCH_EXIT_OK;
    }
    printf("tuned tiles of %s (%s) in %s:\n", env->info.name, env->info.platform_name, dir ? dir : "(disk cache off)");
    return tools_print_tuned(stdout, env->ctx, "  ") < 0 ? BENCH_EXIT_LIBRARY : BENCH_EXIT_OK;
}

static void init_env(bench_env *env, const bench_opts *o)
{
    env->is_gpu = env->info.type == FCL_DEVICE_GPU || env->info.type == FCL_DEVICE_ACCELERATOR;
    env->reps = o->reps > 0 ? o->reps : (env->is_gpu ? 20 : 5);
    env->reps_auto = o->reps <= 0;
    env->warmup = o->warmup >= 0 ? o->warmup : (env->is_gpu ? 3 : 1);
    env->back_to_back = o->back_to_back;
    env->check_rows = o->check_rows;
    env->json = o->json;
    env->tune = o->tune || o->precompile; /* the header is the device line alone */
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_env env;
    int rc;
    /* one line at a time, also into a pipe or file: long cases show their progress */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (bench_parse_args(argc, argv, &o, &rc))
        return rc;
    const bench_op *op = o.op ? find_op(o.op) : NULL;
    if (op && !op->run) {
        fprintf(stderr, "flashcl-bench: op %s: not implemented yet\n", op->name);
        return BENCH_EXIT_USAGE;
    }
    memset(&env, 0, sizeof env);
    fcl_status st = fcl_context_create(o.device, &env.ctx);
    if (st == FCL_SUCCESS)
        st = fcl_context_device_info(env.ctx, &env.info);
    if (st) {
        fprintf(stderr, "flashcl-bench: opening the device: %s: %s\n", fcl_status_string(st),
                fcl_last_error(env.ctx));
        tools_device_hint(stderr, o.device, st);
        fcl_context_release(env.ctx);
        return BENCH_EXIT_LIBRARY;
    }
    init_env(&env, &o);
    tools_pocl_affinity_hint(stderr, &env.info);
    if (o.tune_list || o.tune_reset) {
        rc = tune_list_or_reset(&env, o.tune_reset);
        fcl_context_release(env.ctx);
        return rc;
    }
    bench_print_header(&env);
    if (o.precompile)
        rc = bench_precompile(&env, &o);
    else if (o.tune)
        rc = bench_tune(&env, &o);
    else if (op)
        rc = op->run(&env, &o);
    else
        rc = bench_opts_has_case(&o) ? op_forward(&env, &o) : run_suite(&env, &o);
    fcl_context_release(env.ctx);
    return rc;
}
