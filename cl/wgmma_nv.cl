/*
 * Hopper warpgroup matrix products (wgmma, compute capability 9.0 only) through inline PTX, for
 * attention_forward_wgmma.cl. NVIDIA's OpenCL compiler targets sm_90, where ptxas refuses
 * wgmma (it needs sm_90a), so every instruction that needs sm_90a is written behind SM90A, a
 * PTX comment marker: the program is compiled as it is (the instructions are then comments),
 * and the host promotes its PTX (program_cache.c: the marker removed, `.target sm_90a`) and
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

/* Makes this work-item's ordinary writes to local memory visible to later wgmma reads
 * (the generic-to-async proxy fence; a barrier after it covers the whole work-group). */
inline void fence_async_local(void)
{
    __asm__ __volatile__("fence.proxy.async.shared::cta;" ::: "memory");
}

/* d (64 x N, FP32) = (accumulate ? d : 0) + A B^T, both operands in local memory by descriptor:
 * A 64 x 16 and B N x 16, each row-major over the k dimension (K-major). */
MMA_INLINE void wgmma_ss_n64(float *d, ulong a, ulong b, int accumulate)
{
    __asm__ __volatile__(SM90A "{ .reg .pred p; setp.ne.b32 p, %34, 0; wgmma.mma_async.sync.aligned.m64n64k16.f32." MMA_IN
                         "." MMA_IN " {"
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                         "}, %32, %33, p, 1, 1, 0, 0; }"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(accumulate)
        : "memory");
}

MMA_INLINE void wgmma_ss_n128(float *d, ulong a, ulong b, int accumulate)
{
    __asm__ __volatile__(SM90A "{ .reg .pred p; setp.ne.b32 p, %66, 0; wgmma.mma_async.sync.aligned.m64n128k16.f32." MMA_IN
                         "." MMA_IN " {"
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                         "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                         "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                         "}, %64, %65, p, 1, 1, 0, 0; }"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate)
        : "memory");
}

/* d (64 x N, FP32) += A B: A 64 x 16 in registers (this work-item's 4 words, the mma_16816 A
 * fragment of its warp's 16 rows), B 16 x N in local memory by descriptor, stored N-contiguous
 * (rows of B along k: the transposed form). */
MMA_INLINE void wgmma_rs_n64(float *d, const uint *a, ulong b)
{
    __asm__ __volatile__(SM90A "wgmma.mma_async.sync.aligned.m64n64k16.f32." MMA_IN "." MMA_IN
                         " {"
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                         "}, {%32, %33, %34, %35}, %36, 1, 1, 1, 1;"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)
        : "memory");
}

MMA_INLINE void wgmma_rs_n128(float *d, const uint *a, ulong b)
{
    __asm__ __volatile__(SM90A "wgmma.mma_async.sync.aligned.m64n128k16.f32." MMA_IN "." MMA_IN
                         " {"
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                         "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                         "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                         "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)
        : "memory");
}
