/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench command line: parsing, validation and the usage text. */
#include "bench.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

void bench_usage(FILE *f)
{
    fputs(
        "usage: flashcl-bench [options]\n"
        "  With no case options: a small default suite on the device (forward cases in f32,\n"
        "  f16 and bf16, causal and not, D 64 and 128; one varlen, one packed_qkv, one\n"
        "  varlen_backward and one packed_qkv_backward case;\n"
        "  backward, decode and qkvo cases) plus the copy bandwidth and CLBlast SGEMM as\n"
        "  ceilings.\n"
        "\n"
        "  --op NAME          forward | backward | decode | varlen | packed_qkv |\n"
        "                     varlen_backward | packed_qkv_backward | qkvo |\n"
        "                     qkvo_backward | qkvo_backward_saved | sgemm | copy | read\n"
        "  --weights T        qkvo, qkvo_backward(_saved): weight dtype f32 | f16 | bf16 | i8 (i8 with\n"
        "                     f32 row scales;\n"
        "                     default the activations' --dtype)\n"
        "  --device SEL       device selector (as FLASHCL_DEVICE: gpu, cpu, pocl, 0:1, ...)\n"
        "  --dtype T          f32 | f16 | bf16\n"
        "  --b N --sq N --sk N --hq N --hkv N --d N\n"
        "                     shape (unset values take the op's default case; --sq alone\n"
        "                     sets --sk too, and the other way round; --hq alone sets\n"
        "                     --hkv to it: MHA, as scripts/sdpa_peer.py and cpu_peer.py take it)\n"
        "  --seqs N           varlen, packed_qkv and their backwards: N sequences packed back to\n"
        "                     back (default 64 on a GPU, 8 on a CPU) of lengths drawn uniformly\n"
        "                     (fixed seed)\n"
        "  --max-len N        from [1, N] (default 2048 on a GPU, 256 on a CPU); each sequence\n"
        "                     attends to itself (Sq = Sk). Default H 12 (MHA), D 64, f16;\n"
        "                     --hkv sets GQA for varlen (packed_qkv and its backward: one H,\n"
        "                     --hq). The table shows\n"
        "                     B = seqs, Sq = Sk = the longest sequence, tok = packed tokens\n"
        "  --causal           causal mask (bottom-right aligned)\n"
        "  --window L,R       sliding window, -1 = unbounded side\n"
        "  --softcap X        soft-capping (0 = off)\n"
        "  --layout bshd|bhsd storage of Q/K/V/O and decode's caches (bhsd is passed as a\n"
        "                     strided view)\n"
        "  --reps N           timed runs (median reported; JSON ms: the call and the wait,\n"
        "                     ms_enqueue: the call alone; ms_span: as many runs again, the\n"
        "                     device clock between markers before and after the call, as\n"
        "                     CUDA events around a call measure); --warmup N untimed runs first\n"
        "  --back-to-back N   after the timed runs, N calls enqueued without a wait between\n"
        "                     them, then one fcl_finish: JSON field ms_back_to_back, the wall\n"
        "                     time per call (host and launch costs overlap the device's work;\n"
        "                     against ms it shows the cost of the wait). Default 0: off\n"
        "  --check-rows N     query rows compared with the float64 reference (default: all\n"
        "                     rows when B*Sq*Hq (tok*Hq when packed) <= 4096, else 64\n"
        "                     random rows; 0 = none)\n"
        "  --sgemm-n N        CLBlast SGEMM size M=N=K (default 1024 on a CPU, 8192 on a GPU)\n"
        "  --json             one JSON object per line per case instead of the table\n"
        "  --tune             search the tiles of the forward kernel, of decode, of the GPU\n"
        "                     backward kernels and of the projections' portable GEMM (--op\n"
        "                     forward, backward, decode or qkvo: only that one) for this device\n"
        "                     (head dims --d, default 64 and 128; --dtype, default f16): every\n"
        "                     candidate is timed and checked against the float64 reference; the\n"
        "                     fastest that passes (TFLOP/s; decode: GB/s on B 8, Sk 8192, Hq 32,\n"
        "                     Hkv 8 on a GPU, B 1, Sk 4096, Hq 8, Hkv 2 on a CPU, one query row;\n"
        "                     GEMM: the qkvo layer's TFLOP/s with FLASHCL_GEMM=own) is stored in\n"
        "                     the disk cache folder and used from then on (fcl_tuning_save).\n"
        "                     Progress on stderr, one result line per kernel and head dim\n"
        "  --tune --list      print the tuned tiles stored for this device (as flashcl-info)\n"
        "  --tune --reset     forget them (the built-in table decides again)\n"
        "  --version          the version\n"
        "  --precompile OPS   build every kernel variant that calls of the op families OPS\n"
        "                     (comma list of forward, varlen, packed_qkv, decode, qkvo, backward:\n"
        "                     the gradients of those chosen, or all) make, into the cache folder,\n"
        "                     and run nothing else (fcl_precompile): for --dtype T[,T...]\n"
        "                     (default f16) and head dims --d N[,N...] (default 64,128), --b,\n"
        "                     --sq, --sk (forward: Sq, Sk; varlen, packed_qkv: every sequence's\n"
        "                     lengths; decode: query rows per step and the cache length; qkvo:\n"
        "                     Lq; default 1, 512, 512; decode alone: 1, 4096), --hq, --hkv\n"
        "                     (default 8, --hq), --weights (qkvo, default --dtype), --page-size N\n"
        "                     (decode: a paged cache), and the features --causal, --softcap X,\n"
        "                     --mask (key mask; decode: its mask form), --alibi, --bias (qkvo).\n"
        "                     Prints the time and the program-cache counters\n"
        "  -h, --help         this text\n"
        "\n"
        "  Time (ms): median wall clock of one call + fcl_finish; dev_ms / ms_event: median of\n"
        "  the op's profiling event. Default reps: 20 on a GPU, 5 on a CPU, fewer once a case's\n"
        "  timed runs pass 4 s. TFLOP/s (from ms): 4*B*Hq*Sq*Sk*D, halved when causal\n"
        "  (FlashAttention's convention); with a sliding window, and in the JSON field\n"
        "  tflops_exact, 4*B*Hq*D*(visible query/key pairs). varlen and packed_qkv always use\n"
        "  the exact count, 4*Hq*D*(visible pairs summed over the sequences), for both, and\n"
        "  check each sampled row against its own sequence alone. ok: max error <= 2 * naive\n"
        "  error + 1e-5 (naive = float32 math rounding to the dtype) and no NaN in O.\n"
        "  backward: TFLOP/s count 2.5x the forward's FLOPs; wall clock only (several kernels);\n"
        "  checked on batch 0's first KV-head group (every gradient element) against the\n"
        "  float64 reference: max error <= 3 * naive error + 1e-5; unchecked when that\n"
        "  group's Sq*Sk*D*(Hq/Hkv) > 2e9.\n"
        "  decode: --sq query rows (default 1, causal among themselves), --sk the cache\n"
        "  length (a full contiguous cache, host length); the GB/s column counts the K and V\n"
        "  bytes read (wall clock); 16 rows checked against the float64 reference (2x rule).\n"
        "  copy: clEnqueueCopyBuffer of 1 GiB (GPU) / 256 MiB, GB/s of bytes read + written.\n"
        "  qkvo: one self-attention layer, X [--sq, --d], --hq heads, biases; ms is the whole\n"
        "  call, ms_attention (JSON) the attention core alone on the same shapes; TFLOP/s from\n"
        "  8*L*D^2 + 4*L^2*D (halved attention part when causal); 16 rows checked (2x rule).\n"
        "  Exit: 0 ok, 1 library error, 2 usage, 3 a flashcl result failed the check.\n",
        f);
}

