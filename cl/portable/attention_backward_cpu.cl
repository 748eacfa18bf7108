/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attention backward for CPUs: the two main kernels of attention_backward.cl (same arguments,
 * semantics, determinism; with attention_backward_rows.cl's helpers and delta kernel), shaped for
 * a CPU core's vector unit like attention_forward_cpu.cl: work-groups of one work-item, which
 * keeps LANES = SIMD * RV rows of keys or queries in native float vectors (lane = key or row), so
 * every product is a vertical FMA with one operand broadcast and no sum crosses lanes.
 *
 *  attention_backward_dkdv  a work-item owns LANES keys of one KV head: K and V transposed once
 *                           into kt[d][rv], vt[d][rv]; for each query row of each query head
 *                           of the group that may see them (ascending: deterministic), its q and
 *                           dO rows converted once, then s = q.k and dp = dO.v (2 x D x RV FMAs,
 *                           q and dO broadcast), P = exp(s - LSE) lane-wise (0 where the row does
 *                           not see the key), dS = P (dp - delta) (* dcap with softcap), and
 *                           dV += P dO, dK += dS q (2 x D x RV FMAs).
 *  attention_backward_dq    a work-item owns LANES query rows of one head: Q and dO transposed
 *                           once; for each key the rows may see (ascending), its k and v rows
 *                           converted once, then s and dp (2 x D x RV FMAs), P and dS lane-wise,
 *                           dQ += dS k (D x RV FMAs).
 * No barriers, no local memory, no chunks: the host takes these kernels only on devices without
 * a loop cap (CPUs); the chunk arguments are unused.
 *
 * Specialisation (-D): FCL_DTYPE; HEAD_DIM_PAD (a multiple of 16); SIMD (4, 8 or 16); RV (vectors
 * of keys or rows per work-item); HAS_SOFTCAP, HAS_MASK, HAS_ALIBI; LAYOUT.
 */

#define LANES (SIMD * RV)
#define CPU_LOOP _Pragma("unroll")

/* P and dS of one (row, key) block from the dot products x = q.k and dp = dO.v (lane-wise):
 * scale, soft-capping (its derivative in dcap), ALiBi at distance |pos - j|, then exp(s - lse)
 * where visible (0 elsewhere); dS = P (dp - delta) dcap. */
inline void backward_p_ds(simd_f x, simd_f dp, float scale, float softcap, simd_f slope, simd_f dist, simd_f lse,
                          simd_f dlt, simd_i visible, simd_f *p, simd_f *ds)
{
    simd_f s = x * scale, dcap = (simd_f)(1.0f);
#if HAS_SOFTCAP
    const simd_f t = tanh(s / softcap);
    s = softcap * t;
    dcap = 1.0f - t * t;
#endif
#if HAS_ALIBI
    s -= slope * dist;
#endif
    *p = select((simd_f)(0.0f), exp(s - lse), visible);
    *ds = select((simd_f)(0.0f), *p * (dp - dlt) * dcap, visible); /* a dropped key's V may hold NaN */
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void attention_backward_dkdv(BACKWARD_ARGS)
{
    int key_block, hk, b; /* earlier key blocks are seen by more rows (causal): they start first */
    fcl_group_order(0, &key_block, &hk, &b);
    const int j0 = key_block * LANES;
    const int Hq = get_global_size(1) * group;
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
    const int shift = r.sk - r.sq; /* query i sits at absolute position i + shift */
    const int j_last = min(j0 + LANES, r.sk) - 1;
    int i_lo, i_hi; /* the query rows that may see some key of this block (before masks) */
    keys_rows(j0, j_last, r.sq, shift, window_left, window_right, cu_q, cu_q_off, seq_ss, &i_lo, &i_hi);

    simd_f kt[HEAD_DIM_PAD][RV], vt[HEAD_DIM_PAD][RV], dk[HEAD_DIM_PAD][RV], dv[HEAD_DIM_PAD][RV];
    simd_f jpos[RV];  /* the keys' positions */
    simd_i kept[RV];  /* the keys exist (and the mask keeps them) */
    {
        simd_f row[HEAD_DIM_PAD / SIMD];
        for (int rv = 0; rv < RV; rv++) {
            simd_fu jp;
            simd_iu kp;
            for (int e = 0; e < SIMD; e++) {
                const int j = j0 + rv * SIMD + e;
                const bool own = j < r.sk;
                const long kr = (long)(r.k_first + min(j, max(r.sk - 1, 0)));
                simd_stage_row(row, K, k_off + b * k_sb + kr * k_ss + hk * k_sh, own, head_dim);
                for (int d = 0; d < HEAD_DIM_PAD; d++)
                    ((__private float *)&kt[d][rv])[e] = SIMD_FLOATS(row)[d];
                simd_stage_row(row, V, v_off + b * v_sb + kr * v_ss + hk * v_sh, own, head_dim);
                for (int d = 0; d < HEAD_DIM_PAD; d++)
                    ((__private float *)&vt[d][rv])[e] = SIMD_FLOATS(row)[d];
                bool on = own;
#if HAS_MASK
                on = on && mask[mask_off + b * mask_sb + (long)(r.k_first + j) * mask_ss] > 0.5f;
#endif
                kp.s[e] = on ? -1 : 0;
                jp.s[e] = (float)j;
            }
            kept[rv] = kp.v;
            jpos[rv] = jp.v;
            for (int d = 0; d < HEAD_DIM_PAD; d++)
                dk[d][rv] = dv[d][rv] = (simd_f)(0.0f);
        }
    }

    simd_f qv[HEAD_DIM_PAD / SIMD], dov_v[HEAD_DIM_PAD / SIMD];
    __private const float *const q = SIMD_FLOATS(qv), *const dov = SIMD_FLOATS(dov_v);
    for (int g = 0; g < group && i_lo <= i_hi; g++) {
        const int h = hk * group + g;
#if HAS_ALIBI
        const simd_f slope = (simd_f)(alibi[alibi_off + b * alibi_sb + h * alibi_sh]);
#else
        const simd_f slope = (simd_f)(0.0f);
#endif
        for (int i = i_lo; i <= i_hi; i++) {
            const long row = (long)(r.q_first + i);
            const float lse = LSE[lse_off + b * lse_sb + h * lse_sh + row * lse_ss];
            if (lse == -INFINITY) /* a row that sees no key contributes nothing */
                continue;
            const float dlt = delta[scratch_row(b, h, Hq, i, r.q_first, sq_arg, total_q)];
            simd_stage_row(qv, Q, q_off + b * q_sb + row * q_ss + h * q_sh, true, head_dim);
            simd_stage_row(dov_v, dO, do_off + b * do_sb + row * do_ss + h * do_sh, true, head_dim);
            const float p = (float)(i + shift);
            simd_f x[RV], dp[RV];
            CPU_LOOP
            for (int rv = 0; rv < RV; rv++)
                x[rv] = dp[rv] = (simd_f)(0.0f);
            for (int d = 0; d < head_dim; d++)
                CPU_LOOP
                for (int rv = 0; rv < RV; rv++) {
                    x[rv] = fma((simd_f)(q[d]), kt[d][rv], x[rv]);
                    dp[rv] = fma((simd_f)(dov[d]), vt[d][rv], dp[rv]);
                }
#if LAYOUT == 2
            const float lo_i = (float)packed_lo(cu_q, cu_q_off, seq_ss, i, r.sq);
            const float hi_i = (float)packed_hi(cu_q, cu_q_off, seq_ss, i, r.sq);
#endif
            simd_f pr[RV], ds[RV];
            CPU_LOOP
            for (int rv = 0; rv < RV; rv++) {
                simd_i visible = kept[rv];
                if (window_left >= 0)
                    visible &= jpos[rv] >= p - (float)window_left;
                if (window_right >= 0)
                    visible &= jpos[rv] <= p + (float)window_right;
#if LAYOUT == 2
                visible &= jpos[rv] >= lo_i & jpos[rv] < hi_i;
#endif
                backward_p_ds(x[rv], dp[rv], scale, softcap, slope, fabs(p - jpos[rv]), (simd_f)(lse),
                              (simd_f)(dlt), visible, &pr[rv], &ds[rv]);
            }
            for (int d = 0; d < head_dim; d++)
                CPU_LOOP
                for (int rv = 0; rv < RV; rv++) {
                    dv[d][rv] = fma(pr[rv], (simd_f)(dov[d]), dv[d][rv]);
                    dk[d][rv] = fma(ds[rv], (simd_f)(q[d]), dk[d][rv]);
                }
        }
    }

    for (int rv = 0; rv < RV; rv++)
        for (int e = 0; e < SIMD; e++) {
            const int j = j0 + rv * SIMD + e;
            if (j >= r.sk)
                break;
            const long dkrow = dk_off + b * dk_sb + (long)(r.k_first + j) * dk_ss + hk * dk_sh;
            const long dvrow = dv_off + b * dv_sb + (long)(r.k_first + j) * dv_ss + hk * dv_sh;
            for (int d = 0; d < head_dim; d++) {
                STORE(dK, dkrow + d, ((__private float *)&dk[d][rv])[e] * scale);
                STORE(dV, dvrow + d, ((__private float *)&dv[d][rv])[e]);
            }
        }
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void attention_backward_dq(BACKWARD_ARGS)
{
    int row_block, h, b; /* later row blocks see more keys (causal): they start first */
    fcl_group_order(1, &row_block, &h, &b);
    const int i0 = row_block * LANES, hk = h / group;
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
    const int shift = r.sk - r.sq;
    const int i_last = min(i0 + LANES, r.sq) - 1;
    int j_lo, j_hi; /* the keys that some row of this block may see (before masks) */
    rows_keys(i0, i_last, r.sk, shift, window_left, window_right, cu_q, cu_q_off, seq_ss, &j_lo, &j_hi);

    simd_f qt[HEAD_DIM_PAD][RV], dot[HEAD_DIM_PAD][RV], dq[HEAD_DIM_PAD][RV];
    simd_f pos[RV], lse[RV], dlt[RV];
#if LAYOUT == 2
    simd_f lo[RV], hi[RV]; /* each row's own sequence */
#endif
    {
        simd_f row[HEAD_DIM_PAD / SIMD];
        for (int rv = 0; rv < RV; rv++) {
            simd_fu pu, lu, du;
#if LAYOUT == 2
            simd_fu lou, hiu;
#endif
            for (int e = 0; e < SIMD; e++) {
                const int i = i0 + rv * SIMD + e;
                const bool own = i < r.sq;
                const long qr = (long)(r.q_first + min(i, max(r.sq - 1, 0)));
                simd_stage_row(row, Q, q_off + b * q_sb + qr * q_ss + h * q_sh, own, head_dim);
                for (int d = 0; d < HEAD_DIM_PAD; d++)
                    ((__private float *)&qt[d][rv])[e] = SIMD_FLOATS(row)[d];
                simd_stage_row(row, dO, do_off + b * do_sb + qr * do_ss + h * do_sh, own, head_dim);
                for (int d = 0; d < HEAD_DIM_PAD; d++)
                    ((__private float *)&dot[d][rv])[e] = SIMD_FLOATS(row)[d];
                pu.s[e] = (float)(i + shift);
                lu.s[e] = own ? LSE[lse_off + b * lse_sb + h * lse_sh + qr * lse_ss] : -INFINITY;
                du.s[e] = own ? delta[scratch_row(b, h, get_global_size(1), i, r.q_first, sq_arg, total_q)] : 0.0f;
#if LAYOUT == 2
                lou.s[e] = own ? (float)packed_lo(cu_q, cu_q_off, seq_ss, i, r.sk) : 0.0f;
                hiu.s[e] = own ? (float)packed_hi(cu_q, cu_q_off, seq_ss, i, r.sk) : 0.0f;
#endif
            }
            pos[rv] = pu.v;
            lse[rv] = lu.v;
            dlt[rv] = du.v;
#if LAYOUT == 2
            lo[rv] = lou.v;
            hi[rv] = hiu.v;
#endif
            for (int d = 0; d < HEAD_DIM_PAD; d++)
                dq[d][rv] = (simd_f)(0.0f);
        }
    }
#if HAS_ALIBI
    const simd_f slope = (simd_f)(alibi[alibi_off + b * alibi_sb + h * alibi_sh]);
#else
    const simd_f slope = (simd_f)(0.0f);
#endif
    simd_i live[RV]; /* rows that see some key at all */
    for (int rv = 0; rv < RV; rv++)
        live[rv] = lse[rv] != (simd_f)(-INFINITY);

    simd_f kv[HEAD_DIM_PAD / SIMD], vv[HEAD_DIM_PAD / SIMD];
    __private const float *const k = SIMD_FLOATS(kv), *const v = SIMD_FLOATS(vv);
    const long kbase = k_off + b * k_sb + (long)r.k_first * k_ss + hk * k_sh;
    const long vbase = v_off + b * v_sb + (long)r.k_first * v_ss + hk * v_sh;
    for (int j = j_lo; j <= j_hi; j++) {
#if HAS_MASK
        if (!(mask[mask_off + b * mask_sb + (long)(r.k_first + j) * mask_ss] > 0.5f))
            continue;
#endif
        simd_stage_row(kv, K, kbase + (long)j * k_ss, true, head_dim);
        simd_stage_row(vv, V, vbase + (long)j * v_ss, true, head_dim);
        simd_f x[RV], dp[RV];
        CPU_LOOP
        for (int rv = 0; rv < RV; rv++)
            x[rv] = dp[rv] = (simd_f)(0.0f);
        for (int d = 0; d < head_dim; d++)
            CPU_LOOP
            for (int rv = 0; rv < RV; rv++) {
                x[rv] = fma((simd_f)(k[d]), qt[d][rv], x[rv]);
                dp[rv] = fma((simd_f)(v[d]), dot[d][rv], dp[rv]);
            }
        const float jf = (float)j;
        simd_f ds[RV];
        CPU_LOOP
        for (int rv = 0; rv < RV; rv++) {
            simd_i visible = live[rv];
            if (window_left >= 0)
                visible &= jf >= pos[rv] - (float)window_left;
            if (window_right >= 0)
                visible &= jf <= pos[rv] + (float)window_right;
#if LAYOUT == 2
            visible &= jf >= lo[rv] & jf < hi[rv];
#endif
            simd_f pr;
            backward_p_ds(x[rv], dp[rv], scale, softcap, slope, fabs(pos[rv] - jf), lse[rv], dlt[rv], visible,
                          &pr, &ds[rv]);
        }
        for (int d = 0; d < head_dim; d++)
            CPU_LOOP
            for (int rv = 0; rv < RV; rv++)
                dq[d][rv] = fma(ds[rv], (simd_f)(k[d]), dq[d][rv]);
    }

    for (int rv = 0; rv < RV; rv++)
        for (int e = 0; e < SIMD; e++) {
            const int i = i0 + rv * SIMD + e;
            if (i >= r.sq)
                break;
            const long dqrow = dq_off + b * dq_sb + (long)(r.q_first + i) * dq_ss + h * dq_sh;
            for (int d = 0; d < head_dim; d++)
                STORE(dQ, dqrow + d, ((__private float *)&dq[d][rv])[e] * scale);
        }
}
