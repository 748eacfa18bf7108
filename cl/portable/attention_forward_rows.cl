/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the attention forward kernels share (the portable attention_forward.cl and the NVIDIA
 * tensor-core attention_forward_mma.cl): the argument list, so that one host launch serves
 * both, and the rows, key ranges and offsets of a work-group's sequence for each LAYOUT:
 *   0 dense   grid z = batch; every batch has sq_arg queries and sk_arg keys;
 *   1 varlen  grid z = sequence b, whose rows come from the prefix sums cu_q / cu_k (clamped
 *             to [0, total] and to the bounds sq_arg / sk_arg); batch strides unused;
 *   2 packed  one sequence of sq_arg = sk_arg = L rows; row r only sees key rows inside its
 *             own [seq[r,0], seq[r,1]) (clamped to [0, L]).
 * Key positions count from the sequence's first key (for varlen, each sequence's own; for
 * packed, row 0 of the one sequence). The rows kernel, which may run the keys in chunks, cuts
 * them into tiles on a grid of multiples of BLOCK_N from there, so that chunked launches give
 * one launch's bits. The kernels that never chunk do the same, except that in the packed form a
 * work-group's tiles start at the first key its rows may see where that saves a tile
 * (FIRST_TILE, cl/portable/common.cl). Either way a varlen sequence's tiles do not depend on
 * where it sits in the packing.
 */

#define FORWARD_KERNEL_ARGS                                                                              \
    __global const store_t *Q, __global const store_t *K, __global const store_t *V, __global store_t *O, \
        __global float *LSE, __global const float *mask, __global const float *alibi, __global float *state, \
        __global const int *cu_q, /* varlen: Q prefix sums; packed: seq_bounds */                         \
        __global const int *cu_k, /* varlen: K prefix sums */                                             \
        const int key_lo, const int key_hi, /* this launch's keys, from the grid origin */               \
        const int load_state, const int save_state, const int sq_arg, const int sk_arg,                   \
        const int head_dim, const int group, /* Hq / Hkv */                                               \
        const int window_left,               /* -1 = unbounded */                                         \
        const int window_right,              /* -1 = unbounded; causal already folded in */               \
        const int write_lse, const float scale, const float softcap,                                      \
        /* offsets and strides in elements: Q/K/V/O (batch, seq, head), LSE (batch, head, seq),          \
         * mask (batch, key), alibi (batch, head) */                                                      \
        const long q_off, const long q_sb, const long q_ss, const long q_sh, const long k_off,             \
        const long k_sb, const long k_ss, const long k_sh, const long v_off, const long v_sb,              \
        const long v_ss, const long v_sh, const long o_off, const long o_sb, const long o_ss,              \
        const long o_sh, const long lse_off, const long lse_sb, const long lse_sh, const long lse_ss,      \
        const long mask_off, const long mask_sb, const long mask_ss, const long alibi_off,                 \
        const long alibi_sb, const long alibi_sh, const long cu_q_off, const long cu_k_off,                \
        const long seq_ss, const int total_q, const int total_k

#if LAYOUT == 1
/* This sequence's rows, clamped so that any prefix-sum values stay inside the tensors. */
#define FORWARD_SEQUENCE_SETUP                                                                           \
    const int q_first = clamp(cu_q[cu_q_off + b], 0, total_q);                                           \
    const int q_end = clamp(cu_q[cu_q_off + b + 1], q_first, total_q);                                   \
    const int k_first = clamp(cu_k[cu_k_off + b], 0, total_k);                                           \
    const int k_end = clamp(cu_k[cu_k_off + b + 1], k_first, total_k);                                   \
    const int sq = min(q_end - q_first, sq_arg), sk = min(k_end - k_first, sk_arg);                      \
    const long qo = q_off + q_first * q_ss, ko = k_off + k_first * k_ss, vo = v_off + k_first * v_ss;    \
    const long oo = o_off + q_first * o_ss, lseo = lse_off + q_first * lse_ss;                           \
    const long mo = mask_off + k_first * mask_ss;                                                        \
    const long state_base = (long)h * total_q + q_first;
