/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attention backward on NVIDIA tensor cores (compute capability >= 8.0), through inline PTX
 * (mma_nv.cl): the same arguments, layouts, semantics and determinism as the portable
 * attention_backward.cl (no atomics; every sum in one fixed order), with its two main kernels'
 * products as mma.sync m16n8k16 (F16 or BF16 inputs, FP32 accumulation). With
 * attention_backward_rows.cl (delta = rowsum(dO * O)), two kernels:
 *
 *  attention_backward_dkdv  DKDV_BLOCK_N keys of one KV head per work-group, 16 keys per warp:
 *      the warp keeps its keys' K and V rows as mma A fragments and the dK, dV accumulators in
 *      registers, and walks the query heads of the group and the query tiles (DKDV_BLOCK_M rows
 *      of Q and dO, with their LSE and delta, in a two-stage local ring filled by cp.async) that
 *      can see its keys: S^T = K Q^T, dP^T = V dO^T, P^T = exp(S^T - LSE),
 *      dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q.
 *  attention_backward_dq    DQ_BLOCK_M query rows of one head per work-group, 16 per warp: Q and
 *      dO as A fragments and the dQ accumulator in registers; key tiles (DQ_BLOCK_N keys of K
 *      and V in a two-stage ring) as in the forward: S = Q K^T, dP = dO V^T, dQ += dS K.
 *
 * P enters dV = P^T dO and dS enters dK and dQ rounded to the storage dtype (as in
 * FlashAttention). Tiles whose sums run over rows (query tiles of dkdv, key tiles of dq) sit on
 * a grid from the sequence's first row of Q or K (varlen: each sequence's own, so no partial tile
 * comes before it and its gradients do not depend on its place in the packing; packed: from the
 * block's first visible row or key where that saves a tile, BACKWARD_FIRST_TILE); keys or rows a
 * product cannot see contribute exact zeros. No chunking: the host takes this path only
 * on devices without a loop cap (item_lo, item_hi, load_state, save_state, state and scores are unused).
 *
 * Where a warp's fragments and accumulators outgrow the registers (large head dims), each kernel
 * can split its output columns over DKDV_SLICES / DQ_SLICES work-groups (the second grid
 * dimension runs over heads x slices), each of which recomputes S and dP over the whole head dim
 * and accumulates only its HEAD_DIM_PAD / slices columns of dK and dV, or of dQ. The sums are the
 * same, in the same order, whatever the slicing.
 *
 * With DS_STORED the dQ kernel does not recompute S and dP: the dK/dV kernel (its first column
 * slice) stores dS^T as FP32 at scores_index (attention_backward_rows.cl: rows of the launch's
 * key range [item_lo, item_hi]) and the dQ kernel reads it back into the layout of its S
 * accumulators; it then holds no Q or dO fragments and keeps only K tiles in its ring. As
 * in the blocked kernels, a launch pair covers a key range of whole dK/dV blocks, and the dQ
 * accumulators pass between pairs through `state` (load_state, save_state). dS then enters dQ
 * from the dK/dV kernel's S^T = K Q^T products instead of the dQ kernel's S = Q K^T, rounded the
 * same way; every sum keeps its fixed order, so runs stay bit-identical.
 *
 * Specialisation (-D): FCL_DTYPE 1 or 2; HEAD_DIM_PAD (multiple of 16); DKDV_BLOCK_N,
 * DKDV_BLOCK_M, DQ_BLOCK_M, DQ_BLOCK_N (multiples of 16); DKDV_SLICES, DQ_SLICES (dividing
 * HEAD_DIM_PAD into multiples of 16); KV_LOCAL_STEPS (0 to HEAD_DIM_PAD / 16:
 * the dK/dV kernel's K and V fragments of that many last k steps wait in local memory instead of
 * registers); ASYNC_COPY (Q, K, V and dO rows
 * 16-byte aligned); PAIRS (head_dim even and the rows of Q, K, V, dO and the gradients 4-byte
 * aligned: fragments loaded (load_a_rows, mma_nv.cl) and gradients stored two elements at a
 * time); DS_STORED (0 or 1, above); WGMMA_BACKWARD (0 or 1, below; with SWIZZLED_TILES 1);
 * HAS_SOFTCAP, HAS_MASK, HAS_ALIBI; LAYOUT.
 *
 * WGMMA_BACKWARD 1 (Hopper, sm_90a: wgmma_nv.cl before this file) runs both kernels' products as
 * wgmma products of a warpgroup instead of mma.sync per warp. The work split stays: warp w of
 * the warpgroup owns keys (dK/dV) or rows (dQ) 16 w .. 16 w + 15, and a wgmma accumulator holds
 * the same elements in the same registers as the warp's mma.sync tiles, so the gradients' code
 * is shared. K and V (dK/dV) or Q and dO (dQ) enter from registers as A fragments; the tiles of
 * the ring are stored as swizzled atoms (SWIZZLED_TILES) and read by descriptor: K-major for
 * S = Q K^T and dP = dO V^T, transposed for dV += P^T dO, dK += dS^T Q and dQ += dS K, whose A
 * is P or dS from registers. A work-group is one warpgroup: DKDV_BLOCK_N and DQ_BLOCK_M 64,
 * DKDV_BLOCK_M 32 or 64, DQ_BLOCK_N 32, HEAD_DIM_PAD 64 or 128, no column slices, no fragments in
 * local memory, DS_STORED 0. With 64-row dK/dV tiles the K and V fragments, read by every tile's
 * products, are kept live past each tile's last product (wgmma_keep_fragments): NVIDIA's ptxas
 * gave their registers to the P and dS fragments, which have their shape there, and every tile
 * after a work-group's first got wrong dK and dV (32-row tiles keep them apart without it). The
 * host runs 64-row tiles on the dense layout at padded head dim 64 (wgmma_tiles). The products
 * after the per-warp branches of the gradients follow a barrier (the warpgroup issues them as one instruction
 * stream); every A fragment of a group's products is built before the group's one fence, so no
 * register is written while a product is in flight (the dK/dV kernel's dV and dK products share
 * a fence and a group). The accumulators are held (wgmma_hold) right after each wait, and those
 * that carry sums across tiles (dK, dV, dQ) also before the fence of the products that add to
 * them. The host's default on compute capability 9.0 (src/ops/backward_launch.c, wgmma_applies).
 */

