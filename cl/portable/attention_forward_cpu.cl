/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attention forward for CPUs: the same online softmax, arguments, layouts and key-tile grid as
 * attention_forward.cl, shaped for a CPU core's vector unit instead of a GPU's work-groups.
 *
 * One work-item (work-groups of one) owns ROWS = SIMD * RV query rows of one (batch, head) and
 * keeps them in SIMD-wide float vectors, lane l of row vector rv holding row rv * SIMD + l, so that
 * every step is vertical SIMD across rows and nothing ever needs a horizontal reduction:
 *
 *   Q        transposed once into qt[d][rv] (pre-scaled);
 *   K, V     packed once per call by attention_pack_kv (below) into float rows of `state`,
 *            [K | V] per key, contiguous per (batch or sequence, KV head): zeros past head_dim
 *            and past the keys, and V of keys the mask drops, which may hold anything, as zeros.
 *            The cache rows of K and V lie H x D elements apart (a power of two: the rows of a
 *            head fell into a few cache sets and missed); packed they stream by in order.
 *            KV_DIRECT (F32, no mask, dense or packed QKV, head_dim == HEAD_DIM_PAD; the host
 *            takes it where few rows read each KV head, so the copy would not pay back) reads
 *            them in place instead, the keys past the last clamped to it (their p is 0);
 *   S = QK^T st[rv][n] += kt[n][d] (broadcast) * qt[d][rv]: RV x BN independent accumulators;
 *   softmax  per lane: the row maxima are element-wise maxima over the tile's keys, the row
 *            sums element-wise sums, the exponentials simd_exp2 (common.cl); a row's
 *            reference maximum moves only when a tile's scores exceed it by more than
 *            RESCALE_SLACK (the probabilities stay below 2^RESCALE_SLACK, and the rescales
 *            become rare);
 *   O += PV  acc[d][rv] += vt[n][d] (broadcast) * p[n][rv], DB head dims at a time (DB x RV
 *            accumulators in registers while the tile's keys stream by); the rescale by the
 *            rows' factor is skipped when no row's maximum moved.
 * Each packed K and V element is read once per work-item, broadcast, and feeds RV vector FMAs. The
 * rows' outputs leave transposed back at the end (simd_transpose, in registers). No barriers, no
 * local memory, no key chunks: the host takes this kernel only on devices without a loop cap
 * (CPUs).
 *
 * Specialisation (-D): FCL_DTYPE (common.cl); HEAD_DIM_PAD (a multiple of 16); SIMD (4, 8 or 16:
 * the device's native float vector width); RV (row vectors per work-item); BN (keys per tile:
 * BLOCK_N of the tile grid); DB (head dims per PV step, dividing 16); HAS_SOFTCAP, HAS_MASK,
 * HAS_ALIBI; LAYOUT (attention_forward_rows.cl); KV_DIRECT (0 or 1, above). BLOCK_M and BLOCK_N
 * are defined here for attention_forward_rows.cl. Scores are kept in log2 units so the softmax
 * uses exp2.
 */

#define ROWS (SIMD * RV)
#define BLOCK_M ROWS
/* How far (log2 units) a tile's scores may rise above a row's reference maximum before it moves. */
#define RESCALE_SLACK 8.0f
#define BLOCK_N BN

/* The packed K/V rows (`state`): [K | V] floats per key; row j of KV head hk of batch b (dense,
 * packed) or of the sequence starting at key row k_first (varlen): the rows of each KV head (and
 * batch) are followed by BN zero rows, which the last key tile may read. */
#define PACKED_LD (2 * HEAD_DIM_PAD)
#if LAYOUT == 1
#define PACKED_ROW(b, hk, Hkv, j) ((long)(hk) * (total_k + BN) + k_first + (j))
#else
#define PACKED_ROW(b, hk, Hkv, j) (((long)(b) * (Hkv) + (hk)) * (sk_arg + BN) + (j))
#endif

/* The small loops over row vectors, keys and dims of a step: unrolled, so that their vectors stay
 * in registers. */
#define UNROLLED _Pragma("unroll")

#if HEAD_DIM_PAD % 16 || 16 % DB
#error "HEAD_DIM_PAD a multiple of 16; DB dividing 16"
#endif

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void attention_forward(FORWARD_KERNEL_ARGS)
{
    FORWARD_GROUP_SETUP /* the rows i0 .. i0 + ROWS - 1 and the keys [g_lo, g_hi] they may see */
    FORWARD_LOGIT_SETUP

    simd_f qt[HEAD_DIM_PAD][RV], acc[HEAD_DIM_PAD][RV];
    simd_f m[RV], l[RV];
    simd_i lo[RV], hi[RV];
    simd_f pos[RV]; /* the rows' absolute positions (ALiBi) */
    for (int rv = 0; rv < RV; rv++) {
        simd_iu lo_u, hi_u;
        simd_fu pos_u;
        for (int e = 0; e < SIMD; e++) {
            const int i = i0 + rv * SIMD + e;
            forward_row_keys(i, g_lo, g_hi, shift, sq, sk, window_left, window_right, cu_q, cu_q_off, seq_ss,
                             &lo_u.s[e], &hi_u.s[e]);
            pos_u.s[e] = (float)(i + shift);
        }
        lo[rv] = lo_u.v;
        hi[rv] = hi_u.v;
        pos[rv] = pos_u.v;
        m[rv] = (simd_f)(-INFINITY);
        l[rv] = (simd_f)(0.0f);
        for (int d = 0; d < HEAD_DIM_PAD; d++)
            acc[d][rv] = (simd_f)(0.0f);
    }
    /* Q transposed into lanes (simd_rows_to_lanes), pre-scaled */
    for (int rv = 0; rv < RV; rv++) {
        long rows[SIMD];
        bool in[SIMD];
        for (int e = 0; e < SIMD; e++) {
            rows[e] = qo + b * q_sb + h * q_sh + (long)clamp(i0 + rv * SIMD + e, 0, max(sq - 1, 0)) * q_ss;
            in[e] = sq > 0;
        }
        simd_rows_to_lanes(&qt[0][rv], RV, Q, rows, in, head_dim, qscale);
    }
    int lo_max = INT_MIN, hi_min = INT_MAX; /* the keys every row sees */
    for (int rv = 0; rv < RV; rv++) {
        simd_iu a, c;
        a.v = lo[rv];
        c.v = hi[rv];
        for (int e = 0; e < SIMD; e++) {
            lo_max = max(lo_max, a.s[e]);
            hi_min = min(hi_min, c.s[e]);
        }
    }

    const int dim_steps = (head_dim + DB - 1) / DB * DB; /* PV dims: packed V is zero past head_dim */
#if KV_DIRECT
    __global const float *const kbase = K + ko + b * k_sb + hk * k_sh, *const vbase = V + vo + b * v_sb + hk * v_sh;
#else
    __global const float *const kv = state + PACKED_ROW(b, hk, get_global_size(1) / group, 0) * PACKED_LD;
#endif
    const int j_first = FIRST_TILE(g_lo, g_hi, BN);
    for (int j0 = j_first; j0 <= g_hi && g_lo <= g_hi; j0 += BN) {
#if KV_DIRECT
        long krow[BN], vrow[BN];
        UNROLLED
        for (int n = 0; n < BN; n++) {
            const long jj = clamp(j0 + n, 0, max(sk - 1, 0));
            krow[n] = jj * k_ss;
            vrow[n] = jj * v_ss;
        }
#define K_AT(n, d) kbase[krow[n] + (d)]
#define V_AT(n, d) vbase[vrow[n] + (d)]
#else
        __global const float *const kt = kv + (long)j0 * PACKED_LD, *const vt = kt + HEAD_DIM_PAD;
#define K_AT(n, d) kt[(n) * PACKED_LD + (d)]
#define V_AT(n, d) vt[(n) * PACKED_LD + (d)]
#endif
        bool kept_all = j0 >= g_lo && j0 + BN - 1 <= g_hi;
#if HAS_MASK
        for (int n = 0; n < BN && kept_all; n++)
            kept_all = mask[mo + b * mask_sb + (long)(j0 + n) * mask_ss] > 0.5f;
#endif

        simd_f st[RV][BN];
        UNROLLED
        for (int rv = 0; rv < RV; rv++)
            UNROLLED
            for (int n = 0; n < BN; n++)
                st[rv][n] = (simd_f)(0.0f);
        for (int d = 0; d < head_dim; d++)
            UNROLLED
            for (int rv = 0; rv < RV; rv++) {
                const simd_f q = qt[d][rv];
                UNROLLED
                for (int n = 0; n < BN; n++)
                    st[rv][n] = fma((simd_f)(K_AT(n, d)), q, st[rv][n]);
            }

        /* logits, visibility, the rows' new maxima and the probabilities */
        const bool whole = kept_all && j0 >= lo_max && j0 + BN - 1 <= hi_min;
        simd_f p[BN][RV];
        UNROLLED
        for (int rv = 0; rv < RV; rv++) {
            simd_f tmax = (simd_f)(-INFINITY);
            UNROLLED
            for (int n = 0; n < BN; n++) {
                const int j = j0 + n;
                simd_f x = simd_logit(st[rv][n], softcap, (simd_f)(slope), fabs(pos[rv] - (float)j));
                if (!whole) {
#if HAS_MASK /* keys outside [g_lo, g_hi] are not visible anyway (and may lie past the mask) */
                    const bool kept = j >= g_lo && j <= g_hi && mask[mo + b * mask_sb + (long)j * mask_ss] > 0.5f;
#else
                    const bool kept = true;
#endif
                    const simd_i visible = (lo[rv] <= (simd_i)(j)) & ((simd_i)(j) <= hi[rv]) & (simd_i)(kept ? -1 : 0);
                    x = select((simd_f)(-INFINITY), x, visible);
                }
                st[rv][n] = x;
                tmax = fmax(tmax, x);
            }
            /* a row that saw no key yet keeps m = -inf, alpha 1 and p 0; a row's reference
             * maximum moves only when the tile's exceeds it by more than RESCALE_SLACK, so that
             * the accumulators are rarely rescaled (probabilities stay below 2^RESCALE_SLACK) */
            const simd_f m_new = select(m[rv], fmax(m[rv], tmax), tmax > m[rv] + RESCALE_SLACK);
            const simd_i none = isinf(m_new) & (m_new < 0.0f);
            const simd_f alpha = select(simd_exp2(m[rv] - m_new), (simd_f)(1.0f), none);
            simd_f sum = (simd_f)(0.0f);
            UNROLLED
            for (int n = 0; n < BN; n++) {
                p[n][rv] = select(simd_exp2(st[rv][n] - m_new), (simd_f)(0.0f), none);
                sum += p[n][rv];
            }
            m[rv] = m_new;
            l[rv] = l[rv] * alpha + sum;
            if (any(alpha != (simd_f)(1.0f)))
                for (int d = 0; d < dim_steps; d++)
                    acc[d][rv] *= alpha;
        }

        /* O += P V, DB dims at a time */
        for (int d0 = 0; d0 < dim_steps; d0 += DB) {
            simd_f a[DB][RV];
            UNROLLED
            for (int dd = 0; dd < DB; dd++)
                UNROLLED
                for (int rv = 0; rv < RV; rv++)
                    a[dd][rv] = acc[d0 + dd][rv];
            UNROLLED
            for (int n = 0; n < BN; n++)
                UNROLLED
                for (int dd = 0; dd < DB; dd++) {
                    const simd_f v = (simd_f)(V_AT(n, d0 + dd));
                    UNROLLED
                    for (int rv = 0; rv < RV; rv++)
                        a[dd][rv] = fma(v, p[n][rv], a[dd][rv]);
                }
            UNROLLED
            for (int dd = 0; dd < DB; dd++)
                UNROLLED
                for (int rv = 0; rv < RV; rv++)
                    acc[d0 + dd][rv] = a[dd][rv];
        }
    }

    /* Epilogue: rows normalised and stored (a row that saw no key: O = 0, LSE = -inf), lanes back
     * into rows (simd_lanes_to_rows). */
    for (int rv = 0; rv < RV; rv++) {
        long rows[SIMD];
        for (int e = 0; e < SIMD; e++)
            rows[e] = oo + b * o_sb + h * o_sh + (long)(i0 + rv * SIMD + e) * o_ss;
        simd_lanes_to_rows(O, rows, clamp(sq - (i0 + rv * SIMD), 0, SIMD), &acc[0][rv], RV,
                           select((simd_f)(0.0f), (simd_f)(1.0f) / l[rv], l[rv] > 0.0f), head_dim);
        simd_fu mu, lu;
        mu.v = m[rv];
        lu.v = l[rv];
        for (int e = 0; e < SIMD && write_lse; e++) {
            const int i = i0 + rv * SIMD + e;
            if (i < sq)
                LSE[lseo + b * lse_sb + h * lse_sh + (long)i * lse_ss] = fcl_row_lse(mu.s[e], lu.s[e]);
        }
    }
}

/* Packs K and V (see PACKED_ROW) for attention_forward: work-item (j, hk, b) writes key row j of
 * KV head hk of batch or sequence b as floats, [K | V], zeros past head_dim; past the sequence's
 * keys (and, for varlen, past every sequence: the BN rows at the end) zero rows; V as zeros where
 * the key mask drops the key. Grid: (sk_arg + BN rounded up, Hkv, batches or sequences). */
__kernel void attention_pack_kv(FORWARD_KERNEL_ARGS)
{
    const int j = get_global_id(0), hk = get_global_id(1), b = get_global_id(2), h = 0;
    (void)h; /* FORWARD_SEQUENCE_SETUP's state_base */
    FORWARD_SEQUENCE_SETUP
#if LAYOUT == 1 /* a sequence's own rows; the zero rows after the last key row of all */
    if (j >= sk + BN || (j >= sk && k_first + j < total_k))
        return;
#else
    if (j >= sk + BN)
        return;
#endif
    const bool in = j < sk;
#if HAS_MASK
    const bool kept = in && mask[mo + b * mask_sb + (long)j * mask_ss] > 0.5f;
#else
    const bool kept = in;
#endif
    simd_f row[HEAD_DIM_PAD / SIMD];
    __global float *const dst = state + PACKED_ROW(b, hk, get_global_size(1), j) * PACKED_LD;
    simd_stage_row(row, K, ko + b * k_sb + hk * k_sh + (long)j * k_ss, in, head_dim);
    for (int c = 0; c < HEAD_DIM_PAD / SIMD; c++)
        simd_store(row[c], dst + c * SIMD);
    simd_stage_row(row, V, vo + b * v_sb + hk * v_sh + (long)j * v_ss, kept, head_dim);
    for (int c = 0; c < HEAD_DIM_PAD / SIMD; c++)
        simd_store(row[c], dst + HEAD_DIM_PAD + c * SIMD);
}
