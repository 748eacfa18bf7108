/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attention forward: tiled online softmax (FlashAttention-2 style), portable OpenCL C 1.2.
 *
 * One work-group computes BLOCK_M query rows of one (batch, head) with BLOCK_M / ROWS
 * work-items; each work-item owns ROWS rows (register blocking: every K and V value read
 * from local memory serves ROWS rows), keeping their queries, output accumulators and
 * softmax state in private memory. K and V tiles of BLOCK_N keys are staged in local
 * memory as float and shared by the group; only tiles that the group's rows can see are
 * visited. Nothing Sk-long is ever stored. The normalised rows leave through local memory
 * so that the stores to O are coalesced.
 *
 * Specialisation (-D): FCL_DTYPE (common.cl); HEAD_DIM_PAD (head dim rounded up: the
 * runtime head_dim <= HEAD_DIM_PAD and the padding is zero-filled); BLOCK_M, BLOCK_N, ROWS;
 * SMEM_FLOATS (size of the shared local array); HAS_SOFTCAP, HAS_MASK, HAS_ALIBI; LAYOUT
 * (dense, varlen, packed: attention_forward_rows.cl). Chunked equals one launch, bit for bit.
 * Keys of a tile that a row cannot see contribute exactly nothing.
 *
 * Key chunks: the keys [key_lo, key_hi] of one launch may be a chunk of the full range, for
 * devices that cap the loop iterations of a work-item. A launch then resumes from and/or
 * saves its rows' unnormalised state (acc[HEAD_DIM_PAD], m, l per row) in `state`
 * ([B, Hq, Sq, HEAD_DIM_PAD + 2] floats), and only the last chunk writes O and LSE.
 *
 * Scores are kept in log2 units (natural score * log2(e)) so the softmax uses exp2.
 */

