/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The projection GEMM of cl/portable/linear.cl on NVIDIA tensor cores (compute capability >= 8.0),
 * through inline PTX (warp_nv.cl, mma_nv.cl): the same arguments and result,
 *   C[m, n] = (ACCUMULATE ? C[m, n] : 0) + sum_k A[m, k] B[k, n] (* scale) (+ bias[n]),
 * as mma.sync m16n8k16 products with FP32 accumulation. A is F16 or BF16 (FCL_DTYPE); B is of A's
 * dtype, or I8 (B_I8), converted exactly to the mma dtype on its way into local memory.
 *
 * A work-group of WARPS_M x WARPS_N warps computes a TM x TN block of C; warp (wm, wn) owns its
 * rows wm * WTM .. + WTM - 1 and columns wn * WTN .. + WTN - 1 as MT x NT accumulator tiles of
 * 16 x 8 (the mma layout: lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8, columns 2 t
 * and 2 t + 1). K runs in slices of TK through a ring of STAGES local-memory stages, each holding
 * A's and B's slice as raw 16-bit values in rows along the operand's unit-stride dimension,
 * padded by 8 halves (ldmatrix then reads 8 rows without bank conflicts):
 *   A_K1 (A's k stride is 1): TM rows of TK, read by ldmatrix; else (its m stride is 1) TK rows
 *   of TM, read by ldmatrix.trans. B_K1 (B's k stride is 1): TN rows of TK, by ldmatrix; else
 *   (its n stride is 1) TK rows of TN, by ldmatrix.trans.
 * Slice kt + STAGES - 1 is fetched while slice kt is multiplied, with one barrier per slice. An
 * operand whose rows are 16-byte aligned (A_ASYNC, B_ASYNC: offset and row stride multiples of 8
 * elements, checked by the host) comes by cp.async (through L2 only), 16 bytes at a time, zero-filled past M, N or
 * K (partial copies); any other operand, and I8 B always, is read into registers before the
 * slice is multiplied and stored after (element by element with bounds checks; I8 rows 8-byte
 * aligned (B_VEC) as one 8-byte load per 8 values that lie inside), so no cp.async or ldmatrix
 * address is ever misaligned.
 *
 * I8 B's scale: SCALE_ON 1 (indexed by n) multiplies the FP32 sums in the epilogue; SCALE_ON 2
 * (indexed by k) multiplies A's values in registers, in FP32, which then enter the products as a
 * BF16 pair hi + lo (16 significant bits, the range of FP32: no F16 underflow), two mma each,
 * the int8 B exact in BF16 (MMA_BF16: the products are BF16 whatever A's dtype).
 *
 * Specialisation (-D): FCL_DTYPE 1 or 2 (A, bias, and C unless C_F32); B_I8; SCALE_ON 0, 1, 2;
 * MMA_BF16 (FCL_DTYPE 2, or SCALE_ON 2); C_F32; HAS_BIAS; ACCUMULATE; TM, TN (multiples of
 * 16 WARPS_M and 16 WARPS_N), TK (a multiple of 16), WARPS_M, WARPS_N, STAGES (2 to 4); A_K1,
 * B_K1; A_ASYNC, B_ASYNC, B_VEC.
 */

#define WG_SIZE (WARPS_M * WARPS_N * 32)
#define WTM (TM / WARPS_M) /* rows and columns of C per warp */
#define WTN (TN / WARPS_N)
#define MT (WTM / 16)      /* m16 tiles and n8 tiles per warp (NT even: one ldmatrix.x4 gives two) */
#define NT (WTN / 8)
#define SPLIT_A (B_I8 && SCALE_ON == 2)

#if A_K1
#define A_ROWS TM
#define A_COLS TK
#else
#define A_ROWS TK
#define A_COLS TM
#endif
#if B_K1
#define B_ROWS TN
#define B_COLS TK
#else
#define B_ROWS TK
#define B_COLS TN
#endif
#define A_PITCH (A_COLS + 8) /* halves from one local row to the next */
#define B_PITCH (B_COLS + 8)
#define A_STAGE (A_ROWS * A_PITCH) /* halves per stage */
#define B_STAGE (B_ROWS * B_PITCH)
#define A_CHUNKS (A_ROWS * A_COLS / 8) /* 8-element chunks of a slice (16 bytes in local memory) */
#define B_CHUNKS (B_ROWS * B_COLS / 8)
#define A_PER ((A_CHUNKS + WG_SIZE - 1) / WG_SIZE) /* chunks per work-item */
#define B_PER ((B_CHUNKS + WG_SIZE - 1) / WG_SIZE)
#define S_PER ((TK + WG_SIZE - 1) / WG_SIZE)       /* SCALE_ON 2: scale values per work-item */

#if B_I8
typedef char b_t;
typedef uint2 b_raw; /* 8 I8 values as read, converted when stored */
#else
typedef ushort b_t;
typedef uint4 b_raw;
#endif

#if A_ASYNC || B_ASYNC
#define COMMIT_COPIES() async_commit()
/* This work-item's copies of the slice about to be multiplied have landed (STAGES - 2 newer
 * groups may still be in flight). */
#if STAGES == 2
#define WAIT_COPIES() __asm__ __volatile__("cp.async.wait_group 0;" ::: "memory")
#elif STAGES == 3
#define WAIT_COPIES() __asm__ __volatile__("cp.async.wait_group 1;" ::: "memory")
#elif STAGES == 4
#define WAIT_COPIES() __asm__ __volatile__("cp.async.wait_group 2;" ::: "memory")
#else
#error "STAGES must be 2, 3 or 4"
#endif
#else
#define COMMIT_COPIES()
#define WAIT_COPIES()
#endif

/* The first n (0 to 8) 16-bit elements at src[at], zeros after (nothing read past them). */
MMA_INLINE uint4 chunk16(__global const ushort *src, long at, int n)
{
    uint w[4];
    #pragma unroll
    for (int p = 0; p < 4; p++) {
        const uint lo = 2 * p < n ? src[at + 2 * p] : 0u;
        const uint hi = 2 * p + 1 < n ? src[at + 2 * p + 1] : 0u;
        w[p] = lo | hi << 16;
    }
    return (uint4)(w[0], w[1], w[2], w[3]);
}

/*
 * This work-item's chunks (lid, lid + WG_SIZE, ...) of one slice of a 16-bit operand, `chunks`
 * chunks of a tile `cols` wide: chunk e holds elements c0 + c .. c0 + c + 7 (c = 8 (e % (cols /
 * 8))) of the operand's row r0 + e / (cols / 8), whose element j sits at src[off + row * stride
 * + j]; zeros at rows >= r_lim and elements >= c_lim. With `async` they are copied by cp.async
 * into `tile` (one row every `pitch` halves); else read into raw for store16.
 */
MMA_INLINE void fetch16(const bool async, __local ushort *tile, uint4 *raw, const int chunks, const int cols,
                        const int pitch, __global const ushort *src, long off, long stride, int r0, int c0, int r_lim,
                        int c_lim, int lid)
{
    #pragma unroll
    for (int i = 0; i < (chunks + WG_SIZE - 1) / WG_SIZE; i++) {
        const int e = lid + i * WG_SIZE, r = e / (cols / 8), c = e % (cols / 8) * 8;
        const int n = e < chunks && r0 + r < r_lim ? clamp(c_lim - c0 - c, 0, 8) : 0;
        const long at = off + (long)(r0 + r) * stride + c0 + c;
        if (!async)
            raw[i] = chunk16(src, at, n);
        else if (chunks % WG_SIZE == 0 || e < chunks)
            async_copy16_l2(tile + r * pitch + c, n > 0 ? src + at : src, 2 * n);
    }
}

/* The cp.async copies of a slice inside M, N and K (history v0.43.0: the index arithmetic and
 * bounds of fetch16, redone per slice and chunk, held the tensor cores back). Where a work-item's
 * chunks, WG_SIZE apart, are a fixed number of tile rows apart (STEADY), its first chunk's offsets
 * are computed once (first_chunk: *g elements from the operand's start at slice 0, *l halves in a
 * stage) and copy16_rows (mma_nv.cl) steps from there, WG_SIZE / (cols / 8) rows at a time. */
#define STEADY(chunks, cols) ((chunks) % WG_SIZE == 0 && WG_SIZE % ((cols) / 8) == 0)

MMA_INLINE void first_chunk(const int cols, const int pitch, long off, long stride, int r0, int c0, int lid, long *g,
                            int *l)
{
    const int r = lid / (cols / 8), c = lid % (cols / 8) * 8;
    *g = off + (long)(r0 + r) * stride + c0 + c;
    *l = r * pitch + c;
}

#if B_I8
/* The first n (0 to 8) I8 values at src[at] as 8 bytes, zeros after (B_VEC: all 8 as one load). */
MMA_INLINE uint2 chunk8(__global const char *src, long at, int n)
{
#if B_VEC
    if (n == 8)
        return *(__global const uint2 *)(src + at);
#endif
    uint w[2] = {0u, 0u};
    #pragma unroll
    for (int j = 0; j < 8; j++)
        if (j < n)
            w[j / 4] |= (uint)(uchar)src[at + j] << (8 * (j % 4));
    return (uint2)(w[0], w[1]);
}

/* This work-item's chunks of one slice of I8 B, as fetch16 reads them into raw (never by
 * cp.async: the values are converted on their way into local memory, by store8). */
MMA_INLINE void fetch8(b_raw *raw, const int chunks, const int cols, __global const char *src, long off, long stride,
                       int r0, int c0, int r_lim, int c_lim, int lid)
{
    #pragma unroll
    for (int i = 0; i < (chunks + WG_SIZE - 1) / WG_SIZE; i++) {
        const int e = lid + i * WG_SIZE, r = e / (cols / 8), c = e % (cols / 8) * 8;
        const int n = e < chunks && r0 + r < r_lim ? clamp(c_lim - c0 - c, 0, 8) : 0;
        raw[i] = chunk8(src, off + (long)(r0 + r) * stride + c0 + c, n);
    }
}

/* Stores the chunks that fetch8 read into raw, converted to the mma dtype, into `tile`. */
MMA_INLINE void store8(__local ushort *tile, const uint2 *raw, const int chunks, const int cols, const int pitch,
                       int lid)
{
    #pragma unroll
    for (int i = 0; i < (chunks + WG_SIZE - 1) / WG_SIZE; i++) {
        const int e = lid + i * WG_SIZE;
        if (chunks % WG_SIZE == 0 || e < chunks)
            *(__local uint4 *)(tile + e / (cols / 8) * pitch + e % (cols / 8) * 8) = i8_to_mma(raw[i]);
    }
}
#endif

/* Stores the chunks that fetch16 read into raw, as they are, into `tile` (the same geometry). */
MMA_INLINE void store16(__local ushort *tile, const uint4 *raw, const int chunks, const int cols, const int pitch,
                        int lid)
{
    #pragma unroll
    for (int i = 0; i < (chunks + WG_SIZE - 1) / WG_SIZE; i++) {
        const int e = lid + i * WG_SIZE;
        if (chunks % WG_SIZE == 0 || e < chunks)
            *(__local uint4 *)(tile + e / (cols / 8) * pitch + e % (cols / 8) * 8) = raw[i];
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void gemm_mma(GEMM_KERNEL_ARGS(ushort, b_t))
{
    __local ushort As[STAGES][A_STAGE] __attribute__((aligned(16)));
    __local ushort Bs[STAGES][B_STAGE] __attribute__((aligned(16)));
#if SPLIT_A
    __local float Ss[STAGES][TK] __attribute__((aligned(16))); /* the slice's scale values */
    float rs[S_PER];
#endif
    const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N, g = lane >> 2, t = lane & 3;
    const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
    const int n_k = (K + TK - 1) / TK;

    /* The operands as rows along their unit-stride dimension: origin (row, element) of slice k0
     * and the limits. */
#if A_K1
#define A_SLICE(k0) a_sm, m0, (k0), M, K
#else
#define A_SLICE(k0) a_sk, (k0), m0, K, M
#endif
#if B_K1
#define B_SLICE(k0) b_sn, n0, (k0), N, K
#else
#define B_SLICE(k0) b_sk, (k0), n0, K, N
#endif
    uint4 ra[A_PER];
    b_raw rb[B_PER];
    /* Slice kt: the async operands' copies into stage st (inside M, N and K from this work-item's
     * first chunks, where STEADY), the others into registers. */
    const long a_s = A_K1 ? a_sm : a_sk, b_s = B_K1 ? b_sn : b_sk;
    long a_g, b_g;
    int a_l, b_l;
    first_chunk(A_COLS, A_PITCH, a_off, a_s, A_K1 ? m0 : 0, A_K1 ? 0 : m0, lid, &a_g, &a_l);
    first_chunk(B_COLS, B_PITCH, b_off, b_s, B_K1 ? n0 : 0, B_K1 ? 0 : n0, lid, &b_g, &b_l);
    const bool inside = m0 + TM <= M && n0 + TN <= N;
/* Slice kt of the 16-bit operand X (x: its arguments' prefix) into stage st of Xs, or into rx. */
#define FETCH16(X, x, kt, st)                                                                      \
    do {                                                                                           \
        if (X##_ASYNC && STEADY(X##_CHUNKS, X##_COLS) && inside && ((kt) + 1) * TK <= K)           \
            copy16_rows(X##s[st], x##_l, X##_PITCH, X, x##_g + (kt) * (X##_K1 ? TK : TK * x##_s),    \
                        x##_s, WG_SIZE / (X##_COLS / 8), X##_PER);                                 \
        else                                                                                       \
            fetch16(X##_ASYNC, X##s[st], r##x, X##_CHUNKS, X##_COLS, X##_PITCH, X, x##_off,        \
                    X##_SLICE((kt) * TK), lid);                                                    \
    } while (0)
#define FETCH_A(kt, st) FETCH16(A, a, kt, st)
#if B_I8
#define FETCH_B(kt, st) fetch8(rb, B_CHUNKS, B_COLS, B, b_off, B_SLICE((kt) * TK), lid)
#else
#define FETCH_B(kt, st) FETCH16(B, b, kt, st)
#endif
#if SPLIT_A
#define FETCH_S(kt)                                                                                \
    for (int i = 0; i < S_PER; i++) {                                                              \
        const int k = (kt) * TK + lid + i * WG_SIZE;                                               \
        rs[i] = k < K ? scale[s_off + (long)k * s_s] : 0.0f;                                       \
    }
#define STORE_S(st)                                                                                \
    for (int i = 0; i < S_PER; i++)                                                                \
        if (TK % WG_SIZE == 0 || lid + i * WG_SIZE < TK)                                           \
            Ss[st][lid + i * WG_SIZE] = rs[i];
#else
#define FETCH_S(kt)
#define STORE_S(st)
#endif
    /* The register-held parts of a fetched slice into stage st. */
#if B_I8
#define STORE_B(st) store8(Bs[st], rb, B_CHUNKS, B_COLS, B_PITCH, lid)
#elif B_ASYNC
#define STORE_B(st)
#else
#define STORE_B(st) store16(Bs[st], rb, B_CHUNKS, B_COLS, B_PITCH, lid)
#endif
#if A_ASYNC
#define STORE_A(st)
#else
#define STORE_A(st) store16(As[st], ra, A_CHUNKS, A_COLS, A_PITCH, lid)
#endif

    float acc[MT][NT][4];
    #pragma unroll
    for (int mt = 0; mt < MT; mt++)
        #pragma unroll
        for (int nt = 0; nt < NT; nt++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][nt][e] = 0.0f;

    /* This lane's ldmatrix row in stage 0 (lane l gives row l % 8 of matrix l / 8). A fragments:
     * matrices (rows +0 / +8) x (k +0 / +8) in register order 0 1 2 3 = (0, 0) (8, 0) (0, 8)
     * (8, 8). B fragments: two n8 tiles, (n +0, k +0) (n +0, k +8) (n +8, k +0) (n +8, k +8). */
#if A_K1
    const uint a_lane =
        (uint)(size_t)(&As[0][0] + (wm * WTM + (lane & 7) + 8 * ((lane >> 3) & 1)) * A_PITCH + 8 * (lane >> 4));
#define A_AT(mt, ks) ((mt) * 16 * A_PITCH + (ks) * 16)
#else
    const uint a_lane =
        (uint)(size_t)(&As[0][0] + ((lane & 7) + 8 * (lane >> 4)) * A_PITCH + wm * WTM + 8 * ((lane >> 3) & 1));
#define A_AT(mt, ks) ((ks) * 16 * A_PITCH + (mt) * 16)
#endif
#if B_K1
    const uint b_lane =
        (uint)(size_t)(&Bs[0][0] + (wn * WTN + (lane & 7) + 8 * (lane >> 4)) * B_PITCH + 8 * ((lane >> 3) & 1));
#define B_AT(np, ks) ((np) * 16 * B_PITCH + (ks) * 16)
#else
    const uint b_lane =
        (uint)(size_t)(&Bs[0][0] + ((lane & 7) + 8 * ((lane >> 3) & 1)) * B_PITCH + wn * WTN + 8 * (lane >> 4));
#define B_AT(np, ks) ((ks) * 16 * B_PITCH + (np) * 16)
#endif

    /* Slices 0 .. STAGES - 2 in flight (or in place) before the loop. */
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < n_k) {
            FETCH_A(s, s);
            FETCH_B(s, s);
            FETCH_S(s);
            STORE_A(s);
            STORE_B(s);
            STORE_S(s);
        }
        COMMIT_COPIES();
    }
    for (int kt = 0; kt < n_k; kt++) {
        const int st = kt % STAGES, next = kt + STAGES - 1, sn = next % STAGES;
        WAIT_COPIES();
        barrier(CLK_LOCAL_MEM_FENCE); /* slice kt is in stage st; every warp is done with stage sn */
        if (next < n_k) {
            FETCH_A(next, sn);
            FETCH_B(next, sn);
            FETCH_S(next);
        }
        COMMIT_COPIES();

        const uint a_st = opaque(a_lane + 2 * st * A_STAGE), b_st = opaque(b_lane + 2 * st * B_STAGE);
        #pragma unroll
        for (int ks = 0; ks < TK / 16; ks++) {
            uint af[MT][4], bf[NT / 2][4];
            #pragma unroll
            for (int mt = 0; mt < MT; mt++)
#if A_K1
                ldmatrix_x4(af[mt], a_st + 2 * A_AT(mt, ks));
#else
                ldmatrix_x4_trans(af[mt], a_st + 2 * A_AT(mt, ks));
#endif
            #pragma unroll
            for (int np = 0; np < NT / 2; np++)
#if B_K1
                ldmatrix_x4(bf[np], b_st + 2 * B_AT(np, ks));
#else
                ldmatrix_x4_trans(bf[np], b_st + 2 * B_AT(np, ks));
#endif
#if SPLIT_A
            const float2 s01 = *(__local const float2 *)&Ss[st][ks * 16 + 2 * t];
            const float2 s89 = *(__local const float2 *)&Ss[st][ks * 16 + 8 + 2 * t];
            #pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                uint hi[4], lo[4];
                scale_split(af[mt], s01, s89, hi, lo);
                #pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    mma_16816(acc[mt][nt], hi, bf[nt >> 1][2 * (nt & 1)], bf[nt >> 1][2 * (nt & 1) + 1]);
                    mma_16816(acc[mt][nt], lo, bf[nt >> 1][2 * (nt & 1)], bf[nt >> 1][2 * (nt & 1) + 1]);
                }
            }
#else
            #pragma unroll
            for (int mt = 0; mt < MT; mt++)
                #pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    mma_16816(acc[mt][nt], af[mt], bf[nt >> 1][2 * (nt & 1)], bf[nt >> 1][2 * (nt & 1) + 1]);
#endif
        }

        if (next < n_k) { /* stage sn was released by the barrier above */
            STORE_A(sn);
            STORE_B(sn);
            STORE_S(sn);
        }
    }

    /* Epilogue: per column the I8 scale (SCALE_ON 1) and the bias, then the stores inside M x N. */
    float post_mul[NT][2], post_add[NT][2];
    #pragma unroll
    for (int nt = 0; nt < NT; nt++)
        #pragma unroll
        for (int c = 0; c < 2; c++) {
            const int n = n0 + wn * WTN + nt * 8 + 2 * t + c;
            post_mul[nt][c] = 1.0f;
            post_add[nt][c] = 0.0f;
            if (n < N) {
#if B_I8 && SCALE_ON == 1
                post_mul[nt][c] = scale[s_off + n * s_s];
#endif
#if HAS_BIAS
                post_add[nt][c] = LOAD(bias, bias_off + n * bias_s);
#endif
            }
        }
    /* per row: its results, with ACCUMULATE C's values loaded first, then its stores (the
     * compiler cannot tell C's loads from its stores apart: a load behind each store would wait out
     * the memory's latency per element; history v0.43.0) */
    #pragma unroll
    for (int mt = 0; mt < MT; mt++)
        #pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int m = m0 + wm * WTM + mt * 16 + g + 8 * hr;
            if (m >= M)
                continue;
            #pragma unroll
            for (int nt = 0; nt < NT; nt++)
                #pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int n = n0 + wn * WTN + nt * 8 + 2 * t + c;
                    float x = fma(acc[mt][nt][2 * hr + c], post_mul[nt][c], post_add[nt][c]);
#if ACCUMULATE
                    if (n < N)
                        x += LOADC(C, c_off + m * c_sm + n * c_sn);
#endif
                    acc[mt][nt][2 * hr + c] = x;
                }
            #pragma unroll
            for (int nt = 0; nt < NT; nt++)
                #pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int n = n0 + wn * WTN + nt * 8 + 2 * t + c;
                    if (n < N)
                        STOREC(C, c_off + m * c_sm + n * c_sn, acc[mt][nt][2 * hr + c]);
                }
        }
}