#else
#define FORWARD_SEQUENCE_SETUP                                                                           \
    const int sq = sq_arg, sk = sk_arg;                                                                  \
    const long qo = q_off, ko = k_off, vo = v_off, oo = o_off, lseo = lse_off, mo = mask_off;            \
    const long state_base = ((long)b * get_global_size(1) + h) * sq;
#endif

/* The work-group's rows i0 .. i0 + BLOCK_M - 1 of query head h (KV head hk) of batch or
 * sequence b, its sequence's view (FORWARD_SEQUENCE_SETUP), and the keys [g_lo, g_hi] its
 * rows may see. */
#define FORWARD_GROUP_SETUP                                                                              \
    int row_block, h, b; /* later row blocks see more keys (causal): they start first */            \
    fcl_group_order(1, &row_block, &h, &b);                                                              \
    const int i0 = row_block * BLOCK_M;                                                                  \
    const int hk = h / group;                                                                            \
    FORWARD_SEQUENCE_SETUP                                                                               \
    const int shift = sk - sq; /* query i sits at absolute position i + shift */                        \
    const int i_last = min(i0 + BLOCK_M, sq) - 1;                                                        \
    int g_lo, g_hi;                                                                                      \
    forward_group_keys(i0, i_last, shift, sq, sk, key_lo, key_hi, window_left, window_right, cu_q, \
                       cu_q_off, seq_ss, &g_lo, &g_hi);

/* The portable kernels' factor on the queries (the scale, times log2(e) unless logit mods
 * transform the scores first) and, with ALiBi, the head's slope in log2 units. */
#define FORWARD_LOGIT_SETUP                                                                              \
    const float qscale = HAS_LOGIT_MODS ? scale : scale * FCL_LOG2E;                                     \
    const float slope = HAS_ALIBI ? alibi[alibi_off + b * alibi_sb + h * alibi_sh] * FCL_LOG2E : 0.0f;

/* The key range [*lo, *hi] (sequence positions, before the key mask) that the group's rows
 * i0 .. i_last may see inside this launch's keys; empty when *lo > *hi. Query i sits at
 * absolute position i + shift. */
inline void forward_group_keys(int i0, int i_last, int shift, int sq, int sk, int key_lo,
                               int key_hi, int window_left, int window_right, __global const int *cu_q,
                               long cu_q_off, long seq_ss, int *lo, int *hi)
{
#if LAYOUT == 2
    int g_lo = key_hi + 1, g_hi = key_lo - 1;
    for (int row = i0; row <= i_last; row++) {
        const int lo_r = clamp(cu_q[cu_q_off + row * seq_ss], 0, sq);
        const int hi_r = clamp(cu_q[cu_q_off + row * seq_ss + 1], lo_r, sq) - 1;
        g_lo = min(g_lo, max(lo_r, window_left >= 0 ? sub_sat(row, window_left) : 0));
        g_hi = max(g_hi, min(hi_r, window_right >= 0 ? add_sat(row, window_right) : sk - 1));
    }
    *lo = max(g_lo, key_lo);
    *hi = min(g_hi, key_hi);
#else
    *lo = max(key_lo, window_left >= 0 ? sub_sat(i0 + shift, window_left) : 0);
    *hi = min(min(key_hi, sk - 1), window_right >= 0 ? add_sat(i_last + shift, window_right) : sk - 1);
#endif
}

/* Row i's visible keys [*lo, *hi] inside the group's [g_lo, g_hi], before the key mask; empty
 * (*hi = -1) for rows past sq. */
inline void forward_row_keys(int i, int g_lo, int g_hi, int shift, int sq, int sk, int window_left,
                             int window_right, __global const int *cu_q, long cu_q_off, long seq_ss, int *lo,
                             int *hi)
{
    *lo = max(g_lo, window_left >= 0 ? sub_sat(i + shift, window_left) : 0);
    *hi = i >= sq ? -1 : min(g_hi, window_right >= 0 ? add_sat(i + shift, window_right) : sk - 1);
#if LAYOUT == 2
    if (i < sq) { /* only key rows of the row's own sequence */
        const int lo_r = clamp(cu_q[cu_q_off + i * seq_ss], 0, sq);
        *lo = max(*lo, lo_r);
        *hi = min(*hi, clamp(cu_q[cu_q_off + i * seq_ss + 1], lo_r, sq) - 1);
    }
#endif
}