#define WG_SIZE (BLOCK_M / ROWS)
/* Iterations for WG_SIZE work-items to cover n items with a constant trip count. */
#define STRIDED_STEPS(n) (((n) + WG_SIZE - 1) / WG_SIZE)

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attention_forward(FORWARD_KERNEL_ARGS)
{
    /* One local array: the K tile (transposed and padded against bank conflicts, so the
     * score loop runs over keys with independent accumulators and vectorises on CPUs), the
     * V tile, and at the end the block's output rows. */
    __local float smem[SMEM_FLOATS];
    __local float (*Kt)[BLOCK_N + 1] = (__local float (*)[BLOCK_N + 1])smem;
    __local float (*Vs)[HEAD_DIM_PAD] = (__local float (*)[HEAD_DIM_PAD])(smem + HEAD_DIM_PAD * (BLOCK_N + 1));
    __local float (*Os)[HEAD_DIM_PAD] = (__local float (*)[HEAD_DIM_PAD])smem;
#if HAS_MASK
    __local float Ms[BLOCK_N];
#endif
    const int lid = get_local_id(0);
    FORWARD_GROUP_SETUP /* the group's key range [g_lo, g_hi] is the union over its rows */

    FORWARD_LOGIT_SETUP
    /* Work-item lid owns block rows lid + r * WG_SIZE, r < ROWS. Arrays are declared here,
     * outside the tile loop. */
    float q[ROWS][HEAD_DIM_PAD];
    float acc[ROWS][HEAD_DIM_PAD];
    float s[ROWS][BLOCK_N]; /* the tile's scores, then probabilities */
    float m[ROWS], l[ROWS];
    int jlo[ROWS], jhi[ROWS];
    for (int r = 0; r < ROWS; r++) {
        const int i = i0 + lid + r * WG_SIZE;
        /* rows past sq read the last row (never written back); an empty sequence reads none */
        const long qrow = qo + b * q_sb + (long)clamp(i, 0, max(sq - 1, 0)) * q_ss + h * q_sh;
        for (int d = 0; d < HEAD_DIM_PAD; d++) {
            q[r][d] = sq > 0 && d < head_dim ? LOAD(Q, qrow + d) * qscale : 0.0f;
            acc[r][d] = 0.0f;
        }
        m[r] = -INFINITY; /* running max, log2 units */
        l[r] = 0.0f;      /* running sum of exp2(s - m) */
        if (load_state && i < sq) {
            __global const float *st = state + (state_base + i) * (HEAD_DIM_PAD + 2);
            for (int d = 0; d < HEAD_DIM_PAD; d++)
                acc[r][d] = st[d];
            m[r] = st[HEAD_DIM_PAD];
            l[r] = st[HEAD_DIM_PAD + 1];
        }
        forward_row_keys(i, g_lo, g_hi, shift, sq, sk, window_left, window_right, cu_q, cu_q_off, seq_ss,
                         &jlo[r], &jhi[r]);
    }

    const long kbase = ko + b * k_sb + hk * k_sh;
    const long vbase = vo + b * v_sb + hk * v_sh;
    const int j_first = g_lo - g_lo % BLOCK_N; /* g_lo rounded down to the grid */
    for (int j0 = j_first; j0 <= g_hi && g_lo <= g_hi; j0 += BLOCK_N) {
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int step = 0; step < STRIDED_STEPS(BLOCK_N * HEAD_DIM_PAD); step++) {
            const int idx = lid + step * WG_SIZE;
            const int n = idx / HEAD_DIM_PAD, d = idx - n * HEAD_DIM_PAD;
            const int j = j0 + n;
            if (n < BLOCK_N) {
                const bool in = j >= g_lo && j <= g_hi && d < head_dim;
#if HAS_MASK /* a dropped key's V may hold anything: it must not reach O, even times 0 */
                const bool vin = in && mask[mo + b * mask_sb + (long)j * mask_ss] > 0.5f;
#else
                const bool vin = in;
#endif
                Kt[d][n] = in ? LOAD(K, kbase + (long)j * k_ss + d) : 0.0f;
                Vs[n][d] = vin ? LOAD(V, vbase + (long)j * v_ss + d) : 0.0f;
            }
        }
#if HAS_MASK
        for (int step = 0; step < STRIDED_STEPS(BLOCK_N); step++) {
            const int n = lid + step * WG_SIZE;
            const int j = j0 + n;
            if (n < BLOCK_N)
                Ms[n] = j >= g_lo && j <= g_hi ? mask[mo + b * mask_sb + (long)j * mask_ss] : 0.0f;
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);

        for (int r = 0; r < ROWS; r++)
            for (int n = 0; n < BLOCK_N; n++)
                s[r][n] = 0.0f;
        for (int d = 0; d < HEAD_DIM_PAD; d++)
            for (int r = 0; r < ROWS; r++) {
                const float qd = q[r][d];
                for (int n = 0; n < BLOCK_N; n++)
                    s[r][n] = fma(qd, Kt[d][n], s[r][n]);
            }

        for (int r = 0; r < ROWS; r++) {
            const int p = i0 + lid + r * WG_SIZE + shift; /* the row's absolute position */
            float tile_max = -INFINITY;
            for (int n = 0; n < BLOCK_N; n++) {
                const int j = j0 + n;
                float x = fcl_logit(s[r][n], softcap, slope, (float)abs(p - j));
                bool visible = j >= jlo[r] && j <= jhi[r];
#if HAS_MASK
                visible = visible && Ms[n] > 0.5f;
#endif
                s[r][n] = visible ? x : -INFINITY;
                tile_max = fmax(tile_max, s[r][n]);
            }
            /* A tile with no visible key leaves the row unchanged (alpha 1, p 0). */
            const float m_new = fmax(m[r], tile_max);
            const float alpha = m_new == -INFINITY ? 1.0f : exp2(m[r] - m_new);
            m[r] = m_new;
            l[r] *= alpha;
            for (int d = 0; d < HEAD_DIM_PAD; d++)
                acc[r][d] *= alpha;
            for (int n = 0; n < BLOCK_N; n++) {
                const float pn = m_new == -INFINITY ? 0.0f : exp2(s[r][n] - m_new);
                l[r] += pn;
                for (int d = 0; d < HEAD_DIM_PAD; d++)
                    acc[r][d] = fma(pn, Vs[n][d], acc[r][d]);
            }
        }
    }

    if (save_state) { /* not the last chunk: keep the rows' state for the next launch */
        for (int r = 0; r < ROWS; r++) {
            const int i = i0 + lid + r * WG_SIZE;
            if (i < sq) {
                __global float *st = state + (state_base + i) * (HEAD_DIM_PAD + 2);
                for (int d = 0; d < HEAD_DIM_PAD; d++)
                    st[d] = acc[r][d];
                st[HEAD_DIM_PAD] = m[r];
                st[HEAD_DIM_PAD + 1] = l[r];
            }
        }
        return;
    }

    /* Epilogue: each row is normalised into local memory, then the block is written by all
     * work-items together. A row that saw no key writes O = 0 and LSE = -inf. */
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < ROWS; r++) {
        const int row = lid + r * WG_SIZE;
        const float inv_l = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        for (int d = 0; d < HEAD_DIM_PAD; d++)
            Os[row][d] = l[r] > 0.0f ? acc[r][d] * inv_l : 0.0f;
        const int i = i0 + row;
        if (write_lse && i < sq)
            LSE[lseo + b * lse_sb + h * lse_sh + (long)i * lse_ss] = fcl_row_lse(m[r], l[r]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = 0; step < STRIDED_STEPS(BLOCK_M * HEAD_DIM_PAD); step++) {
        const int idx = lid + step * WG_SIZE;
        const int row = idx / HEAD_DIM_PAD, d = idx - row * HEAD_DIM_PAD;
        const int i = i0 + row;
        if (row < BLOCK_M && i < sq && d < head_dim)
            STORE(O, oo + b * o_sb + (long)i * o_ss + h * o_sh + d, Os[row][d]);
    }
}
