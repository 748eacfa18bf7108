/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared helpers of every flashcl kernel (with -D SIMD, the CPU kernels' vectors too): storage
 * dtype load/store selected by -D FCL_DTYPE
 * (0 = f32, 1 = f16, 2 = bf16). F16 goes through vload_half/vstore_half_rte and BF16 through
 * bit shifts, so no kernel needs cl_khr_fp16. Arithmetic is always float. LOAD4 reads 4
 * consecutive elements into a float4 (the address needs only the element's alignment). With
 * -D VW, the register-blocked kernels' vector types floatv and vec_u. FCL_UNROLL_LOOP before a
 * loop over private arrays unrolls it fully on GPUs (the host sets -DFCL_UNROLL=1 there), so the
 * arrays stay in registers; elsewhere the compiler's own heuristics decide (forced unrolling made
 * PoCL take 4x as long to compile the blocked kernel). fcl_group_order hands out the attention
 * kernels' work-groups heaviest first (FCL_ROUND_GROUPS, from the host: about two rounds of the
 * device's work-groups).
 */
#ifndef FCL_DTYPE
#error "FCL_DTYPE must be defined (0 f32, 1 f16, 2 bf16)"
#endif

/* Kernels whose lanes meet by subgroup shuffles (cl/portable/subgroup.cl) carry the subgroup size
 * the host chose (Intel's cl_intel_required_subgroup_size); empty elsewhere. */
#if FCL_SUBGROUP_SIZE
#define FCL_SUBGROUP_ATTR __attribute__((intel_reqd_sub_group_size(FCL_SUBGROUP_SIZE)))
#else
#define FCL_SUBGROUP_ATTR
#endif

#if FCL_UNROLL
#define FCL_UNROLL_LOOP _Pragma("unroll")
#else
#define FCL_UNROLL_LOOP
#endif

#if FCL_DTYPE == 0
typedef float store_t;
#define LOAD(p, i) ((p)[i])
#define LOAD4(p, i) vload4(0, (p) + (i))
#define STORE(p, i, x) ((p)[i] = (x))
#elif FCL_DTYPE == 1
typedef half store_t;
#define LOAD(p, i) vload_half((i), (p))
#define LOAD4(p, i) vload_half4(0, (p) + (i))
#define STORE(p, i, x) vstore_half_rte((x), (i), (p))
#elif FCL_DTYPE == 2
typedef ushort store_t;
inline float bf16_to_float(ushort b) { return as_float((uint)b << 16); }
inline ushort float_to_bf16(float f)
{
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);       /* round to nearest even */
    return (ushort)(u >> 16);
}
#define LOAD(p, i) bf16_to_float((p)[i])
#define LOAD4(p, i) as_float4(convert_uint4(vload4(0, (p) + (i))) << 16)
#define STORE(p, i, x) ((p)[i] = float_to_bf16(x))
#else
#error "unknown FCL_DTYPE"
#endif

/* Four consecutive elements p[i .. i + 3] as floats, i a multiple of 4: one vector load (a
 * cl_mem's base is at least 16-byte aligned). */
inline float4 load4_aligned(__global const store_t *p, long i)
{
#if FCL_DTYPE == 0
    return *(__global const float4 *)(p + i);
#elif FCL_DTYPE == 1
    const ushort4 u = *(__global const ushort4 *)((__global const ushort *)p + i);
    return vload_half4(0, (const __private half *)&u);
#else
    return as_float4(convert_uint4(*(__global const ushort4 *)(p + i)) << 16);
#endif
}

/* Four consecutive elements p[i .. i + 3] of a row as floats, element by element, zeros from
 * head dim `head_dim` on (d: the head dim of p[i]). */
inline float4 load4_bounded(__global const store_t *p, long i, int d, int head_dim)
{
    float4 x;
    x.s0 = d < head_dim ? LOAD(p, i) : 0.0f;
    x.s1 = d + 1 < head_dim ? LOAD(p, i + 1) : 0.0f;
    x.s2 = d + 2 < head_dim ? LOAD(p, i + 2) : 0.0f;
    x.s3 = d + 3 < head_dim ? LOAD(p, i + 3) : 0.0f;
    return x;
}

