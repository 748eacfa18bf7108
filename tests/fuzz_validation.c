/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target over flashcl's validation layer and tensor geometry (LLVMFuzzerTestOneInput: a
 * libFuzzer binary when built with FLASHCL_FUZZ, or driven by fuzz_loop.c's seeded loop).
 *
 * The first byte picks a mode. Geometry mode reads tensor descriptions (dtype, dims, strides,
 * offset) from the input and passes them to fcl_tensor_wrap / _view / _create, checking each
 * answer against the documented rule (accepted exactly when every element of the view lies in
 * the buffer and numel x element size fits in int64), then round-trips accepted small views
 * through the host copies and checks that no byte outside the view changed. Op mode takes one
 * op's valid call (a template: small F32 tensors, each at the start of its own sentinel-filled
 * buffer) and applies up to 8 mutations read from the input (a tensor's dtype, rank, a dim,
 * a stride, its offset or buffer, NULL; a params field; a scalar argument; garbage index
 * data), then calls the op. A rejected call must return an error with a message, give no
 * event and leave every buffer bit-identical; an accepted one must finish and leave every byte
 * outside its outputs' views as it was. Any violation aborts (libFuzzer reports it). Calls
 * whose tensors hold more than MAX_NUMEL elements are not run (they would be slow), so the op
 * checks of huge shapes are not reached here; geometry mode covers huge shapes.
 */
#include <flashcl/flashcl.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_BUFS = 12, BUF_BYTES = 8192, MAX_T = 24, MAX_NUMEL = 4096, MAX_MUTATIONS = 8 };

/* ------------------------------------------------------------------ input reader */

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

/* The next byte, 0 past the end. */
static unsigned next(reader *r)
{
    if (r->n == 0)
        return 0;
    r->n--;
    return *r->p++;
}

/* Values that sit on the checks' edges, picked by one byte. */
static const int64_t interesting[] = {
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 64, 255, 256, 257, 1023, 1024, 4096, 65535,
    65536, -1, -2, -3, INT32_MAX / 2, INT32_MAX / 2 + 1, INT32_MAX, (int64_t)INT32_MAX + 1, INT32_MIN,
    (int64_t)1 << 40, ((int64_t)1 << 40) + 1, (int64_t)1 << 61, (int64_t)1 << 62, INT64_MAX, INT64_MAX - 1,
    INT64_MIN, 4098, 538037401, 32681, (int64_t)1 << 31, ((int64_t)1 << 31) - 1, 3 * ((int64_t)1 << 30)};
#define N_INTERESTING (sizeof interesting / sizeof *interesting)

static int64_t next_i64(reader *r)
{
    const unsigned b = next(r);
    if (b < 2 * N_INTERESTING)
        return interesting[b % N_INTERESTING];
    return (int64_t)(b - 2 * N_INTERESTING); /* small values */
}

static int next_int(reader *r)
{
    const int64_t v = next_i64(r);
    return v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : (int)v;
}

static float next_float(reader *r)
{
    static const float values[] = {0.0f, 1.0f, -1.0f, 0.5f, 0.125f, 3.0f, 1e-38f, 1e38f, -1e38f, 30.0f};
    const unsigned b = next(r);
    if (b < 10)
        return values[b];
    if (b == 10)
        return NAN;
    if (b == 11)
        return INFINITY;
    if (b == 12)
        return -INFINITY;
    return (float)b / 64.0f;
}

/* ------------------------------------------------------------------ checks */

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_validation: %s (%s)\n", what, detail ? detail : "");
    abort();
}

/* A call's message: a sentence (a few letters), never empty. */
static void check_message(const char *msg, const char *what)
{
    int letters = 0;
    for (const char *p = msg; p && *p; p++)
        letters += (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z');
    if (letters < 5)
        fail("an error without a message", what);
}

/* Whether the view fits by the documented rule, computed in 128-bit arithmetic: dtype known,
 * 1..4 dims of 1..2^40, strides >= 0 with the last 1, offset >= 0, numel x element size <=
 * INT64_MAX, and every element inside the buffer's `elems` elements. */
static int view_valid(fcl_dtype dt, int ndim, const int64_t *shape, const int64_t *strides, __int128 offset,
                      uint64_t buffer_bytes)
{
    const size_t es = fcl_dtype_size(dt);
    if (es == 0 || ndim < 1 || ndim > 4 || offset < 0)
        return 0;
    __int128 numel = 1, last = offset;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1 || shape[i] > ((int64_t)1 << 40))
            return 0;
        numel *= shape[i];
        if (numel > INT64_MAX) /* past any element size's limit; stops before __int128 overflows */
            return 0;
    }
    __int128 dense = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        const __int128 st = strides ? strides[i] : dense;
        if (st < 0)
            return 0;
        last += (shape[i] - 1) * st;
        dense *= shape[i];
    }
    if (strides && strides[ndim - 1] != 1)
        return 0;
    return numel * (__int128)es <= INT64_MAX && last < (__int128)(buffer_bytes / es);
}

