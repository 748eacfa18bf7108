/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attention forward for GPUs, register-blocked: portable OpenCL C 1.2, no vendor code. The
 * same online softmax, arguments, layouts and key-tile grid as attention_forward.cl (which
 * stays the kernel of CPUs and loop-capped devices), computed as two register-blocked GEMMs per
 * key tile in the style of CLBlast's Xgemm:
 *
 *   S = Q K^T  a work-group of TY x TX work-items computes a BLOCK_M x BLOCK_N score block,
 *              each work-item WM rows x WN keys in registers; Q and K stream through local
 *              memory in DK-deep slices of the head dim (converted to float on the way in).
 *   softmax    per-row maxima meet in local memory (each work-item's WN-key partial maxima,
 *              TX of them per row), or by subgroup shuffles (ROW_SHUFFLE); the probabilities go
 *              to local memory as float, key-major.
 *   O += P V   each work-item owns the same WM rows and OC = HEAD_DIM_PAD / TX dims of the
 *              output in registers; V streams through local memory in NK-key slices.
 *
 * While a slice is multiplied the next one (of Q/K, of V, or the next tile's first) is already
 * being fetched into registers. The Q/K slices alternate between the staging array and the
 * probabilities' array (free until the tile's softmax), so a slice costs one barrier, not two;
 * with V_BUFFERS 2 the V slices alternate between the staging array and a second V array
 * likewise (else each V slice takes two).
 * Work-item (ty, tx) owns rows (i / VW) * TY * VW + ty * VW + i % VW (i < WM), keys and dims
 * likewise along tx, so neighbouring work-items read neighbouring VW-vectors. A row's softmax
 * state is kept by all TX work-items of its group (the same value in each); each keeps its own
 * share of the row sum, summed in a fixed order at the end, so runs are bit-identical. Keys of
 * a tile that a row cannot see contribute exactly nothing (probability 0, rescale factor 1); a
 * dropped key's V is never read (zeros instead).
 * No key chunking: the host takes this kernel only on devices without a loop cap.
 *
 * Specialisation (-D): FCL_DTYPE (common.cl); HEAD_DIM_PAD; BLOCK_M, BLOCK_N, WM, WN, DK, NK
 * (DK a multiple of 4), VW (1, 2 or 4, dividing WM, WN and OC); V_BUFFERS (1 or 2); VEC_LOAD
 * (see load_chunk); ROW_SHUFFLE (with subgroup.cl and FCL_SUBGROUP_SIZE: the TX work-items of a
 * row block meet by subgroup shuffles instead of local memory, for the row maxima of every tile
 * and the row sums at the end; TX a power of two dividing the subgroup size, which divides the
 * work-group); HAS_SOFTCAP, HAS_MASK, HAS_ALIBI; LAYOUT.
 * Scores are kept in log2 units so the softmax uses exp2.
 */

#define TY (BLOCK_M / WM)
#define TX (BLOCK_N / WN)
#define NT (TY * TX)
#define OC (HEAD_DIM_PAD / TX)
/* Chunks of 4 head dims of one row per work-item and slice (DK and HEAD_DIM_PAD are multiples
 * of 4). */
#define Q_CHUNKS ((BLOCK_M * DK / 4 + NT - 1) / NT)
#define K_CHUNKS ((BLOCK_N * DK / 4 + NT - 1) / NT)
#define V_CHUNKS ((NK * HEAD_DIM_PAD / 4 + NT - 1) / NT)
/* Rows of the local arrays in VW-vectors, padded by one vector. */
#define QS_ROW (BLOCK_M / VW + 1)
#define KS_ROW (BLOCK_N / VW + 1)
#define VS_ROW (HEAD_DIM_PAD / VW + 1)
#define PS_ROW (BLOCK_M / VW + 1)
#define RED_ROW (BLOCK_M / VW)
/* One staging array serves, in turn, the even Q and K slices, the partial row maxima / sums
 * and the V slices. */
#define MAX2(a, b) ((a) > (b) ? (a) : (b))
#define QK_VECS (DK * (QS_ROW + KS_ROW))
#define STAGE_VECS MAX2(QK_VECS, MAX2(NK * VS_ROW, TX * RED_ROW))
/* The probabilities' array, also the second Q/K slice buffer. */
#define PS_VECS MAX2(BLOCK_N * PS_ROW, QK_VECS)

/* Work-item lid's chunks (4 head dims of one row) of the Q slice (head dims d0 .. d0 + DK - 1
 * of block rows i0 .., times qscale; rows past sq read the last row, never written back) and
 * of the K slice (those dims of keys j0 .. j0 + BLOCK_N - 1; zeros outside [lo, hi]) into rq
 * and rk. */