#ifdef C_F32
/* The GEMM kernels' output C (-D C_F32: F32, else the storage dtype). */
#if C_F32
typedef float c_t;
#define LOADC(p, i) ((p)[i])
#define STOREC(p, i, x) ((p)[i] = (x))
#else
typedef store_t c_t;
#define LOADC(p, i) LOAD(p, i)
#define STOREC(p, i, x) STORE(p, i, x)
#endif
/* The 21 arguments every GEMM kernel takes (src/gemm/gemm_job.h: fcl_gemm_set_args), A's elements
 * of type a_type and B's of b_type. */
#define GEMM_KERNEL_ARGS(a_type, b_type)                                                               \
    __global const a_type *A, __global const b_type *B, __global const float *scale,                  \
        __global const store_t *bias, __global c_t *C, const int M, const int N, const int K,         \
        const long a_off, const long a_sm, const long a_sk, const long b_off, const long b_sk,        \
        const long b_sn, const long c_off, const long c_sm, const long c_sn, const long bias_off,     \
        const long bias_s, const long s_off, const long s_s
#endif

#ifdef VW
/* Register-blocked kernels (VW: their local-memory vector width): a VW-vector of floats and
 * the same as an array. */
#if VW == 1
typedef float floatv;
#elif VW == 2
typedef float2 floatv;
#elif VW == 4
typedef float4 floatv;
#else
#error "VW must be 1, 2 or 4"
#endif
typedef union {
    floatv v;
    float s[VW];
} vec_u;

/* Helpers that take register arrays: always inlined, so that the arrays stay in registers. */
#define BLOCKED_INLINE __attribute__((always_inline)) inline

/* A work-group of TY x TX work-items (the kernel defines both) owning a block in VW-vectors: the
 * block row of work-item row ty's i-th row, and the block column of column tx's c-th one, so
 * that neighbouring work-items read neighbouring vectors. */
#define ROW_OF(i, ty) (((i) / VW) * TY * VW + (ty) * VW + (i) % VW)
#define COL_OF(c, tx) (((c) / VW) * TX * VW + (tx) * VW + (c) % VW)

/* Four consecutive elements of a row as floats: one aligned vector load where VEC_LOAD (the
 * host checked that every row of the tensors read starts at a multiple of 4 elements and that
 * head_dim is one), else element by element, zeros from head dim `head_dim` on. */
BLOCKED_INLINE float4 load_chunk(__global const store_t *p, long i, int d, int head_dim)
{
#if VEC_LOAD
    return load4_aligned(p, i);
#else
    return load4_bounded(p, i, d, head_dim);
#endif
}
#endif

#ifdef LAYOUT
/* The first index of the first of the n-wide tiles over [lo, hi] that a never-chunking kernel
 * walks (keys of a row block, or rows of a key block): the grid's multiple of n at or below lo;
 * in the packed form (LAYOUT 2) lo itself where that takes fewer tiles (a sequence that starts
 * between grid lines; on ties the grid keeps a causal diagonal at a tile's end). */
#if LAYOUT == 2
#define FIRST_TILE(lo, hi, n) (((hi) - ((lo) - (lo) % (n))) / (n) > ((hi) - (lo)) / (n) ? (lo) : (lo) - (lo) % (n))
#else
#define FIRST_TILE(lo, hi, n) ((lo) - (lo) % (n))
#endif
#endif

#ifdef SIMD
/* The CPU kernels' explicit vectors (-D SIMD: floats per vector, 4, 8 or 16, the device's native
 * width): simd_f / simd_i and simd_fu / simd_iu (the same as arrays); simd_load, SIMD stored
 * elements from element index i as floats (any element alignment); simd_store, SIMD floats to p
 * (any address space); simd_stage_chunk / simd_stage_row, SIMD / HEAD_DIM_PAD elements of a row
 * into private vectors, simd_store_chunk the way back; simd_transpose, a SIMD x SIMD block's
 * rows into lanes, and simd_rows_to_lanes / simd_lanes_to_rows, SIMD rows of HEAD_DIM_PAD
 * through it;
 * simd_max / simd_sum, the horizontal maximum and sum; simd_exp2, 2^x per lane; simd_pair_sum(a, b),
 * the sums of a's and of b's neighbouring lane pairs, side by side (a reduction step that keeps
 * each block of lanes apart). */
