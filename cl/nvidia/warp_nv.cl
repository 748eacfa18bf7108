/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NVIDIA warp primitives through inline PTX, shared by the tensor-core kernels (mma_nv.cl) and
 * the decode kernel's team-shuffle form: shuffles, votes, a warp barrier and ex2.approx (compute
 * capability >= 7.0; every lane of the warp must call them: uniform control flow, full mask), and
 * asynchronous 16-byte copies into local memory (>= 8.0). cl/portable/subgroup.cl gives the same
 * primitives on devices with subgroups.
 */

#define WARP_LANES 32 /* lanes of a warp: lane = local id % WARP_LANES in 1-D work-groups */

/* x from lane `lane ^ lane_mask` of the warp. */
inline float shuffle_xor(float x, int lane_mask)
{
    float r;
    __asm__ __volatile__("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(x), "r"(lane_mask));
    return r;
}

/* x from lane `src` (0 .. 31) of the warp. */
inline float shuffle_idx(float x, int src)
{
    float r;
    __asm__ __volatile__("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(x), "r"(src));
    return r;
}

/* Whether x is non-zero in every lane (warp_all) or in some lane (warp_any) of the warp. */
inline int warp_all(int x)
{
    int r;
    __asm__ __volatile__("{ .reg .pred p, q; setp.ne.s32 p, %1, 0; vote.sync.all.pred q, p, 0xffffffff; "
                         "selp.s32 %0, 1, 0, q; }"
                         : "=r"(r)
                         : "r"(x));
    return r;
}

inline int warp_any(int x)
{
    int r;
    __asm__ __volatile__("{ .reg .pred p, q; setp.ne.s32 p, %1, 0; vote.sync.any.pred q, p, 0xffffffff; "
                         "selp.s32 %0, 1, 0, q; }"
                         : "=r"(r)
                         : "r"(x));
    return r;
}

/* 2^x, flushing subnormal results to zero (one MUFU instruction). */
inline float exp2_ftz(float x)
{
    float r;
    __asm__("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

/* Waits for every lane of the warp; their local-memory writes before it are visible to each
 * other after it. */
inline void warp_sync(void)
{
    __asm__ __volatile__("bar.warp.sync 0xffffffff;" ::: "memory");
}

/* 16 bytes from global src to local dst, asynchronously (compute capability >= 8.0): the
 * first `bytes` (0 or 16) from src, zeros after (src not read when 0). Both 16-byte aligned. */
inline void async_copy16(__local void *dst, __global const void *src, int bytes)
{
    __asm__ __volatile__("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"((uint)(size_t)dst), "l"(src), "r"(bytes)
                         : "memory");
}

/* async_copy16 caching in L2 only (.cg), for operands that a work-group reads once and other
 * work-groups read from L2: the projection GEMMs' slices (on the H200 the wgmma GEMM's
 * projections ran at 480 TFLOP/s with it, 347 through L1). */
inline void async_copy16_l2(__local void *dst, __global const void *src, int bytes)
{
    __asm__ __volatile__("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((uint)(size_t)dst), "l"(src), "r"(bytes)
                         : "memory");
}

/* Closes this work-item's async copies since the last call into one group (possibly empty). */
inline void async_commit(void)
{
    __asm__ __volatile__("cp.async.commit_group;" ::: "memory");
}