BLOCKED_INLINE void fetch_qk(__global const store_t *Q, __global const store_t *K, long qbase, long q_ss, int i0,
                             int sq, float qscale, long kbase, long k_ss, int j0, int lo, int hi, int d0,
                             int head_dim, int lid, float4 *rq, float4 *rk)
{
    FCL_UNROLL_LOOP
    for (int l = 0; l < Q_CHUNKS; l++) {
        const int e = lid + l * NT, d = d0 + 4 * (e % (DK / 4));
        const long row = qbase + (long)clamp(i0 + e / (DK / 4), 0, max(sq - 1, 0)) * q_ss;
        rq[l] = (Q_CHUNKS * NT == BLOCK_M * DK / 4 || e < BLOCK_M * DK / 4) && sq > 0 && d < head_dim
                    ? load_chunk(Q, row + d, d, head_dim) * qscale
                    : (float4)(0.0f);
    }
    FCL_UNROLL_LOOP
    for (int l = 0; l < K_CHUNKS; l++) {
        const int e = lid + l * NT, d = d0 + 4 * (e % (DK / 4)), j = j0 + e / (DK / 4);
        rk[l] = (K_CHUNKS * NT == BLOCK_N * DK / 4 || e < BLOCK_N * DK / 4) && j >= lo && j <= hi && d < head_dim
                    ? load_chunk(K, kbase + (long)j * k_ss + d, d, head_dim)
                    : (float4)(0.0f);
    }
}

/* Key j is kept by the key mask (mask row at mrow). */
#if HAS_MASK
#define KEY_KEPT(j) (mask[mrow + (long)(j) * mask_ss] > 0.5f)
#else
#define KEY_KEPT(j) true
#endif

/* Work-item lid's chunks of the V slice of keys j0 .. j0 + NK - 1 into rv: zeros outside
 * [lo, hi] and for dropped keys, whose V may hold anything. */
BLOCKED_INLINE void fetch_v(__global const store_t *V, long vbase, long v_ss, __global const float *mask, long mrow,
                            long mask_ss, int j0, int lo, int hi, int head_dim, int lid, float4 *rv)
{
    FCL_UNROLL_LOOP
    for (int l = 0; l < V_CHUNKS; l++) {
        const int e = lid + l * NT, d = 4 * (e % (HEAD_DIM_PAD / 4)), j = j0 + e / (HEAD_DIM_PAD / 4);
        rv[l] = (V_CHUNKS * NT == NK * HEAD_DIM_PAD / 4 || e < NK * HEAD_DIM_PAD / 4) && j >= lo && j <= hi &&
                        d < head_dim && KEY_KEPT(j)
                    ? load_chunk(V, vbase + (long)j * v_ss + d, d, head_dim)
                    : (float4)(0.0f);
    }
}

#if ROW_SHUFFLE && (TX & (TX - 1) || WARP_LANES % TX || NT % WARP_LANES)
#error "ROW_SHUFFLE: TX a power of two dividing WARP_LANES, which divides the work-group"
#endif