#if SIMD == 16
typedef float16 simd_f;
typedef int16 simd_i;
#define SIMD_VLOAD vload16
#define SIMD_VSTORE vstore16
#define SIMD_VLOAD_HALF vload_half16
#define SIMD_CONVERT_UINT convert_uint16
#define SIMD_AS_F as_float16
#define SIMD_AS_I as_int16
#define SIMD_VSTORE_HALF vstore_half16_rte
#elif SIMD == 8
typedef float8 simd_f;
typedef int8 simd_i;
#define SIMD_VLOAD vload8
#define SIMD_VSTORE vstore8
#define SIMD_VLOAD_HALF vload_half8
#define SIMD_CONVERT_UINT convert_uint8
#define SIMD_AS_F as_float8
#define SIMD_AS_I as_int8
#define SIMD_VSTORE_HALF vstore_half8_rte
#elif SIMD == 4
typedef float4 simd_f;
typedef int4 simd_i;
#define SIMD_VLOAD vload4
#define SIMD_VSTORE vstore4
#define SIMD_VLOAD_HALF vload_half4
#define SIMD_CONVERT_UINT convert_uint4
#define SIMD_AS_F as_float4
#define SIMD_AS_I as_int4
#define SIMD_VSTORE_HALF vstore_half4_rte
#else
#error "SIMD must be 4, 8 or 16"
#endif
typedef union {
    simd_f v;
    float s[SIMD];
} simd_fu;
typedef union {
    simd_i v;
    int s[SIMD];
} simd_iu;

inline simd_f simd_load(__global const store_t *p, long i)
{
#if FCL_DTYPE == 0
    return SIMD_VLOAD(0, p + i);
#elif FCL_DTYPE == 1
    return SIMD_VLOAD_HALF(0, p + i);
#else
    return SIMD_AS_F(SIMD_CONVERT_UINT(SIMD_VLOAD(0, (__global const ushort *)p + i)) << 16);
#endif
}

#define simd_store(v, p) SIMD_VSTORE((v), 0, (p))

/* 2^x per lane within about 1 ulp, for x < 128 (the softmax's exponents are <= 8): a degree-6
 * polynomial in the fraction f = x - n (n = x rounded, by the 1.5 * 2^23 shift) times 2^n built
 * in the exponent bits. A dozen vector instructions, where a runtime's exp2 may be a long chain
 * or scalar. x <= -127 (and -inf) gives 0; NaN stays NaN. */
inline simd_f simd_exp2(simd_f x)
{
    const simd_f xc = select(x, (simd_f)(-127.0f), x < (simd_f)(-127.0f));
    const simd_f shifted = xc + 12582912.0f;
    const simd_f f = xc - (shifted - 12582912.0f);
    simd_f p = fma(f, (simd_f)(1.5337577497e-4f), (simd_f)(1.3399859890e-3f));
    p = fma(p, f, (simd_f)(9.6185198054e-3f));
    p = fma(p, f, (simd_f)(5.5503290147e-2f));
    p = fma(p, f, (simd_f)(2.4022646248e-1f));
    p = fma(p, f, (simd_f)(6.9314718246e-1f));
    p = fma(p, f, (simd_f)(1.0f));
    return p * SIMD_AS_F((SIMD_AS_I(shifted) - 0x4B400000 + 127) << 23);
}

/* Two rows a and b, s rows apart in a SIMD x SIMD block, with their off-diagonal s x s blocks
 * swapped: the lanes of a whose bit s is set and the lanes of b whose bit s is clear trade places
 * (LO: a's new value, HI: b's). One round of simd_transpose. */