/* ------------------------------------------------------------------ device state */

static fcl_context ctx;
static cl_mem bufs[N_BUFS];
static uint8_t sentinel[N_BUFS][BUF_BYTES];

static void setup(void)
{
    if (ctx)
        return;
    if (fcl_context_create(NULL, &ctx) != FCL_SUCCESS)
        fail("no context", fcl_last_error(NULL));
    for (int i = 0; i < N_BUFS; i++) {
        cl_int err;
        bufs[i] = clCreateBuffer(fcl_context_cl_context(ctx), CL_MEM_READ_WRITE, BUF_BYTES, NULL, &err);
        if (err != CL_SUCCESS)
            fail("clCreateBuffer", NULL);
    }
}

/* Every buffer back to its sentinel pattern (salted by the input's first bytes). */
static void fill_buffers(unsigned salt)
{
    for (int i = 0; i < N_BUFS; i++) {
        for (int k = 0; k < BUF_BYTES; k++)
            sentinel[i][k] = (uint8_t)((k * 131u + i * 17u + salt) ^ (k >> 6));
        if (clEnqueueWriteBuffer(fcl_context_cl_queue(ctx), bufs[i], CL_TRUE, 0, BUF_BYTES, sentinel[i], 0, NULL,
                                 NULL) != CL_SUCCESS)
            fail("clEnqueueWriteBuffer", NULL);
    }
}

/* Writes `bytes` at byte `at` of buffer b, in the sentinel copy too. */
static void put_bytes(int b, size_t at, const void *bytes, size_t n)
{
    if (at + n > BUF_BYTES)
        return;
    memcpy(&sentinel[b][at], bytes, n);
    if (clEnqueueWriteBuffer(fcl_context_cl_queue(ctx), bufs[b], CL_TRUE, at, n, bytes, 0, NULL, NULL) != CL_SUCCESS)
        fail("clEnqueueWriteBuffer", NULL);
}

/* Compares every buffer with its sentinel copy, skipping bytes marked in `written` (may be
 * NULL: no byte may differ). */
static void check_buffers(const uint8_t (*written)[BUF_BYTES], const char *what)
{
    static uint8_t now[BUF_BYTES];
    if (fcl_finish(ctx) != FCL_SUCCESS)
        fail("fcl_finish failed after a call", fcl_last_error(ctx));
    for (int i = 0; i < N_BUFS; i++) {
        if (clEnqueueReadBuffer(fcl_context_cl_queue(ctx), bufs[i], CL_TRUE, 0, BUF_BYTES, now, 0, NULL, NULL) !=
            CL_SUCCESS)
            fail("clEnqueueReadBuffer", NULL);
        for (int k = 0; k < BUF_BYTES; k++)
            if (now[k] != sentinel[i][k] && !(written && written[i][k])) {
                char detail[160];
                snprintf(detail, sizeof detail, "%s: buffer %d byte %d changed", what, i, k);
                fail(written ? "a byte outside the outputs changed" : "a rejected call wrote", detail);
            }
    }
}

/* Marks the bytes tensor t (on buffer b) can address; returns how many distinct elements it
 * addresses (numel unless some repeat). */
static int64_t mark_view(fcl_tensor t, int b, uint8_t (*written)[BUF_BYTES])
{
    const int nd = fcl_tensor_ndim(t);
    const int64_t es = (int64_t)fcl_dtype_size(fcl_tensor_dtype(t));
    int64_t idx[4] = {0, 0, 0, 0}, distinct = 0;
    for (int64_t k = 0; k < fcl_tensor_numel(t); k++) {
        int64_t e = fcl_tensor_offset(t);
        for (int d = 0; d < nd; d++)
            e += idx[d] * fcl_tensor_stride(t, d);
        distinct += e * es < BUF_BYTES && !written[b][e * es];
        for (int64_t x = e * es; x < (e + 1) * es && x < BUF_BYTES; x++)
            written[b][x] = 1;
        for (int d = nd - 1; d >= 0 && ++idx[d] == fcl_tensor_dim(t, d); d--)
            idx[d] = 0;
    }
    return distinct;
}

/* ------------------------------------------------------------------ geometry mode */

