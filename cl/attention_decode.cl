/*
 * Decode attention over a KV cache (flash-decoding), portable OpenCL C 1.2. Three kernels:
 *
 *  decode_mask_len  with a validity mask: len[b] = 1 + the last valid key of batch b (0 when
 *                   none), so the mask form runs like the device-length form.
 *  decode_partial   one work-group per (key split, KV head and row block, batch). The rows of
 *                   a KV head are its Hq / Hkv query heads times the Lq query positions (GQA
 *                   native: each K/V tile is loaded once into local memory for all of them).
 *                   The split's keys are visited in tiles of BLOCK_N keys with an online
 *                   softmax; the split's unnormalised state (acc[D], m, l per row) goes to
 *                   `part`. Splits outside the visible keys (past the length, before the
 *                   window) exit without reading K or V.
 *  decode_combine   one work-item per (row, d): merges the splits' states into O and LSE.
 *
 * Query t of Lq (batch b) sits at position p = len_b - Lq + t and sees keys j with
 * max(0, p - window_left) <= j <= p (and mask[b, j] > 0.5 in the mask form); len_b comes from
 * the host, from lens[b] (clamped to [0, L_max]) or from the mask. A row with no visible key
 * writes O = 0 and LSE = -inf.
 *
 * Specialisation (-D): FCL_DTYPE; HEAD_DIM_PAD; BLOCK_N; ROWS_WG (rows per work-group);
 * WG_SIZE; VEC (4: K/V tiles loaded 4 elements at a time, needs head_dim % 4 == 0; else 1); LEN_DEVICE (len_b from `lens`, else the host length); HAS_MASK; PAGED (K/V are
 * pages [num_pages, page_size, Hkv, D] addressed through the block table; else [B, L_max,
 * Hkv, D]); HAS_SOFTCAP; HAS_ALIBI. Scores are kept in log2 units.
 */

#define STEPS(n) (((n) + WG_SIZE - 1) / WG_SIZE)
#define HAS_LOGIT_MODS (HAS_SOFTCAP || HAS_ALIBI)

/* Element index of row j (head hk) of sequence b's K or V: paged or contiguous. */
inline long cache_row(int b, int j, int hk, long off, long s0, long s1, long sh,
                      __global const int *table, long bt_off, long bt_sb, long bt_ss, int page_size,
                      int num_pages)
{
#if PAGED
    const int page = clamp(table[bt_off + b * bt_sb + (long)(j / page_size) * bt_ss], 0, num_pages - 1);
    return off + page * s0 + (long)(j % page_size) * s1 + hk * sh;
#else
    return off + b * s0 + (long)j * s1 + hk * sh;
#endif
}

/* The logit (log2 units) of block row r_abs (of n_rows) and key j from the raw dot product, or
 * -inf when the key is not visible to that row. */
inline float decode_logit(float x, int row, int j, int j_hi, int n_rows, int lq, int hk, int group, int p_first,
                          int b, int window_left, float qscale, float softcap, int l_max,
                          __global const float *mask, long mask_off, long mask_sb, long mask_ss,
                          __global const float *alibi, long alibi_off, long alibi_sb, long alibi_sh)
{
    const int rr = min(row, n_rows - 1), p = p_first + rr % lq;
    x *= qscale;
#if HAS_SOFTCAP
    x = softcap * tanh(x / softcap);
#endif
#if HAS_LOGIT_MODS
    x *= FCL_LOG2E;
#endif
#if HAS_ALIBI
    x -= alibi[alibi_off + b * alibi_sb + (hk * group + rr / lq) * alibi_sh] * FCL_LOG2E * (float)(p - j);
#endif
    bool visible = row < n_rows && j <= j_hi && j <= p && (window_left < 0 || j >= p - window_left);
#if HAS_MASK
    visible = visible && mask[mask_off + b * mask_sb + (long)min(j, l_max - 1) * mask_ss] > 0.5f;
#endif
    return visible ? x : -INFINITY;
}

