/* SPDX-License-Identifier: Apache-2.0 */
/* flashcl-bench output: a table (one line per case) or one JSON object per line. */
#include "bench.h"

#include <math.h>
#include <string.h>

#define ROW_FMT "%-14s %-20.20s %-5s %3s %6s %6s %4s %4s %4s %-26s %4s %9s %9s %9s %9s %9s %9s %-3s %s\n"

void bench_print_header(const bench_env *env)
{
    if (env->json)
        return;
    printf("# device: %s (%s, %s), %u compute units; flashcl %s\n", env->info.name,
           env->info.platform_name, fcl_device_type_name(env->info.type), env->info.compute_units,
           fcl_version_string());
    if (env->tune)
        return; /* the tuner prints its own lines */
    printf("# reps %d%s, warmup %d; ms: median wall time of call + fcl_finish; dev_ms: median\n"
           "# device time of the op's (last) event; TFLOP/s and GB/s (decode: K and V read) from ms\n", env->reps,
           env->reps_auto ? " (fewer once a case's timed runs pass 4 s)" : "", env->warmup);
    printf(ROW_FMT, "op", "device", "dtype", "B", "Sq", "Sk", "Hq", "Hkv", "D", "flags", "reps",
           "ms", "dev_ms", "TFLOP/s", "GB/s", "max_err", "bound", "ok", "rows");
}

/* "causal,w=L,R,cap=X,bhsd,tok=T" or "-" (tok: packed tokens of varlen / packed_qkv). */
static void flags_of(const bench_result *r, char *buf, size_t n)
{
    const bench_case *c = &r->c;
    size_t len = 0;
    buf[0] = '\0';
    if (c->causal)
        len += (size_t)snprintf(buf + len, n - len, "causal,");
    if (len < n && (c->window_left >= 0 || c->window_right >= 0))
        len += (size_t)snprintf(buf + len, n - len, "w=%d,%d,", c->window_left, c->window_right);
    if (len < n && c->softcap > 0)
        len += (size_t)snprintf(buf + len, n - len, "cap=%g,", c->softcap);
    if (len < n && c->bhsd)
        len += (size_t)snprintf(buf + len, n - len, "bhsd,");
    if (len < n && r->seqs)
        len += (size_t)snprintf(buf + len, n - len, "tok=%ld,", r->total_q);
    if (len < n && !strncmp(r->op, "qkvo", 4))
        len += (size_t)snprintf(buf + len, n - len, "weights=%s,", fcl_dtype_name((fcl_dtype)r->wdtype));
    if (len == 0)
        snprintf(buf, n, "-");
    else if (len <= n)
        buf[len - 1] = '\0'; /* drop the trailing comma */
}

static void fmt_num(char *buf, size_t n, const char *fmt, double x)
{
    if (isnan(x))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, fmt, x);
}

/* Writes s as a JSON string. */
static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* Writes ,"key":x (null when not finite). */
static void json_num(const char *key, const char *fmt, double x)
{
    printf(",\"%s\":", key);
    if (isfinite(x))
        printf(fmt, x);
    else
        printf("null");
}

/* Storage of Q/K/V/O: bshd / bhsd, packed thd (varlen) or t3hd (fused QKV). */
static const char *layout_of(const bench_result *r)
{
    if (r->seqs)
        return strcmp(r->op, "packed_qkv") == 0 ? "t3hd" : "thd";
    return r->c.bhsd ? "bhsd" : "bshd";
}

static void print_result_json(const bench_env *env, const bench_result *r)
{
    const bench_case *c = &r->c;
    printf("{\"op\":");
    json_string(r->op);
    printf(",\"device\":");
    json_string(env->info.name);
    printf(",\"platform\":");
    json_string(env->info.platform_name);
    printf(",\"dtype\":\"%s\",\"b\":%d,\"sq\":%d,\"sk\":%d,\"hq\":%d,\"hkv\":%d,\"d\":%d",
           fcl_dtype_name(c->dtype), c->b, c->sq, c->sk, c->hq, c->hkv, c->d);
    printf(",\"causal\":%s,\"window_left\":%d,\"window_right\":%d", c->causal ? "true" : "false",
           c->window_left, c->window_right);
    json_num("softcap", "%g", c->softcap);
    printf(",\"layout\":\"%s\",\"reps\":%d", layout_of(r), r->reps);
    if (strcmp(r->op, "decode") != 0) /* the forward kernel that ran (backward: its recompute) */
        printf(",\"forward_path\":\"%s\"",
               fcl_attention_forward_path(env->ctx, c->dtype, strncmp(r->op, "qkvo", 4) ? c->d : c->d / c->hq));
    else /* the decode form that ran: the bench's caches are contiguous, aligned, without a mask */
        printf(",\"decode_path\":\"%s\"", fcl_attention_decode_path(env->ctx, c->dtype, c->d));
    if (strstr(r->op, "backward")) /* the dK/dV and dQ kernels that ran */
        printf(",\"backward_path\":\"%s\"",
               fcl_attention_backward_path(env->ctx, c->dtype, strncmp(r->op, "qkvo", 4) ? c->d : c->d / c->hq));
    if (r->seqs)
        printf(",\"seqs\":%d,\"total_q\":%ld,\"total_k\":%ld,\"max_len\":%d", r->seqs, r->total_q,
               r->total_k, r->max_len);
    json_num("ms", "%.6g", r->ms);
    json_num("ms_enqueue", "%.6g", r->ms_enqueue);
    json_num("ms_event", "%.6g", r->ms_event);
    json_num("ms_span", "%.6g", r->ms_span);
    json_num("ms_back_to_back", "%.6g", r->ms_back_to_back > 0.0 ? r->ms_back_to_back : NAN);
    json_num("tflops", "%.6g", r->tflops);
    json_num("tflops_exact", "%.6g", r->tflops_exact);
    json_num("tflops_event", "%.6g", r->tflops_event);
    if (r->gbps > 0)
        json_num("gbps", "%.6g", r->gbps);
    if (!strncmp(r->op, "qkvo", 4)) {
        printf(",\"weights\":\"%s\",\"projection_path\":\"%s\"", fcl_dtype_name((fcl_dtype)r->wdtype),
               fcl_projection_path(env->ctx, c->dtype, (fcl_dtype)r->wdtype));
        json_num("ms_attention", "%.6g", r->ms_attention);
    }
    json_num("max_err", "%.6e", r->max_err);
    json_num("err_bound", "%.6e", r->err_bound);
    printf(",\"has_nan\":%s,\"ok\":%s,\"rows_checked\":%ld,\"rows_total\":%ld}\n",
           r->has_nan ? "true" : "false", r->ok ? "true" : "false", r->rows_checked, r->rows_total);
}

