/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the attention backward kernels share (the portable attention_backward.cl, the blocked
 * attention_backward_blocked.cl, the CPU attention_backward_cpu.cl and the NVIDIA tensor-core
 * attention_backward_mma.cl): the argument list, so that one host launch serves them all
 * (`state` carries accumulators between chunked launches, `scores` the stored dS of the blocked
 * and tensor-core kernels; kernels that do not use them are given a placeholder buffer), a
 * sequence's rows for each LAYOUT (0 dense, 1 varlen, 2 packed, as in
 * attention_forward_rows.cl), the scratch row index, the stored dS indices, the packed bounds, the
 * score transform, and the preprocessing kernel attention_backward_delta (delta[h, i] =
 * rowsum(dO * O), up to 32 work-items per query row).
 *
 * Specialisation (-D): FCL_DTYPE (common.cl); HAS_SOFTCAP, HAS_ALIBI; LAYOUT; DELTA_LANES (GPUs:
 * HEAD_DIM_PAD / 8 up to 32; 1 on CPUs, 0 in the CPU kernels' program: SIMD and DELTA_CPU_ROWS
 * defined).
 */

#define BACKWARD_ARGS                                                                              \
    __global const store_t *Q, __global const store_t *K, __global const store_t *V,              \
        __global const store_t *O, __global const store_t *dO, __global const float *LSE,          \
        __global store_t *dQ, __global store_t *dK, __global store_t *dV,                          \
        __global const float *mask, __global const float *alibi, __global float *delta,            \
        __global float *state, __global float *scores, __global const int *cu_q,                   \
        __global const int *cu_k,                                                                  \
        const int item_lo, const int item_hi, const int load_state, const int save_state,          \
        const int sq_arg, const int sk_arg, const int head_dim, const int group,                   \
        const int window_left, const int window_right, const int total_q, const int total_k,       \
        const int n_qtiles, const float scale, const float softcap,                                \
        const long q_off, const long q_sb, const long q_ss, const long q_sh,                       \
        const long k_off, const long k_sb, const long k_ss, const long k_sh,                       \
        const long v_off, const long v_sb, const long v_ss, const long v_sh,                       \
        const long o_off, const long o_sb, const long o_ss, const long o_sh,                       \
        const long do_off, const long do_sb, const long do_ss, const long do_sh,                   \
        const long dq_off, const long dq_sb, const long dq_ss, const long dq_sh,                   \
        const long dk_off, const long dk_sb, const long dk_ss, const long dk_sh,                   \
        const long dv_off, const long dv_sb, const long dv_ss, const long dv_sh,                   \
        const long lse_off, const long lse_sb, const long lse_sh, const long lse_ss,               \
        const long mask_off, const long mask_sb, const long mask_ss,                               \
        const long alibi_off, const long alibi_sb, const long alibi_sh,                            \
        const long cu_q_off, const long cu_k_off, const long seq_ss

/* Head h's ALiBi slope (0 without ALiBi), in a kernel of BACKWARD_ARGS at batch b. */
#if HAS_ALIBI
#define HEAD_SLOPE(h) alibi[alibi_off + b * alibi_sb + (h) * alibi_sh]
#else
#define HEAD_SLOPE(h) 0.0f
#endif

/* One sequence's rows: queries [q_first, q_first + sq) and keys [k_first, k_first + sk) of
 * the tensors (varlen: from the prefix sums, clamped to the totals and the bounds). */
typedef struct seq_rows {
    int q_first, k_first, sq, sk;
} seq_rows;

inline seq_rows sequence_rows(int b, __global const int *cu_q, __global const int *cu_k, long cu_q_off,
                              long cu_k_off, int sq_arg, int sk_arg, int total_q, int total_k)
{
    seq_rows r;
#if LAYOUT == 1
    r.q_first = clamp(cu_q[cu_q_off + b], 0, total_q);
    r.k_first = clamp(cu_k[cu_k_off + b], 0, total_k);
    r.sq = min(clamp(cu_q[cu_q_off + b + 1], r.q_first, total_q) - r.q_first, sq_arg);
    r.sk = min(clamp(cu_k[cu_k_off + b + 1], r.k_first, total_k) - r.k_first, sk_arg);
#else
    r.q_first = r.k_first = 0;
    r.sq = sq_arg;
    r.sk = sk_arg;
#endif
    return r;
}

/* Index of row i (of a sequence starting at tensor row `first`) of head h of batch b in the
 * float scratch rows (delta, state): dense [B, heads, rows], varlen/packed [heads, total]. */
inline long scratch_row(int b, int h, int heads, int i, int first, int rows, int total)
{
#if LAYOUT == 0
    return ((long)b * heads + h) * rows + i;
#else
    return (long)h * total + first + i;
#endif
}