#define DKDV_WG (DKDV_BLOCK_N * 2)     /* one warp per 16 keys */
#define DQ_WG (DQ_BLOCK_M * 2)         /* one warp per 16 query rows */
/* The tiles of a block's rows or keys start on the grid of multiples of the tile from the
 * sequence's first row or key, or in the packed form where that saves a tile (FIRST_TILE); the
 * stored dS tiles are addressed on the grid. */
#if DS_STORED
#define BACKWARD_FIRST_TILE(lo, hi, n) ((lo) - (lo) % (n))
#else
#define BACKWARD_FIRST_TILE(lo, hi, n) FIRST_TILE(lo, hi, n)
#endif
#define KV_FIRST (KSTEPS - KV_LOCAL_STEPS) /* the first k step whose K, V fragments wait in local memory */
#define NT_DKDV (HEAD_DIM_PAD / DKDV_SLICES / 8) /* 8-column tiles of dK and dV per work-group */
#define NT_DQ (HEAD_DIM_PAD / DQ_SLICES / 8)     /* 8-column tiles of dQ per work-group */
#ifndef WGMMA_BACKWARD
#define WGMMA_BACKWARD 0
#endif
#if WGMMA_BACKWARD &&                                                                              \
    (DKDV_BLOCK_N != 64 || DQ_BLOCK_M != 64 || (DKDV_BLOCK_M != 32 && DKDV_BLOCK_M != 64) || DQ_BLOCK_N != 32 || \
     (HEAD_DIM_PAD != 64 && HEAD_DIM_PAD != 128) || KV_LOCAL_STEPS || DKDV_SLICES != 1 || DQ_SLICES != 1 ||      \
     DS_STORED || !SWIZZLED_TILES)
#error "WGMMA_BACKWARD: unsupported tiles"
#endif

/* The ldmatrix address of this lane for B operands taken from the rows of a local tile (B[k][n]
 * = tile[n][k]: n the tile's rows, k its columns): row (lane & 7) + 8 (lane / 16), column
 * 8 ((lane / 8) & 1). */
MMA_INLINE uint rows_lane(__local const ushort *tile, int lane)
{
    return opaque((uint)(size_t)(tile + ((lane >> 4) * 8 + (lane & 7)) * ROW_HALVES + ((lane >> 3) & 1) * 8));
}

/* The same for B operands taken transposed (B[k][n] = tile[k][n]): row (lane & 7) +
 * 8 ((lane / 8) & 1), column 8 (lane / 16). */
MMA_INLINE uint cols_lane(__local const ushort *tile, int lane)
{
    return opaque((uint)(size_t)(tile + (((lane >> 3) & 1) * 8 + (lane & 7)) * ROW_HALVES + (lane >> 4) * 8));
}

/* acc[0 .. n_tiles) = A x tile^T: A the 16 x HEAD_DIM_PAD rows in fragments af (k steps from
 * `first` on in local memory: stash_fragments, mma_nv.cl), tile the n_tiles * 8 local rows
 * addressed through `lane_addr` (rows_lane). */
MMA_INLINE void mma_rows_tile(float (*acc)[4], uint (*af)[4], __local const uint4 *stash, int first, int lid,
                              uint lane_addr, int n_tiles)
{
    #pragma unroll
    for (int nt = 0; nt < n_tiles; nt++)
        #pragma unroll
        for (int e = 0; e < 4; e++)
            acc[nt][e] = 0.0f;
    #pragma unroll
    for (int ks = 0; ks < KSTEPS; ks++) {
        uint a[4];
        fragment_at(a, af, stash, ks, first, DKDV_WG, lid);
        #pragma unroll
        for (int np = 0; np < n_tiles / 2; np++) {
            uint bf[4]; /* rows +0 / +8 of this 16-row pair x columns +0 / +8 of this k step */
            ldmatrix_x4(bf, lane_addr + 2 * (np * 16 * ROW_HALVES + ks * 16));
            mma_16816(acc[2 * np], a, bf[0], bf[1]);
            mma_16816(acc[2 * np + 1], a, bf[2], bf[3]);
        }
    }
}

/* The A fragment of k rows 16 kk .. 16 kk + 15 of X, the accumulator tiles x (tiles 2 kk and
 * 2 kk + 1), into xa rounded to the storage dtype. */
MMA_INLINE void scores_fragment(uint *xa, float (*x)[4], int kk)
{
    #pragma unroll
    for (int e = 0; e < 4; e++)
        xa[e] = pack_pair(x[2 * kk + (e >> 1)][2 * (e & 1)], x[2 * kk + (e >> 1)][2 * (e & 1) + 1]);
}

/* acc[0 .. n_out) += X x tile: X the 16 x k_rows accumulator tiles x (tiles 2 kk and 2 kk + 1
 * form the A fragment of k rows 16 kk .. 16 kk + 15), tile the k_rows x 8 n_out local columns
 * addressed through `lane_addr` (cols_lane at the first column). X enters rounded to the
 * storage dtype. */
