/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decode's three-phase partial kernel (-D DECODE_KEYS = key lanes; with attention_decode.cl's
 * helpers, its decode_mask_len and decode_combine): the same splits, rows, visibility and split
 * states as decode_partial, for GPUs without an asynchronous copy. decode_partial's teams read a
 * K row across the lanes of a team and must meet to sum each dot product before the softmax; that
 * meeting holds every lane's K and V loads in registers across two barriers, so few bytes are in
 * flight per lane. Here each batch of keys goes through three phases, each with the work spread
 * so that no lane waits on another inside it:
 *
 *   K phase  DECODE_KEYS lanes per key (KL), one key per lane group: each lane reads its
 *            HEAD_DIM_PAD / 8 / KL chunks of the key's K row (lanes side by side, so a pair of
 *            lanes fills whole 32-byte sectors) and takes its partial dot products with every
 *            row of the block (the queries sit in local memory); the partials go to local memory.
 *            The lane then reads its V chunks for the P V phase (before the barrier: they arrive
 *            while the others finish). With K_AHEAD the K chunks are read one batch ahead: the
 *            next batch's are requested right after the barrier and arrive during the P step and
 *            P V (more bytes in flight per lane; on the H100 +10% at D 64 F16, -20% at D 128 in
 *            some split plans, so the tiles choose).
 *   P step   one lane per (key, row) pair: the KL partials summed, visibility, soft-capping and
 *            ALiBi applied (once per pair; each lane's rows' views taken at the start of the
 *            split), p = 2^(logit - m) against the row's running max m (in local memory, the
 *            same for every lane) as it stood before the batch. A logit more than RAISE above m
 *            raises the batch's flag.
 *   raise    only when the flag is up (the first batch of a split, and when a row's maximum grew
 *            by more than RAISE): a lane per row finds the row's new maximum from the logits in
 *            local memory; after a barrier every lane rescales its sums and accumulators and the
 *            P step's lanes take their p's again; a barrier. p stays below 2^RAISE, which FP32
 *            sums carry.
 *   P V      decode_partial's teams (TEAM lanes of DIMS dims over a V row, TEAMS teams, KEYS
 *            keys each: team t takes keys t, t + TEAMS, ...): acc += p V from the p's in local
 *            memory, no exponentials.
 *
 * Two barriers per batch (four when the flag is up). At the end of the split the teams'
 * accumulators and sums are added in local memory (one max, so no rescaling) and the split's
 * state goes to `part`, or with DIRECT_OUT the rows' O and LSE are written. The V of a key that no row sees is read as zeros
 * in the mask form (a dropped slot may hold anything).
 *
 * Specialisation (-D), beside attention_decode.cl's: DECODE_KEYS (key lanes: a power of two
 * dividing HEAD_DIM_PAD / 8 and TEAM, with TEAMS * KEYS * DECODE_KEYS = TEAM * TEAMS); K_AHEAD
 * (0 or 1: K read one batch ahead).
 */

#define KL DECODE_KEYS
#define KC (HEAD_DIM_PAD / 8 / KL)                         /* K chunks per lane */
#define BATCH_PAIRS (BATCH * ROWS_WG)                      /* (key, row) pairs of a batch */
#define PAIR_STEPS ((BATCH_PAIRS + WG_SIZE - 1) / WG_SIZE) /* pairs per lane in the P step */
#define RAISE 8.0f                                         /* log2 units */
#if (HEAD_DIM_PAD / 8) % KL || TEAM % KL || BATCH * KL != WG_SIZE
#error "DECODE_KEYS: key lanes dividing HEAD_DIM_PAD / 8 and TEAM, TEAMS * KEYS * DECODE_KEYS == TEAM * TEAMS"
#endif

/* One key's share of P V: l += p, acc += p V for this lane's chunks of the key's V row v (read as
 * zeros in the mask form when no row sees the key). */