static void geometry(reader *r)
{
    fcl_tensor made[4] = {NULL, NULL, NULL, NULL};
    unsigned made_buf[4] = {0, 0, 0, 0};
    int made_on_pool[4] = {0, 0, 0, 0}; /* on a pool buffer (else on one fcl_tensor_create made) */
    for (int step = 0; step < 4 && r->n > 0; step++) {
        const unsigned how = next(r) % 3, b = next(r) % N_BUFS;
        const fcl_dtype dt = (fcl_dtype)(next(r) % 6);
        const int ndim = (int)(next(r) % 6);
        int64_t shape[4], strides[4];
        for (int d = 0; d < 4; d++)
            shape[d] = next_i64(r);
        const int with_strides = next(r) & 1;
        for (int d = 0; d < 4; d++)
            strides[d] = next_i64(r);
        const int64_t offset = next_i64(r);
        fcl_tensor t = (fcl_tensor)r; /* must be cleared on failure */
        fcl_status st;
        int valid;
        unsigned on = b; /* the pool buffer the tensor lives on */
        int on_pool = how != 2;
        if (how == 0 || (how == 1 && !made[step ? step - 1 : 0])) {
            st = fcl_tensor_wrap(ctx, bufs[b], dt, ndim, shape, with_strides ? strides : NULL, offset, &t);
            valid = view_valid(dt, ndim, shape, with_strides ? strides : NULL, offset, BUF_BYTES);
        } else if (how == 1) {
            fcl_tensor base = made[step - 1];
            on = made_buf[step - 1];
            on_pool = made_on_pool[step - 1];
            size_t base_bytes = 0; /* a view lies in its base's buffer: a pool one or a created one */
            if (clGetMemObjectInfo(fcl_tensor_buffer(base), CL_MEM_SIZE, sizeof base_bytes, &base_bytes, NULL) !=
                CL_SUCCESS)
                fail("clGetMemObjectInfo", NULL);
            st = fcl_tensor_view(base, ndim, shape, with_strides ? strides : NULL, offset, &t);
            valid = view_valid(fcl_tensor_dtype(base), ndim, shape, with_strides ? strides : NULL,
                               offset < 0 ? -1 : (__int128)fcl_tensor_offset(base) + offset, base_bytes);
        } else {
            /* only shapes the device could hold or that overflow: never allocate much */
            if (view_valid(dt, ndim, shape, NULL, 0, (uint64_t)1 << 20) ||
                !view_valid(dt, ndim, shape, NULL, 0, UINT64_MAX / 2)) {
                st = fcl_tensor_create(ctx, dt, ndim, shape, &t);
                valid = view_valid(dt, ndim, shape, NULL, 0, (uint64_t)1 << 20);
            } else {
                continue;
            }
        }
        if ((st == FCL_SUCCESS) != valid) {
            char detail[96];
            snprintf(detail, sizeof detail, "mode %u, status %s", how, fcl_status_string(st));
            fail(valid ? "a valid view was rejected" : "an invalid view was accepted", detail);
        }
        if (st != FCL_SUCCESS) {
            if (t != NULL)
                fail("*out not cleared on an error", fcl_status_string(st));
            check_message(fcl_last_error(ctx), "tensor creation");
            continue;
        }
        /* host copies of small accepted views: a round trip, nothing outside the view written */
        const int64_t n = fcl_tensor_numel(t);
        if (n <= 65536 && fcl_tensor_buffer(t) != NULL) {
            const size_t bytes = (size_t)n * fcl_dtype_size(fcl_tensor_dtype(t));
            uint8_t *in = malloc(bytes), *out = malloc(bytes);
            if (!in || !out)
                fail("malloc", NULL);
            for (size_t k = 0; k < bytes; k++)
                in[k] = (uint8_t)(k * 7u + 3u);
            fill_buffers(step);
            if (fcl_tensor_write_raw(t, in, bytes) != FCL_SUCCESS || fcl_tensor_read_raw(t, out, bytes) != FCL_SUCCESS)
                fail("host copy of an accepted view failed", fcl_last_error(ctx));
            /* a view without repeated elements reads back what was written; one with them (a
             * stride 0, overlapping dims) holds the last writes: then two reads agree */
            uint8_t *again = malloc(bytes);
            if (!again || fcl_tensor_read_raw(t, again, bytes) != FCL_SUCCESS || memcmp(out, again, bytes) != 0)
                fail("two reads of a view differ", NULL);
            free(again);
            if (on_pool) {
                static uint8_t written[N_BUFS][BUF_BYTES];
                memset(written, 0, sizeof written);
                if (mark_view(t, (int)on, written) == n && memcmp(in, out, bytes) != 0)
                    fail("a view without repeated elements did not read back what was written", NULL);
                check_buffers(written, "host copy");
            } else if (how == 2 && memcmp(in, out, bytes) != 0) { /* a view of one may repeat elements */
                fail("a new tensor did not read back what was written", NULL);
            }
            free(in);
            free(out);
        }
        fcl_tensor_release(made[step]);
        made[step] = t;
        made_buf[step] = on;
        made_on_pool[step] = on_pool;
    }
    for (int i = 0; i < 4; i++)
        fcl_tensor_release(made[i]);
}