#if SIMD == 16
#define SIMD_BLOCKS_LO1(a, b) ((simd_f)(a.s0, b.s0, a.s2, b.s2, a.s4, b.s4, a.s6, b.s6, a.s8, b.s8, a.sa, b.sa, a.sc, b.sc, a.se, b.se))
#define SIMD_BLOCKS_HI1(a, b) ((simd_f)(a.s1, b.s1, a.s3, b.s3, a.s5, b.s5, a.s7, b.s7, a.s9, b.s9, a.sb, b.sb, a.sd, b.sd, a.sf, b.sf))
#define SIMD_BLOCKS_LO2(a, b) ((simd_f)(a.s01, b.s01, a.s45, b.s45, a.s89, b.s89, a.scd, b.scd))
#define SIMD_BLOCKS_HI2(a, b) ((simd_f)(a.s23, b.s23, a.s67, b.s67, a.sab, b.sab, a.sef, b.sef))
#define SIMD_BLOCKS_LO4(a, b) ((simd_f)(a.s0123, b.s0123, a.s89ab, b.s89ab))
#define SIMD_BLOCKS_HI4(a, b) ((simd_f)(a.s4567, b.s4567, a.scdef, b.scdef))
#define SIMD_BLOCKS_LO8(a, b) ((simd_f)(a.s01234567, b.s01234567))
#define SIMD_BLOCKS_HI8(a, b) ((simd_f)(a.s89abcdef, b.s89abcdef))
#elif SIMD == 8
#define SIMD_BLOCKS_LO1(a, b) ((simd_f)(a.s0, b.s0, a.s2, b.s2, a.s4, b.s4, a.s6, b.s6))
#define SIMD_BLOCKS_HI1(a, b) ((simd_f)(a.s1, b.s1, a.s3, b.s3, a.s5, b.s5, a.s7, b.s7))
#define SIMD_BLOCKS_LO2(a, b) ((simd_f)(a.s01, b.s01, a.s45, b.s45))
#define SIMD_BLOCKS_HI2(a, b) ((simd_f)(a.s23, b.s23, a.s67, b.s67))
#define SIMD_BLOCKS_LO4(a, b) ((simd_f)(a.s0123, b.s0123))
#define SIMD_BLOCKS_HI4(a, b) ((simd_f)(a.s4567, b.s4567))
#else
#define SIMD_BLOCKS_LO1(a, b) ((simd_f)(a.s0, b.s0, a.s2, b.s2))
#define SIMD_BLOCKS_HI1(a, b) ((simd_f)(a.s1, b.s1, a.s3, b.s3))
#define SIMD_BLOCKS_LO2(a, b) ((simd_f)(a.s01, b.s01))
#define SIMD_BLOCKS_HI2(a, b) ((simd_f)(a.s23, b.s23))
#endif
#define SIMD_TRANSPOSE_ROUND(r, s)                                                                   \
    for (int i = 0; i < SIMD; i++)                                                                   \
        if (!(i & (s))) {                                                                            \
            const simd_f a_ = (r)[i], b_ = (r)[i + (s)];                                             \
            (r)[i] = SIMD_BLOCKS_LO##s(a_, b_);                                                      \
            (r)[i + (s)] = SIMD_BLOCKS_HI##s(a_, b_);                                                \
        }

/* The SIMD x SIMD block r[0 .. SIMD - 1] (row e: SIMD consecutive elements) transposed in place:
 * lane e of r[k] becomes lane k of the old r[e]. log2(SIMD) rounds of lane swizzles, each swapping
 * one bit of the row index with the same bit of the lane index; with the loops unrolled the block
 * stays in registers (a row-to-lane transposition without scalar stores). */
inline void simd_transpose(__private simd_f *r)
{
    _Pragma("unroll") SIMD_TRANSPOSE_ROUND(r, 1)
    _Pragma("unroll") SIMD_TRANSPOSE_ROUND(r, 2)
#if SIMD >= 8
    _Pragma("unroll") SIMD_TRANSPOSE_ROUND(r, 4)
#endif
#if SIMD == 16
    _Pragma("unroll") SIMD_TRANSPOSE_ROUND(r, 8)
#endif
}

#ifdef HEAD_DIM_PAD
/* Elements d .. d + SIMD - 1 (d a multiple of SIMD) of row `row` (element index of its dim 0) as
 * floats: zeros when !in and past head_dim; a whole chunk inside head_dim as one vector load. */
inline simd_f simd_stage_chunk(__global const store_t *src, long row, int d, bool in, int head_dim)
{
    if (in && d + SIMD <= head_dim)
        return simd_load(src, row + d);
    simd_fu u;
    for (int e = 0; e < SIMD; e++)
        u.s[e] = in && d + e < head_dim ? LOAD(src, row + d + e) : 0.0f;
    return u.v;
}

/* x into elements d .. d + SIMD - 1 (d a multiple of SIMD) of row `row`, rounded to the storage
 * dtype, those below head_dim only; a whole chunk inside head_dim as one vector store (F32, F16). */
inline void simd_store_chunk(__global store_t *dst, long row, int d, int head_dim, simd_f x)
{
#if FCL_DTYPE == 0
    if (d + SIMD <= head_dim) {
        SIMD_VSTORE(x, 0, dst + row + d);
        return;
    }
#elif FCL_DTYPE == 1
    if (d + SIMD <= head_dim) {
        SIMD_VSTORE_HALF(x, 0, dst + row + d);
        return;
    }
#endif
    simd_fu u;
    u.v = x;
    for (int e = 0; e < SIMD && d + e < head_dim; e++)
        STORE(dst, row + d + e, u.s[e]);
}

