/*
 * The GEMM of the projection ops, on strided operands:
 *   C[m, n] = (ACCUMULATE ? C[m, n] : 0) + sum_k A[m, k] B[k, n] (* scale) (+ bias[n])
 * with FP32 accumulation. Strides make the transposes: y = x W^T (A = x, B[k, n] = W[n, k]),
 * dx = dy W (B = W), dW += dy^T x (A[m, k] = dy[k, m], B = x). One work-group computes a
 * TILE x TILE block of C, one element per work-item, staging TILE x TILE tiles of A and B in
 * local memory; B is converted in registers (I8: dequantised with its row scale, never expanded
 * in device memory).
 *
 * Specialisation (-D): FCL_DTYPE (A and bias: common.cl); W_DTYPE (B: 0 f32, 1 f16, 2 bf16,
 * 3 i8); C_F32 (C is f32, else FCL_DTYPE); SCALE_ON (I8 B's row scale indexed by 1 n, 2 k);
 * HAS_BIAS; ACCUMULATE; TILE; ONE_ITEM (CPUs: one work-item per ROWS x COLS block).
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

#if C_F32
typedef float c_t;
#define LOADC(p, i) ((p)[i])
#define STOREC(p, i, x) ((p)[i] = (x))
#else
typedef store_t c_t;
#define LOADC(p, i) LOAD(p, i)
#define STOREC(p, i, x) STORE(p, i, x)
#endif

#if ONE_ITEM
/* CPUs: one work-item per ROWS x COLS block, loops along n with independent accumulators (the
 * compiler vectorises them); B's row k of the block is converted once per k. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void gemm(__global const store_t *A, __global const w_t *B, __global const float *scale,
          __global const store_t *bias, __global c_t *C, const int M, const int N, const int K,
          const long a_off, const long a_sm, const long a_sk, const long b_off, const long b_sk,
          const long b_sn, const long c_off, const long c_sm, const long c_sn, const long bias_off,
          const long bias_s, const long s_off, const long s_s)
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
__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1)))
void gemm(__global const store_t *A, __global const w_t *B, __global const float *scale,
          __global const store_t *bias, __global c_t *C, const int M, const int N, const int K,
          const long a_off, const long a_sm, const long a_sk, const long b_off, const long b_sk,
          const long b_sn, const long c_off, const long c_sm, const long c_sn, const long bias_off,
          const long bias_s, const long s_off, const long s_s)
{
    __local float As[TILE][TILE + 1]; /* As[m][k] */
    __local float Bs[TILE][TILE + 1]; /* Bs[n][k] */
    const int tn = get_local_id(0), tm = get_local_id(1);
    const int n0 = get_group_id(0) * TILE, m0 = get_group_id(1) * TILE;
    const int n = n0 + tn, m = m0 + tm;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        barrier(CLK_LOCAL_MEM_FENCE);
        const int k = k0 + tn; /* work-item (tn, tm) loads A[m0 + tm, k] and B[k, n0 + tm] */
        As[tm][tn] = m0 + tm < M && k < K ? LOAD(A, a_off + (m0 + tm) * a_sm + k * a_sk) : 0.0f;
        float b = n0 + tm < N && k < K ? LOADW(B, b_off + k * b_sk + (n0 + tm) * b_sn) : 0.0f;
#if W_DTYPE == 3 && SCALE_ON == 2
        b = k < K ? b * scale[s_off + k * s_s] : 0.0f;
#endif
        Bs[tm][tn] = b;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TILE; kk++)
            acc = fma(As[tm][kk], Bs[tn][kk], acc);
    }
    if (m >= M || n >= N)
        return;
#if W_DTYPE == 3 && SCALE_ON == 1
    acc *= scale[s_off + n * s_s];
#endif
#if HAS_BIAS
    acc += LOAD(bias, bias_off + n * bias_s);
#endif
    const long c = c_off + m * c_sm + n * c_sn;
#if ACCUMULATE
    acc += LOADC(C, c);
#endif
    STOREC(C, c, acc);
}
#endif

/* db[n] (+)= sum_m G[m, n] (column sums: the bias gradients), one work-item per column. */
__kernel void column_sums(__global const store_t *G, __global c_t *db, const int M, const int N,
                          const long g_off, const long g_sm, const long db_off, const long db_s)
{
    const int n = get_global_id(0);
    if (n >= N)
        return;
    float s = 0.0f;
    for (int m = 0; m < M; m++)
        s += LOAD(G, g_off + m * g_sm + n);
#if ACCUMULATE
    s += LOADC(db, db_off + n * db_s);
#endif
    STOREC(db, db_off + n * db_s, s);
}

/* Y[m, n] += bias[n] after a GEMM that has no epilogue of its own (CLBlast). */
__kernel void linear_bias(__global store_t *Y, __global const store_t *bias, const int M, const int N,
                          const long y_off, const long y_sm, const long b_off, const long b_s)
{
    const int n = get_global_id(0), m = get_global_id(1);
    if (m < M && n < N)
        STORE(Y, y_off + (long)m * y_sm + n, LOAD(Y, y_off + (long)m * y_sm + n) + LOAD(bias, b_off + n * b_s));
}