MMA_INLINE void mma_scores_tile(float (*acc)[4], float (*x)[4], uint lane_addr, int k_rows, int n_out)
{
    #pragma unroll
    for (int kk = 0; kk < k_rows / 16; kk++) {
        uint xa[4];
        scores_fragment(xa, x, kk);
        #pragma unroll
        for (int dp = 0; dp < n_out / 2; dp++) {
            uint bf[4]; /* rows +0 / +8 of this k step x columns +0 / +8 of this 16-column pair */
            ldmatrix_x4_trans(bf, lane_addr + 2 * (kk * 16 * ROW_HALVES + dp * 16));
            mma_16816(acc[2 * dp], xa, bf[0], bf[1]);
            mma_16816(acc[2 * dp + 1], xa, bf[2], bf[3]);
        }
    }
}

#if WGMMA_BACKWARD
/* acc (the warpgroup's 64 x n accumulators, n 32 or 64) = A x tile^T: A the 64 x HEAD_DIM_PAD
 * rows in this work-item's fragments af, tile n K-major rows of swizzled atoms at local address
 * addr. Issued inside the caller's fence and group, not waited for. */
MMA_INLINE void wgmma_rows_tile(float *acc, uint (*af)[4], uint addr, int n)
{
    #pragma unroll
    for (int ks = 0; ks < KSTEPS; ks++) {
        const ulong b = STEP_DESC(addr, n * 64, ks);
        if (n == 64)
            wgmma_rsk_n64(acc, af[ks], b, ks > 0);
        else
            wgmma_rsk_n32(acc, af[ks], b, ks > 0);
    }
}

/* The A fragments xa of k_rows / 16 k steps of X x tile: X the 64 x k_rows accumulator tiles x,
 * rounded as in mma_scores_tile. */
MMA_INLINE void wgmma_scores_fragments(uint (*xa)[4], float (*x)[4], int k_rows)
{
    #pragma unroll
    for (int kk = 0; kk < k_rows / 16; kk++)
        scores_fragment(xa[kk], x, kk);
}

/* acc (the warpgroup's 64 x HEAD_DIM_PAD accumulators) += X x tile: X's A fragments xa
 * (wgmma_scores_fragments), tile k_rows rows of swizzled atoms at local address addr read as the
 * transposed B operand. Issued inside the caller's fence and group, not waited for. */
MMA_INLINE void wgmma_scores_tile(float *acc, uint (*xa)[4], uint addr, int k_rows)
{
    #pragma unroll
    for (int kk = 0; kk < k_rows / 16; kk++)
        WGMMA_RS_N(HEAD_DIM_PAD)(acc, xa[kk], ROWS_STEP_DESC(addr, k_rows * 64, kk));
}
#endif

/* s = A1 x tile1^T and dp = A2 x tile2^T over the head dim, the n rows of each local tile: S and
 * dP (dQ kernel: Q and dO fragments against K and V tiles) or S^T and dP^T (dK/dV kernel: K and V
 * fragments against Q and dO tiles). The fragments a1, a2 of k steps from `first` on wait in
 * local memory at stash1, stash2 (stash_fragments; mma.sync form only). Done on return. */
MMA_INLINE void scores_products(float (*s)[4], float (*dp)[4], uint (*a1)[4], uint (*a2)[4],
                                __local const uint4 *stash1, __local const uint4 *stash2, int first, int lid,
                                __local const ushort *tile1, __local const ushort *tile2, int n)
{
#if WGMMA_BACKWARD
    (void)stash1, (void)stash2, (void)first, (void)lid;
    wgmma_fence();
    wgmma_rows_tile(&s[0][0], a1, local_address(tile1), n);
    wgmma_rows_tile(&dp[0][0], a2, local_address(tile2), n);
    wgmma_commit();
    wgmma_wait_all();
    wgmma_hold(&s[0][0], n / 2);
    wgmma_hold(&dp[0][0], n / 2);
#else
    mma_rows_tile(s, a1, stash1, first, lid, rows_lane(tile1, lid & 31), n / 8);
    mma_rows_tile(dp, a2, stash2, first, lid, rows_lane(tile2, lid & 31), n / 8);
#endif
}

/* One (row, key) pair: its probability P into *pr and, returned, dS = P (dp - delta) (times
 * d(capped)/d(raw) with softcap), both 0 when not visible; x is the raw product q.k, lse2 the
 * row's LSE in log2 units. */
MMA_INLINE float grad_score(float x, float dp, float lse2, float dlt, float scale, float softcap, float slope, int pos,
                        int j, bool visible, float *pr)
{
#if HAS_LOGIT_MODS
    float dcap;
    x = backward_score(x, scale, softcap, slope, pos, j, &dcap);
    const float p = exp2_ftz(fma(x, FCL_LOG2E, -lse2));
#else
    const float dcap = 1.0f;
    const float p = exp2_ftz(fma(x, scale * FCL_LOG2E, -lse2));
#endif
    *pr = visible ? p : 0.0f;
    return visible ? p * (dp - dlt) * dcap : 0.0f;
}

/* The packed form's dK/dV tiles may skip the visibility checks (rows_hold_keys) at padded D 64 to
 * 128: H100, one round, F16 H 16 (history "v0.38.0"): 64 sequences of up to 512 1.20x (D 64) and
 * 1.09x (D 128) faster, 512 of up to 128 1.03x and 0.98x; at D 32 the same 1.03x and 0.93x. Past
 * 128 (where dS may be stored) no GPU run has tested it. */
#define DKDV_PACKED_FAST (LAYOUT == 2 && HEAD_DIM_PAD >= 64 && HEAD_DIM_PAD <= 128)

/* Whether every row of a dK/dV query tile holds the warp's keys jw .. jw + 15 in its own sequence
 * (packed: a vote over the rows' bounds lo, hi in local memory; the other layouts have none).
 * Called by every lane of the warp. */
