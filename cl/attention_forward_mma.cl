/*
 * Attention forward on NVIDIA tensor cores (compute capability >= 8.0), through inline PTX:
 * the same online softmax, arguments, layouts and key-tile grid as the portable
 * attention_forward.cl, with S = Q K^T and O += P V as mma.sync m16n8k16 (F16 or BF16 inputs,
 * FP32 accumulation). F16 and BF16 storage only.
 *
 * A work-group of BLOCK_M / (16 * M_TILES) warps computes BLOCK_M query rows of one (batch,
 * head); each warp owns M_TILES tiles of 16 rows, keeping their Q fragments, the tile's scores
 * and the output accumulators in registers (the mma fragment layouts), except the Q fragments
 * of the last Q_LOCAL_STEPS k steps: those wait in local memory, for when registers run short
 * (D 128). K and V tiles of
 * BLOCK_N keys are staged in local memory as the raw 16-bit storage values, rows padded by 8
 * halves so that ldmatrix reads them without bank conflicts, and shared by the warps. Two
 * stages: tile t + 2 is copied into tile t's stage while the warps compute tile t + 1, so every
 * copy has a whole tile of compute to land; with ASYNC_COPY (every K and V row 16-byte
 * aligned: the host checks the views) by cp.async, otherwise by plain loads and stores.
 *
 * The probabilities enter P V rounded to the storage dtype (as in FlashAttention); the row sums
 * stay in FP32. Keys of a tile that a row cannot see contribute exactly nothing, and masked-out
 * keys' V is never read (zeros instead). No key chunking: the host takes this path only on
 * devices without a loop cap, with key_lo .. key_hi the whole key range.
 *
 * Specialisation (-D): FCL_DTYPE 1 or 2; HEAD_DIM_PAD (multiple of 16); BLOCK_M, BLOCK_N
 * (multiples of 16), M_TILES; ASYNC_COPY; PAIRS (head_dim even and every Q and O row 4-byte
 * aligned: two elements per load (load_a_rows, mma_nv.cl) and store); Q_LOCAL_STEPS (0 to
 * HEAD_DIM_PAD / 16); HAS_SOFTCAP, HAS_MASK, HAS_ALIBI; LAYOUT.
 */

#define NWARPS (BLOCK_M / (16 * M_TILES))
#define WG_SIZE (NWARPS * 32)
#define NT_S (BLOCK_N / 8)         /* n8 tiles of a tile's scores */
#define QS_FIRST (KSTEPS - Q_LOCAL_STEPS) /* the first k step whose Q fragments live in local memory */
/* Starts the copies of the K/V tile of keys j0 .. into stage st. */
#define ISSUE_TILE(st, j0)                                                                         \
    issue_kv_tile(Ks[st], Vs[st], MASK_STAGE(st), BLOCK_N, ROW_HALVES, HEAD_DIM_PAD, WG_SIZE, lid, Ku, Vu, kbase, \
                  vbase, k_ss, v_ss, j0, g_lo, g_hi, head_dim, 0, mask, mrow, mask_ss)

/* The tile's scores s (raw products; rows g (e 0, 1) and g + 8 (e 2, 3) of each m tile, this
 * lane's column pair t of each n8 tile) turned into the softmax's logits: with logit mods the
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

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attention_forward(FORWARD_KERNEL_ARGS)
{
    KV_RING(BLOCK_N); /* tile t lives in stage t % 2 */
    __global const ushort *Qu = (__global const ushort *)Q;
    __global const ushort *Ku = (__global const ushort *)K;
    __global const ushort *Vu = (__global const ushort *)V;
    const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
    const int g = lane >> 2, t = lane & 3; /* the fragment row (and row + 8) and column pair */
    FORWARD_GROUP_SETUP

    /* A negative scale is applied as |scale| on negated queries (exact), so that the scores'
     * maximum is the maximum of the raw products: p = 2^(s * sfac - m) is then one FFMA. */
    const uint q_sign = scale < 0.0f ? 0x80008000u : 0u;
#if HAS_LOGIT_MODS
    const float qscale = fabs(scale), sfac = 1.0f;
#else
    const float qscale = fabs(scale) * FCL_LOG2E, sfac = qscale;
#endif
#if HAS_ALIBI
    const float slope = alibi[alibi_off + b * alibi_sb + h * alibi_sh] * FCL_LOG2E;
#else
    const float slope = 0.0f;
