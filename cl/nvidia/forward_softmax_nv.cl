/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The online softmax of the NVIDIA tensor-core forwards (attention_forward_mma.cl and
 * attention_forward_wgmma.cl), on a warp's score and output accumulators in the mma fragment
 * layout: M_TILES tiles of 16 rows per warp, lane (g, t) = (lane / 4, lane % 4) holding rows g
 * (elements 0, 1) and g + 8 (elements 2, 3) of each m tile, columns 2 t and 2 t + 1 of each n8
 * tile. Scores are in log2 units: raw products times sfac, or with logit mods the transformed
 * scores (sfac 1). Needs mma_nv.cl before it. Specialisation (-D): M_TILES, BLOCK_N (keys per
 * tile), HEAD_DIM_PAD.
 */

#define NT_S (BLOCK_N / 8) /* n8 tiles of a key tile's scores */

/* The score factors: a negative scale is applied as |scale| on negated queries (q_sign, exact),
 * so that the scores' maximum is the maximum of the raw products and p = 2^(s * sfac - m) is one
 * FFMA; qscale is the factor before the logit mods (ALiBi's slope in log2 units). */
#if HAS_LOGIT_MODS
#define NV_SCALE_FACTORS const float qscale = fabs(scale), sfac = 1.0f;
#else
#define NV_SCALE_FACTORS const float qscale = fabs(scale) * FCL_LOG2E, sfac = qscale;
#endif
#define NV_LOGIT_SETUP                                                                                   \
    const uint q_sign = scale < 0.0f ? 0x80008000u : 0u;                                                 \
    NV_SCALE_FACTORS                                                                                     \
    const float slope = HAS_ALIBI ? alibi[alibi_off + b * alibi_sb + h * alibi_sh] * FCL_LOG2E : 0.0f;

/* The tensor-core forwards' prologue: Q, K and V as 16-bit words (Qu, Ku, Vu), this work-item's
 * lane and warp, its fragment row g (and g + 8) and column pair t, the group's rows and keys
 * (FORWARD_GROUP_SETUP) and the score factors (NV_LOGIT_SETUP). */
#define NV_FORWARD_SETUP                                                                                 \
    __global const ushort *Qu = (__global const ushort *)Q;                                              \
    __global const ushort *Ku = (__global const ushort *)K;                                              \
    __global const ushort *Vu = (__global const ushort *)V;                                              \
    const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;                                   \
    const int g = lane >> 2, t = lane & 3;                                                               \
    FORWARD_GROUP_SETUP                                                                                  \
    NV_LOGIT_SETUP

/* This lane's row state before the first key tile: rows row0 + mt * 16 + 8 hr get zero output
 * accumulators acc (NT_O n8 tiles per m tile), an empty softmax (m -inf, l 0) and their visible
 * keys [jlo, jhi] (forward_row_keys); *lo_max and *hi_min bound the keys that every one of them
 * sees. */
MMA_INLINE void init_rows(int row0, int g_lo, int g_hi, int shift, int sq, int sk, int window_left,
                          int window_right, __global const int *cu_q, long cu_q_off, long seq_ss,
                          float (*acc)[NT_O][4], float (*m)[2], float (*l)[2], int (*jlo)[2], int (*jhi)[2],
                          int *lo_max, int *hi_min)
{
    *lo_max = INT_MIN;
    *hi_min = INT_MAX;
    #pragma unroll
    for (int mt = 0; mt < M_TILES; mt++) {
        #pragma unroll
        for (int nt = 0; nt < NT_O; nt++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][nt][e] = 0.0f;
        #pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            m[mt][hr] = -INFINITY;
            l[mt][hr] = 0.0f; /* this lane's share of the row sum; the quad's total at the end */
            forward_row_keys(row0 + mt * 16 + 8 * hr, g_lo, g_hi, shift, sq, sk, window_left, window_right, cu_q,
                             cu_q_off, seq_ss, &jlo[mt][hr], &jhi[mt][hr]);
            *lo_max = max(*lo_max, jlo[mt][hr]);
            *hi_min = min(*hi_min, jhi[mt][hr]);
        }
    }
}

/* The tile's scores s (raw products) turned into the softmax's logits: with logit mods the
 * transformed scores in log2 units (otherwise the raw products, scaled later), and with `check`
 * -inf wherever the row cannot see the key (outside its [jlo, jhi], or dropped by the mask
 * values ms); tmax the lane's maximum per row. The absolute position of the lane's first row
 * is p0 (ALiBi). */