/* ------------------------------------------------------------------ op mode: templates */

/* One tensor of a call: where it lives and its geometry (dense strides unless set). */
typedef struct tspec {
    int used;          /* part of the template */
    int buf;           /* pool buffer (each template tensor starts on its own) */
    fcl_dtype dtype;
    int ndim;
    int64_t shape[4];
    int64_t strides[4];
    int strided;       /* strides[] given (else dense) */
    int64_t offset;
    int null;          /* passed as NULL */
    int output;        /* written by the op */
    const int32_t *ints; /* I32 contents to write (NULL: the sentinel stays) */
    int n_ints;
} tspec;

/* A call: its tensors (role indices per op below), params, scalars. */
typedef struct call {
    int op;
    tspec t[MAX_T];
    fcl_attn_params p;
    int use_mask, use_alibi; /* params' key_mask / alibi_slopes from tensors T_MASK / T_ALIBI */
    int64_t s[4];            /* scalars: see each op */
    int garbage_ints;        /* leave index tensors as sentinel bytes */
} call;

enum { T_MASK = 20, T_ALIBI = 21 };

enum {
    OP_FORWARD, OP_VARLEN, OP_PACKED, OP_BACKWARD, OP_VARLEN_BACKWARD, OP_PACKED_BACKWARD, OP_DECODE,
    OP_DECODE_PAGED, OP_APPEND, OP_PROJECT_KV, OP_QKVO, OP_QKVO_BACKWARD, OP_QKVO_SAVE, OP_QKVO_BACKWARD_SAVED,
    OP_VARLEN_VALIDATE, OP_GETTERS, N_OPS
};

static int next_buf;

static void tdef(call *c, int i, fcl_dtype dt, int ndim, int64_t a, int64_t b, int64_t d2, int64_t d3, int output)
{
    tspec *t = &c->t[i];
    memset(t, 0, sizeof *t);
    t->used = 1;
    t->buf = next_buf++ % N_BUFS;
    t->dtype = dt;
    t->ndim = ndim;
    const int64_t s[4] = {a, b, d2, d3};
    memcpy(t->shape, s, sizeof s);
    t->output = output;
}

static void tints(call *c, int i, const int32_t *v, int n)
{
    c->t[i].ints = v;
    c->t[i].n_ints = n;
}

