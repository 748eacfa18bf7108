/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Hopper warpgroup matrix products (wgmma, compute capability 9.0 only) through inline PTX, for
 * attention_forward_wgmma.cl, linear_wgmma.cl and attention_backward_mma.cl's wgmma form.
 * NVIDIA's OpenCL compiler targets sm_90, where ptxas refuses wgmma (it needs sm_90a), so every
 * instruction that needs sm_90a is written behind SM90A, a
 * PTX comment marker: the program is compiled as it is (the instructions are then comments),
 * and the host promotes its PTX (src/programs/ptx_promote.c: the marker removed, `.target sm_90a`) and
 * builds that. Nothing here runs without that promotion.
 *
 * A warpgroup is 4 consecutive warps (work-items 0 .. 127 of the work-group). Operands in local
 * memory are tiles of 16-bit rows stored as 64-column atoms with the 128-byte swizzle
 * (swizzled_offset, mma_nv.cl: element (r, c) of atom c / 64 at row r, 16-byte chunk
 * (c % 64) / 8 XOR r % 8), every atom 1024-byte aligned. The accumulators and the register A
 * operand have the mma.sync m16n8k16 fragment layout per warp: warp w holds rows 16 w .. 16 w + 15
 * of the 64, accumulator element 4 i + e of n8 tile i as in mma_16816 (mma_nv.cl).
 *
 * Needs mma_nv.cl (MMA_IN) before it.
 */

/* Prefix of the instructions that need sm_90a: a PTX comment until the host promotes the
 * program (and removes it). */
#define SM90A "//@@"

/* The shared-window address of a local pointer, as the instructions take it. */
inline uint local_address(__local const void *p)
{
    return (uint)(size_t)p;
}

/* The matrix descriptor of a swizzled tile in local memory starting at `addr` (shared window,
 * 16-byte aligned): `stride` bytes between 8-row groups, `lead` bytes between atoms along the
 * non-contiguous operand's N dimension (used by transposed B operands only), 128-byte swizzle. */
inline ulong wgmma_desc(uint addr, uint lead, uint stride)
{
    return (ulong)((addr & 0x3FFFFu) >> 4) | (ulong)((lead >> 4) & 0x3FFFu) << 16 |
           (ulong)((stride >> 4) & 0x3FFFu) << 32 | (ulong)1 << 62;
}

/* The descriptor of k step ks (16 columns: 32 bytes inside an atom) of a K-major swizzled tile
 * at addr whose atoms hold `atom` halves. */
#define STEP_DESC(addr, atom, ks) wgmma_desc((addr) + ((ks) >> 2) * 2 * (atom) + ((ks)&3) * 32, 16, 1024)

/* The descriptor of k step kk (16 rows: 2048 bytes) of a swizzled tile at addr read as the
 * transposed (N-contiguous) B operand, its atoms of `atom` halves along n. */
#define ROWS_STEP_DESC(addr, atom, kk) wgmma_desc((addr) + (kk)*2048, 2 * (atom), 1024)

/* The descriptor of a K-major tile in local memory starting at `addr` (shared window, aligned to
 * 8 rows) whose rows of `row_bytes` bytes (32, 64 or 128) carry the swizzle of that width:
 * 16-byte chunk c of row r at chunk position c XOR ((r * row_bytes / 128) % (row_bytes / 16)),
 * 8-row groups 8 * row_bytes apart (wgmma_desc is the 128-byte case with its lead). */
inline ulong wgmma_desc_rows(uint addr, uint row_bytes)
{
    const ulong mode = row_bytes == 128 ? 1 : row_bytes == 64 ? 2 : 3;
    return (ulong)((addr & 0x3FFFFu) >> 4) | (ulong)1 << 16 | (ulong)((8 * row_bytes) >> 4) << 32 | mode << 62;
}

/* Orders this work-item's earlier register and local-memory accesses before the next
 * wgmma_* products (a warpgroup-wide instruction: every work-item of the warpgroup calls it). */
inline void wgmma_fence(void)
{
    __asm__ __volatile__(SM90A "wgmma.fence.sync.aligned;" ::: "memory");
}

/* Closes the products issued since the last call into one group. */
inline void wgmma_commit(void)
{
    __asm__ __volatile__(SM90A "wgmma.commit_group.sync.aligned;" ::: "memory");
}

/* Waits until every committed group has completed: the accumulators hold the products, and
 * the operands in local memory may be overwritten. */