/* The row pitch of `scores` for the launch's key range [lo, hi]: its keys rounded up to a
 * multiple of 4, so that a row starts 16-byte aligned (the host sizes `scores` for it). */
inline long scores_pitch(int lo, int hi)
{
    return (long)((hi - lo + 4) & ~3);
}

/* Where dS of query row i and key j of head h of batch (or sequence) b sits in `scores` (the
 * stored-dS forms of the blocked and tensor-core kernels): rows of the launch's key range [lo,
 * hi], [B, Hq, sq_arg, scores_pitch(lo, hi)]. */
inline long scores_index(int b, int h, int Hq, int i, int j, int lo, int hi, int sq_arg)
{
    return (((long)b * Hq + h) * sq_arg + i) * scores_pitch(lo, hi) + (j - lo);
}

/* The same for the CPU kernels, whose dQ kernel holds query rows in its vector lanes: the keys
 * of the range [lo, hi] outermost, [B, Hq, hi - lo + 1, sq_arg]. */
inline long scores_index_keys(int b, int h, int Hq, int i, int j, int lo, int hi, int sq_arg)
{
    return (((long)b * Hq + h) * (hi - lo + 1) + (j - lo)) * sq_arg + i;
}

/* Packed layout: row r's own sequence [lo, hi) from seq_bounds, clamped to [0, L]. */
inline int packed_lo(__global const int *bounds, long off, long ss, int r, int L)
{
    return clamp(bounds[off + r * ss], 0, L);
}

inline int packed_hi(__global const int *bounds, long off, long ss, int r, int L)
{
    return clamp(bounds[off + r * ss + 1], packed_lo(bounds, off, ss, r, L), L);
}

/* The query rows [*lo, *hi] that may see some key of the block j0 .. j_last (before masks;
 * empty when *lo > *hi). The symmetric rows_keys gives the keys [*lo, *hi] that some query row
 * of the block i0 .. i_last may see. Query i sits at position i + shift; packed rows only see
 * their own sequence (seq_bounds in `bounds`). */
inline void keys_rows(int j0, int j_last, int sq, int shift, int window_left, int window_right,
                      __global const int *bounds, long off, long ss, int *lo, int *hi)
{
#if LAYOUT == 2
    *lo = sq;
    *hi = -1;
    for (int jj = j0; jj <= j_last; jj++) {
        *lo = min(*lo, packed_lo(bounds, off, ss, jj, sq));
        *hi = max(*hi, packed_hi(bounds, off, ss, jj, sq) - 1);
    }
#else
    *lo = 0;
    *hi = sq - 1;
#endif
    if (window_right >= 0)
        *lo = max(*lo, sub_sat(j0 - shift, window_right));
    if (window_left >= 0)
        *hi = min(*hi, add_sat(j_last - shift, window_left));
    if (j_last < j0) /* no key rows: an empty block */
        *hi = -1;
}

inline void rows_keys(int i0, int i_last, int sk, int shift, int window_left, int window_right,
                      __global const int *bounds, long off, long ss, int *lo, int *hi)
{
#if LAYOUT == 2
    *lo = sk;
    *hi = -1;
    for (int ii = i0; ii <= i_last; ii++) {
        *lo = min(*lo, packed_lo(bounds, off, ss, ii, sk));
        *hi = max(*hi, packed_hi(bounds, off, ss, ii, sk) - 1);
    }
#else
    *lo = 0;
    *hi = sk - 1;
#endif
    if (window_left >= 0)
        *lo = max(*lo, sub_sat(i0 + shift, window_left));
    if (window_right >= 0)
        *hi = min(*hi, add_sat(i_last + shift, window_right));
    if (i_last < i0) /* no query rows: an empty block */
        *hi = -1;
}

/* The scaled score after softcap and ALiBi in natural units; *dcap gets d(capped)/d(raw). */
inline float backward_score(float dot, float scale, float softcap, float slope, int pos, int j, float *dcap)
{
    float s = dot * scale;
    *dcap = 1.0f;
#if HAS_SOFTCAP
    const float t = tanh(s / softcap);
    s = softcap * t;
    *dcap = 1.0f - t * t;
#endif
#if HAS_ALIBI
    s -= slope * (float)abs(pos - j);
#endif
    return s;
}

#if DELTA_LANES == 0
/* The CPU kernels' form: work-groups of one work-item, each taking DELTA_CPU_ROWS (-D, from the
 * host) query rows (dimension 0 counts blocks of them) with SIMD-wide vectors along each row's elements, the rows
 * DELTA_AHEAD on prefetched into L2 (-D FCL_CPU_PREFETCH; PoCL's code otherwise waits on each
 * row: 2.0 -> 1.1 ms at S 8192, H 12, D 32; Intel's runtime the same either way). A work-item
 * per row (DELTA_LANES 1) read one element of 32 rows per vector load: 1.8-2.7 ms of a 20-32 ms
 * D 32 encoder backward on a 2-core EPYC (docs/perf/history.md v0.38.0). */