/* The valid call of op (B 2, Sq 3, Sk 5, Hq 2, Hkv 1, D 8 where it applies). */
static void template_call(call *c, int op)
{
    static const int32_t cu_q[3] = {0, 1, 3}, cu_k[3] = {0, 2, 5}, bounds[10] = {0, 2, 0, 2, 2, 5, 2, 5, 2, 5};
    static const int32_t lens[2] = {4, 6}, pages[4] = {1, 0, 3, 2}, positions[2] = {1, 3};
    memset(c, 0, sizeof *c);
    next_buf = 0;
    c->op = op;
    c->p = fcl_attn_params_default();
    switch (op) {
    case OP_FORWARD:
    case OP_BACKWARD: /* Q K V O LSE dO dQ dK dV */
        tdef(c, 0, FCL_F32, 4, 2, 3, 2, 8, 0);
        tdef(c, 1, FCL_F32, 4, 2, 5, 1, 8, 0);
        tdef(c, 2, FCL_F32, 4, 2, 5, 1, 8, 0);
        tdef(c, 3, FCL_F32, 4, 2, 3, 2, 8, op == OP_FORWARD);
        tdef(c, 4, FCL_F32, 3, 2, 2, 3, 0, op == OP_FORWARD);
        if (op == OP_BACKWARD) {
            tdef(c, 5, FCL_F32, 4, 2, 3, 2, 8, 0);
            tdef(c, 6, FCL_F32, 4, 2, 3, 2, 8, 1);
            tdef(c, 7, FCL_F32, 4, 2, 5, 1, 8, 1);
            tdef(c, 8, FCL_F32, 4, 2, 5, 1, 8, 1);
        }
        tdef(c, T_MASK, FCL_F32, 2, 2, 5, 0, 0, 0);
        tdef(c, T_ALIBI, FCL_F32, 1, 2, 0, 0, 0, 0);
        break;
    case OP_VARLEN:
    case OP_VARLEN_BACKWARD: /* Q K V O LSE cu_q cu_k dO dQ dK dV; s0 max_q, s1 max_k */
        tdef(c, 0, FCL_F32, 3, 3, 2, 8, 0, 0);
        tdef(c, 1, FCL_F32, 3, 5, 1, 8, 0, 0);
        tdef(c, 2, FCL_F32, 3, 5, 1, 8, 0, 0);
        tdef(c, 3, FCL_F32, 3, 3, 2, 8, 0, op == OP_VARLEN);
        tdef(c, 4, FCL_F32, 2, 2, 3, 0, 0, op == OP_VARLEN);
        tdef(c, 5, FCL_I32, 1, 3, 0, 0, 0, 0);
        tints(c, 5, cu_q, 3);
        tdef(c, 6, FCL_I32, 1, 3, 0, 0, 0, 0);
        tints(c, 6, cu_k, 3);
        if (op == OP_VARLEN_BACKWARD) {
            tdef(c, 7, FCL_F32, 3, 3, 2, 8, 0, 0);
            tdef(c, 8, FCL_F32, 3, 3, 2, 8, 0, 1);
            tdef(c, 9, FCL_F32, 3, 5, 1, 8, 0, 1);
            tdef(c, 10, FCL_F32, 3, 5, 1, 8, 0, 1);
        }
        c->s[0] = 2;
        c->s[1] = 3;
        tdef(c, T_MASK, FCL_F32, 1, 5, 0, 0, 0, 0);
        tdef(c, T_ALIBI, FCL_F32, 2, 2, 2, 0, 0, 0);
        break;
    case OP_PACKED:
    case OP_PACKED_BACKWARD: /* QKV bounds O LSE dO dQKV */
        tdef(c, 0, FCL_F32, 4, 5, 3, 2, 8, 0);
        tdef(c, 1, FCL_I32, 2, 5, 2, 0, 0, 0);
        tints(c, 1, bounds, 10);
        tdef(c, 2, FCL_F32, 3, 5, 2, 8, 0, op == OP_PACKED);
        tdef(c, 3, FCL_F32, 2, 2, 5, 0, 0, op == OP_PACKED);
        if (op == OP_PACKED_BACKWARD) {
            tdef(c, 4, FCL_F32, 3, 5, 2, 8, 0, 0);
            tdef(c, 5, FCL_F32, 4, 5, 3, 2, 8, 1);
        }
        tdef(c, T_MASK, FCL_F32, 1, 5, 0, 0, 0, 0);
        tdef(c, T_ALIBI, FCL_F32, 1, 2, 0, 0, 0, 0);
        break;
    case OP_DECODE:
    case OP_DECODE_PAGED: /* Q Kc Vc O LSE lens mask block_table; s0 len (-1: device form) */
        tdef(c, 0, FCL_F32, 4, 2, 1, 2, 8, 0);
        if (op == OP_DECODE) {
            tdef(c, 1, FCL_F32, 4, 2, 6, 1, 8, 0);
            tdef(c, 2, FCL_F32, 4, 2, 6, 1, 8, 0);
        } else {
            tdef(c, 1, FCL_F32, 4, 4, 3, 1, 8, 0);
            tdef(c, 2, FCL_F32, 4, 4, 3, 1, 8, 0);
            tdef(c, 7, FCL_I32, 2, 2, 2, 0, 0, 0);
            tints(c, 7, pages, 4);
        }
        tdef(c, 3, FCL_F32, 4, 2, 1, 2, 8, 1);
        tdef(c, 4, FCL_F32, 3, 2, 2, 1, 0, 1);
        tdef(c, 5, FCL_I32, 1, 2, 0, 0, 0, 0);
        tints(c, 5, lens, 2);
        c->t[5].null = 1;
        tdef(c, 6, FCL_F32, 2, 2, 6, 0, 0, 0);
        c->t[6].null = 1;
        c->s[0] = 5;
        tdef(c, T_ALIBI, FCL_F32, 1, 2, 0, 0, 0, 0);
        break;
    case OP_APPEND: /* Kc Vc Kn Vn positions block_table(unused); s0 pos */
        tdef(c, 0, FCL_F32, 4, 2, 6, 1, 8, 1);
        tdef(c, 1, FCL_F32, 4, 2, 6, 1, 8, 1);
        tdef(c, 2, FCL_F32, 4, 2, 2, 1, 8, 0);
        tdef(c, 3, FCL_F32, 4, 2, 2, 1, 8, 0);
        tdef(c, 4, FCL_I32, 1, 2, 0, 0, 0, 0);
        tints(c, 4, positions, 2);
        c->t[4].null = 1;
        c->s[0] = 2;
        break;
    case OP_PROJECT_KV: /* Ctx wk wv K V wk.bias wv.bias wk.scale wv.scale */
        tdef(c, 0, FCL_F32, 2, 4, 8, 0, 0, 0);
        tdef(c, 1, FCL_F32, 2, 8, 8, 0, 0, 0);
        tdef(c, 2, FCL_F32, 2, 8, 8, 0, 0, 0);
        tdef(c, 3, FCL_F32, 2, 4, 8, 0, 0, 1);
        tdef(c, 4, FCL_F32, 2, 4, 8, 0, 0, 1);
        for (int i = 5; i < 9; i++) {
            tdef(c, i, FCL_F32, 1, 8, 0, 0, 0, 0);
            c->t[i].null = 1;
        }
        break;
    case OP_QKVO:
    case OP_QKVO_SAVE:
    case OP_QKVO_BACKWARD:
    case OP_QKVO_BACKWARD_SAVED: /* X Ctx wq wk wv wo O | dO dX dCtx gq.dw gk.dw gv.dw go.dw;
                                  * saved Q K V A LSE; s0 num_heads, s1 % 8 == 0: saved NULL */
        tdef(c, 0, FCL_F32, 2, 3, 8, 0, 0, 0);
        tdef(c, 1, FCL_F32, 2, 4, 8, 0, 0, 0);
        for (int i = 2; i < 6; i++)
            tdef(c, i, FCL_F32, 2, 8, 8, 0, 0, 0);
        const int backward = op == OP_QKVO_BACKWARD || op == OP_QKVO_BACKWARD_SAVED;
        tdef(c, 6, FCL_F32, 2, 3, 8, 0, 0, !backward);
        if (op == OP_QKVO_SAVE || op == OP_QKVO_BACKWARD_SAVED) { /* written by the forward, read by the backward */
            tdef(c, 13, FCL_F32, 2, 3, 8, 0, 0, op == OP_QKVO_SAVE);
            tdef(c, 14, FCL_F32, 2, 4, 8, 0, 0, op == OP_QKVO_SAVE);
            tdef(c, 15, FCL_F32, 2, 4, 8, 0, 0, op == OP_QKVO_SAVE);
            tdef(c, 16, FCL_F32, 2, 3, 8, 0, 0, op == OP_QKVO_SAVE);
            tdef(c, 17, FCL_F32, 2, 2, 3, 0, 0, op == OP_QKVO_SAVE);
            c->s[1] = 1;
        }
        if (backward) {
            tdef(c, 7, FCL_F32, 2, 3, 8, 0, 0, 0);
            c->t[6].output = 1; /* dX */
            tdef(c, 8, FCL_F32, 2, 4, 8, 0, 0, 1);
            for (int i = 9; i < 13; i++)
                tdef(c, i, FCL_F32, 2, 8, 8, 0, 0, 1);
        }
        c->s[0] = 2;
        tdef(c, T_MASK, FCL_F32, 1, 4, 0, 0, 0, 0);
        break;
    case OP_VARLEN_VALIDATE: /* cu_q cu_k; s0 total_q, s1 total_k, s2 max_q, s3 max_k */
        tdef(c, 0, FCL_I32, 1, 3, 0, 0, 0, 0);
        tints(c, 0, cu_q, 3);
        tdef(c, 1, FCL_I32, 1, 3, 0, 0, 0, 0);
        tints(c, 1, cu_k, 3);
        c->s[0] = 3;
        c->s[1] = 5;
        c->s[2] = 2;
        c->s[3] = 3;
        break;
    default: /* OP_GETTERS: s0 dtype, s1 head_dim */
        c->s[1] = 64;
        break;
    }
}

