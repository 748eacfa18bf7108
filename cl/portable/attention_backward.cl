/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attention backward (FlashAttention-2 style, recompute-based, deterministic), portable
 * OpenCL C 1.2. With attention_backward_rows.cl (the arguments, and the preprocessing kernel
 * attention_backward_delta: delta[h, i] = rowsum(dO * O)), the program's two main kernels:
 *
 *  attention_backward_dkdv   one work-item per key row (BLOCK_N per group): keeps k, v and
 *                            the dK, dV accumulators in private memory and walks the query
 *                            heads of its KV head's group and the query tiles (BLOCK_M rows,
 *                            staged in local memory with dO, LSE and delta) that can see it.
 *  attention_backward_dq     one work-item per query row (BLOCK_M per group): keeps q, dO and
 *                            the dQ accumulator in private memory and walks the key tiles
 *                            (BLOCK_N keys of K and V in local memory) that it can see.
 * Every accumulator sums its terms in one fixed order (query heads, then query rows, or keys,
 * ascending), so results are bit-identical across runs and across chunkings; no atomics.
 *
 * Per (i, j): s = scale * q.k; with softcap c: t = tanh(s / c), s = c * t; s -= slope * |p - j|;
 * P = exp(s - LSE_i) for visible keys (0 otherwise, and for rows with LSE = -inf);
 * dV_j += P dO_i;  dS = P (dO_i . v_j - delta_i) (* (1 - t^2) with softcap);
 * dQ_i += scale dS k_j;  dK_j += scale dS q_i.
 *
 * Specialisation (-D): FCL_DTYPE (common.cl); HEAD_DIM_PAD (>= head_dim; padding is zero);
 * BLOCK_M, BLOCK_N; HAS_SOFTCAP, HAS_MASK, HAS_ALIBI; LAYOUT 0 dense, 1 varlen, 2 packed as in
 * attention_forward.cl (grid z = batch / sequence / 1).
 *
 * Chunks (devices that cap the loop iterations of a work-item): dkdv runs the items
 * [item_lo, item_hi] of the linear index g * n_qtiles + query tile, dq the keys
 * [item_lo, item_hi] (whole key tiles of the grid from key 0); a launch resumes from and/or saves its accumulators (float, in
 * `state`), and only the last one writes the gradients.
 */

