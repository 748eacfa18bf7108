/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The projection GEMM of linear_mma.cl on Hopper's warpgroup tensor cores (compute capability
 * 9.0, wgmma through sm_90a: wgmma_nv.cl), for operands with 16-byte aligned rows along their
 * unit-stride dimension: A (M x K) K-contiguous, or M-contiguous (WGMMA_SS_A_MN: the weight
 * gradients' dY^T); B (K x N) K-contiguous (stored as N rows of K: the weights of the forward), or
 * N-contiguous (WGMMA_SS_B_MN: the weights of the input gradients, the activations of the weight
 * gradients). The same arguments and result as linear_mma.cl's gemm_mma:
 *   C[m, n] = (ACCUMULATE ? C[m, n] : 0) + sum_k A[m, k] B[k, n] (* scale[n]) (+ bias[n]),
 * FP32 accumulation. A is F16 or BF16 (FCL_DTYPE), or I8 (A_I8, below); B is of A's dtype, or I8
 * (B_I8), N-contiguous, converted exactly to the mma dtype in local memory and scaled per k
 * (SCALE_ON 2: the input gradients' weights). The scale then multiplies A in FP32 on its way
 * into the products: each warp reads its A fragments from the slice (ldmatrix), scales them and
 * splits them into BF16 hi + lo (scale_split, mma_nv.cl), and A enters wgmma from registers,
 * twice (hi, lo) per product, against the BF16 B (MMA_BF16).
 *
 * A work-group of WGS warpgroups computes a TM x TN block of C; warpgroup w owns rows
 * w * TM / WGS .. + TM / WGS - 1, as TM / (64 WGS) x TN / NW products m64nNWk16 per k step
 * (accumulator layout: wgmma_nv.cl). K runs in slices of TK (16, 32 or 64) through a ring of
 * STAGES local-memory stages, from which wgmma reads both operands by descriptor. A K-contiguous
 * operand's slice is stored as rows of TK 16-bit values (32, 64 or 128 bytes) with the swizzle
 * of their width (wgmma_desc_rows); an MN-contiguous one as 64-column atoms of TK rows with the
 * 128-byte swizzle (swizzled_offset, mma_nv.cl). Both put 64 rows of C's m (or n) in
 * 128 TK bytes, so a product's operands start at the same place in either layout.
 * Every copy is a 16-byte cp.async through L2 only (async_copy16_l2), zero-filled past M, N and
 * K; tiles inside M, N and K skip the bounds. Slice kt + AHEAD is copied while slice kt is
 * multiplied, AHEAD = STAGES - 1 - LAG: with LAG 0 each slice's products complete before the
 * next slice's barrier; with LAG 1 a slice's products are issued before the previous slice's
 * have completed (the tensor cores never wait for the barrier), at one stage of prefetch less.
 * I8 B arrives raw in its own ring (AHEAD slices, rows of the operand's unit-stride dimension);
 * each work-item converts the chunks it copied (no barrier) into one of two 16-bit tiles of the
 * operand's layout, slice kt + 1 while slice kt is multiplied.
 *
 * A_I8 (the forward's I8 weights, W8A16): the host swaps the operands, C^T = W X^T, so that the
 * weights are A, I8, K-contiguous, M rows of C (C's m stride 1). Their slices arrive raw (rows of
 * TK bytes, 16-byte chunks swizzled so that a fragment load's 8 rows meet distinct banks) and each
 * warp reads its A fragments from them and converts them in registers (i8_pair: exact), and A
 * enters wgmma from registers against the 16-bit activations: no 16-bit copy of the weights
 * anywhere, and a stage of half the bytes. The scale and the bias are then per row of C
 * (SCALE_ON 3).
 *
 * Specialisation (-D): FCL_DTYPE 1 or 2 (A, bias, and C unless C_F32); A_I8; B_I8; SCALE_ON 0, 1 (a
 * scale per column: 16-bit B holding I8 weights converted beforehand), 2 (I8 B, A K-contiguous,
 * MMA_BF16) or 3 (a scale per row: A_I8); MMA_BF16;
 * WGMMA_SS_A_MN, WGMMA_SS_B_MN (wgmma_nv.cl); SWIZZLED_TILES 1;
 * C_F32; HAS_BIAS; ACCUMULATE; TM (64 WGS times 1 or 2), TN (64, 128 or a multiple of 128 up to
 * 256), TK, WGS (1 or 2), STAGES (2 to 4), LAG (0 or 1, below STAGES - 1; 0 with A_I8 or B_I8); PAIRS
 * (C's n stride 1 and pairs of columns 4-byte aligned (16-bit C) or 8-byte aligned (F32): one
 * store per pair).
 */

#define WG_SIZE (128 * WGS)
#define ROW_BYTES (2 * TK)                /* a slice row in local memory */
#define ROW_CHUNKS (TK / 8)               /* its 16-byte chunks */
#define WG_ROWS (TM / WGS)                /* rows of C per warpgroup */
#define MB (WG_ROWS / 64)                 /* m64 products per warpgroup and k step */
#if TN >= 128                             /* columns per product */
#define NW 128
#else
#define NW TN
#endif
#define NB (TN / NW)                      /* products along n */
#define A_TILE (TM * TK)                  /* halves of a stage */
#define B_TILE (TN * TK)
#define AHEAD (STAGES - 1 - LAG)          /* slices in flight ahead of the one multiplied */

#if B_I8
typedef char b_t;
#else
typedef ushort b_t;
#endif
#if A_I8
typedef char a_t;
#else
typedef ushort a_t;
#endif
#if A_I8 && (B_I8 || SCALE_ON != 3 || WGMMA_SS_A_MN || WGMMA_SS_B_MN || LAG)
#error "I8 A: K-contiguous, scaled per row, against K-contiguous 16-bit B, LAG 0"
#endif
#if SCALE_ON == 3 && !A_I8
#error "only I8 A is scaled per row"
#endif
#define SPLIT_A (B_I8 && SCALE_ON == 2) /* A scaled along k, from registers as BF16 hi + lo */
#if B_I8 && (SCALE_ON != 2 || !WGMMA_SS_B_MN)
#error "I8 B: N-contiguous, scaled along k (SCALE_ON 2)"
#endif
#if SCALE_ON == 2 && !B_I8
#error "only I8 B is scaled along k"
#endif
#if SPLIT_A && (WGMMA_SS_A_MN || !MMA_BF16)
#error "I8 B scaled along k takes A K-contiguous and BF16 products"
#endif
#define MN_ATOM_BYTES (128 * TK) /* a 64-column atom of an MN-contiguous slice */

/* The descriptor of a product's operand whose 64-row (m or n) blocks start at `addr`, k step ks
 * of the slice, in the operand's layout. */
#define K_MAJOR_DESC(addr, ks) wgmma_desc_rows((addr) + (ks) * 32, ROW_BYTES)
#define MN_MAJOR_DESC(addr, ks) wgmma_desc((addr) + (ks) * 2048, MN_ATOM_BYTES, 1024)
#if WGMMA_SS_A_MN
#define A_DESC MN_MAJOR_DESC
#else
#define A_DESC K_MAJOR_DESC
#endif
#if WGMMA_SS_B_MN
#define B_DESC MN_MAJOR_DESC
#else
#define B_DESC K_MAJOR_DESC
#endif

/* Waits until this work-item's copies of the slice about to be multiplied have landed (AHEAD - 1
 * newer groups may still be in flight). */
#if B_I8 && LAG
#error "I8 B takes LAG 0 (its converted tiles are reused once the previous slice's products completed)"
#endif

/* I8 A: waits until slice kt + 1 has landed too (its A fragments are read during slice kt's
 * products), AHEAD - 2 newer groups may still be in flight. */
#if A_I8 && AHEAD == 2
#define WAIT_NEXT() __asm__ __volatile__("cp.async.wait_group 0;" ::: "memory")
#elif A_I8 && AHEAD == 3
#define WAIT_NEXT() __asm__ __volatile__("cp.async.wait_group 1;" ::: "memory")
#elif A_I8
#error "I8 A takes 3 or 4 stages"
#endif
#if AHEAD == 1
#define WAIT_SLICE() __asm__ __volatile__("cp.async.wait_group 0;" ::: "memory")
#elif AHEAD == 2
#define WAIT_SLICE() __asm__ __volatile__("cp.async.wait_group 1;" ::: "memory")
#elif AHEAD == 3
#define WAIT_SLICE() __asm__ __volatile__("cp.async.wait_group 2;" ::: "memory")
#else
#error "STAGES - 1 - LAG must be 1 to 3"
#endif

/* Halves offset of 16-byte chunk c of row r in a slice tile (the swizzle of wgmma_desc_rows). */
inline int slice_chunk(int r, int c)
{
    return 8 * (r * ROW_CHUNKS + (c ^ ((r * ROW_BYTES / 128) & (ROW_CHUNKS - 1))));
}

/* Starts the copies of rows r0 .. r0 + rows - 1, columns k0 .. k0 + TK - 1 of a K-contiguous
 * 16-bit operand (element (r, k) at src[off + r * stride + k]) into `tile`: zeros at rows >= r_lim
 * and columns >= K. */
MMA_INLINE void issue_slice(__local ushort *tile, const int rows, __global const ushort *src, long off, long stride,
                            int r0, int r_lim, int k0, int K, int lid)
{
    const bool whole = r0 + rows <= r_lim && k0 + TK <= K; /* nothing to zero (uniform) */
    #pragma unroll
    for (int i = 0; i < (rows * ROW_CHUNKS + WG_SIZE - 1) / WG_SIZE; i++) {
        const int e = lid + i * WG_SIZE, r = e / ROW_CHUNKS, c = e % ROW_CHUNKS;
        if ((rows * ROW_CHUNKS) % WG_SIZE == 0 || e < rows * ROW_CHUNKS) {
            const long at = off + (long)(r0 + r) * stride + 8 * c;
            if (whole) {
                async_copy16_l2(tile + slice_chunk(r, c), src + at + k0, 16);
            } else {
                const int n = r0 + r < r_lim ? clamp(K - k0 - 8 * c, 0, 8) : 0;
                async_copy16_l2(tile + slice_chunk(r, c), n > 0 ? src + at + k0 : src, 2 * n);
            }
        }
    }
}

/* Starts the copies of rows k0 .. k0 + TK - 1 (along k), columns c0 .. c0 + cols - 1 of an
 * MN-contiguous 16-bit operand (element (k, c) at src[off + k * stride + c]) into `tile`, as
 * 64-column atoms of TK rows: zeros at columns >= c_lim and rows >= K. */
MMA_INLINE void issue_slice_mn(__local ushort *tile, const int cols, __global const ushort *src, long off,
                               long stride, int c0, int c_lim, int k0, int K, int lid)
{
    const bool whole = c0 + cols <= c_lim && k0 + TK <= K; /* nothing to zero (uniform) */
    #pragma unroll
    for (int i = 0; i < (TK * cols / 8 + WG_SIZE - 1) / WG_SIZE; i++) {
        const int e = lid + i * WG_SIZE, r = e / (cols / 8), c = 8 * (e % (cols / 8));
        if ((TK * cols / 8) % WG_SIZE == 0 || e < TK * cols / 8) {
            const long at = off + (long)(k0 + r) * stride + c0 + c;
            __local ushort *dst = tile + swizzled_offset(r, c, MN_ATOM_BYTES / 2);
            if (whole) {
                async_copy16_l2(dst, src + at, 16);
            } else {
                const int n = k0 + r < K ? clamp(c_lim - c0 - c, 0, 8) : 0;
                async_copy16_l2(dst, n > 0 ? src + at : src, 2 * n);
            }
        }
    }
}

/* Slice kt's copies of A into its stage, of 16-bit B into the tile B_READ(kt), and of I8 B into
 * its raw slot B_RAW(kt). */
#if WGMMA_SS_A_MN
#define ISSUE_A(kt) issue_slice_mn(A_STAGE((kt) % STAGES), TM, A, a_off, a_sk, m0, M, (kt) * TK, K, lid)
#else
#define ISSUE_A(kt) issue_slice(A_STAGE((kt) % STAGES), TM, A, a_off, a_sm, m0, M, (kt) * TK, K, lid)
#endif
#if WGMMA_SS_B_MN
#define ISSUE_B(kt) issue_slice_mn(B_READ(kt), TN, B, b_off, b_sk, n0, N, (kt) * TK, K, lid)
#else
#define ISSUE_B(kt) issue_slice(B_READ(kt), TN, B, b_off, b_sn, n0, N, (kt) * TK, K, lid)
#endif
#define ISSUE_RAW_B(kt) issue_raw_slice(B_RAW(kt), RAW_ROWS, RAW_COLS, 0, B, b_off, b_sk, (kt) * TK, K, n0, N, lid)

/* A 16-bit operand's 16-byte chunks of a slice that this work-item copies: CHUNKS_PER of them,
 * WG_SIZE chunks apart. Where that is a whole number of rows of the slice and of its swizzle
 * pattern (STEADY), and the slice lies inside M, N and K, the copies take the first chunk's offsets,
 * computed once (chunk_offsets), and constant steps from there (copy16_rows, mma_nv.cl): a row of
 * the operand, a row of the stage's layout at the same place in its swizzle. The index arithmetic
 * redone per slice and chunk held the tensor cores back (history v0.43.0). */
#define CHUNKS_PER(rows) ((rows * TK / 8 + WG_SIZE - 1) / WG_SIZE)
#define A_PER CHUNKS_PER(TM)
#define B_PER CHUNKS_PER(TN)
/* slice rows from one of a work-item's chunks to the next: K-contiguous, MN-contiguous (a row of
 * 8-chunk swizzle atoms: steady when a multiple of 8) */
#define K_ROWS_APART (WG_SIZE / ROW_CHUNKS)
#define MN_ROWS_APART(rows) (WG_SIZE / (rows / 8))
#define STEADY(rows, mn) ((rows * TK / 8) % WG_SIZE == 0 && (!(mn) || MN_ROWS_APART(rows) % 8 == 0))
#define A_STEADY STEADY(TM, WGMMA_SS_A_MN)
#define B_STEADY STEADY(TN, WGMMA_SS_B_MN)
#define A_ROWS_APART (WGMMA_SS_A_MN ? MN_ROWS_APART(TM) : K_ROWS_APART)
#define B_ROWS_APART (WGMMA_SS_B_MN ? MN_ROWS_APART(TN) : K_ROWS_APART)

/* This work-item's first chunk of a slice (chunk lid) of a 16-bit operand of `rows` rows (m or n)
 * from r0 on, element (r, k) at off + r * stride + k (K-contiguous) or off + k * stride + r (mn):
 * *g its element offset at slice 0, *l its halves offset in a stage. */
MMA_INLINE void chunk_offsets(const int rows, const int mn, long off, long stride, int r0, int lid, long *g, int *l)
{
    if (mn) {
        const int r = lid / (rows / 8), c = 8 * (lid % (rows / 8));
        *g = off + (long)r * stride + r0 + c;
        *l = swizzled_offset(r, c, MN_ATOM_BYTES / 2);
    } else {
        const int r = lid / ROW_CHUNKS, c = lid % ROW_CHUNKS;
        *g = off + (long)(r0 + r) * stride + 8 * c;
        *l = slice_chunk(r, c);
    }
}

#if A_I8 || B_I8
/* Byte offset of 16-byte chunk c of row r in a raw I8 slice whose rows hold `cols` bytes: in
 * place, or (`swz`) XOR-swizzled by the row's place in 128 bytes, so that 8 rows read at the same
 * chunk meet distinct banks. */
inline int raw_chunk(int r, int c, const int cols, const int swz)
{
    return r * cols + 16 * (swz ? c ^ ((r * cols / 128) & (cols / 16 - 1)) : c);
}

/* Starts the copies of an I8 operand's rows r0 .. r0 + rows - 1, columns c0 .. c0 + cols - 1
 * (element (r, c) at src[off + r * stride + c]) into `raw` (chunks at raw_chunk(.., swz)): zeros
 * at rows >= r_lim and columns >= c_lim. */
MMA_INLINE void issue_raw_slice(__local uchar *raw, const int rows, const int cols, const int swz,
                                __global const char *src, long off, long stride, int r0, int r_lim, int c0, int c_lim,
                                int lid)
{
    const bool whole = r0 + rows <= r_lim && c0 + cols <= c_lim; /* nothing to zero (uniform) */
    #pragma unroll
    for (int i = 0; i < (rows * cols / 16 + WG_SIZE - 1) / WG_SIZE; i++) {
        const int e = lid + i * WG_SIZE, r = e / (cols / 16), c = e % (cols / 16);
        if ((rows * cols / 16) % WG_SIZE == 0 || e < rows * cols / 16) {
            const long at = off + (long)(r0 + r) * stride + c0 + 16 * c;
            if (whole) {
                async_copy16_l2(raw + raw_chunk(r, c, cols, swz), src + at, 16);
            } else {
                const int n = r0 + r < r_lim ? clamp(c_lim - c0 - 16 * c, 0, 16) : 0;
                async_copy16_l2(raw + raw_chunk(r, c, cols, swz), n > 0 ? src + at : src, n);
            }
        }
    }
}
#endif

#if B_I8
/* A raw I8 slice of B in local memory: RAW_ROWS (TK) rows of RAW_COLS (TN) bytes along B's
 * unit-stride dimension, unswizzled; CONVERTED(r, c) is the halves offset of its 8 values at row
 * r, columns c .. c + 7 in the 16-bit tile. */
#define RAW_ROWS TK
#define RAW_COLS TN
#define CONVERTED(r, c) swizzled_offset(r, c, MN_ATOM_BYTES / 2)
#define RAW_CHUNKS (RAW_ROWS * RAW_COLS / 16) /* its 16-byte chunks */

/* This work-item's chunks of the raw I8 slice (those that issue_raw_slice copied: its own
 * copies, landed, need no barrier) as values of the mma dtype (exact) into the swizzled `tile`. */
MMA_INLINE void convert_slice(__local ushort *tile, __local const uchar *raw, int lid)
{
    #pragma unroll
    for (int i = 0; i < (RAW_CHUNKS + WG_SIZE - 1) / WG_SIZE; i++) {
        const int e = lid + i * WG_SIZE, r = e / (RAW_COLS / 16), c = 16 * (e % (RAW_COLS / 16));
        if (RAW_CHUNKS % WG_SIZE == 0 || e < RAW_CHUNKS) {
            const uint4 v = *(__local const uint4 *)(raw + raw_chunk(r, c / 16, RAW_COLS, 0));
            *(__local uint4 *)(tile + CONVERTED(r, c)) = i8_to_mma(v.s01);
            *(__local uint4 *)(tile + CONVERTED(r, c + 8)) = i8_to_mma(v.s23);
        }
    }
}
#endif

#if A_I8
/* This lane's A fragment (mma_16816's layout: rows r and r + 8, k 2 t, 2 t + 1, 2 t + 8, 2 t + 9
 * of k step ks) from the raw slice, as values of the mma dtype (exact). */
MMA_INLINE void raw_a_fragment(uint *a, __local const uchar *raw, int r, int ks, int t)
{
    const int w = 4 * (t >> 1), h = t & 1; /* the word of k 2 t in the chunk, and its half */
    __local const uchar *r0 = raw + raw_chunk(r, ks, TK, 1) + w, *r8 = raw + raw_chunk(r + 8, ks, TK, 1) + w;
    a[0] = i8_pair(*(__local const uint *)r0 ^ 0x80808080u, h);
    a[1] = i8_pair(*(__local const uint *)r8 ^ 0x80808080u, h);
    a[2] = i8_pair(*(__local const uint *)(r0 + 8) ^ 0x80808080u, h);
    a[3] = i8_pair(*(__local const uint *)(r8 + 8) ^ 0x80808080u, h);
}

/* This warp's A fragments of a slice (row: this lane's first row of the warpgroup's 64), every k
 * step and m64 block. */
MMA_INLINE void slice_fragments(uint (*f)[MB][4], __local const uchar *raw, int row, int t)
{
    #pragma unroll
    for (int ks = 0; ks < TK / 16; ks++)
        #pragma unroll
        for (int mb = 0; mb < MB; mb++)
            raw_a_fragment(f[ks][mb], raw, row + mb * 64, ks, t);
}
#endif

#if SPLIT_A
/* The scales of this work-item's A fragment columns in slice k0's k steps (scale_split's s01
 * and s89; zero at k >= K). */
MMA_INLINE void load_scales(float2 *s01, float2 *s89, __global const float *scale, long s_off, long s_s, int k0,
                            int K, int t)
{
    #pragma unroll
    for (int ks = 0; ks < TK / 16; ks++) {
        const int k = k0 + ks * 16 + 2 * t;
        s01[ks] = (float2)(k < K ? scale[s_off + k * s_s] : 0.0f, k + 1 < K ? scale[s_off + (k + 1) * s_s] : 0.0f);
        s89[ks] = (float2)(k + 8 < K ? scale[s_off + (k + 8) * s_s] : 0.0f,
                           k + 9 < K ? scale[s_off + (k + 9) * s_s] : 0.0f);
    }
}
#endif

#if PAIRS && !C_F32
/* x0 and x1 rounded to C's 16-bit dtype (FCL_DTYPE) as one word, x0 in the low half: pack_pair,
 * whose dtype is the products' (BF16 for F16 activations with I8 B scaled along k). */
inline uint pack_c_pair(float x0, float x1)
{
#if FCL_DTYPE == 1 && MMA_BF16
    uint r;
    __asm__("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
    return r;
#else
    return pack_pair(x0, x1);
#endif
}
#endif

/* Column n's result (and n + 1's) into C at `at` (at + c_sn): x0, x1 (plus C's values with
 * ACCUMULATE), each only below N; with PAIRS both as one store when both are. */
MMA_INLINE void store_c_pair(__global c_t *C, long at, long c_sn, int n, int N, float x0, float x1)
{
#if PAIRS
    if (n + 1 < N) {
#if ACCUMULATE
        x0 += LOADC(C, at);
        x1 += LOADC(C, at + 1);
#endif
#if C_F32
        *(__global float2 *)(C + at) = (float2)(x0, x1);
#else
        *(__global uint *)((__global ushort *)C + at) = pack_c_pair(x0, x1);
#endif
        return;
    }
#endif
    if (n < N) {
#if ACCUMULATE
        x0 += LOADC(C, at);
#endif
        STOREC(C, at, x0);
    }
    if (n + 1 < N) {
#if ACCUMULATE
        x1 += LOADC(C, at + c_sn);
#endif
        STOREC(C, at + c_sn, x1);
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void gemm_wgmma(GEMM_KERNEL_ARGS(a_t, b_t))
{
    /* A's stages, then B's (I8 B: two converted tiles, then a raw ring of AHEAD slices: slice kt's
     * raw values are converted during slice kt - 1, so its slot is free for slice kt + AHEAD
     * from slice kt's barrier on; I8 A: B's stages first, then A's raw ones); every tile starts
     * aligned to its 8-row swizzle groups. */
#if A_I8
    __local ushort tiles[STAGES * (B_TILE + A_TILE / 2)] __attribute__((aligned(1024)));
#define B_READ(kt) (tiles + ((kt) % STAGES) * B_TILE)
#define A_STAGE(st) ((__local uchar *)(tiles + STAGES * B_TILE) + (st) * TM * TK)
#elif B_I8
    __local ushort tiles[STAGES * A_TILE + 2 * B_TILE + AHEAD * B_TILE / 2] __attribute__((aligned(1024)));
#define B_READ(kt) (tiles + STAGES * A_TILE + ((kt) & 1) * B_TILE)
#define B_RAW(kt) ((__local uchar *)(tiles + STAGES * A_TILE + 2 * B_TILE) + ((kt) % AHEAD) * B_TILE)
#else
    __local ushort tiles[STAGES * (A_TILE + B_TILE)] __attribute__((aligned(1024)));
#define B_READ(kt) (tiles + STAGES * A_TILE + ((kt) % STAGES) * B_TILE)
#endif
#if !A_I8
#define A_STAGE(st) (tiles + (st) * A_TILE)
#endif
    const int lid = get_local_id(0), wg = lid >> 7, warp = (lid >> 5) & 3, lane = lid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
    const int n_k = (K + TK - 1) / TK;

    /* Slice kt's copies into its stage (I8 B: its raw slot): inside M, N and K from this work-item's
     * first chunks (STEADY operands), else through the bounds; I8 A's (a chunk or two per
     * work-item, their places computed once by the compiler) through issue_raw_slice. */
    const long b_s = WGMMA_SS_B_MN ? b_sk : b_sn;
    long b_g;
    int b_l;
#if !A_I8
    const long a_s = WGMMA_SS_A_MN ? a_sk : a_sm;
    long a_g;
    int a_l;
    chunk_offsets(TM, WGMMA_SS_A_MN, a_off, a_s, m0, lid, &a_g, &a_l);
#endif
    chunk_offsets(TN, WGMMA_SS_B_MN, b_off, b_s, n0, lid, &b_g, &b_l);
    const bool inside = m0 + TM <= M && n0 + TN <= N;
#define SLICE_INSIDE(kt) (inside && ((kt) + 1) * TK <= K)
/* Slice kt of the 16-bit operand X (x: the prefix of its offsets) into `tile`. */
#define ISSUE16(X, x, tile, kt)                                                                    \
    do {                                                                                           \
        if (X##_STEADY && SLICE_INSIDE(kt))                                                        \
            copy16_rows(tile, x##_l, WGMMA_SS_##X##_MN ? 64 : ROW_BYTES / 2, X,                      \
                        x##_g + (kt) * (WGMMA_SS_##X##_MN ? TK * x##_s : TK), x##_s, X##_ROWS_APART,   \
                        X##_PER);                                                                  \
        else                                                                                       \
            ISSUE_##X(kt);                                                                         \
    } while (0)
#if A_I8
#define ISSUE(kt)                                                                                  \
    do {                                                                                           \
        issue_raw_slice(A_STAGE((kt) % STAGES), TM, TK, 1, A, a_off, a_sm, m0, M, (kt) * TK, K, lid); \
        ISSUE16(B, b, B_READ(kt), kt);                                                             \
    } while (0)
#elif B_I8
#define ISSUE(kt)                                                                                  \
    do {                                                                                           \
        ISSUE16(A, a, A_STAGE((kt) % STAGES), kt);                                                 \
        ISSUE_RAW_B(kt);                                                                           \
    } while (0)
#else
#define ISSUE(kt)                                                                                  \
    do {                                                                                           \
        ISSUE16(A, a, A_STAGE((kt) % STAGES), kt);                                                 \
        ISSUE16(B, b, B_READ(kt), kt);                                                             \
    } while (0)
#endif

    float acc[MB][NB][NW / 2];
    #pragma unroll
    for (int mb = 0; mb < MB; mb++)
        #pragma unroll
        for (int nb = 0; nb < NB; nb++)
            #pragma unroll
            for (int e = 0; e < NW / 2; e++)
                acc[mb][nb][e] = 0.0f;

    for (int s = 0; s < AHEAD; s++) {
        if (s < n_k)
            ISSUE(s);
        async_commit();
    }
#if SPLIT_A
    /* this lane's ldmatrix row of its warp's 16 (lane l gives row l % 8 of matrix l / 8: rows +0 /
     * +8, k +0 / +8), the warpgroup's rows first; slice 0's scales */
    const int a_row = warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
    float2 s01[TK / 16], s89[TK / 16];
    load_scales(s01, s89, scale, s_off, s_s, 0, K, t);
#endif
#if B_I8
    WAIT_SLICE();
    convert_slice(B_READ(0), B_RAW(0), lid);
#endif
#if A_I8
    /* this warp's A fragments of slice 0; those of slice kt + 1 are read while slice kt's products
     * run, into `next` (kept apart from `frag`, which the products read, by wgmma_keep_fragments) */
    const int a_row = wg * WG_ROWS + warp * 16 + g;
    const uint hidden_zero = (uint)K >> 31; /* K >= 0 */
    uint frag[TK / 16][MB][4], next[TK / 16][MB][4];
    WAIT_SLICE();
    barrier(CLK_LOCAL_MEM_FENCE);
    slice_fragments(frag, A_STAGE(0), a_row, t);
#endif
    for (int kt = 0; kt < n_k; kt++) {
#if A_I8
        WAIT_NEXT();
#else
        WAIT_SLICE();
#endif
        fence_async_local();
        barrier(CLK_LOCAL_MEM_FENCE); /* slice kt is in local memory; every warpgroup is done with the
                                       * products of slice kt - 1 - LAG, whose stage is refilled now */
        if (kt + AHEAD < n_k)
            ISSUE(kt + AHEAD);
        async_commit();

        const uint b_addr = local_address(B_READ(kt));
#if !A_I8
        const uint a_addr = local_address(A_STAGE(kt % STAGES)) + wg * WG_ROWS * ROW_BYTES;
#endif
#if SPLIT_A
        /* this warp's A fragments of the slice, scaled and split, then the next slice's scales */
        uint hi[TK / 16][MB][4], lo[TK / 16][MB][4];
        #pragma unroll
        for (int ks = 0; ks < TK / 16; ks++)
            #pragma unroll
            for (int mb = 0; mb < MB; mb++) {
                uint a[4];
                ldmatrix_x4(a, a_addr + 2 * slice_chunk(mb * 64 + a_row, 2 * ks + (lane >> 4)));
                scale_split(a, s01[ks], s89[ks], hi[ks][mb], lo[ks][mb]);
            }
        if (kt + 1 < n_k)
            load_scales(s01, s89, scale, s_off, s_s, (kt + 1) * TK, K, t);
#endif
        wgmma_fence();
        #pragma unroll
        for (int ks = 0; ks < TK / 16; ks++)
            #pragma unroll
            for (int mb = 0; mb < MB; mb++)
                #pragma unroll
                for (int nb = 0; nb < NB; nb++) {
#if A_I8
                    WGMMA_RSK_N(NW)(acc[mb][nb], frag[ks][mb], B_DESC(b_addr + nb * NW * ROW_BYTES, ks), 1);
#elif SPLIT_A
                    WGMMA_RS_N(NW)(acc[mb][nb], hi[ks][mb], B_DESC(b_addr + nb * NW * ROW_BYTES, ks));
                    WGMMA_RS_N(NW)(acc[mb][nb], lo[ks][mb], B_DESC(b_addr + nb * NW * ROW_BYTES, ks));
#else
                    WGMMA_SS_N(NW)(acc[mb][nb], A_DESC(a_addr + mb * 64 * ROW_BYTES, ks),
                                   B_DESC(b_addr + nb * NW * ROW_BYTES, ks), 1);
#endif
                }
        wgmma_commit();
#if B_I8
        if (kt + 1 < n_k) { /* the next slice, converted while the tensor cores multiply this one into
                             * the tile that slice kt - 1's products (complete) read */
            WAIT_SLICE();
            convert_slice(B_READ(kt + 1), B_RAW(kt + 1), lid);
        }
#endif
#if A_I8
        if (kt + 1 < n_k)
            slice_fragments(next, A_STAGE((kt + 1) % STAGES), a_row, t);
#endif
#if LAG
        __asm__ __volatile__(SM90A "wgmma.wait_group.sync.aligned 1;" ::: "memory");
#else
        wgmma_wait_all();
#endif
#if A_I8
        wgmma_keep_fragments(&frag[0][0], TK / 16 * MB, hidden_zero);
        #pragma unroll
        for (int ks = 0; ks < TK / 16; ks++)
            #pragma unroll
            for (int mb = 0; mb < MB; mb++)
                #pragma unroll
                for (int e = 0; e < 4; e++)
                    frag[ks][mb][e] = next[ks][mb][e];
#endif
    }
    wgmma_wait_all();

    /* Epilogue: the I8 scale, per column (SCALE_ON 1) or per row (3), and the bias, per column (per
     * row with A_I8), then the stores inside M x N. */
    const int row0 = m0 + wg * WG_ROWS + warp * 16 + g;
#if A_I8
    float rmul[MB][2], radd[MB][2];
    #pragma unroll
    for (int mb = 0; mb < MB; mb++)
        #pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int m = row0 + mb * 64 + 8 * hr;
            rmul[mb][hr] = m < M ? scale[s_off + m * s_s] : 0.0f;
            radd[mb][hr] = HAS_BIAS && m < M ? LOAD(bias, bias_off + m * bias_s) : 0.0f;
        }
#endif
    #pragma unroll
    for (int nb = 0; nb < NB; nb++)
        #pragma unroll
        for (int i = 0; i < NW / 8; i++) {
            const int n = n0 + nb * NW + 8 * i + 2 * t;
            float2 mul = (float2)(1.0f), add = (float2)(0.0f);
#if SCALE_ON == 1
            if (n < N)
                mul.x = scale[s_off + n * s_s];
            if (n + 1 < N)
                mul.y = scale[s_off + (n + 1) * s_s];
#endif
#if HAS_BIAS && !A_I8
            if (n < N)
                add.x = LOAD(bias, bias_off + n * bias_s);
            if (n + 1 < N)
                add.y = LOAD(bias, bias_off + (n + 1) * bias_s);
#endif
            #pragma unroll
            for (int mb = 0; mb < MB; mb++)
                #pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const int m = row0 + mb * 64 + 8 * hr;
#if A_I8
                    mul = (float2)(rmul[mb][hr]);
                    add = (float2)(radd[mb][hr]);
#endif
                    if (m < M)
                        store_c_pair(C, c_off + m * c_sm + n * c_sn, c_sn, n, N,
                                     fma(acc[mb][nb][4 * i + 2 * hr], mul.x, add.x),
                                     fma(acc[mb][nb][4 * i + 2 * hr + 1], mul.y, add.y));
                }
        }
}
