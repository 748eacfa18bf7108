/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NVIDIA tensor-core building blocks (compute capability >= 8.0) through inline PTX, shared by
 * the tensor-core attention kernels (attention_forward_mma.cl, attention_backward_mma.cl):
 * mma.sync m16n8k16 with F16 or BF16 inputs and FP32 accumulation, ldmatrix, quad reductions,
 * and a cp.async copy of 16-byte row chunks into local memory (plain loads and
 * stores instead when ASYNC_COPY is 0: rows not 16-byte aligned); the projection GEMM
 * (linear_mma.cl, linear_wgmma.cl) uses the mma, ldmatrix, packing and I8 helpers, and with I8 B
 * scaled along k (B_I8, SCALE_ON 2) the split of A's scaled fragments.
 *
 * Needs warp_nv.cl before it. Specialisation (-D): FCL_DTYPE 1 (F16) or 2 (BF16); MMA_BF16 (the
 * products in BF16 whatever FCL_DTYPE); HEAD_DIM_PAD (the attention kernels: the helpers that
 * walk a head dim exist only with it); ASYNC_COPY; PAIRS; HAS_MASK; SWIZZLED_TILES (the tiles
 * that load_rows fills are stored as wgmma_nv.cl's swizzled atoms instead of padded rows).
 */

/* The head dim's k16 steps and n8 tiles, and the pitch of a row in local memory (8 halves of
 * padding: ldmatrix reads 8 rows without bank conflicts). */
#define KSTEPS (HEAD_DIM_PAD / 16)
#define NT_O (HEAD_DIM_PAD / 8)
#define ROW_HALVES (HEAD_DIM_PAD + 8)

#if SWIZZLED_TILES
/* Halves offset of element (r, c) of a tile stored as 64-column atoms of `atom` halves (rows of
 * 128 bytes) with the 128-byte swizzle: 16-byte chunk (c % 64) / 8 of row r sits at chunk
 * position ((c % 64) / 8) XOR (r % 8) (what wgmma reads; no bank conflicts for row-wise
 * copies either). */
inline int swizzled_offset(int r, int c, int atom)
{
    return (c >> 6) * atom + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}
/* Halves d .. d + 7 (d a multiple of 8) of row n of a local tile: `pitch` is the atom size. */
#define TILE_CHUNK(tile, n, d, pitch) ((tile) + swizzled_offset(n, d, pitch))
#else
/* Halves d .. d + 7 (d a multiple of 8) of row n of a local tile whose rows are `pitch` apart. */
#define TILE_CHUNK(tile, n, d, pitch) ((tile) + (n) * (pitch) + (d))
#endif
#ifdef HEAD_DIM_PAD
/* A local tile of n rows of the head dim: its halves, the `pitch` that load_rows takes for it
 * (the atom size, or the padded row), and its alignment (every atom 1024-byte aligned). */
#if SWIZZLED_TILES
#define TILE_HALVES(n) ((n) * HEAD_DIM_PAD)
#define TILE_PITCH(n) ((n) * 64)
#define TILE_ALIGN 1024
#else
#define TILE_HALVES(n) ((n) * ROW_HALVES)
#define TILE_PITCH(n) ROW_HALVES
#define TILE_ALIGN 16
#endif
#endif

/* Declares a kernel's two-stage ring of K and V tiles of n rows (Ks, Vs; with HAS_MASK the
 * keys' mask values Ms); MASK_STAGE(st) is stage st's mask values (0 without a mask). */
#if HAS_MASK
#define KV_RING(n)                                                                                 \
    __local ushort Ks[2][TILE_HALVES(n)] __attribute__((aligned(TILE_ALIGN)));                    \
    __local ushort Vs[2][TILE_HALVES(n)] __attribute__((aligned(TILE_ALIGN)));                    \
    __local float Ms[2][n]
#define MASK_STAGE(st) Ms[st]
#else
#define KV_RING(n)                                                                                 \
    __local ushort Ks[2][TILE_HALVES(n)] __attribute__((aligned(TILE_ALIGN)));                    \
    __local ushort Vs[2][TILE_HALVES(n)] __attribute__((aligned(TILE_ALIGN)))
#define MASK_STAGE(st) 0
#endif

/* Helpers that take fragment arrays: always inlined, so that the arrays stay in registers. */
#define MMA_INLINE __attribute__((always_inline)) inline

#if FCL_DTYPE == 2 || MMA_BF16
#define MMA_IN "bf16"
#elif FCL_DTYPE == 1
#define MMA_IN "f16"
#else
#error "the tensor-core kernels take F16 or BF16"
#endif

/* c += a b for one m16n8k16 tile: a row-major 16x16 (4 registers of 2 values), b column-major
 * 16x8 (2 registers), c 16x8 FP32 (4 values per lane). */
inline void mma_16816(float *c, const uint *a, uint b0, uint b1)
{
    __asm__("mma.sync.aligned.m16n8k16.row.col.f32." MMA_IN "." MMA_IN ".f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8x8 16-bit matrices from local memory; lane l gives the shared-memory address of row
 * l % 8 of matrix l / 8 (16-byte aligned). TRANS delivers them transposed. */
inline void ldmatrix_x4(uint *r, uint addr)
{
    __asm__("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
            : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
            : "r"(addr)
            : "memory");
}

inline void ldmatrix_x4_trans(uint *r, uint addr)
{
    __asm__("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
            : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
            : "r"(addr)
            : "memory");
}

#ifdef HEAD_DIM_PAD
/* This lane's A fragments (rows g and g + 8 of the 16 rows row0 .. row0 + 15, the whole head
 * dim) of a view whose row r sits at src[base + r * row_stride]: zeros past head_dim and for
 * rows outside [0, n_rows). With PAIRS (head_dim even, rows 4-byte aligned) the two elements of
 * a register are one 32-bit load. */
MMA_INLINE void load_a_rows(uint (*f)[4], __global const ushort *src, long base, long row_stride, int row0, int n_rows,
                        int head_dim, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int r = row0 + g + 8 * hr;
        const bool in = r >= 0 && r < n_rows;
        const long row = base + (long)clamp(r, 0, max(n_rows - 1, 0)) * row_stride;
        #pragma unroll
        for (int ks = 0; ks < KSTEPS; ks++)
            #pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int d = ks * 16 + hf * 8 + 2 * t;
#if PAIRS /* d even, head_dim even: both or neither */
                f[ks][hr + 2 * hf] = in && d < head_dim ? *(__global const uint *)(src + row + d) : 0u;
#else
                const uint lo = in && d < head_dim ? src[row + d] : 0u;
                const uint hi = in && d + 1 < head_dim ? src[row + d + 1] : 0u;
                f[ks][hr + 2 * hf] = lo | hi << 16;
#endif
            }
    }
}

/* A fragments kept in local memory instead of registers, for kernels that run short of
 * registers: stash[(ks - first) * step_stride + lid] holds k step ks's fragment for ks >= first.
 * Each work-item writes and reads back only its own 16-byte words (no barrier; consecutive
 * work-items use consecutive words: no bank conflicts). */
MMA_INLINE void stash_fragments(__local uint4 *stash, uint (*f)[4], int first, int step_stride, int lid)
{
    #pragma unroll
    for (int ks = first; ks < KSTEPS; ks++)
        (stash + lid)[(ks - first) * step_stride] = (uint4)(f[ks][0], f[ks][1], f[ks][2], f[ks][3]);
}

/* k step ks's A fragment into a: f[ks] below `first`, else its stashed copy. */
MMA_INLINE void fragment_at(uint *a, uint (*f)[4], __local const uint4 *stash, int ks, int first, int step_stride,
                            int lid)
{
    if (ks >= first) {
        const uint4 x = (stash + lid)[(ks - first) * step_stride];
        a[0] = x.s0;
        a[1] = x.s1;
        a[2] = x.s2;
        a[3] = x.s3;
        return;
    }
    #pragma unroll
    for (int e = 0; e < 4; e++)
        a[e] = f[ks][e];
}

#endif

/* x, opaque to the compiler: addresses derived from it inside a loop are computed there (one
 * add each) instead of being hoisted out of the loop into dozens of live registers. */
inline uint opaque(uint x)
{
    __asm__ __volatile__("mov.b32 %0, %0;" : "+r"(x));
    return x;
}

/* Two floats rounded to the mma input dtype (MMA_IN), packed as one mma operand register (lo first). */
inline uint pack_pair(float lo, float hi)
{
    uint r;
    __asm__("cvt.rn." MMA_IN "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* Bytes 2 h and 2 h + 1 of u, I8 values biased by 128 (x XOR 0x80), as an mma operand register
 * (lo first), exactly, with no conversion instruction: in F16, the bits 0x6400 | (x + 128) (a byte
 * permute) are 1024 + x + 128, from which 1152 is subtracted; in BF16, the F32 bits 0x4B000000 |
 * (x + 128) (a byte permute each) are 2^23 + x + 128, from which 2^23 + 128 is subtracted, and
 * x's top 16 bits are its BF16 (a byte permute packs the two). */
inline uint i8_pair(uint u, int h)
{
#if FCL_DTYPE == 2 || MMA_BF16
    uint lo, hi, r;
    __asm__("prmt.b32 %0, %1, 0x4B000000, %2;" : "=r"(lo) : "r"(u), "r"(0x7540u + 2 * h));
    __asm__("prmt.b32 %0, %1, 0x4B000000, %2;" : "=r"(hi) : "r"(u), "r"(0x7541u + 2 * h));
    const float x0 = as_float(lo) - 8388736.0f, x1 = as_float(hi) - 8388736.0f;
    __asm__("prmt.b32 %0, %1, %2, 0x7632;" : "=r"(r) : "r"(as_uint(x0)), "r"(as_uint(x1)));
    return r;
#else
    uint r;
    __asm__("{ .reg .b32 t; prmt.b32 t, %1, 0x64, %2; sub.rn.f16x2 %0, t, %3; }"
            : "=r"(r)
            : "r"(u), "r"(h ? 0x4342u : 0x4140u), "r"(0x64806480u));
    return r;
#endif
}

/* 8 I8 values (little-endian in v) as 8 values of the mma dtype (exact), in order: the I8
 * weights of the projection GEMMs. */
MMA_INLINE uint4 i8_to_mma(uint2 v)
{
    const uint u0 = v.x ^ 0x80808080u, u1 = v.y ^ 0x80808080u;
    return (uint4)(i8_pair(u0, 0), i8_pair(u0, 1), i8_pair(u1, 0), i8_pair(u1, 1));
}

#if B_I8 && SCALE_ON == 2
/* The projection GEMMs' A fragments when I8 B is scaled along k (linear_mma.cl, linear_wgmma.cl:
 * the products in BF16, MMA_BF16). */

/* The two A-dtype values of an mma register as floats (low half first). */
MMA_INLINE float2 unpack_a(uint x)
{
#if FCL_DTYPE == 1
    float lo, hi;
    __asm__("{ .reg .b16 lo16, hi16; mov.b32 {lo16, hi16}, %2; cvt.f32.f16 %0, lo16; cvt.f32.f16 %1, hi16; }"
            : "=f"(lo), "=f"(hi)
            : "r"(x));
    return (float2)(lo, hi);
#else
    return (float2)(as_float(x << 16), as_float(x & 0xffff0000u));
#endif
}

/* A fragment a (A's dtype) times the scales of its columns (s01: columns 2 t, 2 t + 1 of the k
 * step, registers 0 and 1; s89: columns 2 t + 8, 2 t + 9, registers 2 and 3), in FP32, as BF16
 * parts: hi, its rounding, and lo, the rounding of the rest. */
MMA_INLINE void scale_split(const uint *a, float2 s01, float2 s89, uint *hi, uint *lo)
{
    #pragma unroll
    for (int r = 0; r < 4; r++) {
        const float2 x = unpack_a(a[r]) * (r < 2 ? s01 : s89);
        hi[r] = pack_pair(x.x, x.y);
        lo[r] = pack_pair(x.x - as_float(hi[r] << 16), x.y - as_float(hi[r] & 0xffff0000u));
    }
}
#endif

/* Elements d and d + 1 (d even) of a row of dst, from x0 and x1, rounded to the storage dtype;
 * each only below head_dim. With PAIRS (head_dim even, rows 4-byte aligned) one 32-bit store
 * (pack_pair: not with MMA_BF16, whose mma dtype may differ from the storage dtype). */
inline void store_pair(__global store_t *dst, long at, int d, int head_dim, float x0, float x1)
{
#if PAIRS && !MMA_BF16
    if (d < head_dim)
        *(__global uint *)((__global ushort *)dst + at) = pack_pair(x0, x1);
#else
    if (d < head_dim)
        STORE(dst, at, x0);
    if (d + 1 < head_dim)
        STORE(dst, at + 1, x1);
#endif
}

/* The max / sum over the 4 lanes that hold one row of an mma accumulator. */
inline float quad_max(float x)
{
    x = fmax(x, shuffle_xor(x, 1));
    return fmax(x, shuffle_xor(x, 2));
}

inline float quad_sum(float x)
{
    x += shuffle_xor(x, 1);
    return x + shuffle_xor(x, 2);
}

/* 16 bytes (8 halves) of one K or V row into local memory: the first `bytes` from src, zeros
 * after (bytes 0: all zeros, src not read). */
inline void copy_chunk(__local ushort *dst, __global const ushort *src, int bytes)
{
#if ASYNC_COPY
    async_copy16(dst, src, bytes);
#else
    #pragma unroll
    for (int e = 0; e < 8; e++)
        dst[e] = 2 * e < bytes ? src[e] : (ushort)0;
#endif
}

/* n whole 16-byte chunks copied by cp.async through L2 (async_copy16_l2), each `rows` rows after
 * the one before: chunk i from src + g + i rows stride elements into tile + l + i rows row_halves
 * halves. The projection GEMMs' slices that lie inside their matrices, from offsets a work-item
 * computes once (history v0.43.0). */
MMA_INLINE void copy16_rows(__local ushort *tile, int l, const int row_halves, __global const ushort *src, long g,
                            long stride, const int rows, const int n)
{
    #pragma unroll
    for (int i = 0; i < n; i++)
        async_copy16_l2(tile + l + i * rows * row_halves, src + g + i * rows * stride, 16);
}

/* Makes this work-item's ordinary writes to local memory visible to later wgmma reads
 * (the generic-to-async proxy fence, compute capability 9.0; a barrier after it covers the whole
 * work-group). Used by the wgmma kernels (wgmma_nv.cl) and copies_landed's swizzled tiles. */
inline void fence_async_local(void)
{
    __asm__ __volatile__("fence.proxy.async.shared::cta;" ::: "memory");
}

/* Waits until this work-item's copies of the older of its two outstanding tiles have landed
 * (all of them when `all`), then for the whole group; swizzled tiles are then visible to wgmma
 * too (fence_async_local). */
inline void copies_landed(int all)
{
#if ASYNC_COPY
    if (all)
        __asm__ __volatile__("cp.async.wait_group 0;" ::: "memory");
    else
        __asm__ __volatile__("cp.async.wait_group 1;" ::: "memory");
#endif
#if SWIZZLED_TILES
    fence_async_local();
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Closes this work-item's copies issued since the last call into one group (possibly empty). */
inline void commit_copies(void)
{
#if ASYNC_COPY
    async_commit();
#endif
}

/* PADDED_COPY 1: a kernel built for head dims below its HEAD_DIM_PAD (QK_DIM < HEAD_DIM_PAD: the
 * wgmma forward at padded head dim 96), whose whole-chunk copies zero the chunks past head_dim;
 * 0 elsewhere, where those copies run only at head_dim == head_dim_pad, with no test. */
#if defined(QK_DIM) && QK_DIM < HEAD_DIM_PAD
#define PADDED_COPY 1
#else
#define PADDED_COPY 0
#endif

/* Rows 0 .. n_rows - 1 of a view into `tile` (one row every `pitch` halves) when every row is
 * valid and unmasked and head_dim a multiple of 8 (whole chunks; with PADDED_COPY, those past
 * head_dim become zeros; without, head_dim is head_dim_pad): row n at src + n * row_stride.
 * Work-item lid copies the 16-byte chunks lid, lid + wg, ... of the tile (n_rows * head_dim_pad
 * / 8 of them, a multiple of wg). Where wg is a multiple of head_dim_pad / 8 they all sit in one
 * column, and one pointer steps down it. */
MMA_INLINE void copy_rows_whole(__local ushort *tile, int pitch, int n_rows, int head_dim_pad, int head_dim, int wg,
                                int lid, __global const ushort *src, long row_stride)
{
    const int chunks = head_dim_pad / 8, rows_per_step = wg / chunks;
    if (wg % chunks) { /* head dims of 24 chunks (192) under 128 work-items: each chunk placed on its own */
        #pragma unroll
        for (int k = 0; k < n_rows * chunks / wg; k++) {
            const int idx = lid + k * wg, n = idx / chunks, d = (idx - n * chunks) * 8;
            const int bytes = !PADDED_COPY || d < head_dim ? 16 : 0;
            copy_chunk(TILE_CHUNK(tile, n, d, pitch), bytes ? src + n * row_stride + d : src, bytes);
        }
        return;
    }
    const int n0 = lid / chunks, d = (lid - n0 * chunks) * 8;
    const int bytes = !PADDED_COPY || d < head_dim ? 16 : 0; /* this work-item's column: data or zeros */
    __global const ushort *p = bytes ? src + n0 * row_stride + d : src;
    const long step = bytes ? rows_per_step * row_stride : 0;
    #pragma unroll
    for (int k = 0; k < n_rows / rows_per_step; k++)
        copy_chunk(TILE_CHUNK(tile, n0 + k * rows_per_step, d, pitch), p + k * step, bytes);
}

/* Rows r0 .. r0 + n_rows - 1 of a view (row r at src[base + r * row_stride]) into `tile`, one
 * row every `pitch` halves, by the wg work-items of the group (this one is lid): rows outside
 * [lo, hi], rows whose mask value is <= 0.5 when use_mask, and columns past head_dim become
 * zeros. head_dim_pad (a multiple of 8) halves are written per row. Tiles with nothing to check
 * (no mask, every row inside [lo, hi], head_dim == head_dim_pad, or with PADDED_COPY a multiple
 * of 8) take copy_rows_whole when the tile's chunks share out evenly over the work-items (in whole
 * columns where wg is a multiple of head_dim_pad / 8). */
MMA_INLINE void load_rows(__local ushort *tile, int pitch, int n_rows, int head_dim_pad, int wg, int lid,
                      __global const ushort *src, long base, long row_stride, int r0, int lo, int hi, int head_dim,
                      int use_mask, __global const float *mask, long mask_row0, long mask_ss)
{
    const int chunks = head_dim_pad / 8;
    if (!use_mask && (n_rows * chunks) % wg == 0 && r0 >= lo && r0 + n_rows - 1 <= hi &&
        (PADDED_COPY ? head_dim % 8 == 0 : head_dim == head_dim_pad)) { /* nothing to check (uniform) */
        copy_rows_whole(tile, pitch, n_rows, head_dim_pad, head_dim, wg, lid, src + base + (long)r0 * row_stride,
                        row_stride);
        return;
    }
    for (int idx = lid; idx < n_rows * chunks; idx += wg) {
        const int n = idx / chunks, d = (idx - n * chunks) * 8;
        const int r = r0 + n;
        bool in = r >= lo && r <= hi;
        if (in && use_mask)
            in = mask[mask_row0 + (long)r * mask_ss] > 0.5f;
        const int bytes = in ? 2 * clamp(head_dim - d, 0, 8) : 0;
        copy_chunk(TILE_CHUNK(tile, n, d, pitch), bytes > 0 ? src + base + (long)r * row_stride + d : src, bytes);
    }
}

#ifdef HEAD_DIM_PAD
/* Starts the copies of key rows j0 .. j0 + n_rows - 1 of V into Vst (and, with HAS_MASK, stores
 * their mask values into Ms; 0 outside [lo, hi]): rows outside [lo, hi] and masked-out rows
 * become zeros. */
MMA_INLINE void issue_v_tile(__local ushort *Vst, __local float *Ms, int n_rows, int pitch, int head_dim_pad, int wg,
                             int lid, __global const ushort *Vu, long vbase, long v_ss, int j0, int lo, int hi,
                             int head_dim, __global const float *mask, long mrow, long mask_ss)
{
    load_rows(Vst, pitch, n_rows, head_dim_pad, wg, lid, Vu, vbase, v_ss, j0, lo, hi, head_dim, HAS_MASK, mask, mrow,
              mask_ss);
#if HAS_MASK
    for (int n = lid; n < n_rows; n += wg)
        Ms[n] = j0 + n >= lo && j0 + n <= hi ? mask[mrow + (long)(j0 + n) * mask_ss] : 0.0f;
#endif
}

/* Starts the copies of key rows j0 .. j0 + n_rows - 1 of K and V into Kst and Vst (and their
 * mask values, issue_v_tile): rows outside [lo, hi] become zeros, and masked-out rows too in V,
 * and in K when mask_k. */
MMA_INLINE void issue_kv_tile(__local ushort *Kst, __local ushort *Vst, __local float *Ms, int n_rows, int pitch,
                          int head_dim_pad, int wg, int lid, __global const ushort *Ku, __global const ushort *Vu,
                          long kbase, long vbase, long k_ss, long v_ss, int j0, int lo, int hi, int head_dim,
                          int mask_k, __global const float *mask, long mrow, long mask_ss)
{
    load_rows(Kst, pitch, n_rows, head_dim_pad, wg, lid, Ku, kbase, k_ss, j0, lo, hi, head_dim, HAS_MASK && mask_k,
              mask, mrow, mask_ss);
    issue_v_tile(Vst, Ms, n_rows, pitch, head_dim_pad, wg, lid, Vu, vbase, v_ss, j0, lo, hi, head_dim, mask, mrow,
                 mask_ss);
}
#endif