__kernel __attribute__((reqd_work_group_size(BLOCK_N, 1, 1)))
void attention_backward_dkdv(BACKWARD_ARGS)
{
    __local float Qs[BLOCK_M][HEAD_DIM_PAD];
    __local float dOs[BLOCK_M][HEAD_DIM_PAD];
    __local float lse_s[BLOCK_M], delta_s[BLOCK_M];
#if LAYOUT == 2
    __local int lo_s[BLOCK_M], hi_s[BLOCK_M];
#endif
    const int lid = get_local_id(0);
    int key_block, hk, b; /* earlier key blocks are seen by more rows (causal): they start first */
    fcl_group_order(0, &key_block, &hk, &b);
    const int j0 = key_block * BLOCK_N, j = j0 + lid;
    const int Hq = get_global_size(1) * group;
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
    const int shift = r.sk - r.sq; /* query i sits at absolute position i + shift */
    const int j_last = min(j0 + BLOCK_N, r.sk) - 1;

    int i_lo, i_hi; /* the query rows that may see some key of this block (before masks) */
    keys_rows(j0, j_last, r.sq, shift, window_left, window_right, cu_q, cu_q_off, seq_ss, &i_lo, &i_hi);

    const bool own = j < r.sk;
    bool key_on = own;
#if HAS_MASK
    key_on = key_on && mask[mask_off + b * mask_sb + (long)(r.k_first + j) * mask_ss] > 0.5f;
#endif
    float k[HEAD_DIM_PAD], v[HEAD_DIM_PAD], dk[HEAD_DIM_PAD], dv[HEAD_DIM_PAD];
    const long krow = k_off + b * k_sb + (long)(r.k_first + min(j, max(r.sk - 1, 0))) * k_ss + hk * k_sh;
    const long vrow = v_off + b * v_sb + (long)(r.k_first + min(j, max(r.sk - 1, 0))) * v_ss + hk * v_sh;
    const long srow = scratch_row(b, hk, get_global_size(1), j, r.k_first, sk_arg, total_k);
    for (int d = 0; d < HEAD_DIM_PAD; d++) {
        k[d] = own && d < head_dim ? LOAD(K, krow + d) : 0.0f;
        v[d] = own && d < head_dim ? LOAD(V, vrow + d) : 0.0f;
        dk[d] = load_state && own ? state[srow * 2 * HEAD_DIM_PAD + d] : 0.0f;
        dv[d] = load_state && own ? state[srow * 2 * HEAD_DIM_PAD + HEAD_DIM_PAD + d] : 0.0f;
    }

    /* item t = g * n_qtiles + query tile; tiles sit on a grid of BLOCK_M rows from row 0 */
    const int t_lo = max(item_lo, 0), t_hi = min(item_hi, group * n_qtiles - 1);
    for (int g = t_lo / n_qtiles; g <= t_hi / n_qtiles && i_lo <= i_hi; g++) {
        const int h = hk * group + g;
        const float slope = HEAD_SLOPE(h);
        const int qt_first = max(g == t_lo / n_qtiles ? t_lo % n_qtiles : 0, i_lo / BLOCK_M);
        const int qt_last = min(g == t_hi / n_qtiles ? t_hi % n_qtiles : n_qtiles - 1, i_hi / BLOCK_M);
        for (int qt = qt_first; qt <= qt_last; qt++) {
            const int i0 = qt * BLOCK_M;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int idx = lid; idx < BLOCK_M * HEAD_DIM_PAD; idx += BLOCK_N) {
                const int m = idx / HEAD_DIM_PAD, d = idx - m * HEAD_DIM_PAD, i = i0 + m;
                const bool in = i < r.sq && d < head_dim;
                const long row = (long)(r.q_first + min(i, r.sq - 1));
                Qs[m][d] = in ? LOAD(Q, q_off + b * q_sb + row * q_ss + h * q_sh + d) : 0.0f;
                dOs[m][d] = in ? LOAD(dO, do_off + b * do_sb + row * do_ss + h * do_sh + d) : 0.0f;
            }
            for (int m = lid; m < BLOCK_M; m += BLOCK_N) {
                const int i = i0 + m;
                const bool in = i < r.sq;
                const long row = (long)(r.q_first + min(i, r.sq - 1));
                lse_s[m] = in ? LSE[lse_off + b * lse_sb + h * lse_sh + row * lse_ss] : -INFINITY;
                delta_s[m] = in ? delta[scratch_row(b, h, Hq, min(i, r.sq - 1), r.q_first, sq_arg, total_q)] : 0.0f;
#if LAYOUT == 2
                lo_s[m] = in ? packed_lo(cu_q, cu_q_off, seq_ss, i, r.sq) : 0;
                hi_s[m] = in ? packed_hi(cu_q, cu_q_off, seq_ss, i, r.sq) : 0;
#endif
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int m = 0; m < BLOCK_M && key_on; m++) {
                const int p = i0 + m + shift;
                bool visible = lse_s[m] != -INFINITY && (window_left < 0 || j >= sub_sat(p, window_left)) &&
                               (window_right < 0 || j <= add_sat(p, window_right));
#if LAYOUT == 2
                visible = visible && j >= lo_s[m] && j < hi_s[m];
#endif
                if (!visible)
                    continue;
                float dot = 0.0f;
                for (int d = 0; d < HEAD_DIM_PAD; d++)
                    dot = fma(Qs[m][d], k[d], dot);
                float dcap;
                const float s = backward_score(dot, scale, softcap, slope, p, j, &dcap);
                const float pr = exp(s - lse_s[m]);
                float dp = 0.0f;
                for (int d = 0; d < HEAD_DIM_PAD; d++) {
                    dv[d] = fma(pr, dOs[m][d], dv[d]);
                    dp = fma(dOs[m][d], v[d], dp);
                }
                const float ds = pr * (dp - delta_s[m]) * dcap;
                for (int d = 0; d < HEAD_DIM_PAD; d++)
                    dk[d] = fma(ds, Qs[m][d], dk[d]);
            }
        }
    }

    if (!own)
        return;
    if (save_state) {
        for (int d = 0; d < HEAD_DIM_PAD; d++) {
            state[srow * 2 * HEAD_DIM_PAD + d] = dk[d];
            state[srow * 2 * HEAD_DIM_PAD + HEAD_DIM_PAD + d] = dv[d];
        }
        return;
    }
    const long dkrow = dk_off + b * dk_sb + (long)(r.k_first + j) * dk_ss + hk * dk_sh;
    const long dvrow = dv_off + b * dv_sb + (long)(r.k_first + j) * dv_ss + hk * dv_sh;
    for (int d = 0; d < head_dim; d++) {
        STORE(dK, dkrow + d, dk[d] * scale);
        STORE(dV, dvrow + d, dv[d]);
    }
}