MMA_INLINE bool rows_hold_keys(__local const int *lo, __local const int *hi, int jw, int lane)
{
#if LAYOUT == 2
    bool in = true;
    for (int m = lane; m < DKDV_BLOCK_M; m += 32)
        in = in && lo[m] <= jw && hi[m] >= jw + 16;
    return warp_all(in);
#else
    (void)lo, (void)hi, (void)jw, (void)lane;
    return true;
#endif
}

/* The dK/dV kernel's tile, this lane's pairs (key jw + g + 8 hr, query row i0 + m, m = nt * 8 +
 * 2 t + c): S^T in s becomes P^T, dP^T in dp becomes dS^T. `check` tests each pair's
 * visibility; without it the caller knows that every row of the tile sees every key of the warp. */
MMA_INLINE void dkdv_tile_grads(float (*s)[4], float (*dp)[4], const bool check, __local const float *lse,
                                __local const float *dlt, __local const int *lo, __local const int *hi,
                                const bool *key_on, int jw, int i0, int shift, int window_left, int window_right,
                                float scale, float softcap, float slope, int g, int t)
{
    #pragma unroll
    for (int nt = 0; nt < DKDV_BLOCK_M / 8; nt++)
        #pragma unroll
        for (int c = 0; c < 2; c++) {
            const int m = nt * 8 + 2 * t + c, p = i0 + m + shift;
            const float lse2 = lse[m], d = dlt[m];
            #pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const int j = jw + g + 8 * hr;
                bool visible = true;
                if (check) {
                    visible = key_on[hr] && lse2 != -INFINITY && (window_left < 0 || j >= sub_sat(p, window_left)) &&
                              (window_right < 0 || j <= add_sat(p, window_right));
#if LAYOUT == 2
                    visible = visible && j >= lo[m] && j < hi[m];
#endif
                }
                float pr;
                const float ds = grad_score(s[nt][2 * hr + c], dp[nt][2 * hr + c], lse2, d, scale, softcap, slope, p,
                                            j, visible, &pr);
                s[nt][2 * hr + c] = pr;
                dp[nt][2 * hr + c] = ds;
            }
        }
}

/* The dQ kernel's tile, this lane's pairs (row iw + g + 8 hr, key jt + n, n = nt * 8 + 2 t + c):
 * S in s becomes dS (dp holds dP). `check` tests each pair's visibility; without it the caller
 * knows that every row of the warp sees every key of the tile. */
MMA_INLINE void dq_tile_grads(float (*s)[4], float (*dp)[4], const bool check, __local const float *ms,
                              const float *lse2, const float *dlt, const int *jlo, const int *jhi, int iw, int jt,
                              int shift, float scale, float softcap, float slope, int g, int t)
{
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int p = iw + g + 8 * hr + shift;
        #pragma unroll
        for (int nt = 0; nt < DQ_BLOCK_N / 8; nt++)
            #pragma unroll
            for (int c = 0; c < 2; c++) {
                const int n = nt * 8 + 2 * t + c, j = jt + n;
                bool visible = true;
                if (check) {
                    visible = j >= jlo[hr] && j <= jhi[hr];
#if HAS_MASK
                    visible = visible && ms[n] > 0.5f;
#endif
                }
                float pr;
                s[nt][2 * hr + c] = grad_score(s[nt][2 * hr + c], dp[nt][2 * hr + c], lse2[hr], dlt[hr], scale,
                                               softcap, slope, p, j, visible, &pr);
            }
    }
}

/* The gradient rows row0 + g (+ 8) of this lane: acc (n_out 8-column tiles from column col0) *
 * mul, columns below head_dim, rows below n_rows. */
MMA_INLINE void store_rows(__global store_t *dst, long base, long row_stride, int row0, int n_rows, int head_dim,
                           int col0, int n_out, float (*acc)[4], float mul, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int r = row0 + g + 8 * hr;
        if (r < 0 || r >= n_rows)
            continue;
        #pragma unroll
        for (int nt = 0; nt < n_out; nt++) {
            const int d = col0 + nt * 8 + 2 * t;
            store_pair(dst, base + (long)r * row_stride + d, d, head_dim, acc[nt][2 * hr] * mul,
                       acc[nt][2 * hr + 1] * mul);
        }
    }
}

/* The dK/dV kernel's dS^T tile (this lane's pairs of dkdv_tile_grads: keys jw + g + 8 hr, rows
 * i0 + nt * 8 + 2 t + c) into `scores`, keys up to j_last and rows in [0, i_last]. */
MMA_INLINE void store_scores(__global float *scores, int b, int h, int Hq, int i0, int jw, int i_last, int j_last,
                             int lo, int hi, int sq_arg, float (*ds)[4], int g, int t)
{
    const long pitch = scores_pitch(lo, hi);
    __global float *const key0 = scores + scores_index(b, h, Hq, 0, jw + g, lo, hi, sq_arg); /* row 0, key jw + g */
    #pragma unroll
    for (int nt = 0; nt < DKDV_BLOCK_M / 8; nt++)
        #pragma unroll
        for (int c = 0; c < 2; c++) {
            const int i = i0 + nt * 8 + 2 * t + c;
            if (i < 0 || i > i_last)
                continue;
            #pragma unroll
            for (int hr = 0; hr < 2; hr++)
                if (jw + g + 8 * hr <= j_last)
                    key0[i * pitch + 8 * hr] = ds[nt][2 * hr + c];
        }
}

/* The dQ kernel's dS tile from `scores` into the layout of its S accumulators (this lane's
 * pairs of dq_tile_grads: rows iw + g + 8 hr, keys jt + nt * 8 + 2 t + c), 0 where the row does
 * not see the key ([jlo, jhi]: pairs the dK/dV kernel may not have visited) or past j_hi. */