inline void add_pv(float8 acc[ROWS_WG][CH], float *l, const float *p, const raw8 *v)
{
    UNROLL
    for (int r = 0; r < ROWS_WG; r++)
        l[r] += p[r];
#if HAS_MASK
    float live = 0.0f; /* some row sees the key: its V is a valid row */
    UNROLL
    for (int r = 0; r < ROWS_WG; r++)
        live = fmax(live, p[r]);
#endif
    UNROLL
    for (int c = 0; c < CH; c++) {
#if HAS_MASK
        const float8 vf = live > 0.0f ? unpack8(v[c]) : (float8)(0.0f);
#else
        const float8 vf = unpack8(v[c]);
#endif
        UNROLL
        for (int r = 0; r < ROWS_WG; r++)
            acc[r][c] = fma((float8)(p[r]), vf, acc[r][c]);
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void decode_partial_keys(DECODE_PARTIAL_ARGS)
{
    DECODE_PARTIAL_UNPACK
    __local float8 q_s[ROWS_WG * HEAD_DIM_PAD / 8]; /* the block's pre-scaled query rows */
    __local float part_s[KL * BATCH_PAIRS];         /* [lane of the key][key][row] partial dot products */
    __local float t_s[BATCH_PAIRS], p_s[BATCH_PAIRS]; /* [key][row] logits and p's */
    __local int raise_s[2];                         /* by batch parity: some logit rose past m + RAISE */
    __local float m_s[ROWS_WG], alpha_s[ROWS_WG];   /* the rows' running maxima (the same for every
                                                     * lane), the rescale factors of a raise */
#if TEAMS > 1
    __local float l_t[TEAMS * ROWS_WG];
    __local float8 out8[ROWS_WG * HEAD_DIM_PAD / 8];
#endif
    const int lid = get_local_id(0), team = lid / TEAM, lane = lid - team * TEAM;
    const int kl = lid % KL, kk = lid / KL; /* K phase: chunk lane kl of key kk of the batch */
    const int n_rows = group * lq;
    int split, hk, r0, b, Hq, p_first, j_lo, j_hi;
    decode_group(ROWS_WG, row_blocks, group, lq, host_len, lens, lens_off, lens_s, l_max, split_keys, window_left,
                 &split, &hk, &r0, &b, &Hq, &p_first, &j_lo, &j_hi);
    const float qscale = decode_qscale(scale);
    for (int i = lid; i < ROWS_WG * HEAD_DIM_PAD / 8; i += WG_SIZE) {
        const int r = i / (HEAD_DIM_PAD / 8), d0 = (i - r * (HEAD_DIM_PAD / 8)) * 8;
        const int row = min(r0 + r, n_rows - 1), h = hk * group + row / lq, t = row % lq;
        q_s[i] = load_q8(Q, q_off + b * q_sb + (long)t * q_ss + h * q_sh + d0, d0, head_dim) * qscale;
    }
    if (lid < 2)
        raise_s[lid] = 0;
    if (lid < ROWS_WG)
        m_s[lid] = -INFINITY;
    /* what the rows of this lane's (key, row) pairs in the P step see: pair lid + s * WG_SIZE is
     * always of row (lid + s * WG_SIZE) % ROWS_WG */
    int v_lo[PAIR_STEPS], v_hi[PAIR_STEPS], v_pos[PAIR_STEPS];
    float v_slope2[PAIR_STEPS];
    UNROLL
    for (int s = 0; s < PAIR_STEPS; s++)
        decode_row_view(r0 + (lid + s * WG_SIZE) % ROWS_WG, j_hi, n_rows, lq, hk, group, p_first, b, window_left, alibi,
                        alibi_off, alibi_sb, alibi_sh, &v_lo[s], &v_hi[s], &v_pos[s], &v_slope2[s]);
    float l[ROWS_WG];
    float8 acc[ROWS_WG][CH];
    UNROLL
    for (int r = 0; r < ROWS_WG; r++) {
        l[r] = 0.0f;
        UNROLL
        for (int c = 0; c < CH; c++)
            acc[r][c] = (float8)(0.0f);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* dst = the start of row j (clamped to j_hi) of head hk of sequence b in the K (kv k) or V (kv v)
     * cache: through the block table when PAGED, else from the sequence's row 0 */
#if PAGED
#define KEY_ROW(dst, src, kv, j)                                                                                 \
    dst = src + cache_row(b, min(j, j_hi), hk, kv##_off, kv##_s0, kv##_s1, kv##_sh, table, bt_off, bt_sb, bt_ss,   \
                          page_size, num_pages)
#else
    __global const store_t *const k_row0 = Kc + KV_ROW0(k);
    __global const store_t *const v_row0 = Vc + KV_ROW0(v);
#define KEY_ROW(dst, src, kv, j) dst = kv##_row0 + (long)min(j, j_hi) * kv##_s1
#endif

    /* this lane's K chunks of key jb + kk: with K_AHEAD loaded one batch ahead (the next batch's
     * are requested after the first barrier, so they arrive while this batch's softmax and P V
     * run), else at the start of the K phase */
    raw8 kr[KC];
#define LOAD_K(jb)                                                                                                 \
    do {                                                                                                           \
        __global const store_t *kp;                                                                                \
        KEY_ROW(kp, Kc, k, (jb) + kk);                                                                             \
        UNROLL                                                                                                     \
        for (int i = 0; i < KC; i++) {                                                                             \
            const int d0 = (i * KL + kl) * 8;                                                                      \
            kr[i] = load_raw8(kp, d0, d0, head_dim);                                                               \
        }                                                                                                          \
    } while (0)
#if K_AHEAD
    if (j_lo <= j_hi) /* not an empty split */
        LOAD_K(j_lo);
#endif

    int par = 0;
    for (int jb = j_lo; jb <= j_hi; jb += BATCH, par ^= 1) {
        { /* K phase */
#if !K_AHEAD
            LOAD_K(jb);
#endif
            float x[ROWS_WG];
            UNROLL
            for (int r = 0; r < ROWS_WG; r++)
                x[r] = 0.0f;
            UNROLL
            for (int i = 0; i < KC; i++) {
                const float8 kf = unpack8(kr[i]);
                UNROLL
                for (int r = 0; r < ROWS_WG; r++)
                    x[r] = dot8_acc(q_s[r * (HEAD_DIM_PAD / 8) + i * KL + kl], kf, x[r]);
            }
            UNROLL
            for (int r = 0; r < ROWS_WG; r++)
                part_s[(kl * BATCH + kk) * ROWS_WG + r] = x[r];
        }
        raw8 vr[KEYS][CH]; /* this lane's V chunks for the P V phase */
        UNROLL
        for (int k = 0; k < KEYS; k++) {
            __global const store_t *vp;
            KEY_ROW(vp, Vc, v, jb + team + k * TEAMS);
            UNROLL
            for (int c = 0; c < CH; c++) {
                const int d0 = (lane + c * TEAM) * 8;
                vr[k][c] = load_raw8(vp, d0, d0, head_dim);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if K_AHEAD
        if (jb + BATCH <= j_hi)
            LOAD_K(jb + BATCH);
#endif

        /* P step; the flag of the previous batch (read by every lane before the barrier above)
         * is cleared for the next */
        if (lid == 0)
            raise_s[par ^ 1] = 0;
        UNROLL
        for (int s = 0; s < PAIR_STEPS; s++) {
            const int pair = lid + s * WG_SIZE;
            if (BATCH_PAIRS % WG_SIZE == 0 || pair < BATCH_PAIRS) {
                const int key = pair / ROWS_WG;
                float x = 0.0f;
                UNROLL
                for (int u = 0; u < KL; u++)
                    x += part_s[u * BATCH_PAIRS + pair];
                x = decode_logit_in_view(x, jb + key, v_lo[s], v_hi[s], v_pos[s], v_slope2[s], softcap, b, l_max, mask,
                                         mask_off, mask_sb, mask_ss);
                const float mr = m_s[pair - key * ROWS_WG];
                t_s[pair] = x;
                p_s[pair] = x == -INFINITY ? 0.0f : exp2(x - mr);
                if (x > mr + RAISE)
                    raise_s[par] = 1;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* the flag up (the same in every lane): a lane per row finds its new maximum from the
         * logits; then every lane rescales its sums and accumulators, and the P step's lanes take
         * their p's again */
        if (raise_s[par]) {
            if (lid < ROWS_WG) {
                const float m_old = m_s[lid];
                float mx = m_old;
                for (int k = 0; k < BATCH; k++)
                    mx = fmax(mx, t_s[k * ROWS_WG + lid]);
                alpha_s[lid] = mx == -INFINITY ? 1.0f : exp2(m_old - mx);
                m_s[lid] = mx;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            UNROLL
            for (int r = 0; r < ROWS_WG; r++) {
                const float a = alpha_s[r];
                l[r] *= a;
                UNROLL
                for (int c = 0; c < CH; c++)
                    acc[r][c] *= a;
            }
            UNROLL
            for (int s = 0; s < PAIR_STEPS; s++) {
                const int pair = lid + s * WG_SIZE;
                if (BATCH_PAIRS % WG_SIZE == 0 || pair < BATCH_PAIRS) {
                    const float t = t_s[pair];
                    p_s[pair] = t == -INFINITY ? 0.0f : exp2(t - m_s[pair % ROWS_WG]);
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }

        /* P V */
        UNROLL
        for (int k = 0; k < KEYS; k++) {
            const int key = team + k * TEAMS;
            float p[ROWS_WG];
            UNROLL
            for (int r = 0; r < ROWS_WG; r++)
                p[r] = p_s[key * ROWS_WG + r];
            add_pv(acc, l, p, vr[k]);
        }
    }

    /* the split's state (every team's m is the same): the teams' sums and accumulators added */
#if TEAMS > 1
    if (lane == 0)
        UNROLL
        for (int r = 0; r < ROWS_WG; r++)
            l_t[team * ROWS_WG + r] = l[r];
    decode_merge_teams(out8, acc, team, lane);
    if (team != TEAMS - 1)
        return;
#else
    __local const float8 *out8 = NULL;
#endif
    UNROLL
    for (int r = 0; r < ROWS_WG; r++) {
        const int row = r0 + r;
        if (row >= n_rows)
            break;
#if TEAMS > 1
        float lr = 0.0f;
        for (int t = 0; t < TEAMS; t++)
            lr += l_t[t * ROWS_WG + r];
#else
        const float lr = l[r];
#endif
        decode_store_row(ROW_OUT_ARGS, row, r, hk, group, lq, b, lane, head_dim, acc[r], out8, m_s[r], lr,
                         r % TEAM == lane);
    }
}