#endif
    const int p0 = i0 + warp * 16 * M_TILES + g + shift; /* absolute position of this lane's first row */

    /* This lane's rows: i_row[mt][hr] = block row warp * 16 * M_TILES + mt * 16 + g + 8 hr. The
     * Q fragments of k steps QS_FIRST .. KSTEPS - 1 wait in local memory instead of registers
     * (stash_fragments, mma_nv.cl). */
    uint qf[M_TILES][KSTEPS][4];
#if Q_LOCAL_STEPS
    __local uint4 Qs[Q_LOCAL_STEPS][M_TILES][WG_SIZE];
#define Q_STASH(mt) &Qs[0][mt][0]
#else
#define Q_STASH(mt) 0
#endif
    float acc[M_TILES][NT_O][4];
    float m[M_TILES][2], l[M_TILES][2];
    int jlo[M_TILES][2], jhi[M_TILES][2];
    int lo_max = INT_MIN, hi_min = INT_MAX; /* the keys that all of this lane's rows see */
    #pragma unroll
    for (int mt = 0; mt < M_TILES; mt++) {
        load_a_rows(qf[mt], Qu, qo + b * q_sb + h * q_sh, q_ss, i0 + warp * 16 * M_TILES + mt * 16, sq, head_dim,
                    lane);
        #pragma unroll
        for (int ks = 0; ks < KSTEPS; ks++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                qf[mt][ks][e] ^= q_sign;
#if Q_LOCAL_STEPS
        stash_fragments(Q_STASH(mt), qf[mt], QS_FIRST, M_TILES * WG_SIZE, lid);
#endif
        #pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int i = i0 + warp * 16 * M_TILES + mt * 16 + g + 8 * hr;
            m[mt][hr] = -INFINITY;
            l[mt][hr] = 0.0f; /* this lane's share of the row sum; the quad's total at the end */
            forward_row_keys(i, g_lo, g_hi, shift, sq, sk, window_left, window_right, cu_q, cu_q_off, seq_ss,
                             &jlo[mt][hr], &jhi[mt][hr]);
            lo_max = max(lo_max, jlo[mt][hr]);
            hi_min = min(hi_min, jhi[mt][hr]);
        }
        #pragma unroll
        for (int nt = 0; nt < NT_O; nt++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][nt][e] = 0.0f;
    }

    const long kbase = ko + b * k_sb + hk * k_sh;
    const long vbase = vo + b * v_sb + hk * v_sh;
    const long mrow = mo + b * mask_sb;
    const int j_first = g_lo - (g_lo + k_align) % BLOCK_N; /* g_lo rounded down to the grid */
    const int n_tiles = g_lo <= g_hi ? (g_hi - j_first) / BLOCK_N + 1 : 0;
    /* Tiles 0 and 1 in flight before the loop; tile t + 2 is issued once every warp is done
     * with tile t, so each copy has a whole tile's compute to land. */
    for (int tt = 0; tt < 2; tt++) {
        if (tt < n_tiles)
            ISSUE_TILE(tt, j_first + tt * BLOCK_N);
        commit_copies();
    }
    for (int tile = 0; tile < n_tiles; tile++) {
        const int j0 = j_first + tile * BLOCK_N, st = tile & 1;
        copies_landed(tile + 1 == n_tiles); /* tile is in (tile + 1 may still be in flight) */

        float s[M_TILES][NT_S][4];
        #pragma unroll
        for (int mt = 0; mt < M_TILES; mt++)
            #pragma unroll
            for (int nt = 0; nt < NT_S; nt++)
                #pragma unroll
                for (int e = 0; e < 4; e++)
                    s[mt][nt][e] = 0.0f;
        /* this lane's ldmatrix row: key (lane & 7) + 8 (lane / 16), column 8 ((lane / 8) & 1) */
        const uint k_lane =
            opaque((uint)(size_t)(Ks[st] + ((lane >> 4) * 8 + (lane & 7)) * ROW_HALVES + ((lane >> 3) & 1) * 8));
        #pragma unroll
        for (int ks = 0; ks < KSTEPS; ks++) {
            uint qa[M_TILES][4];
            #pragma unroll
            for (int mt = 0; mt < M_TILES; mt++)
                fragment_at(qa[mt], qf[mt], Q_STASH(mt), ks, QS_FIRST, M_TILES * WG_SIZE, lid);
            #pragma unroll
            for (int np = 0; np < NT_S / 2; np++) {
                /* matrices: keys +0 / +8 of this 16-key pair x columns +0 / +8 of this k step */
                uint kb[4];
                ldmatrix_x4(kb, k_lane + 2 * (np * 16 * ROW_HALVES + ks * 16));
                #pragma unroll
                for (int mt = 0; mt < M_TILES; mt++) {
                    mma_16816(s[mt][2 * np], qa[mt], kb[0], kb[1]);
                    mma_16816(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
                }
            }
        }

        /* Online softmax, rows g (e = 0, 1) and g + 8 (e = 2, 3) of each m tile. Tiles that every
         * row of the warp sees whole skip the visibility checks (a warp-uniform branch). */
        float tmax[M_TILES][2];
        if (!HAS_MASK && warp_all(j0 >= lo_max && j0 + BLOCK_N - 1 <= hi_min))
            tile_logits(s, tmax, 0, j0, jlo, jhi, MASK_STAGE(st), t, qscale, softcap, slope, p0);
        else
            tile_logits(s, tmax, 1, j0, jlo, jhi, MASK_STAGE(st), t, qscale, softcap, slope, p0);
        /* A row's reference maximum moves only when the tile's exceeds it by more than 8 (log2
         * units): the probabilities then stay below 2^8, and most tiles rescale nothing (a
         * warp-uniform branch). O and LSE use the same reference, so the result is the same. A
         * tile with no visible key leaves the row unchanged (alpha 1, p 0). */
        float alpha[M_TILES][2];
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
        if (warp_any(moved))
            #pragma unroll
            for (int mt = 0; mt < M_TILES; mt++)
                #pragma unroll
                for (int nt = 0; nt < NT_O; nt++)
                    #pragma unroll
                    for (int e = 0; e < 4; e++)
                        acc[mt][nt][e] *= alpha[mt][e >> 1];

        /* O += P V: the score accumulators of key tiles 2 kk and 2 kk + 1 are exactly the A
         * fragment of keys 16 kk .. 16 kk + 15. This lane's ldmatrix row: key (lane & 7) +
         * 8 ((lane / 8) & 1), column 8 (lane / 16). */
        const uint v_lane =
            opaque((uint)(size_t)(Vs[st] + (((lane >> 3) & 1) * 8 + (lane & 7)) * ROW_HALVES + (lane >> 4) * 8));
        #pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; kk++) {
            uint pa[M_TILES][4];
            #pragma unroll
            for (int mt = 0; mt < M_TILES; mt++) {
                pa[mt][0] = pack_pair(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][1] = pack_pair(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][2] = pack_pair(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][3] = pack_pair(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
            #pragma unroll
            for (int dp = 0; dp < NT_O / 2; dp++) {
                /* matrices: keys +0 / +8 of this k step x columns +0 / +8 of this 16-column pair */
                uint vb[4];
                ldmatrix_x4_trans(vb, v_lane + 2 * (kk * 16 * ROW_HALVES + dp * 16));
                #pragma unroll
                for (int mt = 0; mt < M_TILES; mt++) {
                    mma_16816(acc[mt][2 * dp], pa[mt], vb[0], vb[1]);
                    mma_16816(acc[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
                }
            }
        }

        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with this stage: refill it */
        if (tile + 2 < n_tiles)
            ISSUE_TILE(st, j0 + 2 * BLOCK_N);
        commit_copies();
    }

    /* Epilogue: rows normalised in registers and stored; a row that saw no key writes O = 0 and
     * LSE = -inf. */
    #pragma unroll
    for (int mt = 0; mt < M_TILES; mt++)
        #pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int i = i0 + warp * 16 * M_TILES + mt * 16 + g + 8 * hr;
            const float lsum = quad_sum(l[mt][hr]);
            if (i >= sq)
                continue;
            const float inv_l = lsum > 0.0f ? 1.0f / lsum : 0.0f;
            const long orow = oo + b * o_sb + (long)i * o_ss + h * o_sh;
            #pragma unroll
            for (int nt = 0; nt < NT_O; nt++) {
                const int d = nt * 8 + 2 * t;
                const float o0 = lsum > 0.0f ? acc[mt][nt][2 * hr] * inv_l : 0.0f;
                const float o1 = lsum > 0.0f ? acc[mt][nt][2 * hr + 1] * inv_l : 0.0f;
                store_pair(O, orow + d, d, head_dim, o0, o1);
            }
            if (write_lse && t == 0)
                LSE[lseo + b * lse_sb + h * lse_sh + (long)i * lse_ss] =
                    lsum > 0.0f ? (m[mt][hr] + log2(lsum)) * FCL_LN2 : -INFINITY;
        }
}