/* SIMD rows into lanes: element d of row e (element index rows[e]; zeros where !in[e] and past
 * head_dim) times `scale` becomes lane e of dst[d * stride], d < HEAD_DIM_PAD (dst: a [d][rv]
 * array of row vectors from its column rv on, stride = RV). A chunk of SIMD dims at a time, as
 * vector loads transposed in registers. */
inline void simd_rows_to_lanes(__private simd_f *dst, int stride, __global const store_t *src,
                               __private const long *rows, __private const bool *in, int head_dim, float scale)
{
    for (int c = 0; c < HEAD_DIM_PAD / SIMD; c++) {
        simd_f blk[SIMD];
        _Pragma("unroll") for (int e = 0; e < SIMD; e++)
            blk[e] = simd_stage_chunk(src, rows[e], c * SIMD, in[e], head_dim);
        simd_transpose(blk);
        _Pragma("unroll") for (int k = 0; k < SIMD; k++)
            dst[(c * SIMD + k) * stride] = blk[k] * scale;
    }
}

/* Lanes into rows, the way back: lane e of src[d * stride] times lane e of `scale` into element
 * d < head_dim of the row at dst + rows[e], for the first n lanes (n <= SIMD). */
inline void simd_lanes_to_rows(__global store_t *dst, __private const long *rows, int n, __private const simd_f *src,
                               int stride, simd_f scale, int head_dim)
{
    for (int c = 0; c * SIMD < head_dim; c++) {
        simd_f blk[SIMD];
        _Pragma("unroll") for (int k = 0; k < SIMD; k++)
            blk[k] = src[(c * SIMD + k) * stride] * scale;
        simd_transpose(blk);
        _Pragma("unroll") for (int e = 0; e < SIMD; e++)
            if (e < n)
                simd_store_chunk(dst, rows[e], c * SIMD, head_dim, blk[e]);
    }
}

/* Row `row` into dst[0 .. HEAD_DIM_PAD / SIMD - 1] (read its floats through SIMD_FLOATS), chunk
 * by chunk (simd_stage_chunk). */
inline void simd_stage_row(__private simd_f *dst, __global const store_t *src, long row, bool in, int head_dim)
{
    for (int c = 0; c < HEAD_DIM_PAD / SIMD; c++)
        dst[c] = simd_stage_chunk(src, row, c * SIMD, in, head_dim);
}
/* A staged row's floats. */
#define SIMD_FLOATS(v) ((__private const float *)(v))
#endif