MMA_INLINE void load_scores(__global const float *scores, int b, int h, int Hq, int iw, int jt, int j_hi,
                            const int *jlo, const int *jhi, int lo, int hi, int sq_arg, float (*ds)[4], int g, int t)
{
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        __global const float *const row = scores + scores_index(b, h, Hq, iw + g + 8 * hr, jt + 2 * t, lo, hi, sq_arg);
        #pragma unroll
        for (int nt = 0; nt < DQ_BLOCK_N / 8; nt++)
            #pragma unroll
            for (int c = 0; c < 2; c++) {
                const int j = jt + nt * 8 + 2 * t + c;
                ds[nt][2 * hr + c] = j <= j_hi && j >= jlo[hr] && j <= jhi[hr] ? row[nt * 8 + c] : 0.0f;
            }
    }
}

/* Starts the copies of query rows i0 .. i0 + DKDV_BLOCK_M - 1 of one head's Q and dO (rows
 * outside [0, sq) zeros) into one stage of the dK/dV kernel's ring. */
MMA_INLINE void issue_query_tile(__local ushort *Qst, __local ushort *dOst, int lid, __global const ushort *Qu,
                                 __global const ushort *dOu, long qbase, long q_ss, long dobase, long do_ss, int i0,
                                 int sq, int head_dim, __global const float *mask)
{
    load_rows(Qst, TILE_PITCH(DKDV_BLOCK_M), DKDV_BLOCK_M, HEAD_DIM_PAD, DKDV_WG, lid, Qu, qbase, q_ss, i0, 0,
              sq - 1, head_dim, 0, mask, 0, 0);
    load_rows(dOst, TILE_PITCH(DKDV_BLOCK_M), DKDV_BLOCK_M, HEAD_DIM_PAD, DKDV_WG, lid, dOu, dobase, do_ss, i0, 0,
              sq - 1, head_dim, 0, mask, 0, 0);
}