/* Strict integer in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *s, float lo, float *out)
{
    char *end = NULL;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= lo) || v > 1e30f)
        return -1;
    *out = v;
    return 0;
}

static int parse_window(const char *s, bench_opts *o)
{
    const char *comma = strchr(s, ',');
    char left[32];
    long l, r;
    if (!comma || (size_t)(comma - s) >= sizeof left)
        return -1;
    memcpy(left, s, (size_t)(comma - s));
    left[comma - s] = '\0';
    if (parse_int(left, -1, INT_MAX, &l) || parse_int(comma + 1, -1, INT_MAX, &r))
        return -1;
    o->window_left = (int)l;
    o->window_right = (int)r;
    o->have_window = 1;
    return 0;
}

/* An integer option stored into an int field: [lo, INT_MAX]. */
static int set_int(const char *v, long lo, int *field)
{
    long x;
    if (parse_int(v, lo, INT_MAX, &x))
        return -1;
    *field = (int)x;
    return 0;
}

static const char *const k_ops[] = {"forward",       "sgemm",         "varlen", "packed_qkv",
                                    "backward",      "varlen_backward", "packed_qkv_backward",
                                    "decode",        "copy",          "read",   "qkvo",
                                    "qkvo_backward", "qkvo_backward_saved"};

static int set_op(const char *v, bench_opts *o)
{
    for (size_t i = 0; i < sizeof k_ops / sizeof *k_ops; i++)
        if (strcmp(v, k_ops[i]) == 0) {
            o->op = k_ops[i];
            return 0;
        }
    return -1;
}

static int set_layout(const char *v, bench_opts *o)
{
    if (strcmp(v, "bshd") && strcmp(v, "bhsd"))
        return -1;
    o->bhsd = strcmp(v, "bhsd") == 0;
    return 0;
}