inline simd_f simd_pair_sum(simd_f a, simd_f b)
{
    /* two-source shuffles of whole vectors (one vpermt2ps each with AVX-512), where the halves of
     * even and odd lanes became split horizontal adds (the CPU decode's compute rate 1.1-1.2x on
     * a 2-core Xeon, docs/perf/history.md v0.32.0) */
#if SIMD == 16
    const uint16 even = (uint16)(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
#elif SIMD == 8
    const uint8 even = (uint8)(0, 2, 4, 6, 8, 10, 12, 14);
#else
    const uint4 even = (uint4)(0, 2, 4, 6);
#endif
    return shuffle2(a, b, even) + shuffle2(a, b, even + 1);
}

inline float simd_max(simd_f x)
{
#if SIMD == 16
    const float8 h8 = fmax(x.lo, x.hi);
    const float4 h = fmax(h8.lo, h8.hi);
#elif SIMD == 8
    const float4 h = fmax(x.lo, x.hi);
#else
    const float4 h = x;
#endif
    const float2 h2 = fmax(h.lo, h.hi);
    return fmax(h2.x, h2.y);
}

inline float simd_sum(simd_f x)
{
#if SIMD == 16
    const float8 h8 = x.lo + x.hi;
    const float4 h = h8.lo + h8.hi;
#elif SIMD == 8
    const float4 h = x.lo + x.hi;
#else
    const float4 h = x;
#endif
    const float2 h2 = h.lo + h.hi;
    return h2.x + h2.y;
}
#endif

/* A software prefetch of the cache line at p (global memory) into the L2 cache (x86
 * prefetcht1), where the compiler offers one (the clang-based CPU compilers: PoCL's prefetch() is
 * empty); nothing elsewhere. Into L2, not L1: an L1 prefetch holds one of the core's few L1 miss
 * buffers for the whole memory latency (AMD EPYC, v0.24.0: decode 1.5x slower). */
#if defined(__clang__) && defined(FCL_CPU_PREFETCH) && FCL_CPU_PREFETCH
#define FCL_PREFETCH(p) __builtin_prefetch(p, 0, 2)
#else
#define FCL_PREFETCH(p) ((void)0)
#endif

/* FCL_PREFETCH of every 64-byte line of the head_dim elements of the row at element index `row`. */
inline void fcl_prefetch_row(__global const store_t *src, long row, int head_dim)
{
    for (int e = 0; e < head_dim; e += 64 / (int)sizeof(store_t))
        FCL_PREFETCH(src + row + e);
}

#define FCL_LOG2E 1.4426950408889634f
/* The attention kernels' logits are transformed beyond the scale (softcap and/or ALiBi). */
#define HAS_LOGIT_MODS (HAS_SOFTCAP || HAS_ALIBI)
#define FCL_LN2 0.6931471805599453f

/* A score, already scaled, as the softmax's logit where logit mods apply (HAS_LOGIT_MODS; else
 * log2(e) is folded into the scale and x is returned as it is): soft-capped (HAS_SOFTCAP), in
 * log2 units, minus slope2 * dist (HAS_ALIBI; slope2 the head's slope in log2 units, dist the
 * query-key distance). FCL_LOGIT for a variable of any float type; fcl_logit for one score (the forward kernels
 * and decode_logit, attention_decode.cl), simd_logit lane-wise (the CPU kernels' vectors). */
#if HAS_SOFTCAP
#define FCL_SOFTCAP_OF(x, softcap) ((softcap) * tanh((x) / (softcap)))
#else
#define FCL_SOFTCAP_OF(x, softcap) (x)
#endif
#if HAS_LOGIT_MODS
#define FCL_LOG2_OF(x) ((x) * FCL_LOG2E)
#else
#define FCL_LOG2_OF(x) (x)
#endif
#if HAS_ALIBI
#define FCL_ALIBI_OF(x, slope2, dist) ((x) - (slope2) * (dist))
#else
#define FCL_ALIBI_OF(x, slope2, dist) (x)
#endif
/* x transformed in place, one statement per step (so that FMA contraction stays within a step) */
#define FCL_LOGIT(x, softcap, slope2, dist)                                                        \
    x = FCL_SOFTCAP_OF(x, softcap);                                                            \
    x = FCL_LOG2_OF(x);                                                                        \
    x = FCL_ALIBI_OF(x, slope2, dist)

inline float fcl_logit(float x, float softcap, float slope2, float dist)
{
    FCL_LOGIT(x, softcap, slope2, dist);
    return x;
}

#ifdef SIMD
inline simd_f simd_logit(simd_f x, float softcap, simd_f slope2, simd_f dist)
{
    FCL_LOGIT(x, softcap, slope2, dist);
    return x;
}
#endif

/* A row's log-sum-exp (natural log) from its running max m (log2 units) and its sum l of
 * 2^(logit - m): -inf for a row that saw no key (l = 0). Every kernel that writes LSE. */
inline float fcl_row_lse(float m, float l)
{
    return l > 0.0f ? (m + log2(l)) * FCL_LN2 : -INFINITY;
}

/* This work-group's block (along grid x), y and z, for a grid of (blocks x work-group size, y, z)
 * whose work grows along x (last_heavy: the last block is the heaviest; else the first):
 * groups are handed out heaviest first in chunks of about FCL_ROUND_GROUPS groups, whole (y, z)
 * pairs each, inside a chunk the heaviest block of every pair first. Under causal masking the
 * groups that start last are then light, so the device's last round ends together; the chunks
 * keep the pairs (heads) whose K and V are read at one time few. */
inline void fcl_group_order(int last_heavy, int *block, int *y, int *z)
{
    const int nx = get_num_groups(0), ny = get_num_groups(1), pairs = ny * get_num_groups(2);
    const int g = get_group_id(0) + nx * (get_group_id(1) + ny * get_group_id(2));
    const int chunk = clamp(FCL_ROUND_GROUPS / nx, 1, pairs);
    const int c = g / (chunk * nx), r = g - c * chunk * nx;
    const int width = min(chunk, pairs - c * chunk); /* the pairs of this chunk */
    const int pair = c * chunk + r % width, rank = r / width;
    *block = last_heavy ? nx - 1 - rank : rank;
    *y = pair % ny;
    *z = pair / ny;
}