__kernel void decode_mask_len(__global const float *mask, __global int *lens, const int l_max,
                              const long mask_off, const long mask_sb, const long mask_ss)
{
    __local int last[WG_SIZE];
    const int lid = get_local_id(0), b = get_group_id(1);
    int mine = -1;
    for (int j = lid; j < l_max; j += WG_SIZE)
        if (mask[mask_off + b * mask_sb + (long)j * mask_ss] > 0.5f)
            mine = j;
    last[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        int best = -1;
        for (int i = 0; i < WG_SIZE; i++)
            best = max(best, last[i]);
        lens[b] = best + 1;
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void decode_partial(__global const store_t *Q, __global const store_t *Kc, __global const store_t *Vc,
                    __global const int *lens, __global const float *mask, __global const int *table,
                    __global const float *alibi, __global float *part,
                    const int host_len, const int lq, const int group, const int head_dim, const int l_max,
                    const int split_keys, const int n_splits, const int window_left, const int page_size,
                    const int num_pages, const int row_blocks, const float scale, const float softcap,
                    const long q_off, const long q_sb, const long q_ss, const long q_sh,
                    const long k_off, const long k_s0, const long k_s1, const long k_sh,
                    const long v_off, const long v_s0, const long v_s1, const long v_sh,
                    const long mask_off, const long mask_sb, const long mask_ss,
                    const long bt_off, const long bt_sb, const long bt_ss,
                    const long alibi_off, const long alibi_sb, const long alibi_sh,
                    const long lens_off, const long lens_s)
{
    __local float Kt[HEAD_DIM_PAD][BLOCK_N + 1]; /* transposed: the score loop runs along keys */
    __local float Vs[BLOCK_N][HEAD_DIM_PAD];
    __local float Qs[ROWS_WG][HEAD_DIM_PAD];
    __local float Ss[ROWS_WG][BLOCK_N + 1];
    __local float m_s[ROWS_WG], l_s[ROWS_WG], alpha_s[ROWS_WG];
    const int lid = get_local_id(0), split = get_group_id(0);
    const int hk = get_group_id(1) / row_blocks, r0 = (get_group_id(1) % row_blocks) * ROWS_WG;
    const int b = get_group_id(2), Hq = get_num_groups(1) / row_blocks * group;
    const int n_rows = group * lq; /* rows of this KV head: (query head, position) pairs */
#if LEN_DEVICE
    const int len = clamp(lens[lens_off + b * lens_s], 0, l_max);
#else
    const int len = host_len;
#endif
    /* The keys some row of the block can see, within this split. */
    const int p_first = len - lq; /* position of query 0 */
    int j_lo = max(split * split_keys, 0), j_hi = min((split + 1) * split_keys, len) - 1;
    if (window_left >= 0)
        j_lo = max(j_lo, p_first - window_left);

    for (int step = 0; step < STEPS(ROWS_WG * HEAD_DIM_PAD); step++) {
        const int e = lid + step * WG_SIZE, r = e / HEAD_DIM_PAD, d = e - r * HEAD_DIM_PAD;
        if (r < ROWS_WG) {
            const int row = min(r0 + r, n_rows - 1), h = hk * group + row / lq, t = row % lq;
            Qs[r][d] = d < head_dim ? LOAD(Q, q_off + b * q_sb + (long)t * q_ss + h * q_sh + d) : 0.0f;
        }
    }
    for (int r = lid; r < ROWS_WG; r += WG_SIZE) {
        m_s[r] = -INFINITY;
        l_s[r] = 0.0f;
    }
#if HAS_LOGIT_MODS
    const float qscale = scale;
#else
    const float qscale = scale * FCL_LOG2E;
#endif
    float acc[STEPS(ROWS_WG * HEAD_DIM_PAD)];
    for (int k = 0; k < STEPS(ROWS_WG * HEAD_DIM_PAD); k++)
        acc[k] = 0.0f;

    for (int jt = j_lo; jt <= j_hi; jt += BLOCK_N) {
        barrier(CLK_LOCAL_MEM_FENCE);
        /* VEC consecutive elements per work-item and step (VEC 4: head_dim % 4 == 0) */
        for (int step = 0; step < STEPS(BLOCK_N * HEAD_DIM_PAD / VEC); step++) {
            const int e = (lid + step * WG_SIZE) * VEC, n = e / HEAD_DIM_PAD, d = e - n * HEAD_DIM_PAD, j = jt + n;
            if (n < BLOCK_N) {
                const bool in = j <= j_hi && d < head_dim;
#if HAS_MASK /* dropped slots may hold anything (freed rows): their V must not reach O, even * 0 */
                const bool vin = in && mask[mask_off + b * mask_sb + (long)min(j, l_max - 1) * mask_ss] > 0.5f;
#else
                const bool vin = in;
#endif
                const long kr = cache_row(b, min(j, j_hi), hk, k_off, k_s0, k_s1, k_sh, table, bt_off, bt_sb,
                                          bt_ss, page_size, num_pages);
                const long vr = cache_row(b, min(j, j_hi), hk, v_off, v_s0, v_s1, v_sh, table, bt_off, bt_sb,
                                          bt_ss, page_size, num_pages);
#if VEC == 4
                const float4 kx = in ? LOAD4(Kc, kr + d) : (float4)(0.0f);
                const float4 vx = vin ? LOAD4(Vc, vr + d) : (float4)(0.0f);
                Kt[d][n] = kx.x;
                Kt[d + 1][n] = kx.y;
                Kt[d + 2][n] = kx.z;
                Kt[d + 3][n] = kx.w;
                vstore4(vx, 0, &Vs[n][d]);
#else
                Kt[d][n] = in ? LOAD(Kc, kr + d) : 0.0f;
                Vs[n][d] = vin ? LOAD(Vc, vr + d) : 0.0f;
#endif
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if WG_SIZE == 1
        /* one work-item: the loops run along keys with independent accumulators (vectorisable) */
        float sc[ROWS_WG][BLOCK_N];
        for (int r = 0; r < ROWS_WG; r++)
            for (int n = 0; n < BLOCK_N; n++)
                sc[r][n] = 0.0f;
        for (int d = 0; d < HEAD_DIM_PAD; d++)
            for (int r = 0; r < ROWS_WG; r++) {
                const float qd = Qs[r][d];
                for (int n = 0; n < BLOCK_N; n++)
                    sc[r][n] = fma(qd, Kt[d][n], sc[r][n]);
            }
        for (int r = 0; r < ROWS_WG; r++)
            for (int n = 0; n < BLOCK_N; n++)
                Ss[r][n] = decode_logit(sc[r][n], r0 + r, jt + n, j_hi, n_rows, lq, hk, group, p_first, b,
                                        window_left, qscale, softcap, l_max, mask, mask_off, mask_sb, mask_ss,
                                        alibi, alibi_off, alibi_sb, alibi_sh);
#else
        /* scores of (row, key) pairs, spread over the work-items */
        for (int step = 0; step < STEPS(ROWS_WG * BLOCK_N); step++) {
            const int e = lid + step * WG_SIZE, r = e / BLOCK_N, n = e - r * BLOCK_N;
            if (r < ROWS_WG) {
                float x = 0.0f;
                for (int d = 0; d < HEAD_DIM_PAD; d++)
                    x = fma(Qs[r][d], Kt[d][n], x);
                Ss[r][n] = decode_logit(x, r0 + r, jt + n, j_hi, n_rows, lq, hk, group, p_first, b, window_left,
                                        qscale, softcap, l_max, mask, mask_off, mask_sb, mask_ss, alibi, alibi_off,
                                        alibi_sb, alibi_sh);
            }
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = lid; r < ROWS_WG; r += WG_SIZE) { /* the online softmax of row r */
            float tile_max = -INFINITY;
            for (int n = 0; n < BLOCK_N; n++)
                tile_max = fmax(tile_max, Ss[r][n]);
            const float m_new = fmax(m_s[r], tile_max);
            const float alpha = m_new == -INFINITY ? 1.0f : exp2(m_s[r] - m_new);
            float l = l_s[r] * alpha;
            for (int n = 0; n < BLOCK_N; n++) {
                const float p = m_new == -INFINITY ? 0.0f : exp2(Ss[r][n] - m_new);
                Ss[r][n] = p;
                l += p;
            }
            m_s[r] = m_new;
            l_s[r] = l;
            alpha_s[r] = alpha;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if WG_SIZE == 1
        for (int r = 0; r < ROWS_WG; r++) { /* acc[r * HEAD_DIM_PAD + d]; inner loops along d */
            const float al = alpha_s[r];
            for (int d = 0; d < HEAD_DIM_PAD; d++)
                acc[r * HEAD_DIM_PAD + d] *= al;
            for (int n = 0; n < BLOCK_N; n++) {
                const float pr = Ss[r][n];
                for (int d = 0; d < HEAD_DIM_PAD; d++)
                    acc[r * HEAD_DIM_PAD + d] = fma(pr, Vs[n][d], acc[r * HEAD_DIM_PAD + d]);
            }
        }
#else
        for (int k = 0; k < STEPS(ROWS_WG * HEAD_DIM_PAD); k++) {
            const int e = lid + k * WG_SIZE, r = e / HEAD_DIM_PAD, d = e - r * HEAD_DIM_PAD;
            if (r < ROWS_WG) {
                float a = acc[k] * alpha_s[r];
                for (int n = 0; n < BLOCK_N; n++)
                    a = fma(Ss[r][n], Vs[n][d], a);
                acc[k] = a;
            }
        }
#endif
    }

    /* The split's state: part[((b * Hq + h) * lq + t) * n_splits + split] = acc[HDP], m, l. */
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < STEPS(ROWS_WG * HEAD_DIM_PAD); k++) {
        const int e = lid + k * WG_SIZE, r = e / HEAD_DIM_PAD, d = e - r * HEAD_DIM_PAD, row = r0 + r;
        if (r < ROWS_WG && row < n_rows) {
            const long slot = (((long)b * Hq + hk * group + row / lq) * lq + row % lq) * n_splits + split;
            part[slot * (HEAD_DIM_PAD + 2) + d] = acc[k];
            if (d == 0) {
                part[slot * (HEAD_DIM_PAD + 2) + HEAD_DIM_PAD] = m_s[r];
                part[slot * (HEAD_DIM_PAD + 2) + HEAD_DIM_PAD + 1] = l_s[r];
            }
        }
    }
}

__kernel void decode_combine(__global const float *part, __global store_t *O, __global float *LSE,
                             const int lq, const int Hq, const int head_dim, const int n_splits,
                             const int write_lse,
                             const long o_off, const long o_sb, const long o_ss, const long o_sh,
                             const long lse_off, const long lse_sb, const long lse_sh, const long lse_ss)
{
    const int d = get_global_id(0), row = get_global_id(1); /* row = (b * Hq + h) * lq + t */
    const int b = row / (Hq * lq), h = (row / lq) % Hq, t = row % lq;
    if (d >= head_dim)
        return;
    __global const float *st = part + (long)row * n_splits * (HEAD_DIM_PAD + 2);
    float m = -INFINITY;
    for (int s = 0; s < n_splits; s++)
        if (st[s * (HEAD_DIM_PAD + 2) + HEAD_DIM_PAD + 1] > 0.0f)
            m = fmax(m, st[s * (HEAD_DIM_PAD + 2) + HEAD_DIM_PAD]);
    float l = 0.0f, o = 0.0f;
    for (int s = 0; s < n_splits; s++) {
        __global const float *x = st + s * (HEAD_DIM_PAD + 2);
        if (x[HEAD_DIM_PAD + 1] > 0.0f) { /* empty splits hold no state */
            const float w = exp2(x[HEAD_DIM_PAD] - m);
            l = fma(x[HEAD_DIM_PAD + 1], w, l);
            o = fma(x[d], w, o);
        }
    }
    STORE(O, o_off + b * o_sb + (long)t * o_ss + h * o_sh + d, l > 0.0f ? o / l : 0.0f);
    if (write_lse && d == 0)
        LSE[lse_off + b * lse_sb + h * lse_sh + (long)t * lse_ss] = l > 0.0f ? (m + log2(l)) * FCL_LN2 : -INFINITY;
}