__kernel __attribute__((reqd_work_group_size(DKDV_WG, 1, 1)))
void attention_backward_dkdv(BACKWARD_ARGS)
{
    __local ushort Qs[2][TILE_HALVES(DKDV_BLOCK_M)] __attribute__((aligned(TILE_ALIGN)));
    __local ushort dOs[2][TILE_HALVES(DKDV_BLOCK_M)] __attribute__((aligned(TILE_ALIGN)));
    __local float lse_s[2][DKDV_BLOCK_M], delta_s[2][DKDV_BLOCK_M]; /* LSE in log2 units */
    __local int lo_s[2][LAYOUT == 2 ? DKDV_BLOCK_M : 1], hi_s[2][LAYOUT == 2 ? DKDV_BLOCK_M : 1]; /* packed only */
    __global const ushort *Qu = (__global const ushort *)Q;
    __global const ushort *dOu = (__global const ushort *)dO;
    const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
    const int g = lane >> 2, t = lane & 3;
    int key_block, hs, b; /* earlier key blocks are seen by more rows (causal): they start first */
    fcl_group_order(0, &key_block, &hs, &b);
#if DS_STORED
    key_block += item_lo / DKDV_BLOCK_N; /* the launch's first key block */
#endif
    const int hk = hs / DKDV_SLICES, col0 = hs % DKDV_SLICES * (NT_DKDV * 8); /* KV head, first column */
    const int j0 = key_block * DKDV_BLOCK_N;
    const int Hq = get_global_size(1) / DKDV_SLICES * group;
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
    const int shift = r.sk - r.sq; /* query i sits at absolute position i + shift */
    const int j_last = min(j0 + DKDV_BLOCK_N, r.sk) - 1;

    int i_lo, i_hi; /* the query rows that may see some key of this block (before masks) */
    keys_rows(j0, j_last, r.sq, shift, window_left, window_right, cu_q, cu_q_off, seq_ss, &i_lo, &i_hi);

    /* This lane's keys jw + g and jw + g + 8: K and V fragments, and whether each takes part. */
    const int jw = j0 + warp * 16;
    const long kbase = k_off + b * k_sb + (long)r.k_first * k_ss + hk * k_sh;
    const long vbase = v_off + b * v_sb + (long)r.k_first * v_ss + hk * v_sh;
    uint kf[KSTEPS][4], vf[KSTEPS][4];
    load_a_rows(kf, (__global const ushort *)K, kbase, k_ss, jw, r.sk, head_dim, lane);
    load_a_rows(vf, (__global const ushort *)V, vbase, v_ss, jw, r.sk, head_dim, lane);
#if KV_LOCAL_STEPS /* the last k steps' fragments wait in local memory (registers) */
    __local uint4 KVs[2][KV_LOCAL_STEPS][DKDV_WG];
    stash_fragments(&KVs[0][0][0], kf, KV_FIRST, DKDV_WG, lid);
    stash_fragments(&KVs[1][0][0], vf, KV_FIRST, DKDV_WG, lid);
#define KV_STASH(x) &KVs[x][0][0]
#else
#define KV_STASH(x) 0
#endif
    bool key_on[2];
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int j = jw + g + 8 * hr;
        key_on[hr] = j < r.sk;
#if HAS_MASK
        key_on[hr] = key_on[hr] && mask[mask_off + b * mask_sb + (long)(r.k_first + j) * mask_ss] > 0.5f;
#endif
    }
    /* every key of the warp takes part */
    const bool keys_on = (LAYOUT != 2 || DKDV_PACKED_FAST) && warp_all(key_on[0] && key_on[1]);
    float dk[NT_DKDV][4], dv[NT_DKDV][4];
    #pragma unroll
    for (int nt = 0; nt < NT_DKDV; nt++)
        #pragma unroll
        for (int e = 0; e < 4; e++)
            dk[nt][e] = dv[nt][e] = 0.0f;

    /* Query tiles from the sequence's first row (BACKWARD_FIRST_TILE); items = (query head of the
     * group, tile). */
    const int qt0 = BACKWARD_FIRST_TILE(i_lo, i_hi, DKDV_BLOCK_M);
    const int n_qt = i_lo <= i_hi ? (i_hi - qt0) / DKDV_BLOCK_M + 1 : 0;
    const int n_items = group * n_qt;
    const long qbase = q_off + b * q_sb + (long)r.q_first * q_ss, dobase = do_off + b * do_sb + (long)r.q_first * do_ss;
    for (int it = 0; it < 2; it++) {
        if (it < n_items)
            issue_query_tile(Qs[it], dOs[it], lid, Qu, dOu, qbase + (hk * group + it / n_qt) * q_sh, q_ss,
                             dobase + (hk * group + it / n_qt) * do_sh, do_ss, qt0 + (it % n_qt) * DKDV_BLOCK_M, r.sq,
                             head_dim, mask);
        commit_copies();
    }
    for (int item = 0; item < n_items; item++) {
        const int st = item & 1, h = hk * group + item / n_qt, i0 = qt0 + (item % n_qt) * DKDV_BLOCK_M;
        /* this stage's row values (plain stores: the barrier below publishes them) */
        for (int m = lid; m < DKDV_BLOCK_M; m += DKDV_WG) {
            const int i = i0 + m;
            const bool in = i >= 0 && i < r.sq;
            const long row = (long)(r.q_first + clamp(i, 0, max(r.sq - 1, 0)));
            lse_s[st][m] = in ? LSE[lse_off + b * lse_sb + h * lse_sh + row * lse_ss] * FCL_LOG2E : -INFINITY;
            delta_s[st][m] = in ? delta[scratch_row(b, h, Hq, i, r.q_first, sq_arg, total_q)] : 0.0f;
#if LAYOUT == 2
            lo_s[st][m] = in ? packed_lo(cu_q, cu_q_off, seq_ss, i, r.sq) : 0;
            hi_s[st][m] = in ? packed_hi(cu_q, cu_q_off, seq_ss, i, r.sq) : 0;
#endif
        }
        copies_landed(item + 1 == n_items);
        const float slope = HEAD_SLOPE(h);
        float s[DKDV_BLOCK_M / 8][4], dp[DKDV_BLOCK_M / 8][4];
        scores_products(s, dp, kf, vf, KV_STASH(0), KV_STASH(1), KV_FIRST, lid, Qs[st], dOs[st], DKDV_BLOCK_M);
        /* Tiles whose rows all lie in [0, sq) and see all of the warp's keys (which then give
         * them a finite LSE; packed: inside their own sequences) skip the visibility checks (a
         * warp-uniform branch). */
        const int p_first = i0 + shift, p_last = i0 + DKDV_BLOCK_M - 1 + shift;
        const bool keys_held = keys_on && rows_hold_keys(lo_s[st], hi_s[st], jw, lane);
        if (keys_held && i0 >= 0 && i0 + DKDV_BLOCK_M <= r.sq && (window_left < 0 || jw >= sub_sat(p_last, window_left)) &&
            (window_right < 0 || jw + 15 <= add_sat(p_first, window_right)))
            dkdv_tile_grads(s, dp, 0, lse_s[st], delta_s[st], lo_s[st], hi_s[st], key_on, jw, i0, shift,
                            window_left, window_right, scale, softcap, slope, g, t);
        else
            dkdv_tile_grads(s, dp, 1, lse_s[st], delta_s[st], lo_s[st], hi_s[st], key_on, jw, i0, shift,
                            window_left, window_right, scale, softcap, slope, g, t);
#if DS_STORED
        if (col0 == 0) /* one column slice stores dS */
            store_scores(scores, b, h, Hq, i0, jw, min(i0 + DKDV_BLOCK_M, r.sq) - 1, j_last, item_lo, item_hi, sq_arg,
                         dp, g, t);
#endif
#if WGMMA_BACKWARD
        uint pa[DKDV_BLOCK_M / 16][4], da[DKDV_BLOCK_M / 16][4];
        wgmma_scores_fragments(pa, s, DKDV_BLOCK_M);
        wgmma_scores_fragments(da, dp, DKDV_BLOCK_M);
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp out of the branch above: one wgmma stream */
        wgmma_hold(&dv[0][0], NT_DKDV * 4);
        wgmma_hold(&dk[0][0], NT_DKDV * 4);
        wgmma_fence();
        wgmma_scores_tile(&dv[0][0], pa, local_address(dOs[st]), DKDV_BLOCK_M);
        wgmma_scores_tile(&dk[0][0], da, local_address(Qs[st]), DKDV_BLOCK_M);
        wgmma_commit();
        wgmma_wait_all();
        wgmma_hold(&dv[0][0], NT_DKDV * 4);
        wgmma_hold(&dk[0][0], NT_DKDV * 4);
#if DKDV_BLOCK_M == 64 /* four k steps of P and dS, the K and V fragments' shape (above) */
        const uint hidden_zero = (uint)head_dim >> 31; /* head_dim >= 1 */
        wgmma_keep_fragments(kf, KSTEPS, hidden_zero); /* read again by the next tile's products */
        wgmma_keep_fragments(vf, KSTEPS, hidden_zero);
#endif
#else
        mma_scores_tile(dv, s, cols_lane(dOs[st] + col0, lane), DKDV_BLOCK_M, NT_DKDV);
        mma_scores_tile(dk, dp, cols_lane(Qs[st] + col0, lane), DKDV_BLOCK_M, NT_DKDV);
#endif

        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with this stage: refill it */
        if (item + 2 < n_items) {
            const int h2 = hk * group + (item + 2) / n_qt;
            issue_query_tile(Qs[st], dOs[st], lid, Qu, dOu, qbase + h2 * q_sh, q_ss, dobase + h2 * do_sh, do_ss,
                             qt0 + ((item + 2) % n_qt) * DKDV_BLOCK_M, r.sq, head_dim, mask);
        }
        commit_copies();
    }

    store_rows(dK, dk_off + b * dk_sb + (long)r.k_first * dk_ss + hk * dk_sh, dk_ss, jw, r.sk, head_dim, col0,
               NT_DKDV, dk, scale, lane);
    store_rows(dV, dv_off + b * dv_sb + (long)r.k_first * dv_ss + hk * dv_sh, dv_ss, jw, r.sk, head_dim, col0,
               NT_DKDV, dv, 1.0f, lane);
}