unsigned bench_precompile_bit(const char *name)
{
    static const struct { const char *name; unsigned bit; } families[] = {
        {"forward", FCL_PRECOMPILE_FORWARD}, {"varlen", FCL_PRECOMPILE_VARLEN},
        {"packed_qkv", FCL_PRECOMPILE_PACKED_QKV}, {"decode", FCL_PRECOMPILE_DECODE},
        {"qkvo", FCL_PRECOMPILE_QKVO}, {"backward", FCL_PRECOMPILE_BACKWARD}, {"all", FCL_PRECOMPILE_ALL}};
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (!strcmp(name, families[i].name))
            return families[i].bit;
    return 0;
}

/* A comma list of kind 0 (dtypes), 1 (head dims 1..256) or 2 (--precompile op families):
 * 0 when every item is valid, else -1. */
static int check_list(const char *v, int kind)
{
    char item[32];
    for (const char *p = v;;) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        long x;
        if (len == 0 || len >= sizeof item)
            return -1;
        memcpy(item, p, len);
        item[len] = '\0';
        if ((kind == 0 && bench_parse_dtype(item) < 0) || (kind == 1 && parse_int(item, 1, 256, &x)) ||
            (kind == 2 && !bench_precompile_bit(item)))
            return -1;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* Applies "--name value"; returns 0, or -1 for a bad value. */
static int apply_value(const char *name, const char *v, bench_opts *o)
{
    long x;
    if (!strcmp(name, "op")) return set_op(v, o);
    if (!strcmp(name, "device")) { o->device = v; return *v ? 0 : -1; }
    if (!strcmp(name, "dtype") && strchr(v, ',')) { o->dtypes = v; return check_list(v, 0); }
    if (!strcmp(name, "d") && strchr(v, ',')) { o->dims = v; return check_list(v, 1); }
    if (!strcmp(name, "precompile")) { o->precompile = v; return check_list(v, 2); }
    if (!strcmp(name, "page-size")) return set_int(v, 1, &o->page_size);
    if (!strcmp(name, "dtype")) return (o->dtype = bench_parse_dtype(v)) < 0 ? -1 : 0;
    if (!strcmp(name, "b")) return set_int(v, 1, &o->b);
    if (!strcmp(name, "sq")) return set_int(v, 1, &o->sq);
    if (!strcmp(name, "sk")) return set_int(v, 1, &o->sk);
    if (!strcmp(name, "hq")) return set_int(v, 1, &o->hq);
    if (!strcmp(name, "hkv")) return set_int(v, 1, &o->hkv);
    if (!strcmp(name, "d")) return set_int(v, 1, &o->d);
    if (!strcmp(name, "window")) return parse_window(v, o);
    if (!strcmp(name, "softcap")) return parse_float(v, 0.0f, &o->softcap);
    if (!strcmp(name, "layout")) return set_layout(v, o);
    if (!strcmp(name, "weights")) {
        if (!strcmp(v, "i8")) { o->weights = FCL_I8; return 0; }
        return (o->weights = bench_parse_dtype(v)) < 0 ? -1 : 0;
    }
    if (!strcmp(name, "reps")) return set_int(v, 1, &o->reps);
    if (!strcmp(name, "warmup")) return set_int(v, 0, &o->warmup);
    if (!strcmp(name, "back-to-back")) return set_int(v, 0, &o->back_to_back);
    if (!strcmp(name, "check-rows")) return set_int(v, 0, &o->check_rows);
    if (!strcmp(name, "seqs")) return set_int(v, 1, &o->seqs);
    if (!strcmp(name, "max-len")) return set_int(v, 1, &o->max_len);
    if (!strcmp(name, "sgemm-n")) {
        if (parse_int(v, 1, 1L << 20, &x))
            return -1;
        o->sgemm_n = x;
        return 0;
    }
    return -2; /* not a value option */
}

static int apply_flag(const char *name, bench_opts *o)
{
    if (!strcmp(name, "causal")) o->causal = 1;
    else if (!strcmp(name, "json")) o->json = 1;
    else if (!strcmp(name, "tune")) o->tune = 1;
    else if (!strcmp(name, "list")) o->tune_list = 1;
    else if (!strcmp(name, "reset")) o->tune_reset = 1;
    else if (!strcmp(name, "mask")) o->mask = 1;
    else if (!strcmp(name, "alibi")) o->alibi = 1;
    else if (!strcmp(name, "bias")) o->bias = 1;
    else return -1;
    return 0;
}

/* What a value option accepts, for its error message. */
static const char *value_rule(const char *name)
{
    static const struct {
        const char *name, *rule;
    } rules[] = {
        {"op", "forward, backward, decode, varlen, packed_qkv, varlen_backward, packed_qkv_backward, qkvo, "
               "qkvo_backward, qkvo_backward_saved, sgemm, copy or read"},
        {"device", "a device selector: gpu, cpu, pocl, rusticl, intel, nvidia, or P:D as flashcl-info lists"},
        {"dtype", "f32, f16 or bf16"},
        {"weights", "f32, f16, bf16 or i8"},
        {"layout", "bshd or bhsd"},
        {"window", "L,R: two integers >= -1 (-1: unbounded side)"},
        {"softcap", "a number >= 0 (0: off)"},
        {"warmup", "an integer in [0, 2147483647]"},
        {"back-to-back", "an integer in [0, 2147483647]"},
        {"check-rows", "an integer in [0, 2147483647]"},
        {"sgemm-n", "an integer in [1, 1048576]"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++)
        if (!strcmp(rules[i].name, name))
            return rules[i].rule;
    return "an integer in [1, 2147483647]"; /* b, sq, sk, hq, hkv, d, reps, seqs, max-len */
}

static void defaults(bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->dtype = -1;
    o->window_left = o->window_right = -1;
    o->reps = o->warmup = o->check_rows = -1;
    o->weights = -1;
}

static int fail(const char *msg, const char *arg, int *exit_code)
{
    fprintf(stderr, "flashcl-bench: %s%s%s\n", msg, *arg ? ": " : "", arg);
    fprintf(stderr, "flashcl-bench: --help lists the options\n");
    *exit_code = BENCH_EXIT_USAGE;
    return -1;
}

/* Parses one argument (and maybe its value); returns how many argv entries it used, or -1. */
static int parse_one(int argc, char **argv, int i, bench_opts *o, int *exit_code)
{
    const char *a = argv[i];
    char name[32];
    if (strncmp(a, "--", 2) != 0)
        return fail("unexpected argument", a, exit_code);
    const char *eq = strchr(a + 2, '=');
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (len >= sizeof name)
        return fail("unknown option", a, exit_code);
    memcpy(name, a + 2, len);
    name[len] = '\0';
    if (!eq && apply_flag(name, o) == 0)
        return 1;
    const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
    int rc = v ? apply_value(name, v, o) : apply_value(name, "", o);
    if (rc == -2)
        return fail("unknown option", a, exit_code);
    if (!v)
        return fail("missing value for", a, exit_code);
    if (rc) {
        char what[192];
        snprintf(what, sizeof what, "--%s takes %s, not \"%s\"", name, value_rule(name), v);
        return fail(what, "", exit_code);
    }
    return eq ? 1 : 2;
}

int bench_opts_has_case(const bench_opts *o)
{
    return o->dtype >= 0 || o->b || o->sq || o->sk || o->hq || o->hkv || o->d || o->causal ||
           o->have_window || o->softcap > 0 || o->bhsd;
}

int bench_parse_args(int argc, char **argv, bench_opts *o, int *exit_code)
{
    defaults(o);
    *exit_code = BENCH_EXIT_OK;
    for (int i = 1; i < argc;) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            bench_usage(stdout);
            return -1;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("flashcl-bench %s\n", fcl_version_string());
            return -1;
        }
        int used = parse_one(argc, argv, i, o, exit_code);
        if (used < 0)
            return -1;
        i += used;
    }
    if ((o->tune_list || o->tune_reset) && !o->tune)
        return fail("--list and --reset go with --tune", "", exit_code);
    if (o->tune_list && o->tune_reset)
        return fail("--tune takes --list or --reset, not both", "", exit_code);
    if (o->hq && o->hkv && o->hq % o->hkv)
        return fail("--hq must be a multiple of --hkv", "", exit_code);
    if (!o->precompile && (o->dtypes || o->dims || o->mask || o->alibi || o->bias || o->page_size))
        return fail("comma lists for --dtype and --d, --mask, --alibi, --bias and --page-size need --precompile",
                    "", exit_code);
    if (o->precompile && (o->op || o->tune))
        return fail("--precompile takes its op families itself: no --op or --tune", "", exit_code);
    const int fused = o->op && (!strcmp(o->op, "packed_qkv") || !strcmp(o->op, "packed_qkv_backward"));
    const int packed = fused || (o->op && (!strcmp(o->op, "varlen") || !strcmp(o->op, "varlen_backward")));
    if ((o->seqs || o->max_len) && !packed)
        return fail("--seqs and --max-len need --op varlen, packed_qkv, varlen_backward or packed_qkv_backward", "",
                    exit_code);
    if (fused && o->hkv)
        return fail("packed_qkv and packed_qkv_backward have one head count: give --hq only", "", exit_code);
    if (packed && (o->b || o->sq || o->sk || o->bhsd))
        return fail("--b, --sq, --sk and --layout do not apply to varlen, packed_qkv and their backwards (use --seqs "
                    "and --max-len)", "", exit_code);
    return 0;
}