inline void wgmma_wait_all(void)
{
    __asm__ __volatile__(SM90A "wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

/* Pins the n floats of accumulator d at this point of the program (no instruction): the
 * compiler may not move a use or copy of them across it. Called right after wgmma_wait_all,
 * before a product's accumulators are read, and before the wgmma_fence of products that add
 * to them, as CUTLASS fences its operands on both sides: the products' asm statements give their
 * outputs at issue, before they are valid, so a copy the compiler placed between a product and
 * its wait (a loop's accumulator passed to the next iteration) would read them too early. */
MMA_INLINE void wgmma_hold(float *d, int n)
{
    #pragma unroll
    for (int i = 0; i < n; i++)
        __asm__ __volatile__("" : "+f"(d[i])::"memory");
}

/* Keeps the A fragments f (steps k steps of 4 registers, read by products from registers in every
 * pass of a loop) live up to this point in NVIDIA's register allocation: each register is XORed
 * with `zero`, a value the compiler cannot see to be 0 (one instruction per register). Called
 * after the last product of a pass that builds other A fragments of the same shape. CUDA 13.0's
 * ptxas gave the 64-row dK/dV kernel's P and dS fragments (four k steps each, the shape of its K
 * and V fragments) the K and V fragments' registers, which the next tile's products read again,
 * and the H100's driver 580 computed wrong dK and dV on every tile after a work-group's first.
 * With such a use after the products ptxas allocates them apart (NVIDIA's own compile on an H100,
 * whose test grid then passes; history "v0.42.0"). */
MMA_INLINE void wgmma_keep_fragments(uint (*f)[4], int steps, uint zero)
{
    #pragma unroll
    for (int ks = 0; ks < steps; ks++)
        #pragma unroll
        for (int e = 0; e < 4; e++)
            __asm__ __volatile__("xor.b32 %0, %0, %1;" : "+r"(f[ks][e]) : "r"(zero));
}

/* The operand lists of the products: an accumulator of 32 or 64 floats (d[0 ..]) as operands 0 ..
 * 31 or 0 .. 63, and the matching register lists of the instruction text. PTX takes no arrays,
 * so every element is named. */
#define WGMMA_ACC8(d, i)                                                                            \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define WGMMA_ACC16(d) WGMMA_ACC8(d, 0), WGMMA_ACC8(d, 8)
#define WGMMA_ACC32(d) WGMMA_ACC16(d), WGMMA_ACC8(d, 16), WGMMA_ACC8(d, 24)
#define WGMMA_ACC64(d) WGMMA_ACC32(d), WGMMA_ACC8(d, 32), WGMMA_ACC8(d, 40), WGMMA_ACC8(d, 48), WGMMA_ACC8(d, 56)
#define WGMMA_REGS16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define WGMMA_REGS32                                                                                \
    WGMMA_REGS16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WGMMA_REGS64                                                                                \
    WGMMA_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39, "                                       \
    "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, "                                  \
    "%52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
/* The layouts of the wgmma_ss products' operands: 0 K-major (rows along k, the default), 1
 * MN-major (the transposed form: rows along m for A, along n for B, in the 64-column atoms
 * above). A program sets them by -D for all its wgmma_ss products. */
#ifndef WGMMA_SS_A_MN
#define WGMMA_SS_A_MN 0
#endif
#ifndef WGMMA_SS_B_MN
#define WGMMA_SS_B_MN 0
#endif
#define WGMMA_STR(x) #x
#define WGMMA_XSTR(x) WGMMA_STR(x)

/* The instruction texts, after the accumulators: A and B by descriptor (operands a, b; their
 * layouts as set above) and the accumulate flag (operand acc, a register: 0 overwrites d); A
 * from 4 registers a0 .. a3 and B by descriptor b, transposed (N-contiguous), accumulating; or
 * A from registers and B by descriptor, K-major, with the accumulate flag. */
#define WGMMA_SS_TEXT(shape, regs, a, b, acc)                                                       \
    SM90A "{ .reg .pred p; setp.ne.b32 p, " acc ", 0; wgmma.mma_async.sync.aligned." shape ".f32." MMA_IN "." MMA_IN \
          " {" regs "}, " a ", " b ", p, 1, 1, " WGMMA_XSTR(WGMMA_SS_A_MN) ", " WGMMA_XSTR(WGMMA_SS_B_MN) "; }"
#define WGMMA_RS_TEXT(shape, regs, a0, a1, a2, a3, b)                                               \
    SM90A "wgmma.mma_async.sync.aligned." shape ".f32." MMA_IN "." MMA_IN " {" regs "}, {" a0 ", " a1 ", " a2 ", " a3 \
          "}, " b ", 1, 1, 1, 1;"
#define WGMMA_RSK_TEXT(shape, regs, a0, a1, a2, a3, b, acc)                                         \
    SM90A "{ .reg .pred p; setp.ne.b32 p, " acc ", 0; wgmma.mma_async.sync.aligned." shape ".f32." MMA_IN "." MMA_IN \
          " {" regs "}, {" a0 ", " a1 ", " a2 ", " a3 "}, " b ", p, 1, 1, 0; }"

/* wgmma_ss_n32 / n64 / n128, wgmma_rs_n64 / n128 and wgmma_rsk_n32 / n64 / n128 by their N. */
#define WGMMA_CAT(a, b) a##b
#define WGMMA_SS_N(n) WGMMA_CAT(wgmma_ss_n, n)
#define WGMMA_RS_N(n) WGMMA_CAT(wgmma_rs_n, n)
#define WGMMA_RSK_N(n) WGMMA_CAT(wgmma_rsk_n, n)

/* d (64 x N, FP32) = (accumulate ? d : 0) + A B^T, both operands in local memory by descriptor:
 * A 64 x 16 and B N x 16, each K-major, or MN-major where WGMMA_SS_A_MN / WGMMA_SS_B_MN say. */
MMA_INLINE void wgmma_ss_n32(float *d, ulong a, ulong b, int accumulate)
{
    __asm__ __volatile__(WGMMA_SS_TEXT("m64n32k16", WGMMA_REGS16, "%16", "%17", "%18")
                         : WGMMA_ACC16(d)
                         : "l"(a), "l"(b), "r"(accumulate)
                         : "memory");
}

MMA_INLINE void wgmma_ss_n64(float *d, ulong a, ulong b, int accumulate)
{
    __asm__ __volatile__(WGMMA_SS_TEXT("m64n64k16", WGMMA_REGS32, "%32", "%33", "%34")
                         : WGMMA_ACC32(d)
                         : "l"(a), "l"(b), "r"(accumulate)
                         : "memory");
}

MMA_INLINE void wgmma_ss_n128(float *d, ulong a, ulong b, int accumulate)
{
    __asm__ __volatile__(WGMMA_SS_TEXT("m64n128k16", WGMMA_REGS64, "%64", "%65", "%66")
                         : WGMMA_ACC64(d)
                         : "l"(a), "l"(b), "r"(accumulate)
                         : "memory");
}

/* d (64 x N, FP32) += A B: A 64 x 16 in registers (this work-item's 4 words, the mma_16816 A
 * fragment of its warp's 16 rows), B 16 x N in local memory by descriptor, stored N-contiguous
 * (rows of B along k: the transposed form). */
MMA_INLINE void wgmma_rs_n64(float *d, const uint *a, ulong b)
{
    __asm__ __volatile__(WGMMA_RS_TEXT("m64n64k16", WGMMA_REGS32, "%32", "%33", "%34", "%35", "%36")
                         : WGMMA_ACC32(d)
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)
                         : "memory");
}

MMA_INLINE void wgmma_rs_n128(float *d, const uint *a, ulong b)
{
    __asm__ __volatile__(WGMMA_RS_TEXT("m64n128k16", WGMMA_REGS64, "%64", "%65", "%66", "%67", "%68")
                         : WGMMA_ACC64(d)
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)
                         : "memory");
}