/* One mutation read from the input. */
static void mutate(call *c, reader *r)
{
    const unsigned what = next(r);
    if (what < 160) { /* a tensor field */
        tspec *t = &c->t[what % MAX_T];
        const unsigned field = next(r) % 12;
        const int64_t v = next_i64(r);
        switch (field) {
        case 0: t->dtype = (fcl_dtype)(v & 7); break;
        case 1: t->ndim = (int)(v & 7); break;
        case 2: case 3: case 4: case 5: t->shape[field - 2] = v; break;
        case 6: case 7: case 8:
            if (!t->strided) { /* start from the dense strides */
                int64_t dense = 1;
                for (int d = 3; d >= 0; d--) {
                    t->strides[d] = d < t->ndim ? dense : 0;
                    dense *= d < t->ndim && t->shape[d] > 0 && t->shape[d] < 65536 ? t->shape[d] : 1;
                }
                t->strided = 1;
            }
            t->strides[(field - 6 + (t->ndim == 4)) % 4] = v; /* dims 0..2, or 1..3 of 4 */
            break;
        case 9: t->offset = v; break;
        case 10: t->buf = (int)((uint64_t)v % N_BUFS); break;
        default: t->null = !t->null; t->used = 1; break;
        }
        return;
    }
    switch (what % 12) {
    case 0: c->p.scale = next_float(r); break;
    case 1: c->p.causal = (int)next(r) % 3; break;
    case 2: c->p.window_left = next_int(r); break;
    case 3: c->p.window_right = next_int(r); break;
    case 4: c->p.softcap = next_float(r); break;
    case 5: c->use_mask = !c->use_mask; break;
    case 6: c->use_alibi = !c->use_alibi; break;
    case 7: c->garbage_ints = !c->garbage_ints; break;
    default: c->s[what % 4] = next_i64(r); break;
    }
}