void bench_print_result(const bench_env *env, const bench_result *r)
{
    const bench_case *c = &r->c;
    char b[16], sq[16], sk[16], hq[16], hkv[16], d[16], flags[64], reps[16], ms[32], dms[32], tf[32], gb[32],
        err[32], bound[32], rows[48];
    if (env->json) {
        print_result_json(env, r);
        return;
    }
    snprintf(b, sizeof b, "%d", c->b);
    snprintf(sq, sizeof sq, "%d", c->sq);
    snprintf(sk, sizeof sk, "%d", c->sk);
    snprintf(hq, sizeof hq, "%d", c->hq);
    snprintf(hkv, sizeof hkv, "%d", c->hkv);
    snprintf(d, sizeof d, "%d", c->d);
    flags_of(r, flags, sizeof flags);
    snprintf(reps, sizeof reps, "%d", r->reps);
    fmt_num(ms, sizeof ms, "%.3f", r->ms);
    fmt_num(dms, sizeof dms, "%.3f", r->ms_event);
    fmt_num(tf, sizeof tf, "%.4g", r->gbps > 0 ? NAN : r->tflops); /* decode: GB/s only */
    fmt_num(gb, sizeof gb, "%.4g", r->gbps > 0 ? r->gbps : NAN);
    if (r->has_nan)
        snprintf(err, sizeof err, "NaN");
    else
        fmt_num(err, sizeof err, "%.2e", r->max_err);
    fmt_num(bound, sizeof bound, "%.2e", r->err_bound);
    snprintf(rows, sizeof rows, "%ld/%ld", r->rows_checked, r->rows_total);
    printf(ROW_FMT, r->op, env->info.name, fcl_dtype_name(c->dtype), b, sq, sk, hq, hkv, d, flags,
           reps, ms, dms, tf, gb, err, bound, r->ok ? "yes" : "NO", rows);
    fflush(stdout);
}

int bench_lib_error(const bench_env *env, const char *what, fcl_status s)
{
    fprintf(stderr, "flashcl-bench: %s: %s: %s\n", what, fcl_status_string(s), fcl_last_error(env->ctx));
    return BENCH_EXIT_LIBRARY;
}

void bench_print_sgemm(const bench_env *env, const sgemm_result *r)
{
    char shape[48], reps[16], ms[32], dms[32], tf[32], status[32];
    if (env->json) {
        printf("{\"op\":\"clblast_sgemm\",\"device\":");
        json_string(env->info.name);
        printf(",\"m\":%ld,\"n\":%ld,\"k\":%ld,\"reps\":%d", r->m, r->n, r->k, r->reps);
        json_num("ms", "%.6g", r->ok ? r->ms : NAN);
        json_num("ms_event", "%.6g", r->ok ? r->ms_event : NAN);
        json_num("tflops", "%.6g", r->ok ? r->tflops : NAN);
        printf(",\"ok\":%s,\"status\":%d}\n", r->ok ? "true" : "false", r->status);
        fflush(stdout);
        return;
    }
    snprintf(shape, sizeof shape, "m=n=k=%ld", r->m);
    snprintf(reps, sizeof reps, "%d", r->reps);
    fmt_num(ms, sizeof ms, "%.3f", r->ok ? r->ms : NAN);
    fmt_num(dms, sizeof dms, "%.3f", r->ok ? r->ms_event : NAN);
    fmt_num(tf, sizeof tf, "%.4g", r->ok ? r->tflops : NAN);
    snprintf(status, sizeof status, "status %d", r->status);
    printf(ROW_FMT, "clblast_sgemm", env->info.name, "f32", "-", "-", "-", "-", "-", "-", shape, reps,
           ms, dms, tf, "-", "-", "-", r->ok ? "yes" : "NO", r->ok ? "-" : status);
    fflush(stdout);
}
