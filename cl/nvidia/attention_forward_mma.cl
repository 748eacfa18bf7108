/* SPDX-License-Identifier: Apache-2.0 */
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
#define QS_FIRST (KSTEPS - Q_LOCAL_STEPS) /* the first k step whose Q fragments live in local memory */
/* Starts the copies of the K/V tile of keys j0 .. into stage st. */
#define ISSUE_TILE(st, j0)                                                                         \
    issue_kv_tile(Ks[st], Vs[st], MASK_STAGE(st), BLOCK_N, ROW_HALVES, HEAD_DIM_PAD, WG_SIZE, lid, Ku, Vu, kbase, \
                  vbase, k_ss, v_ss, j0, g_lo, g_hi, head_dim, 0, mask, mrow, mask_ss)

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void attention_forward(FORWARD_KERNEL_ARGS)
{
    KV_RING(BLOCK_N); /* tile t lives in stage t % 2 */
    NV_FORWARD_SETUP
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
    int lo_max, hi_min; /* the keys that all of this lane's rows see */
    init_rows(i0 + warp * 16 * M_TILES + g, g_lo, g_hi, shift, sq, sk, window_left, window_right, cu_q, cu_q_off,
              seq_ss, acc, m, l, jlo, jhi, &lo_max, &hi_min);
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
    }

    const long kbase = ko + b * k_sb + hk * k_sh;
    const long vbase = vo + b * v_sb + hk * v_sh;
    const long mrow = mo + b * mask_sb;
    const int j_first = FIRST_TILE(g_lo, g_hi, BLOCK_N);
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
        float alpha[M_TILES][2];
        if (warp_any(softmax_tile(s, tmax, m, l, alpha, sfac)))
            rescale_rows(acc, alpha);

        /* O += P V: the score accumulators of key tiles 2 kk and 2 kk + 1 are exactly the A
         * fragment of keys 16 kk .. 16 kk + 15. This lane's ldmatrix row: key (lane & 7) +
         * 8 ((lane / 8) & 1), column 8 (lane / 16). */
        const uint v_lane =
            opaque((uint)(size_t)(Vs[st] + (((lane >> 3) & 1) * 8 + (lane & 7)) * ROW_HALVES + (lane >> 4) * 8));
        #pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; kk++) {
            uint pa[M_TILES][4];
            #pragma unroll
            for (int mt = 0; mt < M_TILES; mt++)
                probs_fragment(pa[mt], s, mt, kk);
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

    /* Epilogue: rows normalised in registers and stored. */
    store_output_rows(acc, m, l, i0 + warp * 16 * M_TILES + g, sq, head_dim, t, O, oo + b * o_sb + h * o_sh, o_ss,
               write_lse, LSE, lseo + b * lse_sb + h * lse_sh, lse_ss);
}