/* This lane's dQ accumulators (rows iw + g + 8 hr below the sequence's rows, columns col0 +
 * nt * 8 + 2 t + c) from the FP32 `state` (scratch_row rows of HEAD_DIM_PAD), or into it with
 * `save`. */
MMA_INLINE void dq_state(__global float *state, int b, int h, int Hq, int iw, seq_rows r, int sq_arg, int total_q,
                         int col0, float (*dq)[4], int lane, int save)
{
    const int g = lane >> 2, t = lane & 3;
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int i = iw + g + 8 * hr;
        if (i >= r.sq)
            continue;
        __global float *row = state + scratch_row(b, h, Hq, i, r.q_first, sq_arg, total_q) * HEAD_DIM_PAD + col0;
        #pragma unroll
        for (int nt = 0; nt < NT_DQ; nt++)
            #pragma unroll
            for (int c = 0; c < 2; c++) {
                if (save)
                    row[nt * 8 + 2 * t + c] = dq[nt][2 * hr + c];
                else
                    dq[nt][2 * hr + c] = row[nt * 8 + 2 * t + c];
            }
    }
}

__kernel __attribute__((reqd_work_group_size(DQ_WG, 1, 1)))
void attention_backward_dq(BACKWARD_ARGS)
{
#if DS_STORED
    __local ushort Ks[2][DQ_BLOCK_N * ROW_HALVES] __attribute__((aligned(16))); /* key tile t: stage t % 2 */
#else
    KV_RING(DQ_BLOCK_N); /* key tile t lives in stage t % 2 */
    __global const ushort *Vu = (__global const ushort *)V;
#endif
    __global const ushort *Ku = (__global const ushort *)K;
    const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
    const int g = lane >> 2, t = lane & 3;
    int row_block, hs, b; /* later row blocks see more keys (causal): they start first */
    fcl_group_order(1, &row_block, &hs, &b);
    const int h = hs / DQ_SLICES, col0 = hs % DQ_SLICES * (NT_DQ * 8); /* query head, first column */
    const int i0 = row_block * DQ_BLOCK_M, iw = i0 + warp * 16, hk = h / group;
    const seq_rows r = sequence_rows(b, cu_q, cu_k, cu_q_off, cu_k_off, sq_arg, sk_arg, total_q, total_k);
    const int shift = r.sk - r.sq;
    const int i_last = min(i0 + DQ_BLOCK_M, r.sq) - 1;

    int j_lo, j_hi; /* the keys that some row of this block may see (before the mask) */
    rows_keys(i0, i_last, r.sk, shift, window_left, window_right, cu_q, cu_q_off, seq_ss, &j_lo, &j_hi);
#if DS_STORED
    j_lo = max(j_lo, item_lo); /* the launch's keys */
    j_hi = min(j_hi, item_hi);
#endif

    /* This lane's rows iw + g and iw + g + 8: Q and dO fragments (recomputing S and dP), LSE
     * (log2 units), delta, and the keys [jlo, jhi] each sees before the mask (empty for rows past
     * sq or with LSE -inf). */
#if !DS_STORED
    const long qbase = q_off + b * q_sb + (long)r.q_first * q_ss + h * q_sh;
    const long dobase = do_off + b * do_sb + (long)r.q_first * do_ss + h * do_sh;
    uint qf[KSTEPS][4], of[KSTEPS][4];
    load_a_rows(qf, (__global const ushort *)Q, qbase, q_ss, iw, r.sq, head_dim, lane);
    load_a_rows(of, (__global const ushort *)dO, dobase, do_ss, iw, r.sq, head_dim, lane);
#endif
    float lse2[2], dlt[2];
    int jlo[2], jhi[2];
    int lo_max = INT_MIN, hi_min = INT_MAX; /* the keys that all of this lane's rows see */
    #pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int i = iw + g + 8 * hr, p = i + shift;
        const bool own = i < r.sq;
        const long row = (long)(r.q_first + min(i, max(r.sq - 1, 0)));
        lse2[hr] = own ? LSE[lse_off + b * lse_sb + h * lse_sh + row * lse_ss] * FCL_LOG2E : -INFINITY;
        dlt[hr] = own ? delta[scratch_row(b, h, get_global_size(1) / DQ_SLICES, i, r.q_first, sq_arg, total_q)] : 0.0f;
        jlo[hr] = max(j_lo, window_left >= 0 ? sub_sat(p, window_left) : 0);
        jhi[hr] = own && lse2[hr] != -INFINITY ? min(j_hi, window_right >= 0 ? add_sat(p, window_right) : r.sk - 1) : -1;
#if LAYOUT == 2
        if (own) {
            jlo[hr] = max(jlo[hr], packed_lo(cu_q, cu_q_off, seq_ss, i, r.sk));
            jhi[hr] = min(jhi[hr], packed_hi(cu_q, cu_q_off, seq_ss, i, r.sk) - 1);
        }
#endif
        lo_max = max(lo_max, jlo[hr]);
        hi_min = min(hi_min, jhi[hr]);
    }
    const float slope = HEAD_SLOPE(h);
    float dq[NT_DQ][4];
    #pragma unroll
    for (int nt = 0; nt < NT_DQ; nt++)
        #pragma unroll
        for (int e = 0; e < 4; e++)
            dq[nt][e] = 0.0f;
