/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GEMM of the projection ops, on strided operands:
 *   C[m, n] = (ACCUMULATE ? C[m, n] : 0) + sum_k A[m, k] B[k, n] (* scale) (+ bias[n])
 * with FP32 accumulation. Strides make the transposes: y = x W^T (A = x, B[k, n] = W[n, k]),
 * dx = dy W (B = W), dW += dy^T x (A[m, k] = dy[k, m], B = x). B is converted to float as it is
 * read (I8: dequantised with its row scale, never expanded in device memory).
 *
 * Specialisation (-D): FCL_DTYPE (A and bias: common.cl); W_DTYPE (B: 0 f32, 1 f16, 2 bf16,
 * 3 i8); C_F32 (C is f32, else FCL_DTYPE); SCALE_ON (I8 B's row scale indexed by 1 n, 2 k);
 * HAS_BIAS; ACCUMULATE; ONE_ITEM (CPUs: one work-item per ROWS x COLS block), else the tiled
 * kernel's TM, TN, TK, WM, WN, VW, A_K1, B_K1 (see there; values from fcl_tune_gemm).
 */

#if W_DTYPE == 0
typedef float w_t;
#define LOADW(p, i) ((p)[i])
#elif W_DTYPE == 1
typedef half w_t;
#define LOADW(p, i) vload_half((i), (p))
#elif W_DTYPE == 2
typedef ushort w_t;
#define LOADW(p, i) as_float((uint)(p)[i] << 16)
#elif W_DTYPE == 3
typedef char w_t;
#define LOADW(p, i) ((float)(p)[i])
#else
#error "unknown W_DTYPE"
#endif

#if ONE_ITEM
/* CPUs: one work-item per ROWS x COLS block, loops along n with independent accumulators (the
 * compiler vectorises them); B's row k of the block is converted once per k. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void gemm(GEMM_KERNEL_ARGS(store_t, w_t))
{
    const int n0 = get_group_id(0) * COLS, m0 = get_group_id(1) * ROWS;
    float acc[ROWS][COLS], bk[COLS];
    for (int m = 0; m < ROWS; m++)
        for (int n = 0; n < COLS; n++)
            acc[m][n] = 0.0f;
    for (int k = 0; k < K; k++) {
        for (int n = 0; n < COLS; n++) {
            bk[n] = n0 + n < N ? LOADW(B, b_off + k * b_sk + (n0 + n) * b_sn) : 0.0f;
#if W_DTYPE == 3 && SCALE_ON == 2
            bk[n] *= scale[s_off + k * s_s];
#endif
        }
        for (int m = 0; m < ROWS; m++) {
            const float a = m0 + m < M ? LOAD(A, a_off + (m0 + m) * a_sm + k * a_sk) : 0.0f;
            for (int n = 0; n < COLS; n++)
                acc[m][n] = fma(a, bk[n], acc[m][n]);
        }
    }
    for (int m = 0; m < ROWS && m0 + m < M; m++)
        for (int n = 0; n < COLS && n0 + n < N; n++) {
            float x = acc[m][n];
#if W_DTYPE == 3 && SCALE_ON == 1
            x *= scale[s_off + (n0 + n) * s_s];
#endif
#if HAS_BIAS
            x += LOAD(bias, bias_off + (n0 + n) * bias_s);
#endif
            const long c = c_off + (m0 + m) * c_sm + (n0 + n) * c_sn;
#if ACCUMULATE
            x += LOADC(C, c);
#endif
            STOREC(C, c, x);
        }
}
#else
/* GPUs and llvmpipe: register-blocked tiles (CLBlast's Xgemm scheme). A work-group of
 * DIM_N x DIM_M work-items computes a TM x TN block of C, each work-item WM x WN outputs held in
 * registers. Per TK-deep slice of K, the work-group stages A[TM, TK] and B[TK, TN] in local
 * memory as float (B converted, I8 dequantised on the way in), k-major so a work-item reads its
 * WM (WN) operands as WM / VW (WN / VW) vectors; while it multiplies one slice it has already
 * fetched the next into registers, which it then stores into the other of two local buffers
 * (one barrier per slice). Work-item (tn, tm) owns rows (i * DIM_M + tm) * VW + u and
 * columns (j * DIM_N + tn) * VW + w of the block (neighbouring work-items read neighbouring
 * vectors: no bank conflicts, and the stores of a row are contiguous). A_K1 / B_K1 (the
 * operand's k stride is 1) only choose which way the tile loads run, so that neighbouring
 * work-items read neighbouring addresses; any strides give the right result. Partial tiles at
 * any M, N, K edge load zeros and skip their stores. */
#define DIM_M (TM / WM)
#define DIM_N (TN / WN)
#define NT (DIM_M * DIM_N)
#define A_LOADS ((TM * TK + NT - 1) / NT) /* tile elements per work-item */
#define B_LOADS ((TN * TK + NT - 1) / NT)
#define AS_ROW (TM + VW) /* floats per k row of the local tiles: padded by one vector */
#define BS_ROW (TN + VW)


/* Element l of work-item t's share (e = t + l * NT) of a tile of `rows` rows (M or N) by TK:
 * its row and k (K1, the operand's k stride is 1: neighbouring work-items take neighbouring k,
 * else neighbouring rows), and whether it lies in the tile (`loads` elements per work-item). */
#define TILE_ROW(e, rows, k1) ((k1) ? (e) / TK : (e) % (rows))
#define TILE_K(e, rows, k1) ((k1) ? (e) % TK : (e) / (rows))
#define TILE_IN(e, rows, loads) ((loads) * NT == (rows) * TK || (e) < (rows) * TK)

/* Work-item t's elements of the A tile at (m0, k0) into r (zeros outside M x K). */
inline void gemm_fetch_a(__global const store_t *A, const long a_off, const long a_sm, const long a_sk,
                         const int M, const int K, const int m0, const int k0, const int t, float *r)
{
FCL_UNROLL_LOOP
    for (int l = 0; l < A_LOADS; l++) {
        const int e = t + l * NT, m = TILE_ROW(e, TM, A_K1), k = TILE_K(e, TM, A_K1);
        r[l] = TILE_IN(e, TM, A_LOADS) && m0 + m < M && k0 + k < K
                   ? LOAD(A, a_off + (m0 + m) * a_sm + (k0 + k) * a_sk)
                   : 0.0f;
    }
}

/* Work-item t's elements of the B tile at (k0, n0) into r, as float (I8 with SCALE_ON 2:
 * times the scale of row k). */
inline void gemm_fetch_b(__global const w_t *B, __global const float *scale, const long b_off, const long b_sk,
                         const long b_sn, const long s_off, const long s_s, const int N, const int K, const int n0,
                         const int k0, const int t, float *r)
{
FCL_UNROLL_LOOP
    for (int l = 0; l < B_LOADS; l++) {
        const int e = t + l * NT, n = TILE_ROW(e, TN, B_K1), k = TILE_K(e, TN, B_K1);
        float b = 0.0f;
        if (TILE_IN(e, TN, B_LOADS) && n0 + n < N && k0 + k < K) {
            b = LOADW(B, b_off + (k0 + k) * b_sk + (n0 + n) * b_sn);
#if W_DTYPE == 3 && SCALE_ON == 2
            b *= scale[s_off + (k0 + k) * s_s];
#endif
        }
        r[l] = b;
    }
}

/* Work-item t's fetched elements r of one operand's tile (`rows` x TK, `loads` per work-item)
 * into its local tile dst, k-major with `ld` floats per k (a macro: the counts stay literal
 * constants, so the loop unrolls and r stays in registers). */
#define GEMM_STAGE_TILE(dst, ld, rows, loads, k1, t, r)                                                           \
    FCL_UNROLL_LOOP                                                                                              \
    for (int l = 0; l < (loads); l++) {                                                                          \
        const int e = (t) + l * NT;                                                                              \
        if (TILE_IN(e, rows, loads))                                                                             \
            (dst)[TILE_K(e, rows, k1) * (ld) + TILE_ROW(e, rows, k1)] = (r)[l];                                  \
    }

/* Work-item t's fetched elements ra (A) and rb (B) into the local tiles as (As[k][m]) and bs
 * (Bs[k][n]) of one slice. */
inline void gemm_stage(__local float *as, __local float *bs, const int t, const float *ra, const float *rb)
{
    GEMM_STAGE_TILE(as, AS_ROW, TM, A_LOADS, A_K1, t, ra)
    GEMM_STAGE_TILE(bs, BS_ROW, TN, B_LOADS, B_K1, t, rb)
}

__kernel __attribute__((reqd_work_group_size(DIM_N, DIM_M, 1)))
void gemm(GEMM_KERNEL_ARGS(store_t, w_t))
{
    __local floatv As[2][TK][AS_ROW / VW]; /* As[slice parity][k][m], m in vectors of VW */
    __local floatv Bs[2][TK][BS_ROW / VW]; /* Bs[slice parity][k][n] */
    const int tn = get_local_id(0), tm = get_local_id(1), t = tm * DIM_N + tn;
    const int n0 = get_group_id(0) * TN, m0 = get_group_id(1) * TM;
    float acc[WM][WN], ra[A_LOADS], rb[B_LOADS];
FCL_UNROLL_LOOP
    for (int i = 0; i < WM; i++)
FCL_UNROLL_LOOP
        for (int j = 0; j < WN; j++)
            acc[i][j] = 0.0f;
    gemm_fetch_a(A, a_off, a_sm, a_sk, M, K, m0, 0, t, ra);
    gemm_fetch_b(B, scale, b_off, b_sk, b_sn, s_off, s_s, N, K, n0, 0, t, rb);
    gemm_stage((__local float *)As[0], (__local float *)Bs[0], t, ra, rb);
    barrier(CLK_LOCAL_MEM_FENCE);
    int cur = 0; /* the parity of the slice being multiplied */
    for (int k0 = 0; k0 < K; k0 += TK) {
        const bool more = k0 + TK < K;
        if (more) { /* the next slice, in flight while this one is multiplied */
            gemm_fetch_a(A, a_off, a_sm, a_sk, M, K, m0, k0 + TK, t, ra);
            gemm_fetch_b(B, scale, b_off, b_sk, b_sn, s_off, s_s, N, K, n0, k0 + TK, t, rb);
        }
FCL_UNROLL_LOOP
        for (int k = 0; k < TK; k++) {
            vec_u a[WM / VW], b[WN / VW];
FCL_UNROLL_LOOP
            for (int i = 0; i < WM / VW; i++)
                a[i].v = As[cur][k][i * DIM_M + tm];
FCL_UNROLL_LOOP
            for (int j = 0; j < WN / VW; j++)
                b[j].v = Bs[cur][k][j * DIM_N + tn];
FCL_UNROLL_LOOP
            for (int i = 0; i < WM; i++)
FCL_UNROLL_LOOP
                for (int j = 0; j < WN; j++)
                    acc[i][j] = fma(a[i / VW].s[i % VW], b[j / VW].s[j % VW], acc[i][j]);
        }
        /* the next slice goes to the other buffers, whose last readers (the previous slice)
         * passed the previous barrier: one barrier per slice */
        if (more)
            gemm_stage((__local float *)As[cur ^ 1], (__local float *)Bs[cur ^ 1], t, ra, rb);
        barrier(CLK_LOCAL_MEM_FENCE);
        cur ^= 1;
    }
    /* epilogue: per column the I8 row scale and the bias, then the stores inside M x N */
    float post_mul[WN], post_add[WN];
FCL_UNROLL_LOOP
    for (int j = 0; j < WN; j++) {
        const int n = n0 + ((j / VW) * DIM_N + tn) * VW + j % VW;
        post_mul[j] = 1.0f;
        post_add[j] = 0.0f;
        if (n < N) {
#if W_DTYPE == 3 && SCALE_ON == 1
            post_mul[j] = scale[s_off + n * s_s];
#endif
#if HAS_BIAS
            post_add[j] = LOAD(bias, bias_off + n * bias_s);
#endif
        }
    }
FCL_UNROLL_LOOP
    for (int i = 0; i < WM; i++) {
        const int m = m0 + ((i / VW) * DIM_M + tm) * VW + i % VW;
        if (m >= M)
            continue;
FCL_UNROLL_LOOP
        for (int j = 0; j < WN; j++) {
            const int n = n0 + ((j / VW) * DIM_N + tn) * VW + j % VW;
            if (n >= N)
                continue;
            const long c = c_off + m * c_sm + n * c_sn;
            float x = fma(acc[i][j], post_mul[j], post_add[j]);
#if ACCUMULATE
            x += LOADC(C, c);
#endif
            STOREC(C, c, x);
        }
    }
}
#endif

/* C[m, n] = (ACCUMULATE ? C[m, n] : 0) + T[m * N + n]: the last step of a GEMM split along K
 * (loop-capped devices) whose C is not F32, the parts summed in the F32 T. */
__kernel void gemm_finish(__global const float *T, __global c_t *C, const int M, const int N, const long c_off,
                          const long c_sm, const long c_sn)
{
    const int n = get_global_id(0), m = get_global_id(1);
    if (m >= M || n >= N)
        return;
    const long c = c_off + m * c_sm + n * c_sn;
    float x = T[(long)m * N + n];
#if ACCUMULATE
    x += LOADC(C, c);
#endif
    STOREC(C, c, x);
}

/* db[n] (+)= sum_m G[m, n] (column sums: the bias gradients). A work-group of 32 x CS_ROWS
 * work-items takes 32 columns: work-item (c, r) sums rows r, r + CS_ROWS, ... of its column, and
 * row 0 adds the CS_ROWS partial sums in order (deterministic; CS_ROWS 1 on CPUs, where the 32
 * columns are the SIMD lanes). */
__kernel __attribute__((reqd_work_group_size(32, CS_ROWS, 1)))
void column_sums(__global const store_t *G, __global c_t *db, const int M, const int N, const long g_off,
                 const long g_sm, const long db_off, const long db_s)
{
    const int c = get_local_id(0), r = get_local_id(1), n = get_group_id(0) * 32 + c;
    float s = 0.0f;
    if (n < N)
        for (int m = r; m < M; m += CS_ROWS)
            s += LOAD(G, g_off + m * g_sm + n);
#if CS_ROWS > 1
    __local float part[CS_ROWS][32];
    part[r][c] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (r > 0)
        return;
    for (int i = 1; i < CS_ROWS; i++)
        s += part[i][c];
#endif
    if (n >= N)
        return;
#if ACCUMULATE
    s += LOADC(db, db_off + n * db_s);
#endif
    STOREC(db, db_off + n * db_s, s);
}

/* dst[n * d_sn + k] = W[n, k] (I8, at w_off + n * w_sn + k) in the activations' dtype, exactly
 * (every I8 value is an F16 and a BF16): the weights of a GEMM with many rows, converted once for
 * the 16-bit tensor-core GEMM, which applies their scale. Eight values of a row per work-item,
 * stored as one 16-byte vector (d_sn a multiple of 8, dst 16-byte aligned: the host's scratch).
 * Only in the programs of 16-bit activations (the route's only users). */
#if FCL_DTYPE == 1 || FCL_DTYPE == 2
__kernel void weights_dequantize(__global const char *W, __global store_t *dst, const int N, const int K,
                                 const long w_off, const long w_sn, const long d_sn)
{
    const int k = 8 * get_global_id(0), n = get_global_id(1);
    if (n >= N || k >= K)
        return;
    __global const char *w = W + w_off + n * w_sn + k;
    __global store_t *d = dst + n * d_sn + k;
    if (k + 8 > K) {
        for (int i = 0; i < K - k; i++)
            STORE(d, i, (float)w[i]);
        return;
    }
    /* 8-byte aligned rows (uniform): one 8-byte load */
    const int8 v = convert_int8(((w_off | w_sn) & 7) == 0 ? as_char8(*(__global const uint2 *)w) : vload8(0, w));
    const uint8 u = as_uint8(convert_float8(v));
#if FCL_DTYPE == 2
    *(__global ushort8 *)d = convert_ushort8(u >> 16);
#else /* F16 bits of the (exact, |x| >= 1 or 0) values: sign, exponent rebiased 127 -> 15, mantissa */
    const uint8 h = ((u >> 16) & 0x8000u) | ((((u >> 23) & 0xffu) - 112u) << 10) | ((u >> 13) & 0x3ffu);
    *(__global ushort8 *)d = convert_ushort8(select(h, (uint8)0u, as_uint8(v == 0)));
#endif
}
#endif

/* Y[m, n] += bias[n] after a GEMM that has no epilogue of its own (CLBlast). */
__kernel void linear_bias(__global store_t *Y, __global const store_t *bias, const int M, const int N,
                          const long y_off, const long y_sm, const long b_off, const long b_s)
{
    const int n = get_global_id(0), m = get_global_id(1);
    if (m < M && n < N)
        STORE(Y, y_off + (long)m * y_sm + n, LOAD(Y, y_off + (long)m * y_sm + n) + LOAD(bias, b_off + n * b_s));
}