__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) FCL_SUBGROUP_ATTR
void attention_forward(FORWARD_KERNEL_ARGS)
{
    __local floatv stage[STAGE_VECS];
    __local floatv Ps[PS_VECS]; /* Ps[key][row]: the tile's probabilities */
    __local int Rlo[BLOCK_M], Rhi[BLOCK_M]; /* each block row's visible keys, before the mask */
#if V_BUFFERS == 2
    __local floatv vs_odd[NK * VS_ROW]; /* the odd V slices */
#endif
    const int lid = get_local_id(0), tx = lid % TX, ty = lid / TX;
    /* This work-item's vectors in the local arrays (reads at constant offsets from these). */
    __local const floatv *const red_rows = stage + ty;
    __local floatv *const p_rows = Ps + ty;
    FORWARD_GROUP_SETUP /* the group's key range [g_lo, g_hi] is the union over its rows */

    FORWARD_LOGIT_SETUP
    for (int r = lid; r < BLOCK_M; r += NT) {
        int lo, hi;
        forward_row_keys(i0 + r, g_lo, g_hi, shift, sq, sk, window_left, window_right, cu_q, cu_q_off, seq_ss,
                         &lo, &hi);
        Rlo[r] = lo;
        Rhi[r] = hi;
    }

    float acc[WM][OC], m[WM], l[WM]; /* l: this work-item's share of the row sum */
    float4 rq[Q_CHUNKS], rk[K_CHUNKS], rv[V_CHUNKS];
    FCL_UNROLL_LOOP
    for (int i = 0; i < WM; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        FCL_UNROLL_LOOP
        for (int c = 0; c < OC; c++)
            acc[i][c] = 0.0f;
    }

    const long qbase = qo + b * q_sb + h * q_sh;
    const long kbase = ko + b * k_sb + hk * k_sh;
    const long vbase = vo + b * v_sb + hk * v_sh;
    const long mrow = mo + b * mask_sb;
    const int j_first = FIRST_TILE(g_lo, g_hi, BLOCK_N);
    const int n_tiles = g_lo <= g_hi ? (g_hi - j_first) / BLOCK_N + 1 : 0;
    if (n_tiles > 0)
        fetch_qk(Q, K, qbase, q_ss, i0, sq, qscale, kbase, k_ss, j_first, g_lo, g_hi, 0, head_dim, lid, rq, rk);
    barrier(CLK_LOCAL_MEM_FENCE); /* Rlo, Rhi */
    int lo_max = INT_MIN, hi_min = INT_MAX; /* the keys that all of this work-item's rows see */
    FCL_UNROLL_LOOP
    for (int i = 0; i < WM; i++) {
        lo_max = max(lo_max, Rlo[ROW_OF(i, ty)]);
        hi_min = min(hi_min, Rhi[ROW_OF(i, ty)]);
    }

    for (int tile = 0; tile < n_tiles; tile++) {
        const int j0 = j_first + tile * BLOCK_N;
        float s[WM][WN];
        FCL_UNROLL_LOOP
        for (int i = 0; i < WM; i++)
            FCL_UNROLL_LOOP
            for (int c = 0; c < WN; c++)
                s[i][c] = 0.0f;
        for (int d0 = 0; d0 < HEAD_DIM_PAD; d0 += DK) {
            /* Slice d0 / DK's buffer: free once every work-item is past the slice that used it
             * last (the barrier below, at the slice before), or the previous tile's V slices
             * (the barrier here). */
            __local floatv *const buf = (d0 / DK) % 2 ? Ps : stage;
            __local float *const qs = (__local float *)buf, *const ks = qs + DK * QS_ROW * VW;
            __local const floatv *const q_rows = buf + ty, *const k_cols = buf + DK * QS_ROW + tx;
            if (d0 == 0)
                barrier(CLK_LOCAL_MEM_FENCE);
            FCL_UNROLL_LOOP
            for (int l = 0; l < Q_CHUNKS; l++) {
                const int e = lid + l * NT, r = e / (DK / 4), k = 4 * (e % (DK / 4));
                if (Q_CHUNKS * NT == BLOCK_M * DK / 4 || e < BLOCK_M * DK / 4) {
                    qs[k * QS_ROW * VW + r] = rq[l].s0;
                    qs[(k + 1) * QS_ROW * VW + r] = rq[l].s1;
                    qs[(k + 2) * QS_ROW * VW + r] = rq[l].s2;
                    qs[(k + 3) * QS_ROW * VW + r] = rq[l].s3;
                }
            }
            FCL_UNROLL_LOOP
            for (int l = 0; l < K_CHUNKS; l++) {
                const int e = lid + l * NT, n = e / (DK / 4), k = 4 * (e % (DK / 4));
                if (K_CHUNKS * NT == BLOCK_N * DK / 4 || e < BLOCK_N * DK / 4) {
                    ks[k * KS_ROW * VW + n] = rk[l].s0;
                    ks[(k + 1) * KS_ROW * VW + n] = rk[l].s1;
                    ks[(k + 2) * KS_ROW * VW + n] = rk[l].s2;
                    ks[(k + 3) * KS_ROW * VW + n] = rk[l].s3;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (d0 + DK < HEAD_DIM_PAD) /* the next slice (or the tile's first V slice) in flight */
                fetch_qk(Q, K, qbase, q_ss, i0, sq, qscale, kbase, k_ss, j0, g_lo, g_hi, d0 + DK, head_dim, lid, rq, rk);
            else
                fetch_v(V, vbase, v_ss, mask, mrow, mask_ss, j0, g_lo, g_hi, head_dim, lid, rv);
            FCL_UNROLL_LOOP
            for (int k = 0; k < DK; k++) {
                vec_u a[WM / VW], kb[WN / VW];
                FCL_UNROLL_LOOP
                for (int i = 0; i < WM / VW; i++)
                    a[i].v = q_rows[k * QS_ROW + i * TY];
                FCL_UNROLL_LOOP
                for (int c = 0; c < WN / VW; c++)
                    kb[c].v = k_cols[k * KS_ROW + c * TX];
                FCL_UNROLL_LOOP
                for (int i = 0; i < WM; i++)
                    FCL_UNROLL_LOOP
                    for (int c = 0; c < WN; c++)
                        s[i][c] = fma(a[i / VW].s[i % VW], kb[c / VW].s[c % VW], s[i][c]);
            }
        }

        /* Scores in log2 units, -inf where the row cannot see the key; this work-item's
         * partial row maxima meet the TX - 1 others of its rows (by subgroup shuffles with
         * ROW_SHUFFLE, else in the staging array). */
        const bool whole = !HAS_MASK && j0 >= lo_max && j0 + BLOCK_N - 1 <= hi_min;
        vec_u pmax[WM / VW];
        FCL_UNROLL_LOOP
        for (int i = 0; i < WM; i++) {
            const int row = ROW_OF(i, ty);
            const int pos = i0 + row + shift; /* the row's absolute position */
            float tmax = -INFINITY;
            FCL_UNROLL_LOOP
            for (int c = 0; c < WN; c++) {
                const int j = j0 + COL_OF(c, tx);
                float x = fcl_logit(s[i][c], softcap, slope, (float)abs(pos - j));
                if (!whole && !(j >= Rlo[row] && j <= Rhi[row] && KEY_KEPT(j)))
                    x = -INFINITY;
                s[i][c] = x;
                tmax = fmax(tmax, x);
            }
            pmax[i / VW].s[i % VW] = tmax;
        }
#if ROW_SHUFFLE
        /* the TX work-items of a row block are neighbouring lanes of one subgroup */
        FCL_UNROLL_LOOP
        for (int i = 0; i < WM / VW; i++)
            FCL_UNROLL_LOOP
            for (int u = 0; u < VW; u++)
                FCL_UNROLL_LOOP
                for (int o = 1; o < TX; o *= 2)
                    pmax[i].s[u] = fmax(pmax[i].s[u], shuffle_xor(pmax[i].s[u], o));
#if (HEAD_DIM_PAD / DK) % 2 == 0
        barrier(CLK_LOCAL_MEM_FENCE); /* the last Q/K slice, in Ps, is consumed before Ps is written */
#endif
#else
#if (HEAD_DIM_PAD / DK) % 2
        barrier(CLK_LOCAL_MEM_FENCE); /* the last Q/K slice, in the staging array, is consumed */
#endif /* else it is in Ps, and the staging array's last one was consumed before its barrier */
        FCL_UNROLL_LOOP
        for (int i = 0; i < WM / VW; i++)
            stage[tx * RED_ROW + i * TY + ty] = pmax[i].v;
        barrier(CLK_LOCAL_MEM_FENCE);
        FCL_UNROLL_LOOP
        for (int t = 0; t < TX; t++)
            FCL_UNROLL_LOOP
            for (int i = 0; i < WM / VW; i++) {
                vec_u o;
                o.v = red_rows[t * RED_ROW + i * TY];
                FCL_UNROLL_LOOP
                for (int u = 0; u < VW; u++)
                    pmax[i].s[u] = fmax(pmax[i].s[u], o.s[u]);
            }
#endif
        /* A tile with no visible key leaves the row unchanged (alpha 1, p 0). */
        FCL_UNROLL_LOOP
        for (int i = 0; i < WM; i++) {
            const float m_new = fmax(m[i], pmax[i / VW].s[i % VW]);
            const float alpha = m_new == -INFINITY ? 1.0f : exp2(m[i] - m_new);
            m[i] = m_new;
            float sum = 0.0f;
            FCL_UNROLL_LOOP
            for (int c = 0; c < WN; c++) {
                const float pn = m_new == -INFINITY ? 0.0f : exp2(s[i][c] - m_new);
                s[i][c] = pn;
                sum += pn;
            }
            l[i] = l[i] * alpha + sum;
            FCL_UNROLL_LOOP
            for (int c = 0; c < OC; c++)
                acc[i][c] *= alpha;
        }
        FCL_UNROLL_LOOP
        for (int c = 0; c < WN; c++)
            FCL_UNROLL_LOOP
            for (int i = 0; i < WM / VW; i++) {
                vec_u o;
                FCL_UNROLL_LOOP
                for (int u = 0; u < VW; u++)
                    o.s[u] = s[i * VW + u][c];
                p_rows[COL_OF(c, tx) * PS_ROW + i * TY] = o.v;
            }

        for (int n0 = 0; n0 < BLOCK_N; n0 += NK) {
#if V_BUFFERS == 2
            /* slice n0 / NK's buffer: free once every work-item is past the slice two before
             * (the barrier of the slice before), or past the softmax (the barrier here) */
            __local floatv *const vbuf = (n0 / NK) % 2 ? vs_odd : stage;
            if (n0 == 0)
#else
            __local floatv *const vbuf = stage;
#endif
                barrier(CLK_LOCAL_MEM_FENCE); /* the V buffer is free; Ps is written */
            __local float *const vs = (__local float *)vbuf;
            __local const floatv *const v_cols = vbuf + tx;
            FCL_UNROLL_LOOP
            for (int l = 0; l < V_CHUNKS; l++) {
                const int e = lid + l * NT;
                if (V_CHUNKS * NT == NK * HEAD_DIM_PAD / 4 || e < NK * HEAD_DIM_PAD / 4)
                    vstore4(rv[l], 0, vs + (e / (HEAD_DIM_PAD / 4)) * VS_ROW * VW + 4 * (e % (HEAD_DIM_PAD / 4)));
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (n0 + NK < BLOCK_N) /* the next V slice, or the next tile's first Q/K slice */
                fetch_v(V, vbase, v_ss, mask, mrow, mask_ss, j0 + n0 + NK, g_lo, g_hi, head_dim, lid, rv);
            else if (tile + 1 < n_tiles)
                fetch_qk(Q, K, qbase, q_ss, i0, sq, qscale, kbase, k_ss, j0 + BLOCK_N, g_lo, g_hi, 0, head_dim, lid, rq,
                         rk);
            __local const floatv *const p_slice = p_rows + n0 * PS_ROW;
            FCL_UNROLL_LOOP
            for (int n = 0; n < NK; n++) {
                vec_u p[WM / VW], v[OC / VW];
                FCL_UNROLL_LOOP
                for (int i = 0; i < WM / VW; i++)
                    p[i].v = p_slice[n * PS_ROW + i * TY];
                FCL_UNROLL_LOOP
                for (int c = 0; c < OC / VW; c++)
                    v[c].v = v_cols[n * VS_ROW + c * TX];
                FCL_UNROLL_LOOP
                for (int i = 0; i < WM; i++)
                    FCL_UNROLL_LOOP
                    for (int c = 0; c < OC; c++)
                        acc[i][c] = fma(p[i / VW].s[i % VW], v[c / VW].s[c % VW], acc[i][c]);
            }
        }
    }

    /* Epilogue: the row sums' shares meet (by shuffles, or in the staging array summed in a fixed
     * order), rows are normalised in registers and stored; a row that saw no key writes O = 0
     * and LSE = -inf. */
    float lsums[WM];
#if ROW_SHUFFLE
    FCL_UNROLL_LOOP
    for (int i = 0; i < WM; i++) {
        lsums[i] = l[i];
        FCL_UNROLL_LOOP
        for (int o = 1; o < TX; o *= 2)
            lsums[i] += shuffle_xor(lsums[i], o);
    }
#else
    barrier(CLK_LOCAL_MEM_FENCE);
    FCL_UNROLL_LOOP
    for (int i = 0; i < WM / VW; i++) {
        vec_u o;
        FCL_UNROLL_LOOP
        for (int u = 0; u < VW; u++)
            o.s[u] = l[i * VW + u];
        stage[tx * RED_ROW + i * TY + ty] = o.v;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    FCL_UNROLL_LOOP
    for (int i = 0; i < WM; i++) {
        lsums[i] = 0.0f;
        FCL_UNROLL_LOOP
        for (int t = 0; t < TX; t++)
            lsums[i] += ((__local float *)stage)[t * RED_ROW * VW + ROW_OF(i, ty)];
    }
#endif
    FCL_UNROLL_LOOP
    for (int i = 0; i < WM; i++) {
        const float lsum = lsums[i];
        const int row = ROW_OF(i, ty), r = i0 + row;
        if (r >= sq)
            continue;
        const float inv_l = lsum > 0.0f ? 1.0f / lsum : 0.0f;
        const long orow = oo + b * o_sb + (long)r * o_ss + h * o_sh;
        FCL_UNROLL_LOOP
        for (int c = 0; c < OC; c++) {
            const int d = COL_OF(c, tx);
            if (d < head_dim)
                STORE(O, orow + d, lsum > 0.0f ? acc[i][c] * inv_l : 0.0f);
        }
        if (write_lse && tx == 0)
            LSE[lseo + b * lse_sb + h * lse_sh + (long)r * lse_ss] = fcl_row_lse(m[i], lsum);
    }
}