#if DS_STORED
    const int Hq = get_global_size(1) / DQ_SLICES;
    if (load_state) /* the earlier key ranges' sums */
        dq_state(state, b, h, Hq, iw, r, sq_arg, total_q, col0, dq, lane, 0);
#endif

    /* Key tiles from the sequence's first key (BACKWARD_FIRST_TILE); masked-out keys' K and V are
     * never read. */
    const long kbase = k_off + b * k_sb + (long)r.k_first * k_ss + hk * k_sh;
    const long mrow = mask_off + b * mask_sb + (long)r.k_first * mask_ss;
    const int j_first = BACKWARD_FIRST_TILE(j_lo, j_hi, DQ_BLOCK_N);
    const int n_tiles = j_lo <= j_hi ? (j_hi - j_first) / DQ_BLOCK_N + 1 : 0;
#if DS_STORED
    for (int tt = 0; tt < 2; tt++) {
        if (tt < n_tiles)
            load_rows(Ks[tt], ROW_HALVES, DQ_BLOCK_N, HEAD_DIM_PAD, DQ_WG, lid, Ku, kbase, k_ss,
                      j_first + tt * DQ_BLOCK_N, j_lo, j_hi, head_dim, HAS_MASK, mask, mrow, mask_ss);
        commit_copies();
    }
    float s[DQ_BLOCK_N / 8][4]; /* a tile's dS, loaded one tile ahead */
    if (n_tiles > 0)
        load_scores(scores, b, h, Hq, iw, j_first, j_hi, jlo, jhi, item_lo, item_hi, sq_arg, s, g, t);
    for (int tile = 0; tile < n_tiles; tile++) {
        const int jt = j_first + tile * DQ_BLOCK_N, st = tile & 1;
        copies_landed(tile + 1 == n_tiles);
        mma_scores_tile(dq, s, cols_lane(Ks[st] + col0, lane), DQ_BLOCK_N, NT_DQ);
        if (tile + 1 < n_tiles)
            load_scores(scores, b, h, Hq, iw, jt + DQ_BLOCK_N, j_hi, jlo, jhi, item_lo, item_hi, sq_arg, s, g, t);

        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with this stage: refill it */
        if (tile + 2 < n_tiles)
            load_rows(Ks[st], ROW_HALVES, DQ_BLOCK_N, HEAD_DIM_PAD, DQ_WG, lid, Ku, kbase, k_ss, jt + 2 * DQ_BLOCK_N,
                      j_lo, j_hi, head_dim, HAS_MASK, mask, mrow, mask_ss);
        commit_copies();
    }
    if (save_state) { /* a later key range adds its sums */
        dq_state(state, b, h, Hq, iw, r, sq_arg, total_q, col0, dq, lane, 1);
        return;
    }
#else
    const long vbase = v_off + b * v_sb + (long)r.k_first * v_ss + hk * v_sh;
    for (int tt = 0; tt < 2; tt++) {
        if (tt < n_tiles)
            issue_kv_tile(Ks[tt], Vs[tt], MASK_STAGE(tt), DQ_BLOCK_N, TILE_PITCH(DQ_BLOCK_N), HEAD_DIM_PAD, DQ_WG,
                          lid, Ku, Vu, kbase, vbase, k_ss, v_ss, j_first + tt * DQ_BLOCK_N, j_lo, j_hi, head_dim, 1,
                          mask, mrow, mask_ss);
        commit_copies();
    }
    for (int tile = 0; tile < n_tiles; tile++) {
        const int jt = j_first + tile * DQ_BLOCK_N, st = tile & 1;
        copies_landed(tile + 1 == n_tiles);
        float s[DQ_BLOCK_N / 8][4], dp[DQ_BLOCK_N / 8][4];
        scores_products(s, dp, qf, of, 0, 0, KSTEPS, lid, Ks[st], Vs[st], DQ_BLOCK_N);
        /* tiles that every row of the warp sees whole skip the checks (a warp-uniform branch) */
        if (!HAS_MASK && warp_all(jt >= lo_max && jt + DQ_BLOCK_N - 1 <= hi_min))
            dq_tile_grads(s, dp, 0, MASK_STAGE(st), lse2, dlt, jlo, jhi, iw, jt, shift, scale, softcap, slope, g, t);
        else
            dq_tile_grads(s, dp, 1, MASK_STAGE(st), lse2, dlt, jlo, jhi, iw, jt, shift, scale, softcap, slope, g, t);
#if WGMMA_BACKWARD
        uint da[DQ_BLOCK_N / 16][4];
        wgmma_scores_fragments(da, s, DQ_BLOCK_N);
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp out of the branch above: one wgmma stream */
        wgmma_hold(&dq[0][0], NT_DQ * 4);
        wgmma_fence();
        wgmma_scores_tile(&dq[0][0], da, local_address(Ks[st]), DQ_BLOCK_N);
        wgmma_commit();
        wgmma_wait_all();
        wgmma_hold(&dq[0][0], NT_DQ * 4);
#else
        mma_scores_tile(dq, s, cols_lane(Ks[st] + col0, lane), DQ_BLOCK_N, NT_DQ);
#endif

        barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with this stage: refill it */
        if (tile + 2 < n_tiles)
            issue_kv_tile(Ks[st], Vs[st], MASK_STAGE(st), DQ_BLOCK_N, TILE_PITCH(DQ_BLOCK_N), HEAD_DIM_PAD, DQ_WG,
                          lid, Ku, Vu, kbase, vbase, k_ss, v_ss, jt + 2 * DQ_BLOCK_N, j_lo, j_hi, head_dim, 1, mask,
                          mrow, mask_ss);
        commit_copies();
    }
#endif

    store_rows(dQ, dq_off + b * dq_sb + (long)r.q_first * dq_ss + h * dq_sh, dq_ss, iw, r.sq, head_dim, col0, NT_DQ,
               dq, scale, lane);
}