/* d (64 x N, FP32) = (accumulate ? d : 0) + A B^T: A 64 x 16 in registers (as in wgmma_rs_n64),
 * B N x 16 in local memory by descriptor, K-major (what S = Q K^T takes with Q in registers). */
MMA_INLINE void wgmma_rsk_n32(float *d, const uint *a, ulong b, int accumulate)
{
    __asm__ __volatile__(WGMMA_RSK_TEXT("m64n32k16", WGMMA_REGS16, "%16", "%17", "%18", "%19", "%20", "%21")
                         : WGMMA_ACC16(d)
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate)
                         : "memory");
}

MMA_INLINE void wgmma_rsk_n64(float *d, const uint *a, ulong b, int accumulate)
{
    __asm__ __volatile__(WGMMA_RSK_TEXT("m64n64k16", WGMMA_REGS32, "%32", "%33", "%34", "%35", "%36", "%37")
                         : WGMMA_ACC32(d)
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate)
                         : "memory");
}

MMA_INLINE void wgmma_rsk_n128(float *d, const uint *a, ulong b, int accumulate)
{
    __asm__ __volatile__(WGMMA_RSK_TEXT("m64n128k16", WGMMA_REGS64, "%64", "%65", "%66", "%67", "%68", "%69")
                         : WGMMA_ACC64(d)
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate)
                         : "memory");
}
