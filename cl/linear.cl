/*
 * Projection y = x W^T (* scale per output row) + bias, the GEMM of the fused-projection ops:
 * Y[m, n] = sum_k X[m, k] W[n, k] (* scale[n]) (+ bias[n]), FP32 accumulation. One work-group
 * computes a TILE x TILE block of Y, one output per work-item, staging TILE x TILE tiles of X
 * and W in local memory; W is converted (I8: dequantised with its row scale) in registers,
 * never expanded in device memory.
 *
 * Specialisation (-D): FCL_DTYPE (X, bias, Y: common.cl); W_DTYPE (0 f32, 1 f16, 2 bf16, 3 i8);
 * HAS_BIAS; TILE.
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

__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1)))
void linear(__global const store_t *X, __global const w_t *W, __global const float *scale,
            __global const store_t *bias, __global store_t *Y, const int M, const int N, const int K,
            const long x_off, const long x_sm, const long w_off, const long w_sn, const long y_off,
            const long y_sm, const long b_off, const long b_s, const long s_off, const long s_s)
{
    __local float Xs[TILE][TILE + 1]; /* Xs[m][k] */
    __local float Ws[TILE][TILE + 1]; /* Ws[n][k] */
    const int tn = get_local_id(0), tm = get_local_id(1);
    const int n0 = get_group_id(0) * TILE, m0 = get_group_id(1) * TILE;
    const int n = n0 + tn, m = m0 + tm;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        barrier(CLK_LOCAL_MEM_FENCE);
        /* work-item (tn, tm) loads X[m0 + tm, k0 + tn] and W[n0 + tm, k0 + tn]: rows along k */
        const int k = k0 + tn;
        Xs[tm][tn] = m0 + tm < M && k < K ? LOAD(X, x_off + (long)(m0 + tm) * x_sm + k) : 0.0f;
        Ws[tm][tn] = n0 + tm < N && k < K ? LOADW(W, w_off + (long)(n0 + tm) * w_sn + k) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TILE; kk++)
            acc = fma(Xs[tm][kk], Ws[tn][kk], acc);
    }
    if (m >= M || n >= N)
        return;
#if W_DTYPE == 3
    acc *= scale[s_off + n * s_s];
#endif
#if HAS_BIAS
    acc += LOAD(bias, b_off + n * b_s);
#endif
    STORE(Y, y_off + (long)m * y_sm + n, acc);
}

/* Y[m, n] += bias[n] after a GEMM that has no epilogue of its own (CLBlast). */
__kernel void linear_bias(__global store_t *Y, __global const store_t *bias, const int M, const int N,
                          const long y_off, const long y_sm, const long b_off, const long b_s)
{
    const int n = get_global_id(0), m = get_global_id(1);
    if (m < M && n < N)
        STORE(Y, y_off + (long)m * y_sm + n, LOAD(Y, y_off + (long)m * y_sm + n) + LOAD(bias, b_off + n * b_s));
}