#define DELTA_AHEAD 8
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void attention_backward_delta(BACKWARD_ARGS)
{
    const int i0 = get_global_id(0) * DELTA_CPU_ROWS, h = get_global_id(1), b = get_global_id(2);
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
    for (int i = i0; i < min(i0 + DELTA_CPU_ROWS, r.sq); i++) {
        if (i + DELTA_AHEAD < r.sq) {
            fcl_prefetch_row(O, o_off + b * o_sb + (long)(r.q_first + i + DELTA_AHEAD) * o_ss + h * o_sh, head_dim);
            fcl_prefetch_row(dO, do_off + b * do_sb + (long)(r.q_first + i + DELTA_AHEAD) * do_ss + h * do_sh, head_dim);
        }
        simd_f o[HEAD_DIM_PAD / SIMD], g[HEAD_DIM_PAD / SIMD];
        simd_stage_row(o, O, o_off + b * o_sb + (long)(r.q_first + i) * o_ss + h * o_sh, true, head_dim);
        simd_stage_row(g, dO, do_off + b * do_sb + (long)(r.q_first + i) * do_ss + h * do_sh, true, head_dim);
        simd_f sum = (simd_f)(0.0f);
        for (int c = 0; c < HEAD_DIM_PAD / SIMD; c++)
            sum = fma(g[c], o[c], sum);
        delta[scratch_row(b, h, get_global_size(1), i, r.q_first, sq_arg, total_q)] = simd_sum(sum);
    }
}
#else
/* Work-groups of DELTA_LANES x (1 to DELTA_MAX_ROWS) work-items along dimension 0: DELTA_LANES
 * per query row i (on GPUs HEAD_DIM_PAD / 8 up to 32, from the host), each summing the row's
 * 4-element chunks lane, lane + DELTA_LANES, ... (consecutive work-items read consecutive
 * chunks, one vector load each where the row's start and head_dim are multiples of 4 elements,
 * else element by element); the lanes' partial sums then meet in a fixed tree (deterministic).
 * DELTA_LANES 1 on CPUs: a work-item per row, as their SIMD lanes want. The 256 work-items are
 * the host's DELTA_GROUP_ITEMS (src/ops/backward_launch.c). */
#define DELTA_MAX_ROWS (256 / DELTA_LANES)
__kernel void attention_backward_delta(BACKWARD_ARGS)
{
#if DELTA_LANES > 1
    __local float part[DELTA_MAX_ROWS][DELTA_LANES];
#endif
    const int lane = get_local_id(0) % DELTA_LANES, slot = get_local_id(0) / DELTA_LANES;
    const int i = get_global_id(0) / DELTA_LANES, h = get_global_id(1), b = get_global_id(2);
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
    float sum = 0.0f;
    if (i < r.sq) {
        const long orow = o_off + b * o_sb + (long)(r.q_first + i) * o_ss + h * o_sh;
        const long drow = do_off + b * do_sb + (long)(r.q_first + i) * do_ss + h * do_sh;
        const bool aligned = head_dim % 4 == 0 && orow % 4 == 0 && drow % 4 == 0;
        FCL_UNROLL_LOOP
        for (int d = 4 * lane; d < HEAD_DIM_PAD; d += 4 * DELTA_LANES) {
            if (d >= head_dim)
                break;
            const float4 g = aligned ? load4_aligned(dO, drow + d) : load4_bounded(dO, drow + d, d, head_dim);
            const float4 o = aligned ? load4_aligned(O, orow + d) : load4_bounded(O, orow + d, d, head_dim);
            sum = fma(g.s3, o.s3, fma(g.s2, o.s2, fma(g.s1, o.s1, fma(g.s0, o.s0, sum))));
        }
    }
#if DELTA_LANES > 1
    part[slot][lane] = sum;
    /* pairs at distance `gap` (powers of two from the widest below DELTA_LANES) add up */
    for (int gap = DELTA_LANES > 16 ? 16 : DELTA_LANES > 8 ? 8 : DELTA_LANES > 4 ? 4 : DELTA_LANES > 2 ? 2 : 1; gap > 0;
         gap /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lane < gap && lane + gap < DELTA_LANES)
            part[slot][lane] += part[slot][lane + gap];
    }
    if (lane != 0 || i >= r.sq)
        return;
    sum = part[slot][0];
#else
    (void)slot;
    if (i >= r.sq)
        return;
#endif
    delta[scratch_row(b, h, get_global_size(1), i, r.q_first, sq_arg, total_q)] = sum;
}
#endif