MMA_INLINE void tile_logits(float (*s)[NT_S][4], float (*tmax)[2], const bool check, int j0, int (*jlo)[2],
                            int (*jhi)[2], __local const float *ms, int t, float qscale, float softcap, float slope,
                            int p0)
{
    #pragma unroll
    for (int mt = 0; mt < M_TILES; mt++)
        #pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float x_max = -INFINITY;
            #pragma unroll
            for (int nt = 0; nt < NT_S; nt++)
                #pragma unroll
                for (int c = 0; c < 2; c++) {
                    float x = s[mt][nt][2 * hr + c];
                    const int n = nt * 8 + 2 * t + c, j = j0 + n;
                    if (HAS_LOGIT_MODS) /* otherwise the raw products, scaled later */
                        x = fcl_logit(x * qscale, softcap, slope, (float)abs(p0 + mt * 16 + 8 * hr - j));
                    if (check) {
                        bool visible = j >= jlo[mt][hr] && j <= jhi[mt][hr];
#if HAS_MASK
                        visible = visible && ms[n] > 0.5f;
#endif
                        x = visible ? x : -INFINITY;
                    }
                    s[mt][nt][2 * hr + c] = x;
                    x_max = fmax(x_max, x);
                }
            tmax[mt][hr] = x_max;
        }
}

/* One key tile's online-softmax step on the logits s (tile_logits; tmax their lane maxima): s
 * becomes the probabilities 2^(s sfac - m), the row sums l and references m move on, and alpha
 * is each row's factor for its output accumulators. A row's reference moves only when the tile's
 * maximum exceeds it by more than 8 (log2 units): the probabilities then stay below 2^8, and most
 * tiles rescale nothing. O and LSE use the same reference, so the result is the same. A tile with
 * no visible key leaves the row unchanged (alpha 1, p 0). Returns whether any reference of this
 * lane moved. */
MMA_INLINE int softmax_tile(float (*s)[NT_S][4], float (*tmax)[2], float (*m)[2], float (*l)[2],
                            float (*alpha)[2], float sfac)
{
    int moved = 0;
    #pragma unroll
    for (int mt = 0; mt < M_TILES; mt++)
        #pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const float m_tile = quad_max(tmax[mt][hr]) * sfac;
            const bool move = m_tile > m[mt][hr] + 8.0f;
            const float m_new = move ? m_tile : m[mt][hr];
            alpha[mt][hr] = move ? exp2_ftz(m[mt][hr] - m_new) : 1.0f;
            moved |= move;
            const float neg_m = m_new == -INFINITY ? 0.0f : -m_new;
            m[mt][hr] = m_new;
            float sum = 0.0f;
            #pragma unroll
            for (int nt = 0; nt < NT_S; nt++)
                #pragma unroll
                for (int c = 0; c < 2; c++) {
                    const float pn = exp2_ftz(fma(s[mt][nt][2 * hr + c], sfac, neg_m));
                    s[mt][nt][2 * hr + c] = pn;
                    sum += pn;
                }
            l[mt][hr] = l[mt][hr] * alpha[mt][hr] + sum;
        }
    return moved;
}

/* Each row's output accumulators acc (NT_O n8 tiles per m tile) times its alpha. */
MMA_INLINE void rescale_rows(float (*acc)[NT_O][4], float (*alpha)[2])
{
    #pragma unroll
    for (int mt = 0; mt < M_TILES; mt++)
        #pragma unroll
        for (int nt = 0; nt < NT_O; nt++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][nt][e] *= alpha[mt][e >> 1];
}

/* The A fragment of P V's k step kk (keys 16 kk .. 16 kk + 15) of m tile mt: the probabilities
 * of score tiles 2 kk and 2 kk + 1, rounded to the storage dtype (as in FlashAttention). */
MMA_INLINE void probs_fragment(uint *pa, float (*s)[NT_S][4], int mt, int kk)
{
    pa[0] = pack_pair(s[mt][2 * kk][0], s[mt][2 * kk][1]);
    pa[1] = pack_pair(s[mt][2 * kk][2], s[mt][2 * kk][3]);
    pa[2] = pack_pair(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
    pa[3] = pack_pair(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
}

/* The epilogue: this lane's rows (row0 + mt * 16 + 8 hr) normalised and stored to O (acc[mt]:
 * NT_O n8 tiles), and with write_lse their LSE; a row that saw no key writes O = 0 and LSE =
 * -inf; rows past sq write nothing. */
MMA_INLINE void store_output_rows(float (*acc)[NT_O][4], float (*m)[2], float (*l)[2], int row0, int sq,
                                  int head_dim, int t, __global store_t *O, long orow0, long o_ss, int write_lse,
                                  __global float *LSE, long lse0, long lse_ss)
{
    #pragma unroll
    for (int mt = 0; mt < M_TILES; mt++)
        #pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int i = row0 + mt * 16 + 8 * hr;
            const float lsum = quad_sum(l[mt][hr]);
            if (i >= sq)
                continue;
            const float inv_l = lsum > 0.0f ? 1.0f / lsum : 0.0f;
            const long orow = orow0 + (long)i * o_ss;
            #pragma unroll
            for (int nt = 0; nt < NT_O; nt++) {
                const int d = nt * 8 + 2 * t;
                const float o0 = lsum > 0.0f ? acc[mt][nt][2 * hr] * inv_l : 0.0f;
                const float o1 = lsum > 0.0f ? acc[mt][nt][2 * hr + 1] * inv_l : 0.0f;
                store_pair(O, orow + d, d, head_dim, o0, o1);
            }
            if (write_lse && t == 0)
                LSE[lse0 + (long)i * lse_ss] = fcl_row_lse(m[mt][hr], lsum);
        }
}
