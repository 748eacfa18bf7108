/*
 * Attention forward: tiled online softmax (FlashAttention-2 style), portable OpenCL C 1.2.
 *
 * One work-group of BLOCK_M work-items computes BLOCK_M query rows of one (batch, head);
 * each work-item owns one row: its query and output accumulator live in private memory.
 * K and V tiles of BLOCK_N keys are staged in local memory (as float) and shared by the
 * group; only the tiles that the group's window can see are visited. Nothing Sk-long is
 * ever stored.
 *
 * Specialisation (-D): FCL_DTYPE (common.cl), HEAD_DIM_PAD (head dim rounded up; the
 * runtime D <= HEAD_DIM_PAD and the padding is zero-filled), BLOCK_M, BLOCK_N,
 * HAS_SOFTCAP, HAS_MASK, HAS_ALIBI.
 *
 * Scores are kept in log2 units (natural score * log2(e)) so the softmax uses exp2.
 */

#define HAS_LOGIT_MODS (HAS_SOFTCAP || HAS_ALIBI)


__kernel __attribute__((reqd_work_group_size(BLOCK_M, 1, 1)))
void attention_forward(__global const store_t *Q, __global const store_t *K,
                       __global const store_t *V, __global store_t *O, __global float *LSE,
                       __global const float *mask, __global const float *alibi,
                       /* offsets and strides in elements: Q/K/V/O (batch, seq, head), LSE
                        * (batch, head, seq), mask (batch, key), alibi (batch, head) */
                       const long q_off, const long q_sb, const long q_ss, const long q_sh,
                       const long k_off, const long k_sb, const long k_ss, const long k_sh,
                       const long v_off, const long v_sb, const long v_ss, const long v_sh,
                       const long o_off, const long o_sb, const long o_ss, const long o_sh,
                       const long lse_off, const long lse_sb, const long lse_sh, const long lse_ss,
                       const long mask_off, const long mask_sb, const long mask_ss,
                       const long alibi_off, const long alibi_sb, const long alibi_sh,
                       const int sq, const int sk, const int head_dim,
                       const int group,        /* Hq / Hkv */
                       const int window_left,  /* -1 = unbounded */
                       const int window_right, /* -1 = unbounded; causal already folded in */
                       const int write_lse, const float scale, const float softcap)
{
    __local float Ks[BLOCK_N][HEAD_DIM_PAD];
    __local float Vs[BLOCK_N][HEAD_DIM_PAD];
#if HAS_MASK
    __local float Ms[BLOCK_N];
#endif
    const int lid = get_local_id(0);
    const int i0 = get_group_id(0) * BLOCK_M;
    const int h = get_global_id(1);
    const int b = get_global_id(2);
    const int hk = h / group;
    const int i = i0 + lid;
    const bool row_ok = i < sq;
    const int shift = sk - sq; /* query i sits at absolute position i + shift */

    /* This row's visible key range (before the key mask). */
    const int p = i + shift;
    const int jlo = window_left >= 0 ? p - window_left : 0;
    const int jhi = window_right >= 0 ? p + window_right : sk - 1;

    /* The group's key range: the union over its rows. */
    const int i_last = min(i0 + BLOCK_M, sq) - 1;
    const int g_lo = max(0, window_left >= 0 ? i0 + shift - window_left : 0);
    const int g_hi = min(sk - 1, window_right >= 0 ? i_last + shift + window_right : sk - 1);

#if HAS_LOGIT_MODS
    const float qscale = scale;
#else
    const float qscale = scale * FCL_LOG2E;
#endif
    float q[HEAD_DIM_PAD];
    float acc[HEAD_DIM_PAD];
    const long qrow = q_off + b * q_sb + (long)min(i, sq - 1) * q_ss + h * q_sh;
    for (int d = 0; d < HEAD_DIM_PAD; d++) {
        q[d] = d < head_dim ? LOAD(Q, qrow + d) * qscale : 0.0f;
        acc[d] = 0.0f;
    }
#if HAS_ALIBI
    const float slope = alibi[alibi_off + b * alibi_sb + h * alibi_sh] * FCL_LOG2E;
#endif
    float m = -INFINITY; /* running max, log2 units */
    float l = 0.0f;      /* running sum of exp2(s - m) */

    const long kbase = k_off + b * k_sb + hk * k_sh;
    const long vbase = v_off + b * v_sb + hk * v_sh;
    for (int j0 = g_lo; j0 <= g_hi; j0 += BLOCK_N) {
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int idx = lid; idx < BLOCK_N * HEAD_DIM_PAD; idx += BLOCK_M) {
            const int n = idx / HEAD_DIM_PAD, d = idx - n * HEAD_DIM_PAD;
            const int j = j0 + n;
            const bool in = j <= g_hi && d < head_dim;
            Ks[n][d] = in ? LOAD(K, kbase + (long)j * k_ss + d) : 0.0f;
            Vs[n][d] = in ? LOAD(V, vbase + (long)j * v_ss + d) : 0.0f;
        }
#if HAS_MASK
        for (int n = lid; n < BLOCK_N; n += BLOCK_M) {
            const int j = j0 + n;
            Ms[n] = j <= g_hi ? mask[mask_off + b * mask_sb + (long)j * mask_ss] : 0.0f;
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!row_ok || j0 > jhi || j0 + BLOCK_N <= jlo)
            continue; /* nothing of this tile is visible to this row */

        float s[BLOCK_N];
        float tile_max = -INFINITY;
        for (int n = 0; n < BLOCK_N; n++) {
            float dot = 0.0f;
            for (int d = 0; d < HEAD_DIM_PAD; d++)
                dot = fma(q[d], Ks[n][d], dot);
#if HAS_SOFTCAP
            dot = softcap * tanh(dot / softcap);
#endif
#if HAS_LOGIT_MODS
            dot *= FCL_LOG2E;
#endif
            const int j = j0 + n;
#if HAS_ALIBI
            dot -= slope * (float)abs(p - j);
#endif
            bool visible = j >= jlo && j <= jhi && j <= g_hi;
#if HAS_MASK
            visible = visible && Ms[n] > 0.5f;
#endif
            s[n] = visible ? dot : -INFINITY;
            tile_max = fmax(tile_max, s[n]);
        }
        if (tile_max == -INFINITY)
            continue; /* every key of the tile is masked for this row */
        const float m_new = fmax(m, tile_max);
        const float alpha = exp2(m - m_new); /* 0 on the first visible tile (m = -inf) */
        l *= alpha;
        for (int d = 0; d < HEAD_DIM_PAD; d++)
            acc[d] *= alpha;
        for (int n = 0; n < BLOCK_N; n++) {
            const float pn = exp2(s[n] - m_new);
            l += pn;
            for (int d = 0; d < HEAD_DIM_PAD; d++)
                acc[d] = fma(pn, Vs[n][d], acc[d]);
        }
        m = m_new;
    }

    if (!row_ok)
        return;
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f; /* a row that saw no key writes zeros */
    const long orow = o_off + b * o_sb + (long)i * o_ss + h * o_sh;
    for (int d = 0; d < head_dim; d++)
        STORE(O, orow + d, acc[d] * inv_l);
    if (write_lse)
        LSE[lse_off + b * lse_sb + h * lse_sh + (long)i * lse_ss] =
            l > 0.0f ? (m + log2(l)) * FCL_LN2 : -INFINITY;
}