/* ------------------------------------------------------------------ op mode: the call */

static fcl_tensor wrapped[MAX_T];

/* Wraps every used, non-NULL tensor (writing index contents first); a rejected wrap leaves it
 * NULL (the op then gets NULL). Returns 0 when some tensor is too large to run. */
static int wrap_all(call *c)
{
    memset(wrapped, 0, sizeof wrapped);
    for (int i = 0; i < MAX_T; i++) {
        tspec *t = &c->t[i];
        if (!t->used || t->null)
            continue;
        if (t->ints && !c->garbage_ints && t->offset >= 0 && t->offset < BUF_BYTES / 4)
            put_bytes(t->buf, (size_t)t->offset * 4, t->ints, sizeof(int32_t) * (size_t)t->n_ints);
        fcl_tensor w = (fcl_tensor)c;
        const fcl_status st = fcl_tensor_wrap(ctx, bufs[t->buf], t->dtype, t->ndim, t->shape,
                                              t->strided ? t->strides : NULL, t->offset, &w);
        if (st != FCL_SUCCESS) {
            if (w != NULL)
                fail("*out not cleared on an error", "wrap");
            check_message(fcl_last_error(ctx), "wrap");
        } else {
            wrapped[i] = w;
            if (fcl_tensor_numel(w) > MAX_NUMEL)
                return 0;
        }
    }
    return 1;
}

static fcl_weight weight(fcl_tensor w, fcl_tensor bias, fcl_tensor scale)
{
    fcl_weight x = {w, scale, bias};
    return x;
}