__kernel __attribute__((reqd_work_group_size(BLOCK_M, 1, 1)))
void attention_backward_dq(BACKWARD_ARGS)
{
    __local float Ks[BLOCK_N][HEAD_DIM_PAD];
    __local float Vs[BLOCK_N][HEAD_DIM_PAD];
#if HAS_MASK
    __local float Ms[BLOCK_N];
#endif
    const int lid = get_local_id(0);
    int row_block, h, b; /* later row blocks see more keys (causal): they start first */
    fcl_group_order(1, &row_block, &h, &b);
    const int i0 = row_block * BLOCK_M, i = i0 + lid, hk = h / group;
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
    const int shift = r.sk - r.sq, p = i + shift;
    const int i_last = min(i0 + BLOCK_M, r.sq) - 1;
    const bool own = i < r.sq;

    /* The keys that some row of this block may see, within this launch's chunk. */
    int j_lo, j_hi;
    rows_keys(i0, i_last, r.sk, shift, window_left, window_right, cu_q, cu_q_off, seq_ss, &j_lo, &j_hi);
    j_lo = max(j_lo, item_lo);
    j_hi = min(j_hi, item_hi);
#if LAYOUT == 2
    const int my_lo = own ? packed_lo(cu_q, cu_q_off, seq_ss, i, r.sk) : 0;
    const int my_hi = own ? packed_hi(cu_q, cu_q_off, seq_ss, i, r.sk) : 0;
#endif

    const long row = (long)(r.q_first + min(i, max(r.sq - 1, 0)));
    const long qrow = q_off + b * q_sb + row * q_ss + h * q_sh;
    const long dorow = do_off + b * do_sb + row * do_ss + h * do_sh;
    const long srow = scratch_row(b, h, get_global_size(1), i, r.q_first, sq_arg, total_q);
    float q[HEAD_DIM_PAD], dov[HEAD_DIM_PAD], dq[HEAD_DIM_PAD];
    for (int d = 0; d < HEAD_DIM_PAD; d++) {
        q[d] = own && d < head_dim ? LOAD(Q, qrow + d) : 0.0f;
        dov[d] = own && d < head_dim ? LOAD(dO, dorow + d) : 0.0f;
        dq[d] = load_state && own ? state[srow * HEAD_DIM_PAD + d] : 0.0f;
    }
    const float lse = own ? LSE[lse_off + b * lse_sb + h * lse_sh + row * lse_ss] : -INFINITY;
    const float dlt = own ? delta[srow] : 0.0f;
    const float slope = HEAD_SLOPE(h);
    const long kbase = k_off + b * k_sb + (long)r.k_first * k_ss + hk * k_sh;
    const long vbase = v_off + b * v_sb + (long)r.k_first * v_ss + hk * v_sh;

    /* key tiles on a grid of BLOCK_N keys from key 0, so a chunk of whole tiles is whole tiles */
    for (int jt = j_lo - j_lo % BLOCK_N; jt <= j_hi; jt += BLOCK_N) {
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int idx = lid; idx < BLOCK_N * HEAD_DIM_PAD; idx += BLOCK_M) {
            const int n = idx / HEAD_DIM_PAD, d = idx - n * HEAD_DIM_PAD, jj = jt + n;
            const bool in = jj >= j_lo && jj <= j_hi && d < head_dim;
            Ks[n][d] = in ? LOAD(K, kbase + (long)jj * k_ss + d) : 0.0f;
            Vs[n][d] = in ? LOAD(V, vbase + (long)jj * v_ss + d) : 0.0f;
        }
#if HAS_MASK
        for (int n = lid; n < BLOCK_N; n += BLOCK_M)
            Ms[n] = jt + n >= j_lo && jt + n <= j_hi ? mask[mask_off + b * mask_sb + (long)(r.k_first + jt + n) * mask_ss] : 0.0f;
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int n = 0; n < BLOCK_N && lse != -INFINITY; n++) {
            const int jj = jt + n;
            bool visible = jj >= j_lo && jj <= j_hi && (window_left < 0 || jj >= sub_sat(p, window_left)) &&
                           (window_right < 0 || jj <= add_sat(p, window_right));
#if HAS_MASK
            visible = visible && Ms[n] > 0.5f;
#endif
#if LAYOUT == 2
            visible = visible && jj >= my_lo && jj < my_hi;
#endif
            if (!visible)
                continue;
            float dot = 0.0f, dp = 0.0f;
            for (int d = 0; d < HEAD_DIM_PAD; d++) {
                dot = fma(q[d], Ks[n][d], dot);
                dp = fma(dov[d], Vs[n][d], dp);
            }
            float dcap;
            const float s = backward_score(dot, scale, softcap, slope, p, jj, &dcap);
            const float ds = exp(s - lse) * (dp - dlt) * dcap;
            for (int d = 0; d < HEAD_DIM_PAD; d++)
                dq[d] = fma(ds, Ks[n][d], dq[d]);
        }
    }

    if (!own)
        return;
    if (save_state) {
        for (int d = 0; d < HEAD_DIM_PAD; d++)
            state[srow * HEAD_DIM_PAD + d] = dq[d];
        return;
    }
    const long dqrow = dq_off + b * dq_sb + row * dq_ss + h * dq_sh;
    for (int d = 0; d < head_dim; d++)
        STORE(dQ, dqrow + d, dq[d] * scale);
}
