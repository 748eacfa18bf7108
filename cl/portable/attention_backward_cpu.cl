/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attention backward for CPUs: the two main kernels of attention_backward.cl (same arguments,
 * semantics, determinism; with attention_backward_rows.cl's helpers and delta kernel), shaped for
 * a CPU core's vector unit like attention_forward_cpu.cl: work-groups of one work-item, which
 * keeps LANES = SIMD * RV rows of keys or queries in native float vectors (lane = key or row), so
 * every product is a vertical FMA with one operand broadcast and no sum crosses lanes.
 *
 *  attention_backward_dkdv  a work-item owns LANES keys of one KV head: K and V transposed once
 *                           into kt[d][rv], vt[d][rv]; for each STEP query rows of each query
 *                           head of the group that may see them (ascending: deterministic),
 *                           their q and dO rows converted once, then s = q.k and dp = dO.v
 *                           (2 x D x RV FMAs a row, q and dO broadcast), P = exp(s - LSE)
 *                           lane-wise (0 where the row does not see the key), dS = P (dp -
 *                           delta) (* dcap with softcap), and dV += P dO, dK += dS q (2 x D x RV
 *                           FMAs a row; each accumulator loaded and stored once per STEP rows).
 *  attention_backward_dq    a work-item owns LANES query rows of one head: Q and dO transposed
 *                           once; for each STEP keys the rows may see (ascending), their k and v
 *                           rows converted once, then s and dp (2 x D x RV FMAs a key), P and dS
 *                           lane-wise, dQ += dS k (D x RV FMAs a key).
 * In the packed form a work-item's LANES keys or rows are those of a block that starts at its
 * sequence's first row or a multiple of LANES after it (as the varlen form cuts sequences), so
 * that no lane waits on another sequence's rows or keys (block_start below).
 * No barriers, no local memory, no loop-cap chunks: the host takes these kernels only on devices
 * without a loop cap (CPUs).
 *
 * With DS_STORED the dQ kernel does not recompute s and dp (two of its three products): the
 * dK/dV kernel stores dS of every (row, key) pair it visits as FP32 at scores_index_keys
 * (attention_backward_rows.cl; key-major, so that the dQ kernel reads a key's rows as one vector),
 * and the dQ kernel reads it back where the row sees the key. As in the blocked GPU kernels, a
 * launch pair covers a key range of whole dK/dV blocks [item_lo, item_hi], and the dQ
 * accumulators pass between pairs through `state` (load_state, save_state). dS is the value the
 * dQ kernel would have computed, added in the same order: the gradients are bit-identical to the
 * recomputing form.
 *
 * Specialisation (-D): FCL_DTYPE; HEAD_DIM_PAD (a multiple of 16); SIMD (4, 8 or 16); RV (vectors
 * of keys or rows per work-item); DS_STORED (0 or 1, above); HAS_SOFTCAP, HAS_MASK, HAS_ALIBI;
 * LAYOUT.
 */

#define LANES (SIMD * RV)
#define CPU_LOOP _Pragma("unroll")
/* Query rows (dK/dV) or keys (dQ) taken together in one step: each K/V (Q/dO) vector and each
 * accumulator is loaded once per STEP rows or keys, not once per row or key (the accumulators
 * do not fit in registers; this keeps the loads and stores below the FMAs). */
#define STEP 4
/* The dK/dV kernel's Q and dO rows prefetched this many rows ahead (FCL_PREFETCH): PoCL's dK/dV
 * kernel 1.13x, Intel's 1.08x faster on the D 32 encoder packing; the same for the dQ kernel's K
 * and V rows made PoCL's dQ kernel 1.2x slower (docs/perf/history.md v0.38.0). */
#define ROWS_AHEAD 8

/* A work-item's blocks of keys (dK/dV) or query rows (dQ). Dense and varlen: one, the LANES from
 * its first, x0 = item * LANES. Packed: each sequence is cut as the varlen form cuts it, into
 * blocks of LANES from its first row, so no block spans two sequences and no lane waits on
 * another sequence's rows or keys; the work-item runs the blocks whose first row lies in
 * [x0, x0 + LANES). Row x's block starts at block_start(x) (below), never before `first` (a
 * launch's first key); the blocks partition the rows whatever the bounds. */
#if LAYOUT == 2
#define BLOCK_CANDIDATES LANES
#define BLOCK_STARTS (2 * LANES)
/* The first row of row x's block: its sequence's first row plus a multiple of LANES (x's own
 * when the bounds put its sequence after it), at least `first`. */
inline int block_start(__global const int *bounds, long off, long ss, int x, int L, int first)
{
    const int lo = min(packed_lo(bounds, off, ss, x, L), x);
    return max(lo + (x - lo) / LANES * LANES, first);
}
#else
#define BLOCK_CANDIDATES 1
#define BLOCK_STARTS 1
#endif

/* The block from s among the work-item's rows from x0 (up to x_last; starts[k]: block_start of
 * row x0 + k, packed only): member[e] says whether row s + e is in it; returns its last row, or
 * -1 where it has none (s starts no block). */
inline int block_members(int s, int x0, int x_last, __private const int *starts, __private bool *member)
{
    int last = -1;
    for (int e = 0; e < LANES; e++) {
        const int x = s + e;
#if LAYOUT == 2
        member[e] = x <= x_last && starts[x - x0] == s;
#else
        member[e] = x <= x_last;
#endif
        last = member[e] ? x : last;
    }
    return last;
}

/* starts[k] = block_start(x0 + k) for the rows a work-item's blocks may hold (packed only), and
 * opens[c]: some block starts at x0 + c. */
inline void block_starts(__global const int *bounds, long off, long ss, int x0, int x_last, int L, int first,
                         __private int *starts, __private bool *opens)
{
#if LAYOUT == 2
    for (int c = 0; c < BLOCK_CANDIDATES; c++)
        opens[c] = false;
    for (int k = 0; k < BLOCK_STARTS && x0 + k <= x_last; k++) {
        starts[k] = block_start(bounds, off, ss, x0 + k, L, first);
        const int c = starts[k] - x0;
        if (c >= 0 && c < BLOCK_CANDIDATES)
            opens[c] = true;
    }
#else
    opens[0] = true;
#endif
}

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

/* x[t][rv] = a_t . at[.][rv] and dp[t][rv] = b_t . bt[.][rv] for the STEP staged rows a_t, b_t
 * (broadcast, dim by dim) against the transposed at, bt (lane = key or row): s and dp of STEP
 * rows (keys) with the work-item's LANES keys (rows), 2 x head_dim x RV FMAs a step row. */
inline void step_dots(__private const simd_f (*a)[HEAD_DIM_PAD / SIMD], __private const simd_f (*b)[HEAD_DIM_PAD / SIMD],
                      __private const simd_f (*at)[RV], __private const simd_f (*bt)[RV], int head_dim,
                      __private simd_f (*x)[RV], __private simd_f (*dp)[RV])
{
    CPU_LOOP
    for (int t = 0; t < STEP; t++)
        CPU_LOOP
        for (int rv = 0; rv < RV; rv++)
            x[t][rv] = dp[t][rv] = (simd_f)(0.0f);
    for (int d = 0; d < head_dim; d++)
        CPU_LOOP
        for (int rv = 0; rv < RV; rv++) {
            const simd_f ad = at[d][rv], bd = bt[d][rv];
            CPU_LOOP
            for (int t = 0; t < STEP; t++) {
                x[t][rv] = fma((simd_f)(SIMD_FLOATS(a[t])[d]), ad, x[t][rv]);
                dp[t][rv] = fma((simd_f)(SIMD_FLOATS(b[t])[d]), bd, dp[t][rv]);
            }
        }
}

/* base narrowed to the keys at positions j that a row at position p sees through the window
 * (and, packed, inside the row's sequence [lo, hi)). */
inline simd_i step_visible(simd_i base, simd_f j, simd_f p, simd_f lo, simd_f hi, int window_left, int window_right)
{
    if (window_left >= 0)
        base &= j >= p - (float)window_left;
    if (window_right >= 0)
        base &= j <= p + (float)window_right;
#if LAYOUT == 2
    base &= j >= lo & j < hi;
#endif
    return base;
}

/* The dK/dV kernel's dS of STEP rows from i (rows i .. i + rows_last) and its block's keys from j0
 * (up to j_last, where member) into `scores`: per key, its rows side by side. */
inline void store_scores(__global float *scores, int b, int h, int Hq, int i, int rows_last, int j0, int j_last,
                         __private const bool *member, int lo, int hi, int sq_arg, __private const simd_f (*ds)[RV])
{
    for (int rv = 0; rv < RV; rv++)
        for (int e = 0; e < SIMD; e++) {
            const int j = j0 + rv * SIMD + e;
            if (j > j_last)
                return;
            if (!member[rv * SIMD + e]) /* another block's key */
                continue;
            __global float *const row = scores + scores_index_keys(b, h, Hq, i, j, lo, hi, sq_arg);
            CPU_LOOP
            for (int t = 0; t < STEP; t++)
                if (t <= rows_last)
                    row[t] = ((__private const float *)&ds[t][rv])[e];
        }
}

/* The dQ kernel's dS of key j for its LANES rows from i0 (vector rv: rows i0 + rv * SIMD ..),
 * zeros past the sequence's rows. */
inline void load_scores(__global const float *scores, int b, int h, int Hq, int i0, int j, int sq, int lo, int hi,
                        int sq_arg, __private simd_f *ds)
{
    __global const float *const rows = scores + scores_index_keys(b, h, Hq, i0, j, lo, hi, sq_arg);
    for (int rv = 0; rv < RV; rv++) {
        if (i0 + (rv + 1) * SIMD <= sq) {
            ds[rv] = SIMD_VLOAD(0, rows + rv * SIMD);
            continue;
        }
        simd_fu u;
        for (int e = 0; e < SIMD; e++)
            u.s[e] = i0 + rv * SIMD + e < sq ? rows[rv * SIMD + e] : 0.0f;
        ds[rv] = u.v;
    }
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void attention_backward_dkdv(BACKWARD_ARGS)
{
    int key_block, hk, b; /* earlier key blocks are seen by more rows (causal): they start first */
    fcl_group_order(0, &key_block, &hk, &b);
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
#if DS_STORED /* the launch's keys: its first key block, first and last key */
    key_block += item_lo / LANES;
    const int first = item_lo, x_last = min(item_hi, r.sk - 1);
#else
    const int first = 0, x_last = r.sk - 1;
#endif
    const int x0 = key_block * LANES;
    const int Hq = get_global_size(1) * group;
    const int shift = r.sk - r.sq; /* query i sits at absolute position i + shift */
    int starts[BLOCK_STARTS];
    bool opens[BLOCK_CANDIDATES];
    block_starts(cu_q, cu_q_off, seq_ss, x0, x_last, r.sk, first, starts, opens);
    simd_f kt[HEAD_DIM_PAD][RV], vt[HEAD_DIM_PAD][RV], dk[HEAD_DIM_PAD][RV], dv[HEAD_DIM_PAD][RV];
    simd_f qv[STEP][HEAD_DIM_PAD / SIMD], dov_v[STEP][HEAD_DIM_PAD / SIMD];
    bool member[LANES];
    for (int j0 = x0; j0 < x0 + BLOCK_CANDIDATES; j0++) {
        const int j_last = opens[j0 - x0] ? block_members(j0, x0, x_last, starts, member) : -1;
        if (j_last < 0)
            continue;
        int i_lo, i_hi; /* the query rows that may see some key of this block (before masks) */
        keys_rows(j0, j_last, r.sq, shift, window_left, window_right, cu_q, cu_q_off, seq_ss, &i_lo, &i_hi);

        simd_f jpos[RV];  /* the keys' positions */
        simd_i kept[RV];  /* the keys are the block's (and the mask keeps them) */
        {
            simd_f row[HEAD_DIM_PAD / SIMD];
            for (int rv = 0; rv < RV; rv++) {
                simd_fu jp;
                simd_iu kp;
                for (int e = 0; e < SIMD; e++) {
                    const int j = j0 + rv * SIMD + e;
                    const bool own = member[rv * SIMD + e];
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
        for (int g = 0; g < group && i_lo <= i_hi; g++) {
            const int h = hk * group + g;
            const simd_f slope = (simd_f)(HEAD_SLOPE(h));
            for (int i = i_lo; i <= i_hi; i += STEP) {
                /* STEP query rows at a time: each K, V, dK and dV vector loaded once for all of them.
                 * A row past i_hi, or one that sees no key (LSE -inf), is staged as zeros and sees
                 * nothing, so it adds exactly 0 (its Q and dO may hold anything). */
                float lse[STEP], dlt[STEP], p[STEP];
                bool live[STEP];
                float lo_i[STEP], hi_i[STEP]; /* packed: the row's own sequence (unused otherwise) */
                CPU_LOOP
                for (int t = 0; t < STEP; t++) {
                    const int ii = min(i + t, i_hi);
                    const long row = (long)(r.q_first + ii);
                    if (i + t + ROWS_AHEAD <= i_hi) {
                        fcl_prefetch_row(Q, q_off + b * q_sb + (row + ROWS_AHEAD) * q_ss + h * q_sh, head_dim);
                        fcl_prefetch_row(dO, do_off + b * do_sb + (row + ROWS_AHEAD) * do_ss + h * do_sh, head_dim);
                    }
                    lse[t] = LSE[lse_off + b * lse_sb + h * lse_sh + row * lse_ss];
                    live[t] = i + t <= i_hi && lse[t] != -INFINITY;
                    dlt[t] = live[t] ? delta[scratch_row(b, h, Hq, ii, r.q_first, sq_arg, total_q)] : 0.0f;
                    p[t] = (float)(ii + shift);
                    simd_stage_row(qv[t], Q, q_off + b * q_sb + row * q_ss + h * q_sh, live[t], head_dim);
                    simd_stage_row(dov_v[t], dO, do_off + b * do_sb + row * do_ss + h * do_sh, live[t], head_dim);
#if LAYOUT == 2
                    lo_i[t] = (float)packed_lo(cu_q, cu_q_off, seq_ss, ii, r.sq);
                    hi_i[t] = (float)packed_hi(cu_q, cu_q_off, seq_ss, ii, r.sq);
#else
                    lo_i[t] = hi_i[t] = 0.0f;
#endif
                }
                simd_f x[STEP][RV], dp[STEP][RV];
                step_dots(qv, dov_v, kt, vt, head_dim, x, dp);
                simd_f pr[STEP][RV], ds[STEP][RV];
                CPU_LOOP
                for (int t = 0; t < STEP; t++)
                    CPU_LOOP
                    for (int rv = 0; rv < RV; rv++) {
                        const simd_i visible =
                            step_visible(live[t] ? kept[rv] : (simd_i)(0), jpos[rv], (simd_f)(p[t]), (simd_f)(lo_i[t]),
                                         (simd_f)(hi_i[t]), window_left, window_right);
                        backward_p_ds(x[t][rv], dp[t][rv], scale, softcap, slope, fabs(p[t] - jpos[rv]),
                                      (simd_f)(live[t] ? lse[t] : 0.0f), (simd_f)(dlt[t]), visible, &pr[t][rv],
                                      &ds[t][rv]);
                    }
#if DS_STORED
                store_scores(scores, b, h, Hq, i, min(i_hi - i, STEP - 1), j0, j_last, member, item_lo, item_hi,
                             sq_arg, ds);
#endif
                for (int d = 0; d < head_dim; d++)
                    CPU_LOOP
                    for (int rv = 0; rv < RV; rv++) {
                        simd_f av = dv[d][rv], ak = dk[d][rv];
                        CPU_LOOP
                        for (int t = 0; t < STEP; t++) {
                            av = fma(pr[t][rv], (simd_f)(SIMD_FLOATS(dov_v[t])[d]), av);
                            ak = fma(ds[t][rv], (simd_f)(SIMD_FLOATS(qv[t])[d]), ak);
                        }
                        dv[d][rv] = av;
                        dk[d][rv] = ak;
                    }
            }
        }

        for (int rv = 0; rv < RV; rv++)
            for (int e = 0; e < SIMD; e++) {
                const int j = j0 + rv * SIMD + e;
                if (!member[rv * SIMD + e])
                    continue;
                const long dkrow = dk_off + b * dk_sb + (long)(r.k_first + j) * dk_ss + hk * dk_sh;
                const long dvrow = dv_off + b * dv_sb + (long)(r.k_first + j) * dv_ss + hk * dv_sh;
                for (int d = 0; d < head_dim; d++) {
                    STORE(dK, dkrow + d, ((__private float *)&dk[d][rv])[e] * scale);
                    STORE(dV, dvrow + d, ((__private float *)&dv[d][rv])[e]);
                }
            }
    }
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void attention_backward_dq(BACKWARD_ARGS)
{
    int row_block, h, b; /* later row blocks see more keys (causal): they start first */
    fcl_group_order(1, &row_block, &h, &b);
    const int x0 = row_block * LANES, hk = h / group;
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
    const int shift = r.sk - r.sq;
    const int Hq = get_global_size(1);
    int starts[BLOCK_STARTS];
    bool opens[BLOCK_CANDIDATES];
    block_starts(cu_q, cu_q_off, seq_ss, x0, r.sq - 1, r.sq, 0, starts, opens);
    simd_f dq[HEAD_DIM_PAD][RV];
#if !DS_STORED
    simd_f qt[HEAD_DIM_PAD][RV], dot[HEAD_DIM_PAD][RV]; /* Q and dO transposed (lane = row) */
#endif
    bool member[LANES];
    for (int i0 = x0; i0 < x0 + BLOCK_CANDIDATES; i0++) {
        const int i_last = opens[i0 - x0] ? block_members(i0, x0, r.sq - 1, starts, member) : -1;
        if (i_last < 0)
            continue;
        int j_lo, j_hi; /* the keys that some row of this block may see (before masks) */
        rows_keys(i0, i_last, r.sk, shift, window_left, window_right, cu_q, cu_q_off, seq_ss, &j_lo, &j_hi);
#if DS_STORED
        j_lo = max(j_lo, item_lo); /* the launch's keys */
        j_hi = min(j_hi, item_hi);
#endif

        simd_f pos[RV], lse[RV], dlt[RV];
        simd_f lo[RV], hi[RV]; /* packed: each row's own sequence (zeros otherwise) */
        {
#if !DS_STORED
            simd_f row[HEAD_DIM_PAD / SIMD];
#endif
            for (int rv = 0; rv < RV; rv++) {
                simd_fu pu, lu, du;
#if LAYOUT == 2
                simd_fu lou, hiu;
#endif
                for (int e = 0; e < SIMD; e++) {
                    const int i = i0 + rv * SIMD + e;
                    const bool own = member[rv * SIMD + e];
                    const long qr = (long)(r.q_first + min(i, max(r.sq - 1, 0)));
#if DS_STORED /* the earlier key ranges' sums; Q and dO are not needed */
                    const long srow = scratch_row(b, h, Hq, i, r.q_first, sq_arg, total_q);
                    for (int d = 0; d < HEAD_DIM_PAD; d++)
                        ((__private float *)&dq[d][rv])[e] = own && load_state ? state[srow * HEAD_DIM_PAD + d] : 0.0f;
#else
                    simd_stage_row(row, Q, q_off + b * q_sb + qr * q_ss + h * q_sh, own, head_dim);
                    for (int d = 0; d < HEAD_DIM_PAD; d++)
                        ((__private float *)&qt[d][rv])[e] = SIMD_FLOATS(row)[d];
                    simd_stage_row(row, dO, do_off + b * do_sb + qr * do_ss + h * do_sh, own, head_dim);
                    for (int d = 0; d < HEAD_DIM_PAD; d++)
                        ((__private float *)&dot[d][rv])[e] = SIMD_FLOATS(row)[d];
#endif
                    pu.s[e] = (float)(i + shift);
                    lu.s[e] = own ? LSE[lse_off + b * lse_sb + h * lse_sh + qr * lse_ss] : -INFINITY;
                    du.s[e] = own ? delta[scratch_row(b, h, Hq, i, r.q_first, sq_arg, total_q)] : 0.0f;
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
#else
                lo[rv] = hi[rv] = (simd_f)(0.0f);
#endif
#if !DS_STORED
                for (int d = 0; d < HEAD_DIM_PAD; d++)
                    dq[d][rv] = (simd_f)(0.0f);
#endif
            }
        }
        const simd_f slope = (simd_f)(HEAD_SLOPE(h));
        simd_i live[RV]; /* rows that see some key at all */
        for (int rv = 0; rv < RV; rv++)
            live[rv] = lse[rv] != (simd_f)(-INFINITY);

        simd_f kv[STEP][HEAD_DIM_PAD / SIMD];
        const long kbase = k_off + b * k_sb + (long)r.k_first * k_ss + hk * k_sh;
#if !DS_STORED
        simd_f vv[STEP][HEAD_DIM_PAD / SIMD];
        const long vbase = v_off + b * v_sb + (long)r.k_first * v_ss + hk * v_sh;
#endif
        for (int j = j_lo; j <= j_hi; j += STEP) {
            /* STEP keys at a time: each Q, dO and dQ vector loaded once for all of them. A key past
             * j_hi, or one the mask drops, is staged as zeros and seen by no row (its K and V may
             * hold anything). */
            bool kept[STEP];
            float jf[STEP];
            CPU_LOOP
            for (int t = 0; t < STEP; t++) {
                const int jj = min(j + t, j_hi);
                kept[t] = j + t <= j_hi;
#if HAS_MASK
                kept[t] = kept[t] && mask[mask_off + b * mask_sb + (long)(r.k_first + jj) * mask_ss] > 0.5f;
#endif
                jf[t] = (float)jj;
                simd_stage_row(kv[t], K, kbase + (long)jj * k_ss, kept[t], head_dim);
#if !DS_STORED
                simd_stage_row(vv[t], V, vbase + (long)jj * v_ss, kept[t], head_dim);
#endif
            }
            simd_f ds[STEP][RV];
#if DS_STORED
            CPU_LOOP
            for (int t = 0; t < STEP; t++) {
                load_scores(scores, b, h, Hq, i0, (int)jf[t], r.sq, item_lo, item_hi, sq_arg, ds[t]);
                CPU_LOOP
                for (int rv = 0; rv < RV; rv++) /* pairs the dK/dV kernel may not have visited: 0 */
                    ds[t][rv] = select((simd_f)(0.0f), ds[t][rv],
                                       step_visible(kept[t] ? live[rv] : (simd_i)(0), (simd_f)(jf[t]), pos[rv], lo[rv],
                                                    hi[rv], window_left, window_right));
            }
#else
            simd_f x[STEP][RV], dp[STEP][RV];
            step_dots(kv, vv, qt, dot, head_dim, x, dp);
            CPU_LOOP
            for (int t = 0; t < STEP; t++)
                CPU_LOOP
                for (int rv = 0; rv < RV; rv++) {
                    const simd_i visible = step_visible(kept[t] ? live[rv] : (simd_i)(0), (simd_f)(jf[t]), pos[rv],
                                                        lo[rv], hi[rv], window_left, window_right);
                    simd_f pr;
                    backward_p_ds(x[t][rv], dp[t][rv], scale, softcap, slope, fabs(pos[rv] - jf[t]), lse[rv], dlt[rv],
                                  visible, &pr, &ds[t][rv]);
                }
#endif
            for (int d = 0; d < head_dim; d++)
                CPU_LOOP
                for (int rv = 0; rv < RV; rv++) {
                    simd_f a = dq[d][rv];
                    CPU_LOOP
                    for (int t = 0; t < STEP; t++)
                        a = fma(ds[t][rv], (simd_f)(SIMD_FLOATS(kv[t])[d]), a);
                    dq[d][rv] = a;
                }
        }

        for (int rv = 0; rv < RV; rv++)
            for (int e = 0; e < SIMD; e++) {
                const int i = i0 + rv * SIMD + e;
                if (!member[rv * SIMD + e])
                    continue;
                const long dqrow = dq_off + b * dq_sb + (long)(r.q_first + i) * dq_ss + h * dq_sh;
                const long srow = scratch_row(b, h, Hq, i, r.q_first, sq_arg, total_q);
                if (DS_STORED && save_state) /* a later key range adds its sums */
                    for (int d = 0; d < HEAD_DIM_PAD; d++)
                        state[srow * HEAD_DIM_PAD + d] = ((__private float *)&dq[d][rv])[e];
                else
                    for (int d = 0; d < head_dim; d++)
                        STORE(dQ, dqrow + d, ((__private float *)&dq[d][rv])[e] * scale);
            }
    }
}