/* Calls the op on the wrapped tensors. */
static fcl_status invoke(call *c, cl_event *ev)
{
    fcl_tensor *T = wrapped;
    fcl_attn_params p = c->p;
    p.key_mask = c->use_mask ? T[T_MASK] : NULL;
    p.alibi_slopes = c->use_alibi ? T[T_ALIBI] : NULL;
    switch (c->op) {
    case OP_FORWARD: return fcl_attention_forward(ctx, &p, T[0], T[1], T[2], T[3], T[4], ev);
    case OP_BACKWARD:
        return fcl_attention_backward(ctx, &p, T[0], T[1], T[2], T[3], T[5], T[4], T[6], T[7], T[8], ev);
    case OP_VARLEN:
        return fcl_attention_varlen_forward(ctx, &p, T[0], T[1], T[2], T[5], T[6], (int)c->s[0], (int)c->s[1], T[3],
                                            T[4], ev);
    case OP_VARLEN_BACKWARD:
        return fcl_attention_varlen_backward(ctx, &p, T[0], T[1], T[2], T[3], T[7], T[4], T[5], T[6], (int)c->s[0],
                                             (int)c->s[1], T[8], T[9], T[10], ev);
    case OP_PACKED: return fcl_attention_packed_qkv_forward(ctx, &p, T[0], T[1], T[2], T[3], ev);
    case OP_PACKED_BACKWARD:
        return fcl_attention_packed_qkv_backward(ctx, &p, T[0], T[2], T[4], T[3], T[1], T[5], ev);
    case OP_DECODE:
    case OP_DECODE_PAGED: {
        const fcl_kv_cache cache = {T[1], T[2], c->op == OP_DECODE_PAGED ? T[7] : NULL};
        return fcl_attention_decode(ctx, &p, T[0], &cache, c->s[0], T[5], T[6], T[3], T[4], ev);
    }
    case OP_APPEND: {
        const fcl_kv_cache cache = {T[0], T[1], NULL};
        return fcl_kv_cache_append(ctx, &cache, T[2], T[3], c->s[0], T[4], ev);
    }
    case OP_PROJECT_KV: {
        const fcl_weight wk = weight(T[1], T[5], T[7]), wv = weight(T[2], T[6], T[8]);
        return fcl_project_kv(ctx, T[0], &wk, &wv, T[3], T[4], ev);
    }
    case OP_QKVO: {
        const fcl_weight wq = weight(T[2], NULL, NULL), wk = weight(T[3], NULL, NULL), wv = weight(T[4], NULL, NULL),
                         wo = weight(T[5], NULL, NULL);
        return fcl_attention_qkvo_forward(ctx, &p, (int)c->s[0], T[0], T[1], &wq, &wk, &wv, &wo, T[6], ev);
    }
    case OP_QKVO_BACKWARD: {
        const fcl_weight wq = weight(T[2], NULL, NULL), wk = weight(T[3], NULL, NULL), wv = weight(T[4], NULL, NULL),
                         wo = weight(T[5], NULL, NULL);
        const fcl_weight_grad gq = {T[9], NULL}, gk = {T[10], NULL}, gv = {T[11], NULL}, go = {T[12], NULL};
        return fcl_attention_qkvo_backward(ctx, &p, (int)c->s[0], T[0], T[1], &wq, &wk, &wv, &wo, T[7], T[6], T[8],
                                           &gq, &gk, &gv, &go, ev);
    }
    case OP_QKVO_SAVE: {
        const fcl_weight wq = weight(T[2], NULL, NULL), wk = weight(T[3], NULL, NULL), wv = weight(T[4], NULL, NULL),
                         wo = weight(T[5], NULL, NULL);
        const fcl_qkvo_saved sv = {T[13], T[14], T[15], T[16], T[17]};
        return fcl_attention_qkvo_forward_save(ctx, &p, (int)c->s[0], T[0], T[1], &wq, &wk, &wv, &wo, T[6],
                                               c->s[1] % 8 == 0 ? NULL : &sv, ev);
    }
    case OP_QKVO_BACKWARD_SAVED: {
        const fcl_weight wq = weight(T[2], NULL, NULL), wk = weight(T[3], NULL, NULL), wv = weight(T[4], NULL, NULL),
                         wo = weight(T[5], NULL, NULL);
        const fcl_weight_grad gq = {T[9], NULL}, gk = {T[10], NULL}, gv = {T[11], NULL}, go = {T[12], NULL};
        const fcl_qkvo_saved sv = {T[13], T[14], T[15], T[16], T[17]};
        return fcl_attention_qkvo_backward_saved(ctx, &p, (int)c->s[0], T[0], T[1], &wq, &wk, &wv, &wo,
                                                 c->s[1] % 8 == 0 ? NULL : &sv, T[7], T[6], T[8], &gq, &gk, &gv, &go,
                                                 ev);
    }
    case OP_VARLEN_VALIDATE:
        return fcl_varlen_validate(ctx, T[0], T[1], c->s[0], c->s[1], (int)c->s[2], (int)c->s[3]);
    default: { /* the getters take anything */
        const fcl_dtype dt = (fcl_dtype)(c->s[0] & 7);
        int values[FCL_TUNING_MAX_VALUES];
        static const char *const kernels[] = {"forward", "forward_blocked", "forward_mma", "forward_wgmma",
                                              "backward_mma", "decode", "nope"};
        if (!fcl_attention_forward_path(ctx, dt, c->s[1]) || !fcl_attention_backward_path(ctx, dt, c->s[1]) ||
            !fcl_attention_decode_path(ctx, dt, c->s[1]) || !fcl_projection_path(ctx, dt, (fcl_dtype)(c->s[2] & 7)))
            fail("a path getter returned NULL", NULL);
        const int n = (int)((uint64_t)c->s[3] % (FCL_TUNING_MAX_VALUES + 2));
        return fcl_tuning_get(ctx, kernels[(uint64_t)c->s[2] % 7], (int)c->s[1], values, n);
    }
    }
}

static void op_mode(reader *r, unsigned salt)
{
    call c;
    template_call(&c, (int)(next(r) % N_OPS));
    for (int m = 0; m < MAX_MUTATIONS && r->n > 0; m++)
        mutate(&c, r);
    fill_buffers(salt);
    const int runnable = wrap_all(&c);
    if (runnable) {
        cl_event ev = NULL;
        const fcl_status st = invoke(&c, &ev);
        if (st == FCL_SUCCESS) {
            static uint8_t written[N_BUFS][BUF_BYTES];
            memset(written, 0, sizeof written);
            for (int i = 0; i < MAX_T; i++)
                if (c.t[i].used && c.t[i].output && wrapped[i])
                    mark_view(wrapped[i], c.t[i].buf, written);
            check_buffers(written, "accepted call");
        } else {
            if (ev != NULL)
                fail("a rejected call returned an event", fcl_status_string(st));
            check_message(fcl_last_error(ctx), fcl_status_string(st));
            check_buffers(NULL, fcl_last_error(ctx));
        }
        if (ev)
            clReleaseEvent(ev);
    }
    for (int i = 0; i < MAX_T; i++)
        fcl_tensor_release(wrapped[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    reader r = {data, size};
    const unsigned mode = next(&r);
    if (mode < 64)
        geometry(&r);
    else
        op_mode(&r, mode);
    return 0;
}
